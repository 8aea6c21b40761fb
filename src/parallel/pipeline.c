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
 * Under zb-h1 and zbv the stream also holds W k, the kept blocks' weight
 * gradients its B put off (remat__model_stage_backward_input and _weight):
 * a slot lives from F to B, a W record (k mod wdeferred) from B to W; Bs
 * and Ws each run in micro-batch order, so the gradients are the whole
 * backward's, bit for bit. Under a stream the rank's chunks hold their
 * slots and records in one pool (rank_pool.c), each placed at its F or B.
 *
 * Under interleaved 1F1B and zbv a rank runs several model chunks, virtual
 * stages (remat_schedule_virtual_stage): chunk 0 is the trainer's model,
 * the others are the pipeline's, each with its own arena and all borrowing
 * chunk 0's transient workspace. "Stage s - 1" and "s + 1" above are then
 * the neighbouring virtual stages, wherever they run; between two chunks
 * of one rank (zbv's turn) the hand-over is a copy. Each chunk has its own
 * send buffers and residual gradient, the norm takes every chunk's layers
 * in model order, and every chunk is updated with it.
 * Sends are non-blocking. A send buffer (the output, the residual
 * gradient) is reused only after its previous send completed; every stream
 * consumes messages in the order its neighbour produces them, so none can
 * wait on a peer that waits on it.
 *
 * Bits: micro-batch k gets the dropout stream of micro-batch k of one
 * process with K = M; each stage adds its gradients over k in order;
 * the tied embedding's two gradient sums are exchanged between the first and
 * the last stage and added (embedding + head, commutative: the same bits on
 * both); the norm adds every stage's per-layer sums in model order. So
 * losses, norms and parameters equal one process's.
 *
 * On a P x D grid (grid.c) this is the pipeline of replica r, one of D: its
 * micro-batch k is micro-batch k D + r of the step (every rank draws all D,
 * keeps its own), with that micro-batch's dropout stream; the last stages
 * add their losses across the replicas in micro-batch order; the tied
 * gradient is exchanged over the elements the replica owns. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
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
  int act_count; /* floats of one (B, T, C) message (a rank's rows under SP) */
  /* every rank's F, B, W stream (none for 1f1b, gpipe: remat_schedule_op) */
  remat_schedule_streams zb;
  int split;                 /* the stream has W (the schedule's row: zb-h1, zbv) */
  int64_t wdef[REMAT_MAX_STAGES]; /* each chunk's W records (0: W runs with B) */
  /* The rank's chunks (interleaved: v of them, virtual stages s, s + P, ...;
   * else one): cm[0] is the trainer's model, the others the pipeline's own,
   * each with its arena, borrowing cm[0]'s residual gradient and workspace.
   * slots[c]: chunk c's micro-batches in flight; send_chunk[c] and
   * send_grad[c]: the last sends of its output and of its residual gradient
   * (each chunk has both buffers: with one for all, two ranks could each
   * wait for the other to take a gradient before taking the other's). */
  int64_t v, nv;
  remat_model *cm[REMAT_MAX_STAGES];
  int64_t slots_of[REMAT_MAX_STAGES];
  MPI_Request send_chunk[REMAT_MAX_STAGES], send_grad[REMAT_MAX_STAGES];
  remat__window lent_chunk[REMAT_MAX_STAGES], lent_grad[REMAT_MAX_STAGES]; /* sends' windows */
  int emb_chunk, head_chunk; /* the rank's chunk with the embedding, the head; -1: none */
  double wait_s;
  remat__trace trace; /* on a grid the stage's replica runtime records here too */
  int64_t step;       /* the step the spans belong to (0-based; set as it starts) */
  size_t fixed_bytes, wrec_bytes[REMAT_MAX_STAGES]; /* [c]: one micro-batch's W records */
  uint64_t live; /* bytes of the slots and W records in use */
  remat__rank_pool pool; /* the chunks' slots and W records (remat_stage.slots_pooled) */
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
                                  .step = pl->step, .micro = micro, .value = value,
                                  .kind = (int16_t)kind,
                                  .track = kind == EV_RECOMPUTE ? REMAT__TRACK_RECOMPUTE
                                                                : REMAT__TRACK_MAIN,
                                  .layer = -1});
}

/* Chunk c takes (+1) or frees (-1) slot j (of its own bytes) and W records. */
static void arena_counter(remat_pipeline *pl, double t, int c, int64_t j, int delta, int wrecs) {
  size_t bytes = remat_memplan_slot(remat_model_memplan(pl->cm[c]), j).bytes;
  pl->live += (uint64_t)delta * bytes + (uint64_t)wrecs * pl->wrec_bytes[c];
  record(pl, EV_ARENA, t, t, -1, pl->fixed_bytes + pl->live);
}

