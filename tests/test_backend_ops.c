/* test_backend_ops.c: every op of every compiled backend (kernels/backend.h)
 * against plain references written here, on fixed odd shapes and on random
 * ones (sizes that are not multiples of 4, 8, 16 or 64, T = 1, T past the
 * CPU attention's tiles, one head, a vocabulary that is and is not padded).
 * A backend other than the CPU one is also compared with the CPU backend,
 * op by op, on the same inputs (ggml's test-backend-ops): a second backend
 * plugs into this loop.
 *
 * Each comparison says what it demands:
 * - exact (memcmp): where the contract promises bits: the buffer operations,
 *   the pointwise ops, the encoder (one order of addition), the dropout mask
 *   (Philox's layout), the fused kernels against the unfused ones they
 *   replace, encoder_backward_tied against the embedding's and the head's
 *   shares summed apart, cross-entropy's one pass against its two, the
 *   encoder split across two tensor ranks against the whole one;
 * - a relative tolerance (the largest error over the largest magnitude of
 *   the reference) against a double reference where rounding is free to
 *   differ: products, layernorm, attention, GELU, softmax, AdamW, sums, and
 *   the Llama family's RMSNorm, SwiGLU and rotary embedding (where a
 *   backend has them), whose bf16 variants are exact against the fp32 ops
 *   rounded once.
 *
 * Buffers come from the backend's own buffer_alloc and are read and written
 * by the host through a window the backend lends on each for its lifetime
 * (map): backends today are host memory, and the guard backend, whose
 * memory the host may touch only so, runs every op here too (the runs
 * under it, CTest label guard, check that nothing else touches it).
 *
 * Last, the seam itself: a model created on a copy of the CPU table whose
 * ops count their calls gives the default model's bits, and every kernel
 * and buffer operation the step uses was called through the table it
 * holds. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <Random123/philox.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "test_util.h"

/* ------------------------------------------------------------ harness */

static uint64_t rng_state = 0x5eed0ff5eed0ff5ull;
static double urand(void) { /* splitmix64, uniform in [0, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-53;
}
static int64_t irand(int64_t lo, int64_t hi) {
  return lo + (int64_t)(urand() * (double)(hi - lo + 1));
}
static void fill(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)urand();
}

/* The backend under test and where its buffers go (freed after each op). */
static const remat__backend *be;
enum { MAX_BUFS = 64 };
static void *bufs[MAX_BUFS];
static size_t buf_bytes[MAX_BUFS];
static int nbufs;
static void *balloc(size_t bytes) {
  if (nbufs == MAX_BUFS) abort();
  bytes = bytes ? bytes : 1;
  void *p = be->buffer_alloc(bytes);
  if (!p || be->map(p, bytes, REMAT_MAP_READ | REMAT_MAP_WRITE) != p) abort();
  buf_bytes[nbufs] = bytes;
  return bufs[nbufs++] = p;
}
static float *fbuf(size_t n) { return balloc(n * sizeof(float)); }
static float *frand(size_t n, float lo, float hi) {
  float *x = fbuf(n);
  fill(x, n, lo, hi);
  return x;
}
static float *fcopy(const float *x, size_t n) {
  float *y = fbuf(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}
static double *dbuf(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  if (!p) abort();
  return p;
}
static void release(void) {
  while (nbufs) {
    nbufs--;
    be->unmap(bufs[nbufs], bufs[nbufs], buf_bytes[nbufs], REMAT_MAP_READ | REMAT_MAP_WRITE);
    be->buffer_free(bufs[nbufs]);
  }
}

static bool same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* max|got - ref| / max|ref| (NaN counts as infinitely wrong) */
static double err_d(const float *got, const double *ref, size_t n) {
  double md = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (isnan(d)) return INFINITY;
    md = fmax(md, d);
    m = fmax(m, fabs(ref[i]));
  }
  return m > 0 ? md / m : md;
}
static double err_f(const float *got, const float *ref, size_t n) {
  double md = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (isnan(d)) return INFINITY;
    md = fmax(md, d);
    m = fmax(m, fabs((double)ref[i]));
  }
  return m > 0 ? md / m : md;
}

/* A backend other than the CPU one: its output against the CPU backend's
 * on the same inputs, within tol (0: bit for bit). */
static const remat__backend *cpu;
static void vs_cpu(const char *what, const float *got, const float *want, size_t n, double tol) {
  double e = err_f(got, want, n);
  CHECKF(tol == 0 ? same(got, want, n * sizeof(float)) : e <= tol,
         "%s: %s vs cpu, err %.1e (tol %.0e)", be->name, what, e, tol);
}

typedef struct {
  int64_t B, T, C, NH, V, Vp;
} shape;
static shape sh; /* the shape of the ops being checked */
#define SHAPE_FMT "B=%lld T=%lld C=%lld NH=%lld V=%lld/%lld"
#define SHAPE_ARGS                                                                         \
  (long long)sh.B, (long long)sh.T, (long long)sh.C, (long long)sh.NH, (long long)sh.V,    \
      (long long)sh.Vp

/* ------------------------------------------------------------ buffers */

static void check_buffers(void) {
  /* the arena: untouched it has no high water; a write raises the mark to
   * the end of its 8 bytes; the mark never goes back down */
  size_t bytes = 4096 + 40;
  char *a = balloc(bytes);
  size_t hw0 = be->high_water(a, bytes, 0);
  a[1000] = 1;
  size_t hw1 = be->high_water(a, bytes, 0);
  a[10] = 2;
  size_t hw2 = be->high_water(a, bytes, hw1);
  CHECKF(hw0 == 0 && hw1 == 1008 && hw2 == 1008, "%s: high_water of a fresh arena %zu, after a "
         "write at byte 1000 %zu, after one below it %zu (want 0, 1008, 1008)", be->name, hw0, hw1,
         hw2);

  size_t n = 1003; /* not a multiple of any vector width */
  float *x = frand(n, -1, 1), *y = frand(n, -1, 1), *z = fcopy(x, n);
  be->copy(y + 1, x + 2, (n - 3) * sizeof(float));
  bool ok = same(y + 1, z + 2, (n - 3) * sizeof(float));
  be->clear(y + 5, 7 * sizeof(float));
  for (int i = 5; i < 12; i++) ok &= y[i] == 0.0f && !signbit(y[i]);
  be->fill(y, 1.0f, 3);
  ok &= y[0] == 1.0f && y[1] == 1.0f && y[2] == 1.0f && y[3] == z[4];
  CHECKF(ok, "%s: copy, clear, fill exact on odd ranges", be->name);

  /* add: k sources stride apart, added in order into dst */
  size_t stride = n + 5;
  for (int64_t k = 1; k <= 3; k++) {
    float *dst = frand(n, -1, 1), *src = frand((size_t)k * stride, -1, 1);
    float *want = fcopy(dst, n);
    for (size_t j = 0; j < n; j++) {
      float s = want[j];
      for (int64_t q = 0; q < k; q++) s = s + src[(size_t)q * stride + j];
      want[j] = s;
    }
    be->add(dst, src, n, k, stride);
    CHECKF(same(dst, want, n * sizeof(float)), "%s: add of %lld sources in order, exact",
           be->name, (long long)k);
  }

  /* sum of squares of a vector in pieces, chunk by chunk over 8 lanes */
  size_t len[] = {1, 13, 200, 7, 64, 0, 333};
  remat__piece pieces[7];
  size_t count = 0;
  for (int k = 0; k < 7; k++) {
    pieces[k] = (remat__piece){frand(len[k] ? len[k] : 1, -2, 2), len[k]};
    count += len[k];
  }
  const size_t qs[] = {8, 24, 40, 1024};
  for (int iq = 0; iq < 4; iq++) {
    size_t q = qs[iq], nch = (count + q - 1) / q;
    double *got = dbuf(nch), *want = dbuf(nch), lane[8] = {0};
    size_t pos = 0, c = 0;
    for (int k = 0; k < 7; k++)
      for (size_t i = 0; i < pieces[k].n; i++, pos++) {
        double v = pieces[k].x[i];
        lane[(pos % q) & 7] += v * v;
        if (pos % q == q - 1 || pos == count - 1) {
          double s = 0;
          for (int l = 0; l < 8; l++) s += lane[l], lane[l] = 0;
          want[c++] = s;
        }
      }
    be->sumsq_chunks(got, pieces, 7, count, q);
    CHECKF(c == nch && same(got, want, nch * sizeof(double)),
           "%s: sumsq_chunks of %zu floats in 7 pieces, chunks of %zu, exact", be->name, count, q);
    free(got), free(want);
  }
  release();
}

/* The memory model plans a model's arena with its backend's own sizes
 * (remat__kernel_ws_get), the only statement of them: they must give every
 * workspace term, an alignment the arena's REMAT_ALIGN satisfies, and, in
 * bf16, a scratchpad at least what the products the backend makes for the
 * same shapes use (the CPU's: equal, so a plan is what a model allocates).
 * The encoder and attention checks run their kernels in exactly these
 * terms' memory. */
static void check_sizes(void) {
  const remat__backend_sizes *sz = be->sizes;
  remat__kernel_ws ws;
  memset(&ws, 0xff, sizeof ws);
  sz->workspace(&ws, sh.B, sh.T, sh.C, sh.NH, sh.Vp);
  CHECKF(sz->align && (sz->align & (sz->align - 1)) == 0 && REMAT_ALIGN % sz->align == 0 &&
             ws.attention_stats != SIZE_MAX && ws.attention_scratch != SIZE_MAX &&
             ws.encoder_tied != SIZE_MAX,
         "%s: sizes give every workspace term and an alignment (%zu) that REMAT_ALIGN "
         "satisfies, " SHAPE_FMT,
         be->name, sz->align, SHAPE_ARGS);
  /* a backend without bf16 products (products_create NULL) refuses bf16 runs; a host
   * backend's need bf16 on this CPU too (remat_precision_available), a device's not */
  if ((!remat_precision_available(REMAT_PRECISION_BF16, NULL) && !be->device) ||
      !be->products_create)
    return;
  remat_config cfg = {.channels = sh.C, .padded_vocab_size = sh.Vp};
  remat__mm_shape s[REMAT__PRODUCTS];
  int ns = remat__product_shapes(&cfg, sh.B, sh.T, s);
  size_t planned = 0;
  void *products = NULL;
  remat_error err;
  int rc = sz->product_scratch(s, ns, &planned, &err);
  if (!rc) rc = be->products_create(&products, s, ns, &err);
  size_t used = rc ? 0 : be->products_scratch(products);
  CHECKF(!rc && used <= planned && (be != cpu || used == planned),
         "%s: the sizes' products scratchpad (%zu bytes) covers the products made for the "
         "same shapes (%zu)%s, " SHAPE_FMT,
         be->name, planned, used, be == cpu ? ", exactly" : "", SHAPE_ARGS);
  if (products) be->products_destroy(products);
}

/* ------------------------------------------------------------ dropout */

static void check_dropout(void) {
  remat__dropout d = {.p = 0.37f, .seed = 0x123456789abcdefull, .step = 11, .micro = 3,
                      .layer = 9, .site = REMAT_DROP_RESID2};
  /* the documented layout, with Random123 directly */
  philox4x32_key_t key = {{0x89abcdefu, 0x01234567u}};
  bool layout = true;
  for (uint64_t i = 0; i < 4001; i++) {
    philox4x32_ctr_t ctr = {{(uint32_t)(i / 4), 3, (9u << 4) | 2u, 11}};
    double u = (double)(philox4x32(ctr, key).v[i % 4] >> 8) / 16777216.0;
    layout &= be->dropout_keep(&d, i) == (u >= (double)d.p);
  }
  CHECKF(layout && be->dropout_keep(NULL, 3) && be->dropout_keep(&(remat__dropout){0}, 3),
         "%s: dropout_keep follows the Philox layout exactly; true without dropout", be->name);

  size_t n = 10007; /* straddles Philox groups and 4096-element blocks */
  float *x = frand(n, -1, 1), *y = fbuf(n), *z = fcopy(x, n), *c = fbuf(n);
  be->dropout_apply(y, x, n, &d);
  const float scale = 1.0f / (1.0f - d.p);
  bool ok = true;
  for (size_t i = 0; i < n; i++) ok &= y[i] == (be->dropout_keep(&d, i) ? x[i] * scale : 0.0f);
  be->dropout_apply(z, z, n, &d);
  ok &= same(z, y, n * sizeof(float));
  be->dropout_apply(z, x, n, NULL);
  ok &= same(z, x, n * sizeof(float));
  CHECKF(ok, "%s: dropout_apply = keep ? x/(1-p) : 0 exact, in place too; copies without d",
         be->name);
  if (be != cpu) {
    cpu->dropout_apply(c, x, n, &d);
    vs_cpu("dropout_apply", y, c, n, 0);
  }
  release();
}

/* ------------------------------------------------------------ products */

static void ref_gemm(double *C, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t lda, const float *Bm, int64_t ldb, float beta,
                     const float *C0, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++)
        s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
             (double)(tb ? Bm[j * ldb + k] : Bm[k * ldb + j]);
      C[i * N + j] = alpha * s + (double)beta * C0[i * ldc + j];
    }
}

