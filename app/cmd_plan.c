/* cmd_plan.c: `remat plan`: plans pipeline stages (layers per stage, and
 * which layers keep, recompute or take the middle policy) for a JSON
 * problem or a GPT-2 shape, and prints the plan as a table, JSON, ColossalAI
 * or Megatron-LM settings, an LP model, or a sweep over memory budgets.
 *
 * The steps, in order: parse the flags, parse the budgets, check the output
 * (before a long solve, not after it), load or build the problem, apply the
 * flags' settings to it, then solve, sweep or write the LP, format, write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "cli.h"
#include "plan_ranks.h"
#include "remat.h"

#define DEFAULT_TIME_LIMIT 60.0 /* seconds for --time-limit */

/* What --config's figures describe: one line under the table's problem
 * line ("note: " and the note), and "source_note" in JSON: the bytes of
 * remat's engine in its precision, its FLOP or measured times. */
/* Where --config's times came from beyond "FLOP times": the calibration
 * --calibrate ran (and kept). */
static char times_source[640];
/* With --tensor-parallel: how its collectives were timed, and a kept
 * block's bytes beside Korthikanti et al.'s formula (GPT-2 in bf16). */
static char tensor_source[640];
/* With --ranks and --format json: the layouts, joined to the plan's JSON. */
static char *layouts_json;

static void source_note(char *buf, size_t cap, const char *family, int bf16, int measured) {
  char threads[96];
  snprintf(threads, sizeof threads, " (oneDNN's scratchpad as on this CPU, for %d thread%s a rank)",
           omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "");
  snprintf(buf, cap, "bytes and %s of remat's own %s %s engine%s; for other frameworks' "
           "models, see python/remat (docs/profile.md)%s%s",
           measured ? "times measured on this machine (--calibrate)" : "FLOP times",
           bf16 ? "bf16" : "fp32", family,
           bf16 ? threads : "", times_source, tensor_source);
}

/* The note's words on the times --calibrate measured now: the host, its
 * CPU and the date, kept for later runs. Without --calibrate the times are
 * the FLOP model's, the same on every machine, and the note says only
 * that, whatever this machine keeps (a kept calibration predicts remat
 * train's steps, not the plan). */
static void note_times(const remat_cache_note *n) {
  char date[48];
  remat_cache_date(n->date, date, sizeof date);
  snprintf(times_source, sizeof times_source, "; times in seconds measured on %s (%s) at %s, %s",
           n->host, n->cpu, date, n->source == REMAT_FIGURE_UNKEPT ? "not kept" : "and kept");
}

