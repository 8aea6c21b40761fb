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
 *   sum_l (w_l + n_s a_l) y_l_s - n_s (a_l - c_l) z_l_s - n_s (a_l - mb_l) u_l_s + X_s
 *       <= budget_s - stage_bytes
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

int remat_plan_format_lp(const remat_plan_problem *pb, char **out, remat_error *err) {
  *out = NULL;
  int rc = remat_plan_problem_check(pb, err);
  if (rc) return rc;
  int64_t L = remat_plan_problem_layers(pb), p = pb->stages, m = pb->microbatches;
  if ((double)L * (double)p > 4e6)
    return remat__errorf(err, REMAT_ERANGE,
                         "the LP for %lld layers on %lld stages would have %.3g binaries; the "
                         "export is meant for small instances",
                         (long long)L, (long long)p, 2.0 * (double)L * (double)p);
  const remat_plan_group **of = remat__malloc((size_t)L * sizeof *of);
  if (!of) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int64_t l = 0;
  uint64_t g = pb->stage_bytes;
  for (int64_t k = 0; k < pb->num_groups; k++) {
    const remat_plan_group *G = &pb->groups[k];
    g = gcd(g, G->act_bytes);
    g = gcd(g, G->ckpt_bytes);
    g = gcd(g, G->state_bytes);
    g = gcd(g, G->recompute_bytes);
    g = gcd(g, G->work_bytes);
    if (G->recomputable && G->middle) {
      g = gcd(g, G->middle_bytes);
      g = gcd(g, G->middle_recompute_bytes);
    }
    for (int64_t c = 0; c < G->count; c++) of[l++] = G;
  }
  if (g == 0) g = 1;
  /* A further power of two keeps the memory rows' numbers near 1000: with
   * byte-sized coefficients (1e9 and more) glpsol's tolerances give wrong
   * optima. Dividing by 2^k is exact in binary floating point. */
  double top = 1;
  for (int64_t s = 0; s < p; s++)
    if (pb->memory[s] > pb->stage_bytes && (double)((pb->memory[s] - pb->stage_bytes) / g) > top)
      top = (double)((pb->memory[s] - pb->stage_bytes) / g);
  int k = 0;
  while (ldexp(top, -k) > 2048) k++;
#define MEM(bytes) ldexp((double)((bytes) / g), -k)
#define MID(l) (of[l]->recomputable && of[l]->middle)
  remat__plan_buf b = {0};
  char v[64];
  remat__plan_printf(&b,
                     "\\ remat plan as a MIP: %lld layers, %lld stages, %lld micro-batches, "
                     "schedule %s, objective %s\n"
                     "\\ memory rows in units of %llu * 2^%d bytes\n",
                     (long long)L, (long long)p, (long long)m, remat_plan_schedule_name(pb->schedule),
                     remat_plan_objective_name(pb->objective), (unsigned long long)g, k);
#define LO(l) ((l) - (L - p) > 0 ? (l) - (L - p) : 0)
#define HI(l) ((l) < p - 1 ? (l) : p - 1)
  remat__plan_printf(&b, "Minimize\n obj:");
  terms t = {&b, 0, 0};
  if (pb->objective == REMAT_OBJ_1F1B) {
    for (l = 0; l < L; l++)
      for (int64_t s = LO(l); s <= HI(l); s++) {
        snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
        term(&t, of[l]->fwd + of[l]->bwd, v);
        if (of[l]->recomputable) {
          snprintf(v, sizeof v, "z_%lld_%lld", (long long)l, (long long)s);
          term(&t, of[l]->recompute, v);
        }
        if (MID(l)) {
          snprintf(v, sizeof v, "u_%lld_%lld", (long long)l, (long long)s);
          term(&t, of[l]->middle_recompute, v);
        }
      }
    if (m > 1) term(&t, (double)(m - 1), "T");
    if (!t.any) term(&t, 1, "T"); /* a zero objective still needs a term */
  } else {
    term(&t, 1, "T");
  }
  remat__plan_printf(&b, "\nSubject To\n");
  for (l = 0; l < L; l++) {
    remat__plan_printf(&b, " one_%lld:", (long long)l);
    t = (terms){&b, 0, 0};
    for (int64_t s = LO(l); s <= HI(l); s++) {
      snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
      term(&t, 1, v);
    }
    remat__plan_printf(&b, " = 1\n");
  }
  remat__plan_printf(&b, " first: y_0_0 = 1\n last: y_%lld_%lld = 1\n", (long long)(L - 1),
                     (long long)(p - 1));
  for (l = 0; p > 1 && l + 1 < L; l++) {
    for (int side = 0; side < 2; side++) {
      remat__plan_printf(&b, " %s_%lld:", side ? "step" : "order", (long long)l);
      t = (terms){&b, 0, 0};
      for (int64_t s = LO(l + 1); s <= HI(l + 1); s++) {
        snprintf(v, sizeof v, "y_%lld_%lld", (long long)(l + 1), (long long)s);
        term(&t, (double)s, v);
      }
      for (int64_t s = LO(l); s <= HI(l); s++) {
        snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
        term(&t, -(double)s, v);
      }
      remat__plan_printf(&b, side ? " <= 1\n" : " >= 0\n");
    }
  }
  for (l = 0; l < L; l++) {
    if (!of[l]->recomputable) continue;
    for (int64_t s = LO(l); s <= HI(l); s++) {
      remat__plan_printf(&b, " zy_%lld_%lld: z_%lld_%lld", (long long)l, (long long)s,
                         (long long)l, (long long)s);
      if (MID(l)) remat__plan_printf(&b, " + u_%lld_%lld", (long long)l, (long long)s);
      remat__plan_printf(&b, " - y_%lld_%lld <= 0\n", (long long)l, (long long)s);
      if (of[l]->recompute_bytes)
        remat__plan_printf(&b, " zx_%lld_%lld: %.17g z_%lld_%lld - X_%lld <= 0\n", (long long)l,
                           (long long)s, MEM(of[l]->recompute_bytes), (long long)l,
                           (long long)s, (long long)s);
      if (MID(l) && of[l]->middle_recompute_bytes)
        remat__plan_printf(&b, " ux_%lld_%lld: %.17g u_%lld_%lld - X_%lld <= 0\n", (long long)l,
                           (long long)s, MEM(of[l]->middle_recompute_bytes), (long long)l,
                           (long long)s, (long long)s);
    }
  }
  for (l = 0; l < L; l++) {
    if (!of[l]->work_bytes) continue;
    for (int64_t s = LO(l); s <= HI(l); s++)
      remat__plan_printf(&b, " wy_%lld_%lld: %.17g y_%lld_%lld - X_%lld <= 0\n", (long long)l,
                         (long long)s, MEM(of[l]->work_bytes), (long long)l, (long long)s,
                         (long long)s);
  }
  for (int64_t s = 0; s < p; s++) {
    int64_t n = pb->schedule == REMAT_SCHED_GPIPE ? m : (p - s < m ? p - s : m);
    remat__plan_printf(&b, " mem_%lld:", (long long)s);
    t = (terms){&b, 0, 0};
    for (l = s; l <= s + L - p; l++) {
      snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
      term(&t, MEM(of[l]->state_bytes) + (double)n * MEM(of[l]->act_bytes), v);
      if (of[l]->recomputable) {
        snprintf(v, sizeof v, "z_%lld_%lld", (long long)l, (long long)s);
        term(&t, -(double)n * (MEM(of[l]->act_bytes) - MEM(of[l]->ckpt_bytes)), v);
      }
      if (MID(l)) {
        snprintf(v, sizeof v, "u_%lld_%lld", (long long)l, (long long)s);
        term(&t, -(double)n * (MEM(of[l]->act_bytes) - MEM(of[l]->middle_bytes)), v);
      }
    }
    snprintf(v, sizeof v, "X_%lld", (long long)s);
    term(&t, 1, v);
    size_t fixed = pb->stage_bytes + (s < p - 1 ? pb->boundary_bytes : 0);
    double rhs = pb->memory[s] >= fixed ? MEM(pb->memory[s] - fixed) : -1.0;
    remat__plan_printf(&b, " <= %.17g\n", rhs);
    remat__plan_printf(&b, " time_%lld:", (long long)s);
    t = (terms){&b, 0, 0};
    for (l = s; l <= s + L - p; l++) {
      snprintf(v, sizeof v, "y_%lld_%lld", (long long)l, (long long)s);
      term(&t, of[l]->fwd + of[l]->bwd, v);
      if (of[l]->recomputable) {
        snprintf(v, sizeof v, "z_%lld_%lld", (long long)l, (long long)s);
        term(&t, of[l]->recompute, v);
      }
      if (MID(l)) {
        snprintf(v, sizeof v, "u_%lld_%lld", (long long)l, (long long)s);
        term(&t, of[l]->middle_recompute, v);
      }
    }
    term(&t, -1, "T");
    remat__plan_printf(&b, " <= 0\n");
  }
  remat__plan_printf(&b, "Binary\n");
  for (l = 0; l < L; l++)
    for (int64_t s = LO(l); s <= HI(l); s++) {
      remat__plan_printf(&b, " y_%lld_%lld", (long long)l, (long long)s);
      if (of[l]->recomputable) remat__plan_printf(&b, " z_%lld_%lld", (long long)l, (long long)s);
      if (MID(l)) remat__plan_printf(&b, " u_%lld_%lld", (long long)l, (long long)s);
      remat__plan_printf(&b, "\n");
    }
  remat__plan_printf(&b, "End\n");
#undef LO
#undef HI
#undef MEM
#undef MID
  remat__free(of);
  if (b.oom || !b.s) {
    remat__free(b.s);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory writing the LP");
  }
  *out = b.s;
  return 0;
}
