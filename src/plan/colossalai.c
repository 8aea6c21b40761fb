/* colossalai.c: a plan as ColossalAI's HybridParallelPlugin takes it.
 * Checked against ColossalAI 0.4.9 to 0.5.1 and main (4f9953b); the rules,
 * by file:
 *   booster/plugin/hybrid_parallel_plugin.py: pp_style "1f1b", "interleaved"
 *     or "zbv"; num_model_chunks 1 under 1f1b, more under interleaved, 2
 *     under zbv; zbv needs scheduler_nodes;
 *   pipeline/stage_manager.py: num_layers_per_stage, when given, has pp_size
 *     entries (__init__ asserts it), yet get_stage_index reads pp_size x
 *     chunks of them: a chunked schedule runs only distribute_layers' own
 *     split (the quotient everywhere, the remainder on the middle virtual
 *     stages); zbv's rank r holds virtual stages r and 2P-1-r;
 *   shardformer/shard/grad_ckpt_config.py: num_ckpt_layers_per_stage[stage +
 *     chunk * pp_size], at most the chunk's layers;
 *   shardformer/modeling/{llama,mistral,qwen2,qwen3,command}.py: only these
 *     read the counts, and recompute the first k layers of each chunk, and
 *     only after model.gradient_checkpointing_enable(); modeling/gpt2.py
 *     recomputes every layer or none;
 *   pipeline/schedule/interleaved_pp.py: micro-batches a multiple of pp_size
 *     (remat's interleaved plans are). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/export.h"

#define VERSIONS "ColossalAI 0.4.9 to 0.5.1 and main 4f9953b"

static int honours_counts(const char *family) {
  static const char *const names[] = {"llama", "mistral", "qwen2", "qwen3", "command"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (strcmp(family, names[k]) == 0) return 1;
  return 0;
}

/* stage_manager.py's distribute_layers for n virtual stages. */
static void default_split(int64_t total, int64_t n, int64_t *out) {
  int64_t q = total / n, r = total % n, start = n / 2 - r / 2;
  for (int64_t k = 0; k < n; k++) out[k] = q + (k >= start && k < start + r);
}

static const char *style_of(int schedule) {
  return schedule == REMAT_SCHED_INTERLEAVED ? "interleaved"
         : schedule == REMAT_SCHED_ZBV       ? "zbv"
                                             : "1f1b";
}

/* What ColossalAI is given and runs. base: the plan whose split it takes
 * (the plan, or the best plan on ColossalAI's own split). */
typedef struct {
  remat_plan alt;      /* the plan on ColossalAI's split, when it differs */
  const remat_plan *base;
  remat__fw_view view; /* of base */
  int layers_given;    /* num_layers_per_stage is passed */
  int config;          /* gradient_checkpoint_config is passed */
  int enable;          /* gradient_checkpointing_enable() is called */
  int64_t *run_ckpt;   /* (nv) blocks recomputed per virtual stage */
  int64_t *read;       /* (nv) the counts in ColossalAI's order: rank r's chunk c at r + c P */
  remat_plan runs;
  int exact;
} colossal;

static void colossal_free(colossal *c) {
  remat_plan_free(&c->alt);
  remat__fw_view_free(&c->view);
  remat__free(c->run_ckpt);
  remat__free(c->read);
  remat_plan_free(&c->runs);
}

