/* write.c: a plan as text: a table like ColossalAI #5509's, JSON (with the
 * frameworks' exports), and torch.distributed.pipelining settings; the
 * ColossalAI and Megatron-LM exports are export.c's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/export.h"
#include "plan/plan.h"

static int finish(remat__plan_buf *b, char **out, remat_error *err) {
  if (b->oom || !b->s) {
    remat__free(b->s);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory writing the plan");
  }
  *out = b->s;
  return 0;
}

/* ------------------------------------------------------------ helpers */

static const char *fmt_time(double t, char *buf, size_t cap) {
  snprintf(buf, cap, "%.6g", t);
  return buf;
}

/* Layer indices as ranges "0-3,7"; at most cap - 4 characters, then "...". */
static void ranges(const int64_t *v, int64_t n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int64_t k = 0; k < n;) {
    int64_t e = k;
    while (e + 1 < n && v[e + 1] == v[e] + 1) e++;
    char part[48];
    if (e == k) snprintf(part, sizeof part, "%s%lld", len ? "," : "", (long long)v[k]);
    else snprintf(part, sizeof part, "%s%lld-%lld", len ? "," : "", (long long)v[k], (long long)v[e]);
    if (len + strlen(part) + 4 >= cap) {
      snprintf(buf + len, cap - len, "...");
      return;
    }
    memcpy(buf + len, part, strlen(part) + 1);
    len += strlen(part);
    k = e + 1;
  }
  if (!n) snprintf(buf, cap, "-");
}

/* A stage's layers that are not kept: the recomputed ones as ranges, then
 * those recomputed in only some of the stage's n slots, by their count k
 * ("4-6 in 1/4 slots"), then "middle" and the middle ones ("1-3",
 * "1-3; middle 4-6", "middle 1-6", "1; 2-3 in 1/2 slots"). */
static void stage_layers(const remat_plan *pl, const remat_plan_stage *st, char *buf, size_t cap) {
  int64_t full[64], mid[64], part[64], nf = 0, nm = 0;
  char a[96] = "", b[96] = "";
  size_t at = 0;
  buf[0] = '\0';
  /* long lists are cut by ranges() anyway: the first 64 of each show */
  for (int64_t k = 0; k < st->num_recomputed; k++) {
    int64_t l = st->recomputed[k];
    if (pl->policy && pl->policy[l] == REMAT_MIDDLE) {
      if (nm < 64) mid[nm++] = l;
    } else if (nf < 64 && !(pl->full_slots && pl->full_slots[l])) {
      full[nf++] = l;
    }
  }
  if (nf) {
    ranges(full, nf, a, sizeof a);
    at += (size_t)snprintf(buf + at, cap - at, "%s", a);
  }
  for (int ks = 1; st->num_partial && ks < 256 && at < cap; ks++) {
    int64_t np = 0;
    for (int64_t k = 0; k < st->num_recomputed; k++)
      if (pl->full_slots[st->recomputed[k]] == ks && np < 64) part[np++] = st->recomputed[k];
    if (!np) continue;
    ranges(part, np, a, sizeof a);
    at += (size_t)snprintf(buf + at, cap - at, "%s%s in %d/%lld slots", at ? "; " : "", a, ks,
                           (long long)st->microbatches_held);
  }
  if (nm && at < cap) {
    ranges(mid, nm, b, sizeof b);
    at += (size_t)snprintf(buf + at, cap - at, "%smiddle %s", at ? "; " : "", b);
  }
  if (!st->num_recomputed) snprintf(buf, cap, "-");
}

