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

/* GPT-2 over one arena, laid out by a remat_memplan before anything
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
/* The plan the arena was laid out by (remat_memplan_peak_bytes: the
 * arena's size). */
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
/* The squared global gradient norm: the sum, in model order, of each
 * layer's sum of squares, each the sum of its unit's chunk sums
 * (remat/memory.h). Not for a replica, which holds only its own shards. */
REMAT_API double remat_model_grad_sumsq(const remat_model *m);
/* Scales gradients by min(1, grad_clip / (norm + 1e-6)) inside AdamW with
 * learning rate lr, and increments the step. norm is the global gradient
 * norm, sqrt of the squared norm above, as a float. A replica under ZeRO 1
 * to 3 updates only the parameters it owns (its shards of every unit). */
REMAT_API void remat_model_update(remat_model *m, const remat_hparams *hp, float lr, float norm);

/* The stage the model runs (remat/memory.h's remat_stage; the whole model
 * in one process): a pipeline stage's or a replica's model, which the
 * runtimes of remat/parallel.h make through a trainer, holds only its
 * tensors, in llm.c order, each cut to its blocks. */
REMAT_API const remat_stage *remat_model_stage(const remat_model *m);
/* Floats in each of the stage's parameter, gradient and moment buffers. */
REMAT_API size_t remat_model_num_params(const remat_model *m);

/* Highest arena byte written so far (the arena is filled with a poison
 * pattern at init and scanned downward from the top). */
REMAT_API size_t remat_model_arena_high_water(remat_model *m);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MODEL_H */
