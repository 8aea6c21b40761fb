/* remat/model.h: GPT-2 over one planned arena: forward, recompute, backward, update.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_MODEL_H
#define REMAT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "remat/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- model */

/* GPT-2 over one arena, laid out by remat_memplan_build before anything
 * runs. Life of a step (one micro-batch shown; gradients accumulate over K):
 *   forward:  encoder -> blocks 0..L-1; a kept block writes its internals to
 *             its own place in the slot, a recomputed one to the scratch
 *             (discarded), a middle one its layernorm and GELU outputs to
 *             the scratch and the rest to the slot
 *   head:     final layernorm, logits, loss, and their backward
 *   backward: blocks L-1..0; a recomputed block first reruns its forward
 *             into the scratch (bit-identical: same kernels, same inputs, same
 *             dropout counters), a middle block its two layernorms and its
 *             GELU, then it runs its backward; encoder backward
 *   update:   optional global-norm clipping, AdamW
 * Nothing in a step allocates: every buffer is a view into the arena. The
 * orders that decide the bits (the sum over micro-batches, the tied
 * embedding's gradient, the norm) are ones a pipeline and data-parallel
 * replicas can follow, so P stages or D replicas give one process's
 * results. Most
 * callers drive the model through a trainer (remat/train.h), which owns the
 * step sequence. */
/* What a step needs besides the learning rate (which a schedule gives per
 * step: remat_train_lr). */
typedef struct remat_hparams {
  float beta1, beta2, eps;
  float weight_decay; /* applied to matrices and embeddings, not to biases or norms */
  float grad_clip;    /* global-norm clip; 0 disables */
  float dropout;      /* attention-probability and residual-branch dropout; 0 disables */
  uint64_t seed;      /* dropout stream */
} remat_hparams;

REMAT_API void remat_hparams_default(remat_hparams *hp);

typedef struct remat_model remat_model; /* opaque */

/* Plans and allocates the arena; parameters are zero until initialised or
 * loaded. policy: (L) remat_policy per block, NULL keeps every block. */
REMAT_API int remat_model_create(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                                 const uint8_t *policy, remat_error *err);
REMAT_API void remat_model_destroy(remat_model *m);

REMAT_API const remat_config *remat_model_config(const remat_model *m);
/* The plan the arena was laid out by (its peak_bytes is the arena's size). */
REMAT_API const remat_memplan *remat_model_memplan(const remat_model *m);
/* All parameters in llm.c's order (the checkpoint body), their gradients,
 * and AdamW's moments: remat_param_count floats each. */
REMAT_API float *remat_model_params(remat_model *m);
REMAT_API float *remat_model_grads(remat_model *m);
REMAT_API float *remat_model_adam_m(remat_model *m);
REMAT_API float *remat_model_adam_v(remat_model *m);
/* (B, T) token ids of the next micro-batch: fill before a forward. */
REMAT_API int32_t *remat_model_inputs(remat_model *m);
REMAT_API int32_t *remat_model_targets(remat_model *m);
/* Optimizer steps taken (the AdamW bias correction's t). */
REMAT_API int64_t remat_model_step(const remat_model *m);
REMAT_API void remat_model_set_step(remat_model *m, int64_t step);
/* Seconds spent recomputing since the last take; take resets the count. */
REMAT_API double remat_model_take_recompute_seconds(remat_model *m);
REMAT_API double remat_model_recompute_seconds(const remat_model *m);

/* GPT-2 initialisation: normal(0, 0.02) weights, residual projections scaled
 * by 1/sqrt(2L), zero biases, unit layernorm gains; rows of wte past V zero. */
REMAT_API void remat_model_init_weights(remat_model *m, uint64_t seed);

