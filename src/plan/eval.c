/* eval.c: the figures of a given arrangement (layers per stage and each
 * layer's policy: kept, recomputed or middle) under the problem's formula: each stage's memory and
 * time, the objective, the baseline and slowdown, the schedule's simulated
 * makespan. The solver's answers and remat_plan_evaluate (for arrangements a
 * framework can express, and for tests) both become a remat_plan here. */
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

/* One stage's figures under the formula: time and forward time in quanta,
 * memory in bytes, layers not kept, middle layers. */
typedef struct {
  int64_t t, fwd, mem, cnt, mid;
} stage_fig;

static stage_fig stage_figures(const remat__plan_inst *in, const int64_t *bounds,
                               const uint8_t *rec, int64_t s) {
  int64_t i = bounds[s], j = bounds[s + 1];
  stage_fig f = {in->pF[j] - in->pF[i], 0, remat__plan_base_memory(in, i, j, s), 0, 0};
  int64_t X = remat__plan_work_max(in, i, j); /* max(Y, X) */
  for (int64_t l = i; l < j; l++) {
    f.fwd += in->fwd[l];
    if (!rec[l]) continue;
    int mid = rec[l] == REMAT_MIDDLE;
    f.t += mid ? in->rm[l] : in->r[l];
    f.mem -= in->n[s] * (in->a[l] - (mid ? in->mb[l] : in->c[l]));
    X = remat__max64(X, mid ? in->xm[l] : in->x[l]);
    f.cnt++;
    f.mid += mid;
  }
  f.mem += X;
  return f;
}

void remat__plan_measure(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                         int64_t *obj, int64_t *cnt, int64_t *maxmem) {
  int64_t sum = 0, tmax = 0, c = 0, mm = 0;
  for (int64_t s = 0; s < in->p; s++) {
    stage_fig f = stage_figures(in, bounds, rec, s);
    sum += f.t;
    tmax = remat__max64(tmax, f.t);
    mm = remat__max64(mm, f.mem);
    c += f.cnt;
  }
  if (obj) *obj = in->objective == REMAT_OBJ_BOTTLENECK ? tmax : sum + (in->m - 1) * tmax;
  if (cnt) *cnt = c;
  if (maxmem) *maxmem = mm;
}

void remat_plan_free(remat_plan *plan) {
  remat__free(plan->stages);
  remat__free(plan->recomputed_all);
  remat__free(plan->policy);
  plan->stages = NULL;
  plan->recomputed_all = NULL;
  plan->policy = NULL;
}

