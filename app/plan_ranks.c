/* plan_ranks.c: `remat plan --ranks N`: the layout search's table. The
 * fastest layouts that fit and the Pareto front of time against a rank's
 * memory, one row each; remat plan then plans the fastest as if its
 * settings had been given. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <omp.h>

#include "cli.h"
#include "plan_ranks.h"

typedef struct {
  char *s;
  size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    size_t room = b->cap - b->n;
    va_start(ap, fmt);
    int k = b->s ? vsnprintf(b->s + b->n, room, fmt, ap) : -1;
    va_end(ap);
    if (k >= 0 && (size_t)k < room) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap ? 2 * b->cap : 4096;
    while (k >= 0 && cap - b->n <= (size_t)k) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) return; /* the text stops short; plan_ranks_table says so */
    b->s = s;
    b->cap = cap;
  }
}

static void row(buf *b, const remat_layout *l) {
  char mem[32];
  put(b, "%-6s %4lld %3s %4lld %4lld %4lld %5lld %6lld  %-11s %13.6g %11.4g %11.4g %11s%s\n",
      l->pareto ? "pareto" : "", (long long)l->t, l->sp ? "sp" : "-", (long long)l->p,
      (long long)l->d, (long long)l->zero, (long long)l->b, (long long)l->m,
      remat_plan_schedule_name(l->schedule), l->time, l->comm_dp, l->comm_pp, remat_format_bytes(l->memory, mem, sizeof mem),
      l->optimal ? "" : " (time limit)");
}

char *plan_ranks_table(const remat_layout_query *q, const remat_layout_search *s,
                       const char *unit, int64_t shown) {
  buf b = {0};
  char mem[32];
  int64_t fits = 0, refused = 0;
  for (int64_t i = 0; i < s->n; i++) {
    fits += s->rows[i].solved && s->rows[i].rc == 0;
    refused += s->rows[i].solved && s->rows[i].rc && s->rows[i].rc != REMAT_EINFEASIBLE;
  }
  put(&b, "layouts: %lld ranks, a global batch of %lld sequences of %lld tokens, %s a rank; "
      "%lld layouts, %lld solved exactly (%lld fit, %lld refused by the planner)%s; %.2f s\n",
      (long long)q->ranks, (long long)q->global_batch, (long long)q->seq_len,
      remat_format_bytes(q->memory, mem, sizeof mem), (long long)s->n, (long long)s->solved,
      (long long)fits, (long long)refused, s->solved < s->n ? ", the rest bounded out" : "",
      s->seconds);
  put(&b, "links: tensor %s, pipeline %s, replicas %s\n",
      q->link_tp > 0 ? "timed" : "not timed", q->link_pp > 0 ? "timed" : "not timed",
      q->link_dp > 0 ? "timed" : "not timed");
  put(&b, "%-6s %4s %3s %4s %4s %4s %5s %6s  %-11s %13s %11s %11s %11s\n", "", "t", "sp",
      "p", "d", "zero", "b", "M", "schedule", unit, "replicas", "pipeline", "rank memory");
  int64_t n = 0;
  for (int64_t i = 0; i < s->n; i++) {
    const remat_layout *l = &s->rows[i];
    if (!(l->solved && l->rc == 0) || (n >= shown && !l->pareto)) continue;
    row(&b, l);
    n++;
  }
  if (fits == 0) put(&b, "no layout fits %s a rank\n", mem);
  if (!b.s) return NULL;
  return b.s;
}

/* The search as JSON: its settings and counts, and its rows (every
 * solved layout that fits and is among the `shown` fastest or on the
 * front). NULL when out of memory. */
