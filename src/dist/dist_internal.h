/* dist_internal.h: what the files of src/dist share. */
#ifndef REMAT_DIST_INTERNAL_H
#define REMAT_DIST_INTERNAL_H

#include <mpi.h>

#include "remat.h"

struct remat_dist {
  MPI_Comm comm;
  int rank, size;
};

/* A failed MPI call as a remat_error: REMAT_EIO with MPI's own words. */
int remat__mpi_error(remat_error *err, int mpi_rc, const char *what);

#endif
