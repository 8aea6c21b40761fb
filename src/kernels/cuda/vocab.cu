/* vocab.cu: the CUDA backend's vocabulary split across tensor ranks
 * (Megatron-LM's vocabulary-parallel embedding and cross-entropy), behind
 * the plain C functions of cuda_vocab.h: layers.c's remat__vocab_* and
 * remat__vocab_*_bf16, kept in the CPU's orders. Written to the contracts
 * of kernels/kernels.h and kernels/bf16.h, compiled with nvcc, and NOT YET
 * RUN ON A GPU (docs/cuda.md).
 *
 * What gives the CPU's bits and what does not:
 * - the encoder: each output element is one addition (or a copy, or 0);
 *   the backward's sums are per element in (b, t) order from the value the
 *   gradient held, one thread per column of dwte walking the positions, one
 *   per element of dwpe walking the batch: the CPU's bits;
 * - the row maxima, the target terms (x[target] - max, in float, then
 *   widened) and the probabilities' scaling (x * inv, then * dloss, then
 *   - dloss at the target): the CPU's bits on the same inputs;
 * - the sums of exponentials: double, 8 lanes by column mod 8, each in
 *   column order, then the lanes in order, as layers.c's sum_lanes; the
 *   exponentials are the device's expf (within 2 ulp, as layers.c's
 *   remat__exp, not its bits), and log is the device's;
 * - bf16: the exponentials recomputed against the group's max, not stored,
 *   the gradient rounded to bf16 once, as layers.c's;
 * - the losses' sum in row order, in double, one thread (remat__cu_sum_rows,
 *   as the fp32 cross-entropy's). No atomics anywhere.
 * One thread per row for a row's sums and maxima, one per element for the
 * pointwise passes. */
#include "common.cuh"
#include "cuda_vocab.h"

/* A row's target column on this rank, or -1: the rank holds columns
 * [first, first + V) of the vocabulary's real tokens. */
__device__ static inline int64_t local_target(const int32_t *targets, int64_t n, int64_t first,
                                              int64_t V) {
  int64_t t = (int64_t)targets[n] - first;
  return t >= 0 && t < V ? t : -1;
}

/* ---------------------------------------------------------- encoder */

/* out = wte[token - first] + wpe[t], or the one of them there is, or 0:
 * a token another rank holds contributes 0 (the ranks' outputs sum to the
 * whole embedding's). */
static __global__ void k_vocab_enc(float *out, const int32_t *tokens, const float *wte,
                                   const float *wpe, int64_t first, int64_t rows, int64_t T,
                                   int64_t C, size_t n) {
  FOR_EACH(i, n) {
    int64_t bt = (int64_t)i / C, c = (int64_t)i % C, v = (int64_t)tokens[bt] - first;
    bool held = v >= 0 && v < rows;
    if (held && wpe)
      out[i] = wte[v * C + c] + wpe[(bt % T) * C + c];
    else if (held)
      out[i] = wte[v * C + c];
    else if (wpe)
      out[i] = wpe[(bt % T) * C + c];
    else
      out[i] = 0.0f;
  }
}

void remat__cu_vocab_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                     const float *wpe, int64_t first, int64_t rows, int64_t B,
                                     int64_t T, int64_t C) {
  size_t n = (size_t)(B * T * C);
  if (n) k_vocab_enc<<<grid_for(n, 256), 256>>>(out, tokens, wte, wpe, first, rows, T, C, n);
  done();
}

/* dwte[token - first, c] += dout[bt, c] for the held tokens, bt in order:
 * one thread per column, so each element's additions keep that order. */
static __global__ void k_vocab_dwte(float *dwte, const float *dout, const int32_t *tokens,
                                    int64_t first, int64_t rows, int64_t N, int64_t C) {
  FOR_EACH(c, (size_t)C) {
    for (int64_t bt = 0; bt < N; bt++) {
      int64_t v = (int64_t)tokens[bt] - first;
      if (v >= 0 && v < rows) dwte[v * C + (int64_t)c] += dout[bt * C + (int64_t)c];
    }
  }
}

/* dwpe[t, c] += dout[b, t, c] over b in order; one thread per (t, c). */
static __global__ void k_vocab_dwpe(float *dwpe, const float *dout, int64_t B, int64_t T,
                                    int64_t C) {
  FOR_EACH(i, (size_t)(T * C)) {
    float s = dwpe[i];
    for (int64_t b = 0; b < B; b++) s += dout[b * T * C + (int64_t)i];
    dwpe[i] = s;
  }
}

