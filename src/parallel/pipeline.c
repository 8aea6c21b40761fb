/* pipeline.c: a trainer's step as one stage of a pipeline over MPI.
 *
 * Each rank executes its stage's instruction stream (remat_schedule_op: the
 * same stream the planner's simulator times). Around the operations:
 *   forward k:  stage 0 takes micro-batch k's inputs from its loader, the
 *               last stage its targets (every rank draws every micro-batch,
 *               so all loaders stay in step); a later stage receives its
 *               input from stage s - 1 straight into slot k mod n; an
 *               earlier stage sends its output to stage s + 1.
 *   backward k: a stage before the last receives the gradient of its output
 *               into the residual gradient; a stage after the first sends
 *               the gradient of its input to stage s - 1 from there.
 * Under zb-h1 the stream also holds W k, the weight gradients of
 * micro-batch k, which its B put off (remat__model_stage_backward_input and
 * _weight): a slot lives from its forward to its W, and W runs in
 * micro-batch order, so the gradients are the whole backward's, bit for
 * bit; B and W are apart in the trace.
 * Sends are non-blocking. A send buffer (the output, the residual gradient)
 * is reused only after its previous send completed; since every stream
 * consumes messages in the order its neighbour produces them, no stream can
 * wait on a peer that waits on it, under either schedule.
 *
 * Bits: micro-batch k gets the dropout stream of micro-batch k of one
 * process with K = M; each stage accumulates its gradients over k in order;
 * the tied embedding's two gradient sums are exchanged between the first and
 * the last stage and added (embedding + head, commutative, so both get the
 * same bits); the norm adds every stage's per-layer sums in model order. So
 * losses, norms and parameters equal one process's.
 *
 * On a P x D grid (grid.c) this is the pipeline of replica r, one of D: its
 * micro-batch k is micro-batch k D + r of the step (every rank draws all D
 * of them, keeps its own), with that micro-batch's dropout stream; the last
 * stages share their losses across the replicas and add them in
 * micro-batch order; the tied gradient is exchanged over the elements the
 * replica owns. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "parallel/parallel_internal.h"

enum { EV_FORWARD = REMAT__EV_FORWARD, EV_BACKWARD = REMAT__EV_BACKWARD,
       EV_INPUT_GRAD = REMAT__EV_INPUT_GRAD, EV_WEIGHT_GRAD = REMAT__EV_WEIGHT_GRAD,
       EV_RECOMPUTE = REMAT__EV_RECOMPUTE, EV_RECV_ACT = REMAT__EV_RECV_ACT,
       EV_SEND_ACT = REMAT__EV_SEND_ACT, EV_RECV_GRAD = REMAT__EV_RECV_GRAD,
       EV_SEND_GRAD = REMAT__EV_SEND_GRAD, EV_REDUCE = REMAT__EV_REDUCE,
       EV_UPDATE = REMAT__EV_UPDATE, EV_ARENA = REMAT__EV_ARENA };

struct remat_pipeline {
  remat_dist *d;
  remat_trainer *tr;
  remat_model *m;
  const remat_placement *sp; /* the caller's, borrowed */
  int s, P;
  int64_t M, slots;
  /* a grid: this pipeline is replica `rep` of R (R = 1: none); reps holds
   * the D ranks of this stage, world every rank (the trace's) */
  int64_t R, rep;
  remat_dist *reps, *world;
  float *losses; /* (R, M) the last stages' micro-batch losses */
  int act_count; /* floats of one (B, T, C) message */
  MPI_Request send_act, send_grad;
  remat_schedule_streams zb; /* zb-h1: every rank's stream of F, B and W (len 0 otherwise) */
  int64_t wdeferred;         /* zb-h1: W records of the stage */
  double wait_s;
  /* trace */
  remat__trace trace; /* on a grid the stage's replica runtime records here too */
  double norm_end;
  size_t fixed_bytes, slot_bytes;
  int64_t live;
};

/* Stage s of the placement with whole tensors: on a grid the replica
 * runtime shards them, not the pipeline. */
