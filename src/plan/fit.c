/* fit.c: which stages fit their budgets at all, time aside. For every stage
 * boundary it finds whether stages 0..s-1 can cover the first layers (pre)
 * and whether stages s..p-1 can cover the rest (post), each stage at its
 * least memory; the partition programs of dp.c visit only boundaries that
 * are in both. When no partition fits, a bisection over bytes added to every
 * budget finds the smallest addition that would fit, and the arrangement that
 * needs the least memory.
 *
 * A stage that fits keeps fitting when it loses layers at either end, so the
 * valid starts for an end form an interval that only moves right: two
 * pointers, O(p L) stage checks. A check is O(1) in closed form, or O(log L)
 * through a segment tree over the scratch sizes of a sliding window. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF REMAT__PLAN_INF
#define AT(arr, s, i) REMAT__AT(S, arr, s, i)

/* ------------------------------------------------------------ memory window */

/* The largest saving n D (+ kw U, the W records of the layers taken) - (X -
 * Y)+ of a sliding window of layers with different scratch sizes, in
 * O(log L) per layer entering or leaving: a segment tree over items sorted
 * by (x, index), each node holding the sum of the savings of its present
 * items and the best (savings of present items up to and including one of
 * them) - its x. A layer is one item (xlo, n dlo + kw u) and, when an
 * option of larger scratch saves more, a second (xhi, n (dmax - dlo)): its
 * largest saving with scratch at most v is the sum of its items with
 * x <= v. The best choice with largest scratch v is then a prefix in this
 * order; the last item of a run of equal x carries the prefix that counts.
 * With a floor Y every prefix within x <= Y costs no scratch, so the best of
 * those is all of them; the prefixes beyond are the tree's best over the
 * ranks past Y, plus Y. */
#define NEG (INT64_MIN / 4)

struct remat__plan_xtree {
  int64_t size;        /* leaves, a power of two */
  int64_t *sum, *best; /* (2 size) */
  int64_t *rank;       /* (2 L) leaf of item k of layer l at 2 l + k, -1 for none */
  int64_t *xr;         /* (ncand) x of each rank, ascending */
  int64_t ncand;       /* items */
  int64_t s;           /* the stage being checked: its savings (remat__plan_saving) */
  int64_t wl, wr;      /* layers [wl, wr) are present */
  int used;            /* candidates have more than one scratch size */
};
typedef remat__plan_xtree xtree;

static int xl_cmp(const void *u, const void *v) {
  const remat__plan_xd *a = u, *b = v;
  if (a->x != b->x) return a->x < b->x ? -1 : 1;
  return a->d < b->d ? -1 : a->d > b->d;
}

/* Item k (0 or 1) of layer l: its x and d, or d = 0 for none. */
static remat__plan_xd item_of(const remat__plan_inst *in, int64_t l, int k) {
  if (!in->cand[l]) return (remat__plan_xd){0, 0};
  if (k == 0) return (remat__plan_xd){in->xlo[l], in->dlo[l]};
  return (remat__plan_xd){in->xhi[l], in->dmax[l] - in->dlo[l]};
}

static int xt_init(xtree *t, const remat__plan_inst *in) {
  memset(t, 0, sizeof *t);
  int64_t nc = 0;
  for (int64_t l = 0; l < in->L; l++)
    for (int k = 0; k < 2; k++) nc += item_of(in, l, k).d > 0;
  t->size = 1;
  while (t->size < nc) t->size *= 2;
  t->sum = remat__malloc((size_t)(2 * t->size) * sizeof *t->sum);
  t->best = remat__malloc((size_t)(2 * t->size) * sizeof *t->best);
  t->rank = remat__malloc((size_t)(in->L ? 2 * in->L : 1) * sizeof *t->rank);
  t->xr = remat__malloc((size_t)(nc ? nc : 1) * sizeof *t->xr);
  remat__plan_xd *order = remat__malloc((size_t)(nc ? nc : 1) * sizeof *order);
  if (!t->sum || !t->best || !t->rank || !t->xr || !order) {
    remat__free(order);
    return REMAT_ENOMEM;
  }
  int64_t k = 0;
  for (int64_t l = 0; l < in->L; l++)
    for (int q = 0; q < 2; q++) {
      t->rank[2 * l + q] = -1;
      remat__plan_xd it = item_of(in, l, q);
      if (it.d > 0) order[k++] = (remat__plan_xd){it.x, 2 * l + q};
    }
  qsort(order, (size_t)k, sizeof *order, xl_cmp); /* d holds the item here */
  for (int64_t r = 0; r < k; r++) {
    t->rank[order[r].d] = r;
    t->xr[r] = order[r].x;
  }
  t->ncand = k;
  t->used = k > 1 && order[0].x != order[k - 1].x;
  remat__free(order);
  return 0;
}

