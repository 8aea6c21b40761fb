/* llama.c: forward and backward of the layers the Llama family has and
 * GPT-2 has not: RMSNorm, the SwiGLU gate of the MLP, and the rotary
 * position embedding of queries and keys, each in fp32 and on bf16
 * operands (fp32 arithmetic inside, every bf16 output rounded once, as
 * remat__bf16_round rounds). Contracts in kernels.h; the loops are OpenMP
 * with a static schedule, as in layers.c, and exp comes from vec_math.h so
 * the pointwise loops vectorise.
 *
 * Determinism: every output element is produced by one thread in a fixed
 * order. RMSNorm's dweight is a column sum, parallelised over column blocks
 * with each thread walking all rows in order (layernorm's way, layers.c), so
 * its bits do not depend on the thread count; no other output of this file
 * is a sum over threads' shares. No kernel allocates: the rotary embedding's
 * cos and sin live in a small table on each thread's stack. */
#include <math.h>
#include <omp.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/vec_math.h"

/* Columns per block in the column-sum loop, as in layers.c. */
#define COLBLK 64

/* ------------------------------------------------------------ rmsnorm */

/* A row's sum of squares in double over LANES interleaved partial sums
 * (element c goes to lane c % LANES), added in lane order: a fixed order,
 * so deterministic, and vectorisable (layers.c's sum_lanes). */
#define LANES 8

static double sumsq_lanes(const float *x, int64_t n) {
  double lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += (double)x[c + l] * (double)x[c + l];
  for (; c < n; c++) lane[c % LANES] += (double)x[c] * (double)x[c];
  double s = 0.0;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return s;
}

/* 1 / sqrt(mean(x^2) + eps), the mean in double, rounded to float once:
 * closer to the exact value than a float accumulation for wide rows, as
 * layernorm's statistics are. */
static inline float row_rstd(const float *x, int64_t C, float eps) {
  return (float)(1.0 / sqrt(sumsq_lanes(x, C) / (double)C + (double)eps));
}

void remat__rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                            int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *x = inp + n * C;
    const float r = row_rstd(x, C, eps);
    float *o = out + n * C;
    for (int64_t c = 0; c < C; c++) o[c] = x[c] * r * weight[c];
    rstd[n] = r;
  }
}

void remat__rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp,
                                 const float *weight, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *x = inp + n * C;
    const float r = row_rstd(x, C, eps);
    uint16_t *o = out + n * C;
    for (int64_t c = 0; c < C; c++) o[c] = remat__bf16_round(x[c] * r * weight[c]);
    rstd[n] = r;
  }
}

/* With xhat = x rstd and g = dout * weight (y = xhat * weight):
 *   dx = rstd (g - xhat mean(g xhat))   (accumulated into dinp)
 *   dweight += sum_n dout xhat          (column sums, in row order). */
void remat__rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int64_t N, int64_t C) {
  const int64_t nblk = dweight ? (C + COLBLK - 1) / COLBLK : 0, rows = dinp ? N : 0;
  /* rows (dinp) and column blocks (dweight) write different outputs: one
   * parallel region, no barrier between the two loops */
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < rows; n++) {
      const float *x = inp + n * C, *d = dout + n * C;
      const float r = rstd[n];
      double sgx = 0.0;
      for (int64_t c = 0; c < C; c++) sgx += (double)(d[c] * weight[c]) * (double)(x[c] * r);
      const float mgx = (float)(sgx / (double)C);
      float *dx = dinp + n * C;
      for (int64_t c = 0; c < C; c++) dx[c] += r * (d[c] * weight[c] - (x[c] * r) * mgx);
    }
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t c0 = blk * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
      float sw[COLBLK]; /* this block's sums over rows, in row order */
      for (int64_t c = c0; c < c1; c++) sw[c - c0] = 0.0f;
      for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *d = dout + n * C;
        const float r = rstd[n];
        for (int64_t c = c0; c < c1; c++) sw[c - c0] += d[c] * (x[c] * r);
      }
      for (int64_t c = c0; c < c1; c++) dweight[c] += sw[c - c0];
    }
  }
}

/* ------------------------------------------------------------- swiglu */

/* e = exp(-x), with -x capped at 80 so that e, 1 + e and the results stay
 * normal floats (gelu_e's cap, layers.c); past it silu(x) is below 1e-34 |x|
 * either way. */
static inline float silu_e(float x) { return remat__exp(-x < 80.0f ? -x : 80.0f); }

/* silu(x) = x / (1 + exp(-x)) = x sigmoid(x) */
static inline float silu(float x) { return x / (1.0f + silu_e(x)); }

/* out = silu(a) b. With s = sigmoid(a) = 1 / (1 + e) and 1 - s = e s:
 *   d out / d a = b s (1 + a (1 - s)),   d out / d b = silu(a),
 * db uses the forward's own silu(a), so it is the forward's factor bit for
 * bit. */
static inline void swiglu_grad(float a, float b, float dout, float *da, float *db) {
  const float e = silu_e(a), s = 1.0f / (1.0f + e);
  *da = dout * b * (s * (1.0f + a * (e * s)));
  *db = dout * (a / (1.0f + e));
}

