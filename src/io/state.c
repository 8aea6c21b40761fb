/* state.c: the training state file, what a run needs besides the weights to
 * go on exactly where it stopped: AdamW's moments, the step, the loader's
 * position, and the settings and shapes a resumed run must share.
 *
 * Layout (little endian): a header of REMAT_STATE_FIELDS int64 (magic,
 * version, then the fields of remat_state_header in order), then num_params
 * float32 of m, then num_params of v, then a 64-bit FNV-1a checksum of all
 * the bytes before it. Version 2 added what binds a state to its
 * checkpoint (binds, precision, model_crc), words that version 1 left zero. Written like every save: a private temporary, synced,
 * renamed over the destination. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"

#define STATE_MAGIC 0x3154535441524552ll /* "REMATST1" */
#define STATE_VERSION 2 /* 2 added binds, precision and model_crc; 1 still loads */

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
  X(loader_epoch) X(loader_cursor) X(loader_rng) X(data_tokens) X(replicas) X(zero)        \
  X(binds) X(precision) X(model_crc)

static void to_words(const remat_state_header *h, int64_t *w) {
  int k = 0;
  w[k++] = STATE_MAGIC;
  w[k++] = STATE_VERSION;
#define X(f) w[k++] = (int64_t)h->f;
  FIELDS(X)
#undef X
  while (k < REMAT_STATE_FIELDS) w[k++] = 0;
}

/* A version 1 header's words past its fields are zero: binds 0, nothing
 * recorded. */
static void from_words(const int64_t *w, remat_state_header *h) {
  int k = 2;
#define X(f) h->f = (__typeof__(h->f))w[k++];
  FIELDS(X)
#undef X
  if (w[1] < 2) h->binds = h->precision = 0, h->model_crc = 0;
}

int remat_state_save(const char *path, const remat_state_header *h, const float *m,
                     const float *v, remat_error *err) {
  size_t n = (size_t)h->num_params;
  return remat_state_save_parts(path, h, 1, &m, &v, &n, err);
}

