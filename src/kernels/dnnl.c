/* dnnl.c (kernels): the bf16 arrays' conversions, and a linear layer's
 * products over products/dnnl.c's oneDNN primitives with the bias's
 * gradient added here, in fp32, each column summed in row order. */
#include <omp.h>

#include "base/base.h"
#include "kernels/bf16.h"

void remat__bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] = remat__bf16_round(src[i]);
}

void remat__bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] = remat__bf16_float(src[i]);
}

void remat__bf16_matmul_forward(remat__dnnl *d, void *out, const uint16_t *inp,
                                const uint16_t *weight, const float *bias, int64_t N,
                                int64_t C, int64_t OC, bool out_bf16, void *scratch) {
  remat__dnnl_forward(d, out, inp, weight, bias, N, C, OC, out_bf16, scratch);
}

/* dbias[o] += sum over rows of dout[., o], each column summed in row order
 * (so the bits do not depend on the team), columns in blocks of 64. */
static void bias_backward(float *dbias, const uint16_t *dout, int64_t N, int64_t OC) {
  const int64_t nb = (OC + 63) / 64;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; b++) {
    const int64_t o0 = b * 64, w = OC - o0 < 64 ? OC - o0 : 64;
    float acc[64] = {0};
    for (int64_t n = 0; n < N; n++) {
      const uint16_t *row = dout + n * OC + o0;
      for (int64_t j = 0; j < w; j++) acc[j] += remat__bf16_float(row[j]);
    }
    for (int64_t j = 0; j < w; j++) dbias[o0 + j] += acc[j];
  }
}

void remat__bf16_matmul_backward(remat__dnnl *d, void *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp,
                                 const uint16_t *weight, int64_t N, int64_t C, int64_t OC,
                                 bool dinp_bf16, void *scratch) {
  remat__dnnl_backward(d, dinp, dweight, dout, inp, weight, N, C, OC, dinp_bf16, scratch);
  if (dbias) bias_backward(dbias, dout, N, OC);
}
