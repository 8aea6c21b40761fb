/* calibrate.c: a model's layer times measured on this machine, for the
 * planner to use instead of FLOP counts at a product rate, and for the
 * time a run predicts. A three-block model of the same width (kept,
 * middle, recomputed: one block of each policy) runs single micro-batch
 * steps with its backward in B and W (remat__model_stage_backward_input
 * and _weight), and the model's own timers (remat__model_timers) split
 * each round by kind of layer work; what the round takes beside them (the
 * gradients' zeroing, their norm, the update and the refresh of bf16
 * copies) is counted per parameter. The figures are kept in the machine
 * cache (remat_calibrate_cached), so a run predicts its step without
 * measuring again. */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/model_runtime.h"
#include "remat/job.h"
#include "remat/model.h"
#include "remat/report.h"
#include "job_internal.h"

enum { FIELDS = 10 };

/* One round's figures (seconds per micro-batch) from the timers' change. */
static void round_figures(const double *d, double f[FIELDS]) {
  f[0] = d[REMAT__T_EMBED_F];
  f[1] = d[REMAT__T_EMBED_B];
  f[2] = d[REMAT__T_BLOCK_F] / 3;                         /* three blocks' forwards */
  f[3] = (d[REMAT__T_BLOCK_B] + d[REMAT__T_BLOCK_W]) / 3; /* B and W of each */
  f[4] = d[REMAT__T_BLOCK_W]; /* only the kept block puts off its W */
  f[5] = d[REMAT__T_RECOMPUTE]; /* one rebuild: the others' W runs in their B */
  f[6] = d[REMAT__T_MIDDLE];
  f[7] = d[REMAT__T_HEAD_F];
  f[8] = d[REMAT__T_HEAD_B];
  f[9] = 0; /* the rest of the round, set by the caller */
}

static void fill_tokens(remat_model *m, int64_t n, int64_t V) {
  const remat__backend *be = remat__model_backend(m);
  int32_t *at_in = remat__model_slot_inputs(m, 0), *at_tg = remat__model_slot_targets(m, 0);
  size_t bytes = (size_t)n * sizeof(int32_t);
  int32_t *in = be->map(at_in, bytes, REMAT_MAP_WRITE), *tg = be->map(at_tg, bytes, REMAT_MAP_WRITE);
  for (int64_t i = 0; i < n; i++) {
    in[i] = (int32_t)((i * 31 + 7) % V);
    tg[i] = (int32_t)((i * 17 + 3) % V);
  }
  be->unmap(at_tg, tg, bytes, REMAT_MAP_WRITE);
  be->unmap(at_in, in, bytes, REMAT_MAP_WRITE);
}

/* At least `rounds` rounds, and more (up to 1000) while fewer than
 * `seconds` have passed since the first. */
