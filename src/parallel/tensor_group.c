/* tensor_group.c: t tensor ranks of one model (remat_config.tensor_parallel),
 * one per MPI rank, laid out as Megatron-LM lays them out: every rank runs
 * every layer on its shard (its heads, its share of the MLP and of the
 * vocabulary), and the group sums what a shard computes only in part. The
 * model calls the collectives (model_runtime.h's remat__tensor_ops); every
 * rank calls them in the same order, since every rank runs the same layers.
 *
 *   sum    reduce-scatter, then all-gather, in a fixed order: rank c owns
 *          chunk c of the buffer; each rank in turn scatters its chunks
 *          (t scatters), and the owner adds what arrives as it arrives, so
 *          chunk c is p_0 + p_1 + ... + p_{t-1} in rank order; the owners'
 *          chunks are then all-gathered in place. Every rank ends with the
 *          same bits, the same on every repeat.
 *   max    an all-reduce of the largest, which is exact in any order.
 *   scatter, gather  sum's two halves apart, for sequence parallelism: a
 *          rank's rows of a sum, and every rank's rows to every rank; the
 *          norms' gradients, which then cover a rank's rows alone, are
 *          summed after the backward.
 *   norm   the split tensors' sums of squares over the group, added in
 *          rank order, plus the whole tensors' (the same on every rank).
 *
 * The update is the model's own (or the replicas': ZeRO 1 to 3 shard it,
 * and the norm then adds each layer's chunks' sums, split and whole apart,
 * from the replicas that own them; under ZeRO 3 a replica holds a piece
 * of each unit of its tensor rank's shard, gathered as without tensor
 * ranks): each rank's AdamW on its shard, and on
 * the tensors it holds whole (norms, biases of the row-parallel products,
 * positions), whose gradients are the same bits on every rank, so they
 * stay equal.
 *
 * Copies of the group as replicas (ZeRO 0 to 3) or as pipeline stages: their
 * runtime is made first over the ranks of one tensor rank, and the group
 * wraps its trainer ops, taking the norm (with stages, each layer's sum
 * over the group, handed to the pipeline's norm); a save then gathers
 * every rank's part to world rank 0 (remat_tensor_group_join). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "parallel/parallel_internal.h"

struct remat_tensor_group {
  remat_dist *d;
  remat_trainer *tr;
  remat_model *m;
  const remat__backend *be;
  int rank, size;
  int *counts, *displs; /* the chunks of the buffer being summed */
  remat__trainer_ops inner; /* a replicas or pipeline runtime's ops, which the group's wrap */
  int staged;               /* a pipeline's stage: its layers' sums go to the pipeline's norm */
  double *layer_sums;       /* staged: (3, L + 2) split, whole, and every rank's split */
  remat_dist *world;        /* a pipeline's: every rank, for a save (remat_tensor_group_join) */
  const remat_placement *pl;
  remat_pipeline *pipe;     /* a pipeline's (a grid's): its norm adds the stages' layers */
  float *norm_grads;        /* sequence parallelism: the norms' gradients packed, and
                               the sum's scratch (norm_floats, then 2 ceil(n / t)) */
  size_t norm_floats, norm_at;
  remat_replicas *rp;       /* replicas: under ZeRO 1 to 3 the norm's sums from their shards */
  remat_model *cm[REMAT_MAX_STAGES]; /* the rank's chunks (a chunked pipeline's), cm[0] = m */
  int64_t nc;
  remat__tensor_ops ops;    /* every chunk's collectives */
  int seq;                  /* sequence parallelism */
  remat__trace *trace;      /* the runtime's timeline, or NULL */
};

/* An MPI failure inside a collective the model called, which has no way
 * to return it: said, and the job ended (a peer that died ends it too). */
static void check(remat_tensor_group *g, int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  remat_error e;
  remat__mpi_error(&e, rc, what);
  fprintf(stderr, "remat: tensor rank %d: %s\n", g->rank, e.msg);
  MPI_Abort(g->d->comm, 1);
}

static void add_floats(void *acc, const void *part, size_t n, size_t es) {
  if (es == sizeof(float)) {
    float *a = acc;
    const float *b = part;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
  } else {
    double *a = acc;
    const double *b = part;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
  }
}

