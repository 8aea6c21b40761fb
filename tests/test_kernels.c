/* test_kernels.c: checks every kernel of kernels.h.
 *
 * - Gradients: for each layer, the backward is compared with central finite
 *   differences of the float forward on a scalar loss L = sum(out * R), R a
 *   fixed random tensor, so every output element matters. The check passes
 *   when max|analytic - numeric| / max(max|analytic|, max|numeric|) < 1e-3
 *   (step 1e-2, loss summed in double; the worst case seen is ~5e-5).
 *   LayerNorm's backward is also compared with a double reference (1e-5).
 * - The tiled attention is compared with a scalar reference in double and
 *   with the untiled kernel it replaced (attention_ref.c), forward and
 *   backward, with and without dropout (1e-5 relative), and must give the
 *   same bits on repeat and at any thread count.
 * - Accumulate-vs-overwrite: overwritten outputs are prefilled with NaN or
 *   garbage, accumulated ones with known values.
 * - The Llama family's kernels (RMSNorm, SwiGLU, rotary embedding) against
 *   double references and by finite differences; RMSNorm's dweight bits at
 *   1, 2 and 3 threads; the rotary embedding's inverse, its shift in
 *   position and a far position; their bf16 variants against the fp32
 *   kernels rounded once; the encoder without positions (wpe NULL).
 * - Dropout statistics and counter dependence, determinism (memcmp), AdamW
 *   against a hand-written double version, sum of squares, initialisation,
 *   and that no kernel calls malloc once warmed up.
 *
 * Built twice: test_kernels against the library, and test_kernels_tile with
 * attention.c compiled in using tiny, unequal tiles (ATT_BQ, ATT_BK, ATT_BQB,
 * ATT_BKB) so even T = 5 runs several query and key tiles, and rows that see
 * none of a key tile. Prints one line per check and exits non-zero if any fails. */
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <Random123/philox.h>

#include "kernels/kernels.h"
#include "kernels/vec_math.h"
#include "attention_ref.h"
#include "test_util.h"

/* ------------------------------------------------------------ harness */


/* Counts malloc/calloc/realloc calls made by anything in the process, so the
 * "no kernel allocates" contract can be checked. Not under AddressSanitizer,
 * which owns malloc itself. */
#if !defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
static atomic_long n_allocs;
void *malloc(size_t n) {
  atomic_fetch_add(&n_allocs, 1);
  return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
  atomic_fetch_add(&n_allocs, 1);
  return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
  atomic_fetch_add(&n_allocs, 1);
  return __libc_realloc(p, n);
}
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* splitmix64, uniform in [0, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-53;
}
static void fill(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)urand();
}
static void fill_const(float *x, size_t n, float v) {
  for (size_t i = 0; i < n; i++) x[i] = v;
}
static float *falloc(size_t n) {
  float *p = malloc(n * sizeof(float) + 64);
  if (!p) abort();
  return p;
}
static double *dalloc(size_t n) {
  double *p = calloc(n + 1, sizeof(double));
  if (!p) abort();
  return p;
}

static double dot_r(const float *x, const float *r, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)r[i];
  return s;
}

/* max|a - b| / max(max|a|, max|b|); a float, b double. */
static double rel_err_fd(const float *a, const double *b, size_t n) {
  double md = 0, ma = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    md = d > md ? d : md;
    ma = fabs((double)a[i]) > ma ? fabs((double)a[i]) : ma;
    mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
  }
  double m = ma > mb ? ma : mb;
  if (isnan(md)) return INFINITY;
  return m > 0 ? md / m : md;
}
static double max_abs_d(const double *x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
  return m;
}

#define FD_EPS 1e-2f
#define FD_TOL 1e-3
#define REF_TOL 1e-5

/* Central differences of f with respect to each x[i], compared with the
 * analytic gradient g. The numeric derivative divides by the step that the
 * float perturbation really took. */
typedef double (*loss_fn)(void *ctx);
static void grad_check(const char *what, loss_fn f, void *ctx, float *x, size_t n, const float *g) {
  double *num = dalloc(n);
  for (size_t i = 0; i < n; i++) {
    float save = x[i], xp = save + FD_EPS, xm = save - FD_EPS;
    x[i] = xp;
    double lp = f(ctx);
    x[i] = xm;
    double lm = f(ctx);
    x[i] = save;
    num[i] = (lp - lm) / ((double)xp - (double)xm);
  }
  double e = rel_err_fd(g, num, n), mx = max_abs_d(num, n);
  CHECKF(e < FD_TOL && mx > 1e-6, "grad %-34s n=%-4zu max|numeric|=%.3g  rel err %.2e (tol %.0e)",
        what, n, mx, e, FD_TOL);
  free(num);
}

/* ------------------------------------------------------------ encoder */

typedef struct {
  int64_t B, T, C, V;
  int32_t *tok;
  float *wte, *wpe, *out, *R;
} enc_ctx;

static double enc_loss(void *p) {
  enc_ctx *c = p;
  remat__encoder_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
  return dot_r(c->out, c->R, (size_t)(c->B * c->T * c->C));
}

/* wpe NULL (the Llama family): out = wte[token] alone; dwpe NULL: dwte
 * alone, with the bits it has when dwpe is given, in all three kernels. */
static void test_encoder_no_positions(void) {
  printf("-- encoder without positions (wpe, dwpe NULL)\n");
  enc_ctx c = {.B = 3, .T = 4, .C = 70, .V = 9}; /* C past one column block of the backward */
  const int64_t N = c.B * c.T;
  size_t n = (size_t)(N * c.C), nwte = (size_t)(c.V * c.C), nwpe = (size_t)(c.T * c.C);
  int32_t tok[12] = {3, 8, 3, 0, 5, 8, 8, 1, 3, 2, 0, 3};
  c.tok = tok;
  c.wte = falloc(nwte), c.out = falloc(n), c.R = falloc(n); /* c.wpe stays NULL */
  fill(c.wte, nwte, -1, 1), fill(c.R, n, -1, 1);
  fill_const(c.out, n, NAN);
  enc_loss(&c);
  bool exact = true;
  for (int64_t bt = 0; bt < N; bt++)
    exact &= memcmp(c.out + bt * c.C, c.wte + tok[bt] * c.C, (size_t)c.C * sizeof(float)) == 0;
  CHECKF(exact, "encoder forward with wpe NULL equals wte[token] exactly (NaN prefill)");

  /* backward: dwte with dwpe NULL has the bits of dwte with dwpe given */
  float *g0 = falloc(nwte), *d1 = falloc(nwte), *d2 = falloc(nwte), *pe = falloc(nwpe);
  fill(g0, nwte, -0.5f, 0.5f), fill(pe, nwpe, -0.5f, 0.5f);
  memcpy(d1, g0, nwte * sizeof(float)), memcpy(d2, g0, nwte * sizeof(float));
  remat__encoder_backward(d1, pe, c.R, c.tok, c.B, c.T, c.C);
  remat__encoder_backward(d2, NULL, c.R, c.tok, c.B, c.T, c.C);
  CHECKF(memcmp(d1, d2, nwte * sizeof(float)) == 0,
         "encoder backward with dwpe NULL: dwte's bits as with dwpe given");
  for (size_t i = 0; i < nwte; i++) d2[i] -= g0[i];
  grad_check("encoder dwte, no positions (accumulated)", enc_loss, &c, c.wte, nwte, d2);

  /* tied: the same, onto the head's share */
  void *work = malloc(n * sizeof(float) + (size_t)(c.V + N) * sizeof(int32_t));
  if (!work) abort();
  memcpy(d1, g0, nwte * sizeof(float)), memcpy(d2, g0, nwte * sizeof(float));
  remat__encoder_backward_tied(d1, pe, c.R, c.tok, c.B, c.T, c.C, c.V, work);
  remat__encoder_backward_tied(d2, NULL, c.R, c.tok, c.B, c.T, c.C, c.V, work);
  bool tied = memcmp(d1, d2, nwte * sizeof(float)) == 0;
  double md = 0; /* and h + the sum of the token's rows, to float rounding */
  for (int64_t v = 0; v < c.V; v++)
    for (int64_t k = 0; k < c.C; k++) {
      double e = g0[v * c.C + k];
      for (int64_t bt = 0; bt < N; bt++)
        if (tok[bt] == v) e += c.R[bt * c.C + k];
      md = fmax(md, fabs(d2[v * c.C + k] - e));
    }
  CHECKF(tied && md < 1e-5,
         "encoder backward tied with dwpe NULL: dwte's bits as with dwpe given; vs double "
         "%.1e (tol 1e-5)", md);
  free(c.wte), free(c.out), free(c.R), free(g0), free(d1), free(d2), free(pe), free(work);
}

static void test_encoder(void) {
  printf("-- encoder\n");
  enc_ctx c = {.B = 2, .T = 5, .C = 8, .V = 11};
  size_t n = (size_t)(c.B * c.T * c.C), nwte = (size_t)(c.V * c.C), nwpe = (size_t)(c.T * c.C);
  int32_t tok[10] = {3, 7, 3, 0, 10, 7, 7, 1, 3, 2}; /* repeats on purpose */
  c.tok = tok;
  c.wte = falloc(nwte), c.wpe = falloc(nwpe), c.out = falloc(n), c.R = falloc(n);
  fill(c.wte, nwte, -1, 1), fill(c.wpe, nwpe, -1, 1), fill(c.R, n, -1, 1);
  enc_loss(&c);
  bool exact = true;
  for (int64_t bt = 0; bt < c.B * c.T; bt++)
    for (int64_t k = 0; k < c.C; k++)
      exact &= c.out[bt * c.C + k] == c.wte[tok[bt] * c.C + k] + c.wpe[(bt % c.T) * c.C + k];
  CHECKF(exact, "encoder forward equals wte[token] + wpe[t] exactly");

  float *dwte = falloc(nwte), *dwpe = falloc(nwpe), *g0 = falloc(nwte), *g1 = falloc(nwpe);
  fill(g0, nwte, -0.5f, 0.5f), fill(g1, nwpe, -0.5f, 0.5f);
  memcpy(dwte, g0, nwte * sizeof(float)), memcpy(dwpe, g1, nwpe * sizeof(float));
  remat__encoder_backward(dwte, dwpe, c.R, c.tok, c.B, c.T, c.C);
  for (size_t i = 0; i < nwte; i++) dwte[i] -= g0[i]; /* accumulates onto the prefill */
  for (size_t i = 0; i < nwpe; i++) dwpe[i] -= g1[i];
  grad_check("encoder dwte (accumulated)", enc_loss, &c, c.wte, nwte, dwte);
  grad_check("encoder dwpe (accumulated)", enc_loss, &c, c.wpe, nwpe, dwpe);

  /* twice from zero gives exactly twice once */
  fill_const(dwte, nwte, 0), fill_const(dwpe, nwpe, 0);
  remat__encoder_backward(dwte, dwpe, c.R, c.tok, c.B, c.T, c.C);
  memcpy(g0, dwte, nwte * sizeof(float)), memcpy(g1, dwpe, nwpe * sizeof(float));
  remat__encoder_backward(dwte, dwpe, c.R, c.tok, c.B, c.T, c.C);
  /* a repeated token's row collects its terms one at a time, so the second
   * call's sum rounds differently from 2x: compare to float precision */
  double md = 0, mg = 0;
  for (size_t i = 0; i < nwte; i++)
    md = fmax(md, fabs(dwte[i] - 2.0 * g0[i])), mg = fmax(mg, fabs(g0[i]));
  for (size_t i = 0; i < nwpe; i++)
    md = fmax(md, fabs(dwpe[i] - 2.0 * g1[i])), mg = fmax(mg, fabs(g1[i]));
  CHECKF(md / mg < 1e-6, "encoder backward twice accumulates to 2x: rel diff %.1e (tol 1e-6)",
        md / mg);
  free(c.wte), free(c.wpe), free(c.out), free(c.R), free(dwte), free(dwpe), free(g0), free(g1);
  test_encoder_no_positions();
}

/* ---------------------------------------------------------- layernorm */

typedef struct {
  int64_t N, C;
  float *inp, *w, *b, *out, *mean, *rstd, *R;
} ln_ctx;

static double ln_loss(void *p) {
  ln_ctx *c = p;
  remat__layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
  return dot_r(c->out, c->R, (size_t)(c->N * c->C));
}

