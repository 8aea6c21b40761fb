/* replicas.c: a trainer's step as one of D data-parallel replicas over MPI,
 * under ZeRO stage 0 to 3 (include/remat/parallel.h says what each does).
 *
 * The model asks for a gradient buffer as each layer's backward begins
 * (remat__layer_ops.grad_buf) and hands it over when it ends (.grads): D
 * shards of each of the layer's units, padding zero. One MPI_Ialltoall
 * sends shard q to replica q and the backward goes on with the next layer
 * while it travels; the model calls .progress between its kernels, where
 * MPI_Test moves it on (Open MPI advances a collective only inside MPI
 * calls). One layer's pieces are in flight at a time: before the next
 * layer's are posted, the owner waits for them and adds the D pieces, in
 * replica order, to its running sum, element by element: acc = ((acc +
 * c_0) + c_1) + ... With acc zero at a step's start and c_0 computed from
 * zero, this is the sum one process forms over the same micro-batches
 * (remat/model.h), bit for bit, whenever the pieces arrive. The gradient
 * buffer of the layer in flight stays untouched while the next layer
 * computes into another: the embedding and the head share one, and
 * consecutive blocks take the other two in turn. Under ZeRO 3 the model
 * asks for a layer's parameters (remat__layer_ops.params), which one
 * MPI_Iallgather of the shards rebuilds in a slot of the gather buffer; the
 * next unit's is posted before waiting for this one, when its slot is free
 * (see plan_gathers), so that it travels while this unit computes.
 *
 * The trainer's model may be one stage of a pipeline (a P x D grid, see
 * grid.c): then everything here runs over that stage's units
 * (remat_stage_units) among the D replicas of the stage, the pipeline's
 * schedule drives the micro-batches, and the spans go to its trace.
 *
 * Communication is timed per collective from its post to the return of the
 * MPI call that saw it complete (its communication time), and every MPI
 * call it took on this rank, posting, testing and waiting (exposed time:
 * the rank was not computing); a blocking collective is all exposed.
 *
 * Every buffer is a region of the trainer's arena: the layers' gradients
 * in REDUCE, the received pieces in RECV, gathered parameters in GATHER,
 * every replica's chunk sums in NORM; REDUCE also packs a replica's shards
 * for the all-gathers between steps. */
#include <limits.h>
#include <string.h>

#include "base/base.h"
#include "model/model_runtime.h"
#include "parallel/replicas_internal.h"

/* ----------------------------------------------------- between steps */

/* Every replica's part of the stage's units of a whole buffer (the
 * gradients under ZeRO 0, the parameters under 1 and 2) to every replica:
 * each packs its part in REDUCE (free between steps), one MPI_Allgather per
 * unit, each unpacks. */
static int allgather_units(remat_replicas *rp, int which, const char *what) {
  const remat__backend *be = remat__model_backend(rp->m);
  float *pack = rp->pack;
  for (int64_t x = 0; x < rp->nu && !rp->rc; x++) {
    int64_t u = rp->units[x];
    size_t s = remat_unit_shard(rp->cfg, u, rp->D), first, count, run;
    REMAT_ASSERT(s * sizeof(float) <= rp->pack_bytes);
    remat_unit_owned(rp->cfg, u, rp->D, rp->r, &first, &count);
    for (size_t i = first; i < first + count; i += run) {
      const float *src = remat__model_unit_at(rp->m, which, u, i, &run);
      if (run > first + count - i) run = first + count - i;
      be->copy(pack + (i - first), src, run * sizeof(float));
    }
    be->clear(pack + count, (s - count) * sizeof(float));
    double t = remat__now();
    remat__window send, recv;
    int mrc = MPI_Allgather(
        remat__window_open(rp->m, &send, pack, s * sizeof(float), REMAT_MAP_READ), (int)s,
        MPI_FLOAT,
        remat__window_open(rp->m, &recv, rp->recv, (size_t)rp->D * s * sizeof(float),
                           REMAT_MAP_WRITE),
        (int)s, MPI_FLOAT, rp->d->comm);
    remat__window_close(rp->m, &recv);
    remat__window_close(rp->m, &send);
    if (remat__rp_blocking(rp, t, mrc, remat__rp_piece_bytes(rp, s, sizeof(float)),
                           REMAT__EV_GATHER, what))
      break;
    for (int64_t q = 0; q < rp->D; q++) {
      if (q == rp->r) continue;
      remat_unit_owned(rp->cfg, u, rp->D, q, &first, &count);
      for (size_t i = first; i < first + count; i += run) {
        float *dst = remat__model_unit_at(rp->m, which, u, i, &run);
        if (run > first + count - i) run = first + count - i;
        be->copy(dst, rp->recv + (size_t)q * s + (i - first), run * sizeof(float));
      }
    }
  }
  return rp->rc;
}

