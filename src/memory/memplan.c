/* memplan.c: the memory model and the arena of a stage. The model's terms
 * (remat_memory_model) come from the layout tables; a stage's bytes are the
 * formula in include/remat/memory.h over them; the arena is laid out region
 * by region from the same terms, so its size is that formula's figure by
 * construction (and checked). Regions in order: parameters, gradients, AdamW
 * m and v; the in-flight slots; the residual gradient; the transient
 * workspace. Nothing is shared between regions; inside the workspace a
 * block's backward and the head's take turns, which is where the max in the
 * formula comes from. A block's slot holds its input and, by policy, all its
 * internals (keep), the stored group of them (middle: the cheap group lives
 * in the workspace while the block's backward runs) or nothing more
 * (recompute: all of them live in the workspace). A block may recompute in
 * full in only the last few slots (remat_stage.full_slots): each slot is
 * laid out by its own blocks' policies, so the slots differ in size, and
 * the formula subtracts what the smaller ones do not store.
 *
 * The units and the replica bytes (units.c) are below this file: it calls
 * them, they call nothing here. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "memory/memplan.h"
#include "products/products.h"

int remat_precision_available(int precision, const char **why) {
  if (precision != REMAT_PRECISION_BF16) {
    if (why) *why = "fp32 runs on every CPU";
    return precision == REMAT_PRECISION_FP32;
  }
  remat__cpu_bf16 cpu = remat__cpu_bf16_get();
  if (why) *why = cpu.reason;
  return cpu.avx512_bf16;
}

void remat_policy_first_n(uint8_t *policy, int64_t L, int64_t n) {
  for (int64_t l = 0; l < L; l++) policy[l] = l < n ? REMAT_RECOMPUTE : REMAT_KEEP;
}

const char *remat_policy_name(int policy) {
  static const char *const names[REMAT_POLICY_COUNT] = {
      [REMAT_KEEP] = "keep", [REMAT_RECOMPUTE] = "full", [REMAT_MIDDLE] = "middle"};
  return policy >= 0 && policy < REMAT_POLICY_COUNT ? names[policy] : "?";
}

/* Parameter floats of one layer of each kind. */
static void layer_params(const remat_config *cfg, size_t out[REMAT_LAYER_KIND_COUNT]) {
  int64_t L = cfg->num_layers;
  out[REMAT_LAYER_EMBEDDING] = remat_unit_floats(cfg, 0);
  out[REMAT_LAYER_BLOCK] = remat_block_param_count(cfg);
  /* a head on its own stage holds its copy of the tied matrix (none when
   * the head has its own) */
  out[REMAT_LAYER_HEAD] = remat_unit_floats(cfg, L + 2) + remat_unit_floats(cfg, L + 1);
}

int remat__check_shape(const remat_config *cfg, int64_t B, int64_t T, remat_error *err) {
  int rc = remat_config_check(cfg, err);
  if (rc) return rc;
  if (B < 1 || T < 1 || B > (1 << 20))
    return remat__errorf(err, REMAT_EINVAL,
                         "batch B=%lld and sequence T=%lld must be positive (B at most 2^20)",
                         (long long)B, (long long)T);
  if (T > cfg->max_seq_len)
    return remat__errorf(err, REMAT_ESHAPE,
                         "sequence length T=%lld exceeds the model's maximum of %lld",
                         (long long)T, (long long)cfg->max_seq_len);
  if (T % remat__sp(cfg))
    return remat__errorf(err, REMAT_ESHAPE,
                         "sequence parallelism splits each sequence among the %lld tensor "
                         "ranks: T=%lld must be a multiple of %lld",
                         (long long)remat__sp(cfg), (long long)T, (long long)remat__sp(cfg));
  /* Guard the largest products: the B*NH*T*T attention scores per block
   * (never stored, but counted as dropout indices), B*T*Vp logits, and the
   * residual stream of all blocks. */
  double att = (double)B * (double)cfg->num_heads * (double)T * (double)T * 4.0;
  double logits = (double)B * (double)T * (double)cfg->padded_vocab_size * 4.0;
  double resid = (double)(cfg->num_layers + 1) * (double)B * (double)T *
                 (double)cfg->channels * 4.0;
  if (att * (double)cfg->num_layers > 1e15 || logits > 1e15 || resid > 1e15)
    return remat__errorf(err, REMAT_ERANGE,
                         "batch %lld x %lld tokens with this model needs more than a petabyte",
                         (long long)B, (long long)T);
  return 0;
}

