/* units.c: the stages of the whole model and of a replica; the model's
 * parameters cut into units (one layer's tensors as one vector) and units
 * cut into shards, for data parallelism; the bytes of one replica under
 * each ZeRO stage; and the ZeRO paper's state bytes per parameter, the one
 * table of them (the Python profiler asks `remat state`). See
 * include/remat/memory.h. The memory model and the arena (memplan.c) build
 * on these; nothing here calls memplan.c. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "memory/layout.h"

remat_stage remat_stage_whole(const remat_config *cfg, const uint8_t *policy) {
  return (remat_stage){.first_block = 0, .num_blocks = cfg->num_layers, .policy = policy,
                       .inflight = 1, .has_embedding = 1, .has_head = 1};
}

remat_stage remat_stage_replica(const remat_config *cfg, const uint8_t *policy, int64_t D,
                                int64_t r, int zero) {
  remat_stage st = remat_stage_whole(cfg, policy);
  st.accumulate = 1;
  st.replicas = D;
  st.replica = r;
  st.zero = zero;
  return st;
}

int64_t remat_unit_count(const remat_config *cfg) { return cfg->num_layers + 3; }

int remat_unit_segments(const remat_config *cfg, int64_t u,
                        remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS]) {
  int64_t L = cfg->num_layers;
  REMAT_ASSERT(u >= 0 && u < L + 3);
  size_t sz[REMAT_P_COUNT], start[REMAT_P_COUNT], at = 0;
  remat_param_sizes(cfg, sz);
  start[0] = 0;
  for (int i = 1; i < REMAT_P_COUNT; i++) start[i] = start[i - 1] + sz[i - 1];
  int n = 0;
#define ADD(t, first, len)                                                                  \
  do {                                                                                      \
    seg[n] = (remat_unit_segment){.tensor = (t), .offset = start[t] + (first), .at = at,    \
                                  .count = (len)};                                          \
    at += (len);                                                                            \
    n++;                                                                                    \
  } while (0)
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  if (u == L + 2 && remat__tied(cfg)) { /* the head's copy of the tied matrix */
    int h = remat__head_tensor(cfg);
    ADD(h, 0, sz[h]);
  }
  for (int k = 0; u < L + 2 && k < REMAT_P_COUNT; k++) {
    if (!sz[k]) continue;
    if (u == 0 && t[k].where == REMAT__IN_EMBEDDING) {
      ADD(k, 0, sz[k]);
    } else if (u >= 1 && u <= L && t[k].where == REMAT__IN_BLOCK) {
      size_t per = sz[k] / (size_t)L;
      ADD(k, (size_t)(u - 1) * per, per);
    } else if (u == L + 1 && t[k].where == REMAT__IN_HEAD) {
      ADD(k, 0, sz[k]);
    }
  }
#undef ADD
  return n;
}

size_t remat_unit_floats(const remat_config *cfg, int64_t u) {
  remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
  int n = remat_unit_segments(cfg, u, seg);
  return n ? seg[n - 1].at + seg[n - 1].count : 0; /* an untied head has no unit L + 2 */
}

size_t remat_unit_shard(const remat_config *cfg, int64_t u, int64_t D) {
  REMAT_ASSERT(D >= 1);
  /* the tied gradient is cut like the embedding; an untied model has none */
  if (u == cfg->num_layers + 2 && !remat__tied(cfg)) return 0;
  if (u == cfg->num_layers + 2) u = 0;
  size_t n = remat_unit_floats(cfg, u), d = (size_t)D, q = REMAT_SHARD_QUANTUM;
  size_t per = (n + d - 1) / d;
  return (per + q - 1) / q * q;
}

void remat_unit_owned(const remat_config *cfg, int64_t u, int64_t D, int64_t r, size_t *first,
                      size_t *count) {
  size_t n = remat_unit_floats(cfg, u), s = remat_unit_shard(cfg, u, D);
  size_t lo = (size_t)r * s, hi = lo + s;
  if (lo > n) lo = n;
  if (hi > n) hi = n;
  *first = lo;
  *count = hi - lo;
}

