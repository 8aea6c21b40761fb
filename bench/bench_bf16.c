/* bench_bf16.c: the rate of a linear layer's forward product, OpenBLAS
 * sgemm (the CPU kernels' threaded split, remat__gemm_bias) against oneDNN
 * bf16 (remat__bf16_matmul_forward, bf16 inputs and output, fp32
 * accumulation, as autocast runs it), at gpt2-124m's shapes: out (BT,OC) =
 * inp (BT,C) weight (OC,C)^T + bias for the attention's qkv and projection,
 * the MLP's two layers and the head, at B=4, T=64 and T=1024. Rounds
 * alternate between the two so both see the same load; each round runs
 * enough products for 0.1 s; figures are medians over the rounds. One line
 * per shape, key=value; the first line says the CPU and oneDNN's choice.
 *
 * usage: bench_bf16 [--rounds N] [--short]   (--short: T=64 only) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void cpu_model(char *out, size_t len) {
  snprintf(out, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      char *v = strchr(line, ':');
      if (v) {
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        snprintf(out, len, "%s", v);
      }
      break;
    }
  fclose(f);
}

static void *xalloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "bench_bf16: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

/* Seconds per product over a round of at least 0.1 s. */
typedef struct job {
  int64_t M, K, N;
  const float *a, *w, *bias;
  float *c;
  const uint16_t *ah, *wh;
  uint16_t *ch;
  remat__dnnl *d;
  void *scratch;
} job;
static void once(const job *j, int bf16) {
  if (bf16)
    remat__bf16_matmul_forward(j->d, j->ch, j->ah, j->wh, j->bias, j->M, j->K, j->N, true,
                               j->scratch);
  else
    remat__gemm_bias(j->M, j->N, j->K, j->a, j->K, j->w, j->K, j->bias, j->c, j->N);
}
static double round_time(const job *j, int bf16, double one) {
  int reps = one > 0.1 ? 1 : (int)(0.1 / one) + 1;
  double t0 = remat__now();
  for (int r = 0; r < reps; r++) once(j, bf16);
  return (remat__now() - t0) / reps;
}

int main(int argc, char **argv) {
  int rounds = 5, short_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--short"))
      short_only = 1;
    else {
      fprintf(stderr, "usage: bench_bf16 [--rounds N] [--short]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 101) rounds = 5;
  char model[256];
  cpu_model(model, sizeof model);
  remat__cpu_bf16 cpu = remat__cpu_bf16_get();
  printf("cpu=\"%s\" threads=%d precision=\"%s\"\n", model, omp_get_max_threads(), cpu.reason);
  if (!cpu.avx512_bf16) return 0;
  const int64_t T[2] = {64, 1024}, B = 4;
  const int64_t shapes[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
  const char *names[5] = {"qkv", "attproj", "fc", "fcproj", "head"};
  for (int t = 0; t < (short_only ? 1 : 2); t++)
    for (int s = 0; s < 5; s++) {
      const int64_t M = B * T[t], K = shapes[s][0], N = shapes[s][1];
      remat__mm_shape sh = {M, K, N, true};
      remat__dnnl *d = NULL;
      remat_error err = {0};
      if (remat__dnnl_create(&d, &sh, 1, &err)) {
        fprintf(stderr, "bench_bf16: %s\n", err.msg);
        return 1;
      }
      job j = {M, K, N, NULL, NULL, NULL, NULL, NULL, NULL, NULL, d, NULL};
      float *a = xalloc((size_t)(M * K) * 4), *w = xalloc((size_t)(N * K) * 4);
      float *bias = xalloc((size_t)N * 4), *c = xalloc((size_t)(M * N) * 4);
      uint16_t *ah = xalloc((size_t)(M * K) * 2), *wh = xalloc((size_t)(N * K) * 2);
      uint16_t *ch = xalloc((size_t)(M * N) * 2);
      for (int64_t i = 0; i < M * K; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
      for (int64_t i = 0; i < N * K; i++) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
      for (int64_t i = 0; i < N; i++) bias[i] = 0.01f;
      remat__bf16_from_f32(ah, a, (size_t)(M * K));
      remat__bf16_from_f32(wh, w, (size_t)(N * K));
      j.a = a, j.w = w, j.bias = bias, j.c = c, j.ah = ah, j.wh = wh, j.ch = ch;
      j.scratch = xalloc(remat__dnnl_scratchpad_bytes(d) + 64);
      /* a first call of each warms caches and oneDNN's kernels */
      double t0 = remat__now();
      once(&j, 0);
      double one32 = remat__now() - t0;
      t0 = remat__now();
      once(&j, 1);
      double one16 = remat__now() - t0;
      double r32[101], r16[101], ratio[101];
      for (int r = 0; r < rounds; r++) {
        r32[r] = round_time(&j, 0, one32);
        r16[r] = round_time(&j, 1, one16);
        ratio[r] = r32[r] / r16[r];
      }
      const double flop = 2.0 * (double)M * (double)N * (double)K;
      double m32 = median(r32, rounds), m16 = median(r16, rounds);
      printf("shape=%s B=%lld T=%lld M=%lld K=%lld N=%lld sgemm_gflops=%.1f bf16_gflops=%.1f "
             "speedup=%.2f impl=%s rounds=%d\n",
             names[s], (long long)B, (long long)T[t], (long long)M, (long long)K, (long long)N,
             flop / m32 * 1e-9, flop / m16 * 1e-9, median(ratio, rounds), remat__dnnl_impl(d, 0),
             rounds);
      fflush(stdout);
      free(a), free(w), free(bias), free(c), free(ah), free(wh), free(ch), free(j.scratch);
      remat__dnnl_destroy(d);
    }
  return 0;
}
