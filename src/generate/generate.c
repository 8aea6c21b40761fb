/* generate.c: GPT-2 inference with a KV cache, and sampling (remat/generate.h).
 *
 * A feed runs its tokens through the blocks in rows of up to ROWS tokens:
 * matrix products with cblas_sgemm over the rows, attention row by row over
 * the cached keys and values of every earlier position (each row's own keys
 * and values are written to the cache before its attention, so a row sees
 * itself and the rows before it, never one after). Only the last row goes
 * through the final layernorm and the tied head. The arithmetic is the
 * training model's (LayerNorm eps 1e-5, tanh GELU, 1/sqrt(head size) scores,
 * the head over the real vocabulary) in plain float loops. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "remat/generate.h"

#define ROWS 64

/* A token and its logit, sorted most likely first. */
struct cand {
  float logit;
  int32_t id;
};

struct remat_generator {
  remat_config cfg;
  const float *params;          /* borrowed, llm.c order */
  size_t off[REMAT_P_COUNT];    /* offset of each tensor in params */
  int64_t cap, pos;             /* context held / used */
  float *k_cache, *v_cache;     /* (L, cap, C) each */
  float *x, *ln, *qkv, *att, *fc, *tmp; /* (ROWS, C), (ROWS, C), (ROWS, 3C), (ROWS, C), (ROWS, 4C), (ROWS, C) */
  float *scores;                /* (cap) */
  float *logits;                /* (V) after the last fed token */
  float *probs;                 /* (V) sampling scratch */
  int32_t *order;               /* (V) sampling scratch */
  struct cand *cands;           /* (V) sampling scratch: the nucleus's sort */
  int32_t *hist;                /* (cap) tokens in the cache, for sliding */
};

void remat_sample_opts_default(remat_sample_opts *o) {
  o->tokens = 64;
  o->temperature = 1.0;
  o->top_k = 0;
  o->seed = 1337;
  o->top_p = 1.0;
}

int remat_generator_create(remat_generator **out, const remat_config *cfg, const float *params,
                           int64_t max_len, remat_error *err) {
  *out = NULL;
  int rc = remat_config_check(cfg, err);
  if (rc) return rc;
  if (!params) return remat__errorf(err, REMAT_EINVAL, "the generator needs weights");
  remat_generator *g = calloc(1, sizeof *g);
  if (!g) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the generator");
  g->cfg = *cfg;
  g->params = params;
  size_t sizes[REMAT_P_COUNT], o = 0;
  remat_param_sizes(cfg, sizes);
  for (int t = 0; t < REMAT_P_COUNT; t++) {
    g->off[t] = o;
    o += sizes[t];
  }
  g->cap = max_len <= 0 || max_len > cfg->max_seq_len ? cfg->max_seq_len : max_len;
  if (g->cap < 2) {
    free(g);
    return remat__errorf(err, REMAT_EINVAL, "a context of %lld tokens cannot generate",
                         (long long)max_len);
  }
  size_t L = (size_t)cfg->num_layers, C = (size_t)cfg->channels, V = (size_t)cfg->vocab_size;
  size_t cache = L * (size_t)g->cap * C;
  g->k_cache = malloc(cache * sizeof(float));
  g->v_cache = malloc(cache * sizeof(float));
  g->x = malloc(ROWS * C * sizeof(float));
  g->ln = malloc(ROWS * C * sizeof(float));
  g->qkv = malloc(ROWS * 3 * C * sizeof(float));
  g->att = malloc(ROWS * C * sizeof(float));
  g->fc = malloc(ROWS * 4 * C * sizeof(float));
  g->tmp = malloc(ROWS * C * sizeof(float));
  g->scores = malloc((size_t)g->cap * sizeof(float));
  g->logits = calloc(V, sizeof(float));
  g->probs = malloc(V * sizeof(float));
  g->order = malloc(V * sizeof(int32_t));
  g->cands = malloc(V * sizeof *g->cands);
  g->hist = malloc((size_t)g->cap * sizeof(int32_t));
  if (!g->k_cache || !g->v_cache || !g->x || !g->ln || !g->qkv || !g->att || !g->fc || !g->tmp ||
      !g->scores || !g->logits || !g->probs || !g->order || !g->cands || !g->hist) {
    char b[32];
    remat_generator_destroy(g);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory for the generator's cache of %s",
                         remat_format_bytes(2 * cache * sizeof(float), b, sizeof b));
  }
  *out = g;
  return 0;
}

