/* job.c: a training job (remat/job.h): the description in; ranks started
 * and agreed; the shape, the data and a resume's checkpoint read; each
 * block's policy and each stage's blocks chosen; the runtime made; the
 * weights loaded, gathered and saved; checkpoints written and resumed;
 * every rank's figures gathered. The step itself is the trainer's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "job/job_internal.h"
#include "model/model_runtime.h"
#include "remat/report.h"

struct remat_job {
  remat_job_desc d; /* the caller's strings are borrowed */
  remat_run_kind kind;
  remat_dist *dist; /* NULL in one process */
  int rank, ranks;
  remat_config cfg;
  remat_checkpoint_reader rd; /* the model file, open from its shape to its weights */
  remat_tokens tok;
  const char *source;
  remat_placement place;
  remat_plan_problem pb; /* a pipeline's */
  remat_plan plan;
  int have_pb, have_plan;
  remat_trainer *tr;
  remat_pipeline *pipe;
  remat_replicas *dp;
  remat_grid *grid; /* a grid: pipe and dp are its parts */
  size_t planned;
  /* a resume: the step directory, its step and its weights */
  char resume_dir[4096], resume_model[4096];
  int64_t resume_step;
  int resumed;
  char resume_note[2048]; /* what the resume passed over, or that it could not verify */
  int64_t last_checkpoint; /* the step of the last checkpoint written */
  int held_out; /* a resume of a run that held tokens out: the split stays */
  int other_flags; /* the lowest rank started with another description, else -1 */
};

/* ------------------------------------------------------------ agreement */

/* Every rank's status: the lowest failing rank's, on every rank, with its
 * message. One process: rc. */
/* v: the model chunks each stage runs. */
static int64_t job_chunks(const remat_job_desc *d) {
  return remat_schedule_chunks(d->schedule, d->chunks);
}

static int agree(remat_job *job, int rc, remat_error *err) {
  if (!job->dist) return rc;
  if (job->other_flags >= 0) /* known alike on every rank: no rank goes on */
    return remat__errorf(err, REMAT_EINVAL, "rank %d was started with other flags than rank 0; "
                         "every rank must run the same command", job->other_flags);
  remat_error e = {0};
  e.code = rc;
  if (rc) e = *err;
  int who = -1;
  int first = remat_dist_first_error(job->dist, rc, &e, &who);
  if (first) {
    if (who > 0) {
      char msg[sizeof e.msg];
      snprintf(msg, sizeof msg, "%s", e.msg);
      snprintf(err->msg, sizeof err->msg, "rank %d: %.*s", who, (int)sizeof err->msg - 16, msg);
    } else {
      snprintf(err->msg, sizeof err->msg, "%s", e.msg);
    }
    err->code = first;
  }
  return first;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static uint64_t fnv_str(uint64_t h, const char *s) {
  return s ? fnv(h, s, strlen(s) + 1) : fnv(h, "", 1);
}

/* What every rank must have alike: the description's values and strings. */
static uint64_t desc_digest(const remat_job_desc *d) {
  uint64_t h = 1469598103934665603ull;
  const char *s[] = {d->config, d->model, d->data, d->text, d->ckpt_layers, d->memory,
                     d->layers, d->plan, d->checkpoint_dir, d->resume};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) h = fnv_str(h, s[i]);
  int64_t v[] = {d->train.B, d->train.T, d->train.grad_accum, d->train.steps, d->train.warmup,
                 d->train.cosine, d->train.shuffle, d->train.eval_batches, d->eval_every,
                 d->stages, d->replicas, d->zero, d->schedule, d->chunks, d->checkpoint_every,
                 d->trace,
                 (int64_t)d->train.hp.seed};
  double f[] = {d->train.lr, d->train.val_frac, d->ckpt_ratio, d->train.hp.weight_decay,
                d->train.hp.grad_clip, d->train.hp.dropout};
  h = fnv(h, v, sizeof v);
  h = fnv(h, f, sizeof f);
  return fnv(h, &d->launch_digest, sizeof d->launch_digest);
}

/* ------------------------------------------------------------- lifetime */

/* Whether the runtime runs the description's schedule on its stages,
 * replicas, chunks and micro-batches, by the schedule's row. */
static int check_schedule(const remat_job_desc *d, remat_error *err) {
  const remat_schedule_info *row = remat_schedule_get(d->schedule);
  char names[96];
  if (!row || !row->runs)
    return remat__errorf(err, REMAT_EINVAL, "schedule %d is not one of %s", d->schedule,
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"));
  int chunked = row->chunks_max != 1;
  if (row->runs != REMAT_RUNS_ANY && (d->stages < 2 || d->replicas > 1))
    return remat__errorf(err, REMAT_EINVAL, "%s runs a pipeline of 2 or more stages without "
                         "replicas; use %s with --data-parallel", row->name,
                         remat_plan_schedule_name(REMAT_SCHED_1F1B));
  if (d->chunks && !chunked)
    return remat__errorf(err, REMAT_EINVAL, "--chunks goes with --schedule %s",
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_CHUNKED, "or"));
  if (chunked) {
    int64_t v = job_chunks(d);
    if (v < row->chunks_min || (row->chunks_max && v > row->chunks_max) ||
        d->stages * v > REMAT_MAX_STAGES) {
      char rule[48];
      if (row->chunks_min == row->chunks_max)
        snprintf(rule, sizeof rule, "exactly %lld", (long long)row->chunks_min);
      else if (!row->chunks_max)
        snprintf(rule, sizeof rule, "%lld or more", (long long)row->chunks_min);
      else
        snprintf(rule, sizeof rule, "%lld to %lld", (long long)row->chunks_min,
                 (long long)row->chunks_max);
      return remat__errorf(err, REMAT_EINVAL, "%s runs %s chunks per stage and at most %d "
                           "chunks in all, not %lld x %lld", row->name, rule, REMAT_MAX_STAGES,
                           (long long)d->stages, (long long)v);
    }
    if (row->groups_of_p && d->train.grad_accum % d->stages)
      return remat__errorf(err, REMAT_EINVAL, "%s runs micro-batches in groups of the stages: "
                           "--grad-accum %lld is not a multiple of %lld", row->name,
                           (long long)d->train.grad_accum, (long long)d->stages);
  }
  return 0;
}