static int calibrate_for(const remat_config *cfg, int64_t B, int64_t T, int rounds,
                         double seconds, remat_layer_times *t, remat_error *err) {
  memset(t, 0, sizeof *t);
  if (rounds < 1 || rounds > 1000)
    return remat__errorf(err, REMAT_EINVAL, "calibration takes 1 to 1000 rounds, not %d", rounds);
  const int most = seconds > 0 ? 1000 : rounds;
  remat_config c = *cfg;
  c.num_layers = 3;
  const uint8_t policy[3] = {REMAT_KEEP, REMAT_MIDDLE, REMAT_RECOMPUTE};
  remat_stage st = remat_stage_whole(&c, policy);
  st.accumulate = 1;
  st.wdeferred = 1; /* B and W apart, timed apart */
  remat_model *m;
  int rc = remat__model_plan(&m, &c, B, T, &st, err);
  if (rc) return rc;
  /* a tensor rank's shard, timed without its group: its compute alone */
  if (c.tensor_parallel > 1) remat__model_tensor_alone(m);
  /* three blocks at the run's batch: refused, not allocated, where they
   * would not fit this machine (the run's own check comes later) */
  const char *what;
  size_t ram = remat_memory_headroom(&what), need = remat_memplan_peak_bytes(remat_model_memplan(m));
  if (ram && need > ram) {
    char b1[32], b2[32];
    remat_model_destroy(m);
    return remat__errorf(err, REMAT_ENOMEM,
                         "timing three blocks at this batch needs %s but %s leaves %s",
                         remat_format_bytes(need, b1, sizeof b1), what,
                         remat_format_bytes(ram, b2, sizeof b2));
  }
  if ((rc = remat__model_allocate(m, err))) {
    remat_model_destroy(m);
    return rc;
  }
  double *all = remat__malloc((size_t)most * FIELDS * sizeof *all);
  if (!all) {
    remat_model_destroy(m);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory calibrating");
  }
  remat_model_init_weights(m, 1);
  fill_tokens(m, B * T, c.vocab_size);
  remat_hparams hp;
  remat_hparams_default(&hp);
  const float dloss = 1.0f / (float)(B * T);
  const double params = (double)remat_model_num_params(m);
  double start = 0;
  for (int r = -1; r < rounds || (r < most && remat__now() - start < seconds); r++) {
    if (r == 0) start = remat__now(); /* round -1 warms up */
    if (r >= rounds) rounds = r + 1;
    double before[REMAT__T_COUNT], after[REMAT__T_COUNT], d[REMAT__T_COUNT];
    int64_t n[REMAT__T_COUNT];
    remat__model_timers(m, before, n);
    double t0 = remat__now();
    remat_model_zero_grad(m);
    remat__model_stage_forward(m, 0, 0, &hp);
    remat__model_stage_backward_input(m, 0, 0, 0, dloss, &hp);
    remat__model_stage_backward_weight(m, 0, 0, &hp);
    /* the step's end as a trainer runs it, at a learning rate of 0 */
    double norm = sqrt(remat_model_grad_sumsq(m));
    remat_model_update(m, &hp, 0.0f, (float)norm);
    double wall = remat__now() - t0, timed = 0;
    remat__model_timers(m, after, n);
    for (int k = 0; k < REMAT__T_COUNT; k++) d[k] = after[k] - before[k], timed += d[k];
    if (r < 0) continue;
    double *f = all + (size_t)r * FIELDS;
    round_figures(d, f);
    f[9] = wall > timed ? (wall - timed) / params : 0;
  }
  remat_model_destroy(m);
  double med[FIELDS], col[1000];
  for (int f = 0; f < FIELDS; f++) {
    for (int r = 0; r < rounds; r++) col[r] = all[(size_t)r * FIELDS + f];
    remat__sort_doubles(col, (size_t)rounds);
    med[f] = col[rounds / 2];
  }
  remat__free(all);
  *t = (remat_layer_times){.embed_fwd = med[0], .embed_bwd = med[1], .block_fwd = med[2],
                           .block_bwd = med[3], .block_wgrad = med[4], .block_recompute = med[5],
                           .block_middle = med[6], .head_fwd = med[7], .head_bwd = med[8],
                           .update_per_param = med[9], .rounds = rounds};
  return 0;
}

int remat_calibrate(const remat_config *cfg, int64_t B, int64_t T, int rounds,
                    remat_layer_times *t, remat_error *err) {
  return calibrate_for(cfg, B, T, rounds, 0, t, err);
}

void remat_plan_problem_set_times(remat_plan_problem *pb, const remat_layer_times *t) {
  REMAT_ASSERT(pb->num_groups == 3);
  remat_plan_group *e = &pb->groups[0], *b = &pb->groups[1], *h = &pb->groups[2];
  e->fwd = t->embed_fwd, e->bwd = t->embed_bwd;
  b->fwd = t->block_fwd, b->bwd = t->block_bwd;
  b->wgrad = t->block_wgrad < t->block_bwd ? t->block_wgrad : t->block_bwd;
  b->recompute = t->block_recompute, b->middle_recompute = t->block_middle;
  h->fwd = t->head_fwd, h->bwd = t->head_bwd;
  snprintf(pb->time_unit, sizeof pb->time_unit, "s");
}

