/* cmd_train.c: `remat train`: parse flags, load data and weights, choose the
 * per-block checkpointing policy (ratio, list, or memory budget: keep,
 * recompute or middle for each block), print the plan, then run the
 * library's trainer and report loss, tokens/s, MFU and planned vs measured
 * peak. The training step itself is remat_trainer_step. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "remat.h"

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
    "  --save FILE               write an llm.c checkpoint at the end (and on Ctrl-C or\n"
    "                            SIGTERM; a second Ctrl-C quits at once)\n"
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
    "  --ckpt-layers LIST        recompute these blocks (0-based), e.g. 0,2,5 or 0-3;\n"
    "                            'middle:' switches the blocks after it to the middle\n"
    "                            policy (store the matrix products' outputs, rerun\n"
    "                            the layernorms and GELU), 'full:' back to full\n"
    "                            recomputation: full:0-3,middle:4-11\n"
    "  --mem SIZE                the planner's choice of keep, middle or full for\n"
    "                            each block: the least recompute time whose planned\n"
    "                            peak fits SIZE (e.g. 1.5GiB, 800MB, 2e9)\n"
    "evaluation:\n"
    "  --eval-every N            every N steps, the mean loss on held-out batches (off)\n"
    "  --val-frac F              with --eval-every: the last F of the tokens are held\n"
    "                            out from training (0.1)\n"
    "  --eval-batches N          batches per evaluation (8)\n"
    "several processes (start them with mpirun -np N; N ranks, at most 64):\n"
    "  --stages P                a pipeline of P stages, one per rank (N = P);\n"
    "                            --schedule 1f1b|gpipe, --layers N0,N1,... or --plan\n"
    "                            FILE or --mem place the blocks\n"
    "  --data-parallel D         D replicas of the model, one per rank (N = D); with\n"
    "                            --grad-accum K each runs K micro-batches a step\n"
    "                            (a step of K x D); the same results as one process\n"
    "                            with --grad-accum K x D, bit for bit\n"
    "  --zero 0|1|2|3            with --data-parallel: shard AdamW's moments (1), and\n"
    "                            the gradients (2), and the parameters (3) (0)\n"
    "  --stages P --data-parallel D  a grid of P x D ranks (N = P x D): D pipelines\n"
    "                            of P stages, each stage's D copies replicas; with\n"
    "                            --grad-accum M each pipeline runs M a step; the same\n"
    "                            results as one process with --grad-accum M x D\n"
    "  --trace FILE.json         with --stages or --data-parallel: every rank's\n"
    "                            timeline, for Perfetto or chrome://tracing\n"
    "reporting:\n"
    "  --log FILE.jsonl          one JSON object per optimizer step\n"
    "  --peak-gflops X           peak FLOP rate for MFU (default: measure sgemm now)\n"
    "  --plan-only               print the memory plan, with each policy's bytes and\n"
    "                            recompute time per block, and exit without training\n"
    "  --quiet                   no progress lines, only the summary\n"
    "  --help                    this text\n";

typedef struct {
  const char *config, *model, *data, *text, *save, *log, *ckpt_layers, *mem;
  const char *layers, *plan, *trace, *ckpt_dir, *resume;
  int64_t ckpt_every;
  char resume_model[4096]; /* --resume's model.bin */
  char resume_dir[4096];
  const char *ckpt_step_dir; /* the step directory resumed from */
  int64_t resume_step;
  int64_t B, T, K, steps, warmup, eval_every, eval_batches, stages, replicas;
  int schedule, zero;
  double lr, wd, clip, dropout, ratio, peak_gflops, val_frac;
  uint64_t seed;
  int threads, cosine, quiet, plan_only;
} opts;

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
  (void)sig;
  if (interrupted) _exit(130); /* a second signal: quit now, save nothing */
  interrupted = 1;
}

/* Flags that take a value; the others are switches. */
static const char *const valued[] = {
    "--config", "--model", "--data", "--text", "--save", "--log", "--ckpt-layers", "--mem",
    "--batch", "--seq", "--grad-accum", "--steps", "--warmup", "--eval-every",
    "--eval-batches", "--val-frac", "--lr", "--weight-decay", "--grad-clip", "--dropout",
    "--ckpt-ratio", "--peak-gflops", "--seed", "--threads", "--stages", "--schedule",
    "--layers", "--plan", "--trace", "--checkpoint-dir", "--checkpoint-every", "--resume",
    "--data-parallel", "--zero", NULL};

static int is_valued(const char *a) {
  size_t n = strcspn(a, "=");
  for (int i = 0; valued[i]; i++)
    if (strlen(valued[i]) == n && strncmp(valued[i], a, n) == 0) return 1;
  return 0;
}

static int parse_value(opts *o, const char *name, const char *v) {
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
  else if (!strcmp(name, "--layers")) o->layers = v;
  else if (!strcmp(name, "--checkpoint-dir")) o->ckpt_dir = v;
  else if (!strcmp(name, "--resume")) o->resume = v;
  else if (!strcmp(name, "--checkpoint-every"))
    rc = cli_parse_i64(name, v, 1, 1 << 30, &o->ckpt_every);
  else if (!strcmp(name, "--plan")) o->plan = v;
  else if (!strcmp(name, "--trace")) o->trace = v;
  else if (!strcmp(name, "--stages")) rc = cli_parse_i64(name, v, 1, REMAT_MAX_STAGES, &o->stages);
  else if (!strcmp(name, "--data-parallel"))
    rc = cli_parse_i64(name, v, 1, REMAT_MAX_STAGES, &o->replicas);
  else if (!strcmp(name, "--zero")) {
    rc = cli_parse_i64(name, v, 0, 3, &iv);
    o->zero = (int)iv;
  }
  else if (!strcmp(name, "--schedule")) {
    if (remat_plan_schedule_parse(v, &o->schedule))
      rc = cli_fail(-1, "--schedule %s is not a schedule; use 1f1b or gpipe", v);
  }
  else if (!strcmp(name, "--batch")) rc = cli_parse_i64(name, v, 1, 1 << 16, &o->B);
  else if (!strcmp(name, "--seq")) rc = cli_parse_i64(name, v, 1, 1 << 20, &o->T);
  else if (!strcmp(name, "--grad-accum")) rc = cli_parse_i64(name, v, 1, 1 << 16, &o->K);
  else if (!strcmp(name, "--steps")) rc = cli_parse_i64(name, v, 0, 1 << 30, &o->steps);
  else if (!strcmp(name, "--warmup")) rc = cli_parse_i64(name, v, 0, 1 << 30, &o->warmup);
  else if (!strcmp(name, "--eval-every")) rc = cli_parse_i64(name, v, 0, 1 << 30, &o->eval_every);
  else if (!strcmp(name, "--eval-batches"))
    rc = cli_parse_i64(name, v, 1, 1 << 20, &o->eval_batches);
  else if (!strcmp(name, "--val-frac")) rc = cli_parse_f64(name, v, 0.001, 0.9, 0, &o->val_frac);
  else if (!strcmp(name, "--lr")) rc = cli_parse_f64(name, v, 0, 10, 0, &o->lr);
  else if (!strcmp(name, "--weight-decay")) rc = cli_parse_f64(name, v, 0, 10, 0, &o->wd);
  else if (!strcmp(name, "--grad-clip")) rc = cli_parse_f64(name, v, 0, 1e30, 0, &o->clip);
  else if (!strcmp(name, "--dropout")) rc = cli_parse_f64(name, v, 0, 1, 1, &o->dropout);
  else if (!strcmp(name, "--ckpt-ratio")) rc = cli_parse_f64(name, v, 0, 1, 0, &o->ratio);
  else if (!strcmp(name, "--peak-gflops"))
    rc = cli_parse_f64(name, v, 1e-6, 1e12, 0, &o->peak_gflops);
  else if (!strcmp(name, "--seed")) {
    rc = cli_parse_i64(name, v, 0, INT64_MAX, &iv);
    o->seed = (uint64_t)iv;
  } else if (!strcmp(name, "--threads")) {
    rc = cli_parse_i64(name, v, 1, 1024, &iv);
    o->threads = (int)iv;
  }
  return rc;
}

