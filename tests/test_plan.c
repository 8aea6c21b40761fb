/* test_plan.c: the pipeline planner against brute force: ColossalAI #5509's
 * example, hundreds of small random instances (both objectives, both
 * schedules, mixed layer kinds, work bytes, per-stage budgets, infeasible
 * ones, and layers with a third choice, the middle policy) compared with
 * exhaustive search over every partition and every choice of every layer,
 * the per-stage search engine against enumeration of every choice, the
 * schedule simulator against hand-computed and closed-form makespans, and
 * malformed problems. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"
#include "plan_brute.h"
#include "test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }

/* ------------------------------------------------------------ seed */

static const char *seed_json =
    "{ \"stages\": 4, \"microbatches\": 8, \"schedule\": \"1f1b\", \"objective\": \"bottleneck\",\n"
    "  \"memory\": 20e9,\n"
    "  \"layers\": [ {\"count\": 32, \"fwd\": 1, \"bwd\": 2, \"recompute\": 1,\n"
    "               \"act_bytes\": 1.25e9, \"ckpt_bytes\": 0.125e9, \"state_bytes\": 0} ] }";

static void test_seed(void) {
  remat_plan_problem pb;
  remat_error err;
  int rc = remat_plan_problem_parse_json(&pb, seed_json, strlen(seed_json), &err);
  CHECK(rc == 0);
  if (rc) {
    fprintf(stderr, "%s\n", err.msg);
    return;
  }
  remat_plan plan;
  rc = remat_plan_solve(&pb, &plan, &err);
  CHECK(rc == 0);
  if (rc) {
    fprintf(stderr, "%s\n", err.msg);
    remat_plan_problem_free(&pb);
    return;
  }
  int64_t layers[4] = {7, 8, 8, 9}, ckpt[4] = {4, 3, 0, 0};
  double mem[4] = {17e9, 19.875e9, 20e9, 11.25e9}, time[4] = {25, 27, 24, 27};
  for (int s = 0; s < 4; s++) {
    CHECK(plan.stages[s].num_layers == layers[s]);
    CHECK(plan.stages[s].num_recomputed == ckpt[s]);
    CHECK((double)plan.stages[s].memory_bytes == mem[s]);
    CHECK(plan.stages[s].time == time[s]);
    CHECK(plan.stages[s].microbatches_held == 4 - s);
  }
  CHECK(plan.bottleneck_time == 27);
  CHECK(plan.objective_value == 27);
  CHECK(plan.baseline_objective == 24);
  CHECK(plan.slowdown == 1.125);
  CHECK(plan.total_recomputed == 7);
  CHECK(plan.iteration_time == 25 + 27 + 24 + 27 + 7 * 27);
  CHECK(plan.stages[0].recomputed[0] == 0 && plan.stages[1].recomputed[0] == 7);
  remat_plan_free(&plan);

  /* 1f1b objective on the same instance: the brute force is out of reach at
   * 32 layers, so check against the evaluation of every 4-way split with the
   * fewest recomputed layers per stage (identical layers: a count suffices). */
  pb.objective = REMAT_OBJ_1F1B;
  rc = remat_plan_solve(&pb, &plan, &err);
  CHECK(rc == 0);
  double best = 1e300;
  for (int a = 1; a <= 29; a++)
    for (int b = 1; a + b <= 30; b++)
      for (int c = 1; a + b + c <= 31; c++) {
        int d = 32 - a - b - c, n[4] = {a, b, c, d};
        double sum = 0, mx = 0;
        int ok = 1;
        for (int s = 0; s < 4 && ok; s++) {
          int k = 0, held = 4 - s;
          while (k <= n[s] && held * ((n[s] - k) * 1.25 + k * 0.125) > 20.0 + 1e-9) k++;
          if (k > n[s]) ok = 0;
          double t = 3.0 * n[s] + k;
          sum += t;
          if (t > mx) mx = t;
        }
        if (ok && sum + 7 * mx < best) best = sum + 7 * mx;
      }
  CHECK(rc == 0 && plan.objective_value == best);
  if (!rc) remat_plan_free(&plan);
  remat_plan_problem_free(&pb);
}

/* ------------------------------------------------------------ random */

/* A random small problem: groups of identical layers and single layers,
 * integer or half-integer times, byte counts on a coarse grid so that ties
 * are common, budgets near the interesting range. With work, the groups also
 * get work bytes y, by problem: all 0, below or between the scratch sizes,
 * above every scratch size, or a mix (and scratch is more common). With
 * middle, most recomputable groups also get the middle policy: stored bytes
 * between c and a (sometimes at or above a: useless), cheaper or dearer than
 * recomputing, with scratch below, equal to or above the recompute's. */
/* With random_schedules, the schedule is 1f1b, zb-h1, interleaved (2 or 3
 * chunks, m a multiple of p) or zbv, and layers get weight-gradient times
 * and bytes kept for a deferred W. */
static int random_schedules;

static void random_schedule(remat_plan_problem *pb, int64_t L, int64_t *p) {
  static const int scheds[] = {REMAT_SCHED_1F1B, REMAT_SCHED_ZBH1, REMAT_SCHED_INTERLEAVED,
                               REMAT_SCHED_ZBV};
  int sch = scheds[rnd(0, 3)];
  int64_t v = sch == REMAT_SCHED_INTERLEAVED ? rnd(2, 3) : sch == REMAT_SCHED_ZBV ? 2 : 1;
  if (L / v < 1) sch = REMAT_SCHED_ZBH1, v = 1;
  *p = rnd(1, L / v < 4 ? L / v : 4);
  pb->schedule = sch;
  pb->chunks = v;
}

