/* stage.c: one pipeline stage on a given run of layers: the most memory its
 * recomputation can save, and its best choice of what each layer does
 * (keep, recompute, middle) for a time objective, in closed form where the
 * candidates are alike (one kind of layer, or one pair of scratch sizes)
 * and through the Pareto sets of knap.c otherwise. A stage holds its largest
 * work bytes Y whatever it recomputes, so a layer's scratch x costs only
 * (x - Y)+ on top of it. The partition programs of dp.c ask it for every
 * stage they consider; stages of one class (same micro-batches held and
 * budget) share the answers through a small cache. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

/* ------------------------------------------------------------ memory */

static int xd_cmp(const void *u, const void *v) {
  const remat__plan_xd *a = u, *b = v;
  return a->x < b->x ? -1 : a->x > b->x;
}

static int64_t above(int64_t x, int64_t Y) { return x > Y ? x - Y : 0; }

const remat__plan_opt *remat__plan_best_under(const remat__plan_inst *in, int64_t l, int64_t v) {
  const remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * l], *best = NULL;
  for (int q = 0; q < in->nopt[l]; q++)
    if (o[q].x <= v && (!best || o[q].d > best->d)) best = &o[q];
  return best;
}

int64_t remat__plan_max_saving(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s,
                               int64_t Y, remat__plan_xd *scratch, int64_t *vbest) {
  int64_t D = in->pD[j] - in->pD[i], n = in->n[s];
  if (vbest) *vbest = -1;
  if (D == 0) return 0;
  int64_t fc = in->first_cand[i];
  if (in->x_end[fc] >= j) {
    /* one pair of scratch sizes: the best is at one of the two */
    int64_t Dlo = in->pDlo[j] - in->pDlo[i];
    int64_t s0 = remat__plan_saving_all(in, s, i, j, Dlo) - above(in->xlo[fc], Y),
            s1 = remat__plan_saving_all(in, s, i, j, D) - above(in->xhi[fc], Y);
    int64_t sv = s1 > s0 ? s1 : s0;
    if (sv > 0 && vbest) *vbest = s1 > s0 ? in->xhi[fc] : in->xlo[fc];
    return sv > 0 ? sv : 0;
  }
  int own = scratch == NULL;
  if (own) scratch = remat__malloc((size_t)(j - i) * 2 * sizeof *scratch);
  if (!scratch) return -1;
  /* the largest saving under a threshold v steps up at each layer's xlo and
   * xhi: as increments sorted by x, every prefix ending a run of equal x
   * is the best choice with largest scratch that x (the W records a layer
   * stops keeping count at its first step) */
  int64_t k = 0;
  for (int64_t l = fc; l < j; l++) {
    if (!in->cand[l]) continue;
    scratch[k++] = (remat__plan_xd){in->xlo[l], remat__plan_saving(in, s, l, in->dlo[l])};
    if (in->dmax[l] > in->dlo[l])
      scratch[k++] = (remat__plan_xd){in->xhi[l], n * (in->dmax[l] - in->dlo[l])};
  }
  qsort(scratch, (size_t)k, sizeof *scratch, xd_cmp);
  int64_t best = 0, cum = 0;
  for (int64_t t = 0; t < k; t++) {
    cum += scratch[t].d;
    if (t + 1 < k && scratch[t + 1].x == scratch[t].x) continue;
    int64_t sv = cum - above(scratch[t].x, Y);
    if (sv > best) {
      best = sv;
      if (vbest) *vbest = scratch[t].x;
    }
  }
  if (own) remat__free(scratch);
  return best;
}

/* ------------------------------------------------------------ alike candidates */

int remat__plan_alike_pol(const remat__plan_inst *in, int64_t l, int64_t k, int64_t k0,
                          int64_t cnt) {
  const remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * l];
  if (in->nopt[l] == 2 && o[1].pol == REMAT_RECOMPUTE) return k < cnt - k0 ? o[1].pol : o[0].pol;
  return k < k0 ? o[0].pol : o[1].pol;
}

/* (t, cnt, memrel) lexicographic, or (cnt, memrel) when time does not count. */
static int alike_better(int64_t t, int64_t c, int64_t m, int64_t bt, int64_t bc, int64_t bm,
                        int time_first) {
  if (time_first && t != bt) return t < bt;
  if (c != bc) return c < bc;
  return m < bm;
}

