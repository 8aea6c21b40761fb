/* products.cu: the CUDA backend's bf16 matrix products, a linear layer's
 * three (products/products.h, kernels/bf16.h), through cuBLASLt: bf16
 * operands, every product and sum in fp32 (CUBLAS_COMPUTE_32F, scale fp32:
 * no TF32, no fp16 or bf16 reduction), the output fp32 or bf16 as the
 * shape says. Behind cuda_products.h; NOT YET RUN ON A GPU (docs/cuda.md).
 *
 * The three products of inp (N,C), weight (OC,C), dout (N,OC), row-major,
 * in cuBLASLt's column-major terms (a row-major (r, c) matrix is a
 * column-major (c, r) one, its transpose):
 *   forward        out^T (OC,N)    = weight (A^T) x inp^T (B)     [+ bias]
 *   to the input   dinp^T (C,N)    = weight^T (A) x dout^T (B)
 *   to the weight  dweight^T (C,OC) += inp^T (A) x dout (B^T)     beta 1
 * and the bias's gradient, dbias += dout's column sums, a kernel here.
 *
 * The bias is added as oneDNN adds it on the CPU: to the product's fp32
 * sum, and a bf16 out is rounded once from that. cuBLASLt's bias epilogue
 * takes a bias of the output's type (a bf16 one, rounded), and its C has
 * D's type, so neither is used: an fp32 out gets the bias by a kernel
 * after the product; a bf16 out with a bias is made in chunks of rows, the
 * product of each in fp32 into the scratch, then bias and rounding by a
 * kernel. A bf16 out without a bias is cuBLASLt's own rounding of the fp32
 * sum (to nearest even).
 *
 * Plans: products_create makes, for each shape, the matmul descriptor, the
 * layouts and the heuristic's first algorithm of each product (the
 * forward's chunk and its last, shorter one apart), with the workspace
 * capped (ws_cap) and with operands aligned only to their element (the
 * arena's pieces are 64-byte aligned, but a weight inside a layer's bf16
 * copy or a head's chunk of rows need not be): one algorithm per product,
 * whatever the pointers, so a product gives the same bits wherever its
 * operands lie (a recomputed forward equals the kept one). cuBLASLt's
 * results are reproducible run to run on the same GPU model and toolkit;
 * a sum it splits is reduced in a fixed order, in fp32, apart from the
 * output (pick); no atomics are asked for. Nothing is allocated on the
 * device: the workspace and the chunk live in the caller's scratch (the
 * arena). */
#include <algorithm>

#include "common.cuh"
#include "cuda_products.h"

/* The scratch: WS_ALIGN bytes of slack to align the workspace, the
 * workspace (rounded to WS_ALIGN), then the chunk of fp32 rows. */
#define WS_ALIGN ((size_t)256)       /* cuBLASLt's workspace alignment */
#define WS_MIN ((size_t)1 << 20)     /* any product may use 1 MiB */
#define WS_MAX ((size_t)32 << 20)    /* cuBLAS's recommended size on Hopper */
#define CHUNK_MAX ((size_t)16 << 20) /* a chunk's fp32 rows, bytes (one row at least) */

enum { FWD, FWD_TAIL, DATA, WEIGHT, NKIND };

/* One product: its descriptor, the layouts of A, B and D (C is D), the
 * algorithm and the workspace it needs. NULL handles: not made. */
typedef struct plan {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  size_t ws;
} plan;

typedef struct entry {
  remat__cu_mm s;
  int64_t rows; /* the forward's chunk (bf16 out with a bias), else N */
  plan k[NKIND];
} entry;

typedef struct products {
  int n;
  entry *e;
  size_t ws;    /* the largest plan's workspace */
  size_t chunk; /* the largest chunk's bytes */
} products;

/* A product in column-major terms: D (m, n) = op(A) op(B), A stored
 * (ar, ac) with leading dimension lda, B (br, bc) ldb, D ldd, of type dt. */
typedef struct dims {
  cublasOperation_t ta, tb;
  int64_t ar, ac, lda, br, bc, ldb, m, n, ldd;
  cudaDataType_t dt;
} dims;

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* ------------------------------------------------------ the bound */

