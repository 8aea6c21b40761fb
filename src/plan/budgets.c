/* budgets.c: memory budgets as a front end gives them (remat/plan.h), one
 * size for every stage or one per stage, parsed once for remat train and
 * remat plan alike, and the one way they enter a planner's problem. */
#include <stdlib.h>

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