/* ------------------------------------------------ kept, and predictions */

enum { KEPT = FIELDS + 1 }; /* the figures and the rounds */

/* The kept figures of cfg at B x T: REMAT_CACHE_HIT (*t and *note
 * filled), _MISS or _DAMAGED (why says how); c and key for a store. */
static int kept_times(const remat_config *cfg, int64_t B, int64_t T, int ranks, remat_cache *c,
                      char key[160], remat_layer_times *t, remat_cache_note *note,
                      remat_error *why) {
  remat_cache_entry e = {0};
  remat_cache_open(c, "layers", (int)cfg->precision, 0);
  /* what a block's and the head's times depend on (not the layer count),
   * and how many processes shared the machine while they were measured */
  snprintf(key, 160, "C%lld NH%lld Vp%lld B%lld T%lld ranks%d", (long long)cfg->channels,
           (long long)cfg->num_heads, (long long)cfg->padded_vocab_size, (long long)B,
           (long long)T, ranks > 1 ? ranks : 1);
  if (cfg->family == REMAT_FAMILY_LLAMA) { /* GPT-2's key is the shape above alone */
    size_t n = strlen(key);
    /* "W": its W timed apart (a Llama's figures kept before it counted W in B) */
    snprintf(key + n, 160 - n, " llama NKV%lld H%lld W", (long long)cfg->kv_heads,
             (long long)cfg->ffn_hidden);
  }
  if (cfg->tensor_parallel > 1) { /* a tensor rank's shard */
    size_t n = strlen(key);
    /* " sp2": the gathered rows filled (figures kept before timed zeros) */
    snprintf(key + n, 160 - n, " tp%lld%s", (long long)cfg->tensor_parallel,
             cfg->sequence_parallel ? " sp2" : "");
  }
  int found = remat_cache_get(c, key, KEPT, &e, why);
  int sane = found == REMAT_CACHE_HIT && e.value[FIELDS] >= 1 && e.value[FIELDS] <= 1000;
  for (int k = 0; sane && k < FIELDS; k++) sane = e.value[k] >= 0 && e.value[k] < 1e6;
  if (found == REMAT_CACHE_HIT && !sane)
    return remat__errorf(why, REMAT_EIO, "cache file %s is damaged (its layer times are out of "
                         "range)", c->path), REMAT_CACHE_DAMAGED;
  if (found != REMAT_CACHE_HIT) return found;
  const double *v = e.value;
  *t = (remat_layer_times){.embed_fwd = v[0], .embed_bwd = v[1], .block_fwd = v[2],
                           .block_bwd = v[3], .block_wgrad = v[4], .block_recompute = v[5],
                           .block_middle = v[6], .head_fwd = v[7], .head_bwd = v[8],
                           .update_per_param = v[9], .rounds = (int)v[10]};
  remat_cache_note_set(note, c, REMAT_FIGURE_CACHED, e.date, NULL);
  return REMAT_CACHE_HIT;
}

int remat_calibration_kept(const remat_config *cfg, int64_t B, int64_t T, int ranks,
                           remat_layer_times *t, remat_cache_note *note) {
  remat_cache c;
  char key[160];
  remat_error why = {0};
  return kept_times(cfg, B, T, ranks, &c, key, t, note, &why) == REMAT_CACHE_HIT;
}

int remat_calibration_scale(const remat_config *cfg, int64_t B, int64_t T, int ranks,
                            double factor, remat_error *err) {
  if (!(factor > 0 && factor <= 1))
    return remat__errorf(err, REMAT_EINVAL, "a layer times' scale of %g: it must be in (0, 1]",
                         factor);
  remat_cache c;
  char key[160];
  remat_layer_times t;
  remat_cache_note note;
  remat_error why = {0};
  if (kept_times(cfg, B, T, ranks, &c, key, &t, &note, &why) != REMAT_CACHE_HIT)
    return remat__errorf(err, REMAT_EIO, "no kept layer times to scale%s%s",
                         why.msg[0] ? ": " : "", why.msg);
  remat_cache_entry e = {0};
  const double fig[KEPT] = {t.embed_fwd, t.embed_bwd, t.block_fwd, t.block_bwd,
                            t.block_wgrad, t.block_recompute, t.block_middle, t.head_fwd,
                            t.head_bwd, t.update_per_param, t.rounds};
  memcpy(e.value, fig, sizeof fig);
  for (int k = 0; k < FIELDS; k++) e.value[k] *= factor; /* the times, not the rounds */
  e.n = KEPT;
  memcpy(e.key, key, sizeof key);
  e.date = (int64_t)time(NULL);
  return remat_cache_put(&c, &e, err);
}