/* ------------------------------------------------------- the step's ops */

/* The arena's regions, once it exists (the runtime is made before it):
 * REDUCE holds the blocks' gradient buffers (two, or one), then the big
 * one (the embedding's and the head's); GATHER the slots A (rp->big
 * shards), B (a block's, when the stage gathers one ahead) and the head's. */
static void bind(remat_replicas *rp) {
  if (rp->recv) return;
  size_t bytes;
  const remat_memplan *mp = remat_model_memplan(rp->m);
  const remat_stage *st = remat_model_stage(rp->m);
  rp->recv = remat__model_region(rp->m, REMAT_BUF_RECV, &bytes);
  rp->norm = remat__model_region(rp->m, REMAT_BUF_NORM, &bytes);
  REMAT_ASSERT(bytes >= (size_t)rp->D * rp->chunks * sizeof(double));
  rp->pack = remat__model_region(rp->m, REMAT_BUF_REDUCE, &rp->pack_bytes);
  size_t blk = remat_memplan_grad_bytes(mp, REMAT_LAYER_BLOCK);
  int64_t nb = st->num_blocks < 2 ? st->num_blocks : 2;
  char *at = (char *)rp->pack;
  rp->gbuf[GBUF_BLOCK0] = nb >= 1 ? (float *)at : NULL;
  rp->gbuf[GBUF_BLOCK1] = nb >= 2 ? (float *)(at + blk) : NULL;
  rp->gbuf[GBUF_BIG] = st->has_embedding || st->has_head ? (float *)(at + (size_t)nb * blk) : NULL;
  size_t D = (size_t)rp->D, h = st->has_head ? remat_unit_shard(rp->cfg, rp->L + 1, rp->D) : 0;
  int has_b = 0;
  if (rp->zero == 3) {
    float *g = remat__model_region(rp->m, REMAT_BUF_GATHER, &bytes);
    size_t rest = bytes / sizeof(float) - D * (rp->big + h); /* a block's slot, or none */
    has_b = rest > 0;
    rp->gather[SLOT_A] = g;
    rp->gather[SLOT_B] = g + D * rp->big;
    rp->gather[SLOT_HEAD] = rp->gather[SLOT_B] + rest;
  }
  remat__rp_plan_gathers(rp, has_b);
}

/* The arena's live bytes at t: a micro-batch's activations in use or not. */
static void arena_counter(remat_replicas *rp, double t, int in_use) {
  remat__trace_add(rp->trace, (remat__event){.ts = t, .micro = -1, .layer = -1,
                                              .kind = REMAT__EV_ARENA,
                                              .value = rp->fixed_bytes +
                                                       (in_use ? rp->slot_bytes : 0)});
}

/* What a step needs before its first micro-batch (a grid's too). */
static void begin_step(remat_replicas *rp) {
  rp->step = remat_model_step(rp->m);
  memset(&rp->stats, 0, sizeof rp->stats);
  bind(rp);
  rp->next_block = GBUF_BLOCK0;
}

/* After the last micro-batch: the last layer's pieces (the embedding's, or
 * a stage's first block's) land. */
static int end_micro_batches(remat_replicas *rp, remat_error *err) {
  remat__rp_reduce_wait(rp);
  return remat__rp_failed(rp, err);
}

