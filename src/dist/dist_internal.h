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

/* ------------------------------------------------ timeline (trace.c) */

enum { REMAT__EV_FORWARD, REMAT__EV_BACKWARD, REMAT__EV_RECOMPUTE, REMAT__EV_RECV_ACT,
       REMAT__EV_SEND_ACT, REMAT__EV_RECV_GRAD, REMAT__EV_SEND_GRAD, REMAT__EV_REDUCE,
       REMAT__EV_UPDATE, REMAT__EV_ARENA, REMAT__EV_WAIT, REMAT__EV_GATHER, REMAT__EV_COUNT };
/* A rank's tracks: its computation (and its waits), recompute drawn apart,
 * and a replica's collectives in flight, from post to completion. */
enum { REMAT__TRACK_MAIN, REMAT__TRACK_RECOMPUTE, REMAT__TRACK_REDUCE, REMAT__TRACK_GATHER,
       REMAT__TRACKS };

typedef struct remat__event {
  double ts, dur;        /* seconds: remat__now() when added, since the start once in */
  int64_t step, micro;   /* micro: -1 for none */
  uint64_t value;        /* REMAT__EV_ARENA: live bytes (a counter, not a span) */
  int16_t kind, track;
  int32_t layer;         /* -1 for none */
} remat__event;

typedef struct remat__trace {
  remat__event *ev;
  size_t n, cap;
  int on;
  double t0;
} remat__trace;

/* Reserves cap events and starts every rank's clock together (a barrier). */
int remat__trace_start(remat__trace *t, MPI_Comm comm, size_t cap, remat_error *err);
/* Records e (ts in remat__now()'s seconds); once full, drops the rest. */
void remat__trace_add(remat__trace *t, remat__event e);
/* Rank 0 gathers every rank's events and writes the file; every rank calls
 * it. role names a rank's part ("stage", "replica"). */
int remat__trace_write(remat__trace *t, MPI_Comm comm, const char *role, const char *path,
                       remat_error *err);
void remat__trace_free(remat__trace *t);

#endif
