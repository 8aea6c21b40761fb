/* test_io.c: token shards and checkpoints round-trip byte-exactly in llm.c's
 * layout; every malformed file is refused with the right code and a message
 * naming the problem; a checkpoint reader keeps the file it opened; saves are
 * atomic, go through symlinks, refuse special files and never mix under
 * concurrent writers; text becomes byte tokens; the default corpus is
 * deterministic English-like ASCII with true arithmetic; the loader shifts
 * targets by one, replays for a seed, keeps the validation split apart and
 * allocates nothing per batch.
 *
 * Usage: test_io [scratch-dir]   (default: a fresh directory under /tmp,
 * removed at the end) */
#define _DEFAULT_SOURCE /* mknod, makedev, mkdtemp */
#define REMAT_TEST_FILES
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"
#include "io/loader.h"
#include "test_util.h"

static const char *dir; /* the scratch directory */

/* ------------------------------------------------------------- shards */

/* A shard file whose header says `count` tokens, with `have` tokens after it. */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                        int have, size_t extra) {
  size_t n = REMAT_HEADER_BYTES + 2 * (size_t)have + extra;
  uint8_t *b = calloc(1, n);
  test_put32(b, magic);
  test_put32(b + 4, version);
  test_put32(b + 8, count);
  for (int i = 0; i < have; i++) b[REMAT_HEADER_BYTES + 2 * i] = (uint8_t)(i % 200);
  test_write_file(path, b, n);
  free(b);
}

/* A shard saved and read back: llm.c's header and little-endian uint16
 * tokens, no temporary left; its vocabulary check names the first token out
 * of range. */
static void shard_round_trip(int32_t *ids, int N, const char *p) {
  remat_error err = {0};
  remat_tokens t = {.tok = ids, .n = N};
  CHECK(remat_tokens_save(&t, p, &err) == 0);

  size_t n = 0;
  uint8_t *b = test_read_file(p, &n);
  CHECK(b && n == REMAT_HEADER_BYTES + 2 * (size_t)N);
  if (b && n >= REMAT_HEADER_BYTES + 2 * (size_t)N) {
    CHECK(test_get32(b) == 20240520);
    CHECK(test_get32(b + 4) == 1);
    CHECK(test_get32(b + 8) == (uint32_t)N);
    CHECK(test_get32(b + 12) == 0 && test_get32(b + 1020) == 0);
    /* token i as uint16 little endian at 1024 + 2i */
    CHECK(b[1024 + 2 * 17] == 0xff && b[1024 + 2 * 17 + 1] == 0xff);
    CHECK(b[1024 + 2 * 1] == (7919 & 0xff) && b[1024 + 2 * 1 + 1] == (7919 >> 8));
  }
  free(b);
  CHECK(!test_exists(test_path("a.bin.tmp")));

  remat_tokens u;
  CHECK(remat_tokens_load(&u, p, &err) == 0);
  CHECK(u.n == N && memcmp(u.tok, ids, (size_t)N * sizeof *ids) == 0);
  CHECK(u.max_id == 65535);
  CHECK(remat_tokens_check_vocab(&u, 65536, &err) == 0);
  int rc = remat_tokens_check_vocab(&u, 50257, &err);
  CHECK_ERR(rc, err, REMAT_ERANGE, "larger vocabulary");
  /* the first offending position: i with (i*7919)%65536 >= 50257 */
  int first = -1;
  for (int i = 0; i < N && first < 0; i++)
    if (ids[i] >= 50257) first = i;
  char want[64];
  snprintf(want, sizeof want, "token %d has id %d", first, ids[first]);
  CHECK(strstr(err.msg, want) != NULL);
  CHECK(strstr(err.msg, "V=50257") != NULL);
  remat_tokens_free(&u);
  CHECK(u.tok == NULL && u.n == 0);
  remat_tokens_free(&u); /* twice is harmless */
}

/* An id beyond uint16 (or negative) is refused, and the file already there
 * is left untouched. */
static void shard_overflow(int32_t *ids, int N, const char *p) {
  remat_error err = {0};
  remat_tokens t = {.tok = ids, .n = N}, u;
  ids[3] = 70000;
  int rc = remat_tokens_save(&t, p, &err);
  CHECK_ERR(rc, err, REMAT_ERANGE, "uint16");
  CHECK(strstr(err.msg, "70000") != NULL);
  CHECK(remat_tokens_load(&u, p, &err) == 0 && u.n == N && u.tok[3] == (3 * 7919) % 65536);
  remat_tokens_free(&u);
  ids[3] = -1;
  CHECK(remat_tokens_save(&t, p, &err) == REMAT_ERANGE);
  ids[3] = 0;
}

