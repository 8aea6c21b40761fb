/* llama2c.c: llama2.c's checkpoints, the Llama family's formats, and which
 * format a checkpoint is. Learned from karpathy/llama2.c at 350e04f:
 * run.c's Config, read_checkpoint and memory_map_weights (the legacy
 * format), export.py's legacy_export and version1_export, and model.py's
 * precompute_freqs_cis (the RoPE tables legacy files carry).
 *
 * A Llama's flat parameters in REMAT_LP_* order are run.c's weights in
 * its order, so a legacy file is its header, the parameters up to the
 * final norm, the two RoPE tables (which run.c skips) and the head when it
 * is untied; version 1 stores the same tensors in another order (the norms
 * first) after a 256-byte header. This file parses the headers, says
 * where each tensor lies (remat__llama2c_spans) and writes the files;
 * format.c's reader reads the bytes, so one reader serves every format,
 * and its entry points (remat_llama2c_save, remat_checkpoint_save_format)
 * call here, never the other way round. Everything on disk is little
 * endian. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "io/io_internal.h"

#define NORM_EPS 1e-5 /* run.c's rmsnorm: ss += 1e-5f */

static uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---------------------------------------------------------------- names */

const char *remat_format_name(int f) {
  static const char *const names[REMAT_FORMAT_COUNT] = {"auto", "llm.c", "llama2c-legacy",
                                                        "llama2c-v1"};
  return f >= 0 && f < REMAT_FORMAT_COUNT ? names[f] : "?";
}

int remat_format_parse(const char *s, int *out) {
  for (int f = 0; f < REMAT_FORMAT_COUNT; f++)
    if (s && strcmp(s, remat_format_name(f)) == 0) return *out = f, 0;
  return -1;
}

/* --------------------------------------------------------------- shapes */

/* run.c's Config: seven int32 in this order. */
typedef struct {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} l2c_config;

static l2c_config get_config(const uint8_t *p) {
  return (l2c_config){(int32_t)get_le32(p),      (int32_t)get_le32(p + 4),
                      (int32_t)get_le32(p + 8),  (int32_t)get_le32(p + 12),
                      (int32_t)get_le32(p + 16), (int32_t)get_le32(p + 20),
                      (int32_t)get_le32(p + 24)};
}

/* The Config as the messages show it. */
static const char *config_text(const l2c_config *h, char *buf, size_t cap) {
  snprintf(buf, cap,
           "dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, "
           "seq_len %d",
           h->dim, h->hidden_dim, h->n_layers, h->n_heads, h->n_kv_heads, h->vocab_size,
           h->seq_len);
  return buf;
}

/* The Llama shape of a Config whose vocabulary is V and whose head is
 * untied or not; why receives remat_config_check's reason when it is no
 * shape. The file holds no theta or epsilon: run.c's. */
static int shape_of(const l2c_config *h, int64_t V, int untied, remat_config *cfg,
                    remat_error *why) {
  *cfg = (remat_config){.family = REMAT_FAMILY_LLAMA,
                        .channels = h->dim,
                        .ffn_hidden = h->hidden_dim,
                        .num_layers = h->n_layers,
                        .num_heads = h->n_heads,
                        .kv_heads = h->n_kv_heads,
                        .vocab_size = V,
                        .padded_vocab_size = V,
                        .max_seq_len = h->seq_len,
                        .untied = untied,
                        .rope_theta = REMAT_LLAMA2C_THETA,
                        .norm_eps = NORM_EPS};
  return remat_config_check(cfg, why);
}

/* Floats in the two RoPE tables of a legacy file: seq_len * head_size / 2
 * each (run.c's skips). */
static size_t freq_floats(const remat_config *c) {
  return (size_t)c->max_seq_len * (size_t)(c->channels / c->num_heads);
}

/* The size of a legacy file of shape c, with or without the tables. The
 * limits remat_config_check holds keep these sums far from overflow. */
