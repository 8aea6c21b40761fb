/* place.c: each block's policy and each stage's blocks (remat/job.h): a
 * recompute ratio, a block list, a memory budget solved by the planner for
 * one process or a replica, or a pipeline's stages by hand, from a plan
 * file or by the planner's exact optimum. The budgets, parsed once, enter
 * the planner's problem in one place (remat_plan_problem_set_budgets); the
 * planner's layers and the blocks convert in one (src/parallel/placement.c).
 * Then the arenas every rank will plan, shown before any exists, and the
 * pipeline's predicted time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "job/job_internal.h"

/* ------------------------------------------------------------- policies */

/* A budget for the whole model in one process (or each replica): the
 * planner's choice of keep, middle or full per block, the least recompute
 * time whose arena fits. A budget means the same everywhere: the arena of a
 * step (a pipeline stage's, a replica's, one process's), what the planner
 * plans; the training data and the loaders are held beside it and shown
 * apart. */
static int fewest_recompute(const remat_job *job, const remat_config *cfg, uint8_t *policy,
                            int64_t *full, int64_t *mid, size_t *need, remat_error *err) {
  const remat_job_desc *d = &job->d;
  /* the library's one answer (remat_fewest_recompute) for this model */
  remat_stage whole = d->replicas > 1 ? remat_stage_replica(cfg, NULL, d->replicas, 0, d->zero)
                                      : remat_stage_whole(cfg, NULL);
  whole.accumulate = d->train.grad_accum > 1 || d->replicas > 1;
  return remat_fewest_recompute(cfg, d->train.B, d->train.T, &whole, job->budgets.bytes[0],
                                policy, full, mid, need, err);
}

/* The head in chunks (--head-chunk auto): taken where the whole head's
 * choice recomputes (or does not fit) and the chunked one recomputes fewer
 * blocks in full, or as many and fewer under the middle policy. */
static int policy_for_budget(remat_job *job, uint8_t *policy, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t L = job->cfg.num_layers, full, mid;
  size_t budget = job->budgets.bytes[0], need;
  char b1[32], b2[32];
  int rc = fewest_recompute(job, &job->cfg, policy, &full, &mid, &need, err);
  int64_t k = d->head_chunk < 0 ? remat_head_chunk_auto(&job->cfg, d->train.B, d->train.T) : 0;
  if (k > 0 && (rc == REMAT_EINFEASIBLE || full + mid > 0)) {
    remat_config c = job->cfg;
    c.head_chunk = k;
    uint8_t p[REMAT_MAX_LAYERS];
    int64_t f2, m2;
    size_t n2;
    remat_error e2;
    int rc2 = fewest_recompute(job, &c, p, &f2, &m2, &n2, &e2);
    if (rc2 == 0 && (rc || f2 < full || (f2 == full && m2 < mid))) {
      job->cfg.head_chunk = k;
      memcpy(policy, p, (size_t)L);
      return 0;
    }
    if (rc2 == REMAT_EINFEASIBLE && rc == REMAT_EINFEASIBLE && n2 < need) {
      full = f2, mid = m2, need = n2; /* the least memory there is, for the message */
    }
  }
  if (rc == REMAT_EINFEASIBLE) /* the least-memory choice */
    return remat__errorf(err, REMAT_EINFEASIBLE,
                         "a memory budget of %s does not fit: even the least memory (%lld of "
                         "%lld blocks recomputed, %lld middle) needs an arena of %s (%zu bytes; "
                         "the training data is held beside it); raise the budget to at least "
                         "that or lower the batch or the sequence length",
                         remat_format_bytes(budget, b1, sizeof b1), (long long)full,
                         (long long)L, (long long)mid, remat_format_bytes(need, b2, sizeof b2),
                         need);
  return rc;
}