/* ------------------------------------------------------- point to point */

/* A window on n floats of the stage's arena for a message, and its end. */
static float *lend(const remat_pipeline *pl, float *at, size_t n, int access, remat__window *w) {
  return remat__window_open(pl->m, w, at, n * sizeof(float), access);
}

static void give_back(const remat_pipeline *pl, remat__window *w) {
  remat__window_close(pl->m, w);
}

static int wait_req(remat_pipeline *pl, MPI_Request *r, remat__window *lent, int kind, int64_t micro,
                    remat_error *err) {
  if (*r == MPI_REQUEST_NULL) return 0;
  double t = remat__now();
  int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
  give_back(pl, lent);
  double e = remat__now();
  pl->wait_s += e - t;
  record(pl, kind, t, e, micro, 0);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "waiting for a send to finish");
}

/* A message's tag: its receiving virtual stage, micro-batch and direction
 * (micro-batches far apart never meet between two ranks). */
static int tag_of(const remat_pipeline *pl, int64_t k, int64_t vs, int backward) {
  return (int)(2 * ((k % 4096) * pl->nv + vs) + backward);
}

static int recv_from(remat_pipeline *pl, float *buf, int peer, int tag, int kind, int64_t micro,
                     remat_error *err) {
  double t = remat__now();
  remat__window lent;
  int rc = MPI_Recv(lend(pl, buf, (size_t)pl->act_count, REMAT_MAP_WRITE, &lent), pl->act_count,
                    MPI_FLOAT, peer, tag, pl->d->comm, MPI_STATUS_IGNORE);
  give_back(pl, &lent);
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

/* The send's window stays lent until wait_req sees it done. */
static int send_to(remat_pipeline *pl, float *buf, int peer, int tag, MPI_Request *r,
                   remat__window *lent, remat_error *err) {
  int rc = MPI_Isend(lend(pl, buf, (size_t)pl->act_count, REMAT_MAP_READ, lent), pl->act_count,
                     MPI_FLOAT, peer, tag, pl->d->comm, r);
  if (rc != MPI_SUCCESS) give_back(pl, lent);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "sending to a neighbouring stage");
}

/* ------------------------------------------------------- the step's ops */

/* The stage's q-th operation: its micro-batch, its chunk and its kind
 * (remat_op_kind). */
static int op_at(const remat_pipeline *pl, int64_t q, int64_t *k, int *c) {
  *c = 0;
  if (pl->zb.len) {
    const remat_schedule_step *o = &pl->zb.ops[(int64_t)pl->s * pl->zb.len + q];
    *k = o->mb;
    *c = o->chunk;
    return o->kind;
  }
  int bwd;
  remat_schedule_op(pl->sp->schedule, pl->P, pl->M, pl->s, q, k, &bwd);
  return bwd ? REMAT_OP_B : REMAT_OP_F;
}

/* The rank of virtual stage vs (which 0), and its chunk there (1). */
static int place_of(const remat_pipeline *pl, int64_t vs, int which) {
  int64_t rc[2];
  remat_schedule_rank_of(pl->sp->schedule, pl->P, vs, &rc[0], &rc[1]);
  return (int)rc[which];
}
static int rank_of(const remat_pipeline *pl, int64_t vs) { return place_of(pl, vs, 0); }
static int chunk_of(const remat_pipeline *pl, int64_t vs) { return place_of(pl, vs, 1); }

/* Bytes of one boundary message (fp32 in either precision). */
static size_t act_bytes(const remat_pipeline *pl) { return (size_t)pl->act_count * sizeof(float); }

/* This micro-batch's tokens: every rank draws every micro-batch once, at
 * the forward of the chunk that takes data (the embedding's, else the
 * head's, else the first), so all loaders stay in step. The inputs go to
 * the embedding's slot, the targets to the head's (under zbv rank 0 holds
 * both: the head's slot is the micro-batch's from here, as
 * remat_schedule_streams_alive counts it). */
static int draw(remat_pipeline *pl, int64_t k, int c, remat_error *err) {
  int e = pl->emb_chunk, h = pl->head_chunk;
  if (c != (e >= 0 ? e : h >= 0 ? h : 0)) return 0;
  for (int64_t x = 0; x < pl->R; x++) { /* every replica's */
    int mine = x == pl->rep;
    int32_t *in = mine && e >= 0 ? remat__model_slot_inputs(pl->cm[e], k % pl->slots_of[e]) : NULL;
    int32_t *tg = mine && h >= 0 ? remat__model_slot_targets(pl->cm[h], k % pl->slots_of[h]) : NULL;
    int rc = remat__trainer_next_batch(pl->tr, k * pl->R + x, in, tg, err);
    if (rc) return rc;
  }
  return 0;
}

