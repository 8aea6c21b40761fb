/* test_report.c: the peak MFU is measured against and the thread policy.
 *
 * - remat_measure_peak: at least 3 trials of the model's 15 product shapes,
 *   best >= median (the peak) >= slowest > 0, the spread as documented (half
 *   the interquartile range over the median), further calls adding trials;
 *   remat_peak_mfu raises the peak to a faster step's rate so the MFU it
 *   returns is never above 1, and later trials keep it raised.
 * - remat_idle_cpus: between 0 and the CPU count.
 * - remat_threads_setup, with REMAT_IDLE_CPUS standing in for the load:
 *   pinned one per CPU on a quiet machine (2 CPUs or more), unpinned on a
 *   shared one, the team the CPU count either way, and the header line
 *   saying so. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"
#include "test_util.h"

static void test_peak(void) {
  remat_config cfg;
  remat_error err = {0};
  CHECK(remat_config_parse("tiny", &cfg, &err) == 0);
  remat_peak p = {0};
  CHECK(remat_measure_peak(&p, &cfg, 4, 64, 0.0, &err) == 0); /* the 3 trials it must run */
  CHECKF(p.trials == 3 && p.shapes == 15 && p.low > 0 && p.low <= p.median &&
             p.median <= p.best && p.flops == p.median,
         "peak: %d trials of %d shapes, best %.1f >= median %.1f (the peak) >= slowest %.1f "
         "GFLOP/s > 0",
         p.trials, p.shapes, p.best / 1e9, p.median / 1e9, p.low / 1e9);
  double q[REMAT_PEAK_TRIALS];
  memcpy(q, p.rate, (size_t)p.trials * sizeof(double));
  for (int i = 0; i < p.trials; i++) /* insertion sort */
    for (int j = i; j > 0 && q[j - 1] > q[j]; j--) {
      double t = q[j];
      q[j] = q[j - 1], q[j - 1] = t;
    }
  double iqr = q[3 * p.trials / 4] - q[p.trials / 4];
  CHECKF(fabs(p.spread - iqr / (2 * p.median)) < 1e-12 && q[p.trials - 1] == p.best &&
             q[0] == p.low && q[p.trials / 2] == p.median && p.seconds > 0,
         "peak spread is half the interquartile range over the median (%.3f), %.2f s spent",
         p.spread, p.seconds);
  int before = p.trials;
  double best = p.best;
  CHECK(remat_measure_peak(&p, &cfg, 4, 64, 0.05, &err) == 0);
  CHECKF(p.trials > before && p.trials <= REMAT_PEAK_TRIALS && p.best >= best &&
             p.flops == p.median,
         "a second call adds trials (%d -> %d, at most %d)", before, p.trials, REMAT_PEAK_TRIALS);
  /* a step at half the peak, then one at twice the peak */
  double fpt = remat_flops_per_token(&cfg, 64), peak = p.flops;
  double half = remat_peak_mfu(&p, &cfg, 64, 0.5 * peak / fpt);
  CHECKF(fabs(half - 0.5) < 1e-9 && p.raised == 0 && p.flops == peak,
         "a step at half the peak: MFU %.3f, peak unchanged", half);
  double twice = remat_peak_mfu(&p, &cfg, 64, 2.0 * peak / fpt);
  CHECKF(twice == 1.0 && p.raised == 1 && fabs(p.flops / peak - 2.0) < 1e-9,
         "a step at twice the peak raises it: MFU %.3f, raised %d", twice, p.raised);
  CHECK(remat_measure_peak(&p, &cfg, 4, 64, 0.0, &err) == 0);
  /* the fastest step stays the bound unless the new trials' median beats
   * it (a noisy first measurement, as under a sanitizer) */
  CHECKF(fabs(p.fastest_step / peak - 2.0) < 1e-9 &&
             p.flops == (p.median > p.fastest_step ? p.median : p.fastest_step),
         "more trials keep the raised peak (the fastest step, %.3g of the first median) unless "
         "their median beats it (%.3g)", p.flops / peak, p.median / peak);
}

static void test_threads(void) {
  int cpus = 0;
  double idle = remat_idle_cpus(0.05, &cpus);
  CHECKF(cpus >= 1 && (idle < 0 || (idle >= 0 && idle <= cpus + 1e-9)),
         "idle CPUs over 0.05 s: %.2f of %d", idle, cpus);
  remat_thread_policy quiet, shared;
  char line[256], n[16];
  snprintf(n, sizeof n, "%d", cpus);
  setenv("REMAT_IDLE_CPUS", n, 1);
  remat_threads_setup(&quiet, 0);
  printf("quiet:  %s\n", remat_threads_describe(&quiet, line, sizeof line));
  CHECKF(quiet.threads == cpus && !quiet.shared && quiet.pinned == (cpus >= 2) &&
             (cpus < 2 || strstr(line, "pinned one per CPU")),
         "quiet machine: %d threads, pinned %d", quiet.threads, quiet.pinned);
  setenv("REMAT_IDLE_CPUS", "0", 1);
  remat_threads_setup(&shared, 0);
  printf("shared: %s\n", remat_threads_describe(&shared, line, sizeof line));
  CHECKF(shared.threads == cpus && shared.shared == (cpus >= 1) && !shared.pinned &&
             strstr(line, "not pinned"),
         "shared machine: %d threads, not pinned", shared.threads);
  remat_threads_setup(&shared, 1);
  CHECKF(shared.threads == 1 && shared.threads_given && !shared.pinned &&
             omp_get_max_threads() == 1,
         "--threads 1: one thread, not pinned");
  unsetenv("REMAT_IDLE_CPUS");
}

int main(void) {
  test_peak();
  test_threads();
  return test_summary("test_report");
}