int remat_job_create(remat_job **out, const remat_job_desc *desc, remat_error *err) {
  *out = NULL;
  const remat_job_desc *d = desc;
  if (d->stages < 1 || d->replicas < 1 || d->stages * d->replicas > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL,
                         "%lld stages x %lld replicas: a job runs 1 to %d ranks",
                         (long long)d->stages, (long long)d->replicas, REMAT_MAX_STAGES);
  if (d->zero < 0 || d->zero > 3 || (d->zero && d->replicas == 1))
    return remat__errorf(err, REMAT_EINVAL, "ZeRO stage %d needs 0 to 3 and replicas to shard "
                         "across", d->zero);
  if ((d->ckpt_ratio >= 0) + !!d->ckpt_layers + !!d->memory + !!d->plan > 1)
    return remat__errorf(err, REMAT_EINVAL, "a recompute ratio, a block list, a memory budget "
                         "and a plan file each choose the recomputed blocks; give at most one");
  int bad_schedule = check_schedule(d, err);
  if (bad_schedule) return bad_schedule;
  if (d->data && d->text)
    return remat__errorf(err, REMAT_EINVAL, "give a token shard or a text file, not both");
  if (!!d->checkpoint_dir != (d->checkpoint_every > 0))
    return remat__errorf(err, REMAT_EINVAL, "a checkpoint directory and a checkpoint interval "
                         "go together");
  if (d->resume && d->model)
    return remat__errorf(err, REMAT_EINVAL, "a resume takes the weights from its checkpoint; "
                         "give no model file");
  if (d->plan) { /* read now: a plan the runtime cannot run is refused by its schedule first */
    remat_plan_layout lo;
    int rc = remat_plan_layout_load(&lo, d->plan, err);
    if (rc) return rc;
    remat_plan_layout_free(&lo);
  }
  if (d->save_version && d->save_version != REMAT_CKPT_VERSION &&
      d->save_version != REMAT_CKPT_VERSION_BF16)
    return remat__errorf(err, REMAT_EINVAL, "a model file is saved in version %d (fp32) or %d "
                         "(bf16), not %d", REMAT_CKPT_VERSION, REMAT_CKPT_VERSION_BF16,
                         d->save_version);
  /* The job's own bookkeeping, like a front end's, is not the trainer's
   * (plain calloc, outside the library's count): a job plans the bytes a
   * bare trainer would. */
  remat_job *job = calloc(1, sizeof *job);
  if (!job) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  job->d = *desc;
  job->ranks = 1;
  job->kind = d->stages > 1 && d->replicas > 1 ? REMAT_RUN_GRID
              : d->stages > 1                 ? REMAT_RUN_PIPELINE
              : d->replicas > 1               ? REMAT_RUN_REPLICAS
                                              : REMAT_RUN_ONE;
  if (job->kind != REMAT_RUN_ONE || remat_dist_launched()) {
    int rc = remat_dist_create(&job->dist, NULL, NULL, err);
    if (rc) {
      free(job);
      return rc;
    }
    job->rank = remat_dist_rank(job->dist);
    job->ranks = remat_dist_size(job->dist);
    /* Every rank the launcher started compares its whole description now,
     * before anything depends on it: one started without --stages (a job
     * of its own) or with another seed takes part too, and every later
     * agreement fails alike on every rank. */
    int same = 1;
    uint64_t h = desc_digest(&job->d);
    if ((rc = remat_dist_all_same(job->dist, &h, sizeof h, &same, &job->other_flags, err))) {
      remat_dist_destroy(job->dist, rc);
      free(job);
      return rc;
    }
  } else {
    job->other_flags = -1;
  }
  *out = job;
  return 0;
}

void remat_job_destroy(remat_job *job, int status) {
  if (!job) return;
  if (job->grid) {
    remat_grid_destroy(job->grid);
  } else {
    remat_pipeline_destroy(job->pipe);
    remat_replicas_destroy(job->dp);
  }
  remat_trainer_destroy(job->tr);
  if (job->have_plan) remat_plan_free(&job->plan);
  if (job->have_pb) remat_plan_problem_free(&job->pb);
  remat_checkpoint_reader_free(&job->rd);
  remat_tokens_free(&job->tok);
  if (job->dist) remat_dist_destroy(job->dist, status);
  free(job);
}

/* ----------------------------------------------------------------- ranks */

/* As many ranks as the description asks, all with the same description;
 * then the P x D layout. */
static int check_ranks(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  if (!job->dist) return 0;
  if (job->other_flags >= 0) return agree(job, 0, err); /* its message */
  int64_t want = d->stages * d->replicas;
  if (job->ranks != want)
    return remat__errorf(err, REMAT_EINVAL,
                         "started on %d ranks but the job has %lld stages x %lld replicas: "
                         "start exactly %lld ranks (mpirun -np %lld)",
                         job->ranks, (long long)d->stages, (long long)d->replicas,
                         (long long)want, (long long)want);
  return remat_dist_grid(job->dist, d->stages, d->replicas, err);
}

/* ------------------------------------------------------- shape and data */

/* A resume's description against the settings saved with its checkpoint
 * (an older checkpoint has none: its state's header is checked alone). */
