/* test_replicas.c: the memory model of data-parallel replicas. Units cover
 * the flat parameter buffer exactly once; shards cover each unit exactly
 * once, on chunk boundaries; a replica's persistent regions are the ZeRO
 * table's (16 Psi, 8 Psi + 8 Psi/D, 4 Psi + 12 Psi/D, 16 Psi/D) in the
 * memory model's exact terms (whole layers aligned, shards padded to the
 * quantum); its communication buffers (gradient buffers among them, two
 * for the blocks so that one layer's can be in flight while the next is
 * computed) are what the model says; and the
 * planner's figure for a replica (remat_plan_problem_from_replicas) is the
 * engine's arena, byte for byte; on a P x D grid the stages' units cover the
 * model and the planner's figure is the engine's with the whole model's
 * communication buffers, which bound every stage's. The ZeRO paper's state
 * bytes per parameter (remat_state_bytes) against figures by hand. */
#include <stdlib.h>
#include <string.h>

#include "memory/layout.h"
#include "memory/memplan.h"
#include "test_util.h"

static void units_cover(const remat_config *cfg) {
  size_t P = remat_param_count(cfg);
  unsigned char *seen = calloc(P, 1);
  int64_t L = cfg->num_layers, U = remat_unit_count(cfg);
  CHECK(U == L + 3);
  for (int64_t u = 0; u <= L + 1; u++) { /* the tied unit repeats wte: a gradient only */
    remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS];
    int n = remat_unit_segments(cfg, u, seg);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
      CHECK(seg[k].at == at);
      at += seg[k].count;
      for (size_t i = 0; i < seg[k].count; i++) seen[seg[k].offset + i]++;
    }
    CHECK(at == remat_unit_floats(cfg, u));
  }
  size_t once = 0;
  for (size_t i = 0; i < P; i++) once += seen[i] == 1;
  CHECK(once == P);
  free(seen);
  CHECK(remat_unit_floats(cfg, L + 2) == (size_t)(cfg->padded_vocab_size * cfg->channels));
  /* shards: D pieces on chunk boundaries, covering the unit once */
  for (int64_t D = 2; D <= 7; D++)
    for (int64_t u = 0; u <= L + 2; u++) {
      size_t s = remat_unit_shard(cfg, u, D), n = remat_unit_floats(cfg, u), next = 0;
      CHECK(s % REMAT_SHARD_QUANTUM == 0 && s * (size_t)D >= n);
      CHECK(s * (size_t)(D - 1) < n + REMAT_SHARD_QUANTUM * (size_t)D || s == REMAT_SHARD_QUANTUM);
      for (int64_t r = 0; r < D; r++) {
        size_t first, count;
        remat_unit_owned(cfg, u, D, r, &first, &count);
        CHECK(first == next && count <= s);
        next = first + count;
      }
      CHECK(next == n);
    }
  /* the tied gradient is cut like the embedding: one owner per element */
  CHECK(remat_unit_shard(cfg, L + 2, 3) == remat_unit_shard(cfg, 0, 3));
}