static remat_stage whole_stage(const remat_placement *sp, int64_t s) {
  remat_stage st = remat_placement_stage(sp, s, 0);
  if (st.replicas > 1) {
    st.replicas = st.replica = 0;
    st.zero = 0;
    st.accumulate = sp->microbatches > 1;
  }
  return st;
}

/* ------------------------------------------------------------ tracing */

static void record(remat_pipeline *pl, int kind, double t_start, double t_end, int64_t micro,
                   uint64_t value) {
  remat__trace_add(&pl->trace,
                   (remat__event){.ts = t_start, .dur = t_end - t_start,
                                  .step = remat_model_step(pl->m), .micro = micro, .value = value,
                                  .kind = (int16_t)kind,
                                  .track = kind == EV_RECOMPUTE ? REMAT__TRACK_RECOMPUTE
                                                                : REMAT__TRACK_MAIN,
                                  .layer = -1});
}

static void arena_counter(remat_pipeline *pl, double t, int64_t delta) {
  pl->live += delta;
  record(pl, EV_ARENA, t, t, -1, pl->fixed_bytes + (uint64_t)pl->live * pl->slot_bytes);
}

/* ------------------------------------------------------- point to point */

static int wait_req(remat_pipeline *pl, MPI_Request *r, int kind, int64_t micro, remat_error *err) {
  if (*r == MPI_REQUEST_NULL) return 0;
  double t = remat__now();
  int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
  double e = remat__now();
  pl->wait_s += e - t;
  record(pl, kind, t, e, micro, 0);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "waiting for a send to finish");
}

static int recv_from(remat_pipeline *pl, float *buf, int peer, int tag, int kind, int64_t micro,
                     remat_error *err) {
  double t = remat__now();
  int rc = MPI_Recv(buf, pl->act_count, MPI_FLOAT, peer, tag, pl->d->comm, MPI_STATUS_IGNORE);
  double e = remat__now();
  pl->wait_s += e - t;
  record(pl, kind, t, e, micro, 0);
  if (rc != MPI_SUCCESS) {
    remat__mpi_error(err, rc, "receiving from a neighbouring stage");
    return remat__errorf(err, REMAT_EIO,
                         "stage %d could not receive from stage %d (did that rank die?): %s",
                         pl->s, peer, err ? err->msg : "");
  }
  return 0;
}

static int send_to(remat_pipeline *pl, const float *buf, int peer, int tag, MPI_Request *r,
                   remat_error *err) {
  int rc = MPI_Isend(buf, pl->act_count, MPI_FLOAT, peer, tag, pl->d->comm, r);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "sending to a neighbouring stage");
}

/* ------------------------------------------------------- the step's ops */

/* The stage's q-th operation: its micro-batch and its kind (remat_op_kind). */
static int op_at(const remat_pipeline *pl, int64_t q, int64_t *k) {
  if (pl->zb.len) {
    const remat_schedule_step *o = &pl->zb.ops[(int64_t)pl->s * pl->zb.len + q];
    *k = o->mb;
    return o->kind;
  }
  int bwd;
  remat_schedule_op(pl->sp->schedule, pl->P, pl->M, pl->s, q, k, &bwd);
  return bwd ? REMAT_OP_B : REMAT_OP_F;
}

