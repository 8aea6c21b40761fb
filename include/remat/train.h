/* remat/train.h: the trainer: one object that owns a model, its data, the
 * learning-rate schedule, clipping and the step counter, and runs a step.
 * Part of remat's public API; include "remat.h" for all of it.
 *
 *   remat_train_opts o;  remat_train_opts_default(&o);  o.steps = 100;
 *   remat_trainer *tr;
 *   if (remat_trainer_create(&tr, &cfg, policy, &tokens, &o, &err)) ...
 *   printf("will hold %zu bytes\n", remat_trainer_planned_bytes(tr));
 *   if (remat_trainer_allocate(tr, &err)) ...
 *   remat_model_init_weights(remat_trainer_model(tr), seed);
 *   for (int64_t s = 0; s < o.steps; s++) {
 *     remat_step_stats st;
 *     if (remat_trainer_step(tr, &st, &err)) ...   // st.loss, st.grad_norm, ...
 *   }
 *   remat_trainer_destroy(tr);
 */
#ifndef REMAT_TRAIN_H
#define REMAT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "remat/io.h"
#include "remat/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct remat_train_opts {
  int64_t B, T;         /* micro-batch: B sequences of T tokens */
  int64_t grad_accum;   /* K micro-batches per optimizer step */
  int64_t steps;        /* total optimizer steps: the end of the cosine schedule */
  int64_t warmup;       /* linear warmup steps */
  double lr;            /* peak learning rate */
  int cosine;           /* cosine decay from lr to 10% of it at `steps` */
  remat_hparams hp;     /* AdamW, clipping, dropout */
  int shuffle;          /* shuffled windows, seeded by hp.seed (else in order) */
  double val_frac;      /* the last val_frac of the tokens are held out; 0: none */
  int64_t eval_batches; /* batches per remat_trainer_evaluate */
} remat_train_opts;

/* B 8, T 64, K 1, 300 steps, no warmup, constant lr 3e-4, remat_hparams_default,
 * shuffled, no held-out split, 8 evaluation batches. */
REMAT_API void remat_train_opts_default(remat_train_opts *o);

/* 0 when the trainer accepts o (what remat_trainer_create checks first),
 * else REMAT_EINVAL with the first value out of its range, named as remat
 * train's flags and a checkpoint's settings name it: positive shapes and
 * micro-batches, step counts not negative, finite rates, AdamW's betas in
 * [0, 1) and its eps above 0, dropout and the held-out share in [0, 1). */
REMAT_API int remat_train_opts_check(const remat_train_opts *o, remat_error *err);

/* The learning rate of optimizer step `step` (0-based): linear warmup to
 * lr over `warmup` steps, then constant or cosine to 10% at `steps`. */
REMAT_API float remat_train_lr(const remat_train_opts *o, int64_t step);

typedef struct remat_trainer remat_trainer; /* opaque */

/* Plans the model's arena for the per-block policy (NULL: keep every block)
 * and sets up the data: tok (borrowed; it must outlive the trainer) is cut
 * into a training split and, when o->val_frac > 0, a held-out split. With
 * tok NULL the caller supplies batches (remat_trainer_set_batches) before
 * the first step. Nothing large is allocated yet. */
REMAT_API int remat_trainer_create(remat_trainer **out, const remat_config *cfg,
                                   const uint8_t *policy, const remat_tokens *tok,
                                   const remat_train_opts *o, remat_error *err);
REMAT_API void remat_trainer_destroy(remat_trainer *tr);

/* The plan of the arena, and every byte the library will hold once the
 * arena is allocated: the arena plus what it holds outside it now (the
 * data, the loaders, the plan's bookkeeping). After remat_trainer_allocate
 * the library holds exactly this. */
REMAT_API const remat_memplan *remat_trainer_memplan(const remat_trainer *tr);
REMAT_API size_t remat_trainer_planned_bytes(const remat_trainer *tr);

/* Allocates the arena. Parameters are zero: initialise or load them through
 * remat_model_params(remat_trainer_model(tr)). */
REMAT_API int remat_trainer_allocate(remat_trainer *tr, remat_error *err);
REMAT_API remat_model *remat_trainer_model(remat_trainer *tr);

/* Batches from the caller instead of the loader: fn fills inputs and
 * targets (B, T) of micro-batch `micro` of optimizer step `step` (0-based)
 * and returns 0, or a remat_errno that stops the step. */
