/* attention.c: causal multi-head self-attention without a T x T buffer: the
 * tiled scheme of FlashAttention-2 on the CPU, forward and backward.
 *
 * Queries are cut into tiles of rows and keys into tiles of columns; one
 * (query tile, key tile) block of the scores lives in a fixed-size buffer on
 * the thread's stack (the forward holds one, the backward two; 64 KiB at
 * most, whatever T). Every product is one single-threaded cblas_sgemm
 * (OpenBLAS's OpenMP build runs on the calling thread inside a parallel
 * region and allocates nothing there), reading q, k and v straight from
 * their rows (ldq and ldkv floats apart: GPT-2's packed qkv (B,T,3C) has
 * both 3C) and writing heads side by side.
 *
 * Grouped-query attention: NH query heads over NKV key/value heads (NKV
 * divides NH), query head h reading kv head h / (NH/NKV); GPT-2 is NKV =
 * NH, and its packed entry points call the general ones with q, k, v inside
 * qkv, which are the same tiles, the same calls and so the same bits.
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
 * operations run in a fixed order (key tiles left to right for a query row;
 * for a key row, the group's query heads in order, each with its query
 * tiles top to bottom), whatever the schedule, so the results are bitwise
 * reproducible and do not depend on how the work is split; no atomics. The
 * forward's items are (pair, query tile); the backward's are groups (a
 * batch row and a kv head, with its NH/NKV query heads), or, with fewer
 * groups than threads, two passes (a group's key tiles for dk and dv, then
 * a pair's query tiles for dq) that repeat the same tile arithmetic, so
 * both ways give the same bits.
 *
 * The same tiles on bf16 operands are in attention_bf16.c; what the two
 * share (the shape, the offsets, the softmax of a tile) is declared in
 * attention_tiles.h and defined here. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>

#include "base/base.h"
#include "kernels/attention_tiles.h"
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
#define LANES REMAT__ATT_LANES

static int as_blasint(int64_t x) {
  REMAT_ASSERT(x >= 0 && x <= INT_MAX);
  return (int)x;
}

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

att_shape remat__att_shape_of(int64_t T, int64_t NH, int64_t NKV, int64_t hs, int64_t ldq,
                              int64_t ldkv, const remat__dropout *drop) {
  REMAT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && T > 0);
  REMAT_ASSERT(ldq >= NH * hs && ldkv >= NKV * hs);
  const bool dropping = drop && drop->p > 0.0f;
  if (dropping) REMAT_ASSERT(drop->p < 1.0f);
  return (att_shape){.T = T, .NH = NH, .NKV = NKV, .grp = NH / NKV, .hs = hs, .C = NH * hs,
                     .ldq = ldq, .ldkv = ldkv, .scale = 1.0f / sqrtf((float)hs),
                     .drop = dropping ? drop : NULL,
                     .dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f};
}

/* Philox index of element (t, c) of pair bh (b NH + h), numbered among
 * the whole model's heads. */
static uint64_t drop_index(const att_shape *s, int64_t bh, int64_t t, int64_t c) {
  if (s->drop->heads) bh = bh / s->NH * (int64_t)s->drop->heads + s->drop->head0 + bh % s->NH;
  return (uint64_t)((bh * s->T + t) * s->T + c);
}

/* ------------------------------------------------------------- forward */

/* The online softmax over one tile's scores S (nr,w) of pair bh, queries
 * from r0, keys from c0: per row the running maximum m and sum l, the
 * output rows O (stride C) rescaled when m grows; S left holding
 * dropout(exp(s - m)), 0 right of the diagonal. */
void remat__att_online_softmax(const att_shape *s, int64_t bh, int64_t r0, int64_t nr,
                               int64_t c0, int64_t w, float *S, float *m, float *l, float *O) {
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
void remat__att_finish_rows(const att_shape *s, int64_t bh, int64_t r0, int64_t nr,
                            const float *m, const float *l, float *O, float *lse) {
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
    remat__att_online_softmax(s, bh, r0, nr, c0, w, S, m, l, O);
    /* O (nr,hs) (+)= S (nr,w) @ v[c0..c0+w) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(nr), as_blasint(hs),
                as_blasint(w), 1.0f, S, as_blasint(w), v + c0 * ldkv, as_blasint(ldkv),
                c0 == 0 ? 0.0f : 1.0f, O, as_blasint(s->C));
  }
  remat__att_finish_rows(s, bh, r0, nr, m, l, O, lse);
}

void remat__attention_forward_gqa(float *out, float *lse, const float *q, const float *k,
                                  const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                                  int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                  const remat__dropout *drop) {
  const att_shape s = remat__att_shape_of(T, NH, NKV, hs, ldq, ldkv, drop);
  const int64_t nq = (T + ATT_BQ - 1) / ATT_BQ, items = B * NH * nq;
  /* Pair by pair, each pair's query tiles longest (last) first, handed out
   * dynamically: the schedule balances the triangle and changes no bits. */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t it = 0; it < items; it++) {
    const int64_t bh = it / nq, r0 = (nq - 1 - it % nq) * ATT_BQ, kv = kv_at(&s, bh, 0);
    attend_rows(&s, bh, r0, min64(ATT_BQ, T - r0), q + q_at(&s, bh, r0), ldq, k + kv, v + kv,
                ldkv, out + o_at(&s, bh, r0), lse);
  }
}