/* A chunked plan: ColossalAI's own split, and the best recompute on it. */
static int own_split(const remat_plan_problem *pb, const remat_plan *pl, colossal *c,
                     remat__fw_export *ex, remat_error *err) {
  remat__fw_view pv;
  int rc = remat__fw_view_get(pb, pl, &pv);
  if (rc) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  remat_plan_problem q;
  if ((rc = remat_plan_problem_copy(&q, pb, err))) goto out;
  q.fixed_blocks = remat__malloc((size_t)pv.nv * sizeof *q.fixed_blocks);
  if (!q.fixed_blocks) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory");
    goto out_q;
  }
  if (pv.total < pv.nv) {
    remat__fw_note(ex, "ColossalAI's own split gives some of the %lld chunks no layer: the "
                   "model has %lld; plan with fewer stages or chunks.", (long long)pv.nv,
                   (long long)pv.total);
    goto out_q;
  }
  default_split(pv.total, pv.nv, q.fixed_blocks);
  if (memcmp(q.fixed_blocks, pv.blocks, (size_t)pv.nv * sizeof *pv.blocks) == 0) goto out_q;
  q.min_blocks = 1;
  rc = remat_plan_solve(&q, &c->alt, err);
  if (rc && rc != REMAT_EINFEASIBLE) goto out_q;
  rc = 0;
  c->base = &c->alt;
  remat__fw_note(ex, "ColossalAI cannot take this plan's uneven split into chunks: "
                 "PipelineStageManager asserts len(num_layers_per_stage) == pp_size while "
                 "get_stage_index reads pp_size x chunks entries. It runs its own split "
                 "(distribute_layers) when num_layers_per_stage is left out; below is remat's "
                 "best recompute on that split%s.",
                 c->alt.feasible ? "" : ", which does NOT fit the budget");
out_q:
  remat_plan_problem_free(&q);
out:
  remat__fw_view_free(&pv);
  return rc;
}

/* The arrangement: split, counts in ColossalAI's order, and what runs. */
static int arrange(const remat_plan_problem *pb, const remat_plan *pl, colossal *c,
                   remat__fw_export *ex, remat_error *err) {
  int rc;
  c->base = pl;
  c->layers_given = pl->chunks <= 1;
  if (!c->layers_given && (rc = own_split(pb, pl, c, ex, err))) return rc;
  if (remat__fw_view_get(pb, c->base, &c->view))
    return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  const remat__fw_view *v = &c->view;
  c->run_ckpt = remat__malloc((size_t)v->nv * sizeof *c->run_ckpt);
  c->read = remat__malloc((size_t)v->nv * sizeof *c->read);
  if (!c->run_ckpt || !c->read) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int any = v->middle + v->full > 0;
  int others = pb->job.family[0] && !honours_counts(pb->job.family);
  c->enable = any;
  c->config = any && !others;
  for (int64_t s = 0; s < v->nv; s++) c->run_ckpt[s] = others && any ? v->blocks[s] : v->ckpt[s];
  for (int64_t r = 0; r < v->p; r++)
    for (int64_t k = 0; k < v->v; k++)
      c->read[r + k * v->p] = v->ckpt[remat_schedule_virtual_stage(pl->schedule, v->p, r, k)];
  if ((rc = remat__fw_runs(pb, c->base, v, v->blocks, c->run_ckpt, REMAT_RECOMPUTE, &c->runs, err)))
    return rc;
  c->exact = remat__fw_same(pl, &c->runs);
  return 0;
}

/* Why what runs is not the plan, and what it costs. */
static void differences(const remat_plan_problem *pb, const remat_plan *pl, const colossal *c,
                        remat__fw_export *ex) {
  const remat__fw_view *v = &c->view;
  char cmp[256];
  if (!pb->job.family[0] && c->config)
    remat__fw_note(ex, "ColossalAI reads num_ckpt_layers_per_stage in its llama, mistral, qwen2, "
                   "qwen3 and command policies; others (gpt2 among them) recompute every layer "
                   "once checkpointing is on. Give the problem a \"family\" to have it checked.");
  if (c->exact) {
    remat__fw_note(ex, "ColossalAI runs this plan as it is: the first k transformer layers of "
                   "each %s recomputed, k as listed.", v->v > 1 ? "chunk" : "stage");
    return;
  }
  if (c->enable && !c->config)
    remat__fw_note(ex, "ColossalAI's %s policy recomputes every layer or none "
                   "(shardformer/modeling/%s.py) and ignores per-stage counts: with "
                   "checkpointing on, it recomputes all %lld layers.",
                   pb->job.family, pb->job.family, (long long)v->total);
  if (v->middle)
    remat__fw_note(ex, "ColossalAI has no middle policy: the %lld middle layer(s) run fully "
                   "recomputed (plan with --no-middle for a plan it runs as it is).",
                   (long long)v->middle);
  if (!v->first_k && c->config)
    remat__fw_note(ex, "ColossalAI recomputes the first k layers of each stage, not the layers "
                   "the plan chose.");
  remat__fw_note(ex, "What ColossalAI runs: %s.",
                 remat__fw_compare(cmp, sizeof cmp, pl, &c->runs));
}

