/* train.c: the trainer. The step sequence lives here and only here: zero the
 * gradients, K micro-batches of forward and backward, the gradient hook, the
 * global norm, clipping and AdamW at the scheduled learning rate. The command
 * line, the benchmarks and the tests all run steps through it. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "train/train_internal.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif


void remat_train_opts_default(remat_train_opts *o) {
  memset(o, 0, sizeof *o);
  o->B = 8;
  o->T = 64;
  o->grad_accum = 1;
  o->steps = 300;
  o->lr = 3e-4;
  remat_hparams_default(&o->hp);
  o->shuffle = 1;
  o->eval_batches = 8;
}

float remat_train_lr(const remat_train_opts *o, int64_t step) {
  double lr = o->lr;
  if (o->warmup > 0 && step < o->warmup)
    return (float)(lr * (double)(step + 1) / (double)o->warmup);
  if (o->cosine && o->steps > o->warmup) {
    double p = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
    return (float)(lr * (0.1 + 0.9 * 0.5 * (1.0 + cos(M_PI * p))));
  }
  return (float)lr;
}

/* Each value is named as remat train's flag and a checkpoint's settings
 * name it, for the message. A float's limits are stated as comparisons that
 * NaN fails. */
int remat_train_opts_check(const remat_train_opts *o, remat_error *err) {
  const remat_hparams *hp = &o->hp;
  if (o->B < 1 || o->T < 1)
    return remat__errorf(err, REMAT_EINVAL, "batch %lld, seq %lld: a micro-batch needs at least "
                         "one sequence of one token", (long long)o->B, (long long)o->T);
  if (o->grad_accum < 1 || o->grad_accum > (1 << 20))
    return remat__errorf(err, REMAT_EINVAL, "grad-accum %lld micro-batches per step; it must be "
                         "1 to 2^20", (long long)o->grad_accum);
  if (o->steps < 0 || o->warmup < 0)
    return remat__errorf(err, REMAT_EINVAL, "steps %lld, warmup %lld: step counts must not be "
                         "negative", (long long)o->steps, (long long)o->warmup);
  if (!(o->lr >= 0 && isfinite(o->lr)))
    return remat__errorf(err, REMAT_EINVAL, "lr %g must be a number, 0 or more", o->lr);
  if (!(o->val_frac >= 0 && o->val_frac < 1))
    return remat__errorf(err, REMAT_EINVAL, "val-frac %g (the held-out fraction) must lie in "
                         "[0, 1)", o->val_frac);
  if (o->val_frac > 0 && o->eval_batches < 1)
    return remat__errorf(err, REMAT_EINVAL, "eval-batches %lld: an evaluation needs at least one "
                         "batch", (long long)o->eval_batches);
  if (!(hp->dropout >= 0 && hp->dropout < 1))
    return remat__errorf(err, REMAT_EINVAL, "dropout %g must lie in [0, 1)", hp->dropout);
  if (!(hp->beta1 >= 0 && hp->beta1 < 1) || !(hp->beta2 >= 0 && hp->beta2 < 1))
    return remat__errorf(err, REMAT_EINVAL, "AdamW's beta1 %g and beta2 %g must lie in [0, 1)",
                         hp->beta1, hp->beta2);
  if (!(hp->eps > 0 && isfinite(hp->eps)))
    return remat__errorf(err, REMAT_EINVAL, "AdamW's eps %g must be a number above 0", hp->eps);
  if (!(hp->weight_decay >= 0 && isfinite(hp->weight_decay)) ||
      !(hp->grad_clip >= 0 && isfinite(hp->grad_clip)))
    return remat__errorf(err, REMAT_EINVAL, "weight-decay %g and grad-clip %g must be numbers, "
                         "0 or more", hp->weight_decay, hp->grad_clip);
  return 0;
}

