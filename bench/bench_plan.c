/* bench_plan.c: how fast the exact planner is. One line per case:
 *   seed      ColossalAI #5509's example (32 layers, 4 stages), median of
 *             many solves
 *   hetero    1024 layers, every one different (random times, bytes and
 *             scratch), on 64 stages, both objectives; then the same with a
 *             third choice per layer, the middle policy (middle=yes)
 *   gpt2      GPT-2 1558M (48 blocks) at B=4 T=1024 on 8 stages with 16
 *             micro-batches from the memory model, the blocks with three
 *             choices (middle=yes) or two, both objectives, median of many
 *   limit     5000 different layers with scratch on 128 stages (256
 *             micro-batches), far beyond what the exact search does in the
 *             time limit given: the wall time, the gap and the bound
 *   sched     GPT-2 124M (14 layers) and 350M (26 layers) at B=4 T=1024 on 4
 *             stages with 8 micro-batches under 1f1b, zb-h1, interleaved
 *             (2 chunks) and zbv, the budget a quarter above the least that
 *             fits under all four, objectives bottleneck and simulated: solve
 *             time, partitions searched, the plan's simulated makespan
 *   glpk      small heterogeneous instances (10 to 48 layers) and the seed's,
 *             solved by remat and by glpsol on remat's LP export, timed side
 *             by side, with the ratio; skipped when glpsol is not installed
 *             (the seed's MIP takes glpsol about half a minute)
 * Usage: bench_plan [--quick] [--help]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "plan/plan.h"

static const char *seed_json =
    "{ \"stages\": 4, \"microbatches\": 8, \"schedule\": \"1f1b\", \"objective\": \"bottleneck\","
    "  \"memory\": 20e9,"
    "  \"layers\": [ {\"count\": 32, \"fwd\": 1, \"bwd\": 2, \"recompute\": 1,"
    "                \"act_bytes\": 1.25e9, \"ckpt_bytes\": 0.125e9, \"state_bytes\": 0} ] }";

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform(double lo, double hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) * 0x1p-53;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Times `reps` solves; returns the median in ms, fills min and the plan of
 * the last solve. */
