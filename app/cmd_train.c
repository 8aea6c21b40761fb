/* cmd_train.c: `remat train`: its flags and help, and what it prints. The
 * job itself (ranks, placement, the runtime, weights, checkpoints, resume)
 * is the library's remat_job; this file turns flags into its description,
 * runs its steps, and shows the plan, the progress and the summary. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "remat.h"
#include "train.h"
#include "train_sample.h"

extern const char *const remat_train_usage; /* train_help.c */


/* Before the first step SIGINT or SIGTERM ends set-up at once (130, 143); while steps
 * run the first asks the step to finish and save, a second quits saving nothing. A
 * save it cuts short leaves no temporary behind: it is removed, and named. */
static volatile sig_atomic_t interrupted, stepping;
static void say(const char *s) { (void)!write(STDERR_FILENO, s, strlen(s)); }
static void quit_now(int code, const char *why) {
  static char names[8192]; /* not on the handler's stack */
  say(why);
  if (remat_output_remove_temporaries(names, sizeof names) > 0) {
    say("remat train: a save was in progress and is not complete: removed its temporary ");
    say(names);
    say("; the file it would have replaced is as it was\n");
  }
  _exit(code);
}
static void on_signal(int sig) {
  if (!stepping) quit_now(128 + sig, "remat train: stopped by a signal before the first step\n");
  if (interrupted) quit_now(130, "remat train: stopped by a second signal; nothing more is saved\n");
  interrupted = 1;
}

/* Without --precision: bf16 where the CPU has the instructions, else fp32. */
static void default_precision(opts *o) {
  const char *why;
  int bf16 = remat_precision_available(REMAT_PRECISION_BF16, &why);
  o->d.precision = bf16 ? REMAT_PRECISION_BF16 : REMAT_PRECISION_FP32;
  snprintf(o->precision_note, sizeof o->precision_note, "the default here, %s%s", why,
           bf16 ? "; --precision fp32 for fp32" : "");
}

/* remat train's flags, each with where its value goes in o and its range. */
enum { TRAIN_FLAGS = 64 };
static void train_flags(opts *o, cli_flag flags[TRAIN_FLAGS]) {
  remat_job_desc *d = &o->d;
  remat_train_opts *t = &d->train;
  const cli_flag f[] = {
      {.name = "--config", .kind = CLI_STR, .dst = &d->config},
      {.name = "--model", .kind = CLI_STR, .dst = &d->model},
      {.name = "--data", .kind = CLI_STR, .dst = &d->data},
      {.name = "--text", .kind = CLI_STR, .dst = &d->text},
      {.name = "--val-data", .kind = CLI_STR, .dst = &d->val_data},
      {.name = "--replace-checkpoints", .kind = CLI_SWITCH, .dst = &d->replace_checkpoints},
      {.name = "--save", .kind = CLI_STR, .dst = &o->save},
      {.name = "--save-precision", .kind = CLI_STR, .dst = &o->save_precision},
      {.name = "--save-format", .kind = CLI_STR, .dst = &o->save_format},
      {.name = "--log", .kind = CLI_STR, .dst = &o->log},
      {.name = "--ckpt-layers", .kind = CLI_STR, .dst = &d->ckpt_layers},
      {.name = "--mem", .kind = CLI_STR, .dst = &d->memory},
      {.name = "--layers", .kind = CLI_STR, .dst = &d->layers},
      {.name = "--plan", .kind = CLI_STR, .dst = &d->plan},
      {.name = "--trace", .kind = CLI_STR, .dst = &o->trace},
      {.name = "--checkpoint-dir", .kind = CLI_STR, .dst = &d->checkpoint_dir},
      {.name = "--resume", .kind = CLI_STR, .dst = &d->resume},
      {.name = "--schedule", .kind = CLI_STR, .dst = &o->schedule_name},
      {.name = "--precision", .kind = CLI_STR, .dst = &o->precision_name},
      {.name = "--head-chunk", .kind = CLI_STR, .dst = &o->head_chunk_name},
      {.name = "--calibrate", .kind = CLI_INT, .dst = &d->calibrate, .lo = 1, .hi = 1000},
      {.name = "--per-microbatch", .kind = CLI_SWITCH, .dst = &d->per_microbatch},
      {.name = "--spend-pools", .kind = CLI_SWITCH, .dst = &d->spend_pools},
      {.name = "--chunks", .kind = CLI_I64, .dst = &d->chunks, .lo = 1, .hi = 64},
      {.name = "--checkpoint-every", .kind = CLI_I64, .dst = &d->checkpoint_every,
        .lo = 1, .hi = 1 << 30},
      {.name = "--keep-checkpoints", .kind = CLI_I64, .dst = &d->keep_checkpoints,
        .lo = 1, .hi = 1 << 30},
      {.name = "--stages", .kind = CLI_I64, .dst = &d->stages, .lo = 1, .hi = REMAT_MAX_STAGES},
      {.name = "--data-parallel", .kind = CLI_I64, .dst = &d->replicas,
        .lo = 1, .hi = REMAT_MAX_STAGES},
      {.name = "--zero", .kind = CLI_INT, .dst = &d->zero, .lo = 0, .hi = 3},
      {.name = "--tensor-parallel", .kind = CLI_I64, .dst = &d->tensor, .lo = 1,
        .hi = REMAT_MAX_STAGES},
      {.name = "--sequence-parallel", .kind = CLI_SWITCH, .dst = &d->sequence},
      {.name = "--batch", .kind = CLI_I64, .dst = &t->B, .lo = 1, .hi = 1 << 16},
      {.name = "--seq", .kind = CLI_I64, .dst = &t->T, .lo = 1, .hi = 1 << 20},
      {.name = "--grad-accum", .kind = CLI_I64, .dst = &t->grad_accum, .lo = 1, .hi = 1 << 16},
      {.name = "--steps", .kind = CLI_I64, .dst = &t->steps, .lo = 0, .hi = 1 << 30},
      {.name = "--warmup", .kind = CLI_I64, .dst = &t->warmup, .lo = 0, .hi = 1 << 30},
      {.name = "--eval-every", .kind = CLI_I64, .dst = &d->eval_every, .lo = 0, .hi = 1 << 30},
      {.name = "--eval-batches", .kind = CLI_I64, .dst = &t->eval_batches,
        .lo = 1, .hi = 1 << 20},
      {.name = "--val-frac", .kind = CLI_F64, .dst = &t->val_frac, .lo = 0.001, .hi = 0.9},
      {.name = "--lr", .kind = CLI_F64, .dst = &t->lr, .lo = 0, .hi = 10},
      {.name = "--weight-decay", .kind = CLI_F32, .dst = &t->hp.weight_decay,
        .lo = 0, .hi = 10},
      {.name = "--grad-clip", .kind = CLI_F32, .dst = &t->hp.grad_clip, .lo = 0, .hi = 1e30},
      {.name = "--dropout", .kind = CLI_F32, .dst = &t->hp.dropout,
        .lo = 0, .hi = 1, .hi_open = 1},
      {.name = "--ckpt-ratio", .kind = CLI_F64, .dst = &d->ckpt_ratio, .lo = 0, .hi = 1},
      {.name = "--peak-gflops", .kind = CLI_F64, .dst = &o->peak_gflops, .lo = 1e-6, .hi = 1e12},
      {.name = "--measure-peak", .kind = CLI_SWITCH, .dst = &o->measure_peak},
      {.name = "--measure-times", .kind = CLI_SWITCH, .dst = &o->measure_times},
      {.name = "--seed", .kind = CLI_U64, .dst = &t->hp.seed, .lo = 0},
      {.name = "--threads", .kind = CLI_INT, .dst = &o->threads, .lo = 1, .hi = 1024},
      {.name = "--sample-every", .kind = CLI_I64, .dst = &o->sample_every, .lo = 0,
        .hi = 1 << 30},
      {.name = "--cosine", .kind = CLI_SWITCH, .dst = &t->cosine},
      {.name = "--quiet", .kind = CLI_SWITCH, .dst = &o->quiet},
      {.name = "--plan-only", .kind = CLI_SWITCH, .dst = &o->plan_only},
      {NULL}};
  _Static_assert(sizeof f <= TRAIN_FLAGS * sizeof f[0], "raise TRAIN_FLAGS");
  memcpy(flags, f, sizeof f);
}

