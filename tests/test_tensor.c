/* test_tensor.c: tensor and sequence parallelism as planned (the config
 * describes one tensor rank's shard). Checks, each against figures written
 * out here from the shapes, not read back from the library:
 *   - the config's checks: the degree divides the heads, the MLP and the
 *     padded vocabulary; sequence parallelism needs a degree; T divides;
 *   - a rank's parameters: GPT-2's column- and row-parallel matrices and
 *     vocabulary split, the norms, positions and row-parallel biases whole;
 *     a Llama's key/value matrices whole where t does not divide its
 *     key/value heads;
 *   - a kept GPT-2 block's bytes a rank, exactly:
 *       s b h (R / sp + I / t) + 16 s b / sp + 4 a s b / t
 *     with R the residual-stream bytes per element (input and res2 in fp32,
 *     ln1 and ln2 out in the activations' precision), I the split internals'
 *     (qkv, atty, fch, fch_gelu), sp = t under sequence parallelism, else 1;
 *     and, in bf16, its difference from Korthikanti et al.'s formula is the
 *     one docs/plan.md explains term by term;
 *   - the FLOPs a token stay the whole model's;
 *   - the collectives' bytes a micro-batch, ring all-reduce and all-gather;
 *   - a planned problem's layer bytes are the memory model's a rank;
 *   - the layout search on N ranks: its fastest layout and its Pareto
 *     front are those of solving every layout, its bounds only skipping
 *     work, on several budgets and link rates. */
#include <math.h>

#include "memory/layout.h"
#include "products/sizes.h"
#include "test_util.h"

static remat_config shape(const char *spec, int64_t t, int sp, int precision) {
  remat_config c;
  remat_error err;
  if (remat_config_parse(spec, &c, &err)) {
    fprintf(stderr, "%s: %s\n", spec, err.msg);
    memset(&c, 0, sizeof c);
    return c;
  }
  c.tensor_parallel = t;
  c.sequence_parallel = sp;
  c.precision = precision;
  return c;
}

static void test_checks_of_config(void) {
  remat_error err;
  remat_config c = shape("2,128,4,512,64", 3, 0, REMAT_PRECISION_FP32);
  CHECK_ERR(remat_config_check(&c, &err), err, REMAT_EINVAL, "heads NH");
  c = shape("2,128,4,512,64", 8, 0, REMAT_PRECISION_FP32);
  CHECK_ERR(remat_config_check(&c, &err), err, REMAT_EINVAL, "divide");
  c = shape("2,128,4,512,64", 1, 1, REMAT_PRECISION_FP32);
  CHECK_ERR(remat_config_check(&c, &err), err, REMAT_EINVAL, "sequence parallelism");
  c = shape("2,128,4,512,64", -2, 0, REMAT_PRECISION_FP32);
  CHECK_ERR(remat_config_check(&c, &err), err, REMAT_ERANGE, "tensor-parallel");
  c = shape("2,128,4,512,64", 4, 1, REMAT_PRECISION_FP32);
  CHECKF(remat_config_check(&c, &err) == 0, "t=4 with sequence parallelism divides C=128 NH=4");
  remat_memory_model mm;
  CHECK_ERR(remat_memory_model_get(&c, 2, 62, &mm, &err), err, REMAT_ESHAPE, "multiple of 4");
  /* a Llama whose MLP width t does not divide */
  c = shape("llama:2,64,4,2,170,256,64", 4, 0, REMAT_PRECISION_FP32);
  CHECK_ERR(remat_config_check(&c, &err), err, REMAT_EINVAL, "MLP width");
}

