/* settings.c: a run's settings beside its checkpoint, so that a resume
 * needs nothing but the directory. Every checkpoint directory holds a text
 * file `settings` (listed with its checksum in DONE): one "key value" line
 * per setting of the job's description, the keys named as `remat train`'s
 * flags are (lr, grad-accum, checkpoint-dir, ...), an empty value for a
 * string not given; val-frac is the share held out (0: none); paths
 * resolved (absolute), and the token source's size and CRC32C in the lines
 * data-bytes and data-crc, so a resume from anywhere finds its data, and
 * knows a copy of it at another path. A resume reads it into a description
 * (remat_job_saved_load); a front end lays the settings it was given over
 * that and asks which one a resume may not change
 * (remat_job_saved_conflict). save_version is not among them: like the
 * front end's output files, the format of the saved model may change on a
 * resume. */
#define _DEFAULT_SOURCE /* realpath */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "job/job_internal.h"

/* K_SHARDS: a path, or a list of paths and patterns (remat_shards_find). */
enum { K_STR, K_PATH, K_SHARDS, K_CONFIG, K_I64, K_INT, K_U64, K_F64, K_F32, K_SCHED, K_PREC };

/* What a resume may change: nothing (0), the step count (only to extend a
 * constant learning rate, the trainer checks), the evaluation interval (not
 * from none: the held-out split is the saved run's), anything (how many
 * checkpoints stay). */
enum { FIXED = 0, STEPS, EVAL, FREE };

