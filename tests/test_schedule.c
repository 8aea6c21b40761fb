/* test_schedule.c: the schedule table and the instruction streams of every
 * schedule (1f1b, gpipe, interleaved, zb-h1, zbv) and the simulator over
 * them: each row's rules hold together and remat_schedule_held gives what
 * its streams hold (with one chunk in closed form); each stream holds
 * every operation once, in an order that respects every dependency on its
 * rank, and the ranks together never deadlock (random times); the peak
 * activations in flight equal their closed forms (zb-h1's equal 1F1B's);
 * with one chunk the streams' simulation is remat_plan_simulate's to the
 * bit; ZB-H1 is never slower than 1F1B when the weight gradient takes time;
 * and the makespans with equal stage times are the known ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"
#include "test_util.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* Every (chunk, micro-batch, kind) once per rank; on a rank B after F and
 * W after B of the same chunk and micro-batch. */
static int stream_ok(const remat_schedule_streams *st) {
  int split = remat_schedule_get(st->schedule)->split;
  int64_t cells = st->v * st->m;
  int64_t *pos = malloc((size_t)(3 * cells) * sizeof *pos);
  int ok = pos != NULL && st->len == cells * (split ? 3 : 2);
  for (int64_t r = 0; ok && r < st->p; r++) {
    for (int64_t i = 0; i < 3 * cells; i++) pos[i] = -1;
    for (int64_t q = 0; q < st->len; q++) {
      const remat_schedule_step *o = &st->ops[r * st->len + q];
      if (o->mb < 0 || o->mb >= st->m || o->chunk < 0 || o->chunk >= st->v) return free(pos), 0;
      int64_t at = o->kind * cells + o->chunk * st->m + o->mb;
      if (o->kind >= (split ? 3 : 2) || pos[at] >= 0) return free(pos), 0;
      pos[at] = q;
    }
    for (int64_t i = 0; i < cells; i++) {
      ok = ok && pos[i] >= 0 && pos[cells + i] > pos[i];
      if (split) ok = ok && pos[2 * cells + i] > pos[cells + i];
    }
  }
  free(pos);
  return ok;
}

/* Most chunk activations a rank holds at once: F run and W (B without W)
 * not yet. */
static int64_t rank_units(const remat_schedule_streams *st, int64_t r) {
  int split = remat_schedule_get(st->schedule)->split;
  int64_t u = 0, peak = 0;
  for (int64_t q = 0; q < st->len; q++) {
    int k = st->ops[r * st->len + q].kind;
    u += k == REMAT_OP_F ? 1 : (k == (split ? REMAT_OP_W : REMAT_OP_B) ? -1 : 0);
    if (u > peak) peak = u;
  }
  return peak;
}

