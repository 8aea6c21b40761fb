/* test_memplan.c: the memory plan: regions and slot pieces tile the arena
 * exactly as the memory model's terms say, for the whole model and for
 * pipeline stages; sizes follow the layout tables; shapes and sizes parse or
 * fail cleanly. (The choice of blocks under a budget is the planner's:
 * remat_fewest_recompute, checked in test_memory_model.) */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "memory/layout.h"
#include "memory/memplan.h"
#include "test_util.h"

/* Regions tile the arena end to end; inside a slot, the pieces tile it too
 * and match the layer terms. */
static void check_layout(const remat_memplan *mp) {
  size_t at = 0;
  for (int i = 0; i < REMAT_BUF_COUNT; i++) {
    CHECK(mp->buf[i].offset == at && mp->buf[i].offset % REMAT_ALIGN == 0);
    at += mp->buf[i].bytes;
  }
  CHECK(at == mp->peak_bytes && mp->peak_bytes == mp->bytes.total);
  const remat_memory_model *mm = &mp->mm;
  size_t off = 0;
  if (mp->has_embedding) {
    CHECK(mp->inputs_offset == off);
    off += mm->tokens_bytes;
  }
  for (int64_t i = 0; i < mp->num_blocks; i++) {
    CHECK(mp->block_input_offset[i] == off);
    off += mm->residual_bytes;
    if (mp->policy[i] == REMAT_KEEP) {
      CHECK(mp->block_internal_offset[i] == off);
      off += mm->block_internal_bytes;
    } else if (mp->policy[i] == REMAT_MIDDLE) {
      CHECK(mp->block_internal_offset[i] == off);
      off += mm->block_stored_bytes;
    } else {
      CHECK(mp->block_internal_offset[i] == REMAT_NO_OFFSET);
    }
  }
  if (mp->has_head) {
    CHECK(mp->final_offset == off && mp->targets_offset == off + mm->residual_bytes);
    off += mm->residual_bytes + mm->tokens_bytes;
  }
  CHECK(off == mp->slot_bytes && off % REMAT_ALIGN == 0);
  CHECK(mp->buf[REMAT_BUF_SLOTS].bytes == (size_t)mp->inflight * mp->slot_bytes);
  /* the workspace holds a block's backward with the scratch, and the head */
  size_t work = mp->buf[REMAT_BUF_WORK].bytes;
  if (mp->num_blocks) CHECK(work >= mm->block_dgrad_bytes);
  if (mp->num_recomputed) CHECK(work >= mm->block_dgrad_bytes + mm->block_internal_bytes);
  if (mp->num_middle) CHECK(work >= mm->block_dgrad_bytes + mm->block_cheap_bytes);
  CHECK(mp->num_kept + mp->num_middle + mp->num_recomputed == mp->num_blocks);
  if (mp->has_head) CHECK(work >= mm->head_bytes + mm->logits_bytes);
}

/* Layer terms: a kept block stores its input plus exactly the internals. */
static void test_layer_terms(const remat_config *cfg) {
  remat_error err;
  remat_memory_model mm;
  CHECK(remat_memory_model_get(cfg, 4, 64, &mm, &err) == 0);
  const remat_layer_bytes *blk = &mm.layer[REMAT_LAYER_BLOCK];
  size_t BTC = 4 * 64 * 768;
  CHECK(blk->ckpt == BTC * 4);
  /* 15 (B,T,C) tensors, 4 (B,T) LayerNorm statistics, the attention's
   * (B,NH,T) log-sum-exp; no (B,NH,T,T) term */
  size_t want_internal = 4 * (15 * BTC + 4 * 4 * 64 + 4 * 12 * 64);
  CHECK(mm.block_internal_bytes >= want_internal &&
        mm.block_internal_bytes < want_internal + 12 * REMAT_ALIGN);
  /* at every T the internals and a backward's temporaries are linear in T:
   * the backward holds 10 (B,T,C) tensors and the attention's (B,NH,T) row
   * sums */
  for (int64_t T = 1; T <= 1024; T = T < 64 ? T + 21 : T * 2) {
    remat_memory_model mt;
    CHECK(remat_memory_model_get(cfg, 4, T, &mt, &err) == 0);
    size_t bt = 4 * (size_t)T, btc = bt * 768;
    size_t wi = 4 * (15 * btc + 4 * bt + 12 * bt), wd = 4 * (10 * btc + 12 * bt);
    CHECK(mt.block_internal_bytes >= wi && mt.block_internal_bytes < wi + 12 * REMAT_ALIGN);
    CHECK(mt.block_dgrad_bytes >= wd && mt.block_dgrad_bytes < wd + 6 * REMAT_ALIGN);
  }
  CHECK(blk->kept == blk->ckpt + mm.block_internal_bytes);
  CHECK(blk->scratch == blk->work + mm.block_internal_bytes);
  /* the middle policy: the layernorm and GELU outputs, 6 (B,T,C) tensors,
   * move from the slot to the scratch */
  CHECK(mm.block_cheap_bytes == 4 * 6 * BTC);
  CHECK(mm.block_stored_bytes + mm.block_cheap_bytes == mm.block_internal_bytes);
  CHECK(blk->mid == blk->ckpt + mm.block_stored_bytes);
  CHECK(blk->mid_scratch == blk->work + mm.block_cheap_bytes);
  CHECK(blk->state == 16 * remat_block_param_count(cfg));
  CHECK(mm.layer[REMAT_LAYER_HEAD].work == mm.head_bytes + mm.logits_bytes);
  CHECK(mm.logits_bytes == 4 * 64 * 50304 * 4);

}

