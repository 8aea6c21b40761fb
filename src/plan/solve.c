/* solve.c: the exact pipeline planner.
 *
 * A plan is a contiguous partition of the L layers into p non-empty stages
 * and, per stage, a set of recomputed layers. Stage s on layers [i, j) has a
 * best choice that depends only on (i, j, n_s, budget_s), so the partition is
 * a dynamic program over (stage, boundary):
 *
 * bottleneck  Pass 1: Tb = min over partitions of max_s t_s, with each stage
 *             at its least time (least recompute). Pass 2: among partitions
 *             with every t_s <= Tb, the fewest recomputed layers in total,
 *             then the lowest peak, each stage choosing its fewest recomputed
 *             layers within its time allowance Tb - F.
 * 1f1b        sum_s t_s + (m - 1) max_s t_s is not a max or a sum alone. For a
 *             cap T on every stage's time let S(T) be the least sum; then the
 *             optimum is min over T of S(T) + (m - 1) T, and T only needs the
 *             values stage times actually take. S is a non-increasing step
 *             function; a bisection over the sorted candidate values skips
 *             every interval whose lower bound S(hi) + (m - 1) T(lo) is above
 *             the best found, so only a few DPs run. Every T whose value ties
 *             with the optimum is evaluated, so ties break exactly.
 *
 * The DP only looks at stages whose forward+backward time F is at most a cap
 * Tcap (a window). A stage outside the window takes longer than Tcap, so once
 * the windowed optimum is at most Tcap (bottleneck) or at most
 * sum F + (m - 1) Tcap (1f1b) no plan using a longer stage can match it; the
 * windowed optimum also bounds the true optimum, which gives a window that is
 * certain to contain it, so at most two rounds run once a plan fits.
 *
 * Before any of this a time-free pass checks that some partition fits at
 * all (each stage at its least memory); if none does, a bisection on extra
 * bytes per stage finds the smallest budget that would fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF INT64_MAX
#define KNAP_POINT_LIMIT ((int64_t)1 << 25) /* Pareto points held at once */
#define MAX_CELLS ((int64_t)1 << 22)        /* (p + 1) * (L + 1) */
#define MAX_WORK 4e9                        /* stage evaluations in a window */
#define MAX_TABLE ((int64_t)1 << 24)        /* stored stage results (1f1b) */

static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ------------------------------------------------------------ memory */

typedef struct {
  int64_t x, d;
} xd;

static int xd_cmp(const void *u, const void *v) {
  const xd *a = u, *b = v;
  return a->x < b->x ? -1 : a->x > b->x;
}

/* Largest n D - X over recompute sets of [i, j) (0 for the empty set) and,
 * if vbest is given, the threshold on x that reaches it (-1: recompute
 * nothing). The best set with largest scratch v is every candidate with
 * x <= v. scratch: room for j - i pairs, or NULL to allocate. */
static int64_t max_saving(const remat__plan_inst *in, int64_t i, int64_t j, int64_t n, xd *scratch,
                          int64_t *vbest) {
  int64_t D = in->pD[j] - in->pD[i];
  if (vbest) *vbest = -1;
  if (D == 0) return 0;
  int64_t fc = in->first_cand[i];
  if (in->x_end[fc] >= j) {
    int64_t s = n * D - in->x[fc];
    if (s > 0 && vbest) *vbest = in->x[fc];
    return s > 0 ? s : 0;
  }
  int own = scratch == NULL;
  if (own) scratch = remat__malloc((size_t)(j - i) * sizeof *scratch);
  if (!scratch) return -1;
  int64_t k = 0;
  for (int64_t l = fc; l < j; l++)
    if (in->cand[l]) scratch[k++] = (xd){in->x[l], in->a[l] - in->c[l]};
  qsort(scratch, (size_t)k, sizeof *scratch, xd_cmp);
  int64_t best = 0, cum = 0;
  for (int64_t t = 0; t < k; t++) {
    cum += scratch[t].d;
    if (t + 1 < k && scratch[t + 1].x == scratch[t].x) continue;
    int64_t s = n * cum - scratch[t].x;
    if (s > best) {
      best = s;
      if (vbest) *vbest = scratch[t].x;
    }
  }
  if (own) remat__free(scratch);
  return best;
}

static int64_t kept_memory(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s) {
  return in->stage_bytes + (in->pW[j] - in->pW[i]) + in->n[s] * (in->pA[j] - in->pA[i]);
}

int64_t remat__plan_min_memory(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s) {
  return kept_memory(in, i, j, s) - max_saving(in, i, j, in->n[s], NULL, NULL);
}

/* ------------------------------------------------------------ memory window */

/* The largest saving n D - X of a sliding window of layers with different
 * scratch sizes, in O(log L) per layer entering or leaving: a segment tree
 * over the candidates sorted by (x, index), each node holding the sum of d of
 * its present items and the best n * (d of present items up to and including
 * one of them) - its x. The best set with largest scratch v is every
 * candidate with x <= v, a prefix in this order; the last item of a run of
 * equal x carries the prefix that counts. */
#define NEG (INT64_MIN / 4)

typedef struct {
  int64_t size;        /* leaves, a power of two */
  int64_t *sum, *best; /* (2 size) */
  int64_t *rank;       /* (L) leaf of a candidate layer, -1 for others */
  int64_t n;           /* micro-batches of the stage being checked */
  int64_t wl, wr;      /* layers [wl, wr) are present */
  int used;            /* candidates have more than one scratch size */
} xtree;

static int xl_cmp(const void *u, const void *v) {
  const xd *a = u, *b = v;
  if (a->x != b->x) return a->x < b->x ? -1 : 1;
  return a->d < b->d ? -1 : a->d > b->d;
}

static int xt_init(xtree *t, const remat__plan_inst *in) {
  memset(t, 0, sizeof *t);
  int64_t nc = in->pCand[in->L];
  t->size = 1;
  while (t->size < nc) t->size *= 2;
  t->sum = remat__malloc((size_t)(2 * t->size) * sizeof *t->sum);
  t->best = remat__malloc((size_t)(2 * t->size) * sizeof *t->best);
  t->rank = remat__malloc((size_t)(in->L ? in->L : 1) * sizeof *t->rank);
  xd *order = remat__malloc((size_t)(nc ? nc : 1) * sizeof *order);
  if (!t->sum || !t->best || !t->rank || !order) {
    remat__free(order);
    return REMAT_ENOMEM;
  }
  int64_t k = 0;
  for (int64_t l = 0; l < in->L; l++) {
    t->rank[l] = -1;
    if (in->cand[l]) order[k++] = (xd){in->x[l], l};
  }
  qsort(order, (size_t)k, sizeof *order, xl_cmp); /* d holds the layer here */
  for (int64_t r = 0; r < k; r++) t->rank[order[r].d] = r;
  t->used = k > 1 && order[0].x != order[k - 1].x;
  remat__free(order);
  return 0;
}

