/* test_zb.c: a block's backward in a zero-bubble schedule's two parts, B
 * (the input gradient, filling the block's W record) and W (the weight
 * gradients, later, from the record), gives the bits of the whole backward.
 * One model of three blocks (kept, middle, recomputed), dropout on, K = 3
 * micro-batches a step held at once: every forward, then every B, then
 * every W with W(k) deferred by d micro-batches (d = 0: right after its
 * B; d = 2: the last B first), against the whole backward per micro-batch.
 * Losses, gradients and parameters after three steps are compared with
 * memcmp; in fp32 and, where the CPU can, bf16; for GPT-2 and for a Llama
 * (two key/value heads of four). The same with recompute per micro-batch
 * (remat_stage.full_slots): the kept block recomputes in full in slots 1
 * and 2, the middle one in slot 2, whole and apart; and every arena's high
 * water is its plan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/model_runtime.h"
#include "remat.h"
#include "test_util.h"

enum { K = 3, STEPS = 3, B = 2, T = 16 };

typedef struct {
  double loss[STEPS];
  float *grads[STEPS], *params;
} trace;

static void tokens(remat_model *m, int64_t slot, int step, int k, int64_t V) {
  int32_t *in = remat__model_slot_inputs(m, slot), *tg = remat__model_slot_targets(m, slot);
  for (int i = 0; i < B * T; i++) {
    in[i] = (int32_t)((i * 31 + step * 7 + k * 13) % V);
    tg[i] = (int32_t)((i * 17 + step * 5 + k * 3 + 1) % V);
  }
}

/* delay < 0: the whole backward after each forward; else B and W apart,
 * W(k) right after B(k + delay) (or at the end). full: the blocks'
 * full_slots, or NULL. */
static void run(const remat_config *cfg, int delay, const uint8_t *full, trace *tr) {
  const uint8_t policy[3] = {REMAT_KEEP, REMAT_MIDDLE, REMAT_RECOMPUTE};
  remat_stage st = remat_stage_whole(cfg, policy);
  st.full_slots = full;
  st.inflight = K;
  st.accumulate = 1;
  st.wdeferred = delay < 0 ? 0 : K;
  remat_model *m;
  remat_error err;
  if (remat__model_create_stage(&m, cfg, B, T, &st, &err)) {
    fprintf(stderr, "test_zb: %s\n", err.msg);
    exit(1);
  }
  remat_hparams hp;
  remat_hparams_default(&hp);
  hp.dropout = 0.1f;
  remat_model_init_weights(m, 99);
  size_t n = remat_model_num_params(m);
  const float dloss = 1.0f / (float)(B * T * K);
  for (int step = 0; step < STEPS; step++) {
    remat_model_zero_grad(m);
    double loss = 0;
    for (int k = 0; k < K; k++) {
      tokens(m, k, step, k, cfg->vocab_size);
      remat__model_stage_forward(m, k, (uint32_t)k, &hp);
      if (delay < 0) loss += remat__model_stage_backward(m, k, (uint32_t)k, dloss, &hp);
    }
    for (int k = 0, w = 0; delay >= 0 && k < K; k++) {
      loss += remat__model_stage_backward_input(m, k, k, (uint32_t)k, dloss, &hp);
      for (; w <= k - delay; w++) remat__model_stage_backward_weight(m, w, (uint32_t)w, &hp);
      if (k == K - 1)
        for (; w < K; w++) remat__model_stage_backward_weight(m, w, (uint32_t)w, &hp);
    }
    remat_model_sum_tied(m);
    tr->loss[step] = loss;
    tr->grads[step] = malloc(n * sizeof(float));
    memcpy(tr->grads[step], remat_model_grads(m), n * sizeof(float));
    remat_model_update(m, &hp, 1e-3f, (float)sqrt(remat_model_grad_sumsq(m)));
  }
  tr->params = malloc(n * sizeof(float));
  memcpy(tr->params, remat_model_params(m), n * sizeof(float));
  size_t hw = remat_model_arena_high_water(m), arena = remat_memplan_peak_bytes(remat_model_memplan(m));
  CHECKF(hw == arena, "%s, %s%s: arena high water %zu of %zu planned",
         remat_precision_name((int)cfg->precision), delay < 0 ? "whole" : "B and W",
         full ? ", full in some slots" : "", hw, arena);
  remat_model_destroy(m);
}

static void release(trace *t) {
  for (int s = 0; s < STEPS; s++) free(t->grads[s]);
  free(t->params);
}

static int same_trace(const trace *a, const trace *b, size_t n) {
  int same = memcmp(a->loss, b->loss, sizeof a->loss) == 0 && memcmp(a->params, b->params, n) == 0;
  for (int s = 0; s < STEPS; s++) same = same && memcmp(a->grads[s], b->grads[s], n) == 0;
  return same;
}

static void compare(const remat_config *cfg) {
  trace whole, apart;
  size_t n = remat_param_count(cfg) * sizeof(float);
  const uint8_t full[3] = {2, 1, 0}; /* slots 1, 2 and slot 2 of the three */
  run(cfg, -1, NULL, &whole);
  run(cfg, -1, full, &apart);
  CHECKF(same_trace(&whole, &apart, n), "%s: full in some slots = the stage's policies, whole "
         "backward, bit for bit", remat_precision_name((int)cfg->precision));
  release(&apart);
  for (int delay = 0; delay < K; delay++)
    for (int f = 0; f < 2; f++) {
      run(cfg, delay, f ? full : NULL, &apart);
      CHECKF(same_trace(&whole, &apart, n), "%s%s: B then W deferred by %d micro-batch%s = the "
             "whole backward, bit for bit (losses %.6f .. %.6f)",
             remat_precision_name((int)cfg->precision), f ? ", full in some slots" : "", delay,
             delay == 1 ? "" : "es", apart.loss[0], apart.loss[STEPS - 1]);
      release(&apart);
    }
  release(&whole);
}

int main(void) {
  const char *shapes[] = {"3,32,4,97,16", "llama:3,32,4,2,64,97,16"};
  for (int k = 0; k < 2; k++) {
    remat_config cfg;
    remat_error err;
    CHECK(remat_config_parse(shapes[k], &cfg, &err) == 0);
    printf("%s\n", shapes[k]);
    compare(&cfg);
    if (remat_precision_available(REMAT_PRECISION_BF16, NULL)) {
      cfg.precision = REMAT_PRECISION_BF16;
      compare(&cfg);
    } else {
      printf("bf16 not checked: this CPU has no bf16 products\n");
    }
  }
  return test_summary("zb");
}
