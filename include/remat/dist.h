/* remat/dist.h: training across MPI ranks. The ranks of one job (started
 * with mpirun, on one machine or many) are pipeline stages or data-parallel
 * replicas. A pipeline stage runs a trainer over its slice of the model,
 * and the pipeline runtime makes the trainer's step follow the schedule's
 * instruction stream, with activations and their gradients sent between
 * neighbouring stages. A replica runs a trainer over the whole model (or its
 * shards of it) and the data-parallel runtime reduces gradients and shares
 * parameters. Either way the results are those of one process with as many
 * micro-batches per step, bit for bit.
 * Part of remat's public API; include "remat.h" for all of it.
 *
 *   remat_dist *d;  remat_dist_init(&d, &argc, &argv, &err);
 *   ... build a trainer for stage remat_dist_rank(d) (remat_trainer_create_stage)
 *   remat_pipeline *pl;  remat_pipeline_create(&pl, d, tr, &split, &err);
 *   ... remat_trainer_step(tr, ...) as in one process
 *   remat_pipeline_destroy(pl);  remat_dist_finalize(d);
 */
#ifndef REMAT_DIST_H
#define REMAT_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "remat/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this process was started by an MPI launcher (mpirun, mpiexec). */
int remat_dist_launched(void);

typedef struct remat_dist remat_dist; /* opaque: the job's ranks */

/* Initialises MPI (argc and argv as main received them). A rank that dies
 * makes the others fail within seconds instead of waiting forever. */
int remat_dist_init(remat_dist **out, int *argc, char ***argv, remat_error *err);
/* Ends MPI. With code != 0, ends every rank of the job. */
void remat_dist_finalize(remat_dist *d, int code);
int remat_dist_rank(const remat_dist *d);
int remat_dist_size(const remat_dist *d);

/* Every rank passes its own bytes (e.g. its command line); *same is 1 on
 * every rank when all are equal, else 0 and *first_diff the lowest rank
 * whose bytes differ from rank 0's. */
int remat_dist_all_same(remat_dist *d, const void *bytes, size_t n, int *same, int *first_diff,
                        remat_error *err);
/* Rank 0 receives one value from every rank, in rank order (others: NULL). */
int remat_dist_gather_sizes(remat_dist *d, size_t value, size_t *all, remat_error *err);
/* Every rank passes its own status (0 or a remat_errno, with err filled when
 * not 0): returns the status of the lowest failing rank on every rank, with
 * that rank's message in err and its number in *failed_rank (-1 and 0 when
 * all succeeded). So a failure on any rank is reported once and every rank
 * stops together. */
int remat_dist_first_error(remat_dist *d, int rc, remat_error *err, int *failed_rank);
/* One 0/1 flag from every rank: 1 on every rank when all are 1. */
int remat_dist_all_ok(remat_dist *d, int ok, int *all_ok);

/* ------------------------------------------------------------ pipeline */

/* How the model's layers are split: stage s runs blocks [first_block[s],
 * first_block[s] + num_blocks[s]); stage 0 also runs the embedding, the last
 * stage the head. */
typedef struct remat_split {
  int64_t stages;
  int64_t first_block[64], num_blocks[64];
  int schedule;        /* remat_plan_schedule */
  int64_t microbatches; /* M per optimizer step */
} remat_split;
#define REMAT_MAX_STAGES 64

/* The stage of the split that rank s runs, with its in-flight count
 * (1F1B: min(P - s, M); GPipe: M) and the given policy of its blocks. */
remat_stage remat_split_stage(const remat_split *sp, int64_t s, const uint8_t *policy);

typedef struct remat_pipeline remat_pipeline; /* opaque */

/* Makes the trainer (this rank's stage of sp, its grad_accum = M) run its
 * steps as a pipeline: its micro-batches follow the schedule with sends and
 * receives to the neighbouring ranks, the tied embedding's two gradients are
 * exchanged and added (embedding + head) before the update, and the global
 * norm is summed over all stages' layers in model order. The losses the
 * trainer reports are the whole model's on every rank. */
int remat_pipeline_create(remat_pipeline **out, remat_dist *d, remat_trainer *tr,
                          const remat_split *sp, remat_error *err);
void remat_pipeline_destroy(remat_pipeline *pl);

/* The whole model's parameters in llm.c order on rank 0 (full: that many
 * floats, remat_param_count), gathered from every stage; other ranks pass
 * NULL. */
int remat_pipeline_gather_params(remat_pipeline *pl, float *full, remat_error *err);

/* Timeline: with tracing on, every step's operations are recorded (into
 * memory reserved up front for max_steps steps) and remat_pipeline_trace_write
 * gathers them to rank 0, which writes one Chrome trace-event JSON file (one
 * track per rank; forward, backward, recompute, send, receive, reduce and
 * update spans; a counter of each rank's live arena bytes). */
int remat_pipeline_trace_start(remat_pipeline *pl, int64_t max_steps, remat_error *err);
int remat_pipeline_trace_write(remat_pipeline *pl, const char *path, remat_error *err);

