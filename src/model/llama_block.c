/* llama_block.c: the Llama family's block in fp32 (RMSNorm, q, k and v apart
 * with the rotary embedding on q and k, grouped-query attention, a SwiGLU
 * MLP, no biases), as the model runtime (gpt2.c) calls it for each block of
 * a Llama: forward, the middle policy's cheap rebuild, and backward. The
 * runtime keeps everything around a block (slots, policies, gradient
 * buffers, the embedding and the head, the update), which reads the
 * family's table (config/family.h) and its layout (memory/layout.h).
 *
 * The cheap internals (the two RMSNorm outputs and the SwiGLU output) are
 * rebuilt by the same kernels on the same stored values as the forward's,
 * so keep, middle and full give the same bits. */
#include "config/family.h"
#include "model/model.h"

/* A replica's runtime drives its communication between kernels. */
static void progress(remat_model *m) {
  if (m->lops.progress) m->lops.progress(m->lops.ctx);
}

/* The gradient entering a residual branch: dropout(dresid) into buf, or
 * dresid itself when the site does not drop. */
static const float *branch_grad(const remat_model *m, float *buf, const float *dresid, size_t n,
                                const remat__dropout *d) {
  if (d->p <= 0.0f) return dresid;
  m->be->dropout_apply(buf, dresid, n, d);
  return buf;
}

void remat__llama_block_views(const remat_model *m, int64_t i, const float *unit,
                              float *const tensors[REMAT_P_COUNT],
                              float *v[REMAT__LLAMA_BLOCK_TENSORS]) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(&m->cfg, t);
  int j = 0;
  for (int k = 0; k < REMAT_P_COUNT; k++) {
    if (t[k].where != REMAT__IN_BLOCK) continue;
    REMAT_ASSERT(j < REMAT__LLAMA_BLOCK_TENSORS);
    size_t per = (size_t)t[k].rows * (size_t)t[k].cols;
    if (unit) {
      v[j++] = (float *)unit;
      unit += per;
    } else {
      v[j++] = tensors[k] + (size_t)i * per;
    }
  }
  REMAT_ASSERT(j == REMAT__LLAMA_BLOCK_TENSORS);
}

remat__llama_acts remat__llama_acts_at(remat_model *m, char *slot, int64_t i) {
  remat__llama_acts a;
  size_t off = m->mp.block_internal_offset[i];
  char *scratch = m->work + m->mp.mm.block_dgrad_bytes;
  char *stored = off != REMAT_NO_OFFSET ? slot + off : scratch;
  size_t n = remat__llama_stored_view(&a, stored, &m->cfg, m->B, m->T, &m->ws);
  char *cheap = m->mp.policy[i] == REMAT_MIDDLE ? scratch : stored + n;
  remat__llama_cheap_view(&a, cheap, &m->cfg, m->B, m->T, &m->ws);
  return a;
}

/* The block's tensors in view order (the family's table). */
enum { W_ATTNORM, W_Q, W_K, W_V, W_O, W_FFNNORM, W_1, W_2, W_3 };

void remat__llama_block_forward(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                                const float *x, remat__llama_acts *a, float *out,
                                const remat__dropout drop[3]) {
  const remat_config *c = &m->cfg;
  const remat__backend *be = m->be;
  int64_t B = m->B, T = m->T, C = c->channels, NH = c->num_heads, NKV = c->kv_heads,
          hs = C / NH, KV = remat__kv_width(c), H = c->ffn_hidden, N = B * T;
  float eps = (float)c->norm_eps;
  float *q = a->q, *k = a->k, *v = a->v, *xn1 = a->xn1, *xn2 = a->xn2, *h1 = a->h1, *h3 = a->h3;
  be->rmsnorm_forward(xn1, a->rstd1, x, w[W_ATTNORM], N, C, eps);
  be->matmul_forward(q, xn1, w[W_Q], NULL, N, C, C);
  be->matmul_forward(k, xn1, w[W_K], NULL, N, C, KV);
  be->matmul_forward(v, xn1, w[W_V], NULL, N, C, KV);
  progress(m);
  be->rope_forward(q, C, B, T, NH, hs, 0, c->rope_theta);
  be->rope_forward(k, KV, B, T, NKV, hs, 0, c->rope_theta);
  be->attention_forward_gqa(a->atty, a->att_lse, q, k, v, C, KV, B, T, NH, NKV, hs, &drop[0]);
  progress(m);
  be->matmul_forward_residual(a->res2, a->atty, w[W_O], NULL, x, &drop[1], N, C, C);
  progress(m);
  be->rmsnorm_forward(xn2, a->rstd2, a->res2, w[W_FFNNORM], N, C, eps);
  be->matmul_forward(h1, xn2, w[W_1], NULL, N, C, H);
  be->matmul_forward(h3, xn2, w[W_3], NULL, N, C, H);
  be->swiglu_forward(a->hsw, h1, h3, (size_t)N * (size_t)H);
  progress(m);
  if (!out) return; /* a recompute: the output is the next block's stored input */
  be->matmul_forward_residual(out, a->hsw, w[W_2], NULL, a->res2, &drop[2], N, H, C);
  progress(m);
}