static int64_t irand(int64_t lo, int64_t hi) {
  return lo + (int64_t)(urand() * (double)(hi - lo + 1));
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Streams of one configuration: validity, no deadlock under random times,
 * peaks against closed forms. */
static void one(int sched, int64_t p, int64_t m, int64_t v) {
  remat_schedule_streams st;
  remat_error err;
  int rc = remat_schedule_streams_build(&st, sched, p, m, v, &err);
  CHECK(rc == 0);
  if (rc) return;
  CHECK(stream_ok(&st));
  int64_t nv = p * v, *inf = malloc((size_t)nv * sizeof *inf), *wp = malloc((size_t)nv * sizeof *wp);
  double *f = malloc((size_t)nv * 3 * sizeof *f), *b = f + nv, *w = f + 2 * nv, ms = -1;
  for (int t = 0; t < 3; t++) {
    for (int64_t i = 0; i < nv; i++) {
      f[i] = t == 0 ? 1 : 0.1 + urand();
      w[i] = t == 0 ? 1 : urand();
      b[i] = w[i] + (t == 0 ? 1 : 0.1 + urand());
    }
    CHECK(remat_plan_simulate_streams(&st, f, b, w, &ms, &err) == 0 && ms > 0);
  }
  remat_schedule_streams_peaks(&st, inf, wp);
  for (int64_t r = 0; r < p; r++) {
    if (sched == REMAT_SCHED_1F1B || sched == REMAT_SCHED_ZBH1) CHECK(inf[r] == min64(p - r, m));
    if (sched == REMAT_SCHED_GPIPE) CHECK(inf[r] == m);
    if (sched == REMAT_SCHED_ZBH1) CHECK(wp[r] == min64(r + 1, m));
    if (sched != REMAT_SCHED_ZBH1 && sched != REMAT_SCHED_ZBV) CHECK(wp[r] == 0);
    if (sched == REMAT_SCHED_INTERLEAVED)
      CHECK(rank_units(&st, r) == min64(2 * (p - r - 1) + (v - 1) * p + 1, m * v));
    if (sched == REMAT_SCHED_ZBV) CHECK(rank_units(&st, r) <= 2 * p);
  }
  /* remat_schedule_held: the streams' figures by virtual stage, from F to
   * B (from the counting chunk's F under zbv), within
   * remat_schedule_held_bound */
  int64_t *n = malloc((size_t)nv * sizeof *n), *kw = malloc((size_t)nv * sizeof *kw);
  const remat_schedule_info *row = remat_schedule_get(sched);
  CHECK(remat_schedule_held(sched, p, m, v, n, kw, &err) == 0);
  if (row->split) remat_schedule_streams_alive(&st, inf);
  for (int64_t r = 0; r < p; r++)
    for (int64_t c = 0; c < v; c++) {
      int64_t vs = remat_schedule_virtual_stage(sched, p, r, c);
      CHECK(n[vs] == inf[r * v + c] && kw[vs] == wp[r * v + c]);
      CHECK(n[vs] <= remat_schedule_held_bound(sched, p, m, v));
    }
  free(n);
  free(kw);
  free(inf);
  free(wp);
  free(f);
  remat_schedule_streams_free(&st);
}

static void test_streams(void) {
  for (int64_t p = 1; p <= 6; p++)
    for (int64_t m = 1; m <= 13; m++) {
      one(REMAT_SCHED_1F1B, p, m, 1);
      one(REMAT_SCHED_GPIPE, p, m, 1);
      one(REMAT_SCHED_ZBH1, p, m, 1);
      one(REMAT_SCHED_ZBV, p, m, 2);
      if (m % p == 0)
        for (int64_t v = 2; v <= 4; v++) one(REMAT_SCHED_INTERLEAVED, p, m, v);
    }
  printf("streams: %d checks\n", test_checks);
}

/* With one chunk, 1f1b and gpipe streams simulate to remat_plan_simulate's
 * makespan exactly; zb-h1 is no slower than 1f1b when every stage takes
 * the same times (random ones). With unequal stages it can be: a stage
 * that defers its W behind a slower neighbour's B may finish later, which
 * the planner's simulated time shows. */
static void test_against_plain(void) {
  int slower = 0;
  for (int it = 0; it < 600; it++) {
    int uniform = it % 2;
    int64_t p = 1 + (int64_t)(urand() * 6), m = 1 + (int64_t)(urand() * 12);
    double f[8], b[8], w[8], ms0, ms1;
    for (int64_t s = 0; s < p; s++) {
      f[s] = uniform && s ? f[0] : 0.1 + urand();
      w[s] = uniform && s ? w[0] : 0.05 + urand();
      b[s] = uniform && s ? b[0] : w[s] + 0.1 + urand();
    }
    for (int sch = 0; sch < 2; sch++) {
      remat_schedule_streams st;
      CHECK(remat_schedule_streams_build(&st, sch, p, m, 1, NULL) == 0);
      CHECK(remat_plan_simulate(sch, p, m, f, b, &ms0, NULL) == 0);
      CHECK(remat_plan_simulate_streams(&st, f, b, w, &ms1, NULL) == 0 && ms0 == ms1);
      remat_schedule_streams_free(&st);
    }
    remat_schedule_streams st;
    CHECK(remat_schedule_streams_build(&st, REMAT_SCHED_ZBH1, p, m, 1, NULL) == 0);
    CHECK(remat_plan_simulate(REMAT_SCHED_1F1B, p, m, f, b, &ms0, NULL) == 0);
    CHECK(remat_plan_simulate_streams(&st, f, b, w, &ms1, NULL) == 0);
    if (uniform) CHECK(ms1 <= ms0 + 1e-9);
    slower += ms1 > ms0 + 1e-9;
    remat_schedule_streams_free(&st);
  }
  printf("zb-h1 slower than 1f1b in %d of 300 random unequal-stage cases\n", slower);
}

static double equal_times(int sched, int64_t p, int64_t m, int64_t v) {
  remat_schedule_streams st;
  double f[64], b[64], w[64], ms = -1;
  for (int i = 0; i < 64; i++) f[i] = 1, b[i] = 2, w[i] = 1;
  CHECK(remat_schedule_streams_build(&st, sched, p, m, v, NULL) == 0);
  CHECK(remat_plan_simulate_streams(&st, f, b, w, &ms, NULL) == 0);
  remat_schedule_streams_free(&st);
  return ms;
}

/* Makespans with every chunk taking F 1, B 1, W 1 (a whole backward 2). */
static void test_bubbles(void) {
  for (int64_t p = 1; p <= 8; p++)
    for (int64_t m = p; m <= 4 * p; m += p) {
      double a = equal_times(REMAT_SCHED_1F1B, p, m, 1);
      double h = equal_times(REMAT_SCHED_ZBH1, p, m, 1);
      CHECKF(a == 3.0 * (double)(m + p - 1) && h == 3.0 * (double)m + (double)(p - 1),
             "p %lld m %lld: 1f1b %g = 3 (m + p - 1), zb-h1 %g = 3 m + (p - 1)", (long long)p,
             (long long)m, a, h);
      for (int64_t v = 2; v <= 3; v++) {
        double iv = equal_times(REMAT_SCHED_INTERLEAVED, p, m, v);
        CHECKF(iv == 3.0 * (double)(m * v + p - 1),
               "p %lld m %lld v %lld: interleaved %g = 3 (m v + p - 1)", (long long)p,
               (long long)m, (long long)v, iv);
      }
      double z = equal_times(REMAT_SCHED_ZBV, p, m, 2);
      CHECKF(z <= 6.0 * (double)m + (double)(p - 1) * 2,
             "p %lld m %lld: zbv %g <= 6 m + 2 (p - 1) (bubble %.3f)", (long long)p,
             (long long)m, z, 1 - 6.0 * (double)m / z);
    }
}

static void test_errors(void) {
  remat_error err;
  remat_schedule_streams st;
  CHECK_ERR(remat_schedule_streams_build(&st, REMAT_SCHED_INTERLEAVED, 4, 6, 2, &err),
            err, REMAT_EINVAL, "multiple");
  CHECK_ERR(remat_schedule_check(REMAT_SCHED_ZBV, 4, 8, 3, 0, &err), err, REMAT_EINVAL, "2 chunks");
  CHECK_ERR(remat_schedule_check(REMAT_SCHED_INTERLEAVED, 4, 8, 1, 0, &err), err, REMAT_EINVAL,
            "1f1b");
  CHECK_ERR(remat_schedule_check(REMAT_SCHED_1F1B, 4, 8, 2, 0, &err), err, REMAT_EINVAL,
            "one chunk");
  CHECK_ERR(remat_schedule_check(REMAT_SCHED_ZBV, 4, 8, 2, 7, &err), err, REMAT_EINVAL,
            "8 layers");
  CHECK(remat_schedule_check(REMAT_SCHED_ZBV, 4, 8, 2, 8, &err) == 0);
  for (int s = 0; s < REMAT_SCHED_COUNT; s++) {
    int back = -1;
    CHECK(remat_plan_schedule_parse(remat_plan_schedule_name(s), &back) == 0 && back == s);
  }
  for (int64_t vs = 0; vs < 8; vs++)
    for (int sch = 0; sch < REMAT_SCHED_COUNT; sch++) {
      int64_t r, c;
      remat_schedule_rank_of(sch, 4, vs, &r, &c);
      CHECK(remat_schedule_virtual_stage(sch, 4, r, c) == vs);
    }
}

/* Each row's rules agree with each other and with the checks and the
 * names that come from them. */
static void test_table(void) {
  char names[96];
  CHECK(remat_schedule_get(-1) == NULL && remat_schedule_get(REMAT_SCHED_COUNT) == NULL);
  for (int s = 0; s < REMAT_SCHED_COUNT; s++) {
    const remat_schedule_info *row = remat_schedule_get(s);
    CHECK(row && row->name && row->streams && row->runs);
    CHECK(row->chunks_default >= row->chunks_min);
    CHECK(!row->chunks_max || row->chunks_default <= row->chunks_max);
    CHECK(remat_schedule_chunks(s, 0) == row->chunks_default);
    CHECK(remat_schedule_check(s, 4, 8, row->chunks_default, 0, NULL) == 0);
    CHECK(!row->op || row->chunks_max == 1); /* a closed form is of one chunk */
    CHECK(row->layout != REMAT_LAYOUT_V || row->chunks_max == 2);
  }
  CHECK(strcmp(remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"),
               "1f1b, gpipe, interleaved, zb-h1 or zbv") == 0);
  CHECK(strcmp(remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_CHUNKED, "and"),
               "interleaved and zbv") == 0);
  CHECK(strcmp(remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ONE_CHUNK, "and"),
               "1f1b, gpipe and zb-h1") == 0);
  CHECK(strcmp(remat_schedule_names(names, 8, REMAT_SCHEDULES_ALL, "or"), "1f1b, g") == 0);
  /* zbv's head, on rank 0 with the entry, counts from chunk 0's F */
  CHECK(remat_schedule_counts_from(REMAT_SCHED_ZBV, 4, 2, 0, 1) == 0);
  CHECK(remat_schedule_counts_from(REMAT_SCHED_ZBV, 4, 2, 1, 1) == 1);
  CHECK(remat_schedule_counts_from(REMAT_SCHED_INTERLEAVED, 1, 2, 0, 1) == 1);
}

