/* plan.h: the planner's internals shared by its files. The public API and the
 * memory and time formula are in include/remat/plan.h.
 *
 * The files, from the bottom up (each uses only those above it):
 *   problem.c  problems: construction, checks, JSON files, GPT-2 shapes
 *   inst.c     the expansion of a problem into one entry per layer
 *   knap.c     Pareto sets of recompute subsets (the per-stage knapsack)
 *   stage.c    one stage: its memory, and its best set of recomputed layers
 *   fit.c      which stages fit at all; the smallest budget when none do
 *   dp.c       the partition dynamic programs over (stage, boundary)
 *   sim.c      the schedule simulator
 *   chunk.c    chunked schedules and the simulated objective: every
 *              partition into virtual stages
 *   eval.c     figures of a given arrangement; the remat_plan it fills
 *   bound.c    a plan and a lower bound in polynomial time, for time limits
 *   text.c     the text buffer and the units byte counts are shown in
 *   solve.c    the driver: windows, objectives, infeasible problems, time
 *   write.c, lp.c, sweep.c   outputs, the MIP export, the budget sweep
 *   tensor.c   tensor parallelism's collectives; the published formula
 *   ranks.c    the layout on N ranks (tensor x pipeline x data), searched */
#ifndef REMAT_PLAN_INTERNAL_H
#define REMAT_PLAN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "remat/plan.h"

#define REMAT__PLAN_INF INT64_MAX
/* The solver's deadline passed: an internal code, never returned to callers. */
#define REMAT__PLAN_ETIME (-100)
#define REMAT__PLAN_MAX_CELLS ((int64_t)1 << 22) /* (p + 1) * (L + 1) of a DP table */

static inline int64_t remat__max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t remat__min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Whether a deadline on remat__now() (0: none) has passed. */
static inline int remat__plan_late(double deadline) {
  return deadline > 0 && remat__now() > deadline;
}

/* ------------------------------------------------------------ instance (inst.c) */

/* A way for a layer to recompute that saves bytes: d = bytes saved per
 * micro-batch against keeping, r its time, x its scratch, pol the
 * remat_policy that stands for it (1 recompute, 2 middle). */
typedef struct remat__plan_opt {
  int64_t d, r, x;
  int pol;
} remat__plan_opt;

#define REMAT__PLAN_OPTS 2 /* options per layer besides keeping */

/* The problem expanded to one entry per layer, times quantised, bytes as
 * int64 (every memory expression is below 2^61). Shared with the tests. */
