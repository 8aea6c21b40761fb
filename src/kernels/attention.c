/* attention.c: causal multi-head self-attention without a T x T buffer: the
 * tiled scheme of FlashAttention-2 on the CPU, forward and backward.
 *
 * Queries are cut into tiles of rows and keys into tiles of columns; one
 * (query tile, key tile) block of the scores lives in a fixed-size buffer on
 * the thread's stack (the forward holds one, the backward two; 64 KiB at
 * most, whatever T). Every product is one single-threaded cblas_sgemm
 * (OpenBLAS's OpenMP build runs on the calling thread inside a parallel
 * region and allocates nothing there), reading q, k, v straight from qkv
 * (B,T,3C) with leading dimension 3C and writing heads side by side.
 *
 * Forward: a query tile walks its key tiles left to right with an online
 * softmax: per row the running maximum m of the scaled scores and the
 * running sum l of exp(s - m); when m grows, the row's partial output and l
 * are rescaled by exp(m_old - m_new). At the end the output rows are divided
 * by l and lse = m + log(l) is stored, one float per row (B,NH,T).
 *
 * Backward (FlashAttention-2): the probabilities are rebuilt tile by tile as
 * P = exp(s - lse) from q, k and lse; with D = rowsum(dO * O) per row,
 * dS = P * (dP - D), which equals the softmax backward because
 * rowsum(P * dP) = rowsum(dropout(P) * (dO v^T)) = rowsum(dO * O).
 *
 * Dropout on the probabilities: element (t, t') of pair (b, h) has Philox
 * index ((b*NH + h)*T + t)*T + t', its place in a (B,NH,T,T) tensor, exactly
 * as remat__dropout_apply would give on a stored one; a tile's row is a
 * contiguous run of that index, dropped on the fly by remat__drop_row. The
 * forward drops P after summing it (the softmax normalises the undropped P);
 * the backward regenerates the same mask for dP and for dropout(P)^T dO.
 *
 * Determinism: every output element is produced by one work item whose
 * operations run in a fixed order (key tiles left to right for a query row,
 * query tiles top to bottom for a key row), whatever the schedule, so the
 * results are bitwise reproducible and do not depend on how the work is
 * split. The forward's items are (pair, query tile); the backward's are
 * pairs, or, with fewer pairs than threads, two passes (key tiles for dk and
 * dv, then query tiles for dq) that repeat the same tile arithmetic, so
 * both ways give the same bits. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/philox_rng.h"
#include "kernels/vec_math.h"

/* Tile sizes (query rows x key columns), overridable so tests can run many
 * tiles at tiny T. The forward holds one tile (48 KiB), the backward two
 * (32 KiB each); larger tiles mean fewer, more efficient sgemm calls. */
#ifndef ATT_BQ
#define ATT_BQ 128 /* forward */
#endif
#ifndef ATT_BK
#define ATT_BK 96
#endif
#ifndef ATT_BQB
#define ATT_BQB 64 /* backward */
#endif
#ifndef ATT_BKB
#define ATT_BKB 128
#endif

/* Row reductions use LANES interleaved partial results (element c goes to
 * lane c % LANES, lanes combined in order): a fixed order that vectorises. */
#define LANES 16

static int as_blasint(int64_t x) {
  REMAT_ASSERT(x >= 0 && x <= INT_MAX);
  return (int)x;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Columns 0..live-1 of row t in a key tile starting at c0 are at or below
 * the diagonal; live is clamped to [0, w]. */
static int64_t live_cols(int64_t t, int64_t c0, int64_t w) {
  int64_t live = t - c0 + 1;
  return live < 0 ? 0 : live > w ? w : live;
}

static float row_max(const float *x, int64_t n) {
  float lane[LANES];
  for (int l = 0; l < LANES; l++) lane[l] = -INFINITY;
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] = x[c + l] > lane[l] ? x[c + l] : lane[l];
  for (; c < n; c++) lane[c % LANES] = x[c] > lane[c % LANES] ? x[c] : lane[c % LANES];
  float m = lane[0];
  for (int l = 1; l < LANES; l++) m = lane[l] > m ? lane[l] : m;
  return m;
}

/* x[c] = exp(x[c] - m) for c < n, in place; returns their sum. */
static float exp_sum(float *x, int64_t n, float m) {
  float lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) {
      const float e = remat__exp(x[c + l] - m);
      x[c + l] = e;
      lane[l] += e;
    }
  for (; c < n; c++) {
    x[c] = remat__exp(x[c] - m);
    lane[c % LANES] += x[c];
  }
  float s = 0.0f;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return s;
}

