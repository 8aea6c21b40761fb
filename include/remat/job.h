/* remat/job.h: a training job: one object between a front end's settings
 * and the trainer. Given a description (the model, the data, the step, how
 * to recompute or a memory budget, the pipeline stages and replicas, a plan
 * file, a checkpoint directory, a resume), it starts the job's MPI ranks
 * when there are several, agrees among them, places the blocks on stages,
 * chooses the runtime (one process, a pipeline, replicas or the grid),
 * plans every rank's arena, moves weights in and out across the ranks,
 * writes and resumes checkpoints, and gathers each rank's figures. A front
 * end (the remat command, a binding) only turns its input into a
 * description and shows what the job says.
 * Part of remat's public API; include "remat.h" for all of it.
 *
 *   remat_job_desc d;  remat_job_desc_default(&d);
 *   d.config = "tiny";  d.train.steps = 100;  d.memory = "64MiB";
 *   remat_job *job;
 *   if (remat_job_create(&job, &d, &err)) ...       // ranks started, if any
 *   if (remat_job_prepare(job, &err)) ...           // placed and planned
 *   printf("%zu bytes\n", remat_job_planned_bytes(job));
 *   if (remat_job_start(job, &err)) ...             // arena, weights, resume
 *   remat_job_step_info in;
 *   while (!remat_job_done(job))
 *     if (remat_job_step(job, 0, &in, &err)) ...    // in.stats.loss, ...
 *   remat_job_save(job, "model.bin", &err);
 *   remat_job_destroy(job, 0);
 *
 * Every call that can fail on one rank agrees with the others first: it
 * returns the lowest failing rank's status on every rank, with that rank's
 * message (prefixed "rank R: " when R is not 0), so a job never hangs on
 * one rank's failure.
 *
 * The thread policy (remat_threads_setup, remat/report.h) is not the job's:
 * it may re-execute the process with OpenMP's settings in its environment,
 * which only the program's own main can do safely, before MPI starts and
 * before any thread exists. A front end calls it first. */
