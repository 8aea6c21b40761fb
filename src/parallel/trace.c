/* trace.c: a run's timeline across MPI ranks as one Chrome trace-event JSON
 * file (open it in Perfetto or chrome://tracing), shared by the pipeline and
 * the data-parallel runtimes. Each rank records its events into memory
 * reserved up front (a step never allocates); at the end rank 0 gathers
 * every rank's and writes them, one process (pid) per rank, with tracks
 * (tid) for what runs beside the rank's computation: recompute, and
 * communication in flight. A rank's track is named only where it has
 * spans, so a viewer shows no empty ones. One process (solo.c) records and
 * writes its own without MPI (the communicator MPI_COMM_NULL). */
#include <stdio.h>

#include "base/base.h"
#include "parallel/parallel_internal.h"

static const char *const ev_names[REMAT__EV_COUNT] = {
    [REMAT__EV_FORWARD] = "forward",
    [REMAT__EV_BACKWARD] = "backward",
    [REMAT__EV_RECOMPUTE] = "recompute",
    [REMAT__EV_RECV_ACT] = "receive activation",
    [REMAT__EV_SEND_ACT] = "send activation",
    [REMAT__EV_RECV_GRAD] = "receive gradient",
    [REMAT__EV_SEND_GRAD] = "send gradient",
    [REMAT__EV_REDUCE] = "reduce",
    [REMAT__EV_UPDATE] = "update",
    [REMAT__EV_ARENA] = "arena bytes",
    [REMAT__EV_WAIT] = "wait",
    [REMAT__EV_GATHER] = "gather",
    [REMAT__EV_INPUT_GRAD] = "input gradient (B)",
    [REMAT__EV_WEIGHT_GRAD] = "weight gradient (W)",
    [REMAT__EV_TENSOR_SUM] = "tensor sum",
    [REMAT__EV_TENSOR_SCATTER] = "tensor reduce-scatter",
    [REMAT__EV_TENSOR_GATHER] = "tensor all-gather",
    [REMAT__EV_TENSOR_MAX] = "tensor maximum",
};
static const char *const track_names[REMAT__TRACKS] = {
    [REMAT__TRACK_MAIN] = "compute",
    [REMAT__TRACK_RECOMPUTE] = "recompute",
    [REMAT__TRACK_REDUCE] = "reduce-scatter in flight",
    [REMAT__TRACK_GATHER] = "all-gather in flight",
    [REMAT__TRACK_TENSOR] = "tensor collectives",
};

void remat__trace_world(remat__trace *t, MPI_Comm world, int64_t tensor, size_t extra) {
  t->world = world;
  t->tensor = tensor;
  t->extra = extra;
}

int remat__trace_start(remat__trace *t, MPI_Comm comm, size_t cap, remat_error *err) {
  remat__free(t->ev);
  remat__trace keep = {.world = t->world, .tensor = t->tensor, .extra = t->extra};
  *t = keep;
  if (keep.tensor > 1) comm = keep.world;
  cap += keep.extra;
  t->ev = remat__malloc(cap * sizeof *t->ev);
  /* one start for every rank's clock, reached by a rank out of memory too
   * (its caller agrees on the outcome) */
  int rc = comm == MPI_COMM_NULL ? MPI_SUCCESS : MPI_Barrier(comm);
  if (!t->ev) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the trace");
  t->cap = cap;
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "starting the trace");
  t->t0 = remat__now();
  t->on = 1;
  return 0;
}

void remat__trace_add(remat__trace *t, remat__event e) {
  if (!t->on || t->n == t->cap) return;
  e.ts -= t->t0;
  t->ev[t->n++] = e;
}

void remat__trace_free(remat__trace *t) {
  remat__free(t->ev);
  *t = (remat__trace){0};
}

static void write_event(FILE *f, const remat__event *e, int rank, int *first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = 0;
  double us = e->ts * 1e6, dus = e->dur * 1e6;
  const char *name = ev_names[e->kind];
  if (e->kind == REMAT__EV_ARENA) {
    fprintf(f,
            "{\"name\":\"arena bytes\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,"
            "\"args\":{\"bytes\":%llu}}",
            rank, us, (unsigned long long)e->value);
    return;
  }
  char label[96];
  int n = snprintf(label, sizeof label, "%s", name);
  if (e->micro >= 0) n += snprintf(label + n, sizeof label - (size_t)n, " mb %lld", (long long)e->micro);
  if (e->layer >= 0) snprintf(label + n, sizeof label - (size_t)n, " layer %d", e->layer);
  fprintf(f,
          "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
          "\"dur\":%.3f,\"args\":{\"step\":%lld",
          label, name, rank, e->track, us, dus, (long long)e->step + 1);
  if (e->micro >= 0) fprintf(f, ",\"micro\":%lld", (long long)e->micro);
  if (e->layer >= 0) fprintf(f, ",\"layer\":%d", e->layer);
  fputs("}}", f);
}

