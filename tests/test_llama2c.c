/* test_llama2c.c: llama2.c's checkpoints (karpathy/llama2.c at 350e04f):
 * files made here byte by byte, as run.c reads them (memory_map_weights)
 * and export.py writes them (legacy_export, version1_export), for a tied
 * and an untied head, with and without the RoPE tables, read back tensor
 * by tensor; the writer's files equal them byte for byte (the tables
 * aside, which are checked against cos and sin computed here in double);
 * round trips; which format a file is, and the refusal of truncated, padded
 * and odd files with messages that say what was expected; the saving rules
 * per family (llm.c's for GPT-2, llama2.c's fp32 for a Llama), the job's
 * included.
 *
 * Usage: test_llama2c [scratch-dir]   (default: a fresh directory under
 * /tmp, removed at the end) */
#define _DEFAULT_SOURCE /* mkdtemp */
#define REMAT_TEST_FILES
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_internal.h"
#include "test_util.h"

/* ------------------------------------------------------ hand-made files */

/* A Llama shape as llama2.c's Config holds it. */
typedef struct {
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  int tied;
} shape;

/* llama-tiny's: 2 layers, C 64, 4 heads, 2 key/value heads, H 176, V 256, T 64. */
static shape tiny(int tied) { return (shape){64, 176, 2, 4, 2, 256, 64, tied}; }

/* The tensors in run.c's order, their sizes counted here from the Config
 * (memory_map_weights), not from remat's tables; the tables between the
 * final norm and the head. */
enum { EMB, ATTNORM, WQ, WK, WV, WO, FFNNORM, W1, W2, W3, NORM, CLS, NT };
static const char *const tname[NT] = {"token_embedding_table", "rms_att_weight", "wq", "wk", "wv",
                                      "wo", "rms_ffn_weight", "w1", "w2", "w3",
                                      "rms_final_weight", "wcls"};

static void sizes_of(const shape *s, size_t sz[NT]) {
  size_t C = (size_t)s->dim, L = (size_t)s->n_layers, H = (size_t)s->hidden_dim;
  size_t hs = C / (size_t)s->n_heads, KV = (size_t)s->n_kv_heads * hs, V = (size_t)s->vocab_size;
  sz[EMB] = V * C;
  sz[ATTNORM] = L * C;
  sz[WQ] = L * C * C;
  sz[WK] = L * C * KV;
  sz[WV] = L * C * KV;
  sz[WO] = L * C * C;
  sz[FFNNORM] = L * C;
  sz[W1] = L * C * H;
  sz[W2] = L * H * C;
  sz[W3] = L * C * H;
  sz[NORM] = C;
  sz[CLS] = s->tied ? 0 : V * C;
}

/* Tensor k's i-th value: every one distinct and exact in fp32, so a value
 * read says which tensor and index it came from. */
static float value_of(int k, size_t i) { return (float)((k + 1) * 100000 + (int)i) * (i % 2 ? -1.0f : 1.0f); }

static uint8_t *put_f32(uint8_t *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  test_put32(p, u);
  return p + 4;
}

static size_t table_floats(const shape *s) {
  return (size_t)s->seq_len * (size_t)(s->dim / s->n_heads) / 2;
}

/* A legacy file: the seven ints (vocab_size negative for an untied head),
 * the tensors in run.c's order, with the two tables (filled with NaN:
 * run.c skips them, and so must the reader) or without, then wcls. */
