/* eval.c: the figures of a given arrangement (layers per stage and each
 * layer's policy: kept, recomputed or middle) under the problem's formula: each stage's memory and
 * time, the objective, the baseline and slowdown, the schedule's simulated
 * makespan. The solver's answers and remat_plan_evaluate (for arrangements a
 * framework can express, and for tests) both become a remat_plan here. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

/* One stage's figures under the formula: time and forward time in quanta,
 * the weight gradients' time (W), memory in bytes, layers not kept, middle
 * layers. */
typedef struct {
  int64_t t, fwd, wg, mem, cnt, mid, part;
} stage_fig;

/* Virtual stage vs on [i, j): everything but the transient term, which it
 * leaves in *X (max(Y, X) over its layers). */
static stage_fig chunk_figures(const remat__plan_inst *in, int64_t i, int64_t j, int64_t vs,
                               const uint8_t *rec, int64_t *X) {
  stage_fig f = {in->pF[j] - in->pF[i], 0, 0, remat__plan_base_memory(in, i, j, vs), 0, 0, 0};
  *X = remat__plan_work_max(in, i, j);
  for (int64_t l = i; l < j; l++) {
    f.fwd += in->fwd[l];
    /* zb-h1, zbv: only a kept layer puts off its W; one that rebuilds its
     * activations runs it in its B */
    remat__plan_recfig g = remat__plan_rec_fig(in, vs, l, rec[l]);
    f.wg += g.wg;
    if (!rec[l]) continue;
    f.t += g.t;
    f.mem -= g.saved;
    *X = remat__max64(*X, g.x);
    f.cnt++;
    f.mid += rec[l] == REMAT_MIDDLE;
    f.part += rec[l] >= REMAT__REC_SLOTS;
  }
  return f;
}

/* Stage s: its chunks' figures added (stage_bytes each), the largest
 * transient term of them all. bounds: (nv + 1) virtual stage boundaries. */
static stage_fig stage_figures(const remat__plan_inst *in, const int64_t *bounds,
                               const uint8_t *rec, int64_t s) {
  stage_fig f = {0, 0, 0, 0, 0, 0, 0};
  int64_t X = 0;
  for (int64_t c = 0; c < in->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, s, c), x;
    stage_fig g = chunk_figures(in, bounds[vs], bounds[vs + 1], vs, rec, &x);
    f.t += g.t;
    f.fwd += g.fwd;
    f.wg += g.wg;
    f.mem += g.mem;
    f.cnt += g.cnt;
    f.mid += g.mid;
    f.part += g.part;
    X = remat__max64(X, x);
  }
  f.mem += X;
  return f;
}

/* The makespan of an arrangement in quanta (INT64_MAX if it cannot be
 * simulated). */
static int64_t simulated_quanta(const remat__plan_inst *in, const int64_t *bounds,
                                const uint8_t *rec) {
  remat_schedule_streams st;
  double *times = remat__malloc((size_t)(3 * in->nv) * sizeof *times), ms;
  int64_t out = INT64_MAX;
  if (times && !remat__plan_sim_streams(in, &st, NULL)) {
    if (!remat__plan_sim_arrangement(in, st.ops ? &st : NULL, bounds, rec, times, &ms))
      out = (int64_t)llround(ms);
    remat_schedule_streams_free(&st);
  }
  remat__free(times);
  return out;
}

void remat__plan_measure(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                         int64_t *obj, int64_t *cnt, int64_t *maxmem) {
  int64_t sum = 0, tmax = 0, c = 0, mm = 0;
  for (int64_t s = 0; s < in->p; s++) {
    stage_fig f = stage_figures(in, bounds, rec, s);
    sum += f.t;
    tmax = remat__max64(tmax, f.t);
    mm = remat__max64(mm, f.mem);
    c += f.cnt;
  }
  if (obj) *obj = in->objective == REMAT_OBJ_BOTTLENECK ? tmax : sum + (in->m - 1) * tmax;
  if (obj && in->objective == REMAT_OBJ_SIMULATED) *obj = simulated_quanta(in, bounds, rec);
  if (cnt) *cnt = c;
  if (maxmem) *maxmem = mm;
}

void remat_plan_free(remat_plan *plan) {
  remat__free(plan->full_slots);
  plan->full_slots = NULL;
  remat__free(plan->chunk_first);
  plan->chunk_first = plan->chunk_layers = NULL;
  remat__free(plan->stages);
  remat__free(plan->recomputed_all);
  remat__free(plan->policy);
  plan->stages = NULL;
  plan->recomputed_all = NULL;
  plan->policy = NULL;
}

