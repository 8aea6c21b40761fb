/* remat/base.h: errors, sizes and the conventions every other header follows.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_BASE_H
#define REMAT_BASE_H

#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

/* One table generates the codes, their names and their messages. */
#define REMAT_ERRNO_MAP(XX)                                               \
  XX(EINVAL, -1, "invalid argument")                                      \
  XX(ENOMEM, -2, "out of memory")                                         \
  XX(EIO, -3, "input/output error")                                       \
  XX(EFORMAT, -4, "malformed file")                                       \
  XX(ESHAPE, -5, "shapes do not match")                                   \
  XX(EINFEASIBLE, -6, "does not fit the memory budget")                   \
  XX(ERANGE, -7, "value out of range")                                    \
  XX(ENUMERIC, -8, "numerical failure")

typedef enum {
  REMAT_OK = 0,
#define XX(name, value, msg) REMAT_##name = (value),
  REMAT_ERRNO_MAP(XX)
#undef XX
  REMAT_ERRNO_MIN = -9
} remat_errno;

#define REMAT_ERRMSG_MAX 512

/* What went wrong, for a person: code is a remat_errno, msg one line. */
typedef struct remat_error {
  int code;
  char msg[REMAT_ERRMSG_MAX];
} remat_error;

const char *remat_err_name(int code); /* "REMAT_EINVAL" */
const char *remat_strerror(int code); /* "invalid argument" */

/* ---------------------------------------------------------------- parsing */

/* "1.5GiB", "800MB", "20e9", "4096" -> bytes. Suffixes: B, K/KB, M/MB, G/GB,
 * T/TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); case-insensitive. */
int remat_parse_size(const char *s, size_t *bytes, remat_error *err);
/* Units for byte counts shown to people: powers of 1024 (KiB, MiB, GiB) or of
 * 1000 (kB, MB, GB). */
typedef enum { REMAT_UNITS_BINARY = 0, REMAT_UNITS_DECIMAL = 1 } remat_units;
/* Formats bytes into buf as "1.50 GiB" (binary) or "1.61 GB" (decimal), two
 * decimals, or "512 B" below one unit; returns buf. The one formatter of byte
 * counts: everything remat prints goes through it. */
const char *remat_format_bytes_in(size_t bytes, int units, char *buf, size_t cap);
/* remat_format_bytes_in with binary units. */
static inline const char *remat_format_bytes(size_t bytes, char *buf, size_t cap) {
  return remat_format_bytes_in(bytes, REMAT_UNITS_BINARY, buf, cap);
}

/* ---------------------------------------------------------------- checksum */

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start):
 * remat_crc32c(remat_crc32c(0, a, na), b, nb) is the CRC of a then b. The
 * checksum of every file of a checkpoint directory (remat/io.h). */
uint32_t remat_crc32c(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_BASE_H */
