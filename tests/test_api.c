/* test_api.c: the public API's small functions, each against what it
 * promises: the version string, the error table's names and messages, the
 * built-in shapes, the learning-rate schedule, the MFU formula, the heap
 * counters, the recompute-list parser, the sampler's greedy and top-1
 * draws, a one-process job's placement, and a job run through the public
 * API against a bare trainer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static void test_version(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR,
           REMAT_VERSION_PATCH);
  CHECK(strcmp(remat_version(), want) == 0 && strcmp(remat_version(), REMAT_VERSION_STRING) == 0);
}

static void test_errors(void) {
#define XX(name, value, msg)                                     \
  CHECK(strcmp(remat_err_name(value), "REMAT_" #name) == 0);     \
  CHECK(strcmp(remat_strerror(value), msg) == 0);
  REMAT_ERRNO_MAP(XX)
#undef XX
  CHECK(remat_strerror(REMAT_OK) != NULL && remat_strerror(-1000) != NULL);
}

static void test_configs(void) {
  const char *const *names = remat_config_names();
  int n = 0, seen_124m = 0;
  for (; names[n]; n++) {
    remat_config cfg;
    remat_error err;
    CHECK(remat_config_parse(names[n], &cfg, &err) == 0);
    const char *about = remat_config_describe(names[n]);
    CHECK(about != NULL && about[0] != 0);
    if (!strcmp(names[n], "gpt2-124m")) {
      seen_124m = 1;
      CHECK(cfg.num_layers == 12 && cfg.channels == 768 && cfg.padded_vocab_size == 50304);
    }
  }
  CHECK(n >= 4 && seen_124m);
  CHECK(remat_config_describe("no-such-model") == NULL);
}

static void test_lr(void) {
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.lr = 1e-3;
  o.steps = 110;
  CHECK(remat_train_lr(&o, 0) == (float)1e-3 && remat_train_lr(&o, 109) == (float)1e-3);
  o.warmup = 10;
  CHECK(remat_train_lr(&o, 0) == (float)1e-4); /* (step + 1) / warmup of the peak */
  CHECK(remat_train_lr(&o, 4) == (float)5e-4);
  CHECK(remat_train_lr(&o, 10) == (float)1e-3);
  o.cosine = 1; /* from the peak at the warmup's end to 10% of it at `steps` */
  CHECK(remat_train_lr(&o, 10) == (float)1e-3);
  CHECK(fabsf(remat_train_lr(&o, 60) - 5.5e-4f) < 1e-9f);
  CHECK(fabsf(remat_train_lr(&o, 110) - 1e-4f) < 1e-9f);
  CHECK(remat_train_lr(&o, 30) > remat_train_lr(&o, 31));
}

/* The trainer's checks, by the names a checkpoint's settings use; and the
 * settings a checkpoint saves, enumerated with their values. */
static void test_opts_check(void) {
  remat_train_opts o;
  remat_error err;
  remat_train_opts_default(&o);
  CHECK(remat_train_opts_check(&o, &err) == 0);
  o.hp.eps = -1;
  CHECK(remat_train_opts_check(&o, &err) == REMAT_EINVAL && strstr(err.msg, "eps -1"));
  remat_train_opts_default(&o);
  o.hp.beta2 = NAN;
  CHECK(remat_train_opts_check(&o, &err) == REMAT_EINVAL && strstr(err.msg, "beta2 nan"));
  remat_train_opts_default(&o);
  o.lr = INFINITY;
  CHECK(remat_train_opts_check(&o, &err) == REMAT_EINVAL && strstr(err.msg, "lr inf"));
  remat_train_opts_default(&o);
  o.steps = -1;
  CHECK(remat_train_opts_check(&o, &err) == REMAT_EINVAL && strstr(err.msg, "steps -1"));
  remat_job_desc d;
  remat_job_desc_default(&d);
  d.train.hp.eps = 2e-8f;
  char v[64];
  int n = 0, eps = 0;
  for (const char *k; (k = remat_job_setting(&d, n, v, sizeof v)); n++)
    eps += !strcmp(k, "eps") && !strcmp(v, "1.99999999e-08");
  CHECK(n > 30 && eps == 1 && remat_job_setting(&d, -1, v, sizeof v) == NULL);
}

