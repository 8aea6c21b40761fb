/* cuda_products.h: the CUDA backend's bf16 (products.cu: a linear layer's
 * three matrix products through cuBLASLt plans) and its attention on bf16
 * operands (attention_bf16.cu), as plain C functions that backend_cuda.c
 * puts in the ops table and the sizes table. As in cuda_ops.h only C types
 * cross this header; every pointer to tensors, and the scratch, is device
 * memory; each function's contract is that of the op of the same name in
 * kernels/backend.h, kernels/bf16.h and kernels/kernels.h.
 *
 * Not one of these functions has yet run on a GPU (docs/cuda.md). */
#ifndef REMAT_CUDA_PRODUCTS_H
#define REMAT_CUDA_PRODUCTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_ops.h" /* remat__cu_drop */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ products */

/* A linear layer's shapes (products/sizes.h's remat__mm_shape, its flags
 * resolved): inp (N,C), weight (OC,C), out (N,OC). */
typedef struct remat__cu_mm {
  int64_t N, C, OC;
  bool out_bf16;  /* the forward's out is bf16 (else fp32) */
  bool dinp_bf16; /* the backward's dinp is bf16 (else fp32) */
  bool bias;      /* the forward adds a bias */
} remat__cu_mm;

/* remat__cu_products_create's failures. */
enum { REMAT__CU_EINVAL = 1, REMAT__CU_ENOMEM = 2 };

/* The scratch, bytes, that the products of these n shapes need at most,
 * from the shapes alone (no device is asked): products.cu's bound. */
size_t remat__cu_products_bound(const remat__cu_mm *shapes, int n);

/* The plans for n shapes (duplicates allowed), at set-up: 0, or
 * REMAT__CU_EINVAL (no device, or cuBLASLt has no algorithm for a product)
 * or REMAT__CU_ENOMEM with msg saying which and why, one line. */
int remat__cu_products_create(void **out, const remat__cu_mm *shapes, int n, char *msg,
                              size_t len);
void remat__cu_products_destroy(void *products);
/* The scratch every product of these plans uses, bytes: at most
 * remat__cu_products_bound of the same shapes. */
size_t remat__cu_products_scratch(const void *products);

/* kernels/bf16.h's remat__bf16_matmul_forward and _backward (the table's
 * signatures): scratch is remat__cu_products_scratch bytes of the arena. */
void remat__cu_bf16_matmul_forward(void *products, void *out, const uint16_t *inp,
                                   const uint16_t *weight, const float *bias, int64_t N,
                                   int64_t C, int64_t OC, bool out_bf16, void *scratch);
void remat__cu_bf16_matmul_backward(void *products, void *dinp, float *dweight, float *dbias,
                                    const uint16_t *dout, const uint16_t *inp,
                                    const uint16_t *weight, int64_t N, int64_t C, int64_t OC,
                                    bool dinp_bf16, void *scratch);

/* ------------------------------------------------------ attention */

/* The sizes' attention_work for width C and NH heads (the sizes' table's
 * signature): nonzero where the kernels below take the head size. */
size_t remat__cu_attention_work(int64_t C, int64_t NH);

/* kernels.h's remat__attention_forward_gqa_bf16 and _backward_gqa_bf16
 * (the packed MHA ops are these with q, k, v inside qkv). d may be NULL or
 * have p == 0 (no dropout); heads and head0 are remat__dropout's. */
void remat__cu_attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                          const uint16_t *k, const uint16_t *v, int64_t ldq,
                                          int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                          int64_t NKV, int64_t hs, const remat__cu_drop *d,
                                          uint32_t heads, uint32_t head0);
void remat__cu_attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                           const float *dout, const uint16_t *q,
                                           const uint16_t *k, const uint16_t *v,
                                           const uint16_t *out, const float *lse, int64_t ldq,
                                           int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hs, const remat__cu_drop *d,
                                           uint32_t heads, uint32_t head0);

#ifdef __cplusplus
}
#endif

#endif
