/* report.c: sgemm rate, MFU and resident memory. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "report/report.h"

double remat_measure_sgemm_flops(int n, double seconds) {
  if (n <= 0) n = 1024;
  size_t nn = (size_t)n * (size_t)n;
  float *a = remat__malloc(3 * nn * sizeof(float));
  if (!a) return 0.0;
  float *b = a + nn, *c = b + nn;
  for (size_t i = 0; i < nn; i++) {
    a[i] = (float)((i * 7) % 13) * 0.01f;
    b[i] = (float)((i * 5) % 11) * 0.01f;
  }
  double best = 0.0, start = remat__now();
  int reps = 0;
  /* one untimed product warms OpenBLAS's buffers and threads */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  while (reps < 3 || remat__now() - start < seconds) {
    double t0 = remat__now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                n);
    double dt = remat__now() - t0;
    double rate = 2.0 * (double)n * (double)n * (double)n / dt;
    if (rate > best) best = rate;
    reps++;
    if (reps > 10000) break;
  }
  remat__free(a);
  return best;
}

double remat_mfu(const remat_config *cfg, int64_t T, double tokens_per_s, double peak_flops) {
  if (peak_flops <= 0) return 0.0;
  return remat_flops_per_token(cfg, T) * tokens_per_s / peak_flops;
}

size_t remat_rss_peak_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      sscanf(line + 6, "%zu", &kb);
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

void remat_set_threads(int threads) {
  if (threads < 1) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}
