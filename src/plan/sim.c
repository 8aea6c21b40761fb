/* sim.c: discrete-event simulation of one pipeline iteration (1F1B or GPipe)
 * with per-stage forward and backward times and no communication cost. It
 * gives the exact makespan of a plan's stage times, to set beside the 1f1b
 * objective's closed form sum_s t_s + (m - 1) max_s t_s, which it equals
 * when all stages take the same time.
 *
 * Each stage runs its operations in the order remat_schedule_op gives
 * (src/schedule), the same instruction stream the pipeline runtime executes; an operation starts when
 * its stage is free and its input is ready: forward k on stage s needs forward
 * k on stage s - 1, backward k on stage s needs backward k on stage s + 1
 * (the last stage's backward k follows its own forward k, earlier in its
 * order). Every stage is advanced as far as its dependencies allow, in
 * rounds, until all are done. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

int remat_plan_simulate(int schedule, int64_t p, int64_t m, const double *fwd, const double *bwd,
                        double *makespan, remat_error *err) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  if (p < 1 || m < 1 || !row || !row->op)
    return remat__errorf(err, REMAT_EINVAL, "simulation needs p >= 1, m >= 1 and a schedule");
  if ((double)p * (double)m > 1e8)
    return remat__errorf(err, REMAT_ERANGE, "simulation of %lld stages x %lld micro-batches is "
                         "too large", (long long)p, (long long)m);
  size_t pm = (size_t)p * (size_t)m;
  double *fdone = remat__malloc(pm * sizeof *fdone), *bdone = remat__malloc(pm * sizeof *bdone);
  double *free_at = remat__calloc((size_t)p, sizeof *free_at);
  int64_t *next = remat__calloc((size_t)p, sizeof *next);
  if (!fdone || !bdone || !free_at || !next) {
    remat__free(fdone);
    remat__free(bdone);
    remat__free(free_at);
    remat__free(next);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory in the schedule simulation");
  }
  for (size_t k = 0; k < pm; k++) fdone[k] = bdone[k] = NAN;
#define FD(s, k) fdone[(size_t)(s) * (size_t)m + (size_t)(k)]
#define BD(s, k) bdone[(size_t)(s) * (size_t)m + (size_t)(k)]
  int64_t left = (int64_t)pm * 2;
  double end = 0;
  while (left > 0) {
    int64_t progress = 0;
    for (int64_t s = 0; s < p; s++) {
      while (next[s] < 2 * m) {
        int64_t k;
        int b;
        remat_schedule_op(schedule, p, m, s, next[s], &k, &b);
        double ready;
        if (!b) ready = s == 0 ? 0 : FD(s - 1, k);
        else ready = s == p - 1 ? FD(s, k) : BD(s + 1, k);
        if (isnan(ready)) break;
        double start = ready > free_at[s] ? ready : free_at[s];
        double fin = start + (b ? bwd[s] : fwd[s]);
        if (b) BD(s, k) = fin;
        else FD(s, k) = fin;
        free_at[s] = fin;
        if (fin > end) end = fin;
        next[s]++;
        progress++;
      }
    }
    left -= progress;
    REMAT_ASSERT(progress > 0); /* both schedules are deadlock-free */
  }
#undef FD
#undef BD
  *makespan = end;
  remat__free(fdone);
  remat__free(bdone);
  remat__free(free_at);
  remat__free(next);
  return 0;
}

/* ------------------------------------------------ streams of F, B and W */

/* The same rounds over any schedule's streams (remat/schedule.h), with
 * times per virtual stage. State: when each (virtual stage, micro-batch)'s
 * F and B finished (NAN: not yet). */
typedef struct {
  const remat_schedule_streams *st;
  const double *fwd, *bwd, *wgrad;
  double *fdone, *bdone, *free_at;
  int64_t *next, nv;
} sim_state;

#define SD(arr, vs, k) (z->arr[(size_t)(vs) * (size_t)z->st->m + (size_t)(k)])

/* When operation o of rank r may start, or NAN while its input is missing. */
static double ready_at(const sim_state *z, int64_t r, const remat_schedule_step *o) {
  int64_t vs = remat_schedule_virtual_stage(z->st->schedule, z->st->p, r, o->chunk);
  if (o->kind == REMAT_OP_F) return vs == 0 ? 0 : SD(fdone, vs - 1, o->mb);
  if (o->kind == REMAT_OP_W) return SD(bdone, vs, o->mb);
  return vs == z->nv - 1 ? SD(fdone, vs, o->mb) : SD(bdone, vs + 1, o->mb);
}

