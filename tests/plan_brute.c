/* plan_brute.c: the brute-force oracle of plan_brute.h. Every partition (by
 * recursion on the next boundary) and every choice for every layer (keep;
 * recompute, if recomputable; the middle policy, if it has one), counted
 * through in mixed radix; each stage's memory and time straight from the
 * formula in include/remat/plan.h, sharing nothing with the solver. Under a
 * chunked schedule the partition is into p v virtual stages, and a stage
 * adds up its chunks (which it finds by its own reading of the layouts of
 * remat/schedule.h). */
#include "plan_brute.h"

#include <stdlib.h>

typedef struct {
  const remat__plan_inst *in;
  int min_blocks;       /* blocks (recomputable layers) each virtual stage holds at least */
  const int64_t *fixed; /* NULL, or the blocks of each virtual stage */
  int64_t bounds[24];
  int have;
  int64_t best[3];
} brute;

/* The virtual stage of chunk c of stage s. */
static int64_t vstage(const remat__plan_inst *in, int64_t s, int64_t c) {
  if (in->schedule == REMAT_SCHED_ZBV) return c ? 2 * in->p - 1 - s : s;
  return c * in->p + s;
}

/* Micro-batches t of 0..m-1 in slots n-k..n-1 (slot t mod n), counted. */
static int64_t mbs_in(int64_t m, int64_t n, int64_t k) {
  int64_t c = 0;
  for (int64_t t = 0; t < m; t++) c += t % n >= n - k;
  return c;
}

/* Objective, layers not kept and peak of one arrangement (ch[l]: 0 keep, 1
 * recompute, 2 middle, 2 + k: keep but recompute in full in the last k
 * slots of the stage, planning per micro-batch); 0 if a stage is over its
 * budget. */
static int arrangement(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *ch,
                       int64_t out[3]) {
  int64_t sum = 0, tmax = 0, cnt = 0, peak = 0;
  for (int64_t s = 0; s < in->p; s++) {
    int64_t mem = 0, X = 0, t = 0; /* X: max of y, recomputed x, middle xm */
    for (int64_t c = 0; c < in->v; c++) {
      int64_t vs = vstage(in, s, c);
      mem += in->stage_bytes + (vs < in->nv - 1 ? in->boundary_bytes : 0);
      for (int64_t l = bounds[vs]; l < bounds[vs + 1]; l++) {
        if (ch[l] > 2) { /* some slots: times are a step's (in->ms = m) */
          int64_t k = ch[l] - 2;
          if (in->c[l] >= in->a[l]) return 0;
          mem += in->w[l] + in->n[vs] * in->a[l] - k * (in->a[l] - in->c[l]) +
                 in->kw[vs] * in->u[l];
          if (in->y[l] > X) X = in->y[l];
          if (in->x[l] > X) X = in->x[l];
          t += in->fb[l] + in->r[l] / in->m * mbs_in(in->m, in->n[vs], k);
          cnt++;
          continue;
        }
        int64_t stored = ch[l] == 1 ? in->c[l] : ch[l] == 2 ? in->mb[l] : in->a[l];
        /* a layer recomputes only to store less per micro-batch */
        if (ch[l] && stored >= in->a[l]) return 0;
        /* a layer that rebuilds its activations runs its W with its B */
        mem += in->w[l] + in->n[vs] * stored + (ch[l] ? 0 : in->kw[vs] * in->u[l]);
        if (in->y[l] > X) X = in->y[l];
        t += in->fb[l];
        if (ch[l] == 1) {
          t += in->r[l];
          if (in->x[l] > X) X = in->x[l];
        } else if (ch[l] == 2) {
          t += in->rm[l];
          if (in->xm[l] > X) X = in->xm[l];
        }
        cnt += ch[l] != 0;
      }
    }
    mem += X;
    if (mem > in->budget[s]) return 0;
    sum += t;
    if (t > tmax) tmax = t;
    if (mem > peak) peak = mem;
  }
  out[0] = in->objective == REMAT_OBJ_BOTTLENECK ? tmax : sum + (in->m - 1) * tmax;
  out[1] = cnt;
  out[2] = peak;
  return 1;
}

/* Lexicographic order: objective, then layers not kept, then peak. */
static int better(const brute *b, const int64_t v[3]) {
  if (!b->have || v[0] != b->best[0]) return !b->have || v[0] < b->best[0];
  if (v[1] != b->best[1]) return v[1] < b->best[1];
  return v[2] < b->best[2];
}

static void all_choices(brute *b) {
  const remat__plan_inst *in = b->in;
  uint8_t ch[24] = {0}, radix[24];
  for (int64_t l = 0; l < in->L; l++) radix[l] = (uint8_t)(!in->recomp[l] ? 1 : in->mid[l] ? 3 : 2);
  /* per micro-batch: 1 to n - 1 slots of the layer's stage too (a layer
   * without the middle policy skips choice 2) */
  for (int64_t vs = 0; in->per_mb && vs < in->nv; vs++)
    for (int64_t l = b->bounds[vs]; l < b->bounds[vs + 1]; l++)
      if (in->recomp[l] && in->n[vs] > 1) radix[l] = (uint8_t)(3 + in->n[vs] - 1);
  for (;;) {
    int64_t v[3];
    if (arrangement(in, b->bounds, ch, v) && better(b, v)) {
      b->best[0] = v[0];
      b->best[1] = v[1];
      b->best[2] = v[2];
      b->have = 1;
    }
    int64_t l = 0; /* the next choice, in mixed radix */
    while (l < in->L && ++ch[l] == radix[l]) ch[l++] = 0;
    if (l == in->L) break;
    if (ch[l] == 2 && radix[l] > 3 && !in->mid[l]) ch[l]++; /* no middle policy */
  }
}

static void partitions(brute *b, int64_t s) {
  int64_t L = b->in->L, p = b->in->nv; /* virtual stages */
  if (s == p - 1) {
    b->bounds[p] = L;
    for (int64_t vs = 0; vs < p; vs++) {
      int64_t blocks = 0;
      for (int64_t l = b->bounds[vs]; l < b->bounds[vs + 1]; l++) blocks += b->in->recomp[l];
      if (blocks < b->min_blocks || (b->fixed && blocks != b->fixed[vs])) return;
    }
    all_choices(b);
    return;
  }
  for (int64_t j = b->bounds[s] + 1; j <= L - (p - 1 - s); j++) {
    b->bounds[s + 1] = j;
    partitions(b, s + 1);
  }
}

int plan_brute(const remat__plan_inst *in, int64_t *obj, int64_t *cnt, int64_t *maxmem) {
  return plan_brute_blocks(in, 0, NULL, obj, cnt, maxmem);
}

int plan_brute_blocks(const remat__plan_inst *in, int min_blocks, const int64_t *fixed,
                      int64_t *obj, int64_t *cnt, int64_t *maxmem) {
  if (in->L > 20) abort();
  brute b = {in, min_blocks, fixed, {0}, 0, {0, 0, 0}};
  partitions(&b, 0);
  if (!b.have) return REMAT_EINFEASIBLE;
  *obj = b.best[0];
  *cnt = b.best[1];
  *maxmem = b.best[2];
  return 0;
}