/* Malformed shards and paths that are no shard: refused, naming why. */
static void shard_refusals(void) {
  remat_error err = {0};
  remat_tokens u;
  int rc;
  const char *p = test_path("magic.bin");
  write_shard(p, 20240326, 1, 10, 10, 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "magic");
  CHECK(u.tok == NULL);
  p = test_path("version.bin");
  write_shard(p, 20240520, 2, 10, 10, 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "version 2");
  p = test_path("shorthdr.bin");
  test_write_file(p, "\x18\xd7\x34\x01", 4);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  p = test_path("empty.bin");
  test_write_file(p, "", 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  p = test_path("shortbody.bin");
  write_shard(p, 20240520, 1, 10, 5, 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  CHECK(strstr(err.msg, "10 tokens") && strstr(err.msg, "1034 bytes"));
  p = test_path("trailing.bin");
  write_shard(p, 20240520, 1, 10, 10, 3);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "3 trailing bytes");
  p = test_path("zero.bin");
  write_shard(p, 20240520, 1, 0, 0, 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "at least 2");
  p = test_path("one.bin");
  write_shard(p, 20240520, 1, 1, 1, 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "at least 2");
  p = test_path("negative.bin");
  write_shard(p, 20240520, 1, -4, 0, 0);
  rc = remat_tokens_load(&u, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "negative");
  rc = remat_tokens_load(&u, test_path("missing.bin"), &err);
  CHECK_ERR(rc, err, REMAT_EIO, "missing.bin");
  rc = remat_tokens_load(&u, dir, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
  rc = remat_tokens_load(&u, "", &err);
  CHECK(rc == REMAT_EINVAL && err.msg[0]);
}

/* Saves into a directory that does not exist, or onto a directory: refused
 * before anything is written. */
static void shard_bad_targets(int32_t *ids, int N) {
  remat_error err = {0};
  remat_tokens t = {.tok = ids, .n = N};
  int rc = remat_tokens_save(&t, test_path("no/such/dir/x.bin"), &err);
  CHECK_ERR(rc, err, REMAT_EIO, "no/such/dir");
  CHECK(strstr(err.msg, "x.bin") != NULL);
  /* a directory in the way of the final name: refused before anything is written */
  const char *d = test_path("adir.bin");
  mkdir(d, 0700);
  rc = remat_tokens_save(&t, d, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
  CHECK(test_count_temps(dir) == 0);
  rmdir(d);
}

static void test_shards(void) {
  enum { N = 5000 };
  int32_t ids[N];
  for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7919) % 65536);
  ids[17] = 65535;
  const char *p = test_path("a.bin");
  shard_round_trip(ids, N, p);
  shard_overflow(ids, N, p);
  shard_refusals();
  shard_bad_targets(ids, N);
}

static void test_text(void) {
  remat_error err = {0};
  const char *p = test_path("t.txt");
  const char text[] = "Hi!\n\x01\xff z";
  test_write_file(p, text, sizeof text - 1);
  remat_tokens t;
  CHECK(remat_tokens_from_text(&t, p, &err) == 0);
  CHECK(t.n == (int64_t)sizeof text - 1);
  for (int64_t i = 0; i < t.n && i < (int64_t)sizeof text - 1; i++)
    CHECK(t.tok[i] == (uint8_t)text[i]);
  CHECK(t.max_id == 255);
  CHECK(remat_tokens_check_vocab(&t, 256, &err) == 0);
  remat_tokens_free(&t);

  test_write_file(p, "x", 1);
  int rc = remat_tokens_from_text(&t, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "1 bytes");
  test_write_file(p, "", 0);
  rc = remat_tokens_from_text(&t, p, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "0 bytes");
  rc = remat_tokens_from_text(&t, test_path("nope.txt"), &err);
  CHECK_ERR(rc, err, REMAT_EIO, "nope.txt");
  rc = remat_tokens_from_text(&t, dir, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
  const char *fifo = test_path("text.fifo");
  CHECK(mkfifo(fifo, 0600) == 0);
  rc = remat_tokens_from_text(&t, fifo, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "a text file stored on disk");
  CHECK(strstr(err.msg, "file file") == NULL);
}

/* --------------------------------------------------------- checkpoints */

static float *random_params(const remat_config *c, uint32_t seed) {
  size_t n = remat_param_count(c);
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  return p;
}

/* A checkpoint holds llm.c's header (V=200 padded to Vp=256: the padded rows
 * are stored too) and the parameters as they are, and leaves no temporary. */
static void ckpt_layout(const remat_config *c, const float *w, const char *p) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  CHECK(remat_checkpoint_save(p, c, w, &err) == 0);
  CHECK(!test_exists(test_path("m.ckpt.tmp")));

  size_t n = 0;
  uint8_t *b = test_read_file(p, &n);
  CHECK(b && n == REMAT_HEADER_BYTES + 4 * np);
  if (b && n == REMAT_HEADER_BYTES + 4 * np) {
    const uint32_t want[8] = {20240326, 3, 16, 200, 2, 2, 8, 256};
    for (int i = 0; i < 8; i++) CHECK(test_get32(b + 4 * i) == want[i]);
    CHECK(test_get32(b + 32) == 0 && test_get32(b + 1020) == 0);
    /* first float (wte[0]) at 1024, last (lnfb[C-1]) at the end */
    uint32_t u0, u1;
    memcpy(&u0, &w[0], 4);
    memcpy(&u1, &w[np - 1], 4);
    CHECK(test_get32(b + 1024) == u0);
    CHECK(test_get32(b + n - 4) == u1);
  }
  free(b);
}

/* It reads back as the same config and parameters, with and without an
 * expected shape; a small V (< 128) is not padded. */
static void ckpt_round_trip(const remat_config *c, const float *w, const char *p, float *v) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  remat_config r;
  CHECK(remat_checkpoint_read_config(p, &r, &err) == 0);
  CHECK(memcmp(&r, c, sizeof *c) == 0);
  CHECK(remat_checkpoint_load(p, NULL, v, &err) == 0);
  CHECK(memcmp(v, w, np * sizeof(float)) == 0);
  memset(v, 0, np * sizeof(float));
  CHECK(remat_checkpoint_load(p, c, v, &err) == 0);
  CHECK(memcmp(v, w, np * sizeof(float)) == 0);

  /* a small V (< 128) is not padded */
  remat_config s = {.max_seq_len = 4, .vocab_size = 11, .padded_vocab_size = 11,
                    .num_layers = 1, .num_heads = 1, .channels = 4};
  float *ws = random_params(&s, 2);
  const char *ps = test_path("s.ckpt");
  CHECK(remat_checkpoint_save(ps, &s, ws, &err) == 0);
  CHECK(remat_checkpoint_read_config(ps, &r, &err) == 0 && memcmp(&r, &s, sizeof s) == 0);
  free(ws);
}

/* A shape mismatch against the expected config names the dimension. */
static void ckpt_shape_mismatch(const remat_config *c, const char *p, float *v) {
  remat_error err = {0};
  remat_config e = *c;
  e.channels = 16;
  int rc = remat_checkpoint_load(p, &e, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "has C=8 but the expected shape has C=16");
  e = *c;
  e.num_layers = 4;
  rc = remat_checkpoint_load(p, &e, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "L=2");
  e = *c;
  e.vocab_size = 256;
  rc = remat_checkpoint_load(p, &e, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "V=200");
  e = *c;
  e.max_seq_len = 1024;
  rc = remat_checkpoint_load(p, &e, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "maxT=1024");
}

/* Malformed headers and sizes, a cut header, a missing file and a
 * directory are refused, naming what is wrong. */
