/* peak.c: the matrix-product rate MFU is measured against, taken at the
 * shapes a model's linear layers actually run, through the same split
 * products the model uses (remat__gemm: one single-threaded OpenBLAS call
 * per thread and slab).
 *
 * One trial times every distinct product of a step once: per block the
 * forward (qkv, projection, fc, fc projection), the backward's input
 * gradients and weight gradients, and the head's three. Its rate is the
 * FLOPs of a step's products (block shapes counted L times) over the time
 * the trial's products would take for them, i.e. the rate of a step that
 * did nothing but these products. Trials repeat until the time budget is
 * spent. MFU is against the median trial: the best trial, the usual
 * "peak", moved by 10-20% from run to run on a shared machine (a lucky
 * trial), the median by about 3%. The best, the spread (half the
 * interquartile range) and the slowest trial are reported beside it. A
 * product larger than a trial can afford is cut along its longest
 * dimension (rows of tokens, or the vocabulary); the rate at those sizes no
 * longer depends on that length.
 *
 * A step whose model FLOP rate beats the median trial raises the peak to
 * its own rate (remat_peak_mfu), so a reported MFU is never above 100%. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "remat/report.h"
#include "products/products.h"
#include "kernels/kernels.h"

enum { MAX_SHAPES = 15 };

typedef struct {
  int ta, tb;
  int64_t M, N, K;
  int length;    /* bit 0, 1, 2: M, N, K is a length (tokens or vocabulary) */
  double weight; /* times a step runs it */
} shape;

/* The products of one step at `rows` = B*T tokens, in the kernels'
 * conventions (layers.c): forward out = inp @ W^T (NT), input gradient
 * dout @ W (NN), weight gradient dout^T @ inp (TN). */
static int step_shapes(const remat_config *cfg, int64_t rows, shape *s) {
  const int64_t C = cfg->channels, Vp = cfg->padded_vocab_size;
  const double L = (double)cfg->num_layers;
  const int64_t out[4] = {3 * C, C, 4 * C, C}, in[4] = {C, C, C, 4 * C};
  int n = 0;
  for (int k = 0; k < 4; k++) {
    s[n++] = (shape){0, 1, rows, out[k], in[k], 1, L};
    s[n++] = (shape){0, 0, rows, in[k], out[k], 1, L};
    s[n++] = (shape){1, 0, out[k], in[k], rows, 4, L};
  }
  s[n++] = (shape){0, 1, rows, Vp, C, 1 | 2, 1.0};
  s[n++] = (shape){0, 0, rows, C, Vp, 1 | 4, 1.0};
  s[n++] = (shape){1, 0, Vp, C, rows, 1 | 4, 1.0};
  return n;
}

static double flops_of(const shape *s) { return 2.0 * (double)s->M * (double)s->N * (double)s->K; }

/* Cuts a product to at most cap FLOPs: first its lengths (tokens, the
 * vocabulary), whose size matters little to the rate once they are long,
 * then, for a model too large even so, its longest dimensions; no
 * dimension is cut below 256 (or its own size), and cuts keep multiples
 * of 64. */
static void cap_shape(shape *s, double cap) {
  int64_t *d[3] = {&s->M, &s->N, &s->K};
  for (int pass = 0; pass < 2; pass++)
    for (int guard = 0; guard < 16 && flops_of(s) > cap; guard++) {
      int big = -1;
      for (int k = 0; k < 3; k++)
        if ((pass || (s->length >> k & 1)) && *d[k] > 256 && (big < 0 || *d[k] > *d[big])) big = k;
      if (big < 0) break;
      double f = cap / flops_of(s);
      int64_t want = (int64_t)((double)*d[big] * (pass ? sqrt(f) : f)) / 64 * 64;
      *d[big] = want > 256 ? want : 256;
    }
}

/* Seconds of one product of shape s on buffers a, b, c (large enough). */
static double time_product(const shape *s, const float *a, const float *b, float *c) {
  const int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  double t0 = remat__now();
  remat__gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
  return remat__now() - t0;
}

/* The largest operand of any shape in the list, in floats. */
static size_t largest_operand(const shape *s, int n) {
  size_t most = 0;
  for (int k = 0; k < n; k++) {
    size_t a = (size_t)(s[k].M * s[k].K), b = (size_t)(s[k].K * s[k].N),
           c = (size_t)(s[k].M * s[k].N);
    if (a > most) most = a;
    if (b > most) most = b;
    if (c > most) most = c;
  }
  return most;
}

