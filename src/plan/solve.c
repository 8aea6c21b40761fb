/* solve.c: the exact pipeline planner's driver.
 *
 * A plan is a contiguous partition of the L layers into p non-empty stages
 * and, per stage, a set of recomputed layers. First a time-free pass (fit.c)
 * checks that some partition fits at all; if none does, the answer is the
 * smallest budget that would fit and the arrangement of least memory.
 * Otherwise the partition programs (dp.c) run for the objective on a window:
 * only stages whose forward+backward time F is at most a cap Tcap. A stage
 * outside the window takes longer than Tcap, so once the windowed optimum is
 * at most Tcap (bottleneck) or below sum F + (m - 1)(Tcap + 1) (1f1b) no plan
 * using a longer stage can match it; the windowed optimum also bounds the
 * true optimum, which gives a window that is certain to contain it, so at
 * most two rounds run once a plan fits. The chosen stages' recomputed layers
 * are then rebuilt with set tracking (stage.c) and the plan filled (eval.c). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF REMAT__PLAN_INF
#define MAX_WORK 4e9       /* stage evaluations in a window */
/* Under a time limit the bounds (bound.c) keep time for themselves: about
 * 15 ns per stage evaluation on a 2-core machine, reserved at 100 ns, and
 * at most half the limit. */
#define BOUND_SECONDS_PER_EVAL 100e-9

/* The arrays a search fills and borrows. */
typedef struct {
  int64_t *bounds; /* (p + 1) stage boundaries */
  uint8_t *rec;    /* (L) 1: layer recomputed (or its policy) */
  int64_t *items;  /* (L) scratch of the per-stage sets */
} found;

/* The first window; if nothing fits there, whether anything fits at all.
 * Returns 0 with *fits set and S->Tcap the window, REMAT_EINFEASIBLE with the
 * least-memory arrangement and the smallest delta, or an error. */
static int first_window(remat__plan_solver *S, const found *f, int64_t *delta_out, int *fits,
                        remat_error *err) {
  const remat__plan_inst *in = S->in;
  int64_t TF = remat__plan_minmax_F(in);
  S->delta = 0;
  S->Tcap = in->objective == REMAT_OBJ_1F1B && in->m == 1 ? INF : TF + TF / 4 + 1;
  if (S->Tcap != INF && S->Tcap >= in->pF[in->L]) S->Tcap = INF;
  *fits = remat__plan_reach(S);
  if (*fits) return 0;
  int64_t first = S->Tcap;
  S->Tcap = INF;
  if (first == INF || !remat__plan_reach(S)) {
    if (remat__plan_min_delta(S, delta_out))
      return remat__errorf(err, REMAT_ERANGE,
                           "the time limit ran out while finding the smallest budget that fits "
                           "(no arrangement fits the budgets given); raise the time limit");
    remat__plan_least_memory(S, f->bounds, f->rec);
    return REMAT_EINFEASIBLE;
  }
  S->Tcap = first;
  return 0;
}

/* Each chosen stage's recomputed layers, rebuilt with set tracking. */
static int stage_sets(const remat__plan_solver *S, const found *f, int mode, int64_t cap,
                      remat_error *err) {
  const remat__plan_inst *in = S->in;
  for (int64_t s = 0; s < in->p; s++) {
    int rc = remat__plan_stage_set(in, f->bounds[s], f->bounds[s + 1], s, mode, cap, f->rec,
                                   f->items, S->deadline, err);
    if (rc) return rc;
  }
  return 0;
}

/* One round of the bottleneck objective in a window where a plan fits: 1 and
 * the plan when the window's optimum is the optimum, else 0 and *next a
 * window sure to hold it (INF: none known), or an error below 0. */
static int round_bottleneck(remat__plan_solver *S, const found *f, int64_t *next,
                            remat_error *err) {
  int64_t Tb = INF;
  int rc = remat__plan_pass_minmax(S, &Tb);
  if (rc) return rc;
  if (Tb != INF && (Tb <= S->Tcap || S->Tcap == INF)) {
    int got = remat__plan_pass_fewest(S, Tb, f->bounds);
    if (got < 0) return got;
    REMAT_ASSERT(got == 1);
    if ((rc = stage_sets(S, f, REMAT__PLAN_FEWEST, Tb, err))) return rc;
    return 1;
  }
  if (Tb != INF) *next = Tb;
  return 0;
}

/* The same for the 1F1B iteration time. */
static int round_iteration(remat__plan_solver *S, const found *f, int64_t *next,
                           remat_error *err) {
  const remat__plan_inst *in = S->in;
  remat__plan_result res = {INF, 0, 0, 0, 0};
  int got = remat__plan_pass_iteration(S, f->bounds, &res);
  if (got < 0) return got;
  int64_t m1 = in->m - 1, sumF = in->pF[in->L];
  /* a plan with a stage outside has obj >= sum F + (m - 1) (Tcap + 1) */
  if (got && (S->Tcap == INF || res.obj < sumF + m1 * (S->Tcap + 1))) {
    int rc = stage_sets(S, f, REMAT__PLAN_LEAST_TIME, 0, err);
    return rc ? rc : 1;
  }
  if (got) *next = (res.obj - sumF) / m1;
  return 0;
}