void remat__llama_block_cheap(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                              const float *x, remat__llama_acts *a) {
  const remat_config *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->channels;
  float eps = (float)c->norm_eps;
  m->be->rmsnorm_forward(a->xn1, a->rstd1, x, w[W_ATTNORM], N, C, eps);
  m->be->rmsnorm_forward(a->xn2, a->rstd2, a->res2, w[W_FFNNORM], N, C, eps);
  m->be->swiglu_forward(a->hsw, a->h1, a->h3, (size_t)N * (size_t)c->ffn_hidden);
}

void remat__llama_block_backward(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                                 float *const g[REMAT__LLAMA_BLOCK_TENSORS], const float *x,
                                 const remat__llama_acts *a, const remat__dropout drop[3]) {
  const remat_config *c = &m->cfg;
  const remat__backend *be = m->be;
  int64_t B = m->B, T = m->T, C = c->channels, NH = c->num_heads, NKV = c->kv_heads,
          hs = C / NH, KV = remat__kv_width(c), H = c->ffn_hidden, N = B * T;
  size_t NC = (size_t)N * (size_t)C;
  remat__llama_dgrads d;
  remat__llama_dgrads_view(&d, m->work, c, B, T, &m->ws);
  float *dh1 = d.dh1, *dh3 = d.dh3;

  /* MLP branch: out = res2 + dropout(w2 (silu(w1 xn2) * w3 xn2)) */
  const float *dbranch = branch_grad(m, d.dbranch, m->dresid, NC, &drop[2]);
  be->matmul_backward(d.dhsw, g[W_2], NULL, dbranch, a->hsw, w[W_2], N, H, C);
  progress(m);
  be->swiglu_backward(dh1, dh3, a->h1, a->h3, d.dhsw, (size_t)N * (size_t)H);
  be->matmul_backward(d.dln, g[W_1], NULL, dh1, a->xn2, w[W_1], N, C, H);
  progress(m);
  be->matmul_backward(d.dln_part, g[W_3], NULL, dh3, a->xn2, w[W_3], N, C, H);
  progress(m);
  be->add(d.dln, d.dln_part, NC, 1, 0); /* w1's share + w3's */
  be->rmsnorm_backward(m->dresid, g[W_FFNNORM], d.dln, a->res2, w[W_FFNNORM], a->rstd2, N, C);

  /* attention branch: res2 = x + dropout(wo attn(rope(wq xn1), rope(wk xn1), wv xn1)) */
  dbranch = branch_grad(m, d.dbranch, m->dresid, NC, &drop[1]);
  be->matmul_backward(d.datty, g[W_O], NULL, dbranch, a->atty, w[W_O], N, C, C);
  progress(m);
  be->attention_backward_gqa(d.dq, d.dk, d.dv, d.att_delta, d.datty, a->q, a->k, a->v, a->atty,
                             a->att_lse, C, KV, B, T, NH, NKV, hs, &drop[0]);
  progress(m);
  be->rope_backward(d.dq, C, B, T, NH, hs, 0, c->rope_theta);
  be->rope_backward(d.dk, KV, B, T, NKV, hs, 0, c->rope_theta);
  be->matmul_backward(d.dln, g[W_Q], NULL, d.dq, a->xn1, w[W_Q], N, C, C);
  progress(m);
  be->matmul_backward(d.dln_part, g[W_K], NULL, d.dk, a->xn1, w[W_K], N, C, KV);
  be->add(d.dln, d.dln_part, NC, 1, 0); /* (q's + k's) + v's */
  be->matmul_backward(d.dln_part, g[W_V], NULL, d.dv, a->xn1, w[W_V], N, C, KV);
  be->add(d.dln, d.dln_part, NC, 1, 0);
  progress(m);
  be->rmsnorm_backward(m->dresid, g[W_ATTNORM], d.dln, x, w[W_ATTNORM], a->rstd1, N, C);
}
