/* kernels.cu: the CUDA backend's device code, behind the plain C functions
 * of cuda_ops.h. Written to the contracts of kernels/kernels.h and
 * kernels/backend.h, compiled with nvcc, and NOT YET RUN ON A GPU: no line
 * here has been executed (docs/cuda.md says what the device check,
 * bench/gpu_check.sh, does about that).
 *
 * Rules the kernels keep:
 * - Deterministic: every sum has one order, fixed by the shapes (one thread
 *   owns each output and adds its terms in index order); no atomics in any
 *   sum (the one atomic, in high_water, takes a maximum).
 * - The orders the CPU's contracts state are the CPU's, so those ops give
 *   the CPU's bits: add, sumsq_chunks, sumsq, the dropout masks (Philox
 *   keyed as philox_rng.h keys it), the LayerNorm statistics (double, 8
 *   lanes), the column sums of the LayerNorm backward, AdamW. Built with
 *   -fmad=false so that no multiply-add is contracted where the C code has
 *   two roundings. exp, log, tanh and the products (cuBLASLt) are the
 *   device's own: close to the CPU's, not its bits.
 * - Simple before fast: one thread per row, per column or per element; the
 *   attention is one thread per query row (forward, dq) and per key row
 *   (dk, dv), online softmax, no T x T buffer. Flash-style tiles in shared
 *   memory are the next step once this has run.
 * - A failed CUDA call is a fault the caller cannot mend (the ops return
 *   nothing): it is reported on stderr with the call and the file's line,
 *   then abort(), as REMAT_ASSERT does for a broken invariant.
 *
 * Memory: the arena is one cudaMalloc (remat__cu_alloc). Besides it the
 * backend holds one small device scratch (SCRATCH_BYTES, allocated on first
 * use: piece tables, chunk sums, loss sums, the high-water result) and, for
 * each map window, pinned host memory while the window is open.
 * REMAT_CUDA_MANAGED=1 makes the arena managed memory instead, which the
 * host can address: map then returns the pointer itself and every op
 * synchronises before it returns, so tests that read buffers directly
 * (test_backend_ops) run unchanged. */
#include "common.cuh"

static char *scratch; /* SCRATCH_BYTES of device memory */
static cublasLtHandle_t lt_handle; /* remat__cu_lt's */

static char *scratch_get(void) {
  if (!scratch) CK(cudaMalloc((void **)&scratch, SCRATCH_BYTES));
  return scratch;
}

cublasLtHandle_t remat__cu_lt(void) {
  if (!lt_handle) CKLT(cublasLtCreate(&lt_handle));
  return lt_handle;
}

/* ---------------------------------------------------------------- device */

int remat__cu_devices(char *msg, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(msg, len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return -1;
  }
  if (n == 0) snprintf(msg, len, "cudaGetDeviceCount: no CUDA device");
  return n;
}

/* ---------------------------------------------------------- buffers */

__global__ void k_poison(unsigned long long *w, size_t n) {
  FOR_EACH(i, n) w[i] = POISON;
}

/* NULL when there is no device or not enough memory: never aborts, so that
 * a build with this backend runs on a machine without a GPU. */
void *remat__cu_alloc(size_t bytes) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError(); /* clear the sticky error for the next call */
    return NULL;
  }
  void *p = NULL;
  cudaError_t e = is_managed() ? cudaMallocManaged(&p, bytes ? bytes : 1, cudaMemAttachGlobal)
                               : cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  size_t w = bytes / 8;
  if (w) k_poison<<<grid_for(w, 256), 256>>>((unsigned long long *)p, w);
  done();
  CK(cudaDeviceSynchronize());
  return p;
}

void remat__cu_free(void *p) {
  if (p) CK(cudaFree(p));
}

__global__ void k_high_water(const unsigned long long *w, size_t lo, size_t n,
                             unsigned long long *top) {
  FOR_EACH(j, n - lo) {
    size_t i = lo + j;
    if (w[i] != POISON) atomicMax(top, (unsigned long long)(i + 1)); /* a maximum, not a sum */
  }
}

size_t remat__cu_high_water(const void *arena, size_t bytes, size_t mark) {
  size_t n = bytes / 8, lo = mark / 8;
  if (lo >= n) return mark;
  unsigned long long *top = (unsigned long long *)scratch_get(), h = 0;
  CK(cudaMemset(top, 0, sizeof *top));
  k_high_water<<<grid_for(n - lo, 256), 256>>>((const unsigned long long *)arena, lo, n, top);
  LAUNCHED();
  CK(cudaMemcpy(&h, top, sizeof h, cudaMemcpyDeviceToHost));
  return h ? (size_t)h * 8 : mark;
}