static void xt_free(xtree *t) {
  remat__free(t->sum);
  remat__free(t->best);
  remat__free(t->rank);
  t->sum = t->best = t->rank = NULL;
}

static void xt_reset(xtree *t, int64_t n) {
  if (!t->used) return; /* every window has one scratch size: closed form */
  for (int64_t k = 0; k < 2 * t->size; k++) {
    t->sum[k] = 0;
    t->best[k] = NEG;
  }
  t->n = n;
  t->wl = t->wr = 0;
}

static void xt_set(xtree *t, const remat__plan_inst *in, int64_t l, int on) {
  int64_t k = t->rank[l];
  if (k < 0) return;
  k += t->size;
  int64_t d = in->a[l] - in->c[l];
  t->sum[k] = on ? d : 0;
  t->best[k] = on ? t->n * d - in->x[l] : NEG;
  for (k /= 2; k >= 1; k /= 2) {
    int64_t L = 2 * k, R = L + 1;
    t->sum[k] = t->sum[L] + t->sum[R];
    int64_t right = t->best[R] == NEG ? NEG : t->n * t->sum[L] + t->best[R];
    t->best[k] = t->best[L] > right ? t->best[L] : right;
  }
}

/* Makes [i, j) the present layers; cheap when the window moves a little. */
static void xt_window(xtree *t, const remat__plan_inst *in, int64_t i, int64_t j) {
  if (j <= t->wl || i >= t->wr) { /* disjoint: start over */
    for (int64_t l = t->wl; l < t->wr; l++) xt_set(t, in, l, 0);
    t->wl = t->wr = i;
  }
  while (t->wr < j) xt_set(t, in, t->wr++, 1);
  while (t->wl > i) xt_set(t, in, --t->wl, 1);
  while (t->wr > j) xt_set(t, in, --t->wr, 0);
  while (t->wl < i) xt_set(t, in, t->wl++, 0);
}

/* ------------------------------------------------------------ solver state */

typedef struct {
  const remat__plan_inst *in;
  int64_t L, p, L1;
  int64_t Tcap;   /* window: stages with F <= Tcap */
  int64_t delta;  /* extra bytes on every budget (infeasibility search) */
  uint8_t *pre;   /* (p + 1, L + 1): stages 0..s-1 can cover [0, i) */
  uint8_t *post;  /* (p + 1, L + 1): stages s..p-1 can cover [i, L) */
  int64_t *pred;  /* (p + 1, L + 1) a predecessor boundary, for pre */
  int64_t *aux;   /* (L + 1) */
  xd *xs;         /* (L) */
  xtree xt;       /* reset for each stage's sweep in reach() */
  remat_error *err;
} solver;

static int mem_ok(solver *S, int64_t i, int64_t j, int64_t s) {
  const remat__plan_inst *in = S->in;
  if (in->pF[j] - in->pF[i] > S->Tcap) return 0;
  int64_t need = kept_memory(in, i, j, s);
  int64_t budget = in->budget[s] + S->delta;
  if (need <= budget) return 1;
  int64_t D = in->pD[j] - in->pD[i];
  if (in->n[s] * D < need - budget) return 0;
  int64_t fc = in->first_cand[i];
  if (in->x_end[fc] >= j) return need - (in->n[s] * D - in->x[fc]) <= budget;
  xt_window(&S->xt, in, i, j);
  int64_t save = S->xt.best[1];
  return save > 0 && need - save <= budget;
}

#define AT(arr, s, i) ((arr)[(size_t)(s) * (size_t)S->L1 + (size_t)(i)])

/* Fills pre (and pred) and post for the current window and delta; returns
 * whether the whole model can be covered. A stage that fits stays fitting
 * when it loses layers at either end, so the valid starts for an end form an
 * interval that only moves right: two pointers, O(p L) checks. */
static int reach(solver *S) {
  int64_t L = S->L, p = S->p;
  memset(S->pre, 0, (size_t)(p + 1) * (size_t)S->L1);
  memset(S->post, 0, (size_t)(p + 1) * (size_t)S->L1);
  AT(S->pre, 0, 0) = 1;
  int64_t *last = S->aux;
  for (int64_t s = 0; s < p; s++) {
    int64_t any = -1;
    for (int64_t i = 0; i <= L; i++) {
      if (AT(S->pre, s, i)) any = i;
      last[i] = any;
    }
    int64_t lo = 0, jmax = L - (p - 1 - s);
    xt_reset(&S->xt, S->in->n[s]);
    for (int64_t j = s + 1; j <= jmax; j++) {
      if (last[j - 1] < 0) continue;
      if (lo < s) lo = s;
      while (lo < j && !mem_ok(S, lo, j, s)) lo++;
      if (lo < j && last[j - 1] >= lo) {
        AT(S->pre, s + 1, j) = 1;
        if (S->pred) AT(S->pred, s + 1, j) = last[j - 1];
      }
    }
  }
  if (!AT(S->pre, p, L)) return 0;
  AT(S->post, p, L) = 1;
  int64_t *next = S->aux;
  for (int64_t s = p - 1; s >= 0; s--) {
    int64_t nx = L + 1;
    for (int64_t i = L; i >= 0; i--) {
      if (AT(S->post, s + 1, i)) nx = i;
      next[i] = nx;
    }
    int64_t hi = L - (p - 1 - s);
    xt_reset(&S->xt, S->in->n[s]);
    for (int64_t i = hi - 1; i >= s; i--) {
      if (!AT(S->pre, s, i)) continue; /* hi only needs to stay >= its true value */
      while (hi > i && !mem_ok(S, i, hi, s)) hi--;
      if (hi > i && next[i + 1] <= hi) AT(S->post, s, i) = 1;
    }
  }
  return 1;
}

/* ------------------------------------------------------------ one stage */

typedef struct {
  const remat__plan_inst *in;
  remat__knap kn;
  int64_t i, built;
} evaluator;

typedef struct {
  int64_t t, cnt, mem;
  int how;      /* 0: nothing recomputed, 1: first k candidates, 2: knapsack set */
  int32_t node; /* how == 2 with tracking */
} choice;

static void ev_start(evaluator *ev, int64_t i) {
  ev->i = i;
  ev->built = i;
  remat__knap_reset(&ev->kn);
}

/* Best choice for stage s on [ev->i, j). mode 0: least time; mode 1: fewest
 * recomputed layers with t <= cap. Returns 1 if the stage fits, 0 if not,
 * or a negative error. */
