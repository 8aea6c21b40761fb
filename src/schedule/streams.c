/* streams.c: every schedule as per-rank streams of F, B and W operations on
 * model chunks (include/remat/schedule.h): 1F1B and GPipe from
 * remat_schedule_op, interleaved 1F1B in Megatron's order, ZB-H1 as 1F1B
 * with deferred weight gradients, ZB-V from a greedy unit-time run. The
 * planner's simulator and memory terms read these streams; so will the
 * runtime when it runs the new schedules. */
#include <string.h>

#include "base/base.h"
#include "remat/schedule.h"

#define MAX_OPS ((int64_t)1 << 24)

int64_t remat_schedule_chunks(int schedule, int64_t chunks) {
  if (schedule == REMAT_SCHED_INTERLEAVED) return chunks > 0 ? chunks : 2;
  if (schedule == REMAT_SCHED_ZBV) return chunks > 0 ? chunks : 2;
  return chunks > 0 ? chunks : 1;
}

static int too_long(int schedule, int64_t p, int64_t m, int64_t v, remat_error *err) {
  if ((double)p * (double)m * (double)v * 3 <= (double)MAX_OPS) return 0;
  return remat__errorf(err, REMAT_ERANGE, "%s over %lld stages, %lld micro-batches and %lld "
                       "chunks makes streams of more than %lld operations",
                       remat_plan_schedule_name(schedule), (long long)p, (long long)m,
                       (long long)v, (long long)MAX_OPS);
}

int remat_schedule_check(int schedule, int64_t p, int64_t m, int64_t v, int64_t layers,
                         remat_error *err) {
  const char *name = remat_plan_schedule_name(schedule);
  int rc;
  if (schedule < 0 || schedule >= REMAT_SCHED_COUNT)
    return remat__errorf(err, REMAT_EINVAL, "schedule %d is not a schedule", schedule);
  if (p < 1 || m < 1)
    return remat__errorf(err, REMAT_EINVAL, "a schedule needs at least one stage and one "
                         "micro-batch (stages %lld, micro-batches %lld)", (long long)p,
                         (long long)m);
  if (schedule == REMAT_SCHED_INTERLEAVED && v < 2)
    return remat__errorf(err, REMAT_EINVAL, "interleaved needs at least 2 chunks per rank "
                         "(%lld given); with one chunk it is 1f1b", (long long)v);
  if (schedule == REMAT_SCHED_INTERLEAVED && m % p != 0)
    return remat__errorf(err, REMAT_EINVAL, "interleaved needs the micro-batches to be a "
                         "multiple of the stages in Megatron's order: %lld micro-batches, "
                         "%lld stages", (long long)m, (long long)p);
  if (schedule == REMAT_SCHED_ZBV && v != 2)
    return remat__errorf(err, REMAT_EINVAL, "zbv needs exactly 2 chunks per rank (%lld given)",
                         (long long)v);
  if (schedule != REMAT_SCHED_INTERLEAVED && schedule != REMAT_SCHED_ZBV && v != 1)
    return remat__errorf(err, REMAT_EINVAL, "%s runs one chunk per rank (%lld given); chunks "
                         "go with interleaved or zbv", name, (long long)v);
  /* the chunked schedules' memory comes from their streams */
  if (v > 1 && (rc = too_long(schedule, p, m, v, err))) return rc;
  if (layers > 0 && p * v > layers)
    return remat__errorf(err, REMAT_EINVAL, "%s with %lld stages of %lld chunks needs %lld "
                         "layers, the model has %lld", name, (long long)p, (long long)v,
                         (long long)(p * v), (long long)layers);
  return 0;
}

int64_t remat_schedule_virtual_stage(int schedule, int64_t p, int64_t r, int64_t c) {
  if (schedule == REMAT_SCHED_ZBV) return c == 0 ? r : 2 * p - 1 - r;
  return c * p + r;
}

