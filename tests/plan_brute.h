/* plan_brute.h: the planner's oracle for tests: exhaustive search over every
 * partition and every choice (keep, recompute, middle) of every layer,
 * independent of the solver's code. */
#ifndef REMAT_PLAN_BRUTE_H
#define REMAT_PLAN_BRUTE_H

#include <stdint.h>

#include "plan/plan.h"

/* The optimum of an instance of at most 20 layers (in practice ~16, fewer
 * with middle policies: 3^L choices per partition): 0 and (objective in
 * quanta, layers not kept, max stage memory), lexicographically least, or
 * REMAT_EINFEASIBLE when no arrangement fits. */
int plan_brute(const remat__plan_inst *in, int64_t *obj, int64_t *cnt, int64_t *maxmem);
/* The same over the partitions whose every virtual stage holds at least
 * min_blocks blocks (layers that may recompute) and, with fixed, exactly
 * fixed[vs] of them. */
int plan_brute_blocks(const remat__plan_inst *in, int min_blocks, const int64_t *fixed,
                      int64_t *obj, int64_t *cnt, int64_t *maxmem);

#endif