static int eval_stage(evaluator *ev, int64_t j, int64_t s, int mode, int64_t cap, choice *out) {
  const remat__plan_inst *in = ev->in;
  int64_t i = ev->i, n = in->n[s];
  int64_t F = in->pF[j] - in->pF[i];
  if (mode == 1 && F > cap) return 0;
  int64_t base = kept_memory(in, i, j, s);
  int64_t E = base - in->budget[s];
  if (E <= 0) {
    *out = (choice){F, 0, base, 0, -1};
    return 1;
  }
  int64_t Dp = in->pD[j] - in->pD[i];
  if (n * Dp < E) return 0;
  int64_t fc = in->first_cand[i];
  if (in->kind_end[fc] >= j) {
    /* one kind of candidate: the first k of them, k as small as fits */
    int64_t d = in->a[fc] - in->c[fc], x = in->x[fc];
    int64_t k = (E + x + n * d - 1) / (n * d);
    if (k > in->pCand[j] - in->pCand[i]) return 0;
    int64_t t = F + k * in->r[fc];
    if (mode == 1 && t > cap) return 0;
    *out = (choice){t, k, base - n * k * d + x, 1, -1};
    return 1;
  }
  int rc;
  for (; ev->built < j; ev->built++) {
    int64_t l = ev->built;
    if (in->cand[l] && (rc = remat__knap_insert(&ev->kn, in->a[l] - in->c[l], in->r[l], in->x[l], l)))
      return rc;
  }
  remat__knap_res res;
  int found = mode == 0 ? remat__knap_min_time(&ev->kn, n, E, &res)
                        : remat__knap_min_count(&ev->kn, n, E, cap - F, &res);
  if (!found) return 0;
  *out = (choice){F + res.r, res.cnt, base + res.memrel, 2, res.node};
  return 1;
}

static int knap_error(solver *S, int rc, int64_t i) {
  if (rc == REMAT_ENOMEM) return remat__errorf(S->err, rc, "out of memory in the stage search");
  return remat__errorf(S->err, REMAT_ERANGE,
                       "choosing the recomputed layers of a stage starting at layer %lld needs "
                       "more than %lld candidate sets; the layers there are too many and too "
                       "different for the exact search (group identical layers or use more "
                       "stages)",
                       (long long)i, (long long)KNAP_POINT_LIMIT);
}

/* Per-(i, j) answers are shared by stages of one class. */
typedef struct {
  int64_t *stamp; /* (ncls) */
  choice *val;
  int *ok;
  int64_t now;
} cache;

static int cache_init(cache *c, int64_t ncls) {
  c->stamp = remat__calloc((size_t)ncls, sizeof *c->stamp);
  c->val = remat__malloc((size_t)ncls * sizeof *c->val);
  c->ok = remat__malloc((size_t)ncls * sizeof *c->ok);
  c->now = 0;
  return c->stamp && c->val && c->ok ? 0 : REMAT_ENOMEM;
}
static void cache_free(cache *c) {
  remat__free(c->stamp);
  remat__free(c->val);
  remat__free(c->ok);
}

static int cached_eval(evaluator *ev, cache *c, int64_t j, int64_t s, int mode, int64_t cap,
                       choice **out) {
  int64_t k = ev->in->cls[s];
  if (c->stamp[k] != c->now) {
    int rc = eval_stage(ev, j, s, mode, cap, &c->val[k]);
    if (rc < 0) return rc;
    c->ok[k] = rc;
    c->stamp[k] = c->now;
  }
  *out = &c->val[k];
  return c->ok[k];
}

/* Largest j with F(i, j) <= cap. */
static int64_t window_end(const remat__plan_inst *in, int64_t i, int64_t cap) {
  if (cap == INF) return in->L;
  int64_t lo = i, hi = in->L; /* F(i, lo) <= cap */
  int64_t lim = in->pF[i] > INF - cap ? INF : in->pF[i] + cap;
  while (lo < hi) {
    int64_t mid = hi - (hi - lo) / 2;
    if (in->pF[mid] <= lim) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* ------------------------------------------------------------ bottleneck */

/* Pass 1: least max stage time within the window, or INF. */
static int pass_minmax(solver *S, int64_t *Tb) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  int64_t *B = remat__malloc((size_t)(p + 1) * (size_t)S->L1 * sizeof *B);
  int64_t *sl = remat__malloc((size_t)p * sizeof *sl);
  evaluator ev = {in, {0}, 0, 0};
  remat__knap_init(&ev.kn, 0, 0, KNAP_POINT_LIMIT);
  cache c;
  int rc = cache_init(&c, in->ncls);
  if (!B || !sl || rc) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory in the planner");
    goto out;
  }
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)S->L1; k++) B[k] = INF;
  AT(B, 0, 0) = 0;
  for (int64_t i = 0; i < L; i++) {
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(S->pre, s, i) && AT(B, s, i) < INF) sl[ns++] = s;
    if (!ns) continue;
    ev_start(&ev, i);
    int64_t jend = window_end(in, i, S->Tcap);
    for (int64_t j = i + 1; j <= jend; j++) {
      int64_t F = in->pF[j] - in->pF[i];
      c.now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q];
        if (!AT(S->post, s + 1, j)) continue;
        int64_t b = AT(B, s, i), *cur = &AT(B, s + 1, j);
        if (max64(b, F) >= *cur) continue;
        choice *ch;
        int ok = cached_eval(&ev, &c, j, s, 0, 0, &ch);
        if (ok < 0) {
          rc = knap_error(S, ok, i);
          goto out;
        }
        if (ok && max64(b, ch->t) < *cur) *cur = max64(b, ch->t);
      }
    }
  }
  *Tb = AT(B, p, L);
out:
  remat__free(B);
  remat__free(sl);
  remat__knap_free(&ev.kn);
  cache_free(&c);
  return rc;
}

/* Pass 2: with every stage time <= Tb, fewest recomputed layers then lowest
 * peak; fills bounds. Returns 1 if found. */
