/* rank_pool.c: a pipeline rank's slots and W records in one pool
 * (remat_stage.slots_pooled), laid out over the rank's stream by
 * remat_schedule_pool_layout, the planner's own layout. The pool is one
 * buffer on the chunks' backend; before a micro-batch first writes a slot
 * or a record, the chunk's model is told where it now is
 * (remat__model_place): a slot at the F that brings the micro-batch to its
 * chunk (the head's, on zbv's first rank, at the embedding chunk's F, when
 * its targets arrive), a record at the chunk's B. */
#include <string.h>

#include "base/base.h"
#include "memory/layout.h"
#include "parallel/parallel_internal.h"

int remat_placement_pool(const remat_schedule_streams *st, int64_t rank,
                         const remat_stage *stages, const remat_memplan *const *mp,
                         remat_schedule_pool *out, remat_error *err) {
  int64_t v = st->v, n = 0;
  remat_schedule_pool_part parts[REMAT_MAX_CHUNKS_POOL];
  for (int64_t c = 0; c < v; c++) n += stages[c].inflight;
  size_t *sizes = remat__calloc((size_t)n, sizeof *sizes), *at = sizes;
  if (!sizes) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  for (int64_t c = 0; c < v; c++) {
    for (int64_t j = 0; j < stages[c].inflight; j++) at[j] = remat_memplan_slot(mp[c], j).bytes;
    parts[c] = (remat_schedule_pool_part){.slots = stages[c].inflight, .slot_bytes = at,
                                          .records = stages[c].wdeferred,
                                          .record_bytes = remat_memplan_record_bytes(mp[c])};
    at += stages[c].inflight;
  }
  int rc = remat_schedule_pool_layout(st, rank, parts, REMAT_ALIGN, out, err);
  remat__free(sizes);
  return rc;
}

int remat__rank_pool_plan(remat__rank_pool *rp, const remat_schedule_streams *st, int64_t rank,
                          remat_model *const *cm, remat_error *err) {
  memset(rp, 0, sizeof *rp);
  remat_stage stages[REMAT_MAX_CHUNKS_POOL];
  const remat_memplan *mp[REMAT_MAX_CHUNKS_POOL];
  rp->v = st->v;
  for (int64_t c = 0; c < st->v; c++) {
    stages[c] = *remat_model_stage(cm[c]);
    mp[c] = remat_model_memplan(cm[c]);
    rp->from[c] = remat_schedule_counts_from(st->schedule, st->p, st->v, rank, c);
  }
  return remat_placement_pool(st, rank, stages, mp, &rp->layout, err);
}

/* Chunk c's micro-batch k: its slot, or its record, where the layout puts it. */
static void *piece(const remat__rank_pool *rp, int64_t c, int64_t k, int record) {
  return rp->mem + remat_schedule_pool_at(&rp->layout, c, k, record);
}

int remat__rank_pool_allocate(remat__rank_pool *rp, remat_model *const *cm, remat_error *err) {
  const remat__backend *be = remat__model_backend(cm[0]);
  rp->mem = be->buffer_alloc(rp->layout.bytes ? rp->layout.bytes : 1);
  if (!rp->mem) {
    char need[32];
    return remat__errorf(err, REMAT_ENOMEM,
                         "cannot allocate the %s pool of this rank's slots and W records; "
                         "recompute more blocks or use a smaller batch",
                         remat_format_bytes(rp->layout.bytes, need, sizeof need));
  }
  /* a place for every slot and record before the first step (micro-batch
   * j's), so that what reads a slot outside a step (the held-out loss)
   * finds one */
  for (int64_t c = 0; c < rp->v; c++) {
    const remat_stage *s = remat_model_stage(cm[c]);
    for (int64_t j = 0; j < s->inflight && j < rp->layout.m; j++)
      remat__model_place(cm[c], j, -1, piece(rp, c, j, 0));
    for (int64_t w = 0; w < s->wdeferred && w < rp->layout.m; w++)
      remat__model_place(cm[c], -1, w, piece(rp, c, w, 1));
  }
  return 0;
}

void remat__rank_pool_forward(const remat__rank_pool *rp, remat_model *const *cm, int64_t c,
                              int64_t k) {
  if (!rp->mem) return;
  for (int64_t x = 0; x < rp->v; x++)
    if (rp->from[x] == c)
      remat__model_place(cm[x], k % remat_model_stage(cm[x])->inflight, -1, piece(rp, x, k, 0));
}

void remat__rank_pool_backward(const remat__rank_pool *rp, remat_model *const *cm, int64_t c,
                               int64_t k) {
  int64_t wd = remat_model_stage(cm[c])->wdeferred;
  if (rp->mem && wd > 0) remat__model_place(cm[c], -1, k % wd, piece(rp, c, k, 1));
}

size_t remat__rank_pool_high_water(remat__rank_pool *rp, const remat__backend *be) {
  if (!rp->mem) return 0;
  size_t hw = remat__align(be->high_water(rp->mem, rp->layout.bytes, rp->high_water));
  rp->high_water = hw < rp->layout.bytes ? hw : rp->layout.bytes;
  return rp->high_water;
}

void remat__rank_pool_free(remat__rank_pool *rp, const remat__backend *be) {
  if (rp->mem) be->buffer_free(rp->mem);
  rp->mem = NULL;
  remat_schedule_pool_free(&rp->layout);
}