static void random_problem(remat_plan_problem *pb, int maxL, int work, int middle) {
  int64_t L = rnd(1, maxL);
  int64_t ng = 0, left = L, counts[32];
  while (left > 0) {
    int64_t c = rnd(0, 2) == 0 ? rnd(1, left) : 1;
    counts[ng++] = c;
    left -= c;
  }
  int64_t p = rnd(1, L < 4 ? L : 4);
  remat_plan_problem sp = {0};
  if (random_schedules) random_schedule(&sp, L, &p);
  remat_error err;
  if (remat_plan_problem_init(pb, p, ng, &err)) abort();
  pb->microbatches = rnd(1, 6);
  pb->schedule = rnd(0, 3) == 0 ? REMAT_SCHED_GPIPE : REMAT_SCHED_1F1B;
  if (random_schedules) {
    pb->schedule = sp.schedule;
    pb->chunks = sp.chunks;
    if (pb->schedule == REMAT_SCHED_INTERLEAVED) pb->microbatches = p * rnd(1, 2);
  }
  pb->objective = rnd(0, 1) ? REMAT_OBJ_1F1B : REMAT_OBJ_BOTTLENECK;
  int kinds = (int)rnd(1, 3); /* how varied the layers are */
  const int64_t unit = 1000;
  double maxkept = 0;
  for (int64_t g = 0; g < ng; g++) {
    remat_plan_group *G = &pb->groups[g];
    int k = (int)rnd(0, kinds - 1);
    G->count = counts[g];
    G->fwd = (double)rnd(0, 2) + (rnd(0, 4) == 0 ? 0.5 : 0);
    G->bwd = (double)rnd(0, 4);
    G->recompute = (double)rnd(0, 3) + (rnd(0, 4) == 0 ? 0.5 : 0);
    G->act_bytes = (size_t)(rnd(1, 8 + 4 * k) * unit);
    G->ckpt_bytes = (size_t)(rnd(0, 3) * unit);
    if (rnd(0, 9) == 0) G->ckpt_bytes = G->act_bytes + unit; /* recomputing is useless */
    G->state_bytes = (size_t)(rnd(0, 3) * unit);
    G->recompute_bytes = rnd(0, 2) ? 0 : (size_t)(rnd(1, 6) * unit);
    G->recomputable = rnd(0, 7) != 0;
    if (random_schedules) {
      G->wgrad = G->bwd * (double)rnd(0, 2) / 2;
      G->wgrad_bytes = (size_t)(rnd(0, 3) * unit);
    }
    maxkept += (double)G->count * (double)(G->state_bytes + G->act_bytes * 3 + G->wgrad_bytes);
  }
  if (work) {
    int mode = (int)rnd(0, 3); /* 0: y = 0, 1: y among the x, 2: y above all x, 3: mixed */
    for (int64_t g = 0; g < ng; g++) {
      remat_plan_group *G = &pb->groups[g];
      if (rnd(0, 1)) G->recompute_bytes = (size_t)(rnd(0, 6) * unit);
      int m = mode == 3 ? (int)rnd(0, 2) : mode;
      G->work_bytes = m == 0   ? 0
                      : m == 1 ? (size_t)(rnd(0, 6) * unit)
                               : (size_t)(rnd(7, 10) * unit);
      maxkept += (double)G->work_bytes;
    }
  }
  for (int64_t g = 0; middle && g < ng; g++) {
    remat_plan_group *G = &pb->groups[g];
    if (!G->recomputable || rnd(0, 3) == 0) continue;
    G->middle = 1;
    int64_t a = (int64_t)G->act_bytes / unit, c = (int64_t)G->ckpt_bytes / unit;
    G->middle_bytes = (size_t)(rnd(c < a ? c : a, a) * unit);
    if (rnd(0, 9) == 0) G->middle_bytes = G->act_bytes + (size_t)unit; /* useless */
    if (rnd(0, 1)) G->recompute += 2; /* recomputing dear: the middle policy matters */
    G->middle_recompute = rnd(0, 3) == 0 ? G->recompute : (double)rnd(0, 2) * 0.5;
    G->middle_recompute_bytes =
        rnd(0, 2) == 0 ? G->recompute_bytes : (size_t)(rnd(0, 4) * unit);
    maxkept += (double)G->middle_recompute_bytes;
  }
  pb->stage_bytes = rnd(0, 3) == 0 ? (size_t)(rnd(1, 3) * unit) : 0;
  pb->boundary_bytes = rnd(0, 2) == 0 ? (size_t)(rnd(1, 4) * unit) : 0;
  /* budgets: a fraction of the memory of everything kept on one stage
   * (tighter with middle policies, so that most plans recompute) */
  double top = maxkept + (double)pb->stage_bytes + (double)pb->boundary_bytes;
  if (middle) top *= 0.5;
  if (rnd(0, 2) == 0) {
    pb->uniform_memory = 0;
    for (int64_t s = 0; s < p; s++) pb->memory[s] = (size_t)(top * (double)rnd(5, 100) / 100.0);
  } else {
    remat_plan_problem_set_memory(pb, (size_t)(top * (double)rnd(5, 100) / 100.0));
  }
}

/* A problem the solver got wrong, on standard error, to rebuild by hand. */
static void dump(const remat_plan_problem *pb, int it) {
  fprintf(stderr, "instance %d: p=%lld m=%lld schedule %d objective %d stage_bytes %zu "
          "boundary_bytes %zu, budgets", it, (long long)pb->stages, (long long)pb->microbatches,
          pb->schedule, pb->objective, pb->stage_bytes, pb->boundary_bytes);
  for (int64_t s = 0; s < pb->stages; s++) fprintf(stderr, " %zu", pb->memory[s]);
  fprintf(stderr, "\n");
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    fprintf(stderr, "  %lld x f %g b %g r %g a %zu c %zu w %zu x %zu y %zu rec %d", (long long)G->count,
            G->fwd, G->bwd, G->recompute, G->act_bytes, G->ckpt_bytes, G->state_bytes,
            G->recompute_bytes, G->work_bytes, G->recomputable);
    if (G->middle)
      fprintf(stderr, " middle rm %g mb %zu xm %zu", G->middle_recompute, G->middle_bytes,
              G->middle_recompute_bytes);
    fprintf(stderr, "\n");
  }
}

/* min_blocks 1 and a fixed split of blocks: the solver (through the fused
 * problem of blocks.c) against brute force over the partitions whose every
 * virtual stage holds a block (and, fixed, exactly the given blocks). The
 * layers that cannot recompute lie at the ends, as an embedding and a head. */
