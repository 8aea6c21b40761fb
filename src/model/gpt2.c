/* gpt2.c: GPT-2 forward, backward and update over one planned arena, for
 * the whole model or for one pipeline stage (a contiguous run of blocks, with
 * or without the embedding and the head, and n micro-batches in flight, each
 * in its own slot). Each block either keeps its internals or recomputes them
 * from its input just before its backward. See include/remat/model.h for the
 * life of a step.
 *
 * Orders that a pipeline can follow too, so that one process and P stages
 * give the same bits: the head's gradient of the tied token embedding is
 * summed over micro-batches apart from the embedding's, and the two sums are
 * added before the update (embedding + head); the squared gradient norm is a
 * sum over layers in model order of per-layer sums (remat_model_grad_sumsq). */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "model/model.h"

/* Written over the whole arena at init so the high-water mark can be
 * measured: a NaN bit pattern, which no healthy buffer ever holds. */
static const uint64_t POISON = 0x7FF4DEAD7FF4DEADull;

void remat_hparams_default(remat_hparams *hp) {
  *hp = (remat_hparams){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f, .grad_clip = 1.0f, .dropout = 0.0f, .seed = 1337};
}

int remat__model_plan(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                      const remat_stage *st, remat_error *err) {
  *out = NULL;
  remat_model *m = remat__calloc(1, sizeof *m);
  if (!m) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = remat_memplan_build_stage(&m->mp, cfg, B, T, st, err);
  if (rc) {
    remat__free(m);
    return rc;
  }
  m->cfg = *cfg;
  m->B = B;
  m->T = T;
  m->stage = *st;
  m->stage.policy = m->mp.policy;
  remat__stage_param_sizes(cfg, &m->stage, m->sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) m->num_params += m->sz[i];
  *out = m;
  return 0;
}

int remat__model_allocate(remat_model *m, remat_error *err) {
  REMAT_ASSERT(!m->arena);
  m->arena = remat__malloc(m->mp.peak_bytes);
  if (!m->arena) {
    char need[32];
    return remat__errorf(err, REMAT_ENOMEM,
                         "cannot allocate the %s arena this plan needs; recompute more blocks "
                         "or use a smaller batch",
                         remat_format_bytes(m->mp.peak_bytes, need, sizeof need));
  }
  uint64_t *w = (uint64_t *)m->arena;
  for (size_t i = 0; i < m->mp.peak_bytes / sizeof(uint64_t); i++) w[i] = POISON;

  const remat_membuf *b = m->mp.buf;
#define AT(k) (b[k].bytes ? (void *)(m->arena + b[k].offset) : NULL)
  m->params = AT(REMAT_BUF_PARAMS);
  m->grads = AT(REMAT_BUF_GRADS);
  m->adam_m = AT(REMAT_BUF_ADAM_M);
  m->adam_v = AT(REMAT_BUF_ADAM_V);
  m->dresid = AT(REMAT_BUF_DRESID);
  m->work = AT(REMAT_BUF_WORK);
  m->tied_grad = AT(REMAT_BUF_TIED_GRAD);
  m->send = AT(REMAT_BUF_SEND);
#undef AT
  remat__stage_param_views(&m->cfg, &m->stage, m->params, m->p);
  remat__stage_param_views(&m->cfg, &m->stage, m->grads, m->g);
  size_t P = b[REMAT_BUF_PARAMS].bytes;
  memset(m->params, 0, P);
  memset(m->grads, 0, P);
  memset(m->adam_m, 0, P);
  memset(m->adam_v, 0, P);
  if (m->tied_grad) memset(m->tied_grad, 0, b[REMAT_BUF_TIED_GRAD].bytes);
  return 0;
}

int remat_model_create_stage(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                             const remat_stage *st, remat_error *err) {
  int rc = remat__model_plan(out, cfg, B, T, st, err);
  if (rc) return rc;
  if ((rc = remat__model_allocate(*out, err))) {
    remat_model_destroy(*out);
    *out = NULL;
  }
  return rc;
}

int remat_model_create(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                       const uint8_t *policy, remat_error *err) {
  remat_stage st = remat_stage_whole(cfg, policy);
  return remat_model_create_stage(out, cfg, B, T, &st, err);
}

void remat_model_destroy(remat_model *m) {
  if (!m) return;
  remat__free(m->arena);
  remat_memplan_free(&m->mp);
  remat__free(m);
}

