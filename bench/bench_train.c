/* bench_train.c: training-step throughput and MFU for GPT-2 124M shapes at
 * checkpointing ratios 0, 0.5 and 1, against this machine's sgemm rate
 * measured in the same run. One line per case, key=value.
 *
 * usage: bench_train [--steps N] [--threads N] [--short|--long] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Synthetic token ids, different each step. */
static int batch(void *ctx, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)micro, (void)err;
  const int64_t *n_v = ctx;
  for (int64_t i = 0; i < n_v[0]; i++) {
    inputs[i] = (int32_t)((i * 7919 + step * 31) % n_v[1]);
    targets[i] = (int32_t)((i * 104729 + step * 17) % n_v[1]);
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_train [--steps N] [--threads N] [--short|--long]\n"
             "  GPT-2 124M training steps at B=4, T=64 (--short) and T=512 (--long), at\n"
             "  checkpointing ratios 0, 0.5 and 1; one key=value line per case\n");
}

int main(int argc, char **argv) {
  int steps = 5, threads = 0, which = 3; /* 1: T=64, 2: T=512, 3: both */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--short")) which = 1;
    else if (!strcmp(argv[i], "--long")) which = 2;
    else if (!strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (steps < 1 || steps > 1000) steps = 5;
  remat_set_threads(threads);
  threads = omp_get_max_threads();
  double peak = remat_measure_sgemm_flops(1024, 2.0);
  printf("bench=sgemm n=1024 threads=%d gflops=%.1f\n", threads, peak / 1e9);
  fflush(stdout);

  remat_config cfg;
  remat_error err;
  remat_config_parse("gpt2-124m", &cfg, &err);
  const int64_t shapes[2][2] = {{4, 64}, {4, 512}};
  const double ratios[3] = {0.0, 0.5, 1.0};
  uint8_t policy[12];
  for (int s = 0; s < 2; s++) {
    if (!(which & (1 << s))) continue;
    int64_t B = shapes[s][0], T = shapes[s][1];
    int64_t n_v[2] = {B * T, cfg.vocab_size};
    double base_step = 0;
    for (int r = 0; r < 3; r++) {
      int64_t n = (int64_t)floor(ratios[r] * 12);
      remat_policy_first_n(policy, 12, n);
      remat_train_opts o;
      remat_train_opts_default(&o);
      o.B = B;
      o.T = T;
      o.lr = 1e-4;
      remat_trainer *tr;
      if (remat_trainer_create(&tr, &cfg, policy, NULL, &o, &err) ||
          remat_trainer_allocate(tr, &err)) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 1;
      }
      remat_trainer_set_batches(tr, batch, n_v);
      remat_model *m = remat_trainer_model(tr);
      remat_model_init_weights(m, 1);
      size_t planned = remat_model_memplan(m)->peak_bytes;
      double *t = malloc(sizeof(double) * (size_t)steps), rec = 0;
      for (int k = -1; k < steps; k++) { /* k = -1 warms up */
        remat_step_stats st;
        if (remat_trainer_step(tr, &st, &err)) {
          fprintf(stderr, "bench_train: %s\n", err.msg);
          return 1;
        }
        if (k >= 0) {
          t[k] = st.seconds;
          rec += st.recompute_seconds;
        }
      }
      qsort(t, (size_t)steps, sizeof(double), cmp_double);
      double med = t[steps / 2];
      if (r == 0) base_step = med;
      double tps = (double)(B * T) / med;
      size_t measured = remat_model_arena_high_water(m);
      printf("bench=train model=gpt2-124m B=%lld T=%lld ratio=%.1f recomputed=%lld threads=%d "
             "steps=%d step_s_median=%.4f step_s_min=%.4f tokens_per_s=%.1f mfu=%.4f "
             "recompute_share=%.4f slowdown_vs_ratio0=%.4f sgemm_gflops=%.1f "
             "planned_peak_bytes=%zu measured_peak_bytes=%zu\n",
             (long long)B, (long long)T, ratios[r], (long long)n, threads, steps, med, t[0], tps,
             remat_mfu(&cfg, T, tps, peak), rec / (med * steps), med / base_step, peak / 1e9,
             planned, measured);
      fflush(stdout);
      free(t);
      remat_trainer_destroy(tr);
    }
  }
  return 0;
}
