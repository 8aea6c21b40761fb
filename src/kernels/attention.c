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
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/philox_rng.h"
#include "kernels/vec_math.h"
#include "products/sizes.h"

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

/* The online softmax over one tile's scores S (nr,w) of pair bh, queries
 * from r0, keys from c0: per row the running maximum m and sum l, the
 * output rows O (stride C) rescaled when m grows; S left holding
 * dropout(exp(s - m)), 0 right of the diagonal. */
static void online_softmax(const att_shape *s, int64_t bh, int64_t r0, int64_t nr, int64_t c0,
                           int64_t w, float *S, float *m, float *l, float *O) {
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
      float *o = O + r * s->C;
      for (int64_t d = 0; d < s->hs; d++) o[d] *= alpha;
    }
    m[r] = mx;
    if (s->drop) remat__drop_row(row, row, live, drop_index(s, bh, t, c0), s->drop, s->dscale);
  }
}

/* The output rows divided by l, and lse = m + log(l) (lse NULL: none). */
static void finish_rows(const att_shape *s, int64_t bh, int64_t r0, int64_t nr, const float *m,
                        const float *l, float *O, float *lse) {
  for (int64_t r = 0; r < nr; r++) {
    const float inv = 1.0f / l[r];
    float *o = O + r * s->C;
    for (int64_t d = 0; d < s->hs; d++) o[d] *= inv;
    if (lse) lse[bh * s->T + r0 + r] = m[r] + logf(l[r]);
  }
}

/* Output rows [r0, r0 + nr) of pair bh (nr at most ATT_BQ) over the keys
 * and values of positions 0 .. r0 + nr - 1, and their lse (NULL: none): q
 * rows ldq floats apart, k and v rows ldkv apart, O rows C apart. */
static void attend_rows(const att_shape *s, int64_t bh, int64_t r0, int64_t nr, const float *q,
                        int64_t ldq, const float *k, const float *v, int64_t ldkv, float *O,
                        float *lse) {
  float S[ATT_BQ * ATT_BK], m[ATT_BQ], l[ATT_BQ];
  const int64_t hs = s->hs, kend = r0 + nr;
  for (int64_t c0 = 0; c0 < kend; c0 += ATT_BK) {
    const int64_t w = min64(ATT_BK, kend - c0);
    /* S (nr,w) = scale q (nr,hs) @ k[c0..c0+w)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
                as_blasint(hs), s->scale, q, as_blasint(ldq), k + c0 * ldkv, as_blasint(ldkv),
                0.0f, S, as_blasint(w));
    online_softmax(s, bh, r0, nr, c0, w, S, m, l, O);
    /* O (nr,hs) (+)= S (nr,w) @ v[c0..c0+w) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(nr), as_blasint(hs),
                as_blasint(w), 1.0f, S, as_blasint(w), v + c0 * ldkv, as_blasint(ldkv),
                c0 == 0 ? 0.0f : 1.0f, O, as_blasint(s->C));
  }
  finish_rows(s, bh, r0, nr, m, l, O, lse);
}

void remat__attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                              int64_t C, int64_t NH, const remat__dropout *drop) {
  const att_shape s = shape_of(T, C, NH, drop);
  const int64_t nq = (T + ATT_BQ - 1) / ATT_BQ, items = B * NH * nq;
  /* Pair by pair, each pair's query tiles longest (last) first, handed out
   * dynamically: the schedule balances the triangle and changes no bits. */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t it = 0; it < items; it++) {
    const int64_t bh = it / nq, r0 = (nq - 1 - it % nq) * ATT_BQ;
    const float *k = qkv + at(&s, bh, 0, 3 * C) + C;
    attend_rows(&s, bh, r0, min64(ATT_BQ, T - r0), qkv + at(&s, bh, r0, 3 * C), 3 * C, k, k + C,
                3 * C, out + at(&s, bh, r0, C), lse);
  }
}