static char *ranks_json(const remat_layout_query *q, const remat_layout_search *s, int64_t shown) {
  cJSON *o = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(o, "rows");
  cJSON_AddNumberToObject(o, "ranks", (double)q->ranks);
  cJSON_AddNumberToObject(o, "global_batch", (double)q->global_batch);
  cJSON_AddNumberToObject(o, "seq_length", (double)q->seq_len);
  cJSON_AddNumberToObject(o, "memory", (double)q->memory);
  cJSON_AddNumberToObject(o, "layouts", (double)s->n);
  cJSON_AddNumberToObject(o, "solved", (double)s->solved);
  cJSON_AddNumberToObject(o, "seconds", s->seconds);
  int64_t n = 0;
  for (int64_t i = 0; rows && i < s->n; i++) {
    const remat_layout *l = &s->rows[i];
    if (!(l->solved && l->rc == 0) || (n >= shown && !l->pareto)) continue;
    n++;
    cJSON *r = cJSON_CreateObject();
    const char *k[] = {"tensor_parallel", "sequence_parallel", "stages", "data_parallel",
                       "zero", "micro_batch_size", "microbatches", "head_chunk"};
    const int64_t v[] = {l->t, l->sp, l->p, l->d, l->zero, l->b, l->m, l->head_chunk};
    for (size_t j = 0; j < sizeof v / sizeof *v; j++) cJSON_AddNumberToObject(r, k[j], (double)v[j]);
    cJSON_AddStringToObject(r, "schedule", remat_plan_schedule_name(l->schedule));
    cJSON_AddNumberToObject(r, "time", l->time);
    cJSON_AddNumberToObject(r, "replicas_time", l->comm_dp);
    cJSON_AddNumberToObject(r, "pipeline_time", l->comm_pp);
    cJSON_AddNumberToObject(r, "rank_memory", (double)l->memory);
    cJSON_AddBoolToObject(r, "pareto", l->pareto);
    cJSON_AddBoolToObject(r, "optimal", l->optimal);
    cJSON_AddItemToArray(rows, r);
  }
  char *text = o && rows ? cJSON_Print(o) : NULL;
  cJSON_Delete(o);
  return text;
}

char *plan_ranks_join(const char *plan_json, const char *layouts) {
  const char *close = strrchr(plan_json, '}');
  if (!close || !layouts) return NULL;
  size_t at = (size_t)(close - plan_json), n = strlen(plan_json), k = strlen(layouts);
  while (at > 0 && plan_json[at - 1] == '\n') at--;
  char *out = malloc(n + k + 32);
  if (!out) return NULL;
  snprintf(out, n + k + 32, "%.*s,\n\t\"layouts\":\t%s%s", (int)at, plan_json, layouts,
           plan_json + at);
  return out;
}

int plan_ranks_run(const remat_layout_query *q, int to_stdout, char **json, remat_layout *best) {
  remat_layout_search s;
  remat_error err;
  if (remat_layout_search_run(q, &s, &err)) return cli_fail(CLI_EXIT_RUN, "--ranks: %s", err.msg);
  char *text = json ? ranks_json(q, &s, INT64_MAX) /* every solved layout that fits */
                    : plan_ranks_table(q, &s, q->times ? "time (s)" : "time (GFLOP)", 12);
  if (!text) {
    remat_layout_search_free(&s);
    return cli_fail(CLI_EXIT_RUN, "out of memory formatting the layouts");
  }
  if (json) {
    *json = text;
  } else {
    fputs(text, to_stdout ? stdout : stderr);
    free(text);
  }
  int status = 0;
  if (s.best < 0)
    status = cli_fail(CLI_EXIT_RUN, "no layout of %lld ranks fits the budget: raise --mem, or "
                      "give more ranks or a smaller global batch", (long long)q->ranks);
  else
    *best = s.rows[s.best];
  remat_layout_search_free(&s);
  return status;
}

/* --ranks: the search sets what the layout is made of; the rest as for one
 * layout. */
int plan_ranks_check(plan_args *a) {
  if (!a->ranks) {
    if (a->global_batch || a->node || a->every)
      return cli_fail(-1, "--global-batch, --node-ranks and --every-layout go with --ranks");
    return 0;
  }
  const char *set = a->P > 0 ? "--stages" : a->M > 0 ? "--microbatches" : a->B > 0 ? "--batch"
                    : a->D > 0 ? "--data-parallel" : a->Z >= 0 ? "--zero"
                    : a->tp > 0 ? "--tensor-parallel" : a->sp ? "--sequence-parallel"
                    : a->schedule ? "--schedule" : a->sweep ? "--sweep"
                    : a->per_mb ? "--per-microbatch" : NULL;
  if (set)
    return cli_fail(-1, "--ranks searches the layout; %s is one of its choices: leave it out "
                    "(the table shows each layout's)", set);
  if (!a->config || !a->global_batch || a->T < 0 || !a->mem || !a->link)
    return cli_fail(-1, "--ranks needs --config, --global-batch G (sequences a step), --seq T, "
                    "--mem (a rank's budget), and --link with --rank-tflops (untimed, every "
                    "layout of the same compute ties)");
  if (a->fmt == FORMAT_LP)
    return cli_fail(-1, "--ranks writes the fastest layout's plan, not an LP model");
  a->B = a->P = a->M = 1; /* until the search sets them */
  return 0;
}

