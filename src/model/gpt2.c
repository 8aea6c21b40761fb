/* gpt2.c: GPT-2 forward, backward and update over one planned arena, for
 * the whole model or for one pipeline stage (a contiguous run of blocks, with
 * or without the embedding and the head, and n micro-batches in flight, each
 * in its own slot). Each block keeps its internals, recomputes them from its
 * input just before its backward, or (middle) keeps those of its matrix
 * products and attention and recomputes its layernorm and GELU outputs. See
 * include/remat/model.h for the life of a step.
 *
 * Orders that pipeline stages and data-parallel replicas can follow too, so
 * that one process, P stages and D replicas give the same bits: a step's
 * gradient is the sum over micro-batches, in order, of each micro-batch's
 * gradient computed from zero (a layer's gradient buffer, then added; see
 * remat_model_forward_backward); the head's gradient of the tied token
 * embedding is summed over micro-batches apart from the embedding's, and the
 * two sums are added before the update (embedding + head); the squared
 * gradient norm is a sum over layers in model order of per-layer sums, each
 * the sum of its unit's chunk sums (remat_model_grad_sumsq). A replica's
 * buffers may hold only its shards (ZeRO); remat__model_unit_at finds an
 * element of a unit in either layout.
 *
 * Every kernel and every operation on the arena (allocating it, clearing,
 * copying, adding, the high-water mark) goes through the backend the model
 * holds (kernels/backend.h); the model itself only computes where things
 * are. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "model/model.h"

void remat_hparams_default(remat_hparams *hp) {
  *hp = (remat_hparams){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f, .grad_clip = 1.0f, .dropout = 0.0f, .seed = 1337};
}

/* bf16: the model's products (all five on every stage, so that their
 * scratchpad, in the workspace, is the figure the memory model took from
 * the backend's sizes for the same shapes); never more than that figure. */
static int make_products(remat_model *m, const remat_config *cfg, int64_t B, int64_t T,
                         const remat__kernel_ws *ws, remat_error *err) {
  remat__mm_shape s[REMAT__PRODUCTS];
  int ns = remat__product_shapes(cfg, B, T, s);
  int rc = m->be->products_create(&m->products, s, ns, err);
  if (rc) return rc;
  size_t need = remat__align(m->be->products_scratch(m->products));
  if (need <= ws->product_scratch) return 0;
  m->be->products_destroy(m->products);
  m->products = NULL;
  return remat__errorf(err, REMAT_EINVAL,
                       "the %s backend's products need %zu bytes of scratchpad and its sizes "
                       "said %zu",
                       m->be->name, need, ws->product_scratch);
}

int remat__model_plan_on(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                         const remat_stage *st, const remat__backend *be, remat_error *err) {
  *out = NULL;
  const remat__backend *bk = be ? be : remat__backend_default();
  int bf16 = cfg->precision == REMAT_PRECISION_BF16;
  if (cfg->family == REMAT_FAMILY_LLAMA &&
      (!bk->rmsnorm_forward || !bk->attention_forward_gqa ||
       (bf16 && (!bk->rmsnorm_forward_bf16 || !bk->attention_forward_gqa_bf16))))
    return remat__errorf(err, REMAT_EINVAL,
                         "a Llama needs its kernels (RMSNorm, the rotary embedding, "
                         "grouped-query attention), which the %s backend has not%s yet; use "
                         "the CPU backend, or plan it (remat plan)",
                         bk->name, bk->rmsnorm_forward ? " in bf16" : "");
  int llama = cfg->family == REMAT_FAMILY_LLAMA;
  int tp_bf16 = !bf16 || bk->vocab_max_bf16;
  if (cfg->tensor_parallel > 1 &&
      (!tp_bf16 || !bk->vocab_max || (llama && cfg->kv_heads % cfg->tensor_parallel)))
    return remat__errorf(err, REMAT_EINVAL,
                         "remat's engine runs tensor parallelism on the CPU backend, with a "
                         "Llama's key/value heads split too; this %s%s run of tensor degree "
                         "%lld%s on the %s backend is planned (remat plan --tensor-parallel), "
                         "not trained",
                         llama ? "Llama" : "GPT-2", bf16 ? " bf16" : "",
                         (long long)cfg->tensor_parallel,
                         llama && cfg->kv_heads % cfg->tensor_parallel
                             ? " (which does not divide its key/value heads)"
                             : "",
                         bk->name);
  /* the head's collectives work in the norm's gradient and the logits (in
   * bf16 the logits are half the bytes: four times the channels) */
  if (cfg->tensor_parallel > 1 &&
      (cfg->channels < 16 || cfg->padded_vocab_size < (bf16 ? 4 : 2) * cfg->channels))
    return remat__errorf(err, REMAT_EINVAL,
                         "tensor parallelism needs at least 16 channels and a padded vocabulary "
                         "of at least %s the channels, not %lld and %lld",
                         bf16 ? "four times" : "twice", (long long)cfg->channels,
                         (long long)cfg->padded_vocab_size);
  remat_model *m = remat__calloc(1, sizeof *m);
  if (!m) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  m->be = be ? be : remat__backend_default();
  remat__kernel_ws ws;
  int rc = remat__kernel_ws_get(&ws, m->be->sizes, cfg, B, T, err);
  if (!rc && cfg->precision == REMAT_PRECISION_BF16) rc = make_products(m, cfg, B, T, &ws, err);
  if (rc) {
    remat__free(m);
    return rc;
  }
  if ((rc = remat__memplan_build_stage_ws(&m->mp, cfg, B, T, st, &ws, err))) {
    if (m->products) m->be->products_destroy(m->products);
    remat__free(m);
    return rc;
  }
  m->ws = ws;
  m->cfg = *cfg;
  m->B = B;
  m->T = T;
  m->stage = *st;
  m->stage.policy = m->mp.policy;
  m->stage.full_slots = m->mp.full_slots;
  remat__stage_param_sizes(cfg, &m->stage, m->sz);
  size_t all[REMAT_P_COUNT], off = 0;
  remat_param_sizes(cfg, all);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    m->tensor_off[i] = off;
    off += m->sz[i];
    m->tensor_first[i] = m->sz[i] == all[i] ? 0
                         : all[i] / (size_t)cfg->num_layers * (size_t)st->first_block;
  }
  m->num_params = off;
  m->D = m->mp.replicas;
  m->r = m->mp.replica;
  m->zero = m->mp.zero;
  int64_t L = cfg->num_layers;
  m->shard_emb = remat_unit_shard(cfg, 0, m->D);
  m->shard_blk = remat_unit_shard(cfg, 1, m->D);
  m->shard_head = remat_unit_shard(cfg, L + 1, m->D);
  m->head_grad_split = m->D > 1 ? (size_t)m->D * remat_unit_shard(cfg, L + 2, m->D)
                                : remat__align(remat_unit_floats(cfg, L + 2) * sizeof(float)) /
                                      sizeof(float);
  if (remat__model_buf_sharded(m, REMAT_BUF_PARAMS))
    m->num_params = remat__stage_num_params(cfg, &m->stage);
  if (st->slots_pooled &&
      !(m->placed = remat__calloc((size_t)(st->inflight + st->wdeferred), sizeof *m->placed))) {
    remat_model_destroy(m);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  *out = m;
  return 0;
}

int remat__model_plan(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                      const remat_stage *st, remat_error *err) {
  return remat__model_plan_on(out, cfg, B, T, st, NULL, err);
}

const remat__backend *remat__model_backend(const remat_model *m) { return m->be; }

int remat__model_allocate(remat_model *m, remat_error *err) {
  REMAT_ASSERT(!m->arena);
  m->arena = m->be->buffer_alloc(m->mp.peak_bytes);
  if (!m->arena) {
    char need[32];
    return remat__errorf(err, REMAT_ENOMEM,
                         "cannot allocate the %s arena this plan needs; recompute more blocks "
                         "or use a smaller batch",
                         remat_format_bytes(m->mp.peak_bytes, need, sizeof need));
  }
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
  m->wbf = AT(REMAT_BUF_PARAMS_BF16);
  m->work_bytes = b[REMAT_BUF_WORK].bytes;
#undef AT
  /* tensor views of the whole (flat) buffers; a replica's sharded ones have none */
  if (!remat__model_buf_sharded(m, REMAT_BUF_PARAMS))
    remat__stage_param_views(&m->cfg, &m->stage, m->params, m->p);
  if (!remat__model_buf_sharded(m, REMAT_BUF_GRADS))
    remat__stage_param_views(&m->cfg, &m->stage, m->grads, m->g);
  const int persistent[] = {REMAT_BUF_PARAMS, REMAT_BUF_GRADS, REMAT_BUF_ADAM_M, REMAT_BUF_ADAM_V,
                            REMAT_BUF_TIED_GRAD};
  for (size_t i = 0; i < sizeof persistent / sizeof persistent[0]; i++) {
    const remat_membuf *r = &b[persistent[i]];
    if (r->bytes) m->be->clear(m->arena + r->offset, r->bytes);
  }
  m->grads_fresh = m->wgrads_fresh = 1;
  m->bf16_stale = 1;
  return 0;
}

void remat__model_borrow_tied(remat_model *m, const remat_model *lender) {
  REMAT_ASSERT(m->arena && lender->arena && remat__stage_tied_borrowed(&m->cfg, &m->stage) &&
               lender->stage.has_embedding && m->tied_grad && lender->p[REMAT_P_WTE]);
  m->p[REMAT_P_WTE] = lender->p[REMAT_P_WTE];
  m->bf16_stale = 1;
}

void remat__model_borrow_workspace(remat_model *m, const remat_model *lender) {
  REMAT_ASSERT(m->arena && lender->arena && m->stage.work_borrowed &&
               !lender->stage.work_borrowed && lender->work_bytes >= m->stage.work_min &&
               lender->B == m->B && lender->T == m->T);
  m->work = lender->work;
  m->work_bytes = lender->work_bytes;
}

int remat__model_create_on(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                           const remat_stage *st, const remat__backend *be, remat_error *err) {
  int rc = remat__model_plan_on(out, cfg, B, T, st, be, err);
  if (rc) return rc;
  if ((rc = remat__model_allocate(*out, err))) {
    remat_model_destroy(*out);
    *out = NULL;
  }
  return rc;
}

int remat__model_create_stage(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                              const remat_stage *st, remat_error *err) {
  return remat__model_create_on(out, cfg, B, T, st, NULL, err);
}

int remat_model_create(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                       const uint8_t *policy, remat_error *err) {
  remat_stage st = remat_stage_whole(cfg, policy);
  return remat__model_create_stage(out, cfg, B, T, &st, err);
}

void remat_model_destroy(remat_model *m) {
  if (!m) return;
  if (m->arena) m->be->buffer_free(m->arena);
  if (m->products) m->be->products_destroy(m->products);
  remat__memplan_free(&m->mp);
  remat__free(m->placed);
  remat__free(m);
}

const remat_config *remat_model_config(const remat_model *m) { return &m->cfg; }
const remat_memplan *remat_model_memplan(const remat_model *m) { return &m->mp; }
const remat_stage *remat_model_stage(const remat_model *m) { return &m->stage; }
size_t remat_model_num_params(const remat_model *m) { return m->num_params; }
/* A pointer into the parameters or gradients handed out: what the caller
 * does there the model cannot see, so the next zero_grad clears and the next
 * forward refreshes the bf16 copies (update_clean). */
float *remat_model_params(remat_model *m) {
  m->update_clean = 0;
  return m->params;
}
float *remat_model_grads(remat_model *m) {
  m->update_clean = 0;
  return m->grads;
}
float *remat_model_adam_m(remat_model *m) { return m->adam_m; }
float *remat_model_adam_v(remat_model *m) { return m->adam_v; }
float *remat__model_tensor(remat_model *m, int tensor, size_t *floats) {
  m->update_clean = 0;
  if (floats) *floats = m->sz[tensor];
  return m->p[tensor];
}
float *remat__model_tensor_grad(remat_model *m, int tensor) {
  m->update_clean = 0;
  return m->g[tensor];
}
float *remat__model_dresid(remat_model *m) { return m->dresid; }
float *remat__model_stage_output(remat_model *m) { return m->send; }
int64_t remat_model_step(const remat_model *m) { return m->step; }
void remat__model_set_step(remat_model *m, int64_t step) { m->step = step; }
double remat__model_recompute_seconds(const remat_model *m) { return m->recompute_s; }
size_t remat__stage_num_params(const remat_config *cfg, const remat_stage *st) {
  size_t sz[REMAT_P_COUNT], n = 0;
  if (st->replicas > 1 && st->zero >= 3) {
    int64_t units[4096 + 3], k = remat_stage_units(cfg, st, units);
    for (int64_t i = 0; i < k; i++) n += remat_unit_shard(cfg, units[i], st->replicas);
    return n;
  }
  remat__stage_param_sizes(cfg, st, sz);
  for (int i = 0; i < REMAT_P_COUNT; i++) n += sz[i];
  return n;
}
void remat__model_timers(const remat_model *m, double seconds[REMAT__T_COUNT],
                         int64_t count[REMAT__T_COUNT]) {
  for (int k = 0; k < REMAT__T_COUNT; k++) seconds[k] = m->timer_s[k], count[k] = m->timer_n[k];
}

/* Adds the time since t0 to timer k; returns now. */
static double lap(remat_model *m, int k, double t0) {
  double t = remat__now();
  m->timer_s[k] += t - t0;
  m->timer_n[k]++;
  return t;
}

double remat__model_take_recompute_seconds(remat_model *m) {
  double s = m->recompute_s;
  m->recompute_s = 0;
  return s;
}