/* bf16 (remat_precision): the model's products as the bf16 model runs
 * them (products/products.h: bf16 operands, fp32 accumulation): per layer kind
 * the forward and the backward (input and weight gradients together), at
 * up to 2048 rows of tokens and, for the head, up to 8192 rows of the
 * vocabulary; a step's time is each product's full FLOPs at its measured
 * rate, as above. */
typedef struct {
  remat__dnnl *d;
  remat__mm_shape s[5];
  double weight[5], full[5]; /* times a step runs it; FLOPs of one full forward */
  uint16_t *inp, *w, *out;
  float *dinp, *dw, *bias;
  void *scratch;
} bf16_bench;

static void bf16_bench_free(bf16_bench *b) {
  if (b->d) remat__dnnl_destroy(b->d);
  remat__free(b->inp);
  remat__free(b->w);
  remat__free(b->out);
  remat__free(b->dinp);
  remat__free(b->dw);
  remat__free(b->bias);
  remat__free(b->scratch);
}

static int bf16_bench_make(bf16_bench *b, const remat_config *cfg, int64_t rows,
                           remat_error *err) {
  const int64_t C = cfg->channels, Vp = cfg->padded_vocab_size;
  const int64_t N = rows < 2048 ? rows : 2048, V = Vp < 8192 ? Vp : 8192;
  const int64_t in[5] = {C, C, C, 4 * C, C}, out[5] = {3 * C, C, 4 * C, C, V},
                fout[5] = {3 * C, C, 4 * C, C, Vp};
  size_t most_in = 0, most_w = 0, most_out = 0;
  for (int k = 0; k < 5; k++) {
    b->s[k] = (remat__mm_shape){.N = N, .C = in[k], .OC = out[k], .out_bf16 = true,
                                .dinp_fp32 = true, .no_bias = k == 4};
    b->weight[k] = k == 4 ? 1.0 : (double)cfg->num_layers;
    b->full[k] = 2.0 * (double)rows * (double)in[k] * (double)fout[k];
    if ((size_t)(N * in[k]) > most_in) most_in = (size_t)(N * in[k]);
    if ((size_t)(in[k] * out[k]) > most_w) most_w = (size_t)(in[k] * out[k]);
    if ((size_t)(N * out[k]) > most_out) most_out = (size_t)(N * out[k]);
  }
  int rc = remat__dnnl_create(&b->d, b->s, 5, err);
  if (rc) return rc;
  b->inp = remat__calloc(most_in, 2);
  b->w = remat__calloc(most_w, 2);
  b->out = remat__calloc(most_out, 2);
  b->dinp = remat__calloc(most_in, 4);
  b->dw = remat__calloc(most_w, 4);
  b->bias = remat__calloc((size_t)(4 * C), 4);
  b->scratch = remat__malloc(remat__dnnl_scratchpad_bytes(b->d) + 64);
  if (!b->inp || !b->w || !b->out || !b->dinp || !b->dw || !b->bias || !b->scratch)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory measuring the bf16 product rate");
  for (size_t i = 0; i < most_in; i++) b->inp[i] = remat__bf16_round((float)(i % 13) * 0.01f);
  for (size_t i = 0; i < most_w; i++) b->w[i] = remat__bf16_round((float)(i % 7) * 0.01f);
  for (size_t i = 0; i < most_out; i++) b->out[i] = remat__bf16_round((float)(i % 5) * 0.01f);
  return 0;
}

/* Seconds a step's products take at this trial's rates. */
static double bf16_trial(bf16_bench *b) {
  double t_step = 0.0;
  for (int k = 0; k < 5; k++) {
    const remat__mm_shape *s = &b->s[k];
    double cut = 2.0 * (double)s->N * (double)s->C * (double)s->OC;
    double t0 = remat__now();
    remat__dnnl_forward(b->d, b->out, b->inp, b->w, s->no_bias ? NULL : b->bias, s->N, s->C,
                        s->OC, true, b->scratch);
    remat__dnnl_backward(b->d, b->dinp, b->dw, b->out, b->inp, b->w, s->N, s->C, s->OC, false,
                         b->scratch);
    double t2 = remat__now();
    t_step += b->weight[k] * b->full[k] * (t2 - t0) / cut; /* 1 + 2 products, each cut */
  }
  return t_step;
}