int remat__kernel_ws_get(remat__kernel_ws *ws, const remat__backend_sizes *sz,
                         const remat_config *cfg, int64_t B, int64_t T, remat_error *err) {
  memset(ws, 0, sizeof *ws);
  int rc = remat__check_shape(cfg, B, T, err);
  if (rc) return rc;
  if (sz->align == 0 || REMAT_ALIGN % sz->align != 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "the backend needs its buffers aligned to %zu bytes and the arena "
                         "is laid out on %d",
                         sz->align, REMAT_ALIGN);
  /* a tensor rank's heads and vocabulary */
  int64_t tp = remat__tp(cfg);
  sz->workspace(ws, B, T, cfg->channels, cfg->num_heads / tp, cfg->padded_vocab_size / tp);
  ws->precision = (int)cfg->precision;
  ws->tp = tp;
  ws->sp = remat__sp(cfg);
  ws->product_scratch = 0;
  if (ws->precision != REMAT_PRECISION_BF16) return 0;
  remat__mm_shape s[REMAT__PRODUCTS];
  int ns = remat__product_shapes(cfg, B, T, s);
  rc = sz->product_scratch(s, ns, &ws->product_scratch, err);
  /* the attention's tiles borrow the scratchpad while no product runs */
  ws->attention_work =
      sz->attention_work ? sz->attention_work(cfg->channels / tp, cfg->num_heads / tp) : 0;
  if (ws->attention_work > ws->product_scratch) ws->product_scratch = ws->attention_work;
  ws->product_scratch = remat__align(ws->product_scratch);
  return rc;
}

/* The sizes the public functions plan with: the CPU backend's, or those
 * of the backend chosen for the process (remat__memory_plan_for). */
static const remat__backend_sizes *planning_sizes = &remat__cpu_sizes;

void remat__memory_plan_for(const remat__backend_sizes *sz) {
  planning_sizes = sz ? sz : &remat__cpu_sizes;
}

int64_t remat_head_chunk_auto(const remat_config *cfg, int64_t B, int64_t T) {
  int64_t N = B * T, elem = cfg->precision == REMAT_PRECISION_BF16 ? 2 : 4;
  if (N < 1 || cfg->padded_vocab_size < 1) return 0;
  int64_t k = N * cfg->channels * 4 / (cfg->padded_vocab_size * elem) / 64 * 64;
  if (k < 256) k = 256;
  return k >= N ? 0 : k;
}

int remat_memory_model_get(const remat_config *cfg, int64_t B, int64_t T, remat_memory_model *mm,
                           remat_error *err) {
  remat__kernel_ws ws;
  int rc = remat__kernel_ws_get(&ws, planning_sizes, cfg, B, T, err);
  return rc ? rc : remat__memory_model_get_ws(cfg, B, T, &ws, mm, err);
}