int remat_state_save_parts(const char *path, const remat_state_header *h, int parts,
                           const float *const *m, const float *const *v, const size_t *n,
                           remat_error *err) {
  int64_t words[REMAT_STATE_FIELDS];
  to_words(h, words);
  size_t total = 0;
  for (int i = 0; i < parts; i++) total += n[i];
  REMAT_ASSERT(total == (size_t)h->num_params);
  uint64_t sum = fnv(1469598103934665603ull, words, sizeof words);
  for (int i = 0; i < parts; i++) sum = fnv(sum, m[i], n[i] * sizeof(float));
  for (int i = 0; i < parts; i++) sum = fnv(sum, v[i], n[i] * sizeof(float));
  remat__wfile w;
  int rc = remat__wfile_open(&w, path, "training state", err);
  if (rc) return rc;
  rc = remat__wfile_write(&w, words, sizeof words, err);
  for (int i = 0; i < parts && !rc; i++) rc = remat__wfile_write(&w, m[i], n[i] * sizeof(float), err);
  for (int i = 0; i < parts && !rc; i++) rc = remat__wfile_write(&w, v[i], n[i] * sizeof(float), err);
  if (!rc) rc = remat__wfile_write(&w, &sum, sizeof sum, err);
  if (rc) {
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

/* Checks a header read from a file of `size` bytes: magic, version, a
 * moment count that matches the size exactly, and a stage that makes sense
 * (a rank among the ranks). Fills h. */
static int check_header(const int64_t *words, size_t size, const char *path,
                        remat_state_header *h, remat_error *err) {
  if (size < REMAT_STATE_FIELDS * sizeof(int64_t))
    return remat__errorf(err, REMAT_EFORMAT,
                         "training state '%s' is truncated: %zu bytes, less than its header", path,
                         size);
  if (words[0] != STATE_MAGIC || words[1] < 1 || words[1] > STATE_VERSION)
    return remat__errorf(err, REMAT_EFORMAT,
                         "'%s' is not a remat training state (versions 1 to %d)", path,
                         STATE_VERSION);
  from_words(words, h);
  /* 2 * num_params floats and the checksum follow the header */
  size_t body = size - REMAT_STATE_FIELDS * sizeof(int64_t);
  if (h->num_params < 0 || body < sizeof(uint64_t) ||
      (uint64_t)h->num_params != (body - sizeof(uint64_t)) / (2 * sizeof(float)) ||
      (body - sizeof(uint64_t)) % (2 * sizeof(float)) != 0)
    return remat__errorf(err, REMAT_EFORMAT,
                         "training state '%s' announces %lld parameters' moments but holds %zu "
                         "bytes; it is truncated or padded",
                         path, (long long)h->num_params, size);
  if (h->ranks < 1 || h->rank < 0 || h->rank >= h->ranks || h->step < 0)
    return remat__errorf(err, REMAT_EFORMAT,
                         "training state '%s' is damaged: rank %lld of %lld ranks at step %lld",
                         path, (long long)h->rank, (long long)h->ranks, (long long)h->step);
  if ((h->binds & ~(int64_t)(REMAT_STATE_BINDS_PRECISION | REMAT_STATE_BINDS_MODEL)) ||
      h->precision < 0 || h->precision >= REMAT_PRECISION_COUNT || h->model_crc > UINT32_MAX)
    return remat__errorf(err, REMAT_EFORMAT,
                         "training state '%s' is damaged: what binds it to its checkpoint "
                         "(precision %lld, model CRC %llx) is not one remat writes",
                         path, (long long)h->precision, (unsigned long long)h->model_crc);
  return 0;
}

int remat__state_peek_mem(const void *bytes, size_t size, const char *name,
                          remat_state_header *h, remat_error *err) {
  int64_t words[REMAT_STATE_FIELDS];
  if (size >= sizeof words) memcpy(words, bytes, sizeof words);
  return check_header(words, size, name, h, err);
}

/* Opens a state file (a regular file, never blocking) and checks its
 * header. */
static int open_state(const char *path, int *fd, int64_t *words, remat_state_header *h,
                      remat_error *err) {
  struct stat st;
  int rc = remat__open(path, O_RDONLY, REMAT__OPEN_FILE, "training state", fd, &st, err);
  if (rc) return rc;
  size_t size = (size_t)st.st_size;
  if (size >= REMAT_STATE_FIELDS * sizeof(int64_t) &&
      read_all(*fd, words, REMAT_STATE_FIELDS * sizeof(int64_t)))
    rc = remat__errorf(err, REMAT_EIO, "cannot read training state '%s': %s", path,
                       strerror(errno));
  if (!rc) rc = check_header(words, size, path, h, err);
  if (rc) {
    close(*fd);
    *fd = -1;
  }
  return rc;
}

int remat_state_load(const char *path, remat_state_header *h, float *m, float *v,
                     size_t num_params, remat_error *err) {
  return remat_state_load_parts(path, h, 1, &m, &v, &num_params, err);
}

int remat_state_load_parts(const char *path, remat_state_header *h, int parts, float *const *m,
                           float *const *v, const size_t *n, remat_error *err) {
  int64_t words[REMAT_STATE_FIELDS];
  int fd, rc = open_state(path, &fd, words, h, err);
  if (rc) return rc;
  size_t num_params = 0;
  for (int i = 0; i < parts; i++) num_params += n[i];
  if ((size_t)h->num_params != num_params) {
    rc = remat__errorf(err, REMAT_ESHAPE,
                       "training state '%s' holds %lld parameters' moments; this model (or "
                       "stage) has %zu parameters",
                       path, (long long)h->num_params, num_params);
    goto out;
  }
  uint64_t sum, want = fnv(1469598103934665603ull, words, sizeof words);
  int bad = 0;
  for (int i = 0; i < parts && !bad; i++) bad = read_all(fd, m[i], n[i] * sizeof(float));
  for (int i = 0; i < parts && !bad; i++) bad = read_all(fd, v[i], n[i] * sizeof(float));
  if (bad || read_all(fd, &sum, sizeof sum)) {
    rc = remat__errorf(err, REMAT_EIO, "cannot read training state '%s'", path);
    goto out;
  }
  for (int i = 0; i < parts; i++) want = fnv(want, m[i], n[i] * sizeof(float));
  for (int i = 0; i < parts; i++) want = fnv(want, v[i], n[i] * sizeof(float));
  if (sum != want)
    rc = remat__errorf(err, REMAT_EFORMAT, "training state '%s' is corrupt (checksum)", path);
out:
  close(fd);
  return rc;
}

int remat_state_peek(const char *path, remat_state_header *h, remat_error *err) {
  int64_t words[REMAT_STATE_FIELDS];
  int fd, rc = open_state(path, &fd, words, h, err);
  if (!rc) close(fd);
  return rc;
}

static uint64_t fnv_word(uint64_t hash, uint64_t w) { return fnv(hash, &w, sizeof w); }

void remat_state_run_id(const remat_state_header *h, remat_run_id *id) {
  /* everything a resumed run must share: not the step, the loader's
   * position, the moment count or which rank's stage it is */
  const int64_t f[] = {h->ranks, h->replicas, h->zero, h->L, h->C, h->NH, h->V, h->maxT, h->B,
                       h->T, h->grad_accum, h->steps, h->warmup, h->cosine, h->shuffle,
                       h->data_tokens};
  const uint64_t u[] = {h->seed, h->lr_bits, h->dropout_bits, h->wd_bits, h->clip_bits};
  uint64_t d = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) d = fnv_word(d, (uint64_t)f[i]);
  for (size_t i = 0; i < sizeof u / sizeof *u; i++) d = fnv_word(d, u[i]);
  id->seed = h->seed;
  id->settings = d;
}
