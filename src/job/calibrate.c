/* calibrate.c: a GPT-2's layer times measured on this machine, for the
 * planner to use instead of FLOP counts at a product rate. A three-block
 * model of the same width (kept, middle, recomputed: one block of each
 * policy) runs single micro-batch steps with its backward in B and W
 * (remat__model_stage_backward_input and _weight), and the model's own
 * timers (remat__model_timers) split each round by kind of layer work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/model_runtime.h"
#include "remat/job.h"
#include "remat/model.h"

enum { FIELDS = 9 };

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* One round's figures (seconds per micro-batch) from the timers' change. */
static void round_figures(const double *d, double f[FIELDS]) {
  f[0] = d[REMAT__T_EMBED_F];
  f[1] = d[REMAT__T_EMBED_B];
  f[2] = d[REMAT__T_BLOCK_F] / 3;                         /* three blocks' forwards */
  f[3] = (d[REMAT__T_BLOCK_B] + d[REMAT__T_BLOCK_W]) / 3; /* B and W of each */
  f[4] = d[REMAT__T_BLOCK_W] / 3;
  f[5] = d[REMAT__T_RECOMPUTE] / 2; /* the full block rebuilds for B and for W */
  f[6] = d[REMAT__T_MIDDLE] / 2;
  f[7] = d[REMAT__T_HEAD_F];
  f[8] = d[REMAT__T_HEAD_B];
}

static void fill_tokens(remat_model *m, int64_t n, int64_t V) {
  int32_t *in = remat__model_slot_inputs(m, 0), *tg = remat__model_slot_targets(m, 0);
  for (int64_t i = 0; i < n; i++) {
    in[i] = (int32_t)((i * 31 + 7) % V);
    tg[i] = (int32_t)((i * 17 + 3) % V);
  }
}

int remat_calibrate(const remat_config *cfg, int64_t B, int64_t T, int rounds,
                    remat_layer_times *t, remat_error *err) {
  memset(t, 0, sizeof *t);
  if (rounds < 1 || rounds > 1000)
    return remat__errorf(err, REMAT_EINVAL, "calibration takes 1 to 1000 rounds, not %d", rounds);
  remat_config c = *cfg;
  c.num_layers = 3;
  const uint8_t policy[3] = {REMAT_KEEP, REMAT_MIDDLE, REMAT_RECOMPUTE};
  remat_stage st = remat_stage_whole(&c, policy);
  st.accumulate = 1;
  st.wdeferred = 1;
  remat_model *m;
  int rc = remat__model_create_stage(&m, &c, B, T, &st, err);
  if (rc) return rc;
  double *all = remat__malloc((size_t)rounds * FIELDS * sizeof *all);
  if (!all) {
    remat_model_destroy(m);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory calibrating");
  }
  remat_model_init_weights(m, 1);
  fill_tokens(m, B * T, c.vocab_size);
  remat_hparams hp;
  remat_hparams_default(&hp);
  const float dloss = 1.0f / (float)(B * T);
  for (int r = -1; r < rounds; r++) { /* round -1 warms up */
    double before[REMAT__T_COUNT], after[REMAT__T_COUNT], d[REMAT__T_COUNT];
    int64_t n[REMAT__T_COUNT];
    remat__model_timers(m, before, n);
    remat_model_zero_grad(m);
    remat__model_stage_forward(m, 0, 0, &hp);
    remat__model_stage_backward_input(m, 0, 0, 0, dloss, &hp);
    remat__model_stage_backward_weight(m, 0, 0, 0, &hp);
    remat__model_timers(m, after, n);
    for (int k = 0; k < REMAT__T_COUNT; k++) d[k] = after[k] - before[k];
    if (r >= 0) round_figures(d, all + (size_t)r * FIELDS);
  }
  remat_model_destroy(m);
  double med[FIELDS], col[1000];
  for (int f = 0; f < FIELDS; f++) {
    for (int r = 0; r < rounds; r++) col[r] = all[(size_t)r * FIELDS + f];
    qsort(col, (size_t)rounds, sizeof col[0], cmp_double);
    med[f] = col[rounds / 2];
  }
  remat__free(all);
  *t = (remat_layer_times){.embed_fwd = med[0], .embed_bwd = med[1], .block_fwd = med[2],
                           .block_bwd = med[3], .block_wgrad = med[4], .block_recompute = med[5],
                           .block_middle = med[6], .head_fwd = med[7], .head_bwd = med[8],
                           .rounds = rounds};
  return 0;
}

void remat_plan_problem_set_times(remat_plan_problem *pb, const remat_layer_times *t) {
  REMAT_ASSERT(pb->num_groups == 3);
  remat_plan_group *e = &pb->groups[0], *b = &pb->groups[1], *h = &pb->groups[2];
  e->fwd = t->embed_fwd, e->bwd = t->embed_bwd;
  b->fwd = t->block_fwd, b->bwd = t->block_bwd;
  b->wgrad = t->block_wgrad < t->block_bwd ? t->block_wgrad : t->block_bwd;
  b->recompute = t->block_recompute, b->middle_recompute = t->block_middle;
  h->fwd = t->head_fwd, h->bwd = t->head_bwd;
  snprintf(pb->time_unit, sizeof pb->time_unit, "s");
}