/* Forward, loss and backward of the micro-batch in inputs and targets.
 * Parameter gradients accumulate with weight dloss per token (1 / (B*T*K)
 * for the mean over K micro-batches); micro numbers the micro-batch within
 * the step for the dropout stream. Returns the mean loss of this micro-batch.
 *
 * The order of a step's sum over micro-batches, the one every way of running
 * a step follows: the step's gradient is g = ((c_0 + c_1) + c_2) + ...,
 * where c_k is micro-batch k's gradient computed from zero, and added to the
 * running sum layer by layer. The kernels accumulate into their output
 * (sgemm with beta = 1 computes g + A B in an order of its own, which is not
 * g + (A B)), so a model that accumulates (remat_stage.accumulate, set by
 * the trainer when K >= 2) computes a layer's gradient of micro-batch k >= 1
 * into a zeroed layer gradient buffer and then adds it; the first goes
 * straight into the zeroed gradients (0 + c_0 = c_0). The reason: replicas
 * of the model each compute one micro-batch's gradient from zero, and the
 * owner of a shard adds them in replica order, which gives exactly these
 * bits; one process accumulating inside sgemm could not be matched. */
REMAT_API float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                             const remat_hparams *hp);
/* Forward and loss only (no dropout, no gradients): for evaluation. */
REMAT_API float remat_model_eval(remat_model *m);

REMAT_API void remat_model_zero_grad(remat_model *m);
/* Adds the head's gradient of the tied token embedding, summed over the
 * step's micro-batches on its own, to the embedding's: g = g_embedding +
 * g_head. Only a model with both (one process, a replica) has it apart; a
 * no-op otherwise, and after the first call of a step. A replica adds over
 * the elements it owns. The trainer calls it after its gradient hook, before
 * the norm and the update. */
REMAT_API void remat_model_sum_tied(remat_model *m);
/* Sums of squared gradients, one per layer the model holds, in model order
 * (embedding, blocks, head; the tied matrix counted on the embedding), each
 * the sum of its unit's chunk sums (remat/memory.h); returns how many. The
 * squared global norm is their sum in that order: remat_model_grad_sumsq for
 * the whole model. Not for a replica, which holds only its own shards: see
 * remat_model_grad_chunk_sums. */
REMAT_API int64_t remat_model_grad_sumsq_layers(const remat_model *m, double *out);
REMAT_API int64_t remat_model_num_layers(const remat_model *m);
REMAT_API double remat_model_grad_sumsq(const remat_model *m);
/* Scales gradients by min(1, grad_clip / (norm + 1e-6)) inside AdamW with
 * learning rate lr, and increments the step. norm is the global gradient
 * norm, sqrt of the squared norm above, as a float. A replica under ZeRO 1
 * to 3 updates only the parameters it owns (its shards of every unit). */
REMAT_API void remat_model_update(remat_model *m, const remat_hparams *hp, float lr, float norm);

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
typedef struct remat_layer_ops {
  const float *(*params)(void *ctx, int64_t unit, int phase);
  float *(*grad_buf)(void *ctx, int64_t unit);
  void (*grads)(void *ctx, int64_t unit, float *buf);
  void (*progress)(void *ctx);
  void *ctx;
} remat_layer_ops;
REMAT_API void remat_model_set_layer_ops(remat_model *m, const remat_layer_ops *ops);
/* Element i of unit u in one of the model's buffers (REMAT_BUF_PARAMS,
 * REMAT_BUF_GRADS, REMAT_BUF_ADAM_M, REMAT_BUF_ADAM_V; REMAT_BUF_TIED_GRAD
 * for the tied unit), and in *run how many floats follow contiguously. A
 * whole buffer holds the stage's tensors in llm.c order; a sharded one this
 * replica's shards, unit after unit (remat_stage_units' order; i must then
 * be one it owns). On a stage with the head but not the embedding, unit
 * L + 2 is the head's copy of the tied matrix, in every buffer
 * (REMAT_BUF_TIED_GRAD names its gradient too). */
REMAT_API float *remat_model_unit_at(remat_model *m, int buf, int64_t u, size_t i, size_t *run);
/* 1 when the buffer holds only this replica's shards. */
REMAT_API int remat_model_buf_sharded(const remat_model *m, int buf);
/* This replica's shard of unit u in a sharded buffer: remat_unit_shard
 * floats, its part first, then zeros up to the shard's size. */
