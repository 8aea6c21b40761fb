/* desc.c: a job's description and the ranks' agreement on it (remat/job.h):
 * the rules by which its settings go together, each checked here once and
 * named by setting (a front end maps the names to its own, remat train to
 * its flags); the ranks started, their descriptions compared and their
 * count checked; every later failure on one rank agreed on by all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "job/job_internal.h"

/* ------------------------------------------------------------- settings */

int64_t remat__job_chunks(const remat_job_desc *d) {
  return remat_schedule_chunks(d->schedule, d->chunks);
}

const char *remat__job_name(const remat_job_desc *d, const char *key) {
  const char *name = d->setting_name ? d->setting_name(key) : NULL;
  return name ? name : key;
}
#define N remat__job_name

/* The recomputed blocks are chosen one way, and the settings that act on
 * stages or replicas have them. */
static int check_choices(const remat_job_desc *d, remat_error *err) {
  if ((d->ckpt_ratio >= 0) + !!d->ckpt_layers + !!d->memory + !!d->plan > 1)
    return remat__errorf(err, REMAT_EINVAL, "%s, %s, %s and %s each choose the recomputed "
                         "blocks; give at most one", N(d, "ckpt-ratio"), N(d, "ckpt-layers"),
                         N(d, "mem"), N(d, "plan"));
  if (d->stages == 1 && d->calibrate > 0)
    return remat__errorf(err, REMAT_EINVAL, "%s times the layers to place a pipeline's stages: "
                         "give %s P too (the planner alone calibrates a plan of one process)",
                         N(d, "calibrate"), N(d, "stages"));
  if (d->stages == 1 && (d->layers || d->plan))
    return remat__errorf(err, REMAT_EINVAL, "%s and %s place a pipeline: give %s P too (and "
                         "start P ranks with mpirun -np P)", N(d, "layers"), N(d, "plan"),
                         N(d, "stages"));
  if (d->layers && d->memory)
    return remat__errorf(err, REMAT_EINVAL, "%s places the blocks by hand and %s lets remat "
                         "place them; give one", N(d, "layers"), N(d, "mem"));
  if ((d->stages > 1 || d->replicas > 1) && d->eval_every > 0)
    return remat__errorf(err, REMAT_EINVAL, "%s runs on one process only; drop it with %s",
                         N(d, "eval-every"), N(d, d->stages > 1 ? "stages" : "data-parallel"));
  return 0;
}

/* What tensor parallelism runs with so far. */
static int check_tensor(const remat_job_desc *d, remat_error *err) {
  if (d->tensor < 1 || d->tensor > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "%s %lld: give 1 to %d ranks",
                         N(d, "tensor-parallel"), (long long)d->tensor, REMAT_MAX_STAGES);
  if (d->sequence && d->tensor < 2)
    return remat__errorf(err, REMAT_EINVAL, "%s splits the tokens among tensor ranks: give %s "
                         "2 or more with it", N(d, "sequence-parallel"), N(d, "tensor-parallel"));
  if (d->tensor == 1) return 0;
  if (d->stages >= 1 && d->replicas >= 1 &&
      d->tensor * d->stages * d->replicas > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "%s %lld x %s %lld x %s %lld is %lld ranks; a job "
                         "runs 1 to %d", N(d, "tensor-parallel"), (long long)d->tensor,
                         N(d, "stages"), (long long)d->stages, N(d, "data-parallel"),
                         (long long)d->replicas,
                         (long long)(d->tensor * d->stages * d->replicas), REMAT_MAX_STAGES);
  return 0;
}