void remat__cu_vocab_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t first, int64_t rows,
                                      int64_t B, int64_t T, int64_t C) {
  if (B * T * C == 0) return;
  k_vocab_dwte<<<grid_for((size_t)C, 64), 64>>>(dwte, dout, tokens, first, rows, B * T, C);
  LAUNCHED();
  if (dwpe) k_vocab_dwpe<<<grid_for((size_t)(T * C), 256), 256>>>(dwpe, dout, B, T, C);
  done();
}

/* ------------------------------------------------------ fp32 loss */

static __global__ void k_vocab_max(float *mx, const float *logits, int64_t N, int64_t V,
                                   int64_t Vl) {
  FOR_EACH(n, (size_t)N) {
    const float *x = logits + (int64_t)n * Vl;
    float m = -INFINITY;
    for (int64_t j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
    mx[n] = m;
  }
}

void remat__cu_vocab_max(float *mx, const float *logits, int64_t N, int64_t V, int64_t Vl) {
  if (N > 0) k_vocab_max<<<grid_for((size_t)N, 64), 64>>>(mx, logits, N, V, Vl);
  done();
}

/* stats[2n + 1] = x[target] - max where the rank holds the target, else 0:
 * read before the exponentials overwrite the logits. */
static __global__ void k_vocab_target(double *stats, const float *logits, const float *mx,
                                      const int32_t *targets, int64_t first, int64_t N,
                                      int64_t V, int64_t Vl) {
  FOR_EACH(n, (size_t)N) {
    int64_t t = local_target(targets, (int64_t)n, first, V);
    stats[2 * n + 1] = t >= 0 ? (double)(logits[(int64_t)n * Vl + t] - mx[n]) : 0.0;
  }
}

/* x = exp(x - max) for the real columns, 0 for the padding. */
static __global__ void k_vocab_exp(float *logits, const float *mx, int64_t V, int64_t Vl,
                                   size_t n) {
  FOR_EACH(i, n) {
    int64_t r = (int64_t)i / Vl, j = (int64_t)i % Vl;
    logits[i] = j < V ? expf(logits[i] - mx[r]) : 0.0f;
  }
}

/* stats[2n] = the row's exponentials summed as layers.c's sum_lanes. */
static __global__ void k_vocab_sums(double *stats, const float *logits, int64_t N, int64_t V,
                                    int64_t Vl) {
  FOR_EACH(n, (size_t)N) {
    const float *x = logits + (int64_t)n * Vl;
    double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < V; j++) lane[j % LANES] += x[j];
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += lane[l];
    stats[2 * n] = V > 0 ? s : 0.0;
  }
}

void remat__cu_vocab_exp(float *logits, double *stats, const float *mx, const int32_t *targets,
                         int64_t first, int64_t N, int64_t V, int64_t Vl) {
  if (N <= 0) return;
  k_vocab_target<<<grid_for((size_t)N, 64), 64>>>(stats, logits, mx, targets, first, N, V, Vl);
  LAUNCHED();
  size_t n = (size_t)(N * Vl);
  if (n) k_vocab_exp<<<grid_for(n, 256), 256>>>(logits, mx, V, Vl, n);
  LAUNCHED();
  k_vocab_sums<<<grid_for((size_t)N, 64), 64>>>(stats, logits, N, V, Vl);
  done();
}

/* p = e * inv (inv = 1 / the group's sum, rounded to float); with
 * backward p * dloss, less dloss at the target: layers.c's roundings. */
static __global__ void k_vocab_scale(float *logits, const double *stats, const int32_t *targets,
                                     float dloss, int64_t first, int64_t V, int64_t Vl,
                                     bool backward, size_t n) {
  FOR_EACH(i, n) {
    int64_t r = (int64_t)i / V, j = (int64_t)i % V;
    float *x = logits + r * Vl + j;
    const float inv = (float)(1.0 / stats[2 * r]);
    float p = *x * inv;
    if (backward) {
      p = p * dloss;
      if (j == local_target(targets, r, first, V)) p -= dloss;
    }
    *x = p;
  }
}

/* losses[n] = log(the group's sum) - the group's target term. */
static __global__ void k_vocab_losses(float *losses, const double *stats, int64_t N) {
  FOR_EACH(n, (size_t)N) losses[n] = (float)(log(stats[2 * n]) - stats[2 * n + 1]);
}

