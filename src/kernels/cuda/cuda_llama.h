/* cuda_llama.h: the CUDA backend's Llama-family layers (llama.cu) as plain
 * C functions, which backend_cuda.c puts in the ops table: RMSNorm, the
 * SwiGLU gate and the rotary embedding, in fp32 and on bf16 operands, and
 * the fp32 grouped-query attention. As in cuda_ops.h only C types cross
 * this header; every pointer to tensors is device memory, and each
 * function's contract is that of the op of the same name in
 * kernels/kernels.h and kernels/backend.h.
 *
 * Not one of these functions has yet run on a GPU (docs/cuda.md). */
#ifndef REMAT_CUDA_LLAMA_H
#define REMAT_CUDA_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_ops.h" /* remat__cu_drop */

#ifdef __cplusplus
extern "C" {
#endif

/* RMSNorm: out and rstd overwritten; the backward's dinp and dweight
 * accumulate, either may be NULL. */
void remat__cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                               int64_t N, int64_t C, float eps);
void remat__cu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp,
                                    const float *weight, int64_t N, int64_t C, float eps);
void remat__cu_rmsnorm_backward(float *dinp, float *dweight, const float *dout,
                                const float *inp, const float *weight, const float *rstd,
                                int64_t N, int64_t C);

/* SwiGLU's gate, n elements: out = silu(a) b; da, db overwritten. */
void remat__cu_swiglu_forward(float *out, const float *a, const float *b, size_t n);
void remat__cu_swiglu_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b,
                                   size_t n);
void remat__cu_swiglu_backward(float *da, float *db, const float *a, const float *b,
                               const float *dout, size_t n);
void remat__cu_swiglu_backward_bf16(uint16_t *da, uint16_t *db, const uint16_t *a,
                                    const uint16_t *b, const float *dout, size_t n);

/* The rotary embedding, in place on B*T rows ld elements apart. */
void remat__cu_rope_forward(float *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                            int64_t hs, int64_t pos0, double theta);
void remat__cu_rope_backward(float *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                             int64_t hs, int64_t pos0, double theta);
void remat__cu_rope_forward_bf16(uint16_t *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                                 int64_t hs, int64_t pos0, double theta);
void remat__cu_rope_backward_bf16(uint16_t *dx, int64_t ld, int64_t B, int64_t T,
                                  int64_t nheads, int64_t hs, int64_t pos0, double theta);

/* Grouped-query attention. d may be NULL or have p == 0 (no dropout);
 * heads and head0 are remat__dropout's (a tensor rank's heads among the
 * model's; heads 0: the call sees every head). */
void remat__cu_attention_forward_gqa(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                                     int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                     const remat__cu_drop *d, uint32_t heads, uint32_t head0);
void remat__cu_attention_backward_gqa(float *dq, float *dk, float *dv, float *delta,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const float *out, const float *lse,
                                      int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t hs,
                                      const remat__cu_drop *d, uint32_t heads, uint32_t head0);
void remat__cu_attention_decode_gqa(float *out, const float *q, int64_t ldq, const float *k,
                                    const float *v, int64_t ldkv, int64_t n, int64_t pos,
                                    int64_t NH, int64_t NKV, int64_t hs);

#ifdef __cplusplus
}
#endif

#endif
