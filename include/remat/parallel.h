/* remat/parallel.h: training across MPI ranks. The ranks of one job (started
 * with mpirun, on one machine or many) are pipeline stages, data-parallel
 * replicas, or both: a grid of P stages x D replicas. A pipeline stage runs
 * a trainer over its slice of the model, and the pipeline runtime makes the
 * trainer's step follow the schedule's instruction stream, with activations
 * and their gradients sent between neighbouring stages. A replica runs a
 * trainer over the whole model (or its shards of it) and the data-parallel
 * runtime reduces gradients and shares parameters. On a grid each stage has
 * D replicas and each replica is a pipeline of P stages. Every way gives the
 * results of one process with as many micro-batches per step, bit for bit.
 * Part of remat's public API; include "remat.h" for all of it.
 *
 *   remat_dist *d;  remat_dist_create(&d, &argc, &argv, &err);
 *   ... build a trainer for stage remat_dist_rank(d) (remat_trainer_create_stage)
 *   remat_pipeline *pl;  remat_pipeline_create(&pl, d, tr, &placement, &err);
 *   ... remat_trainer_step(tr, ...) as in one process
 *   remat_pipeline_destroy(pl);  remat_dist_destroy(d, 0);
 *
 * A grid of P x D ranks: remat_dist_grid(d, P, D, &err); the trainer of
 * stage remat_dist_stage(d) as replica remat_dist_replica(d) (its
 * remat_stage with replicas = D), then remat_grid_create(&g, d, tr,
 * &placement, &err) instead of the pipeline.
 */
#ifndef REMAT_PARALLEL_H
#define REMAT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "remat/schedule.h"
#include "remat/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this process was started by an MPI launcher (mpirun, mpiexec). */
REMAT_API int remat_dist_launched(void);

typedef struct remat_dist remat_dist; /* opaque: the job's ranks */

/* Initialises MPI (argc and argv as main received them). A rank that dies
 * makes the others fail within seconds instead of waiting forever. */
REMAT_API int remat_dist_create(remat_dist **out, int *argc, char ***argv, remat_error *err);
/* Ends MPI. With code != 0, ends every rank of the job. */
REMAT_API void remat_dist_destroy(remat_dist *d, int code);
REMAT_API int remat_dist_rank(const remat_dist *d);
REMAT_API int remat_dist_size(const remat_dist *d);

/* Every rank passes its own bytes (e.g. its command line); *same is 1 on
 * every rank when all are equal, else 0 and *first_diff the lowest rank
 * whose bytes differ from rank 0's. */
REMAT_API int remat_dist_all_same(remat_dist *d, const void *bytes, size_t n, int *same,
                                  int *first_diff, remat_error *err);
/* Rank 0 receives one value from every rank, in rank order (others: NULL). */
/* Every rank's n bytes at `bytes` become rank root's. */
REMAT_API int remat_dist_broadcast(remat_dist *d, void *bytes, size_t n, int root,
                                   remat_error *err);
REMAT_API int remat_dist_gather_sizes(remat_dist *d, size_t value, size_t *all, remat_error *err);
/* Every rank passes its own status (0 or a remat_errno, with err filled when
 * not 0): returns the status of the lowest failing rank on every rank, with
 * that rank's message in err and its number in *failed_rank (-1 and 0 when
 * all succeeded). So a failure on any rank is reported once and every rank
 * stops together. */
REMAT_API int remat_dist_first_error(remat_dist *d, int rc, remat_error *err, int *failed_rank);
/* One 0/1 flag from every rank: 1 on every rank when all are 1. */
REMAT_API int remat_dist_all_ok(remat_dist *d, int ok, int *all_ok);
/* The links between d's ranks (2 or more; `node` of them a node, filled in
 * rank order; 0: all on one), measured with the engine's own collectives
 * over the ranks each level spans in a layout (remat_dist_link_ranks):
 * rates[0] the tensor group's sum of bytes[0] over the first node's ranks
 * (0 on nodes of one rank: no tensor link), rates[1] a pipeline's send of
 * bytes[1] from rank 0 to the next node's first rank, rates[2] the
 * replicas' reduce-scatter and all-gather of bytes[2] over one rank a
 * node; in bytes a second as remat plan counts a link's bytes (a rank's
 * share, (n - 1) / n of a message over n ranks, of each gather or
 * reduce-scatter; a send's whole message), each the median of reps rounds
 * of the slowest rank's seconds, the same on every rank. Every rank calls
 * it. */
