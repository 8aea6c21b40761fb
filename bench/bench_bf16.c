/* bench_bf16.c: the rate of a linear layer's products, OpenBLAS sgemm (the
 * CPU kernels' threaded split, remat__gemm_bias and remat__gemm) against
 * oneDNN bf16 (kernels/bf16.h: bf16 inputs and outputs, fp32 accumulation,
 * as autocast runs them), at gpt2-124m's shapes: out (BT,OC) = inp (BT,C)
 * weight (OC,C)^T + bias for the attention's qkv and projection, the MLP's
 * two layers and the head, at B=4, T=64 and T=1024. The forward, the
 * forward with fp32 activations around it (fwd_cast: the input rounded to
 * bf16 first, fp32 output), and the backward (dinp and dweight). Rounds
 * alternate between them so all see the same load; each round runs enough
 * calls for 0.1 s; figures are medians over the rounds, speedups the
 * median of per-round ratios. One line per shape, key=value; the first
 * line says the CPU and the thread count. Then the attention at the same
 * shapes (C 768, 12 heads): the fp32 tiles against the tiles on bf16
 * operands (kernels.h's remat__attention_forward_bf16 and _backward_bf16),
 * forward and backward, the same alternated rounds; GFLOP/s count the
 * causal half of each product.
 *
 * usage: bench_bf16 [--rounds N] [--short] [--attention]   (--short: T=64
 * only; --attention: the attention only) */
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

/* The buffers of one shape: inp (M,K), weight (N,K), out and dout (M,N),
 * dinp (M,K), dweight (N,K); fp32, and bf16 (_h). */
typedef struct job {
  int64_t M, K, N;
  float *a, *w, *bias, *c, *dinp, *dw;
  uint16_t *ah, *wh, *ch, *dinp_h, *stage;
  remat__dnnl *d;
  void *scratch;
} job;
enum { FWD32, FWD16, FWD_CAST, BWD32, BWD16, NMODE };
/* FWD_CAST: what a product costs with fp32 activations around it: the
 * input rounded to bf16 first, the output fp32. The backward: dinp and
 * dweight (accumulating), without the bias's column sums. */
static void once(const job *j, int mode) {
  const int64_t M = j->M, K = j->K, N = j->N;
  switch (mode) {
  case FWD32:
    remat__gemm_bias(M, N, K, j->a, K, j->w, K, j->bias, j->c, N);
    break;
  case FWD16:
    remat__bf16_matmul_forward(j->d, j->ch, j->ah, j->wh, j->bias, M, K, N, true, j->scratch);
    break;
  case FWD_CAST:
    remat__bf16_from_f32(j->stage, j->a, (size_t)(M * K));
    remat__bf16_matmul_forward(j->d, j->c, j->stage, j->wh, j->bias, M, K, N, false, j->scratch);
    break;
  case BWD32:
    remat__gemm(0, 0, M, K, N, 1.0f, j->c, N, j->w, K, 0.0f, j->dinp, K);
    remat__gemm(1, 0, N, K, M, 1.0f, j->c, N, j->a, K, 1.0f, j->dw, K);
    break;
  default:
    remat__bf16_matmul_backward(j->d, j->dinp_h, j->dw, NULL, j->ch, j->ah, j->wh, M, K, N, true,
                                j->scratch);
  }
}
/* Seconds per call over a round of at least 0.1 s. */
static double round_time(const job *j, int mode, double one) {
  int reps = one > 0.1 ? 1 : (int)(0.1 / one) + 1;
  double t0 = remat__now();
  for (int r = 0; r < reps; r++) once(j, mode);
  return (remat__now() - t0) / reps;
}