static void test_layernorm(void) {
  printf("-- layernorm\n");
  ln_ctx c = {.N = 10, .C = 13}; /* C not a multiple of the 8 sum lanes */
  size_t n = (size_t)(c.N * c.C), C = (size_t)c.C, N = (size_t)c.N;
  c.inp = falloc(n), c.w = falloc(C), c.b = falloc(C), c.out = falloc(n), c.R = falloc(n);
  c.mean = falloc(N), c.rstd = falloc(N);
  fill(c.inp, n, -1, 2), fill(c.w, C, 0.5f, 1.5f), fill(c.b, C, -0.5f, 0.5f), fill(c.R, n, -1, 1);
  ln_loss(&c);
  /* reference in double: biased variance, eps 1e-5 inside the root */
  double *ref = dalloc(n), *rm = dalloc(N), *rr = dalloc(N);
  for (size_t r = 0; r < N; r++) {
    double m = 0, v = 0;
    for (size_t k = 0; k < C; k++) m += c.inp[r * C + k];
    m /= (double)C;
    for (size_t k = 0; k < C; k++) v += (c.inp[r * C + k] - m) * (c.inp[r * C + k] - m);
    v /= (double)C;
    rm[r] = m, rr[r] = 1.0 / sqrt(v + 1e-5);
    for (size_t k = 0; k < C; k++)
      ref[r * C + k] = (c.inp[r * C + k] - m) * rr[r] * c.w[k] + c.b[k];
  }
  double e_out = rel_err_fd(c.out, ref, n), e_m = rel_err_fd(c.mean, rm, N),
         e_r = rel_err_fd(c.rstd, rr, N);
  CHECKF(e_out < REF_TOL && e_m < REF_TOL && e_r < REF_TOL,
        "layernorm forward vs double reference: out %.1e mean %.1e rstd %.1e (tol %.0e)", e_out,
        e_m, e_r, REF_TOL);

  float *dinp = falloc(n), *dw = falloc(C), *db = falloc(C);
  float *g0 = falloc(n), *g1 = falloc(C), *g2 = falloc(C);
  fill(g0, n, -0.5f, 0.5f), fill(g1, C, -0.5f, 0.5f), fill(g2, C, -0.5f, 0.5f);
  memcpy(dinp, g0, n * sizeof(float)), memcpy(dw, g1, C * sizeof(float)),
      memcpy(db, g2, C * sizeof(float));
  remat__layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
  for (size_t i = 0; i < n; i++) dinp[i] -= g0[i]; /* dinp accumulates too */
  for (size_t i = 0; i < C; i++) dw[i] -= g1[i], db[i] -= g2[i];
  grad_check("layernorm dinp (accumulated)", ln_loss, &c, c.inp, n, dinp);
  grad_check("layernorm dweight (accumulated)", ln_loss, &c, c.w, C, dw);
  grad_check("layernorm dbias (accumulated)", ln_loss, &c, c.b, C, db);

  /* reference backward in double from the double mean and rstd */
  double *rdx = dalloc(n), *rdw = dalloc(C), *rdb = dalloc(C);
  for (size_t r = 0; r < N; r++) {
    double sg = 0, sgx = 0;
    for (size_t k = 0; k < C; k++) {
      double xh = (c.inp[r * C + k] - rm[r]) * rr[r], dy = c.R[r * C + k];
      sg += dy * c.w[k], sgx += dy * c.w[k] * xh;
      rdw[k] += dy * xh, rdb[k] += dy;
    }
    for (size_t k = 0; k < C; k++) {
      double xh = (c.inp[r * C + k] - rm[r]) * rr[r];
      rdx[r * C + k] = rr[r] * (c.R[r * C + k] * c.w[k] - sg / (double)C - xh * sgx / (double)C);
    }
  }
  double ex = rel_err_fd(dinp, rdx, n), ew = rel_err_fd(dw, rdw, C), eb = rel_err_fd(db, rdb, C);
  CHECKF(ex < REF_TOL && ew < REF_TOL && eb < REF_TOL,
        "layernorm backward vs double reference: dinp %.1e dweight %.1e dbias %.1e (tol %.0e)", ex,
        ew, eb, REF_TOL);
  free(rdx), free(rdw), free(rdb);

  fill_const(dinp, n, 0), fill_const(dw, C, 0), fill_const(db, C, 0);
  remat__layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
  memcpy(g0, dinp, n * sizeof(float)), memcpy(g1, dw, C * sizeof(float)),
      memcpy(g2, db, C * sizeof(float));
  remat__layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
  bool twice = true;
  for (size_t i = 0; i < n; i++) twice &= dinp[i] == 2 * g0[i];
  for (size_t i = 0; i < C; i++) twice &= dw[i] == 2 * g1[i] && db[i] == 2 * g2[i];
  CHECKF(twice, "layernorm backward twice accumulates dinp, dweight, dbias to exactly 2x");
  free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R), free(c.mean), free(c.rstd);
  free(ref), free(rm), free(rr), free(dinp), free(dw), free(db), free(g0), free(g1), free(g2);
}

/* ------------------------------------------------------------- matmul */

typedef struct {
  int64_t N, C, OC;
  float *inp, *w, *b, *out, *R; /* b NULL: no bias */
} mm_ctx;

static double mm_loss(void *p) {
  mm_ctx *c = p;
  remat__matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
  return dot_r(c->out, c->R, (size_t)(c->N * c->OC));
}

static void test_matmul_case(bool with_bias) {
  printf("-- matmul %s bias\n", with_bias ? "with" : "without");
  mm_ctx c = {.N = 10, .C = 8, .OC = 12};
  size_t ni = (size_t)(c.N * c.C), nw = (size_t)(c.OC * c.C), no = (size_t)(c.N * c.OC),
         OC = (size_t)c.OC;
  c.inp = falloc(ni), c.w = falloc(nw), c.out = falloc(no), c.R = falloc(no);
  c.b = with_bias ? falloc(OC) : NULL;
  fill(c.inp, ni, -1, 1), fill(c.w, nw, -1, 1), fill(c.R, no, -1, 1);
  if (c.b) fill(c.b, OC, -1, 1);
  fill_const(c.out, no, NAN); /* overwritten, NaN must not leak */
  mm_loss(&c);
  double *ref = dalloc(no);
  for (int64_t r = 0; r < c.N; r++)
    for (int64_t o = 0; o < c.OC; o++) {
      double s = c.b ? c.b[o] : 0.0;
      for (int64_t k = 0; k < c.C; k++) s += (double)c.inp[r * c.C + k] * c.w[o * c.C + k];
      ref[r * c.OC + o] = s;
    }
  double e = rel_err_fd(c.out, ref, no);
  CHECKF(e < REF_TOL, "matmul forward vs double reference (out prefilled NaN): %.1e", e);

  float *dinp = falloc(ni), *dw = falloc(nw), *db = falloc(OC), *g1 = falloc(nw), *g2 = falloc(OC);
  fill_const(dinp, ni, NAN);
  fill(g1, nw, -0.5f, 0.5f), fill(g2, OC, -0.5f, 0.5f);
  memcpy(dw, g1, nw * sizeof(float)), memcpy(db, g2, OC * sizeof(float));
  remat__matmul_backward(dinp, dw, c.b ? db : NULL, c.R, c.inp, c.w, c.N, c.C, c.OC);
  for (size_t i = 0; i < nw; i++) dw[i] -= g1[i];
  grad_check("matmul dinp (overwritten, NaN prefill)", mm_loss, &c, c.inp, ni, dinp);
  grad_check("matmul dweight (accumulated)", mm_loss, &c, c.w, nw, dw);
  if (c.b) {
    for (size_t i = 0; i < OC; i++) db[i] -= g2[i];
    grad_check("matmul dbias (accumulated)", mm_loss, &c, c.b, OC, db);
  } else {
    CHECKF(memcmp(db, g2, OC * sizeof(float)) == 0, "matmul backward leaves dbias alone when NULL");
  }

  /* dinp NULL is skipped; dweight, dbias accumulate to exactly 2x */
  float *w1 = falloc(nw), *b1 = falloc(OC);
  fill_const(dw, nw, 0), fill_const(db, OC, 0);
  remat__matmul_backward(NULL, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
  memcpy(w1, dw, nw * sizeof(float)), memcpy(b1, db, OC * sizeof(float));
  remat__matmul_backward(NULL, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
  bool twice = true;
  for (size_t i = 0; i < nw; i++) twice &= dw[i] == 2 * w1[i];
  for (size_t i = 0; i < OC; i++) twice &= db[i] == 2 * b1[i];
  CHECKF(twice, "matmul backward (dinp NULL) twice accumulates dweight, dbias to exactly 2x");
  free(c.inp), free(c.w), free(c.out), free(c.R), free(c.b), free(ref);
  free(dinp), free(dw), free(db), free(g1), free(g2), free(w1), free(b1);
}

/* ---------------------------------------------------------- attention */

/* Plain reference in double, straight from the definitions in kernels.h:
 * out (B,T,C), lse (B,NH,T), dqkv (B,T,3C); any may be NULL. */
static double drop_mult(const remat__dropout *d, uint64_t i) {
  if (!d || d->p <= 0.0f) return 1.0;
  return remat__dropout_keep(d, i) ? (double)(1.0f / (1.0f - d->p)) : 0.0;
}

static void ref_attention(double *out, double *lse, double *dqkv, const float *dout,
                          const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                          const remat__dropout *d) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)hs);
  double *P = dalloc((size_t)T), *dP = dalloc((size_t)T);
  if (dqkv) memset(dqkv, 0, (size_t)(B * T * C3) * sizeof(double));
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
          mx = P[u] > mx ? P[u] : mx;
        }
        for (int64_t u = 0; u <= t; u++) s += (P[u] = exp(P[u] - mx));
        for (int64_t u = 0; u <= t; u++) P[u] /= s;
        if (lse) lse[(b * NH + h) * T + t] = mx + log(s);
        const uint64_t base = (uint64_t)(((b * NH + h) * T + t) * T);
        if (out)
          for (int64_t i = 0; i < hs; i++) {
            double o = 0;
            for (int64_t u = 0; u <= t; u++)
              o += P[u] * drop_mult(d, base + (uint64_t)u) *
                   qkv[(b * T + u) * C3 + 2 * C + h * hs + i];
            out[(b * T + t) * C + h * hs + i] = o;
          }
        if (!dqkv) continue;
        const float *dO = dout + (b * T + t) * C + h * hs;
        double dot = 0;
        for (int64_t u = 0; u <= t; u++) {
          const float *v = qkv + (b * T + u) * C3 + 2 * C + h * hs;
          double m = drop_mult(d, base + (uint64_t)u), g = 0;
          for (int64_t i = 0; i < hs; i++) {
            g += (double)dO[i] * v[i];
            dqkv[(b * T + u) * C3 + 2 * C + h * hs + i] += P[u] * m * dO[i];
          }
          dP[u] = g * m;
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
  free(P), free(dP);
}

/* max|a - b| over the columns [off, off+len) of two (rows, ld) float
 * matrices (one part of qkv, say), relative to the largest magnitude in
 * either whole matrix: a part that is 0 in exact arithmetic (dq and dk at
 * T = 1) is measured against the scale of the rest, not of its rounding. */
static double rel_err_cols(const float *a, const float *b, size_t rows, size_t ld, size_t off,
                           size_t len) {
  double md = 0, m = 0;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < ld; c++) {
      double x = a[r * ld + c], y = b[r * ld + c];
      m = fmax(m, fmax(fabs(x), fabs(y)));
      if (c >= off && c < off + len) md = fmax(md, fabs(x - y));
    }
  if (isnan(md)) return INFINITY;
  return m > 0 ? md / m : md;
}

typedef struct {
  int64_t B, T, C, NH;
  float *qkv, *out, *lse, *R;
  const remat__dropout *d;
} att_ctx;

static double att_loss(void *p) {
  att_ctx *c = p;
  remat__attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH, c->d);
  return dot_r(c->out, c->R, (size_t)(c->B * c->T * c->C));
}

/* One shape: the tiled kernel against the scalar double reference and
 * against the untiled kernel of attention_ref.c (forward output, and dq, dk,
 * dv each); finite differences too when fd is set; bitwise determinism,
 * also across thread counts, which for the backward switches between the
 * one-pass and the two-pass schedules. */
