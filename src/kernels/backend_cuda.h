/* backend_cuda.h: the CUDA backend (cuda/backend_cuda.c and the .cu files
 * beside it), compiled in where CMake finds the CUDA toolkit
 * (REMAT_HAVE_CUDA). It is never the default: a run names it (--backend
 * cuda, REMAT_BACKEND=cuda). It has not yet run on a GPU (docs/cuda.md). */
#ifndef REMAT_BACKEND_CUDA_H
#define REMAT_BACKEND_CUDA_H

#include "base/base.h"
#include "kernels/backend.h"

/* The table, whether or not a GPU is here: its buffer_alloc returns NULL
 * where none is. */
const remat__backend *remat__backend_cuda(void);

/* 0 if a CUDA device is usable in this process; else REMAT_EINVAL with
 * cudaGetDeviceCount's answer in err, one line. */
int remat__cuda_usable(remat_error *err);

#endif