/* The schedule's makespan for the plan's times per virtual stage (-1 when
 * too large to simulate): remat_plan_simulate for an order in closed form
 * (1f1b, gpipe), the streams otherwise. fw, bw, wg: (nv) forward, whole backward (with
 * recomputation), weight gradient. */
static double simulated(const remat__plan_inst *in, const double *fw, const double *bw,
                        const double *wg) {
  double ms = -1;
  if ((double)in->nv * (double)in->m > 2e7) return -1;
  if (remat_schedule_get(in->schedule)->op) {
    if (remat_plan_simulate(in->schedule, in->p, in->m, fw, bw, &ms, NULL)) return -1;
    return ms;
  }
  remat_schedule_streams st;
  if (remat_schedule_streams_build(&st, in->schedule, in->p, in->m, in->v, NULL)) return -1;
  if (remat_plan_simulate_streams(&st, fw, bw, wg, &ms, NULL)) ms = -1;
  remat_schedule_streams_free(&st);
  return ms;
}

/* What micro-batch k stores less than a kept one on virtual stage vs, in
 * its slot: the saving of each layer that recomputes in k's slot alone
 * (planned per micro-batch; 0 otherwise). Its W records are a kept one's:
 * such a layer's B fills one for every micro-batch. */
static int64_t slot_cut(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                        int64_t vs, int64_t k) {
  int64_t n = in->n[vs], cut = 0;
  for (int64_t l = bounds[vs]; in->per_mb && l < bounds[vs + 1]; l++)
    if (rec[l] >= REMAT__REC_SLOTS && k % n >= n - remat__rec_slots(rec[l]))
      cut += in->a[l] - in->c[l];
  return cut;
}

/* Each stage's memory as remat train holds it, where its runtime pools
 * the slots and W records of the rank's chunks (remat_placement_pooled:
 * stages under a stream): the formula's memory less its in-flight terms
 * (its slots and W records), plus the pool that remat_schedule_pool_layout
 * lays out over the rank's stream, the runtime's own layout. Chunk c's
 * slot j holds S less what layers recomputing in that slot alone save; a
 * micro-batch's W record holds U. */
static void stream_peaks(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                         remat_plan *plan) {
  remat_schedule_streams st;
  int64_t v = in->v;
  const remat_schedule_info *row = remat_schedule_get(in->schedule);
  if (row->op || in->p < 2 || (double)in->nv * (double)in->m > 1e6) return;
  if (remat_schedule_streams_build(&st, in->schedule, in->p, in->m, v, NULL)) return;
  int64_t nmax = 0;
  for (int64_t vs = 0; vs < in->nv; vs++) nmax = remat__max64(nmax, in->n[vs]);
  size_t *bytes = remat__calloc((size_t)(v * nmax), sizeof *bytes);
  remat_schedule_pool_part parts[REMAT_MAX_CHUNKS_POOL];
  for (int64_t r = 0; bytes && r < in->p; r++) {
    int64_t fixed = (int64_t)plan->stages[r].memory_bytes;
    for (int64_t c = 0; c < v; c++) {
      int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, r, c), S = 0, U = 0;
      for (int64_t l = bounds[vs]; l < bounds[vs + 1]; l++) {
        uint8_t x = rec[l] >= REMAT__REC_SLOTS ? REMAT_KEEP : rec[l];
        S += x == REMAT_MIDDLE ? in->mb[l] : x ? in->c[l] : in->a[l];
        U += x ? 0 : in->u[l];
      }
      fixed -= in->n[vs] * S + in->kw[vs] * U;
      for (int64_t j = 0; j < in->n[vs]; j++) {
        int64_t cut = slot_cut(in, bounds, rec, vs, j);
        fixed += cut;
        bytes[c * nmax + j] = (size_t)(S - cut);
      }
      parts[c] = (remat_schedule_pool_part){.slots = in->n[vs], .slot_bytes = bytes + c * nmax,
                                            .records = in->kw[vs], .record_bytes = (size_t)U};
    }
    remat_schedule_pool pool;
    /* align 1: a problem's bytes need not be multiples of anything; remat's own
     * (--config) are multiples of REMAT_ALIGN, so the runtime's layout is this one */
    if (remat_schedule_pool_layout(&st, r, parts, 1, &pool, NULL)) break;
    plan->stages[r].stream_peak_bytes = (size_t)fixed + pool.bytes;
    remat_schedule_pool_free(&pool);
  }
  remat__free(bytes);
  remat_schedule_streams_free(&st);
}

/* Stage s of the plan from its figures; its recomputed layers from *k on.
 * Returns its time in quanta. */
