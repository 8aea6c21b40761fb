/* megatron.c: a plan as Megatron-LM's arguments. Checked against Megatron-LM
 * core 0.13.0 to main (d98e8a6); the rules, by file:
 *   training/arguments.py (validate_args): at most one of
 *     --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-
 *     pipeline-rank and --pipeline-model-parallel-layout; without a layout or
 *     first/last counts the layers divide evenly by the pipeline size; a
 *     missing --global-batch-size is micro-batch x data-parallel size, one
 *     micro-batch a step; the interleaved schedule needs more than one stage;
 *   transformer/transformer_config.py: first and last stage counts above 0,
 *     the layers between them even over the middle stages (and divisible by
 *     the virtual stages); the layout goes with neither; full recompute needs
 *     a method and --recompute-num-layers >= 1, selective neither; selective's
 *     modules are named ones ("layernorm", "mlp", ...);
 *   transformer/pipeline_parallel_layer_layout.py: "E" first and "L" last,
 *     once each, the decoder layers ("t") all there, stage vpp_rank x pp +
 *     pp_rank in the string's order (remat's model order);
 *   core/recompute.py: method block recomputes the first N layers of every
 *     (virtual) stage;
 *   pipeline_parallel/schedules.py: interleaved needs the micro-batches a
 *     multiple of the pipeline size (remat's interleaved plans are).
 * Megatron has no zero-bubble V and no ZB-H1. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/export.h"

#define VERSIONS "Megatron-LM core 0.13.0 to main d98e8a6"

typedef struct {
  remat__fw_view view;
  int64_t *run_ckpt; /* (nv) */
  remat_plan runs;
  int have_runs, exact;
  cJSON *flags; /* inside the export's JSON */
} megatron;

static void flag(remat__fw_export *ex, megatron *m, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void flag(remat__fw_export *ex, megatron *m, const char *name, const char *fmt, ...) {
  char value[1024] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
  }
  /* quoted where the shell would read a character otherwise ("|", "*") */
  int quote = value[strcspn(value, "|*()")] != 0;
  remat__plan_printf(&ex->text, !fmt ? "%s\n" : quote ? "%s \"%s\"\n" : "%s %s\n", name, value);
  cJSON_AddItemToArray(m->flags, cJSON_CreateString(name));
  /* one argument a word, as the shell splits it ("--recompute-modules layernorm mlp") */
  for (char *w = value; fmt && *w;) {
    size_t n = strcspn(w, " ");
    char end = w[n];
    w[n] = 0;
    if (n) cJSON_AddItemToArray(m->flags, cJSON_CreateString(w));
    w += n + (end != 0);
  }
}

/* The layout string: one stage per virtual stage in model order. */
static void layout(const remat__fw_view *v, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int64_t s = 0; s < v->nv && len + 32 < cap; s++) {
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", s ? "|" : "", s == 0 ? "E" : "");
    if (v->blocks[s]) len += (size_t)snprintf(buf + len, cap - len, "t*%lld", (long long)v->blocks[s]);
    if (s == v->nv - 1) len += (size_t)snprintf(buf + len, cap - len, "L");
  }
}

/* The split: nothing (even), first and last counts, virtual stages, or the
 * layout. */
static void split(remat__fw_export *ex, megatron *m) {
  const remat__fw_view *v = &m->view;
  int all_even = 1, mid_even = 1;
  for (int64_t s = 1; s < v->nv; s++) all_even &= v->blocks[s] == v->blocks[0];
  for (int64_t s = 2; s < v->p - 1; s++) mid_even &= v->blocks[s] == v->blocks[1];
  if (v->v > 1 && all_even) {
    flag(ex, m, "--num-virtual-stages-per-pipeline-rank", "%lld", (long long)v->v);
    return;
  }
  if (v->v == 1 && all_even) return;
  if (v->v == 1 && v->p >= 2 && mid_even && v->blocks[0] > 0 && v->blocks[v->p - 1] > 0) {
    flag(ex, m, "--decoder-first-pipeline-num-layers", "%lld", (long long)v->blocks[0]);
    flag(ex, m, "--decoder-last-pipeline-num-layers", "%lld", (long long)v->blocks[v->p - 1]);
    return;
  }
  char lay[4096];
  layout(v, lay, sizeof lay);
  if (strlen(lay) + 40 >= sizeof lay) {
    remat__fw_note(ex, "The layout string is too long to print here; build it from --format "
                   "json's stages (E, t times each stage's layers, L; | between stages).");
    return;
  }
  flag(ex, m, "--pipeline-model-parallel-layout", "%s", lay);
}

