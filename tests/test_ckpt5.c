/* test_ckpt5.c: llm.c's bf16 checkpoint (version 5). Weights saved as
 * version 5 hold each fp32 weight rounded to nearest even, bit for bit as an
 * independent rounding says, and load back as those values widened exactly;
 * a file written here the way llm.c writes one (not through remat's writer)
 * loads tensor by tensor; every corrupt, truncated or mismatched file, and
 * every weight that cannot be saved, is refused with one line naming what;
 * a job saves its trained model in either version while its checkpoint
 * directories stay fp32.
 *
 * Usage: test_ckpt5 [scratch-dir]   (default: a fresh directory under /tmp,
 * removed at the end) */
#define _DEFAULT_SOURCE /* mkdtemp */
#define REMAT_TEST_FILES
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"
#include "test_util.h"

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* rc is `want`, the message names `word` and is one line. */
#define CHECK_LINE(rc, err, want, word)        \
  do {                                         \
    CHECK_ERR(rc, err, want, word);            \
    CHECK(strchr((err).msg, '\n') == NULL);    \
  } while (0)

/* x rounded to bf16 the long way: the two bf16 values around it (the
 * truncation and the next one away from zero) and the fp32 midpoint
 * between them; above the midpoint goes up, at it to the even one. Finite,
 * non-NaN x only. */
static uint16_t ref_bf16(float x) {
  uint32_t lo = bits_of(x) & 0xffff0000u;
  float mid = float_of(lo | 0x8000u);
  uint32_t up = lo + 0x10000u;
  if (fabsf(x) > fabsf(mid)) return (uint16_t)(up >> 16);
  if (fabsf(x) < fabsf(mid)) return (uint16_t)(lo >> 16);
  return (uint16_t)(((lo >> 16) & 1u) ? up >> 16 : lo >> 16);
}

/* V=200 pads to Vp=256: the padded rows are stored too, as in llm.c. */
static const remat_config shape = {.max_seq_len = 16, .vocab_size = 200,
                                   .padded_vocab_size = 256, .num_layers = 2,
                                   .num_heads = 2, .channels = 8};

/* Weights that exercise the rounding: ties both ways, just off a tie,
 * subnormals, signed zeros, near bf16's largest, then random ones. */
static float *test_weights(const remat_config *c, uint32_t seed) {
  size_t n = remat_param_count(c);
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808001u, 0x3f807fffu,
                              0x00000001u, 0x80000000u, 0x00000000u, 0x7f7f7fffu,
                              0xff7f7fffu, 0x3c23d70au, 0x00408000u, 0x00418000u};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) p[i] = float_of(special[i]);
  p[n - 1] = 1e30f;
  return p;
}

/* ---------------------------------------------------- round trip */

