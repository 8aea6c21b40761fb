/* cmd_train.c: `remat train`: parse flags, load data and weights, choose the
 * per-block checkpointing policy (ratio, list, or memory budget), plan the
 * arena, train, report loss, tokens/s, MFU and planned vs measured peak. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remat.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* The model re-plans with the same inputs; a different figure is a bug. */
#define REMAT_CHECK_SAME_PLAN(x)                                                         \
  do {                                                                                   \
    if (!(x)) {                                                                          \
      fprintf(stderr, "remat train: internal error: the allocated plan differs from the " \
                      "printed one\n");                                                   \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

#define DIE_USAGE 2
#define DIE_RUN 1

static const char *usage_text =
    "usage: remat train [options]\n"
    "\n"
    "Trains GPT-2 on the CPU. With no options it trains the 'small' config on the\n"
    "embedded corpus for 300 steps and its loss falls from about 5.5 to under 2.\n"
    "\n"
    "model:\n"
    "  --config NAME|L,C,NH,V,T  built-in shape (tiny, small, gpt2-124m, gpt2-350m,\n"
    "                            gpt2-774m, gpt2-1558m) or explicit; default small\n"
    "  --model FILE              start from an llm.c GPT-2 fp32 checkpoint (version 3)\n"
    "  --seed N                  initialisation, data order and dropout seed (1337)\n"
    "  --save FILE               write an llm.c checkpoint at the end (and on Ctrl-C)\n"
    "data:\n"
    "  --data FILE               llm.c token shard (magic 20240520, uint16 tokens)\n"
    "  --text FILE               plain text, one token per byte (needs V >= 256)\n"
    "                            neither: the embedded corpus (byte tokens)\n"
    "  --batch B                 sequences per micro-batch (8)\n"
    "  --seq T                   tokens per sequence (64, at most the model's maxT)\n"
    "  --grad-accum K            micro-batches per optimizer step (1)\n"
    "training:\n"
    "  --steps N                 optimizer steps (300)\n"
    "  --lr X                    learning rate (1e-3), AdamW betas 0.9, 0.95\n"
    "  --warmup N                linear warmup steps (0)\n"
    "  --cosine                  cosine decay of the learning rate to 10% at the end\n"
    "  --weight-decay X          decoupled weight decay on matrices (0.1)\n"
    "  --grad-clip X             global-norm clipping, 0 disables (1.0)\n"
    "  --dropout P               attention and residual dropout (0)\n"
    "  --threads N               OpenMP and OpenBLAS threads (all cores)\n"
    "activation checkpointing (at most one; default keeps every block):\n"
    "  --ckpt-ratio R            recompute floor(R * L) blocks, R in [0, 1]\n"
    "  --ckpt-layers I,J,...     recompute these blocks (0-based)\n"
    "  --mem SIZE                recompute the fewest blocks whose planned peak fits\n"
    "                            SIZE (e.g. 1.5GiB, 800MB, 2e9)\n"
    "evaluation:\n"
    "  --eval-every N            every N steps, the mean loss on held-out batches (off)\n"
    "  --val-frac F              with --eval-every: the last F of the tokens are held\n"
    "                            out from training (0.1)\n"
    "  --eval-batches N          batches per evaluation (8)\n"
    "reporting:\n"
    "  --log FILE.jsonl          one JSON object per optimizer step\n"
    "  --peak-gflops X           peak FLOP rate for MFU (default: measure sgemm now)\n"
    "  --plan-only               print the memory plan and exit without training\n"
    "  --quiet                   no progress lines, only the summary\n"
    "  --help                    this text\n";

typedef struct {
  const char *config, *model, *data, *text, *save, *log, *ckpt_layers, *mem;
  int64_t B, T, K, steps, warmup, eval_every, eval_batches;
  double lr, wd, clip, dropout, ratio, peak_gflops, val_frac;
  uint64_t seed;
  int threads, cosine, quiet, plan_only;
} opts;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static int fail(int code, const char *msg) {
  fprintf(stderr, "remat train: %s\n", msg);
  return code;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno) {
    fprintf(stderr, "remat train: %s expects an integer, got '%s'\n", flag, s);
    return -1;
  }
  if (v < lo || v > hi) {
    fprintf(stderr, "remat train: %s %lld is out of range [%lld, %lld]\n", flag, v,
            (long long)lo, (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_f64(const char *flag, const char *s, double lo, double hi, int hi_open,
                     double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v)) {
    fprintf(stderr, "remat train: %s expects a number, got '%s'\n", flag, s);
    return -1;
  }
  if (v < lo || v > hi || (hi_open && v == hi)) {
    fprintf(stderr, "remat train: %s %g is out of range [%g, %g%s\n", flag, v, lo, hi,
            hi_open ? ")" : "]");
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, opts *o) {
  *o = (opts){.B = 8, .T = 0, .K = 1, .steps = 300, .lr = 1e-3, .wd = 0.1, .clip = 1.0,
              .ratio = -1, .seed = 1337, .threads = 0, .val_frac = 0.1, .eval_batches = 8};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      exit(0);
    }
    if (strcmp(a, "--cosine") == 0) { o->cosine = 1; continue; }
    if (strcmp(a, "--quiet") == 0) { o->quiet = 1; continue; }
    if (strcmp(a, "--plan-only") == 0) { o->plan_only = 1; continue; }
    if (strncmp(a, "--", 2) != 0) {
      fprintf(stderr, "remat train: unexpected argument '%s'; see remat train --help\n", a);
      return -1;
    }
    /* every other flag takes a value: --flag VALUE or --flag=VALUE */
    const char *v;
    char name[64];
    const char *eq = strchr(a, '=');
    if (eq) {
      snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
      v = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", a);
      if (i + 1 >= argc) {
        fprintf(stderr, "remat train: %s needs a value; see remat train --help\n", a);
        return -1;
      }
      v = argv[++i];
    }
    int64_t iv;
    int rc = 0;
    if (!strcmp(name, "--config")) o->config = v;
    else if (!strcmp(name, "--model")) o->model = v;
    else if (!strcmp(name, "--data")) o->data = v;
    else if (!strcmp(name, "--text")) o->text = v;
    else if (!strcmp(name, "--save")) o->save = v;
    else if (!strcmp(name, "--log")) o->log = v;
    else if (!strcmp(name, "--ckpt-layers")) o->ckpt_layers = v;
    else if (!strcmp(name, "--mem")) o->mem = v;
    else if (!strcmp(name, "--batch")) rc = parse_i64(name, v, 1, 1 << 16, &o->B);
    else if (!strcmp(name, "--seq")) rc = parse_i64(name, v, 1, 1 << 20, &o->T);
    else if (!strcmp(name, "--grad-accum")) rc = parse_i64(name, v, 1, 1 << 16, &o->K);
    else if (!strcmp(name, "--steps")) rc = parse_i64(name, v, 0, 1 << 30, &o->steps);
    else if (!strcmp(name, "--warmup")) rc = parse_i64(name, v, 0, 1 << 30, &o->warmup);
    else if (!strcmp(name, "--eval-every")) rc = parse_i64(name, v, 0, 1 << 30, &o->eval_every);
    else if (!strcmp(name, "--eval-batches")) rc = parse_i64(name, v, 1, 1 << 20, &o->eval_batches);
    else if (!strcmp(name, "--val-frac")) rc = parse_f64(name, v, 0.001, 0.9, 0, &o->val_frac);
    else if (!strcmp(name, "--lr")) rc = parse_f64(name, v, 0, 10, 0, &o->lr);
    else if (!strcmp(name, "--weight-decay")) rc = parse_f64(name, v, 0, 10, 0, &o->wd);
    else if (!strcmp(name, "--grad-clip")) rc = parse_f64(name, v, 0, 1e30, 0, &o->clip);
    else if (!strcmp(name, "--dropout")) rc = parse_f64(name, v, 0, 1, 1, &o->dropout);
    else if (!strcmp(name, "--ckpt-ratio")) rc = parse_f64(name, v, 0, 1, 0, &o->ratio);
    else if (!strcmp(name, "--peak-gflops")) rc = parse_f64(name, v, 1e-6, 1e12, 0, &o->peak_gflops);
    else if (!strcmp(name, "--seed")) {
      rc = parse_i64(name, v, 0, INT64_MAX, &iv);
      o->seed = (uint64_t)iv;
    } else if (!strcmp(name, "--threads")) {
      rc = parse_i64(name, v, 1, 1024, &iv);
      o->threads = (int)iv;
    } else {
      fprintf(stderr, "remat train: unknown option '%s'; see remat train --help\n", name);
      return -1;
    }
    if (rc) return -1;
  }
  int nsel = (o->ratio >= 0) + (o->ckpt_layers != NULL) + (o->mem != NULL);
  if (nsel > 1) {
    fprintf(stderr, "remat train: --ckpt-ratio, --ckpt-layers and --mem each choose the "
                    "recomputed blocks; give at most one\n");
    return -1;
  }
  if (o->data && o->text) {
    fprintf(stderr, "remat train: give --data or --text, not both\n");
    return -1;
  }
  return 0;
}

/* "0,2,5" -> policy; every index in [0, L), no repeats. */
static int parse_layer_list(const char *s, uint8_t *policy, int64_t L) {
  remat_policy_first_n(policy, L, 0);
  const char *p = s;
  if (!*p) goto bad;
  while (*p) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno) goto bad;
    if (v < 0 || v >= L) {
      fprintf(stderr,
              "remat train: --ckpt-layers names block %lld but the model has blocks 0..%lld\n",
              v, (long long)L - 1);
      return -1;
    }
    if (policy[v] == REMAT_RECOMPUTE) {
      fprintf(stderr, "remat train: --ckpt-layers names block %lld twice\n", v);
      return -1;
    }
    policy[v] = REMAT_RECOMPUTE;
    p = end;
    if (*p == ',') {
      p++;
      if (!*p) goto bad;
    } else if (*p) {
      goto bad;
    }
  }
  return 0;
bad:
  fprintf(stderr, "remat train: --ckpt-layers expects block indices like 0,2,5; got '%s'\n", s);
  return -1;
}