/* Chunk c of an n-element buffer: [c q, (c + 1) q) cut at n, q = ceil(n / t). */
static size_t set_chunks(remat_tensor_group *g, size_t n) {
  int t = g->size;
  size_t q = (n + (size_t)t - 1) / (size_t)t;
  REMAT_ASSERT(q <= (size_t)INT32_MAX);
  for (int c = 0; c < t; c++) {
    size_t lo = (size_t)c * q < n ? (size_t)c * q : n, hi = lo + q < n ? lo + q : n;
    g->displs[c] = (int)lo;
    g->counts[c] = (int)(hi - lo);
  }
  return q;
}

/* The reduce-scatter (host memory, chunks set): each rank in turn scatters
 * its chunks, and this rank adds what arrives into acc in rank order. */
static void scatter_host(remat_tensor_group *g, char *host, char *acc, char *rcv,
                         MPI_Datatype ty, size_t es) {
  int t = g->size, r = g->rank;
  char *own = host + (size_t)g->displs[r] * es;
  size_t mine = (size_t)g->counts[r];
  for (int k = 0; k < t; k++) {
    char *dst = k == 0 ? acc : rcv;
    int rc = k == r ? MPI_Scatterv(host, g->counts, g->displs, ty, MPI_IN_PLACE, g->counts[r], ty,
                                   k, g->d->comm)
                    : MPI_Scatterv(NULL, g->counts, g->displs, ty, dst, g->counts[r], ty, k,
                                   g->d->comm);
    check(g, rc, "a tensor-parallel sum");
    const char *part = k == r ? own : dst;
    if (k == 0 && part != acc) memcpy(acc, part, mine * es);
    if (k > 0) add_floats(acc, part, mine, es);
  }
}

static void gather_host(remat_tensor_group *g, char *host, MPI_Datatype ty) {
  check(g, MPI_Allgatherv(MPI_IN_PLACE, 0, ty, host, g->counts, g->displs, ty, g->d->comm),
        "a tensor-parallel all-gather");
}

/* A collective from t0 to now on the timeline's tensor track. */
static void span(remat_tensor_group *g, int kind, double t0) {
  if (!g->trace) return;
  remat__trace_add(g->trace, (remat__event){.ts = t0, .dur = remat__now() - t0,
                                            .step = remat_model_step(g->m), .micro = -1,
                                            .kind = (int16_t)kind,
                                            .track = REMAT__TRACK_TENSOR, .layer = -1});
}

/* The whole sum in host memory (chunks set, q floats a chunk): scatter
 * into s, the rank's chunk back into host, all-gathered. */
static void sum_host(remat_tensor_group *g, char *host, size_t q, char *s, MPI_Datatype ty,
                     size_t es) {
  scatter_host(g, host, s, s + q * es, ty, es);
  memcpy(host + (size_t)g->displs[g->rank] * es, s, (size_t)g->counts[g->rank] * es);
  gather_host(g, host, ty);
}

int remat__tensor_sum_host(remat_dist *d, float *host, size_t n, float *scratch) {
  int *chunks = remat__calloc(2 * (size_t)d->size, sizeof(int));
  if (!chunks) return REMAT_ENOMEM;
  remat_tensor_group g = {.d = d, .rank = d->rank, .size = d->size, .counts = chunks,
                          .displs = chunks + d->size};
  size_t q = set_chunks(&g, n);
  sum_host(&g, (char *)host, q, (char *)scratch, MPI_FLOAT, sizeof(float));
  remat__free(chunks);
  return 0;
}

static void sum_typed(remat_tensor_group *g, void *buf, size_t n, void *scratch, MPI_Datatype ty,
                      size_t es) {
  size_t q = set_chunks(g, n);
  const int rw = REMAT_MAP_READ | REMAT_MAP_WRITE;
  char *host = g->be->map(buf, n * es, rw), *s = g->be->map(scratch, 2 * q * es, rw);
  sum_host(g, host, q, s, ty, es);
  g->be->unmap(scratch, s, 2 * q * es, rw);
  g->be->unmap(buf, host, n * es, rw);
}