/* Forward k of chunk c: its data, its input, the forward, its output on
 * its way. An input from the rank's own other chunk (zbv's turn) is copied
 * from that chunk's output, which no forward of it has overwritten since
 * (check_local). */
static int forward_op(remat_pipeline *pl, const remat_train_opts *o, int64_t k, int c,
                      remat_error *err) {
  remat_model *m = pl->cm[c];
  int64_t vs = remat_schedule_virtual_stage(pl->sp->schedule, pl->P, pl->s, c);
  int64_t slot = k % pl->slots_of[c], micro = k * pl->R + pl->rep; /* in the step */
  remat__rank_pool_forward(&pl->pool, pl->cm, c, k);
  int rc = draw(pl, k, c, err);
  if (rc) return rc;
  if (vs > 0 && rank_of(pl, vs - 1) == pl->s)
    remat__model_backend(m)->copy(remat__model_stage_input(m, slot),
                                  remat__model_stage_output(pl->cm[chunk_of(pl, vs - 1)]),
                                  act_bytes(pl));
  else if (vs > 0 && (rc = recv_from(pl, remat__model_stage_input(m, slot), rank_of(pl, vs - 1),
                                     tag_of(pl, k, vs, 0), EV_RECV_ACT, micro, err)))
    return rc;
  /* the forward writes the output buffer: its last send must be done */
  int last = vs == pl->nv - 1 || rank_of(pl, vs + 1) == pl->s;
  if (!last &&
      (rc = wait_req(pl, &pl->send_chunk[c], &pl->lent_chunk[c], EV_SEND_ACT, micro, err)))
    return rc;
  double t = remat__now();
  arena_counter(pl, t, c, slot, 1, 0);
  remat__model_stage_forward(m, slot, (uint32_t)micro, &o->hp);
  record(pl, EV_FORWARD, t, remat__now(), micro, 0);
  if (!last && (rc = send_to(pl, remat__model_stage_output(m), rank_of(pl, vs + 1),
                             tag_of(pl, k, vs + 1, 0), &pl->send_chunk[c], &pl->lent_chunk[c],
                             err)))
    return rc;
  return 0;
}

/* Backward k of chunk c (B alone under zb-h1): the gradient of its output
 * in, the backward, the gradient of its input on its way from the chunk's
 * residual gradient. */
static int backward_op(remat_pipeline *pl, const remat_train_opts *o, int64_t k, int c,
                       double *loss_sum, remat_error *err) {
  remat_model *m = pl->cm[c];
  int64_t vs = remat_schedule_virtual_stage(pl->sp->schedule, pl->P, pl->s, c);
  int64_t slot = k % pl->slots_of[c], micro = k * pl->R + pl->rep;
  int rc;
  if ((rc = wait_req(pl, &pl->send_grad[c], &pl->lent_grad[c], EV_SEND_GRAD, micro, err))) return rc;
  if (vs < pl->nv - 1 && rank_of(pl, vs + 1) == pl->s)
    remat__model_backend(m)->copy(remat__model_dresid(m),
                                  remat__model_dresid(pl->cm[chunk_of(pl, vs + 1)]), act_bytes(pl));
  else if (vs < pl->nv - 1 &&
           (rc = recv_from(pl, remat__model_dresid(m), rank_of(pl, vs + 1), tag_of(pl, k, vs, 1),
                           EV_RECV_GRAD, micro, err)))
    return rc;
  double t = remat__now(), rs0 = remat__model_recompute_seconds(m);
  float dloss = remat__trainer_dloss(pl->tr);
  int64_t wd = pl->wdef[c]; /* 0: this chunk's W runs with its B */
  remat__rank_pool_backward(&pl->pool, pl->cm, c, k);
  double loss = wd ? remat__model_stage_backward_input(m, slot, k % wd, (uint32_t)micro, dloss,
                                                       &o->hp)
                   : remat__model_stage_backward(m, slot, (uint32_t)micro, dloss, &o->hp);
  double e = remat__now(), rs = remat__model_recompute_seconds(m) - rs0;
  record(pl, wd ? EV_INPUT_GRAD : EV_BACKWARD, t, e, micro, 0);
  /* recompute is interleaved with the blocks' backwards; drawn as one
   * span of its total at the backward's start */
  if (rs > 0) record(pl, EV_RECOMPUTE, t, t + rs, micro, 0);
  arena_counter(pl, e, c, slot, -1, wd ? 1 : 0); /* the slot is free, the W record taken */
  const double N = (double)(o->B * o->T);
  if (vs == pl->nv - 1 && pl->R > 1) pl->losses[pl->rep * pl->M + k] = (float)(loss / N);
  else if (vs == pl->nv - 1) *loss_sum += (float)(loss / N); /* as one process rounds it */
  if (vs > 0 && rank_of(pl, vs - 1) != pl->s &&
      (rc = send_to(pl, remat__model_dresid(m), rank_of(pl, vs - 1), tag_of(pl, k, vs - 1, 1),
                    &pl->send_grad[c], &pl->lent_grad[c], err)))
    return rc;
  return 0;
}