static void test_mfu(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("gpt2-124m", &cfg, &err) == 0);
  double f = remat_flops_per_token(&cfg, 1024);
  CHECK(fabs(remat_mfu(&cfg, 1024, 1000.0, f * 2000.0) - 0.5) < 1e-12);
  CHECK(remat_mfu(&cfg, 1024, 1000.0, 0.0) == 0.0);
}

/* Everything the library allocates is counted: a token stream's ids. */
static void test_heap(void) {
  remat_heap_reset_peak();
  size_t before = remat_heap_bytes();
  remat_tokens t = {0};
  remat_error err;
  CHECK(remat_corpus_tokens(&t, 4096, &err) == 0);
  size_t held = remat_heap_bytes() - before;
  CHECK(held >= (size_t)t.n * sizeof(int32_t));
  CHECK(remat_heap_peak_bytes() >= before + held);
  remat_tokens_free(&t);
  CHECK(remat_heap_bytes() == before);
  CHECK(remat_heap_peak_bytes() >= before + held);
  remat_heap_reset_peak();
  CHECK(remat_heap_peak_bytes() == before);
}

static void test_policy_list(void) {
  uint8_t pol[12];
  remat_error err;
  CHECK(remat_policy_parse_list("full:0-3,middle:4-5,7", pol, 12, &err) == 0);
  for (int l = 0; l < 12; l++) {
    int want = l < 4 ? REMAT_RECOMPUTE : l < 6 || l == 7 ? REMAT_MIDDLE : REMAT_KEEP;
    CHECK(pol[l] == want);
  }
  CHECK(remat_policy_parse_list("0,2", pol, 12, &err) == 0);
  CHECK(pol[0] == REMAT_RECOMPUTE && pol[1] == REMAT_KEEP && pol[2] == REMAT_RECOMPUTE);
  CHECK(remat_policy_parse_list("12", pol, 12, &err) < 0 && err.msg[0]);
  CHECK(remat_policy_parse_list("1,1", pol, 12, &err) < 0);
  CHECK(remat_policy_parse_list("", pol, 12, &err) < 0);
  CHECK(remat_policy_parse_list("x", pol, 12, &err) < 0);
}

/* Temperature 0 and top-1 both take the most likely token, lower id first
 * among ties; a full draw takes some token of the vocabulary. */
static void test_sample(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("2,32,2,64,16", &cfg, &err) == 0);
  size_t n = remat_param_count(&cfg);
  float *w = malloc(n * sizeof *w);
  uint64_t s = 7;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    w[i] = (float)((double)(s >> 40) / (double)(1ull << 24) - 0.5) * 0.2f;
  }
  remat_generator *g;
  CHECK(remat_generator_create(&g, &cfg, w, 0, &err) == 0);
  int32_t prompt[3] = {1, 2, 3};
  CHECK(remat_generator_feed(g, prompt, 3, &err) == 0);
  const float *lg = remat_generator_logits(g);
  int32_t best = 0;
  for (int32_t i = 1; i < cfg.vocab_size; i++)
    if (lg[i] > lg[best]) best = i;
  uint64_t rng = 1;
  CHECK(remat_generator_sample(g, 0.0, 0, &rng) == best);
  CHECK(remat_generator_sample(g, 1.0, 1, &rng) == best);
  for (int k = 0; k < 16; k++) {
    int32_t t = remat_generator_sample(g, 1.0, 0, &rng);
    CHECK(t >= 0 && t < cfg.vocab_size);
  }
  uint64_t r1 = 5, r2 = 5; /* deterministic for the generator's state */
  CHECK(remat_generator_sample(g, 0.8, 8, &r1) == remat_generator_sample(g, 0.8, 8, &r2));
  remat_generator_destroy(g);
  free(w);
}

/* A one-process job places every block on one stage, each with the
 * policy the description asked for. */
/* Ranks fill nodes in rank order, K a node, or they do not. */
static void test_nodes_in_order(void) {
  const int one[4] = {0, 0, 0, 0}, two[4] = {0, 0, 1, 1}, last[5] = {0, 0, 1, 1, 2},
            round_robin[4] = {0, 1, 0, 1}, uneven[4] = {0, 1, 1, 1};
  CHECK(remat_nodes_in_order(one, 4) == 4 && remat_nodes_in_order(two, 4) == 2);
  CHECK(remat_nodes_in_order(last, 5) == 2 && remat_nodes_in_order(one, 1) == 1);
  CHECK(remat_nodes_in_order(round_robin, 4) == 0 && remat_nodes_in_order(uneven, 4) == 0);
  CHECK(remat_nodes_in_order(one, 0) == 0);
}

