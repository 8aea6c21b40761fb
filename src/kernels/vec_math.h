/* vec_math.h: exp and sqrt written so that GCC vectorises the loops that
 * call them. The build keeps -fmath-errno (the C default), under which every
 * libm call is a scalar call that blocks vectorisation; these use only
 * arithmetic and bit operations. Private to src/kernels. */
#ifndef REMAT_VEC_MATH_H
#define REMAT_VEC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) for x in [-87, 88] (clamped to it): Cephes' expf, range reduction
 * x = n ln2 + r with |r| <= ln2/2, degree-7 polynomial, then 2^n from the
 * exponent bits. Within 2 ulp of expf. Defined for every input: -inf and
 * +inf clamp like any value out of range (exp(-87), exp(88)); NaN gives NaN.
 * The clamps are written so that NaN fails both comparisons and takes the
 * bound, so it never reaches the float-to-int conversion (undefined for
 * NaN); the final select restores it. Both are single vector instructions. */
static inline float remat__exp(float x) {
  const float in = x;
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  /* n = round(x log2 e) by the 1.5 * 2^23 trick (|x log2 e| < 2^22) */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  /* n in [-126, 127]: n + 127 in [1, 254], a normal power of 2 */
  uint32_t e = (uint32_t)((int32_t)n + 127) << 23;
  float two_n;
  memcpy(&two_n, &e, sizeof two_n);
  float y = p * two_n;
  return in == in ? y : in;
}

/* sqrt(x) for finite x >= 0. With -fno-math-errno sqrtf is a single
 * instruction that vectorises; otherwise 1/sqrt is refined by Newton steps
 * in double from a bit-level first guess (relative error < 1e-20 after 4
 * steps) and the product x / sqrt(x) rounded once to float, which equals
 * sqrtf except possibly in the last bit. */
static inline float remat__sqrt_nonneg(float x) {
#ifdef __NO_MATH_ERRNO__
  return sqrtf(x);
#else
  double d = x;
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  bits = 0x5fe6eb50c7b537a9ull - (bits >> 1);
  double y;
  memcpy(&y, &bits, sizeof y);
  y = y * (1.5 - 0.5 * d * y * y); /* unrolled: a loop here stops the */
  y = y * (1.5 - 0.5 * d * y * y); /* caller's loop from vectorising */
  y = y * (1.5 - 0.5 * d * y * y);
  y = y * (1.5 - 0.5 * d * y * y);
  /* x == 0: y stays finite and the products are evaluated left to right as
   * ((0.5 d) y) y = 0, so the result is 0 without a branch */
  return (float)(d * y);
#endif
}

#endif