#ifndef REMAT_JOB_H
#define REMAT_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "remat/parallel.h"
#include "remat/plan.h"
#include "remat/report.h"
#include "remat/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct remat_job_desc {
  /* The model: a built-in shape name or "L,C,NH,V,T" (NULL: the model
   * file's shape, else "small"), and an llm.c checkpoint to start from
   * (NULL: initialised from train.hp.seed). */
  const char *config, *model;
  /* remat_precision of the step (remat/config.h): fp32 (the default) or
   * bf16, which needs a CPU with the instructions
   * (remat_precision_available). */
  int precision;
  /* The data: token shards, a text file read as bytes, or neither: the
   * embedded corpus. data names one shard, or several: a comma-separated
   * list of paths or glob patterns (llm.c's -i), read one after another
   * (remat_shards_find). val_data names shards of their own (remat
   * tokenize's _val.bin) for the held-out loss: then nothing of data is
   * held out. */
  const char *data, *text, *val_data;
  /* The step: B, T (0: 64, or the model's maxT when shorter), grad_accum
   * (micro-batches per step of each pipeline or replica), steps, the
   * learning rate, AdamW, clipping, dropout. val_frac holds tokens out
   * when eval_every > 0. */
  remat_train_opts train;
  int64_t eval_every; /* held-out loss every this many steps (0: never) */
  /* Which blocks recompute, at most one of: */
  double ckpt_ratio;       /* >= 0: the first floor(ratio L) blocks in full */
  const char *ckpt_layers; /* remat_policy_parse_list_slots: "0-3", "full:0-3,middle:4-11",
                              "full@1:0-3" */
  const char *memory;      /* a budget, one size or one per stage ("2GiB,3GiB"):
                              the planner chooses keep, middle or full per block
                              and, on a pipeline, the blocks of each stage */
  /* Ranks: P pipeline stages x D replicas x t tensor ranks of each copy of
   * a stage (1 x 1 x 1: one process; tensor > 1: ZeRO 0 to 2, fp32, no
   * timeline, for now). */
  int64_t stages, replicas, tensor;
  int sequence; /* with tensor > 1: sequence parallelism (the norms, dropout and
                   residual adds on a tensor rank's T / t of the tokens) */
  int zero;     /* ZeRO stage of the replicas, 0 to 3 */
  int schedule; /* remat_plan_schedule */
  int64_t chunks; /* interleaved: v model chunks per stage (0: the default, 2) */
  /* The planner's times: 0 FLOP-based, at the measured product rate; N >
   * 0: this machine's, measured by rank 0 over N rounds (remat_calibrate)
   * before the stages are placed, and the run's prediction in them. */
  int calibrate;
  const char *layers; /* blocks per stage by hand, "N0,N1,..." */
  /* The head's logits in chunks of this many tokens (remat_config's
   * head_chunk); 0: all of a micro-batch's at once; -1 (the default): the
   * planner's choice under a budget (chunks where they let it recompute
   * less), else all at once. */
  int64_t head_chunk;
  /* 1: the planner that places a pipeline's stages may recompute a block
   * for only some of a stage's micro-batches in flight
   * (remat_plan_problem.per_microbatch) */
  int per_microbatch;
  int spend_pools; /* remat_plan_problem.spend_pools, for the planner that places the stages */
  const char *plan;   /* a plan file of `remat plan` places the stages */
  /* State: a checkpoint every checkpoint_every steps (and at the end) in
   * checkpoint_dir; resume from the newest complete checkpoint under a
   * directory (or that checkpoint itself). */
  const char *checkpoint_dir;
  int64_t checkpoint_every;
  /* > 0: once a checkpoint is sealed, only the newest keep_checkpoints
   * step directories of the run stay (remat_checkpoint_dir_prune); 0 keeps
   * them all. A resume may change it. */
  int64_t keep_checkpoints;
  /* A new run whose checkpoint_dir holds the checkpoints of another run
   * (one a resume of it would refuse) is refused, so that no later resume
   * continues the other run from a mix of both; with replace_checkpoints
   * every step directory there is removed first. A resume checkpoints into
   * the directory it resumed from (remat_job_saved_load says so). */
  int replace_checkpoints;
  const char *resume;
  int trace; /* record every rank's timeline (one process's too) */
  /* The version of the model file remat_job_save writes: 0 or
   * REMAT_CKPT_VERSION (fp32), or REMAT_CKPT_VERSION_BF16 (each weight
   * rounded to bf16, half the bytes). A checkpoint directory's model.bin is
   * fp32 whatever this says, so a resume goes on exactly. */
  int save_version;
  /* The format of that file (remat_format): 0, REMAT_FORMAT_AUTO, is the
   * family's own (llm.c's for GPT-2, llama2.c's version 1 for a Llama,
   * which a checkpoint directory's model.bin always is); a format that
   * cannot hold the model's family, or a Llama in bf16, is refused before
   * the first step (remat_checkpoint_format_check). */
  int save_format;
  /* Files the front end will write (its weights, its log, its trace; up to
   * 4, NULL where none): before anything is loaded each is checked to name
   * no input and no other output, and to be writable (remat_output_check);
   * the checkpoint directory is created or refused then too. */
  const char *outputs[4];
  /* Bytes every rank must agree on beyond the description (e.g. a digest
   * of its command line): a rank that differs ends the job. */
  uint64_t launch_digest;
  /* How the job's messages name a setting: key is its name among a saved
   * run's settings (remat_job_setting: "mem", "stages", "data-parallel",
   * ...; "model", "resume" and "trace" for the fields not saved). NULL
   * names it by its key; a front end names its own way to give it (remat
   * train: "--mem"). */
  const char *(*setting_name)(const char *key);
} remat_job_desc;

/* One process, small, 300 steps, the trainer's defaults, every block kept,
 * 1F1B, no checkpoints. */
REMAT_API void remat_job_desc_default(remat_job_desc *d);

/* The rules by which the description's settings go together, checked
 * without starting anything: at most one way to choose the recomputed
 * blocks; settings that place a pipeline, time its layers, draw its
 * timeline or shard replicas need the stages or replicas they act on; one
 * source of tokens; a checkpoint directory with an interval; a resume
 * without a model file; 1 to REMAT_MAX_STAGES ranks. The message names the
 * settings (setting_name). remat_job_create checks them first, then the
 * schedule against the stages, the plan file and the saved version. */
REMAT_API int remat_job_desc_check(const remat_job_desc *d, remat_error *err);

typedef struct remat_job remat_job; /* opaque */