static void peak_summary(remat_peak *p, int shapes, double t0);

static int measure_peak_bf16(remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                             double seconds, remat_error *err) {
  bf16_bench b = {0};
  int rc = bf16_bench_make(&b, cfg, B * T, err);
  if (rc) {
    bf16_bench_free(&b);
    return rc;
  }
  double step_flops = 0.0; /* forward, and the backward's two products */
  for (int k = 0; k < 5; k++) step_flops += 3.0 * b.weight[k] * b.full[k];
  const double t0 = remat__now();
  bf16_trial(&b); /* warms the team and the primitives */
  int added = 0;
  while (p->trials < REMAT_PEAK_TRIALS &&
         (added == 0 || p->trials < 3 || remat__now() - t0 < seconds)) {
    p->rate[p->trials++] = step_flops / bf16_trial(&b);
    added++;
  }
  bf16_bench_free(&b);
  peak_summary(p, 15, t0);
  return 0;
}

int remat_measure_peak(remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                       double seconds, remat_error *err) {
  if (cfg->precision == REMAT_PRECISION_BF16)
    return measure_peak_bf16(p, cfg, B, T, seconds, err);
  shape full[MAX_SHAPES], cut[MAX_SHAPES];
  const int n = step_shapes(cfg, B * T, full);
  double step_flops = 0.0; /* a step's products */
  for (int k = 0; k < n; k++) step_flops += full[k].weight * flops_of(&full[k]);
  /* a probe sizes the cut so that a trial takes about a fifth of the
   * budget: the qkv forward, cut to at most 0.25 GFLOP */
  const double most_cap = 2e9;
  shape probe = full[0];
  cap_shape(&probe, 2.5e8);
  memcpy(cut, full, sizeof full);
  for (int k = 0; k < n; k++) cap_shape(&cut[k], most_cap); /* the buffers' size */
  size_t most = largest_operand(cut, n), most_probe = largest_operand(&probe, 1);
  if (most_probe > most) most = most_probe;
  /* under a limit, the measurement leaves OpenBLAS room (remat_memory_headroom) */
  const char *what;
  char b1[32], b2[32];
  size_t room = remat_memory_headroom(&what), bytes = 3 * most * sizeof(float);
  float *buf = strstr(what, "ulimit") && room < bytes ? NULL : remat__malloc(bytes);
  if (!buf)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory measuring the sgemm rate at the "
                         "model's shapes: it needs %s and %s leaves %s; give the peak rate "
                         "instead of measuring it, or a smaller model", remat_format_bytes(bytes, b1, sizeof b1), what,
                         remat_format_bytes(room, b2, sizeof b2));
  for (size_t i = 0; i < 3 * most; i++) buf[i] = (float)((i * 7) % 13) * 0.01f;
  float *a = buf, *b = buf + most, *c = buf + 2 * most;
  const double t0 = remat__now();
  time_product(&probe, a, b, c); /* warms the team and OpenBLAS's buffers */
  double rate = flops_of(&probe) / time_product(&probe, a, b, c);
  double cap = rate * seconds / 5.0 / (double)n;
  cap = cap < 5e7 ? 5e7 : cap > most_cap ? most_cap : cap;
  memcpy(cut, full, sizeof full);
  for (int k = 0; k < n; k++) cap_shape(&cut[k], cap);
  int added = 0;
  while (p->trials < REMAT_PEAK_TRIALS &&
         (added == 0 || p->trials < 3 || remat__now() - t0 < seconds)) {
    double t_step = 0.0; /* a step's products at this trial's rates */
    for (int k = 0; k < n; k++) {
      double t = time_product(&cut[k], a, b, c);
      t_step += full[k].weight * flops_of(&full[k]) * t / flops_of(&cut[k]);
    }
    p->rate[p->trials++] = step_flops / t_step;
    added++;
  }
  remat__free(buf);
  peak_summary(p, n, t0);
  return 0;
}

