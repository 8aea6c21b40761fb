/* test_ckpt.c: self-checking checkpoint directories and the one rule for
 * opening paths.
 *
 * Checkpoints: a sealed directory verifies; a model.bin corrupted at any of
 * several offsets, a truncated, missing or unlisted file, a damaged DONE and
 * every way of mixing model.bin, state.bin and DONE across steps and runs
 * fail, naming the file and what differs; remat_checkpoint_find falls back
 * to the newest directory that verifies and says what it passed over; an
 * old one-line DONE is accepted unverified.
 *
 * Paths: FIFOs, symlinks to FIFOs and directories are refused by every
 * reader and writer without blocking (alarm() turns a hang into a failure);
 * the atomic writer keeps long names within NAME_MAX and writes through
 * symlinks; with SIGXFSZ ignored a file size limit is an error and no
 * temporary is left. CRC32C: the standard check value, and the SSE4.2 path
 * equals the table.
 *
 * Usage: test_ckpt   (works in a fresh directory under /tmp, removed at the end) */
#define _DEFAULT_SOURCE /* mkdtemp, symlink */
#define REMAT_TEST_FILES
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"
#include "test_util.h"

static const char *dir; /* the scratch directory */

/* ---------------------------------------------------------- checksum */

static void test_crc(void) {
  CHECKF(remat_crc32c(0, "123456789", 9) == 0xe3069283u, "CRC32C of \"123456789\" is e3069283");
  CHECK(remat__crc32c_soft(0, "123456789", 9) == 0xe3069283u);
  CHECK(remat_crc32c(0, "", 0) == 0);
  unsigned char buf[1000];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
  int same = 1;
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n + off <= sizeof buf; n += 37)
      same &= remat_crc32c(0, buf + off, n) == remat__crc32c_soft(0, buf + off, n);
  /* continuing: crc(a then b) == crc(ab) */
  same &= remat_crc32c(remat_crc32c(0, buf, 300), buf + 300, 700) == remat_crc32c(0, buf, 1000);
  CHECKF(same, "CRC32C: %s path equals the table at every offset and length",
         remat__crc32c_hw_used == 1 ? "the SSE4.2" : "the table");
}

/* ------------------------------------------------------- checkpoints */

static const remat_config cfg = {.max_seq_len = 8, .vocab_size = 16, .padded_vocab_size = 16,
                                 .num_layers = 1, .num_heads = 2, .channels = 8};

/* root/step_NNNNNNNN with model.bin and `ranks` state files of a run with
 * this seed at this step, sealed. Weights and moments depend on both. */