/* The regions of replica r of D under ZeRO z, against the table. */
static void regions(const remat_config *cfg, int64_t B, int64_t T, int64_t D, int z,
                    const uint8_t *pol) {
  int64_t L = cfg->num_layers;
  size_t whole = 0, shard = 0;
  for (int64_t u = 0; u <= L + 1; u++) {
    whole += remat__align(remat_unit_floats(cfg, u) * sizeof(float));
    shard += remat_unit_shard(cfg, u, D) * sizeof(float);
  }
  size_t tied_whole = remat__align(remat_unit_floats(cfg, L + 2) * sizeof(float));
  size_t tied_shard = remat_unit_shard(cfg, L + 2, D) * sizeof(float);
  for (int64_t r = 0; r < D; r++) {
    remat_stage st = remat_stage_replica(cfg, pol, D, r, z);
    remat_memplan *mp;
    remat_error err;
    CHECK(remat_memplan_create_stage(&mp, cfg, B, T, &st, &err) == 0);
    const remat_membuf *b = mp->buf;
    size_t want[4][4] = {{whole, whole, whole, whole},
                         {whole, whole, shard, shard},
                         {whole, shard, shard, shard},
                         {shard, shard, shard, shard}};
    CHECK(b[REMAT_BUF_PARAMS].bytes == want[z][0] && b[REMAT_BUF_GRADS].bytes == want[z][1] &&
          b[REMAT_BUF_ADAM_M].bytes == want[z][2] && b[REMAT_BUF_ADAM_V].bytes == want[z][3]);
    CHECK(b[REMAT_BUF_TIED_GRAD].bytes == (z <= 1 ? tied_whole : tied_shard));
    /* 16 Psi, 8 Psi + 8 Psi/D, 4 Psi + 12 Psi/D, 16 Psi/D: Psi whole = "whole / 4" */
    size_t table[4] = {4 * whole, 2 * whole + 2 * shard, whole + 3 * shard, 4 * shard};
    CHECK(mp->persistent_bytes == table[z] + b[REMAT_BUF_TIED_GRAD].bytes);
    /* communication: one layer's pieces in flight (the head's two units
     * at once); ZeRO 3 gathers the unit in use, the next block, the head */
    size_t e = remat_unit_shard(cfg, 0, D), k = remat_unit_shard(cfg, 1, D),
           h = remat_unit_shard(cfg, L + 1, D);
    size_t big = e > k ? e : k, f = sizeof(float);
    CHECK(b[REMAT_BUF_RECV].bytes == (size_t)D * (big + h) * f);
    CHECK(b[REMAT_BUF_GATHER].bytes == (z == 3 ? (size_t)D * (big + k + h) * f : 0));
    /* the head's gradient buffer: D shards of the tied unit, then of its own */
    CHECK(mp->grad_bytes[REMAT_LAYER_HEAD] == (size_t)D * (e + h) * f);
    CHECK(mp->grad_bytes[REMAT_LAYER_BLOCK] == (size_t)D * k * f);
    /* the gradient buffers: two blocks' (one with one block) and the head's,
     * outside the workspace, which is the one-process model's without them */
    size_t nb = L < 2 ? (size_t)L : 2;
    CHECK(b[REMAT_BUF_REDUCE].bytes == nb * D * k * f + (size_t)D * (e + h) * f);
    CHECK(b[REMAT_BUF_REDUCE].offset + b[REMAT_BUF_REDUCE].bytes == mp->peak_bytes);
    remat_stage one = remat_stage_whole(cfg, pol);
    remat_memplan *solo;
    CHECK(remat_memplan_create_stage(&solo, cfg, B, T, &one, &err) == 0);
    CHECK(b[REMAT_BUF_WORK].bytes == solo->buf[REMAT_BUF_WORK].bytes);
    remat_memplan_destroy(solo);
    CHECK(mp->bytes.comm == b[REMAT_BUF_RECV].bytes + b[REMAT_BUF_GATHER].bytes +
                               b[REMAT_BUF_NORM].bytes + b[REMAT_BUF_REDUCE].bytes);
    CHECK(mp->peak_bytes == mp->bytes.total && mp->bytes.comm > 0);
    /* every replica's arena is the same */
    if (r == 0) {
      remat_stage s1 = remat_stage_replica(cfg, pol, D, D - 1, z);
      remat_memplan *m1;
      CHECK(remat_memplan_create_stage(&m1, cfg, B, T, &s1, &err) == 0);
      CHECK(m1->peak_bytes == mp->peak_bytes);
      remat_memplan_destroy(m1);
    }
    remat_memplan_destroy(mp);
  }
}