const remat_config *remat_model_config(const remat_model *m) { return &m->cfg; }
const remat_memplan *remat_model_memplan(const remat_model *m) { return &m->mp; }
const remat_stage *remat_model_stage(const remat_model *m) { return &m->stage; }
size_t remat_model_num_params(const remat_model *m) { return m->num_params; }
float *remat_model_params(remat_model *m) { return m->params; }
float *remat_model_grads(remat_model *m) { return m->grads; }
float *remat_model_adam_m(remat_model *m) { return m->adam_m; }
float *remat_model_adam_v(remat_model *m) { return m->adam_v; }
float *remat_model_tensor(remat_model *m, int tensor, size_t *floats) {
  if (floats) *floats = m->sz[tensor];
  return m->p[tensor];
}
float *remat_model_tensor_grad(remat_model *m, int tensor) { return m->g[tensor]; }
float *remat_model_dresid(remat_model *m) { return m->dresid; }
float *remat_model_stage_output(remat_model *m) { return m->send; }
int64_t remat_model_step(const remat_model *m) { return m->step; }
void remat_model_set_step(remat_model *m, int64_t step) { m->step = step; }
double remat_model_recompute_seconds(const remat_model *m) { return m->recompute_s; }
size_t remat_stage_num_params(const remat_config *cfg, const remat_stage *st) {
  size_t sz[REMAT_P_COUNT], n = 0;
  remat__stage_param_sizes(cfg, st, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) n += sz[i];
  return n;
}
double remat_model_take_recompute_seconds(remat_model *m) {
  double s = m->recompute_s;
  m->recompute_s = 0;
  return s;
}

float *remat_model_workspace(remat_model *m, size_t *bytes) {
  /* the larger of the transient workspace and the send buffer: both are
   * free between steps (a stage of the embedding alone has no workspace) */
  size_t work = m->mp.buf[REMAT_BUF_WORK].bytes, send = m->mp.buf[REMAT_BUF_SEND].bytes;
  *bytes = work >= send ? work : send;
  return work >= send ? (float *)m->work : m->send;
}

/* Moves a stage's tensors between its own flat buffer and a whole model's
 * (llm.c order). */
static void stage_params_copy(const remat_config *cfg, const remat_stage *st, float *flat,
                              float *full, int to_full) {
  size_t all[REMAT_P_COUNT], mine[REMAT_P_COUNT];
  remat_param_sizes(cfg, all);
  remat__stage_param_sizes(cfg, st, mine);
  float *f = full;
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    if (mine[i]) {
      size_t first = mine[i] == all[i] ? 0 : all[i] / (size_t)cfg->num_layers * (size_t)st->first_block;
      if (to_full)
        memcpy(f + first, flat, mine[i] * sizeof(float));
      else
        memcpy(flat, f + first, mine[i] * sizeof(float));
      flat += mine[i];
    }
    f += all[i];
  }
}

void remat_stage_params_to_full(const remat_config *cfg, const remat_stage *st,
                                const float *flat, float *full) {
  stage_params_copy(cfg, st, (float *)flat, full, 1);
}

void remat_stage_params_from_full(const remat_config *cfg, const remat_stage *st,
                                  const float *full, float *flat) {
  stage_params_copy(cfg, st, flat, (float *)full, 0);
}

static char *slot_at(remat_model *m, int64_t slot) {
  REMAT_ASSERT(slot >= 0 && slot < m->stage.inflight);
  return m->arena + m->mp.buf[REMAT_BUF_SLOTS].offset + (size_t)slot * m->mp.slot_bytes;
}

int32_t *remat_model_slot_inputs(remat_model *m, int64_t slot) {
  return m->stage.has_embedding ? (int32_t *)(slot_at(m, slot) + m->mp.inputs_offset) : NULL;
}
int32_t *remat_model_slot_targets(remat_model *m, int64_t slot) {
  return m->stage.has_head ? (int32_t *)(slot_at(m, slot) + m->mp.targets_offset) : NULL;
}
int32_t *remat_model_inputs(remat_model *m) { return remat_model_slot_inputs(m, 0); }
int32_t *remat_model_targets(remat_model *m) { return remat_model_slot_targets(m, 0); }

