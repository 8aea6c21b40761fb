/* dist_internal.h: what the files of src/dist share. */
#ifndef REMAT_DIST_INTERNAL_H
#define REMAT_DIST_INTERNAL_H

#include <mpi.h>

#include "remat.h"

struct remat_dist {
  MPI_Comm comm;
  int rank, size;
  /* the grid (remat_dist_grid): P stages x D replicas; pipeline holds this
   * rank's replica's P ranks, replicas its stage's D ranks (either may be
   * this object itself, when it has all the job's ranks) */
  int64_t P, D;
  remat_dist *pipeline, *replicas;
};

/* The grid's uses of the pipeline and replica runtimes (grid.c). */
int remat__pipeline_micro_batches(void *ctx, remat_trainer *tr, double *loss_sum,
                                  remat_error *err);
/* Makes the pipeline replica reps->rank of reps->size; world: every rank,
 * for the trace. */
void remat__pipeline_join(remat_pipeline *pl, remat_dist *world, remat_dist *reps);
int remat__pipeline_exchange_tied(remat_pipeline *pl, float *g, size_t n, remat_error *err);
int remat__pipeline_norm(remat_pipeline *pl, const double *layers, int64_t n, double *total,
                         remat_error *err);
/* remat_pipeline_gather_params from the stage's parameters in p (whole
 * tensors, as a stage without replicas holds them). */
int remat__pipeline_gather_flat(remat_pipeline *pl, const float *p, float *full,
                                remat_error *err);
/* What a step's first micro-batch needs: the arena's regions, counters at zero. */
void remat__replicas_begin_step(remat_replicas *rp);
int remat__replicas_after_backward(remat_replicas *rp, remat_trainer *tr, remat_error *err);
/* The squared sums of the stage's layers in model order (its units but a
 * lone head's tied copy), from every replica's shards; *n how many. */
int remat__replicas_layer_sums(remat_replicas *rp, double *layers, int64_t *n, remat_error *err);
int remat__replicas_update(remat_replicas *rp, remat_trainer *tr, float lr, float norm,
                           remat_error *err);

/* A failed MPI call as a remat_error: REMAT_EIO with MPI's own words. */
int remat__mpi_error(remat_error *err, int mpi_rc, const char *what);

#endif