static int run_microbatches(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err) {
  remat_pipeline *pl = ctx;
  const remat_train_opts *o = remat_trainer_opts(tr);
  int rc;
  pl->step = remat_model_step(pl->m);
  pl->wait_s = 0;
  for (int64_t c = 1; c < pl->v; c++) remat_model_zero_grad(pl->cm[c]); /* the trainer: its own */
  const int64_t nops = pl->zb.len ? pl->zb.len : 2 * pl->M;
  for (int64_t q = 0; q < nops; q++) {
    int64_t k;
    int c, kind = op_at(pl, q, &k, &c);
    if (kind == REMAT_OP_W) {
      remat_model *m = pl->cm[c];
      int64_t micro = k * pl->R + pl->rep;
      double t = remat__now(), rs0 = remat__model_recompute_seconds(m);
      if (pl->wdef[c]) /* else its B ran the whole backward */
        remat__model_stage_backward_weight(m, k % pl->wdef[c], (uint32_t)micro, &o->hp);
      double e = remat__now(), rs = remat__model_recompute_seconds(m) - rs0;
      if (pl->wdef[c]) record(pl, EV_WEIGHT_GRAD, t, e, micro, 0);
      if (rs > 0) record(pl, EV_RECOMPUTE, t, t + rs, micro, 0);
      arena_counter(pl, e, c, 0, 0, pl->wdef[c] ? -1 : 0);
    } else if (kind == REMAT_OP_F) {
      if ((rc = forward_op(pl, o, k, c, err))) return rc;
    } else if ((rc = backward_op(pl, o, k, c, loss_sum, err))) {
      return rc;
    }
  }
  for (int64_t c = 0; c < pl->v; c++)
    if ((rc = wait_req(pl, &pl->send_chunk[c], &pl->lent_chunk[c], EV_SEND_ACT, -1, err)) ||
        (rc = wait_req(pl, &pl->send_grad[c], &pl->lent_grad[c], EV_SEND_GRAD, -1, err)))
      return rc;
  int last = rank_of(pl, pl->nv - 1);
  if (pl->s == last && pl->R > 1) { /* every replica's, in micro-batch order */
    REMAT_ASSERT(pl->reps);
    rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, pl->losses, (int)pl->M, MPI_FLOAT,
                       pl->reps->comm);
    if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "sharing the losses");
    for (int64_t k = 0; k < pl->M; k++)
      for (int64_t x = 0; x < pl->R; x++) *loss_sum += pl->losses[x * pl->M + k];
  }
  /* every rank reports the whole model's loss */
  rc = MPI_Bcast(loss_sum, 1, MPI_DOUBLE, last, pl->d->comm);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "sharing the loss");
}

/* The tied embedding: the first virtual stage's rank holds the embedding's
 * gradient sum, the last one's the head's; each sends its own and adds the
 * other's, piece by piece through the workspace (free between steps). g:
 * n floats of it, the same elements on both sides. */
int remat__pipeline_exchange_tied(remat_pipeline *pl, float *g, size_t n, remat_error *err) {
  int first = rank_of(pl, 0), last = rank_of(pl, pl->nv - 1);
  if (pl->s != first && pl->s != last) return 0;
  REMAT_ASSERT(first != last);
  double t = remat__now();
  int peer = pl->s == first ? last : first;
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
    remat__window mine_lent, theirs_lent;
    int rc = MPI_Sendrecv(lend(pl, g + off, (size_t)c, REMAT_MAP_READ, &mine_lent), c, MPI_FLOAT,
                          peer, 7, lend(pl, buf, (size_t)c, REMAT_MAP_WRITE, &theirs_lent), c,
                          MPI_FLOAT, peer, 7, pl->d->comm, MPI_STATUS_IGNORE);
    give_back(pl, &theirs_lent);
    give_back(pl, &mine_lent);
    if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "exchanging the tied embedding's gradient");
    /* embedding + head on both sides (a float sum is the same either way
     * round) */
    remat__model_backend(pl->m)->add(g + off, buf, (size_t)c, 1, 0);
  }
  record(pl, EV_REDUCE, t, remat__now(), -1, 0);
  return 0;
}

/* After the backwards: the tied gradient's exchange (by the chunk with the
 * embedding or the head), then what the trainer does for its own model
 * done for the rank's other chunks. */