static void check_gemm(int64_t M, int64_t N, int64_t K) {
  for (int t = 0; t < 4; t++) {
    int ta = t & 1, tb = t >> 1;
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    float *A = frand((size_t)((ta ? K : M) * lda), -1, 1);
    float *Bm = frand((size_t)((tb ? N : K) * ldb), -1, 1);
    float *C = frand((size_t)(M * ldc), -1, 1), *C0 = fcopy(C, (size_t)(M * ldc));
    double *ref = dbuf((size_t)(M * N));
    float *got = fbuf((size_t)(M * N));
    be->gemm(ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, 0.5f, C, ldc);
    ref_gemm(ref, ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, 0.5f, C0, ldc);
    bool pad = true; /* columns past N untouched */
    for (int64_t i = 0; i < M; i++) {
      memcpy(got + i * N, C + i * ldc, (size_t)N * sizeof(float));
      pad &= same(C + i * ldc + N, C0 + i * ldc + N, 2 * sizeof(float));
    }
    double e = err_d(got, ref, (size_t)(M * N));
    CHECKF(e < 1e-5 && pad, "%s: gemm %c%c M=%lld N=%lld K=%lld alpha .75 beta .5 vs double: "
           "%.1e (tol 1e-5), padding untouched", be->name, ta ? 'T' : 'N', tb ? 'T' : 'N',
           (long long)M, (long long)N, (long long)K, e);
    if (be != cpu) {
      float *c2 = fcopy(C0, (size_t)(M * ldc));
      cpu->gemm(ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, 0.5f, c2, ldc);
      vs_cpu("gemm", C, c2, (size_t)(M * ldc), 1e-5);
    }
    free(ref);
    release();
  }
  /* gemm_bias is the bias written into C, then gemm with beta 1 */
  float *A = frand((size_t)(M * K), -1, 1), *W = frand((size_t)(N * K), -1, 1);
  float *bias = frand((size_t)N, -1, 1), *C = frand((size_t)(M * N), -9, 9);
  float *C2 = fbuf((size_t)(M * N));
  for (int64_t i = 0; i < M; i++) memcpy(C2 + i * N, bias, (size_t)N * sizeof(float));
  be->gemm_bias(M, N, K, A, K, W, K, bias, C, N);
  be->gemm(0, 1, M, N, K, 1.0f, A, K, W, K, 1.0f, C2, N);
  CHECKF(same(C, C2, (size_t)(M * N) * sizeof(float)),
         "%s: gemm_bias = bias rows + gemm(beta 1), exact, M=%lld N=%lld K=%lld", be->name,
         (long long)M, (long long)N, (long long)K);
  release();
}

/* matmul forward and backward, then the fused ones against the unfused */
static void check_matmul(int64_t N, int64_t C, int64_t OC) {
  size_t nI = (size_t)(N * C), nW = (size_t)(OC * C), nO = (size_t)(N * OC);
  float *inp = frand(nI, -1, 1), *w = frand(nW, -1, 1), *b = frand((size_t)OC, -1, 1);
  float *out = fbuf(nO), *out0 = fbuf(nO);
  double *ref = dbuf(nO);
  be->matmul_forward(out, inp, w, b, N, C, OC);
  be->matmul_forward(out0, inp, w, NULL, N, C, OC);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double s = 0;
      for (int64_t c = 0; c < C; c++) s += (double)inp[n * C + c] * w[o * C + c];
      ref[n * OC + o] = s;
    }
  double e0 = err_d(out0, ref, nO);
  for (size_t i = 0; i < nO; i++) ref[i] += b[i % (size_t)OC];
  double e1 = err_d(out, ref, nO);
  CHECKF(e0 < 1e-5 && e1 < 1e-5, "%s: matmul_forward N=%lld C=%lld OC=%lld vs double, bias "
         "%.1e, none %.1e (tol 1e-5)", be->name, (long long)N, (long long)C, (long long)OC, e1, e0);
  if (be != cpu) {
    float *c2 = fbuf(nO);
    cpu->matmul_forward(c2, inp, w, b, N, C, OC);
    vs_cpu("matmul_forward", out, c2, nO, 1e-5);
  }

  /* backward: dinp overwritten (prefilled NaN), dweight and dbias accumulate */
  float *dout = frand(nO, -1, 1), *dinp = fbuf(nI), *dw = frand(nW, -1, 1);
  float *db = frand((size_t)OC, -1, 1);
  float *dw0 = fcopy(dw, nW), *db0 = fcopy(db, (size_t)OC);
  for (size_t i = 0; i < nI; i++) dinp[i] = NAN;
  be->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  double *rI = dbuf(nI), *rW = dbuf(nW), *rB = dbuf((size_t)OC);
  for (size_t i = 0; i < nW; i++) rW[i] = dw0[i];
  for (int64_t o = 0; o < OC; o++) rB[o] = db0[o];
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double g = dout[n * OC + o];
      rB[o] += g;
      for (int64_t c = 0; c < C; c++) {
        rI[n * C + c] += g * w[o * C + c];
        rW[o * C + c] += g * inp[n * C + c];
      }
    }
  double eI = err_d(dinp, rI, nI), eW = err_d(dw, rW, nW), eB = err_d(db, rB, (size_t)OC);
  CHECKF(eI < 1e-5 && eW < 1e-5 && eB < 1e-5, "%s: matmul_backward vs double: dinp %.1e, "
         "dweight %.1e, dbias %.1e (accumulated; tol 1e-5)", be->name, eI, eW, eB);
  float *dw2 = fcopy(dw0, nW);
  be->matmul_backward(NULL, dw2, NULL, dout, inp, w, N, C, OC);
  double eW2 = err_d(dw2, rW, nW);
  CHECKF(eW2 < 1e-5, "%s: matmul_backward without dinp and dbias: dweight %.1e (tol 1e-5)",
         be->name, eW2);

  /* forward_gelu = matmul_forward, gelu_forward: the same bits */
  float *fo = fbuf(nO), *fg = fbuf(nO), *ug = fbuf(nO);
  be->matmul_forward_gelu(fo, fg, inp, w, b, N, C, OC);
  be->gelu_forward(ug, out, nO);
  CHECKF(same(fo, out, nO * sizeof(float)) && same(fg, ug, nO * sizeof(float)),
         "%s: matmul_forward_gelu = matmul_forward + gelu_forward, exact", be->name);

  /* forward_residual = matmul_forward, dropout in place, residual add */
  float *resid = frand(nO, -1, 1), *fr = fbuf(nO), *ur = fcopy(out, nO);
  remat__dropout d = {.p = 0.2f, .seed = 7, .step = 2, .micro = 1, .layer = 3,
                      .site = REMAT_DROP_RESID1};
  for (int k = 0; k < 2; k++) {
    const remat__dropout *dp = k ? &d : NULL;
    memcpy(ur, out, nO * sizeof(float));
    be->matmul_forward_residual(fr, inp, w, b, resid, dp, N, C, OC);
    be->dropout_apply(ur, ur, nO, dp);
    be->residual_forward(ur, ur, resid, nO);
    CHECKF(same(fr, ur, nO * sizeof(float)), "%s: matmul_forward_residual = matmul_forward + "
           "dropout (%s) + residual_forward, exact", be->name, k ? "p 0.2" : "none");
  }

  /* backward_gelu = matmul_backward, then gelu_backward in place */
  float *x = frand(nI, -2, 2), *g1 = fbuf(nI), *g2 = fbuf(nI);
  float *w1 = fcopy(dw0, nW), *b1 = fcopy(db0, (size_t)OC);
  float *w2 = fcopy(dw0, nW), *b2 = fcopy(db0, (size_t)OC);
  be->matmul_backward_gelu(g1, w1, b1, dout, inp, w, x, N, C, OC);
  be->matmul_backward(g2, w2, b2, dout, inp, w, N, C, OC);
  be->gelu_backward(g2, x, g2, nI);
  CHECKF(same(g1, g2, nI * sizeof(float)) && same(w1, w2, nW * sizeof(float)) &&
             same(b1, b2, (size_t)OC * sizeof(float)),
         "%s: matmul_backward_gelu = matmul_backward + gelu_backward in place, exact", be->name);
  free(ref), free(rI), free(rW), free(rB);
  release();
}

/* ------------------------------------------------------------ rows */

static void check_encoder(void) {
  int64_t B = sh.B, T = sh.T, C = sh.C, V = sh.V, Vp = sh.Vp, N = B * T;
  size_t nE = (size_t)(Vp * C), nP = (size_t)(T * C), nO = (size_t)(N * C);
  int32_t *tok = balloc((size_t)N * sizeof(int32_t));
  /* a few distinct tokens (multiples of V/5), so rows repeat; the last is V - 1 */
  const int64_t kinds = V - 1 < 4 ? V - 1 : 4, step = V > 5 ? V / 5 : 1;
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)(irand(0, kinds) * step);
  tok[N - 1] = (int32_t)(V - 1);
  float *wte = frand(nE, -1, 1), *wpe = frand(nP, -1, 1), *out = fbuf(nO), *want = fbuf(nO);
  be->encoder_forward(out, tok, wte, wpe, B, T, C);
  for (int64_t i = 0; i < N; i++)
    for (int64_t c = 0; c < C; c++) want[i * C + c] = wte[tok[i] * C + c] + wpe[(i % T) * C + c];
  CHECKF(same(out, want, nO * sizeof(float)), "%s: encoder_forward exact, " SHAPE_FMT, be->name,
         SHAPE_ARGS);

  /* backward: both accumulate, in (b, t) order */
  float *dout = frand(nO, -1, 1), *dwte = frand(nE, -1, 1), *dwpe = frand(nP, -1, 1);
  float *rte = fcopy(dwte, nE), *rpe = fcopy(dwpe, nP), *h = fcopy(dwte, nE), *p0 = fcopy(dwpe, nP);
  be->encoder_backward(dwte, dwpe, dout, tok, B, T, C);
  for (int64_t i = 0; i < N; i++)
    for (int64_t c = 0; c < C; c++) {
      rte[tok[i] * C + c] += dout[i * C + c];
      rpe[(i % T) * C + c] += dout[i * C + c];
    }
  CHECKF(same(dwte, rte, nE * sizeof(float)) && same(dwpe, rpe, nP * sizeof(float)),
         "%s: encoder_backward accumulates in (b, t) order, exact", be->name);

  /* tied: onto the head's share h, the embedding's own sum from zero, added
   * once: h + e, as if the two were summed apart (rows not in the batch
   * stay h + 0); dwpe accumulates as in encoder_backward */
  remat__kernel_ws ws;
  be->sizes->workspace(&ws, B, T, C, sh.NH, Vp);
  void *work = balloc(ws.encoder_tied);
  float *e = fbuf(nE), *want_te = fbuf(nE), *tied = fcopy(h, nE), *pe = fcopy(p0, nP);
  memset(e, 0, nE * sizeof(float));
  float *junk = fbuf(nP);
  be->encoder_backward(e, junk, dout, tok, B, T, C);
  for (size_t i = 0; i < nE; i++) want_te[i] = h[i] + e[i];
  be->encoder_backward_tied(tied, pe, dout, tok, B, T, C, Vp, work);
  CHECKF(same(tied, want_te, nE * sizeof(float)) && same(pe, rpe, nP * sizeof(float)),
         "%s: encoder_backward_tied = head's share + embedding's summed apart, exact; dwpe "
         "accumulates", be->name);

  /* no positions (wpe, dwpe NULL): wte[token] alone, and dwte's bits as
   * with dwpe given, in all three */
  be->encoder_forward(out, tok, wte, NULL, B, T, C);
  bool fwd = true;
  for (int64_t i = 0; i < N; i++)
    fwd &= same(out + i * C, wte + tok[i] * C, (size_t)C * sizeof(float));
  float *te = fcopy(h, nE);
  be->encoder_backward(te, NULL, dout, tok, B, T, C);
  bool bwd = same(te, rte, nE * sizeof(float));
  memcpy(te, h, nE * sizeof(float));
  be->encoder_backward_tied(te, NULL, dout, tok, B, T, C, Vp, work);
  bool tie = same(te, want_te, nE * sizeof(float));
  CHECKF(fwd && bwd && tie,
         "%s: encoder without positions: forward wte[token] (%d), backward (%d) and tied (%d) "
         "give dwte's bits of the runs with dwpe, exact", be->name, fwd, bwd, tie);
  release();
}

