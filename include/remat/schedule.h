/* remat/schedule.h: pipeline schedules as instruction streams, the one
 * order of a stage's forwards and backwards that the pipeline runtime
 * executes and the planner's simulator times.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_SCHEDULE_H
#define REMAT_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "remat/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules; append only. Each is one row of the schedule table
 * (remat_schedule_get, src/schedule/schedule.c) and its stream generator
 * (src/schedule/streams.c): the planner, the pipeline runtime, the
 * placement, the plan files and every message ask the row. */
typedef enum {
  REMAT_SCHED_1F1B = 0,
  REMAT_SCHED_GPIPE = 1,
  REMAT_SCHED_INTERLEAVED = 2, /* interleaved 1F1B, v chunks per rank (Megatron) */
  REMAT_SCHED_ZBH1 = 3,        /* zero bubble H1: B and W apart, 1F1B's activations */
  REMAT_SCHED_ZBV = 4,         /* zero bubble V: two chunks per rank in a V */
  REMAT_SCHED_COUNT
} remat_plan_schedule;

/* Where chunk c of rank r (of p) sits in model order: its virtual stage. */
typedef enum {
  REMAT_LAYOUT_LOOP = 0, /* c p + r: the chunks go round the ranks */
  REMAT_LAYOUT_V = 1,    /* two chunks, r and 2p - 1 - r: the last rank holds the middle two */
} remat_schedule_layout;

/* Micro-batches stage s of p holds between F and B with one chunk, of m. */
typedef enum {
  REMAT_FLIGHT_DEPTH = 0, /* min(p - s, m): 1F1B's warm-up forwards and one more */
  REMAT_FLIGHT_ALL = 1,   /* m: every forward before the first backward */
} remat_schedule_flight;

/* Where the pipeline runtime runs a schedule. */
typedef enum {
  REMAT_RUNS_PIPELINE = 1, /* a pipeline of 2 or more stages without replicas */
  REMAT_RUNS_ANY = 2,      /* also one stage and beside replicas (the grid) */
} remat_schedule_runs;

typedef struct remat_schedule_streams remat_schedule_streams;

/* One schedule: everything the code asks of it. */
typedef struct remat_schedule_info {
  const char *name;        /* as --schedule, plan files and messages spell it */
  int split;               /* the backward runs as B (input gradient) and W (weights') */
  int64_t chunks_default;  /* model chunks per rank when none are asked for */
  int64_t chunks_min;      /* the chunks per rank it runs: chunks_min .. chunks_max */
  int64_t chunks_max;      /*   (0: no bound) */
  int one_chunk;           /* the schedule it is with one chunk per rank, -1 none */
  int layout;              /* remat_schedule_layout */
  int groups_of_p;         /* runs micro-batches in groups of the ranks: m a multiple of p */
  int head_from_entry;     /* the rank holding the first and the last virtual stage counts a
                            * micro-batch on the last from the first's F (its targets arrive
                            * with its tokens) */
  int flight;              /* remat_schedule_flight: with one chunk, between F and B */
  int runs;                /* remat_schedule_runs */
  /* its order in closed form (remat_schedule_op), NULL where only its
   * streams give it */
  void (*op)(int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k, int *bwd);
  /* its stream generator: fills st->ops (st->p, m, v, len set); 0 or
   * REMAT_ENOMEM */
  int (*streams)(remat_schedule_streams *st);
} remat_schedule_info;

/* The schedule's row, NULL if it is none. */
REMAT_API const remat_schedule_info *remat_schedule_get(int schedule);

/* "1f1b", "gpipe", "interleaved", "zb-h1", "zbv" ("?" if none) */
REMAT_API const char *remat_plan_schedule_name(int schedule);
REMAT_API int remat_plan_schedule_parse(const char *s, int *out); /* -1 if unknown */

/* Which schedules remat_schedule_names lists. */
typedef enum {
  REMAT_SCHEDULES_ALL = 0,
  REMAT_SCHEDULES_CHUNKED = 1, /* those that run several chunks per rank */
  REMAT_SCHEDULES_ONE_CHUNK = 2,
} remat_schedule_set;

/* The names of a set of schedules for a message, in table order, the last
 * two joined by `last` ("or", "and"): "1f1b, gpipe, interleaved, zb-h1 or
 * zbv". Written to buf (cap bytes, cut short if smaller); returns buf. */
REMAT_API const char *remat_schedule_names(char *buf, size_t cap, int set, const char *last);

