/* test_generate.c: generation with a KV cache. The logits after each token
 * fed one at a time (attention over the cache) must equal a plain forward
 * over the whole prefix written here without a cache, and a feed of the
 * whole prefix at once; the mean loss from them must equal the training
 * model's own forward (remat_model_eval) on the same weights; greedy
 * generation must take the plain forward's most likely token at every
 * step; sampling must be deterministic for a seed, and top-p must draw from
 * the nucleus a plain reference computes, each token as often as its share.
 * A generator over the model's own weights gives the bits of one over a
 * copy and follows the weights as they change; the region's measured bytes
 * equal its planned ones. The vocabulary (300, padded to 384) checks that
 * the padded rows never reach the logits.
 *
 * A Llama (llama-tiny untied, a tied one, one kv head) decodes with the
 * training model's arithmetic: a whole sequence fed from position 0 gives
 * the training forward's last logits bit for bit (the head's product
 * recomputed here on the training head's own RMSNorm output, checked
 * against the probabilities the training forward left); one token at a
 * time, the same logits to rounding and the training forward's loss; a
 * cache of (L, cap, 2 KV) floats, KV the kv heads' width; measured =
 * planned, over a copy of the weights and over the model's own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "model/model.h"
#include "model/model_runtime.h"
#include "test_util.h"

/* A plain GPT-2 forward over tok[0..T): logits (T, V). */
static void reference_forward(const remat_config *c, const float *P, const int32_t *tok, int64_t T,
                              float *logits) {
  size_t sz[REMAT_P_COUNT], off[REMAT_P_COUNT], o = 0;
  remat_param_sizes(c, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    off[i] = o;
    o += sz[i];
  }
  int64_t C = c->channels, NH = c->num_heads, hs = C / NH, L = c->num_layers, V = c->vocab_size;
  double *x = calloc((size_t)(T * C), sizeof *x), *h = calloc((size_t)(T * C), sizeof *h);
  double *qkv = calloc((size_t)(T * 3 * C), sizeof *qkv), *a = calloc((size_t)(T * C), sizeof *a);
  double *f = calloc((size_t)(T * 4 * C), sizeof *f), *p = calloc((size_t)T, sizeof *p);
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < C; i++)
      x[t * C + i] = P[off[REMAT_P_WTE] + tok[t] * C + i] + P[off[REMAT_P_WPE] + t * C + i];