/* Input of the stage's block i; i = num_blocks is the head's input. */
static float *resid_at(remat_model *m, char *slot, int64_t i) {
  size_t off = i < m->stage.num_blocks ? m->mp.block_input_offset[i] : m->mp.final_offset;
  return (float *)(slot + off);
}

float *remat_model_stage_input(remat_model *m, int64_t slot) {
  if (m->stage.has_embedding) return NULL;
  return resid_at(m, slot_at(m, slot), 0);
}

size_t remat_model_arena_high_water(remat_model *m) {
  const uint64_t *w = (const uint64_t *)m->arena;
  size_t n = m->mp.peak_bytes / sizeof(uint64_t);
  size_t lo = m->high_water / sizeof(uint64_t);
  /* Only the part above the last mark can have changed state. */
  for (size_t i = n; i > lo; i--) {
    if (w[i - 1] != POISON) {
      m->high_water = i * sizeof(uint64_t);
      break;
    }
  }
  return m->high_water;
}

/* Element offset of the stage's first element of tensor i in the whole
 * tensor: block tensors start at the stage's first block. */
static size_t tensor_first(const remat_model *m, int i) {
  size_t all[REMAT_P_COUNT];
  remat_param_sizes(&m->cfg, all);
  switch (i) {
  case REMAT_P_WTE:
  case REMAT_P_WPE:
  case REMAT_P_LNFW:
  case REMAT_P_LNFB:
    return 0;
  default:
    return all[i] / (size_t)m->cfg.num_layers * (size_t)m->stage.first_block;
  }
}

void remat_model_init_weights(remat_model *m, uint64_t seed) {
  const remat_config *c = &m->cfg;
  float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    size_t n = m->sz[i], first = tensor_first(m, i);
    if (!n) continue;
    switch (i) {
    case REMAT_P_WTE:
    case REMAT_P_WPE:
    case REMAT_P_QKVW:
    case REMAT_P_FCW:
      remat__init_normal(m->p[i], first, n, std, seed, (uint32_t)i);
      break;
    case REMAT_P_ATTPROJW:
    case REMAT_P_FCPROJW:
      remat__init_normal(m->p[i], first, n, proj_std, seed, (uint32_t)i);
      break;
    case REMAT_P_LN1W:
    case REMAT_P_LN2W:
    case REMAT_P_LNFW:
      for (size_t k = 0; k < n; k++) m->p[i][k] = 1.0f;
      break;
    default:
      memset(m->p[i], 0, n * sizeof(float));
    }
  }
  /* padded vocabulary rows never see a token: keep them zero */
  if (m->p[REMAT_P_WTE]) {
    size_t V = (size_t)c->vocab_size, Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels;
    memset(m->p[REMAT_P_WTE] + V * C, 0, (Vp - V) * C * sizeof(float));
  }
}