static size_t legacy_bytes(const remat_config *c, int freq_cis) {
  return REMAT_LLAMA2C_LEGACY_HEADER_BYTES +
         4 * (remat_param_count(c) + (freq_cis ? freq_floats(c) : 0));
}

/* A legacy header in head (n bytes of a file of size bytes): a valid shape
 * and exactly the file's size. why receives the reason (without the path)
 * when it is not one. */
static int legacy_header(const uint8_t *head, size_t n, size_t size, remat_config *cfg,
                         int *freq_cis, remat_error *why) {
  if (n < REMAT_LLAMA2C_LEGACY_HEADER_BYTES)
    return remat__errorf(why, REMAT_EFORMAT, "its %zu bytes are fewer than the header's %d",
                         size, REMAT_LLAMA2C_LEGACY_HEADER_BYTES);
  l2c_config h = get_config(head);
  char text[160];
  /* a negative vocab_size marks an untied head (run.c: shared_weights) */
  int64_t V = h.vocab_size < 0 ? -(int64_t)h.vocab_size : h.vocab_size;
  remat_error sub = {0};
  if (shape_of(&h, V, h.vocab_size < 0, cfg, &sub)) /* the reason names the ints */
    return remat__errorf(why, REMAT_EFORMAT, "its ints are no shape: %s", sub.msg);
  size_t bare = legacy_bytes(cfg, 0), full = legacy_bytes(cfg, 1);
  if (size != bare && size != full)
    return remat__errorf(why, REMAT_EFORMAT,
                         "its ints (%s) make a file of %zu bytes (%zu with the RoPE tables), "
                         "not %zu",
                         config_text(&h, text, sizeof text), bare, full, size);
  *freq_cis = size == full;
  return 0;
}

/* A version 1 header: magic, version 1, the Config, shared_classifier;
 * the file's size exactly what they imply. */
static int v1_header(const uint8_t *head, size_t n, size_t size, const char *path,
                     remat_config *cfg, remat_error *err) {
  if (n < REMAT_LLAMA2C_HEADER_BYTES)
    return remat__errorf(err, REMAT_EFORMAT,
                         "llama2.c model '%s' is truncated: it has %zu bytes but version 1's "
                         "header alone needs %d; export it again",
                         path, size, REMAT_LLAMA2C_HEADER_BYTES);
  int32_t version = (int32_t)get_le32(head + 4);
  if (version != 1)
    return remat__errorf(err, REMAT_EFORMAT,
                         "llama2.c model '%s' has version %d; remat reads version 1 (fp32) and "
                         "the legacy format, not version 2 (Q8_0, runq.c's): export it with "
                         "export.py --version 1",
                         path, version);
  l2c_config h = get_config(head + 8);
  uint8_t shared = head[36];
  if (shared > 1)
    return remat__errorf(err, REMAT_EFORMAT,
                         "llama2.c model '%s' has shared_classifier %u, not 0 or 1: the header "
                         "is corrupt",
                         path, (unsigned)shared);
  remat_error sub = {0};
  if (shape_of(&h, h.vocab_size, !shared, cfg, &sub))
    return remat__errorf(err, REMAT_EFORMAT, "llama2.c model '%s' has a bad header: %s", path,
                         sub.msg);
  size_t np = remat_param_count(cfg), want = REMAT_LLAMA2C_HEADER_BYTES + 4 * np;
  if (size < want)
    return remat__errorf(err, REMAT_EFORMAT,
                         "llama2.c model '%s' is truncated: its header announces %zu fp32 "
                         "parameters (%zu bytes in all) but the file has %zu bytes; export or "
                         "download it again",
                         path, np, want, size);
  if (size > want)
    return remat__errorf(err, REMAT_EFORMAT,
                         "llama2.c model '%s' has %zu trailing bytes: its header announces %zu "
                         "fp32 parameters (%zu bytes in all) but the file has %zu bytes; the "
                         "file is corrupt or not a version 1 export",
                         path, size - want, np, want, size);
  return 0;
}

