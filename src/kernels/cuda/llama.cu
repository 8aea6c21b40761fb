/* llama.cu: the CUDA backend's layers of the Llama family, behind the
 * plain C functions of cuda_llama.h: RMSNorm, the SwiGLU gate and the
 * rotary embedding (fp32 and on bf16 operands, llama.c's arithmetic), and
 * the fp32 grouped-query attention (attention.cu's scheme with NH query
 * heads over NKV kv heads). Written to the contracts of kernels/kernels.h,
 * compiled with nvcc, and NOT YET RUN ON A GPU (docs/cuda.md).
 *
 * Rules the kernels keep (kernels.cu's):
 * - Deterministic, no atomics: every output has one thread that adds its
 *   terms in index order; column sums walk the rows in order.
 * - Where llama.c fixes the bits, the same operations in the same order
 *   and precision (built with -fmad=false, as the CPU build contracts no
 *   multiply-add): RMSNorm's statistics (double, 8 lanes) and its column
 *   sums; SwiGLU with vec_math.h's remat__exp, ported operation for
 *   operation; every bf16 variant the fp32 op rounded once, to nearest
 *   even. The rotary embedding computes its angle, cos and sin in double as
 *   llama.c does, with the device's pow, cos and sin (which may differ from
 *   glibc's in the last bit of the double; rarely that moves a float).
 * - The attention is attention_rows.cuh's kernels on fp32 operands (device
 *   expf and logf, one key at a time with an online softmax); attention.cu's
 *   packed MHA ops are these with NKV = NH. Head size at most HS_MAX. */
#include "attention_rows.cuh"
#include "cuda_llama.h"

/* ------------------------------------------------------------- bf16 */

/* Element stores for kernels written once for float and bf16 rows (the
 * loads, widen and load, are attention_rows.cuh's). */
__device__ static inline void store(float *p, float v) { *p = v; }
__device__ static inline void store(uint16_t *p, float v) { *p = round16(v); }

/* ---------------------------------------------------------- rmsnorm */

/* llama.c's row_rstd: the sum of squares in double over 8 lanes (element c
 * in lane c % 8), the lanes in order, 1 / sqrt(mean + eps) rounded once. */
__device__ static float row_rstd(const float *x, int64_t C, float eps) {
  double lane[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + LANES <= C; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += (double)x[c + l] * (double)x[c + l];
  for (; c < C; c++) lane[c % LANES] += (double)x[c] * (double)x[c];
  double s = 0.0;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return (float)(1.0 / sqrt(s / (double)C + (double)eps));
}

__global__ void k_rms_rstd(float *rstd, const float *inp, int64_t N, int64_t C, float eps) {
  FOR_EACH(n, (size_t)N) rstd[n] = row_rstd(inp + (int64_t)n * C, C, eps);
}

/* out = (x rstd) weight, float or rounded to bf16. */
template <typename O>
__global__ void k_rms_out(O *out, const float *rstd, const float *inp, const float *weight,
                          int64_t N, int64_t C) {
  FOR_EACH(i, (size_t)(N * C))
    store(&out[i], inp[i] * rstd[(int64_t)i / C] * weight[(int64_t)i % C]);
}

template <typename O>
static void rms_forward(O *out, float *rstd, const float *inp, const float *weight, int64_t N,
                        int64_t C, float eps) {
  if (N <= 0 || C <= 0) return;
  k_rms_rstd<<<grid_for((size_t)N, 64), 64>>>(rstd, inp, N, C, eps);
  LAUNCHED();
  k_rms_out<O><<<grid_for((size_t)(N * C), 256), 256>>>(out, rstd, inp, weight, N, C);
  done();
}

void remat__cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                               int64_t N, int64_t C, float eps) {
  rms_forward(out, rstd, inp, weight, N, C, eps);
}

void remat__cu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp,
                                    const float *weight, int64_t N, int64_t C, float eps) {
  rms_forward(out, rstd, inp, weight, N, C, eps);
}

/* dinp[n] += rstd (g - xhat mean(g xhat)), g = dout weight, xhat = x rstd:
 * one thread per row, the sum in double in column order (llama.c). */
__global__ void k_rms_dinp(float *dinp, const float *dout, const float *inp, const float *weight,
                           const float *rstd, int64_t N, int64_t C) {
  FOR_EACH(n, (size_t)N) {
    const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
    const float r = rstd[n];
    double sgx = 0.0;
    for (int64_t c = 0; c < C; c++) sgx += (double)(d[c] * weight[c]) * (double)(x[c] * r);
    const float mgx = (float)(sgx / (double)C);
    float *dx = dinp + (int64_t)n * C;
    for (int64_t c = 0; c < C; c++) dx[c] += r * (d[c] * weight[c] - (x[c] * r) * mgx);
  }
}