/* A rank's pool (remat_schedule_pool_layout): no two pieces alive at one
 * operation share a byte; the pool holds at least the most bytes alive at
 * once and at most the chunks' slots and records side by side, which it
 * equals when it is not packed; a side-by-side piece sits at its slot (or
 * record) k mod the count. Random sizes, every schedule with a stream. */
static void pool_one(int sched, int64_t p, int64_t m, int64_t v) {
  remat_schedule_streams st;
  int64_t n[64], kw[64];
  if (remat_schedule_streams_build(&st, sched, p, m, v, NULL) ||
      remat_schedule_held(sched, p, m, v, n, kw, NULL)) {
    CHECK(0);
    return;
  }
  size_t bytes[4][64];
  for (int64_t r = 0; r < p; r++) {
    remat_schedule_pool_part parts[4];
    size_t apart = 0;
    for (int64_t c = 0; c < v; c++) {
      int64_t vs = remat_schedule_virtual_stage(sched, p, r, c);
      for (int64_t j = 0; j < n[vs]; j++) bytes[c][j] = 64 * (size_t)irand(0, 40);
      parts[c] = (remat_schedule_pool_part){n[vs], bytes[c], kw[vs], 64 * (size_t)irand(0, 30)};
      for (int64_t j = 0; j < n[vs]; j++) apart += bytes[c][j];
      apart += (size_t)kw[vs] * parts[c].record_bytes;
    }
    remat_schedule_pool pool;
    CHECK(remat_schedule_pool_layout(&st, r, parts, 64, &pool, NULL) == 0);
    CHECK(pool.apart == apart && pool.bytes <= apart && (pool.packed || pool.bytes == apart));
    /* each piece's span, walking the stream: alive pieces never overlap */
    int64_t from[4], first[4][64][2], last[4][64][2];
    for (int64_t c = 0; c < v; c++) from[c] = remat_schedule_counts_from(sched, p, v, r, c);
    for (int64_t q = 0; q < st.len; q++) {
      const remat_schedule_step *o = &st.ops[r * st.len + q];
      for (int64_t c = 0; c < v; c++)
        if (o->kind == REMAT_OP_F && o->chunk == from[c]) first[c][o->mb][0] = q;
      if (o->kind == REMAT_OP_B) last[o->chunk][o->mb][0] = first[o->chunk][o->mb][1] = q;
      if (o->kind == REMAT_OP_W) last[o->chunk][o->mb][1] = q;
    }
    size_t load = 0;
    for (int64_t q = 0; q < st.len; q++) {
      size_t lo[512], hi[512], held = 0;
      int np = 0;
      for (int64_t c = 0; c < v; c++)
        for (int64_t k = 0; k < m; k++)
          for (int x = 0; x < 2; x++) {
            size_t b = x ? (kw[remat_schedule_virtual_stage(sched, p, r, c)] ? parts[c].record_bytes : 0)
                         : bytes[c][k % parts[c].slots];
            if (!b || first[c][k][x] > q || last[c][k][x] < q) continue;
            lo[np] = remat_schedule_pool_at(&pool, c, k, x);
            hi[np] = lo[np] + b;
            CHECK(hi[np] <= pool.bytes);
            np++;
            held += b;
          }
      for (int i = 0; i < np; i++)
        for (int j = 0; j < i; j++) CHECK(hi[i] <= lo[j] || hi[j] <= lo[i]);
      if (held > load) load = held;
    }
    CHECK(pool.bytes >= load);
    if (!pool.packed) /* side by side: micro-batch k in slot k mod n */
      for (int64_t k = parts[0].slots; k < m; k++)
        CHECK(remat_schedule_pool_at(&pool, 0, k, 0) ==
              remat_schedule_pool_at(&pool, 0, k % parts[0].slots, 0));
    remat_schedule_pool_free(&pool);
  }
  remat_schedule_streams_free(&st);
}

