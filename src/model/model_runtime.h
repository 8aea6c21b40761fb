/* model_runtime.h: the model's interface to the libraries above it, which
 * drive it: to the trainer (src/train), remat_model_create in two steps, so
 * a caller can learn what the plan needs before the arena exists
 * (remat_trainer_planned_bytes): the model and its plan, then the arena,
 * and the step counter and timings it keeps; to the runtimes
 * (src/parallel) and the job (src/job), the backend the model holds, which
 * they use for its buffers, a replica's layer hooks and shards, and a
 * pipeline stage's slots, boundaries and slices. Not installed, not part of
 * the API (docs/architecture.md lists the interface headers). */
#ifndef REMAT_MODEL_RUNTIME_H
#define REMAT_MODEL_RUNTIME_H

#include "kernels/backend.h"
#include "remat/model.h"

int remat__model_plan(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                      const remat_stage *st, remat_error *err);
int remat__model_allocate(remat_model *m, remat_error *err);
/* remat__model_plan on the given backend. */
int remat__model_plan_on(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                         const remat_stage *st, const remat__backend *be, remat_error *err);
/* A chunk that borrows its rank's workspace (remat_stage.work_borrowed):
 * points its workspace at the lender's, once both are allocated. */
void remat__model_borrow_workspace(remat_model *m, const remat_model *lender);
/* A head chunk that reads its rank's embedding chunk's tied matrix
 * (remat_stage.tied_borrowed): points its view at the lender's, once both
 * are allocated. */
void remat__model_borrow_tied(remat_model *m, const remat_model *lender);
/* One rank's embedding and head chunks (zbv's first rank), after the
 * backwards: the embedding's gradient of the tied matrix plus the head's
 * (embedding + head, as one process adds them); a head with its own copy
 * of the matrix takes the sum too. */
void remat__model_add_tied(remat_model *emb, remat_model *head);
/* A stage whose runtime pools its slots and W records
 * (remat_stage.slots_pooled): slot `slot` (record < 0) or W record
 * `record` (slot < 0) is at `at` from now on, memory of at least its
 * plan's bytes for it (remat_memplan_slot, remat_memplan_record_bytes) on
 * the model's backend. The runtime places each before the micro-batch
 * that takes it first writes it. */
void remat__model_place(remat_model *m, int64_t slot, int64_t record, void *at);
/* The backend the model holds. */
const remat__backend *remat__model_backend(const remat_model *m);

/* ------------------------------------------------- the trainer's hooks */

/* Optimizer steps taken, set when a state is loaded. */
void remat__model_set_step(remat_model *m, int64_t step);
/* Seconds spent recomputing since the last take; take resets the count. */
double remat__model_take_recompute_seconds(remat_model *m);
/* Seconds the model has spent in each kind of layer work since it was made
 * (the calibration's figures: remat_calibrate), and how many times. */
enum {
  REMAT__T_EMBED_F, REMAT__T_EMBED_B, /* the embedding's forward, backward */
  REMAT__T_BLOCK_F,                   /* a block's forward (not a rebuild) */
  REMAT__T_BLOCK_B, REMAT__T_BLOCK_W, /* a block's backward: whole or B; W */
  REMAT__T_RECOMPUTE, REMAT__T_MIDDLE, /* a rebuild: full, middle */
  REMAT__T_HEAD_F, REMAT__T_HEAD_B,   /* the head's forward and loss; its backward */
  REMAT__T_COUNT
};
void remat__model_timers(const remat_model *m, double seconds[REMAT__T_COUNT],
                         int64_t count[REMAT__T_COUNT]);
double remat__model_recompute_seconds(const remat_model *m);
/* Sums of squared gradients, one per layer the model holds, in model order
 * (embedding, blocks, head; the tied matrix counted on the embedding), each
 * the sum of its unit's chunk sums (remat/memory.h); returns how many. The
 * squared global norm is their sum in that order: remat_model_grad_sumsq for
 * the whole model. Not for a replica, which holds only its own shards: see
 * remat__model_grad_chunk_sums. */
int64_t remat__model_grad_sumsq_layers(const remat_model *m, double *out);
int64_t remat__model_num_layers(const remat_model *m);

/* ------------------------------------------------------------- replicas */

/* A replica (remat_stage_replica) computes each layer's gradient of its
 * micro-batch into the gradient buffer ops.grad_buf gives it for the layer
 * (unit 0, a block's unit, or L + 2 for the head, whose buffer holds the
 * tied unit's D shards and then its own), zeroes it (D shards of each
 * unit, padding zero) and, when the layer's backward ends, hands it to
 * ops.grads, unit by unit; the buffer is the runtime's again from then on.
 * Under ZeRO 3 it asks ops.params for a layer's parameters before the
 * layer's forward (phase 0) and before its recompute and backward (phase
 * 1): before the head, the embedding's (unit 0, for the tied matrix) then
 * the head's, both alive together; a unit stays valid until the next
 * request. params returns the unit as one vector (D shards), or NULL for
 * the model's own flat parameters. ops.progress, when set, is called
 * between the kernels of every layer's forward and backward (cheap: it lets
 * the runtime drive communication in flight). The data-parallel runtime
 * (remat/parallel.h) sets these. */