static void op_scatter(void *ctx, float *buf, size_t n, float *dst, float *rcv) {
  remat_tensor_group *g = ctx;
  double t0 = remat__now();
  REMAT_ASSERT(n % (size_t)g->size == 0);
  size_t q = set_chunks(g, n), es = sizeof(float);
  const int rw = REMAT_MAP_READ | REMAT_MAP_WRITE;
  char *host = g->be->map(buf, n * es, rw), *acc = g->be->map(dst, q * es, REMAT_MAP_WRITE),
       *r = g->be->map(rcv, q * es, rw);
  scatter_host(g, host, acc, r, MPI_FLOAT, es);
  g->be->unmap(rcv, r, q * es, rw);
  g->be->unmap(dst, acc, q * es, REMAT_MAP_WRITE);
  g->be->unmap(buf, host, n * es, rw);
  span(g, REMAT__EV_TENSOR_SCATTER, t0);
}

static void op_gather(void *ctx, float *buf, size_t n) {
  remat_tensor_group *g = ctx;
  double t0 = remat__now();
  REMAT_ASSERT(n % (size_t)g->size == 0);
  set_chunks(g, n);
  const int rw = REMAT_MAP_READ | REMAT_MAP_WRITE;
  char *host = g->be->map(buf, n * sizeof(float), rw);
  gather_host(g, host, MPI_FLOAT);
  g->be->unmap(buf, host, n * sizeof(float), rw);
  span(g, REMAT__EV_TENSOR_GATHER, t0);
}

static void op_sum(void *ctx, float *buf, size_t n, float *scratch) {
  double t0 = remat__now();
  sum_typed(ctx, buf, n, scratch, MPI_FLOAT, sizeof(float));
  span(ctx, REMAT__EV_TENSOR_SUM, t0);
}

static void op_sum_f64(void *ctx, double *buf, size_t n, double *scratch) {
  double t0 = remat__now();
  sum_typed(ctx, buf, n, scratch, MPI_DOUBLE, sizeof(double));
  span(ctx, REMAT__EV_TENSOR_SUM, t0);
}

static void op_max(void *ctx, float *buf, size_t n) {
  remat_tensor_group *g = ctx;
  double t0 = remat__now();
  const int rw = REMAT_MAP_READ | REMAT_MAP_WRITE;
  REMAT_ASSERT(n <= (size_t)INT32_MAX);
  float *host = g->be->map(buf, n * sizeof(float), rw);
  check(g, MPI_Allreduce(MPI_IN_PLACE, host, (int)n, MPI_FLOAT, MPI_MAX, g->d->comm),
        "a tensor-parallel maximum");
  g->be->unmap(buf, host, n * sizeof(float), rw);
  span(g, REMAT__EV_TENSOR_MAX, t0);
}

/* A replicas or pipeline runtime's ops under the group's (the norm is the
 * group's: under ZeRO 0 from the whole summed gradient every replica ends
 * the backward with, under ZeRO 1 to 3 from the replicas' shards). */
static int inner_micro(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err) {
  remat_tensor_group *g = ctx;
  return g->inner.micro_batches(g->inner.ctx, tr, loss_sum, err);
}

/* The runs of the stage's norms' gradients this rank sums under sequence
 * parallelism: each unit's norm tensors, cut to the shard the replica owns
 * where the replicas keep only theirs (ZeRO 1 to 3); fn(g, at, n) each in
 * unit order (at NULL: counting). Returns the floats. */
static size_t chunk_norm_runs(remat_tensor_group *g, remat_model *m,
                              void (*fn)(remat_tensor_group *, float *, size_t)) {
  const remat_config *cfg = remat_model_config(m);
  const remat_stage *st = remat_model_stage(m);
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  int64_t L = cfg->num_layers, nb = st->num_blocks;
  size_t total = 0;
  for (int64_t x = 0; x < nb + 2; x++) {
    int64_t u = x == 0 ? 0 : x <= nb ? st->first_block + x : L + 1;
    if ((x == 0 && !st->has_embedding) || (x == nb + 1 && !st->has_head)) continue;
    size_t first = 0, count = remat_unit_floats(cfg, u);
    if (st->replicas > 1 && st->zero > 0)
      remat_unit_owned(cfg, u, st->replicas, st->replica, &first, &count);
    remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
    int n = remat_unit_segments(cfg, u, seg);
    for (int k = 0; k < n; k++) {
      if (!t[seg[k].tensor].norm) continue;
      size_t lo = seg[k].at > first ? seg[k].at : first, end = seg[k].at + seg[k].count;
      size_t hi = end < first + count ? end : first + count;
      for (size_t i = lo, run; i < hi; i += run) {
        float *at = remat__model_unit_at(m, REMAT_BUF_GRADS, u, i, &run);
        if (run > hi - i) run = hi - i;
        if (fn) fn(g, at, run);
        total += run;
      }
    }
  }
  return total;
}