int remat_plan_problem_from_job(remat_plan_problem *pb, const remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int rc = remat_plan_problem_from_replicas(pb, &job->cfg, d->train.B, d->train.T, 1,
                                            d->train.grad_accum, d->replicas, d->zero,
                                            (size_t)1 << 60, err);
  if (!rc && (rc = remat_plan_problem_set_budgets(pb, &job->budgets, err)))
    remat_plan_problem_free(pb);
  return rc;
}

/* A plan file's placement, checked against this job; budgets from it
 * unless the description gives them. */
static int layout_from_file(remat_job *job, int64_t *lps, uint8_t *layer_policy,
                            uint8_t *layer_full, remat_error *err) {
  const remat_job_desc *d = &job->d;
  remat_plan_problem *pb = &job->pb;
  int64_t P = d->stages;
  remat_plan_layout lo;
  int rc = remat_plan_layout_load(&lo, d->plan, err);
  if (rc) return rc;
  if (strcmp(lo.source, pb->source) != 0)
    rc = remat__errorf(err, REMAT_EINVAL, "the plan %s was made for '%s', not for this job "
                       "('%s'); make it with remat plan --config and the same batch and "
                       "sequence length", d->plan, lo.source, pb->source);
  else if (lo.stages != P || lo.microbatches != d->train.grad_accum ||
           lo.schedule != d->schedule || lo.chunks != remat__job_chunks(d))
    rc = remat__errorf(err, REMAT_EINVAL, "the plan %s is for %lld stages, %lld micro-batches "
                       "and %s of %lld chunks; this job has %lld stages, %lld micro-batches and "
                       "%s of %lld", d->plan, (long long)lo.stages, (long long)lo.microbatches,
                       remat_plan_schedule_name(lo.schedule), (long long)lo.chunks, (long long)P,
                       (long long)d->train.grad_accum, remat_plan_schedule_name(d->schedule),
                       (long long)remat__job_chunks(d));
  if (!rc) {
    for (int64_t s = 0; s < P; s++) {
      if (!job->budgets.n) pb->memory[s] = lo.budget_bytes[s];
      lps[s] = lo.layers_per_stage[s];
    }
    for (int64_t vs = 0; lo.chunks > 1 && vs < P * lo.chunks; vs++) lps[vs] = lo.chunk_layers[vs];
    if (!job->budgets.n) pb->uniform_memory = 0;
    memcpy(layer_policy, lo.recompute, (size_t)job->cfg.num_layers + 2);
    if (lo.full_slots) memcpy(layer_full, lo.full_slots, (size_t)job->cfg.num_layers + 2);
  }
  remat_plan_layout_free(&lo);
  return rc;
}

/* Blocks per stage (or per chunk, in model order) given by hand, with the
 * blocks' policies, in the planner's layers. */
static int layout_by_hand(remat_job *job, int64_t *lps, const uint8_t *block_policy,
                          uint8_t *layer_policy, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t P = d->stages, L = job->cfg.num_layers, v = remat__job_chunks(d), nv = P * v;
  int64_t n, sum = 0, blocks[REMAT_MAX_STAGES];
  int rc = remat_parse_counts(d->layers, blocks, REMAT_MAX_STAGES, &n, err);
  for (int64_t s = 0; !rc && s < n; s++) sum += blocks[s];
  if (!rc && n != nv && v > 1)
    rc = remat__errorf(err, REMAT_EINVAL, "%lld block counts for %lld stages of %lld chunks: "
                       "give one per chunk, %lld in model order", (long long)n, (long long)P,
                       (long long)v, (long long)nv);
  else if (!rc && v == 1 && n != P)
    rc = remat__errorf(err, REMAT_EINVAL, "%lld block counts for %lld stages: give one per "
                       "stage, like 2,2", (long long)n, (long long)P);
  else if (!rc && sum != L)
    rc = remat__errorf(err, REMAT_EINVAL, "blocks per stage %s places %lld blocks but the model "
                       "has %lld", d->layers, (long long)sum, (long long)L);
  if (!rc)
    remat_placement_layers_of_blocks(&job->cfg, nv, blocks, block_policy, lps, layer_policy);
  return rc;
}