static int parse_args(int argc, char **argv, opts *o) {
  *o = (opts){.stages = 1, .replicas = 1, .schedule = REMAT_SCHED_1F1B, .B = 8, .T = 0, .K = 1, .steps = 300, .lr = 1e-3, .wd = 0.1, .clip = 1.0,
              .ratio = -1, .seed = 1337, .threads = 0, .val_frac = 0.1, .eval_batches = 8};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      exit(cli_stdout_ok() ? CLI_EXIT_RUN : 0);
    }
    if (strcmp(a, "--cosine") == 0) o->cosine = 1;
    else if (strcmp(a, "--quiet") == 0) o->quiet = 1;
    else if (strcmp(a, "--plan-only") == 0) o->plan_only = 1;
    else if (strncmp(a, "--", 2) != 0)
      return cli_fail(-1, "unexpected argument '%s'; see remat train --help", a);
    else if (!is_valued(a))
      return cli_fail(-1, "unknown option '%.*s'; see remat train --help", (int)strcspn(a, "="),
                      a);
    else {
      char name[64];
      const char *v = cli_flag_value(argc, argv, &i, name, sizeof name);
      if (!v || parse_value(o, name, v)) return -1;
    }
  }
  if ((o->ratio >= 0) + (o->ckpt_layers != NULL) + (o->mem != NULL) + (o->plan != NULL) > 1)
    return cli_fail(-1, "--ckpt-ratio, --ckpt-layers, --mem and --plan each choose the "
                        "recomputed blocks; give at most one");
  if (o->stages == 1 && (o->layers || o->plan))
    return cli_fail(-1, "--layers and --plan place a pipeline: give --stages P too (and "
                        "start P ranks with mpirun -np P)");
  if (o->stages == 1 && o->replicas == 1 && o->trace)
    return cli_fail(-1, "--trace draws the timeline of several ranks: give --stages P or "
                        "--data-parallel D too (and start that many with mpirun -np)");
  if (o->layers && o->mem)
    return cli_fail(-1, "--layers places the blocks by hand and --mem lets remat place them; "
                        "give one");
  if (o->stages > 1 && o->eval_every > 0)
    return cli_fail(-1, "--eval-every runs on one process only; drop it with --stages");
  if (o->stages * o->replicas > REMAT_MAX_STAGES)
    return cli_fail(-1, "--stages %lld x --data-parallel %lld is %lld ranks; remat runs at most %d",
                    (long long)o->stages, (long long)o->replicas,
                    (long long)(o->stages * o->replicas), REMAT_MAX_STAGES);
  if (o->replicas == 1 && o->zero)
    return cli_fail(-1, "--zero %d shards across replicas: give --data-parallel D too (and start "
                    "D ranks with mpirun -np D)", o->zero);
  if (o->replicas > 1 && o->eval_every > 0)
    return cli_fail(-1, "--eval-every runs on one process only; drop it with --data-parallel");
  if (o->data && o->text) return cli_fail(-1, "give --data or --text, not both");
  if (!!o->ckpt_dir != !!o->ckpt_every)
    return cli_fail(-1, "--checkpoint-dir DIR and --checkpoint-every N go together");
  if (o->resume && o->model)
    return cli_fail(-1, "--resume takes the weights from its checkpoint; drop --model");
  return 0;
}

/* --ckpt-layers: block indices and ranges ("0,2,5", "0-3") recomputed in
 * full; "middle:" before an item gives it and the items after it the middle
 * policy, "full:" full recomputation again ("full:0-3,middle:4-11"). Every
 * index in [0, L), none twice. */
static int parse_layer_list(const char *s, uint8_t *policy, int64_t L) {
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
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10), w = v;
    if (end == p || errno || *p == '-' || *p == '+') goto bad;
    p = end;
    if (*p == '-') {
      errno = 0;
      w = strtoll(p + 1, &end, 10);
      if (end == p + 1 || errno || p[1] == '-' || p[1] == '+' || w < v) goto bad;
      p = end;
    }
    for (long long k = v; k <= w; k++) {
      if (k < 0 || k >= L)
        return cli_fail(-1, "--ckpt-layers names block %lld but the model has blocks 0..%lld", k,
                        (long long)L - 1);
      if (policy[k] != REMAT_KEEP) return cli_fail(-1, "--ckpt-layers names block %lld twice", k);
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
  return cli_fail(-1, "--ckpt-layers expects block indices like 0,2,5 or 0-3, with 'middle:' "
                  "or 'full:' before them to choose the policy (full:0-3,middle:4-11); got '%s'",
                  s);
}