static double time_solve(const remat_plan_problem *pb, int reps, double *min_ms, remat_plan *last,
                         int *rc_out) {
  double *t = malloc((size_t)reps * sizeof *t);
  remat_error err;
  int rc = 0;
  for (int k = 0; k < reps; k++) {
    remat_plan plan;
    double t0 = remat__now();
    rc = remat_plan_solve(pb, &plan, &err);
    t[k] = (remat__now() - t0) * 1e3;
    if (rc && rc != REMAT_EINFEASIBLE) {
      fprintf(stderr, "bench_plan: %s\n", err.msg);
      exit(1);
    }
    if (k == reps - 1 && last) *last = plan;
    else remat_plan_free(&plan);
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double med = t[reps / 2];
  if (min_ms) *min_ms = t[0];
  free(t);
  *rc_out = rc;
  return med;
}

/* 1024 different layers: f in [1, 3], b about 2f, r = f, a in [0.5, 2] GB,
 * c 5-20 % of a, x up to a - c (scratch_kind 1) or none (0), w in
 * [0.1, 0.5] GB. With middle, each layer also has the middle policy, as a
 * GPT-2 block's: it stores c plus 40-80 % of a - c, reruns in 5-15 % of f,
 * with 20-60 % of the recompute's scratch. The budget is `frac` of what
 * stage 0 of an even split keeps. */
static void hetero(remat_plan_problem *pb, int64_t L, int64_t p, int64_t m, int scratch,
                   double frac, int objective, int middle) {
  remat_error err;
  if (remat_plan_problem_init(pb, p, L, &err)) exit(1);
  pb->microbatches = m;
  pb->objective = objective;
  int64_t held = p < m ? p : m;
  double stage0 = 0;
  for (int64_t l = 0; l < L; l++) {
    remat_plan_group *G = &pb->groups[l];
    double f = uniform(1, 3);
    G->fwd = f;
    G->bwd = 2 * f * uniform(0.8, 1.2);
    G->recompute = f;
    G->act_bytes = (size_t)(uniform(0.5, 2) * 1e9);
    G->ckpt_bytes = (size_t)((double)G->act_bytes * uniform(0.05, 0.2));
    G->recompute_bytes =
        scratch ? (size_t)((double)(G->act_bytes - G->ckpt_bytes) * uniform(0, 1)) : 0;
    G->state_bytes = (size_t)(uniform(0.1, 0.5) * 1e9);
    if (middle) {
      G->middle = 1;
      G->middle_bytes =
          G->ckpt_bytes + (size_t)((double)(G->act_bytes - G->ckpt_bytes) * uniform(0.4, 0.8));
      G->middle_recompute = f * uniform(0.05, 0.15);
      G->middle_recompute_bytes = (size_t)((double)G->recompute_bytes * uniform(0.2, 0.6));
    }
    if (l < L / p) stage0 += (double)G->state_bytes + (double)held * (double)G->act_bytes;
  }
  remat_plan_problem_set_memory(pb, (size_t)(stage0 * frac));
}

/* glpsol on the LP export; returns its wall time in ms and its objective. */
static int glpk(const remat_plan_problem *pb, double *ms, double *objective, char *status,
                size_t cap) {
  char *lp;
  remat_error err;
  if (remat_plan_format_lp(pb, &lp, &err)) {
    fprintf(stderr, "bench_plan: %s\n", err.msg);
    return -1;
  }
  char dir[] = "/tmp/bench_plan_XXXXXX";
  if (!mkdtemp(dir)) return -1;
  char lpf[64], out[64], cmd[256];
  snprintf(lpf, sizeof lpf, "%s/p.lp", dir);
  snprintf(out, sizeof out, "%s/p.out", dir);
  FILE *f = fopen(lpf, "w");
  if (!f) return -1;
  fputs(lp, f);
  fclose(f);
  remat_plan_text_free(lp);
  snprintf(cmd, sizeof cmd, "glpsol --lp %s -o %s > /dev/null 2>&1", lpf, out);
  double t0 = remat__now();
  int rc = system(cmd);
  *ms = (remat__now() - t0) * 1e3;
  *objective = -1;
  snprintf(status, cap, "none");
  f = fopen(out, "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "Status:", 7) == 0) {
        char *s = line + 7;
        while (*s == ' ') s++;
        s[strcspn(s, "\n")] = 0;
        for (char *c = s; *c; c++)
          if (*c == ' ') *c = '_';
        size_t n = strlen(s) < cap - 1 ? strlen(s) : cap - 1;
        memcpy(status, s, n);
        status[n] = 0;
      }
      char *e = strstr(line, "obj = ");
      if (strncmp(line, "Objective:", 10) == 0 && e) *objective = atof(e + 6);
    }
    fclose(f);
  }
  remove(lpf);
  remove(out);
  rmdir(dir);
  return rc;
}

static void side_by_side(const char *name, const remat_plan_problem *pb, int reps) {
  double min_ms, gms, gobj;
  remat_plan plan;
  int rc;
  double med = time_solve(pb, reps, &min_ms, &plan, &rc);
  char status[64];
  if (glpk(pb, &gms, &gobj, status, sizeof status) < 0) {
    printf("bench=plan case=glpk-%s skipped=glpsol_failed\n", name);
    remat_plan_free(&plan);
    return;
  }
  double mine = rc == 0 ? plan.objective_value : -1;
  double diff = mine - gobj;
  if (diff < 0) diff = -diff;
  printf("bench=plan case=glpk-%s layers=%lld stages=%lld objective=%s remat_ms=%.4f "
         "glpsol_ms=%.1f ratio=%.0f remat_obj=%.10g glpsol_obj=%.10g glpsol_status=%s agree=%s\n",
         name, (long long)plan.num_layers, (long long)plan.num_stages,
         remat_plan_objective_name(pb->objective), med, gms, gms / med, mine, gobj, status,
         diff <= 1e-6 * (mine > 1 ? mine : 1) ? "yes" : "NO");
  remat_plan_free(&plan);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_plan [--quick]\n"
          "\n"
          "Times the exact pipeline planner, one line per case: the seed example (32\n"
          "layers, 4 stages), 1024 different layers on 64 stages (with two and three\n"
          "choices per layer), GPT-2 1558M on 8 stages, 5000 different layers on 128\n"
          "stages under a time limit, GPT-2 124M and 350M under every schedule (1f1b,\n"
          "zb-h1, interleaved, zbv), and small problems solved side by side by remat\n"
          "and by glpsol on remat's LP export (when glpsol is installed).\n"
          "\n"
          "  --quick      fewer repetitions, only the small glpsol cases\n"
          "  -h, --help   this help\n");
}