/* --calibrate: rank 0 times the model's layers on this machine (and keeps
 * the figures in the machine cache) and every rank plans with its figures
 * (they must place the stages alike). */
static int calibrated_times(remat_job *job, remat_layer_times *t, remat_error *err) {
  const remat_job_desc *d = &job->d;
  if (d->calibrate <= 0) return 0;
  remat_cache_note note; /* kept for the run's prediction, and later runs' */
  int rc = job->rank == 0 ? remat_calibrate_cached(&job->cfg, d->train.B, d->train.T, 1,
                                                   d->calibrate, 1, t, &note, err)
                          : 0;
  if ((rc = remat__job_agree(job, rc, err))) return rc;
  if (job->dist && (rc = remat_dist_broadcast(job->dist, t, sizeof *t, 0, err))) return rc;
  return 0;
}

/* The pipeline's problem for the job's model (with its head chunk), at
 * the calibrated times t (NULL: FLOP-based). */
static int pipeline_problem(const remat_job *job, remat_plan_problem *pb,
                            const remat_layer_times *t, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t v = remat__job_chunks(d);
  int rc = remat_plan_problem_from_replicas(pb, &job->cfg, d->train.B, d->train.T, d->stages,
                                            d->train.grad_accum, d->replicas, d->zero,
                                            (size_t)1 << 60, err);
  if (rc) return rc;
  if (t) remat_plan_problem_set_times(pb, t);
  pb->schedule = d->schedule;
  pb->chunks = v > 1 ? v : 0;
  pb->per_microbatch = d->per_microbatch;
  pb->spend_pools = d->spend_pools;
  if ((rc = remat_plan_problem_set_budgets(pb, &job->budgets, err))) remat_plan_problem_free(pb);
  return rc;
}

/* --head-chunk auto on a pipeline the planner places: the head in chunks
 * where the whole head's plan recomputes (or does not fit) and the chunked
 * one is faster (or alone fits). rc is the whole head's solve. */
static int head_chunk_choice(remat_job *job, const remat_layer_times *t, int rc,
                             remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t k = d->head_chunk < 0 ? remat_head_chunk_auto(&job->cfg, d->train.B, d->train.T) : 0;
  if (k <= 0 || !job->budgets.n || (rc != REMAT_EINFEASIBLE && rc != 0) ||
      (rc == 0 && job->plan.total_recomputed == 0))
    return rc;
  remat_plan_problem pb;
  remat_plan plan;
  remat_error e2;
  job->cfg.head_chunk = k;
  int rc2 = pipeline_problem(job, &pb, t, &e2);
  if (rc2) {
    job->cfg.head_chunk = 0;
    return rc;
  }
  rc2 = remat_plan_solve(&pb, &plan, &e2);
  if (remat_plan_better(rc, &job->plan, rc2, &plan)) {
    remat_plan_free(&job->plan);
    remat_plan_problem_free(&job->pb);
    job->plan = plan;
    job->pb = pb;
    if (rc2) *err = e2;
    return rc2;
  }
  if (rc2 == 0 || rc2 == REMAT_EINFEASIBLE) remat_plan_free(&plan);
  remat_plan_problem_free(&pb);
  job->cfg.head_chunk = 0;
  return rc;
}

/* Recompute per micro-batch (full_slots, model order: by hand, from a plan
 * file or the planner's) into the placement, each block's count of slots
 * within its stage's (or chunk's) in-flight count. */