/* The model's layer numbering, when it has more than one group. */
static void numbering(remat__plan_buf *b, const remat_plan_problem *pb) {
  int named = 0;
  for (int64_t g = 0; g < pb->num_groups; g++) named |= pb->groups[g].name[0] != 0;
  if (pb->num_groups < 2 || !named) return;
  remat__plan_printf(b, "layers in model order:");
  int64_t l = 0;
  for (int64_t g = 0; g < pb->num_groups && g < 12; g++) {
    const remat_plan_group *G = &pb->groups[g];
    const char *nm = G->name[0] ? G->name : "layer";
    if (G->count == 1) remat__plan_printf(b, " %lld %s%s", (long long)l, nm, g + 1 < pb->num_groups ? "," : "");
    else remat__plan_printf(b, " %lld-%lld %s%s", (long long)l, (long long)(l + G->count - 1), nm,
                            g + 1 < pb->num_groups ? "," : "");
    l += G->count;
  }
  if (pb->num_groups > 12) remat__plan_printf(b, " ...");
  remat__plan_printf(b, "\n");
}

static const char *unit_of(const remat_plan_problem *pb) {
  return pb->time_unit[0] ? pb->time_unit : "";
}

/* ------------------------------------------------------------ table */

/* A budget this large stands for none (a pipeline placed with memory
 * ignored: 2^60 bytes); the table says "none" rather than 1024.00 PiB. */
#define NO_BUDGET ((size_t)1 << 60)

/* Under the schedules without a closed-form order: each stage's chunks (layer
 * ranges, model order), the micro-batches it keeps for deferred weight
 * gradients, and what the plan is exact for. */
static void chunk_lines(remat__plan_buf *b, const remat_plan *pl, int units) {
  const remat_schedule_info *row = remat_schedule_get(pl->schedule);
  if (row->op && pl->objective != REMAT_OBJ_SIMULATED) return;
  char t[48];
  int64_t p = pl->num_stages, v = pl->chunks > 1 ? pl->chunks : 1;
  if (v > 1) {
    remat__plan_printf(b, "chunks (layers of each, by stage):");
    for (int64_t s = 0; s < p; s++) {
      remat__plan_printf(b, "%s %lld:", s ? ";" : "", (long long)s);
      for (int64_t c = 0; c < v; c++) {
        int64_t vs = remat_schedule_virtual_stage(pl->schedule, p, s, c);
        int64_t f = pl->chunk_first[vs], e = f + pl->chunk_layers[vs] - 1;
        if (e > f) remat__plan_printf(b, " %lld-%lld", (long long)f, (long long)e);
        else remat__plan_printf(b, " %lld", (long long)f);
      }
    }
    remat__plan_printf(b, "\n");
  }
  if (row->split) {
    remat__plan_printf(b, "micro-batches kept for a deferred W, by stage:");
    for (int64_t s = 0; s < p; s++)
      remat__plan_printf(b, " %lld", (long long)pl->stages[s].wgrad_held);
    remat__plan_printf(b, "\n");
  }
  if (pl->stages[0].stream_peak_bytes) {
    remat__plan_printf(b, "memory above: as remat train holds it, each rank's slots and W records "
                       "in one pool over its stream; with each chunk's apart, as planned, by "
                       "stage:");
    for (int64_t s = 0; s < p; s++)
      remat__plan_printf(b, " %s",
                         remat_format_bytes_in(pl->stages[s].memory_bytes, units, t, sizeof t));
    remat__plan_printf(b, "\n");
  }
  if (pl->objective == REMAT_OBJ_SIMULATED)
    remat__plan_printf(b, "the objective is the %s simulation: exact over the partitions, each "
                       "stage taking its least-time choice\n",
                       remat_plan_schedule_name(pl->schedule));
  else
    remat__plan_printf(b, "exact for the objective over stage times%s; the %s simulation below "
                       "is this plan's makespan, not optimised\n",
                       pl->pools_spent ? " with each chunk's slots apart, then the pools' room "
                                         "spent by a search"
                                       : "",
                       remat_plan_schedule_name(pl->schedule));
}