static void make_ckpt(const char *root, int64_t step, uint64_t seed, int ranks, int seal) {
  char sdir[600], path[700];
  remat_error err = {0};
  CHECK(remat_checkpoint_dir_path(sdir, sizeof sdir, root, step, NULL) == 0);
  mkdir(root, 0777);
  mkdir(sdir, 0777);
  size_t np = remat_param_count(&cfg);
  float *w = malloc(np * sizeof *w);
  for (size_t i = 0; i < np; i++)
    w[i] = (float)((i * 7 + seed * 13 + (uint64_t)step * 29) % 101) / 101.0f;
  snprintf(path, sizeof path, "%s/model.bin", sdir);
  CHECK(remat_checkpoint_save(path, &cfg, w, &err) == 0);
  for (int r = 0; r < ranks; r++) {
    remat_state_header h = {.step = step, .num_params = 16, .rank = r, .ranks = ranks, .L = 1,
                            .C = 8, .NH = 2, .V = 16, .maxT = 8, .B = 2, .T = 4, .grad_accum = 1,
                            .steps = 100, .seed = seed, .data_tokens = 1000, .replicas = 1};
    if (ranks > 1) snprintf(path, sizeof path, "%s/state_rank_%d.bin", sdir, r);
    else snprintf(path, sizeof path, "%s/state.bin", sdir);
    CHECK(remat_state_save(path, &h, w, w + 16, &err) == 0);
  }
  free(w);
  if (seal) {
    int rc = remat_checkpoint_seal(sdir, step, NULL, &err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  seal: %s\n", err.msg);
  }
}

static int verify(const char *sdir, int64_t step, remat_error *err) {
  *err = (remat_error){0};
  return remat_checkpoint_verify(sdir, step, NULL, err);
}

/* The result of verifying after one change, then the change undone. */
#define EXPECT_BAD(sdir, step, word1, word2, what)                                      \
  do {                                                                                  \
    remat_error e_;                                                                     \
    int rc_ = verify(sdir, step, &e_);                                                  \
    int okb_ = rc_ == REMAT_EFORMAT && strstr(e_.msg, word1) && strstr(e_.msg, word2);   \
    CHECKF(okb_, "%s: refused naming '%s', '%s'", what, word1, word2);                   \
    if (!okb_) fprintf(stderr, "  got %s: %s\n", remat_err_name(rc_), e_.msg);           \
  } while (0)

/* A sealed checkpoint verifies, and its DONE lists its files. */
static void verify_sealed(const char *a4, remat_checkpoint_info *info) {
  remat_error err = {0};
  int rc = remat_checkpoint_verify(a4, 4, info, &err);
  CHECKF(rc == 0 && info->verified == 1 && info->step == 4 && info->ranks == 1 &&
             info->run.seed == 1,
         "a sealed checkpoint verifies (step 4, 1 rank, seed 1)");
  if (rc) fprintf(stderr, "  %s\n", err.msg);
  size_t n;
  uint8_t *done = test_read_file(test_path("runA/step_00000004/DONE"), &n);
  CHECK(done && n > 20 && !memcmp(done, "remat checkpoint 1\nstep 4\n", 26));
  CHECK(done && strstr((char *)done, "file model.bin ") && strstr((char *)done, "file state.bin "));
  free(done);
}

/* model.bin corrupted at several offsets: the header, the first weight,
 * the middle, the last byte; then truncated. It is kept in model.keep. */
static void verify_model_damage(const char *a4) {
  remat_error err = {0};
  const char *model = test_path("runA/step_00000004/model.bin");
  const char *keep = test_path("model.keep");
  size_t n;
  test_copy_file(model, keep);
  uint8_t *m = test_read_file(model, &n);
  size_t offs[] = {0, 8, REMAT_HEADER_BYTES, REMAT_HEADER_BYTES + 3, n / 2, n - 1};
  for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
    m[offs[i]] ^= 0x40;
    test_write_file(model, m, n);
    m[offs[i]] ^= 0x40;
    char what[64];
    snprintf(what, sizeof what, "model.bin with byte %zu flipped", offs[i]);
    EXPECT_BAD(a4, 4, "model.bin", "checksum differs", what);
  }
  test_write_file(model, m, n - 1);
  EXPECT_BAD(a4, 4, "model.bin", "size differs", "model.bin truncated by one byte");
  test_write_file(model, m, n);
  CHECK(verify(a4, 4, &err) == 0);
  free(m);
}

/* state.bin flipped, truncated or missing, and model.bin missing. state.bin
 * is kept in state.keep. */
static void verify_state_damage(const char *a4) {
  remat_error err = {0};
  const char *model = test_path("runA/step_00000004/model.bin");
  const char *state = test_path("runA/step_00000004/state.bin");
  const char *keep = test_path("model.keep");
  const char *skeep = test_path("state.keep");
  size_t n;
  test_copy_file(state, skeep);
  uint8_t *s = test_read_file(state, &n);
  s[n - 20] ^= 1;
  test_write_file(state, s, n);
  EXPECT_BAD(a4, 4, "state.bin", "checksum differs", "state.bin with a moment flipped");
  test_write_file(state, s, n / 2);
  EXPECT_BAD(a4, 4, "state.bin", "size differs", "state.bin truncated to half");
  free(s);
  remove(state);
  EXPECT_BAD(a4, 4, "state.bin", "missing", "state.bin missing");
  test_copy_file(skeep, state);
  remove(model);
  EXPECT_BAD(a4, 4, "model.bin", "missing", "model.bin missing");
  test_copy_file(keep, model);
  CHECK(verify(a4, 4, &err) == 0);
}

