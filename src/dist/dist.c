/* dist.c: the job's ranks over MPI: start and end, checks that every rank
 * was started alike, and small collectives the command line needs. The
 * pipeline runtime is in pipeline.c. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dist/dist_internal.h"

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

int remat_dist_init(remat_dist **out, int *argc, char ***argv, remat_error *err) {
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
  *out = d;
  return 0;
}

void remat_dist_finalize(remat_dist *d, int code) {
  if (!d) return;
  if (code) MPI_Abort(d->comm, code);
  MPI_Finalize();
  remat__free(d);
}

int remat_dist_rank(const remat_dist *d) { return d->rank; }
int remat_dist_size(const remat_dist *d) { return d->size; }

/* FNV-1a, 64 bits: enough to tell two command lines apart. */
static uint64_t digest(const void *bytes, size_t n) {
  const unsigned char *p = bytes;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ (uint64_t)n;
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