static void ckpt_bad_headers(const remat_config *c, const char *p, const char *q, float *v) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  remat_config r;
  int rc;
  struct {
    int field;
    int32_t value;
    long resize;
    int code;
    const char *word;
  } bad[] = {
      {0, 20240520, 0, REMAT_EFORMAT, "magic"},
      {1, 5, 0, REMAT_EFORMAT, "bf16 parameters"}, /* read as bf16: twice too long */
      {1, 2, 0, REMAT_EFORMAT, "version 2"},
      {-1, 0, -1, REMAT_EFORMAT, "truncated"},
      {-1, 0, -(long)(4 * np), REMAT_EFORMAT, "truncated"},
      {-1, 0, 8, REMAT_EFORMAT, "8 trailing bytes"},
      {6, 0, 0, REMAT_EFORMAT, "positive"},  /* C = 0 */
      {4, -1, 0, REMAT_EFORMAT, "positive"}, /* L = -1 */
      {5, 3, 0, REMAT_EFORMAT, "divisible"}, /* NH = 3 does not divide C = 8 */
      {7, 128, 0, REMAT_EFORMAT, "smaller than V=200"},  /* Vp < V */
      {7, 1 << 21, 0, REMAT_EFORMAT, "larger than the limit"}, /* Vp too large */
      {7, 384, 0, REMAT_EFORMAT, "truncated"}, /* larger Vp: the body is too short */
      {4, 1, 0, REMAT_EFORMAT, "trailing"},  /* fewer layers: the body is too long */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    test_patched_copy(p, q, bad[i].field, bad[i].value, bad[i].resize);
    rc = remat_checkpoint_read_config(q, &r, &err);
    CHECK_ERR(rc, err, bad[i].code, bad[i].word);
    rc = remat_checkpoint_load(q, NULL, v, &err);
    CHECK_ERR(rc, err, bad[i].code, bad[i].word);
  }
  /* a cut header */
  test_write_file(q, "\x3e\xd6\x34\x01\x03\x00\x00\x00", 8);
  rc = remat_checkpoint_read_config(q, &r, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  rc = remat_checkpoint_read_config(test_path("missing.ckpt"), &r, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "missing.ckpt");
  rc = remat_checkpoint_load(dir, NULL, v, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
}

/* NaN and inf in the parameters: not saved (the previous file is kept), and
 * not loaded, naming the parameter; an invalid shape is not saved. */
static void ckpt_non_finite(const remat_config *c, float *w, const char *p, const char *q,
                            float *v) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  int rc;
  size_t k = np - 3; /* in lnfb: the last tensor has C = 8 entries */
  w[k] = NAN;
  rc = remat_checkpoint_save(q, c, w, &err);
  CHECK_ERR(rc, err, REMAT_ENUMERIC, "NaN");
  size_t cn = 0;
  uint8_t *cb = test_read_file(p, &cn);
  uint32_t nan_bits = 0x7fc00000u;
  test_put32(cb + 1024 + 4 * k, nan_bits);
  test_write_file(q, cb, cn);
  rc = remat_checkpoint_load(q, NULL, v, &err);
  char want[64];
  snprintf(want, sizeof want, "parameter %zu (lnfb[5])", k);
  CHECK_ERR(rc, err, REMAT_ENUMERIC, want);
  test_put32(cb + 1024 + 4 * k, 0);
  test_put32(cb + 1024, 0x7f800000u); /* +inf in wte[0] */
  test_write_file(q, cb, cn);
  rc = remat_checkpoint_load(q, NULL, v, &err);
  CHECK_ERR(rc, err, REMAT_ENUMERIC, "parameter 0 (wte[0]) is infinite");
  free(cb);

  /* a failed save keeps the previous file */
  rc = remat_checkpoint_save(p, c, w, &err);
  CHECK(rc == REMAT_ENUMERIC);
  CHECK(remat_checkpoint_load(p, NULL, v, &err) == 0);
  w[k] = v[k];
  CHECK(memcmp(v, w, np * sizeof(float)) == 0);
  /* an invalid shape is refused before anything is written */
  remat_config e = *c;
  e.num_heads = 3;
  rc = remat_checkpoint_save(q, &e, w, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "divisible");
}

static void test_checkpoints(void) {
  remat_config c = {.max_seq_len = 16, .vocab_size = 200, .padded_vocab_size = 256,
                    .num_layers = 2, .num_heads = 2, .channels = 8};
  CHECK(remat_padded_vocab(200) == 256);
  size_t np = remat_param_count(&c);
  float *w = random_params(&c, 1), *v = calloc(np, sizeof(float));
  const char *p = test_path("m.ckpt"), *q = test_path("bad.ckpt");
  ckpt_layout(&c, w, p);
  ckpt_round_trip(&c, w, p, v);
  ckpt_shape_mismatch(&c, p, v);
  ckpt_bad_headers(&c, p, q, v);
  ckpt_non_finite(&c, w, p, q, v);
  free(v);
  free(w);
}

/* The reader opens once: a checkpoint of another shape renamed over the
 * path between the header and the weights does not reach the buffer sized
 * for the first; a change in place is caught by the size check. */
/* A reader keeps the file it opened: a save that replaces it (by rename)
 * between open and read changes nothing it reads; freeing it twice, or a
 * zeroed one, is harmless. */
static void reader_keeps_file(const remat_config *c, const remat_config *big, const float *w,
                              const float *wb, const char *p, float *v) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  CHECK(remat_checkpoint_save(p, c, w, &err) == 0);
  remat_checkpoint_reader rd;
  remat_config got;
  CHECK(remat_checkpoint_reader_open(&rd, p, &got, &err) == 0);
  CHECK(memcmp(&got, c, sizeof *c) == 0 && memcmp(&rd.cfg, c, sizeof *c) == 0);
  CHECK(remat_checkpoint_save(p, big, wb, &err) == 0); /* replaced by rename */
  CHECK(remat_checkpoint_read_params(&rd, c, v, &err) == 0);
  CHECK(memcmp(v, w, np * sizeof(float)) == 0);
  memset(v, 0, np * sizeof(float));
  CHECK(remat_checkpoint_read_params(&rd, NULL, v, &err) == 0); /* twice is fine */
  CHECK(memcmp(v, w, np * sizeof(float)) == 0);
  remat_checkpoint_reader_free(&rd);
  remat_checkpoint_reader_free(&rd); /* twice is harmless */
  int rc = remat_checkpoint_read_params(&rd, NULL, v, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "not open");
  remat_checkpoint_reader zero = {0};
  int fd0_open = fcntl(0, F_GETFD) != -1;
  remat_checkpoint_reader_free(&zero); /* a zeroed reader holds nothing, fd 0 included */
  CHECK((fcntl(0, F_GETFD) != -1) == fd0_open);
}

/* The two-call way: config, then a load that checks the shape it sized for. */
static void reader_two_calls(const remat_config *c, const remat_config *big, const float *w,
                             const float *wb, const char *p, float *v) {
  remat_error err = {0};
  remat_config got;
  CHECK(remat_checkpoint_save(p, c, w, &err) == 0);
  CHECK(remat_checkpoint_read_config(p, &got, &err) == 0);
  CHECK(remat_checkpoint_save(p, big, wb, &err) == 0);
  int rc = remat_checkpoint_load(p, &got, v, &err);
  CHECK_ERR(rc, err, REMAT_ESHAPE, "L=3");
}

/* A file changed in place between open and read, a truncated, missing or
 * FIFO file: refused, without blocking, and a failed open holds nothing. */