REMAT_API int remat_dist_measure_links(remat_dist *d, int node, const size_t bytes[3], int reps,
                                       double rates[3], remat_error *err);
/* Each of d's ranks' node (node_of, d's size entries on every rank): the
 * shared-memory domain MPI puts it in, numbered in the order of the nodes'
 * lowest ranks. Every rank calls it. */
REMAT_API int remat_dist_node_of(remat_dist *d, int *node_of, remat_error *err);
/* K when n ranks fill their nodes in rank order, K a node (ranks 0..K-1 on
 * the first node, K..2K-1 on the second, ...; the last node may hold
 * fewer), as remat plan and the tensor groups take them; 0 otherwise. */
REMAT_API int remat_nodes_in_order(const int *node_of, int n);
/* The ranks level l (0 tensor, 1 pipeline, 2 replicas) spans among size
 * ranks of `node` a node: count ranks from first, step apart. */
REMAT_API void remat_dist_link_ranks(int size, int node, int level, int *first, int *step,
                                     int *count);

/* The job's layout, one for every job: P pipeline stages x D replicas
 * (P D ranks; a pipeline alone is P x 1, replicas alone 1 x D). World rank
 *
 *     rank = s D + r      (stage s = rank / D, replica r = rank % D)
 *
 * so the D replicas of a stage are neighbours, and world rank 0 is stage 0
 * of replica 0. remat_dist_grid splits the world into this rank's pipeline
 * (the P ranks of replica r, ranked by stage) and its stage's replicas (the
 * D ranks of stage s, ranked by replica), which remat_grid_create runs; a
 * line that holds every rank is the world itself. Before it (or without
 * it) the job is a pipeline of all its ranks. Fails when P D is not the
 * number of ranks. The parts live as long as d. */
REMAT_API int remat_dist_grid(remat_dist *d, int64_t P, int64_t D, remat_error *err);
REMAT_API int64_t remat_dist_stage(const remat_dist *d);
REMAT_API int64_t remat_dist_replica(const remat_dist *d);
/* t tensor ranks of each model copy, adjacent as Megatron-LM places them:
 * world rank = q t + k is tensor rank k of copy q. Splits the world into
 * this rank's tensor group (*tensor: the t ranks of copy q, ranked by k)
 * and the copies' ranks of tensor rank k (*outer: ranked by q, on which
 * remat_dist_grid lays out the copies' replicas). The parts live as long
 * as d. */
REMAT_API int remat_dist_tensor_split(remat_dist *d, int64_t t, remat_dist **tensor,
                                      remat_dist **outer, remat_error *err);

/* ------------------------------------------------------------ pipeline */

/* A placement: which blocks each pipeline stage runs, the policy of every
 * block, the schedule and how many copies of each stage there are. The one
 * form of a placement every runtime and the job take; the planner's layer
 * numbers (0 the embedding, 1..L the blocks, L + 1 the head) become block
 * numbers in one place, remat_placement_from_layers (and blocks become
 * layers in remat_placement_layers_of_blocks).
 *
 * Stage s runs blocks [first_block[s], first_block[s] + num_blocks[s]);
 * stage 0 also runs the embedding, the last stage the head. One process is
 * one stage with one copy. */
