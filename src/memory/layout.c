/* layout.c: the tensor tables behind layout.h. A view is a list of
 * (field, float count) pairs laid end to end, each field aligned. */
#include "memory/layout.h"
#include "base/base.h"

typedef struct {
  float **field;
  size_t floats;
} slot;

static size_t carve(slot *s, int n, float *base) {
  size_t off = 0; /* bytes */
  for (int i = 0; i < n; i++) {
    if (base) *s[i].field = (float *)((char *)base + off);
    off += remat__align(s[i].floats * sizeof(float));
  }
  return off / sizeof(float);
}

void remat__kernel_ws_reference(remat__kernel_ws *ws, int64_t B, int64_t T, int64_t C,
                                int64_t NH, int64_t V) {
  size_t BT = (size_t)B * (size_t)T;
  ws->attention_stats = BT * (size_t)NH;
  ws->attention_scratch = BT * (size_t)NH;
  ws->encoder_tied = BT * (size_t)C * sizeof(float) + ((size_t)V + BT) * sizeof(int32_t);
}

size_t remat__block_stored_view(remat__block_acts *a, float *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws) {
  remat__block_acts dummy;
  if (!a) a = &dummy;
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C;
  slot s[] = {
      {&a->ln1_mean, BT}, {&a->ln1_rstd, BT}, {&a->qkv, 3 * BTC},
      {&a->att_lse, ws->attention_stats}, {&a->atty, BTC}, {&a->res2, BTC},
      {&a->ln2_mean, BT}, {&a->ln2_rstd, BT}, {&a->fch, 4 * BTC},
  };
  return carve(s, (int)(sizeof s / sizeof s[0]), base);
}

size_t remat__block_cheap_view(remat__block_acts *a, float *base, int64_t B, int64_t T,
                               int64_t C) {
  remat__block_acts dummy;
  if (!a) a = &dummy;
  size_t BTC = (size_t)B * (size_t)T * (size_t)C;
  slot s[] = {{&a->ln1, BTC}, {&a->ln2, BTC}, {&a->fch_gelu, 4 * BTC}};
  return carve(s, (int)(sizeof s / sizeof s[0]), base);
}

size_t remat__block_acts_view(remat__block_acts *a, float *base, int64_t B, int64_t T,
                              int64_t C, const remat__kernel_ws *ws) {
  size_t n = remat__block_stored_view(a, base, B, T, C, ws);
  return n + remat__block_cheap_view(a, base ? base + n : NULL, B, T, C);
}

size_t remat__block_dgrads_view(remat__block_dgrads *d, float *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws) {
  remat__block_dgrads dummy;
  if (!d) d = &dummy;
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C;
  slot s[] = {
      {&d->dbranch, BTC}, {&d->d4, 4 * BTC},   {&d->dln, BTC},
      {&d->datty, BTC},   {&d->dqkv, 3 * BTC}, {&d->att_delta, ws->attention_scratch},
  };
  return carve(s, (int)(sizeof s / sizeof s[0]), base);
}

size_t remat__head_acts_view(remat__head_acts *h, float *base, int64_t B, int64_t T,
                             int64_t C) {
  remat__head_acts dummy;
  if (!h) h = &dummy;
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C;
  slot s[] = {
      {&h->lnf, BTC}, {&h->lnf_mean, BT}, {&h->lnf_rstd, BT}, {&h->losses, BT}, {&h->dlnf, BTC},
  };
  return carve(s, (int)(sizeof s / sizeof s[0]), base);
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