typedef struct remat__layer_ops {
  const float *(*params)(void *ctx, int64_t unit, int phase);
  float *(*grad_buf)(void *ctx, int64_t unit);
  void (*grads)(void *ctx, int64_t unit, float *buf);
  void (*progress)(void *ctx);
  void *ctx;
} remat__layer_ops;
void remat__model_set_layer_ops(remat_model *m, const remat__layer_ops *ops);
/* Element i of unit u in one of the model's buffers (REMAT_BUF_PARAMS,
 * REMAT_BUF_GRADS, REMAT_BUF_ADAM_M, REMAT_BUF_ADAM_V; REMAT_BUF_TIED_GRAD
 * for the tied unit), and in *run how many floats follow contiguously. A
 * whole buffer holds the stage's tensors in llm.c order; a sharded one this
 * replica's shards, unit after unit (remat_stage_units' order; i must then
 * be one it owns). On a stage with the head but not the embedding, unit
 * L + 2 is the head's copy of the tied matrix, in every buffer
 * (REMAT_BUF_TIED_GRAD names its gradient too). */
float *remat__model_unit_at(remat_model *m, int buf, int64_t u, size_t i, size_t *run);
/* 1 when the buffer holds only this replica's shards. */
int remat__model_buf_sharded(const remat_model *m, int buf);
/* This replica's shard of unit u in a sharded buffer: remat_unit_shard
 * floats, its part first, then zeros up to the shard's size. */
float *remat__model_shard(remat_model *m, int buf, int64_t u);
/* The chunk sums (remat/memory.h) of [first, first + count) of unit u's
 * gradient, first a multiple of REMAT_SHARD_QUANTUM; returns how many. */
int64_t remat__model_grad_chunk_sums(remat_model *m, int64_t u, size_t first, size_t count,
                                     double *out);

/* --------------------------------------------------- tensor parallelism */

/* A tensor rank (remat_config.tensor_parallel t > 1) holds its shard of
 * the model (config/family.h's splits, Megatron-LM's layout): a block runs
 * its heads and its share of the MLP, the head and the embedding its share
 * of the vocabulary. Its runtime gives it the group's collectives, which
 * every rank of the group calls in the same order:
 *   sum      buf (n floats, this rank's part) becomes the sum of the t
 *            parts, added in rank order 0, 1, ..., t - 1 on every rank, so
 *            every rank holds the same bits, the same on every repeat;
 *            scratch: 2 ceil(n / t) floats of the model's, free meanwhile
 *   sum_f64  the same for doubles (scratch: 2 ceil(n / t) doubles)
 *   max      buf becomes the elementwise largest of the t parts (exact)
 * and under sequence parallelism (n a multiple of t, chunk k = floats
 * [k n / t, (k + 1) n / t), a rank's rows of the residual stream):
 *   scatter  sum's first half: dst (n / t floats, apart from buf) gets this
 *            rank's chunk of the sum, the same bits as sum's; rcv: n / t
 *            floats of scratch; buf is left undefined
 *   gather   sum's second half: each rank's chunk of buf, in place, to
 *            every rank
 * buf and scratch are backend memory. rank: this rank's place in the
 * group, 0 .. t - 1, which decides the shard it initialises. */
typedef struct remat__tensor_ops {
  void (*sum)(void *ctx, float *buf, size_t n, float *scratch);
  void (*sum_f64)(void *ctx, double *buf, size_t n, double *scratch);
  void (*max)(void *ctx, float *buf, size_t n);
  void (*scatter)(void *ctx, float *buf, size_t n, float *dst, float *rcv);
  void (*gather)(void *ctx, float *buf, size_t n);
  void *ctx;
  int64_t rank;
} remat__tensor_ops;
void remat__model_set_tensor_ops(remat_model *m, const remat__tensor_ops *ops);
/* A tensor rank timed alone (the calibration's): rank 0 of a group whose
 * collectives do nothing, so its layers take its shard's compute time;
 * its values are not a model's. */
void remat__model_tensor_alone(remat_model *m);
/* Tensor rank `rank`'s parameters of stage st (NULL: the whole model;
 * flat, in order, each tensor as remat__tensors shapes it under cfg, cut
 * to the stage as remat__stage_param_sizes cuts it) to (to_full) or from
 * the whole model's (remat_param_count of cfg without tensor
 * parallelism). The model's own: remat__model_params_to_full and
 * _from_full. */
void remat__tensor_params_copy(const remat_config *cfg, const remat_stage *st, int64_t rank,
                               float *flat, float *full, int to_full);
/* remat__model_grad_sumsq_layers in two parts, a layer's tensors a tensor
 * rank holds a shard of (split) and those it holds whole: a layer's sum is
 * its split sums over the group plus one rank's whole sum. Each part is its
 * chunks' sums (remat__model_grad_chunk_sums_part over the whole unit)
 * added in order, so replicas that own the chunks (ZeRO 1, 2) add up to
 * the same bits. */