typedef int (*remat_batch_fn)(void *ctx, int64_t step, int64_t micro, int32_t *inputs,
                              int32_t *targets, remat_error *err);
REMAT_API void remat_trainer_set_batches(remat_trainer *tr, remat_batch_fn fn, void *ctx);

/* Called once per step between the last backward and the update, with the
 * accumulated gradients in remat_model_grads: where gradients are reduced
 * across replicas or exchanged between stages. Returns 0 or a remat_errno. */
typedef int (*remat_grad_hook)(void *ctx, remat_trainer *tr, remat_error *err);
REMAT_API void remat_trainer_set_hook(remat_trainer *tr, remat_grad_hook fn, void *ctx);

/* A trainer for one pipeline stage (its blocks, policies, micro-batches in
 * flight, embedding and/or head) or one data-parallel replica
 * (remat_stage_replica); otherwise as remat_trainer_create. With
 * grad_accum >= 2 the stage accumulates (remat_stage.accumulate). */
REMAT_API int remat_trainer_create_stage(remat_trainer **out, const remat_config *cfg,
                                         const remat_stage *st, const remat_tokens *tok,
                                         const remat_train_opts *o, remat_error *err);
REMAT_API const remat_train_opts *remat_trainer_opts(const remat_trainer *tr);

typedef struct remat_step_stats {
  int64_t step;             /* optimizer steps taken, this one included */
  double loss;              /* mean over the step's K micro-batches */
  float lr;                 /* learning rate of this step */
  float grad_norm;          /* global gradient norm before clipping */
  double seconds;           /* wall time of the step */
  double recompute_seconds; /* of which recomputing */
} remat_step_stats;

/* One optimizer step: zero gradients; K times next batch, forward and
 * backward; the hook; clipping and AdamW. Never allocates. A loss that is not
 * finite returns REMAT_ENUMERIC with the step, and says whether the weights
 * themselves overflow. */
REMAT_API int remat_trainer_step(remat_trainer *tr, remat_step_stats *st, remat_error *err);

/* Mean loss over the first o->eval_batches batches of the held-out split
 * (the same batches every call, so figures compare); no dropout. */
REMAT_API int remat_trainer_evaluate(remat_trainer *tr, double *loss, remat_error *err);
/* Evaluation on tokens of their own (a validation shard: val, borrowed, must
 * outlive tr) instead of a held-out split of the training tokens, which must
 * then hold nothing out (o->val_frac 0): its first windows of T+1 tokens in
 * order, as the held-out split's. Before the first step; allocates nothing. */
REMAT_API int remat_trainer_set_eval_tokens(remat_trainer *tr, const remat_tokens *val,
                                            remat_error *err);

/* Optimizer steps taken. */
REMAT_API int64_t remat_trainer_steps_done(const remat_trainer *tr);

/* Windows of T+1 tokens in the training split (epoch 0): when fewer than B,
 * rows of one batch repeat. */
REMAT_API int64_t remat_trainer_train_windows(const remat_trainer *tr);

/* The most bytes the library has held at once since the first step: the
 * arena's measured high-water mark plus every byte held outside it. Equal
 * to remat_trainer_planned_bytes when the plan is right. */
REMAT_API size_t remat_trainer_measured_peak_bytes(remat_trainer *tr);

/* ------------------------------------------------------------- resuming */

/* This rank's training state (AdamW moments, step, the loader's position,
 * the settings that must match) to a state file, and back: loading checks
 * the settings and the stage layout against this trainer and says which
 * differs. The weights go in an llm.c checkpoint beside it. */
REMAT_API int remat_trainer_save_state(remat_trainer *tr, const char *path, int rank, int ranks,
                                       remat_error *err);
REMAT_API int remat_trainer_load_state(remat_trainer *tr, const char *path, int rank, int ranks,
                                       remat_error *err);
/* Only the check: whether the state at path was saved by a run with these
 * settings and layout (before anything large is allocated). When the state
 * lies in a checkpoint directory with a DONE, the whole directory must
 * verify too (remat_checkpoint_verify: sizes and checksums of every file,
 * the step and run of every state), so load_state refuses a corrupt or
 * mixed checkpoint before using it. */
REMAT_API int remat_trainer_check_state(remat_trainer *tr, const char *path, int rank, int ranks,
                                        remat_error *err);


#ifdef __cplusplus
}
#endif
#endif /* REMAT_TRAIN_H */