static int check_saved(remat_job *job, remat_error *err) {
  char path[4200];
  struct stat st;
  snprintf(path, sizeof path, "%s/settings", job->resume_dir);
  if (stat(path, &st) != 0) return 0;
  remat_job_saved s;
  remat_job_conflict c;
  int rc = remat_job_saved_load(&s, job->resume_dir, err);
  if (rc) return rc;
  job->held_out = s.desc.train.val_frac > 0;
  remat_job_desc d = job->d;
  d.model = NULL;
  if (remat_job_saved_conflict(&s, &d, &c))
    rc = remat__errorf(err, REMAT_EINVAL, "the run in %s was saved with %s %s, not %s; a resume "
                       "keeps the run's settings", job->resume_dir, c.key, c.saved, c.given);
  remat_job_saved_free(&s);
  return rc;
}

/* A resume: DIR itself when it is a checkpoint (it holds DONE; it must
 * verify), else the newest checkpoint under DIR that verifies, noting the
 * newer ones passed over. Its weights become the model file. */
static int find_resume(remat_job *job, remat_error *err) {
  const char *dir = job->d.resume;
  char done[4096];
  struct stat st;
  remat_checkpoint_info info;
  int rc;
  snprintf(done, sizeof done, "%s/DONE", dir);
  if (stat(done, &st) == 0) {
    if (remat_checkpoint_step_of(dir, &job->resume_step))
      return remat__errorf(err, REMAT_EINVAL, "%s: a checkpoint directory is named step_N", dir);
    if ((rc = remat_checkpoint_verify(dir, job->resume_step, &info, err))) return rc;
    snprintf(job->resume_dir, sizeof job->resume_dir, "%s", dir);
  } else {
    char skipped[sizeof job->resume_note - 64];
    if ((rc = remat_checkpoint_find(dir, &info, skipped, sizeof skipped, err))) return rc;
    job->resume_step = info.step;
    remat_checkpoint_dir_path(job->resume_dir, sizeof job->resume_dir, dir, job->resume_step,
                              NULL);
    if (info.skipped)
      snprintf(job->resume_note, sizeof job->resume_note, "fell back past %d newer checkpoint%s: "
               "%s", info.skipped, info.skipped > 1 ? "s" : "", skipped);
  }
  if (!info.verified)
    snprintf(job->resume_note, sizeof job->resume_note, "%.1900s has no checksums (written by "
             "an older remat): its files were not verified", job->resume_dir);
  if (snprintf(job->resume_model, sizeof job->resume_model, "%s/model.bin", job->resume_dir) >=
      (int)sizeof job->resume_model)
    return remat__errorf(err, REMAT_EINVAL, "the checkpoint's path is too long");
  job->d.model = job->resume_model;
  job->resumed = 1;
  return check_saved(job, err);
}

/* The outputs: find out now, not after hours of training, that one cannot
 * be written; and never write over an input. */
static int check_outputs(const remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  const char *ins[][2] = {{job->resumed ? "the checkpoint's weights" : "the model file", d->model},
                          {"the token shard", d->data}, {"the text", d->text}};
  for (int i = 0; i < 4; i++) {
    const char *out = d->outputs[i];
    if (!out) continue;
    for (size_t j = 0; j < 3; j++)
      if (ins[j][1] && remat_same_file(out, ins[j][1]))
        return remat__errorf(err, REMAT_EINVAL, "the output %s names the same file as %s %s; it "
                             "would overwrite an input: choose another path", out, ins[j][0],
                             ins[j][1]);
    for (int k = 0; k < i; k++)
      if (d->outputs[k] && remat_same_file(out, d->outputs[k]))
        return remat__errorf(err, REMAT_EINVAL, "two outputs name the same file '%s'", out);
    int rc = remat_output_check(out, err);
    if (rc) return rc;
  }
  /* created now (by rank 0), or why it cannot be; and nothing in the way of
   * the step directories the run will write */
  if (!d->checkpoint_dir || job->rank != 0) return 0;
  int rc = remat_output_dir_check(d->checkpoint_dir, err);
  return rc ? rc : remat_checkpoint_dir_check(d->checkpoint_dir, job->resume_step,
                                              d->train.steps, d->checkpoint_every, err);
}

/* The model's shape: from the model file's header, else the config, else
 * "small". The file stays open until its weights are read, so the shape and
 * the weights come from one file even if the path is replaced. */
static int load_shape(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  remat_config want;
  int rc;
  if (d->config && (rc = remat_config_parse(d->config, &want, err))) return rc;
  if (!d->model) {
    rc = remat_config_parse(d->config ? d->config : "small", &job->cfg, err);
    job->cfg.precision = d->precision;
    return rc;
  }
  if ((rc = remat_checkpoint_reader_open(&job->rd, d->model, &job->cfg, err))) return rc;
  const remat_config *c = &job->cfg;
  if (d->config && memcmp(c, &want, sizeof want) != 0)
    return remat__errorf(err, REMAT_ESHAPE,
                         "the model file %s has shape L=%lld C=%lld NH=%lld V=%lld T=%lld but the "
                         "job asks for L=%lld C=%lld NH=%lld V=%lld T=%lld; use a matching "
                         "checkpoint or leave the shape to the file",
                         d->model, (long long)c->num_layers, (long long)c->channels,
                         (long long)c->num_heads, (long long)c->vocab_size,
                         (long long)c->max_seq_len, (long long)want.num_layers,
                         (long long)want.channels, (long long)want.num_heads,
                         (long long)want.vocab_size, (long long)want.max_seq_len);
  job->cfg.precision = d->precision; /* a model file loads into either */
  return 0;
}

static int load_tokens(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  job->source = d->data ? d->data : d->text ? d->text : "embedded corpus";
  if (d->data) return remat_tokens_load(&job->tok, d->data, err);
  if (d->text) return remat_tokens_from_text(&job->tok, d->text, err);
  return remat_corpus_tokens(&job->tok, 0, err);
}

/* The trainer's options: a replica's step runs K of the step's K x D
 * micro-batches; tokens are held out only when evaluated. */