static const struct key {
  const char *name;
  int kind;
  size_t off;
  int may;
} keys[] = {
    {"config", K_CONFIG, offsetof(remat_job_desc, config), FIXED},
    {"data", K_SHARDS, offsetof(remat_job_desc, data), FIXED},
    {"text", K_PATH, offsetof(remat_job_desc, text), FIXED},
    {"val-data", K_SHARDS, offsetof(remat_job_desc, val_data), FIXED},
    {"batch", K_I64, offsetof(remat_job_desc, train.B), FIXED},
    {"seq", K_I64, offsetof(remat_job_desc, train.T), FIXED},
    {"grad-accum", K_I64, offsetof(remat_job_desc, train.grad_accum), FIXED},
    {"steps", K_I64, offsetof(remat_job_desc, train.steps), STEPS},
    {"lr", K_F64, offsetof(remat_job_desc, train.lr), FIXED},
    {"warmup", K_I64, offsetof(remat_job_desc, train.warmup), FIXED},
    {"cosine", K_INT, offsetof(remat_job_desc, train.cosine), FIXED},
    {"weight-decay", K_F32, offsetof(remat_job_desc, train.hp.weight_decay), FIXED},
    {"grad-clip", K_F32, offsetof(remat_job_desc, train.hp.grad_clip), FIXED},
    {"dropout", K_F32, offsetof(remat_job_desc, train.hp.dropout), FIXED},
    {"beta1", K_F32, offsetof(remat_job_desc, train.hp.beta1), FIXED},
    {"beta2", K_F32, offsetof(remat_job_desc, train.hp.beta2), FIXED},
    {"eps", K_F32, offsetof(remat_job_desc, train.hp.eps), FIXED},
    {"seed", K_U64, offsetof(remat_job_desc, train.hp.seed), FIXED},
    {"shuffle", K_INT, offsetof(remat_job_desc, train.shuffle), FIXED},
    {"eval-every", K_I64, offsetof(remat_job_desc, eval_every), EVAL},
    {"val-frac", K_F64, offsetof(remat_job_desc, train.val_frac), FIXED},
    {"eval-batches", K_I64, offsetof(remat_job_desc, train.eval_batches), FIXED},
    {"ckpt-ratio", K_F64, offsetof(remat_job_desc, ckpt_ratio), FIXED},
    {"ckpt-layers", K_STR, offsetof(remat_job_desc, ckpt_layers), FIXED},
    {"mem", K_STR, offsetof(remat_job_desc, memory), FIXED},
    {"stages", K_I64, offsetof(remat_job_desc, stages), FIXED},
    {"data-parallel", K_I64, offsetof(remat_job_desc, replicas), FIXED},
    {"tensor-parallel", K_I64, offsetof(remat_job_desc, tensor), FIXED},
    {"sequence-parallel", K_INT, offsetof(remat_job_desc, sequence), FIXED},
    {"zero", K_INT, offsetof(remat_job_desc, zero), FIXED},
    {"schedule", K_SCHED, offsetof(remat_job_desc, schedule), FIXED},
    {"chunks", K_I64, offsetof(remat_job_desc, chunks), FIXED},
    {"precision", K_PREC, offsetof(remat_job_desc, precision), FIXED},
    {"calibrate", K_INT, offsetof(remat_job_desc, calibrate), FIXED},
    {"layers", K_STR, offsetof(remat_job_desc, layers), FIXED},
    {"head-chunk", K_I64, offsetof(remat_job_desc, head_chunk), FIXED},
    {"per-microbatch", K_INT, offsetof(remat_job_desc, per_microbatch), FIXED},
    {"plan", K_PATH, offsetof(remat_job_desc, plan), FIXED},
    {"checkpoint-dir", K_PATH, offsetof(remat_job_desc, checkpoint_dir), FIXED},
    {"checkpoint-every", K_I64, offsetof(remat_job_desc, checkpoint_every), FIXED},
    {"keep-checkpoints", K_I64, offsetof(remat_job_desc, keep_checkpoints), FREE},
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* The description's defaults live with its settings' table. */
void remat_job_desc_default(remat_job_desc *d) {
  memset(d, 0, sizeof *d);
  remat_train_opts_default(&d->train);
  d->train.T = 0;
  d->ckpt_ratio = -1;
  d->stages = d->replicas = d->tensor = 1;
  d->schedule = REMAT_SCHED_1F1B;
  d->head_chunk = -1;
}

#define AT(d, k, T) ((T *)((char *)(d) + (k)->off))
#define CAT(d, k, T) ((const T *)((const char *)(d) + (k)->off))

/* One setting's value as text (doubles and floats exactly: %.17g, %.9g). */
static void format_value(const remat_job_desc *d, const struct key *k, char *buf, size_t cap) {
  switch (k->kind) {
  case K_STR: case K_PATH: case K_SHARDS: case K_CONFIG: {
    const char *s = *CAT(d, k, const char *);
    snprintf(buf, cap, "%s", s ? s : "");
    break;
  }
  case K_I64: snprintf(buf, cap, "%lld", (long long)*CAT(d, k, int64_t)); break;
  case K_INT: snprintf(buf, cap, "%d", *CAT(d, k, int)); break;
  case K_U64: snprintf(buf, cap, "%llu", (unsigned long long)*CAT(d, k, uint64_t)); break;
  case K_F64: snprintf(buf, cap, "%.17g", *CAT(d, k, double)); break;
  case K_F32: snprintf(buf, cap, "%.9g", (double)*CAT(d, k, float)); break;
  case K_PREC: snprintf(buf, cap, "%s", remat_precision_name(*CAT(d, k, int))); break;
  default: snprintf(buf, cap, "%s", remat_plan_schedule_name(*CAT(d, k, int))); break;
  }
}

int remat__job_settings_save(const char *path, const remat_job_desc *desc,
                             const remat_config *cfg, int held_out, const remat__data_id *data,
                             const remat__data_id *val, remat_error *err) {
  remat_job_desc d = *desc;
  if (!held_out) d.train.val_frac = 0;
  char shape[128];
  remat_config_spec(cfg, shape, sizeof shape);
  d.config = shape; /* the shape itself, whether it came from a name or a model file */
  size_t cap = 64 * 1024, n = 0;
  char *text = malloc(cap);
  if (!text) return remat__errorf(err, REMAT_ENOMEM, "out of memory writing the settings");
  n += (size_t)snprintf(text, cap, "remat settings 1\n");
  int rc = 0;
  for (size_t i = 0; i < NKEYS && !rc; i++) {
    char v[4200];
    format_value(&d, &keys[i], v, sizeof v);
    char *real = keys[i].kind == K_PATH && *v ? realpath(v, NULL) : NULL;
    if (real) /* resolved: a resume from another directory finds it */
      snprintf(v, sizeof v, "%s", real);
    free(real);
    char shards[4200];
    if (keys[i].kind == K_SHARDS && *v && !remat_shards_resolve(v, shards, sizeof shards))
      snprintf(v, sizeof v, "%s", shards); /* each item's directory resolved, patterns kept */
    if (strchr(v, '\n') || strlen(v) >= 4096 || n + strlen(v) + 64 >= cap)
      rc = remat__errorf(err, REMAT_EINVAL, "the setting %s cannot be saved with the "
                         "checkpoint: a newline or more than 4095 bytes in '%.100s'",
                         keys[i].name, v);
    else n += (size_t)snprintf(text + n, cap - n, "%s %s\n", keys[i].name, v);
  }
  if (!rc && data && data->known) /* the data whatever its path: a copy resumes too */
    n += (size_t)snprintf(text + n, cap - n, "data-bytes %llu\ndata-crc %08x\n",
                          (unsigned long long)data->bytes, (unsigned)data->crc);
  if (!rc && val && val->known)
    n += (size_t)snprintf(text + n, cap - n, "val-data-bytes %llu\nval-data-crc %08x\n",
                          (unsigned long long)val->bytes, (unsigned)val->crc);
  if (!rc) rc = remat_save_bytes(path, "settings", text, n, err);
  free(text);
  return rc;
}

/* The step directory a resume of dir takes: dir itself when it holds DONE
 * and verifies, else the newest checkpoint under it that verifies. Nothing
 * of a directory is read before its manifest vouches for it. */
static int step_dir_of(const char *dir, char *out, size_t cap, int64_t *step, remat_error *err) {
  char done[4200];
  struct stat st;
  snprintf(done, sizeof done, "%s/DONE", dir);
  if (stat(done, &st) == 0) {
    if (remat_checkpoint_step_of(dir, step))
      return remat__errorf(err, REMAT_EINVAL, "%s: a checkpoint directory is named step_N", dir);
    int rc = remat_checkpoint_verify(dir, *step, NULL, err);
    if (rc) return rc;
    snprintf(out, cap, "%s", dir);
    return 0;
  }
  remat_checkpoint_info info;
  int rc = remat_checkpoint_find(dir, &info, NULL, 0, err);
  if (rc) return rc;
  *step = info.step;
  return remat_checkpoint_dir_path(out, cap, dir, info.step, NULL) < 0
             ? remat__errorf(err, REMAT_EINVAL, "the checkpoint's path is too long")
             : 0;
}

/* The whole settings file, NUL-terminated (*text owned). */
static int read_text(const char *path, char **text, remat_error *err) {
  int fd;
  struct stat st;
  int rc = remat__open(path, O_RDONLY, REMAT__OPEN_FILE, "settings", &fd, &st, err);
  if (rc) return rc;
  size_t n = (size_t)st.st_size, got = 0;
  char *t = n < (1u << 20) ? malloc(n + 1) : NULL;
  while (t && got < n) {
    ssize_t r = read(fd, t + got, n - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (!t || got != n) {
    free(t);
    return remat__errorf(err, REMAT_EFORMAT, "cannot read the settings '%s'", path);
  }
  t[n] = 0;
  *text = t;
  return 0;
}

static int parse_value(remat_job_desc *d, const struct key *k, char *v) {
  char *end = v;
  switch (k->kind) {
  case K_STR: case K_PATH: case K_SHARDS: case K_CONFIG:
    *AT(d, k, const char *) = *v ? v : NULL;
    return 0;
  case K_I64: *AT(d, k, int64_t) = strtoll(v, &end, 10); break;
  case K_INT: *AT(d, k, int) = (int)strtol(v, &end, 10); break;
  case K_U64: *AT(d, k, uint64_t) = strtoull(v, &end, 10); break;
  case K_F64: *AT(d, k, double) = strtod(v, &end); break;
  case K_F32: *AT(d, k, float) = strtof(v, &end); break;
  case K_PREC: return remat_precision_parse(v, AT(d, k, int)) ? -1 : 0;
  default: return remat_plan_schedule_parse(v, AT(d, k, int)) ? -1 : 0;
  }
  return *v && !*end ? 0 : -1;
}

int remat_job_saved_load(remat_job_saved *s, const char *dir, remat_error *err) {
  memset(s, 0, sizeof *s);
  remat_job_desc_default(&s->desc);
  int rc = step_dir_of(dir, s->dir, sizeof s->dir, &s->step, err);
  if (rc) return rc;
  char path[4200];
  snprintf(path, sizeof path, "%s/settings", s->dir);
  struct stat st;
  s->desc.resume = dir;
  if (stat(path, &st) != 0) return 0; /* older: the caller gives the settings */
  if ((rc = read_text(path, &s->text, err))) return rc;
  char *line = s->text, *next;
  int first = 1, nset = 0;
  for (; *line; line = next) {
    next = strchr(line, '\n');
    if (!next) break;
    *next++ = 0;
    if (first) {
      first = 0;
      if (strcmp(line, "remat settings 1")) break;
      continue;
    }
    char *sp = strchr(line, ' '), *end;
    if (!sp) goto bad;
    int val = !strncmp(line, "val-", 4); /* val-data-bytes: the validation data's */
    const char *id = line + (val ? 4 : 0);
    if (!strncmp(id, "data-bytes ", 11) || !strncmp(id, "data-crc ", 9)) {
      int bytes = id[5] == 'b';
      unsigned long long v = strtoull(sp + 1, &end, bytes ? 10 : 16);
      if (!sp[1] || *end || (!bytes && (strlen(sp + 1) != 8 || v > 0xffffffffull))) goto bad;
      if (bytes) *(val ? &s->val_bytes : &s->data_bytes) = v;
      else *(val ? &s->val_crc : &s->data_crc) = (uint32_t)v;
      *(val ? &s->val_known : &s->data_known) |= bytes ? 1 : 2;
      continue;
    }
    *sp = 0;
    size_t i = 0;
    while (i < NKEYS && strcmp(keys[i].name, line)) i++;
    if (i == NKEYS) goto bad; /* a newer remat's setting: refuse rather than drop it */
    *sp = ' ';                /* the whole line, should the message quote it */
    if (parse_value(&s->desc, &keys[i], sp + 1)) goto bad;
    nset++;
  }
  if (first || *line || (s->data_known && s->data_known != 3) ||
      (s->val_known && s->val_known != 3))
    goto bad;
  s->data_known = s->data_known == 3;
  s->val_known = s->val_known == 3;
  if (!nset) { /* every remat that writes the file writes its settings */
    rc = remat__errorf(err, REMAT_EFORMAT, "the settings of %s hold no setting after their "
                       "header; the file was cut or emptied", path);
    remat_job_saved_free(s);
    return rc;
  }
  remat_error e; /* a resealed file is read as it is: its values get the trainer's checks */
  if (remat_train_opts_check(&s->desc.train, &e)) {
    remat_job_saved_free(s);
    return remat__errorf(err, REMAT_EFORMAT, "the settings of %s: %s; the file was changed "
                         "after its run saved it: restore it, or resume from another "
                         "checkpoint", path, e.msg);
  }
  /* the run goes on checkpointing where it was resumed from: the step
   * directory's parent, wherever the run first wrote it */
  size_t n = strlen(s->dir);
  while (n > 1 && s->dir[n - 1] == '/') n--;
  while (n > 0 && s->dir[n - 1] != '/') n--;
  while (n > 1 && s->dir[n - 1] == '/') n--;
  snprintf(s->checkpoint_dir, sizeof s->checkpoint_dir, "%.*s", n ? (int)n : 1, n ? s->dir : ".");
  s->desc.checkpoint_dir = s->checkpoint_dir;
  s->found = 1;
  return 0;
bad: /* the message quotes the line, which lives in the text: formed before it is freed */
  rc = remat__errorf(err, REMAT_EFORMAT, "the settings of %s are damaged at '%.60s'", path, line);
  remat_job_saved_free(s);
  return rc;
}

const char *remat_job_setting(const remat_job_desc *d, int i, char *value, size_t cap) {
  if (i < 0 || (size_t)i >= NKEYS) return NULL;
  if (value && cap) format_value(d, &keys[i], value, cap);
  return keys[i].name;
}

void remat_job_saved_free(remat_job_saved *s) {
  free(s->text);
  s->text = NULL;
}

static int same_setting(const struct key *k, const remat_job_desc *a, const remat_job_desc *b) {
  switch (k->kind) {
  case K_STR: case K_PATH: case K_SHARDS: case K_CONFIG: {
    const char *x = *CAT(a, k, const char *), *y = *CAT(b, k, const char *);
    if (!x || !y) return !x && !y;
    if (!strcmp(x, y)) return 1;
    if (k->kind == K_PATH || k->kind == K_SHARDS) return remat_same_file(x, y);
    remat_config cx, cy;
    remat_error e;
    return k->kind == K_CONFIG && !remat_config_parse(x, &cx, &e) &&
           !remat_config_parse(y, &cy, &e) && !memcmp(&cx, &cy, sizeof cx);
  }
  default: {
    char x[64], y[64];
    format_value(a, k, x, sizeof x);
    format_value(b, k, y, sizeof y);
    return !strcmp(x, y);
  }
  }
}

/* A token source given at another path than the saved one (or other
 * paths, or another pattern): the same bytes (the saved size and CRC32C of
 * its files one after another) are the same data. */
static int same_data(const remat_job_saved *s, const struct key *k, const remat_job_desc *d) {
  const char *given = *CAT(d, k, const char *), *saved = *CAT(&s->desc, k, const char *);
  int val = k->off == offsetof(remat_job_desc, val_data);
  if (!(val ? s->val_known : s->data_known) || !given || !saved ||
      (k->off != offsetof(remat_job_desc, data) && k->off != offsetof(remat_job_desc, text) &&
       !val))
    return 0;
  uint64_t bytes;
  uint32_t crc;
  remat_error e;
  remat_shards sh = {0};
  int rc = k->kind == K_SHARDS ? remat_shards_find(&sh, given, &e) : 0;
  if (!rc)
    rc = k->kind == K_SHARDS ? remat_shards_checksum(&sh, &bytes, &crc, &e)
                             : remat_file_checksum(given, "token source", given, &bytes, &crc, &e);
  remat_shards_free(&sh);
  return !rc && bytes == (val ? s->val_bytes : s->data_bytes) &&
         crc == (val ? s->val_crc : s->data_crc);
}

int remat_job_saved_conflict(const remat_job_saved *s, const remat_job_desc *d,
                             remat_job_conflict *c) {
  const remat_job_desc *sv = &s->desc;
  if (!s->found) return 0;
  for (size_t i = 0; i < NKEYS; i++) {
    const struct key *k = &keys[i];
    if (k->may == STEPS || k->may == FREE ||
        (k->may == EVAL && (sv->train.val_frac > 0 || sv->val_data || d->eval_every == 0)))
      continue;
    if (k->kind == K_I64 && k->off == offsetof(remat_job_desc, train.T) && d->train.T == 0)
      continue; /* not given: the saved one */
    if (same_setting(k, sv, d) || same_data(s, k, d)) continue;
    c->key = k->name;
    format_value(sv, k, c->saved, sizeof c->saved);
    format_value(d, k, c->given, sizeof c->given);
    return 1;
  }
  return 0;
}
