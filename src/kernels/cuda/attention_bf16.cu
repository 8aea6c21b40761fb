/* attention_bf16.cu: the CUDA backend's causal attention on bf16 operands
 * (kernels.h's remat__attention_forward_gqa_bf16 and _backward_gqa_bf16;
 * GPT-2's packed ops are these with q, k, v inside qkv), behind
 * cuda_products.h. NOT YET RUN ON A GPU (docs/cuda.md).
 *
 * The fp32 attention's scheme and arithmetic (attention.cu, llama.cu's
 * grouped-query form) on operands widened from bf16 as they are read: one
 * thread per query row (the forward, dq) or per key row of a kv head (dk,
 * dv, the group's query heads in head order, each with its queries in
 * order), the device's expf and logf, an online softmax over the keys in
 * order, accumulators in registers (head size at most HS_MAX), no T x T
 * buffer, no atomics. So its outputs are the fp32 ops' on the widened
 * operands, bit for bit, with dout, lse, delta and every output fp32 as
 * the CPU's contract has them. The CPU's bf16 kernel also rounds the
 * probabilities and the scores' gradient to bf16 for its products
 * (AVX512-BF16); here every product is fp32, so the two agree to bf16's
 * rounding, not bit for bit. The dropout is the fp32 attention's: element
 * (t, t') of pair (b, h) at index ((b NH + h) T + t) T + t', the heads
 * numbered among the whole model's (remat__dropout's heads, head0).
 *
 * The kernels need no work memory: remat__cu_attention_work is nonzero
 * only to say that they take this head size (the model calls the bf16
 * attention where the sizes' attention_work is nonzero). */
#include "common.cuh"
#include "cuda_products.h"

/* The bytes the sizes report: one alignment unit, never used. */
#define WORK_TOKEN ((size_t)64)

__device__ static inline float widen(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* A call's shape as the kernels read it: pair bh is (batch row bh / NH,
 * query head bh % NH), its kv head (bh % NH) / grp; q (and dq) rows ldq
 * apart, k, v (and dk, dv) rows ldkv apart, out and dout rows C = NH hs. */
struct att16 {
  int64_t B, T, NH, NKV, grp, hs, C, ldq, ldkv;
  float scale; /* 1/sqrt(hs) */
  bool drop;   /* p > 0 */
  remat__cu_drop d;
  float dscale; /* 1/(1-p) */
  uint32_t heads, head0;
};

size_t remat__cu_attention_work(int64_t C, int64_t NH) {
  return NH > 0 && C % NH == 0 && C / NH >= 1 && C / NH <= HS_MAX ? WORK_TOKEN : 0;
}

static att16 att16_of(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, int64_t ldq,
                      int64_t ldkv, const remat__cu_drop *d, uint32_t heads, uint32_t head0) {
  if (NH <= 0 || NKV <= 0 || NH % NKV || hs <= 0 || hs > HS_MAX || ldq < NH * hs ||
      ldkv < NKV * hs)
    fail("attention bf16", "a shape the kernels do not take (NKV divides NH, head size 1 .. "
         "HS_MAX (256), ldq >= NH hs, ldkv >= NKV hs)", __FILE__, __LINE__);
  att16 s = {B, T, NH, NKV, NH / NKV, hs, NH * hs, ldq, ldkv, 1.0f / sqrtf((float)hs), false,
             remat__cu_drop{}, 1.0f, heads, head0};
  if (d && d->p > 0.0f) s.drop = true, s.d = *d, s.dscale = 1.0f / (1.0f - d->p);
  return s;
}

/* Dropout index of element (t, j) of pair bh, among the model's heads. */
__device__ static inline uint64_t drop_at(const att16 &s, int64_t bh, int64_t t, int64_t j) {
  if (s.heads) bh = bh / s.NH * (int64_t)s.heads + (int64_t)s.head0 + bh % s.NH;
  return (uint64_t)((bh * s.T + t) * s.T + j);
}

/* ------------------------------------------------------------ forward */

/* One query row over keys 0 .. nk-1 (attention.cu's attend_row on widened
 * operands): out (hs) = dropout(P) v, *lse the row's log-sum-exp; the
 * dropout index of key j is drow + j. */
