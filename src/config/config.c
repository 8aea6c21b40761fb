/* config.c: model shapes: the built-in configs, GPT-2's "L,C,NH,V,T" and
 * Llama's "llama:..." specs, parameter tensor sizes (from the family's
 * table, config/family.h), and model FLOPs per token. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "remat/config.h"

typedef struct {
  const char *name;
  int64_t L, C, NH, V, T;
  const char *about;
  /* Llama's (family llama): key/value heads, MLP width, rotary base */
  int64_t family, NKV, H;
  double theta;
} builtin;

static const builtin builtins[] = {
    {"tiny", 2, 64, 4, 256, 64, "2 layers, C=64, byte vocabulary; for tests", 0, 0, 0, 0},
    {"small", 4, 128, 4, 256, 128, "4 layers, C=128, byte vocabulary; the default", 0, 0, 0, 0},
    {"gpt2-124m", 12, 768, 12, 50257, 1024, "GPT-2 small", 0, 0, 0, 0},
    {"gpt2-350m", 24, 1024, 16, 50257, 1024, "GPT-2 medium", 0, 0, 0, 0},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024, "GPT-2 large", 0, 0, 0, 0},
    {"gpt2-1558m", 48, 1600, 25, 50257, 1024, "GPT-2 XL", 0, 0, 0, 0},
    {"llama-tiny", 2, 64, 4, 256, 64, "Llama, 2 layers, C=64, 2 key/value heads, byte vocabulary; for tests",
     REMAT_FAMILY_LLAMA, 2, 176, 10000.0},
    {"llama-small", 4, 128, 4, 256, 128, "Llama, 4 layers, C=128, 2 key/value heads, byte vocabulary",
     REMAT_FAMILY_LLAMA, 2, 352, 10000.0},
    {"llama-124m", 12, 768, 12, 32000, 1024, "Llama, GPT-2 small's depth and width, 4 key/value heads",
     REMAT_FAMILY_LLAMA, 4, 2048, 10000.0},
    {"tinyllama-1.1b", 22, 2048, 32, 32000, 2048, "TinyLlama 1.1B", REMAT_FAMILY_LLAMA, 4, 5632,
     10000.0},
    {"llama2-7b", 32, 4096, 32, 32000, 4096, "Llama 2 7B", REMAT_FAMILY_LLAMA, 32, 11008, 10000.0},
    {"llama2-13b", 40, 5120, 40, 32000, 4096, "Llama 2 13B", REMAT_FAMILY_LLAMA, 40, 13824,
     10000.0},
    {"llama3-8b", 32, 4096, 32, 128256, 8192, "Llama 3 8B", REMAT_FAMILY_LLAMA, 8, 14336,
     500000.0},
    {"llama3-70b", 80, 8192, 64, 128256, 8192, "Llama 3 70B", REMAT_FAMILY_LLAMA, 8, 28672,
     500000.0},
};
#define NBUILTIN (sizeof builtins / sizeof builtins[0])

const char *const *remat_config_names(void) {
  static const char *names[NBUILTIN + 1];
  for (size_t i = 0; i < NBUILTIN; i++) names[i] = builtins[i].name;
  names[NBUILTIN] = NULL;
  return names;
}

const char *remat_config_describe(const char *name) {
  for (size_t i = 0; i < NBUILTIN; i++)
    if (strcmp(builtins[i].name, name) == 0) return builtins[i].about;
  return NULL;
}

const char *remat_precision_name(int p) {
  static const char *const names[REMAT_PRECISION_COUNT] = {"fp32", "bf16"};
  return p >= 0 && p < REMAT_PRECISION_COUNT ? names[p] : "?";
}

int remat_precision_parse(const char *s, int *out) {
  for (int p = 0; p < REMAT_PRECISION_COUNT; p++)
    if (s && strcmp(s, remat_precision_name(p)) == 0) return *out = p, 0;
  return -1;
}

int64_t remat_padded_vocab(int64_t V) {
  if (V < 128) return V;
  return (V + 127) / 128 * 128;
}

/* Limits keep every product of dimensions far from overflow. */
#define MAX_DIM ((int64_t)1 << 20)

/* A tensor-parallel degree splits the heads, the MLP's width and the
 * (padded) vocabulary evenly. */