static void table(remat__plan_buf *b, const remat_plan_problem *pb, const remat_plan *pl) {
  int units = remat__plan_units(pb);
  char t1[48], t2[48], t3[48], t4[48];
  remat__plan_printf(b, "%s: %lld layers, %lld stages, %s schedule, %lld micro-batches, objective %s\n",
                     pl->feasible ? "plan" : "does not fit; least memory arrangement",
                     (long long)pl->num_layers, (long long)pl->num_stages,
                     remat_plan_schedule_name(pl->schedule), (long long)pl->microbatches,
                     remat_plan_objective_name(pl->objective));
  if (pb->source[0]) remat__plan_printf(b, "problem: %s\n", pb->source);
  numbering(b, pb);
  remat__plan_printf(b, "%5s %7s %7s %6s %9s %12s %12s %12s  %s\n", "stage", "layers", "first",
                     "ckpt", "in-flight", "memory", "budget", "time", "recomputed layers");
  for (int64_t s = 0; s < pl->num_stages; s++) {
    const remat_plan_stage *st = &pl->stages[s];
    char rl[208];
    stage_layers(pl, st, rl, sizeof rl);
    remat__plan_printf(b, "%5lld %7lld %7lld %6lld %9lld %12s %12s %12s  %s%s\n", (long long)s,
                       (long long)st->num_layers, (long long)st->first_layer,
                       (long long)st->num_recomputed, (long long)st->microbatches_held,
                       remat_format_bytes_in(remat_plan_stage_held(st), units, t1, sizeof t1),
                       st->budget_bytes >= NO_BUDGET
                           ? "none"
                           : remat_format_bytes_in(st->budget_bytes, units, t2, sizeof t2),
                       fmt_time(st->time, t3, sizeof t3), rl,
                       remat_plan_stage_held(st) > st->budget_bytes ? "  OVER BUDGET" : "");
  }
  chunk_lines(b, pl, units);
  const char *u = unit_of(pb);
  remat__plan_printf(b, "bottleneck time %s%s%s, iteration time %s%s%s", fmt_time(pl->bottleneck_time, t1, sizeof t1),
                     u[0] ? " " : "", u, fmt_time(pl->iteration_time, t2, sizeof t2), u[0] ? " " : "", u);
  if (pl->simulated_time >= 0)
    remat__plan_printf(b, " (%s simulation: %s)", remat_plan_schedule_name(pl->schedule),
                       fmt_time(pl->simulated_time, t3, sizeof t3));
  remat__plan_printf(b, "\n");
  remat__plan_printf(b,
                     "objective %s = %s, without recomputation (best split, memory ignored) %s, "
                     "slowdown %.4g\n",
                     remat_plan_objective_name(pl->objective), fmt_time(pl->objective_value, t1, sizeof t1),
                     fmt_time(pl->baseline_objective, t2, sizeof t2), pl->slowdown);
  remat__plan_printf(b, "recomputed layers %lld of %lld", (long long)pl->total_recomputed,
                     (long long)pl->num_layers);
  if (pl->total_middle)
    remat__plan_printf(b, " (%lld of them middle: layernorms and GELU rerun)",
                       (long long)pl->total_middle);
  if (pl->total_partial)
    remat__plan_printf(b, " (%lld of them for some micro-batches only)",
                       (long long)pl->total_partial);
  size_t peak = 0; /* as held */
  for (int64_t s = 0; s < pl->num_stages; s++)
    if (remat_plan_stage_held(&pl->stages[s]) > peak) peak = remat_plan_stage_held(&pl->stages[s]);
  remat__plan_printf(b, ", peak stage memory %s\n",
                     remat_format_bytes_in(peak, units, t4, sizeof t4));
  if (!pl->optimal)
    remat__plan_printf(b,
                       "time limit reached: best plan found, objective %s, proven lower bound "
                       "%s, gap %.3g%%\n",
                       fmt_time(pl->objective_value, t1, sizeof t1),
                       fmt_time(pl->lower_bound, t2, sizeof t2), 100 * pl->gap);
  if (!pl->feasible) {
    if (pb->uniform_memory)
      remat__plan_printf(b, "the smallest budget per stage that fits: %s\n",
                         remat_format_bytes_in(pl->min_budget_bytes, units, t1, sizeof t1));
    else
      remat__plan_printf(b, "every stage would need %s more than its budget\n",
                         remat_format_bytes_in(pl->min_extra_bytes, units, t1, sizeof t1));
  }
}

/* ------------------------------------------------------------ the frameworks' exports */

/* --format colossalai or megatron (colossalai.c, megatron.c). */

