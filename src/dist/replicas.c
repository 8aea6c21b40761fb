/* replicas.c: a trainer's step as one of D data-parallel replicas over MPI,
 * under ZeRO stage 0 to 3 (include/remat/dist.h says what each does).
 *
 * The model hands over each layer's gradient of its micro-batch as soon as
 * the layer's backward ends (remat_layer_ops.grads): D shards of each of the
 * layer's units, padding zero. One MPI_Alltoall sends shard q to replica q;
 * the owner then adds the D pieces it received, in replica order, to its
 * running sum, element by element: acc = ((acc + c_0) + c_1) + ... With acc
 * zero at a step's start and c_0 computed from zero, this is the sum one
 * process forms over the same micro-batches (remat/model.h), bit for bit.
 * Under ZeRO 3 the model asks for a layer's parameters (remat_layer_ops.
 * params) and one MPI_Allgather of the shards rebuilds the unit in the
 * gather buffer.
 *
 * The trainer's model may be one stage of a pipeline (a P x D grid, see
 * grid.c): then everything here runs over that stage's units
 * (remat_stage_units) among the D replicas of the stage.
 *
 * Every buffer is a region of the trainer's arena: the layer's gradient in
 * the workspace, the received pieces in RECV, gathered parameters in
 * GATHER, every replica's chunk sums in NORM; the workspace also packs a
 * replica's shards for the all-gathers between steps. */
#include <limits.h>
#include <string.h>

#include "base/base.h"
#include "dist/dist_internal.h"

struct remat_replicas {
  remat_dist *d;
  remat_trainer *tr;
  remat_model *m;
  const remat_config *cfg;
  int64_t D, r, K, L;
  int zero;
  int64_t *units, nu;   /* the units the model holds (remat_stage_units) */
  float *recv;          /* RECV: D pieces of a shard */
  float *gather[2];     /* GATHER (ZeRO 3): the embedding or a block; the head */
  double *norm;         /* NORM: D x chunks, every replica's chunk sums */
  size_t chunks;        /* chunk sums per replica (every unit's shard, padding included) */
  float *losses;        /* (D, K) each replica's micro-batch losses */
  int rc;               /* the first failure inside a layer hook */
  remat_error err;
  remat_comm_stats stats;
};

/* Times an MPI call's result and counts its bytes; records a failure. */
static int account(remat_replicas *rp, double t0, int mrc, uint64_t bytes, const char *what) {
  rp->stats.seconds += remat__now() - t0;
  rp->stats.bytes_sent += bytes;
  rp->stats.collectives++;
  if (mrc == MPI_SUCCESS) return 0;
  if (!rp->rc) {
    remat__mpi_error(&rp->err, mrc, what);
    rp->rc = remat__errorf(&rp->err, REMAT_EIO,
                           "replica %lld: %s (did another rank die?)", (long long)rp->r,
                           rp->err.msg);
  }
  return rp->rc;
}

static int failed(remat_replicas *rp, remat_error *err) {
  if (!rp->rc) return 0;
  if (err) *err = rp->err;
  return rp->rc;
}

static uint64_t piece_bytes(const remat_replicas *rp, size_t floats, size_t size) {
  return (uint64_t)(rp->D - 1) * floats * size;
}

/* ------------------------------------------------------- layer hooks */

/* The owner's sum over the pieces received for unit u: its part of the
 * step's gradient (whole buffer or shard) plus each replica's piece, in
 * replica order. */
static void add_pieces(remat_replicas *rp, int64_t u, size_t s) {
  size_t first, count, run;
  remat_unit_owned(rp->cfg, u, rp->D, rp->r, &first, &count);
  int which = u == rp->L + 2 ? REMAT_BUF_TIED_GRAD : REMAT_BUF_GRADS;
  const int64_t D = rp->D;
  for (size_t i = first; i < first + count; i += run) {
    float *acc = remat_model_unit_at(rp->m, which, u, i, &run);
    if (run > first + count - i) run = first + count - i;
    const float *in = rp->recv + (i - first);
#pragma omp parallel for schedule(static)
    for (size_t j = 0; j < run; j++) {
      float a = acc[j];
      for (int64_t q = 0; q < D; q++) a = a + in[(size_t)q * s + j];
      acc[j] = a;
    }
  }
}

static void on_grads(void *ctx, int64_t u, float *buf) {
  remat_replicas *rp = ctx;
  if (rp->rc) return;
  size_t s = remat_unit_shard(rp->cfg, u, rp->D);
  double t = remat__now();
  int mrc = MPI_Alltoall(buf, (int)s, MPI_FLOAT, rp->recv, (int)s, MPI_FLOAT, rp->d->comm);
  if (account(rp, t, mrc, piece_bytes(rp, s, sizeof(float)), "reduce-scattering gradients"))
    return;
  add_pieces(rp, u, s);
}

/* ZeRO 3: unit u rebuilt from every replica's shard. The head needs the
 * tied matrix (the embedding's unit) and its own at once: its own goes to
 * the second buffer. */