/* A state file that DONE does not list, and a file remat does not read. */
static void verify_unlisted(const char *a4) {
  remat_error err = {0};
  const char *skeep = test_path("state.keep");
  const char *extra = test_path("runA/step_00000004/state_rank_1.bin");
  test_copy_file(skeep, extra);
  EXPECT_BAD(a4, 4, "state_rank_1.bin", "not listed", "an unlisted state_rank_1.bin beside them");
  remove(extra);
  /* files remat does not read are left alone */
  test_write_file(test_path("runA/step_00000004/notes.txt"), "hi\n", 3);
  CHECKF(verify(a4, 4, &err) == 0, "an unrelated file in the directory is ignored");
  remove(test_path("runA/step_00000004/notes.txt"));
}

/* Every file from step 2 of this run, and from step 4 of another; then
 * DONE and one other file from step 2, so the third does not match. */
static void verify_mixed(const char *a2, const char *a4, const char *b4) {
  remat_error err = {0};
  struct {
    const char *from, *file, *word1, *word2, *what;
  } mix[] = {
      {a2, "model.bin", "model.bin", "checksum differs", "model.bin of step 2 with step 4's state"},
      {a2, "state.bin", "state.bin", "checksum differs", "state.bin of step 2 with step 4's model"},
      {b4, "model.bin", "model.bin", "checksum differs", "model.bin of another seed's run"},
      {b4, "state.bin", "state.bin", "checksum differs", "state.bin of another seed's run"},
      {a2, "DONE", "step 2, not 4", "copied", "DONE of step 2 with step 4's files"},
      {b4, "DONE", "checksum differs", "", "DONE of another run with this run's files"},
  };
  char from[1100], to[1024];
  for (size_t i = 0; i < sizeof mix / sizeof *mix; i++) {
    snprintf(from, sizeof from, "%s/%s", mix[i].from, mix[i].file);
    snprintf(to, sizeof to, "%s/%s", a4, mix[i].file);
    test_copy_file(to, test_path("mix.keep"));
    test_copy_file(from, to);
    EXPECT_BAD(a4, 4, mix[i].word1, mix[i].word2, mix[i].what);
    test_copy_file(test_path("mix.keep"), to);
  }
  /* two files (DONE and one other) from step 2: the third does not match */
  const char *pairs[][2] = {{"DONE", "model.bin"}, {"DONE", "state.bin"}};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 2; k++) {
      snprintf(to, sizeof to, "%s/%s", a4, pairs[i][k]);
      snprintf(from, sizeof from, "%s.keep%d", to, k);
      test_copy_file(to, from);
      snprintf(from, sizeof from, "%s/%s", a2, pairs[i][k]);
      test_copy_file(from, to);
    }
    const char *other = i == 0 ? "state.bin" : "model.bin";
    char what[96];
    snprintf(what, sizeof what, "DONE and %s of step 2 with step 4's %s", pairs[i][1], other);
    EXPECT_BAD(a4, -1, other, i == 0 ? "differs" : "checksum differs", what);
    for (int k = 0; k < 2; k++) {
      snprintf(to, sizeof to, "%s/%s", a4, pairs[i][k]);
      snprintf(from, sizeof from, "%s.keep%d", to, k);
      test_copy_file(from, to);
      remove(from);
    }
  }
  CHECK(verify(a4, 4, &err) == 0);
}

/* The states' own headers: a DONE whose checksums are right but whose
 * step or run is not the state's (what a hand-made or buggy DONE says).
 * DONE is kept in done.keep. */
static void verify_state_headers(const char *a4, uint64_t settings) {
  const char *model = test_path("runA/step_00000004/model.bin");
  const char *state = test_path("runA/step_00000004/state.bin");
  size_t mn, sn;
  uint8_t *mb = test_read_file(model, &mn), *sb = test_read_file(state, &sn);
  char text[1024];
  const char *cases[][3] = {{"4", "2", "is from another run"}, {"6", "1", "is from step 4"}};
  for (int i = 0; i < 2; i++) {
    int len = snprintf(text, sizeof text,
                       "remat checkpoint 1\nstep %s\nseed %s\nsettings %016llx\n"
                       "file model.bin %zu %08x\nfile state.bin %zu %08x\n",
                       cases[i][0], cases[i][1], (unsigned long long)settings, mn,
                       (unsigned)remat_crc32c(0, mb, mn), sn, (unsigned)remat_crc32c(0, sb, sn));
    len += snprintf(text + len, sizeof text - (size_t)len, "crc %08x\n",
                    (unsigned)remat_crc32c(0, text, (size_t)len));
    test_copy_file(test_path("runA/step_00000004/DONE"), test_path("done.keep"));
    test_write_file(test_path("runA/step_00000004/DONE"), text, (size_t)len);
    EXPECT_BAD(a4, -1, "state.bin", cases[i][2], cases[i][2]);
    test_copy_file(test_path("done.keep"), test_path("runA/step_00000004/DONE"));
  }
  free(mb);
  free(sb);
}