/* -------------------------------------------------------- crossings */

void remat__cu_upload(void *dst, const void *src, size_t bytes) {
  if (bytes) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void remat__cu_download(void *dst, const void *src, size_t bytes) {
  if (bytes) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* A window: pinned host memory, filled from the device when the host will
 * read it; written back on unmap when the host wrote it. */
void *remat__cu_map(void *p, size_t bytes, int read) {
  if (is_managed()) {
    CK(cudaDeviceSynchronize());
    return p;
  }
  void *h = NULL;
  CK(cudaMallocHost(&h, bytes ? bytes : 1));
  if (read && bytes) CK(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost));
  return h;
}

void remat__cu_unmap(void *p, void *host, size_t bytes, int write) {
  if (is_managed()) return;
  if (write && bytes) CK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  CK(cudaFreeHost(host));
}

void remat__cu_clear(void *dst, size_t bytes) {
  if (bytes) CK(cudaMemset(dst, 0, bytes));
  done();
}

void remat__cu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  done();
}

__global__ void k_fill(float *dst, float v, size_t n) {
  FOR_EACH(i, n) dst[i] = v;
}

void remat__cu_fill(float *dst, float value, size_t n) {
  if (n) k_fill<<<grid_for(n, 256), 256>>>(dst, value, n);
  done();
}

/* dst[j] = ((dst[j] + src[j]) + src[stride + j]) + ...: the contract's order. */
__global__ void k_add(float *dst, const float *src, size_t n, int64_t k, size_t stride) {
  FOR_EACH(j, n) {
    float a = dst[j];
    for (int64_t q = 0; q < k; q++) a = a + src[(size_t)q * stride + j];
    dst[j] = a;
  }
}

void remat__cu_add(float *dst, const float *src, size_t n, int64_t k, size_t stride) {
  if (n && k > 0) k_add<<<grid_for(n, 256), 256>>>(dst, src, n, k, stride);
  done();
}

/* Chunk c (q floats of the vector in pieces, from chunk c0 on): 8 lanes by
 * position in the chunk mod 8, each in order, then the lanes in order: the
 * CPU's sumsq_chunks, bit for bit. */
__global__ void k_sumsq_chunks(double *out, const float *const *px, const size_t *pn,
                               int npieces, size_t count, size_t q, size_t c0, size_t nch) {
  FOR_EACH(cc, nch) {
    size_t c = c0 + cc, lo = c * q, hi = lo + q < count ? lo + q : count;
    double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
    int k = 0;
    size_t at = 0;
    while (k < npieces && at + pn[k] <= lo) at += pn[k++];
    for (size_t i = lo; i < hi && k < npieces; at += pn[k++]) {
      size_t run = at + pn[k] - i;
      if (run > hi - i) run = hi - i;
      const float *x = px[k] + (i - at);
      for (size_t j = 0; j < run; j++) {
        double v = (double)x[j];
        lane[(i - lo + j) & 7] += v * v;
      }
      i += run;
    }
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += lane[l];
    out[cc] = s;
  }
}

/* The chunk sums of one list of pieces, nch at a time through the scratch. */
static void chunk_sums(double *out, const float *const *x, const size_t *n, int npieces,
                       size_t count, size_t q) {
  if (npieces > PIECES_MAX) fail("sumsq_chunks", "more pieces than the scratch holds", __FILE__, __LINE__);
  char *s = scratch_get();
  const float **dx = (const float **)s;
  size_t *dn = (size_t *)(s + PIECES_MAX * sizeof(void *));
  double *dout = (double *)(s + PIECES_MAX * (sizeof(void *) + sizeof(size_t)));
  const size_t room = (SCRATCH_BYTES - PIECES_MAX * (sizeof(void *) + sizeof(size_t))) / 8;
  CK(cudaMemcpy(dx, x, (size_t)npieces * sizeof(void *), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dn, n, (size_t)npieces * sizeof(size_t), cudaMemcpyHostToDevice));
  size_t nch = (count + q - 1) / q;
  for (size_t c0 = 0; c0 < nch; c0 += room) {
    size_t m = nch - c0 < room ? nch - c0 : room;
    k_sumsq_chunks<<<grid_for(m, 128), 128>>>(dout, dx, dn, npieces, count, q, c0, m);
    LAUNCHED();
    CK(cudaMemcpy(out + c0, dout, m * sizeof(double), cudaMemcpyDeviceToHost));
  }
}

