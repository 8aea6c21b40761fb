/* layers.c: forward and backward of the pointwise and row-wise GPT-2 layers
 * (token/position encoder, LayerNorm, linear, GELU, residual add, softmax
 * cross-entropy). Linear layers are one remat__gemm each (gemm.c: OpenBLAS
 * sgemm on fixed slabs of the output); everything else is an OpenMP loop
 * with a static schedule. exp and sqrt come from vec_math.h so the loops
 * vectorise.
 *
 * Determinism: every output element is produced by exactly one thread with a
 * fixed summation order. Column sums (bias, LayerNorm parameters, embedding
 * gradients) are parallelised over column blocks, each thread walking all
 * rows in order, so they do not even depend on the thread count. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "base/base.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/philox_rng.h"
#include "kernels/vec_math.h"

/* Columns per block in the column-sum loops: 4 cache lines of floats, so
 * that even C = 256 gives each of a few threads its share (a column's sum
 * is the same whatever the blocks). */
#define COLBLK 64

#define LN_EPS 1e-5

/* ------------------------------------------------------------ encoder */

void remat__encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                            int64_t B, int64_t T, int64_t C) {
  remat__vocab_encoder_forward(out, tokens, wte, wpe, 0, INT64_MAX, B, T, C);
}

void remat__encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int64_t B, int64_t T, int64_t C) {
  remat__vocab_encoder_backward(dwte, dwpe, dout, tokens, 0, INT64_MAX, B, T, C);
}

void remat__encoder_backward_tied(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, int64_t B, int64_t T, int64_t C,
                                  int64_t V, void *work) {
  const int64_t N = B * T;
  float *sum = work;                         /* one row per distinct token */
  int32_t *row = (int32_t *)(sum + N * C);   /* token -> its row, or -1 */
  int32_t *at = row + V;                     /* position -> its token's row */
  for (int64_t v = 0; v < V; v++) row[v] = -1;
  int32_t rows = 0;
  for (int64_t bt = 0; bt < N; bt++) {
    int32_t tok = tokens[bt];
    if (row[tok] < 0) row[tok] = rows++;
    at[bt] = row[tok];
  }
  memset(sum, 0, (size_t)rows * (size_t)C * sizeof(float));
  remat__encoder_backward(sum, dwpe, dout, at, B, T, C); /* the rows of sum are the ids */
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < V; v++) {
    float *g = dwte + v * C;
    if (row[v] >= 0) {
      const float *s = sum + (int64_t)row[v] * C;
      for (int64_t c = 0; c < C; c++) g[c] = g[c] + s[c];
    } else {
      for (int64_t c = 0; c < C; c++) g[c] = g[c] + 0.0f; /* a -0 becomes +0, as 0 + h does */
    }
  }
}

/* ---------------------------------------------------------- layernorm */

/* Row sums in double over LANES interleaved partial sums (element c goes to
 * lane c % LANES), added in lane order: a fixed order, so deterministic, and
 * free of the one-add-at-a-time dependency chain so it vectorises. */
#define LANES 8

static double sum_lanes(const float *x, int64_t n) {
  double lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += x[c + l];
  for (; c < n; c++) lane[c % LANES] += x[c];
  double s = 0.0;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return s;
}

static double sumsq_dev_lanes(const float *x, int64_t n, double m) {
  double lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += (x[c + l] - m) * (x[c + l] - m);
  for (; c < n; c++) lane[c % LANES] += (x[c] - m) * (x[c] - m);
  double s = 0.0;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return s;
}

/* Mean and biased variance of each row are accumulated in double (two
 * passes), then rounded to float: closer to PyTorch's float32 result than a
 * float accumulation for wide rows. rstd = 1 / sqrt(var + 1e-5). */
/* A row's mean and 1 / sqrt(variance + eps), each rounded to float. */
static inline void row_stats(const float *x, int64_t C, float *mf, float *rf) {
  double m = sum_lanes(x, C) / (double)C, v = sumsq_dev_lanes(x, C, m);
  *mf = (float)m;
  *rf = (float)(1.0 / sqrt(v / (double)C + LN_EPS));
}