void remat__attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                             const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                             int64_t NH) {
  REMAT_ASSERT(n > 0 && pos >= 0);
  const att_shape s = shape_of(pos + n, C, NH, NULL);
  const int64_t nq = (n + ATT_BQ - 1) / ATT_BQ, items = NH * nq, hs = s.hs;
  /* Items are (head, tile of new rows); with one row, the heads. */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t it = 0; it < items; it++) {
    const int64_t h = it / nq, r = (nq - 1 - it % nq) * ATT_BQ;
    attend_rows(&s, h, pos + r, min64(ATT_BQ, n - r), q + r * ldq + h * hs, ldq, k + h * hs,
                v + h * hs, ldkv, out + r * C + h * hs, NULL);
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

/* The elementwise part of a backward tile: P (nr,w) from the scaled scores
 * to dropout(exp(s - lse)), dS (nr,w) from dP to P * (dP - D); both 0 right
 * of the diagonal. */
static void softmax_grad(const att_shape *s, const float *lse, const float *delta, int64_t bh,
                         int64_t r0, int64_t nr, int64_t c0, int64_t w, float *P, float *dS) {
  const int64_t T = s->T;
  for (int64_t r = 0; r < nr; r++) {
    const int64_t t = r0 + r, live = live_cols(t, c0, w);
    float *p = P + r * w, *ds = dS + r * w;
    const float L = lse[bh * T + t], D = delta[bh * T + t];
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

/* One tile of pair bh, queries [r0, r0+nr) by keys [c0, c0+w): on return
 * P (nr,w) holds dropout(P) and dS (nr,w) holds P * (dP - D), both 0 above
 * the diagonal. */
static void backward_tile(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0,
                          int64_t nr, int64_t c0, int64_t w, float *P, float *dS) {
  const int64_t C = s->C, C3 = s->C3, hs = s->hs;
  const float *q = a->qkv + at(s, bh, r0, C3), *k = a->qkv + at(s, bh, c0, C3) + C, *v = k + C;
  const float *dO = a->dout + at(s, bh, r0, C);
  /* P (nr,w) = scale q k^T (then exp(. - lse));  dS (nr,w) = dO v^T (then the rest) */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
              as_blasint(hs), s->scale, q, as_blasint(C3), k, as_blasint(C3), 0.0f, P,
              as_blasint(w));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
              as_blasint(hs), 1.0f, dO, as_blasint(C), v, as_blasint(C3), 0.0f, dS,
              as_blasint(w));
  softmax_grad(s, a->lse, a->delta, bh, r0, nr, c0, w, P, dS);
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

/* ------------------------------------------- bf16 operands (AVX512-BF16) */

/* The same tiles, the same online softmax and the same order of work on
 * bf16 operands: qkv and out as the bf16 products leave them, dout in
 * fp32 (rounded to bf16 where a product takes it). The four products of a
 * tile run on the CPU's bf16 dot product (VDPBF16PS: two bf16 products
 * added to an fp32 lane, in one rounding-free order per lane), with
 * operands each thread packs into its piece of the work
 * (remat__att16_tiles): the operand whose rows the sum runs over goes in
 * pairs of rows, the other is read a pair of bf16 at a time. The softmax,
 * its statistics (lse, delta), the dropout and the outputs stay fp32; the
 * probabilities and the scores' gradient are rounded to bf16 for the
 * products that take them. Every output element is summed in a fixed
 * order whatever the thread, so the results are as reproducible and as
 * independent of the thread count as the fp32 kernel's.
 *
 * AMX tiles are not used: this kernel runs AVX512-BF16 on every CPU that
 * has it, AMX or not. */

#if defined(__x86_64__)

#define BQ16 REMAT__ATT16_BQ
#define BK16 REMAT__ATT16_BK
#define BF16_TARGET __attribute__((target("avx512f,avx512bf16")))

/* Rows [r, r + rb) and column vectors [0, nv) (16 columns each from j0,
 * masked) of pairs_product; rb and nv are constants where it is inlined. */
static inline __attribute__((always_inline)) BF16_TARGET void pairs_block(
    float *out, int64_t ldo, const uint16_t *A, int64_t lda, const uint16_t *Bp, int64_t ldb,
    int64_t np, int64_t j0, const __mmask16 *mask, float alpha, bool acc, const int rb,
    const int nv) {
  __m512 z[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) z[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < np; k++) {
    __m512i b[4];
    const uint16_t *bk = Bp + (k * ldb + j0) * 2;
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) b[v] = _mm512_maskz_loadu_epi32(mask[v], bk + 32 * v);
#pragma GCC unroll 4
    for (int r = 0; r < rb; r++) {
      uint32_t pair;
      memcpy(&pair, A + r * lda + 2 * k, sizeof pair);
      const __m512i a = _mm512_set1_epi32((int)pair);
#pragma GCC unroll 4
      for (int v = 0; v < nv; v++)
        z[r][v] = _mm512_dpbf16_ps(z[r][v], (__m512bh)a, (__m512bh)b[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
      float *o = out + r * ldo + j0 + 16 * v;
      const __m512 y = acc ? _mm512_fmadd_ps(al, z[r][v], _mm512_maskz_loadu_ps(mask[v], o))
                           : _mm512_mul_ps(al, z[r][v]);
      _mm512_mask_storeu_ps(o, mask[v], y);
    }
}

#define PAIRS_BLOCK(rb)                                                                        \
  switch (nv) {                                                                                \
  case 1: pairs_block(o, ldo, a, lda, Bp, ldb, np, j0, mask, alpha, acc, rb, 1); break;        \
  case 2: pairs_block(o, ldo, a, lda, Bp, ldb, np, j0, mask, alpha, acc, rb, 2); break;        \
  case 3: pairs_block(o, ldo, a, lda, Bp, ldb, np, j0, mask, alpha, acc, rb, 3); break;        \
  default: pairs_block(o, ldo, a, lda, Bp, ldb, np, j0, mask, alpha, acc, rb, 4); break;       \
  }

/* out (nr,n) = alpha A B, or out + alpha A B when acc (out's rows of stride
 * ldo): A (nr, 2 np) bf16 rows of stride lda; B (2 np, n) in pairs of rows,
 * Bp (np, ldb, 2): Bp[(k ldb + j) 2 + e] = B[2k + e][j]. Each element's sum
 * runs over k in order, in fp32, then is scaled (and added) once. */
static BF16_TARGET void pairs_product(float *out, int64_t ldo, int64_t nr, int64_t n,
                                      const uint16_t *A, int64_t lda, const uint16_t *Bp,
                                      int64_t ldb, int64_t np, float alpha, bool acc) {
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    __mmask16 mask[4];
    int nv = 0;
    for (int v = 0; v < 4; v++) {
      const int64_t left = n - j0 - 16 * v;
      mask[v] = left >= 16 ? (__mmask16)0xffff
                : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
      if (left > 0) nv = v + 1;
    }
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) {
      float *o = out + r * ldo;
      const uint16_t *a = A + r * lda;
      PAIRS_BLOCK(4)
    }
    for (; r < nr; r++) {
      float *o = out + r * ldo;
      const uint16_t *a = A + r * lda;
      PAIRS_BLOCK(1)
    }
  }
}

/* dst (np, ldn, 2) from n bf16 rows of src (stride lds): the pairs of
 * channels of each row side by side, dst[(j ldn + c) 2 + e] = src[c][2j + e]. */
static void pack_channel_pairs(uint16_t *dst, const uint16_t *src, int64_t lds, int64_t n,
                               int64_t np, int64_t ldn) {
  for (int64_t c = 0; c < n; c++) {
    const uint16_t *row = src + c * lds;
    for (int64_t j = 0; j < np; j++) memcpy(dst + 2 * (j * ldn + c), row + 2 * j, 4);
  }
}

/* dst (ceil(n/2), hs, 2) from n bf16 rows of src (stride lds), pairs of
 * rows: dst[(i hs + d) 2 + e] = src[2i + e][d], 0 past row n. */
static void pack_row_pairs(uint16_t *dst, const uint16_t *src, int64_t lds, int64_t n,
                           int64_t hs) {
  for (int64_t i = 0; 2 * i < n; i++) {
    const uint16_t *r0 = src + 2 * i * lds, *r1 = r0 + lds;
    uint16_t *o = dst + 2 * i * hs;
    if (2 * i + 1 < n)
      for (int64_t d = 0; d < hs; d++) o[2 * d] = r0[d], o[2 * d + 1] = r1[d];
    else
      for (int64_t d = 0; d < hs; d++) o[2 * d] = r0[d], o[2 * d + 1] = 0;
  }
}

/* The same from fp32 rows, each value rounded to bf16. */
static void pack_row_pairs_f32(uint16_t *dst, const float *src, int64_t lds, int64_t n,
                               int64_t hs) {
  for (int64_t i = 0; 2 * i < n; i++) {
    const float *r0 = src + 2 * i * lds, *r1 = r0 + lds;
    uint16_t *o = dst + 2 * i * hs;
    const bool two = 2 * i + 1 < n;
    for (int64_t d = 0; d < hs; d++) {
      o[2 * d] = remat__bf16_round(r0[d]);
      o[2 * d + 1] = two ? remat__bf16_round(r1[d]) : 0;
    }
  }
}

/* dst (nr, ldd) = src (nr, w; stride lds) rounded, with column w set to 0
 * when w is odd (the last pair's other half). */
static void round_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t nr,
                       int64_t w) {
  for (int64_t r = 0; r < nr; r++) {
    for (int64_t c = 0; c < w; c++) dst[r * ldd + c] = remat__bf16_round(src[r * lds + c]);
    if (w & 1) dst[r * ldd + w] = 0;
  }
}

/* dst (w, ldd) = src (nr, w)^T rounded, with column nr set to 0 when nr is
 * odd. */
static void round_transposed(uint16_t *dst, int64_t ldd, const float *src, int64_t nr,
                             int64_t w) {
  for (int64_t c = 0; c < w; c++) {
    for (int64_t r = 0; r < nr; r++) dst[c * ldd + r] = remat__bf16_round(src[r * w + c]);
    if (nr & 1) dst[c * ldd + nr] = 0;
  }
}

/* Threads the work's pieces allow, at most the parallel regions' own. */
static int att16_threads(size_t work_bytes, int64_t hs) {
  const size_t per = remat__att16_tiles_view(NULL, NULL, hs);
  const size_t pieces = work_bytes / per;
  REMAT_ASSERT(hs % 2 == 0 && pieces >= 1);
  const int max = omp_get_max_threads();
  return pieces < (size_t)max ? (int)pieces : max;
}

static remat__att16_tiles att16_piece(void *work, int64_t hs) {
  remat__att16_tiles t;
  const size_t per = remat__att16_tiles_view(NULL, NULL, hs);
  remat__att16_tiles_view(&t, (char *)work + (size_t)omp_get_thread_num() * per, hs);
  return t;
}

/* The forward's rows (attend_rows) on bf16 operands. */
static BF16_TARGET void forward_rows16(const att_shape *s, int64_t bh, int64_t r0, float *out,
                                       float *lse, const uint16_t *qkv,
                                       const remat__att16_tiles *tl) {
  float S[BQ16 * BK16], m[BQ16], l[BQ16];
  const int64_t T = s->T, C = s->C, C3 = s->C3, hs = s->hs;
  const int64_t nr = min64(BQ16, T - r0), kend = r0 + nr;
  const uint16_t *q = qkv + at(s, bh, r0, C3), *k = qkv + at(s, bh, 0, C3) + C, *v = k + C;
  float *O = out + at(s, bh, r0, C);
  for (int64_t c0 = 0; c0 < kend; c0 += BK16) {
    const int64_t w = min64(BK16, kend - c0);
    /* S (nr,w) = scale q k^T */
    pack_channel_pairs(tl->kd, k + c0 * C3, C3, w, hs / 2, BK16);
    pairs_product(S, w, nr, w, q, C3, tl->kd, BK16, hs / 2, s->scale, false);
    online_softmax(s, bh, r0, nr, c0, w, S, m, l, O);
    /* O (nr,hs) (+)= S v */
    pack_row_pairs(tl->vc, v + c0 * C3, C3, w, hs);
    round_rows(tl->pb, BK16, S, w, nr, w);
    pairs_product(O, C, nr, hs, tl->pb, BK16, tl->vc, hs, (w + 1) / 2, 1.0f, c0 != 0);
  }
  finish_rows(s, bh, r0, nr, m, l, O, lse);
}

void remat__attention_forward_bf16(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, const remat__dropout *drop,
                                   void *work, size_t work_bytes) {
  const att_shape s = shape_of(T, C, NH, drop);
  const int nt = att16_threads(work_bytes, s.hs);
  const int64_t nq = (T + BQ16 - 1) / BQ16, items = B * NH * nq;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t it = 0; it < items; it++) {
    const remat__att16_tiles tl = att16_piece(work, s.hs);
    const int64_t bh = it / nq, qt = nq - 1 - it % nq;
    forward_rows16(&s, bh, qt * BQ16, out, lse, qkv, &tl);
  }
}