static int set_full_slots(remat_job *job, const uint8_t *full_slots, remat_error *err) {
  remat_placement *pl = &job->place;
  int64_t v = pl->chunks > 1 ? pl->chunks : 1;
  memcpy(pl->full_slots, full_slots, (size_t)job->cfg.num_layers);
  for (int64_t s = 0; s < pl->stages; s++)
    for (int64_t c = 0; c < v; c++) {
      remat_stage st = v > 1 ? remat_placement_chunk(pl, s, c) : remat_placement_stage(pl, s, 0);
      for (int64_t i = 0; i < st.num_blocks; i++)
        if (st.full_slots[i] > st.inflight)
          return remat__errorf(err, REMAT_EINVAL,
                               "block %lld recomputes in full in %u slots (full@%u) but its "
                               "stage %lld%s holds %lld micro-batch%s in flight; give it at "
                               "most full@%lld", (long long)(st.first_block + i),
                               st.full_slots[i], st.full_slots[i], (long long)s,
                               v > 1 ? " (that chunk)" : "", (long long)st.inflight,
                               st.inflight == 1 ? "" : "es", (long long)st.inflight);
    }
  return 0;
}

/* The pipeline's placement, chosen the way the description says: blocks
 * per stage by hand (with the block policies and full_slots), a plan file,
 * else the planner's exact optimum under the budgets (or, without any,
 * memory ignored). The plan's figures come from the memory model, which
 * the stages' arenas follow. */
static int place_pipeline(remat_job *job, const uint8_t *block_policy,
                          const uint8_t *full_slots, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t P = d->stages, L = job->cfg.num_layers, lps[REMAT_MAX_STAGES];
  int64_t v = remat__job_chunks(d), nv = P * v; /* nv virtual stages: lps has one each */
  if (P > L + 2)
    return remat__errorf(err, REMAT_EINVAL, "%lld stages: more stages than the model has layers "
                         "(%lld blocks, the embedding and the head)", (long long)P, (long long)L);
  if (v > 1 && remat_schedule_check(d->schedule, P, d->train.grad_accum, v, L + 2, err))
    return REMAT_EINVAL;
  for (int64_t b = 0; b < L && !d->layers; b++) /* placed by hand, or by the planner */
    if (full_slots[b])
      return remat__errorf(err, REMAT_EINVAL, "full@%u:%lld recomputes per micro-batch in the "
                           "slots of a stage placed by hand: give %s too", full_slots[b],
                           (long long)b, remat__job_name(d, "layers"));
  remat_layer_times times = {0};
  int rc = 0;
  if (d->plan && d->head_chunk < 0) { /* auto: the head chunk the plan was made with */
    remat_plan_layout lo;
    if ((rc = remat_plan_layout_load(&lo, d->plan, err))) return rc;
    job->cfg.head_chunk = lo.head_chunk;
    remat_plan_layout_free(&lo);
  }
  rc = calibrated_times(job, &times, err);
  if (rc || (rc = pipeline_problem(job, &job->pb, d->calibrate > 0 ? &times : NULL, err)))
    return rc;
  job->have_pb = 1;
  /* the planner's layers' policies and full_slots (layer b + 1 is block b) */
  uint8_t *layer_policy = calloc((size_t)L + 2, 2), *layer_full = layer_policy + L + 2;
  if (!layer_policy) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  if (d->plan) {
    rc = layout_from_file(job, lps, layer_policy, layer_full, err);
  } else if (d->layers) {
    rc = layout_by_hand(job, lps, block_policy, layer_policy, err);
    memcpy(layer_full + 1, full_slots, (size_t)L);
  } else {
    rc = remat_plan_solve(&job->pb, &job->plan, err);
    rc = head_chunk_choice(job, d->calibrate > 0 ? &times : NULL, rc, err);
    if (rc == 0 || rc == REMAT_EINFEASIBLE) job->have_plan = 1;
    if (rc == REMAT_EINFEASIBLE) {
      char msg[sizeof err->msg];
      snprintf(msg, sizeof msg, "%s", err->msg);
      remat__errorf(err, rc, "memory budget %s: %.*s", d->memory, (int)sizeof msg - 64, msg);
    }
    if (!rc) {
      for (int64_t s = 0; s < nv; s++)
        lps[s] = v > 1 ? job->plan.chunk_layers[s] : job->plan.stages[s].num_layers;
      memcpy(layer_policy, job->plan.policy, (size_t)L + 2);
      if (job->plan.full_slots) memcpy(layer_full, job->plan.full_slots, (size_t)L + 2);
    }
  }
  for (int64_t s = 0; s < nv && !rc && !job->have_plan; s++)
    if (lps[s] < 1) rc = remat__errorf(err, REMAT_EINVAL, "%s %lld would hold no layer",
                                       v > 1 ? "chunk" : "stage", (long long)s);
  /* the stages as placed, and each block's slots within its stage's */
  if (!rc)
    rc = remat_placement_from_chunks(&job->place, &job->cfg, P, v, lps, layer_policy,
                                     d->schedule, d->train.grad_accum, err);
  if (!rc) rc = set_full_slots(job, layer_full + 1, err);
  if (!rc && !job->have_plan) {
    rc = remat_plan_evaluate_slots(&job->pb, lps, layer_policy, layer_full, &job->plan, err);
    if (!rc) job->have_plan = 1;
    for (int64_t s = 0; s < P && !rc; s++) {
      const remat_plan_stage *ps = &job->plan.stages[s];
      char b1[32], b2[32];
      if (remat_plan_stage_held(ps) > ps->budget_bytes)
        rc = remat__errorf(err, REMAT_EINFEASIBLE,
                           "stage %lld needs %s but its budget is %s: the placement does not "
                           "fit; recompute more blocks or give it fewer",
                           (long long)s, remat_format_bytes(remat_plan_stage_held(ps), b1, sizeof b1),
                           remat_format_bytes(ps->budget_bytes, b2, sizeof b2));
    }
  }
  job->place.replicas = d->replicas;
  job->place.zero = d->zero;
  free(layer_policy);
  return rc;
}