/* The zero-bubble V's graph (pipeline/schedule/v_schedule.py's PipelineGraph):
 * costs of F, B and W per micro-batch of an average chunk, scaled to 1000 at
 * most, and memory in MiB: F adds f_mem, B frees all but what W keeps
 * (b_mem = -f_mem - w_mem), W frees that (w_mem). */
static void graph(const remat_plan_problem *pb, const colossal *c, double g[6]) {
  const remat_plan *pl = c->base;
  double F = 0, B = 0, W = 0, act = 0, keep = 0, nv = (double)c->view.nv;
  for (int64_t s = 0; s < pl->num_stages; s++) {
    F += pl->stages[s].fwd_time;
    B += pl->stages[s].bwd_time;
  }
  int64_t l = 0;
  for (int64_t k = 0; k < pb->num_groups; k++)
    for (int64_t j = 0; j < pb->groups[k].count; j++, l++) {
      const remat_plan_group *G = &pb->groups[k];
      act += (double)(c->runs.policy[l] ? G->ckpt_bytes : G->act_bytes);
      if (c->runs.policy[l]) continue; /* a recomputed layer's W runs with its B */
      W += G->wgrad;
      keep += (double)G->wgrad_bytes;
    }
  B = B > W ? B - W : 0;
  double top = fmax(F, fmax(B, W)), scale = top > 0 ? 1000 / top : 1;
  g[0] = fmax(1, round(F * scale));
  g[1] = fmax(1, round(B * scale));
  g[2] = fmax(1, round(W * scale));
  g[3] = fmax(1, ceil(act / nv / 1048576.0));      /* f_mem */
  g[5] = -fmin(g[3], round(keep / nv / 1048576.0)); /* w_mem */
  g[4] = -g[3] - g[5];                              /* b_mem */
}

