/* attention_bf16.c: the causal attention of attention.c on bf16 operands,
 * with the CPU's AVX512-BF16 dot product: the same tiles, the same online
 * softmax (attention_tiles.h) and the same order of work, grouped-query
 * and GPT-2's packed qkv alike. */
#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/base.h"
#include "kernels/attention_tiles.h"
#include "kernels/kernels.h"
#include "products/sizes.h"

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

/* The q, k, v of a call on bf16 operands. */
typedef struct {
  const uint16_t *q, *k, *v;
} att_qkv16;

/* The forward's rows (attend_rows) on bf16 operands. */
static BF16_TARGET void forward_rows16(const att_shape *s, int64_t bh, int64_t r0, float *out,
                                       float *lse, const att_qkv16 *x,
                                       const remat__att16_tiles *tl) {
  float S[BQ16 * BK16], m[BQ16], l[BQ16];
  const int64_t T = s->T, C = s->C, ldq = s->ldq, ldkv = s->ldkv, hs = s->hs;
  const int64_t nr = min64(BQ16, T - r0), kend = r0 + nr;
  const uint16_t *q = x->q + q_at(s, bh, r0), *k = x->k + kv_at(s, bh, 0),
                 *v = x->v + kv_at(s, bh, 0);
  float *O = out + o_at(s, bh, r0);
  for (int64_t c0 = 0; c0 < kend; c0 += BK16) {
    const int64_t w = min64(BK16, kend - c0);
    /* S (nr,w) = scale q k^T */
    pack_channel_pairs(tl->kd, k + c0 * ldkv, ldkv, w, hs / 2, BK16);
    pairs_product(S, w, nr, w, q, ldq, tl->kd, BK16, hs / 2, s->scale, false);
    remat__att_online_softmax(s, bh, r0, nr, c0, w, S, m, l, O);
    /* O (nr,hs) (+)= S v */
    pack_row_pairs(tl->vc, v + c0 * ldkv, ldkv, w, hs);
    round_rows(tl->pb, BK16, S, w, nr, w);
    pairs_product(O, C, nr, hs, tl->pb, BK16, tl->vc, hs, (w + 1) / 2, 1.0f, c0 != 0);
  }
  remat__att_finish_rows(s, bh, r0, nr, m, l, O, lse);
}

void remat__attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v, int64_t ldq,
                                       int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                       int64_t NKV, int64_t hs, const remat__dropout *drop,
                                       void *work, size_t work_bytes) {
  const att_shape s = remat__att_shape_of(T, NH, NKV, hs, ldq, ldkv, drop);
  const att_qkv16 x = {.q = q, .k = k, .v = v};
  const int nt = att16_threads(work_bytes, hs);
  const int64_t nq = (T + BQ16 - 1) / BQ16, items = B * NH * nq;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t it = 0; it < items; it++) {
    const remat__att16_tiles tl = att16_piece(work, hs);
    const int64_t bh = it / nq, qt = nq - 1 - it % nq;
    forward_rows16(&s, bh, qt * BQ16, out, lse, &x, &tl);
  }
}

typedef struct {
  const uint16_t *q, *k, *v, *out;
  const float *dout, *lse;
  float *dq, *dk, *dv, *delta;
} att_bwd16;

/* delta_rows with out in bf16: the same lanes, on out widened. */
static void delta_rows16(const att_shape *s, const att_bwd16 *a, int64_t bh) {
  for (int64_t t = 0; t < s->T; t++) {
    const int64_t o = o_at(s, bh, t);
    const float *x = a->dout + o;
    const uint16_t *y = a->out + o;
    float lane[REMAT__ATT_LANES] = {0};
    int64_t c = 0;
    for (; c + REMAT__ATT_LANES <= s->hs; c += REMAT__ATT_LANES)
      for (int l = 0; l < REMAT__ATT_LANES; l++) lane[l] += x[c + l] * remat__bf16_float(y[c + l]);
    for (; c < s->hs; c++) lane[c % REMAT__ATT_LANES] += x[c] * remat__bf16_float(y[c]);
    float sum = 0.0f;
    for (int l = 0; l < REMAT__ATT_LANES; l++) sum += lane[l];
    a->delta[bh * s->T + t] = sum;
  }
}

/* A key tile's operands (pair bh's kv head): k and v in pairs of channels
 * (for q k^T, dO v^T), k in pairs of keys (for dS k). */