static void test_parameters(void) {
  for (int64_t t = 1; t <= 4; t *= 2) {
    remat_config c = shape("3,128,4,512,64", t, 0, REMAT_PRECISION_FP32);
    size_t C = 128, L = 3, Vp = (size_t)c.padded_vocab_size, maxT = 64, T = (size_t)t;
    size_t block = 2 * C + (3 * C * C + 3 * C) / T + C * C / T + C + 2 * C +
                   (4 * C * C + 4 * C) / T + 4 * C * C / T + C;
    size_t want = Vp * C / T + maxT * C + L * block + 2 * C;
    CHECKF(remat_param_count(&c) == want, "GPT-2 t=%lld: a rank holds %zu parameters (%zu)",
           (long long)t, remat_param_count(&c), want);
  }
  /* llama:L,C,NH,NKV,H,V,T: 4 query heads of 16, 2 key/value heads */
  for (int64_t t = 2; t <= 4; t *= 2) {
    remat_config c = shape("llama:2,64,4,2,128,256,64", t, 0, REMAT_PRECISION_FP32);
    size_t C = 64, KV = 32, H = 128, V = (size_t)c.padded_vocab_size, T = (size_t)t;
    size_t kv = 2 % T ? KV : KV / T; /* 2 key/value heads: split by 2, whole by 4 */
    size_t block = C + C * C / T + 2 * kv * C + C * C / T + C + 2 * H * C / T + C * H / T;
    size_t want = V * C / T + 2 * block + C + V * C / T;
    CHECKF(remat_param_count(&c) == want, "Llama t=%lld: a rank holds %zu parameters (%zu)",
           (long long)t, remat_param_count(&c), want);
  }
}

/* A kept block's bytes by the formula in the header, B x T at C, NH. */
static double kept_formula(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t, int sp,
                           int bf16) {
  double s = (double)T, b = (double)B, h = (double)C, a = (double)NH;
  double R = bf16 ? 12 : 16, I = bf16 ? 24 : 48, spd = sp ? (double)t : 1;
  return s * b * h * (R / spd + I / (double)t) + 16 * s * b / spd + 4 * a * s * b / (double)t;
}

/* The memory model; in bf16 on a CPU without bf16 products, with the CPU
 * backend's fp32 kernel terms and no products' scratchpad (which only the
 * workspace holds: what a block keeps does not depend on it). */
static int model_bytes(const remat_config *c, int64_t B, int64_t T, remat_memory_model *mm,
                       remat_error *err) {
  if (c->precision != REMAT_PRECISION_BF16 ||
      remat_precision_available(REMAT_PRECISION_BF16, NULL))
    return remat_memory_model_get(c, B, T, mm, err);
  remat_config f = *c;
  f.precision = REMAT_PRECISION_FP32;
  remat__kernel_ws ws;
  int rc = remat__kernel_ws_get(&ws, &remat__cpu_sizes, &f, B, T, err);
  if (rc) return rc;
  ws.precision = REMAT_PRECISION_BF16;
  ws.product_scratch = ws.attention_work = 0;
  return remat__memory_model_get_ws(c, B, T, &ws, mm, err);
}

/* at B x T of spec (C channels, NH heads), t = 1, 2, 4, 8 (and up to max_t) */
static void test_kept_block(int precision, const char *spec, int64_t B, int64_t T, int64_t C,
                            int64_t NH, int64_t max_t) {
  int bf16 = precision == REMAT_PRECISION_BF16;
  for (int64_t t = 1; t <= max_t; t *= 2)
    for (int sp = 0; sp <= (t > 1); sp++) {
      remat_config c = shape(spec, t, sp, precision);
      remat_memory_model mm;
      remat_error err;
      int rc = model_bytes(&c, B, T, &mm, &err);
      CHECK(rc == 0);
      if (rc) {
        fprintf(stderr, "  %s\n", err.msg);
        continue;
      }
      double want = kept_formula(B, T, C, NH, t, sp, bf16);
      CHECKF((double)mm.layer[REMAT_LAYER_BLOCK].kept == want,
             "%s %s t=%lld%s: a kept block stores %zu bytes a rank (formula %.0f)", spec,
             remat_precision_name(precision), (long long)t, sp ? " sp" : "",
             mm.layer[REMAT_LAYER_BLOCK].kept, want);
      /* a middle block: without ln1's, ln2's and GELU's outputs */
      double rsp = sp ? (double)t : 1, sbh = (double)(B * T * C);
      double mid = want - sbh * ((bf16 ? 4 : 8) / rsp + (bf16 ? 8 : 16) / (double)t);
      CHECK((double)mm.layer[REMAT_LAYER_BLOCK].mid == mid);
      /* a recomputed block keeps its input: the residual stream's tokens */
      CHECK(mm.layer[REMAT_LAYER_BLOCK].ckpt == (size_t)(B * T * C * 4 / (sp ? t : 1)));
      if (!bf16) continue;
      /* Korthikanti et al.: 10 + 24/t (34/t) s b h + 5 a s^2 b / t. remat
       * stores no dropout masks (-2 s b h / sp), the residual stream in
       * fp32 (+4 s b h / sp), the layernorms' statistics (+16 s b / sp), and
       * the attention's log-sum-exp (4 a s b / t), not its s^2 scores. */
      double s = (double)T, b = (double)B, h = (double)C, a = (double)NH, spd = sp ? (double)t : 1;
      double k = remat_korthikanti_layer_bytes(&c, B, T);
      double explained = k - 2 * s * b * h / spd + 4 * s * b * h / spd + 16 * s * b / spd +
                         4 * a * s * b / (double)t - 5 * a * s * s * b / (double)t;
      CHECKF(fabs(explained - want) < 0.5,
             "bf16 t=%lld%s: Korthikanti's %.0f, adjusted term by term, is remat's %.0f",
             (long long)t, sp ? " sp" : "", k, want);
    }
}

