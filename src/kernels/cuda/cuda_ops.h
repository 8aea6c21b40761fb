/* cuda_ops.h: the CUDA backend's device side (kernels.cu, compiled by
 * nvcc) as plain C functions, which backend_cuda.c puts in the ops table of
 * kernels/backend.h. Only C types cross this header, so that the project's
 * C headers are never compiled as C++ and the .cu files need none of them.
 * Every pointer to floats or tokens is device memory from
 * remat__cu_alloc; the host arguments (dropout keys, AdamW constants,
 * piece lists, results) are host memory. Each function's contract is that
 * of the op of the same name in kernels/kernels.h and kernels/backend.h.
 *
 * Not one of these functions has yet run on a GPU (docs/cuda.md). */
#ifndef REMAT_CUDA_OPS_H
#define REMAT_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* remat__dropout's fields, the same meaning; p == 0: no dropout. */
typedef struct remat__cu_drop {
  float p;
  uint64_t seed;
  uint32_t step, micro, layer, site;
  uint64_t first; /* dropout_apply's: the mask index of element 0 */
} remat__cu_drop;

/* AdamW's per-tensor constants, computed on the host as adamw.c does. */
typedef struct remat__cu_adamw {
  float b1, b2, eps, decay, step_size, bc2_sqrt;
} remat__cu_adamw_k;

/* The number of devices, or -1 with msg set to cudaGetDeviceCount's error
 * (no driver, no device): one line. */
int remat__cu_devices(char *msg, size_t len);

/* Buffers and crossings. */
void *remat__cu_alloc(size_t bytes);
void remat__cu_free(void *p);
size_t remat__cu_high_water(const void *arena, size_t bytes, size_t mark);
void remat__cu_upload(void *dst, const void *src, size_t bytes);
void remat__cu_download(void *dst, const void *src, size_t bytes);
void *remat__cu_map(void *p, size_t bytes, int read);
void remat__cu_unmap(void *p, void *host, size_t bytes, int write);
void remat__cu_clear(void *dst, size_t bytes);
void remat__cu_copy(void *dst, const void *src, size_t bytes);
void remat__cu_fill(float *dst, float value, size_t n);
void remat__cu_add(float *dst, const float *src, size_t n, int64_t k, size_t stride);
void remat__cu_sumsq_chunks(double *out, const float *const *x, const size_t *n, int npieces,
                            size_t count, size_t q);
double remat__cu_sumsq(const float *x, size_t n);

/* Kernels. */
void remat__cu_dropout_apply(float *out, const float *inp, size_t n, const remat__cu_drop *d);
void remat__cu_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc);
void remat__cu_rows_bias(float *C, const float *bias, int64_t M, int64_t N, int64_t ldc);
void remat__cu_col_sums(float *acc, const float *x, int64_t N, int64_t C);
void remat__cu_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t B, int64_t T, int64_t C);
void remat__cu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int64_t B, int64_t T, int64_t C);
void remat__cu_encoder_backward_tied(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int64_t B, int64_t T, int64_t C,
                                     int64_t V, void *work);
void remat__cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t N, int64_t C);
void remat__cu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, int64_t N, int64_t C);
void remat__cu_gelu_forward(float *out, const float *inp, size_t n);
void remat__cu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void remat__cu_residual_forward(float *out, const float *a, const float *b, size_t n);
/* heads, head0: remat__dropout's (a tensor rank's heads among the
 * model's, for the mask; heads 0: the call sees every head). */
void remat__cu_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                                 int64_t C, int64_t NH, const remat__cu_drop *d, uint32_t heads,
                                 uint32_t head0);
void remat__cu_attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int64_t B, int64_t T,
                                  int64_t C, int64_t NH, const remat__cu_drop *d, uint32_t heads,
                                  uint32_t head0);
void remat__cu_attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                                const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                                int64_t NH);
/* backward != 0: the forward and backward in one (dloss). */
double remat__cu_crossentropy(float *logits, float *losses, const int32_t *targets, int64_t N,
                              int64_t V, int64_t Vp, int backward, float dloss);
void remat__cu_crossentropy_backward(float *logits, const int32_t *targets, float dloss,
                                     int64_t N, int64_t V, int64_t Vp);
/* param_bf16 may be NULL; zero_grad: grad = 0 after (the fused update). */
void remat__cu_adamw(float *param, float *grad, float *m, float *v, uint16_t *param_bf16,
                     size_t n, const remat__cu_adamw_k *k, float grad_scale, int zero_grad);
void remat__cu_init_normal(float *x, size_t first, size_t n, float std, uint64_t seed,
                           uint32_t tensor);
/* bf16 layers (bf16.cu), and the pieces of the fp32 ones they share. */
void remat__cu_layernorm_stats(float *mean, float *rstd, const float *inp, int64_t N, int64_t C);
double remat__cu_sum_rows(const float *losses, int64_t N); /* in row order, double */
void remat__cu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int64_t N,
                                      int64_t C);
void remat__cu_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n);
void remat__cu_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout,
                                  size_t n);
double remat__cu_crossentropy_bf16(uint16_t *logits, float *losses, const int32_t *targets,
                                   int64_t N, int64_t V, int64_t Vp, int backward, float dloss);
void remat__cu_to_bf16(uint16_t *dst, const float *src, size_t n);
void remat__cu_from_bf16(float *dst, const uint16_t *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
