/* engine.h: the training engine's declarations live in include/remat.h
 * (section "training"); this header gathers what its files and tests use. */
#ifndef REMAT_ENGINE_H
#define REMAT_ENGINE_H

#include "kernels/kernels.h"
#include "memory/layout.h"
#include "remat.h"

#endif