static uint8_t *make_legacy(const shape *s, int tables, size_t *n) {
  size_t sz[NT], floats = 0;
  sizes_of(s, sz);
  for (int k = 0; k < NT; k++) floats += sz[k];
  floats += tables ? 2 * table_floats(s) : 0;
  *n = 28 + 4 * floats;
  uint8_t *b = calloc(1, *n), *p = b;
  const int ints[7] = {s->dim, s->hidden_dim, s->n_layers, s->n_heads, s->n_kv_heads,
                       s->tied ? s->vocab_size : -s->vocab_size, s->seq_len};
  for (int i = 0; i < 7; i++, p += 4) test_put32(p, (uint32_t)ints[i]);
  for (int k = 0; k < NT; k++) {
    if (k == CLS && tables)
      for (size_t i = 0; i < 2 * table_floats(s); i++) p = put_f32(p, NAN);
    for (size_t i = 0; i < sz[k]; i++) p = put_f32(p, value_of(k, i));
  }
  CHECK((size_t)(p - b) == *n); /* tied, the tables end the file */
  return b;
}

/* A version 1 file: "ak42" as export.py packs it (struct 'I' of
 * 0x616b3432, little endian: the bytes '2' '4' 'k' 'a'), version 1, the
 * seven ints (vocab_size positive), shared_classifier, zeros to byte 256,
 * then the norms, the embedding, the matrices, the head when not shared. */
static uint8_t *make_v1(const shape *s, size_t *n) {
  static const int order[NT] = {ATTNORM, FFNNORM, NORM, EMB, WQ, WK, WV, WO, W1, W2, W3, CLS};
  size_t sz[NT], floats = 0;
  sizes_of(s, sz);
  for (int k = 0; k < NT; k++) floats += sz[k];
  *n = 256 + 4 * floats;
  uint8_t *b = calloc(1, *n), *p = b;
  memcpy(p, "24ka", 4);
  test_put32(p + 4, 1);
  const int ints[7] = {s->dim, s->hidden_dim, s->n_layers, s->n_heads, s->n_kv_heads,
                       s->vocab_size, s->seq_len};
  for (int i = 0; i < 7; i++) test_put32(p + 8 + 4 * i, (uint32_t)ints[i]);
  p[36] = (uint8_t)s->tied;
  p += 256;
  for (int j = 0; j < NT; j++)
    for (size_t i = 0; i < sz[order[j]]; i++) p = put_f32(p, value_of(order[j], i));
  CHECK((size_t)(p - b) == *n);
  return b;
}

/* remat's shape of it: family llama, unpadded vocabulary, run.c's theta
 * and epsilon. */
static remat_config config_of(const shape *s) {
  return (remat_config){.family = REMAT_FAMILY_LLAMA, .num_layers = s->n_layers,
                        .channels = s->dim, .num_heads = s->n_heads, .kv_heads = s->n_kv_heads,
                        .ffn_hidden = s->hidden_dim, .vocab_size = s->vocab_size,
                        .padded_vocab_size = s->vocab_size, .max_seq_len = s->seq_len,
                        .untied = !s->tied, .rope_theta = 10000.0, .norm_eps = 1e-5};
}

/* The parameters remat read hold each tensor of the file where REMAT_LP_*
 * says, tensor by tensor; returns the tensors that differ. */
static int compare_tensors(const shape *s, const float *params, const char *what) {
  size_t sz[NT], rs[REMAT_P_COUNT], at = 0;
  sizes_of(s, sz);
  remat_config c = config_of(s);
  remat_param_sizes(&c, rs);
  int bad = 0;
  /* REMAT_LP_* is run.c's order: tensor k of the file is remat's k */
  for (int k = 0; k < NT; k++) {
    size_t wrong = sz[k] != rs[k];
    for (size_t i = 0; !wrong && i < sz[k]; i++) wrong += params[at + i] != value_of(k, i);
    if (wrong) fprintf(stderr, "  %s: %s differs (%zu floats, remat's %zu)\n", what, tname[k],
                       sz[k], rs[k]);
    bad += wrong != 0;
    at += sz[k];
  }
  return bad;
}

/* Reads path (and the same bytes from memory) and checks the shape, the
 * reader's format fields and every tensor. */