static void test_attention_case(int64_t B, int64_t T, int64_t C, int64_t NH, float p, bool fd) {
  remat__dropout drop = {
      .p = p, .seed = 1234567890123ull, .step = 3, .micro = 1, .layer = 2, .site = REMAT_DROP_ATTN};
  att_ctx c = {.B = B, .T = T, .C = C, .NH = NH, .d = p > 0 ? &drop : NULL};
  const size_t nqkv = (size_t)(B * T * 3 * C), no = (size_t)(B * T * C),
               nl = (size_t)(B * NH * T), na = (size_t)(B * NH * T * T), rows = (size_t)(B * T);
  char tag[96];
  snprintf(tag, sizeof tag, "B=%lld T=%lld C=%lld NH=%lld p=%.2f", (long long)B, (long long)T,
           (long long)C, (long long)NH, (double)p);
  c.qkv = falloc(nqkv), c.out = falloc(no), c.lse = falloc(nl), c.R = falloc(no);
  fill(c.qkv, nqkv, -1, 1), fill(c.R, no, -1, 1);
  fill_const(c.out, no, NAN), fill_const(c.lse, nl, NAN); /* both overwritten */
  att_loss(&c);
  double *rout = dalloc(no), *rlse = dalloc(nl), *rd = dalloc(nqkv);
  ref_attention(rout, rlse, rd, c.R, c.qkv, B, T, C, NH, c.d);
  double eo = rel_err_fd(c.out, rout, no), el = rel_err_fd(c.lse, rlse, nl);
  CHECKF(eo < REF_TOL && el < REF_TOL,
        "attention forward vs scalar reference %s: out %.1e lse %.1e", tag, eo, el);

  float *dqkv = falloc(nqkv), *delta = falloc(nl);
  fill_const(dqkv, nqkv, NAN), fill_const(delta, nl, NAN);
  remat__attention_backward(dqkv, delta, c.R, c.qkv, c.out, c.lse, B, T, C, NH, c.d);
  double ed = rel_err_fd(dqkv, rd, nqkv);
  CHECKF(ed < REF_TOL, "attention backward vs scalar reference %s: dqkv %.1e (NaN prefill)", tag,
        ed);

  /* the untiled kernel: same results up to float rounding */
  float *oout = falloc(no), *oatt = falloc(na), *odatt = falloc(na), *odqkv = falloc(nqkv);
  attention_ref_forward(oout, oatt, c.qkv, B, T, C, NH, c.d);
  attention_ref_backward(odqkv, odatt, c.R, c.qkv, oatt, B, T, C, NH, c.d);
  const size_t C_ = (size_t)C;
  double fo = rel_err_cols(c.out, oout, rows, C_, 0, C_),
         fq = rel_err_cols(dqkv, odqkv, rows, 3 * C_, 0, C_),
         fk = rel_err_cols(dqkv, odqkv, rows, 3 * C_, C_, C_),
         fv = rel_err_cols(dqkv, odqkv, rows, 3 * C_, 2 * C_, C_);
  CHECKF(fo < REF_TOL && fq < REF_TOL && fk < REF_TOL && fv < REF_TOL,
        "attention vs the untiled kernel %s: out %.1e dq %.1e dk %.1e dv %.1e", tag, fo, fq, fk,
        fv);
  if (fd) {
    char what[48];
    snprintf(what, sizeof what, "attention dqkv p=%.2f", (double)p);
    grad_check(what, att_loss, &c, c.qkv, nqkv, dqkv);
  }

  /* determinism: the same call twice, and with 1 thread or more threads
   * than pairs (the backward's two-pass schedule), gives the same bits */
  float *out2 = falloc(no), *lse2 = falloc(nl), *dqkv2 = falloc(nqkv);
  att_loss(&c);
  remat__attention_backward(dqkv, delta, c.R, c.qkv, c.out, c.lse, B, T, C, NH, c.d);
  bool same = true;
  const int nt = omp_get_max_threads(), counts[3] = {nt, 1, (int)(B * NH) + 1};
  for (int i = 0; i < 3; i++) {
    omp_set_num_threads(counts[i]);
    fill_const(out2, no, NAN), fill_const(dqkv2, nqkv, NAN);
    remat__attention_forward(out2, lse2, c.qkv, B, T, C, NH, c.d);
    remat__attention_backward(dqkv2, delta, c.R, c.qkv, out2, lse2, B, T, C, NH, c.d);
    same &= memcmp(out2, c.out, no * sizeof(float)) == 0 &&
            memcmp(lse2, c.lse, nl * sizeof(float)) == 0 &&
            memcmp(dqkv2, dqkv, nqkv * sizeof(float)) == 0;
  }
  omp_set_num_threads(nt);
  CHECKF(same, "attention forward and backward bitwise identical on repeat, with %d, 1 and %d "
              "threads (%s)", nt, (int)(B * NH) + 1, tag);
  free(c.qkv), free(c.out), free(c.lse), free(c.R), free(rout), free(rlse), free(rd);
  free(dqkv), free(delta), free(oout), free(oatt), free(odatt), free(odqkv);
  free(out2), free(lse2), free(dqkv2);
}

/* ------------------------------------------ grouped-query attention */

/* Plain reference in double of remat__attention_forward_gqa and _backward_gqa
 * (kernels.h): q rows ldq apart (NH heads), k and v rows ldkv apart (NKV
 * heads), query head h reading kv head h / (NH/NKV); out (B,T,NH*hs), lse
 * (B,NH,T), and dq (B*T rows of ldq), dk, dv (B*T rows of ldkv) summed from
 * zero. dq NULL: no backward. */
static void ref_gqa(double *out, double *lse, double *dq, double *dk, double *dv,
                    const float *dout, const float *q, const float *k, const float *v,
                    int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                    int64_t hs, const remat__dropout *d) {
  const int64_t C = NH * hs, grp = NH / NKV;
  const double scale = 1.0 / sqrt((double)hs);
  double *P = dalloc((size_t)T), *dP = dalloc((size_t)T);
  if (dq) {
    memset(dq, 0, (size_t)(B * T * ldq) * sizeof(double));
    memset(dk, 0, (size_t)(B * T * ldkv) * sizeof(double));
    memset(dv, 0, (size_t)(B * T * ldkv) * sizeof(double));
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t qo = (b * T + t) * ldq + h * hs, kh = h / grp * hs;
        double mx = -INFINITY, s = 0;
        for (int64_t u = 0; u <= t; u++) {
          double a = 0;
          for (int64_t i = 0; i < hs; i++) a += (double)q[qo + i] * k[(b * T + u) * ldkv + kh + i];
          P[u] = a * scale;
          mx = P[u] > mx ? P[u] : mx;
        }
        for (int64_t u = 0; u <= t; u++) s += (P[u] = exp(P[u] - mx));
        for (int64_t u = 0; u <= t; u++) P[u] /= s;
        lse[(b * NH + h) * T + t] = mx + log(s);
        const uint64_t base = (uint64_t)(((b * NH + h) * T + t) * T);
        for (int64_t i = 0; i < hs; i++) {
          double o = 0;
          for (int64_t u = 0; u <= t; u++)
            o += P[u] * drop_mult(d, base + (uint64_t)u) * v[(b * T + u) * ldkv + kh + i];
          out[(b * T + t) * C + h * hs + i] = o;
        }
        if (!dq) continue;
        const float *dO = dout + (b * T + t) * C + h * hs;
        double dot = 0;
        for (int64_t u = 0; u <= t; u++) {
          const int64_t ko = (b * T + u) * ldkv + kh;
          double m = drop_mult(d, base + (uint64_t)u), g = 0;
          for (int64_t i = 0; i < hs; i++) {
            g += (double)dO[i] * v[ko + i];
            dv[ko + i] += P[u] * m * dO[i];
          }
          dP[u] = g * m;
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
  free(P), free(dP);
}

/* max|a - b| / scale (NaN: infinitely wrong) */
static double err_scaled(const float *a, const double *b, size_t n, double scale) {
  double md = 0;
  for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)a[i] - b[i]));
  for (size_t i = 0; i < n; i++)
    if (isnan(a[i])) return INFINITY;
  return scale > 0 ? md / scale : md;
}

static bool bits_eq(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

typedef struct {
  int64_t B, T, NH, NKV, hs, ldq, ldkv;
  float *q, *k, *v, *out, *lse, *R;
  const remat__dropout *d;
} gqa_ctx;

static double gqa_loss(void *p) {
  gqa_ctx *c = p;
  remat__attention_forward_gqa(c->out, c->lse, c->q, c->k, c->v, c->ldq, c->ldkv, c->B, c->T,
                               c->NH, c->NKV, c->hs, c->d);
  return dot_r(c->out, c->R, (size_t)(c->B * c->T * c->NH * c->hs));
}

/* Whether the columns past the heads (width w of rows ld apart) still hold
 * the prefill PAD, and a copy with them zeroed (for grad_check, whose
 * numeric gradient there is 0). */
#define PAD 7.0f
static bool pads_kept(float *zeroed, const float *x, size_t rows, int64_t ld, int64_t w) {
  bool kept = true;
  for (size_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++) {
      const float y = x[r * (size_t)ld + (size_t)c];
      if (c >= w) kept &= y == PAD;
      zeroed[r * (size_t)ld + (size_t)c] = c >= w ? 0.0f : y;
    }
  return kept;
}

/* One shape of the grouped-query attention on q, k, v apart (rows with
 * columns to spare past the heads, which the backward must leave alone):
 * forward and backward against ref_gqa; finite differences of q, k and v
 * when fd is set; the same bits on repeat and with 1 thread and more
 * threads than groups (the backward's two-pass schedule, where dk and dv
 * sum a group's heads in the same order); and with NKV = NH, the packed
 * GPT-2 kernels on the same values give the same bits. */
static void test_gqa_case(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, float p,
                          bool fd) {
  remat__dropout drop = {
      .p = p, .seed = 987654321ull, .step = 5, .micro = 0, .layer = 1, .site = REMAT_DROP_ATTN};
  const int64_t C = NH * hs, ldq = C + 3, ldkv = NKV * hs + 2, N = B * T;
  gqa_ctx c = {.B = B, .T = T, .NH = NH, .NKV = NKV, .hs = hs, .ldq = ldq, .ldkv = ldkv,
               .d = p > 0 ? &drop : NULL};
  const size_t nq = (size_t)(N * ldq), nkv = (size_t)(N * ldkv), no = (size_t)(N * C),
               nl = (size_t)(B * NH * T);
  char tag[112];
  snprintf(tag, sizeof tag, "B=%lld T=%lld NH=%lld NKV=%lld hs=%lld p=%.2f", (long long)B,
           (long long)T, (long long)NH, (long long)NKV, (long long)hs, (double)p);
  c.q = falloc(nq), c.k = falloc(nkv), c.v = falloc(nkv), c.out = falloc(no), c.lse = falloc(nl);
  c.R = falloc(no);
  fill(c.q, nq, -1, 1), fill(c.k, nkv, -1, 1), fill(c.v, nkv, -1, 1), fill(c.R, no, -1, 1);
  fill_const(c.out, no, NAN), fill_const(c.lse, nl, NAN); /* both overwritten */
  gqa_loss(&c);
  double *ro = dalloc(no), *rl = dalloc(nl), *rq = dalloc(nq), *rk = dalloc(nkv),
         *rv = dalloc(nkv);
  ref_gqa(ro, rl, rq, rk, rv, c.R, c.q, c.k, c.v, ldq, ldkv, B, T, NH, NKV, hs, c.d);
  double eo = rel_err_fd(c.out, ro, no), el = rel_err_fd(c.lse, rl, nl);
  CHECKF(eo < REF_TOL && el < REF_TOL, "gqa attention forward vs double %s: out %.1e lse %.1e",
         tag, eo, el);

  float *dq = falloc(nq), *dk = falloc(nkv), *dv = falloc(nkv), *delta = falloc(nl);
  float *zq = falloc(nq), *zk = falloc(nkv), *zv = falloc(nkv);
  fill_const(dq, nq, PAD), fill_const(dk, nkv, PAD), fill_const(dv, nkv, PAD);
  for (size_t r = 0; r < (size_t)N; r++) { /* the heads' columns NaN: overwritten */
    for (int64_t i = 0; i < C; i++) dq[r * (size_t)ldq + (size_t)i] = NAN;
    for (int64_t i = 0; i < NKV * hs; i++)
      dk[r * (size_t)ldkv + (size_t)i] = dv[r * (size_t)ldkv + (size_t)i] = NAN;
  }
  fill_const(delta, nl, NAN);
  remat__attention_backward_gqa(dq, dk, dv, delta, c.R, c.q, c.k, c.v, c.out, c.lse, ldq, ldkv,
                                B, T, NH, NKV, hs, c.d);
  const bool kept = pads_kept(zq, dq, (size_t)N, ldq, C) &&
                    pads_kept(zk, dk, (size_t)N, ldkv, NKV * hs) &&
                    pads_kept(zv, dv, (size_t)N, ldkv, NKV * hs);
  /* each against the largest of the three (dq and dk are 0 in exact
   * arithmetic at T = 1, so their own scale is their rounding) */
  const double gm = fmax(max_abs_d(rq, nq), fmax(max_abs_d(rk, nkv), max_abs_d(rv, nkv)));
  double eq = err_scaled(zq, rq, nq, gm), ek = err_scaled(zk, rk, nkv, gm),
         ev = err_scaled(zv, rv, nkv, gm);
  CHECKF(eq < REF_TOL && ek < REF_TOL && ev < REF_TOL && kept,
         "gqa attention backward vs double %s: dq %.1e dk %.1e dv %.1e (NaN prefill); columns "
         "past the heads untouched: %s", tag, eq, ek, ev, kept ? "yes" : "NO");
  if (fd) {
    char what[48];
    snprintf(what, sizeof what, "gqa dq NKV=%lld p=%.2f", (long long)NKV, (double)p);
    grad_check(what, gqa_loss, &c, c.q, nq, zq);
    snprintf(what, sizeof what, "gqa dk NKV=%lld p=%.2f", (long long)NKV, (double)p);
    grad_check(what, gqa_loss, &c, c.k, nkv, zk);
    snprintf(what, sizeof what, "gqa dv NKV=%lld p=%.2f", (long long)NKV, (double)p);
    grad_check(what, gqa_loss, &c, c.v, nkv, zv);
  }

  /* determinism: repeat, 1 thread, more threads than groups */
  gqa_loss(&c);
  remat__attention_backward_gqa(dq, dk, dv, delta, c.R, c.q, c.k, c.v, c.out, c.lse, ldq, ldkv,
                                B, T, NH, NKV, hs, c.d);
  float *o2 = falloc(no), *l2 = falloc(nl), *q2 = falloc(nq), *k2 = falloc(nkv),
        *v2 = falloc(nkv);
  bool same = true;
  const int nt = omp_get_max_threads(), counts[3] = {nt, 1, (int)(B * NKV) + 1};
  for (int i = 0; i < 3; i++) {
    omp_set_num_threads(counts[i]);
    memcpy(q2, dq, nq * sizeof(float)), memcpy(k2, dk, nkv * sizeof(float));
    memcpy(v2, dv, nkv * sizeof(float)); /* the pads as they are; the heads NaN */
    for (size_t r = 0; r < (size_t)N; r++) {
      for (int64_t j = 0; j < C; j++) q2[r * (size_t)ldq + (size_t)j] = NAN;
      for (int64_t j = 0; j < NKV * hs; j++)
        k2[r * (size_t)ldkv + (size_t)j] = v2[r * (size_t)ldkv + (size_t)j] = NAN;
    }
    fill_const(o2, no, NAN);
    remat__attention_forward_gqa(o2, l2, c.q, c.k, c.v, ldq, ldkv, B, T, NH, NKV, hs, c.d);
    remat__attention_backward_gqa(q2, k2, v2, delta, c.R, c.q, c.k, c.v, o2, l2, ldq, ldkv, B,
                                  T, NH, NKV, hs, c.d);
    same &= bits_eq(o2, c.out, no) && bits_eq(l2, c.lse, nl) && bits_eq(q2, dq, nq) &&
            bits_eq(k2, dk, nkv) && bits_eq(v2, dv, nkv);
  }
  omp_set_num_threads(nt);
  CHECKF(same, "gqa attention forward and backward bitwise identical on repeat, with %d, 1 and "
         "%d threads (%s)", nt, (int)(B * NKV) + 1, tag);

  if (NKV == NH) { /* GPT-2's packed qkv: the same values, the same bits */
    float *qkv = falloc((size_t)N * 3 * (size_t)C), *dqkv = falloc((size_t)N * 3 * (size_t)C);
    for (int64_t r = 0; r < N; r++) {
      memcpy(qkv + r * 3 * C, c.q + r * ldq, (size_t)C * sizeof(float));
      memcpy(qkv + r * 3 * C + C, c.k + r * ldkv, (size_t)C * sizeof(float));
      memcpy(qkv + r * 3 * C + 2 * C, c.v + r * ldkv, (size_t)C * sizeof(float));
    }
    remat__attention_forward(o2, l2, qkv, B, T, C, NH, c.d);
    remat__attention_backward(dqkv, delta, c.R, qkv, o2, l2, B, T, C, NH, c.d);
    bool packed = bits_eq(o2, c.out, no) && bits_eq(l2, c.lse, nl);
    for (int64_t r = 0; r < N; r++)
      packed &= bits_eq(dqkv + r * 3 * C, dq + r * ldq, (size_t)C) &&
                bits_eq(dqkv + r * 3 * C + C, dk + r * ldkv, (size_t)C) &&
                bits_eq(dqkv + r * 3 * C + 2 * C, dv + r * ldkv, (size_t)C);
    CHECKF(packed, "packed attention (qkv, NKV = NH) = gqa on q, k, v apart, bit for bit: out, "
           "lse, dq, dk, dv (%s)", tag);
    free(qkv), free(dqkv);
  }
  free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.R);
  free(ro), free(rl), free(rq), free(rk), free(rv), free(dq), free(dk), free(dv), free(delta);
  free(zq), free(zk), free(zv), free(o2), free(l2), free(q2), free(k2), free(v2);
}

