/* gpt2.c: GPT-2 forward, backward and update over one planned arena, with
 * each block either keeping its internals or recomputing them from its input
 * just before its backward. See engine.h for the life of a step. */
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
                      const uint8_t *policy, remat_error *err) {
  *out = NULL;
  remat_model *m = remat__calloc(1, sizeof *m);
  if (!m) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = remat_memplan_build(&m->mp, cfg, B, T, policy, err);
  if (rc) {
    remat__free(m);
    return rc;
  }
  m->cfg = *cfg;
  m->B = B;
  m->T = T;
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
  m->params = (float *)(m->arena + b[REMAT_BUF_PARAMS].offset);
  m->grads = (float *)(m->arena + b[REMAT_BUF_GRADS].offset);
  m->adam_m = (float *)(m->arena + b[REMAT_BUF_ADAM_M].offset);
  m->adam_v = (float *)(m->arena + b[REMAT_BUF_ADAM_V].offset);
  m->slot = m->arena + b[REMAT_BUF_SLOTS].offset;
  m->inputs = (int32_t *)(m->slot + m->mp.inputs_offset);
  m->targets = (int32_t *)(m->slot + m->mp.targets_offset);
  m->dresid = (float *)(m->arena + b[REMAT_BUF_DRESID].offset);
  m->work = m->arena + b[REMAT_BUF_WORK].offset;
  remat__param_views(&m->cfg, m->params, m->p);
  remat__param_views(&m->cfg, m->grads, m->g);
  size_t P = b[REMAT_BUF_PARAMS].bytes;
  memset(m->params, 0, P);
  memset(m->grads, 0, P);
  memset(m->adam_m, 0, P);
  memset(m->adam_v, 0, P);
  return 0;
}

int remat_model_create(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                       const uint8_t *policy, remat_error *err) {
  int rc = remat__model_plan(out, cfg, B, T, policy, err);
  if (rc) return rc;
  if ((rc = remat__model_allocate(*out, err))) {
    remat_model_destroy(*out);
    *out = NULL;
  }
  return rc;
}

void remat_model_destroy(remat_model *m) {
  if (!m) return;
  remat__free(m->arena);
  remat_memplan_free(&m->mp);
  remat__free(m);
}

