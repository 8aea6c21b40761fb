/* pool.c: a rank's slots and W records in one pool, laid out over its
 * stream (remat_schedule_pool_layout in include/remat/schedule.h). Each
 * micro-batch's slot of a chunk is a piece of the pool from the F that
 * brings the micro-batch to the chunk to the chunk's B, its W record from
 * that B to its W; the two ends included, since a B reads the slot while
 * it fills the record. Pieces whose spans meet never share a byte.
 *
 * The layout is first fit in the stream's order: pieces by their first
 * operation (the larger first where several start together), each at the
 * lowest offset that no piece alive beside it holds. Its extent is at
 * least the most bytes alive at once, and can be above it; where it is not
 * below the chunks' slots and records laid side by side, as a runtime
 * without a pool keeps them, that layout is the answer. Both the planner
 * and the runtime lay a pool out here, so its bytes are one figure. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "remat/schedule.h"

/* One piece: chunk c's micro-batch k, slot (kind 0) or W record (1). */
typedef struct {
  int64_t first, last; /* the rank's operations it spans, both included */
  size_t bytes, at;
  int64_t c, k;
  int kind;
} piece;

/* More pieces than this are laid side by side without first fit (its
 * time grows with the square of their count). */
enum { FIT_MAX = 16384 };

static size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int by_start(const void *u, const void *v) {
  const piece *a = u, *b = v;
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  if (a->c != b->c) return a->c < b->c ? -1 : 1;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  return a->k < b->k ? -1 : a->k > b->k;
}

static int by_at(const void *u, const void *v) {
  const piece *a = *(piece *const *)u, *b = *(piece *const *)v;
  return a->at < b->at ? -1 : a->at > b->at;
}

/* Each piece's span on rank r's stream; the count of pieces. */
static int64_t spans(const remat_schedule_streams *st, int64_t r,
                     const remat_schedule_pool_part *parts, piece *ps) {
  int64_t v = st->v, m = st->m, n = 0;
  int64_t *at = remat__calloc((size_t)(3 * v * m), sizeof *at); /* F, B, W positions */
  if (!at) return -1;
  for (int64_t q = 0; q < st->len; q++) {
    const remat_schedule_step *o = &st->ops[r * st->len + q];
    at[(o->kind * v + o->chunk) * m + o->mb] = q;
  }
  for (int64_t c = 0; c < v; c++) {
    int64_t from = remat_schedule_counts_from(st->schedule, st->p, v, r, c);
    const remat_schedule_pool_part *pt = &parts[c];
    for (int64_t k = 0; k < m; k++) {
      int64_t f = at[(REMAT_OP_F * v + from) * m + k], b = at[(REMAT_OP_B * v + c) * m + k];
      if (pt->slot_bytes[k % pt->slots] > 0) /* a piece of no bytes holds no place */
        ps[n++] = (piece){f, b, pt->slot_bytes[k % pt->slots], 0, c, k, 0};
      if (pt->records > 0 && pt->record_bytes > 0)
        ps[n++] = (piece){b, at[(REMAT_OP_W * v + c) * m + k], pt->record_bytes, 0, c, k, 1};
    }
  }
  remat__free(at);
  return n;
}

/* First fit: each piece at the lowest offset, a multiple of align, where
 * it meets no piece placed before it that is alive beside it. Returns the
 * extent. */
static size_t first_fit(piece *ps, int64_t n, size_t align, piece **alive) {
  size_t extent = 0;
  qsort(ps, (size_t)n, sizeof *ps, by_start);
  for (int64_t i = 0; i < n; i++) {
    int64_t na = 0;
    for (int64_t j = 0; j < i; j++)
      if (ps[j].first <= ps[i].last && ps[i].first <= ps[j].last) alive[na++] = &ps[j];
    qsort(alive, (size_t)na, sizeof *alive, by_at);
    size_t at = 0, need = up(ps[i].bytes, align);
    for (int64_t j = 0; j < na; j++) {
      if (alive[j]->at >= at + need) break; /* the gap below it holds the piece */
      size_t end = up(alive[j]->at + alive[j]->bytes, align);
      if (end > at) at = end;
    }
    ps[i].at = at;
    if (at + ps[i].bytes > extent) extent = at + ps[i].bytes;
  }
  return extent;
}

/* Side by side: every chunk's slots, then every chunk's records, each
 * micro-batch in its slot (record) k mod the count. */
static size_t side_by_side(const remat_schedule_pool_part *parts, int64_t v, size_t align,
                           piece *ps, int64_t n) {
  size_t base = 0, slot_base[REMAT_MAX_CHUNKS_POOL], rec_base[REMAT_MAX_CHUNKS_POOL];
  for (int64_t c = 0; c < v; c++) {
    slot_base[c] = base;
    for (int64_t j = 0; j < parts[c].slots; j++) base += up(parts[c].slot_bytes[j], align);
  }
  for (int64_t c = 0; c < v; c++) {
    rec_base[c] = base;
    base += (size_t)(parts[c].records > 0 ? parts[c].records : 0) *
            up(parts[c].record_bytes, align);
  }
  for (int64_t i = 0; i < n; i++) {
    const remat_schedule_pool_part *pt = &parts[ps[i].c];
    if (ps[i].kind == 1) {
      ps[i].at = rec_base[ps[i].c] + (size_t)(ps[i].k % pt->records) * up(pt->record_bytes, align);
    } else {
      size_t at = slot_base[ps[i].c];
      for (int64_t j = 0; j < ps[i].k % pt->slots; j++) at += up(pt->slot_bytes[j], align);
      ps[i].at = at;
    }
  }
  return base;
}

int remat_schedule_pool_layout(const remat_schedule_streams *st, int64_t r,
                               const remat_schedule_pool_part *parts, size_t align,
                               remat_schedule_pool *out, remat_error *err) {
  memset(out, 0, sizeof *out);
  int64_t v = st->v, m = st->m;
  if (r < 0 || r >= st->p || v < 1 || v > REMAT_MAX_CHUNKS_POOL || align == 0)
    return remat__errorf(err, REMAT_EINVAL, "a pool for rank %lld of %lld with %lld chunks",
                         (long long)r, (long long)st->p, (long long)v);
  for (int64_t c = 0; c < v; c++)
    if (parts[c].slots < 1)
      return remat__errorf(err, REMAT_EINVAL, "chunk %lld's part of a pool: %lld slots",
                           (long long)c, (long long)parts[c].slots);
  piece *ps = remat__calloc((size_t)(2 * v * m), sizeof *ps);
  piece **alive = remat__calloc((size_t)(2 * v * m), sizeof *alive);
  out->at = remat__calloc((size_t)(2 * v * m), sizeof *out->at);
  int64_t n = ps && alive && out->at ? spans(st, r, parts, ps) : -1;
  if (n < 0) {
    remat__free(ps);
    remat__free(alive);
    remat_schedule_pool_free(out);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory laying out a pool");
  }
  out->v = v;
  out->m = m;
  out->apart = side_by_side(parts, v, align, ps, n);
  out->bytes = out->apart;
  if (n <= FIT_MAX) {
    size_t fit = first_fit(ps, n, align, alive);
    if (fit < out->apart) out->bytes = fit, out->packed = 1;
    else side_by_side(parts, v, align, ps, n);
  }
  for (int64_t i = 0; i < n; i++) out->at[((ps[i].c * m) + ps[i].k) * 2 + ps[i].kind] = ps[i].at;
  remat__free(ps);
  remat__free(alive);
  return 0;
}

void remat_schedule_pool_free(remat_schedule_pool *pool) {
  remat__free(pool->at);
  pool->at = NULL;
}