/* Runs rank r as far as its inputs allow; returns the operations run. */
static int64_t advance(sim_state *z, int64_t r, int split, double *end) {
  const remat_schedule_streams *st = z->st;
  int64_t ran = 0;
  while (z->next[r] < st->len) {
    const remat_schedule_step *o = &st->ops[r * st->len + z->next[r]];
    double ready = ready_at(z, r, o);
    if (isnan(ready)) break;
    int64_t vs = remat_schedule_virtual_stage(st->schedule, st->p, r, o->chunk);
    double w = split && z->wgrad ? z->wgrad[vs] : 0, d;
    if (o->kind == REMAT_OP_F) d = z->fwd[vs];
    else if (o->kind == REMAT_OP_B) d = z->bwd[vs] - w;
    else d = w;
    double start = ready > z->free_at[r] ? ready : z->free_at[r], fin = start + d;
    if (o->kind == REMAT_OP_F) SD(fdone, vs, o->mb) = fin;
    else if (o->kind == REMAT_OP_B) SD(bdone, vs, o->mb) = fin;
    z->free_at[r] = fin;
    if (fin > *end) *end = fin;
    z->next[r]++;
    ran++;
  }
  return ran;
}

int remat_plan_simulate_streams(const remat_schedule_streams *st, const double *fwd,
                                const double *bwd, const double *wgrad, double *makespan,
                                remat_error *err) {
  int split = remat_schedule_get(st->schedule)->split;
  sim_state z = {st, fwd, bwd, wgrad, NULL, NULL, NULL, NULL, st->p * st->v};
  size_t cells = (size_t)z.nv * (size_t)st->m;
  z.fdone = remat__malloc(cells * sizeof(double));
  z.bdone = remat__malloc(cells * sizeof(double));
  z.free_at = remat__calloc((size_t)st->p, sizeof(double));
  z.next = remat__calloc((size_t)st->p, sizeof(int64_t));
  int rc = 0;
  if (!z.fdone || !z.bdone || !z.free_at || !z.next) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory in the schedule simulation");
    goto out;
  }
  for (size_t i = 0; i < cells; i++) z.fdone[i] = z.bdone[i] = NAN;
  int64_t left = st->p * st->len;
  double end = 0;
  while (left > 0) {
    int64_t progress = 0;
    for (int64_t r = 0; r < st->p; r++) progress += advance(&z, r, split, &end);
    if (!progress) {
      rc = remat__errorf(err, REMAT_EINVAL, "the %s streams deadlock with %lld operations left",
                         remat_plan_schedule_name(st->schedule), (long long)left);
      goto out;
    }
    left -= progress;
  }
  *makespan = end;
out:
  remat__free(z.fdone);
  remat__free(z.bdone);
  remat__free(z.free_at);
  remat__free(z.next);
  return rc;
}
#undef SD

/* ------------------------------------------------ an arrangement's makespan */

int remat__plan_sim_arrangement(const remat__plan_inst *in, const remat_schedule_streams *st,
                                const int64_t *bounds, const uint8_t *rec, double *times,
                                double *ms) {
  double *f = times, *bw = times + in->nv, *w = times + 2 * in->nv;
  for (int64_t vs = 0; vs < in->nv; vs++) {
    f[vs] = bw[vs] = w[vs] = 0;
    for (int64_t l = bounds[vs]; l < bounds[vs + 1]; l++) {
      remat__plan_recfig g = remat__plan_rec_fig(in, vs, l, rec[l]);
      f[vs] += (double)in->fwd[l];
      w[vs] += (double)g.wg; /* a rebuilt layer's W runs in its B */
      bw[vs] += (double)(in->fb[l] - in->fwd[l]) + (double)g.t;
    }
  }
  if (st) return remat_plan_simulate_streams(st, f, bw, w, ms, NULL);
  return remat_plan_simulate(in->schedule, in->p, in->m, f, bw, ms, NULL);
}

int remat__plan_sim_streams(const remat__plan_inst *in, remat_schedule_streams *st,
                            remat_error *err) {
  memset(st, 0, sizeof *st);
  if (in->v == 1 && remat_schedule_get(in->schedule)->op) return 0;
  return remat_schedule_streams_build(st, in->schedule, in->p, in->m, in->v, err);
}