/* The seed example under both objectives. */
static void bench_seed(remat_plan_problem *pb, int quick) {
  int reps = quick ? 200 : 5000, rc;
  double min_ms;
  remat_plan plan;
  double med = time_solve(pb, reps, &min_ms, &plan, &rc);
  printf("bench=plan case=seed layers=32 stages=4 objective=bottleneck reps=%d solve_ms=%.4f "
         "solve_ms_min=%.4f layers_per_stage=%lld/%lld/%lld/%lld ckpt=%lld/%lld/%lld/%lld "
         "slowdown=%.4g\n",
         reps, med, min_ms, (long long)plan.stages[0].num_layers,
         (long long)plan.stages[1].num_layers,
         (long long)plan.stages[2].num_layers, (long long)plan.stages[3].num_layers,
         (long long)plan.stages[0].num_recomputed, (long long)plan.stages[1].num_recomputed,
         (long long)plan.stages[2].num_recomputed, (long long)plan.stages[3].num_recomputed,
         plan.slowdown);
  remat_plan_free(&plan);
  pb->objective = REMAT_OBJ_1F1B;
  med = time_solve(pb, reps, &min_ms, &plan, &rc);
  printf("bench=plan case=seed layers=32 stages=4 objective=1f1b reps=%d solve_ms=%.4f "
         "solve_ms_min=%.4f slowdown=%.4g\n",
         reps, med, min_ms, plan.slowdown);
  remat_plan_free(&plan);
  pb->objective = REMAT_OBJ_BOTTLENECK;
}

/* 1024 different layers on 64 stages, with two choices per layer, then
 * three. */
static void bench_hetero(int quick) {
  struct {
    int64_t m;
    int scratch, objective;
  } cases[] = {{128, 1, REMAT_OBJ_BOTTLENECK}, {128, 1, REMAT_OBJ_1F1B},
               {128, 0, REMAT_OBJ_BOTTLENECK}, {128, 0, REMAT_OBJ_1F1B},
               {16, 1, REMAT_OBJ_BOTTLENECK},  {16, 1, REMAT_OBJ_1F1B}};
  for (int middle = 0; middle < 2; middle++)
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      remat_plan_problem h;
      remat_plan plan;
      double min_ms;
      int rc;
      rng = 0x2545F4914F6CDD1Dull + k;
      hetero(&h, 1024, 64, cases[k].m, cases[k].scratch, 0.5, cases[k].objective, middle);
      int hr = quick ? 1 : 5;
      double med = time_solve(&h, hr, &min_ms, &plan, &rc);
      printf("bench=plan case=hetero layers=1024 stages=64 microbatches=%lld scratch=%s "
             "middle=%s objective=%s reps=%d solve_ms=%.1f solve_ms_min=%.1f feasible=%d "
             "slowdown=%.4f recomputed=%lld middle_layers=%lld windows=%lld\n",
             (long long)cases[k].m, cases[k].scratch ? "random" : "none", middle ? "yes" : "no",
             remat_plan_objective_name(cases[k].objective), hr, med, min_ms, rc == 0,
             plan.slowdown, (long long)plan.total_recomputed, (long long)plan.total_middle,
             (long long)plan.windows);
      remat_plan_free(&plan);
      remat_plan_problem_free(&h);
    }
}

/* GPT-2 1558M: identical blocks, the closed form over counts of each
 * policy; the budget between the least that fits and the most needed. */