int remat__memory_model_get_ws(const remat_config *cfg, int64_t B, int64_t T,
                               const remat__kernel_ws *ws, remat_memory_model *mm,
                               remat_error *err) {
  memset(mm, 0, sizeof *mm);
  int rc = remat__check_shape(cfg, B, T, err);
  if (rc) return rc;
  int64_t C = cfg->channels;
  size_t BT = (size_t)B * (size_t)T;
  mm->B = B;
  mm->T = T;
  mm->tokens_bytes = remat__align(BT * sizeof(int32_t));
  /* a block's input: under sequence parallelism, a tensor rank's T/t tokens */
  mm->residual_bytes = remat__align(BT / (size_t)remat__sp(cfg) * (size_t)C * sizeof(float));
  if (ws->precision != cfg->precision)
    return remat__errorf(err, REMAT_EINVAL, "the kernels' precision is not the config's");
  remat__layer_sizes ls;
  remat__layer_sizes_get(&ls, cfg, B, T, ws);
  mm->block_stored_bytes = ls.stored;
  mm->block_cheap_bytes = ls.cheap;
  mm->block_internal_bytes = mm->block_stored_bytes + mm->block_cheap_bytes;
  mm->block_dgrad_bytes = ls.dgrad;
  mm->block_wrec_bytes = ls.wrec;
  mm->head_bytes = ls.head;
  size_t rows = cfg->head_chunk > 0 && (size_t)cfg->head_chunk < BT ? (size_t)cfg->head_chunk : BT;
  /* a tensor rank's share of the vocabulary */
  mm->logits_bytes = remat__align(rows * (size_t)(cfg->padded_vocab_size / remat__tp(cfg)) *
                                  remat__act_elem(ws));
  mm->stage_bytes = mm->residual_bytes;

  size_t np[REMAT_LAYER_KIND_COUNT];
  layer_params(cfg, np);
  remat__bf16_copy_bytes(cfg, &mm->block_bf16_bytes, &mm->head_bf16_bytes);
  for (int k = 0; k < REMAT_LAYER_KIND_COUNT; k++)
    mm->layer[k].state = 4 * remat__align(np[k] * sizeof(float));
  mm->layer[REMAT_LAYER_BLOCK].state += mm->block_bf16_bytes;
  mm->layer[REMAT_LAYER_HEAD].state += mm->head_bf16_bytes;
  mm->tied_grad_bytes =
      remat__align(remat_unit_floats(cfg, cfg->num_layers + 2) * sizeof(float));
  mm->head_joint_state =
      4 * remat__align(remat_unit_floats(cfg, cfg->num_layers + 1) * sizeof(float)) +
      mm->tied_grad_bytes + mm->head_bf16_bytes;
  mm->boundary_bytes = mm->residual_bytes;

  remat_layer_bytes *e = &mm->layer[REMAT_LAYER_EMBEDDING];
  e->kept = e->ckpt = e->mid = mm->tokens_bytes; /* the input ids, for its backward */
  /* a tensor rank's embedding, after its gradient buffer: in the forward
   * the sum's scratch (2 B T C / t floats), or under sequence parallelism
   * its whole part and a rank's rows of the sum; in the backward the
   * gathered gradient (B T C floats) */
  size_t BTC = BT * (size_t)C, tp = (size_t)remat__tp(cfg);
  if (tp > 1)
    e->work = remat__sp(cfg) > 1 ? remat__align(BTC * 4) + remat__align(BTC / tp * 4)
                                 : remat__align(2 * ((BTC + tp - 1) / tp) * 4);

  remat_layer_bytes *b = &mm->layer[REMAT_LAYER_BLOCK];
  b->ckpt = mm->residual_bytes;
  b->kept = mm->residual_bytes + mm->block_internal_bytes;
  b->mid = mm->residual_bytes + mm->block_stored_bytes;
  b->work = mm->block_dgrad_bytes;
  b->scratch = mm->block_dgrad_bytes + mm->block_internal_bytes;
  b->mid_scratch = mm->block_dgrad_bytes + mm->block_cheap_bytes;

  remat_layer_bytes *h = &mm->layer[REMAT_LAYER_HEAD];
  h->kept = h->ckpt = h->mid = mm->residual_bytes + mm->tokens_bytes; /* its input, the targets */
  /* the workspace of the head's forward and backward; on a stage with the
   * embedding too, the tied embedding backward uses it after them (CPU:
   * B*T*C + V + B*T words, never more than the head's B*T*(2C + Vp)) */
  h->work = mm->head_bytes + mm->logits_bytes;
  if (ws->encoder_tied > h->work) h->work = remat__align(ws->encoder_tied);

  /* gradient buffers: one unit each; the head's holds the tied gradient
   * unit, then its own */
  int64_t L = cfg->num_layers;
  e->grad = remat__align(remat_unit_floats(cfg, 0) * sizeof(float));
  b->grad = remat__align(remat_unit_floats(cfg, 1) * sizeof(float));
  h->grad = remat__align(remat_unit_floats(cfg, L + 2) * sizeof(float)) +
            remat__align(remat_unit_floats(cfg, L + 1) * sizeof(float));
  return 0;
}