/* The arrangement of N everywhere (at most each stage's blocks) into m->runs. */
static int with_n(const remat_plan_problem *pb, const remat_plan *pl, megatron *m, int64_t n,
                  remat_error *err) {
  const remat__fw_view *v = &m->view;
  for (int64_t s = 0; s < v->nv; s++) m->run_ckpt[s] = n < v->blocks[s] ? n : v->blocks[s];
  if (m->have_runs) remat_plan_free(&m->runs);
  m->have_runs = 0;
  int rc = remat__fw_runs(pb, pl, v, v->blocks, m->run_ckpt, REMAT_RECOMPUTE, &m->runs, err);
  m->have_runs = rc == 0;
  return rc;
}

/* The same N everywhere: the least that fits on the plan's split, by
 * bisection (recomputing the first N + 1 blocks of every stage holds no
 * more than the first N, as long as a block's rebuild needs no more scratch
 * than its activations take; the answer is checked), else the plan's
 * largest count. */
static int uniform(const remat_plan_problem *pb, const remat_plan *pl, megatron *m,
                   remat_error *err) {
  const remat__fw_view *v = &m->view;
  int64_t lo = 0, hi = 0;
  int rc;
  for (int64_t s = 0; s < v->nv; s++) hi = hi > v->blocks[s] ? hi : v->blocks[s];
  if ((rc = with_n(pb, pl, m, hi, err))) return rc;
  if (!m->runs.feasible) return with_n(pb, pl, m, v->most, err);
  while (lo < hi) { /* hi fits */
    int64_t mid = lo + (hi - lo) / 2;
    if ((rc = with_n(pb, pl, m, mid, err))) return rc;
    if (m->runs.feasible) hi = mid;
    else lo = mid + 1;
  }
  return with_n(pb, pl, m, hi, err);
}

static int all_middle(const remat_plan_problem *pb) {
  for (int64_t g = 0; g < pb->num_groups; g++)
    if (pb->groups[g].recomputable && !pb->groups[g].middle) return 0;
  return 1;
}

