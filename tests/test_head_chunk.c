/* test_head_chunk.c: the head in chunks of tokens (remat_config's
 * head_chunk) against the head all at once. Each chunk's logits are made,
 * turned into loss and gradient, and dropped. Every token's loss and its
 * row of the gradient into the head's norm are the same arithmetic on the
 * same values, so they differ only where the product's library orders a
 * row's sum by the number of rows it is given (OpenBLAS does for small
 * products; oneDNN did not here): the test prints whether they are
 * bit-identical and asserts them within float rounding. The head matrix's
 * gradient sums the tokens chunk by chunk, a different order of float
 * additions: within rounding of the whole head's (tied, the embedding's
 * share is added to it alike). The steps after start from those nearby
 * weights: their losses agree to rounding. A chunk of all the tokens is
 * the whole head, bit for bit to the end. The memory model counts one
 * chunk's logits. GPT-2 (tied) and a Llama (untied), fp32 and, where the
 * CPU has it, bf16; chunks that divide the tokens and some that leave a
 * shorter last chunk, with gradient accumulation over two micro-batches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/family.h"
#include "model/model_runtime.h"
#include "test_util.h"

enum { STEPS = 3, K = 2, B = 2, T = 24 };

typedef struct {
  double loss[STEPS];
  float *grads; /* the first step's, accumulated over its micro-batches */
  float *params;
} trace;

static void fill_tokens(int32_t *tok, int n, int64_t V, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (int i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = (int32_t)((x >> 8) % (uint32_t)V);
  }
}

typedef struct {
  int64_t V;
  trace *tr;
} ctx;

static int batch(void *c, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)err;
  int64_t V = ((ctx *)c)->V;
  fill_tokens(inputs, B * T, V, (uint32_t)(step * 10 + micro));
  fill_tokens(targets, B * T, V, (uint32_t)(step * 10 + micro + 5));
  return 0;
}

static int keep_grads(void *c, remat_trainer *t, remat_error *err) {
  (void)err;
  remat_model *m = remat_trainer_model(t);
  size_t P = remat_param_count(remat_model_config(m));
  if (remat_trainer_steps_done(t) != 0) return 0;
  remat_model_sum_tied(m);
  ((ctx *)c)->tr->grads = malloc(P * sizeof(float));
  memcpy(((ctx *)c)->tr->grads, remat_model_grads(m), P * sizeof(float));
  return 0;
}

static void run(const remat_config *cfg, int64_t chunk, trace *tr) {
  remat_config c = *cfg;
  c.head_chunk = chunk;
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = B;
  o.T = T;
  o.grad_accum = K;
  o.steps = STEPS;
  o.lr = 1e-3;
  o.hp.seed = 7;
  remat_trainer *t;
  remat_error err;
  ctx x = {c.vocab_size, tr};
  if (remat_trainer_create(&t, &c, NULL, NULL, &o, &err) || remat_trainer_allocate(t, &err)) {
    fprintf(stderr, "init: %s\n", err.msg);
    exit(1);
  }
  remat_trainer_set_batches(t, batch, &x);
  remat_trainer_set_hook(t, keep_grads, &x);
  remat_model *m = remat_trainer_model(t);
  remat_model_init_weights(m, 42);
  for (int s = 0; s < STEPS; s++) {
    remat_step_stats st;
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    tr->loss[s] = st.loss;
  }
  size_t P = remat_param_count(&c);
  tr->params = malloc(P * sizeof(float));
  memcpy(tr->params, remat_model_params(m), P * sizeof(float));
  remat_trainer_destroy(t);
}

static void release(trace *t) {
  free(t->grads);
  free(t->params);
}

/* The largest difference of b from a, relative to a's largest element. */
static double rel_diff(const float *a, const float *b, size_t n) {
  double big = 0, d = 0;
  for (size_t i = 0; i < n; i++) {
    big = fmax(big, fabs(a[i]));
    d = fmax(d, fabs((double)a[i] - (double)b[i]));
  }
  return big > 0 ? d / big : d;
}