#define LN(dst, src, W, B)                                                             \
  for (int64_t t = 0; t < T; t++) {                                                    \
    double m = 0, v = 0;                                                               \
    for (int64_t i = 0; i < C; i++) m += (src)[t * C + i];                             \
    m /= C;                                                                            \
    for (int64_t i = 0; i < C; i++) v += ((src)[t * C + i] - m) * ((src)[t * C + i] - m); \
    v /= C;                                                                            \
    for (int64_t i = 0; i < C; i++)                                                    \
      (dst)[t * C + i] = ((src)[t * C + i] - m) / sqrt(v + 1e-5) * (W)[i] + (B)[i];     \
  }
  for (int64_t l = 0; l < L; l++) {
    const float *qw = P + off[REMAT_P_QKVW] + l * 3 * C * C, *qb = P + off[REMAT_P_QKVB] + l * 3 * C;
    const float *aw = P + off[REMAT_P_ATTPROJW] + l * C * C, *ab = P + off[REMAT_P_ATTPROJB] + l * C;
    const float *fw = P + off[REMAT_P_FCW] + l * 4 * C * C, *fb = P + off[REMAT_P_FCB] + l * 4 * C;
    const float *pw = P + off[REMAT_P_FCPROJW] + l * 4 * C * C, *pb = P + off[REMAT_P_FCPROJB] + l * C;
    LN(h, x, P + off[REMAT_P_LN1W] + l * C, P + off[REMAT_P_LN1B] + l * C);
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < 3 * C; j++) {
        double s = qb[j];
        for (int64_t i = 0; i < C; i++) s += h[t * C + i] * qw[j * C + i];
        qkv[t * 3 * C + j] = s;
      }
    for (int64_t t = 0; t < T; t++)
      for (int64_t hd = 0; hd < NH; hd++) {
        double mx = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; u++) {
          double s = 0;
          for (int64_t i = 0; i < hs; i++) s += qkv[t * 3 * C + hd * hs + i] * qkv[u * 3 * C + C + hd * hs + i];
          p[u] = s / sqrt((double)hs);
          if (p[u] > mx) mx = p[u];
        }
        for (int64_t u = 0; u <= t; u++) sum += p[u] = exp(p[u] - mx);
        for (int64_t i = 0; i < hs; i++) {
          double s = 0;
          for (int64_t u = 0; u <= t; u++) s += p[u] / sum * qkv[u * 3 * C + 2 * C + hd * hs + i];
          a[t * C + hd * hs + i] = s;
        }
      }
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < C; j++) {
        double s = ab[j];
        for (int64_t i = 0; i < C; i++) s += a[t * C + i] * aw[j * C + i];
        x[t * C + j] += s;
      }
    LN(h, x, P + off[REMAT_P_LN2W] + l * C, P + off[REMAT_P_LN2B] + l * C);
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < 4 * C; j++) {
        double s = fb[j];
        for (int64_t i = 0; i < C; i++) s += h[t * C + i] * fw[j * C + i];
        f[t * 4 * C + j] = 0.5 * s * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (s + 0.044715 * s * s * s)));
      }
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < C; j++) {
        double s = pb[j];
        for (int64_t i = 0; i < 4 * C; i++) s += f[t * 4 * C + i] * pw[j * 4 * C + i];
        x[t * C + j] += s;
      }
  }
  LN(h, x, P + off[REMAT_P_LNFW], P + off[REMAT_P_LNFB]);
#undef LN
  for (int64_t t = 0; t < T; t++)
    for (int64_t v = 0; v < V; v++) {
      double s = 0;
      for (int64_t i = 0; i < C; i++) s += h[t * C + i] * P[off[REMAT_P_WTE] + v * C + i];
      logits[t * V + v] = (float)s;
    }
  free(x), free(h), free(qkv), free(a), free(f), free(p);
}

static double max_diff(const float *a, const float *b, int64_t n, double *scale) {
  double d = 0, s = 0;
  for (int64_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    s = fmax(s, fabs((double)b[i]));
  }
  *scale = s;
  return d;
}

/* The KV cache: the logits of every position fed one token at a time, all
 * at once (rows of 64) or in two pieces equal a plain forward's (ref). The
 * one-at-a-time logits go to inc. */
static void test_kv_cache(remat_generator *g, const int32_t *tok, int64_t T, int64_t V,
                          const float *ref, float *inc) {
  remat_error err;
  for (int64_t t = 0; t < T; t++) {
    CHECK(remat_generator_feed(g, tok + t, 1, &err) == 0);
    memcpy(inc + t * V, remat_generator_logits(g), (size_t)V * sizeof *inc);
  }
  CHECK(remat_generator_pos(g) == T);
  double scale, d = max_diff(inc, ref, T * V, &scale);
  CHECKF(d < 1e-4 * fmax(1, scale),
         "KV cache, one token at a time: the logits of all %lld positions equal a plain forward "
         "over each prefix (max diff %.2e, largest logit %.2f)",
         (long long)T, d, scale);

  remat_generator_reset(g);
  CHECK(remat_generator_feed(g, tok, T, &err) == 0);
  d = max_diff(remat_generator_logits(g), ref + (T - 1) * V, V, &scale);
  CHECKF(d < 1e-4 * fmax(1, scale),
         "the whole prefix fed at once (rows of 64): last logits equal (max diff %.2e)", d);
  remat_generator_reset(g);
  CHECK(remat_generator_feed(g, tok, 37, &err) == 0);
  CHECK(remat_generator_feed(g, tok + 37, T - 37, &err) == 0);
  d = max_diff(remat_generator_logits(g), ref + (T - 1) * V, V, &scale);
  CHECKF(d < 1e-4 * fmax(1, scale), "37 tokens then 63 more: last logits equal (max diff %.2e)", d);

}