#define REMAT_MAX_STAGES 64
typedef struct remat_placement {
  int64_t stages; /* P */
  /* Under a chunked schedule (interleaved 1F1B: chunks = v >= 2) the P v
   * virtual stages in model order, else the P stages */
  int64_t first_block[REMAT_MAX_STAGES], num_blocks[REMAT_MAX_STAGES];
  int64_t chunks; /* v model chunks per stage (0 or 1: one) */
  int schedule;         /* remat_plan_schedule */
  int64_t microbatches; /* M per optimizer step and pipeline */
  int64_t replicas;     /* D copies of each stage (1: none) */
  int zero;             /* ZeRO stage of the copies (0 to 3) */
  uint8_t policy[REMAT_MAX_LAYERS]; /* remat_policy of every block, model order */
  /* Recompute per micro-batch (remat_stage.full_slots) of every block, model
   * order: in how many of the last of its stage's in-flight slots it
   * recomputes in full, taking policy[] in the others; 0 by default (the
   * constructors below clear it). At most the stage's in-flight count; 0
   * or 1 where one process, or a replica of the whole model, holds one. */
  uint8_t full_slots[REMAT_MAX_LAYERS];
} remat_placement;

/* The placement of a planner's answer: layers_per_stage[s] planner layers
 * on stage s, layer_policy[l] the remat_policy of planner layer l (L + 2 of
 * them; NULL keeps every block). Fails when the counts do not cover the
 * model or a stage would hold nothing. replicas and zero are 1 and 0. */
REMAT_API int remat_placement_from_layers(remat_placement *pl, const remat_config *cfg,
                                          int64_t stages, const int64_t *layers_per_stage,
                                          const uint8_t *layer_policy, int schedule,
                                          int64_t microbatches, remat_error *err);
/* The same under a chunked schedule: layers_per_chunk[vs] planner layers
 * on each of the stages x chunks virtual stages, in model order. */
REMAT_API int remat_placement_from_chunks(remat_placement *pl, const remat_config *cfg,
                                          int64_t stages, int64_t chunks,
                                          const int64_t *layers_per_chunk,
                                          const uint8_t *layer_policy, int schedule,
                                          int64_t microbatches, remat_error *err);
/* The other way: blocks[s] blocks on each of n (virtual) stages, in
 * model order, as the planner's layers (the embedding joins the first
 * stage, the head the last: layers[s]) and block_policy as layer_policy
 * (L + 2 of them; the embedding and the head keep). The counts are not
 * checked. */
REMAT_API void remat_placement_layers_of_blocks(const remat_config *cfg, int64_t n,
                                                const int64_t *blocks,
                                                const uint8_t *block_policy, int64_t *layers,
                                                uint8_t *layer_policy);
/* The whole model as one stage, with each block's policy (NULL: keep all). */
REMAT_API void remat_placement_whole(remat_placement *pl, const remat_config *cfg,
                                     const uint8_t *policy, int64_t microbatches);

/* Stage s of the placement as copy `replica`: its blocks and their
 * policies and full_slots (pointing into pl), its in-flight count (1F1B: min(P - s, M);
 * GPipe: M), the embedding and/or the head, and, when the placement has
 * copies, the replica fields (remat_stage_replica). */
REMAT_API remat_stage remat_placement_stage(const remat_placement *pl, int64_t s,
                                            int64_t replica);
/* Chunk c of stage s under a chunked schedule: the blocks of its virtual
 * stage (remat_schedule_virtual_stage), the most micro-batches its stream
 * holds in flight (remat_schedule_streams_peaks; under zbv from F to B,
 * remat_schedule_streams_alive) and, under zbv, with deferred W records
 * (their peak there), the embedding on the first
 * virtual stage and the head on the last; chunks after the first borrow
 * the first's workspace (remat_stage.work_borrowed; the first's work_min
 * is the caller's to set). */
REMAT_API remat_stage remat_placement_chunk(const remat_placement *pl, int64_t s, int64_t c);
/* Whether the placement's pipeline holds each rank's slots and W records in
 * one pool laid out over its stream (remat_stage.slots_pooled): stages
 * under a schedule whose order is a stream (interleaved, zb-h1, zbv).
 * remat_placement_stage and _chunk leave the flag 0; the runtime's
 * stages set it. */
