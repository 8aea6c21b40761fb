/* lp.c: the planning problem as a mixed-integer program in CPLEX LP format,
 * the model of ColossalAI #5509 generalised to heterogeneous layers, per-stage
 * budgets, recompute scratch, work bytes and a third choice per layer (the
 * middle policy), so that glpsol or cbc can confirm the planner's optimum:
 *
 *   y_l_s  binary  layer l runs on stage s (only s <= l <= s + L - p)
 *   z_l_s  binary  layer l recomputes on stage s (recomputable layers)
 *   u_l_s  binary  layer l takes the middle policy on stage s (layers that
 *                  have it)
 *   X_s    >= 0    largest transient bytes of stage s: work bytes of its
 *                  layers, scratch of its recomputed and middle layers
 *   T      >= 0    the bottleneck
 *
 *   sum_s y_l_s = 1;  y_0_0 = 1;  y_{L-1}_{p-1} = 1
 *   0 <= sum_s s y_{l+1}_s - sum_s s y_l_s <= 1   (contiguous, none empty)
 *   z_l_s + u_l_s <= y_l_s   (one choice per layer)
 *   x_l z_l_s <= X_s;   xm_l u_l_s <= X_s;   y_l y_l_s <= X_s (y_l: work bytes)
 *   sum_l (w_l + n_s a_l + k_s u_l) y_l_s - n_s (a_l - c_l) z_l_s
 *       - n_s (a_l - mb_l) u_l_s + X_s <= budget_s - stage_bytes
 * Under a chunked schedule s runs over the p v virtual stages: placement,
 * contiguity and the y, z, u variables are per virtual stage, and each
 * stage's memory and time rows add up its chunks' terms (with each chunk's
 * n and k), with one X per stage.
 *   sum_l (f_l + b_l) y_l_s + r_l z_l_s + rm_l u_l_s <= T
 *   minimise T (bottleneck) or sum_s t_s + (m - 1) T (1f1b)
 *
 * Memory rows are divided by the gcd g of every byte count of the layers (the
 * left side is then integral, so its right side rounds down exactly). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

static uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Writes terms, breaking lines so no line grows long. */
typedef struct {
  remat__plan_buf *b;
  int on_line;
  int any;
} terms;

static void term(terms *t, double coef, const char *var) {
  if (coef == 0) return;
  if (t->on_line >= 6) {
    remat__plan_printf(t->b, "\n   ");
    t->on_line = 0;
  }
  const char *sign = coef < 0 ? " -" : t->any ? " +" : "";
  double a = coef < 0 ? -coef : coef;
  if (a == 1) remat__plan_printf(t->b, "%s %s", sign, var);
  else remat__plan_printf(t->b, "%s %.17g %s", sign, a, var);
  t->on_line++;
  t->any = 1;
}

/* The export's state: the problem, each layer's group, the memory rows' unit
 * (g * 2^k bytes) and the text written so far. */
typedef struct {
  const remat_plan_problem *pb;
  const remat_plan_group **of; /* (L) the group of each layer */
  int64_t L, p, m;
  int64_t v, nv;               /* chunks per stage; virtual stages p v */
  const int64_t *n, *kw;       /* (nv) micro-batches in flight, kept for W */
  uint64_t g;
  int k;
  remat__plan_buf b;
} lp;

/* Bytes in the memory rows' unit. */
static double mem(const lp *x, uint64_t bytes) { return ldexp((double)(bytes / x->g), -x->k); }
/* Layer l has the middle policy as a third choice. */
static int mid(const lp *x, int64_t l) { return x->of[l]->recomputable && x->of[l]->middle; }
/* The (virtual) stages layer l can run on: every stage before it holds a
 * layer, and so does every stage after it. */
static int64_t lo(const lp *x, int64_t l) { return l - (x->L - x->nv) > 0 ? l - (x->L - x->nv) : 0; }
static int64_t hi(const lp *x, int64_t l) { return l < x->nv - 1 ? l : x->nv - 1; }
/* The stage that holds virtual stage vs. */
static int64_t rank_of(const lp *x, int64_t vs) {
  int64_t r, c;
  remat_schedule_rank_of(x->pb->schedule, x->p, vs, &r, &c);
  return r;
}