void remat_generator_destroy(remat_generator *g) {
  if (!g) return;
  free(g->k_cache);
  free(g->v_cache);
  free(g->x);
  free(g->ln);
  free(g->qkv);
  free(g->att);
  free(g->fc);
  free(g->tmp);
  free(g->scores);
  free(g->logits);
  free(g->probs);
  free(g->order);
  free(g->cands);
  free(g->hist);
  free(g);
}

void remat_generator_reset(remat_generator *g) { g->pos = 0; }
int64_t remat_generator_pos(const remat_generator *g) { return g->pos; }
int64_t remat_generator_capacity(const remat_generator *g) { return g->cap; }
const float *remat_generator_logits(const remat_generator *g) { return g->logits; }

/* ------------------------------------------------------------- forward */

static void layernorm(float *out, const float *in, const float *w, const float *b, int64_t C) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < C; i++) mean += in[i];
  mean /= (double)C;
  for (int64_t i = 0; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
  var /= (double)C;
  float rstd = (float)(1.0 / sqrt(var + 1e-5));
  for (int64_t i = 0; i < C; i++) out[i] = ((float)(in[i] - mean)) * rstd * w[i] + b[i];
}

/* out (m, N) = in (m, K) W^T + bias, W (N, K) */
static void linear(float *out, const float *in, const float *W, const float *bias, int64_t m,
                   int64_t N, int64_t K) {
  for (int64_t r = 0; r < m; r++) memcpy(out + r * N, bias, (size_t)N * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)N, (int)K, 1.0f, in, (int)K,
              W, (int)K, 1.0f, out, (int)N);
}

/* Attention of row r (position p) of one layer: every head over cache
 * positions 0..p. */
static void attend(remat_generator *g, int64_t l, const float *q_row, float *out_row, int64_t p) {
  int64_t C = g->cfg.channels, NH = g->cfg.num_heads, hs = C / NH;
  const float *K = g->k_cache + (size_t)l * (size_t)g->cap * (size_t)C;
  const float *Vc = g->v_cache + (size_t)l * (size_t)g->cap * (size_t)C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int64_t h = 0; h < NH; h++) {
    const float *q = q_row + h * hs;
    float mx = -INFINITY;
    for (int64_t t = 0; t <= p; t++) {
      const float *k = K + t * C + h * hs;
      float s = 0;
      for (int64_t i = 0; i < hs; i++) s += q[i] * k[i];
      s *= scale;
      g->scores[t] = s;
      if (s > mx) mx = s;
    }
    float sum = 0;
    for (int64_t t = 0; t <= p; t++) {
      g->scores[t] = expf(g->scores[t] - mx);
      sum += g->scores[t];
    }
    float inv = 1.0f / sum;
    float *o = out_row + h * hs;
    memset(o, 0, (size_t)hs * sizeof(float));
    for (int64_t t = 0; t <= p; t++) {
      const float *v = Vc + t * C + h * hs;
      float w = g->scores[t] * inv;
      for (int64_t i = 0; i < hs; i++) o[i] += w * v[i];
    }
  }
}