static void xt_free(xtree *t) {
  remat__free(t->sum);
  remat__free(t->best);
  remat__free(t->rank);
  remat__free(t->xr);
  t->sum = t->best = t->rank = t->xr = NULL;
}

static void xt_reset(xtree *t, int64_t s) {
  if (!t->used) return; /* every window has one scratch size: closed form */
  for (int64_t k = 0; k < 2 * t->size; k++) {
    t->sum[k] = 0;
    t->best[k] = NEG;
  }
  t->s = s;
  t->wl = t->wr = 0;
}

static void xt_set(xtree *t, const remat__plan_inst *in, int64_t l, int on) {
  for (int q = 0; q < 2; q++) {
    int64_t k = t->rank[2 * l + q];
    if (k < 0) continue;
    remat__plan_xd it = item_of(in, l, q);
    /* the whole saving on the stage: the layer's W records go at its first step */
    int64_t d = q == 0 ? remat__plan_saving(in, t->s, l, it.d) : in->n[t->s] * it.d;
    k += t->size;
    t->sum[k] = on ? d : 0;
    t->best[k] = on ? d - it.x : NEG;
    for (k /= 2; k >= 1; k /= 2) {
      int64_t L = 2 * k, R = L + 1;
      t->sum[k] = t->sum[L] + t->sum[R];
      int64_t right = t->best[R] == NEG ? NEG : t->sum[L] + t->best[R];
      t->best[k] = t->best[L] > right ? t->best[L] : right;
    }
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

/* Over the present items of ranks [k, size), in the node at `node` covering
 * [lo, hi): the best (saving of every present item up to one) - its x, into
 * *best; *before accumulates the savings of present items left of each part. */
static void xt_suffix(const xtree *t, int64_t node, int64_t lo, int64_t hi, int64_t k,
                      int64_t *before, int64_t *best) {
  if (hi <= k) {
    *before += t->sum[node];
    return;
  }
  if (lo >= k) {
    if (t->best[node] != NEG) *best = remat__max64(*best, *before + t->best[node]);
    *before += t->sum[node];
    return;
  }
  int64_t mid = lo + (hi - lo) / 2;
  xt_suffix(t, 2 * node, lo, mid, k, before, best);
  xt_suffix(t, 2 * node + 1, mid, hi, k, before, best);
}

/* Sum of the savings of the present items of ranks [0, k). */
static int64_t xt_prefix(const xtree *t, int64_t k) {
  int64_t sum = 0;
  for (int64_t i = t->size, j = t->size + k; i < j; i /= 2, j /= 2) {
    if (i & 1) sum += t->sum[i++];
    if (j & 1) sum += t->sum[--j];
  }
  return sum;
}

/* The largest saving n D - (X - Y)+ of the present window (0: none). */
static int64_t xt_saving(const xtree *t, int64_t Y) {
  int64_t best = t->best[1] > 0 ? t->best[1] : 0;
  if (Y == 0) return best;
  int64_t lo = 0, hi = t->ncand; /* k = lo: the ranks with x <= Y */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (t->xr[mid] <= Y) lo = mid + 1;
    else hi = mid;
  }
  int64_t before = 0, past = NEG;
  xt_suffix(t, 1, 0, t->size, lo, &before, &past);
  best = xt_prefix(t, lo);
  if (past != NEG && Y + past > best) best = Y + past;
  return best;
}

/* ------------------------------------------------------------ solver tables */

int remat__plan_fit_init(remat__plan_solver *S, const remat__plan_inst *in, remat_error *err) {
  memset(S, 0, sizeof *S);
  int64_t L = in->L, p = in->p;
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
  S->xs = remat__malloc((size_t)(L ? 2 * L : 1) * sizeof *S->xs);
  S->xt = remat__malloc(sizeof *S->xt);
  if (S->xt && xt_init(S->xt, in)) {
    xt_free(S->xt);
    remat__free(S->xs);
    S->xs = NULL;
  }
  if (!S->pre || !S->post || !S->pred || !S->aux || !S->xs || !S->xt)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory planning %lld layers", (long long)L);
  return 0;
}

void remat__plan_fit_free(remat__plan_solver *S) {
  remat__free(S->pre);
  remat__free(S->post);
  remat__free(S->pred);
  remat__free(S->aux);
  remat__free(S->xs);
  if (S->xt) xt_free(S->xt);
  remat__free(S->xt);
  S->pre = S->post = NULL;
  S->pred = S->aux = NULL;
  S->xs = NULL;
  S->xt = NULL;
}

/* ------------------------------------------------------------ reach */

static int mem_ok(remat__plan_solver *S, int64_t i, int64_t j, int64_t s) {
  const remat__plan_inst *in = S->in;
  if (in->pF[j] - in->pF[i] > S->Tcap) return 0;
  int64_t Y = remat__plan_work_max(in, i, j);
  int64_t need = remat__plan_base_memory(in, i, j, s) + Y;
  int64_t budget = in->budget[s] + S->delta;
  if (need <= budget) return 1;
  int64_t D = in->pD[j] - in->pD[i];
  int64_t sD = remat__plan_saving_all(in, s, i, j, D);
  if (sD < need - budget) return 0;
  int64_t fc = in->first_cand[i];
  if (in->x_end[fc] >= j) { /* one pair of scratch sizes */
    int64_t sDlo = remat__plan_saving_all(in, s, i, j, in->pDlo[j] - in->pDlo[i]);
    int64_t xl = in->xlo[fc] > Y ? in->xlo[fc] - Y : 0, xh = in->xhi[fc] > Y ? in->xhi[fc] - Y : 0;
    return need - (sD - xh) <= budget || need - (sDlo - xl) <= budget;
  }
  xt_window(S->xt, in, i, j);
  int64_t save = xt_saving(S->xt, Y);
  return save > 0 && need - save <= budget;
}

int remat__plan_reach(remat__plan_solver *S) {
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
    xt_reset(S->xt, s);
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
    xt_reset(S->xt, s);
    for (int64_t i = hi - 1; i >= s; i--) {
      if (!AT(S->pre, s, i)) continue; /* hi only needs to stay >= its true value */
      while (hi > i && !mem_ok(S, i, hi, s)) hi--;
      if (hi > i && next[i + 1] <= hi) AT(S->post, s, i) = 1;
    }
  }
  return 1;
}