int remat__checkpoint_format(const uint8_t *head, size_t n, size_t size, const char *path,
                             int *format, remat_error *err) {
  *format = REMAT_FORMAT_AUTO;
  uint32_t magic = n >= 4 ? get_le32(head) : 0;
  if (n >= 4 && magic == (uint32_t)REMAT_CKPT_MAGIC) return *format = REMAT_FORMAT_LLMC, 0;
  if (n >= 4 && magic == REMAT_LLAMA2C_MAGIC) return *format = REMAT_FORMAT_LLAMA2C_V1, 0;
  remat_config cfg;
  int freq_cis;
  remat_error why = {0};
  if (!legacy_header(head, n, size, &cfg, &freq_cis, &why))
    return *format = REMAT_FORMAT_LLAMA2C_LEGACY, 0;
  if (n < REMAT_LLAMA2C_LEGACY_HEADER_BYTES)
    return remat__errorf(err, REMAT_EFORMAT,
                         "'%s' is truncated or not a model file: its %zu bytes are fewer than "
                         "any model file's header (llm.c's %d, llama2.c's %d or %d); give an "
                         "llm.c GPT-2 checkpoint or a llama2.c model",
                         path, size, REMAT_HEADER_BYTES, REMAT_LLAMA2C_HEADER_BYTES,
                         REMAT_LLAMA2C_LEGACY_HEADER_BYTES);
  return remat__errorf(err, REMAT_EFORMAT,
                       "'%s' is not a model file remat reads: its magic number %d is neither "
                       "llm.c's %d nor llama2.c's \"ak42\", and read as llama2.c's legacy header "
                       "(no magic) %s; give an llm.c GPT-2 checkpoint or a llama2.c model",
                       path, (int32_t)magic, REMAT_CKPT_MAGIC, why.msg);
}

int remat__llama2c_header(const uint8_t *head, size_t n, size_t size, const char *path,
                          int format, remat_config *cfg, int *version, int *freq_cis,
                          remat_error *err) {
  *freq_cis = 0;
  if (format == REMAT_FORMAT_LLAMA2C_V1) {
    *version = REMAT_LLAMA2C_V1;
    return v1_header(head, n, size, path, cfg, err);
  }
  *version = REMAT_LLAMA2C_LEGACY;
  remat_error why = {0};
  if (legacy_header(head, n, size, cfg, freq_cis, &why))
    return remat__errorf(err, REMAT_EFORMAT, "llama2.c model '%s' is not a legacy file: %s",
                         path, why.msg);
  return 0;
}

/* --------------------------------------------------------------- layout */

/* export.py's version1_export: the norms, the embedding, the block
 * matrices, the head (absent when tied: size 0). */
static const int v1_order[REMAT_LP_COUNT] = {
    REMAT_LP_ATTNORM, REMAT_LP_FFNNORM, REMAT_LP_NORM, REMAT_LP_EMB,
    REMAT_LP_WQ,      REMAT_LP_WK,      REMAT_LP_WV,   REMAT_LP_WO,
    REMAT_LP_W1,      REMAT_LP_W2,      REMAT_LP_W3,   REMAT_LP_CLS};

int remat__llama2c_spans(const remat_config *cfg, int format, int freq_cis,
                         remat__span spans[REMAT_P_COUNT]) {
  size_t sz[REMAT_P_COUNT], first[REMAT_P_COUNT], at = 0;
  remat_param_sizes(cfg, sz);
  for (int k = 0; k < REMAT_P_COUNT; k++) first[k] = at, at += sz[k];
  int n = 0;
  if (format == REMAT_FORMAT_LLAMA2C_LEGACY) {
    /* run.c's order is remat's up to the final norm, then the tables */
    size_t body = first[REMAT_LP_CLS];
    spans[n++] = (remat__span){REMAT_LLAMA2C_LEGACY_HEADER_BYTES, 0, body};
    if (sz[REMAT_LP_CLS])
      spans[n++] = (remat__span){REMAT_LLAMA2C_LEGACY_HEADER_BYTES +
                                     4 * (body + (freq_cis ? freq_floats(cfg) : 0)),
                                 first[REMAT_LP_CLS], sz[REMAT_LP_CLS]};
    return n;
  }
  at = REMAT_LLAMA2C_HEADER_BYTES;
  for (int i = 0; i < REMAT_LP_COUNT; i++) {
    int k = v1_order[i];
    if (!sz[k]) continue;
    spans[n++] = (remat__span){at, first[k], sz[k]};
    at += 4 * sz[k];
  }
  return n;
}