void remat__cu_sumsq_chunks(double *out, const float *const *x, const size_t *n, int npieces,
                            size_t count, size_t q) {
  if (count) chunk_sums(out, x, n, npieces, count, q);
}

/* remat__sumsq: chunks of 4096 with lanes by index mod 8 (the chunks start
 * at multiples of 8, so that is their position mod 8), added in chunk
 * order in double. */
double remat__cu_sumsq(const float *x, size_t n) {
  if (!n) return 0.0;
  size_t nch = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  double *part = (double *)malloc(nch * sizeof(double)), total = 0.0;
  if (!part) fail("sumsq", "out of host memory", __FILE__, __LINE__);
  chunk_sums(part, &x, &n, 1, n, SUMSQ_CHUNK);
  for (size_t c = 0; c < nch; c++) total += part[c];
  free(part);
  return total;
}

/* ---------------------------------------------------------- dropout */

/* out = keep ? inp * scale : 0, philox_rng.h's remat__drop_row. */
__global__ void k_dropout(float *out, const float *inp, size_t n, remat__cu_drop d, float scale) {
  FOR_EACH(i, n) out[i] = drop_mult(d, d.first + i, 1.0f) != 0.0f ? inp[i] * scale : 0.0f;
}

void remat__cu_dropout_apply(float *out, const float *inp, size_t n, const remat__cu_drop *d) {
  if (!d || d->p <= 0.0f) {
    if (out != inp && n) CK(cudaMemcpy(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice));
  } else if (n) {
    k_dropout<<<grid_for(n, 256), 256>>>(out, inp, n, *d, 1.0f / (1.0f - d->p));
  }
  done();
}

/* ------------------------------------------------------ products */

__global__ void k_scale(float *C, float beta, int64_t M, int64_t N, int64_t ldc) {
  FOR_EACH(i, (size_t)(M * N)) {
    float *c = C + (int64_t)(i / N) * ldc + (int64_t)(i % N);
    *c = beta == 0.0f ? 0.0f : beta * *c;
  }
}

/* Row-major C = alpha op(A) op(B) + beta C as cuBLASLt's column-major
 * C^T = op(B)^T op(A)^T. fp32 compute (CUBLAS_COMPUTE_32F: TF32 is not
 * allowed), no workspace, the heuristic's first algorithm, which is a
 * function of the shapes and the device: the same bits run after run. */
void remat__cu_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    k_scale<<<grid_for((size_t)(M * N), 256), 256>>>(C, beta, M, N, ldc);
    done();
    return;
  }
  cublasLtHandle_t lt = remat__cu_lt();
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasOperation_t oa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t ob = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CKLT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CKLT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
  CKLT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
  /* column-major views: row-major (r, c, ld) is column-major (c, r, ld) */
  CKLT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, trans_b ? K : N, trans_b ? N : K, ldb));
  CKLT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, trans_a ? M : K, trans_a ? K : M, lda));
  CKLT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, ldc));
  cublasLtMatmulPreference_t pref;
  size_t ws = 0;
  CKLT(cublasLtMatmulPreferenceCreate(&pref));
  CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  CKLT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found));
  if (found < 1) fail("cublasLtMatmulAlgoGetHeuristic", "no algorithm for this shape", __FILE__, __LINE__);
  CKLT(cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &res.algo, NULL, 0, 0));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  done();
}

__global__ void k_rows_bias(float *C, const float *bias, int64_t M, int64_t N, int64_t ldc) {
  FOR_EACH(i, (size_t)(M * N)) C[(int64_t)(i / N) * ldc + (int64_t)(i % N)] = bias[i % N];
}

/* C's first N columns of M rows = bias: then a product with beta 1 adds
 * onto it, as the CPU's gemm_bias does. */
void remat__cu_rows_bias(float *C, const float *bias, int64_t M, int64_t N, int64_t ldc) {
  if (M > 0 && N > 0) k_rows_bias<<<grid_for((size_t)(M * N), 256), 256>>>(C, bias, M, N, ldc);
  done();
}