int64_t remat_stage_units(const remat_config *cfg, const remat_stage *st, int64_t *out) {
  int64_t L = cfg->num_layers, n = 0;
  if (st->has_embedding) out[n++] = 0;
  for (int64_t i = 0; i < st->num_blocks; i++) out[n++] = 1 + st->first_block + i;
  if (st->has_head) out[n++] = L + 1;
  if (st->has_head && !st->has_embedding && remat__tied(cfg) &&
      !remat__stage_tied_borrowed(cfg, st))
    out[n++] = L + 2;
  return n;
}

/* ZeRO 3: whether a stage gathers a block while another unit is in use
 * (a block after the embedding, the head's pair or another block). */
static int block_slot(const remat_stage *st) {
  return st->num_blocks >= 1 && (st->has_embedding || st->has_head || st->num_blocks >= 2);
}

int remat_replica_bytes_get(const remat_config *cfg, int64_t D, int zero,
                            remat_replica_bytes *out, remat_error *err) {
  remat_stage st = remat_stage_replica(cfg, NULL, D, 0, zero);
  return remat_replica_stage_bytes_get(cfg, &st, out, err);
}

int remat_replica_stage_bytes_get(const remat_config *cfg, const remat_stage *st,
                                  remat_replica_bytes *out, remat_error *err) {
  memset(out, 0, sizeof *out);
  int rc = remat_config_check(cfg, err);
  if (rc) return rc;
  int64_t D = st->replicas;
  int zero = st->zero;
  if (D < 1 || D > 4096)
    return remat__errorf(err, REMAT_EINVAL, "%lld replicas; there must be 1 to 4096",
                         (long long)D);
  if (zero < 0 || zero > 3)
    return remat__errorf(err, REMAT_EINVAL, "ZeRO stage %d does not exist; use 0, 1, 2 or 3",
                         zero);
  int64_t L = cfg->num_layers;
  const int64_t kind_unit[REMAT_LAYER_KIND_COUNT] = {
      [REMAT_LAYER_EMBEDDING] = 0, [REMAT_LAYER_BLOCK] = 1, [REMAT_LAYER_HEAD] = L + 1};
  /* which of parameters, gradients, m, v are whole */
  int whole[4] = {!remat_zero_shards(zero, REMAT_STATE_WEIGHTS),
                  !remat_zero_shards(zero, REMAT_STATE_GRADS),
                  !remat_zero_shards(zero, REMAT_STATE_OPTIMIZER),
                  !remat_zero_shards(zero, REMAT_STATE_OPTIMIZER)};
  size_t d = (size_t)D;
  out->replicas = D;
  out->zero = zero;
  for (int k = 0; k < REMAT_LAYER_KIND_COUNT; k++) {
    int64_t u = kind_unit[k];
    size_t full = remat__align(remat_unit_floats(cfg, u) * sizeof(float));
    size_t shard = remat_unit_shard(cfg, u, D) * sizeof(float);
    for (int b = 0; b < 4; b++) out->state[k] += whole[b] ? full : shard;
    out->grad[k] = d * shard;
  }
  size_t tied_full = remat__align(remat_unit_floats(cfg, L + 2) * sizeof(float));
  size_t tied_shard = remat_unit_shard(cfg, L + 2, D) * sizeof(float);
  size_t tied_grad = zero <= 1 ? tied_full : tied_shard;
  /* bf16: the products' copies of the matrices, whole under ZeRO 0 to 2;
   * under ZeRO 3 the unit in use is rounded from its gathered parameters
   * into one buffer (gather_bf16, below) instead */
  size_t bf_block, bf_head, bf_block_whole, bf_head_whole;
  remat__bf16_copy_bytes(cfg, &bf_block_whole, &bf_head_whole);
  bf_block = zero == 3 ? 0 : bf_block_whole;
  bf_head = zero == 3 ? 0 : bf_head_whole;
  out->state[REMAT_LAYER_BLOCK] += bf_block;
  out->head_joint_state = out->state[REMAT_LAYER_HEAD] + tied_grad + bf_head;
  out->head_alone_state = out->state[REMAT_LAYER_HEAD] + bf_head;
  for (int b = 0; b < 4; b++) out->head_alone_state += whole[b] ? tied_full : tied_shard;
  /* the head computes its gradient of the tied matrix beside its own */
  out->grad[REMAT_LAYER_HEAD] += d * tied_shard;

  /* the stage's regions: its units (a head alone holds its copy of the
   * tied matrix as one), and the tied gradient of a head beside the
   * embedding */
  int64_t units[4096 + 3];
  int64_t n = remat_stage_units(cfg, st, units);
  size_t gather0 = 0, chunks = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t u = units[i];
    size_t full = remat__align(remat_unit_floats(cfg, u) * sizeof(float));
    size_t s = remat_unit_shard(cfg, u, D);
    out->params += whole[0] ? full : s * sizeof(float);
    out->grads += whole[1] ? full : s * sizeof(float);
    out->moment += whole[2] ? full : s * sizeof(float);
    /* the largest shard of a unit but the head's own: the embedding, a
     * block, or the head's tied matrix (unit 0 or L + 2) */
    if (u != L + 1 && s > gather0) gather0 = s;
    if (u <= L + 1) chunks += s / REMAT_SHARD_QUANTUM;
  }
  if (st->has_embedding && st->has_head) {
    out->tied = tied_grad;
    if (tied_shard / sizeof(float) > gather0) gather0 = tied_shard / sizeof(float);
  }
  size_t b = remat_unit_shard(cfg, 1, D), h = st->has_head ? remat_unit_shard(cfg, L + 1, D) : 0;
  int64_t nb = st->num_blocks;
  /* One layer's reduce-scatter is in flight while the next computes: its
   * gradient buffer stays alive beside the one being computed, so a
   * replica's gradient buffers are communication buffers, not workspace:
   * one for the embedding and the head (the larger of those it has), and
   * two for the blocks, which consecutive blocks take in turn (one when the
   * stage has one block). */
  size_t big = st->has_embedding ? out->grad[REMAT_LAYER_EMBEDDING] : 0;
  if (st->has_head && out->grad[REMAT_LAYER_HEAD] > big) big = out->grad[REMAT_LAYER_HEAD];
  out->reduce = (size_t)(nb < 2 ? nb : 2) * out->grad[REMAT_LAYER_BLOCK] + big;
  /* the pieces of one layer's reduce-scatter: a unit's, or the head's two
   * (its tied matrix's, then its own) at once; an all-gather's between steps
   * fits too */
  out->recv = d * (gather0 + h) * sizeof(float);
  /* ZeRO 3 gathers the unit in use into the first slot (gather0), the next
   * block's meanwhile into a second (when there can be a unit before a
   * block), the head's own into a third */
  if (zero == 3)
    out->gather = d * (gather0 + (block_slot(st) ? b : 0) + h) * sizeof(float);
  out->norm = remat__align(d * chunks * sizeof(double));
  if (zero == 3) { /* the bf16 buffer holds a block's matrices or the head's */
    out->gather_bf16 = nb ? bf_block_whole : 0;
    if (st->has_head && bf_head_whole > out->gather_bf16) out->gather_bf16 = bf_head_whole;
  }
  out->comm = out->recv + out->gather + out->norm + out->reduce + out->gather_bf16;
  return 0;
}