/* How the job runs. */
typedef enum {
  REMAT_RUN_ONE = 0,  /* one process */
  REMAT_RUN_PIPELINE, /* P stages, one per rank */
  REMAT_RUN_REPLICAS, /* D replicas, one per rank */
  REMAT_RUN_GRID,     /* P x D ranks */
  REMAT_RUN_TENSOR,   /* t tensor ranks of one model */
  REMAT_RUN_COUNT
} remat_run_kind;

/* Checks the description and, when it asks for several ranks or the
 * process was started by an MPI launcher, starts MPI and compares every
 * rank's whole description (a rank started with other flags, or without
 * the MPI flags, makes every later agreement fail alike on every rank:
 * "rank R was started with other flags than rank 0"). Nothing is loaded
 * yet; the rank is known (a front end silences the others). */
REMAT_API int remat_job_create(remat_job **out, const remat_job_desc *desc, remat_error *err);
/* Ends the job; a status other than 0 ends every rank of it at once (the
 * others may be waiting on this one). */
REMAT_API void remat_job_destroy(remat_job *job, int status);

/* Agrees on the rank count and the description, lays out the grid, reads
 * the model's shape, the data and a resume's checkpoint, chooses each
 * block's policy and each stage's blocks, and plans every arena (a resume
 * with other settings is refused here). Nothing large is allocated. */
REMAT_API int remat_job_prepare(remat_job *job, remat_error *err);
/* Checks the plan fits the machine, allocates the arena, initialises or
 * loads the weights (this rank's slices of them) and a resume's state. */
REMAT_API int remat_job_start(remat_job *job, remat_error *err);

/* -------------------------------------------------------------- stepping */

typedef struct remat_job_step_info {
  int stopped;                /* some rank asked to stop: no step was taken */
  remat_step_stats stats;     /* the step's loss, norm, learning rate, times */
  double val_loss;            /* the held-out loss, when evaluated; else NAN */
  int64_t checkpoint_step;    /* a checkpoint of this step was written (else 0) */
  size_t measured;            /* this rank's measured peak, every byte held */
  /* rank 0: every rank's arena, planned and measured (the job's ranks) */
  size_t rank_planned[REMAT_MAX_STAGES], rank_measured[REMAT_MAX_STAGES];
  double rank_recompute[REMAT_MAX_STAGES]; /* rank 0: every rank's recomputing, seconds */
  double wait_seconds;        /* a pipeline: this rank's waiting in the step */
  remat_comm_stats comm;      /* replicas: this rank's communication */
  remat_comm_stats rank_comm[REMAT_MAX_STAGES]; /* rank 0: every replica's */
  int checkpoint_failed; /* the step was taken (its weights are whole, on every rank) but
                            its checkpoint could not be written: the error says why */
} remat_job_step_info;

/* One optimizer step on every rank. stop: this rank wants to stop (a
 * signal); when any rank does, no rank steps and info->stopped is 1. A
 * checkpoint follows when one is due. */
REMAT_API int remat_job_step(remat_job *job, int stop, remat_job_step_info *info,
                             remat_error *err);
/* 1 when every step of the description has been taken. */
REMAT_API int remat_job_done(const remat_job *job);
/* After a stop between checkpoints: a checkpoint of the last step taken
 * (none when checkpoints are off or the last step has one). *step receives
 * its step, or 0 when none was written. */
REMAT_API int remat_job_checkpoint_now(remat_job *job, int64_t *step, remat_error *err);

/* The whole model's weights at path, in the format and version
 * desc.save_format and desc.save_version name, gathered from every rank and
 * written by rank 0. Every rank calls it. */
REMAT_API int remat_job_save(remat_job *job, const char *path, remat_error *err);
/* The ranks' timeline (desc.trace) as Chrome trace-event JSON at path,
 * written by rank 0. Every rank calls it. */
REMAT_API int remat_job_trace_write(remat_job *job, const char *path, remat_error *err);

/* The front end's own steps that can fail on one rank (opening its log):
 * every rank passes its status (err filled when not 0) and receives the
 * lowest failing rank's, as every call above does. */
REMAT_API int remat_job_agree(remat_job *job, int status, remat_error *err);

/* -------------------------------------------------------------- figures */