const remat_config *remat_model_config(const remat_model *m) { return &m->cfg; }
const remat_memplan *remat_model_memplan(const remat_model *m) { return &m->mp; }
float *remat_model_params(remat_model *m) { return m->params; }
float *remat_model_grads(remat_model *m) { return m->grads; }
float *remat_model_adam_m(remat_model *m) { return m->adam_m; }
float *remat_model_adam_v(remat_model *m) { return m->adam_v; }
int32_t *remat_model_inputs(remat_model *m) { return m->inputs; }
int32_t *remat_model_targets(remat_model *m) { return m->targets; }
int64_t remat_model_step(const remat_model *m) { return m->step; }
void remat_model_set_step(remat_model *m, int64_t step) { m->step = step; }
double remat_model_take_recompute_seconds(remat_model *m) {
  double s = m->recompute_s;
  m->recompute_s = 0;
  return s;
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

void remat_model_init_weights(remat_model *m, uint64_t seed) {
  const remat_config *c = &m->cfg;
  size_t sz[REMAT_P_COUNT];
  remat_param_sizes(c, sz);
  float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    switch (i) {
    case REMAT_P_WTE:
    case REMAT_P_WPE:
    case REMAT_P_QKVW:
    case REMAT_P_FCW:
      remat__init_normal(m->p[i], sz[i], std, seed, (uint32_t)i);
      break;
    case REMAT_P_ATTPROJW:
    case REMAT_P_FCPROJW:
      remat__init_normal(m->p[i], sz[i], proj_std, seed, (uint32_t)i);
      break;
    case REMAT_P_LN1W:
    case REMAT_P_LN2W:
    case REMAT_P_LNFW:
      for (size_t k = 0; k < sz[i]; k++) m->p[i][k] = 1.0f;
      break;
    default:
      memset(m->p[i], 0, sz[i] * sizeof(float));
    }
  }
  /* padded vocabulary rows never see a token: keep them zero */
  size_t V = (size_t)c->vocab_size, Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels;
  memset(m->p[REMAT_P_WTE] + V * C, 0, (Vp - V) * C * sizeof(float));
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

static remat__block_acts block_acts(remat_model *m, int64_t l) {
  remat__block_acts a;
  size_t off = m->mp.block_internal_offset[l];
  float *base = off != REMAT_NO_OFFSET ? (float *)(m->slot + off)
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

/* One block forward from x (B,T,C) into a's internals and out (B,T,C). With
 * out == NULL it stops after the GELU: that is all a recompute needs, since
 * the block's output is already stored as the next block's input. */
static void block_forward(remat_model *m, int64_t l, const float *x, remat__block_acts *a,
                          float *out, const remat_hparams *hp, uint32_t micro) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
  size_t BTC = (size_t)N * (size_t)C;
  block_params w = BLOCK_VIEW(block_params, m->p, l, C);
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

/* The gradient entering a residual branch: dropout(dresid) into buf, or
 * dresid itself when the site does not drop (no copy). */
static const float *branch_grad(float *buf, const float *dresid, size_t n,
                                const remat__dropout *d) {
  if (d->p <= 0.0f) return dresid;
  remat__dropout_apply(buf, dresid, n, d);
  return buf;
}

/* On entry m->dresid holds dL/d(block output); on exit dL/d(block input). */
static void block_backward(remat_model *m, int64_t l, const float *x, const remat__block_acts *a,
                           const remat_hparams *hp, uint32_t micro) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
  size_t BTC = (size_t)N * (size_t)C;
  block_params w = BLOCK_VIEW(block_params, m->p, l, C);
  block_grads g = BLOCK_VIEW(block_grads, m->g, l, C);
  remat__block_dgrads dgrads, *d = &dgrads;
  remat__block_dgrads_view(d, (float *)m->work, B, T, C, NH);
  remat__dropout d_att = drop_at(hp, m->step, micro, l, REMAT_DROP_ATTN);
  remat__dropout d_r1 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID1);
  remat__dropout d_r2 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID2);

  /* MLP branch: out = res2 + dropout(fcproj(gelu(fc(ln2(res2))))). Without
   * dropout the branch's gradient is dresid itself, read before the
   * layernorm backward adds to dresid. */
  const float *dbranch = branch_grad(d->dbranch, m->dresid, BTC, &d_r2);
  remat__matmul_backward(d->d4, g.fcprojw, g.fcprojb, dbranch, a->fch_gelu, w.fcprojw, N,
                         4 * C, C);
  remat__gelu_backward(d->d4, a->fch, d->d4, 4 * BTC);
  remat__matmul_backward(d->dln, g.fcw, g.fcb, d->d4, a->ln2, w.fcw, N, C, 4 * C);
  remat__layernorm_backward(m->dresid, g.ln2w, g.ln2b, d->dln, a->res2, w.ln2w, a->ln2_mean,
                            a->ln2_rstd, N, C);
  /* attention branch: res2 = x + dropout(proj(attn(qkv(ln1(x))))) */
  dbranch = branch_grad(d->dbranch, m->dresid, BTC, &d_r1);
  remat__matmul_backward(d->datty, g.projw, g.projb, dbranch, a->atty, w.projw, N, C, C);
  remat__attention_backward(d->dqkv, d->att_delta, d->datty, a->qkv, a->atty, a->att_lse, B, T,
                            C, NH, &d_att);
  remat__matmul_backward(d->dln, g.qkvw, g.qkvb, d->dqkv, a->ln1, w.qkvw, N, C, 3 * C);
  remat__layernorm_backward(m->dresid, g.ln1w, g.ln1b, d->dln, x, w.ln1w, a->ln1_mean,
                            a->ln1_rstd, N, C);
}

/* Input of block l; l = L is the final residual, the head's input. */
static float *resid_at(remat_model *m, int64_t l) {
  size_t off = l < m->cfg.num_layers ? m->mp.block_input_offset[l] : m->mp.final_offset;
  return (float *)(m->slot + off);
}

