/* status.c: the version, error names and messages from REMAT_ERRNO_MAP,
 * error formatting, the assertion handler, and the clock and sort that
 * timings take. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/base.h"

const char *remat_version(void) { return REMAT_VERSION_STRING; }

const char *remat_err_name(int code) {
  switch (code) {
  case REMAT_OK: return "REMAT_OK";
#define XX(name, value, msg) case REMAT_##name: return "REMAT_" #name;
    REMAT_ERRNO_MAP(XX)
#undef XX
  default: return "REMAT_UNKNOWN";
  }
}

const char *remat_strerror(int code) {
  switch (code) {
  case REMAT_OK: return "success";
#define XX(name, value, msg) case REMAT_##name: return msg;
    REMAT_ERRNO_MAP(XX)
#undef XX
  default: return "unknown error";
  }
}

int remat__errorf(remat_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

_Noreturn void remat__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "remat: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  abort();
}

int remat__mul_size(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return -1;
  *out = a * b;
  return 0;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

void remat__sort_doubles(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

double remat__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