static void test_flops_and_comm(void) {
  remat_config whole = shape("gpt2-350m", 0, 0, REMAT_PRECISION_FP32);
  remat_config half = shape("gpt2-350m", 2, 1, REMAT_PRECISION_FP32);
  CHECK(remat_flops_per_token(&whole, 1024) == remat_flops_per_token(&half, 1024));
  remat_tensor_comm c;
  remat_tensor_comm_get(&whole, 8, 1024, &c);
  CHECK(c.block_fwd == 0 && c.block_bwd == 0 && c.head_fwd == 0);
  /* t=4 without sequence parallelism: two ring all-reduces of the fp32
   * B T C sum a pass, each 2 (t-1)/t of it sent */
  remat_config four = shape("gpt2-350m", 4, 0, REMAT_PRECISION_FP32);
  remat_tensor_comm_get(&four, 8, 1024, &c);
  double BTC4 = 8.0 * 1024 * 1024 * 4;
  CHECKF(c.block_fwd == 2 * 2 * 0.75 * BTC4 && c.block_bwd == c.block_fwd,
         "t=4: a block sends %.0f bytes forward, %.0f backward", c.block_fwd, c.block_bwd);
  /* with it: the forward gathers the bf16 layernorm outputs twice and
   * scatters the fp32 sums twice; the backward also gathers the gradients */
  four.sequence_parallel = 1;
  four.precision = REMAT_PRECISION_BF16;
  remat_tensor_comm_get(&four, 8, 1024, &c);
  CHECKF(c.block_fwd == 2 * 0.75 * (BTC4 / 2 + BTC4) && c.block_bwd == 2 * 0.75 * (2 * BTC4 + BTC4 / 2),
         "t=4 sp bf16: a block sends %.0f bytes forward, %.0f backward", c.block_fwd, c.block_bwd);
}

static void test_problem(void) {
  remat_config c = shape("4,256,8,512,128", 2, 1, REMAT_PRECISION_FP32);
  remat_plan_problem pb;
  remat_error err;
  int rc = remat_plan_problem_from_replicas(&pb, &c, 4, 128, 2, 4, 1, 0, (size_t)1 << 30, &err);
  CHECK(rc == 0);
  if (rc) {
    fprintf(stderr, "  %s\n", err.msg);
    return;
  }
  remat_memory_model mm;
  CHECK(remat_memory_model_get(&c, 4, 128, &mm, &err) == 0);
  CHECKF(pb.num_groups >= 2 && pb.groups[1].act_bytes == mm.layer[REMAT_LAYER_BLOCK].kept &&
             pb.job.tensor_parallel == 2 && pb.job.sequence_parallel == 1,
         "a tensor rank's problem: a block keeps the memory model's %zu bytes",
         mm.layer[REMAT_LAYER_BLOCK].kept);
  remat_plan_problem_free(&pb);
}

/* The exports say when the tensor size does not divide a Llama's key/value
 * heads, which the frameworks split and remat holds whole. */