/* The planner's figure for a replica is its arena. */
static void planner(const remat_config *cfg, int64_t B, int64_t T, int64_t D, int z, int *cases) {
  int64_t L = cfg->num_layers;
  remat_plan_problem pb;
  remat_error err;
  int rc = remat_plan_problem_from_replicas(&pb, cfg, B, T, 1, 2, D, z, (size_t)1 << 50, &err);
  CHECK(rc == 0);
  if (rc) return;
  uint8_t pol[64], rec[66];
  /* the first n recomputed; the first n middle; middle and recomputed mixed */
  for (int64_t n = 0; n <= 3 * L + 2; n++) {
    int64_t k = n % (L + 1), how = n / (L + 1);
    remat_policy_first_n(pol, L, k);
    for (int64_t l = 0; how && l < L; l++)
      pol[l] = how == 1 ? (l < k ? REMAT_MIDDLE : REMAT_KEEP) : (uint8_t)((l + k) % 3);
    memset(rec, 0, sizeof rec);
    for (int64_t l = 0; l < L; l++) rec[l + 1] = pol[l];
    int64_t layers = L + 2;
    remat_plan plan;
    CHECK(remat_plan_evaluate(&pb, &layers, rec, &plan, &err) == 0);
    remat_stage st = remat_stage_replica(cfg, pol, D, 0, z);
    remat_memplan *mp;
    CHECK(remat_memplan_create_stage(&mp, cfg, B, T, &st, &err) == 0);
    if (plan.stages[0].memory_bytes != mp->peak_bytes)
      printf("D=%lld ZeRO %d recompute %lld: planner %zu, engine %zu\n", (long long)D, z,
             (long long)n, plan.stages[0].memory_bytes, mp->peak_bytes);
    CHECK(plan.stages[0].memory_bytes == mp->peak_bytes);
    /* the library's answer under that budget (the planner's, which remat
     * train --mem runs) fits it, no slower than this policy */
    int64_t nf, nm;
    size_t need;
    if (how == 0) {
      CHECK(remat_fewest_recompute(cfg, B, T, &st, mp->peak_bytes, NULL, &nf, &nm, &need,
                                   &err) == 0);
      const remat_plan_group *g = &pb.groups[REMAT_LAYER_BLOCK];
      CHECK(need <= mp->peak_bytes &&
            (double)nf * g->recompute + (double)nm * g->middle_recompute <=
                (double)k * g->recompute * (1 + 1e-12));
    }
    (*cases)++;
    remat_memplan_destroy(mp);
    remat_plan_free(&plan);
  }
  remat_plan_problem_free(&pb);
}

/* A P x D grid's stages: their units cover the model once (the last stage's
 * tied copy besides); each stage's arena is the planner's figure with the
 * whole model's communication buffers in place of the stage's, which they
 * bound. */
