/* links.c: the links between the ranks mpirun started, measured with the
 * engine's own collectives, in the planner's units: the bytes a rank sends
 * of each collective as src/plan counts them ((n - 1) / n of the message
 * for a gather or a reduce-scatter over n ranks, twice that for a sum),
 * over the seconds the collective took, the median of several.
 *
 *   tp  the tensor group's sum (its reduce-scatter in rank order, then an
 *       all-gather) over every rank;
 *   pp  a pipeline's send from rank 0 to rank 1, half a round trip;
 *   dp  the replicas' reduce-scatter (an all-to-all, each rank adding the
 *       parts of its chunk) and the all-gather of the chunks, over every
 *       rank.
 *
 * Each collective runs once untimed first (the transport's set-up), and
 * the ranks meet at a barrier before each timed one, so a late rank's
 * start is not counted as the link's. */
#include <mpi.h>
#include <string.h>

#include "base/base.h"
#include "parallel/parallel_internal.h"

static double median(double *v, int n) {
  remat__sort_doubles(v, (size_t)n);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The replicas' reduce-scatter and all-gather of n floats (n a multiple
 * of the ranks): buf holds the message, tmp n floats more. */
static int replicas_round(remat_dist *d, float *buf, float *tmp, size_t n) {
  size_t q = n / (size_t)d->size;
  int rc = MPI_Alltoall(buf, (int)q, MPI_FLOAT, tmp, (int)q, MPI_FLOAT, d->comm);
  if (rc != MPI_SUCCESS) return rc;
  float *mine = buf + (size_t)d->rank * q;
  memcpy(mine, tmp, q * sizeof(float));
  for (int k = 1; k < d->size; k++)
    for (size_t i = 0; i < q; i++) mine[i] += tmp[(size_t)k * q + i];
  return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)q, MPI_FLOAT, d->comm);
}

/* One timed collective of `level` on n floats; *s its seconds on this rank
 * (the largest over the ranks is taken by the caller). */
static int round_of(remat_dist *d, int level, float *buf, float *tmp, size_t n, double *s) {
  int rc = MPI_Barrier(d->comm);
  double t0 = remat__now();
  if (rc == MPI_SUCCESS && level == 0) {
    rc = remat__tensor_sum_host(d, buf, n, tmp) ? MPI_ERR_NO_MEM : MPI_SUCCESS;
  } else if (rc == MPI_SUCCESS && level == 1) { /* rank 0 to 1 and back */
    if (d->rank == 0) {
      rc = MPI_Send(buf, (int)n, MPI_FLOAT, 1, 21, d->comm);
      if (rc == MPI_SUCCESS) rc = MPI_Recv(buf, (int)n, MPI_FLOAT, 1, 22, d->comm, MPI_STATUS_IGNORE);
    } else if (d->rank == 1) {
      rc = MPI_Recv(buf, (int)n, MPI_FLOAT, 0, 21, d->comm, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) rc = MPI_Send(buf, (int)n, MPI_FLOAT, 0, 22, d->comm);
    }
  } else if (rc == MPI_SUCCESS) {
    rc = replicas_round(d, buf, tmp, n);
  }
  *s = (remat__now() - t0) / (level == 1 ? 2.0 : 1.0);
  return rc;
}

int remat_dist_measure_links(remat_dist *d, const size_t bytes[3], int reps, double rates[3],
                             remat_error *err) {
  if (d->size < 2)
    return remat__errorf(err, REMAT_EINVAL, "measuring a link takes 2 or more ranks, not %d",
                         d->size);
  if (reps < 1 || reps > 1000)
    return remat__errorf(err, REMAT_EINVAL, "%d rounds: give 1 to 1000", reps);
  size_t most = 0, t = (size_t)d->size;
  for (int l = 0; l < 3; l++) {
    if (bytes[l] < sizeof(float) * t || bytes[l] > ((size_t)1 << 31))
      return remat__errorf(err, REMAT_EINVAL, "a link's message of %zu bytes: give %zu bytes to "
                           "2 GiB", bytes[l], sizeof(float) * t);
    if (bytes[l] > most) most = bytes[l];
  }
  size_t cap = most / sizeof(float) + t;
  float *buf = remat__calloc(cap, sizeof(float)), *tmp = remat__calloc(cap + 2 * t, sizeof(float));
  double *s = remat__calloc((size_t)reps, sizeof(double));
  int ok = buf && tmp && s, rc = MPI_SUCCESS;
  remat_dist_all_ok(d, ok, &ok);
  for (int l = 0; l < 3 && ok && rc == MPI_SUCCESS; l++) {
    size_t n = bytes[l] / sizeof(float) / t * t; /* whole chunks */
    double warm;
    rc = round_of(d, l, buf, tmp, n, &warm);
    for (int r = 0; r < reps && rc == MPI_SUCCESS; r++) {
      double mine;
      rc = round_of(d, l, buf, tmp, n, &mine);
      if (rc == MPI_SUCCESS) /* the slowest rank's: the collective ends there */
        rc = MPI_Allreduce(&mine, &s[r], 1, MPI_DOUBLE, MPI_MAX, d->comm);
    }
    if (rc != MPI_SUCCESS) break;
    double share = (double)(n * sizeof(float)) * (double)(t - 1) / (double)t;
    double counted = l == 1 ? (double)(n * sizeof(float)) : 2 * share;
    double sec = median(s, reps);
    rates[l] = sec > 0 ? counted / sec : 0;
  }
  remat__free(buf);
  remat__free(tmp);
  remat__free(s);
  if (!ok) return remat__errorf(err, REMAT_ENOMEM, "out of memory measuring the links");
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "measuring the links");
}