__device__ static void attend_row16(float *out, float *lse, const uint16_t *q, const uint16_t *k,
                                    const uint16_t *v, int64_t ldkv, int64_t nk, int hs,
                                    const att16 &s, uint64_t drow) {
  float acc[HS_MAX];
  for (int c = 0; c < hs; c++) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < nk; j++) {
    const uint16_t *kj = k + j * ldkv, *vj = v + j * ldkv;
    float sc = 0.0f;
    for (int c = 0; c < hs; c++) sc += widen(q[c]) * widen(kj[c]);
    sc *= s.scale;
    const float mn = sc > m ? sc : m, corr = expf(m - mn), p = expf(sc - mn);
    l = l * corr + p;
    const float pw = s.drop ? p * drop_mult(s.d, drow + (uint64_t)j, s.dscale) : p;
    for (int c = 0; c < hs; c++) acc[c] = acc[c] * corr + pw * widen(vj[c]);
    m = mn;
  }
  const float inv = 1.0f / l;
  for (int c = 0; c < hs; c++) out[c] = acc[c] * inv;
  *lse = m + logf(l);
}

/* One thread per query row (b, h, t), i = (b NH + h) T + t: lse's index. */
__global__ void k_att16_fwd(float *out, float *lse, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, att16 s) {
  FOR_EACH(i, (size_t)(s.B * s.NH * s.T)) {
    const int64_t t = (int64_t)i % s.T, bh = (int64_t)i / s.T, h = bh % s.NH, b = bh / s.NH;
    const int64_t kv = b * s.T * s.ldkv + h / s.grp * s.hs;
    attend_row16(out + (b * s.T + t) * s.C + h * s.hs, &lse[i],
                 q + (b * s.T + t) * s.ldq + h * s.hs, k + kv, v + kv, s.ldkv, t + 1, (int)s.hs,
                 s, drop_at(s, bh, t, 0));
  }
}

void remat__cu_attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                          const uint16_t *k, const uint16_t *v, int64_t ldq,
                                          int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                          int64_t NKV, int64_t hs, const remat__cu_drop *d,
                                          uint32_t heads, uint32_t head0) {
  if (B <= 0 || T <= 0) return;
  const att16 s = att16_of(B, T, NH, NKV, hs, ldq, ldkv, d, heads, head0);
  k_att16_fwd<<<grid_for((size_t)(B * NH * T), 64), 64>>>(out, lse, q, k, v, s);
  done();
}

/* ----------------------------------------------------------- backward */

/* delta (b, h, t) = rowsum(dout * out) over the head's channels, in
 * order; out is the forward's, rounded to bf16 (the contract's). */
__global__ void k_att16_delta(float *delta, const float *dout, const uint16_t *out, att16 s) {
  FOR_EACH(i, (size_t)(s.B * s.NH * s.T)) {
    const int64_t t = (int64_t)i % s.T, bh = (int64_t)i / s.T, h = bh % s.NH, b = bh / s.NH;
    const int64_t at = (b * s.T + t) * s.C + h * s.hs;
    float acc = 0.0f;
    for (int64_t c = 0; c < s.hs; c++) acc += dout[at + c] * widen(out[at + c]);
    delta[i] = acc;
  }
}

/* dS[t, j] = P (M (dout_t . v_j) - delta_t), P = exp(scale q_t . k_j -
 * lse_t); *pm = P M, M the dropout multiplier (attention.cu's att_ds). */
__device__ static inline float att16_ds(const uint16_t *q, const uint16_t *kj, const float *g,
                                        const uint16_t *vj, int hs, float scale, float lse,
                                        float dl, float mult, float *pm) {
  float sc = 0.0f, dp = 0.0f;
  for (int c = 0; c < hs; c++) {
    sc += widen(q[c]) * widen(kj[c]);
    dp += g[c] * widen(vj[c]);
  }
  const float p = expf(sc * scale - lse);
  *pm = p * mult;
  return p * (dp * mult - dl);
}