double remat__cu_vocab_finish(float *logits, float *losses, const double *stats,
                              const int32_t *targets, float dloss, int64_t first, int64_t N,
                              int64_t V, int64_t Vl, int backward) {
  if (N <= 0) return 0.0;
  size_t n = (size_t)(N * V);
  if (n)
    k_vocab_scale<<<grid_for(n, 256), 256>>>(logits, stats, targets, dloss, first, V, Vl,
                                             backward != 0, n);
  LAUNCHED();
  k_vocab_losses<<<grid_for((size_t)N, 64), 64>>>(losses, stats, N);
  LAUNCHED();
  return remat__cu_sum_rows(losses, N);
}

/* ------------------------------------------------------ bf16 loss */

static __global__ void k_vocab_max16(float *mx, const uint16_t *logits, int64_t N, int64_t V,
                                     int64_t Vl) {
  FOR_EACH(n, (size_t)N) {
    const uint16_t *x = logits + (int64_t)n * Vl;
    float m = -INFINITY;
    for (int64_t j = 0; j < V; j++) {
      float v = widen(x[j]);
      m = v > m ? v : m;
    }
    mx[n] = m;
  }
}

void remat__cu_vocab_max_bf16(float *mx, const uint16_t *logits, int64_t N, int64_t V,
                              int64_t Vl) {
  if (N > 0) k_vocab_max16<<<grid_for((size_t)N, 64), 64>>>(mx, logits, N, V, Vl);
  done();
}

/* The target term and the sum of exp(x - max) over 8 lanes (layers.c's
 * exp_sum_lanes): the logits are only read. */
static __global__ void k_vocab_exp16(const uint16_t *logits, double *stats, const float *mx,
                                     const int32_t *targets, int64_t first, int64_t N, int64_t V,
                                     int64_t Vl) {
  FOR_EACH(n, (size_t)N) {
    const uint16_t *x = logits + (int64_t)n * Vl;
    const float m = mx[n];
    int64_t t = local_target(targets, (int64_t)n, first, V);
    stats[2 * n + 1] = t >= 0 ? (double)(widen(x[t]) - m) : 0.0;
    double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < V; j++) lane[j % LANES] += expf(widen(x[j]) - m);
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += lane[l];
    stats[2 * n] = V > 0 ? s : 0.0;
  }
}

void remat__cu_vocab_exp_bf16(const uint16_t *logits, double *stats, const float *mx,
                              const int32_t *targets, int64_t first, int64_t N, int64_t V,
                              int64_t Vl) {
  if (N > 0)
    k_vocab_exp16<<<grid_for((size_t)N, 64), 64>>>(logits, stats, mx, targets, first, N, V, Vl);
  done();
}

/* The gradient in place: exp(x - max) recomputed, * inv * dloss, less
 * dloss at the target, rounded to bf16 once; the padding 0. */
static __global__ void k_vocab_grad16(uint16_t *logits, const double *stats, const float *mx,
                                      const int32_t *targets, float dloss, int64_t first,
                                      int64_t V, int64_t Vl, size_t n) {
  FOR_EACH(i, n) {
    int64_t r = (int64_t)i / Vl, j = (int64_t)i % Vl;
    if (j >= V) {
      logits[i] = 0;
      continue;
    }
    const float inv = (float)(1.0 / stats[2 * r]);
    float g = expf(widen(logits[i]) - mx[r]) * inv * dloss;
    logits[i] = round16(j == local_target(targets, r, first, V) ? g - dloss : g);
  }
}

double remat__cu_vocab_finish_bf16(uint16_t *logits, float *losses, const double *stats,
                                   const float *mx, const int32_t *targets, float dloss,
                                   int64_t first, int64_t N, int64_t V, int64_t Vl,
                                   int backward) {
  if (N <= 0) return 0.0;
  size_t n = (size_t)(N * Vl);
  if (backward && n)
    k_vocab_grad16<<<grid_for(n, 256), 256>>>(logits, stats, mx, targets, dloss, first, V, Vl,
                                              n);
  LAUNCHED();
  k_vocab_losses<<<grid_for((size_t)N, 64), 64>>>(losses, stats, N);
  LAUNCHED();
  return remat__cu_sum_rows(losses, N);
}
