/* bound.c: what the planner answers when its time limit stops the exact
 * search: the best feasible plan it finds in polynomial time and a proven
 * lower bound on the optimum.
 *
 * Every stage the partition programs would consider gets two figures, in
 * O(log L) each as the stage grows: an upper bound, the time of a set that
 * fits (candidates in order of recompute time per byte saved, the shortest
 * prefix that fits even if its scratch were the stage's largest), and a lower
 * bound, the fractional relaxation (the same order, the last candidate taken
 * in part, scratch ignored), which no set that fits can beat: a set that fits
 * saves n D >= E bytes, and among sets saving that much the greedy fraction
 * costs least. A stage of one kind of candidate gets its exact closed form.
 * Dynamic programs over (stage, boundary) take the least max and the least
 * sum of each figure; the upper ones give plans, whose objectives are
 * measured, the lower ones bound every plan:
 *
 *   bottleneck  OPT >= min over partitions of max_s lb_s
 *   1f1b        OPT >= min sum_s lb_s + (m - 1) min max_s lb_s
 *
 * (each term minimised on its own is no more than at the optimum's
 * partition). Stages longer than the window W are left out; a plan using one
 * has bottleneck > W, or 1f1b objective >= sum F + (m - 1)(W + 1), so the
 * bound is the smaller of that and the windowed one. The least-memory
 * arrangement (fit.c) is the fallback plan, the best split without
 * recomputation (the baseline) the fallback bound. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF REMAT__PLAN_INF
#define AT(arr, s, i) REMAT__AT(S, arr, s, i)
#define MAX_WORK 4e9 /* stage evaluations, as in solve.c */

static int64_t above(int64_t x, int64_t Y) { return x > Y ? x - Y : 0; }

/* ------------------------------------------------------------ ratio order */

/* The candidates in order of r / d ascending (ties by layer), as leaves of a
 * segment tree holding, for the present ones, the sums of d and r and the
 * largest x. */
typedef struct {
  int64_t size;
  int64_t *d, *r, *x; /* (2 size) */
  int64_t *rank;      /* (L) leaf of a candidate layer, -1 for others */
  int64_t *layer;     /* (candidates) the layer of each leaf */
} rtree;

typedef struct {
  int64_t r, d, layer;
} ratio_key;

/* r / d ascending, exactly (the products need 122 bits), then by layer. */
static int ratio_cmp(const void *u, const void *v) {
  const ratio_key *a = u, *b = v;
  __int128 lhs = (__int128)a->r * b->d, rhs = (__int128)b->r * a->d;
  if (lhs != rhs) return lhs < rhs ? -1 : 1;
  return a->layer < b->layer ? -1 : a->layer > b->layer;
}

static void rt_free(rtree *t) {
  remat__free(t->d);
  remat__free(t->r);
  remat__free(t->x);
  remat__free(t->rank);
  remat__free(t->layer);
  memset(t, 0, sizeof *t);
}

static int rt_init(rtree *t, const remat__plan_inst *in) {
  memset(t, 0, sizeof *t);
  int64_t nc = in->pCand[in->L];
  t->size = 1;
  while (t->size < nc) t->size *= 2;
  t->d = remat__calloc((size_t)(2 * t->size), sizeof *t->d);
  t->r = remat__calloc((size_t)(2 * t->size), sizeof *t->r);
  t->x = remat__calloc((size_t)(2 * t->size), sizeof *t->x);
  t->rank = remat__malloc((size_t)in->L * sizeof *t->rank);
  t->layer = remat__malloc((size_t)(nc ? nc : 1) * sizeof *t->layer);
  ratio_key *keys = remat__malloc((size_t)(nc ? nc : 1) * sizeof *keys);
  if (!t->d || !t->r || !t->x || !t->rank || !t->layer || !keys) {
    remat__free(keys);
    rt_free(t);
    return REMAT_ENOMEM;
  }
  int64_t k = 0;
  for (int64_t l = 0; l < in->L; l++) {
    t->rank[l] = -1;
    if (in->cand[l]) keys[k++] = (ratio_key){in->r[l], in->a[l] - in->c[l], l};
  }
  qsort(keys, (size_t)k, sizeof *keys, ratio_cmp);
  for (int64_t q = 0; q < k; q++) {
    t->layer[q] = keys[q].layer;
    t->rank[keys[q].layer] = q;
  }
  remat__free(keys);
  return 0;
}

