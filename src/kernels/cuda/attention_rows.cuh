/* attention_rows.cuh: the CUDA backend's grouped-query causal attention,
 * written once over the operands' element type E: float (llama.cu's fp32
 * ops, and through them attention.cu's packed MHA, NKV = NH) or uint16_t,
 * bf16 widened exactly as it is read (attention_bf16.cu). Outputs,
 * gradients, dout, lse and delta are fp32 for both, and every operation is
 * fp32, so a bf16 call gives the fp32 kernels' bits on the widened
 * operands.
 *
 * The scheme: one thread per query row (the forward, dq, the decode) or
 * per key row of a kv head (dk, dv: the group's query heads in head order,
 * each with its queries in order), the device's expf and logf, an online
 * softmax over the keys in order, accumulators in registers (head size at
 * most HS_MAX), the probabilities rebuilt from the forward's log-sum-exp:
 * deterministic, no atomics, no T x T buffer. Private to src/kernels/cuda;
 * everything here is static, as in common.cuh. */
#ifndef REMAT_CUDA_ATTENTION_ROWS_CUH
#define REMAT_CUDA_ATTENTION_ROWS_CUH

#include "common.cuh"

/* Element access for code written once for float and bf16 operands. */
__device__ static inline float load(const float *p) { return *p; }
__device__ static inline float load(const uint16_t *p) { return widen(*p); }

/* A call's shape as the kernels read it (attention_tiles.h's att_shape): a
 * pair bh is (batch row bh / NH, query head h = bh % NH), its kv head
 * h / grp. q (and dq) rows are ldq elements apart, k, v (and dk, dv) rows
 * ldkv, out and dout rows C = NH hs. */
struct att_shape {
  int64_t B, T, NH, NKV, grp, hs, C, ldq, ldkv;
  float scale; /* 1/sqrt(hs) */
  bool drop;   /* p > 0 */
  remat__cu_drop d;
  float dscale; /* 1/(1-p) */
  uint32_t heads, head0;
};

/* The shape of a call, checked: `what` names the op in the failure. */
[[maybe_unused]] static att_shape att_shape_of(const char *what, int64_t B, int64_t T, int64_t NH,
                                               int64_t NKV, int64_t hs, int64_t ldq,
                                               int64_t ldkv, const remat__cu_drop *d,
                                               uint32_t heads, uint32_t head0) {
  if (NH <= 0 || NKV <= 0 || NH % NKV || hs <= 0 || hs > HS_MAX || ldq < NH * hs ||
      ldkv < NKV * hs)
    fail(what, "a shape the kernels do not take (NKV divides NH, head size 1 .. "
         "HS_MAX (256), ldq >= NH hs, ldkv >= NKV hs)", __FILE__, __LINE__);
  att_shape s = {B, T, NH, NKV, NH / NKV, hs, NH * hs, ldq, ldkv, 1.0f / sqrtf((float)hs), false,
                 remat__cu_drop{}, 1.0f, heads, head0};
  if (d && d->p > 0.0f) s.drop = true, s.d = *d, s.dscale = 1.0f / (1.0f - d->p);
  return s;
}

/* Dropout index of element (t, j) of pair bh, numbered among the whole
 * model's heads (attention.c's drop_index): ((b NH' + h') T + t) T + j. */
__device__ static inline uint64_t drop_at(const att_shape &s, int64_t bh, int64_t t, int64_t j) {
  if (s.heads) bh = bh / s.NH * (int64_t)s.heads + (int64_t)s.head0 + bh % s.NH;
  return (uint64_t)((bh * s.T + t) * s.T + j);
}

/* The dropout multiplier of element (t, j) of pair bh: 0 or 1/(1-p). */
__device__ static inline float drop_of(const att_shape &s, int64_t bh, int64_t t, int64_t j) {
  return s.drop ? drop_mult(s.d, drop_at(s, bh, t, j), s.dscale) : 1.0f;
}

