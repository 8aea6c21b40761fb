/* inst.c: a problem expanded into one entry per layer (remat__plan_inst),
 * the form every part of the solver works on: times quantised to integers in
 * units of a power of two, bytes as int64, each layer's options (recompute,
 * middle) that lower its memory, prefix sums for the O(1) figures of any run
 * of layers, the runs of alike recompute candidates that allow closed forms,
 * and the classes of stages that share every answer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

void remat__plan_inst_free(remat__plan_inst *in) {
  int64_t **arrs[] = {&in->fb,   &in->fwd,   &in->r,     &in->a,     &in->c,  &in->x,
                      &in->y,    &in->w,     &in->rm,    &in->mb,    &in->xm, &in->xlo,
                      &in->xhi,  &in->dlo,   &in->dmax,  &in->ytree, &in->n,  &in->budget,
                      &in->pF,   &in->pA,    &in->pW,    &in->pD,    &in->pDlo, &in->pCand,
                      &in->first_cand, &in->kind_end, &in->x_end, &in->cls, &in->wg,
                      &in->u,    &in->kw,    &in->pU,    &in->pUc,   &in->fixed};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
    remat__free(*arrs[i]);
    *arrs[i] = NULL;
  }
  remat__free(in->cand);
  remat__free(in->recomp);
  remat__free(in->mid);
  remat__free(in->nopt);
  remat__free(in->opt);
  in->cand = in->recomp = in->mid = in->nopt = NULL;
  in->opt = NULL;
}

/* ------------------------------------------------------------ options */

/* Layer l's options that lower its memory, ascending x (ties: larger d
 * first), and the steps of its largest saving under a scratch threshold. */
static void options(remat__plan_inst *in, int64_t l) {
  remat__plan_opt *o = &in->opt[REMAT__PLAN_OPTS * l];
  int n = 0;
  if (in->recomp[l] && in->a[l] > in->c[l])
    o[n++] = (remat__plan_opt){in->a[l] - in->c[l], in->r[l], in->x[l], REMAT_RECOMPUTE};
  if (in->mid[l] && in->a[l] > in->mb[l])
    o[n++] = (remat__plan_opt){in->a[l] - in->mb[l], in->rm[l], in->xm[l], REMAT_MIDDLE};
  if (n == 2 && (o[1].x < o[0].x || (o[1].x == o[0].x && o[1].d > o[0].d))) {
    remat__plan_opt t = o[0];
    o[0] = o[1];
    o[1] = t;
  }
  in->nopt[l] = (uint8_t)n;
  in->cand[l] = n > 0;
  in->xlo[l] = in->xhi[l] = in->dlo[l] = in->dmax[l] = 0;
  if (!n) return;
  in->xlo[l] = in->xhi[l] = o[0].x;
  in->dlo[l] = in->dmax[l] = o[0].d;
  if (n == 2 && o[1].d > o[0].d) { /* else the larger scratch buys nothing */
    in->xhi[l] = o[1].x;
    in->dmax[l] = o[1].d;
  }
}

/* Whether candidates l and k have the same options. */
static int same_kind(const remat__plan_inst *in, int64_t l, int64_t k) {
  if (in->nopt[l] != in->nopt[k]) return 0;
  for (int q = 0; q < in->nopt[l]; q++) {
    const remat__plan_opt *u = &in->opt[REMAT__PLAN_OPTS * l + q],
                          *v = &in->opt[REMAT__PLAN_OPTS * k + q];
    if (u->d != v->d || u->r != v->r || u->x != v->x || u->pol != v->pol) return 0;
  }
  return in->u[l] == in->u[k];
}

/* ------------------------------------------------------------ work bytes */

/* A max segment tree over y, built only when some y is above 0: the largest
 * work bytes of any run of layers in O(log L). */