/* The passes of one round in a window where a plan fits, after checking
 * their work and, under a time limit, keeping time for the bounds: 1 when
 * the plan is found, 0 with *next, or an error below 0. */
static int round_fits(remat__plan_solver *S, const found *f, double start, double end,
                      int64_t *next, remat_error *err) {
  const remat__plan_inst *in = S->in;
  double work = remat__plan_window_work(S);
  if (work > MAX_WORK)
    return remat__errorf(err, REMAT_ERANGE,
                         "this problem needs about %.2g stage evaluations (%lld layers, up to "
                         "%lld per stage, %lld stages), beyond the planner's limit of %.0g; "
                         "use coarser layers",
                         work, (long long)in->L, (long long)(in->L - in->p + 1), (long long)in->p,
                         MAX_WORK);
  if (end > 0) {
    double keep = BOUND_SECONDS_PER_EVAL * work;
    S->deadline = end - (keep < (end - start) / 2 ? keep : (end - start) / 2);
  }
  if (in->objective == REMAT_OBJ_BOTTLENECK) return round_bottleneck(S, f, next, err);
  return round_iteration(S, f, next, err);
}

/* The exact search, within [start, end] when end > 0: 0 with the optimal
 * arrangement, REMAT_EINFEASIBLE with the least-memory arrangement and the
 * smallest delta, or an error. When time runs out where a plan fits, the
 * bounds (bound.c) run until `end` and the return is REMAT__PLAN_ETIME with
 * the best plan found and *lower. */
static int solve_core(const remat__plan_inst *in, int64_t *bounds, uint8_t *rec, int64_t *delta_out,
                      int64_t *rounds, int64_t *lower, double start, double end,
                      remat_error *err) {
  int64_t L = in->L, p = in->p;
  if ((p + 1) * (L + 1) > REMAT__PLAN_MAX_CELLS)
    return remat__errorf(err, REMAT_ERANGE,
                         "%lld layers on %lld stages is beyond the planner's table of %lld "
                         "(stage, boundary) pairs; use fewer stages or coarser layers",
                         (long long)L, (long long)p, (long long)REMAT__PLAN_MAX_CELLS);
  remat__plan_solver Sv, *S = &Sv;
  found f = {bounds, rec, remat__malloc((size_t)L * sizeof *f.items)};
  int rc = remat__plan_fit_init(S, in, err);
  if (!rc && !f.items)
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory planning %lld layers", (long long)L);
  if (rc) goto out;
  memset(rec, 0, (size_t)L);
  *rounds = 0;
  *delta_out = 0;
  S->deadline = end;
  int fits;
  if ((rc = first_window(S, &f, delta_out, &fits, err))) goto out;
  for (;;) {
    (*rounds)++;
    REMAT_ASSERT(fits || S->Tcap != INF);
    int64_t next = INF; /* a window sure to hold the optimum, once a plan fits */
    if (fits && (rc = round_fits(S, &f, start, end, &next, err))) {
      if (rc == 1) rc = 0;
      goto out;
    }
    REMAT_ASSERT(S->Tcap != INF);
    if (next != INF && next > S->Tcap) S->Tcap = next; /* sure to hold the optimum */
    else S->Tcap = S->Tcap > INF / 4 ? INF : 2 * S->Tcap + 1;
    if (S->Tcap != INF && S->Tcap >= in->pF[L]) S->Tcap = INF;
    fits = remat__plan_reach(S);
  }
out:
  if (rc == REMAT__PLAN_ETIME) {
    int arc = remat__plan_anytime(S, end, bounds, rec, lower);
    if (arc) rc = arc;
  }
  remat__plan_fit_free(S);
  remat__free(f.items);
  return rc;
}

int remat__plan_solve_inst(const remat__plan_inst *in, int64_t *obj, int64_t *cnt,
                           int64_t *maxmem, int64_t *bounds, uint8_t *recompute,
                           remat_error *err) {
  int64_t *b = bounds ? bounds : remat__malloc((size_t)(in->nv + 1) * sizeof *b);
  uint8_t *r = recompute ? recompute : remat__malloc((size_t)in->L);
  int rc;
  if (!b || !r) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
  } else {
    int64_t delta, rounds, lower;
    rc = in->v > 1 || in->objective == REMAT_OBJ_SIMULATED
             ? remat__plan_chunk_solve(in, b, r, &delta, 0, err)
                   : solve_core(in, b, r, &delta, &rounds, &lower, 0, 0, err);
    REMAT_ASSERT(rc != REMAT__PLAN_ETIME);
    if (rc == 0) remat__plan_measure(in, b, r, obj, cnt, maxmem);
  }
  if (!bounds) remat__free(b);
  if (!recompute) remat__free(r);
  return rc;
}