static void read_hand_made(const shape *s, const char *path, const uint8_t *bytes, size_t n,
                           int format, int version, int tables, const char *what) {
  remat_error err = {0};
  remat_checkpoint_reader rd;
  remat_config got, want = config_of(s);
  int rc = remat_checkpoint_reader_open(&rd, path, &got, &err);
  CHECKF(rc == 0, "%s: opens (%s)", what, rc ? err.msg : "ok");
  if (rc) return;
  CHECKF(memcmp(&got, &want, sizeof got) == 0 && memcmp(&rd.cfg, &want, sizeof want) == 0,
         "%s: shape L=%lld C=%lld NH=%lld NKV=%lld H=%lld V=%lld Vp=%lld T=%lld untied=%lld "
         "theta=%g eps=%g",
         what, (long long)got.num_layers, (long long)got.channels, (long long)got.num_heads,
         (long long)got.kv_heads, (long long)got.ffn_hidden, (long long)got.vocab_size,
         (long long)got.padded_vocab_size, (long long)got.max_seq_len, (long long)got.untied,
         got.rope_theta, got.norm_eps);
  CHECKF(rd.format == format && rd.version == version && rd.freq_cis == tables,
         "%s: format %s, version %d, tables %d", what, remat_format_name(rd.format), rd.version,
         rd.freq_cis);
  size_t np = remat_param_count(&got);
  float *p = malloc(np * sizeof *p);
  rc = remat_checkpoint_read_params(&rd, &want, p, &err);
  CHECKF(rc == 0 && compare_tensors(s, p, what) == 0, "%s: every tensor where run.c has it%s%s",
         what, rc ? ": " : "", rc ? err.msg : "");
  remat_checkpoint_reader_free(&rd);
  /* the same bytes from memory: the path the fuzz target takes */
  memset(p, 0, np * sizeof *p);
  rc = remat__checkpoint_open_mem(&rd, bytes, n, "mem", &got, &err);
  if (!rc) rc = remat_checkpoint_read_params(&rd, NULL, p, &err);
  CHECKF(rc == 0 && compare_tensors(s, p, what) == 0, "%s: the same from memory", what);
  remat_checkpoint_reader_free(&rd);
  int f = -1;
  CHECK(remat_checkpoint_detect(path, &f, &err) == 0 && f == format);
  free(p);
}

static void test_hand_made(void) {
  for (int tied = 0; tied <= 1; tied++) {
    shape s = tiny(tied);
    for (int tables = 0; tables <= 1; tables++) {
      size_t n;
      uint8_t *b = make_legacy(&s, tables, &n);
      char what[96];
      snprintf(what, sizeof what, "legacy, %s head, %s tables", tied ? "tied" : "untied",
               tables ? "with" : "without");
      const char *path = test_path("legacy_%d_%d.bin", tied, tables);
      test_write_file(path, b, n);
      read_hand_made(&s, path, b, n, REMAT_FORMAT_LLAMA2C_LEGACY, REMAT_LLAMA2C_LEGACY, tables,
                     what);
      free(b);
    }
    size_t n;
    uint8_t *b = make_v1(&s, &n);
    char what[64];
    snprintf(what, sizeof what, "version 1, %s head", tied ? "tied" : "untied");
    const char *path = test_path("v1_%d.bin", tied);
    test_write_file(path, b, n);
    read_hand_made(&s, path, b, n, REMAT_FORMAT_LLAMA2C_V1, REMAT_LLAMA2C_V1, 0, what);
    free(b);
  }
  /* a head count equal to the key/value heads (no grouping), odd sizes */
  shape o = {48, 100, 3, 6, 6, 300, 10, 0};
  size_t n;
  uint8_t *b = make_legacy(&o, 1, &n);
  const char *path = test_path("legacy_odd.bin");
  test_write_file(path, b, n);
  read_hand_made(&o, path, b, n, REMAT_FORMAT_LLAMA2C_LEGACY, REMAT_LLAMA2C_LEGACY, 1,
                 "legacy, 6 heads of 8, V 300, T 10");
  free(b);
}