static int check_stage(const remat_config *cfg, const remat_stage *st, remat_error *err) {
  int64_t L = cfg->num_layers;
  if (st->first_block < 0 || st->num_blocks < 0 || st->first_block > L ||
      st->num_blocks > L - st->first_block)
    return remat__errorf(err, REMAT_EINVAL,
                         "a stage of blocks %lld..%lld does not lie within the model's %lld "
                         "blocks",
                         (long long)st->first_block,
                         (long long)(st->first_block + st->num_blocks - 1), (long long)L);
  if (st->num_blocks == 0 && !st->has_embedding && !st->has_head)
    return remat__errorf(err, REMAT_EINVAL, "a stage must hold at least one layer");
  if (st->inflight < 1 || st->inflight > (1 << 20))
    return remat__errorf(err, REMAT_EINVAL,
                         "a stage holds %lld micro-batches in flight; it must be 1 to 2^20",
                         (long long)st->inflight);
  /* a W record outlives its slot: a stage may defer more Ws than it holds
   * micro-batches in flight (zb-h1's last stage) */
  if (st->wdeferred < 0 || st->wdeferred > (1 << 20))
    return remat__errorf(err, REMAT_EINVAL,
                         "a stage defers %lld weight gradients; it must be 0 to 2^20",
                         (long long)st->wdeferred);
  for (int64_t i = 0; st->policy && i < st->num_blocks; i++)
    if (st->policy[i] >= REMAT_POLICY_COUNT)
      return remat__errorf(err, REMAT_EINVAL, "block %lld has unknown policy %u",
                           (long long)(st->first_block + i), st->policy[i]);
  for (int64_t i = 0; st->full_slots && i < st->num_blocks; i++)
    if (st->full_slots[i] > st->inflight)
      return remat__errorf(err, REMAT_EINVAL,
                           "block %lld recomputes in full in %u slots but its stage holds "
                           "%lld micro-batch%s in flight; give it at most %lld",
                           (long long)(st->first_block + i), st->full_slots[i],
                           (long long)st->inflight, st->inflight == 1 ? "" : "es",
                           (long long)st->inflight);
  if (st->replicas > 1) {
    if (st->replica < 0 || st->replica >= st->replicas)
      return remat__errorf(err, REMAT_EINVAL, "replica %lld of %lld does not exist",
                           (long long)st->replica, (long long)st->replicas);
    if (!st->accumulate)
      return remat__errorf(err, REMAT_EINVAL, "a replica computes its gradients apart");
  }
  if ((st->work_borrowed || st->work_min) && st->replicas > 1)
    return remat__errorf(err, REMAT_EINVAL, "a replica's chunks do not share a workspace");
  if (st->work_min > ((size_t)1 << 50))
    return remat__errorf(err, REMAT_ERANGE, "a workspace of %zu bytes is above 2^50",
                         st->work_min);
  return 0;
}

/* Block i's policy (slot 0's) and in how many of the last slots it
 * recomputes in full instead, normalised: 0 under policy full, and a
 * block that recomputes in full in every slot takes policy full. */
static int64_t block_policy(const remat_stage *st, int64_t i, int *policy) {
  int p = st->policy ? st->policy[i] : REMAT_KEEP;
  int64_t f = st->full_slots ? st->full_slots[i] : 0;
  if (f >= st->inflight) p = REMAT_RECOMPUTE;
  *policy = p;
  return p == REMAT_RECOMPUTE ? 0 : f;
}

/* What a slot stores of a block under policy p, and the transient bytes
 * of its backward (with its gradient buffer, grad). */
static size_t block_stored(const remat_layer_bytes *b, int p) {
  return p == REMAT_RECOMPUTE ? b->ckpt : p == REMAT_MIDDLE ? b->mid : b->kept;
}
static size_t block_transient(const remat_layer_bytes *b, int p) {
  return (p == REMAT_RECOMPUTE ? b->scratch : p == REMAT_MIDDLE ? b->mid_scratch : b->work) +
         b->grad;
}