/* Bytes per parameter (the ZeRO paper's accounting); append only. */
static const remat_state_precision precisions[] = {
    {"fp32", 4, 4, 0},
    {"bf16", 2, 2, 4}, /* fp32 master weights */
    {"fp16", 2, 2, 4},
};
static const remat_state_optimizer optimizers[] = {
    {"adamw", 8, 1}, /* m and v */
    {"adam", 8, 1},
    {"sgd", 0, 1},
    {"sgd-momentum", 4, 1},
    {"none", 0, 0},
};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const remat_state_precision *remat_state_precision_at(int i) {
  return i >= 0 && i < COUNT(precisions) ? &precisions[i] : NULL;
}

const remat_state_optimizer *remat_state_optimizer_at(int i) {
  return i >= 0 && i < COUNT(optimizers) ? &optimizers[i] : NULL;
}

int remat_zero_shards(int zero, int part) {
  REMAT_ASSERT(part >= 0 && part < REMAT_STATE_PART_COUNT);
  /* ZeRO 1 shards the optimizer state, 2 the gradients too, 3 the weights too */
  static const int from[REMAT_STATE_PART_COUNT] = {
      [REMAT_STATE_WEIGHTS] = 3, [REMAT_STATE_GRADS] = 2, [REMAT_STATE_OPTIMIZER] = 1};
  return zero >= from[part];
}