int remat_job_desc_check(const remat_job_desc *d, remat_error *err) {
  int rc = check_choices(d, err);
  if (!rc) rc = check_tensor(d, err);
  if (rc) return rc;
  if (d->stages < 1 || d->replicas < 1 || d->stages * d->replicas > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "%s %lld x %s %lld is %lld ranks; a job runs 1 to "
                         "%d", N(d, "stages"), (long long)d->stages, N(d, "data-parallel"),
                         (long long)d->replicas, (long long)(d->stages * d->replicas),
                         REMAT_MAX_STAGES);
  if (d->head_chunk < -1 || d->head_chunk > ((int64_t)1 << 30))
    return remat__errorf(err, REMAT_EINVAL, "%s %lld: give a count of tokens (0 for all of a "
                         "micro-batch's at once) or auto", N(d, "head-chunk"),
                         (long long)d->head_chunk);
  if (d->zero < 0 || d->zero > 3)
    return remat__errorf(err, REMAT_EINVAL, "%s %d: ZeRO's stages are 0 to 3", N(d, "zero"),
                         d->zero);
  if (d->replicas == 1 && d->zero)
    return remat__errorf(err, REMAT_EINVAL, "%s %d shards across replicas: give %s D too (and "
                         "start D ranks with mpirun -np D)", N(d, "zero"), d->zero,
                         N(d, "data-parallel"));
  if (d->data && d->text)
    return remat__errorf(err, REMAT_EINVAL, "give %s or %s, not both", N(d, "data"),
                         N(d, "text"));
  if (d->val_data && d->eval_every <= 0 && !d->resume)
    return remat__errorf(err, REMAT_EINVAL, "%s is evaluated every %s N steps: give %s too",
                         N(d, "val-data"), N(d, "eval-every"), N(d, "eval-every"));
  if (d->val_data && d->text)
    return remat__errorf(err, REMAT_EINVAL, "%s holds token shards, %s bytes of text: give %s "
                         "with %s, or hold text out with %s", N(d, "val-data"), N(d, "text"),
                         N(d, "val-data"), N(d, "data"), N(d, "val-frac"));
  if (d->replace_checkpoints && (!d->checkpoint_dir || d->resume))
    return remat__errorf(err, REMAT_EINVAL, "%s starts a new run in %s DIR, removing the step "
                         "directories there; %s", N(d, "replace-checkpoints"),
                         N(d, "checkpoint-dir"),
                         d->resume ? "a resume goes on in its own: drop it"
                                   : "give the directory too");
  if (!!d->checkpoint_dir != (d->checkpoint_every > 0))
    return remat__errorf(err, REMAT_EINVAL, "%s DIR and %s N go together",
                         N(d, "checkpoint-dir"), N(d, "checkpoint-every"));
  if (d->keep_checkpoints < 0 || (d->keep_checkpoints > 0 && !d->checkpoint_dir))
    return remat__errorf(err, REMAT_EINVAL, "%s N keeps the newest N checkpoints of %s DIR: "
                         "give N >= 1 with %s", N(d, "keep-checkpoints"), N(d, "checkpoint-dir"),
                         N(d, "checkpoint-dir"));
  if (d->resume && d->model)
    return remat__errorf(err, REMAT_EINVAL, "%s takes the weights from its checkpoint; drop %s",
                         N(d, "resume"), N(d, "model"));
  return 0;
}

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
                         "replicas; use %s with %s", row->name,
                         remat_plan_schedule_name(REMAT_SCHED_1F1B), N(d, "data-parallel"));
  if (d->chunks && !chunked)
    return remat__errorf(err, REMAT_EINVAL, "%s goes with %s %s", N(d, "chunks"),
                         N(d, "schedule"),
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_CHUNKED, "or"));
  if (chunked) {
    int64_t v = remat__job_chunks(d);
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
                           "%s %lld is not a multiple of %lld", row->name, N(d, "grad-accum"),
                           (long long)d->train.grad_accum, (long long)d->stages);
  }
  return 0;
}

/* ------------------------------------------------------------ agreement */

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
                     d->layers, d->plan, d->checkpoint_dir, d->resume, d->val_data};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) h = fnv_str(h, s[i]);
  int64_t v[] = {d->train.B, d->train.T, d->train.grad_accum, d->train.steps, d->train.warmup,
                 d->train.cosine, d->train.shuffle, d->train.eval_batches, d->eval_every,
                 d->stages, d->replicas, d->zero, d->schedule, d->chunks, d->checkpoint_every,
                 d->keep_checkpoints, d->trace, d->replace_checkpoints, d->head_chunk,
                 (int64_t)d->train.hp.seed};
  double f[] = {d->train.lr, d->train.val_frac, d->ckpt_ratio, d->train.hp.weight_decay,
                d->train.hp.grad_clip, d->train.hp.dropout};
  h = fnv(h, v, sizeof v);
  h = fnv(h, f, sizeof f);
  return fnv(h, &d->launch_digest, sizeof d->launch_digest);
}

/* The rank count the launcher started, against the description's: known
 * alike on every rank (each has the same count and, with the same
 * description, the same want). */