/* chunk_norm_runs of every chunk of the rank, in chunk order */
static size_t norm_runs(remat_tensor_group *g, void (*fn)(remat_tensor_group *, float *, size_t)) {
  size_t n = 0;
  for (int64_t c = 0; c < g->nc; c++) n += chunk_norm_runs(g, g->cm[c], fn);
  return n;
}

/* norm_runs' packing and unpacking, through g->norm_at */
static void pack_run(remat_tensor_group *g, float *at, size_t n) {
  float *h = g->be->map(at, n * sizeof(float), REMAT_MAP_READ);
  memcpy(g->norm_grads + g->norm_at, h, n * sizeof(float));
  g->be->unmap(at, h, n * sizeof(float), REMAT_MAP_READ);
  g->norm_at += n;
}

static void unpack_run(remat_tensor_group *g, float *at, size_t n) {
  float *h = g->be->map(at, n * sizeof(float), REMAT_MAP_WRITE);
  memcpy(h, g->norm_grads + g->norm_at, n * sizeof(float));
  g->be->unmap(at, h, n * sizeof(float), REMAT_MAP_WRITE);
  g->norm_at += n;
}

/* Under sequence parallelism a rank's norms' gradients cover its rows of
 * the stream: the group sums them (packed into one buffer, added in rank
 * order), so each is the same bits on every rank. */
static int sum_norm_grads(remat_tensor_group *g, remat_error *err) {
  if (!g->norm_grads) { /* the packed gradients and the sum's scratch */
    g->norm_floats = norm_runs(g, NULL);
    size_t q = (g->norm_floats + (size_t)g->size - 1) / (size_t)g->size;
    g->norm_grads = remat__malloc((g->norm_floats + 2 * q) * sizeof(float) + 1);
    if (!g->norm_grads) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  g->norm_at = 0;
  size_t n = norm_runs(g, pack_run);
  REMAT_ASSERT(n == g->norm_floats);
  size_t q = set_chunks(g, n);
  sum_host(g, (char *)g->norm_grads, q, (char *)(g->norm_grads + n), MPI_FLOAT, sizeof(float));
  g->norm_at = 0;
  norm_runs(g, unpack_run);
  return 0;
}

static int inner_after(void *ctx, remat_trainer *tr, remat_error *err) {
  remat_tensor_group *g = ctx;
  int rc = g->inner.after_backward ? g->inner.after_backward(g->inner.ctx, tr, err) : 0;
  return rc || !g->seq ? rc : sum_norm_grads(g, err);
}

static int inner_update(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err) {
  remat_tensor_group *g = ctx;
  return g->inner.update(g->inner.ctx, tr, lr, norm, err);
}

/* Each layer's sum of squares: its split tensors' sums over the group (in
 * rank order) plus its whole ones' (the same on every rank); a pipeline's
 * stage hands them to the pipeline's norm, which adds every stage's in
 * model order, and so does the group itself otherwise: the same bits
 * whatever the pipeline and data degrees. */
static int norm_sumsq(void *ctx, remat_trainer *tr, const double *layers, int64_t n,
                      double *total, remat_error *err) {
  (void)layers;
  remat_tensor_group *g = ctx;
  int64_t cap = remat_model_config(g->m)->num_layers + 2;
  double *split = g->layer_sums, *whole = split + cap, *all = whole + cap;
  int rc = 0;
  if (remat_model_stage(g->m)->zero > 0) { /* from the replicas' shards */
    REMAT_ASSERT(g->rp);
    int64_t k = 0;
    if ((rc = remat__replicas_layer_sums_part(g->rp, 1, split, &n, err)) ||
        (rc = remat__replicas_layer_sums_part(g->rp, 0, whole, &k, err)))
      return rc;
    REMAT_ASSERT(k == n);
  } else { /* every chunk's layers, in chunk order */
    n = 0;
    for (int64_t c = 0; c < g->nc; c++)
      n += remat__model_grad_sumsq_layers_split(g->cm[c], split + n, whole + n);
  }
  rc = MPI_Allgather(split, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, g->d->comm);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "the gradient norm's sums");
  for (int64_t i = 0; i < n; i++) {
    double s = 0.0;
    for (int k = 0; k < g->size; k++) s += all[(size_t)k * (size_t)n + (size_t)i];
    split[i] = s + whole[i];
  }
  (void)tr;
  if (g->staged) return remat__pipeline_norm(g->pipe, split, n, total, err);
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += split[i];
  *total = s;
  return 0;
}

