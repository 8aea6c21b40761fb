/* test_family.c: the families' descriptions (config/family.h) and what
 * derives from them: parameter counts against the published sizes, the
 * units covering every parameter once, the stage shares, the memory
 * model's block terms against hand counts, Llama shape strings. */
#include <stdlib.h>
#include <string.h>

#include "config/family.h"
#include "memory/layout.h"
#include "test_util.h"

static remat_config parse(const char *name) {
  remat_config c;
  remat_error err;
  if (remat_config_parse(name, &c, &err)) {
    fprintf(stderr, "parse %s: %s\n", name, err.msg);
    exit(1);
  }
  return c;
}

/* Every parameter in exactly one unit (the tied copy, unit L + 2, apart). */
static void units_cover(const char *name) {
  remat_config c = parse(name);
  int64_t L = c.num_layers;
  size_t sum = 0;
  for (int64_t u = 0; u <= L + 1; u++) sum += remat_unit_floats(&c, u);
  CHECKF(sum == remat_param_count(&c), "%s: units 0..L+1 hold %zu of %zu parameters", name, sum,
         remat_param_count(&c));
  size_t tied = remat_unit_floats(&c, L + 2);
  CHECKF(remat__tied(&c) ? tied == (size_t)c.padded_vocab_size * (size_t)c.channels : tied == 0,
         "%s: the head's tied copy is %zu floats", name, tied);
}

/* Two stages of a model: their shares add up to the whole. */
static void stages_add_up(const char *name) {
  remat_config c = parse(name);
  int64_t L = c.num_layers, k = L / 2;
  remat_stage a = {.first_block = 0, .num_blocks = k, .inflight = 1, .has_embedding = 1};
  remat_stage b = {.first_block = k, .num_blocks = L - k, .inflight = 1, .has_head = 1};
  size_t sa[REMAT_P_COUNT], sb[REMAT_P_COUNT], all[REMAT_P_COUNT], n = 0, want = 0;
  remat__stage_param_sizes(&c, &a, sa);
  remat__stage_param_sizes(&c, &b, sb);
  remat_param_sizes(&c, all);
  int h = remat__head_tensor(&c);
  for (int i = 0; i < REMAT_P_COUNT; i++) {
    n += sa[i] + sb[i];
    want += all[i];
  }
  /* a tied head holds its own copy of the embedding */
  if (remat__tied(&c)) want += all[h];
  CHECKF(n == want, "%s: two stages hold %zu floats, want %zu", name, n, want);
}

int main(void) {
  /* published parameter counts */
  struct {
    const char *name;
    size_t params;
  } known[] = {
      {"gpt2-124m", 124475904},      /* llm.c's, with the vocabulary padded to 50304 */
      {"llama2-7b", 6738415616},     /* Llama 2 7B */
      {"llama2-13b", 13015864320},   /* Llama 2 13B */
      {"llama3-8b", 8030261248},     /* Llama 3 8B */
      {"llama3-70b", 70553706496},   /* Llama 3 70B */
      {"tinyllama-1.1b", 1100048384} /* TinyLlama 1.1B */
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    remat_config c = parse(known[i].name);
    CHECKF(remat_param_count(&c) == known[i].params, "%s: %zu parameters, published %zu",
           known[i].name, remat_param_count(&c), known[i].params);
  }

  const char *names[] = {"tiny", "gpt2-124m", "llama-tiny", "llama3-8b", "llama:2,64,4,1,96,256,32,500000,1"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    units_cover(names[i]);
    stages_add_up(names[i]);
  }

  /* a shape's spec parses back to the same shape */
  const char *specs[] = {"gpt2-124m", "llama3-8b", "llama:3,96,6,2,256,300,48,500000,1", "llama-tiny"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    remat_config a = parse(specs[i]), b;
    char buf[128];
    remat_error e;
    remat_config_spec(&a, buf, sizeof buf);
    CHECKF(!remat_config_parse(buf, &b, &e) && !memcmp(&a, &b, sizeof a), "%s: spec %s",
           specs[i], buf);
  }

  /* shape strings */
  remat_config c = parse("llama:3,96,6,2,256,300,48,500000,1");
  CHECK(c.family == REMAT_FAMILY_LLAMA && c.num_layers == 3 && c.channels == 96 &&
        c.num_heads == 6 && c.kv_heads == 2 && c.ffn_hidden == 256 && c.vocab_size == 300 &&
        c.padded_vocab_size == 300 && c.max_seq_len == 48 && c.rope_theta == 500000.0 &&
        c.untied == 0 && c.norm_eps == 1e-5);
  c = parse("llama:3,96,6,2,256,300,48");
  CHECK(c.rope_theta == 10000.0 && c.untied == 1);
  remat_error err;
  CHECK_ERR(remat_config_parse("llama:2,64,4,3,96,256,32", &c, &err), err, REMAT_EINVAL, "divide");
  CHECK_ERR(remat_config_parse("llama:2,60,4,2,96,256,32", &c, &err), err, REMAT_EINVAL, "even");
  CHECK_ERR(remat_config_parse("llama:2,64,4,2,96", &c, &err), err, REMAT_EINVAL, "llama:L,C");
  CHECK_ERR(remat_config_parse("llama:2,64,4,2,96,256,32,x", &c, &err), err, REMAT_EINVAL, "llama:");

  /* the Llama block's memory terms, by hand: fp32, B=2, T=16 */
  c = parse("llama-tiny"); /* C 64, NH 4, NKV 2, H 176 */
  remat__kernel_ws ws = {0};
  ws.attention_stats = 2 * 4 * 16; /* one log-sum-exp per row and head */
  remat__layer_sizes ls;
  remat__layer_sizes_get(&ls, &c, 2, 16, &ws);
  size_t BT = 32, C = 64, KV = 32, H = 176;
  size_t stored = remat__align(BT * 4) + remat__align(BT * C * 4) + 2 * remat__align(BT * KV * 4) +
                  remat__align(2 * 4 * 16 * 4) + remat__align(BT * C * 4) + remat__align(BT * C * 4) +
                  remat__align(BT * 4) + 2 * remat__align(BT * H * 4);
  size_t cheap = 2 * remat__align(BT * C * 4) + remat__align(BT * H * 4);
  CHECKF(ls.stored == stored, "llama-tiny B2 T16: a middle block stores %zu bytes, by hand %zu",
         ls.stored, stored);
  CHECKF(ls.cheap == cheap, "llama-tiny B2 T16: the cheap terms are %zu bytes, by hand %zu",
         ls.cheap, cheap);

  /* GPT-2's model FLOPs unchanged; Llama's count its seven matrices */
  c = parse("llama3-8b");
  double blk = 2.0 * 4096 * 4096 + 2.0 * 1024 * 4096 + 3.0 * 14336 * 4096;
  double want = 6.0 * (32.0 * blk + 128256.0 * 4096) + 12.0 * 32 * 4096 * 2048;
  CHECK(remat_flops_per_token(&c, 2048) == want);
  c = parse("gpt2-124m");
  CHECK(remat_flops_per_token(&c, 1024) ==
        6.0 * (12.0 * 12.0 * 768 * 768 + 50257.0 * 768) + 12.0 * 12 * 768 * 1024);
  return test_summary("test_family");
}