void *remat__model_region(remat_model *m, int buf, size_t *bytes) {
  REMAT_ASSERT(m->arena && buf >= 0 && buf < REMAT_BUF_COUNT);
  m->update_clean = 0;
  *bytes = m->mp.buf[buf].bytes;
  return *bytes ? m->arena + m->mp.buf[buf].offset : NULL;
}

void remat__model_set_tensor_ops(remat_model *m, const remat__tensor_ops *ops) {
  m->tops = *ops;
}

static void alone_sum(void *ctx, float *buf, size_t n, float *scratch) {
  (void)ctx, (void)buf, (void)n, (void)scratch;
}
static void alone_sum_f64(void *ctx, double *buf, size_t n, double *scratch) {
  (void)ctx, (void)buf, (void)n, (void)scratch;
}
static void alone_max(void *ctx, float *buf, size_t n) { (void)ctx, (void)buf, (void)n; }
/* a rank's rows of the sum: its own part's (finite values to time on),
 * copied by the backend, whose memory it is */
static void alone_scatter(void *ctx, float *buf, size_t n, float *dst, float *rcv) {
  const remat_model *m = ctx;
  (void)rcv;
  m->be->copy(dst, buf, n / (size_t)remat__tp(&m->cfg) * sizeof(float));
}
/* every rank's rows: copies of this rank's (rank 0's, at the front), so
 * that the products, GELU and attention time values like a run's, not
 * rows of zeros (tanh of zero returns at once) */
static void alone_gather(void *ctx, float *buf, size_t n) {
  const remat_model *m = ctx;
  size_t t = (size_t)remat__tp(&m->cfg), q = n / t;
  for (size_t k = 1; k < t; k++) m->be->copy(buf + k * q, buf, q * sizeof(float));
}

void remat__model_tensor_alone(remat_model *m) {
  m->tops = (remat__tensor_ops){.sum = alone_sum, .sum_f64 = alone_sum_f64, .max = alone_max,
                                .scatter = alone_scatter, .gather = alone_gather, .ctx = m};
}

void remat__model_set_layer_ops(remat_model *m, const remat__layer_ops *ops) {
  m->lops = ops ? *ops : (remat__layer_ops){0};
}

int remat__model_buf_sharded(const remat_model *m, int buf) {
  if (m->D <= 1) return 0;
  switch (buf) {
  case REMAT_BUF_PARAMS:
    return m->zero >= 3;
  case REMAT_BUF_GRADS:
  case REMAT_BUF_TIED_GRAD:
    return m->zero >= 2;
  case REMAT_BUF_ADAM_M:
  case REMAT_BUF_ADAM_V:
    return m->zero >= 1;
  default:
    return 0;
  }
}

static float *buf_base(remat_model *m, int buf) {
  switch (buf) {
  case REMAT_BUF_PARAMS:
    return m->params;
  case REMAT_BUF_GRADS:
    return m->grads;
  case REMAT_BUF_ADAM_M:
    return m->adam_m;
  case REMAT_BUF_ADAM_V:
    return m->adam_v;
  case REMAT_BUF_TIED_GRAD: /* a head without the embedding: its copy's gradient */
    return m->tied_grad ? m->tied_grad : m->grads;
  default:
    REMAT_ASSERT(0 && "not a parameter-shaped buffer");
    return NULL;
  }
}

/* Floats before unit u in a shard vector: the stage's units in model order
 * (remat_stage_units), each one shard; the tied gradient beside the
 * embedding has a region of its own. */
static size_t shard_offset(const remat_model *m, int64_t u) {
  int64_t L = m->cfg.num_layers;
  const remat_stage *st = &m->stage;
  if (u == 0 || (u == L + 2 && m->tied_grad)) return 0;
  size_t at = st->has_embedding ? m->shard_emb : 0;
  if (u <= L) return at + (size_t)(u - 1 - st->first_block) * m->shard_blk;
  at += (size_t)st->num_blocks * m->shard_blk;
  return u == L + 1 ? at : at + m->shard_head;
}

float *remat__model_shard(remat_model *m, int buf, int64_t u) {
  REMAT_ASSERT(remat__model_buf_sharded(m, buf) && u >= 0 && u < m->cfg.num_layers + 3);
  m->update_clean = 0;
  return buf_base(m, buf) + shard_offset(m, u);
}

float *remat__model_unit_at(remat_model *m, int buf, int64_t u, size_t i, size_t *run) {
  m->update_clean = 0;
  int64_t L = m->cfg.num_layers;
  /* unit L + 2 is the tied gradient beside the embedding, or a lone head's
   * copy of the tied matrix (every buffer) */
  int alone = m->stage.has_head && !m->stage.has_embedding &&
              !remat__stage_tied_borrowed(&m->cfg, &m->stage);
  REMAT_ASSERT(u >= 0 && u < L + 3 && (buf != REMAT_BUF_TIED_GRAD || u == L + 2) &&
               (u != L + 2 || buf == REMAT_BUF_TIED_GRAD || alone));
  float *base = buf_base(m, buf);
  if (remat__model_buf_sharded(m, buf)) {
    size_t first, count;
    remat_unit_owned(&m->cfg, u, m->D, m->r, &first, &count);
    REMAT_ASSERT(i >= first && i < first + count);
    *run = first + count - i;
    return base + shard_offset(m, u) + (i - first);
  }
  remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
  int n = remat_unit_segments(&m->cfg, u, seg), k = 0;
  while (k + 1 < n && i >= seg[k].at + seg[k].count) k++;
  REMAT_ASSERT(i >= seg[k].at && i < seg[k].at + seg[k].count);
  *run = seg[k].at + seg[k].count - i;
  int t = seg[k].tensor;
  if (buf == REMAT_BUF_TIED_GRAD && m->tied_grad) return m->tied_grad + i; /* kept apart */
  size_t all[REMAT_P_COUNT], start = 0;
  remat_param_sizes(&m->cfg, all);
  for (int j = 0; j < t; j++) start += all[j];
  size_t in_tensor = seg[k].offset - start + (i - seg[k].at);
  REMAT_ASSERT(in_tensor >= m->tensor_first[t] && in_tensor - m->tensor_first[t] < m->sz[t]);
  return base + m->tensor_off[t] + (in_tensor - m->tensor_first[t]);
}

float *remat__model_workspace(remat_model *m, size_t *bytes) {
  /* the larger of the transient workspace and the send buffer: both are
   * free between steps (a stage of the embedding alone has no workspace) */
  size_t work = m->work_bytes, send = m->mp.buf[REMAT_BUF_SEND].bytes;
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

/* A tensor rank's shard to or from the whole model, run by run. */
typedef struct {
  float *flat, *full;
  int to_full;
} shard_copy;

static void copy_run(void *ctx, size_t at, size_t whole_at, size_t n) {
  shard_copy *s = ctx;
  if (s->to_full) memcpy(s->full + whole_at, s->flat + at, n * sizeof(float));
  else memcpy(s->flat + at, s->full + whole_at, n * sizeof(float));
}

/* Where tensor i starts in a tensor rank's flat model (the shard's sizes)
 * and in the whole model's. */
static size_t tensor_start(const remat_config *cfg, int i) {
  size_t sz[REMAT_P_COUNT], at = 0;
  remat_param_sizes(cfg, sz);
  for (int k = 0; k < i; k++) at += sz[k];
  return at;
}
static size_t whole_start(const remat_config *cfg, int i) {
  remat_config whole = *cfg;
  whole.tensor_parallel = whole.sequence_parallel = 0;
  return tensor_start(&whole, i);
}

/* A replica under ZeRO 3 holds its shard of each unit, unit after unit;
 * full is the config's whole vector, or with rank >= 0 a tensor rank's
 * units' elements go to their places in the whole model (without tensor
 * parallelism). */
static void shard_params_copy(const remat_config *cfg, const remat_stage *st, int64_t rank,
                              float *shards, float *full, int to_full) {
  int64_t units[4096 + 3], nu = remat_stage_units(cfg, st, units);
  float *at = shards;
  for (int64_t j = 0; j < nu; j++) {
    int64_t u = units[j];
    size_t first, count;
    remat_unit_owned(cfg, u, st->replicas, st->replica, &first, &count);
    remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
    int n = remat_unit_segments(cfg, u, seg);
    for (int k = 0; k < n; k++) {
      size_t lo = seg[k].at > first ? seg[k].at : first;
      size_t hi = seg[k].at + seg[k].count < first + count ? seg[k].at + seg[k].count
                                                           : first + count;
      if (lo >= hi) continue;
      float *sh = at + (lo - first);
      if (rank >= 0 && remat__tp(cfg) > 1) { /* the rank's elements' places in the whole */
        shard_copy s = {sh, full + whole_start(cfg, seg[k].tensor), to_full};
        remat__tensor_range_runs(cfg, seg[k].tensor, rank,
                                 seg[k].offset - tensor_start(cfg, seg[k].tensor) + (lo - seg[k].at),
                                 hi - lo, copy_run, &s);
        continue;
      }
      float *f = full + seg[k].offset + (lo - seg[k].at);
      if (to_full)
        memcpy(f, sh, (hi - lo) * sizeof(float));
      else
        memcpy(sh, f, (hi - lo) * sizeof(float));
    }
    at += remat_unit_shard(cfg, u, st->replicas);
  }
}

static int zero3(const remat_stage *st) { return st->replicas > 1 && st->zero >= 3; }

void remat__stage_params_to_full(const remat_config *cfg, const remat_stage *st,
                                 const float *flat, float *full) {
  if (zero3(st))
    shard_params_copy(cfg, st, -1, (float *)flat, full, 1);
  else
    stage_params_copy(cfg, st, (float *)flat, full, 1);
}

void remat__stage_params_from_full(const remat_config *cfg, const remat_stage *st,
                                   const float *full, float *flat) {
  if (zero3(st)) {
    /* the padding past a unit's end */
    memset(flat, 0, remat__stage_num_params(cfg, st) * sizeof(float));
    shard_params_copy(cfg, st, -1, flat, (float *)full, 0);
  } else {
    stage_params_copy(cfg, st, flat, (float *)full, 0);
  }
}

void remat__tensor_params_copy(const remat_config *cfg, const remat_stage *st, int64_t rank,
                               float *flat, float *full, int to_full) {
  remat_config whole = *cfg;
  whole.tensor_parallel = whole.sequence_parallel = 0;
  size_t mine[REMAT_P_COUNT], all[REMAT_P_COUNT];
  if (st) remat__stage_param_sizes(cfg, st, mine);
  else remat_param_sizes(cfg, mine);
  remat_param_sizes(&whole, all);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    shard_copy s = {flat, full, to_full};
    if (mine[i])
      remat__tensor_shard_runs(cfg, i, rank, st ? st->first_block : 0,
                               st ? st->num_blocks : cfg->num_layers, copy_run, &s);
    flat += mine[i];
    full += all[i];
  }
}

void remat__model_params_to_full(remat_model *m, float *full) {
  size_t bytes = remat__stage_num_params(&m->cfg, &m->stage) * sizeof(float);
  float *flat = m->be->map(m->params, bytes, REMAT_MAP_READ);
  if (remat__tp(&m->cfg) > 1 && zero3(&m->stage))
    shard_params_copy(&m->cfg, &m->stage, m->tops.rank, flat, full, 1);
  else if (remat__tp(&m->cfg) > 1)
    remat__tensor_params_copy(&m->cfg, &m->stage, m->tops.rank, flat, full, 1);
  else remat__stage_params_to_full(&m->cfg, &m->stage, flat, full);
  m->be->unmap(m->params, flat, bytes, REMAT_MAP_READ);
}

void remat__model_params_from_full(remat_model *m, const float *full) {
  size_t bytes = remat__stage_num_params(&m->cfg, &m->stage) * sizeof(float);
  float *flat = m->be->map(m->params, bytes, REMAT_MAP_WRITE);
  if (remat__tp(&m->cfg) > 1 && zero3(&m->stage)) {
    memset(flat, 0, bytes); /* the padding past a unit's end */
    shard_params_copy(&m->cfg, &m->stage, m->tops.rank, flat, (float *)full, 0);
  } else if (remat__tp(&m->cfg) > 1)
    remat__tensor_params_copy(&m->cfg, &m->stage, m->tops.rank, flat, (float *)full, 0);
  else
    remat__stage_params_from_full(&m->cfg, &m->stage, full, flat);
  m->be->unmap(m->params, flat, bytes, REMAT_MAP_WRITE);
  m->update_clean = 0;
}

/* What the backend's kernels need at the model's shape: the terms its plan
 * was made with (asked again rather than kept: the model's own size is
 * counted in the bytes the plan says are held outside the arena). */
static remat__kernel_ws kernel_ws(const remat_model *m) { return m->ws; }

/* Slot j and its layout: the slots differ where a block recomputes in full
 * in only some of them (remat_stage.full_slots). */
static remat__slot slot_at(remat_model *m, int64_t slot) {
  REMAT_ASSERT(slot >= 0 && slot < m->stage.inflight);
  remat__slot_layout lay = remat__memplan_slot(&m->mp, slot);
  REMAT_ASSERT(!m->placed || m->placed[slot]);
  return (remat__slot){.at = m->placed ? m->placed[slot] : m->arena + lay.offset, .lay = lay};
}

void remat__model_place(remat_model *m, int64_t slot, int64_t record, void *at) {
  REMAT_ASSERT(m->placed && (slot < 0) != (record < 0));
  REMAT_ASSERT(slot < m->stage.inflight && record < m->stage.wdeferred);
  m->placed[slot >= 0 ? slot : m->stage.inflight + record] = at;
}