void remat_tensor_group_join_replicas(remat_tensor_group *g, remat_replicas *rp) { g->rp = rp; }

int remat_tensor_group_trace_start(remat_tensor_group *g, remat_dist *world, remat_solo *solo,
                                   int64_t max_steps, remat_error *err) {
  remat__trace *t = g->pipe ? remat__pipeline_trace(g->pipe)
                    : g->rp ? remat__replicas_trace(g->rp)
                    : solo  ? remat__solo_trace(solo)
                            : NULL;
  if (!t)
    return remat__errorf(err, REMAT_EINVAL, "a tensor group draws its runtime's timeline: join "
                         "its pipeline or replicas, or give its one-process runtime");
  /* room for the collectives: per micro-batch at most 16 a block (its
   * forward, a recompute, its backward), and the embedding's and the
   * head's, at most 8 a chunk of its logits (the loss's maximum and sums,
   * the gathered input, the input gradient) */
  const remat_config *cfg = remat_model_config(g->m);
  const remat_train_opts *o = remat_trainer_opts(g->tr);
  int64_t nb = 0, N = o->B * o->T, k = cfg->head_chunk > 0 ? cfg->head_chunk : N;
  for (int64_t c = 0; c < g->nc; c++) nb += remat_model_stage(g->cm[c])->num_blocks;
  size_t per = (size_t)(16 * nb + 16 + 8 * ((N + k - 1) / k));
  remat__trace_world(t, world->comm, g->size, (size_t)max_steps * (size_t)o->grad_accum * per);
  g->trace = t;
  if (g->pipe) return remat_pipeline_trace_start(g->pipe, max_steps, err);
  if (g->rp) return remat_replicas_trace_start(g->rp, max_steps, err);
  return remat__solo_restart(solo, err);
}

void remat_tensor_group_join(remat_tensor_group *g, remat_dist *world,
                             const remat_placement *pl, remat_pipeline *pipe) {
  g->world = world;
  g->pl = pl;
  g->pipe = pipe;
  g->nc = remat__pipeline_chunk_models(pipe, g->cm); /* each chunk a shard of its own */
  for (int64_t c = 1; c < g->nc; c++) remat__model_set_tensor_ops(g->cm[c], &g->ops);
}

/* A pipeline's: world rank q t + k holds tensor rank k's part of copy q,
 * stage q / D's replica q mod D (each of its chunks under a chunked
 * schedule); world rank 0 takes replica 0's in turn, chunk by chunk, and
 * puts their runs in place, its own last. */