static void test_round_trip(void) {
  remat_error err = {0};
  const remat_config *c = &shape;
  size_t np = remat_param_count(c);
  float *w = test_weights(c, 5);
  const char *p = test_path("w5.bin");
  CHECK(remat_checkpoint_save_as(p, c, w, REMAT_CKPT_VERSION_BF16, &err) == 0);

  size_t n = 0;
  uint8_t *b = test_read_file(p, &n);
  CHECK(b && n == REMAT_HEADER_BYTES + 2 * np);
  if (b && n == REMAT_HEADER_BYTES + 2 * np) {
    const uint32_t want[8] = {20240326, 5, 16, 200, 2, 2, 8, 256};
    int head_ok = 1, body_ok = 1;
    for (int i = 0; i < REMAT_HEADER_INTS; i++)
      head_ok &= test_get32(b + 4 * i) == (i < 8 ? want[i] : 0);
    for (size_t i = 0; i < np; i++) body_ok &= get16(b + REMAT_HEADER_BYTES + 2 * i) == ref_bf16(w[i]);
    CHECKF(head_ok, "version 5 header: magic, 5, maxT, V, L, NH, C, Vp, then zeros");
    CHECKF(body_ok, "%zu weights stored as their nearest-even bf16 (ties, subnormals, +-0)", np);
  }

  remat_checkpoint_reader rd;
  remat_config got;
  CHECK(remat_checkpoint_reader_open(&rd, p, &got, &err) == 0);
  CHECK(rd.version == REMAT_CKPT_VERSION_BF16 && memcmp(&got, c, sizeof got) == 0);
  float *v = malloc(np * sizeof(float)); /* exactly sized: ASan sees any overrun */
  CHECK(remat_checkpoint_read_params(&rd, c, v, &err) == 0);
  remat_checkpoint_reader_free(&rd);
  int exact = 1;
  for (size_t i = 0; i < np; i++) exact &= bits_of(v[i]) == (uint32_t)ref_bf16(w[i]) << 16;
  CHECKF(exact, "loaded weights are the rounded ones widened, bit for bit");
  CHECK(v[0] == 1.0f && v[1] == 0x1.04p0f && bits_of(v[5]) == 0x80000000u);

  /* the loaded weights are bf16 already: saved again, the same bytes;
   * saved as fp32, the same values */
  const char *q = test_path("again5.bin"), *r = test_path("as3.bin");
  CHECK(remat_checkpoint_save_as(q, c, v, REMAT_CKPT_VERSION_BF16, &err) == 0);
  size_t m = 0;
  uint8_t *bq = test_read_file(q, &m);
  CHECK(bq && m == n && memcmp(b, bq, n) == 0);
  CHECK(remat_checkpoint_save_as(r, c, v, REMAT_CKPT_VERSION, &err) == 0);
  float *v3 = malloc(np * sizeof(float));
  CHECK(remat_checkpoint_load(r, c, v3, &err) == 0 && memcmp(v, v3, np * sizeof(float)) == 0);
  remat_config r3;
  CHECK(remat_checkpoint_read_config(r, &r3, &err) == 0 && memcmp(&r3, c, sizeof r3) == 0);
  CHECK(remat_checkpoint_reader_open(&rd, r, NULL, &err) == 0 && rd.version == REMAT_CKPT_VERSION);
  remat_checkpoint_reader_free(&rd);
  free(b);
  free(bq);
  free(v);
  free(v3);
  free(w);
}

/* ------------------------------------------------------ refusals */