REMAT_API float *remat_model_shard(remat_model *m, int buf, int64_t u);
/* The chunk sums (remat/memory.h) of [first, first + count) of unit u's
 * gradient, first a multiple of REMAT_SHARD_QUANTUM; returns how many. */
REMAT_API int64_t remat_model_grad_chunk_sums(remat_model *m, int64_t u, size_t first, size_t count,
                                              double *out);

/* ------------------------------------------------------- pipeline stages */

/* A model of one pipeline stage (remat/memory.h's remat_stage): its blocks,
 * the embedding and/or the head, n micro-batches in flight, each in a slot.
 * Its parameter buffers hold only its tensors, in llm.c order, each cut to
 * its blocks; a stage with the head but not the embedding holds its own copy
 * of the tied token embedding. */
REMAT_API int remat_model_create_stage(remat_model **out, const remat_config *cfg, int64_t B,
                                       int64_t T, const remat_stage *st, remat_error *err);
REMAT_API const remat_stage *remat_model_stage(const remat_model *m);
/* Floats in each of the stage's parameter, gradient and moment buffers. */
REMAT_API size_t remat_model_num_params(const remat_model *m);
REMAT_API size_t remat_stage_num_params(const remat_config *cfg, const remat_stage *st);
/* View of one parameter tensor (REMAT_P_*) as the stage holds it, and its
 * length in floats; NULL (0) when the stage does not hold it. */
REMAT_API float *remat_model_tensor(remat_model *m, int tensor, size_t *floats);
REMAT_API float *remat_model_tensor_grad(remat_model *m, int tensor);
/* Token ids of the micro-batch in a slot: inputs on a stage with the
 * embedding, targets on a stage with the head (else NULL). */
REMAT_API int32_t *remat_model_slot_inputs(remat_model *m, int64_t slot);
REMAT_API int32_t *remat_model_slot_targets(remat_model *m, int64_t slot);
/* (B, T, C): where a stage without the embedding receives its input, per
 * slot; where a stage without the head finds its output after a forward. */
REMAT_API float *remat_model_stage_input(remat_model *m, int64_t slot);
REMAT_API float *remat_model_stage_output(remat_model *m);
/* (B, T, C) gradient of the residual stream: a stage without the head
 * receives the gradient of its output here before a backward; after it,
 * a stage without the embedding finds the gradient of its input here. */
REMAT_API float *remat_model_dresid(remat_model *m);
/* Scratch that is free between steps (after the backwards and the sends,
 * before the next step's forwards), for exchanging gradients through: the
 * transient workspace or the send buffer, whichever is larger. */
REMAT_API float *remat_model_workspace(remat_model *m, size_t *bytes);
/* A region of the arena (remat_buf) and its size; NULL when empty. */
REMAT_API void *remat_model_region(remat_model *m, int buf, size_t *bytes);
/* A stage's parameters (remat_model_num_params floats, as remat_model_params
 * holds them) to and from a whole model's buffer in llm.c order
 * (remat_param_count floats): the stage's tensors and slices only; for a
 * replica under ZeRO 3, its shards. */
REMAT_API void remat_stage_params_to_full(const remat_config *cfg, const remat_stage *st,
                                          const float *stage_params, float *full);
REMAT_API void remat_stage_params_from_full(const remat_config *cfg, const remat_stage *st,
                                            const float *full, float *stage_params);
/* Forward of the micro-batch in `slot` through the embedding (if held) and
 * the blocks; micro numbers it within the step for dropout. */
REMAT_API void remat_model_stage_forward(remat_model *m, int64_t slot, uint32_t micro,
                                         const remat_hparams *hp);
/* Backward of the micro-batch in `slot`: the head (forward, loss, backward;
 * if held), the blocks in reverse with recomputation, the embedding (if
 * held). Returns the summed loss over its B x T tokens on a stage with the
 * head, else 0. */
REMAT_API double remat_model_stage_backward(remat_model *m, int64_t slot, uint32_t micro,
                                            float dloss, const remat_hparams *hp);

/* Highest arena byte written so far (the arena is filled with a poison
 * pattern at init and scanned downward from the top). */
REMAT_API size_t remat_model_arena_high_water(remat_model *m);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MODEL_H */