static void check_layernorm(void) {
  int64_t N = sh.B * sh.T, C = sh.C;
  size_t n = (size_t)(N * C);
  float *inp = frand(n, -2, 3), *w = frand((size_t)C, 0.5f, 1.5f), *b = frand((size_t)C, -1, 1);
  float *out = fbuf(n), *mean = fbuf((size_t)N), *rstd = fbuf((size_t)N);
  be->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  double *ro = dbuf(n), *rm = dbuf((size_t)N), *rr = dbuf((size_t)N), *xh = dbuf(n);
  for (int64_t i = 0; i < N; i++) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; c++) m += inp[i * C + c];
    m /= (double)C;
    for (int64_t c = 0; c < C; c++) v += (inp[i * C + c] - m) * (inp[i * C + c] - m);
    double r = 1.0 / sqrt(v / (double)C + 1e-5);
    rm[i] = m, rr[i] = r;
    for (int64_t c = 0; c < C; c++) {
      xh[i * C + c] = (inp[i * C + c] - m) * r;
      ro[i * C + c] = xh[i * C + c] * w[c] + b[c];
    }
  }
  double eo = err_d(out, ro, n), em = err_d(mean, rm, (size_t)N), er = err_d(rstd, rr, (size_t)N);
  CHECKF(eo < 1e-5 && em < 1e-5 && er < 1e-5, "%s: layernorm_forward vs double: out %.1e mean "
         "%.1e rstd %.1e (tol 1e-5), " SHAPE_FMT, be->name, eo, em, er, SHAPE_ARGS);

  /* backward: dinp, dweight, dbias all accumulate */
  float *dout = frand(n, -1, 1), *dinp = frand(n, -1, 1), *dw = frand((size_t)C, -1, 1),
        *db = frand((size_t)C, -1, 1);
  double *ri = dbuf(n), *rw = dbuf((size_t)C), *rb = dbuf((size_t)C);
  for (size_t i = 0; i < n; i++) ri[i] = dinp[i];
  for (int64_t c = 0; c < C; c++) rw[c] = dw[c], rb[c] = db[c];
  be->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  for (int64_t i = 0; i < N; i++) {
    double s1 = 0, s2 = 0;
    for (int64_t c = 0; c < C; c++) {
      double g = (double)dout[i * C + c] * w[c];
      s1 += g, s2 += g * xh[i * C + c];
      rb[c] += dout[i * C + c];
      rw[c] += dout[i * C + c] * xh[i * C + c];
    }
    s1 /= (double)C, s2 /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      double g = (double)dout[i * C + c] * w[c];
      ri[i * C + c] += (g - s1 - xh[i * C + c] * s2) * rr[i];
    }
  }
  double ei = err_d(dinp, ri, n), ew = err_d(dw, rw, (size_t)C), eb = err_d(db, rb, (size_t)C);
  CHECKF(ei < 1e-5 && ew < 1e-5 && eb < 1e-5, "%s: layernorm_backward vs double, accumulated: "
         "dinp %.1e dweight %.1e dbias %.1e (tol 1e-5)", be->name, ei, ew, eb);
  free(ro), free(rm), free(rr), free(xh), free(ri), free(rw), free(rb);
  release();
}

/* ------------------------------------------------------------ attention */

/* Straight from the definition in kernels.h, in double: out (B,T,C), lse
 * (B,NH,T), dqkv (B,T,3C). */
static void ref_attention(double *out, double *lse, double *dqkv, const float *dout,
                          const float *qkv, const remat__dropout *d) {
  const int64_t B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)hs), pk = d ? (double)(1.0f / (1.0f - d->p)) : 1.0;
  double *P = dbuf((size_t)T), *dP = dbuf((size_t)T), *M = dbuf((size_t)T);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const float *q = qkv + (b * T + t) * C3 + h * hs;
        double mx = -INFINITY, s = 0;
        for (int64_t u = 0; u <= t; u++) {
          const float *k = qkv + (b * T + u) * C3 + C + h * hs;
          double a = 0;
          for (int64_t i = 0; i < hs; i++) a += (double)q[i] * k[i];
          P[u] = a * scale;
          mx = fmax(mx, P[u]);
        }
        for (int64_t u = 0; u <= t; u++) s += (P[u] = exp(P[u] - mx));
        const uint64_t base = (uint64_t)(((b * NH + h) * T + t) * T);
        for (int64_t u = 0; u <= t; u++) {
          P[u] /= s;
          M[u] = !d || be->dropout_keep(d, base + (uint64_t)u) ? pk : 0.0;
        }
        lse[(b * NH + h) * T + t] = mx + log(s);
        for (int64_t i = 0; i < hs; i++) {
          double o = 0;
          for (int64_t u = 0; u <= t; u++)
            o += P[u] * M[u] * qkv[(b * T + u) * C3 + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = o;
        }
        const float *dO = dout + (b * T + t) * C + h * hs;
        double dot = 0;
        for (int64_t u = 0; u <= t; u++) {
          const float *v = qkv + (b * T + u) * C3 + 2 * C + h * hs;
          double g = 0;
          for (int64_t i = 0; i < hs; i++) {
            g += (double)dO[i] * v[i];
            dqkv[(b * T + u) * C3 + 2 * C + h * hs + i] += P[u] * M[u] * dO[i];
          }
          dP[u] = g * M[u];
          dot += dP[u] * P[u];
        }
        for (int64_t u = 0; u <= t; u++) {
          double dS = P[u] * (dP[u] - dot) * scale;
          const float *k = qkv + (b * T + u) * C3 + C + h * hs;
          for (int64_t i = 0; i < hs; i++) {
            dqkv[(b * T + t) * C3 + h * hs + i] += dS * k[i];
            dqkv[(b * T + u) * C3 + C + h * hs + i] += dS * q[i];
          }
        }
      }
  free(P), free(dP), free(M);
}

static void check_attention(void) {
  int64_t B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, N = B * T;
  size_t nq = (size_t)(N * 3 * C), no = (size_t)(N * C), nr = (size_t)(B * NH * T);
  remat__kernel_ws ws;
  be->sizes->workspace(&ws, B, T, C, NH, sh.Vp);
  remat__dropout drop = {.p = 0.15f, .seed = 99, .step = 4, .micro = 2, .layer = 1,
                         .site = REMAT_DROP_ATTN};
  for (int k = 0; k < 2; k++) {
    const remat__dropout *d = k ? &drop : NULL;
    float *qkv = frand(nq, -2, 2), *out = fbuf(no), *lse = fbuf(ws.attention_stats);
    float *dout = frand(no, -1, 1), *dqkv = fbuf(nq), *delta = fbuf(ws.attention_scratch);
    for (size_t i = 0; i < nq; i++) dqkv[i] = NAN;
    be->attention_forward(out, lse, qkv, B, T, C, NH, d);
    be->attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, d);
    double *ro = dbuf(no), *rl = dbuf(nr), *rq = dbuf(nq);
    ref_attention(ro, rl, rq, dout, qkv, d);
    double eo = err_d(out, ro, no), eq = err_d(dqkv, rq, nq);
    double el = be == cpu ? err_d(lse, rl, nr) : 0; /* the CPU's stats are one lse per row */
    CHECKF(eo < 1e-5 && el < 1e-5 && eq < 1e-5, "%s: attention %s vs double: out %.1e lse %.1e "
           "dqkv %.1e (tol 1e-5), " SHAPE_FMT, be->name, k ? "dropout .15" : "plain",
           eo, el, eq, SHAPE_ARGS);
    if (be != cpu) {
      float *co = fbuf(no), *cl = fbuf(nr), *cq = fbuf(nq), *cd = fbuf(nr);
      cpu->attention_forward(co, cl, qkv, B, T, C, NH, d);
      cpu->attention_backward(cq, cd, dout, qkv, co, cl, B, T, C, NH, d);
      vs_cpu("attention_forward", out, co, no, 1e-5);
      vs_cpu("attention_backward", dqkv, cq, nq, 1e-4);
    }
    free(ro), free(rl), free(rq);
    release();
  }
}

/* attention_decode: the rows of one sequence (batch row 0 of qkv) over a
 * cache of its keys and values side by side (rows 2C apart, as generation
 * keeps them). All rows in one call from position 0 give attention_forward's
 * bits (its contract); the rows fed in pieces (1, then 2, then the rest, as
 * a prompt and then tokens one at a time) give its values within rounding,
 * and match a double reference. */
static void check_attention_decode(void) {
  const int64_t T = sh.T, C = sh.C, NH = sh.NH, C3 = 3 * C;
  remat__kernel_ws ws;
  be->sizes->workspace(&ws, 1, T, C, NH, sh.Vp);
  float *qkv = frand((size_t)(T * C3), -2, 2), *kv = fbuf((size_t)(T * 2 * C));
  float *full = fbuf((size_t)(T * C)), *lse = fbuf(ws.attention_stats);
  float *one = fbuf((size_t)(T * C)), *parts = fbuf((size_t)(T * C));
  for (int64_t t = 0; t < T; t++)
    memcpy(kv + t * 2 * C, qkv + t * C3 + C, (size_t)(2 * C) * sizeof(float));
  be->attention_forward(full, lse, qkv, 1, T, C, NH, NULL);
  be->attention_decode(one, qkv, C3, qkv + C, qkv + 2 * C, C3, T, 0, C, NH);
  CHECKF(same(one, full, (size_t)(T * C) * sizeof(float)),
         "%s: attention_decode of all %lld rows from position 0 = attention_forward bit for bit, "
         "C=%lld NH=%lld", be->name, (long long)T, (long long)C, (long long)NH);
  const int64_t cut[] = {0, 1, 3, T};
  for (int i = 0; i < 3; i++) {
    int64_t lo = cut[i] < T ? cut[i] : T, hi = cut[i + 1] < T ? cut[i + 1] : T;
    if (hi > lo)
      be->attention_decode(parts + lo * C, qkv + lo * C3, C3, kv, kv + C, 2 * C, hi - lo, lo, C,
                           NH);
  }
  shape keep = sh;
  sh.B = 1;
  double *ro = dbuf((size_t)(T * C)), *rl = dbuf((size_t)(NH * T)), *rq = dbuf((size_t)(T * C3));
  float *dout = frand((size_t)(T * C), -1, 1);
  ref_attention(ro, rl, rq, dout, qkv, NULL);
  sh = keep;
  double ep = err_f(parts, full, (size_t)(T * C)), er = err_d(parts, ro, (size_t)(T * C));
  CHECKF(ep < 1e-5 && er < 1e-5,
         "%s: attention_decode in pieces (1, 2, the rest) over a cache of rows 2C apart: vs "
         "attention_forward %.1e, vs double %.1e (tol 1e-5), T=%lld C=%lld NH=%lld",
         be->name, ep, er, (long long)T, (long long)C, (long long)NH);
  if (be != cpu) {
    float *co = fbuf((size_t)(T * C));
    cpu->attention_decode(co, qkv, C3, qkv + C, qkv + 2 * C, C3, T, 0, C, NH);
    vs_cpu("attention_decode", one, co, (size_t)(T * C), 1e-5);
  }
  free(ro), free(rl), free(rq);
  release();
}

/* ------------------------------------------------ grouped-query attention */

/* The grouped-query ops in double, from kernels.h's definition: q rows ldq
 * apart (NH heads of hs), k and v rows ldkv apart (NKV heads), query head h
 * reading kv head h / (NH/NKV); out (B,T,NH*hs), lse (B,NH,T), dq (B*T
 * rows of ldq), dk, dv (B*T rows of ldkv), all zeroed first. */
static void ref_gqa(double *out, double *lse, double *dq, double *dk, double *dv,
                    const float *dout, const float *q, const float *k, const float *v,
                    int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                    int64_t hs, const remat__dropout *d) {
  const int64_t C = NH * hs, grp = NH / NKV;
  const double scale = 1.0 / sqrt((double)hs), pk = d ? (double)(1.0f / (1.0f - d->p)) : 1.0;
  double *P = dbuf((size_t)T), *dP = dbuf((size_t)T), *M = dbuf((size_t)T);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t qo = (b * T + t) * ldq + h * hs, kh = h / grp * hs;
        double mx = -INFINITY, s = 0;
        for (int64_t u = 0; u <= t; u++) {
          double a = 0;
          for (int64_t i = 0; i < hs; i++) a += (double)q[qo + i] * k[(b * T + u) * ldkv + kh + i];
          P[u] = a * scale;
          mx = fmax(mx, P[u]);
        }
        for (int64_t u = 0; u <= t; u++) s += (P[u] = exp(P[u] - mx));
        const uint64_t base = (uint64_t)(((b * NH + h) * T + t) * T);
        for (int64_t u = 0; u <= t; u++) {
          P[u] /= s;
          M[u] = !d || be->dropout_keep(d, base + (uint64_t)u) ? pk : 0.0;
        }
        lse[(b * NH + h) * T + t] = mx + log(s);
        for (int64_t i = 0; i < hs; i++) {
          double o = 0;
          for (int64_t u = 0; u <= t; u++) o += P[u] * M[u] * v[(b * T + u) * ldkv + kh + i];
          out[(b * T + t) * C + h * hs + i] = o;
        }
        const float *dO = dout + (b * T + t) * C + h * hs;
        double dot = 0;
        for (int64_t u = 0; u <= t; u++) {
          const int64_t ko = (b * T + u) * ldkv + kh;
          double g = 0;
          for (int64_t i = 0; i < hs; i++) {
            g += (double)dO[i] * v[ko + i];
            dv[ko + i] += P[u] * M[u] * dO[i];
          }
          dP[u] = g * M[u];
          dot += dP[u] * P[u];
        }
        for (int64_t u = 0; u <= t; u++) {
          const int64_t ko = (b * T + u) * ldkv + kh;
          double dS = P[u] * (dP[u] - dot) * scale;
          for (int64_t i = 0; i < hs; i++) {
            dq[qo + i] += dS * k[ko + i];
            dk[ko + i] += dS * q[qo + i];
          }
        }
      }
  free(P), free(dP), free(M);
}

/* max|got - ref| / scale over the first w of every ld (NaN: infinitely
 * wrong) */
