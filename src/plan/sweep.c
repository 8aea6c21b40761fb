/* sweep.c: the frontier of time against memory: the best objective for a
 * range of budgets (one for all stages), from the smallest budget that fits at
 * all to the smallest at which nothing needs recomputing, both found exactly. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF REMAT__PLAN_INF

/* The smallest budget (one for all stages) at which a plan without any
 * recomputation reaches the baseline objective: a DP over (stage, boundary)
 * for the least peak among partitions within the baseline's stage time. */
static int no_recompute_budget(const remat__plan_inst *in, int64_t *bytes) {
  int64_t L = in->L, p = in->p, L1 = L + 1;
  if ((p + 1) * L1 > REMAT__PLAN_MAX_CELLS) return REMAT_ERANGE;
  int64_t cap = in->objective == REMAT_OBJ_1F1B && in->m == 1 ? INF : remat__plan_minmax_F(in);
  int64_t *M = remat__malloc((size_t)(p + 1) * (size_t)L1 * sizeof *M);
  if (!M) return REMAT_ENOMEM;
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)L1; k++) M[k] = INF;
  M[0] = 0;
  for (int64_t s = 0; s < p; s++)
    for (int64_t i = s; i < L; i++) {
      int64_t b = M[s * L1 + i];
      if (b == INF) continue;
      int64_t jend = remat__plan_window_end(in, i, cap), jmax = L - (p - 1 - s);
      if (jend > jmax) jend = jmax;
      int64_t Y = 0;
      for (int64_t j = i + 1; j <= jend; j++) {
        Y = remat__max64(Y, in->y[j - 1]);
        int64_t v = remat__max64(b, remat__plan_base_memory(in, i, j, s) + Y);
        if (v < M[(s + 1) * L1 + j]) M[(s + 1) * L1 + j] = v;
      }
    }
  *bytes = M[p * L1 + L];
  remat__free(M);
  return *bytes == INF ? REMAT_EINFEASIBLE : 0;
}

void remat_plan_sweep_free(remat_plan_sweep *sw) {
  remat__free(sw->points);
  remat__free(sw->storage);
  memset(sw, 0, sizeof *sw);
}