static void test_job_placement(void) {
  remat_job_desc d;
  remat_job_desc_default(&d);
  d.config = "2,32,2,256,16";
  d.train.B = 2;
  d.train.T = 16;
  d.train.steps = 1;
  d.ckpt_layers = "middle:1";
  remat_job *job;
  remat_error err;
  CHECK(remat_job_create(&job, &d, &err) == 0);
  CHECK(remat_job_prepare(job, &err) == 0);
  const remat_placement *pl = remat_job_placement(job);
  CHECK(pl->stages == 1 && pl->first_block[0] == 0 && pl->num_blocks[0] == 2);
  CHECK(pl->policy[0] == REMAT_KEEP && pl->policy[1] == REMAT_MIDDLE);
  CHECK(pl->replicas == 1 && remat_job_kind(job) == REMAT_RUN_ONE);
  remat_job_destroy(job, 0);
}

/* Bytes of a file (NULL when it cannot be read); *n its size. */
static unsigned char *slurp(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  rewind(f);
  unsigned char *b = malloc((size_t)*n + 1);
  if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  return b;
}

/* A job run through the public API, as job.h's tour does it (create,
 * prepare, start, step until done, save), trains what a bare trainer with
 * the same settings trains: the same saved bytes; and it holds the bytes it
 * planned. */
static void test_job_run(void) {
  remat_job_desc d;
  remat_job_desc_default(&d);
  d.config = "2,32,2,256,16";
  d.train.B = 2;
  d.train.T = 16;
  d.train.steps = 3;
  d.train.hp.dropout = 0.1f;
  d.ckpt_layers = "middle:1";
  char a[64], b[64];
  snprintf(a, sizeof a, "test_api_job_%ld.bin", (long)getpid());
  snprintf(b, sizeof b, "test_api_trainer_%ld.bin", (long)getpid());
  remat_job *job;
  remat_error err;
  remat_job_step_info in = {0};
  CHECK(remat_job_create(&job, &d, &err) == 0);
  CHECK(remat_job_prepare(job, &err) == 0);
  CHECK(remat_job_start(job, &err) == 0);
  int steps = 0;
  while (!remat_job_done(job) && steps < 10) {
    CHECK(remat_job_step(job, 0, &in, &err) == 0);
    steps++;
  }
  CHECK(steps == 3 && in.stats.step == 3 && isfinite(in.stats.loss));
  CHECK(in.measured == remat_job_planned_bytes(job));
  CHECK(remat_job_save(job, a, &err) == 0);
  remat_job_destroy(job, 0);

  remat_config cfg;
  remat_tokens tok = {0};
  remat_trainer *tr;
  uint8_t policy[2] = {REMAT_KEEP, REMAT_MIDDLE};
  CHECK(remat_config_parse(d.config, &cfg, &err) == 0);
  CHECK(remat_corpus_tokens(&tok, 0, &err) == 0);
  CHECK(remat_trainer_create(&tr, &cfg, policy, &tok, &d.train, &err) == 0);
  CHECK(remat_trainer_allocate(tr, &err) == 0);
  remat_model_init_weights(remat_trainer_model(tr), d.train.hp.seed);
  for (int k = 0; k < 3; k++) {
    remat_step_stats st;
    CHECK(remat_trainer_step(tr, &st, &err) == 0);
  }
  CHECK(remat_checkpoint_save(b, &cfg, remat_model_params(remat_trainer_model(tr)), &err) == 0);
  remat_trainer_destroy(tr);
  remat_tokens_free(&tok);

  long na = 0, nb = 0;
  unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
  CHECK(ba && bb && na == nb && na > 0 && memcmp(ba, bb, (size_t)na) == 0);
  free(ba);
  free(bb);
  remove(a);
  remove(b);
}

int main(void) {
  test_version();
  test_errors();
  test_configs();
  test_lr();
  test_opts_check();
  test_mfu();
  test_heap();
  test_policy_list();
  test_sample();
  test_job_placement();
  test_nodes_in_order();
  test_job_run();
  return test_summary("test_api");
}