static void reader_refusals(const remat_config *c, const float *w, const char *p, float *v) {
  remat_error err = {0};
  remat_checkpoint_reader rd;
  int rc;
  /* changed in place between open and read: refused, nothing overflows */
  CHECK(remat_checkpoint_save(p, c, w, &err) == 0);
  CHECK(remat_checkpoint_reader_open(&rd, p, NULL, &err) == 0);
  CHECK(truncate(p, 3000) == 0);
  rc = remat_checkpoint_read_params(&rd, NULL, v, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "changed size");
  remat_checkpoint_reader_free(&rd);
  /* a failed open holds nothing */
  rc = remat_checkpoint_reader_open(&rd, p, NULL, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  remat_checkpoint_reader_free(&rd);
  rc = remat_checkpoint_reader_open(&rd, test_path("none.ckpt"), NULL, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "none.ckpt");

  /* a FIFO is refused without blocking */
  const char *fifo = test_path("reader.fifo");
  CHECK(mkfifo(fifo, 0600) == 0);
  rc = remat_checkpoint_reader_open(&rd, fifo, NULL, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "not a regular file");
}

/* Huge but finite weights load and save; the overflow check names them. */
static void params_overflow(const remat_config *c, float *w, const char *p, float *v) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  int rc;
  CHECK(remat_params_overflow(c, w, &err) == 0);
  w[5] = 1e30f;
  CHECK(remat_checkpoint_save(p, c, w, &err) == 0);
  CHECK(remat_checkpoint_load(p, c, v, &err) == 0 && v[5] == 1e30f);
  rc = remat_params_overflow(c, v, &err);
  CHECK_ERR(rc, err, REMAT_ENUMERIC, "wte[5]");
  CHECK(strstr(err.msg, "1e+30") && strstr(err.msg, "overflow"));
  v[5] = -REMAT_PARAM_OVERFLOW_LIMIT;
  CHECK(remat_params_overflow(c, v, &err) == 0);
  v[5] = -2e18f;
  CHECK(remat_params_overflow(c, v, &err) == REMAT_ENUMERIC);
  v[5] = 0;
  v[np - 1] = NAN;
  rc = remat_params_overflow(c, v, &err);
  CHECK_ERR(rc, err, REMAT_ENUMERIC, "lnfb[7]");
}

/* From memory: the same parsers over bytes, for checkpoints, shards and text. */
static void from_memory(const remat_config *c, float *w, const char *p, float *v) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  remat_checkpoint_reader rd;
  remat_config got;
  int rc;
  w[5] = 0.5f;
  CHECK(remat_checkpoint_save(p, c, w, &err) == 0);
  size_t n = 0;
  uint8_t *bytes = test_read_file(p, &n);
  CHECK(remat__checkpoint_open_mem(&rd, bytes, n, "mem", &got, &err) == 0);
  CHECK(remat_checkpoint_read_params(&rd, c, v, &err) == 0);
  CHECK(memcmp(v, w, np * sizeof(float)) == 0);
  remat_checkpoint_reader_free(&rd);
  rc = remat__checkpoint_open_mem(&rd, bytes, n - 4, "mem", &got, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "'mem' is truncated");
  rc = remat__checkpoint_open_mem(&rd, bytes, 100, "mem", &got, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  free(bytes);

  remat_tokens t;
  int32_t ids[3] = {7, 8, 65535};
  remat_tokens src = {.tok = ids, .n = 3, .max_id = 65535};
  const char *sp = test_path("mem.bin");
  CHECK(remat_tokens_save(&src, sp, &err) == 0);
  bytes = test_read_file(sp, &n);
  CHECK(remat__tokens_load_mem(&t, bytes, n, "mem", &err) == 0);
  CHECK(t.n == 3 && t.tok[2] == 65535 && t.max_id == 65535);
  remat_tokens_free(&t);
  rc = remat__tokens_load_mem(&t, bytes, n + 0 - 1, "mem", &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "truncated");
  free(bytes);
  CHECK(remat__tokens_from_text_mem(&t, "ab\xff", 3, "mem", &err) == 0);
  CHECK(t.n == 3 && t.tok[2] == 255);
  remat_tokens_free(&t);
  rc = remat__tokens_from_text_mem(&t, NULL, 0, "mem", &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "0 bytes");
}

static void test_checkpoint_reader(void) {
  remat_config c = {.max_seq_len = 16, .vocab_size = 200, .padded_vocab_size = 256,
                    .num_layers = 2, .num_heads = 2, .channels = 8};
  remat_config big = {.max_seq_len = 32, .vocab_size = 300, .padded_vocab_size = 384,
                      .num_layers = 3, .num_heads = 2, .channels = 16};
  size_t np = remat_param_count(&c);
  float *w = random_params(&c, 21), *wb = random_params(&big, 22);
  float *v = malloc(np * sizeof(float)); /* exactly the first shape: ASan sees any overflow */
  const char *p = test_path("swap.ckpt");
  reader_keeps_file(&c, &big, w, wb, p, v);
  reader_two_calls(&c, &big, w, wb, p, v);
  reader_refusals(&c, w, p, v);
  params_overflow(&c, w, p, v);
  from_memory(&c, w, p, v);
  free(v);
  free(w);
  free(wb);
}

/* --------------------------------------------------------------- saves */

static int same_bytes(const char *path, const uint8_t *want, size_t n) {
  size_t m = 0;
  uint8_t *b = test_read_file(path, &m);
  int same = b && m == n && memcmp(b, want, n) == 0;
  free(b);
  return same;
}