static int pass_fewest(solver *S, int64_t Tb, int64_t *bounds) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  size_t cells = (size_t)(p + 1) * (size_t)S->L1;
  int64_t *C = remat__malloc(cells * sizeof *C), *M = remat__malloc(cells * sizeof *M);
  int32_t *arg = remat__malloc(cells * sizeof *arg);
  int64_t *sl = remat__malloc((size_t)p * sizeof *sl);
  evaluator ev = {in, {0}, 0, 0};
  remat__knap_init(&ev.kn, 1, 0, KNAP_POINT_LIMIT);
  cache c;
  int rc = cache_init(&c, in->ncls);
  if (!C || !M || !arg || !sl || rc) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory in the planner");
    goto out;
  }
  for (size_t k = 0; k < cells; k++) C[k] = INF;
  AT(C, 0, 0) = 0;
  AT(M, 0, 0) = 0;
  for (int64_t i = 0; i < L; i++) {
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(C, s, i) < INF) sl[ns++] = s;
    if (!ns) continue;
    ev_start(&ev, i);
    int64_t jend = window_end(in, i, Tb);
    for (int64_t j = i + 1; j <= jend; j++) {
      c.now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q];
        if (!AT(S->post, s + 1, j)) continue;
        int64_t c0 = AT(C, s, i), m0 = AT(M, s, i);
        int64_t *cc = &AT(C, s + 1, j), *cm = &AT(M, s + 1, j);
        if (c0 > *cc || (c0 == *cc && m0 >= *cm)) continue;
        choice *ch;
        int ok = cached_eval(&ev, &c, j, s, 1, Tb, &ch);
        if (ok < 0) {
          rc = knap_error(S, ok, i);
          goto out;
        }
        if (!ok) continue;
        int64_t nc = c0 + ch->cnt, nm = max64(m0, ch->mem);
        if (nc < *cc || (nc == *cc && nm < *cm)) {
          *cc = nc;
          *cm = nm;
          AT(arg, s + 1, j) = (int32_t)i;
        }
      }
    }
  }
  if (AT(C, p, L) == INF) {
    rc = 0;
    goto out;
  }
  bounds[p] = L;
  for (int64_t s = p; s > 0; s--) bounds[s - 1] = AT(arg, s, bounds[s]);
  rc = 1;
out:
  remat__free(C);
  remat__free(M);
  remat__free(arg);
  remat__free(sl);
  remat__knap_free(&ev.kn);
  cache_free(&c);
  return rc;
}

/* ------------------------------------------------------------ 1f1b */

/* Least-time choice of every windowed stage, stored once; the DPs for the
 * different caps T read it. */
typedef struct {
  int64_t *off;  /* (p, L + 1): first entry of block (s, i), or -1 */
  int64_t *len;  /* (L + 1): block length for start i */
  int64_t *t, *mem;
  int32_t *cnt;
  int64_t n;
} table;

static void table_free(table *T) {
  remat__free(T->off);
  remat__free(T->len);
  remat__free(T->t);
  remat__free(T->mem);
  remat__free(T->cnt);
  memset(T, 0, sizeof *T);
}

static int table_build(solver *S, table *T) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  memset(T, 0, sizeof *T);
  T->off = remat__malloc((size_t)p * (size_t)S->L1 * sizeof *T->off);
  T->len = remat__malloc((size_t)S->L1 * sizeof *T->len);
  if (!T->off || !T->len) return remat__errorf(S->err, REMAT_ENOMEM, "out of memory");
  int64_t n = 0;
  for (int64_t i = 0; i <= L; i++) T->len[i] = i < L ? window_end(in, i, S->Tcap) - i : 0;
  for (int64_t s = 0; s < p; s++)
    for (int64_t i = 0; i <= L; i++) {
      AT(T->off, s, i) = -1;
      if (i < L && AT(S->pre, s, i) && AT(S->post, s, i)) {
        AT(T->off, s, i) = n;
        n += T->len[i];
        if (n > MAX_TABLE)
          return remat__errorf(S->err, REMAT_ERANGE,
                               "the 1f1b objective would store more than %lld stage choices "
                               "for this problem; use the bottleneck objective, fewer layers "
                               "or fewer stages",
                               (long long)MAX_TABLE);
      }
    }
  T->n = n;
  T->t = remat__malloc((size_t)(n ? n : 1) * sizeof *T->t);
  T->mem = remat__malloc((size_t)(n ? n : 1) * sizeof *T->mem);
  T->cnt = remat__malloc((size_t)(n ? n : 1) * sizeof *T->cnt);
  int64_t *sl = remat__malloc((size_t)p * sizeof *sl);
  evaluator ev = {in, {0}, 0, 0};
  remat__knap_init(&ev.kn, 0, 0, KNAP_POINT_LIMIT);
  cache c;
  int rc = cache_init(&c, in->ncls);
  if (!T->t || !T->mem || !T->cnt || !sl || rc) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  for (int64_t i = 0; i < L; i++) {
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(T->off, s, i) >= 0) sl[ns++] = s;
    if (!ns) continue;
    ev_start(&ev, i);
    for (int64_t len = 1; len <= T->len[i]; len++) {
      int64_t j = i + len;
      c.now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q], e = AT(T->off, s, i) + len - 1;
        T->t[e] = INF;
        if (!AT(S->post, s + 1, j)) continue;
        choice *ch;
        int ok = cached_eval(&ev, &c, j, s, 0, 0, &ch);
        if (ok < 0) {
          rc = knap_error(S, ok, i);
          goto out;
        }
        if (!ok) continue;
        T->t[e] = ch->t;
        T->mem[e] = ch->mem;
        T->cnt[e] = (int32_t)ch->cnt;
      }
    }
  }
out:
  remat__free(sl);
  remat__knap_free(&ev.kn);
  cache_free(&c);
  return rc;
}

static int64_t table_minmax(solver *S, const table *T, int64_t *B) {
  int64_t L = S->L, p = S->p;
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)S->L1; k++) B[k] = INF;
  AT(B, 0, 0) = 0;
  for (int64_t s = 0; s < p; s++)
    for (int64_t i = s; i < L; i++) {
      int64_t b = AT(B, s, i), o = AT(T->off, s, i);
      if (b == INF || o < 0) continue;
      for (int64_t len = 1; len <= T->len[i]; len++) {
        int64_t t = T->t[o + len - 1];
        if (t == INF) continue;
        int64_t v = max64(b, t), *cur = &AT(B, s + 1, i + len);
        if (v < *cur) *cur = v;
      }
    }
  return AT(B, p, L);
}

typedef struct {
  int64_t obj, cnt, mem; /* lexicographic */
  int64_t sum, tmax;
} result;

static int result_better(const result *u, const result *v) {
  if (u->obj != v->obj) return u->obj < v->obj;
  if (u->cnt != v->cnt) return u->cnt < v->cnt;
  return u->mem < v->mem;
}

typedef struct {
  int64_t *sum, *cnt, *mem;
  int32_t *arg;
} dpbuf;

/* Least (sum of t, recomputed, peak) with every stage time <= cap; fills the
 * result (obj with the plan's actual max) and bounds. Returns 1 if found. */