/* The workspace a product of an (m, n) output may use: room for four fp32
 * partial outputs (a sum split in four), at least WS_MIN, at most WS_MAX. */
static size_t ws_cap(int64_t m, int64_t n) {
  return max_z(WS_MIN, std::min(WS_MAX, (size_t)m * (size_t)n * 16));
}

/* The forward's chunk of rows: with a bf16 out and a bias, as many as
 * CHUNK_MAX bytes of fp32 hold (1 .. N); else the whole product. */
static int64_t chunk_rows(const remat__cu_mm &s) {
  if (!(s.out_bf16 && s.bias) || s.OC <= 0) return s.N;
  const int64_t r = (int64_t)(CHUNK_MAX / ((size_t)s.OC * sizeof(float)));
  return r < 1 ? 1 : r > s.N ? s.N : r;
}

static size_t chunk_bytes(const remat__cu_mm &s) {
  return s.out_bf16 && s.bias && s.OC > 0 ? (size_t)chunk_rows(s) * (size_t)s.OC * 4 : 0;
}

/* The largest cap of a shape's plans: the forward's (OC, rows) (the tail
 * is shorter), the input's (C, N), the weight's (C, OC). */
static size_t shape_cap(const remat__cu_mm &s) {
  return max_z(ws_cap(s.OC, chunk_rows(s)), max_z(ws_cap(s.C, s.N), ws_cap(s.C, s.OC)));
}

static size_t scratch_of(size_t ws, size_t chunk) {
  return WS_ALIGN + round_up(ws, WS_ALIGN) + chunk;
}

/* Every plan's workspace is at most its cap (the heuristic is asked with
 * it), so the made plans' scratch is at most this. */
size_t remat__cu_products_bound(const remat__cu_mm *shapes, int n) {
  size_t ws = 0, chunk = 0;
  for (int i = 0; i < n; i++)
    ws = max_z(ws, shape_cap(shapes[i])), chunk = max_z(chunk, chunk_bytes(shapes[i]));
  return n > 0 ? scratch_of(ws, chunk) : 0;
}

/* ------------------------------------------------------ the plans */

#define TRY(call, why)                                 \
  do {                                                 \
    if ((call) != CUBLAS_STATUS_SUCCESS) return (why); \
  } while (0)

/* The heuristic's first algorithm for p's product within its cap, with
 * operands aligned to their element only. A sum split in parts may only
 * be reduced apart from the output, in fp32 (for an fp32 out also in the
 * out's type, fp32), then written once: never in a bf16 out (which would
 * round it more than once) nor "in place" into an out that already holds a
 * sum (dweight's: accumulating would then not be adding the finished
 * product). NULL, or why not. */
static const char *pick(plan *p, const dims &g) {
  cublasLtMatmulPreference_t pref = NULL;
  const uint64_t cap = ws_cap(g.m, g.n);
  const bool b16 = g.dt == CUDA_R_16BF;
  const uint32_t a16 = 2, ad = b16 ? 2 : 4,
                 split = b16 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                             : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                   CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  const cublasLtMatmulPreferenceAttributes_t at[6] = {
      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,   CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const void *val[6] = {&cap, &split, &a16, &a16, &ad, &ad};
  const size_t size[6] = {sizeof cap, sizeof split, sizeof a16, sizeof a16, sizeof ad, sizeof ad};
  for (int i = 0; i < 6 && st == CUBLAS_STATUS_SUCCESS; i++)
    st = cublasLtMatmulPreferenceSetAttribute(pref, at[i], val[i], size[i]);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(remat__cu_lt(), p->op, p->a, p->b, p->d, p->d, pref, 1,
                                        &res, &found);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found < 1) return "cuBLASLt has no algorithm for it";
  p->algo = res.algo;
  p->ws = res.workspaceSize;
  return NULL;
}

/* One product's descriptor, layouts and algorithm. NULL, or why not. */
static const char *make_plan(plan *p, const dims &g) {
  const char *why = "cuBLASLt could not describe it";
  TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), why);
  TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof g.ta), why);
  TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &g.tb, sizeof g.tb), why);
  TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)g.ar, (uint64_t)g.ac, g.lda), why);
  TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)g.br, (uint64_t)g.bc, g.ldb), why);
  TRY(cublasLtMatrixLayoutCreate(&p->d, g.dt, (uint64_t)g.m, (uint64_t)g.n, g.ldd), why);
  return pick(p, g);
}