/* Rank r's name and the names of the tracks its n events use. */
static void write_names(FILE *f, const remat__event *ev, size_t n, int r, int64_t P, int64_t R,
                        int64_t T, int *first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = 0;
  char name[96]; /* world rank r = stage * R + replica (times T, + tensor rank) */
  int q = (int)(r / T);
  if (T > 1)
    snprintf(name, sizeof name, "rank %d: stage %d, replica %d, tensor rank %d", r,
             (int)(q / R), (int)(q % R), (int)(r % T));
  else if (P == 1 && R == 1)
    snprintf(name, sizeof name, "one process");
  else if (P > 1 && R > 1)
    snprintf(name, sizeof name, "rank %d: stage %d, replica %d", r, (int)(r / R), (int)(r % R));
  else
    snprintf(name, sizeof name, "rank %d: %s %d", r, P > 1 ? "stage" : "replica", r);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}", r,
          name);
  int used[REMAT__TRACKS] = {0};
  for (size_t i = 0; i < n; i++)
    if (ev[i].kind != REMAT__EV_ARENA) used[ev[i].track] = 1; /* a counter has no track */
  for (int k = 0; k < REMAT__TRACKS; k++)
    if (used[k])
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
              "\"args\":{\"name\":\"%s\"}}",
              r, k, track_names[k]);
}

/* The largest event count of the other ranks, on rank 0, which reserves
 * room for it and says on every rank whether it could: a rank 0 out of
 * memory ends the write on every rank before any events are sent. */
static int reserve(remat__trace *t, MPI_Comm comm, int rank, remat__event **buf, uint64_t *most,
                   remat_error *err) {
  uint64_t n = rank ? t->n : 0;
  int ok = 1;
  int rc = MPI_Reduce(&n, most, 1, MPI_UINT64_T, MPI_MAX, 0, comm);
  if (rank == 0 && rc == MPI_SUCCESS && *most && !(*buf = remat__malloc(*most * sizeof **buf)))
    ok = 0;
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (rc != MPI_SUCCESS) return remat__mpi_error(err, rc, "gathering the trace");
  return ok ? 0 : remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the trace");
}

int remat__trace_write(remat__trace *t, MPI_Comm comm, int64_t P, int64_t R, const char *path,
                       remat_error *err) {
  if (!t->on) return remat__errorf(err, REMAT_EINVAL, "tracing was not started");
  int64_t T = t->tensor > 1 ? t->tensor : 1;
  if (T > 1) comm = t->world;
  int rank = 0, size = 1; /* MPI_COMM_NULL: one process, no MPI */
  remat__event *buf = NULL;
  uint64_t most = 0;
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int rc = reserve(t, comm, rank, &buf, &most, err);
    if (rc) return rc;
  }
  if (rank != 0) { /* one message, empty when there are no events */
    int rc = MPI_Send(t->ev, (int)(t->n * sizeof(remat__event)), MPI_BYTE, 0, 22, comm);
    return rc == MPI_SUCCESS ? 0 : remat__mpi_error(err, rc, "gathering the trace");
  }
  remat_error oerr;
  FILE *f = remat_output_stream_open(path, "trace", &oerr);
  int ok = f != NULL, first = 1;
  if (f) {
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    write_names(f, t->ev, t->n, 0, P, R, T, &first);
    for (size_t i = 0; i < t->n; i++) write_event(f, &t->ev[i], 0, &first);
  }
  /* every rank's events are received even when the file cannot be
   * written, so no rank waits on a send that is never matched; the caller
   * agrees on the outcome (remat_job_trace_write) */
  for (int r = 1; r < size; r++) {
    MPI_Status st;
    int bytes = 0;
    if (MPI_Recv(buf, (int)(most * sizeof *buf), MPI_BYTE, r, 22, comm, &st) != MPI_SUCCESS ||
        MPI_Get_count(&st, MPI_BYTE, &bytes) != MPI_SUCCESS)
      ok = 0;
    size_t got = (size_t)bytes / sizeof *buf;
    if (f && ok) write_names(f, buf, got, r, P, R, T, &first);
    for (size_t i = 0; f && ok && i < got; i++) write_event(f, &buf[i], r, &first);
  }
  remat__free(buf);
  if (f) {
    fputs("\n]}\n", f);
    ok = ok && !ferror(f);
    ok = fclose(f) == 0 && ok;
  }
  if (!f) return remat__errorf(err, oerr.code, "cannot write the trace: %s", oerr.msg);
  if (!ok) return remat__errorf(err, REMAT_EIO, "cannot write the trace '%s'", path);
  return 0;
}