void remat__layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *x = inp + n * C;
    float mf, rf;
    row_stats(x, C, &mf, &rf);
    float *o = out + n * C;
    for (int64_t c = 0; c < C; c++) o[c] = (x[c] - mf) * rf * weight[c] + bias[c];
    mean[n] = mf;
    rstd[n] = rf;
  }
}

/* The same statistics and values, each output rounded to bf16 once. */
void remat__layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                   const float *weight, const float *bias, int64_t N,
                                   int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *x = inp + n * C;
    float mf, rf;
    row_stats(x, C, &mf, &rf);
    uint16_t *o = out + n * C;
    for (int64_t c = 0; c < C; c++) o[c] = remat__bf16_round((x[c] - mf) * rf * weight[c] + bias[c]);
    mean[n] = mf;
    rstd[n] = rf;
  }
}

/* With xhat = (x - mean) rstd and g = dout * weight:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat))   (accumulated into dinp)
 *   dweight += sum_n dout xhat,  dbias += sum_n dout  (column sums). */
void remat__layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int64_t N, int64_t C) {
  REMAT_ASSERT(!dweight == !dbias);
  const int64_t nblk = dweight ? (C + COLBLK - 1) / COLBLK : 0, rows = dinp ? N : 0;
  /* rows (dinp) and column blocks (dweight, dbias) write different
   * outputs: one parallel region, no barrier between the two loops */
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < rows; n++) {
      const float *x = inp + n * C, *d = dout + n * C;
      const float m = mean[n], r = rstd[n];
      double sg = 0.0, sgx = 0.0;
      for (int64_t c = 0; c < C; c++) {
        float g = d[c] * weight[c];
        sg += g;
        sgx += (double)g * (double)((x[c] - m) * r);
      }
      const float mg = (float)(sg / (double)C), mgx = (float)(sgx / (double)C);
      float *dx = dinp + n * C;
      for (int64_t c = 0; c < C; c++) {
        float xhat = (x[c] - m) * r;
        dx[c] += r * (d[c] * weight[c] - mg - xhat * mgx);
      }
    }
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t c0 = blk * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
      float sw[COLBLK], sb[COLBLK]; /* this block's sums over rows, in row order */
      for (int64_t c = c0; c < c1; c++) sw[c - c0] = sb[c - c0] = 0.0f;
      for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *d = dout + n * C;
        const float m = mean[n], r = rstd[n];
        for (int64_t c = c0; c < c1; c++) {
          sw[c - c0] += d[c] * ((x[c] - m) * r);
          sb[c - c0] += d[c];
        }
      }
      for (int64_t c = c0; c < c1; c++) {
        dweight[c] += sw[c - c0];
        dbias[c] += sb[c - c0];
      }
    }
  }
}

/* --------------------------------------------------------------- gelu */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* 0.5 (1 + tanh(u)) = sigmoid(2u), so gelu(x) = x / (1 + e) with
 * e = exp(-2u): one vectorisable exp, accurate in both tails (no 1 + tanh
 * cancellation). -2u is capped at 80 so e and the results stay normal
 * floats; past that gelu(x) is below 1e-34 |x| either way. */
static inline float gelu_e(float x) {
  float z = -2.0f * GELU_K * (x + 0.044715f * x * x * x);
  return remat__exp(z > 80.0f ? 80.0f : z);
}

static inline float gelu(float x) { return x / (1.0f + gelu_e(x)); }

/* With s = sigmoid(2u) = 1 / (1 + e) and 1 - s = e s:
 * gelu'(x) = s + 2 x s (1 - s) u'(x),  u' = k (1 + 3 * 0.044715 x^2);
 * the same value as the tanh form 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'. */
static inline float gelu_grad(float x, float dout) {
  float e = gelu_e(x), s = 1.0f / (1.0f + e);
  float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
  return (s + 2.0f * x * s * (e * s) * du) * dout;
}

void remat__gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = gelu(inp[i]);
}