int32_t *remat__model_slot_inputs(remat_model *m, int64_t slot) {
  remat__slot s = slot_at(m, slot);
  return m->stage.has_embedding ? (int32_t *)(s.at + s.lay.inputs_offset) : NULL;
}
int32_t *remat__model_slot_targets(remat_model *m, int64_t slot) {
  remat__slot s = slot_at(m, slot);
  return m->stage.has_head ? (int32_t *)(s.at + s.lay.targets_offset) : NULL;
}
int32_t *remat_model_inputs(remat_model *m) { return remat__model_slot_inputs(m, 0); }
int32_t *remat_model_targets(remat_model *m) { return remat__model_slot_targets(m, 0); }

/* Input of the stage's block i; i = num_blocks is the head's input. */
static float *resid_at(const remat_model *m, const remat__slot *slot, int64_t i) {
  size_t off = i < m->stage.num_blocks ? slot->lay.block_input_offset[i] : slot->lay.final_offset;
  return (float *)(slot->at + off);
}

float *remat__model_stage_input(remat_model *m, int64_t slot) {
  if (m->stage.has_embedding) return NULL;
  remat__slot s = slot_at(m, slot);
  return resid_at(m, &s, 0);
}

/* Every piece of the arena starts on a REMAT_ALIGN boundary and is planned
 * rounded up to the next one, so the bytes past a piece's last element are
 * never written: the mark is the end of the aligned unit holding the
 * highest byte written, which is the planned end when the top piece is
 * used (without it, a workspace whose last piece is not a whole number of
 * units measured up to 63 bytes short of its plan). */
size_t remat_model_arena_high_water(remat_model *m) {
  size_t hw = remat__align(m->be->high_water(m->arena, m->mp.peak_bytes, m->high_water));
  m->high_water = hw < m->mp.peak_bytes ? hw : m->mp.peak_bytes;
  return m->high_water;
}

/* Elements [first, first + n) of tensor i, held at dst: the family's
 * initialisation (config/family.h), a pure function of the element's
 * index. */
static void init_piece(const remat__backend *be, const remat_config *c, int i, float *dst,
                       size_t first, size_t n, uint64_t seed) {
  float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(c, t);
  switch (t[i].init) {
  case REMAT__INIT_NORMAL:
    be->init_normal(dst, first, n, std, seed, (uint32_t)i);
    break;
  case REMAT__INIT_RESIDUAL:
    be->init_normal(dst, first, n, proj_std, seed, (uint32_t)i);
    break;
  case REMAT__INIT_ONES:
    be->fill(dst, 1.0f, n);
    break;
  default:
    be->clear(dst, n * sizeof(float));
  }
  /* padded vocabulary rows never see a token: keep them zero */
  if (t[i].rows == c->padded_vocab_size && t[i].cols == c->channels &&
      t[i].where != REMAT__IN_BLOCK) {
    size_t lo = (size_t)c->vocab_size * (size_t)c->channels;
    if (lo < first) lo = first;
    if (lo < first + n) be->clear(dst + (lo - first), (first + n - lo) * sizeof(float));
  }
}

/* A tensor rank's shard, run by run (remat__tensor_shard_runs), each
 * drawn at its elements' places in the whole tensor: the group's shards
 * are the whole model's initialisation. */
typedef struct {
  remat_model *m;
  const remat_config *whole;
  int i;
  uint64_t seed;
  float *dst; /* a ZeRO 3 replica's piece (init_range_run) */
} shard_init;

static void init_run(void *ctx, size_t at, size_t whole_at, size_t n) {
  shard_init *s = ctx;
  init_piece(s->m->be, s->whole, s->i, s->m->p[s->i] + at, whole_at, n, s->seed);
}

static void init_range_run(void *ctx, size_t at, size_t whole_at, size_t n) {
  shard_init *s = ctx;
  init_piece(s->m->be, s->whole, s->i, s->dst + at, whole_at, n, s->seed);
}

static void init_shard(remat_model *m, uint64_t seed) {
  remat_config whole = m->cfg;
  whole.tensor_parallel = whole.sequence_parallel = 0;
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    shard_init s = {m, &whole, i, seed, NULL};
    if (m->sz[i])
      remat__tensor_shard_runs(&m->cfg, i, m->tops.rank, m->stage.first_block,
                               m->stage.num_blocks, init_run, &s);
  }
}

void remat_model_init_weights(remat_model *m, uint64_t seed) {
  const remat_config *c = &m->cfg;
  m->update_clean = 0;
  int64_t tp = remat__tp(c);
  REMAT_ASSERT(tp == 1 || m->tops.sum);
  if (!remat__model_buf_sharded(m, REMAT_BUF_PARAMS) && tp > 1) {
    init_shard(m, seed);
    return;
  }
  if (!remat__model_buf_sharded(m, REMAT_BUF_PARAMS)) {
    for (int i = 0; i < REMAT_P_COUNT; i++)
      if (m->sz[i]) init_piece(m->be, c, i, m->p[i], m->tensor_first[i], m->sz[i], seed);
    return;
  }
  /* ZeRO 3: this replica's shards, piece by piece */
  remat_config whole = *c;
  whole.tensor_parallel = whole.sequence_parallel = 0;
  size_t all[REMAT_P_COUNT], start[REMAT_P_COUNT] = {0};
  remat_param_sizes(c, all);
  for (int i = 1; i < REMAT_P_COUNT; i++) start[i] = start[i - 1] + all[i - 1];
  int64_t units[4096 + 3], nu = remat_stage_units(c, &m->stage, units);
  for (int64_t j = 0; j < nu; j++) {
    int64_t u = units[j];
    size_t first, count, run;
    remat_unit_owned(c, u, m->D, m->r, &first, &count);
    remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
    int n = remat_unit_segments(c, u, seg);
    for (int k = 0; k < n; k++) {
      size_t lo = seg[k].at > first ? seg[k].at : first;
      size_t hi = seg[k].at + seg[k].count < first + count ? seg[k].at + seg[k].count
                                                           : first + count;
      if (lo >= hi) continue;
      float *dst = remat__model_unit_at(m, REMAT_BUF_PARAMS, u, lo, &run);
      int t = seg[k].tensor;
      size_t e = seg[k].offset - start[t] + (lo - seg[k].at); /* in the rank's tensor */
      if (tp > 1) { /* a tensor rank's: drawn at the whole tensor's places */
        shard_init s = {m, &whole, t, seed, dst};
        remat__tensor_range_runs(c, t, m->tops.rank, e, hi - lo, init_range_run, &s);
      } else {
        init_piece(m->be, c, t, dst, e, hi - lo, seed);
      }
    }
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

/* Block l's slices of the tensors; Ci: a tensor rank's share of the
 * heads' width (C without tensor parallelism). */
#define SLICE(arr, l, C, per) ((arr) + (size_t)(l) * (size_t)(per) * (size_t)(C))
#define BLOCK_VIEW(T, src, l, C, Ci)                                                        \
  (T) {                                                                                     \
    SLICE(src[REMAT_P_LN1W], l, C, 1), SLICE(src[REMAT_P_LN1B], l, C, 1),                   \
        SLICE(src[REMAT_P_QKVW], l, C, 3 * Ci), SLICE(src[REMAT_P_QKVB], l, Ci, 3),         \
        SLICE(src[REMAT_P_ATTPROJW], l, C, Ci), SLICE(src[REMAT_P_ATTPROJB], l, C, 1),      \
        SLICE(src[REMAT_P_LN2W], l, C, 1), SLICE(src[REMAT_P_LN2B], l, C, 1),               \
        SLICE(src[REMAT_P_FCW], l, C, 4 * Ci), SLICE(src[REMAT_P_FCB], l, Ci, 4),           \
        SLICE(src[REMAT_P_FCPROJW], l, C, 4 * Ci), SLICE(src[REMAT_P_FCPROJB], l, C, 1)     \
  }

/* A tensor rank's share of the heads' width: C / t. */
static int64_t inner(const remat_model *m) { return m->cfg.channels / remat__tp(&m->cfg); }

/* A block's tensors inside its unit vector (remat/memory.h), in order. */
static void unit_block_views(float *base, size_t C, size_t Ci, float *v[12]) {
  const size_t n[12] = {C,  C, 3 * Ci * C, 3 * Ci, Ci * C, C,
                        C,  C, 4 * Ci * C, 4 * Ci, 4 * Ci * C, C};
  for (int k = 0; k < 12; k++) {
    v[k] = base;
    base += n[k];
  }
}
#define UNIT_VIEW(T, v)                                                                     \
  (T) { v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11] }

/* Unit u's parameters from a replica's runtime (ZeRO 3), or NULL: the
 * model's own tensors. */
static const float *unit_params(remat_model *m, int64_t u, int phase) {
  return m->lops.params ? m->lops.params(m->lops.ctx, u, phase) : NULL;
}

/* Block i of the stage: its parameters in the model's tensors, or in a
 * unit vector. */
static block_params block_params_of(remat_model *m, int64_t i, const float *unit) {
  if (!unit) return BLOCK_VIEW(block_params, m->p, i, m->cfg.channels, inner(m));
  float *v[12];
  unit_block_views((float *)unit, (size_t)m->cfg.channels, (size_t)inner(m), v);
  return UNIT_VIEW(block_params, v);
}

/* Between the kernels of a layer: a replica's runtime drives the
 * communication it has in flight. */
static void progress(remat_model *m) {
  if (m->lops.progress) m->lops.progress(m->lops.ctx);
}

/* Where the gradient of a layer (kind; unit u: the head's is L + 2) of this
 * micro-batch goes: NULL for straight into the step's gradients (the step's
 * first micro-batch, or a model that does not accumulate), else the layer's
 * gradient buffer, zeroed: the gradient is computed from zero (see
 * remat_model_forward_backward on why). The buffer is in the workspace at
 * byte offset off, or a replica's runtime hands one out. */
static float *grad_buffer(remat_model *m, int kind, size_t off, int64_t u) {
  size_t bytes = m->mp.grad_bytes[kind];
  REMAT_ASSERT(m->D <= 1 || (m->lops.grads && m->lops.grad_buf));
  if (!bytes || (m->grads_fresh && !m->lops.grads)) return NULL;
  float *g = m->lops.grad_buf ? m->lops.grad_buf(m->lops.ctx, u) : (float *)(m->work + off);
  m->be->clear(g, bytes);
  return g;
}

/* Unit u's gradient of this micro-batch is complete in buf: a replica hands
 * it to its runtime (which reduces it across replicas); a model adds it to
 * the step's gradients, g = g + c. */
static void grad_done(remat_model *m, int64_t u, float *buf) {
  if (!buf) return;
  if (m->lops.grads) {
    m->lops.grads(m->lops.ctx, u, buf);
    return;
  }
  int which = u == m->cfg.num_layers + 2 ? REMAT_BUF_TIED_GRAD : REMAT_BUF_GRADS;
  size_t n = remat_unit_floats(&m->cfg, u), run;
  for (size_t i = 0; i < n; i += run) {
    float *g = remat__model_unit_at(m, which, u, i, &run);
    m->be->add(g, buf + i, run, 1, 0);
  }
}

/* Block i of the stage (global block first_block + i) in a slot: its
 * internals live in the slot when kept, in the scratch when recomputed; a
 * middle block's stored ones in the slot, its cheap ones in the scratch
 * (by its policy in that slot). */
static remat__block_acts block_acts(remat_model *m, const remat__slot *slot, int64_t i) {
  remat__block_acts a;
  int64_t B = m->B, T = m->T, C = m->cfg.channels;
  size_t off = slot->lay.block_internal_offset[i];
  remat__kernel_ws ws = kernel_ws(m);
  char *scratch = m->work + m->mp.mm.block_dgrad_bytes;
  if (slot->lay.policy[i] == REMAT_MIDDLE) {
    remat__block_stored_view(&a, slot->at + off, B, T, C, &ws);
    remat__block_cheap_view(&a, scratch, B, T, C, &ws);
  } else {
    remat__block_acts_view(&a, off != REMAT_NO_OFFSET ? slot->at + off : scratch, B, T, C, &ws);
  }
  return a;
}

static remat__dropout drop_at(const remat_hparams *hp, int64_t step, uint32_t micro, int64_t l,
                              uint32_t site) {
  return (remat__dropout){.p = hp ? hp->dropout : 0.0f, .seed = hp ? hp->seed : 0,
                          .step = (uint32_t)step, .micro = micro, .layer = (uint32_t)l,
                          .site = site};
}

/* The attention's dropout on a tensor rank: its heads' share of the whole
 * model's mask. */
static remat__dropout att_drop(const remat_model *m, const remat_hparams *hp, uint32_t micro,
                               int64_t l) {
  remat__dropout d = drop_at(hp, m->step, micro, l, REMAT_DROP_ATTN);
  if (m->tops.sum) {
    d.heads = (uint32_t)m->cfg.num_heads;
    d.head0 = (uint32_t)(m->tops.rank * (m->cfg.num_heads / remat__tp(&m->cfg)));
  }
  return d;
}

/* ------------------------------------------------------------ bf16 */

/* Block i's bf16 matrices in REMAT_BUF_PARAMS_BF16: qkvw (3Ci,C), attprojw
 * (C,Ci), fcw (4Ci,C), fcprojw (C,4Ci) (Ci = C / t: a tensor rank's
 * shards); the head's matrix (Vp / t,C) after the stage's blocks. */
typedef struct {
  const uint16_t *qkvw, *projw, *fcw, *fcprojw;
} block_wbf;

/* ZeRO 3 in bf16: the unit in use is gathered in fp32, and rounded here into
 * the bf16 buffer (REMAT_BUF_PARAMS_BF16) just before its products run. */
static int gathered_bf16(const remat_model *m) { return m->D > 1 && m->zero == 3; }

static int64_t inner(const remat_model *m);

/* A block's bf16 copies: a tensor rank's shards (C x Ci each, Ci = C / t). */
static block_wbf block_wbf_of(const remat_model *m, int64_t i, const block_params *w) {
  size_t C = (size_t)m->cfg.channels, CC = C * (size_t)inner(m);
  if (gathered_bf16(m)) {
    uint16_t *h = m->wbf;
    m->be->to_bf16(h, w->qkvw, 3 * CC);
    m->be->to_bf16(h + 3 * CC, w->projw, CC);
    m->be->to_bf16(h + 4 * CC, w->fcw, 4 * CC);
    m->be->to_bf16(h + 8 * CC, w->fcprojw, 4 * CC);
    return (block_wbf){h, h + 3 * CC, h + 4 * CC, h + 8 * CC};
  }
  const uint16_t *h = (const uint16_t *)((const char *)m->wbf + (size_t)i * m->mp.mm.block_bf16_bytes);
  return (block_wbf){h, h + 3 * CC, h + 4 * CC, h + 8 * CC};
}

/* The head's matrix's floats: a tensor rank's rows of the vocabulary. */
static size_t head_floats(const remat_model *m) {
  return (size_t)(m->cfg.padded_vocab_size / remat__tp(&m->cfg)) * (size_t)m->cfg.channels;
}

static uint16_t *head_wbf(const remat_model *m, const float *wte) {
  if (gathered_bf16(m)) {
    m->be->to_bf16(m->wbf, wte, head_floats(m));
    return m->wbf;
  }
  return (uint16_t *)((char *)m->wbf + (size_t)m->stage.num_blocks * m->mp.mm.block_bf16_bytes);
}

/* A Llama block's bf16 matrices at their tensors' places in w (the
 * family's order, block i's tensors; the others NULL): the block's copies
 * in REMAT_BUF_PARAMS_BF16, the matrices one after another in that order
 * (remat__bf16_copy_bytes, update_fused), or under ZeRO 3 the buffer the
 * unit in use is rounded into; rounded from w first with round or under
 * ZeRO 3. */
static void llama_wbf(const remat_model *m, int64_t i, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                      bool round, const uint16_t *h[REMAT__LLAMA_BLOCK_TENSORS]) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(&m->cfg, t);
  bool gathered = gathered_bf16(m);
  uint16_t *at = gathered ? m->wbf
                          : (uint16_t *)((char *)m->wbf + (size_t)i * m->mp.mm.block_bf16_bytes);
  int j = 0;
  for (int k = 0; k < REMAT_P_COUNT; k++) {
    if (t[k].where != REMAT__IN_BLOCK) continue;
    h[j] = NULL;
    if (t[k].matrix) {
      size_t n = (size_t)t[k].rows * (size_t)t[k].cols;
      if (round || gathered) m->be->to_bf16(at, w[j], n);
      h[j] = at;
      at += n;
    }
    j++;
  }
  REMAT_ASSERT(j == REMAT__LLAMA_BLOCK_TENSORS);
}

