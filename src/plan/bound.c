/* bound.c: what the planner answers when its time limit stops the exact
 * search: the best feasible plan it finds in polynomial time and a proven
 * lower bound on the optimum.
 *
 * A layer's options (recompute, middle) are points (d, r) beside keeping it
 * at (0, 0); the lower convex hull of these points is the cheapest time for
 * any fraction of saving, and its edges, increments of ascending r / d, are
 * the items below (one or two per layer). Every stage the partition
 * programs would consider gets two figures, in O(log L) each as the stage
 * grows: an upper bound, the time of a choice that fits (items in order of
 * time per byte saved, the shortest prefix that fits even if its scratch
 * were the stage's largest; a prefix takes a layer's items in order, so it
 * is a choice of one option per layer), and a lower bound, the fractional
 * relaxation (the same order, the last item taken in part, scratch ignored),
 * the linear relaxation of the multiple-choice knapsack, which no choice
 * that fits can beat: a choice that fits saves n D >= E bytes, and among
 * fractional choices saving that much the greedy one over the hull's edges
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

/* The items (hull edges) in order of r / d ascending (ties by item), as
 * leaves of a segment tree holding, for the present ones, the sums of d and
 * r and the largest x. Item k of layer l is 2 l + k: its increment (d, r)
 * and the option it ends at (x, pol). */
typedef struct {
  int64_t size;
  int64_t *d, *r, *x; /* (2 size) */
  int64_t *rank;      /* (2 L) leaf of an item, -1 for none */
  int64_t *item;      /* (items) the item of each leaf */
  int64_t *id, *ir, *ix; /* (2 L) each item's d, r and x */
  uint8_t *ipol;         /* (2 L) the remat_policy of the option it ends at */
} rtree;

typedef struct {
  int64_t r, d, layer; /* layer: the item */
} ratio_key;

/* r / d ascending, exactly (the products need 122 bits), then by item. */
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
  remat__free(t->item);
  remat__free(t->id);
  remat__free(t->ir);
  remat__free(t->ix);
  remat__free(t->ipol);
  memset(t, 0, sizeof *t);
}

/* The options of layer l on the lower convex hull from (0, 0), ascending d,
 * into h; returns how many. An option that saves no more than another for
 * more time, or lies on or above the segment from (0, 0) to another, is not
 * on it; the slopes of the edges then strictly ascend. */
static int hull(const remat__plan_inst *in, int64_t l, const remat__plan_opt *h[2]) {
  const remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * l];
  if (in->nopt[l] == 1) {
    h[0] = &o[0];
    return 1;
  }
  const remat__plan_opt *p = &o[0], *q = &o[1];
  if (q->d < p->d || (q->d == p->d && q->r < p->r)) {
    p = &o[1];
    q = &o[0];
  }
  if (p->d == q->d || q->r <= p->r) { /* one dominates the other */
    h[0] = p->d == q->d ? p : q;
    return 1;
  }
  /* p is on the hull if the slope to it is below the slope from it to q */
  if ((__int128)p->r * (q->d - p->d) < (__int128)(q->r - p->r) * p->d) {
    h[0] = p;
    h[1] = q;
    return 2;
  }
  h[0] = q;
  return 1;
}

static int rt_init(rtree *t, const remat__plan_inst *in) {
  memset(t, 0, sizeof *t);
  size_t L2 = (size_t)(in->L ? 2 * in->L : 1);
  int64_t nc = 0;
  t->rank = remat__malloc(L2 * sizeof *t->rank);
  t->id = remat__calloc(L2, sizeof *t->id);
  t->ir = remat__calloc(L2, sizeof *t->ir);
  t->ix = remat__calloc(L2, sizeof *t->ix);
  t->ipol = remat__calloc(L2, 1);
  ratio_key *keys = remat__malloc(L2 * sizeof *keys);
  if (!t->rank || !t->id || !t->ir || !t->ix || !t->ipol || !keys) {
    remat__free(keys);
    rt_free(t);
    return REMAT_ENOMEM;
  }
  for (int64_t l = 0; l < in->L; l++) {
    t->rank[2 * l] = t->rank[2 * l + 1] = -1;
    if (!in->cand[l]) continue;
    const remat__plan_opt *h[2];
    int nh = hull(in, l, h);
    for (int k = 0; k < nh; k++) {
      int64_t it = 2 * l + k;
      t->id[it] = h[k]->d - (k ? h[k - 1]->d : 0);
      t->ir[it] = h[k]->r - (k ? h[k - 1]->r : 0);
      t->ix[it] = h[k]->x;
      t->ipol[it] = (uint8_t)h[k]->pol;
      keys[nc++] = (ratio_key){t->ir[it], t->id[it], it};
    }
  }
  t->size = 1;
  while (t->size < nc) t->size *= 2;
  t->d = remat__calloc((size_t)(2 * t->size), sizeof *t->d);
  t->r = remat__calloc((size_t)(2 * t->size), sizeof *t->r);
  t->x = remat__calloc((size_t)(2 * t->size), sizeof *t->x);
  t->item = remat__malloc((size_t)(nc ? nc : 1) * sizeof *t->item);
  if (!t->d || !t->r || !t->x || !t->item) {
    remat__free(keys);
    rt_free(t);
    return REMAT_ENOMEM;
  }
  qsort(keys, (size_t)nc, sizeof *keys, ratio_cmp);
  for (int64_t q = 0; q < nc; q++) {
    t->item[q] = keys[q].layer;
    t->rank[keys[q].layer] = q;
  }
  remat__free(keys);
  return 0;
}