/* The figures over every trial so far. */
static void peak_summary(remat_peak *p, int shapes, double t0) {
  double sorted[REMAT_PEAK_TRIALS];
  memcpy(sorted, p->rate, (size_t)p->trials * sizeof(double));
  remat__sort_doubles(sorted, (size_t)p->trials);
  p->best = sorted[p->trials - 1];
  p->median = sorted[p->trials / 2];
  p->flops = p->median > p->fastest_step ? p->median : p->fastest_step;
  p->low = sorted[0];
  /* half the interquartile range: one trial a burst of other work slowed
   * does not move it */
  p->spread = (sorted[3 * p->trials / 4] - sorted[p->trials / 4]) / (2.0 * p->median);
  p->shapes = shapes;
  p->seconds += remat__now() - t0;
}

double remat_peak_mfu(remat_peak *p, const remat_config *cfg, int64_t T, double tokens_per_s) {
  double rate = remat_flops_per_token(cfg, T) * tokens_per_s;
  if (rate > p->fastest_step) p->fastest_step = rate;
  if (rate > p->flops) { /* a step beat the measurement: it is the better bound */
    p->flops = rate;
    p->raised++;
  }
  return p->flops > 0 ? rate / p->flops : 0.0;
}

/* ---------------------------------------------------- the kept peak */

enum { PEAK_FIGURES = 7 }; /* median, best, slowest, spread, trials, shapes, seconds */

int remat_peak_cached(remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                      double seconds, int again, remat_cache_note *note, remat_error *err) {
  remat_cache c;
  remat_cache_entry e = {0};
  remat_error why = {0};
  memset(p, 0, sizeof *p);
  remat_cache_open(&c, "peak", (int)cfg->precision, 0);
  /* the shapes the trials run: the width, the vocabulary, the layers (the
   * weight of the block shapes) and the tokens of a micro-batch */
  snprintf(e.key, sizeof e.key, "C%lld Vp%lld L%lld rows%lld", (long long)cfg->channels,
           (long long)cfg->padded_vocab_size, (long long)cfg->num_layers, (long long)(B * T));
  char key[sizeof e.key];
  memcpy(key, e.key, sizeof key);
  int found = again ? REMAT_CACHE_MISS : remat_cache_get(&c, key, PEAK_FIGURES, &e, &why);
  const double *v = e.value;
  if (found == REMAT_CACHE_HIT && v[0] > 0 && v[1] >= v[0] && v[2] > 0 && v[2] <= v[0] &&
      v[3] >= 0 && v[4] >= 1 && v[4] <= REMAT_PEAK_TRIALS && v[5] >= 1) {
    *p = (remat_peak){.flops = v[0], .median = v[0], .best = v[1], .low = v[2], .spread = v[3],
                      .trials = (int)v[4], .shapes = (int)v[5], .seconds = v[6]};
    remat_cache_note_set(note, &c, REMAT_FIGURE_CACHED, e.date, NULL);
    return 0;
  }
  if (found == REMAT_CACHE_HIT) { /* whole, but figures no measurement gives */
    found = REMAT_CACHE_DAMAGED;
    remat__errorf(&why, REMAT_EIO, "cache file %s is damaged (its peak's figures are out of "
                  "order)", c.path);
  }
  int rc = remat_measure_peak(p, cfg, B, T, seconds, err);
  if (rc) return rc;
  e.n = PEAK_FIGURES;
  memcpy(e.key, key, sizeof key);
  const double fig[PEAK_FIGURES] = {p->median, p->best, p->low, p->spread, p->trials, p->shapes,
                                    p->seconds};
  memcpy(e.value, fig, sizeof fig);
  remat_cache_keep(&c, &e, again, found, why.msg, note);
  return 0;
}

int remat_peak_keep(const remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                    remat_error *err) {
  remat_cache c;
  remat_cache_entry e = {0};
  if (remat_cache_open(&c, "peak", (int)cfg->precision, 0))
    return remat__errorf(err, REMAT_EIO, "no cache file: %s", c.why);
  snprintf(e.key, sizeof e.key, "C%lld Vp%lld L%lld rows%lld", (long long)cfg->channels,
           (long long)cfg->padded_vocab_size, (long long)cfg->num_layers, (long long)(B * T));
  /* a raised peak is the median the next run reports against */
  const double fig[PEAK_FIGURES] = {p->flops, p->best > p->flops ? p->best : p->flops,
                                    p->low < p->flops ? p->low : p->flops, p->spread, p->trials,
                                    p->shapes, p->seconds};
  memcpy(e.value, fig, sizeof fig);
  e.n = PEAK_FIGURES;
  e.date = (int64_t)time(NULL);
  return remat_cache_put(&c, &e, err);
}