static remat_train_opts trainer_opts(const remat_job *job) {
  const remat_job_desc *d = &job->d;
  remat_train_opts to = d->train;
  to.grad_accum = d->train.grad_accum * d->replicas;
  to.val_frac = d->eval_every > 0 || job->held_out ? d->train.val_frac : 0.0;
  return to;
}

/* ------------------------------------------------------------- policies */

/* A budget for the whole model in one process (or each replica): the
 * planner's choice of keep, middle or full per block, the least recompute
 * time whose arena fits. A budget means the same everywhere: the arena of a
 * step (a pipeline stage's, a replica's, one process's), what the planner
 * plans; the training data and the loaders are held beside it and shown
 * apart. */
static int policy_for_budget(remat_job *job, size_t budget, uint8_t *policy, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t L = job->cfg.num_layers;
  char b1[32], b2[32];
  int rc;
  remat_plan_problem pb;
  remat_plan plan;
  if ((rc = remat_plan_problem_from_replicas(&pb, &job->cfg, d->train.B, d->train.T, 1,
                                             d->train.grad_accum, d->replicas, d->zero,
                                             budget, err)))
    return rc;
  rc = remat_plan_solve(&pb, &plan, err);
  remat_plan_problem_free(&pb);
  if (rc == REMAT_EINFEASIBLE) { /* the plan holds the least-memory choice */
    size_t need = plan.min_budget_bytes;
    int64_t full = plan.total_recomputed - plan.total_middle, mid = plan.total_middle;
    remat_plan_free(&plan);
    return remat__errorf(err, REMAT_EINFEASIBLE,
                         "a memory budget of %s does not fit: even the least memory (%lld of "
                         "%lld blocks recomputed, %lld middle) needs an arena of %s (%zu bytes; "
                         "the training data is held beside it); raise the budget to at least "
                         "that or lower the batch or the sequence length",
                         remat_format_bytes(budget, b1, sizeof b1), (long long)full,
                         (long long)L, (long long)mid, remat_format_bytes(need, b2, sizeof b2),
                         need);
  }
  if (rc) return rc;
  remat_placement pl; /* the one conversion from the planner's layers */
  int64_t lps = L + 2;
  rc = remat_placement_from_layers(&pl, &job->cfg, 1, &lps, plan.policy, REMAT_SCHED_1F1B, 1,
                                   err);
  remat_plan_free(&plan);
  if (!rc) memcpy(policy, pl.policy, (size_t)L);
  return rc;
}

/* Budgets: one for all stages or one per stage. */
static int stage_budgets(const remat_job_desc *d, remat_plan_problem *pb, remat_error *err) {
  if (!d->memory) {
    remat_plan_problem_set_memory(pb, (size_t)1 << 60);
    return 0;
  }
  size_t b[REMAT_MAX_STAGES];
  int64_t n;
  int rc = remat_parse_sizes(d->memory, b, REMAT_MAX_STAGES, &n, err);
  if (rc) return rc;
  if (n == 1) {
    remat_plan_problem_set_memory(pb, b[0]);
  } else if (n == pb->stages) {
    for (int64_t s = 0; s < n; s++) pb->memory[s] = b[s];
    pb->uniform_memory = 0;
  } else {
    return remat__errorf(err, REMAT_EINVAL, "%lld memory budgets for %lld stages: give one for "
                         "all or one per stage", (long long)n, (long long)pb->stages);
  }
  return 0;
}

/* A plan file's placement, checked against this job; budgets from it
 * unless the description gives them. */
static int layout_from_file(remat_job *job, int64_t *lps, uint8_t *layer_policy,
                            remat_error *err) {
  const remat_job_desc *d = &job->d;
  remat_plan_problem *pb = &job->pb;
  int64_t P = d->stages;
  remat_plan_layout lo;
  int rc = remat_plan_layout_load(&lo, d->plan, err);
  if (rc) return rc;
  if (strcmp(lo.source, pb->source) != 0)
    rc = remat__errorf(err, REMAT_EINVAL, "the plan %s was made for '%s', not for this job "
                       "('%s'); make it with remat plan --config and the same batch and "
                       "sequence length", d->plan, lo.source, pb->source);
  else if (lo.stages != P || lo.microbatches != d->train.grad_accum ||
           lo.schedule != d->schedule || lo.chunks != job_chunks(d))
    rc = remat__errorf(err, REMAT_EINVAL, "the plan %s is for %lld stages, %lld micro-batches "
                       "and %s of %lld chunks; this job has %lld stages, %lld micro-batches and "
                       "%s of %lld", d->plan, (long long)lo.stages, (long long)lo.microbatches,
                       remat_plan_schedule_name(lo.schedule), (long long)lo.chunks, (long long)P,
                       (long long)d->train.grad_accum, remat_plan_schedule_name(d->schedule),
                       (long long)job_chunks(d));
  if (!rc) {
    for (int64_t s = 0; s < P; s++) {
      if (!d->memory) pb->memory[s] = lo.budget_bytes[s];
      lps[s] = lo.layers_per_stage[s];
    }
    for (int64_t vs = 0; lo.chunks > 1 && vs < P * lo.chunks; vs++) lps[vs] = lo.chunk_layers[vs];
    if (!d->memory) pb->uniform_memory = 0;
    memcpy(layer_policy, lo.recompute, (size_t)job->cfg.num_layers + 2);
  }
  remat_plan_layout_free(&lo);
  return rc;
}

/* --calibrate: rank 0 times the model's layers on this machine and every
 * rank plans with its figures (they must place the stages alike). */
static int calibrated_times(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  if (d->calibrate <= 0) return 0;
  remat_layer_times t = {0};
  int rc = job->rank == 0
               ? remat_calibrate(&job->cfg, d->train.B, d->train.T, d->calibrate, &t, err)
               : 0;
  if ((rc = agree(job, rc, err))) return rc;
  if (job->dist && (rc = remat_dist_broadcast(job->dist, &t, sizeof t, 0, err))) return rc;
  remat_plan_problem_set_times(&job->pb, &t);
  return 0;
}

