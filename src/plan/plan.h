/* plan.h: the planner's internals shared by its files and tests. The public
 * API and the memory and time formula are in include/remat.h, section
 * "pipeline plan". */
#ifndef REMAT_PLAN_INTERNAL_H
#define REMAT_PLAN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "remat.h"

/* ------------------------------------------------------------ internal */

/* The problem expanded to one entry per layer, times quantised, bytes as
 * int64 (every memory expression is below 2^61). Shared with the tests. */
typedef struct remat__plan_inst {
  int64_t L, p, m;
  int schedule, objective;
  double q;          /* time quantum */
  int64_t *fb;       /* (L) f + b in quanta */
  int64_t *fwd;      /* (L) f in quanta */
  int64_t *r;        /* (L) recompute time in quanta */
  int64_t *a, *c, *x, *w; /* (L) bytes */
  uint8_t *recomp;   /* (L) 1 if the layer may recompute */
  uint8_t *cand;     /* (L) 1 if recomputing can lower memory: recomputable, a > c */
  int64_t *n;        /* (p) micro-batches held */
  int64_t *budget;   /* (p) */
  int64_t stage_bytes;
  /* prefix sums over layers, (L + 1) each */
  int64_t *pF, *pA, *pW, *pD, *pCand;
  /* candidates only: first candidate at or after l; for a candidate, the
   * first later candidate of a different (a - c, r, x) kind, and the first
   * later candidate with a different x */
  int64_t *first_cand, *kind_end, *x_end;
  /* stage classes: stages with equal (n, budget) share every answer */
  int64_t ncls;
  int64_t *cls; /* (p) */
} remat__plan_inst;

int remat__plan_inst_build(const remat_plan_problem *pb, remat__plan_inst *in, remat_error *err);
void remat__plan_inst_free(remat__plan_inst *in);

/* One stage's best choice of recomputed layers. */
typedef struct remat__plan_stagev {
  int64_t t;   /* stage time in quanta */
  int64_t cnt; /* recomputed layers */
  int64_t mem; /* bytes */
} remat__plan_stagev;

/* Exact brute force over all partitions and all recompute subsets; for tests
 * of at most ~16 layers. Returns 0 and the optimum (objective in quanta,
 * recomputed layers, max memory) or REMAT_EINFEASIBLE. */
int remat__plan_brute(const remat__plan_inst *in, int64_t *obj, int64_t *cnt, int64_t *maxmem);
/* The optimum as the solver sees it (for comparison with the brute force). */
int remat__plan_solve_inst(const remat__plan_inst *in, int64_t *obj, int64_t *cnt,
                           int64_t *maxmem, int64_t *bounds, uint8_t *recompute,
                           remat_error *err);
/* The baseline objective: best partition without recomputation, memory
 * ignored (the denominator of the slowdown), in quanta. */
int64_t remat__plan_baseline(const remat__plan_inst *in);
/* The smallest budget (one for all stages) at which a plan without any
 * recomputation reaches the baseline objective. */
int remat__plan_no_recompute_budget(const remat__plan_inst *in, int64_t *bytes);
/* Smallest memory stage s can reach on layers [i, j). */
int64_t remat__plan_min_memory(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s);

/* The exact per-stage subproblem: which of a stage's layers to recompute.
 * Items are the candidate layers (d = a - c > 0, r, x). For every threshold v
 * among the items' x, and for every count k of recomputed items (or for all
 * counts together, keyed by (r, k)), the engine keeps the Pareto set of
 * subsets of items with x <= v: time r against saved bytes D, each set once
 * with its actual largest x. A query with n micro-batches and excess E (bytes
 * over budget with everything kept) asks for subsets with n D - v >= E; every
 * subset R is represented, or dominated, in the list of its own threshold
 * v = max x over R, where the assumed and the actual scratch agree, so the
 * answers are exact. Items are added one at a time as a stage grows. */
typedef struct remat__kpt {
  int64_t r;    /* recompute time, quanta */
  int64_t D;    /* bytes saved per micro-batch: sum of a - c */
  int64_t X;    /* actual largest x of the set (0 if empty) */
  int32_t cnt;  /* items in the set */
  int32_t node; /* into the node arena when tracking, else -1 */
} remat__kpt;

typedef struct remat__klist {
  remat__kpt *p;
  int64_t n, cap;
} remat__klist;

typedef struct remat__kthr {
  int64_t v;           /* threshold on x */
  int64_t nlev, levcap;
  remat__klist *lev;   /* by count when levels, else one list */
} remat__kthr;

typedef struct remat__knap {
  int levels, track;
  remat__kthr *thr;
  int64_t nthr, thrcap;
  remat__klist tmp;           /* merge buffer */
  int64_t *node_item;         /* tracking: the item a node added ... */
  int32_t *node_parent;       /* ... and the set it was added to */
  int64_t nnode, nodecap;
  int64_t points, limit;      /* stored points, and the most allowed */
} remat__knap;

typedef struct remat__knap_res {
  int64_t r, cnt, memrel; /* memrel = X - n D: add to the all-kept memory */
  int32_t node;
} remat__knap_res;

void remat__knap_init(remat__knap *k, int levels, int track, int64_t limit);
void remat__knap_reset(remat__knap *k);
void remat__knap_free(remat__knap *k);
/* 0, REMAT_ENOMEM, or REMAT_ERANGE when the sets exceed k->limit points. */
int remat__knap_insert(remat__knap *k, int64_t d, int64_t r, int64_t x, int64_t item);
/* Least (r, count, memory) with n D - X >= E (E > 0). Returns 1 if found. */
int remat__knap_min_time(const remat__knap *k, int64_t n, int64_t E, remat__knap_res *res);
/* Least (count, memory) with n D - X >= E and r <= cap; needs levels. */
int remat__knap_min_count(const remat__knap *k, int64_t n, int64_t E, int64_t cap,
                          remat__knap_res *res);
/* The items of a tracked result, ascending; returns how many. */
int64_t remat__knap_items(const remat__knap *k, int32_t node, int64_t *items);

/* Byte counts for people: binary units (GiB) when every budget is a whole
 * number of MiB, as from --mem 20GiB, else decimal (GB), as in "20e9". */
int remat__plan_binary_units(const remat_plan_problem *pb);
const char *remat__plan_fmt_bytes(size_t bytes, int binary, char *buf, size_t cap);

/* Growable text buffer for the writers. */
typedef struct remat__plan_buf {
  char *s;
  size_t len, cap;
  int oom;
} remat__plan_buf;
void remat__plan_printf(remat__plan_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