static int run_microbatches(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err) {
  remat_pipeline *pl = ctx;
  remat_model *m = pl->m;
  const remat_train_opts *o = remat_trainer_opts(tr);
  const double N = (double)(o->B * o->T);
  int s = pl->s, P = pl->P, rc;
  double t_step = remat__now();
  if (pl->norm_end > 0) record(pl, EV_UPDATE, pl->norm_end, t_step, -1, 0);
  pl->wait_s = 0;
  const int64_t nops = pl->zb.len ? pl->zb.len : 2 * pl->M;
  for (int64_t q = 0; q < nops; q++) {
    int64_t k;
    int kind = op_at(pl, q, &k);
    int64_t slot = k % pl->slots, micro = k * pl->R + pl->rep; /* in the step */
    if (kind == REMAT_OP_W) {
      double t = remat__now(), rs0 = remat__model_recompute_seconds(m);
      remat__model_stage_backward_weight(m, slot, k % pl->wdeferred, (uint32_t)micro, &o->hp);
      double e = remat__now(), rs = remat__model_recompute_seconds(m) - rs0;
      record(pl, EV_WEIGHT_GRAD, t, e, micro, 0);
      if (rs > 0) record(pl, EV_RECOMPUTE, t, t + rs, micro, 0);
      arena_counter(pl, e, -1);
      continue;
    }
    if (kind == REMAT_OP_F) {
      for (int64_t x = 0; x < pl->R; x++) { /* every replica's, to keep the loaders in step */
        int mine = x == pl->rep;
        if ((rc = remat__trainer_next_batch(tr, k * pl->R + x,
                                            mine ? remat__model_slot_inputs(m, slot) : NULL,
                                            mine ? remat__model_slot_targets(m, slot) : NULL, err)))
          return rc;
      }
      if (s > 0 &&
          (rc = recv_from(pl, remat__model_stage_input(m, slot), s - 1, (int)(2 * k), EV_RECV_ACT,
                          micro, err)))
        return rc;
      /* the forward writes the output buffer: its last send must be done */
      if (s < P - 1 && (rc = wait_req(pl, &pl->send_act, EV_SEND_ACT, micro, err))) return rc;
      double t = remat__now();
      arena_counter(pl, t, 1);
      remat__model_stage_forward(m, slot, (uint32_t)micro, &o->hp);
      record(pl, EV_FORWARD, t, remat__now(), micro, 0);
      if (s < P - 1 && (rc = send_to(pl, remat__model_stage_output(m), s + 1, (int)(2 * k),
                                     &pl->send_act, err)))
        return rc;
    } else {
      if ((rc = wait_req(pl, &pl->send_grad, EV_SEND_GRAD, micro, err))) return rc;
      if (s < P - 1 && (rc = recv_from(pl, remat__model_dresid(m), s + 1, (int)(2 * k + 1),
                                       EV_RECV_GRAD, micro, err)))
        return rc;
      double t = remat__now(), rs0 = remat__model_recompute_seconds(m);
      float dloss = remat__trainer_dloss(tr);
      double loss = pl->zb.len ? remat__model_stage_backward_input(m, slot, k % pl->wdeferred,
                                                                   (uint32_t)micro, dloss, &o->hp)
                               : remat__model_stage_backward(m, slot, (uint32_t)micro, dloss,
                                                             &o->hp);
      double e = remat__now(), rs = remat__model_recompute_seconds(m) - rs0;
      record(pl, pl->zb.len ? EV_INPUT_GRAD : EV_BACKWARD, t, e, micro, 0);
      /* recompute is interleaved with the blocks' backwards; drawn as one
       * span of its total at the backward's start */
      if (rs > 0) record(pl, EV_RECOMPUTE, t, t + rs, micro, 0);
      if (!pl->zb.len) arena_counter(pl, e, -1); /* under zb-h1, at its W */
      if (s == P - 1 && pl->R > 1) pl->losses[pl->rep * pl->M + k] = (float)(loss / N);
      else if (s == P - 1) *loss_sum += (float)(loss / N); /* as one process rounds it */
      if (s > 0 && (rc = send_to(pl, remat__model_dresid(m), s - 1, (int)(2 * k + 1),
                                 &pl->send_grad, err)))
        return rc;
    }
  }
  if ((rc = wait_req(pl, &pl->send_act, EV_SEND_ACT, -1, err)) ||
      (rc = wait_req(pl, &pl->send_grad, EV_SEND_GRAD, -1, err)))
    return rc;
  if (s == P - 1 && pl->R > 1) { /* every replica's, in micro-batch order */
    REMAT_ASSERT(pl->reps);
    rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, pl->losses, (int)pl->M, MPI_FLOAT,
                       pl->reps->comm);
    if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "sharing the losses");
    for (int64_t k = 0; k < pl->M; k++)
      for (int64_t x = 0; x < pl->R; x++) *loss_sum += pl->losses[x * pl->M + k];
  }
  /* every rank reports the whole model's loss */
  rc = MPI_Bcast(loss_sum, 1, MPI_DOUBLE, P - 1, pl->d->comm);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "sharing the loss");
}