/* The pipeline's placement, chosen the way the description says: blocks
 * per stage by hand (with the block policies), a plan file, else the
 * planner's exact optimum under the budgets (or, without any, memory
 * ignored). The plan's figures come from the memory model, which the
 * stages' arenas follow. */
static int place_pipeline(remat_job *job, const uint8_t *block_policy, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t P = d->stages, L = job->cfg.num_layers, lps[REMAT_MAX_STAGES];
  int64_t v = job_chunks(d), nv = P * v; /* nv virtual stages: lps has one each */
  if (P > L + 2)
    return remat__errorf(err, REMAT_EINVAL, "%lld stages: more stages than the model has layers "
                         "(%lld blocks, the embedding and the head)", (long long)P, (long long)L);
  if (v > 1 && remat_schedule_check(d->schedule, P, d->train.grad_accum, v, L + 2, err))
    return REMAT_EINVAL;
  int rc = remat_plan_problem_from_replicas(&job->pb, &job->cfg, d->train.B, d->train.T, P,
                                            d->train.grad_accum, d->replicas, d->zero,
                                            (size_t)1 << 60, err);
  if (rc) return rc;
  job->have_pb = 1;
  if ((rc = calibrated_times(job, err))) return rc;
  job->pb.schedule = d->schedule;
  job->pb.chunks = v > 1 ? v : 0;
  if ((rc = stage_budgets(d, &job->pb, err))) return rc;
  uint8_t *layer_policy = calloc((size_t)L + 2, 1);
  if (!layer_policy) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  if (d->plan) {
    rc = layout_from_file(job, lps, layer_policy, err);
  } else if (d->layers) {
    int64_t n, sum = 0;
    rc = remat_parse_counts(d->layers, lps, REMAT_MAX_STAGES, &n, err);
    for (int64_t s = 0; !rc && s < n; s++) sum += lps[s];
    if (!rc && n != nv && v > 1)
      rc = remat__errorf(err, REMAT_EINVAL, "%lld block counts for %lld stages of %lld chunks: "
                         "give one per chunk, %lld in model order", (long long)n, (long long)P,
                         (long long)v, (long long)nv);
    else if (!rc && v == 1 && n != P)
      rc = remat__errorf(err, REMAT_EINVAL, "%lld block counts for %lld stages: give one per "
                         "stage, like 2,2", (long long)n, (long long)P);
    else if (!rc && sum != L)
      rc = remat__errorf(err, REMAT_EINVAL, "blocks per stage %s places %lld blocks but the model "
                         "has %lld", d->layers, (long long)sum, (long long)L);
    if (!rc) { /* planner numbering: the embedding joins stage 0, the head the last */
      lps[0] += 1;
      lps[nv - 1] += 1;
      for (int64_t l = 0; l < L; l++) layer_policy[l + 1] = block_policy[l];
    }
  } else {
    rc = remat_plan_solve(&job->pb, &job->plan, err);
    if (rc == 0 || rc == REMAT_EINFEASIBLE) job->have_plan = 1;
    if (rc == REMAT_EINFEASIBLE) {
      char msg[sizeof err->msg];
      snprintf(msg, sizeof msg, "%s", err->msg);
      remat__errorf(err, rc, "memory budget %s: %.*s", d->memory, (int)sizeof msg - 64, msg);
    }
    if (!rc) {
      for (int64_t s = 0; s < nv; s++)
        lps[s] = v > 1 ? job->plan.chunk_layers[s] : job->plan.stages[s].num_layers;
      memcpy(layer_policy, job->plan.policy, (size_t)L + 2);
    }
  }
  if (!rc && !job->have_plan) {
    for (int64_t s = 0; s < nv && !rc; s++)
      if (lps[s] < 1) rc = remat__errorf(err, REMAT_EINVAL, "%s %lld would hold no layer",
                                         v > 1 ? "chunk" : "stage", (long long)s);
    if (!rc) rc = remat_plan_evaluate(&job->pb, lps, layer_policy, &job->plan, err);
    if (!rc) job->have_plan = 1;
    for (int64_t s = 0; s < P && !rc; s++) {
      const remat_plan_stage *ps = &job->plan.stages[s];
      char b1[32], b2[32];
      if (ps->memory_bytes > ps->budget_bytes)
        rc = remat__errorf(err, REMAT_EINFEASIBLE,
                           "stage %lld needs %s but its budget is %s: the placement does not "
                           "fit; recompute more blocks or give it fewer",
                           (long long)s, remat_format_bytes(ps->memory_bytes, b1, sizeof b1),
                           remat_format_bytes(ps->budget_bytes, b2, sizeof b2));
    }
  }
  if (!rc)
    rc = remat_placement_from_chunks(&job->place, &job->cfg, P, v, lps, layer_policy,
                                     d->schedule, d->train.grad_accum, err);
  job->place.replicas = d->replicas;
  job->place.zero = d->zero;
  free(layer_policy);
  return rc;
}

/* Each block's policy and each stage's blocks, the way the description
 * says. */
static int place(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t L = job->cfg.num_layers;
  uint8_t policy[REMAT_MAX_LAYERS];
  int rc = 0;
  remat_policy_first_n(policy, L, 0);
  if (d->ckpt_ratio >= 0)
    remat_policy_first_n(policy, L, (int64_t)floor(d->ckpt_ratio * (double)L + 1e-9));
  else if (d->ckpt_layers)
    rc = remat_policy_parse_list(d->ckpt_layers, policy, L, err);
  if (rc) return rc;
  if (d->stages > 1) return place_pipeline(job, policy, err);
  if (d->memory) {
    size_t budget;
    if ((rc = remat_parse_size(d->memory, &budget, err))) return rc;
    if ((rc = policy_for_budget(job, budget, policy, err))) return rc;
  }
  remat_placement_whole(&job->place, &job->cfg, policy, d->train.grad_accum);
  job->place.replicas = d->replicas;
  job->place.zero = d->zero;
  return 0;
}