int remat_trainer_create(remat_trainer **out, const remat_config *cfg, const uint8_t *policy,
                         const remat_tokens *tok, const remat_train_opts *o, remat_error *err) {
  remat_stage st = remat_stage_whole(cfg, policy);
  return remat_trainer_create_stage(out, cfg, &st, tok, o, err);
}

int remat_trainer_create_stage(remat_trainer **out, const remat_config *cfg,
                               const remat_stage *st, const remat_tokens *tok,
                               const remat_train_opts *o, remat_error *err) {
  *out = NULL;
  int rc = remat_train_opts_check(o, err);
  if (rc) return rc;
  remat_trainer *tr = remat__calloc(1, sizeof *tr);
  if (!tr) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  tr->o = *o;
  tr->dloss = 1.0f / (float)(o->B * o->T * o->grad_accum);
  if (tok) {
    if ((rc = remat_tokens_check_vocab(tok, cfg->vocab_size, err))) goto fail;
    if ((rc = remat__loader_init(&tr->train, tok, o->B, o->T, REMAT_SPLIT_TRAIN, o->val_frac,
                                o->shuffle, o->hp.seed, err)))
      goto fail;
    tr->have_train = 1;
    if (o->val_frac > 0) {
      if ((rc = remat__loader_init(&tr->val, tok, o->B, o->T, REMAT_SPLIT_VAL, o->val_frac, 0,
                                  o->hp.seed, err)))
        goto fail;
      tr->have_val = 1;
    }
  }
  /* several micro-batches a step: each one's gradient is computed apart and
   * added (remat_model_forward_backward says why) */
  remat_stage mine = *st;
  if (o->grad_accum > 1) mine.accumulate = 1;
  if ((rc = remat__model_plan(&tr->model, cfg, o->B, o->T, &mine, err))) goto fail;
  *out = tr;
  return 0;
fail:
  remat_trainer_destroy(tr);
  return rc;
}

void remat_trainer_destroy(remat_trainer *tr) {
  if (!tr) return;
  remat_model_destroy(tr->model);
  if (tr->have_train) remat__loader_free(&tr->train);
  if (tr->have_val) remat__loader_free(&tr->val);
  remat__free(tr);
}

const remat_memplan *remat_trainer_memplan(const remat_trainer *tr) {
  return remat_model_memplan(tr->model);
}

size_t remat_trainer_planned_bytes(const remat_trainer *tr) {
  size_t arena = remat_memplan_peak_bytes(remat_model_memplan(tr->model));
  return tr->allocated ? remat__heap_live() : remat__heap_live() + arena;
}

int remat_trainer_allocate(remat_trainer *tr, remat_error *err) {
  int rc = remat__model_allocate(tr->model, err);
  tr->allocated = rc == 0;
  remat__heap_reset_peak(); /* the measured peak counts from here */
  return rc;
}

remat_model *remat_trainer_model(remat_trainer *tr) { return tr->model; }

void remat_trainer_set_batches(remat_trainer *tr, remat_batch_fn fn, void *ctx) {
  tr->batch_fn = fn;
  tr->batch_ctx = ctx;
}

void remat_trainer_set_hook(remat_trainer *tr, remat_grad_hook fn, void *ctx) {
  tr->ops = (remat__trainer_ops){.after_backward = fn, .ctx = ctx};
}

void remat__trainer_set_ops(remat_trainer *tr, const remat__trainer_ops *ops) { tr->ops = *ops; }

remat__trainer_ops remat__trainer_get_ops(const remat_trainer *tr) { return tr->ops; }

void remat__trainer_set_companions(remat_trainer *tr, remat_model *const *m, int n) {
  REMAT_ASSERT(n >= 0 && n <= REMAT__MAX_COMPANIONS);
  for (int i = 0; i < n; i++) tr->companions[i] = m[i];
  tr->num_companions = n;
}

const remat_train_opts *remat_trainer_opts(const remat_trainer *tr) { return &tr->o; }

/* A window on a micro-batch's token ids in the model's memory (B x T
 * int32), for the host to write them; NULL stays NULL. */
