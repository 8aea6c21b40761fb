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

/* ------------------------------------------------------------- training */

/*  * Life of a step (one micro-batch shown; gradients accumulate over K):
 *   forward:  encoder -> blocks 0..L-1; a kept block writes its internals to
 *             its own slot, a recomputed one to the shared scratch (discarded)
 *   head:     final layernorm, logits, loss, and their backward
 *   backward: blocks L-1..0; a recomputed block first reruns its forward
 *             into the scratch (bit-identical: same kernels, same inputs, same
 *             dropout counters), then runs its backward; encoder backward
 *   update:   optional global-norm clipping, AdamW
 * Nothing in a step allocates: every buffer is a view into the arena laid out
 * by remat_memplan_build.
 */
typedef struct remat_hparams {
  float lr;           /* peak learning rate */
  float beta1, beta2, eps;
  float weight_decay; /* applied to matrices and embeddings, not to biases or norms */
  float grad_clip;    /* global-norm clip; 0 disables */
  float dropout;      /* attention-probability and residual-branch dropout; 0 disables */
  uint64_t seed;      /* dropout stream */
} remat_hparams;

void remat_hparams_default(remat_hparams *hp);

typedef struct remat_model {
  remat_config cfg;
  remat_memplan mp;
  int64_t B, T;

  char *arena;        /* mp.peak_bytes, one allocation */
  float *params;      /* all parameters, llm.c order: the checkpoint body */
  float *grads;
  float *adam_m, *adam_v;
  float *p[REMAT_P_COUNT]; /* views of params */
  float *g[REMAT_P_COUNT]; /* views of grads */

  int32_t *inputs;  /* (B, T) fill before a forward */
  int32_t *targets; /* (B, T) */
  float *residual;  /* (L+1, B, T, C): input of block l at l*B*T*C */
  char *kept;       /* kept blocks' internals, mp.block_internal_bytes each */
  float *scratch;   /* one block's internals, for recomputed blocks */
  float *logits;    /* (B, T, Vp) */
  float *dresid;    /* (B, T, C) */
  float *head;      /* the head's buffer (final layernorm, losses, its gradient) */
  float *dblock;    /* one block's activation-gradient temporaries */

  size_t high_water;  /* cache for remat_model_arena_high_water */
  int step;           /* optimizer steps taken */
  double recompute_s; /* seconds spent recomputing, since the last reset */
} remat_model;

/* Plans and allocates the arena; parameters are zero until initialised or
 * loaded. policy: (L) remat_policy per block, NULL keeps every block. */
int remat_model_init(remat_model *m, const remat_config *cfg, int64_t B, int64_t T,
                     const uint8_t *policy, remat_error *err);
void remat_model_free(remat_model *m);

/* GPT-2 initialisation: normal(0, 0.02) weights, residual projections scaled
 * by 1/sqrt(2L), zero biases, unit layernorm gains; rows of wte past V zero. */
void remat_model_init_weights(remat_model *m, uint64_t seed);

/* Forward, loss and backward of one micro-batch already in m->inputs and
 * m->targets. Parameter gradients accumulate with weight dloss per token
 * (1 / (B*T*K) for the mean over K micro-batches). Returns the mean loss of
 * this micro-batch. */
float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                   const remat_hparams *hp);
/* Forward and loss only (no dropout, no gradients): for evaluation. */
float remat_model_eval(remat_model *m);

void remat_model_zero_grad(remat_model *m);
/* Clips (if enabled) and applies AdamW with learning rate lr; increments
 * m->step. Returns the global gradient norm before clipping. */
float remat_model_update(remat_model *m, const remat_hparams *hp, float lr);

/* Highest arena byte written so far (the arena is filled with a poison
 * pattern at init and scanned downward from the top). */
size_t remat_model_arena_high_water(remat_model *m);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MODEL_H */