/* The one-line message of an infeasible problem: the smallest budget that
 * fits (or the bytes every stage lacks) and what each stage then needs. */
static void infeasible_message(const remat_plan_problem *pb, const remat_plan *plan,
                               remat_error *err) {
  int units = remat__plan_units(pb);
  char a[32], b[32], need[256] = "";
  /* each stage's least memory in that arrangement: all when few, else the
   * range */
  if (plan->num_stages <= 8) {
    size_t len = 0;
    for (int64_t s = 0; s < plan->num_stages; s++)
      len += (size_t)snprintf(
          need + len, sizeof need - len, "%s%s", s ? ", " : "",
          remat_format_bytes_in(plan->stages[s].memory_bytes, units, a, sizeof a));
  } else {
    size_t lo = plan->stages[0].memory_bytes, hi = lo;
    for (int64_t s = 1; s < plan->num_stages; s++) {
      if (plan->stages[s].memory_bytes < lo) lo = plan->stages[s].memory_bytes;
      if (plan->stages[s].memory_bytes > hi) hi = plan->stages[s].memory_bytes;
    }
    snprintf(need, sizeof need, "from %s to %s", remat_format_bytes_in(lo, units, a, sizeof a),
             remat_format_bytes_in(hi, units, b, sizeof b));
  }
  if (pb->uniform_memory) {
    remat__errorf(err, REMAT_EINFEASIBLE,
                  "no arrangement fits a budget of %s per stage even with recomputation; the "
                  "smallest budget that fits is %s (%zu bytes), where the stages need at "
                  "least %s",
                  remat_format_bytes_in(pb->memory[0], units, a, sizeof a),
                  remat_format_bytes_in(plan->min_budget_bytes, units, b, sizeof b),
                  plan->min_budget_bytes, need);
  } else {
    remat__errorf(err, REMAT_EINFEASIBLE,
                  "no arrangement fits the per-stage budgets even with recomputation; every "
                  "stage would need %s more (%zu bytes), where the stages need at least %s",
                  remat_format_bytes_in(plan->min_extra_bytes, units, b, sizeof b),
                  plan->min_extra_bytes, need);
  }
}

int remat__plan_solve_exact(const remat_plan_problem *pb, remat_plan *plan, remat_error *err) {
  double start = remat__now();
  memset(plan, 0, sizeof *plan);
  if (!(pb->time_limit >= 0) || pb->time_limit > 1e9)
    return remat__errorf(err, REMAT_ERANGE,
                         "the time limit must be between 0 (none) and 1e9 seconds, not %g",
                         pb->time_limit);
  int64_t v = remat_schedule_chunks(pb->schedule, pb->chunks);
  if (pb->per_microbatch && v > 1)
    return remat__errorf(err, REMAT_EINVAL, "recompute per micro-batch is planned for one chunk "
                         "per stage (1f1b, gpipe or zb-h1), not %s's %lld",
                         remat_plan_schedule_name(pb->schedule), (long long)v);
  remat__plan_inst in;
  int rc = remat__plan_inst_build(pb, &in, err);
  if (rc) return rc;
  int64_t *bounds = remat__malloc((size_t)(in.nv + 1) * sizeof *bounds);
  uint8_t *rec = remat__malloc((size_t)in.L);
  int64_t delta = 0, rounds = 0, lower = 0;
  if (!bounds || !rec) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  double limit = pb->time_limit, end = limit > 0 ? start + limit : 0;
  rc = in.v > 1 || in.objective == REMAT_OBJ_SIMULATED
           ? remat__plan_chunk_solve(&in, bounds, rec, &delta, end, err)
               : solve_core(&in, bounds, rec, &delta, &rounds, &lower, start, end, err);
  int optimal = rc != REMAT__PLAN_ETIME;
  if (rc == REMAT__PLAN_ETIME) rc = 0;
  if (rc && rc != REMAT_EINFEASIBLE) goto out;
  int frc = remat__plan_fill(&in, bounds, rec, plan, err);
  if (frc) {
    rc = frc;
    goto out;
  }
  plan->windows = rounds;
  if (!optimal) {
    plan->optimal = 0;
    plan->lower_bound = (double)lower * in.q;
    plan->gap = plan->objective_value > 0
                    ? (plan->objective_value - plan->lower_bound) / plan->objective_value
                    : 0;
  }
  if (rc == REMAT_EINFEASIBLE) {
    plan->feasible = 0;
    plan->min_extra_bytes = (size_t)delta;
    plan->min_budget_bytes = (size_t)(in.budget[0] + delta);
    infeasible_message(pb, plan, err);
  }
out:
  remat__free(bounds);
  remat__free(rec);
  remat__plan_inst_free(&in);
  return rc;
}