static void grid(const remat_config *cfg, int64_t B, int64_t T, int64_t D, int z, int *cases) {
  int64_t L = cfg->num_layers;
  remat_error err;
  remat_replica_bytes whole, again;
  remat_stage all = remat_stage_replica(cfg, NULL, D, 0, z);
  CHECK(remat_replica_bytes_get(cfg, D, z, &whole, &err) == 0);
  CHECK(remat_replica_stage_bytes_get(cfg, &all, &again, &err) == 0);
  CHECK(memcmp(&whole, &again, sizeof whole) == 0);
  for (int64_t P = 2; P <= 3 && P <= L; P++) {
    remat_plan_problem pb;
    int rc = remat_plan_problem_from_replicas(&pb, cfg, B, T, P, 2, D, z, (size_t)1 << 50, &err);
    CHECK(rc == 0);
    if (rc) continue;
    /* the embedding alone on stage 0, the blocks spread, the head with the last */
    int64_t layers[3] = {1, P == 2 ? L + 1 : L / 2, L - L / 2 + 1};
    uint8_t rec[4096 + 2] = {0}, pol[4096];
    for (int64_t l = 1; l <= L; l += 2) rec[l] = 1;
    remat_plan plan;
    CHECK(remat_plan_evaluate(&pb, layers, rec, &plan, &err) == 0);
    int seen[4096 + 3] = {0};
    int64_t first = 0;
    for (int64_t s = 0; s < P; s++) {
      int64_t lo = first, hi = first + layers[s], b0 = lo < 1 ? 1 : lo, b1 = hi > L + 1 ? L + 1 : hi;
      first = hi;
      remat_stage st = {.first_block = b0 - 1, .num_blocks = b1 > b0 ? b1 - b0 : 0,
                        .policy = pol, .inflight = 2 < P - s ? 2 : P - s,
                        .has_embedding = s == 0, .has_head = s == P - 1, .accumulate = 1,
                        .replicas = D, .replica = D - 1, .zero = z};
      for (int64_t i = 0; i < st.num_blocks; i++) pol[i] = rec[st.first_block + i + 1];
      int64_t units[4096 + 3], n = remat_stage_units(cfg, &st, units);
      for (int64_t i = 0; i < n; i++) seen[units[i]]++;
      remat_memplan *mp;
      CHECK(remat_memplan_create_stage(&mp, cfg, B, T, &st, &err) == 0);
      CHECK(mp->bytes.comm <= whole.comm && mp->peak_bytes == mp->bytes.total);
      /* its gradient buffers: one per block up to two, and the big one
       * with the embedding or the head; at the top of the arena */
      size_t f = sizeof(float), k = remat_unit_shard(cfg, 1, D), e = remat_unit_shard(cfg, 0, D);
      size_t big = st.has_head ? (size_t)D * (e + remat_unit_shard(cfg, L + 1, D)) * f
                   : st.has_embedding ? (size_t)D * e * f
                                      : 0;
      size_t nbuf = st.num_blocks < 2 ? (size_t)st.num_blocks : 2;
      const remat_membuf *red = &mp->buf[REMAT_BUF_REDUCE];
      CHECK(red->bytes == nbuf * D * k * f + big && red->offset + red->bytes == mp->peak_bytes);
      if (plan.stages[s].memory_bytes != mp->peak_bytes - mp->bytes.comm + whole.comm)
        printf("P=%lld D=%lld ZeRO %d stage %lld: planner %zu, engine %zu (comm %zu, whole %zu)\n",
               (long long)P, (long long)D, z, (long long)s, plan.stages[s].memory_bytes,
               mp->peak_bytes, mp->bytes.comm, whole.comm);
      CHECK(plan.stages[s].memory_bytes == mp->peak_bytes - mp->bytes.comm + whole.comm);
      remat_memplan_destroy(mp);
      (*cases)++;
    }
    for (int64_t u = 0; u <= L + 2; u++) CHECK(seen[u] == 1);
    remat_plan_free(&plan);
    remat_plan_problem_free(&pb);
  }
}

/* The ZeRO paper's table (remat_state_bytes) against figures by hand, the
 * same ones tests/python/test_profile_bytes.py asks `remat state` for. */