static double err_rows(const float *got, const double *ref, size_t rows, int64_t ld, int64_t w,
                       double scale) {
  double md = 0;
  for (size_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < w; c++) {
      double e = fabs((double)got[r * (size_t)ld + (size_t)c] - ref[r * (size_t)ld + (size_t)c]);
      if (isnan(e)) return INFINITY;
      md = fmax(md, e);
    }
  return scale > 0 ? md / scale : md;
}

/* The bf16 grouped-query ops against the backend's packed bf16 ops on k and
 * v copied to every query head of their group: out, lse and dq the same
 * bits (each query head's arithmetic is the packed kernel's), dk and dv the
 * sums over the group's heads within fp32 rounding (the op sums them as it
 * goes); work as the sizes give it. */
static void check_gqa_bf16(const float *q, const float *k, const float *v, const float *dout,
                           int64_t ldq, int64_t ldkv, int64_t NKV, const remat__dropout *d) {
  const int64_t B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, hs = C / NH, grp = NH / NKV, N = B * T;
  const size_t work_bytes = be->sizes->attention_work ? be->sizes->attention_work(C, NH) : 0;
  if (!be->attention_forward_gqa_bf16 || !be->attention_forward_bf16 || !work_bytes) return;
  const size_t nq = (size_t)(N * ldq), nkv = (size_t)(N * ldkv), no = (size_t)(N * C),
               nl = (size_t)(B * NH * T), n3 = (size_t)(N * 3 * C);
  uint16_t *qh = balloc(nq * 2), *kh = balloc(nkv * 2), *vh = balloc(nkv * 2);
  uint16_t *rep = balloc(n3 * 2), *outh = balloc(no * 2);
  be->to_bf16(qh, q, nq), be->to_bf16(kh, k, nkv), be->to_bf16(vh, v, nkv);
  for (int64_t r = 0; r < N; r++)
    for (int64_t h = 0; h < NH; h++) {
      memcpy(rep + r * 3 * C + h * hs, qh + r * ldq + h * hs, (size_t)hs * 2);
      memcpy(rep + r * 3 * C + C + h * hs, kh + r * ldkv + h / grp * hs, (size_t)hs * 2);
      memcpy(rep + r * 3 * C + 2 * C + h * hs, vh + r * ldkv + h / grp * hs, (size_t)hs * 2);
    }
  void *work = balloc(work_bytes);
  float *out = fbuf(no), *lse = fbuf(nl), *delta = fbuf(nl), *po = fbuf(no), *pl = fbuf(nl);
  float *dq = fbuf(nq), *dk = fbuf(nkv), *dv = fbuf(nkv), *dqkv = fbuf(n3);
  be->attention_forward_gqa_bf16(out, lse, qh, kh, vh, ldq, ldkv, B, T, NH, NKV, hs, d, work,
                                 work_bytes);
  be->attention_forward_bf16(po, pl, rep, B, T, C, NH, d, work, work_bytes);
  be->to_bf16(outh, out, no);
  be->attention_backward_gqa_bf16(dq, dk, dv, delta, dout, qh, kh, vh, outh, lse, ldq, ldkv, B, T,
                                  NH, NKV, hs, d, work, work_bytes);
  be->attention_backward_bf16(dqkv, delta, dout, rep, outh, pl, B, T, C, NH, d, work,
                              work_bytes);
  bool exact = same(out, po, no * 4) && same(lse, pl, nl * 4);
  for (int64_t r = 0; r < N; r++) exact &= same(dq + r * ldq, dqkv + r * 3 * C, (size_t)C * 4);
  double *sk = dbuf(nkv), *sv = dbuf(nkv), m = 0;
  for (int64_t r = 0; r < N; r++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t i = 0; i < hs; i++) {
        sk[r * ldkv + h / grp * hs + i] += dqkv[r * 3 * C + C + h * hs + i];
        sv[r * ldkv + h / grp * hs + i] += dqkv[r * 3 * C + 2 * C + h * hs + i];
      }
  for (size_t i = 0; i < nkv; i++) m = fmax(m, fmax(fabs(sk[i]), fabs(sv[i])));
  const double ek = err_rows(dk, sk, (size_t)N, ldkv, NKV * hs, m),
               ev = err_rows(dv, sv, (size_t)N, ldkv, NKV * hs, m);
  CHECKF(exact && ek < 1e-5 && ev < 1e-5,
         "%s: attention gqa bf16 NKV=%lld vs the packed bf16 ops on k, v copied per head: out, "
         "lse, dq exact (%d); dk %.1e dv %.1e vs the heads' sum (tol 1e-5), " SHAPE_FMT,
         be->name, (long long)NKV, exact, ek, ev, SHAPE_ARGS);
  free(sk), free(sv);
}

/* The grouped-query ops at the shape's B, T, NH and head size, with NKV kv
 * heads, on q, k, v apart (rows with columns to spare): forward and
 * backward against double, lse and delta in the sizes' attention_stats and
 * attention_scratch floats; the decode over a cache of NKV heads (all rows
 * from position 0: the forward's bits; in pieces: its values); the bf16
 * ops; and for a backend other than the CPU one, the CPU's. */
static void check_attention_gqa_nkv(int64_t NKV) {
  const int64_t B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, hs = C / NH, N = B * T;
  const int64_t ldq = C + 1, ldkv = NKV * hs + 3;
  const size_t nq = (size_t)(N * ldq), nkv = (size_t)(N * ldkv), no = (size_t)(N * C),
               nl = (size_t)(B * NH * T);
  remat__kernel_ws ws;
  be->sizes->workspace(&ws, B, T, C, NH, sh.Vp);
  remat__dropout drop = {.p = 0.2f, .seed = 7, .step = 2, .micro = 1, .layer = 3,
                         .site = REMAT_DROP_ATTN};
  for (int x = 0; x < 2; x++) {
    const remat__dropout *d = x ? &drop : NULL;
    float *q = frand(nq, -2, 2), *k = frand(nkv, -2, 2), *v = frand(nkv, -2, 2);
    float *dout = frand(no, -1, 1), *out = fbuf(no), *lse = fbuf(ws.attention_stats);
    float *delta = fbuf(ws.attention_scratch), *dq = fbuf(nq), *dk = fbuf(nkv), *dv = fbuf(nkv);
    for (size_t i = 0; i < nq; i++) dq[i] = NAN;
    for (size_t i = 0; i < nkv; i++) dk[i] = dv[i] = NAN;
    be->attention_forward_gqa(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, d);
    be->attention_backward_gqa(dq, dk, dv, delta, dout, q, k, v, out, lse, ldq, ldkv, B, T, NH,
                               NKV, hs, d);
    double *ro = dbuf(no), *rl = dbuf(nl), *rq = dbuf(nq), *rk = dbuf(nkv), *rv = dbuf(nkv);
    ref_gqa(ro, rl, rq, rk, rv, dout, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, d);
    double m = 0; /* one scale for the three (dq, dk are 0 at T = 1) */
    for (size_t i = 0; i < nq; i++) m = fmax(m, fabs(rq[i]));
    for (size_t i = 0; i < nkv; i++) m = fmax(m, fmax(fabs(rk[i]), fabs(rv[i])));
    const double eo = err_d(out, ro, no), el = be == cpu ? err_d(lse, rl, nl) : 0,
                 eq = err_rows(dq, rq, (size_t)N, ldq, C, m),
                 ek = err_rows(dk, rk, (size_t)N, ldkv, NKV * hs, m),
                 ev = err_rows(dv, rv, (size_t)N, ldkv, NKV * hs, m);
    CHECKF(eo < 1e-5 && el < 1e-5 && eq < 1e-5 && ek < 1e-5 && ev < 1e-5,
           "%s: attention gqa NKV=%lld %s vs double: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e "
           "(tol 1e-5), " SHAPE_FMT, be->name, (long long)NKV, x ? "dropout .2" : "plain", eo,
           el, eq, ek, ev, SHAPE_ARGS);
    if (be != cpu) {
      float *co = fbuf(no), *cl = fbuf(nl), *cd = fbuf(nl), *cq = fbuf(nq), *ck = fbuf(nkv),
            *cv = fbuf(nkv);
      cpu->attention_forward_gqa(co, cl, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, d);
      cpu->attention_backward_gqa(cq, ck, cv, cd, dout, q, k, v, co, cl, ldq, ldkv, B, T, NH,
                                  NKV, hs, d);
      vs_cpu("attention_forward_gqa", out, co, no, 1e-5);
      /* the heads' columns side by side (the rest is the arenas' poison) */
      const float *got[3] = {dq, dk, dv}, *want[3] = {cq, ck, cv};
      const int64_t ld[3] = {ldq, ldkv, ldkv}, w[3] = {C, NKV * hs, NKV * hs};
      static const char *name[3] = {"attention_backward_gqa dq", "attention_backward_gqa dk",
                                    "attention_backward_gqa dv"};
      for (int i = 0; i < 3; i++) {
        float *a = fbuf((size_t)(N * w[i])), *b = fbuf((size_t)(N * w[i]));
        for (int64_t r = 0; r < N; r++) {
          memcpy(a + r * w[i], got[i] + r * ld[i], (size_t)w[i] * sizeof(float));
          memcpy(b + r * w[i], want[i] + r * ld[i], (size_t)w[i] * sizeof(float));
        }
        vs_cpu(name[i], a, b, (size_t)(N * w[i]), 1e-4);
      }
    }
    if (x == 0 && be->attention_decode_gqa) {
      /* batch row 0 over a cache of its keys and values side by side */
      const int64_t ldc = 2 * NKV * hs;
      float *kv = fbuf((size_t)(T * ldc)), *one = fbuf((size_t)(T * C)),
            *parts = fbuf((size_t)(T * C));
      for (int64_t t = 0; t < T; t++) {
        memcpy(kv + t * ldc, k + t * ldkv, (size_t)(NKV * hs) * sizeof(float));
        memcpy(kv + t * ldc + NKV * hs, v + t * ldkv, (size_t)(NKV * hs) * sizeof(float));
      }
      be->attention_decode_gqa(one, q, ldq, k, v, ldkv, T, 0, NH, NKV, hs);
      const int64_t cut[] = {0, 1, 3, T};
      for (int i = 0; i < 3; i++) {
        int64_t lo = cut[i] < T ? cut[i] : T, hi = cut[i + 1] < T ? cut[i + 1] : T;
        if (hi > lo)
          be->attention_decode_gqa(parts + lo * C, q + lo * ldq, ldq, kv, kv + NKV * hs, ldc,
                                   hi - lo, lo, NH, NKV, hs);
      }
      const double ep = err_f(parts, out, (size_t)(T * C));
      CHECKF(same(one, out, (size_t)(T * C) * sizeof(float)) && ep < 1e-5,
             "%s: attention_decode_gqa NKV=%lld: all %lld rows from position 0 = the forward "
             "bit for bit; in pieces (1, 2, the rest) over a cache of rows %lld apart vs the "
             "forward %.1e (tol 1e-5), hs=%lld NH=%lld", be->name, (long long)NKV, (long long)T,
             (long long)ldc, ep, (long long)hs, (long long)NH);
    }
    if (hs % 2 == 0) check_gqa_bf16(q, k, v, dout, ldq, ldkv, NKV, d);
    free(ro), free(rl), free(rq), free(rk), free(rv);
    release();
  }
}

/* Every NKV that divides NH, where the backend has the grouped-query ops. */
static void check_attention_gqa(void) {
  if (!be->attention_forward_gqa || !be->attention_backward_gqa) {
    printf("     %s: no grouped-query attention ops (NULL), not checked\n", be->name);
    return;
  }
  for (int64_t nkv = 1; nkv <= sh.NH; nkv++)
    if (sh.NH % nkv == 0) check_attention_gqa_nkv(nkv);
}

/* ------------------------------------------------------------ pointwise */

static const double PI = 3.14159265358979323846;
static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
}
static double gelu_grad_d(double x) {
  double a = sqrt(2.0 / PI), u = a * (x + 0.044715 * x * x * x), th = tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * a * (1.0 + 3.0 * 0.044715 * x * x);
}

static void check_pointwise(size_t n) {
  float *x = frand(n, -5, 5), *out = fbuf(n), *dout = frand(n, -1, 1), *dinp = fbuf(n);
  double *r = dbuf(n), *rg = dbuf(n);
  x[0] = 0.0f, x[n - 1] = -12.0f; /* 0 and the far tail */
  be->gelu_forward(out, x, n);
  be->gelu_backward(dinp, x, dout, n);
  for (size_t i = 0; i < n; i++) r[i] = gelu_d(x[i]), rg[i] = gelu_grad_d(x[i]) * dout[i];
  double ef = err_d(out, r, n), eb = err_d(dinp, rg, n);
  float *inplace = fcopy(dout, n);
  be->gelu_backward(inplace, x, inplace, n);
  CHECKF(ef < 1e-6 && eb < 1e-6 && same(inplace, dinp, n * sizeof(float)),
         "%s: gelu forward %.1e, backward %.1e vs double (tol 1e-6); in place exact, n=%zu",
         be->name, ef, eb, n);

  float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *s = fbuf(n), *want = fbuf(n);
  for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
  be->residual_forward(s, a, b, n);
  be->residual_forward(a, a, b, n);
  CHECKF(same(s, want, n * sizeof(float)) && same(a, want, n * sizeof(float)),
         "%s: residual_forward exact, aliasing out == a too", be->name);
  if (be != cpu) {
    float *c = fbuf(n);
    cpu->gelu_forward(c, x, n);
    vs_cpu("gelu_forward", out, c, n, 1e-6);
  }
  free(r), free(rg);
  release();
}