static void check_chunks(const remat_config *cfg) {
  size_t sizes[REMAT_P_COUNT], off = 0, P = remat_param_count(cfg);
  remat_param_sizes(cfg, sizes);
  int h = remat__head_tensor(cfg);
  for (int i = 0; i < h; i++) off += sizes[i];
  size_t hn = sizes[h];
  int bf16 = cfg->precision == REMAT_PRECISION_BF16;
  printf("%s %s (%s head), B %d T %d, %d micro-batches a step\n",
         cfg->family == REMAT_FAMILY_LLAMA ? "llama" : "gpt2",
         remat_precision_name((int)cfg->precision),
         remat__tied(cfg) ? "tied" : "untied", B, T, K);
  trace whole;
  run(cfg, 0, &whole);
  CHECK(whole.loss[0] > 4.0 && whole.loss[0] < 8.0);
  const int64_t chunks[] = {B * T, 24, 16, 20, 1};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
    trace t;
    run(cfg, chunks[c], &t);
    int loss0 = memcmp(&t.loss[0], &whole.loss[0], sizeof whole.loss[0]) == 0;
    size_t rest = P - off - hn;
    int same = memcmp(t.grads, whole.grads, off * sizeof(float)) == 0 &&
               memcmp(t.grads + off + hn, whole.grads + off + hn, rest * sizeof(float)) == 0;
    double od = fmax(rel_diff(whole.grads, t.grads, off),
                     rel_diff(whole.grads + off + hn, t.grads + off + hn, rest));
    double hd = rel_diff(whole.grads + off, t.grads + off, hn);
    double dl = 0;
    for (int s = 0; s < STEPS; s++) dl = fmax(dl, fabs(t.loss[s] - whole.loss[s]));
    printf("  chunk %2lld: first loss %s, other gradients %s (within %.2e), head matrix's "
           "within %.2e, losses within %.2e\n",
           (long long)chunks[c], loss0 ? "bit-identical" : "differs",
           same ? "bit-identical" : "differ", od, hd, dl);
    CHECK(fabs(t.loss[0] - whole.loss[0]) < 1e-6 * whole.loss[0]);
    CHECK(od < 1e-6 && hd < 1e-5);
    CHECK(dl < (bf16 ? 1e-4 : 1e-5));
    if (chunks[c] == B * T) /* all at once: the whole head, every bit */
      CHECK(!memcmp(t.loss, whole.loss, sizeof t.loss) && hd == 0 &&
            !memcmp(t.params, whole.params, P * sizeof(float)));
    release(&t);
  }
  release(&whole);

  /* the memory model: one chunk's logits, not the micro-batch's */
  remat_memory_model a, b;
  remat_error err;
  remat_config c = *cfg;
  CHECK(remat_memory_model_get(&c, B, T, &a, &err) == 0);
  c.head_chunk = 20;
  CHECK(remat_memory_model_get(&c, B, T, &b, &err) == 0);
  size_t e = bf16 ? 2 : 4, Vp = (size_t)cfg->padded_vocab_size;
  CHECK(a.logits_bytes >= (size_t)(B * T) * Vp * e && b.logits_bytes >= 20 * Vp * e &&
        b.logits_bytes < 20 * Vp * e + 4096);
  CHECK(b.layer[REMAT_LAYER_HEAD].work < a.layer[REMAT_LAYER_HEAD].work);
}

int main(void) {
  const char *shapes[] = {"4,64,4,256,32", "llama:2,64,4,2,96,256,32"};
  const char *why;
  int bf16 = remat_precision_available(REMAT_PRECISION_BF16, &why);
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int p = 0; p <= bf16; p++) {
      remat_config cfg;
      remat_error err;
      CHECK(remat_config_parse(shapes[i], &cfg, &err) == 0);
      cfg.precision = p ? REMAT_PRECISION_BF16 : REMAT_PRECISION_FP32;
      check_chunks(&cfg);
    }
  if (!bf16) printf("bf16 not checked: %s\n", why);

  /* the planner's chunk: the most tokens, a multiple of 64 and at least
   * 256, whose logits fit in the residual stream, or 0 where that is all
   * the tokens */
  remat_config g;
  remat_error err;
  CHECK(remat_config_parse("gpt2-124m", &g, &err) == 0);
  int64_t k = remat_head_chunk_auto(&g, 8, 1024);
  printf("gpt2-124m B8 T1024 fp32: auto chunk %lld tokens\n", (long long)k);
  CHECK(k == 256); /* 125 tokens' logits fit: at least 256 */
  remat_config w = g;
  w.padded_vocab_size = 4096; /* a small vocabulary: 1536 tokens' logits fit */
  k = remat_head_chunk_auto(&w, 8, 1024);
  CHECK(k == 1536 && k * w.padded_vocab_size <= 8 * 1024 * w.channels);
  CHECK(remat_head_chunk_auto(&g, 1, 200) == 0); /* at least 256: all 200 at once */
  w.padded_vocab_size = 256;
  CHECK(remat_head_chunk_auto(&w, 8, 1024) == 0); /* the logits fit whole */
  return test_summary("head_chunk");
}
