/* bf16.h: the kernels' side of bf16 (remat_precision): the conversions
 * between fp32 and bf16 arrays, a linear layer's products with the bias's
 * gradient (over products/products.h's oneDNN primitives), and the layers
 * around the products with bf16 operands. */
#ifndef REMAT_BF16_H
#define REMAT_BF16_H

#include "products/products.h"

/* dst[i] = src[i] rounded to bf16 (nearest, ties to even; a NaN stays a
 * quiet NaN), i < n. */
void remat__bf16_from_f32(uint16_t *dst, const float *src, size_t n);
/* dst[i] = src[i] exactly, i < n. */
void remat__bf16_to_f32(float *dst, const uint16_t *src, size_t n);

/* out (N,OC) = inp (N,C) weight (OC,C)^T + bias (OC, fp32; NULL for a
 * no_bias shape), fp32
 * accumulation; out is uint16_t (bf16) or float as the shape's out_bf16
 * says. Overwrites out. scratch: scratchpad_bytes of the caller's memory. */
void remat__bf16_matmul_forward(remat__dnnl *d, void *out, const uint16_t *inp,
                                const uint16_t *weight, const float *bias, int64_t N,
                                int64_t C, int64_t OC, bool out_bf16, void *scratch);
/* From dout (N,OC): dinp (N,C) = dout weight (overwrites; skipped when
 * NULL; bf16 or fp32 as dinp_bf16 says), dweight (OC,C) += dout^T inp and
 * dbias (OC) += the column sums of dout (both fp32, accumulate; each
 * skipped when NULL). */
void remat__bf16_matmul_backward(remat__dnnl *d, void *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp,
                                 const uint16_t *weight, int64_t N, int64_t C, int64_t OC,
                                 bool dinp_bf16, void *scratch);

/* ------------------------------------------------------ bf16 layers */

/* The layers around the products with bf16 operands, fp32 arithmetic
 * inside (kernels/layers.c); each has the contract of the fp32 kernel of
 * the same name in kernels.h, with the bf16 tensors rounded once:
 *   layernorm_forward_bf16   out (N,C) bf16; mean, rstd fp32 as the fp32 one
 *   gelu_forward_bf16        out = gelu(inp), both bf16
 *   gelu_backward_bf16       dinp (bf16, overwritten) = gelu'(inp) * dout (fp32)
 *   crossentropy_*_bf16      logits (N,Vp) bf16, read; with backward
 *                            overwritten by their gradient, rounded to bf16 */
void remat__layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                   const float *weight, const float *bias, int64_t N,
                                   int64_t C);
void remat__gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n);
void remat__gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout,
                               size_t n);
double remat__crossentropy_forward_bf16(uint16_t *logits, float *losses, const int32_t *targets,
                                        int64_t N, int64_t V, int64_t Vp);
/* kernels.h's remat__vocab_* on bf16 logits: the exponentials recomputed
 * against the group's max, not stored; with backward the gradient in place */
void remat__vocab_max_bf16(float *mx, const uint16_t *logits, int64_t N, int64_t V, int64_t Vl);
void remat__vocab_exp_bf16(const uint16_t *logits, double *stats, const float *mx,
                           const int32_t *targets, int64_t first, int64_t N, int64_t V,
                           int64_t Vl);
double remat__vocab_finish_bf16(uint16_t *logits, float *losses, const double *stats,
                                const float *mx, const int32_t *targets, float dloss,
                                int64_t first, int64_t N, int64_t V, int64_t Vl, int backward);
double remat__crossentropy_forward_backward_bf16(uint16_t *logits, float *losses,
                                                 const int32_t *targets, float dloss, int64_t N,
                                                 int64_t V, int64_t Vp);

#endif