/* Every policy count: the regions tile the arena; the slot shrinks by one
 * block's internals per recomputed block. */
static void test_recompute_counts(const remat_config *cfg) {
  remat_error err;
  uint8_t pol[12];
  size_t prev = 0;
  for (int n = 0; n <= 12; n++) {
    remat_policy_first_n(pol, 12, n);
    remat_memplan *mp;
    CHECK(remat_memplan_create(&mp, cfg, 4, 64, pol, &err) == 0);
    check_layout(mp);
    CHECK(mp->num_recomputed == n && mp->num_kept == 12 - n);
    /* all persistent state is in the arena; one micro-batch per step needs
     * no tied gradient apart */
    CHECK(mp->persistent_bytes == 4 * remat_param_count(cfg) * 4 &&
          mp->buf[REMAT_BUF_TIED_GRAD].bytes == 0);
    /* accumulating, the head's tied gradient is summed apart */
    remat_stage acc = remat_stage_whole(cfg, pol);
    acc.accumulate = 1;
    remat_memplan *mpa;
    CHECK(remat_memplan_create_stage(&mpa, cfg, 4, 64, &acc, &err) == 0);
    CHECK(mpa->persistent_bytes == mp->persistent_bytes + mp->mm.tied_grad_bytes &&
          mpa->buf[REMAT_BUF_TIED_GRAD].bytes == mp->mm.tied_grad_bytes);
    remat_memplan_destroy(mpa);
    if (n > 1) CHECK(mp->peak_bytes == prev - mp->mm.block_internal_bytes);
    prev = mp->peak_bytes;
    remat_memplan_destroy(mp);
  }

}

/* Middle blocks: the slot shrinks by the cheap internals per block, and
 * the workspace holds them once. */
static void test_middle_counts(const remat_config *cfg) {
  remat_error err;
  uint8_t pol[12];
  for (int n = 0; n <= 12; n++) {
    for (int l = 0; l < 12; l++) pol[l] = l < n ? REMAT_MIDDLE : REMAT_KEEP;
    remat_memplan *mp;
    CHECK(remat_memplan_create(&mp, cfg, 4, 64, pol, &err) == 0);
    check_layout(mp);
    CHECK(mp->num_middle == n && mp->num_kept == 12 - n && mp->num_recomputed == 0);
    remat_memplan_destroy(mp);
  }

}

/* Stages of a pipeline: any slice, any policy, several in flight; and a
 * stage beyond the model is refused. */
static void test_stages(const remat_config *cfg) {
  remat_error err;
  uint8_t pol[12];
  remat_memory_model mm;
  CHECK(remat_memory_model_get(cfg, 4, 64, &mm, &err) == 0);
  for (int64_t first = 0; first <= 12; first += 3)
    for (int64_t nb = 0; first + nb <= 12; nb += 2)
      for (int64_t n = 1; n <= 3; n++)
        for (int ends = 0; ends < 4; ends++) {
          remat_stage st = {.first_block = first, .num_blocks = nb, .policy = pol,
                            .inflight = n, .has_embedding = ends & 1, .has_head = ends >> 1};
          for (int64_t i = 0; i < nb; i++) pol[i] = (uint8_t)((i * 7 + n + ends) % 3);
          remat_memplan *mp;
          int rc = remat_memplan_create_stage(&mp, cfg, 2, 32, &st, &err);
          if (nb == 0 && ends == 0) {
            CHECK(rc == REMAT_EINVAL);
            continue;
          }
          CHECK(rc == 0);
          check_layout(mp);
          remat_memplan_destroy(mp);
        }
  remat_stage bad = {.first_block = 10, .num_blocks = 3, .inflight = 1};
  remat_stage_bytes sb;
  CHECK(remat_stage_bytes_get(cfg, &mm, &bad, &sb, &err) == REMAT_EINVAL);

}

/* zbv's head chunk beside the embedding's (remat_stage.tied_borrowed):
 * holds the head's joint state in place of its copy of the tied matrix,
 * its gradient and moments (in bf16 it keeps its bf16 copy), and lays out
 * a tied-gradient region; inert with one micro-batch, replicas or the
 * embedding. */
