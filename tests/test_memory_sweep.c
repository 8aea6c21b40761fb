/* test_memory_sweep.c: planned == measured after real steps, on random odd
 * shapes. A seeded sweep of a few dozen models (C not a multiple of 64, NH
 * dividing C, odd B and T, V not a multiple of 128, L from 1 to 5, every
 * block kept, middle or recomputed at random, 1 to 3 micro-batches
 * accumulating, dropout on or off): after two optimizer steps the arena's
 * measured high-water mark (remat_model_arena_high_water) is the planned
 * arena, byte for byte, and the trainer's measured peak its planned bytes.
 * Every other model trains in bf16 where the CPU can: its arena is also the
 * public memory model's figure for its stage (remat_memplan_create_stage,
 * which asks oneDNN for the products' scratchpad without making them). */
#include <stdio.h>
#include <string.h>

#include "remat.h"
#include "test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static int64_t pick(int64_t lo, int64_t hi) {
  return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}

typedef struct {
  int64_t n, V;
} batch_ctx;

/* Synthetic batches within the vocabulary. */
static int batch(void *ctx, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)err;
  const batch_ctx *b = ctx;
  for (int64_t i = 0; i < b->n; i++) {
    inputs[i] = (int32_t)((i * 31 + step * 7 + micro) % b->V);
    targets[i] = (int32_t)((i * 17 + step + micro * 3) % b->V);
  }
  return 0;
}

int main(void) {
  int shapes = 0, policies[3] = {0, 0, 0}, bf16 = 0;
  int can_bf16 = remat_precision_available(REMAT_PRECISION_BF16, NULL);
  for (int k = 0; k < 40; k++) {
    int64_t NH = pick(1, 4), hs = pick(3, 24), C = NH * hs;
    if (C % 64 == 0) C += NH; /* NH still divides C */
    int64_t L = pick(1, 5), V = pick(40, 400), T = 2 * pick(1, 16) + 1, B = 2 * pick(0, 2) + 1;
    if (V % 128 == 0) V++;
    int64_t maxT = T + pick(0, 8);
    char spec[96];
    snprintf(spec, sizeof spec, "%lld,%lld,%lld,%lld,%lld", (long long)L, (long long)C,
             (long long)NH, (long long)V, (long long)maxT);
    remat_config cfg;
    remat_error err;
    CHECK(remat_config_parse(spec, &cfg, &err) == 0);
    if (can_bf16 && k % 2) cfg.precision = REMAT_PRECISION_BF16;
    uint8_t pol[8];
    char pols[8] = {0};
    for (int64_t l = 0; l < L; l++) {
      pol[l] = (uint8_t)(next() % 3);
      policies[pol[l]]++;
      pols[l] = pol[l] == REMAT_KEEP ? 'k' : pol[l] == REMAT_MIDDLE ? 'm' : 'f';
    }
    remat_train_opts o;
    remat_train_opts_default(&o);
    o.B = B;
    o.T = T;
    o.grad_accum = pick(1, 3);
    o.lr = 1e-3;
    o.hp.dropout = next() % 2 ? 0.1f : 0.0f;
    remat_trainer *t;
    int rc = remat_trainer_create(&t, &cfg, pol, NULL, &o, &err);
    CHECK(rc == 0);
    if (rc) {
      printf("%s: %s\n", spec, err.msg);
      continue;
    }
    size_t planned = remat_trainer_planned_bytes(t);
    CHECK(remat_trainer_allocate(t, &err) == 0);
    batch_ctx bc = {B * T, V};
    remat_trainer_set_batches(t, batch, &bc);
    remat_model *m = remat_trainer_model(t);
    remat_model_init_weights(m, (uint64_t)k + 1);
    remat_step_stats st;
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    size_t hw = remat_model_arena_high_water(m), arena = remat_memplan_peak_bytes(remat_model_memplan(m));
    size_t measured = remat_trainer_measured_peak_bytes(t);
    remat_memplan *pub = NULL;
    CHECK(remat_memplan_create_stage(&pub, &cfg, B, T, remat_model_stage(m), &err) == 0);
    size_t model = pub ? remat_memplan_peak_bytes(pub) : 0;
    remat_memplan_destroy(pub);
    printf("%-20s %s B=%lld T=%-2lld K=%lld %-5s dropout %.1f: arena planned %zu, measured %zu%s\n",
           spec, remat_precision_name((int)cfg.precision), (long long)B, (long long)T,
           (long long)o.grad_accum, pols, o.hp.dropout, arena, hw,
           hw == arena && measured == planned && model == arena ? "" : "  <- differs");
    CHECK(hw == arena);
    CHECK(measured == planned);
    CHECK(model == arena);
    bf16 += cfg.precision == REMAT_PRECISION_BF16;
    remat_trainer_destroy(t);
    shapes++;
  }
  printf("%d shapes (%d in bf16%s); blocks kept %d, middle %d, recomputed %d\n", shapes, bf16,
         can_bf16 ? "" : ": this CPU has no bf16 products", policies[REMAT_KEEP],
         policies[REMAT_MIDDLE], policies[REMAT_RECOMPUTE]);
  CHECK(!can_bf16 || bf16 == 20);
  CHECK(shapes == 40 && policies[0] > 10 && policies[1] > 10 && policies[2] > 10);
  return test_summary("memory_sweep");
}