/* ------------------------------------------------------------ loss */

/* A row of V logits in double: its largest, and the sum of exp(z - max). */
static void ref_softmax_row(const float *z, int64_t V, double *mx, double *s) {
  *mx = -INFINITY;
  *s = 0;
  for (int64_t v = 0; v < V; v++) *mx = fmax(*mx, z[v]);
  for (int64_t v = 0; v < V; v++) *s += exp(z[v] - *mx);
}

static void check_crossentropy(void) {
  int64_t N = sh.B * sh.T, V = sh.V, Vp = sh.Vp;
  size_t n = (size_t)(N * Vp);
  float *logits = frand(n, -4, 4), *l0 = fcopy(logits, n), *losses = fbuf((size_t)N);
  int32_t *tg = balloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tg[i] = (int32_t)irand(0, V - 1);
  const float dloss = 1.0f / (float)N;
  double sum = be->crossentropy_forward(logits, losses, tg, N, V, Vp);
  double *rp = dbuf(n), *rl = dbuf((size_t)N), *rd = dbuf(n), rs = 0;
  bool zeros = true;
  for (int64_t i = 0; i < N; i++) {
    const float *z = l0 + i * Vp;
    double mx, s;
    ref_softmax_row(z, V, &mx, &s);
    for (int64_t v = 0; v < V; v++) {
      rp[i * Vp + v] = exp(z[v] - mx) / s;
      rd[i * Vp + v] = (rp[i * Vp + v] - (v == tg[i])) * dloss;
    }
    rl[i] = -log(rp[i * Vp + tg[i]]);
    rs += rl[i];
    for (int64_t v = V; v < Vp; v++) zeros &= logits[i * Vp + v] == 0.0f;
  }
  double ep = err_d(logits, rp, n), el = err_d(losses, rl, (size_t)N), es = fabs(sum - rs) / rs;
  CHECKF(ep < 1e-5 && el < 1e-5 && es < 1e-6 && zeros, "%s: crossentropy_forward vs double: "
         "probs %.1e losses %.1e (tol 1e-5) sum %.1e (tol 1e-6); padding 0, " SHAPE_FMT,
         be->name, ep, el, es, SHAPE_ARGS);
  float *probs = fcopy(logits, n);
  be->crossentropy_backward(logits, tg, dloss, N, V, Vp);
  zeros = true;
  for (int64_t i = 0; i < N; i++)
    for (int64_t v = V; v < Vp; v++) zeros &= logits[i * Vp + v] == 0.0f;
  double ed = err_d(logits, rd, n);
  CHECKF(ed < 1e-5 && zeros, "%s: crossentropy_backward vs double: %.1e (tol 1e-5); padding 0",
         be->name, ed);
  /* one pass = forward then backward, bit for bit */
  float *both = fcopy(l0, n), *losses2 = fbuf((size_t)N);
  double sum2 = be->crossentropy_forward_backward(both, losses2, tg, dloss, N, V, Vp);
  CHECKF(sum2 == sum && same(both, logits, n * sizeof(float)) &&
             same(losses2, losses, (size_t)N * sizeof(float)),
         "%s: crossentropy_forward_backward = forward + backward, exact", be->name);
  if (be != cpu) {
    float *c = fcopy(l0, n), *cl = fbuf((size_t)N);
    cpu->crossentropy_forward(c, cl, tg, N, V, Vp);
    vs_cpu("crossentropy_forward", probs, c, n, 1e-5);
  }
  free(rp), free(rl), free(rd);
  release();
}

/* ------------------------------------------------------------ vocab */

/* The vocabulary split across two tensor ranks (kernels.h's vocab_*),
 * where a backend has it: rank r holds Vl = ceil(Vp / 2) rows of the token
 * matrix and columns of the logits from first = r Vl, of which vocab_real
 * are tokens. Against the whole ops exactly (the encoder) or a double
 * reference (the loss), and a backend other than the CPU one against the
 * CPU's on the same inputs. */
static int64_t vocab_real(int r, int64_t Vl) {
  int64_t v = sh.V - r * Vl;
  return v < 0 ? 0 : v < Vl ? v : Vl;
}

static void check_vocab_encoder(void) {
  if (!be->vocab_encoder_forward) return;
  int64_t B = sh.B, T = sh.T, C = sh.C, N = B * T, Vl = (sh.Vp + 1) / 2;
  size_t nE = (size_t)(2 * Vl * C), nP = (size_t)(T * C), nO = (size_t)(N * C);
  int32_t *tok = balloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)irand(0, sh.V - 1);
  float *wte = frand(nE, -1, 1), *wpe = frand(nP, -1, 1), *whole = fbuf(nO);
  float *out[2] = {fbuf(nO), fbuf(nO)}, *dout = frand(nO, -1, 1);
  float *dwte = frand(nE, -1, 1), *dwpe = frand(nP, -1, 1);
  float *te = fcopy(dwte, nE), *pe = fcopy(dwpe, nP);
  float *cte = fcopy(dwte, nE), *cpe = fcopy(dwpe, nP);
  be->encoder_forward(whole, tok, wte, wpe, B, T, C);
  be->encoder_backward(te, pe, dout, tok, B, T, C);
  for (int r = 0; r < 2; r++) { /* rank 0 adds the positions */
    be->vocab_encoder_forward(out[r], tok, wte + r * Vl * C, r ? NULL : wpe, r * Vl, Vl, B, T, C);
    be->vocab_encoder_backward(dwte + r * Vl * C, r ? NULL : dwpe, dout, tok, r * Vl, Vl, B, T,
                               C);
  }
  bool fwd = true;
  for (size_t i = 0; i < nO; i++) fwd &= out[0][i] + out[1][i] == whole[i];
  CHECKF(fwd && same(dwte, te, nE * 4) && same(dwpe, pe, nP * 4),
         "%s: vocab_encoder on 2 ranks: the outputs sum to encoder_forward's, the gradients "
         "are encoder_backward's, exact, " SHAPE_FMT, be->name, SHAPE_ARGS);
  if (be != cpu) {
    float *c[2] = {fbuf(nO), fbuf(nO)};
    for (int r = 0; r < 2; r++) {
      cpu->vocab_encoder_forward(c[r], tok, wte + r * Vl * C, r ? NULL : wpe, r * Vl, Vl, B, T, C);
      cpu->vocab_encoder_backward(cte + r * Vl * C, r ? NULL : cpe, dout, tok, r * Vl, Vl, B, T,
                                  C);
      vs_cpu(r ? "vocab_encoder_forward (rank 1)" : "vocab_encoder_forward (rank 0)", out[r],
             c[r], nO, 0);
    }
    vs_cpu("vocab_encoder_backward dwte", dwte, cte, nE, 0);
    vs_cpu("vocab_encoder_backward dwpe", dwpe, cpe, nP, 0);
  }
  release();
}

/* One backend's loss over both ranks' logits lg[r] ((N, Vl), fp32 or
 * bf16), the group's collectives done here: the larger max, the stats
 * summed rank 0's first; rank 0 finishes with the backward, rank 1
 * without. Returns rank 0's sum, rank 1's in *sum1. */
static double vocab_split(const remat__backend *b, void *lg[2], float *mx[2], double *st[2],
                          float *loss[2], const int32_t *tg, float dloss, int64_t Vl, bool bf16,
                          double *sum1) {
  int64_t N = sh.B * sh.T;
  double sum[2];
  for (int r = 0; r < 2; r++) {
    if (bf16)
      b->vocab_max_bf16(mx[r], lg[r], N, vocab_real(r, Vl), Vl);
    else
      b->vocab_max(mx[r], lg[r], N, vocab_real(r, Vl), Vl);
  }
  for (int64_t n = 0; n < N; n++) mx[0][n] = mx[1][n] = fmaxf(mx[0][n], mx[1][n]);
  for (int r = 0; r < 2; r++) {
    if (bf16)
      b->vocab_exp_bf16(lg[r], st[r], mx[r], tg, r * Vl, N, vocab_real(r, Vl), Vl);
    else
      b->vocab_exp(lg[r], st[r], mx[r], tg, r * Vl, N, vocab_real(r, Vl), Vl);
  }
  for (int64_t i = 0; i < 2 * N; i++) st[0][i] = st[1][i] = st[0][i] + st[1][i];
  for (int r = 0; r < 2; r++)
    sum[r] = bf16 ? b->vocab_finish_bf16(lg[r], loss[r], st[r], mx[r], tg, dloss, r * Vl, N,
                                         vocab_real(r, Vl), Vl, r == 0)
                  : b->vocab_finish(lg[r], loss[r], st[r], tg, dloss, r * Vl, N,
                                    vocab_real(r, Vl), Vl, r == 0);
  *sum1 = sum[1];
  return sum[0];
}

static float vocab_at(const void *p, size_t i, bool bf16) {
  return bf16 ? remat__bf16_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* The buffers of one run of vocab_split: each rank's logits (its columns
 * of the whole rows z, (N, 2 Vl)), maxima, stats and losses. */
typedef struct {
  void *lg[2];
  float *mx[2], *loss[2];
  double *st[2];
} vocab_bufs;
static void vocab_bufs_init(vocab_bufs *v, const float *z, int64_t N, int64_t Vl, bool bf16) {
  for (int r = 0; r < 2; r++) {
    v->lg[r] = balloc((size_t)(N * Vl) * (bf16 ? 2 : 4));
    for (int64_t n = 0; n < N; n++)
      for (int64_t j = 0; j < Vl; j++) {
        float x = z[n * 2 * Vl + r * Vl + j];
        if (bf16) ((uint16_t *)v->lg[r])[n * Vl + j] = remat__bf16_round(x);
        else ((float *)v->lg[r])[n * Vl + j] = x;
      }
    v->mx[r] = fbuf((size_t)N), v->loss[r] = fbuf((size_t)N);
    v->st[r] = balloc((size_t)(2 * N) * sizeof(double));
  }
}

static void check_vocab_loss(bool bf16) {
  if (bf16 ? !be->vocab_max_bf16 : !be->vocab_max) return;
  int64_t N = sh.B * sh.T, V = sh.V, Vl = (sh.Vp + 1) / 2, W = 2 * Vl;
  size_t nl = (size_t)(N * Vl);
  float *z = frand((size_t)(N * W), -4, 4); /* the whole rows, as the loss sees them */
  for (int64_t i = 0; bf16 && i < N * W; i++) z[i] = remat__bf16_float(remat__bf16_round(z[i]));
  int32_t *tg = balloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tg[i] = (int32_t)irand(0, V - 1);
  const float dloss = 1.0f / (float)N;
  vocab_bufs v, c;
  vocab_bufs_init(&v, z, N, Vl, bf16);
  double s1, sum = vocab_split(be, v.lg, v.mx, v.st, v.loss, tg, dloss, Vl, bf16, &s1);
  double el = 0, eg = 0, ep = 0, rs = 0;
  bool pad = true;
  for (int64_t n = 0; n < N; n++) {
    const float *x = z + n * W;
    double mx, s;
    ref_softmax_row(x, V, &mx, &s);
    double li = log(s) - (x[tg[n]] - mx);
    rs += li;
    el = fmax(el, fabs(v.loss[0][n] - li) / li);
    for (int64_t j = 0; j < W; j++) {
      int r = j >= Vl;
      float got = vocab_at(v.lg[r], (size_t)(n * Vl + j - r * Vl), bf16);
      double p = exp(x[j] - mx) / s;
      if (bf16 && r == 1) pad &= got == x[j]; /* the forward leaves bf16 logits */
      else if (j >= V) pad &= got == 0.0f;
      else if (r == 0) eg = fmax(eg, fabs(got - (p - (j == tg[n])) * dloss) / dloss);
      else ep = fmax(ep, fabs(got - p));
    }
  }
  const double tol = bf16 ? 0x1p-8 * 1.01 : 1e-5; /* bf16: the gradient rounded once */
  char fwd[48];
  snprintf(fwd, sizeof fwd, bf16 ? "the forward leaves the logits" : "probabilities %.1e (tol 1e-6)",
           ep);
  CHECKF(el < 1e-5 && fabs(sum - rs) / rs < 1e-6 && s1 == sum && eg <= tol && ep < 1e-6 && pad &&
             same(v.loss[0], v.loss[1], (size_t)N * 4),
         "%s: vocab loss%s on 2 ranks vs double over the whole rows: losses %.1e (tol 1e-5), "
         "gradient %.1e of dloss (tol %.0e), %s; the ranks' losses alike; "
         "padding 0, " SHAPE_FMT, be->name, bf16 ? " (bf16)" : "", el, eg, tol, fwd, SHAPE_ARGS);
  if (be != cpu) {
    vocab_bufs_init(&c, z, N, Vl, bf16);
    double c1, csum = vocab_split(cpu, c.lg, c.mx, c.st, c.loss, tg, dloss, Vl, bf16, &c1);
    double es = 0;
    for (int64_t i = 0; i < 2 * N; i++) es = fmax(es, fabs(v.st[0][i] - c.st[0][i]) /
                                                         fmax(fabs(c.st[0][i]), 1e-300));
    float *g[2][2] = {{fbuf(nl), fbuf(nl)}, {fbuf(nl), fbuf(nl)}};
    for (int r = 0; r < 2; r++)
      for (size_t i = 0; i < nl; i++)
        g[0][r][i] = vocab_at(v.lg[r], i, bf16), g[1][r][i] = vocab_at(c.lg[r], i, bf16);
    vs_cpu(bf16 ? "vocab_max_bf16" : "vocab_max", v.mx[0], c.mx[0], (size_t)N, 0);
    CHECKF(es < 1e-6 && fabs(sum - csum) / fabs(csum) < 1e-6,
           "%s: vocab_exp%s stats vs cpu %.1e (tol 1e-6), vocab_finish's sum %.1e", be->name,
           bf16 ? "_bf16" : "", es, fabs(sum - csum) / fabs(csum));
    vs_cpu("vocab_finish losses", v.loss[0], c.loss[0], (size_t)N, 1e-5);
    vs_cpu("vocab_finish (backward)", g[0][0], g[1][0], nl, bf16 ? 0x1p-7 : 1e-5);
    vs_cpu("vocab_finish (forward)", g[0][1], g[1][1], nl, bf16 ? 0 : 1e-5);
  }
  release();
}