typedef struct {
  const uint16_t *qkv, *out;
  const float *dout, *lse;
  float *dqkv, *delta;
} att_bwd16;

/* delta_rows with out in bf16: the same lanes, on out widened. */
static void delta_rows16(const att_shape *s, const att_bwd16 *a, int64_t bh) {
  for (int64_t t = 0; t < s->T; t++) {
    const int64_t o = at(s, bh, t, s->C);
    const float *x = a->dout + o;
    const uint16_t *y = a->out + o;
    float lane[LANES] = {0};
    int64_t c = 0;
    for (; c + LANES <= s->hs; c += LANES)
      for (int l = 0; l < LANES; l++) lane[l] += x[c + l] * remat__bf16_float(y[c + l]);
    for (; c < s->hs; c++) lane[c % LANES] += x[c] * remat__bf16_float(y[c]);
    float sum = 0.0f;
    for (int l = 0; l < LANES; l++) sum += lane[l];
    a->delta[bh * s->T + t] = sum;
  }
}

/* A key tile's operands: k and v in pairs of channels (for q k^T, dO v^T),
 * k in pairs of keys (for dS k). */
static void pack_keys16(const att_shape *s, const att_bwd16 *a, int64_t bh, int64_t c0,
                        int64_t w, const remat__att16_tiles *tl) {
  const int64_t C3 = s->C3, hs = s->hs;
  const uint16_t *k = a->qkv + at(s, bh, c0, C3) + s->C, *v = k + s->C;
  pack_channel_pairs(tl->kd, k, C3, w, hs / 2, BK16);
  pack_channel_pairs(tl->vd, v, C3, w, hs / 2, BK16);
  pack_row_pairs(tl->kc, k, C3, w, hs);
}

