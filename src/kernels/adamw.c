/* adamw.c: the optimizer update and a deterministic sum of squares (the
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
 * root is remat__sqrt_nonneg so the loop vectorises (see vec_math.h). */
void remat__adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                         const remat__adamw *opt, float weight_decay, float grad_scale) {
  REMAT_ASSERT(opt->step >= 1);
  const float b1 = opt->beta1, b2 = opt->beta2, eps = opt->eps;
  const float decay = 1.0f - opt->lr * weight_decay;
  const float step_size = (float)((double)opt->lr / (1.0 - pow((double)b1, opt->step)));
  const float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, opt->step));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * (mi / (remat__sqrt_nonneg(vi) / bc2_sqrt + eps));
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
