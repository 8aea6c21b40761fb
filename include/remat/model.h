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
 *             (discarded)
 *   head:     final layernorm, logits, loss, and their backward
 *   backward: blocks L-1..0; a recomputed block first reruns its forward
 *             into the scratch (bit-identical: same kernels, same inputs, same
 *             dropout counters), then runs its backward; encoder backward
 *   update:   optional global-norm clipping, AdamW
 * Nothing in a step allocates: every buffer is a view into the arena. Most
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

void remat_hparams_default(remat_hparams *hp);

typedef struct remat_model remat_model; /* opaque */

/* Plans and allocates the arena; parameters are zero until initialised or
 * loaded. policy: (L) remat_policy per block, NULL keeps every block. */
int remat_model_create(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                       const uint8_t *policy, remat_error *err);
void remat_model_destroy(remat_model *m);

const remat_config *remat_model_config(const remat_model *m);
/* The plan the arena was laid out by (its peak_bytes is the arena's size). */
const remat_memplan *remat_model_memplan(const remat_model *m);
/* All parameters in llm.c's order (the checkpoint body), their gradients,
 * and AdamW's moments: remat_param_count floats each. */
float *remat_model_params(remat_model *m);
float *remat_model_grads(remat_model *m);
float *remat_model_adam_m(remat_model *m);
float *remat_model_adam_v(remat_model *m);
/* (B, T) token ids of the next micro-batch: fill before a forward. */
int32_t *remat_model_inputs(remat_model *m);
int32_t *remat_model_targets(remat_model *m);
/* Optimizer steps taken (the AdamW bias correction's t). */
int64_t remat_model_step(const remat_model *m);
void remat_model_set_step(remat_model *m, int64_t step);
/* Seconds spent recomputing since the last call; resets the count. */
double remat_model_take_recompute_seconds(remat_model *m);

/* GPT-2 initialisation: normal(0, 0.02) weights, residual projections scaled
 * by 1/sqrt(2L), zero biases, unit layernorm gains; rows of wte past V zero. */
void remat_model_init_weights(remat_model *m, uint64_t seed);

/* Forward, loss and backward of the micro-batch in inputs and targets.
 * Parameter gradients accumulate with weight dloss per token (1 / (B*T*K)
 * for the mean over K micro-batches); micro numbers the micro-batch within
 * the step for the dropout stream. Returns the mean loss of this micro-batch. */
float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                   const remat_hparams *hp);
/* Forward and loss only (no dropout, no gradients): for evaluation. */
float remat_model_eval(remat_model *m);

void remat_model_zero_grad(remat_model *m);
/* The global gradient norm, summed in one fixed order. */
float remat_model_grad_norm(const remat_model *m);
/* Scales gradients by min(1, grad_clip / (norm + 1e-6)) inside AdamW with
 * learning rate lr, and increments the step. norm is remat_model_grad_norm's. */
void remat_model_update(remat_model *m, const remat_hparams *hp, float lr, float norm);

/* Highest arena byte written so far (the arena is filled with a poison
 * pattern at init and scanned downward from the top). */
size_t remat_model_arena_high_water(remat_model *m);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MODEL_H */
