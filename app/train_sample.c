/* train_sample.c: the samples `remat train --sample-every N` prints between
 * steps, as llm.c's trainer does: a generator (remat/generate.h) over the
 * training model's own weights, on its backend, made once before the first
 * step so that no step allocates for it, and decoded as bytes or with
 * GPT-2's BPE. */
#include "train_sample.h"

#include <stdlib.h>
#include <string.h>

#define SAMPLE_TOKENS 64

struct train_sampler {
  remat_generator *gen;
  remat_bpe *bpe; /* NULL: byte tokens */
  int32_t out[SAMPLE_TOKENS];
};

int train_sampler_create(train_sampler **out, remat_model *m, const char *vocab_dir,
                         remat_error *err) {
  *out = NULL;
  const remat_config *cfg = remat_model_config(m);
  if (cfg->vocab_size != 256 && cfg->vocab_size != REMAT_BPE_VOCAB) {
    snprintf(err->msg, sizeof err->msg, "--sample-every needs a byte model (V = 256) or GPT-2's "
             "vocabulary (V = %d); this model has V = %lld", REMAT_BPE_VOCAB,
             (long long)cfg->vocab_size);
    return err->code = REMAT_EINVAL;
  }
  train_sampler *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err->msg, sizeof err->msg, "out of memory for the sampler");
    return err->code = REMAT_ENOMEM;
  }
  int rc = cfg->vocab_size == REMAT_BPE_VOCAB ? remat_bpe_create(&s->bpe, vocab_dir, err) : 0;
  if (!rc) rc = remat_generator_create_model(&s->gen, m, 0, err);
  if (rc) {
    train_sampler_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* Bytes as they are, but control bytes escaped so the sample stays one
 * line; bytes from 128 on are escaped for a byte model (not UTF-8), kept
 * for BPE (GPT-2's tokens are UTF-8 pieces). */
static void put_bytes(const unsigned char *p, size_t n, int keep_high, FILE *f) {
  for (size_t i = 0; i < n; i++) {
    unsigned c = p[i];
    if (c == '\n') fputs("\\n", f);
    else if (c == '\\') fputs("\\\\", f);
    else if (c < 32 || c == 127 || (c >= 128 && !keep_high)) fprintf(f, "\\x%02x", c);
    else fputc((int)c, f);
  }
}

/* A BPE sample ends at <|endoftext|>, as remat sample's does: the end of a
 * document, not text. */
static int stop_at_eot(void *ctx, int32_t token) {
  (void)ctx;
  return token == REMAT_BPE_EOT;
}

int train_sampler_print(train_sampler *s, int64_t step, FILE *f, remat_error *err) {
  remat_sample_opts o;
  remat_sample_opts_default(&o);
  o.tokens = SAMPLE_TOKENS;
  o.seed = (uint64_t)step;
  int32_t prompt = s->bpe ? REMAT_BPE_EOT : '\n';
  int64_t n = 0;
  int rc = remat_generate(s->gen, &prompt, 1, &o, s->out, &n, s->bpe ? stop_at_eot : NULL, NULL,
                          err);
  if (rc) return rc;
  if (s->bpe && n > 0 && s->out[n - 1] == REMAT_BPE_EOT) n--; /* not written */
  fprintf(f, "sample  step %lld | ", (long long)step);
  for (int64_t i = 0; i < n; i++) {
    size_t len = 1;
    unsigned char byte = (unsigned char)s->out[i];
    const char *p = s->bpe ? remat_bpe_token(s->bpe, s->out[i], &len) : (const char *)&byte;
    if (p) put_bytes((const unsigned char *)p, len, s->bpe != NULL, f);
  }
  fputc('\n', f);
  fflush(f);
  return 0;
}

size_t train_sampler_planned_bytes(const train_sampler *s) {
  return s ? remat_generator_planned_bytes(s->gen) : 0;
}

void train_sampler_destroy(train_sampler *s) {
  if (!s) return;
  remat_generator_destroy(s->gen);
  remat_bpe_destroy(s->bpe);
  free(s);
}