static void test_bad_files(void) {
  remat_error err = {0};
  const remat_config *c = &shape;
  size_t np = remat_param_count(c);
  float *w = test_weights(c, 7), *v = malloc(np * sizeof(float));
  const char *p = test_path("good5.bin"), *q = test_path("bad5.bin");
  CHECK(remat_checkpoint_save_as(p, c, w, REMAT_CKPT_VERSION_BF16, &err) == 0);
  const long body = (long)(2 * np);
  struct {
    int field;
    uint32_t value;
    long resize;
    int code;
    const char *word;
  } bad[] = {
      {0, 20240520, 0, REMAT_EFORMAT, "magic"},
      {1, 4, 0, REMAT_EFORMAT, "version 4"},
      {1, 6, 0, REMAT_EFORMAT, "reads version 3 (fp32) and 5 (bf16)"},
      {-1, 0, -1, REMAT_EFORMAT, "is truncated"},
      {-1, 0, -2, REMAT_EFORMAT, "bf16 parameters"},
      {-1, 0, -body, REMAT_EFORMAT, "truncated"},
      {-1, 0, 2, REMAT_EFORMAT, "2 trailing bytes"},
      {-1, 0, body, REMAT_EFORMAT, "bf16 parameters"}, /* an fp32 body under a bf16 header */
      {1, 3, 0, REMAT_EFORMAT, "fp32 parameters"},     /* a bf16 body under an fp32 header */
      {7, 384, 0, REMAT_EFORMAT, "truncated"},         /* larger Vp: the body is short */
      {7, 128, 0, REMAT_EFORMAT, "smaller than V=200"},
      {4, 1, 0, REMAT_EFORMAT, "trailing"}, /* fewer layers: the body is long */
      {5, 3, 0, REMAT_EFORMAT, "divisible"},
      {6, 0, 0, REMAT_EFORMAT, "positive"},
  };
  remat_config r;
  int rc;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    test_patched_copy(p, q, bad[i].field, bad[i].value, bad[i].resize);
    rc = remat_checkpoint_read_config(q, &r, &err);
    CHECK_LINE(rc, err, bad[i].code, bad[i].word);
    rc = remat_checkpoint_load(q, NULL, v, &err);
    CHECK_LINE(rc, err, bad[i].code, bad[i].word);
  }
  CHECKF(1, "%zu corrupt version 5 headers and sizes refused in one line each",
         sizeof bad / sizeof bad[0]);
  test_write_file(q, "\xc6\xd7\x34\x01\x05\x00\x00\x00", 8); /* a cut header: 20240326, 5 */
  rc = remat_checkpoint_read_config(q, &r, &err);
  CHECK_LINE(rc, err, REMAT_EFORMAT, "the header alone needs 1024");

  /* another shape than expected names the dimension */
  remat_config e = *c;
  e.channels = 16;
  rc = remat_checkpoint_load(p, &e, v, &err);
  CHECK_LINE(rc, err, REMAT_ESHAPE, "has C=8 but the expected shape has C=16");

  /* a bf16 NaN or infinity in the file names the tensor and index */
  size_t n = 0, k = np - 3; /* lnfb[5] */
  uint8_t *b = test_read_file(p, &n);
  b[REMAT_HEADER_BYTES + 2 * k] = 0xc0, b[REMAT_HEADER_BYTES + 2 * k + 1] = 0x7f;
  test_write_file(q, b, n);
  rc = remat_checkpoint_load(q, NULL, v, &err);
  char want[64];
  snprintf(want, sizeof want, "parameter %zu (lnfb[5]) is NaN", k);
  CHECK_LINE(rc, err, REMAT_ENUMERIC, want);
  b[REMAT_HEADER_BYTES + 2 * k] = 0, b[REMAT_HEADER_BYTES + 2 * k + 1] = 0;
  b[REMAT_HEADER_BYTES] = 0x80, b[REMAT_HEADER_BYTES + 1] = 0xff; /* -inf in wte[0] */
  test_write_file(q, b, n);
  rc = remat_checkpoint_load(q, NULL, v, &err);
  CHECK_LINE(rc, err, REMAT_ENUMERIC, "parameter 0 (wte[0]) is infinite");

  /* from memory, the same parser; changed in place between open and read */
  remat_checkpoint_reader rd;
  uint8_t *good = test_read_file(p, &n);
  CHECK(remat__checkpoint_open_mem(&rd, good, n, "mem", &r, &err) == 0);
  CHECK(rd.version == REMAT_CKPT_VERSION_BF16 && remat_checkpoint_read_params(&rd, c, v, &err) == 0);
  remat_checkpoint_reader_free(&rd);
  rc = remat__checkpoint_open_mem(&rd, good, n - 2, "mem", &r, &err);
  CHECK_LINE(rc, err, REMAT_EFORMAT, "'mem' is truncated");
  test_write_file(q, good, n);
  CHECK(remat_checkpoint_reader_open(&rd, q, NULL, &err) == 0);
  CHECK(truncate(q, (off_t)n - 2) == 0);
  rc = remat_checkpoint_read_params(&rd, NULL, v, &err);
  CHECK_LINE(rc, err, REMAT_EIO, "changed size");
  remat_checkpoint_reader_free(&rd);

  /* saves that cannot be made leave the previous file as it was */
  rc = remat_checkpoint_save_as(p, c, w, 4, &err);
  CHECK_LINE(rc, err, REMAT_EINVAL, "version 4");
  w[9] = 3.4e38f; /* finite in fp32, above bf16's largest: rounds to infinity */
  rc = remat_checkpoint_save_as(p, c, w, REMAT_CKPT_VERSION_BF16, &err);
  CHECK_LINE(rc, err, REMAT_ENUMERIC, "parameter 9 (wte[9]) is 3.4e+38, which rounds to infinity");
  CHECK(remat_checkpoint_save_as(q, c, w, REMAT_CKPT_VERSION, &err) == 0); /* fp32 holds it */
  w[9] = NAN;
  rc = remat_checkpoint_save_as(p, c, w, REMAT_CKPT_VERSION_BF16, &err);
  CHECK_LINE(rc, err, REMAT_ENUMERIC, "NaN");
  size_t m = 0;
  uint8_t *after = test_read_file(p, &m);
  CHECK(after && m == n && memcmp(after, good, n) == 0);
  free(after);
  free(good);
  free(b);
  free(v);
  free(w);
}

