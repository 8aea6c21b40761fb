/* gpt2_decode.c: GPT-2's inference forward over a KV cache (model/decode.h;
 * the decoder's region and weights are decode.c's).
 * A forward runs n new rows through the embedding and every block with the
 * training forward's ops and arithmetic (layernorm, the fused products,
 * tanh GELU, no dropout), except the attention: each block's new keys and
 * values are copied into the cache, and attention_decode attends each new
 * row to every cached position up to its own. Only the last row goes
 * through the final layernorm and the tied head, over the padded
 * vocabulary as in training. One set of a block's activations, for R rows,
 * serves every block in turn; the region is remat__decode_view's. */
#include "base/base.h"
#include "model/decode.h"
#include "model/model.h"

#define AT(t, l, per) (d->w[t] + (size_t)(l) * (size_t)(per))

void remat__gpt2_decoder_forward(remat__decoder *d, int64_t pos, int64_t n) {
  const remat__backend *be = d->be;
  const remat_config *c = &d->cfg;
  const int64_t C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
  const size_t C2 = 2 * (size_t)C;
  remat__decode_acts *a = &d->a;
  remat__block_acts *b = &a->blk;
  float *x = a->x;
  be->encoder_forward(x, a->tokens, d->w[REMAT_P_WTE], AT(REMAT_P_WPE, pos, C), 1, n, C);
  for (int64_t l = 0; l < c->num_layers; l++) {
    float *kv = a->kv + (size_t)l * (size_t)d->cap * C2; /* (cap, 2C) */
    float *qkv = b->qkv, *atty = b->atty, *ln1 = b->ln1, *ln2 = b->ln2, *fch = b->fch;
    float *fch_gelu = b->fch_gelu;
    be->layernorm_forward(ln1, b->ln1_mean, b->ln1_rstd, x, AT(REMAT_P_LN1W, l, C),
                          AT(REMAT_P_LN1B, l, C), n, C);
    be->matmul_forward(qkv, ln1, AT(REMAT_P_QKVW, l, 3 * C * C), AT(REMAT_P_QKVB, l, 3 * C), n, C,
                       3 * C);
    for (int64_t r = 0; r < n; r++) /* the row's key and value, side by side in qkv */
      be->copy(kv + (size_t)(pos + r) * C2, qkv + (size_t)r * 3 * (size_t)C + C,
               C2 * sizeof(float));
    be->attention_decode(atty, qkv, 3 * C, kv, kv + C, 2 * C, n, pos, C, NH);
    be->matmul_forward_residual(b->res2, atty, AT(REMAT_P_ATTPROJW, l, C * C),
                                AT(REMAT_P_ATTPROJB, l, C), x, NULL, n, C, C);
    be->layernorm_forward(ln2, b->ln2_mean, b->ln2_rstd, b->res2, AT(REMAT_P_LN2W, l, C),
                          AT(REMAT_P_LN2B, l, C), n, C);
    be->matmul_forward_gelu(fch, fch_gelu, ln2, AT(REMAT_P_FCW, l, 4 * C * C),
                            AT(REMAT_P_FCB, l, 4 * C), n, C, 4 * C);
    /* the block's output over its input, which nothing reads any more */
    be->matmul_forward_residual(x, fch_gelu, AT(REMAT_P_FCPROJW, l, 4 * C * C),
                                AT(REMAT_P_FCPROJB, l, C), b->res2, NULL, n, 4 * C, C);
  }
  be->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x + (size_t)(n - 1) * (size_t)C,
                        d->w[REMAT_P_LNFW], d->w[REMAT_P_LNFB], 1, C);
  be->matmul_forward(a->logits, a->lnf, d->w[REMAT_P_WTE], NULL, 1, C, Vp);
}
