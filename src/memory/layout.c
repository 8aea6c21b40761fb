/* layout.c: the tensor tables behind layout.h. A view is a list of
 * (field, float count) pairs laid end to end, each field aligned. */
#include "memory/layout.h"
#include "base/base.h"
#include "config/family.h"

/* One field: its element count and size; carve lays fields end to end,
 * each aligned, and returns their bytes; with base it writes each field's
 * address to at[i]. */
typedef struct {
  size_t count, elem;
} field;

static size_t carve(const field *f, int n, void *base, char **at) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    if (base) at[i] = (char *)base + off;
    off += remat__align(f[i].count * f[i].elem);
  }
  return off;
}

#define NFIELDS(f) ((int)(sizeof(f) / sizeof((f)[0])))

/* A kernel workspace's tensor-parallel degree and the factor sequence
 * parallelism divides the residual stream's tokens by: at least 1 (a
 * zeroed workspace describes the whole model). */
#define TP(ws) ((size_t)((ws)->tp > 1 ? (ws)->tp : 1))
#define SP(ws) ((size_t)((ws)->sp > 1 ? (ws)->sp : 1))

int remat__product_shapes(const remat_config *cfg, int64_t B, int64_t T,
                          remat__mm_shape s[REMAT__PRODUCTS]) {
  /* a tensor rank's: its share of each product's output features
   * (column-parallel) or input features (row-parallel), of the vocabulary */
  int64_t N = B * T, C = cfg->channels, tp = remat__tp(cfg), Ci = C / tp,
          Vp = cfg->padded_vocab_size / tp;
  /* the head's product on a chunk of tokens, and on the last, shorter one */
  int64_t k = cfg->head_chunk > 0 && cfg->head_chunk < N ? cfg->head_chunk : N;
  remat__mm_shape head = {.N = k, .C = C, .OC = Vp, .out_bf16 = true, .dinp_fp32 = true,
                          .no_bias = true};
  int n = 0;
  if (cfg->family == REMAT_FAMILY_LLAMA) {
    int64_t KV = remat__kv_rank_width(cfg), H = cfg->ffn_hidden / tp;
    /* every product without a bias; the ones whose output a kernel reads
     * in bf16 (q, k, v, w1, w3 and the logits) make bf16 */
    s[0] = (remat__mm_shape){.N = N, .C = C, .OC = Ci, .out_bf16 = true, .dinp_fp32 = true, .no_bias = true};
    s[1] = (remat__mm_shape){.N = N, .C = C, .OC = KV, .out_bf16 = true, .dinp_fp32 = true, .no_bias = true};
    s[2] = (remat__mm_shape){.N = N, .C = Ci, .OC = C, .no_bias = true};
    s[3] = (remat__mm_shape){.N = N, .C = C, .OC = H, .out_bf16 = true, .dinp_fp32 = true, .no_bias = true};
    s[4] = (remat__mm_shape){.N = N, .C = H, .OC = C, .no_bias = true};
    n = 5;
  } else {
    s[0] = (remat__mm_shape){.N = N, .C = C, .OC = 3 * Ci, .out_bf16 = true, .dinp_fp32 = true};
    s[1] = (remat__mm_shape){.N = N, .C = Ci, .OC = C};
    s[2] = (remat__mm_shape){.N = N, .C = C, .OC = 4 * Ci, .out_bf16 = true, .dinp_fp32 = true};
    s[3] = (remat__mm_shape){.N = N, .C = 4 * Ci, .OC = C};
    n = 4;
    if (tp > 1) { /* the row-parallel products without their bias, on ranks but 0 */
      s[n] = s[1], s[n++].no_bias = true;
      s[n] = s[3], s[n++].no_bias = true;
    }
  }
  s[n++] = head;
  if (N % k) {
    s[n] = head;
    s[n++].N = N % k;
  }
  return n;
}

void remat__bf16_copy_bytes(const remat_config *cfg, size_t *block, size_t *head) {
  size_t bf = cfg->precision == REMAT_PRECISION_BF16, blk = 0;
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  for (int i = 0; i < REMAT_P_COUNT; i++)
    if (t[i].where == REMAT__IN_BLOCK && t[i].matrix) blk += (size_t)t[i].rows * (size_t)t[i].cols;
  const remat__tensor *h = &t[remat__head_tensor(cfg)];
  *block = bf * remat__align(blk * 2);
  *head = bf * remat__align((size_t)h->rows * (size_t)h->cols * 2);
}