static void drop_plan(plan *p) {
  if (p->d) cublasLtMatrixLayoutDestroy(p->d);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
}

/* The forward of n rows: weight stored (C, OC) taken transposed, inp
 * stored (C, n), out (OC, n) of type dt. */
static dims forward_dims(const remat__cu_mm &s, int64_t n, cudaDataType_t dt) {
  return dims{CUBLAS_OP_T, CUBLAS_OP_N, s.C, s.OC, s.C, s.C, n, s.C, s.OC, n, s.OC, dt};
}

/* A shape's plans (the header's table of the three products). */
static const char *make_entry(entry *e) {
  const remat__cu_mm &s = e->s;
  if (s.N <= 0 || s.C <= 0 || s.OC <= 0) return "a dimension is not positive";
  const cudaDataType_t bf = CUDA_R_16BF, f = CUDA_R_32F, fo = s.out_bf16 && !s.bias ? bf : f;
  e->rows = chunk_rows(s);
  const char *why = make_plan(&e->k[FWD], forward_dims(s, e->rows, fo));
  if (!why && s.N % e->rows) why = make_plan(&e->k[FWD_TAIL], forward_dims(s, s.N % e->rows, fo));
  if (!why)
    why = make_plan(&e->k[DATA], dims{CUBLAS_OP_N, CUBLAS_OP_N, s.C, s.OC, s.C, s.OC, s.N, s.OC,
                                      s.C, s.N, s.C, s.dinp_bf16 ? bf : f});
  if (!why)
    why = make_plan(&e->k[WEIGHT], dims{CUBLAS_OP_N, CUBLAS_OP_T, s.C, s.N, s.C, s.OC, s.N, s.OC,
                                        s.C, s.OC, s.C, f});
  return why;
}

void remat__cu_products_destroy(void *products_) {
  products *P = (products *)products_;
  if (!P) return;
  for (int i = 0; P->e && i < P->n; i++)
    for (int k = 0; k < NKIND; k++) drop_plan(&P->e[i].k[k]);
  free(P->e);
  free(P);
}

int remat__cu_products_create(void **out, const remat__cu_mm *shapes, int n, char *msg,
                              size_t len) {
  *out = NULL;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError(); /* clear the sticky error */
    snprintf(msg, len, "the bf16 products need a CUDA device and there is none here");
    return REMAT__CU_EINVAL;
  }
  products *P = (products *)calloc(1, sizeof *P);
  if (P) P->e = (entry *)calloc(n > 0 ? (size_t)n : 1, sizeof *P->e);
  if (!P || !P->e) {
    remat__cu_products_destroy(P);
    snprintf(msg, len, "out of memory for the bf16 products' plans");
    return REMAT__CU_ENOMEM;
  }
  for (int i = 0; i < n; i++) {
    entry *e = &P->e[i];
    e->s = shapes[i];
    P->n = i + 1;
    const char *why = make_entry(e);
    if (why) {
      snprintf(msg, len, "bf16 product %lld x %lld by %lld x %lld: %s", (long long)e->s.N,
               (long long)e->s.C, (long long)e->s.OC, (long long)e->s.C, why);
      remat__cu_products_destroy(P);
      return REMAT__CU_EINVAL;
    }
    for (int k = 0; k < NKIND; k++) P->ws = max_z(P->ws, e->k[k].ws);
    P->chunk = max_z(P->chunk, chunk_bytes(e->s));
  }
  *out = P;
  return 0;
}

size_t remat__cu_products_scratch(const void *products_) {
  const products *P = (const products *)products_;
  return P->n > 0 ? scratch_of(P->ws, P->chunk) : 0;
}

/* ------------------------------------------------------ the products */

/* out (N,OC) fp32 += bias, after the product. */
__global__ void k_bias_add(float *out, const float *bias, int64_t N, int64_t OC) {
  FOR_EACH(i, (size_t)(N * OC)) out[i] = out[i] + bias[i % (size_t)OC];
}