static void fmt_eta(double s, char *buf, size_t cap) {
  if (s < 0 || !isfinite(s)) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void train_opts_from(const opts *o, remat_train_opts *to) {
  remat_train_opts_default(to);
  to->B = o->B;
  to->T = o->T;
  to->grad_accum = o->K * o->replicas; /* a replica runs K of the step's K x D */
  to->steps = o->steps;
  to->warmup = o->warmup;
  to->cosine = o->cosine;
  to->lr = o->lr;
  to->hp.weight_decay = (float)o->wd;
  to->hp.grad_clip = (float)o->clip;
  to->hp.dropout = (float)o->dropout;
  to->hp.seed = o->seed;
  to->val_frac = o->eval_every > 0 ? o->val_frac : 0.0;
  to->eval_batches = o->eval_batches;
}

/* The model's shape: from --model's header, else --config, else "small".
 * The checkpoint stays open in rd until its weights are read, so the shape
 * and the weights come from one file even if the path is replaced. */
static int load_shape(const opts *o, remat_checkpoint_reader *rd, remat_config *cfg,
                      remat_config *want, int *have_want) {
  remat_error err;
  *have_want = 0;
  if (o->config) {
    if (remat_config_parse(o->config, want, &err))
      return cli_fail(CLI_EXIT_USAGE, "--config: %s", err.msg);
    *have_want = 1;
  }
  if (o->model) {
    if (remat_checkpoint_open(rd, o->model, cfg, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    if (*have_want && memcmp(cfg, want, sizeof *cfg) != 0)
      return cli_fail(CLI_EXIT_USAGE,
                      "--model %s has shape L=%lld C=%lld NH=%lld V=%lld T=%lld but --config "
                      "asks for L=%lld C=%lld NH=%lld V=%lld T=%lld; drop --config or use a "
                      "matching checkpoint",
                      o->model, (long long)cfg->num_layers, (long long)cfg->channels,
                      (long long)cfg->num_heads, (long long)cfg->vocab_size,
                      (long long)cfg->max_seq_len, (long long)want->num_layers,
                      (long long)want->channels, (long long)want->num_heads,
                      (long long)want->vocab_size, (long long)want->max_seq_len);
  } else {
    remat_config_parse(*have_want ? o->config : "small", cfg, &err);
  }
  return 0;
}

static int load_tokens(const opts *o, remat_tokens *tok, const char **source) {
  remat_error err;
  int rc;
  *source = "embedded corpus";
  if (o->data) {
    rc = remat_tokens_load(tok, o->data, &err);
    *source = o->data;
  } else if (o->text) {
    rc = remat_tokens_from_text(tok, o->text, &err);
    *source = o->text;
  } else {
    rc = remat_corpus_tokens(tok, 0, &err);
  }
  return rc ? cli_fail(CLI_EXIT_RUN, "%s", err.msg) : 0;
}

/* --mem: the planner's choice of keep, middle or full recomputation for
 * each block (the model as one stage), the least recompute time whose whole
 * footprint fits. What the process holds outside the arena (data, loaders,
 * bookkeeping) is the same for every policy; it is measured with a trainer
 * planned for keeping all. */
static int policy_for_budget(const opts *o, const remat_config *cfg, const remat_tokens *tok,
                             const remat_train_opts *to, uint8_t *policy) {
  remat_error err;
  size_t budget;
  int64_t L = cfg->num_layers;
  char b1[32], b2[32];
  if (remat_parse_size(o->mem, &budget, &err)) return cli_fail(CLI_EXIT_USAGE, "--mem: %s", err.msg);
  remat_trainer *probe;
  remat_policy_first_n(policy, L, 0);
  if (remat_trainer_create(&probe, cfg, policy, tok, to, &err))
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  size_t other = remat_trainer_planned_bytes(probe) - remat_trainer_memplan(probe)->peak_bytes;
  remat_trainer_destroy(probe);
  size_t arena_budget = budget > other ? budget - other : 0;
  remat_plan_problem pb;
  remat_plan plan;
  if (remat_plan_problem_from_replicas(&pb, cfg, o->B, o->T, 1, o->K, o->replicas, o->zero,
                                       arena_budget, &err))
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  int rc = remat_plan_solve(&pb, &plan, &err);
  remat_plan_problem_free(&pb);
  if (rc == REMAT_EINFEASIBLE) {
    /* the plan holds the least-memory choice */
    size_t need = plan.min_budget_bytes;
    int64_t full = plan.total_recomputed - plan.total_middle, mid = plan.total_middle;
    remat_plan_free(&plan);
    return cli_fail(CLI_EXIT_RUN,
                    "--mem %s does not fit: even the least memory (%lld of %lld blocks "
                    "recomputed, %lld middle) needs %s (%zu bytes, the training data included); "
                    "raise --mem to at least that or lower --batch/--seq",
                    remat_format_bytes(budget, b1, sizeof b1), (long long)full, (long long)L,
                    (long long)mid, remat_format_bytes(need + other, b2, sizeof b2),
                    need + other);
  }
  if (rc) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  /* planner layers: 0 the embedding, 1..L the blocks, L + 1 the head */
  for (int64_t l = 0; l < L; l++) policy[l] = plan.policy[l + 1];
  remat_plan_free(&plan);
  return 0;
}

static int choose_policy(const opts *o, const remat_config *cfg, const remat_tokens *tok,
                         const remat_train_opts *to, uint8_t *policy) {
  int64_t L = cfg->num_layers;
  remat_policy_first_n(policy, L, 0);
  if (o->ratio >= 0) remat_policy_first_n(policy, L, (int64_t)floor(o->ratio * (double)L + 1e-9));
  else if (o->ckpt_layers) return parse_layer_list(o->ckpt_layers, policy, L) ? CLI_EXIT_USAGE : 0;
  else if (o->mem) return policy_for_budget(o, cfg, tok, to, policy);
  return 0;
}

static void print_model(const remat_config *cfg) {
  printf("model   L=%lld C=%lld NH=%lld V=%lld (padded %lld) maxT=%lld, %zu parameters\n",
         (long long)cfg->num_layers, (long long)cfg->channels, (long long)cfg->num_heads,
         (long long)cfg->vocab_size, (long long)cfg->padded_vocab_size,
         (long long)cfg->max_seq_len, remat_param_count(cfg));
}

/* The blocks of one policy, "0,1,2" (at most 24, then ",..."). */
static void block_list(const remat_memplan *mp, int policy, char *buf, size_t cap) {
  int64_t shown = 0, all = 0;
  buf[0] = 0;
  for (int64_t l = 0; l < mp->num_blocks; l++) {
    if (mp->policy[l] != policy) continue;
    all++;
    if (shown < 24) {
      snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", shown ? "," : "", (long long)l);
      shown++;
    }
  }
  if (all > shown) strncat(buf, ",...", cap - strlen(buf) - 1);
}

/* --plan-only: each policy's bytes per block and micro-batch (what it
 * stores, and the workspace its backward needs) and its recompute time, as
 * the planner has them (the memory model's bytes; GFLOP of one
 * micro-batch). */
static void print_policies(const remat_config *cfg, const opts *o) {
  remat_plan_problem pb;
  remat_error err;
  if (remat_plan_problem_from_replicas(&pb, cfg, o->B, o->T, 1, o->K, o->replicas, o->zero,
                                       (size_t)1 << 60, &err))
    return;
  const remat_plan_group *g = &pb.groups[REMAT_LAYER_BLOCK];
  double fb = g->fwd + g->bwd;
  struct {
    int pol;
    size_t stores, work;
    double t;
    const char *what;
  } row[3] = {{REMAT_KEEP, g->act_bytes, g->work_bytes, 0, ""},
              {REMAT_MIDDLE, g->middle_bytes, g->middle_recompute_bytes, g->middle_recompute,
               "its layernorms and GELU"},
              {REMAT_RECOMPUTE, g->ckpt_bytes, g->recompute_bytes, g->recompute, "its forward"}};
  for (int k = 0; k < 3; k++) {
    char b1[32], b2[32];
    printf("blocks  %-6s stores %s per block and micro-batch; backward workspace %s; ",
           remat_policy_name(row[k].pol), remat_format_bytes(row[k].stores, b1, sizeof b1),
           remat_format_bytes(row[k].work, b2, sizeof b2));
    if (row[k].pol == REMAT_KEEP)
      printf("no rerun\n");
    else
      printf("reruns %s, %.4g GFLOP (%.1f%% of its forward and backward)\n", row[k].what,
             row[k].t, fb > 0 ? 100 * row[k].t / fb : 0.0);
  }
  remat_plan_problem_free(&pb);
}

static void print_plan(const remat_config *cfg, const remat_memplan *mp, size_t planned,
                       const char *source, const remat_tokens *tok, const opts *o) {
  char rec[256], mid[256], b1[32], b2[32], b3[32], b4[32], b5[32];
  int64_t L = cfg->num_layers;
  block_list(mp, REMAT_RECOMPUTE, rec, sizeof rec);
  block_list(mp, REMAT_MIDDLE, mid, sizeof mid);
  print_model(cfg);
  printf("data    %s: %lld tokens; batch %lld x %lld, grad-accum %lld", source,
         (long long)tok->n, (long long)o->B, (long long)o->T, (long long)o->K);
  if (o->replicas > 1)
    printf(" per replica: %lld micro-batches a step on %lld replicas",
           (long long)(o->K * o->replicas), (long long)o->replicas);
  printf("\n");
  printf("policy  %lld of %lld blocks recomputed%s%s%s", (long long)mp->num_recomputed,
         (long long)L, mp->num_recomputed ? " (" : "", rec, mp->num_recomputed ? ")" : "");
  if (mp->num_middle) printf(", %lld middle (%s)", (long long)mp->num_middle, mid);
  printf("\n");
  if (o->plan_only) print_policies(cfg, o);
  printf("memory  planned peak %s (%zu bytes) = arena %s (state %s, activations%s "
         "workspace%s %s) + data %s\n",
         remat_format_bytes(planned, b1, sizeof b1), planned,
         remat_format_bytes(mp->peak_bytes, b2, sizeof b2),
         remat_format_bytes(mp->persistent_bytes, b3, sizeof b3),
         mp->bytes.comm ? "," : " and", mp->bytes.comm ? " and communication" : "",
         remat_format_bytes(mp->peak_bytes - mp->persistent_bytes, b4, sizeof b4),
         remat_format_bytes(planned - mp->peak_bytes, b5, sizeof b5));
}

/* Each replica's arena, from the memory model, and the ZeRO table it
 * follows: Psi parameters, persistent bytes per rank. */
static void print_replicas(const remat_config *cfg, const remat_memplan *mine, const opts *o) {
  remat_error err;
  char b[8][32];
  int64_t D = o->replicas;
  for (int64_t q = 0; q < D; q++) {
    remat_stage st = remat_stage_replica(cfg, mine->policy, D, q, o->zero);
    remat_memplan mp;
    if (remat_memplan_build_stage(&mp, cfg, o->B, o->T, &st, &err)) continue;
    const remat_membuf *m = mp.buf;
    printf("rank %lld arena %s (%zu bytes) = state %s (parameters %s, gradients %s, AdamW %s) "
           "+ activations %s + workspace %s + communication %s\n",
           (long long)q, remat_format_bytes(mp.peak_bytes, b[0], sizeof b[0]), mp.peak_bytes,
           remat_format_bytes(mp.persistent_bytes, b[1], sizeof b[1]),
           remat_format_bytes(m[REMAT_BUF_PARAMS].bytes, b[2], sizeof b[2]),
           remat_format_bytes(m[REMAT_BUF_GRADS].bytes + m[REMAT_BUF_TIED_GRAD].bytes, b[3],
                              sizeof b[3]),
           remat_format_bytes(m[REMAT_BUF_ADAM_M].bytes + m[REMAT_BUF_ADAM_V].bytes, b[4],
                              sizeof b[4]),
           remat_format_bytes(mp.bytes.activations, b[5], sizeof b[5]),
           remat_format_bytes(mp.bytes.workspace, b[6], sizeof b[6]),
           remat_format_bytes(mp.bytes.comm, b[7], sizeof b[7]));
    remat_memplan_free(&mp);
  }
  static const char *const table[4] = {"16 Psi", "8 Psi + 8 Psi/D", "4 Psi + 12 Psi/D",
                                       "16 Psi/D"};
  double psi = (double)remat_param_count(cfg), d = (double)D;
  double ideal[4] = {16 * psi, 8 * psi + 8 * psi / d, 4 * psi + 12 * psi / d, 16 * psi / d};
  printf("zero    stage %d on %lld replicas: persistent %zu bytes per rank; %s = %.0f bytes "
         "(Psi = %zu; the rest is shard padding, alignment and the tied gradient)\n",
         o->zero, (long long)D, mine->persistent_bytes, table[o->zero], ideal[o->zero],
         remat_param_count(cfg));
  uint64_t bytes = remat_replicas_step_bytes(cfg, D, o->zero, o->K);
  printf("comm    %s (%llu bytes) sent per rank per step, from the shapes\n",
         remat_format_bytes((size_t)bytes, b[0], sizeof b[0]), (unsigned long long)bytes);
}

/* The arena is written in full before the first step: a plan larger than
 * this machine's memory would end in the kernel's OOM killer, not an error. */
static int check_fits_machine(size_t planned) {
  char b1[32], b2[32], b3[32];
  const char *what;
  size_t ram = remat_memory_headroom(&what);
  if (ram && planned > ram)
    return cli_fail(CLI_EXIT_RUN,
                    "the plan needs %s but %s leaves %s; lower --batch/--seq or use --mem %s to "
                    "recompute blocks",
                    remat_format_bytes(planned, b1, sizeof b1), what,
                    remat_format_bytes(ram, b2, sizeof b2),
                    remat_format_bytes(ram / 10 * 9, b3, sizeof b3));
  return 0;
}

/* Outputs: find out now, not after hours of training, that the checkpoint
 * cannot be written; and never write over an input. */
static int check_outputs(const opts *o) {
  remat_error err;
  const char *outs[][2] = {{"--save", o->save}, {"--log", o->log}};
  const char *ins[][2] = {{"--model", o->model}, {"--data", o->data}, {"--text", o->text}};
  for (size_t i = 0; i < 2; i++) {
    if (!outs[i][1]) continue;
    for (size_t j = 0; j < 3; j++)
      if (ins[j][1] && remat_same_file(outs[i][1], ins[j][1]))
        return cli_fail(CLI_EXIT_USAGE, "%s %s names the same file as %s; it would overwrite "
                        "an input: choose another path",
                        outs[i][0], outs[i][1], ins[j][0]);
  }
  if (o->save && o->log && remat_same_file(o->save, o->log))
    return cli_fail(CLI_EXIT_USAGE, "--save and --log name the same file '%s'", o->save);
  if (o->save && remat_output_check(o->save, &err))
    return cli_fail(CLI_EXIT_RUN, "--save: %s", err.msg);
  return 0;
}

typedef struct {
  const opts *o;
  const remat_config *cfg;
  remat_trainer *tr;
  FILE *logf;
  remat_peak peak; /* MFU is against peak.flops (raised by any faster step) */
  remat_thread_policy threads;
  int64_t moved_at; /* the last step after which the threads were re-placed */
  size_t planned;
  int tty;
  /* results */
  int64_t steps_done, timed_steps, start_step;
  double first_loss, last_loss, last_val, t_train, t_recompute, wall;
  size_t measured;
  /* a pipeline's ranks (1 in one process): arena planned and measured */
  remat_dist *dist;
  remat_pipeline *pipe;
  remat_replicas *dp;
  remat_grid *grid; /* a grid: pipe and dp are its parts */
  int ranks, rank;
  remat_comm_stats comm; /* rank 0's, of the last step */
  remat_comm_stats rank_comm[REMAT_MAX_STAGES]; /* every replica's, of the last step */
  remat_comm_stats comm_sum[REMAT_MAX_STAGES];  /* and over the timed steps */
  size_t rank_planned[REMAT_MAX_STAGES], rank_measured[REMAT_MAX_STAGES];
  double wait_s;      /* this rank's waiting, over the timed steps */
  double predicted_s; /* the plan's simulated iteration time, in seconds */
  double predicted_bubble;
} run_state;

static int log_step(run_state *r, const remat_step_stats *st, double tps, double mfu,
                    double val_loss) {
  FILE *f = r->logf;
  const remat_memplan *mp = remat_trainer_memplan(r->tr);
  fprintf(f,
          "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.9g, "
          "\"step_s\": %.6f, \"recompute_s\": %.6f, \"tokens_per_s\": %.2f, \"mfu\": %.6f, "
          "\"recomputed_blocks\": %lld, \"middle_blocks\": %lld, \"planned_peak_bytes\": %zu, "
          "\"measured_peak_bytes\": %zu, \"rss_peak_bytes\": %zu",
          (long long)st->step, st->loss, st->lr, st->grad_norm, st->seconds,
          st->recompute_seconds, tps, mfu, (long long)mp->num_recomputed,
          (long long)mp->num_middle, r->planned,
          r->measured, remat_rss_peak_bytes());
  if (!isnan(val_loss)) fprintf(f, ", \"val_loss\": %.6f", val_loss);
  if (r->dp && !r->grid) { /* rank 0's communication in this step, counted and from the shapes */
    const remat_comm_stats *c = &r->comm;
    fprintf(f,
            ", \"replicas\": %d, \"zero\": %d, \"comm_s\": %.6f, \"comm_exposed_s\": %.6f, "
            "\"comm_overlap\": %.4f, \"layer_comm_s\": %.6f, \"layer_comm_exposed_s\": %.6f, "
            "\"layer_comm_overlap\": %.4f, \"comm_bytes\": %llu, \"comm_bytes_theory\": %llu, "
            "\"collectives\": %llu",
            r->ranks, r->o->zero, c->seconds, c->exposed_seconds,
            remat_comm_overlap(c->seconds, c->exposed_seconds), c->layer_seconds,
            c->layer_exposed_seconds, remat_comm_overlap(c->layer_seconds, c->layer_exposed_seconds),
            (unsigned long long)c->bytes_sent,
            (unsigned long long)remat_replicas_step_bytes(r->cfg, r->ranks, r->o->zero, r->o->K),
            (unsigned long long)c->collectives);
    /* every replica's: communication time, exposed, overlapped share */
    for (int a = 0; a < 3; a++) {
      static const char *const key[3] = {"rank_comm_s", "rank_comm_exposed_s",
                                         "rank_comm_overlap"};
      fprintf(f, ", \"%s\": [", key[a]);
      for (int k = 0; k < r->ranks; k++) {
        const remat_comm_stats *q = &r->rank_comm[k];
        double v = a == 0 ? q->seconds : a == 1 ? q->exposed_seconds
                                       : remat_comm_overlap(q->seconds, q->exposed_seconds);
        fprintf(f, a == 2 ? "%s%.4f" : "%s%.6f", k ? ", " : "", v);
      }
      fputc(']', f);
    }
  } else if (r->grid) { /* rank 0's reductions among its stage's replicas */
    const remat_comm_stats *c = &r->comm;
    fprintf(f,
            ", \"stages\": %lld, \"replicas\": %lld, \"zero\": %d, \"comm_s\": %.6f, "
            "\"comm_exposed_s\": %.6f, \"comm_overlap\": %.4f, \"layer_comm_s\": %.6f, "
            "\"layer_comm_exposed_s\": %.6f, \"layer_comm_overlap\": %.4f, \"comm_bytes\": %llu, "
            "\"collectives\": %llu",
            (long long)r->o->stages, (long long)r->o->replicas, r->o->zero, c->seconds,
            c->exposed_seconds, remat_comm_overlap(c->seconds, c->exposed_seconds),
            c->layer_seconds, c->layer_exposed_seconds,
            remat_comm_overlap(c->layer_seconds, c->layer_exposed_seconds),
            (unsigned long long)c->bytes_sent, (unsigned long long)c->collectives);
  }
  for (int a = 0; a < 2; a++) {
    fprintf(f, a ? ", \"rank_measured_peak_bytes\": [" : ", \"rank_planned_peak_bytes\": [");
    for (int k = 0; k < r->ranks; k++)
      fprintf(f, "%s%zu", k ? ", " : "", a ? r->rank_measured[k] : r->rank_planned[k]);
    fputc(']', f);
  }
  fputs("}\n", f);
  if (fflush(f) || ferror(f))
    return cli_fail(CLI_EXIT_RUN, "cannot write log file '%s': %s", r->o->log, strerror(errno));
  return 0;
}

static void show_progress(run_state *r, const remat_step_stats *st, double tps, double mfu,
                          double val_loss) {
  const opts *o = r->o;
  int64_t every = o->steps >= 20 ? o->steps / 20 : 1, step = st->step;
  double avg = r->timed_steps ? r->t_train / (double)r->timed_steps : st->seconds;
  char eta[32];
  fmt_eta(avg * (double)(o->steps - step), eta, sizeof eta);
  if (r->tty) {
    fprintf(stderr, "\rstep %lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s   ",
            (long long)step, (long long)o->steps, st->loss, tps, 100 * mfu, eta);
    if (!isnan(val_loss)) fprintf(stderr, "| held-out %.4f\n", val_loss); /* keep it */
  } else if (step % every == 0 || step == 1 || step == o->steps || !isnan(val_loss)) {
    printf("step %lld/%lld | loss %.4f | %.0f tok/s | MFU %.1f%% | ETA %s", (long long)step,
           (long long)o->steps, st->loss, tps, 100 * mfu, eta);
    if (!isnan(val_loss)) printf(" | held-out %.4f", val_loss);
    printf("\n");
    fflush(stdout);
  }
}

/* Each rank's planned and measured arena, for the log (rank 0 gets them). */
static int gather_ranks(run_state *r, remat_error *err) {
  const remat_memplan *mp = remat_trainer_memplan(r->tr);
  size_t hw = remat_model_arena_high_water(remat_trainer_model(r->tr));
  if (!r->dist) {
    r->rank_planned[0] = mp->peak_bytes;
    r->rank_measured[0] = hw;
    return 0;
  }
  int rc = remat_dist_gather_sizes(r->dist, mp->peak_bytes, r->rank_planned, err);
  if (!rc) rc = remat_dist_gather_sizes(r->dist, hw, r->rank_measured, err);
  return rc;
}

static int write_checkpoint(const opts *o, run_state *r, const remat_config *cfg,
                            remat_error *err);

static int train_loop(run_state *r) {
  const opts *o = r->o;
  remat_error err;
  double tokens_per_step = (double)(o->B * o->T * o->K * o->replicas);
  r->first_loss = r->last_loss = r->last_val = NAN;
  r->start_step = r->steps_done = remat_trainer_steps_done(r->tr);
  double t_start = remat_now();
  while (remat_trainer_steps_done(r->tr) < o->steps) {
    /* every rank stops at the same step */
    int go = !interrupted;
    if (r->dist) remat_dist_all_ok(r->dist, go, &go);
    if (!go) {
      interrupted = 1;
      break;
    }
    remat_step_stats st;
    if (remat_trainer_step(r->tr, &st, &err)) {
      if (r->tty) fputc('\n', stderr);
      if (err.code == REMAT_ENUMERIC && !strstr(err.msg, "overflow"))
        return cli_fail(CLI_EXIT_RUN, "%s; lower --lr or raise --grad-clip", err.msg);
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    }
    r->steps_done = st.step;
    if (remat_threads_adapt(&r->threads)) r->moved_at = st.step;
    r->measured = remat_trainer_measured_peak_bytes(r->tr);
    if (gather_ranks(r, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    if (r->pipe && (st.step > 1 || o->steps == 1)) r->wait_s += remat_pipeline_wait_seconds(r->pipe);
    if (r->dp) {
      r->comm = remat_replicas_comm(r->dp);
      if (remat_replicas_comm_gather(r->dp, r->rank_comm, &err))
        return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
      for (int k = 0; r->rank == 0 && (st.step > 1 || o->steps == 1) && k < o->replicas; k++) {
        remat_comm_stats *sum = &r->comm_sum[k], *q = &r->rank_comm[k];
        sum->seconds += q->seconds;
        sum->exposed_seconds += q->exposed_seconds;
        sum->layer_seconds += q->layer_seconds;
        sum->layer_exposed_seconds += q->layer_exposed_seconds;
      }
    }
    if (isnan(r->first_loss)) r->first_loss = st.loss;
    r->last_loss = st.loss;
    if (st.step > 1 || o->steps == 1) { /* the first step warms caches and threads */
      r->t_train += st.seconds;
      r->t_recompute += st.recompute_seconds;
      r->timed_steps++;
    }
    double tps = tokens_per_step / st.seconds;
    double mfu = remat_peak_mfu(&r->peak, r->cfg, o->T, tps);
    double val_loss = NAN;
    if (o->eval_every > 0 && (st.step % o->eval_every == 0 || st.step == o->steps)) {
      if (remat_trainer_evaluate(r->tr, &val_loss, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
      r->last_val = val_loss;
    }
    if (r->logf && log_step(r, &st, tps, mfu, val_loss)) return CLI_EXIT_RUN;
    if (!o->quiet) show_progress(r, &st, tps, mfu, val_loss);
    if (o->ckpt_dir && (st.step % o->ckpt_every == 0 || st.step == o->steps) &&
        write_checkpoint(o, r, r->cfg, &err))
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  }
  /* stopped by a signal: keep what was done */
  if (interrupted && o->ckpt_dir && r->steps_done > 0 && r->steps_done % o->ckpt_every != 0 &&
      write_checkpoint(o, r, r->cfg, &err))
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  if (r->tty) fputc('\n', stderr);
  r->wall = remat_now() - t_start;
  return 0;
}

/* Rank 0's bytes, every replica's communication time over the timed steps
 * (on a grid, stage 0's): how much of it was exposed (spent inside MPI
 * calls) and overlapped. */
static void print_comm(const run_state *r, char *b, size_t n) {
  const remat_comm_stats *c = &r->comm_sum[0];
  double steps = r->timed_steps ? (double)r->timed_steps : 1.0;
  printf("comm    rank 0 sent %s (%llu bytes) a step in %llu collectives; %.2f ms of "
         "communication a step, %.2f ms exposed (%.1f%% of its step time)\n",
         remat_format_bytes((size_t)r->comm.bytes_sent, b, n),
         (unsigned long long)r->comm.bytes_sent, (unsigned long long)r->comm.collectives,
         1e3 * c->seconds / steps, 1e3 * c->exposed_seconds / steps,
         r->t_train > 0 ? 100 * c->exposed_seconds / r->t_train : 0.0);
  printf("overlap communication overlapped with computation, %s: all",
         r->grid ? "stage 0's replicas" : "rank by rank");
  for (int k = 0; k < r->o->replicas; k++)
    printf(" %.0f%%", 100 * remat_comm_overlap(r->comm_sum[k].seconds,
                                                r->comm_sum[k].exposed_seconds));
  printf("; the layers' reduce-scatters and gathers");
  for (int k = 0; k < r->o->replicas; k++)
    printf(" %.0f%%", 100 * remat_comm_overlap(r->comm_sum[k].layer_seconds,
                                                r->comm_sum[k].layer_exposed_seconds));
  printf("\n");
}

static void print_summary(run_state *r) {
  const opts *o = r->o;
  char b1[32];
  double tokens_per_step = (double)(o->B * o->T * o->K * o->replicas);
  int64_t ran = r->steps_done - r->start_step;
  if (interrupted) printf("interrupted after step %lld\n", (long long)r->steps_done);
  if (ran == 0) return;
  double tps = r->timed_steps ? tokens_per_step * (double)r->timed_steps / r->t_train
                              : tokens_per_step * (double)ran / r->wall;
  if (r->start_step)
    printf("done    steps %lld to %lld in %.1f s; loss %.4f -> %.4f", (long long)r->start_step + 1,
           (long long)r->steps_done, r->wall, r->first_loss, r->last_loss);
  else
    printf("done    %lld steps in %.1f s; loss %.4f -> %.4f", (long long)ran, r->wall,
           r->first_loss, r->last_loss);
  if (!isnan(r->last_val)) printf("; held-out loss %.4f", r->last_val);
  printf("\n");
  remat_peak *pk = &r->peak;
  double mfu = remat_peak_mfu(pk, r->cfg, o->T, tps);
  printf("speed   %.0f tokens/s, MFU %.1f%% of %.1f GFLOP/s; recompute %.1f%% of step time\n",
         tps, 100 * mfu, pk->flops / 1e9,
         r->t_train > 0 ? 100 * r->t_recompute / r->t_train : 0.0);
  if (pk->trials && !pk->raised) /* measured: what the trials leave open */
    printf("mfu     %.1f%% +-%.1f against the median of %d trials (spread +-%.1f%%); %.1f%% against "
           "the best trial, %.1f GFLOP/s\n",
           100 * mfu, 100 * mfu * pk->spread, pk->trials, 100 * pk->spread,
           100 * mfu * pk->flops / pk->best, pk->best / 1e9);
  else if (pk->trials)
    printf("mfu     %.1f%% against the fastest step's own rate, %.1f GFLOP/s, which beat the "
           "median of the %d trials (%.1f GFLOP/s; best %.1f)\n",
           100 * mfu, pk->flops / 1e9, pk->trials, pk->median / 1e9, pk->best / 1e9);
  else if (pk->raised)
    printf("mfu     %.1f%% against the fastest step, which beat the given peak\n", 100 * mfu);
  if (r->threads.moves)
    printf("threads re-placed %d time%s as other processes' load came and went (last after step "
           "%lld: %s, %.2f CPUs of other work)\n",
           r->threads.moves, r->threads.moves > 1 ? "s" : "", (long long)r->moved_at,
           r->threads.pinned ? "pinned" : "unpinned", r->threads.others);
  printf("memory  planned peak %zu bytes, measured peak %zu bytes (%+.3f%%); process RSS "
         "peak %s\n",
         r->planned, r->measured,
         100.0 * ((double)r->measured - (double)r->planned) / (double)r->planned,
         remat_format_bytes(remat_rss_peak_bytes(), b1, sizeof b1));
  if (r->ranks > 1) {
    printf("ranks   arena planned = measured on every rank:");
    int same = 1;
    for (int k = 0; k < r->ranks; k++) {
      printf(" %zu%s", r->rank_measured[k], r->rank_measured[k] == r->rank_planned[k] ? "" : "(!)");
      same = same && r->rank_measured[k] == r->rank_planned[k];
    }
    printf("%s\n", same ? "" : "  (! marks a rank whose measured arena differs from its plan)");
    double step = r->timed_steps ? r->t_train / (double)r->timed_steps : r->wall;
    char b2[32];
    if (r->pipe)
      printf("time    iteration %.3f s measured, %.3f s predicted by the plan's schedule "
             "simulation (bubble %.1f%%); rank 0 waited %.1f%% of its steps\n",
             step, r->predicted_s, 100 * r->predicted_bubble,
             r->t_train > 0 ? 100 * r->wait_s / r->t_train : 0.0);
    if (r->dp) print_comm(r, b2, sizeof b2);
  }
}

/* Measured before the arena exists, so that filling it cannot disturb the
 * measurement. The threads line goes with it: MFU depends on both. */
static int peak_rate(const opts *o, run_state *r) {
  char line[256];
  printf("threads %s\n", remat_threads_describe(&r->threads, line, sizeof line));
  if (o->peak_gflops > 0) {
    printf("peak    %.1f GFLOP/s given\n", o->peak_gflops);
    r->peak = (remat_peak){.flops = o->peak_gflops * 1e9};
    return 0;
  }
  remat_error err;
  if (remat_measure_peak(&r->peak, r->cfg, o->B, o->T, 0.5, &err))
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  const remat_peak *p = &r->peak;
  printf("peak    sgemm %.1f GFLOP/s measured on %d threads (MFU is against this)\n",
         p->flops / 1e9, omp_get_max_threads());
  printf("peak    the median of %d trials of the model's %d matrix-product shapes, spread "
         "+-%.1f%%; best %.1f, slowest %.1f, %.2f s\n",
         p->trials, p->shapes, 100 * p->spread, p->best / 1e9, p->low / 1e9, p->seconds);
  return 0;
}

/* ----------------------------------------------------------- pipeline */

/* The pipeline's placement, chosen the way the flags say: --layers by
 * hand (with --ckpt-layers/--ckpt-ratio), --plan from a plan file, else the
 * planner's exact optimum under --mem (or, without it, memory ignored). The
 * plan's figures come from the memory model, which the stages' arenas follow. */
typedef struct {
  remat_plan_problem pb;
  remat_plan plan;
  int have_pb, have_plan;
  remat_split split;
  uint8_t *recompute; /* (L + 2) remat_policy of each layer, in the planner's numbering */
} placement;

static void placement_free(placement *pl) {
  if (pl->have_plan) remat_plan_free(&pl->plan);
  if (pl->have_pb) remat_plan_problem_free(&pl->pb);
  free(pl->recompute);
}

/* Budgets from --mem: one for all stages or one per stage. */
static int stage_budgets(const opts *o, remat_plan_problem *pb) {
  remat_error err;
  if (!o->mem) {
    remat_plan_problem_set_memory(pb, (size_t)1 << 60);
    return 0;
  }
  const char *p = o->mem;
  int64_t n = 0;
  char item[64];
  size_t b[REMAT_MAX_STAGES];
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len >= sizeof item || n == REMAT_MAX_STAGES)
      return cli_fail(CLI_EXIT_USAGE, "--mem: give one size, or one per stage separated by commas");
    memcpy(item, p, len);
    item[len] = 0;
    if (remat_parse_size(item, &b[n], &err)) return cli_fail(CLI_EXIT_USAGE, "--mem: %s", err.msg);
    n++;
    p += len + (p[len] == ',');
  }
  if (n == 1) {
    remat_plan_problem_set_memory(pb, b[0]);
  } else if (n == pb->stages) {
    for (int64_t s = 0; s < n; s++) pb->memory[s] = b[s];
    pb->uniform_memory = 0;
  } else {
    return cli_fail(CLI_EXIT_USAGE, "--mem gives %lld budgets for %lld stages; give one for all or "
                    "one per stage", (long long)n, (long long)pb->stages);
  }
  return 0;
}

/* --layers 1,2,2,3: blocks per stage. */
static int layers_by_hand(const opts *o, const remat_config *cfg, int64_t *lps) {
  int64_t P = o->stages, L = cfg->num_layers, k = 0, sum = 0;
  const char *p = o->layers;
  while (*p && k < P) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0) break;
    lps[k++] = v;
    sum += v;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end) break;
  }
  if (k != P || *p)
    return cli_fail(CLI_EXIT_USAGE, "--layers expects %lld block counts like 2,2 (one per stage); "
                    "got '%s'", (long long)P, o->layers);
  if (sum != L)
    return cli_fail(CLI_EXIT_USAGE, "--layers %s places %lld blocks but the model has %lld",
                    o->layers, (long long)sum, (long long)L);
  /* planner numbering: the embedding joins stage 0, the head the last */
  lps[0] += 1;
  lps[P - 1] += 1;
  return 0;
}

static int place_pipeline(const opts *o, const remat_config *cfg, const uint8_t *block_policy,
                          placement *pl) {
  remat_error err;
  int64_t P = o->stages, L = cfg->num_layers, lps[REMAT_MAX_STAGES];
  if (P > L + 2)
    return cli_fail(CLI_EXIT_USAGE, "--stages %lld is more stages than the model has layers "
                    "(%lld blocks, the embedding and the head)", (long long)P, (long long)L);
  if (remat_plan_problem_from_replicas(&pl->pb, cfg, o->B, o->T, P, o->K, o->replicas, o->zero,
                                       (size_t)1 << 60, &err))
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  pl->have_pb = 1;
  pl->pb.schedule = o->schedule;
  int rc = stage_budgets(o, &pl->pb);
  if (rc) return rc;
  if (!(pl->recompute = calloc((size_t)L + 2, 1))) return cli_fail(CLI_EXIT_RUN, "out of memory");
  if (o->plan) {
    remat_plan_layout lo;
    if (remat_plan_layout_load(&lo, o->plan, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    rc = 0;
    if (strcmp(lo.source, pl->pb.source) != 0)
      rc = cli_fail(CLI_EXIT_USAGE, "--plan %s was made for '%s', not for this job ('%s'); make it "
                    "with remat plan --config and the same --batch and --seq", o->plan,
                    lo.source, pl->pb.source);
    else if (lo.stages != P || lo.microbatches != o->K || lo.schedule != o->schedule)
      rc = cli_fail(CLI_EXIT_USAGE, "--plan %s is for %lld stages, %lld micro-batches and %s; this "
                    "job has --stages %lld, --grad-accum %lld and --schedule %s", o->plan,
                    (long long)lo.stages, (long long)lo.microbatches,
                    remat_plan_schedule_name(lo.schedule), (long long)P, (long long)o->K,
                    remat_plan_schedule_name(o->schedule));
    if (!rc) {
      for (int64_t s = 0; s < P; s++) {
        lps[s] = lo.layers_per_stage[s];
        if (!o->mem) pl->pb.memory[s] = lo.budget_bytes[s];
      }
      if (!o->mem) pl->pb.uniform_memory = 0;
      memcpy(pl->recompute, lo.recompute, (size_t)L + 2);
    }
    remat_plan_layout_free(&lo);
    if (rc) return rc;
  } else if (o->layers) {
    if ((rc = layers_by_hand(o, cfg, lps))) return rc;
    for (int64_t l = 0; l < L; l++) pl->recompute[l + 1] = block_policy[l];
  } else {
    rc = remat_plan_solve(&pl->pb, &pl->plan, &err);
    if (rc && rc != REMAT_EINFEASIBLE) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    pl->have_plan = 1;
    if (rc == REMAT_EINFEASIBLE)
      return cli_fail(CLI_EXIT_RUN, "--mem %s: %s", o->mem, err.msg);
    for (int64_t s = 0; s < P; s++) lps[s] = pl->plan.stages[s].num_layers;
    memcpy(pl->recompute, pl->plan.policy, (size_t)L + 2);
  }
  if (!pl->have_plan) {
    for (int64_t s = 0; s < P; s++)
      if (lps[s] < 1)
        return cli_fail(CLI_EXIT_USAGE, "stage %lld would hold no layer", (long long)s);
    if (remat_plan_evaluate(&pl->pb, lps, pl->recompute, &pl->plan, &err))
      return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    pl->have_plan = 1;
    for (int64_t s = 0; s < P; s++)
      if (pl->plan.stages[s].memory_bytes > pl->plan.stages[s].budget_bytes) {
        char b1[32], b2[32];
        return cli_fail(CLI_EXIT_RUN, "stage %lld needs %s but its budget is %s: the placement "
                        "does not fit; recompute more blocks or give it fewer",
                        (long long)s,
                        remat_format_bytes(pl->plan.stages[s].memory_bytes, b1, sizeof b1),
                        remat_format_bytes(pl->plan.stages[s].budget_bytes, b2, sizeof b2));
      }
  }
  /* stages in blocks */
  remat_split *sp = &pl->split;
  memset(sp, 0, sizeof *sp);
  sp->stages = P;
  sp->schedule = o->schedule;
  sp->microbatches = o->K;
  int64_t first = 0;
  for (int64_t s = 0; s < P; s++) {
    int64_t lo = first, hi = first + lps[s];
    int64_t b0 = lo < 1 ? 1 : lo, b1 = hi > L + 1 ? L + 1 : hi;
    sp->first_block[s] = b0 - 1;
    sp->num_blocks[s] = b1 > b0 ? b1 - b0 : 0;
    first = hi;
  }
  return 0;
}

/* Stage s of the placement, as replica r when the job is a grid; pol
 * (room for its blocks) receives its policy. */
static remat_stage grid_stage(const opts *o, const placement *pl, int64_t s, int64_t r,
                              uint8_t *pol) {
  for (int64_t i = 0; i < pl->split.num_blocks[s]; i++)
    pol[i] = pl->recompute[pl->split.first_block[s] + i + 1];
  remat_stage st = remat_split_stage(&pl->split, s, pol);
  if (o->replicas > 1) {
    st.replicas = o->replicas;
    st.replica = r;
    st.zero = o->zero;
    st.accumulate = 1;
  }
  return st;
}

/* Each rank's arena on a grid (world rank s D + r), from the memory model. */
static void print_grid(const remat_config *cfg, const placement *pl, const opts *o) {
  remat_error err;
  char b[8][32];
  int64_t D = o->replicas;
  for (int64_t k = 0; k < pl->split.stages * D; k++) {
    uint8_t pol[4096];
    remat_stage st = grid_stage(o, pl, k / D, k % D, pol);
    remat_memplan mp;
    if (remat_memplan_build_stage(&mp, cfg, o->B, o->T, &st, &err)) continue;
    const remat_membuf *m = mp.buf;
    printf("rank %lld stage %lld replica %lld arena %s (%zu bytes) = state %s (parameters %s, "
           "gradients %s, AdamW %s) + %lld in flight x %s + workspace %s + communication %s; "
           "blocks %lld..%lld%s%s\n",
           (long long)k, (long long)(k / D), (long long)(k % D),
           remat_format_bytes(mp.peak_bytes, b[0], sizeof b[0]), mp.peak_bytes,
           remat_format_bytes(mp.persistent_bytes, b[1], sizeof b[1]),
           remat_format_bytes(m[REMAT_BUF_PARAMS].bytes, b[2], sizeof b[2]),
           remat_format_bytes(m[REMAT_BUF_GRADS].bytes + m[REMAT_BUF_TIED_GRAD].bytes, b[3],
                              sizeof b[3]),
           remat_format_bytes(m[REMAT_BUF_ADAM_M].bytes + m[REMAT_BUF_ADAM_V].bytes, b[4],
                              sizeof b[4]),
           (long long)st.inflight, remat_format_bytes(mp.slot_bytes, b[5], sizeof b[5]),
           remat_format_bytes(mp.bytes.workspace, b[6], sizeof b[6]),
           remat_format_bytes(mp.bytes.comm, b[7], sizeof b[7]), (long long)st.first_block,
           (long long)(st.first_block + st.num_blocks - 1), st.has_embedding ? ", embedding" : "",
           st.has_head ? ", head" : "");
    remat_memplan_free(&mp);
  }
}

static void print_pipeline(const remat_config *cfg, const placement *pl, const char *source,
                           const remat_tokens *tok, const opts *o) {
  remat_error err;
  char *text = NULL;
  print_model(cfg);
  printf("data    %s: %lld tokens; batch %lld x %lld, %lld micro-batches per step", source,
         (long long)tok->n, (long long)o->B, (long long)o->T, (long long)o->K);
  if (o->replicas > 1)
    printf(" per pipeline: %lld micro-batches a step on %lld pipelines",
           (long long)(o->K * o->replicas), (long long)o->replicas);
  printf("\n");
  if (remat_plan_format(&pl->pb, &pl->plan, REMAT_PLAN_FORMAT_TABLE, &text, &err) == 0) {
    fputs(text, stdout);
    remat_plan_text_free(text);
  }
  if (o->replicas > 1) {
    print_grid(cfg, pl, o);
    return;
  }
  /* each stage's arena, from the same memory model the table used */
  for (int64_t s = 0; s < pl->split.stages; s++) {
    uint8_t pol[4096];
    remat_stage st = grid_stage(o, pl, s, 0, pol);
    remat_memplan mp;
    char b1[32], b2[32], b3[32], b4[32];
    if (remat_memplan_build_stage(&mp, cfg, o->B, o->T, &st, &err)) continue;
    printf("stage %lld arena %s (%zu bytes) = state %s + %lld in flight x %s + workspace %s; "
           "blocks %lld..%lld%s%s\n",
           (long long)s, remat_format_bytes(mp.peak_bytes, b1, sizeof b1), mp.peak_bytes,
           remat_format_bytes(mp.bytes.state, b2, sizeof b2), (long long)st.inflight,
           remat_format_bytes(mp.slot_bytes, b3, sizeof b3),
           remat_format_bytes(mp.bytes.workspace, b4, sizeof b4), (long long)st.first_block,
           (long long)(st.first_block + st.num_blocks - 1), st.has_embedding ? ", embedding" : "",
           st.has_head ? ", head" : "");
    remat_memplan_free(&mp);
  }
}

/* The plan's predicted iteration in seconds: its FLOP-based stage times at
 * the measured sgemm rate, through the schedule's simulation; and its
 * bubble, the share of stage-time the schedule leaves idle. */
static void predict(run_state *r, const placement *pl) {
  const remat_plan *p = &pl->plan;
  double busy = 0;
  for (int64_t s = 0; s < p->num_stages; s++) busy += p->stages[s].time * (double)p->microbatches;
  double sim = p->simulated_time > 0 ? p->simulated_time : p->iteration_time;
  r->predicted_s = sim * 1e9 / (r->peak.flops / (double)r->ranks); /* one rank's rate */
  r->predicted_bubble = sim > 0 ? 1 - busy / ((double)p->num_stages * sim) : 0;
}

/* Loads --model's weights: the whole model, or this stage's slices of it. */
static int load_weights(remat_checkpoint_reader *rd, const remat_config *cfg, remat_model *m,
                        remat_error *err) {
  const remat_stage *st = remat_model_stage(m);
  int sharded = st->replicas > 1 && st->zero == 3;
  if (st->has_embedding && st->has_head && st->num_blocks == cfg->num_layers && !sharded) {
    int rc = remat_checkpoint_read_params(rd, cfg, remat_model_params(m), err);
    return rc ? rc : remat_params_overflow(cfg, remat_model_params(m), err);
  }
  float *full = malloc(remat_param_count(cfg) * sizeof(float));
  if (!full) return REMAT_ENOMEM;
  int rc = remat_checkpoint_read_params(rd, cfg, full, err);
  if (!rc) rc = remat_params_overflow(cfg, full, err);
  if (!rc) remat_stage_params_from_full(cfg, st, full, remat_model_params(m));
  free(full);
  remat_heap_reset_peak();
  return rc;
}

/* One llm.c checkpoint of the whole model at path, written by rank 0. */
static int save_weights(const char *path, const remat_config *cfg, run_state *r,
                        remat_error *err) {
  remat_model *m = remat_trainer_model(r->tr);
  if (!r->pipe && !r->dp) return remat_checkpoint_save(path, cfg, remat_model_params(m), err);
  float *full = r->rank == 0 ? malloc(remat_param_count(cfg) * sizeof(float)) : NULL;
  if (r->rank == 0 && !full) {
    snprintf(err->msg, sizeof err->msg, "out of memory gathering the model to save it");
    return REMAT_ENOMEM;
  }
  int rc = r->grid   ? remat_grid_gather_params(r->grid, full, err)
           : r->pipe ? remat_pipeline_gather_params(r->pipe, full, err)
                     : remat_replicas_gather_params(r->dp, full, err);
  if (!rc && r->rank == 0) rc = remat_checkpoint_save(path, cfg, full, err);
  free(full);
  return rc;
}

static int set_err(remat_error *err, const char *msg) {
  snprintf(err->msg, sizeof err->msg, "%s", msg);
  return err->code = REMAT_EIO;
}

/* A checkpoint directory for the step just taken: the weights (rank 0), each
 * rank's state, and DONE last, once every rank has written its part. */
static int write_checkpoint(const opts *o, run_state *r, const remat_config *cfg,
                            remat_error *err) {
  int64_t step = remat_trainer_steps_done(r->tr);
  char path[4096], name[64];
  int rc = r->rank == 0 ? remat_checkpoint_dir_make(o->ckpt_dir, step, err) : 0;
  int ok = rc == 0;
  if (r->dist) remat_dist_all_ok(r->dist, ok, &ok);
  if (!ok) return rc ? rc : set_err(err, "another rank could not write the checkpoint");
  if (remat_checkpoint_dir_path(path, sizeof path, o->ckpt_dir, step, "model.bin"))
    return set_err(err, "--checkpoint-dir is too long a path");
  rc = save_weights(path, cfg, r, err);
  if (r->ranks > 1) snprintf(name, sizeof name, "state_rank_%d.bin", r->rank);
  else snprintf(name, sizeof name, "state.bin");
  remat_checkpoint_dir_path(path, sizeof path, o->ckpt_dir, step, name);
  if (!rc) rc = remat_trainer_save_state(r->tr, path, r->rank, r->ranks, err);
  ok = rc == 0;
  if (r->dist) remat_dist_all_ok(r->dist, ok, &ok);
  if (!ok) return rc ? rc : set_err(err, "another rank could not write the checkpoint");
  remat_checkpoint_dir_path(path, sizeof path, o->ckpt_dir, step, "DONE");
  if (r->rank == 0 && (rc = remat_write_marker(path, err))) return rc;
  /* Saving held a few file names for a moment: not part of a training
   * step, so not of its measured peak. */
  remat_heap_reset_peak();
  if (!o->quiet) printf("checkpoint %s/step_%08lld\n", o->ckpt_dir, (long long)step);
  return 0;
}

/* --resume DIR: the newest complete checkpoint under DIR, or DIR itself
 * when it is one (it holds DONE); its weights become --model. */
static int find_resume(opts *o) {
  remat_error err;
  char done[4096];
  struct stat st;
  snprintf(done, sizeof done, "%s/DONE", o->resume);
  if (stat(done, &st) == 0) {
    const char *base = strrchr(o->resume, '/');
    base = base ? base + 1 : o->resume;
    long long s;
    if (sscanf(base, "step_%lld", &s) != 1)
      return cli_fail(CLI_EXIT_USAGE, "--resume %s: a checkpoint directory is named step_N",
                      o->resume);
    o->resume_step = s;
    snprintf(o->resume_model, sizeof o->resume_model, "%s/model.bin", o->resume);
    o->ckpt_step_dir = o->resume;
  } else {
    if (remat_checkpoint_dir_latest(o->resume, &o->resume_step, &err))
      return cli_fail(CLI_EXIT_RUN, "--resume: %s", err.msg);
    remat_checkpoint_dir_path(o->resume_model, sizeof o->resume_model, o->resume,
                              o->resume_step, "model.bin");
    remat_checkpoint_dir_path(o->resume_dir, sizeof o->resume_dir, o->resume, o->resume_step,
                              NULL);
    o->ckpt_step_dir = o->resume_dir;
  }
  o->model = o->resume_model;
  return 0;
}

static void state_path(const opts *o, const run_state *r, char *path, size_t cap) {
  if (r->ranks > 1)
    snprintf(path, cap, "%s/state_rank_%d.bin", o->ckpt_step_dir, r->rank);
  else
    snprintf(path, cap, "%s/state.bin", o->ckpt_step_dir);
}

static int load_resume_state(const opts *o, run_state *r, remat_error *err) {
  char path[4096];
  state_path(o, r, path, sizeof path);
  int rc = remat_trainer_load_state(r->tr, path, r->rank, r->ranks, err);
  if (!rc && !o->quiet)
    printf("resume  %s at step %lld\n", o->ckpt_step_dir, (long long)o->resume_step);
  return rc;
}

/* Every rank of a pipeline must run the same command. */
static uint64_t argv_digest(int argc, char **argv) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < argc; i++)
    for (const char *p = argv[i];; p++) {
      h = (h ^ (unsigned char)*p) * 1099511628211ull;
      if (!*p) break;
    }
  return h;
}

/* Setup failed on some rank: the lowest failing rank's message is the one
 * rank 0 shows, once. */
static int setup_status(run_state *r, int rc) {
  if (!r->dist) return rc;
  remat_error e = {0};
  e.code = rc;
  snprintf(e.msg, sizeof e.msg, "%.*s", (int)sizeof e.msg - 1, cli_last_message);
  int who = -1;
  int first = remat_dist_first_error(r->dist, rc, &e, &who);
  if (first && who > 0 && r->rank == 0) {
    cli_silent = 0;
    cli_fail(first, "rank %d: %s", who, e.msg);
  }
  return first;
}

static int train_job(opts *o, run_state *r) {
  remat_error err = {0};
  int rc;
  remat_config cfg, want;
  remat_checkpoint_reader rd = {0};
  remat_tokens tok = {0};
  remat_trainer *tr = NULL;
  uint8_t *policy = NULL;
  placement pl = {0};
  const char *source = "";
  remat_train_opts to;
  int have_want;
  r->cfg = &cfg;
  train_opts_from(o, &to);

  if (remat_blas_check(&err)) rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  else rc = o->resume ? find_resume(o) : 0;
  if (!rc) rc = check_outputs(o);
  if (!rc) rc = load_shape(o, &rd, &cfg, &want, &have_want);
  if (!rc) {
    if (o->T == 0) o->T = cfg.max_seq_len < 64 ? cfg.max_seq_len : 64;
    to.T = o->T;
    if (o->T > cfg.max_seq_len)
      rc = cli_fail(CLI_EXIT_USAGE, "--seq %lld exceeds the model's maximum sequence length %lld",
                    (long long)o->T, (long long)cfg.max_seq_len);
  }
  if (!rc) rc = load_tokens(o, &tok, &source);
  if (!rc && !(policy = malloc((size_t)cfg.num_layers))) rc = cli_fail(CLI_EXIT_RUN, "out of memory");
  if (!rc && !(o->stages > 1 && (o->mem || o->plan))) rc = choose_policy(o, &cfg, &tok, &to, policy);
  if (!rc && o->stages > 1) rc = place_pipeline(o, &cfg, policy, &pl);

  /* The plan: every buffer of a step, before anything large is allocated. */
  if (!rc) {
    if (o->stages > 1 && o->replicas > 1) { /* world rank s D + r: stage s, replica r */
      remat_stage st = grid_stage(o, &pl, remat_dist_stage(r->dist), remat_dist_replica(r->dist),
                                  policy);
      if (remat_trainer_create_stage(&tr, &cfg, &st, &tok, &to, &err) ||
          remat_grid_create(&r->grid, r->dist, tr, &pl.split, &err))
        rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
      if (!rc) {
        r->pipe = remat_grid_pipeline(r->grid);
        r->dp = remat_grid_replicas(r->grid);
        if (o->trace && remat_pipeline_trace_start(r->pipe, o->steps, &err))
          rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
      }
    } else if (o->stages > 1) {
      int64_t s = r->rank;
      remat_stage st = grid_stage(o, &pl, s, 0, policy);
      if (remat_trainer_create_stage(&tr, &cfg, &st, &tok, &to, &err) ||
          remat_pipeline_create(&r->pipe, r->dist, tr, &pl.split, &err) ||
          (o->trace && remat_pipeline_trace_start(r->pipe, o->steps, &err)))
        rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    } else if (o->replicas > 1) {
      remat_stage st = remat_stage_replica(&cfg, policy, o->replicas, r->rank, o->zero);
      if (remat_trainer_create_stage(&tr, &cfg, &st, &tok, &to, &err) ||
          remat_replicas_create(&r->dp, r->dist, tr, &err) ||
          (o->trace && remat_replicas_trace_start(r->dp, o->steps, &err)))
        rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    } else if (remat_trainer_create(&tr, &cfg, policy, &tok, &to, &err)) {
      rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    }
  }
  /* a resume with other settings is refused before anything large exists */
  if (!rc && o->resume) {
    char path[4096];
    state_path(o, r, path, sizeof path);
    if (remat_trainer_check_state(tr, path, r->rank, r->ranks, &err))
      rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  }
  if ((rc = setup_status(r, rc))) goto out;
  r->planned = remat_trainer_planned_bytes(tr);
  /* --mem's search saw a one-process trainer; a replica's runtime holds a
   * few bytes more outside the arena */
  size_t budget;
  if (r->dp && !r->grid && o->mem && !remat_parse_size(o->mem, &budget, &err) &&
      r->planned > budget) {
    char b1[32], b2[32];
    rc = cli_fail(CLI_EXIT_RUN, "--mem %s does not fit a replica: it needs %s (%zu bytes); raise "
                  "--mem", remat_format_bytes(budget, b1, sizeof b1),
                  remat_format_bytes(r->planned, b2, sizeof b2), r->planned);
  }
  if ((rc = setup_status(r, rc))) goto out;
  if (o->stages > 1)
    print_pipeline(&cfg, &pl, source, &tok, o);
  else
    print_plan(&cfg, remat_trainer_memplan(tr), r->planned, source, &tok, o);
  if (o->replicas > 1 && o->stages == 1) print_replicas(&cfg, remat_trainer_memplan(tr), o);
  if (cli_stdout_ok()) {
    rc = CLI_EXIT_RUN;
    goto out;
  }
  if (o->plan_only) goto out;
  /* the sgemm measurement has set up OpenBLAS's and OpenMP's own buffers,
   * so the headroom left is what the arena can have */
  if ((rc = peak_rate(o, r))) goto out;
  /* MFU of a pipeline is against every rank's peak: P ranks do the work */
  if (r->ranks > 1) {
    r->peak.flops *= r->ranks, r->peak.median *= r->ranks, r->peak.low *= r->ranks;
    printf("peak    %d ranks: MFU is against %d times that\n", r->ranks, r->ranks);
  }
  fflush(stdout);
  rc = check_fits_machine(r->planned);
  if (!rc && remat_trainer_train_windows(tr) < o->B)
    fprintf(stderr,
            "remat train: warning: %s has only %lld windows of %lld tokens for a batch of %lld "
            "rows; rows repeat within a batch\n",
            source, (long long)remat_trainer_train_windows(tr), (long long)o->T + 1,
            (long long)o->B);
  if (!rc && remat_trainer_allocate(tr, &err)) rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  if (!rc && remat_trainer_planned_bytes(tr) != r->planned) {
    cli_fail(CLI_EXIT_RUN, "internal error: the allocated plan differs from the printed one");
    abort();
  }
  if (!rc) {
    remat_model *m = remat_trainer_model(tr);
    r->tr = tr;
    if (!o->model) remat_model_init_weights(m, o->seed);
    else if (load_weights(&rd, &cfg, m, &err)) rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    if (!rc && o->resume && load_resume_state(o, r, &err))
      rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  }
  if (!rc && o->log && r->rank == 0 && !(r->logf = fopen(o->log, "w")))
    rc = cli_fail(CLI_EXIT_RUN, "cannot write log file '%s': %s", o->log, strerror(errno));
  if ((rc = setup_status(r, rc))) goto out;
  if (r->pipe) predict(r, &pl);

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  r->tr = tr;
  r->tty = isatty(STDERR_FILENO) && !o->quiet;
  if ((rc = train_loop(r))) {
    if (r->dist) remat_dist_finalize(r->dist, rc); /* the other ranks wait on this one */
    goto out;
  }
  if (r->rank == 0) print_summary(r);
  if (o->save) {
    if (save_weights(o->save, &cfg, r, &err)) {
      rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
      goto out;
    }
    printf("saved   %s\n", o->save);
  }
  if (o->trace && (r->pipe ? remat_pipeline_trace_write(r->pipe, o->trace, &err)
                           : remat_replicas_trace_write(r->dp, o->trace, &err))) {
    rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    goto out;
  }
  if (o->trace) printf("trace   %s (open it in Perfetto or chrome://tracing)\n", o->trace);
  if (r->logf) {
    FILE *f = r->logf;
    r->logf = NULL;
    if (fclose(f)) {
      rc = cli_fail(CLI_EXIT_RUN, "cannot write log file '%s': %s", o->log, strerror(errno));
      goto out;
    }
  }
  rc = cli_stdout_ok() ? CLI_EXIT_RUN : interrupted ? 130 : 0;
out:
  if (r->logf) fclose(r->logf);
  if (r->grid) {
    remat_grid_destroy(r->grid);
  } else {
    remat_pipeline_destroy(r->pipe);
    remat_replicas_destroy(r->dp);
  }
  remat_trainer_destroy(tr);
  placement_free(&pl);
  remat_checkpoint_close(&rd);
  free(policy);
  remat_tokens_free(&tok);
  return rc;
}

int remat_cmd_train(int argc, char **argv) {
  cli_name = "remat train";
  opts o;
  if (parse_args(argc, argv, &o)) return CLI_EXIT_USAGE;
  remat_error err = {0};
  run_state r = {.o = &o, .ranks = 1};
  remat_threads_setup(&r.threads, o.threads);
  int rc;

  /* Ranks: a pipeline's stages or the replicas are the job's MPI ranks. */
  if (o.stages > 1 || o.replicas > 1 || remat_dist_launched()) {
    if (remat_dist_init(&r.dist, NULL, NULL, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    r.rank = remat_dist_rank(r.dist);
    r.ranks = remat_dist_size(r.dist);
    if (r.rank != 0) { /* one rank speaks */
      o.quiet = 1;
      if (!freopen("/dev/null", "w", stdout)) return CLI_EXIT_RUN;
      cli_silent = 1;
    }
    rc = 0;
    if (o.replicas > 1 && o.stages > 1 && r.ranks != o.replicas * o.stages)
      rc = cli_fail(CLI_EXIT_USAGE, "started on %d ranks but --stages %lld x --data-parallel %lld "
                    "is a grid of %lld ranks: start exactly P x D ranks, mpirun -np %lld remat "
                    "train --stages %lld --data-parallel %lld ...", r.ranks, (long long)o.stages,
                    (long long)o.replicas, (long long)(o.stages * o.replicas),
                    (long long)(o.stages * o.replicas), (long long)o.stages,
                    (long long)o.replicas);
    else if (o.replicas > 1 && o.stages == 1 && r.ranks != o.replicas)
      rc = cli_fail(CLI_EXIT_USAGE, "started on %d ranks but --data-parallel is %lld: start "
                    "exactly D ranks, mpirun -np D remat train --data-parallel D ...", r.ranks,
                    (long long)o.replicas);
    else if (o.replicas == 1 && r.ranks != o.stages)
      rc = cli_fail(CLI_EXIT_USAGE, "started on %d ranks but --stages is %lld: start exactly P "
                    "ranks, mpirun -np P remat train --stages P ...", r.ranks, (long long)o.stages);
    int same = 1, diff = -1;
    uint64_t h = argv_digest(argc, argv);
    if (!rc && remat_dist_all_same(r.dist, &h, sizeof h, &same, &diff, &err) == 0 && !same)
      rc = cli_fail(CLI_EXIT_USAGE, "rank %d was started with other flags than rank 0; every rank "
                    "must run the same command", diff);
    /* one layout for every job: P x D (a pipeline P x 1, replicas 1 x D) */
    if (!rc && remat_dist_grid(r.dist, o.stages, o.replicas, &err))
      rc = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    if (rc) {
      remat_dist_finalize(r.dist, 0);
      return rc;
    }
  }
  rc = train_job(&o, &r);
  if (r.dist) remat_dist_finalize(r.dist, 0);
  return rc;
}