size_t remat__block_stored_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws) {
  /* a tensor rank's share of the heads and the MLP (BTCi: its inner
   * width), and of the residual stream's tokens (Rs) */
  size_t BT = (size_t)B * (size_t)T, BTCi = BT * (size_t)C / TP(ws),
         Rs = BT / SP(ws), RsC = Rs * (size_t)C, h = remat__act_elem(ws), f = 4;
  const field fl[] = {{Rs, f},        {Rs, f},  {3 * BTCi, h}, {ws->attention_stats, f},
                      {BTCi, h},      {RsC, f}, {Rs, f},       {Rs, f},
                      {4 * BTCi, h}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && a) {
    a->ln1_mean = (float *)at[0];
    a->ln1_rstd = (float *)at[1];
    a->qkv = at[2];
    a->att_lse = (float *)at[3];
    a->atty = at[4];
    a->res2 = (float *)at[5];
    a->ln2_mean = (float *)at[6];
    a->ln2_rstd = (float *)at[7];
    a->fch = at[8];
  }
  return n;
}

size_t remat__block_cheap_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                               int64_t C, const remat__kernel_ws *ws) {
  size_t BT = (size_t)B * (size_t)T, BTCi = BT * (size_t)C / TP(ws),
         RsC = BT / SP(ws) * (size_t)C, h = remat__act_elem(ws);
  const field fl[] = {{RsC, h}, {RsC, h}, {4 * BTCi, h}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && a) {
    a->ln1 = at[0];
    a->ln2 = at[1];
    a->fch_gelu = at[2];
  }
  return n;
}

size_t remat__block_acts_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                              int64_t C, const remat__kernel_ws *ws) {
  size_t n = remat__block_stored_view(a, base, B, T, C, ws);
  return n + remat__block_cheap_view(a, base ? (char *)base + n : NULL, B, T, C, ws);
}

size_t remat__block_dgrads_view(remat__block_dgrads *d, void *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws) {
  /* dln: the gradient into a column-parallel product's input, whole
   * (a tensor rank's share of the sum, all-reduced or reduce-scattered);
   * under sequence parallelism a product's gathered operand (gathered) and
   * the reduce-scattered gradient (dslice) besides */
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C, BTCi = BTC / TP(ws),
         RsC = BTC / SP(ws), f = 4;
  int bf = ws->precision == REMAT_PRECISION_BF16, sp = ws->sp > 1;
  /* dout_h: a product's bf16 output gradient, the MLP's (4 B T C / t) or a
   * row-parallel one's (B T C) */
  size_t dout_h = 4 * BTCi > BTC ? 4 * BTCi : BTC;
  const field fl[] = {
      {RsC, f},      {4 * BTCi, f},           {BTC, f}, {BTCi, f}, {3 * BTCi, f},
      {ws->attention_scratch, f},
      {bf ? dout_h : 0, 2}, {ws->product_scratch, 1},
      {sp ? BTC : 0, f}, {sp ? RsC : 0, f},
  };
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && d) {
    d->dbranch = (float *)at[0];
    d->d4 = (float *)at[1];
    d->dln = (float *)at[2];
    d->datty = (float *)at[3];
    d->dqkv = (float *)at[4];
    d->att_delta = (float *)at[5];
    d->dout_h = bf ? (uint16_t *)at[6] : NULL;
    /* in d4, which is free whenever they are in use (the forward; the
     * backward after the GELU's) */
    d->qkv_f = bf ? d->d4 : NULL;
    d->atty_f = bf ? d->d4 + 3 * BTCi : NULL;
    d->scratch = ws->product_scratch ? at[7] : NULL;
    d->gathered = sp ? (float *)at[8] : NULL;
    d->dslice = sp ? (float *)at[9] : NULL;
  }
  return n;
}

/* The head's norm output (B T C activations), which under sequence
 * parallelism then takes its rank's rows of the norm's gradient and the
 * reduce-scatter's receive buffer (2 B T C / t floats: more than bf16's
 * B T C halves at t = 2). */
static size_t lnf_bytes(const remat__kernel_ws *ws, size_t BTC) {
  size_t act = BTC * remat__act_elem(ws), rows = ws->sp > 1 ? 2 * BTC / SP(ws) * 4 : 0;
  return act > rows ? act : rows;
}

size_t remat__head_acts_view(remat__head_acts *hd, void *base, int64_t B, int64_t T,
                             int64_t C, const remat__kernel_ws *ws) {
  /* lnf whole (gathered under sequence parallelism: the vocabulary-parallel
   * product's input), its statistics on a rank's tokens, every token's loss */
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C, Rs = BT / SP(ws), f = 4;
  const field fl[] = {{lnf_bytes(ws, BTC), 1}, {Rs, f}, {Rs, f}, {BT, f}, {BTC, f},
                      {ws->product_scratch, 1}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && hd) {
    hd->lnf = at[0];
    hd->lnf_mean = (float *)at[1];
    hd->lnf_rstd = (float *)at[2];
    hd->losses = (float *)at[3];
    hd->dlnf = (float *)at[4];
    hd->scratch = ws->product_scratch ? at[5] : NULL;
  }
  return n;
}