/* A query tile's operands: q and dO in pairs of rows (for dS^T q,
 * P^T dO), dO rounded (for dO v^T). */
static void pack_queries16(const att_shape *s, const att_bwd16 *a, int64_t bh, int64_t r0,
                           int64_t nr, const remat__att16_tiles *tl) {
  const int64_t C = s->C, hs = s->hs;
  const float *dO = a->dout + at(s, bh, r0, C);
  pack_row_pairs(tl->qr, a->qkv + at(s, bh, r0, s->C3), s->C3, nr, hs);
  pack_row_pairs_f32(tl->dor, dO, C, nr, hs);
  round_rows(tl->dob, hs, dO, C, nr, hs);
}

/* backward_tile on bf16 operands (the tile's keys and queries packed):
 * P and dS as there, and rounded for the products: dS by rows (dsb), P and
 * dS transposed (pt, dst). */
static BF16_TARGET void backward_tile16(const att_shape *s, const att_bwd16 *a, int64_t bh,
                                        int64_t r0, int64_t nr, int64_t c0, int64_t w, float *P,
                                        float *dS, const remat__att16_tiles *tl) {
  const int64_t hs = s->hs;
  const uint16_t *q = a->qkv + at(s, bh, r0, s->C3);
  pairs_product(P, w, nr, w, q, s->C3, tl->kd, BK16, hs / 2, s->scale, false);
  pairs_product(dS, w, nr, w, tl->dob, hs, tl->vd, BK16, hs / 2, 1.0f, false);
  softmax_grad(s, a->lse, a->delta, bh, r0, nr, c0, w, P, dS);
  round_rows(tl->dsb, BK16, dS, w, nr, w);
  round_transposed(tl->pt, BQ16, P, nr, w);
  round_transposed(tl->dst, BQ16, dS, nr, w);
}

