/* create.h: remat_model_create in two steps, so a caller can learn what the
 * plan needs before the arena exists: the model and its plan, then the
 * arena. The model's interface to the trainer (src/train), which plans
 * before it allocates (remat_trainer_planned_bytes); not installed, not
 * part of the API (docs/architecture.md lists the interface headers). */
#ifndef REMAT_MODEL_CREATE_H
#define REMAT_MODEL_CREATE_H

#include "remat/model.h"

int remat__model_plan(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                      const remat_stage *st, remat_error *err);
int remat__model_allocate(remat_model *m, remat_error *err);

#endif
