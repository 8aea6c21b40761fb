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
  remat__free(lo->chunk_layers);
  remat__free(lo->full_slots);
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

/* A chunked plan's stages: each one's chunks (virtual stage, first layer,
 * layers) in the schedule's places, the virtual stages covering the layers
 * in order; recomputed and middle layers within the stage's chunks. */
static int read_chunked(remat_plan_layout *lo, const cJSON *stages, const char *path,
                        remat_error *err) {
  int64_t p = lo->stages, v = lo->chunks, nv = p * v, L = lo->num_layers;
  int64_t *first = remat__calloc((size_t)nv, sizeof *first);
  int64_t *mine = remat__calloc((size_t)L, sizeof *mine); /* 1 + the stage of each layer */
  int rc = first && mine ? 0 : remat__errorf(err, REMAT_ENOMEM, "out of memory");
  for (int64_t s = 0; s < p && !rc; s++) {
    const cJSON *o = cJSON_GetArrayItem(stages, (int)s);
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "chunks");
    int64_t mem, bud;
    if (!cJSON_IsArray(ch) || cJSON_GetArraySize(ch) != v ||
        whole(cJSON_GetObjectItemCaseSensitive(o, "memory_bytes"), 0, 0x1p60, &mem) ||
        whole(cJSON_GetObjectItemCaseSensitive(o, "budget_bytes"), 0, 0x1p60, &bud)) {
      rc = bad(err, path, "each stage needs its chunks, memory_bytes and budget_bytes");
      break;
    }
    lo->memory_bytes[s] = (size_t)mem;
    lo->budget_bytes[s] = (size_t)bud;
    for (int64_t c = 0; c < v && !rc; c++) {
      const cJSON *x = cJSON_GetArrayItem(ch, (int)c);
      int64_t vs, f, n;
      if (whole(cJSON_GetObjectItemCaseSensitive(x, "virtual_stage"), 0, (double)(nv - 1), &vs) ||
          vs != remat_schedule_virtual_stage(lo->schedule, p, s, c) ||
          whole(cJSON_GetObjectItemCaseSensitive(x, "first_layer"), 0, (double)(L - 1), &f) ||
          whole(cJSON_GetObjectItemCaseSensitive(x, "layers"), 1, (double)(L - f), &n)) {
        rc = bad(err, path, "a chunk needs its virtual stage (the schedule's), first layer and "
                 "layers");
        break;
      }
      first[vs] = f;
      lo->chunk_layers[vs] = n;
      lo->layers_per_stage[s] += n;
      for (int64_t l = f; l < f + n; l++) mine[l] = s + 1;
    }
  }
  int64_t next = 0;
  for (int64_t vs = 0; vs < nv && !rc; vs++) {
    if (first[vs] != next) rc = bad(err, path, "the chunks must cover the layers in order");
    next += lo->chunk_layers[vs];
  }
  if (!rc && next != L) rc = bad(err, path, "the chunks do not cover every layer");
  for (int64_t s = 0; s < p && !rc; s++) {
    const cJSON *o = cJSON_GetArrayItem(stages, (int)s), *it;
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "recomputed");
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(o, "middle"); /* optional */
    if (!cJSON_IsArray(rec) || (mid && !cJSON_IsArray(mid))) {
      rc = bad(err, path, "each stage needs its recomputed (and middle) layers as arrays");
      break;
    }
    cJSON_ArrayForEach(it, rec) {
      int64_t l;
      if (whole(it, 0, (double)(L - 1), &l) || mine[l] != s + 1) {
        rc = bad(err, path, "a recomputed layer lies outside its stage's chunks");
        break;
      }
      lo->recompute[l] = REMAT_RECOMPUTE;
    }
    cJSON_ArrayForEach(it, mid) {
      int64_t l;
      if (rc) break;
      if (whole(it, 0, (double)(L - 1), &l) || mine[l] != s + 1 || !lo->recompute[l]) {
        rc = bad(err, path, "a middle layer lies outside its stage or is not among its recomputed");
        break;
      }
      lo->recompute[l] = REMAT_MIDDLE;
    }
  }
  remat__free(mine);
  remat__free(first);
  return rc;
}

/* A stage's optional "full_slots", [layer, k] pairs: recomputed layers
 * (not middle) that recompute in the last k of the stage's slots only, 0 <
 * k < its microbatches_held; they keep in the others. */
