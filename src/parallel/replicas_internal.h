/* replicas_internal.h: the data-parallel runtime's state (replicas.c) and
 * what replicas_hooks.c offers it: the failure and timing helpers, and the
 * layer hooks the model calls (the gradients' reduce-scatter, ZeRO 3's
 * parameter gathers, their progress). Private to src/parallel. */
#ifndef REMAT_REPLICAS_INTERNAL_H
#define REMAT_REPLICAS_INTERNAL_H

#include "parallel/parallel_internal.h"

enum { GBUF_BLOCK0, GBUF_BLOCK1, GBUF_BIG, GBUF_COUNT }; /* REDUCE's gradient buffers */
enum { SLOT_A, SLOT_B, SLOT_HEAD, SLOT_COUNT };           /* GATHER's slots */

/* One layer's reduce-scatter in flight: one unit's, or the head's two. */
typedef struct {
  int n; /* requests in flight; 0: none */
  MPI_Request req[2];
  int64_t unit[2];
  size_t at[2]; /* where its pieces land in RECV */
  int buf;      /* the gradient buffer it sends from */
  double t_post;
  int64_t micro;
  remat__window send[2], recv[2]; /* each request's, lent while in flight */
} reduce_op;

/* ZeRO 3: one unit's parameters gathered ahead of their use. Whether a
 * gather is posted never depends on whether another has completed, so every
 * rank posts the same collectives in the same order. */
typedef struct {
  int state; /* GATHER_NONE, in flight, or done (its slot holds the unit) */
  MPI_Request req;
  int phase;
  int64_t index; /* the request (in its pass's order) it answers */
  double t_post;
  remat__window send, recv; /* lent while in flight */
} gather_op;
enum { GATHER_NONE, GATHER_IN_FLIGHT, GATHER_DONE };

struct remat_replicas {
  remat_dist *d;
  remat_trainer *tr;
  remat_model *m;
  const remat_config *cfg;
  int64_t D, r, K, L;
  int zero;
  int64_t *units, nu;         /* the units the model holds (remat_stage_units) */
  size_t big;                 /* the largest shard of those units but the head's own */
  float *recv;                /* RECV: D pieces of a shard (the head: of two) */
  float *gather[SLOT_COUNT];  /* GATHER (ZeRO 3): the embedding or a block; a block; the head */
  float *gbuf[GBUF_COUNT];    /* REDUCE: two blocks' gradient buffers; the head's and embedding's */
  float *pack;                /* REDUCE as a whole, between steps */
  size_t pack_bytes;
  double *norm;               /* NORM: D x chunks, every replica's chunk sums */
  size_t chunks;              /* chunk sums per replica (every unit's shard, padding included) */
  float *losses;              /* (D, K) each replica's micro-batch losses */
  int rc;                     /* the first failure inside a layer hook */
  remat_error err;
  remat_comm_stats stats;
  reduce_op red;
  gather_op gat[2];
  int next_block;             /* the block gradient buffer the next block takes */
  /* ZeRO 3's requests for parameters, per pass (0 forward, 1 backward): the
   * units in order, each one's slot, and whether the next is fetched then */
  int64_t *pass[2], npass[2];
  uint8_t *slot[2], *prefetch[2];
  int64_t micro;              /* the micro-batch running (-1: the pipeline's, unknown here) */
  double layer_t0;            /* when the running layer's backward took its buffer */
  remat__trace own, *trace;   /* the trace: its own, or the pipeline's on a grid */
  int64_t step;               /* the step the spans belong to (0-based; set as it starts) */
  /* the arena counter (its own trace): the bytes live between micro-batches,
   * and what one micro-batch's activations add from its forward to the end
   * of its backward */
  uint64_t fixed_bytes, slot_bytes;
};

/* The first failure inside a hook, as the step's error (0: none). */
int remat__rp_failed(remat_replicas *rp, remat_error *err);
/* Bytes a collective of floats x size moves to the other replicas. */
uint64_t remat__rp_piece_bytes(const remat_replicas *rp, size_t floats, size_t size);
/* A span on the trace's track. */
void remat__rp_span(remat_replicas *rp, int kind, int track, double t0, double t1, int64_t micro,
                    int64_t layer);
/* A blocking collective's timing and failure, posted at t0. */
int remat__rp_blocking(remat_replicas *rp, double t0, int mrc, uint64_t bytes, int kind,
                       const char *what);
/* The reduce-scatter in flight, waited for and added. */
void remat__rp_reduce_wait(remat_replicas *rp);
/* The layer hooks (remat__layer_ops), ctx the replica. */
float *remat__rp_on_grad_buf(void *ctx, int64_t u);
void remat__rp_on_grads(void *ctx, int64_t u, float *buf);
/* ZeRO 3: the passes' requests, and which slot and prefetch each takes. */
void remat__rp_build_passes(remat_replicas *rp, const remat_stage *st);
void remat__rp_plan_gathers(remat_replicas *rp, int has_b);
const float *remat__rp_on_params(void *ctx, int64_t u, int phase);
void remat__rp_on_progress(void *ctx);

#endif