/* ------------------------------------------------------------ optimizer */

static void check_optimizer(size_t n) {
  float *p = frand(n, -1, 1), *m = fbuf(n), *v = fbuf(n);
  float *g1 = frand(n, -1, 1), *g2 = frand(n, -1, 1);
  memset(m, 0, n * sizeof(float)), memset(v, 0, n * sizeof(float));
  g2[n / 2] = 0.0f;
  double *dp = dbuf(n), *dm = dbuf(n), *dv = dbuf(n);
  for (size_t i = 0; i < n; i++) dp[i] = p[i];
  remat__adamw opt = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  const float wd = 0.1f, gs = 0.5f;
  const float *g[2] = {g1, g2};
  for (int t = 1; t <= 2; t++) {
    opt.step = t;
    be->adamw_update(p, g[t - 1], m, v, n, &opt, wd, gs);
    for (size_t i = 0; i < n; i++) {
      double gg = (double)g[t - 1][i] * gs;
      dp[i] -= opt.lr * wd * dp[i];
      dm[i] = opt.beta1 * dm[i] + (1 - (double)opt.beta1) * gg;
      dv[i] = opt.beta2 * dv[i] + (1 - (double)opt.beta2) * gg * gg;
      dp[i] -= (opt.lr / (1 - pow(opt.beta1, t))) * dm[i] /
               (sqrt(dv[i]) / sqrt(1 - pow(opt.beta2, t)) + opt.eps);
    }
  }
  double ep = err_d(p, dp, n), em = err_d(m, dm, n), ev = err_d(v, dv, n);
  CHECKF(ep < 1e-6 && em < 1e-6 && ev < 1e-6, "%s: adamw_update two steps vs double, n=%zu: "
         "param %.1e m %.1e v %.1e (tol 1e-6)", be->name, n, ep, em, ev);
  if (be->adamw_update_fused) { /* a third step, fused, against the op and to_bf16 apart */
    float *p2 = fbuf(n), *m2 = fbuf(n), *v2 = fbuf(n), *g3 = fbuf(n);
    uint16_t *h = malloc(n * sizeof *h), *h2 = malloc(n * sizeof *h2);
    memcpy(p2, p, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4), memcpy(g3, g1, n * 4);
    opt.step = 3;
    be->adamw_update(p, g1, m, v, n, &opt, wd, gs);
    be->to_bf16(h, p, n);
    be->adamw_update_fused(p2, g3, m2, v2, h2, n, &opt, wd, gs);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= g3[i] == 0.0f;
    CHECKF(zero && same(p, p2, n * 4) && same(m, m2, n * 4) && same(v, v2, n * 4) &&
               same(h, h2, n * 2),
           "%s: adamw_update_fused = adamw_update and to_bf16, bit for bit, and the gradient 0",
           be->name);
    free(h), free(h2);
  }

  double s = be->sumsq(g1, n), r = 0;
  for (size_t i = 0; i < n; i++) r += (double)g1[i] * g1[i];
  CHECKF(fabs(s - r) / r < 1e-12 && be->sumsq(g1, 0) == 0.0,
         "%s: sumsq vs double %.1e (tol 1e-12), of nothing 0", be->name, fabs(s - r) / r);

  /* init: Box-Muller over Philox as dropout.c documents it (libm's
   * log/sin/cos may round differently: tolerance), and a slice gets the
   * whole tensor's values exactly */
  const uint64_t seed = 0xfeedbeefcafeull;
  const float std = 0.02f;
  float *x = fbuf(n), *y = fbuf(n);
  double *rx = dbuf(n);
  be->init_normal(x, 0, n, std, seed, 5);
  philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
  for (size_t e = 0; e < n; e++) {
    size_t gi = e / 4, j = e % 4;
    philox4x32_ctr_t ctr = {{(uint32_t)gi, (uint32_t)((uint64_t)gi >> 32), 5u, 0x494e4954u}};
    philox4x32_ctr_t w = philox4x32(ctr, key);
    int pair = (int)(j / 2);
    double u1 = ((double)w.v[2 * pair] + 1.0) * 0x1p-32, u2 = (double)w.v[2 * pair + 1] * 0x1p-32;
    double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586476925 * u2;
    rx[e] = (j % 2 ? rad * sin(ang) : rad * cos(ang)) * std;
  }
  size_t first = n / 3 + 1; /* not on a group of 4 */
  be->init_normal(y, first, n - first, std, seed, 5);
  double ei = err_d(x, rx, n);
  CHECKF(ei < 1e-6 && same(y, x + first, (n - first) * sizeof(float)),
         "%s: init_normal vs Box-Muller on Philox %.1e (tol 1e-6); a slice from %zu exact",
         be->name, ei, first);
  free(dp), free(dm), free(dv), free(rx);
  release();
}

/* ------------------------------------------------------------ bf16 */

/* The bf16 layers: each the fp32 op of the same name on the widened
 * inputs, its outputs rounded to bf16 once, exactly (layernorm, GELU and
 * its backward, the conversions); the loss against double on the widened
 * logits, its gradient within bf16's rounding. */