static int export_text(const remat_plan_problem *pb, const remat_plan *pl, int format,
                            remat__plan_buf *b, remat_error *err) {
  remat__fw_export ex;
  int rc = format == REMAT_PLAN_FORMAT_COLOSSALAI ? remat__colossalai_export(pb, pl, &ex, err)
                                                   : remat__megatron_export(pb, pl, &ex, err);
  if (rc) return rc;
  remat__plan_printf(b, "%s", ex.text.s ? ex.text.s : "");
  if (ex.text.oom) rc = remat__errorf(err, REMAT_ENOMEM, "out of memory writing the export");
  remat__fw_export_free(&ex);
  return rc;
}

/* The JSON's "exports": both frameworks'. */
static int export_json(const remat_plan_problem *pb, const remat_plan *pl, cJSON *root,
                            remat_error *err) {
  cJSON *o = cJSON_AddObjectToObject(root, "exports");
  if (!o) return remat__errorf(err, REMAT_ENOMEM, "out of memory writing JSON");
  for (int k = 0; k < 2; k++) {
    remat__fw_export ex;
    int rc = k == 0 ? remat__colossalai_export(pb, pl, &ex, err)
                    : remat__megatron_export(pb, pl, &ex, err);
    if (rc) return rc;
    cJSON_AddItemToObject(o, k == 0 ? "colossalai" : "megatron", ex.json);
    ex.json = NULL;
    remat__fw_export_free(&ex);
  }
  return 0;
}

/* ------------------------------------------------------------ json */