/* The training model's own forward: its mean loss over the same tokens
 * equals the one from the cached logits. */
static void test_loss(remat_model *m, const int32_t *tok, const int32_t *tgt, int64_t T,
                      int64_t V, const float *inc) {
  memcpy(remat_model_inputs(m), tok, (size_t)T * sizeof *tok);
  memcpy(remat_model_targets(m), tgt, (size_t)T * sizeof *tgt);
  double loss_model = remat_model_eval(m), loss = 0;
  for (int64_t t = 0; t < T; t++) {
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, inc[t * V + v]);
    for (int64_t v = 0; v < V; v++) z += exp(inc[t * V + v] - mx);
    loss += -(inc[t * V + tgt[t]] - mx - log(z));
  }
  loss /= (double)T;
  CHECKF(fabs(loss - loss_model) < 1e-4 * fmax(1, fabs(loss)),
         "mean loss from the cached logits %.6f = the training model's forward %.6f", loss,
         loss_model);

}

/* Errors a caller can cause. */
static void test_errors(remat_generator *g, const int32_t *tok, int64_t T, int64_t V) {
  remat_error err;
  int32_t bad = (int32_t)V;
  int rc = remat_generator_feed(g, &bad, 1, &err);
  CHECK_ERR(rc, err, REMAT_ERANGE, "outside the vocabulary");
  remat_generator_reset(g);
  CHECK(remat_generator_feed(g, tok, T, &err) == 0);
  rc = remat_generator_feed(g, tok, 29, &err);
  CHECK_ERR(rc, err, REMAT_ERANGE, "do not fit");

}

/* Sampling: one seed, one text; another seed, another; greedy = top-1. */
static void test_sampling(remat_generator *g, const remat_config *cfg, const float *P,
                          const int32_t *tok, int64_t V) {
  remat_error err;
  int rc;
  remat_sample_opts o;
  remat_sample_opts_default(&o);
  o.tokens = 300; /* past the capacity of 128: the context slides */
  o.top_k = 40;
  int32_t a[300], b[300], c[300];
  int64_t na, nb, nc;
  CHECK(remat_generate(g, tok, 5, &o, a, &na, NULL, NULL, &err) == 0);
  CHECK(remat_generate(g, tok, 5, &o, b, &nb, NULL, NULL, &err) == 0);
  CHECKF(na == 300 && nb == 300 && memcmp(a, b, sizeof a) == 0,
         "two runs with seed %llu give the same 300 tokens (the context slid past 128)",
         (unsigned long long)o.seed);
  o.seed++;
  CHECK(remat_generate(g, tok, 5, &o, c, &nc, NULL, NULL, &err) == 0);
  CHECKF(memcmp(a, c, sizeof a) != 0, "another seed gives other tokens");
  int in_range = 1;
  for (int i = 0; i < 300; i++) in_range &= a[i] >= 0 && a[i] < V;
  CHECKF(in_range, "every sampled token is below V = %lld (never a padded row)", (long long)V);
  o.temperature = 0;
  CHECK(remat_generate(g, tok, 5, &o, a, &na, NULL, NULL, &err) == 0);
  o.temperature = 1;
  o.top_k = 1;
  CHECK(remat_generate(g, tok, 5, &o, b, &nb, NULL, NULL, &err) == 0);
  CHECKF(memcmp(a, b, sizeof a) == 0, "temperature 0 and top-k 1 both take the most likely token");
  CHECK(remat_generate_once(cfg, P, tok, 5, &o, c, &nc, &err) == 0);
  CHECKF(memcmp(b, c, sizeof b) == 0, "remat_generate_once gives the generator's tokens");
  rc = remat_generate(g, tok, 0, &o, a, &na, NULL, NULL, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "prompt");

}