/* Each layer's group, and the gcd g of every byte count (1 when all are 0). */
static int lp_layers(lp *x, remat_error *err) {
  const remat_plan_problem *pb = x->pb;
  x->of = remat__malloc((size_t)x->L * sizeof *x->of);
  if (!x->of) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int64_t l = 0;
  uint64_t g = gcd(pb->stage_bytes, pb->v_last_state_less);
  for (int64_t k = 0; k < pb->num_groups; k++) {
    const remat_plan_group *G = &pb->groups[k];
    g = gcd(g, G->act_bytes);
    g = gcd(g, G->ckpt_bytes);
    g = gcd(g, G->state_bytes);
    g = gcd(g, G->recompute_bytes);
    g = gcd(g, G->work_bytes);
    g = gcd(g, G->wgrad_bytes);
    if (G->recomputable && G->middle) {
      g = gcd(g, G->middle_bytes);
      g = gcd(g, G->middle_recompute_bytes);
    }
    for (int64_t c = 0; c < G->count; c++) x->of[l++] = G;
  }
  x->g = g == 0 ? 1 : g;
  return 0;
}

/* A further power of two keeps the memory rows' numbers near 1000: with
 * byte-sized coefficients (1e9 and more) glpsol's tolerances give wrong
 * optima. Dividing by 2^k is exact in binary floating point. */
static void lp_scale(lp *x) {
  const remat_plan_problem *pb = x->pb;
  double top = 1;
  for (int64_t s = 0; s < x->p; s++)
    if (pb->memory[s] > pb->stage_bytes &&
        (double)((pb->memory[s] - pb->stage_bytes) / x->g) > top)
      top = (double)((pb->memory[s] - pb->stage_bytes) / x->g);
  x->k = 0;
  while (ldexp(top, -x->k) > 2048) x->k++;
}

/* The time of layer l on stage s: f + b when placed, r when recomputed, rm
 * under the middle policy (once under zb-h1 and zbv too: a layer that
 * rebuilds its activations runs its W with its B). */
static void time_terms(lp *x, terms *t, int64_t l, int64_t s) {
  char v[64];
  snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
  term(t, x->of[l]->fwd + x->of[l]->bwd, v);
  if (x->of[l]->recomputable) {
    snprintf(v, sizeof v, "z_%lld_%lld", (long long)l, (long long)s);
    term(t, x->of[l]->recompute, v);
  }
  if (mid(x, l)) {
    snprintf(v, sizeof v, "u_%lld_%lld", (long long)l, (long long)s);
    term(t, x->of[l]->middle_recompute, v);
  }
}

static void lp_objective(lp *x) {
  remat__plan_printf(&x->b, "Minimize\n obj:");
  terms t = {&x->b, 0, 0};
  if (x->pb->objective == REMAT_OBJ_1F1B) {
    for (int64_t l = 0; l < x->L; l++)
      for (int64_t s = lo(x, l); s <= hi(x, l); s++) time_terms(x, &t, l, s);
    if (x->m > 1) term(&t, (double)(x->m - 1), "T");
    if (!t.any) term(&t, 1, "T"); /* a zero objective still needs a term */
  } else {
    term(&t, 1, "T");
  }
}

/* Every layer on one stage, the first and last layers on the first and last
 * stages, and consecutive layers on the same or the next stage. */
static void lp_placement_rows(lp *x) {
  int64_t L = x->L, p = x->nv;
  char v[64];
  terms t;
  for (int64_t l = 0; l < L; l++) {
    remat__plan_printf(&x->b, " one_%lld:", (long long)l);
    t = (terms){&x->b, 0, 0};
    for (int64_t s = lo(x, l); s <= hi(x, l); s++) {
      snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
      term(&t, 1, v);
    }
    remat__plan_printf(&x->b, " = 1\n");
  }
  remat__plan_printf(&x->b, " first: y_0_0 = 1\n last: y_%lld_%lld = 1\n", (long long)(L - 1),
                     (long long)(p - 1));
  for (int64_t l = 0; p > 1 && l + 1 < L; l++) {
    for (int side = 0; side < 2; side++) {
      remat__plan_printf(&x->b, " %s_%lld:", side ? "step" : "order", (long long)l);
      t = (terms){&x->b, 0, 0};
      for (int64_t s = lo(x, l + 1); s <= hi(x, l + 1); s++) {
        snprintf(v, sizeof v, "y_%lld_%lld", (long long)(l + 1), (long long)s);
        term(&t, (double)s, v);
      }
      for (int64_t s = lo(x, l); s <= hi(x, l); s++) {
        snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
        term(&t, -(double)s, v);
      }
      remat__plan_printf(&x->b, side ? " <= 1\n" : " >= 0\n");
    }
  }
}

