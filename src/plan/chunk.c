/* chunk.c: the exact planner for chunked schedules (interleaved, zbv),
 * where a stage holds v non-adjacent runs of layers, so that its memory and
 * time couple runs the partition programs of dp.c see apart. It enumerates
 * every partition of the L layers into p v non-empty virtual stages
 * (C(L - 1, pv - 1) of them, at most REMAT_PLAN_MAX_PARTITIONS) and solves
 * each stage's choice over all its chunks' layers at once with knap.c's
 * exact multiple-choice knapsack: a chunk's options save n_c d bytes, n_c
 * its micro-batches in flight, against one budget, with one transient term
 * (the largest over the stage's layers). Given a partition the stages are
 * independent, and both objectives grow with every stage's time, so the
 * best plan is each stage's best choice on the best partition:
 *   1f1b        each stage its least time (then fewest layers, least memory)
 *   bottleneck  first the least max time T over partitions, then on each
 *               partition each stage its fewest layers not kept (then least
 *               memory) within T
 *   simulated   each stage its least time; the partition whose schedule
 *               simulates shortest (remat__plan_sim_arrangement)
 * and ties between partitions break as everywhere: fewer layers not kept,
 * then a lower peak, and then (when p m v is at most 4096) a shorter
 * simulated makespan of the schedule. It also serves the simulated
 * objective under one chunk per stage, which the partition programs of
 * dp.c cannot express. When no partition fits, the answer is the one that
 * needs the fewest extra bytes on every budget, with each stage's
 * least-memory choice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

#define INF REMAT__PLAN_INF

/* One stage's answer on a partition. */
typedef struct {
  int64_t t, cnt, mem; /* time (quanta), layers not kept, bytes */
} rank_ans;

/* The figures of stage r's chunks with everything kept: time, the memory
 * without the transient term, the transient floor Y. */
static void rank_kept(const remat__plan_inst *in, const int64_t *b, int64_t r, int64_t *F,
                      int64_t *base, int64_t *Y) {
  *F = *base = *Y = 0;
  for (int64_t c = 0; c < in->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, r, c);
    *F += in->pF[b[vs + 1]] - in->pF[b[vs]];
    *base += remat__plan_base_memory(in, b[vs], b[vs + 1], vs);
    *Y = remat__max64(*Y, remat__plan_work_max(in, b[vs], b[vs + 1]));
  }
}

/* Stage r's least memory on the partition: for each threshold v on scratch,
 * every candidate takes its option of largest saving n d with x <= v; the
 * best threshold goes to *vbest (-1: keep all) for rank_least_set. A
 * threshold met before gives the same saving, which cannot beat the best:
 * the recent ones are remembered and skipped (a run of equal layers then
 * costs one pass per distinct scratch size, not one per layer). Past the
 * deadline it stops with *late set. */
#define SEEN 16
static int64_t rank_least(const remat__plan_inst *in, const int64_t *b, int64_t r,
                          int64_t *vbest, double deadline, int *late) {
  int64_t F, base, Y, best = 0, seen[SEEN];
  int nseen = 0, next = 0;
  rank_kept(in, b, r, &F, &base, &Y);
  *vbest = -1;
  for (int64_t c = 0; c < in->v; c++) {
    int64_t vs0 = remat_schedule_virtual_stage(in->schedule, in->p, r, c);
    for (int64_t l0 = b[vs0]; l0 < b[vs0 + 1]; l0++)
      for (int q = 0; q < in->nopt[l0]; q++) {
        int64_t thr = in->opt[REMAT__PLAN_OPTS * l0 + q].x, save = 0;
        int met = 0;
        for (int k = 0; k < nseen && !met; k++) met = seen[k] == thr;
        if (met) continue;
        seen[next] = thr;
        next = (next + 1) % SEEN;
        nseen += nseen < SEEN;
        if (remat__plan_late(deadline)) {
          *late = 1;
          return base + Y - best;
        }
        for (int64_t c2 = 0; c2 < in->v; c2++) {
          int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, r, c2);
          for (int64_t l = b[vs]; l < b[vs + 1]; l++) {
            const remat__plan_opt *o = remat__plan_best_under(in, l, thr);
            if (o) save += remat__plan_saving(in, vs, l, o->d);
          }
        }
        save -= thr > Y ? thr - Y : 0;
        if (save > best) best = save, *vbest = thr;
      }
  }
  return base + Y - best;
}