static void pack_keys16(const att_shape *s, const att_bwd16 *a, int64_t bh, int64_t c0,
                        int64_t w, const remat__att16_tiles *tl) {
  const int64_t ldkv = s->ldkv, hs = s->hs;
  const uint16_t *k = a->k + kv_at(s, bh, c0), *v = a->v + kv_at(s, bh, c0);
  pack_channel_pairs(tl->kd, k, ldkv, w, hs / 2, BK16);
  pack_channel_pairs(tl->vd, v, ldkv, w, hs / 2, BK16);
  pack_row_pairs(tl->kc, k, ldkv, w, hs);
}

/* A query tile's operands: q and dO in pairs of rows (for dS^T q,
 * P^T dO), dO rounded (for dO v^T). */
static void pack_queries16(const att_shape *s, const att_bwd16 *a, int64_t bh, int64_t r0,
                           int64_t nr, const remat__att16_tiles *tl) {
  const int64_t C = s->C, hs = s->hs;
  const float *dO = a->dout + o_at(s, bh, r0);
  pack_row_pairs(tl->qr, a->q + q_at(s, bh, r0), s->ldq, nr, hs);
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
  const uint16_t *q = a->q + q_at(s, bh, r0);
  pairs_product(P, w, nr, w, q, s->ldq, tl->kd, BK16, hs / 2, s->scale, false);
  pairs_product(dS, w, nr, w, tl->dob, hs, tl->vd, BK16, hs / 2, 1.0f, false);
  remat__att_softmax_grad(s, a->lse, a->delta, bh, r0, nr, c0, w, P, dS);
  round_rows(tl->dsb, BK16, dS, w, nr, w);
  round_transposed(tl->pt, BQ16, P, nr, w);
  round_transposed(tl->dst, BQ16, dS, nr, w);
}

/* kv_products on bf16 operands: dv (+)= P^T dO, dk (+)= scale dS^T q. */
static BF16_TARGET void kv_products16(const att_shape *s, const att_bwd16 *a, int64_t bh,
                                      int64_t nr, int64_t c0, int64_t w,
                                      const remat__att16_tiles *tl, bool acc) {
  const int64_t ldkv = s->ldkv, hs = s->hs;
  float *dk = a->dk + kv_at(s, bh, c0), *dv = a->dv + kv_at(s, bh, c0);
  pairs_product(dv, ldkv, w, hs, tl->pt, BQ16, tl->dor, hs, (nr + 1) / 2, 1.0f, acc);
  pairs_product(dk, ldkv, w, hs, tl->dst, BQ16, tl->qr, hs, (nr + 1) / 2, s->scale, acc);
}

/* q_product on bf16 operands: dq (+)= scale dS k. */
static BF16_TARGET void q_product16(const att_shape *s, const att_bwd16 *a, int64_t bh,
                                    int64_t r0, int64_t nr, int64_t w,
                                    const remat__att16_tiles *tl, bool acc) {
  float *dq = a->dq + q_at(s, bh, r0);
  pairs_product(dq, s->ldq, nr, s->hs, tl->dsb, BK16, tl->kc, s->hs, (w + 1) / 2, s->scale, acc);
}

/* backward_group, backward_keys and backward_queries on bf16 operands: the
 * same tiles in the same order, each packed where it is first used (a key
 * tile once for the group's query heads). */
static void backward_group16(const att_shape *s, const att_bwd16 *a, int64_t g,
                             const remat__att16_tiles *tl) {
  float P[BQ16 * BK16], dS[BQ16 * BK16];
  const int64_t T = s->T, bh0 = group_pair(s, g);
  for (int64_t j = 0; j < s->grp; j++) delta_rows16(s, a, bh0 + j);
  for (int64_t c0 = 0; c0 < T; c0 += BK16) {
    const int64_t w = min64(BK16, T - c0), first = c0 / BQ16 * BQ16;
    pack_keys16(s, a, bh0, c0, w, tl);
    for (int64_t bh = bh0; bh < bh0 + s->grp; bh++)
      for (int64_t r0 = first; r0 < T; r0 += BQ16) {
        const int64_t nr = min64(BQ16, T - r0);
        pack_queries16(s, a, bh, r0, nr, tl);
        backward_tile16(s, a, bh, r0, nr, c0, w, P, dS, tl);
        kv_products16(s, a, bh, nr, c0, w, tl, bh != bh0 || r0 != first);
        q_product16(s, a, bh, r0, nr, w, tl, c0 != 0);
      }
  }
}