/* --calibrate with --ranks: a layout's layer times measured on this
 * machine at its micro-batch, each size once in a run (then the kept
 * figures of that measurement). */
static int calibrated(void *ctx, const remat_config *cfg, int64_t B, int64_t T,
                      remat_plan_problem *pb, remat_error *err) {
  static int64_t measured[64];
  static int n;
  const plan_args *a = ctx;
  int again = 1;
  /* each micro-batch size, tensor degree and sequence parallelism once */
  int64_t key = (B * 1024 + (cfg->tensor_parallel > 1 ? cfg->tensor_parallel : 1)) * 2 +
                (cfg->tensor_parallel > 1 && cfg->sequence_parallel);
  for (int i = 0; i < n; i++) again &= measured[i] != key;
  remat_layer_times t;
  remat_cache_note kept;
  int rc = remat_calibrate_cached(cfg, B, T, 1, (int)a->calibrate, again, &t, &kept, err);
  if (rc) return rc;
  if (again && n < 64) measured[n++] = key;
  remat_plan_problem_set_times(pb, &t);
  return 0;
}

int plan_ranks_search(plan_args *a, const remat_budgets *budgets, char **layouts_json) {
  remat_layout_query q = {.ranks = a->ranks, .global_batch = a->global_batch, .seq_len = a->T,
                          .memory = budgets->bytes[0], .rank_rate = a->rank_tflops * 1e3,
                          .objective = a->obj >= 0 ? a->obj : REMAT_OBJ_BOTTLENECK,
                          .link_tp = a->link_tp, .link_pp = a->link_pp, .link_dp = a->link_dp,
                          .max_tensor = a->node > 0 ? a->node : 8, .time_limit = a->time_limit,
                          .exhaustive = a->every};
  remat_error err;
  if (budgets->n > 1)
    return cli_fail(CLI_EXIT_USAGE, "--ranks takes one budget, a rank's, not one per stage");
  if (remat_config_parse(a->config, &q.cfg, &err))
    return cli_fail(CLI_EXIT_USAGE, "--config: %s", err.msg);
  q.cfg.precision = a->prec;
  q.cfg.head_chunk = a->head_chunk; /* -1: auto */
  omp_set_num_threads(a->threads > 0 ? (int)a->threads : omp_get_num_procs());
  if (a->calibrate) { /* measured seconds: a tensor rank's shard timed alone (sequence-parallel
                        or not), its collectives at --link tp */
    q.times = calibrated;
    q.times_ctx = a;
    q.rank_rate = 1;
  }
  remat_layout best;
  int status = plan_ranks_run(&q, a->fmt == REMAT_PLAN_FORMAT_TABLE,
                              a->fmt == REMAT_PLAN_FORMAT_JSON ? layouts_json : NULL, &best);
  if (status) return status;
  a->tp = best.t;
  a->sp = (int)best.sp;
  a->P = best.p;
  a->D = best.d;
  a->Z = best.zero;
  a->B = best.b;
  a->M = best.m;
  a->sched = best.schedule;
  a->head_chunk = best.head_chunk;
  a->min_blocks = 1; /* as the search planned it */
  if (a->fmt == REMAT_PLAN_FORMAT_TABLE) printf("\nthe fastest layout's plan:\n");
  return 0;
}

/* The message sizes the links are measured at: a micro-batch's activation
 * (tensor sums, pipeline sends) at the layouts' middle micro-batch size (a
 * global batch spread over the ranks), or --batch's; a block's parameters
 * (the replicas' reduce-scatters, one a unit). */
static int link_sizes(const plan_args *a, size_t bytes[3]) {
  remat_config cfg;
  remat_error err;
  if (remat_config_parse(a->config, &cfg, &err))
    return cli_fail(CLI_EXIT_USAGE, "--config: %s", err.msg);
  int64_t b = a->ranks ? a->global_batch / a->ranks : a->B;
  if (b < 1) b = 1;
  int64_t T = a->T > 0 ? a->T : cfg.max_seq_len;
  bytes[0] = bytes[1] = (size_t)b * (size_t)T * (size_t)cfg.channels * sizeof(float);
  bytes[2] = remat_unit_floats(&cfg, 1) * sizeof(float);
  for (int l = 0; l < 3; l++) {
    if (bytes[l] < 4096) bytes[l] = 4096;
    if (bytes[l] > ((size_t)1 << 30)) bytes[l] = (size_t)1 << 30;
  }
  return 0;
}

