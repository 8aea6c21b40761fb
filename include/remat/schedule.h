/* remat/schedule.h: pipeline schedules as instruction streams, the one
 * order of a stage's forwards and backwards that the pipeline runtime
 * executes and the planner's simulator times.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_SCHEDULE_H
#define REMAT_SCHEDULE_H

#include <stdint.h>

#include "remat/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules; append only. The last three are planned, simulated and
 * exported; the pipeline runtime runs 1f1b and gpipe only. */
typedef enum {
  REMAT_SCHED_1F1B = 0,
  REMAT_SCHED_GPIPE = 1,
  REMAT_SCHED_INTERLEAVED = 2, /* interleaved 1F1B, v chunks per rank (Megatron) */
  REMAT_SCHED_ZBH1 = 3,        /* zero bubble H1: B and W apart, 1F1B's activations */
  REMAT_SCHED_ZBV = 4,         /* zero bubble V: two chunks per rank in a V */
  REMAT_SCHED_COUNT
} remat_plan_schedule;

/* "1f1b", "gpipe", "interleaved", "zb-h1", "zbv" */
REMAT_API const char *remat_plan_schedule_name(int schedule);
REMAT_API int remat_plan_schedule_parse(const char *s, int *out); /* -1 if unknown */

/* The instruction stream of stage s of p with m micro-batches: its q-th
 * operation (q = 0 .. 2m-1) is the forward (*bwd = 0) or backward (*bwd = 1)
 * of micro-batch *k. 1F1B: min(p - s - 1, m) warm-up forwards, then one
 * forward and one backward in turn, then the remaining backwards; GPipe:
 * every forward, then every backward, both in micro-batch order. The
 * pipeline runtime executes these streams (with the receives and sends
 * around each operation) and the planner's simulator (remat_plan_simulate)
 * times them. For 1f1b and gpipe only (any other schedule gets 1F1B's
 * order here); every schedule's streams: remat_schedule_streams_build. */
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

typedef struct remat_schedule_streams {
  int schedule;
  int64_t p, m, v;             /* ranks, micro-batches, chunks per rank */
  int64_t len;                 /* operations per rank: m v (2 or 3) */
  remat_schedule_step *ops;    /* (p, len) rank r's stream at ops + r len, owned */
} remat_schedule_streams;

/* Chunks per rank the schedule takes with `chunks` asked for (0: its
 * default): 1 for 1f1b, gpipe and zb-h1, 2 for zbv, `chunks` (default 2)
 * for interleaved. */
REMAT_API int64_t remat_schedule_chunks(int schedule, int64_t chunks);
/* Whether the schedule can run p ranks, m micro-batches and v chunks per
 * rank on a model of `layers` layers (0: not checked); one line otherwise:
 * interleaved needs v >= 2 and m a multiple of p (Megatron's order), zbv
 * v = 2, the others v = 1, and no virtual stage may be empty. */
REMAT_API int remat_schedule_check(int schedule, int64_t p, int64_t m, int64_t v, int64_t layers,
                                   remat_error *err);
/* The virtual stage (model order) of chunk c of rank r, and back. */
REMAT_API int64_t remat_schedule_virtual_stage(int schedule, int64_t p, int64_t r, int64_t c);
REMAT_API void remat_schedule_rank_of(int schedule, int64_t p, int64_t vs, int64_t *r,
                                      int64_t *c);
/* Builds every rank's stream (p * len at most 2^24 operations; chunked
 * schedules are checked for it by remat_schedule_check too). 1f1b and
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
 * and whose last operation (W where the schedule has it, else B) has not:
 * the activations a runtime that frees them at W holds at once. Under zbv
 * rank 0's chunk 1 (the head) counts a micro-batch from the F of its
 * chunk 0, when its targets arrive with its tokens. */
REMAT_API void remat_schedule_streams_alive(const remat_schedule_streams *st, int64_t *alive);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_SCHEDULE_H */