/* The tied embedding: stage 0 holds the embedding's gradient sum, the last
 * stage the head's; each sends its own and adds the other's, chunk by chunk
 * through the workspace (free between steps). g: n floats of it, the same
 * elements on both sides. */
int remat__pipeline_exchange_tied(remat_pipeline *pl, float *g, size_t n, remat_error *err) {
  if (pl->s != 0 && pl->s != pl->P - 1) return 0;
  double t = remat__now();
  int peer = pl->s == 0 ? pl->P - 1 : 0;
  size_t room;
  float *buf = remat__model_workspace(pl->m, &room);
  /* both sides move pieces of the smaller of their two rooms */
  uint64_t mine = room / sizeof(float), theirs = 0;
  int mrc = MPI_Sendrecv(&mine, 1, MPI_UINT64_T, peer, 6, &theirs, 1, MPI_UINT64_T, peer, 6,
                         pl->d->comm, MPI_STATUS_IGNORE);
  if (mrc != MPI_SUCCESS) return remat__mpi_error(err, mrc, "exchanging the tied embedding's gradient");
  size_t chunk = (size_t)(mine < theirs ? mine : theirs);
  if (chunk > (size_t)INT_MAX) chunk = (size_t)INT_MAX;
  REMAT_ASSERT(chunk > 0);
  for (size_t off = 0; off < n; off += chunk) {
    int c = (int)(n - off < chunk ? n - off : chunk);
    int rc = MPI_Sendrecv(g + off, c, MPI_FLOAT, peer, 7, buf, c, MPI_FLOAT, peer, 7,
                          pl->d->comm, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "exchanging the tied embedding's gradient");
    float *gg = g + off;
    if (pl->s == 0)
      for (int i = 0; i < c; i++) gg[i] = gg[i] + buf[i]; /* embedding + head */
    else
      for (int i = 0; i < c; i++) gg[i] = buf[i] + gg[i];
  }
  record(pl, EV_REDUCE, t, remat__now(), -1, 0);
  return 0;
}

static int exchange_tied(void *ctx, remat_trainer *tr, remat_error *err) {
  (void)tr;
  remat_pipeline *pl = ctx;
  if (pl->s != 0 && pl->s != pl->P - 1) return 0;
  size_t n;
  remat__model_tensor(pl->m, REMAT_P_WTE, &n);
  return remat__pipeline_exchange_tied(pl, remat__model_tensor_grad(pl->m, REMAT_P_WTE), n, err);
}

/* The squared norm: every stage's per-layer sums, added in model order. */
int remat__pipeline_norm(remat_pipeline *pl, const double *layers, int64_t n, double *total,
                         remat_error *err) {
  double t = remat__now();
  int counts[REMAT_MAX_STAGES], displs[REMAT_MAX_STAGES], all_n = 0;
  for (int r = 0; r < pl->P; r++) {
    counts[r] = (int)(pl->sp->num_blocks[r] + (r == 0) + (r == pl->P - 1));
    displs[r] = all_n;
    all_n += counts[r];
  }
  REMAT_ASSERT(counts[pl->s] == n && all_n <= 4096 + 2);
  double all[4096 + 2];
  int rc = MPI_Allgatherv(layers, (int)n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE,
                          pl->d->comm);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "summing the gradient norm");
  double sum = 0;
  for (int k = 0; k < all_n; k++) sum += all[k];
  *total = sum;
  pl->norm_end = remat__now();
  record(pl, EV_REDUCE, t, pl->norm_end, -1, 0);
  return 0;
}

static int norm_sumsq(void *ctx, remat_trainer *tr, const double *layers, int64_t n,
                      double *total, remat_error *err) {
  (void)tr;
  return remat__pipeline_norm(ctx, layers, n, total, err);
}