/* ----------------------------------------------------------- RoPE tables */

/* Pair i's frequency, theta^(-2i/hs), rounded where precompute_freqs_cis
 * rounds: arange(0, hs, 2).float() / hs, theta ** that, 1 / that, all
 * fp32. */
static float pair_freq(float theta, int64_t hs, int64_t i) {
  float e = (float)(2 * i) / (float)hs;
  return 1.0f / powf(theta, e);
}

/* Table entry j (row t = j / half, pair i = j % half): cos or sin of the
 * fp32 product t * freq (torch.outer of an int64 and an fp32 tensor). */
static float table_at(float theta, int64_t hs, size_t j, int sine) {
  int64_t half = hs / 2, t = (int64_t)(j / (size_t)half), i = (int64_t)(j % (size_t)half);
  float a = (float)t * pair_freq(theta, hs, i);
  return sine ? sinf(a) : cosf(a);
}

void remat_llama2c_freq_cis(const remat_config *cfg, float *cos_t, float *sin_t) {
  int64_t hs = cfg->channels / cfg->num_heads;
  float theta = (float)cfg->rope_theta;
  size_t n = freq_floats(cfg) / 2;
  for (size_t j = 0; j < n; j++) {
    if (cos_t) cos_t[j] = table_at(theta, hs, j, 0);
    if (sin_t) sin_t[j] = table_at(theta, hs, j, 1);
  }
}

/* One table (cos, then sin) in stack-sized chunks. */
static int write_table(remat__wfile *w, const remat_config *cfg, int sine, remat_error *err) {
  int64_t hs = cfg->channels / cfg->num_heads;
  float theta = (float)cfg->rope_theta, chunk[2048];
  size_t n = freq_floats(cfg) / 2;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < 2048 ? n - done : 2048;
    for (size_t j = 0; j < k; j++) chunk[j] = table_at(theta, hs, done + j, sine);
    int rc = remat__wfile_write_f32(w, chunk, k, err);
    if (rc) return rc;
    done += k;
  }
  return 0;
}

/* --------------------------------------------------------------- saving */

int remat_checkpoint_format_check(const remat_config *cfg, int format, int version,
                                  remat_error *err) {
  if (format < 0 || format >= REMAT_FORMAT_COUNT)
    return remat__errorf(err, REMAT_EINVAL,
                         "unknown checkpoint format %d: auto, llm.c, llama2c-legacy or "
                         "llama2c-v1",
                         format);
  int llama = cfg->family == REMAT_FAMILY_LLAMA;
  if (format == REMAT_FORMAT_AUTO)
    format = llama ? REMAT_FORMAT_LLAMA2C_V1 : REMAT_FORMAT_LLMC;
  if (format == REMAT_FORMAT_LLMC) {
    if (llama)
      return remat__errorf(err, REMAT_EINVAL,
                           "llm.c's checkpoint holds GPT-2, not a Llama: save a Llama as "
                           "llama2c-v1 (its default) or llama2c-legacy");
    if (version && version != REMAT_CKPT_VERSION && version != REMAT_CKPT_VERSION_BF16)
      return remat__errorf(err, REMAT_EINVAL,
                           "llm.c's checkpoint has versions %d (fp32) and %d (bf16), not %d",
                           REMAT_CKPT_VERSION, REMAT_CKPT_VERSION_BF16, version);
    return 0;
  }
  if (!llama)
    return remat__errorf(err, REMAT_EINVAL,
                         "llama2.c's formats hold a Llama, not GPT-2: save GPT-2 as llm.c (its "
                         "default)");
  if (version && version != REMAT_CKPT_VERSION)
    return remat__errorf(err, REMAT_EINVAL,
                         "llama2.c's formats hold fp32 weights: a Llama is saved in fp32, not "
                         "%s (llm.c's bf16 version 5 holds GPT-2 only)",
                         version == REMAT_CKPT_VERSION_BF16 ? "bf16" : "another precision");
  return 0;
}

