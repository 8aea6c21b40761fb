/* state.c: the training state file, what a run needs besides the weights to
 * go on exactly where it stopped: AdamW's moments, the step, the loader's
 * position, and the settings and shapes a resumed run must share.
 *
 * Layout (little endian): a header of REMAT_STATE_FIELDS int64 (magic,
 * version, then the fields of remat_state_header in order), then num_params
 * float32 of m, then num_params of v, then a 64-bit FNV-1a checksum of all
 * the bytes before it. Written like every save: a private temporary, synced,
 * renamed over the destination. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"

#define STATE_MAGIC 0x3154535441524552ll /* "REMATST1" */
#define STATE_VERSION 1

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The header's fields as int64, in file order. */
#define FIELDS(X)                                                                         \
  X(step) X(num_params) X(rank) X(ranks) X(first_block) X(num_blocks) X(has_embedding)    \
  X(has_head) X(L) X(C) X(NH) X(V) X(maxT) X(B) X(T) X(grad_accum) X(steps) X(warmup)     \
  X(cosine) X(seed) X(lr_bits) X(dropout_bits) X(wd_bits) X(clip_bits) X(shuffle)          \
  X(loader_epoch) X(loader_cursor) X(loader_rng) X(data_tokens) X(replicas) X(zero)

static void to_words(const remat_state_header *h, int64_t *w) {
  int k = 0;
  w[k++] = STATE_MAGIC;
  w[k++] = STATE_VERSION;
#define X(f) w[k++] = (int64_t)h->f;
  FIELDS(X)
#undef X
  while (k < REMAT_STATE_FIELDS) w[k++] = 0;
}

static void from_words(const int64_t *w, remat_state_header *h) {
  int k = 2;
#define X(f) h->f = (__typeof__(h->f))w[k++];
  FIELDS(X)
#undef X
}

int remat_state_save(const char *path, const remat_state_header *h, const float *m,
                     const float *v, remat_error *err) {
  int64_t words[REMAT_STATE_FIELDS];
  to_words(h, words);
  uint64_t sum = fnv(1469598103934665603ull, words, sizeof words);
  size_t bytes = (size_t)h->num_params * sizeof(float);
  sum = fnv(fnv(sum, m, bytes), v, bytes);
  remat__wfile w;
  int rc = remat__wfile_open(&w, path, "training state", err);
  if (rc) return rc;
  if ((rc = remat__wfile_write(&w, words, sizeof words, err)) ||
      (rc = remat__wfile_write(&w, m, bytes, err)) || (rc = remat__wfile_write(&w, v, bytes, err)) ||
      (rc = remat__wfile_write(&w, &sum, sizeof sum, err))) {
    remat__wfile_abort(&w);
    return rc;
  }
  return remat__wfile_commit(&w, err);
}

static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n) {
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    p += got;
    n -= (size_t)got;
  }
  return 0;
}

int remat_state_load(const char *path, remat_state_header *h, float *m, float *v,
                     size_t num_params, remat_error *err) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return remat__errorf(err, REMAT_EIO, "cannot open training state '%s': %s", path,
                         strerror(errno));
  struct stat st;
  int64_t words[REMAT_STATE_FIELDS];
  int rc = 0;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || read_all(fd, words, sizeof words)) {
    rc = remat__errorf(err, REMAT_EFORMAT, "training state '%s' is not a regular file or is "
                       "truncated", path);
    goto out;
  }
  if (words[0] != STATE_MAGIC || words[1] != STATE_VERSION) {
    rc = remat__errorf(err, REMAT_EFORMAT, "'%s' is not a remat training state (version %d)",
                       path, STATE_VERSION);
    goto out;
  }
  from_words(words, h);
  size_t bytes = (size_t)h->num_params * sizeof(float);
  if (h->num_params < 0 || (size_t)h->num_params != num_params ||
      (size_t)st.st_size != sizeof words + 2 * bytes + sizeof(uint64_t)) {
    rc = remat__errorf(err, REMAT_ESHAPE,
                       "training state '%s' holds %lld parameters' moments in %lld bytes; this "
                       "model (or stage) has %zu parameters",
                       path, (long long)h->num_params, (long long)st.st_size, num_params);
    goto out;
  }
  uint64_t sum, want = fnv(1469598103934665603ull, words, sizeof words);
  if (read_all(fd, m, bytes) || read_all(fd, v, bytes) || read_all(fd, &sum, sizeof sum)) {
    rc = remat__errorf(err, REMAT_EIO, "cannot read training state '%s'", path);
    goto out;
  }
  want = fnv(fnv(want, m, bytes), v, bytes);
  if (sum != want)
    rc = remat__errorf(err, REMAT_EFORMAT, "training state '%s' is corrupt (checksum)", path);
out:
  close(fd);
  return rc;
}

int remat_state_peek(const char *path, remat_state_header *h, remat_error *err) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return remat__errorf(err, REMAT_EIO, "cannot open training state '%s': %s", path,
                         strerror(errno));
  int64_t words[REMAT_STATE_FIELDS];
  int rc = read_all(fd, words, sizeof words) || words[0] != STATE_MAGIC ||
                   words[1] != STATE_VERSION
               ? remat__errorf(err, REMAT_EFORMAT, "'%s' is not a remat training state", path)
               : 0;
  if (!rc) from_words(words, h);
  close(fd);
  return rc;
}

int remat_write_marker(const char *path, remat_error *err) {
  remat__wfile w;
  int rc = remat__wfile_open(&w, path, "marker", err);
  if (rc) return rc;
  if ((rc = remat__wfile_write(&w, "done\n", 5, err))) {
    remat__wfile_abort(&w);
    return rc;
  }
  return remat__wfile_commit(&w, err);
}
