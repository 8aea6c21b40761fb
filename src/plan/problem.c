/* problem.c: planning problems: their construction and validation, the JSON
 * problem file, and problems built from a model shape with the engine's byte
 * counts. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "config/family.h"
#include "memory/layout.h"
#include "plan/plan.h"

/* ------------------------------------------------------------ names
 * (the schedules' are src/schedule's) */

static const char *const obj_names[REMAT_OBJ_COUNT] = {"bottleneck", "1f1b", "simulated"};

const char *remat_plan_objective_name(int o) {
  return o >= 0 && o < REMAT_OBJ_COUNT ? obj_names[o] : "?";
}
int remat_plan_objective_parse(const char *s, int *out) {
  for (int i = 0; i < REMAT_OBJ_COUNT; i++)
    if (s && strcmp(s, obj_names[i]) == 0) return *out = i, 0;
  return -1;
}

/* ------------------------------------------------------------ problem */

int remat_plan_problem_init(remat_plan_problem *pb, int64_t stages, int64_t num_groups,
                            remat_error *err) {
  memset(pb, 0, sizeof *pb);
  if (stages < 1 || stages > REMAT_PLAN_MAX_STAGES)
    return remat__errorf(err, REMAT_ERANGE, "stages must be between 1 and %d, not %lld",
                         REMAT_PLAN_MAX_STAGES, (long long)stages);
  if (num_groups < 1 || num_groups > REMAT_PLAN_MAX_LAYERS)
    return remat__errorf(err, REMAT_ERANGE, "a problem needs between 1 and %d layer groups",
                         REMAT_PLAN_MAX_LAYERS);
  pb->memory = remat__calloc((size_t)stages, sizeof *pb->memory);
  pb->groups = remat__calloc((size_t)num_groups, sizeof *pb->groups);
  if (!pb->memory || !pb->groups) {
    remat_plan_problem_free(pb);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory for a problem of %lld groups",
                         (long long)num_groups);
  }
  pb->stages = stages;
  pb->num_groups = num_groups;
  pb->microbatches = 1;
  pb->uniform_memory = 1;
  for (int64_t g = 0; g < num_groups; g++) {
    pb->groups[g].count = 1;
    pb->groups[g].recomputable = 1;
  }
  return 0;
}

void remat_plan_problem_free(remat_plan_problem *pb) {
  remat__free(pb->memory);
  remat__free(pb->groups);
  remat__free(pb->fixed_blocks);
  pb->memory = NULL;
  pb->groups = NULL;
  pb->fixed_blocks = NULL;
}

int remat_plan_problem_copy(remat_plan_problem *dst, const remat_plan_problem *src,
                            remat_error *err) {
  int rc = remat_plan_problem_init(dst, src->stages, src->num_groups, err);
  if (rc) return rc;
  size_t *mem = dst->memory;
  remat_plan_group *grp = dst->groups;
  int64_t nv = src->stages * remat_schedule_chunks(src->schedule, src->chunks);
  int64_t *fixed = src->fixed_blocks ? remat__malloc((size_t)nv * sizeof *fixed) : NULL;
  if (src->fixed_blocks && !fixed) {
    remat_plan_problem_free(dst);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory copying a problem");
  }
  *dst = *src;
  dst->memory = mem;
  dst->groups = grp;
  dst->fixed_blocks = fixed;
  memcpy(mem, src->memory, (size_t)src->stages * sizeof *mem);
  memcpy(grp, src->groups, (size_t)src->num_groups * sizeof *grp);
  if (fixed) memcpy(fixed, src->fixed_blocks, (size_t)nv * sizeof *fixed);
  return 0;
}

int64_t remat_plan_problem_layers(const remat_plan_problem *pb) {
  int64_t L = 0;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    if (pb->groups[g].count > INT64_MAX - L) return INT64_MAX;
    L += pb->groups[g].count > 0 ? pb->groups[g].count : 0;
  }
  return L;
}

void remat_plan_problem_set_memory(remat_plan_problem *pb, size_t bytes) {
  for (int64_t s = 0; s < pb->stages; s++) pb->memory[s] = bytes;
  pb->uniform_memory = 1;
}

int remat_plan_problem_set_stages(remat_plan_problem *pb, int64_t stages, remat_error *err) {
  if (stages == pb->stages) return 0;
  if (stages < 1 || stages > REMAT_PLAN_MAX_STAGES)
    return remat__errorf(err, REMAT_ERANGE, "stages must be between 1 and %d, not %lld",
                         REMAT_PLAN_MAX_STAGES, (long long)stages);
  if (!pb->uniform_memory)
    return remat__errorf(err, REMAT_EINVAL,
                         "the problem gives one budget per stage (%lld of them); changing the "
                         "number of stages needs new budgets too",
                         (long long)pb->stages);
  size_t *m = remat__calloc((size_t)stages, sizeof *m);
  if (!m) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  for (int64_t s = 0; s < stages; s++) m[s] = pb->memory[0];
  remat__free(pb->memory);
  pb->memory = m;
  pb->stages = stages;
  remat__free(pb->fixed_blocks); /* a split of the old stages */
  pb->fixed_blocks = NULL;
  return 0;
}

static int bad_time(double v) { return !isfinite(v) || v < 0; }