/* One choice per placed layer, and X_s bounding each layer's transient
 * bytes: recompute and middle scratch, work bytes. */
static void lp_choice_rows(lp *x) {
  for (int64_t l = 0; l < x->L; l++) {
    const remat_plan_group *G = x->of[l];
    if (!G->recomputable) continue;
    for (int64_t s = lo(x, l); s <= hi(x, l); s++) {
      remat__plan_printf(&x->b, " zy_%lld_%lld: z_%lld_%lld", (long long)l, (long long)s,
                         (long long)l, (long long)s);
      if (mid(x, l)) remat__plan_printf(&x->b, " + u_%lld_%lld", (long long)l, (long long)s);
      remat__plan_printf(&x->b, " - y_%lld_%lld <= 0\n", (long long)l, (long long)s);
      if (G->recompute_bytes)
        remat__plan_printf(&x->b, " zx_%lld_%lld: %.17g z_%lld_%lld - X_%lld <= 0\n",
                           (long long)l, (long long)s, mem(x, G->recompute_bytes),
                           (long long)l, (long long)s, (long long)rank_of(x, s));
      if (mid(x, l) && G->middle_recompute_bytes)
        remat__plan_printf(&x->b, " ux_%lld_%lld: %.17g u_%lld_%lld - X_%lld <= 0\n",
                           (long long)l, (long long)s, mem(x, G->middle_recompute_bytes),
                           (long long)l, (long long)s, (long long)rank_of(x, s));
    }
  }
  for (int64_t l = 0; l < x->L; l++) {
    if (!x->of[l]->work_bytes) continue;
    for (int64_t s = lo(x, l); s <= hi(x, l); s++)
      remat__plan_printf(&x->b, " wy_%lld_%lld: %.17g y_%lld_%lld - X_%lld <= 0\n",
                         (long long)l, (long long)s, mem(x, x->of[l]->work_bytes),
                         (long long)l, (long long)s, (long long)rank_of(x, s));
  }
}

/* The memory terms of virtual stage vs's candidate layers: n micro-batches
 * in flight, kw kept for a deferred W (by a kept layer only). */
static void lp_chunk_memory(lp *x, terms *t, int64_t vs) {
  int64_t n = x->n[vs], kw = x->kw[vs];
  char v[64];
  for (int64_t l = vs; l <= vs + x->L - x->nv; l++) {
    const remat_plan_group *G = x->of[l];
    size_t w = remat__plan_state_bytes(x->pb, G, l, x->L);
    snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)vs);
    term(t, mem(x, w) + (double)n * mem(x, G->act_bytes) +
                (double)kw * mem(x, G->wgrad_bytes), v);
    if (G->recomputable) {
      snprintf(v, sizeof v, "z_%lld_%lld", (long long)l, (long long)vs);
      term(t, -(double)n * (mem(x, G->act_bytes) - mem(x, G->ckpt_bytes)) -
                  (double)kw * mem(x, G->wgrad_bytes), v);
    }
    if (mid(x, l)) {
      snprintf(v, sizeof v, "u_%lld_%lld", (long long)l, (long long)vs);
      term(t, -(double)n * (mem(x, G->act_bytes) - mem(x, G->middle_bytes)) -
                  (double)kw * mem(x, G->wgrad_bytes), v);
    }
  }
}