static void check_bf16(void) {
  if (!be->layernorm_forward_bf16) return; /* no bf16 layers on this backend (yet) */
  int64_t N = sh.B * sh.T, C = sh.C, V = sh.V, Vp = sh.Vp;
  size_t n = (size_t)(N * C);
  float *x = frand(n, -3, 3), *w = frand((size_t)C, 0.5f, 1.5f), *b = frand((size_t)C, -1, 1);
  x[0] = NAN; /* a NaN stays a NaN */
  uint16_t *h = balloc(n * 2), *h2 = balloc(n * 2);
  float *back = fbuf(n), *f = fbuf(n), *m = fbuf((size_t)N), *r = fbuf((size_t)N);
  float *m2 = fbuf((size_t)N), *r2 = fbuf((size_t)N);
  be->to_bf16(h, x, n);
  be->from_bf16(back, h, n);
  bool conv = isnan(back[0]);
  for (size_t i = 1; i < n; i++)
    conv &= h[i] == remat__bf16_round(x[i]) && back[i] == remat__bf16_float(h[i]) &&
            fabsf(back[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f;
  x[0] = 1.0f;
  be->layernorm_forward(f, m, r, x, w, b, N, C);
  be->layernorm_forward_bf16(h, m2, r2, x, w, b, N, C);
  bool ln = same(m, m2, (size_t)N * 4) && same(r, r2, (size_t)N * 4);
  for (size_t i = 0; i < n; i++) ln &= h[i] == remat__bf16_round(f[i]);
  /* GELU on bf16 input h (the layernorm's output) */
  float *hin = fbuf(n), *dout = frand(n, -1, 1);
  be->from_bf16(hin, h, n);
  be->gelu_forward(f, hin, n);
  be->gelu_forward_bf16(h2, h, n);
  bool gf = true;
  for (size_t i = 0; i < n; i++) gf &= h2[i] == remat__bf16_round(f[i]);
  be->gelu_backward(f, hin, dout, n);
  be->gelu_backward_bf16(h2, h, dout, n);
  bool gb = true;
  for (size_t i = 0; i < n; i++) gb &= h2[i] == remat__bf16_round(f[i]);
  CHECKF(conv && ln && gf && gb, "%s: bf16 conversions, layernorm, GELU forward and backward: "
         "the fp32 ops rounded once, exact, " SHAPE_FMT, be->name, SHAPE_ARGS);

  size_t nl = (size_t)(N * Vp);
  float *lf = frand(nl, -4, 4), *losses = fbuf((size_t)N), *l2 = fbuf((size_t)N);
  uint16_t *lg = balloc(nl * 2), *lg2 = balloc(nl * 2), *orig = balloc(nl * 2);
  be->to_bf16(lg, lf, nl);
  memcpy(lg2, lg, nl * 2);
  memcpy(orig, lg, nl * 2);
  be->from_bf16(lf, lg, nl); /* the logits the loss sees */
  int32_t *tg = balloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tg[i] = (int32_t)irand(0, V - 1);
  const float dloss = 1.0f / (float)N;
  double sum = be->crossentropy_forward_backward_bf16(lg, losses, tg, dloss, N, V, Vp);
  double sum2 = be->crossentropy_forward_bf16(lg2, l2, tg, N, V, Vp);
  double el = 0, eg = 0, rs = 0;
  bool pad = true;
  for (int64_t i = 0; i < N; i++) {
    const float *z = lf + i * Vp;
    double mx, s;
    ref_softmax_row(z, V, &mx, &s);
    double li = log(s) - (z[tg[i]] - mx);
    rs += li;
    el = fmax(el, fabs(losses[i] - li) / li);
    for (int64_t v = 0; v < V; v++) {
      double g = (exp(z[v] - mx) / s - (v == tg[i])) * dloss;
      eg = fmax(eg, fabs(remat__bf16_float(lg[i * Vp + v]) - g) / dloss);
    }
    for (int64_t v = V; v < Vp; v++) pad &= lg[i * Vp + v] == 0;
  }
  /* the gradient is rounded to bf16 once: |g| <= dloss, so within 2^-8 dloss */
  CHECKF(el < 1e-5 && fabs(sum - rs) / rs < 1e-6 && eg <= 0x1p-8 * 1.01 && pad && sum2 == sum &&
             same(l2, losses, (size_t)N * 4) && same(lg2, orig, nl * 2),
         "%s: bf16 cross-entropy vs double on the widened logits: losses %.1e (tol 1e-5), "
         "gradient %.2e of dloss (bf16 rounding, tol 2^-8); the forward alone leaves the "
         "logits and gives the same losses; padding 0, " SHAPE_FMT, be->name, el, eg, SHAPE_ARGS);
  release();
}

/* ------------------------------------------------------------ llama */

/* The Llama family's ops (RMSNorm, SwiGLU, the rotary embedding), where the
 * backend has them: against double references; their bf16 variants are the
 * fp32 ops on the widened inputs rounded once, exact; and, for a backend
 * other than the CPU one, against the CPU's. */
static double silu_d(double x) { return x / (1.0 + exp(-x)); }

static void ref_rope(double *out, const float *x, int64_t ld, int64_t B, int64_t T,
                     int64_t nh, int64_t hs, int64_t pos0, double theta, double sign) {
  for (int64_t i = 0; i < B * T * ld; i++) out[i] = x[i];
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t h = 0; h < nh; h++)
      for (int64_t i = 0; i < hs / 2; i++) {
        double a = sign * (double)(pos0 + r % T) * pow(theta, -2.0 * (double)i / (double)hs);
        int64_t at = r * ld + h * hs + 2 * i;
        out[at] = (double)x[at] * cos(a) - (double)x[at + 1] * sin(a);
        out[at + 1] = (double)x[at] * sin(a) + (double)x[at + 1] * cos(a);
      }
}

static bool rounded_once(const uint16_t *h, const float *f, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (h[i] != remat__bf16_round(f[i])) return false;
  return true;
}

static void check_llama_norm(void) {
  int64_t N = sh.B * sh.T, C = sh.C;
  size_t n = (size_t)(N * C);
  const float eps = 1e-5f;
  float *inp = frand(n, -2, 3), *w = frand((size_t)C, 0.5f, 1.5f), *out = fbuf(n);
  float *rstd = fbuf((size_t)N);
  be->rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  double *ro = dbuf(n), *rr = dbuf((size_t)N);
  for (int64_t i = 0; i < N; i++) {
    double ss = 0;
    for (int64_t c = 0; c < C; c++) ss += (double)inp[i * C + c] * inp[i * C + c];
    rr[i] = 1.0 / sqrt(ss / (double)C + (double)eps);
    for (int64_t c = 0; c < C; c++) ro[i * C + c] = inp[i * C + c] * rr[i] * w[c];
  }
  double eo = err_d(out, ro, n), er = err_d(rstd, rr, (size_t)N);
  /* backward: dinp and dweight accumulate */
  float *dout = frand(n, -1, 1), *dinp = frand(n, -1, 1), *dw = frand((size_t)C, -1, 1);
  float *dinp0 = fcopy(dinp, n), *dw0 = fcopy(dw, (size_t)C);
  double *ri = dbuf(n), *rw = dbuf((size_t)C);
  for (size_t i = 0; i < n; i++) ri[i] = dinp[i];
  for (int64_t c = 0; c < C; c++) rw[c] = dw[c];
  be->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  for (int64_t i = 0; i < N; i++) {
    double s = 0;
    for (int64_t c = 0; c < C; c++) {
      double xh = inp[i * C + c] * rr[i];
      s += (double)dout[i * C + c] * w[c] * xh;
      rw[c] += dout[i * C + c] * xh;
    }
    for (int64_t c = 0; c < C; c++)
      ri[i * C + c] += rr[i] * ((double)dout[i * C + c] * w[c] - inp[i * C + c] * rr[i] * s / (double)C);
  }
  double ei = err_d(dinp, ri, n), ew = err_d(dw, rw, (size_t)C);
  uint16_t *h = balloc(n * 2);
  float *r2 = fbuf((size_t)N);
  be->rmsnorm_forward_bf16(h, r2, inp, w, N, C, eps);
  bool b16 = rounded_once(h, out, n) && same(r2, rstd, (size_t)N * sizeof(float));
  CHECKF(eo < 1e-5 && er < 1e-5 && ei < 1e-5 && ew < 1e-5 && b16,
         "%s: rmsnorm vs double: forward out %.1e rstd %.1e, backward (accumulated) dinp %.1e "
         "dweight %.1e (tol 1e-5); bf16 forward the fp32 one rounded once, exact (%d), " SHAPE_FMT,
         be->name, eo, er, ei, ew, b16, SHAPE_ARGS);
  if (be != cpu) {
    float *o2 = fbuf(n), *i2 = fcopy(dinp0, n), *w2 = fcopy(dw0, (size_t)C);
    cpu->rmsnorm_forward(o2, r2, inp, w, N, C, eps);
    vs_cpu("rmsnorm_forward", out, o2, n, 1e-6);
    cpu->rmsnorm_backward(i2, w2, dout, inp, w, rstd, N, C);
    vs_cpu("rmsnorm_backward dinp", dinp, i2, n, 1e-6);
    vs_cpu("rmsnorm_backward dweight", dw, w2, (size_t)C, 1e-6);
  }
  free(ro), free(rr), free(ri), free(rw);
  release();
}

static void check_llama_swiglu(size_t n) {
  float *a = frand(n, -8, 8), *b = frand(n, -2, 2), *dout = frand(n, -1, 1);
  float *out = fbuf(n), *da = fbuf(n), *db = fbuf(n);
  a[0] = 0.0f, a[n - 1] = -20.0f;
  be->swiglu_forward(out, a, b, n);
  be->swiglu_backward(da, db, a, b, dout, n);
  double *r = dbuf(n), *ra = dbuf(n), *rb = dbuf(n);
  for (size_t i = 0; i < n; i++) {
    double x = a[i], s = 1.0 / (1.0 + exp(-x));
    r[i] = silu_d(x) * b[i];
    ra[i] = (double)dout[i] * b[i] * s * (1.0 + x * (1.0 - s));
    rb[i] = (double)dout[i] * silu_d(x);
  }
  double ef = err_d(out, r, n), ea = err_d(da, ra, n), eb = err_d(db, rb, n);
  /* bf16: on the widened bf16 values of a and b */
  uint16_t *ah = balloc(n * 2), *bh = balloc(n * 2), *oh = balloc(n * 2), *dah = balloc(n * 2);
  uint16_t *dbh = balloc(n * 2);
  float *aw = fbuf(n), *bw = fbuf(n);
  be->to_bf16(ah, a, n), be->to_bf16(bh, b, n);
  be->from_bf16(aw, ah, n), be->from_bf16(bw, bh, n);
  be->swiglu_forward(out, aw, bw, n);
  be->swiglu_forward_bf16(oh, ah, bh, n);
  bool bf = rounded_once(oh, out, n);
  be->swiglu_backward(da, db, aw, bw, dout, n);
  be->swiglu_backward_bf16(dah, dbh, ah, bh, dout, n);
  bool bb = rounded_once(dah, da, n) && rounded_once(dbh, db, n);
  CHECKF(ef < 1e-6 && ea < 1e-6 && eb < 1e-6 && bf && bb,
         "%s: swiglu vs double: forward %.1e, backward da %.1e db %.1e (tol 1e-6); bf16 "
         "forward (%d) and backward (%d) the fp32 ones rounded once, exact, n=%zu",
         be->name, ef, ea, eb, bf, bb, n);
  if (be != cpu) {
    float *c1 = fbuf(n), *c2 = fbuf(n);
    cpu->swiglu_forward(c1, aw, bw, n);
    vs_cpu("swiglu_forward", out, c1, n, 1e-6);
    cpu->swiglu_backward(c1, c2, aw, bw, dout, n);
    vs_cpu("swiglu_backward da", da, c1, n, 1e-6);
    vs_cpu("swiglu_backward db", db, c2, n, 1e-6);
  }
  free(r), free(ra), free(rb);
  release();
}

/* The rotary embedding on the q part of qkv rows (ld 3C): heads of the
 * shape's head size where it is even, else the row's first C & ~1 values
 * as one head. */
static void check_llama_rope(void) {
  const int64_t B = sh.B, T = sh.T, C = sh.C, ld = 3 * C, pos0 = sh.T;
  int64_t nh = sh.NH, hs = C / sh.NH;
  if (hs % 2) nh = 1, hs = C & ~(int64_t)1;
  if (hs == 0) return;
  const double theta = 10000.0;
  size_t n = (size_t)(B * T * ld);
  float *x = frand(n, -1, 1), *y = fcopy(x, n), *g = frand(n, -1, 1), *dg = fcopy(g, n);
  be->rope_forward(y, ld, B, T, nh, hs, pos0, theta);
  be->rope_backward(dg, ld, B, T, nh, hs, pos0, theta);
  double *r = dbuf(n), *rg = dbuf(n);
  ref_rope(r, x, ld, B, T, nh, hs, pos0, theta, 1.0);
  ref_rope(rg, g, ld, B, T, nh, hs, pos0, theta, -1.0);
  double ef = err_d(y, r, n), eb = err_d(dg, rg, n);
  float *back = fcopy(y, n);
  be->rope_backward(back, ld, B, T, nh, hs, pos0, theta);
  double md = err_f(back, x, n);
  /* bf16 rows: the fp32 op on the widened values, rounded once */
  uint16_t *h = balloc(n * 2);
  float *hw = fbuf(n);
  be->to_bf16(h, x, n), be->from_bf16(hw, h, n);
  be->rope_forward(hw, ld, B, T, nh, hs, pos0, theta);
  be->rope_forward_bf16(h, ld, B, T, nh, hs, pos0, theta);
  bool bf = rounded_once(h, hw, n);
  be->from_bf16(hw, h, n);
  be->rope_backward(hw, ld, B, T, nh, hs, pos0, theta);
  be->rope_backward_bf16(h, ld, B, T, nh, hs, pos0, theta);
  bool bb = rounded_once(h, hw, n);
  CHECKF(ef < 1e-6 && eb < 1e-6 && md < 1e-6 && bf && bb,
         "%s: rope (%lld heads of %lld, ld %lld, pos0 %lld) vs double: forward %.1e, backward "
         "%.1e; backward(forward(x)) - x %.1e (tol 1e-6); bf16 forward (%d) and backward (%d) "
         "the fp32 ones rounded once, exact, " SHAPE_FMT,
         be->name, (long long)nh, (long long)hs, (long long)ld, (long long)pos0, ef, eb, md, bf,
         bb, SHAPE_ARGS);
  if (be != cpu) {
    float *c = fcopy(x, n);
    cpu->rope_forward(c, ld, B, T, nh, hs, pos0, theta);
    vs_cpu("rope_forward", y, c, n, 1e-6);
  }
  free(r), free(rg);
  release();
}

static void check_llama(void) {
  if (!be->rmsnorm_forward) return; /* no Llama ops on this backend (yet) */
  check_llama_norm();
  check_llama_swiglu((size_t)(sh.B * sh.T * sh.C));
  check_llama_rope();
}

/* ------------------------------------------------------------ the seam */

/* The CPU table with every op the model uses counting its calls. */
enum {
  C_ALLOC, C_FREE, C_HIGH, C_CLEAR, C_FILL, C_ADD, C_CHUNKS, C_WS, C_DROP, C_ENC_F, C_ENC_B,
  C_ENC_TIED, C_LN_F, C_LN_B, C_MM_F, C_MM_B, C_MM_GELU, C_MM_RES, C_MM_B_GELU, C_ATT_F,
  C_ATT_B, C_GELU_F, C_CE, C_ADAMW, C_INIT,
  /* bf16 */
  C_TO_BF16, C_FROM_BF16, C_LN_F16, C_GELU_F16, C_GELU_B16, C_CE16, C_PROD_SCRATCH,
  C_PROD_MAKE, C_PROD_F, C_PROD_B, C_COUNT
};
static const char *const count_names[C_COUNT] = {
    "buffer_alloc", "buffer_free", "high_water", "clear", "fill", "add", "sumsq_chunks",
    "sizes.workspace", "dropout_apply", "encoder_forward", "encoder_backward",
    "encoder_backward_tied", "layernorm_forward", "layernorm_backward", "matmul_forward",
    "matmul_backward", "matmul_forward_gelu", "matmul_forward_residual",
    "matmul_backward_gelu", "attention_forward", "attention_backward", "gelu_forward",
    "crossentropy_forward_backward", "adamw_update", "init_normal", "to_bf16", "from_bf16",
    "layernorm_forward_bf16", "gelu_forward_bf16", "gelu_backward_bf16",
    "crossentropy_forward_backward_bf16", "sizes.product_scratch", "products_create",
    "bf16_matmul_forward",
    "bf16_matmul_backward"};
static long counts[C_COUNT];
#define COUNTED(k, op, params, args)                                                       \
  static void c_##op params {                                                              \
    counts[k]++;                                                                           \
    cpu->op args;                                                                          \
  }
static void *c_buffer_alloc(size_t bytes) {
  counts[C_ALLOC]++;
  return cpu->buffer_alloc(bytes);
}
static size_t c_high_water(const void *a, size_t bytes, size_t mark) {
  counts[C_HIGH]++;
  return cpu->high_water(a, bytes, mark);
}
static double c_crossentropy_forward_backward(float *l, float *losses, const int32_t *t,
                                              float dloss, int64_t N, int64_t V, int64_t Vp) {
  counts[C_CE]++;
  return cpu->crossentropy_forward_backward(l, losses, t, dloss, N, V, Vp);
}
COUNTED(C_FREE, buffer_free, (void *a), (a))
COUNTED(C_CLEAR, clear, (void *d, size_t n), (d, n))
COUNTED(C_FILL, fill, (float *d, float v, size_t n), (d, v, n))
COUNTED(C_ADD, add, (float *d, const float *s, size_t n, int64_t k, size_t st), (d, s, n, k, st))
COUNTED(C_CHUNKS, sumsq_chunks, (double *o, const remat__piece *p, int np, size_t c, size_t q),
        (o, p, np, c, q))
/* The sizes the model plans with, counted too. */
static void c_workspace(remat__kernel_ws *ws, int64_t B, int64_t T, int64_t C, int64_t NH,
                        int64_t V) {
  counts[C_WS]++;
  cpu->sizes->workspace(ws, B, T, C, NH, V);
}
static int c_product_scratch(const remat__mm_shape *s, int n, size_t *bytes, remat_error *err) {
  counts[C_PROD_SCRATCH]++;
  return cpu->sizes->product_scratch(s, n, bytes, err);
}
COUNTED(C_DROP, dropout_apply, (float *o, const float *i, size_t n, const remat__dropout *d),
        (o, i, n, d))
COUNTED(C_ENC_F, encoder_forward,
        (float *o, const int32_t *t, const float *we, const float *pe, int64_t B, int64_t T,
         int64_t C),
        (o, t, we, pe, B, T, C))
COUNTED(C_ENC_B, encoder_backward,
        (float *dte, float *dpe, const float *d, const int32_t *t, int64_t B, int64_t T,
         int64_t C),
        (dte, dpe, d, t, B, T, C))
COUNTED(C_ENC_TIED, encoder_backward_tied,
        (float *dte, float *dpe, const float *d, const int32_t *t, int64_t B, int64_t T,
         int64_t C, int64_t V, void *w),
        (dte, dpe, d, t, B, T, C, V, w))
COUNTED(C_LN_F, layernorm_forward,
        (float *o, float *m, float *r, const float *i, const float *w, const float *b, int64_t N,
         int64_t C),
        (o, m, r, i, w, b, N, C))
COUNTED(C_LN_B, layernorm_backward,
        (float *di, float *dw, float *db, const float *d, const float *i, const float *w,
         const float *m, const float *r, int64_t N, int64_t C),
        (di, dw, db, d, i, w, m, r, N, C))
COUNTED(C_MM_F, matmul_forward,
        (float *o, const float *i, const float *w, const float *b, int64_t N, int64_t C,
         int64_t OC),
        (o, i, w, b, N, C, OC))
COUNTED(C_MM_B, matmul_backward,
        (float *di, float *dw, float *db, const float *d, const float *i, const float *w,
         int64_t N, int64_t C, int64_t OC),
        (di, dw, db, d, i, w, N, C, OC))