/* The bf16 copies from the fp32 master weights, once after each update or
 * load, before the next forward. */
static void bf16_refresh(remat_model *m) {
  if (!m->wbf || gathered_bf16(m)) return;
  int64_t C = m->cfg.channels;
  if (!m->bf16_stale && m->tied_bf16_stale) /* a borrowed matrix's, alone */
    m->be->to_bf16(head_wbf(m, NULL), m->p[REMAT_P_WTE], head_floats(m));
  m->tied_bf16_stale = 0;
  if (!m->bf16_stale) return;
  size_t CC = (size_t)C * (size_t)inner(m);
  for (int64_t i = 0; m->cfg.family == REMAT_FAMILY_LLAMA && i < m->stage.num_blocks; i++) {
    float *w[REMAT__LLAMA_BLOCK_TENSORS];
    const uint16_t *h[REMAT__LLAMA_BLOCK_TENSORS];
    remat__llama_block_views(m, i, NULL, m->p, w);
    llama_wbf(m, i, w, true, h);
  }
  for (int64_t i = 0; m->cfg.family != REMAT_FAMILY_LLAMA && i < m->stage.num_blocks; i++) {
    block_params w = BLOCK_VIEW(block_params, m->p, i, C, inner(m));
    block_wbf h = block_wbf_of(m, i, &w);
    m->be->to_bf16((uint16_t *)h.qkvw, w.qkvw, 3 * CC);
    m->be->to_bf16((uint16_t *)h.projw, w.projw, CC);
    m->be->to_bf16((uint16_t *)h.fcw, w.fcw, 4 * CC);
    m->be->to_bf16((uint16_t *)h.fcprojw, w.fcprojw, 4 * CC);
  }
  if (m->stage.has_head) /* the tied matrix, or a Llama's own */
    m->be->to_bf16(head_wbf(m, NULL), m->p[remat__head_tensor(&m->cfg)], head_floats(m));
  m->bf16_stale = 0;
}

/* block_forward in bf16: the products through the model's primitives, the
 * attention on its operands widened to fp32 in the workspace. On a tensor
 * rank the products and the attention are its shard's (Ci of the C
 * channels, its heads), and a row-parallel product's parts are summed over
 * the group (remat__product_residual_bf16); under sequence parallelism the
 * norms, dropout and residual run on the rank's rows, the norms' outputs
 * gathered whole (in bf16) for the products. */
static void block_forward_bf16(remat_model *m, int64_t i, const block_params *wp, const float *x,
                               remat__block_acts *a, float *out, const remat__dropout drop[3]) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, N = B * T, Ci = inner(m),
          NHi = m->cfg.num_heads / remat__tp(&m->cfg), R = remat__seq_rows(m);
  size_t BTCi = (size_t)N * (size_t)Ci;
  const block_params w = *wp;
  const block_wbf h = block_wbf_of(m, i, wp);
  const remat__backend *be = m->be;
  remat__block_dgrads d;
  remat__block_dgrads_view(&d, m->work, B, T, C, &m->ws);
  be->layernorm_forward_bf16(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, R, C);
  const uint16_t *ln1 = remat__seq_whole_act(m, d.gathered, a->ln1, C);
  be->bf16_matmul_forward(m->products, a->qkv, ln1, h.qkvw, w.qkvb, N, C, 3 * Ci, true,
                          d.scratch);
  if (m->ws.attention_work && be->attention_forward_bf16) { /* the products' scratchpad */
    be->attention_forward_bf16(d.atty_f, a->att_lse, a->qkv, B, T, Ci, NHi,
                               &drop[REMAT_DROP_ATTN], d.scratch, m->ws.attention_work);
  } else {
    be->from_bf16(d.qkv_f, a->qkv, 3 * BTCi);
    be->attention_forward(d.atty_f, a->att_lse, d.qkv_f, B, T, Ci, NHi, &drop[REMAT_DROP_ATTN]);
  }
  be->to_bf16(a->atty, d.atty_f, BTCi);
  remat__product_residual_bf16(m, a->res2, a->atty, h.projw, w.projb, x, &drop[REMAT_DROP_RESID1],
                               N, Ci, C, d.dln, d.dslice, d.scratch);
  be->layernorm_forward_bf16(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, R, C);
  const uint16_t *ln2 = remat__seq_whole_act(m, d.gathered, a->ln2, C);
  be->bf16_matmul_forward(m->products, a->fch, ln2, h.fcw, w.fcb, N, C, 4 * Ci, true, d.scratch);
  be->gelu_forward_bf16(a->fch_gelu, a->fch, 4 * BTCi);
  if (!out) return;
  remat__product_residual_bf16(m, out, a->fch_gelu, h.fcprojw, w.fcprojb, a->res2,
                               &drop[REMAT_DROP_RESID2], N, 4 * Ci, C, d.dln, d.dslice, d.scratch);
}

/* block_backward in bf16: each product's dout rounded to bf16 (dout_h, or
 * the W record's), its dinp in fp32; the attention backward on widened
 * operands. On a tensor rank a branch's gradient is gathered whole under
 * sequence parallelism, and a column-parallel product's input gradient is
 * the rank's part, summed over the group (or its rows reduce-scattered)
 * before the layernorm's backward reads it, as block_backward's. part, wr:
 * as block_backward. */
static void block_backward_bf16(remat_model *m, int64_t i, const block_params *wp,
                                const block_grads *gp, const float *x,
                                const remat__block_acts *a, const remat__dropout drop[3],
                                int part, const remat__block_wrec *wr) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, N = B * T, Ci = inner(m),
          NHi = m->cfg.num_heads / remat__tp(&m->cfg), R = remat__seq_rows(m);
  size_t BTC = (size_t)N * (size_t)C, BTCi = (size_t)N * (size_t)Ci;
  const block_params w = *wp;
  const block_grads g = *gp;
  const block_wbf h = block_wbf_of(m, i, wp);
  const remat__backend *be = m->be;
  remat__block_dgrads dg, *d = &dg;
  remat__block_dgrads_view(d, m->work, B, T, C, &m->ws);
  const int in = part & 1, wt = part & 2, seq = remat__seq_parallel(m); /* PART_* */
  float *dresid = in ? m->dresid : NULL;
  uint16_t *h_fcproj = wr ? wr->dfcproj : d->dout_h, *h_fc = wr ? wr->dfc : d->dout_h;
  uint16_t *h_proj = wr ? wr->dproj : d->dout_h, *h_qkv = wr ? wr->dqkv : d->dout_h;
  /* the norms' input gradients whole (a rank's part), and the rows their
   * backwards read (block_backward's) */
  float *dln2 = wr && !seq ? wr->dln2 : d->dln, *dln1 = wr && !seq ? wr->dln1 : d->dln;
  float *rows2 = !in || (wr && seq) ? wr->dln2 : seq ? d->dslice : dln2;
  float *rows1 = !in || (wr && seq) ? wr->dln1 : seq ? d->dslice : dln1;

  if (in)
    be->to_bf16(h_fcproj, remat__branch_whole(m, NULL, d->dbranch, d->gathered, &drop[2]), BTC);
  be->bf16_matmul_backward(m->products, in ? d->d4 : NULL, wt ? g.fcprojw : NULL,
                           wt ? g.fcprojb : NULL, h_fcproj, a->fch_gelu, h.fcprojw, N, 4 * Ci, C,
                           false, d->scratch);
  if (in) be->gelu_backward_bf16(h_fc, a->fch, d->d4, 4 * BTCi);
  /* fc's input whole for its weight's gradient (a W record's is) */
  const uint16_t *ln2 = wt && !wr ? remat__seq_whole_act(m, d->gathered, a->ln2, C) : a->ln2;
  be->bf16_matmul_backward(m->products, in ? dln2 : NULL, wt ? g.fcw : NULL, wt ? g.fcb : NULL,
                           h_fc, ln2, h.fcw, N, C, 4 * Ci, false, d->scratch);
  if (in) remat__input_grad_sum(m, dln2, rows2, d->d4); /* d4 is free */
  be->layernorm_backward(dresid, wt ? g.ln2w : NULL, wt ? g.ln2b : NULL, rows2, a->res2, w.ln2w,
                         a->ln2_mean, a->ln2_rstd, R, C);
  if (in)
    be->to_bf16(h_proj, remat__branch_whole(m, NULL, d->dbranch, d->gathered, &drop[1]), BTC);
  be->bf16_matmul_backward(m->products, in ? d->datty : NULL, wt ? g.projw : NULL,
                           wt ? g.projb : NULL, h_proj, a->atty, h.projw, N, Ci, C, false,
                           d->scratch);
  if (in && m->ws.attention_work && be->attention_backward_bf16) {
    be->attention_backward_bf16(d->dqkv, d->att_delta, d->datty, a->qkv, a->atty, a->att_lse, B,
                                T, Ci, NHi, &drop[0], d->scratch, m->ws.attention_work);
    be->to_bf16(h_qkv, d->dqkv, 3 * BTCi);
  } else if (in) {
    be->from_bf16(d->qkv_f, a->qkv, 3 * BTCi);
    be->from_bf16(d->atty_f, a->atty, BTCi);
    be->attention_backward(d->dqkv, d->att_delta, d->datty, d->qkv_f, d->atty_f, a->att_lse, B,
                           T, Ci, NHi, &drop[0]);
    be->to_bf16(h_qkv, d->dqkv, 3 * BTCi);
  }
  const uint16_t *ln1 = wt && !wr ? remat__seq_whole_act(m, d->gathered, a->ln1, C) : a->ln1;
  be->bf16_matmul_backward(m->products, in ? dln1 : NULL, wt ? g.qkvw : NULL, wt ? g.qkvb : NULL,
                           h_qkv, ln1, h.qkvw, N, C, 3 * Ci, false, d->scratch);
  if (in) remat__input_grad_sum(m, dln1, rows1, d->d4);
  be->layernorm_backward(dresid, wt ? g.ln1w : NULL, wt ? g.ln1b : NULL, rows1, x, w.ln1w,
                         a->ln1_mean, a->ln1_rstd, R, C);
}

/* The transient workspace's gradient views, which a tensor rank's
 * forward also borrows (nothing else is in them then). */
static remat__block_dgrads dgrads_of(remat_model *m) {
  remat__block_dgrads d;
  remat__kernel_ws ws = kernel_ws(m);
  remat__block_dgrads_view(&d, m->work, m->B, m->T, m->cfg.channels, &ws);
  return d;
}

/* One block (index i within the stage) forward from x (B,T,C) into a's internals and out (B,T,C). With
 * out == NULL it stops after the GELU: that is all a recompute needs, since
 * the block's output is already stored as the next block's input. */