/* One group's times and byte counts, and its policies' consistency. */
static int check_group(const remat_plan_group *G, int64_t g, remat_error *err) {
  const char *tf = bad_time(G->fwd)                ? "fwd"
                   : bad_time(G->bwd)              ? "bwd"
                   : bad_time(G->recompute)        ? "recompute"
                   : bad_time(G->middle_recompute) ? "middle_recompute"
                   : bad_time(G->wgrad)            ? "wgrad"
                                                   : NULL;
  if (tf)
    return remat__errorf(err, REMAT_EINVAL,
                         "layers[%lld].%s must be a finite number >= 0", (long long)g, tf);
  const char *bf = G->act_bytes > REMAT_PLAN_MAX_BYTES     ? "act_bytes"
                   : G->ckpt_bytes > REMAT_PLAN_MAX_BYTES  ? "ckpt_bytes"
                   : G->state_bytes > REMAT_PLAN_MAX_BYTES ? "state_bytes"
                   : G->recompute_bytes > REMAT_PLAN_MAX_BYTES ? "recompute_bytes"
                   : G->work_bytes > REMAT_PLAN_MAX_BYTES      ? "work_bytes"
                   : G->middle_bytes > REMAT_PLAN_MAX_BYTES    ? "middle_bytes"
                   : G->middle_recompute_bytes > REMAT_PLAN_MAX_BYTES ? "middle_recompute_bytes"
                   : G->wgrad_bytes > REMAT_PLAN_MAX_BYTES            ? "wgrad_bytes"
                                                                      : NULL;
  if (bf)
    return remat__errorf(err, REMAT_ERANGE, "layers[%lld].%s is above the limit of 2^60 bytes",
                         (long long)g, bf);
  if (G->wgrad > G->bwd)
    return remat__errorf(err, REMAT_EINVAL, "layers[%lld].wgrad %g is more than its bwd %g: "
                         "the weight gradient is a part of the backward", (long long)g,
                         G->wgrad, G->bwd);
  if (G->middle && !G->recomputable)
    return remat__errorf(err, REMAT_EINVAL,
                         "layers[%lld] has a middle policy but is not recomputable; drop "
                         "middle_bytes or make it recomputable",
                         (long long)g);
  return 0;
}

/* min_blocks and a fixed split: each virtual stage at least one block, all
 * of them the model's blocks. */
static int check_blocks(const remat_plan_problem *pb, int64_t v, remat_error *err) {
  if (pb->min_blocks < 0 || pb->min_blocks > 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "min_blocks must be 0 or 1 (blocks each stage and chunk must hold), "
                         "not %lld", (long long)pb->min_blocks);
  if (!pb->fixed_blocks) return 0;
  char names[96];
  if (pb->min_blocks != 1 || v < 2)
    return remat__errorf(err, REMAT_EINVAL, "a fixed split of blocks needs min_blocks 1 and a "
                         "schedule of several chunks (%s)",
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_CHUNKED, "or"));
  int64_t blocks = 0, sum = 0;
  for (int64_t g = 0; g < pb->num_groups; g++)
    if (pb->groups[g].recomputable) blocks += pb->groups[g].count;
  for (int64_t k = 0; k < pb->stages * v; k++) {
    if (pb->fixed_blocks[k] < 1 || pb->fixed_blocks[k] > blocks)
      return remat__errorf(err, REMAT_EINVAL, "the fixed split gives virtual stage %lld %lld "
                           "blocks; each needs at least one", (long long)k,
                           (long long)pb->fixed_blocks[k]);
    sum += pb->fixed_blocks[k];
  }
  if (sum != blocks)
    return remat__errorf(err, REMAT_EINVAL, "the fixed split holds %lld blocks, the model has "
                         "%lld", (long long)sum, (long long)blocks);
  return 0;
}