COUNTED(C_MM_GELU, matmul_forward_gelu,
        (float *o, float *g, const float *i, const float *w, const float *b, int64_t N,
         int64_t C, int64_t OC),
        (o, g, i, w, b, N, C, OC))
COUNTED(C_MM_RES, matmul_forward_residual,
        (float *o, const float *i, const float *w, const float *b, const float *r,
         const remat__dropout *d, int64_t N, int64_t C, int64_t OC),
        (o, i, w, b, r, d, N, C, OC))
COUNTED(C_MM_B_GELU, matmul_backward_gelu,
        (float *di, float *dw, float *db, const float *d, const float *i, const float *w,
         const float *x, int64_t N, int64_t C, int64_t OC),
        (di, dw, db, d, i, w, x, N, C, OC))
COUNTED(C_ATT_F, attention_forward,
        (float *o, float *l, const float *q, int64_t B, int64_t T, int64_t C, int64_t NH,
         const remat__dropout *d),
        (o, l, q, B, T, C, NH, d))
COUNTED(C_ATT_B, attention_backward,
        (float *dq, float *de, const float *d, const float *q, const float *o, const float *l,
         int64_t B, int64_t T, int64_t C, int64_t NH, const remat__dropout *dr),
        (dq, de, d, q, o, l, B, T, C, NH, dr))
COUNTED(C_GELU_F, gelu_forward, (float *o, const float *i, size_t n), (o, i, n))
COUNTED(C_ADAMW, adamw_update,
        (float *p, const float *g, float *m, float *v, size_t n, const remat__adamw *o,
         float wd, float gs),
        (p, g, m, v, n, o, wd, gs))
/* The one-sweep update and the attention on bf16 operands count as the ops
 * they stand for. */
COUNTED(C_ADAMW, adamw_update_fused,
        (float *p, float *g, float *m, float *v, uint16_t *h, size_t n, const remat__adamw *o,
         float wd, float gs),
        (p, g, m, v, h, n, o, wd, gs))
COUNTED(C_ATT_F, attention_forward_bf16,
        (float *o, float *l, const uint16_t *q, int64_t B, int64_t T, int64_t C, int64_t NH,
         const remat__dropout *d, void *w, size_t wb),
        (o, l, q, B, T, C, NH, d, w, wb))
COUNTED(C_ATT_B, attention_backward_bf16,
        (float *dq, float *de, const float *d, const uint16_t *q, const uint16_t *o,
         const float *l, int64_t B, int64_t T, int64_t C, int64_t NH, const remat__dropout *dr,
         void *w, size_t wb),
        (dq, de, d, q, o, l, B, T, C, NH, dr, w, wb))
COUNTED(C_TO_BF16, to_bf16, (uint16_t *d, const float *x, size_t n), (d, x, n))
COUNTED(C_FROM_BF16, from_bf16, (float *d, const uint16_t *x, size_t n), (d, x, n))
COUNTED(C_LN_F16, layernorm_forward_bf16,
        (uint16_t *o, float *m, float *r, const float *i, const float *w, const float *b,
         int64_t N, int64_t C),
        (o, m, r, i, w, b, N, C))
COUNTED(C_GELU_F16, gelu_forward_bf16, (uint16_t *o, const uint16_t *i, size_t n), (o, i, n))
COUNTED(C_GELU_B16, gelu_backward_bf16,
        (uint16_t *di, const uint16_t *i, const float *d, size_t n), (di, i, d, n))
COUNTED(C_PROD_F, bf16_matmul_forward,
        (void *h, void *o, const uint16_t *i, const uint16_t *w, const float *b,
         int64_t N, int64_t C, int64_t OC, bool ob, void *sc),
        (h, o, i, w, b, N, C, OC, ob, sc))
COUNTED(C_PROD_B, bf16_matmul_backward,
        (void *h, void *di, float *dw, float *db, const uint16_t *d, const uint16_t *i,
         const uint16_t *w, int64_t N, int64_t C, int64_t OC, bool ib, void *sc),
        (h, di, dw, db, d, i, w, N, C, OC, ib, sc))
static double c_crossentropy_forward_backward_bf16(uint16_t *l, float *losses,
                                                   const int32_t *t, float dloss, int64_t N,
                                                   int64_t V, int64_t Vp) {
  counts[C_CE16]++;
  return cpu->crossentropy_forward_backward_bf16(l, losses, t, dloss, N, V, Vp);
}
static int c_products_create(void **out, const remat__mm_shape *s, int n,
                             remat_error *err) {
  counts[C_PROD_MAKE]++;
  return cpu->products_create(out, s, n, err);
}
COUNTED(C_INIT, init_normal,
        (float *x, size_t f, size_t n, float sd, uint64_t seed, uint32_t t),
        (x, f, n, sd, seed, t))

/* Two steps of a small model (a kept, a middle and a recomputed block, with
 * dropout) on the default backend and on the counting one; accumulate:
 * two micro-batches a step through the layers' gradient buffers; in fp32 or
 * in bf16 (remat_precision). */
static void check_seam(int accumulate, int precision) {
  remat__backend counting = *cpu;
  counting.name = "cpu, counted";
#define SET(op) counting.op = c_##op
  SET(buffer_alloc), SET(buffer_free), SET(high_water), SET(clear), SET(fill), SET(add);
  SET(sumsq_chunks), SET(dropout_apply), SET(encoder_forward);
  SET(encoder_backward), SET(encoder_backward_tied), SET(layernorm_forward);
  SET(layernorm_backward), SET(matmul_forward), SET(matmul_backward), SET(matmul_forward_gelu);
  SET(matmul_forward_residual), SET(matmul_backward_gelu), SET(attention_forward);
  SET(attention_backward), SET(gelu_forward), SET(crossentropy_forward_backward);
  SET(adamw_update), SET(init_normal), SET(to_bf16), SET(from_bf16);
  SET(layernorm_forward_bf16), SET(gelu_forward_bf16), SET(gelu_backward_bf16);
  SET(crossentropy_forward_backward_bf16), SET(products_create), SET(bf16_matmul_forward);
  SET(bf16_matmul_backward), SET(adamw_update_fused), SET(attention_forward_bf16);
  SET(attention_backward_bf16);
#undef SET
  remat__backend_sizes counting_sizes = *cpu->sizes;
  counting_sizes.workspace = c_workspace;
  counting_sizes.product_scratch = c_product_scratch;
  counting.sizes = &counting_sizes;
  memset(counts, 0, sizeof counts);
  remat_config cfg;
  remat_error err;
  if (remat_config_parse("3,20,4,61,16", &cfg, &err)) abort();
  cfg.precision = precision;
  const int bf16 = precision == REMAT_PRECISION_BF16;
  const uint8_t policy[3] = {REMAT_KEEP, REMAT_MIDDLE, REMAT_RECOMPUTE};
  remat_stage st = remat_stage_whole(&cfg, policy);
  st.accumulate = accumulate;
  const int64_t B = 2, T = 13;
  remat_model *m[2];
  for (int k = 0; k < 2; k++)
    if (remat__model_create_on(&m[k], &cfg, B, T, &st, k ? &counting : NULL, &err)) abort();
  remat_hparams hp;
  remat_hparams_default(&hp);
  hp.dropout = 0.1f;
  const int K = accumulate ? 2 : 1;
  for (int k = 0; k < 2; k++) {
    remat_model_init_weights(m[k], 1234);
    for (int step = 0; step < 2; step++) {
      remat_model_zero_grad(m[k]);
      rng_state = 77 + (uint64_t)step;
      for (int mb = 0; mb < K; mb++) {
        for (int64_t i = 0; i < B * T; i++) {
          remat_model_inputs(m[k])[i] = (int32_t)irand(0, cfg.vocab_size - 1);
          remat_model_targets(m[k])[i] = (int32_t)irand(0, cfg.vocab_size - 1);
        }
        remat_model_forward_backward(m[k], (uint32_t)mb, 1.0f / (float)(B * T * K), &hp);
      }
      remat_model_sum_tied(m[k]);
      remat_model_update(m[k], &hp, 1e-3f, (float)sqrt(remat_model_grad_sumsq(m[k])));
    }
    (void)remat_model_arena_high_water(m[k]);
  }
  size_t n = remat_model_num_params(m[0]);
  CHECKF(remat__model_backend(m[0]) == cpu && remat__model_backend(m[1]) == &counting &&
             same(remat_model_params(m[0]), remat_model_params(m[1]), n * sizeof(float)) &&
             same(remat_model_adam_v(m[0]), remat_model_adam_v(m[1]), n * sizeof(float)),
         "a model holds the backend it was created on; two %s steps%s on the counted CPU "
         "table give the default model's parameters and moments, exact",
         remat_precision_name(precision), accumulate ? " of two micro-batches" : "");
  remat_model_destroy(m[0]);
  remat_model_destroy(m[1]);
  /* what this step must have used; the tied encoder backward with one
   * micro-batch, the plain one with two */
  int missing = 0, strays = 0;
  for (int c = 0; c < C_COUNT; c++) {
    /* the fp32 ops that bf16 replaces, and the bf16 ones */
    int f32_only = c == C_LN_F || c == C_MM_F || c == C_MM_B || c == C_MM_GELU ||
                   c == C_MM_RES || c == C_MM_B_GELU || c == C_GELU_F || c == C_CE;
    int b16_only = c >= C_TO_BF16;
    int want = c == C_ENC_B ? accumulate : c == C_ENC_TIED ? !accumulate
               : c == C_ADD ? accumulate : bf16 ? !f32_only : !b16_only;
    if (!want && counts[c] && (bf16 ? f32_only : b16_only)) {
      strays++;
      printf("     %s was called in %s\n", count_names[c], remat_precision_name(precision));
    }
    if (want && !counts[c]) {
      missing++;
      printf("     %s was not called through the model's table\n", count_names[c]);
    }
  }
  CHECKF(!missing && !strays,
         "every op the %s step uses went through the model's table (%d missing), and no "
         "op of the other precision (%d)%s",
         remat_precision_name(precision), missing, strays, accumulate ? ", accumulating" : "");
}

/* ------------------------------------------------------------ driver */

static void check_shape(void) {
  int64_t N = sh.B * sh.T;
  check_sizes();
  check_encoder();
  check_layernorm();
  check_attention();
  check_attention_decode();
  check_attention_gqa();
  check_crossentropy();
  check_vocab_encoder();
  check_vocab_loss(false);
  check_vocab_loss(true);
  check_matmul(N, sh.C, 3 * sh.C);
  check_matmul(N, 4 * sh.C, sh.C);
  check_pointwise((size_t)(N * sh.C));
  check_bf16();
  check_llama();
}

/* This test reads and writes buffers directly: a backend runs it only where
 * it has memory here (a GPU backend with no GPU has none) and the host can
 * address it (the CUDA backend's managed arena, REMAT_CUDA_MANAGED=1). */
static bool usable(const remat__backend *b) {
  void *p = b->buffer_alloc(64);
  if (!p) {
    printf("     skipped: no memory of this backend here (no device)\n");
    return false;
  }
  void *h = b->map(p, 64, REMAT_MAP_READ);
  b->unmap(p, h, 64, REMAT_MAP_READ);
  b->buffer_free(p);
  if (h != p)
    printf("     skipped: the host cannot address its buffers (CUDA: REMAT_CUDA_MANAGED=1)\n");
  return h == p;
}

int main(void) {
  cpu = remat__backend_cpu();
  CHECKF(remat__backend_at(0) == cpu, "the CPU backend is compiled in, first");
  const shape fixed[] = {
      {1, 1, 4, 1, 5, 8},     /* T = 1, one head, padded vocabulary */
      {2, 5, 12, 3, 37, 40},  /* head size 4 */
      {3, 7, 20, 4, 61, 61},  /* head size 5, no padding */
      {1, 130, 8, 2, 50, 64}, /* T past the CPU attention's tiles (128, 96, 64) */
      {2, 17, 36, 6, 97, 100},
  };
  for (int b = 0; (be = remat__backend_at(b)); b++) {
    printf("-- backend %s\n", be->name);
    if (!usable(be)) continue;
    check_buffers();
    check_dropout();
    const int64_t g[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {70, 129, 31}};
    for (int i = 0; i < 4; i++) check_gemm(g[i][0], g[i][1], g[i][2]);
    check_optimizer(1);
    check_optimizer(1003);
    check_optimizer(40009);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
      sh = fixed[i];
      check_shape();
    }
    rng_state = 0x5eed0ff5eed0ff5ull; /* the same random shapes for every backend */
    for (int i = 0; i < 4; i++) {
      int64_t NH = irand(1, 4), hs = irand(1, 9), V = irand(2, 70);
      sh = (shape){irand(1, 3), irand(1, 40), NH * hs, NH, V, V + irand(0, 7)};
      check_shape();
    }
  }
  be = cpu;
  printf("-- the seam\n");
  check_seam(0, REMAT_PRECISION_FP32);
  check_seam(1, REMAT_PRECISION_FP32);
  if (remat_precision_available(REMAT_PRECISION_BF16, NULL)) {
    check_seam(0, REMAT_PRECISION_BF16);
    check_seam(1, REMAT_PRECISION_BF16);
  } else {
    printf("     bf16 steps not checked: this CPU has no bf16 products\n");
  }
  return test_summary("test_backend_ops");
}