static const char usage_text[] =
    "usage: remat plan PROBLEM.json [options]\n"
    "       remat plan --config NAME|L,C,NH,V,T --batch B --seq T --mem SIZE\n"
    "                  [--stages P] [--microbatches M] [options]\n"
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
    "+ sum rm over middle. Under zb-h1 and zbv a stage also keeps, for each\n"
    "micro-batch whose weight gradient W is deferred, its kept layers'\n"
    "wgrad_bytes (a recomputed layer runs its W with its B);\n"
    "under interleaved and zbv the model is cut into P V chunks, a stage adds\n"
    "up its chunks, and every partition is searched. The plan is exact for the\n"
    "objective over the stage times; the schedule's simulated time is shown.\n"
    "\n"
    "problem:\n"
    "  PROBLEM.json, --problem FILE   layers, stages, budgets (see docs/plan.md);\n"
    "                                 at most 16 MiB of JSON\n"
    "  --config NAME|SPEC             a model shape: GPT-2 (tiny, small, gpt2-124m,\n"
    "                                 gpt2-350m, gpt2-774m, gpt2-1558m, or L,C,NH,V,T)\n"
    "                                 or Llama (llama-tiny, llama-small, llama-124m,\n"
    "                                 tinyllama-1.1b, llama2-7b, llama2-13b, llama3-8b,\n"
    "                                 llama3-70b, or llama:L,C,NH,NKV,H,V,T[,theta[,tied]]),\n"
    "                                 with the engine's byte counts and FLOP-based\n"
    "                                 times (GFLOP) for remat's own engine; for\n"
    "                                 another framework's model,\n"
    "                                 measure a problem file with the Python profiler\n"
    "                                 (python/remat, docs/profile.md)\n"
    "  --batch B, --seq T             micro-batch shape for --config\n"
    "settings (override the file's):\n"
    "  --stages P                     pipeline stages (with --config, default 1)\n"
    "  --microbatches M               micro-batches per iteration (with --config,\n"
    "                                 default 1)\n"
    "  --mem SIZE[,SIZE...]           budget for every stage, or one per stage\n"
    "                                 (e.g. 20GB, 16GiB, 20e9): a stage's arena, as\n"
    "                                 in remat train (the training data a process\n"
    "                                 also holds is not counted)\n"
    "  --data-parallel D              with --config: D replicas of the whole model\n"
    "                                 (one stage; M micro-batches each), or of each\n"
    "                                 of --stages P (a P x D grid), their state\n"
    "                                 sharded by --zero, their gradient and\n"
    "                                 communication buffers counted (on a grid, the\n"
    "                                 whole model's: a bound on each stage's)\n"
    "  --zero 0|1|2|3                 ZeRO stage with --data-parallel (default 0)\n"
    "  --tensor-parallel T            with --config: T tensor-parallel ranks, laid\n"
    "                                 out as Megatron-LM's (heads, MLP and vocabulary\n"
    "                                 split; docs/plan.md); the plan is a rank's:\n"
    "                                 its bytes, its share of the FLOPs (mpirun -np T\n"
    "                                 remat train --tensor-parallel T runs it)\n"
    "  --sequence-parallel            with --tensor-parallel: norms, dropout and the\n"
    "                                 residual stream on T/t of the tokens\n"
    "  --link tp=GB/s[,pp=GB/s][,dp=GB/s]  the tensor ranks' link (and with --ranks\n"
    "                                 the pipeline's and the replicas'): their\n"
    "                                 collectives' time is added to the layers'\n"
    "                                 (not overlapped); a level not given is not timed.\n"
    "                                 measured (under mpirun -np 2 or more): the ranks\n"
    "                                 time remat's own collectives, each level over the\n"
    "                                 ranks it spans (nodes filled in rank order:\n"
    "                                 mpirun's ranks a node, or --node-ranks), and\n"
    "                                 rank 0 plans with those rates (a level given\n"
    "                                 keeps its)\n"
    "  --rank-tflops F                with --link and FLOP times: a rank's compute\n"
    "                                 rate, which turns the link's seconds into FLOPs\n"
    "  --ranks N                      with --config, --global-batch, --seq, --mem (a\n"
    "                                 rank's) and --link: search every layout of N\n"
    "                                 ranks, t x p x d (sequence parallelism or not,\n"
    "                                 ZeRO stage, micro-batch size and count, schedule),\n"
    "                                 each planned exactly; print the fastest that fit\n"
    "                                 and the Pareto front of time against memory,\n"
    "                                 then the fastest layout's plan in --format\n"
    "                                 (json: the layouts in its \"layouts\" field)\n"
    "  --global-batch G               with --ranks: sequences a step, all replicas\n"
    "  --node-ranks K                 with --ranks: the largest tensor degree, tensor\n"
    "                                 ranks sharing a node (default 8)\n"
    "  --every-layout                 with --ranks: plan every layout, none left out\n"
    "                                 by its bound (slower; the same fastest layout\n"
    "                                 and front), so that the JSON rows hold each\n"
    "  --precision fp32|bf16          with --config: the bytes of a run in this\n"
    "                                 precision, as remat train --precision (default\n"
    "                                 as remat train's: bf16 where the CPU has the\n"
    "                                 instructions, else fp32)\n"
    "  --schedule NAME                1f1b (default), gpipe, interleaved (Megatron's\n"
    "                                 interleaved 1F1B: --chunks v model chunks per\n"
    "                                 stage, M a multiple of P), zb-h1 (zero bubble:\n"
    "                                 weight gradients W deferred into the bubbles,\n"
    "                                 1F1B's activations) or zbv (zero bubble V: two\n"
    "                                 chunks per stage); remat train runs them all\n"
    "  --chunks V                     model chunks per stage with interleaved\n"
    "                                 (default 2; zbv takes 2)\n"
    "  --objective NAME               bottleneck: max stage time (default); 1f1b:\n"
    "                                 the 1F1B iteration time sum t + (M - 1) max t;\n"
    "                                 simulated: the schedule's simulated makespan\n"
    "                                 (every partition searched, each stage taking\n"
    "                                 its least-time choice)\n"
    "  --calibrate N                  with --config: time the model's layers on this\n"
    "                                 machine (N rounds of a three-block model of its\n"
    "                                 width, medians) and plan with those seconds\n"
    "                                 instead of FLOP counts; with --ranks, each\n"
    "                                 micro-batch size's and tensor degree's (a\n"
    "                                 rank's shard timed alone, with sequence\n"
    "                                 parallelism and without, its collectives at\n"
    "                                 --link tp); with --tensor-parallel, the shard's\n"
    "                                 layers timed alone likewise. Under mpirun, with\n"
    "                                 --ranks or --tensor-parallel and no --link, the\n"
    "                                 links are measured too (--link measured)\n"
    "  --head-chunk N|auto            with --config: the head's logits in chunks of N\n"
    "                                 tokens (remat train --head-chunk): the last\n"
    "                                 stage holds N x vocabulary logits (0: all of a\n"
    "                                 micro-batch's); auto (default): chunks where\n"
    "                                 they make the plan faster under --mem, or let\n"
    "                                 it fit; the plan file carries the choice\n"
    "  --threads N                    with --config: the threads each rank of the run\n"
    "                                 uses, which bf16's product scratchpad depends on\n"
    "                                 (default: this machine's CPUs shared by the\n"
    "                                 plan's stages x replicas ranks, at least 1; all\n"
    "                                 of them for one rank, or for more ranks than\n"
    "                                 CPUs, as an unbound, oversubscribed launch runs)\n"
    "  --backend NAME                 with --config: the backend the run will use, whose\n"
    "                                 sizes (workspace, scratchpad) the plan counts (cpu)\n"
    "  --no-middle                    layers keep or recompute only (no middle policy),\n"
    "                                 as frameworks without it do\n"
    "  --per-microbatch               a layer may recompute for only some of its\n"
    "                                 stage's micro-batches in flight (the last k of\n"
    "                                 its n slots), a finer step between keep and\n"
    "                                 full; 1f1b, gpipe and zb-h1 (remat train --plan\n"
    "                                 runs it; the frameworks' exports recompute such\n"
    "                                 layers for every micro-batch)\n"
    "  --spend-pools                  interleaved, zb-h1, zbv: spend the room each\n"
    "                                 rank's pool of slots and W records leaves below\n"
    "                                 its budget on keeping more (a search after the\n"
    "                                 exact plan under the bound; remat train --spend-\n"
    "                                 pools places the same)\n"
    "  --min-blocks 0|1               blocks (transformer layers) every stage and\n"
    "                                 chunk must hold: 1 keeps the embedding and the\n"
    "                                 head from a stage of their own (default 1 for\n"
    "                                 --format colossalai and megatron, whose stages\n"
    "                                 run transformer layers, else 0)\n"
    "  --family NAME                  the model family (llama, mistral, qwen2, gpt2,\n"
    "                                 ...), which says which of ColossalAI's policies\n"
    "                                 runs the export (--config: gpt2)\n"
    "  --time-limit SECONDS           stop the exact search after this long (default\n"
    "                                 60, 0 for none) and print the best plan found,\n"
    "                                 a proven lower bound and the gap\n"
    "output:\n"
    "  --format table|json|colossalai|megatron|torch|lp   default table;\n"
    "                                 colossalai a HybridParallelPlugin snippet,\n"
    "                                 megatron Megatron-LM's flags, each saying what\n"
    "                                 the framework cannot express and what it runs\n"
    "                                 instead (docs/plan.md); torch\n"
    "                                 torch.distributed.pipelining settings; lp the\n"
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
    "2 bad usage.\n";