/* dweight[c] += sum_n dout xhat, from zero in row order in float: llama.c's
 * column blocks, the same bits. One thread per column. */
__global__ void k_rms_dw(float *dweight, const float *dout, const float *inp, const float *rstd,
                         int64_t N, int64_t C) {
  FOR_EACH(c, (size_t)C) {
    float sw = 0.0f;
    for (int64_t n = 0; n < N; n++)
      sw += dout[n * C + (int64_t)c] * (inp[n * C + (int64_t)c] * rstd[n]);
    dweight[c] += sw;
  }
}

void remat__cu_rmsnorm_backward(float *dinp, float *dweight, const float *dout,
                                const float *inp, const float *weight, const float *rstd,
                                int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (dinp) k_rms_dinp<<<grid_for((size_t)N, 64), 64>>>(dinp, dout, inp, weight, rstd, N, C);
  LAUNCHED();
  if (dweight) k_rms_dw<<<grid_for((size_t)C, 64), 64>>>(dweight, dout, inp, rstd, N, C);
  done();
}

/* ----------------------------------------------------------- swiglu */

/* vec_math.h's remat__exp, operation for operation: Cephes' expf on
 * [-87, 88] (clamped), degree-7 polynomial, 2^n from the exponent bits;
 * NaN gives NaN. Plain float arithmetic, no multiply-add (-fmad=false), so
 * the CPU's bits. */
__device__ static inline float cephes_exp(float x) {
  const float in = x;
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_n = __uint_as_float((uint32_t)((int32_t)n + 127) << 23);
  const float y = p * two_n;
  return in == in ? y : in;
}

/* e = exp(-x), -x capped at 80 (llama.c's silu_e). */
__device__ static inline float silu_e(float x) { return cephes_exp(-x < 80.0f ? -x : 80.0f); }

/* llama.c's swiglu_grad: with s = 1 / (1 + e) and 1 - s = e s,
 * da = dout b s (1 + a (1 - s)), db = dout silu(a) (the forward's). */
__device__ static inline void swiglu_grad(float a, float b, float dout, float *da, float *db) {
  const float e = silu_e(a), s = 1.0f / (1.0f + e);
  *da = dout * b * (s * (1.0f + a * (e * s)));
  *db = dout * (a / (1.0f + e));
}

/* out = silu(a) b; out may alias a or b (each element read, then written). */
template <typename E>
__global__ void k_swiglu(E *out, const E *a, const E *b, size_t n) {
  FOR_EACH(i, n) {
    const float x = load(&a[i]);
    store(&out[i], x / (1.0f + silu_e(x)) * load(&b[i]));
  }
}

template <typename E>
__global__ void k_swiglu_back(E *da, E *db, const E *a, const E *b, const float *dout,
                              size_t n) {
  FOR_EACH(i, n) {
    float ga, gb;
    swiglu_grad(load(&a[i]), load(&b[i]), dout[i], &ga, &gb);
    store(&da[i], ga);
    store(&db[i], gb);
  }
}

void remat__cu_swiglu_forward(float *out, const float *a, const float *b, size_t n) {
  if (n) k_swiglu<float><<<grid_for(n, 256), 256>>>(out, a, b, n);
  done();
}

void remat__cu_swiglu_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b,
                                   size_t n) {
  if (n) k_swiglu<uint16_t><<<grid_for(n, 256), 256>>>(out, a, b, n);
  done();
}

void remat__cu_swiglu_backward(float *da, float *db, const float *a, const float *b,
                               const float *dout, size_t n) {
  if (n) k_swiglu_back<float><<<grid_for(n, 256), 256>>>(da, db, a, b, dout, n);
  done();
}

void remat__cu_swiglu_backward_bf16(uint16_t *da, uint16_t *db, const uint16_t *a,
                                    const uint16_t *b, const float *dout, size_t n) {
  if (n) k_swiglu_back<uint16_t><<<grid_for(n, 256), 256>>>(da, db, a, b, dout, n);
  done();
}

/* ------------------------------------------------------------- rope */

/* One thread per (row, pair i): angle = pos theta^(-2i/hs), the power, the
 * product, cos and sin in double, cos and sign * sin rounded to float once
 * (llama.c's rope_table; sign -1 is the transpose), then pair i of every
 * head of the row rotated in float. Each thread owns its pairs: in place. */