typedef struct remat__plan_inst {
  int64_t L, p, m;
  int schedule, objective;
  double q;          /* time quantum */
  int64_t *fb;       /* (L) f + b in quanta */
  int64_t *fwd;      /* (L) f in quanta */
  int64_t *r;        /* (L) recompute time in quanta */
  int64_t *a, *c, *x, *y, *w; /* (L) bytes */
  int64_t *rm, *mb, *xm; /* (L) the middle policy's time, stored bytes, scratch */
  uint8_t *recomp;   /* (L) 1 if the layer may recompute */
  uint8_t *mid;      /* (L) 1 if it may take the middle policy (recomp too) */
  /* The options of each layer that lower its memory, ascending x (ties:
   * larger d first): nopt[l] of them at opt[REMAT__PLAN_OPTS l ...]. For
   * thresholds on scratch, a layer's largest saving with scratch at most v
   * steps up at most twice: to dlo at xlo (its options' smallest x), to
   * dmax at xhi (where an option of larger x saves more; xhi = xlo and
   * dmax = dlo where none does). */
  uint8_t *nopt;         /* (L) */
  remat__plan_opt *opt;  /* (REMAT__PLAN_OPTS L) */
  int64_t *xlo, *xhi, *dlo, *dmax; /* (L) */
  uint8_t *cand;     /* (L) 1 if some option lowers its memory: nopt > 0 */
  int64_t *wg;       /* (L) the weight gradient's part of b, quanta (W of zb-h1, zbv,
                        where the layer keeps its activations) */
  int64_t *u;        /* (L) bytes a deferred W keeps alive while the layer keeps
                        its activations (a layer that rebuilds them runs its W
                        with its B) */
  int64_t v, nv;     /* chunks per stage, virtual stages p v (v = 1: nv = p) */
  int64_t *n;        /* (nv) micro-batches held, per virtual stage */
  int64_t *kw;       /* (nv) micro-batches kept for a deferred W */
  int64_t *budget;   /* (p) */
  int64_t *fixed;    /* (nv + 1) boundaries of a fixed split (chunked
                        schedules, every layer a block), or NULL */
  int64_t stage_bytes;
  int64_t boundary_bytes; /* every stage but the last */
  /* prefix sums over layers, (L + 1) each: pD of dmax, pDlo of dlo */
  int64_t *pF, *pA, *pW, *pD, *pDlo, *pCand, *pU;
  int64_t *pUc; /* (L + 1) prefix sums of u over the candidates */
  /* candidates only: first candidate at or after l; for a candidate, the
   * first later candidate of a different kind (other options), and the
   * first later candidate with a different (xlo, xhi) */
  int64_t *first_cand, *kind_end, *x_end;
  /* stage classes: stages with equal (n, budget) share every answer */
  int64_t ncls;
  int64_t *cls; /* (p) */
  /* range maximum of y: a segment tree of (2 ysize), NULL when every y is 0 */
  int64_t *ytree, ysize;
  /* Planning per micro-batch (remat_plan_problem.per_microbatch): every time
   * above is a step's, ms = m times a micro-batch's, so that a layer
   * recomputed for some of the micro-batches costs a whole number of quanta
   * (q is then 2^e / m); ms = 1 otherwise. */
  int per_mb;
  int64_t ms;
} remat__plan_inst;

/* An arrangement's rec[l] is a remat_policy, or, planned per micro-batch,
 * REMAT__REC_SLOTS + k: kept, and recomputed in full in the last k of its
 * stage's n slots (0 < k < n <= REMAT__MAX_SLOTS). */
#define REMAT__REC_SLOTS 16
#define REMAT__MAX_SLOTS 128

static inline int64_t remat__rec_slots(uint8_t r) {
  return r >= REMAT__REC_SLOTS ? (int64_t)r - REMAT__REC_SLOTS : 0;
}

/* A layer's cheap slots of n (those that serve m / n micro-batches, the
 * last n - m mod n; the first m mod n serve one more): all of them but the
 * one a layer that recomputes in only some slots must keep when m mod n is
 * 0. */
static inline int64_t remat__plan_cheap_slots(int64_t m, int64_t n) {
  return m % n ? n - m % n : n - 1;
}

/* Micro-batches of a step (m of them, micro-batch t in slot t mod n) that
 * the last k of n slots serve: each slot c = m / n, and one more for the
 * first m mod n. */
static inline int64_t remat__plan_slot_mbs(int64_t m, int64_t n, int64_t k) {
  int64_t rem = m % n, extra = rem - (n - k);
  return k * (m / n) + (extra > 0 ? extra : 0);
}

int remat__plan_inst_build(const remat_plan_problem *pb, remat__plan_inst *in, remat_error *err);
void remat__plan_inst_free(remat__plan_inst *in);
/* The stage floor Y = max y over layers [i, j) (0 for none). */
int64_t remat__plan_work_max(const remat__plan_inst *in, int64_t i, int64_t j);

/* ------------------------------------------------------------ knapsack (knap.c) */