/* Sets rec for stage r's least-memory choice at threshold v (-1: keep all). */
static void rank_least_set(const remat__plan_inst *in, const int64_t *b, int64_t r, int64_t v,
                           uint8_t *rec) {
  for (int64_t c = 0; c < in->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, r, c);
    for (int64_t l = b[vs]; l < b[vs + 1]; l++) {
      const remat__plan_opt *o = v < 0 ? NULL : remat__plan_best_under(in, l, v);
      rec[l] = o ? (uint8_t)o->pol : 0;
    }
  }
}

/* Stage r's best choice: least time (cap < 0) or fewest layers within time
 * cap. Returns 1 if it fits, 0 if not, or an error; with rec, sets its
 * layers' policies. */
static int rank_best(const remat__plan_inst *in, remat__knap *kn, const int64_t *b, int64_t r,
                     int64_t cap, rank_ans *out, uint8_t *rec, int64_t *items) {
  int64_t F, base, Y;
  rank_kept(in, b, r, &F, &base, &Y);
  int64_t E = base + Y - in->budget[r];
  if (rec)
    for (int64_t c = 0; c < in->v; c++) {
      int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, r, c);
      memset(rec + b[vs], 0, (size_t)(b[vs + 1] - b[vs]));
    }
  if (cap >= 0 && F > cap) return 0;
  if (E <= 0) return *out = (rank_ans){F, 0, base + Y}, 1;
  remat__knap_reset(kn);
  for (int64_t c = 0; c < in->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, r, c);
    for (int64_t l = b[vs]; l < b[vs + 1]; l++) {
      if (!in->nopt[l]) continue;
      remat__kopt o[REMAT__PLAN_OPTS];
      for (int q = 0; q < in->nopt[l]; q++) {
        const remat__plan_opt *p = &in->opt[REMAT__PLAN_OPTS * l + q];
        o[q] = (remat__kopt){remat__plan_saving(in, vs, l, p->d), p->r, p->x,
                             REMAT__PLAN_OPTS * l + q};
      }
      int rc = remat__knap_insert(kn, o, in->nopt[l]);
      if (rc) return rc;
    }
  }
  remat__knap_res res;
  int ok = cap < 0 ? remat__knap_min_time(kn, 1, E, Y, &res)
                   : remat__knap_min_count(kn, 1, E, Y, cap - F, &res);
  if (!ok) return 0;
  *out = (rank_ans){F + res.r, res.cnt, base + Y + res.memrel};
  if (rec) {
    int64_t k = remat__knap_items(kn, res.node, items);
    for (int64_t i = 0; i < k; i++)
      rec[items[i] / REMAT__PLAN_OPTS] = (uint8_t)in->opt[items[i]].pol;
  }
  return 1;
}

/* The next partition: cuts b[1..nv-1] strictly increasing in [1, L - 1]
 * (b[0] = 0, b[nv] = L), in lexicographic order; 0 after the last. */
static int next_partition(const remat__plan_inst *in, int64_t *b) {
  int64_t nv = in->nv, L = in->L, k = nv - 1;
  if (in->fixed) return 0; /* the one split there is */
  while (k >= 1 && b[k] == L - (nv - k)) k--;
  if (k < 1) return 0;
  b[k]++;
  for (int64_t i = k + 1; i < nv; i++) b[i] = b[i - 1] + 1;
  return 1;
}

static void first_partition(const remat__plan_inst *in, int64_t *b) {
  if (in->fixed) {
    memcpy(b, in->fixed, (size_t)(in->nv + 1) * sizeof *b);
    return;
  }
  for (int64_t i = 0; i < in->nv; i++) b[i] = i;
  b[in->nv] = in->L;
}

/* A partition's lexicographic figures. */
typedef struct {
  int64_t obj, cnt, mem;
} lex;

static int lex_better(lex a, lex b) {
  if (a.obj != b.obj) return a.obj < b.obj;
  if (a.cnt != b.cnt) return a.cnt < b.cnt;
  return a.mem < b.mem;
}