/* ------------------------------------------------------------ lifetime */

int remat_pipeline_create(remat_pipeline **out, remat_dist *d, remat_trainer *tr,
                          const remat_placement *sp, remat_error *err) {
  *out = NULL;
  remat_model *m = remat_trainer_model(tr);
  const remat_train_opts *o = remat_trainer_opts(tr);
  const remat_stage *st = remat_model_stage(m);
  if (sp->stages != d->size)
    return remat__errorf(err, REMAT_EINVAL, "a split of %lld stages needs %lld ranks, not %d",
                         (long long)sp->stages, (long long)sp->stages, d->size);
  if (sp->stages < 2 || sp->stages > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "a pipeline has 2 to %d stages, not %lld",
                         REMAT_MAX_STAGES, (long long)sp->stages);
  /* on a grid the trainer's step holds every replica's micro-batches */
  int64_t R = st->replicas > 1 ? st->replicas : 1;
  if (o->grad_accum != sp->microbatches * R)
    return remat__errorf(err, REMAT_EINVAL,
                         "the trainer runs %lld micro-batches per step but the split %lld on "
                         "each of %lld replicas",
                         (long long)o->grad_accum, (long long)sp->microbatches, (long long)R);
  remat_stage want = whole_stage(sp, d->rank);
  if (st->first_block != want.first_block || st->num_blocks != want.num_blocks ||
      st->has_embedding != want.has_embedding || st->has_head != want.has_head ||
      st->inflight != want.inflight || st->wdeferred != want.wdeferred)
    return remat__errorf(err, REMAT_EINVAL, "rank %d's trainer is not stage %d of the split",
                         d->rank, d->rank);
  double count = (double)o->B * (double)o->T * (double)remat_model_config(m)->channels;
  if (count > (double)INT_MAX)
    return remat__errorf(err, REMAT_ERANGE,
                         "a micro-batch's activations (%.0f floats) exceed one MPI message",
                         count);
  remat_pipeline *pl = remat__calloc(1, sizeof *pl);
  if (!pl) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  pl->d = d;
  pl->tr = tr;
  pl->m = m;
  pl->sp = sp;
  pl->s = d->rank;
  pl->P = d->size;
  pl->M = sp->microbatches;
  pl->slots = st->inflight;
  pl->act_count = (int)count;
  pl->send_act = pl->send_grad = MPI_REQUEST_NULL;
  pl->wdeferred = st->wdeferred;
  if (sp->schedule == REMAT_SCHED_ZBH1) {
    int rc = R > 1 ? remat__errorf(err, REMAT_EINVAL, "zb-h1 runs a pipeline without replicas")
                   : remat_schedule_streams_build(&pl->zb, REMAT_SCHED_ZBH1, pl->P, pl->M, 1,
                                                  err);
    if (!rc && pl->wdeferred < 1)
      rc = remat__errorf(err, REMAT_EINVAL, "rank %d's stage defers no W under zb-h1", pl->s);
    if (rc) {
      remat_schedule_streams_free(&pl->zb);
      remat__free(pl);
      return rc;
    }
  }
  pl->R = R;
  pl->rep = R > 1 ? st->replica : 0;
  pl->world = d;
  if (R > 1 && !(pl->losses = remat__calloc((size_t)(R * pl->M), sizeof(float)))) {
    remat__free(pl);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  const remat_memplan *mp = remat_model_memplan(m);
  pl->slot_bytes = remat_memplan_slot_bytes(mp);
  pl->fixed_bytes = remat_memplan_peak_bytes(mp) -
                    remat_memplan_buf(mp, REMAT_BUF_SLOTS).bytes;
  remat__trainer_ops ops = {.micro_batches = run_microbatches, .after_backward = exchange_tied,
                           .norm_sumsq = norm_sumsq, .ctx = pl};
  remat__trainer_set_ops(tr, &ops);
  *out = pl;
  return 0;
}

void remat_pipeline_destroy(remat_pipeline *pl) {
  if (!pl) return;
  if (pl->send_act != MPI_REQUEST_NULL) MPI_Cancel(&pl->send_act);
  if (pl->send_grad != MPI_REQUEST_NULL) MPI_Cancel(&pl->send_grad);
  remat__trainer_set_ops(pl->tr, &(remat__trainer_ops){0});
  remat__trace_free(&pl->trace);
  remat_schedule_streams_free(&pl->zb);
  remat__free(pl->losses);
  remat__free(pl);
}

double remat_pipeline_wait_seconds(const remat_pipeline *pl) { return pl->wait_s; }

/* Big buffers move in pieces an int can count. */
#define PIECE ((size_t)1 << 28)

int remat_pipeline_gather_params(remat_pipeline *pl, float *full, remat_error *err) {
  return remat__pipeline_gather_flat(pl, remat_model_params(pl->m), full, err);
}

int remat__pipeline_gather_flat(remat_pipeline *pl, const float *p, float *full,
                                remat_error *err) {
  remat_model *m = pl->m;
  const remat_config *cfg = remat_model_config(m);
  remat_stage mine = whole_stage(pl->sp, pl->s);
  if (pl->s != 0) {
    size_t n = remat__stage_num_params(cfg, &mine);
    for (size_t off = 0; off < n; off += PIECE) {
      int c = (int)(n - off < PIECE ? n - off : PIECE);
      int rc = MPI_Send(p + off, c, MPI_FLOAT, 0, 11, pl->d->comm);
      if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "gathering the parameters");
    }
    return 0;
  }
  for (int r = 1; r < pl->P; r++) {
    remat_stage st = whole_stage(pl->sp, r);
    size_t n = remat__stage_num_params(cfg, &st);
    float *tmp = remat__malloc(n * sizeof(float));
    if (!tmp) return remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the parameters");
    for (size_t off = 0; off < n; off += PIECE) {
      int c = (int)(n - off < PIECE ? n - off : PIECE);
      int rc = MPI_Recv(tmp + off, c, MPI_FLOAT, r, 11, pl->d->comm, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        remat__free(tmp);
        return remat__mpi_error(err, rc, "gathering the parameters");
      }
    }
    remat__stage_params_to_full(cfg, &st, tmp, full);
    remat__free(tmp);
  }
  /* last, so stage 0's tied matrix is the one written (the last stage's
   * copy is equal, bit for bit) */
  remat__stage_params_to_full(cfg, &mine, p, full);
  return 0;
}

