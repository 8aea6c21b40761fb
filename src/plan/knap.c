/* knap.c: the exact choice of recomputed layers inside one pipeline stage.
 *
 * Each layer may take one of its options (recompute it, or the middle
 * policy), or none (keep it): option o of layer l saves d bytes per
 * micro-batch, costs r time, and needs x scratch bytes while it reruns; with
 * n micro-batches in flight a stage must save n D - (X - Y)+ >= E, where E is
 * its excess over budget with every layer kept, D the sum of d over the
 * options taken, X their largest x and Y the largest work bytes of the
 * stage's layers, which the stage holds anyway (E counts it), so scratch
 * only costs what exceeds it. Minimising r under that is a multiple-choice
 * covering knapsack, NP-hard in general, so this keeps Pareto sets
 * (Nemhauser-Ullmann) and is exact for any data: adding a layer merges the
 * list with one shifted copy of it per option, so a choice takes at most one
 * option of each layer. Its cost grows with the number of distinct
 * non-dominated choices, which stays small for stages of tens of layers or
 * few distinct layer kinds. The caller first tries closed forms (nothing to
 * save, one kind of layer).
 *
 * Invariants of a list: points sorted by key ascending (key = r with levels,
 * (r, cnt) without), D strictly increasing along the list. A point survives
 * only if no point with a key <= its key has a D >= its D. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

void remat__knap_init(remat__knap *k, int levels, int track, int64_t limit) {
  memset(k, 0, sizeof *k);
  k->levels = levels;
  k->track = track;
  k->limit = limit > 0 ? limit : INT64_MAX;
  k->rmax = INT64_MAX;
}

void remat__knap_set_rmax(remat__knap *k, int64_t rmax) { k->rmax = rmax; }

void remat__knap_reset(remat__knap *k) {
  k->nthr = 0;
  k->points = 0;
  k->nnode = 0;
  k->rmax = INT64_MAX;
}

void remat__knap_free(remat__knap *k) {
  for (int64_t t = 0; t < k->thrcap; t++) {
    for (int64_t l = 0; l < k->thr[t].levcap; l++) remat__free(k->thr[t].lev[l].p);
    remat__free(k->thr[t].lev);
  }
  remat__free(k->thr);
  remat__free(k->tmp.p);
  remat__free(k->node_item);
  remat__free(k->node_parent);
  memset(k, 0, sizeof *k);
}

static int list_reserve(remat__klist *l, int64_t need) {
  if (need <= l->cap) return 0;
  int64_t cap = l->cap ? l->cap : 16;
  while (cap < need) cap *= 2;
  remat__kpt *p = remat__malloc((size_t)cap * sizeof *p);
  if (!p) return REMAT_ENOMEM;
  if (l->n) memcpy(p, l->p, (size_t)l->n * sizeof *p);
  remat__free(l->p);
  l->p = p;
  l->cap = cap;
  return 0;
}

static int levels_reserve(remat__kthr *t, int64_t need) {
  if (need <= t->levcap) return 0;
  int64_t cap = t->levcap ? t->levcap : 4;
  while (cap < need) cap *= 2;
  remat__klist *lv = remat__calloc((size_t)cap, sizeof *lv);
  if (!lv) return REMAT_ENOMEM;
  if (t->levcap) memcpy(lv, t->lev, (size_t)t->levcap * sizeof *lv);
  remat__free(t->lev);
  t->lev = lv;
  t->levcap = cap;
  return 0;
}

static int new_node(remat__knap *k, int64_t item, int32_t parent, int32_t *out) {
  if (k->nnode == k->nodecap) {
    if (k->nodecap >= INT32_MAX / 2) return REMAT_ERANGE;
    int64_t cap = k->nodecap ? k->nodecap * 2 : 256;
    int64_t *it = remat__malloc((size_t)cap * sizeof *it);
    int32_t *pa = remat__malloc((size_t)cap * sizeof *pa);
    if (!it || !pa) {
      remat__free(it);
      remat__free(pa);
      return REMAT_ENOMEM;
    }
    if (k->nnode) {
      memcpy(it, k->node_item, (size_t)k->nnode * sizeof *it);
      memcpy(pa, k->node_parent, (size_t)k->nnode * sizeof *pa);
    }
    remat__free(k->node_item);
    remat__free(k->node_parent);
    k->node_item = it;
    k->node_parent = pa;
    k->nodecap = cap;
  }
  k->node_item[k->nnode] = item;
  k->node_parent[k->nnode] = parent;
  *out = (int32_t)k->nnode++;
  return 0;
}

/* Order of the merge: key ascending, then D descending, then X ascending. */
static int before(const remat__kpt *u, const remat__kpt *v, int levels) {
  if (u->r != v->r) return u->r < v->r;
  if (!levels && u->cnt != v->cnt) return u->cnt < v->cnt;
  if (u->D != v->D) return u->D > v->D;
  return u->X <= v->X;
}

