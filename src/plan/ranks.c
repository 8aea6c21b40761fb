/* ranks.c: the layout of a job on N ranks, searched whole (remat plan
 * --ranks). For every t x p x d = N with its sequence-parallel choice,
 * ZeRO stage, micro-batch size and schedule, a rank's problem is built
 * from the memory model (remat_plan_problem_from_replicas on the tensor
 * rank's shard), its collectives added, and solved exactly; the fastest
 * layout that fits and the Pareto front of time against memory come out.
 *
 * Most layouts need no solve. Each has a lower bound on its time (its
 * stages share M sum (f + b) evenly, nothing recomputed, plus its
 * collectives) and on its memory (its state spread evenly over its
 * stages): one that a solved layout beats on both can be neither the
 * fastest nor on the front. Layouts are taken in the order of their time
 * bounds, so the first solves are the likeliest winners. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "config/family.h"
#include "plan/plan.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  remat_layout *v;
  int64_t n, cap;
} rows;

static int push(rows *r, const remat_layout *l, remat_error *err) {
  if (r->n == r->cap) {
    int64_t cap = r->cap ? 2 * r->cap : 256;
    remat_layout *v = realloc(r->v, (size_t)cap * sizeof *v);
    if (!v) return remat__errorf(err, REMAT_ENOMEM, "out of memory listing layouts");
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n++] = *l;
  return 0;
}

/* The tensor rank's config of a layout, its head in the chunks that keep
 * the logits to a residual stream's size (chunking costs no FLOPs) unless
 * the query's config fixes them. */
static remat_config rank_config(const remat_layout_query *q, int64_t t, int64_t sp, int64_t b) {
  remat_config c = q->cfg;
  c.tensor_parallel = t > 1 ? t : 0;
  c.sequence_parallel = sp;
  if (q->cfg.head_chunk < 0) {
    c.head_chunk = 0;
    c.head_chunk = remat_head_chunk_auto(&c, b, q->seq_len);
  }
  return c;
}

/* Parameters of layers [lo, hi): blocks, and the embedding's and the
 * head's (each whole where it lies: the tied matrix is on both). */
static double range_params(const remat_config *c, int64_t lo, int64_t hi) {
  int64_t L = c->num_layers;
  double block = (double)remat_block_param_count(c);
  double rest = (double)remat_param_count(c) - (double)L * block;
  int64_t blocks = (hi < L + 1 ? hi : L + 1) - (lo > 1 ? lo : 1);
  return (blocks > 0 ? (double)blocks : 0) * block + (lo == 0 ? rest : 0) +
         (hi == L + 2 ? rest : 0);
}

/* Parameters a rank of the plan's largest stage updates and the replicas
 * sum; a chunked stage's are its chunks' (interleaved: virtual stages s,
 * s + p, ...; zbv: s and 2p - 1 - s). An embedding and a head on one
 * stage count the tied matrix twice: a bound. */
static double stage_params(const remat_config *c, const remat_plan *plan) {
  int64_t p = plan->num_stages, v = plan->chunks > 1 ? plan->chunks : 1;
  double most = 0;
  for (int64_t s = 0; s < p; s++) {
    double n = 0;
    if (v == 1) {
      n = range_params(c, plan->stages[s].first_layer,
                       plan->stages[s].first_layer + plan->stages[s].num_layers);
    } else {
      for (int64_t j = 0; j < v; j++) {
        int64_t vs = plan->schedule == REMAT_SCHED_ZBV ? (j ? 2 * p - 1 - s : s) : j * p + s;
        n += range_params(c, plan->chunk_first[vs], plan->chunk_first[vs] + plan->chunk_layers[vs]);
      }
    }
    if (n > most) most = n;
  }
  return most;
}

/* The replicas' bytes a rank sends a step for P parameters, as the engine
 * sends them (parallel/replicas.c): a reduce-scatter of the gradients each
 * micro-batch, an all-gather of the gradients (ZeRO 0) or the updated
 * parameters (1, 2) once; ZeRO 3 gathers the parameters in every forward
 * and backward instead. */
static double replica_bytes(double P, int64_t d, int zero, int64_t m) {
  if (d <= 1) return 0;
  double share = 4 * P * (double)(d - 1) / (double)d;
  return (double)m * share + (zero == 3 ? 2 * (double)m * share : share);
}