/* ------------------------------------------- a file written as llm.c does */

/* llm.c's train_gpt2.cu (gpt2_write_to_checkpoint, fill_in_parameter_sizes)
 * and train_gpt2.py (write_model, --dtype bfloat16): int header[256] =
 * {20240326, 5, maxT, V, L, NH, C, Vp}, then every tensor as bf16 in this
 * order, wte with its Vp - V padded rows zero. Sizes from llm.c, not remat. */
static size_t llmc_sizes(const remat_config *c, size_t sizes[16]) {
  size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels;
  size_t maxT = (size_t)c->max_seq_len, L = (size_t)c->num_layers;
  const size_t s[16] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C,
                        L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,
                        C, C};
  size_t total = 0;
  for (int i = 0; i < 16; i++) total += sizes[i] = s[i];
  return total;
}

/* Writes the file; h receives every stored bf16 value in order. */
static void llmc_write(const char *path, const remat_config *c, uint16_t *h, size_t np) {
  size_t sizes[16], at = 0;
  llmc_sizes(c, sizes);
  uint32_t seed = 99;
  for (int t = 0; t < 16; t++)
    for (size_t j = 0; j < sizes[t]; j++, at++) {
      seed = seed * 1664525u + 1013904223u;
      /* exponent 115..130: magnitudes 2^-12 .. 2^3, either sign, any mantissa */
      uint16_t v = (uint16_t)((seed >> 31) << 15 | (115 + (seed >> 8) % 16) << 7 | (seed & 0x7f));
      int padded_row = t == 0 && j >= (size_t)c->vocab_size * (size_t)c->channels;
      h[at] = padded_row ? 0 : v;
    }
  uint8_t *b = calloc(1, REMAT_HEADER_BYTES + 2 * np);
  const int32_t head[8] = {20240326, 5,
                           (int32_t)c->max_seq_len, (int32_t)c->vocab_size,
                           (int32_t)c->num_layers, (int32_t)c->num_heads,
                           (int32_t)c->channels, (int32_t)c->padded_vocab_size};
  for (int i = 0; i < 8; i++) test_put32(b + 4 * i, (uint32_t)head[i]);
  for (size_t i = 0; i < np; i++) {
    b[REMAT_HEADER_BYTES + 2 * i] = (uint8_t)(h[i] & 0xff);
    b[REMAT_HEADER_BYTES + 2 * i + 1] = (uint8_t)(h[i] >> 8);
  }
  test_write_file(path, b, REMAT_HEADER_BYTES + 2 * np);
  free(b);
}

static void test_llmc_file(void) {
  remat_error err = {0};
  const remat_config *c = &shape;
  size_t sizes[16], mine[REMAT_P_COUNT];
  size_t np = llmc_sizes(c, sizes);
  remat_param_sizes(c, mine);
  CHECK(REMAT_P_COUNT == 16 && np == remat_param_count(c));
  CHECK(memcmp(sizes, mine, sizeof sizes) == 0);
  uint16_t *h = malloc(np * sizeof *h);
  const char *p = test_path("llmc5.bin");
  llmc_write(p, c, h, np);
  remat_config got;
  float *v = malloc(np * sizeof(float));
  CHECK(remat_checkpoint_read_config(p, &got, &err) == 0 && memcmp(&got, c, sizeof got) == 0);
  CHECK(remat_checkpoint_load(p, c, v, &err) == 0);
  size_t bad = 0, at = 0;
  int tensors_ok = 1;
  for (int t = 0; t < 16; t++) {
    /* each tensor's first value where remat's layout puts the tensor */
    tensors_ok &= bits_of(v[at]) == (uint32_t)h[at] << 16;
    at += sizes[t];
  }
  for (size_t i = 0; i < np; i++) bad += bits_of(v[i]) != (uint32_t)h[i] << 16;
  CHECKF(bad == 0 && tensors_ok, "a version 5 file written as llm.c does loads all %zu values "
         "of its 16 tensors exactly (%zu differ)", np, bad);
  int pad_zero = 1;
  for (size_t i = (size_t)(c->vocab_size * c->channels); i < sizes[0]; i++) pad_zero &= v[i] == 0;
  CHECK(pad_zero);
  free(h);
  free(v);
}