static int run_rounds(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err) {
  remat_replicas *rp = ctx;
  remat_model *m = rp->m;
  const remat_train_opts *o = remat_trainer_opts(tr);
  begin_step(rp);
  int rc;
  for (int64_t j = 0; j < rp->K; j++) {
    /* every replica draws every micro-batch of the round, keeps its own */
    for (int64_t q = 0; q < rp->D; q++) {
      int mine = q == rp->r;
      if ((rc = remat__trainer_next_batch(tr, j * rp->D + q, mine ? remat_model_inputs(m) : NULL,
                                          mine ? remat_model_targets(m) : NULL, err)))
        return rc;
    }
    /* remat_model_forward_backward, in two parts for the trace */
    uint32_t micro = (uint32_t)(j * rp->D + rp->r);
    rp->micro = micro;
    double t = remat__now();
    arena_counter(rp, t, 1);
    remat__model_stage_forward(m, 0, micro, &o->hp);
    double tb = remat__now(), rs0 = remat__model_recompute_seconds(m);
    remat__rp_span(rp, REMAT__EV_FORWARD, REMAT__TRACK_MAIN, t, tb, micro, -1);
    double loss = remat__model_stage_backward(m, 0, micro, remat__trainer_dloss(tr), &o->hp);
    double rs = remat__model_recompute_seconds(m) - rs0;
    /* interleaved with the blocks' backwards; drawn as one span of its total */
    if (rs > 0)
      remat__rp_span(rp, REMAT__EV_RECOMPUTE, REMAT__TRACK_RECOMPUTE, tb, tb + rs, micro, -1);
    arena_counter(rp, remat__now(), 0);
    if ((rc = remat__rp_failed(rp, err))) return rc;
    rp->losses[rp->r * rp->K + j] = (float)(loss / (double)(o->B * o->T));
  }
  if ((rc = end_micro_batches(rp, err))) return rc;
  double t = remat__now();
  int mrc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rp->losses, (int)rp->K, MPI_FLOAT,
                          rp->d->comm);
  if (remat__rp_blocking(rp, t, mrc, remat__rp_piece_bytes(rp, (size_t)rp->K, sizeof(float)),
                         REMAT__EV_REDUCE, "sharing the losses"))
    return remat__rp_failed(rp, err);
  /* in micro-batch order, as one process adds them */
  for (int64_t j = 0; j < rp->K; j++)
    for (int64_t q = 0; q < rp->D; q++) *loss_sum += rp->losses[q * rp->K + j];
  return 0;
}

/* The tied matrix's two sums, added by their owner (embedding + head);
 * under ZeRO 0 every replica then gets the whole gradient. */
static int after_backward(void *ctx, remat_trainer *tr, remat_error *err) {
  (void)tr;
  remat_replicas *rp = ctx;
  remat_model_sum_tied(rp->m);
  if (rp->zero == 0) allgather_units(rp, REMAT_BUF_GRADS, "gathering gradients");
  return remat__rp_failed(rp, err);
}

/* The squared norm: each replica's chunk sums of the units' shards it owns,
 * gathered; every replica adds them chunk by chunk into each unit's sum, in
 * model order, as one process does (a lone head's tied copy is counted on
 * the embedding). */
/* Each layer's sum of squares from its chunks' sums, which their owners
 * compute and all-gather: of all its tensors (part -1), or of a tensor
 * rank's split ones (1) or whole ones (0) (remat__model_grad_chunk_sums_part). */
static int layer_sums(remat_replicas *rp, double *layers, int64_t *n, int part,
                      remat_error *err) {
  const size_t Q = REMAT_SHARD_QUANTUM;
  double *mine = rp->norm + (size_t)rp->r * rp->chunks;
  size_t pos = 0;
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    if (u > rp->L + 1) continue;
    size_t s = remat_unit_shard(rp->cfg, u, rp->D), first, count;
    remat_unit_owned(rp->cfg, u, rp->D, rp->r, &first, &count);
    size_t k = !count    ? 0
               : part < 0 ? (size_t)remat__model_grad_chunk_sums(rp->m, u, first, count, mine + pos)
                          : (size_t)remat__model_grad_chunk_sums_part(rp->m, u, first, count, part,
                                                                      mine + pos);
    if (k < s / Q)
      remat__model_backend(rp->m)->clear(mine + pos + k, (s / Q - k) * sizeof(double));
    pos += s / Q;
  }
  double t = remat__now();
  /* the sums, every replica's, on the host from here on */
  remat__window lent;
  const double *norm = remat__window_open(rp->m, &lent, rp->norm,
                                          (size_t)rp->D * rp->chunks * sizeof(double),
                                          REMAT_MAP_READ | REMAT_MAP_WRITE);
  int mrc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, (void *)norm, (int)rp->chunks,
                          MPI_DOUBLE, rp->d->comm);
  if (remat__rp_blocking(rp, t, mrc, remat__rp_piece_bytes(rp, rp->chunks, sizeof(double)),
                         REMAT__EV_REDUCE, "summing the norm")) {
    remat__window_close(rp->m, &lent);
    return remat__rp_failed(rp, err);
  }
  pos = 0;
  *n = 0;
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    if (u > rp->L + 1) continue;
    size_t per = remat_unit_shard(rp->cfg, u, rp->D) / Q;
    size_t nch = (remat_unit_floats(rp->cfg, u) + Q - 1) / Q;
    double layer = 0.0;
    for (size_t c = 0; c < nch; c++) layer += norm[(c / per) * rp->chunks + pos + c % per];
    layers[(*n)++] = layer;
    pos += per;
  }
  remat__window_close(rp->m, &lent);
  return 0;
}

