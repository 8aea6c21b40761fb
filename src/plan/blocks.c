/* blocks.c: plans in which every stage and every chunk holds a block (a
 * layer of a recomputable group: what ColossalAI and Megatron-LM count as a
 * transformer layer), as the frameworks' exports need them.
 *
 * The layers that cannot recompute (an embedding, a head) lie before the
 * first block and after the last. Each run of them is fused with the block
 * beside it into one layer whose figures add up (times, stored and state
 * bytes; work bytes by their largest), and whose recompute options are the
 * block's with the others' activations kept. The stage formula only adds
 * layers' figures and takes maxima, so a partition of the fused layers has
 * exactly the memory and time of the same partition of the model's; and the
 * partitions of the fused layers are exactly those in which no stage holds
 * no block. The fused problem is solved as any other, and its answer
 * evaluated back on the model's own layers. remat_plan_solve, the planner's
 * entry, is here: it sends such problems this way and the rest straight to
 * the exact solver (solve.c). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

/* The model's layers: the first and last block (global indices), and the
 * group of each layer's block. */
typedef struct {
  int64_t L, first, last, blocks;
} block_span;

static int span_of(const remat_plan_problem *pb, block_span *sp, remat_error *err) {
  int64_t l = 0;
  sp->first = sp->last = -1;
  sp->blocks = 0;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    if (G->recomputable) {
      if (sp->first < 0) sp->first = l;
      if (sp->last >= 0 && sp->last != l - 1)
        return remat__errorf(err, REMAT_EINVAL,
                             "min_blocks 1 needs the layers that cannot recompute before the "
                             "first block or after the last; layer %lld (%s) lies between "
                             "blocks: plan with min_blocks 0",
                             (long long)(sp->last + 1),
                             pb->groups[g - 1].name[0] ? pb->groups[g - 1].name : "unnamed");
      sp->last = l + G->count - 1;
      sp->blocks += G->count;
    }
    l += G->count;
  }
  sp->L = l;
  if (sp->first < 0)
    return remat__errorf(err, REMAT_EINVAL, "min_blocks 1: the model has no block (no "
                         "recomputable layer) to give each stage");
  return 0;
}

/* g += h, for h a layer that always keeps its activations. Its W record
 * (wgrad_bytes) joins g's, which a recomputed g no longer keeps: exact for
 * layers without one (remat's embedding and head run their W in B). */
static void add_kept(remat_plan_group *g, const remat_plan_group *h) {
  g->fwd += h->fwd;
  g->bwd += h->bwd;
  g->wgrad += h->wgrad;
  g->act_bytes += h->act_bytes;
  g->ckpt_bytes += h->act_bytes;
  if (g->middle) g->middle_bytes += h->act_bytes;
  g->state_bytes += h->state_bytes;
  g->wgrad_bytes += h->wgrad_bytes;
  if (h->work_bytes > g->work_bytes) g->work_bytes = h->work_bytes;
}

/* "embedding+block", cut to the name's room. */
static void fused_name(remat_plan_group *g, const char *before, const char *after) {
  char name[sizeof g->name * 3 + 3];
  snprintf(name, sizeof name, "%s%s%s%s%s", before, before[0] ? "+" : "",
           g->name[0] ? g->name : "block", after[0] ? "+" : "", after);
  memcpy(g->name, name, sizeof g->name - 1);
  g->name[sizeof g->name - 1] = 0;
}

/* The fused problem: groups of the blocks, the first and last block each a
 * group of its own with the layers before or after it added. */