static int32_t *map_tokens(const remat_trainer *tr, int32_t *ids) {
  size_t bytes = (size_t)(tr->o.B * tr->o.T) * sizeof(int32_t);
  return ids ? remat__model_backend(tr->model)->map(ids, bytes, REMAT_MAP_WRITE) : NULL;
}

static void unmap_tokens(const remat_trainer *tr, int32_t *ids, int32_t *host) {
  size_t bytes = (size_t)(tr->o.B * tr->o.T) * sizeof(int32_t);
  if (ids) remat__model_backend(tr->model)->unmap(ids, host, bytes, REMAT_MAP_WRITE);
}

/* The next micro-batch's inputs and targets (either may be NULL), written
 * into the model's memory through windows its backend lends. */
static int next_batch(remat_trainer *tr, remat_loader *L, int64_t micro, int32_t *inputs,
                      int32_t *targets, remat_error *err) {
  int32_t *in = map_tokens(tr, inputs), *tg = map_tokens(tr, targets);
  int rc = 0;
  if (L)
    remat_loader_next(L, in, tg);
  else
    rc = tr->batch_fn(tr->batch_ctx, remat_model_step(tr->model), micro, in, tg, err);
  unmap_tokens(tr, targets, tg);
  unmap_tokens(tr, inputs, in);
  return rc;
}

int remat__trainer_next_batch(remat_trainer *tr, int64_t micro, int32_t *inputs, int32_t *targets,
                              remat_error *err) {
  if (tr->batch_fn) return next_batch(tr, NULL, micro, inputs, targets, err);
  if (!tr->have_train)
    return remat__errorf(err, REMAT_EINVAL, "the trainer has no data: give it tokens or batches");
  return next_batch(tr, &tr->train, micro, inputs, targets, err);
}

float remat__trainer_dloss(const remat_trainer *tr) { return tr->dloss; }

int64_t remat_trainer_steps_done(const remat_trainer *tr) { return remat_model_step(tr->model); }

int64_t remat_trainer_train_windows(const remat_trainer *tr) {
  return tr->have_train ? remat_loader_windows(&tr->train) : 0;
}


static int diverged(remat_trainer *tr, double loss, int64_t step, remat_error *err) {
  float *at = remat_model_params(tr->model);
  size_t P = remat_model_num_params(tr->model);
  const remat__backend *be = remat__model_backend(tr->model);
  const float *params = be->map(at, P * sizeof(float), REMAT_MAP_READ);
  size_t bad = P;
  for (size_t i = 0; i < P && bad == P; i++)
    if (!(fabsf(params[i]) <= REMAT_PARAM_OVERFLOW_LIMIT)) bad = i;
  double w = bad < P ? (double)params[bad] : 0.0;
  be->unmap(at, (void *)params, P * sizeof(float), REMAT_MAP_READ);
  if (bad < P)
    return remat__errorf(err, REMAT_ENUMERIC,
                         "the loss is %g at step %lld because the weights overflow: parameter "
                         "%zu is %g",
                         loss, (long long)step, bad, w);
  return remat__errorf(err, REMAT_ENUMERIC,
                       "the loss is %g at step %lld: training diverged at learning rate %g", loss,
                       (long long)step, (double)remat_train_lr(&tr->o, step - 1));
}