static int work_tree(remat__plan_inst *in) {
  int64_t any = 0;
  for (int64_t l = 0; l < in->L; l++) any |= in->y[l];
  if (!any) return 0;
  int64_t size = 1;
  while (size < in->L) size *= 2;
  in->ytree = remat__calloc((size_t)(2 * size), sizeof *in->ytree);
  if (!in->ytree) return REMAT_ENOMEM;
  in->ysize = size;
  for (int64_t l = 0; l < in->L; l++) in->ytree[size + l] = in->y[l];
  for (int64_t k = size - 1; k >= 1; k--)
    in->ytree[k] = remat__max64(in->ytree[2 * k], in->ytree[2 * k + 1]);
  return 0;
}

int64_t remat__plan_work_max(const remat__plan_inst *in, int64_t i, int64_t j) {
  if (!in->ytree) return 0;
  int64_t best = 0;
  for (i += in->ysize, j += in->ysize; i < j; i /= 2, j /= 2) {
    if (i & 1) best = remat__max64(best, in->ytree[i++]);
    if (j & 1) best = remat__max64(best, in->ytree[--j]);
  }
  return best;
}

/* ------------------------------------------------------------ expansion */

typedef struct {
  int64_t n, k, b, s;
} clskey;

static int clskey_cmp(const void *x, const void *y) {
  const clskey *a = x, *b = y;
  if (a->n != b->n) return a->n < b->n ? -1 : 1;
  if (a->k != b->k) return a->k < b->k ? -1 : 1;
  if (a->b != b->b) return a->b < b->b ? -1 : 1;
  return a->s < b->s ? -1 : a->s > b->s;
}

/* Every array of the expansion, for L layers and p stages (0, or REMAT_ENOMEM
 * with what was allocated left for remat__plan_inst_free). */
static int inst_alloc(remat__plan_inst *in, int64_t L, int64_t p, int64_t nv) {
  size_t L1 = (size_t)L + 1;
  int64_t **perL[] = {&in->fb, &in->fwd, &in->r,  &in->a,   &in->c,   &in->x,  &in->y,
                       &in->w,  &in->rm,  &in->mb, &in->xm, &in->xlo, &in->xhi, &in->dlo,
                       &in->dmax, &in->wg, &in->u};
  for (size_t i = 0; i < sizeof perL / sizeof perL[0]; i++)
    *perL[i] = remat__malloc((size_t)L * sizeof(int64_t));
  int64_t **perL1[] = {&in->pF,   &in->pA,         &in->pW,       &in->pD,   &in->pDlo,
                       &in->pCand, &in->first_cand, &in->kind_end, &in->x_end, &in->pU,
                       &in->pUc};
  for (size_t i = 0; i < sizeof perL1 / sizeof perL1[0]; i++)
    *perL1[i] = remat__malloc(L1 * sizeof(int64_t));
  in->cand = remat__malloc((size_t)L);
  in->recomp = remat__malloc((size_t)L);
  in->mid = remat__malloc((size_t)L);
  in->nopt = remat__malloc((size_t)L);
  in->opt = remat__malloc((size_t)L * REMAT__PLAN_OPTS * sizeof *in->opt);
  in->n = remat__malloc((size_t)nv * sizeof(int64_t));
  in->kw = remat__malloc((size_t)nv * sizeof(int64_t));
  in->budget = remat__malloc((size_t)p * sizeof(int64_t));
  in->cls = remat__malloc((size_t)p * sizeof(int64_t));
  int ok = in->cand && in->recomp && in->mid && in->nopt && in->opt && in->n && in->kw &&
           in->budget && in->cls;
  for (size_t i = 0; i < sizeof perL / sizeof perL[0]; i++) ok = ok && *perL[i];
  for (size_t i = 0; i < sizeof perL1 / sizeof perL1[0]; i++) ok = ok && *perL1[i];
  return ok ? 0 : REMAT_ENOMEM;
}

/* Time quantum: the smallest power of two q = 2^e with m * (total time) / q
 * <= 2^60, so every objective value (at most m times the total) fits in 61
 * bits. Returns e. */