static int exchange_tied(void *ctx, remat_trainer *tr, remat_error *err) {
  (void)tr;
  remat_pipeline *pl = ctx;
  int c = pl->emb_chunk >= 0 ? pl->emb_chunk : pl->head_chunk;
  if (!remat__tied(remat_model_config(pl->m))) { /* an untied head: nothing to exchange */
  } else if (pl->emb_chunk >= 0 && pl->head_chunk >= 0) { /* zbv: both sums here */
    remat__model_add_tied(pl->cm[pl->emb_chunk], pl->cm[pl->head_chunk]);
  } else if (c >= 0) {
    size_t n;
    remat__model_tensor(pl->cm[c], REMAT_P_WTE, &n);
    int rc = remat__pipeline_exchange_tied(pl, remat__model_tensor_grad(pl->cm[c], REMAT_P_WTE),
                                           n, err);
    if (rc) return rc;
  }
  for (int64_t x = 1; x < pl->v; x++) remat_model_sum_tied(pl->cm[x]);
  return 0;
}

/* Virtual stage vs's per-layer sums: its blocks, the embedding, the head. */
static int layers_of(const remat_pipeline *pl, int64_t vs) {
  return (int)(pl->sp->num_blocks[vs] + (vs == 0) + (vs == pl->nv - 1));
}

/* The squared norm: every stage's per-layer sums (its chunks' in chunk
 * order; layers: the first chunk's, or all of them), added in model order. */
int remat__pipeline_norm(remat_pipeline *pl, const double *layers, int64_t n, double *total,
                         remat_error *err) {
  double t = remat__now();
  int counts[REMAT_MAX_STAGES], displs[REMAT_MAX_STAGES], all_n = 0;
  int64_t at[REMAT_MAX_STAGES]; /* each virtual stage's first sum in all */
  for (int r = 0; r < pl->P; r++) {
    displs[r] = all_n;
    counts[r] = 0;
    for (int64_t c = 0; c < pl->v; c++) {
      int64_t vs = remat_schedule_virtual_stage(pl->sp->schedule, pl->P, r, c);
      at[vs] = all_n + counts[r];
      counts[r] += layers_of(pl, vs);
    }
    all_n += counts[r];
  }
  REMAT_ASSERT(all_n <= 4096 + 2);
  double mine[4096 + 2], all[4096 + 2];
  REMAT_ASSERT(n <= counts[pl->s]);
  memcpy(mine, layers, (size_t)n * sizeof(double));
  for (int64_t c = 1; c < pl->v && n < counts[pl->s]; c++)
    n += remat__model_grad_sumsq_layers(pl->cm[c], mine + n);
  REMAT_ASSERT(counts[pl->s] == n);
  int rc = MPI_Allgatherv(mine, (int)n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE,
                          pl->d->comm);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "summing the gradient norm");
  double sum = 0;
  for (int64_t vs = 0; vs < pl->nv; vs++)
    for (int k = 0; k < layers_of(pl, vs); k++) sum += all[at[vs] + k];
  *total = sum;
  record(pl, EV_REDUCE, t, remat__now(), -1, 0);
  return 0;
}

static int norm_sumsq(void *ctx, remat_trainer *tr, const double *layers, int64_t n,
                      double *total, remat_error *err) {
  (void)tr;
  return remat__pipeline_norm(ctx, layers, n, total, err);
}

/* The update of every chunk of the rank, with the step's one norm (one
 * chunk: what the trainer would do itself), drawn as the step's last span. */
static int update_chunks(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err) {
  (void)err;
  remat_pipeline *pl = ctx;
  const remat_train_opts *o = remat_trainer_opts(tr);
  double t = remat__now();
  for (int64_t c = 0; c < pl->v; c++) remat_model_update(pl->cm[c], &o->hp, lr, norm);
  record(pl, EV_UPDATE, t, remat__now(), -1, 0);
  return 0;
}

/* ------------------------------------------------------------ lifetime */

/* Stage s's chunk c as the placement has it (v = 1: the stage itself). */
static remat_stage chunk_stage(const remat_placement *sp, int64_t s, int64_t c) {
  return sp->chunks > 1 ? remat_placement_chunk(sp, s, c) : whole_stage(sp, s);
}

/* Interleaved: the streams, and the rank's other chunks planned (their
 * arenas come with remat_pipeline_allocate). */
static int make_chunks(remat_pipeline *pl, remat_error *err) {
  const remat_placement *sp = pl->sp;
  const remat_train_opts *o = remat_trainer_opts(pl->tr);
  int rc = remat_schedule_streams_build(&pl->zb, sp->schedule, pl->P, pl->M, pl->v, err);
  for (int64_t c = 1; !rc && c < pl->v; c++) {
    remat_stage st = chunk_stage(sp, pl->s, c);
    st.work_min = remat_model_stage(pl->m)->work_min;
    st.slots_pooled = remat_model_stage(pl->m)->slots_pooled;
    rc = remat__model_plan_on(&pl->cm[c], remat_model_config(pl->m), o->B, o->T, &st,
                              remat__model_backend(pl->m), err);
  }
  return rc;
}