int64_t remat__model_grad_sumsq_layers_split(const remat_model *m, double *split,
                                             double *whole);
/* remat__model_grad_chunk_sums restricted to the unit's split tensors
 * (split 1) or its whole ones (0): each chunk's sum of their floats in it
 * (0 for a chunk with none). */
int64_t remat__model_grad_chunk_sums_part(remat_model *m, int64_t u, size_t first, size_t count,
                                          int split, double *out);

/* ------------------------------------------------------- pipeline stages */

/* A model of one pipeline stage (remat/memory.h's remat_stage): its blocks,
 * the embedding and/or the head, n micro-batches in flight, each in a slot.
 * Its parameter buffers hold only its tensors, in llm.c order, each cut to
 * its blocks; a stage with the head but not the embedding holds its own copy
 * of the tied token embedding. */
int remat__model_create_stage(remat_model **out, const remat_config *cfg, int64_t B,
                              int64_t T, const remat_stage *st, remat_error *err);
size_t remat__stage_num_params(const remat_config *cfg, const remat_stage *st);
/* View of one parameter tensor (REMAT_P_*) as the stage holds it, and its
 * length in floats; NULL (0) when the stage does not hold it. */
float *remat__model_tensor(remat_model *m, int tensor, size_t *floats);
float *remat__model_tensor_grad(remat_model *m, int tensor);
/* Token ids of the micro-batch in a slot: inputs on a stage with the
 * embedding, targets on a stage with the head (else NULL). */
int32_t *remat__model_slot_inputs(remat_model *m, int64_t slot);
int32_t *remat__model_slot_targets(remat_model *m, int64_t slot);
/* (B, T, C): where a stage without the embedding receives its input, per
 * slot; where a stage without the head finds its output after a forward. */
float *remat__model_stage_input(remat_model *m, int64_t slot);
float *remat__model_stage_output(remat_model *m);
/* (B, T, C) gradient of the residual stream: a stage without the head
 * receives the gradient of its output here before a backward; after it,
 * a stage without the embedding finds the gradient of its input here. */
float *remat__model_dresid(remat_model *m);
/* Scratch that is free between steps (after the backwards and the sends,
 * before the next step's forwards), for exchanging gradients through: the
 * transient workspace or the send buffer, whichever is larger. */
float *remat__model_workspace(remat_model *m, size_t *bytes);
/* A region of the arena (remat_buf) and its size; NULL when empty. */
void *remat__model_region(remat_model *m, int buf, size_t *bytes);
/* A stage's parameters (remat_model_num_params floats, as remat_model_params
 * holds them) to and from a whole model's buffer in llm.c order
 * (remat_param_count floats): the stage's tensors and slices only; for a
 * replica under ZeRO 3, its shards. */
void remat__stage_params_to_full(const remat_config *cfg, const remat_stage *st,
                                 const float *stage_params, float *full);
void remat__stage_params_from_full(const remat_config *cfg, const remat_stage *st,
                                   const float *full, float *stage_params);
/* The same, for a model's own parameters, through windows its backend
 * lends (the host touches backend memory only so); a tensor rank's, its
 * shard (remat__tensor_params_copy). */
void remat__model_params_to_full(remat_model *m, float *full);
void remat__model_params_from_full(remat_model *m, const float *full);
/* Forward of the micro-batch in `slot` through the embedding (if held) and
 * the blocks; micro numbers it within the step for dropout. */
void remat__model_stage_forward(remat_model *m, int64_t slot, uint32_t micro,
                                const remat_hparams *hp);
/* Backward of the micro-batch in `slot`: the head (forward, loss, backward;
 * if held), the blocks in reverse with recomputation, the embedding (if
 * held). Returns the summed loss over its B x T tokens on a stage with the
 * head, else 0. */
double remat__model_stage_backward(remat_model *m, int64_t slot, uint32_t micro,
                                   float dloss, const remat_hparams *hp);
/* The same backward in a zero-bubble schedule's two parts, for a stage
 * planned with wdeferred > 0. B (_input): the head, the embedding and the
 * blocks that rebuild their internals (recompute, middle) whole, the kept
 * blocks' input gradients, each kept block's W record filled in record
 * wslot (0 .. wdeferred - 1), so the slot is free after it; returns what
 * remat__model_stage_backward returns. W (_weight), later: the kept
 * blocks' weight gradients from the records in wslot alone. Bs and Ws each
 * run in micro-batch order, so the step's gradients are a whole
 * backward's, bit for bit. A block kept in any slot (remat_stage.full_slots)
 * counts as kept here in every slot: where its slot does not keep it, its B
 * rebuilds it first and fills its record all the same. */
double remat__model_stage_backward_input(remat_model *m, int64_t slot, int64_t wslot,
                                         uint32_t micro, float dloss, const remat_hparams *hp);
void remat__model_stage_backward_weight(remat_model *m, int64_t wslot, uint32_t micro,
                                        const remat_hparams *hp);

#endif