static int table_sum(solver *S, const table *T, int64_t cap, dpbuf *d, result *res,
                     int64_t *bounds) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)S->L1; k++) d->sum[k] = INF;
  AT(d->sum, 0, 0) = 0;
  AT(d->cnt, 0, 0) = 0;
  AT(d->mem, 0, 0) = 0;
  for (int64_t s = 0; s < p; s++)
    for (int64_t i = s; i < L; i++) {
      int64_t o = AT(T->off, s, i), s0 = AT(d->sum, s, i);
      if (s0 == INF || o < 0) continue;
      int64_t c0 = AT(d->cnt, s, i), m0 = AT(d->mem, s, i);
      for (int64_t len = 1; len <= T->len[i]; len++) {
        int64_t e = o + len - 1, t = T->t[e];
        if (t == INF || t > cap) continue;
        int64_t j = i + len;
        int64_t ns = s0 + t, nc = c0 + T->cnt[e], nm = max64(m0, T->mem[e]);
        int64_t *cs = &AT(d->sum, s + 1, j);
        if (ns < *cs || (ns == *cs && (nc < AT(d->cnt, s + 1, j) ||
                                       (nc == AT(d->cnt, s + 1, j) && nm < AT(d->mem, s + 1, j))))) {
          *cs = ns;
          AT(d->cnt, s + 1, j) = nc;
          AT(d->mem, s + 1, j) = nm;
          AT(d->arg, s + 1, j) = (int32_t)i;
        }
      }
    }
  if (AT(d->sum, p, L) == INF) return 0;
  bounds[p] = L;
  int64_t tmax = 0;
  for (int64_t s = p; s > 0; s--) {
    int64_t j = bounds[s], i = AT(d->arg, s, j);
    bounds[s - 1] = i;
    tmax = max64(tmax, T->t[AT(T->off, s - 1, i) + (j - i) - 1]);
  }
  res->sum = AT(d->sum, p, L);
  res->cnt = AT(d->cnt, p, L);
  res->mem = AT(d->mem, p, L);
  res->tmax = tmax;
  res->obj = res->sum + (in->m - 1) * tmax;
  return 1;
}

static int cmp64(const void *u, const void *v) {
  int64_t a = *(const int64_t *)u, b = *(const int64_t *)v;
  return a < b ? -1 : a > b;
}

typedef struct {
  solver *S;
  const table *T;
  dpbuf d;
  int64_t *cand, *Sval; /* candidate caps and S at each (INF: not yet) */
  int64_t *tmp_bounds, *best_bounds;
  result best;
  int have;
  int64_t dps;
} search;

static void consider(search *q, int64_t k) {
  result r;
  int found = table_sum(q->S, q->T, q->cand[k], &q->d, &r, q->tmp_bounds);
  q->dps++;
  q->Sval[k] = found ? r.sum : INF;
  if (found && (!q->have || result_better(&r, &q->best))) {
    q->best = r;
    q->have = 1;
    memcpy(q->best_bounds, q->tmp_bounds, (size_t)(q->S->p + 1) * sizeof *q->best_bounds);
  }
}

static void bisect(search *q, int64_t lo, int64_t hi) {
  if (hi - lo <= 1) return;
  if (q->Sval[lo] == q->Sval[hi]) return; /* S constant: every T inside is worse than lo */
  int64_t m1 = q->S->in->m - 1;
  if (q->Sval[hi] != INF && q->Sval[hi] + m1 * q->cand[lo + 1] > q->best.obj) return;
  int64_t mid = lo + (hi - lo) / 2;
  consider(q, mid);
  bisect(q, lo, mid);
  bisect(q, mid, hi);
}

/* 1f1b objective within the window; fills bounds and result, returns 1 if a
 * plan fits, 0 if not, negative on error. */
static int solve_iteration(solver *S, int64_t *bounds, result *out) {
  const remat__plan_inst *in = S->in;
  int64_t p = S->p;
  size_t cells = (size_t)(p + 1) * (size_t)S->L1;
  table T;
  search q;
  memset(&q, 0, sizeof q);
  int rc = table_build(S, &T);
  if (rc) {
    table_free(&T);
    return rc;
  }
  q.S = S;
  q.T = &T;
  q.d.sum = remat__malloc(cells * sizeof(int64_t));
  q.d.cnt = remat__malloc(cells * sizeof(int64_t));
  q.d.mem = remat__malloc(cells * sizeof(int64_t));
  q.d.arg = remat__malloc(cells * sizeof(int32_t));
  q.tmp_bounds = remat__malloc((size_t)(p + 1) * sizeof(int64_t));
  q.best_bounds = bounds;
  if (!q.d.sum || !q.d.cnt || !q.d.mem || !q.d.arg || !q.tmp_bounds) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  int64_t Tb = table_minmax(S, &T, q.d.sum);
  if (Tb == INF) {
    rc = 0;
    goto out;
  }
  int64_t head[2] = {Tb, INF}, Sh[2];
  q.cand = head;
  q.Sval = Sh;
  if (in->m == 1) {
    consider(&q, 1); /* the sum alone: no cap is best, with the most room for ties */
    rc = 1;
    goto out;
  }
  consider(&q, 0);
  consider(&q, 1);
  int64_t Sinf = Sh[1];
  /* Caps above Tup cannot reach the best: S(T) + (m - 1) T >= Sinf + (m - 1) T. */
  int64_t Tup = (q.best.obj - Sinf) / (in->m - 1);
  int64_t k = 0;
  for (int64_t e = 0; e < T.n; e++)
    if (T.t[e] > Tb && T.t[e] <= Tup) k++;
  q.cand = remat__malloc((size_t)(k + 1) * sizeof(int64_t));
  q.Sval = remat__malloc((size_t)(k + 1) * sizeof(int64_t));
  if (!q.cand || !q.Sval) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory");
    goto out_cand;
  }
  q.cand[0] = Tb;
  k = 1;
  for (int64_t e = 0; e < T.n; e++)
    if (T.t[e] > Tb && T.t[e] <= Tup) q.cand[k++] = T.t[e];
  qsort(q.cand + 1, (size_t)(k - 1), sizeof(int64_t), cmp64);
  int64_t u = 1;
  for (int64_t e = 1; e < k; e++)
    if (q.cand[e] != q.cand[u - 1]) q.cand[u++] = q.cand[e];
  k = u;
  q.Sval[0] = Sh[0];
  if (k > 1) {
    consider(&q, k - 1);
    bisect(&q, 0, k - 1);
  }
  rc = 1;
out_cand:
  remat__free(q.cand);
  remat__free(q.Sval);
out:
  if (rc == 1) *out = q.best;
  remat__free(q.d.sum);
  remat__free(q.d.cnt);
  remat__free(q.d.mem);
  remat__free(q.d.arg);
  remat__free(q.tmp_bounds);
  table_free(&T);
  return rc;
}

