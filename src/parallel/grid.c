/* grid.c: a trainer's step on a P x D grid: D pipelines of P stages, the
 * D copies of each stage data-parallel replicas of each other. World rank
 * s D + r runs stage s of pipeline r (remat_dist_grid lays the job out).
 *
 * The step is the pipeline's and the replicas' together:
 *   micro-batches  the pipeline's schedule: local micro-batch k of pipeline
 *                  r is micro-batch k D + r of the step (pipeline.c);
 *                  each layer's gradient is reduce-scattered among the
 *                  stage's replicas as its backward ends, travelling while
 *                  the next layer's runs (replicas.c; the last lands
 *                  after the schedule);
 *                  since every stage runs its backwards in micro-batch
 *                  order (1F1B and GPipe both do), the owner of a shard adds
 *                  c_0, c_1, c_2, ... in the order one process with
 *                  --grad-accum M D follows
 *   after          the tied matrix: stage 0's embedding sum and the last
 *                  stage's head sum, exchanged between the two stages of
 *                  each pipeline over the elements that replica owns and
 *                  added embedding + head; then the replicas' own (ZeRO 0:
 *                  the summed gradients all-gathered)
 *   norm           each stage's layer sums from its replicas' chunk sums,
 *                  then every stage's, in model order
 *   update         each replica's shards (ZeRO 1-3) or everything (0)
 * Every collective a rank issues is one its peers in the same line of the
 * grid issue in the same order (they run the same instruction stream), so
 * no order of them can deadlock. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "parallel/parallel_internal.h"

struct remat_grid {
  remat_dist *d;
  remat_trainer *tr;
  remat_model *m;
  remat_pipeline *pl;
  remat_replicas *rp;
  int64_t P, D, s, r;
};

static int after_backward(void *ctx, remat_trainer *tr, remat_error *err) {
  remat_grid *g = ctx;
  const remat_config *cfg = remat_model_config(g->m);
  int64_t L = cfg->num_layers;
  if (g->s == 0 || g->s == g->P - 1) {
    /* the elements of the tied matrix this replica owns: the same on both
     * stages (the tied unit is cut like the embedding's) */
    size_t first, count, run;
    remat_unit_owned(cfg, L + 2, g->D, g->r, &first, &count);
    if (count) {
      float *t = g->s == 0 ? remat__model_unit_at(g->m, REMAT_BUF_GRADS, 0, first, &run)
                           : remat__model_unit_at(g->m, REMAT_BUF_TIED_GRAD, L + 2, first, &run);
      REMAT_ASSERT(run >= count);
      int rc = remat__pipeline_exchange_tied(g->pl, t, count, err);
      if (rc) return rc;
    }
  }
  return remat__replicas_after_backward(g->rp, tr, err);
}

static int norm_sumsq(void *ctx, remat_trainer *tr, const double *layers, int64_t n,
                      double *total, remat_error *err) {
  (void)tr;
  (void)layers;
  (void)n;
  remat_grid *g = ctx;
  double part[4096 + 2];
  int64_t k;
  int rc = remat__replicas_layer_sums(g->rp, part, &k, err);
  return rc ? rc : remat__pipeline_norm(g->pl, part, k, total, err);
}

static int update(void *ctx, remat_trainer *tr, float lr, float norm, remat_error *err) {
  remat_grid *g = ctx;
  return remat__replicas_update(g->rp, tr, lr, norm, err);
}

static int micro_batches(void *ctx, remat_trainer *tr, double *loss_sum, remat_error *err) {
  remat_grid *g = ctx;
  remat__replicas_begin_step(g->rp);
  int rc = remat__pipeline_micro_batches(g->pl, tr, loss_sum, err);
  /* the last layer's reduce-scatter lands before the tied matrix moves */
  return rc ? rc : remat__replicas_end_micro_batches(g->rp, err);
}

int remat_grid_create(remat_grid **out, remat_dist *d, remat_trainer *tr,
                      const remat_placement *sp,
                      remat_error *err) {
  *out = NULL;
  remat_model *m = remat_trainer_model(tr);
  const remat_stage *st = remat_model_stage(m);
  int64_t P = sp->stages, D = st->replicas;
  if (D < 2 || P < 2)
    return remat__errorf(err, REMAT_EINVAL,
                         "a grid has at least 2 stages and 2 replicas, not %lld x %lld",
                         (long long)P, (long long)D);
  if (d->P != P || d->D != D)
    return remat__errorf(err, REMAT_EINVAL,
                         "the job's ranks form a grid of %lld x %lld, not %lld stages x %lld "
                         "replicas (remat_dist_grid)",
                         (long long)d->P, (long long)d->D, (long long)P, (long long)D);
  remat_grid *g = remat__calloc(1, sizeof *g);
  if (!g) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  *g = (remat_grid){.d = d, .tr = tr, .m = m, .P = P, .D = D, .s = remat_dist_stage(d),
                    .r = remat_dist_replica(d)};
  int rc = remat_pipeline_create(&g->pl, d->pipeline, tr, sp, err);
  if (!rc) rc = remat_replicas_create(&g->rp, d->replicas, tr, err);
  if (rc) {
    remat_grid_destroy(g);
    return rc;
  }
  remat__pipeline_join(g->pl, d, d->replicas);
  remat__replicas_trace_into(g->rp, remat__pipeline_trace(g->pl));
  remat__trainer_ops ops = {.micro_batches = micro_batches, .after_backward = after_backward,
                           .norm_sumsq = norm_sumsq, .update = update, .ctx = g};
  remat__trainer_set_ops(tr, &ops);
  *out = g;
  return 0;
}

void remat_grid_destroy(remat_grid *g) {
  if (!g) return;
  remat_replicas_destroy(g->rp);
  remat_pipeline_destroy(g->pl);
  remat__free(g);
}

remat_pipeline *remat_grid_pipeline(remat_grid *g) { return g->pl; }
remat_replicas *remat_grid_replicas(remat_grid *g) { return g->rp; }

int remat_grid_gather_params(remat_grid *g, float *full, remat_error *err) {
  /* each stage to its replica 0, whole tensors; then the stages of
   * pipeline 0 to world rank 0 */
  const remat_config *cfg = remat_model_config(g->m);
  size_t n = remat_param_count(cfg);
  float *whole = g->r == 0 ? remat__malloc(n * sizeof(float)) : NULL;
  float *flat = NULL;
  int rc = 0;
  if (g->r == 0 && !whole) rc = remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the parameters");
  int ok = rc == 0;
  remat_dist_all_ok(g->d, ok, &ok);
  if (!ok) {
    remat__free(whole);
    return rc ? rc : remat__errorf(err, REMAT_ENOMEM, "another rank ran out of memory");
  }
  if ((rc = remat_replicas_gather_params(g->rp, whole, err))) goto done;
  if (g->r != 0) goto done;
  remat_stage mine = *remat_model_stage(g->m);
  mine.replicas = mine.replica = 0;
  mine.zero = 0;
  if (!(flat = remat__malloc(remat__stage_num_params(cfg, &mine) * sizeof(float)))) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory gathering the parameters");
    goto done;
  }
  remat__stage_params_from_full(cfg, &mine, whole, flat);
  rc = remat__pipeline_gather_flat(g->pl, flat, full, err);
done:
  remat__free(flat);
  remat__free(whole);
  return rc;
}
