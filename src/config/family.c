/* family.c: the families' parameter tables (config/family.h). */
#include "config/family.h"
#include "base/base.h"

const char *remat_family_name(int f) {
  static const char *const names[REMAT_FAMILY_COUNT] = {"gpt2", "llama"};
  return f >= 0 && f < REMAT_FAMILY_COUNT ? names[f] : "?";
}

bool remat__tied(const remat_config *cfg) {
  return cfg->family != REMAT_FAMILY_LLAMA || !cfg->untied;
}

int64_t remat__kv_width(const remat_config *cfg) {
  if (cfg->family != REMAT_FAMILY_LLAMA) return cfg->channels;
  return cfg->kv_heads * (cfg->channels / cfg->num_heads);
}

int64_t remat__kv_rank_width(const remat_config *cfg) {
  int64_t tp = remat__tp(cfg), kvh = cfg->family == REMAT_FAMILY_LLAMA ? cfg->kv_heads : cfg->num_heads;
  return kvh % tp ? remat__kv_width(cfg) : remat__kv_width(cfg) / tp;
}

int64_t remat__mlp_width(const remat_config *cfg) {
  return cfg->family == REMAT_FAMILY_LLAMA ? cfg->ffn_hidden : 4 * cfg->channels;
}

int remat__head_tensor(const remat_config *cfg) {
  if (cfg->family != REMAT_FAMILY_LLAMA) return REMAT_P_WTE;
  return remat__tied(cfg) ? REMAT_LP_EMB : REMAT_LP_CLS;
}

#define T_(nm, w, r, c, mx, dc, tie, in)                                                    \
  (remat__tensor) {                                                                         \
    .name = (nm), .where = (w), .rows = (r), .cols = (c), .matrix = (mx), .decay = (dc),     \
    .tied = (tie), .init = (in)                                                             \
  }
enum { ROWS = REMAT__SPLIT_ROWS, COLS = REMAT__SPLIT_COLS };

static int gpt2(const remat_config *c, remat__tensor t[REMAT_P_COUNT]) {
  int64_t C = c->channels, Vp = c->padded_vocab_size, maxT = c->max_seq_len;
  const int E = REMAT__IN_EMBEDDING, B = REMAT__IN_BLOCK, H = REMAT__IN_HEAD;
  const int N = REMAT__INIT_NORMAL, R = REMAT__INIT_RESIDUAL, O = REMAT__INIT_ONES,
            Z = REMAT__INIT_ZEROS;
  t[REMAT_P_WTE] = T_("wte", E, Vp, C, true, true, true, N);
  t[REMAT_P_WPE] = T_("wpe", E, maxT, C, false, true, false, N);
  t[REMAT_P_LN1W] = T_("ln1w", B, C, 1, false, false, false, O);
  t[REMAT_P_LN1B] = T_("ln1b", B, C, 1, false, false, false, Z);
  t[REMAT_P_QKVW] = T_("qkvw", B, 3 * C, C, true, true, false, N);
  t[REMAT_P_QKVB] = T_("qkvb", B, 3 * C, 1, false, false, false, Z);
  t[REMAT_P_ATTPROJW] = T_("attprojw", B, C, C, true, true, false, R);
  t[REMAT_P_ATTPROJB] = T_("attprojb", B, C, 1, false, false, false, Z);
  t[REMAT_P_LN2W] = T_("ln2w", B, C, 1, false, false, false, O);
  t[REMAT_P_LN2B] = T_("ln2b", B, C, 1, false, false, false, Z);
  t[REMAT_P_FCW] = T_("fcw", B, 4 * C, C, true, true, false, N);
  t[REMAT_P_FCB] = T_("fcb", B, 4 * C, 1, false, false, false, Z);
  t[REMAT_P_FCPROJW] = T_("fcprojw", B, C, 4 * C, true, true, false, R);
  t[REMAT_P_FCPROJB] = T_("fcprojb", B, C, 1, false, false, false, Z);
  t[REMAT_P_LNFW] = T_("lnfw", H, C, 1, false, false, false, O);
  t[REMAT_P_LNFB] = T_("lnfb", H, C, 1, false, false, false, Z);
  t[REMAT_P_WTE].split = t[REMAT_P_QKVW].split = t[REMAT_P_QKVB].split = ROWS;
  t[REMAT_P_FCW].split = t[REMAT_P_FCB].split = ROWS;
  t[REMAT_P_ATTPROJW].split = t[REMAT_P_FCPROJW].split = COLS;
  t[REMAT_P_LN1W].norm = t[REMAT_P_LN1B].norm = t[REMAT_P_LN2W].norm = true;
  t[REMAT_P_LN2B].norm = t[REMAT_P_LNFW].norm = t[REMAT_P_LNFB].norm = true;
  return REMAT_P_COUNT;
}