int remat_calibrate_cached(const remat_config *cfg, int64_t B, int64_t T, int ranks, int rounds,
                           int again, remat_layer_times *t, remat_cache_note *note,
                           remat_error *err) {
  remat_cache c;
  remat_cache_entry e = {0};
  remat_error why = {0};
  char key[sizeof e.key];
  int found = kept_times(cfg, B, T, ranks, &c, key, t, note, &why);
  if (found == REMAT_CACHE_HIT && !again) return 0;
  if (again) found = REMAT_CACHE_MISS;
  /* quick: at least 3 rounds, more while under half a second */
  int rc = rounds > 0 ? remat_calibrate(cfg, B, T, rounds, t, err)
                      : calibrate_for(cfg, B, T, 3, 0.5, t, err);
  if (rc) return rc;
  const double fig[KEPT] = {t->embed_fwd, t->embed_bwd, t->block_fwd, t->block_bwd,
                            t->block_wgrad, t->block_recompute, t->block_middle, t->head_fwd,
                            t->head_bwd, t->update_per_param, t->rounds};
  memcpy(e.value, fig, sizeof fig);
  e.n = KEPT;
  memcpy(e.key, key, sizeof key);
  remat_cache_keep(&c, &e, again, found, why.msg, note);
  return 0;
}

/* Seconds of one micro-batch through blocks [first, first + n) under
 * their policies, with the embedding and the head where asked. */
static double blocks_time(const remat_layer_times *t, const uint8_t *policy, int64_t first,
                          int64_t n, int embed, int head) {
  double s = embed ? t->embed_fwd + t->embed_bwd : 0;
  if (head) s += t->head_fwd + t->head_bwd;
  for (int64_t b = first; b < first + n; b++)
    s += t->block_fwd + t->block_bwd +
         (policy[b] == REMAT_RECOMPUTE ? t->block_recompute
          : policy[b] == REMAT_MIDDLE  ? t->block_middle
                                       : 0);
  return s;
}

/* The parameters blocks [first, first + n) hold, with the embedding's and
 * the final layernorm's where asked (the head is tied to the embedding). */
static double stage_params(const remat_config *cfg, int64_t n, int embed, int head) {
  double p = (double)n * (double)remat_block_param_count(cfg);
  if (embed) p += (double)remat_unit_floats(cfg, 0);
  if (head) p += (double)remat_unit_floats(cfg, cfg->num_layers + 1);
  return p;
}

int remat_job_measure_tensor_link(remat_job *job, double *rate, remat_error *err) {
  *rate = 0;
  if (!job->tensor) return 0;
  size_t n = (size_t)(job->d.train.B * job->d.train.T * job->cfg.channels) * sizeof(float);
  if (n > ((size_t)64 << 20)) n = (size_t)64 << 20; /* past it the rate is the link's */
  size_t bytes[3] = {n, n, n};
  double rates[3];
  int rc = remat_dist_measure_links(job->tensor, 0, bytes, 10, rates, err);
  if (!rc) *rate = job->tensor_link = rates[0];
  return rc;
}

int remat_job_tensor_nodes(remat_job *job, int *nodes, remat_error *err) {
  *nodes = 1;
  if (!job->tensor) return 0;
  int n = remat_dist_size(job->tensor), *of = calloc((size_t)n, sizeof *of);
  if (!of) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = remat_dist_node_of(job->tensor, of, err);
  for (int r = 0; !rc && r < n; r++)
    if (of[r] + 1 > *nodes) *nodes = of[r] + 1;
  free(of);
  return rc;
}

