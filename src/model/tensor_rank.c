/* tensor_rank.c: what both families' blocks do on a tensor rank
 * (model.h's remat__group_sum, remat__product_residual, remat__seq_*): the
 * group's collectives (remat__tensor_ops) where a shard computes only a
 * part, and what one process does without them. Under sequence
 * parallelism a rank holds rows [first, first + rows) of the residual
 * stream's B T: the norms, the residual adds and their dropout run on
 * those rows; a column-parallel product's input is gathered whole first,
 * and a row-parallel product's parts are reduce-scattered into the rows
 * (the same additions as the sum's, so the same bits). */
#include "config/family.h"
#include "model/model.h"

void remat__group_sum(remat_model *m, float *buf, size_t n, float *scratch) {
  if (m->tops.sum) m->tops.sum(m->tops.ctx, buf, n, scratch);
}

bool remat__seq_parallel(const remat_model *m) {
  return m->tops.sum && remat__sp(&m->cfg) > 1;
}

int64_t remat__seq_rows(const remat_model *m) {
  return m->B * m->T / (remat__seq_parallel(m) ? remat__sp(&m->cfg) : 1);
}

int64_t remat__seq_first(const remat_model *m) {
  return remat__seq_parallel(m) ? m->tops.rank * remat__seq_rows(m) : 0;
}

void remat__seq_gather(remat_model *m, float *whole, const void *rows, int64_t C) {
  size_t at = (size_t)remat__seq_first(m) * (size_t)C;
  if ((const float *)rows != whole + at)
    m->be->copy(whole + at, rows, (size_t)remat__seq_rows(m) * (size_t)C * sizeof(float));
  m->tops.gather(m->tops.ctx, whole, (size_t)(m->B * m->T) * (size_t)C);
}

const float *remat__seq_whole(remat_model *m, float *whole, const void *rows, int64_t C) {
  if (!remat__seq_parallel(m)) return rows;
  remat__seq_gather(m, whole, rows, C);
  return whole;
}

void remat__seq_gather_act(remat_model *m, void *whole, const void *rows, int64_t C) {
  size_t e = remat__act_elem(&m->ws), at = (size_t)remat__seq_first(m) * (size_t)C * e;
  if ((const char *)rows != (char *)whole + at)
    m->be->copy((char *)whole + at, rows, (size_t)remat__seq_rows(m) * (size_t)C * e);
  /* as floats: a rank's rows are an even number of bf16 values (C is) */
  m->tops.gather(m->tops.ctx, whole, (size_t)(m->B * m->T) * (size_t)C * e / sizeof(float));
}

const void *remat__seq_whole_act(remat_model *m, void *whole, const void *rows, int64_t C) {
  if (!remat__seq_parallel(m)) return rows;
  remat__seq_gather_act(m, whole, rows, C);
  return whole;
}

void remat__seq_scatter(remat_model *m, float *whole, int64_t C, float *dst, float *rcv) {
  m->tops.scatter(m->tops.ctx, whole, (size_t)(m->B * m->T) * (size_t)C, dst, rcv);
}

/* A row-parallel product's rank part, made in part_of's buffer: the group
 * sums it into out (under sequence parallelism the parts sit in scratch
 * and their sum's rows go to out), then out's dropout and residual, on the
 * rank's rows. */
static float *part_of(const remat_model *m, float *out, float *scratch) {
  return remat__seq_parallel(m) ? scratch : out;
}

static void sum_residual(remat_model *m, float *out, const float *resid,
                         const remat__dropout *d, int64_t N, int64_t OC, float *scratch,
                         float *rcv) {
  size_t n = (size_t)N * (size_t)OC;
  if (remat__seq_parallel(m)) {
    remat__seq_scatter(m, scratch, OC, out, rcv);
    n = (size_t)remat__seq_rows(m) * (size_t)OC;
  } else {
    remat__group_sum(m, out, n, scratch);
  }
  if (d->p > 0.0f) m->be->dropout_apply(out, out, n, d);
  m->be->residual_forward(out, out, resid, n);
}

/* A row-parallel product's bias: whole on every tensor rank, added by rank 0. */
static const float *rank_bias(const remat_model *m, const float *bias) {
  return m->tops.sum && m->tops.rank != 0 ? NULL : bias;
}

void remat__product_residual(remat_model *m, float *out, const float *inp, const float *weight,
                             const float *bias, const float *resid, const remat__dropout *d,
                             int64_t N, int64_t IC, int64_t OC, float *scratch, float *rcv) {
  if (!m->tops.sum) {
    m->be->matmul_forward_residual(out, inp, weight, bias, resid, d, N, IC, OC);
    return;
  }
  /* matmul_forward_residual's steps, with the group's sum after the product */
  m->be->matmul_forward(part_of(m, out, scratch), inp, weight, rank_bias(m, bias), N, IC, OC);
  sum_residual(m, out, resid, d, N, OC, scratch, rcv);
}

void remat__product_residual_bf16(remat_model *m, float *out, const uint16_t *inp,
                                  const uint16_t *weight, const float *bias, const float *resid,
                                  const remat__dropout *d, int64_t N, int64_t IC, int64_t OC,
                                  float *scratch, float *rcv, void *product_scratch) {
  m->be->bf16_matmul_forward(m->products, part_of(m, out, scratch), inp, weight,
                             rank_bias(m, bias), N, IC, OC, false, product_scratch);
  sum_residual(m, out, resid, d, N, OC, scratch, rcv);
}

const float *remat__branch_whole(remat_model *m, float *keep, float *buf,
                                 float *whole, const remat__dropout *d) {
  int64_t C = m->cfg.channels;
  size_t n = (size_t)remat__seq_rows(m) * (size_t)C;
  if (keep) { /* the record's copy, which W reads after dresid moves on */
    float *at = keep + (size_t)remat__seq_first(m) * (size_t)C;
    if (d->p > 0.0f) m->be->dropout_apply(at, m->dresid, n, d);
    else m->be->copy(at, m->dresid, n * sizeof(float));
    if (remat__seq_parallel(m)) remat__seq_gather(m, keep, at, C);
    return keep;
  }
  const float *g = m->dresid;
  if (d->p > 0.0f) m->be->dropout_apply(buf, m->dresid, n, d), g = buf;
  return remat__seq_whole(m, whole, g, C);
}

void remat__input_grad_sum(remat_model *m, float *whole, float *rows, float *scratch) {
  if (remat__seq_parallel(m))
    remat__seq_scatter(m, whole, m->cfg.channels, rows, scratch);
  else
    remat__group_sum(m, whole, (size_t)(m->B * m->T) * (size_t)m->cfg.channels, scratch);
}