/* The recompute flags and what they run. */
static int recompute(const remat_plan_problem *pb, const remat_plan *pl, remat__fw_export *ex,
                     megatron *m, remat_error *err) {
  const remat__fw_view *v = &m->view;
  char cmp[256];
  int rc;
  if (v->middle + v->full == 0) {
    remat__fw_note(ex, "No layer is recomputed: leave recompute off.");
    memset(m->run_ckpt, 0, (size_t)v->nv * sizeof *m->run_ckpt);
    if ((rc = remat__fw_runs(pb, pl, v, v->blocks, m->run_ckpt, REMAT_KEEP, &m->runs, err)))
      return rc;
    m->have_runs = 1;
    m->exact = remat__fw_same(pl, &m->runs);
    return 0;
  }
  if (!v->full && all_middle(pb)) {
    memcpy(m->run_ckpt, v->blocks, (size_t)v->nv * sizeof *m->run_ckpt);
    if ((rc = remat__fw_runs(pb, pl, v, v->blocks, m->run_ckpt, REMAT_MIDDLE, &m->runs, err)))
      return rc;
    m->have_runs = 1;
    flag(ex, m, "--recompute-granularity", "selective");
    flag(ex, m, "--recompute-modules", "layernorm mlp");
    remat__fw_note(ex, "The plan's middle policy (%lld of %lld layers) maps onto Megatron's "
                   "selective recompute of the layernorms and the MLP, which Megatron runs on "
                   "every layer and which also recomputes the MLP's products: memory at most, "
                   "time more than remat's middle policy on every layer: %s.",
                   (long long)v->middle, (long long)v->total,
                   remat__fw_compare(cmp, sizeof cmp, pl, &m->runs));
    return 0;
  }
  if ((rc = uniform(pb, pl, m, err))) return rc;
  int64_t n = 0;
  for (int64_t s = 0; s < v->nv; s++) n = n > m->run_ckpt[s] ? n : m->run_ckpt[s];
  m->exact = remat__fw_same(pl, &m->runs);
  if (n > 0) {
    flag(ex, m, "--recompute-granularity", "full");
    flag(ex, m, "--recompute-method", "block");
    flag(ex, m, "--recompute-num-layers", "%lld", (long long)n);
  }
  if (!m->exact)
    remat__fw_note(ex, "Megatron recomputes the first N layers of every %sstage (method block), "
                   "in full; the plan's counts%s cannot be expressed. The least N that %s on "
                   "this split is %lld: %s.", v->v > 1 ? "virtual " : "",
                   v->middle ? " and middle layers" : "", m->runs.feasible ? "fits" : "comes closest",
                   (long long)n, remat__fw_compare(cmp, sizeof cmp, pl, &m->runs));
  return 0;
}

/* The job's sizes: micro-batch, global batch (so that a step runs the plan's
 * micro-batches) and sequence length, where the problem knows them. */
static void batch(const remat_plan_problem *pb, const remat_plan *pl, remat__fw_export *ex,
                  megatron *m) {
  const remat_plan_job *j = &pb->job;
  int64_t dp = j->data_parallel > 0 ? j->data_parallel : 1;
  flag(ex, m, "--tensor-model-parallel-size", "%lld",
       (long long)(j->tensor_parallel > 0 ? j->tensor_parallel : 1));
  if (j->sequence_parallel && j->tensor_parallel > 1) flag(ex, m, "--sequence-parallel", NULL);
  if (j->tensor_parallel > 1 && j->kv_heads > 0 && j->kv_heads % j->tensor_parallel)
    remat__fw_note(ex, "Megatron splits the %lld key/value heads (--num-query-groups) over the "
                   "%lld tensor ranks and refuses a size that does not divide them; remat's plan "
                   "holds them whole on every rank. Use a tensor size that divides them.",
                   (long long)j->kv_heads, (long long)j->tensor_parallel);
  if (j->micro_batch > 0) {
    flag(ex, m, "--micro-batch-size", "%lld", (long long)j->micro_batch);
    flag(ex, m, "--global-batch-size", "%lld", (long long)(j->micro_batch * pl->microbatches * dp));
  } else {
    remat__fw_note(ex, "Give --micro-batch-size B and --global-batch-size %lld x B x the "
                   "data-parallel size: without it Megatron runs one micro-batch a step, not "
                   "the plan's %lld, and every stage's memory changes (the problem does not "
                   "say its micro-batch; a \"micro_batch_size\" field would).",
                   (long long)pl->microbatches, (long long)pl->microbatches);
  }
  if (j->seq_len > 0) flag(ex, m, "--seq-length", "%lld", (long long)j->seq_len);
}

static void to_json(const remat_plan *pl, const megatron *m, cJSON *o) {
  cJSON_AddBoolToObject(o, "feasible", pl->feasible);
  cJSON_AddBoolToObject(o, "exact", m->exact);
  if (!m->have_runs) return;
  cJSON *r = cJSON_AddObjectToObject(o, "runs");
  cJSON *a = cJSON_AddArrayToObject(r, "recomputed_blocks");
  cJSON *bl = cJSON_AddArrayToObject(r, "blocks");
  for (int64_t s = 0; s < m->view.nv; s++) {
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)m->run_ckpt[s]));
    cJSON_AddItemToArray(bl, cJSON_CreateNumber((double)m->view.blocks[s]));
  }
  cJSON_AddNumberToObject(r, "objective_value", m->runs.objective_value);
  cJSON_AddNumberToObject(r, "max_memory_bytes", (double)m->runs.max_memory_bytes);
  cJSON_AddBoolToObject(r, "feasible", m->runs.feasible);
}