static int64_t fill_stage(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                       remat_plan *plan, int64_t s, int64_t *k) {
  remat_plan_stage *st = &plan->stages[s];
  stage_fig f = stage_figures(in, bounds, rec, s);
  st->recomputed = plan->recomputed_all + *k;
  st->num_recomputed = f.cnt;
  st->num_middle = f.mid;
  st->num_partial = f.part;
  plan->total_middle += f.mid;
  plan->total_partial += f.part;
  for (int64_t c = 0; c < in->v; c++) {
    int64_t vs = remat_schedule_virtual_stage(in->schedule, in->p, s, c);
    if (c == 0) st->first_layer = bounds[vs];
    st->num_layers += bounds[vs + 1] - bounds[vs];
    st->microbatches_held += in->n[vs];
    st->wgrad_held += in->kw[vs];
    for (int64_t l = bounds[vs]; l < bounds[vs + 1]; l++)
      if (rec[l]) plan->recomputed_all[(*k)++] = l;
  }
  st->memory_bytes = (size_t)f.mem;
  st->budget_bytes = (size_t)in->budget[s];
  if (f.mem > in->budget[s]) plan->feasible = 0;
  st->time = (double)f.t * in->q;
  st->fwd_time = (double)f.fwd * in->q;
  st->bwd_time = (double)(f.t - f.fwd) * in->q;
  if (st->memory_bytes > plan->max_memory_bytes) plan->max_memory_bytes = st->memory_bytes;
  return f.t;
}

int remat__plan_fill(const remat__plan_inst *in, const int64_t *bounds, const uint8_t *rec,
                     remat_plan *plan, remat_error *err) {
  memset(plan, 0, sizeof *plan);
  int64_t p = in->p, L = in->L, nv = in->nv, total = 0;
  for (int64_t l = 0; l < L; l++) total += rec[l] != 0;
  plan->stages = remat__calloc((size_t)p, sizeof *plan->stages);
  plan->recomputed_all = remat__malloc((size_t)(total ? total : 1) * sizeof(int64_t));
  plan->policy = remat__malloc((size_t)L);
  plan->chunk_first = remat__malloc((size_t)(2 * nv) * sizeof(int64_t));
  double *fw = remat__malloc((size_t)(3 * nv) * sizeof *fw);
  if (!plan->stages || !plan->recomputed_all || !plan->policy || !plan->chunk_first || !fw) {
    remat__free(fw);
    remat_plan_free(plan);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  }
  double *bw = fw + nv, *wg = fw + 2 * nv;
  plan->chunk_layers = plan->chunk_first + nv;
  plan->num_stages = p;
  plan->num_layers = L;
  plan->microbatches = in->m;
  plan->schedule = in->schedule;
  plan->objective = in->objective;
  plan->time_quantum = in->q;
  plan->chunks = in->v;
  plan->feasible = 1;
  plan->optimal = 1;
  for (int64_t l = 0; l < L; l++) plan->policy[l] = rec[l] < REMAT__REC_SLOTS ? rec[l] : REMAT_KEEP;
  if (in->per_mb) {
    if (!(plan->full_slots = remat__calloc((size_t)L, 1))) {
      remat__free(fw);
      remat_plan_free(plan);
      return remat__errorf(err, REMAT_ENOMEM, "out of memory");
    }
    for (int64_t l = 0; l < L; l++) plan->full_slots[l] = (uint8_t)remat__rec_slots(rec[l]);
  }
  for (int64_t vs = 0; vs < nv; vs++) {
    int64_t X;
    stage_fig g = chunk_figures(in, bounds[vs], bounds[vs + 1], vs, rec, &X);
    plan->chunk_first[vs] = bounds[vs];
    plan->chunk_layers[vs] = bounds[vs + 1] - bounds[vs];
    fw[vs] = (double)g.fwd * in->q;
    bw[vs] = (double)(g.t - g.fwd) * in->q;
    wg[vs] = (double)g.wg * in->q;
  }
  int64_t k = 0, sum = 0, tmax = 0;
  for (int64_t s = 0; s < p; s++) {
    int64_t t = fill_stage(in, bounds, rec, plan, s, &k);
    sum += t;
    tmax = remat__max64(tmax, t);
  }
  plan->total_recomputed = total;
  plan->bottleneck_time = (double)tmax * in->q;
  plan->iteration_time = (double)(sum + (in->m - 1) * tmax) * in->q;
  plan->simulated_time = simulated(in, fw, bw, wg);
  stream_peaks(in, bounds, rec, plan);
  plan->objective_value =
      in->objective == REMAT_OBJ_BOTTLENECK ? plan->bottleneck_time
      : in->objective == REMAT_OBJ_1F1B     ? plan->iteration_time
                                            : plan->simulated_time;
  int64_t base = in->v > 1 || in->objective == REMAT_OBJ_SIMULATED
                     ? remat__plan_chunk_baseline(in)
                     : remat__plan_baseline(in);
  plan->baseline_objective = (double)base * in->q;
  plan->slowdown = base > 0 ? plan->objective_value / plan->baseline_objective : 1.0;
  plan->lower_bound = plan->objective_value;
  remat__free(fw);
  return 0;
}