int remat__plan_alike(const remat__plan_inst *in, int64_t fc, int64_t K, int64_t s, int64_t E,
                      int64_t Y, int mode, int64_t tcap, int64_t *k0, int64_t *k1, int64_t *t,
                      int64_t *memrel) {
  const remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * fc];
  int time_first = mode == REMAT__PLAN_LEAST_TIME;
  /* what one layer saves by each option */
  const int64_t e0 = remat__plan_saving(in, s, fc, o[0].d),
                e1 = in->nopt[fc] > 1 ? remat__plan_saving(in, s, fc, o[1].d) : 0;
  if (in->nopt[fc] == 1) { /* the first k, k as small as fits */
    int64_t x = above(o[0].x, Y), k = (E + x + e0 - 1) / e0;
    if (k > K || (!time_first && k * o[0].r > tcap)) return 0;
    *k0 = k;
    *k1 = 0;
    *t = k * o[0].r;
    *memrel = x - k * e0;
    return 1;
  }
  /* two options: for each count a of the first, the fewest b of the second
   * (any more only adds time and layers) */
  int found = 0;
  int64_t bt = 0, bc = 0, bm = 0;
  for (int64_t a = 0; a <= K; a++) {
    int64_t sa = a * e0, xa = a ? o[0].x : 0;
    for (int with_b = 0; with_b < 2; with_b++) {
      int64_t b = 0, X = xa;
      if (with_b) {
        X = remat__max64(xa, o[1].x);
        int64_t need = E + above(X, Y) - sa;
        b = need > 0 ? (need + e1 - 1) / e1 : 0;
        if (b < 1) b = 1;
        if (a + b > K) continue;
      } else if (!a || sa - above(X, Y) < E) {
        continue;
      }
      int64_t tt = a * o[0].r + b * o[1].r, mm = above(X, Y) - sa - b * e1;
      if (!time_first && tt > tcap) continue;
      if (!found || alike_better(tt, a + b, mm, bt, bc, bm, time_first)) {
        *k0 = a;
        *k1 = b;
        bt = tt;
        bc = a + b;
        bm = mm;
        found = 1;
      }
    }
  }
  if (found) {
    *t = bt;
    *memrel = bm;
  }
  return found;
}

/* ------------------------------------------------------------ per micro-batch */

void remat__plan_slots_of(int64_t m, int64_t n, int64_t layers, int64_t units, int64_t *ks) {
  int64_t h = remat__plan_cheap_slots(m, n);
  for (int64_t q = 0; q < layers; q++) {
    ks[q] = remat__min64(units, h);
    units -= ks[q];
  }
  for (int64_t q = 0; q < layers && units > 0; q++) {
    int64_t more = remat__min64(n - 1 - ks[q], units);
    ks[q] += more;
    units -= more;
  }
  REMAT_ASSERT(units == 0);
}

static int64_t om_r(const remat__plan_opt *om) { return om ? om->r : 0; }

/* Units f over lam layers (a slot's unit serves c or c + 1 micro-batches,
 * h cheap ones per layer): the micro-batches they serve at best. */
static int64_t unit_mbs(int64_t f, int64_t lam, int64_t c, int64_t h) {
  return c * f + (f > lam * h ? f - lam * h : 0);
}

/* Alike candidates on a stage of n slots, planned per micro-batch: nmid
 * take the middle policy, nfull recompute in full, and of the P = K - nmid
 * - nfull others, lam keep but recompute in full in some of their slots,
 * f (layer, slot) units in all, 1 to n - 1 per layer; the rest keep. A
 * unit saves a - c and costs the micro-batches its slot serves (m / n, or
 * one more for the first m % n slots), the cheapest first. Every count of
 * middle and full layers is tried; for each the fewest units that fit,
 * over as few layers as the least time allows (REMAT__PLAN_LEAST_TIME: then
 * time, layers not wholly kept, memory is least), or, within tcap, the
 * fewest layers and then as many units as tcap allows on them
 * (REMAT__PLAN_FEWEST: layers, then memory). So the choice is exact over
 * these arrangements. Returns 1 with *out's t (recompute only), cnt, mem
 * (the memory relative to keeping all, as remat__plan_alike's memrel) and
 * counts, or 0. */