/* acc[c] += sum over rows n in order of x[n, c]: one thread per column. */
__global__ void k_col_sums(float *acc, const float *x, int64_t N, int64_t C) {
  FOR_EACH(c, (size_t)C) {
    float s = 0.0f;
    for (int64_t n = 0; n < N; n++) s += x[n * C + (int64_t)c];
    acc[c] += s;
  }
}

void remat__cu_col_sums(float *acc, const float *x, int64_t N, int64_t C) {
  if (C > 0) k_col_sums<<<grid_for((size_t)C, 128), 128>>>(acc, x, N, C);
  done();
}

/* ---------------------------------------------------------- encoder */

__global__ void k_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                  const float *wpe, int64_t T, int64_t C, size_t n) {
  FOR_EACH(i, n) {
    int64_t bt = (int64_t)i / C, c = (int64_t)i % C;
    float we = wte[(int64_t)tokens[bt] * C + c];
    out[i] = wpe ? we + wpe[(bt % T) * C + c] : we; /* wpe NULL: no learned positions */
  }
}

void remat__cu_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t B, int64_t T, int64_t C) {
  size_t n = (size_t)(B * T * C);
  if (n) k_encoder_forward<<<grid_for(n, 256), 256>>>(out, tokens, wte, wpe, T, C, n);
  done();
}

/* dwpe[t, c] += dout[b, t, c] over b in order; one thread per (t, c). */
__global__ void k_dwpe(float *dwpe, const float *dout, int64_t B, int64_t T, int64_t C) {
  FOR_EACH(i, (size_t)(T * C)) {
    float s = dwpe[i];
    for (int64_t b = 0; b < B; b++) s += dout[b * T * C + (int64_t)i];
    dwpe[i] = s;
  }
}

/* dwte[tokens[i], c] += dout[i, c] for i in (b, t) order: one thread per
 * column c walks the positions, so a row's additions keep that order. */
__global__ void k_dwte(float *dwte, const float *dout, const int32_t *tokens, int64_t N,
                       int64_t C) {
  FOR_EACH(c, (size_t)C) {
    for (int64_t i = 0; i < N; i++) dwte[(int64_t)tokens[i] * C + (int64_t)c] += dout[i * C + (int64_t)c];
  }
}

void remat__cu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int64_t B, int64_t T, int64_t C) {
  if (B * T * C == 0) return;
  k_dwte<<<grid_for((size_t)C, 64), 64>>>(dwte, dout, tokens, B * T, C);
  LAUNCHED();
  if (dwpe) k_dwpe<<<grid_for((size_t)(T * C), 256), 256>>>(dwpe, dout, B, T, C);
  done();
}

/* The tied backward's work (sizes: encoder_tied): rows (N, C) floats, one
 * per distinct token in order of first appearance; row_of (V) int32, -1
 * for tokens not in the batch; pos_row (N) int32. One thread numbers the
 * rows (V + N steps). */
__global__ void k_tied_rows(int32_t *row_of, int32_t *pos_row, const int32_t *tokens, int64_t N,
                            int64_t V) {
  if (blockIdx.x || threadIdx.x) return;
  for (int64_t v = 0; v < V; v++) row_of[v] = -1;
  int32_t r = 0;
  for (int64_t i = 0; i < N; i++) {
    int32_t t = tokens[i];
    if (row_of[t] < 0) row_of[t] = r++;
    pos_row[i] = row_of[t];
  }
}

/* e[row, c] from zero in (b, t) order: one thread per column. */
__global__ void k_tied_sums(float *rows, const int32_t *pos_row, const float *dout, int64_t N,
                            int64_t C) {
  FOR_EACH(c, (size_t)C) {
    for (int64_t i = 0; i < N; i++) rows[(int64_t)pos_row[i] * C + (int64_t)c] = 0.0f;
    for (int64_t i = 0; i < N; i++)
      rows[(int64_t)pos_row[i] * C + (int64_t)c] += dout[i * C + (int64_t)c];
  }
}

/* dwte[v] = h[v] + e[v], or h[v] + 0 where v is not in the batch. */
__global__ void k_tied_add(float *dwte, const float *rows, const int32_t *row_of, int64_t V,
                           int64_t C) {
  FOR_EACH(i, (size_t)(V * C)) {
    int64_t v = (int64_t)i / C, c = (int64_t)i % C;
    int32_t r = row_of[v];
    dwte[i] = dwte[i] + (r >= 0 ? rows[(int64_t)r * C + c] : 0.0f);
  }
}