static int fuse(const remat_plan_problem *pb, const block_span *sp, remat_plan_problem *q,
                remat_error *err) {
  int64_t ng = 1, l = 0; /* each group of blocks gives two at most, the last one more */
  for (int64_t g = 0; g < pb->num_groups; g++) ng += pb->groups[g].recomputable ? 2 : 0;
  remat_plan_group *out = remat__calloc((size_t)ng, sizeof *out);
  if (!out) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  remat_plan_group before = {0}, after = {0};
  char bname[32] = "", aname[32] = "";
  int64_t n = 0;
  for (int64_t g = 0; g < pb->num_groups; g++) {
    const remat_plan_group *G = &pb->groups[g];
    if (!G->recomputable) {
      remat_plan_group *acc = l < sp->first ? &before : &after;
      char *nm = l < sp->first ? bname : aname;
      for (int64_t k = 0; k < G->count; k++) add_kept(acc, G);
      if (!nm[0]) snprintf(nm, 32, "%s", G->name[0] ? G->name : "layer");
    } else {
      out[n] = *G;
      out[n++].count = 1; /* the first block of the group, maybe alone */
      if (G->count > 1) {
        out[n] = *G;
        out[n++].count = G->count - 1;
      }
    }
    l += G->count;
  }
  /* the first block: out[0]; the last: split the last group's run */
  if (out[n - 1].count > 1) {
    out[n - 1].count--;
    out[n] = out[n - 1];
    out[n++].count = 1;
  }
  add_kept(&out[0], &before);
  add_kept(&out[n - 1], &after);
  fused_name(&out[0], bname, n == 1 ? aname : "");
  if (n > 1) fused_name(&out[n - 1], "", aname);
  int rc = remat_plan_problem_copy(q, pb, err);
  if (rc) {
    remat__free(out);
    return rc;
  }
  remat__free(q->groups);
  q->groups = out;
  q->num_groups = n;
  return 0; /* every layer is a block now: min_blocks 1 holds by itself */
}

static int solve_blocks(const remat_plan_problem *pb, remat_plan *plan, remat_error *err) {
  memset(plan, 0, sizeof *plan);
  block_span sp = {0};
  int rc = remat_plan_problem_check(pb, err);
  if (rc) return rc;
  if ((rc = span_of(pb, &sp, err))) return rc;
  int64_t v = remat_schedule_chunks(pb->schedule, pb->chunks), nv = pb->stages * v;
  if (sp.blocks < nv)
    return remat__errorf(err, REMAT_EINVAL,
                         "min_blocks 1: %lld blocks cannot give each of the %lld %sstages one; "
                         "plan with fewer stages%s", (long long)sp.blocks, (long long)nv,
                         v > 1 ? "virtual " : "", v > 1 ? " or chunks" : "");
  remat_plan_problem q;
  if ((rc = fuse(pb, &sp, &q, err))) return rc;
  remat_plan fp;
  remat_error ferr;
  int frc = remat__plan_solve_exact(&q, &fp, &ferr);
  if (frc && frc != REMAT_EINFEASIBLE) {
    remat_plan_problem_free(&q);
    *err = ferr;
    return frc;
  }
  /* back to the model's layers: each fused layer is one block, the first
   * and last with the layers before and after them */
  int64_t *lps = remat__malloc((size_t)nv * sizeof *lps);
  uint8_t *rec = remat__calloc((size_t)sp.L, 1), *full = remat__calloc((size_t)sp.L, 1);
  if (!lps || !rec || !full) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out;
  }
  for (int64_t s = 0; s < nv; s++) lps[s] = fp.chunk_layers[s];
  lps[0] += sp.first;
  lps[nv - 1] += sp.L - 1 - sp.last;
  for (int64_t k = 0; k < fp.num_layers; k++) {
    rec[sp.first + k] = fp.policy[k];
    full[sp.first + k] = fp.full_slots ? fp.full_slots[k] : 0;
  }
  remat_plan_problem e = *pb; /* evaluated as laid out, with nothing fixed */
  e.min_blocks = 0;
  e.fixed_blocks = NULL;
  if ((rc = remat_plan_evaluate_slots(&e, lps, rec, full, plan, err))) goto out;
  plan->feasible = fp.feasible;
  plan->optimal = fp.optimal;
  plan->windows = fp.windows;
  plan->min_budget_bytes = fp.min_budget_bytes;
  plan->min_extra_bytes = fp.min_extra_bytes;
  plan->baseline_objective = fp.baseline_objective;
  plan->slowdown = fp.baseline_objective > 0 ? plan->objective_value / fp.baseline_objective : 1.0;
  if (!fp.optimal) {
    plan->lower_bound = fp.lower_bound;
    plan->gap = plan->objective_value > 0
                    ? (plan->objective_value - plan->lower_bound) / plan->objective_value
                    : 0;
  }
  rc = frc;
  if (frc) *err = ferr;