void remat__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dinp[i] = gelu_grad(inp[i], dout[i]);
}

void remat__gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = remat__bf16_round(gelu(remat__bf16_float(inp[i])));
}

void remat__gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout,
                               size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    dinp[i] = remat__bf16_round(gelu_grad(remat__bf16_float(inp[i]), dout[i]));
}

/* ------------------------------------------------------------- matmul */

void remat__matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int64_t N, int64_t C, int64_t OC) {
  /* out (N,OC) = inp (N,C) @ weight (OC,C)^T (+ bias) */
  if (bias)
    remat__gemm_bias(N, OC, C, inp, C, weight, C, bias, out, OC);
  else
    remat__gemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
}

/* The product of a forward linear layer, out (N,OC) = inp @ weight^T (+ bias). */
static remat__gemm_op forward_op(float *out, const float *inp, const float *weight,
                                 const float *bias, int64_t N, int64_t C, int64_t OC) {
  return (remat__gemm_op){.trans_b = 1, .M = N, .N = OC, .K = C, .alpha = 1.0f, .A = inp,
                          .lda = C, .B = weight, .ldb = C, .C = out, .ldc = OC, .bias = bias};
}

typedef struct {
  float *gelu_out;
  const float *x; /* the GELU's input, for the backward */
  const float *resid;
  const remat__dropout *drop;
  float drop_scale;
} epilogue_ctx;

static void gelu_slab(void *p, float *C, int64_t ldc, int64_t r0, int64_t r1, int64_t c0,
                      int64_t c1) {
  const epilogue_ctx *e = p;
  for (int64_t r = r0; r < r1; r++) {
    const float *x = C + r * ldc;
    float *y = e->gelu_out + r * ldc;
#pragma omp simd
    for (int64_t c = c0; c < c1; c++) y[c] = gelu(x[c]);
  }
}

void remat__matmul_forward_gelu(float *out, float *gelu_out, const float *inp,
                                const float *weight, const float *bias, int64_t N, int64_t C,
                                int64_t OC) {
  epilogue_ctx e = {.gelu_out = gelu_out};
  remat__gemm_op op = forward_op(out, inp, weight, bias, N, C, OC);
  op.epilogue = gelu_slab;
  op.ctx = &e;
  remat__gemm_run(&op);
}

static void residual_slab(void *p, float *C, int64_t ldc, int64_t r0, int64_t r1, int64_t c0,
                          int64_t c1) {
  const epilogue_ctx *e = p;
  for (int64_t r = r0; r < r1; r++) {
    float *y = C + r * ldc;
    const float *x = e->resid + r * ldc;
    if (e->drop)
      remat__drop_row(y + c0, y + c0, c1 - c0, (uint64_t)(r * ldc + c0), e->drop, e->drop_scale);
    for (int64_t c = c0; c < c1; c++) y[c] = y[c] + x[c];
  }
}

void remat__matmul_forward_residual(float *out, const float *inp, const float *weight,
                                    const float *bias, const float *resid,
                                    const remat__dropout *drop, int64_t N, int64_t C, int64_t OC) {
  const bool dropping = drop && drop->p > 0.0f;
  if (dropping) REMAT_ASSERT(drop->p < 1.0f);
  epilogue_ctx e = {.resid = resid, .drop = dropping ? drop : NULL,
                    .drop_scale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f};
  remat__gemm_op op = forward_op(out, inp, weight, bias, N, C, OC);
  op.epilogue = residual_slab;
  op.ctx = &e;
  remat__gemm_run(&op);
}

static void gelu_grad_slab(void *p, float *C, int64_t ldc, int64_t r0, int64_t r1, int64_t c0,
                           int64_t c1) {
  const epilogue_ctx *e = p;
  for (int64_t r = r0; r < r1; r++) {
    float *d = C + r * ldc;
    const float *x = e->x + r * ldc;
#pragma omp simd
    for (int64_t c = c0; c < c1; c++) d[c] = gelu_grad(x[c], d[c]);
  }
}