static int check_job(const remat_plan_job *j, remat_error *err) {
  if (j->micro_batch < 0 || j->seq_len < 0 || j->data_parallel < 0 || j->tensor_parallel < 0 ||
      j->micro_batch > (1 << 30) || j->seq_len > (1 << 30) || j->data_parallel > (1 << 20) ||
      j->tensor_parallel > (1 << 20))
    return remat__errorf(err, REMAT_ERANGE, "the job's micro-batch, sequence length and "
                         "parallel degrees must be between 0 (unknown) and 2^30");
  if (memchr(j->family, 0, sizeof j->family) == NULL)
    return remat__errorf(err, REMAT_EINVAL, "the model family's name is not terminated");
  for (const char *c = j->family; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
      return remat__errorf(err, REMAT_EINVAL, "the model family '%s' may hold only lower-case "
                           "letters, digits, '_' and '-'", j->family);
  return 0;
}

int remat_plan_problem_check(const remat_plan_problem *pb, remat_error *err) {
  if (pb->stages < 1 || pb->stages > REMAT_PLAN_MAX_STAGES)
    return remat__errorf(err, REMAT_ERANGE, "stages must be between 1 and %d, not %lld",
                         REMAT_PLAN_MAX_STAGES, (long long)pb->stages);
  if (pb->microbatches < 1 || pb->microbatches > REMAT_PLAN_MAX_MICROBATCHES)
    return remat__errorf(err, REMAT_ERANGE, "microbatches must be between 1 and %d, not %lld",
                         REMAT_PLAN_MAX_MICROBATCHES, (long long)pb->microbatches);
  char names[96];
  if (!remat_schedule_get(pb->schedule))
    return remat__errorf(err, REMAT_EINVAL, "unknown schedule %d; use %s", pb->schedule,
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"));
  if (pb->objective < 0 || pb->objective >= REMAT_OBJ_COUNT)
    return remat__errorf(err, REMAT_EINVAL, "unknown objective %d; use bottleneck, 1f1b or "
                         "simulated", pb->objective);
  if (pb->num_groups < 1 || !pb->groups)
    return remat__errorf(err, REMAT_EINVAL, "the problem has no layers");
  if (pb->stage_bytes > REMAT_PLAN_MAX_BYTES)
    return remat__errorf(err, REMAT_ERANGE, "stage_bytes %zu is above the limit of 2^60 bytes",
                         pb->stage_bytes);
  if (pb->boundary_bytes > REMAT_PLAN_MAX_BYTES)
    return remat__errorf(err, REMAT_ERANGE, "boundary_bytes %zu is above the limit of 2^60 bytes",
                         pb->boundary_bytes);
  if (pb->num_groups > 0 && pb->v_last_state_less > pb->groups[pb->num_groups - 1].state_bytes)
    return remat__errorf(err, REMAT_ERANGE, "v_last_state_less %zu is above the last layer's "
                         "state_bytes", pb->v_last_state_less);
  int64_t L = 0;
  int rc;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    if (G->count < 1)
      return remat__errorf(err, REMAT_EINVAL, "layers[%lld].count must be at least 1, not %lld",
                           (long long)g, (long long)G->count);
    if (G->count > REMAT_PLAN_MAX_LAYERS - L)
      return remat__errorf(err, REMAT_ERANGE,
                           "the problem has more than %d layers in all; the planner's limit is "
                           "%d (group layers into coarser units)",
                           REMAT_PLAN_MAX_LAYERS, REMAT_PLAN_MAX_LAYERS);
    L += G->count;
    if ((rc = check_group(G, g, err))) return rc;
  }
  if (pb->stages > L)
    return remat__errorf(err, REMAT_EINVAL,
                         "%lld stages but only %lld layers: every stage needs at least one "
                         "layer, so at most %lld stages",
                         (long long)pb->stages, (long long)L, (long long)L);
  int64_t v = remat_schedule_chunks(pb->schedule, pb->chunks);
  if (pb->chunks < 0) return remat__errorf(err, REMAT_EINVAL, "chunks must be at least 1");
  if (pb->per_microbatch != 0 && pb->per_microbatch != 1)
    return remat__errorf(err, REMAT_EINVAL, "per_microbatch must be 0 or 1, not %d",
                         pb->per_microbatch);

  rc = remat_schedule_check(pb->schedule, pb->stages, pb->microbatches, v, L, err);
  if (rc) return rc;
  if (!pb->memory) return remat__errorf(err, REMAT_EINVAL, "the problem has no memory budget");
  if ((rc = check_blocks(pb, v, err))) return rc;
  if ((rc = check_job(&pb->job, err))) return rc;
  for (int64_t s = 0; s < pb->stages; s++)
    if (pb->memory[s] > REMAT_PLAN_MAX_BYTES)
      return remat__errorf(err, REMAT_ERANGE,
                           "memory budget of stage %lld is above the limit of 2^60 bytes",
                           (long long)s);
  /* Every memory expression must stay far from int64 overflow: bound the
   * largest one a stage could ever have. */
  int64_t nmax = remat_schedule_held_bound(pb->schedule, pb->stages, pb->microbatches, v);
  double tot = (double)pb->stage_bytes + (double)pb->boundary_bytes, ttot = 0;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    double big = (double)(G->act_bytes > G->ckpt_bytes ? G->act_bytes : G->ckpt_bytes);
    if ((double)G->middle_bytes > big) big = (double)G->middle_bytes;
    tot += (double)G->count * ((double)G->state_bytes + (double)nmax * big +
                               (double)nmax * (double)G->wgrad_bytes) +
           (double)G->recompute_bytes + (double)G->work_bytes + (double)G->middle_recompute_bytes;
    ttot += (double)G->count * (G->fwd + G->bwd + G->recompute + G->middle_recompute);
  }
  if (!(tot < 0x1p61))
    return remat__errorf(err, REMAT_ERANGE,
                         "the problem's memory figures add up to %.3g bytes, beyond the "
                         "planner's range of 2^61; express sizes in coarser units",
                         tot);
  if (!isfinite(ttot) || !isfinite(ttot * (double)pb->microbatches))
    return remat__errorf(err, REMAT_ERANGE,
                         "the problem's times add up to more than a double can hold; use a "
                         "coarser time unit");
  return 0;
}

/* ------------------------------------------------------------ JSON */

/* A problem nests three levels (the object, "layers", a layer); anything past
 * this is refused before parsing. */
#define MAX_DEPTH 8

static int json_number(const cJSON *it, const char *where, const char *key, double *out,
                       remat_error *err) {
  if (!cJSON_IsNumber(it))
    return remat__errorf(err, REMAT_EFORMAT, "%s%s must be a number", where, key);
  double v = it->valuedouble;
  if (!isfinite(v))
    return remat__errorf(err, REMAT_EFORMAT, "%s%s must be finite", where, key);
  if (v < 0)
    return remat__errorf(err, REMAT_EFORMAT, "%s%s must not be negative (%g)", where, key, v);
  *out = v;
  return 0;
}

static int json_int(const cJSON *it, const char *where, const char *key, int64_t lo, int64_t hi,
                    int64_t *out, remat_error *err) {
  if (!cJSON_IsNumber(it))
    return remat__errorf(err, REMAT_EFORMAT, "%s%s must be an integer", where, key);
  double v = it->valuedouble;
  if (!isfinite(v) || v != floor(v))
    return remat__errorf(err, REMAT_EFORMAT, "%s%s must be an integer, not %g", where, key, v);
  if (v < (double)lo || v > (double)hi)
    return remat__errorf(err, REMAT_ERANGE, "%s%s must be between %lld and %lld, not %.17g",
                         where, key, (long long)lo, (long long)hi, v);
  *out = (int64_t)v;
  return 0;
}

/* A byte count: a whole non-negative number, or a string such as "20GiB". */
static int json_bytes(const cJSON *it, const char *where, const char *key, size_t *out,
                      remat_error *err) {
  if (cJSON_IsString(it)) {
    remat_error e2;
    if (remat_parse_size(it->valuestring, out, &e2))
      return remat__errorf(err, REMAT_EFORMAT, "%s%s: %s", where, key, e2.msg);
  } else {
    double v = 0;
    int rc = json_number(it, where, key, &v, err);
    if (rc) return rc;
    if (v != floor(v))
      return remat__errorf(err, REMAT_EFORMAT,
                           "%s%s must be a whole number of bytes, not %g (sizes are in bytes: "
                           "write 1.5e9 for 1.5 GB)",
                           where, key, v);
    if (v > (double)REMAT_PLAN_MAX_BYTES)
      return remat__errorf(err, REMAT_ERANGE, "%s%s = %g is above the limit of 2^60 bytes",
                           where, key, v);
    *out = (size_t)v;
  }
  if (*out > REMAT_PLAN_MAX_BYTES)
    return remat__errorf(err, REMAT_ERANGE, "%s%s is above the limit of 2^60 bytes", where, key);
  return 0;
}