/* Decode over a cache of NKV heads (rows apart from q's): all rows from
 * position 0 in one call give the forward's bits; the last row alone, at
 * position T-1 over the whole cache, gives the forward's last row within
 * rounding (it runs as a query tile of one row). */
static void test_gqa_decode(int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
  const int64_t C = NH * hs, ldq = C + 1, ldkv = 2 * NKV * hs; /* k and v side by side */
  float *q = falloc((size_t)(T * ldq)), *kv = falloc((size_t)(T * ldkv));
  float *full = falloc((size_t)(T * C)), *lse = falloc((size_t)(NH * T)),
        *one = falloc((size_t)(T * C)), *last = falloc((size_t)C);
  fill(q, (size_t)(T * ldq), -2, 2), fill(kv, (size_t)(T * ldkv), -2, 2);
  fill_const(one, (size_t)(T * C), NAN), fill_const(last, (size_t)C, NAN);
  remat__attention_forward_gqa(full, lse, q, kv, kv + NKV * hs, ldq, ldkv, 1, T, NH, NKV, hs,
                               NULL);
  remat__attention_decode_gqa(one, q, ldq, kv, kv + NKV * hs, ldkv, T, 0, NH, NKV, hs);
  remat__attention_decode_gqa(last, q + (T - 1) * ldq, ldq, kv, kv + NKV * hs, ldkv, 1, T - 1,
                              NH, NKV, hs);
  double e = 0, m = 0;
  for (int64_t i = 0; i < C; i++) {
    e = fmax(e, fabs((double)last[i] - full[(T - 1) * C + i]));
    m = fmax(m, fabs((double)full[(T - 1) * C + i]));
  }
  e = isnan(e) ? INFINITY : e / m;
  CHECKF(bits_eq(one, full, (size_t)(T * C)) && e < REF_TOL,
         "gqa decode T=%lld NH=%lld NKV=%lld hs=%lld: all rows from 0 = forward bit for bit; "
         "the last row alone vs the forward's %.1e", (long long)T, (long long)NH, (long long)NKV,
         (long long)hs, e);
  free(q), free(kv), free(full), free(lse), free(one), free(last);
}

static void test_attention_gqa(void) {
  printf("-- grouped-query attention\n");
  for (int64_t nkv = 1; nkv <= 4; nkv *= 2) { /* NH = 4: NKV 1, 2 and NH */
    test_gqa_case(2, 5, 4, nkv, 3, 0.0f, true);
    test_gqa_case(2, 5, 4, nkv, 2, 0.3f, true);
    test_gqa_case(2, 13, 4, nkv, 4, 0.2f, false);
    test_gqa_case(1, 130, 4, nkv, 8, 0.1f, false); /* past the library's tiles */
    test_gqa_decode(37, 4, nkv, 5);
    test_gqa_decode(1, 4, nkv, 5);
  }
  test_gqa_case(1, 1, 4, 2, 4, 0.3f, false); /* T = 1 */
  test_gqa_case(3, 40, 6, 3, 5, 0.0f, false);
  test_gqa_case(1, 70, 8, 1, 6, 0.0f, false);
  test_gqa_decode(200, 6, 2, 8);
}

static void test_attention(void) {
#ifdef ATT_BQ
  printf("-- attention (tiles of %d x %d forward, %d x %d backward, compiled into this test)\n",
         ATT_BQ, ATT_BK, ATT_BQB, ATT_BKB);
#else
  printf("-- attention (library tiles)\n");
#endif
  test_attention_case(2, 5, 8, 2, 0.0f, true);
  test_attention_case(2, 5, 8, 2, 0.3f, true);
  test_attention_case(1, 1, 8, 2, 0.3f, false); /* T = 1 */
  test_attention_case(2, 13, 16, 2, 0.2f, false);
  test_attention_case(1, 50, 8, 1, 0.2f, false);
  test_attention_case(2, 64, 64, 4, 0.0f, false);
  test_attention_case(1, 129, 16, 1, 0.25f, false); /* one pair; T past two tiles */
  test_attention_case(1, 200, 16, 2, 0.1f, false);
  test_attention_case(2, 130, 32, 2, 0.0f, false);
  test_attention_gqa();
}

/* ------------------------------------------------------- fused layers */

static bool same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

/* The fused linear layers against the unfused calls they replace, bit for
 * bit: row-split and column-split products, with and without dropout, at
 * the team size and at 3 threads (uneven slabs). */
static void test_fused_case(int64_t N, int64_t C, int64_t OC, float p, int threads) {
  const int nt = omp_get_max_threads();
  omp_set_num_threads(threads);
  size_t ni = (size_t)(N * C), nw = (size_t)(OC * C), no = (size_t)(N * OC);
  float *inp = falloc(ni), *w = falloc(nw), *b = falloc((size_t)OC), *res = falloc(no);
  float *o1 = falloc(no), *o2 = falloc(no), *g1 = falloc(no), *g2 = falloc(no);
  float *x = falloc(ni), *di1 = falloc(ni), *di2 = falloc(ni);
  float *dw1 = falloc(nw), *dw2 = falloc(nw), *db1 = falloc((size_t)OC), *db2 = falloc((size_t)OC);
  fill(inp, ni, -1, 1), fill(w, nw, -1, 1), fill(b, (size_t)OC, -1, 1), fill(res, no, -1, 1);
  fill(x, ni, -4, 4), fill(dw1, nw, -1, 1), fill(db1, (size_t)OC, -1, 1);
  memcpy(dw2, dw1, nw * sizeof(float)), memcpy(db2, db1, (size_t)OC * sizeof(float));
  remat__dropout d = {.p = p, .seed = 11, .step = 2, .layer = 1, .site = REMAT_DROP_RESID1};

  remat__matmul_forward(o1, inp, w, b, N, C, OC);
  remat__gelu_forward(g1, o1, no);
  fill_const(o2, no, NAN), fill_const(g2, no, NAN);
  remat__matmul_forward_gelu(o2, g2, inp, w, b, N, C, OC);
  bool gelu_ok = same_bits(o1, o2, no) && same_bits(g1, g2, no);

  remat__matmul_forward(o1, inp, w, b, N, C, OC);
  remat__dropout_apply(o1, o1, no, &d);
  remat__residual_forward(o1, o1, res, no);
  fill_const(o2, no, NAN);
  remat__matmul_forward_residual(o2, inp, w, b, res, &d, N, C, OC);
  bool res_ok = same_bits(o1, o2, no);

  /* dout = res (N,OC); the GELU's input x has dinp's shape (N,C) */
  remat__matmul_backward(di1, dw1, db1, res, inp, w, N, C, OC);
  remat__gelu_backward(di1, x, di1, ni);
  fill_const(di2, ni, NAN);
  remat__matmul_backward_gelu(di2, dw2, db2, res, inp, w, x, N, C, OC);
  bool bwd_ok = same_bits(di1, di2, ni) && same_bits(dw1, dw2, nw) &&
                same_bits(db1, db2, (size_t)OC);
  CHECKF(gelu_ok && res_ok && bwd_ok,
         "fused linear layers = unfused, bit for bit, N=%lld C=%lld OC=%lld p=%.1f %d threads "
         "(gelu %d, dropout+residual %d, backward+gelu %d)",
         (long long)N, (long long)C, (long long)OC, p, threads, gelu_ok, res_ok, bwd_ok);
  omp_set_num_threads(nt);
  free(inp), free(w), free(b), free(res), free(o1), free(o2), free(g1), free(g2), free(x);
  free(di1), free(di2), free(dw1), free(dw2), free(db1), free(db2);
}

static void test_fused(void) {
  printf("-- fused layers\n");
  const int nt = omp_get_max_threads();
  test_fused_case(70, 24, 40, 0.3f, nt); /* rows split (N > OC) */
  test_fused_case(20, 24, 96, 0.3f, nt); /* columns split */
  test_fused_case(70, 24, 40, 0.0f, 3);
  test_fused_case(20, 24, 96, 0.3f, 3);
}

/* --------------------------------------------------------------- gelu */

typedef struct {
  size_t n;
  float *inp, *out, *R;
} gelu_ctx;

static double gelu_loss(void *p) {
  gelu_ctx *c = p;
  remat__gelu_forward(c->out, c->inp, c->n);
  return dot_r(c->out, c->R, c->n);
}