/* ---------------------------------------------------------- the writer */

/* The tables' entry (t, i) computed here in double: cos and sin of
 * t * theta^(-2i/hs). fp32's roundings of the frequency and the product
 * (as export.py's torch makes them) move the angle by a few ulps. */
static int table_ok(float got, double t, int i, int hs, double theta, int sine) {
  double a = t * pow(theta, -2.0 * i / hs), want = sine ? sin(a) : cos(a);
  return fabs((double)got - want) <= 1e-6 + 4e-7 * a;
}

/* The freq_cis tables at tab (cos then sin, (T, hs/2) each) of shape c. */
static size_t tables_wrong(const float *tab, const remat_config *c) {
  int hs = (int)(c->channels / c->num_heads), half = hs / 2;
  size_t n = (size_t)c->max_seq_len * (size_t)half, wrong = 0;
  for (int sine = 0; sine <= 1; sine++)
    for (size_t j = 0; j < n; j++)
      wrong += !table_ok(tab[sine * n + j], (double)(j / (size_t)half), (int)(j % (size_t)half),
                         hs, c->rope_theta, sine);
  return wrong;
}

static void get_floats(const uint8_t *b, size_t n, float *out) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = test_get32(b + 4 * i);
    memcpy(&out[i], &u, 4);
  }
}

/* The library's tables against the direct computation, for two thetas;
 * a few entries exactly (t = 0: cos 1, sin 0). */
static void test_tables(void) {
  remat_error err = {0};
  remat_config c;
  CHECK(remat_config_parse("llama-tiny", &c, &err) == 0);
  for (int k = 0; k < 2; k++) {
    c.rope_theta = k ? 500000.0 : 10000.0;
    size_t n = (size_t)c.max_seq_len * (size_t)(c.channels / c.num_heads) / 2;
    float *tab = malloc(2 * n * sizeof *tab);
    remat_llama2c_freq_cis(&c, tab, tab + n);
    size_t wrong = tables_wrong(tab, &c);
    CHECKF(wrong == 0 && tab[0] == 1.0f && tab[n] == 0.0f,
           "theta %g: the RoPE tables are cos and sin of t theta^(-2i/hs) (%zu of %zu off)",
           c.rope_theta, wrong, 2 * n);
    free(tab);
  }
}

/* Random parameters for shape c, finite. */
static float *random_params(const remat_config *c, uint32_t seed) {
  size_t np = remat_param_count(c);
  float *w = malloc(np * sizeof *w);
  uint32_t x = seed;
  for (size_t i = 0; i < np; i++) {
    x = x * 1664525u + 1013904223u;
    w[i] = (float)((int32_t)x >> 8) / (float)(1 << 23);
  }
  return w;
}

/* The hand-made file's values as a flat buffer in REMAT_LP_* order. */
static float *hand_values(const shape *s) {
  size_t sz[NT], np = 0;
  sizes_of(s, sz);
  for (int k = 0; k < NT; k++) np += sz[k];
  float *w = malloc(np * sizeof *w), *p = w;
  for (int k = 0; k < NT; k++)
    for (size_t i = 0; i < sz[k]; i++) *p++ = value_of(k, i);
  return w;
}

/* The writer's files are the hand-made ones: version 1 byte for byte; a
 * legacy file byte for byte outside its tables, which hold cos and sin. */