/* kv_products on bf16 operands: dv (+)= P^T dO, dk (+)= scale dS^T q. */
static BF16_TARGET void kv_products16(const att_shape *s, const att_bwd16 *a, int64_t bh,
                                      int64_t nr, int64_t c0, int64_t w,
                                      const remat__att16_tiles *tl, bool acc) {
  const int64_t C3 = s->C3, hs = s->hs;
  float *dk = a->dqkv + at(s, bh, c0, C3) + s->C, *dv = dk + s->C;
  pairs_product(dv, C3, w, hs, tl->pt, BQ16, tl->dor, hs, (nr + 1) / 2, 1.0f, acc);
  pairs_product(dk, C3, w, hs, tl->dst, BQ16, tl->qr, hs, (nr + 1) / 2, s->scale, acc);
}

/* q_product on bf16 operands: dq (+)= scale dS k. */
static BF16_TARGET void q_product16(const att_shape *s, const att_bwd16 *a, int64_t bh,
                                    int64_t r0, int64_t nr, int64_t w,
                                    const remat__att16_tiles *tl, bool acc) {
  float *dq = a->dqkv + at(s, bh, r0, s->C3);
  pairs_product(dq, s->C3, nr, s->hs, tl->dsb, BK16, tl->kc, s->hs, (w + 1) / 2, s->scale, acc);
}