static void snippet(const remat_plan_problem *pb, const remat_plan *pl, const colossal *c,
                    const double *g, remat__plan_buf *b) {
  const remat__fw_view *v = &c->view;
  int zbv = pl->schedule == REMAT_SCHED_ZBV;
  remat__plan_printf(b, "from colossalai.booster import Booster\n"
                        "from colossalai.booster.plugin import HybridParallelPlugin\n");
  if (c->config)
    remat__plan_printf(b, "from colossalai.shardformer import PipelineGradientCheckpointConfig\n");
  if (zbv)
    remat__plan_printf(b, "from colossalai.pipeline.schedule.v_schedule import PipelineGraph\n");
  remat__plan_printf(b, "\n");
  if (c->layers_given) {
    remat__plan_printf(b, "num_layers_per_stage = ");
    remat__fw_list(b, v->blocks, v->nv);
    remat__plan_printf(b, "  # %lld transformer layers\n", (long long)v->total);
  }
  if (c->config) {
    remat__plan_printf(b, "num_ckpt_layers_per_stage = ");
    remat__fw_list(b, c->read, v->nv);
    remat__plan_printf(b, v->v > 1 ? "  # entry r + c*pp_size: rank r's chunk c\n" : "\n");
  }
  if (zbv)
    remat__plan_printf(b, "scheduler_nodes = PipelineGraph(\n    n_stage=%lld, n_micro=%lld,\n"
                       "    f_cost=%.0f, b_cost=%.0f, w_cost=%.0f, c_cost=1,\n"
                       "    f_mem=%.0f, b_mem=%.0f, w_mem=%.0f,\n).get_v_schedule()\n",
                       (long long)v->p, (long long)pl->microbatches, g[0], g[1], g[2], g[3], g[4],
                       g[5]);
  remat__plan_printf(b, "plugin = HybridParallelPlugin(\n    tp_size=%lld,\n    pp_size=%lld,\n"
                     "    num_microbatches=%lld,\n    pp_style=\"%s\",\n",
                     (long long)(pb->job.tensor_parallel > 0 ? pb->job.tensor_parallel : 1),
                     (long long)v->p, (long long)pl->microbatches, style_of(pl->schedule));
  if (pb->job.sequence_parallel && pb->job.tensor_parallel > 1)
    remat__plan_printf(b, "    enable_sequence_parallelism=True,\n"
                          "    sequence_parallelism_mode=\"split_gather\",\n");
  if (v->v > 1) remat__plan_printf(b, "    num_model_chunks=%lld,\n", (long long)v->v);
  if (zbv) remat__plan_printf(b, "    scheduler_nodes=scheduler_nodes,\n");
  if (c->layers_given) remat__plan_printf(b, "    num_layers_per_stage=num_layers_per_stage,\n");
  if (c->config)
    remat__plan_printf(b, "    gradient_checkpoint_config=PipelineGradientCheckpointConfig(\n"
                          "        num_ckpt_layers_per_stage=num_ckpt_layers_per_stage,\n    ),\n");
  remat__plan_printf(b, ")\nbooster = Booster(plugin=plugin)\n");
  if (c->enable)
    remat__plan_printf(b, "# model: your model, before booster.boost(model, ...); without this "
                          "call nothing is recomputed\n"
                          "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs="
                          "{\"use_reentrant\": False})\n");
  else
    remat__plan_printf(b, "# nothing is recomputed: leave gradient checkpointing off\n");
}

/* What its tensor parallelism cannot take: a size that does not divide
 * the key/value heads (its Llama-like policies split them). */
static void tensor_notes(const remat_plan_problem *pb, remat__fw_export *ex) {
  const remat_plan_job *j = &pb->job;
  if (j->tensor_parallel > 1 && j->kv_heads > 0 && j->kv_heads % j->tensor_parallel)
    remat__fw_note(ex, "ColossalAI's policies split the %lld key/value heads over tp_size=%lld "
                   "and refuse a size that does not divide them; remat's plan holds them whole "
                   "on every rank. Use a tp_size that divides them.",
                   (long long)j->kv_heads, (long long)j->tensor_parallel);
}

static void schedule_notes(const remat_plan *pl, remat__fw_export *ex) {
  if (pl->schedule == REMAT_SCHED_GPIPE)
    remat__fw_note(ex, "ColossalAI has no GPipe schedule; 1f1b holds fewer micro-batches "
                   "than this plan assumed (all %lld), so it fits too (plan with --schedule "
                   "1f1b for a tighter plan).", (long long)pl->microbatches);
  if (pl->schedule == REMAT_SCHED_ZBH1)
    remat__fw_note(ex, "ColossalAI has no ZB-H1 (its zero-bubble schedule is zbv): under 1f1b "
                   "this split holds the same activations and no deferred weight gradients, "
                   "so it fits, without ZB-H1's shorter time.");
  if (pl->schedule == REMAT_SCHED_ZBV)
    remat__fw_note(ex, "The graph's costs and memory (MiB per micro-batch of a chunk) are the "
                   "plan's; ColossalAI orders F, B and W by it, remat's times follow its own "
                   "stream, so the time is an estimate.");
}

static cJSON *json_list(const int64_t *v, int64_t n) {
  cJSON *a = cJSON_CreateArray();
  for (int64_t k = 0; a && k < n; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[k]));
  return a;
}