/* Special files in the way of a save are refused and left as they were. */
static void test_save_special(const remat_config *c, const float *w) {
  remat_error err = {0};
  int32_t ids[4] = {1, 2, 3, 4};
  remat_tokens t = {.tok = ids, .n = 4, .max_id = 4};
  struct stat st;
  int refused_all = 1;

  const char *fifo = test_path("fifo");
  CHECK(mkfifo(fifo, 0600) == 0);
  int rc = remat_checkpoint_save(fifo, c, w, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "FIFO");
  CHECK(strstr(err.msg, fifo) != NULL);
  refused_all &= rc == REMAT_EIO;
  rc = remat_tokens_save(&t, fifo, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "not a regular file");
  refused_all &= rc == REMAT_EIO;
  rc = remat_output_check(fifo, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "FIFO");
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  refused_all &= S_ISFIFO(st.st_mode);

  /* a symlink to the FIFO: the link and the FIFO both stay */
  const char *lf = test_path("fifo.link");
  CHECK(symlink("fifo", lf) == 0);
  rc = remat_checkpoint_save(lf, c, w, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "links to");
  CHECK(lstat(lf, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));

  /* a socket */
  const char *sp = test_path("sock");
  int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (sfd >= 0 && strlen(sp) < sizeof sa.sun_path) {
    strcpy(sa.sun_path, sp);
    CHECK(bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0);
    rc = remat_tokens_save(&t, sp, &err);
    CHECK_ERR(rc, err, REMAT_EIO, "socket");
    CHECK(lstat(sp, &st) == 0 && S_ISSOCK(st.st_mode));
    refused_all &= rc == REMAT_EIO && S_ISSOCK(st.st_mode);
  }
  if (sfd >= 0) close(sfd);

  /* a directory, also through a symlink */
  const char *dd = test_path("somedir");
  CHECK(mkdir(dd, 0700) == 0);
  rc = remat_checkpoint_save(dd, c, w, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
  rc = remat_output_check(dd, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
  const char *ld = test_path("somedir.link");
  CHECK(symlink("somedir", ld) == 0);
  rc = remat_checkpoint_save(ld, c, w, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "directory");
  CHECK(lstat(dd, &st) == 0 && S_ISDIR(st.st_mode));
  CHECK(test_count_temps(dd) == 0);

  /* a character device: our own copy of /dev/null first (needs root), then
   * /dev/null itself, but only once the refusals above held, so a broken
   * build cannot replace the machine's /dev/null */
  if (geteuid() == 0) {
    const char *cd = test_path("null");
    CHECK(mknod(cd, S_IFCHR | 0666, makedev(1, 3)) == 0);
    rc = remat_checkpoint_save(cd, c, w, &err);
    CHECK_ERR(rc, err, REMAT_EIO, "character device");
    CHECK(lstat(cd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
    refused_all &= rc == REMAT_EIO && S_ISCHR(st.st_mode);
  }
  CHECK(test_count_temps(dir) == 0);
  if (refused_all) {
    struct stat before, after;
    CHECK(lstat("/dev/null", &before) == 0 && S_ISCHR(before.st_mode));
    int dev_temps = test_count_temps("/dev");
    rc = remat_checkpoint_save("/dev/null", c, w, &err);
    CHECK_ERR(rc, err, REMAT_EIO, "character device");
    rc = remat_tokens_save(&t, "/dev/null", &err);
    CHECK_ERR(rc, err, REMAT_EIO, "/dev/null");
    rc = remat_output_check("/dev/null", &err);
    CHECK_ERR(rc, err, REMAT_EIO, "not a regular file");
    CHECK(lstat("/dev/null", &after) == 0 && S_ISCHR(after.st_mode));
    CHECK(after.st_ino == before.st_ino && after.st_rdev == before.st_rdev);
    CHECK(test_count_temps("/dev") == dev_temps);
  } else {
    fprintf(stderr, "  special files in the scratch directory were not refused; "
                    "/dev/null not tried\n");
  }
}

/* A save through a symlink replaces the file at the end of the chain; the
 * links stay as they were. */
static void test_save_symlinks(const remat_config *c, const float *w1, const float *w2) {
  remat_error err = {0};
  size_t np = remat_param_count(c);
  float *v = calloc(np, sizeof(float));
  const char *sub = test_path("linkdir");
  CHECK(mkdir(sub, 0700) == 0);
  const char *real = test_path("linkdir/real.ckpt");
  CHECK(remat_checkpoint_save(real, c, w1, &err) == 0);
  CHECK(chmod(real, 0640) == 0);
  /* link -> linkdir/real.ckpt, chain -> link (both relative) */
  const char *link = test_path("real.link"), *chain = test_path("chain.link");
  CHECK(symlink("linkdir/real.ckpt", link) == 0);
  CHECK(symlink("real.link", chain) == 0);
  CHECK(remat_same_file(chain, real) == 1);
  CHECK(remat_output_check(chain, &err) == 0);

  CHECK(remat_checkpoint_save(chain, c, w2, &err) == 0);
  struct stat st;
  char buf[256];
  ssize_t n;
  CHECK(lstat(chain, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK((n = readlink(chain, buf, sizeof buf - 1)) > 0 && (buf[n] = 0, 1) &&
        strcmp(buf, "real.link") == 0);
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK((n = readlink(link, buf, sizeof buf - 1)) > 0 && (buf[n] = 0, 1) &&
        strcmp(buf, "linkdir/real.ckpt") == 0);
  CHECK(lstat(real, &st) == 0 && S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0640); /* the replaced file's mode is kept */
  if (geteuid() == 0) { /* and its owner, where the process may set it */
    CHECK(chown(real, 1234, 1235) == 0);
    CHECK(remat_checkpoint_save(chain, c, w2, &err) == 0);
    CHECK(stat(real, &st) == 0 && st.st_uid == 1234 && st.st_gid == 1235);
    CHECK((st.st_mode & 07777) == 0640);
  }
  CHECK(remat_checkpoint_load(real, NULL, v, &err) == 0);
  CHECK(memcmp(v, w2, np * sizeof(float)) == 0);
  CHECK(test_count_temps(dir) == 0 && test_count_temps(sub) == 0);

  /* a dangling link: its target is created, the link now resolves */
  const char *dangling = test_path("dangling.link"), *made_by = test_path("linkdir/new.ckpt");
  CHECK(symlink("linkdir/new.ckpt", dangling) == 0);
  CHECK(remat_same_file(dangling, made_by) == 1);
  CHECK(remat_checkpoint_save(dangling, c, w1, &err) == 0);
  CHECK(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(remat_checkpoint_load(made_by, NULL, v, &err) == 0);
  CHECK(memcmp(v, w1, np * sizeof(float)) == 0);

  /* a loop is refused */
  const char *l1 = test_path("loop1"), *l2 = test_path("loop2");
  CHECK(symlink("loop2", l1) == 0 && symlink("loop1", l2) == 0);
  int rc = remat_checkpoint_save(l1, c, w1, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "symbolic link");
  CHECK(lstat(l1, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(test_count_temps(dir) == 0 && test_count_temps(sub) == 0);
  free(v);
}

/* A write that fails half way (here: the file size limit, as a full disk
 * would) leaves the previous file and no temporary. */
static void test_save_failure(const remat_config *c, const float *w1, const float *w2) {
  remat_error err = {0};
  const char *p = test_path("limited.ckpt");
  CHECK(remat_checkpoint_save(p, c, w1, &err) == 0);
  size_t n0 = 0;
  uint8_t *before = test_read_file(p, &n0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = remat_checkpoint_save(p, c, w2, &err);
    int ok = rc == REMAT_EIO && strstr(err.msg, p) && strstr(err.msg, strerror(EFBIG));
    if (!ok) fprintf(stderr, "  size-limited save: %s: %s\n", remat_err_name(rc), err.msg);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(same_bytes(p, before, n0));
  CHECK(test_count_temps(dir) == 0);
  free(before);
}

/* Two processes saving different checkpoints to one path, many times, while
 * this one reads it: every read sees one whole file, never a mix. */
static void test_save_concurrent(void) {
  remat_error err = {0};
  remat_config c1 = {.max_seq_len = 16, .vocab_size = 200, .padded_vocab_size = 256,
                     .num_layers = 2, .num_heads = 2, .channels = 16};
  remat_config c2 = {.max_seq_len = 8, .vocab_size = 100, .padded_vocab_size = 128,
                     .num_layers = 1, .num_heads = 1, .channels = 8};
  float *w1 = random_params(&c1, 11), *w2 = random_params(&c2, 12);
  const char *i1 = test_path("img1.ckpt"), *i2 = test_path("img2.ckpt");
  const char *p = test_path("race.ckpt");
  CHECK(remat_checkpoint_save(i1, &c1, w1, &err) == 0);
  CHECK(remat_checkpoint_save(i2, &c2, w2, &err) == 0);
  size_t n1, n2;
  uint8_t *b1 = test_read_file(i1, &n1), *b2 = test_read_file(i2, &n2);
  CHECK(remat_checkpoint_save(p, &c1, w1, &err) == 0);
  enum { SAVES = 40 };
  pid_t kids[2];
  fflush(NULL);
  for (int k = 0; k < 2; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      int bad = 0;
      for (int i = 0; i < SAVES; i++)
        bad |= k ? remat_checkpoint_save(p, &c2, w2, NULL) : remat_checkpoint_save(p, &c1, w1, NULL);
      _exit(bad ? 1 : 0);
    }
  }
  int reads = 0, whole = 1, seen1 = 0, seen2 = 0, running = 2;
  while (running > 0) {
    size_t m = 0;
    uint8_t *b = test_read_file(p, &m);
    int is1 = b && m == n1 && memcmp(b, b1, m) == 0, is2 = b && m == n2 && memcmp(b, b2, m) == 0;
    whole &= is1 || is2;
    seen1 |= is1;
    seen2 |= is2;
    reads++;
    free(b);
    for (int k = 0; k < 2; k++) {
      int status;
      if (kids[k] > 0 && waitpid(kids[k], &status, WNOHANG) == kids[k]) {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        kids[k] = 0;
        running--;
      }
    }
  }
  CHECK(whole);
  CHECK(same_bytes(p, b1, n1) || same_bytes(p, b2, n2));
  /* and it loads as the one it is */
  remat_checkpoint_reader rd;
  remat_config got;
  CHECK(remat_checkpoint_reader_open(&rd, p, &got, &err) == 0);
  int is1 = memcmp(&got, &c1, sizeof got) == 0;
  CHECK(is1 || memcmp(&got, &c2, sizeof got) == 0);
  float *v = malloc(remat_param_count(&got) * sizeof(float));
  CHECK(remat_checkpoint_read_params(&rd, NULL, v, &err) == 0);
  CHECK(memcmp(v, is1 ? w1 : w2, remat_param_count(&got) * sizeof(float)) == 0);
  remat_checkpoint_reader_free(&rd);
  free(v);
  CHECK(test_count_temps(dir) == 0);
  printf("concurrent saves: %d reads, each a whole file (first seen %d, second %d)\n", reads,
         seen1, seen2);
  free(b1);
  free(b2);
  free(w1);
  free(w2);
}

static void test_output_checks(void) {
  remat_error err = {0};
  const char *fresh = test_path("fresh.bin");
  CHECK(remat_output_check(fresh, &err) == 0);
  CHECK(!test_exists(fresh) && test_count_temps(dir) == 0);
  const char *have = test_path("have.bin");
  test_write_file(have, "x", 1);
  CHECK(remat_output_check(have, &err) == 0);
  CHECK(same_bytes(have, (const uint8_t *)"x", 1));
  int rc = remat_output_check(test_path("nodir/x.bin"), &err);
  CHECK_ERR(rc, err, REMAT_EIO, "nodir");
  CHECK(strstr(err.msg, "create the directory") != NULL);
  rc = remat_output_check("", &err);
  CHECK(rc == REMAT_EINVAL && err.msg[0]);
  rc = remat_output_check(test_path("x/"), &err);
  CHECK(rc != 0 && err.msg[0]);
  if (geteuid() != 0) { /* root may write anywhere */
    const char *ro = test_path("readonly");
    CHECK(mkdir(ro, 0500) == 0);
    rc = remat_output_check(test_path("readonly/x.bin"), &err);
    CHECK_ERR(rc, err, REMAT_EIO, "writable");
  }

  /* remat_same_file */
  CHECK(remat_same_file(have, have) == 1);
  char spelled[700];
  snprintf(spelled, sizeof spelled, "%s/./linkdir/../have.bin", dir);
  CHECK(remat_same_file(have, spelled) == 1);
  const char *hard = test_path("hard.bin");
  CHECK(link(have, hard) == 0);
  CHECK(remat_same_file(have, hard) == 1);
  const char *other = test_path("other.bin");
  test_write_file(other, "x", 1);
  CHECK(remat_same_file(have, other) == 0);
  CHECK(remat_same_file(have, fresh) == 0); /* one exists, one does not */
  snprintf(spelled, sizeof spelled, "%s/linkdir/../fresh.bin", dir);
  CHECK(remat_same_file(fresh, spelled) == 1); /* neither exists */
  CHECK(remat_same_file(fresh, test_path("fresh2.bin")) == 0);
  CHECK(remat_same_file(NULL, have) == 0 && remat_same_file("", "") == 0);
}

static void test_saves(void) {
  remat_config c = {.max_seq_len = 16, .vocab_size = 200, .padded_vocab_size = 256,
                    .num_layers = 2, .num_heads = 2, .channels = 8};
  float *w1 = random_params(&c, 3), *w2 = random_params(&c, 4);
  test_save_special(&c, w1);
  test_save_symlinks(&c, w1, w2);
  test_save_failure(&c, w1, w2);
  test_save_concurrent();
  test_output_checks();
  free(w1);
  free(w2);
}

/* -------------------------------------------------------------- corpus */

/* "twenty-three" -> 23; -1 if not a number word. */
static int number_word(const char *s, size_t len) {
  static const char *const small[] = {
      "zero",    "one",     "two",     "three",     "four",     "five",     "six",
      "seven",   "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
      "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
  static const char *const tens[] = {"twenty", "thirty", "forty", "fifty",
                                     "sixty",  "seventy", "eighty", "ninety"};
  char w[32];
  if (len == 0 || len >= sizeof w) return -1;
  for (size_t i = 0; i < len; i++) w[i] = (char)(s[i] | 0x20); /* lower case */
  w[len] = 0;
  for (int i = 0; i < 20; i++)
    if (strcmp(w, small[i]) == 0) return i;
  for (int t = 0; t < 8; t++) {
    size_t tl = strlen(tens[t]);
    if (strncmp(w, tens[t], tl) != 0) continue;
    if (w[tl] == 0) return 20 + 10 * t;
    if (w[tl] != '-') return -1;
    for (int i = 1; i < 10; i++)
      if (strcmp(w + tl + 1, small[i]) == 0) return 20 + 10 * t + i;
  }
  return -1;
}

/* Checks every "A op B is C." sentence in text; returns how many it saw. */
static int check_arithmetic(const char *text, size_t n) {
  int seen = 0;
  size_t i = 0;
  while (i < n) {
    size_t e = i;
    while (e < n && text[e] != '\n') e++;
    /* a line "W1 op W2 is W3." with op plus/minus/times */
    char l[256];
    size_t len = e - i < sizeof l - 1 ? e - i : sizeof l - 1;
    memcpy(l, text + i, len);
    l[len] = 0;
    char a[32], op[16], b[32], c[32];
    if (sscanf(l, "%31s %15s %31s is %31[a-z-].", a, op, b, c) == 4 &&
        (!strcmp(op, "plus") || !strcmp(op, "minus") || !strcmp(op, "times"))) {
      int x = number_word(a, strlen(a)), y = number_word(b, strlen(b)),
          z = number_word(c, strlen(c));
      CHECK(x >= 0 && y >= 0 && z >= 0);
      int want = op[0] == 'p' ? x + y : op[0] == 'm' ? x - y : x * y;
      CHECK(z == want);
      if (z != want) fprintf(stderr, "  false arithmetic: %s\n", l);
      seen++;
    }
    i = e + 1;
  }
  return seen;
}

static void test_corpus(void) {
  enum { CAP = 200000 };
  char *a = malloc(CAP), *b = malloc(CAP);
  size_t na = remat_corpus_generate(a, CAP, 7);
  size_t nb = remat_corpus_generate(b, CAP, 7);
  CHECK(na == nb && na <= CAP && na > CAP - 300);
  CHECK(memcmp(a, b, na) == 0);
  size_t nc = remat_corpus_generate(b, CAP, 8);
  CHECK(nc > CAP - 300 && memcmp(a, b, nc < na ? nc : na) != 0);
  /* a shorter buffer gives a prefix: generation does not depend on cap */
  size_t nd = remat_corpus_generate(b, 5000, 7);
  CHECK(nd <= 5000 && nd > 4700 && memcmp(a, b, nd) == 0);
  CHECK(a[na - 1] == '\n');

  size_t hist[256] = {0};
  int printable = 1;
  for (size_t i = 0; i < na; i++) {
    uint8_t c = (uint8_t)a[i];
    hist[c]++;
    if (!(c == '\n' || (c >= 32 && c < 127))) printable = 0;
  }
  CHECK(printable);
  CHECK(hist[' '] > na / 10 && hist['\n'] > na / 100);
  int distinct = 0;
  double H = 0;
  for (int c = 0; c < 256; c++) {
    if (!hist[c]) continue;
    distinct++;
    double q = (double)hist[c] / (double)na;
    H -= q * log2(q);
  }
  CHECK(distinct > 30);
  CHECK(H > 3.0 && H < 5.0); /* English letters are about 4.1 bits */
  printf("corpus: %zu bytes, %d distinct, unigram entropy %.2f bits\n", na, distinct, H);

  /* the bigram entropy is much lower still: there is structure beyond letters */
  static size_t bi[256][256];
  memset(bi, 0, sizeof bi);
  for (size_t i = 1; i < na; i++) bi[(uint8_t)a[i - 1]][(uint8_t)a[i]]++;
  double Hc = 0;
  for (int x = 0; x < 256; x++)
    for (int y = 0; y < 256; y++)
      if (bi[x][y]) {
        double pxy = (double)bi[x][y] / (double)(na - 1);
        double px = (double)hist[x] / (double)na;
        Hc -= pxy * log2(pxy / px);
      }
  CHECK(Hc < 3.0);
  printf("corpus: next-byte entropy given one byte %.2f bits\n", Hc);

  /* days advance paragraph by paragraph; every arithmetic line is true */
  CHECK(strstr(a, "It is Monday.\n") && strstr(a, "It is Sunday.\n"));
  const char *m = strstr(a, "It is Monday.\n");
  if (m) {
    const char *nxt = strstr(m + 1, "It is ");
    CHECK(nxt && strncmp(nxt, "It is Tuesday.", 14) == 0);
  }
  int sums = check_arithmetic(a, na);
  CHECK(sums > 100);
  CHECK(strstr(a, " three loaves ") || strstr(a, " two loaves ") || strstr(a, " four loaves "));
  CHECK(!strstr(a, " one loaves") && !strstr(a, " two loaf "));
  CHECK(!strstr(a, "  ") && !strstr(a, "\n\n\n"));

  remat_error err = {0};
  remat_tokens t;
  CHECK(remat_corpus_tokens(&t, 0, &err) == 0);
  CHECK(t.n > (int64_t)REMAT_CORPUS_BYTES - 300 && t.n <= (int64_t)REMAT_CORPUS_BYTES);
  CHECK(t.max_id < 127);
  CHECK(remat_tokens_check_vocab(&t, 256, &err) == 0);
  size_t nfull = (size_t)t.n;
  char *full = malloc(nfull);
  CHECK(remat_corpus_generate(full, nfull, REMAT_CORPUS_SEED) == nfull);
  int same = 1;
  for (size_t i = 0; i < nfull; i++) same &= t.tok[i] == (uint8_t)full[i];
  CHECK(same);
  free(full);
  remat_tokens_free(&t);
  int rc = remat_corpus_tokens(&t, 10, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "1024");
  free(a);
  free(b);
}

/* -------------------------------------------------------------- loader */

/* The loader's corpus: N tokens, each its own position; batches B x T. */
enum { N = 10007, B = 4, T = 16 };

/* Sequential windows 0, T, 2T, ...: targets shifted by one, B*T+1 tokens
 * make exactly B windows (one token fewer: B-1, so rows repeat), and the
 * epoch's end wraps to window 0. */
static void loader_sequential(remat_tokens *t, int64_t n_train) {
  remat_error err = {0};
  int32_t in[B * T], tg[B * T];
  remat_loader *L;
  CHECK(remat_loader_create(&L, t, B, T, REMAT_SPLIT_TRAIN, 0.1, 0, 0, &err) == 0);
  CHECK(L->num_windows == (n_train - 1) / T);
  CHECK(remat_loader_windows(L) == (n_train - 1) / T && remat_loader_windows(L) >= B);
  /* B*T+1 tokens: exactly B windows; one token fewer: B-1, so rows repeat */
  remat_tokens edge = {.tok = t->tok, .n = B * T + 1, .max_id = B * T};
  remat_loader *E;
  CHECK(remat_loader_create(&E, &edge, B, T, REMAT_SPLIT_TRAIN, 0.0, 0, 0, &err) == 0);
  CHECK(remat_loader_windows(E) == B);
  remat_loader_destroy(E);
  edge.n = B * T;
  CHECK(remat_loader_create(&E, &edge, B, T, REMAT_SPLIT_TRAIN, 0.0, 0, 0, &err) == 0);
  CHECK(remat_loader_windows(E) == B - 1);
  remat_loader_destroy(E);
  remat_loader_next(L, in, tg);
  int ok = 1;
  for (int i = 0; i < B * T; i++) ok &= in[i] == i && tg[i] == i + 1;
  CHECK(ok);
  /* run through the epoch end: wraps to window 0 */
  int64_t W = L->num_windows, served = B;
  while (served + B <= W) {
    remat_loader_next(L, in, tg);
    served += B;
  }
  remat_loader_next(L, in, tg);
  int64_t left = W - served; /* rows still in epoch 0 */
  CHECK(in[0] == (int32_t)(served * T));
  CHECK(in[left * T] == 0 && L->epoch == 1);
  remat_loader_destroy(L);
}

/* Shuffled streams over 3000 batches: deterministic per seed, targets
 * shifted, only training tokens, the offset varying by epoch, and nothing
 * allocated per batch. */
static void loader_stream(remat_loader *S1, remat_loader *S2, remat_loader *S3,
                          int64_t n_train) {
  int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
  int same = 1, differ = 0, shifted = 1, in_train = 1, offsets_vary = 0;
  int64_t first_offset = S1->offset;
  size_t live = remat__heap_live();
  for (int step = 0; step < 3000; step++) {
    remat_loader_next(S1, in, tg);
    remat_loader_next(S2, in2, tg2);
    same &= memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0;
    remat_loader_next(S3, in2, tg2);
    differ |= memcmp(in, in2, sizeof in) != 0;
    for (int b = 0; b < B; b++)
      for (int i = 0; i < T; i++) {
        int32_t x = in[b * T + i];
        shifted &= tg[b * T + i] == x + 1;
        if (i) shifted &= x == in[b * T + i - 1] + 1;
        in_train &= x >= 0 && tg[b * T + i] < n_train;
      }
    offsets_vary |= S1->offset != first_offset;
  }
  CHECK(remat__heap_live() == live); /* next() never allocates */
  CHECK(same && differ && shifted && in_train);
  CHECK(S1->epoch > 5 && offsets_vary);
}

/* One epoch serves every window once; reset replays from the first batch. */
static void loader_epoch(remat_loader *S1, remat_loader *S2) {
  int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
  remat_loader_reset(S1);
  int64_t W1 = S1->num_windows, off = S1->offset;
  char *seen = calloc((size_t)W1, 1);
  int once = 1;
  for (int64_t r = 0; r + B <= W1; r += B) {
    remat_loader_next(S1, in, tg);
    for (int b = 0; b < B; b++) {
      int64_t start = in[b * T] - off;
      once &= start % T == 0 && start / T < W1 && !seen[start / T];
      if (start % T == 0 && start / T < W1) seen[start / T] = 1;
    }
  }
  CHECK(once);
  free(seen);
  /* reset replays from the first batch */
  remat_loader_reset(S1);
  remat_loader_reset(S2);
  remat_loader_next(S1, in, tg);
  remat_loader_next(S2, in2, tg2);
  CHECK(memcmp(in, in2, sizeof in) == 0);
}

/* Three shuffled loaders over the training split, two with the same seed. */
static void loader_shuffled(remat_tokens *t, int64_t n_train) {
  remat_error err = {0};
  remat_loader *S1, *S2, *S3;
  CHECK(remat_loader_create(&S1, t, B, T, REMAT_SPLIT_TRAIN, 0.1, 1, 42, &err) == 0);
  CHECK(remat_loader_create(&S2, t, B, T, REMAT_SPLIT_TRAIN, 0.1, 1, 42, &err) == 0);
  CHECK(remat_loader_create(&S3, t, B, T, REMAT_SPLIT_TRAIN, 0.1, 1, 43, &err) == 0);
  loader_stream(S1, S2, S3, n_train);
  loader_epoch(S1, S2);
  remat_loader_destroy(S1);
  remat_loader_destroy(S2);
  remat_loader_destroy(S3);
}

/* Validation: only the last 10%, disjoint from training, in order and
 * shuffled. */
static void loader_validation(remat_tokens *t, int64_t n_val, int64_t n_train) {
  remat_error err = {0};
  int32_t in[B * T], tg[B * T];
  remat_loader *V;
  CHECK(remat_loader_create(&V, t, B, T, REMAT_SPLIT_VAL, 0.1, 0, 0, &err) == 0);
  CHECK(V->n == n_val);
  int in_val = 1;
  for (int step = 0; step < 50; step++) {
    remat_loader_next(V, in, tg);
    for (int i = 0; i < B * T; i++) in_val &= in[i] >= n_train && tg[i] < N && tg[i] == in[i] + 1;
  }
  CHECK(in_val);
  remat_loader_destroy(V);
  CHECK(remat_loader_create(&V, t, B, T, REMAT_SPLIT_VAL, 0.1, 1, 9, &err) == 0);
  in_val = 1;
  for (int step = 0; step < 50; step++) {
    remat_loader_next(V, in, tg);
    for (int i = 0; i < B * T; i++) in_val &= in[i] >= n_train && tg[i] < N;
  }
  CHECK(in_val);
  remat_loader_destroy(V);
}

/* A split of exactly T+1 tokens works (one window: rows repeat within a
 * batch); one fewer, an empty or whole validation split, B = 0 and an
 * unknown split are refused. */
static void loader_limits(remat_tokens *t) {
  remat_error err = {0};
  int32_t in[B * T], tg[B * T];
  remat_loader *V;
  remat_tokens small = {.tok = t->tok, .n = T + 1, .max_id = T};
  CHECK(remat_loader_create(&V, &small, B, T, REMAT_SPLIT_TRAIN, 0.0, 1, 5, &err) == 0);
  CHECK(remat_loader_windows(V) == 1); /* < B: rows repeat within a batch */
  remat_loader_next(V, in, tg);
  int ok = 1;
  for (int i = 0; i < B * T; i++) ok &= in[i] == i % T && tg[i] == i % T + 1;
  CHECK(ok);
  remat_loader_destroy(V);
  small.n = T;
  int rc = remat_loader_create(&V, &small, B, T, REMAT_SPLIT_TRAIN, 0.0, 0, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "needs 17");
  rc = remat_loader_create(&V, t, B, T, REMAT_SPLIT_VAL, 0.0, 0, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "validation split has 0 tokens");
  rc = remat_loader_create(&V, t, B, T, REMAT_SPLIT_VAL, 1.0, 0, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "[0, 1)");
  rc = remat_loader_create(&V, t, 0, T, REMAT_SPLIT_TRAIN, 0.1, 0, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "B=0");
  rc = remat_loader_create(&V, t, B, T, 2, 0.1, 0, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "split 2");
}

static void test_loader(void) {
  remat_tokens t = {.n = N, .max_id = N - 1};
  t.tok = malloc(N * sizeof(int32_t));
  for (int i = 0; i < N; i++) t.tok[i] = i; /* a token is its own position */
  const int64_t n_val = (int64_t)floor(0.1 * N), n_train = N - n_val;
  loader_sequential(&t, n_train);
  loader_shuffled(&t, n_train);
  loader_validation(&t, n_val, n_train);
  loader_limits(&t);
  free(t.tok);
}

int main(int argc, char **argv) {
  dir = test_scratch_begin("test_io", argc < 2 ? NULL : argv[1]);
  if (!dir) return 2;
  size_t live = remat__heap_live();
  test_shards();
  test_text();
  test_checkpoints();
  test_checkpoint_reader();
  test_saves();
  test_corpus();
  test_loader();
  CHECK(remat__heap_live() == live); /* every library allocation was released */
  test_scratch_end();
  return test_summary("test_io");
}