static void test_gelu(void) {
  printf("-- gelu\n");
  gelu_ctx c = {.n = 80};
  c.inp = falloc(c.n), c.out = falloc(c.n), c.R = falloc(c.n);
  fill(c.inp, c.n, -4, 4), fill(c.R, c.n, -1, 1);
  c.inp[0] = -30.0f, c.inp[1] = -9.0f, c.inp[2] = 9.0f, c.inp[3] = 30.0f, c.inp[4] = 0.0f;
  gelu_loss(&c);
  double *ref = dalloc(c.n);
  for (size_t i = 0; i < c.n; i++) {
    double x = c.inp[i];
    /* 0.5 x (1 + tanh u) written as x sigmoid(2u): the same function, but
     * 1 + tanh u would round to 0 in double long before the float result */
    ref[i] = x / (1 + exp(-2 * sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
  }
  double e = 0;                    /* elementwise, so the tiny values of the negative tail count */
  for (size_t i = 0; i < c.n; i++) /* 1e-28 floor: layers.c caps -2u at 80 */
    e = fmax(e, fabs(c.out[i] - ref[i]) / (fabs(ref[i]) + 1e-28));
  CHECKF(e < REF_TOL,
        "gelu forward vs double reference, x in [-30, 30]: max elementwise rel err %.1e", e);
  float *dinp = falloc(c.n), *tmp = falloc(c.n);
  fill_const(dinp, c.n, NAN);
  remat__gelu_backward(dinp, c.inp, c.R, c.n);
  grad_check("gelu dinp (overwritten, NaN prefill)", gelu_loss, &c, c.inp, c.n, dinp);
  memcpy(tmp, c.R, c.n * sizeof(float));
  remat__gelu_backward(tmp, c.inp, tmp, c.n);
  CHECKF(memcmp(tmp, dinp, c.n * sizeof(float)) == 0, "gelu backward in place (dinp == dout)");
  free(c.inp), free(c.out), free(c.R), free(ref), free(dinp), free(tmp);
}

/* ----------------------------------------------------------- residual */

typedef struct {
  size_t n;
  float *a, *b, *out, *R;
} res_ctx;

static double res_loss(void *p) {
  res_ctx *c = p;
  remat__residual_forward(c->out, c->a, c->b, c->n);
  return dot_r(c->out, c->R, c->n);
}

static void test_residual(void) {
  printf("-- residual\n");
  res_ctx c = {.n = 80};
  c.a = falloc(c.n), c.b = falloc(c.n), c.out = falloc(c.n), c.R = falloc(c.n);
  fill(c.a, c.n, -1, 1), fill(c.b, c.n, -1, 1), fill(c.R, c.n, -1, 1);
  /* the backward of out = a + b passes dout to both: dL/da = dL/db = R */
  grad_check("residual d/da", res_loss, &c, c.a, c.n, c.R);
  grad_check("residual d/db", res_loss, &c, c.b, c.n, c.R);
  res_loss(&c);
  remat__residual_forward(c.a, c.a, c.b, c.n); /* out aliases a */
  CHECKF(memcmp(c.a, c.out, c.n * sizeof(float)) == 0, "residual with out == a");
  free(c.a), free(c.b), free(c.out), free(c.R);
}

/* -------------------------------------------------------------- llama */

/* RMSNorm, SwiGLU and the rotary embedding (kernels/llama.c): each forward
 * against a double reference written here, each backward by finite
 * differences and against a double reference, plus the properties the
 * contract states (accumulate vs overwrite, parts apart, thread count). */

#define RMS_EPS 1e-5f

typedef struct {
  int64_t N, C;
  float *inp, *w, *out, *rstd, *R;
} rms_ctx;

static double rms_loss(void *p) {
  rms_ctx *c = p;
  remat__rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, RMS_EPS);
  return dot_r(c->out, c->R, (size_t)(c->N * c->C));
}

/* dinp and dweight of RMSNorm on fresh outputs prefilled with pre (n) and
 * prw (C), at threads threads (0: the team's size). */
static void rms_backward_at(float *dinp, float *dw, const float *pre, const float *prw,
                            const rms_ctx *c, int threads) {
  const int nt = omp_get_max_threads();
  size_t n = (size_t)(c->N * c->C);
  if (threads) omp_set_num_threads(threads);
  memcpy(dinp, pre, n * sizeof(float)), memcpy(dw, prw, (size_t)c->C * sizeof(float));
  remat__rmsnorm_backward(dinp, dw, c->R, c->inp, c->w, c->rstd, c->N, c->C);
  omp_set_num_threads(nt);
}

static void test_rmsnorm(void) {
  printf("-- rmsnorm\n");
  rms_ctx c = {.N = 10, .C = 13}; /* C not a multiple of the 8 sum lanes */
  size_t n = (size_t)(c.N * c.C), C = (size_t)c.C, N = (size_t)c.N;
  c.inp = falloc(n), c.w = falloc(C), c.out = falloc(n), c.R = falloc(n), c.rstd = falloc(N);
  fill(c.inp, n, -1, 2), fill(c.w, C, 0.5f, 1.5f), fill(c.R, n, -1, 1);
  fill_const(c.out, n, NAN), fill_const(c.rstd, N, NAN);
  rms_loss(&c);
  /* reference in double: rstd = 1 / sqrt(mean(x^2) + eps) */
  double *ref = dalloc(n), *rr = dalloc(N);
  for (size_t r = 0; r < N; r++) {
    double ss = 0;
    for (size_t k = 0; k < C; k++) ss += (double)c.inp[r * C + k] * c.inp[r * C + k];
    rr[r] = 1.0 / sqrt(ss / (double)C + (double)RMS_EPS);
    for (size_t k = 0; k < C; k++) ref[r * C + k] = c.inp[r * C + k] * rr[r] * c.w[k];
  }
  double e_out = rel_err_fd(c.out, ref, n), e_r = rel_err_fd(c.rstd, rr, N);
  CHECKF(e_out < REF_TOL && e_r < REF_TOL,
         "rmsnorm forward vs double reference (NaN prefill): out %.1e rstd %.1e (tol %.0e)",
         e_out, e_r, REF_TOL);

  /* backward: dinp and dweight both accumulate onto the prefill */
  float *dinp = falloc(n), *dw = falloc(C), *g0 = falloc(n), *g1 = falloc(C);
  fill(g0, n, -0.5f, 0.5f), fill(g1, C, -0.5f, 0.5f);
  rms_backward_at(dinp, dw, g0, g1, &c, 0);
  for (size_t i = 0; i < n; i++) dinp[i] -= g0[i];
  for (size_t i = 0; i < C; i++) dw[i] -= g1[i];
  grad_check("rmsnorm dinp (accumulated)", rms_loss, &c, c.inp, n, dinp);
  grad_check("rmsnorm dweight (accumulated)", rms_loss, &c, c.w, C, dw);

  /* reference backward in double from the double rstd:
   * dx = r (dy w - xhat mean(dy w xhat)), dw = sum_rows dy xhat */
  double *rdx = dalloc(n), *rdw = dalloc(C);
  for (size_t r = 0; r < N; r++) {
    double sgx = 0;
    for (size_t k = 0; k < C; k++) {
      double xh = c.inp[r * C + k] * rr[r], dy = c.R[r * C + k];
      sgx += dy * c.w[k] * xh;
      rdw[k] += dy * xh;
    }
    for (size_t k = 0; k < C; k++)
      rdx[r * C + k] = rr[r] * (c.R[r * C + k] * c.w[k] - c.inp[r * C + k] * rr[r] * sgx / (double)C);
  }
  double ex = rel_err_fd(dinp, rdx, n), ew = rel_err_fd(dw, rdw, C);
  CHECKF(ex < REF_TOL && ew < REF_TOL,
         "rmsnorm backward vs double reference: dinp %.1e dweight %.1e (tol %.0e)", ex, ew,
         REF_TOL);

  /* from zero twice: exactly 2x; each part alone: the bits of both together */
  float *z = falloc(n), *a1 = falloc(n), *w1 = falloc(C), *a2 = falloc(n), *w2 = falloc(C);
  fill_const(z, n, 0);
  rms_backward_at(a1, w1, z, z, &c, 0);
  memcpy(a2, a1, n * sizeof(float)), memcpy(w2, w1, C * sizeof(float));
  remat__rmsnorm_backward(a2, w2, c.R, c.inp, c.w, c.rstd, c.N, c.C);
  bool twice = true;
  for (size_t i = 0; i < n; i++) twice &= a2[i] == 2 * a1[i];
  for (size_t i = 0; i < C; i++) twice &= w2[i] == 2 * w1[i];
  fill_const(a2, n, 0), fill_const(w2, C, 0);
  remat__rmsnorm_backward(a2, NULL, c.R, c.inp, c.w, c.rstd, c.N, c.C);
  remat__rmsnorm_backward(NULL, w2, c.R, c.inp, c.w, c.rstd, c.N, c.C);
  bool parts = memcmp(a1, a2, n * sizeof(float)) == 0 && memcmp(w1, w2, C * sizeof(float)) == 0;
  CHECKF(twice && parts,
         "rmsnorm backward twice accumulates to exactly 2x (%d); dinp alone and dweight alone "
         "give the bits of both together (%d)", twice, parts);
  free(c.inp), free(c.w), free(c.out), free(c.R), free(c.rstd), free(ref), free(rr);
  free(dinp), free(dw), free(g0), free(g1), free(rdx), free(rdw);
  free(z), free(a1), free(w1), free(a2), free(w2);

  /* dweight's (and dinp's) bits at 1, 2 and 3 threads: rows enough that a
   * sum over threads' shares of them would round differently, and columns
   * of several 64-wide blocks */
  rms_ctx d = {.N = 67, .C = 300};
  n = (size_t)(d.N * d.C), C = (size_t)d.C;
  d.inp = falloc(n), d.w = falloc(C), d.out = falloc(n), d.R = falloc(n), d.rstd = falloc((size_t)d.N);
  fill(d.inp, n, -2, 2), fill(d.w, C, 0.5f, 1.5f), fill(d.R, n, -1, 1);
  rms_loss(&d);
  float *pre = falloc(n), *prw = falloc(C), *i1 = falloc(n), *dw1 = falloc(C);
  float *ik = falloc(n), *dwk = falloc(C);
  fill(pre, n, -0.5f, 0.5f), fill(prw, C, -0.5f, 0.5f);
  rms_backward_at(i1, dw1, pre, prw, &d, 1);
  bool same_w = true, same_i = true;
  for (int t = 2; t <= 3; t++) {
    rms_backward_at(ik, dwk, pre, prw, &d, t);
    same_w &= memcmp(dw1, dwk, C * sizeof(float)) == 0;
    same_i &= memcmp(i1, ik, n * sizeof(float)) == 0;
  }
  CHECKF(same_w && same_i,
         "rmsnorm backward N=%lld C=%lld: dweight (%d) and dinp (%d) the same bits at 1, 2 "
         "and 3 threads", (long long)d.N, (long long)d.C, same_w, same_i);
  free(d.inp), free(d.w), free(d.out), free(d.R), free(d.rstd);
  free(pre), free(prw), free(i1), free(dw1), free(ik), free(dwk);
}

typedef struct {
  size_t n;
  float *a, *b, *out, *R;
} swiglu_ctx;

static double swiglu_loss(void *p) {
  swiglu_ctx *c = p;
  remat__swiglu_forward(c->out, c->a, c->b, c->n);
  return dot_r(c->out, c->R, c->n);
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

static void test_swiglu(void) {
  printf("-- swiglu\n");
  swiglu_ctx c = {.n = 83};
  c.a = falloc(c.n), c.b = falloc(c.n), c.out = falloc(c.n), c.R = falloc(c.n);
  fill(c.a, c.n, -6, 6), fill(c.b, c.n, -2, 2), fill(c.R, c.n, -1, 1);
  c.a[0] = -30.0f, c.a[1] = -12.0f, c.a[2] = 12.0f, c.a[3] = 30.0f, c.a[4] = 0.0f;
  fill_const(c.out, c.n, NAN);
  swiglu_loss(&c);
  double *ref = dalloc(c.n), *rda = dalloc(c.n), *rdb = dalloc(c.n);
  double e = 0; /* elementwise, so the tiny values of the negative tail count */
  for (size_t i = 0; i < c.n; i++) {
    double x = c.a[i], s = 1.0 / (1.0 + exp(-x));
    ref[i] = silu_d(x) * c.b[i];
    rda[i] = c.R[i] * c.b[i] * s * (1.0 + x * (1.0 - s));
    rdb[i] = c.R[i] * silu_d(x);
    e = fmax(e, fabs(c.out[i] - ref[i]) / (fabs(ref[i]) + 1e-30));
  }
  CHECKF(e < REF_TOL,
         "swiglu forward vs double reference, a in [-30, 30] (NaN prefill): max elementwise "
         "rel err %.1e (tol %.0e)", e, REF_TOL);
  float *da = falloc(c.n), *db = falloc(c.n);
  fill_const(da, c.n, NAN), fill_const(db, c.n, NAN);
  remat__swiglu_backward(da, db, c.a, c.b, c.R, c.n);
  grad_check("swiglu da (overwritten, NaN prefill)", swiglu_loss, &c, c.a, c.n, da);
  grad_check("swiglu db (overwritten, NaN prefill)", swiglu_loss, &c, c.b, c.n, db);
  double ea = rel_err_fd(da, rda, c.n), eb = rel_err_fd(db, rdb, c.n);
  /* db is dout times the forward's own silu(a): with dout = 1 it is out / b's silu factor */
  float *one = falloc(c.n), *db1 = falloc(c.n), *fa = falloc(c.n);
  fill_const(one, c.n, 1.0f);
  remat__swiglu_backward(da, db1, c.a, c.b, one, c.n);
  remat__swiglu_forward(fa, c.a, one, c.n); /* silu(a) * 1 */
  CHECKF(ea < REF_TOL && eb < REF_TOL && memcmp(db1, fa, c.n * sizeof(float)) == 0,
         "swiglu backward vs double reference: da %.1e db %.1e (tol %.0e); db at dout 1 is "
         "the forward's silu(a), exact", ea, eb, REF_TOL);
  swiglu_loss(&c); /* out from the unperturbed a, b */
  remat__swiglu_forward(c.a, c.a, c.b, c.n); /* out aliases a */
  CHECKF(memcmp(c.a, c.out, c.n * sizeof(float)) == 0, "swiglu forward with out == a");
  free(c.a), free(c.b), free(c.out), free(c.R), free(ref), free(rda), free(rdb);
  free(da), free(db), free(one), free(db1), free(fa);
}

/* The rotary embedding: rows (b*T + t) * ld floats apart, nheads heads of
 * hs; the reference rotates in double by the exact angle. */
typedef struct {
  int64_t ld, B, T, nheads, hs, pos0;
  double theta;
  float *x, *work, *R;
} rope_ctx;

static size_t rope_n(const rope_ctx *c) { return (size_t)(c->B * c->T * c->ld); }

static double rope_loss(void *p) {
  rope_ctx *c = p;
  memcpy(c->work, c->x, rope_n(c) * sizeof(float));
  remat__rope_forward(c->work, c->ld, c->B, c->T, c->nheads, c->hs, c->pos0, c->theta);
  return dot_r(c->work, c->R, rope_n(c));
}

/* out = x rotated by sign * angle, in double */
static void ref_rope(double *out, const float *x, const rope_ctx *c, double sign) {
  for (size_t i = 0; i < rope_n(c); i++) out[i] = x[i];
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t t = 0; t < c->T; t++)
      for (int64_t h = 0; h < c->nheads; h++)
        for (int64_t i = 0; i < c->hs / 2; i++) {
          double a = sign * (double)(c->pos0 + t) * pow(c->theta, -2.0 * (double)i / (double)c->hs);
          size_t at = (size_t)((b * c->T + t) * c->ld + h * c->hs + 2 * i);
          double x0 = x[at], x1 = x[at + 1];
          out[at] = x0 * cos(a) - x1 * sin(a);
          out[at + 1] = x0 * sin(a) + x1 * cos(a);
        }
}

static void rope_case(int64_t B, int64_t T, int64_t nheads, int64_t hs, int64_t pad,
                      int64_t pos0, double theta, bool fd) {
  rope_ctx c = {.ld = nheads * hs + pad, .B = B, .T = T, .nheads = nheads, .hs = hs,
                .pos0 = pos0, .theta = theta};
  size_t n = rope_n(&c);
  c.x = falloc(n), c.work = falloc(n), c.R = falloc(n);
  fill(c.x, n, -1, 1), fill(c.R, n, -1, 1);
  double *ref = dalloc(n);
  rope_loss(&c); /* work = rope_forward(x) */
  ref_rope(ref, c.x, &c, 1.0);
  double ef = rel_err_fd(c.work, ref, n);
  bool pad_kept = true; /* columns past the heads are not touched */
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t k = nheads * hs; k < c.ld; k++) pad_kept &= c.work[r * c.ld + k] == c.x[r * c.ld + k];
  /* backward: the rotation by -angle; then forward then backward is x */
  float *back = falloc(n);
  memcpy(back, c.R, n * sizeof(float));
  remat__rope_backward(back, c.ld, B, T, nheads, hs, pos0, theta);
  ref_rope(ref, c.R, &c, -1.0);
  double eb = rel_err_fd(back, ref, n);
  memcpy(back, c.work, n * sizeof(float));
  remat__rope_backward(back, c.ld, B, T, nheads, hs, pos0, theta);
  double md = 0;
  for (size_t i = 0; i < n; i++) md = fmax(md, fabs(back[i] - c.x[i]));
  CHECKF(ef < REF_TOL && eb < REF_TOL && md < 1e-6 && pad_kept,
         "rope B=%lld T=%lld heads=%lld hs=%lld ld=%lld pos0=%lld theta=%g: forward %.1e, "
         "backward %.1e vs double (tol %.0e); backward(forward(x)) - x %.1e (tol 1e-6); "
         "padding untouched %d",
         (long long)B, (long long)T, (long long)nheads, (long long)hs, (long long)c.ld,
         (long long)pos0, theta, ef, eb, REF_TOL, md, pad_kept);
  if (fd) { /* the gradient of sum(rope(x) R) is rope_backward(R) */
    memcpy(back, c.R, n * sizeof(float));
    remat__rope_backward(back, c.ld, B, T, nheads, hs, pos0, theta);
    grad_check("rope dx (backward of R)", rope_loss, &c, c.x, n, back);
  }

  /* positions: pos0 + 3 on T rows are rows 3.. of pos0 on T + 3 rows, bit
   * for bit; and the same bits at 1, 2 and 3 threads */
  rope_ctx l = c;
  l.T = T + 3;
  float *lx = falloc(rope_n(&l));
  fill(lx, rope_n(&l), -1, 1);
  for (int64_t b = 0; b < B; b++) /* rows 3.. of each batch element are c.x's */
    memcpy(lx + (b * l.T + 3) * c.ld, c.x + b * T * c.ld, (size_t)(T * c.ld) * sizeof(float));
  remat__rope_forward(lx, l.ld, B, l.T, nheads, hs, pos0, theta);
  memcpy(c.work, c.x, n * sizeof(float));
  remat__rope_forward(c.work, c.ld, B, T, nheads, hs, pos0 + 3, theta);
  bool shift = true;
  for (int64_t b = 0; b < B; b++)
    shift &= memcmp(lx + (b * l.T + 3) * c.ld, c.work + b * T * c.ld,
                    (size_t)(T * c.ld) * sizeof(float)) == 0;
  /* c.work: the team's forward; c.R becomes the team's backward of it */
  memcpy(c.R, c.work, n * sizeof(float));
  remat__rope_backward(c.R, c.ld, B, T, nheads, hs, pos0 + 3, theta);
  const int nt = omp_get_max_threads();
  bool threads = true;
  for (int t = 1; t <= 3; t++) {
    omp_set_num_threads(t);
    memcpy(back, c.x, n * sizeof(float));
    remat__rope_forward(back, c.ld, B, T, nheads, hs, pos0 + 3, theta);
    threads &= memcmp(back, c.work, n * sizeof(float)) == 0;
    remat__rope_backward(back, c.ld, B, T, nheads, hs, pos0 + 3, theta);
    threads &= memcmp(back, c.R, n * sizeof(float)) == 0;
  }
  omp_set_num_threads(nt);
  CHECKF(shift && threads,
         "rope at pos0 %lld on T=%lld rows = rows 3.. of rope at pos0 %lld on T=%lld rows, "
         "exact (%d); forward and backward the same bits at 1, 2, 3 threads (%d)",
         (long long)(pos0 + 3), (long long)T, (long long)pos0, (long long)l.T, shift, threads);
  free(c.x), free(c.work), free(c.R), free(ref), free(back), free(lx);
}