size_t remat__block_wrec_view(remat__block_wrec *w, void *base, int64_t B, int64_t T, int64_t C,
                              const remat__kernel_ws *ws) {
  /* the products' inputs and the gradients entering the row-parallel
   * ones whole (gathered under sequence parallelism), a rank's share of the
   * column-parallel ones' outputs (BTCi), the layernorms' on its tokens */
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C, BTCi = BTC / TP(ws),
         Rs = BT / SP(ws), RsC = BTC / SP(ws), h = remat__act_elem(ws), f = 4;
  const field fl[] = {{3 * BTCi, h}, {BTC, h}, {4 * BTCi, h}, {BTC, h}, {RsC, f}, {RsC, f},
                      {RsC, f},      {RsC, f}, {Rs, f},       {Rs, f},  {Rs, f},  {Rs, f},
                      {BTC, h},      {BTCi, h}, {BTC, h},     {4 * BTCi, h}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && w) {
    w->dqkv = at[0];
    w->dproj = at[1];
    w->dfc = at[2];
    w->dfcproj = at[3];
    w->dln1 = (float *)at[4];
    w->dln2 = (float *)at[5];
    w->x = (float *)at[6];
    w->res2 = (float *)at[7];
    w->ln1_mean = (float *)at[8];
    w->ln1_rstd = (float *)at[9];
    w->ln2_mean = (float *)at[10];
    w->ln2_rstd = (float *)at[11];
    w->ln1 = at[12];
    w->atty = at[13];
    w->ln2 = at[14];
    w->fch_gelu = at[15];
  }
  return n;
}

size_t remat__llama_stored_view(remat__llama_acts *a, void *base, const remat_config *cfg,
                                int64_t B, int64_t T, const remat__kernel_ws *ws) {
  /* a tensor rank's: Cq its query heads' width, KV its key/value heads',
   * H its share of the MLP, Rs its share of the residual stream's tokens */
  size_t BT = (size_t)B * (size_t)T, C = (size_t)cfg->channels, Cq = C / TP(ws),
         KV = (size_t)remat__kv_rank_width(cfg), H = (size_t)cfg->ffn_hidden / TP(ws),
         Rs = BT / SP(ws), h = remat__act_elem(ws), f = 4;
  const field fl[] = {{Rs, f},      {BT * Cq, h}, {BT * KV, h}, {BT * KV, h}, {ws->attention_stats, f},
                      {BT * Cq, h}, {Rs * C, f},  {Rs, f},      {BT * H, h},  {BT * H, h}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && a) {
    a->rstd1 = (float *)at[0];
    a->q = at[1];
    a->k = at[2];
    a->v = at[3];
    a->att_lse = (float *)at[4];
    a->atty = at[5];
    a->res2 = (float *)at[6];
    a->rstd2 = (float *)at[7];
    a->h1 = at[8];
    a->h3 = at[9];
  }
  return n;
}

size_t remat__llama_cheap_view(remat__llama_acts *a, void *base, const remat_config *cfg,
                               int64_t B, int64_t T, const remat__kernel_ws *ws) {
  size_t BT = (size_t)B * (size_t)T, C = (size_t)cfg->channels,
         H = (size_t)cfg->ffn_hidden / TP(ws), Rs = BT / SP(ws),
         h = remat__act_elem(ws);
  const field fl[] = {{Rs * C, h}, {Rs * C, h}, {BT * H, h}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && a) {
    a->xn1 = at[0];
    a->xn2 = at[1];
    a->hsw = at[2];
  }
  return n;
}

