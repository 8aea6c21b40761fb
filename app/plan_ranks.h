/* plan_ranks.h: remat plan --ranks's table (plan_ranks.c). */
#ifndef REMAT_APP_PLAN_RANKS_H
#define REMAT_APP_PLAN_RANKS_H

#include <stdint.h>

#include "remat.h"

/* The search's summary and rows, owned (NULL when out of memory): the
 * `shown` fastest layouts that fit, and every one on the Pareto front of
 * time (in `unit`) against a rank's memory. */
char *plan_ranks_table(const remat_layout_query *q, const remat_layout_search *s,
                       const char *unit, int64_t shown);

/* Runs the search, prints its table (on standard output, else on standard
 * error: the output is an export's), or with json sets *json to it as JSON
 * (owned), and sets *best to the fastest layout that fits: 0, or
 * CLI_EXIT_RUN after saying why. */
int plan_ranks_run(const remat_layout_query *q, int to_stdout, char **json, remat_layout *best);
/* The plan's JSON with the layouts' as its last field, "layouts" (owned;
 * NULL when out of memory or plan_json is no object). */
char *plan_ranks_join(const char *plan_json, const char *layouts);

#endif