/* backward_pair, backward_keys and backward_queries on bf16 operands: the
 * same tiles in the same order, each packed where it is first used. */
static void backward_pair16(const att_shape *s, const att_bwd16 *a, int64_t bh,
                            const remat__att16_tiles *tl) {
  float P[BQ16 * BK16], dS[BQ16 * BK16];
  const int64_t T = s->T;
  delta_rows16(s, a, bh);
  for (int64_t c0 = 0; c0 < T; c0 += BK16) {
    const int64_t w = min64(BK16, T - c0), first = c0 / BQ16 * BQ16;
    pack_keys16(s, a, bh, c0, w, tl);
    for (int64_t r0 = first; r0 < T; r0 += BQ16) {
      const int64_t nr = min64(BQ16, T - r0);
      pack_queries16(s, a, bh, r0, nr, tl);
      backward_tile16(s, a, bh, r0, nr, c0, w, P, dS, tl);
      kv_products16(s, a, bh, nr, c0, w, tl, r0 != first);
      q_product16(s, a, bh, r0, nr, w, tl, c0 != 0);
    }
  }
}

static void backward_keys16(const att_shape *s, const att_bwd16 *a, int64_t bh, int64_t c0,
                            const remat__att16_tiles *tl) {
  float P[BQ16 * BK16], dS[BQ16 * BK16];
  const int64_t T = s->T, w = min64(BK16, T - c0), first = c0 / BQ16 * BQ16;
  pack_keys16(s, a, bh, c0, w, tl);
  for (int64_t r0 = first; r0 < T; r0 += BQ16) {
    const int64_t nr = min64(BQ16, T - r0);
    pack_queries16(s, a, bh, r0, nr, tl);
    backward_tile16(s, a, bh, r0, nr, c0, w, P, dS, tl);
    kv_products16(s, a, bh, nr, c0, w, tl, r0 != first);
  }
}