static const float *on_params(void *ctx, int64_t u, int phase) {
  (void)phase;
  remat_replicas *rp = ctx;
  float *dst = rp->gather[u == rp->L + 1];
  if (rp->rc) return dst; /* the step is lost; the failure is reported after it */
  size_t s = remat_unit_shard(rp->cfg, u, rp->D);
  const float *mine = remat_model_shard(rp->m, REMAT_BUF_PARAMS, u);
  double t = remat__now();
  int mrc = MPI_Allgather(mine, (int)s, MPI_FLOAT, dst, (int)s, MPI_FLOAT, rp->d->comm);
  account(rp, t, mrc, piece_bytes(rp, s, sizeof(float)), "gathering parameters");
  return dst;
}

/* ----------------------------------------------------- between steps */

/* Every replica's part of units 0..L+1 of a whole buffer (the gradients
 * under ZeRO 0, the parameters under 1 and 2) to every replica: each packs
 * its part in the workspace, one MPI_Allgather per unit, each unpacks. */
static int allgather_units(remat_replicas *rp, int which, const char *what) {
  size_t room;
  float *pack = remat_model_workspace(rp->m, &room);
  for (int64_t x = 0; x < rp->nu && !rp->rc; x++) {
    int64_t u = rp->units[x];
    size_t s = remat_unit_shard(rp->cfg, u, rp->D), first, count, run;
    REMAT_ASSERT(s * sizeof(float) <= room);
    remat_unit_owned(rp->cfg, u, rp->D, rp->r, &first, &count);
    for (size_t i = first; i < first + count; i += run) {
      const float *src = remat_model_unit_at(rp->m, which, u, i, &run);
      if (run > first + count - i) run = first + count - i;
      memcpy(pack + (i - first), src, run * sizeof(float));
    }
    memset(pack + count, 0, (s - count) * sizeof(float));
    double t = remat__now();
    int mrc = MPI_Allgather(pack, (int)s, MPI_FLOAT, rp->recv, (int)s, MPI_FLOAT, rp->d->comm);
    if (account(rp, t, mrc, piece_bytes(rp, s, sizeof(float)), what)) break;
    for (int64_t q = 0; q < rp->D; q++) {
      if (q == rp->r) continue;
      remat_unit_owned(rp->cfg, u, rp->D, q, &first, &count);
      for (size_t i = first; i < first + count; i += run) {
        float *dst = remat_model_unit_at(rp->m, which, u, i, &run);
        if (run > first + count - i) run = first + count - i;
        memcpy(dst, rp->recv + (size_t)q * s + (i - first), run * sizeof(float));
      }
    }
  }
  return rp->rc;
}

/* ------------------------------------------------------- the step's ops */

/* The arena's regions, once it exists (the runtime is made before it). */
static void bind(remat_replicas *rp) {
  if (rp->recv) return;
  size_t bytes;
  rp->recv = remat_model_region(rp->m, REMAT_BUF_RECV, &bytes);
  rp->norm = remat_model_region(rp->m, REMAT_BUF_NORM, &bytes);
  REMAT_ASSERT(bytes >= (size_t)rp->D * rp->chunks * sizeof(double));
  if (rp->zero == 3) {
    rp->gather[0] = remat_model_region(rp->m, REMAT_BUF_GATHER, &bytes);
    /* the head's unit at the end (remat_replica_stage_bytes_get) */
    rp->gather[1] = rp->gather[0] + bytes / sizeof(float) -
                    (size_t)rp->D * remat_unit_shard(rp->cfg, rp->L + 1, rp->D);
  }
}

/* What a step needs before its first micro-batch (a grid's too). */
static void begin_step(remat_replicas *rp) {
  memset(&rp->stats, 0, sizeof rp->stats);
  bind(rp);
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
      if ((rc = remat_trainer_next_batch(tr, j * rp->D + q, mine ? remat_model_inputs(m) : NULL,
                                         mine ? remat_model_targets(m) : NULL, err)))
        return rc;
    }
    float loss = remat_model_forward_backward(m, (uint32_t)(j * rp->D + rp->r),
                                              remat_trainer_dloss(tr), &o->hp);
    if ((rc = failed(rp, err))) return rc;
    rp->losses[rp->r * rp->K + j] = loss;
  }
  double t = remat__now();
  int mrc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rp->losses, (int)rp->K, MPI_FLOAT,
                          rp->d->comm);
  if (account(rp, t, mrc, piece_bytes(rp, (size_t)rp->K, sizeof(float)), "sharing the losses"))
    return failed(rp, err);
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
  return failed(rp, err);
}

/* The squared norm: each replica's chunk sums of the units' shards it owns,
 * gathered; every replica adds them chunk by chunk into each unit's sum, in
 * model order, as one process does (a lone head's tied copy is counted on
 * the embedding). */
