/* bf16.cu: the CUDA backend's layers with bf16 operands, each the fp32
 * layer's arithmetic with its output rounded to bf16 once (kernels.h and
 * layers.c): LayerNorm forward, GELU forward and backward, cross-entropy
 * on bf16 logits. The bf16 matrix products are not written yet, so the
 * sizes still refuse bf16 runs; test_backend_ops checks these ops on a GPU.
 * Never yet run (docs/cuda.md). */
#include "common.cuh"

/* kernels.cu's LayerNorm output, rounded; the statistics come from the
 * fp32 forward's kernel, so they are its bits. */
__global__ void k_ln_out16(uint16_t *out, const float *mean, const float *rstd, const float *inp,
                           const float *weight, const float *bias, int64_t N, int64_t C) {
  FOR_EACH(i, (size_t)(N * C)) {
    int64_t n = (int64_t)i / C, c = (int64_t)i % C;
    out[i] = round16((inp[i] - mean[n]) * rstd[n] * weight[c] + bias[c]);
  }
}

void remat__cu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int64_t N,
                                      int64_t C) {
  if (N * C == 0) return;
  remat__cu_layernorm_stats(mean, rstd, inp, N, C);
  k_ln_out16<<<grid_for((size_t)(N * C), 256), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
  done();
}

__device__ static inline float gelu_e(float x) {
  float z = -2.0f * GELU_K * (x + 0.044715f * x * x * x);
  return expf(z > 80.0f ? 80.0f : z);
}

__global__ void k_gelu16(uint16_t *out, const uint16_t *inp, size_t n) {
  FOR_EACH(i, n) {
    float x = widen(inp[i]);
    out[i] = round16(x / (1.0f + gelu_e(x)));
  }
}

__global__ void k_gelu_back16(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n) {
  FOR_EACH(i, n) {
    float x = widen(inp[i]), e = gelu_e(x), s = 1.0f / (1.0f + e);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = round16((s + 2.0f * x * s * (e * s) * du) * dout[i]);
  }
}

void remat__cu_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n) {
  if (n) k_gelu16<<<grid_for(n, 256), 256>>>(out, inp, n);
  done();
}

void remat__cu_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout,
                                  size_t n) {
  if (n) k_gelu_back16<<<grid_for(n, 256), 256>>>(dinp, inp, dout, n);
  done();
}

/* layers.c's crossentropy_bf16, one thread per row: the max, the sum of
 * exponentials (double, 8 lanes), and with backward the gradient written
 * in place, each exponential recomputed, rounded to bf16. */
__global__ void k_xent16(uint16_t *logits, float *losses, const int32_t *targets, int64_t N,
                         int64_t V, int64_t Vp, bool backward, float dloss) {
  FOR_EACH(n, (size_t)N) {
    uint16_t *x = logits + (int64_t)n * Vp;
    float mx = -INFINITY;
    for (int64_t j = 0; j < V; j++) {
      float v = widen(x[j]);
      mx = v > mx ? v : mx;
    }
    const float xt = widen(x[targets[n]]);
    double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < V; j++) lane[j % LANES] += expf(widen(x[j]) - mx);
    double sum = 0.0;
    for (int l = 0; l < LANES; l++) sum += lane[l];
    const float inv = (float)(1.0 / sum);
    if (backward) {
      for (int64_t j = 0; j < V; j++) {
        float g = expf(widen(x[j]) - mx) * inv * dloss;
        x[j] = round16(j == targets[n] ? g - dloss : g);
      }
      for (int64_t j = V; j < Vp; j++) x[j] = 0;
    }
    losses[n] = (float)(log(sum) - (double)(xt - mx));
  }
}

double remat__cu_crossentropy_bf16(uint16_t *logits, float *losses, const int32_t *targets,
                                   int64_t N, int64_t V, int64_t Vp, int backward, float dloss) {
  if (N <= 0) return 0.0;
  k_xent16<<<grid_for((size_t)N, 64), 64>>>(logits, losses, targets, N, V, Vp, backward != 0,
                                            dloss);
  LAUNCHED();
  return remat__cu_sum_rows(losses, N);
}
