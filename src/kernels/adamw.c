/* adamw.c: the optimizer update (alone, or with the bf16 copy's refresh and
 * the gradient's zeroing in the same sweep) and a deterministic sum of squares (the
 * model's gradient norm sums chunks of its units the same way, by lanes:
 * see remat__model_grad_chunk_sums). */
#include <math.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/vec_math.h"

/* Same operation order as torch.optim.AdamW (foreach=False):
 *   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
 * with the bias corrections bc = 1 - beta^t computed in double. The square
 * root is remat__sqrt_nonneg so the loop vectorises (see vec_math.h). One
 * element's arithmetic, which both updates below run, so that they give
 * the same bits. */
typedef struct {
  float b1, b2, eps, decay, step_size, bc2_sqrt;
} adamw_consts;

static adamw_consts consts_of(const remat__adamw *opt, float weight_decay) {
  REMAT_ASSERT(opt->step >= 1);
  return (adamw_consts){
      .b1 = opt->beta1, .b2 = opt->beta2, .eps = opt->eps,
      .decay = 1.0f - opt->lr * weight_decay,
      .step_size = (float)((double)opt->lr / (1.0 - pow((double)opt->beta1, opt->step))),
      .bc2_sqrt = (float)sqrt(1.0 - pow((double)opt->beta2, opt->step))};
}

static inline float adamw_elem(const adamw_consts *k, float *p, float g, float *m, float *v) {
  float mi = k->b1 * *m + (1.0f - k->b1) * g;
  float vi = k->b2 * *v + (1.0f - k->b2) * g * g;
  *m = mi;
  *v = vi;
  return *p * k->decay - k->step_size * (mi / (remat__sqrt_nonneg(vi) / k->bc2_sqrt + k->eps));
}

void remat__adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                         const remat__adamw *opt, float weight_decay, float grad_scale) {
  const adamw_consts k = consts_of(opt, weight_decay);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    param[i] = adamw_elem(&k, &param[i], grad[i] * grad_scale, &m[i], &v[i]);
}

/* The update, the bf16 copy's refresh (remat__bf16_round, as to_bf16
 * rounds) and the gradient's zeroing in one sweep: one read of each of p,
 * g, m, v and one write of each and of the copy, where three passes read
 * p twice and wrote g apart. */
void remat__adamw_update_fused(float *param, float *grad, float *m, float *v,
                               uint16_t *param_bf16, size_t n, const remat__adamw *opt,
                               float weight_decay, float grad_scale) {
  const adamw_consts k = consts_of(opt, weight_decay);
  if (param_bf16) { /* simd: the rounding's NaN test keeps it scalar otherwise */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
      const float p = adamw_elem(&k, &param[i], grad[i] * grad_scale, &m[i], &v[i]);
      param[i] = p;
      param_bf16[i] = remat__bf16_round(p);
      grad[i] = 0.0f;
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    param[i] = adamw_elem(&k, &param[i], grad[i] * grad_scale, &m[i], &v[i]);
    grad[i] = 0.0f;
  }
}

/* Fixed chunks of SUMSQ_CHUNK floats (a multiple of 8), each summed in
 * double by one thread;
 * chunk sums are added in chunk order, SUMSQ_BATCH chunks per parallel
 * region so the partial sums fit on the stack. The result therefore does not
 * depend on the thread count at all. */
#define SUMSQ_CHUNK 4096
#define SUMSQ_BATCH 256

double remat__sumsq(const float *x, size_t n) {
  const size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  double total = 0.0;
  for (size_t c0 = 0; c0 < nchunks; c0 += SUMSQ_BATCH) {
    const size_t nb = nchunks - c0 < SUMSQ_BATCH ? nchunks - c0 : SUMSQ_BATCH;
    double part[SUMSQ_BATCH];
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < nb; k++) {
      size_t i0 = (c0 + k) * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < n ? i0 + SUMSQ_CHUNK : n;
      /* 8 interleaved partial sums, added in lane order: vectorisable */
      double lane[8] = {0};
      size_t i = i0;
      for (; i + 8 <= i1; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += (double)x[i + l] * (double)x[i + l];
      for (; i < i1; i++) lane[i % 8] += (double)x[i] * (double)x[i];
      double s = 0.0;
      for (int l = 0; l < 8; l++) s += lane[l];
      part[k] = s;
    }
    for (size_t k = 0; k < nb; k++) total += part[k];
  }
  return total;
}
