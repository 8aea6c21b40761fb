/* test_slots.c: recompute per micro-batch (remat_stage.full_slots), the
 * memory model's half. Over a seeded sweep of stages (blocks, policies,
 * slots in flight, deferred Ws, the embedding and/or the head, gradients
 * apart or not), against answers computed apart:
 *   - full_slots NULL, all 0, or 0 under policy full give today's bytes,
 *     the formula of remat/memory.h written out here, and its arena;
 *   - with full_slots, the activations are the sum over the n slots of a
 *     one-slot stage's of that slot's per-block policies (remat_stage_bytes_get
 *     at inflight 1), plus wdeferred W records of each block kept in any
 *     slot; the workspace is the largest of those one-slot stages'; the
 *     arena is that figure, its slots lie end to end with those bytes and
 *     policies, and slot 0 is the largest;
 *   - full_slots = n is policy full, byte for byte;
 *   - more than n is refused naming the block, by the formula and the plan;
 *   - the block list's "full@K:" parses, and is refused where it cannot be. */
#include <stdio.h>
#include <string.h>

#include "remat.h"
#include "test_util.h"

enum { MAXB = 6 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static size_t stored(const remat_layer_bytes *b, int p) {
  return p == REMAT_RECOMPUTE ? b->ckpt : p == REMAT_MIDDLE ? b->mid : b->kept;
}

/* The formula of remat/memory.h without per-slot recompute, written out:
 * n slots of the stage's policies and wdeferred records of its kept blocks. */
static size_t formula_activations(const remat_memory_model *mm, const remat_stage *st) {
  const remat_layer_bytes *b = &mm->layer[REMAT_LAYER_BLOCK];
  size_t slot = st->has_embedding ? mm->layer[REMAT_LAYER_EMBEDDING].kept : 0, kept = 0;
  for (int64_t i = 0; i < st->num_blocks; i++) {
    int p = st->policy ? st->policy[i] : REMAT_KEEP;
    slot += stored(b, p);
    kept += p == REMAT_KEEP;
  }
  if (st->has_head) slot += mm->layer[REMAT_LAYER_HEAD].kept;
  return (size_t)st->inflight * slot + (size_t)st->wdeferred * kept * mm->block_wrec_bytes;
}

/* Slot j's policies, as the contract says: full in the last full[i]
 * slots, the stage's policy in the others. */
static void slot_policy(const remat_stage *st, int64_t j, uint8_t *out) {
  for (int64_t i = 0; i < st->num_blocks; i++)
    out[i] = j >= st->inflight - st->full_slots[i] ? REMAT_RECOMPUTE : st->policy[i];
}

static int get(const remat_config *cfg, const remat_memory_model *mm, const remat_stage *st,
               remat_stage_bytes *out) {
  remat_error err;
  int rc = remat_stage_bytes_get(cfg, mm, st, out, &err);
  if (rc) fprintf(stderr, "  %s\n", err.msg);
  return rc;
}

/* One stage with full_slots against the one-slot stages of its slots. */
static void check_stage(const remat_config *cfg, const remat_memory_model *mm,
                        const remat_stage *st, int *checked) {
  remat_stage_bytes with, sum = {0}, one;
  if (get(cfg, mm, st, &with)) {
    CHECK(0);
    return;
  }
  size_t slots = 0, work = 0, kept_any = 0;
  uint8_t pol[REMAT_MAX_LAYERS];
  for (int64_t j = 0; j < st->inflight; j++) {
    slot_policy(st, j, pol);
    remat_stage s1 = *st;
    s1.policy = pol;
    s1.full_slots = NULL;
    s1.inflight = 1;
    s1.wdeferred = 0;
    if (get(cfg, mm, &s1, &one)) {
      CHECK(0);
      return;
    }
    CHECK(one.state == with.state);
    slots += one.activations;
    if (one.workspace > work) work = one.workspace;
  }
  slot_policy(st, 0, pol); /* kept in any slot: kept in slot 0, the last to be full */
  for (int64_t i = 0; i < st->num_blocks; i++) kept_any += pol[i] == REMAT_KEEP;
  sum.activations = slots + (size_t)st->wdeferred * kept_any * mm->block_wrec_bytes;
  CHECK(with.activations == sum.activations);
  CHECK(with.workspace == work);
  CHECK(with.total == with.state + with.activations + with.workspace + with.comm);

  /* the arena: that figure, the slots end to end with their own bytes */
  remat_memplan *mp;
  remat_error err;
  if (remat_memplan_create_stage(&mp, cfg, mm->B, mm->T, st, &err)) {
    fprintf(stderr, "  %s\n", err.msg);
    CHECK(0);
    return;
  }
  CHECK(remat_memplan_peak_bytes(mp) == with.total);
  remat_membuf region = remat_memplan_buf(mp, REMAT_BUF_SLOTS);
  CHECK(region.bytes == slots);
  CHECK(remat_memplan_buf(mp, REMAT_BUF_WREC).bytes ==
        (size_t)st->wdeferred * kept_any * mm->block_wrec_bytes);
  size_t at = region.offset;
  for (int64_t j = 0; j < st->inflight; j++) {
    remat_membuf s = remat_memplan_slot(mp, j);
    slot_policy(st, j, pol);
    remat_stage s1 = *st;
    s1.policy = pol;
    s1.full_slots = NULL;
    s1.inflight = 1;
    s1.wdeferred = 0;
    get(cfg, mm, &s1, &one);
    CHECK(s.offset == at && s.bytes == one.activations);
    CHECK(s.bytes <= remat_memplan_slot_bytes(mp));
    CHECK(memcmp(remat_memplan_slot_policy(mp, j), pol, (size_t)st->num_blocks) == 0);
    at += s.bytes;
  }
  CHECK(remat_memplan_slot(mp, 0).bytes == remat_memplan_slot_bytes(mp));
  CHECK(at == region.offset + region.bytes);
  remat_memplan_destroy(mp);
  (*checked)++;
}

/* A random stage of cfg; full (num_blocks) filled in too. */
static remat_stage random_stage(const remat_config *cfg, uint8_t *policy, uint8_t *full) {
  int64_t L = cfg->num_layers;
  remat_stage st = {0};
  st.num_blocks = 1 + (int64_t)(next() % MAXB);
  if (st.num_blocks > L) st.num_blocks = L;
  st.first_block = (int64_t)(next() % (uint64_t)(L - st.num_blocks + 1));
  st.inflight = 1 + (int64_t)(next() % 5);
  st.wdeferred = next() % 3 ? 0 : (int64_t)(next() % 4);
  st.has_embedding = st.first_block == 0 && next() % 2;
  st.has_head = st.first_block + st.num_blocks == L && next() % 2;
  st.accumulate = (int)(next() % 2);
  st.policy = policy;
  st.full_slots = full;
  for (int64_t i = 0; i < st.num_blocks; i++) {
    uint64_t r = next() % 6;
    policy[i] = r < 3 ? REMAT_KEEP : r < 5 ? REMAT_MIDDLE : REMAT_RECOMPUTE;
    full[i] = (uint8_t)(next() % (uint64_t)(st.inflight + 1));
  }
  return st;
}

static void sweep(const remat_config *cfg, int64_t B, int64_t T) {
  remat_memory_model mm;
  remat_error err;
  CHECK(remat_memory_model_get(cfg, B, T, &mm, &err) == 0);
  int checked = 0, same = 0, partial = 0;
  for (int k = 0; k < 300; k++) {
    uint8_t policy[MAXB], full[MAXB], zero[MAXB] = {0}, as_full[MAXB];
    remat_stage st = random_stage(cfg, policy, full);
    /* NULL = all 0 = today's formula, and its arena */
    remat_stage none = st, zeros = st;
    none.full_slots = NULL;
    zeros.full_slots = zero;
    remat_stage_bytes a, b;
    if (get(cfg, &mm, &none, &a) || get(cfg, &mm, &zeros, &b)) {
      CHECK(0);
      continue;
    }
    int ok = memcmp(&a, &b, sizeof a) == 0 && a.activations == formula_activations(&mm, &none);
    remat_memplan *mp;
    if (remat_memplan_create_stage(&mp, cfg, B, T, &zeros, &err) == 0) {
      ok = ok && remat_memplan_peak_bytes(mp) == a.total &&
           remat_memplan_buf(mp, REMAT_BUF_SLOTS).bytes ==
               (size_t)st.inflight * remat_memplan_slot_bytes(mp);
      remat_memplan_destroy(mp);
    } else {
      ok = 0;
    }
    CHECK(ok);
    same += ok;
    /* full_slots = n is policy full */
    for (int64_t i = 0; i < st.num_blocks; i++)
      as_full[i] = full[i] == st.inflight ? REMAT_RECOMPUTE : policy[i];
    remat_stage norm = st;
    uint8_t nf[MAXB];
    for (int64_t i = 0; i < st.num_blocks; i++)
      nf[i] = full[i] == st.inflight || policy[i] == REMAT_RECOMPUTE ? 0 : full[i];
    norm.policy = as_full;
    norm.full_slots = nf;
    if (get(cfg, &mm, &st, &a) == 0 && get(cfg, &mm, &norm, &b) == 0)
      CHECK(memcmp(&a, &b, sizeof a) == 0);
    for (int64_t i = 0; i < st.num_blocks; i++) partial += nf[i] > 0;
    check_stage(cfg, &mm, &st, &checked);
  }
  CHECKF(same == 300 && checked == 300 && partial > 100,
         "%s B=%lld T=%lld: 300 stages; without full_slots today's bytes (%d), with them the "
         "sum of their slots' one-slot stages, arena and slots alike (%d; %d blocks in part)",
         remat_precision_name((int)cfg->precision), (long long)B, (long long)T, same, checked,
         partial);
}

/* A stage with blocks kept, middle and full, n = 3, W deferred: the
 * activations by hand, and strictly between all kept and all full. */
static void by_hand(const remat_config *cfg) {
  remat_memory_model mm;
  remat_error err;
  CHECK(remat_memory_model_get(cfg, 2, 16, &mm, &err) == 0);
  const remat_layer_bytes *b = &mm.layer[REMAT_LAYER_BLOCK];
  uint8_t policy[3] = {REMAT_KEEP, REMAT_MIDDLE, REMAT_KEEP}, full[3] = {1, 2, 0};
  remat_stage st = {.first_block = 1, .num_blocks = 3, .policy = policy, .full_slots = full,
                    .inflight = 3, .wdeferred = 2, .accumulate = 1};
  remat_stage_bytes got, kept, all;
  CHECK(get(cfg, &mm, &st, &got) == 0);
  size_t want = 3 * (b->kept + b->mid + b->kept) - 1 * (b->kept - b->ckpt) -
                2 * (b->mid - b->ckpt) + 2 * 2 * mm.block_wrec_bytes;
  size_t work = b->scratch + b->grad; /* full in some slot: the recompute scratch */
  CHECKF(got.activations == want && got.workspace == mm.stage_bytes + mm.boundary_bytes + work,
         "blocks keep/middle/keep with full in 1, 2, 0 of 3 slots: activations %zu (want %zu), "
         "the recompute scratch in the workspace", got.activations, want);
  remat_stage k = st, f = st;
  k.full_slots = NULL;
  uint8_t three[3] = {3, 3, 3};
  f.full_slots = three;
  CHECK(get(cfg, &mm, &k, &kept) == 0 && get(cfg, &mm, &f, &all) == 0);
  CHECK(all.activations == 3 * 3 * b->ckpt); /* no block kept anywhere: no W record */
  CHECKF(all.activations < got.activations && got.activations < kept.activations,
         "per slot lies strictly between its policies (%zu) and all full (%zu): %zu",
         kept.activations, all.activations, got.activations);
}

static void refusals(const remat_config *cfg) {
  remat_memory_model mm;
  remat_error err;
  CHECK(remat_memory_model_get(cfg, 2, 16, &mm, &err) == 0);
  uint8_t full[2] = {0, 3};
  remat_stage st = {.first_block = 2, .num_blocks = 2, .full_slots = full, .inflight = 2};
  remat_stage_bytes out;
  int rc = remat_stage_bytes_get(cfg, &mm, &st, &out, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "block 3");
  CHECKF(rc == REMAT_EINVAL && strstr(err.msg, "3 slots") &&
             strstr(err.msg, "2 micro-batches in flight"),
         "full_slots above the in-flight count refused: %s", err.msg);
  remat_memplan *mp;
  rc = remat_memplan_create_stage(&mp, cfg, 2, 16, &st, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "block 3");
  full[1] = 2;
  CHECK(remat_stage_bytes_get(cfg, &mm, &st, &out, &err) == 0);
}

static void parsing(void) {
  uint8_t pol[12], full[12];
  remat_error err;
  CHECK(remat_policy_parse_list_slots("middle:4-5,full@2:0-1,7,full:9", pol, full, 12, &err) ==
        0);
  const uint8_t wp[12] = {0, 0, 0, 0, 2, 2, 0, 0, 0, 1, 0, 0};
  const uint8_t wf[12] = {2, 2, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0};
  CHECKF(memcmp(pol, wp, 12) == 0 && memcmp(full, wf, 12) == 0,
         "middle:4-5,full@2:0-1,7,full:9: full@2 on 0, 1 and 7 (policy keep), middle 4-5, full 9");
  CHECK(remat_policy_parse_list_slots("0-3", pol, full, 12, &err) == 0);
  CHECK(pol[3] == REMAT_RECOMPUTE && full[3] == 0 && pol[4] == REMAT_KEEP);
  const char *bad[] = {"full@0:1", "full@256:1", "full@:1", "full@2", "full@2:",
                       "full@1:1,full@2:1", "1,full@1:1", "full@1:12"};
  int refused = 0;
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    int rc = remat_policy_parse_list_slots(bad[k], pol, full, 12, &err);
    refused += rc == REMAT_EINVAL && err.msg[0];
    if (rc != REMAT_EINVAL) fprintf(stderr, "  '%s' was taken\n", bad[k]);
  }
  CHECKF(refused == 8, "%d of 8 bad lists refused (K 0 or 256, no K, no list, a block twice, "
         "a block past the model)", refused);
  int rc = remat_policy_parse_list("full@1:0", pol, 12, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "full@K");
  CHECK(remat_policy_parse_list_slots("full@1:0", pol, NULL, 12, &err) == REMAT_EINVAL);
}

int main(void) {
  const char *shapes[] = {"8,64,4,97,32", "llama:8,64,4,2,160,97,32"};
  for (int k = 0; k < 2; k++) {
    remat_config cfg;
    remat_error err;
    CHECK(remat_config_parse(shapes[k], &cfg, &err) == 0);
    cfg.precision = REMAT_PRECISION_FP32;
    sweep(&cfg, 2, 16);
    by_hand(&cfg);
    refusals(&cfg);
  }
  parsing();
  return test_summary("slots");
}