/* DONE itself damaged: one byte of a listed checksum changed, or cut
 * short. */
static void verify_done_damage(const char *a4) {
  remat_error err = {0};
  size_t n;
  const char *dp = test_path("runA/step_00000004/DONE");
  uint8_t *d = test_read_file(dp, &n);
  char *f = strstr((char *)d, "file model.bin ");
  f[strlen("file model.bin ")] ^= 1; /* a digit of the size */
  test_write_file(dp, d, n);
  EXPECT_BAD(a4, 4, "DONE", "damaged", "DONE with one byte changed");
  test_write_file(dp, d, n - 5);
  EXPECT_BAD(a4, 4, "DONE", "crc line", "DONE cut short");
  test_copy_file(test_path("done.keep"), dp);
  free(d);
  CHECK(verify(a4, 4, &err) == 0);
}

/* Sealing refuses a directory whose states are not one run at one step. */
static void verify_seal_refusals(const char *a4, remat_run_id runA) {
  remat_error err = {0};
  const char *state = test_path("runA/step_00000004/state.bin");
  const char *skeep = test_path("state.keep");
  int rc;
  test_copy_file(test_path("runB/step_00000004/state.bin"), state);
  rc = remat_checkpoint_seal(a4, 4, &runA, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "seed 2");
  rc = remat_checkpoint_seal(a4, 6, NULL, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "at step 4");
  test_copy_file(skeep, state);
  remove(state);
  rc = remat_checkpoint_seal(a4, 4, NULL, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "state.bin");
  test_copy_file(skeep, state);
  CHECK(verify(a4, 4, &err) == 0);
}

/* Several ranks; the old marker, accepted and marked unverified
 * (remat_write_marker on a checkpoint's DONE writes the manifest); and a
 * checkpoint written again: dir_make clears what an earlier attempt left
 * (three ranks' states, then one process). */
static void verify_ranks_and_markers(void) {
  remat_error err = {0};
  remat_checkpoint_info info;
  size_t n;
  int rc;
  uint8_t *done;
  /* several ranks */
  const char *C = test_path("runC");
  make_ckpt(C, 3, 5, 3, 1);
  const char *c3 = test_path("runC/step_00000003");
  rc = remat_checkpoint_verify(c3, 3, &info, &err);
  CHECKF(rc == 0 && info.ranks == 3, "three ranks' states sealed and verified");
  test_copy_file(test_path("runC/step_00000003/state_rank_0.bin"),
       test_path("runC/step_00000003/state_rank_1.bin"));
  EXPECT_BAD(c3, 3, "state_rank_1.bin", "checksum differs", "rank 0's state as rank 1's");

  /* the old marker: accepted, marked unverified; remat_write_marker on a
   * checkpoint's DONE writes the manifest */
  const char *D = test_path("runD");
  make_ckpt(D, 1, 9, 1, 0);
  test_write_file(test_path("runD/step_00000001/DONE"), "done\n", 5);
  rc = remat_checkpoint_verify(test_path("runD/step_00000001"), 1, &info, &err);
  CHECKF(rc == 0 && info.verified == 0 && info.step == 1,
         "an old one-line DONE is accepted with verified = 0");
  rc = remat_write_marker(test_path("runD/step_00000001/DONE"), &err);
  CHECK(rc == 0);
  rc = remat_checkpoint_verify(test_path("runD/step_00000001"), 1, &info, &err);
  CHECKF(rc == 0 && info.verified == 1 && info.run.seed == 9,
         "remat_write_marker on step_N/DONE seals the directory");
  rc = remat_write_marker(test_path("marker"), &err);
  CHECK(rc == 0);
  done = test_read_file(test_path("marker"), &n);
  CHECK(n == 5 && !memcmp(done, "done\n", 5));
  free(done);

  /* writing a checkpoint again: dir_make clears what an earlier attempt
   * left (here three ranks' states, now one process) */
  rc = remat_checkpoint_dir_make(C, 3, &err);
  CHECK(rc == 0);
  CHECKF(access(test_path("runC/step_00000003/state_rank_2.bin"), F_OK) != 0 &&
             access(test_path("runC/step_00000003/DONE"), F_OK) != 0,
         "dir_make removes DONE and the states of an earlier attempt");
  make_ckpt(C, 3, 5, 1, 1);
  CHECKF(remat_checkpoint_verify(c3, 3, &info, &err) == 0 && info.ranks == 1,
         "the step rewritten by one process verifies");
}