static void backward_keys16(const att_shape *s, const att_bwd16 *a, int64_t g, int64_t c0,
                            const remat__att16_tiles *tl) {
  float P[BQ16 * BK16], dS[BQ16 * BK16];
  const int64_t T = s->T, w = min64(BK16, T - c0), first = c0 / BQ16 * BQ16;
  const int64_t bh0 = group_pair(s, g);
  pack_keys16(s, a, bh0, c0, w, tl);
  for (int64_t bh = bh0; bh < bh0 + s->grp; bh++)
    for (int64_t r0 = first; r0 < T; r0 += BQ16) {
      const int64_t nr = min64(BQ16, T - r0);
      pack_queries16(s, a, bh, r0, nr, tl);
      backward_tile16(s, a, bh, r0, nr, c0, w, P, dS, tl);
      kv_products16(s, a, bh, nr, c0, w, tl, bh != bh0 || r0 != first);
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

void remat__attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                        const float *dout, const uint16_t *q, const uint16_t *k,
                                        const uint16_t *v, const uint16_t *out, const float *lse,
                                        int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                        int64_t NH, int64_t NKV, int64_t hs,
                                        const remat__dropout *drop, void *work,
                                        size_t work_bytes) {
  const att_shape s = remat__att_shape_of(T, NH, NKV, hs, ldq, ldkv, drop);
  const att_bwd16 a = {.q = q, .k = k, .v = v, .out = out, .dout = dout, .lse = lse, .dq = dq,
                       .dk = dk, .dv = dv, .delta = delta};
  const int nt = att16_threads(work_bytes, hs);
  const int64_t groups = B * NKV, pairs = B * NH;
  if (groups >= nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t g = 0; g < groups; g++) {
      const remat__att16_tiles tl = att16_piece(work, hs);
      backward_group16(&s, &a, g, &tl);
    }
    return;
  }
  const int64_t nk = (T + BK16 - 1) / BK16, nq = (T + BQ16 - 1) / BQ16;
#pragma omp parallel num_threads(nt)
  {
    const remat__att16_tiles tl = att16_piece(work, hs);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; bh++) delta_rows16(&s, &a, bh);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < groups * nk; it++)
      backward_keys16(&s, &a, it / nk, it % nk * BK16, &tl);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < pairs * nq; it++)
      backward_queries16(&s, &a, it / nq, (nq - 1 - it % nq) * BQ16, &tl);
  }
}

#else /* no AVX512-BF16 here: the sizes never plan for these */

void remat__attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v, int64_t ldq,
                                       int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                       int64_t NKV, int64_t hs, const remat__dropout *drop,
                                       void *work, size_t work_bytes) {
  (void)out, (void)lse, (void)q, (void)k, (void)v, (void)ldq, (void)ldkv, (void)B, (void)T;
  (void)NH, (void)NKV, (void)hs, (void)drop, (void)work, (void)work_bytes;
  REMAT_ASSERT(!"the bf16 attention needs AVX512-BF16");
}

void remat__attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                        const float *dout, const uint16_t *q, const uint16_t *k,
                                        const uint16_t *v, const uint16_t *out, const float *lse,
                                        int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                        int64_t NH, int64_t NKV, int64_t hs,
                                        const remat__dropout *drop, void *work,
                                        size_t work_bytes) {
  (void)dq, (void)dk, (void)dv, (void)delta, (void)dout, (void)q, (void)k, (void)v, (void)out;
  (void)lse, (void)ldq, (void)ldkv, (void)B, (void)T, (void)NH, (void)NKV, (void)hs, (void)drop;
  (void)work, (void)work_bytes;
  REMAT_ASSERT(!"the bf16 attention needs AVX512-BF16");
}

#endif

/* GPT-2's packed qkv on bf16 operands: the general kernels with q, k, v
 * inside it, NKV = NH. */
void remat__attention_forward_bf16(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, const remat__dropout *drop,
                                   void *work, size_t work_bytes) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  remat__attention_forward_gqa_bf16(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH,
                                    NH, C / NH, drop, work, work_bytes);
}

void remat__attention_backward_bf16(float *dqkv, float *delta, const float *dout,
                                    const uint16_t *qkv, const uint16_t *out, const float *lse,
                                    int64_t B, int64_t T, int64_t C, int64_t NH,
                                    const remat__dropout *drop, void *work, size_t work_bytes) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  remat__attention_backward_gqa_bf16(dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C,
                                     qkv + 2 * C, out, lse, 3 * C, 3 * C, B, T, NH, NH, C / NH,
                                     drop, work, work_bytes);
}