static void rt_set(rtree *t, const remat__plan_inst *in, int64_t l, int on) {
  if (t->rank[l] < 0) return;
  int64_t k = t->rank[l] + t->size;
  t->d[k] = on ? in->a[l] - in->c[l] : 0;
  t->r[k] = on ? in->r[l] : 0;
  t->x[k] = on ? in->x[l] : 0;
  for (k /= 2; k >= 1; k /= 2) {
    t->d[k] = t->d[2 * k] + t->d[2 * k + 1];
    t->r[k] = t->r[2 * k] + t->r[2 * k + 1];
    t->x[k] = remat__max64(t->x[2 * k], t->x[2 * k + 1]);
  }
}

/* The shortest prefix of the present candidates with D >= need (0 < need <=
 * the present D): its time, and the fractional time of exactly need. */
static void rt_prefix(const rtree *t, int64_t need, int64_t *whole, int64_t *part) {
  int64_t D = 0, R = 0, k = 1;
  while (k < t->size) {
    if (D + t->d[2 * k] >= need) {
      k = 2 * k;
    } else {
      D += t->d[2 * k];
      R += t->r[2 * k];
      k = 2 * k + 1;
    }
  }
  /* leaf k: the candidate that reaches need, of which rem <= d is needed */
  int64_t rem = need - D;
  *whole = R + t->r[k];
  __int128 frac = ((__int128)t->r[k] * rem + t->d[k] - 1) / t->d[k];
  *part = R + (int64_t)frac;
}

/* ------------------------------------------------------------ one stage */

/* Upper and lower bounds on the least time of stage s on [i, j), the
 * present candidates being those of [i, j) and Y its largest work bytes;
 * INF when the stage cannot fit (both) or the upper set does not (ub). */
static void stage_bounds(const remat__plan_inst *in, const rtree *t, int64_t i, int64_t j,
                         int64_t s, int64_t Y, int64_t *ub, int64_t *lb) {
  int64_t n = in->n[s], F = in->pF[j] - in->pF[i];
  int64_t E = remat__plan_base_memory(in, i, j, s) + Y - in->budget[s];
  *ub = *lb = F;
  if (E <= 0) return;
  int64_t D = in->pD[j] - in->pD[i];
  *ub = *lb = INF;
  if (n * D < E) return;
  int64_t fc = in->first_cand[i];
  if (in->kind_end[fc] >= j) { /* one kind: exact */
    int64_t d = in->a[fc] - in->c[fc];
    int64_t k = (E + above(in->x[fc], Y) + n * d - 1) / (n * d);
    if (k <= in->pCand[j] - in->pCand[i]) *ub = *lb = F + k * in->r[fc];
    return;
  }
  int64_t whole, part;
  rt_prefix(t, (E + n - 1) / n, &whole, &part);
  *lb = F + part;
  int64_t need = (E + above(t->x[1], Y) + n - 1) / n;
  if (need <= D) {
    rt_prefix(t, need, &whole, &part);
    *ub = F + whole;
  }
}

static int cmp64(const void *u, const void *v) {
  int64_t a = *(const int64_t *)u, b = *(const int64_t *)v;
  return a < b ? -1 : a > b;
}

/* The upper bound's set of stage s on [i, j) into rec: the shortest prefix
 * in ratio order that fits with the stage's largest scratch. items: room for
 * j - i. */
static void stage_set(const remat__plan_inst *in, const rtree *t, int64_t i, int64_t j, int64_t s,
                      uint8_t *rec, int64_t *items) {
  int64_t n = in->n[s], Y = remat__plan_work_max(in, i, j);
  int64_t E = remat__plan_base_memory(in, i, j, s) + Y - in->budget[s];
  if (E <= 0) return;
  int64_t k = 0, X = 0;
  for (int64_t l = i; l < j; l++)
    if (in->cand[l]) {
      items[k++] = t->rank[l];
      X = remat__max64(X, in->x[l]);
    }
  qsort(items, (size_t)k, sizeof *items, cmp64);
  int64_t need = (E + above(X, Y) + n - 1) / n, D = 0;
  for (int64_t q = 0; q < k && D < need; q++) {
    int64_t l = t->layer[items[q]];
    rec[l] = 1;
    D += in->a[l] - in->c[l];
  }
  REMAT_ASSERT(D >= need);
}