/* Whether the trainer and the placement make a pipeline on these ranks. */
static int check_create(remat_dist *d, remat_trainer *tr, const remat_placement *sp,
                        remat_error *err) {
  remat_model *m = remat_trainer_model(tr);
  const remat_train_opts *o = remat_trainer_opts(tr);
  const remat_stage *st = remat_model_stage(m);
  if (sp->stages != d->size)
    return remat__errorf(err, REMAT_EINVAL, "a split of %lld stages needs %lld ranks, not %d",
                         (long long)sp->stages, (long long)sp->stages, d->size);
  int64_t v = sp->chunks > 1 ? sp->chunks : 1;
  if (sp->stages < 2 || sp->stages * v > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "a pipeline has 2 to %d stages, not %lld",
                         REMAT_MAX_STAGES, (long long)sp->stages);
  const remat_schedule_info *row = remat_schedule_get(sp->schedule);
  char names[96];
  if (!row || (v > 1) != (row->chunks_max != 1))
    return remat__errorf(err, REMAT_EINVAL, "the pipeline runs model chunks under %s only (%lld "
                         "chunks under %s)",
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_CHUNKED, "and"),
                         (long long)v, remat_plan_schedule_name(sp->schedule));
  /* on a grid the trainer's step holds every replica's micro-batches */
  int64_t R = st->replicas > 1 ? st->replicas : 1;
  if (o->grad_accum != sp->microbatches * R)
    return remat__errorf(err, REMAT_EINVAL,
                         "the trainer runs %lld micro-batches per step but the split %lld on "
                         "each of %lld replicas",
                         (long long)o->grad_accum, (long long)sp->microbatches, (long long)R);
  if (row->runs != REMAT_RUNS_ANY && R > 1)
    return remat__errorf(err, REMAT_EINVAL, "%s runs a pipeline without replicas",
                         remat_plan_schedule_name(sp->schedule));
  remat_stage want = chunk_stage(sp, d->rank, 0);
  if (st->first_block != want.first_block || st->num_blocks != want.num_blocks ||
      st->has_embedding != want.has_embedding || st->has_head != want.has_head ||
      st->inflight != want.inflight || st->wdeferred != want.wdeferred || st->work_borrowed)
    return remat__errorf(err, REMAT_EINVAL, "rank %d's trainer is not stage %d of the split",
                         d->rank, d->rank);
  double count = (double)o->B * (double)o->T * (double)remat_model_config(m)->channels;
  if (count > (double)INT_MAX)
    return remat__errorf(err, REMAT_ERANGE,
                         "a micro-batch's activations (%.0f floats) exceed one MPI message",
                         count);
  return 0;
}

/* A hand-over between two chunks of one rank (zbv's turn) is a copy at the
 * consumer's operation from the producer's buffer, which must hold it
 * still: between F(k) of the producer and F(k) of the consumer no other
 * forward of the producer, between B(k) of the producer of a gradient and
 * B(k) of its consumer no other backward of it. */
static int check_local(const remat_pipeline *pl, remat_error *err) {
  for (int64_t vs = 0; vs + 1 < pl->nv; vs++) {
    if (rank_of(pl, vs) != pl->s || rank_of(pl, vs + 1) != pl->s) continue;
    int lo = chunk_of(pl, vs), hi = chunk_of(pl, vs + 1);
    int64_t pend_f = -1, pend_b = -1; /* a hand-over not yet taken */
    for (int64_t q = 0; q < pl->zb.len; q++) {
      const remat_schedule_step *o = &pl->zb.ops[(int64_t)pl->s * pl->zb.len + q];
      int bad = 0;
      if (o->kind == REMAT_OP_F && o->chunk == lo) bad = pend_f >= 0, pend_f = o->mb;
      if (o->kind == REMAT_OP_F && o->chunk == hi) bad = pend_f != o->mb, pend_f = -1;
      if (o->kind == REMAT_OP_B && o->chunk == hi) bad = pend_b >= 0, pend_b = o->mb;
      if (o->kind == REMAT_OP_B && o->chunk == lo) bad = pend_b != o->mb, pend_b = -1;
      if (bad)
        return remat__errorf(err, REMAT_EINVAL, "rank %d's stream overwrites a hand-over between "
                             "its chunks %d and %d before it is taken", pl->s, lo, hi);
    }
  }
  return 0;
}