/* The exact per-stage subproblem: which of a stage's layers to recompute,
 * and how. Items are the candidate layers, each with one or more options
 * (d > 0 bytes saved, r, x), of which a set takes at most one: a
 * multiple-choice knapsack. For every threshold v among the options' x, and
 * for every count k of layers taken (or for all counts together, keyed by
 * (r, k)), the engine keeps the Pareto set of choices with every x <= v:
 * time r against saved bytes D, each choice once with its actual largest x. A query with n micro-batches, the stage's floor
 * Y (its largest work bytes, held anyway) and excess E (bytes over budget
 * with everything kept, Y included) asks for subsets with n D - (v - Y)+ >= E;
 * every subset R is represented, or dominated, in the list of its own
 * threshold v = max x over R, where the assumed and the actual scratch agree,
 * so the answers are exact. Thresholds up to Y all cost nothing, and the list
 * of the largest of them dominates the others'. Items are added one at a time
 * as a stage grows. */
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
  int64_t rmax;               /* points of more time are dropped (INT64_MAX: none) */
} remat__knap;

typedef struct remat__knap_res {
  int64_t r, cnt, memrel; /* memrel = (X - Y)+ - n D: add to the all-kept memory */
  int32_t node;
} remat__knap_res;

void remat__knap_init(remat__knap *k, int levels, int track, int64_t limit);
void remat__knap_reset(remat__knap *k);
/* From now on, drop choices of time above rmax as the lists are rebuilt
 * (for a caller whose queries ask r <= cap with caps that only shrink as
 * items come); reset clears it. */
void remat__knap_set_rmax(remat__knap *k, int64_t rmax);
void remat__knap_free(remat__knap *k);
/* One option of an item: its figures and the id a tracked result gives back. */
typedef struct remat__kopt {
  int64_t d, r, x, id;
} remat__kopt;

/* Adds an item with n options (1 <= n <= REMAT__PLAN_OPTS, d > 0 each): every
 * choice may take at most one of them. 0, REMAT_ENOMEM, or REMAT_ERANGE when
 * the sets exceed k->limit points. */
int remat__knap_insert(remat__knap *k, const remat__kopt *opt, int n);
/* Least (r, count, memory) with n D - (X - Y)+ >= E (E > 0). Returns 1 if
 * found. */
int remat__knap_min_time(const remat__knap *k, int64_t n, int64_t E, int64_t Y,
                         remat__knap_res *res);
/* Least (count, memory) with n D - (X - Y)+ >= E and r <= cap; needs levels. */
int remat__knap_min_count(const remat__knap *k, int64_t n, int64_t E, int64_t Y, int64_t cap,
                          remat__knap_res *res);
/* The option ids of a tracked result, one per item taken, in insertion
 * order; returns how many. */
int64_t remat__knap_items(const remat__knap *k, int32_t node, int64_t *items);

/* ------------------------------------------------------------ one stage (stage.c) */

#define REMAT__PLAN_KNAP_LIMIT ((int64_t)1 << 25) /* Pareto points held at once */

/* Layer l's (of L) w, of group G: its state_bytes, less v_last_state_less
 * for zbv's last layer, which sits beside the first. */
static inline size_t remat__plan_state_bytes(const remat_plan_problem *pb,
                                             const remat_plan_group *G, int64_t l, int64_t L) {
  const remat_schedule_info *row = remat_schedule_get(pb->schedule);
  int beside = l == L - 1 && row && row->layout == REMAT_LAYOUT_V;
  return G->state_bytes - (beside ? pb->v_last_state_less : 0);
}

/* Bytes (virtual) stage s needs on layers [i, j) with every layer kept,
 * less the transient term max(Y, X): stage_bytes (+ boundary_bytes but on
 * the last stage) + sum w + n sum a + k sum u. With every layer
 * kept the stage needs this + Y, Y = remat__plan_work_max(in, i, j). A
 * stage of several chunks counts stage_bytes once. */
static inline int64_t remat__plan_base_memory(const remat__plan_inst *in, int64_t i, int64_t j,
                                              int64_t s) {
  return in->stage_bytes + (s < in->nv - 1 ? in->boundary_bytes : 0) + (in->pW[j] - in->pW[i]) +
         in->n[s] * (in->pA[j] - in->pA[i]) + in->kw[s] * (in->pU[j] - in->pU[i]);
}

/* What layer l saves on virtual stage s by an option that saves d per
 * micro-batch: n d, and the W records it no longer keeps, kw u. */