out:
  if (rc && rc != REMAT_EINFEASIBLE) remat_plan_free(plan);
  remat__free(lps);
  remat__free(rec);
  remat__free(full);
  remat_plan_free(&fp);
  remat_plan_problem_free(&q);
  return rc;
}

int remat_plan_better(int rc_a, const remat_plan *a, int rc_b, const remat_plan *b) {
  if (rc_b == 0)
    return rc_a == REMAT_EINFEASIBLE || (rc_a == 0 && b->objective_value < a->objective_value);
  return rc_b == REMAT_EINFEASIBLE && rc_a == REMAT_EINFEASIBLE &&
         b->min_budget_bytes < a->min_budget_bytes;
}

static int solve_once(const remat_plan_problem *pb, remat_plan *plan, remat_error *err) {
  for (int64_t g = 0; pb->min_blocks > 0 && g < pb->num_groups; g++)
    if (!pb->groups[g].recomputable) return solve_blocks(pb, plan, err);
  return remat__plan_solve_exact(pb, plan, err);
}

/* Whether a (feasible) trial's pools fit the budgets, and it beats best:
 * a lower objective, or the same with fewer layers not kept. */
static int pools_better(const remat_plan_problem *pb, const remat_plan *t, const remat_plan *best) {
  for (int64_t s = 0; s < pb->stages; s++)
    if (!t->stages[s].stream_peak_bytes || t->stages[s].stream_peak_bytes > pb->memory[s]) return 0;
  return t->objective_value < best->objective_value ||
         (t->objective_value == best->objective_value &&
          t->total_recomputed < best->total_recomputed);
}

enum { POOL_ROUNDS = 3 }; /* a fixed count: the same plan on every machine */

/* Under a stream remat train holds each rank's slots and W records in one
 * pool (stream_peak_bytes), at or below the memory the exact solve plans
 * by. The room a stage's pool leaves below its budget is spent: the
 * problem is solved again with each stage's bound raised by that room (or
 * lowered by the excess of a trial's pool over the budget), up to
 * POOL_ROUNDS times, and the best plan whose pools all fit the budgets is
 * kept, each stage's budget shown as given. A search, not a proof: the
 * exact solve is over the bound, one budget per stage. */
static int spend_pools(const remat_plan_problem *pb, remat_plan *best) {
  remat_plan_problem q;
  remat_error e;
  if (!pb->spend_pools || !best->feasible || !best->stages[0].stream_peak_bytes ||
      pb->objective == REMAT_OBJ_SIMULATED || remat_plan_problem_copy(&q, pb, &e))
    return 0;
  const remat_plan *last = best;
  remat_plan trial = {0};
  int have = 0;
  q.uniform_memory = 0;
  for (int round = 0; round < POOL_ROUNDS; round++) {
    int moved = 0;
    for (int64_t s = 0; s < pb->stages; s++) {
      size_t held = last->stages[s].stream_peak_bytes;
      if (!held || held == pb->memory[s]) continue;
      size_t up = q.memory[s] + pb->memory[s] - held; /* wraps back when held is above */
      moved |= up != q.memory[s] && up <= REMAT_PLAN_MAX_BYTES;
      if (up <= REMAT_PLAN_MAX_BYTES) q.memory[s] = up;
    }
    if (!moved) break;
    if (have) remat_plan_free(&trial);
    int rc = solve_once(&q, &trial, &e);
    have = rc == 0 || rc == REMAT_EINFEASIBLE;
    if (rc || !trial.feasible) break;
    if (pools_better(pb, &trial, best)) {
      remat_plan_free(best);
      *best = trial;
      have = 0;
      trial = (remat_plan){0};
      last = best;
    } else {
      last = &trial;
    }
  }
  if (have) remat_plan_free(&trial);
  for (int64_t s = 0; s < pb->stages; s++) best->stages[s].budget_bytes = pb->memory[s];
  best->pools_spent = 1;
  remat_plan_problem_free(&q);
  return 0;
}

int remat_plan_solve(const remat_plan_problem *pb, remat_plan *plan, remat_error *err) {
  int rc = solve_once(pb, plan, err);
  return rc ? rc : spend_pools(pb, plan);
}