/* dinp, dweight and dbias in one parallel region: each thread does its slab
 * of dinp (then the GELU's backward on it, with x), its slab of dweight and
 * its blocks of dbias; the three outputs are independent, so no barrier
 * separates them and a thread that finishes one part early starts the next. */
static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *x, int64_t N,
                            int64_t C, int64_t OC) {
  epilogue_ctx e = {.x = x};
  /* dinp (N,C) = dout (N,OC) @ weight (OC,C) */
  const remat__gemm_op din = {.M = N, .N = C, .K = OC, .alpha = 1.0f, .A = dout, .lda = OC,
                              .B = weight, .ldb = C, .beta = 0.0f, .C = dinp, .ldc = C,
                              .epilogue = x ? gelu_grad_slab : NULL, .ctx = &e};
  /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C) */
  const remat__gemm_op dw = {.trans_a = 1, .M = OC, .N = C, .K = N, .alpha = 1.0f, .A = dout,
                             .lda = OC, .B = inp, .ldb = C, .beta = 1.0f, .C = dweight,
                             .ldc = C};
  const int64_t nblk = dbias ? (OC + COLBLK - 1) / COLBLK : 0;
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (dinp) remat__gemm_slab(t, nt, &din);
    if (dweight) remat__gemm_slab(t, nt, &dw);
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t o0 = blk * COLBLK, o1 = o0 + COLBLK < OC ? o0 + COLBLK : OC;
      float s[COLBLK];
      for (int64_t o = o0; o < o1; o++) s[o - o0] = 0.0f;
      for (int64_t n = 0; n < N; n++) {
        const float *d = dout + n * OC;
        for (int64_t o = o0; o < o1; o++) s[o - o0] += d[o];
      }
      for (int64_t o = o0; o < o1; o++) dbias[o] += s[o - o0];
    }
  }
}

void remat__matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int64_t N, int64_t C,
                            int64_t OC) {
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, NULL, N, C, OC);
}

void remat__matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *x,
                                 int64_t N, int64_t C, int64_t OC) {
  REMAT_ASSERT(dinp && x);
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, x, N, C, OC);
}

/* ----------------------------------------------------------- residual */

void remat__residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ------------------------------------------------------- crossentropy */

/* Per row: max over the first V logits, e = exp(x - max) in float, sum in
 * double, p = e / sum. The loss is log(sum) - (x[target] - max), which stays
 * finite even when p[target] underflows. The sum is sum_lanes, like the
 * LayerNorm statistics. With dloss != 0 (backward), p is then scaled to the
 * gradient in the same pass: dlogit = p * dloss - (target ? dloss : 0), the
 * products rounded as remat__crossentropy_backward rounds them. */
static double crossentropy(float *logits, float *losses, const int32_t *targets, int64_t N,
                           int64_t V, int64_t Vp, bool backward, float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float *x = logits + n * Vp;
    float mx = -INFINITY;
    for (int64_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    const float xt = x[targets[n]];
    for (int64_t j = 0; j < V; j++) x[j] = remat__exp(x[j] - mx);
    const double s = sum_lanes(x, V);
    const float inv = (float)(1.0 / s);
    if (backward) {
      for (int64_t j = 0; j < V; j++) {
        float p = x[j] * inv;
        x[j] = p * dloss;
      }
      x[targets[n]] -= dloss;
    } else {
      for (int64_t j = 0; j < V; j++) x[j] *= inv;
    }
    for (int64_t j = V; j < Vp; j++) x[j] = 0.0f;
    losses[n] = (float)(log(s) - (double)(xt - mx));
  }
  double total = 0.0; /* in row order: deterministic */
  for (int64_t n = 0; n < N; n++) total += losses[n];
  return total;
}

double remat__crossentropy_forward(float *logits, float *losses, const int32_t *targets, int64_t N,
                                   int64_t V, int64_t Vp) {
  return crossentropy(logits, losses, targets, N, V, Vp, false, 0.0f);
}

double remat__crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets,
                                            float dloss, int64_t N, int64_t V, int64_t Vp) {
  return crossentropy(logits, losses, targets, N, V, Vp, true, dloss);
}