static int norm_sumsq(void *ctx, remat_trainer *tr, const double *layers, int64_t n,
                      double *total, remat_error *err) {
  (void)tr;
  (void)layers;
  (void)n;
  double part[4096 + 2], sum = 0;
  int64_t k;
  int rc = layer_sums(ctx, part, &k, -1, err);
  if (rc) return rc;
  for (int64_t i = 0; i < k; i++) sum += part[i];
  *total = sum;
  return 0;
}

static int update(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err) {
  remat_replicas *rp = ctx;
  double t = remat__now();
  remat_model_update(rp->m, &remat_trainer_opts(tr)->hp, lr, norm);
  if (rp->zero == 1 || rp->zero == 2)
    allgather_units(rp, REMAT_BUF_PARAMS, "gathering parameters");
  remat__rp_span(rp, REMAT__EV_UPDATE, REMAT__TRACK_MAIN, t, remat__now(), -1, -1);
  return remat__rp_failed(rp, err);
}

/* ------------------------------------------------------------ lifetime */

int remat_replicas_create(remat_replicas **out, remat_dist *d, remat_trainer *tr,
                          remat_error *err) {
  *out = NULL;
  remat_model *m = remat_trainer_model(tr);
  const remat_stage *st = remat_model_stage(m);
  const remat_train_opts *o = remat_trainer_opts(tr);
  const remat_config *cfg = remat_model_config(m);
  if (st->replicas != d->size || st->replica != d->rank)
    return remat__errorf(err, REMAT_EINVAL,
                         "rank %d of %d runs replica %lld of %lld: start one rank per replica",
                         d->rank, d->size, (long long)st->replica, (long long)st->replicas);
  if (d->size < 2)
    return remat__errorf(err, REMAT_EINVAL, "data parallelism needs at least 2 ranks");
  if (o->grad_accum % d->size != 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "a step of %lld micro-batches does not split evenly over %d replicas",
                         (long long)o->grad_accum, d->size);
  int64_t L = cfg->num_layers;
  for (int64_t u = 0; u <= L + 2; u++)
    if (remat_unit_shard(cfg, u, d->size) * (size_t)d->size > (size_t)INT_MAX)
      return remat__errorf(err, REMAT_ERANGE, "a layer's parameters exceed one MPI message");
  remat_replicas *rp = remat__calloc(1, sizeof *rp);
  if (!rp) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  rp->d = d;
  rp->tr = tr;
  rp->m = m;
  rp->cfg = cfg;
  rp->D = d->size;
  rp->r = d->rank;
  rp->K = o->grad_accum / d->size;
  rp->L = L;
  rp->zero = st->zero;
  rp->micro = -1;
  rp->trace = &rp->own;
  size_t n = (size_t)L + 3;
  rp->losses = remat__calloc((size_t)(rp->D * rp->K), sizeof(float));
  rp->units = remat__calloc(3 * n, sizeof *rp->units);
  rp->slot[0] = remat__calloc(4 * n, 1);
  if (!rp->losses || !rp->units || !rp->slot[0]) {
    remat__free(rp->losses);
    remat__free(rp->units);
    remat__free(rp->slot[0]);
    remat__free(rp);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  rp->pass[0] = rp->units + n;
  rp->pass[1] = rp->units + 2 * n;
  rp->slot[1] = rp->slot[0] + n;
  rp->prefetch[0] = rp->slot[0] + 2 * n;
  rp->prefetch[1] = rp->slot[0] + 3 * n;
  rp->nu = remat_stage_units(cfg, st, rp->units);
  remat__rp_build_passes(rp, st);
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    size_t s = remat_unit_shard(cfg, u, rp->D);
    if (u <= L + 1) rp->chunks += s / REMAT_SHARD_QUANTUM;
    if (u != L + 1 && s > rp->big) rp->big = s; /* as remat_replica_stage_bytes_get */
  }
  if (st->has_embedding && st->has_head && remat_unit_shard(cfg, L + 2, rp->D) > rp->big)
    rp->big = remat_unit_shard(cfg, L + 2, rp->D);
  remat__layer_ops lops = {.params = rp->zero == 3 ? remat__rp_on_params : NULL,
                          .grad_buf = remat__rp_on_grad_buf,
                          .grads = remat__rp_on_grads,
                          .progress = remat__rp_on_progress,
                          .ctx = rp};
  remat__model_set_layer_ops(m, &lops);
  remat__trainer_ops ops = {.micro_batches = run_rounds, .after_backward = after_backward,
                           .norm_sumsq = norm_sumsq, .update = update, .ctx = rp};
  remat__trainer_set_ops(tr, &ops);
  *out = rp;
  return 0;
}