/* Each block's policy and each stage's blocks, the way the description
 * says. */
int remat__job_place(remat_job *job, remat_error *err) {
  const remat_job_desc *d = &job->d;
  int64_t L = job->cfg.num_layers;
  uint8_t policy[REMAT_MAX_LAYERS], full[REMAT_MAX_LAYERS] = {0};
  int rc = d->memory ? remat_budgets_parse(&job->budgets, d->memory, err) : 0;
  job->cfg.head_chunk = d->head_chunk > 0 ? d->head_chunk : 0;
  if (rc) return rc;
  remat_policy_first_n(policy, L, 0);
  if (d->ckpt_ratio >= 0)
    remat_policy_first_n(policy, L, (int64_t)floor(d->ckpt_ratio * (double)L + 1e-9));
  else if (d->ckpt_layers)
    rc = remat_policy_parse_list_slots(d->ckpt_layers, policy, full, L, err);
  if (rc) return rc;
  if (d->stages > 1) return place_pipeline(job, policy, full, err);
  /* one process, or a replica of the whole model, holds one slot: full@1
   * is policy full there */
  for (int64_t b = 0; b < L; b++) {
    if (full[b] > 1)
      return remat__errorf(err, REMAT_EINVAL,
                           "block %lld recomputes in full in %u slots (full@%u) but %s holds 1 "
                           "micro-batch in flight; give it at most full@1", (long long)b,
                           full[b], full[b], d->replicas > 1 ? "each replica" : "one process");
    if (full[b]) policy[b] = REMAT_RECOMPUTE;
  }
  if (job->budgets.n && (rc = policy_for_budget(job, policy, err))) return rc;
  remat_placement_whole(&job->place, &job->cfg, policy, d->train.grad_accum);
  job->place.replicas = d->replicas;
  job->place.zero = d->zero;
  return 0;
}

/* Interleaved: the workspace the rank's chunks share, the largest of
 * theirs (transient terms, without the residual gradient and the send
 * buffer each has). */
