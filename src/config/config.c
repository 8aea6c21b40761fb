/* config.c: GPT-2 shapes: the built-in configs, "L,C,NH,V,T" specs, parameter
 * tensor sizes in llm.c's order, and model FLOPs per token. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "remat/config.h"

typedef struct {
  const char *name;
  int64_t L, C, NH, V, T;
  const char *about;
} builtin;

static const builtin builtins[] = {
    {"tiny", 2, 64, 4, 256, 64, "2 layers, C=64, byte vocabulary; for tests"},
    {"small", 4, 128, 4, 256, 128, "4 layers, C=128, byte vocabulary; the default"},
    {"gpt2-124m", 12, 768, 12, 50257, 1024, "GPT-2 small"},
    {"gpt2-350m", 24, 1024, 16, 50257, 1024, "GPT-2 medium"},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024, "GPT-2 large"},
    {"gpt2-1558m", 48, 1600, 25, 50257, 1024, "GPT-2 XL"},
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
  if (c->channels % c->num_heads != 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "channels C=%lld must be divisible by heads NH=%lld",
                         (long long)c->channels, (long long)c->num_heads);
  if (c->padded_vocab_size < c->vocab_size)
    return remat__errorf(err, REMAT_EINVAL, "padded vocabulary %lld is smaller than V=%lld",
                         (long long)c->padded_vocab_size, (long long)c->vocab_size);
  if (c->padded_vocab_size > MAX_DIM)
    return remat__errorf(err, REMAT_ERANGE,
                         "padded vocabulary %lld is larger than the limit %lld; pad V=%lld to "
                         "at most %lld",
                         (long long)c->padded_vocab_size, (long long)MAX_DIM,
                         (long long)c->vocab_size, (long long)MAX_DIM);
  return 0;
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

int remat_config_parse(const char *s, remat_config *cfg, remat_error *err) {
  if (!s || !*s) return remat__errorf(err, REMAT_EINVAL, "empty model config: give a built-in name such as tiny, or L,C,NH,V,T");
  for (size_t i = 0; i < NBUILTIN; i++) {
    if (strcmp(builtins[i].name, s) == 0) {
      const builtin *b = &builtins[i];
      *cfg = (remat_config){.max_seq_len = b->T, .vocab_size = b->V,
                            .padded_vocab_size = remat_padded_vocab(b->V),
                            .num_layers = b->L, .num_heads = b->NH, .channels = b->C};
      return 0;
    }
  }
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
  char names[256] = "";
  for (size_t i = 0; i < NBUILTIN; i++) {
    strcat(names, i ? ", " : "");
    strcat(names, builtins[i].name);
  }
  return remat__errorf(err, REMAT_EINVAL,
                       "unknown model config '%s': use one of %s, or L,C,NH,V,T such as "
                       "4,128,4,256,128",
                       s, names);
}

void remat_param_sizes(const remat_config *cfg, size_t sz[REMAT_P_COUNT]) {
  size_t Vp = (size_t)cfg->padded_vocab_size, C = (size_t)cfg->channels;
  size_t L = (size_t)cfg->num_layers, maxT = (size_t)cfg->max_seq_len;
  sz[REMAT_P_WTE] = Vp * C;
  sz[REMAT_P_WPE] = maxT * C;
  sz[REMAT_P_LN1W] = L * C;
  sz[REMAT_P_LN1B] = L * C;
  sz[REMAT_P_QKVW] = L * 3 * C * C;
  sz[REMAT_P_QKVB] = L * 3 * C;
  sz[REMAT_P_ATTPROJW] = L * C * C;
  sz[REMAT_P_ATTPROJB] = L * C;
  sz[REMAT_P_LN2W] = L * C;
  sz[REMAT_P_LN2B] = L * C;
  sz[REMAT_P_FCW] = L * 4 * C * C;
  sz[REMAT_P_FCB] = L * 4 * C;
  sz[REMAT_P_FCPROJW] = L * C * 4 * C;
  sz[REMAT_P_FCPROJB] = L * C;
  sz[REMAT_P_LNFW] = C;
  sz[REMAT_P_LNFB] = C;
}

size_t remat_param_count(const remat_config *cfg) {
  size_t sz[REMAT_P_COUNT], n = 0;
  remat_param_sizes(cfg, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) n += sz[i];
  return n;
}

size_t remat_block_param_count(const remat_config *cfg) {
  size_t C = (size_t)cfg->channels;
  return 12 * C * C + 13 * C; /* ln1 2C, qkv 3C^2+3C, proj C^2+C, ln2 2C, fc 4C^2+4C, fcproj 4C^2+C */
}

double remat_flops_per_token(const remat_config *cfg, int64_t T) {
  /* Weights that take part in a matrix product: the blocks' and the LM head
   * (over the real vocabulary). Each does 2 FLOPs per token forward, 4 backward.
   * Attention scores and their weighted sum: 2 * 2 * T * C per layer forward,
   * counted without the causal half, as PaLM does. */
  double C = (double)cfg->channels, L = (double)cfg->num_layers;
  double n_mm = L * 12.0 * C * C + (double)cfg->vocab_size * C;
  return 6.0 * n_mm + 12.0 * L * C * (double)T;
}