/* ------------------------------------------------------------- a job */

static remat_job *run_job(remat_job_desc *d) {
  remat_job *job = NULL;
  remat_error err = {0};
  remat_job_step_info in;
  CHECK(remat_job_create(&job, d, &err) == 0);
  CHECK(remat_job_prepare(job, &err) == 0);
  CHECK(remat_job_start(job, &err) == 0);
  for (int k = 0; k < 10 && !remat_job_done(job); k++) CHECK(remat_job_step(job, 0, &in, &err) == 0);
  return job;
}

/* A trained fp32 model saved as version 5 loads as its weights rounded; the
 * checkpoint directory beside it stays fp32; a job trained from the bf16
 * file starts from the rounded weights. */
static void test_job(void) {
  remat_error err = {0};
  remat_job_desc d;
  remat_job_desc_default(&d);
  d.config = "2,32,2,256,16";
  d.train.B = 2;
  d.train.T = 16;
  d.train.steps = 2;
  d.save_version = REMAT_CKPT_VERSION_BF16;
  d.checkpoint_dir = test_path("ckdir");
  d.checkpoint_every = 2;
  remat_job *job = run_job(&d);
  const remat_config *cfg = remat_job_config(job);
  size_t np = remat_param_count(cfg);
  const float *w = remat_model_params(remat_trainer_model(remat_job_trainer(job)));
  const char *p = test_path("job5.bin");
  CHECK(remat_job_save(job, p, &err) == 0);
  float *v = malloc(np * sizeof(float));
  remat_checkpoint_reader rd;
  CHECK(remat_checkpoint_reader_open(&rd, p, NULL, &err) == 0);
  CHECK(rd.version == REMAT_CKPT_VERSION_BF16 && remat_checkpoint_read_params(&rd, cfg, v, &err) == 0);
  remat_checkpoint_reader_free(&rd);
  size_t bad = 0;
  for (size_t i = 0; i < np; i++) bad += bits_of(v[i]) != (uint32_t)ref_bf16(w[i]) << 16;
  CHECKF(bad == 0, "a trained model saved as bf16 loads as its %zu weights rounded (%zu differ)",
         np, bad);
  char mb[700];
  snprintf(mb, sizeof mb, "%s/step_00000002/model.bin", d.checkpoint_dir);
  CHECK(remat_checkpoint_reader_open(&rd, mb, NULL, &err) == 0 && rd.version == REMAT_CKPT_VERSION);
  remat_checkpoint_reader_free(&rd);
  remat_job_destroy(job, 0);

  /* training goes on from the bf16 file */
  remat_job_desc d2;
  remat_job_desc_default(&d2);
  d2.model = p;
  d2.train.B = 2;
  d2.train.T = 16;
  d2.train.steps = 1;
  remat_job *job2 = NULL;
  CHECK(remat_job_create(&job2, &d2, &err) == 0);
  CHECK(remat_job_prepare(job2, &err) == 0);
  CHECK(remat_job_start(job2, &err) == 0);
  const float *w2 = remat_model_params(remat_trainer_model(remat_job_trainer(job2)));
  CHECK(memcmp(w2, v, np * sizeof(float)) == 0);
  remat_job_destroy(job2, 0);

  d2.save_version = 4;
  int rc = remat_job_create(&job2, &d2, &err);
  CHECK_LINE(rc, err, REMAT_EINVAL, "not 4");
  free(v);
}

int main(int argc, char **argv) {
  if (!test_scratch_begin("test_ckpt5", argc < 2 ? NULL : argv[1])) return 2;
  test_round_trip();
  test_bad_files();
  test_llmc_file();
  test_job();
  CHECK(test_scratch_end() == 0);
  return test_summary("test_ckpt5");
}
