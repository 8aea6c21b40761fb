/* attention_ref.c: the attention kernel remat used before the tiled one, kept
 * as the tests' reference. It stores the softmax probabilities P (B,NH,T,T)
 * in the forward and uses a (B,NH,T,T) scratch in the backward; the tiled
 * kernel in src/kernels/attention.c must agree with it (forward output and
 * every input gradient) and with the scalar double reference in
 * test_kernels.c.
 *
 * Work is split over the B*NH (batch, head) pairs with OpenMP; inside a pair
 * every product is one single-threaded cblas_sgemm. Dropout: the forward
 * builds the dropped rows dropout(P) in a fixed-size stack tile (REF_TILE
 * floats) and multiplies each tile by v; the mask comes from the same Philox
 * helper as remat__dropout_apply, with element index
 * ((b*NH + h)*T + t)*T + t' into (B,NH,T,T). */
#include <cblas.h>
#include <limits.h>
#include <math.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/philox_rng.h"
#include "attention_ref.h"

#define REF_TILE 8192

static int as_blasint(int64_t x) {
  REMAT_ASSERT(x >= 0 && x <= INT_MAX);
  return (int)x;
}

static bool drop_on(const remat__dropout *d) { return d && d->p > 0.0f; }

/* In place on a (T,T) block holding scaled scores: causal softmax of each
 * row t over columns 0..t, columns past t set to 0. */
static void causal_softmax(float *A, int64_t T) {
  for (int64_t t = 0; t < T; t++) {
    float *row = A + t * T;
    float mx = -INFINITY;
    for (int64_t c = 0; c <= t; c++) mx = row[c] > mx ? row[c] : mx;
    float s = 0.0f;
    for (int64_t c = 0; c <= t; c++) {
      row[c] = expf(row[c] - mx);
      s += row[c];
    }
    const float inv = 1.0f / s;
    for (int64_t c = 0; c <= t; c++) row[c] *= inv;
    for (int64_t c = t + 1; c < T; c++) row[c] = 0.0f;
  }
}

/* O (T,hs; ld ldo) = dropout(P) (T,T) @ V (T,hs; ld ldv), tiled through a
 * stack buffer. P's element (t, c) has flat dropout index base + t*T + c.
 * Only columns 0..t of row t are nonzero, so a row block [t0, t1) needs
 * columns [0, t1). */
static void dropped_pv(float *O, int64_t ldo, const float *P, const float *V, int64_t ldv,
                       int64_t T, int64_t hs, uint64_t base, const remat__dropout *d) {
  float tile[REF_TILE];
  const float scale = 1.0f / (1.0f - d->p);
  int64_t R = REF_TILE / T; /* rows per tile */
  if (R < 1) R = 1;
  const int64_t W = REF_TILE / R; /* columns per tile */
  for (int64_t t0 = 0; t0 < T; t0 += R) {
    const int64_t t1 = t0 + R < T ? t0 + R : T, ncol = t1;
    for (int64_t c0 = 0; c0 < ncol; c0 += W) {
      const int64_t c1 = c0 + W < ncol ? c0 + W : ncol, w = c1 - c0;
      for (int64_t t = t0; t < t1; t++) {
        float *dst = tile + (t - t0) * w;
        int64_t live = t + 1 - c0; /* columns c0..t are below the diagonal */
        if (live > w) live = w;
        if (live < 0) live = 0;
        remat__drop_row(dst, P + t * T + c0, live, base + (uint64_t)(t * T + c0), d, scale);
        for (int64_t j = live; j < w; j++) dst[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(t1 - t0), as_blasint(hs),
                  as_blasint(w), 1.0f, tile, as_blasint(w), V + c0 * ldv, as_blasint(ldv),
                  c0 == 0 ? 0.0f : 1.0f, O + t0 * ldo, as_blasint(ldo));
    }
  }
}

void attention_ref_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, const remat__dropout *drop) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const bool dropping = drop_on(drop);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * NH; bh++) {
    const int64_t b = bh / NH, h = bh % NH;
    const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
    float *A = att + bh * T * T, *O = out + b * T * C + h * hs;
    /* A (T,T) = scale q (T,hs) @ k^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(T), as_blasint(T),
                as_blasint(hs), scale, q, as_blasint(C3), k, as_blasint(C3), 0.0f, A,
                as_blasint(T));
    causal_softmax(A, T);
    if (dropping)
      dropped_pv(O, C, A, v, C3, T, hs, (uint64_t)(bh * T * T), drop);
    else /* O (T,hs) = A (T,T) @ v (T,hs); A's upper triangle is 0 */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(T), as_blasint(hs),
                  as_blasint(T), 1.0f, A, as_blasint(T), v, as_blasint(C3), 0.0f, O, as_blasint(C));
  }
}

/* With S the scaled scores, P = softmax(S), Pd = dropout(P), O = Pd V:
 *   dV = Pd^T dO;  dPd = dO V^T;  dP = dropout(dPd) (same mask and scale);
 *   dS = P * (dP - rowsum(P * dP));  dQ = scale dS K;  dK = scale dS^T Q. */
void attention_ref_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int64_t B, int64_t T, int64_t C, int64_t NH,
                            const remat__dropout *drop) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const bool dropping = drop_on(drop);
  const float dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * NH; bh++) {
    const int64_t b = bh / NH, h = bh % NH;
    const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
    const float *P = att + bh * T * T, *dO = dout + b * T * C + h * hs;
    float *D = datt + bh * T * T;
    float *dq = dqkv + b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
    const uint64_t base = (uint64_t)(bh * T * T);

    /* dv (T,hs) = Pd^T (T,T) @ dO (T,hs), with Pd = P when not dropping */
    const float *Pd = P;
    if (dropping) {
      for (int64_t t = 0; t < T; t++) {
        remat__drop_row(D + t * T, P + t * T, t + 1, base + (uint64_t)(t * T), drop, dscale);
        for (int64_t c = t + 1; c < T; c++) D[t * T + c] = 0.0f;
      }
      Pd = D;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blasint(T), as_blasint(hs),
                as_blasint(T), 1.0f, Pd, as_blasint(T), dO, as_blasint(C), 0.0f, dv,
                as_blasint(C3));

    /* D (T,T) = dO (T,hs) @ v^T: gradient of Pd (upper triangle unused) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(T), as_blasint(T),
                as_blasint(hs), 1.0f, dO, as_blasint(C), v, as_blasint(C3), 0.0f, D, as_blasint(T));
    for (int64_t t = 0; t < T; t++) {
      float *row = D + t * T;
      const float *p = P + t * T;
      if (dropping) remat__drop_row(row, row, t + 1, base + (uint64_t)(t * T), drop, dscale);
      float dot = 0.0f;
      for (int64_t c = 0; c <= t; c++) dot += p[c] * row[c];
      for (int64_t c = 0; c <= t; c++) row[c] = p[c] * (row[c] - dot);
      for (int64_t c = t + 1; c < T; c++) row[c] = 0.0f;
    }

    /* dq (T,hs) = scale D @ k;  dk (T,hs) = scale D^T @ q */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(T), as_blasint(hs),
                as_blasint(T), scale, D, as_blasint(T), k, as_blasint(C3), 0.0f, dq,
                as_blasint(C3));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blasint(T), as_blasint(hs),
                as_blasint(T), scale, D, as_blasint(T), q, as_blasint(C3), 0.0f, dk,
                as_blasint(C3));
  }
}
