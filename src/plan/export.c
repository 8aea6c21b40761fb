/* export.c: a plan as ColossalAI and Megatron-LM take it, and what each then
 * runs. Every rule below is one of the framework's own, cited by file and
 * version; tests/python/frameworks/ states the same rules as test code and
 * checks every export the suite makes against them.
 *
 * Both frameworks count transformer layers only (remat's blocks: layers of
 * recomputable groups), put the embedding on the first stage and the head on
 * the last, and recompute the FIRST k blocks of each (virtual) stage in
 * full; neither has remat's middle policy. Where a framework cannot express
 * the plan, the export gives what the framework can run instead, evaluated
 * under the plan's own formula, and says so. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"
#include "plan/export.h"

/* ------------------------------------------------------------ the plan, by block */

int remat__fw_view_get(const remat_plan_problem *pb, const remat_plan *pl, remat__fw_view *v) {
  memset(v, 0, sizeof *v);
  int64_t nv = pl->num_stages * (pl->chunks > 1 ? pl->chunks : 1), L = pl->num_layers;
  v->nv = nv;
  v->p = pl->num_stages;
  v->v = pl->chunks > 1 ? pl->chunks : 1;
  v->blocks = remat__calloc((size_t)(2 * nv), sizeof *v->blocks);
  v->isblk = remat__malloc((size_t)L);
  if (!v->blocks || !v->isblk) return REMAT_ENOMEM;
  v->ckpt = v->blocks + nv;
  int64_t l = 0;
  for (int64_t g = 0; g < pb->num_groups; g++)
    for (int64_t k = 0; k < pb->groups[g].count; k++, l++)
      v->isblk[l] = pb->groups[g].recomputable != 0;
  v->first_k = 1;
  for (int64_t s = 0; s < nv; s++) {
    int64_t seen = 0;
    for (l = pl->chunk_first[s]; l < pl->chunk_first[s] + pl->chunk_layers[s]; l++) {
      if (!v->isblk[l]) continue;
      /* a layer recomputed for some micro-batches only: the frameworks
       * recompute a layer for all of them or none, so in full */
      int part = pl->full_slots && pl->full_slots[l];
      int rec = pl->policy[l] != REMAT_KEEP || part;
      if (rec && seen != v->ckpt[s]) v->first_k = 0;
      v->blocks[s]++;
      v->ckpt[s] += rec;
      v->middle += pl->policy[l] == REMAT_MIDDLE;
      v->full += pl->policy[l] == REMAT_RECOMPUTE || part;
      v->partial += part;
      seen++;
    }
    v->total += v->blocks[s];
    if (!v->blocks[s]) v->empty = 1;
    if (v->ckpt[s] > v->most) v->most = v->ckpt[s];
  }
  return 0;
}

void remat__fw_view_free(remat__fw_view *v) {
  remat__free(v->blocks);
  remat__free(v->isblk);
  v->blocks = v->ckpt = NULL;
  v->isblk = NULL;
}

/* ------------------------------------------------------------ what a framework runs */

/* An arrangement a framework runs: blocks per virtual stage (its split), the
 * first ckpt[s] blocks of each under policy pol. On the plan's own split the
 * other layers stay where the plan put them; on another split each goes with
 * the stage of the block before it (the embedding, before every block, with
 * the first). Evaluated under the plan's formula into *out. */