/* ------------------------------------------------------------ programs */

/* Tables over (stage, boundary): least max and least sum of the upper and
 * lower figures, with the arguments of the upper ones. */
typedef struct {
  int64_t *umax, *lmax, *usum, *lsum;
  int32_t *amax, *asum;
} tables;

static void tables_free(tables *T) {
  remat__free(T->umax);
  remat__free(T->lmax);
  remat__free(T->usum);
  remat__free(T->lsum);
  remat__free(T->amax);
  remat__free(T->asum);
}

static int tables_init(tables *T, size_t cells) {
  T->umax = remat__malloc(cells * sizeof *T->umax);
  T->lmax = remat__malloc(cells * sizeof *T->lmax);
  T->usum = remat__malloc(cells * sizeof *T->usum);
  T->lsum = remat__malloc(cells * sizeof *T->lsum);
  T->amax = remat__malloc(cells * sizeof *T->amax);
  T->asum = remat__malloc(cells * sizeof *T->asum);
  if (!T->umax || !T->lmax || !T->usum || !T->lsum || !T->amax || !T->asum) return REMAT_ENOMEM;
  for (size_t k = 0; k < cells; k++) T->umax[k] = T->lmax[k] = T->usum[k] = T->lsum[k] = INF;
  T->umax[0] = T->lmax[0] = T->usum[0] = T->lsum[0] = 0;
  return 0;
}

static void relax_max(int64_t *cur, int32_t *arg, int64_t from, int64_t t, int64_t i) {
  if (from == INF || t == INF) return;
  int64_t v = remat__max64(from, t);
  if (v < *cur) {
    *cur = v;
    if (arg) *arg = (int32_t)i;
  }
}

static void relax_sum(int64_t *cur, int32_t *arg, int64_t from, int64_t t, int64_t i) {
  if (from == INF || t == INF) return;
  if (from + t < *cur) {
    *cur = from + t;
    if (arg) *arg = (int32_t)i;
  }
}

/* Fills the tables for the window S->Tcap (pre and post filled). 0, or
 * REMAT__PLAN_ETIME past the deadline, or REMAT_ENOMEM. */
static int programs(remat__plan_solver *S, rtree *rt, tables *T, double deadline) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p, ncls = in->ncls;
  int64_t *sl = remat__malloc((size_t)p * sizeof *sl);
  int64_t *cu = remat__malloc((size_t)ncls * sizeof *cu); /* per class: upper, lower */
  int64_t *cl = remat__malloc((size_t)ncls * sizeof *cl);
  int64_t *stamp = remat__calloc((size_t)ncls, sizeof *stamp);
  int rc = 0;
  if (!sl || !cu || !cl || !stamp) {
    rc = REMAT_ENOMEM;
    goto out;
  }
  int64_t now = 0;
  for (int64_t i = 0; i < L; i++) {
    if (remat__plan_late(deadline)) {
      rc = REMAT__PLAN_ETIME;
      goto out;
    }
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(S->pre, s, i) && (AT(T->umax, s, i) < INF || AT(T->lmax, s, i) < INF)) sl[ns++] = s;
    if (!ns) continue;
    int64_t jend = remat__plan_window_end(in, i, S->Tcap), Y = 0;
    for (int64_t j = i + 1; j <= jend; j++) {
      rt_set(rt, in, j - 1, 1);
      Y = remat__max64(Y, in->y[j - 1]);
      now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q], k = in->cls[s];
        if (!AT(S->post, s + 1, j)) continue;
        if (stamp[k] != now) {
          stage_bounds(in, rt, i, j, s, Y, &cu[k], &cl[k]);
          stamp[k] = now;
        }
        relax_max(&AT(T->umax, s + 1, j), &AT(T->amax, s + 1, j), AT(T->umax, s, i), cu[k], i);
        relax_max(&AT(T->lmax, s + 1, j), NULL, AT(T->lmax, s, i), cl[k], i);
        relax_sum(&AT(T->usum, s + 1, j), &AT(T->asum, s + 1, j), AT(T->usum, s, i), cu[k], i);
        relax_sum(&AT(T->lsum, s + 1, j), NULL, AT(T->lsum, s, i), cl[k], i);
      }
    }
    for (int64_t j = i + 1; j <= jend; j++) rt_set(rt, in, j - 1, 0);
  }