/* ------------------------------------------------------------ nothing fits */

int remat__plan_min_delta(remat__plan_solver *S, int64_t *delta) {
  int64_t lo = 1, hi = (int64_t)1 << 61;
  while (lo < hi) {
    if (remat__plan_late(S->deadline)) return REMAT__PLAN_ETIME;
    S->delta = lo + (hi - lo) / 2;
    if (remat__plan_reach(S)) hi = S->delta;
    else lo = S->delta + 1;
  }
  S->delta = lo;
  REMAT_ASSERT(remat__plan_reach(S));
  *delta = lo;
  return 0;
}

void remat__plan_least_memory(remat__plan_solver *S, int64_t *bounds, uint8_t *rec) {
  const remat__plan_inst *in = S->in;
  int64_t p = S->p;
  bounds[p] = S->L;
  for (int64_t s = p; s > 0; s--) bounds[s - 1] = AT(S->pred, s, bounds[s]);
  for (int64_t s = 0; s < p; s++) {
    int64_t v, Y = remat__plan_work_max(in, bounds[s], bounds[s + 1]);
    remat__plan_max_saving(in, bounds[s], bounds[s + 1], s, Y, S->xs, &v);
    for (int64_t l = bounds[s]; l < bounds[s + 1]; l++) {
      const remat__plan_opt *o = v >= 0 && in->cand[l] ? remat__plan_best_under(in, l, v) : NULL;
      rec[l] = o ? (uint8_t)o->pol : 0;
    }
  }
}
