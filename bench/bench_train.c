/* bench_train.c: training-step throughput and MFU, against this machine's
 * sgemm rate measured in the same run, for GPT-2 124M at B=4, T=64 and
 * T=512 (checkpointing ratios 0, 0.5 and 1) and for a long-sequence shape,
 * L6 C256 NH8 V8192 at B=4, T=1024 (ratios 0 and 1), where attention is a
 * large share of the work. One line per case, key=value.
 *
 * usage: bench_train [--steps N] [--threads N] [--short] [--long] [--seq-long] */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
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

typedef struct {
  const char *flag, *name, *config;
  int64_t B, T;
  int nratios;
  double ratios[3];
} bench_case;

static const bench_case CASES[] = {
    {"--short", "gpt2-124m", "gpt2-124m", 4, 64, 3, {0.0, 0.5, 1.0}},
    {"--long", "gpt2-124m", "gpt2-124m", 4, 512, 3, {0.0, 0.5, 1.0}},
    {"--seq-long", "L6-C256-NH8-V8192", "6,256,8,8192,1024", 4, 1024, 2, {0.0, 1.0}},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

static void usage(FILE *f) {
  fprintf(f, "usage: bench_train [--steps N] [--threads N] [--short] [--long] [--seq-long]\n"
             "  --short     GPT-2 124M, B=4 T=64, checkpointing ratios 0, 0.5, 1\n"
             "  --long      GPT-2 124M, B=4 T=512, ratios 0, 0.5, 1\n"
             "  --seq-long  L6 C256 NH8 V8192, B=4 T=1024, ratios 0 and 1\n"
             "  the flags add up; with none, --short and --long run. One key=value line\n"
             "  per case.\n");
}

/* Runs one case at every ratio; returns 0 or 1 after printing an error. */
static int run_case(const bench_case *bc, int steps, int threads, double peak) {
  remat_config cfg;
  remat_error err;
  if (remat_config_parse(bc->config, &cfg, &err)) {
    fprintf(stderr, "bench_train: %s\n", err.msg);
    return 1;
  }
  const int64_t B = bc->B, T = bc->T, L = cfg.num_layers;
  int64_t n_v[2] = {B * T, cfg.vocab_size};
  uint8_t *policy = malloc((size_t)L);
  double *t = malloc(sizeof(double) * (size_t)steps), base_step = 0;
  if (!policy || !t) {
    fprintf(stderr, "bench_train: out of memory\n");
    return 1;
  }
  for (int r = 0; r < bc->nratios; r++) {
    int64_t n = (int64_t)floor(bc->ratios[r] * (double)L);
    remat_policy_first_n(policy, L, n);
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
    double rec = 0;
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
    printf("bench=train model=%s B=%lld T=%lld ratio=%.1f recomputed=%lld threads=%d "
           "steps=%d step_s_median=%.4f step_s_min=%.4f tokens_per_s=%.1f mfu=%.4f "
           "recompute_share=%.4f slowdown_vs_ratio0=%.4f sgemm_gflops=%.1f "
           "planned_peak_bytes=%zu measured_peak_bytes=%zu\n",
           bc->name, (long long)B, (long long)T, bc->ratios[r], (long long)n, threads, steps,
           med, t[0], tps, remat_mfu(&cfg, T, tps, peak), rec / (med * steps), med / base_step,
           peak / 1e9, planned, measured);
    fflush(stdout);
    remat_trainer_destroy(tr);
  }
  free(t);
  free(policy);
  return 0;
}

int main(int argc, char **argv) {
  int steps = 5, threads = 0;
  bool want[NCASES] = {false}, any = false;
  for (int i = 1; i < argc; i++) {
    int c = 0;
    while (c < NCASES && strcmp(argv[i], CASES[c].flag)) c++;
    if (c < NCASES) {
      want[c] = any = true;
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (!any) want[0] = want[1] = true;
  if (steps < 1 || steps > 1000) steps = 5;
  remat_set_threads(threads);
  threads = omp_get_max_threads();
  double peak = remat_measure_sgemm_flops(1024, 2.0);
  printf("bench=sgemm n=1024 threads=%d gflops=%.1f\n", threads, peak / 1e9);
  fflush(stdout);
  for (int c = 0; c < NCASES; c++)
    if (want[c] && run_case(&CASES[c], steps, threads, peak)) return 1;
  return 0;
}
