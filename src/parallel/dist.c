/* dist.c: the job's ranks over MPI: start and end, the grid of pipeline
 * stages x replicas they form, checks that every rank was started alike,
 * and small collectives the command line needs. The pipeline runtime is in
 * pipeline.c, the data-parallel one in replicas.c, the two together on a
 * grid in grid.c. */
#include <mpi.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "parallel/parallel_internal.h"

int remat_dist_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                     "PMI_SIZE", "MPI_LOCALNRANKS", NULL};
  for (int i = 0; vars[i]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

int remat__mpi_error(remat_error *err, int mpi_rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(mpi_rc, msg, &len);
  return remat__errorf(err, REMAT_EIO, "MPI failed in %s: %.*s", what, len, msg);
}

int remat_dist_create(remat_dist **out, int *argc, char ***argv, remat_error *err) {
  *out = NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "MPI_Init");
  }
  remat_dist *d = remat__calloc(1, sizeof *d);
  if (!d) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  d->comm = MPI_COMM_WORLD;
  /* Errors (a peer that died among them) come back as codes, so a rank
   * can say what happened before the job ends. */
  MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(d->comm, &d->rank);
  MPI_Comm_size(d->comm, &d->size);
  d->P = d->size;
  d->D = 1;
  d->pipeline = d->replicas = d;
  *out = d;
  return 0;
}

static void free_sub(remat_dist *d, remat_dist *sub) {
  if (!sub || sub == d) return;
  MPI_Comm_free(&sub->comm);
  remat__free(sub);
}

void remat_dist_destroy(remat_dist *d, int code) {
  if (!d) return;
  if (code) MPI_Abort(d->comm, code);
  free_sub(d, d->pipeline);
  free_sub(d, d->replicas);
  if (d->outer) {
    free_sub(d->outer, d->outer->pipeline);
    free_sub(d->outer, d->outer->replicas);
  }
  free_sub(d, d->outer);
  free_sub(d, d->tensor);
  MPI_Finalize();
  remat__free(d);
}

/* The ranks that share color, ordered by key, as a remat_dist. */
static int split(remat_dist *d, int color, int key, remat_dist **out, remat_error *err) {
  remat_dist *sub = remat__calloc(1, sizeof *sub);
  if (!sub) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = MPI_Comm_split(d->comm, color, key, &sub->comm);
  if (rc != MPI_SUCCESS) {
    remat__free(sub);
    return remat__mpi_error(err, rc, "splitting the job into a grid");
  }
  MPI_Comm_set_errhandler(sub->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(sub->comm, &sub->rank);
  MPI_Comm_size(sub->comm, &sub->size);
  sub->P = sub->D = 1;
  sub->pipeline = sub->replicas = sub;
  *out = sub;
  return 0;
}

int remat_dist_grid(remat_dist *d, int64_t P, int64_t D, remat_error *err) {
  if (P < 1 || D < 1 || P * D != d->size)
    return remat__errorf(err, REMAT_EINVAL,
                         "a grid of %lld stages x %lld replicas needs %lld ranks, not %d",
                         (long long)P, (long long)D, (long long)(P * D), d->size);
  if (d->pipeline != d || d->replicas != d)
    return remat__errorf(err, REMAT_EINVAL, "the job's grid is already made");
  int s = (int)(d->rank / D), r = (int)(d->rank % D), rc;
  /* a line of the grid that holds every rank is the job itself */
  if (D > 1 && P > 1 && (rc = split(d, r, s, &d->pipeline, err))) return rc;
  if (P > 1 && D > 1 && (rc = split(d, s, r, &d->replicas, err))) {
    free_sub(d, d->pipeline);
    d->pipeline = d;
    return rc;
  }
  d->P = P;
  d->D = D;
  return 0;
}

int remat_dist_tensor_split(remat_dist *d, int64_t t, remat_dist **tensor, remat_dist **outer,
                            remat_error *err) {
  if (t < 1 || d->size % t)
    return remat__errorf(err, REMAT_EINVAL, "%d ranks do not split into tensor groups of %lld",
                         d->size, (long long)t);
  if (!d->tensor) {
    int q = (int)(d->rank / t), k = (int)(d->rank % t), rc;
    if ((rc = split(d, q, k, &d->tensor, err))) return rc;
    if ((rc = split(d, k, q, &d->outer, err))) return rc;
  }
  *tensor = d->tensor;
  *outer = d->outer;
  return 0;
}

int64_t remat_dist_stage(const remat_dist *d) { return d->rank / d->D; }
int64_t remat_dist_replica(const remat_dist *d) { return d->rank % d->D; }

int remat_dist_rank(const remat_dist *d) { return d->rank; }
int remat_dist_size(const remat_dist *d) { return d->size; }

/* FNV-1a, 64 bits: enough to tell two command lines apart. */
static uint64_t digest(const void *bytes, size_t n) {
  const unsigned char *p = bytes;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ (uint64_t)n;
}

int remat_dist_broadcast(remat_dist *d, void *bytes, size_t n, int root, remat_error *err) {
  if (n > (size_t)INT_MAX) return remat__errorf(err, REMAT_ERANGE, "a broadcast of %zu bytes", n);
  int rc = MPI_Bcast(bytes, (int)n, MPI_BYTE, root, d->comm);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "sharing rank 0's figures");
}

int remat_dist_all_same(remat_dist *d, const void *bytes, size_t n, int *same, int *first_diff,
                        remat_error *err) {
  uint64_t mine = digest(bytes, n);
  uint64_t *all = remat__malloc((size_t)d->size * sizeof *all);
  if (!all) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, d->comm);
  if (rc != MPI_SUCCESS) {
    remat__free(all);
    return remat__mpi_error(err, rc, "comparing the ranks' settings");
  }
  *same = 1;
  *first_diff = -1;
  for (int r = 0; r < d->size; r++)
    if (all[r] != all[0]) {
      *same = 0;
      *first_diff = r;
      break;
    }
  remat__free(all);
  return 0;
}

int remat_dist_gather_sizes(remat_dist *d, size_t value, size_t *all, remat_error *err) {
  uint64_t v = value;
  int rc = MPI_Gather(&v, 1, MPI_UINT64_T, d->rank == 0 ? (void *)all : NULL, 1, MPI_UINT64_T, 0,
                      d->comm);
  return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "gathering per-rank figures");
}

int remat_dist_all_ok(remat_dist *d, int ok, int *all_ok) {
  int rc = MPI_Allreduce(&ok, all_ok, 1, MPI_INT, MPI_LAND, d->comm);
  if (rc != MPI_SUCCESS) *all_ok = 0;
  return rc == MPI_SUCCESS ? 0 : REMAT_EIO;
}

int remat_dist_first_error(remat_dist *d, int rc, remat_error *err, int *failed_rank) {
  /* the lowest failing rank, by a reduction: nothing allocated, so this can
   * run after the arena exists without moving the measured peak */
  int mine = rc ? d->rank : d->size, first = d->size, code = 0;
  int mrc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, d->comm);
  if (first == d->size) first = -1;
  if (mrc == MPI_SUCCESS && first >= 0) {
    code = rc;
    mrc = MPI_Bcast(&code, 1, MPI_INT, first, d->comm);
  }
  if (mrc != MPI_SUCCESS) return remat__mpi_error(err, mrc, "comparing the ranks' start");
  *failed_rank = first;
  if (first < 0) return 0;
  remat_error msg = {0};
  if (d->rank == first && err) msg = *err;
  MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, first, d->comm);
  if (err) *err = msg;
  return code;
}
