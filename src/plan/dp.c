/* dp.c: the partition of the layers into stages, exactly, as dynamic
 * programs over (stage, boundary). Stage s on layers [i, j) has a best choice
 * that depends only on (i, j, n_s, budget_s) (stage.c), and the objectives
 * combine stages by max and by sum:
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
 * Every program looks only at stages whose forward+backward time F is at most
 * the solver's window Tcap (solve.c widens it) and at boundaries where the
 * time-free tables of fit.c say the rest can still fit. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF REMAT__PLAN_INF
#define AT(arr, s, i) REMAT__AT(S, arr, s, i)
#define MAX_TABLE ((int64_t)1 << 24) /* stored stage results (1f1b) */

/* ------------------------------------------------------------ windows and baseline */

int64_t remat__plan_window_end(const remat__plan_inst *in, int64_t i, int64_t cap) {
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

/* By bisection on the cap, each probe a greedy packing. */
int64_t remat__plan_minmax_F(const remat__plan_inst *in) {
  int64_t lo = 0, hi = in->pF[in->L];
  for (int64_t l = 0; l < in->L; l++) lo = remat__max64(lo, in->fb[l]);
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
  int64_t T = remat__plan_minmax_F(in);
  return in->objective == REMAT_OBJ_BOTTLENECK ? T : in->pF[in->L] + (in->m - 1) * T;
}

double remat__plan_window_work(const remat__plan_solver *S) {
  double work = 0;
  for (int64_t i = 0; i < S->L; i++) {
    int64_t ns = 0;
    for (int64_t s = 0; s < S->p && s <= i; s++) ns += AT(S->pre, s, i);
    work += (double)ns * (double)(remat__plan_window_end(S->in, i, S->Tcap) - i);
  }
  return work;
}

/* ------------------------------------------------------------ bottleneck */

int remat__plan_pass_minmax(remat__plan_solver *S, int64_t *Tb) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  int64_t *B = remat__malloc((size_t)(p + 1) * (size_t)S->L1 * sizeof *B);
  int64_t *sl = remat__malloc((size_t)p * sizeof *sl);
  remat__plan_eval ev;
  remat__plan_eval_init(&ev, in, 0, 0, S->deadline);
  remat__plan_cache c;
  int rc = remat__plan_cache_init(&c, in->ncls);
  if (!B || !sl || rc) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory in the planner");
    goto out;
  }
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)S->L1; k++) B[k] = INF;
  AT(B, 0, 0) = 0;
  for (int64_t i = 0; i < L; i++) {
    if (remat__plan_late(S->deadline)) {
      rc = REMAT__PLAN_ETIME;
      goto out;
    }
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(S->pre, s, i) && AT(B, s, i) < INF) sl[ns++] = s;
    if (!ns) continue;
    remat__plan_eval_start(&ev, i);
    int64_t jend = remat__plan_window_end(in, i, S->Tcap);
    for (int64_t j = i + 1; j <= jend; j++) {
      int64_t F = in->pF[j] - in->pF[i];
      c.now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q];
        if (!AT(S->post, s + 1, j)) continue;
        int64_t b = AT(B, s, i), *cur = &AT(B, s + 1, j);
        if (remat__max64(b, F) >= *cur) continue;
        remat__plan_choice *ch;
        int ok = remat__plan_cached_eval(&ev, &c, j, s, REMAT__PLAN_LEAST_TIME, 0, &ch);
        if (ok < 0) {
          rc = remat__plan_knap_error(S->err, ok, i);
          goto out;
        }
        if (ok && remat__max64(b, ch->t) < *cur) *cur = remat__max64(b, ch->t);
      }
    }
  }
  *Tb = AT(B, p, L);
out:
  remat__free(B);
  remat__free(sl);
  remat__plan_eval_free(&ev);
  remat__plan_cache_free(&c);
  return rc;
}