REMAT_API remat_run_kind remat_job_kind(const remat_job *job);
REMAT_API int remat_job_rank(const remat_job *job);
REMAT_API int remat_job_ranks(const remat_job *job);
/* The description as the job runs it (T and the shape's defaults filled). */
REMAT_API const remat_job_desc *remat_job_description(const remat_job *job);
REMAT_API const remat_config *remat_job_config(const remat_job *job);
/* The data: where it came from ("embedded corpus" or the path) and the tokens. */
REMAT_API const char *remat_job_data_source(const remat_job *job);
REMAT_API const remat_tokens *remat_job_tokens(const remat_job *job);
/* The placement: stages, their blocks and every block's policy. */
REMAT_API const remat_placement *remat_job_placement(const remat_job *job);
/* A pipeline's problem and plan (the planner's figures for the placement);
 * NULL for one process and replicas alone. */
REMAT_API const remat_plan_problem *remat_job_problem(const remat_job *job);
REMAT_API const remat_plan *remat_job_plan(const remat_job *job);
/* After remat_job_prepare: the planner's problem of the whole model on one
 * stage as the job plans a process's or a replica's policies (its batch,
 * micro-batches, replicas, ZeRO stage and budget): the bytes and times of
 * each policy. Free it with remat_plan_problem_free. */
REMAT_API int remat_plan_problem_from_job(remat_plan_problem *pb, const remat_job *job,
                                          remat_error *err);
/* This rank's trainer and its runtimes (NULL where the job has none). */
REMAT_API remat_trainer *remat_job_trainer(remat_job *job);
REMAT_API remat_pipeline *remat_job_pipeline(remat_job *job);
REMAT_API remat_replicas *remat_job_replicas(remat_job *job);
/* Every byte this rank will hold (remat_trainer_planned_bytes). */
REMAT_API size_t remat_job_planned_bytes(const remat_job *job);
/* Rank k's stage and arena from the memory model, as it plans them: for
 * showing every rank's arena before any exists. mp is the caller's
 * (remat_memplan_destroy). */
/* Interleaved 1F1B: v model chunks per stage (1 otherwise), and chunk c
 * of rank k's stage and arena as remat_job_rank_memplan gives a rank's
 * (with one chunk, that). */
REMAT_API int64_t remat_job_chunks(const remat_job *job);
REMAT_API int remat_job_chunk_memplan(const remat_job *job, int k, int64_t c, remat_stage *st,
                                      remat_memplan **mp, remat_error *err);
REMAT_API int remat_job_rank_memplan(const remat_job *job, int k, remat_stage *st,
                                     remat_memplan **mp, remat_error *err);
/* A pipeline whose stages pool their slots and W records
 * (remat_placement_pooled): rank k's pool, laid out over its stream as its
 * runtime lays it out, *bytes, and the chunks' slots and records side by
 * side, *apart (both 0 without a pool). The arenas of
 * remat_job_chunk_memplan are then without them. */
REMAT_API int remat_job_rank_pool(const remat_job *job, int k, size_t *bytes, size_t *apart,
                                  remat_error *err);
/* A resume: the step directory and step resumed from (NULL and 0 if none);
 * *note (may be NULL) what the resume passed over ("fell back past 1 newer
 * checkpoint: step_00000006: model.bin checksum differs: ...") or that the
 * checkpoint carried no checksums, else NULL. Every checkpoint is verified
 * (remat_checkpoint_verify) before anything of it is loaded. */
REMAT_API const char *remat_job_resumed_from(const remat_job *job, int64_t *step,
                                             const char **note);
/* What the job did to its checkpoint directory before the first step, for
 * a front end to show ("removed 3 step directories from ck
 * (replace-checkpoints)", "ck holds this run's checkpoints to step 20;
 * ..."), else NULL. */
REMAT_API const char *remat_job_checkpoint_note(const remat_job *job);
/* The held-out data: its source (val_data, or "held out of the data"),
 * NULL when the job evaluates nothing; *tokens (may be NULL) its tokens,
 * NULL when held out of the data. */
REMAT_API const char *remat_job_val_source(const remat_job *job, const remat_tokens **tokens);
/* The pipeline's iteration time in seconds, from the plan's schedule
 * simulation at one rank's rate of rank_flops FLOP/s, and its bubble (the
 * share of stage time the schedule leaves idle). 0 and 0 without a plan. */
REMAT_API void remat_job_predict(const remat_job *job, double rank_flops, double *seconds,
                                 double *bubble);

/* ------------------------------------------------------------ a saved run */

