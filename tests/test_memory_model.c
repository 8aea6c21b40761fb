/* test_memory_model.c: one memory model. For a grid of shapes and
 * per-block policies, the bytes the pipeline planner reports for a stage
 * (remat_plan_problem_from_model, then remat_plan_evaluate or
 * remat_plan_solve) equal the arena the engine lays out for the same stage
 * (remat_memplan_build_stage), byte for byte: for the whole model as one
 * stage at every policy, and for the stages of pipeline splits with their
 * micro-batches in flight. And the planner's optimum for a budget recomputes
 * exactly as few blocks as the engine's own search needs. */
#include <stdlib.h>
#include <string.h>

#include "remat.h"
#include "test_util.h"

/* The engine's arena for planner stage s of `plan`: layers are numbered
 * embedding 0, blocks 1..L, head L+1. */
static size_t engine_stage_bytes(const remat_config *cfg, int64_t B, int64_t T,
                                 const remat_plan *plan, int64_t s, const uint8_t *recompute) {
  /* several micro-batches a step: gradients are computed apart and added */
  int accumulate = plan->microbatches > 1;
  const remat_plan_stage *ps = &plan->stages[s];
  int64_t L = cfg->num_layers, lo = ps->first_layer, hi = ps->first_layer + ps->num_layers;
  int64_t b0 = lo < 1 ? 1 : lo, b1 = hi > L + 1 ? L + 1 : hi; /* blocks [b0, b1) as layers */
  uint8_t pol[64];
  for (int64_t l = b0; l < b1; l++) pol[l - b0] = recompute[l] ? REMAT_RECOMPUTE : REMAT_KEEP;
  remat_stage st = {.first_block = b0 - 1, .num_blocks = b1 > b0 ? b1 - b0 : 0, .policy = pol,
                    .inflight = ps->microbatches_held, .has_embedding = lo == 0,
                    .has_head = hi == L + 2, .accumulate = accumulate};
  remat_memplan mp;
  remat_error err;
  if (remat_memplan_build_stage(&mp, cfg, B, T, &st, &err)) {
    fprintf(stderr, "stage %lld: %s\n", (long long)s, err.msg);
    return 0;
  }
  size_t bytes = mp.peak_bytes;
  remat_memplan_free(&mp);
  return bytes;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* One process: every prefix count and random sets; evaluate == engine. */
static void one_stage(const remat_config *cfg, int64_t B, int64_t T, int *cases) {
  int64_t L = cfg->num_layers;
  remat_plan_problem pb;
  remat_error err;
  int rc = remat_plan_problem_from_model(&pb, cfg, B, T, 1, 1, (size_t)1 << 50, &err);
  CHECK(rc == 0);
  if (rc) return;
  uint8_t pol[64], rec[66];
  for (int trial = 0; trial < (int)L + 1 + 8; trial++) {
    if (trial <= L) {
      remat_policy_first_n(pol, L, trial);
    } else {
      for (int64_t l = 0; l < L; l++) pol[l] = (uint8_t)(next() & 1);
    }
    memset(rec, 0, sizeof rec);
    for (int64_t l = 0; l < L; l++) rec[l + 1] = pol[l] == REMAT_RECOMPUTE;
    int64_t layers = L + 2;
    remat_plan plan;
    CHECK(remat_plan_evaluate(&pb, &layers, rec, &plan, &err) == 0);
    remat_memplan mp;
    CHECK(remat_memplan_build(&mp, cfg, B, T, pol, &err) == 0);
    if (plan.stages[0].memory_bytes != mp.peak_bytes)
      printf("L=%lld C=%lld B=%lld T=%lld trial %d: planner %zu, engine %zu\n", (long long)L,
             (long long)cfg->channels, (long long)B, (long long)T, trial,
             plan.stages[0].memory_bytes, mp.peak_bytes);
    CHECK(plan.stages[0].memory_bytes == mp.peak_bytes);
    (*cases)++;

    /* With exactly this arena as the budget, the planner's optimum is
     * feasible, its figure is the engine's for its own choice, and it
     * recomputes as few blocks as the engine's search. */
    if (trial <= L) {
      remat_plan_problem_set_memory(&pb, mp.peak_bytes);
      remat_plan best;
      rc = remat_plan_solve(&pb, &best, &err);
      CHECK(rc == 0);
      if (rc == 0) {
        uint8_t brec[66] = {0};
        for (int64_t k = 0; k < best.total_recomputed; k++) brec[best.recomputed_all[k]] = 1;
        size_t eng = engine_stage_bytes(cfg, B, T, &best, 0, brec);
        CHECK(best.stages[0].memory_bytes == eng && eng <= mp.peak_bytes);
        int64_t n;
        size_t need;
        CHECK(remat_fewest_recompute(cfg, B, T, NULL, mp.peak_bytes, &n, &need, &err) == 0);
        CHECK(best.total_recomputed == n);
        remat_plan_free(&best);
      }
      remat_plan_problem_set_memory(&pb, (size_t)1 << 50);
    }
    remat_memplan_free(&mp);
    remat_plan_free(&plan);
  }
  remat_plan_problem_free(&pb);
}

/* Pipelines: the planner's optimum under a budget; every stage's figure is
 * the engine's arena for that stage, its layers, policy and in-flight count. */
static void stages(const remat_config *cfg, int64_t B, int64_t T, int64_t p, int64_t m,
                   int schedule, int *cases) {
  remat_plan_problem pb;
  remat_error err;
  int rc = remat_plan_problem_from_model(&pb, cfg, B, T, p, m, (size_t)1 << 50, &err);
  CHECK(rc == 0);
  if (rc) return;
  pb.schedule = schedule;
  /* A budget between the least and the most any split needs, so that some
   * stages recompute. */
  remat_plan lo;
  remat_plan_problem_set_memory(&pb, 1);
  rc = remat_plan_solve(&pb, &lo, &err);
  CHECK(rc == REMAT_EINFEASIBLE);
  size_t least = lo.min_budget_bytes;
  remat_plan_free(&lo);
  for (int k = 0; k < 3; k++) {
    remat_plan_problem_set_memory(&pb, least + least / 8 * (size_t)k);
    remat_plan plan;
    rc = remat_plan_solve(&pb, &plan, &err);
    CHECK(rc == 0);
    if (rc) continue;
    uint8_t rec[66] = {0};
    for (int64_t i = 0; i < plan.total_recomputed; i++) rec[plan.recomputed_all[i]] = 1;
    for (int64_t s = 0; s < p; s++) {
      size_t eng = engine_stage_bytes(cfg, B, T, &plan, s, rec);
      if (plan.stages[s].memory_bytes != eng)
        printf("p=%lld m=%lld stage %lld: planner %zu, engine %zu\n", (long long)p,
               (long long)m, (long long)s, plan.stages[s].memory_bytes, eng);
      CHECK(plan.stages[s].memory_bytes == eng);
      (*cases)++;
    }
    remat_plan_free(&plan);
  }
  remat_plan_problem_free(&pb);
}

int main(void) {
  /* built-in shapes and odd ones: C not a multiple of 16, V below 128,
   * B x T not a multiple of 16 */
  const char *cfgs[] = {"tiny", "small", "gpt2-124m", "3,40,5,100,48", "5,24,3,300,20",
                        "2,64,4,200,32"};
  const int64_t shapes[][2] = {{8, 64}, {1, 1}, {3, 7}, {4, 16}, {2, 20}};
  int cases = 0;
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    remat_config cfg;
    remat_error err;
    CHECK(remat_config_parse(cfgs[c], &cfg, &err) == 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t B = shapes[s][0], T = shapes[s][1];
      if (T > cfg.max_seq_len) continue;
      one_stage(&cfg, B, T, &cases);
      if (cfg.num_layers >= 3) {
        stages(&cfg, B, T, 2, 4, REMAT_SCHED_1F1B, &cases);
        stages(&cfg, B, T, 3, 2, REMAT_SCHED_1F1B, &cases);
        stages(&cfg, B, T, 3, 3, REMAT_SCHED_GPIPE, &cases);
      }
    }
  }
  /* the shape the planner was most off on: gpt2-124m, B=4, T=512 */
  remat_config g;
  remat_error err;
  CHECK(remat_config_parse("gpt2-124m", &g, &err) == 0);
  one_stage(&g, 4, 512, &cases);
  printf("%d stage figures compared\n", cases);
  CHECK(cases > 500);
  return test_summary("memory_model");
}