/* ------------------------------------------------------------- runtime */

static const char *state_name(const remat_job *job, char *buf, size_t cap) {
  if (job->ranks > 1) snprintf(buf, cap, "state_rank_%d.bin", job->rank);
  else snprintf(buf, cap, "state.bin");
  return buf;
}

/* This rank's state file in the checkpoint resumed from. */
static int resume_state_path(const remat_job *job, char *path, size_t cap, remat_error *err) {
  char name[64];
  int n = snprintf(path, cap, "%s/%s", job->resume_dir, state_name(job, name, sizeof name));
  return n < 0 || (size_t)n >= cap
             ? remat__errorf(err, REMAT_EINVAL, "the checkpoint's path is too long")
             : 0;
}

/* Interleaved: the workspace the rank's chunks share, the largest of
 * theirs (transient terms, without the residual gradient and the send
 * buffer each has). */
static int chunks_workspace(const remat_job *job, int rank, size_t *work, remat_error *err) {
  const remat_placement *pl = &job->place;
  remat_memory_model mm;
  int rc = remat_memory_model_get(&job->cfg, job->d.train.B, job->d.train.T, &mm, err);
  *work = 0;
  for (int64_t c = 0; !rc && c < pl->chunks; c++) {
    remat_stage st = remat_placement_chunk(pl, rank, c);
    st.work_borrowed = 0;
    remat_stage_bytes sb;
    if ((rc = remat_stage_bytes_get(&job->cfg, &mm, &st, &sb, err))) break;
    size_t t = sb.workspace - mm.stage_bytes - (st.has_head ? 0 : mm.boundary_bytes);
    if (t > *work) *work = t;
  }
  return rc;
}

/* The trainer of this rank's stage and the runtime around it. */
static int make_runtime(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  remat_train_opts to = trainer_opts(job);
  const remat_placement *pl = &job->place;
  int rc;
  switch (job->kind) {
  case REMAT_RUN_ONE:
    return remat_trainer_create(&job->tr, &job->cfg, pl->policy, &job->tok, &to, err);
  case REMAT_RUN_REPLICAS: {
    remat_stage st = remat_placement_stage(pl, 0, job->rank);
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    rc = remat_replicas_create(&job->dp, job->dist, job->tr, err);
    if (!rc && d->trace) rc = remat_replicas_trace_start(job->dp, d->train.steps, err);
    return rc;
  }
  case REMAT_RUN_PIPELINE: {
    remat_stage st = remat_placement_stage(pl, job->rank, 0);
    if (pl->chunks > 1) {
      st = remat_placement_chunk(pl, job->rank, 0);
      if ((rc = chunks_workspace(job, job->rank, &st.work_min, err))) return rc;
    }
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    rc = remat_pipeline_create(&job->pipe, job->dist, job->tr, pl, err);
    if (!rc && d->trace) rc = remat_pipeline_trace_start(job->pipe, d->train.steps, err);
    return rc;
  }
  default: { /* world rank s D + r: stage s, replica r */
    remat_stage st = remat_placement_stage(pl, remat_dist_stage(job->dist),
                                           remat_dist_replica(job->dist));
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    if ((rc = remat_grid_create(&job->grid, job->dist, job->tr, pl, err))) return rc;
    job->pipe = remat_grid_pipeline(job->grid);
    job->dp = remat_grid_replicas(job->grid);
    if (d->trace) rc = remat_pipeline_trace_start(job->pipe, d->train.steps, err);
    return rc;
  }
  }
}

int remat_job_prepare(remat_job *job, remat_error *err) {
  remat_job_desc *d = &job->d;
  int rc = check_ranks(job, err);
  if ((rc = agree(job, rc, err))) return rc;
  rc = remat_blas_check(err);
  if (!rc && d->resume) rc = find_resume(job, err);
  if (!rc) rc = check_outputs(job, err);
  if (!rc) rc = load_shape(job, err);
  if (!rc) {
    if (d->train.T == 0) d->train.T = job->cfg.max_seq_len < 64 ? job->cfg.max_seq_len : 64;
    if (d->train.T > job->cfg.max_seq_len)
      rc = remat__errorf(err, REMAT_EINVAL, "sequence length %lld exceeds the model's maximum "
                         "sequence length %lld", (long long)d->train.T,
                         (long long)job->cfg.max_seq_len);
  }
  if (!rc) rc = load_tokens(job, err);
  if (!rc) rc = place(job, err);
  if (!rc) rc = make_runtime(job, err);
  if (!rc && job->resumed) { /* other settings are refused before anything large exists */
    char path[4096];
    rc = resume_state_path(job, path, sizeof path, err);
    if (!rc) rc = remat_trainer_check_state(job->tr, path, job->rank, job->ranks, err);
  }
  if ((rc = agree(job, rc, err))) return rc;
  job->planned = remat_trainer_planned_bytes(job->tr);
  if (job->pipe) job->planned += remat_pipeline_chunk_bytes(job->pipe);
  /* the planner's figure for a replica's arena is the arena itself (the
   * memory model is one); a difference would be a bug, said as such */
  size_t budget, arena = remat_memplan_peak_bytes(remat_trainer_memplan(job->tr));
  if (job->kind == REMAT_RUN_REPLICAS && d->memory &&
      !remat_parse_size(d->memory, &budget, err) && arena > budget) {
    char b1[32], b2[32];
    rc = remat__errorf(err, REMAT_EINFEASIBLE, "a memory budget of %s does not fit a replica: "
                       "its arena needs %s (%zu bytes); raise the budget",
                       remat_format_bytes(budget, b1, sizeof b1),
                       remat_format_bytes(arena, b2, sizeof b2), arena);
  }
  return agree(job, rc, err);
}

/* Loads the model file's weights: the whole model, or this stage's slices
 * of it. */