static int check_keys(const cJSON *obj, const char *where, const char *const *known,
                      remat_error *err) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    int ok = 0;
    for (const char *const *k = known; *k && !ok; k++) ok = strcmp(it->string, *k) == 0;
    if (!ok) {
      char list[256] = "";
      for (const char *const *k = known; *k; k++) {
        if (strlen(list) + strlen(*k) + 3 >= sizeof list) break;
        if (list[0]) strcat(list, ", ");
        strcat(list, *k);
      }
      return remat__errorf(err, REMAT_EFORMAT, "%sunknown field \"%.64s\"; known fields: %s",
                           where, it->string, list);
    }
  }
  return 0;
}

static const cJSON *get(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* Line and column of byte offset `off` in text, for parse errors. */
static void line_col(const char *text, size_t len, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off && i < len; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

/* Checks on the text before cJSON sees it: a bounded size, no NUL byte, and
 * nesting no deeper than MAX_DEPTH (cJSON's own limit is far deeper and its
 * error points at a misleading place). Brackets inside strings do not count. */
static int check_text(const char *text, size_t len, remat_error *err) {
  int line, col;
  if (len > REMAT_PLAN_MAX_PROBLEM_BYTES)
    return remat__errorf(err, REMAT_ERANGE,
                         "the problem is %zu bytes, more than the limit of %zu bytes (16 MiB)", len,
                         (size_t)REMAT_PLAN_MAX_PROBLEM_BYTES);
  const char *nul = memchr(text, 0, len);
  if (nul) {
    size_t off = (size_t)(nul - text);
    line_col(text, len, off, &line, &col);
    return remat__errorf(err, REMAT_EFORMAT,
                         "the problem contains a NUL byte at offset %zu (line %d, column %d); it "
                         "must be JSON text",
                         off, line, col);
  }
  int depth = 0, in_string = 0;
  for (size_t i = 0; i < len; i++) {
    char ch = text[i];
    if (in_string) {
      if (ch == '\\') i++;
      else if (ch == '"') in_string = 0;
    } else if (ch == '"') {
      in_string = 1;
    } else if (ch == '{' || ch == '[') {
      if (++depth > MAX_DEPTH) {
        line_col(text, len, i, &line, &col);
        return remat__errorf(err, REMAT_EFORMAT,
                             "the problem is nested too deeply at offset %zu (line %d, column "
                             "%d): more than %d levels of objects and arrays",
                             i, line, col, MAX_DEPTH);
      }
    } else if ((ch == '}' || ch == ']') && depth > 0) {
      depth--;
    }
  }
  return 0;
}

static int key_cmp(const void *u, const void *v) {
  return strcmp(*(const char *const *)u, *(const char *const *)v);
}

/* A key given twice in any object (cJSON keeps both; the planner would read
 * the first). `where` names the object for the message. */
static int check_duplicates(const cJSON *it, const char *where, remat_error *err) {
  if (cJSON_IsArray(it)) {
    int64_t k = 0;
    for (const cJSON *c = it->child; c; c = c->next, k++) {
      char sub[160];
      snprintf(sub, sizeof sub, "%s[%lld]", where, (long long)k);
      int rc = check_duplicates(c, sub, err);
      if (rc) return rc;
    }
    return 0;
  }
  if (!cJSON_IsObject(it)) return 0;
  size_t n = 0;
  for (const cJSON *c = it->child; c; c = c->next) n++;
  if (n > 1) {
    const char **keys = remat__malloc(n * sizeof *keys);
    if (!keys) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading the problem");
    size_t k = 0;
    for (const cJSON *c = it->child; c; c = c->next) keys[k++] = c->string;
    qsort(keys, n, sizeof *keys, key_cmp);
    for (k = 1; k < n && strcmp(keys[k - 1], keys[k]) != 0; k++) {
    }
    int rc = 0;
    if (k < n)
      rc = remat__errorf(err, REMAT_EFORMAT, "duplicate key \"%.64s\"%s%s", keys[k],
                         where[0] ? " in " : "", where);
    remat__free(keys);
    if (rc) return rc;
  }
  for (const cJSON *c = it->child; c; c = c->next) {
    char sub[160];
    snprintf(sub, sizeof sub, "%s%s%.64s", where, where[0] ? "." : "", c->string);
    int rc = check_duplicates(c, sub, err);
    if (rc) return rc;
  }
  return 0;
}

static int parse_json(remat_plan_problem *pb, const char *text, size_t len, remat_error *err);

/* Messages quote keys from the input: control characters in them (a key
 * holding a newline) become '?', so a message stays one line. */
int remat_plan_problem_parse_json(remat_plan_problem *pb, const char *text, size_t len,
                                  remat_error *err) {
  int rc = parse_json(pb, text, len, err);
  if (rc && err)
    for (char *c = err->msg; *c; c++)
      if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
  return rc;
}

/* The text parsed as one JSON object with no key twice, or an error (and no
 * tree). */
static int parse_root(const char *text, size_t len, cJSON **out, remat_error *err) {
  *out = NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  int line, col, rc = 0;
  if (!root) {
    size_t off = end && end >= text ? (size_t)(end - text) : 0;
    line_col(text, len, off, &line, &col);
    return remat__errorf(err, REMAT_EFORMAT, "invalid JSON at line %d, column %d", line, col);
  }
  size_t off = (size_t)(end - text);
  while (off < len && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' ||
                       text[off] == '\r'))
    off++;
  if (off < len) {
    line_col(text, len, off, &line, &col);
    rc = remat__errorf(err, REMAT_EFORMAT,
                       "unexpected data after the JSON value at offset %zu (line %d, column %d); "
                       "a problem is one JSON object",
                       off, line, col);
  } else if (!cJSON_IsObject(root)) {
    rc = remat__errorf(err, REMAT_EFORMAT, "the problem must be a JSON object");
  } else {
    rc = check_duplicates(root, "", err);
  }
  if (rc) cJSON_Delete(root);
  else *out = root;
  return rc;
}

/* The top-level fields but the budgets and the layers' own: the problem is
 * initialised for "stages" and the number of layer groups. */
static int parse_settings(remat_plan_problem *pb, const cJSON *root, remat_error *err) {
  const char *top = "";
  static const char *const known[] = {"stages", "microbatches", "schedule", "objective",
                                      "memory", "layers", "stage_bytes", "boundary_bytes",
                                      "chunks", "comment", "min_blocks", "family",
                                      "micro_batch_size", "seq_length", "data_parallel",
                                      "tensor_parallel", "sequence_parallel",
                                      "per_microbatch", NULL};
  int rc = check_keys(root, top, known, err);
  if (rc) return rc;
  static const char *const required[] = {"stages", "microbatches", "memory", "layers"};
  for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
    if (!get(root, required[k]))
      return remat__errorf(err, REMAT_EFORMAT, "missing field \"%s\"", required[k]);
  int64_t stages, mb;
  if ((rc = json_int(get(root, "stages"), top, "stages", 1, REMAT_PLAN_MAX_STAGES, &stages, err)))
    return rc;
  if ((rc = json_int(get(root, "microbatches"), top, "microbatches", 1,
                     REMAT_PLAN_MAX_MICROBATCHES, &mb, err)))
    return rc;
  const cJSON *layers = get(root, "layers");
  if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1)
    return remat__errorf(err, REMAT_EFORMAT,
                         "\"layers\" must be a non-empty array of layer groups");
  if ((rc = remat_plan_problem_init(pb, stages, cJSON_GetArraySize(layers), err))) return rc;
  pb->microbatches = mb;
  const cJSON *it;
  char names[96];
  if ((it = get(root, "schedule")) &&
      (!cJSON_IsString(it) || remat_plan_schedule_parse(it->valuestring, &pb->schedule)))
    return remat__errorf(err, REMAT_EFORMAT, "\"schedule\" must be %s",
                         remat_schedule_names(names, sizeof names, REMAT_SCHEDULES_ALL, "or"));
  if ((it = get(root, "chunks")) &&
      (rc = json_int(it, top, "chunks", 1, REMAT_PLAN_MAX_LAYERS, &pb->chunks, err)))
    return rc;
  if ((it = get(root, "objective")) &&
      (!cJSON_IsString(it) || remat_plan_objective_parse(it->valuestring, &pb->objective)))
    return remat__errorf(err, REMAT_EFORMAT, "\"objective\" must be \"bottleneck\", \"1f1b\" "
                         "or \"simulated\"");
  if ((it = get(root, "comment")) && !cJSON_IsString(it))
    return remat__errorf(err, REMAT_EFORMAT, "\"comment\" must be a string");
  if ((it = get(root, "family")) &&
      (!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof pb->job.family))
    return remat__errorf(err, REMAT_EFORMAT, "\"family\" must be a model family's name (\"llama\", "
                         "\"gpt2\", ...) of at most %d characters",
                         (int)sizeof pb->job.family - 1);
  if (it) snprintf(pb->job.family, sizeof pb->job.family, "%s", it->valuestring);
  int64_t per_mb = 0;
  const struct {
    const char *key;
    int64_t hi;
    int64_t *dst;
  } ints[] = {{"min_blocks", 1, &pb->min_blocks},
              {"per_microbatch", 1, &per_mb},
              {"micro_batch_size", 1 << 30, &pb->job.micro_batch},
              {"seq_length", 1 << 30, &pb->job.seq_len},
              {"data_parallel", 1 << 20, &pb->job.data_parallel},
              {"tensor_parallel", 1 << 20, &pb->job.tensor_parallel},
              {"sequence_parallel", 1, &pb->job.sequence_parallel}};
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
    if ((it = get(root, ints[k].key)) &&
        (rc = json_int(it, top, ints[k].key, 0, ints[k].hi, ints[k].dst, err)))
      return rc;
  pb->per_microbatch = (int)per_mb;
  if ((it = get(root, "boundary_bytes")) &&
      (rc = json_bytes(it, top, "boundary_bytes", &pb->boundary_bytes, err)))
    return rc;
  if ((it = get(root, "stage_bytes")) &&
      (rc = json_bytes(it, top, "stage_bytes", &pb->stage_bytes, err)))
    return rc;
  return 0;
}