static int gather_world(remat_tensor_group *g, float *zflat, float *full, remat_error *err) {
  const remat_config *cfg = remat_model_config(g->m);
  const size_t piece = (size_t)1 << 28;
  int me = g->world->rank, ok = me != 0 || full != NULL;
  int rc = MPI_Bcast(&ok, 1, MPI_INT, 0, g->world->comm);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "gathering the ranks' shards");
  if (!ok) return remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the model");
  int64_t D = g->pl->replicas > 1 ? g->pl->replicas : 1, v = g->pl->chunks > 1 ? g->pl->chunks : 1;
  for (int x = 1; x <= g->world->size && rc == MPI_SUCCESS; x++) {
    int r = x % g->world->size;
    if ((r / g->size) % D) continue; /* another replica's: the same */
    for (int64_t c = 0; c < v && rc == MPI_SUCCESS; c++) {
      int64_t s = r / g->size / D;
      remat_stage st = v > 1 ? remat_placement_chunk(g->pl, s, c) : remat_placement_stage(g->pl, s, 0);
      st.replicas = st.replica = 0; /* whole tensors (ZeRO 3's gathered first) */
      st.zero = 0;
      size_t nr = remat__stage_num_params(cfg, &st), bytes = nr * sizeof(float);
      float *at = me == r && !zflat ? remat_model_params(g->cm[c]) : NULL;
      float *mine = at ? g->be->map(at, bytes, REMAT_MAP_READ) : me == r ? zflat : NULL;
      float *buf = me == 0 && r > 0 ? remat__malloc(bytes) : NULL;
      if (me == 0 && r > 0 && !buf) rc = MPI_ERR_NO_MEM;
      for (size_t i = 0; i < nr && r > 0 && (me == 0 || me == r) && rc == MPI_SUCCESS; i += piece) {
        int k = (int)(nr - i < piece ? nr - i : piece);
        rc = me == r ? MPI_Send(mine + i, k, MPI_FLOAT, 0, 13, g->world->comm)
                     : MPI_Recv(buf + i, k, MPI_FLOAT, r, 13, g->world->comm, MPI_STATUS_IGNORE);
      }
      if (me == 0 && rc == MPI_SUCCESS)
        remat__tensor_params_copy(cfg, &st, r % g->size, r == 0 ? mine : buf, full, 1);
      if (mine) g->be->unmap(at, mine, bytes, REMAT_MAP_READ);
      remat__free(buf);
    }
  }
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "gathering the ranks' shards");
}

static int gather_group(remat_tensor_group *g, float *zflat, float *full, remat_error *err);

/* Under ZeRO 3 a rank holds pieces of its shard: replica 0 of each tensor
 * rank first gathers its whole shard (*zflat, host memory; NULL on the
 * other replicas), and the ranks agree on running out of memory (over the
 * world, or the replicas' then the group's ranks: every rank). */
static int gather_zero3(remat_tensor_group *g, float **zflat, remat_error *err) {
  *zflat = NULL;
  const remat_stage *st = remat_model_stage(g->m);
  if (!(st->replicas > 1 && st->zero == 3)) return 0;
  REMAT_ASSERT(g->rp);
  int rc = remat__replicas_gather_stage(g->rp, zflat, err), ok = rc == 0;
  remat_dist_all_ok(g->world ? g->world : g->d, ok, &ok);
  if (ok) return 0;
  remat__free(*zflat);
  *zflat = NULL;
  return rc ? rc : remat__errorf(err, REMAT_ENOMEM, "another rank ran out of memory gathering "
                                 "the parameters");
}

/* A pipeline's (gather_world) or a group's (gather_group), after ZeRO 3's
 * replicas have gathered each shard (zflat: its whole tensors, or NULL to
 * read the arena's). */
int remat_tensor_group_gather_params(remat_tensor_group *g, float *full, remat_error *err) {
  float *zflat;
  int rc = gather_zero3(g, &zflat, err);
  if (!rc) rc = g->world ? gather_world(g, zflat, full, err) : gather_group(g, zflat, full, err);
  remat__free(zflat);
  return rc;
}

/* Rank 0 takes each rank's shard in turn (its own from the arena or
 * zflat, the others' through one buffer of a shard) and puts its runs in
 * place. */