static inline int64_t remat__plan_saving(const remat__plan_inst *in, int64_t s, int64_t l,
                                         int64_t d) {
  return in->n[s] * d + in->kw[s] * in->u[l];
}

/* The most every candidate of [i, j) saves on virtual stage s, D being
 * their largest savings per micro-batch (pD or pDlo). */
static inline int64_t remat__plan_saving_all(const remat__plan_inst *in, int64_t s, int64_t i,
                                             int64_t j, int64_t D) {
  return in->n[s] * D + in->kw[s] * (in->pUc[j] - in->pUc[i]);
}

/* Layer l's part of virtual stage vs's figures under rec value r: recompute
 * time t (quanta), bytes saved against keeping it, scratch x (0: none) and
 * the W time it puts off (the weight gradient of the micro-batches it keeps
 * for). */
typedef struct remat__plan_recfig {
  int64_t t, saved, x, wg;
} remat__plan_recfig;

static inline remat__plan_recfig remat__plan_rec_fig(const remat__plan_inst *in, int64_t vs,
                                                     int64_t l, uint8_t r) {
  if (r == REMAT_KEEP) return (remat__plan_recfig){0, 0, 0, in->wg[l]};
  if (r == REMAT_MIDDLE)
    return (remat__plan_recfig){in->rm[l], remat__plan_saving(in, vs, l, in->a[l] - in->mb[l]),
                                in->xm[l], 0};
  if (r == REMAT_RECOMPUTE)
    return (remat__plan_recfig){in->r[l], remat__plan_saving(in, vs, l, in->a[l] - in->c[l]),
                                in->x[l], 0};
  /* kept but in the last k slots: those slots' micro-batches rebuild it
   * for their B; every micro-batch runs its W apart, from the W record
   * that its B fills, as the kept ones do (the order of the weight
   * gradients' sums is then one process's) */
  int64_t k = remat__rec_slots(r), mbs = remat__plan_slot_mbs(in->m, in->n[vs], k);
  return (remat__plan_recfig){in->r[l] / in->ms * mbs, k * (in->a[l] - in->c[l]), in->x[l],
                              in->wg[l]};
}

/* A candidate's scratch and saving per micro-batch, for sorting by scratch. */
typedef struct remat__plan_xd {
  int64_t x, d;
} remat__plan_xd;

/* Largest saving (remat__plan_saving of each layer taken) - (X - Y)+ on
 * virtual stage s over the choices of [i, j) with floor Y
 * (0 for the empty choice) and, if vbest is given, the threshold on x that
 * reaches it (-1: recompute nothing). The best choice with largest scratch v
 * takes from every candidate its option of largest d among those with
 * x <= v (remat__plan_best_under). scratch: room for 2 (j - i) pairs, or
 * NULL to allocate. */
int64_t remat__plan_max_saving(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s,
                               int64_t Y, remat__plan_xd *scratch, int64_t *vbest);

/* The option of layer l (a candidate) with the largest d among those with
 * x <= v, ties to the smaller x; NULL if none. */
const remat__plan_opt *remat__plan_best_under(const remat__plan_inst *in, int64_t l, int64_t v);

/* A stage's best choice. */
typedef struct remat__plan_choice {
  int64_t t, cnt, mem; /* time in quanta, layers not kept, bytes */
  int how;      /* 0: nothing recomputed, 1: candidates of one kind (below), 2: knapsack set */
  int32_t node; /* how == 2 with tracking */
  int64_t k0;   /* how == 1: k0 candidates take the kind's first option,
                   cnt - k0 its second (remat__plan_alike_pol says which) */
  /* how == 3 (per micro-batch, alike candidates): nfull of them recompute
   * in full, the next nslot recompute in some slots (units (layer, slot)
   * recomputations in all, laid out by remat__plan_slots_of), the next
   * nmid take the middle policy, the rest keep */
  int64_t nfull, units, nmid, nslot;
} remat__plan_choice;