/* Top-p against a plain reference: the nucleus from the logits in double
 * (softmax at temperature T of the k most likely, sorted, the fewest whose
 * share reaches P); every draw falls in it, each token about as often as
 * its share of the nucleus; P = 1 (or 0) draws what remat_generator_sample
 * draws, a tiny P the most likely token. */
static void test_top_p(remat_generator *g, const int32_t *tok, int64_t V) {
  remat_error err;
  remat_generator_reset(g);
  CHECK(remat_generator_feed(g, tok, 5, &err) == 0);
  const float *lg = remat_generator_logits(g);
  int32_t *ord = malloc((size_t)V * sizeof *ord);
  double *p = malloc((size_t)V * sizeof *p);
  int64_t *count = malloc((size_t)V * sizeof *count);
  const struct {
    double T, P;
    int64_t k;
  } cases[] = {{1.0, 0.5, 0}, {0.7, 0.9, 0}, {0.2, 0.6, 0}, {1.0, 0.8, 40}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    double T = cases[c].T, P = cases[c].P;
    int64_t k = cases[c].k ? cases[c].k : V;
    for (int64_t i = 0; i < V; i++) ord[i] = (int32_t)i;
    for (int64_t i = 1; i < V; i++) /* insertion sort: larger logit first, lower id on ties */
      for (int64_t j = i; j > 0 && (lg[ord[j]] > lg[ord[j - 1]] ||
                                    (lg[ord[j]] == lg[ord[j - 1]] && ord[j] < ord[j - 1])); j--) {
        int32_t t = ord[j];
        ord[j] = ord[j - 1];
        ord[j - 1] = t;
      }
    double z = 0, acc = 0, near = 1;
    for (int64_t j = 0; j < k; j++) z += p[j] = exp((lg[ord[j]] - lg[ord[0]]) / T);
    int64_t m = 0;
    while (m < k && (m == 0 || acc < P * z)) {
      near = fmin(near, fabs(acc / z - P));
      acc += p[m++];
    }
    near = fmin(near, fabs(acc / z - P));
    const int64_t N = 20000;
    memset(count, 0, (size_t)V * sizeof *count);
    remat_sample_opts o = {.temperature = T, .top_k = cases[c].k, .top_p = P};
    uint64_t rng = 99;
    for (int64_t i = 0; i < N; i++) count[remat_generator_draw(g, &o, &rng)]++;
    int64_t inside = 0;
    double worst = 0; /* the largest gap between a share and its frequency, in sigmas */
    for (int64_t j = 0; j < m; j++) {
      double q = p[j] / acc, f = (double)count[ord[j]] / (double)N;
      inside += count[ord[j]];
      worst = fmax(worst, fabs(f - q) / sqrt(q * (1 - q) / (double)N + 1e-12));
    }
    CHECKF(near > 1e-6 && inside == N && worst < 5,
           "top-p %.2f at temperature %.1f, top-k %lld: %lld of %lld draws in the reference's "
           "nucleus of %lld tokens, frequencies within %.1f sigma of their shares",
           P, T, (long long)cases[c].k, (long long)inside, (long long)N, (long long)m, worst);
  }
  uint64_t r1 = 7, r2 = 7, r3 = 7, r4 = 7;
  int same = 1, greedy = 1;
  int32_t best = ord[0]; /* the last case sorted every token */
  for (int i = 0; i < 200; i++) {
    remat_sample_opts one = {.temperature = 0.8, .top_k = 0, .top_p = 1};
    remat_sample_opts zero = {.temperature = 0.8, .top_k = 0, .top_p = 0};
    int32_t a = remat_generator_sample(g, 0.8, 0, &r1);
    same &= a == remat_generator_draw(g, &one, &r2) && a == remat_generator_draw(g, &zero, &r3);
    remat_sample_opts tiny = {.temperature = 1, .top_p = 1e-9};
    greedy &= remat_generator_draw(g, &tiny, &r4) == best;
  }
  CHECKF(same, "top-p 1 and 0 draw what remat_generator_sample draws (200 draws)");
  CHECKF(greedy, "top-p 1e-9 always takes the most likely token");
  remat_sample_opts bad;
  remat_sample_opts_default(&bad);
  CHECK(bad.top_p == 1.0);
  bad.top_p = 1.5;
  int rc = remat_generate(g, tok, 5, &bad, NULL, NULL, NULL, NULL, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "top-p");
  free(ord);
  free(p);
  free(count);
}