static void test_tied_borrowed(const remat_config *cfg) {
  remat_error err;
  remat_memory_model mm;
  CHECK(remat_memory_model_get(cfg, 2, 32, &mm, &err) == 0);
  remat_stage alone = {.first_block = 10, .num_blocks = 2, .inflight = 2, .has_head = 1,
                       .accumulate = 1};
  remat_stage lent = alone;
  lent.tied_borrowed = 1;
  CHECK(remat__stage_tied_borrowed(cfg, &lent) && !remat__stage_tied_borrowed(cfg, &alone));
  remat_stage_bytes a, b;
  CHECK(remat_stage_bytes_get(cfg, &mm, &alone, &a, &err) == 0);
  CHECK(remat_stage_bytes_get(cfg, &mm, &lent, &b, &err) == 0);
  CHECK(a.state - b.state == mm.layer[REMAT_LAYER_HEAD].state - mm.head_joint_state);
  CHECK(a.activations == b.activations && a.workspace == b.workspace);
  remat_memplan *mp;
  CHECK(remat_memplan_create_stage(&mp, cfg, 2, 32, &lent, &err) == 0);
  check_layout(mp);
  CHECK(remat_memplan_buf(mp, REMAT_BUF_TIED_GRAD).bytes == mm.tied_grad_bytes);
  CHECK(mp->peak_bytes == b.total);
  if (cfg->precision == REMAT_PRECISION_BF16) /* the bf16 copy stays */
    CHECK(mm.head_joint_state >= mm.tied_grad_bytes + mm.head_bf16_bytes &&
          mm.head_bf16_bytes > 0 &&
          remat_memplan_buf(mp, REMAT_BUF_PARAMS_BF16).bytes ==
              2 * mm.block_bf16_bytes + mm.head_bf16_bytes);
  remat_memplan_destroy(mp);
  remat_stage inert[3] = {lent, lent, lent};
  inert[0].accumulate = 0;
  inert[1].replicas = 2;
  inert[2].has_embedding = 1;
  remat_config tp = *cfg;
  tp.tensor_parallel = 2;
  for (int i = 0; i < 3; i++) CHECK(!remat__stage_tied_borrowed(cfg, &inert[i]));
  /* a tensor rank's head reads its rank's rows of the embedding's matrix */
  CHECK(remat__stage_tied_borrowed(&tp, &lent));
}

/* Bad shapes and sizes fail with a message, never a crash. */
static void test_bad_shapes(void) {
  remat_error err;
  remat_config cfg;
  const char *bad_cfg[] = {"", "nope", "4,128,3,256,64", "0,128,4,256,64", "4,128,4",
                           "4,128,4,256,64,1", "4,-128,4,256,64", "4,x,4,256,64",
                           "99999999999,1,1,2,2"};
  for (size_t i = 0; i < sizeof bad_cfg / sizeof bad_cfg[0]; i++) {
    err.msg[0] = 0;
    CHECK(remat_config_parse(bad_cfg[i], &cfg, &err) < 0);
    CHECK(err.msg[0] != 0);
  }
  CHECK(remat_config_parse("4,128,4,256,64", &cfg, &err) == 0 && cfg.num_heads == 4);
  remat_memplan *mp;
  CHECK(remat_memplan_create(&mp, &cfg, 4, 65, NULL, &err) == REMAT_ESHAPE);
  CHECK(remat_memplan_create(&mp, &cfg, 0, 64, NULL, &err) == REMAT_EINVAL);

}

static void test_sizes(void) {
  remat_error err;
  size_t s;
  CHECK(remat_parse_size("1.5GiB", &s, &err) == 0 && s == 1610612736);
  CHECK(remat_parse_size("800MB", &s, &err) == 0 && s == 800000000);
  CHECK(remat_parse_size("20e9", &s, &err) == 0 && s == 20000000000u);
  CHECK(remat_parse_size("4096", &s, &err) == 0 && s == 4096);
  CHECK(remat_parse_size("2 kib", &s, &err) == 0 && s == 2048);
  const char *bad_size[] = {"", "abc", "-1GB", "1.5XB", "nan", "inf", "1e400", "GB"};
  for (size_t i = 0; i < sizeof bad_size / sizeof bad_size[0]; i++)
    CHECK(remat_parse_size(bad_size[i], &s, &err) < 0);
}

int main(void) {
  remat_error err;
  remat_config cfg;
  CHECK(remat_config_parse("gpt2-124m", &cfg, &err) == 0);
  CHECK(cfg.padded_vocab_size == 50304 && cfg.num_layers == 12 && cfg.channels == 768);
  CHECK(remat_param_count(&cfg) == 124475904); /* llm.c's count for padded GPT-2 small */
  test_layer_terms(&cfg);
  test_recompute_counts(&cfg);
  test_middle_counts(&cfg);
  test_stages(&cfg);
  test_tied_borrowed(&cfg);
  remat_config bf = cfg;
  bf.precision = REMAT_PRECISION_BF16;
  test_tied_borrowed(&bf);
  test_bad_shapes();
  test_sizes();
  return test_summary("memplan");
}