static void to_json(const remat_plan_problem *pb, const remat_plan *pl, const colossal *c,
                    const double *g, cJSON *o) {
  const remat__fw_view *v = &c->view;
  cJSON_AddBoolToObject(o, "feasible", pl->feasible);
  cJSON_AddBoolToObject(o, "exact", c->exact);
  cJSON_AddNumberToObject(o, "tp_size",
                          (double)(pb->job.tensor_parallel > 0 ? pb->job.tensor_parallel : 1));
  cJSON_AddBoolToObject(o, "enable_sequence_parallelism",
                        pb->job.sequence_parallel && pb->job.tensor_parallel > 1);
  cJSON_AddNumberToObject(o, "pp_size", (double)v->p);
  cJSON_AddNumberToObject(o, "num_microbatches", (double)pl->microbatches);
  cJSON_AddStringToObject(o, "pp_style", style_of(pl->schedule));
  cJSON_AddNumberToObject(o, "num_model_chunks", (double)v->v);
  cJSON_AddItemToObject(o, "num_layers_per_stage",
                        c->layers_given ? json_list(v->blocks, v->nv) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "num_ckpt_layers_per_stage",
                        c->config ? json_list(c->read, v->nv) : cJSON_CreateNull());
  cJSON_AddBoolToObject(o, "gradient_checkpointing", c->enable);
  if (pl->schedule == REMAT_SCHED_ZBV) {
    cJSON *gr = cJSON_AddObjectToObject(o, "scheduler_graph");
    static const char *const keys[] = {"f_cost", "b_cost", "w_cost", "f_mem", "b_mem", "w_mem"};
    cJSON_AddNumberToObject(gr, "n_stage", (double)v->p);
    cJSON_AddNumberToObject(gr, "n_micro", (double)pl->microbatches);
    for (int k = 0; k < 6; k++) cJSON_AddNumberToObject(gr, keys[k], g[k]);
    cJSON_AddNumberToObject(gr, "c_cost", 1);
  } else {
    cJSON_AddNullToObject(o, "scheduler_graph");
  }
  cJSON *r = cJSON_AddObjectToObject(o, "runs");
  cJSON_AddItemToObject(r, "layers_per_stage", json_list(c->runs.chunk_layers, v->nv));
  cJSON_AddItemToObject(r, "blocks", json_list(v->blocks, v->nv));
  cJSON_AddItemToObject(r, "recomputed_blocks", json_list(c->run_ckpt, v->nv));
  cJSON_AddNumberToObject(r, "objective_value", c->runs.objective_value);
  cJSON_AddNumberToObject(r, "max_memory_bytes", (double)c->runs.max_memory_bytes);
  cJSON_AddBoolToObject(r, "feasible", c->runs.feasible);
}

int remat__colossalai_export(const remat_plan_problem *pb, const remat_plan *pl,
                             remat__fw_export *ex, remat_error *err) {
  int rc = remat__fw_export_init(ex, "colossalai", VERSIONS, err);
  if (rc) return rc;
  colossal c = {0};
  remat__plan_printf(&ex->text, "# remat plan for %s: %lld pipeline stages, %s, %lld "
                     "micro-batches, objective %s = %.6g, slowdown %.4g\n", VERSIONS,
                     (long long)pl->num_stages, remat_plan_schedule_name(pl->schedule),
                     (long long)pl->microbatches, remat_plan_objective_name(pl->objective),
                     pl->objective_value, pl->slowdown);
  remat__fw_caveat(ex, pb, pl);
  if (!pl->feasible) remat__fw_note(ex, "WARNING: this plan does not fit its memory budget.");
  if ((rc = arrange(pb, pl, &c, ex, err))) goto out;
  differences(pb, pl, &c, ex);
  schedule_notes(pl, ex);
  tensor_notes(pb, ex);
  double g[6] = {0};
  if (pl->schedule == REMAT_SCHED_ZBV) graph(pb, &c, g);
  snippet(pb, pl, &c, g, &ex->text);
  to_json(pb, pl, &c, g, ex->json);
out:
  colossal_free(&c);
  if (rc) remat__fw_export_free(ex);
  return rc;
}
