/* attention.cu: the CUDA backend's causal self-attention, forward,
 * backward and decode, to the contracts of kernels/kernels.h. One thread per
 * query row (the forward, dq, the decode) or key row (dk, dv), its
 * accumulators in registers (head size at most HS_MAX), keys or queries
 * taken in order with an online softmax: deterministic, no atomics, no
 * T x T buffer, the probabilities rebuilt from the forward's log-sum-exp.
 * Flash-style tiles in shared memory are the next step once this has run
 * on a GPU; it never has (docs/cuda.md). */
#include "common.cuh"

/* -------------------------------------------------------- attention */

/* One query row of one head over keys 0 .. nk-1 (online softmax, keys in
 * order): out (hs) = dropout(P) v, *lse the row's log-sum-exp. k and v rows
 * are ldkv floats apart; the dropout index of key j is drow + j. */
__device__ static void attend_row(float *out, float *lse, const float *q, const float *k,
                                  const float *v, int64_t ldkv, int64_t nk, int hs, float scale,
                                  bool drop, remat__cu_drop d, uint64_t drow, float dscale) {
  float acc[HS_MAX];
  for (int c = 0; c < hs; c++) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < nk; j++) {
    const float *kj = k + j * ldkv, *vj = v + j * ldkv;
    float s = 0.0f;
    for (int c = 0; c < hs; c++) s += q[c] * kj[c];
    s *= scale;
    const float mn = s > m ? s : m, corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
    const float pw = drop ? p * drop_mult(d, drow + (uint64_t)j, dscale) : p;
    for (int c = 0; c < hs; c++) acc[c] = acc[c] * corr + pw * vj[c];
    m = mn;
  }
  const float inv = 1.0f / l;
  for (int c = 0; c < hs; c++) out[c] = acc[c] * inv;
  if (lse) *lse = m + logf(l);
}

/* The first dropout index of query row t of (batch, head) bh: the whole
 * model's mask, ((b NH + h) T + t) T, on a tensor rank that holds heads
 * [head0, head0 + NH) of `heads` (0: the call sees every head), as
 * attention.c keys it. */
__device__ static uint64_t drop_row(int64_t bh, int64_t NH, uint32_t heads, uint32_t head0,
                                    int64_t T, int64_t t) {
  int64_t m = heads ? bh / NH * (int64_t)heads + (int64_t)head0 + bh % NH : bh;
  return ((uint64_t)m * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
}

/* One thread per (b, h, t). */
__global__ void k_att_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                          int64_t C, int64_t NH, bool drop, remat__cu_drop d, float dscale,
                          uint32_t heads, uint32_t head0) {
  const int hs = (int)(C / NH);
  const float scale = 1.0f / sqrtf((float)hs);
  FOR_EACH(i, (size_t)(B * NH * T)) {
    int64_t t = (int64_t)i % T, bh = (int64_t)i / T, h = bh % NH, b = bh / NH;
    const float *base = qkv + b * T * 3 * C;
    attend_row(out + (b * T + t) * C + h * hs, &lse[i], base + t * 3 * C + h * hs,
               base + C + h * hs, base + 2 * C + h * hs, 3 * C, t + 1, hs, scale, drop, d,
               drop_row(bh, NH, heads, head0, T, t), dscale);
  }
}

static void check_hs(int64_t C, int64_t NH) {
  if (NH <= 0 || C % NH || C / NH > HS_MAX)
    fail("attention", "head size above the CUDA kernel's HS_MAX (256)", __FILE__, __LINE__);
}

void remat__cu_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                                 int64_t C, int64_t NH, const remat__cu_drop *d, uint32_t heads,
                                 uint32_t head0) {
  if (B * T == 0) return;
  check_hs(C, NH);
  const bool drop = d && d->p > 0.0f;
  remat__cu_drop dd = drop ? *d : remat__cu_drop{0.0f, 0, 0, 0, 0, 0, 0};
  k_att_fwd<<<grid_for((size_t)(B * NH * T), 64), 64>>>(out, lse, qkv, B, T, C, NH, drop, dd,
                                                        drop ? 1.0f / (1.0f - d->p) : 1.0f,
                                                        heads, head0);
  done();
}

/* delta (b, h, t) = rowsum(dout * out) over the head's channels. */
__global__ void k_att_delta(float *delta, const float *dout, const float *out, int64_t B,
                            int64_t T, int64_t C, int64_t NH) {
  const int hs = (int)(C / NH);
  FOR_EACH(i, (size_t)(B * NH * T)) {
    int64_t t = (int64_t)i % T, bh = (int64_t)i / T, h = bh % NH, b = bh / NH;
    const float *o = out + (b * T + t) * C + h * hs, *g = dout + (b * T + t) * C + h * hs;
    float s = 0.0f;
    for (int c = 0; c < hs; c++) s += g[c] * o[c];
    delta[i] = s;
  }
}

/* dS[t, j] = P[t, j] (M[t, j] (dout_t . v_j) - delta_t), P from lse. */
__device__ static inline float att_ds(const float *q, const float *kj, const float *g,
                                      const float *vj, int hs, float scale, float lse, float dl,
                                      float mult, float *pm) {
  float s = 0.0f, dp = 0.0f;
  for (int c = 0; c < hs; c++) {
    s += q[c] * kj[c];
    dp += g[c] * vj[c];
  }
  const float p = expf(s * scale - lse);
  *pm = p * mult;
  return p * (dp * mult - dl);
}