static void header(const remat_plan *pl, const megatron *m, remat__fw_export *ex) {
  const remat__fw_view *v = &m->view;
  remat__plan_printf(&ex->text, "# remat plan for %s: %lld pipeline stages, %s, layers ", VERSIONS,
                     (long long)pl->num_stages, remat_plan_schedule_name(pl->schedule));
  for (int64_t s = 0; s < v->nv; s++)
    remat__plan_printf(&ex->text, "%s%lld", s ? "/" : "", (long long)v->blocks[s]);
  remat__plan_printf(&ex->text, ", recomputed ");
  for (int64_t s = 0; s < v->nv; s++)
    remat__plan_printf(&ex->text, "%s%lld", s ? "/" : "", (long long)v->ckpt[s]);
  remat__plan_printf(&ex->text, " (%s)\n", v->v > 1 ? "virtual stages in model order" : "by stage");
}

int remat__megatron_export(const remat_plan_problem *pb, const remat_plan *pl,
                           remat__fw_export *ex, remat_error *err) {
  int rc = remat__fw_export_init(ex, "megatron", VERSIONS, err);
  if (rc) return rc;
  megatron m = {0};
  m.flags = cJSON_AddArrayToObject(ex->json, "flags");
  if (remat__fw_view_get(pb, pl, &m.view) ||
      !(m.run_ckpt = remat__calloc((size_t)m.view.nv, sizeof *m.run_ckpt))) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  header(pl, &m, ex);
  remat__fw_caveat(ex, pb, pl);
  if (!pl->feasible) remat__fw_note(ex, "WARNING: this plan does not fit its memory budget.");
  if (pl->schedule == REMAT_SCHED_ZBV) {
    remat__fw_note(ex, "Megatron-LM cannot run this plan: it has no zero-bubble V schedule, and "
                   "its virtual stages go round the ranks (r, r+P), not in a V (r, 2P-1-r). Use "
                   "--format colossalai (pp_style=\"zbv\") or torch (ScheduleZBVZeroBubble).");
    cJSON_AddBoolToObject(ex->json, "expressible", 0);
    to_json(pl, &m, ex->json);
    goto out;
  }
  cJSON_AddBoolToObject(ex->json, "expressible", 1);
  if (pl->schedule == REMAT_SCHED_GPIPE)
    remat__fw_note(ex, "Megatron runs 1F1B, which holds fewer micro-batches than this plan's "
                   "GPipe (all %lld), so it fits too.", (long long)pl->microbatches);
  if (pl->schedule == REMAT_SCHED_ZBH1)
    remat__fw_note(ex, "Megatron has no ZB-H1: these flags run the split as 1F1B, which holds "
                   "the same activations and no deferred weight gradients, so it fits, without "
                   "ZB-H1's shorter time.");
  if (pl->schedule == REMAT_SCHED_INTERLEAVED && pl->num_stages < 2)
    remat__fw_note(ex, "Megatron's interleaved schedule needs at least 2 pipeline stages.");
  flag(ex, &m, "--num-layers", "%lld", (long long)m.view.total);
  flag(ex, &m, "--pipeline-model-parallel-size", "%lld", (long long)pl->num_stages);
  split(ex, &m);
  if ((rc = recompute(pb, pl, ex, &m, err))) goto out;
  batch(pb, pl, ex, &m);
  to_json(pl, &m, ex->json);
out:
  remat__fw_view_free(&m.view);
  remat__free(m.run_ckpt);
  if (m.have_runs) remat_plan_free(&m.runs);
  if (rc) remat__fw_export_free(ex);
  return rc;
}