static void fmt_eta(double s, char *buf, size_t cap) {
  if (s < 0 || !isfinite(s)) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static float lr_at(const opts *o, int64_t step) {
  double lr = o->lr;
  if (o->warmup > 0 && step < o->warmup) return (float)(lr * (double)(step + 1) / (double)o->warmup);
  if (o->cosine && o->steps > o->warmup) {
    double p = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
    return (float)(lr * (0.1 + 0.9 * 0.5 * (1.0 + cos(M_PI * p))));
  }
  return (float)lr;
}

int remat_cmd_train(int argc, char **argv) {
  opts o;
  if (parse_args(argc, argv, &o)) return DIE_USAGE;
  remat_error err = {0};
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  int rc = DIE_RUN;

  remat_set_threads(o.threads);
  int threads = omp_get_max_threads();

  /* ---- model shape */
  remat_config cfg, want;
  int have_want = 0;
  if (o.config) {
    if (remat_config_parse(o.config, &want, &err)) return fail(DIE_USAGE, err.msg);
    have_want = 1;
  }
  if (o.model) {
    if (remat_checkpoint_read_config(o.model, &cfg, &err)) return fail(DIE_RUN, err.msg);
  } else if (!have_want) {
    remat_config_parse("small", &cfg, &err);
  } else {
    cfg = want;
  }
  if (o.T == 0) o.T = cfg.max_seq_len < 64 ? cfg.max_seq_len : 64;
  if (o.T > cfg.max_seq_len) {
    fprintf(stderr, "remat train: --seq %lld exceeds the model's maximum sequence length %lld\n",
            (long long)o.T, (long long)cfg.max_seq_len);
    return DIE_USAGE;
  }

  /* ---- data */
  remat_tokens tok = {0};
  remat_loader loader = {0}, val = {0};
  remat_model m = {0};
  uint8_t *policy = NULL;
  FILE *logf = NULL;
  const char *source = "embedded corpus";
  if (o.data) {
    if (remat_tokens_load(&tok, o.data, &err)) goto fail_msg;
    source = o.data;
  } else if (o.text) {
    if (remat_tokens_from_text(&tok, o.text, &err)) goto fail_msg;
    source = o.text;
  } else if (remat_corpus_tokens(&tok, 0, &err)) {
    goto fail_msg;
  }
  if (remat_tokens_check_vocab(&tok, cfg.vocab_size, &err)) goto fail_msg;
  double val_frac = o.eval_every > 0 ? o.val_frac : 0.0;
  if (remat_loader_init(&loader, &tok, o.B, o.T, REMAT_SPLIT_TRAIN, val_frac, 1, o.seed, &err))
    goto fail_msg;
  if (o.eval_every > 0 &&
      remat_loader_init(&val, &tok, o.B, o.T, REMAT_SPLIT_VAL, val_frac, 0, o.seed, &err))
    goto fail_msg;

  /* ---- checkpointing policy */
  int64_t L = cfg.num_layers;
  policy = malloc((size_t)L);
  if (!policy) goto fail_oom;
  remat_policy_first_n(policy, L, 0);
  if (o.ratio >= 0) {
    remat_policy_first_n(policy, L, (int64_t)floor(o.ratio * (double)L + 1e-9));
  } else if (o.ckpt_layers) {
    if (parse_layer_list(o.ckpt_layers, policy, L)) {
      rc = DIE_USAGE;
      goto out;
    }
  } else if (o.mem) {
    size_t budget, other, need;
    int64_t n;
    if (remat_parse_size(o.mem, &budget, &err)) {
      rc = DIE_USAGE;
      goto fail_msg;
    }
    /* What the process holds outside the arena once the model exists: the
     * data, the loader, and a plan's own bookkeeping (the same for every
     * policy), measured with one plan alive. */
    remat_memplan probe;
    if (remat_memplan_build(&probe, &cfg, o.B, o.T, policy, &err)) goto fail_msg;
    other = remat_heap_bytes();
    remat_memplan_free(&probe);
    size_t arena_budget = budget > other ? budget - other : 0;
    if (remat_fewest_recompute(&cfg, o.B, o.T, arena_budget, &n, &need, &err)) {
      if (err.code == REMAT_EINFEASIBLE) {
        fprintf(stderr,
                "remat train: --mem %s does not fit: even recomputing all %lld blocks needs %s "
                "(%zu bytes, the training data included); raise --mem to at least that or "
                "lower --batch/--seq\n",
                remat_format_bytes(budget, b1, sizeof b1), (long long)L,
                remat_format_bytes(need + other, b2, sizeof b2), need + other);
        goto out;
      }
      goto fail_msg;
    }
    remat_policy_first_n(policy, L, n);
  }

  /* ---- plan: every buffer of a step, before anything large is allocated.
   * Everything the library holds outside the arena (data, loader, the
   * plan's own bookkeeping) is held now: the planned peak is the arena plus
   * that. */
  remat_memplan mp;
  if (remat_memplan_build(&mp, &cfg, o.B, o.T, policy, &err)) goto fail_msg;
  size_t other = remat_heap_bytes();
  size_t planned = mp.peak_bytes + other;
  {
    char rec[256] = "";
    int64_t shown = 0;
    for (int64_t l = 0; l < L && shown < 24; l++)
      if (policy[l] == REMAT_RECOMPUTE) {
        snprintf(rec + strlen(rec), sizeof rec - strlen(rec), "%s%lld", shown ? "," : "",
                 (long long)l);
        shown++;
      }
    if (mp.num_recomputed > shown) strncat(rec, ",...", sizeof rec - strlen(rec) - 1);
    printf("model   L=%lld C=%lld NH=%lld V=%lld (padded %lld) maxT=%lld, %zu parameters\n",
           (long long)cfg.num_layers, (long long)cfg.channels, (long long)cfg.num_heads,
           (long long)cfg.vocab_size, (long long)cfg.padded_vocab_size,
           (long long)cfg.max_seq_len, remat_param_count(&cfg));
    printf("data    %s: %lld tokens; batch %lld x %lld, grad-accum %lld\n", source,
           (long long)tok.n, (long long)o.B, (long long)o.T, (long long)o.K);
    printf("policy  %lld of %lld blocks recomputed%s%s%s\n", (long long)mp.num_recomputed,
           (long long)L, mp.num_recomputed ? " (" : "", rec, mp.num_recomputed ? ")" : "");
    printf("memory  planned peak %s (%zu bytes) = arena %s (state %s, activations and "
           "workspace %s) + data %s\n",
           remat_format_bytes(planned, b1, sizeof b1), planned,
           remat_format_bytes(mp.peak_bytes, b2, sizeof b2),
           remat_format_bytes(mp.persistent_bytes, b3, sizeof b3),
           remat_format_bytes(mp.peak_bytes - mp.persistent_bytes, b4, sizeof b4),
           remat_format_bytes(other, b5, sizeof b5));
    fflush(stdout);
  }
  remat_memplan_free(&mp);
  if (o.plan_only) {
    rc = 0;
    goto out;
  }
  /* The arena is written in full before the first step: a plan larger than
   * this machine's memory would end in the kernel's OOM killer, not an error. */
  size_t ram = remat_available_memory_bytes();
  if (ram && planned > ram) {
    fprintf(stderr,
            "remat train: the plan needs %s but this machine has %s of memory available; lower "
            "--batch/--seq or use --mem %s to recompute blocks\n",
            remat_format_bytes(planned, b1, sizeof b1), remat_format_bytes(ram, b2, sizeof b2),
            remat_format_bytes(ram / 10 * 9, b3, sizeof b3));
    goto out;
  }

  /* Measured before the arena exists, so that filling it cannot disturb the
   * measurement. */
  double peak_flops = o.peak_gflops > 0 ? o.peak_gflops * 1e9 : 0;
  if (peak_flops == 0) {
    peak_flops = remat_measure_sgemm_flops(2048, 1.0);
    printf("peak    sgemm %.1f GFLOP/s measured on %d threads (MFU is against this)\n",
           peak_flops / 1e9, threads);
  } else {
    printf("peak    %.1f GFLOP/s given\n", peak_flops / 1e9);
  }
  fflush(stdout);

  /* ---- allocate: the same plan, now with its arena */
  if (remat_model_init(&m, &cfg, o.B, o.T, policy, &err)) goto fail_msg;
  REMAT_CHECK_SAME_PLAN(m.mp.peak_bytes + (remat_heap_bytes() - m.mp.peak_bytes) == planned);
  if (o.model) {
    if (remat_checkpoint_load(o.model, have_want ? &want : NULL, m.params, &err)) goto fail_msg;
  } else {
    remat_model_init_weights(&m, o.seed);
  }


  if (o.save) { /* find out now, not after hours of training, that it cannot be saved */
    char probe[4096];
    snprintf(probe, sizeof probe, "%s.tmp", o.save);
    FILE *f = fopen(probe, "wb");
    if (!f) {
      fprintf(stderr, "remat train: cannot write checkpoint '%s': %s\n", o.save, strerror(errno));
      goto out;
    }
    fclose(f);
    remove(probe);
  }
  if (o.log) {
    logf = fopen(o.log, "w");
    if (!logf) {
      fprintf(stderr, "remat train: cannot write log file '%s': %s\n", o.log, strerror(errno));
      goto out;
    }
  }

  remat_hparams hp;
  remat_hparams_default(&hp);
  hp.weight_decay = (float)o.wd;
  hp.grad_clip = (float)o.clip;
  hp.dropout = (float)o.dropout;
  hp.seed = o.seed;

  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  int tty = isatty(STDERR_FILENO) && !o.quiet;
  int64_t every = o.steps >= 20 ? o.steps / 20 : 1;
  double tokens_per_step = (double)(o.B * o.T * o.K);
  float dloss = 1.0f / (float)(o.B * o.T * o.K);
  float first_loss = NAN, last_loss = NAN;
  double last_val = NAN;
  double t_train = 0, t_recompute = 0;
  int64_t timed_steps = 0;
  size_t measured = 0;
  remat_heap_reset_peak();
  double t_start = remat_now();
  int64_t step;
  for (step = 0; step < o.steps && !interrupted; step++) {
    double t0 = remat_now();
    m.recompute_s = 0;
    remat_model_zero_grad(&m);
    double loss = 0;
    for (int64_t k = 0; k < o.K; k++) {
      remat_loader_next(&loader, m.inputs, m.targets);
      loss += remat_model_forward_backward(&m, (uint32_t)k, dloss, &hp);
    }
    loss /= (double)o.K;
    float lr = lr_at(&o, step);
    float norm = remat_model_update(&m, &hp, lr);
    double dt = remat_now() - t0;
    if (!isfinite(loss)) {
      fprintf(stderr, "%sremat train: loss is %g at step %lld; lower --lr or raise --grad-clip\n",
              tty ? "\n" : "", loss, (long long)step + 1);
      goto out;
    }
    measured = remat_model_arena_high_water(&m) + (remat_heap_peak_bytes() - m.mp.peak_bytes);
    if (step == 0) first_loss = (float)loss;
    last_loss = (float)loss;
    if (step > 0 || o.steps == 1) { /* the first step warms caches and threads */
      t_train += dt;
      t_recompute += m.recompute_s;
      timed_steps++;
    }
    double tps = tokens_per_step / dt;
    double mfu = remat_mfu(&cfg, o.T, tps, peak_flops);
    double val_loss = NAN;
    if (o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps)) {
      /* the same held-out batches every time, so the figures compare */
      remat_loader_reset(&val);
      val_loss = 0;
      for (int64_t e = 0; e < o.eval_batches; e++) {
        remat_loader_next(&val, m.inputs, m.targets);
        val_loss += remat_model_eval(&m);
      }
      val_loss /= (double)o.eval_batches;
      last_val = val_loss;
    }
    if (logf) {
      fprintf(logf,
              "{\"step\": %lld, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6g, "
              "\"step_s\": %.6f, \"recompute_s\": %.6f, \"tokens_per_s\": %.2f, \"mfu\": %.6f, "
              "\"recomputed_blocks\": %lld, \"planned_peak_bytes\": %zu, "
              "\"measured_peak_bytes\": %zu, \"rss_peak_bytes\": %zu",
              (long long)step + 1, loss, lr, norm, dt, m.recompute_s, tps, mfu,
              (long long)m.mp.num_recomputed, planned, measured, remat_rss_peak_bytes());
      if (!isnan(val_loss)) fprintf(logf, ", \"val_loss\": %.6f", val_loss);
      fputs("}\n", logf);
      fflush(logf);
    }
    if (!o.quiet) {
      double avg = timed_steps ? t_train / (double)timed_steps : dt;
      char eta[32];
      fmt_eta(avg * (double)(o.steps - step - 1), eta, sizeof eta);
      if (tty) {
        fprintf(stderr, "\rstep %lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s   ",
                (long long)step + 1, (long long)o.steps, loss, tps, 100 * mfu, eta);
        if (!isnan(val_loss)) fprintf(stderr, "| held-out %.4f\n", val_loss); /* keep it */
      } else if ((step + 1) % every == 0 || step == 0 || step + 1 == o.steps ||
                 !isnan(val_loss)) {
        printf("step %lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s",
               (long long)step + 1, (long long)o.steps, loss, tps, 100 * mfu, eta);
        if (!isnan(val_loss)) printf(" | held-out %.4f", val_loss);
        printf("\n");
        fflush(stdout);
      }
    }
  }
  if (tty) fprintf(stderr, "\n");
  double wall = remat_now() - t_start;
  if (interrupted) printf("interrupted after %lld steps\n", (long long)step);

  if (step > 0) {
    double tps = timed_steps ? tokens_per_step * (double)timed_steps / t_train
                             : tokens_per_step * (double)step / wall;
    printf("done    %lld steps in %.1f s; loss %.4f -> %.4f", (long long)step, wall,
           first_loss, last_loss);
    if (!isnan(last_val)) printf("; held-out loss %.4f", last_val);
    printf("\n");
    printf("speed   %.0f tokens/s, MFU %.1f%% of %.1f GFLOP/s; recompute %.1f%% of step time\n",
           tps, 100 * remat_mfu(&cfg, o.T, tps, peak_flops), peak_flops / 1e9,
           t_train > 0 ? 100 * t_recompute / t_train : 0.0);
    printf("memory  planned peak %zu bytes, measured peak %zu bytes (%+.3f%%); process RSS "
           "peak %s\n",
           planned, measured, 100.0 * ((double)measured - (double)planned) / (double)planned,
           remat_format_bytes(remat_rss_peak_bytes(), b1, sizeof b1));
  }
  if (o.save) {
    if (remat_checkpoint_save(o.save, &cfg, m.params, &err)) goto fail_msg;
    printf("saved   %s\n", o.save);
  }
  rc = interrupted ? 130 : 0;
  goto out;

fail_oom:
  snprintf(err.msg, sizeof err.msg, "out of memory");
fail_msg:
  fprintf(stderr, "remat train: %s\n", err.msg);
out:
  if (logf) fclose(logf);
  remat_model_free(&m);
  free(policy);
  remat_loader_free(&loader);
  remat_loader_free(&val);
  remat_tokens_free(&tok);
  return rc;
}