/* The flags over base: the defaults, or a resumed run's saved settings. */
static int parse_args(int argc, char **argv, opts *o, const remat_job_desc *base) {
  *o = (opts){0};
  if (base) {
    o->d = *base;
  } else {
    remat_job_desc_default(&o->d);
    o->d.train.lr = 1e-3;
    o->d.train.val_frac = 0.1;
  }
  remat_job_desc *d = &o->d;
  cli_flag flags[TRAIN_FLAGS];
  train_flags(o, flags);
  if (cli_parse_flags(argc, argv, flags, remat_train_usage)) return -1;
  snprintf(o->precision_note, sizeof o->precision_note, "as asked");
  char names[96];
  if (o->schedule_name && remat_plan_schedule_parse(o->schedule_name, &d->schedule))
    return cli_fail(-1, "--schedule %s is not a schedule; use %s", o->schedule_name,
                    remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"));
  if (o->head_chunk_name && !strcmp(o->head_chunk_name, "auto"))
    d->head_chunk = -1;
  else if (o->head_chunk_name &&
           cli_parse_i64("--head-chunk", o->head_chunk_name, 0, (int64_t)1 << 30, &d->head_chunk))
    return -1;
  if (o->precision_name && remat_precision_parse(o->precision_name, &d->precision))
    return cli_fail(-1, "--precision %s is not a precision; use fp32 or bf16", o->precision_name);
  const char *why;
  if (!remat_precision_available(d->precision, &why) && !remat_backend_device_bf16(NULL))
    return cli_fail(-1, "--precision bf16 needs AVX512-BF16 or AMX, and this CPU has neither "
                        "(%s); use --precision fp32", why);
  if (!o->precision_name && !base) /* a resume keeps its run's */
    default_precision(o);
  for (int i = 1; d->val_data && i < argc; i++)
    if (!strncmp(argv[i], "--val-frac", 10) && (!argv[i][10] || argv[i][10] == '='))
      return cli_fail(-1, "--val-frac holds the tail of --data out for evaluation; with "
                      "--val-data nothing is held out: drop one");
  return 0;
}

/* --save-precision: the version of the file --save writes. A resume may
 * change it, as it may --save: neither is a setting of the run. */
static int check_save_precision(opts *o) {
  const char *p = o->save_precision;
  if (!p) return 0;
  if (!strcmp(p, "fp32")) o->d.save_version = REMAT_CKPT_VERSION;
  else if (!strcmp(p, "bf16")) o->d.save_version = REMAT_CKPT_VERSION_BF16;
  else return cli_fail(-1, "--save-precision %s is not a precision; use fp32 or bf16", p);
  if (!o->save)
    return cli_fail(-1, "--save-precision %s chooses the format of --save FILE: give --save too "
                    "(--checkpoint-dir always keeps fp32)", p);
  return 0;
}

/* --save-format: the format of that file; whether it holds the model's
 * family is the job's to say, once the shape is known. */
static int check_save_format(opts *o) {
  const char *f = o->save_format;
  if (!f) return 0;
  if (remat_format_parse(f, &o->d.save_format))
    return cli_fail(-1, "--save-format %s is not a model file format; use llm.c (GPT-2's), "
                    "llama2c-v1 (a Llama's) or llama2c-legacy (llama2.c's run.c), or auto", f);
  if (!o->save)
    return cli_fail(-1, "--save-format %s chooses the format of --save FILE: give --save too "
                    "(--checkpoint-dir always keeps the family's own)", f);
  return 0;
}

/* How the job's messages name a setting: as the flag that gives it
 * ("mem" is --mem). */
static const char *flag_name(const char *key) {
  static opts scratch;
  static cli_flag flags[TRAIN_FLAGS];
  char name[64];
  if (!flags[0].name) train_flags(&scratch, flags);
  snprintf(name, sizeof name, "--%s", key);
  const cli_flag *f = cli_find_flag(flags, name);
  return f ? f->name : NULL;
}

/* What the flags (over a resume's settings) ask must make sense together:
 * the job's rules (remat_job_desc_check, in flags' names), then the front
 * end's own flags. */
static int check_args(opts *o) {
  remat_error err;
  o->d.trace = o->trace != NULL;
  o->d.outputs[0] = o->save;
  o->d.setting_name = flag_name;
  if (remat_job_desc_check(&o->d, &err)) return cli_fail(-1, "%s", err.msg);
  if (o->sample_every && o->d.stages * o->d.replicas * o->d.tensor > 1)
    return cli_fail(-1, "--sample-every runs on one process only; drop it with %s",
                    o->d.stages > 1     ? "--stages"
                    : o->d.replicas > 1 ? "--data-parallel"
                                        : "--tensor-parallel");
  return check_save_precision(o) ? -1 : check_save_format(o);
}

/* A saved run's settings pass the checks of the flags that would give them
 * (a settings file resealed by hand is read as it is). A setting at the
 * description's default was not given: its value ("none") is no flag's. */
static int check_saved(const remat_job_saved *saved) {
  opts scratch = {0};
  cli_flag flags[TRAIN_FLAGS];
  train_flags(&scratch, flags);
  remat_job_desc none;
  remat_job_desc_default(&none);
  char v[4096], unset[4096], name[64];
  const char *key;
  for (int i = 0; (key = remat_job_setting(&saved->desc, i, v, sizeof v)); i++) {
    remat_job_setting(&none, i, unset, sizeof unset);
    snprintf(name, sizeof name, "--%s", key);
    const cli_flag *f = cli_find_flag(flags, name);
    if (!f || f->kind == CLI_STR || f->kind == CLI_SWITCH || !strcmp(v, unset)) continue;
    int silent = cli_silent, bad;
    cli_silent = 1;
    bad = cli_set_flag(f, v);
    cli_silent = silent;
    if (bad) { /* cli_last_message is where the next message is formed: copied first */
      char why[sizeof cli_last_message];
      snprintf(why, sizeof why, "%s", cli_last_message);
      return cli_fail(-1, "the settings of %s/settings: %s; the file was changed after its run "
                      "saved it: restore it, or resume from another checkpoint", saved->dir,
                      why);
    }
  }
  return 0;
}

/* A resume: the saved run's settings, with the flags given over them; a
 * flag that would change what a resume keeps is refused. */
static int resume_args(int argc, char **argv, opts *o, remat_job_saved *saved) {
  remat_error err;
  remat_job_conflict c;
  if (remat_job_saved_load(saved, o->d.resume, &err)) return cli_fail(-1, "%s", err.msg);
  if (!saved->found) return 0; /* an older checkpoint: the flags as given */
  if (check_saved(saved)) return -1;
  if (parse_args(argc, argv, o, &saved->desc)) return -1;
  if (!o->precision_name)
    snprintf(o->precision_note, sizeof o->precision_note, "the resumed run's");
  if (remat_job_saved_conflict(saved, &o->d, &c))
    return cli_fail(-1, "%s %s differs from the saved run's %s; a resume keeps the run's "
                    "settings: drop %s", flag_name(c.key), c.given, c.saved, flag_name(c.key));
  return 0;
}

/* The description: the flags went straight into it; the outputs. */
static void job_desc_from(const opts *o, remat_job_desc *d) {
  *d = o->d;
  d->trace = o->trace != NULL;
  d->outputs[0] = o->save;
  d->outputs[1] = o->log;
  d->outputs[2] = o->trace;
}


static void fmt_eta(double s, char *buf, size_t cap) {
  if (s < 0 || !isfinite(s)) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* One line of the log, formed whole before it is written. */
typedef struct {
  char text[1 << 16]; /* a line of 64 ranks' figures takes about 10 KiB */
  size_t n;
} log_line;

static void put(log_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(log_line *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(l->text + l->n, sizeof l->text - l->n, fmt, ap);
  va_end(ap);
  if (k > 0) l->n = l->n + (size_t)k < sizeof l->text ? l->n + (size_t)k : sizeof l->text;
}

/* The line at the log's end in one write; a write cut short (a full disk, a
 * file size limit) is taken back to the line's start, so the log stays
 * whole lines (JSONL) whatever stopped it. */
static int write_line(int fd, const log_line *l) {
  off_t at = lseek(fd, 0, SEEK_END);
  size_t done = 0;
  while (done < l->n) {
    ssize_t w = write(fd, l->text + done, l->n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  if (done == l->n) return 0;
  int e = errno ? errno : EIO;
  if (at >= 0 && ftruncate(fd, at) != 0) e = errno;
  errno = e;
  return -1;
}

/* Each rank's share of the step time spent recomputing (a pipeline's
 * stages recompute different blocks; the speed line gives rank 0's). */
static void print_rank_recompute(const run_state *r) {
  if (r->ranks <= 1 || r->t_train <= 0) return;
  printf("ranks   recompute by rank, of the step time:");
  for (int k = 0; k < r->ranks; k++) printf(" %.1f%%", 100 * r->rank_recompute_sum[k] / r->t_train);
  printf("\n");
}

/* The whole model's blocks under policy p (every stage's, not this rank's). */
static long long blocks_with(const run_state *r, int p) {
  const remat_placement *pl = remat_job_placement(r->job);
  long long n = 0;
  for (int64_t b = 0; b < r->cfg->num_layers; b++) n += pl->policy[b] == p;
  return n;
}

static int log_step(run_state *r, const remat_step_stats *st, double tps, double mfu,
                    double val_loss) {
  static log_line line; /* 64 KiB: not on the stack */
  log_line *l = &line;
  l->n = 0;
  put(l,
      "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.9g, "
      "\"step_s\": %.6f, \"recompute_s\": %.6f, \"tokens_per_s\": %.2f, \"mfu\": %.6f, "
      "\"flops_per_token\": %.9g, \"recomputed_blocks\": %lld, \"middle_blocks\": %lld, "
      "\"planned_peak_bytes\": %zu, \"measured_peak_bytes\": %zu, \"rss_peak_bytes\": %zu",
      (long long)st->step, st->loss, st->lr, st->grad_norm, st->seconds,
      st->recompute_seconds, tps, mfu, remat_flops_per_token(r->cfg, r->o->d.train.T),
      blocks_with(r, REMAT_RECOMPUTE), blocks_with(r, REMAT_MIDDLE), r->planned, r->measured,
      remat_rss_peak_bytes());
  if (!isnan(val_loss)) put(l, ", \"val_loss\": %.6f", val_loss);
  if (r->dp) { /* rank 0's communication in this step (a grid's: among its stage's replicas) */
    const remat_comm_stats *c = &r->comm;
    if (r->grid) put(l, ", \"stages\": %lld", (long long)r->o->d.stages);
    put(l,
        ", \"replicas\": %lld, \"zero\": %d, \"comm_s\": %.6f, \"comm_exposed_s\": %.6f, "
        "\"comm_overlap\": %.4f, \"layer_comm_s\": %.6f, \"layer_comm_exposed_s\": %.6f, "
        "\"layer_comm_overlap\": %.4f, \"comm_bytes\": %llu, \"collectives\": %llu",
        (long long)r->o->d.replicas, r->o->d.zero, c->seconds, c->exposed_seconds,
        remat_comm_overlap(c->seconds, c->exposed_seconds), c->layer_seconds,
        c->layer_exposed_seconds,
        remat_comm_overlap(c->layer_seconds, c->layer_exposed_seconds),
        (unsigned long long)c->bytes_sent, (unsigned long long)c->collectives);
  }
  if (r->dp && !r->grid) { /* from the shapes; every replica's time, exposed, overlapped share */
    put(l, ", \"comm_bytes_theory\": %llu",
        (unsigned long long)remat_replicas_step_bytes(r->cfg, r->ranks, r->o->d.zero,
                                                      r->o->d.train.grad_accum));
    for (int a = 0; a < 3; a++) {
      static const char *const key[3] = {"rank_comm_s", "rank_comm_exposed_s",
                                         "rank_comm_overlap"};
      put(l, ", \"%s\": [", key[a]);
      for (int k = 0; k < r->ranks; k++) {
        const remat_comm_stats *q = &r->rank_comm[k];
        double v = a == 0 ? q->seconds : a == 1 ? q->exposed_seconds
                                       : remat_comm_overlap(q->seconds, q->exposed_seconds);
        put(l, a == 2 ? "%s%.4f" : "%s%.6f", k ? ", " : "", v);
      }
      put(l, "]");
    }
  }
  if (r->ranks > 1) { /* every rank's recomputing: a pipeline's stages differ */
    put(l, ", \"rank_recompute_s\": [");
    for (int k = 0; k < r->ranks; k++) put(l, "%s%.6f", k ? ", " : "", r->rank_recompute[k]);
    put(l, "]");
  }
  for (int a = 0; a < 2; a++) {
    put(l, a ? ", \"rank_measured_peak_bytes\": [" : ", \"rank_planned_peak_bytes\": [");
    for (int k = 0; k < r->ranks; k++)
      put(l, "%s%zu", k ? ", " : "", a ? r->rank_measured[k] : r->rank_planned[k]);
    put(l, "]");
  }
  put(l, "}\n");
  if (l->n == sizeof l->text || l->text[l->n - 1] != '\n')
    return cli_fail(CLI_EXIT_RUN, "a line of the log '%s' is longer than %zu bytes", r->o->log,
                    sizeof l->text - 1);
  if (write_line(fileno(r->logf), l))
    return cli_fail(CLI_EXIT_RUN, "cannot write log file '%s': %s", r->o->log, strerror(errno));
  return 0;
}

static void show_progress(run_state *r, const remat_step_stats *st, double tps, double mfu,
                          double val_loss) {
  const opts *o = r->o;
  int64_t every = o->d.train.steps >= 20 ? o->d.train.steps / 20 : 1, step = st->step;
  double avg = r->timed_steps ? r->t_train / (double)r->timed_steps : st->seconds;
  char eta[32];
  fmt_eta(avg * (double)(o->d.train.steps - step), eta, sizeof eta);
  if (r->tty) {
    fprintf(stderr, "\rstep %lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s   ",
            (long long)step, (long long)o->d.train.steps, st->loss, tps, 100 * mfu, eta);
    if (!isnan(val_loss)) fprintf(stderr, "| held-out %.4f\n", val_loss); /* keep it */
  } else if (step % every == 0 || step == 1 || step == o->d.train.steps || !isnan(val_loss)) {
    printf("step %lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s", (long long)step,
           (long long)o->d.train.steps, st->loss, tps, 100 * mfu, eta);
    if (!isnan(val_loss)) printf(" | held-out %.4f", val_loss);
    printf("\n");
    fflush(stdout);
  }
}

static void print_summary(run_state *r) {
  const opts *o = r->o;
  char b1[32];
  double tokens_per_step =
      (double)(o->d.train.B * o->d.train.T * o->d.train.grad_accum * o->d.replicas);
  int64_t ran = r->steps_done - r->start_step;
  if (interrupted) printf("interrupted after step %lld\n", (long long)r->steps_done);
  if (ran == 0) return;
  double tps = r->timed_steps ? tokens_per_step * (double)r->timed_steps / r->t_train
                              : tokens_per_step * (double)ran / r->wall;
  char span[64];
  if (r->start_step) snprintf(span, sizeof span, "steps %lld to %lld",
                              (long long)r->start_step + 1, (long long)r->steps_done);
  else snprintf(span, sizeof span, "%lld steps", (long long)ran);
  printf("done    %s in %.1f s; loss %.4f -> %.4f", span, r->wall, r->first_loss, r->last_loss);
  if (!isnan(r->last_val)) printf("; held-out loss %.4f (at step %lld)", r->last_val,
                                  (long long)r->val_step);
  printf("\n");
  remat_peak *pk = &r->peak;
  double mfu = remat_peak_mfu(pk, r->cfg, o->d.train.T, tps);
  printf("speed   %.0f tokens/s, MFU (model FLOPs utilisation) %.1f%% of %.1f GFLOP/s; "
         "%srecompute %.1f%% of step time\n",
         tps, 100 * mfu, pk->flops / 1e9, o->d.stages > 1 ? "rank 0's " : "",
         r->t_train > 0 ? 100 * r->t_recompute / r->t_train : 0.0);
  if (pk->trials && !pk->raised) /* measured: what the trials leave open */
    printf("mfu     %.1f%% +-%.1f against the median of %d trials (spread +-%.1f%%); %.1f%% "
           "against "
           "the best trial, %.1f GFLOP/s\n",
           100 * mfu, 100 * mfu * pk->spread, pk->trials, 100 * pk->spread,
           100 * mfu * pk->flops / pk->best, pk->best / 1e9);
  else if (pk->trials) {
    printf("mfu     %.1f%% against the fastest step's own rate, %.1f GFLOP/s, which beat the "
           "median of the %d trials (%.1f GFLOP/s; best %.1f)\n",
           100 * mfu, pk->flops / 1e9, pk->trials, pk->median / 1e9, pk->best / 1e9);
    /* later runs report against the raised peak: one rank's share of it */
    remat_peak one = *pk;
    one.flops /= r->ranks, one.best /= r->ranks, one.low /= r->ranks;
    remat_error err;
    if (!remat_peak_keep(&one, r->cfg, o->d.train.B, o->d.train.T, &err))
      printf("peak    raised to %.1f GFLOP/s%s and kept: later runs report against it\n",
             one.flops / 1e9, r->ranks > 1 ? " a rank" : "");
  }
  else if (pk->raised) /* a share of a peak cannot exceed 1: the step's rate is the peak */
    printf("mfu     %.1f%% against the fastest step's rate, %.1f GFLOP/s, which beat the given "
           "--peak-gflops %g%s (MFU never exceeds 100%%)\n", 100 * mfu, pk->flops / 1e9,
           o->peak_gflops, r->ranks > 1 ? " per rank" : "");
  if (r->threads.moves)
    printf("threads re-placed %d time%s as other processes' load came and went (last after step "
           "%lld: %s, %.2f CPUs of other work)\n",
           r->threads.moves, r->threads.moves > 1 ? "s" : "", (long long)r->moved_at,
           r->threads.pinned ? "pinned" : "unpinned", r->threads.others);
  printf("memory  planned peak %zu bytes, measured peak %zu bytes (%+.3f%%)%s; process RSS "
         "peak %s\n",
         r->planned, r->measured,
         100.0 * ((double)r->measured - (double)r->planned) / (double)r->planned,
         r->ranks > 1 ? ", rank 0's arena and the data" : ", the arena and the data",
         remat_format_bytes(remat_rss_peak_bytes(), b1, sizeof b1));
  printf("        RSS holds more: the program and its libraries, OpenBLAS's and OpenMP's "
         "buffers and threads' stacks%s\n", r->sampler ? ", the sampler" : "");
  if (r->ranks > 1) {
    printf("ranks   arena planned = measured on every rank:");
    int same = 1;
    for (int k = 0; k < r->ranks; k++) {
      printf(" %zu%s", r->rank_measured[k], r->rank_measured[k] == r->rank_planned[k] ? "" : "(!)");
      same = same && r->rank_measured[k] == r->rank_planned[k];
    }
    printf("%s\n", same ? "" : "  (! marks a rank whose measured arena differs from its plan)");
    print_rank_recompute(r);
    double step = r->timed_steps ? r->t_train / (double)r->timed_steps : r->wall;
    char b2[32];
    if (r->pipe)
      printf("time    iteration %.3f s measured, %.3f s predicted by the plan's schedule "
             "simulation (bubble %.1f%%); rank 0 waited %.1f%% of its steps\n",
             step, r->predicted_s, 100 * r->predicted_bubble,
             r->t_train > 0 ? 100 * r->wait_s / r->t_train : 0.0);
    if (r->dp) train_show_comm(r, b2, sizeof b2);
  }
  train_show_predicted(r, ran);
}

static int train_loop(run_state *r) {
  const opts *o = r->o;
  remat_error err;
  double tokens_per_step =
      (double)(o->d.train.B * o->d.train.T * o->d.train.grad_accum * o->d.replicas);
  r->first_loss = r->last_loss = r->last_val = NAN;
  r->start_step = r->steps_done = remat_trainer_steps_done(r->tr);
  double t_start = remat_now();
  while (!remat_job_done(r->job)) {
    remat_job_step_info in;
    int rc = remat_job_step(r->job, interrupted, &in, &err);
    if (rc) {
      r->checkpoint_failed = in.checkpoint_failed;
      if (r->tty) fputc('\n', stderr);
      if (err.code == REMAT_ENUMERIC && !strstr(err.msg, "overflow"))
        return cli_fail(CLI_EXIT_RUN, "%s; lower --lr or raise --grad-clip", err.msg);
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    }
    if (in.stopped) {
      interrupted = 1;
      break;
    }
    const remat_step_stats *st = &in.stats;
    int timed = st->step > 1 || o->d.train.steps == 1; /* the first step warms caches and threads */
    r->steps_done = st->step;
    if (remat_threads_adapt(&r->threads)) r->moved_at = st->step;
    r->measured = in.measured;
    memcpy(r->rank_planned, in.rank_planned, sizeof r->rank_planned);
    memcpy(r->rank_measured, in.rank_measured, sizeof r->rank_measured);
    memcpy(r->rank_recompute, in.rank_recompute, sizeof r->rank_recompute);
    for (int k = 0; timed && k < r->ranks; k++) r->rank_recompute_sum[k] += in.rank_recompute[k];
    if (r->pipe && timed) r->wait_s += in.wait_seconds;
    if (r->dp) {
      r->comm = in.comm;
      memcpy(r->rank_comm, in.rank_comm, sizeof r->rank_comm);
      for (int k = 0; r->rank == 0 && timed && k < o->d.replicas; k++) {
        remat_comm_stats *sum = &r->comm_sum[k], *q = &r->rank_comm[k];
        sum->seconds += q->seconds;
        sum->exposed_seconds += q->exposed_seconds;
        sum->layer_seconds += q->layer_seconds;
        sum->layer_exposed_seconds += q->layer_exposed_seconds;
      }
    }
    if (isnan(r->first_loss)) r->first_loss = st->loss;
    r->last_loss = st->loss;
    if (timed) {
      int64_t ring = (int64_t)(sizeof r->step_times / sizeof r->step_times[0]);
      r->step_times[r->timed_steps % ring] = st->seconds;
      r->t_train += st->seconds;
      r->t_recompute += st->recompute_seconds;
      r->timed_steps++;
    }
    double tps = tokens_per_step / st->seconds;
    double mfu = remat_peak_mfu(&r->peak, r->cfg, o->d.train.T, tps);
    if (!isnan(in.val_loss)) r->last_val = in.val_loss, r->val_step = st->step;
    if (r->logf && log_step(r, st, tps, mfu, in.val_loss)) return CLI_EXIT_RUN;
    if (!o->quiet) show_progress(r, st, tps, mfu, in.val_loss);
    if (r->sampler && st->step % o->sample_every == 0 &&
        train_sampler_print(r->sampler, st->step, stdout, &err))
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    if (in.checkpoint_step && !o->quiet)
      printf("checkpoint %s/step_%08lld\n", o->d.checkpoint_dir, (long long)in.checkpoint_step);
  }
  if (interrupted) { /* stopped by a signal: keep what was done */
    int64_t step;
    if (remat_job_checkpoint_now(r->job, &step, &err)) {
      r->checkpoint_failed = 1;
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    }
    if (step && !o->quiet)
      printf("checkpoint %s/step_%08lld\n", o->d.checkpoint_dir, (long long)step);
  }
  if (r->tty) fputc('\n', stderr);
  r->wall = remat_now() - t_start;
  return 0;
}

/* A resumed run's log goes on where the run left it: the lines of steps
 * up to the checkpoint's stay, those of steps after it (taken again now)
 * go. A new run starts it afresh. */
static int open_log(run_state *r, int64_t from_step, remat_error *err) {
  const char *path = r->o->log;
  if (from_step < 0) return (r->logf = remat_output_stream_open(path, "log", err)) ? 0 : err->code;
  if (!(r->logf = remat_output_stream_append(path, "log", err))) return err->code;
  FILE *in = fopen(path, "r");
  char *line = NULL;
  size_t cap = 0;
  long long step, kept = 0;
  off_t keep = 0;
  ssize_t n;
  while (in && (n = getline(&line, &cap, in)) > 0 && line[n - 1] == '\n' &&
         !(sscanf(line, "{\"step\": %lld", &step) == 1 && step > from_step)) {
    keep += n;
    kept++;
  }
  free(line);
  if (in) fclose(in);
  if (ftruncate(fileno(r->logf), keep) != 0) {
    err->code = REMAT_EIO;
    snprintf(err->msg, sizeof err->msg, "cannot write log file '%.200s': %s", path,
             strerror(errno));
    return err->code;
  }
  if (!r->o->quiet)
    printf("log     %s: appending after its %lld line%s (steps to %lld)\n", path, kept,
           kept == 1 ? "" : "s", (long long)from_step);
  return 0;
}

/* Before the first step: the peak rate (before the arena exists, so that
 * filling it cannot disturb the measurement), the machine check, the arena,
 * the weights and a resume's state, the log. */
static int start(run_state *r) {
  const opts *o = r->o;
  remat_error err;
  int rc = train_peak_rate(o, r);
  if (rc) return rc;
  /* MFU of several ranks is against every rank's peak: P ranks do the work */
  if (r->ranks > 1) {
    r->peak.flops *= r->ranks, r->peak.median *= r->ranks, r->peak.low *= r->ranks;
    r->peak.best *= r->ranks;
    printf("peak    %d ranks: MFU is against %d times that\n", r->ranks, r->ranks);
  }
  train_predict(r);
  fflush(stdout);
  if (remat_trainer_train_windows(r->tr) < o->d.train.B)
    fprintf(stderr,
            "remat train: warning: %s has only %lld windows of %lld tokens for a batch of %lld "
            "rows; rows repeat within a batch\n",
            remat_job_data_source(r->job), (long long)remat_trainer_train_windows(r->tr),
            (long long)o->d.train.T + 1, (long long)o->d.train.B);
  rc = remat_job_start(r->job, &err);
  if (rc) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  if (o->sample_every) { /* its memory now, outside the trainer's: no step allocates */
    remat_model *m = remat_trainer_model(r->tr);
    if (train_sampler_create(&r->sampler, m, cli_vocab_dir(NULL), &err))
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    r->planned += train_sampler_planned_bytes(r->sampler); /* measured holds it too */
  }
  int64_t step;
  const char *note, *from = remat_job_resumed_from(r->job, &step, &note);
  if (note) fprintf(stderr, "remat train: warning: %s\n", note);
  if ((note = remat_job_checkpoint_note(r->job)) && !o->quiet) printf("note    %s\n", note);
  if (from && !o->quiet) printf("resume  %s at step %lld\n", from, (long long)step);
  if (o->log && r->rank == 0) rc = open_log(r, from ? step : -1, &err);
  /* the log is rank 0's: the others learn of its failure */
  if (remat_job_agree(r->job, rc, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  if (r->pipe && !r->predicted_measured)
    remat_job_predict(r->job, r->peak.flops / (double)r->ranks, &r->predicted_s,
                      &r->predicted_bubble);
  return 0;
}

/* --save: the weights as they are now. */
static int save_model(const opts *o, remat_job *job) {
  remat_error err;
  if (remat_job_save(job, o->save, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  int llama = remat_job_config(job)->family == REMAT_FAMILY_LLAMA;
  int format = o->d.save_format ? o->d.save_format
               : llama          ? REMAT_FORMAT_LLAMA2C_V1
                                : REMAT_FORMAT_LLMC;
  printf("saved   %s%s\n", o->save,
         format == REMAT_FORMAT_LLAMA2C_V1       ? " (llama2.c, version 1)"
         : format == REMAT_FORMAT_LLAMA2C_LEGACY ? " (llama2.c, legacy)"
         : o->d.save_version == REMAT_CKPT_VERSION_BF16 ? " (bf16, version 5)"
                                                        : "");
  return 0;
}

static int train_job(opts *o, run_state *r) {
  remat_error err = {0};
  remat_job *job = r->job;
  int rc;
  /* the first agreement: every rank started with this command, as many as
   * the job has (the job's messages name the flags) */
  if (remat_job_agree(job, 0, &err)) return cli_fail(CLI_EXIT_USAGE, "%s", err.msg);
  if (remat_job_prepare(job, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  int64_t at;
  if (remat_job_resumed_from(job, &at, NULL) && at >= o->d.train.steps) { /* nothing to do */
    printf("the run in %s finished at step %lld; give --steps N > %lld to extend it\n",
           o->d.resume, (long long)at, (long long)at);
    /* --save still writes its weights: the checkpoint's, in the format asked */
    if (o->save && remat_job_start(job, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    if (o->save && save_model(o, job)) return CLI_EXIT_RUN;
    return cli_stdout_ok() ? CLI_EXIT_RUN : 0;
  }
  o->d.train.T = remat_job_description(job)->train.T;
  r->cfg = remat_job_config(job);
  r->tr = remat_job_trainer(job);
  r->pipe = remat_job_pipeline(job);
  r->dp = remat_job_replicas(job);
  r->grid = remat_job_kind(job) == REMAT_RUN_GRID;
  r->planned = remat_job_planned_bytes(job);
  if ((rc = train_show_plan(r)) || o->plan_only) return rc;
  if ((rc = start(r))) return rc;
  stepping = 1;
  r->tty = isatty(STDERR_FILENO) && !o->quiet;
  if ((rc = train_loop(r))) {
    /* a checkpoint that could not be written leaves whole weights, on every
     * rank alike: --save keeps them, as asked */
    if (r->checkpoint_failed && o->save) save_model(o, job);
    r->abort_others = 1; /* the other ranks may be waiting on this one */
    return rc;
  }
  if (r->rank == 0) print_summary(r);
  if (!o->save && !o->d.checkpoint_dir && r->steps_done > r->start_step)
    printf("note    the trained model is discarded: give --save FILE (or --checkpoint-dir DIR) "
           "to keep it\n");
  if (o->save && save_model(o, job)) return CLI_EXIT_RUN;
  if (o->trace) {
    if (remat_job_trace_write(job, o->trace, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    printf("trace   %s (open it in Perfetto or chrome://tracing)\n", o->trace);
  }
  if (r->logf) {
    FILE *f = r->logf;
    r->logf = NULL;
    if (fclose(f))
      return cli_fail(CLI_EXIT_RUN, "cannot write log file '%s': %s", o->log, strerror(errno));
  }
  return cli_stdout_ok() ? CLI_EXIT_RUN : interrupted ? 130 : 0;
}

/* --help on a rank of an MPI launch (an MPMD mpirun gives each rank its own
 * command): the other ranks wait in MPI_Init for every rank, forever if
 * this one printed the usage and left. So it takes part in their first
 * agreement, the comparison of the ranks' commands, as a rank with other
 * flags: every rank ends within seconds unless all asked for help (then
 * rank 0 prints it). -1 when not launched so: the usage as always. */
static int help_among_ranks(int argc, char **argv) {
  int help = 0;
  for (int i = 1; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
  if (!help || !remat_dist_launched()) return -1;
  remat_dist *dist;
  remat_error err;
  if (remat_dist_create(&dist, NULL, NULL, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  const uint64_t asks_help = 0x68656c7020726d74ull; /* no job's description digest */
  int same = 1, other = -1, rank = remat_dist_rank(dist), rc = 0;
  if (remat_dist_all_same(dist, &asks_help, sizeof asks_help, &same, &other, &err))
    rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  else if (!same && rank == 0) /* the others' rank 0 says it when rank 0 did not ask */
    rc = cli_fail(CLI_EXIT_USAGE, "rank %d was started with other flags than rank 0 (--help "
                  "on some ranks only); every rank must run the same command", other);
  else if (!same)
    rc = CLI_EXIT_USAGE;
  else if (rank == 0 && (fputs(remat_train_usage, stdout), cli_stdout_ok()))
    rc = CLI_EXIT_RUN;
  remat_dist_destroy(dist, 0);
  return rc;
}

int remat_cmd_train(int argc, char **argv) {
  cli_name = "remat train";
  opts o;
  remat_job_saved saved = {0};
  int help = help_among_ranks(argc, argv);
  if (help >= 0) return help;
  if (parse_args(argc, argv, &o, NULL)) return CLI_EXIT_USAGE;
  if ((o.d.resume && resume_args(argc, argv, &o, &saved)) || check_args(&o)) {
    remat_job_saved_free(&saved);
    return CLI_EXIT_USAGE;
  }
  remat_error err = {0};
  run_state r = {.o = &o, .ranks = 1};
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL), sigaction(SIGTERM, &sa, NULL);
  remat_threads_setup(&r.threads, o.threads); /* may re-execute: before MPI starts */
  remat_job_desc d;
  job_desc_from(&o, &d);
  d.launch_digest = cli_argv_digest(argc, argv); /* every rank runs the same command */
  if (remat_job_create(&r.job, &d, &err)) {
    remat_job_saved_free(&saved);
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  }
  r.rank = remat_job_rank(r.job);
  r.ranks = remat_job_ranks(r.job);
  if (r.rank != 0) { /* one rank speaks */
    o.quiet = 1;
    cli_silent = 1;
    if (!freopen("/dev/null", "w", stdout)) return CLI_EXIT_RUN;
  }
  int rc = train_job(&o, &r);
  if (r.logf) fclose(r.logf);
  train_sampler_destroy(r.sampler);
  remat_job_destroy(r.job, r.abort_others ? rc : 0);
  remat_job_saved_free(&saved);
  return rc;
}