static void block_forward(remat_model *m, int64_t i, const block_params *wp, const float *x,
                          remat__block_acts *a, float *out, const remat_hparams *hp,
                          uint32_t micro) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
  int64_t l = m->stage.first_block + i; /* the dropout streams are keyed by the global index */
  const block_params w = *wp;
  remat__dropout d_att = att_drop(m, hp, micro, l);
  remat__dropout d_r1 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID1);
  remat__dropout d_r2 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID2);
  /* the residual stream's: a rank's rows under sequence parallelism */
  d_r1.first = d_r2.first = (uint64_t)remat__seq_first(m) * (uint64_t)C;
  if (m->cfg.precision == REMAT_PRECISION_BF16) {
    block_forward_bf16(m, i, wp, x, a, out, (remat__dropout[3]){d_att, d_r1, d_r2});
    return;
  }

  /* a tensor rank's heads and MLP share: Ci of the C channels; its rows
   * of the residual stream (R: all N without sequence parallelism), whose
   * norms' outputs the products read gathered */
  int64_t Ci = inner(m), NHi = NH / remat__tp(&m->cfg), R = remat__seq_rows(m);
  remat__block_dgrads dg = dgrads_of(m); /* free in a forward: the sums' scratch */
  m->be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, R, C);
  const float *ln1 = remat__seq_whole(m, dg.gathered, a->ln1, C);
  m->be->matmul_forward(a->qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * Ci);
  progress(m);
  m->be->attention_forward(a->atty, a->att_lse, a->qkv, B, T, Ci, NHi, &d_att);
  progress(m);
  remat__product_residual(m, a->res2, a->atty, w.projw, w.projb, x, &d_r1, N, Ci, C, dg.dln,
                          dg.dslice);
  progress(m);
  m->be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, R, C);
  const float *ln2 = remat__seq_whole(m, dg.gathered, a->ln2, C);
  m->be->matmul_forward_gelu(a->fch, a->fch_gelu, ln2, w.fcw, w.fcb, N, C, 4 * Ci);
  progress(m);
  if (!out) return;
  remat__product_residual(m, out, a->fch_gelu, w.fcprojw, w.fcprojb, a->res2, &d_r2, N, 4 * Ci,
                          C, dg.dln, dg.dslice);
  progress(m);
}

/* A middle block's cheap internals, rebuilt from its stored ones just
 * before its backward: the kernels and inputs of block_forward, so the same
 * bits (the layernorms write their statistics again, with the values the
 * slot holds). */
static void block_recompute_cheap(remat_model *m, const block_params *wp, const float *x,
                                  remat__block_acts *a) {
  int64_t N = m->B * m->T, C = m->cfg.channels;
  int64_t R = remat__seq_rows(m); /* a rank's rows of the residual stream */
  const block_params w = *wp;
  if (m->cfg.precision == REMAT_PRECISION_BF16) {
    m->be->layernorm_forward_bf16(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, R, C);
    m->be->layernorm_forward_bf16(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, R,
                                  C);
    m->be->gelu_forward_bf16(a->fch_gelu, a->fch, 4 * (size_t)N * (size_t)inner(m));
    return;
  }
  m->be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, R, C);
  m->be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, R, C);
  m->be->gelu_forward(a->fch_gelu, a->fch, 4 * (size_t)N * (size_t)inner(m));
}

/* A block's backward runs whole, or as B then W (model.h's REMAT__PART_*,
 * which both families' blocks take). */
enum { PART_INPUT = REMAT__PART_INPUT, PART_WEIGHT = REMAT__PART_WEIGHT,
       PART_ALL = REMAT__PART_ALL };

/* On entry m->dresid holds dL/d(block output); on exit (with PART_INPUT)
 * dL/d(block input). With PART_WEIGHT the parameter gradients accumulate
 * into g. wr: the block's W record when the parts run apart, else NULL. */
static void block_backward(remat_model *m, int64_t i, const block_params *wp,
                           const block_grads *gp, const float *x, const remat__block_acts *a,
                           const remat_hparams *hp, uint32_t micro, int part,
                           const remat__block_wrec *wr) {
  int64_t B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
  int64_t l = m->stage.first_block + i, Ci = inner(m), NHi = NH / remat__tp(&m->cfg);
  const block_params w = *wp;
  const block_grads g = *gp;
  remat__block_dgrads dgrads, *d = &dgrads;
  remat__kernel_ws ws = kernel_ws(m);
  remat__block_dgrads_view(d, m->work, B, T, C, &ws);
  remat__dropout d_att = att_drop(m, hp, micro, l);
  remat__dropout d_r1 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID1);
  remat__dropout d_r2 = drop_at(hp, m->step, micro, l, REMAT_DROP_RESID2);
  /* the residual stream's: a rank's rows under sequence parallelism */
  d_r1.first = d_r2.first = (uint64_t)remat__seq_first(m) * (uint64_t)C;
  REMAT_ASSERT(part == PART_ALL || wr);
  if (m->cfg.precision == REMAT_PRECISION_BF16) {
    block_backward_bf16(m, i, wp, gp, x, a, (remat__dropout[3]){d_att, d_r1, d_r2}, part, wr);
    return;
  }
  const int in = part & PART_INPUT, wt = part & PART_WEIGHT, seq = remat__seq_parallel(m);
  int64_t R = remat__seq_rows(m); /* a rank's rows of the residual stream */
  float *dresid = in ? m->dresid : NULL;
  float *d4 = wr ? wr->dfc : d->d4, *dqkv = wr ? wr->dqkv : d->dqkv;
  /* a column-parallel product's input gradient: the rank's part whole,
   * then the rows of its sum the norm's backward reads (under sequence
   * parallelism reduce-scattered into the record's or dslice) */
  float *dln2 = wr && !seq ? wr->dln2 : d->dln, *dln1 = wr && !seq ? wr->dln1 : d->dln;
  float *rows2 = !in || (wr && seq) ? wr->dln2 : seq ? d->dslice : dln2;
  float *rows1 = !in || (wr && seq) ? wr->dln1 : seq ? d->dslice : dln1;

  /* MLP branch: out = res2 + dropout(fcproj(gelu(fc(ln2(res2))))). Without
   * dropout the branch's gradient is dresid itself, read before the
   * layernorm backward adds to dresid. */
  const float *dbranch = wr ? wr->dfcproj : NULL;
  if (in)
    dbranch = remat__branch_whole(m, wr ? wr->dfcproj : NULL, d->dbranch, d->gathered, &d_r2);
  if (in)
    m->be->matmul_backward_gelu(d4, wt ? g.fcprojw : NULL, wt ? g.fcprojb : NULL, dbranch,
                                a->fch_gelu, w.fcprojw, a->fch, N, 4 * Ci, C);
  else
    m->be->matmul_backward(NULL, g.fcprojw, g.fcprojb, dbranch, a->fch_gelu, w.fcprojw, N,
                           4 * Ci, C);
  progress(m);
  /* fc's input whole for its weight's gradient (a W record's is) */
  const float *ln2 = wt && !wr ? remat__seq_whole(m, d->gathered, a->ln2, C) : a->ln2;
  m->be->matmul_backward(in ? dln2 : NULL, wt ? g.fcw : NULL, wt ? g.fcb : NULL, d4, ln2, w.fcw,
                         N, C, 4 * Ci);
  if (in) remat__input_grad_sum(m, dln2, rows2, d->d4); /* a tensor rank's part; d4 is free */
  progress(m);
  m->be->layernorm_backward(dresid, wt ? g.ln2w : NULL, wt ? g.ln2b : NULL, rows2, a->res2,
                            w.ln2w, a->ln2_mean, a->ln2_rstd, R, C);
  /* attention branch: res2 = x + dropout(proj(attn(qkv(ln1(x))))) */
  dbranch = wr ? wr->dproj : NULL;
  if (in)
    dbranch = remat__branch_whole(m, wr ? wr->dproj : NULL, d->dbranch, d->gathered, &d_r1);
  m->be->matmul_backward(in ? d->datty : NULL, wt ? g.projw : NULL, wt ? g.projb : NULL,
                         dbranch, a->atty, w.projw, N, Ci, C);
  progress(m);
  if (in)
    m->be->attention_backward(dqkv, d->att_delta, d->datty, a->qkv, a->atty, a->att_lse, B, T,
                              Ci, NHi, &d_att);
  progress(m);
  const float *ln1 = wt && !wr ? remat__seq_whole(m, d->gathered, a->ln1, C) : a->ln1;
  m->be->matmul_backward(in ? dln1 : NULL, wt ? g.qkvw : NULL, wt ? g.qkvb : NULL, dqkv, ln1,
                         w.qkvw, N, C, 3 * Ci);
  if (in) remat__input_grad_sum(m, dln1, rows1, d->d4);
  progress(m);
  m->be->layernorm_backward(dresid, wt ? g.ln1w : NULL, wt ? g.ln1b : NULL, rows1, x, w.ln1w,
                            a->ln1_mean, a->ln1_rstd, R, C);
}

/* The head's parameters: the tied matrix (from the embedding's unit) and
 * the final layernorm. */
typedef struct {
  const float *wte, *lnfw, *lnfb;
} head_params;

static head_params head_params_of(remat_model *m) {
  int64_t L = m->cfg.num_layers, C = m->cfg.channels;
  int llama = m->cfg.family == REMAT_FAMILY_LLAMA;
  if (!remat__tied(&m->cfg)) { /* the head's own matrix, in its unit after the norm */
    const float *h = unit_params(m, L + 1, 1);
    return (head_params){.wte = h ? h + C : m->p[REMAT_LP_CLS],
                         .lnfw = h ? h : m->p[REMAT_LP_NORM], .lnfb = NULL};
  }
  /* the tied matrix: the embedding's unit, or a lone head's copy */
  const float *e = unit_params(m, m->stage.has_embedding ? 0 : L + 2, 1);
  const float *h = unit_params(m, L + 1, 1);
  return (head_params){.wte = e ? e : m->p[0],
                       .lnfw = h ? h : m->p[llama ? REMAT_LP_NORM : REMAT_P_LNFW],
                       .lnfb = llama ? NULL : h ? h + C : m->p[REMAT_P_LNFB]};
}

/* The head's norm of the micro-batch in `slot` into h (layernorm, or a
 * Llama's RMSNorm, whose region has no means). */
static void head_norm(remat_model *m, const head_params *w, const remat__slot *slot,
                      remat__head_acts *h) {
  const remat_config *c = &m->cfg;
  int64_t C = c->channels, R = remat__seq_rows(m); /* a rank's rows of the stream */
  remat__kernel_ws ws = kernel_ws(m);
  remat__head_acts_view(h, m->work, m->B, m->T, C, &ws);
  const float *x = resid_at(m, slot, m->stage.num_blocks);
  int bf16 = c->precision == REMAT_PRECISION_BF16;
  if (c->family == REMAT_FAMILY_LLAMA) {
    remat__llama_head lh;
    remat__llama_head_view(&lh, m->work, c, m->B, m->T, &ws);
    *h = (remat__head_acts){.lnf = lh.xnf, .lnf_rstd = lh.rstd, .losses = lh.losses,
                            .dlnf = lh.dxnf, .scratch = lh.scratch};
  }
  /* under sequence parallelism the rank's rows at their place, gathered */
  size_t at = (size_t)remat__seq_first(m) * (size_t)C;
  float *out = (float *)h->lnf + at;
  uint16_t *out_h = (uint16_t *)h->lnf + at;
  float eps = (float)c->norm_eps;
  if (c->family == REMAT_FAMILY_LLAMA && bf16)
    m->be->rmsnorm_forward_bf16(out_h, h->lnf_rstd, x, w->lnfw, R, C, eps);
  else if (c->family == REMAT_FAMILY_LLAMA)
    m->be->rmsnorm_forward(out, h->lnf_rstd, x, w->lnfw, R, C, eps);
  else if (bf16)
    m->be->layernorm_forward_bf16(out_h, h->lnf_mean, h->lnf_rstd, x, w->lnfw, w->lnfb, R, C);
  else
    m->be->layernorm_forward(out, h->lnf_mean, h->lnf_rstd, x, w->lnfw, w->lnfb, R, C);
  if (remat__seq_parallel(m)) remat__seq_gather_act(m, h->lnf, bf16 ? (void *)out_h : out, C);
}

/* Tokens per chunk of the head's logits: cfg.head_chunk, or all of them. */
static int64_t head_rows(const remat_model *m) {
  int64_t N = m->B * m->T, k = m->cfg.head_chunk;
  return k > 0 && k < N ? k : N;
}

/* A tensor rank's loss over its columns of the vocabulary (Megatron-LM's
 * vocabulary-parallel cross-entropy, kernels.h's vocab_*): each row's
 * largest logit over the group, then its sum of exponentials and target
 * logit over the group. They live in the chunk's rows of the norm's
 * gradient, free until the product's backward fills them. */