int remat__plan_pass_fewest(remat__plan_solver *S, int64_t Tb, int64_t *bounds) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  size_t cells = (size_t)(p + 1) * (size_t)S->L1;
  int64_t *C = remat__malloc(cells * sizeof *C), *M = remat__malloc(cells * sizeof *M);
  int32_t *arg = remat__malloc(cells * sizeof *arg);
  int64_t *sl = remat__malloc((size_t)p * sizeof *sl);
  remat__plan_eval ev;
  remat__plan_eval_init(&ev, in, 1, 0, S->deadline);
  remat__plan_cache c;
  int rc = remat__plan_cache_init(&c, in->ncls);
  if (!C || !M || !arg || !sl || rc) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory in the planner");
    goto out;
  }
  for (size_t k = 0; k < cells; k++) C[k] = INF;
  AT(C, 0, 0) = 0;
  AT(M, 0, 0) = 0;
  for (int64_t i = 0; i < L; i++) {
    if (remat__plan_late(S->deadline)) {
      rc = REMAT__PLAN_ETIME;
      goto out;
    }
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(C, s, i) < INF) sl[ns++] = s;
    if (!ns) continue;
    remat__plan_eval_start(&ev, i);
    int64_t jend = remat__plan_window_end(in, i, Tb);
    for (int64_t j = i + 1; j <= jend; j++) {
      c.now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q];
        if (!AT(S->post, s + 1, j)) continue;
        int64_t c0 = AT(C, s, i), m0 = AT(M, s, i);
        int64_t *cc = &AT(C, s + 1, j), *cm = &AT(M, s + 1, j);
        if (c0 > *cc || (c0 == *cc && m0 >= *cm)) continue;
        remat__plan_choice *ch;
        int ok = remat__plan_cached_eval(&ev, &c, j, s, REMAT__PLAN_FEWEST, Tb, &ch);
        if (ok < 0) {
          rc = remat__plan_knap_error(S->err, ok, i);
          goto out;
        }
        if (!ok) continue;
        int64_t nc = c0 + ch->cnt, nm = remat__max64(m0, ch->mem);
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
  remat__plan_eval_free(&ev);
  remat__plan_cache_free(&c);
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

