/* cmd_plan.c: `remat plan`: plans pipeline stages (layers per stage, and
 * which layers keep, recompute or take the middle policy) for a JSON
 * problem or a GPT-2 shape, and prints the plan as a table, JSON, ColossalAI
 * or Megatron-LM settings, an LP model, or a sweep over memory budgets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "remat.h"

#define DEFAULT_TIME_LIMIT 60.0 /* seconds for --time-limit */

static void usage(FILE *f) {
  fprintf(f,
          "usage: remat plan PROBLEM.json [options]\n"
          "       remat plan --config NAME|L,C,NH,V,T --batch B --seq T --stages P\n"
          "                  --microbatches M --mem SIZE [options]\n"
          "\n"
          "Chooses how many consecutive layers each pipeline stage runs and, for each\n"
          "layer, whether it keeps its activations, recomputes them, or (GPT-2 blocks,\n"
          "layers with middle_bytes) takes the middle policy, exactly, so that every\n"
          "stage fits its memory and the objective is minimal. Stage s (from 0) of P\n"
          "holds n_s = min(P - s, M) micro-batches of activations under 1F1B (M under\n"
          "GPipe); its memory is\n"
          "  stage_bytes + sum w + n_s * (sum a over kept + sum c over recomputed\n"
          "  + sum mb over middle) + the largest of its layers' work bytes y, its\n"
          "  recomputed layers' scratch x and its middle layers' scratch xm\n"
          "and its time per micro-batch t_s = sum (f + b) + sum r over recomputed\n"
          "+ sum rm over middle.\n"
          "\n"
          "problem:\n"
          "  PROBLEM.json, --problem FILE   layers, stages, budgets (see docs/plan.md);\n"
          "                                 at most 16 MiB of JSON\n"
          "  --config NAME|L,C,NH,V,T       a GPT-2 shape (tiny, small, gpt2-124m, gpt2-350m,\n"
          "                                 gpt2-774m, gpt2-1558m), with the engine's byte\n"
          "                                 counts and FLOP-based times (GFLOP)\n"
          "  --batch B, --seq T             micro-batch shape for --config\n"
          "settings (override the file's):\n"
          "  --stages P                     pipeline stages\n"
          "  --microbatches M               micro-batches per iteration\n"
          "  --mem SIZE[,SIZE...]           budget for every stage, or one per stage\n"
          "                                 (e.g. 20GB, 16GiB, 20e9): a stage's arena; the\n"
          "                                 training data is not counted (remat train\n"
          "                                 --mem counts it too)\n"
          "  --data-parallel D              with --config: D replicas of the whole model\n"
          "                                 (one stage; M micro-batches each), or of each\n"
          "                                 of --stages P (a P x D grid), their state\n"
          "                                 sharded by --zero, their gradient and\n"
          "                                 communication buffers counted (on a grid, the\n"
          "                                 whole model's: a bound on each stage's)\n"
          "  --zero 0|1|2|3                 ZeRO stage with --data-parallel (default 0)\n"
          "  --schedule 1f1b|gpipe          default 1f1b\n"
          "  --objective bottleneck|1f1b    max stage time (default), or the 1F1B\n"
          "                                 iteration time sum t + (M - 1) max t\n"
          "  --no-middle                    layers keep or recompute only (no middle policy),\n"
          "                                 as frameworks without it do\n"
          "  --time-limit SECONDS           stop the exact search after this long (default\n"
          "                                 60, 0 for none) and print the best plan found,\n"
          "                                 a proven lower bound and the gap\n"
          "output:\n"
          "  --format table|json|colossalai|megatron|lp   default table; lp writes the\n"
          "                                 problem as a MIP for glpsol or cbc\n"
          "  --sweep                        objective against budget, from the smallest\n"
          "                                 budget that fits to the one needing no\n"
          "                                 recomputation (table or json)\n"
          "  --points N                     budgets in a sweep (default 11)\n"
          "  -o, --output FILE              write there instead of standard output, atomically\n"
          "                                 (a temporary file beside it, renamed into place)\n"
          "  -h, --help                     this help\n"
          "\n"
          "Exit status: 0 planned (also when the time limit stopped the search: a note on\n"
          "standard error gives the gap); 1 the budget is too small (the least-memory\n"
          "arrangement is printed and the smallest budget named) or the problem is bad;\n"
          "2 bad usage.\n");
}

static int parse_seconds(const char *s, double *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (*end || errno || !(v >= 0) || v > 1e9) return -1;
  *out = v;
  return 0;
}

