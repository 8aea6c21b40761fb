/* llama_block.c: the Llama family's block in fp32 (RMSNorm, q, k and v apart
 * with the rotary embedding on q and k, grouped-query attention, a SwiGLU
 * MLP, no biases), as the model runtime (gpt2.c) calls it for each block of
 * a Llama: forward, the middle policy's cheap rebuild, and backward, whole
 * or as a zero-bubble schedule's B and W (B writes what W reads into the
 * block's W record, remat__llama_wrec). The runtime keeps everything
 * around a block (slots, policies, gradient buffers, W records, the
 * embedding and the head, the update), which reads the family's table
 * (config/family.h) and its layout (memory/layout.h).
 *
 * The cheap internals (the two RMSNorm outputs and the SwiGLU output) are
 * rebuilt by the same kernels on the same stored values as the forward's,
 * so keep, middle and full give the same bits.
 *
 * In bf16 (mixed precision, as GPT-2's blocks in gpt2.c): the products on
 * the bf16 copies of the matrices with fp32 accumulation; what a product
 * reads is bf16 (the norms' outputs, the attention's output, the SwiGLU's),
 * and q, k, v, h1 and h3 are made in bf16; wo's and w2's outputs are fp32,
 * added to the fp32 residual stream. The rotary embedding turns the bf16 q
 * and k in place, computed in fp32 and rounded (autocast's reference does
 * .float() ... .type_as(xq)); its backward likewise turns the attention's
 * gradients after their rounding to bf16. The attention runs on the bf16
 * operands with an fp32 output, rounded once. */
#include "config/family.h"
#include "model/model.h"