static int layer_sums(remat_replicas *rp, double *layers, int64_t *n, remat_error *err) {
  const size_t Q = REMAT_SHARD_QUANTUM;
  double *mine = rp->norm + (size_t)rp->r * rp->chunks;
  size_t pos = 0;
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    if (u > rp->L + 1) continue;
    size_t s = remat_unit_shard(rp->cfg, u, rp->D), first, count;
    remat_unit_owned(rp->cfg, u, rp->D, rp->r, &first, &count);
    size_t k = count ? (size_t)remat_model_grad_chunk_sums(rp->m, u, first, count, mine + pos) : 0;
    for (; k < s / Q; k++) mine[pos + k] = 0.0;
    pos += s / Q;
  }
  double t = remat__now();
  int mrc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rp->norm, (int)rp->chunks,
                          MPI_DOUBLE, rp->d->comm);
  if (account(rp, t, mrc, piece_bytes(rp, rp->chunks, sizeof(double)), "summing the norm"))
    return failed(rp, err);
  pos = 0;
  *n = 0;
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    if (u > rp->L + 1) continue;
    size_t per = remat_unit_shard(rp->cfg, u, rp->D) / Q;
    size_t nch = (remat_unit_floats(rp->cfg, u) + Q - 1) / Q;
    double layer = 0.0;
    for (size_t c = 0; c < nch; c++) layer += rp->norm[(c / per) * rp->chunks + pos + c % per];
    layers[(*n)++] = layer;
    pos += per;
  }
  return 0;
}

static int norm_sumsq(void *ctx, remat_trainer *tr, const double *layers, int64_t n,
                      double *total, remat_error *err) {
  (void)tr;
  (void)layers;
  (void)n;
  double part[4096 + 2], sum = 0;
  int64_t k;
  int rc = layer_sums(ctx, part, &k, err);
  if (rc) return rc;
  for (int64_t i = 0; i < k; i++) sum += part[i];
  *total = sum;
  return 0;
}

static int update(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err) {
  remat_replicas *rp = ctx;
  remat_model_update(rp->m, &remat_trainer_opts(tr)->hp, lr, norm);
  if (rp->zero == 1 || rp->zero == 2)
    allgather_units(rp, REMAT_BUF_PARAMS, "gathering parameters");
  return failed(rp, err);
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
  rp->losses = remat__calloc((size_t)(rp->D * rp->K), sizeof(float));
  rp->units = remat__calloc((size_t)L + 3, sizeof *rp->units);
  if (!rp->losses || !rp->units) {
    remat__free(rp->losses);
    remat__free(rp->units);
    remat__free(rp);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  rp->nu = remat_stage_units(cfg, st, rp->units);
  for (int64_t x = 0; x < rp->nu; x++)
    if (rp->units[x] <= L + 1)
      rp->chunks += remat_unit_shard(cfg, rp->units[x], rp->D) / REMAT_SHARD_QUANTUM;
  remat_layer_ops lops = {.params = rp->zero == 3 ? on_params : NULL, .grads = on_grads,
                          .ctx = rp};
  remat_model_set_layer_ops(m, &lops);
  remat_trainer_ops ops = {.micro_batches = run_rounds, .after_backward = after_backward,
                           .norm_sumsq = norm_sumsq, .update = update, .ctx = rp};
  remat_trainer_set_ops(tr, &ops);
  *out = rp;
  return 0;
}

void remat_replicas_destroy(remat_replicas *rp) {
  if (!rp) return;
  remat_model_set_layer_ops(rp->m, NULL);
  remat_trainer_set_ops(rp->tr, &(remat_trainer_ops){0});
  remat__free(rp->losses);
  remat__free(rp->units);
  remat__free(rp);
}

remat_comm_stats remat_replicas_comm(const remat_replicas *rp) { return rp->stats; }

int remat_replicas_gather_params(remat_replicas *rp, float *full, remat_error *err) {
  const remat_config *cfg = rp->cfg;
  bind(rp);
  if (rp->zero < 3) { /* every replica holds the whole model (or stage) */
    if (rp->r == 0)
      remat_stage_params_to_full(cfg, remat_model_stage(rp->m), remat_model_params(rp->m), full);
    return 0;
  }
  for (int64_t x = 0; x < rp->nu; x++) {
    int64_t u = rp->units[x];
    size_t s = remat_unit_shard(cfg, u, rp->D);
    int mrc = MPI_Gather(remat_model_shard(rp->m, REMAT_BUF_PARAMS, u), (int)s, MPI_FLOAT,
                         rp->recv, (int)s, MPI_FLOAT, 0, rp->d->comm);
    if (mrc != MPI_SUCCESS) return remat__mpi_error(err, mrc, "gathering the parameters");
    if (rp->r != 0) continue;
    /* rp->recv is unit u, replica after replica: its segments go to full */
    remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
    int n = remat_unit_segments(cfg, u, seg);
    for (int k = 0; k < n; k++)
      memcpy(full + seg[k].offset, rp->recv + seg[k].at, seg[k].count * sizeof(float));
  }
  return 0;
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
  return layer_sums(rp, layers, n, err);
}

int remat__replicas_update(remat_replicas *rp, remat_trainer *tr, float lr, float norm,
                           remat_error *err) {
  return update(rp, tr, lr, norm, err);
}