static void test_writer_bytes(void) {
  remat_error err = {0};
  for (int tied = 0; tied <= 1; tied++) {
    shape s = tiny(tied);
    remat_config c = config_of(&s);
    float *w = hand_values(&s);
    size_t n, m;
    uint8_t *hand = make_v1(&s, &n), *got;
    const char *p = test_path("w_v1_%d.bin", tied);
    CHECK(remat_llama2c_save(p, &c, w, REMAT_LLAMA2C_V1, &err) == 0);
    got = test_read_file(p, &m);
    CHECKF(m == n && memcmp(got, hand, n) == 0,
           "%s head: remat_llama2c_save's version 1 is export.py's, byte for byte",
           tied ? "tied" : "untied");
    free(got);
    free(hand);

    hand = make_legacy(&s, 1, &n);
    p = test_path("w_legacy_%d.bin", tied);
    CHECK(remat_llama2c_save(p, &c, w, REMAT_LLAMA2C_LEGACY, &err) == 0);
    got = test_read_file(p, &m);
    size_t sz[NT], before = 0, tab = 2 * table_floats(&s);
    sizes_of(&s, sz);
    for (int k = 0; k < CLS; k++) before += sz[k];
    size_t at = 28 + 4 * before, end = at + 4 * tab; /* the tables' bytes */
    int same = m == n && memcmp(got, hand, at) == 0 && memcmp(got + end, hand + end, n - end) == 0;
    float *t = malloc(tab * sizeof *t);
    if (m == n) get_floats(got + at, tab, t);
    size_t wrong = m == n ? tables_wrong(t, &c) : tab;
    CHECKF(same && wrong == 0,
           "%s head: the legacy file is export.py's byte for byte outside its RoPE tables, "
           "which hold cos and sin (%zu of %zu off)",
           tied ? "tied" : "untied", wrong, tab);
    free(t);
    free(got);
    free(hand);
    free(w);
  }
}

/* Writer then reader: the same floats, bit for bit, in every format. The
 * generic saves write a Llama as version 1; the legacy tables follow
 * theta, which no file keeps. */
static void test_round_trips(void) {
  remat_error err = {0};
  for (int tied = 0; tied <= 1; tied++) {
    remat_config c;
    CHECK(remat_config_parse(tied ? "llama:2,64,4,2,176,256,64,10000,1" : "llama-tiny", &c,
                             &err) == 0);
    CHECK(c.untied == !tied);
    size_t np = remat_param_count(&c);
    float *w = random_params(&c, 7u + (uint32_t)tied), *v = malloc(np * sizeof *v);
    const struct {
      int format;
      const char *name;
    } f[] = {{REMAT_FORMAT_LLAMA2C_V1, "v1"},
             {REMAT_FORMAT_LLAMA2C_LEGACY, "legacy"},
             {REMAT_FORMAT_AUTO, "auto"}};
    for (int i = 0; i < 3; i++) {
      const char *p = test_path("rt_%d_%s.bin", tied, f[i].name);
      remat_config got;
      int rc = remat_checkpoint_save_format(p, &c, w, f[i].format, 0, &err);
      if (!rc) rc = remat_checkpoint_read_config(p, &got, &err);
      if (!rc) rc = remat_checkpoint_load(p, &c, v, &err);
      int want_format = f[i].format == REMAT_FORMAT_AUTO ? REMAT_FORMAT_LLAMA2C_V1 : f[i].format;
      int format = -1;
      CHECK(rc || remat_checkpoint_detect(p, &format, &err) == 0);
      CHECKF(rc == 0 && memcmp(&got, &c, sizeof c) == 0 && memcmp(v, w, np * sizeof *v) == 0 &&
                 format == want_format,
             "%s head, %s: written and read back bit for bit, as %s%s%s", tied ? "tied" : "untied",
             f[i].name, remat_format_name(format), rc ? ": " : "", rc ? err.msg : "");
    }
    /* remat_checkpoint_save and _save_as (fp32) write a Llama as version 1 */
    const char *a = test_path("rt_%d_save.bin", tied), *b = test_path("rt_%d_v1.bin", tied);
    CHECK(remat_checkpoint_save(a, &c, w, &err) == 0);
    size_t n1, n2;
    uint8_t *x = test_read_file(a, &n1), *y = test_read_file(b, &n2);
    CHECKF(n1 == n2 && memcmp(x, y, n1) == 0, "remat_checkpoint_save writes a Llama as llama2.c "
           "version 1");
    free(x);
    CHECK(remat_checkpoint_save_as(a, &c, w, REMAT_CKPT_VERSION, &err) == 0);
    x = test_read_file(a, &n1);
    CHECK(n1 == n2 && memcmp(x, y, n1) == 0);
    free(x);
    free(y);
    free(w);
    free(v);
  }
  /* theta 500000: the legacy tables follow it; the file reads with 10000 */
  remat_config c;
  CHECK(remat_config_parse("llama:2,64,4,2,176,256,64,500000", &c, &err) == 0);
  float *w = random_params(&c, 3);
  const char *p = test_path("theta.bin");
  CHECK(remat_llama2c_save(p, &c, w, REMAT_LLAMA2C_LEGACY, &err) == 0);
  size_t n, before = remat_param_count(&c) - (size_t)(c.vocab_size * c.channels);
  size_t tab = (size_t)c.max_seq_len * (size_t)(c.channels / c.num_heads);
  uint8_t *b = test_read_file(p, &n);
  float *t = malloc(tab * sizeof *t);
  get_floats(b + 28 + 4 * before, tab, t);
  remat_config got;
  CHECK(remat_checkpoint_read_config(p, &got, &err) == 0);
  CHECKF(tables_wrong(t, &c) == 0 && got.rope_theta == 10000.0,
         "theta 500000: the legacy tables computed with it; the file reads as theta %g",
         got.rope_theta);
  free(t);
  free(b);
  free(w);
}

