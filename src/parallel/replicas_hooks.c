/* replicas_hooks.c: a replica's communication inside its step (replicas.c
 * says how it runs): the failure and timing helpers, the layer hooks the
 * model calls as each layer's backward takes and hands over its gradient
 * buffer (one MPI_Ialltoall in flight, its pieces added in replica order
 * when it arrives), ZeRO 3's parameter requests (MPI_Iallgather of the
 * shards into GATHER's slots, the next posted before this one is waited
 * for) and the progress between the model's kernels. Every message's
 * buffers are windows the model's backend lends while it is in flight. */
#include <string.h>

#include "base/base.h"
#include "parallel/replicas_internal.h"

/* Records an MPI failure (the first one is reported). */
static int check(remat_replicas *rp, int mrc, const char *what) {
  if (mrc == MPI_SUCCESS) return rp->rc;
  if (!rp->rc) {
    remat_error mpi;
    remat__mpi_error(&mpi, mrc, what);
    rp->rc = remat__errorf(&rp->err, REMAT_EIO, "replica %lld: %s (did another rank die?)",
                           (long long)rp->r, mpi.msg);
  }
  return rp->rc;
}

int remat__rp_failed(remat_replicas *rp, remat_error *err) {
  if (!rp->rc) return 0;
  if (err) *err = rp->err;
  return rp->rc;
}

uint64_t remat__rp_piece_bytes(const remat_replicas *rp, size_t floats, size_t size) {
  return (uint64_t)(rp->D - 1) * floats * size;
}

void remat__rp_span(remat_replicas *rp, int kind, int track, double t0, double t1, int64_t micro,
                 int64_t layer) {
  remat__trace_add(rp->trace, (remat__event){.ts = t0, .dur = t1 - t0,
                                              .step = rp->step, .micro = micro,
                                              .kind = (int16_t)kind, .track = (int16_t)track,
                                              .layer = (int32_t)layer});
}

/* Time inside MPI calls for a collective in flight: exposed. */
static void exposed(remat_replicas *rp, double t0, double t1, int layer) {
  rp->stats.exposed_seconds += t1 - t0;
  if (layer) rp->stats.layer_exposed_seconds += t1 - t0;
}

/* A collective seen complete at t1, posted at t_post. */
static void completed(remat_replicas *rp, double t_post, double t1, int layer) {
  rp->stats.seconds += t1 - t_post;
  if (layer) rp->stats.layer_seconds += t1 - t_post;
}

/* A blocking collective's call, from t0: all of it exposed. kind: the
 * trace's reduce or gather. */
int remat__rp_blocking(remat_replicas *rp, double t0, int mrc, uint64_t bytes, int kind,
                    const char *what) {
  double t1 = remat__now();
  completed(rp, t0, t1, 0);
  exposed(rp, t0, t1, 0);
  rp->stats.bytes_sent += bytes;
  rp->stats.collectives++;
  remat__rp_span(rp, kind, kind == REMAT__EV_GATHER ? REMAT__TRACK_GATHER : REMAT__TRACK_REDUCE, t0,
                 t1, -1, -1);
  remat__rp_span(rp, REMAT__EV_WAIT, REMAT__TRACK_MAIN, t0, t1, -1, -1);
  return check(rp, mrc, what);
}

/* ------------------------------------------------------- layer hooks */

/* The owner's sum over the pieces received for unit u (at in: D pieces of
 * s floats): its part of the step's gradient (whole buffer or shard) plus
 * each replica's piece, in replica order. */
static void add_pieces(remat_replicas *rp, int64_t u, const float *recv) {
  size_t first, count, run, s = remat_unit_shard(rp->cfg, u, rp->D);
  remat_unit_owned(rp->cfg, u, rp->D, rp->r, &first, &count);
  int which = u == rp->L + 2 ? REMAT_BUF_TIED_GRAD : REMAT_BUF_GRADS;
  const remat__backend *be = remat__model_backend(rp->m);
  for (size_t i = first; i < first + count; i += run) {
    float *acc = remat__model_unit_at(rp->m, which, u, i, &run);
    if (run > first + count - i) run = first + count - i;
    be->add(acc, recv + (i - first), run, rp->D, s); /* acc + piece 0 + piece 1 ... */
  }
}

