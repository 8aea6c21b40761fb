/* cuda_vocab.h: the CUDA backend's vocabulary split across tensor ranks
 * (vocab.cu) as plain C functions, which backend_cuda.c puts in the ops
 * table: the encoder over a rank's rows of the token matrix and the
 * vocabulary-parallel cross-entropy, fp32 and on bf16 logits. Each has the
 * contract of the op of the same name in kernels/kernels.h (remat__vocab_*)
 * and kernels/bf16.h (remat__vocab_*_bf16); as in cuda_ops.h, only C types
 * cross, float, token and stats pointers are device memory, and the sums a
 * finish returns are read back to the host.
 *
 * Not one of these functions has yet run on a GPU (docs/cuda.md). */
#ifndef REMAT_CUDA_VOCAB_H
#define REMAT_CUDA_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void remat__cu_vocab_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                     const float *wpe, int64_t first, int64_t rows, int64_t B,
                                     int64_t T, int64_t C);
void remat__cu_vocab_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t first, int64_t rows,
                                      int64_t B, int64_t T, int64_t C);
/* stats: (N, 2) doubles, each row's sum of exponentials and target term */
void remat__cu_vocab_max(float *mx, const float *logits, int64_t N, int64_t V, int64_t Vl);
void remat__cu_vocab_exp(float *logits, double *stats, const float *mx, const int32_t *targets,
                         int64_t first, int64_t N, int64_t V, int64_t Vl);
double remat__cu_vocab_finish(float *logits, float *losses, const double *stats,
                              const int32_t *targets, float dloss, int64_t first, int64_t N,
                              int64_t V, int64_t Vl, int backward);
void remat__cu_vocab_max_bf16(float *mx, const uint16_t *logits, int64_t N, int64_t V,
                              int64_t Vl);
void remat__cu_vocab_exp_bf16(const uint16_t *logits, double *stats, const float *mx,
                              const int32_t *targets, int64_t first, int64_t N, int64_t V,
                              int64_t Vl);
double remat__cu_vocab_finish_bf16(uint16_t *logits, float *losses, const double *stats,
                                   const float *mx, const int32_t *targets, float dloss,
                                   int64_t first, int64_t N, int64_t V, int64_t Vl,
                                   int backward);

#ifdef __cplusplus
}
#endif

#endif
