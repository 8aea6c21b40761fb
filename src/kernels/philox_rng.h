/* philox_rng.h: the one place that turns (seed, step, micro, layer, site, i)
 * into dropout uniforms, shared by dropout.c and attention.c so the residual
 * sites, remat__dropout_keep and the attention kernels' on-the-fly masks can
 * never disagree. Private to src/kernels. The layout is documented in
 * kernels.h: Philox4x32-10, one call gives the 4 uniforms of elements
 * 4k .. 4k+3. */
#ifndef REMAT_PHILOX_RNG_H
#define REMAT_PHILOX_RNG_H

#include <Random123/philox.h>

#include "kernels/kernels.h"

/* The 4 raw words for elements 4*group .. 4*group+3 of one dropout site. */
static inline philox4x32_ctr_t remat__drop_words(const remat__dropout *d, uint64_t group) {
  philox4x32_key_t key = {{(uint32_t)d->seed, (uint32_t)(d->seed >> 32)}};
  philox4x32_ctr_t ctr = {{(uint32_t)group, d->micro, (d->layer << 4) | d->site, d->step}};
  return philox4x32(ctr, key);
}

/* keep iff u >= p with u = (word >> 8) * 2^-24; exact in float (24 bits). */
static inline int remat__drop_keep_word(uint32_t word, float p) {
  return (float)(word >> 8) * 0x1p-24f >= p;
}

/* Multiplier of element i of a site with drop probability p > 0:
 * 0 or scale = 1/(1-p). Per element (one Philox call each); row loops that
 * walk consecutive i use remat__drop_row instead. */
static inline float remat__drop_mult(const remat__dropout *d, uint64_t i, float scale) {
  philox4x32_ctr_t r = remat__drop_words(d, i / 4);
  return remat__drop_keep_word(r.v[i % 4], d->p) ? scale : 0.0f;
}

/* dst[j] = src[j] * mult(i0 + j) for j < n: the dropout of a contiguous run
 * of elements starting at flat index i0, one Philox call per 4 elements.
 * dst may equal src. */
static inline void remat__drop_row(float *dst, const float *src, int64_t n, uint64_t i0,
                                   const remat__dropout *d, float scale) {
  int64_t j = 0;
  while (j < n) {
    uint64_t i = i0 + (uint64_t)j;
    philox4x32_ctr_t r = remat__drop_words(d, i / 4);
    for (unsigned w = (unsigned)(i % 4); w < 4 && j < n; w++, j++)
      dst[j] = remat__drop_keep_word(r.v[w], d->p) ? src[j] * scale : 0.0f;
  }
}

#endif
