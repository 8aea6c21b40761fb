/* step.c: a job's steps (remat/job.h): every rank steps or stops alike,
 * the held-out loss and the checkpoints fall due, every rank's arena and
 * communication are gathered; and the figures a front end reads of the
 * job. The step itself is the trainer's. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "job/job_internal.h"

/* ------------------------------------------------------------ stepping */

int remat_job_done(const remat_job *job) {
  return remat_trainer_steps_done(job->tr) >= job->d.train.steps;
}

/* Each rank's planned and measured arena and its recomputing in the step
 * (rank 0 gets them; the seconds as nanoseconds). */
static int gather_ranks(remat_job *job, remat_job_step_info *in, remat_error *err) {
  size_t planned = remat_memplan_peak_bytes(remat_trainer_memplan(job->tr));
  size_t hw = remat_model_arena_high_water(remat_trainer_model(job->tr));
  if (job->pipe) { /* interleaved: the rank's other chunks' arenas too */
    planned += remat_pipeline_chunk_bytes(job->pipe);
    hw += remat_pipeline_chunk_high_water(job->pipe);
  }
  if (!job->dist) {
    in->rank_planned[0] = planned;
    in->rank_measured[0] = hw;
    in->rank_recompute[0] = in->stats.recompute_seconds;
    return 0;
  }
  size_t ns[REMAT_MAX_STAGES] = {0};
  int rc = remat_dist_gather_sizes(job->dist, planned, in->rank_planned, err);
  if (!rc) rc = remat_dist_gather_sizes(job->dist, hw, in->rank_measured, err);
  if (!rc)
    rc = remat_dist_gather_sizes(job->dist, (size_t)llround(in->stats.recompute_seconds * 1e9),
                                 ns, err);
  for (int k = 0; k < REMAT_MAX_STAGES; k++) in->rank_recompute[k] = (double)ns[k] / 1e9;
  return rc;
}

int remat_job_step(remat_job *job, int stop, remat_job_step_info *in, remat_error *err) {
  const remat_job_desc *d = &job->d;
  memset(in, 0, sizeof *in);
  in->val_loss = NAN;
  int go = !stop; /* every rank stops at the same step */
  if (job->dist) remat_dist_all_ok(job->dist, go, &go);
  if (!go) {
    in->stopped = 1;
    return 0;
  }
  int rc = remat_trainer_step(job->tr, &in->stats, err);
  if (rc) return rc;
  int64_t step = in->stats.step;
  in->measured = remat_trainer_measured_peak_bytes(job->tr);
  if (job->pipe) /* the other chunks' arenas count as they were used, not as allocated */
    in->measured -= remat_pipeline_chunk_bytes(job->pipe) -
                    remat_pipeline_chunk_high_water(job->pipe);
  if ((rc = gather_ranks(job, in, err))) return rc;
  if (job->pipe) in->wait_seconds = remat_pipeline_wait_seconds(job->pipe);
  if (job->dp) {
    in->comm = remat_replicas_comm(job->dp);
    if ((rc = remat_replicas_comm_gather(job->dp, in->rank_comm, err))) return rc;
  }
  if (d->eval_every > 0 && (step % d->eval_every == 0 || step == d->train.steps) &&
      (rc = remat_trainer_evaluate(job->tr, &in->val_loss, err)))
    return rc;
  if (d->checkpoint_dir && (step % d->checkpoint_every == 0 || step == d->train.steps)) {
    if ((rc = remat__job_write_checkpoint(job, err))) { /* agreed: every rank knows */
      in->checkpoint_failed = 1;
      return rc;
    }
    in->checkpoint_step = step;
  }
  return 0;
}

int remat_job_trace_write(remat_job *job, const char *path, remat_error *err) {
  int rc = job->pipe   ? remat_pipeline_trace_write(job->pipe, path, err)
           : job->dp   ? remat_replicas_trace_write(job->dp, path, err)
           : job->solo ? remat_solo_trace_write(job->solo, path, err)
                       : remat__errorf(err, REMAT_EINVAL, "the job records no timeline (its "
                                       "description's trace is 0)");
  return remat__job_agree(job, rc, err); /* rank 0 writes the file: the others learn how it went */
}

/* ------------------------------------------------------------- figures */

remat_run_kind remat_job_kind(const remat_job *job) { return job->kind; }
int remat_job_rank(const remat_job *job) { return job->rank; }
int remat_job_ranks(const remat_job *job) { return job->ranks; }
const remat_job_desc *remat_job_description(const remat_job *job) { return &job->d; }
const remat_config *remat_job_config(const remat_job *job) { return &job->cfg; }
const char *remat_job_data_source(const remat_job *job) { return job->source; }
const remat_tokens *remat_job_tokens(const remat_job *job) { return &job->tok; }
const remat_placement *remat_job_placement(const remat_job *job) { return &job->place; }
const remat_plan_problem *remat_job_problem(const remat_job *job) {
  return job->have_pb ? &job->pb : NULL;
}
const remat_plan *remat_job_plan(const remat_job *job) {
  return job->have_plan ? &job->plan : NULL;
}
remat_trainer *remat_job_trainer(remat_job *job) { return job->tr; }
remat_pipeline *remat_job_pipeline(remat_job *job) { return job->pipe; }
remat_replicas *remat_job_replicas(remat_job *job) { return job->dp; }
size_t remat_job_planned_bytes(const remat_job *job) { return job->planned; }

const char *remat_job_checkpoint_note(const remat_job *job) {
  return job->ckpt_note[0] ? job->ckpt_note : NULL;
}

const char *remat_job_val_source(const remat_job *job, const remat_tokens **tokens) {
  if (tokens) *tokens = job->have_val_tok ? &job->val_tok : NULL;
  if (job->have_val_tok) return job->val_source;
  return job->d.eval_every > 0 || job->held_out ? "held out of the data" : NULL;
}

const char *remat_job_resumed_from(const remat_job *job, int64_t *step, const char **note) {
  *step = job->resumed ? job->resume_step : 0;
  if (note) *note = job->resumed && job->resume_note[0] ? job->resume_note : NULL;
  return job->resumed ? job->resume_dir : NULL;
}