/* Greedy generation against the plain forward: at each of n steps the
 * token the generator takes is the most likely one of the reference's
 * logits over the prefix so far (and no near tie makes that fragile). */
static void test_greedy(remat_generator *g, const remat_config *cfg, const float *P,
                        const int32_t *tok, int64_t V) {
  enum { NP = 5, NG = 40 };
  remat_error err;
  remat_sample_opts o;
  remat_sample_opts_default(&o);
  o.tokens = NG;
  o.temperature = 0;
  int32_t seq[NP + NG], out[NG];
  int64_t n = 0;
  memcpy(seq, tok, NP * sizeof *seq);
  CHECK(remat_generate(g, tok, NP, &o, out, &n, NULL, NULL, &err) == 0 && n == NG);
  float *lg = malloc((size_t)((NP + NG) * V) * sizeof *lg);
  int agree = 1;
  double gap = INFINITY; /* the smallest lead of the reference's best over its second */
  for (int64_t i = 0; i < NG; i++) {
    reference_forward(cfg, P, seq, NP + i, lg);
    const float *last = lg + (NP + i - 1) * V;
    int32_t best = 0;
    for (int32_t v = 1; v < V; v++)
      if (last[v] > last[best]) best = v;
    double second = -INFINITY;
    for (int32_t v = 0; v < V; v++)
      if (v != best) second = fmax(second, last[v]);
    gap = fmin(gap, last[best] - second);
    agree &= out[i] == best;
    seq[NP + i] = best;
  }
  CHECKF(agree && gap > 1e-5,
         "greedy: the %d tokens after a prompt of %d are the plain forward's most likely at "
         "every step (its smallest lead %.2e)", NG, NP, gap);
  free(lg);
}

/* A generator over the model's own weights: the bits of one over a copy,
 * a region smaller by the copy's bytes, measured = planned, and logits that
 * follow the weights when they change; a pipeline stage is refused. */
static void test_model_generator(remat_model *m, remat_generator *g, const remat_config *cfg,
                                 const int32_t *tok) {
  remat_error err;
  remat_generator *mg;
  int64_t V = cfg->vocab_size;
  CHECK(remat_generator_create_model(&mg, m, 0, &err) == 0);
  remat_generator_reset(g);
  CHECK(remat_generator_feed(g, tok, 70, &err) == 0);
  CHECK(remat_generator_feed(mg, tok, 70, &err) == 0);
  CHECKF(memcmp(remat_generator_logits(g), remat_generator_logits(mg), (size_t)V * sizeof(float)) == 0,
         "a generator over the model's weights gives the logits of one over a copy, bit for bit");
  size_t copy = remat__align(remat_param_count(cfg) * sizeof(float));
  size_t pg = remat_generator_planned_bytes(g), pm = remat_generator_planned_bytes(mg);
  CHECKF(pg == pm + copy, "its region (%zu bytes) is the copy's %zu bytes (%zu) smaller", pm, pg,
         copy);
  CHECKF(remat_generator_measured_bytes(g) == pg && remat_generator_measured_bytes(mg) == pm,
         "measured = planned: %zu = %zu bytes (own weights), %zu = %zu (the model's)",
         remat_generator_measured_bytes(g), pg, remat_generator_measured_bytes(mg), pm);
  float *before = malloc((size_t)V * sizeof *before);
  memcpy(before, remat_generator_logits(mg), (size_t)V * sizeof *before);
  float *P = remat_model_params(m);
  size_t np = remat_param_count(cfg);
  for (size_t i = np - 2 * (size_t)cfg->channels; i < np; i++) P[i] *= 1.5f; /* lnf */
  remat_generator_reset(mg);
  CHECK(remat_generator_feed(mg, tok, 70, &err) == 0);
  CHECKF(memcmp(before, remat_generator_logits(mg), (size_t)V * sizeof(float)) != 0,
         "it reads the model's weights at every feed: new final layernorm, new logits");
  for (size_t i = np - 2 * (size_t)cfg->channels; i < np; i++) P[i] /= 1.5f;
  free(before);
  remat_generator_destroy(mg);

  remat_stage st = remat_stage_whole(cfg, NULL);
  st.num_blocks = 1;
  st.has_head = 0;
  remat_model *sm;
  CHECK(remat__model_create_stage(&sm, cfg, 1, 16, &st, &err) == 0);
  int rc = remat_generator_create_model(&mg, sm, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "whole model");
  remat_model_destroy(sm);
}