static double vocab_loss(remat_model *m, const remat__head_acts *h, void *logits, float *losses,
                         const int32_t *targets, int64_t r, int64_t n, bool backward,
                         float dloss) {
  const remat_config *c = &m->cfg;
  int64_t Vl = c->padded_vocab_size / remat__tp(c), first = m->tops.rank * Vl;
  int64_t V = c->vocab_size - first; /* the rank's columns that are tokens */
  V = V < 0 ? 0 : V < Vl ? V : Vl;
  float *mx = h->dlnf + (size_t)r * (size_t)c->channels;
  double *stats = (double *)(mx + (n + 1) / 2 * 2), *scratch = stats + 2 * n;
  if (c->precision == REMAT_PRECISION_BF16) { /* the exponentials recomputed, not stored */
    m->be->vocab_max_bf16(mx, logits, n, V, Vl);
    m->tops.max(m->tops.ctx, mx, (size_t)n);
    m->be->vocab_exp_bf16(logits, stats, mx, targets, first, n, V, Vl);
    m->tops.sum_f64(m->tops.ctx, stats, 2 * (size_t)n, scratch);
    return m->be->vocab_finish_bf16(logits, losses, stats, mx, targets, dloss, first, n, V, Vl,
                                    backward);
  }
  m->be->vocab_max(mx, logits, n, V, Vl);
  m->tops.max(m->tops.ctx, mx, (size_t)n);
  m->be->vocab_exp(logits, stats, mx, targets, first, n, V, Vl);
  m->tops.sum_f64(m->tops.ctx, stats, 2 * (size_t)n, scratch);
  return m->be->vocab_finish(logits, losses, stats, targets, dloss, first, n, V, Vl, backward);
}

/* The logits of the n tokens from r (rows r.. of h's norm output) and
 * their loss, the same for every family; returns the rows' summed loss.
 * With backward, the logits are left holding the loss's gradient, dloss
 * per token (the cross-entropy's backward, in its pass). The logits' buffer
 * holds one chunk (head_rows): it follows the head's region. */
static double head_logits(remat_model *m, const head_params *w, const remat__head_acts *h,
                          const int32_t *targets, int64_t r, int64_t n, bool backward,
                          float dloss) {
  const remat_config *c = &m->cfg;
  int64_t C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
  float *losses = h->losses + r;
  targets += r;
  if (c->precision == REMAT_PRECISION_BF16) {
    uint16_t *lg = (uint16_t *)(m->work + m->mp.mm.head_bytes);
    const uint16_t *x = (const uint16_t *)h->lnf + (size_t)r * (size_t)C;
    m->be->bf16_matmul_forward(m->products, lg, x, head_wbf(m, w->wte), NULL, n, C,
                               Vp / remat__tp(c), true, h->scratch);
    progress(m);
    if (m->tops.sum) return vocab_loss(m, h, lg, losses, targets, r, n, backward, dloss);
    if (backward)
      return m->be->crossentropy_forward_backward_bf16(lg, losses, targets, dloss, n, V, Vp);
    return m->be->crossentropy_forward_bf16(lg, losses, targets, n, V, Vp);
  }
  float *logits = (float *)(m->work + m->mp.mm.head_bytes);
  const float *x = (const float *)h->lnf + (size_t)r * (size_t)C;
  m->be->matmul_forward(logits, x, w->wte, NULL, n, C, Vp / remat__tp(c));
  progress(m);
  if (m->tops.sum) return vocab_loss(m, h, logits, losses, targets, r, n, backward, dloss);
  if (backward)
    return m->be->crossentropy_forward_backward(logits, losses, targets, dloss, n, V, Vp);
  return m->be->crossentropy_forward(logits, losses, targets, n, V, Vp);
}

/* The micro-batch's summed loss after the chunks of head_logits: with one
 * chunk, its own sum; with several, the per-token losses summed in token
 * order, as the cross-entropy sums them, so chunks do not move the bits. */
static double head_loss(remat_model *m, const remat__head_acts *h, double one) {
  int64_t N = m->B * m->T;
  if (head_rows(m) == N) return one;
  size_t bytes = (size_t)N * sizeof(float);
  const float *l = m->be->map(h->losses, bytes, REMAT_MAP_READ);
  double total = 0.0;
  for (int64_t i = 0; i < N; i++) total += l[i];
  m->be->unmap(h->losses, (void *)l, bytes, REMAT_MAP_READ);
  return total;
}

/* The head's forward alone (an evaluation's loss): its norm, then the
 * logits and loss chunk by chunk. Returns the summed loss. */
static double head_forward(remat_model *m, const head_params *w, const remat__slot *slot,
                           remat__head_acts *h) {
  int64_t N = m->B * m->T, k = head_rows(m);
  const int32_t *targets = (const int32_t *)(slot->at + slot->lay.targets_offset);
  head_norm(m, w, slot, h);
  double one = 0.0;
  for (int64_t r = 0; r < N; r += k)
    one = head_logits(m, w, h, targets, r, k < N - r ? k : N - r, false, 0.0f);
  return head_loss(m, h, one);
}

/* A Llama block's three dropout sites, keyed as GPT-2's. */
static void llama_drops(const remat_model *m, int64_t i, const remat_hparams *hp, uint32_t micro,
                        remat__dropout d[3]) {
  int64_t l = m->stage.first_block + i;
  for (uint32_t s = 0; s < 3; s++) d[s] = drop_at(hp, m->step, micro, l, s);
  d[REMAT_DROP_ATTN] = att_drop(m, hp, micro, l);
  /* the residual stream's: a rank's rows under sequence parallelism */
  d[REMAT_DROP_RESID1].first = d[REMAT_DROP_RESID2].first =
      (uint64_t)remat__seq_first(m) * (uint64_t)m->cfg.channels;
}

/* Block i of a Llama forward (model/llama_block.c), out NULL for a recompute. */
static void llama_forward(remat_model *m, const remat__slot *slot, int64_t i, float *out,
                          const remat_hparams *hp, uint32_t micro) {
  float *w[REMAT__LLAMA_BLOCK_TENSORS];
  remat__dropout d[3];
  remat__llama_block_views(m, i, unit_params(m, 1 + m->stage.first_block + i, 0), m->p, w);
  llama_drops(m, i, hp, micro, d);
  remat__llama_acts a = remat__llama_acts_at(m, slot, i);
  const uint16_t *h[REMAT__LLAMA_BLOCK_TENSORS];
  if (m->wbf) llama_wbf(m, i, w, false, h);
  remat__llama_block_forward(m, w, m->wbf ? h : NULL, resid_at(m, slot, i), &a, out, d);
}

/* A tensor rank's embedding work (the memory model's y of the embedding):
 * after its gradient buffer, when that lies in the workspace, so that the
 * forward reaches the planned top of the two together. */
static char *embedding_work(remat_model *m) {
  return m->work + (m->lops.grad_buf ? 0 : m->mp.grad_bytes[REMAT_LAYER_EMBEDDING]);
}

void remat__model_stage_forward(remat_model *m, int64_t slot_index, uint32_t micro,
                                const remat_hparams *hp) {
  remat__slot sl = slot_at(m, slot_index), *slot = &sl;
  int64_t nb = m->stage.num_blocks, C = m->cfg.channels;
  bf16_refresh(m);
  double t = remat__now();
  if (m->stage.has_embedding) {
    float *out = nb || m->stage.has_head ? resid_at(m, slot, 0) : m->send;
    const float *e = unit_params(m, 0, 0);
    int pos = m->cfg.family != REMAT_FAMILY_LLAMA; /* learned positions */
    int64_t Vl = m->cfg.padded_vocab_size / remat__tp(&m->cfg);
    const int32_t *ids = (const int32_t *)(slot->at + slot->lay.inputs_offset);
    const float *wte = e ? e : m->p[0];
    const float *wpe = !pos ? NULL : e ? e + (size_t)Vl * (size_t)C : m->p[REMAT_P_WPE];
    if (m->tops.sum) { /* a tensor rank's rows of the vocabulary; rank 0 adds the positions */
      /* its work: the sum's scratch, or under sequence parallelism the
       * whole part, then a rank's rows of the sum (out is those rows) */
      size_t BTC = (size_t)(m->B * m->T) * (size_t)C;
      char *work = embedding_work(m);
      int seq = remat__seq_parallel(m);
      float *whole = seq ? (float *)work : out;
      m->be->vocab_encoder_forward(whole, ids, wte, m->tops.rank == 0 ? wpe : NULL,
                                   m->tops.rank * Vl, Vl, m->B, m->T, C);
      if (seq)
        remat__seq_scatter(m, whole, C, out, (float *)(work + remat__align(BTC * 4)));
      else
        remat__group_sum(m, out, BTC, (float *)work);
    } else {
      m->be->encoder_forward(out, ids, wte, wpe, m->B, m->T, C);
    }
    t = lap(m, REMAT__T_EMBED_F, t);
  }
  for (int64_t i = 0; i < nb; i++) {
    float *out = i + 1 < nb || m->stage.has_head ? resid_at(m, slot, i + 1) : m->send;
    if (m->cfg.family == REMAT_FAMILY_LLAMA) {
      llama_forward(m, slot, i, out, hp, micro);
      t = lap(m, REMAT__T_BLOCK_F, t);
      continue;
    }
    remat__block_acts a = block_acts(m, slot, i);
    block_params w = block_params_of(m, i, unit_params(m, 1 + m->stage.first_block + i, 0));
    block_forward(m, i, &w, resid_at(m, slot, i), &a, out, hp, micro);
    t = lap(m, REMAT__T_BLOCK_F, t);
  }
}

/* The head's backward from its forward in this pass: its loss, its
 * gradients, and dresid = dL/d(its input). Chunk by chunk (head_rows), the
 * logits are made, turned into the loss and its gradient, and taken back
 * into the norm's gradient rows and the matrix's gradient before the next
 * chunk reuses their buffer. */
static double head_backward(remat_model *m, const remat__slot *slot, float dloss) {
  const remat_config *c = &m->cfg;
  const remat_memory_model *mm = &m->mp.mm;
  int64_t N = m->B * m->T, C = c->channels, L = c->num_layers, Vp = c->padded_vocab_size;
  int64_t k = head_rows(m);
  const int32_t *targets = (const int32_t *)(slot->at + slot->lay.targets_offset);
  remat__head_acts h;
  head_params w = head_params_of(m);
  double t = remat__now();
  head_norm(m, &w, slot, &h);
  /* the head's share of the tied matrix's gradient, summed on its own;
   * the buffer holds it, then the head's own unit */
  float *gb = grad_buffer(m, REMAT_LAYER_HEAD, mm->head_bytes + mm->logits_bytes, L + 2);
  int llama = c->family == REMAT_FAMILY_LLAMA, tied = remat__tied(c);
  float *gwte = !tied ? (gb ? gb + m->head_grad_split + C : m->g[REMAT_LP_CLS])
                : gb  ? gb
                : m->tied_grad ? m->tied_grad
                               : m->g[0];
  float *glnf = gb ? gb + m->head_grad_split : m->g[llama ? REMAT_LP_NORM : REMAT_P_LNFW];
  float *glnfb = llama ? NULL : gb ? gb + m->head_grad_split + C : m->g[REMAT_P_LNFB];
  double one = 0.0;
  for (int64_t r = 0; r < N; r += k) {
    int64_t n = k < N - r ? k : N - r;
    one = head_logits(m, &w, &h, targets, r, n, true, dloss);
    t = lap(m, REMAT__T_HEAD_F, t);
    void *logits = m->work + mm->head_bytes;
    float *dx = h.dlnf + (size_t)r * (size_t)C;
    if (c->precision == REMAT_PRECISION_BF16)
      m->be->bf16_matmul_backward(m->products, dx, gwte, NULL, logits,
                                  (const uint16_t *)h.lnf + (size_t)r * (size_t)C,
                                  head_wbf(m, w.wte), n, C, Vp / remat__tp(c), false, h.scratch);
    else
      m->be->matmul_backward(dx, gwte, NULL, logits, (const float *)h.lnf + (size_t)r * (size_t)C,
                             w.wte, n, C, Vp / remat__tp(c));
    /* a tensor rank's part of the norm's gradient; the logits are free
     * (under sequence parallelism reduce-scattered after the last chunk) */
    if (!remat__seq_parallel(m)) remat__group_sum(m, dx, (size_t)n * (size_t)C, logits);
    progress(m);
    t = lap(m, REMAT__T_HEAD_B, t);
  }
  double loss = head_loss(m, &h, one);
  /* the rank's rows of the norm's gradient: all of them, or reduce-scattered
   * into the norm's output, read by now */
  int64_t R = remat__seq_rows(m);
  float *dlnf = h.dlnf;
  if (remat__seq_parallel(m)) {
    dlnf = (float *)h.lnf;
    remat__seq_scatter(m, h.dlnf, C, dlnf, dlnf + (size_t)R * (size_t)C);
  }
  m->be->clear(m->dresid, (size_t)R * (size_t)C * sizeof(float));
  if (llama)
    m->be->rmsnorm_backward(m->dresid, glnf, dlnf, resid_at(m, slot, m->stage.num_blocks),
                            w.lnfw, h.lnf_rstd, R, C);
  else
    m->be->layernorm_backward(m->dresid, glnf, glnfb, dlnf,
                              resid_at(m, slot, m->stage.num_blocks), w.lnfw, h.lnf_mean,
                              h.lnf_rstd, R, C);
  if (tied) grad_done(m, L + 2, gb);
  grad_done(m, L + 1, gb ? gb + m->head_grad_split : NULL);
  lap(m, REMAT__T_HEAD_B, t);
  return loss;
}