void remat_replicas_destroy(remat_replicas *rp) {
  if (!rp) return;
  /* a step that failed may leave collectives in flight; MPI ends with them */
  remat__model_set_layer_ops(rp->m, NULL);
  remat__trainer_set_ops(rp->tr, &(remat__trainer_ops){0});
  remat__trace_free(&rp->own);
  remat__free(rp->slot[0]);
  remat__free(rp->units);
  remat__free(rp->losses);
  remat__free(rp);
}

remat_comm_stats remat_replicas_comm(const remat_replicas *rp) { return rp->stats; }

int remat_replicas_comm_gather(remat_replicas *rp, remat_comm_stats *all, remat_error *err) {
  int mrc = MPI_Gather(&rp->stats, (int)sizeof rp->stats, MPI_BYTE, all, (int)sizeof rp->stats,
                       MPI_BYTE, 0, rp->d->comm);
  return mrc == MPI_SUCCESS ? 0 : remat__mpi_error(err, mrc, "gathering the ranks' communication");
}

double remat_comm_overlap(double seconds, double exposed_seconds) {
  if (!(seconds > 0)) return 0.0;
  double share = 1.0 - exposed_seconds / seconds;
  return share < 0 ? 0.0 : share > 1 ? 1.0 : share;
}

int remat_replicas_trace_start(remat_replicas *rp, int64_t max_steps, remat_error *err) {
  /* per micro-batch: a forward, a recompute, two arena samples, and per
   * layer a backward, a reduce and a wait, per params request a gather and a
   * wait; per step the all-gathers between steps with their waits, and a few
   * more */
  size_t L = (size_t)rp->L, K = (size_t)rp->K;
  size_t per_step = K * (8 * L + 26) + 4 * L + 24;
  int rc = remat__trace_start(&rp->own, rp->d->comm, (size_t)max_steps * per_step + 16, err);
  if (rc) return rc;
  rp->trace = &rp->own;
  /* the arena but its slot (activations) is live from the start */
  const remat_memplan *mp = remat_model_memplan(rp->m);
  rp->fixed_bytes = remat_memplan_peak_bytes(mp) - remat_memplan_buf(mp, REMAT_BUF_SLOTS).bytes;
  rp->slot_bytes = remat_memplan_slot_bytes(mp);
  arena_counter(rp, rp->own.t0, 0);
  return 0;
}

remat__trace *remat__replicas_trace(remat_replicas *rp) { return &rp->own; }

int remat_replicas_trace_write(remat_replicas *rp, const char *path, remat_error *err) {
  return remat__trace_write(&rp->own, rp->d->comm, 1, rp->D, path, err);
}

int remat_replicas_gather_params(remat_replicas *rp, float *full, remat_error *err) {
  const remat_config *cfg = rp->cfg;
  bind(rp);
  if (rp->zero < 3) { /* every replica holds the whole model (or stage) */
    if (rp->r == 0) remat__model_params_to_full(rp->m, full);
    return 0;
  }
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    size_t s = remat_unit_shard(cfg, u, rp->D);
    remat__window send, recv = {0};
    const float *got =
        rp->r == 0 ? remat__window_open(rp->m, &recv, rp->recv, (size_t)rp->D * s * sizeof(float),
                                        REMAT_MAP_READ | REMAT_MAP_WRITE)
                   : NULL;
    int mrc = MPI_Gather(remat__window_open(rp->m, &send,
                                            remat__model_shard(rp->m, REMAT_BUF_PARAMS, u),
                                            s * sizeof(float), REMAT_MAP_READ),
                         (int)s, MPI_FLOAT, (void *)got, (int)s, MPI_FLOAT, 0, rp->d->comm);
    remat__window_close(rp->m, &send);
    if (mrc == MPI_SUCCESS && rp->r == 0) {
      /* got is unit u, replica after replica: its segments go to full */
      remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
      int n = remat_unit_segments(cfg, u, seg);
      for (int k = 0; k < n; k++)
        memcpy(full + seg[k].offset, got + seg[k].at, seg[k].count * sizeof(float));
    }
    remat__window_close(rp->m, &recv);
    if (mrc != MPI_SUCCESS) return remat__mpi_error(err, mrc, "gathering the parameters");
  }
  return 0;
}