static int tensor_check(const remat_config *c, remat_error *err) {
  int64_t t = c->tensor_parallel;
  if (t < 0 || t > 4096)
    return remat__errorf(err, REMAT_ERANGE, "a tensor-parallel degree of %lld: give 1 to 4096",
                         (long long)t);
  if (c->sequence_parallel != 0 && c->sequence_parallel != 1)
    return remat__errorf(err, REMAT_EINVAL, "sequence_parallel must be 0 or 1, not %lld",
                         (long long)c->sequence_parallel);
  if (t <= 1) {
    if (c->sequence_parallel)
      return remat__errorf(err, REMAT_EINVAL,
                           "sequence parallelism splits the sequence among tensor-parallel "
                           "ranks: give a tensor-parallel degree of 2 or more with it");
    return 0;
  }
  int64_t H = remat__mlp_width(c);
  const char *what = c->num_heads % t ? "heads NH"
                     : H % t          ? "MLP width"
                     : c->padded_vocab_size % t ? "padded vocabulary"
                                                : NULL;
  int64_t n = c->num_heads % t ? c->num_heads : H % t ? H : c->padded_vocab_size;
  if (what)
    return remat__errorf(err, REMAT_EINVAL,
                         "a tensor-parallel degree of %lld must divide the %s (%lld): every "
                         "rank takes an equal share",
                         (long long)t, what, (long long)n);
  return 0;
}

int remat_config_check(const remat_config *c, remat_error *err) {
  if (c->num_layers < 1 || c->channels < 1 || c->num_heads < 1 || c->vocab_size < 2 ||
      c->max_seq_len < 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "model shape L=%lld C=%lld NH=%lld V=%lld T=%lld: every dimension must be "
                         "positive (and V at least 2)",
                         (long long)c->num_layers, (long long)c->channels,
                         (long long)c->num_heads, (long long)c->vocab_size,
                         (long long)c->max_seq_len);
  if (c->num_layers > REMAT_MAX_LAYERS || c->channels > 65536 || c->num_heads > c->channels ||
      c->vocab_size > MAX_DIM || c->max_seq_len > MAX_DIM)
    return remat__errorf(err, REMAT_ERANGE,
                         "model shape L=%lld C=%lld NH=%lld V=%lld T=%lld is out of range "
                         "(L <= 4096, C <= 65536, NH <= C, V and T <= %lld)",
                         (long long)c->num_layers, (long long)c->channels,
                         (long long)c->num_heads, (long long)c->vocab_size,
                         (long long)c->max_seq_len, (long long)MAX_DIM);
  if (c->precision < 0 || c->precision >= REMAT_PRECISION_COUNT)
    return remat__errorf(err, REMAT_EINVAL, "unknown precision %lld: fp32 or bf16", (long long)c->precision);
  if (c->head_chunk < 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "a head chunk of %lld tokens: give a positive count, or 0 for all "
                         "of a micro-batch's tokens at once",
                         (long long)c->head_chunk);
  if (c->channels % c->num_heads != 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "channels C=%lld must be divisible by heads NH=%lld",
                         (long long)c->channels, (long long)c->num_heads);
  if (c->family < 0 || c->family >= REMAT_FAMILY_COUNT)
    return remat__errorf(err, REMAT_EINVAL, "unknown model family %lld: gpt2 or llama",
                         (long long)c->family);
  if (c->family == REMAT_FAMILY_LLAMA) {
    int64_t hs = c->channels / c->num_heads;
    if (c->kv_heads < 1 || c->num_heads % c->kv_heads != 0)
      return remat__errorf(err, REMAT_EINVAL,
                           "key/value heads NKV=%lld must be positive and divide the heads "
                           "NH=%lld",
                           (long long)c->kv_heads, (long long)c->num_heads);
    if (hs % 2 != 0)
      return remat__errorf(err, REMAT_EINVAL,
                           "head size C/NH=%lld must be even: rotary embeddings turn pairs",
                           (long long)hs);
    if (c->ffn_hidden < 1 || c->ffn_hidden > 4 * MAX_DIM)
      return remat__errorf(err, REMAT_ERANGE, "MLP width H=%lld must be 1 to %lld",
                           (long long)c->ffn_hidden, (long long)(4 * MAX_DIM));
    if (!(c->rope_theta > 1.0) || !(c->rope_theta < 1e12))
      return remat__errorf(err, REMAT_EINVAL, "rope theta %g must be above 1 (10000, 500000)",
                           c->rope_theta);
    if (!(c->norm_eps > 0.0) || !(c->norm_eps < 1.0))
      return remat__errorf(err, REMAT_EINVAL, "RMSNorm epsilon %g must be in (0, 1)",
                           c->norm_eps);
    if (c->untied != 0 && c->untied != 1)
      return remat__errorf(err, REMAT_EINVAL, "untied must be 0 or 1, not %lld",
                           (long long)c->untied);
  } else if (c->kv_heads || c->ffn_hidden || c->untied || c->rope_theta != 0.0 ||
             c->norm_eps != 0.0) {
    return remat__errorf(err, REMAT_EINVAL,
                         "a GPT-2 shape has no key/value heads, MLP width, rope or RMSNorm "
                         "epsilon of its own");
  }
  if (c->padded_vocab_size < c->vocab_size)
    return remat__errorf(err, REMAT_EINVAL, "padded vocabulary %lld is smaller than V=%lld",
                         (long long)c->padded_vocab_size, (long long)c->vocab_size);
  if (c->padded_vocab_size > MAX_DIM)
    return remat__errorf(err, REMAT_ERANGE,
                         "padded vocabulary %lld is larger than the limit %lld; pad V=%lld to "
                         "at most %lld",
                         (long long)c->padded_vocab_size, (long long)MAX_DIM,
                         (long long)c->vocab_size, (long long)MAX_DIM);
  return tensor_check(c, err);
}