static int table_build(remat__plan_solver *S, table *T) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  memset(T, 0, sizeof *T);
  T->off = remat__malloc((size_t)p * (size_t)S->L1 * sizeof *T->off);
  T->len = remat__malloc((size_t)S->L1 * sizeof *T->len);
  if (!T->off || !T->len) return remat__errorf(S->err, REMAT_ENOMEM, "out of memory");
  int64_t n = 0;
  for (int64_t i = 0; i <= L; i++)
    T->len[i] = i < L ? remat__plan_window_end(in, i, S->Tcap) - i : 0;
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
  remat__plan_eval ev;
  remat__plan_eval_init(&ev, in, 0, 0, S->deadline);
  remat__plan_cache c;
  int rc = remat__plan_cache_init(&c, in->ncls);
  if (!T->t || !T->mem || !T->cnt || !sl || rc) {
    rc = remat__errorf(S->err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  for (int64_t i = 0; i < L; i++) {
    if (remat__plan_late(S->deadline)) {
      rc = REMAT__PLAN_ETIME;
      goto out;
    }
    int64_t ns = 0;
    for (int64_t s = 0; s < p && s <= i; s++)
      if (AT(T->off, s, i) >= 0) sl[ns++] = s;
    if (!ns) continue;
    remat__plan_eval_start(&ev, i);
    for (int64_t len = 1; len <= T->len[i]; len++) {
      int64_t j = i + len;
      c.now++;
      for (int64_t q = 0; q < ns; q++) {
        int64_t s = sl[q], e = AT(T->off, s, i) + len - 1;
        T->t[e] = INF;
        if (!AT(S->post, s + 1, j)) continue;
        remat__plan_choice *ch;
        int ok = remat__plan_cached_eval(&ev, &c, j, s, REMAT__PLAN_LEAST_TIME, 0, &ch);
        if (ok < 0) {
          rc = remat__plan_knap_error(S->err, ok, i);
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
  remat__plan_eval_free(&ev);
  remat__plan_cache_free(&c);
  return rc;
}

static int64_t table_minmax(remat__plan_solver *S, const table *T, int64_t *B) {
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
        int64_t v = remat__max64(b, t), *cur = &AT(B, s + 1, i + len);
        if (v < *cur) *cur = v;
      }
    }
  return AT(B, p, L);
}

static int result_better(const remat__plan_result *u, const remat__plan_result *v) {
  if (u->obj != v->obj) return u->obj < v->obj;
  if (u->cnt != v->cnt) return u->cnt < v->cnt;
  return u->mem < v->mem;
}

typedef struct {
  int64_t *sum, *cnt, *mem;
  int32_t *arg;
} dpbuf;

/* Least (sum of t, recomputed, peak) with every stage time <= cap; fills the
 * result (obj with the plan's actual max) and bounds. Returns 1 if found, 0
 * if not, REMAT__PLAN_ETIME past the deadline. */
static int table_sum(remat__plan_solver *S, const table *T, int64_t cap, dpbuf *d,
                     remat__plan_result *res, int64_t *bounds) {
  const remat__plan_inst *in = S->in;
  int64_t L = S->L, p = S->p;
  for (size_t k = 0; k < (size_t)(p + 1) * (size_t)S->L1; k++) d->sum[k] = INF;
  AT(d->sum, 0, 0) = 0;
  AT(d->cnt, 0, 0) = 0;
  AT(d->mem, 0, 0) = 0;
  for (int64_t s = 0; s < p; s++) {
    if (remat__plan_late(S->deadline)) return REMAT__PLAN_ETIME;
    for (int64_t i = s; i < L; i++) {
      int64_t o = AT(T->off, s, i), s0 = AT(d->sum, s, i);
      if (s0 == INF || o < 0) continue;
      int64_t c0 = AT(d->cnt, s, i), m0 = AT(d->mem, s, i);
      for (int64_t len = 1; len <= T->len[i]; len++) {
        int64_t e = o + len - 1, t = T->t[e];
        if (t == INF || t > cap) continue;
        int64_t j = i + len;
        int64_t ns = s0 + t, nc = c0 + T->cnt[e], nm = remat__max64(m0, T->mem[e]);
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
  }
  if (AT(d->sum, p, L) == INF) return 0;
  bounds[p] = L;
  int64_t tmax = 0;
  for (int64_t s = p; s > 0; s--) {
    int64_t j = bounds[s], i = AT(d->arg, s, j);
    bounds[s - 1] = i;
    tmax = remat__max64(tmax, T->t[AT(T->off, s - 1, i) + (j - i) - 1]);
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
  remat__plan_solver *S;
  const table *T;
  dpbuf d;
  int64_t *cand, *Sval; /* candidate caps and S at each (INF: not yet) */
  int64_t *tmp_bounds, *best_bounds;
  remat__plan_result best;
  int have;
  int late; /* the deadline passed: stop */
  int64_t dps;
} search;

static void consider(search *q, int64_t k) {
  if (q->late) return;
  remat__plan_result r;
  int found = table_sum(q->S, q->T, q->cand[k], &q->d, &r, q->tmp_bounds);
  if (found < 0) {
    q->late = 1;
    return;
  }
  q->dps++;
  q->Sval[k] = found ? r.sum : INF;
  if (found && (!q->have || result_better(&r, &q->best))) {
    q->best = r;
    q->have = 1;
    memcpy(q->best_bounds, q->tmp_bounds, (size_t)(q->S->p + 1) * sizeof *q->best_bounds);
  }
}

static void bisect(search *q, int64_t lo, int64_t hi) {
  if (hi - lo <= 1 || q->late) return;
  if (q->Sval[lo] == q->Sval[hi]) return; /* S constant: every T inside is worse than lo */
  int64_t m1 = q->S->in->m - 1;
  if (q->Sval[hi] != INF && q->Sval[hi] + m1 * q->cand[lo + 1] > q->best.obj) return;
  int64_t mid = lo + (hi - lo) / 2;
  consider(q, mid);
  bisect(q, lo, mid);
  bisect(q, mid, hi);
}

int remat__plan_pass_iteration(remat__plan_solver *S, int64_t *bounds, remat__plan_result *out) {
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
    rc = q.late ? REMAT__PLAN_ETIME : 1;
    goto out;
  }
  consider(&q, 0);
  consider(&q, 1);
  if (q.late) {
    rc = REMAT__PLAN_ETIME;
    goto out;
  }
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
  rc = q.late ? REMAT__PLAN_ETIME : 1;
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