/* The embedding's gradient from dresid = dL/d(its output). */
static void embedding_backward(remat_model *m, const remat__slot *slot) {
  double t = remat__now();
  const remat_config *c = &m->cfg;
  int64_t C = c->channels;
  float *gb = grad_buffer(m, REMAT_LAYER_EMBEDDING, 0, 0);
  int64_t Vl = c->padded_vocab_size / remat__tp(c);
  size_t wte = (size_t)Vl * (size_t)C;
  const int32_t *ids = (const int32_t *)(slot->at + slot->lay.inputs_offset);
  /* learned positions: GPT-2's; a Llama's are rotary, in its blocks */
  int pos = c->family != REMAT_FAMILY_LLAMA;
  if (m->tops.sum) { /* a tensor rank's rows of the vocabulary, from the whole gradient */
    /* under sequence parallelism gathered first, in the embedding's work */
    const float *dout = remat__seq_whole(m, (float *)embedding_work(m), m->dresid, C);
    m->be->vocab_encoder_backward(gb ? gb : m->g[0],
                                  !pos ? NULL : gb ? gb + wte : m->g[REMAT_P_WPE], dout, ids,
                                  m->tops.rank * Vl, Vl, m->B, m->T, C);
  } else if (!gb && m->stage.has_head && !m->tied_grad && remat__tied(c)) {
    /* one micro-batch, one process: the head's share is in g[WTE]
     * already; the embedding's is summed apart in the workspace */
    REMAT_ASSERT(m->D <= 1 && kernel_ws(m).encoder_tied <= m->work_bytes);
    m->be->encoder_backward_tied(m->g[0], pos ? m->g[REMAT_P_WPE] : NULL, m->dresid, ids, m->B,
                                 m->T, C, c->padded_vocab_size, m->work);
  } else {
    m->be->encoder_backward(gb ? gb : m->g[0],
                            !pos ? NULL : gb ? gb + wte : m->g[REMAT_P_WPE], m->dresid, ids,
                            m->B, m->T, C);
  }
  grad_done(m, 0, gb);
  lap(m, REMAT__T_EMBED_B, t);
}

/* Block i's W record of deferred micro-batch w (REMAT_BUF_WREC): the
 * records of the stage's blocks kept in any slot (those slot 0 keeps), in
 * block order, each the family's (remat__block_wrec, remat__llama_wrec). */
static char *wrec_base(remat_model *m, int64_t w, int64_t i) {
  REMAT_ASSERT(w >= 0 && w < m->stage.wdeferred && m->mp.policy[i] == REMAT_KEEP);
  size_t k = 0; /* kept blocks before block i */
  for (int64_t j = 0; j < i; j++) k += m->mp.policy[j] == REMAT_KEEP;
  if (m->placed) { /* the record alone, where the runtime placed it */
    REMAT_ASSERT(m->placed[m->stage.inflight + w]);
    return m->placed[m->stage.inflight + w] + k * m->mp.mm.block_wrec_bytes;
  }
  size_t at = ((size_t)w * (size_t)m->mp.num_kept + k) * m->mp.mm.block_wrec_bytes;
  return m->arena + m->mp.buf[REMAT_BUF_WREC].offset + at;
}

static remat__block_wrec wrec_at(remat_model *m, int64_t w, int64_t i) {
  remat__block_wrec r;
  remat__block_wrec_view(&r, wrec_base(m, w, i), m->B, m->T, m->cfg.channels, &m->ws);
  return r;
}

/* After a kept block's B: what its W reads besides the gradients, copied
 * from the slot into its record, so that the slot is free from here on. */
static void wrec_fill(remat_model *m, const remat__block_wrec *r, const float *x,
                      const remat__block_acts *a) {
  size_t BT = (size_t)m->B * (size_t)m->T, C = (size_t)m->cfg.channels, BTC = BT * C;
  size_t BTCi = BT * (size_t)inner(m); /* a tensor rank's heads' and MLP's share */
  size_t R = (size_t)remat__seq_rows(m); /* its rows of the residual stream */
  size_t h = remat__act_elem(&m->ws), f = sizeof(float);
  const remat__backend *be = m->be;
  be->copy(r->x, x, R * C * f);
  be->copy(r->res2, a->res2, R * C * f);
  be->copy(r->ln1_mean, a->ln1_mean, R * f);
  be->copy(r->ln1_rstd, a->ln1_rstd, R * f);
  be->copy(r->ln2_mean, a->ln2_mean, R * f);
  be->copy(r->ln2_rstd, a->ln2_rstd, R * f);
  if (remat__seq_parallel(m)) { /* the products' inputs whole */
    remat__seq_gather_act(m, r->ln1, a->ln1, (int64_t)C);
    remat__seq_gather_act(m, r->ln2, a->ln2, (int64_t)C);
  } else {
    be->copy(r->ln1, a->ln1, BTC * h);
    be->copy(r->ln2, a->ln2, BTC * h);
  }
  be->copy(r->atty, a->atty, BTCi * h);
  be->copy(r->fch_gelu, a->fch_gelu, 4 * BTCi * h);
}

/* The activations a W reads, in its record (the others NULL: W reads no
 * more). */
static remat__block_acts wrec_acts(const remat__block_wrec *r) {
  remat__block_acts a;
  memset(&a, 0, sizeof a);
  a.ln1_mean = r->ln1_mean;
  a.ln1_rstd = r->ln1_rstd;
  a.atty = r->atty;
  a.res2 = r->res2;
  a.ln2_mean = r->ln2_mean;
  a.ln2_rstd = r->ln2_rstd;
  a.ln1 = r->ln1;
  a.ln2 = r->ln2;
  a.fch_gelu = r->fch_gelu;
  return a;
}

/* Block i of a Llama backward (model/llama_block.c), its part bp (a
 * kept block's; wslot: its W record's micro-batch when apart): rebuilt
 * first when it does not keep its internals in the slot, as
 * blocks_backward does GPT-2's; W reads the record, not the slot. */
static void llama_backward(remat_model *m, const remat__slot *slot, int64_t i,
                           const remat_hparams *hp, uint32_t micro, int bp, int64_t wslot) {
  const remat_memory_model *mm = &m->mp.mm;
  int pol = bp == PART_WEIGHT ? REMAT_KEEP : slot->lay.policy[i]; /* W: from its record */
  int64_t u = 1 + m->stage.first_block + i;
  float *w[REMAT__LLAMA_BLOCK_TENSORS], *g[REMAT__LLAMA_BLOCK_TENSORS] = {0};
  remat__dropout d[3];
  remat__llama_block_views(m, i, unit_params(m, u, 1), m->p, w);
  llama_drops(m, i, hp, micro, d);
  remat__llama_wrec wr = {0};
  if (bp != PART_ALL)
    remat__llama_wrec_view(&wr, wrec_base(m, wslot, i), &m->cfg, m->B, m->T, &m->ws);
  remat__llama_acts a =
      bp == PART_WEIGHT ? remat__llama_wrec_acts(&wr) : remat__llama_acts_at(m, slot, i);
  const float *x = bp == PART_WEIGHT ? wr.x : resid_at(m, slot, i);
  const uint16_t *h[REMAT__LLAMA_BLOCK_TENSORS];
  if (m->wbf) llama_wbf(m, i, w, false, h);
  if (pol != REMAT_KEEP) {
    double t0 = remat__now();
    if (pol == REMAT_RECOMPUTE)
      remat__llama_block_forward(m, w, m->wbf ? h : NULL, x, &a, NULL, d);
    else
      remat__llama_block_cheap(m, w, x, &a);
    m->recompute_s +=
        lap(m, pol == REMAT_RECOMPUTE ? REMAT__T_RECOMPUTE : REMAT__T_MIDDLE, t0) - t0;
  }
  double t0 = remat__now();
  size_t scratch = pol == REMAT_RECOMPUTE ? mm->block_internal_bytes
                   : pol == REMAT_MIDDLE  ? mm->block_cheap_bytes
                                          : 0;
  float *gb = bp & PART_WEIGHT
                  ? grad_buffer(m, REMAT_LAYER_BLOCK, mm->block_dgrad_bytes + scratch, u)
                  : NULL;
  if (bp & PART_WEIGHT) remat__llama_block_views(m, i, gb, m->g, g);
  remat__llama_block_backward(m, w, m->wbf ? h : NULL, g, x, &a, d, bp,
                              bp != PART_ALL ? &wr : NULL);
  if (bp == PART_INPUT) remat__llama_wrec_fill(m, &wr, x, &a);
  if (bp & PART_WEIGHT) grad_done(m, u, gb);
  lap(m, bp == PART_WEIGHT ? REMAT__T_BLOCK_W : REMAT__T_BLOCK_B, t0);
}

/* The stage's blocks' backward, last to first: whole, B or W (part; W
 * records of deferred micro-batch wslot when apart), each block by its
 * policy in the micro-batch's slot. A block that does not keep its
 * internals there rebuilds them first. Apart, the blocks kept in any slot
 * (those slot 0 keeps) have a W, which reads their record, not the slot
 * (slot is NULL for W); in a slot that recomputes such a block in full its
 * B rebuilds it and fills its record all the same, so that its weight
 * gradients add up at the Ws, in micro-batch order, as a whole backward's
 * do. The others run their whole backward in B. */
static void blocks_backward(remat_model *m, const remat__slot *slot, uint32_t micro,
                            const remat_hparams *hp, int part, int64_t wslot) {
  const remat_memory_model *mm = &m->mp.mm;
  int64_t C = m->cfg.channels;
  for (int64_t i = m->stage.num_blocks - 1; i >= 0; i--) {
    int split = m->mp.policy[i] == REMAT_KEEP; /* kept in some slot: B and W apart */
    int bp = split ? part : part == PART_WEIGHT ? 0 : PART_ALL; /* this block's */
    if (!bp) continue;
    int pol = bp == PART_WEIGHT ? REMAT_KEEP : slot->lay.policy[i]; /* W: from its record */
    if (m->cfg.family == REMAT_FAMILY_LLAMA) {
      llama_backward(m, slot, i, hp, micro, bp, wslot);
      continue;
    }
    remat__block_wrec wr = {0};
    if (bp != PART_ALL) wr = wrec_at(m, wslot, i);
    remat__block_acts a = bp == PART_WEIGHT ? wrec_acts(&wr) : block_acts(m, slot, i);
    const float *x = bp == PART_WEIGHT ? wr.x : resid_at(m, slot, i);
    int64_t u = 1 + m->stage.first_block + i;
    block_params w = block_params_of(m, i, unit_params(m, u, 1));
    if (pol != REMAT_KEEP) {
      double t0 = remat__now();
      if (pol == REMAT_RECOMPUTE)
        block_forward(m, i, &w, x, &a, NULL, hp, micro);
      else
        block_recompute_cheap(m, &w, x, &a);
      m->recompute_s += lap(m, pol == REMAT_RECOMPUTE ? REMAT__T_RECOMPUTE : REMAT__T_MIDDLE, t0) - t0;
    }
    double t0 = remat__now();
    size_t scratch = pol == REMAT_RECOMPUTE ? mm->block_internal_bytes
                     : pol == REMAT_MIDDLE  ? mm->block_cheap_bytes
                                            : 0;
    float *gb = bp & PART_WEIGHT
                    ? grad_buffer(m, REMAT_LAYER_BLOCK, mm->block_dgrad_bytes + scratch, u)
                    : NULL;
    block_grads g = {0};
    if (gb) {
      float *v[12];
      unit_block_views(gb, (size_t)C, (size_t)inner(m), v);
      g = UNIT_VIEW(block_grads, v);
    } else if (bp & PART_WEIGHT) {
      g = BLOCK_VIEW(block_grads, m->g, i, C, inner(m));
    }
    block_backward(m, i, &w, &g, x, &a, hp, micro, bp, bp != PART_ALL ? &wr : NULL);
    if (bp == PART_INPUT) wrec_fill(m, &wr, x, &a);
    if (bp & PART_WEIGHT) grad_done(m, u, gb);
    lap(m, bp == PART_WEIGHT ? REMAT__T_BLOCK_W : REMAT__T_BLOCK_B, t0);
  }
}

double remat__model_stage_backward(remat_model *m, int64_t slot_index, uint32_t micro, float dloss,
                                   const remat_hparams *hp) {
  remat__slot sl = slot_at(m, slot_index), *slot = &sl;
  double loss = m->stage.has_head ? head_backward(m, slot, dloss) : 0;
  blocks_backward(m, slot, micro, hp, PART_ALL, 0);
  if (m->stage.has_embedding) embedding_backward(m, slot);
  m->grads_fresh = 0;
  m->wgrads_fresh = 0;
  return loss;
}

double remat__model_stage_backward_input(remat_model *m, int64_t slot_index, int64_t wslot,
                                         uint32_t micro, float dloss, const remat_hparams *hp) {
  remat__slot sl = slot_at(m, slot_index), *slot = &sl;
  double loss = m->stage.has_head ? head_backward(m, slot, dloss) : 0;
  blocks_backward(m, slot, micro, hp, PART_INPUT, wslot);
  if (m->stage.has_embedding) embedding_backward(m, slot);
  m->grads_fresh = 0;
  return loss;
}

void remat__model_stage_backward_weight(remat_model *m, int64_t wslot, uint32_t micro,
                                        const remat_hparams *hp) {
  /* the kept blocks' gradients go straight into the step's at the step's
   * first W, as a whole backward's do at its first micro-batch (the other
   * blocks', with the head's and the embedding's, at the first B) */
  int fresh = m->grads_fresh;
  m->grads_fresh = m->wgrads_fresh;
  blocks_backward(m, NULL, micro, hp, PART_WEIGHT, wslot);
  m->grads_fresh = fresh;
  m->wgrads_fresh = 0;
}

float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                   const remat_hparams *hp) {
  REMAT_ASSERT(m->stage.has_embedding && m->stage.has_head);
  remat__model_stage_forward(m, 0, micro, hp);
  double loss = remat__model_stage_backward(m, 0, micro, dloss, hp);
  return (float)(loss / (double)(m->B * m->T));
}

