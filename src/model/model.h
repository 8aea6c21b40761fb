/* model.h: what the model's files and the tests that look inside it use:
 * the kernels and the layout tables. The public part is include/remat/model.h. */
#ifndef REMAT_MODEL_INTERNAL_H
#define REMAT_MODEL_INTERNAL_H

#include "kernels/kernels.h"
#include "memory/layout.h"
#include "remat.h"

#endif