/* "memory": one budget for every stage, or an array of one per stage. */
static int parse_memory(remat_plan_problem *pb, const cJSON *mem, remat_error *err) {
  int rc;
  if (!cJSON_IsArray(mem)) {
    size_t b;
    if ((rc = json_bytes(mem, "", "memory", &b, err))) return rc;
    remat_plan_problem_set_memory(pb, b);
    return 0;
  }
  if (cJSON_GetArraySize(mem) != pb->stages)
    return remat__errorf(err, REMAT_EFORMAT,
                         "\"memory\" has %d budgets but there are %lld stages; give one number "
                         "for all stages or exactly one per stage",
                         cJSON_GetArraySize(mem), (long long)pb->stages);
  int64_t s = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, mem) {
    char key[32];
    snprintf(key, sizeof key, "memory[%lld]", (long long)s);
    if ((rc = json_bytes(it, "", key, &pb->memory[s], err))) return rc;
    s++;
  }
  pb->uniform_memory = 0;
  return 0;
}

/* A group's middle policy: middle_bytes turns it on, and needs its time. */
static int parse_group_middle(remat_plan_group *G, const cJSON *it, const char *where,
                              remat_error *err) {
  const cJSON *v = get(it, "middle_bytes");
  int rc;
  if (!v) {
    if (get(it, "middle_recompute") || get(it, "middle_recompute_bytes"))
      return remat__errorf(err, REMAT_EFORMAT,
                           "%smiddle_recompute and middle_recompute_bytes need middle_bytes (the "
                           "bytes the layer stores under the middle policy)", where);
    return 0;
  }
  G->middle = 1;
  if ((rc = json_bytes(v, where, "middle_bytes", &G->middle_bytes, err))) return rc;
  if (!get(it, "middle_recompute"))
    return remat__errorf(err, REMAT_EFORMAT, "%smiddle_recompute is missing (it goes with "
                         "middle_bytes)", where);
  if ((rc = json_number(get(it, "middle_recompute"), where, "middle_recompute",
                        &G->middle_recompute, err)))
    return rc;
  if ((v = get(it, "middle_recompute_bytes")) &&
      (rc = json_bytes(v, where, "middle_recompute_bytes", &G->middle_recompute_bytes, err)))
    return rc;
  return 0;
}