/* Seconds the last step spent waiting on receives and sends, on this rank. */
double remat_pipeline_wait_seconds(const remat_pipeline *pl);

/* ----------------------------------------------------- data parallelism */

/* D replicas of the whole model, one per rank, under ZeRO stage 0 to 3
 * (remat/memory.h: units, shards and each stage's bytes). A step of M = K D
 * micro-batches runs in K rounds: in round j every replica draws
 * micro-batches jD .. jD + D - 1 from its loader (so all loaders stay in
 * step) and runs micro-batch jD + r, with that micro-batch's dropout
 * stream. As each layer's backward ends, its gradient (computed from zero)
 * is reduce-scattered: every replica sends the owner of each shard its
 * piece (MPI_Ialltoall, travelling while the next layer's backward runs;
 * the model's progress hook tests it between kernels), and before the next
 * layer's is posted the owner adds the D pieces in replica order to its
 * running sum. So the owner's sum is ((g + c_jD) + c_jD+1) + ..., the
 * order one process with K D micro-batches follows (remat/model.h), bit for
 * bit, however the transfers overlap; no MPI_Allreduce, whose order is
 * unspecified, ever sums a gradient. The layer in flight keeps its gradient
 * buffer while the next layer computes into another (remat/memory.h:
 * remat_replica_bytes' reduce).
 * The tied matrix's two sums are reduced apart and added by their common
 * owner (embedding + head); the norm gathers every replica's chunk sums and
 * adds them in model order. Then:
 *   ZeRO 0  the summed gradients are all-gathered; every replica updates
 *           everything
 *   ZeRO 1  each replica updates its shards (its m and v are shards); the
 *   ZeRO 2  parameters are all-gathered (2: only its gradient shard exists)
 *   ZeRO 3  each replica updates its shards; a layer's parameters are
 *           all-gathered before its forward and again before its recompute
 *           and backward, into the gather buffer, and dropped after; the
 *           next block's gather (MPI_Iallgather) travels while the layer
 *           before it computes
 * Every buffer lives in the trainer's arena, planned before the first step. */
typedef struct remat_replicas remat_replicas; /* opaque */

/* Makes the trainer (this rank's replica: remat_stage_replica with the
 * job's size and this rank, grad_accum = K D) run its steps as above. */
int remat_replicas_create(remat_replicas **out, remat_dist *d, remat_trainer *tr,
                          remat_error *err);
void remat_replicas_destroy(remat_replicas *rp);
/* The whole model's parameters in llm.c order on rank 0 (full:
 * remat_param_count floats); other ranks pass NULL. */
int remat_replicas_gather_params(remat_replicas *rp, float *full, remat_error *err);

/* Timeline, as the pipeline's (one track per rank, memory reserved up front
 * for max_steps steps): per micro-batch a forward span, per layer a
 * backward span (from taking its gradient buffer to handing it over) and a
 * reduce span on a track of its own (from the reduce-scatter's post to its
 * observed completion), ZeRO 3's gathers on another (post to completion),
 * wait spans where the rank blocked in MPI, update spans, and the arena as
 * a counter. Every rank calls both; rank 0 writes the file. */
int remat_replicas_trace_start(remat_replicas *rp, int64_t max_steps, remat_error *err);
int remat_replicas_trace_write(remat_replicas *rp, const char *path, remat_error *err);

/* Communication of the last step on this rank. Each collective's
 * communication time runs from its post to the return of the MPI call on
 * this rank that saw it complete (a blocking collective: its call); the
 * exposed time is what this rank spent inside MPI calls for it (posting,
 * testing, waiting), when it was not computing. The overlapped share is
 * 1 - exposed / communication time (remat_comm_overlap). The layers'
 * collectives (the reduce-scatters and ZeRO 3's gathers, which run beside
 * the forward and backward) are also counted apart from the rest (the
 * losses, the norm and the all-gathers between steps, which block). Bytes:
 * a collective's bytes to the other ranks, as if sent directly: D - 1
 * pieces. */
typedef struct remat_comm_stats {
  double seconds;               /* communication time, summed over collectives */
  double exposed_seconds;       /* the part spent inside MPI calls */
  double layer_seconds;         /* the same two for the layers' collectives */
  double layer_exposed_seconds;
  uint64_t bytes_sent;
  uint64_t collectives;
} remat_comm_stats;
remat_comm_stats remat_replicas_comm(const remat_replicas *rp);
/* 1 - exposed / seconds, within [0, 1]; 0 when nothing was sent. */
double remat_comm_overlap(double seconds, double exposed_seconds);
/* Every rank's remat_replicas_comm on rank 0, in rank order (all: D
 * entries there; others pass NULL). Every rank calls it. */
int remat_replicas_comm_gather(remat_replicas *rp, remat_comm_stats *all, remat_error *err);
/* What that count is for a step of K rounds, from the shapes alone. */
uint64_t remat_replicas_step_bytes(const remat_config *cfg, int64_t D, int zero, int64_t K);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_DIST_H */
