/* schedule.c: the schedule table, one row per schedule (its name, its
 * backward, its chunks, its layout, what it holds in flight, where the
 * runtime runs it, its order and its stream generator), and everything
 * that asks it: names, checks, virtual stages, the streams and what they
 * hold. A new schedule is one row here and its generator in streams.c.
 * See include/remat/schedule.h. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "schedule/streams.h"

#define MAX_OPS ((int64_t)1 << 24)

static const remat_schedule_info table[REMAT_SCHED_COUNT] = {
    [REMAT_SCHED_1F1B] = {.name = "1f1b", .chunks_default = 1, .chunks_min = 1, .chunks_max = 1,
                          .one_chunk = -1, .flight = REMAT_FLIGHT_DEPTH, .runs = REMAT_RUNS_ANY,
                          .op = remat__sched_op_1f1b, .streams = remat__sched_streams_1f1b},
    [REMAT_SCHED_GPIPE] = {.name = "gpipe", .chunks_default = 1, .chunks_min = 1,
                           .chunks_max = 1, .one_chunk = -1, .flight = REMAT_FLIGHT_ALL,
                           .runs = REMAT_RUNS_ANY, .op = remat__sched_op_gpipe,
                           .streams = remat__sched_streams_gpipe},
    [REMAT_SCHED_INTERLEAVED] = {.name = "interleaved", .chunks_default = 2, .chunks_min = 2,
                                 .one_chunk = REMAT_SCHED_1F1B, .groups_of_p = 1,
                                 .runs = REMAT_RUNS_PIPELINE,
                                 .streams = remat__sched_streams_interleaved},
    [REMAT_SCHED_ZBH1] = {.name = "zb-h1", .split = 1, .chunks_default = 1, .chunks_min = 1,
                          .chunks_max = 1, .one_chunk = -1, .flight = REMAT_FLIGHT_DEPTH,
                          .runs = REMAT_RUNS_PIPELINE, .streams = remat__sched_streams_zbh1},
    [REMAT_SCHED_ZBV] = {.name = "zbv", .split = 1, .chunks_default = 2, .chunks_min = 2,
                         .chunks_max = 2, .one_chunk = -1, .layout = REMAT_LAYOUT_V,
                         .head_from_entry = 1, .runs = REMAT_RUNS_PIPELINE,
                         .streams = remat__sched_streams_zbv},
};

const remat_schedule_info *remat_schedule_get(int s) {
  return s >= 0 && s < REMAT_SCHED_COUNT ? &table[s] : NULL;
}

const char *remat_plan_schedule_name(int s) {
  return s >= 0 && s < REMAT_SCHED_COUNT ? table[s].name : "?";
}

int remat_plan_schedule_parse(const char *s, int *out) {
  for (int i = 0; i < REMAT_SCHED_COUNT; i++)
    if (s && strcmp(s, table[i].name) == 0) return *out = i, 0;
  return -1;
}

static int in_set(const remat_schedule_info *row, int set) {
  if (set == REMAT_SCHEDULES_CHUNKED) return row->chunks_max != 1;
  if (set == REMAT_SCHEDULES_ONE_CHUNK) return row->chunks_min == 1;
  return 1;
}

const char *remat_schedule_names(char *buf, size_t cap, int set, const char *last) {
  int n = 0, k = 0;
  for (int i = 0; i < REMAT_SCHED_COUNT; i++) n += in_set(&table[i], set);
  size_t at = 0;
  if (cap) buf[0] = '\0';
  for (int i = 0; i < REMAT_SCHED_COUNT && at < cap; i++) {
    if (!in_set(&table[i], set)) continue;
    const char *sep = k == 0 ? "" : k == n - 1 ? " " : ", ";
    int w = snprintf(buf + at, cap - at, "%s%s%s%s", sep, k && k == n - 1 ? last : "",
                     k && k == n - 1 ? " " : "", table[i].name);
    at += w > 0 ? (size_t)w : 0;
    k++;
  }
  return buf;
}

void remat_schedule_op(int schedule, int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k,
                       int *bwd) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  (row && row->op ? row->op : remat__sched_op_1f1b)(p, m, s, q, k, bwd);
}

int64_t remat_schedule_chunks(int schedule, int64_t chunks) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  return chunks > 0 ? chunks : row ? row->chunks_default : 1;
}

static int too_long(int schedule, int64_t p, int64_t m, int64_t v, remat_error *err) {
  if ((double)p * (double)m * (double)v * 3 <= (double)MAX_OPS) return 0;
  return remat__errorf(err, REMAT_ERANGE, "%s over %lld stages, %lld micro-batches and %lld "
                       "chunks makes streams of more than %lld operations",
                       remat_plan_schedule_name(schedule), (long long)p, (long long)m,
                       (long long)v, (long long)MAX_OPS);
}

/* v outside the row's chunks: what it runs instead. */
static int bad_chunks(const remat_schedule_info *row, int64_t v, remat_error *err) {
  char names[96];
  if (row->chunks_max == 1)
    return remat__errorf(err, REMAT_EINVAL, "%s runs one chunk per rank (%lld given); chunks "
                         "go with %s", row->name, (long long)v,
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_CHUNKED,
                                              "or"));
  if (row->chunks_min == row->chunks_max)
    return remat__errorf(err, REMAT_EINVAL, "%s needs exactly %lld chunks per rank (%lld given)",
                         row->name, (long long)row->chunks_min, (long long)v);
  if (v < row->chunks_min)
    return remat__errorf(err, REMAT_EINVAL, "%s needs at least %lld chunks per rank (%lld "
                         "given)%s%s", row->name, (long long)row->chunks_min, (long long)v,
                         row->one_chunk >= 0 ? "; with one chunk it is " : "",
                         row->one_chunk >= 0 ? remat_plan_schedule_name(row->one_chunk) : "");
  return remat__errorf(err, REMAT_EINVAL, "%s runs %lld to %lld chunks per rank (%lld given)",
                       row->name, (long long)row->chunks_min, (long long)row->chunks_max,
                       (long long)v);
}

