/* links.c: the links between the ranks mpirun started, measured with the
 * engine's own collectives, in the planner's units: the bytes a rank sends
 * of each collective as src/plan counts them ((n - 1) / n of the message
 * for a gather or a reduce-scatter over n ranks, twice that for a sum),
 * over the seconds the collective took, the median of several.
 *
 *   tp  the tensor group's sum (its reduce-scatter in rank order, then an
 *       all-gather) over the first node's ranks, as tensor ranks share a
 *       node;
 *   pp  a pipeline's send from rank 0 to the first rank of the next node
 *       (rank 1 on one node), half a round trip;
 *   dp  the replicas' reduce-scatter (an all-to-all, each rank adding the
 *       parts of its chunk) and the all-gather of the chunks, over one rank
 *       of each node (every rank on one node).
 *
 * Ranks are taken to fill nodes in order, `node` a node (mpirun's
 * default placement by slot).
 *
 * Each collective runs once untimed first (the transport's set-up), and
 * the ranks meet at a barrier before each timed one, so a late rank's
 * start is not counted as the link's. */
#include <mpi.h>
#include <string.h>

#include "base/base.h"
#include "parallel/parallel_internal.h"

/* The replicas' reduce-scatter and all-gather of n floats (n a multiple
 * of the ranks): buf holds the message, tmp n floats more. */
static int replicas_round(const remat_dist *g, float *buf, float *tmp, size_t n) {
  size_t q = n / (size_t)g->size;
  int rc = MPI_Alltoall(buf, (int)q, MPI_FLOAT, tmp, (int)q, MPI_FLOAT, g->comm);
  if (rc != MPI_SUCCESS) return rc;
  float *mine = buf + (size_t)g->rank * q;
  memcpy(mine, tmp, q * sizeof(float));
  for (int k = 1; k < g->size; k++)
    for (size_t i = 0; i < q; i++) mine[i] += tmp[(size_t)k * q + i];
  return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)q, MPI_FLOAT, g->comm);
}

/* One timed collective of `level` on n floats over the level's ranks g;
 * *s its seconds on this rank (the caller takes the slowest rank's). */
static int round_of(remat_dist *g, int level, float *buf, float *tmp, size_t n, double *s) {
  int rc = MPI_Barrier(g->comm);
  double t0 = remat__now();
  if (rc == MPI_SUCCESS && level == 0) {
    rc = remat__tensor_sum_host(g, buf, n, tmp) ? MPI_ERR_NO_MEM : MPI_SUCCESS;
  } else if (rc == MPI_SUCCESS && level == 1) { /* there and back */
    int peer = 1 - g->rank;
    rc = g->rank == 0 ? MPI_Send(buf, (int)n, MPI_FLOAT, peer, 21, g->comm)
                      : MPI_Recv(buf, (int)n, MPI_FLOAT, peer, 21, g->comm, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS)
      rc = g->rank == 0
               ? MPI_Recv(buf, (int)n, MPI_FLOAT, peer, 22, g->comm, MPI_STATUS_IGNORE)
               : MPI_Send(buf, (int)n, MPI_FLOAT, peer, 22, g->comm);
  } else if (rc == MPI_SUCCESS) {
    rc = replicas_round(g, buf, tmp, n);
  }
  *s = (remat__now() - t0) / (level == 1 ? 2.0 : 1.0);
  return rc;
}

int remat_dist_node_of(remat_dist *d, int *node_of, remat_error *err) {
  MPI_Comm node = MPI_COMM_NULL;
  int leader = d->rank; /* a node's lowest rank names it */
  int rc = MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(&leader, 1, MPI_INT, 0, node);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  if (rc == MPI_SUCCESS) rc = MPI_Allgather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, d->comm);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "finding the ranks' nodes");
  int nodes = 0;
  for (int r = 0; r < d->size; r++) /* a leader is the first rank of its node */
    node_of[r] = node_of[r] == r ? nodes++ : node_of[node_of[r]];
  return 0;
}

int remat_nodes_in_order(const int *node_of, int n) {
  int k = 1;
  while (k < n && node_of[k] == node_of[0]) k++;
  for (int r = 0; r < n; r++)
    if (node_of[r] != r / k) return 0;
  return n > 0 ? k : 0;
}

void remat_dist_link_ranks(int size, int node, int level, int *first, int *step, int *count) {
  if (node < 1 || node > size) node = size;
  int nodes = (size + node - 1) / node;
  *first = 0;
  *step = level == 0 || nodes == 1 ? 1 : node; /* pipeline and replicas: across nodes */
  *count = level == 0 ? node : level == 1 ? 2 : nodes > 1 ? nodes : size;
}

/* Level l's rate over its ranks (g: them; NULL on a rank outside). */
static int measure_level(remat_dist *g, int l, size_t bytes, int reps, float *buf, float *tmp,
                         double *s, double *rate) {
  *rate = 0;
  if (!g) return MPI_SUCCESS;
  size_t t = (size_t)g->size, n = bytes / sizeof(float) / t * t; /* whole chunks */
  double warm;
  int rc = round_of(g, l, buf, tmp, n, &warm);
  for (int r = 0; r < reps && rc == MPI_SUCCESS; r++) {
    double mine;
    rc = round_of(g, l, buf, tmp, n, &mine);
    if (rc == MPI_SUCCESS) /* the slowest rank's: the collective ends there */
      rc = MPI_Allreduce(&mine, &s[r], 1, MPI_DOUBLE, MPI_MAX, g->comm);
  }
  if (rc != MPI_SUCCESS) return rc;
  double share = (double)(n * sizeof(float)) * (double)(t - 1) / (double)t;
  double counted = l == 1 ? (double)(n * sizeof(float)) : 2 * share;
  remat__sort_doubles(s, (size_t)reps);
  double sec = reps % 2 ? s[reps / 2] : 0.5 * (s[reps / 2 - 1] + s[reps / 2]);
  *rate = sec > 0 ? counted / sec : 0;
  return MPI_SUCCESS;
}

int remat_dist_measure_links(remat_dist *d, int node, const size_t bytes[3], int reps,
                             double rates[3], remat_error *err) {
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
  for (int l = 0; l < 3 && ok; l++) {
    int first, step, count;
    remat_dist_link_ranks(d->size, node, l, &first, &step, &count);
    int in = d->rank >= first && (d->rank - first) % step == 0 && (d->rank - first) / step < count;
    remat_dist g = {.size = count}, *mine = NULL;
    rc = MPI_Comm_split(d->comm, in ? 0 : MPI_UNDEFINED, d->rank, &g.comm);
    if (rc == MPI_SUCCESS && in) {
      MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(g.comm, &g.rank);
      mine = count >= 2 ? &g : NULL; /* a level of one rank has no link */
    }
    if (rc == MPI_SUCCESS) rc = measure_level(mine, l, bytes[l], reps, buf, tmp, s, &rates[l]);
    if (in && g.comm != MPI_COMM_NULL) MPI_Comm_free(&g.comm);
    /* every rank the same figures, and the same verdict */
    int failed = rc != MPI_SUCCESS, any = 0;
    if (MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, d->comm) != MPI_SUCCESS || any) {
      ok = 0;
      if (rc == MPI_SUCCESS) rc = MPI_ERR_OTHER;
      break;
    }
    rc = MPI_Bcast(&rates[l], 1, MPI_DOUBLE, 0, d->comm);
  }
  remat__free(buf);
  remat__free(tmp);
  remat__free(s);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "measuring the links");
  if (!ok) return remat__errorf(err, REMAT_ENOMEM, "out of memory measuring the links");
  return 0;
}
