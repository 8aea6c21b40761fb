/* common.cuh: what the CUDA backend's .cu files share: the error checks,
 * the managed-memory switch, the grid-stride loop and the dropout mask.
 * Private to src/kernels/cuda; everything here is static (one copy per
 * file, no symbols between them), but for the one cuBLASLt handle, which
 * kernels.cu makes and lends (remat__cu_lt). */
#ifndef REMAT_CUDA_COMMON_CUH
#define REMAT_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <Random123/philox.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

#define POISON 0x7FF4DEAD7FF4DEADull /* REMAT_ARENA_POISON, backend.h */
#define SCRATCH_BYTES ((size_t)4 << 20)
#define PIECES_MAX 16384 /* piece table: pointers and lengths, 256 KiB */
#define LANES 8
#define SUMSQ_CHUNK 4096 /* remat__sumsq's chunks (adamw.c) */
#define LN_EPS 1e-5
#define GELU_K 0.7978845608028654f
#define HS_MAX 256 /* the attention's largest head size (a thread's accumulator) */

[[maybe_unused]] static void fail(const char *what, const char *msg, const char *file, int line) {
  fprintf(stderr, "remat: cuda backend: %s failed: %s (%s:%d)\n", what, msg, file, line);
  abort();
}
#define CK(call)                                                          \
  do {                                                                    \
    cudaError_t e_ = (call);                                              \
    if (e_ != cudaSuccess) fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)
#define CKLT(call)                                                        \
  do {                                                                    \
    cublasStatus_t s_ = (call);                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) fail(#call, "cublasLt status", __FILE__, __LINE__); \
  } while (0)
#define LAUNCHED() CK(cudaGetLastError())

/* The backend's cuBLASLt handle, made on first use (kernels.cu): the fp32
 * and the bf16 products (products.cu) share it. */
cublasLtHandle_t remat__cu_lt(void);

static int managed = -1; /* REMAT_CUDA_MANAGED, read once per file */

[[maybe_unused]] static bool is_managed(void) {
  if (managed < 0) {
    const char *e = getenv("REMAT_CUDA_MANAGED");
    managed = e && *e == '1';
  }
  return managed == 1;
}

/* After each op: in managed mode the host may read its outputs next. */
[[maybe_unused]] static void done(void) {
  LAUNCHED();
  if (is_managed()) CK(cudaDeviceSynchronize());
}


[[maybe_unused]] static unsigned grid_for(size_t n, unsigned block) {
  size_t g = (n + block - 1) / block;
  if (g > (1u << 20)) g = 1u << 20; /* the loops stride over the rest */
  return g ? (unsigned)g : 1u;
}
#define FOR_EACH(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* bf16 (bf16.h): round to nearest, ties to even, a NaN stays a quiet NaN;
 * and a bf16's float, its 16 bits above 16 zero bits, exact. */
__device__ static inline uint16_t round16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ static inline float widen(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Element i of a site: philox_rng.h's words and keep rule. */
__device__ static inline float drop_mult(const remat__cu_drop d, uint64_t i, float scale) {
  philox4x32_key_t key = {{(uint32_t)d.seed, (uint32_t)(d.seed >> 32)}};
  philox4x32_ctr_t ctr = {{(uint32_t)(i / 4), d.micro, (d.layer << 4) | d.site, d.step}};
  philox4x32_ctr_t r = philox4x32(ctr, key);
  return (float)(r.v[i % 4] >> 8) * 0x1p-24f >= d.p ? scale : 0.0f;
}

#endif
