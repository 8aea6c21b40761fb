/* layout.c: the tensor tables behind layout.h. A view is a list of
 * (field, float count) pairs laid end to end, each field aligned. */
#include "memory/layout.h"
#include "base/base.h"

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

void remat__product_shapes(const remat_config *cfg, int64_t B, int64_t T,
                           remat__mm_shape s[REMAT__PRODUCTS]) {
  int64_t N = B * T, C = cfg->channels;
  s[0] = (remat__mm_shape){.N = N, .C = C, .OC = 3 * C, .out_bf16 = true, .dinp_fp32 = true};
  s[1] = (remat__mm_shape){.N = N, .C = C, .OC = C};
  s[2] = (remat__mm_shape){.N = N, .C = C, .OC = 4 * C, .out_bf16 = true, .dinp_fp32 = true};
  s[3] = (remat__mm_shape){.N = N, .C = 4 * C, .OC = C};
  s[4] = (remat__mm_shape){.N = N, .C = C, .OC = cfg->padded_vocab_size, .out_bf16 = true,
                           .dinp_fp32 = true, .no_bias = true};
}

void remat__bf16_copy_bytes(const remat_config *cfg, size_t *block, size_t *head) {
  size_t C = (size_t)cfg->channels, bf = cfg->precision == REMAT_PRECISION_BF16;
  *block = bf * remat__align(12 * C * C * 2);
  *head = bf * remat__align((size_t)cfg->padded_vocab_size * C * 2);
}

size_t remat__block_stored_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws) {
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C, h = remat__act_elem(ws), f = 4;
  const field fl[] = {{BT, f},       {BT, f},  {3 * BTC, h}, {ws->attention_stats, f},
                      {BTC, h},      {BTC, f}, {BT, f},      {BT, f},
                      {4 * BTC, h}};
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
  size_t BTC = (size_t)B * (size_t)T * (size_t)C, h = remat__act_elem(ws);
  const field fl[] = {{BTC, h}, {BTC, h}, {4 * BTC, h}};
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
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C, f = 4;
  int bf = ws->precision == REMAT_PRECISION_BF16;
  const field fl[] = {
      {BTC, f},      {4 * BTC, f},           {BTC, f}, {BTC, f}, {3 * BTC, f},
      {ws->attention_scratch, f},
      {bf ? 4 * BTC : 0, 2}, {ws->product_scratch, 1},
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
    d->atty_f = bf ? d->d4 + 3 * BTC : NULL;
    d->scratch = ws->product_scratch ? at[7] : NULL;
  }
  return n;
}

size_t remat__head_acts_view(remat__head_acts *hd, void *base, int64_t B, int64_t T,
                             int64_t C, const remat__kernel_ws *ws) {
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C, h = remat__act_elem(ws), f = 4;
  const field fl[] = {{BTC, h}, {BT, f}, {BT, f}, {BT, f}, {BTC, f}, {ws->product_scratch, 1}};
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
  size_t BTC = (size_t)B * (size_t)T * (size_t)C, h = remat__act_elem(ws), f = 4;
  const field fl[] = {{3 * BTC, h}, {BTC, h}, {4 * BTC, h}, {BTC, h}, {BTC, f}, {BTC, f}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && w) {
    w->dqkv = at[0];
    w->dproj = at[1];
    w->dfc = at[2];
    w->dfcproj = at[3];
    w->dln1 = (float *)at[4];
    w->dln2 = (float *)at[5];
  }
  return n;
}

size_t remat__decode_view(remat__decode_acts *d, void *base, const remat_config *cfg, int64_t cap,
                          int64_t R, int own_params, const remat__kernel_ws *ws) {
  size_t C = (size_t)cfg->channels, f = 4;
  size_t np = own_params ? remat_param_count(cfg) : 0;
  size_t blk = remat__block_acts_view(NULL, NULL, 1, R, cfg->channels, ws);
  const field fl[] = {{np, f},   {(size_t)R, sizeof(int32_t)}, {(size_t)R * C, f}, {blk, 1},
                      {C, f},    {1, f},
                      {1, f},    {(size_t)cfg->num_layers * (size_t)cap * 2 * C, f},
                      {(size_t)cfg->padded_vocab_size, f}};
  char *at[NFIELDS(fl)];
  size_t n = carve(fl, NFIELDS(fl), base, at);
  if (base && d) {
    d->params = np ? (float *)at[0] : NULL;
    d->tokens = (int32_t *)at[1];
    d->x = (float *)at[2];
    remat__block_acts_view(&d->blk, at[3], 1, R, cfg->channels, ws);
    d->lnf = (float *)at[4];
    d->lnf_mean = (float *)at[5];
    d->lnf_rstd = (float *)at[6];
    d->kv = (float *)at[7];
    d->logits = (float *)at[8];
  }
  return n;
}

void remat__stage_param_sizes(const remat_config *cfg, const remat_stage *st,
                              size_t sizes[REMAT_P_COUNT]) {
  size_t sz[REMAT_P_COUNT];
  remat_param_sizes(cfg, sz);
  size_t L = (size_t)cfg->num_layers, nb = (size_t)st->num_blocks;
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    switch (i) {
    case REMAT_P_WTE:
      sizes[i] = st->has_embedding || st->has_head ? sz[i] : 0;
      break;
    case REMAT_P_WPE:
      sizes[i] = st->has_embedding ? sz[i] : 0;
      break;
    case REMAT_P_LNFW:
    case REMAT_P_LNFB:
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