size_t remat__llama_dgrads_view(remat__llama_dgrads *d, void *base, const remat_config *cfg,
                                int64_t B, int64_t T, const remat__kernel_ws *ws) {
  /* as GPT-2's: the gradients into the column-parallel products' input
   * (dln, dln_part) whole, and under sequence parallelism a gathered
   * operand and the reduce-scattered gradient besides; in bf16 dout_h
   * holds a branch's gradient (B T C), then q's, k's and v's */
  size_t BT = (size_t)B * (size_t)T, C = (size_t)cfg->channels, Cq = C / TP(ws),
         KV = (size_t)remat__kv_rank_width(cfg), H = (size_t)cfg->ffn_hidden / TP(ws),
         Rs = BT / SP(ws), h = remat__act_elem(ws), f = 4;
  int bf = ws->precision == REMAT_PRECISION_BF16, sp = ws->sp > 1;
  const field fl[] = {{Rs * C, f},  {BT * H, f},  {BT * H, h},  {BT * H, h},
                      {BT * C, f},  {BT * C, f},  {BT * Cq, f}, {BT * Cq, f},
                      {BT * KV, f}, {BT * KV, f}, {ws->attention_scratch, f},
                      {bf ? BT * (Cq + 2 * KV > C ? Cq + 2 * KV : C) : 0, 2},
                      {ws->product_scratch, 1},
                      {sp ? BT * C : 0, f}, {sp ? Rs * C : 0, f}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && d) {
    d->dbranch = (float *)at[0];
    d->dhsw = (float *)at[1];
    d->dh1 = at[2];
    d->dh3 = at[3];
    d->dln = (float *)at[4];
    d->dln_part = (float *)at[5];
    d->datty = (float *)at[6];
    d->dq = (float *)at[7];
    d->dk = (float *)at[8];
    d->dv = (float *)at[9];
    d->att_delta = (float *)at[10];
    d->dout_h = bf ? (uint16_t *)at[11] : NULL;
    d->scratch = ws->product_scratch ? at[12] : NULL;
    d->gathered = sp ? (float *)at[13] : NULL;
    d->dslice = sp ? (float *)at[14] : NULL;
  }
  return n;
}

size_t remat__llama_head_view(remat__llama_head *hd, void *base, const remat_config *cfg,
                              int64_t B, int64_t T, const remat__kernel_ws *ws) {
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)cfg->channels, Rs = BT / SP(ws), f = 4;
  const field fl[] = {{lnf_bytes(ws, BTC), 1}, {Rs, f}, {BT, f}, {BTC, f},
                      {ws->product_scratch, 1}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && hd) {
    hd->xnf = at[0];
    hd->rstd = (float *)at[1];
    hd->losses = (float *)at[2];
    hd->dxnf = (float *)at[3];
    hd->scratch = ws->product_scratch ? at[4] : NULL;
  }
  return n;
}

size_t remat__llama_wrec_view(remat__llama_wrec *w, void *base, const remat_config *cfg,
                              int64_t B, int64_t T, const remat__kernel_ws *ws) {
  size_t BT = (size_t)B * (size_t)T, C = (size_t)cfg->channels, Cq = C / TP(ws),
         KV = (size_t)remat__kv_rank_width(cfg), H = (size_t)cfg->ffn_hidden / TP(ws),
         Rs = BT / SP(ws), h = remat__act_elem(ws), f = 4;
  const field fl[] = {{BT * Cq, h}, {BT * KV, h}, {BT * KV, h}, {BT * C, h},  {BT * H, h},
                      {BT * H, h},  {BT * C, h},  {Rs * C, f},  {Rs * C, f}, {Rs * C, f},
                      {Rs * C, f},  {Rs, f},      {Rs, f},      {BT * C, h}, {BT * Cq, h},
                      {BT * C, h},  {BT * H, h}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && w) {
    w->dq = at[0];
    w->dk = at[1];
    w->dv = at[2];
    w->dwo = at[3];
    w->dh1 = at[4];
    w->dh3 = at[5];
    w->dw2 = at[6];
    w->dxn1 = (float *)at[7];
    w->dxn2 = (float *)at[8];
    w->x = (float *)at[9];
    w->res2 = (float *)at[10];
    w->rstd1 = (float *)at[11];
    w->rstd2 = (float *)at[12];
    w->xn1 = at[13];
    w->atty = at[14];
    w->xn2 = at[15];
    w->hsw = at[16];
  }
  return n;
}

void remat__layer_sizes_get(remat__layer_sizes *o, const remat_config *cfg, int64_t B,
                            int64_t T, const remat__kernel_ws *ws) {
  int64_t C = cfg->channels;
  if (cfg->family == REMAT_FAMILY_LLAMA) {
    o->stored = remat__llama_stored_view(NULL, NULL, cfg, B, T, ws);
    o->cheap = remat__llama_cheap_view(NULL, NULL, cfg, B, T, ws);
    o->dgrad = remat__llama_dgrads_view(NULL, NULL, cfg, B, T, ws);
    o->wrec = remat__llama_wrec_view(NULL, NULL, cfg, B, T, ws);
    o->head = remat__llama_head_view(NULL, NULL, cfg, B, T, ws);
    return;
  }
  o->stored = remat__block_stored_view(NULL, NULL, B, T, C, ws);
  o->cheap = remat__block_cheap_view(NULL, NULL, B, T, C, ws);
  o->dgrad = remat__block_dgrads_view(NULL, NULL, B, T, C, ws);
  o->wrec = remat__block_wrec_view(NULL, NULL, B, T, C, ws);
  o->head = remat__head_acts_view(NULL, NULL, B, T, C, ws);
}