void remat__swiglu_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = silu(a[i]) * b[i];
}

void remat__swiglu_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    out[i] = remat__bf16_round(silu(remat__bf16_float(a[i])) * remat__bf16_float(b[i]));
}

void remat__swiglu_backward(float *da, float *db, const float *a, const float *b,
                            const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float ga, gb;
    swiglu_grad(a[i], b[i], dout[i], &ga, &gb);
    da[i] = ga;
    db[i] = gb;
  }
}

void remat__swiglu_backward_bf16(uint16_t *da, uint16_t *db, const uint16_t *a,
                                 const uint16_t *b, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float ga, gb;
    swiglu_grad(remat__bf16_float(a[i]), remat__bf16_float(b[i]), dout[i], &ga, &gb);
    da[i] = remat__bf16_round(ga);
    db[i] = remat__bf16_round(gb);
  }
}

/* --------------------------------------------------------------- rope */

/* Pairs whose cos and sin a thread holds at once (2 KiB of stack): head
 * sizes up to 2 * ROPE_PAIRS are one piece, larger ones are rotated in
 * pieces of this many pairs. */
#define ROPE_PAIRS 256

/* cos and sign * sin of the angles of pairs i0 .. i0 + n - 1 at position
 * pos: angle = pos theta^(-2i / hs), the power, the product, cos and sin in
 * double, each rounded to float once (the float angle of llama2.c's run.c
 * loses the low bits of pos * freq at long positions; this does not).
 * sign -1 gives the transpose's table: sin is odd, so -(float)sin(a) is
 * (float)sin(-a) exactly. */
static void rope_table(float *cs, float *sn, int64_t pos, int64_t i0, int64_t n, int64_t hs,
                       double theta, float sign) {
  for (int64_t i = 0; i < n; i++) {
    const double a = (double)pos * pow(theta, -(double)(2 * (i0 + i)) / (double)hs);
    cs[i] = (float)cos(a);
    sn[i] = sign * (float)sin(a);
  }
}

/* (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos) on n adjacent pairs. */
static inline void rotate_f32(float *x, const float *cs, const float *sn, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * cs[i] - x1 * sn[i];
    x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
  }
}

static inline void rotate_bf16(uint16_t *x, const float *cs, const float *sn, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const float x0 = remat__bf16_float(x[2 * i]), x1 = remat__bf16_float(x[2 * i + 1]);
    x[2 * i] = remat__bf16_round(x0 * cs[i] - x1 * sn[i]);
    x[2 * i + 1] = remat__bf16_round(x0 * sn[i] + x1 * cs[i]);
  }
}

/* The rows of every (b, t), in place, x fp32 or bf16. Rows are taken in
 * (t, b) order so that a thread's share of the static schedule is mostly
 * runs of one position: it computes a position's table once for all the
 * batch's rows there (and all heads of a row), not once per row. */
static void rope(void *x, bool bf16, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                 int64_t hs, int64_t pos0, double theta, float sign) {
  REMAT_ASSERT(hs > 0 && hs % 2 == 0 && ld >= nheads * hs && pos0 >= 0 && theta > 0.0);
  const int64_t half = hs / 2;
  const bool whole = half <= ROPE_PAIRS; /* the table holds a row's pairs */
#pragma omp parallel
  {
    float cs[ROPE_PAIRS], sn[ROPE_PAIRS];
    int64_t held = -1; /* the position whose table cs, sn hold (whole only) */
#pragma omp for schedule(static)
    for (int64_t k = 0; k < T * B; k++) {
      const int64_t t = k / B, b = k % B, pos = pos0 + t, row = (b * T + t) * ld;
      for (int64_t i0 = 0; i0 < half; i0 += ROPE_PAIRS) {
        const int64_t n = half - i0 < ROPE_PAIRS ? half - i0 : ROPE_PAIRS;
        if (!whole || held != pos) rope_table(cs, sn, pos, i0, n, hs, theta, sign);
        held = pos;
        for (int64_t h = 0; h < nheads; h++) {
          const int64_t at = row + h * hs + 2 * i0;
          if (bf16)
            rotate_bf16((uint16_t *)x + at, cs, sn, n);
          else
            rotate_f32((float *)x + at, cs, sn, n);
        }
      }
    }
  }
}

void remat__rope_forward(float *x, int64_t ld, int64_t B, int64_t T, int64_t nheads, int64_t hs,
                         int64_t pos0, double theta) {
  rope(x, false, ld, B, T, nheads, hs, pos0, theta, 1.0f);
}

void remat__rope_backward(float *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                          int64_t hs, int64_t pos0, double theta) {
  rope(dx, false, ld, B, T, nheads, hs, pos0, theta, -1.0f);
}

void remat__rope_forward_bf16(uint16_t *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                              int64_t hs, int64_t pos0, double theta) {
  rope(x, true, ld, B, T, nheads, hs, pos0, theta, 1.0f);
}

void remat__rope_backward_bf16(uint16_t *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                               int64_t hs, int64_t pos0, double theta) {
  rope(dx, true, ld, B, T, nheads, hs, pos0, theta, -1.0f);
}
