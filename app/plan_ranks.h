/* plan_ranks.h: remat plan --ranks's table (plan_ranks.c). */
#ifndef REMAT_APP_PLAN_RANKS_H
#define REMAT_APP_PLAN_RANKS_H

#include <stdint.h>

#include "remat.h"

enum { FORMAT_LP = -1 }; /* beside REMAT_PLAN_FORMAT_* */

/* The command line: flags as given, then format, schedule and objective
 * resolved (-1 for schedule and objective: the problem's own). */
typedef struct plan_args {
  const char *problem, *config, *mem, *format, *output, *schedule, *objective, *precision;
  const char *family, *head_chunk_name;
  int64_t B, T, P, M, D, Z, points, chunks, min_blocks, threads;
  int64_t head_chunk; /* tokens; 0 all at once; -1 auto (the default) */
  double time_limit;
  int sweep, no_middle, per_mb, sp, spend_pools;
  int64_t tp;        /* --tensor-parallel (0: none) */
  const char *link;  /* --link tp=GB/s[,pp=GB/s][,dp=GB/s] */
  double link_tp, link_pp, link_dp, rank_tflops; /* bytes/s of each link; TFLOP/s of a rank */
  int link_measured; /* --link measured: the levels not given, measured between mpirun's ranks */
  int link_ranks;    /* how many ranks measured them (0: given) */
  int64_t ranks, global_batch, node; /* --ranks, --global-batch, --node-ranks */
  int every; /* --every-layout: solve each layout, none bounded out */
  int64_t calibrate; /* rounds of remat_calibrate (0: FLOP-based times) */
  int fmt, sched, obj, prec;
} plan_args;


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

/* --ranks's flags: the search sets what the layout is made of, the rest as
 * for one layout. 0, or -1 after saying what was wrong (a usage error). */
int plan_ranks_check(plan_args *a);
/* --ranks: the layout search, whose fastest layout's settings it writes
 * into a for the plan below it; with --format json *layouts_json gets the
 * rows (owned). 0, or a CLI exit status after saying why. */
int plan_ranks_search(plan_args *a, const remat_budgets *budgets, char **layouts_json);

/* --link measured: every rank mpirun started measures the links with
 * remat's collectives (remat_dist_measure_links, at the message sizes of
 * the shape's layers), and the levels --link does not give take their
 * rates; *d the ranks, which the caller ends (remat_dist_destroy) after
 * planning on rank 0, and at once on the others. 0, or an exit status. */
int plan_links_measure(plan_args *a, remat_dist **d);

#endif
