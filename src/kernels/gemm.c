/* gemm.c: row-major sgemm split across the OpenMP team. Each thread calls
 * single-threaded OpenBLAS on its own slab of the output. OpenBLAS's own
 * threading allocates job descriptors on the heap for every call (Debian's
 * build has a large MAX_CPU_NUMBER), and a training step must not allocate;
 * inside a parallel region OpenBLAS runs on the calling thread and does not.
 * The slabs are a fixed function of the shape and thread count, so results
 * are deterministic. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"

/* Slab boundaries fall on multiples of this many rows or columns. */
#define SLAB_ALIGN 16

/* The slabs of C = alpha op(A) op(B) + beta C; with bias, each thread first
 * writes bias (N) into every row of its own slab and the product adds onto
 * it (beta 1): one parallel region, and the slab is in cache when the
 * product reads it back. */
static void gemm_slabs(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc, const float *bias) {
  REMAT_ASSERT(M < INT32_MAX && N < INT32_MAX && K < INT32_MAX);
  const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if (bias) beta = 1.0f;
  /* split the longer output dimension */
  const int split_cols = N >= M;
  const int64_t len = split_cols ? N : M;
#pragma omp parallel
  {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (len + nt - 1) / nt;
    chunk = (chunk + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
    int64_t lo = t * chunk, hi = lo + chunk < len ? lo + chunk : len;
    if (lo < hi) {
      /* the slab: rows [r0, r1) by columns [c0, c1) of C */
      const int64_t r0 = split_cols ? 0 : lo, r1 = split_cols ? M : hi;
      const int64_t c0 = split_cols ? lo : 0, c1 = split_cols ? hi : N;
      if (bias)
        for (int64_t r = r0; r < r1; r++)
          memcpy(C + r * ldc + c0, bias + c0, (size_t)(c1 - c0) * sizeof(float));
      if (split_cols) {
        const float *b = trans_b ? B + lo * ldb : B + lo;
        cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)(hi - lo), (int)K, alpha, A, (int)lda, b,
                    (int)ldb, beta, C + lo, (int)ldc);
      } else {
        const float *a = trans_a ? A + lo : A + lo * lda;
        cblas_sgemm(CblasRowMajor, ta, tb, (int)(hi - lo), (int)N, (int)K, alpha, a, (int)lda, B,
                    (int)ldb, beta, C + lo * ldc, (int)ldc);
      }
    }
  }
}

void remat__gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
  gemm_slabs(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

void remat__gemm_bias(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc) {
  gemm_slabs(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, bias);
}