/* Per-layer parameter slices. */
typedef struct {
  const float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
      *fcprojb;
} block_params;
typedef struct {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_grads;

#define SLICE(arr, l, C, per) ((arr) + (size_t)(l) * (size_t)(per) * (size_t)(C))
#define BLOCK_VIEW(T, src, l, C)                                                            \
  (T) {                                                                                     \
    SLICE(src[REMAT_P_LN1W], l, C, 1), SLICE(src[REMAT_P_LN1B], l, C, 1),                   \
        SLICE(src[REMAT_P_QKVW], l, C, 3 * C), SLICE(src[REMAT_P_QKVB], l, C, 3),           \
        SLICE(src[REMAT_P_ATTPROJW], l, C, C), SLICE(src[REMAT_P_ATTPROJB], l, C, 1),       \
        SLICE(src[REMAT_P_LN2W], l, C, 1), SLICE(src[REMAT_P_LN2B], l, C, 1),               \
        SLICE(src[REMAT_P_FCW], l, C, 4 * C), SLICE(src[REMAT_P_FCB], l, C, 4),             \
        SLICE(src[REMAT_P_FCPROJW], l, C, 4 * C), SLICE(src[REMAT_P_FCPROJB], l, C, 1)      \
  }

/* Block i of the stage (global block first_block + i) in a slot: its
 * internals live in the slot when kept, in the scratch when recomputed. */
static remat__block_acts block_acts(remat_model *m, char *slot, int64_t i) {
  remat__block_acts a;
  size_t off = m->mp.block_internal_offset[i];
  float *base = off != REMAT_NO_OFFSET ? (float *)(slot + off)
                                       : (float *)(m->work + m->mp.mm.block_dgrad_bytes);
  remat__block_acts_view(&a, base, m->B, m->T, m->cfg.channels, m->cfg.num_heads);
  return a;
}

static remat__dropout drop_at(const remat_hparams *hp, int64_t step, uint32_t micro, int64_t l,
                              uint32_t site) {
  return (remat__dropout){.p = hp ? hp->dropout : 0.0f, .seed = hp ? hp->seed : 0,
                          .step = (uint32_t)step, .micro = micro, .layer = (uint32_t)l,
                          .site = site};
}

/* One block (index i within the stage) forward from x (B,T,C) into a's internals and out (B,T,C). With
 * out == NULL it stops after the GELU: that is all a recompute needs, since
 * the block's output is already stored as the next block's input. */
static void block_forward(remat_model *m, int64_t i, const float *x, remat__block_acts *a,
                          float *out, const remat_hparams *hp, uint32_t micro) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
  int64_t l = m->stage.first_block + i; /* the dropout streams are keyed by the global index */
  size_t BTC = (size_t)N * (size_t)C;
  block_params w = BLOCK_VIEW(block_params, m->p, i, C);
  remat__dropout d_att = drop_at(hp, m->step, micro, l, REMAT_DROP_ATTN);
  remat__dropout d_r1 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID1);
  remat__dropout d_r2 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID2);

  remat__layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, N, C);
  remat__matmul_forward(a->qkv, a->ln1, w.qkvw, w.qkvb, N, C, 3 * C);
  remat__attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH, &d_att);
  remat__matmul_forward(a->res2, a->atty, w.projw, w.projb, N, C, C);
  remat__dropout_apply(a->res2, a->res2, BTC, &d_r1);
  remat__residual_forward(a->res2, a->res2, x, BTC);
  remat__layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, N, C);
  remat__matmul_forward(a->fch, a->ln2, w.fcw, w.fcb, N, C, 4 * C);
  remat__gelu_forward(a->fch_gelu, a->fch, 4 * BTC);
  if (!out) return;
  remat__matmul_forward(out, a->fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C);
  remat__dropout_apply(out, out, BTC, &d_r2);
  remat__residual_forward(out, out, a->res2, BTC);
}

/* On entry m->dresid holds dL/d(block output); on exit dL/d(block input). */
static void block_backward(remat_model *m, int64_t i, const float *x, const remat__block_acts *a,
                           const remat_hparams *hp, uint32_t micro) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
  int64_t l = m->stage.first_block + i;
  size_t BTC = (size_t)N * (size_t)C;
  block_params w = BLOCK_VIEW(block_params, m->p, i, C);
  block_grads g = BLOCK_VIEW(block_grads, m->g, i, C);
  remat__block_dgrads dgrads, *d = &dgrads;
  remat__block_dgrads_view(d, (float *)m->work, B, T, C, NH);
  remat__dropout d_att = drop_at(hp, m->step, micro, l, REMAT_DROP_ATTN);
  remat__dropout d_r1 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID1);
  remat__dropout d_r2 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID2);

  /* MLP branch: out = res2 + dropout(fcproj(gelu(fc(ln2(res2))))) */
  remat__dropout_apply(d->dbranch, m->dresid, BTC, &d_r2);
  remat__matmul_backward(d->d4, g.fcprojw, g.fcprojb, d->dbranch, a->fch_gelu, w.fcprojw, N,
                         4 * C, C);
  remat__gelu_backward(d->d4, a->fch, d->d4, 4 * BTC);
  remat__matmul_backward(d->dln, g.fcw, g.fcb, d->d4, a->ln2, w.fcw, N, C, 4 * C);
  remat__layernorm_backward(m->dresid, g.ln2w, g.ln2b, d->dln, a->res2, w.ln2w, a->ln2_mean,
                            a->ln2_rstd, N, C);
  /* attention branch: res2 = x + dropout(proj(attn(qkv(ln1(x))))) */
  remat__dropout_apply(d->dbranch, m->dresid, BTC, &d_r1);
  remat__matmul_backward(d->datty, g.projw, g.projb, d->dbranch, a->atty, w.projw, N, C, C);
  remat__attention_backward(d->dqkv, d->att_delta, d->datty, a->qkv, a->atty, a->att_lse, B, T,
                            C, NH, &d_att);
  remat__matmul_backward(d->dln, g.qkvw, g.qkvb, d->dqkv, a->ln1, w.qkvw, N, C, 3 * C);
  remat__layernorm_backward(m->dresid, g.ln1w, g.ln1b, d->dln, x, w.ln1w, a->ln1_mean,
                            a->ln1_rstd, N, C);
}

