/* job_internal.h: what the job's files share: the job itself and the calls
 * between its files, which go one way: step.c on checkpoint.c; start.c on
 * place.c and checkpoint.c; all of them on desc.c (the description and the
 * ranks' agreement), which calls none of them.
 *
 *   desc.c        the description's rules, the ranks started and agreed
 *   start.c       ranks laid out, a resume found, shape, data, the runtime,
 *                 the arena and the weights loaded
 *   place.c       each block's policy and each stage's blocks; the arenas
 *                 every rank will plan
 *   checkpoint.c  weights gathered and saved, checkpoints written
 *   step.c        the step, and the figures a front end reads
 *   settings.c    a run's settings beside its checkpoint */
#ifndef REMAT_JOB_INTERNAL_H
#define REMAT_JOB_INTERNAL_H

#include "remat/job.h"

/* What identifies a file whatever its path. */
typedef struct remat__data_id {
  uint64_t bytes;
  uint32_t crc;
  int known;
} remat__data_id;

struct remat_job {
  remat_job_desc d; /* the caller's strings are borrowed */
  remat_run_kind kind;
  remat_dist *dist; /* NULL in one process */
  int rank, ranks;
  remat_config cfg;
  remat_checkpoint_reader rd; /* the model file, open from its shape to its weights */
  remat_tokens tok;
  const char *source;
  char source_buf[4096]; /* the source of several shards, with their count */
  remat_budgets budgets; /* d.memory, parsed once (n 0: none) */
  remat_placement place;
  remat_plan_problem pb; /* a pipeline's */
  remat_plan plan;
  int have_pb, have_plan;
  remat_trainer *tr;
  remat_pipeline *pipe;
  remat_replicas *dp;
  remat_grid *grid; /* a grid: pipe and dp are its parts */
  remat_solo *solo; /* one process with a trace */
  remat_tensor_group *tg; /* tensor ranks */
  remat_dist *tensor;     /* their ranks (a part of dist) */
  double tensor_link;     /* their link, bytes/s as measured (0: not)*/
  size_t planned;
  /* a resume: the step directory, its step and its weights */
  char resume_dir[4096], resume_model[4096];
  int64_t resume_step;
  int resumed;
  char resume_note[2048]; /* what the resume passed over, or that it could not verify */
  int64_t last_checkpoint; /* the step of the last checkpoint written */
  int held_out; /* a resume of a run that held tokens out: the split stays */
  /* the token source's size and CRC32C (data_known 0: the embedded corpus),
   * saved with each checkpoint; a resume's saved ones, checked against it */
  remat__data_id data, saved_data;
  /* val_data's tokens (have_val_tok), their identity and a resume's saved one */
  remat_tokens val_tok;
  int have_val_tok;
  remat__data_id val, saved_val;
  const char *val_source;
  /* the checkpoint directory's lock (rank 0; -1: none), what was done there */
  int ckpt_lock;
  char ckpt_note[1024];
  int other_flags; /* the lowest rank started with another description, else -1 */
  int ranks_differ; /* started on another rank count than the description's */
};

/* desc.c. Every rank's status: the lowest failing rank's, on every rank,
 * with its message (one process: rc). */
int remat__job_agree(remat_job *job, int rc, remat_error *err);
/* v: the model chunks each stage runs. */
int64_t remat__job_chunks(const remat_job_desc *d);
/* How the job's messages name the setting key (d->setting_name's, else the
 * key itself). */
const char *remat__job_name(const remat_job_desc *d, const char *key);

/* place.c. Each block's policy and each stage's blocks, the way the
 * description says (budgets parsed into job->budgets). */
int remat__job_place(remat_job *job, remat_error *err);
/* Interleaved: the workspace rank's chunks share, the largest of theirs. */
int remat__job_chunks_workspace(const remat_job *job, int rank, size_t *work, remat_error *err);

/* checkpoint.c. This rank's state file in the checkpoint resumed from. */
int remat__job_resume_state_path(const remat_job *job, char *path, size_t cap, remat_error *err);
/* A checkpoint of the step just taken (agreed among the ranks). */
int remat__job_write_checkpoint(remat_job *job, remat_error *err);

/* settings.c. Writes the description's settings (the shape as L,C,NH,V,T
 * from cfg) to path, atomically: the `settings` file of a checkpoint.
 * val-frac is saved as the share held out (0 when held_out is 0), which a
 * resume keeps whatever its evaluation interval. Paths are saved resolved
 * (absolute); data (known) as the lines data-bytes and data-crc, val
 * (known) as val-data-bytes and val-data-crc. */
int remat__job_settings_save(const char *path, const remat_job_desc *d, const remat_config *cfg,
                             int held_out, const remat__data_id *data, const remat__data_id *val,
                             remat_error *err);

#endif