/* "fp32, bf16, fp16": the names of a table, for a refusal. */
#define NAMES(buf, table)                                                            \
  do {                                                                               \
    size_t at_ = 0;                                                                  \
    buf[0] = 0;                                                                      \
    for (int i_ = 0; i_ < COUNT(table); i_++)                                        \
      at_ += (size_t)snprintf(buf + at_, sizeof buf - at_, "%s%s", i_ ? ", " : "",   \
                              table[i_].name);                                       \
  } while (0)

int remat_state_bytes(uint64_t num_params, const char *precision, const char *optimizer,
                      int zero, int64_t dp, int64_t tp, uint64_t parts[REMAT_STATE_PART_COUNT],
                      uint64_t *total, remat_error *err) {
  const remat_state_precision *p = NULL;
  const remat_state_optimizer *o = NULL;
  char names[128];
  for (int i = 0; i < COUNT(precisions); i++)
    if (!strcmp(precisions[i].name, precision)) p = &precisions[i];
  for (int i = 0; i < COUNT(optimizers); i++)
    if (!strcmp(optimizers[i].name, optimizer)) o = &optimizers[i];
  if (!p) {
    NAMES(names, precisions);
    return remat__errorf(err, REMAT_EINVAL, "precision '%s': use one of %s", precision, names);
  }
  if (!o) {
    NAMES(names, optimizers);
    return remat__errorf(err, REMAT_EINVAL, "optimizer '%s': use one of %s", optimizer, names);
  }
  if (zero < 0 || zero > 3)
    return remat__errorf(err, REMAT_EINVAL, "ZeRO stage %d does not exist; use 0, 1, 2 or 3",
                         zero);
  if (dp < 1 || tp < 1)
    return remat__errorf(err, REMAT_EINVAL, "%s %lld: the degree must be 1 or more",
                         dp < 1 ? "data parallelism" : "tensor parallelism",
                         (long long)(dp < 1 ? dp : tp));
  if (num_params > UINT64_MAX / 32)
    return remat__errorf(err, REMAT_EINVAL, "%llu parameters: too many to count in bytes",
                         (unsigned long long)num_params);
  uint64_t n = (num_params + (uint64_t)tp - 1) / (uint64_t)tp, d = (uint64_t)dp, sum = 0;
  uint64_t per[REMAT_STATE_PART_COUNT] = {
      [REMAT_STATE_WEIGHTS] = p->weight, [REMAT_STATE_GRADS] = p->grad,
      [REMAT_STATE_OPTIMIZER] = o->trains ? p->master + o->moments : 0};
  for (int k = 0; k < REMAT_STATE_PART_COUNT; k++) {
    uint64_t b = per[k] * n;
    if (remat_zero_shards(zero, k)) b = (b + d - 1) / d;
    if (parts) parts[k] = b;
    sum += b;
  }
  *total = sum;
  return 0;
}
