/* train_runtime.h: the trainer's interface to the runtimes above it
 * (src/parallel): how a step reaches beyond this process. A pipeline stage
 * or a replica is the same trainer with a different slice of the model and
 * these hooks. Not installed, not part of the API (docs/architecture.md
 * lists the interface headers). */
#ifndef REMAT_TRAIN_RUNTIME_H
#define REMAT_TRAIN_RUNTIME_H

#include "remat/train.h"

/* The hooks; each may be NULL (the one-process behaviour). */
typedef struct remat__trainer_ops {
  /* Runs the step's K micro-batches through the model instead of the local
   * loop (a pipeline's schedule); adds each micro-batch's mean loss, as far
   * as this rank knows it, to *loss_sum. */
  int (*micro_batches)(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err);
  /* the gradient hook (remat_trainer_set_hook) */
  remat_grad_hook after_backward;
  /* The squared global gradient norm from this rank's per-layer sums
   * (remat__model_grad_sumsq_layers), added over all layers of the model in
   * model order. A replica gets none (n = 0) and sums its shards. */
  int (*norm_sumsq)(void *ctx, remat_trainer *tr, const double *layer_sumsq, int64_t n,
                    double *total, remat_error *err);
  /* The update instead of remat_model_update (which it calls): a replica
   * updates its shards and shares the result. */
  int (*update)(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err);
  void *ctx;
} remat__trainer_ops;
void remat__trainer_set_ops(remat_trainer *tr, const remat__trainer_ops *ops);
/* The ops set (a runtime that wraps another's keeps them). */
remat__trainer_ops remat__trainer_get_ops(const remat_trainer *tr);

/* A pipeline rank that runs several model chunks (interleaved, zbv) steps
 * the others itself (its ops), but their AdamW moments travel in the
 * trainer's state file, after its own model's, chunk by chunk in order, and
 * a loaded state sets their step too. At most REMAT__MAX_COMPANIONS. */
#define REMAT__MAX_COMPANIONS 63
void remat__trainer_set_companions(remat_trainer *tr, remat_model *const *m, int n);

/* The CRC32C of the model file written at this step, recorded by the next
 * state saved (and by that one only), which a resume from the checkpoint
 * directory holding both then requires of its model.bin. */
void remat__trainer_bind_model(remat_trainer *tr, uint32_t crc);

/* The next micro-batch of this step (micro = 0..K-1) from the loader or the
 * caller's batches; inputs or targets may be NULL when not needed. */
int remat__trainer_next_batch(remat_trainer *tr, int64_t micro, int32_t *inputs,
                              int32_t *targets, remat_error *err);
/* 1 / (B T K): each token's weight in the step's mean loss. */
float remat__trainer_dloss(const remat_trainer *tr);

#endif