static int load_weights(remat_job *job, remat_error *err) {
  remat_model *m = remat_trainer_model(job->tr);
  const remat_config *cfg = &job->cfg;
  const remat_stage *st = remat_model_stage(m);
  int sharded = st->replicas > 1 && st->zero == 3;
  if (st->has_embedding && st->has_head && st->num_blocks == cfg->num_layers && !sharded) {
    int rc = remat_checkpoint_read_params(&job->rd, cfg, remat_model_params(m), err);
    return rc ? rc : remat_params_overflow(cfg, remat_model_params(m), err);
  }
  float *full = malloc(remat_param_count(cfg) * sizeof(float));
  if (!full) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading the model file");
  int rc = remat_checkpoint_read_params(&job->rd, cfg, full, err);
  if (!rc) rc = remat_params_overflow(cfg, full, err);
  if (!rc) remat__stage_params_from_full(cfg, st, full, remat_model_params(m));
  if (!rc && job->pipe) remat_pipeline_load(job->pipe, full, 0);
  free(full);
  remat_heap_reset_peak();
  return rc;
}

/* The arena is written in full before the first step: a plan larger than
 * this machine's memory would end in the kernel's OOM killer, not an error. */
static int check_fits_machine(size_t planned, remat_error *err) {
  char b1[32], b2[32], b3[32];
  const char *what;
  size_t ram = remat_memory_headroom(&what);
  if (ram && planned > ram)
    return remat__errorf(err, REMAT_ENOMEM,
                         "the plan needs %s but %s leaves %s; lower the batch or the sequence "
                         "length, or give a memory budget of %s to recompute blocks",
                         remat_format_bytes(planned, b1, sizeof b1), what,
                         remat_format_bytes(ram, b2, sizeof b2),
                         remat_format_bytes(ram / 10 * 9, b3, sizeof b3));
  return 0;
}

int remat_job_start(remat_job *job, remat_error *err) {
  int rc = check_fits_machine(job->planned, err);
  if (!rc) rc = remat_trainer_allocate(job->tr, err);
  if (!rc && job->pipe) rc = remat_pipeline_allocate(job->pipe, err);
  REMAT_ASSERT(rc || remat_trainer_planned_bytes(job->tr) == job->planned);
  if (!rc && !job->d.model) {
    remat_model_init_weights(remat_trainer_model(job->tr), job->d.train.hp.seed);
    if (job->pipe) remat_pipeline_load(job->pipe, NULL, job->d.train.hp.seed);
  } else if (!rc) {
    rc = load_weights(job, err);
  }
  if (!rc && job->resumed) {
    char path[4096];
    rc = resume_state_path(job, path, sizeof path, err);
    if (!rc) rc = remat_trainer_load_state(job->tr, path, job->rank, job->ranks, err);
  }
  if (!rc) job->last_checkpoint = remat_trainer_steps_done(job->tr);
  return agree(job, rc, err);
}

/* ------------------------------------------------------------ weights */

/* The whole model's weights at path in the given checkpoint version. */
static int save_weights(remat_job *job, const char *path, int version, remat_error *err) {
  const remat_config *cfg = &job->cfg;
  remat_model *m = remat_trainer_model(job->tr);
  if (!job->pipe && !job->dp)
    return remat_checkpoint_save_as(path, cfg, remat_model_params(m), version, err);
  float *full = job->rank == 0 ? malloc(remat_param_count(cfg) * sizeof(float)) : NULL;
  int rc = job->rank == 0 && !full
               ? remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the model to save it")
               : 0;
  if ((rc = agree(job, rc, err))) return rc;
  rc = job->grid   ? remat_grid_gather_params(job->grid, full, err)
       : job->pipe ? remat_pipeline_gather_params(job->pipe, full, err)
                   : remat_replicas_gather_params(job->dp, full, err);
  if (!rc && job->rank == 0) rc = remat_checkpoint_save_as(path, cfg, full, version, err);
  free(full);
  return agree(job, rc, err);
}

int remat_job_save(remat_job *job, const char *path, remat_error *err) {
  return save_weights(job, path, job->d.save_version ? job->d.save_version : REMAT_CKPT_VERSION,
                      err);
}

/* A checkpoint directory for the step just taken: the weights (rank 0),
 * each rank's state, and DONE last, once every rank has written its part. */
static int write_checkpoint(remat_job *job, remat_error *err) {
  const char *dir = job->d.checkpoint_dir;
  int64_t step = remat_trainer_steps_done(job->tr);
  char path[4096], name[64];
  int rc = job->rank == 0 ? remat_checkpoint_dir_make(dir, step, err) : 0;
  if ((rc = agree(job, rc, err))) return rc;
  if (remat_checkpoint_dir_path(path, sizeof path, dir, step, "model.bin"))
    return remat__errorf(err, REMAT_EINVAL, "the checkpoint directory's path is too long");
  if ((rc = save_weights(job, path, REMAT_CKPT_VERSION, err))) return rc; /* fp32: exact */
  remat_checkpoint_dir_path(path, sizeof path, dir, step, state_name(job, name, sizeof name));
  rc = remat_trainer_save_state(job->tr, path, job->rank, job->ranks, err);
  if (!rc && job->rank == 0) { /* the run's settings, for a resume that names only the dir */
    remat_checkpoint_dir_path(path, sizeof path, dir, step, "settings");
    rc = remat__job_settings_save(path, &job->d, &job->cfg,
                                   job->d.eval_every > 0 || job->held_out, err);
  }
  if ((rc = agree(job, rc, err))) return rc;
  /* every rank's files are written: one rank lists and seals them, with the
   * run the states name (they must all name one) */
  remat_checkpoint_dir_path(path, sizeof path, dir, step, NULL);
  rc = job->rank == 0 ? remat_checkpoint_seal(path, step, NULL, err) : 0;
  if ((rc = agree(job, rc, err))) return rc;
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
  int rc = write_checkpoint(job, err);
  if (!rc) *step = done;
  return rc;
}