/* The windows of the reduce in flight given back. */
static void reduce_close(remat_replicas *rp) {
  for (int k = 0; k < 2; k++) {
    remat__window_close(rp->m, &rp->red.send[k]);
    remat__window_close(rp->m, &rp->red.recv[k]);
  }
}

/* The layer in flight has arrived (seen at t1): its pieces are added. */
static void reduce_done(remat_replicas *rp, double t1) {
  reduce_op *o = &rp->red;
  reduce_close(rp);
  completed(rp, o->t_post, t1, 1);
  int64_t layer = o->unit[0] == rp->L + 2 ? rp->L + 1 : o->unit[0];
  remat__rp_span(rp, REMAT__EV_REDUCE, REMAT__TRACK_REDUCE, o->t_post, t1, o->micro, layer);
  int n = o->n;
  o->n = 0;
  if (rp->rc) return;
  for (int k = 0; k < n; k++) add_pieces(rp, o->unit[k], rp->recv + o->at[k]);
}

static void reduce_test(remat_replicas *rp) {
  if (!rp->red.n) return;
  int flag = 0;
  double t = remat__now();
  int mrc = MPI_Testall(rp->red.n, rp->red.req, &flag, MPI_STATUSES_IGNORE);
  double e = remat__now();
  exposed(rp, t, e, 1);
  if (check(rp, mrc, "reduce-scattering gradients")) {
    rp->red.n = 0;
    reduce_close(rp);
  } else if (flag) {
    reduce_done(rp, e);
  }
}

void remat__rp_reduce_wait(remat_replicas *rp) {
  if (!rp->red.n) return;
  double t = remat__now();
  int mrc = MPI_Waitall(rp->red.n, rp->red.req, MPI_STATUSES_IGNORE);
  double e = remat__now();
  exposed(rp, t, e, 1);
  remat__rp_span(rp, REMAT__EV_WAIT, REMAT__TRACK_MAIN, t, e, rp->micro, -1);
  if (check(rp, mrc, "reduce-scattering gradients")) {
    rp->red.n = 0;
    reduce_close(rp);
  } else {
    reduce_done(rp, e);
  }
}

/* Which gradient buffer buf lies in (the head's own unit follows its tied
 * unit in the big one). */
static int gbuf_of(const remat_replicas *rp, const float *buf) {
  for (int b = GBUF_BIG; b > GBUF_BLOCK0; b--)
    if (rp->gbuf[b] && buf >= rp->gbuf[b]) return b;
  REMAT_ASSERT(buf >= rp->gbuf[GBUF_BLOCK0]);
  return GBUF_BLOCK0;
}

/* Where layer u computes its gradient: the embedding (0) and the head
 * (L + 2) in the big buffer, blocks in the two others by turns; a buffer
 * still being sent is waited for first (the big one, when the previous
 * micro-batch's embedding or head is still in flight). */
float *remat__rp_on_grad_buf(void *ctx, int64_t u) {
  remat_replicas *rp = ctx;
  int b = GBUF_BIG;
  if (u != 0 && u != rp->L + 2) {
    b = rp->next_block;
    if (rp->gbuf[GBUF_BLOCK1]) rp->next_block ^= 1;
  }
  if (rp->red.n && rp->red.buf == b) remat__rp_reduce_wait(rp);
  rp->layer_t0 = remat__now();
  return rp->gbuf[b];
}