static float row_dot(const float *x, const float *y, int64_t n) {
  float lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += x[c + l] * y[c + l];
  for (; c < n; c++) lane[c % LANES] += x[c] * y[c];
  float s = 0.0f;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return s;
}

/* The shape of one call and where pair bh's operands start. */
typedef struct {
  int64_t T, C, NH, hs, C3;
  float scale;  /* 1/sqrt(hs) */
  const remat__dropout *drop; /* NULL when not dropping */
  float dscale; /* 1/(1-p) */
} att_shape;

static att_shape shape_of(int64_t T, int64_t C, int64_t NH, const remat__dropout *drop) {
  REMAT_ASSERT(NH > 0 && C % NH == 0 && T > 0);
  const int64_t hs = C / NH;
  const bool dropping = drop && drop->p > 0.0f;
  if (dropping) REMAT_ASSERT(drop->p < 1.0f);
  return (att_shape){.T = T, .C = C, .NH = NH, .hs = hs, .C3 = 3 * C,
                     .scale = 1.0f / sqrtf((float)hs), .drop = dropping ? drop : NULL,
                     .dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f};
}

/* Offset of row t of pair bh in a (B,T,W) tensor, at head h's channels. */
static int64_t at(const att_shape *s, int64_t bh, int64_t t, int64_t W) {
  return (bh / s->NH * s->T + t) * W + bh % s->NH * s->hs;
}

/* Philox index of element (t, c) of pair bh. */
static uint64_t drop_index(const att_shape *s, int64_t bh, int64_t t, int64_t c) {
  return (uint64_t)((bh * s->T + t) * s->T + c);
}

/* ------------------------------------------------------------- forward */

/* Output rows [r0, r0 + ATT_BQ) of pair bh and their lse. */
static void forward_rows(const att_shape *s, int64_t bh, int64_t r0, float *out, float *lse,
                         const float *qkv) {
  float S[ATT_BQ * ATT_BK], m[ATT_BQ], l[ATT_BQ];
  const int64_t T = s->T, C = s->C, C3 = s->C3, hs = s->hs;
  const int64_t nr = min64(ATT_BQ, T - r0), kend = r0 + nr;
  const float *q = qkv + at(s, bh, r0, C3), *k = qkv + at(s, bh, 0, C3) + C, *v = k + C;
  float *O = out + at(s, bh, r0, C);
  for (int64_t c0 = 0; c0 < kend; c0 += ATT_BK) {
    const int64_t w = min64(ATT_BK, kend - c0);
    /* S (nr,w) = scale q (nr,hs) @ k[c0..c0+w)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
                as_blasint(hs), s->scale, q, as_blasint(C3), k + c0 * C3, as_blasint(C3), 0.0f,
                S, as_blasint(w));
    for (int64_t r = 0; r < nr; r++) {
      const int64_t t = r0 + r, live = live_cols(t, c0, w);
      float *row = S + r * w;
      for (int64_t c = live; c < w; c++) row[c] = 0.0f;
      if (live == 0) continue; /* the row sees none of these keys (c0 > t > 0) */
      const float mx = c0 == 0 ? row_max(row, live) : fmaxf(m[r], row_max(row, live));
      const float sum = exp_sum(row, live, mx);
      if (c0 == 0) {
        l[r] = sum;
      } else {
        const float alpha = remat__exp(m[r] - mx);
        l[r] = l[r] * alpha + sum;
        float *o = O + r * C;
        for (int64_t d = 0; d < hs; d++) o[d] *= alpha;
      }
      m[r] = mx;
      if (s->drop) remat__drop_row(row, row, live, drop_index(s, bh, t, c0), s->drop, s->dscale);
    }
    /* O (nr,hs) (+)= S (nr,w) @ v[c0..c0+w) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(nr), as_blasint(hs),
                as_blasint(w), 1.0f, S, as_blasint(w), v + c0 * C3, as_blasint(C3),
                c0 == 0 ? 0.0f : 1.0f, O, as_blasint(C));
  }
  for (int64_t r = 0; r < nr; r++) {
    const float inv = 1.0f / l[r];
    float *o = O + r * C;
    for (int64_t d = 0; d < hs; d++) o[d] *= inv;
    lse[bh * T + r0 + r] = m[r] + logf(l[r]);
  }
}

void remat__attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                              int64_t C, int64_t NH, const remat__dropout *drop) {
  const att_shape s = shape_of(T, C, NH, drop);
  const int64_t nq = (T + ATT_BQ - 1) / ATT_BQ, items = B * NH * nq;
  /* Pair by pair, each pair's query tiles longest (last) first, handed out
   * dynamically: the schedule balances the triangle and changes no bits. */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t it = 0; it < items; it++) {
    const int64_t bh = it / nq, qt = nq - 1 - it % nq;
    forward_rows(&s, bh, qt * ATT_BQ, out, lse, qkv);
  }
}