static int time_exponent(const remat_plan_problem *pb) {
  double ttot = 0;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    ttot += (double)G->count * (G->fwd + G->bwd + G->recompute + G->middle_recompute);
  }
  /* per micro-batch, times are a step's: m times more */
  double span = ttot * (double)pb->microbatches * (pb->per_microbatch ? pb->microbatches : 1);
  if (!(span > 0)) return 0;
  int ex;
  frexp(span, &ex); /* span < 2^ex */
  return ex - 60;
}

/* Each group's layers, times in quanta of 2^e, and their options. */
static void expand_layers(remat__plan_inst *in, const remat_plan_problem *pb, int e) {
  int64_t l = 0, ms = in->ms;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    int64_t fq = ms * (int64_t)llround(ldexp(G->fwd, -e));
    int64_t bq = ms * (int64_t)llround(ldexp(G->bwd, -e));
    /* zb-h1, zbv: a layer that rebuilds its activations rebuilds them once,
     * for its B, and runs its W there too (remat train's runtime does) */
    int64_t rq = ms * (int64_t)llround(ldexp(G->recompute, -e));
    int middle = G->recomputable && G->middle;
    int64_t rmq = middle ? ms * (int64_t)llround(ldexp(G->middle_recompute, -e)) : 0;
    int64_t wq = ms * (int64_t)llround(ldexp(G->wgrad, -e));
    for (int64_t k = 0; k < G->count; k++, l++) {
      in->fwd[l] = fq;
      in->fb[l] = fq + bq;
      in->r[l] = rq;
      in->a[l] = (int64_t)G->act_bytes;
      in->c[l] = (int64_t)G->ckpt_bytes;
      in->x[l] = (int64_t)G->recompute_bytes;
      in->y[l] = (int64_t)G->work_bytes;
      in->w[l] = (int64_t)remat__plan_state_bytes(pb, G, l, in->L);
      in->wg[l] = wq < bq ? wq : bq;
      in->u[l] = (int64_t)G->wgrad_bytes;
      in->recomp[l] = G->recomputable != 0;
      in->mid[l] = (uint8_t)middle;
      in->rm[l] = rmq;
      in->mb[l] = middle ? (int64_t)G->middle_bytes : in->a[l];
      in->xm[l] = middle ? (int64_t)G->middle_recompute_bytes : 0;
      options(in, l);
    }
  }
}

static void prefix_sums(remat__plan_inst *in) {
  in->pF[0] = in->pA[0] = in->pW[0] = in->pD[0] = in->pDlo[0] = in->pCand[0] = in->pU[0] = 0;
  in->pUc[0] = 0;
  for (int64_t l = 0; l < in->L; l++) {
    in->pF[l + 1] = in->pF[l] + in->fb[l];
    in->pA[l + 1] = in->pA[l] + in->a[l];
    in->pW[l + 1] = in->pW[l] + in->w[l];
    in->pD[l + 1] = in->pD[l] + in->dmax[l];
    in->pDlo[l + 1] = in->pDlo[l] + in->dlo[l];
    in->pCand[l + 1] = in->pCand[l] + in->cand[l];
    in->pU[l + 1] = in->pU[l] + in->u[l];
    in->pUc[l + 1] = in->pUc[l] + (in->cand[l] ? in->u[l] : 0);
  }
}

/* From each layer, the next candidate and where its run of candidates with
 * the same options (kind_end) and the same scratch (x_end) ends. */
static void candidate_runs(remat__plan_inst *in) {
  int64_t L = in->L, next = L;
  in->first_cand[L] = L;
  in->kind_end[L] = L;
  in->x_end[L] = L;
  for (int64_t l = L - 1; l >= 0; l--) {
    in->kind_end[l] = in->x_end[l] = L;
    if (in->cand[l]) {
      if (next < L) {
        int same_x = in->xlo[next] == in->xlo[l] && in->xhi[next] == in->xhi[l];
        int same = same_x && same_kind(in, next, l);
        in->kind_end[l] = same ? in->kind_end[next] : next;
        in->x_end[l] = same_x ? in->x_end[next] : next;
      }
      next = l;
    }
    in->first_cand[l] = next;
  }
}