/* The instruction stream of stage s of p with m micro-batches: its q-th
 * operation (q = 0 .. 2m-1) is the forward (*bwd = 0) or backward (*bwd = 1)
 * of micro-batch *k. 1F1B: min(p - s - 1, m) warm-up forwards, then one
 * forward and one backward in turn, then the remaining backwards; GPipe:
 * every forward, then every backward, both in micro-batch order. The
 * pipeline runtime executes these streams (with the receives and sends
 * around each operation) and the planner's simulator (remat_plan_simulate)
 * times them. For the schedules whose row has an order in closed form (op;
 * any other gets 1F1B's order here); every schedule's streams:
 * remat_schedule_streams_build. */
REMAT_API void remat_schedule_op(int schedule, int64_t p, int64_t m, int64_t s, int64_t q,
                                 int64_t *k, int *bwd);

/* ------------------------------------------------ streams of F, B and W */

/* Every schedule as instruction streams of operations on model chunks. The
 * model is cut into p * v consecutive pieces, the virtual stages 0 .. pv-1
 * in model order; rank r holds v of them, its chunks 0 .. v-1:
 *   1f1b, gpipe, zb-h1   v = 1, chunk 0 of rank r is virtual stage r
 *   interleaved          v >= 2, chunk c of rank r is virtual stage c p + r
 *   zbv                  v = 2, chunk 0 of rank r is virtual stage r, chunk 1
 *                        virtual stage 2p - 1 - r (a V: the last rank holds
 *                        the middle two, the first rank the ends)
 * An operation is the forward F, the backward B or the weight gradient W of
 * one micro-batch on one chunk. Schedules without W (1f1b, gpipe,
 * interleaved) run a whole backward as B; zb-h1 and zbv split it into B (the
 * input gradient, which the previous virtual stage waits for) and W (the
 * weight gradient, which waits only for its own B).
 * Dependencies: F(v, k) after F(v - 1, k); B(v, k) after B(v + 1, k), and
 * the last virtual stage's B(k) after its F(k); W(v, k) after B(v, k). */
typedef enum { REMAT_OP_F = 0, REMAT_OP_B = 1, REMAT_OP_W = 2, REMAT_OP_KIND_COUNT } remat_op_kind;

typedef struct remat_schedule_step {
  int64_t mb;    /* micro-batch */
  int32_t chunk; /* the rank's chunk, 0 .. v - 1 */
  int32_t kind;  /* remat_op_kind */
} remat_schedule_step;

struct remat_schedule_streams {
  int schedule;
  int64_t p, m, v;             /* ranks, micro-batches, chunks per rank */
  int64_t len;                 /* operations per rank: m v (2 or 3) */
  remat_schedule_step *ops;    /* (p, len) rank r's stream at ops + r len, owned */
};

/* Chunks per rank the schedule takes with `chunks` asked for: `chunks`, or
 * with 0 its row's default (2 for interleaved and zbv, 1 for the others). */
REMAT_API int64_t remat_schedule_chunks(int schedule, int64_t chunks);
/* Whether the schedule can run p ranks, m micro-batches and v chunks per
 * rank on a model of `layers` layers (0: not checked); one line otherwise:
 * v within its row's chunks (interleaved 2 or more, zbv 2, the others 1),
 * m a multiple of p where it runs groups of p (interleaved: Megatron's
 * order), and no virtual stage empty. */
REMAT_API int remat_schedule_check(int schedule, int64_t p, int64_t m, int64_t v, int64_t layers,
                                   remat_error *err);
/* The virtual stage (model order) of chunk c of rank r, and back, by the
 * row's layout. */
REMAT_API int64_t remat_schedule_virtual_stage(int schedule, int64_t p, int64_t r, int64_t c);
REMAT_API void remat_schedule_rank_of(int schedule, int64_t p, int64_t vs, int64_t *r,
                                      int64_t *c);
/* Builds every rank's stream with the row's generator (p * len at most
 * 2^24 operations; chunked schedules are checked for it by
 * remat_schedule_check too). 1f1b and
 * gpipe follow remat_schedule_op; interleaved is Megatron's order; zb-h1
 * is 1F1B's order of F and B with stage s putting off its weight gradients
 * by s micro-batches (W(k) after B(k + s)), into the drain that 1F1B leaves
 * idle; zbv is the order a greedy unit-time run gives (every F, B and W
 * one step long): each step a rank runs a ready B, else a ready forward of
 * chunk 1, else a forward of chunk 0 if a new micro-batch fits (at most 2p
 * chunk activations, those still owed a chunk-1 forward counted), else its
 * oldest W. */