int remat_schedule_check(int schedule, int64_t p, int64_t m, int64_t v, int64_t layers,
                         remat_error *err) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  int rc;
  if (!row) return remat__errorf(err, REMAT_EINVAL, "schedule %d is not a schedule", schedule);
  if (p < 1 || m < 1)
    return remat__errorf(err, REMAT_EINVAL, "a schedule needs at least one stage and one "
                         "micro-batch (stages %lld, micro-batches %lld)", (long long)p,
                         (long long)m);
  if (v < row->chunks_min && row->chunks_max != 1) return bad_chunks(row, v, err);
  if (row->groups_of_p && m % p != 0)
    return remat__errorf(err, REMAT_EINVAL, "%s needs the micro-batches to be a multiple of the "
                         "stages in Megatron's order: %lld micro-batches, %lld stages",
                         row->name, (long long)m, (long long)p);
  if (v < row->chunks_min || (row->chunks_max && v > row->chunks_max))
    return bad_chunks(row, v, err);
  /* the chunked schedules' memory comes from their streams */
  if (v > 1 && (rc = too_long(schedule, p, m, v, err))) return rc;
  if (layers > 0 && p * v > layers)
    return remat__errorf(err, REMAT_EINVAL, "%s with %lld stages of %lld chunks needs %lld "
                         "layers, the model has %lld", row->name, (long long)p, (long long)v,
                         (long long)(p * v), (long long)layers);
  return 0;
}

int64_t remat_schedule_virtual_stage(int schedule, int64_t p, int64_t r, int64_t c) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  if (row && row->layout == REMAT_LAYOUT_V) return c == 0 ? r : 2 * p - 1 - r;
  return c * p + r;
}

void remat_schedule_rank_of(int schedule, int64_t p, int64_t vs, int64_t *r, int64_t *c) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  if (row && row->layout == REMAT_LAYOUT_V) {
    *c = vs >= p;
    *r = vs < p ? vs : 2 * p - 1 - vs;
    return;
  }
  *c = vs / p;
  *r = vs % p;
}

int64_t remat_schedule_counts_from(int schedule, int64_t p, int64_t v, int64_t r, int64_t c) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  int64_t r0, c0, rl, cl;
  if (!row || !row->head_from_entry) return c;
  remat_schedule_rank_of(schedule, p, 0, &r0, &c0);
  remat_schedule_rank_of(schedule, p, p * v - 1, &rl, &cl);
  return r == r0 && r == rl && c == cl ? c0 : c;
}

/* ------------------------------------------------------------ streams */

void remat_schedule_streams_free(remat_schedule_streams *st) {
  remat__free(st->ops);
  st->ops = NULL;
}

