/* read.c: a plan written by remat_plan_format(..., REMAT_PLAN_FORMAT_JSON),
 * read back so a training run can follow it: stages, layers per stage, the
 * recomputed layers and which of them take the middle policy, budgets and
 * the figures it was made with. Only plans of the schedules the runtime
 * runs (1f1b, gpipe, zb-h1) are read; the others are refused by name. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

void remat_plan_layout_free(remat_plan_layout *lo) {
  remat__free(lo->layers_per_stage);
  remat__free(lo->recompute);
  remat__free(lo->budget_bytes);
  remat__free(lo->memory_bytes);
  memset(lo, 0, sizeof *lo);
}

/* A whole number in [lo, hi]. */
static int whole(const cJSON *v, double lo, double hi, int64_t *out) {
  if (!cJSON_IsNumber(v)) return -1;
  double d = v->valuedouble;
  if (!(d >= lo && d <= hi) || d != floor(d)) return -1;
  *out = (int64_t)d;
  return 0;
}

static int bad(remat_error *err, const char *path, const char *what) {
  return remat__errorf(err, REMAT_EFORMAT, "plan '%s': %s (a plan is the JSON output of the planner)",
                       path, what);
}

int remat_plan_layout_load(remat_plan_layout *lo, const char *path, remat_error *err) {
  memset(lo, 0, sizeof *lo);
  char *buf;
  size_t len;
  int rc = remat__plan_read_bounded(path, &buf, &len, err);
  if (rc) return rc;
  cJSON *root = cJSON_ParseWithLength(buf, len);
  remat__free(buf);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return bad(err, path, "not a JSON object");
  }
  const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
  const cJSON *sched = cJSON_GetObjectItemCaseSensitive(root, "schedule");
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
  int64_t p = 0, L = 0, m = 0;
  if (!cJSON_IsArray(stages) || (p = cJSON_GetArraySize(stages)) < 1 || p > REMAT_PLAN_MAX_STAGES)
    rc = bad(err, path, "\"stages\" must be a non-empty array");
  else if (whole(cJSON_GetObjectItemCaseSensitive(root, "num_layers"), 1, REMAT_PLAN_MAX_LAYERS, &L))
    rc = bad(err, path, "\"num_layers\" must be a positive whole number");
  else if (whole(cJSON_GetObjectItemCaseSensitive(root, "microbatches"), 1,
                 REMAT_PLAN_MAX_MICROBATCHES, &m))
    rc = bad(err, path, "\"microbatches\" must be a positive whole number");
  else if (!cJSON_IsString(sched) || remat_plan_schedule_parse(sched->valuestring, &lo->schedule))
    rc = bad(err, path, "\"schedule\" must be 1f1b, gpipe, interleaved, zb-h1 or zbv");
  else if (lo->schedule == REMAT_SCHED_INTERLEAVED || lo->schedule == REMAT_SCHED_ZBV)
    rc = remat__errorf(err, REMAT_EINVAL, "plan '%s' is for the %s schedule, which remat plan "
                       "can plan and export but remat train cannot run yet (it runs 1f1b, "
                       "gpipe and zb-h1); plan again with one of them", path,
                       remat_plan_schedule_name(lo->schedule));
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  lo->stages = p;
  lo->num_layers = L;
  lo->microbatches = m;
  if (cJSON_IsString(src)) snprintf(lo->source, sizeof lo->source, "%s", src->valuestring);
  lo->layers_per_stage = remat__calloc((size_t)p, sizeof(int64_t));
  lo->budget_bytes = remat__calloc((size_t)p, sizeof(size_t));
  lo->memory_bytes = remat__calloc((size_t)p, sizeof(size_t));
  lo->recompute = remat__calloc((size_t)L, 1);
  if (!lo->layers_per_stage || !lo->budget_bytes || !lo->memory_bytes || !lo->recompute) {
    cJSON_Delete(root);
    remat_plan_layout_free(lo);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading plan '%s'", path);
  }
  int64_t next = 0;
  for (int64_t s = 0; s < p && !rc; s++) {
    const cJSON *o = cJSON_GetArrayItem(stages, (int)s);
    int64_t first, n, mem, bud;
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "recomputed");
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(o, "middle"); /* optional */
    if (whole(cJSON_GetObjectItemCaseSensitive(o, "first_layer"), 0, (double)L, &first) ||
        whole(cJSON_GetObjectItemCaseSensitive(o, "layers"), 1, (double)L, &n) || first != next ||
        first + n > L) {
      rc = bad(err, path, "stages must cover the layers in order, each with at least one");
      break;
    }
    if (whole(cJSON_GetObjectItemCaseSensitive(o, "memory_bytes"), 0, 0x1p60, &mem) ||
        whole(cJSON_GetObjectItemCaseSensitive(o, "budget_bytes"), 0, 0x1p60, &bud) ||
        !cJSON_IsArray(rec)) {
      rc = bad(err, path, "each stage needs memory_bytes, budget_bytes and recomputed");
      break;
    }
    if (mid && !cJSON_IsArray(mid)) {
      rc = bad(err, path, "\"middle\" must be an array of layers");
      break;
    }
    lo->layers_per_stage[s] = n;
    lo->memory_bytes[s] = (size_t)mem;
    lo->budget_bytes[s] = (size_t)bud;
    const cJSON *it;
    cJSON_ArrayForEach(it, rec) {
      int64_t l;
      if (whole(it, (double)first, (double)(first + n - 1), &l)) {
        rc = bad(err, path, "a recomputed layer lies outside its stage");
        break;
      }
      lo->recompute[l] = REMAT_RECOMPUTE;
    }
    /* the middle layers are among the recomputed */
    cJSON_ArrayForEach(it, mid) {
      int64_t l;
      if (rc) break;
      if (whole(it, (double)first, (double)(first + n - 1), &l) || !lo->recompute[l]) {
        rc = bad(err, path, "a middle layer lies outside its stage or is not among its recomputed");
        break;
      }
      lo->recompute[l] = REMAT_MIDDLE;
    }
    next = first + n;
  }
  if (!rc && next != L) rc = bad(err, path, "the stages do not cover every layer");
  cJSON_Delete(root);
  if (rc) remat_plan_layout_free(lo);
  return rc;
}