static void test_min_blocks(int count, int fixed_split) {
  int solved = 0, infeasible = 0, binding = 0, failures0 = test_failures;
  for (int it = 0; it < count; it++) {
    remat_plan_problem pb;
    random_problem(&pb, 9, it % 2, it % 3 == 0);
    int64_t ng = pb.num_groups, blocks = 0, v = remat_schedule_chunks(pb.schedule, pb.chunks);
    for (int64_t g = 0; g < ng; g++) {
      pb.groups[g].recomputable = g > 0 && g < ng - 1;
      if (!pb.groups[g].recomputable) pb.groups[g].middle = 0;
      /* as remat's embedding and head: no W record (blocks.c) */
      if (!pb.groups[g].recomputable) pb.groups[g].wgrad_bytes = 0;
      blocks += pb.groups[g].recomputable ? pb.groups[g].count : 0;
    }
    int64_t nv = pb.stages * v, fixed[24];
    if (blocks < nv || (fixed_split && v < 2)) {
      remat_plan_problem_free(&pb);
      continue;
    }
    remat__plan_inst in;
    remat_error err;
    CHECK(remat__plan_inst_build(&pb, &in, &err) == 0);
    int64_t bo = 0, bc = 0, bm = 0, uo = 0, uc = 0, um = 0;
    int free_rc = plan_brute(&in, &uo, &uc, &um); /* with no blocks asked for */
    if (fixed_split) { /* a random split of the blocks, each stage one at least */
      int64_t left = blocks - nv;
      for (int64_t s = 0; s < nv; s++) {
        int64_t extra = s == nv - 1 ? left : rnd(0, left);
        fixed[s] = 1 + extra;
        left -= extra;
      }
      pb.fixed_blocks = remat__malloc((size_t)nv * sizeof *pb.fixed_blocks);
      memcpy(pb.fixed_blocks, fixed, (size_t)nv * sizeof *fixed);
    }
    pb.min_blocks = 1;
    int brc = plan_brute_blocks(&in, 1, fixed_split ? fixed : NULL, &bo, &bc, &bm);
    remat_plan plan;
    int rc = remat_plan_solve(&pb, &plan, &err);
    CHECK(rc == brc);
    if (rc == 0 && brc == 0) {
      solved++;
      CHECK((int64_t)llround(plan.objective_value / in.q) == bo);
      CHECK(plan.total_recomputed == bc && (int64_t)plan.max_memory_bytes == bm);
      for (int64_t s = 0; s < nv; s++) {
        int64_t b = 0;
        for (int64_t l = plan.chunk_first[s]; l < plan.chunk_first[s] + plan.chunk_layers[s]; l++)
          b += in.recomp[l];
        CHECK(b >= 1 && (!fixed_split || b == fixed[s]));
      }
      binding += free_rc != 0 || uo != bo || uc != bc || um != bm;
    } else if (rc == REMAT_EINFEASIBLE && brc == REMAT_EINFEASIBLE) {
      infeasible++;
    }
    if (rc == 0 || rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
    if (rc != brc) dump(&pb, it);
    remat__plan_inst_free(&in);
    remat_plan_problem_free(&pb);
  }
  printf("min_blocks 1%s: %d solved (%d of them other than with no blocks asked for), %d "
         "infeasible, %d failed checks\n", fixed_split ? " on fixed splits" : "", solved, binding,
         infeasible, test_failures - failures0);
  CHECK(solved > 0 && infeasible > 0 && binding > 0);
}

static void test_random(int count, int maxL, int work, int middle) {
  int feasible = 0, infeasible = 0, with_work = 0, with_middle = 0, recomputing = 0;
  int failures0 = test_failures;
  for (int it = 0; it < count; it++) {
    remat_plan_problem pb;
    random_problem(&pb, maxL, work, middle);
    int64_t mids = 0;
    for (int64_t g = 0; g < pb.num_groups; g++)
      if (pb.groups[g].work_bytes) {
        with_work++;
        break;
      }
    remat__plan_inst in;
    remat_error err;
    int rc = remat__plan_inst_build(&pb, &in, &err);
    CHECK(rc == 0);
    if (rc) {
      fprintf(stderr, "instance %d: %s\n", it, err.msg);
      remat_plan_problem_free(&pb);
      continue;
    }
    int64_t bo = 0, bc = 0, bm = 0, so = 0, sc = 0, sm = 0;
    int brc = plan_brute(&in, &bo, &bc, &bm);
    int64_t bounds[16];
    uint8_t rec[32];
    int src = remat__plan_solve_inst(&in, &so, &sc, &sm, bounds, rec, &err);
    CHECK(brc == src);
    if (brc != src || (brc == 0 && (bo != so || bc != sc || bm != sm))) dump(&pb, it);
    if (brc == 0 && src == 0) {
      feasible++;
      for (int64_t l = 0; l < in.L; l++) mids += rec[l] == REMAT_MIDDLE;
      with_middle += mids > 0;
      recomputing += sc > 0;
      CHECK(bo == so);
      CHECK(bc == sc);
      CHECK(bm == sm);
      if (bo != so || bc != sc || bm != sm)
        fprintf(stderr, "instance %d (L=%lld p=%lld m=%lld %s %s): brute (%lld,%lld,%lld) solver (%lld,%lld,%lld)\n",
                it, (long long)in.L, (long long)in.p, (long long)in.m,
                remat_plan_schedule_name(in.schedule), remat_plan_objective_name(in.objective),
                (long long)bo, (long long)bc, (long long)bm, (long long)so, (long long)sc,
                (long long)sm);
      /* the arrangement it returns really fits (one chunk per stage) */
      for (int64_t s = 0; s < in.nv; s++) CHECK(bounds[s + 1] > bounds[s]);
      for (int64_t s = 0; in.v == 1 && s < in.p; s++) {
        int64_t mem = in.stage_bytes + (s < in.p - 1 ? in.boundary_bytes : 0), X = 0;
        for (int64_t l = bounds[s]; l < bounds[s + 1]; l++) {
          int full = rec[l] == REMAT_RECOMPUTE, mid = rec[l] == REMAT_MIDDLE;
          mem += in.w[l] + in.n[s] * (full ? in.c[l] : mid ? in.mb[l] : in.a[l]) +
                 (rec[l] ? 0 : in.kw[s] * in.u[l]);
          if (in.y[l] > X) X = in.y[l];
          if (full && in.x[l] > X) X = in.x[l];
          if (mid && in.xm[l] > X) X = in.xm[l];
          CHECK(rec[l] <= REMAT_MIDDLE && (!rec[l] || in.recomp[l]) && (!mid || in.mid[l]));
        }
        CHECK(bounds[s + 1] > bounds[s]);
        CHECK(mem + X <= in.budget[s]);
      }
    } else if (brc == REMAT_EINFEASIBLE && src == REMAT_EINFEASIBLE) {
      infeasible++;
      /* the reported smallest extra bytes is exact: fits with it, not with one less */
      remat_plan plan;
      int prc = remat_plan_solve(&pb, &plan, &err);
      CHECK(prc == REMAT_EINFEASIBLE);
      if (prc == REMAT_EINFEASIBLE) {
        int64_t delta = (int64_t)plan.min_extra_bytes;
        CHECK(delta > 0);
        for (int64_t s = 0; s < in.p; s++) in.budget[s] += delta;
        CHECK(plan_brute(&in, &bo, &bc, &bm) == 0);
        for (int64_t s = 0; s < in.p; s++) in.budget[s] -= 1;
        CHECK(plan_brute(&in, &bo, &bc, &bm) == REMAT_EINFEASIBLE);
        for (int64_t s = 0; s < in.p; s++) {
          CHECK(plan.stages[s].memory_bytes <= pb.memory[s] + (size_t)delta);
          CHECK(plan.stages[s].num_layers >= in.v);
        }
        remat_plan_free(&plan);
      }
    } else if (src != 0 && src != REMAT_EINFEASIBLE) {
      fprintf(stderr, "instance %d: %s\n", it, err.msg);
    }
    remat__plan_inst_free(&in);
    remat_plan_problem_free(&pb);
  }
  printf("random (L <= %d%s%s%s): %d instances (%d with work bytes), %d feasible (%d of them "
         "recomputing, %d with middle layers), %d infeasible, %d failed checks\n",
         maxL, work ? ", work bytes" : "", middle ? ", middle policies" : "",
         random_schedules ? ", 1f1b/zb-h1/interleaved/zbv" : "", count, with_work,
         feasible, recomputing, with_middle, infeasible, test_failures - failures0);
}

/* The simulated objective on random problems of every schedule: the plan's
 * objective is its simulated makespan, and no larger than the makespan of
 * the 1f1b objective's plan (whose partition, with each stage's least-time
 * choice, the simulated search also weighs). */
static void test_simulated(int count) {
  int compared = 0, shorter = 0, failures0 = test_failures;
  random_schedules = 1;
  for (int it = 0; it < count; it++) {
    remat_plan_problem pb;
    random_problem(&pb, 7, it % 2, it % 3 == 0);
    remat_plan a, b;
    remat_error err;
    pb.objective = REMAT_OBJ_SIMULATED;
    int ra = remat_plan_solve(&pb, &a, &err);
    pb.objective = REMAT_OBJ_1F1B;
    int rb = remat_plan_solve(&pb, &b, &err);
    CHECK((ra == 0) == (rb == 0));
    if (ra == 0 && rb == 0) {
      compared++;
      CHECK(a.objective_value == a.simulated_time && a.simulated_time >= 0);
      CHECK(a.simulated_time <= b.simulated_time * (1 + 1e-12));
      shorter += a.simulated_time < b.simulated_time * (1 - 1e-12);
      if (a.simulated_time > b.simulated_time * (1 + 1e-12)) dump(&pb, it);
    }
    if (ra == 0 || ra == REMAT_EINFEASIBLE) remat_plan_free(&a);
    if (rb == 0 || rb == REMAT_EINFEASIBLE) remat_plan_free(&b);
    remat_plan_problem_free(&pb);
  }
  random_schedules = 0;
  printf("simulated objective: %d random problems, %d feasible, %d shorter than the 1f1b "
         "objective's plan, %d failed checks\n", count, compared, shorter,
         test_failures - failures0);
}

/* ------------------------------------------------------------ time limits */

/* What a time limit falls back to: on small random problems (with work bytes
 * half the time) the bounded search's plan must fit and its lower bound must
 * not exceed the optimum that brute force finds, in every window. */
static void test_bounds(int count) {
  int tight = 0, checked = 0, failures0 = test_failures;
  for (int it = 0; it < count; it++) {
    remat_plan_problem pb;
    random_problem(&pb, it % 4 < 2 ? 9 : 7, it % 2, it % 4 >= 2);
    remat__plan_inst in;
    remat_error err;
    if (remat__plan_inst_build(&pb, &in, &err)) abort();
    int64_t bo, bc, bm;
    if (plan_brute(&in, &bo, &bc, &bm) == 0) {
      remat__plan_solver S;
      CHECK(remat__plan_fit_init(&S, &in, &err) == 0);
      S.delta = 0;
      /* the window: everything, or the exact search's first one if a plan fits there */
      int64_t TF = remat__plan_minmax_F(&in);
      S.Tcap = it % 3 == 0 ? REMAT__PLAN_INF : TF + TF / 4 + 1;
      if (!remat__plan_reach(&S)) {
        S.Tcap = REMAT__PLAN_INF;
        CHECK(remat__plan_reach(&S));
      }
      int64_t bounds[8], lower, obj;
      uint8_t rec[16];
      CHECK(remat__plan_anytime(&S, 0, bounds, rec, &lower) == 0);
      remat__plan_measure(&in, bounds, rec, &obj, NULL, NULL);
      remat_plan plan;
      CHECK(remat__plan_fill(&in, bounds, rec, &plan, &err) == 0);
      CHECK(plan.feasible);
      remat_plan_free(&plan);
      CHECK(lower <= bo && bo <= obj);
      if (lower > bo || bo > obj)
        fprintf(stderr, "bounds %d: lower %lld, optimum %lld, plan %lld\n", it, (long long)lower,
                (long long)bo, (long long)obj);
      tight += lower == bo && obj == bo;
      checked++;
      remat__plan_fit_free(&S);
    }
    remat__plan_inst_free(&in);
    remat_plan_problem_free(&pb);
  }
  printf("bounds (L <= 9, half with middle policies): %d feasible problems, %d with lower bound "
         "= plan = optimum, %d failed checks\n",
         checked, tight, test_failures - failures0);
}

/* The adversarial case: thousands of all-different layers with recompute
 * scratch on many stages, where the exact search takes far longer than the
 * limit. The solve must return within the limit and a margin, with a plan
 * that fits and 0 <= gap, lower bound <= objective. The margin is what a
 * solve with no time at all takes (expanding the problem, one time-free pass,
 * filling the plan), doubled, plus 0.2 s: this build may be a sanitizer's. */
static void test_time_limit(void) {
  remat_plan_problem pb;
  remat_error err;
  const int64_t L = 3000, p = 96;
  if (remat_plan_problem_init(&pb, p, L, &err)) abort();
  pb.microbatches = 2 * p;
  double stage0 = 0;
  for (int64_t l = 0; l < L; l++) {
    remat_plan_group *G = &pb.groups[l];
    G->fwd = (double)rnd(100, 300) / 100;
    G->bwd = 2 * G->fwd;
    G->recompute = G->fwd;
    G->act_bytes = (size_t)rnd(500, 2000) << 20;
    G->ckpt_bytes = G->act_bytes / (size_t)rnd(5, 20);
    G->recompute_bytes = (size_t)rnd(0, 1000) * ((G->act_bytes - G->ckpt_bytes) / 1000);
    G->work_bytes = l % 3 ? 0 : (size_t)rnd(0, 1000) << 20;
    G->state_bytes = (size_t)rnd(100, 500) << 20;
    if (l < L / p) stage0 += (double)G->state_bytes + (double)p * (double)G->act_bytes;
  }
  remat_plan_problem_set_memory(&pb, (size_t)(stage0 / 2));
  remat_plan plan;
  pb.time_limit = 1e-9;
  double t0 = remat__now();
  CHECK(remat_plan_solve(&pb, &plan, &err) == 0);
  double least = remat__now() - t0;
  CHECK(!plan.optimal && plan.feasible && plan.lower_bound <= plan.objective_value);
  remat_plan_free(&plan);
  for (int obj = 0; obj < 2; obj++) {
    pb.objective = obj;
    pb.time_limit = 0.3;
    t0 = remat__now();
    int rc = remat_plan_solve(&pb, &plan, &err);
    double took = remat__now() - t0;
    CHECK(rc == 0);
    if (rc) {
      fprintf(stderr, "%s\n", err.msg);
      continue;
    }
    CHECK(took < pb.time_limit + 2 * least + 0.2);
    CHECK(plan.feasible);
    CHECK(plan.gap >= 0 && plan.lower_bound <= plan.objective_value);
    CHECK(plan.lower_bound >= plan.baseline_objective);
    printf("time limit %.1f s, %lld layers on %lld stages, %s: %.3f s (%.3f s with no time), %s, "
           "objective %.6g, lower bound %.6g, gap %.3g%%\n",
           pb.time_limit, (long long)L, (long long)p, remat_plan_objective_name(obj), took, least,
           plan.optimal ? "optimal" : "not proven optimal", plan.objective_value,
           plan.lower_bound, 100 * plan.gap);
    remat_plan_free(&plan);
  }
  remat_plan_problem_free(&pb);
}

/* ------------------------------------------------------------ stage search */

/* The Pareto engine against every choice of random items, each with one or
 * two options of which a choice takes at most one. */
static void test_knap(int count) {
  for (int it = 0; it < count; it++) {
    int n = (int)rnd(1, 8), levels = (int)rnd(0, 1), no[8];
    int64_t d[8][2], r[8][2], x[8][2];
    for (int k = 0; k < n; k++) {
      no[k] = rnd(0, 2) ? 1 : 2;
      for (int q = 0; q < no[k]; q++) {
        d[k][q] = rnd(1, 9);
        r[k][q] = rnd(0, 5);
        x[k][q] = rnd(0, 2) ? rnd(0, 3) * 2 : 0;
      }
    }
    remat__knap kn;
    remat__knap_init(&kn, levels, 1, 0);
    for (int k = 0; k < n; k++) {
      remat__kopt o[2];
      for (int q = 0; q < no[k]; q++) o[q] = (remat__kopt){d[k][q], r[k][q], x[k][q], 2 * k + q};
      CHECK(remat__knap_insert(&kn, o, no[k]) == 0);
    }
    int64_t mult = rnd(1, 4), E = rnd(1, 60), cap = rnd(0, 15);
    /* the stage's floor: none, between the scratch sizes, or above them all */
    int64_t Y = rnd(0, 2) == 0 ? 0 : rnd(0, 8);
    /* brute force: choice ch[k] = 0 (not taken) or 1 + option, in mixed radix */
    int have1 = 0, have2 = 0;
    int64_t b1[3] = {0}, b2[2] = {0};
    int ch[8] = {0};
    for (;;) {
      int k = 0;
      while (k < n && ++ch[k] > no[k]) ch[k++] = 0;
      if (k == n) break; /* back to nothing taken: all seen */
      int64_t D = 0, R = 0, X = 0, c = 0;
      for (int q = 0; q < n; q++) {
        if (!ch[q]) continue;
        int o = ch[q] - 1;
        D += d[q][o], R += r[q][o], X = x[q][o] > X ? x[q][o] : X, c++;
      }
      int64_t over = X > Y ? X - Y : 0;
      if (mult * D - over < E) continue;
      int64_t memrel = over - mult * D;
      if (!have1 || R < b1[0] || (R == b1[0] && (c < b1[1] || (c == b1[1] && memrel < b1[2])))) {
        b1[0] = R, b1[1] = c, b1[2] = memrel;
        have1 = 1;
      }
      if (R <= cap && (!have2 || c < b2[0] || (c == b2[0] && memrel < b2[1]))) {
        b2[0] = c, b2[1] = memrel;
        have2 = 1;
      }
    }
    remat__knap_res res;
    int f1 = remat__knap_min_time(&kn, mult, E, Y, &res);
    CHECK(f1 == have1);
    if (f1 && have1) {
      CHECK(res.r == b1[0] && res.cnt == b1[1] && res.memrel == b1[2]);
      int64_t items[8], m = remat__knap_items(&kn, res.node, items), D = 0, R = 0, X = 0;
      CHECK(m == res.cnt);
      int seen[8] = {0};
      for (int64_t k = 0; k < m; k++) {
        int64_t i = items[k] / 2, q = items[k] % 2;
        CHECK(q < no[i] && !seen[i]); /* one option of an item, at most */
        seen[i] = 1;
        D += d[i][q], R += r[i][q], X = x[i][q] > X ? x[i][q] : X;
      }
      CHECK(R == res.r && (X > Y ? X - Y : 0) - mult * D == res.memrel);
    }
    if (levels) {
      int f2 = remat__knap_min_count(&kn, mult, E, Y, cap, &res);
      CHECK(f2 == have2);
      if (f2 && have2) CHECK(res.cnt == b2[0] && res.memrel == b2[1]);
    }
    remat__knap_free(&kn);
  }
}

/* ------------------------------------------------------------ simulator */

static void test_sim(void) {
  remat_error err;
  double ms, f[8], b[8];
  /* hand-computed: p = 2, m = 2, f = 1, b = 2 under 1F1B: 9 */
  f[0] = f[1] = 1;
  b[0] = b[1] = 2;
  CHECK(remat_plan_simulate(REMAT_SCHED_1F1B, 2, 2, f, b, &ms, &err) == 0 && ms == 9);
  /* equal stages, no communication: (m + p - 1)(f + b) for both schedules,
   * the closed form sum t + (m - 1) max t */
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 12; m++)
      for (int sch = 0; sch < 2; sch++) {
        for (int s = 0; s < p; s++) f[s] = 1.5, b[s] = 3.25;
        CHECK(remat_plan_simulate(sch, p, m, f, b, &ms, &err) == 0);
        CHECK(fabs(ms - (m + p - 1) * 4.75) < 1e-9);
      }
  /* unequal stages: the makespan is at least the busiest stage's work plus
   * the fill and drain of the others, and, with the backward at least as long
   * as the forward everywhere (as in training), at most the closed form */
  int above = 0, below = 0, equal = 0;
  for (int it = 0; it < 2000; it++) {
    int p = (int)rnd(1, 8), m = (int)rnd(1, 12), sch = (int)rnd(0, 1);
    double sum = 0, mx = 0, fsum = 0, bsum = 0;
    for (int s = 0; s < p; s++) {
      f[s] = (double)rnd(1, 8);
      b[s] = f[s] * (double)rnd(1, 3);
      sum += f[s] + b[s];
      fsum += f[s];
      bsum += b[s];
      if (f[s] + b[s] > mx) mx = f[s] + b[s];
    }
    CHECK(remat_plan_simulate(sch, p, m, f, b, &ms, &err) == 0);
    double formula = sum + (m - 1) * mx;
    CHECK(ms >= m * mx - 1e-9);
    CHECK(ms >= fsum + bsum - 1e-9);
    if (sch == REMAT_SCHED_1F1B) CHECK(ms <= formula + 1e-9);
    if (ms > formula + 1e-9) above++;
    else if (ms < formula - 1e-9) below++;
    else equal++;
  }
  printf("simulation vs sum t + (m-1) max t on random unequal stages: %d below, %d equal, %d "
         "above (GPipe only)\n",
         below, equal, above);
}

