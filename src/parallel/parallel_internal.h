/* parallel_internal.h: what the files of src/parallel share. */
#ifndef REMAT_DIST_INTERNAL_H
#define REMAT_DIST_INTERNAL_H

#include <mpi.h>

#include "model/model_runtime.h"
#include "remat/parallel.h"
#include "remat/schedule.h"
#include "train/train_runtime.h"

struct remat_dist {
  MPI_Comm comm;
  int rank, size;
  /* the grid (remat_dist_grid): P stages x D replicas; pipeline holds this
   * rank's replica's P ranks, replicas its stage's D ranks (either may be
   * this object itself, when it has all the job's ranks) */
  int64_t P, D;
  remat_dist *pipeline, *replicas;
  remat_dist *tensor, *outer; /* remat_dist_tensor_split's parts (NULL: none) */
};

/* ------------------------------------------ a rank's pool (rank_pool.c) */

/* A pipeline rank's slots and W records in one pool (remat_stage.slots_pooled). */
typedef struct remat__rank_pool {
  remat_schedule_pool layout; /* remat_schedule_pool_layout's, for the rank's chunks */
  char *mem;                  /* layout.bytes on the chunks' backend (NULL: none yet) */
  size_t high_water;          /* cache for remat__rank_pool_high_water */
  int64_t v, from[REMAT_MAX_CHUNKS_POOL]; /* the chunk whose F brings a micro-batch to c */
} remat__rank_pool;
/* The layout of rank `rank`'s chunks cm[0 .. st->v - 1] on stream st. */
int remat__rank_pool_plan(remat__rank_pool *rp, const remat_schedule_streams *st, int64_t rank,
                          remat_model *const *cm, remat_error *err);
/* The buffer, and every slot and record placed (micro-batch j's). */
int remat__rank_pool_allocate(remat__rank_pool *rp, remat_model *const *cm, remat_error *err);
/* Before chunk c's F of micro-batch k: the slots it brings k to placed. */
void remat__rank_pool_forward(const remat__rank_pool *rp, remat_model *const *cm, int64_t c,
                              int64_t k);
/* Before chunk c's B of micro-batch k: its W record placed. */
void remat__rank_pool_backward(const remat__rank_pool *rp, remat_model *const *cm, int64_t c,
                               int64_t k);
/* How far the pool has been written (as remat_model_arena_high_water). */
size_t remat__rank_pool_high_water(remat__rank_pool *rp, const remat__backend *be);
void remat__rank_pool_free(remat__rank_pool *rp, const remat__backend *be);

/* ------------------------------------------------ timeline (trace.c) */

enum { REMAT__EV_FORWARD, REMAT__EV_BACKWARD, REMAT__EV_RECOMPUTE, REMAT__EV_RECV_ACT,
       REMAT__EV_SEND_ACT, REMAT__EV_RECV_GRAD, REMAT__EV_SEND_GRAD, REMAT__EV_REDUCE,
       REMAT__EV_UPDATE, REMAT__EV_ARENA, REMAT__EV_WAIT, REMAT__EV_GATHER,
       REMAT__EV_INPUT_GRAD, REMAT__EV_WEIGHT_GRAD, REMAT__EV_TENSOR_SUM,
       REMAT__EV_TENSOR_SCATTER, REMAT__EV_TENSOR_GATHER, REMAT__EV_TENSOR_MAX, REMAT__EV_COUNT };
/* A rank's tracks: its computation (and its waits), recompute drawn apart,
 * and a replica's collectives in flight, from post to completion. */
enum { REMAT__TRACK_MAIN, REMAT__TRACK_RECOMPUTE, REMAT__TRACK_REDUCE, REMAT__TRACK_GATHER,
       REMAT__TRACK_TENSOR, REMAT__TRACKS };

typedef struct remat__event {
  double ts, dur;        /* seconds: remat__now() when added, since the start once in */
  int64_t step, micro;   /* micro: -1 for none */
  uint64_t value;        /* REMAT__EV_ARENA: live bytes (a counter, not a span) */
  int16_t kind, track;
  int32_t layer;         /* -1 for none */
} remat__event;

typedef struct remat__trace {
  remat__event *ev;
  size_t n, cap;
  int on;
  double t0;
  /* tensor > 1: a job of tensor groups (remat_dist_tensor_split's layout),
   * whose start and write run over world, every rank, in place of the
   * runtime's communicator; kept across a start */
  MPI_Comm world;
  int64_t tensor;
  size_t extra; /* events reserved beyond the runtime's (the group's collectives) */
} remat__trace;
void remat__trace_world(remat__trace *t, MPI_Comm world, int64_t tensor, size_t extra);

