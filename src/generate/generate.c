/* generate.c: text generation with a KV cache, and sampling
 * (remat/generate.h). The forward is the model's decode (model/decode.h):
 * the training model's ops on the backend, over a KV cache in a region the
 * memory model plans; this file knows no family. It feeds tokens in rows
 * of up to ROWS, keeps the fed ids for sliding the context, and draws the
 * next token from the logits.
 *
 * The host meets the backend's memory in two places only, both through
 * the backend's crossings: to_backend (the weights of a generator that
 * holds its own copy, a feed's token ids) and from_backend (the logits
 * after a feed, which sampling reads on the host). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/decode.h"
#include "remat/generate.h"

#define ROWS 64

/* A token and its logit, sorted most likely first. */
struct cand {
  float logit;
  int32_t id;
};

struct remat_generator {
  remat_config cfg;
  remat__decoder dec;           /* the forward, its weights and its cache */
  int64_t cap, pos;             /* context held / used */
  /* host memory: */
  float *logits;                /* (V) after the last fed token */
  float *probs;                 /* (V) sampling scratch */
  int32_t *order;               /* (V) sampling scratch */
  struct cand *cands;           /* (V) sampling scratch: the nucleus's sort */
  int32_t *hist;                /* (cap) tokens in the cache, for sliding */
};

/* The crossings between host memory and the backend's (its upload and
 * download), the only places this file touches the region. */
static void to_backend(const remat__backend *be, void *dst, const void *src, size_t bytes) {
  be->upload(dst, src, bytes);
}

static void from_backend(const remat__backend *be, void *dst, const void *src, size_t bytes) {
  be->download(dst, src, bytes);
}

void remat_sample_opts_default(remat_sample_opts *o) {
  o->tokens = 64;
  o->temperature = 1.0;
  o->top_k = 0;
  o->seed = 1337;
  o->top_p = 1.0;
}

/* The context a generator holds for max_len; REMAT_EINVAL below 2. */
static int context(const remat_config *cfg, int64_t max_len, int64_t *cap, remat_error *err) {
  *cap = max_len <= 0 || max_len > cfg->max_seq_len ? cfg->max_seq_len : max_len;
  if (*cap < 2)
    return remat__errorf(err, REMAT_EINVAL, "a context of %lld tokens cannot generate",
                         (long long)max_len);
  return 0;
}

/* The host's part, once the decoder is made. */
static int host_part(remat_generator *g, remat_error *err) {
  size_t V = (size_t)g->cfg.vocab_size;
  g->logits = calloc(V, sizeof(float));
  g->probs = malloc(V * sizeof(float));
  g->order = malloc(V * sizeof(int32_t));
  g->cands = malloc(V * sizeof *g->cands);
  g->hist = malloc((size_t)g->cap * sizeof(int32_t));
  if (!g->logits || !g->probs || !g->order || !g->cands || !g->hist)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory for the generator's sampling");
  return 0;
}

int remat_generator_create(remat_generator **out, const remat_config *cfg, const float *params,
                           int64_t max_len, remat_error *err) {
  *out = NULL;
  int64_t cap;
  int rc = remat_config_check(cfg, err);
  if (!rc) rc = context(cfg, max_len, &cap, err);
  if (rc) return rc;
  if (!params) return remat__errorf(err, REMAT_EINVAL, "the generator needs weights");
  remat_generator *g = calloc(1, sizeof *g);
  if (!g) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the generator");
  g->cfg = *cfg;
  g->cap = cap;
  if ((rc = remat__decoder_create(&g->dec, NULL, cfg, cap, cap < ROWS ? cap : ROWS, err)) ||
      (rc = host_part(g, err))) {
    remat_generator_destroy(g);
    return rc;
  }
  to_backend(g->dec.be, g->dec.a.params, params, remat_param_count(cfg) * sizeof(float));
  *out = g;
  return 0;
}

int remat_generator_create_model(remat_generator **out, remat_model *m, int64_t max_len,
                                 remat_error *err) {
  *out = NULL;
  const remat_config *cfg = remat_model_config(m);
  int64_t cap;
  int rc = context(cfg, max_len, &cap, err);
  if (rc) return rc;
  remat_generator *g = calloc(1, sizeof *g);
  if (!g) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the generator");
  g->cfg = *cfg;
  g->cap = cap;
  if ((rc = remat__decoder_create_model(&g->dec, m, cap, cap < ROWS ? cap : ROWS, err)) ||
      (rc = host_part(g, err))) {
    remat_generator_destroy(g);
    return rc;
  }
  *out = g;
  return 0;
}

void remat_generator_destroy(remat_generator *g) {
  if (!g) return;
  remat__decoder_destroy(&g->dec);
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
size_t remat_generator_planned_bytes(const remat_generator *g) { return g->dec.bytes; }
size_t remat_generator_measured_bytes(const remat_generator *g) {
  return remat__decoder_measured_bytes(&g->dec);
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
  const remat__backend *be = g->dec.be;
  for (int64_t at = 0; at < n; at += g->dec.rows) {
    int64_t m = n - at < g->dec.rows ? n - at : g->dec.rows;
    to_backend(be, g->dec.a.tokens, tokens + at, (size_t)m * sizeof *tokens);
    remat__decoder_forward(&g->dec, g->pos, m);
    memmove(g->hist + g->pos, tokens + at, (size_t)m * sizeof *tokens); /* tokens may be hist */
    g->pos += m;
  }
  from_backend(be, g->logits, g->dec.a.logits, (size_t)g->cfg.vocab_size * sizeof(float));
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
