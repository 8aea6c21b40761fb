/* gemm.c: row-major sgemm split across the OpenMP team. Each thread calls
 * single-threaded OpenBLAS on its own slab of the output. OpenBLAS's own
 * threading allocates job descriptors on the heap for every call (Debian's
 * build has a large MAX_CPU_NUMBER), and a training step must not allocate;
 * inside a parallel region OpenBLAS runs on the calling thread and does not.
 * The slabs are a fixed function of the shape and thread count, so results
 * are deterministic. A product of one row (generation's decode of one
 * token) is sgemv on each slab: sgemm would pack the whole matrix first,
 * reading it twice.
 *
 * A slab can carry an epilogue: a function the owning thread runs on its
 * slab right after the product, while the slab is in its cache (bias, GELU,
 * dropout and residual add in layers.c), so a linear layer and the
 * pointwise work after it are one parallel region and one pass over memory.
 * remat__gemm_slab is the slab of one thread, for callers that put several
 * products in one parallel region. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"

/* Slab boundaries fall on multiples of this many rows or columns. */
#define SLAB_ALIGN 16

void remat__gemm_slab(int t, int nt, const remat__gemm_op *op) {
  REMAT_ASSERT(op->M < INT32_MAX && op->N < INT32_MAX && op->K < INT32_MAX);
  const enum CBLAS_TRANSPOSE ta = op->trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = op->trans_b ? CblasTrans : CblasNoTrans;
  const int64_t M = op->M, N = op->N, K = op->K, lda = op->lda, ldb = op->ldb, ldc = op->ldc;
  const float beta = op->bias ? 1.0f : op->beta;
  float *C = op->C;
  /* split the longer output dimension */
  const int split_cols = N >= M;
  const int64_t len = split_cols ? N : M;
  int64_t chunk = (len + nt - 1) / nt;
  chunk = (chunk + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
  const int64_t lo = t * chunk, hi = lo + chunk < len ? lo + chunk : len;
  if (lo >= hi) return;
  /* the slab: rows [r0, r1) by columns [c0, c1) of C */
  const int64_t r0 = split_cols ? 0 : lo, r1 = split_cols ? M : hi;
  const int64_t c0 = split_cols ? lo : 0, c1 = split_cols ? hi : N;
  if (op->bias)
    for (int64_t r = r0; r < r1; r++)
      memcpy(C + r * ldc + c0, op->bias + c0, (size_t)(c1 - c0) * sizeof(float));
  if (M == 1) {
    /* One row (a decode's token): a product of a vector and the matrix,
     * which reads B once where sgemm would first pack all of it. */
    const int inca = op->trans_a ? (int)lda : 1;
    if (op->trans_b)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(hi - lo), (int)K, op->alpha,
                  op->B + lo * ldb, (int)ldb, op->A, inca, beta, C + lo, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasTrans, (int)K, (int)(hi - lo), op->alpha, op->B + lo,
                  (int)ldb, op->A, inca, beta, C + lo, 1);
  } else if (split_cols) {
    const float *b = op->trans_b ? op->B + lo * ldb : op->B + lo;
    cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)(hi - lo), (int)K, op->alpha, op->A,
                (int)lda, b, (int)ldb, beta, C + lo, (int)ldc);
  } else {
    const float *a = op->trans_a ? op->A + lo : op->A + lo * lda;
    cblas_sgemm(CblasRowMajor, ta, tb, (int)(hi - lo), (int)N, (int)K, op->alpha, a, (int)lda,
                op->B, (int)ldb, beta, C + lo * ldc, (int)ldc);
  }
  if (op->epilogue) op->epilogue(op->ctx, C, ldc, r0, r1, c0, c1);
}

void remat__gemm_run(const remat__gemm_op *op) {
#pragma omp parallel
  remat__gemm_slab(omp_get_thread_num(), omp_get_num_threads(), op);
}

void remat__gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
  remat__gemm_run(&(remat__gemm_op){.trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N,
                                    .K = K, .alpha = alpha, .A = A, .lda = lda, .B = B,
                                    .ldb = ldb, .beta = beta, .C = C, .ldc = ldc});
}

void remat__gemm_bias(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc) {
  remat__gemm_run(&(remat__gemm_op){.trans_b = 1, .M = M, .N = N, .K = K, .alpha = 1.0f, .A = A,
                                    .lda = lda, .B = B, .ldb = ldb, .beta = 1.0f, .C = C,
                                    .ldc = ldc, .bias = bias});
}