static int ranks_message(const remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t want = d->stages * d->replicas * d->tensor;
  char what[192];
  if (d->tensor > 1 && d->replicas > 1)
    snprintf(what, sizeof what, "%s %lld x %s %lld is %lld ranks", N(d, "tensor-parallel"),
             (long long)d->tensor, N(d, "data-parallel"), (long long)d->replicas,
             (long long)want);
  else if (d->tensor > 1)
    snprintf(what, sizeof what, "%s is %lld", N(d, "tensor-parallel"), (long long)want);
  else if (d->stages > 1 && d->replicas > 1)
    snprintf(what, sizeof what, "%s %lld x %s %lld is a grid of %lld ranks", N(d, "stages"),
             (long long)d->stages, N(d, "data-parallel"), (long long)d->replicas,
             (long long)want);
  else
    snprintf(what, sizeof what, "%s is %lld", N(d, d->stages > 1 ? "stages" : "data-parallel"),
             (long long)want);
  return remat__errorf(err, REMAT_EINVAL, "started on %d ranks but %s: start exactly that many "
                       "(mpirun -np %lld)", job->ranks, what, (long long)want);
}

int remat__job_agree(remat_job *job, int rc, remat_error *err) {
  if (!job->dist) return rc;
  if (job->other_flags >= 0) /* known alike on every rank: no rank goes on */
    return remat__errorf(err, REMAT_EINVAL, "rank %d was started with other flags than rank 0; "
                         "every rank must run the same command", job->other_flags);
  if (job->ranks_differ) return ranks_message(job, err);
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

int remat_job_agree(remat_job *job, int status, remat_error *err) {
  return remat__job_agree(job, status, err);
}

/* ------------------------------------------------------------- lifetime */

int remat_job_create(remat_job **out, const remat_job_desc *desc, remat_error *err) {
  *out = NULL;
  const remat_job_desc *d = desc;
  int rc = remat_job_desc_check(d, err);
  if (!rc) rc = check_schedule(d, err);
  if (rc) return rc;
  if (d->plan) { /* read now: a plan the runtime cannot run is refused by its schedule first */
    remat_plan_layout lo;
    if ((rc = remat_plan_layout_load(&lo, d->plan, err))) return rc;
    remat_plan_layout_free(&lo);
  }
  if (d->save_version && d->save_version != REMAT_CKPT_VERSION &&
      d->save_version != REMAT_CKPT_VERSION_BF16)
    return remat__errorf(err, REMAT_EINVAL, "a model file is saved in version %d (fp32) or %d "
                         "(bf16), not %d", REMAT_CKPT_VERSION, REMAT_CKPT_VERSION_BF16,
                         d->save_version);
  if (d->save_format < 0 || d->save_format >= REMAT_FORMAT_COUNT)
    return remat__errorf(err, REMAT_EINVAL, "unknown model file format %d: auto, llm.c, "
                         "llama2c-legacy or llama2c-v1", d->save_format);
  /* The job's own bookkeeping, like a front end's, is not the trainer's
   * (plain calloc, outside the library's count): a job plans the bytes a
   * bare trainer would. */
  remat_job *job = calloc(1, sizeof *job);
  if (!job) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  job->d = *desc;
  job->ranks = 1;
  job->ckpt_lock = -1;
  job->kind = d->tensor > 1                    ? REMAT_RUN_TENSOR
              : d->stages > 1 && d->replicas > 1 ? REMAT_RUN_GRID
              : d->stages > 1                 ? REMAT_RUN_PIPELINE
              : d->replicas > 1               ? REMAT_RUN_REPLICAS
                                              : REMAT_RUN_ONE;
  if (job->kind != REMAT_RUN_ONE || remat_dist_launched()) {
    rc = remat_dist_create(&job->dist, NULL, NULL, err);
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
    job->ranks_differ = job->ranks != d->stages * d->replicas * d->tensor;
  } else {
    job->other_flags = -1;
  }
  *out = job;
  return 0;
}

void remat_job_destroy(remat_job *job, int status) {
  if (!job) return;
  remat_tensor_group_destroy(job->tg);
  if (job->grid) {
    remat_grid_destroy(job->grid);
  } else {
    remat_pipeline_destroy(job->pipe);
    remat_replicas_destroy(job->dp);
  }
  remat_solo_destroy(job->solo);
  remat_trainer_destroy(job->tr);
  if (job->have_plan) remat_plan_free(&job->plan);
  if (job->have_pb) remat_plan_problem_free(&job->pb);
  remat_budgets_free(&job->budgets);
  remat_checkpoint_reader_free(&job->rd);
  remat_tokens_free(&job->tok);
  remat_tokens_free(&job->val_tok);
  remat_checkpoint_dir_unlock(job->ckpt_lock); /* another run may use the directory now */
  if (job->dist) remat_dist_destroy(job->dist, status);
  free(job);
}

