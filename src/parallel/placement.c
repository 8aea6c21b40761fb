/* placement.c: the one form of a placement (remat/parallel.h): which
 * blocks each stage runs and how, built from the planner's layer numbers in
 * the one place that converts them (both ways), and the stage a rank runs. */
#include <string.h>

#include "base/base.h"
#include "remat/parallel.h"
#include "remat/schedule.h"

int remat_placement_from_layers(remat_placement *pl, const remat_config *cfg, int64_t stages,
                                const int64_t *layers_per_stage, const uint8_t *layer_policy,
                                int schedule, int64_t microbatches, remat_error *err) {
  int64_t L = cfg->num_layers, sum = 0;
  if (stages < 1 || stages > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "a placement has 1 to %d stages, not %lld",
                         REMAT_MAX_STAGES, (long long)stages);
  for (int64_t s = 0; s < stages; s++) {
    if (layers_per_stage[s] < 1)
      return remat__errorf(err, REMAT_EINVAL, "stage %lld would hold no layer", (long long)s);
    sum += layers_per_stage[s];
  }
  if (sum != L + 2)
    return remat__errorf(err, REMAT_EINVAL,
                         "the stages hold %lld layers but the model has %lld (%lld blocks, the "
                         "embedding and the head)",
                         (long long)sum, (long long)L + 2, (long long)L);
  memset(pl, 0, sizeof *pl);
  pl->stages = stages;
  pl->schedule = schedule;
  pl->microbatches = microbatches;
  pl->replicas = 1;
  /* planner layer l is block l - 1; layer 0 (the embedding) joins stage 0
   * and layer L + 1 (the head) the last */
  int64_t first = 0;
  for (int64_t s = 0; s < stages; s++) {
    int64_t lo = first, hi = first + layers_per_stage[s];
    int64_t b0 = lo < 1 ? 1 : lo, b1 = hi > L + 1 ? L + 1 : hi;
    pl->first_block[s] = b0 - 1;
    pl->num_blocks[s] = b1 > b0 ? b1 - b0 : 0;
    first = hi;
  }
  for (int64_t b = 0; b < L; b++) pl->policy[b] = layer_policy ? layer_policy[b + 1] : REMAT_KEEP;
  return 0;
}

int remat_placement_from_chunks(remat_placement *pl, const remat_config *cfg, int64_t stages,
                                int64_t chunks, const int64_t *layers_per_chunk,
                                const uint8_t *layer_policy, int schedule, int64_t microbatches,
                                remat_error *err) {
  if (chunks < 1 || stages < 1 || stages * chunks > REMAT_MAX_STAGES)
    return remat__errorf(err, REMAT_EINVAL, "%lld stages of %lld chunks: a placement has 1 to %d "
                         "virtual stages", (long long)stages, (long long)chunks,
                         REMAT_MAX_STAGES);
  int rc = remat_placement_from_layers(pl, cfg, stages * chunks, layers_per_chunk, layer_policy,
                                       schedule, microbatches, err);
  if (rc) return rc;
  pl->stages = stages;
  pl->chunks = chunks;
  return 0;
}

void remat_placement_layers_of_blocks(const remat_config *cfg, int64_t n, const int64_t *blocks,
                                      const uint8_t *block_policy, int64_t *layers,
                                      uint8_t *layer_policy) {
  int64_t L = cfg->num_layers;
  for (int64_t s = 0; s < n; s++) layers[s] = blocks[s];
  layers[0] += 1;     /* the embedding, planner layer 0 */
  layers[n - 1] += 1; /* the head, planner layer L + 1 */
  layer_policy[0] = layer_policy[L + 1] = REMAT_KEEP;
  for (int64_t b = 0; b < L; b++) layer_policy[b + 1] = block_policy[b];
}

void remat_placement_whole(remat_placement *pl, const remat_config *cfg, const uint8_t *policy,
                           int64_t microbatches) {
  memset(pl, 0, sizeof *pl);
  pl->stages = 1;
  pl->num_blocks[0] = cfg->num_layers;
  pl->microbatches = microbatches;
  pl->replicas = 1;
  if (policy) memcpy(pl->policy, policy, (size_t)cfg->num_layers);
}

remat_stage remat_placement_chunk(const remat_placement *pl, int64_t s, int64_t c) {
  int64_t P = pl->stages, M = pl->microbatches, v = pl->chunks > 1 ? pl->chunks : 1;
  int64_t vs = remat_schedule_virtual_stage(pl->schedule, P, s, c);
  int64_t n[REMAT_MAX_STAGES], kw[REMAT_MAX_STAGES];
  remat_error err;
  /* the placement was checked against the schedule when it was made */
  REMAT_ASSERT(remat_schedule_held(pl->schedule, P, M, v, n, kw, &err) == 0);
  return (remat_stage){.first_block = pl->first_block[vs], .num_blocks = pl->num_blocks[vs],
                       .policy = pl->policy + pl->first_block[vs],
                       .full_slots = pl->full_slots + pl->first_block[vs],
                       .inflight = n[vs] > 0 ? n[vs] : 1, .wdeferred = kw[vs],
                       .has_embedding = vs == 0, .has_head = vs == P * v - 1,
                       .accumulate = M > 1, .work_borrowed = c > 0,
                       /* zbv's first rank: the head's chunk reads the
                        * embedding chunk's tied matrix (where it can:
                        * remat_stage.tied_borrowed) */
                       .tied_borrowed = vs == P * v - 1 && c > 0 &&
                                        remat_schedule_virtual_stage(pl->schedule, P, s, 0) == 0 &&
                                        remat_schedule_get(pl->schedule)->layout ==
                                            REMAT_LAYOUT_V &&
                                        pl->replicas <= 1};
}

int remat_placement_pooled(const remat_placement *pl) {
  const remat_schedule_info *row = remat_schedule_get(pl->schedule);
  return pl->stages > 1 && row && !row->op;
}

remat_stage remat_placement_stage(const remat_placement *pl, int64_t s, int64_t replica) {
  int64_t P = pl->stages, M = pl->microbatches;
  int64_t n[REMAT_MAX_STAGES], kw[REMAT_MAX_STAGES];
  remat_error err;
  /* the stages of a chunked schedule are their chunks (remat_placement_chunk);
   * whole, a stage counts as under 1F1B */
  const remat_schedule_info *row = remat_schedule_get(pl->schedule);
  int schedule = row && row->chunks_min == 1 ? pl->schedule : REMAT_SCHED_1F1B;
  REMAT_ASSERT(remat_schedule_held(schedule, P, M, 1, n, kw, &err) == 0);
  remat_stage st = {.first_block = pl->first_block[s], .num_blocks = pl->num_blocks[s],
                    .policy = pl->policy + pl->first_block[s],
                    .full_slots = pl->full_slots + pl->first_block[s], .inflight = n[s],
                    .wdeferred = kw[s], .has_embedding = s == 0, .has_head = s == P - 1,
                    .accumulate = M > 1};
  if (pl->replicas > 1) {
    st.replicas = pl->replicas;
    st.replica = replica;
    st.zero = pl->zero;
    st.accumulate = 1;
    if (P == 1) st.inflight = 1; /* replicas of the whole model take one micro-batch at a time */
  }
  return st;
}
