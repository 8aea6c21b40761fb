/* budgets.c: memory budgets as a front end gives them (remat/plan.h), one
 * size for every stage or one per stage, parsed once for remat train and
 * remat plan alike, and the one way they enter a planner's problem; and
 * the planner's answer for one process under one budget, which remat train
 * --mem and a library caller both get. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

int remat_budgets_parse(remat_budgets *b, const char *s, remat_error *err) {
  b->n = 0; /* a front end's input, not a step's: outside the library's heap count */
  b->bytes = malloc(REMAT_PLAN_MAX_STAGES * sizeof *b->bytes);
  if (!b->bytes) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading the budgets");
  int rc = remat_parse_sizes(s, b->bytes, REMAT_PLAN_MAX_STAGES, &b->n, err);
  if (rc) remat_budgets_free(b);
  return rc;
}

void remat_budgets_free(remat_budgets *b) {
  free(b->bytes);
  b->bytes = NULL;
  b->n = 0;
}

int remat_plan_problem_set_budgets(remat_plan_problem *pb, const remat_budgets *b,
                                   remat_error *err) {
  if (b->n == 1) {
    remat_plan_problem_set_memory(pb, b->bytes[0]);
  } else if (b->n > 1 && b->n == pb->stages) {
    for (int64_t s = 0; s < b->n; s++) pb->memory[s] = b->bytes[s];
    pb->uniform_memory = 0;
  } else if (b->n > 1) {
    return remat__errorf(err, REMAT_EINVAL, "%lld memory budgets for %lld stage%s: give one for "
                         "all or one per stage", (long long)b->n, (long long)pb->stages,
                         pb->stages > 1 ? "s" : "");
  }
  return 0;
}

int remat_fewest_recompute(const remat_config *cfg, int64_t B, int64_t T,
                           const remat_stage *whole, size_t budget, uint8_t *policy,
                           int64_t *n_full, int64_t *n_middle, size_t *min_bytes,
                           remat_error *err) {
  remat_stage w = whole ? *whole : remat_stage_whole(cfg, NULL);
  int64_t D = w.replicas > 1 ? w.replicas : 1, L = cfg->num_layers;
  remat_plan_problem pb;
  /* one stage of one micro-batch in flight; two micro-batches stand for any
   * accumulation (its gradient buffers are what it adds) */
  int rc = remat_plan_problem_from_replicas(&pb, cfg, B, T, 1, w.accumulate ? 2 : 1, D, w.zero,
                                            budget, err);
  if (rc) return rc;
  remat_plan plan;
  rc = remat_plan_solve(&pb, &plan, err);
  remat_plan_problem_free(&pb);
  if (rc && rc != REMAT_EINFEASIBLE) return rc;
  /* the planner's layers: 0 the embedding, 1..L the blocks, L+1 the head */
  int64_t full = 0, mid = 0;
  for (int64_t l = 0; l < L; l++) {
    uint8_t p = plan.policy[l + 1];
    full += p == REMAT_RECOMPUTE;
    mid += p == REMAT_MIDDLE;
    if (policy) policy[l] = p;
  }
  if (n_full) *n_full = full;
  if (n_middle) *n_middle = mid;
  if (min_bytes) *min_bytes = rc ? plan.min_budget_bytes : plan.stages[0].memory_bytes;
  remat_plan_free(&plan);
  return rc; /* REMAT_EINFEASIBLE: the planner's message, with the least budget */
}