/* ------------------------------------- the vocabulary split across ranks */

void remat__vocab_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                  const float *wpe, int64_t first, int64_t rows, int64_t B,
                                  int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; bt++) {
    int64_t v = (int64_t)tokens[bt] - first;
    const float *we = v >= 0 && v < rows ? wte + v * C : NULL;
    const float *pe = wpe ? wpe + (bt % T) * C : NULL;
    float *o = out + bt * C;
    if (we && pe)
      for (int64_t c = 0; c < C; c++) o[c] = we[c] + pe[c];
    else if (we || pe) /* a token another rank holds; or no learned positions (Llama) */
      memcpy(o, we ? we : pe, (size_t)C * sizeof(float));
    else
      memset(o, 0, (size_t)C * sizeof(float));
  }
}

/* A token may repeat, so rows of dwte are shared: parallelise over channel
 * blocks and let each thread walk all (b, t) in order. dwpe NULL: no
 * positions' gradient, dwte's additions the same. */
void remat__vocab_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int64_t first, int64_t rows,
                                   int64_t B, int64_t T, int64_t C) {
  const int64_t nblk = (C + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
    for (int64_t bt = 0; bt < B * T; bt++) {
      const float *d = dout + bt * C;
      int64_t v = (int64_t)tokens[bt] - first;
      if (v >= 0 && v < rows)
        for (int64_t c = c0; c < c1; c++) dwte[v * C + c] += d[c];
      if (dwpe)
        for (int64_t c = c0; c < c1; c++) dwpe[(bt % T) * C + c] += d[c];
    }
  }
}

void remat__vocab_max(float *mx, const float *logits, int64_t N, int64_t V, int64_t Vl) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *x = logits + n * Vl;
    float m = -INFINITY;
    for (int64_t j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
    mx[n] = m;
  }
}

void remat__vocab_exp(float *logits, double *stats, const float *mx, const int32_t *targets,
                      int64_t first, int64_t N, int64_t V, int64_t Vl) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float *x = logits + n * Vl;
    int64_t t = (int64_t)targets[n] - first;
    stats[2 * n + 1] = t >= 0 && t < V ? (double)(x[t] - mx[n]) : 0.0;
    for (int64_t j = 0; j < V; j++) x[j] = remat__exp(x[j] - mx[n]);
    for (int64_t j = V; j < Vl; j++) x[j] = 0.0f;
    stats[2 * n] = V > 0 ? sum_lanes(x, V) : 0.0;
  }
}

double remat__vocab_finish(float *logits, float *losses, const double *stats,
                           const int32_t *targets, float dloss, int64_t first, int64_t N,
                           int64_t V, int64_t Vl, int backward) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float *x = logits + n * Vl;
    const double s = stats[2 * n];
    const float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < V; j++) x[j] = backward ? x[j] * inv * dloss : x[j] * inv;
    int64_t t = (int64_t)targets[n] - first;
    if (backward && t >= 0 && t < V) x[t] -= dloss;
    losses[n] = (float)(log(s) - stats[2 * n + 1]);
  }
  double total = 0.0; /* in row order: deterministic */
  for (int64_t n = 0; n < N; n++) total += losses[n];
  return total;
}

/* bf16 logits: crossentropy's arithmetic on the widened values, with no
 * buffer: one pass for the max, one for the sum of exponentials (lanes in
 * double, as sum_lanes), and with backward a third that recomputes each
 * exponential and writes the gradient in place, rounded to bf16. */
static double exp_sum_lanes(const uint16_t *x, int64_t n, float mx) {
  double lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] += remat__exp(remat__bf16_float(x[c + l]) - mx);
  for (; c < n; c++) lane[c % LANES] += remat__exp(remat__bf16_float(x[c]) - mx);
  double s = 0.0;
  for (int l = 0; l < LANES; l++) s += lane[l];
  return s;
}