void remat__attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                              int64_t C, int64_t NH, const remat__dropout *drop) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  remat__attention_forward_gqa(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH,
                               C / NH, drop);
}

void remat__attention_decode_gqa(float *out, const float *q, int64_t ldq, const float *k,
                                 const float *v, int64_t ldkv, int64_t n, int64_t pos,
                                 int64_t NH, int64_t NKV, int64_t hs) {
  REMAT_ASSERT(n > 0 && pos >= 0);
  const att_shape s = remat__att_shape_of(pos + n, NH, NKV, hs, ldq, ldkv, NULL);
  const int64_t nq = (n + ATT_BQ - 1) / ATT_BQ, items = NH * nq, C = s.C;
  /* Items are (head, tile of new rows); with one row, the heads. */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t it = 0; it < items; it++) {
    const int64_t h = it / nq, r = (nq - 1 - it % nq) * ATT_BQ, kv = h / s.grp * hs;
    attend_rows(&s, h, pos + r, min64(ATT_BQ, n - r), q + r * ldq + h * hs, ldq, k + kv, v + kv,
                ldkv, out + r * C + h * hs, NULL);
  }
}

void remat__attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                             const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                             int64_t NH) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  remat__attention_decode_gqa(out, q, ldq, k, v, ldkv, n, pos, NH, NH, C / NH);
}

/* ------------------------------------------------------------ backward */

typedef struct {
  const float *q, *k, *v, *dout, *out, *lse;
  float *dq, *dk, *dv, *delta;
} att_bwd;

/* delta[bh*T + t] = rowsum(dO * O) over pair bh's head, rows t of [0, T). */
static void delta_rows(const att_shape *s, const att_bwd *a, int64_t bh) {
  for (int64_t t = 0; t < s->T; t++) {
    const int64_t o = o_at(s, bh, t);
    a->delta[bh * s->T + t] = row_dot(a->dout + o, a->out + o, s->hs);
  }
}

/* The elementwise part of a backward tile: P (nr,w) from the scaled scores
 * to dropout(exp(s - lse)), dS (nr,w) from dP to P * (dP - D); both 0 right
 * of the diagonal. */
void remat__att_softmax_grad(const att_shape *s, const float *lse, const float *delta,
                             int64_t bh, int64_t r0, int64_t nr, int64_t c0, int64_t w, float *P,
                             float *dS) {
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
  const int64_t hs = s->hs;
  const float *q = a->q + q_at(s, bh, r0), *k = a->k + kv_at(s, bh, c0),
              *v = a->v + kv_at(s, bh, c0), *dO = a->dout + o_at(s, bh, r0);
  /* P (nr,w) = scale q k^T (then exp(. - lse));  dS (nr,w) = dO v^T (then the rest) */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
              as_blasint(hs), s->scale, q, as_blasint(s->ldq), k, as_blasint(s->ldkv), 0.0f, P,
              as_blasint(w));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blasint(nr), as_blasint(w),
              as_blasint(hs), 1.0f, dO, as_blasint(s->C), v, as_blasint(s->ldkv), 0.0f, dS,
              as_blasint(w));
  remat__att_softmax_grad(s, a->lse, a->delta, bh, r0, nr, c0, w, P, dS);
}

/* dv, dk of keys [c0, c0+w) (of pair bh's kv head) (+)= dropout(P)^T dO,
 * scale dS^T q over queries [r0, r0+nr); beta 0 for the group's first. */
static void kv_products(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0,
                        int64_t nr, int64_t c0, int64_t w, const float *P, const float *dS,
                        float beta) {
  const int64_t hs = s->hs, ldkv = s->ldkv;
  const float *q = a->q + q_at(s, bh, r0), *dO = a->dout + o_at(s, bh, r0);
  float *dk = a->dk + kv_at(s, bh, c0), *dv = a->dv + kv_at(s, bh, c0);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blasint(w), as_blasint(hs),
              as_blasint(nr), 1.0f, P, as_blasint(w), dO, as_blasint(s->C), beta, dv,
              as_blasint(ldkv));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blasint(w), as_blasint(hs),
              as_blasint(nr), s->scale, dS, as_blasint(w), q, as_blasint(s->ldq), beta, dk,
              as_blasint(ldkv));
}

