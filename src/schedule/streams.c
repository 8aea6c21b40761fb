/* streams.c: each schedule's stream generator, one per row of the
 * schedule table (schedule.c, through streams.h): 1F1B and GPipe from
 * their closed forms, interleaved 1F1B in Megatron's order, ZB-H1 as 1F1B
 * with deferred weight gradients, ZB-V from a greedy unit-time run
 * (include/remat/schedule.h). The planner's simulator and memory terms and
 * the pipeline runtime read these streams. */
#include "base/base.h"
#include "schedule/streams.h"

/* 1F1B: min(p - s - 1, m) warm-up forwards, then one forward and one
 * backward in turn, then the remaining backwards. */
void remat__sched_op_1f1b(int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k, int *bwd) {
  int64_t w = p - s - 1 < m ? p - s - 1 : m; /* warm-up forwards */
  if (q < w) {
    *bwd = 0;
    *k = q;
  } else if (q < w + 2 * (m - w)) {
    int64_t u = q - w; /* steady state: forward w + u/2, then backward u/2 */
    *bwd = u % 2;
    *k = *bwd ? u / 2 : w + u / 2;
  } else {
    *bwd = 1;
    *k = q - w - (m - w); /* drain: the remaining backwards */
  }
}

/* GPipe: every forward, then every backward, both in micro-batch order. */
void remat__sched_op_gpipe(int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k, int *bwd) {
  (void)p, (void)s;
  *bwd = q >= m;
  *k = q < m ? q : q - m;
}

static remat_schedule_step step(int64_t mb, int64_t chunk, int kind) {
  return (remat_schedule_step){mb, (int32_t)chunk, (int32_t)kind};
}

/* A closed-form order as streams, whole backwards. */
static int from_op(remat_schedule_streams *st,
                   void (*op)(int64_t, int64_t, int64_t, int64_t, int64_t *, int *)) {
  for (int64_t r = 0; r < st->p; r++)
    for (int64_t q = 0; q < st->len; q++) {
      int64_t k;
      int b;
      op(st->p, st->m, r, q, &k, &b);
      st->ops[r * st->len + q] = step(k, 0, b ? REMAT_OP_B : REMAT_OP_F);
    }
  return 0;
}

int remat__sched_streams_1f1b(remat_schedule_streams *st) {
  return from_op(st, remat__sched_op_1f1b);
}

int remat__sched_streams_gpipe(remat_schedule_streams *st) {
  return from_op(st, remat__sched_op_gpipe);
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

int remat__sched_streams_interleaved(remat_schedule_streams *st) {
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
  return 0;
}

/* ZB-H1: 1F1B's F and B; stage s runs W(k) right after B(k + s), and the
 * W it still owes after its last B. The last stage, idle longest in 1F1B's
 * drain, puts off the most. */
int remat__sched_streams_zbh1(remat_schedule_streams *st) {
  int64_t p = st->p, m = st->m;
  for (int64_t r = 0; r < p; r++) {
    remat_schedule_step *o = st->ops + r * st->len;
    int64_t q = 0, wnext = 0;
    for (int64_t u = 0; u < 2 * m; u++) {
      int64_t k;
      int b;
      remat__sched_op_1f1b(p, m, r, u, &k, &b);
      o[q++] = step(k, 0, b ? REMAT_OP_B : REMAT_OP_F);
      if (b && k >= r) o[q++] = step(wnext++, 0, REMAT_OP_W);
    }
    while (wnext < m) o[q++] = step(wnext++, 0, REMAT_OP_W);
  }
  return 0;
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

int remat__sched_streams_zbv(remat_schedule_streams *st) {
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