/* A point of src with option o added. */
static remat__kpt shifted(const remat__kpt *p, const remat__kopt *o) {
  remat__kpt s = *p;
  s.r += o->r;
  s.D += o->d;
  if (o->x > s.X) s.X = o->x;
  s.cnt++;
  return s;
}

/* dst := Pareto(dst U (src + opt[0]) U ... U (src + opt[n - 1])), in one
 * pass over the n + 1 sorted lists. src may be dst. */
static int merge(remat__knap *k, remat__klist *dst, const remat__klist *src, const remat__kopt *opt,
                 int n) {
  int64_t na = dst->n, nb = src->n;
  int rc = list_reserve(&k->tmp, na + n * nb);
  if (rc) return rc;
  const remat__kpt *A = dst->p, *B = src->p;
  remat__kpt *out = k->tmp.p, head[REMAT__PLAN_OPTS];
  int64_t ia = 0, ib[REMAT__PLAN_OPTS] = {0}, no = 0, bestD = -1;
  for (int q = 0; q < n && nb; q++) head[q] = shifted(&B[0], &opt[q]);
  for (;;) {
    /* the first in order; on a tie dst's point, then the earlier option */
    const remat__kpt *c = ia < na ? &A[ia] : NULL;
    int from = -1;
    for (int q = 0; q < n; q++)
      if (ib[q] < nb && (!c || !before(c, &head[q], k->levels))) {
        c = &head[q];
        from = q;
      }
    if (!c || c->r > k->rmax) break; /* the rest take longer still */
    if (c->D > bestD) {
      remat__kpt v = *c;
      if (from >= 0) {
        v.node = -1;
        if (k->track && (rc = new_node(k, opt[from].id, B[ib[from]].node, &v.node))) return rc;
      }
      out[no++] = v;
      bestD = v.D;
    }
    if (from < 0) ia++;
    else if (++ib[from] < nb) head[from] = shifted(&B[ib[from]], &opt[from]);
  }
  k->points += no - na;
  remat__klist t = *dst;
  dst->p = k->tmp.p;
  dst->cap = k->tmp.cap;
  dst->n = no;
  k->tmp.p = t.p;
  k->tmp.cap = t.cap;
  k->tmp.n = 0;
  return 0;
}

/* Adds a threshold at index pos holding the sets of the threshold below. */
static int add_threshold(remat__knap *k, int64_t pos, int64_t v) {
  if (k->nthr == k->thrcap) {
    int64_t cap = k->thrcap ? k->thrcap * 2 : 4;
    remat__kthr *t = remat__calloc((size_t)cap, sizeof *t);
    if (!t) return REMAT_ENOMEM;
    if (k->thrcap) memcpy(t, k->thr, (size_t)k->thrcap * sizeof *t);
    remat__free(k->thr);
    k->thr = t;
    k->thrcap = cap;
  }
  remat__kthr spare = k->thr[k->nthr]; /* keeps its buffers for reuse */
  memmove(&k->thr[pos + 1], &k->thr[pos], (size_t)(k->nthr - pos) * sizeof *k->thr);
  k->thr[pos] = spare;
  k->nthr++;
  remat__kthr *T = &k->thr[pos];
  T->v = v;
  int rc;
  if (pos > 0) {
    const remat__kthr *S = &k->thr[pos - 1];
    if ((rc = levels_reserve(T, S->nlev + 1))) return rc;
    for (int64_t l = 0; l < S->nlev; l++) {
      if ((rc = list_reserve(&T->lev[l], S->lev[l].n))) return rc;
      if (S->lev[l].n) /* a level may be empty: its choices all took too long */
        memcpy(T->lev[l].p, S->lev[l].p, (size_t)S->lev[l].n * sizeof(remat__kpt));
      T->lev[l].n = S->lev[l].n;
      k->points += S->lev[l].n;
    }
    T->nlev = S->nlev;
  } else {
    if ((rc = levels_reserve(T, 2))) return rc;
    if ((rc = list_reserve(&T->lev[0], 1))) return rc;
    T->lev[0].p[0] = (remat__kpt){0, 0, 0, 0, -1};
    T->lev[0].n = 1;
    T->nlev = 1;
    k->points += 1;
  }
  return 0;
}