void remat__cu_encoder_backward_tied(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int64_t B, int64_t T, int64_t C,
                                     int64_t V, void *work) {
  const int64_t N = B * T;
  if (N == 0 || C == 0) return;
  float *rows = (float *)work;
  int32_t *row_of = (int32_t *)(rows + N * C), *pos_row = row_of + V;
  k_tied_rows<<<1, 1>>>(row_of, pos_row, tokens, N, V);
  LAUNCHED();
  k_tied_sums<<<grid_for((size_t)C, 64), 64>>>(rows, pos_row, dout, N, C);
  LAUNCHED();
  k_tied_add<<<grid_for((size_t)(V * C), 256), 256>>>(dwte, rows, row_of, V, C);
  LAUNCHED();
  if (dwpe) k_dwpe<<<grid_for((size_t)(T * C), 256), 256>>>(dwpe, dout, B, T, C);
  done();
}

/* -------------------------------------------------------- layernorm */

/* layers.c's row_stats: mean and variance in double over 8 lanes, two
 * passes, each rounded to float: the CPU's bits. */
__device__ static void row_stats(const float *x, int64_t C, float *mf, float *rf) {
  double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + LANES <= C; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += x[c + l];
  for (; c < C; c++) lane[c % LANES] += x[c];
  double s = 0.0;
  for (int l = 0; l < LANES; l++) s += lane[l];
  const double m = s / (double)C;
  for (int l = 0; l < LANES; l++) lane[l] = 0.0;
  for (c = 0; c + LANES <= C; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += (x[c + l] - m) * (x[c + l] - m);
  for (; c < C; c++) lane[c % LANES] += (x[c] - m) * (x[c] - m);
  double v = 0.0;
  for (int l = 0; l < LANES; l++) v += lane[l];
  *mf = (float)m;
  *rf = (float)(1.0 / sqrt(v / (double)C + LN_EPS));
}

__global__ void k_ln_stats(float *mean, float *rstd, const float *inp, int64_t N, int64_t C) {
  FOR_EACH(n, (size_t)N) row_stats(inp + (int64_t)n * C, C, &mean[n], &rstd[n]);
}

__global__ void k_ln_out(float *out, const float *mean, const float *rstd, const float *inp,
                         const float *weight, const float *bias, int64_t N, int64_t C) {
  FOR_EACH(i, (size_t)(N * C)) {
    int64_t n = (int64_t)i / C, c = (int64_t)i % C;
    out[i] = (inp[i] - mean[n]) * rstd[n] * weight[c] + bias[c];
  }
}

void remat__cu_layernorm_stats(float *mean, float *rstd, const float *inp, int64_t N, int64_t C) {
  k_ln_stats<<<grid_for((size_t)N, 64), 64>>>(mean, rstd, inp, N, C);
  LAUNCHED();
}

void remat__cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t N, int64_t C) {
  if (N * C == 0) return;
  remat__cu_layernorm_stats(mean, rstd, inp, N, C);
  k_ln_out<<<grid_for((size_t)(N * C), 256), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
  done();
}

/* dinp[n] += rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight:
 * one thread per row, layers.c's sums (double, in order). */
__global__ void k_ln_dinp(float *dinp, const float *dout, const float *inp, const float *weight,
                          const float *mean, const float *rstd, int64_t N, int64_t C) {
  FOR_EACH(n, (size_t)N) {
    const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
    const float m = mean[n], r = rstd[n];
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = 0; c < C; c++) {
      float g = d[c] * weight[c];
      sg += g;
      sgx += (double)g * (double)((x[c] - m) * r);
    }
    const float mg = (float)(sg / (double)C), mgx = (float)(sgx / (double)C);
    float *dx = dinp + (int64_t)n * C;
    for (int64_t c = 0; c < C; c++) {
      float xhat = (x[c] - m) * r;
      dx[c] += r * (d[c] * weight[c] - mg - xhat * mgx);
    }
  }
}

/* dweight[c] += sum_n dout xhat, dbias[c] += sum_n dout, in row order from
 * zero in float: layers.c's column blocks, the same bits. */