/* One query row over keys 0 .. nk-1, rows s.ldkv apart (online softmax,
 * keys in order): out (hs) = dropout(P) v, *lse the row's log-sum-exp
 * (NULL: none); the dropout index of key j is drow + j. */
template <typename E>
__device__ static void attend_row(float *out, float *lse, const E *q, const E *k, const E *v,
                                  int64_t nk, const att_shape &s, uint64_t drow) {
  const int hs = (int)s.hs;
  float acc[HS_MAX];
  for (int c = 0; c < hs; c++) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < nk; j++) {
    const E *kj = k + j * s.ldkv, *vj = v + j * s.ldkv;
    float sc = 0.0f;
    for (int c = 0; c < hs; c++) sc += load(&q[c]) * load(&kj[c]);
    sc *= s.scale;
    const float mn = sc > m ? sc : m, corr = expf(m - mn), p = expf(sc - mn);
    l = l * corr + p;
    const float pw = s.drop ? p * drop_mult(s.d, drow + (uint64_t)j, s.dscale) : p;
    for (int c = 0; c < hs; c++) acc[c] = acc[c] * corr + pw * load(&vj[c]);
    m = mn;
  }
  const float inv = 1.0f / l;
  for (int c = 0; c < hs; c++) out[c] = acc[c] * inv;
  if (lse) *lse = m + logf(l);
}

/* dS[t, j] = P (M (dout_t . v_j) - delta_t), P = exp(scale q_t . k_j -
 * lse_t); *pm = P M, M the dropout multiplier. */
template <typename E>
__device__ static inline float att_ds(const E *q, const E *kj, const float *g, const E *vj,
                                      int hs, float scale, float lse, float dl, float mult,
                                      float *pm) {
  float sc = 0.0f, dp = 0.0f;
  for (int c = 0; c < hs; c++) {
    sc += load(&q[c]) * load(&kj[c]);
    dp += g[c] * load(&vj[c]);
  }
  const float p = expf(sc * scale - lse);
  *pm = p * mult;
  return p * (dp * mult - dl);
}

/* ------------------------------------------------------------ forward */

/* One thread per query row (b, h, t), i = (b NH + h) T + t: lse's index. */
template <typename E>
__global__ static void k_gqa_fwd(float *out, float *lse, const E *q, const E *k, const E *v,
                                 att_shape s) {
  FOR_EACH(i, (size_t)(s.B * s.NH * s.T)) {
    const int64_t t = (int64_t)i % s.T, bh = (int64_t)i / s.T, h = bh % s.NH, b = bh / s.NH;
    const int64_t kv = b * s.T * s.ldkv + h / s.grp * s.hs;
    attend_row(out + (b * s.T + t) * s.C + h * s.hs, &lse[i],
               q + (b * s.T + t) * s.ldq + h * s.hs, k + kv, v + kv, t + 1, s,
               drop_at(s, bh, t, 0));
  }
}

template <typename E>
static void gqa_forward(float *out, float *lse, const E *q, const E *k, const E *v,
                        const att_shape &s) {
  k_gqa_fwd<E><<<grid_for((size_t)(s.B * s.NH * s.T), 64), 64>>>(out, lse, q, k, v, s);
  done();
}

/* ----------------------------------------------------------- backward */

/* delta (b, h, t) = rowsum(dout * out) over the head's channels, in order
 * (a bf16 out is the forward's rounded, as the contract has it). */
template <typename E>
__global__ static void k_gqa_delta(float *delta, const float *dout, const E *out, att_shape s) {
  FOR_EACH(i, (size_t)(s.B * s.NH * s.T)) {
    const int64_t t = (int64_t)i % s.T, bh = (int64_t)i / s.T, h = bh % s.NH, b = bh / s.NH;
    const int64_t at = (b * s.T + t) * s.C + h * s.hs;
    float acc = 0.0f;
    for (int64_t c = 0; c < s.hs; c++) acc += dout[at + c] * load(&out[at + c]);
    delta[i] = acc;
  }
}

