/* attention_bf16.cu: the CUDA backend's causal attention on bf16 operands
 * (kernels.h's remat__attention_forward_gqa_bf16 and _backward_gqa_bf16;
 * GPT-2's packed ops are these with q, k, v inside qkv), behind
 * cuda_products.h. NOT YET RUN ON A GPU (docs/cuda.md).
 *
 * The fp32 attention's kernels (attention_rows.cuh) on operands widened
 * from bf16 as they are read: the fp32 ops' outputs on the widened
 * operands, bit for bit, with dout, lse, delta and every output fp32 as
 * the CPU's contract has them. The CPU's bf16 kernel also rounds the
 * probabilities and the scores' gradient to bf16 for its products
 * (AVX512-BF16); here every product is fp32, so the two agree to bf16's
 * rounding, not bit for bit. The dropout is the fp32 attention's: element
 * (t, t') of pair (b, h) at index ((b NH + h) T + t) T + t', the heads
 * numbered among the whole model's (remat__dropout's heads, head0).
 *
 * The kernels need no work memory: remat__cu_attention_work is nonzero
 * only to say that they take this head size (the model calls the bf16
 * attention where the sizes' attention_work is nonzero). */
#include "attention_rows.cuh"
#include "cuda_products.h"

/* The bytes the sizes report: one alignment unit, never used. */
#define WORK_TOKEN ((size_t)64)

size_t remat__cu_attention_work(int64_t C, int64_t NH) {
  return NH > 0 && C % NH == 0 && C / NH >= 1 && C / NH <= HS_MAX ? WORK_TOKEN : 0;
}

void remat__cu_attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                          const uint16_t *k, const uint16_t *v, int64_t ldq,
                                          int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                          int64_t NKV, int64_t hs, const remat__cu_drop *d,
                                          uint32_t heads, uint32_t head0) {
  if (B <= 0 || T <= 0) return;
  gqa_forward(out, lse, q, k, v,
              att_shape_of("attention bf16", B, T, NH, NKV, hs, ldq, ldkv, d, heads, head0));
}

void remat__cu_attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                           const float *dout, const uint16_t *q,
                                           const uint16_t *k, const uint16_t *v,
                                           const uint16_t *out, const float *lse, int64_t ldq,
                                           int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hs, const remat__cu_drop *d,
                                           uint32_t heads, uint32_t head0) {
  if (B <= 0 || T <= 0) return;
  gqa_backward(dq, dk, dv, delta, dout, q, k, v, out, lse,
               att_shape_of("attention bf16", B, T, NH, NKV, hs, ldq, ldkv, d, heads, head0));
}