int64_t remat__plan_chunk_baseline(const remat__plan_inst *in) {
  int64_t nv = in->nv, best = INF;
  int64_t *b = remat__malloc((size_t)(nv + 1) * sizeof *b);
  uint8_t *rec = remat__calloc((size_t)in->L, 1);
  double *times = remat__malloc((size_t)(3 * nv) * sizeof *times);
  remat_schedule_streams st = {0};
  int sim = in->objective == REMAT_OBJ_SIMULATED;
  if (!b || !rec || !times || (sim && remat__plan_sim_streams(in, &st, NULL))) best = 0;
  for (int go = best != 0 && (first_partition(in, b), 1); go;
       go = next_partition(in, b)) {
    int64_t sum = 0, tmax = 0, obj;
    for (int64_t r = 0; r < in->p; r++) {
      int64_t F, base, Y;
      rank_kept(in, b, r, &F, &base, &Y);
      sum += F;
      tmax = remat__max64(tmax, F);
    }
    obj = in->objective == REMAT_OBJ_BOTTLENECK ? tmax : sum + (in->m - 1) * tmax;
    double ms;
    if (sim && !remat__plan_sim_arrangement(in, st.ops ? &st : NULL, b, rec, times, &ms))
      obj = (int64_t)llround(ms);
    if (obj < best) best = obj;
  }
  remat_schedule_streams_free(&st);
  remat__free(b);
  remat__free(rec);
  remat__free(times);
  return best;
}

/* The search's state. */
typedef struct {
  const remat__plan_inst *in;
  remat__knap kn;
  int64_t *b, *best_b, *items;
  double deadline;
  remat_error *err;
  remat_schedule_streams st; /* for simulations (ops NULL: none needed, or none) */
  int sim;                   /* 0: no simulation, 1: ties only, 2: the objective */
  uint8_t *rec;              /* (L) a partition's choices, for its simulation */
  double *times;             /* (3 nv) forward, backward, weight gradient */
  double best_sim;
} chunk_search;

/* The schedule's makespan on partition b with each stage's best choice
 * within cap (0 when not simulated). */
static int partition_sim(chunk_search *s, const int64_t *b, int64_t cap, double *ms) {
  const remat__plan_inst *in = s->in;
  *ms = 0;
  if (!s->sim) return 0;
  for (int64_t r = 0; r < in->p; r++) {
    rank_ans a;
    int rc = rank_best(in, &s->kn, b, r, cap, &a, s->rec, s->items);
    if (rc < 0) return rc;
  }
  if (remat__plan_sim_arrangement(in, s->st.ops ? &s->st : NULL, b, s->rec, s->times, ms))
    *ms = 0;
  return 0;
}

/* The partition of fewest extra bytes on every budget (<= 0: some fits),
 * into s->best_b. */
static int least_need(chunk_search *s, int64_t *need) {
  const remat__plan_inst *in = s->in;
  *need = INF;
  first_partition(in, s->b);
  do {
    int64_t worst = -INF, v;
    int late = 0;
    for (int64_t r = 0; r < in->p && !late; r++)
      worst = remat__max64(worst, rank_least(in, s->b, r, &v, s->deadline, &late) - in->budget[r]);
    if (late) return REMAT__PLAN_ETIME;
    if (worst < *need) {
      *need = worst;
      memcpy(s->best_b, s->b, (size_t)(in->nv + 1) * sizeof *s->b);
    }
    if (remat__plan_late(s->deadline)) return REMAT__PLAN_ETIME;
  } while (next_partition(in, s->b));
  return 0;
}

/* One pass over the partitions: each stage's best within cap (T, or -1 for
 * least time); the best partition into s->best_b and its figures into *out
 * (obj INF: none fits). */
static int pass(chunk_search *s, int64_t T, lex *out) {
  const remat__plan_inst *in = s->in;
  out->obj = INF;
  first_partition(in, s->b);
  do {
    int64_t sum = 0, tmax = 0, cnt = 0, mem = 0, r;
    int rc = 0;
    for (r = 0; r < in->p; r++) {
      rank_ans a;
      rc = rank_best(in, &s->kn, s->b, r, T, &a, NULL, NULL);
      if (rc < 0) return rc;
      if (!rc) break;
      sum += a.t;
      tmax = remat__max64(tmax, a.t);
      cnt += a.cnt;
      mem = remat__max64(mem, a.mem);
    }
    if (r == in->p) {
      lex l = {in->objective == REMAT_OBJ_BOTTLENECK ? tmax : sum + (in->m - 1) * tmax, cnt, mem};
      double ms = 0;
      if (s->sim == 2) { /* the makespan is the objective */
        if ((rc = partition_sim(s, s->b, T, &ms))) return rc;
        l.obj = (int64_t)llround(ms);
      }
      int better = out->obj == INF || lex_better(l, *out), tie = !better && !lex_better(*out, l);
      if (s->sim == 1 && (better || tie) && (rc = partition_sim(s, s->b, T, &ms))) return rc;
      if (better || (tie && ms < s->best_sim)) {
        *out = l;
        s->best_sim = ms;
        memcpy(s->best_b, s->b, (size_t)(in->nv + 1) * sizeof *s->b);
      }
    }
    if (remat__plan_late(s->deadline)) return REMAT__PLAN_ETIME;
  } while (next_partition(in, s->b));
  return 0;
}

