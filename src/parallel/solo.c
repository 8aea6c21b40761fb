/* solo.c: one process's step drawn on the timeline the pipeline and the
 * replicas draw (trace.c), without MPI. The step is the trainer's own
 * (remat_trainer_step without hooks): its K micro-batches one after
 * another, each a forward and a backward (remat_model_forward_backward in
 * its two parts, so they are spans of their own), then the update; the
 * losses, norms and weights are the same, bit for bit. The arena counter
 * rises by a micro-batch's activations (its slot) as its forward starts
 * and falls back as its backward ends, as a replica's does. */
#include "base/base.h"
#include "parallel/parallel_internal.h"

struct remat_solo {
  remat_trainer *tr;
  remat_model *m;
  remat__trace trace;
  int64_t step; /* the step the spans belong to (0-based; set as it starts) */
  /* the arena's bytes live between micro-batches, and what one
   * micro-batch's activations add from its forward to its backward's end */
  uint64_t fixed_bytes, slot_bytes;
};

static void span(remat_solo *so, int kind, double t0, double t1, int64_t micro) {
  remat__trace_add(&so->trace,
                   (remat__event){.ts = t0, .dur = t1 - t0, .step = so->step, .micro = micro,
                                  .kind = (int16_t)kind,
                                  .track = kind == REMAT__EV_RECOMPUTE ? REMAT__TRACK_RECOMPUTE
                                                                       : REMAT__TRACK_MAIN,
                                  .layer = -1});
}

static void arena_counter(remat_solo *so, double t, int in_use) {
  remat__trace_add(&so->trace,
                   (remat__event){.ts = t, .step = so->step, .micro = -1, .layer = -1,
                                  .kind = REMAT__EV_ARENA,
                                  .value = so->fixed_bytes + (in_use ? so->slot_bytes : 0)});
}

/* The trainer's local loop, each micro-batch's forward and backward timed
 * apart (the loss rounded as remat_model_forward_backward rounds it). */
static int micro_batches(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err) {
  remat_solo *so = ctx;
  remat_model *m = so->m;
  const remat_train_opts *o = remat_trainer_opts(tr);
  so->step = remat_model_step(m);
  for (int64_t k = 0; k < o->grad_accum; k++) {
    int rc = remat__trainer_next_batch(tr, k, remat_model_inputs(m), remat_model_targets(m), err);
    if (rc) return rc;
    double t = remat__now();
    arena_counter(so, t, 1);
    remat__model_stage_forward(m, 0, (uint32_t)k, &o->hp);
    double tb = remat__now(), rs0 = remat__model_recompute_seconds(m);
    span(so, REMAT__EV_FORWARD, t, tb, k);
    double loss =
        remat__model_stage_backward(m, 0, (uint32_t)k, remat__trainer_dloss(tr), &o->hp);
    double e = remat__now(), rs = remat__model_recompute_seconds(m) - rs0;
    span(so, REMAT__EV_BACKWARD, tb, e, k);
    /* interleaved with the blocks' backwards; drawn as one span of its
     * total at the backward's start */
    if (rs > 0) span(so, REMAT__EV_RECOMPUTE, tb, tb + rs, k);
    arena_counter(so, e, 0);
    *loss_sum += (float)(loss / (double)(o->B * o->T));
  }
  return 0;
}

static int update(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err) {
  (void)err;
  remat_solo *so = ctx;
  double t = remat__now();
  remat_model_update(so->m, &remat_trainer_opts(tr)->hp, lr, norm);
  span(so, REMAT__EV_UPDATE, t, remat__now(), -1);
  return 0;
}

int remat_solo_create(remat_solo **out, remat_trainer *tr, int64_t max_steps, remat_error *err) {
  *out = NULL;
  remat_model *m = remat_trainer_model(tr);
  const remat_stage *st = remat_model_stage(m);
  const remat_train_opts *o = remat_trainer_opts(tr);
  if (!st->has_embedding || !st->has_head || st->replicas > 1)
    return remat__errorf(err, REMAT_EINVAL, "a timeline of one process draws the whole model");
  if (max_steps < 0)
    return remat__errorf(err, REMAT_EINVAL, "a timeline of %lld steps", (long long)max_steps);
  remat_solo *so = remat__calloc(1, sizeof *so);
  if (!so) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  so->tr = tr;
  so->m = m;
  /* per micro-batch a forward, a backward, a recompute and two samples;
   * per step the update */
  size_t per_step = (size_t)o->grad_accum * 5 + 2;
  int rc = remat__trace_start(&so->trace, MPI_COMM_NULL, (size_t)max_steps * per_step + 16, err);
  if (rc) {
    remat_solo_destroy(so);
    return rc;
  }
  /* the arena but its slot (activations) is live from the start */
  const remat_memplan *mp = remat_model_memplan(m);
  so->slot_bytes = remat_memplan_buf(mp, REMAT_BUF_SLOTS).bytes;
  so->fixed_bytes = remat_memplan_peak_bytes(mp) - so->slot_bytes;
  arena_counter(so, so->trace.t0, 0);
  remat__trainer_set_ops(tr, &(remat__trainer_ops){.micro_batches = micro_batches,
                                                    .update = update, .ctx = so});
  *out = so;
  return 0;
}

void remat_solo_destroy(remat_solo *so) {
  if (!so) return;
  remat__trainer_set_ops(so->tr, &(remat__trainer_ops){0});
  remat__trace_free(&so->trace);
  remat__free(so);
}

remat__trace *remat__solo_trace(remat_solo *so) { return &so->trace; }

int remat__solo_restart(remat_solo *so, remat_error *err) {
  int rc = remat__trace_start(&so->trace, MPI_COMM_NULL, so->trace.cap, err);
  if (!rc) arena_counter(so, so->trace.t0, 0);
  return rc;
}

int remat_solo_trace_write(remat_solo *so, const char *path, remat_error *err) {
  return remat__trace_write(&so->trace, MPI_COMM_NULL, 1, 1, path, err);
}