/* The layout's problem: its rank's bytes, times and collectives. *fatal
 * says whether a failure stops the search (out of memory, or the measured
 * times' hook) or only refuses this layout (a shape the library does not
 * take). */
static int build(const remat_layout_query *q, const remat_layout *l, remat_plan_problem *pb,
                 int *fatal, remat_error *err) {
  remat_config c = rank_config(q, l->t, l->sp, l->b);
  int rc = remat_plan_problem_from_replicas(pb, &c, l->b, q->seq_len, l->p, l->m, l->d,
                                            (int)l->zero, q->memory, err);
  *fatal = rc == REMAT_ENOMEM;
  if (rc) return rc;
  if (q->times && (rc = q->times(q->times_ctx, &c, l->b, q->seq_len, pb, err))) {
    *fatal = rc != REMAT_EINVAL; /* a shape the engine does not run: this layout refused */
    remat_plan_problem_free(pb);
    return rc;
  }
  if (l->t > 1 && q->link_tp > 0 && q->rank_rate > 0) {
    remat_tensor_comm tc;
    remat_tensor_comm_get(&c, l->b, q->seq_len, &tc);
    remat_plan_problem_add_comm(pb, &tc, q->rank_rate / q->link_tp);
  }
  pb->schedule = l->schedule;
  pb->objective = q->objective;
  pb->time_limit = q->time_limit;
  pb->min_blocks = 1; /* every stage runs transformer layers, as the frameworks' */
  return 0;
}

/* The pipeline's sends: each micro-batch's output forward and gradient
 * back across each stage boundary; a bound on what the slowest path adds,
 * M + p - 2 pairs, not overlapped. */
static double pipeline_time(const remat_layout_query *q, const remat_layout *l, size_t boundary) {
  if (l->p <= 1 || !(q->link_pp > 0) || !(q->rank_rate > 0)) return 0;
  return 2 * (double)(l->m + l->p - 2) * (double)boundary * q->rank_rate / q->link_pp;
}

static double replica_time(const remat_layout_query *q, const remat_layout *l, double P) {
  if (!(q->link_dp > 0) || !(q->rank_rate > 0)) return 0;
  return replica_bytes(P, l->d, (int)l->zero, l->m) * q->rank_rate / q->link_dp;
}

/* Bounds from the built problem: time and memory no plan of it beats.
 * A rank holds at least its share of the state and some layer's work
 * bytes; under a one-chunk schedule every stage also holds at least one
 * micro-batch's least activations of each of its layers (c where a layer
 * recomputes, a where it cannot), *act their share. A chunked stage's
 * stream may peak with one chunk empty: no activations are counted. */
static void bound(const remat_layout_query *q, remat_layout *l, const remat_plan_problem *pb,
                  size_t *act) {
  double work = 0, state = 0, acts = 0;
  size_t least_work = SIZE_MAX;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *gr = &pb->groups[g];
    work += (double)gr->count * (gr->fwd + gr->bwd);
    state += (double)gr->count * (double)gr->state_bytes;
    acts += (double)gr->count * (double)(gr->recomputable ? gr->ckpt_bytes : gr->act_bytes);
    if (gr->work_bytes < least_work) least_work = gr->work_bytes;
  }
  /* zbv's last layer may hold less beside the first: a bound takes the less */
  state -= (double)pb->v_last_state_less;
  remat_config c = rank_config(q, l->t, l->sp, l->b);
  double params = (double)remat_param_count(&c) / (double)l->p;
  l->bound = (double)l->m * work / (double)l->p + pipeline_time(q, l, pb->boundary_bytes) +
             replica_time(q, l, params);
  l->bound_memory = pb->stage_bytes + (size_t)(state / (double)l->p) +
                    (least_work == SIZE_MAX ? 0 : least_work);
  *act = (size_t)(acts / (double)l->p);
}

static int chunked(int schedule) {
  return schedule == REMAT_SCHED_INTERLEAVED || schedule == REMAT_SCHED_ZBV;
}

static int dominated(const rows *r, const remat_layout *l) {
  for (int64_t i = 0; i < r->n; i++) {
    const remat_layout *o = &r->v[i];
    if (o->solved && o->rc == 0 && o->time <= l->bound && o->memory <= l->bound_memory)
      return 1;
  }
  return 0;
}