void remat_schedule_rank_of(int schedule, int64_t p, int64_t vs, int64_t *r, int64_t *c) {
  if (schedule == REMAT_SCHED_ZBV) {
    *c = vs >= p;
    *r = vs < p ? vs : 2 * p - 1 - vs;
    return;
  }
  *c = vs / p;
  *r = vs % p;
}

void remat_schedule_streams_free(remat_schedule_streams *st) {
  remat__free(st->ops);
  st->ops = NULL;
}

static remat_schedule_step step(int64_t mb, int64_t chunk, int kind) {
  return (remat_schedule_step){mb, (int32_t)chunk, (int32_t)kind};
}

/* 1F1B and GPipe: remat_schedule_op's order, whole backwards. */
static void plain(remat_schedule_streams *st) {
  for (int64_t r = 0; r < st->p; r++)
    for (int64_t q = 0; q < st->len; q++) {
      int64_t k;
      int b;
      remat_schedule_op(st->schedule, st->p, st->m, r, q, &k, &b);
      st->ops[r * st->len + q] = step(k, 0, b ? REMAT_OP_B : REMAT_OP_F);
    }
}

/* Megatron's interleaved order (forward_backward_pipelining_with_interleaving):
 * the rank's m v forwards as one list, p micro-batches of chunk 0, then the
 * same p of chunk 1, ..., then the next p micro-batches; the backwards in
 * the same groups with the chunks reversed. Warm-up: 2 (p - r - 1) + (v - 1) p
 * forwards (all of them if fewer), then one forward and one backward in
 * turn, then the remaining backwards. */
static void interleaved_op(int64_t p, int64_t v, int64_t i, int fwd, int64_t *mb, int64_t *c) {
  int64_t in_group = i % (p * v);
  *c = in_group / p;
  if (!fwd) *c = v - 1 - *c;
  *mb = i / (p * v) * p + in_group % p;
}

static void interleaved(remat_schedule_streams *st) {
  int64_t p = st->p, v = st->v, total = st->m * v;
  for (int64_t r = 0; r < p; r++) {
    remat_schedule_step *o = st->ops + r * st->len;
    int64_t w = 2 * (p - r - 1) + (v - 1) * p, q = 0, mb, c;
    if (w > total) w = total;
    for (int64_t i = 0; i < w; i++) {
      interleaved_op(p, v, i, 1, &mb, &c);
      o[q++] = step(mb, c, REMAT_OP_F);
    }
    for (int64_t i = 0; i < total - w; i++) {
      interleaved_op(p, v, w + i, 1, &mb, &c);
      o[q++] = step(mb, c, REMAT_OP_F);
      interleaved_op(p, v, i, 0, &mb, &c);
      o[q++] = step(mb, c, REMAT_OP_B);
    }
    for (int64_t i = total - w; i < total; i++) {
      interleaved_op(p, v, i, 0, &mb, &c);
      o[q++] = step(mb, c, REMAT_OP_B);
    }
  }
}

/* ZB-H1: 1F1B's F and B; stage s runs W(k) right after B(k + s), and the
 * W it still owes after its last B. The last stage, idle longest in 1F1B's
 * drain, puts off the most. */
static void zbh1(remat_schedule_streams *st) {
  int64_t p = st->p, m = st->m;
  for (int64_t r = 0; r < p; r++) {
    remat_schedule_step *o = st->ops + r * st->len;
    int64_t q = 0, wnext = 0;
    for (int64_t u = 0; u < 2 * m; u++) {
      int64_t k;
      int b;
      remat_schedule_op(REMAT_SCHED_1F1B, p, m, r, u, &k, &b);
      o[q++] = step(k, 0, b ? REMAT_OP_B : REMAT_OP_F);
      if (b && k >= r) o[q++] = step(wnext++, 0, REMAT_OP_W);
    }
    while (wnext < m) o[q++] = step(wnext++, 0, REMAT_OP_W);
  }
}

/* ZB-V's greedy unit-time run (see the header). State per virtual stage:
 * the step at which each micro-batch's F and B finished (-1: not yet). */
