/* tensor_rank.c: what both families' blocks do on a tensor rank
 * (model.h's remat__group_sum, remat__product_residual): the group's
 * collectives (remat__tensor_ops) where a shard computes only a part, and
 * what one process does without them. */
#include "model/model.h"

void remat__group_sum(remat_model *m, float *buf, size_t n, float *scratch) {
  if (m->tops.sum) m->tops.sum(m->tops.ctx, buf, n, scratch);
}

void remat__product_residual(remat_model *m, float *out, const float *inp, const float *weight,
                             const float *bias, const float *resid, const remat__dropout *d,
                             int64_t N, int64_t IC, int64_t OC, float *scratch) {
  if (!m->tops.sum) {
    m->be->matmul_forward_residual(out, inp, weight, bias, resid, d, N, IC, OC);
    return;
  }
  /* matmul_forward_residual's steps, with the group's sum after the product */
  size_t n = (size_t)N * (size_t)OC;
  m->be->matmul_forward(out, inp, weight, m->tops.rank == 0 ? bias : NULL, N, IC, OC);
  remat__group_sum(m, out, n, scratch);
  if (d->p > 0.0f) m->be->dropout_apply(out, out, n, d);
  m->be->residual_forward(out, out, resid, n);
}