static void forward_blocks(remat_model *m, const remat_hparams *hp, uint32_t micro) {
  const remat_config *c = &m->cfg;
  remat__encoder_forward(resid_at(m, 0), m->inputs, m->p[REMAT_P_WTE], m->p[REMAT_P_WPE], m->B,
                         m->T, c->channels);
  for (int64_t l = 0; l < c->num_layers; l++) {
    remat__block_acts a = block_acts(m, l);
    block_forward(m, l, resid_at(m, l), &a, resid_at(m, l + 1), hp, micro);
  }
}

/* Final layernorm, logits and loss; returns the summed loss. */
static double head_forward(remat_model *m, remat__head_acts *h) {
  const remat_config *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->channels;
  remat__head_acts_view(h, (float *)m->work, m->B, m->T, C);
  remat__layernorm_forward(h->lnf, h->lnf_mean, h->lnf_rstd, resid_at(m, c->num_layers),
                           m->p[REMAT_P_LNFW], m->p[REMAT_P_LNFB], N, C);
  float *logits = (float *)(m->work + m->mp.mm.head_bytes);
  remat__matmul_forward(logits, h->lnf, m->p[REMAT_P_WTE], NULL, N, C, c->padded_vocab_size);
  return remat__crossentropy_forward(logits, h->losses, m->targets, N, c->vocab_size,
                                     c->padded_vocab_size);
}

float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                   const remat_hparams *hp) {
  const remat_config *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->channels, L = c->num_layers;
  forward_blocks(m, hp, micro);
  remat__head_acts h;
  double loss = head_forward(m, &h);

  float *logits = (float *)(m->work + m->mp.mm.head_bytes);
  remat__crossentropy_backward(logits, m->targets, dloss, N, c->vocab_size,
                               c->padded_vocab_size);
  remat__matmul_backward(h.dlnf, m->g[REMAT_P_WTE], NULL, logits, h.lnf,
                         m->p[REMAT_P_WTE], N, C, c->padded_vocab_size);
  memset(m->dresid, 0, (size_t)N * (size_t)C * sizeof(float));
  remat__layernorm_backward(m->dresid, m->g[REMAT_P_LNFW], m->g[REMAT_P_LNFB], h.dlnf,
                            resid_at(m, L), m->p[REMAT_P_LNFW], h.lnf_mean, h.lnf_rstd, N, C);

  for (int64_t l = L - 1; l >= 0; l--) {
    remat__block_acts a = block_acts(m, l);
    if (m->mp.policy[l] == REMAT_RECOMPUTE) {
      double t0 = remat__now();
      block_forward(m, l, resid_at(m, l), &a, NULL, hp, micro);
      m->recompute_s += remat__now() - t0;
    }
    block_backward(m, l, resid_at(m, l), &a, hp, micro);
  }
  remat__encoder_backward(m->g[REMAT_P_WTE], m->g[REMAT_P_WPE], m->dresid, m->inputs, m->B, m->T,
                          C);
  return (float)(loss / (double)N);
}

float remat_model_eval(remat_model *m) {
  forward_blocks(m, NULL, 0);
  remat__head_acts h;
  return (float)(head_forward(m, &h) / (double)(m->B * m->T));
}

void remat_model_zero_grad(remat_model *m) {
  memset(m->grads, 0, remat_param_count(&m->cfg) * sizeof(float));
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

float remat_model_grad_norm(const remat_model *m) {
  return (float)sqrt(remat__sumsq(m->grads, remat_param_count(&m->cfg)));
}

void remat_model_update(remat_model *m, const remat_hparams *hp, float lr, float norm) {
  size_t sz[REMAT_P_COUNT];
  remat_param_sizes(&m->cfg, sz);
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
    remat__adamw_update(m->p[i], m->g[i], pm, pv, sz[i], &opt,
                        decays(i) ? hp->weight_decay : 0.0f, scale);
    pm += sz[i];
    pv += sz[i];
  }
}