/* units (layer, slot) recomputations over `layers` alike layers of a stage
 * of n slots (m micro-batches a step) into ks (room for `layers`): each
 * layer its cheap slots first (those of m / n micro-batches: the last n - m
 * % n, or n - 1 when m % n is 0), in order, then the dearer ones, at most
 * n - 1 slots a layer. */
void remat__plan_slots_of(int64_t m, int64_t n, int64_t layers, int64_t units, int64_t *ks);

/* Candidates all of one kind (the same options and u), K of them from fc
 * on, in virtual stage s (its savings: remat__plan_saving), excess E > 0
 * and floor Y: the counts of each
 * option that save n D - (X - Y)+ >= E at least time, then fewest layers,
 * then least memory (mode REMAT__PLAN_LEAST_TIME), or fewest layers then
 * least memory within time tcap (REMAT__PLAN_FEWEST). Returns 1 and *k0, *k1
 * (counts of the first and second option), *t (their time) and *memrel
 * ((X - Y)+ - n D), or 0 if none fits. O(K) with two options, O(1) with
 * one. */
int remat__plan_alike(const remat__plan_inst *in, int64_t fc, int64_t K, int64_t s, int64_t E,
                      int64_t Y, int mode, int64_t tcap, int64_t *k0, int64_t *k1, int64_t *t,
                      int64_t *memrel);
/* The remat_policy of the k-th (from 0) of cnt alike candidates, k0 of
 * which take the first option: recomputed ones first, as --ckpt-ratio
 * recomputes the first blocks. */
int remat__plan_alike_pol(const remat__plan_inst *in, int64_t l, int64_t k, int64_t k0,
                          int64_t cnt);

/* Evaluates the stages that start at layer i, as they grow to the right. */
typedef struct remat__plan_eval {
  const remat__plan_inst *in;
  remat__knap kn;
  int64_t i, built; /* candidates of [i, built) are in kn */
  int64_t kkey;     /* their savings: per micro-batch (-1), or whole for the
                       stage class kkey (a split backward's W records) */
  int64_t yend, Y;  /* Y = max y over [i, yend) */
  double deadline;  /* checked before every knapsack insertion (0: none) */
} remat__plan_eval;

#define REMAT__PLAN_LEAST_TIME 0    /* least time, then fewest layers, then memory */
#define REMAT__PLAN_FEWEST 1        /* fewest layers within a time cap, then memory */

/* levels: the knapsack keeps sets by count (needed by REMAT__PLAN_FEWEST);
 * track: it can give back the chosen set. */
void remat__plan_eval_init(remat__plan_eval *ev, const remat__plan_inst *in, int levels, int track,
                           double deadline);
void remat__plan_eval_free(remat__plan_eval *ev);
void remat__plan_eval_start(remat__plan_eval *ev, int64_t i);
/* Best choice for stage s on [ev->i, j), in one of the two modes above.
 * Returns 1 if the stage fits, 0 if not, or a negative error (knap_insert's,
 * or REMAT__PLAN_ETIME past the deadline). */
int remat__plan_eval_stage(remat__plan_eval *ev, int64_t j, int64_t s, int mode, int64_t cap,
                           remat__plan_choice *out);
/* The message for a negative return of remat__plan_eval_stage at start i
 * (REMAT__PLAN_ETIME passes through without one). */
int remat__plan_knap_error(remat_error *err, int rc, int64_t i);

/* Per-(i, j) answers are shared by the stages of one class: a cache of one
 * entry per class, valid while its stamp equals now (bump now for each j). */
typedef struct remat__plan_cache {
  int64_t *stamp; /* (ncls) */
  remat__plan_choice *val;
  int *ok;
  int64_t now;
} remat__plan_cache;

int remat__plan_cache_init(remat__plan_cache *c, int64_t ncls);
void remat__plan_cache_free(remat__plan_cache *c);
int remat__plan_cached_eval(remat__plan_eval *ev, remat__plan_cache *c, int64_t j, int64_t s,
                            int mode, int64_t cap, remat__plan_choice **out);