/* -------------------------------------------------------------- refusals */

/* Saving: each family in its own formats; llama2.c's in fp32; nothing
 * written when refused. */
static void test_save_rules(void) {
  remat_error err = {0};
  remat_config l, g;
  CHECK(remat_config_parse("llama-tiny", &l, &err) == 0);
  CHECK(remat_config_parse("tiny", &g, &err) == 0);
  float *wl = random_params(&l, 1), *wg = random_params(&g, 2);
  const char *p = test_path("refused.bin");
  int rc = remat_checkpoint_save_format(p, &l, wl, REMAT_FORMAT_LLMC, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "llm.c's checkpoint holds GPT-2, not a Llama");
  rc = remat_checkpoint_save_format(p, &g, wg, REMAT_FORMAT_LLAMA2C_V1, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "llama2.c's formats hold a Llama, not GPT-2");
  rc = remat_checkpoint_save_format(p, &g, wg, REMAT_FORMAT_LLAMA2C_LEGACY, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "not GPT-2");
  rc = remat_llama2c_save(p, &g, wg, REMAT_LLAMA2C_V1, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "GPT-2 shape");
  rc = remat_checkpoint_save_as(p, &l, wl, REMAT_CKPT_VERSION_BF16, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "fp32, not bf16");
  rc = remat_checkpoint_save_format(p, &l, wl, REMAT_FORMAT_LLAMA2C_LEGACY,
                                    REMAT_CKPT_VERSION_BF16, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "fp32, not bf16");
  rc = remat_llama2c_save(p, &l, wl, 2, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "version 2");
  rc = remat_checkpoint_save_format(p, &l, wl, REMAT_FORMAT_COUNT, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "unknown checkpoint format");
  remat_config padded = l;
  padded.padded_vocab_size = 384;
  rc = remat_llama2c_save(p, &padded, wl, REMAT_LLAMA2C_V1, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "unpadded");
  wl[remat_param_count(&l) - 1] = NAN;
  rc = remat_llama2c_save(p, &l, wl, REMAT_LLAMA2C_LEGACY, &err);
  CHECK_ERR(rc, err, REMAT_ENUMERIC, "output[");
  CHECKF(!test_exists(p) && test_count_temps(test_scratch_()->dir) == 0,
         "a refused save writes nothing and leaves no temporary");
  /* GPT-2's own still: llm.c's format, by default and by name */
  CHECK(remat_checkpoint_format_check(&g, REMAT_FORMAT_AUTO, REMAT_CKPT_VERSION_BF16, &err) == 0);
  CHECK(remat_checkpoint_save_format(p, &g, wg, REMAT_FORMAT_AUTO, 0, &err) == 0);
  int f = -1;
  CHECK(remat_checkpoint_detect(p, &f, &err) == 0 && f == REMAT_FORMAT_LLMC);
  /* the names the CLI takes */
  for (int k = 0; k < REMAT_FORMAT_COUNT; k++)
    CHECK(remat_format_parse(remat_format_name(k), &f) == 0 && f == k);
  CHECK(remat_format_parse("llama2c", &f) == -1);
  free(wl);
  free(wg);
}