static int resolve_names(plan_args *a) {
  const char *f = a->format;
  if (strcmp(f, "table") == 0) a->fmt = REMAT_PLAN_FORMAT_TABLE;
  else if (strcmp(f, "json") == 0) a->fmt = REMAT_PLAN_FORMAT_JSON;
  else if (strcmp(f, "colossalai") == 0) a->fmt = REMAT_PLAN_FORMAT_COLOSSALAI;
  else if (strcmp(f, "megatron") == 0) a->fmt = REMAT_PLAN_FORMAT_MEGATRON;
  else if (strcmp(f, "torch") == 0) a->fmt = REMAT_PLAN_FORMAT_TORCH;
  else if (strcmp(f, "lp") == 0) a->fmt = FORMAT_LP;
  else return cli_fail(-1, "unknown format '%s'; use table, json, colossalai, megatron, torch "
                       "or lp", f);
  if (a->sweep && a->fmt != REMAT_PLAN_FORMAT_TABLE && a->fmt != REMAT_PLAN_FORMAT_JSON)
    return cli_fail(-1, "--sweep writes a table or json, not '%s'", f);
  char names[96];
  if (a->schedule && remat_plan_schedule_parse(a->schedule, &a->sched))
    return cli_fail(-1, "unknown schedule '%s'; use %s", a->schedule,
                    remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"));
  if (a->precision && remat_precision_parse(a->precision, &a->prec))
    return cli_fail(-1, "unknown precision '%s'; use fp32 or bf16", a->precision);
  if (a->precision && !a->config)
    return cli_fail(-1, "--precision goes with --config; a problem file has its own bytes");
  if (a->threads > 0 && !a->config)
    return cli_fail(-1, "--threads goes with --config; a problem file has its own bytes");
  if (a->calibrate && !a->config)
    return cli_fail(-1, "--calibrate goes with --config; a problem file has its own times");
  a->head_chunk = -1;
  if (a->head_chunk_name && !a->config)
    return cli_fail(-1, "--head-chunk goes with --config; a problem file has its own bytes");
  if (a->head_chunk_name && strcmp(a->head_chunk_name, "auto") &&
      cli_parse_i64("--head-chunk", a->head_chunk_name, 0, (int64_t)1 << 30, &a->head_chunk))
    return -1;
  const char *why;
  if (a->precision && !remat_precision_available(a->prec, &why) &&
      !remat_backend_device_bf16(NULL)) /* a device's bf16 is its own products' */
    return cli_fail(-1, "--precision bf16 needs AVX512-BF16 or AMX, and this CPU has neither "
                        "(%s); use --precision fp32", why);
  if (!a->precision) /* as remat train: bf16 where the CPU has it */
    a->prec = remat_precision_available(REMAT_PRECISION_BF16, NULL) ? REMAT_PRECISION_BF16
                                                                     : REMAT_PRECISION_FP32;
  if (a->objective && remat_plan_objective_parse(a->objective, &a->obj))
    return cli_fail(-1, "unknown objective '%s'; use bottleneck, 1f1b or simulated",
                    a->objective);
  return 0;
}

/* The flags that go together: one problem, and --config's shape complete. */
static int check_combination(plan_args *a) {
  if (a->problem && a->config)
    return cli_fail(-1, "give a problem file or --config, not both ('%s', --config %s)",
                    a->problem, a->config);
  if (!a->problem && !a->config)
    return cli_fail(-1, "no problem: give a problem file or --config NAME (see 'remat plan "
                    "--help')");
  if ((a->D > 0 || a->Z >= 0) && !a->config)
    return cli_fail(-1, "--data-parallel and --zero go with --config");
  if (a->Z > 0 && a->D < 2)
    return cli_fail(-1, "--zero shards across replicas: give --data-parallel D (D >= 2) too");
  if (a->D > 1 && a->P < 0) a->P = 1; /* replicas hold the whole model */
  if (!a->config && (a->B >= 0 || a->T >= 0))
    return cli_fail(-1, "--batch and --seq go with --config; a problem file has its own layers");
  const char *missing = a->B < 0   ? "--batch"
                        : a->T < 0 ? "--seq"
                        : !a->mem  ? "--mem"
                                   : NULL;
  if (a->config && missing)
    return cli_fail(-1, "--config needs %s too (--batch, --seq and --mem; --stages and "
                    "--microbatches default to 1)", missing);
  if (a->config && a->P < 0) a->P = 1; /* one process's plan */
  if (a->config && a->M < 0) a->M = 1;
  return 0;
}

/* --link's levels: "tp=GB/s", "pp=GB/s", "dp=GB/s", comma-separated. */
static int parse_link(plan_args *a) {
  const char *s = a->link;
  while (*s) {
    if (!strncmp(s, "measured", 8) && (s[8] == ',' || !s[8])) {
      a->link_measured = 1;
      s += s[8] ? 9 : 8;
      continue;
    }
    double *dst = !strncmp(s, "tp=", 3) ? &a->link_tp
                  : !strncmp(s, "pp=", 3) ? &a->link_pp
                  : !strncmp(s, "dp=", 3) ? &a->link_dp
                                          : NULL;
    char *end = NULL;
    if (dst) *dst = strtod(s + 3, &end) * 1e9;
    if (!dst || !(*dst > 0) || *dst > 1e18 || (*end && *end != ','))
      return cli_fail(-1, "--link '%s': give tp=GB/s (the tensor ranks' link), and with "
                      "--ranks pp=GB/s and dp=GB/s (the pipeline's and the replicas'), in "
                      "gigabytes a second, such as tp=100,pp=25,dp=25, or measured (under "
                      "mpirun: the links between its ranks)", a->link);
    s = *end ? end + 1 : end;
  }
  return 0;
}

/* --tensor-parallel and its companions: with --config, and --link's
 * levels and rate. */
static int check_tensor(plan_args *a) {
  if ((a->tp > 0 || a->sp || a->link || a->rank_tflops > 0) && !a->config)
    return cli_fail(-1, "--tensor-parallel, --sequence-parallel, --link and --rank-tflops go "
                    "with --config; a problem file has its own bytes and times");
  if (a->sp && a->tp < 2)
    return cli_fail(-1, "--sequence-parallel splits the sequence among tensor-parallel ranks: "
                    "give --tensor-parallel 2 or more with it");
  if (a->link) {
    if (parse_link(a)) return -1;
    if (!a->ranks && (a->link_pp > 0 || a->link_dp > 0))
      return cli_fail(-1, "--link pp= and dp= time a layout's pipeline and replicas: they go "
                      "with --ranks");
    if (!a->ranks && a->tp < 2)
      return cli_fail(-1, "--link tp= times tensor parallelism's collectives: give "
                      "--tensor-parallel 2 or more");
    if (!a->calibrate && !(a->rank_tflops > 0))
      return cli_fail(-1, "--link with FLOP times needs --rank-tflops F, a rank's compute rate, "
                      "to weigh a link's second against a FLOP");
    if (a->link_measured && !remat_dist_launched())
      return cli_fail(-1, "--link measured times the links between the ranks mpirun starts: "
                      "run it as mpirun -np 2 remat plan ... (or give the rates, tp=GB/s)");
  }
  if (a->rank_tflops > 0 && !a->link)
    return cli_fail(-1, "--rank-tflops weighs the links' time: give --link too");
  return 0;
}

/* 0, or -1 after saying what was wrong (a usage error). */
static int parse_args(int argc, char **argv, plan_args *a) {
  *a = (plan_args){.format = "table", .B = -1, .T = -1, .P = -1, .M = -1, .D = -1, .Z = -1,
                   .points = 11, .time_limit = DEFAULT_TIME_LIMIT, .sched = -1, .obj = -1,
                   .chunks = -1, .min_blocks = -1, .threads = -1};
  const cli_flag flags[] = {
      {.name = "--problem", .kind = CLI_ARG, .dst = &a->problem, .what = "problem file"},
      {.name = "--config", .kind = CLI_STR, .dst = &a->config},
      {.name = "--mem", .kind = CLI_STR, .dst = &a->mem},
      {.name = "--schedule", .kind = CLI_STR, .dst = &a->schedule},
      {.name = "--objective", .kind = CLI_STR, .dst = &a->objective},
      {.name = "--format", .kind = CLI_STR, .dst = &a->format},
      {.name = "--output", .kind = CLI_STR, .dst = &a->output},
      {.name = "-o", .kind = CLI_STR, .dst = &a->output},
      {.name = "--time-limit", .kind = CLI_F64, .dst = &a->time_limit, .lo = 0, .hi = 1e9},
      {.name = "--batch", .kind = CLI_I64, .dst = &a->B, .lo = 1, .hi = 1 << 20},
      {.name = "--seq", .kind = CLI_I64, .dst = &a->T, .lo = 1, .hi = 1 << 20},
      {.name = "--stages", .kind = CLI_I64, .dst = &a->P, .lo = 1, .hi = REMAT_PLAN_MAX_STAGES},
      {.name = "--microbatches", .kind = CLI_I64, .dst = &a->M, .lo = 1,
       .hi = REMAT_PLAN_MAX_MICROBATCHES},
      {.name = "--points", .kind = CLI_I64, .dst = &a->points, .lo = 2, .hi = 1000},
      {.name = "--chunks", .kind = CLI_I64, .dst = &a->chunks, .lo = 1, .hi = 1024},
      {.name = "--data-parallel", .kind = CLI_I64, .dst = &a->D, .lo = 1, .hi = 4096},
      {.name = "--zero", .kind = CLI_I64, .dst = &a->Z, .lo = 0, .hi = 3},
      {.name = "--precision", .kind = CLI_STR, .dst = &a->precision},
      {.name = "--head-chunk", .kind = CLI_STR, .dst = &a->head_chunk_name},
      {.name = "--sweep", .kind = CLI_SWITCH, .dst = &a->sweep},
      {.name = "--no-middle", .kind = CLI_SWITCH, .dst = &a->no_middle},
      {.name = "--per-microbatch", .kind = CLI_SWITCH, .dst = &a->per_mb},
      {.name = "--spend-pools", .kind = CLI_SWITCH, .dst = &a->spend_pools},
      {.name = "--min-blocks", .kind = CLI_I64, .dst = &a->min_blocks, .lo = 0, .hi = 1},
      {.name = "--threads", .kind = CLI_I64, .dst = &a->threads, .lo = 1, .hi = 1024},
      {.name = "--family", .kind = CLI_STR, .dst = &a->family},
      {.name = "--calibrate", .kind = CLI_I64, .dst = &a->calibrate, .lo = 1, .hi = 1000},
      {.name = "--tensor-parallel", .kind = CLI_I64, .dst = &a->tp, .lo = 1, .hi = 4096},
      {.name = "--sequence-parallel", .kind = CLI_SWITCH, .dst = &a->sp},
      {.name = "--link", .kind = CLI_STR, .dst = &a->link},
      {.name = "--rank-tflops", .kind = CLI_F64, .dst = &a->rank_tflops, .lo = 1e-6, .hi = 1e9},
      {.name = "--ranks", .kind = CLI_I64, .dst = &a->ranks, .lo = 1, .hi = 1 << 20},
      {.name = "--global-batch", .kind = CLI_I64, .dst = &a->global_batch, .lo = 1, .hi = 1 << 24},
      {.name = "--node-ranks", .kind = CLI_I64, .dst = &a->node, .lo = 1, .hi = 1 << 20},
      {.name = "--every-layout", .kind = CLI_SWITCH, .dst = &a->every},
      {.name = NULL},
  };
  if (cli_parse_flags(argc, argv, flags, usage_text)) return -1;
  if (resolve_names(a)) return -1;
  /* --calibrate under mpirun measures the links too, unless --link gives them */
  if (a->calibrate && !a->link && (a->ranks || a->tp > 1) && remat_dist_launched())
    a->link = "measured";
  if (check_tensor(a) || plan_ranks_check(a)) return -1;
  return check_combination(a);
}

/* --mem: one budget, or one per stage; the library's parser, as train's. */
static int parse_budgets(const char *mem, remat_budgets *budgets) {
  remat_error err;
  if (remat_budgets_parse(budgets, mem, &err))
    return cli_fail(err.code == REMAT_ENOMEM ? CLI_EXIT_RUN : CLI_EXIT_USAGE, "--mem: %s",
                    err.msg);
  return 0;
}

/* -o: refused now if the save could not replace it, and never the problem
 * file itself (the library refuses what is not a regular file: a
 * directory, a FIFO, a link to either, a symlink loop). */
static int check_output(const plan_args *a) {
  remat_error err;
  if (!a->output) return 0;
  if (a->problem && remat_same_file(a->output, a->problem))
    return cli_fail(CLI_EXIT_USAGE, "-o '%s' is the problem file '%s'; the plan would replace "
                    "it: write the plan to another file", a->output, a->problem);
  if (remat_output_check(a->output, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  return 0;
}

/* The problem: the file's, or --config's GPT-2 shape under the first budget,
 * for the threads each rank of the run will use. */
/* The threads of each of the run's ranks: --threads, else this machine's
 * CPUs shared by stages x replicas ranks (all of them for one rank, or for
 * more ranks than CPUs: an oversubscribed launch leaves them unbound). */
static int run_threads(const plan_args *a) {
  int cpus = omp_get_num_procs();
  int64_t ranks = (a->P > 0 ? a->P : 1) * (a->D > 1 ? a->D : 1);
  if (a->threads > 0) return (int)a->threads;
  if (ranks <= 1 || ranks > cpus) return cpus;
  return (int)(cpus / ranks);
}

/* Tensor parallelism: its collectives' time added at --link's rate, and
 * the note on them and on a kept block's bytes beside the published
 * formula (GPT-2 in bf16, the formula's 16-bit activations). */
static void tensor_times(const plan_args *a, const remat_config *cfg, remat_plan_problem *pb) {
  remat_tensor_comm c;
  remat_tensor_comm_get(cfg, a->B, a->T, &c);
  int n = 0;
  if (a->link_tp > 0) {
    double per_byte = (a->calibrate ? 1.0 : a->rank_tflops * 1e3) / a->link_tp;
    remat_plan_problem_add_comm(pb, &c, per_byte);
    char by[48] = "";
    if (a->link_ranks) snprintf(by, sizeof by, " (measured between %d ranks)", a->link_ranks);
    n = snprintf(tensor_source, sizeof tensor_source, "; tensor collectives timed at %.3g GB/s%s%s, "
                 "a block's %.4g MB forward and %.4g MB backward a micro-batch and rank",
                 a->link_tp / 1e9, by, a->calibrate ? "" : " against the --rank-tflops rate",
                 c.block_fwd / 1e6, c.block_bwd / 1e6);
  } else {
    n = snprintf(tensor_source, sizeof tensor_source, "; tensor collectives not timed "
                 "(--link tp=GB/s): a block's %.4g MB forward and %.4g MB backward",
                 c.block_fwd / 1e6, c.block_bwd / 1e6);
  }
  remat_memory_model mm;
  remat_error err;
  if (cfg->family != REMAT_FAMILY_GPT2 || cfg->precision != REMAT_PRECISION_BF16 || n < 0 ||
      (size_t)n >= sizeof tensor_source || remat_memory_model_get(cfg, a->B, a->T, &mm, &err))
    return;
  snprintf(tensor_source + n, sizeof tensor_source - (size_t)n,
           "; a kept block stores %.4g MB a rank, Korthikanti et al.'s formula %.4g MB "
           "(docs/plan.md says why they differ)",
           (double)mm.layer[REMAT_LAYER_BLOCK].kept / 1e6,
           remat_korthikanti_layer_bytes(cfg, a->B, a->T) / 1e6);
}

static int load_problem(const plan_args *a, const remat_budgets *budgets, int64_t head_chunk,
                        remat_plan_problem *pb) {
  remat_error err;
  if (!a->config) {
    if (remat_plan_problem_load(pb, a->problem, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    return 0;
  }
  remat_config cfg;
  if (remat_config_parse(a->config, &cfg, &err))
    return cli_fail(CLI_EXIT_USAGE, "--config: %s", err.msg);
  cfg.precision = a->prec;
  cfg.head_chunk = head_chunk;
  cfg.tensor_parallel = a->tp > 1 ? a->tp : 0;
  cfg.sequence_parallel = a->sp;
  omp_set_num_threads(run_threads(a)); /* oneDNN sizes bf16's scratchpad for them */
  if (remat_plan_problem_from_replicas(pb, &cfg, a->B, a->T, a->P, a->M, a->D > 1 ? a->D : 1,
                                       a->Z > 0 ? (int)a->Z : 0, budgets->bytes[0], &err))
    return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  remat_layer_times t;
  remat_cache_note kept;
  /* this machine's layer times, not FLOP counts; kept. After --ranks's
   * search the kept ones: it has just measured them, and the plan below
   * its table is the row's own */
  if (a->calibrate) {
    int again = !a->ranks;
    if (remat_calibrate_cached(&cfg, a->B, a->T, 1, (int)a->calibrate, again, &t, &kept, &err)) {
      remat_plan_problem_free(pb);
      return cli_fail(CLI_EXIT_RUN, "calibrating: %s", err.msg);
    }
    remat_plan_problem_set_times(pb, &t);
    if (!(a->head_chunk < 0 && head_chunk > 0)) note_times(&kept); /* once: not for auto's other */
  }
  if (cfg.tensor_parallel > 1) tensor_times(a, &cfg, pb);
  return 0;
}

/* The flags' settings over the problem's: stages, budgets (--mem replaces
 * the file's), micro-batches, schedule, objective, time limit; then the
 * problem is checked whole. */
static int apply_settings(const plan_args *a, const remat_budgets *budgets,
                          remat_plan_problem *pb) {
  remat_error err;
  for (int64_t g = 0; a->no_middle && g < pb->num_groups; g++) pb->groups[g].middle = 0;
  if (a->P > 0 && !a->config && a->P != pb->stages) {
    if (!pb->uniform_memory && !a->mem)
      return cli_fail(CLI_EXIT_USAGE, "the problem gives one budget per stage; with --stages "
                      "give --mem too");
    pb->uniform_memory = 1; /* --mem, given, replaces the budgets below */
    if (remat_plan_problem_set_stages(pb, a->P, &err))
      return cli_fail(CLI_EXIT_USAGE, "%s", err.msg);
  }
  if (remat_plan_problem_set_budgets(pb, budgets, &err))
    return cli_fail(CLI_EXIT_USAGE, "--mem: %s", err.msg);
  if (a->M > 0) pb->microbatches = a->M;
  pb->time_limit = a->time_limit;
  if (a->sched >= 0 && a->sched != pb->schedule) {
    pb->schedule = a->sched;
    pb->chunks = 0; /* the file's chunks were for its own schedule */
  }
  if (a->chunks > 0) pb->chunks = a->chunks;
  int framework = a->fmt == REMAT_PLAN_FORMAT_COLOSSALAI || a->fmt == REMAT_PLAN_FORMAT_MEGATRON;
  if (a->min_blocks >= 0) pb->min_blocks = a->min_blocks;
  else if (framework) pb->min_blocks = 1;
  if (a->family) {
    if (strlen(a->family) >= sizeof pb->job.family)
      return cli_fail(CLI_EXIT_USAGE, "--family '%s' is too long", a->family);
    snprintf(pb->job.family, sizeof pb->job.family, "%s", a->family);
  }
  if (a->obj >= 0) pb->objective = a->obj;
  if (a->per_mb) pb->per_microbatch = 1;
  if (a->spend_pools) pb->spend_pools = 1;
  if (remat_plan_problem_check(pb, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  return 0;
}

/* text with the note added (owned; NULL when out of memory): in a table,
 * after its "problem: " line (else at its end); in JSON, as the top-level
 * object's last field; in an export (comment), as a comment after its first
 * line. */
static char *with_note(const char *text, int json, int comment, const char *note) {
  size_t n = strlen(text), at = n;
  char line[2100];
  snprintf(line, sizeof line, "%snote: %s\n", comment ? "# " : "", note);
  const char *add = line;
  if (comment && strchr(text, '\n')) at = (size_t)(strchr(text, '\n') - text) + 1;
  const char *p = strstr(text, "\nproblem: ");
  const char *close = json ? strstr(text, "\n}") : NULL;
  char field[2152];
  if (json) {
    field[0] = 0; /* not an object: left as it is */
    while (close && strstr(close + 1, "\n}")) close = strstr(close + 1, "\n}");
    if (close) snprintf(field, sizeof field, ",\n\t\"source_note\":\t\"%s\"", note);
    add = field;
    at = close ? (size_t)(close - text) : n;
  } else if (p && strchr(p + 1, '\n')) {
    at = (size_t)(strchr(p + 1, '\n') - text) + 1;
  }
  size_t k = strlen(add);
  char *out = malloc(n + k + 1);
  if (!out) return NULL;
  memcpy(out, text, at);
  memcpy(out + at, add, k);
  memcpy(out + at + k, text + at, n - at + 1);
  return out;
}

/* text with a note of --mem's budgets in bytes and binary units after its
 * "problem: " line (owned; NULL when out of memory or mem does not parse,
 * which the plan has refused before). */
static char *budget_note(const char *mem, const char *text) {
  remat_budgets b;
  remat_error err;
  char line[300], s[32];
  if (remat_budgets_parse(&b, mem, &err)) return NULL;
  int n = snprintf(line, sizeof line, "--mem %.40s is ", mem);
  for (int64_t k = 0; k < b.n && n > 0 && (size_t)n < sizeof line - 80; k++)
    n += snprintf(line + n, sizeof line - (size_t)n, "%s%zu bytes (%s)", k ? ", " : "",
                  b.bytes[k], remat_format_bytes(b.bytes[k], s, sizeof s));
  if (n > 0 && (size_t)n < sizeof line - 24)
    snprintf(line + n, sizeof line - (size_t)n, b.n > 1 ? ", one per stage" : " a stage");
  remat_budgets_free(&b);
  return with_note(text, 0, 0, line);
}

/* Writes text to -o through the library's atomic save, or to standard
 * output; --config's tables and JSON carry the source note. 0 or CLI_EXIT_RUN. */
static int write_out(const plan_args *a, const char *text) {
  remat_error err;
  int status = 0;
  /* the frameworks' exports carry a caveat of their own */
  int note = a->config && (a->fmt == REMAT_PLAN_FORMAT_TABLE || a->fmt == REMAT_PLAN_FORMAT_JSON ||
                           a->fmt == REMAT_PLAN_FORMAT_TORCH);
  int bf16 = a->prec == REMAT_PRECISION_BF16;
  char what[2048];
  remat_config cfg;
  remat_error perr;
  const char *family = a->config && !remat_config_parse(a->config, &cfg, &perr) &&
                               cfg.family == REMAT_FAMILY_LLAMA
                           ? "Llama"
                           : "GPT-2";
  source_note(what, sizeof what, family, bf16, a->calibrate > 0);
  int comment = a->fmt != REMAT_PLAN_FORMAT_TABLE && a->fmt != REMAT_PLAN_FORMAT_JSON;
  char *noted = note ? with_note(text, a->fmt == REMAT_PLAN_FORMAT_JSON, comment, what) : NULL;
  if (note && !noted) return cli_fail(CLI_EXIT_RUN, "out of memory formatting the plan");
  const char *out = noted ? noted : text;
  /* a table says what --mem is in bytes ("8G" is 10^9 bytes, not 2^30) */
  char *budget = a->mem && a->fmt == REMAT_PLAN_FORMAT_TABLE ? budget_note(a->mem, out) : NULL;
  if (layouts_json && a->fmt == REMAT_PLAN_FORMAT_JSON) budget = plan_ranks_join(out, layouts_json);
  if (budget) out = budget;
  if (a->output) {
    if (remat_save_bytes(a->output, "plan", out, strlen(out), &err))
      status = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  } else {
    fputs(out, stdout);
    status = cli_stdout_ok() ? CLI_EXIT_RUN : 0;
  }
  free(noted);
  free(budget);
  return status;
}

static int write_lp(const plan_args *a, const remat_plan_problem *pb) {
  remat_error err;
  char *text;
  if (remat_plan_format_lp(pb, &text, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  int status = write_out(a, text);
  remat_plan_text_free(text);
  return status;
}

static int run_sweep(const plan_args *a, const remat_plan_problem *pb) {
  remat_error err;
  remat_plan_sweep sw;
  char *text;
  int status;
  if (remat_plan_sweep_run(pb, a->points, &sw, &err)) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  if (remat_plan_format_sweep(pb, &sw, a->fmt == REMAT_PLAN_FORMAT_JSON, &text, &err)) {
    status = cli_fail(CLI_EXIT_RUN, "%s", err.msg);
    goto fail_format;
  }
  status = write_out(a, text);
  remat_plan_text_free(text);
fail_format:
  remat_plan_sweep_free(&sw);
  return status;
}

/* The head chunk --head-chunk auto weighs for --config's model (0: none). */
static int64_t auto_head_chunk(const plan_args *a) {
  remat_config cfg;
  remat_error err;
  if (!a->config || a->head_chunk >= 0 || remat_config_parse(a->config, &cfg, &err)) return 0;
  cfg.precision = a->prec;
  return remat_head_chunk_auto(&cfg, a->B, a->T);
}

/* Solves and writes the plan. An infeasible problem still prints its
 * least-memory arrangement (table or json), so each stage's smallest need
 * is visible, then names the smallest budget on standard error (exit 1). */
static int run_plan(const plan_args *a, const remat_plan_problem *pb,
                    const remat_plan_problem *chunked) {
  remat_error err, ferr;
  remat_plan plan;
  char *text = NULL;
  int status = 0;
  int rc = remat_plan_solve(pb, &plan, &err);
  if (rc && rc != REMAT_EINFEASIBLE) return cli_fail(CLI_EXIT_RUN, "%s", err.msg);
  /* --head-chunk auto: the head in chunks where the whole head's plan
   * recomputes (or does not fit) and the chunked one is faster (or fits;
   * or, neither fitting, needs a smaller budget) */
  if (chunked && (rc || plan.total_recomputed > 0)) {
    remat_plan p2;
    remat_error e2;
    int rc2 = remat_plan_solve(chunked, &p2, &e2);
    if (remat_plan_better(rc, &plan, rc2, &p2)) {
      remat_plan_free(&plan);
      plan = p2;
      pb = chunked;
      rc = rc2;
      err = e2;
    } else if (rc2 == 0 || rc2 == REMAT_EINFEASIBLE) {
      remat_plan_free(&p2);
    }
  }
  int show = rc == 0 || a->fmt == REMAT_PLAN_FORMAT_TABLE || a->fmt == REMAT_PLAN_FORMAT_JSON;
  if (show && remat_plan_format(pb, &plan, a->fmt, &text, &ferr)) {
    status = cli_fail(CLI_EXIT_RUN, "%s", ferr.msg);
    goto fail_format;
  }
  if (show && (status = write_out(a, text))) goto fail_write; /* it has said why: enough */
  if (rc == 0 && !plan.optimal)
    fprintf(stderr,
            "remat plan: the time limit of %g s stopped the exact search; the plan is the "
            "best found: objective %.6g, proven lower bound %.6g, gap %.3g%%\n",
            pb->time_limit, plan.objective_value, plan.lower_bound, 100 * plan.gap);
  if (rc == REMAT_EINFEASIBLE)
    status = cli_fail(CLI_EXIT_RUN, "%s; raise --mem, use more stages or smaller micro-batches",
                      err.msg);
fail_write:
  remat_plan_text_free(text);
fail_format:
  remat_plan_free(&plan);
  return status;
}

/* The plan from the parsed flags (see the file's head). */
static int plan_parsed(plan_args *a) {
  remat_budgets budgets = {0};
  remat_plan_problem pb;
  int status;
  if (a->mem && (status = parse_budgets(a->mem, &budgets))) goto fail_budgets;
  if ((status = check_output(a))) goto fail_budgets;
  if (a->ranks && (status = plan_ranks_search(a, &budgets, &layouts_json))) goto fail_budgets;
  if ((status = load_problem(a, &budgets, a->head_chunk > 0 ? a->head_chunk : 0, &pb)))
    goto fail_budgets;
  if ((status = apply_settings(a, &budgets, &pb))) goto fail_problem;
  /* --head-chunk auto under a budget: the problem with the head in chunks too */
  int64_t k = auto_head_chunk(a);
  remat_plan_problem chunked;
  int have_chunked = k > 0 && a->mem && a->fmt != FORMAT_LP && !a->sweep;
  if (have_chunked && (status = load_problem(a, &budgets, k, &chunked))) goto fail_problem;
  if (have_chunked && (status = apply_settings(a, &budgets, &chunked))) goto fail_chunked;
  if (a->fmt == FORMAT_LP) status = write_lp(a, &pb);
  else if (a->sweep) status = run_sweep(a, &pb);
  else status = run_plan(a, &pb, have_chunked ? &chunked : NULL);
fail_chunked:
  if (have_chunked) remat_plan_problem_free(&chunked);
fail_problem:
  remat_plan_problem_free(&pb);
fail_budgets:
  remat_budgets_free(&budgets);
  free(layouts_json);
  return status;
}

int remat_cmd_plan(int argc, char **argv) {
  cli_name = "remat plan";
  plan_args a;
  if (parse_args(argc, argv, &a)) return CLI_EXIT_USAGE;
  remat_dist *d = NULL; /* --link measured: mpirun's ranks, rank 0 planning */
  int status = a.link_measured ? plan_links_measure(&a, &d) : 0;
  if (!status && (!d || remat_dist_rank(d) == 0)) status = plan_parsed(&a);
  remat_dist_destroy(d, 0);
  return status;
}