/* ------------------------------------------------------------- trace */

int remat_pipeline_trace_start(remat_pipeline *pl, int64_t max_steps, remat_error *err) {
  size_t per_step = (size_t)pl->M * (pl->zb.len ? 10 : 8) + 8; /* zb-h1: W and its recompute */
  if (pl->R > 1) { /* a grid: the replica runtime's spans too (remat_replicas_trace_start) */
    size_t L = (size_t)pl->sp->num_blocks[pl->s] + 2;
    per_step += (size_t)pl->M * (8 * L + 24) + 4 * L + 24;
  }
  int rc = remat__trace_start(&pl->trace, pl->world->comm, (size_t)max_steps * per_step + 16, err);
  if (rc) return rc;
  arena_counter(pl, pl->trace.t0, 0);
  return 0;
}

int remat_pipeline_trace_write(remat_pipeline *pl, const char *path, remat_error *err) {
  /* every rank's track, to world rank 0 */
  return remat__trace_write(&pl->trace, pl->world->comm, pl->P, pl->R, path, err);
}

/* ---------------------------------------------------------- the grid */

int remat__pipeline_micro_batches(void *ctx, remat_trainer *tr, double *loss_sum,
                                  remat_error *err) {
  return run_microbatches(ctx, tr, loss_sum, err);
}

void remat__pipeline_join(remat_pipeline *pl, remat_dist *world, remat_dist *reps) {
  REMAT_ASSERT(reps->size == pl->R && reps->rank == pl->rep);
  pl->world = world;
  pl->reps = reps;
}

remat__trace *remat__pipeline_trace(remat_pipeline *pl) { return &pl->trace; }
