/* checkpoint.c: a job's weights and state out (remat/job.h): the whole
 * model gathered from every rank and saved by rank 0, and a checkpoint
 * directory per due step (the weights, each rank's state, the run's
 * settings, DONE last; the oldest beyond keep_checkpoints removed); the names of a rank's state file, which a resume
 * reads back. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "job/job_internal.h"
#include "model/model_runtime.h"
#include "train/train_runtime.h"
#include "remat/report.h"

static const char *state_name(const remat_job *job, char *buf, size_t cap) {
  if (job->ranks > 1) snprintf(buf, cap, "state_rank_%d.bin", job->rank);
  else snprintf(buf, cap, "state.bin");
  return buf;
}

/* This rank's state file in the checkpoint resumed from. */
int remat__job_resume_state_path(const remat_job *job, char *path, size_t cap, remat_error *err) {
  char name[64];
  int n = snprintf(path, cap, "%s/%s", job->resume_dir, state_name(job, name, sizeof name));
  return n < 0 || (size_t)n >= cap
             ? remat__errorf(err, REMAT_EINVAL, "the checkpoint's path is too long")
             : 0;
}

/* Interleaved: the workspace the rank's chunks share, the largest of
 * theirs (transient terms, without the residual gradient and the send
 * buffer each has). */
/* ------------------------------------------------------------ weights */

/* The whole model's weights at path in the given checkpoint format and
 * version. */
static int save_weights(remat_job *job, const char *path, int format, int version,
                        remat_error *err) {
  remat_config whole = job->cfg; /* a tensor rank's config is its shard's */
  whole.tensor_parallel = whole.sequence_parallel = 0;
  const remat_config *cfg = &whole;
  remat_model *m = remat_trainer_model(job->tr);
  if (!job->pipe && !job->dp && !job->tg) {
    const remat__backend *be = remat__model_backend(m);
    float *at = remat_model_params(m);
    size_t bytes = remat_model_num_params(m) * sizeof(float);
    float *host = be->map(at, bytes, REMAT_MAP_READ);
    int rc = remat_checkpoint_save_format(path, cfg, host, format, version, err);
    be->unmap(at, host, bytes, REMAT_MAP_READ);
    return rc;
  }
  float *full = job->rank == 0 ? malloc(remat_param_count(cfg) * sizeof(float)) : NULL;
  int rc = job->rank == 0 && !full
               ? remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the model to save it")
               : 0;
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  rc = job->tg     ? remat_tensor_group_gather_params(job->tg, full, err)
       : job->grid ? remat_grid_gather_params(job->grid, full, err)
       : job->pipe ? remat_pipeline_gather_params(job->pipe, full, err)
                   : remat_replicas_gather_params(job->dp, full, err);
  if (!rc && job->rank == 0)
    rc = remat_checkpoint_save_format(path, cfg, full, format, version, err);
  free(full);
  return remat__job_agree(job, rc, err);
}

int remat_job_save(remat_job *job, const char *path, remat_error *err) {
  return save_weights(job, path, job->d.save_format,
                      job->d.save_version ? job->d.save_version : REMAT_CKPT_VERSION, err);
}

/* A checkpoint directory for the step just taken: the weights (rank 0),
 * each rank's state, and DONE last, once every rank has written its part. */
int remat__job_write_checkpoint(remat_job *job, remat_error *err) {
  const char *dir = job->d.checkpoint_dir;
  int64_t step = remat_trainer_steps_done(job->tr);
  char path[4096], name[64];
  int rc = job->rank == 0 ? remat_checkpoint_dir_make(dir, step, err) : 0;
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  if (remat_checkpoint_dir_path(path, sizeof path, dir, step, "model.bin"))
    return remat__errorf(err, REMAT_EINVAL, "the checkpoint directory's path is too long");
  /* the family's own format in fp32: exact */
  if ((rc = save_weights(job, path, REMAT_FORMAT_AUTO, REMAT_CKPT_VERSION, err))) return rc;
  if (job->rank == 0) { /* rank 0's state names the weights it goes with */
    uint64_t size;
    uint32_t crc;
    rc = remat_file_checksum(path, "model file", "model file", &size, &crc, err);
    if (!rc) remat__trainer_bind_model(job->tr, crc);
  }
  remat_checkpoint_dir_path(path, sizeof path, dir, step, state_name(job, name, sizeof name));
  if (!rc) rc = remat_trainer_save_state(job->tr, path, job->rank, job->ranks, err);
  if (!rc && job->rank == 0) { /* the run's settings, for a resume that names only the dir */
    remat_checkpoint_dir_path(path, sizeof path, dir, step, "settings");
    rc = remat__job_settings_save(path, &job->d, &job->cfg,
                                   (job->d.eval_every > 0 || job->held_out) && !job->have_val_tok,
                                   &job->data,
                                   job->have_val_tok ? &job->val : NULL, err);
  }
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  /* every rank's files are written: one rank lists and seals them, with the
   * run the states name (they must all name one) */
  remat_checkpoint_dir_path(path, sizeof path, dir, step, NULL);
  rc = job->rank == 0 ? remat_checkpoint_seal(path, step, NULL, err) : 0;
  /* sealed: now the oldest beyond the number kept may go (the one resumed
   * from among them, a newer one standing in for it) */
  if (!rc && job->rank == 0)
    rc = remat_checkpoint_dir_prune(dir, step, job->d.keep_checkpoints, NULL, err);
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  /* Saving held a few file names for a moment: not part of a training
   * step, so not of its measured peak. */
  remat_heap_reset_peak();
  job->last_checkpoint = step;
  return 0;
}

int remat_job_checkpoint_now(remat_job *job, int64_t *step, remat_error *err) {
  *step = 0;
  int64_t done = remat_trainer_steps_done(job->tr);
  if (!job->d.checkpoint_dir || done == 0 || done == job->last_checkpoint) return 0;
  int rc = remat__job_write_checkpoint(job, err);
  if (!rc) *step = done;
  return rc;
}