int remat__job_chunks_workspace(const remat_job *job, int rank, size_t *work, remat_error *err) {
  const remat_placement *pl = &job->place;
  remat_memory_model mm;
  int rc = remat_memory_model_get(&job->cfg, job->d.train.B, job->d.train.T, &mm, err);
  *work = 0;
  for (int64_t c = 0; !rc && c < pl->chunks; c++) {
    remat_stage st = remat_placement_chunk(pl, rank, c);
    st.work_borrowed = 0;
    remat_stage_bytes sb;
    if ((rc = remat_stage_bytes_get(&job->cfg, &mm, &st, &sb, err))) break;
    size_t t = sb.workspace - mm.stage_bytes - (st.has_head ? 0 : mm.boundary_bytes);
    if (t > *work) *work = t;
  }
  return rc;
}

/* The trainer of this rank's stage and the runtime around it. */
int remat_job_rank_memplan(const remat_job *job, int k, remat_stage *st, remat_memplan **mp,
                           remat_error *err) {
  const remat_placement *pl = &job->place;
  int64_t D = pl->replicas > 1 ? pl->replicas : 1;
  if (k < 0 || k >= pl->stages * D)
    return remat__errorf(err, REMAT_EINVAL, "rank %d is not one of the job's %lld", k,
                         (long long)(pl->stages * D));
  if (pl->stages == 1 && D == 1) {
    *st = remat_stage_whole(&job->cfg, pl->policy);
    st->full_slots = pl->full_slots;
  } else {
    *st = remat_placement_stage(pl, k / D, k % D);
    st->slots_pooled = remat_placement_pooled(pl);
  }
  return remat_memplan_create_stage(mp, &job->cfg, job->d.train.B, job->d.train.T, st, err);
}

int64_t remat_job_chunks(const remat_job *job) {
  return job->place.chunks > 1 ? job->place.chunks : 1;
}

int remat_job_chunk_memplan(const remat_job *job, int k, int64_t c, remat_stage *st,
                            remat_memplan **mp, remat_error *err) {
  const remat_placement *pl = &job->place;
  if (pl->chunks < 2) return remat_job_rank_memplan(job, k, st, mp, err);
  if (k < 0 || k >= pl->stages || c < 0 || c >= pl->chunks)
    return remat__errorf(err, REMAT_EINVAL, "rank %d's chunk %lld is not one of the job's", k,
                         (long long)c);
  *st = remat_placement_chunk(pl, k, c);
  st->slots_pooled = remat_placement_pooled(pl);
  int rc = c == 0 ? remat__job_chunks_workspace(job, k, &st->work_min, err) : 0;
  return rc ? rc : remat_memplan_create_stage(mp, &job->cfg, job->d.train.B, job->d.train.T, st,
                                              err);
}

int remat_job_rank_pool(const remat_job *job, int k, size_t *bytes, size_t *apart,
                        remat_error *err) {
  const remat_placement *pl = &job->place;
  int64_t v = remat_job_chunks(job), D = pl->replicas > 1 ? pl->replicas : 1;
  *bytes = *apart = 0;
  if (!remat_placement_pooled(pl)) return 0;
  remat_schedule_streams st;
  int rc = remat_schedule_streams_build(&st, pl->schedule, pl->stages, pl->microbatches, v, err);
  remat_memplan *mp[REMAT_MAX_CHUNKS_POOL] = {0};
  remat_stage stages[REMAT_MAX_CHUNKS_POOL];
  for (int64_t c = 0; !rc && c < v; c++)
    rc = remat_job_chunk_memplan(job, k, c, &stages[c], &mp[c], err);
  remat_schedule_pool pool = {0};
  if (!rc)
    rc = remat_placement_pool(&st, k / D, stages, (const remat_memplan *const *)mp, &pool, err);
  *bytes = pool.bytes;
  *apart = pool.apart;
  remat_schedule_pool_free(&pool);
  for (int64_t c = 0; c < v; c++) remat_memplan_destroy(mp[c]);
  remat_schedule_streams_free(&st);
  return rc;
}