static float gelu(float x) {
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* Rows tok[0..m) at positions g->pos ..; leaves the last row's logits. */
static void feed_rows(remat_generator *g, const int32_t *tok, int64_t m) {
  const remat_config *c = &g->cfg;
  int64_t C = c->channels, L = c->num_layers, p0 = g->pos;
  const float *P = g->params;
  const float *wte = P + g->off[REMAT_P_WTE], *wpe = P + g->off[REMAT_P_WPE];
  for (int64_t r = 0; r < m; r++)
    for (int64_t i = 0; i < C; i++)
      g->x[r * C + i] = wte[(size_t)tok[r] * (size_t)C + i] + wpe[(p0 + r) * C + i];
  for (int64_t l = 0; l < L; l++) {
    const float *ln1w = P + g->off[REMAT_P_LN1W] + l * C, *ln1b = P + g->off[REMAT_P_LN1B] + l * C;
    const float *qkvw = P + g->off[REMAT_P_QKVW] + (size_t)l * 3 * C * C;
    const float *qkvb = P + g->off[REMAT_P_QKVB] + l * 3 * C;
    const float *aw = P + g->off[REMAT_P_ATTPROJW] + (size_t)l * C * C;
    const float *ab = P + g->off[REMAT_P_ATTPROJB] + l * C;
    const float *ln2w = P + g->off[REMAT_P_LN2W] + l * C, *ln2b = P + g->off[REMAT_P_LN2B] + l * C;
    const float *fcw = P + g->off[REMAT_P_FCW] + (size_t)l * 4 * C * C;
    const float *fcb = P + g->off[REMAT_P_FCB] + l * 4 * C;
    const float *pw = P + g->off[REMAT_P_FCPROJW] + (size_t)l * 4 * C * C;
    const float *pb = P + g->off[REMAT_P_FCPROJB] + l * C;
    float *Kc = g->k_cache + (size_t)l * (size_t)g->cap * (size_t)C;
    float *Vc = g->v_cache + (size_t)l * (size_t)g->cap * (size_t)C;

    for (int64_t r = 0; r < m; r++) layernorm(g->ln + r * C, g->x + r * C, ln1w, ln1b, C);
    linear(g->qkv, g->ln, qkvw, qkvb, m, 3 * C, C);
    for (int64_t r = 0; r < m; r++) {
      memcpy(Kc + (p0 + r) * C, g->qkv + r * 3 * C + C, (size_t)C * sizeof(float));
      memcpy(Vc + (p0 + r) * C, g->qkv + r * 3 * C + 2 * C, (size_t)C * sizeof(float));
    }
    for (int64_t r = 0; r < m; r++) attend(g, l, g->qkv + r * 3 * C, g->att + r * C, p0 + r);
    linear(g->tmp, g->att, aw, ab, m, C, C);
    for (int64_t i = 0; i < m * C; i++) g->x[i] += g->tmp[i];

    for (int64_t r = 0; r < m; r++) layernorm(g->ln + r * C, g->x + r * C, ln2w, ln2b, C);
    linear(g->fc, g->ln, fcw, fcb, m, 4 * C, C);
    for (int64_t i = 0; i < m * 4 * C; i++) g->fc[i] = gelu(g->fc[i]);
    linear(g->tmp, g->fc, pw, pb, m, C, 4 * C);
    for (int64_t i = 0; i < m * C; i++) g->x[i] += g->tmp[i];
  }
  float *last = g->ln;
  layernorm(last, g->x + (m - 1) * C, P + g->off[REMAT_P_LNFW], P + g->off[REMAT_P_LNFB], C);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)c->vocab_size, (int)C, 1.0f, wte, (int)C, last, 1,
              0.0f, g->logits, 1);
  memmove(g->hist + p0, tok, (size_t)m * sizeof *tok); /* tok may be hist itself */
  g->pos += m;
}

int remat_generator_feed(remat_generator *g, const int32_t *tokens, int64_t n, remat_error *err) {
  if (n <= 0) return 0;
  if (g->pos + n > g->cap)
    return remat__errorf(err, REMAT_ERANGE,
                         "%lld tokens after %lld do not fit a context of %lld: reset, or feed fewer",
                         (long long)n, (long long)g->pos, (long long)g->cap);
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= g->cfg.vocab_size)
      return remat__errorf(err, REMAT_ERANGE, "token %lld is %d, outside the vocabulary 0..%lld",
                           (long long)i, tokens[i], (long long)g->cfg.vocab_size - 1);
  for (int64_t at = 0; at < n; at += ROWS) feed_rows(g, tokens + at, n - at < ROWS ? n - at : ROWS);
  return 0;
}

/* ------------------------------------------------------------- sampling */

/* Logit order: larger first, the lower id on ties. */
static int before(const float *lg, int32_t a, int32_t b) {
  return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
}

static int cand_before(const void *a, const void *b) {
  const struct cand *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* The candidates' ids into ord: the k most likely, most likely first (ties
 * toward the lower id); all V in id order when k is V and no nucleus needs
 * them sorted. Returns how many. */
static int64_t candidates(remat_generator *g, int64_t k, int sorted) {
  const float *lg = g->logits;
  int64_t V = g->cfg.vocab_size, n = 0;
  int32_t *ord = g->order;
  if (k == V && !sorted) {
    for (int32_t i = 0; i < V; i++) ord[n++] = i;
  } else if (k == V || k > 64) {
    for (int32_t i = 0; i < V; i++) g->cands[i] = (struct cand){lg[i], i};
    qsort(g->cands, (size_t)V, sizeof *g->cands, cand_before);
    for (n = 0; n < k; n++) ord[n] = g->cands[n].id;
  } else {
    /* The k best by insertion into a sorted prefix: k is small. */
    for (int32_t i = 0; i < V; i++) {
      if (n == k && !before(lg, i, ord[n - 1])) continue;
      int64_t j = n < k ? n++ : k - 1;
      while (j > 0 && before(lg, i, ord[j - 1])) {
        ord[j] = ord[j - 1];
        j--;
      }
      ord[j] = i;
    }
  }
  return n;
}