static void test_rope(void) {
  printf("-- rope\n");
  rope_case(2, 5, 3, 8, 4, 0, 10000.0, true); /* rows with padding after the heads */
  rope_case(1, 7, 2, 6, 0, 11, 500000.0, true);
  rope_case(3, 4, 4, 64, 8, 0, 10000.0, false);
  /* far positions: the angle's low bits matter (a float angle is ~1e-3 off) */
  rope_case(2, 3, 2, 16, 0, 100000, 10000.0, false);
  /* head size past the cos/sin table on the stack: rotated in pieces */
  rope_case(2, 3, 1, 520, 2, 5, 10000.0, false);
}

/* The bf16 variants are the fp32 kernels on the widened inputs, each bf16
 * output rounded once: exact; and so within bf16's rounding (8 significant
 * bits, to nearest: 2^-8 relative) of the fp32 result. */
static bool bf16_of(const uint16_t *h, const float *f, size_t n, double *worst) {
  bool ok = true;
  for (size_t i = 0; i < n; i++) {
    ok &= h[i] == remat__bf16_round(f[i]);
    double d = fabs((double)remat__bf16_float(h[i]) - f[i]);
    *worst = fmax(*worst, d / fmax(fabs((double)f[i]), 1e-30));
  }
  return ok;
}

static void widen(float *f, const uint16_t *h, size_t n) {
  for (size_t i = 0; i < n; i++) f[i] = remat__bf16_float(h[i]);
}

static void narrow(uint16_t *h, const float *f, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = remat__bf16_round(f[i]);
}

static void test_llama_bf16(void) {
  printf("-- llama bf16 variants\n");
  const int64_t N = 9, C = 70, nheads = 5, hs = 14, B = 3, T = 3; /* B*T = N, nheads*hs = C */
  const size_t n = (size_t)(N * C);
  float *x = falloc(n), *w = falloc((size_t)C), *f = falloc(n), *f2 = falloc(n), *r1 = falloc(n);
  float *r2 = falloc(n), *aw = falloc(n), *bw = falloc(n), *dout = falloc(n);
  uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2), *a = malloc(n * 2), *b = malloc(n * 2);
  if (!h || !h2 || !a || !b) abort();
  fill(x, n, -3, 3), fill(w, (size_t)C, 0.5f, 1.5f), fill(dout, n, -1, 1);
  double worst = 0;

  remat__rmsnorm_forward(f, r1, x, w, N, C, RMS_EPS);
  remat__rmsnorm_forward_bf16(h, r2, x, w, N, C, RMS_EPS);
  bool rms = bf16_of(h, f, n, &worst) && memcmp(r1, r2, (size_t)N * sizeof(float)) == 0;

  fill(f, n, -8, 8), narrow(a, f, n), fill(f, n, -2, 2), narrow(b, f, n);
  widen(aw, a, n), widen(bw, b, n);
  remat__swiglu_forward(f, aw, bw, n);
  remat__swiglu_forward_bf16(h, a, b, n);
  bool sf = bf16_of(h, f, n, &worst);
  remat__swiglu_backward(f, f2, aw, bw, dout, n);
  remat__swiglu_backward_bf16(h, h2, a, b, dout, n);
  bool sb = bf16_of(h, f, n, &worst) && bf16_of(h2, f2, n, &worst);

  /* rope on rows of the widened bf16 values, forward and backward */
  narrow(h, x, n), widen(f, h, n);
  remat__rope_forward(f, C, B, T, nheads, hs, 7, 10000.0);
  remat__rope_forward_bf16(h, C, B, T, nheads, hs, 7, 10000.0);
  bool rf = bf16_of(h, f, n, &worst);
  widen(f, h, n);
  remat__rope_backward(f, C, B, T, nheads, hs, 7, 10000.0);
  remat__rope_backward_bf16(h, C, B, T, nheads, hs, 7, 10000.0);
  bool rb = bf16_of(h, f, n, &worst);
  CHECKF(rms && sf && sb && rf && rb && worst <= 0x1p-8,
         "bf16 rmsnorm (%d), swiglu forward (%d) and backward (%d), rope forward (%d) and "
         "backward (%d): the fp32 kernels on the widened inputs rounded once, exact; worst "
         "%.2e of the fp32 value (tol 2^-8)", rms, sf, sb, rf, rb, worst);
  free(x), free(w), free(f), free(f2), free(r1), free(r2), free(aw), free(bw), free(dout);
  free(h), free(h2), free(a), free(b);
}

/* ------------------------------------------------------- crossentropy */

typedef struct {
  int64_t N, V, Vp;
  float *logits, *work, *losses;
  const int32_t *tgt;
} ce_ctx;

static double ce_loss(void *p) { /* the forward's return value: the sum of losses */
  ce_ctx *c = p;
  memcpy(c->work, c->logits, (size_t)(c->N * c->Vp) * sizeof(float));
  return remat__crossentropy_forward(c->work, c->losses, c->tgt, c->N, c->V, c->Vp);
}