static void backward_queries16(const att_shape *s, const att_bwd16 *a, int64_t bh, int64_t r0,
                               const remat__att16_tiles *tl) {
  float P[BQ16 * BK16], dS[BQ16 * BK16];
  const int64_t T = s->T, nr = min64(BQ16, T - r0);
  pack_queries16(s, a, bh, r0, nr, tl);
  for (int64_t c0 = 0; c0 < r0 + nr; c0 += BK16) {
    const int64_t w = min64(BK16, T - c0);
    pack_keys16(s, a, bh, c0, w, tl);
    backward_tile16(s, a, bh, r0, nr, c0, w, P, dS, tl);
    q_product16(s, a, bh, r0, nr, w, tl, c0 != 0);
  }
}

void remat__attention_backward_bf16(float *dqkv, float *delta, const float *dout,
                                    const uint16_t *qkv, const uint16_t *out, const float *lse,
                                    int64_t B, int64_t T, int64_t C, int64_t NH,
                                    const remat__dropout *drop, void *work, size_t work_bytes) {
  const att_shape s = shape_of(T, C, NH, drop);
  const att_bwd16 a = {.qkv = qkv, .out = out, .dout = dout, .lse = lse, .dqkv = dqkv,
                       .delta = delta};
  const int nt = att16_threads(work_bytes, s.hs);
  const int64_t pairs = B * NH;
  if (pairs >= nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t bh = 0; bh < pairs; bh++) {
      const remat__att16_tiles tl = att16_piece(work, s.hs);
      backward_pair16(&s, &a, bh, &tl);
    }
    return;
  }
  const int64_t nk = (T + BK16 - 1) / BK16, nq = (T + BQ16 - 1) / BQ16;
#pragma omp parallel num_threads(nt)
  {
    const remat__att16_tiles tl = att16_piece(work, s.hs);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; bh++) delta_rows16(&s, &a, bh);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < pairs * nk; it++)
      backward_keys16(&s, &a, it / nk, it % nk * BK16, &tl);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < pairs * nq; it++)
      backward_queries16(&s, &a, it / nq, (nq - 1 - it % nq) * BQ16, &tl);
  }
}

#else /* no AVX512-BF16 here: the sizes never plan for these */

void remat__attention_forward_bf16(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, const remat__dropout *drop,
                                   void *work, size_t work_bytes) {
  (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)C, (void)NH, (void)drop, (void)work;
  (void)work_bytes;
  REMAT_ASSERT(!"the bf16 attention needs AVX512-BF16");
}

void remat__attention_backward_bf16(float *dqkv, float *delta, const float *dout,
                                    const uint16_t *qkv, const uint16_t *out, const float *lse,
                                    int64_t B, int64_t T, int64_t C, int64_t NH,
                                    const remat__dropout *drop, void *work, size_t work_bytes) {
  (void)dqkv, (void)delta, (void)dout, (void)qkv, (void)out, (void)lse, (void)B, (void)T, (void)C;
  (void)NH, (void)drop, (void)work, (void)work_bytes;
  REMAT_ASSERT(!"the bf16 attention needs AVX512-BF16");
}

#endif