template <typename E>
__global__ void k_rope(E *x, int64_t ld, int64_t T, int64_t nheads, int64_t hs, int64_t pos0,
                       double theta, float sign, size_t n) {
  const int64_t half = hs / 2;
  FOR_EACH(k, n) {
    const int64_t row = (int64_t)k / half, i = (int64_t)k % half, pos = pos0 + row % T;
    const double a = (double)pos * pow(theta, -(double)(2 * i) / (double)hs);
    const float cs = (float)cos(a), sn = sign * (float)sin(a);
    E *p = x + row * ld + 2 * i;
    for (int64_t h = 0; h < nheads; h++, p += hs) {
      const float x0 = load(&p[0]), x1 = load(&p[1]);
      store(&p[0], x0 * cs - x1 * sn);
      store(&p[1], x0 * sn + x1 * cs);
    }
  }
}

template <typename E>
static void rope(E *x, int64_t ld, int64_t B, int64_t T, int64_t nheads, int64_t hs,
                 int64_t pos0, double theta, float sign) {
  if (hs <= 0 || hs % 2 || ld < nheads * hs || pos0 < 0 || !(theta > 0.0))
    fail("rope", "a shape the kernel does not take (hs even and > 0, ld >= nheads hs, pos0 >= 0, "
         "theta > 0)", __FILE__, __LINE__);
  const size_t n = (size_t)(B * T * (hs / 2));
  if (n && nheads > 0)
    k_rope<E><<<grid_for(n, 128), 128>>>(x, ld, T, nheads, hs, pos0, theta, sign, n);
  done();
}

void remat__cu_rope_forward(float *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                            int64_t hs, int64_t pos0, double theta) {
  rope(x, ld, B, T, nheads, hs, pos0, theta, 1.0f);
}

void remat__cu_rope_backward(float *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                             int64_t hs, int64_t pos0, double theta) {
  rope(dx, ld, B, T, nheads, hs, pos0, theta, -1.0f);
}

void remat__cu_rope_forward_bf16(uint16_t *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                                 int64_t hs, int64_t pos0, double theta) {
  rope(x, ld, B, T, nheads, hs, pos0, theta, 1.0f);
}

void remat__cu_rope_backward_bf16(uint16_t *dx, int64_t ld, int64_t B, int64_t T,
                                  int64_t nheads, int64_t hs, int64_t pos0, double theta) {
  rope(dx, ld, B, T, nheads, hs, pos0, theta, -1.0f);
}

/* ------------------------------------------------ grouped-query attention */

void remat__cu_attention_forward_gqa(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                                     int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                     const remat__cu_drop *d, uint32_t heads, uint32_t head0) {
  if (B <= 0 || T <= 0) return;
  gqa_forward(out, lse, q, k, v,
              att_shape_of("attention gqa", B, T, NH, NKV, hs, ldq, ldkv, d, heads, head0));
}

void remat__cu_attention_backward_gqa(float *dq, float *dk, float *dv, float *delta,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const float *out, const float *lse,
                                      int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t hs,
                                      const remat__cu_drop *d, uint32_t heads, uint32_t head0) {
  if (B <= 0 || T <= 0) return;
  gqa_backward(dq, dk, dv, delta, dout, q, k, v, out, lse,
               att_shape_of("attention gqa", B, T, NH, NKV, hs, ldq, ldkv, d, heads, head0));
}

/* Row r of query head h attends to positions 0 .. pos + r of its kv head:
 * the forward's attend_row on the same rows, so rows from position 0 give
 * the forward's bits. One thread per (r, h). A decode has no dropout: s.drop
 * is false, and set here so that the compiler leaves out the mask's path. */
__global__ void k_gqa_decode(float *out, const float *q, const float *k, const float *v,
                             int64_t n, int64_t pos, att_shape s) {
  s.drop = false;
  FOR_EACH(i, (size_t)(n * s.NH)) {
    const int64_t r = (int64_t)i / s.NH, h = (int64_t)i % s.NH, kv = h / s.grp * s.hs;
    attend_row(out + r * s.C + h * s.hs, NULL, q + r * s.ldq + h * s.hs, k + kv, v + kv,
               pos + r + 1, s, 0);
  }
}

void remat__cu_attention_decode_gqa(float *out, const float *q, int64_t ldq, const float *k,
                                    const float *v, int64_t ldkv, int64_t n, int64_t pos,
                                    int64_t NH, int64_t NKV, int64_t hs) {
  if (n <= 0) return;
  if (pos < 0) fail("attention_decode_gqa", "a negative position", __FILE__, __LINE__);
  const att_shape s = att_shape_of("attention gqa", 1, pos + n, NH, NKV, hs, ldq, ldkv, NULL, 0, 0);
  k_gqa_decode<<<grid_for((size_t)(n * NH), 64), 64>>>(out, q, k, v, n, pos, s);
  done();
}