static int parse_dim(const char *s, const char *end, int64_t *out) {
  if (s == end) return -1;
  int64_t v = 0;
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
    if (v > ((int64_t)1 << 40)) return -1;
  }
  *out = v;
  return 0;
}

/* "L,C,NH,NKV,H,V,T[,theta[,tied]]" after "llama:". */
static int parse_llama(const char *s, remat_config *cfg, remat_error *err) {
  int64_t d[7];
  double theta = 10000.0;
  int64_t tied = 0;
  const char *p = s;
  for (int k = 0; k < 7; k++) {
    const char *e = strchr(p, ',');
    if (k < 6 && !e) goto bad;
    if (k == 6 && !e) e = p + strlen(p);
    if (parse_dim(p, e, &d[k])) goto bad;
    p = *e ? e + 1 : e;
  }
  if (*p) {
    char *end;
    errno = 0;
    theta = strtod(p, &end);
    if (errno || end == p || (*end && *end != ',')) goto bad;
    p = end;
    if (*p == ',') {
      p++;
      const char *e = p + strlen(p);
      if (parse_dim(p, e, &tied) || tied > 1) goto bad;
    }
  }
  *cfg = (remat_config){.num_layers = d[0], .channels = d[1], .num_heads = d[2],
                        .kv_heads = d[3], .ffn_hidden = d[4], .vocab_size = d[5],
                        .padded_vocab_size = d[5], .max_seq_len = d[6],
                        .family = REMAT_FAMILY_LLAMA, .untied = !tied, .rope_theta = theta,
                        .norm_eps = 1e-5};
  return remat_config_check(cfg, err);
bad:
  return remat__errorf(err, REMAT_EINVAL,
                       "bad Llama shape 'llama:%s': give llama:L,C,NH,NKV,H,V,T[,theta[,tied]] "
                       "such as llama:4,128,4,2,352,256,128 or llama:4,128,4,2,352,256,128,500000,1",
                       s);
}