/* Every checkpoint holds the run's settings (a file `settings` beside the
 * weights, listed with its checksum in DONE), so a resume needs only the
 * directory:
 *
 *   remat_job_saved s;
 *   if (remat_job_saved_load(&s, "runs", &err)) ...  // newest verifying checkpoint
 *   remat_job_desc d = s.desc;                        // the saved run's settings
 *   d.train.steps = 600;                              // what the caller changes
 *   remat_job_conflict c;
 *   if (remat_job_saved_conflict(&s, &d, &c)) ...     // "lr": saved 0.001, given 0.002
 *   ... remat_job_create(&job, &d, &err) ...; remat_job_saved_free(&s) after the job
 *
 * A resume may change the step count (the trainer refuses to stretch or cut
 * a cosine schedule, and to end before the checkpoint's step), the held-out
 * loss interval (but not start one where the run held no tokens out), and
 * what is not a setting: outputs, the trace, the thread count. */
typedef struct remat_job_saved {
  remat_job_desc desc; /* the saved run's; its strings point into text, resume is the dir */
  int64_t step;        /* the checkpoint's step */
  char dir[4096];      /* the checkpoint's step directory */
  char *text;          /* the settings file, owned */
  int found;           /* 0: an older checkpoint without settings; desc is then
                          remat_job_desc_default's and the caller gives them all */
  /* What identifies the run's token source (desc.data or desc.text),
   * whatever its path: its size and CRC32C (data_known 0: an older
   * checkpoint, which saved its path alone, as given). Paths are saved
   * resolved, so a resume from another directory finds them. */
  uint64_t data_bytes;
  uint32_t data_crc;
  int data_known;
  uint64_t val_bytes; /* the same of desc.val_data (val_known 0: none) */
  uint32_t val_crc;
  int val_known;
  /* desc.checkpoint_dir: the directory resumed from (the parent of dir),
   * not the saved path, so a run resumed from a copy or a moved
   * directory checkpoints where it was resumed. */
  char checkpoint_dir[4096];
} remat_job_saved;

/* The settings of the checkpoint a resume of dir takes (dir itself when it
 * is a step directory, else the newest one under it that verifies). */
REMAT_API int remat_job_saved_load(remat_job_saved *s, const char *dir, remat_error *err);
REMAT_API void remat_job_saved_free(remat_job_saved *s);

/* The settings a checkpoint saves, one by one (i from 0): setting i's key,
 * named as remat train's flag is without "--", and its value in d as the
 * settings file spells it (value may be NULL); NULL past the last. A front
 * end checks a saved run's values by the rules of its own flags. A
 * resealed settings file is read as it is: remat_job_saved_load checks its
 * values as the trainer does (remat_train_opts_check), no further. */
REMAT_API const char *remat_job_setting(const remat_job_desc *d, int i, char *value, size_t cap);

/* A setting that differs from the saved run's where a resume may not
 * change it: its key (named as remat train's flag is, without "--") and
 * both values as text. */
typedef struct remat_job_conflict {
  const char *key;
  char saved[4096], given[4096];
} remat_job_conflict;
/* 1 and *c filled for the first such setting of d, else 0. A string
 * setting given again as another spelling of the same thing (the same file
 * by another path, "tiny" for its L,C,NH,V,T) is the same; so is a token
 * source at another path with the saved size and CRC32C (a copy of the
 * same bytes); a sequence length of 0 stands for the saved one. */
REMAT_API int remat_job_saved_conflict(const remat_job_saved *s, const remat_job_desc *d,
                                       remat_job_conflict *c);

/* ----------------------------------------------------------- calibration */

/* A model's layer times on this machine, in seconds per micro-batch of
 * B x T, measured (remat_calibrate): what the planner's FLOP-based times
 * stand in for. bwd is a block's whole backward, wgrad its weight part (a
 * zero-bubble schedule's W); recompute and middle the rebuild of its
 * activations under the full and the middle policy. */
typedef struct remat_layer_times {
  double embed_fwd, embed_bwd;
  double block_fwd, block_bwd, block_wgrad, block_recompute, block_middle;
  double head_fwd, head_bwd;
  /* the rest of a step, per parameter: the gradients' zeroing and norm,
   * the update, the refresh of bf16 copies */
  double update_per_param;
  int rounds; /* the medians of this many measured rounds */
} remat_layer_times;

/* Builds a three-block model of cfg's width (a block kept, one middle, one
 * recomputed; cfg's precision) and times `rounds` steps of one
 * micro-batch of B x T, its backward in B and W, after one to warm up;
 * each figure is its median over the rounds. Allocates the model's arena
 * for the time it runs. */