/* ZeRO 3: the stage's parameters, whole tensors as a stage without
 * replicas holds them (remat_model_params' order there), on replica 0
 * (*flat, the caller's to free; NULL elsewhere), from every replica's
 * pieces. Every replica calls it; the replicas agree on running out of
 * memory. */
int remat__replicas_gather_stage(remat_replicas *rp, float **flat, remat_error *err) {
  *flat = NULL;
  remat_stage mine = *remat_model_stage(rp->m);
  mine.replicas = mine.replica = 0;
  mine.zero = 0;
  size_t n = remat_param_count(rp->cfg), nf = remat__stage_num_params(rp->cfg, &mine);
  float *whole = rp->r == 0 ? remat__calloc(n, sizeof(float)) : NULL;
  float *f = rp->r == 0 ? remat__malloc(nf * sizeof(float) + 1) : NULL;
  int ok = rp->r != 0 || (whole && f);
  remat_dist_all_ok(rp->d, ok, &ok);
  int rc = ok ? remat_replicas_gather_params(rp, whole, err)
              : remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the parameters");
  if (!rc && f) remat__stage_params_from_full(rp->cfg, &mine, whole, f);
  remat__free(whole);
  if (rc) remat__free(f);
  else *flat = f;
  return rc;
}

uint64_t remat_replicas_step_bytes(const remat_config *cfg, int64_t D, int zero, int64_t K) {
  int64_t L = cfg->num_layers;
  uint64_t f = sizeof(float), d1 = (uint64_t)(D - 1), units = 0, total = 0;
  for (int64_t u = 0; u <= L + 1; u++) units += remat_unit_shard(cfg, u, D);
  uint64_t tied = remat_unit_shard(cfg, L + 2, D);
  uint64_t rs = d1 * (units + tied) * f; /* one micro-batch's reduce-scatter */
  total += (uint64_t)K * rs;
  if (zero <= 2) total += d1 * units * f; /* gradients (0) or parameters (1, 2) gathered */
  if (zero == 3) /* forward: embedding, blocks; backward: embedding, head, blocks */
    total += (uint64_t)K * d1 * f *
             (units - remat_unit_shard(cfg, L + 1, D) + units);
  uint64_t chunks = 0;
  for (int64_t u = 0; u <= L + 1; u++) chunks += remat_unit_shard(cfg, u, D) / REMAT_SHARD_QUANTUM;
  total += d1 * chunks * sizeof(double) + d1 * (uint64_t)K * f; /* norm, losses */
  return total;
}

/* ---------------------------------------------------------- the grid */

void remat__replicas_begin_step(remat_replicas *rp) { begin_step(rp); }

int remat__replicas_after_backward(remat_replicas *rp, remat_trainer *tr, remat_error *err) {
  return after_backward(rp, tr, err);
}

int remat__replicas_layer_sums(remat_replicas *rp, double *layers, int64_t *n,
                               remat_error *err) {
  return layer_sums(rp, layers, n, -1, err);
}

int remat__replicas_layer_sums_part(remat_replicas *rp, int split, double *layers, int64_t *n,
                                    remat_error *err) {
  return layer_sums(rp, layers, n, split, err);
}

int remat__replicas_update(remat_replicas *rp, remat_trainer *tr, float lr, float norm,
                           remat_error *err) {
  return update(rp, tr, lr, norm, err);
}

int remat__replicas_end_micro_batches(remat_replicas *rp, remat_error *err) {
  return end_micro_batches(rp, err);
}

void remat__replicas_trace_into(remat_replicas *rp, remat__trace *t) { rp->trace = t; }