/* The costs of one group (its count is read already). */
static int parse_group_costs(remat_plan_group *G, const cJSON *it, const char *where,
                             remat_error *err) {
  static const char *const need[] = {"fwd", "bwd", "act_bytes", "ckpt_bytes", "state_bytes"};
  for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
    if (!get(it, need[k]))
      return remat__errorf(err, REMAT_EFORMAT, "%s%s is missing", where, need[k]);
  if (G->recomputable && !get(it, "recompute"))
    return remat__errorf(err, REMAT_EFORMAT,
                         "%srecompute is missing (it may be left out only with "
                         "\"recomputable\": false)",
                         where);
  const cJSON *v;
  int rc;
  if ((rc = json_number(get(it, "fwd"), where, "fwd", &G->fwd, err))) return rc;
  if ((rc = json_number(get(it, "bwd"), where, "bwd", &G->bwd, err))) return rc;
  if ((v = get(it, "recompute")) &&
      (rc = json_number(v, where, "recompute", &G->recompute, err)))
    return rc;
  if ((rc = json_bytes(get(it, "act_bytes"), where, "act_bytes", &G->act_bytes, err)))
    return rc;
  if ((rc = json_bytes(get(it, "ckpt_bytes"), where, "ckpt_bytes", &G->ckpt_bytes, err)))
    return rc;
  if ((rc = json_bytes(get(it, "state_bytes"), where, "state_bytes", &G->state_bytes, err)))
    return rc;
  if ((v = get(it, "recompute_bytes")) &&
      (rc = json_bytes(v, where, "recompute_bytes", &G->recompute_bytes, err)))
    return rc;
  if ((v = get(it, "work_bytes")) &&
      (rc = json_bytes(v, where, "work_bytes", &G->work_bytes, err)))
    return rc;
  if ((v = get(it, "wgrad")) && (rc = json_number(v, where, "wgrad", &G->wgrad, err))) return rc;
  if ((v = get(it, "wgrad_bytes")) &&
      (rc = json_bytes(v, where, "wgrad_bytes", &G->wgrad_bytes, err)))
    return rc;
  return parse_group_middle(G, it, where, err);
}

/* layers[g]; *total counts the layers of the groups before it. */
static int parse_group(remat_plan_group *G, const cJSON *it, int64_t g, int64_t *total,
                       remat_error *err) {
  static const char *const gknown[] = {"name", "count", "fwd", "bwd", "recompute",
                                       "act_bytes", "ckpt_bytes", "state_bytes",
                                       "recompute_bytes", "work_bytes", "recomputable",
                                       "middle_bytes", "middle_recompute",
                                       "middle_recompute_bytes", "wgrad", "wgrad_bytes",
                                       "comment", NULL};
  char where[48];
  snprintf(where, sizeof where, "layers[%lld].", (long long)g);
  if (!cJSON_IsObject(it))
    return remat__errorf(err, REMAT_EFORMAT, "layers[%lld] must be an object", (long long)g);
  int rc = check_keys(it, where, gknown, err);
  if (rc) return rc;
  const cJSON *v;
  if ((v = get(it, "name"))) {
    if (!cJSON_IsString(v))
      return remat__errorf(err, REMAT_EFORMAT, "%sname must be a string", where);
    snprintf(G->name, sizeof G->name, "%s", v->valuestring);
  }
  if ((v = get(it, "recomputable"))) {
    if (!cJSON_IsBool(v))
      return remat__errorf(err, REMAT_EFORMAT, "%srecomputable must be true or false", where);
    G->recomputable = cJSON_IsTrue(v);
  }
  if ((v = get(it, "count")) &&
      (rc = json_int(v, where, "count", 1, REMAT_PLAN_MAX_LAYERS, &G->count, err)))
    return rc;
  if (G->count > REMAT_PLAN_MAX_LAYERS - *total)
    return remat__errorf(err, REMAT_ERANGE,
                         "the layer counts add up to more than %d, the planner's limit; group "
                         "layers into coarser units",
                         REMAT_PLAN_MAX_LAYERS);
  *total += G->count;
  return parse_group_costs(G, it, where, err);
}

static int parse_json(remat_plan_problem *pb, const char *text, size_t len, remat_error *err) {
  memset(pb, 0, sizeof *pb);
  int rc = check_text(text, len, err);
  if (rc) return rc;
  cJSON *root;
  if ((rc = parse_root(text, len, &root, err))) return rc;
  if ((rc = parse_settings(pb, root, err))) goto done;
  if ((rc = parse_memory(pb, get(root, "memory"), err))) goto done;
  int64_t g = 0, total = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, get(root, "layers")) {
    if ((rc = parse_group(&pb->groups[g], it, g, &total, err))) goto done;
    g++;
  }
  rc = remat_plan_problem_check(pb, err);
done:
  cJSON_Delete(root);
  if (rc) remat_plan_problem_free(pb);
  return rc;
}