/* A Llama's decode against its training forward (remat_model_eval), on a
 * sequence of T = maxT tokens. */
static void test_llama(const char *shape) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse(shape, &cfg, &err) == 0);
  const int64_t T = cfg.max_seq_len, V = cfg.vocab_size, Vp = cfg.padded_vocab_size,
                C = cfg.channels, L = cfg.num_layers, KV = remat__kv_width(&cfg);
  remat_model *m;
  CHECK(remat_model_create(&m, &cfg, 1, T, NULL, &err) == 0);
  remat_model_init_weights(m, 9);
  float *P = remat_model_params(m);
  size_t np = remat_param_count(&cfg);
  uint64_t s = 23; /* uneven norms' gains, every weight nudged */
  for (size_t i = 0; i < np; i++)
    P[i] += 0.05f * (float)((double)(remat__splitmix64(&s) >> 11) * 0x1.0p-53 - 0.5);
  int32_t *tok = malloc((size_t)T * sizeof *tok), *tgt = malloc((size_t)T * sizeof *tgt);
  for (int64_t t = 0; t < T; t++) tok[t] = (int32_t)(remat__splitmix64(&s) % (uint64_t)V);
  for (int64_t t = 0; t < T; t++) tgt[t] = t + 1 < T ? tok[t + 1] : 3;
  memcpy(remat_model_inputs(m), tok, (size_t)T * sizeof *tok);
  memcpy(remat_model_targets(m), tgt, (size_t)T * sizeof *tgt);
  double loss_model = remat_model_eval(m);

  /* The training head's logits: its own product on its RMSNorm's output
   * (left in the workspace), which the probabilities it left confirm. */
  const remat__backend *be = remat__model_backend(m);
  remat__llama_head lh;
  remat__llama_head_view(&lh, m->work, &cfg, 1, T, &m->ws);
  const float *probs = (const float *)(m->work + m->mp.mm.head_bytes);
  float *lg = malloc((size_t)(T * Vp) * sizeof *lg), *pr = malloc((size_t)(T * Vp) * sizeof *pr);
  float *losses = malloc((size_t)T * sizeof *losses);
  be->matmul_forward(lg, lh.xnf, m->p[remat__head_tensor(&cfg)], NULL, T, C, Vp);
  memcpy(pr, lg, (size_t)(T * Vp) * sizeof *pr);
  be->crossentropy_forward(pr, losses, tgt, T, V, Vp);
  CHECKF(memcmp(pr, probs, (size_t)(T * Vp) * sizeof *pr) == 0,
         "%s: the training head's product, recomputed, gives the probabilities it left", shape);

  remat_generator *g;
  CHECK(remat_generator_create(&g, &cfg, P, 0, &err) == 0);
  CHECK(remat_generator_feed(g, tok, T, &err) == 0);
  /* A sequence fed in one forward (T <= 64 rows) reaches the head with the
   * training forward's bits: the product of the training head's last normed
   * row alone gives the decode's logits. Fed in pieces (T > 64: 64 rows,
   * then the rest) the blocks' products have other row counts, whose sums
   * OpenBLAS rounds otherwise: equal to rounding. And the training head's
   * product of all T rows (sgemm) rounds differently from that of one row
   * (sgemv, gemm.c): the logits agree to a few ulps, not bit for bit. */
  float *one = malloc((size_t)Vp * sizeof *one);
  be->matmul_forward(one, (const float *)lh.xnf + (T - 1) * C, m->p[remat__head_tensor(&cfg)],
                     NULL, 1, C, Vp);
  double scale, d = max_diff(remat_generator_logits(g), one, V, &scale);
  if (T <= 64)
    CHECKF(memcmp(remat_generator_logits(g), one, (size_t)V * sizeof(float)) == 0,
           "%s: %lld tokens fed from position 0 in one forward reach the head with the training "
           "forward's last row bit for bit: the head's product of that row gives its logits",
           shape, (long long)T);
  else
    CHECKF(d < 1e-5 * fmax(1, scale),
           "%s: %lld tokens fed from position 0 in two forwards: the logits of the training "
           "forward's last row to rounding (max diff %.2e)",
           shape, (long long)T, d);
  const float *last = lg + (T - 1) * Vp;
  d = max_diff(remat_generator_logits(g), last, V, &scale);
  CHECKF(d <= 8 * 0x1.0p-24 * scale,
         "%s: and the training forward's last logits to 8 ulps of the largest (max diff %.2e; "
         "%s)",
         shape, d,
         memcmp(remat_generator_logits(g), last, (size_t)V * sizeof(float)) ? "not bit for bit"
                                                                            : "bit for bit");
  free(one);

  /* one token at a time: each position's logits, the training loss */
  float *inc = malloc((size_t)(T * V) * sizeof *inc);
  remat_generator_reset(g);
  for (int64_t t = 0; t < T; t++) {
    CHECK(remat_generator_feed(g, tok + t, 1, &err) == 0);
    memcpy(inc + t * V, remat_generator_logits(g), (size_t)V * sizeof *inc);
  }
  double dmax = 0;
  for (int64_t t = 0; t < T; t++) dmax = fmax(dmax, max_diff(inc + t * V, lg + t * Vp, V, &scale));
  CHECKF(dmax < 1e-4 * fmax(1, scale),
         "%s: one token at a time, every position's logits equal the training forward's (max "
         "diff %.2e)",
         shape, dmax);
  double loss = 0;
  for (int64_t t = 0; t < T; t++) {
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, inc[t * V + v]);
    for (int64_t v = 0; v < V; v++) z += exp(inc[t * V + v] - mx);
    loss += -(inc[t * V + tgt[t]] - mx - log(z));
  }
  loss /= (double)T;
  CHECKF(fabs(loss - loss_model) < 1e-5 * fmax(1, fabs(loss)),
         "%s: mean loss from the cached logits %.7f = the training forward's %.7f", shape, loss,
         loss_model);

  /* over the model's own weights: the same bits; measured = planned */
  remat_generator *mg;
  CHECK(remat_generator_create_model(&mg, m, 0, &err) == 0);
  remat_generator_reset(g);
  CHECK(remat_generator_feed(g, tok, T, &err) == 0);
  CHECK(remat_generator_feed(mg, tok, T, &err) == 0);
  CHECKF(memcmp(remat_generator_logits(g), remat_generator_logits(mg), (size_t)V * sizeof(float)) ==
             0,
         "%s: a generator over the model's weights gives the bits of one over a copy", shape);
  size_t pg = remat_generator_planned_bytes(g), pm = remat_generator_planned_bytes(mg);
  CHECKF(remat_generator_measured_bytes(g) == pg && remat_generator_measured_bytes(mg) == pm &&
             pg == pm + remat__align(np * sizeof(float)),
         "%s: measured = planned: %zu = %zu bytes (own weights), %zu = %zu (the model's)", shape,
         remat_generator_measured_bytes(g), pg, remat_generator_measured_bytes(mg), pm);

  /* the cache holds the kv heads only: (L, cap, 2 KV) floats */
  remat__kernel_ws ws;
  CHECK(remat__kernel_ws_get(&ws, be->sizes, &cfg, 1, T, &err) == 0);
  size_t bytes = remat__decode_view(NULL, NULL, &cfg, T, T, 0, &ws);
  void *base = aligned_alloc(REMAT_ALIGN, remat__align(bytes)); /* a multiple, as C11 asks */
  remat__decode_acts a;
  remat__decode_view(&a, base, &cfg, T, T, 0, &ws);
  size_t kvb = (size_t)((char *)a.logits - (char *)a.kv);
  CHECKF(kvb == remat__align((size_t)(L * T * 2 * KV) * sizeof(float)) &&
             KV * cfg.num_heads == C * cfg.kv_heads && !a.lnf_mean && !a.blk.qkv && a.lblk.q,
         "%s: the KV cache is (L %lld, cap %lld, 2 KV %lld) floats: %zu bytes, %lld of %lld "
         "heads",
         shape, (long long)L, (long long)T, (long long)(2 * KV), kvb, (long long)cfg.kv_heads,
         (long long)cfg.num_heads);
  free(base);

  remat_generator_destroy(mg);
  remat_generator_destroy(g);
  remat_model_destroy(m);
  free(tok), free(tgt), free(lg), free(pr), free(losses), free(inc);
}

