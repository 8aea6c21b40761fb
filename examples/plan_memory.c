/* plan_memory.c: remat used as a library by a program outside its tree.
 * It plans the memory of GPT-2 124M with every block kept and with every
 * block recomputed, lets the pipeline planner place the model on 4 stages
 * under a budget, and trains a small model for 2 steps on the embedded
 * corpus. Built against an installed remat by examples/CMakeLists.txt
 * (find_package) or by hand:
 *
 *   cc -std=c11 plan_memory.c $(pkg-config --cflags --libs remat) -o plan_memory
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"

static int fail(const char *what, const remat_error *err) {
  fprintf(stderr, "plan_memory: %s: %s\n", what, err->msg);
  return 1;
}

/* The arena one step needs with every block under `policy`. */
static int arena(const remat_config *cfg, int policy, size_t *bytes, remat_error *err) {
  uint8_t *pol = malloc((size_t)cfg->num_layers);
  if (!pol) return REMAT_ENOMEM;
  memset(pol, policy, (size_t)cfg->num_layers);
  remat_memplan *mp;
  int rc = remat_memplan_create(&mp, cfg, 4, 64, pol, err);
  if (rc == 0) {
    *bytes = remat_memplan_peak_bytes(mp);
    remat_memplan_destroy(mp);
  }
  free(pol);
  return rc;
}

static int plan(const remat_config *cfg, remat_error *err) {
  remat_plan_problem pb;
  /* 4 stages, 8 micro-batches of 4 x 64 tokens, 800 MiB per stage */
  int rc = remat_plan_problem_from_model(&pb, cfg, 4, 64, 4, 8, (size_t)800 << 20, err);
  if (rc) return rc;
  remat_plan pl;
  if ((rc = remat_plan_solve(&pb, &pl, err)) == 0) {
    char *text;
    if ((rc = remat_plan_format(&pb, &pl, REMAT_PLAN_FORMAT_TABLE, &text, err)) == 0) {
      fputs(text, stdout);
      remat_plan_text_free(text);
    }
    remat_plan_free(&pl);
  } else if (rc == REMAT_EINFEASIBLE) {
    remat_plan_free(&pl);
  }
  remat_plan_problem_free(&pb);
  return rc;
}

static int train(remat_error *err) {
  remat_config cfg;
  int rc = remat_config_parse("2,64,4,256,64", &cfg, err);
  if (rc) return rc;
  remat_tokens tok;
  if ((rc = remat_corpus_tokens(&tok, 1 << 16, err))) return rc;
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = 4;
  o.T = 64;
  o.steps = 2;
  remat_trainer *tr = NULL;
  if ((rc = remat_trainer_create(&tr, &cfg, NULL, &tok, &o, err))) goto done;
  if ((rc = remat_trainer_allocate(tr, err))) goto done;
  remat_model_init_weights(remat_trainer_model(tr), 1);
  for (int64_t s = 0; s < o.steps; s++) {
    remat_step_stats st;
    if ((rc = remat_trainer_step(tr, &st, err))) goto done;
    printf("step %lld: loss %.4f\n", (long long)st.step, st.loss);
  }
done:
  remat_trainer_destroy(tr);
  remat_tokens_free(&tok);
  return rc;
}

int main(void) {
  printf("remat %s (headers %d.%d.%d)\n", remat_version(), REMAT_VERSION_MAJOR,
         REMAT_VERSION_MINOR, REMAT_VERSION_PATCH);
  remat_error err;
  remat_config cfg;
  if (remat_config_parse("gpt2-124m", &cfg, &err)) return fail("config", &err);
  size_t kept, recomputed;
  char a[32], b[32];
  if (arena(&cfg, REMAT_KEEP, &kept, &err) || arena(&cfg, REMAT_RECOMPUTE, &recomputed, &err))
    return fail("memory plan", &err);
  printf("gpt2-124m, 4 x 64 tokens: %s with every block kept, %s recomputed\n",
         remat_format_bytes(kept, a, sizeof a), remat_format_bytes(recomputed, b, sizeof b));
  if (plan(&cfg, &err)) return fail("pipeline plan", &err);
  if (train(&err)) return fail("training", &err);
  return 0;
}