int remat_config_parse(const char *s, remat_config *cfg, remat_error *err) {
  if (!s || !*s) return remat__errorf(err, REMAT_EINVAL, "empty model config: give a built-in name such as tiny, or L,C,NH,V,T");
  for (size_t i = 0; i < NBUILTIN; i++) {
    if (strcmp(builtins[i].name, s) == 0) {
      const builtin *b = &builtins[i];
      *cfg = (remat_config){.max_seq_len = b->T, .vocab_size = b->V,
                            .padded_vocab_size = remat_padded_vocab(b->V),
                            .num_layers = b->L, .num_heads = b->NH, .channels = b->C};
      if (b->family == REMAT_FAMILY_LLAMA) {
        cfg->family = REMAT_FAMILY_LLAMA;
        cfg->padded_vocab_size = b->V;
        cfg->kv_heads = b->NKV;
        cfg->ffn_hidden = b->H;
        cfg->untied = 1;
        cfg->rope_theta = b->theta;
        cfg->norm_eps = 1e-5;
      }
      return 0;
    }
  }
  if (strncmp(s, "llama:", 6) == 0) return parse_llama(s + 6, cfg, err);
  int64_t d[5];
  const char *p = s;
  for (int k = 0; k < 5; k++) {
    const char *e = strchr(p, ',');
    if (k < 4 && !e) goto bad;
    if (k == 4) {
      if (e) goto bad;
      e = p + strlen(p);
    }
    if (parse_dim(p, e, &d[k])) goto bad;
    p = e + 1;
  }
  *cfg = (remat_config){.num_layers = d[0], .channels = d[1], .num_heads = d[2],
                        .vocab_size = d[3], .padded_vocab_size = remat_padded_vocab(d[3]),
                        .max_seq_len = d[4]};
  return remat_config_check(cfg, err);
bad:;
  char names[512] = "";
  for (size_t i = 0; i < NBUILTIN; i++) {
    strcat(names, i ? ", " : "");
    strcat(names, builtins[i].name);
  }
  return remat__errorf(err, REMAT_EINVAL,
                       "unknown model config '%s': use one of %s, or L,C,NH,V,T such as "
                       "4,128,4,256,128",
                       s, names);
}

int remat_config_spec(const remat_config *c, char *buf, size_t cap) {
  if (c->family == REMAT_FAMILY_LLAMA)
    return snprintf(buf, cap, "llama:%lld,%lld,%lld,%lld,%lld,%lld,%lld,%.17g,%d",
                    (long long)c->num_layers, (long long)c->channels, (long long)c->num_heads,
                    (long long)c->kv_heads, (long long)c->ffn_hidden, (long long)c->vocab_size,
                    (long long)c->max_seq_len, c->rope_theta, c->untied ? 0 : 1);
  return snprintf(buf, cap, "%lld,%lld,%lld,%lld,%lld", (long long)c->num_layers,
                  (long long)c->channels, (long long)c->num_heads, (long long)c->vocab_size,
                  (long long)c->max_seq_len);
}

void remat_param_sizes(const remat_config *cfg, size_t sz[REMAT_P_COUNT]) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  size_t L = (size_t)cfg->num_layers;
  for (int i = 0; i < REMAT_P_COUNT; i++)
    sz[i] = (t[i].where == REMAT__IN_BLOCK ? L : 1) * (size_t)t[i].rows * (size_t)t[i].cols;
}

size_t remat_param_count(const remat_config *cfg) {
  size_t sz[REMAT_P_COUNT], n = 0;
  remat_param_sizes(cfg, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) n += sz[i];
  return n;
}

size_t remat_block_param_count(const remat_config *cfg) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  size_t n = 0;
  for (int i = 0; i < REMAT_P_COUNT; i++)
    if (t[i].where == REMAT__IN_BLOCK) n += (size_t)t[i].rows * (size_t)t[i].cols;
  return n;
}

double remat_block_matrix_weights(const remat_config *cfg) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  double blk = 0.0;
  for (int i = 0; i < REMAT_P_COUNT; i++)
    if (t[i].where == REMAT__IN_BLOCK && t[i].matrix) blk += (double)t[i].rows * (double)t[i].cols;
  return blk;
}

double remat_flops_per_token(const remat_config *cfg, int64_t T) {
  /* Weights that take part in a matrix product: the blocks' and the LM head
   * (over the real vocabulary). Each does 2 FLOPs per token forward, 4 backward.
   * Attention scores and their weighted sum: 2 * 2 * T * C per layer forward,
   * counted without the causal half, as PaLM does. */
  double C = (double)cfg->channels, L = (double)cfg->num_layers;
  remat_config whole = *cfg; /* the model's FLOPs, not a tensor rank's */
  whole.tensor_parallel = whole.sequence_parallel = 0;
  double n_mm = L * remat_block_matrix_weights(&whole) + (double)cfg->vocab_size * C;
  return 6.0 * n_mm + 12.0 * L * C * (double)T;
}