/* dq of queries [r0, r0+nr) (+)= scale dS k over keys [c0, c0+w); beta 0
 * for the first key tile. */
static void q_product(const att_shape *s, const att_bwd *a, int64_t bh, int64_t r0, int64_t nr,
                      int64_t c0, int64_t w, const float *dS, float beta) {
  const float *k = a->k + kv_at(s, bh, c0);
  float *dq = a->dq + q_at(s, bh, r0);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blasint(nr), as_blasint(s->hs),
              as_blasint(w), s->scale, dS, as_blasint(w), k, as_blasint(s->ldkv), beta, dq,
              as_blasint(s->ldq));
}

/* First query tile that sees key c0: the one holding row c0. */
static int64_t first_query_tile(int64_t c0) { return c0 / ATT_BQB * ATT_BQB; }

/* Everything of group g in one pass: key tiles left to right, each with
 * the group's query heads in order and their query tiles top to bottom. */
static void backward_group(const att_shape *s, const att_bwd *a, int64_t g) {
  float P[ATT_BQB * ATT_BKB], dS[ATT_BQB * ATT_BKB];
  const int64_t T = s->T, bh0 = group_pair(s, g);
  for (int64_t j = 0; j < s->grp; j++) delta_rows(s, a, bh0 + j);
  for (int64_t c0 = 0; c0 < T; c0 += ATT_BKB) {
    const int64_t w = min64(ATT_BKB, T - c0), first = first_query_tile(c0);
    for (int64_t bh = bh0; bh < bh0 + s->grp; bh++)
      for (int64_t r0 = first; r0 < T; r0 += ATT_BQB) {
        const int64_t nr = min64(ATT_BQB, T - r0);
        backward_tile(s, a, bh, r0, nr, c0, w, P, dS);
        kv_products(s, a, bh, r0, nr, c0, w, P, dS, bh == bh0 && r0 == first ? 0.0f : 1.0f);
        q_product(s, a, bh, r0, nr, c0, w, dS, c0 == 0 ? 0.0f : 1.0f);
      }
  }
}

/* dk, dv of the keys [c0, c0+ATT_BKB) of group g (first of two passes). */
static void backward_keys(const att_shape *s, const att_bwd *a, int64_t g, int64_t c0) {
  float P[ATT_BQB * ATT_BKB], dS[ATT_BQB * ATT_BKB];
  const int64_t T = s->T, w = min64(ATT_BKB, T - c0), first = first_query_tile(c0);
  const int64_t bh0 = group_pair(s, g);
  for (int64_t bh = bh0; bh < bh0 + s->grp; bh++)
    for (int64_t r0 = first; r0 < T; r0 += ATT_BQB) {
      const int64_t nr = min64(ATT_BQB, T - r0);
      backward_tile(s, a, bh, r0, nr, c0, w, P, dS);
      kv_products(s, a, bh, r0, nr, c0, w, P, dS, bh == bh0 && r0 == first ? 0.0f : 1.0f);
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

void remat__attention_backward_gqa(float *dq, float *dk, float *dv, float *delta,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse,
                                   int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                   int64_t NKV, int64_t hs, const remat__dropout *drop) {
  const att_shape s = remat__att_shape_of(T, NH, NKV, hs, ldq, ldkv, drop);
  const att_bwd a = {.q = q, .k = k, .v = v, .dout = dout, .out = out, .lse = lse, .dq = dq,
                     .dk = dk, .dv = dv, .delta = delta};
  const int64_t groups = B * NKV, pairs = B * NH;
  if (groups >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; g++) backward_group(&s, &a, g);
    return;
  }
  /* Too few groups to keep every thread busy: split each group's keys,
   * then each pair's queries. Each tile is rebuilt twice, once per pass. */
  const int64_t nk = (T + ATT_BKB - 1) / ATT_BKB, nq = (T + ATT_BQB - 1) / ATT_BQB;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; bh++) delta_rows(&s, &a, bh);
    /* key tiles first to last (longest first), then query tiles last to
     * first; the two passes write disjoint parts of dq, dk, dv, so no
     * barrier */
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < groups * nk; it++)
      backward_keys(&s, &a, it / nk, it % nk * ATT_BKB);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < pairs * nq; it++)
      backward_queries(&s, &a, it / nq, (nq - 1 - it % nq) * ATT_BQB);
  }
}

void remat__attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                               const float *out, const float *lse, int64_t B, int64_t T,
                               int64_t C, int64_t NH, const remat__dropout *drop) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  remat__attention_backward_gqa(dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C,
                                qkv + 2 * C, out, lse, 3 * C, 3 * C, B, T, NH, NH, C / NH, drop);
}