REMAT_API int remat_placement_pooled(const remat_placement *pl);
/* The pool of rank `rank` of stream st (remat_schedule_pool_layout), for
 * its st->v chunks as stages[c] and their memory plans mp[c] have them:
 * each chunk's slots (remat_memplan_slot's bytes) and W records
 * (remat_memplan_record_bytes). The runtime's pool and what a front end
 * shows of it before any exists are this layout. */
REMAT_API int remat_placement_pool(const remat_schedule_streams *st, int64_t rank,
                                   const remat_stage *stages, const remat_memplan *const *mp,
                                   remat_schedule_pool *out, remat_error *err);

typedef struct remat_pipeline remat_pipeline; /* opaque */

/* Makes the trainer (this rank's stage of pl, which must outlive the
 * pipeline; its grad_accum = M, on a grid below M times the replicas) run
 * its steps as a pipeline: its micro-batches follow the schedule with sends
 * and receives to the neighbouring ranks, the tied embedding's two
 * gradients are exchanged and added (embedding + head) before the update,
 * and the global norm is summed over all stages' layers in model order. The
 * losses the trainer reports are the whole model's on every rank. */
REMAT_API int remat_pipeline_create(remat_pipeline **out, remat_dist *d, remat_trainer *tr,
                          const remat_placement *pl, remat_error *err);
REMAT_API void remat_pipeline_destroy(remat_pipeline *pl);

/* The whole model's parameters in llm.c order on rank 0 (full: that many
 * floats, remat_param_count), gathered from every stage; other ranks pass
 * NULL. */
REMAT_API int remat_pipeline_gather_params(remat_pipeline *pl, float *full, remat_error *err);

/* Timeline: with tracing on, every step's operations are recorded (into
 * memory reserved up front for max_steps steps) and remat_pipeline_trace_write
 * gathers them to rank 0, which writes one Chrome trace-event JSON file (one
 * track per rank; forward, backward, recompute, send, receive, reduce and
 * update spans; a counter of each rank's live arena bytes). */
REMAT_API int remat_pipeline_trace_start(remat_pipeline *pl, int64_t max_steps, remat_error *err);
REMAT_API int remat_pipeline_trace_write(remat_pipeline *pl, const char *path, remat_error *err);

/* Seconds the last step spent waiting on receives and sends, on this rank. */
REMAT_API double remat_pipeline_wait_seconds(const remat_pipeline *pl);
/* Interleaved 1F1B and zbv: the rank's chunks after the first are the
 * pipeline's own models. remat_pipeline_allocate gives them their arenas
 * once the trainer has its (they borrow its workspace), and, where the
 * stages' slots are pooled (remat_stage.slots_pooled: a schedule whose
 * order is a stream), the rank's pool of every chunk's slots and W
 * records; remat_pipeline_load fills their weights from a whole model's
 * (full), or initialises them from the seed (full NULL); chunk_bytes is
 * their arenas' and the pool's planned bytes and chunk_high_water what
 * they used. Nothing under one chunk without a pool. */
REMAT_API int remat_pipeline_allocate(remat_pipeline *pl, remat_error *err);
REMAT_API int remat_pipeline_load(remat_pipeline *pl, const float *full, uint64_t seed);
REMAT_API size_t remat_pipeline_chunk_bytes(const remat_pipeline *pl);
REMAT_API size_t remat_pipeline_chunk_high_water(remat_pipeline *pl);

/* ------------------------------------------------------- one process */

/* One process's timeline, drawn as the pipeline's and the replicas' are,
 * without MPI: remat_solo_create makes the trainer (the whole model, one
 * process) run its steps with its micro-batches timed (the same losses,
 * norms and weights, bit for bit), recording into memory reserved up front
 * for max_steps steps: per micro-batch a forward span, a backward span and
 * its recompute (on a track of its own), per step an update span, and the
 * arena's live bytes as a counter (up by a micro-batch's activations at its
 * forward, down at its backward's end). remat_solo_trace_write writes it as
 * Chrome trace-event JSON. Destroy it before the trainer. */
typedef struct remat_solo remat_solo; /* opaque */
REMAT_API int remat_solo_create(remat_solo **out, remat_trainer *tr, int64_t max_steps,
                                remat_error *err);