static int solve(const remat_layout_query *q, remat_layout *l, remat_error *err) {
  remat_plan_problem pb;
  remat_error e;
  int fatal;
  int rc = build(q, l, &pb, &fatal, err);
  if (rc) return rc;
  remat_plan plan;
  l->solved = 1;
  l->rc = remat_plan_solve(&pb, &plan, &e);
  if (l->rc == 0 || l->rc == REMAT_EINFEASIBLE) {
    double base = plan.simulated_time >= 0 ? plan.simulated_time : plan.iteration_time;
    remat_config c = rank_config(q, l->t, l->sp, l->b);
    l->comm_pp = pipeline_time(q, l, pb.boundary_bytes);
    l->comm_dp = replica_time(q, l, stage_params(&c, &plan));
    l->time = base + l->comm_pp + l->comm_dp;
    l->memory = plan.max_memory_bytes;
    l->optimal = plan.optimal;
    l->head_chunk = pb.head_chunk;
    remat_plan_free(&plan);
  } else if (l->rc == REMAT_ENOMEM) {
    remat_plan_problem_free(&pb);
    return remat__errorf(err, REMAT_ENOMEM, "%s", e.msg);
  }
  remat_plan_problem_free(&pb);
  return 0;
}

/* Chunked schedules enumerate their partitions (C(L - 1, 2p - 1) of L
 * blocks in 2p chunks of at least one); the search takes them where these
 * are few enough to be solved in hundredths of a second. */
#define SEARCH_PARTITIONS 20000.0

static double partitions(int64_t n, int64_t k) {
  double c = 1;
  for (int64_t i = 1; i <= k && c <= 1e18; i++) c = c * (double)(n - k + i) / (double)i;
  return c;
}

/* Every layout, in one list. */
static int enumerate(const remat_layout_query *q, rows *r, remat_error *err) {
  int64_t N = q->ranks, G = q->global_batch, L = q->cfg.num_layers;
  static const int scheds[] = {REMAT_SCHED_1F1B, REMAT_SCHED_ZBH1, REMAT_SCHED_INTERLEAVED,
                               REMAT_SCHED_ZBV};
  for (int64_t t = 1; t <= N; t++) {
    if (N % t || (q->max_tensor > 0 && t > q->max_tensor)) continue;
    for (int64_t sp = 0; sp <= (t > 1 && !q->no_sequence_parallel); sp++) {
      remat_config c = rank_config(q, t, sp, 1);
      remat_error e;
      if (remat_config_check(&c, &e) || q->seq_len % (sp ? t : 1)) continue;
      for (int64_t p = 1; p <= N / t && p <= L; p++) {
        int64_t d = N / t / p;
        if ((N / t) % p || G % d) continue;
        for (int64_t zero = 0; zero <= (d > 1 ? 3 : 0); zero++)
          for (int64_t b = 1; b <= G / d; b++) {
            int64_t m = G / d / b;
            if ((G / d) % b || m > REMAT_PLAN_MAX_MICROBATCHES) continue;
            for (size_t k = 0; k < sizeof scheds / sizeof *scheds; k++) {
              int s = scheds[k];
              if (p == 1 && s != REMAT_SCHED_1F1B) continue; /* one stage: no pipeline */
              if (s == REMAT_SCHED_INTERLEAVED && m % p) continue;
              if ((s == REMAT_SCHED_INTERLEAVED || s == REMAT_SCHED_ZBV) &&
                  !(2 * p <= L && partitions(L - 1, 2 * p - 1) <= SEARCH_PARTITIONS))
                continue;
              remat_layout l = {.t = t, .sp = sp, .p = p, .d = d, .zero = zero, .b = b,
                                .m = m, .schedule = s};
              if (push(r, &l, err)) return err->code;
            }
          }
      }
    }
  }
  return 0;
}

static int same_problem(const remat_layout *a, const remat_layout *b) {
  return a->t == b->t && a->sp == b->sp && a->p == b->p && a->d == b->d && a->zero == b->zero &&
         a->b == b->b;
}