static int read_full_slots(remat_plan_layout *lo, const cJSON *o, int64_t first, int64_t n,
                           const char *path, remat_error *err) {
  const cJSON *fs = cJSON_GetObjectItemCaseSensitive(o, "full_slots"), *it;
  int64_t held;
  if (!fs) return 0;
  if (!cJSON_IsArray(fs) ||
      whole(cJSON_GetObjectItemCaseSensitive(o, "microbatches_held"), 2, REMAT__MAX_SLOTS, &held))
    return bad(err, path, "\"full_slots\" must be an array of [layer, slots] pairs, on a stage "
               "with its microbatches_held (2 to 128)");
  if (!lo->full_slots && !(lo->full_slots = remat__calloc((size_t)lo->num_layers, 1)))
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading plan '%s'", path);
  cJSON_ArrayForEach(it, fs) {
    int64_t l, k;
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 ||
        whole(cJSON_GetArrayItem(it, 0), (double)first, (double)(first + n - 1), &l) ||
        whole(cJSON_GetArrayItem(it, 1), 1, (double)(held - 1), &k) ||
        lo->recompute[l] != REMAT_RECOMPUTE || lo->full_slots[l])
      return bad(err, path, "a \"full_slots\" pair needs a layer of its stage among its "
                 "recomputed (not middle, named once) and 1 to microbatches_held - 1 slots");
    lo->recompute[l] = REMAT_KEEP;
    lo->full_slots[l] = (uint8_t)k;
  }
  return 0;
}

/* A plan's stages, one run of layers each, in order. */
static int read_stages(remat_plan_layout *lo, const cJSON *stages, const char *path,
                       remat_error *err) {
  int64_t p = lo->stages, L = lo->num_layers, next = 0;
  int rc = 0;
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
    if (!rc) rc = read_full_slots(lo, o, first, n, path, err);
    next = first + n;
  }
  if (!rc && next != L) rc = bad(err, path, "the stages do not cover every layer");
  return rc;
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
  char names[96], bad_schedule[128];
  snprintf(bad_schedule, sizeof bad_schedule, "\"schedule\" must be %s",
           remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"));
  if (!cJSON_IsArray(stages) || (p = cJSON_GetArraySize(stages)) < 1 || p > REMAT_PLAN_MAX_STAGES)
    rc = bad(err, path, "\"stages\" must be a non-empty array");
  else if (whole(cJSON_GetObjectItemCaseSensitive(root, "num_layers"), 1, REMAT_PLAN_MAX_LAYERS, &L))
    rc = bad(err, path, "\"num_layers\" must be a positive whole number");
  else if (whole(cJSON_GetObjectItemCaseSensitive(root, "microbatches"), 1,
                 REMAT_PLAN_MAX_MICROBATCHES, &m))
    rc = bad(err, path, "\"microbatches\" must be a positive whole number");
  else if (!cJSON_IsString(sched) || remat_plan_schedule_parse(sched->valuestring, &lo->schedule))
    rc = bad(err, path, bad_schedule);
  else if (cJSON_GetObjectItemCaseSensitive(root, "head_chunk") &&
           whole(cJSON_GetObjectItemCaseSensitive(root, "head_chunk"), 1, (int64_t)1 << 30,
                 &lo->head_chunk))
    rc = bad(err, path, "\"head_chunk\" must be a positive whole number of tokens");
  else if (remat_schedule_get(lo->schedule)->chunks_max != 1 &&
           (whole(cJSON_GetObjectItemCaseSensitive(root, "chunks"),
                  remat_schedule_get(lo->schedule)->chunks_min, REMAT_PLAN_MAX_LAYERS,
                  &lo->chunks) ||
            remat_schedule_check(lo->schedule, p, m, lo->chunks, L, NULL)))
    rc = bad(err, path, "\"chunks\" must be the schedule's chunks per stage, every chunk "
             "with a layer");
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
  if (lo->chunks > 1) lo->chunk_layers = remat__calloc((size_t)(p * lo->chunks), sizeof(int64_t));
  else lo->chunks = 1;
  if (!lo->layers_per_stage || !lo->budget_bytes || !lo->memory_bytes || !lo->recompute ||
      (lo->chunks > 1 && !lo->chunk_layers)) {
    cJSON_Delete(root);
    remat_plan_layout_free(lo);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading plan '%s'", path);
  }
  rc = lo->chunks > 1 ? read_chunked(lo, stages, path, err) : read_stages(lo, stages, path, err);
  cJSON_Delete(root);
  if (rc) remat_plan_layout_free(lo);
  return rc;
}