static int predict(const remat_job *job, const remat_layer_times *t, double *seconds,
                   double *bubble, remat_error *err) {
  const remat_placement *pl = &job->place;
  const remat_config *cfg = &job->cfg;
  const int64_t M = job->d.train.grad_accum, L = cfg->num_layers;
  const int64_t D = pl->replicas > 1 ? pl->replicas : 1;
  *seconds = *bubble = 0;
  /* the update covers a shard of the state under ZeRO 1 and up */
  const double shard = pl->zero >= 1 ? 1.0 / (double)D : 1.0;
  if (pl->stages <= 1) {
    *seconds = (double)M * blocks_time(t, pl->policy, 0, L, 1, 1) +
               t->update_per_param * stage_params(cfg, L, 1, 1) * shard;
    return 0;
  }
  if (!job->have_pb)
    return remat__errorf(err, REMAT_EINVAL, "the pipeline has no planner problem to time");
  const int64_t v = pl->chunks > 1 ? pl->chunks : 1, nv = pl->stages * v;
  int64_t lps[REMAT_MAX_STAGES];
  /* the planner's layers (block b is layer b + 1): policies, full_slots */
  uint8_t *policy = calloc((size_t)L + 2, 2), *full = policy + L + 2;
  if (!policy) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  memcpy(policy + 1, pl->policy, (size_t)L);
  memcpy(full + 1, pl->full_slots, (size_t)L);
  for (int64_t s = 0; s < nv; s++) lps[s] = pl->num_blocks[s] + (s == 0) + (s == nv - 1);
  remat_plan_problem pb;
  remat_plan p = {0};
  int rc = remat_plan_problem_copy(&pb, &job->pb, err);
  if (!rc) {
    remat_plan_problem_set_times(&pb, t);
    rc = remat_plan_evaluate_slots(&pb, lps, policy, full, &p, err);
    remat_plan_problem_free(&pb);
  }
  free(policy);
  if (rc) return rc;
  double busy = 0, sim = p.simulated_time > 0 ? p.simulated_time : p.iteration_time, most = 0;
  for (int64_t s = 0; s < p.num_stages; s++) busy += p.stages[s].time * (double)p.microbatches;
  /* after the flush each stage updates its own weights; the last to end
   * ends the step */
  for (int64_t s = 0; s < pl->stages; s++) {
    double u = 0;
    for (int64_t c = 0; c < v; c++) {
      remat_stage st = v > 1 ? remat_placement_chunk(pl, s, c) : remat_placement_stage(pl, s, 0);
      u += t->update_per_param * stage_params(cfg, st.num_blocks, st.has_embedding, st.has_head);
    }
    if (u * shard > most) most = u * shard;
  }
  *seconds = sim + most;
  *bubble = sim > 0 ? 1 - busy / ((double)p.num_stages * sim) : 0;
  remat_plan_free(&p);
  return 0;
}

/* The layer times with the tensor group's collectives at its measured
 * link, as the planner adds them (remat_plan_problem_add_comm). */
int remat_job_predict_measured(const remat_job *job, const remat_layer_times *t,
                               double *seconds, double *bubble, remat_error *err) {
  if (!(job->tensor_link > 0)) return predict(job, t, seconds, bubble, err);
  remat_tensor_comm c;
  remat_tensor_comm_get(&job->cfg, job->d.train.B, job->d.train.T, &c);
  double k = 1 / job->tensor_link;
  remat_layer_times w = *t;
  w.embed_fwd += k * c.embed_fwd;
  w.embed_bwd += k * c.embed_bwd;
  w.block_fwd += k * c.block_fwd;
  w.block_bwd += k * c.block_bwd; /* in B: W sends nothing */
  w.block_recompute += k * c.block_fwd;
  w.head_fwd += k * c.head_fwd;
  w.head_bwd += k * c.head_bwd;
  return predict(job, &w, seconds, bubble, err);
}