void remat_job_predict(const remat_job *job, double rank_flops, double *seconds,
                       double *bubble) {
  *seconds = *bubble = 0;
  if (!job->have_plan || (rank_flops <= 0 && job->d.calibrate <= 0)) return;
  const remat_plan *p = &job->plan;
  double busy = 0;
  for (int64_t s = 0; s < p->num_stages; s++) busy += p->stages[s].time * (double)p->microbatches;
  double sim = p->simulated_time > 0 ? p->simulated_time : p->iteration_time;
  /* calibrated times are seconds already; else GFLOP at the rank's rate */
  *seconds = job->d.calibrate > 0 ? sim : sim * 1e9 / rank_flops;
  *bubble = sim > 0 ? 1 - busy / ((double)p->num_stages * sim) : 0;
}

/* ------------------------------------------------------------- parsing */

/* The "full@K:" of a list at p: K (1 to 255) into *k and the end of the
 * prefix, or NULL when it is not one. */
static const char *full_at(const char *p, int *k) {
  if (strncmp(p, "full@", 5) != 0 || p[5] < '0' || p[5] > '9') return NULL;
  char *end;
  long v = strtol(p + 5, &end, 10);
  if (*end != ':' || v < 1 || v > 255) return NULL;
  *k = (int)v;
  return end + 1;
}

int remat_policy_parse_list(const char *s, uint8_t *policy, int64_t L, remat_error *err) {
  return remat_policy_parse_list_slots(s, policy, NULL, L, err);
}

int remat_policy_parse_list_slots(const char *s, uint8_t *policy, uint8_t *full_slots, int64_t L,
                                  remat_error *err) {
  remat_policy_first_n(policy, L, 0);
  if (full_slots) memset(full_slots, 0, (size_t)L);
  const char *p = s, *q;
  int cur = REMAT_RECOMPUTE, slots = 0; /* slots > 0: full@slots (keep elsewhere) */
  if (!*p) goto bad;
  while (*p) {
    if (!strncmp(p, "full:", 5)) {
      cur = REMAT_RECOMPUTE, slots = 0;
      p += 5;
    } else if (!strncmp(p, "middle:", 7)) {
      cur = REMAT_MIDDLE, slots = 0;
      p += 7;
    } else if ((q = full_at(p, &slots))) {
      if (!full_slots)
        return remat__errorf(err, REMAT_EINVAL, "the block list '%s' recomputes per "
                             "micro-batch (full@K), which this use of it cannot take", s);
      cur = REMAT_KEEP;
      p = q;
    } else if (!strncmp(p, "full@", 5)) {
      goto bad;
    }
    int64_t v, w;
    char *end;
    if (*p < '0' || *p > '9') goto bad;
    v = w = strtoll(p, &end, 10);
    p = end;
    if (*p == '-') {
      if (p[1] < '0' || p[1] > '9') goto bad;
      w = strtoll(p + 1, &end, 10);
      if (w < v) goto bad;
      p = end;
    }
    for (int64_t k = v; k <= w; k++) {
      if (k < 0 || k >= L)
        return remat__errorf(err, REMAT_EINVAL, "the block list names block %lld but the model "
                             "has blocks 0..%lld", (long long)k, (long long)L - 1);
      if (policy[k] != REMAT_KEEP || (full_slots && full_slots[k]))
        return remat__errorf(err, REMAT_EINVAL, "the block list names block %lld twice",
                             (long long)k);
      policy[k] = (uint8_t)cur;
      if (slots) full_slots[k] = (uint8_t)slots;
    }
    if (*p == ',') {
      p++;
      if (!*p) goto bad;
    } else if (*p) {
      goto bad;
    }
  }
  return 0;
bad:
  return remat__errorf(err, REMAT_EINVAL, "the block list expects block indices like 0,2,5 or "
                       "0-3, with 'middle:', 'full:' or 'full@K:' (full in K of a stage's "
                       "in-flight slots, K 1 to 255) before them to choose the policy "
                       "(full:0-3,middle:4-11,full@1:12-15); got '%s'", s);
}
