/* attention_tiles.h: what the attention's fp32 tiles (attention.c) and its
 * tiles on bf16 operands (attention_bf16.c) share, so that both run the
 * same softmax arithmetic on the same shapes: a call's shape, where a
 * pair's rows start in q, k, v and out, and the elementwise part of a tile
 * (the forward's online softmax, the backward's softmax gradient), defined
 * in attention.c. Private to src/kernels.
 *
 * A pair bh is (batch row bh / NH, query head h = bh % NH); its kv head is
 * h / grp, grp = NH / NKV; a group g is (batch row g / NKV, kv head
 * g % NKV), its pairs the grp from group_pair(g). */
#ifndef REMAT_ATTENTION_TILES_H
#define REMAT_ATTENTION_TILES_H

#include <stdint.h>

#include "kernels/backend.h" /* remat__dropout */

/* Row reductions run over this many interleaved lanes (element c goes to
 * lane c % lanes, lanes combined in order): a fixed order that vectorises. */
#define REMAT__ATT_LANES 16

typedef struct remat__att_shape {
  int64_t T, NH, NKV, grp, hs;
  int64_t C;          /* NH*hs: out and dout rows */
  int64_t ldq, ldkv;  /* q (and dq) rows; k, v (and dk, dv) rows */
  float scale;        /* 1/sqrt(hs) */
  const remat__dropout *drop; /* NULL when not dropping */
  float dscale;       /* 1/(1-p) */
} att_shape;

/* The shape of a call (asserts what the kernels need of it). */
att_shape remat__att_shape_of(int64_t T, int64_t NH, int64_t NKV, int64_t hs, int64_t ldq,
                              int64_t ldkv, const remat__dropout *drop);

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Offsets of row t of pair bh: in q (and dq), at its head's channels; in k
 * and v (and dk, dv), at its kv head's; in out and dout, (B,T,C). */
static inline int64_t q_at(const att_shape *s, int64_t bh, int64_t t) {
  return (bh / s->NH * s->T + t) * s->ldq + bh % s->NH * s->hs;
}
static inline int64_t kv_at(const att_shape *s, int64_t bh, int64_t t) {
  return (bh / s->NH * s->T + t) * s->ldkv + bh % s->NH / s->grp * s->hs;
}
static inline int64_t o_at(const att_shape *s, int64_t bh, int64_t t) {
  return (bh / s->NH * s->T + t) * s->C + bh % s->NH * s->hs;
}

/* The first pair of group g. */
static inline int64_t group_pair(const att_shape *s, int64_t g) {
  return g / s->NKV * s->NH + g % s->NKV * s->grp;
}

/* The online softmax over one tile's scores S (nr,w) of pair bh, queries
 * from r0, keys from c0: per row the running maximum m and sum l, the
 * output rows O (stride C) rescaled when m grows; S left holding
 * dropout(exp(s - m)), 0 right of the diagonal. */
void remat__att_online_softmax(const att_shape *s, int64_t bh, int64_t r0, int64_t nr,
                               int64_t c0, int64_t w, float *S, float *m, float *l, float *O);
/* The output rows divided by l, and lse = m + log(l) (lse NULL: none). */
void remat__att_finish_rows(const att_shape *s, int64_t bh, int64_t r0, int64_t nr,
                            const float *m, const float *l, float *O, float *lse);
/* The elementwise part of a backward tile: P (nr,w) from the scaled scores
 * to dropout(exp(s - lse)), dS (nr,w) from dP to P * (dP - D); both 0 right
 * of the diagonal. */
void remat__att_softmax_grad(const att_shape *s, const float *lse, const float *delta,
                             int64_t bh, int64_t r0, int64_t nr, int64_t c0, int64_t w, float *P,
                             float *dS);

#endif
