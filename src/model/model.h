/* model.h: the model's inside, for its own file and for the tests that look
 * at it. The public part is include/remat/model.h. */
#ifndef REMAT_MODEL_INTERNAL_H
#define REMAT_MODEL_INTERNAL_H

#include "kernels/kernels.h"
#include "memory/layout.h"
#include "remat.h"

struct remat_model {
  remat_config cfg;
  remat_memplan mp;
  int64_t B, T;

  char *arena;        /* mp.peak_bytes, one allocation */
  float *params;      /* all parameters, llm.c order: the checkpoint body */
  float *grads;
  float *adam_m, *adam_v;
  float *p[REMAT_P_COUNT]; /* views of params */
  float *g[REMAT_P_COUNT]; /* views of grads */

  char *slot;       /* the one micro-batch in flight (mp's slot 0) */
  int32_t *inputs;  /* (B, T) in the slot */
  int32_t *targets; /* (B, T) in the slot */
  float *dresid;    /* (B, T, C) */
  char *work;       /* the transient workspace */

  size_t high_water;  /* cache for remat_model_arena_high_water */
  int64_t step;       /* optimizer steps taken */
  double recompute_s; /* seconds spent recomputing, since last taken */
};

/* remat_model_create in two steps, so a caller can learn what the plan
 * needs before the arena exists: the model and its plan, then the arena. */
int remat__model_plan(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                      const uint8_t *policy, remat_error *err);
int remat__model_allocate(remat_model *m, remat_error *err);

#endif