static char test_last_msg[REMAT_ERRMSG_MAX]; /* the reader's last refusal */

/* One malformed file: the reader and the detector refuse it with code and
 * a message mentioning word (the detector only where it looks). */
static void refused(const char *name, const uint8_t *b, size_t n, int code, const char *word,
                    int detected) {
  remat_error err = {0};
  const char *p = test_path("bad_%s.bin", name);
  test_write_file(p, b, n);
  remat_checkpoint_reader rd;
  int rc = remat_checkpoint_reader_open(&rd, p, NULL, &err);
  snprintf(test_last_msg, sizeof test_last_msg, "%s", err.msg);
  CHECKF(rc == code && strstr(err.msg, word) && strchr(err.msg, '\n') == NULL,
         "%s: refused mentioning '%s' (%s)", name, word, err.msg);
  remat_checkpoint_reader_free(&rd);
  int f = -1;
  rc = remat_checkpoint_detect(p, &f, &err);
  if (detected >= 0)
    CHECKF(rc == 0 && f == detected, "%s: told as %s by its magic", name, remat_format_name(f));
  else
    CHECKF(rc == REMAT_EFORMAT && strstr(err.msg, word), "%s: not told as any format", name);
}

static void test_bad_files(void) {
  shape s = tiny(0);
  size_t n;
  uint8_t *b = make_legacy(&s, 1, &n);
  /* a legacy file has no magic: its size is all that tells it */
  refused("legacy_cut", b, n - 4, REMAT_EFORMAT,
          "make a file of 501020 bytes (505116 with the RoPE tables), not 505112", -1);
  uint8_t *c = realloc(b, n + 4);
  memset(c + n, 0, 4);
  refused("legacy_long", c, n + 4, REMAT_EFORMAT, "RoPE tables), not", -1);
  refused("legacy_header_only", c, 28, REMAT_EFORMAT, "not a model file remat reads", -1);
  test_put32(c + 12, 3); /* n_heads 3 does not divide dim 64 */
  refused("legacy_heads", c, n, REMAT_EFORMAT, "no shape: channels C=64 must be divisible", -1);
  test_put32(c + 12, 4);
  test_put32(c + 16, 3); /* 3 key/value heads for 4 */
  refused("legacy_kv", c, n, REMAT_EFORMAT, "key/value heads NKV=3", -1);
  test_put32(c + 16, 2);
  test_put32(c + 20, 0); /* vocab_size 0 */
  refused("legacy_vocab", c, n, REMAT_EFORMAT, "no shape", -1);
  free(c);

  b = make_v1(&s, &n);
  refused("v1_cut", b, n - 1, REMAT_EFORMAT, "is truncated: its header announces", REMAT_FORMAT_LLAMA2C_V1);
  refused("v1_header_cut", b, 200, REMAT_EFORMAT, "version 1's header alone needs 256",
          REMAT_FORMAT_LLAMA2C_V1);
  c = realloc(b, n + 8);
  memset(c + n, 0, 8);
  refused("v1_long", c, n + 8, REMAT_EFORMAT, "8 trailing bytes", REMAT_FORMAT_LLAMA2C_V1);
  test_put32(c + 4, 2); /* version 2: Q8_0 */
  refused("v1_version2", c, n, REMAT_EFORMAT, "version 2 (Q8_0", REMAT_FORMAT_LLAMA2C_V1);
  test_put32(c + 4, 1);
  c[36] = 2;
  refused("v1_shared", c, n, REMAT_EFORMAT, "shared_classifier 2", REMAT_FORMAT_LLAMA2C_V1);
  c[36] = 0;
  test_put32(c + 8 + 20, (uint32_t)-256); /* version 1 has no sign trick */
  refused("v1_vocab", c, n, REMAT_EFORMAT, "bad header", REMAT_FORMAT_LLAMA2C_V1);
  test_put32(c + 8 + 20, 256);
  free(c);

  const uint8_t tiny_file[3] = {1, 2, 3};
  refused("three_bytes", tiny_file, 3, REMAT_EFORMAT,
          "truncated or not a model file: its 3 bytes are fewer than any model file's header", -1);
  refused("empty", tiny_file, 0, REMAT_EFORMAT, "its 0 bytes are fewer than any", -1);
  const char text[] = "Once upon a time there was a little llama who liked to read files.";
  refused("text", (const uint8_t *)text, sizeof text - 1, REMAT_EFORMAT,
          "neither llm.c's 20240326 nor llama2.c's \"ak42\"", -1);
  CHECKF(strstr(test_last_msg, "give an llm.c GPT-2 checkpoint or a llama2.c model") != NULL,
         "text: the message is whole (%zu bytes)", strlen(test_last_msg));
  /* an llm.c header still speaks as llm.c's */
  uint8_t h[REMAT_HEADER_BYTES] = {0};
  test_put32(h, REMAT_CKPT_MAGIC);
  test_put32(h + 4, 4);
  refused("llmc_version", h, sizeof h, REMAT_EFORMAT, "version 4", REMAT_FORMAT_LLMC);
  refused("llmc_cut", h, 100, REMAT_EFORMAT, "truncated", REMAT_FORMAT_LLMC);

  /* a file of another shape than asked for names the dimension */
  remat_error err = {0};
  remat_config want = config_of(&s), got;
  want.kv_heads = 4;
  float *v = malloc(remat_param_count(&want) * sizeof *v);
  int rc = remat_checkpoint_load(test_path("legacy_0_1.bin"), &want, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "NKV=2 but the expected shape has NKV=4");
  want = config_of(&s);
  want.untied = 0;
  rc = remat_checkpoint_load(test_path("legacy_0_1.bin"), &want, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "untied=1");
  CHECK(remat_checkpoint_read_config(test_path("legacy_0_1.bin"), &got, &err) == 0);
  free(v);
}

/* ------------------------------------------------------------------ job */

/* The job refuses a --save format that cannot hold its model before the
 * first step. */
static void test_job_rules(void) {
  remat_error err = {0};
  remat_job_desc d;
  remat_job_desc_default(&d);
  d.config = "tiny";
  d.train.steps = 1;
  d.save_format = REMAT_FORMAT_LLAMA2C_V1;
  remat_job *job = NULL;
  int rc = remat_job_create(&job, &d, &err);
  if (!rc) rc = remat_job_prepare(job, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "llama2.c's formats hold a Llama, not GPT-2");
  if (job) remat_job_destroy(job, 0);
  d.save_format = REMAT_FORMAT_COUNT;
  job = NULL;
  rc = remat_job_create(&job, &d, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "unknown model file format");
  if (job) remat_job_destroy(job, 0);
}

int main(int argc, char **argv) {
  if (!test_scratch_begin("test_llama2c", argc < 2 ? NULL : argv[1])) return 2;
  test_hand_made();
  test_tables();
  test_writer_bytes();
  test_round_trips();
  test_save_rules();
  test_bad_files();
  test_job_rules();
  CHECK(test_scratch_end() == 0);
  return test_summary("test_llama2c");
}