static int parse_mem(const char *s, size_t **out, int64_t *n, remat_error *err) {
  int64_t k = 1;
  for (const char *c = s; *c; c++) k += *c == ',';
  size_t *v = calloc((size_t)k, sizeof *v);
  char *copy = strdup(s);
  if (!v || !copy) {
    free(v);
    free(copy);
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return -1;
  }
  int64_t i = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (remat_parse_size(tok, &v[i], err)) {
      free(v);
      free(copy);
      return -1;
    }
    i++;
  }
  free(copy);
  if (i != k) {
    free(v);
    snprintf(err->msg, sizeof err->msg, "'%s' has an empty budget between commas", s);
    return -1;
  }
  *out = v;
  *n = k;
  return 0;
}

/* Writes text to f (already open), then flushes; 0 or an errno. */
static int put_all(FILE *f, const char *text) {
  errno = 0;
  if (fputs(text, f) < 0 || fflush(f) != 0 || ferror(f)) return errno ? errno : EIO;
  return 0;
}

static int write_stdout(const char *text) {
  int e = put_all(stdout, text);
  return e ? cli_fail(1, "cannot write to standard output: %s", strerror(e)) : 0;
}

/* Writes text to path atomically: a unique temporary file in the same
 * directory, every write, the flush, fsync and close checked, then renamed
 * over path. On any failure path is untouched and the temporary removed. A
 * path that exists and is neither a regular file nor a directory (a device,
 * a pipe) cannot be replaced and is written in place. */
static int write_file(const char *path, const char *text) {
  struct stat st;
  int exists = stat(path, &st) == 0;
  if (exists && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    FILE *f = fopen(path, "w");
    if (!f) return cli_fail(1, "cannot open '%s' for writing: %s", path, strerror(errno));
    int e = put_all(f, text);
    if (fclose(f) != 0 && !e) e = errno;
    return e ? cli_fail(1, "cannot write '%s': %s", path, strerror(e)) : 0;
  }
  const char *slash = strrchr(path, '/');
  int dirlen = slash ? (int)(slash - path + 1) : 0;
  size_t cap = strlen(path) + 16;
  char *tmp = malloc(cap);
  if (!tmp) return cli_fail(1, "cannot write '%s': %s", path, strerror(ENOMEM));
  snprintf(tmp, cap, "%.*s.%s.XXXXXX", dirlen, path, path + dirlen);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int e = errno;
    free(tmp);
    return cli_fail(1, "cannot create a file beside '%s': %s", path, strerror(e));
  }
  /* the permissions a new file would get, or the old file's */
  mode_t mask = umask(0);
  umask(mask);
  mode_t mode = exists && S_ISREG(st.st_mode) ? st.st_mode & 07777 : 0666 & ~mask;
  FILE *f = fdopen(fd, "w");
  int e = f ? 0 : errno;
  if (!e && fchmod(fd, mode) != 0) e = errno;
  if (!e) e = put_all(f, text);
  if (!e && fsync(fd) != 0) e = errno;
  if (f) {
    if (fclose(f) != 0 && !e) e = errno;
  } else {
    close(fd);
  }
  if (!e && rename(tmp, path) != 0) e = errno;
  if (e) unlink(tmp);
  free(tmp);
  return e ? cli_fail(1, "cannot write '%s': %s", path, strerror(e)) : 0;
}

static int write_out(const char *path, const char *text) {
  return path ? write_file(path, text) : write_stdout(text);
}