static double crossentropy_bf16(uint16_t *logits, float *losses, const int32_t *targets,
                                int64_t N, int64_t V, int64_t Vp, bool backward, float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    uint16_t *x = logits + n * Vp;
    float mx = -INFINITY;
    for (int64_t j = 0; j < V; j++) {
      float v = remat__bf16_float(x[j]);
      mx = v > mx ? v : mx;
    }
    const float xt = remat__bf16_float(x[targets[n]]);
    const double sum = exp_sum_lanes(x, V, mx);
    const float inv = (float)(1.0 / sum);
    if (backward) {
      for (int64_t j = 0; j < V; j++) {
        float g = remat__exp(remat__bf16_float(x[j]) - mx) * inv * dloss;
        x[j] = remat__bf16_round(j == targets[n] ? g - dloss : g);
      }
      for (int64_t j = V; j < Vp; j++) x[j] = 0;
    }
    losses[n] = (float)(log(sum) - (double)(xt - mx));
  }
  double total = 0.0; /* in row order: deterministic */
  for (int64_t n = 0; n < N; n++) total += losses[n];
  return total;
}

/* The vocabulary-parallel loss (remat__vocab_*) on a tensor rank's bf16
 * logits, with crossentropy_bf16's arithmetic: the exponentials are not
 * stored; vocab_finish_bf16 recomputes them against the group's max and
 * with backward writes the gradient in place, rounded to bf16. */
void remat__vocab_max_bf16(float *mx, const uint16_t *logits, int64_t N, int64_t V, int64_t Vl) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const uint16_t *x = logits + n * Vl;
    float m = -INFINITY;
    for (int64_t j = 0; j < V; j++) {
      float v = remat__bf16_float(x[j]);
      m = v > m ? v : m;
    }
    mx[n] = m;
  }
}

void remat__vocab_exp_bf16(const uint16_t *logits, double *stats, const float *mx,
                           const int32_t *targets, int64_t first, int64_t N, int64_t V,
                           int64_t Vl) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const uint16_t *x = logits + n * Vl;
    int64_t t = (int64_t)targets[n] - first;
    stats[2 * n + 1] = t >= 0 && t < V ? (double)(remat__bf16_float(x[t]) - mx[n]) : 0.0;
    stats[2 * n] = V > 0 ? exp_sum_lanes(x, V, mx[n]) : 0.0;
  }
}

double remat__vocab_finish_bf16(uint16_t *logits, float *losses, const double *stats,
                                const float *mx, const int32_t *targets, float dloss,
                                int64_t first, int64_t N, int64_t V, int64_t Vl, int backward) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    uint16_t *x = logits + n * Vl;
    const double s = stats[2 * n];
    const float inv = (float)(1.0 / s);
    int64_t t = (int64_t)targets[n] - first;
    for (int64_t j = 0; backward && j < V; j++) {
      float g = remat__exp(remat__bf16_float(x[j]) - mx[n]) * inv * dloss;
      x[j] = remat__bf16_round(j == t ? g - dloss : g);
    }
    for (int64_t j = V; backward && j < Vl; j++) x[j] = 0;
    losses[n] = (float)(log(s) - stats[2 * n + 1]);
  }
  double total = 0.0; /* in row order: deterministic */
  for (int64_t n = 0; n < N; n++) total += losses[n];
  return total;
}

double remat__crossentropy_forward_bf16(uint16_t *logits, float *losses, const int32_t *targets,
                                        int64_t N, int64_t V, int64_t Vp) {
  return crossentropy_bf16(logits, losses, targets, N, V, Vp, false, 0.0f);
}

double remat__crossentropy_forward_backward_bf16(uint16_t *logits, float *losses,
                                                 const int32_t *targets, float dloss, int64_t N,
                                                 int64_t V, int64_t Vp) {
  return crossentropy_bf16(logits, losses, targets, N, V, Vp, true, dloss);
}

void remat__crossentropy_backward(float *logits, const int32_t *targets, float dloss, int64_t N,
                                  int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float *p = logits + n * Vp;
    for (int64_t j = 0; j < V; j++) p[j] *= dloss;
    p[targets[n]] -= dloss;
    for (int64_t j = V; j < Vp; j++) p[j] = 0.0f;
  }
}
