/* gemm.c: row-major sgemm split across the OpenMP team. Each thread calls
 * single-threaded OpenBLAS on its own slab of the output. OpenBLAS's own
 * threading allocates job descriptors on the heap for every call (Debian's
 * build has a large MAX_CPU_NUMBER), and a training step must not allocate;
 * inside a parallel region OpenBLAS runs on the calling thread and does not.
 * The slabs are a fixed function of the shape and thread count, so results
 * are deterministic. */
#include <cblas.h>
#include <omp.h>

#include "base/base.h"
#include "kernels/kernels.h"

/* Slab boundaries fall on multiples of this many rows or columns. */
#define SLAB_ALIGN 16

void remat__gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
  REMAT_ASSERT(M < INT32_MAX && N < INT32_MAX && K < INT32_MAX);
  const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
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