/* Reads a whole file, refusing one above REMAT_PLAN_MAX_PROBLEM_BYTES before
 * reading it, by its size. Only a regular file is read (remat__open): a
 * FIFO or a device is refused without being opened, so nothing blocks. */
int remat__plan_read_bounded(const char *path, char **out, size_t *len, remat_error *err) {
  const size_t limit = REMAT_PLAN_MAX_PROBLEM_BYTES;
  *out = NULL;
  *len = 0;
  struct stat st;
  int fd, orc = remat__open(path, O_RDONLY, REMAT__OPEN_FILE, "JSON file", &fd, &st, err);
  if (orc) return orc;
  int regular = S_ISREG(st.st_mode);
  if (regular && (uint64_t)st.st_size > limit) {
    close(fd);
    return remat__errorf(err, REMAT_ERANGE,
                         "problem file '%s' is %lld bytes, more than the limit of %zu bytes "
                         "(16 MiB)",
                         path, (long long)st.st_size, limit);
  }
  /* a regular file gets one byte more than its size, to notice it growing */
  size_t cap = regular ? (size_t)st.st_size + 1 : limit + 1;
  char *buf = remat__malloc(cap);
  if (!buf) {
    close(fd);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading '%s'", path);
  }
  size_t n = 0;
  int rc = 0;
  while (n < cap) {
    ssize_t got = read(fd, buf + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      rc = remat__errorf(err, REMAT_EIO, "cannot read '%s': %s", path, strerror(errno));
      break;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  close(fd);
  if (!rc && n > limit)
    rc = remat__errorf(err, REMAT_ERANGE,
                       "problem input '%s' is larger than the limit of %zu bytes (16 MiB)", path,
                       limit);
  else if (!rc && regular && n == cap)
    rc = remat__errorf(err, REMAT_EIO, "problem file '%s' grew while it was read", path);
  if (rc) {
    remat__free(buf);
    return rc;
  }
  *out = buf;
  *len = n;
  return 0;
}

int remat_plan_problem_load(remat_plan_problem *pb, const char *path, remat_error *err) {
  memset(pb, 0, sizeof *pb);
  char *buf;
  size_t len;
  int rc = remat__plan_read_bounded(path, &buf, &len, err);
  if (rc) return rc;
  if (len == 0) rc = remat__errorf(err, REMAT_EFORMAT, "problem file '%s' is empty", path);
  if (!rc) {
    rc = remat_plan_problem_parse_json(pb, buf, len, err);
    if (rc && err) {
      char msg[REMAT_ERRMSG_MAX];
      snprintf(msg, sizeof msg, "%s", err->msg);
      remat__errorf(err, rc, "%s: %s", path, msg);
    }
  }
  if (!rc) snprintf(pb->source, sizeof pb->source, "%s", path);
  remat__free(buf);
  return rc;
}

/* ------------------------------------------------------------ from a model */

int remat_plan_problem_from_model(remat_plan_problem *pb, const remat_config *cfg, int64_t B,
                                  int64_t T, int64_t stages, int64_t microbatches, size_t memory,
                                  remat_error *err) {
  return remat_plan_problem_from_replicas(pb, cfg, B, T, stages, microbatches, 1, 0, memory,
                                          err);
}

/* The model and micro-batch a problem from a shape describes. */
static void describe(char *buf, size_t cap, const remat_config *cfg, int64_t B, int64_t T) {
  if (cfg->family == REMAT_FAMILY_LLAMA)
    snprintf(buf, cap, "Llama L=%lld C=%lld NH=%lld NKV=%lld H=%lld V=%lld%s, B=%lld, T=%lld",
             (long long)cfg->num_layers, (long long)cfg->channels, (long long)cfg->num_heads,
             (long long)cfg->kv_heads, (long long)cfg->ffn_hidden, (long long)cfg->vocab_size,
             cfg->untied ? "" : " tied", (long long)B, (long long)T);
  else
    snprintf(buf, cap, "GPT-2 L=%lld C=%lld NH=%lld V=%lld, B=%lld, T=%lld",
             (long long)cfg->num_layers, (long long)cfg->channels, (long long)cfg->num_heads,
             (long long)cfg->vocab_size, (long long)B, (long long)T);
  if (remat__tp(cfg) > 1) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, ", tensor-parallel %lld%s (a rank's bytes)",
             (long long)remat__tp(cfg), cfg->sequence_parallel ? " with sequence parallelism" : "");
  }
  if (cfg->head_chunk > 0 && cfg->head_chunk < B * T) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, ", head in chunks of %lld tokens", (long long)cfg->head_chunk);
  }
}

/* zbv's first rank: what the head holds less beside the embedding, where
 * its chunk reads the embedding's tied matrix (the runtime's rule,
 * remat__stage_tied_borrowed): its state alone less its joint state; 0
 * where it keeps a copy, and on one stage, whose head's state is its joint
 * state already. */
static size_t v_last_state_less(const remat_config *cfg, const remat_memory_model *mm,
                                int64_t P, int64_t M, int64_t D) {
  remat_stage head = {.has_head = 1, .accumulate = M > 1, .replicas = D, .tied_borrowed = 1};
  size_t alone = mm->layer[REMAT_LAYER_HEAD].state;
  return P > 1 && remat__stage_tied_borrowed(cfg, &head) && alone > mm->head_joint_state
             ? alone - mm->head_joint_state
             : 0;
}