__global__ void k_ln_dw(float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *mean, const float *rstd, int64_t N, int64_t C) {
  FOR_EACH(c, (size_t)C) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t n = 0; n < N; n++) {
      float d = dout[n * C + (int64_t)c];
      sw += d * ((inp[n * C + (int64_t)c] - mean[n]) * rstd[n]);
      sb += d;
    }
    dweight[c] += sw;
    dbias[c] += sb;
  }
}

void remat__cu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, int64_t N, int64_t C) {
  if (N * C == 0) return;
  if (dinp) k_ln_dinp<<<grid_for((size_t)N, 64), 64>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  LAUNCHED();
  if (dweight)
    k_ln_dw<<<grid_for((size_t)C, 64), 64>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
  done();
}

/* ------------------------------------------------------ pointwise */

/* layers.c's sigmoid form of the tanh GELU, with the device's expf. */
__device__ static inline float gelu_e(float x) {
  float z = -2.0f * GELU_K * (x + 0.044715f * x * x * x);
  return expf(z > 80.0f ? 80.0f : z);
}

__global__ void k_gelu(float *out, const float *inp, size_t n) {
  FOR_EACH(i, n) {
    float x = inp[i];
    out[i] = x / (1.0f + gelu_e(x));
  }
}

__global__ void k_gelu_back(float *dinp, const float *inp, const float *dout, size_t n) {
  FOR_EACH(i, n) {
    float x = inp[i], e = gelu_e(x), s = 1.0f / (1.0f + e);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = (s + 2.0f * x * s * (e * s) * du) * dout[i];
  }
}

__global__ void k_residual(float *out, const float *a, const float *b, size_t n) {
  FOR_EACH(i, n) out[i] = a[i] + b[i];
}

void remat__cu_gelu_forward(float *out, const float *inp, size_t n) {
  if (n) k_gelu<<<grid_for(n, 256), 256>>>(out, inp, n);
  done();
}

void remat__cu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  if (n) k_gelu_back<<<grid_for(n, 256), 256>>>(dinp, inp, dout, n);
  done();
}

void remat__cu_residual_forward(float *out, const float *a, const float *b, size_t n) {
  if (n) k_residual<<<grid_for(n, 256), 256>>>(out, a, b, n);
  done();
}

/* ---------------------------------------------------- cross-entropy */

/* layers.c's crossentropy, one thread per row: max, e = exp(x - max), the
 * sum in double over 8 lanes, p = e / sum; loss log(sum) - (x[t] - max). */
__global__ void k_xent(float *logits, float *losses, const int32_t *targets, int64_t N,
                       int64_t V, int64_t Vp, bool backward, float dloss) {
  FOR_EACH(n, (size_t)N) {
    float *x = logits + (int64_t)n * Vp;
    float mx = -INFINITY;
    for (int64_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    const float xt = x[targets[n]];
    double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < V; j++) {
      x[j] = expf(x[j] - mx);
      lane[j % LANES] += x[j];
    }
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += lane[l];
    const float inv = (float)(1.0 / s);
    if (backward) {
      for (int64_t j = 0; j < V; j++) {
        float p = x[j] * inv;
        x[j] = p * dloss;
      }
      x[targets[n]] -= dloss;
    } else {
      for (int64_t j = 0; j < V; j++) x[j] *= inv;
    }
    for (int64_t j = V; j < Vp; j++) x[j] = 0.0f;
    losses[n] = (float)(log(s) - (double)(xt - mx));
  }
}

/* The losses' sum in row order, in double: one thread. */
__global__ void k_sum_rows(double *total, const float *losses, int64_t N) {
  if (blockIdx.x || threadIdx.x) return;
  double s = 0.0;
  for (int64_t n = 0; n < N; n++) s += losses[n];
  *total = s;
}

double remat__cu_crossentropy(float *logits, float *losses, const int32_t *targets, int64_t N,
                              int64_t V, int64_t Vp, int backward, float dloss) {
  if (N <= 0) return 0.0;
  k_xent<<<grid_for((size_t)N, 64), 64>>>(logits, losses, targets, N, V, Vp, backward != 0,
                                          dloss);
  LAUNCHED();
  return remat__cu_sum_rows(losses, N);
}

double remat__cu_sum_rows(const float *losses, int64_t N) {
  double *dt = (double *)scratch_get(), total = 0.0;
  k_sum_rows<<<1, 1>>>(dt, losses, N);
  LAUNCHED();
  CK(cudaMemcpy(&total, dt, sizeof total, cudaMemcpyDeviceToHost));
  return total;
}