REMAT_API void remat_solo_destroy(remat_solo *so);
REMAT_API int remat_solo_trace_write(remat_solo *so, const char *path, remat_error *err);

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
 * job's size and this rank, grad_accum = K D) run its steps as above. d:
 * the replicas' ranks, ranked by replica (on a grid, the stage's replicas,
 * which remat_grid_create passes; the trainer's model is then the stage,
 * and everything above runs over the units it holds, remat_stage_units). */
REMAT_API int remat_replicas_create(remat_replicas **out, remat_dist *d, remat_trainer *tr,
                                    remat_error *err);
REMAT_API void remat_replicas_destroy(remat_replicas *rp);
/* The whole model's parameters in llm.c order on rank 0 (full:
 * remat_param_count floats; a stage's replicas: the stage's tensors, in
 * their places); other ranks pass NULL. Every replica calls it. */
REMAT_API int remat_replicas_gather_params(remat_replicas *rp, float *full, remat_error *err);

/* t tensor ranks of one model (remat_config.tensor_parallel = t), one per
 * rank of d (t ranks): each trainer's model is its rank's shard
 * (Megatron-LM's layout: column-parallel qkv and MLP input, row-parallel
 * projections, the vocabulary split for the embedding and the loss), and
 * the group sums the row-parallel products' outputs, the column-parallel
 * ones' input gradients, the embedding and the loss's statistics, each in
 * a fixed order (rank order), so a run gives the same bits on every
 * repeat; the step's gradient norm is the group's. Set before the weights
 * are initialised (the rank picks its shard). In fp32 (GPT-2, or a
 * Llama whose key/value heads t divides), for now. */
typedef struct remat_tensor_group remat_tensor_group; /* opaque */
REMAT_API int remat_tensor_group_create(remat_tensor_group **out, remat_dist *d,
                                        remat_trainer *tr, remat_error *err);
REMAT_API void remat_tensor_group_destroy(remat_tensor_group *g);
/* The whole model's parameters in llm.c order on the group's rank 0 (full:
 * remat_param_count floats of the model without tensor parallelism);
 * other ranks pass NULL, and so may rank 0 of a group whose copy is not
 * saved (nothing is gathered then). Every rank of the group calls it.
 * With replicas (ZeRO 0 to 3), created after remat_replicas_create over
 * the same trainer, the group runs the replicas' step and takes the norm. */
REMAT_API int remat_tensor_group_gather_params(remat_tensor_group *g, float *full,
                                               remat_error *err);
/* Tensor groups as pipeline stages (created after remat_pipeline_create
 * or remat_grid_create over the same trainer; pipe the pipeline, whose
 * norm then adds each layer's sum over the group, and whose chunks under a
 * chunked schedule each take the group's collectives): world holds every
 * rank, tensor rank k of stage s's replica r at (s D + r) t + k, and pl
 * the stages; a save then gathers replica 0's ranks' parts to world rank
 * 0 (every rank calls remat_tensor_group_gather_params, full on world rank
 * 0 only). Before the first step. */
REMAT_API void remat_tensor_group_join(remat_tensor_group *g, remat_dist *world,
                                       const remat_placement *pl, remat_pipeline *pipe);
/* Tensor groups as replicas (rp: remat_replicas_create's, or a grid's
 * remat_grid_replicas, over the same trainer): under ZeRO 1 to 3 the
 * norm takes each layer's sums from the replicas' shards, and under ZeRO 3
 * a save first gathers each tensor rank's shard from its replicas. Before the first
 * step. */
REMAT_API void remat_tensor_group_join_replicas(remat_tensor_group *g, remat_replicas *rp);
/* The timeline of every rank of the job (world), the groups' collectives
 * on a track of their own: its joined pipeline's or replicas' runtime
 * records it, or a group alone its one-process runtime (solo: made over
 * the same trainer before the group). Every rank calls it once its
 * runtime is made; remat_pipeline_trace_write, remat_replicas_trace_write
 * or remat_solo_trace_write then write it, world rank 0 the file. */
