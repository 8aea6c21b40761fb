/* test_checkpointing.c: checkpointed training equals plain training bit for
 * bit. The same model trains for a few steps with gradient accumulation and
 * dropout on, under several recompute policies (full and middle, alone and
 * mixed with kept blocks), through the trainer; every
 * step's loss, every step's accumulated gradient and the final parameters
 * must be identical (memcmp) to keeping every block. In fp32 and, where the
 * CPU has the instructions, in bf16 (remat_precision), whose run must also
 * differ from fp32's (so its products did run in bf16) and stay near it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/model_runtime.h"
#include "test_util.h"

enum { STEPS = 3, K = 2, B = 2, T = 24 };

typedef struct {
  double loss[STEPS];
  float *grads[STEPS];
  float *params;
} trace;

static void fill_tokens(int32_t *tok, int n, int64_t V, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (int i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = (int32_t)((x >> 8) % (uint32_t)V);
  }
}

typedef struct {
  int64_t V;
  trace *tr;
} ctx;

static int batch(void *c, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)err;
  int64_t V = ((ctx *)c)->V;
  fill_tokens(inputs, B * T, V, (uint32_t)(step * 10 + micro));
  fill_tokens(targets, B * T, V, (uint32_t)(step * 10 + micro + 5));
  return 0;
}

/* Between backward and update: the accumulated gradients of the step. */
static int keep_grads(void *c, remat_trainer *t, remat_error *err) {
  (void)err;
  remat_model *m = remat_trainer_model(t);
  size_t P = remat_param_count(remat_model_config(m));
  int64_t s = remat_trainer_steps_done(t);
  remat_model_sum_tied(m);
  ((ctx *)c)->tr->grads[s] = malloc(P * sizeof(float));
  memcpy(((ctx *)c)->tr->grads[s], remat_model_grads(m), P * sizeof(float));
  return 0;
}

static void run(const remat_config *cfg, const uint8_t *policy, float dropout, trace *tr) {
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = B;
  o.T = T;
  o.grad_accum = K;
  o.steps = STEPS;
  o.lr = 1e-3;
  o.hp.dropout = dropout;
  o.hp.seed = 7;
  remat_trainer *t;
  remat_error err;
  ctx c = {cfg->vocab_size, tr};
  if (remat_trainer_create(&t, cfg, policy, NULL, &o, &err) || remat_trainer_allocate(t, &err)) {
    fprintf(stderr, "init: %s\n", err.msg);
    exit(1);
  }
  remat_trainer_set_batches(t, batch, &c);
  remat_trainer_set_hook(t, keep_grads, &c);
  remat_model *m = remat_trainer_model(t);
  remat_model_init_weights(m, 42);
  for (int s = 0; s < STEPS; s++) {
    remat_step_stats st;
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    tr->loss[s] = st.loss;
  }
  size_t P = remat_param_count(cfg);
  tr->params = malloc(P * sizeof(float));
  memcpy(tr->params, remat_model_params(m), P * sizeof(float));
  remat_trainer_destroy(t);
}

static void compare(const remat_config *cfg, const trace *a, const trace *b, const char *what) {
  size_t P = remat_param_count(cfg) * sizeof(float);
  int same = memcmp(a->loss, b->loss, sizeof a->loss) == 0;
  for (int s = 0; s < STEPS; s++) same = same && memcmp(a->grads[s], b->grads[s], P) == 0;
  same = same && memcmp(a->params, b->params, P) == 0;
  printf("  %-28s losses %.6f .. %.6f  %s\n", what, b->loss[0], b->loss[STEPS - 1],
         same ? "bit-identical" : "DIFFERENT");
  CHECK(same);
}

static void release(trace *t) {
  for (int s = 0; s < STEPS; s++) free(t->grads[s]);
  free(t->params);
}

/* Every policy set against keeping every block, at one precision; returns
 * the reference trace with dropout 0.1 in *out. */
static void policies(const remat_config *cfg, trace *out) {
  const int64_t L = cfg->num_layers;
  float drops[] = {0.0f, 0.1f};
  for (int di = 0; di < 2; di++) {
    printf("%s, dropout %.1f\n", remat_precision_name((int)cfg->precision), drops[di]);
    trace ref;
    run(cfg, NULL, drops[di], &ref);
    /* the loss must actually move, or the comparison proves little */
    CHECK(ref.loss[0] > 5.0 && ref.loss[0] < 6.0);
    uint8_t pol[4];
    /* k keeps, f recomputes (full), m recomputes the layernorms and GELU */
    const char *names[] = {"ratio 0.25 (block 0)", "ratio 0.5 (blocks 0,1)", "ratio 1 (all)",
                           "blocks 1,3", "block 3 (last)", "middle: all",
                           "middle 1,2, full 0", "middle 0,2, full 3", "middle 3 (last)"};
    const char *sets[] = {"fkkk", "ffkk", "ffff", "kfkf", "kkkf", "mmmm", "fmmk", "mkmf", "kkkm"};
    int ncase = (int)(sizeof sets / sizeof sets[0]);
    for (int c = 0; c < ncase; c++) {
      for (int64_t l = 0; l < L; l++)
        pol[l] = sets[c][l] == 'f' ? REMAT_RECOMPUTE : sets[c][l] == 'm' ? REMAT_MIDDLE : REMAT_KEEP;
      trace t;
      run(cfg, pol, drops[di], &t);
      compare(cfg, &ref, &t, names[c]);
      release(&t);
    }
    /* Dropout must change the result (else it was never applied). */
    if (di == 1) {
      trace nodrop;
      run(cfg, NULL, 0.0f, &nodrop);
      CHECK(memcmp(nodrop.loss, ref.loss, sizeof ref.loss) != 0);
      release(&nodrop);
      *out = ref;
    } else {
      release(&ref);
    }
  }
}

int main(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("4,64,4,256,32", &cfg, &err) == 0);
  trace f32, b16;
  policies(&cfg, &f32);
  const char *why;
  if (remat_precision_available(REMAT_PRECISION_BF16, &why)) {
    cfg.precision = REMAT_PRECISION_BF16;
    policies(&cfg, &b16);
    /* bf16 products round the operands to 8 bits of mantissa: the losses
     * differ from fp32's, by far less than they move over the steps */
    for (int s = 0; s < STEPS; s++) {
      double d = fabs(b16.loss[s] - f32.loss[s]);
      printf("  step %d: fp32 %.6f, bf16 %.6f\n", s + 1, f32.loss[s], b16.loss[s]);
      CHECK(d < 0.05);
    }
    CHECK(memcmp(b16.loss, f32.loss, sizeof f32.loss) != 0);
    release(&b16);
  } else {
    printf("bf16 not checked: %s\n", why);
  }
  release(&f32);
  return test_summary("checkpointing");
}
