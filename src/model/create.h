/* create.h: the model's interface to the libraries above it: to the trainer
 * (src/train), remat_model_create in two steps, so a caller can learn what
 * the plan needs before the arena exists (remat_trainer_planned_bytes): the
 * model and its plan, then the arena; to the runtimes (src/parallel), the
 * backend the model holds, which they use for its buffers. Not installed,
 * not part of the API (docs/architecture.md lists the interface headers). */
#ifndef REMAT_MODEL_CREATE_H
#define REMAT_MODEL_CREATE_H

#include "kernels/backend.h"
#include "remat/model.h"

int remat__model_plan(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                      const remat_stage *st, remat_error *err);
int remat__model_allocate(remat_model *m, remat_error *err);
/* The backend the model holds. */
const remat__backend *remat__model_backend(const remat_model *m);

#endif