static void test_exports(void) {
  for (int64_t t = 2; t <= 4; t *= 2) {
    /* llama:L,C,NH,NKV,H,V,T: 2 key/value heads */
    remat_config c = shape("llama:4,64,4,2,128,256,64", t, 0, REMAT_PRECISION_FP32);
    remat_plan_problem pb;
    remat_plan plan;
    remat_error err;
    int rc = remat_plan_problem_from_model(&pb, &c, 2, 64, 2, 4, (size_t)1 << 30, &err);
    pb.min_blocks = 1;
    CHECK(rc == 0 && remat_plan_solve(&pb, &plan, &err) == 0);
    for (int f = 0; f < 2; f++) {
      char *text = NULL;
      int fmt = f ? REMAT_PLAN_FORMAT_MEGATRON : REMAT_PLAN_FORMAT_COLOSSALAI;
      CHECK(remat_plan_format(&pb, &plan, fmt, &text, &err) == 0);
      int says = text && strstr(text, "key/value heads") != NULL;
      int sized = text && (strstr(text, f ? "--tensor-model-parallel-size" : "tp_size=") != NULL);
      CHECKF(says == (t == 4) && sized, "%s, t=%lld over 2 key/value heads: %s", f ? "Megatron" :
             "ColossalAI", (long long)t, says ? "says it cannot split them" : "splits them");
      remat_plan_text_free(text);
    }
    remat_plan_free(&plan);
    remat_plan_problem_free(&pb);
  }
}

/* The Pareto rows' (time, memory), in the search's order. */
static int64_t front(const remat_layout_search *s, double *time, size_t *mem) {
  int64_t n = 0;
  for (int64_t i = 0; i < s->n; i++)
    if (s->rows[i].pareto) {
      time[n] = s->rows[i].time;
      mem[n++] = s->rows[i].memory;
    }
  return n;
}

static void test_layouts(size_t budget, double link_tp, double link_dp) {
  remat_layout_query q = {.cfg = shape("4,128,4,512,128", 0, 0, REMAT_PRECISION_FP32),
                          .ranks = 4, .global_batch = 8, .seq_len = 128, .memory = budget,
                          .rank_rate = 100e3, .link_tp = link_tp, .link_pp = 25e9,
                          .link_dp = link_dp, .time_limit = 0};
  q.cfg.head_chunk = -1;
  remat_layout_search fast, all;
  remat_error err;
  int rc = remat_layout_search_run(&q, &fast, &err);
  q.exhaustive = 1;
  int rc2 = remat_layout_search_run(&q, &all, &err);
  CHECK(rc == 0 && rc2 == 0);
  if (rc || rc2) {
    fprintf(stderr, "  %s\n", err.msg);
    return;
  }
  int ts = 0, fit = 1;
  double best = 1e300;
  for (int64_t i = 0; i < all.n; i++) {
    const remat_layout *l = &all.rows[i];
    ts |= 1 << l->t;
    CHECK(l->t * l->p * l->d == 4 && l->b * l->m * l->d == 8);
    if (l->rc == 0) {
      fit &= l->memory <= budget;
      if (l->time < best) best = l->time;
    }
  }
  CHECK(ts == ((1 << 1) | (1 << 2) | (1 << 4)) && fit);
  double t1[4096], t2[4096];
  size_t m1[4096], m2[4096];
  int64_t n1 = front(&fast, t1, m1), n2 = front(&all, t2, m2);
  int same = n1 == n2 && n1 > 0;
  for (int64_t i = 0; same && i < n1; i++) same = t1[i] == t2[i] && m1[i] == m2[i];
  CHECKF(fast.best >= 0 && all.best >= 0 && fast.rows[fast.best].time == best &&
             all.rows[all.best].time == best && same && fast.solved < all.solved,
         "%zu bytes a rank, tp %g dp %g GB/s: %lld layouts; fastest %.6g and a front of %lld "
         "as every layout solved gives them, with %lld solves of %lld",
         budget, link_tp / 1e9, link_dp / 1e9, (long long)all.n, best, (long long)n1,
         (long long)fast.solved, (long long)all.solved);
  remat_layout_search_free(&fast);
  remat_layout_search_free(&all);
}

int main(void) {
  test_checks_of_config();
  test_parameters();
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    int prec = bf16 ? REMAT_PRECISION_BF16 : REMAT_PRECISION_FP32;
    test_kept_block(prec, "2,256,8,512,128", 4, 128, 256, 8, 4);
    test_kept_block(prec, "gpt2-350m", 8, 1024, 1024, 16, 8); /* docs/plan.md's table */
  }
  test_flops_and_comm();
  test_problem();
  test_exports();
  test_layouts((size_t)64 << 20, 100e9, 25e9);
  test_layouts((size_t)24 << 20, 10e9, 100e9);
  test_layouts((size_t)12 << 20, 400e9, 5e9);
  return test_summary("test_tensor");
}