static void rt_set(rtree *t, int64_t l, int on) {
  for (int64_t it = 2 * l; it < 2 * l + 2; it++) {
    if (t->rank[it] < 0) continue;
    int64_t k = t->rank[it] + t->size;
    t->d[k] = on ? t->id[it] : 0;
    t->r[k] = on ? t->ir[it] : 0;
    t->x[k] = on ? t->ix[it] : 0;
    for (k /= 2; k >= 1; k /= 2) {
      t->d[k] = t->d[2 * k] + t->d[2 * k + 1];
      t->r[k] = t->r[2 * k] + t->r[2 * k + 1];
      t->x[k] = remat__max64(t->x[2 * k], t->x[2 * k + 1]);
    }
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
  if (remat__plan_saving_all(in, s, i, j, D) < E) return;
  int64_t fc = in->first_cand[i];
  if (in->kind_end[fc] >= j) { /* one kind: exact */
    int64_t k0, k1, tk, memrel;
    if (remat__plan_alike(in, fc, in->pCand[j] - in->pCand[i], s, E, Y, REMAT__PLAN_LEAST_TIME,
                          0, &k0, &k1, &tk, &memrel))
      *ub = *lb = F + tk;
    return;
  }
  /* the ratio order counts savings per micro-batch: the lower bound takes
   * every candidate's W records (kw u) as saved already, the upper set none */
  int64_t whole, part, El = E - in->kw[s] * (in->pUc[j] - in->pUc[i]);
  part = 0;
  if (El > 0) rt_prefix(t, (El + n - 1) / n, &whole, &part);
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

/* The upper bound's choice of stage s on [i, j) into rec: for one kind of
 * candidate the closed form's, else the shortest prefix in ratio order that
 * fits with the stage's largest scratch. items: room for 2 (j - i). */
static void stage_set(const remat__plan_inst *in, const rtree *t, int64_t i, int64_t j, int64_t s,
                      uint8_t *rec, int64_t *items) {
  int64_t n = in->n[s], Y = remat__plan_work_max(in, i, j);
  int64_t E = remat__plan_base_memory(in, i, j, s) + Y - in->budget[s];
  if (E <= 0) return;
  int64_t fc = in->first_cand[i];
  if (in->kind_end[fc] >= j) {
    int64_t k0, k1, tt, memrel, k = 0;
    int ok = remat__plan_alike(in, fc, in->pCand[j] - in->pCand[i], s, E, Y,
                               REMAT__PLAN_LEAST_TIME, 0, &k0, &k1, &tt, &memrel);
    REMAT_ASSERT(ok);
    for (int64_t l = i; l < j && k < k0 + k1; l++)
      if (in->cand[l]) rec[l] = (uint8_t)remat__plan_alike_pol(in, l, k++, k0, k0 + k1);
    return;
  }
  int64_t k = 0, X = 0;
  for (int64_t it = 2 * i; it < 2 * j; it++)
    if (t->rank[it] >= 0) {
      items[k++] = t->rank[it];
      X = remat__max64(X, t->ix[it]);
    }
  qsort(items, (size_t)k, sizeof *items, cmp64);
  int64_t need = (E + above(X, Y) + n - 1) / n, D = 0;
  for (int64_t q = 0; q < k && D < need; q++) {
    int64_t it = t->item[items[q]];
    rec[it / 2] = t->ipol[it]; /* a layer's items come in order: the last one taken */
    D += t->id[it];
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
      rt_set(rt, j - 1, 1);
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
    for (int64_t j = i + 1; j <= jend; j++) rt_set(rt, j - 1, 0);
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
  int64_t *items = remat__malloc((size_t)(L ? 2 * L : 1) * sizeof *items);
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