/* Which ranks a level spans, for the line that says the rates. */
static void level_ranks(int size, int node, int l, char *out, size_t cap) {
  int first, step, count;
  remat_dist_link_ranks(size, node, l, &first, &step, &count);
  if (l == 1)
    snprintf(out, cap, "rank %d to rank %d", first, first + step);
  else if (count == 2)
    snprintf(out, cap, "ranks %d and %d", first, first + step);
  else if (step == 1)
    snprintf(out, cap, "ranks %d-%d", first, first + count - 1);
  else
    snprintf(out, cap, "ranks %d, %d, ..., %d", first, first + step, first + (count - 1) * step);
}

/* The ranks a node as mpirun placed them (every rank the same), or one line
 * where they do not fill their nodes in rank order, as the layouts take
 * them. */
static int placed_nodes(remat_dist *d, int *node) {
  remat_error err;
  int n = remat_dist_size(d), *of = calloc((size_t)n, sizeof *of);
  if (!of) return cli_fail(CLI_EXIT_RUN, "--link measured: out of memory");
  int rc = remat_dist_node_of(d, of, &err), k = rc ? 0 : remat_nodes_in_order(of, n);
  int at = 1; /* the first rank out of order */
  while (!rc && !k && at < n - 1 && remat_nodes_in_order(of, at + 1)) at++;
  int seen = rc || k ? 0 : of[at];
  free(of);
  if (rc) return cli_fail(CLI_EXIT_RUN, "--link measured: %s", err.msg);
  if (!k)
    return cli_fail(CLI_EXIT_USAGE, "--link measured: the ranks do not fill their nodes in rank "
                    "order (rank %d is on node %d), and the layouts put tensor ranks on "
                    "consecutive ranks of a node: start mpirun with --map-by slot, or give "
                    "--node-ranks", at, seen);
  *node = k;
  return 0;
}

int plan_links_measure(plan_args *a, remat_dist **d) {
  remat_error err;
  size_t bytes[3];
  double rates[3] = {0};
  int status = link_sizes(a, bytes);
  if (status) return status;
  if (remat_dist_create(d, NULL, NULL, &err))
    return cli_fail(CLI_EXIT_RUN, "--link measured: %s", err.msg);
  int n = remat_dist_size(*d), node = a->node > 0 && a->node < n ? (int)a->node : n;
  if (n < 2) /* every rank alike: each says it */
    return cli_fail(CLI_EXIT_USAGE, "--link measured times the links between mpirun's ranks: "
                    "start 2 or more (mpirun -np 2), not %d", n);
  if (!a->node && (status = placed_nodes(*d, &node))) return status;
  if (remat_dist_measure_links(*d, node, bytes, 20, rates, &err))
    return cli_fail(CLI_EXIT_RUN, "--link measured: %s", err.msg);
  double *level[3] = {&a->link_tp, &a->link_pp, &a->link_dp};
  for (int l = 0; l < 3; l++)
    if (!(*level[l] > 0)) *level[l] = rates[l];
  a->link_ranks = n;
  if (remat_dist_rank(*d) != 0) return 0;
  char span[3][64];
  for (int l = 0; l < 3; l++) level_ranks(n, node, l, span[l], sizeof span[l]);
  FILE *f = a->fmt == REMAT_PLAN_FORMAT_TABLE ? stdout : stderr; /* beside the table */
  fprintf(f, "links measured between %d ranks, %d a node (%s; median of 20): ", n, node,
          a->node ? "--node-ranks" : "as mpirun placed them");
  if (rates[0] > 0)
    fprintf(f, "tensor sum %.3g GB/s (%s, %zu-byte messages), ", rates[0] / 1e9, span[0],
            bytes[0]);
  else
    fprintf(f, "tensor not measured (a node of one rank), ");
  fprintf(f, "pipeline send %.3g GB/s (%s, %zu), replicas %.3g GB/s (%s, %zu)%s\n",
          rates[1] / 1e9, span[1], bytes[1], rates[2] / 1e9, span[2], bytes[2],
          a->link_tp != rates[0] || a->link_pp != rates[1] || a->link_dp != rates[2]
              ? "; a rate --link gives replaces its level's" : "");
  return 0;
}