static void state_table(void) {
  uint64_t n = 1000, parts[REMAT_STATE_PART_COUNT], got;
  remat_error err;
  struct {
    const char *prec, *opt;
    int zero;
    int64_t dp, tp;
    uint64_t want;
  } rows[] = {
      {"fp32", "adamw", 0, 1, 1, 16 * n},
      {"bf16", "adamw", 0, 1, 1, 16 * n},
      {"bf16", "adamw", 1, 4, 1, 4 * n + 3 * n},
      {"bf16", "adamw", 2, 4, 1, 2 * n + n / 2 + 3 * n},
      {"bf16", "adamw", 3, 4, 1, 4 * n},
      {"fp32", "sgd", 0, 1, 1, 8 * n},
      {"fp32", "adamw", 0, 1, 2, 8 * n},
      {"fp16", "sgd-momentum", 1, 8, 1, 4 * n + n},
      {"bf16", "none", 3, 3, 1, 667 + 667}, /* ceil(2000 / 3) twice */
      /* ceil(1000 / 7) = 143: ceil(4 * 143 / 3) twice, ceil(8 * 143 / 3) */
      {"fp32", "adamw", 3, 3, 7, 191 + 191 + 382},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int rc = remat_state_bytes(n, rows[i].prec, rows[i].opt, rows[i].zero, rows[i].dp,
                               rows[i].tp, parts, &got, &err);
    CHECKF(rc == 0 && got == rows[i].want && got == parts[0] + parts[1] + parts[2],
           "state %s %s ZeRO %d dp %lld tp %lld: %llu bytes (by hand %llu)", rows[i].prec,
           rows[i].opt, rows[i].zero, (long long)rows[i].dp, (long long)rows[i].tp,
           (unsigned long long)got, (unsigned long long)rows[i].want);
  }
  CHECK_ERR(remat_state_bytes(n, "int3", "adamw", 0, 1, 1, NULL, &got, &err), err, REMAT_EINVAL,
            "fp32, bf16, fp16");
  CHECK_ERR(remat_state_bytes(n, "fp32", "lion", 0, 1, 1, NULL, &got, &err), err, REMAT_EINVAL,
            "sgd-momentum");
  CHECK_ERR(remat_state_bytes(n, "fp32", "adamw", 4, 1, 1, NULL, &got, &err), err, REMAT_EINVAL,
            "ZeRO stage 4");
  CHECK_ERR(remat_state_bytes(n, "fp32", "adamw", 1, 0, 1, NULL, &got, &err), err, REMAT_EINVAL,
            "data parallelism");
  /* the engine's replicas follow the same rule for m and v (the optimizer
   * state), gradients and parameters */
  for (int z = 0; z <= 3; z++)
    CHECK(remat_zero_shards(z, REMAT_STATE_OPTIMIZER) == (z >= 1) &&
          remat_zero_shards(z, REMAT_STATE_GRADS) == (z >= 2) &&
          remat_zero_shards(z, REMAT_STATE_WEIGHTS) == (z >= 3));
}

int main(void) {
  state_table();
  const char *cfgs[] = {"4,64,4,256,64", "tiny", "gpt2-124m", "3,40,5,100,48"};
  int cases = 0;
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    remat_config cfg;
    remat_error err;
    CHECK(remat_config_parse(cfgs[c], &cfg, &err) == 0);
    units_cover(&cfg);
    uint8_t pol[64];
    remat_policy_first_n(pol, cfg.num_layers, cfg.num_layers / 2);
    for (int64_t D = 2; D <= 5; D++)
      for (int z = 0; z <= 3; z++) {
        regions(&cfg, 2, 16, D, z, NULL);
        regions(&cfg, 2, 16, D, z, pol);
        planner(&cfg, 2, 16, D, z, &cases);
        grid(&cfg, 2, 16, D, z, &cases);
      }
  }
  /* gpt2-124m on 4 replicas: the table's ratios, padding aside */
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("gpt2-124m", &cfg, &err) == 0);
  double psi = (double)remat_param_count(&cfg);
  for (int z = 0; z <= 3; z++) {
    remat_replica_bytes rb;
    CHECK(remat_replica_bytes_get(&cfg, 4, z, &rb, &err) == 0);
    double per = (double)(rb.params + rb.grads + 2 * rb.moment);
    double ideal[4] = {16 * psi, 8 * psi + 2 * psi, 4 * psi + 3 * psi, 4 * psi};
    uint64_t table;
    CHECK(remat_state_bytes(remat_param_count(&cfg), "fp32", "adamw", z, 4, 1, NULL, &table,
                            &err) == 0);
    printf("  gpt2-124m D=4 ZeRO %d: %.0f bytes of state, %.4f of the table\n", z, per,
           per / ideal[z]);
    CHECK(per >= ideal[z] && per < ideal[z] * 1.001);
    CHECK((double)table == ideal[z]); /* Psi = 124475904 is a multiple of 4 */
  }
  CHECK(remat_replica_bytes_get(&cfg, 4, 4, &(remat_replica_bytes){0}, &err) == REMAT_EINVAL);
  printf("%d planner cases\n", cases);
  return test_summary("test_replicas");
}