/* ------------------------------------------------------------ parsing */

static void expect_bad(const char *json, const char *word) {
  remat_plan_problem pb;
  remat_error err = {0, ""};
  int rc = remat_plan_problem_parse_json(&pb, json, strlen(json), &err);
  CHECK(rc != 0);
  CHECK(strstr(err.msg, word) != NULL);
  CHECK(strchr(err.msg, '\n') == NULL);
  if (rc == 0 || !strstr(err.msg, word))
    fprintf(stderr, "expected an error about '%s' for %s\n  got rc=%d '%s'\n", word, json, rc, err.msg);
  if (rc == 0) remat_plan_problem_free(&pb);
}

#define LAYER "{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_bytes\":0}"

static void test_parse(void) {
  expect_bad("", "invalid JSON");
  expect_bad("{", "invalid JSON");
  expect_bad("[1,2]", "JSON object");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000}", "layers");
  expect_bad("{\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "stages");
  expect_bad("{\"stages\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "microbatches");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"layers\":[" LAYER "]}", "memory");
  expect_bad("{\"stages\":2.5,\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "integer");
  expect_bad("{\"stages\":0,\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "stages");
  expect_bad("{\"stages\":\"2\",\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "integer");
  expect_bad("{\"stages\":5,\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "5 stages but only 4 layers");
  expect_bad("{\"stages\":2,\"microbatches\":-1,\"memory\":1000,\"layers\":[" LAYER "]}", "microbatches");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":-5,\"layers\":[" LAYER "]}", "negative");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1.5,\"layers\":[" LAYER "]}", "whole number");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":\"lots\",\"layers\":[" LAYER "]}", "memory");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":[1000],\"layers\":[" LAYER "]}", "exactly one per stage");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":[1000,true],\"layers\":[" LAYER "]}", "memory[1]");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1e30,\"layers\":[" LAYER "]}", "limit");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1e999,\"layers\":[" LAYER "]}", "finite");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"schedule\":\"zb\",\"layers\":[" LAYER "]}", "schedule");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"objective\":\"fast\",\"layers\":[" LAYER "]}", "objective");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[]}", "non-empty");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":{}}", "non-empty");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[7]}", "layers[0] must be an object");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layer\":[" LAYER "]}", "unknown field \"layer\"");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":0,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "count");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":2000000,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "count");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":600000,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0},{\"count\":600000,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "1000000");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "fwd is missing");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "recompute is missing");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":-1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "fwd");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":\"x\",\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "bwd");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":0.5,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "act_bytes");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0,\"recomputable\":1}]}", "true or false");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0,\"work_bytes\":-8}]}", "work_bytes must not be negative");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0,\"work_bytes\":2.5}]}", "work_bytes must be a whole number");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0,\"work_bytes\":2e18}]}", "work_bytes");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0,\"work_bytes\":\"lots\"}]}", "work_bytes");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1,\"ckpt_bytes\":1,\"state_bytes\":0,\"speed\":3}]}", "unknown field \"speed\"");
  expect_bad("{\"stages\":2,\"microbatches\":1000,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":1e18,\"ckpt_bytes\":1,\"state_bytes\":0}]}", "2^6");

  /* the middle policy's fields go together, on recomputable layers */
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_bytes\":0,\"middle_bytes\":50}]}", "middle_recompute is missing");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_bytes\":0,\"middle_recompute\":0.5}]}", "need middle_bytes");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_bytes\":0,\"recomputable\":false,\"middle_bytes\":50,\"middle_recompute\":1}]}", "not recomputable");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_bytes\":0,\"middle_bytes\":50,\"middle_recompute\":-1}]}", "middle_recompute must not be negative");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_bytes\":0,\"middle_bytes\":50,\"middle_recompute\":1,\"middle_recompute_bytes\":0.5}]}", "middle_recompute_bytes must be a whole number");

  /* strict text: one object, no duplicate keys, no NUL, bounded nesting */
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]} {}", "after the JSON value at offset 145");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER "]}\n7", "offset 145 (line 2, column 1)");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"stages\":2,\"memory\":1000,\"layers\":[" LAYER "]}", "duplicate key \"stages\"");
  expect_bad("{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[" LAYER ",{\"bwd\":1,\"bwd\":1}]}", "duplicate key \"bwd\" in layers[1]");
  expect_bad("{\"stages\":[[[[[[[[[[1]]]]]]]]]]}", "nested too deeply at offset 17");
  {
    const char nul[] = "{\"stages\":2,\0\"microbatches\":2}";
    remat_plan_problem pb;
    remat_error err = {0, ""};
    CHECK(remat_plan_problem_parse_json(&pb, nul, sizeof nul - 1, &err) == REMAT_EFORMAT);
    CHECK(strstr(err.msg, "NUL byte at offset 12") != NULL);
  }

  /* accepted: optional fields, sizes as strings, per-stage budgets */
  const char *good =
      "{\"stages\":2,\"microbatches\":3,\"memory\":[\"1KiB\", 2048],\"stage_bytes\":8,\"comment\":\"x\","
      "\"layers\":[{\"name\":\"embedding\",\"fwd\":0,\"bwd\":0,\"act_bytes\":0,\"ckpt_bytes\":0,"
      "\"state_bytes\":64,\"recomputable\":false},"
      "{\"count\":3,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,"
      "\"state_bytes\":0,\"recompute_bytes\":50,\"work_bytes\":\"1KiB\",\"middle_bytes\":60,"
      "\"middle_recompute\":0.25,\"middle_recompute_bytes\":30}]}";
  remat_plan_problem pb;
  remat_error err;
  int rc = remat_plan_problem_parse_json(&pb, good, strlen(good), &err);
  CHECK(rc == 0);
  if (rc == 0) {
    CHECK(pb.memory[0] == 1024 && pb.memory[1] == 2048 && !pb.uniform_memory);
    CHECK(pb.groups[0].count == 1 && !pb.groups[0].recomputable);
    CHECK(pb.groups[1].recompute_bytes == 50 && pb.stage_bytes == 8);
    CHECK(pb.groups[1].work_bytes == 1024 && pb.groups[0].work_bytes == 0);
    CHECK(strcmp(pb.groups[0].name, "embedding") == 0);
    CHECK(!pb.groups[0].middle && pb.groups[1].middle && pb.groups[1].middle_bytes == 60 &&
          pb.groups[1].middle_recompute == 0.25 && pb.groups[1].middle_recompute_bytes == 30);
    remat_plan_problem_free(&pb);
  } else {
    fprintf(stderr, "%s\n", err.msg);
  }
  CHECK(remat_plan_problem_load(&pb, "/nonexistent/problem.json", &err) == REMAT_EIO);
  CHECK(strstr(err.msg, "/nonexistent/problem.json") != NULL);
}