int remat_stage_bytes_get(const remat_config *cfg, const remat_memory_model *mm,
                          const remat_stage *st, remat_stage_bytes *out, remat_error *err) {
  memset(out, 0, sizeof *out);
  int rc = check_stage(cfg, st, err);
  if (rc) return rc;
  remat_layer_bytes e = mm->layer[REMAT_LAYER_EMBEDDING], b = mm->layer[REMAT_LAYER_BLOCK],
                    h = mm->layer[REMAT_LAYER_HEAD];
  /* one micro-batch in one process: the head's tied gradient goes straight
   * into the embedding's (remat__encoder_backward_tied), nothing apart */
  size_t head_joint = mm->head_joint_state - (st->accumulate ? 0 : mm->tied_grad_bytes);
  if (st->replicas > 1) { /* a replica's state and gradient buffers */
    remat_replica_bytes rb;
    if ((rc = remat_replica_stage_bytes_get(cfg, st, &rb, err))) return rc;
    e.state = rb.state[REMAT_LAYER_EMBEDDING];
    b.state = rb.state[REMAT_LAYER_BLOCK];
    h.state = rb.head_alone_state;
    head_joint = rb.head_joint_state;
    out->comm = rb.comm; /* its gradient buffers among them, outside the workspace */
  }
  if (!st->accumulate || st->replicas > 1) e.grad = b.grad = h.grad = 0;
  /* Sizes are bounded by remat__check_shape (well under 2^50 per term), so
   * these sums cannot overflow for any stage the model allows. */
  size_t state = 0, slot = 0, transient = 0, kept = 0, saved = 0;
  if (st->has_embedding) {
    state += e.state;
    slot += e.kept;
    if (e.work + e.grad > transient) transient = e.work + e.grad;
  }
  for (int64_t i = 0; i < st->num_blocks; i++) {
    int p;
    int64_t f = block_policy(st, i, &p);
    state += b.state;
    slot += block_stored(&b, p);
    /* its last f slots store its input alone */
    saved += (size_t)f * (block_stored(&b, p) - b.ckpt);
    kept += p == REMAT_KEEP; /* in slot 0, so in any slot */
    size_t t = block_transient(&b, p);
    if (f && block_transient(&b, REMAT_RECOMPUTE) > t) t = block_transient(&b, REMAT_RECOMPUTE);
    if (t > transient) transient = t;
  }
  if (st->has_head) {
    state += st->has_embedding || remat__stage_tied_borrowed(cfg, st) ? head_joint : h.state;
    slot += h.kept;
    if (h.work + h.grad > transient) transient = h.work + h.grad;
  }
  out->state = state;
  /* under a split backward a slot lives from F to B, a kept block's W
   * record from B to W (remat_stage.wdeferred) */
  out->activations = (size_t)st->inflight * slot - saved +
                     (size_t)st->wdeferred * kept * mm->block_wrec_bytes;
  if (transient < st->work_min) transient = st->work_min;
  out->workspace = mm->stage_bytes + (st->has_head ? 0 : mm->boundary_bytes) +
                   (st->work_borrowed ? 0 : transient);
  out->total = out->state + out->activations + out->workspace + out->comm;
  return 0;
}

static int build_stage(remat_memplan *mp, const remat_config *cfg, int64_t B, int64_t T,
                       const remat_stage *st, remat_error *err) {
  remat__kernel_ws ws;
  int rc = remat__kernel_ws_get(&ws, planning_sizes, cfg, B, T, err);
  return rc ? rc : remat__memplan_build_stage_ws(mp, cfg, B, T, st, &ws, err);
}

/* The plan's header and its per-block tables. */
static int memplan_start(remat_memplan *mp, const remat_config *cfg, int64_t B, int64_t T,
                         const remat_stage *st, remat_error *err) {
  int64_t nb = st->num_blocks;
  mp->cfg = *cfg;
  mp->B = B;
  mp->T = T;
  mp->first_block = st->first_block;
  mp->num_blocks = nb;
  mp->inflight = st->inflight;
  mp->wdeferred = st->wdeferred;
  mp->has_embedding = st->has_embedding;
  mp->has_head = st->has_head;
  size_t nb1 = (size_t)(nb > 0 ? nb : 1);
  mp->full_slots = remat__calloc(nb1, 1);
  if (!mp->full_slots) goto nomem;
  int64_t f = 0;
  for (int64_t i = 0; i < nb; i++) {
    int p;
    mp->full_slots[i] = (uint8_t)block_policy(st, i, &p);
    if (mp->full_slots[i] > f) f = mp->full_slots[i];
  }
  size_t nl = (size_t)f + 1;
  mp->num_layouts = (int64_t)nl;
  mp->policy = remat__malloc(nl * nb1);
  mp->block_input_offset = remat__malloc(nl * nb1 * sizeof(size_t));
  mp->block_internal_offset = remat__malloc(nl * nb1 * sizeof(size_t));
  mp->layout_bytes = remat__malloc(4 * nl * sizeof(size_t));
  if (!mp->policy || !mp->block_input_offset || !mp->block_internal_offset || !mp->layout_bytes)
    goto nomem;
  mp->layout_final_offset = mp->layout_bytes + nl;
  mp->layout_targets_offset = mp->layout_bytes + 2 * nl;
  mp->layout_start = mp->layout_bytes + 3 * nl;
  return 0;
nomem:
  return remat__errorf(err, REMAT_ENOMEM, "out of memory planning %lld blocks", (long long)nb);
}