float remat_model_eval(remat_model *m) {
  REMAT_ASSERT(m->stage.has_embedding && m->stage.has_head);
  remat__model_stage_forward(m, 0, 0, NULL); /* refreshes the bf16 weights */
  remat__head_acts h;
  head_params w = head_params_of(m);
  remat__slot slot = slot_at(m, 0);
  return (float)(head_forward(m, &w, &slot, &h) / (double)(m->B * m->T));
}

void remat_model_zero_grad(remat_model *m) {
  const remat_membuf *b = m->mp.buf;
  if (!m->update_clean) {
    m->be->clear(m->grads, b[REMAT_BUF_GRADS].bytes);
    m->bf16_stale = 1;
  }
  if (m->tied_grad) m->be->clear(m->tied_grad, b[REMAT_BUF_TIED_GRAD].bytes);
  m->tied_summed = 0;
  m->grads_fresh = m->wgrads_fresh = 1;
  m->update_clean = 0;
}

/* g[i] = g[i] + t[i] over [first, first + count) of the tied matrix. */
static void add_tied(remat_model *m, size_t first, size_t count) {
  size_t run_g, run_t;
  for (size_t i = first; i < first + count;) {
    float *g = remat__model_unit_at(m, REMAT_BUF_GRADS, 0, i, &run_g);
    const float *t = remat__model_unit_at(m, REMAT_BUF_TIED_GRAD, m->cfg.num_layers + 2, i, &run_t);
    size_t run = run_g < run_t ? run_g : run_t;
    if (run > first + count - i) run = first + count - i;
    m->be->add(g, t, run, 1, 0); /* embedding + head */
    i += run;
  }
}

void remat__model_add_tied(remat_model *emb, remat_model *head) {
  REMAT_ASSERT(emb->stage.has_embedding && head->stage.has_head);
  int borrowed = remat__stage_tied_borrowed(&head->cfg, &head->stage);
  size_t n = emb->sz[REMAT_P_WTE];
  float *ge = remat__model_tensor_grad(emb, REMAT_P_WTE),
        *gh = borrowed ? head->tied_grad : remat__model_tensor_grad(head, REMAT_P_WTE);
  emb->be->add(ge, gh, n, 1, 0); /* embedding + head */
  if (!borrowed) emb->be->copy(gh, ge, n * sizeof(float)); /* the head's copy alike */
}

void remat_model_sum_tied(remat_model *m) {
  /* a head that borrows the matrix: its lender adds the two (remat__model_add_tied) */
  if (!m->tied_grad || m->tied_summed || !m->stage.has_embedding) return;
  m->tied_summed = 1;
  size_t first = 0, count = m->sz[REMAT_P_WTE];
  if (m->D > 1) { /* a replica: the elements it owns */
    remat_unit_owned(&m->cfg, m->cfg.num_layers + 2, m->D, m->r, &first, &count);
  }
  add_tied(m, first, count);
}

int64_t remat__model_grad_chunk_sums(remat_model *m, int64_t u, size_t first, size_t count,
                                     double *out) {
  const size_t Q = REMAT_SHARD_QUANTUM;
  REMAT_ASSERT(first % Q == 0);
  /* the range's runs, one per tensor of the unit at most */
  remat__piece pieces[REMAT_UNIT_MAX_SEGMENTS];
  int n = 0;
  size_t run;
  for (size_t i = first; i < first + count; i += run) {
    REMAT_ASSERT(n < REMAT_UNIT_MAX_SEGMENTS);
    const float *x = remat__model_unit_at(m, REMAT_BUF_GRADS, u, i, &run);
    if (run > first + count - i) run = first + count - i;
    pieces[n++] = (remat__piece){x, run};
  }
  m->be->sumsq_chunks(out, pieces, n, count, Q);
  return (int64_t)((count + Q - 1) / Q);
}

/* A unit's sum of squares: its chunk sums, added in order. */
static double unit_sumsq(remat_model *m, int64_t u) {
  const size_t Q = REMAT_SHARD_QUANTUM, n = remat_unit_floats(&m->cfg, u);
  double part[256], s = 0.0;
  for (size_t first = 0; first < n; first += 256 * Q) {
    size_t count = n - first < 256 * Q ? n - first : 256 * Q;
    int64_t k = remat__model_grad_chunk_sums(m, u, first, count, part);
    for (int64_t c = 0; c < k; c++) s += part[c];
  }
  return s;
}

/* The layers of the stage, in model order: the embedding (wte, wpe), each
 * block (its 12 tensors), the head (the final layernorm; its copy of wte is
 * counted once, on the embedding): each its unit's sum. */
int64_t remat__model_grad_sumsq_layers(const remat_model *cm, double *out) {
  remat_model *m = (remat_model *)cm; /* reads only */
  REMAT_ASSERT(m->D <= 1);
  int64_t k = 0;
  if (m->stage.has_embedding) out[k++] = unit_sumsq(m, 0);
  for (int64_t i = 0; i < m->stage.num_blocks; i++)
    out[k++] = unit_sumsq(m, 1 + m->stage.first_block + i);
  if (m->stage.has_head) out[k++] = unit_sumsq(m, m->cfg.num_layers + 1);
  return k;
}

/* Unit u's sum of squares over the tensors a tensor rank holds a shard of
 * (split 1) or whole (split 0), chunk by chunk into out (the backend's
 * memory, as remat__model_grad_chunk_sums writes): 256 chunks at a time
 * added on the host, then written through a window. */
int64_t remat__model_grad_chunk_sums_part(remat_model *m, int64_t u, size_t first, size_t count,
                                          int split, double *out) {
  const size_t Q = REMAT_SHARD_QUANTUM, nch = (count + Q - 1) / Q;
  REMAT_ASSERT(first % Q == 0);
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(&m->cfg, t);
  remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
  int n = remat_unit_segments(&m->cfg, u, seg);
  for (size_t c0 = 0; c0 < nch; c0 += 256) {
    size_t nc = nch - c0 < 256 ? nch - c0 : 256, lo0 = first + c0 * Q;
    size_t hi0 = lo0 + nc * Q < first + count ? lo0 + nc * Q : first + count;
    double acc[256] = {0};
    /* each chunk's runs of the part's tensors, in unit order */
    for (int k = 0; k < n; k++) {
      if ((t[seg[k].tensor].split != REMAT__SPLIT_NONE) != split) continue;
      size_t lo = seg[k].at > lo0 ? seg[k].at : lo0, end = seg[k].at + seg[k].count;
      size_t hi = end < hi0 ? end : hi0;
      for (size_t i = lo, run; i < hi; i += run) {
        size_t c = (i - lo0) / Q, stop = lo0 + (c + 1) * Q < hi ? lo0 + (c + 1) * Q : hi;
        const float *g = remat__model_unit_at(m, REMAT_BUF_GRADS, u, i, &run);
        REMAT_ASSERT(run >= stop - i);
        run = stop - i;
        acc[c] += m->be->sumsq(g, run);
      }
    }
    double *h = m->be->map(out + c0, nc * sizeof(double), REMAT_MAP_WRITE);
    memcpy(h, acc, nc * sizeof(double));
    m->be->unmap(out + c0, h, nc * sizeof(double), REMAT_MAP_WRITE);
  }
  return (int64_t)nch;
}

static double unit_sumsq_part(remat_model *m, int64_t u, int split) {
  const size_t Q = REMAT_SHARD_QUANTUM, n = remat_unit_floats(&m->cfg, u);
  double part[256], s = 0.0;
  for (size_t first = 0; first < n; first += 256 * Q) {
    size_t count = n - first < 256 * Q ? n - first : 256 * Q;
    int64_t k = remat__model_grad_chunk_sums_part(m, u, first, count, split, part);
    for (int64_t c = 0; c < k; c++) s += part[c];
  }
  return s;
}

int64_t remat__model_grad_sumsq_layers_split(const remat_model *cm, double *split,
                                             double *whole) {
  remat_model *m = (remat_model *)cm; /* reads only */
  REMAT_ASSERT(!remat__model_buf_sharded(m, REMAT_BUF_GRADS));
  int64_t k = 0, L = m->cfg.num_layers;
  for (int64_t x = 0; x < m->stage.num_blocks + 2; x++) {
    int64_t u = x == 0 ? 0 : x <= m->stage.num_blocks ? m->stage.first_block + x : L + 1;
    if ((x == 0 && !m->stage.has_embedding) || (u == L + 1 && !m->stage.has_head)) continue;
    split[k] = unit_sumsq_part(m, u, 1);
    whole[k++] = unit_sumsq_part(m, u, 0);
  }
  return k;
}

int64_t remat__model_num_layers(const remat_model *m) {
  return m->stage.num_blocks + m->stage.has_embedding + m->stage.has_head;
}

double remat_model_grad_sumsq(const remat_model *m) {
  double part[4096 + 2], s = 0;
  REMAT_ASSERT(remat__model_num_layers(m) <= 4096 + 2);
  int64_t n = remat__model_grad_sumsq_layers(m, part);
  for (int64_t k = 0; k < n; k++) s += part[k];
  return s;
}

static int decays(const remat_config *cfg, int tensor) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  return t[tensor].decay;
}

/* AdamW over the parts of unit u this replica owns, segment by segment
 * (the weight decay is per tensor). */
static void update_owned(remat_model *m, int64_t u, const remat__adamw *opt, float wd,
                         float scale) {
  size_t first, count;
  remat_unit_owned(&m->cfg, u, m->D, m->r, &first, &count);
  remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
  int n = remat_unit_segments(&m->cfg, u, seg);
  for (int k = 0; k < n; k++) {
    size_t lo = seg[k].at > first ? seg[k].at : first;
    size_t hi = seg[k].at + seg[k].count < first + count ? seg[k].at + seg[k].count
                                                         : first + count;
    if (lo >= hi) continue;
    size_t run;
    float *p = remat__model_unit_at(m, REMAT_BUF_PARAMS, u, lo, &run);
    float *g = remat__model_unit_at(m, REMAT_BUF_GRADS, u, lo, &run);
    float *mo = remat__model_unit_at(m, REMAT_BUF_ADAM_M, u, lo, &run);
    float *v = remat__model_unit_at(m, REMAT_BUF_ADAM_V, u, lo, &run);
    m->be->adamw_update(p, g, mo, v, hi - lo, opt, decays(&m->cfg, seg[k].tensor) ? wd : 0.0f, scale);
  }
}

/* Tensor i of a whole (unsharded) stage in one sweep: AdamW, its bf16
 * copies where it has them (a block matrix's, block by block; the tied
 * matrix's on a stage with the head: every copy bf16_refresh makes), and
 * its gradient zeroed. */
static void update_fused(remat_model *m, int i, float *pm, float *pv, const remat__adamw *opt,
                         float wd, float scale) {
  const bool copies = m->wbf && !gathered_bf16(m);
  /* a block matrix's place in its block's copies (the block's matrices in
   * the family's order), and its size */
  size_t at = 0, per = 0;
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(&m->cfg, t);
  for (int k = 0; k <= i && t[i].where == REMAT__IN_BLOCK && t[i].matrix; k++) {
    if (t[k].where != REMAT__IN_BLOCK || !t[k].matrix) continue;
    per = (size_t)t[k].rows * (size_t)t[k].cols;
    if (k < i) at += per;
  }
  if (copies && per) {
    REMAT_ASSERT(m->sz[i] == per * (size_t)m->stage.num_blocks);
    for (int64_t b = 0; b < m->stage.num_blocks; b++) {
      uint16_t *h = (uint16_t *)((char *)m->wbf + (size_t)b * m->mp.mm.block_bf16_bytes) + at;
      size_t o = (size_t)b * per;
      m->be->adamw_update_fused(m->p[i] + o, m->g[i] + o, pm + o, pv + o, h, per, opt, wd, scale);
    }
    return;
  }
  uint16_t *h = copies && i == remat__head_tensor(&m->cfg) && m->stage.has_head ? head_wbf(m, NULL)
                                                                                 : NULL;
  REMAT_ASSERT(!h || m->sz[i] == head_floats(m));
  m->be->adamw_update_fused(m->p[i], m->g[i], pm, pv, h, m->sz[i], opt, wd, scale);
}

void remat_model_update(remat_model *m, const remat_hparams *hp, float lr, float norm) {
  float scale = 1.0f;
  if (hp->grad_clip > 0) {
    float coef = hp->grad_clip / (norm + 1e-6f);
    if (coef < 1.0f) scale = coef;
  }
  m->step++;
  m->bf16_stale = 1;
  remat__adamw opt = {.lr = lr, .beta1 = hp->beta1, .beta2 = hp->beta2, .eps = hp->eps,
                      .step = (int)m->step};
  if (m->D > 1 && m->zero >= 1) { /* the shards this replica owns */
    int64_t units[4096 + 3], n = remat_stage_units(&m->cfg, &m->stage, units);
    for (int64_t j = 0; j < n; j++) update_owned(m, units[j], &opt, hp->weight_decay, scale);
    return;
  }
  float *pm = m->adam_m, *pv = m->adam_v;
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    if (!m->sz[i]) continue;
    const float wd = decays(&m->cfg, i) ? hp->weight_decay : 0.0f;
    if (m->be->adamw_update_fused)
      update_fused(m, i, pm, pv, &opt, wd, scale);
    else
      m->be->adamw_update(m->p[i], m->g[i], pm, pv, m->sz[i], &opt, wd, scale);
    pm += m->sz[i];
    pv += m->sz[i];
  }
  if (m->be->adamw_update_fused) { /* gradients zero, bf16 copies (if any) fresh */
    m->update_clean = 1;
    m->bf16_stale = 0;
    /* but a borrowed matrix's copy: the lender updates the matrix */
    m->tied_bf16_stale = remat__stage_tied_borrowed(&m->cfg, &m->stage);
  }
}