/* The rank's chunks: slots, bytes, the data's and the tied matrix's. */
static void chunk_tables(remat_pipeline *pl) {
  pl->emb_chunk = pl->head_chunk = -1;
  for (int64_t c = 0; c < pl->v; c++) {
    const remat_memplan *mp = remat_model_memplan(pl->cm[c]);
    const remat_stage *st = remat_model_stage(pl->cm[c]);
    pl->slots_of[c] = st->inflight;
    pl->wdef[c] = st->wdeferred;
    pl->wrec_bytes[c] = remat_memplan_record_bytes(mp);
    pl->fixed_bytes += remat_memplan_peak_bytes(mp) - remat_memplan_buf(mp, REMAT_BUF_SLOTS).bytes -
                       remat_memplan_buf(mp, REMAT_BUF_WREC).bytes;
    if (st->has_embedding) pl->emb_chunk = (int)c;
    if (st->has_head) pl->head_chunk = (int)c;
  }
}

int remat_pipeline_create(remat_pipeline **out, remat_dist *d, remat_trainer *tr,
                          const remat_placement *sp, remat_error *err) {
  *out = NULL;
  int rc = check_create(d, tr, sp, err);
  if (rc) return rc;
  remat_model *m = remat_trainer_model(tr);
  const remat_train_opts *o = remat_trainer_opts(tr);
  const remat_stage *st = remat_model_stage(m);
  remat_pipeline *pl = remat__calloc(1, sizeof *pl);
  if (!pl) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  pl->d = d;
  pl->tr = tr;
  pl->m = m;
  pl->sp = sp;
  pl->s = d->rank;
  pl->P = d->size;
  pl->M = sp->microbatches;
  pl->v = sp->chunks > 1 ? sp->chunks : 1;
  pl->nv = pl->P * pl->v;
  pl->cm[0] = m;
  const remat_config *cfg = remat_model_config(m);
  pl->act_count = (int)(o->B * o->T / remat__sp(cfg) * cfg->channels);
  for (int64_t c = 0; c < pl->v; c++) pl->send_chunk[c] = pl->send_grad[c] = MPI_REQUEST_NULL;
  const remat_schedule_info *row = remat_schedule_get(sp->schedule);
  pl->split = row->split;
  pl->R = st->replicas > 1 ? st->replicas : 1;
  pl->rep = pl->R > 1 ? st->replica : 0;
  pl->world = d;
  if (pl->v > 1) {
    rc = make_chunks(pl, err);
    if (!rc) rc = check_local(pl, err);
    if (!rc) remat__trainer_set_companions(tr, pl->cm + 1, (int)pl->v - 1);
  } else if (!row->op) { /* one chunk, an order only its streams give (zb-h1) */
    rc = remat_schedule_streams_build(&pl->zb, sp->schedule, pl->P, pl->M, 1, err);
    if (!rc && row->split && st->wdeferred < 1)
      rc = remat__errorf(err, REMAT_EINVAL, "rank %d's stage defers no W under %s", pl->s,
                         row->name);
  }
  if (!rc && st->slots_pooled) rc = remat__rank_pool_plan(&pl->pool, &pl->zb, pl->s, pl->cm, err);
  if (!rc && pl->R > 1 && !(pl->losses = remat__calloc((size_t)(pl->R * pl->M), sizeof(float))))
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
  if (rc) {
    remat_pipeline_destroy(pl);
    return rc;
  }
  chunk_tables(pl);
  remat__trainer_ops ops = {.micro_batches = run_microbatches, .after_backward = exchange_tied,
                           .norm_sumsq = norm_sumsq, .update = update_chunks, .ctx = pl};
  remat__trainer_set_ops(tr, &ops);
  *out = pl;
  return 0;
}

size_t remat_pipeline_chunk_bytes(const remat_pipeline *pl) {
  size_t n = pl->pool.layout.bytes;
  for (int64_t c = 1; c < pl->v; c++) n += remat_memplan_peak_bytes(remat_model_memplan(pl->cm[c]));
  return n;
}

size_t remat_pipeline_chunk_high_water(remat_pipeline *pl) {
  size_t n = remat__rank_pool_high_water(&pl->pool, remat__model_backend(pl->m));
  for (int64_t c = 1; c < pl->v; c++) n += remat_model_arena_high_water(pl->cm[c]);
  return n;
}

int remat_pipeline_allocate(remat_pipeline *pl, remat_error *err) {
  for (int64_t c = 1; c < pl->v; c++) {
    int rc = remat__model_allocate(pl->cm[c], err);
    if (rc) return rc;
    remat__model_borrow_workspace(pl->cm[c], pl->m);
    /* zbv's first rank: the head reads the embedding's (chunk 0's) tied matrix */
    if (remat__stage_tied_borrowed(remat_model_config(pl->m), remat_model_stage(pl->cm[c])))
      remat__model_borrow_tied(pl->cm[c], pl->m);
  }
  return remat_model_stage(pl->m)->slots_pooled ? remat__rank_pool_allocate(&pl->pool, pl->cm, err)
                                                 : 0;
}