out:
  remat__free(sl);
  remat__free(cu);
  remat__free(cl);
  remat__free(stamp);
  return rc;
}

/* ------------------------------------------------------------ the answer */

/* Replaces (bounds, rec, *best) by the plan ending in arg's chain if it is
 * better. */
static void try_plan(remat__plan_solver *S, const rtree *rt, const int32_t *arg, int64_t *bounds,
                     uint8_t *rec, int64_t *best, int64_t *tb, uint8_t *trec, int64_t *items) {
  const remat__plan_inst *in = S->in;
  int64_t p = S->p, L = S->L;
  tb[p] = L;
  for (int64_t s = p; s > 0; s--) tb[s - 1] = AT(arg, s, tb[s]);
  memset(trec, 0, (size_t)L);
  for (int64_t s = 0; s < p; s++) stage_set(in, rt, tb[s], tb[s + 1], s, trec, items);
  int64_t obj, maxmem;
  remat__plan_measure(in, tb, trec, &obj, NULL, &maxmem);
  if (obj < *best) {
    *best = obj;
    memcpy(bounds, tb, (size_t)(p + 1) * sizeof *bounds);
    memcpy(rec, trec, (size_t)L);
  }
}

int remat__plan_anytime(remat__plan_solver *S, double deadline, int64_t *bounds, uint8_t *rec,
                        int64_t *lower) {
  const remat__plan_inst *in = S->in;
  rtree rt;
  tables T;
  memset(&T, 0, sizeof T);
  memset(&rt, 0, sizeof rt);
  int64_t L = in->L, p = in->p, m1 = in->m - 1, W = S->Tcap;
  int64_t *tb = remat__malloc((size_t)(p + 1) * sizeof *tb);
  int64_t *items = remat__malloc((size_t)L * sizeof *items);
  uint8_t *trec = remat__malloc((size_t)L);
  int rc = 0;
  if (!tb || !items || !trec || rt_init(&rt, in)) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory bounding the plan");
    goto out;
  }
  /* the fallback: the least-memory arrangement of the window (its tables
   * are filled), and the split without recomputation */
  memset(rec, 0, (size_t)L);
  remat__plan_least_memory(S, bounds, rec);
  int64_t best;
  remat__plan_measure(in, bounds, rec, &best, NULL, NULL);
  *lower = remat__plan_baseline(in);
  if (remat__plan_window_work(S) > MAX_WORK) goto out;
  if (tables_init(&T, (size_t)(p + 1) * (size_t)S->L1)) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory bounding the plan");
    goto out;
  }
  int prc = programs(S, &rt, &T, deadline);
  if (prc == REMAT_ENOMEM) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory bounding the plan");
    goto out;
  }
  if (prc) goto out; /* out of time: the fallback stands */
  if (AT(T.umax, p, L) < INF) try_plan(S, &rt, T.amax, bounds, rec, &best, tb, trec, items);
  if (AT(T.usum, p, L) < INF && in->objective == REMAT_OBJ_1F1B)
    try_plan(S, &rt, T.asum, bounds, rec, &best, tb, trec, items);
  /* a plan inside the window, and one with a stage outside it */
  int64_t lmax = AT(T.lmax, p, L), lsum = AT(T.lsum, p, L), lb = INF, outside = INF;
  if (in->objective == REMAT_OBJ_BOTTLENECK) {
    lb = lmax;
    if (W != INF) outside = W + 1;
  } else {
    if (lmax != INF && lsum != INF) lb = lsum + m1 * lmax;
    if (W != INF) outside = in->pF[L] + m1 * (W + 1);
  }
  if (outside < lb) lb = outside;
  if (lb != INF && lb > *lower) *lower = lb;
  REMAT_ASSERT(*lower <= best);
out:
  tables_free(&T);
  rt_free(&rt);
  remat__free(tb);
  remat__free(items);
  remat__free(trec);
  return rc;
}