static void test_crossentropy(void) {
  printf("-- crossentropy\n");
  int32_t tgt[10] = {0, 10, 3, 3, 7, 1, 9, 2, 5, 10};
  ce_ctx c = {.N = 10, .V = 11, .Vp = 16, .tgt = tgt};
  size_t n = (size_t)(c.N * c.Vp);
  c.logits = falloc(n), c.work = falloc(n), c.losses = falloc((size_t)c.N);
  fill(c.logits, n, -3, 3);
  double sum = ce_loss(&c), ref_sum = 0, mloss = 0, mprob = 0;
  bool pad0 = true, lsum = true;
  double lossum = 0;
  for (int64_t r = 0; r < c.N; r++) {
    const float *x = c.logits + r * c.Vp;
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c.V; j++) mx = x[j] > mx ? x[j] : mx;
    for (int64_t j = 0; j < c.V; j++) s += exp(x[j] - mx);
    double l = log(s) - (x[tgt[r]] - mx);
    ref_sum += l;
    mloss = fmax(mloss, fabs(l - c.losses[r]) / fabs(l));
    for (int64_t j = 0; j < c.V; j++)
      mprob = fmax(mprob, fabs(exp(x[j] - mx) / s - c.work[r * c.Vp + j]));
    for (int64_t j = c.V; j < c.Vp; j++) pad0 &= c.work[r * c.Vp + j] == 0.0f;
    lossum += c.losses[r];
  }
  lsum = lossum == sum;
  CHECKF(mloss < REF_TOL && mprob < REF_TOL && fabs(sum - ref_sum) / ref_sum < REF_TOL,
        "crossentropy forward vs double: losses %.1e probs %.1e sum %.1e", mloss, mprob,
        fabs(sum - ref_sum) / ref_sum);
  CHECKF(pad0 && lsum, "crossentropy padded probabilities are 0 and the sum equals sum(losses)");

  /* dloss = 1 makes the backward the gradient of the summed loss; the padded
   * columns start as garbage and must come out 0 (numeric gradient 0 too) */
  const float dloss = 1.0f;
  float *g = falloc(n);
  ce_loss(&c);
  memcpy(g, c.work, n * sizeof(float));
  for (int64_t r = 0; r < c.N; r++)
    for (int64_t j = c.V; j < c.Vp; j++) g[r * c.Vp + j] = 7.0f;
  remat__crossentropy_backward(g, tgt, dloss, c.N, c.V, c.Vp);
  bool gpad = true;
  for (int64_t r = 0; r < c.N; r++)
    for (int64_t j = c.V; j < c.Vp; j++) gpad &= g[r * c.Vp + j] == 0.0f;
  CHECKF(gpad, "crossentropy dlogits columns >= V are 0");
  grad_check("crossentropy dlogits", ce_loss, &c, c.logits, n, g);

  /* dloss scales linearly (mean over tokens passes 1/N) */
  float *g2 = falloc(n);
  ce_loss(&c);
  memcpy(g2, c.work, n * sizeof(float));
  remat__crossentropy_backward(g2, tgt, 0.25f, c.N, c.V, c.Vp);
  double md = 0;
  for (size_t i = 0; i < n; i++) md = fmax(md, fabs(g2[i] - 0.25 * g[i]));
  CHECKF(md < 1e-7, "crossentropy backward with dloss 0.25 is 0.25x: max diff %.1e", md);
  /* forward and backward in one pass: the same losses, sum and dlogits */
  float *f1 = falloc(n), *f2 = falloc(n), *l1 = falloc((size_t)c.N), *l2b = falloc((size_t)c.N);
  memcpy(f1, c.logits, n * sizeof(float)), memcpy(f2, c.logits, n * sizeof(float));
  double s1 = remat__crossentropy_forward(f1, l1, tgt, c.N, c.V, c.Vp);
  remat__crossentropy_backward(f1, tgt, 0.25f, c.N, c.V, c.Vp);
  double s2 = remat__crossentropy_forward_backward(f2, l2b, tgt, 0.25f, c.N, c.V, c.Vp);
  CHECKF(s1 == s2 && memcmp(f1, f2, n * sizeof(float)) == 0 &&
             memcmp(l1, l2b, (size_t)c.N * sizeof(float)) == 0,
         "crossentropy forward_backward = forward then backward, bit for bit");
  free(f1), free(f2), free(l1), free(l2b);

  /* stability: huge logits give the same result as shifted ones */
  float *big = falloc(n), *l2 = falloc((size_t)c.N);
  for (size_t i = 0; i < n; i++) big[i] = c.logits[i] + 3000.0f;
  double sbig = remat__crossentropy_forward(big, l2, tgt, c.N, c.V, c.Vp);
  bool fin = isfinite(sbig);
  for (int64_t r = 0; r < c.N; r++) fin &= isfinite(l2[r]);
  CHECKF(fin && fabs(sbig - ref_sum) / ref_sum < 1e-3,
        "crossentropy with logits + 3000 stays finite: sum %.6f vs %.6f", sbig, ref_sum);
  /* a target whose probability underflows still has a finite loss */
  float row[16];
  int32_t t0 = 0;
  float lrow;
  for (int j = 0; j < 16; j++) row[j] = j == 0 ? -200.0f : 0.0f;
  double sl = remat__crossentropy_forward(row, &lrow, &t0, 1, 11, 16);
  CHECKF(isfinite(sl) && fabs(sl - (200.0 + log(10.0 + exp(-200.0)))) < 1e-3,
        "crossentropy loss stays finite when p[target] underflows: %.4f", sl);
  free(c.logits), free(c.work), free(c.losses), free(g), free(g2), free(big), free(l2);
}

/* ------------------------------------------------------------ dropout */

typedef struct {
  size_t n;
  float *inp, *out, *R;
  const remat__dropout *d;
} drop_ctx;

static double drop_loss(void *p) {
  drop_ctx *c = p;
  remat__dropout_apply(c->out, c->inp, c->n, c->d);
  return dot_r(c->out, c->R, c->n);
}

static double mask_diff(const remat__dropout *a, const remat__dropout *b, uint64_t n) {
  uint64_t diff = 0;
  for (uint64_t i = 0; i < n; i++) diff += remat__dropout_keep(a, i) != remat__dropout_keep(b, i);
  return (double)diff / (double)n;
}

static void test_dropout(void) {
  printf("-- dropout\n");
  const remat__dropout d0 = {
      .p = 0.1f, .seed = 42, .step = 7, .micro = 2, .layer = 5, .site = REMAT_DROP_RESID1};
  /* statistics: kept fraction within 6 sigma of 1-p */
  const uint64_t N = 100000;
  const float ps[] = {0.1f, 0.5f, 0.9f};
  for (int k = 0; k < 3; k++) {
    remat__dropout d = d0;
    d.p = ps[k];
    uint64_t kept = 0;
    for (uint64_t i = 0; i < N; i++) kept += remat__dropout_keep(&d, i);
    double frac = (double)kept / (double)N, sig = sqrt(ps[k] * (1 - ps[k]) / (double)N);
    CHECKF(fabs(frac - (1 - ps[k])) < 6 * sig,
          "dropout p=%.1f keeps %.4f of 1e5 (want %.2f +- %.4f)", (double)ps[k], frac,
          1 - (double)ps[k], 6 * sig);
  }
  /* every counter field changes the mask; mismatch rate ~ 2p(1-p) = 0.18 */
  const char *names[] = {"seed", "seed high word", "step", "micro", "layer", "site"};
  for (int f = 0; f < 6; f++) {
    remat__dropout d = d0;
    switch (f) {
      case 0:
        d.seed ^= 1;
        break;
      case 1:
        d.seed ^= 1ull << 40;
        break;
      case 2:
        d.step++;
        break;
      case 3:
        d.micro++;
        break;
      case 4:
        d.layer++;
        break;
      default:
        d.site = REMAT_DROP_RESID2;
        break;
    }
    double m = mask_diff(&d0, &d, 20000);
    CHECKF(m > 0.14 && m < 0.22, "dropout mask depends on %s: %.3f of elements differ", names[f], m);
  }
  /* the documented layout, recomputed here with Random123 directly:
   * key {seed lo, seed hi}, counter {i/4, micro, layer<<4 | site, step},
   * word i%4, u = (word >> 8) 2^-24, keep iff u >= p */
  const float pl[] = {0.1f, 0.37f};
  bool layout = true;
  for (int k = 0; k < 2; k++) {
    remat__dropout d = {.p = pl[k],
                        .seed = 0x123456789abcdefull,
                        .step = 11,
                        .micro = 3,
                        .layer = 9,
                        .site = REMAT_DROP_RESID2};
    philox4x32_key_t key = {{0x89abcdefu, 0x01234567u}};
    for (uint64_t i = 0; i < 4000; i++) {
      philox4x32_ctr_t ctr = {{(uint32_t)(i / 4), 3, (9u << 4) | 2u, 11}};
      double u = (double)(philox4x32(ctr, key).v[i % 4] >> 8) / 16777216.0;
      layout &= remat__dropout_keep(&d, i) == (u >= (double)pl[k]);
    }
  }
  CHECKF(layout, "dropout_keep follows the Philox key/counter layout of kernels.h exactly");
  remat__dropout same = d0;
  CHECKF(mask_diff(&d0, &same, 20000) == 0.0, "dropout mask is reproducible");
  CHECKF(remat__dropout_keep(NULL, 5) && remat__dropout_keep(&(remat__dropout){.p = 0}, 5),
        "dropout_keep is true without dropout");

  /* apply agrees with keep exactly, at offsets that straddle Philox groups
   * and the parallel blocks */
  const size_t n = 10003;
  float *x = falloc(n), *y = falloc(n), *z = falloc(n);
  fill(x, n, -1, 1);
  remat__dropout_apply(y, x, n, &d0);
  const float scale = 1.0f / (1.0f - d0.p);
  bool agree = true;
  for (size_t i = 0; i < n; i++)
    agree &= y[i] == (remat__dropout_keep(&d0, i) ? x[i] * scale : 0.0f);
  CHECKF(agree, "dropout_apply equals keep(i) ? x * 1/(1-p) : 0 bit for bit (n=%zu)", n);
  memcpy(z, x, n * sizeof(float));
  remat__dropout_apply(z, z, n, &d0);
  CHECKF(memcmp(z, y, n * sizeof(float)) == 0, "dropout_apply in place equals out of place");
  remat__dropout_apply(y, x, n, NULL);
  remat__dropout_apply(z, x, n, &(remat__dropout){.p = 0});
  CHECKF(memcmp(y, x, n * sizeof(float)) == 0 && memcmp(z, x, n * sizeof(float)) == 0,
        "dropout_apply copies with d NULL or p 0");

  drop_ctx c = {.n = 80, .d = &d0};
  c.inp = falloc(c.n), c.out = falloc(c.n), c.R = falloc(c.n);
  float *g = falloc(c.n);
  remat__dropout dh = d0;
  dh.p = 0.4f;
  c.d = &dh;
  fill(c.inp, c.n, -1, 1), fill(c.R, c.n, -1, 1);
  remat__dropout_apply(g, c.R, c.n, c.d); /* the backward is the same function */
  grad_check("dropout_apply d/dinp (p=0.4)", drop_loss, &c, c.inp, c.n, g);
  free(x), free(y), free(z), free(c.inp), free(c.out), free(c.R), free(g);
}

/* ---------------------------------------------------------- optimizer */

/* The one-sweep update against the update, the bf16 rounding and the
 * zeroing apart: the same bits of p, m, v and the copy, and a zero
 * gradient; without a copy too. Odd sizes for the vector loops' edges. */
static void test_adamw_fused(void) {
  const size_t sizes[] = {1, 17, 1000003};
  int same = 1, zero = 1;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    const size_t n = sizes[k];
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    float *p2 = falloc(n), *g2 = falloc(n), *m2 = falloc(n), *v2 = falloc(n);
    uint16_t *h = malloc(n * sizeof *h), *h2 = malloc(n * sizeof *h2);
    fill(p, n, -1, 1), fill(g, n, -1, 1), fill(m, n, -0.1f, 0.1f), fill(v, n, 0, 0.01f);
    for (int with_copy = 0; with_copy < 2; with_copy++)
      for (int t = 1; t <= 3; t++) {
        remat__adamw opt = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = t};
        memcpy(p2, p, n * 4), memcpy(g2, g, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4);
        remat__adamw_update(p, g, m, v, n, &opt, 0.1f, 0.7f);
        for (size_t i = 0; i < n; i++) h[i] = remat__bf16_round(p[i]);
        remat__adamw_update_fused(p2, g2, m2, v2, with_copy ? h2 : NULL, n, &opt, 0.1f, 0.7f);
        same &= !memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4) &&
                (!with_copy || !memcmp(h, h2, n * 2));
        for (size_t i = 0; i < n; i++) zero &= g2[i] == 0.0f;
      }
    free(p), free(g), free(m), free(v), free(p2), free(g2), free(m2), free(v2), free(h), free(h2);
  }
  CHECKF(same && zero, "adamw in one sweep with the bf16 copy and the zeroing: the same bits as "
                       "the update and the rounding apart, and a zero gradient");
}

