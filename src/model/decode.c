/* decode.c: the decoder every family shares (model/decode.h): its region,
 * planned by remat__decode_view in the config's family and allocated in
 * one piece on the backend, the weights' views (its own copy or a model's
 * tensors), and the forward, which is the family's own file's
 * (gpt2_decode.c, llama_decode.c), chosen from a table by family. */
#include <string.h>

#include "base/base.h"
#include "model/decode.h"
#include "model/model.h"

static int plan(remat__decoder *d, const remat__backend *be, const remat_config *cfg, int64_t cap,
                int64_t rows, int own, remat_error *err) {
  memset(d, 0, sizeof *d);
  d->be = be ? be : remat__backend_default();
  d->cfg = *cfg;
  d->cfg.precision = REMAT_PRECISION_FP32;
  d->cfg.tensor_parallel = d->cfg.sequence_parallel = 0; /* the whole model decodes */
  if (cap < 2 || cap > cfg->max_seq_len || rows < 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "a context of %lld positions (2 .. %lld) and rows of %lld cannot decode",
                         (long long)cap, (long long)cfg->max_seq_len, (long long)rows);
  d->cap = cap;
  d->rows = rows;
  int rc = remat__kernel_ws_get(&d->ws, d->be->sizes, &d->cfg, 1, rows, err);
  if (rc) return rc;
  d->bytes = remat__decode_view(NULL, NULL, &d->cfg, cap, rows, own, &d->ws);
  d->region = d->be->buffer_alloc(d->bytes);
  if (!d->region) {
    char b[32];
    return remat__errorf(err, REMAT_ENOMEM,
                         "cannot allocate the %s the generator's cache needs; give a shorter "
                         "context",
                         remat_format_bytes(d->bytes, b, sizeof b));
  }
  remat__decode_view(&d->a, d->region, &d->cfg, cap, rows, own, &d->ws);
  return 0;
}

int remat__decoder_create(remat__decoder *d, const remat__backend *be, const remat_config *cfg,
                          int64_t cap, int64_t rows, remat_error *err) {
  int rc = plan(d, be, cfg, cap, rows, 1, err);
  if (rc) return rc;
  float *v[REMAT_P_COUNT];
  remat__param_views(&d->cfg, d->a.params, v);
  for (int i = 0; i < REMAT_P_COUNT; i++) d->w[i] = v[i];
  return 0;
}

int remat__decoder_create_model(remat__decoder *d, remat_model *m, int64_t cap, int64_t rows,
                                remat_error *err) {
  memset(d, 0, sizeof *d);
  const remat_stage *st = &m->stage;
  if (!st->has_embedding || !st->has_head || st->num_blocks != m->cfg.num_layers ||
      remat__model_buf_sharded(m, REMAT_BUF_PARAMS))
    return remat__errorf(err, REMAT_EINVAL,
                         "generation needs the whole model's weights in one process, not a "
                         "pipeline stage's or a ZeRO 3 shard");
  int rc = plan(d, m->be, &m->cfg, cap, rows, 0, err);
  if (rc) return rc;
  for (int i = 0; i < REMAT_P_COUNT; i++) d->w[i] = m->p[i];
  return 0;
}

void remat__decoder_destroy(remat__decoder *d) {
  if (d->region) d->be->buffer_free(d->region);
  d->region = NULL;
}

size_t remat__decoder_measured_bytes(const remat__decoder *d) {
  return d->be->high_water(d->region, d->bytes, 0);
}

/* Each family's forward, by remat_family. */
static void (*const forward[REMAT_FAMILY_COUNT])(remat__decoder *, int64_t, int64_t) = {
    [REMAT_FAMILY_GPT2] = remat__gpt2_decoder_forward,
    [REMAT_FAMILY_LLAMA] = remat__llama_decoder_forward,
};

void remat__decoder_forward(remat__decoder *d, int64_t pos, int64_t n) {
  REMAT_ASSERT(n >= 1 && n <= d->rows && pos >= 0 && pos + n <= d->cap);
  forward[d->cfg.family](d, pos, n);
}