static int bench_gpt2(int quick) {
  remat_config cfg;
  remat_plan_problem g;
  remat_plan plan;
  remat_error err;
  if (remat_config_parse("gpt2-1558m", &cfg, &err) ||
      remat_plan_problem_from_model(&g, &cfg, 4, 1024, 8, 16, 1, &err)) {
    fprintf(stderr, "bench_plan: %s\n", err.msg);
    return 1;
  }
  int rc = remat_plan_solve(&g, &plan, &err);
  size_t least = plan.min_budget_bytes;
  if (rc == 0 || rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
  remat_plan_problem_set_memory(&g, least + least / 4);
  for (int middle = 1; middle >= 0; middle--)
    for (int obj = 0; obj < 2; obj++) {
      g.groups[1].middle = middle;
      g.objective = obj;
      int gr = quick ? 50 : 500;
      double min_ms, med = time_solve(&g, gr, &min_ms, &plan, &rc);
      printf("bench=plan case=gpt2 model=gpt2-1558m B=4 T=1024 layers=50 stages=8 "
             "microbatches=16 middle=%s objective=%s reps=%d solve_ms=%.4f solve_ms_min=%.4f "
             "feasible=%d slowdown=%.4f recomputed=%lld middle_layers=%lld\n",
             middle ? "yes" : "no", remat_plan_objective_name(obj), gr, med, min_ms, rc == 0,
             plan.slowdown, (long long)plan.total_recomputed, (long long)plan.total_middle);
      remat_plan_free(&plan);
    }
  remat_plan_problem_free(&g);
  return 0;
}

/* The schedules: GPT-2 124M and 350M on 4 stages, 8 micro-batches, under
 * each schedule and two objectives, at one budget (a quarter above the least
 * that fits under every schedule; budget 1 byte to find those). */
static int bench_sched(int quick) {
  static const char *const models[] = {"gpt2-124m", "gpt2-350m"};
  static const int scheds[] = {REMAT_SCHED_1F1B, REMAT_SCHED_ZBH1, REMAT_SCHED_INTERLEAVED,
                               REMAT_SCHED_ZBV};
  for (int mi = 0; mi < (quick ? 1 : 2); mi++) {
    remat_config cfg;
    remat_plan_problem g;
    remat_plan plan;
    remat_error err;
    if (remat_config_parse(models[mi], &cfg, &err) ||
        remat_plan_problem_from_model(&g, &cfg, 4, 1024, 4, 8, 1, &err)) {
      fprintf(stderr, "bench_plan: %s\n", err.msg);
      return 1;
    }
    size_t least = 0; /* the most any schedule needs at least */
    int rc;
    for (size_t k = 0; k < sizeof scheds / sizeof scheds[0]; k++) {
      g.schedule = scheds[k];
      rc = remat_plan_solve(&g, &plan, &err);
      if (rc == REMAT_EINFEASIBLE && plan.min_budget_bytes > least) least = plan.min_budget_bytes;
      if (rc == 0 || rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
    }
    remat_plan_problem_set_memory(&g, least + least / 4);
    for (size_t k = 0; k < sizeof scheds / sizeof scheds[0]; k++)
      for (int obj = 0; obj < 2; obj++) {
        g.schedule = scheds[k];
        g.chunks = 0;
        g.objective = obj ? REMAT_OBJ_SIMULATED : REMAT_OBJ_BOTTLENECK;
        int64_t L = remat_plan_problem_layers(&g), nv = 4 * remat_schedule_chunks(g.schedule, 0);
        double parts = 1;
        for (int64_t i = 1; i < nv; i++) parts = parts * (double)(L - i) / (double)i;
        int reps = quick ? 1 : 3;
        double min_ms, med = time_solve(&g, reps, &min_ms, &plan, &rc);
        printf("bench=plan case=sched model=%s B=4 T=1024 layers=%lld stages=4 microbatches=8 "
               "schedule=%s objective=%s reps=%d solve_ms=%.3f solve_ms_min=%.3f "
               "partitions=%.0f feasible=%d objective_value=%.6g simulated=%.6g "
               "recomputed=%lld max_memory_bytes=%zu\n",
               models[mi], (long long)L, remat_plan_schedule_name(g.schedule),
               remat_plan_objective_name(g.objective), reps, med, min_ms,
               nv > 4 || obj ? parts : 0, rc == 0, plan.objective_value, plan.simulated_time,
               (long long)plan.total_recomputed, plan.max_memory_bytes);
        if (rc == 0 || rc == REMAT_EINFEASIBLE) remat_plan_free(&plan);
      }
    remat_plan_problem_free(&g);
  }
  return 0;
}

/* Far beyond the exact search under its time limit: the exact search takes
 * tens of seconds here (30-40 s on a 2-core machine). */
static int bench_limit(int quick) {
  remat_plan_problem h;
  remat_plan plan;
  remat_error err;
  rng = 0x2545F4914F6CDD1Dull + 99;
  int64_t L = quick ? 3000 : 5000, p = quick ? 96 : 128;
  hetero(&h, L, p, 2 * p, 1, 0.5, REMAT_OBJ_BOTTLENECK, 0);
  for (int obj = 0; obj < 2; obj++) {
    h.objective = obj;
    h.time_limit = quick ? 0.5 : 2;
    double t0 = remat__now();
    if (remat_plan_solve(&h, &plan, &err)) {
      fprintf(stderr, "bench_plan: %s\n", err.msg);
      return 1;
    }
    printf("bench=plan case=limit layers=%lld stages=%lld microbatches=%lld scratch=random "
           "objective=%s time_limit_s=%g solve_s=%.3f optimal=%d objective_value=%.6g "
           "lower_bound=%.6g gap=%.4f\n",
           (long long)L, (long long)p, (long long)(2 * p), remat_plan_objective_name(obj),
           h.time_limit, remat__now() - t0, plan.optimal, plan.objective_value, plan.lower_bound,
           plan.gap);
    remat_plan_free(&plan);
  }
  remat_plan_problem_free(&h);
  return 0;
}

/* Small heterogeneous instances first, then the seed's (glpsol needs tens of
 * seconds there: identical layers make a symmetric MIP). */
static void bench_glpk(const remat_plan_problem *seed, int quick) {
  if (system("command -v glpsol > /dev/null 2>&1") != 0) {
    printf("bench=plan case=glpk skipped=no_glpsol\n");
    return;
  }
  struct {
    int64_t L, p, m;
    int objective, slow, middle;
    uint64_t seed;
  } g[] = {{10, 3, 4, REMAT_OBJ_BOTTLENECK, 0, 0, 77}, {12, 3, 4, REMAT_OBJ_1F1B, 0, 0, 78},
           {32, 4, 8, REMAT_OBJ_BOTTLENECK, 0, 0, 91}, {48, 6, 12, REMAT_OBJ_BOTTLENECK, 1, 0, 91},
           {10, 3, 4, REMAT_OBJ_BOTTLENECK, 0, 1, 77}, {12, 3, 4, REMAT_OBJ_1F1B, 0, 1, 78},
           {32, 4, 8, REMAT_OBJ_BOTTLENECK, 1, 1, 91}};
  for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) {
    if (quick && g[k].slow) continue;
    remat_plan_problem h;
    rng = g[k].seed;
    hetero(&h, g[k].L, g[k].p, g[k].m, 1, 0.45, g[k].objective, g[k].middle);
    char name[32];
    snprintf(name, sizeof name, "hetero%lld%s", (long long)g[k].L, g[k].middle ? "-middle" : "");
    side_by_side(name, &h, quick ? 50 : 500);
    remat_plan_problem_free(&h);
  }
  if (!quick) side_by_side("seed", seed, 500);
}

int main(int argc, char **argv) {
  int quick = 0;
  for (int a = 1; a < argc; a++) {
    if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[a], "--quick") == 0) {
      quick = 1;
      continue;
    }
    fprintf(stderr, "bench_plan: unknown option '%s'\n", argv[a]);
    usage(stderr);
    return 2;
  }
  remat_plan_problem pb;
  remat_error err;
  if (remat_plan_problem_parse_json(&pb, seed_json, strlen(seed_json), &err)) {
    fprintf(stderr, "bench_plan: %s\n", err.msg);
    return 1;
  }
  bench_seed(&pb, quick);
  bench_hetero(quick);
  if (bench_gpt2(quick) || bench_sched(quick) || bench_limit(quick)) return 1;
  bench_glpk(&pb, quick);
  remat_plan_problem_free(&pb);
  return 0;
}