/* A replica's runtime drives its communication between kernels. */
static void progress(remat_model *m) {
  if (m->lops.progress) m->lops.progress(m->lops.ctx);
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

remat__llama_acts remat__llama_acts_at(remat_model *m, const remat__slot *slot, int64_t i) {
  remat__llama_acts a;
  size_t off = slot->lay.block_internal_offset[i];
  char *scratch = m->work + m->mp.mm.block_dgrad_bytes;
  char *stored = off != REMAT_NO_OFFSET ? slot->at + off : scratch;
  size_t n = remat__llama_stored_view(&a, stored, &m->cfg, m->B, m->T, &m->ws);
  char *cheap = slot->lay.policy[i] == REMAT_MIDDLE ? scratch : stored + n;
  remat__llama_cheap_view(&a, cheap, &m->cfg, m->B, m->T, &m->ws);
  return a;
}

/* The block's tensors in view order (the family's table). */
enum { W_ATTNORM, W_Q, W_K, W_V, W_O, W_FFNNORM, W_1, W_2, W_3 };

/* A tensor rank's share of the block (fp32): its query heads (Cq wide),
 * key/value heads (KV wide; remat_plan refuses a degree that does not
 * divide them) and MLP width (H); the whole model's without tensor
 * parallelism. */
typedef struct {
  int64_t Cq, KV, H, NH, NKV;
} share;

static share share_of(const remat_model *m) {
  const remat_config *c = &m->cfg;
  int64_t t = remat__tp(c);
  return (share){.Cq = c->channels / t, .KV = remat__kv_rank_width(c),
                 .H = c->ffn_hidden / t, .NH = c->num_heads / t, .NKV = c->kv_heads / t};
}


/* The forward in bf16: h the block's bf16 matrices (h[W_Q] .. h[W_3]). The
 * attention's fp32 output passes through datty of the backward's
 * temporaries and the products' scratchpad is its work, both free here. On
 * a tensor rank the products and the attention are its share's, and wo's
 * and w2's parts are summed over the group (remat__product_residual_bf16,
 * the scratch in dln_part, free in a forward) before their dropout and
 * residual; under sequence parallelism the norms run on the rank's rows,
 * their outputs gathered whole (in bf16) for the products. */
static void forward_bf16(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                         const uint16_t *const h[REMAT__LLAMA_BLOCK_TENSORS], const float *x,
                         remat__llama_acts *a, float *out, const remat__dropout drop[3]) {
  const remat_config *c = &m->cfg;
  const remat__backend *be = m->be;
  share s = share_of(m);
  int64_t B = m->B, T = m->T, C = c->channels, Cq = s.Cq, NH = s.NH, NKV = s.NKV,
          hs = C / c->num_heads, KV = s.KV, H = s.H, N = B * T;
  float eps = (float)c->norm_eps;
  void *p = m->products;
  remat__llama_dgrads d;
  remat__llama_dgrads_view(&d, m->work, c, B, T, &m->ws);
  REMAT_ASSERT(m->ws.attention_work && be->attention_forward_gqa_bf16);
  uint16_t *q = a->q, *k = a->k, *v = a->v, *xn1 = a->xn1, *xn2 = a->xn2, *h1 = a->h1,
           *h3 = a->h3, *atty = a->atty, *hsw = a->hsw;
  int64_t R = remat__seq_rows(m); /* a rank's rows of the residual stream */
  be->rmsnorm_forward_bf16(xn1, a->rstd1, x, w[W_ATTNORM], R, C, eps);
  const uint16_t *in1 = remat__seq_whole_act(m, d.gathered, xn1, C);
  be->bf16_matmul_forward(p, q, in1, h[W_Q], NULL, N, C, Cq, true, d.scratch);
  be->bf16_matmul_forward(p, k, in1, h[W_K], NULL, N, C, KV, true, d.scratch);
  be->bf16_matmul_forward(p, v, in1, h[W_V], NULL, N, C, KV, true, d.scratch);
  progress(m);
  be->rope_forward_bf16(q, Cq, B, T, NH, hs, 0, c->rope_theta);
  be->rope_forward_bf16(k, KV, B, T, NKV, hs, 0, c->rope_theta);
  be->attention_forward_gqa_bf16(d.datty, a->att_lse, q, k, v, Cq, KV, B, T, NH, NKV, hs,
                                 &drop[0], d.scratch, m->ws.attention_work);
  be->to_bf16(atty, d.datty, (size_t)N * (size_t)Cq);
  progress(m);
  remat__product_residual_bf16(m, a->res2, atty, h[W_O], NULL, x, &drop[1], N, Cq, C,
                               d.dln_part, d.dslice, d.scratch);
  progress(m);
  be->rmsnorm_forward_bf16(xn2, a->rstd2, a->res2, w[W_FFNNORM], R, C, eps);
  const uint16_t *in2 = remat__seq_whole_act(m, d.gathered, xn2, C);
  be->bf16_matmul_forward(p, h1, in2, h[W_1], NULL, N, C, H, true, d.scratch);
  be->bf16_matmul_forward(p, h3, in2, h[W_3], NULL, N, C, H, true, d.scratch);
  be->swiglu_forward_bf16(hsw, h1, h3, (size_t)N * (size_t)H);
  progress(m);
  if (!out) return; /* a recompute: the output is the next block's stored input */
  remat__product_residual_bf16(m, out, hsw, h[W_2], NULL, a->res2, &drop[2], N, H, C, d.dln_part,
                               d.dslice, d.scratch);
  progress(m);
}

void remat__llama_block_forward(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                                const uint16_t *const h[REMAT__LLAMA_BLOCK_TENSORS],
                                const float *x, remat__llama_acts *a, float *out,
                                const remat__dropout drop[3]) {
  if (h) {
    forward_bf16(m, w, h, x, a, out, drop);
    return;
  }
  const remat_config *c = &m->cfg;
  const remat__backend *be = m->be;
  /* a tensor rank's heads and MLP share (the whole block's without) */
  share s = share_of(m);
  int64_t B = m->B, T = m->T, C = c->channels, hs = C / c->num_heads, N = B * T;
  float eps = (float)c->norm_eps;
  float *q = a->q, *k = a->k, *v = a->v, *xn1 = a->xn1, *xn2 = a->xn2, *h1 = a->h1, *h3 = a->h3;
  remat__llama_dgrads d; /* the backward's temporaries, free here: the sums' scratch */
  remat__llama_dgrads_view(&d, m->work, c, B, T, &m->ws);
  /* the norms on a rank's rows of the residual stream (R: all N without
   * sequence parallelism), their outputs gathered for the products */
  int64_t R = remat__seq_rows(m);
  be->rmsnorm_forward(xn1, a->rstd1, x, w[W_ATTNORM], R, C, eps);
  const float *in1 = remat__seq_whole(m, d.gathered, xn1, C);
  be->matmul_forward(q, in1, w[W_Q], NULL, N, C, s.Cq);
  be->matmul_forward(k, in1, w[W_K], NULL, N, C, s.KV);
  be->matmul_forward(v, in1, w[W_V], NULL, N, C, s.KV);
  progress(m);
  be->rope_forward(q, s.Cq, B, T, s.NH, hs, 0, c->rope_theta);
  be->rope_forward(k, s.KV, B, T, s.NKV, hs, 0, c->rope_theta);
  be->attention_forward_gqa(a->atty, a->att_lse, q, k, v, s.Cq, s.KV, B, T, s.NH, s.NKV, hs,
                            &drop[0]);
  progress(m);
  remat__product_residual(m, a->res2, a->atty, w[W_O], NULL, x, &drop[1], N, s.Cq, C,
                          d.dln_part, d.dslice);
  progress(m);
  be->rmsnorm_forward(xn2, a->rstd2, a->res2, w[W_FFNNORM], R, C, eps);
  const float *in2 = remat__seq_whole(m, d.gathered, xn2, C);
  be->matmul_forward(h1, in2, w[W_1], NULL, N, C, s.H);
  be->matmul_forward(h3, in2, w[W_3], NULL, N, C, s.H);
  be->swiglu_forward(a->hsw, h1, h3, (size_t)N * (size_t)s.H);
  progress(m);
  if (!out) return; /* a recompute: the output is the next block's stored input */
  remat__product_residual(m, out, a->hsw, w[W_2], NULL, a->res2, &drop[2], N, s.H, C,
                          d.dln_part, d.dslice);
  progress(m);
}

void remat__llama_block_cheap(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                              const float *x, remat__llama_acts *a) {
  const remat_config *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->channels;
  int64_t R = remat__seq_rows(m); /* a rank's rows of the residual stream */
  float eps = (float)c->norm_eps;
  if (c->precision == REMAT_PRECISION_BF16) {
    m->be->rmsnorm_forward_bf16(a->xn1, a->rstd1, x, w[W_ATTNORM], R, C, eps);
    m->be->rmsnorm_forward_bf16(a->xn2, a->rstd2, a->res2, w[W_FFNNORM], R, C, eps);
    m->be->swiglu_forward_bf16(a->hsw, a->h1, a->h3, (size_t)N * (size_t)share_of(m).H);
    return;
  }
  m->be->rmsnorm_forward(a->xn1, a->rstd1, x, w[W_ATTNORM], R, C, eps);
  m->be->rmsnorm_forward(a->xn2, a->rstd2, a->res2, w[W_FFNNORM], R, C, eps);
  m->be->swiglu_forward(a->hsw, a->h1, a->h3, (size_t)N * (size_t)share_of(m).H);
}

/* The backward in bf16: each product's dout rounded to bf16 (the branches'
 * and q's, k's and v's in dout_h or the W record, h1's and h3's by the
 * SwiGLU's backward), its dinp in fp32; the norms' backwards in fp32, as
 * GPT-2's layernorms. On a tensor rank the branches' gradients are
 * gathered whole under sequence parallelism, and the norms' input
 * gradients are its parts, summed over the group (or their rows
 * reduce-scattered; the scratch in dln_part, free by then), as in fp32.
 * part, wr: as remat__llama_block_backward. */
static void backward_bf16(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                          const uint16_t *const h[REMAT__LLAMA_BLOCK_TENSORS],
                          float *const g[REMAT__LLAMA_BLOCK_TENSORS], const float *x,
                          const remat__llama_acts *a, const remat__dropout drop[3], int part,
                          const remat__llama_wrec *wr) {
  const remat_config *c = &m->cfg;
  const remat__backend *be = m->be;
  share s = share_of(m);
  int64_t B = m->B, T = m->T, C = c->channels, Cq = s.Cq, NH = s.NH, NKV = s.NKV,
          hs = C / c->num_heads, KV = s.KV, H = s.H, N = B * T;
  size_t NC = (size_t)N * (size_t)C, NCq = (size_t)N * (size_t)Cq,
         NKVs = (size_t)N * (size_t)KV;
  void *p = m->products;
  remat__llama_dgrads d;
  remat__llama_dgrads_view(&d, m->work, c, B, T, &m->ws);
  REMAT_ASSERT(m->ws.attention_work && be->attention_backward_gqa_bf16);
  const int in = part & REMAT__PART_INPUT, wt = part & REMAT__PART_WEIGHT,
            seq = remat__seq_parallel(m);
  int64_t R = remat__seq_rows(m); /* a rank's rows of the residual stream */
  float *dresid = in ? m->dresid : NULL;
  /* dout_h: (B, T, C) a branch's gradient, then q's; k's and v's after it */
  uint16_t *dq_h = wr ? wr->dq : d.dout_h, *dk_h = wr ? wr->dk : d.dout_h + NCq,
           *dv_h = wr ? wr->dv : d.dout_h + NCq + NKVs;
  uint16_t *dw2_h = wr ? wr->dw2 : d.dout_h, *dwo_h = wr ? wr->dwo : d.dout_h;
  uint16_t *dh1 = wr ? wr->dh1 : d.dh1, *dh3 = wr ? wr->dh3 : d.dh3;
  float *dxn2 = wr && !seq ? wr->dxn2 : d.dln, *dxn1 = wr && !seq ? wr->dxn1 : d.dln;
  float *rows2 = !in || (wr && seq) ? wr->dxn2 : seq ? d.dslice : dxn2;
  float *rows1 = !in || (wr && seq) ? wr->dxn1 : seq ? d.dslice : dxn1;

  /* MLP branch: out = res2 + dropout(w2 (silu(w1 xn2) * w3 xn2)) */
  if (in)
    be->to_bf16(dw2_h, remat__branch_whole(m, NULL, d.dbranch, d.gathered, &drop[2]), NC);
  be->bf16_matmul_backward(p, in ? d.dhsw : NULL, wt ? g[W_2] : NULL, NULL, dw2_h, a->hsw,
                           h[W_2], N, H, C, false, d.scratch);
  progress(m);
  if (in) be->swiglu_backward_bf16(dh1, dh3, a->h1, a->h3, d.dhsw, (size_t)N * (size_t)H);
  /* w1's and w3's input whole for their weights' gradients (a record's is) */
  const uint16_t *in2 = wt && !wr ? remat__seq_whole_act(m, d.gathered, a->xn2, C) : a->xn2;
  be->bf16_matmul_backward(p, in ? dxn2 : NULL, wt ? g[W_1] : NULL, NULL, dh1, in2, h[W_1], N, C,
                           H, false, d.scratch);
  progress(m);
  be->bf16_matmul_backward(p, in ? d.dln_part : NULL, wt ? g[W_3] : NULL, NULL, dh3, in2, h[W_3],
                           N, C, H, false, d.scratch);
  progress(m);
  if (in) be->add(dxn2, d.dln_part, NC, 1, 0); /* w1's share + w3's */
  if (in) remat__input_grad_sum(m, dxn2, rows2, d.dln_part); /* a tensor rank's part of it */
  be->rmsnorm_backward(dresid, wt ? g[W_FFNNORM] : NULL, rows2, a->res2, w[W_FFNNORM], a->rstd2,
                       R, C);

  /* attention branch: res2 = x + dropout(wo attn(rope(wq xn1), rope(wk xn1), wv xn1)) */
  if (in)
    be->to_bf16(dwo_h, remat__branch_whole(m, NULL, d.dbranch, d.gathered, &drop[1]), NC);
  be->bf16_matmul_backward(p, in ? d.datty : NULL, wt ? g[W_O] : NULL, NULL, dwo_h, a->atty,
                           h[W_O], N, Cq, C, false, d.scratch);
  progress(m);
  if (in) {
    be->attention_backward_gqa_bf16(d.dq, d.dk, d.dv, d.att_delta, d.datty, a->q, a->k, a->v,
                                    a->atty, a->att_lse, Cq, KV, B, T, NH, NKV, hs, &drop[0],
                                    d.scratch, m->ws.attention_work);
    progress(m);
    be->to_bf16(dq_h, d.dq, NCq);
    be->to_bf16(dk_h, d.dk, NKVs);
    be->to_bf16(dv_h, d.dv, NKVs);
    be->rope_backward_bf16(dq_h, Cq, B, T, NH, hs, 0, c->rope_theta);
    be->rope_backward_bf16(dk_h, KV, B, T, NKV, hs, 0, c->rope_theta);
  }
  const uint16_t *in1 = wt && !wr ? remat__seq_whole_act(m, d.gathered, a->xn1, C) : a->xn1;
  be->bf16_matmul_backward(p, in ? dxn1 : NULL, wt ? g[W_Q] : NULL, NULL, dq_h, in1, h[W_Q], N, C,
                           Cq, false, d.scratch);
  progress(m);
  be->bf16_matmul_backward(p, in ? d.dln_part : NULL, wt ? g[W_K] : NULL, NULL, dk_h, in1, h[W_K],
                           N, C, KV, false, d.scratch);
  if (in) be->add(dxn1, d.dln_part, NC, 1, 0); /* (q's + k's) + v's */
  be->bf16_matmul_backward(p, in ? d.dln_part : NULL, wt ? g[W_V] : NULL, NULL, dv_h, in1, h[W_V],
                           N, C, KV, false, d.scratch);
  if (in) be->add(dxn1, d.dln_part, NC, 1, 0);
  if (in) remat__input_grad_sum(m, dxn1, rows1, d.dln_part);
  progress(m);
  be->rmsnorm_backward(dresid, wt ? g[W_ATTNORM] : NULL, rows1, x, w[W_ATTNORM], a->rstd1, R, C);
}

void remat__llama_block_backward(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                                 const uint16_t *const h[REMAT__LLAMA_BLOCK_TENSORS],
                                 float *const g[REMAT__LLAMA_BLOCK_TENSORS], const float *x,
                                 const remat__llama_acts *a, const remat__dropout drop[3],
                                 int part, const remat__llama_wrec *wr) {
  REMAT_ASSERT(part == REMAT__PART_ALL || wr);
  if (h) {
    backward_bf16(m, w, h, g, x, a, drop, part, wr);
    return;
  }
  const remat_config *c = &m->cfg;
  const remat__backend *be = m->be;
  share s = share_of(m); /* a tensor rank's (the whole block's without) */
  int64_t B = m->B, T = m->T, C = c->channels, hs = C / c->num_heads, KV = s.KV, H = s.H,
          N = B * T;
  size_t NC = (size_t)N * (size_t)C;
  remat__llama_dgrads d;
  remat__llama_dgrads_view(&d, m->work, c, B, T, &m->ws);
  const int in = part & REMAT__PART_INPUT, wt = part & REMAT__PART_WEIGHT,
            seq = remat__seq_parallel(m);
  int64_t R = remat__seq_rows(m); /* a rank's rows of the residual stream */
  float *dresid = in ? m->dresid : NULL;
  float *dh1 = wr ? wr->dh1 : d.dh1, *dh3 = wr ? wr->dh3 : d.dh3;
  float *dq = wr ? wr->dq : d.dq, *dk = wr ? wr->dk : d.dk, *dv = wr ? wr->dv : d.dv;
  /* the norms' input gradients: the rank's part whole, then the rows of
   * their sums the norms' backwards read (as GPT-2's blocks) */
  float *dxn2 = wr && !seq ? wr->dxn2 : d.dln, *dxn1 = wr && !seq ? wr->dxn1 : d.dln;
  float *rows2 = !in || (wr && seq) ? wr->dxn2 : seq ? d.dslice : dxn2;
  float *rows1 = !in || (wr && seq) ? wr->dxn1 : seq ? d.dslice : dxn1;

  /* MLP branch: out = res2 + dropout(w2 (silu(w1 xn2) * w3 xn2)). Without
   * dropout (and the parts together) the branch's gradient is dresid
   * itself, read before the RMSNorm's backward adds to dresid. */
  const float *dbranch = wr ? wr->dw2 : NULL;
  if (in)
    dbranch = remat__branch_whole(m, wr ? wr->dw2 : NULL, d.dbranch, d.gathered, &drop[2]);
  be->matmul_backward(in ? d.dhsw : NULL, wt ? g[W_2] : NULL, NULL, dbranch, a->hsw, w[W_2], N,
                      H, C);
  progress(m);
  if (in) be->swiglu_backward(dh1, dh3, a->h1, a->h3, d.dhsw, (size_t)N * (size_t)H);
  /* w1's and w3's input whole for their weights' gradients (a record's is) */
  const float *in2 = wt && !wr ? remat__seq_whole(m, d.gathered, a->xn2, C) : a->xn2;
  be->matmul_backward(in ? dxn2 : NULL, wt ? g[W_1] : NULL, NULL, dh1, in2, w[W_1], N, C, H);
  progress(m);
  be->matmul_backward(in ? d.dln_part : NULL, wt ? g[W_3] : NULL, NULL, dh3, in2, w[W_3], N, C,
                      H);
  progress(m);
  if (in) be->add(dxn2, d.dln_part, NC, 1, 0); /* w1's share + w3's */
  if (in) remat__input_grad_sum(m, dxn2, rows2, d.dln_part); /* a tensor rank's part of it */
  be->rmsnorm_backward(dresid, wt ? g[W_FFNNORM] : NULL, rows2, a->res2, w[W_FFNNORM], a->rstd2,
                       R, C);

  /* attention branch: res2 = x + dropout(wo attn(rope(wq xn1), rope(wk xn1), wv xn1)) */
  dbranch = wr ? wr->dwo : NULL;
  if (in)
    dbranch = remat__branch_whole(m, wr ? wr->dwo : NULL, d.dbranch, d.gathered, &drop[1]);
  be->matmul_backward(in ? d.datty : NULL, wt ? g[W_O] : NULL, NULL, dbranch, a->atty, w[W_O], N,
                      s.Cq, C);
  progress(m);
  if (in) {
    be->attention_backward_gqa(dq, dk, dv, d.att_delta, d.datty, a->q, a->k, a->v, a->atty,
                               a->att_lse, s.Cq, KV, B, T, s.NH, s.NKV, hs, &drop[0]);
    progress(m);
    be->rope_backward(dq, s.Cq, B, T, s.NH, hs, 0, c->rope_theta);
    be->rope_backward(dk, KV, B, T, s.NKV, hs, 0, c->rope_theta);
  }
  const float *in1 = wt && !wr ? remat__seq_whole(m, d.gathered, a->xn1, C) : a->xn1;
  be->matmul_backward(in ? dxn1 : NULL, wt ? g[W_Q] : NULL, NULL, dq, in1, w[W_Q], N, C, s.Cq);
  progress(m);
  be->matmul_backward(in ? d.dln_part : NULL, wt ? g[W_K] : NULL, NULL, dk, in1, w[W_K], N, C,
                      KV);
  if (in) be->add(dxn1, d.dln_part, NC, 1, 0); /* (q's + k's) + v's */
  be->matmul_backward(in ? d.dln_part : NULL, wt ? g[W_V] : NULL, NULL, dv, in1, w[W_V], N, C,
                      KV);
  if (in) be->add(dxn1, d.dln_part, NC, 1, 0);
  if (in) remat__input_grad_sum(m, dxn1, rows1, d.dln_part);
  progress(m);
  be->rmsnorm_backward(dresid, wt ? g[W_ATTNORM] : NULL, rows1, x, w[W_ATTNORM], a->rstd1, R, C);
}

void remat__llama_wrec_fill(remat_model *m, const remat__llama_wrec *r, const float *x,
                            const remat__llama_acts *a) {
  const remat_config *c = &m->cfg;
  share s = share_of(m); /* a tensor rank's (the whole block's without) */
  size_t BT = (size_t)m->B * (size_t)m->T, NC = BT * (size_t)c->channels,
         NCq = BT * (size_t)s.Cq, NH = BT * (size_t)s.H, e = remat__act_elem(&m->ws),
         f = sizeof(float);
  const remat__backend *be = m->be;
  size_t R = (size_t)remat__seq_rows(m), RC = R * (size_t)c->channels; /* a rank's rows */
  be->copy(r->x, x, RC * f);
  be->copy(r->res2, a->res2, RC * f);
  be->copy(r->rstd1, a->rstd1, R * f);
  be->copy(r->rstd2, a->rstd2, R * f);
  if (remat__seq_parallel(m)) { /* the products' inputs whole */
    remat__seq_gather_act(m, r->xn1, a->xn1, c->channels);
    remat__seq_gather_act(m, r->xn2, a->xn2, c->channels);
  } else {
    be->copy(r->xn1, a->xn1, NC * e);
    be->copy(r->xn2, a->xn2, NC * e);
  }
  be->copy(r->atty, a->atty, NCq * e);
  be->copy(r->hsw, a->hsw, NH * e);
}

remat__llama_acts remat__llama_wrec_acts(const remat__llama_wrec *r) {
  return (remat__llama_acts){.rstd1 = r->rstd1, .atty = r->atty, .res2 = r->res2,
                             .rstd2 = r->rstd2, .xn1 = r->xn1, .xn2 = r->xn2, .hsw = r->hsw};
}