/* Layout t of a slot: what one micro-batch in flight stores, layer by
 * layer, with the blocks whose full_slots reach f + 1 - t recomputed in
 * full (none in layout 0). */
static void lay_out_slot(remat_memplan *mp, const remat_stage *st, int64_t t) {
  const remat_memory_model *mm = &mp->mm;
  int64_t nb = st->num_blocks, reach = mp->num_layouts - t;
  uint8_t *policy = mp->policy + t * nb;
  size_t *input = mp->block_input_offset + t * nb, *internal = mp->block_internal_offset + t * nb;
  size_t off = 0;
  mp->inputs_offset = mp->targets_offset = mp->final_offset = REMAT_NO_OFFSET;
  if (st->has_embedding) {
    mp->inputs_offset = off;
    off += mm->tokens_bytes;
  }
  for (int64_t i = 0; i < nb; i++) {
    int p;
    block_policy(st, i, &p);
    if (t && mp->full_slots[i] >= reach) p = REMAT_RECOMPUTE;
    policy[i] = (uint8_t)p;
    input[i] = off;
    off += mm->residual_bytes;
    internal[i] = REMAT_NO_OFFSET;
    if (p == REMAT_KEEP) {
      internal[i] = off;
      off += mm->block_internal_bytes;
    } else if (p == REMAT_MIDDLE) {
      internal[i] = off;
      off += mm->block_stored_bytes;
    }
    if (t == 0) {
      mp->num_kept += p == REMAT_KEEP;
      mp->num_middle += p == REMAT_MIDDLE;
      mp->num_recomputed += p == REMAT_RECOMPUTE;
    }
  }
  if (st->has_head) {
    mp->final_offset = off;
    off += mm->residual_bytes;
    mp->targets_offset = off;
    off += mm->tokens_bytes;
  }
  mp->layout_bytes[t] = off;
  mp->layout_final_offset[t] = mp->final_offset;
  mp->layout_targets_offset[t] = mp->targets_offset;
}

/* The slots end to end: n - f of layout 0, then one of each layout t;
 * returns their bytes. Layout 0 is laid out last, so that the plan's
 * fields of a slot (the head's offsets) are its. */
static size_t lay_out_slots(remat_memplan *mp, const remat_stage *st) {
  int64_t f = mp->num_layouts - 1;
  for (int64_t t = f; t >= 0; t--) lay_out_slot(mp, st, t);
  mp->slot_bytes = mp->layout_bytes[0];
  size_t at = (size_t)(st->inflight - f) * mp->slot_bytes;
  mp->layout_start[0] = 0;
  for (int64_t t = 1; t <= f; t++) {
    mp->layout_start[t] = at;
    at += mp->layout_bytes[t];
  }
  return at;
}

/* Regions end to end. A stage with both the embedding and the head that
 * accumulates (or is a replica) keeps the head's gradient of the tied
 * matrix apart (TIED_GRAD) and holds one copy of the matrix; a stage
 * without the head sends its output from SEND. A replica's regions are
 * whole or sharded by its ZeRO stage, and its communication buffers come
 * last (REDUCE, whose top buffer every micro-batch's head zeroes whole, at
 * the top). */