REMAT_API int remat_schedule_streams_build(remat_schedule_streams *st, int schedule, int64_t p,
                                           int64_t m, int64_t v, remat_error *err);
REMAT_API void remat_schedule_streams_free(remat_schedule_streams *st);
/* Per rank and chunk ((p, v) arrays), walking the stream: the most
 * micro-batches whose F has run and whose B has not (activations in
 * flight), and the most whose B has run and whose W has not (what a
 * deferred W keeps alive; 0 without W). NULL skips one. */
REMAT_API void remat_schedule_streams_peaks(const remat_schedule_streams *st, int64_t *in_flight,
                                            int64_t *w_pending);
/* Per rank and chunk ((p, v) array): the most micro-batches whose F has run
 * and whose B has not: the slots a runtime that frees them at B holds at
 * once (a W keeps its own records, remat_schedule_streams_peaks's
 * w_pending). A chunk counts from the F of remat_schedule_counts_from's
 * chunk. */
REMAT_API void remat_schedule_streams_alive(const remat_schedule_streams *st, int64_t *alive);
/* The chunk of rank r (of p, v chunks each) whose F brings a micro-batch to
 * chunk c: c, but where the row says head_from_entry (zbv), the rank that
 * holds the first and the last virtual stage counts the last (the head)
 * from the first's F, when the micro-batch's targets arrive with its
 * tokens. */
REMAT_API int64_t remat_schedule_counts_from(int schedule, int64_t p, int64_t v, int64_t r,
                                             int64_t c);
/* Micro-batches each virtual stage (model order, p v of them) holds at
 * once, n, and keeps for a deferred W, kw: with one chunk and an order in
 * closed form, the row's flight (kw 0); otherwise from the streams
 * (remat_schedule_streams_peaks; under a split backward n counts from F to
 * B, from the chunk remat_schedule_counts_from says:
 * remat_schedule_streams_alive, as the runtime frees a slot at B).
 * The one place the planner and the placement take them from. */
REMAT_API int remat_schedule_held(int schedule, int64_t p, int64_t m, int64_t v, int64_t *n,
                                  int64_t *kw, remat_error *err);
/* A rank's slots and W records in one pool, laid out over its stream
 * (schedule/pool.c): chunk c's micro-batch k holds its slot from the F that
 * brings it to the chunk (remat_schedule_counts_from) to the chunk's B, and
 * its W record from that B to its W, both ends included; two of them alive
 * at once never share a byte. First fit in the stream's order, or, where
 * that is no smaller, the chunks' slots and records side by side (a slot k
 * mod slots, a record k mod records, as a runtime without a pool holds
 * them). The planner's figure and the runtime's pool are this one layout. */
#define REMAT_MAX_CHUNKS_POOL 64
typedef struct remat_schedule_pool_part {
  int64_t slots;            /* the chunk's slots (n >= 1) */
  const size_t *slot_bytes; /* (slots) the bytes of each: micro-batch k takes k mod slots */
  int64_t records;          /* its W records (0: its W runs with its B) */
  size_t record_bytes;      /* one micro-batch's */
} remat_schedule_pool_part;
typedef struct remat_schedule_pool {
  int64_t v, m;
  size_t *at;    /* (v, m, 2) where chunk c's micro-batch k's slot ([.. 0]) and W
                    record ([.. 1]) start in the pool; owned */
  size_t bytes;  /* the pool: the highest end of any piece */
  size_t apart;  /* the bytes side by side, each chunk's slots and records apart */
  int packed;    /* 1: first fit (bytes < apart); 0: side by side */
} remat_schedule_pool;
/* The pool of rank r of st for its v chunks' parts (offsets and sizes in
 * multiples of align). 0, REMAT_EINVAL or REMAT_ENOMEM. */
REMAT_API int remat_schedule_pool_layout(const remat_schedule_streams *st, int64_t r,
                                         const remat_schedule_pool_part *parts, size_t align,
                                         remat_schedule_pool *out, remat_error *err);
REMAT_API void remat_schedule_pool_free(remat_schedule_pool *pool);
/* Chunk c's micro-batch k: where its slot (record 0) or W record (1) starts */
static inline size_t remat_schedule_pool_at(const remat_schedule_pool *pool, int64_t c,
                                            int64_t k, int record) {
  return pool->at[(c * pool->m + k) * 2 + record];
}

/* The most micro-batches (of chunks) a stage can hold, for bounds: m v with
 * several chunks, else the row's flight over every stage (m, or min(m, p)). */
REMAT_API int64_t remat_schedule_held_bound(int schedule, int64_t p, int64_t m, int64_t v);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_SCHEDULE_H */