void remat__rp_on_grads(void *ctx, int64_t u, float *buf) {
  remat_replicas *rp = ctx;
  double t = remat__now();
  int64_t L = rp->L;
  if (u != L + 1) /* the layer's backward: the head's ends with the tied unit */
    remat__rp_span(rp, REMAT__EV_BACKWARD, REMAT__TRACK_MAIN, rp->layer_t0, t, rp->micro,
         u == L + 2 ? L + 1 : u);
  if (rp->rc) return;
  int b = gbuf_of(rp, buf);
  /* one layer in flight: the one before must be in (RECV is reused) */
  if (rp->red.n && rp->red.buf != b) remat__rp_reduce_wait(rp);
  if (rp->rc) return;
  size_t s = remat_unit_shard(rp->cfg, u, rp->D);
  size_t at = u == L + 1 ? (size_t)rp->D * rp->big : 0; /* after its tied unit's */
  reduce_op *o = &rp->red;
  REMAT_ASSERT(o->n < 2);
  t = remat__now();
  size_t bytes = (size_t)rp->D * s * sizeof(float);
  int mrc = MPI_Ialltoall(remat__window_open(rp->m, &o->send[o->n], buf, bytes, REMAT_MAP_READ),
                          (int)s, MPI_FLOAT,
                          remat__window_open(rp->m, &o->recv[o->n], rp->recv + at, bytes,
                                             REMAT_MAP_WRITE),
                          (int)s, MPI_FLOAT, rp->d->comm, &o->req[o->n]);
  exposed(rp, t, remat__now(), 1);
  rp->stats.bytes_sent += remat__rp_piece_bytes(rp, s, sizeof(float));
  rp->stats.collectives++;
  if (check(rp, mrc, "reduce-scattering gradients")) {
    remat__window_close(rp->m, &o->send[o->n]);
    remat__window_close(rp->m, &o->recv[o->n]);
    return;
  }
  if (!o->n) {
    o->t_post = t;
    o->buf = b;
    o->micro = rp->micro;
  }
  o->unit[o->n] = u;
  o->at[o->n] = at;
  o->n++;
}

/* ZeRO 3's requests for parameters come in two passes, each in one order
 * every time: the forward's (phase 0) the embedding's unit if the stage has
 * it, then its blocks in order; the backward's (phase 1) the head's two if
 * it has it (its tied matrix, unit 0 or a lone head's L + 2, then L + 1,
 * both in use together), then its blocks in reverse. */
void remat__rp_build_passes(remat_replicas *rp, const remat_stage *st) {
  int64_t L = rp->L, *f = rp->pass[0], *b = rp->pass[1], nf = 0, nb = 0;
  if (st->has_embedding) f[nf++] = 0;
  for (int64_t i = 0; i < st->num_blocks; i++) f[nf++] = 1 + st->first_block + i;
  if (st->has_head) {
    b[nb++] = st->has_embedding ? 0 : L + 2;
    b[nb++] = L + 1;
  }
  for (int64_t i = st->num_blocks - 1; i >= 0; i--) b[nb++] = 1 + st->first_block + i;
  rp->npass[0] = nf;
  rp->npass[1] = nb;
}

/* The slots of GATHER, request by request: the embedding's or the head's
 * tied matrix in A, the head's own in H, a block in B unless the unit in
 * use holds B (or there is no B), then in A. Request i + 1 of a pass is
 * gathered while request i's unit computes when its slot is not in use
 * then (request i's, and the tied matrix's beside the head's own): every
 * block of a pass but a stage's first, and the head's own unit. Nothing is
 * fetched across passes: an update, or the pipeline's other passes, may
 * come between. */
void remat__rp_plan_gathers(remat_replicas *rp, int has_b) {
  int64_t L = rp->L;
  for (int p = 0; p < 2; p++) {
    unsigned live = 0;
    for (int64_t i = 0; i < rp->npass[p]; i++) {
      int64_t u = rp->pass[p][i];
      int sl = u == L + 1                                                  ? SLOT_HEAD
               : u == 0 || u == L + 2 || !has_b || (live & (1u << SLOT_B)) ? SLOT_A
                                                                           : SLOT_B;
      rp->slot[p][i] = (uint8_t)sl;
      if (i > 0) rp->prefetch[p][i - 1] = !(live & (1u << sl));
      live = (1u << sl) | (u == L + 1 && i > 0 ? 1u << rp->slot[p][i - 1] : 0u);
    }
    if (rp->npass[p]) rp->prefetch[p][rp->npass[p] - 1] = 0;
  }
}

static int64_t request_index(const remat_replicas *rp, int phase, int64_t u) {
  for (int64_t i = 0; i < rp->npass[phase]; i++)
    if (rp->pass[phase][i] == u) return i;
  REMAT_ASSERT(0 && "a unit this stage does not hold");
  return -1;
}