REMAT_API int remat_tensor_group_trace_start(remat_tensor_group *g, remat_dist *world,
                                             remat_solo *solo, int64_t max_steps,
                                             remat_error *err);

/* Timeline, as the pipeline's (one track per rank, memory reserved up front
 * for max_steps steps): per micro-batch a forward span, per layer a
 * backward span (from taking its gradient buffer to handing it over) and a
 * reduce span on a track of its own (from the reduce-scatter's post to its
 * observed completion), ZeRO 3's gathers on another (post to completion),
 * wait spans where the rank blocked in MPI, update spans, and the arena as
 * a counter. Every rank calls both; rank 0 writes the file. */
REMAT_API int remat_replicas_trace_start(remat_replicas *rp, int64_t max_steps, remat_error *err);
REMAT_API int remat_replicas_trace_write(remat_replicas *rp, const char *path, remat_error *err);

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
REMAT_API remat_comm_stats remat_replicas_comm(const remat_replicas *rp);
/* 1 - exposed / seconds, within [0, 1]; 0 when nothing was sent. */
REMAT_API double remat_comm_overlap(double seconds, double exposed_seconds);
/* Every rank's remat_replicas_comm on rank 0, in rank order (all: D
 * entries there; others pass NULL). Every rank calls it. */
REMAT_API int remat_replicas_comm_gather(remat_replicas *rp, remat_comm_stats *all,
                                         remat_error *err);
/* What that count is for a step of K rounds, from the shapes alone. */
REMAT_API uint64_t remat_replicas_step_bytes(const remat_config *cfg, int64_t D, int zero,
                                             int64_t K);

/* ----------------------------------------------------------- the grid */

/* P x D: D pipelines of P stages (remat_dist_grid's layout); the D copies
 * of each stage are data-parallel replicas of each other under ZeRO 0 to 3.
 * A step of M D micro-batches: pipeline r runs M of them through its
 * schedule (--grad-accum M per pipeline), its micro-batch k being
 * micro-batch k D + r of the step, as replicas number theirs above (every
 * rank draws all D of round k from its loader and keeps its own). Within a
 * stage each layer's gradient is reduce-scattered among the stage's D
 * replicas as its backward ends (travelling while the next layer's runs,
 * as above; the last of a step lands after the schedule) and the owner
 * adds the pieces in replica order; a stage runs its backwards in micro-batch order under both
 * schedules, so the owner's sum is ((c_0 + c_1) + c_2) + ..., one
 * process's order with M D micro-batches. The tied matrix: stage 0 (the
 * embedding's sum) and stage P - 1 (the head's, in its copy, unit L + 2 of
 * remat/memory.h) of each pipeline exchange the elements that replica owns
 * and add embedding + head. The norm: each stage's layer sums from its
 * replicas' chunk sums, then all stages' in model order. The losses: the
 * last stages gather theirs and add them in micro-batch order. So losses,
 * norms and parameters are one process's with --grad-accum M D. */
typedef struct remat_grid remat_grid; /* opaque */

/* Makes the trainer run its steps on the grid: its model is stage
 * remat_dist_stage(d) of pl as replica remat_dist_replica(d) of D
 * (remat_placement_stage), its
 * grad_accum M D; d's grid is P x D (remat_dist_grid). Creates this rank's
 * pipeline and replica runtimes, reachable below for their figures. */
REMAT_API int remat_grid_create(remat_grid **out, remat_dist *d, remat_trainer *tr,
                      const remat_placement *pl, remat_error *err);
REMAT_API void remat_grid_destroy(remat_grid *g);
REMAT_API remat_pipeline *remat_grid_pipeline(remat_grid *g);
REMAT_API remat_replicas *remat_grid_replicas(remat_grid *g);
/* The whole model's parameters in llm.c order on world rank 0 (full:
 * remat_param_count floats); other ranks pass NULL. Every rank calls it. */
REMAT_API int remat_grid_gather_params(remat_grid *g, float *full, remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_PARALLEL_H */