int remat__fw_runs(const remat_plan_problem *pb, const remat_plan *pl, const remat__fw_view *v,
                   const int64_t *blocks, const int64_t *ckpt, int pol, remat_plan *out,
                   remat_error *err) {
  int64_t nv = v->nv, L = pl->num_layers;
  int64_t *lps = remat__calloc((size_t)nv, sizeof *lps);
  uint8_t *rec = remat__calloc((size_t)L, 1);
  if (!lps || !rec) {
    remat__free(lps);
    remat__free(rec);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  int same = memcmp(blocks, v->blocks, (size_t)nv * sizeof *blocks) == 0;
  int64_t s = 0, seen = 0;
  for (int64_t l = 0; l < L; l++) {
    if (same) {
      while (l >= pl->chunk_first[s] + pl->chunk_layers[s]) s++, seen = 0;
    } else if (v->isblk[l]) {
      while (seen == blocks[s]) s++, seen = 0;
    }
    lps[s]++;
    if (v->isblk[l]) rec[l] = seen++ < ckpt[s] ? (uint8_t)pol : REMAT_KEEP;
  }
  remat_plan_problem e = *pb; /* as laid out, with nothing fixed */
  e.min_blocks = 0;
  e.fixed_blocks = NULL;
  int rc = remat_plan_evaluate(&e, lps, rec, out, err);
  remat__free(lps);
  remat__free(rec);
  return rc;
}

/* 1 if the framework's arrangement is the plan's own. */
int remat__fw_same(const remat_plan *pl, const remat_plan *runs) {
  return !pl->total_partial && memcmp(pl->policy, runs->policy, (size_t)pl->num_layers) == 0 &&
         memcmp(pl->chunk_layers, runs->chunk_layers,
                (size_t)(pl->num_stages * (pl->chunks > 1 ? pl->chunks : 1)) *
                    sizeof *pl->chunk_layers) == 0;
}

/* "bottleneck 31 (plan: 27, +14.8%), peak stage memory 5.2 GiB, fits every
 * stage" and the like, into buf. */
const char *remat__fw_compare(char *buf, size_t cap, const remat_plan *pl, const remat_plan *runs) {
  double d = pl->objective_value > 0 ? 100 * (runs->objective_value / pl->objective_value - 1) : 0;
  snprintf(buf, cap, "%s %.6g (plan: %.6g, %+.3g%%), peak stage memory %.4g GiB, %s",
           remat_plan_objective_name(pl->objective), runs->objective_value, pl->objective_value, d,
           (double)runs->max_memory_bytes / 1073741824.0,
           runs->feasible ? "fits every stage" : "does NOT fit every stage");
  return buf;
}

/* A list of counts "[1, 2, 3]". */
void remat__fw_list(remat__plan_buf *b, const int64_t *v, int64_t n) {
  remat__plan_printf(b, "[");
  for (int64_t k = 0; k < n; k++) remat__plan_printf(b, "%s%lld", k ? ", " : "", (long long)v[k]);
  remat__plan_printf(b, "]");
}

/* Comment lines of text, each prefixed "# " and wrapped near 96 columns. */
void remat__fw_comment(remat__plan_buf *b, const char *text) {
  const char *p = text;
  while (*p) {
    size_t n = strlen(p), cut = n;
    if (n > 94) {
      cut = 94;
      while (cut > 40 && p[cut] != ' ') cut--;
      if (p[cut] != ' ') cut = 94;
    }
    remat__plan_printf(b, "# %.*s\n", (int)cut, p);
    p += cut;
    while (*p == ' ') p++;
  }
}

/* ------------------------------------------------------------ an export */

void remat__fw_export_free(remat__fw_export *ex) {
  remat__free(ex->text.s);
  cJSON_Delete(ex->json);
  memset(ex, 0, sizeof *ex);
}

/* Notes: a text line (commented) and a JSON string each. */
void remat__fw_note(remat__fw_export *ex, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  remat__fw_comment(&ex->text, line);
  cJSON_AddItemToArray(ex->notes, cJSON_CreateString(line));
}

int remat__fw_export_init(remat__fw_export *ex, const char *framework, const char *versions,
                          remat_error *err) {
  memset(ex, 0, sizeof *ex);
  ex->json = cJSON_CreateObject();
  if (!ex->json) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  cJSON_AddStringToObject(ex->json, "framework", framework);
  cJSON_AddStringToObject(ex->json, "versions", versions);
  ex->notes = cJSON_AddArrayToObject(ex->json, "notes");
  return 0;
}

/* The caveat of a problem built from remat's own engine. */
void remat__fw_caveat(remat__fw_export *ex, const remat_plan_problem *pb, const remat_plan *pl) {
  if (pl->total_partial)
    remat__fw_note(ex, "This plan recomputes %lld layer(s) for only some of their stage's "
                   "micro-batches (remat plan --per-microbatch); this framework recomputes a "
                   "layer for every micro-batch or for none, so it runs them recomputed for "
                   "all (less memory, more time), as evaluated below. remat train runs the "
                   "plan as it is (--plan).",
                   (long long)pl->total_partial);
  if (pb->head_chunk > 0)
    remat__fw_note(ex, "This plan holds the head's logits in chunks of %lld tokens (remat train "
                   "--head-chunk); this framework makes a micro-batch's logits whole, so its "
                   "last stage needs more than the plan says: plan with --head-chunk 0 for "
                   "its bytes.",
                   (long long)pb->head_chunk);
  if (!pb->job.engine) return;
  remat__fw_note(ex, "The bytes are remat's own engine's, not this framework's: a PyTorch GPT-2 "
                 "block keeps about twice as much (B1 T1024 C1024 fp32: 128.02 MiB against "
                 "64.08 MiB). For a plan of your model, profile it with python/remat "
                 "(remat.profile, docs/profile.md) and plan that problem.");
}