int remat_plan_sweep_run(const remat_plan_problem *pb, int64_t points, remat_plan_sweep *sw,
                         remat_error *err) {
  memset(sw, 0, sizeof *sw);
  int rc = remat_plan_problem_check(pb, err);
  if (rc) return rc;
  char names[96];
  if (remat_schedule_chunks(pb->schedule, pb->chunks) > 1)
    return remat__errorf(err, REMAT_EINVAL, "a sweep runs under %s; plan %s one budget at a time",
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ONE_CHUNK,
                                              "and"),
                         remat_plan_schedule_name(pb->schedule));
  if (pb->objective == REMAT_OBJ_SIMULATED)
    return remat__errorf(err, REMAT_EINVAL, "a sweep runs the bottleneck and 1f1b objectives; "
                         "plan the simulated one a budget at a time");
  for (int64_t s = 1; s < pb->stages; s++)
    if (pb->memory[s] != pb->memory[0])
      return remat__errorf(err, REMAT_EINVAL,
                           "a sweep varies one budget for all stages; this problem gives a "
                           "different budget per stage; give one budget for all");
  if (points < 2 || points > 1000)
    return remat__errorf(err, REMAT_ERANGE, "a sweep takes between 2 and 1000 points, not %lld",
                         (long long)points);
  remat_plan_problem q;
  if ((rc = remat_plan_problem_copy(&q, pb, err))) return rc;
  remat_plan plan;

  /* Smallest budget that fits: solve with nothing and read the answer. */
  remat_plan_problem_set_memory(&q, 0);
  size_t lo = 0;
  rc = remat_plan_solve(&q, &plan, err);
  if (rc == REMAT_EINFEASIBLE) lo = plan.min_budget_bytes;
  if (rc == 0 || rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
  if (rc && rc != REMAT_EINFEASIBLE) goto out;

  remat__plan_inst in;
  if ((rc = remat__plan_inst_build(&q, &in, err))) goto out;
  int64_t hi64;
  int hrc = no_recompute_budget(&in, &hi64);
  int64_t base = remat__plan_baseline(&in);
  double q_unit = in.q;
  remat__plan_inst_free(&in);
  if (hrc) {
    rc = remat__errorf(err, hrc == REMAT_ENOMEM ? REMAT_ENOMEM : REMAT_ERANGE,
                       "cannot bound the sweep for this problem (too many stages x layers)");
    goto out;
  }
  size_t hi = (size_t)hi64 > lo ? (size_t)hi64 : lo;
  sw->min_budget_bytes = lo;
  sw->no_recompute_bytes = hi;
  sw->baseline_objective = (double)base * q_unit;
  sw->num_stages = pb->stages;
  if (hi == lo) points = 1;
  for (int64_t g = 0; g < pb->num_groups; g++) sw->middle |= pb->groups[g].middle;
  sw->points = remat__calloc((size_t)points, sizeof *sw->points);
  sw->storage = remat__malloc((size_t)points * 3 * (size_t)pb->stages * sizeof *sw->storage);
  if (!sw->points || !sw->storage) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  for (int64_t k = 0; k < points; k++) {
    size_t B = k == points - 1 ? hi
                               : lo + (size_t)((double)(hi - lo) * (double)k / (double)(points - 1));
    remat_plan_problem_set_memory(&q, B);
    rc = remat_plan_solve(&q, &plan, err);
    if (rc) {
      if (rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
      goto out;
    }
    remat_plan_sweep_point *pt = &sw->points[k];
    pt->budget_bytes = B;
    pt->objective_value = plan.objective_value;
    pt->slowdown = plan.slowdown;
    pt->total_recomputed = plan.total_recomputed;
    pt->max_memory_bytes = plan.max_memory_bytes;
    pt->optimal = plan.optimal;
    pt->lower_bound = plan.lower_bound;
    pt->layers_per_stage = sw->storage + (size_t)k * 3 * (size_t)pb->stages;
    pt->ckpt_per_stage = pt->layers_per_stage + pb->stages;
    pt->middle_per_stage = pt->ckpt_per_stage + pb->stages;
    for (int64_t s = 0; s < pb->stages; s++) {
      pt->layers_per_stage[s] = plan.stages[s].num_layers;
      pt->ckpt_per_stage[s] = plan.stages[s].num_recomputed;
      pt->middle_per_stage[s] = plan.stages[s].num_middle;
    }
    remat_plan_free(&plan);
    sw->num_points = k + 1;
  }
  rc = 0;
out:
  remat_plan_problem_free(&q);
  if (rc) remat_plan_sweep_free(sw);
  return rc;
}

static void counts(remat__plan_buf *b, const int64_t *v, int64_t n) {
  for (int64_t s = 0; s < n; s++) remat__plan_printf(b, "%s%lld", s ? "/" : "", (long long)v[s]);
}

int remat_plan_format_sweep(const remat_plan_problem *pb, const remat_plan_sweep *sw, int json,
                            char **out, remat_error *err) {
  *out = NULL;
  remat__plan_buf b = {0};
  if (json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "objective", remat_plan_objective_name(pb->objective));
    cJSON_AddNumberToObject(root, "min_budget_bytes", (double)sw->min_budget_bytes);
    cJSON_AddNumberToObject(root, "no_recompute_bytes", (double)sw->no_recompute_bytes);
    cJSON_AddNumberToObject(root, "baseline_objective", sw->baseline_objective);
    cJSON *arr = cJSON_AddArrayToObject(root, "points");
    for (int64_t k = 0; k < sw->num_points; k++) {
      const remat_plan_sweep_point *pt = &sw->points[k];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "budget_bytes", (double)pt->budget_bytes);
      cJSON_AddNumberToObject(o, "objective_value", pt->objective_value);
      cJSON_AddNumberToObject(o, "slowdown", pt->slowdown);
      cJSON_AddNumberToObject(o, "total_recomputed", (double)pt->total_recomputed);
      cJSON_AddNumberToObject(o, "max_memory_bytes", (double)pt->max_memory_bytes);
      if (!pt->optimal) {
        cJSON_AddBoolToObject(o, "optimal", 0);
        cJSON_AddNumberToObject(o, "lower_bound", pt->lower_bound);
      }
      cJSON *l = cJSON_AddArrayToObject(o, "layers_per_stage");
      cJSON *c = cJSON_AddArrayToObject(o, "ckpt_per_stage");
      cJSON *md = cJSON_AddArrayToObject(o, "middle_per_stage");
      for (int64_t s = 0; s < sw->num_stages; s++) {
        cJSON_AddItemToArray(l, cJSON_CreateNumber((double)pt->layers_per_stage[s]));
        cJSON_AddItemToArray(c, cJSON_CreateNumber((double)pt->ckpt_per_stage[s]));
        cJSON_AddItemToArray(md, cJSON_CreateNumber((double)pt->middle_per_stage[s]));
      }
      cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) return remat__errorf(err, REMAT_ENOMEM, "out of memory writing JSON");
    remat__plan_printf(&b, "%s\n", s);
    free(s);
  } else {
    char t1[32], t2[32];
    int units = remat__plan_units(pb);
    remat__plan_printf(&b,
                       "sweep of one budget for all %lld stages, objective %s: fits from %s, "
                       "needs no recomputation from %s\n",
                       (long long)sw->num_stages, remat_plan_objective_name(pb->objective),
                       remat_format_bytes_in(sw->min_budget_bytes, units, t1, sizeof t1),
                       remat_format_bytes_in(sw->no_recompute_bytes, units, t2, sizeof t2));
    remat__plan_printf(&b, "%14s %16s %14s %9s %10s %14s  %s\n", "budget", "budget_bytes",
                       "objective", "slowdown", "recomputed", "peak",
                       sw->middle ? "layers | ckpt | of them middle, per stage"
                                  : "layers | ckpt per stage");
    for (int64_t k = 0; k < sw->num_points; k++) {
      const remat_plan_sweep_point *pt = &sw->points[k];
      remat__plan_printf(&b, "%14s %16zu %14.6g %9.4f %10lld %14s  ",
                         remat_format_bytes_in(pt->budget_bytes, units, t1, sizeof t1),
                         pt->budget_bytes,
                         pt->objective_value, pt->slowdown, (long long)pt->total_recomputed,
                         remat_format_bytes_in(pt->max_memory_bytes, units, t2, sizeof t2));
      counts(&b, pt->layers_per_stage, sw->num_stages);
      remat__plan_printf(&b, " | ");
      counts(&b, pt->ckpt_per_stage, sw->num_stages);
      if (sw->middle) {
        remat__plan_printf(&b, " | ");
        counts(&b, pt->middle_per_stage, sw->num_stages);
      }
      if (!pt->optimal)
        remat__plan_printf(&b, "  (time limit: lower bound %.6g)", pt->lower_bound);
      remat__plan_printf(&b, "\n");
    }
  }
  if (b.oom || !b.s) {
    remat__free(b.s);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory writing the sweep");
  }
  *out = b.s;
  return 0;
}