static int json(const remat_plan_problem *pb, const remat_plan *pl, char **out, remat_error *err) {
  cJSON *root = cJSON_CreateObject();
  cJSON *stages = cJSON_AddArrayToObject(root, "stages");
  for (int64_t s = 0; s < pl->num_stages; s++) {
    const remat_plan_stage *st = &pl->stages[s];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "stage", (double)s);
    cJSON_AddNumberToObject(o, "first_layer", (double)st->first_layer);
    cJSON_AddNumberToObject(o, "layers", (double)st->num_layers);
    cJSON_AddNumberToObject(o, "ckpt_layers", (double)st->num_recomputed);
    cJSON *rec = cJSON_AddArrayToObject(o, "recomputed");
    for (int64_t k = 0; k < st->num_recomputed; k++)
      cJSON_AddItemToArray(rec, cJSON_CreateNumber((double)st->recomputed[k]));
    /* of those, the middle ones (a reader that knows nothing of them
     * recomputes them fully, which fits too) */
    cJSON_AddNumberToObject(o, "middle_layers", (double)st->num_middle);
    cJSON *mid = cJSON_AddArrayToObject(o, "middle");
    for (int64_t k = 0; k < st->num_recomputed; k++)
      if (pl->policy && pl->policy[st->recomputed[k]] == REMAT_MIDDLE)
        cJSON_AddItemToArray(mid, cJSON_CreateNumber((double)st->recomputed[k]));
    /* of those, the ones recomputed in the last k of the stage's slots
     * only, as [layer, k] (a reader that knows nothing of them recomputes
     * them for every micro-batch, which fits too) */
    if (st->num_partial) {
      cJSON *part = cJSON_AddArrayToObject(o, "full_slots");
      for (int64_t k = 0; k < st->num_recomputed; k++) {
        int64_t l = st->recomputed[k];
        if (!pl->full_slots[l]) continue;
        double pair[2] = {(double)l, (double)pl->full_slots[l]};
        cJSON_AddItemToArray(part, cJSON_CreateDoubleArray(pair, 2));
      }
    }
    cJSON_AddNumberToObject(o, "microbatches_held", (double)st->microbatches_held);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)st->memory_bytes);
    cJSON_AddNumberToObject(o, "budget_bytes", (double)st->budget_bytes);
    cJSON_AddNumberToObject(o, "time", st->time);
    cJSON_AddNumberToObject(o, "fwd_time", st->fwd_time);
    cJSON_AddNumberToObject(o, "bwd_time", st->bwd_time);
    if (remat_schedule_get(pl->schedule)->split)
      cJSON_AddNumberToObject(o, "wgrad_held", (double)st->wgrad_held);
    if (st->stream_peak_bytes)
      cJSON_AddNumberToObject(o, "stream_peak_bytes", (double)st->stream_peak_bytes);
    if (pl->chunks > 1) {
      cJSON *ch = cJSON_AddArrayToObject(o, "chunks");
      for (int64_t c = 0; c < pl->chunks; c++) {
        int64_t vs = remat_schedule_virtual_stage(pl->schedule, pl->num_stages, s, c);
        cJSON *co = cJSON_CreateObject();
        cJSON_AddNumberToObject(co, "virtual_stage", (double)vs);
        cJSON_AddNumberToObject(co, "first_layer", (double)pl->chunk_first[vs]);
        cJSON_AddNumberToObject(co, "layers", (double)pl->chunk_layers[vs]);
        cJSON_AddItemToArray(ch, co);
      }
    }
    cJSON_AddItemToArray(stages, o);
  }
  cJSON_AddBoolToObject(root, "feasible", pl->feasible);
  cJSON_AddStringToObject(root, "schedule", remat_plan_schedule_name(pl->schedule));
  if (pl->chunks > 1) cJSON_AddNumberToObject(root, "chunks", (double)pl->chunks);
  cJSON_AddStringToObject(root, "objective", remat_plan_objective_name(pl->objective));
  cJSON_AddNumberToObject(root, "microbatches", (double)pl->microbatches);
  cJSON_AddNumberToObject(root, "num_layers", (double)pl->num_layers);
  cJSON_AddNumberToObject(root, "num_stages", (double)pl->num_stages);
  cJSON_AddNumberToObject(root, "objective_value", pl->objective_value);
  cJSON_AddNumberToObject(root, "bottleneck_time", pl->bottleneck_time);
  cJSON_AddNumberToObject(root, "iteration_time", pl->iteration_time);
  if (pl->simulated_time >= 0) cJSON_AddNumberToObject(root, "simulated_time", pl->simulated_time);
  cJSON_AddNumberToObject(root, "baseline_objective", pl->baseline_objective);
  cJSON_AddNumberToObject(root, "slowdown", pl->slowdown);
  cJSON_AddNumberToObject(root, "total_recomputed", (double)pl->total_recomputed);
  cJSON_AddNumberToObject(root, "total_middle", (double)pl->total_middle);
  if (pl->full_slots) cJSON_AddNumberToObject(root, "total_partial", (double)pl->total_partial);
  cJSON_AddNumberToObject(root, "max_memory_bytes", (double)pl->max_memory_bytes);
  cJSON_AddStringToObject(root, "time_unit", pb->time_unit);
  cJSON_AddStringToObject(root, "source", pb->source);
  if (pb->head_chunk > 0) cJSON_AddNumberToObject(root, "head_chunk", (double)pb->head_chunk);
  if (!pl->optimal) { /* only then, so that exact plans print as before */
    cJSON_AddBoolToObject(root, "optimal", 0);
    cJSON_AddNumberToObject(root, "lower_bound", pl->lower_bound);
    cJSON_AddNumberToObject(root, "gap", pl->gap);
  }
  if (!pl->feasible) {
    if (pb->uniform_memory)
      cJSON_AddNumberToObject(root, "min_budget_bytes", (double)pl->min_budget_bytes);
    cJSON_AddNumberToObject(root, "min_extra_bytes", (double)pl->min_extra_bytes);
  }
  int rc = export_json(pb, pl, root, err);
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  if (!s) return remat__errorf(err, REMAT_ENOMEM, "out of memory writing JSON");
  remat__plan_buf b = {0};
  remat__plan_printf(&b, "%s\n", s);
  free(s);
  return finish(&b, out, err);
}

/* ------------------------------------------------------------ torch */

/* torch.distributed.pipelining's class for each schedule, whether it takes
 * a list of stages, and what its order does that remat's does not. */