typedef struct {
  int64_t p, m;
  int64_t *fdone, *bdone;  /* (2p, m) */
  int64_t *nf, *nb, *nw;   /* (2p) next F, B, W micro-batch of each virtual stage */
  int64_t *units, *owed;   /* (p) chunk activations held (F run, W not), chunk-1 F owed */
  int64_t *len;            /* (p) operations so far */
} zbv_state;

#define ZD(arr, vs, k) (z->arr[(vs) * z->m + (k)])

static int zbv_b_ready(const zbv_state *z, int64_t vs, int64_t t) {
  int64_t k = z->nb[vs];
  if (k >= z->m || k >= z->nf[vs]) return 0;
  int64_t d = vs == 2 * z->p - 1 ? ZD(fdone, vs, k) : ZD(bdone, vs + 1, k);
  return d >= 0 && d <= t;
}

static int zbv_f_ready(const zbv_state *z, int64_t vs, int64_t t) {
  int64_t k = z->nf[vs];
  if (k >= z->m) return 0;
  if (vs == 0) return 1;
  return ZD(fdone, vs - 1, k) >= 0 && ZD(fdone, vs - 1, k) <= t;
}

/* The operation rank r picks at step t, or 0 if it idles. */
static int zbv_pick(const zbv_state *z, int64_t r, int64_t t, int64_t *vs, int *kind) {
  int64_t v0 = r, v1 = 2 * z->p - 1 - r;
  int b1 = zbv_b_ready(z, v1, t), b0 = zbv_b_ready(z, v0, t);
  if (b1 || b0) {
    *vs = b1 && (!b0 || z->nb[v1] <= z->nb[v0]) ? v1 : v0;
    *kind = REMAT_OP_B;
    return 1;
  }
  *kind = REMAT_OP_F;
  if (zbv_f_ready(z, v1, t) && z->nf[v1] < z->nf[v0]) return *vs = v1, 1;
  if (zbv_f_ready(z, v0, t) && z->units[r] + z->owed[r] + 2 <= 2 * z->p) return *vs = v0, 1;
  *kind = REMAT_OP_W;
  int w1 = z->nw[v1] < z->nb[v1], w0 = z->nw[v0] < z->nb[v0];
  if (!w0 && !w1) return 0;
  *vs = w1 && (!w0 || ZD(bdone, v1, z->nw[v1]) <= ZD(bdone, v0, z->nw[v0])) ? v1 : v0;
  return 1;
}

static void zbv_run(remat_schedule_streams *st, zbv_state *z) {
  int64_t p = st->p, done = 0, total = p * st->len;
  for (int64_t t = 0; done < total; t++) {
    int64_t progress = 0;
    for (int64_t r = 0; r < p; r++) {
      int64_t vs;
      int kind;
      if (!zbv_pick(z, r, t, &vs, &kind)) continue;
      int64_t c = vs >= p;
      if (kind == REMAT_OP_F) {
        int64_t k = z->nf[vs]++;
        ZD(fdone, vs, k) = t + 1;
        st->ops[r * st->len + z->len[r]++] = step(k, c, kind);
        z->units[r]++;
        z->owed[r] += c ? -1 : 1;
      } else if (kind == REMAT_OP_B) {
        int64_t k = z->nb[vs]++;
        ZD(bdone, vs, k) = t + 1;
        st->ops[r * st->len + z->len[r]++] = step(k, c, kind);
      } else {
        st->ops[r * st->len + z->len[r]++] = step(z->nw[vs]++, c, kind);
        z->units[r]--;
      }
      progress++;
    }
    done += progress;
    /* some rank can always move: a B is never held back, and the last
     * micro-batches in flight reach it through forwards of chunk 1 */
    REMAT_ASSERT(progress > 0);
  }
}

