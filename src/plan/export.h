/* export.h: what the framework exports share (export.c) and the exports of
 * each framework (colossalai.c, megatron.c). Private to src/plan. */
#ifndef REMAT_PLAN_EXPORT_H
#define REMAT_PLAN_EXPORT_H

#include <cjson/cJSON.h>

#include "plan/plan.h"

/* A plan as the frameworks count it: blocks (transformer layers) per
 * virtual stage in model order, and those not kept. */
typedef struct {
  int64_t nv, p, v;       /* virtual stages = p stages x v chunks */
  int64_t *blocks, *ckpt; /* (nv) each */
  uint8_t *isblk;         /* (num_layers) 1 for a block */
  int64_t total, most;    /* blocks in all; the largest ckpt */
  int64_t middle, full;   /* blocks under the middle policy, recomputed in full
                             (full counts the partial ones) */
  int64_t partial;        /* blocks recomputed for some micro-batches only */
  int first_k;            /* each virtual stage's blocks not kept are its first ones */
  int empty;              /* a virtual stage holds no block */
} remat__fw_view;

int remat__fw_view_get(const remat_plan_problem *pb, const remat_plan *pl, remat__fw_view *v);
void remat__fw_view_free(remat__fw_view *v);

/* One framework's export: its text (a snippet or flags, with comments) and
 * the same as JSON ({"framework", "versions", "notes": [...], ...}). */
typedef struct {
  remat__plan_buf text;
  cJSON *json, *notes; /* notes: inside json */
} remat__fw_export;

int remat__fw_export_init(remat__fw_export *ex, const char *framework, const char *versions,
                          remat_error *err);
void remat__fw_export_free(remat__fw_export *ex);
/* A note: a comment in the text, a string in the JSON's notes. */
void remat__fw_note(remat__fw_export *ex, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The notes every export carries: the head in chunks, per-micro-batch
 * recompute, and a problem of remat's own engine. */
void remat__fw_caveat(remat__fw_export *ex, const remat_plan_problem *pb, const remat_plan *pl);
void remat__fw_comment(remat__plan_buf *b, const char *text);
void remat__fw_list(remat__plan_buf *b, const int64_t *v, int64_t n);

int remat__fw_runs(const remat_plan_problem *pb, const remat_plan *pl, const remat__fw_view *v,
                   const int64_t *blocks, const int64_t *ckpt, int pol, remat_plan *out,
                   remat_error *err);
int remat__fw_same(const remat_plan *pl, const remat_plan *runs);
const char *remat__fw_compare(char *buf, size_t cap, const remat_plan *pl, const remat_plan *runs);

int remat__colossalai_export(const remat_plan_problem *pb, const remat_plan *pl,
                             remat__fw_export *ex, remat_error *err);
int remat__megatron_export(const remat_plan_problem *pb, const remat_plan *pl,
                           remat__fw_export *ex, remat_error *err);

#endif