int remat__plan_fill(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                     remat_plan *plan, remat_error *err) {
  memset(plan, 0, sizeof *plan);
  int64_t p = in->p, L = in->L, total = 0;
  for (int64_t l = 0; l < L; l++) total += rec[l] != 0;
  plan->stages = remat__calloc((size_t)p, sizeof *plan->stages);
  plan->recomputed_all = remat__malloc((size_t)(total ? total : 1) * sizeof(int64_t));
  plan->policy = remat__malloc((size_t)L);
  double *fw = remat__malloc((size_t)p * sizeof *fw), *bw = remat__malloc((size_t)p * sizeof *bw);
  if (!plan->stages || !plan->recomputed_all || !plan->policy || !fw || !bw) {
    remat__free(fw);
    remat__free(bw);
    remat_plan_free(plan);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  plan->num_stages = p;
  plan->num_layers = L;
  plan->microbatches = in->m;
  plan->schedule = in->schedule;
  plan->objective = in->objective;
  plan->time_quantum = in->q;
  plan->feasible = 1;
  plan->optimal = 1;
  int64_t k = 0, sum = 0, tmax = 0;
  for (int64_t s = 0; s < p; s++) {
    remat_plan_stage *st = &plan->stages[s];
    stage_fig f = stage_figures(in, bounds, rec, s);
    st->first_layer = bounds[s];
    st->num_layers = bounds[s + 1] - bounds[s];
    st->recomputed = plan->recomputed_all + k;
    st->num_recomputed = f.cnt;
    st->num_middle = f.mid;
    plan->total_middle += f.mid;
    for (int64_t l = bounds[s]; l < bounds[s + 1]; l++) {
      plan->policy[l] = rec[l];
      if (rec[l]) plan->recomputed_all[k++] = l;
    }
    st->microbatches_held = in->n[s];
    st->memory_bytes = (size_t)f.mem;
    st->budget_bytes = (size_t)in->budget[s];
    if (f.mem > in->budget[s]) plan->feasible = 0;
    st->time = (double)f.t * in->q;
    st->fwd_time = (double)f.fwd * in->q;
    st->bwd_time = (double)(f.t - f.fwd) * in->q;
    fw[s] = st->fwd_time;
    bw[s] = st->bwd_time;
    sum += f.t;
    tmax = remat__max64(tmax, f.t);
    if (st->memory_bytes > plan->max_memory_bytes) plan->max_memory_bytes = st->memory_bytes;
  }
  plan->total_recomputed = total;
  plan->bottleneck_time = (double)tmax * in->q;
  plan->iteration_time = (double)(sum + (in->m - 1) * tmax) * in->q;
  plan->objective_value =
      in->objective == REMAT_OBJ_BOTTLENECK ? plan->bottleneck_time : plan->iteration_time;
  int64_t base = remat__plan_baseline(in);
  plan->baseline_objective = (double)base * in->q;
  plan->slowdown = base > 0 ? plan->objective_value / plan->baseline_objective : 1.0;
  plan->lower_bound = plan->objective_value;
  plan->simulated_time = -1;
  if ((double)p * (double)in->m <= 2e7)
    remat_plan_simulate(in->schedule, p, in->m, fw, bw, &plan->simulated_time, NULL);
  remat__free(fw);
  remat__free(bw);
  return 0;
}

int remat_plan_evaluate(const remat_plan_problem *pb, const int64_t *layers_per_stage,
                        const uint8_t *recompute, remat_plan *plan, remat_error *err) {
  memset(plan, 0, sizeof *plan);
  remat__plan_inst in;
  int rc = remat__plan_inst_build(pb, &in, err);
  if (rc) return rc;
  int64_t *bounds = remat__malloc((size_t)(in.p + 1) * sizeof *bounds);
  uint8_t *rec = remat__malloc((size_t)in.L);
  if (!bounds || !rec) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  bounds[0] = 0;
  for (int64_t s = 0; s < in.p; s++) {
    if (layers_per_stage[s] < 1 || layers_per_stage[s] > in.L - bounds[s]) {
      rc = remat__errorf(err, REMAT_EINVAL,
                         "stage %lld has %lld layers: each stage needs at least one and all "
                         "must add up to %lld",
                         (long long)s, (long long)layers_per_stage[s], (long long)in.L);
      goto out;
    }
    bounds[s + 1] = bounds[s] + layers_per_stage[s];
  }
  if (bounds[in.p] != in.L) {
    rc = remat__errorf(err, REMAT_EINVAL, "the stages hold %lld layers, the model has %lld",
                       (long long)bounds[in.p], (long long)in.L);
    goto out;
  }
  for (int64_t l = 0; l < in.L; l++) {
    int pol = recompute ? recompute[l] : REMAT_KEEP;
    if (pol >= REMAT_POLICY_COUNT) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld has unknown policy %d", (long long)l, pol);
      goto out;
    }
    if (pol != REMAT_KEEP && !in.recomp[l]) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld cannot be recomputed", (long long)l);
      goto out;
    }
    if (pol == REMAT_MIDDLE && !in.mid[l]) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld has no middle policy", (long long)l);
      goto out;
    }
    rec[l] = (uint8_t)pol;
  }
  rc = remat__plan_fill(&in, bounds, rec, plan, err);
out:
  remat__free(bounds);
  remat__free(rec);
  remat__plan_inst_free(&in);
  return rc;
}