static void test_verify(void) {
  remat_checkpoint_info info;
  const char *A = test_path("runA"), *B = test_path("runB");
  make_ckpt(A, 2, 1, 1, 1);
  make_ckpt(A, 4, 1, 1, 1);
  make_ckpt(B, 4, 2, 1, 1);
  const char *a2 = test_path("runA/step_00000002"), *a4 = test_path("runA/step_00000004");
  const char *b4 = test_path("runB/step_00000004");
  verify_sealed(a4, &info);
  verify_model_damage(a4);
  verify_state_damage(a4);
  verify_unlisted(a4);
  verify_mixed(a2, a4, b4);
  verify_state_headers(a4, info.run.settings);
  verify_done_damage(a4);
  verify_seal_refusals(a4, info.run);
  verify_ranks_and_markers();

  int64_t step = -1;
  CHECK(remat_checkpoint_step_of("a/b/step_00000004/", &step) == 0 && step == 4);
  CHECK(remat_checkpoint_step_of("step_12", &step) == 0 && step == 12);
  CHECK(remat_checkpoint_step_of("a/step_x", &step) == REMAT_EINVAL);
  CHECK(remat_checkpoint_step_of("a/step_", &step) == REMAT_EINVAL);
  remove(test_path("model.keep"));
  remove(test_path("state.keep"));
}

static void test_find(void) {
  remat_error err = {0};
  remat_checkpoint_info info;
  char skipped[1024];
  const char *R = test_path("fall");
  make_ckpt(R, 2, 3, 1, 1);
  make_ckpt(R, 4, 3, 1, 1);
  make_ckpt(R, 6, 3, 1, 1);
  make_ckpt(R, 8, 3, 1, 0); /* killed before DONE: not a checkpoint */
  int rc = remat_checkpoint_find(R, &info, skipped, sizeof skipped, &err);
  CHECKF(rc == 0 && info.step == 6 && info.skipped == 0 && skipped[0] == 0,
         "find: the newest complete checkpoint (6; 8 has no DONE)");
  /* corrupt 6's weights and 4's state: back to 2, saying why */
  const char *m6 = test_path("fall/step_00000006/model.bin");
  size_t n;
  uint8_t *b = test_read_file(m6, &n);
  b[n / 3] ^= 0x10;
  test_write_file(m6, b, n);
  free(b);
  remove(test_path("fall/step_00000004/state.bin"));
  rc = remat_checkpoint_find(R, &info, skipped, sizeof skipped, &err);
  CHECKF(rc == 0 && info.step == 2 && info.skipped == 2,
         "find falls back from 6 and 4 to 2, the newest that verifies");
  CHECKF(strstr(skipped, "step_00000006: model.bin checksum differs") &&
             strstr(skipped, "step_00000004: state.bin is missing"),
         "find says what it passed over: %s", skipped);
  int64_t step = -1;
  CHECK(remat_checkpoint_dir_latest(R, &step, &err) == 0 && step == 2);
  /* nothing verifies */
  remove(test_path("fall/step_00000002/model.bin"));
  rc = remat_checkpoint_find(R, &info, NULL, 0, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "no checkpoint in");
  CHECK(strstr(err.msg, "step_00000006: model.bin checksum differs") != NULL);
  /* nothing complete */
  const char *E = test_path("empty");
  mkdir(E, 0777);
  rc = remat_checkpoint_find(E, &info, NULL, 0, &err);
  CHECK_ERR(rc, err, REMAT_EINVAL, "no complete checkpoint");
  rc = remat_checkpoint_find(test_path("missing"), &info, NULL, 0, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "missing");
}