int main(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("2,64,4,300,128", &cfg, &err) == 0);
  const int64_t T = 100, V = cfg.vocab_size; /* T > 64 rows: the batched feed takes two */
  remat_model *m;
  CHECK(remat_model_create(&m, &cfg, 1, T, NULL, &err) == 0);
  remat_model_init_weights(m, 5);
  float *P = remat_model_params(m);
  size_t np = remat_param_count(&cfg);
  /* Nonzero biases and uneven layernorm gains, so every parameter counts. */
  uint64_t s = 11;
  for (size_t i = 0; i < np; i++)
    P[i] += 0.05f * (float)((double)(remat__splitmix64(&s) >> 11) * 0x1.0p-53 - 0.5);
  int32_t tok[100], tgt[100];
  for (int64_t t = 0; t < T; t++) tok[t] = (int32_t)(remat__splitmix64(&s) % (uint64_t)V);
  for (int64_t t = 0; t < T; t++) tgt[t] = t + 1 < T ? tok[t + 1] : 7;

  float *ref = malloc((size_t)(T * V) * sizeof *ref), *inc = malloc((size_t)(T * V) * sizeof *inc);
  reference_forward(&cfg, P, tok, T, ref);

  remat_generator *g;
  CHECK(remat_generator_create(&g, &cfg, P, 0, &err) == 0);
  CHECK(remat_generator_capacity(g) == 128);
  test_kv_cache(g, tok, T, V, ref, inc);
  test_loss(m, tok, tgt, T, V, inc);
  test_greedy(g, &cfg, P, tok, V);
  test_model_generator(m, g, &cfg, tok);
  test_errors(g, tok, T, V);
  test_sampling(g, &cfg, P, tok, V);
  test_top_p(g, tok, V);
  test_llama("llama-tiny");                       /* untied, 2 of 4 heads */
  test_llama("llama:2,64,4,2,176,256,64,10000,1"); /* tied */
  test_llama("llama:2,64,4,1,176,300,80");        /* one kv head, a padded vocabulary, maxT > 64 */

  remat_generator_destroy(g);
  remat_model_destroy(m);
  free(ref);
  free(inc);
  return test_summary("test_generate");
}