int32_t remat_generator_draw(remat_generator *g, const remat_sample_opts *o, uint64_t *rng) {
  const float *lg = g->logits;
  int64_t V = g->cfg.vocab_size;
  double u = (double)(remat__splitmix64(rng) >> 11) * 0x1.0p-53; /* [0, 1) */
  if (o->temperature <= 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
      if (before(lg, i, best)) best = i;
    return best;
  }
  int nucleus = o->top_p > 0 && o->top_p < 1;
  int64_t k = o->top_k <= 0 || o->top_k > V ? V : o->top_k;
  int64_t n = candidates(g, k, nucleus);
  const int32_t *ord = g->order;
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++)
    if (lg[ord[j]] > mx) mx = lg[ord[j]];
  double sum = 0;
  for (int64_t j = 0; j < n; j++) {
    g->probs[j] = (float)exp((lg[ord[j]] - mx) / o->temperature);
    sum += g->probs[j];
  }
  if (nucleus) { /* the fewest most likely whose share reaches top_p */
    double want = o->top_p * sum, acc = 0;
    int64_t m = 0;
    while (m < n && (m == 0 || acc < want)) acc += g->probs[m++];
    n = m;
    sum = acc;
  }
  double target = u * sum, acc = 0;
  for (int64_t j = 0; j < n; j++) {
    acc += g->probs[j];
    if (target < acc) return ord[j];
  }
  return ord[n - 1];
}

int32_t remat_generator_sample(remat_generator *g, double temperature, int64_t top_k,
                               uint64_t *rng) {
  remat_sample_opts o = {.temperature = temperature, .top_k = top_k, .top_p = 1};
  return remat_generator_draw(g, &o, rng);
}

int remat_generate(remat_generator *g, const int32_t *prompt, int64_t n_prompt,
                   const remat_sample_opts *o, int32_t *out, int64_t *n_out, remat_token_cb cb,
                   void *ctx, remat_error *err) {
  if (n_out) *n_out = 0;
  if (n_prompt < 1) return remat__errorf(err, REMAT_EINVAL, "generation needs a prompt of at least one token");
  if (o->tokens < 0 || !(o->temperature >= 0) || o->top_k < 0 || !(o->top_p >= 0 && o->top_p <= 1))
    return remat__errorf(err, REMAT_EINVAL, "sampling options out of range (tokens %lld, "
                         "temperature %g, top-k %lld, top-p %g in [0, 1])", (long long)o->tokens,
                         o->temperature, (long long)o->top_k, o->top_p);
  remat_generator_reset(g);
  int64_t skip = n_prompt > g->cap - 1 ? n_prompt - (g->cap - 1) : 0;
  int rc = remat_generator_feed(g, prompt + skip, n_prompt - skip, err);
  if (rc) return rc;
  uint64_t rng = o->seed;
  for (int64_t i = 0; i < o->tokens; i++) {
    int32_t t = remat_generator_draw(g, o, &rng);
    if (out) out[i] = t;
    if (n_out) *n_out = i + 1;
    if (cb && cb(ctx, t)) break;
    if (i + 1 == o->tokens) break;
    if (g->pos == g->cap) {
      /* Slide: the newest half of the context again from position 0. */
      int64_t keep = g->cap / 2;
      memmove(g->hist, g->hist + g->pos - keep, (size_t)keep * sizeof *g->hist);
      g->pos = 0;
      if ((rc = remat_generator_feed(g, g->hist, keep, err))) return rc;
    }
    if ((rc = remat_generator_feed(g, &t, 1, err))) return rc;
  }
  return 0;
}

int remat_generate_once(const remat_config *cfg, const float *params, const int32_t *prompt,
                        int64_t n_prompt, const remat_sample_opts *o, int32_t *out,
                        int64_t *n_out, remat_error *err) {
  remat_generator *g;
  int rc = remat_generator_create(&g, cfg, params, 0, err);
  if (rc) return rc;
  rc = remat_generate(g, prompt, n_prompt, o, out, n_out, NULL, NULL, err);
  remat_generator_destroy(g);
  return rc;
}
