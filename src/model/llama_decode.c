/* llama_decode.c: a Llama's inference forward over a KV cache
 * (model/decode.h; the decoder's region and weights are decode.c's). A
 * forward runs n new rows at positions pos .. pos + n - 1 through the
 * embedding (no learned positions) and every block with the training
 * forward's ops and arithmetic (model/llama_block.c: RMSNorm, q, k and v
 * apart, the rotary embedding at the rows' own positions, SwiGLU, no
 * biases, no dropout), except the attention: each block's rotated keys and
 * its values join the cache, which holds the kv_heads key/value heads only
 * ((cap, 2 KV) per layer, KV = remat__kv_width: NH / NKV times smaller
 * than one with every query head's), and attention_decode_gqa attends each
 * new row's NH query heads to their group's cached heads up to its own
 * position. Only the last row goes through the final RMSNorm and the head
 * (the embedding's matrix when tied, its own when not), over the padded
 * vocabulary as in training. One set of a block's internals, for R rows,
 * serves every block in turn. */
#include "base/base.h"
#include "config/family.h"
#include "model/decode.h"

/* Layer l's slice of block tensor t. */
static const float *at(const remat__decoder *d, const remat__tensor *t, int i, int64_t l) {
  return d->w[i] + (size_t)l * (size_t)t[i].rows * (size_t)t[i].cols;
}

void remat__llama_decoder_forward(remat__decoder *d, int64_t pos, int64_t n) {
  const remat__backend *be = d->be;
  const remat_config *c = &d->cfg;
  const int64_t C = c->channels, NH = c->num_heads, NKV = c->kv_heads, hs = C / NH,
                KV = remat__kv_width(c), H = c->ffn_hidden, Vp = c->padded_vocab_size;
  const size_t KV2 = 2 * (size_t)KV;
  const float eps = (float)c->norm_eps;
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(c, t);
  remat__decode_acts *a = &d->a;
  remat__llama_acts *b = &a->lblk;
  float *x = a->x, *q = b->q, *k = b->k, *v = b->v, *xn1 = b->xn1, *xn2 = b->xn2, *h1 = b->h1,
        *h3 = b->h3;
  be->encoder_forward(x, a->tokens, d->w[REMAT_LP_EMB], NULL, 1, n, C);
  for (int64_t l = 0; l < c->num_layers; l++) {
    float *kv = a->kv + (size_t)l * (size_t)d->cap * KV2; /* (cap, 2 KV) */
    be->rmsnorm_forward(xn1, b->rstd1, x, at(d, t, REMAT_LP_ATTNORM, l), n, C, eps);
    be->matmul_forward(q, xn1, at(d, t, REMAT_LP_WQ, l), NULL, n, C, C);
    be->matmul_forward(k, xn1, at(d, t, REMAT_LP_WK, l), NULL, n, C, KV);
    be->matmul_forward(v, xn1, at(d, t, REMAT_LP_WV, l), NULL, n, C, KV);
    be->rope_forward(q, C, 1, n, NH, hs, pos, c->rope_theta);
    be->rope_forward(k, KV, 1, n, NKV, hs, pos, c->rope_theta);
    for (int64_t r = 0; r < n; r++) { /* the row's rotated key, then its value */
      float *row = kv + (size_t)(pos + r) * KV2;
      be->copy(row, k + (size_t)r * (size_t)KV, (size_t)KV * sizeof(float));
      be->copy(row + KV, v + (size_t)r * (size_t)KV, (size_t)KV * sizeof(float));
    }
    be->attention_decode_gqa(b->atty, q, C, kv, kv + KV, 2 * KV, n, pos, NH, NKV, hs);
    be->matmul_forward_residual(b->res2, b->atty, at(d, t, REMAT_LP_WO, l), NULL, x, NULL, n, C,
                                C);
    be->rmsnorm_forward(xn2, b->rstd2, b->res2, at(d, t, REMAT_LP_FFNNORM, l), n, C, eps);
    be->matmul_forward(h1, xn2, at(d, t, REMAT_LP_W1, l), NULL, n, C, H);
    be->matmul_forward(h3, xn2, at(d, t, REMAT_LP_W3, l), NULL, n, C, H);
    be->swiglu_forward(b->hsw, h1, h3, (size_t)n * (size_t)H);
    /* the block's output over its input, which nothing reads any more */
    be->matmul_forward_residual(x, b->hsw, at(d, t, REMAT_LP_W2, l), NULL, b->res2, NULL, n, H,
                                C);
  }
  be->rmsnorm_forward(a->lnf, a->lnf_rstd, x + (size_t)(n - 1) * (size_t)C, d->w[REMAT_LP_NORM],
                      1, C, eps);
  be->matmul_forward(a->logits, a->lnf, d->w[remat__head_tensor(c)], NULL, 1, C, Vp);
}