int remat_cmd_plan(int argc, char **argv) {
  cli_name = "remat plan";
  const char *problem = NULL, *config = NULL, *mem = NULL, *format = "table", *output = NULL;
  const char *schedule = NULL, *objective = NULL;
  int64_t B = -1, T = -1, P = -1, M = -1, D = -1, Z = -1, points = 11;
  double time_limit = DEFAULT_TIME_LIMIT;
  int sweep = 0, no_middle = 0;
  for (int a = 1; a < argc; a++) {
    const char *o = argv[a];
    if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
      usage(stdout);
      int e = put_all(stdout, "");
      return e ? cli_fail(1, "cannot write to standard output: %s", strerror(e)) : 0;
    }
    if (strcmp(o, "--sweep") == 0) {
      sweep = 1;
      continue;
    }
    if (strcmp(o, "--no-middle") == 0) {
      no_middle = 1;
      continue;
    }
    if (o[0] != '-' || strcmp(o, "-") == 0) {
      if (problem) return cli_fail(2, "more than one problem file given ('%s' and '%s')", problem, o);
      problem = o;
      continue;
    }
    /* every other option takes a value: --opt VALUE or --opt=VALUE */
    char name[64];
    const char *val = NULL, *eq = strchr(o, '=');
    if (eq && (size_t)(eq - o) < sizeof name) {
      memcpy(name, o, (size_t)(eq - o));
      name[eq - o] = 0;
      val = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", o);
    }
    static const char *const with_value[] = {"--problem", "--config", "--batch", "--seq",
                                             "--stages", "--microbatches", "--mem", "--schedule",
                                             "--objective", "--format", "--points", "--output",
                                             "--time-limit", "-o", "--data-parallel",
                                             "--zero", NULL};
    int known = 0;
    for (const char *const *k = with_value; *k; k++) known |= strcmp(name, *k) == 0;
    if (!known) return cli_fail(2, "unknown option '%s'; see 'remat plan --help'%s", o, "");
    if (!val) {
      if (a + 1 >= argc) return cli_fail(2, "option %s needs a value%s", name, "");
      val = argv[++a];
    }
    int64_t *iv = NULL, lo = 1, hi = INT64_MAX;
    if (strcmp(name, "--problem") == 0) {
      if (problem) return cli_fail(2, "more than one problem file given ('%s' and '%s')", problem, val);
      problem = val;
    } else if (strcmp(name, "--config") == 0) config = val;
    else if (strcmp(name, "--mem") == 0) mem = val;
    else if (strcmp(name, "--schedule") == 0) schedule = val;
    else if (strcmp(name, "--objective") == 0) objective = val;
    else if (strcmp(name, "--format") == 0) format = val;
    else if (strcmp(name, "--output") == 0 || strcmp(name, "-o") == 0) output = val;
    else if (strcmp(name, "--time-limit") == 0) {
      if (parse_seconds(val, &time_limit))
        return cli_fail(2, "--time-limit needs a number of seconds from 0 (none) to 1e9, not '%s'%s",
                    val, "");
    }
    else if (strcmp(name, "--batch") == 0) iv = &B, hi = 1 << 20;
    else if (strcmp(name, "--seq") == 0) iv = &T, hi = 1 << 20;
    else if (strcmp(name, "--stages") == 0) iv = &P, hi = REMAT_PLAN_MAX_STAGES;
    else if (strcmp(name, "--microbatches") == 0) iv = &M, hi = REMAT_PLAN_MAX_MICROBATCHES;
    else if (strcmp(name, "--points") == 0) iv = &points, lo = 2, hi = 1000;
    else if (strcmp(name, "--data-parallel") == 0) iv = &D, hi = 4096;
    else if (strcmp(name, "--zero") == 0) iv = &Z, lo = 0, hi = 3;
    if (iv && cli_parse_i64(name, val, lo, hi, iv)) return CLI_EXIT_USAGE;
  }
  int fmt;
  int lp = strcmp(format, "lp") == 0;
  if (strcmp(format, "table") == 0) fmt = REMAT_PLAN_FORMAT_TABLE;
  else if (strcmp(format, "json") == 0) fmt = REMAT_PLAN_FORMAT_JSON;
  else if (strcmp(format, "colossalai") == 0) fmt = REMAT_PLAN_FORMAT_COLOSSALAI;
  else if (strcmp(format, "megatron") == 0) fmt = REMAT_PLAN_FORMAT_MEGATRON;
  else if (lp) fmt = -1;
  else
    return cli_fail(2, "unknown format '%s'; use table, json, colossalai, megatron or lp%s", format, "");
  if (sweep && fmt != REMAT_PLAN_FORMAT_TABLE && fmt != REMAT_PLAN_FORMAT_JSON)
    return cli_fail(2, "--sweep writes a table or json, not '%s'%s", format, "");
  int sched = -1, obj = -1;
  if (schedule && remat_plan_schedule_parse(schedule, &sched))
    return cli_fail(2, "unknown schedule '%s'; use 1f1b or gpipe%s", schedule, "");
  if (objective && remat_plan_objective_parse(objective, &obj))
    return cli_fail(2, "unknown objective '%s'; use bottleneck or 1f1b%s", objective, "");
  if (problem && config)
    return cli_fail(2, "give a problem file or --config, not both ('%s', --config %s)", problem, config);
  if (!problem && !config)
    return cli_fail(2, "no problem: give a problem file or --config NAME (see 'remat plan --help')");

  remat_error err = {0, ""};
  size_t *budgets = NULL;
  int64_t nb = 0;
  if (mem && parse_mem(mem, &budgets, &nb, &err))
    return cli_fail(2, "--mem: %s", err.msg);

  remat_plan_problem pb;
  int rc;
  if ((D > 0 || Z >= 0) && !config) {
    free(budgets);
    return cli_fail(2, "--data-parallel and --zero go with --config");
  }
  if (Z > 0 && D < 2) {
    free(budgets);
    return cli_fail(2, "--zero shards across replicas: give --data-parallel D (D >= 2) too");
  }
  if (D > 1 && P < 0) P = 1; /* replicas hold the whole model */
  if (config) {
    const char *missing = B < 0 ? "--batch" : T < 0 ? "--seq" : P < 0 ? "--stages"
                          : M < 0 ? "--microbatches" : !mem ? "--mem" : NULL;
    if (missing) {
      free(budgets);
      return cli_fail(2, "--config needs %s too (and --batch, --seq, --stages, --microbatches, --mem)%s",
                  missing, "");
    }
    remat_config cfg;
    if (remat_config_parse(config, &cfg, &err)) {
      free(budgets);
      return cli_fail(2, "--config: %s", err.msg);
    }
    rc = remat_plan_problem_from_replicas(&pb, &cfg, B, T, P, M, D > 1 ? D : 1, Z > 0 ? (int)Z : 0,
                                          budgets[0], &err);
    if (rc) {
      free(budgets);
      return cli_fail(1, "%s", err.msg);
    }
  } else {
    if (B >= 0 || T >= 0) {
      free(budgets);
      return cli_fail(2, "--batch and --seq go with --config; a problem file has its own layers");
    }
    rc = remat_plan_problem_load(&pb, problem, &err);
    if (rc) {
      free(budgets);
      return cli_fail(1, "%s", err.msg);
    }
  }
  for (int64_t g = 0; no_middle && g < pb.num_groups; g++) pb.groups[g].middle = 0;
  if (P > 0 && !config && P != pb.stages) {
    if (!pb.uniform_memory && !mem) {
      free(budgets);
      remat_plan_problem_free(&pb);
      return cli_fail(2, "the problem gives one budget per stage; with --stages give --mem too");
    }
    pb.uniform_memory = 1; /* --mem, given, replaces the budgets below */
    if ((rc = remat_plan_problem_set_stages(&pb, P, &err))) {
      free(budgets);
      remat_plan_problem_free(&pb);
      return cli_fail(2, "%s", err.msg);
    }
  }
  if (mem) {
    if (nb == 1) {
      remat_plan_problem_set_memory(&pb, budgets[0]);
    } else if (nb == pb.stages) {
      for (int64_t s = 0; s < nb; s++) pb.memory[s] = budgets[s];
      pb.uniform_memory = 0;
    } else {
      char a[32], b[32];
      snprintf(a, sizeof a, "%lld", (long long)nb);
      snprintf(b, sizeof b, "%lld", (long long)pb.stages);
      free(budgets);
      remat_plan_problem_free(&pb);
      return cli_fail(2, "--mem gives %s budgets for %s stages; give one for all or one per stage", a, b);
    }
  }
  free(budgets);
  if (M > 0) pb.microbatches = M;
  pb.time_limit = time_limit;
  if (sched >= 0) pb.schedule = sched;
  if (obj >= 0) pb.objective = obj;
  if ((rc = remat_plan_problem_check(&pb, &err))) {
    remat_plan_problem_free(&pb);
    return cli_fail(1, "%s", err.msg);
  }

  char *text = NULL;
  int status = 0;
  if (lp) {
    if ((rc = remat_plan_format_lp(&pb, &text, &err))) status = cli_fail(1, "%s", err.msg);
    else status = write_out(output, text);
  } else if (sweep) {
    remat_plan_sweep sw;
    if ((rc = remat_plan_sweep_run(&pb, points, &sw, &err))) {
      status = cli_fail(1, "%s", err.msg);
    } else {
      if ((rc = remat_plan_format_sweep(&pb, &sw, fmt == REMAT_PLAN_FORMAT_JSON, &text, &err)))
        status = cli_fail(1, "%s", err.msg);
      else status = write_out(output, text);
      remat_plan_sweep_free(&sw);
    }
  } else {
    remat_plan plan;
    rc = remat_plan_solve(&pb, &plan, &err);
    if (rc && rc != REMAT_EINFEASIBLE) {
      status = cli_fail(1, "%s", err.msg);
    } else {
      remat_error ferr;
      /* An infeasible problem still prints its least-memory arrangement
       * (table or json), so each stage's smallest need is visible. */
      int show = rc == 0 || fmt == REMAT_PLAN_FORMAT_TABLE || fmt == REMAT_PLAN_FORMAT_JSON;
      if (show && remat_plan_format(&pb, &plan, fmt, &text, &ferr))
        status = cli_fail(1, "%s", ferr.msg);
      else if (show)
        status = write_out(output, text);
      if (rc == 0 && status == 0 && !plan.optimal)
        fprintf(stderr,
                "remat plan: the time limit of %g s stopped the exact search; the plan is the "
                "best found: objective %.6g, proven lower bound %.6g, gap %.3g%%\n",
                pb.time_limit, plan.objective_value, plan.lower_bound, 100 * plan.gap);
      /* a failed write has said so; one message is enough */
      if (rc == REMAT_EINFEASIBLE && status == 0) {
        fprintf(stderr,
                "remat plan: %s; raise --mem, use more stages or smaller micro-batches\n",
                err.msg);
        status = 1;
      }
      remat_plan_free(&plan);
    }
  }
  remat_plan_text_free(text);
  remat_plan_problem_free(&pb);
  return status;
}