/* Final layernorm, logits and loss of the micro-batch in `slot`; returns
 * the summed loss. */
static double head_forward(remat_model *m, char *slot, remat__head_acts *h) {
  const remat_config *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->channels;
  remat__head_acts_view(h, (float *)m->work, m->B, m->T, C);
  remat__layernorm_forward(h->lnf, h->lnf_mean, h->lnf_rstd, resid_at(m, slot, m->stage.num_blocks),
                           m->p[REMAT_P_LNFW], m->p[REMAT_P_LNFB], N, C);
  float *logits = (float *)(m->work + m->mp.mm.head_bytes);
  remat__matmul_forward(logits, h->lnf, m->p[REMAT_P_WTE], NULL, N, C, c->padded_vocab_size);
  const int32_t *targets = (const int32_t *)(slot + m->mp.targets_offset);
  return remat__crossentropy_forward(logits, h->losses, targets, N, c->vocab_size,
                                     c->padded_vocab_size);
}

void remat_model_stage_forward(remat_model *m, int64_t slot_index, uint32_t micro,
                               const remat_hparams *hp) {
  char *slot = slot_at(m, slot_index);
  int64_t nb = m->stage.num_blocks;
  if (m->stage.has_embedding) {
    float *out = nb || m->stage.has_head ? resid_at(m, slot, 0) : m->send;
    remat__encoder_forward(out, (const int32_t *)(slot + m->mp.inputs_offset),
                           m->p[REMAT_P_WTE], m->p[REMAT_P_WPE], m->B, m->T, m->cfg.channels);
  }
  for (int64_t i = 0; i < nb; i++) {
    remat__block_acts a = block_acts(m, slot, i);
    float *out = i + 1 < nb || m->stage.has_head ? resid_at(m, slot, i + 1) : m->send;
    block_forward(m, i, resid_at(m, slot, i), &a, out, hp, micro);
  }
}

double remat_model_stage_backward(remat_model *m, int64_t slot_index, uint32_t micro, float dloss,
                                  const remat_hparams *hp) {
  const remat_config *c = &m->cfg;
  char *slot = slot_at(m, slot_index);
  int64_t N = m->B * m->T, C = c->channels, nb = m->stage.num_blocks;
  double loss = 0;
  if (m->stage.has_head) {
    remat__head_acts h;
    loss = head_forward(m, slot, &h);
    float *logits = (float *)(m->work + m->mp.mm.head_bytes);
    const int32_t *targets = (const int32_t *)(slot + m->mp.targets_offset);
    remat__crossentropy_backward(logits, targets, dloss, N, c->vocab_size, c->padded_vocab_size);
    /* the head's share of the tied matrix's gradient, summed on its own */
    float *gwte = m->tied_grad ? m->tied_grad : m->g[REMAT_P_WTE];
    remat__matmul_backward(h.dlnf, gwte, NULL, logits, h.lnf, m->p[REMAT_P_WTE], N, C,
                           c->padded_vocab_size);
    memset(m->dresid, 0, (size_t)N * (size_t)C * sizeof(float));
    remat__layernorm_backward(m->dresid, m->g[REMAT_P_LNFW], m->g[REMAT_P_LNFB], h.dlnf,
                              resid_at(m, slot, nb), m->p[REMAT_P_LNFW], h.lnf_mean, h.lnf_rstd,
                              N, C);
  }
  for (int64_t i = nb - 1; i >= 0; i--) {
    remat__block_acts a = block_acts(m, slot, i);
    if (m->mp.policy[i] == REMAT_RECOMPUTE) {
      double t0 = remat__now();
      block_forward(m, i, resid_at(m, slot, i), &a, NULL, hp, micro);
      m->recompute_s += remat__now() - t0;
    }
    block_backward(m, i, resid_at(m, slot, i), &a, hp, micro);
  }
  if (m->stage.has_embedding)
    remat__encoder_backward(m->g[REMAT_P_WTE], m->g[REMAT_P_WPE], m->dresid,
                            (const int32_t *)(slot + m->mp.inputs_offset), m->B, m->T, C);
  return loss;
}