static int zbv(remat_schedule_streams *st) {
  int64_t p = st->p, m = st->m;
  zbv_state z = {p, m, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  size_t cells = (size_t)(2 * p) * (size_t)m;
  z.fdone = remat__malloc(cells * sizeof(int64_t));
  z.bdone = remat__malloc(cells * sizeof(int64_t));
  z.nf = remat__calloc((size_t)(6 * p), sizeof(int64_t));
  z.units = remat__calloc((size_t)(3 * p), sizeof(int64_t));
  int rc = z.fdone && z.bdone && z.nf && z.units ? 0 : REMAT_ENOMEM;
  if (!rc) {
    z.nb = z.nf + 2 * p;
    z.nw = z.nf + 4 * p;
    z.owed = z.units + p;
    z.len = z.units + 2 * p;
    for (size_t i = 0; i < cells; i++) z.fdone[i] = z.bdone[i] = -1;
    zbv_run(st, &z);
  }
  remat__free(z.fdone);
  remat__free(z.bdone);
  remat__free(z.nf);
  remat__free(z.units);
  return rc;
}

#undef ZD

int remat_schedule_streams_build(remat_schedule_streams *st, int schedule, int64_t p, int64_t m,
                                 int64_t v, remat_error *err) {
  memset(st, 0, sizeof *st);
  int rc = remat_schedule_check(schedule, p, m, v, 0, err);
  if (!rc) rc = too_long(schedule, p, m, v, err);
  if (rc) return rc;
  int split = schedule == REMAT_SCHED_ZBH1 || schedule == REMAT_SCHED_ZBV;
  st->schedule = schedule;
  st->p = p;
  st->m = m;
  st->v = v;
  st->len = m * v * (split ? 3 : 2);
  st->ops = remat__malloc((size_t)(p * st->len) * sizeof *st->ops);
  if (!st->ops) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the schedule's streams");
  if (schedule == REMAT_SCHED_INTERLEAVED) interleaved(st);
  else if (schedule == REMAT_SCHED_ZBH1) zbh1(st);
  else if (schedule == REMAT_SCHED_ZBV) rc = zbv(st);
  else plain(st);
  if (rc) {
    remat_schedule_streams_free(st);
    return remat__errorf(err, rc, "out of memory building the zbv streams");
  }
  return 0;
}

void remat_schedule_streams_peaks(const remat_schedule_streams *st, int64_t *in_flight,
                                  int64_t *w_pending) {
  int split = st->schedule == REMAT_SCHED_ZBH1 || st->schedule == REMAT_SCHED_ZBV;
  for (int64_t r = 0; r < st->p; r++)
    for (int64_t c = 0; c < st->v; c++) {
      int64_t f = 0, b = 0, w = 0, pf = 0, pw = 0;
      for (int64_t q = 0; q < st->len; q++) {
        const remat_schedule_step *o = &st->ops[r * st->len + q];
        if (o->chunk != c) continue;
        f += o->kind == REMAT_OP_F;
        b += o->kind == REMAT_OP_B;
        w += o->kind == REMAT_OP_W;
        if (f - b > pf) pf = f - b;
        if (split && b - w > pw) pw = b - w;
      }
      if (in_flight) in_flight[r * st->v + c] = pf;
      if (w_pending) w_pending[r * st->v + c] = pw;
    }
}

void remat_schedule_streams_alive(const remat_schedule_streams *st, int64_t *alive) {
  int split = st->schedule == REMAT_SCHED_ZBH1 || st->schedule == REMAT_SCHED_ZBV;
  for (int64_t r = 0; r < st->p; r++)
    for (int64_t c = 0; c < st->v; c++) {
      int64_t f = 0, done = 0, most = 0;
      /* ZB-V's rank 0 holds the first and the last virtual stage: a
       * micro-batch's targets reach the last when it enters the rank */
      int64_t starts = st->schedule == REMAT_SCHED_ZBV && r == 0 && c == 1 ? 0 : c;
      for (int64_t q = 0; q < st->len; q++) {
        const remat_schedule_step *o = &st->ops[r * st->len + q];
        f += o->chunk == starts && o->kind == REMAT_OP_F;
        if (o->chunk != c) continue;
        done += o->kind == (split ? REMAT_OP_W : REMAT_OP_B);
        if (f - done > most) most = f - done;
      }
      alive[r * st->v + c] = most;
    }
}