/* ------------------------------------------------------------ backward */

typedef struct {
  const float *qkv, *dout, *out, *lse;
  float *dqkv, *delta;
} att_bwd;

/* delta[bh*T + t] = rowsum(dO * O) over pair bh's head, rows t of [0, T). */
static void delta_rows(const att_shape *s, const att_bwd *a, int64_t bh) {
  for (int64_t t = 0; t < s->T; t++) {
    const int64_t o = at(s, bh, t, s->C);
    a->delta[bh * s->T + t] = row_dot(a->dout + o, a->out + o, s->hs);
  }
}

/* One tile of pair bh, queries [r0, r0+nr) by keys [c0, c0+w): on return
 * P (nr,w) holds dropout(P) and dS (nr,w) holds P * (dP - D), both 0 above
 * the diagonal. */
static void backward_tile(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0,
                          int64_t nr, int64_t c0, int64_t w, float *P, float *dS) {
  const int64_t T = s->T, C = s->C, C3 = s->C3, hs = s->hs;
  const float *q = a->qkv + at(s, bh, r0, C3), *k = a->qkv + at(s, bh, c0, C3) + C, *v = k + C;
  const float *dO = a->dout + at(s, bh, r0, C);
  /* P (nr,w) = scale q k^T (then exp(. - lse));  dS (nr,w) = dO v^T (then the rest) */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
              as_blasint(hs), s->scale, q, as_blasint(C3), k, as_blasint(C3), 0.0f, P,
              as_blasint(w));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
              as_blasint(hs), 1.0f, dO, as_blasint(C), v, as_blasint(C3), 0.0f, dS,
              as_blasint(w));
  for (int64_t r = 0; r < nr; r++) {
    const int64_t t = r0 + r, live = live_cols(t, c0, w);
    float *p = P + r * w, *ds = dS + r * w;
    const float L = a->lse[bh * T + t], D = a->delta[bh * T + t];
    if (!s->drop) {
      for (int64_t c = 0; c < live; c++) {
        p[c] = remat__exp(p[c] - L);
        ds[c] = p[c] * (ds[c] - D);
      }
    } else {
      const uint64_t i0 = drop_index(s, bh, t, c0);
      for (int64_t c = 0; c < live; c++) p[c] = remat__exp(p[c] - L);
      remat__drop_row(ds, ds, live, i0, s->drop, s->dscale);
      for (int64_t c = 0; c < live; c++) ds[c] = p[c] * (ds[c] - D);
      remat__drop_row(p, p, live, i0, s->drop, s->dscale);
    }
    for (int64_t c = live; c < w; c++) p[c] = ds[c] = 0.0f;
  }
}

/* dv, dk of keys [c0, c0+w) (+)= dropout(P)^T dO, scale dS^T q over queries
 * [r0, r0+nr); beta 0 for the first query tile. */
static void kv_products(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0,
                        int64_t nr, int64_t c0, int64_t w, const float *P, const float *dS,
                        float beta) {
  const int64_t C = s->C, C3 = s->C3, hs = s->hs;
  const float *q = a->qkv + at(s, bh, r0, C3), *dO = a->dout + at(s, bh, r0, C);
  float *dk = a->dqkv + at(s, bh, c0, C3) + C, *dv = dk + C;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blasint(w), as_blasint(hs),
              as_blasint(nr), 1.0f, P, as_blasint(w), dO, as_blasint(C), beta, dv, as_blasint(C3));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blasint(w), as_blasint(hs),
              as_blasint(nr), s->scale, dS, as_blasint(w), q, as_blasint(C3), beta, dk,
              as_blasint(C3));
}

/* dq of queries [r0, r0+nr) (+)= scale dS k over keys [c0, c0+w); beta 0
 * for the first key tile. */