static int search(chunk_search *s, int64_t *bounds, uint8_t *rec, int64_t *delta) {
  const remat__plan_inst *in = s->in;
  int64_t need;
  int rc = least_need(s, &need);
  if (rc) return rc;
  if (need > 0) {
    *delta = need;
    memcpy(bounds, s->best_b, (size_t)(in->nv + 1) * sizeof *bounds);
    for (int64_t r = 0; r < in->p; r++) {
      int64_t v;
      int late = 0; /* one partition: no deadline */
      rank_least(in, bounds, r, &v, 0, &late);
      rank_least_set(in, bounds, r, v, rec);
    }
    return REMAT_EINFEASIBLE;
  }
  lex best;
  if ((rc = pass(s, -1, &best))) return rc;
  REMAT_ASSERT(best.obj != INF);
  int64_t cap = -1;
  if (in->objective == REMAT_OBJ_BOTTLENECK) {
    cap = best.obj;
    if ((rc = pass(s, cap, &best))) return rc;
  }
  memcpy(bounds, s->best_b, (size_t)(in->nv + 1) * sizeof *bounds);
  for (int64_t r = 0; r < in->p; r++) {
    rank_ans a;
    rc = rank_best(in, &s->kn, bounds, r, cap, &a, rec, s->items);
    if (rc < 0) return rc;
    REMAT_ASSERT(rc == 1);
  }
  return 0;
}

int remat__plan_chunk_solve(const remat__plan_inst *in, int64_t *bounds, uint8_t *rec,
                            int64_t *delta, double deadline, remat_error *err) {
  double count = 1;
  for (int64_t k = 1; !in->fixed && k < in->nv; k++)
    count = count * (double)(in->L - k) / (double)k;
  if (count > REMAT_PLAN_MAX_PARTITIONS)
    return remat__errorf(err, REMAT_ERANGE, "%s over %lld layers in %lld virtual stages has "
                         "%.3g partitions; the exact search enumerates at most %d: group "
                         "layers into coarser units or use fewer stages or chunks",
                         remat_plan_schedule_name(in->schedule), (long long)in->L,
                         (long long)in->nv, count, REMAT_PLAN_MAX_PARTITIONS);
  int sim_obj = in->objective == REMAT_OBJ_SIMULATED;
  double ops = (double)in->p * (double)in->m * (double)in->v * 3;
  if (sim_obj && count * ops > 2e10)
    return remat__errorf(err, REMAT_ERANGE, "the simulated objective would simulate %.3g "
                         "partitions of %.3g operations each; the limit is 2e10 operations in "
                         "all: use fewer layers, stages or micro-batches, or the 1f1b objective",
                         count, ops);
  chunk_search s = {in, {0}, NULL, NULL, NULL, deadline, err, {0}, 0, NULL, NULL, 0};
  remat__knap_init(&s.kn, 1, 1, REMAT__PLAN_KNAP_LIMIT);
  s.b = remat__malloc((size_t)(2 * (in->nv + 1)) * sizeof *s.b);
  s.items = remat__malloc((size_t)in->L * sizeof *s.items);
  s.rec = remat__malloc((size_t)in->L);
  s.times = remat__malloc((size_t)(3 * in->nv) * sizeof *s.times);
  /* ties are broken by simulation when the streams are short */
  int rc = 0;
  if (sim_obj || ops <= 3 * 4096) {
    rc = remat__plan_sim_streams(in, &s.st, err);
    s.sim = rc ? 0 : sim_obj ? 2 : 1;
    if (sim_obj && rc) goto out;
  }
  if (!s.b || !s.items || !s.rec || !s.times) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
  } else {
    s.best_b = s.b + in->nv + 1;
    memset(rec, 0, (size_t)in->L);
    *delta = 0;
    rc = search(&s, bounds, rec, delta);
    if (rc == REMAT__PLAN_ETIME)
      rc = remat__errorf(err, REMAT_ERANGE, "the time limit ran out while enumerating the "
                         "%.3g partitions into virtual stages; raise the time limit", count);
    else if (rc < 0 && rc != REMAT_EINFEASIBLE)
      rc = remat__plan_knap_error(err, rc, 0);
  }
out:
  remat__knap_free(&s.kn);
  remat_schedule_streams_free(&s.st);
  remat__free(s.b);
  remat__free(s.items);
  remat__free(s.rec);
  remat__free(s.times);
  return rc;
}