/* Each stage's budget and its class: stages with the same n, k and room
 * left after the boundary buffer share every answer (one chunk). */
static int stage_classes(remat__plan_inst *in, const remat_plan_problem *pb) {
  int64_t p = in->p;
  clskey *keys = remat__malloc((size_t)p * sizeof *keys);
  if (!keys) return REMAT_ENOMEM;
  for (int64_t s = 0; s < p; s++) {
    in->budget[s] = (int64_t)pb->memory[s];
    keys[s] = (clskey){in->n[s], in->kw[s],
                       in->budget[s] - (s < p - 1 ? in->boundary_bytes : 0), s};
  }
  qsort(keys, (size_t)p, sizeof *keys, clskey_cmp);
  in->ncls = 0;
  for (int64_t k = 0; k < p; k++) {
    if (k > 0 && (keys[k].n != keys[k - 1].n || keys[k].k != keys[k - 1].k ||
                  keys[k].b != keys[k - 1].b))
      in->ncls++;
    in->cls[keys[k].s] = in->ncls;
  }
  in->ncls++;
  remat__free(keys);
  return 0;
}

/* A fixed split's boundaries, for a problem whose layers are all blocks
 * (remat_plan_solve fuses the others into them first). */
static int fixed_split(remat__plan_inst *in, const remat_plan_problem *pb, remat_error *err) {
  for (int64_t l = 0; l < in->L; l++)
    if (!in->recomp[l])
      return remat__errorf(err, REMAT_EINVAL, "a fixed split of blocks needs every layer a "
                           "block; solve with min_blocks 1, which fuses the others into them");
  in->fixed = remat__malloc((size_t)(in->nv + 1) * sizeof *in->fixed);
  if (!in->fixed) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  in->fixed[0] = 0;
  for (int64_t k = 0; k < in->nv; k++) in->fixed[k + 1] = in->fixed[k] + pb->fixed_blocks[k];
  return 0;
}

int remat__plan_inst_build(const remat_plan_problem *pb, remat__plan_inst *in, remat_error *err) {
  memset(in, 0, sizeof *in);
  int rc = remat_plan_problem_check(pb, err);
  if (rc) return rc;
  int64_t L = remat_plan_problem_layers(pb);
  in->L = L;
  in->p = pb->stages;
  in->m = pb->microbatches;
  in->schedule = pb->schedule;
  in->objective = pb->objective;
  in->stage_bytes = (int64_t)pb->stage_bytes;
  in->boundary_bytes = (int64_t)pb->boundary_bytes;
  in->v = remat_schedule_chunks(pb->schedule, pb->chunks);
  in->nv = in->p * in->v;
  if ((rc = inst_alloc(in, L, in->p, in->nv))) goto fail;
  int e = time_exponent(pb);
  in->per_mb = pb->per_microbatch;
  in->ms = in->per_mb ? in->m : 1;
  in->q = ldexp(1.0, e) / (double)in->ms;
  expand_layers(in, pb, e);
  if ((rc = work_tree(in))) goto fail;
  prefix_sums(in);
  candidate_runs(in);
  /* micro-batches in flight and kept for a deferred W per virtual stage,
   * as remat train's placement takes them */
  if ((rc = remat_schedule_held(in->schedule, in->p, in->m, in->v, in->n, in->kw, err))) {
    remat__plan_inst_free(in);
    return rc;
  }
  if ((rc = stage_classes(in, pb))) goto fail;
  if (pb->fixed_blocks && (rc = fixed_split(in, pb, err))) {
    remat__plan_inst_free(in);
    return rc;
  }
  return 0;
fail:
  remat__plan_inst_free(in);
  return remat__errorf(err, rc, "out of memory expanding %lld layers", (long long)L);
}