int remat_pipeline_load(remat_pipeline *pl, const float *full, uint64_t seed) {
  for (int64_t c = 1; c < pl->v; c++) {
    remat_model *m = pl->cm[c];
    if (full) remat__model_params_from_full(m, full);
    else remat_model_init_weights(m, seed);
  }
  return 0;
}

void remat_pipeline_destroy(remat_pipeline *pl) {
  if (!pl) return;
  for (int64_t c = 0; c < pl->v; c++) {
    if (pl->send_chunk[c] != MPI_REQUEST_NULL) MPI_Cancel(&pl->send_chunk[c]);
    if (pl->send_grad[c] != MPI_REQUEST_NULL) MPI_Cancel(&pl->send_grad[c]);
    give_back(pl, &pl->lent_chunk[c]);
    give_back(pl, &pl->lent_grad[c]);
  }
  remat__trainer_set_ops(pl->tr, &(remat__trainer_ops){0});
  remat__trainer_set_companions(pl->tr, NULL, 0);
  for (int64_t c = 1; c < pl->v; c++) remat_model_destroy(pl->cm[c]);
  remat__rank_pool_free(&pl->pool, remat__model_backend(pl->m));
  remat__trace_free(&pl->trace);
  remat_schedule_streams_free(&pl->zb);
  remat__free(pl->losses);
  remat__free(pl);
}

double remat_pipeline_wait_seconds(const remat_pipeline *pl) { return pl->wait_s; }
int64_t remat__pipeline_chunk_models(remat_pipeline *pl, remat_model **out) {
  return memcpy(out, pl->cm, (size_t)pl->v * sizeof *out), pl->v;
}

/* Big buffers move in pieces an int can count. */
#define PIECE ((size_t)1 << 28)

/* Interleaved: every rank's chunks in chunk order to rank 0, its own last
 * with chunk 0 (the embedding's) the very last, so that its tied matrix is
 * the one written (the head's copy is equal, bit for bit). */
static int gather_chunks(remat_pipeline *pl, float *full, remat_error *err) {
  const remat_config *cfg = remat_model_config(pl->m);
  for (int r = pl->s == 0 ? 1 : pl->s; r < (pl->s == 0 ? pl->P : pl->s + 1); r++)
    for (int64_t c = 0; c < pl->v; c++) {
      remat_stage st = chunk_stage(pl->sp, r, c);
      size_t n = remat__stage_num_params(cfg, &st);
      remat__window lent = {0};
      float *p = pl->s == 0 ? remat__malloc(n * sizeof(float))
                            : lend(pl, remat_model_params(pl->cm[c]), n, REMAT_MAP_READ, &lent);
      if (!p) return remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the parameters");
      int rc = 0;
      for (size_t off = 0; off < n && !rc; off += PIECE) {
        int k = (int)(n - off < PIECE ? n - off : PIECE);
        rc = pl->s == 0 ? MPI_Recv(p + off, k, MPI_FLOAT, r, 11, pl->d->comm, MPI_STATUS_IGNORE)
                        : MPI_Send(p + off, k, MPI_FLOAT, 0, 11, pl->d->comm);
      }
      give_back(pl, &lent);
      if (pl->s == 0 && rc == MPI_SUCCESS) remat__stage_params_to_full(cfg, &st, p, full);
      if (pl->s == 0) remat__free(p);
      if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "gathering the parameters");
    }
  for (int64_t c = pl->v - 1; pl->s == 0 && c >= 0; c--) remat__model_params_to_full(pl->cm[c], full);
  return 0;
}

int remat_pipeline_gather_params(remat_pipeline *pl, float *full, remat_error *err) {
  if (pl->v > 1) return gather_chunks(pl, full, err);
  size_t n = remat_model_num_params(pl->m);
  remat__window lent;
  int rc = remat__pipeline_gather_flat(
      pl, lend(pl, remat_model_params(pl->m), n, REMAT_MAP_READ, &lent), full, err);
  give_back(pl, &lent);
  return rc;
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
  /* each operation: its span, waits, recompute and the arena counter */
  size_t per_step = (pl->zb.len ? (size_t)pl->zb.len * 5 : (size_t)pl->M * 8) + 8;
  if (pl->R > 1) { /* a grid: the replica runtime's spans too (remat_replicas_trace_start) */
    size_t L = (size_t)pl->sp->num_blocks[pl->s] + 2;
    per_step += (size_t)pl->M * (8 * L + 24) + 4 * L + 24;
  }
  int rc = remat__trace_start(&pl->trace, pl->world->comm, (size_t)max_steps * per_step + 16, err);
  if (rc) return rc;
  arena_counter(pl, pl->trace.t0, 0, 0, 0, 0);
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