/* Stage s's memory row (its chunks' terms) and time row. */
static void lp_stage_rows(lp *x, int64_t s) {
  const remat_plan_problem *pb = x->pb;
  char v[64];
  remat__plan_printf(&x->b, " mem_%lld:", (long long)s);
  terms t = {&x->b, 0, 0};
  size_t fixed = 0;
  for (int64_t c = 0; c < x->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(pb->schedule, x->p, s, c);
    lp_chunk_memory(x, &t, vs);
    fixed += pb->stage_bytes + (vs < x->nv - 1 ? pb->boundary_bytes : 0);
  }
  snprintf(v, sizeof v, "X_%lld", (long long)s);
  term(&t, 1, v);
  double rhs = pb->memory[s] >= fixed ? mem(x, pb->memory[s] - fixed) : -1.0;
  remat__plan_printf(&x->b, " <= %.17g\n", rhs);
  remat__plan_printf(&x->b, " time_%lld:", (long long)s);
  t = (terms){&x->b, 0, 0};
  for (int64_t c = 0; c < x->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(pb->schedule, x->p, s, c);
    for (int64_t l = vs; l <= vs + x->L - x->nv; l++) time_terms(x, &t, l, vs);
  }
  term(&t, -1, "T");
  remat__plan_printf(&x->b, " <= 0\n");
}

static void lp_binaries(lp *x) {
  remat__plan_printf(&x->b, "Binary\n");
  for (int64_t l = 0; l < x->L; l++)
    for (int64_t s = lo(x, l); s <= hi(x, l); s++) {
      remat__plan_printf(&x->b, " y_%lld_%lld", (long long)l, (long long)s);
      if (x->of[l]->recomputable)
        remat__plan_printf(&x->b, " z_%lld_%lld", (long long)l, (long long)s);
      if (mid(x, l)) remat__plan_printf(&x->b, " u_%lld_%lld", (long long)l, (long long)s);
      remat__plan_printf(&x->b, "\n");
    }
  remat__plan_printf(&x->b, "End\n");
}

int remat_plan_format_lp(const remat_plan_problem *pb, char **out, remat_error *err) {
  *out = NULL;
  int rc = remat_plan_problem_check(pb, err);
  if (rc) return rc;
  if (pb->objective == REMAT_OBJ_SIMULATED)
    return remat__errorf(err, REMAT_EINVAL, "the simulated objective has no MIP form; export "
                         "with objective bottleneck or 1f1b");
  if (pb->min_blocks || pb->fixed_blocks)
    return remat__errorf(err, REMAT_EINVAL, "the MIP has no rows for min_blocks or a fixed "
                         "split; export it with min_blocks 0");
  if (pb->per_microbatch)
    return remat__errorf(err, REMAT_EINVAL, "the MIP chooses a policy per layer, not per "
                         "micro-batch; export it without --per-microbatch");
  lp x = {.pb = pb, .L = remat_plan_problem_layers(pb), .p = pb->stages, .m = pb->microbatches};
  x.v = remat_schedule_chunks(pb->schedule, pb->chunks);
  x.nv = x.p * x.v;
  if ((double)x.L * (double)x.nv > 4e6)
    return remat__errorf(err, REMAT_ERANGE,
                         "the LP for %lld layers on %lld stages would have %.3g binaries; the "
                         "export is meant for small instances",
                         (long long)x.L, (long long)x.nv, 2.0 * (double)x.L * (double)x.nv);
  remat__plan_inst in; /* the micro-batches each virtual stage holds */
  if ((rc = remat__plan_inst_build(pb, &in, err))) return rc;
  x.n = in.n;
  x.kw = in.kw;
  if ((rc = lp_layers(&x, err))) {
    remat__plan_inst_free(&in);
    return rc;
  }
  lp_scale(&x);
  remat__plan_printf(&x.b,
                     "\\ remat plan as a MIP: %lld layers, %lld stages, %lld micro-batches, "
                     "schedule %s, objective %s\n"
                     "\\ memory rows in units of %llu * 2^%d bytes\n",
                     (long long)x.L, (long long)x.p, (long long)x.m,
                     remat_plan_schedule_name(pb->schedule),
                     remat_plan_objective_name(pb->objective), (unsigned long long)x.g, x.k);
  lp_objective(&x);
  remat__plan_printf(&x.b, "\nSubject To\n");
  lp_placement_rows(&x);
  lp_choice_rows(&x);
  for (int64_t s = 0; s < x.p; s++) lp_stage_rows(&x, s);
  lp_binaries(&x);
  remat__free(x.of);
  remat__plan_inst_free(&in);
  if (x.b.oom || !x.b.s) {
    remat__free(x.b.s);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory writing the LP");
  }
  *out = x.b.s;
  return 0;
}