int remat_plan_problem_from_replicas(remat_plan_problem *pb, const remat_config *cfg, int64_t B,
                                     int64_t T, int64_t stages, int64_t microbatches,
                                     int64_t replicas, int zero, size_t memory,
                                     remat_error *err) {
  memset(pb, 0, sizeof *pb);
  remat_memory_model mm;
  int rc = remat_memory_model_get(cfg, B, T, &mm, err);
  if (rc) return rc;
  /* Replicas of every stage (a P x D grid when stages > 1): a layer's state
   * and gradient buffer are the replica's. A stage's communication buffers
   * depend on which units it holds; the problem's one stage_bytes counts
   * the whole model's (remat_replica_bytes_get), which no stage exceeds:
   * exact for one stage, an upper bound on a grid. */
  remat_replica_bytes rb = {0};
  if (replicas > 1) {
    if ((rc = remat_replica_bytes_get(cfg, replicas, zero, &rb, err))) return rc;
    /* its gradient buffers are communication buffers (rb.comm), not work */
    for (int k = 0; k < REMAT_LAYER_KIND_COUNT; k++) {
      mm.layer[k].state = rb.state[k];
      mm.layer[k].grad = 0;
    }
    mm.layer[REMAT_LAYER_HEAD].state = rb.head_alone_state;
    mm.head_joint_state = rb.head_joint_state;
  }
  /* gradients computed apart, then added (several micro-batches, or replicas) */
  int apart = microbatches > 1 || replicas > 1;
  if ((rc = remat_plan_problem_init(pb, stages, 3, err))) return rc;
  pb->microbatches = microbatches;
  remat_plan_problem_set_memory(pb, memory);

  /* a tensor rank's share: its heads' width and its vocabulary */
  double Bd = (double)B, Td = (double)T, C = (double)cfg->channels;
  double tp = (double)remat__tp(cfg), Vp = (double)cfg->padded_vocab_size / tp;
  const double G = 1e9; /* times in GFLOP */
  static const char *const names[REMAT_LAYER_KIND_COUNT] = {"embedding", "block", "head"};
  for (int k = 0; k < REMAT_LAYER_KIND_COUNT; k++) {
    remat_plan_group *g = &pb->groups[k];
    const remat_layer_bytes *lb = &mm.layer[k];
    snprintf(g->name, sizeof g->name, "%s", names[k]);
    g->count = k == REMAT_LAYER_BLOCK ? cfg->num_layers : 1;
    g->act_bytes = lb->kept;
    g->ckpt_bytes = lb->ckpt;
    g->recompute_bytes = lb->scratch + (apart && lb->scratch ? lb->grad : 0);
    g->work_bytes = lb->work + (apart ? lb->grad : 0);
    g->state_bytes = lb->state;
    /* one stage holds the embedding and the head together */
    if (k == REMAT_LAYER_HEAD && stages == 1)
      g->state_bytes = mm.head_joint_state - (apart ? 0 : mm.tied_grad_bytes);
    g->recomputable = k == REMAT_LAYER_BLOCK;
    g->middle = k == REMAT_LAYER_BLOCK;
    if (g->middle) {
      g->middle_bytes = lb->mid;
      g->middle_recompute_bytes = lb->mid_scratch + (apart ? lb->grad : 0);
    }
  }
  remat_plan_group *e = &pb->groups[REMAT_LAYER_EMBEDDING], *blk = &pb->groups[REMAT_LAYER_BLOCK],
                   *h = &pb->groups[REMAT_LAYER_HEAD];
  e->fwd = e->bwd = Bd * Td * C / G;
  /* a block's products: 2 FLOPs per token and weight (GPT-2's 12 C^2
   * weights: 24 B T C^2), and attention's scores and weighted sum */
  double mm_w = remat_block_matrix_weights(cfg);
  double f = (2.0 * Bd * Td * mm_w + 4.0 * Bd * Td * Td * C / tp) / G;
  blk->fwd = f;
  blk->bwd = 2 * f;
  blk->recompute = f;
  blk->middle_recompute = REMAT_PLAN_MIDDLE_FLOP_PER_ELEMENT * Bd * Td * C / G;
  h->fwd = (2.0 * Bd * Td * C * Vp + 5.0 * Bd * Td * Vp) / G;
  h->bwd = 2 * h->fwd;
  /* A block's weight gradient (W) is its products' weight products,
   * as many FLOP as their forward (its layernorms' small ones run in W too;
   * the embedding's and the head's run with B). A kept block keeps from its
   * B to its W its W record: the gradients entering its products (3C, C,
   * 4C, C) and its layernorms (C, C), bf16 where the products take bf16,
   * and those products' and layernorms' inputs; its slot is free from its
   * B (the schedule's in-flight count n holds slots from F to B). A block
   * that rebuilds its activations runs its W with its B. */
  blk->wgrad = 2.0 * Bd * Td * mm_w / G;
  blk->wgrad_bytes = mm.block_wrec_bytes; /* its W record (remat_stage.wdeferred) */
  pb->stage_bytes = mm.stage_bytes + rb.comm;
  pb->boundary_bytes = mm.boundary_bytes;
  pb->v_last_state_less = v_last_state_less(cfg, &mm, stages, microbatches, replicas);
  snprintf(pb->time_unit, sizeof pb->time_unit, "GFLOP");
  snprintf(pb->job.family, sizeof pb->job.family, "%s", remat_family_name((int)cfg->family));
  pb->job.micro_batch = B;
  pb->job.seq_len = T;
  pb->job.data_parallel = replicas;
  pb->job.tensor_parallel = remat__tp(cfg);
  pb->job.sequence_parallel = remat__sp(cfg) > 1;
  pb->job.kv_heads = cfg->family == REMAT_FAMILY_LLAMA ? cfg->kv_heads : cfg->num_heads;
  pb->job.engine = 1;
  describe(pb->source, sizeof pb->source, cfg, B, T);
  pb->head_chunk = cfg->head_chunk > 0 && cfg->head_chunk < B * T ? cfg->head_chunk : 0;
  if (replicas > 1) {
    size_t n = strlen(pb->source);
    snprintf(pb->source + n, sizeof pb->source - n, ", %lld replicas, ZeRO %d",
             (long long)replicas, zero);
  }
  if ((rc = remat_plan_problem_check(pb, err))) remat_plan_problem_free(pb);
  return rc;
}