int remat_schedule_streams_build(remat_schedule_streams *st, int schedule, int64_t p, int64_t m,
                                 int64_t v, remat_error *err) {
  memset(st, 0, sizeof *st);
  int rc = remat_schedule_check(schedule, p, m, v, 0, err);
  if (!rc) rc = too_long(schedule, p, m, v, err);
  if (rc) return rc;
  const remat_schedule_info *row = remat_schedule_get(schedule);
  st->schedule = schedule;
  st->p = p;
  st->m = m;
  st->v = v;
  st->len = m * v * (row->split ? 3 : 2);
  st->ops = remat__malloc((size_t)(p * st->len) * sizeof *st->ops);
  if (!st->ops) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the schedule's streams");
  if ((rc = row->streams(st))) {
    remat_schedule_streams_free(st);
    return remat__errorf(err, rc, "out of memory building the %s streams", row->name);
  }
  return 0;
}

void remat_schedule_streams_peaks(const remat_schedule_streams *st, int64_t *in_flight,
                                  int64_t *w_pending) {
  int split = remat_schedule_get(st->schedule)->split;
  for (int64_t r = 0; r < st->p; r++)
    for (int64_t c = 0; c < st->v; c++) {
      int64_t f = 0, b = 0, w = 0, pf = 0, pw = 0;
      for (int64_t q = 0; q < st->len; q++) {
        const remat_schedule_step *o = &st->ops[r * st->len + q];
        if (o->chunk != c) continue;
        f += o->kind == REMAT_OP_F;
        b += o->kind == REMAT_OP_B;
        w += o->kind == REMAT_OP_W;
        if (f - b > pf) pf = f - b;
        if (split && b - w > pw) pw = b - w;
      }
      if (in_flight) in_flight[r * st->v + c] = pf;
      if (w_pending) w_pending[r * st->v + c] = pw;
    }
}

void remat_schedule_streams_alive(const remat_schedule_streams *st, int64_t *alive) {
  for (int64_t r = 0; r < st->p; r++)
    for (int64_t c = 0; c < st->v; c++) {
      int64_t f = 0, done = 0, most = 0;
      int64_t starts = remat_schedule_counts_from(st->schedule, st->p, st->v, r, c);
      for (int64_t q = 0; q < st->len; q++) {
        const remat_schedule_step *o = &st->ops[r * st->len + q];
        f += o->chunk == starts && o->kind == REMAT_OP_F;
        if (o->chunk != c) continue;
        done += o->kind == REMAT_OP_B;
        if (f - done > most) most = f - done;
      }
      alive[r * st->v + c] = most;
    }
}

/* ------------------------------------------------------- held at once */

static int64_t flight(const remat_schedule_info *row, int64_t p, int64_t m, int64_t s) {
  if (row->flight == REMAT_FLIGHT_ALL) return m;
  return p - s < m ? p - s : m;
}

int remat_schedule_held(int schedule, int64_t p, int64_t m, int64_t v, int64_t *n, int64_t *kw,
                        remat_error *err) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  if (row && v == 1 && row->op) { /* test_schedule checks these against the streams */
    for (int64_t s = 0; s < p; s++) {
      n[s] = flight(row, p, m, s);
      kw[s] = 0;
    }
    return 0;
  }
  remat_schedule_streams st;
  int rc = remat_schedule_streams_build(&st, schedule, p, m, v, err);
  if (rc) return rc;
  int64_t *nk = remat__malloc((size_t)(2 * p * v) * sizeof *nk);
  if (!nk) {
    remat_schedule_streams_free(&st);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  remat_schedule_streams_peaks(&st, nk, nk + p * v);
  if (row->split) remat_schedule_streams_alive(&st, nk);
  for (int64_t r = 0; r < p; r++)
    for (int64_t c = 0; c < v; c++) {
      int64_t vs = remat_schedule_virtual_stage(schedule, p, r, c);
      n[vs] = nk[r * v + c];
      kw[vs] = nk[p * v + r * v + c];
    }
  remat__free(nk);
  remat_schedule_streams_free(&st);
  return 0;
}

int64_t remat_schedule_held_bound(int schedule, int64_t p, int64_t m, int64_t v) {
  const remat_schedule_info *row = remat_schedule_get(schedule);
  if (v > 1 || !row) return m * v;
  return flight(row, p, m, 0);
}
