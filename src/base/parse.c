/* parse.c: byte sizes as people write them, and their formatting. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"

int remat_parse_size(const char *s, size_t *bytes, remat_error *err) {
  if (!s || !*s) return remat__errorf(err, REMAT_EINVAL, "empty size; write e.g. 1.5GiB or 800MB");
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (end == s || errno == ERANGE || !isfinite(v) || v < 0)
    return remat__errorf(err, REMAT_EINVAL,
                         "'%s' is not a size; write a non-negative number with an optional "
                         "suffix, e.g. 1.5GiB, 800MB, 20e9",
                         s);
  while (*end == ' ') end++;
  static const struct {
    const char *suffix;
    double mult;
  } units[] = {{"", 1},         {"b", 1},          {"k", 1e3},        {"kb", 1e3},
               {"m", 1e6},      {"mb", 1e6},       {"g", 1e9},        {"gb", 1e9},
               {"t", 1e12},     {"tb", 1e12},      {"kib", 1024.0},   {"mib", 1048576.0},
               {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(end, units[i].suffix) == 0) {
      double b = v * units[i].mult;
      if (b >= 18446744073709551615.0 || b > (double)SIZE_MAX)
        return remat__errorf(err, REMAT_ERANGE, "size '%s' is too large", s);
      *bytes = (size_t)llround(b);
      return 0;
    }
  }
  return remat__errorf(err, REMAT_EINVAL,
                       "'%s' has an unknown unit '%s'; use B, KB, MB, GB, TB, KiB, MiB, GiB "
                       "or TiB",
                       s, end);
}

const char *remat_format_bytes_in(size_t bytes, int units, char *buf, size_t cap) {
  static const char *binary[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  static const char *decimal[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  int dec = units == REMAT_UNITS_DECIMAL;
  const char *const *u = dec ? decimal : binary;
  double step = dec ? 1000.0 : 1024.0, v = (double)bytes;
  int top = dec ? 6 : 5, i = 0;
  while (v >= step && i < top) {
    v /= step;
    i++;
  }
  if (i == 0)
    snprintf(buf, cap, "%zu B", bytes);
  else
    snprintf(buf, cap, "%.2f %s", v, u[i]);
  return buf;
}

int remat_parse_sizes(const char *s, size_t *out, int64_t cap, int64_t *n, remat_error *err) {
  char item[64];
  const char *p = s;
  *n = 0;
  if (!*p) return remat__errorf(err, REMAT_EINVAL, "empty list of sizes; write e.g. 2GiB,3GiB");
  for (;;) {
    size_t len = strcspn(p, ",");
    if (len >= sizeof item || *n == cap)
      return remat__errorf(err, REMAT_EINVAL, "'%s': give one size, or at most %lld separated by "
                           "commas", s, (long long)cap);
    memcpy(item, p, len);
    item[len] = 0;
    int rc = remat_parse_size(item, &out[*n], err);
    if (rc) return rc;
    (*n)++;
    if (!p[len]) return 0;
    p += len + 1;
  }
}

int remat_parse_counts(const char *s, int64_t *out, int64_t cap, int64_t *n, remat_error *err) {
  const char *p = s;
  *n = 0;
  for (;;) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || *p == '+' || *p == '-' || *p == ' ' || *n == cap ||
        (*end && *end != ','))
      return remat__errorf(err, REMAT_EINVAL, "'%s' is not a list of at most %lld counts like "
                           "2,2", s, (long long)cap);
    out[(*n)++] = v;
    if (!*end) return 0;
    p = end + 1;
  }
}