static int lay_out_regions(remat_memplan *mp, const remat_config *cfg, const remat_stage *st,
                           size_t slots, remat_error *err) {
  const remat_memory_model *mm = &mp->mm;
  int joint = st->has_head && (st->has_embedding || remat__stage_tied_borrowed(cfg, st));
  size_t tied = joint && st->accumulate ? mm->tied_grad_bytes : 0;
  size_t send = st->has_head ? 0 : mm->boundary_bytes;
  size_t bf16 = (size_t)st->num_blocks * mm->block_bf16_bytes +
                (st->has_head ? mm->head_bf16_bytes : 0);
  if (st->replicas > 1 && st->zero == 3) bf16 = 0; /* its bf16 buffer is communication's */
  size_t state = (mp->bytes.state - tied - bf16) / 4;
  size_t params = state, grads = state, moment = state;
  remat_replica_bytes rb = {0};
  mp->replicas = st->replicas > 1 ? st->replicas : 1;
  mp->replica = st->replicas > 1 ? st->replica : 0;
  mp->zero = st->replicas > 1 ? st->zero : 0;
  if (st->replicas > 1) {
    int rc = remat_replica_stage_bytes_get(cfg, st, &rb, err);
    if (rc) return rc;
    params = rb.params;
    grads = rb.grads;
    moment = rb.moment;
    tied = rb.tied;
    for (int k = 0; k < REMAT_LAYER_KIND_COUNT; k++) mp->grad_bytes[k] = rb.grad[k];
  } else if (st->accumulate) {
    for (int k = 0; k < REMAT_LAYER_KIND_COUNT; k++) mp->grad_bytes[k] = mm->layer[k].grad;
  }
  size_t sizes[REMAT_BUF_COUNT] = {
      [REMAT_BUF_PARAMS] = params,
      [REMAT_BUF_GRADS] = grads,
      [REMAT_BUF_ADAM_M] = moment,
      [REMAT_BUF_ADAM_V] = moment,
      [REMAT_BUF_SLOTS] = st->slots_pooled ? 0 : slots, /* else in its runtime's pool */
      [REMAT_BUF_DRESID] = mm->stage_bytes,
      [REMAT_BUF_WORK] = st->work_borrowed ? 0 : mp->bytes.workspace - mm->stage_bytes - send,
      [REMAT_BUF_TIED_GRAD] = tied,
      [REMAT_BUF_SEND] = send,
      [REMAT_BUF_GATHER] = rb.gather,
      [REMAT_BUF_NORM] = rb.norm,
      [REMAT_BUF_RECV] = rb.recv,
      [REMAT_BUF_REDUCE] = rb.reduce,
      [REMAT_BUF_WREC] = st->slots_pooled ? 0
                                          : (size_t)st->wdeferred * (size_t)mp->num_kept *
                                                mm->block_wrec_bytes,
      [REMAT_BUF_PARAMS_BF16] = bf16 + rb.gather_bf16,
  };
  size_t at = 0;
  for (int i = 0; i < REMAT_BUF_COUNT; i++) {
    mp->buf[i].offset = at;
    mp->buf[i].bytes = sizes[i];
    at += sizes[i];
  }
  mp->persistent_bytes = params + grads + 2 * moment + tied + bf16; /* not gather_bf16 */
  mp->peak_bytes = at;
  /* The layout and the formula are one model: they cannot differ. */
  size_t pooled = st->slots_pooled ? slots + (size_t)st->wdeferred * (size_t)mp->num_kept *
                                               mm->block_wrec_bytes
                                    : 0;
  REMAT_ASSERT(mp->bytes.state == mp->persistent_bytes &&
               mp->bytes.activations == sizes[REMAT_BUF_SLOTS] + sizes[REMAT_BUF_WREC] + pooled &&
               mp->bytes.comm == rb.comm);
  REMAT_ASSERT(mp->peak_bytes + pooled == mp->bytes.total);
  return 0;
}

int remat__memplan_build_stage_ws(remat_memplan *mp, const remat_config *cfg, int64_t B,
                                  int64_t T, const remat_stage *st, const remat__kernel_ws *ws,
                                  remat_error *err) {
  memset(mp, 0, sizeof *mp);
  int rc = remat__memory_model_get_ws(cfg, B, T, ws, &mp->mm, err);
  if (!rc) rc = remat_stage_bytes_get(cfg, &mp->mm, st, &mp->bytes, err);
  if (rc) return rc;
  if ((rc = memplan_start(mp, cfg, B, T, st, err))) goto fail;
  size_t slots = lay_out_slots(mp, st);
  if ((rc = lay_out_regions(mp, cfg, st, slots, err))) goto fail;
  return 0;
fail:
  remat__memplan_free(mp);
  return rc;
}