static int alike_slots(const remat__plan_inst *in, int64_t fc, int64_t K, int64_t s, int64_t E,
                       int64_t Y, int mode, int64_t tcap, remat__plan_choice *out) {
  const remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * fc], *of = NULL, *om = NULL;
  for (int q = 0; q < in->nopt[fc]; q++) {
    if (o[q].pol == REMAT_RECOMPUTE) of = &o[q];
    if (o[q].pol == REMAT_MIDDLE) om = &o[q];
  }
  int64_t n = in->n[s], c = in->m / n, h = remat__plan_cheap_slots(in->m, n);
  int64_t ru = of->r / in->ms, d = of->d;
  int64_t ef = remat__plan_saving(in, s, fc, d);
  int64_t em = om ? remat__plan_saving(in, s, fc, om->d) : 0;
  int time_first = mode == REMAT__PLAN_LEAST_TIME, found = 0;
  for (int64_t b = 0; b <= (om ? K : 0); b++)
    for (int64_t g = 0; g <= K - b; g++) {
      int64_t P = K - b - g, saved = b * em + g * ef, base = b * om_r(om) + g * of->r;
      for (int with_units = 0; with_units < 2; with_units++) {
        int64_t f = 0, lam = 0, X = remat__max64(b ? om->x : 0, g ? of->x : 0);
        if (with_units) {
          if (P == 0) continue;
          X = remat__max64(X, of->x);
          int64_t need = E + above(X, Y) - saved;
          f = need > 0 ? (need + d - 1) / d : 1;
          if (f > P * (n - 1)) continue;
          int64_t fewest = (f + n - 2) / (n - 1); /* layers that can hold f */
          if (time_first && ru > 0) {
            lam = remat__min64((f + h - 1) / h, P);
          } else if (time_first) { /* free: the fewest layers, all their slots */
            lam = fewest;
            f = lam * (n - 1);
          } else {
            /* fewest layers within tcap (more layers, more cheap slots) */
            int64_t slack = tcap - base - ru * c * f;
            if (slack < 0) continue;
            lam = fewest;
            if (ru > 0 && f - lam * h > slack / ru) lam = (f - slack / ru + h - 1) / h;
            if (lam > P) continue;
            /* then as many units on them as tcap allows: the least memory */
            int64_t most = lam * (n - 1), room = tcap - base;
            if (ru > 0) { /* units of c micro-batches, then of c + 1 */
              int64_t cheap = room / (ru * c);
              most = remat__min64(most, cheap <= lam * h ? cheap : (room / ru + lam * h) / (c + 1));
            }
            f = remat__max64(f, most);
          }
        } else if (saved - above(X, Y) < E) {
          continue;
        }
        int64_t t = base + ru * unit_mbs(f, lam, c, h);
        int64_t mem = above(X, Y) - saved - f * d;
        if (!time_first && t > tcap) continue;
        if (!found || alike_better(t, b + g + lam, mem, out->t, out->cnt, out->mem, time_first)) {
          *out = (remat__plan_choice){t, b + g + lam, mem, 3, -1, 0, g, f, b, lam};
          found = 1;
        }
      }
    }
  return found;
}

/* ------------------------------------------------------------ best choice */

void remat__plan_eval_init(remat__plan_eval *ev, const remat__plan_inst *in, int levels, int track,
                           double deadline) {
  memset(ev, 0, sizeof *ev);
  ev->in = in;
  ev->deadline = deadline;
  remat__knap_init(&ev->kn, levels, track, REMAT__PLAN_KNAP_LIMIT);
}

void remat__plan_eval_free(remat__plan_eval *ev) { remat__knap_free(&ev->kn); }

void remat__plan_eval_start(remat__plan_eval *ev, int64_t i) {
  ev->i = i;
  ev->built = i;
  ev->kkey = -1;
  ev->yend = i;
  ev->Y = 0;
  remat__knap_reset(&ev->kn);
}

/* The stage's floor Y = max y over [i, j), grown with the stage. */
static int64_t floor_to(remat__plan_eval *ev, int64_t j) {
  const remat__plan_inst *in = ev->in;
  if (!in->ytree) return 0;
  if (j < ev->yend) { /* a shorter stage than the last: start again */
    ev->yend = ev->i;
    ev->Y = 0;
  }
  for (; ev->yend < j; ev->yend++) ev->Y = remat__max64(ev->Y, in->y[ev->yend]);
  return ev->Y;
}