/* The bounds of every layout (the schedules of one problem share them);
 * those whose problem the library refuses (a shape it does not take) are
 * left out. */
static int bound_all(const remat_layout_query *q, rows *r, remat_error *err) {
  int64_t kept = 0;
  remat_layout prev = {0};
  size_t act = 0;            /* the previous problem's activations' share */
  int have = 0, prev_ok = 0; /* the previous layout, and whether its problem was built */
  for (int64_t i = 0; i < r->n; i++) {
    remat_layout l = r->v[i];
    if (!have || !same_problem(&prev, &l)) {
      remat_plan_problem pb;
      remat_error e;
      int fatal;
      int rc = build(q, &l, &pb, &fatal, &e);
      if (rc && fatal) return remat__errorf(err, rc, "%s", e.msg);
      have = 1;
      prev_ok = rc == 0;
      if (prev_ok) {
        bound(q, &l, &pb, &act);
        remat_plan_problem_free(&pb);
      }
      prev = l;
    }
    if (!prev_ok) continue;
    l.bound = prev.bound;
    l.bound_memory = prev.bound_memory + (chunked(l.schedule) ? 0 : act);
    r->v[kept++] = l;
  }
  r->n = kept;
  return 0;
}

static int by_bound(const void *a, const void *b) {
  const remat_layout *x = a, *y = b;
  return (x->bound > y->bound) - (x->bound < y->bound);
}

/* Fits first, then by time; unsolved after solved, by bound. */
static int by_time(const void *a, const void *b) {
  const remat_layout *x = a, *y = b;
  int fx = x->solved && x->rc == 0, fy = y->solved && y->rc == 0;
  if (fx != fy) return fy - fx;
  double tx = fx ? x->time : x->bound, ty = fy ? y->time : y->bound;
  if (tx != ty) return (tx > ty) - (tx < ty);
  return (x->memory > y->memory) - (x->memory < y->memory);
}

static void mark_pareto(rows *r) {
  for (int64_t i = 0; i < r->n; i++) {
    remat_layout *l = &r->v[i];
    if (!(l->solved && l->rc == 0)) continue;
    l->pareto = 1;
    for (int64_t j = 0; j < r->n && l->pareto; j++) {
      const remat_layout *o = &r->v[j];
      if (j == i || !(o->solved && o->rc == 0)) continue;
      int le = o->time <= l->time && o->memory <= l->memory;
      int lt = o->time < l->time || o->memory < l->memory;
      if (le && (lt || j < i)) l->pareto = 0; /* ties: the first listed stands */
    }
  }
}

int remat_layout_search_run(const remat_layout_query *q, remat_layout_search *out,
                            remat_error *err) {
  *out = (remat_layout_search){.best = -1};
  if (q->ranks < 1 || q->ranks > 1 << 20 || q->global_batch < 1 || q->global_batch > 1 << 24 ||
      q->seq_len < 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "a layout search needs ranks (1 to 2^20), a global batch of sequences "
                         "(1 to 2^24) and a sequence length");
  double t0 = now();
  rows r = {0};
  int rc = enumerate(q, &r, err);
  if (!rc) rc = bound_all(q, &r, err);
  if (rc) {
    free(r.v);
    return rc;
  }
  qsort(r.v, (size_t)r.n, sizeof *r.v, by_bound);
  for (int64_t i = 0; i < r.n; i++) {
    if (!q->exhaustive && dominated(&r, &r.v[i])) continue;
    if ((rc = solve(q, &r.v[i], err))) {
      free(r.v);
      return rc;
    }
    out->solved++;
  }
  qsort(r.v, (size_t)r.n, sizeof *r.v, by_time);
  mark_pareto(&r);
  out->rows = r.v;
  out->n = r.n;
  out->best = r.n > 0 && r.v[0].solved && r.v[0].rc == 0 ? 0 : -1;
  out->seconds = now() - t0;
  if (r.n == 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "no layout of %lld ranks takes this model and batch: the tensor degree "
                         "must divide the heads, the MLP and the vocabulary, and the replicas "
                         "the global batch of %lld", (long long)q->ranks,
                         (long long)q->global_batch);
  return 0;
}

void remat_layout_search_free(remat_layout_search *s) {
  free(s->rows);
  *s = (remat_layout_search){.best = -1};
}