/* dlogit = p dloss - (target ? dloss : 0); columns >= V become 0. */
__global__ void k_xent_back(float *logits, const int32_t *targets, float dloss, int64_t N,
                            int64_t V, int64_t Vp) {
  FOR_EACH(i, (size_t)(N * Vp)) {
    int64_t n = (int64_t)i / Vp, j = (int64_t)i % Vp;
    float g = j < V ? logits[i] * dloss : 0.0f;
    if (j == targets[n]) g -= dloss;
    logits[i] = g;
  }
}

void remat__cu_crossentropy_backward(float *logits, const int32_t *targets, float dloss,
                                     int64_t N, int64_t V, int64_t Vp) {
  if (N * Vp > 0)
    k_xent_back<<<grid_for((size_t)(N * Vp), 256), 256>>>(logits, targets, dloss, N, V, Vp);
  done();
}

/* ------------------------------------------------------------ AdamW */

__device__ static inline uint16_t bf16_round(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* adamw.c's adamw_elem, element for element. */
__global__ void k_adamw(float *param, float *grad, float *m, float *v, uint16_t *param_bf16,
                        size_t n, remat__cu_adamw_k k, float grad_scale, bool zero_grad) {
  FOR_EACH(i, n) {
    const float g = grad[i] * grad_scale;
    const float mi = k.b1 * m[i] + (1.0f - k.b1) * g;
    const float vi = k.b2 * v[i] + (1.0f - k.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] * k.decay - k.step_size * (mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
    param[i] = p;
    if (param_bf16) param_bf16[i] = bf16_round(p);
    if (zero_grad) grad[i] = 0.0f;
  }
}

void remat__cu_adamw(float *param, float *grad, float *m, float *v, uint16_t *param_bf16,
                     size_t n, const remat__cu_adamw_k *k, float grad_scale, int zero_grad) {
  if (n)
    k_adamw<<<grid_for(n, 256), 256>>>(param, grad, m, v, param_bf16, n, *k, grad_scale,
                                       zero_grad != 0);
  done();
}

/* ------------------------------------------------------------- init */

/* dropout.c's remat__init_normal: Box-Muller in double on Philox words;
 * one thread per group of 4 elements. */
__global__ void k_init_normal(float *x, size_t first, size_t n, float std, uint64_t seed,
                              uint32_t tensor, size_t g0, size_t ng) {
  FOR_EACH(gg, ng) {
    const size_t g = g0 + gg;
    philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    philox4x32_ctr_t ctr = {{(uint32_t)g, (uint32_t)((uint64_t)g >> 32), tensor, 0x494e4954u}};
    philox4x32_ctr_t r = philox4x32(ctr, key);
    double z[4];
    for (int pair = 0; pair < 2; pair++) {
      double u1 = ((double)r.v[2 * pair] + 1.0) * 0x1p-32;
      double u2 = (double)r.v[2 * pair + 1] * 0x1p-32;
      double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586476925 * u2;
      z[2 * pair] = rad * cos(ang);
      z[2 * pair + 1] = rad * sin(ang);
    }
    for (size_t j = 0; j < 4; j++) {
      size_t e = 4 * g + j;
      if (e >= first && e < first + n) x[e - first] = (float)(z[j] * (double)std);
    }
  }
}

void remat__cu_init_normal(float *x, size_t first, size_t n, float std, uint64_t seed,
                           uint32_t tensor) {
  if (!n) return;
  const size_t g0 = first / 4, g1 = (first + n - 1) / 4 + 1;
  k_init_normal<<<grid_for(g1 - g0, 256), 256>>>(x, first, n, std, seed, tensor, g0, g1 - g0);
  done();
}

/* ------------------------------------------------------------- bf16 */

__global__ void k_to_bf16(uint16_t *dst, const float *src, size_t n) {
  FOR_EACH(i, n) dst[i] = bf16_round(src[i]);
}

__global__ void k_from_bf16(float *dst, const uint16_t *src, size_t n) {
  FOR_EACH(i, n) dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

void remat__cu_to_bf16(uint16_t *dst, const float *src, size_t n) {
  if (n) k_to_bf16<<<grid_for(n, 256), 256>>>(dst, src, n);
  done();
}

void remat__cu_from_bf16(float *dst, const uint16_t *src, size_t n) {
  if (n) k_from_bf16<<<grid_for(n, 256), 256>>>(dst, src, n);
  done();
}