static void test_pool(void) {
  int before = test_checks;
  for (int64_t p = 1; p <= 5; p++)
    for (int64_t m = 1; m <= 12; m++) {
      pool_one(REMAT_SCHED_ZBH1, p, m, 1);
      pool_one(REMAT_SCHED_ZBV, p, m, 2);
      if (m % p == 0) pool_one(REMAT_SCHED_INTERLEAVED, p, m, 3);
    }
  /* zbv, 4 ranks, 8 micro-batches, slots and records of GPT-2-like sizes:
   * the last rank's slot peak and record peak fall apart, so the pool is
   * well below them side by side */
  remat_schedule_streams st;
  CHECK(remat_schedule_streams_build(&st, REMAT_SCHED_ZBV, 4, 8, 2, NULL) == 0);
  size_t slot[8] = {6400, 6400, 6400, 6400, 6400, 6400, 6400, 6400};
  remat_schedule_pool_part parts[2] = {{4, slot, 4, 3840}, {4, slot, 4, 3840}};
  remat_schedule_pool pool;
  CHECK(remat_schedule_pool_layout(&st, 3, parts, 64, &pool, NULL) == 0);
  CHECKF(pool.packed && pool.apart == 81920 && pool.bytes <= 81920 * 7 / 10,
         "zbv's last rank: a pool of %zu bytes against %zu side by side", pool.bytes, pool.apart);
  remat_schedule_pool_free(&pool);
  remat_error err;
  CHECK_ERR(remat_schedule_pool_layout(&st, 4, parts, 64, &pool, &err), err, REMAT_EINVAL,
            "rank 4");
  remat_schedule_streams_free(&st);
  printf("pool: %d checks\n", test_checks - before);
}

int main(void) {
  test_table();
  test_streams();
  test_pool();
  test_against_plain();
  test_bubbles();
  test_errors();
  return test_summary("test_schedule");
}