int remat_memplan_create_stage(remat_memplan **out, const remat_config *cfg, int64_t B,
                               int64_t T, const remat_stage *st, remat_error *err) {
  *out = NULL;
  remat_memplan *mp = remat__calloc(1, sizeof *mp);
  if (!mp) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = build_stage(mp, cfg, B, T, st, err);
  if (rc) {
    remat__free(mp);
    return rc;
  }
  *out = mp;
  return 0;
}

int remat_memplan_create(remat_memplan **out, const remat_config *cfg, int64_t B, int64_t T,
                         const uint8_t *policy, remat_error *err) {
  remat_stage st = remat_stage_whole(cfg, policy);
  return remat_memplan_create_stage(out, cfg, B, T, &st, err);
}

void remat__memplan_free(remat_memplan *mp) {
  remat__free(mp->full_slots);
  remat__free(mp->policy);
  remat__free(mp->block_input_offset);
  remat__free(mp->block_internal_offset);
  remat__free(mp->layout_bytes);
  mp->full_slots = mp->policy = NULL;
  mp->block_input_offset = mp->block_internal_offset = mp->layout_bytes = NULL;
  mp->layout_final_offset = mp->layout_targets_offset = mp->layout_start = NULL;
}

void remat_memplan_destroy(remat_memplan *mp) {
  if (!mp) return;
  remat__memplan_free(mp);
  remat__free(mp);
}

size_t remat_memplan_peak_bytes(const remat_memplan *mp) { return mp->peak_bytes; }
size_t remat_memplan_persistent_bytes(const remat_memplan *mp) { return mp->persistent_bytes; }
size_t remat_memplan_slot_bytes(const remat_memplan *mp) { return mp->slot_bytes; }

size_t remat_memplan_record_bytes(const remat_memplan *mp) {
  return mp->wdeferred ? (size_t)mp->num_kept * mp->mm.block_wrec_bytes : 0;
}

remat__slot_layout remat__memplan_slot(const remat_memplan *mp, int64_t slot) {
  int64_t n = mp->inflight, f = mp->num_layouts - 1, nb = mp->num_blocks;
  REMAT_ASSERT(slot >= 0 && slot < n);
  int64_t t = slot < n - f ? 0 : slot - (n - f) + 1;
  size_t at = t ? mp->layout_start[t] : (size_t)slot * mp->slot_bytes;
  return (remat__slot_layout){.offset = mp->buf[REMAT_BUF_SLOTS].offset + at,
                              .bytes = mp->layout_bytes[t],
                              .policy = mp->policy + t * nb,
                              .block_input_offset = mp->block_input_offset + t * nb,
                              .block_internal_offset = mp->block_internal_offset + t * nb,
                              .inputs_offset = mp->inputs_offset,
                              .targets_offset = mp->layout_targets_offset[t],
                              .final_offset = mp->layout_final_offset[t]};
}

remat_membuf remat_memplan_slot(const remat_memplan *mp, int64_t slot) {
  remat__slot_layout s = remat__memplan_slot(mp, slot);
  return (remat_membuf){.bytes = s.bytes, .offset = s.offset};
}

const uint8_t *remat_memplan_slot_policy(const remat_memplan *mp, int64_t slot) {
  return remat__memplan_slot(mp, slot).policy;
}

const uint8_t *remat_memplan_full_slots(const remat_memplan *mp) { return mp->full_slots; }
remat_stage_bytes remat_memplan_bytes(const remat_memplan *mp) { return mp->bytes; }
remat_membuf remat_memplan_buf(const remat_memplan *mp, int buf) {
  REMAT_ASSERT(buf >= 0 && buf < REMAT_BUF_COUNT);
  return mp->buf[buf];
}
size_t remat_memplan_grad_bytes(const remat_memplan *mp, int kind) {
  REMAT_ASSERT(kind >= 0 && kind < REMAT_LAYER_KIND_COUNT);
  return mp->grad_bytes[kind];
}
int64_t remat_memplan_num_blocks(const remat_memplan *mp) { return mp->num_blocks; }
const uint8_t *remat_memplan_policy(const remat_memplan *mp) { return mp->policy; }
int64_t remat_memplan_num_recomputed(const remat_memplan *mp) { return mp->num_recomputed; }
int64_t remat_memplan_num_middle(const remat_memplan *mp) { return mp->num_middle; }