/* out (n,OC) bf16 = rows + bias, rounded once. */
__global__ void k_bias_round(uint16_t *out, const float *rows, const float *bias, int64_t n,
                             int64_t OC) {
  FOR_EACH(i, (size_t)(n * OC)) out[i] = round16(rows[i] + bias[i % (size_t)OC]);
}

/* dbias[o] += dout's column o summed over the rows in order from zero, in
 * fp32: kernels/dnnl.c's bias_backward, its bits. One thread per column. */
__global__ void k_dbias16(float *dbias, const uint16_t *dout, int64_t N, int64_t OC) {
  FOR_EACH(o, (size_t)OC) {
    float acc = 0.0f;
    for (int64_t n = 0; n < N; n++) acc += widen(dout[n * OC + (int64_t)o]);
    dbias[o] += acc;
  }
}

/* The entry of a product: the forward's by its out type and bias, the
 * backward's by its dinp type. */
static const entry *find(const void *products_, int64_t N, int64_t C, int64_t OC, bool b16,
                         bool bwd, bool bias, const char *op) {
  const products *P = (const products *)products_;
  for (int i = 0; i < P->n; i++) {
    const remat__cu_mm &s = P->e[i].s;
    const bool t = bwd ? s.dinp_bf16 : s.out_bf16;
    if (s.N == N && s.C == C && s.OC == OC && t == b16 && (bwd || s.bias == bias))
      return &P->e[i];
  }
  fail(op, "no plan for this shape (products_create makes every one at set-up)", __FILE__,
       __LINE__);
  return NULL;
}

/* D = op(A) op(B) + beta D with p's algorithm; ws: the aligned workspace. */
static void run(const plan &p, const void *A, const void *B, float beta, void *D, char *ws) {
  const float alpha = 1.0f;
  CKLT(cublasLtMatmul(remat__cu_lt(), p.op, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d,
                      &p.algo, p.ws ? ws : NULL, p.ws, 0));
}

static char *workspace_of(void *scratch) {
  return (char *)round_up((size_t)(uintptr_t)scratch, WS_ALIGN);
}

void remat__cu_bf16_matmul_forward(void *products_, void *out, const uint16_t *inp,
                                   const uint16_t *weight, const float *bias, int64_t N,
                                   int64_t C, int64_t OC, bool out_bf16, void *scratch) {
  const entry *e = find(products_, N, C, OC, out_bf16, false, bias != NULL, "bf16_matmul_forward");
  char *ws = workspace_of(scratch);
  if (!out_bf16 || !bias) {
    run(e->k[FWD], weight, inp, 0.0f, out, ws);
    if (bias) k_bias_add<<<grid_for((size_t)(N * OC), 256), 256>>>((float *)out, bias, N, OC);
    done();
    return;
  }
  float *rows = (float *)(ws + round_up(((const products *)products_)->ws, WS_ALIGN));
  for (int64_t r0 = 0; r0 < N; r0 += e->rows) { /* in stream order: one chunk at a time */
    const int64_t n = std::min(e->rows, N - r0);
    run(e->k[n == e->rows ? FWD : FWD_TAIL], weight, inp + r0 * C, 0.0f, rows, ws);
    k_bias_round<<<grid_for((size_t)(n * OC), 256), 256>>>((uint16_t *)out + r0 * OC, rows, bias,
                                                          n, OC);
    LAUNCHED();
  }
  done();
}

void remat__cu_bf16_matmul_backward(void *products_, void *dinp, float *dweight, float *dbias,
                                    const uint16_t *dout, const uint16_t *inp,
                                    const uint16_t *weight, int64_t N, int64_t C, int64_t OC,
                                    bool dinp_bf16, void *scratch) {
  const entry *e = find(products_, N, C, OC, dinp_bf16, true, false, "bf16_matmul_backward");
  char *ws = workspace_of(scratch);
  if (dinp) run(e->k[DATA], weight, dout, 0.0f, dinp, ws);
  if (dweight) run(e->k[WEIGHT], inp, dout, 1.0f, dweight, ws); /* accumulates */
  if (dbias) k_dbias16<<<grid_for((size_t)OC, 128), 128>>>(dbias, dout, N, OC);
  done();
}
