/* gpt2_decode.c: GPT-2's inference forward over a KV cache (model/decode.h).
 * A forward runs n new rows through the embedding and every block with the
 * training forward's ops and arithmetic (layernorm, the fused products,
 * tanh GELU, no dropout), except the attention: each block's new keys and
 * values are copied into the cache, and attention_decode attends each new
 * row to every cached position up to its own. Only the last row goes
 * through the final layernorm and the tied head, over the padded
 * vocabulary as in training. One set of a block's activations, for R rows,
 * serves every block in turn; the region is remat__decode_view's. */
#include <string.h>

#include "base/base.h"
#include "model/decode.h"
#include "model/model.h"

static int plan(remat__decoder *d, const remat__backend *be, const remat_config *cfg, int64_t cap,
                int64_t rows, int own, remat_error *err) {
  memset(d, 0, sizeof *d);
  d->be = be ? be : remat__backend_default();
  d->cfg = *cfg;
  d->cfg.precision = REMAT_PRECISION_FP32;
  if (cap < 2 || cap > cfg->max_seq_len || rows < 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "a context of %lld positions (2 .. %lld) and rows of %lld cannot decode",
                         (long long)cap, (long long)cfg->max_seq_len, (long long)rows);
  d->cap = cap;
  d->rows = rows;
  int rc = remat__kernel_ws_get(&d->ws, d->be->sizes, &d->cfg, 1, rows, err);
  if (rc) return rc;
  d->bytes = remat__decode_view(NULL, NULL, &d->cfg, cap, rows, own, &d->ws);
  d->region = d->be->buffer_alloc(d->bytes);
  if (!d->region) {
    char b[32];
    return remat__errorf(err, REMAT_ENOMEM,
                         "cannot allocate the %s the generator's cache needs; give a shorter "
                         "context",
                         remat_format_bytes(d->bytes, b, sizeof b));
  }
  remat__decode_view(&d->a, d->region, &d->cfg, cap, rows, own, &d->ws);
  return 0;
}

int remat__decoder_create(remat__decoder *d, const remat__backend *be, const remat_config *cfg,
                          int64_t cap, int64_t rows, remat_error *err) {
  /* a Llama's weights load (llama2.c's files) before its decoder exists */
  if (cfg->family != REMAT_FAMILY_GPT2)
    return remat__errorf(err, REMAT_EINVAL,
                         "generation runs the GPT-2 family only so far; a %s model cannot be "
                         "sampled yet",
                         remat_family_name((int)cfg->family));
  int rc = plan(d, be, cfg, cap, rows, 1, err);
  if (rc) return rc;
  float *v[REMAT_P_COUNT];
  remat__param_views(&d->cfg, d->a.params, v);
  for (int i = 0; i < REMAT_P_COUNT; i++) d->w[i] = v[i];
  return 0;
}

int remat__decoder_create_model(remat__decoder *d, remat_model *m, int64_t cap, int64_t rows,
                                remat_error *err) {
  memset(d, 0, sizeof *d);
  const remat_stage *st = &m->stage;
  if (!st->has_embedding || !st->has_head || st->num_blocks != m->cfg.num_layers ||
      remat__model_buf_sharded(m, REMAT_BUF_PARAMS))
    return remat__errorf(err, REMAT_EINVAL,
                         "generation needs the whole model's weights in one process, not a "
                         "pipeline stage's or a ZeRO 3 shard");
  int rc = plan(d, m->be, &m->cfg, cap, rows, 0, err);
  if (rc) return rc;
  for (int i = 0; i < REMAT_P_COUNT; i++) d->w[i] = m->p[i];
  return 0;
}

void remat__decoder_destroy(remat__decoder *d) {
  if (d->region) d->be->buffer_free(d->region);
  d->region = NULL;
}

size_t remat__decoder_measured_bytes(const remat__decoder *d) {
  return d->be->high_water(d->region, d->bytes, 0);
}

#define AT(t, l, per) (d->w[t] + (size_t)(l) * (size_t)(per))

void remat__decoder_forward(remat__decoder *d, int64_t pos, int64_t n) {
  REMAT_ASSERT(n >= 1 && n <= d->rows && pos >= 0 && pos + n <= d->cap);
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