static void q_product(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0, int64_t nr,
                      int64_t c0, int64_t w, const float *dS, float beta) {
  const int64_t C3 = s->C3, hs = s->hs;
  const float *k = a->qkv + at(s, bh, c0, C3) + s->C;
  float *dq = a->dqkv + at(s, bh, r0, C3);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(nr), as_blasint(hs),
              as_blasint(w), s->scale, dS, as_blasint(w), k, as_blasint(C3), beta, dq,
              as_blasint(C3));
}

/* First query tile that sees key c0: the one holding row c0. */
static int64_t first_query_tile(int64_t c0) { return c0 / ATT_BQB * ATT_BQB; }

/* Everything of pair bh in one pass: key tiles left to right, each with its
 * query tiles top to bottom. */
static void backward_pair(const att_shape *s, const att_bwd *a, int64_t bh) {
  float P[ATT_BQB * ATT_BKB], dS[ATT_BQB * ATT_BKB];
  const int64_t T = s->T;
  delta_rows(s, a, bh);
  for (int64_t c0 = 0; c0 < T; c0 += ATT_BKB) {
    const int64_t w = min64(ATT_BKB, T - c0), first = first_query_tile(c0);
    for (int64_t r0 = first; r0 < T; r0 += ATT_BQB) {
      const int64_t nr = min64(ATT_BQB, T - r0);
      backward_tile(s, a, bh, r0, nr, c0, w, P, dS);
      kv_products(s, a, bh, r0, nr, c0, w, P, dS, r0 == first ? 0.0f : 1.0f);
      q_product(s, a, bh, r0, nr, c0, w, dS, c0 == 0 ? 0.0f : 1.0f);
    }
  }
}

/* dk, dv of the keys [c0, c0+ATT_BKB) of pair bh (first of two passes). */
static void backward_keys(const att_shape *s, const att_bwd *a, int64_t bh, int64_t c0) {
  float P[ATT_BQB * ATT_BKB], dS[ATT_BQB * ATT_BKB];
  const int64_t T = s->T, w = min64(ATT_BKB, T - c0), first = first_query_tile(c0);
  for (int64_t r0 = first; r0 < T; r0 += ATT_BQB) {
    const int64_t nr = min64(ATT_BQB, T - r0);
    backward_tile(s, a, bh, r0, nr, c0, w, P, dS);
    kv_products(s, a, bh, r0, nr, c0, w, P, dS, r0 == first ? 0.0f : 1.0f);
  }
}

/* dq of the queries [r0, r0+ATT_BQB) of pair bh (second of two passes). */
static void backward_queries(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0) {
  float P[ATT_BQB * ATT_BKB], dS[ATT_BQB * ATT_BKB];
  const int64_t T = s->T, nr = min64(ATT_BQB, T - r0);
  for (int64_t c0 = 0; c0 < r0 + nr; c0 += ATT_BKB) {
    const int64_t w = min64(ATT_BKB, T - c0);
    backward_tile(s, a, bh, r0, nr, c0, w, P, dS);
    q_product(s, a, bh, r0, nr, c0, w, dS, c0 == 0 ? 0.0f : 1.0f);
  }
}

void remat__attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                               const float *out, const float *lse, int64_t B, int64_t T,
                               int64_t C, int64_t NH, const remat__dropout *drop) {
  const att_shape s = shape_of(T, C, NH, drop);
  const att_bwd a = {.qkv = qkv, .dout = dout, .out = out, .lse = lse, .dqkv = dqkv,
                     .delta = delta};
  const int64_t pairs = B * NH;
  if (pairs >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; bh++) backward_pair(&s, &a, bh);
    return;
  }
  /* Too few pairs to keep every thread busy: split each pair's keys, then
   * its queries. Each tile is rebuilt twice, once per pass. */
  const int64_t nk = (T + ATT_BKB - 1) / ATT_BKB, nq = (T + ATT_BQB - 1) / ATT_BQB;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; bh++) delta_rows(&s, &a, bh);
    /* key tiles first to last (longest first), then query tiles last to
     * first; the two passes write disjoint parts of dqkv, so no barrier */
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < pairs * nk; it++)
      backward_keys(&s, &a, it / nk, it % nk * ATT_BKB);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < pairs * nq; it++)
      backward_queries(&s, &a, it / nq, (nq - 1 - it % nq) * ATT_BQB);
  }
}
