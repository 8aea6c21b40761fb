/* base.h: internal helpers every module uses: error reporting, tracked heap
 * allocation, assertions for programming bugs, the bf16 number format, a
 * monotonic clock. */
#ifndef REMAT_BASE_INTERNAL_H
#define REMAT_BASE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "remat/base.h"

/* Fills err (may be NULL) with code and a printf-style message; returns code. */
int remat__errorf(remat_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Programming bugs, not user errors: abort with the location. */
#define REMAT_ASSERT(x)                                                   \
  do {                                                                    \
    if (!(x)) remat__assert_fail(#x, __FILE__, __LINE__);                 \
  } while (0)
_Noreturn void remat__assert_fail(const char *expr, const char *file, int line);

/* Heap allocations made by the library go through these so the training loop
 * can report every byte it holds outside the arena. remat__malloc returns
 * memory aligned to REMAT_ALIGN. */
void *remat__malloc(size_t bytes);
void *remat__calloc(size_t n, size_t size);
void remat__free(void *p);
/* Whole pages of their own (mmap), counted as bytes like the heap's blocks,
 * for memory whose protection changes (the guard backend's arena); *mapped
 * is the length mapped, which the free takes back. */
void *remat__pages_alloc(size_t bytes, size_t *mapped);
void remat__pages_free(void *p, size_t bytes, size_t mapped);
/* Bytes a backend holds outside host memory (a device arena), counted as
 * if held here, so that the measured peak (arena high water plus what the
 * library holds besides) is the same sum on every backend. */
void remat__heap_count(size_t bytes);
void remat__heap_uncount(size_t bytes);
size_t remat__heap_live(void); /* bytes currently held */
size_t remat__heap_peak(void); /* high-water mark since start or last reset */
void remat__heap_reset_peak(void);

/* a * b with overflow check: returns 0 and sets *out, or -1 on overflow. */
int remat__mul_size(size_t a, size_t b, size_t *out);

/* splitmix64: the next number of a small, fast generator whose whole state
 * is *s; good enough to shuffle data and choose words (not for dropout,
 * which is Philox keyed by position). */
static inline uint64_t remat__splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ bf16 */

/* A bf16 value is the upper half of an fp32 one (1 sign, 8 exponent, 7
 * mantissa bits), held as uint16_t. Here, below every library, because the
 * kernels compute in it and llm.c's version 5 checkpoints store it.
 * remat__bf16_round: x rounded to nearest, ties to even (a NaN stays a quiet
 * NaN; finite values from 0x1.fefp127 up in magnitude round to infinity).
 * remat__bf16_float: h widened exactly. */
static inline uint16_t remat__bf16_round(float x) {
  union {
    float f;
    uint32_t u;
  } v = {x};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* NaN */
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float remat__bf16_float(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v = {(uint32_t)h << 16};
  return v.f;
}

/* ---------------------------------------------------------- opening files */

struct stat;
/* What remat__open accepts at path. */
enum { REMAT__OPEN_FILE = 0, REMAT__OPEN_DIR = 1 };
/* The one way the library opens a path (src/base/file.c): refuses, without
 * opening it, a path that is not a regular file (or with REMAT__OPEN_DIR not
 * a directory), symlinks followed; opens it with O_NONBLOCK | O_NOCTTY |
 * O_CLOEXEC added to flags (O_RDONLY, or O_WRONLY | O_CREAT | ... with mode
 * 0666 less the umask), checks the descriptor's kind again with fstat, then
 * clears O_NONBLOCK. A FIFO, device or socket never blocks and is never
 * written. `what` names the file in messages ("token shard"). On success *fd
 * is open and *st (may be NULL) its fstat; on failure *fd is -1 and the
 * error (REMAT_EIO, REMAT_EINVAL) names the path and its kind. */
int remat__open(const char *path, int flags, int want, const char *what, int *fd,
                struct stat *st, remat_error *err);
/* "a FIFO", "a directory", "a character device", ... for a st_mode. */
const char *remat__file_kind(unsigned mode);
/* The table implementation of remat_crc32c (tests compare the two), and
 * whether remat_crc32c uses the SSE4.2 instruction (1), the table (0), or
 * has not decided yet (-1). */
uint32_t remat__crc32c_soft(uint32_t crc, const void *data, size_t n);
extern int remat__crc32c_hw_used;

/* Seconds on a monotonic clock. */
double remat__now(void);

/* v[0..n) in ascending order (timings: medians, quartiles). */
void remat__sort_doubles(double *v, size_t n);

#endif