static void test_adamw(void) {
  printf("-- adamw, sumsq, init\n");
  enum { n = 7 };
  float p[n], m[n], v[n], g1[n], g2[n];
  double dp[n], dm[n], dv[n];
  fill(p, n, -1, 1), fill(g1, n, -1, 1), fill(g2, n, -1, 1);
  g2[3] = 0.0f; /* a zero gradient */
  for (int i = 0; i < n; i++) m[i] = v[i] = 0, dp[i] = p[i], dm[i] = dv[i] = 0;
  remat__adamw opt = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = 1};
  const float wd = 0.1f, gs = 0.5f;
  const float *gs_[2] = {g1, g2};
  for (int t = 1; t <= 2; t++) {
    opt.step = t;
    remat__adamw_update(p, gs_[t - 1], m, v, n, &opt, wd, gs);
    /* by hand, in double */
    double lr = opt.lr, b1 = opt.beta1, b2 = opt.beta2, eps = opt.eps;
    for (int i = 0; i < n; i++) {
      double gg = (double)gs_[t - 1][i] * gs;
      dp[i] -= lr * wd * dp[i];
      dm[i] = b1 * dm[i] + (1 - b1) * gg;
      dv[i] = b2 * dv[i] + (1 - b2) * gg * gg;
      dp[i] -= (lr / (1 - pow(b1, t))) * dm[i] / (sqrt(dv[i]) / sqrt(1 - pow(b2, t)) + eps);
    }
  }
  double ep = rel_err_fd(p, dp, n), em = rel_err_fd(m, dm, n), ev = rel_err_fd(v, dv, n);
  CHECKF(ep < 1e-6 && em < 1e-6 && ev < 1e-6,
        "adamw two steps vs double by hand: param %.1e m %.1e v %.1e (tol 1e-6)", ep, em, ev);
  /* first step of Adam moves every weight by about lr (the sign of -g) */
  float q[1] = {1.0f}, gq[1] = {3.0f}, mq[1] = {0}, vq[1] = {0};
  opt.step = 1;
  remat__adamw_update(q, gq, mq, vq, 1, &opt, 0.0f, 1.0f);
  CHECKF(fabs(q[0] - (1.0 - 1e-2)) < 1e-6, "adamw first step without decay moves by lr: %.7f",
        (double)q[0]);
  test_adamw_fused();

  /* sumsq over more than one batch of chunks, vs double; thread-count free */
  const size_t ns = 1100007;
  float *x = falloc(ns);
  fill(x, ns, -1, 1);
  double ref = 0;
  for (size_t i = 0; i < ns; i++) ref += (double)x[i] * x[i];
  double s2 = remat__sumsq(x, ns);
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  double s1 = remat__sumsq(x, ns);
  omp_set_num_threads(nt);
  CHECKF(fabs(s2 - ref) / ref < 1e-12 && s1 == s2 && remat__sumsq(x, ns) == s2,
        "sumsq vs double: %.2e; identical with 1 and %d threads and on repeat",
        fabs(s2 - ref) / ref, nt);
  CHECKF(remat__sumsq(x, 0) == 0.0, "sumsq of nothing is 0");

  /* init_normal: moments, reproducible, thread-count free, tensors differ */
  const size_t ni = 200001;
  float *a = falloc(ni), *b = falloc(ni), *cc = falloc(ni);
  remat__init_normal(a, 0, ni, 0.02f, 7, 3);
  omp_set_num_threads(1);
  remat__init_normal(b, 0, ni, 0.02f, 7, 3);
  omp_set_num_threads(nt);
  remat__init_normal(cc, 0, ni, 0.02f, 7, 4);
  {
    /* a slice of the stream is the same slice of the whole tensor */
    float *sl = falloc(5003);
    remat__init_normal(sl, 1001, 5003, 0.02f, 7, 3);
    CHECKF(memcmp(sl, a + 1001, 5003 * sizeof(float)) == 0, "init_normal of a slice");
    free(sl);
  }
  double mean = 0, var = 0, k4 = 0;
  for (size_t i = 0; i < ni; i++) mean += a[i];
  mean /= (double)ni;
  for (size_t i = 0; i < ni; i++) var += (a[i] - mean) * (a[i] - mean);
  var /= (double)ni;
  for (size_t i = 0; i < ni; i++) k4 += pow((a[i] - mean), 4);
  k4 /= (double)ni * var * var;
  size_t same = 0;
  for (size_t i = 0; i < ni; i++) same += a[i] == cc[i];
  CHECKF(fabs(mean) < 0.02 * 5 / sqrt((double)ni) && fabs(sqrt(var) / 0.02 - 1) < 0.01 &&
            fabs(k4 - 3) < 0.1,
        "init_normal: mean %.2e std %.5f kurtosis %.3f (want 0, 0.02, 3)", mean, sqrt(var), k4);
  CHECKF(memcmp(a, b, ni * sizeof(float)) == 0 && same < 10,
        "init_normal identical with 1 and %d threads; another tensor index differs", nt);
  free(x), free(a), free(b), free(cc);
}

/* --------------------------------------------------------- vec_math.h */

static void test_vec_math(void) {
  printf("-- vec_math\n");
  /* exp within 2 ulp-ish (relative 3e-7) of the double exp over [-87, 88] */
  double me = 0;
  for (int i = 0; i <= 200000; i++) {
    float x = -87.0f + 175.0f * (float)i / 200000.0f;
    double ref = exp((double)x), got = remat__exp(x);
    me = fmax(me, fabs(got - ref) / ref);
  }
  CHECKF(me < 3e-7 && remat__exp(0.0f) == 1.0f && remat__exp(-1000.0f) > 0.0f &&
            isfinite(remat__exp(1000.0f)),
        "remat__exp vs double exp on [-87, 88]: max rel err %.2e (tol 3e-7); clamps outside", me);
  /* sqrt: equal to sqrtf but for the last bit at most, over 1e6 values
   * from denormals to 1e30, and exact at 0 */
  long diff = 0, bad = 0;
  for (int i = 0; i < 1000000; i++) {
    float x = (float)(urand() * pow(10.0, -44.0 + 74.0 * urand()));
    float a = remat__sqrt_nonneg(x), b = sqrtf(x);
    if (a != b) diff++;
    if (a != b && nextafterf(a, b) != b) bad++;
  }
  CHECKF(bad == 0 && remat__sqrt_nonneg(0.0f) == 0.0f && remat__sqrt_nonneg(4.0f) == 2.0f,
        "remat__sqrt_nonneg vs sqrtf on 1e6 values: %ld differ in the last bit, %ld by more", diff,
        bad);
}

/* ----------------------------------------------- no allocation, no drift */

/* Runs every kernel once at a moderate shape; called twice so the second
 * run (after OpenMP and OpenBLAS have set themselves up) can be counted. */
static void run_all(float *buf, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t V, int64_t Vp,
                    const int32_t *tok, const remat__dropout *d) {
  const int64_t N = B * T;
  float *x = buf, *y = x + N * 4 * C, *w = y + N * 4 * C, *dw = w + 4 * C * C,
        *lse = dw + 4 * C * C, *delta = lse + B * NH * T, *qkv = delta + B * NH * T,
        *dqkv = qkv + N * 3 * C, *m = dqkv + N * 3 * C, *r = m + N, *lg = r + N, *wte = lg + N * Vp;
  remat__encoder_forward(x, tok, wte, w, B, T, C);
  remat__encoder_backward(dw, dw + V * C, x, tok, B, T, C);
  remat__layernorm_forward(y, m, r, x, w, w + C, N, C);
  remat__layernorm_backward(x, dw, dw + C, y, x, w, m, r, N, C);
  remat__matmul_forward(qkv, y, w, w, N, C, 3 * C);
  remat__matmul_backward(x, dw, dw + 3 * C * C, qkv, y, w, N, C, 3 * C);
  remat__attention_forward(y, lse, qkv, B, T, C, NH, d);
  remat__attention_backward(dqkv, delta, x, qkv, y, lse, B, T, C, NH, d);
  remat__gelu_forward(y, x, (size_t)(N * C));
  remat__gelu_backward(y, x, y, (size_t)(N * C));
  remat__residual_forward(x, x, y, (size_t)(N * C));
  remat__dropout_apply(x, x, (size_t)(N * C), d);
  remat__matmul_forward(lg, x, wte, NULL, N, C, Vp);
  remat__crossentropy_forward(lg, r, tok, N, V, Vp);
  remat__crossentropy_backward(lg, tok, 1.0f / (float)N, N, V, Vp);
  remat__matmul_backward(x, dw, NULL, lg, x, wte, N, C, Vp);
  remat__crossentropy_forward_backward(lg, r, tok, 1.0f / (float)N, N, V, Vp);
  remat__matmul_forward_gelu(qkv, dqkv, y, w, w, N, C, 3 * C);
  remat__matmul_forward_residual(qkv, y, w, w, dqkv, d, N, C, 3 * C);
  remat__matmul_backward_gelu(x, dw, dw + 3 * C * C, qkv, y, w, y, N, C, 3 * C);
  /* the Llama family's: no positions, RMSNorm, SwiGLU, rotary on q of qkv */
  const size_t nc = (size_t)(N * C);
  uint16_t *xh = (uint16_t *)(void *)x, *yh = (uint16_t *)(void *)y;
  remat__encoder_forward(x, tok, wte, NULL, B, T, C);
  remat__encoder_backward(dw, NULL, x, tok, B, T, C);
  remat__rmsnorm_forward(y, r, x, w, N, C, 1e-5f);
  remat__rmsnorm_backward(x, dw, y, x, w, r, N, C);
  remat__rmsnorm_forward_bf16(yh, r, x, w, N, C, 1e-5f);
  remat__swiglu_forward(y, x, x + nc, nc);
  remat__swiglu_backward(qkv, dqkv, x, x + nc, y, nc);
  remat__swiglu_forward_bf16(yh, xh, xh + nc, nc);
  remat__swiglu_backward_bf16(xh, xh + nc, yh, yh + nc, y + nc, nc);
  remat__rope_forward(qkv, 3 * C, B, T, NH, C / NH, 0, 10000.0);
  remat__rope_backward(dqkv, 3 * C, B, T, NH, C / NH, 0, 10000.0);
  remat__rope_forward_bf16((uint16_t *)(void *)qkv, 3 * C, B, T, NH, C / NH, 0, 10000.0);
  remat__rope_backward_bf16((uint16_t *)(void *)dqkv, 3 * C, B, T, NH, C / NH, 0, 10000.0);
  remat__adamw update_opt = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};
  remat__adamw_update(w, dw, x, y, (size_t)(4 * C * C), &update_opt, 0.1f, 1.0f);
  (void)remat__sumsq(dw, (size_t)(4 * C * C));
  remat__init_normal(w, 0, (size_t)(4 * C * C), 0.02f, 1, 0);
}

static void test_no_alloc(void) {
  printf("-- allocation\n");
  const int64_t B = 2, T = 32, C = 64, NH = 4, V = 100, Vp = 128;
  const int64_t N = B * T;
  size_t nf = (size_t)(N * 4 * C * 2 + 8 * C * C + 2 * B * NH * T + 2 * N * 3 * C + 2 * N +
                       N * Vp + Vp * C);
  float *buf = falloc(nf);
  fill(buf, nf, -0.1f, 0.1f);
  int32_t *tok = malloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)(i * 7 % V);
  remat__dropout d = {.p = 0.1f, .seed = 3};
  run_all(buf, B, T, C, NH, V, Vp, tok, &d);
  run_all(buf, B, T, C, NH, V, Vp, tok, NULL);
#ifdef COUNT_ALLOCS
  long before = atomic_load(&n_allocs);
  run_all(buf, B, T, C, NH, V, Vp, tok, &d);
  run_all(buf, B, T, C, NH, V, Vp, tok, NULL);
  long after = atomic_load(&n_allocs);
  CHECKF(after == before, "no malloc/calloc/realloc during a warmed-up run of every kernel (%ld)",
        after - before);
#else
  printf("skip allocation count under AddressSanitizer (every kernel still ran)\n");
#endif
  free(buf), free(tok);
}

int main(void) {
  printf("test_kernels: %d OpenMP threads\n", omp_get_max_threads());
  test_encoder();
  test_layernorm();
  test_matmul_case(true);
  test_matmul_case(false);
  test_attention();
  test_fused();
  test_gelu();
  test_residual();
  test_rmsnorm();
  test_swiglu();
  test_rope();
  test_llama_bf16();
  test_crossentropy();
  test_dropout();
  test_adamw();
  test_vec_math();
  test_no_alloc();
  return test_summary("test_kernels");
}