/* ------------------------------------------------------------ work bytes */

/* memory = sum a or c + max(max y over the stage, max x over the recomputed),
 * by hand: layer 0 (a 100, c 10, x 50, y 30), layer 1 (a 100, c 10, x 0,
 * y 70), one stage, one micro-batch. */
static void test_work_bytes(void) {
  remat_plan_problem pb;
  remat_error err;
  if (remat_plan_problem_init(&pb, 1, 2, &err)) abort();
  remat_plan_problem_set_memory(&pb, 1000);
  for (int g = 0; g < 2; g++) {
    pb.groups[g].fwd = pb.groups[g].bwd = pb.groups[g].recompute = 1;
    pb.groups[g].act_bytes = 100;
    pb.groups[g].ckpt_bytes = 10;
  }
  pb.groups[0].recompute_bytes = 50;
  pb.groups[0].work_bytes = 30;
  pb.groups[1].work_bytes = 70;
  int64_t lps[1] = {2};
  const uint8_t recs[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  const size_t want[4] = {200 + 70, 110 + 70, 110 + 70, 20 + 70};
  for (int k = 0; k < 4; k++) {
    remat_plan ev;
    CHECK(remat_plan_evaluate(&pb, lps, recs[k], &ev, &err) == 0);
    CHECK(ev.stages[0].memory_bytes == want[k]);
    remat_plan_free(&ev);
  }
  pb.groups[0].recompute_bytes = 90; /* scratch above the floor now counts */
  remat_plan ev;
  CHECK(remat_plan_evaluate(&pb, lps, recs[3], &ev, &err) == 0);
  CHECK(ev.stages[0].memory_bytes == 20 + 90);
  remat_plan_free(&ev);
  /* the solver: at 180 bytes recomputing the layer without scratch is enough */
  remat_plan_problem_set_memory(&pb, 180);
  remat_plan plan;
  CHECK(remat_plan_solve(&pb, &plan, &err) == 0);
  CHECK(plan.total_recomputed == 1 && plan.stages[0].memory_bytes == 180);
  remat_plan_free(&plan);
  remat_plan_problem_free(&pb);
}

/* ------------------------------------------------------------ the middle policy */

/* By hand: layer 0 (a 100, c 10, x 50; middle: mb 40, xm 20, rm 0.25; r 1),
 * layer 1 (a 100, c 10, x 0, no middle policy), y 0, one stage, two
 * micro-batches in flight (GPipe, m = 2). memory = 2 sum(stored) + max(x),
 * time = 2 (f + b) + sum of the recompute times. */
static void test_middle(void) {
  remat_plan_problem pb;
  remat_error err;
  if (remat_plan_problem_init(&pb, 1, 2, &err)) abort();
  pb.microbatches = 2;
  pb.schedule = REMAT_SCHED_GPIPE;
  remat_plan_problem_set_memory(&pb, 1000);
  for (int g = 0; g < 2; g++) {
    pb.groups[g].fwd = 1;
    pb.groups[g].bwd = 2;
    pb.groups[g].recompute = 1;
    pb.groups[g].act_bytes = 100;
    pb.groups[g].ckpt_bytes = 10;
  }
  pb.groups[0].recompute_bytes = 50;
  pb.groups[0].middle = 1;
  pb.groups[0].middle_bytes = 40;
  pb.groups[0].middle_recompute = 0.25;
  pb.groups[0].middle_recompute_bytes = 20;
  int64_t lps[1] = {2};
  const uint8_t pol[6][2] = {{0, 0}, {1, 0}, {2, 0}, {2, 1}, {1, 1}, {0, 1}};
  const size_t want_mem[6] = {400, 220 + 50, 280 + 20, 100 + 20, 40 + 50, 220};
  const double want_t[6] = {6, 7, 6.25, 7.25, 8, 7};
  for (int k = 0; k < 6; k++) {
    remat_plan ev;
    CHECK(remat_plan_evaluate(&pb, lps, pol[k], &ev, &err) == 0);
    CHECK(ev.stages[0].memory_bytes == want_mem[k] && ev.stages[0].time == want_t[k]);
    CHECK(ev.total_middle == (pol[k][0] == 2) && ev.policy[0] == pol[k][0]);
    remat_plan_free(&ev);
  }
  const uint8_t bad[2] = {0, 2}; /* layer 1 has no middle policy */
  remat_plan ev;
  CHECK(remat_plan_evaluate(&pb, lps, bad, &ev, &err) == REMAT_EINVAL);
  CHECK(strstr(err.msg, "no middle policy") != NULL);
  /* the solver: at 300 bytes the middle policy on layer 0 (+0.25) beats
   * recomputing either layer (+1); a byte less, recomputing layer 0 (270
   * bytes) or layer 1 (220) ties on time and count, and the lower peak
   * wins; at 120 the middle policy and recomputing; at 89 nothing fits,
   * 90 is the least */
  const size_t budget[4] = {300, 299, 120, 89};
  const int want_pol0[4] = {2, 0, 2, -1}, want_pol1[4] = {0, 1, 1, -1};
  for (int k = 0; k < 4; k++) {
    remat_plan_problem_set_memory(&pb, budget[k]);
    remat_plan plan;
    int rc = remat_plan_solve(&pb, &plan, &err);
    CHECK(rc == (want_pol0[k] < 0 ? REMAT_EINFEASIBLE : 0));
    if (rc == 0) CHECK(plan.policy[0] == want_pol0[k] && plan.policy[1] == want_pol1[k]);
    if (rc == REMAT_EINFEASIBLE) CHECK(plan.min_budget_bytes == 90);
    if (rc == 0 || rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
  }
  remat_plan_problem_free(&pb);
}

/* ------------------------------------------------------------ model problems */

static void test_model(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("gpt2-124m", &cfg, &err) == 0);
  remat_plan_problem pb;
  int rc = remat_plan_problem_from_model(&pb, &cfg, 4, 1024, 4, 8, (size_t)8 << 30, &err);
  CHECK(rc == 0);
  if (rc) {
    fprintf(stderr, "%s\n", err.msg);
    return;
  }
  remat_memory_model mm;
  CHECK(remat_memory_model_get(&cfg, 4, 1024, &mm, &err) == 0);
  const remat_layer_bytes *bb = &mm.layer[REMAT_LAYER_BLOCK];
  CHECK(pb.num_groups == 3 && pb.groups[1].count == 12);
  CHECK(pb.groups[1].act_bytes == bb->kept && pb.groups[1].ckpt_bytes == bb->ckpt);
  /* 8 micro-batches: each block's gradient is computed apart, in its buffer */
  CHECK(pb.groups[1].recompute_bytes == bb->scratch + bb->grad &&
        pb.groups[1].state_bytes == bb->state);
  CHECK(pb.groups[1].work_bytes == bb->work + bb->grad && pb.stage_bytes == mm.stage_bytes);
  /* the blocks' middle policy: its bytes, and a recompute far below the forward's */
  CHECK(pb.groups[1].middle && !pb.groups[0].middle && !pb.groups[2].middle);
  CHECK(pb.groups[1].middle_bytes == bb->mid &&
        pb.groups[1].middle_recompute_bytes == bb->mid_scratch + bb->grad);
  CHECK(pb.groups[1].middle_recompute > 0 &&
        pb.groups[1].middle_recompute < 0.1 * pb.groups[1].recompute);
  CHECK(!pb.groups[0].recomputable && !pb.groups[2].recomputable);
  remat_plan plan;
  rc = remat_plan_solve(&pb, &plan, &err);
  CHECK(rc == 0 || rc == REMAT_EINFEASIBLE);
  if (rc == 0 || rc == REMAT_EINFEASIBLE) {
    CHECK(plan.stages[0].first_layer == 0);
    CHECK(plan.stages[3].first_layer + plan.stages[3].num_layers == 14);
    /* the embedding (layer 0) and the head (layer 13) never recompute */
    for (int64_t k = 0; k < plan.total_recomputed; k++)
      CHECK(plan.recomputed_all[k] >= 1 && plan.recomputed_all[k] <= 12);
    CHECK(plan.policy[0] == REMAT_KEEP && plan.policy[13] == REMAT_KEEP);
    remat_plan_free(&plan);
  }
  /* Evaluate agrees with the solver on its own plan. */
  remat_plan_problem_set_memory(&pb, (size_t)64 << 30);
  rc = remat_plan_solve(&pb, &plan, &err);
  CHECK(rc == 0);
  if (rc == 0) {
    int64_t lps[4];
    for (int s = 0; s < 4; s++) lps[s] = plan.stages[s].num_layers;
    const uint8_t *rec = plan.policy;
    remat_plan ev;
    CHECK(remat_plan_evaluate(&pb, lps, rec, &ev, &err) == 0);
    CHECK(ev.objective_value == plan.objective_value && ev.max_memory_bytes == plan.max_memory_bytes);
    CHECK(plan.slowdown == 1.0 || plan.total_recomputed > 0);
    remat_plan_free(&ev);
    remat_plan_free(&plan);
  }
  remat_plan_problem_free(&pb);
}

/* A GPT-2 problem under each new schedule: the memory terms from the
 * model, the plan's chunks and figures, remat_plan_evaluate agreeing with
 * the solver, and every output format naming what its framework runs. */
static int has(const char *text, const char *word) { return text && strstr(text, word) != NULL; }

static void test_schedules_model(void) {
  remat_config cfg;
  remat_error err;
  remat_plan_problem pb;
  CHECK(remat_config_parse("gpt2-124m", &cfg, &err) == 0);
  CHECK(remat_plan_problem_from_model(&pb, &cfg, 4, 1024, 2, 4, (size_t)8 << 30, &err) == 0);
  remat_memory_model mm;
  CHECK(remat_memory_model_get(&cfg, 4, 1024, &mm, &err) == 0);
  /* the W record: 20 (B, T, C) floats (11 gradients, 9 inputs) and 4 (B, T) statistics */
  CHECK(pb.groups[1].wgrad_bytes == mm.block_wrec_bytes);
  CHECK(mm.block_wrec_bytes == 20 * mm.residual_bytes + 4 * (size_t)4 * 1024 * sizeof(float));
  CHECK(pb.groups[1].wgrad > 0 && pb.groups[1].wgrad < pb.groups[1].bwd);
  CHECK(pb.groups[0].wgrad == 0 && pb.groups[2].wgrad_bytes == 0);
  static const struct {
    int sched;
    const char *colossal, *torch, *megatron;
  } want[] = {{REMAT_SCHED_INTERLEAVED, "pp_style=\"interleaved\"", "ScheduleInterleaved1F1B",
               "virtual stages in model order"},
              {REMAT_SCHED_ZBH1, "has no ZB-H1", "ScheduleInterleavedZeroBubble", "no ZB-H1"},
              {REMAT_SCHED_ZBV, "pp_style=\"zbv\"", "ScheduleZBVZeroBubble", "cannot run this plan"}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    pb.schedule = want[k].sched;
    pb.chunks = 0;
    remat_plan plan;
    int rc = remat_plan_solve(&pb, &plan, &err);
    CHECK(rc == 0);
    if (rc) continue;
    int64_t v = plan.chunks, nv = 2 * v, sum = 0;
    CHECK(v == (want[k].sched == REMAT_SCHED_ZBH1 ? 1 : 2));
    for (int64_t c = 0; c < nv; c++) {
      CHECK(plan.chunk_layers[c] >= 1 && plan.chunk_first[c] == sum);
      sum += plan.chunk_layers[c];
    }
    CHECK(sum == 14 && plan.simulated_time > 0);
    for (int s = 0; s < 2; s++)
      CHECK(plan.stages[s].stream_peak_bytes > 0 &&
            plan.stages[s].stream_peak_bytes <= plan.stages[s].memory_bytes);
    remat_plan ev;
    CHECK(remat_plan_evaluate(&pb, plan.chunk_layers, plan.policy, &ev, &err) == 0);
    CHECK(ev.objective_value == plan.objective_value &&
          ev.max_memory_bytes == plan.max_memory_bytes && ev.simulated_time == plan.simulated_time);
    remat_plan_free(&ev);
    char *t[REMAT_PLAN_FORMAT_COUNT] = {NULL};
    for (int f = 0; f < REMAT_PLAN_FORMAT_COUNT; f++)
      CHECK(remat_plan_format(&pb, &plan, f, &t[f], &err) == 0);
    const char *name = remat_plan_schedule_name(want[k].sched);
    CHECK(has(t[REMAT_PLAN_FORMAT_TABLE], name));
    CHECK(has(t[REMAT_PLAN_FORMAT_JSON], "\"stream_peak_bytes\""));
    CHECK(has(t[REMAT_PLAN_FORMAT_JSON], "\"chunks\"") == (v > 1));
    CHECK(has(t[REMAT_PLAN_FORMAT_COLOSSALAI], want[k].colossal));
    CHECK(has(t[REMAT_PLAN_FORMAT_TORCH], want[k].torch));
    CHECK(has(t[REMAT_PLAN_FORMAT_MEGATRON], want[k].megatron));
    if (v > 1) CHECK(has(t[REMAT_PLAN_FORMAT_COLOSSALAI], "num_model_chunks=2"));
    for (int f = 0; f < REMAT_PLAN_FORMAT_COUNT; f++) remat_plan_text_free(t[f]);
    remat_plan_free(&plan);
  }
  /* the LP refuses the simulated objective; the sweep refuses chunks */
  pb.objective = REMAT_OBJ_SIMULATED;
  char *lp = NULL;
  CHECK_ERR(remat_plan_format_lp(&pb, &lp, &err), err, REMAT_EINVAL, "MIP");
  pb.objective = REMAT_OBJ_BOTTLENECK;
  remat_plan_sweep sw;
  CHECK_ERR(remat_plan_sweep_run(&pb, 3, &sw, &err), err, REMAT_EINVAL, "sweep");
  remat_plan_problem_free(&pb);
  printf("schedules on GPT-2 124M: %d checks so far\n", test_checks);
}

/* An arrangement planned per micro-batch fits stage by stage as the
 * runtime lays its slots out (slot k holds each layer by its policy there,
 * a layer kept in any slot keeps its W records); returns whether some
 * layer recomputes in some slots only. */
static int fits_by_slot(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec) {
  int any = 0;
  for (int64_t s = 0; s < in->p; s++) {
    int64_t n = in->n[s], mem = in->stage_bytes + (s < in->p - 1 ? in->boundary_bytes : 0), X = 0;
    for (int64_t l = bounds[s]; l < bounds[s + 1]; l++) {
      int64_t k = rec[l] >= REMAT__REC_SLOTS ? rec[l] - REMAT__REC_SLOTS : 0;
      CHECK(k < n);
      any |= k > 0;
      mem += in->w[l] + (rec[l] && !k ? 0 : in->kw[s] * in->u[l]);
      for (int64_t slot = 0; slot < n; slot++) {
        int full = rec[l] == REMAT_RECOMPUTE || (k && slot >= n - k);
        int mid = rec[l] == REMAT_MIDDLE;
        mem += full ? in->c[l] : mid ? in->mb[l] : in->a[l];
        if (full && in->x[l] > X) X = in->x[l];
        if (mid && in->xm[l] > X) X = in->xm[l];
      }
      if (in->y[l] > X) X = in->y[l];
    }
    CHECK(mem + X <= in->budget[s]);
  }
  return any;
}

/* Recompute per micro-batch on random problems of one kind of block
 * (between an optional layer of its own before and after, as a model's
 * embedding and head), under 1f1b, gpipe and zb-h1: the solver's optimum is
 * brute force's over every partition and, per layer, keep, full, middle or
 * full in the last k of its stage's slots; the arrangement it returns fits
 * stage by stage as the runtime lays slots out (each slot by its own
 * policies), and never does worse than the plan per layer. */
static void test_per_microbatch(int count) {
  int feasible = 0, partial = 0, faster = 0, failures0 = test_failures;
  for (int it = 0; it < count; it++) {
    int64_t blocks = rnd(1, 6), before = rnd(0, 1), after = rnd(0, 1);
    int64_t ng = 1 + before + after, L = blocks + before + after, p = rnd(1, L < 3 ? L : 3);
    remat_plan_problem pb;
    remat_error err;
    if (remat_plan_problem_init(&pb, p, ng, &err)) abort();
    static const int sch[] = {REMAT_SCHED_1F1B, REMAT_SCHED_GPIPE, REMAT_SCHED_ZBH1};
    pb.schedule = sch[rnd(0, 2)];
    pb.microbatches = rnd(1, 7);
    pb.objective = rnd(0, 1) ? REMAT_OBJ_1F1B : REMAT_OBJ_BOTTLENECK;
    pb.per_microbatch = 1;
    const int64_t unit = 1000;
    double top = 0;
    for (int64_t g = 0; g < ng; g++) {
      remat_plan_group *G = &pb.groups[g];
      int blk = g == before;
      G->count = blk ? blocks : 1;
      G->fwd = (double)rnd(0, 2);
      G->bwd = (double)rnd(0, 4);
      G->recompute = (double)rnd(rnd(0, 5) == 0 ? 0 : 1, 3);
      G->act_bytes = (size_t)(rnd(2, 9) * unit);
      G->ckpt_bytes = (size_t)(rnd(0, 2) * unit);
      G->state_bytes = (size_t)(rnd(0, 2) * unit);
      G->recompute_bytes = rnd(0, 1) ? 0 : (size_t)(rnd(1, 6) * unit);
      G->work_bytes = rnd(0, 1) ? 0 : (size_t)(rnd(0, 6) * unit);
      G->recomputable = blk;
      if (blk && rnd(0, 1)) {
        G->middle = 1;
        G->middle_bytes = (size_t)(rnd(1, (int64_t)G->act_bytes / unit - 1) * unit);
        G->middle_recompute = (double)rnd(0, 2) * 0.5;
        G->middle_recompute_bytes = (size_t)(rnd(0, 4) * unit);
      }
      if (pb.schedule == REMAT_SCHED_ZBH1) {
        G->wgrad = G->bwd * (double)rnd(0, 2) / 2;
        G->wgrad_bytes = (size_t)(rnd(0, 3) * unit);
      }
      top += (double)G->count * (double)(G->state_bytes + G->act_bytes * 3 + G->wgrad_bytes +
                                         G->work_bytes);
    }
    remat_plan_problem_set_memory(&pb, (size_t)(top * (double)rnd(10, 90) / 100.0));
    remat__plan_inst in;
    CHECK(remat__plan_inst_build(&pb, &in, &err) == 0);
    int64_t bo = 0, bc = 0, bm = 0, so = 0, sc = 0, sm = 0, bounds[8];
    uint8_t rec[16] = {0};
    int brc = plan_brute(&in, &bo, &bc, &bm);
    int src = remat__plan_solve_inst(&in, &so, &sc, &sm, bounds, rec, &err);
    CHECK(brc == src);
    if (brc == 0 && src == 0) {
      feasible++;
      CHECK(bo == so && bc == sc && bm == sm);
      if (bo != so || bc != sc || bm != sm) {
        fprintf(stderr, "per micro-batch %d (L=%lld p=%lld m=%lld %s %s): brute (%lld,%lld,%lld) "
                "solver (%lld,%lld,%lld)\n", it, (long long)in.L, (long long)in.p,
                (long long)in.m, remat_plan_schedule_name(in.schedule),
                remat_plan_objective_name(in.objective), (long long)bo, (long long)bc,
                (long long)bm, (long long)so, (long long)sc, (long long)sm);
        dump(&pb, it);
      }
      partial += fits_by_slot(&in, bounds, rec);
      /* no worse than per layer, and the plan's figures are the same */
      remat_plan_problem q;
      CHECK(remat_plan_problem_copy(&q, &pb, &err) == 0);
      q.per_microbatch = 0;
      remat_plan a, b;
      int arc = remat_plan_solve(&pb, &a, &err), brc2 = remat_plan_solve(&q, &b, &err);
      CHECK(arc == 0);
      if (arc == 0 && brc2 == 0) {
        CHECK(a.objective_value <= b.objective_value * (1 + 1e-12));
        faster += a.objective_value < b.objective_value * (1 - 1e-12);
      }
      if (arc == 0) {
        CHECK(fabs(a.objective_value - (double)so * in.q) <= 1e-9 * (1 + a.objective_value));
        CHECK(a.full_slots != NULL);
        for (int64_t l = 0; a.full_slots && l < in.L; l++) {
          int64_t k = rec[l] >= REMAT__REC_SLOTS ? rec[l] - REMAT__REC_SLOTS : 0;
          CHECK(a.full_slots[l] == k);
          CHECK(a.policy[l] == (k ? REMAT_KEEP : rec[l]));
        }
        remat_plan_free(&a);
      }
      if (brc2 == 0 || brc2 == REMAT_EINFEASIBLE) remat_plan_free(&b);
      remat_plan_problem_free(&q);
    }
    remat__plan_inst_free(&in);
    remat_plan_problem_free(&pb);
  }
  printf("per micro-batch: %d instances, %d feasible, %d of them recomputing some slots, %d "
         "faster than per layer, %d failed checks\n", count, feasible, partial, faster,
         test_failures - failures0);
  CHECK(partial > 0 && faster > 0);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 600;
  test_seed();
  test_knap(3000);
  test_sim();
  test_parse();
  test_model();
  test_schedules_model();
  test_work_bytes();
  test_middle();
  test_random(n, 7, 0, 0);
  test_random(n / 2, 10, 0, 0);
  test_random(n, 7, 1, 0);
  test_random(n / 2, 10, 1, 0);
  test_random(n, 7, 0, 1);
  test_random(n, 7, 1, 1);
  test_random(n / 4, 9, 1, 1);
  test_min_blocks(n / 2, 0);
  random_schedules = 1;
  test_random(n, 7, 0, 0);
  test_random(n / 2, 9, 1, 1);
  test_min_blocks(n / 2, 0);
  test_min_blocks(n / 2, 1);
  random_schedules = 0;
  test_simulated(n / 2);
  test_bounds(n);
  test_time_limit();
  test_per_microbatch(n);
  return test_summary("test_plan");
}
