/* bench_train.c: training-step throughput and MFU, against this machine's
 * rate for each case's own matrix products (remat_measure_peak: trials
 * before the steps and between them, under the steps' load; the peak is the
 * median trial, or a step that beat it), for GPT-2 124M at B=4, T=64 and
 * T=512 (checkpointing ratios 0, 0.5 and 1, and every block under the
 * middle policy) and for a long-sequence shape, L6 C256 NH8 V8192 at B=4,
 * T=1024 (ratios 0 and 1, and middle), where attention is a large share of
 * the work. One line per case, key=value. The steps of each configuration
 * alternate with those of ratio 0 (every block kept), so slowdown_vs_ratio0
 * (the median of step-by-step ratios) compares runs under the same load.
 *
 * usage: bench_train [--steps N] [--threads N] [--short] [--long] [--seq-long] */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

enum { MAX_STEPS = 1000 };

/* A configuration: the first floor(ratio L) blocks under policy pol
 * (REMAT_RECOMPUTE or REMAT_MIDDLE), the others kept. */
typedef struct {
  double ratio;
  int pol;
} bench_conf;

typedef struct {
  const char *flag, *name, *config;
  int64_t B, T;
  int nratios;
  bench_conf ratios[4];
} bench_case;

#define FULL(r) {r, REMAT_RECOMPUTE}
#define MIDDLE {1.0, REMAT_MIDDLE}
static const bench_case CASES[] = {
    {"--short", "gpt2-124m", "gpt2-124m", 4, 64, 4, {FULL(0.0), FULL(0.5), FULL(1.0), MIDDLE}},
    {"--long", "gpt2-124m", "gpt2-124m", 4, 512, 4, {FULL(0.0), FULL(0.5), FULL(1.0), MIDDLE}},
    {"--seq-long", "L6-C256-NH8-V8192", "6,256,8,8192,1024", 4, 1024, 3,
     {FULL(0.0), FULL(1.0), MIDDLE}},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

static void usage(FILE *f) {
  fprintf(f, "usage: bench_train [--steps N] [--threads N] [--short] [--long] [--seq-long]\n"
             "  --short     GPT-2 124M, B=4 T=64, checkpointing ratios 0, 0.5, 1, and\n"
             "              every block middle (its layernorms and GELU recomputed)\n"
             "  --long      GPT-2 124M, B=4 T=512, ratios 0, 0.5, 1, middle\n"
             "  --seq-long  L6 C256 NH8 V8192, B=4 T=1024, ratios 0 and 1, middle\n"
             "  the flags add up; with none, --short and --long run. One key=value line\n"
             "  per case.\n");
}

/* One configuration of a case: its trainer and its step times. */
typedef struct {
  remat_trainer *tr;
  int64_t recomputed;
  double *t, rec; /* seconds of each timed step; recompute seconds in all */
  int n;
} bench_run;

static int run_open(bench_run *r, const remat_config *cfg, const bench_case *bc, bench_conf bf,
                    int64_t *n_v, int steps, remat_error *err) {
  const int64_t L = cfg->num_layers;
  uint8_t *policy = malloc((size_t)L);
  r->t = malloc(sizeof(double) * (size_t)steps);
  r->tr = NULL;
  r->n = 0;
  r->rec = 0;
  if (!policy || !r->t) {
    free(policy);
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return 1;
  }
  r->recomputed = (int64_t)floor(bf.ratio * (double)L);
  for (int64_t l = 0; l < L; l++) policy[l] = l < r->recomputed ? (uint8_t)bf.pol : REMAT_KEEP;
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = bc->B;
  o.T = bc->T;
  o.lr = 1e-4;
  int rc = remat_trainer_create(&r->tr, cfg, policy, NULL, &o, err);
  free(policy);
  if (rc || remat_trainer_allocate(r->tr, err)) return 1;
  remat_trainer_set_batches(r->tr, batch, n_v);
  remat_model_init_weights(remat_trainer_model(r->tr), 1);
  remat_step_stats st; /* a warm-up step, not timed */
  return remat_trainer_step(r->tr, &st, err) != 0;
}


/* The threads' placement follows the load between steps (remat_threads_adapt). */
static remat_thread_policy policy;

static int run_step(bench_run *r, remat_error *err) {
  remat_step_stats st;
  remat_threads_adapt(&policy);
  if (remat_trainer_step(r->tr, &st, err)) return 1;
  r->t[r->n++] = st.seconds;
  r->rec += st.recompute_seconds;
  return 0;
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof(double), cmp_double);
  return x[n / 2];
}

/* The figures of one configuration's line. Its MFU is against the peak as
 * it stands once every step of the case has run (raised by any step that
 * beat it), so lines are printed at the end of the case. */
typedef struct {
  double ratio, med, min, tps, rec_share, rec_ms_per_block, slowdown;
  int pol;
  int64_t recomputed;
  int n;
  size_t planned, measured;
} case_line;

static case_line summarize(const bench_run *r, const bench_case *bc, bench_conf bf,
                           double slowdown) {
  double t[2 * MAX_STEPS];
  memcpy(t, r->t, sizeof(double) * (size_t)r->n);
  double med = median(t, r->n);
  remat_model *m = remat_trainer_model(r->tr);
  return (case_line){.ratio = bf.ratio, .pol = bf.pol, .med = med, .min = t[0],
                     .tps = (double)(bc->B * bc->T) / med, .rec_share = r->rec / (med * r->n),
                     .rec_ms_per_block =
                         r->recomputed ? 1e3 * r->rec / (double)(r->n * r->recomputed) : 0.0,
                     .slowdown = slowdown, .recomputed = r->recomputed, .n = r->n,
                     .planned = remat_memplan_peak_bytes(remat_model_memplan(m)),
                     .measured = remat_model_arena_high_water(m)};
}