float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                   const remat_hparams *hp) {
  REMAT_ASSERT(m->stage.has_embedding && m->stage.has_head);
  remat_model_stage_forward(m, 0, micro, hp);
  double loss = remat_model_stage_backward(m, 0, micro, dloss, hp);
  return (float)(loss / (double)(m->B * m->T));
}

float remat_model_eval(remat_model *m) {
  REMAT_ASSERT(m->stage.has_embedding && m->stage.has_head);
  remat_model_stage_forward(m, 0, 0, NULL);
  remat__head_acts h;
  return (float)(head_forward(m, slot_at(m, 0), &h) / (double)(m->B * m->T));
}

void remat_model_zero_grad(remat_model *m) {
  memset(m->grads, 0, m->num_params * sizeof(float));
  if (m->tied_grad) memset(m->tied_grad, 0, m->sz[REMAT_P_WTE] * sizeof(float));
  m->tied_summed = 0;
}

void remat_model_sum_tied(remat_model *m) {
  if (!m->tied_grad || m->tied_summed) return;
  m->tied_summed = 1;
  float *g = m->g[REMAT_P_WTE];
  const float *h = m->tied_grad;
  size_t n = m->sz[REMAT_P_WTE];
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) g[i] = g[i] + h[i]; /* embedding + head */
}

/* The layers of the stage, in model order: the embedding (wte, wpe), each
 * block (its 12 tensors), the head (the final layernorm; its copy of wte is
 * counted once, on the embedding). Each layer's sum is over its tensors in
 * llm.c order, each tensor summed by remat__sumsq. */
int64_t remat_model_grad_sumsq_layers(const remat_model *m, double *out) {
  int64_t k = 0;
  if (m->stage.has_embedding)
    out[k++] = remat__sumsq(m->g[REMAT_P_WTE], m->sz[REMAT_P_WTE]) +
               remat__sumsq(m->g[REMAT_P_WPE], m->sz[REMAT_P_WPE]);
  for (int64_t i = 0; i < m->stage.num_blocks; i++) {
    double s = 0;
    for (int t = REMAT_P_LN1W; t <= REMAT_P_FCPROJB; t++) {
      size_t per = m->sz[t] / (size_t)m->stage.num_blocks;
      s += remat__sumsq(m->g[t] + (size_t)i * per, per);
    }
    out[k++] = s;
  }
  if (m->stage.has_head)
    out[k++] = remat__sumsq(m->g[REMAT_P_LNFW], m->sz[REMAT_P_LNFW]) +
               remat__sumsq(m->g[REMAT_P_LNFB], m->sz[REMAT_P_LNFB]);
  return k;
}

int64_t remat_model_num_layers(const remat_model *m) {
  return m->stage.num_blocks + m->stage.has_embedding + m->stage.has_head;
}

double remat_model_grad_sumsq(const remat_model *m) {
  double part[4096 + 2], s = 0;
  REMAT_ASSERT(remat_model_num_layers(m) <= 4096 + 2);
  int64_t n = remat_model_grad_sumsq_layers(m, part);
  for (int64_t k = 0; k < n; k++) s += part[k];
  return s;
}

static int decays(int tensor) {
  switch (tensor) {
  case REMAT_P_WTE:
  case REMAT_P_WPE:
  case REMAT_P_QKVW:
  case REMAT_P_ATTPROJW:
  case REMAT_P_FCW:
  case REMAT_P_FCPROJW:
    return 1;
  default:
    return 0;
  }
}

void remat_model_update(remat_model *m, const remat_hparams *hp, float lr, float norm) {
  float scale = 1.0f;
  if (hp->grad_clip > 0) {
    float coef = hp->grad_clip / (norm + 1e-6f);
    if (coef < 1.0f) scale = coef;
  }
  m->step++;
  remat__adamw opt = {.lr = lr, .beta1 = hp->beta1, .beta2 = hp->beta2, .eps = hp->eps,
                      .step = (int)m->step};
  float *pm = m->adam_m, *pv = m->adam_v;
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    if (!m->sz[i]) continue;
    remat__adamw_update(m->p[i], m->g[i], pm, pv, m->sz[i], &opt,
                        decays(i) ? hp->weight_decay : 0.0f, scale);
    pm += m->sz[i];
    pv += m->sz[i];
  }
}
