/* dropout.c: counter-based dropout (masks are recomputed, never stored) and
 * the GPT-2 parameter initialisation, both from Random123's Philox4x32-10.
 * Every result is a pure function of its counters, so it is independent of
 * the thread count and of the order in which elements are visited. */
#include <math.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/philox_rng.h"

bool remat__dropout_keep(const remat__dropout *d, uint64_t i) {
  if (!d || d->p <= 0.0f) return true;
  philox4x32_ctr_t r = remat__drop_words(d, i / 4);
  return remat__drop_keep_word(r.v[i % 4], d->p);
}

/* Elements are processed in blocks of 4096 (a multiple of 4, so a Philox
 * call never straddles two threads); the result does not depend on the
 * partition anyway. */
void remat__dropout_apply(float *out, const float *inp, size_t n, const remat__dropout *d) {
  if (!d || d->p <= 0.0f) {
    if (out != inp) {
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i++) out[i] = inp[i];
    }
    return;
  }
  REMAT_ASSERT(d->p < 1.0f);
  const float scale = 1.0f / (1.0f - d->p);
  const size_t blk = 4096, nblk = (n + blk - 1) / blk;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblk; b++) {
    size_t i0 = b * blk, len = n - i0 < blk ? n - i0 : blk;
    remat__drop_row(out + i0, inp + i0, (int64_t)len, (uint64_t)i0 + d->first, d, scale);
  }
}

/* Box-Muller: the 4 words of counter {k lo, k hi, tensor, 'INIT'} give the
 * normals of elements 4k .. 4k+3 (two pairs). u1 in (0, 1] so log(u1) is
 * finite; computed in double, rounded once to float. x receives elements
 * first .. first+n-1 of the tensor's stream, so a slice of a tensor (a
 * pipeline stage's blocks) gets the values the whole tensor would. */
void remat__init_normal(float *x, size_t first, size_t n, float std, uint64_t seed,
                        uint32_t tensor) {
  if (n == 0) return;
  const size_t g0 = first / 4, g1 = (first + n - 1) / 4 + 1;
  philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
#pragma omp parallel for schedule(static)
  for (size_t g = g0; g < g1; g++) {
    philox4x32_ctr_t ctr = {{(uint32_t)g, (uint32_t)((uint64_t)g >> 32), tensor, 0x494e4954u}};
    philox4x32_ctr_t r = philox4x32(ctr, key);
    double z[4];
    for (int pair = 0; pair < 2; pair++) {
      double u1 = ((double)r.v[2 * pair] + 1.0) * 0x1p-32;
      double u2 = (double)r.v[2 * pair + 1] * 0x1p-32;
      double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586476925 * u2;
      z[2 * pair] = rad * cos(ang);
      z[2 * pair + 1] = rad * sin(ang);
    }
    for (size_t j = 0; j < 4; j++) {
      size_t e = 4 * g + j;
      if (e >= first && e < first + n) x[e - first] = (float)(z[j] * (double)std);
    }
  }
}
