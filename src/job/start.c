/* start.c: a job from its description to its first step (remat/job.h):
 * the ranks laid out, a resume's checkpoint found and checked against its
 * saved settings, the outputs checked, the shape and the data read, the
 * blocks placed (place.c), the runtime made; then the arena allocated and
 * the weights and a resume's state loaded, this rank's slice of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "job/job_internal.h"
#include "model/model_runtime.h"
#include "remat/report.h"

/* ----------------------------------------------------------------- ranks */

/* As many ranks as the description asks, all with the same description;
 * then the P x D layout. */
static int check_ranks(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  if (!job->dist) return 0;
  if (job->other_flags >= 0 || job->ranks_differ) /* its message */
    return remat__job_agree(job, 0, err);
  if (job->kind == REMAT_RUN_TENSOR) { /* tensor groups of adjacent ranks, their copies replicas */
    remat_dist *tensor, *outer;
    int rc = remat_dist_tensor_split(job->dist, d->tensor, &tensor, &outer, err);
    return rc ? rc : remat_dist_grid(outer, d->stages, d->replicas, err);
  }
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
  job->saved_data = (remat__data_id){s.data_bytes, s.data_crc, s.data_known};
  job->saved_val = (remat__data_id){s.val_bytes, s.val_crc, s.val_known};
  remat_job_desc d = job->d;
  d.model = NULL;
  if (remat_job_saved_conflict(&s, &d, &c))
    rc = remat__errorf(err, REMAT_EINVAL, "the run in %s was saved with %s %s, not %s; a resume "
                       "keeps the run's settings", job->resume_dir,
                       remat__job_name(&job->d, c.key), c.saved, c.given);
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

/* d as a checkpoint would save it, to compare with one saved (sv): no
 * share held out unless evaluated on it; the shape a model file gives, or
 * "small". */
static const remat_job_desc *as_saved(const remat_job_desc *d, const remat_job_desc *sv,
                                      remat_job_desc *out) {
  *out = *d;
  if (out->eval_every <= 0 || out->val_data) out->train.val_frac = 0;
  if (!out->config) out->config = out->model ? sv->config : "small";
  return out;
}

/* A new run's checkpoint directory that holds checkpoints of another run
 * (one whose resume with this run's settings would be refused): refused,
 * or with replace_checkpoints emptied of step directories first, so a
 * later resume never continues the other run from a mix of both. Checked
 * under the directory's lock, so no other run writes there meanwhile. */
static int check_other_run(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  const char *dir = d->checkpoint_dir;
  int64_t count, newest, removed = 0;
  int rc = remat_checkpoint_dir_sealed(dir, &count, &newest, err);
  if (rc || job->resumed) return rc;
  if (d->replace_checkpoints) {
    if ((rc = remat_checkpoint_dir_remove_all(dir, &removed, err))) return rc;
    if (removed)
      snprintf(job->ckpt_note, sizeof job->ckpt_note, "removed %lld step director%s from %.300s "
               "(%s)", (long long)removed, removed == 1 ? "y" : "ies", dir,
               remat__job_name(d, "replace-checkpoints"));
    return 0;
  }
  if (!count) return 0;
  remat_job_saved s;
  remat_job_conflict c;
  remat_job_desc nd;
  remat_error e;
  char why[600] = "";
  if (remat_job_saved_load(&s, dir, &e))
    snprintf(why, sizeof why, "; %.150s", e.msg);
  else if (!s.found)
    snprintf(why, sizeof why, ", written by an older remat without its settings");
  else if (remat_job_saved_conflict(&s, as_saved(d, &s.desc, &nd), &c))
    snprintf(why, sizeof why, ", saved with %s %.80s, not %.80s", remat__job_name(d, c.key),
             c.saved, c.given);
  int same = !why[0];
  if (same) /* this run's settings: a rerun writes the same checkpoints again */
    snprintf(job->ckpt_note, sizeof job->ckpt_note, "%.300s holds this run's checkpoints to step "
             "%lld; they are written again (%s %.300s goes on from the newest)", dir,
             (long long)s.step, remat__job_name(d, "resume"), dir);
  remat_job_saved_free(&s);
  if (same) return 0;
  return remat__errorf(err, REMAT_EINVAL, "%.100s holds another run's checkpoints (to step "
                       "%lld%.200s): resume it (%s %.100s), choose another %s, or give %s to "
                       "remove them", dir, (long long)newest, why, remat__job_name(d, "resume"),
                       dir, remat__job_name(d, "checkpoint-dir"),
                       remat__job_name(d, "replace-checkpoints"));
}

/* The outputs: find out now, not after hours of training, that one cannot
 * be written; and never write over an input. */
static int check_outputs(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  const char *ins[][2] = {{job->resumed ? "the checkpoint's weights" : "the model file", d->model},
                          {"the token shard", d->data}, {"the text", d->text},
                          {"the validation shard", d->val_data}};
  for (int i = 0; i < 4; i++) {
    const char *out = d->outputs[i];
    if (!out) continue;
    for (size_t j = 0; j < 4; j++)
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
  /* created now (by rank 0), or why it cannot be; held by this run alone
   * until it ends; no other run's checkpoints there; and nothing in the
   * way of the step directories the run will write */
  if (!d->checkpoint_dir || job->rank != 0) return 0;
  int rc = remat_output_dir_check(d->checkpoint_dir, err);
  if (!rc) rc = remat_checkpoint_dir_lock(d->checkpoint_dir, &job->ckpt_lock, err);
  if (!rc) rc = check_other_run(job, err);
  return rc ? rc : remat_checkpoint_dir_check(d->checkpoint_dir, job->resume_step,
                                              d->train.steps, d->checkpoint_every, err);
}

/* A shape as the messages show it: GPT-2's five dimensions, a Llama's
 * family, key/value heads, MLP width and head too. */
static const char *shape_text(const remat_config *c, char *buf, size_t cap) {
  int n = snprintf(buf, cap, "L=%lld C=%lld NH=%lld V=%lld T=%lld", (long long)c->num_layers,
                   (long long)c->channels, (long long)c->num_heads, (long long)c->vocab_size,
                   (long long)c->max_seq_len);
  if (c->family != REMAT_FAMILY_GPT2 && n > 0 && (size_t)n < cap)
    snprintf(buf + n, cap - (size_t)n, " (%s, NKV=%lld H=%lld, %s head)",
             remat_family_name((int)c->family), (long long)c->kv_heads,
             (long long)c->ffn_hidden, c->untied ? "untied" : "tied");
  return buf;
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
    job->cfg.tensor_parallel = d->tensor > 1 ? d->tensor : 0; /* a rank's shard */
    job->cfg.sequence_parallel = d->tensor > 1 && d->sequence;
    return rc ? rc : remat_config_check(&job->cfg, err);
  }
  if ((rc = remat_checkpoint_reader_open(&job->rd, d->model, &job->cfg, err))) return rc;
  /* llama2.c's files hold no rotary base (they read as 10000): a Llama
   * --config of the file's shape gives it */
  if (d->config && job->rd.format != REMAT_FORMAT_LLMC && want.family == REMAT_FAMILY_LLAMA)
    job->cfg.rope_theta = job->rd.cfg.rope_theta = want.rope_theta;
  const remat_config *c = &job->cfg;
  char have_s[160], want_s[160];
  if (d->config && memcmp(c, &want, sizeof want) != 0)
    return remat__errorf(err, REMAT_ESHAPE,
                         "the model file %s has shape %s but the job asks for %s; use a matching "
                         "checkpoint or leave the shape to the file",
                         d->model, shape_text(c, have_s, sizeof have_s),
                         shape_text(&want, want_s, sizeof want_s));
  job->cfg.precision = d->precision; /* a model file loads into either */
  job->cfg.tensor_parallel = d->tensor > 1 ? d->tensor : 0; /* a rank's shard */
  job->cfg.sequence_parallel = d->tensor > 1 && d->sequence;
  return d->tensor > 1 ? remat_config_check(&job->cfg, err) : 0;
}

/* A token source's size and CRC32C (of its shards one after another),
 * saved with each checkpoint; a resume's must be the saved run's, whatever
 * path it is read from. key names its setting. */
static int identify_data(remat_job *job, const char *path, const remat_shards *sh,
                         const char *key, remat__data_id *id, const remat__data_id *was,
                         remat_error *err) {
  int rc = sh ? remat_shards_checksum(sh, &id->bytes, &id->crc, err)
              : remat_file_checksum(path, "text", "the text", &id->bytes, &id->crc, err);
  if (rc) return rc;
  id->known = 1;
  if (!was->known || (id->bytes == was->bytes && id->crc == was->crc)) return 0;
  return remat__errorf(err, REMAT_EINVAL, "%s is not the data of the run in %s: %llu bytes with "
                       "CRC32C %08x, the run's had %llu bytes with CRC32C %08x; give %s the "
                       "run's %s", path, job->resume_dir, (unsigned long long)id->bytes,
                       (unsigned)id->crc, (unsigned long long)was->bytes, (unsigned)was->crc,
                       remat__job_name(&job->d, key), sh && sh->n > 1 ? "files" : "file");
}

/* Shards (a path, a list, a pattern) into t, identified as key's. */
static int load_shards(remat_job *job, const char *spec, const char *key, remat_tokens *t,
                       remat__data_id *id, const remat__data_id *was, remat_error *err) {
  remat_shards sh;
  int rc = remat_shards_find(&sh, spec, err);
  if (rc) return rc;
  rc = identify_data(job, spec, &sh, key, id, was, err);
  if (!rc) rc = remat_tokens_load_shards(t, &sh, err);
  if (!rc && sh.n > 1 && t == &job->tok) { /* how the data line names it */
    snprintf(job->source_buf, sizeof job->source_buf, "%.4000s (%lld shards)", spec,
             (long long)sh.n);
    job->source = job->source_buf;
  }
  remat_shards_free(&sh);
  return rc;
}

static int load_tokens(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  job->source = d->data ? d->data : d->text ? d->text : "embedded corpus";
  int rc;
  if (d->val_data) { /* before the training data: its bytes count as the data's do */
    rc = load_shards(job, d->val_data, "val-data", &job->val_tok, &job->val, &job->saved_val,
                     err);
    if (rc) return rc;
    job->have_val_tok = 1;
    job->val_source = d->val_data;
  }
  if (d->data)
    return load_shards(job, d->data, "data", &job->tok, &job->data, &job->saved_data, err);
  if (d->text) {
    rc = identify_data(job, d->text, NULL, "text", &job->data, &job->saved_data, err);
    return rc ? rc : remat_tokens_from_text(&job->tok, d->text, err);
  }
  return remat_corpus_tokens(&job->tok, 0, err);
}

/* val_data: the trainer evaluates on its tokens (nothing of the data is
 * held out). */
static int set_eval_tokens(remat_job *job, remat_error *err) {
  if (!job->have_val_tok) return 0;
  int rc = remat_trainer_set_eval_tokens(job->tr, &job->val_tok, err);
  if (rc) { /* the loader speaks of a split: it is the validation data */
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    remat__errorf(err, rc, "%s %.200s: %.*s", remat__job_name(&job->d, "val-data"),
                  job->d.val_data, (int)sizeof msg - 300, msg);
  }
  return rc;
}

/* The trainer's options: a replica's step runs K of the step's K x D
 * micro-batches; tokens are held out only when evaluated. */
static remat_train_opts trainer_opts(const remat_job *job) {
  const remat_job_desc *d = &job->d;
  remat_train_opts to = d->train;
  to.grad_accum = d->train.grad_accum * d->replicas;
  to.val_frac = d->val_data ? 0.0 : d->eval_every > 0 || job->held_out ? d->train.val_frac : 0.0;
  return to;
}

static int make_runtime(remat_job *job, remat_error *err) {
  remat_train_opts to = trainer_opts(job);
  const remat_placement *pl = &job->place;
  int rc;
  switch (job->kind) {
  case REMAT_RUN_ONE:
    return remat_trainer_create(&job->tr, &job->cfg, pl->policy, &job->tok, &to, err);
  case REMAT_RUN_TENSOR: { /* copy q (world rank / t), replicas of each other */
    remat_dist *tensor, *outer;
    if ((rc = remat_dist_tensor_split(job->dist, job->d.tensor, &tensor, &outer, err)))
      return rc;
    job->tensor = tensor;
    int64_t s = remat_dist_stage(outer);
    remat_stage st = remat_placement_stage(pl, s, remat_dist_replica(outer));
    if (pl->chunks > 1) { /* chunk 0, sized for the rank's largest chunk's workspace */
      st = remat_placement_chunk(pl, s, 0);
      if ((rc = remat__job_chunks_workspace(job, (int)s, &st.work_min, err))) return rc;
    }
    st.slots_pooled = job->d.stages > 1 && remat_placement_pooled(pl);
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    if (job->d.stages > 1 && job->d.replicas > 1) {
      if ((rc = remat_grid_create(&job->grid, outer, job->tr, pl, err))) return rc;
      job->pipe = remat_grid_pipeline(job->grid);
      job->dp = remat_grid_replicas(job->grid);
    } else if (job->d.replicas > 1) {
      rc = remat_replicas_create(&job->dp, outer, job->tr, err);
    } else if (job->d.stages > 1) {
      rc = remat_pipeline_create(&job->pipe, outer, job->tr, pl, err);
    }
    /* one group alone drawing its timeline: the trainer's own step timed
     * (remat_solo), whose ops the group's then wrap */
    if (!rc && job->d.trace && !job->pipe && !job->dp)
      rc = remat_solo_create(&job->solo, job->tr, job->d.train.steps, err);
    if (rc || (rc = remat_tensor_group_create(&job->tg, tensor, job->tr, err))) return rc;
    if (job->pipe) remat_tensor_group_join(job->tg, job->dist, pl, job->pipe);
    if (job->dp) remat_tensor_group_join_replicas(job->tg, job->dp);
    return 0;
  }
  case REMAT_RUN_REPLICAS: {
    remat_stage st = remat_placement_stage(pl, 0, job->rank);
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    return remat_replicas_create(&job->dp, job->dist, job->tr, err);
  }
  case REMAT_RUN_PIPELINE: {
    remat_stage st = remat_placement_stage(pl, job->rank, 0);
    if (pl->chunks > 1) {
      st = remat_placement_chunk(pl, job->rank, 0);
      if ((rc = remat__job_chunks_workspace(job, job->rank, &st.work_min, err))) return rc;
    }
    st.slots_pooled = remat_placement_pooled(pl);
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    return remat_pipeline_create(&job->pipe, job->dist, job->tr, pl, err);
  }
  default: { /* world rank s D + r: stage s, replica r */
    remat_stage st = remat_placement_stage(pl, remat_dist_stage(job->dist),
                                           remat_dist_replica(job->dist));
    st.slots_pooled = remat_placement_pooled(pl);
    if ((rc = remat_trainer_create_stage(&job->tr, &job->cfg, &st, &job->tok, &to, err)))
      return rc;
    if ((rc = remat_grid_create(&job->grid, job->dist, job->tr, pl, err))) return rc;
    job->pipe = remat_grid_pipeline(job->grid);
    job->dp = remat_grid_replicas(job->grid);
    return 0;
  }
  }
}

/* The timeline (desc.trace), once every rank has its runtime: its start is
 * a barrier, every rank's clock together, which a rank whose runtime failed
 * would never reach. A grid's is its pipeline's. */
static int start_trace(remat_job *job, remat_error *err) {
  int64_t steps = job->d.train.steps;
  if (job->tg) return remat_tensor_group_trace_start(job->tg, job->dist, job->solo, steps, err);
  if (job->pipe) return remat_pipeline_trace_start(job->pipe, steps, err);
  if (job->dp) return remat_replicas_trace_start(job->dp, steps, err);
  return remat_solo_create(&job->solo, job->tr, steps, err);
}

int remat_job_prepare(remat_job *job, remat_error *err) {
  remat_job_desc *d = &job->d;
  int rc = check_ranks(job, err);
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  rc = remat_blas_check(err);
  if (!rc && d->resume) rc = find_resume(job, err);
  if (!rc) rc = check_outputs(job, err);
  if (!rc) rc = load_shape(job, err);
  /* the shape is known: --save's format must hold it (before hours of steps) */
  if (!rc) rc = remat_checkpoint_format_check(&job->cfg, d->save_format, d->save_version, err);
  if (!rc) {
    if (d->train.T == 0) d->train.T = job->cfg.max_seq_len < 64 ? job->cfg.max_seq_len : 64;
    if (d->train.T > job->cfg.max_seq_len)
      rc = remat__errorf(err, REMAT_EINVAL, "sequence length %lld exceeds the model's maximum "
                         "sequence length %lld", (long long)d->train.T,
                         (long long)job->cfg.max_seq_len);
  }
  if (!rc) rc = load_tokens(job, err);
  if (!rc) rc = remat__job_place(job, err);
  if (!rc) rc = make_runtime(job, err);
  if (!rc) rc = set_eval_tokens(job, err);
  if (!rc && job->resumed) { /* other settings are refused before anything large exists */
    char path[4096];
    rc = remat__job_resume_state_path(job, path, sizeof path, err);
    if (!rc) rc = remat_trainer_check_state(job->tr, path, job->rank, job->ranks, err);
  }
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  if (d->trace && (rc = remat__job_agree(job, start_trace(job, err), err))) return rc;
  job->planned = remat_trainer_planned_bytes(job->tr);
  if (job->pipe) job->planned += remat_pipeline_chunk_bytes(job->pipe);
  /* the planner's figure for a replica's arena is the arena itself (the
   * memory model is one); a difference would be a bug, said as such */
  size_t budget = job->budgets.n ? job->budgets.bytes[0] : 0;
  size_t arena = remat_memplan_peak_bytes(remat_trainer_memplan(job->tr));
  if (job->kind == REMAT_RUN_REPLICAS && job->budgets.n && arena > budget) {
    char b1[32], b2[32];
    rc = remat__errorf(err, REMAT_EINFEASIBLE, "a memory budget of %s does not fit a replica: "
                       "its arena needs %s (%zu bytes); raise the budget",
                       remat_format_bytes(budget, b1, sizeof b1),
                       remat_format_bytes(arena, b2, sizeof b2), arena);
  }
  return remat__job_agree(job, rc, err);
}

/* Loads the model file's weights: the whole model, or this stage's slices
 * of it. */
static int load_weights(remat_job *job, remat_error *err) {
  remat_model *m = remat_trainer_model(job->tr);
  remat_config whole = job->cfg; /* the file's: a tensor rank takes its shard of it */
  whole.tensor_parallel = whole.sequence_parallel = 0;
  const remat_config *cfg = &whole;
  const remat_stage *st = remat_model_stage(m);
  int sharded = (st->replicas > 1 && st->zero == 3) || job->tg;
  if (st->has_embedding && st->has_head && st->num_blocks == cfg->num_layers && !sharded) {
    const remat__backend *be = remat__model_backend(m);
    float *at = remat_model_params(m);
    size_t bytes = remat_model_num_params(m) * sizeof(float);
    float *host = be->map(at, bytes, REMAT_MAP_READ | REMAT_MAP_WRITE);
    int rc = remat_checkpoint_read_params(&job->rd, cfg, host, err);
    if (!rc) rc = remat_params_overflow(cfg, host, err);
    be->unmap(at, host, bytes, REMAT_MAP_READ | REMAT_MAP_WRITE);
    return rc;
  }
  float *full = malloc(remat_param_count(cfg) * sizeof(float));
  if (!full) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading the model file");
  int rc = remat_checkpoint_read_params(&job->rd, cfg, full, err);
  if (!rc) rc = remat_params_overflow(cfg, full, err);
  if (!rc) remat__model_params_from_full(m, full);
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
    rc = remat__job_resume_state_path(job, path, sizeof path, err);
    if (!rc) rc = remat_trainer_load_state(job->tr, path, job->rank, job->ranks, err);
  }
  if (!rc) job->last_checkpoint = remat_trainer_steps_done(job->tr);
  return remat__job_agree(job, rc, err);
}