/* Adds the item to threshold T, with its options of x <= T->v. */
static int insert_into(remat__knap *k, remat__kthr *T, const remat__kopt *opt, int n) {
  remat__kopt use[REMAT__PLAN_OPTS];
  int m = 0, rc;
  for (int q = 0; q < n; q++)
    if (opt[q].x <= T->v) use[m++] = opt[q];
  if (!m) return 0;
  if (!k->levels) return merge(k, &T->lev[0], &T->lev[0], use, m);
  int64_t top = T->nlev - 1;
  if ((rc = levels_reserve(T, top + 2))) return rc;
  T->lev[top + 1].n = 0;
  /* downwards, so that level l still holds the choices without this item */
  for (int64_t l = top; l >= 0; l--)
    if ((rc = merge(k, &T->lev[l + 1], &T->lev[l], use, m))) return rc;
  if (T->lev[top + 1].n > 0) T->nlev = top + 2;
  return 0;
}

int remat__knap_insert(remat__knap *k, const remat__kopt *opt, int n) {
  REMAT_ASSERT(n >= 1 && n <= REMAT__PLAN_OPTS);
  int rc;
  int64_t xmin = opt[0].x;
  for (int q = 0; q < n; q++) {
    REMAT_ASSERT(opt[q].d > 0);
    int64_t pos = 0;
    while (pos < k->nthr && k->thr[pos].v < opt[q].x) pos++;
    if (pos == k->nthr || k->thr[pos].v != opt[q].x)
      if ((rc = add_threshold(k, pos, opt[q].x))) return rc;
    if (opt[q].x < xmin) xmin = opt[q].x;
  }
  for (int64_t t = 0; t < k->nthr; t++)
    if (k->thr[t].v >= xmin && (rc = insert_into(k, &k->thr[t], opt, n))) return rc;
  return k->points > k->limit ? REMAT_ERANGE : 0;
}

static int res_better(const remat__knap_res *u, const remat__knap_res *v, int time_first) {
  if (time_first && u->r != v->r) return u->r < v->r;
  if (u->cnt != v->cnt) return u->cnt < v->cnt;
  return u->memrel < v->memrel;
}

/* First index with D >= need, or n. */
static int64_t lower_D(const remat__klist *l, int64_t need) {
  int64_t lo = 0, hi = l->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (l->p[mid].D >= need) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* Number of points with r <= cap. */
static int64_t upper_r(const remat__klist *l, int64_t cap) {
  int64_t lo = 0, hi = l->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (l->p[mid].r <= cap) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The scratch a set of threshold v costs above the floor Y. */
static int64_t above(int64_t v, int64_t Y) { return v > Y ? v - Y : 0; }

/* Thresholds below the floor cost nothing, so only the largest of them, whose
 * lists dominate theirs, needs asking. */
static int64_t first_threshold(const remat__knap *k, int64_t Y) {
  int64_t t = 0;
  while (t + 1 < k->nthr && k->thr[t + 1].v <= Y) t++;
  return t;
}

int remat__knap_min_time(const remat__knap *k, int64_t n, int64_t E, int64_t Y,
                         remat__knap_res *res) {
  int found = 0;
  for (int64_t t = first_threshold(k, Y); t < k->nthr; t++) {
    const remat__kthr *T = &k->thr[t];
    int64_t need = (E + above(T->v, Y) + n - 1) / n; /* n D >= E + (v - Y)+ */
    int64_t l0 = k->levels ? 1 : 0;
    for (int64_t l = l0; l < T->nlev; l++) {
      const remat__klist *L = &T->lev[l];
      int64_t i = lower_D(L, need);
      if (i == L->n) continue;
      const remat__kpt *P = &L->p[i];
      remat__knap_res c = {P->r, P->cnt, above(P->X, Y) - n * P->D, P->node};
      if (!found || res_better(&c, res, 1)) *res = c;
      found = 1;
    }
  }
  return found;
}

int remat__knap_min_count(const remat__knap *k, int64_t n, int64_t E, int64_t Y, int64_t cap,
                          remat__knap_res *res) {
  REMAT_ASSERT(k->levels);
  int found = 0;
  for (int64_t t = first_threshold(k, Y); t < k->nthr; t++) {
    const remat__kthr *T = &k->thr[t];
    for (int64_t l = 1; l < T->nlev; l++) {
      if (found && l > res->cnt) break;
      const remat__klist *L = &T->lev[l];
      int64_t i = upper_r(L, cap) - 1;
      if (i < 0) continue;
      const remat__kpt *P = &L->p[i];
      if (n * P->D - above(T->v, Y) < E) continue;
      remat__knap_res c = {P->r, P->cnt, above(P->X, Y) - n * P->D, P->node};
      if (!found || res_better(&c, res, 0)) *res = c;
      found = 1;
      break;
    }
  }
  return found;
}

int64_t remat__knap_items(const remat__knap *k, int32_t node, int64_t *items) {
  int64_t n = 0;
  for (int32_t v = node; v >= 0; v = k->node_parent[v]) items[n++] = k->node_item[v];
  for (int64_t i = 0; i < n / 2; i++) {
    int64_t t = items[i];
    items[i] = items[n - 1 - i];
    items[n - 1 - i] = t;
  }
  return n;
}