/* dq: one thread per query row, keys in order; dq = scale sum dS k. */
template <typename E>
__global__ static void k_gqa_dq(float *dq, const float *delta, const float *dout, const E *q,
                                const E *k, const E *v, const float *lse, att_shape s) {
  const int hs = (int)s.hs;
  FOR_EACH(i, (size_t)(s.B * s.NH * s.T)) {
    const int64_t t = (int64_t)i % s.T, bh = (int64_t)i / s.T, h = bh % s.NH, b = bh / s.NH;
    const int64_t kv = b * s.T * s.ldkv + h / s.grp * s.hs;
    const E *qt = q + (b * s.T + t) * s.ldq + h * s.hs;
    const float *g = dout + (b * s.T + t) * s.C + h * s.hs;
    float acc[HS_MAX];
    for (int c = 0; c < hs; c++) acc[c] = 0.0f;
    for (int64_t j = 0; j <= t; j++) {
      const E *kj = k + kv + j * s.ldkv, *vj = v + kv + j * s.ldkv;
      float pm;
      float ds = att_ds(qt, kj, g, vj, hs, s.scale, lse[i], delta[i], drop_of(s, bh, t, j), &pm);
      for (int c = 0; c < hs; c++) acc[c] += ds * load(&kj[c]);
    }
    float *o = dq + (b * s.T + t) * s.ldq + h * s.hs;
    for (int c = 0; c < hs; c++) o[c] = acc[c] * s.scale;
  }
}

/* dk, dv: one thread per key row (b, kv head, j): the group's query heads
 * in head order, each with its queries t >= j in order, in one sum. */
template <typename E>
__global__ static void k_gqa_dkv(float *dk, float *dv, const float *delta, const float *dout,
                                 const E *q, const E *k, const E *v, const float *lse,
                                 att_shape s) {
  const int hs = (int)s.hs;
  FOR_EACH(i, (size_t)(s.B * s.NKV * s.T)) {
    const int64_t j = (int64_t)i % s.T, g = (int64_t)i / s.T, kh = g % s.NKV, b = g / s.NKV;
    const int64_t at = (b * s.T + j) * s.ldkv + kh * s.hs;
    const E *kj = k + at, *vj = v + at;
    float sk[HS_MAX], sv[HS_MAX];
    for (int c = 0; c < hs; c++) sk[c] = sv[c] = 0.0f;
    for (int64_t h = kh * s.grp; h < (kh + 1) * s.grp; h++) {
      const int64_t bh = b * s.NH + h;
      for (int64_t t = j; t < s.T; t++) {
        const int64_t r = bh * s.T + t; /* the query row's (b, h, t) index */
        const E *qt = q + (b * s.T + t) * s.ldq + h * s.hs;
        const float *gt = dout + (b * s.T + t) * s.C + h * s.hs;
        float pm;
        float ds = att_ds(qt, kj, gt, vj, hs, s.scale, lse[r], delta[r], drop_of(s, bh, t, j),
                          &pm);
        for (int c = 0; c < hs; c++) {
          sk[c] += ds * load(&qt[c]);
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

/* delta, then dq, then dk and dv (both read delta). Each kernel writes
 * only its own rows, so dq, dk and dv may be views of one packed dqkv. */
template <typename E>
static void gqa_backward(float *dq, float *dk, float *dv, float *delta, const float *dout,
                         const E *q, const E *k, const E *v, const E *out, const float *lse,
                         const att_shape &s) {
  const size_t rows = (size_t)(s.B * s.NH * s.T), keys = (size_t)(s.B * s.NKV * s.T);
  k_gqa_delta<E><<<grid_for(rows, 64), 64>>>(delta, dout, out, s);
  LAUNCHED();
  k_gqa_dq<E><<<grid_for(rows, 64), 64>>>(dq, delta, dout, q, k, v, lse, s);
  LAUNCHED();
  k_gqa_dkv<E><<<grid_for(keys, 64), 64>>>(dk, dv, delta, dout, q, k, v, lse, s);
  done();
}

#endif
