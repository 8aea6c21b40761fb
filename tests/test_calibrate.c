/* test_calibrate.c: remat_calibrate times a GPT-2's layers on this machine
 * and remat_plan_problem_set_times hands them to the planner; a Llama's
 * block's W is timed apart too. The figures
 * are positive, a block's weight gradient is part of its backward, its full
 * rebuild costs about its forward (the same kernels less the last product)
 * and more than its middle rebuild (two layernorms and a GELU), and a plan
 * solved on them is in seconds and consistent with them. Timing bounds are
 * wide: the check is that each figure measures what it names, not speed. */
#include <stdio.h>

#include "remat.h"
#include "test_util.h"

int main(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("4,256,8,512,128", &cfg, &err) == 0);
  remat_layer_times t;
  CHECK(remat_calibrate(&cfg, 4, 128, 5, &t, &err) == 0);
  printf("block: forward %.3g s, backward %.3g s (W %.3g s), rebuild %.3g s full, %.3g s "
         "middle; embedding %.3g + %.3g s, head %.3g + %.3g s\n",
         t.block_fwd, t.block_bwd, t.block_wgrad, t.block_recompute, t.block_middle, t.embed_fwd,
         t.embed_bwd, t.head_fwd, t.head_bwd);
  CHECK(t.rounds == 5);
  CHECK(t.block_fwd > 0 && t.block_wgrad > 0 && t.block_bwd > t.block_wgrad);
  CHECK(t.embed_fwd > 0 && t.embed_bwd > 0 && t.head_fwd > 0 && t.head_bwd > 0);
  CHECK(t.block_recompute > 0.3 * t.block_fwd && t.block_recompute < 3 * t.block_fwd);
  CHECK(t.block_middle > 0 && t.block_middle < t.block_recompute);
  CHECK(t.block_bwd > 0.5 * t.block_fwd && t.block_bwd < 10 * t.block_fwd);
  CHECK(remat_calibrate(&cfg, 4, 128, 0, &t, &err) == REMAT_EINVAL);

  remat_plan_problem pb;
  CHECK(remat_calibrate(&cfg, 4, 128, 3, &t, &err) == 0);
  CHECK(remat_plan_problem_from_model(&pb, &cfg, 4, 128, 2, 4, (size_t)1 << 40, &err) == 0);
  remat_plan_problem_set_times(&pb, &t);
  remat_plan plan;
  CHECK(remat_plan_solve(&pb, &plan, &err) == 0);
  /* nothing recomputes under a budget this large: each stage's time is its
   * layers' forward and backward, in seconds */
  double want = t.embed_fwd + t.embed_bwd + t.head_fwd + t.head_bwd +
                (double)cfg.num_layers * (t.block_fwd + t.block_bwd);
  double got = 0;
  for (int64_t s = 0; s < plan.num_stages; s++) got += plan.stages[s].time;
  CHECKF(got > want * (1 - 1e-9) && got < want * (1 + 1e-9) && plan.total_recomputed == 0,
         "the plan's stage times (%.6g s) are the calibrated layers' (%.6g s)", got, want);
  CHECK(pb.time_unit[0] == 's' && pb.time_unit[1] == 0);
  remat_plan_free(&plan);
  remat_plan_problem_free(&pb);

  /* a Llama's blocks run B and W apart too: its W is timed, a part of its
   * backward */
  CHECK(remat_config_parse("llama:4,128,4,2,352,256,64", &cfg, &err) == 0);
  CHECK(remat_calibrate(&cfg, 2, 64, 3, &t, &err) == 0);
  CHECKF(t.block_wgrad > 0 && t.block_bwd > t.block_wgrad,
         "a Llama block: W %.3g s of its backward's %.3g s", t.block_wgrad, t.block_bwd);
  return test_summary("calibrate");
}