int remat_plan_evaluate(const remat_plan_problem *pb, const int64_t *layers_per_stage,
                        const uint8_t *recompute, remat_plan *plan, remat_error *err) {
  return remat_plan_evaluate_slots(pb, layers_per_stage, recompute, NULL, plan, err);
}

/* Layer l's full_slots k on virtual stage vs of n slots as an entry of
 * rec: a kept layer recomputed in its last k slots (all n: in full). */
static int slots_rec(const remat__plan_inst *in, int64_t l, int64_t vs, int pol, int64_t k,
                     uint8_t *out, remat_error *err) {
  int64_t n = in->n[vs];
  if (pol != REMAT_KEEP || !in->recomp[l])
    return remat__errorf(err, REMAT_EINVAL, "layer %lld recomputes in %lld slots: only a kept "
                         "layer that can recompute may", (long long)l, (long long)k);
  if (k > n || k > REMAT__MAX_SLOTS)
    return remat__errorf(err, REMAT_EINVAL, "layer %lld recomputes in %lld slots but its stage "
                         "holds %lld micro-batches in flight", (long long)l, (long long)k,
                         (long long)n);
  *out = (uint8_t)(k == n ? REMAT_RECOMPUTE : REMAT__REC_SLOTS + k);
  return 0;
}

int remat_plan_evaluate_slots(const remat_plan_problem *pb, const int64_t *layers_per_stage,
                              const uint8_t *recompute, const uint8_t *full_slots,
                              remat_plan *plan, remat_error *err) {
  memset(plan, 0, sizeof *plan);
  remat__plan_inst in;
  int any = 0;
  for (int64_t l = 0; full_slots && l < remat_plan_problem_layers(pb); l++) any |= full_slots[l];
  remat_plan_problem q = *pb; /* times in quanta of micro-batches' where some slots recompute */
  q.per_microbatch = any ? 1 : pb->per_microbatch;
  int rc = remat__plan_inst_build(&q, &in, err);
  if (rc) return rc;
  int64_t *bounds = remat__malloc((size_t)(in.nv + 1) * sizeof *bounds);
  uint8_t *rec = remat__malloc((size_t)in.L);
  if (!bounds || !rec) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  bounds[0] = 0;
  for (int64_t s = 0; s < in.nv; s++) {
    if (layers_per_stage[s] < 1 || layers_per_stage[s] > in.L - bounds[s]) {
      rc = remat__errorf(err, REMAT_EINVAL,
                         "stage %lld has %lld layers: each stage needs at least one and all "
                         "must add up to %lld",
                         (long long)s, (long long)layers_per_stage[s], (long long)in.L);
      goto out;
    }
    bounds[s + 1] = bounds[s] + layers_per_stage[s];
  }
  if (bounds[in.nv] != in.L) {
    rc = remat__errorf(err, REMAT_EINVAL, "the stages hold %lld layers, the model has %lld",
                       (long long)bounds[in.nv], (long long)in.L);
    goto out;
  }
  for (int64_t l = 0; l < in.L; l++) {
    int pol = recompute ? recompute[l] : REMAT_KEEP;
    if (pol >= REMAT_POLICY_COUNT) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld has unknown policy %d", (long long)l, pol);
      goto out;
    }
    if (pol != REMAT_KEEP && !in.recomp[l]) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld cannot be recomputed", (long long)l);
      goto out;
    }
    if (pol == REMAT_MIDDLE && !in.mid[l]) {
      rc = remat__errorf(err, REMAT_EINVAL, "layer %lld has no middle policy", (long long)l);
      goto out;
    }
    rec[l] = (uint8_t)pol;
  }
  for (int64_t vs = 0; any && !rc && vs < in.nv; vs++)
    for (int64_t l = bounds[vs]; !rc && l < bounds[vs + 1]; l++)
      if (full_slots[l]) rc = slots_rec(&in, l, vs, rec[l], full_slots[l], &rec[l], err);
  if (!rc) rc = remat__plan_fill(&in, bounds, rec, plan, err);
out:
  remat__free(bounds);
  remat__free(rec);
  remat__plan_inst_free(&in);
  return rc;
}
