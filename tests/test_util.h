/* test_util.h: the checks every test program uses. CHECK counts a failure
 * instead of stopping, so a run reports every broken property at once;
 * CHECKF also says what was checked, passed or not; CHECK_ERR checks a
 * remat error code and its message; test_summary prints the closing line
 * and gives the exit status. With REMAT_TEST_FILES defined, the helpers of
 * the tests of files too (scratch files, below). */
#ifndef REMAT_TEST_UTIL_H
#define REMAT_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

#include "remat.h"

static int test_checks, test_failures;

#define CHECK(cond)                                                               \
  do {                                                                            \
    test_checks++;                                                                \
    if (!(cond)) {                                                                \
      test_failures++;                                                            \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
    }                                                                             \
  } while (0)

/* CHECKF(cond, "printf format", ...): one line "ok" or "FAIL" with the text. */
#define CHECKF(cond, ...)                                                         \
  do {                                                                            \
    int ok_ = (cond);                                                             \
    test_checks++;                                                                \
    printf("%s ", ok_ ? "ok  " : "FAIL");                                         \
    printf(__VA_ARGS__);                                                          \
    printf("\n");                                                                 \
    if (!ok_) test_failures++;                                                    \
  } while (0)

/* rc must be `want` and the message must mention `word`. */
#define CHECK_ERR(rc, err, want, word)                                                   \
  do {                                                                                   \
    CHECK((rc) == (want));                                                               \
    CHECK((err).code == (want));                                                         \
    CHECK((err).msg[0] != 0);                                                            \
    CHECK(strstr((err).msg, (word)) != NULL);                                            \
    if ((rc) != (want) || !strstr((err).msg, (word)))                                    \
      fprintf(stderr, "  got %s: %s (wanted %s mentioning '%s')\n", remat_err_name(rc), \
              (err).msg, remat_err_name(want), (word));                                  \
  } while (0)

static inline int test_summary(const char *name) {
  printf("%s: %d checks, %d failed\n", name, test_checks, test_failures);
  return test_failures ? 1 : 0;
}

#ifdef REMAT_TEST_FILES
/* ------------------------------------------------------- scratch files
 *
 * For the tests of files (test_io, test_ckpt, test_ckpt5), which define
 * REMAT_TEST_FILES and _DEFAULT_SOURCE (mkdtemp) before their includes: a
 * scratch directory for the run and paths in it, whole files read, written
 * and copied, and the little-endian ints of llm.c's headers. */
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct {
  char dir[512];
  int own; /* made here: removed whole at the end */
  char *paths[4096];
  int npaths;
} test_scratch_state;

static inline test_scratch_state *test_scratch_(void) {
  static test_scratch_state s;
  return &s;
}

/* The scratch directory: dir when given (made if missing and kept at the
 * end), else a fresh /tmp/remat_NAME_XXXXXX, removed whole at the end. NULL,
 * after saying why, when it cannot be made. */
static inline const char *test_scratch_begin(const char *name, const char *dir) {
  test_scratch_state *s = test_scratch_();
  s->own = dir == NULL;
  if (!s->own) {
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    mkdir(s->dir, 0700);
    return s->dir;
  }
  snprintf(s->dir, sizeof s->dir, "/tmp/remat_%s_XXXXXX", name);
  if (!mkdtemp(s->dir)) {
    perror("mkdtemp");
    return NULL;
  }
  return s->dir;
}

/* A path under the scratch directory, the rest formed as printf does;
 * valid until test_scratch_end. */
static inline const char *test_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *test_path(const char *fmt, ...) {
  test_scratch_state *s = test_scratch_();
  char rel[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  size_t n = strlen(s->dir) + strlen(rel) + 2;
  char *p = malloc(n);
  if (!p || s->npaths == (int)(sizeof s->paths / sizeof s->paths[0])) {
    fprintf(stderr, "cannot keep another scratch path (%d kept)\n", s->npaths);
    exit(2);
  }
  snprintf(p, n, "%s/%s", s->dir, rel);
  s->paths[s->npaths++] = p;
  return p;
}

/* The end of the run: removes the scratch directory whole when it was made
 * here, else the paths test_path gave, newest first (files before the
 * directories they are in); frees the paths. 0, or -1 when the directory
 * could not be removed. */
static inline int test_scratch_end(void) {
  test_scratch_state *s = test_scratch_();
  int rc = 0;
  if (s->own) {
    char cmd[sizeof s->dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%.511s'", s->dir);
    rc = system(cmd) == 0 ? 0 : -1;
  }
  for (int i = s->npaths - 1; i >= 0; i--) {
    if (!s->own) remove(s->paths[i]);
    free(s->paths[i]);
  }
  s->npaths = 0;
  return rc;
}

/* The whole file (free it), or NULL (*n = 0) when it cannot be opened. */
static inline uint8_t *test_read_file(const char *path, size_t *n) {
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*n ? *n : 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}

/* n bytes into path; a scratch file that cannot be written ends the run
 * (status 2): what follows would test nothing. */
static inline void test_write_file(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "cannot write scratch file %s\n", path);
    exit(2);
  }
}

static inline void test_copy_file(const char *from, const char *to) {
  size_t n;
  uint8_t *b = test_read_file(from, &n);
  test_write_file(to, b, n);
  free(b);
}

static inline int test_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Temporaries a save left in d ("NAME.tmp.XXXXXX"); -1 when d cannot be read. */
static inline int test_count_temps(const char *d) {
  DIR *dd = opendir(d);
  if (!dd) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(dd));) n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(dd);
  return n;
}

/* Little-endian 32-bit ints, as llm.c's headers hold them. */
static inline void test_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t test_get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A copy of src in dst with header int number `field` set to value (none
 * when field < 0), resize bytes longer (shorter when negative; zeros added). */
static inline void test_patched_copy(const char *src, const char *dst, int field, uint32_t value,
                                     long resize) {
  size_t n = 0;
  uint8_t *b = test_read_file(src, &n);
  if (field >= 0) test_put32(b + 4 * field, value);
  size_t m = (size_t)((long)n + resize);
  uint8_t *c = calloc(1, m);
  memcpy(c, b, m < n ? m : n);
  test_write_file(dst, c, m);
  free(b);
  free(c);
}
#endif /* REMAT_TEST_FILES */

#endif