/* ------------------------------------------------------------ stepping */

int remat_job_done(const remat_job *job) {
  return remat_trainer_steps_done(job->tr) >= job->d.train.steps;
}

/* Each rank's planned and measured arena (rank 0 gets them). */
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
    return 0;
  }
  int rc = remat_dist_gather_sizes(job->dist, planned, in->rank_planned, err);
  return rc ? rc : remat_dist_gather_sizes(job->dist, hw, in->rank_measured, err);
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
    if ((rc = write_checkpoint(job, err))) { /* agreed: every rank knows */
      in->checkpoint_failed = 1;
      return rc;
    }
    in->checkpoint_step = step;
  }
  return 0;
}

int remat_job_trace_write(remat_job *job, const char *path, remat_error *err) {
  int rc = job->pipe ? remat_pipeline_trace_write(job->pipe, path, err)
           : job->dp ? remat_replicas_trace_write(job->dp, path, err)
                     : remat__errorf(err, REMAT_EINVAL, "a timeline is recorded only across "
                                     "several ranks");
  return agree(job, rc, err); /* rank 0 writes the file: the others learn how it went */
}

int remat_job_agree(remat_job *job, int status, remat_error *err) {
  return agree(job, status, err);
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

const char *remat_job_resumed_from(const remat_job *job, int64_t *step, const char **note) {
  *step = job->resumed ? job->resume_step : 0;
  if (note) *note = job->resumed && job->resume_note[0] ? job->resume_note : NULL;
  return job->resumed ? job->resume_dir : NULL;
}

int remat_job_rank_memplan(const remat_job *job, int k, remat_stage *st, remat_memplan **mp,
                           remat_error *err) {
  const remat_placement *pl = &job->place;
  int64_t D = pl->replicas > 1 ? pl->replicas : 1;
  if (k < 0 || k >= pl->stages * D)
    return remat__errorf(err, REMAT_EINVAL, "rank %d is not one of the job's %lld", k,
                         (long long)(pl->stages * D));
  if (pl->stages == 1 && D == 1) *st = remat_stage_whole(&job->cfg, pl->policy);
  else *st = remat_placement_stage(pl, k / D, k % D);
  return remat_memplan_create_stage(mp, &job->cfg, job->d.train.B, job->d.train.T, st, err);
}

int64_t remat_job_chunks(const remat_job *job) {
  return job->place.chunks > 1 ? job->place.chunks : 1;
}

int remat_job_chunk_memplan(const remat_job *job, int k, int64_t c, remat_stage *st,
                            remat_memplan **mp, remat_error *err) {
  const remat_placement *pl = &job->place;
  if (pl->chunks < 2) return remat_job_rank_memplan(job, k, st, mp, err);
  if (k < 0 || k >= pl->stages || c < 0 || c >= pl->chunks)
    return remat__errorf(err, REMAT_EINVAL, "rank %d's chunk %lld is not one of the job's", k,
                         (long long)c);
  *st = remat_placement_chunk(pl, k, c);
  int rc = c == 0 ? chunks_workspace(job, k, &st->work_min, err) : 0;
  return rc ? rc : remat_memplan_create_stage(mp, &job->cfg, job->d.train.B, job->d.train.T, st,
                                              err);
}

void remat_job_predict(const remat_job *job, double rank_flops, double *seconds,
                       double *bubble) {
  *seconds = *bubble = 0;
  if (!job->have_plan || (rank_flops <= 0 && job->d.calibrate <= 0)) return;
  const remat_plan *p = &job->plan;
  double busy = 0;
  for (int64_t s = 0; s < p->num_stages; s++) busy += p->stages[s].time * (double)p->microbatches;
  double sim = p->simulated_time > 0 ? p->simulated_time : p->iteration_time;
  /* calibrated times are seconds already; else GFLOP at the rank's rate */
  *seconds = job->d.calibrate > 0 ? sim : sim * 1e9 / rank_flops;
  *bubble = sim > 0 ? 1 - busy / ((double)p->num_stages * sim) : 0;
}

/* ------------------------------------------------------------- parsing */

int remat_policy_parse_list(const char *s, uint8_t *policy, int64_t L, remat_error *err) {
  remat_policy_first_n(policy, L, 0);
  const char *p = s;
  int cur = REMAT_RECOMPUTE;
  if (!*p) goto bad;
  while (*p) {
    if (!strncmp(p, "full:", 5)) {
      cur = REMAT_RECOMPUTE;
      p += 5;
    } else if (!strncmp(p, "middle:", 7)) {
      cur = REMAT_MIDDLE;
      p += 7;
    }
    int64_t v, w;
    char *end;
    if (*p < '0' || *p > '9') goto bad;
    v = w = strtoll(p, &end, 10);
    p = end;
    if (*p == '-') {
      if (p[1] < '0' || p[1] > '9') goto bad;
      w = strtoll(p + 1, &end, 10);
      if (w < v) goto bad;
      p = end;
    }
    for (int64_t k = v; k <= w; k++) {
      if (k < 0 || k >= L)
        return remat__errorf(err, REMAT_EINVAL, "the block list names block %lld but the model "
                             "has blocks 0..%lld", (long long)k, (long long)L - 1);
      if (policy[k] != REMAT_KEEP)
        return remat__errorf(err, REMAT_EINVAL, "the block list names block %lld twice",
                             (long long)k);
      policy[k] = (uint8_t)cur;
    }
    if (*p == ',') {
      p++;
      if (!*p) goto bad;
    } else if (*p) {
      goto bad;
    }
  }
  return 0;
bad:
  return remat__errorf(err, REMAT_EINVAL, "the block list expects block indices like 0,2,5 or "
                       "0-3, with 'middle:' or 'full:' before them to choose the policy "
                       "(full:0-3,middle:4-11); got '%s'", s);
}