static const struct {
  const char *cls;
  int multi;
  const char *note;
} torch_schedules[REMAT_SCHED_COUNT] = {
    [REMAT_SCHED_1F1B] = {"Schedule1F1B", 0, NULL},
    [REMAT_SCHED_GPIPE] = {"ScheduleGPipe", 0, NULL},
    [REMAT_SCHED_INTERLEAVED] = {"ScheduleInterleaved1F1B", 1,
                                 "# NOTE: remat's times follow Megatron's interleaved order; "
                                 "torch's ScheduleInterleaved1F1B warms up in its own, so its "
                                 "time may differ.\n"},
    [REMAT_SCHED_ZBH1] = {"ScheduleInterleavedZeroBubble", 1, NULL},
    [REMAT_SCHED_ZBV] = {"ScheduleZBVZeroBubble", 1, NULL},
};

static const char *torch_class(int schedule) {
  return torch_schedules[schedule].cls ? torch_schedules[schedule].cls : "Schedule1F1B";
}

/* The tensor-parallel degree, and how torch splits a stage's layers over
 * its tensor ranks (torch.distributed.tensor.parallel), as the plan's
 * bytes assume: Megatron's layout. */
static void tensor_parallel(remat__plan_buf *b, const remat_plan_job *j) {
  if (j->tensor_parallel <= 1) return;
  remat__plan_printf(b, "tensor_parallel_size = %lld  # the plan's bytes and times are one tensor "
                        "rank's\n", (long long)j->tensor_parallel);
  remat__plan_printf(b, "sequence_parallel = %s\n", j->sequence_parallel ? "True" : "False");
  remat__plan_printf(b,
                     "# On a 2-D DeviceMesh (pp, tp), parallelize each stage's module over the tp "
                     "mesh before\n# PipelineStage: ColwiseParallel on the qkv (q, k, v) and MLP "
                     "input (w1, w3) products,\n# RowwiseParallel on the projections (attention "
                     "out, MLP out), the embedding and the\n# head split over the vocabulary (loss "
                     "parallel)%s.\n",
                     j->sequence_parallel ? ";\n# SequenceParallel on the norms (and dropout), "
                                            "the residual stream on T/t tokens" : "");
}

/* torch.distributed.pipelining: the schedule class, every virtual stage's
 * layers (all of them, in the planner's numbering), the stages each rank
 * builds, and the layers to wrap in activation checkpointing. */