/* Whether stage s plans its alike candidates (from fc) per micro-batch:
 * asked to, several slots, and a full recompute among their options. */
static int slots_apply(const remat__plan_inst *in, int64_t fc, int64_t s) {
  if (!in->per_mb || in->n[s] < 2 || in->n[s] > REMAT__MAX_SLOTS) return 0;
  for (int q = 0; q < in->nopt[fc]; q++)
    if (in->opt[REMAT__PLAN_OPTS * fc + q].pol == REMAT_RECOMPUTE) return 1;
  return 0;
}

int remat__plan_eval_stage(remat__plan_eval *ev, int64_t j, int64_t s, int mode, int64_t cap,
                           remat__plan_choice *out) {
  const remat__plan_inst *in = ev->in;
  int64_t i = ev->i, n = in->n[s];
  int64_t F = in->pF[j] - in->pF[i];
  if (mode == REMAT__PLAN_FEWEST && F > cap) return 0;
  int64_t Y = floor_to(ev, j);
  int64_t kept = remat__plan_base_memory(in, i, j, s) + Y;
  int64_t E = kept - in->budget[s];
  if (E <= 0) {
    *out = (remat__plan_choice){F, 0, kept, 0, -1, 0, 0, 0, 0, 0};
    return 1;
  }
  int64_t Dp = in->pD[j] - in->pD[i];
  if (remat__plan_saving_all(in, s, i, j, Dp) < E) return 0;
  int64_t fc = in->first_cand[i];
  if (in->kind_end[fc] >= j && slots_apply(in, fc, s)) {
    remat__plan_choice ch;
    if (!alike_slots(in, fc, in->pCand[j] - in->pCand[i], s, E, Y, mode, cap - F, &ch)) return 0;
    ch.t += F;
    ch.mem += kept;
    *out = ch;
    return 1;
  }
  if (in->kind_end[fc] >= j) {
    /* one kind of candidate: counts of its options, the first ones first */
    int64_t k0, k1, t, memrel;
    if (!remat__plan_alike(in, fc, in->pCand[j] - in->pCand[i], s, E, Y, mode, cap - F, &k0,
                           &k1, &t, &memrel))
      return 0;
    *out = (remat__plan_choice){F + t, k0 + k1, kept + memrel, 1, -1, k0, 0, 0, 0, 0};
    return 1;
  }
  int rc;
  /* with W records (kw > 0) a layer's saving is the stage class's, not
   * n per micro-batch: the sets hold one class's at a time */
  int64_t key = in->kw[s] ? in->cls[s] : -1, qn = key < 0 ? n : 1;
  if (key != ev->kkey) {
    remat__knap_reset(&ev->kn);
    ev->built = i;
    ev->kkey = key;
  }
  for (; ev->built < j; ev->built++) {
    int64_t l = ev->built;
    if (!in->cand[l]) continue;
    if (remat__plan_late(ev->deadline)) return REMAT__PLAN_ETIME;
    /* fewest layers within cap: a stage reaching past l has F at least
     * F(i, l + 1), so a choice of more recompute time than cap less that
     * is of no use to it (an eval runs one mode with one cap) */
    if (mode == REMAT__PLAN_FEWEST) remat__knap_set_rmax(&ev->kn, cap - (in->pF[l + 1] - in->pF[i]));
    remat__kopt ko[REMAT__PLAN_OPTS];
    for (int q = 0; q < in->nopt[l]; q++) {
      const remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * l + q];
      ko[q] = (remat__kopt){key < 0 ? o->d : remat__plan_saving(in, s, l, o->d), o->r, o->x,
                            REMAT__PLAN_OPTS * l + q};
    }
    if ((rc = remat__knap_insert(&ev->kn, ko, in->nopt[l]))) return rc;
  }
  remat__knap_res res;
  int found = mode == REMAT__PLAN_LEAST_TIME
                  ? remat__knap_min_time(&ev->kn, qn, E, Y, &res)
                  : remat__knap_min_count(&ev->kn, qn, E, Y, cap - F, &res);
  if (!found) return 0;
  *out = (remat__plan_choice){F + res.r, res.cnt, kept + res.memrel, 2, res.node, 0, 0, 0, 0, 0};
  return 1;
}