/* --------------------------------------------------------- special paths */

static void test_special(void) {
  remat_error err = {0};
  const char *fifo = test_path("fifo"), *lfifo = test_path("link-to-fifo");
  const char *sub = test_path("subdir"), *file = test_path("plain");
  CHECK(mkfifo(fifo, 0666) == 0);
  CHECK(symlink(fifo, lfifo) == 0);
  mkdir(sub, 0777);
  test_write_file(file, "x", 1);
  const char *bad[] = {fifo, lfifo, sub};
  const char *kind[] = {"FIFO", "FIFO", "directory"};
  for (int i = 0; i < 3; i++) {
    remat_tokens t = {0};
    remat_state_header h;
    float mv[2];
    int rc = remat_tokens_load(&t, bad[i], &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "token shard reader refuses %s (%s)",
           bad[i] + strlen(dir) + 1, err.msg);
    rc = remat_tokens_from_text(&t, bad[i], &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "text reader refuses %s",
           bad[i] + strlen(dir) + 1);
    remat_checkpoint_reader rd;
    rc = remat_checkpoint_reader_open(&rd, bad[i], NULL, &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "checkpoint reader refuses %s",
           bad[i] + strlen(dir) + 1);
    remat_checkpoint_reader_free(&rd);
    rc = remat_state_load(bad[i], &h, mv, mv + 1, 1, &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "state reader refuses %s",
           bad[i] + strlen(dir) + 1);
    rc = remat_state_peek(bad[i], &h, &err);
    CHECK_ERR(rc, err, REMAT_EIO, kind[i]);
    remat_plan_problem pb;
    rc = remat_plan_problem_load(&pb, bad[i], &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "problem JSON reader refuses %s",
           bad[i] + strlen(dir) + 1);
    remat_plan_layout lo;
    rc = remat_plan_layout_load(&lo, bad[i], &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "plan JSON reader refuses %s",
           bad[i] + strlen(dir) + 1);
    /* writers */
    FILE *f = remat_output_stream_open(bad[i], "log", &err);
    CHECKF(!f && err.code == REMAT_EIO && strstr(err.msg, kind[i]),
           "stream writer (log, trace) refuses %s", bad[i] + strlen(dir) + 1);
    if (f) fclose(f);
    rc = remat_save_bytes(bad[i], "plan", "{}\n", 3, &err);
    CHECKF(rc == REMAT_EIO && strstr(err.msg, kind[i]), "atomic writer refuses %s",
           bad[i] + strlen(dir) + 1);
    rc = remat_output_check(bad[i], &err);
    CHECK_ERR(rc, err, REMAT_EIO, kind[i]);
  }
  struct stat st;
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  CHECK(lstat(lfifo, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(test_count_temps(dir) == 0);

  /* a checkpoint directory whose files are FIFOs */
  const char *F = test_path("fifock");
  make_ckpt(F, 1, 4, 1, 1);
  const char *sd = test_path("fifock/step_00000001");
  remove(test_path("fifock/step_00000001/model.bin"));
  CHECK(mkfifo(test_path("fifock/step_00000001/model.bin"), 0666) == 0);
  int rc = verify(sd, 1, &err);
  CHECKF(rc == REMAT_EIO && strstr(err.msg, "FIFO"), "verify refuses a model.bin that is a FIFO");
  remove(test_path("fifock/step_00000001/DONE"));
  CHECK(mkfifo(test_path("fifock/step_00000001/DONE"), 0666) == 0);
  rc = verify(sd, 1, &err);
  CHECKF(rc == REMAT_EIO && strstr(err.msg, "FIFO"), "verify refuses a DONE that is a FIFO");
  remat_checkpoint_info info;
  rc = remat_checkpoint_find(F, &info, NULL, 0, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "FIFO");
  rc = remat_checkpoint_find(fifo, &info, NULL, 0, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "not a directory");

  /* directory outputs */
  rc = remat_output_dir_check(fifo, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "not a directory");
  rc = remat_output_dir_check(file, &err);
  CHECK_ERR(rc, err, REMAT_EIO, "not a directory");
  rc = remat_output_dir_check(test_path("no/such/parent"), &err);
  CHECK_ERR(rc, err, REMAT_EIO, "cannot create");
  const char *nd = test_path("newdir");
  rc = remat_output_dir_check(nd, &err);
  CHECKF(rc == 0 && stat(nd, &st) == 0 && S_ISDIR(st.st_mode),
         "a missing checkpoint directory is created by the check");
  CHECK(remat_output_dir_check(nd, &err) == 0);
  DIR *dd = opendir(nd);
  int entries = 0;
  for (struct dirent *e; dd && (e = readdir(dd));)
    entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  if (dd) closedir(dd);
  CHECKF(entries == 0, "the check leaves nothing in the directory");
  if (geteuid() != 0) {
    const char *ro = test_path("readonly");
    mkdir(ro, 0555);
    rc = remat_output_dir_check(ro, &err);
    CHECK_ERR(rc, err, REMAT_EIO, "writable");
  }
}

static void test_writer(void) {
  remat_error err = {0};
  /* a name of NAME_MAX bytes: the temporary beside it must still fit */
  char name[NAME_MAX + 1];
  memset(name, 'n', NAME_MAX);
  name[NAME_MAX] = 0;
  const char *longp = test_path("%s", name);
  int rc = remat_save_bytes(longp, "plan", "abc\n", 4, &err);
  size_t n;
  uint8_t *b = test_read_file(longp, &n);
  CHECKF(rc == 0 && n == 4 && !memcmp(b, "abc\n", 4) && test_count_temps(dir) == 0,
         "a save to a %d-byte name succeeds and leaves no temporary", NAME_MAX);
  if (rc) fprintf(stderr, "  %s\n", err.msg);
  free(b);
  FILE *f = remat_output_stream_open(longp, "log", &err);
  CHECK(f != NULL);
  if (f) fclose(f);
  remove(longp);

  /* symlinks are written through: the link stays, its target is replaced */
  const char *target = test_path("real.json"), *link = test_path("link.json");
  test_write_file(target, "old\n", 4);
  CHECK(symlink("real.json", link) == 0);
  rc = remat_save_bytes(link, "plan", "new\n", 4, &err);
  struct stat st;
  b = test_read_file(target, &n);
  CHECKF(rc == 0 && lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && n == 4 &&
             !memcmp(b, "new\n", 4),
         "a save through a symlink replaces its target and keeps the link");
  free(b);
  f = remat_output_stream_open(link, "log", &err);
  CHECK(f != NULL);
  if (f) {
    fputs("log\n", f);
    fclose(f);
  }
  b = test_read_file(target, &n);
  CHECKF(lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && n == 4 && !memcmp(b, "log\n", 4),
         "a log opened through a symlink writes its target");
  free(b);
  /* a dangling link gets its target created */
  const char *dang = test_path("dangling");
  CHECK(symlink("created.txt", dang) == 0);
  CHECK(remat_save_bytes(dang, "plan", "x", 1, &err) == 0);
  CHECK(stat(test_path("created.txt"), &st) == 0 && S_ISREG(st.st_mode));

  /* a file size limit: with SIGXFSZ ignored the save fails with a message
   * and removes its temporary (in a child: the limit is the process's) */
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit rl = {.rlim_cur = 1000, .rlim_max = RLIM_INFINITY};
    remat_ignore_sigxfsz();
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    static char big[5000];
    remat_error e = {0};
    int r = remat_save_bytes(test_path("big.bin"), "checkpoint", big, sizeof big, &e);
    int ok = r == REMAT_EIO && strstr(e.msg, "ulimit -f") && test_count_temps(dir) == 0 &&
             access(test_path("big.bin"), F_OK) != 0;
    if (!ok) fprintf(stderr, "  child: %s\n", e.msg);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "under ulimit -f a save fails with EFBIG, names the limit, leaves no temporary "
         "(status %d)",
         status);
}

int main(void) {
  /* a reader or writer that blocks on a FIFO must fail the test, not hang it */
  alarm(50);
  dir = test_scratch_begin("test_ckpt", NULL);
  if (!dir) return 2;
  test_crc();
  test_verify();
  test_find();
  test_special();
  test_writer();
  if (test_scratch_end() != 0) fprintf(stderr, "could not remove %s\n", dir);
  return test_summary("test_ckpt");
}
