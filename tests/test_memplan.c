/* test_memplan.c: the memory plan: no two buffers alive in a common phase
 * share a byte; sizes follow the layout tables; the fewest-recompute search
 * agrees with trying every count; shapes and sizes parse or fail cleanly. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "memory/layout.h"
#include "test_util.h"

static void check_no_overlap(const remat_memplan *mp) {
  for (int i = 0; i < REMAT_BUF_COUNT; i++) {
    const remat_membuf *a = &mp->buf[i];
    CHECK(a->offset % REMAT_ALIGN == 0);
    CHECK(a->offset + a->bytes <= mp->peak_bytes);
    for (int j = i + 1; j < REMAT_BUF_COUNT; j++) {
      const remat_membuf *b = &mp->buf[j];
      if (!a->bytes || !b->bytes || !(a->phases & b->phases)) continue;
      int disjoint = a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset;
      if (!disjoint) printf("buffers %d and %d overlap\n", i, j);
      CHECK(disjoint);
    }
  }
}

int main(void) {
  remat_error err;
  remat_config cfg;
  CHECK(remat_config_parse("gpt2-124m", &cfg, &err) == 0);
  CHECK(cfg.padded_vocab_size == 50304 && cfg.num_layers == 12 && cfg.channels == 768);
  CHECK(remat_param_count(&cfg) == 124475904); /* llm.c's count for padded GPT-2 small */

  /* Block sizes: a kept block stores its input plus exactly the internals. */
  remat_block_bytes bb;
  remat_block_bytes_get(&cfg, 4, 64, &bb);
  size_t BTC = 4 * 64 * 768;
  CHECK(bb.recompute_bytes == BTC * 4);
  size_t want_internal = 4 * (15 * BTC + 4 * 4 * 64 + 4 * 12 * 64 * 64);
  CHECK(bb.scratch_bytes >= want_internal && bb.scratch_bytes < want_internal + 12 * REMAT_ALIGN);
  CHECK(bb.kept_bytes == bb.recompute_bytes + bb.scratch_bytes);
  CHECK(bb.state_bytes == 16 * remat_block_param_count(&cfg));

  /* Every policy count: no overlap; the kept region shrinks by one block's
   * internals per recomputed block. */
  uint8_t pol[12];
  size_t prev = 0;
  for (int n = 0; n <= 12; n++) {
    remat_policy_first_n(pol, 12, n);
    remat_memplan mp;
    CHECK(remat_memplan_build(&mp, &cfg, 4, 64, pol, &err) == 0);
    check_no_overlap(&mp);
    CHECK(mp.num_recomputed == n && mp.num_kept == 12 - n);
    CHECK(mp.buf[REMAT_BUF_KEPT].bytes == (size_t)(12 - n) * mp.block_internal_bytes);
    CHECK((mp.buf[REMAT_BUF_SCRATCH].bytes != 0) == (n > 0));
    /* all persistent state is in the arena */
    CHECK(mp.persistent_bytes == 4 * remat__align(remat_param_count(&cfg) * 4));
    if (n > 1) CHECK(mp.peak_bytes <= prev);
    prev = mp.peak_bytes;
    remat_memplan_free(&mp);
  }

  /* Fewest recompute agrees with trying every count. */
  for (int trial = 0; trial < 40; trial++) {
    size_t lo, hi;
    remat_policy_first_n(pol, 12, 12);
    remat_memplan mp;
    remat_memplan_build(&mp, &cfg, 4, 64, pol, &err);
    lo = mp.peak_bytes;
    remat_memplan_free(&mp);
    remat_policy_first_n(pol, 12, 0);
    remat_memplan_build(&mp, &cfg, 4, 64, pol, &err);
    hi = mp.peak_bytes;
    remat_memplan_free(&mp);
    size_t budget = lo - 1000 + (hi - lo + 2000) / 40 * (size_t)trial;
    int64_t n;
    size_t need;
    int rc = remat_fewest_recompute(&cfg, 4, 64, budget, &n, &need, &err);
    int expect = -1;
    for (int k = 0; k <= 12 && expect < 0; k++) {
      remat_policy_first_n(pol, 12, k);
      remat_memplan_build(&mp, &cfg, 4, 64, pol, &err);
      if (mp.peak_bytes <= budget) expect = k;
      remat_memplan_free(&mp);
    }
    if (expect < 0) {
      CHECK(rc == REMAT_EINFEASIBLE);
      CHECK(need == lo);
      CHECK(strstr(err.msg, "too small") != NULL);
    } else {
      CHECK(rc == 0 && n == expect && need <= budget);
    }
  }

  /* Bad shapes and sizes fail with a message, never a crash. */
  const char *bad_cfg[] = {"", "nope", "4,128,3,256,64", "0,128,4,256,64", "4,128,4",
                           "4,128,4,256,64,1", "4,-128,4,256,64", "4,x,4,256,64",
                           "99999999999,1,1,2,2"};
  for (size_t i = 0; i < sizeof bad_cfg / sizeof bad_cfg[0]; i++) {
    err.msg[0] = 0;
    CHECK(remat_config_parse(bad_cfg[i], &cfg, &err) < 0);
    CHECK(err.msg[0] != 0);
  }
  CHECK(remat_config_parse("4,128,4,256,64", &cfg, &err) == 0 && cfg.num_heads == 4);
  remat_memplan mp;
  CHECK(remat_memplan_build(&mp, &cfg, 4, 65, NULL, &err) == REMAT_ESHAPE);
  CHECK(remat_memplan_build(&mp, &cfg, 0, 64, NULL, &err) == REMAT_EINVAL);

  size_t s;
  CHECK(remat_parse_size("1.5GiB", &s, &err) == 0 && s == 1610612736);
  CHECK(remat_parse_size("800MB", &s, &err) == 0 && s == 800000000);
  CHECK(remat_parse_size("20e9", &s, &err) == 0 && s == 20000000000u);
  CHECK(remat_parse_size("4096", &s, &err) == 0 && s == 4096);
  CHECK(remat_parse_size("2 kib", &s, &err) == 0 && s == 2048);
  const char *bad_size[] = {"", "abc", "-1GB", "1.5XB", "nan", "inf", "1e400", "GB"};
  for (size_t i = 0; i < sizeof bad_size / sizeof bad_size[0]; i++)
    CHECK(remat_parse_size(bad_size[i], &s, &err) < 0);
  return test_summary("memplan");
}