/* The attention's tiles, fp32 and bf16, at B x T with C = 768, NH = 12. */
enum { ATT_F32, ATT_F16, ATT_B32, ATT_B16, ATT_NMODE };
typedef struct {
  int64_t B, T, C, NH;
  float *qkv, *out, *lse, *dout, *dqkv, *delta;
  uint16_t *qkv_h, *out_h;
  void *work;
  size_t work_bytes;
} att_job;
static void att_once(const att_job *j, int mode) {
  switch (mode) {
  case ATT_F32:
    remat__attention_forward(j->out, j->lse, j->qkv, j->B, j->T, j->C, j->NH, NULL);
    break;
  case ATT_F16:
    remat__attention_forward_bf16(j->out, j->lse, j->qkv_h, j->B, j->T, j->C, j->NH, NULL,
                                  j->work, j->work_bytes);
    break;
  case ATT_B32:
    remat__attention_backward(j->dqkv, j->delta, j->dout, j->qkv, j->out, j->lse, j->B, j->T,
                              j->C, j->NH, NULL);
    break;
  default:
    remat__attention_backward_bf16(j->dqkv, j->delta, j->dout, j->qkv_h, j->out_h, j->lse, j->B,
                                   j->T, j->C, j->NH, NULL, j->work, j->work_bytes);
  }
}
static double att_round(const att_job *j, int mode, double one) {
  int reps = one > 0.1 ? 1 : (int)(0.1 / one) + 1;
  double t0 = remat__now();
  for (int r = 0; r < reps; r++) att_once(j, mode);
  return (remat__now() - t0) / reps;
}
static void bench_attention(int64_t B, int64_t T, int rounds) {
  att_job j = {.B = B, .T = T, .C = 768, .NH = 12};
  const size_t nq = (size_t)(B * T * 3 * j.C), no = (size_t)(B * T * j.C);
  const size_t nl = (size_t)(B * j.NH * T);
  j.qkv = xalloc(nq * 4), j.dqkv = xalloc(nq * 4), j.out = xalloc(no * 4);
  j.dout = xalloc(no * 4), j.lse = xalloc(nl * 4), j.delta = xalloc(nl * 4);
  j.qkv_h = xalloc(nq * 2), j.out_h = xalloc(no * 2);
  for (size_t i = 0; i < nq; i++) j.qkv[i] = (float)((i * 7919) % 1000) * 2e-3f - 1.0f;
  for (size_t i = 0; i < no; i++) j.dout[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
  remat__bf16_from_f32(j.qkv_h, j.qkv, nq);
  remat__bf16_to_f32(j.qkv, j.qkv_h, nq); /* both on the same values */
  j.work_bytes = (size_t)omp_get_max_threads() * remat__att16_tiles_view(NULL, NULL, j.C / j.NH);
  j.work = xalloc(j.work_bytes);
  double one[ATT_NMODE], t[ATT_NMODE][101], rf[101], rb[101];
  for (int m = 0; m < ATT_NMODE; m++) {
    double t0 = remat__now();
    att_once(&j, m);
    one[m] = remat__now() - t0;
    if (m == ATT_F16) remat__bf16_from_f32(j.out_h, j.out, no);
  }
  for (int r = 0; r < rounds; r++) {
    for (int m = 0; m < ATT_NMODE; m++) t[m][r] = att_round(&j, m, one[m]);
    rf[r] = t[ATT_F32][r] / t[ATT_F16][r];
    rb[r] = t[ATT_B32][r] / t[ATT_B16][r];
  }
  /* two products forward, four backward (dP, dv, dk, dq; the scores rebuilt
   * make a fifth), each 2 B NH T(T+1)/2 hs flops */
  const double prod = 2.0 * (double)(B * j.NH) * (double)T * (double)(T + 1) / 2 * (j.C / j.NH);
  printf("shape=attention B=%lld T=%lld C=%lld NH=%lld fwd_fp32_gflops=%.1f fwd_bf16_gflops=%.1f "
         "fwd_speedup=%.2f bwd_fp32_gflops=%.1f bwd_bf16_gflops=%.1f bwd_speedup=%.2f "
         "fwd_fp32_ms=%.2f fwd_bf16_ms=%.2f bwd_fp32_ms=%.2f bwd_bf16_ms=%.2f rounds=%d\n",
         (long long)B, (long long)T, (long long)j.C, (long long)j.NH,
         2 * prod / median(t[ATT_F32], rounds) * 1e-9, 2 * prod / median(t[ATT_F16], rounds) * 1e-9,
         median(rf, rounds), 5 * prod / median(t[ATT_B32], rounds) * 1e-9,
         5 * prod / median(t[ATT_B16], rounds) * 1e-9, median(rb, rounds),
         median(t[ATT_F32], rounds) * 1e3, median(t[ATT_F16], rounds) * 1e3,
         median(t[ATT_B32], rounds) * 1e3, median(t[ATT_B16], rounds) * 1e3, rounds);
  fflush(stdout);
  void *all[] = {j.qkv, j.dqkv, j.out, j.dout, j.lse, j.delta, j.qkv_h, j.out_h, j.work};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

int main(int argc, char **argv) {
  int rounds = 5, short_only = 0, attention_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--short"))
      short_only = 1;
    else if (!strcmp(argv[i], "--attention"))
      attention_only = 1;
    else {
      fprintf(stderr, "usage: bench_bf16 [--rounds N] [--short] [--attention]\n");
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
  for (int t_ = 0; t_ < (short_only ? 1 : 2) && !attention_only; t_++)
    for (int s = 0; s < 5; s++) {
      const int64_t M = B * T[t_], K = shapes[s][0], N = shapes[s][1];
      remat__mm_shape sh[2] = {{.N = M, .C = K, .OC = N, .out_bf16 = true},
                            {.N = M, .C = K, .OC = N, .out_bf16 = false}};
      remat__dnnl *d = NULL;
      remat_error err = {0};
      if (remat__dnnl_create(&d, sh, 2, &err)) {
        fprintf(stderr, "bench_bf16: %s\n", err.msg);
        return 1;
      }
      job j = {.M = M, .K = K, .N = N, .d = d};
      float *a = j.a = xalloc((size_t)(M * K) * 4), *w = j.w = xalloc((size_t)(N * K) * 4);
      j.bias = xalloc((size_t)N * 4), j.c = xalloc((size_t)(M * N) * 4);
      j.dinp = xalloc((size_t)(M * K) * 4), j.dw = xalloc((size_t)(N * K) * 4);
      j.ah = xalloc((size_t)(M * K) * 2), j.wh = xalloc((size_t)(N * K) * 2);
      j.ch = xalloc((size_t)(M * N) * 2), j.dinp_h = xalloc((size_t)(M * K) * 2);
      j.stage = xalloc((size_t)(M * K) * 2);
      for (int64_t i = 0; i < M * K; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
      for (int64_t i = 0; i < N * K; i++) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
      for (int64_t i = 0; i < N; i++) j.bias[i] = 0.01f;
      memset(j.dw, 0, (size_t)(N * K) * 4);
      remat__bf16_from_f32(j.ah, a, (size_t)(M * K));
      remat__bf16_from_f32(j.wh, w, (size_t)(N * K));
      j.scratch = xalloc(remat__dnnl_scratchpad_bytes(d) + 64);
      /* a first call of each warms caches and oneDNN's kernels, and sizes
       * the rounds; the forwards run first so the backwards' dout is set */
      double one[NMODE], t[NMODE][101], ratio_f[101], ratio_b[101];
      for (int m = 0; m < NMODE; m++) {
        double t0 = remat__now();
        once(&j, m);
        one[m] = remat__now() - t0;
      }
      for (int r = 0; r < rounds; r++) {
        for (int m = 0; m < NMODE; m++) t[m][r] = round_time(&j, m, one[m]);
        ratio_f[r] = t[FWD32][r] / t[FWD16][r];
        ratio_b[r] = t[BWD32][r] / t[BWD16][r];
      }
      const double flop = 2.0 * (double)M * (double)N * (double)K;
      double gf[NMODE];
      for (int m = 0; m < NMODE; m++)
        gf[m] = flop * (m >= BWD32 ? 2 : 1) / median(t[m], rounds) * 1e-9;
      printf("shape=%s B=%lld T=%lld M=%lld K=%lld N=%lld fwd_sgemm_gflops=%.1f "
             "fwd_bf16_gflops=%.1f fwd_speedup=%.2f fwd_cast_gflops=%.1f bwd_sgemm_gflops=%.1f "
             "bwd_bf16_gflops=%.1f bwd_speedup=%.2f impl=%s rounds=%d\n",
             names[s], (long long)B, (long long)T[t_], (long long)M, (long long)K, (long long)N,
             gf[FWD32], gf[FWD16], median(ratio_f, rounds), gf[FWD_CAST], gf[BWD32], gf[BWD16],
             median(ratio_b, rounds), remat__dnnl_impl(d, 0), rounds);
      fflush(stdout);
      void *all[] = {j.a, j.w, j.bias, j.c, j.dinp, j.dw, j.ah, j.wh, j.ch, j.dinp_h, j.stage,
                     j.scratch};
      for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
      remat__dnnl_destroy(d);
    }
  for (int t_ = 0; t_ < (short_only ? 1 : 2); t_++) bench_attention(B, T[t_], rounds);
  return 0;
}