REMAT_API int remat_calibrate(const remat_config *cfg, int64_t B, int64_t T, int rounds,
                              remat_layer_times *t, remat_error *err);
/* remat_calibrate's figures for cfg at B x T from the machine cache (kind
 * "layers", beside the peak's: remat_cache_open) when it holds them and
 * again is 0, else measured over `rounds` rounds (0: a quick calibration,
 * 3 rounds and more while under half a second) and kept; *note says
 * which. The figures do not depend on cfg's layer count. ranks: the
 * processes of a job that compute at once on this machine, each running
 * this call at the same time (their contention is part of the times; it is
 * part of the key). */
REMAT_API int remat_calibrate_cached(const remat_config *cfg, int64_t B, int64_t T, int ranks,
                                     int rounds, int again, remat_layer_times *t,
                                     remat_cache_note *note, remat_error *err);
/* The kept figures for cfg at B x T (and ranks) multiplied by factor (in
 * (0, 1]) and kept again: a run faster than they predict shows this
 * machine does its layers at least that fast (they were measured while
 * other work shared it), as a step faster than the kept peak raises it.
 * REMAT_EINVAL for a factor out of range; the cache's error when there are
 * no kept figures to scale or they cannot be written. */
REMAT_API int remat_calibration_scale(const remat_config *cfg, int64_t B, int64_t T, int ranks,
                                      double factor, remat_error *err);
/* 1 and *t, *note filled when the machine cache holds whole figures for
 * cfg at B x T; else 0 (nothing is measured). */
REMAT_API int remat_calibration_kept(const remat_config *cfg, int64_t B, int64_t T, int ranks,
                                     remat_layer_times *t, remat_cache_note *note);
/* A step of the job in seconds at t's layer times, and its bubble: one
 * process or a replica runs its micro-batches through every layer under
 * their policies and updates its weights (its shard under ZeRO 1 and up;
 * the replicas' communication is not counted; a tensor group's
 * collectives are, once remat_job_measure_tensor_link has measured their
 * link); a pipeline's stages run
 * the schedule's simulation of the placement's layers, then the slowest
 * update. The job must be placed (remat_job_prepare). */
/* The tensor ranks' link, measured now with the group's own sum of a
 * micro-batch's activations (B T C floats, at most 64 MiB) over the job's tensor ranks, in
 * bytes a second as remat plan counts them (remat_dist_measure_links);
 * the prediction then adds the group's collectives at it, as the planner
 * does. Every rank calls it; *rate 0 without tensor ranks. */
REMAT_API int remat_job_measure_tensor_link(remat_job *job, double *rate, remat_error *err);
/* The nodes (remat_dist_node_of) this rank's tensor group spans: 1 where
 * they share one, as the layouts place them; 1 without tensor ranks. Every
 * rank calls it. */
REMAT_API int remat_job_tensor_nodes(remat_job *job, int *nodes, remat_error *err);
REMAT_API int remat_job_predict_measured(const remat_job *job, const remat_layer_times *t,
                                         double *seconds, double *bubble, remat_error *err);
/* A GPT-2 problem (remat_plan_problem_from_model or _from_replicas: the
 * embedding, L blocks, the head) with t's times for its FLOP-based ones;
 * its time unit becomes seconds. */
REMAT_API void remat_plan_problem_set_times(remat_plan_problem *pb, const remat_layer_times *t);

/* ------------------------------------------------------------- parsing */

/* "0,2,5", "0-3": blocks recomputed in full; "middle:" before an item gives
 * it and the items after it the middle policy, "full:" full recomputation
 * again ("full:0-3,middle:4-11"). Every index in [0, L), none twice; the
 * rest are kept. */
REMAT_API int remat_policy_parse_list(const char *s, uint8_t *policy, int64_t L,
                                      remat_error *err);
/* The same with recompute per micro-batch (remat_stage.full_slots):
 * "full@K:" before an item gives it, and the items after it, policy keep
 * and full recomputation in the last K of its stage's in-flight slots
 * (full_slots[b] = K, 1 to 255), e.g. "middle:4-5,full@1:0-3"; every other
 * block gets 0 (L values). remat_policy_parse_list refuses "full@K:".
 * Whether K fits a stage's in-flight count is the placement's to check. */
REMAT_API int remat_policy_parse_list_slots(const char *s, uint8_t *policy, uint8_t *full_slots,
                                            int64_t L, remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_JOB_H */