/* Request i's gather lives in gat[i % 2]: the one in use and the next. */
static void gather_post(remat_replicas *rp, int phase, int64_t i) {
  gather_op *g = &rp->gat[i & 1];
  int64_t u = rp->pass[phase][i];
  size_t s = remat_unit_shard(rp->cfg, u, rp->D);
  float *mine = remat__model_shard(rp->m, REMAT_BUF_PARAMS, u);
  double t = remat__now();
  int mrc = MPI_Iallgather(
      remat__window_open(rp->m, &g->send, mine, s * sizeof(float), REMAT_MAP_READ), (int)s,
      MPI_FLOAT,
      remat__window_open(rp->m, &g->recv, rp->gather[rp->slot[phase][i]],
                         (size_t)rp->D * s * sizeof(float), REMAT_MAP_WRITE),
      (int)s, MPI_FLOAT, rp->d->comm, &g->req);
  exposed(rp, t, remat__now(), 1);
  rp->stats.bytes_sent += remat__rp_piece_bytes(rp, s, sizeof(float));
  rp->stats.collectives++;
  if (check(rp, mrc, "gathering parameters")) {
    remat__window_close(rp->m, &g->send);
    remat__window_close(rp->m, &g->recv);
    return;
  }
  g->state = GATHER_IN_FLIGHT;
  g->phase = phase;
  g->index = i;
  g->t_post = t;
}

/* Its windows given back, however it ended. */
static void gather_close(remat_replicas *rp, gather_op *g) {
  remat__window_close(rp->m, &g->send);
  remat__window_close(rp->m, &g->recv);
}

static void gather_done(remat_replicas *rp, gather_op *g, double t1) {
  gather_close(rp, g);
  g->state = GATHER_DONE;
  completed(rp, g->t_post, t1, 1);
  remat__rp_span(rp, REMAT__EV_GATHER, REMAT__TRACK_GATHER, g->t_post, t1, rp->micro,
       rp->pass[g->phase][g->index]);
}

static void gather_test(remat_replicas *rp, gather_op *g) {
  if (g->state != GATHER_IN_FLIGHT) return;
  int flag = 0;
  double t = remat__now();
  int mrc = MPI_Test(&g->req, &flag, MPI_STATUS_IGNORE);
  double e = remat__now();
  exposed(rp, t, e, 1);
  if (check(rp, mrc, "gathering parameters")) {
    gather_close(rp, g);
    g->state = GATHER_NONE;
  } else if (flag) {
    gather_done(rp, g, e);
  }
}

static void gather_wait(remat_replicas *rp, gather_op *g) {
  if (g->state != GATHER_IN_FLIGHT) return;
  double t = remat__now();
  int mrc = MPI_Wait(&g->req, MPI_STATUS_IGNORE);
  double e = remat__now();
  exposed(rp, t, e, 1);
  remat__rp_span(rp, REMAT__EV_WAIT, REMAT__TRACK_MAIN, t, e, rp->micro, -1);
  if (check(rp, mrc, "gathering parameters")) {
    gather_close(rp, g);
    g->state = GATHER_NONE;
  } else {
    gather_done(rp, g, e);
  }
}

/* Request i's gather is posted unless it already was (ahead, by request
 * i - 1). */
static void gather_ensure(remat_replicas *rp, int phase, int64_t i) {
  gather_op *g = &rp->gat[i & 1];
  if (g->state != GATHER_NONE && (g->phase != phase || g->index != i)) { /* never, in order */
    gather_wait(rp, g);
    g->state = GATHER_NONE;
  }
  if (g->state == GATHER_NONE && !rp->rc) gather_post(rp, phase, i);
}

/* ZeRO 3: unit u rebuilt from every replica's shard, in its slot. The next
 * request's gather is posted before this one is waited for, when its slot
 * is free, so that it travels while this unit computes. */
const float *remat__rp_on_params(void *ctx, int64_t u, int phase) {
  remat_replicas *rp = ctx;
  int64_t i = request_index(rp, phase, u);
  float *dst = rp->gather[rp->slot[phase][i]];
  if (rp->rc) return dst; /* the step is lost; the failure is reported after it */
  gather_ensure(rp, phase, i);
  if (rp->prefetch[phase][i]) gather_ensure(rp, phase, i + 1);
  gather_wait(rp, &rp->gat[i & 1]);
  rp->gat[i & 1].state = GATHER_NONE; /* in use until the next request */
  return dst;
}

/* Between the model's kernels: MPI_Test moves what is in flight on. */
void remat__rp_on_progress(void *ctx) {
  remat_replicas *rp = ctx;
  if (rp->rc) return;
  reduce_test(rp);
  gather_test(rp, &rp->gat[0]);
  gather_test(rp, &rp->gat[1]);
}