/* Sets rec[l] to the remat_policy of each layer stage s does not keep on
 * [i, j) in its best choice for the mode and cap (which must fit). items:
 * room for j - i. */
int remat__plan_stage_set(const remat__plan_inst *in, int64_t i, int64_t j, int64_t s, int mode,
                          int64_t cap, uint8_t *rec, int64_t *items, double deadline,
                          remat_error *err);

/* ------------------------------------------------------------ solver state */

typedef struct remat__plan_xtree remat__plan_xtree; /* fit.c */

/* Tables are (p + 1, L + 1), row s for stage boundary s. */
typedef struct remat__plan_solver {
  const remat__plan_inst *in;
  int64_t L, p, L1;
  int64_t Tcap;   /* window: stages with F <= Tcap */
  int64_t delta;  /* extra bytes on every budget (infeasibility search) */
  double deadline; /* remat__now() past which the search stops (0: none) */
  uint8_t *pre;   /* stages 0..s-1 can cover [0, i) */
  uint8_t *post;  /* stages s..p-1 can cover [i, L) */
  int64_t *pred;  /* a predecessor boundary, for pre */
  int64_t *aux;   /* (L + 1) */
  remat__plan_xd *xs;     /* (2 L) */
  remat__plan_xtree *xt;  /* reset for each stage's sweep in reach */
  remat_error *err;
} remat__plan_solver;

#define REMAT__AT(S, arr, s, i) ((arr)[(size_t)(s) * (size_t)(S)->L1 + (size_t)(i)])

/* ------------------------------------------------------------ fit (fit.c) */

/* Allocates the solver's tables for an instance; 0 or REMAT_ENOMEM. */
int remat__plan_fit_init(remat__plan_solver *S, const remat__plan_inst *in, remat_error *err);
void remat__plan_fit_free(remat__plan_solver *S);
/* Fills pre (and pred) and post for the current window and delta; returns
 * whether the whole model can be covered. */
int remat__plan_reach(remat__plan_solver *S);
/* The smallest delta for which the model can be covered (nothing fits at
 * delta 0) into *delta; leaves S->delta there, with pre and pred filled.
 * 0, or REMAT__PLAN_ETIME past S->deadline. */
int remat__plan_min_delta(remat__plan_solver *S, int64_t *delta);
/* The arrangement of least memory at the current delta (pred filled). */
void remat__plan_least_memory(remat__plan_solver *S, int64_t *bounds, uint8_t *rec);

/* ------------------------------------------------------------ partition (dp.c) */

/* Largest j with F(i, j) <= cap. */
int64_t remat__plan_window_end(const remat__plan_inst *in, int64_t i, int64_t cap);
/* Least max over partitions of F alone (no recomputation, memory ignored). */
int64_t remat__plan_minmax_F(const remat__plan_inst *in);
/* The baseline objective: best partition without recomputation, memory
 * ignored (the denominator of the slowdown), in quanta. */
int64_t remat__plan_baseline(const remat__plan_inst *in);

/* Stage evaluations a program over the current window would make (pre
 * filled). */
double remat__plan_window_work(const remat__plan_solver *S);
/* Bottleneck pass 1: least max stage time within the window, or INF. */
int remat__plan_pass_minmax(remat__plan_solver *S, int64_t *Tb);
/* Bottleneck pass 2: with every stage time <= Tb, fewest recomputed layers
 * then lowest peak; fills bounds. Returns 1 if found, 0 if not, or an error. */
int remat__plan_pass_fewest(remat__plan_solver *S, int64_t Tb, int64_t *bounds);

typedef struct remat__plan_result {
  int64_t obj, cnt, mem; /* lexicographic */
  int64_t sum, tmax;
} remat__plan_result;

/* The 1f1b objective within the window; fills bounds and the result. Returns
 * 1 if a plan fits, 0 if not, negative on error. */
int remat__plan_pass_iteration(remat__plan_solver *S, int64_t *bounds, remat__plan_result *out);

/* ------------------------------------------------------------ simulation (sim.c) */