/* dq: one thread per query row, keys in order; dq = scale sum dS k. */
__global__ void k_att16_dq(float *dq, const float *delta, const float *dout, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const float *lse, att16 s) {
  const int hs = (int)s.hs;
  FOR_EACH(i, (size_t)(s.B * s.NH * s.T)) {
    const int64_t t = (int64_t)i % s.T, bh = (int64_t)i / s.T, h = bh % s.NH, b = bh / s.NH;
    const int64_t kv = b * s.T * s.ldkv + h / s.grp * s.hs;
    const uint16_t *qt = q + (b * s.T + t) * s.ldq + h * s.hs;
    const float *g = dout + (b * s.T + t) * s.C + h * s.hs;
    float acc[HS_MAX];
    for (int c = 0; c < hs; c++) acc[c] = 0.0f;
    for (int64_t j = 0; j <= t; j++) {
      const uint16_t *kj = k + kv + j * s.ldkv, *vj = v + kv + j * s.ldkv;
      float mult = s.drop ? drop_mult(s.d, drop_at(s, bh, t, j), s.dscale) : 1.0f, pm;
      float ds = att16_ds(qt, kj, g, vj, hs, s.scale, lse[i], delta[i], mult, &pm);
      for (int c = 0; c < hs; c++) acc[c] += ds * widen(kj[c]);
    }
    float *o = dq + (b * s.T + t) * s.ldq + h * s.hs;
    for (int c = 0; c < hs; c++) o[c] = acc[c] * s.scale;
  }
}

/* dk, dv: one thread per key row (b, kv head, j): the group's query heads
 * in head order, each with its queries t >= j in order, in one sum. */
__global__ void k_att16_dkv(float *dk, float *dv, const float *delta, const float *dout,
                            const uint16_t *q, const uint16_t *k, const uint16_t *v,
                            const float *lse, att16 s) {
  const int hs = (int)s.hs;
  FOR_EACH(i, (size_t)(s.B * s.NKV * s.T)) {
    const int64_t j = (int64_t)i % s.T, g = (int64_t)i / s.T, kh = g % s.NKV, b = g / s.NKV;
    const int64_t at = (b * s.T + j) * s.ldkv + kh * s.hs;
    const uint16_t *kj = k + at, *vj = v + at;
    float sk[HS_MAX], sv[HS_MAX];
    for (int c = 0; c < hs; c++) sk[c] = sv[c] = 0.0f;
    for (int64_t h = kh * s.grp; h < (kh + 1) * s.grp; h++) {
      const int64_t bh = b * s.NH + h;
      for (int64_t t = j; t < s.T; t++) {
        const int64_t r = bh * s.T + t; /* the query row's (b, h, t) index */
        const uint16_t *qt = q + (b * s.T + t) * s.ldq + h * s.hs;
        const float *gt = dout + (b * s.T + t) * s.C + h * s.hs;
        float mult = s.drop ? drop_mult(s.d, drop_at(s, bh, t, j), s.dscale) : 1.0f, pm;
        float ds = att16_ds(qt, kj, gt, vj, hs, s.scale, lse[r], delta[r], mult, &pm);
        for (int c = 0; c < hs; c++) {
          sk[c] += ds * widen(qt[c]);
          sv[c] += pm * gt[c];
        }
      }
    }
    for (int c = 0; c < hs; c++) {
      dk[at + c] = sk[c] * s.scale;
      dv[at + c] = sv[c];
    }
  }
}

void remat__cu_attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                           const float *dout, const uint16_t *q,
                                           const uint16_t *k, const uint16_t *v,
                                           const uint16_t *out, const float *lse, int64_t ldq,
                                           int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hs, const remat__cu_drop *d,
                                           uint32_t heads, uint32_t head0) {
  if (B <= 0 || T <= 0) return;
  const att16 s = att16_of(B, T, NH, NKV, hs, ldq, ldkv, d, heads, head0);
  const size_t rows = (size_t)(B * NH * T), keys = (size_t)(B * NKV * T);
  k_att16_delta<<<grid_for(rows, 64), 64>>>(delta, dout, out, s);
  LAUNCHED();
  k_att16_dq<<<grid_for(rows, 64), 64>>>(dq, delta, dout, q, k, v, lse, s);
  LAUNCHED();
  k_att16_dkv<<<grid_for(keys, 64), 64>>>(dk, dv, delta, dout, q, k, v, lse, s);
  done();
}