/* Reserves cap events and starts every rank's clock together (a barrier).
 * comm MPI_COMM_NULL here and in remat__trace_write: one process, no MPI. */
int remat__trace_start(remat__trace *t, MPI_Comm comm, size_t cap, remat_error *err);
/* Records e (ts in remat__now()'s seconds); once full, drops the rest. */
void remat__trace_add(remat__trace *t, remat__event e);
/* Rank 0 gathers every rank's events and writes the file; every rank calls
 * it. The ranks are P stages x R replicas (rank = stage R + replica), which
 * names their tracks (1 x 1: one process). */
int remat__trace_write(remat__trace *t, MPI_Comm comm, int64_t P, int64_t R, const char *path,
                       remat_error *err);
void remat__trace_free(remat__trace *t);

/* ------------------------------------------------------------ the grid */

/* The grid's uses of the pipeline and replica runtimes (grid.c). */
int remat__pipeline_micro_batches(void *ctx, remat_trainer *tr, double *loss_sum,
                                  remat_error *err);
/* Makes the pipeline replica reps->rank of reps->size; world: every rank,
 * for the trace. */
void remat__pipeline_join(remat_pipeline *pl, remat_dist *world, remat_dist *reps);
int remat__pipeline_exchange_tied(remat_pipeline *pl, float *g, size_t n, remat_error *err);
/* The rank's chunk models (the trainer's first) into out; returns how many. */
int64_t remat__pipeline_chunk_models(remat_pipeline *pl, remat_model **out);
int remat__pipeline_norm(remat_pipeline *pl, const double *layers, int64_t n, double *total,
                         remat_error *err);
/* remat_pipeline_gather_params from the stage's parameters in p (whole
 * tensors, as a stage without replicas holds them). */
int remat__pipeline_gather_flat(remat_pipeline *pl, const float *p, float *full,
                                remat_error *err);
/* What a step's first micro-batch needs: the arena's regions, counters at zero. */
void remat__replicas_begin_step(remat_replicas *rp);
int remat__replicas_after_backward(remat_replicas *rp, remat_trainer *tr, remat_error *err);
/* The squared sums of the stage's layers in model order (its units but a
 * lone head's tied copy), from every replica's shards; *n how many. */
int remat__replicas_layer_sums(remat_replicas *rp, double *layers, int64_t *n, remat_error *err);
/* The same of a tensor rank's split tensors (split 1) or its whole ones (0). */
int remat__replicas_layer_sums_part(remat_replicas *rp, int split, double *layers, int64_t *n,
                                    remat_error *err);
int remat__replicas_update(remat_replicas *rp, remat_trainer *tr, float lr, float norm,
                           remat_error *err);
/* The tensor group's sum (its fixed order) over every rank of d, in host
 * memory (scratch: 2 ceil(n / size) floats), for timing the link. */
int remat__tensor_sum_host(remat_dist *d, float *host, size_t n, float *scratch);
/* ZeRO 3: the stage's whole tensors on replica 0 (*flat, malloc'd). */
int remat__replicas_gather_stage(remat_replicas *rp, float **flat, remat_error *err);
/* After the last micro-batch: the reduce-scatter still in flight lands. */
int remat__replicas_end_micro_batches(remat_replicas *rp, remat_error *err);
/* The pipeline's timeline, which the stage's replica runtime records into. */
remat__trace *remat__pipeline_trace(remat_pipeline *pl);
void remat__replicas_trace_into(remat_replicas *rp, remat__trace *t);
/* The timeline a replicas runtime records into, a one-process runtime's,
 * and that runtime's start again (its clock, now every rank's). */
remat__trace *remat__replicas_trace(remat_replicas *rp);
remat__trace *remat__solo_trace(remat_solo *so);
int remat__solo_restart(remat_solo *so, remat_error *err);

/* A failed MPI call as a remat_error: REMAT_EIO with MPI's own words. */
int remat__mpi_error(remat_error *err, int mpi_rc, const char *what);

/* A window the model's backend lends the host on bytes of its arena for a
 * message (remat__backend.map): MPI reads or writes host while it is open,
 * and a message in flight keeps it open until it completes. Closing a
 * window not open does nothing. */
typedef struct remat__window {
  void *at, *host;
  size_t bytes;
  int access;
} remat__window;

static inline void *remat__window_open(const remat_model *m, remat__window *w, void *at,
                                       size_t bytes, int access) {
  *w = (remat__window){at, remat__model_backend(m)->map(at, bytes, access), bytes, access};
  return w->host;
}

static inline void remat__window_close(const remat_model *m, remat__window *w) {
  if (w->at) remat__model_backend(m)->unmap(w->at, w->host, w->bytes, w->access);
  *w = (remat__window){0};
}

#endif