int remat_trainer_step(remat_trainer *tr, remat_step_stats *st, remat_error *err) {
  remat_model *m = tr->model;
  REMAT_ASSERT(tr->allocated);
  const remat_train_opts *o = &tr->o;
  int64_t step = remat_model_step(m); /* 0-based number of this step */
  double t0 = remat__now();
  remat__model_take_recompute_seconds(m);
  for (int i = 0; i < tr->num_companions; i++)
    remat__model_take_recompute_seconds(tr->companions[i]);
  remat_model_zero_grad(m);
  double loss = 0;
  int rc;
  if (tr->ops.micro_batches) {
    if ((rc = tr->ops.micro_batches(tr->ops.ctx, tr, &loss, err))) return rc;
  } else {
    for (int64_t k = 0; k < o->grad_accum; k++) {
      if ((rc = remat__trainer_next_batch(tr, k, remat_model_inputs(m), remat_model_targets(m),
                                          err)))
        return rc;
      loss += remat_model_forward_backward(m, (uint32_t)k, tr->dloss, &o->hp);
    }
  }
  loss /= (double)o->grad_accum;
  if (tr->ops.after_backward && (rc = tr->ops.after_backward(tr->ops.ctx, tr, err))) return rc;
  float lr = remat_train_lr(o, step);
  remat_model_sum_tied(m);
  double sumsq;
  if (tr->ops.norm_sumsq) {
    double part[4096 + 2];
    /* a replica holds shards: its op sums them (remat__model_grad_chunk_sums) */
    int64_t n = remat_model_stage(m)->replicas > 1 ? 0 : remat__model_grad_sumsq_layers(m, part);
    if ((rc = tr->ops.norm_sumsq(tr->ops.ctx, tr, part, n, &sumsq, err))) return rc;
  } else {
    sumsq = remat_model_grad_sumsq(m);
  }
  float norm = (float)sqrt(sumsq);
  if (tr->ops.update) {
    if ((rc = tr->ops.update(tr->ops.ctx, tr, lr, norm, err))) return rc;
  } else {
    remat_model_update(m, &o->hp, lr, norm);
  }
  st->step = remat_model_step(m);
  st->loss = loss;
  st->lr = lr;
  st->grad_norm = norm;
  st->seconds = remat__now() - t0;
  st->recompute_seconds = remat__model_take_recompute_seconds(m);
  for (int i = 0; i < tr->num_companions; i++)
    st->recompute_seconds += remat__model_take_recompute_seconds(tr->companions[i]);
  if (!isfinite(loss) || !isfinite(norm)) return diverged(tr, loss, remat_model_step(m), err);
  return 0;
}

int remat_trainer_set_eval_tokens(remat_trainer *tr, const remat_tokens *val, remat_error *err) {
  if (tr->have_val)
    return remat__errorf(err, REMAT_EINVAL, "the trainer holds tokens out of its data already "
                         "(val-frac %g): give the held-out share 0 with tokens of their own",
                         tr->o.val_frac);
  const remat_config *cfg = remat_model_config(tr->model);
  int rc = remat_tokens_check_vocab(val, cfg->vocab_size, err);
  /* in order, never shuffled: no order table, nothing allocated */
  if (!rc) rc = remat__loader_init(&tr->val, val, tr->o.B, tr->o.T, REMAT_SPLIT_TRAIN, 0.0, 0,
                                   tr->o.hp.seed, err);
  if (!rc) tr->have_val = 1;
  return rc;
}

int remat_trainer_evaluate(remat_trainer *tr, double *loss, remat_error *err) {
  if (!remat_model_stage(tr->model)->has_embedding || !remat_model_stage(tr->model)->has_head)
    return remat__errorf(err, REMAT_EINVAL, "evaluation runs on the whole model only");
  if (!tr->have_val)
    return remat__errorf(err, REMAT_EINVAL, "no held-out split: the held-out fraction is 0");
  remat_model *m = tr->model;
  remat_loader_reset(&tr->val);
  double sum = 0;
  for (int64_t e = 0; e < tr->o.eval_batches; e++) {
    next_batch(tr, &tr->val, e, remat_model_inputs(m), remat_model_targets(m), NULL);
    sum += remat_model_eval(m);
  }
  *loss = sum / (double)tr->o.eval_batches;
  return 0;
}

size_t remat_trainer_measured_peak_bytes(remat_trainer *tr) {
  size_t arena = remat_memplan_peak_bytes(remat_model_memplan(tr->model));
  return remat_model_arena_high_water(tr->model) + (remat__heap_peak() - arena);
}