/* ------------------------------------------------------------ driver */

/* Least max over partitions of F alone (no recomputation, memory ignored):
 * the baseline of the slowdown, and the first window. */
static int64_t minmax_F(const remat__plan_inst *in) {
  int64_t lo = 0, hi = in->pF[in->L];
  for (int64_t l = 0; l < in->L; l++) lo = max64(lo, in->fb[l]);
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2, stages = 1, cur = 0;
    for (int64_t l = 0; l < in->L; l++) {
      if (cur + in->fb[l] > mid) {
        stages++;
        cur = 0;
      }
      cur += in->fb[l];
    }
    if (stages <= in->p) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

int64_t remat__plan_baseline(const remat__plan_inst *in) {
  int64_t T = minmax_F(in);
  return in->objective == REMAT_OBJ_BOTTLENECK ? T : in->pF[in->L] + (in->m - 1) * T;
}

/* Recompute flags of the chosen stage: rebuilds the stage's choice with
 * set tracking. */
static int stage_set(solver *S, int64_t i, int64_t j, int64_t s, int mode, int64_t cap,
                     uint8_t *rec, int64_t *items) {
  const remat__plan_inst *in = S->in;
  evaluator ev = {in, {0}, 0, 0};
  remat__knap_init(&ev.kn, mode == 1, 1, KNAP_POINT_LIMIT);
  ev_start(&ev, i);
  choice ch;
  int ok = eval_stage(&ev, j, s, mode, cap, &ch);
  if (ok == 1) {
    if (ch.how == 1) {
      int64_t k = ch.cnt;
      for (int64_t l = i; l < j && k > 0; l++)
        if (in->cand[l]) rec[l] = 1, k--;
    } else if (ch.how == 2) {
      int64_t n = remat__knap_items(&ev.kn, ch.node, items);
      for (int64_t t = 0; t < n; t++) rec[items[t]] = 1;
    }
  }
  remat__knap_free(&ev.kn);
  if (ok < 0) return knap_error(S, ok, i);
  REMAT_ASSERT(ok == 1);
  return 0;
}

/* The arrangement of least memory at the current delta (pred filled). */
static void least_memory_plan(solver *S, int64_t *bounds, uint8_t *rec) {
  const remat__plan_inst *in = S->in;
  int64_t p = S->p;
  bounds[p] = S->L;
  for (int64_t s = p; s > 0; s--) bounds[s - 1] = AT(S->pred, s, bounds[s]);
  for (int64_t s = 0; s < p; s++) {
    int64_t v;
    max_saving(in, bounds[s], bounds[s + 1], in->n[s], S->xs, &v);
    for (int64_t l = bounds[s]; l < bounds[s + 1]; l++)
      rec[l] = v >= 0 && in->cand[l] && in->x[l] <= v;
  }
}

static int solve_core(const remat__plan_inst *in, int64_t *bounds, uint8_t *rec, int64_t *delta_out,
                      int64_t *rounds, remat_error *err) {
  int64_t L = in->L, p = in->p;
  if ((p + 1) * (L + 1) > MAX_CELLS)
    return remat__errorf(err, REMAT_ERANGE,
                         "%lld layers on %lld stages is beyond the planner's table of %lld "
                         "(stage, boundary) pairs; use fewer stages or coarser layers",
                         (long long)L, (long long)p, (long long)MAX_CELLS);
  solver Sv = {0}, *S = &Sv;
  S->in = in;
  S->L = L;
  S->p = p;
  S->L1 = L + 1;
  S->err = err;
  size_t cells = (size_t)(p + 1) * (size_t)S->L1;
  S->pre = remat__malloc(cells);
  S->post = remat__malloc(cells);
  S->pred = remat__malloc(cells * sizeof *S->pred);
  S->aux = remat__malloc((size_t)S->L1 * sizeof *S->aux);
  S->xs = remat__malloc((size_t)L * sizeof *S->xs);
  if (xt_init(&S->xt, in)) {
    xt_free(&S->xt);
    remat__free(S->xs);
    S->xs = NULL;
  }
  int64_t *items = remat__malloc((size_t)L * sizeof *items);
  int rc = 0;
  if (!S->pre || !S->post || !S->pred || !S->aux || !S->xs || !items) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory planning %lld layers", (long long)L);
    goto out;
  }
  memset(rec, 0, (size_t)L);
  *rounds = 0;
  *delta_out = 0;

  /* Does anything fit? */
  S->Tcap = INF;
  S->delta = 0;
  if (!reach(S)) {
    int64_t lo = 1, hi = (int64_t)1 << 61;
    while (lo < hi) {
      S->delta = lo + (hi - lo) / 2;
      if (reach(S)) hi = S->delta;
      else lo = S->delta + 1;
    }
    S->delta = lo;
    REMAT_ASSERT(reach(S));
    least_memory_plan(S, bounds, rec);
    *delta_out = lo;
    rc = REMAT_EINFEASIBLE;
    goto out;
  }

  int64_t TF = minmax_F(in);
  S->Tcap = in->objective == REMAT_OBJ_1F1B && in->m == 1 ? INF : TF + TF / 4 + 1;
  for (;;) {
    if (S->Tcap != INF && S->Tcap >= in->pF[L]) S->Tcap = INF;
    (*rounds)++;
    int fits = reach(S);
    REMAT_ASSERT(fits || S->Tcap != INF);
    int64_t next = INF; /* a window sure to hold the optimum, once a plan fits */
    if (fits) {
      double work = 0;
      for (int64_t i = 0; i < L; i++) {
        int64_t ns = 0;
        for (int64_t s = 0; s < p && s <= i; s++) ns += AT(S->pre, s, i);
        work += (double)ns * (double)(window_end(in, i, S->Tcap) - i);
      }
      if (work > MAX_WORK) {
        rc = remat__errorf(err, REMAT_ERANGE,
                           "this problem needs about %.2g stage evaluations (%lld layers, up to "
                           "%lld per stage, %lld stages), beyond the planner's limit of %.0g; "
                           "use coarser layers",
                           work, (long long)L, (long long)(L - p + 1), (long long)p, MAX_WORK);
        goto out;
      }
      if (in->objective == REMAT_OBJ_BOTTLENECK) {
        int64_t Tb = INF;
        if ((rc = pass_minmax(S, &Tb))) goto out;
        if (Tb != INF && (Tb <= S->Tcap || S->Tcap == INF)) {
          int got = pass_fewest(S, Tb, bounds);
          if (got < 0) {
            rc = got;
            goto out;
          }
          REMAT_ASSERT(got == 1);
          for (int64_t s = 0; s < p; s++)
            if ((rc = stage_set(S, bounds[s], bounds[s + 1], s, 1, Tb, rec, items))) goto out;
          rc = 0;
          goto out;
        }
        if (Tb != INF) next = Tb;
      } else {
        result res = {INF, 0, 0, 0, 0};
        int got = solve_iteration(S, bounds, &res);
        if (got < 0) {
          rc = got;
          goto out;
        }
        int64_t m1 = in->m - 1;
        /* a plan with a stage outside has obj >= sum F + (m - 1) (Tcap + 1) */
        if (got && (S->Tcap == INF || res.obj < in->pF[L] + m1 * (S->Tcap + 1))) {
          for (int64_t s = 0; s < p; s++)
            if ((rc = stage_set(S, bounds[s], bounds[s + 1], s, 0, 0, rec, items))) goto out;
          rc = 0;
          goto out;
        }
        if (got) next = (res.obj - in->pF[L]) / m1;
      }
    }
    REMAT_ASSERT(S->Tcap != INF);
    if (next != INF && next > S->Tcap) S->Tcap = next; /* sure to hold the optimum */
    else S->Tcap = S->Tcap > INF / 4 ? INF : 2 * S->Tcap + 1;
  }
out:
  remat__free(S->pre);
  remat__free(S->post);
  remat__free(S->pred);
  remat__free(S->aux);
  remat__free(S->xs);
  xt_free(&S->xt);
  remat__free(items);
  return rc;
}