int remat__llama2c_save_check(const remat_config *cfg, int version, const char *name,
                              remat_error *err) {
  if (version != REMAT_LLAMA2C_LEGACY && version != REMAT_LLAMA2C_V1)
    return remat__errorf(err, REMAT_EINVAL,
                         "cannot save llama2.c model '%s' in version %d: remat writes the "
                         "legacy format (%d) and version 1",
                         name, version, REMAT_LLAMA2C_LEGACY);
  remat_error sub = {0};
  if (remat_config_check(cfg, &sub))
    return remat__errorf(err, REMAT_EINVAL, "cannot save llama2.c model '%s': %s", name,
                         sub.msg);
  if (cfg->family != REMAT_FAMILY_LLAMA)
    return remat__errorf(err, REMAT_EINVAL,
                         "cannot save '%s' as a llama2.c model: it holds a Llama and this is a "
                         "GPT-2 shape; save GPT-2 in llm.c's format (remat_checkpoint_save)",
                         name);
  if (cfg->padded_vocab_size != cfg->vocab_size)
    return remat__errorf(err, REMAT_EINVAL,
                         "cannot save llama2.c model '%s': its vocabulary is unpadded, and this "
                         "shape pads V=%lld to Vp=%lld",
                         name, (long long)cfg->vocab_size, (long long)cfg->padded_vocab_size);
  return 0;
}

int remat__llama2c_write(const char *path, const remat_config *cfg, const float *params,
                         int version, remat_error *err) {
  /* the header: run.c's Config (a negative vocab_size marks an untied
   * head in the legacy format; version 1 says so in a byte of its own) */
  uint8_t head[REMAT_LLAMA2C_HEADER_BYTES] = {0};
  int legacy = version == REMAT_LLAMA2C_LEGACY, untied = !remat__tied(cfg);
  uint8_t *p = legacy ? head : head + 8;
  const int64_t fields[7] = {cfg->channels,   cfg->ffn_hidden,
                             cfg->num_layers, cfg->num_heads,
                             cfg->kv_heads,   legacy && untied ? -cfg->vocab_size : cfg->vocab_size,
                             cfg->max_seq_len};
  for (int i = 0; i < 7; i++) put_le32(p + 4 * i, (uint32_t)(int32_t)fields[i]);
  if (!legacy) {
    put_le32(head, REMAT_LLAMA2C_MAGIC);
    put_le32(head + 4, 1);
    head[36] = (uint8_t)!untied;
  }
  remat__wfile w;
  int rc = remat__wfile_open(&w, path, "llama2.c model", err);
  if (rc) return rc;
  rc = remat__wfile_write(
      &w, head, legacy ? REMAT_LLAMA2C_LEGACY_HEADER_BYTES : REMAT_LLAMA2C_HEADER_BYTES, err);
  remat__span sp[REMAT_P_COUNT];
  int n = remat__llama2c_spans(
      cfg, legacy ? REMAT_FORMAT_LLAMA2C_LEGACY : REMAT_FORMAT_LLAMA2C_V1, 1, sp);
  for (int i = 0; !rc && i <= n; i++) {
    /* a legacy file's tables lie between the final norm and the head (the
     * second span, or the end when the head is tied) */
    if (legacy && i == 1) rc = write_table(&w, cfg, 0, err);
    if (!rc && legacy && i == 1) rc = write_table(&w, cfg, 1, err);
    if (!rc && i < n) rc = remat__wfile_write_f32(&w, params + sp[i].first, sp[i].count, err);
  }
  if (rc) {
    remat__wfile_abort(&w);
    return rc;
  }
  return remat__wfile_commit(&w, err);
}