static void print_line(const case_line *l, const bench_case *bc, const remat_config *cfg,
                       int threads, const remat_peak *peak) {
  remat_peak p = *peak; /* raised already by every line's rate: no MFU is above 1 */
  double mfu = remat_peak_mfu(&p, cfg, bc->T, l->tps);
  printf("bench=train model=%s B=%lld T=%lld ratio=%.1f policy=%s recomputed=%lld threads=%d "
         "steps=%d step_s_median=%.4f step_s_min=%.4f tokens_per_s=%.1f mfu=%.4f "
         "mfu_vs_best_trial=%.4f recompute_share=%.4f recompute_ms_per_block=%.3f "
         "slowdown_vs_ratio0=%.4f peak_gflops=%.1f planned_peak_bytes=%zu "
         "measured_peak_bytes=%zu\n",
         bc->name, (long long)bc->B, (long long)bc->T, l->ratio,
         l->recomputed ? remat_policy_name(l->pol) : "keep", (long long)l->recomputed, threads,
         l->n, l->med, l->min, l->tps, mfu, mfu * p.flops / p.best, l->rec_share,
         l->rec_ms_per_block, l->slowdown, p.flops / 1e9, l->planned, l->measured);
}

static void run_close(bench_run *r) {
  remat_trainer_destroy(r->tr);
  free(r->t);
  *r = (bench_run){0};
}

/* Runs one case. The ratio-0 trainer stays alive while each other ratio
 * runs and their steps alternate, so a slowdown is the median of
 * step-by-step ratios taken under the same machine load (at most two
 * trainers exist at once). Peak trials run before the steps and after each
 * pair of steps, under the same load. Returns 0, or 1 after printing an
 * error. */
static int run_case(const bench_case *bc, int steps, int threads) {
  remat_config cfg;
  remat_error err = {0};
  case_line lines[4];
  double ratio[MAX_STEPS];
  int64_t n_v[2] = {bc->B * bc->T, 0};
  bench_run base = {0}, other = {0};
  remat_peak peak = {0};
  const int others = bc->nratios - 1;
  int rc = remat_config_parse(bc->config, &cfg, &err);
  if (!rc) rc = remat_measure_peak(&peak, &cfg, bc->B, bc->T, 0.5, &err);
  if (!rc) {
    n_v[1] = cfg.vocab_size;
    rc = run_open(&base, &cfg, bc, bc->ratios[0], n_v, steps * (others > 0 ? others : 1), &err);
  }
  for (int k = 0; others == 0 && k < steps && !rc; k++)
    rc = run_step(&base, &err) || remat_measure_peak(&peak, &cfg, bc->B, bc->T, 0.2, &err);
  for (int r = 1; r <= others && !rc; r++) {
    rc = run_open(&other, &cfg, bc, bc->ratios[r], n_v, steps, &err);
    for (int k = 0; k < steps && !rc; k++) {
      rc = run_step(&base, &err) || run_step(&other, &err) ||
           remat_measure_peak(&peak, &cfg, bc->B, bc->T, 0.2, &err);
      if (!rc) ratio[k] = other.t[k] / base.t[base.n - 1];
    }
    if (!rc) lines[r] = summarize(&other, bc, bc->ratios[r], median(ratio, steps));
    run_close(&other);
  }
  if (!rc) {
    lines[0] = summarize(&base, bc, bc->ratios[0], 1.0);
    for (int r = 0; r < bc->nratios; r++) /* a line's rate that beats the peak raises it */
      remat_peak_mfu(&peak, &cfg, bc->T, lines[r].tps);
    printf("bench=peak model=%s B=%lld T=%lld shapes=%d trials=%d peak_gflops=%.1f "
           "median_gflops=%.1f best_gflops=%.1f low_gflops=%.1f spread=%.4f raised_by_steps=%d "
           "seconds=%.2f\n",
           bc->name, (long long)bc->B, (long long)bc->T, peak.shapes, peak.trials,
           peak.flops / 1e9, peak.median / 1e9, peak.best / 1e9, peak.low / 1e9, peak.spread,
           peak.raised, peak.seconds);
    for (int r = 0; r < bc->nratios; r++) print_line(&lines[r], bc, &cfg, threads, &peak);
    fflush(stdout);
  } else {
    fprintf(stderr, "bench_train: %s\n", err.msg);
  }
  if (base.tr) run_close(&base);
  return rc;
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
  if (steps < 1 || steps > MAX_STEPS) steps = 5;
  /* how the threads wait is chosen before OpenMP starts (remat_threads_prepare) */
  if (threads != 1 && remat_threads_prepare()) {
    fflush(NULL);
    execv("/proc/self/exe", argv);
    remat_threads_prepare_failed();
  }
  remat_threads_setup(&policy, threads);
  threads = omp_get_max_threads();
  char desc[256];
  printf("bench=threads threads=%d cpus=%d pinned=%d shared=%d idle_cpus=%.2f policy=\"%s\"\n",
         threads, policy.cpus, policy.pinned, policy.shared, policy.idle_cpus,
         remat_threads_describe(&policy, desc, sizeof desc));
  fflush(stdout);
  for (int c = 0; c < NCASES; c++)
    if (want[c] && run_case(&CASES[c], steps, threads)) return 1;
  if (policy.moves)
    printf("bench=threads moves=%d pinned_at_end=%d others_last=%.2f\n", policy.moves,
           policy.pinned, policy.others);
  return 0;
}