/* ------------------------------------------------------------ results */

/* Objective, recomputed layers and peak of an arrangement, in quanta and
 * bytes; also each stage's figures if st is given. */
static void measure(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                    int64_t *obj, int64_t *cnt, int64_t *maxmem, int64_t *sum_t, int64_t *max_t) {
  int64_t sum = 0, tmax = 0, c = 0, mm = 0;
  for (int64_t s = 0; s < in->p; s++) {
    int64_t i = bounds[s], j = bounds[s + 1];
    int64_t t = in->pF[j] - in->pF[i], mem = kept_memory(in, i, j, s), X = 0;
    for (int64_t l = i; l < j; l++)
      if (rec[l]) {
        t += in->r[l];
        mem -= in->n[s] * (in->a[l] - in->c[l]);
        X = max64(X, in->x[l]);
        c++;
      }
    mem += X;
    sum += t;
    tmax = max64(tmax, t);
    mm = max64(mm, mem);
  }
  if (obj) *obj = in->objective == REMAT_OBJ_BOTTLENECK ? tmax : sum + (in->m - 1) * tmax;
  if (cnt) *cnt = c;
  if (maxmem) *maxmem = mm;
  if (sum_t) *sum_t = sum;
  if (max_t) *max_t = tmax;
}

int remat__plan_solve_inst(const remat__plan_inst *in, int64_t *obj, int64_t *cnt,
                           int64_t *maxmem, int64_t *bounds, uint8_t *recompute,
                           remat_error *err) {
  int64_t *b = bounds ? bounds : remat__malloc((size_t)(in->p + 1) * sizeof *b);
  uint8_t *r = recompute ? recompute : remat__malloc((size_t)in->L);
  int rc;
  if (!b || !r) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
  } else {
    int64_t delta, rounds;
    rc = solve_core(in, b, r, &delta, &rounds, err);
    if (rc == 0) measure(in, b, r, obj, cnt, maxmem, NULL, NULL);
  }
  if (!bounds) remat__free(b);
  if (!recompute) remat__free(r);
  return rc;
}

void remat_plan_free(remat_plan *plan) {
  remat__free(plan->stages);
  remat__free(plan->recomputed_all);
  plan->stages = NULL;
  plan->recomputed_all = NULL;
}

/* Fills a plan from an arrangement. */
static int fill_plan(const remat_plan_problem *pb, const remat__plan_inst *in,
                     const int64_t *bounds, const uint8_t *rec, remat_plan *plan,
                     remat_error *err) {
  memset(plan, 0, sizeof *plan);
  int64_t p = in->p, L = in->L, total = 0;
  for (int64_t l = 0; l < L; l++) total += rec[l] != 0;
  plan->stages = remat__calloc((size_t)p, sizeof *plan->stages);
  plan->recomputed_all = remat__malloc((size_t)(total ? total : 1) * sizeof(int64_t));
  double *fw = remat__malloc((size_t)p * sizeof *fw), *bw = remat__malloc((size_t)p * sizeof *bw);
  if (!plan->stages || !plan->recomputed_all || !fw || !bw) {
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
  int64_t k = 0, sum = 0, tmax = 0;
  for (int64_t s = 0; s < p; s++) {
    remat_plan_stage *st = &plan->stages[s];
    int64_t i = bounds[s], j = bounds[s + 1];
    int64_t t = in->pF[j] - in->pF[i], mem = kept_memory(in, i, j, s), X = 0, fq = 0, rq = 0;
    st->first_layer = i;
    st->num_layers = j - i;
    st->recomputed = plan->recomputed_all + k;
    for (int64_t l = i; l < j; l++) {
      fq += in->fwd[l];
      if (!rec[l]) continue;
      plan->recomputed_all[k++] = l;
      st->num_recomputed++;
      rq += in->r[l];
      mem -= in->n[s] * (in->a[l] - in->c[l]);
      X = max64(X, in->x[l]);
    }
    t += rq;
    mem += X;
    st->microbatches_held = in->n[s];
    st->memory_bytes = (size_t)mem;
    st->budget_bytes = (size_t)in->budget[s];
    if (mem > in->budget[s]) plan->feasible = 0;
    st->time = (double)t * in->q;
    st->fwd_time = (double)fq * in->q;
    st->bwd_time = (double)(t - fq) * in->q;
    fw[s] = st->fwd_time;
    bw[s] = st->bwd_time;
    sum += t;
    tmax = max64(tmax, t);
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
  plan->simulated_time = -1;
  if ((double)p * (double)in->m <= 2e7)
    remat_plan_simulate(in->schedule, p, in->m, fw, bw, &plan->simulated_time, NULL);
  remat__free(fw);
  remat__free(bw);
  (void)pb;
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
    if (recompute && recompute[l] && !in.recomp[l]) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld cannot be recomputed", (long long)l);
      goto out;
    }
    rec[l] = recompute ? recompute[l] != 0 : 0;
  }
  rc = fill_plan(pb, &in, bounds, rec, plan, err);
out:
  remat__free(bounds);
  remat__free(rec);
  remat__plan_inst_free(&in);
  return rc;
}