/* dq: one thread per query row, keys in order. */
__global__ void k_att_dq(float *dqkv, const float *delta, const float *dout, const float *qkv,
                         const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                         bool drop, remat__cu_drop d, float dscale, uint32_t heads,
                         uint32_t head0) {
  const int hs = (int)(C / NH);
  const float scale = 1.0f / sqrtf((float)hs);
  FOR_EACH(i, (size_t)(B * NH * T)) {
    int64_t t = (int64_t)i % T, bh = (int64_t)i / T, h = bh % NH, b = bh / NH;
    const uint64_t drow = drop_row(bh, NH, heads, head0, T, t);
    const float *base = qkv + b * T * 3 * C, *q = base + t * 3 * C + h * hs;
    const float *g = dout + (b * T + t) * C + h * hs;
    float acc[HS_MAX];
    for (int c = 0; c < hs; c++) acc[c] = 0.0f;
    for (int64_t j = 0; j <= t; j++) {
      const float *kj = base + j * 3 * C + C + h * hs, *vj = kj + C;
      float mult = drop ? drop_mult(d, drow + (uint64_t)j, dscale) : 1.0f, pm;
      float ds = att_ds(q, kj, g, vj, hs, scale, lse[i], delta[i], mult, &pm);
      for (int c = 0; c < hs; c++) acc[c] += ds * kj[c];
    }
    float *dq = dqkv + (b * T + t) * 3 * C + h * hs;
    for (int c = 0; c < hs; c++) dq[c] = acc[c] * scale;
  }
}

/* dk, dv: one thread per key row, queries in order. */
__global__ void k_att_dkv(float *dqkv, const float *delta, const float *dout, const float *qkv,
                          const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                          bool drop, remat__cu_drop d, float dscale, uint32_t heads,
                          uint32_t head0) {
  const int hs = (int)(C / NH);
  const float scale = 1.0f / sqrtf((float)hs);
  FOR_EACH(i, (size_t)(B * NH * T)) {
    int64_t j = (int64_t)i % T, bh = (int64_t)i / T, h = bh % NH, b = bh / NH;
    const float *base = qkv + b * T * 3 * C, *kj = base + j * 3 * C + C + h * hs, *vj = kj + C;
    float dk[HS_MAX], dv[HS_MAX];
    for (int c = 0; c < hs; c++) dk[c] = dv[c] = 0.0f;
    for (int64_t t = j; t < T; t++) {
      const int64_t r = bh * T + t; /* the query row's (b, h, t) index */
      const float *q = base + t * 3 * C + h * hs, *g = dout + (b * T + t) * C + h * hs;
      float mult =
          drop ? drop_mult(d, drop_row(bh, NH, heads, head0, T, t) + (uint64_t)j, dscale) : 1.0f;
      float pm;
      float ds = att_ds(q, kj, g, vj, hs, scale, lse[r], delta[r], mult, &pm);
      for (int c = 0; c < hs; c++) {
        dk[c] += ds * q[c];
        dv[c] += pm * g[c];
      }
    }
    float *o = dqkv + (b * T + j) * 3 * C + C + h * hs;
    for (int c = 0; c < hs; c++) {
      o[c] = dk[c] * scale;
      o[C + c] = dv[c];
    }
  }
}

void remat__cu_attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int64_t B, int64_t T,
                                  int64_t C, int64_t NH, const remat__cu_drop *d, uint32_t heads,
                                  uint32_t head0) {
  if (B * T == 0) return;
  check_hs(C, NH);
  const bool drop = d && d->p > 0.0f;
  remat__cu_drop dd = drop ? *d : remat__cu_drop{0.0f, 0, 0, 0, 0, 0, 0};
  const float ds = drop ? 1.0f / (1.0f - d->p) : 1.0f;
  const size_t rows = (size_t)(B * NH * T);
  k_att_delta<<<grid_for(rows, 64), 64>>>(delta, dout, out, B, T, C, NH);
  LAUNCHED();
  k_att_dq<<<grid_for(rows, 64), 64>>>(dqkv, delta, dout, qkv, lse, B, T, C, NH, drop, dd, ds,
                                       heads, head0);
  LAUNCHED();
  k_att_dkv<<<grid_for(rows, 64), 64>>>(dqkv, delta, dout, qkv, lse, B, T, C, NH, drop, dd, ds,
                                        heads, head0);
  done();
}

/* Row r of head h attends to positions 0 .. pos + r: one thread per (r, h). */
__global__ void k_att_decode(float *out, const float *q, int64_t ldq, const float *k,
                             const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                             int64_t NH) {
  const int hs = (int)(C / NH);
  const float scale = 1.0f / sqrtf((float)hs);
  remat__cu_drop none = {0.0f, 0, 0, 0, 0, 0};
  FOR_EACH(i, (size_t)(n * NH)) {
    int64_t r = (int64_t)i / NH, h = (int64_t)i % NH;
    attend_row(out + r * C + h * hs, NULL, q + r * ldq + h * hs, k + h * hs, v + h * hs, ldkv,
               pos + r + 1, hs, scale, false, none, 0, 1.0f);
  }
}

void remat__cu_attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                                const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                                int64_t NH) {
  if (n <= 0) return;
  check_hs(C, NH);
  k_att_decode<<<grid_for((size_t)(n * NH), 64), 64>>>(out, q, ldq, k, v, ldkv, n, pos, C, NH);
  done();
}