size_t remat__decode_view(remat__decode_acts *d, void *base, const remat_config *cfg, int64_t cap,
                          int64_t R, int own_params, const remat__kernel_ws *ws) {
  size_t C = (size_t)cfg->channels, KV = (size_t)remat__kv_width(cfg), f = 4;
  size_t np = own_params ? remat_param_count(cfg) : 0;
  int llama = cfg->family == REMAT_FAMILY_LLAMA;
  /* one block's internals, the family's: a Llama's stored then cheap */
  size_t stored = llama ? remat__llama_stored_view(NULL, NULL, cfg, 1, R, ws) : 0;
  size_t blk = llama ? stored + remat__llama_cheap_view(NULL, NULL, cfg, 1, R, ws)
                     : remat__block_acts_view(NULL, NULL, 1, R, cfg->channels, ws);
  const field fl[] = {{np, f},   {(size_t)R, sizeof(int32_t)}, {(size_t)R * C, f}, {blk, 1},
                      {C, f},    {llama ? 0 : 1, f},
                      {1, f},    {(size_t)cfg->num_layers * (size_t)cap * 2 * KV, f},
                      {(size_t)cfg->padded_vocab_size, f}};
  char *at[NFIELDS(fl)];
  /* the region ends at the logits' last float, where a decode's writes end
   * (a Llama's vocabulary is not padded to the alignment) */
  size_t Vb = (size_t)cfg->padded_vocab_size * f;
  size_t n = carve(fl, NFIELDS(fl), base, at) - remat__align(Vb) + Vb;
  if (base && d) {
    *d = (remat__decode_acts){0};
    d->params = np ? (float *)at[0] : NULL;
    d->tokens = (int32_t *)at[1];
    d->x = (float *)at[2];
    if (llama) {
      remat__llama_stored_view(&d->lblk, at[3], cfg, 1, R, ws);
      remat__llama_cheap_view(&d->lblk, at[3] + stored, cfg, 1, R, ws);
    } else {
      remat__block_acts_view(&d->blk, at[3], 1, R, cfg->channels, ws);
    }
    d->lnf = (float *)at[4];
    d->lnf_mean = llama ? NULL : (float *)at[5];
    d->lnf_rstd = (float *)at[6];
    d->kv = (float *)at[7];
    d->logits = (float *)at[8];
  }
  return n;
}

int remat__stage_tied_borrowed(const remat_config *cfg, const remat_stage *st) {
  /* in bf16 the head keeps its bf16 copy of the matrix, rounded from the
   * lender's after each update */
  return st->tied_borrowed && st->has_head && !st->has_embedding && remat__tied(cfg) &&
         st->accumulate && st->replicas <= 1;
}

void remat__stage_param_sizes(const remat_config *cfg, const remat_stage *st,
                              size_t sizes[REMAT_P_COUNT]) {
  size_t sz[REMAT_P_COUNT];
  remat_param_sizes(cfg, sz);
  size_t L = (size_t)cfg->num_layers, nb = (size_t)st->num_blocks;
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    switch (t[i].where) {
    case REMAT__IN_EMBEDDING: /* the tied matrix also on a stage with the head */
      sizes[i] = st->has_embedding ||
                         (st->has_head && t[i].tied && !remat__stage_tied_borrowed(cfg, st))
                     ? sz[i]
                     : 0;
      break;
    case REMAT__IN_HEAD:
      sizes[i] = st->has_head ? sz[i] : 0;
      break;
    default: /* (L, ...) per-block tensors: the stage's blocks are a contiguous run */
      sizes[i] = sz[i] / L * nb;
    }
  }
}

void remat__stage_param_views(const remat_config *cfg, const remat_stage *st, float *base,
                              float *views[REMAT_P_COUNT]) {
  size_t sz[REMAT_P_COUNT];
  remat__stage_param_sizes(cfg, st, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    views[i] = sz[i] ? base : NULL;
    base += sz[i];
  }
}

void remat__param_views(const remat_config *cfg, float *base, float *views[REMAT_P_COUNT]) {
  size_t sz[REMAT_P_COUNT];
  remat_param_sizes(cfg, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    views[i] = base;
    base += sz[i];
  }
}