int remat_plan_solve(const remat_plan_problem *pb, remat_plan *plan, remat_error *err) {
  memset(plan, 0, sizeof *plan);
  remat__plan_inst in;
  int rc = remat__plan_inst_build(pb, &in, err);
  if (rc) return rc;
  int64_t *bounds = remat__malloc((size_t)(in.p + 1) * sizeof *bounds);
  uint8_t *rec = remat__malloc((size_t)in.L);
  int64_t delta = 0, rounds = 0;
  if (!bounds || !rec) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  rc = solve_core(&in, bounds, rec, &delta, &rounds, err);
  if (rc && rc != REMAT_EINFEASIBLE) goto out;
  int frc = fill_plan(pb, &in, bounds, rec, plan, err);
  if (frc) {
    rc = frc;
    goto out;
  }
  plan->windows = rounds;
  if (rc == REMAT_EINFEASIBLE) {
    plan->feasible = 0;
    plan->min_extra_bytes = (size_t)delta;
    plan->min_budget_bytes = (size_t)(in.budget[0] + delta);
    int bin = remat__plan_binary_units(pb);
    char a[32], b[32], need[256] = "";
    /* each stage's least memory in that arrangement: all when few, else the
     * range */
    if (in.p <= 8) {
      size_t len = 0;
      for (int64_t s = 0; s < in.p; s++)
        len += (size_t)snprintf(need + len, sizeof need - len, "%s%s", s ? ", " : "",
                                remat__plan_fmt_bytes(plan->stages[s].memory_bytes, bin, a, sizeof a));
    } else {
      size_t lo = plan->stages[0].memory_bytes, hi = lo;
      for (int64_t s = 1; s < in.p; s++) {
        if (plan->stages[s].memory_bytes < lo) lo = plan->stages[s].memory_bytes;
        if (plan->stages[s].memory_bytes > hi) hi = plan->stages[s].memory_bytes;
      }
      snprintf(need, sizeof need, "from %s to %s", remat__plan_fmt_bytes(lo, bin, a, sizeof a),
               remat__plan_fmt_bytes(hi, bin, b, sizeof b));
    }
    if (pb->uniform_memory) {
      remat__errorf(err, REMAT_EINFEASIBLE,
                    "no arrangement fits a budget of %s per stage even with recomputation; the "
                    "smallest budget that fits is %s (%zu bytes), where the stages need at "
                    "least %s",
                    remat__plan_fmt_bytes(pb->memory[0], bin, a, sizeof a),
                    remat__plan_fmt_bytes(plan->min_budget_bytes, bin, b, sizeof b),
                    plan->min_budget_bytes, need);
    } else {
      remat__errorf(err, REMAT_EINFEASIBLE,
                    "no arrangement fits the per-stage budgets even with recomputation; every "
                    "stage would need %s more (%zu bytes), where the stages need at least %s",
                    remat__plan_fmt_bytes((size_t)delta, bin, b, sizeof b), (size_t)delta, need);
    }
  }
out:
  remat__free(bounds);
  remat__free(rec);
  remat__plan_inst_free(&in);
  return rc;
}

/* ------------------------------------------------------------ brute force */

/* Every partition (by recursion on the next boundary) and every subset of
 * recomputable layers (a bit mask over all L); only for tiny instances. */
static void brute_rec(const remat__plan_inst *in, int64_t s, int64_t *bounds, uint8_t *rec,
                      int *have, int64_t best[3]) {
  int64_t L = in->L, p = in->p;
  if (s == p) {
    if (bounds[p] != L) return;
    for (uint64_t mask = 0; mask < ((uint64_t)1 << L); mask++) {
      int skip = 0;
      for (int64_t l = 0; l < L; l++) {
        rec[l] = (mask >> l) & 1;
        if (rec[l] && !in->recomp[l]) skip = 1;
      }
      if (skip) continue;
      int fits = 1;
      for (int64_t t = 0; t < p && fits; t++) {
        int64_t i = bounds[t], j = bounds[t + 1], X = 0;
        int64_t mem = in->stage_bytes;
        for (int64_t l = i; l < j; l++) {
          mem += in->w[l] + in->n[t] * (rec[l] ? in->c[l] : in->a[l]);
          if (rec[l] && in->x[l] > X) X = in->x[l];
        }
        fits = mem + X <= in->budget[t];
      }
      if (!fits) continue;
      int64_t o, c, mm;
      measure(in, bounds, rec, &o, &c, &mm, NULL, NULL);
      if (!*have || o < best[0] || (o == best[0] && (c < best[1] || (c == best[1] && mm < best[2])))) {
        best[0] = o;
        best[1] = c;
        best[2] = mm;
        *have = 1;
      }
    }
    return;
  }
  int64_t lo = bounds[s] + 1, hi = s == p - 1 ? L : L - (p - 1 - s);
  if (s == p - 1) lo = L;
  for (int64_t j = lo; j <= hi; j++) {
    bounds[s + 1] = j;
    brute_rec(in, s + 1, bounds, rec, have, best);
  }
}

int remat__plan_brute(const remat__plan_inst *in, int64_t *obj, int64_t *cnt, int64_t *maxmem) {
  REMAT_ASSERT(in->L <= 20);
  int64_t bounds[24];
  uint8_t rec[24] = {0};
  int64_t best[3] = {0, 0, 0};
  int have = 0;
  bounds[0] = 0;
  brute_rec(in, 0, bounds, rec, &have, best);
  if (!have) return REMAT_EINFEASIBLE;
  *obj = best[0];
  *cnt = best[1];
  *maxmem = best[2];
  return 0;
}

/* ------------------------------------------------------------ sweep bound */

int remat__plan_no_recompute_budget(const remat__plan_inst *in, int64_t *bytes) {
  int64_t L = in->L, p = in->p, L1 = L + 1;
  if ((p + 1) * L1 > MAX_CELLS) return REMAT_ERANGE;
  int64_t cap = in->objective == REMAT_OBJ_1F1B && in->m == 1 ? INF : minmax_F(in);
  int64_t *M = remat__malloc((size_t)(p + 1) * (size_t)L1 * sizeof *M);
  if (!M) return REMAT_ENOMEM;
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)L1; k++) M[k] = INF;
  M[0] = 0;
  for (int64_t s = 0; s < p; s++)
    for (int64_t i = s; i < L; i++) {
      int64_t b = M[s * L1 + i];
      if (b == INF) continue;
      int64_t jend = window_end(in, i, cap), jmax = L - (p - 1 - s);
      if (jend > jmax) jend = jmax;
      for (int64_t j = i + 1; j <= jend; j++) {
        int64_t v = max64(b, kept_memory(in, i, j, s)), *cur = &M[(s + 1) * L1 + j];
        if (v < *cur) *cur = v;
      }
    }
  *bytes = M[p * L1 + L];
  remat__free(M);
  return *bytes == INF ? REMAT_EINFEASIBLE : 0;
}