static int gather_group(remat_tensor_group *g, float *zflat, float *full, remat_error *err) {
  const remat_config *cfg = remat_model_config(g->m);
  remat_stage whole = *remat_model_stage(g->m);
  whole.replicas = whole.replica = 0;
  whole.zero = 0;
  size_t n = remat__stage_num_params(cfg, &whole), bytes = n * sizeof(float);
  const size_t piece = (size_t)1 << 28; /* floats a message: within MPI's int counts */
  /* 2: gather, 1: not wanted (full NULL on rank 0: another copy's group) */
  float *buf = g->rank == 0 && full ? remat__malloc(bytes) : NULL;
  int want = g->rank != 0 ? 0 : !full ? 1 : buf ? 2 : 0;
  int rc = MPI_Bcast(&want, 1, MPI_INT, 0, g->d->comm);
  if (rc != MPI_SUCCESS) {
    remat__free(buf);
    return remat__mpi_error(err, rc, "gathering the tensor ranks' shards");
  }
  if (want == 1) return 0;
  if (!want) return remat__errorf(err, REMAT_ENOMEM, "out of memory gathering a shard on rank 0");
  float *at = zflat ? NULL : remat_model_params(g->m);
  float *mine = zflat ? zflat : g->be->map(at, bytes, REMAT_MAP_READ);
  for (int k = 0; k < g->size && rc == MPI_SUCCESS; k++) {
    for (size_t i = 0; i < n && rc == MPI_SUCCESS && k > 0; i += piece) {
      int c = (int)(n - i < piece ? n - i : piece);
      if (g->rank == k) rc = MPI_Send(mine + i, c, MPI_FLOAT, 0, 7, g->d->comm);
      else if (g->rank == 0)
        rc = MPI_Recv(buf + i, c, MPI_FLOAT, k, 7, g->d->comm, MPI_STATUS_IGNORE);
    }
    if (g->rank == 0 && rc == MPI_SUCCESS)
      remat__tensor_params_copy(cfg, NULL, k, k == 0 ? mine : buf, full, 1);
  }
  if (at) g->be->unmap(at, mine, bytes, REMAT_MAP_READ);
  remat__free(buf);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "gathering the tensor ranks' shards");
}

int remat_tensor_group_create(remat_tensor_group **out, remat_dist *d, remat_trainer *tr,
                              remat_error *err) {
  *out = NULL;
  remat_model *m = remat_trainer_model(tr);
  const remat_config *cfg = remat_model_config(m);
  const remat_stage *st = remat_model_stage(m);
  int64_t t = remat__tp(cfg);
  if (t < 2 || t != d->size || t > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL,
                         "a tensor degree of %lld runs on as many ranks, not %d", (long long)t,
                         d->size);
  int staged = !st->has_embedding || !st->has_head;
  remat_tensor_group *g = remat__calloc(1, sizeof *g);
  int *chunks = remat__calloc(2 * (size_t)t, sizeof(int));
  double *sums = remat__calloc((size_t)(2 + t) * (size_t)(cfg->num_layers + 2), sizeof(double));
  if (!g || !chunks || !sums) {
    remat__free(g);
    remat__free(chunks);
    remat__free(sums);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  *g = (remat_tensor_group){.d = d, .tr = tr, .m = m, .be = remat__model_backend(m),
                            .rank = d->rank, .size = d->size, .counts = chunks,
                            .displs = chunks + t, .inner = remat__trainer_get_ops(tr),
                            .staged = staged, .layer_sums = sums};
  g->cm[0] = m;
  g->nc = 1;
  g->seq = remat__sp(cfg) > 1; /* the norms' gradients, summed after the backward */
  g->ops = (remat__tensor_ops){.sum = op_sum, .sum_f64 = op_sum_f64, .max = op_max,
                               .scatter = op_scatter, .gather = op_gather, .ctx = g,
                               .rank = d->rank};
  remat__model_set_tensor_ops(m, &g->ops);
  const remat__trainer_ops *in = &g->inner;
  remat__trainer_set_ops(tr, &(remat__trainer_ops){
                                 .micro_batches = in->micro_batches ? inner_micro : NULL,
                                 .after_backward =
                                     in->after_backward || g->seq ? inner_after : NULL,
                                 .norm_sumsq = norm_sumsq,
                                 .update = in->update ? inner_update : NULL,
                                 .ctx = g});
  *out = g;
  return 0;
}

void remat_tensor_group_destroy(remat_tensor_group *g) {
  if (!g) return;
  remat__trainer_set_ops(g->tr, &g->inner);
  remat__free(g->counts);
  remat__free(g->layer_sums);
  remat__free(g->norm_grads);
  remat__free(g);
}
