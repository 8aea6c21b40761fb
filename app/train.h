/* train.h: what the files of `remat train` share: its options (the job's
 * description, which the flags fill, and the front end's own) and the state
 * of a run, which cmd_train.c drives and train_show.c shows. */
#ifndef REMAT_APP_TRAIN_H
#define REMAT_APP_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "remat.h"
#include "train_sample.h"

typedef struct {
  remat_job_desc d; /* most flags go straight into the job's description */
  const char *save, *log, *trace, *schedule_name, *precision_name, *head_chunk_name;
  char precision_note[192]; /* what the run's header says of its precision: why it was chosen */
  double peak_gflops;
  int64_t sample_every;
  const char *save_precision; /* --save-precision: fp32 or bf16 */
  const char *save_format;    /* --save-format: llm.c, llama2c-v1, llama2c-legacy, auto */
  int threads, quiet, plan_only;
  int measure_peak; /* --measure-peak: measure the peak again, replacing the kept one */
  int measure_times; /* --measure-times: this machine's layer times again, replacing the kept */
} opts;

typedef struct {
  const opts *o;
  remat_job *job;
  const remat_config *cfg;
  remat_trainer *tr;
  FILE *logf;
  train_sampler *sampler; /* --sample-every */
  remat_peak peak; /* MFU is against peak.flops (raised by any faster step) */
  remat_thread_policy threads;
  int64_t moved_at; /* the last step after which the threads were re-placed */
  size_t planned;
  int tty;
  /* results */
  int64_t steps_done, timed_steps, start_step;
  double first_loss, last_loss, last_val, t_train, t_recompute, wall;
  /* the last 4096 timed steps' seconds (a ring), for their median: the
   * step the layer times predict */
  double step_times[4096];
  int64_t val_step; /* the step of last_val */
  size_t measured;
  remat_pipeline *pipe;
  remat_replicas *dp;
  int grid, abort_others;
  int checkpoint_failed; /* the run stopped on a checkpoint it could not write */
  int ranks, rank;
  remat_comm_stats comm; /* rank 0's, of the last step */
  remat_comm_stats rank_comm[REMAT_MAX_STAGES]; /* every replica's, of the last step */
  remat_comm_stats comm_sum[REMAT_MAX_STAGES];  /* and over the timed steps */
  size_t rank_planned[REMAT_MAX_STAGES], rank_measured[REMAT_MAX_STAGES];
  double rank_recompute[REMAT_MAX_STAGES];     /* every rank's, of the last step */
  double rank_recompute_sum[REMAT_MAX_STAGES]; /* and over the timed steps */
  double wait_s;      /* this rank's waiting, over the timed steps */
  double predicted_s; /* the plan's simulated iteration time, in seconds */
  double predicted_bubble;
  double tensor_link; /* bytes/s of the tensor ranks' sum, measured (0: none) */
  int predicted_measured; /* predicted_s is from this machine's layer times */
  int predicted_kept;     /* and those were kept from an earlier run */
} run_state;

/* The plan as the job made it (a pipeline's table, or one process's
 * policy and arena; every rank's arena; the ZeRO table); CLI_EXIT_RUN when
 * standard output failed, else 0. */
int train_show_plan(run_state *r);
/* train_figures.c. The threads line and the peak MFU is against: given
 * (--peak-gflops), kept, or measured now (before the arena exists, so that
 * filling it cannot disturb the measurement) and kept; 0 or an exit code. */
int train_peak_rate(const opts *o, run_state *r);
/* This machine's layer times (kept, or measured now before the arena
 * exists, and kept) and the step they predict (r->predicted_s). Every rank
 * calls it at once and measures, as they will compute (their contention is
 * in the times); rank 0's figures are kept and printed. Without them the
 * prediction is the FLOP model's (a pipeline's) or none. */
void train_predict(run_state *r);
/* The summary's line of the step predicted against the one measured; kept
 * layer times that predicted a step far slower are scaled to this run and
 * kept (remat_calibration_scale). */
void train_show_predicted(const run_state *r, int64_t ran);
/* The median of the timed steps' seconds (the last 4096 of them); 0 with
 * none. */
double train_median_step(const run_state *r);
/* Rank 0's bytes and every replica's communication time over the timed
 * steps, and how much of it overlapped; b (n bytes) is scratch. */
void train_show_comm(const run_state *r, char *b, size_t n);

#endif