int remat__plan_knap_error(remat_error *err, int rc, int64_t i) {
  if (rc == REMAT__PLAN_ETIME) return rc;
  if (rc == REMAT_ENOMEM) return remat__errorf(err, rc, "out of memory in the stage search");
  return remat__errorf(err, REMAT_ERANGE,
                       "choosing the recomputed layers of a stage starting at layer %lld needs "
                       "more than %lld candidate sets; the layers there are too many and too "
                       "different for the exact search (group identical layers or use more "
                       "stages)",
                       (long long)i, (long long)REMAT__PLAN_KNAP_LIMIT);
}

/* ------------------------------------------------------------ class cache */

int remat__plan_cache_init(remat__plan_cache *c, int64_t ncls) {
  c->stamp = remat__calloc((size_t)ncls, sizeof *c->stamp);
  c->val = remat__malloc((size_t)ncls * sizeof *c->val);
  c->ok = remat__malloc((size_t)ncls * sizeof *c->ok);
  c->now = 0;
  return c->stamp && c->val && c->ok ? 0 : REMAT_ENOMEM;
}

void remat__plan_cache_free(remat__plan_cache *c) {
  remat__free(c->stamp);
  remat__free(c->val);
  remat__free(c->ok);
}

int remat__plan_cached_eval(remat__plan_eval *ev, remat__plan_cache *c, int64_t j, int64_t s,
                            int mode, int64_t cap, remat__plan_choice **out) {
  int64_t k = ev->in->cls[s];
  if (c->stamp[k] != c->now) {
    int rc = remat__plan_eval_stage(ev, j, s, mode, cap, &c->val[k]);
    if (rc < 0) return rc;
    c->ok[k] = rc;
    c->stamp[k] = c->now;
  }
  *out = &c->val[k];
  return c->ok[k];
}

/* ------------------------------------------------------------ the chosen set */

/* Rebuilds the stage's choice with set tracking. */
int remat__plan_stage_set(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s, int mode,
                          int64_t cap, uint8_t *rec, int64_t *items, double deadline,
                          remat_error *err) {
  remat__plan_eval ev;
  remat__plan_eval_init(&ev, in, mode == REMAT__PLAN_FEWEST, 1, deadline);
  remat__plan_eval_start(&ev, i);
  remat__plan_choice ch;
  int ok = remat__plan_eval_stage(&ev, j, s, mode, cap, &ch);
  if (ok == 1) {
    if (ch.how == 1) {
      int64_t k = 0;
      for (int64_t l = i; l < j && k < ch.cnt; l++)
        if (in->cand[l]) rec[l] = (uint8_t)remat__plan_alike_pol(in, l, k++, ch.k0, ch.cnt);
    } else if (ch.how == 3) {
      /* the full ones first, as --ckpt-ratio recomputes the first blocks,
       * then the partial ones, then the middle ones; items is room enough */
      int64_t K = in->pCand[j] - in->pCand[i], P = K - ch.nfull - ch.nmid, k = 0;
      for (int64_t q = 0; q < P; q++) items[q] = 0;
      remat__plan_slots_of(in->m, in->n[s], ch.nslot, ch.units, items);
      for (int64_t l = i; l < j; l++) {
        if (!in->cand[l]) continue;
        int64_t q = k++ - ch.nfull;
        if (q < 0) rec[l] = REMAT_RECOMPUTE;
        else if (q < P) rec[l] = items[q] ? (uint8_t)(REMAT__REC_SLOTS + items[q]) : REMAT_KEEP;
        else rec[l] = REMAT_MIDDLE;
      }
    } else if (ch.how == 2) {
      int64_t n = remat__knap_items(&ev.kn, ch.node, items);
      for (int64_t t = 0; t < n; t++) rec[items[t] / REMAT__PLAN_OPTS] = (uint8_t)in->opt[items[t]].pol;
    }
  }
  remat__plan_eval_free(&ev);
  if (ok < 0) return remat__plan_knap_error(err, ok, i);
  REMAT_ASSERT(ok == 1);
  return 0;
}