static int llama(const remat_config *c, remat__tensor t[REMAT_P_COUNT]) {
  int64_t C = c->channels, Vp = c->padded_vocab_size, KV = remat__kv_width(c),
          Hd = c->ffn_hidden;
  bool tied = remat__tied(c);
  const int E = REMAT__IN_EMBEDDING, B = REMAT__IN_BLOCK, H = REMAT__IN_HEAD;
  const int N = REMAT__INIT_NORMAL, R = REMAT__INIT_RESIDUAL, O = REMAT__INIT_ONES;
  t[REMAT_LP_EMB] = T_("tok_embeddings", E, Vp, C, tied, true, tied, N);
  t[REMAT_LP_ATTNORM] = T_("attention_norm", B, C, 1, false, false, false, O);
  t[REMAT_LP_WQ] = T_("wq", B, C, C, true, true, false, N);
  t[REMAT_LP_WK] = T_("wk", B, KV, C, true, true, false, N);
  t[REMAT_LP_WV] = T_("wv", B, KV, C, true, true, false, N);
  t[REMAT_LP_WO] = T_("wo", B, C, C, true, true, false, R);
  t[REMAT_LP_FFNNORM] = T_("ffn_norm", B, C, 1, false, false, false, O);
  t[REMAT_LP_W1] = T_("w1", B, Hd, C, true, true, false, N);
  t[REMAT_LP_W2] = T_("w2", B, C, Hd, true, true, false, R);
  t[REMAT_LP_W3] = T_("w3", B, Hd, C, true, true, false, N);
  t[REMAT_LP_NORM] = T_("norm", H, C, 1, false, false, false, O);
  t[REMAT_LP_CLS] = T_("output", H, tied ? 0 : Vp, C, !tied, true, false, N);
  t[REMAT_LP_EMB].split = t[REMAT_LP_CLS].split = t[REMAT_LP_WQ].split = ROWS;
  t[REMAT_LP_W1].split = t[REMAT_LP_W3].split = ROWS;
  /* key/value heads split where the degree divides them, else whole */
  if (c->kv_heads % remat__tp(c) == 0) t[REMAT_LP_WK].split = t[REMAT_LP_WV].split = ROWS;
  t[REMAT_LP_WO].split = t[REMAT_LP_W2].split = COLS;
  t[REMAT_LP_ATTNORM].norm = t[REMAT_LP_FFNNORM].norm = t[REMAT_LP_NORM].norm = true;
  return REMAT_LP_COUNT;
}

int remat__tensors(const remat_config *cfg, remat__tensor t[REMAT_P_COUNT]) {
  int n = cfg->family == REMAT_FAMILY_LLAMA ? llama(cfg, t) : gpt2(cfg, t);
  for (int i = n; i < REMAT_P_COUNT; i++)
    t[i] = T_("", REMAT__IN_HEAD, 0, 0, false, false, false, REMAT__INIT_ZEROS);
  int64_t tp = remat__tp(cfg); /* one tensor rank's share */
  for (int i = 0; i < n; i++) {
    if (t[i].split == ROWS) t[i].rows /= tp;
    if (t[i].split == COLS) t[i].cols /= tp;
  }
  return n;
}

void remat__tensor_shard_runs(const remat_config *cfg, int i, int64_t rank, int64_t first,
                              int64_t count, remat__run_fn fn, void *ctx) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  const remat__tensor *x = &t[i];
  int block = x->where == REMAT__IN_BLOCK;
  int64_t tp = remat__tp(cfg), slices = block ? count : 1, l0 = block ? first : 0;
  size_t R = (size_t)x->rows, K = (size_t)x->cols, size = R * K;
  if (!size) return;
  if (tp == 1 || x->split == REMAT__SPLIT_NONE) {
    fn(ctx, 0, (size_t)l0 * size, size * (size_t)slices);
    return;
  }
  /* GPT-2's qkv holds q, k and v one after another: each is split */
  size_t groups = cfg->family != REMAT_FAMILY_LLAMA &&
                          (i == REMAT_P_QKVW || i == REMAT_P_QKVB) ? 3 : 1;
  size_t whole = size * (size_t)tp, r = (size_t)rank;
  for (size_t l = 0; l < (size_t)slices; l++) {
    size_t at = l * size, wat = (l + (size_t)l0) * whole;
    if (x->split == REMAT__SPLIT_ROWS) {
      size_t rg = R / groups; /* rows of a group a rank holds */
      for (size_t g = 0; g < groups; g++)
        fn(ctx, at + g * rg * K, wat + (g * rg * (size_t)tp + r * rg) * K, rg * K);
    } else {
      for (size_t row = 0; row < R; row++)
        fn(ctx, at + row * K, wat + row * K * (size_t)tp + r * K, K);
    }
  }
}

/* remat__tensor_range_runs: one block's runs, cut to the range */
typedef struct {
  size_t lo, hi, base; /* the range, and the block's first element */
  remat__run_fn fn;
  void *ctx;
} range_cut;

static void cut_run(void *ctx, size_t at, size_t whole_at, size_t n) {
  range_cut *c = ctx;
  size_t a = c->base + at, b = a + n;
  size_t lo = a > c->lo ? a : c->lo, hi = b < c->hi ? b : c->hi;
  if (lo < hi) c->fn(c->ctx, lo - c->lo, whole_at + (lo - a), hi - lo);
}

void remat__tensor_range_runs(const remat_config *cfg, int i, int64_t rank, size_t first,
                              size_t n, remat__run_fn fn, void *ctx) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  size_t size = (size_t)t[i].rows * (size_t)t[i].cols;
  if (!n || !size) return;
  range_cut c = {first, first + n, 0, fn, ctx};
  if (t[i].where != REMAT__IN_BLOCK) {
    remat__tensor_shard_runs(cfg, i, rank, 0, 1, cut_run, &c);
    return;
  }
  for (size_t l = first / size; l <= (first + n - 1) / size; l++) {
    c.base = l * size;
    remat__tensor_shard_runs(cfg, i, rank, (int64_t)l, 1, cut_run, &c);
  }
}