/* The makespan, in quanta, of an arrangement (bounds: nv + 1) under the
 * instance's schedule: through st (from remat__plan_sim_streams), or
 * remat_plan_simulate when st is NULL (one chunk, 1f1b or gpipe). times:
 * room for 3 nv. 0 or an error. */
int remat__plan_sim_arrangement(const remat__plan_inst *in, const remat_schedule_streams *st,
                                const int64_t *bounds, const uint8_t *rec, double *times,
                                double *ms);
/* The streams a simulation of the instance needs (none, ops NULL, for one
 * chunk under 1f1b or gpipe). */
int remat__plan_sim_streams(const remat__plan_inst *in, remat_schedule_streams *st,
                            remat_error *err);

/* ------------------------------------------------------------ chunks (chunk.c) */

/* The exact plan of a chunked schedule (in->v > 1) into bounds (nv + 1) and
 * rec: 0, or REMAT_EINFEASIBLE with the least-memory arrangement and the
 * smallest extra bytes *delta on every budget, or an error (REMAT_ERANGE
 * when the partitions are too many or the deadline passes). */
int remat__plan_chunk_solve(const remat__plan_inst *in, int64_t *bounds, uint8_t *rec,
                            int64_t *delta, double deadline, remat_error *err);
/* The baseline objective of a chunked schedule (best partition without
 * recomputation, memory ignored), in quanta. */
int64_t remat__plan_chunk_baseline(const remat__plan_inst *in);
/* remat_plan_solve but for min_blocks, which it leaves to its caller
 * (blocks.c's remat_plan_solve fuses the layers that cannot recompute into
 * the blocks first where min_blocks asks for it). */
int remat__plan_solve_exact(const remat_plan_problem *pb, remat_plan *plan, remat_error *err);

/* ------------------------------------------------------------ arrangements (eval.c) */

/* Objective (quanta), layers not kept and peak bytes of an arrangement:
 * bounds (nv + 1, virtual stages) and one remat_policy per layer. */
void remat__plan_measure(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                         int64_t *obj, int64_t *cnt, int64_t *maxmem);
/* Fills a plan from an arrangement (feasible = every stage within budget). */
int remat__plan_fill(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                     remat_plan *plan, remat_error *err);

/* ------------------------------------------------------------ bounds (bound.c) */

/* When the exact search ran out of time in a window S->Tcap where a plan
 * fits (pre, post and pred filled): the best plan found in polynomial time
 * into (bounds, rec) and a proven lower bound on the objective (quanta).
 * Past the deadline it keeps what it has (at worst the window's least-memory
 * arrangement and the baseline). 0, or REMAT_ENOMEM. */
int remat__plan_anytime(remat__plan_solver *S, double deadline, int64_t *bounds, uint8_t *rec,
                        int64_t *lower);

/* ------------------------------------------------------------ solver (solve.c) */

/* The optimum as the solver sees it (for comparison with brute force):
 * objective in quanta, recomputed layers, peak bytes, and the arrangement if
 * bounds (p + 1) and recompute (L) are given. */
int remat__plan_solve_inst(const remat__plan_inst *in, int64_t *obj, int64_t *cnt,
                           int64_t *maxmem, int64_t *bounds, uint8_t *recompute,
                           remat_error *err);

/* ------------------------------------------------------------ text (text.c) */

/* The units for a problem's byte counts: binary (GiB) when every budget is a
 * whole number of MiB, as from --mem 20GiB, else decimal (GB), as in "20e9". */
int remat__plan_units(const remat_plan_problem *pb);

/* Growable text buffer for the writers. */
typedef struct remat__plan_buf {
  char *s;
  size_t len, cap;
  int oom;
} remat__plan_buf;
void remat__plan_printf(remat__plan_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reads a file of at most the problem size limit into *buf (owned, NUL
 * terminated); non-regular files are read up to the limit and refused past
 * it. */
int remat__plan_read_bounded(const char *path, char **buf, size_t *len, remat_error *err);

#endif