static void torch_pp(remat__plan_buf *b, const remat_plan_problem *pb, const remat_plan *pl) {
  int64_t p = pl->num_stages, v = pl->chunks > 1 ? pl->chunks : 1, n = p * v;
  int multi = torch_schedules[pl->schedule].multi;
  char t1[48];
  remat__plan_printf(b, "# remat plan for torch.distributed.pipelining (torch 2.4 and later; the "
                     "zero-bubble classes only in later releases): %lld ranks, %s, objective "
                     "%s = %s, slowdown %.4g\n", (long long)p,
                     remat_plan_schedule_name(pl->schedule), remat_plan_objective_name(pl->objective),
                     fmt_time(pl->objective_value, t1, sizeof t1), pl->slowdown);
  remat__plan_printf(b, "# Layers in the planner's numbering (");
  int64_t l = 0;
  for (int64_t g = 0; g < pb->num_groups && g < 6; g++) {
    const remat_plan_group *G = &pb->groups[g];
    remat__plan_printf(b, "%s%lld-%lld %s", g ? ", " : "", (long long)l,
                       (long long)(l + G->count - 1), G->name[0] ? G->name : "layer");
    l += G->count;
  }
  remat__plan_printf(b, "%s).\n", pb->num_groups > 6 ? ", ..." : "");
  if (!pl->feasible)
    remat__plan_printf(b, "# WARNING: this arrangement does not fit the memory budget.\n");
  remat__plan_printf(b, "from torch.distributed.pipelining import PipelineStage, %s\n\n",
                     torch_class(pl->schedule));
  remat__plan_printf(b, "num_stages = %lld  # virtual stages: %lld ranks x %lld chunks\n",
                     (long long)n, (long long)p, (long long)v);
  remat__plan_printf(b, "layers_of_stage = [");
  for (int64_t s = 0; s < n; s++)
    remat__plan_printf(b, "%s(%lld, %lld)", s ? ", " : "", (long long)pl->chunk_first[s],
                       (long long)(pl->chunk_first[s] + pl->chunk_layers[s]));
  remat__plan_printf(b, "]  # [first, end) of each stage, model order\nstages_of_rank = [");
  for (int64_t r = 0; r < p; r++) {
    remat__plan_printf(b, "%s[", r ? ", " : "");
    for (int64_t c = 0; c < v; c++)
      remat__plan_printf(b, "%s%lld", c ? ", " : "",
                         (long long)remat_schedule_virtual_stage(pl->schedule, p, r, c));
    remat__plan_printf(b, "]");
  }
  remat__plan_printf(b, "]\ncheckpointed_layers = [");
  int64_t k = 0;
  for (l = 0; l < pl->num_layers; l++)
    if (pl->policy[l] || (pl->full_slots && pl->full_slots[l]))
      remat__plan_printf(b, "%s%lld", k++ ? ", " : "", (long long)l);
  remat__plan_printf(b, "]\nn_microbatches = %lld\n", (long long)pl->microbatches);
  tensor_parallel(b, &pb->job);
  remat__plan_printf(b, "\n");
  remat__plan_printf(b,
                     "# Wrap each checkpointed layer non-reentrantly: torch's zero-bubble "
                     "schedules call\n# torch.autograd.grad(inputs=...), which the reentrant "
                     "checkpoint refuses:\n#   out = torch.utils.checkpoint.checkpoint(layer, x, "
                     "use_reentrant=False)\n");
  remat__plan_printf(b,
                     "# On rank r: for each i in stages_of_rank[r], build the module of layers "
                     "layers_of_stage[i] and\n#   PipelineStage(module, i, num_stages, device)\n");
  if (multi)
    remat__plan_printf(b, "schedule = %s(stages, n_microbatches=n_microbatches, loss_fn=loss_fn)\n",
                       torch_class(pl->schedule));
  else
    remat__plan_printf(b, "schedule = %s(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)\n",
                       torch_class(pl->schedule));
  if (pl->total_middle)
    remat__plan_printf(b, "# NOTE: %lld layer(s) take remat's middle policy, which torch does not "
                          "have; they are listed as checkpointed, which saves more memory and "
                          "takes more time than the plan.\n", (long long)pl->total_middle);
  if (pl->total_partial)
    remat__plan_printf(b, "# NOTE: %lld layer(s) recompute for only some micro-batches in this "
                          "plan; a checkpointed module checkpoints every micro-batch, so they are "
                          "listed as checkpointed: less memory, more time than the plan.\n",
                       (long long)pl->total_partial);
  if (torch_schedules[pl->schedule].note)
    remat__plan_printf(b, "%s", torch_schedules[pl->schedule].note);
  if (remat_schedule_get(pl->schedule)->split)
    remat__plan_printf(b, "# NOTE: torch orders B and W by its own zero-bubble schedule; the "
                          "memory and times here follow remat's streams (docs/plan.md).\n");
}

int remat_plan_format(const remat_plan_problem *pb, const remat_plan *plan, int format, char **out,
                      remat_error *err) {
  *out = NULL;
  if (format == REMAT_PLAN_FORMAT_JSON) return json(pb, plan, out, err);
  remat__plan_buf b = {0};
  if (format == REMAT_PLAN_FORMAT_TABLE) {
    table(&b, pb, plan);
    return finish(&b, out, err);
  }
  if (format == REMAT_PLAN_FORMAT_TORCH) {
    torch_pp(&b, pb, plan);
    return finish(&b, out, err);
  }
  if (format != REMAT_PLAN_FORMAT_COLOSSALAI && format != REMAT_PLAN_FORMAT_MEGATRON)
    return remat__errorf(err, REMAT_EINVAL, "unknown output format %d", format);
  int rc = export_text(pb, plan, format, &b, err);
  if (rc) {
    remat__free(b.s);
    return rc;
  }
  return finish(&b, out, err);
}
