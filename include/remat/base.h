/* remat/base.h: errors, sizes and the conventions every other header follows.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_BASE_H
#define REMAT_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "remat/version.h" /* REMAT_VERSION_MAJOR, _MINOR, _PATCH, _STRING */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- export */

/* REMAT_API marks every function of the public API: each declaration in
 * include/remat/ starts with it (tests/layering.py checks). The library is
 * compiled with hidden visibility, so in the shared libremat.so these are
 * the only symbols exported; internal functions (remat__*) stay inside. */
#if defined(__GNUC__) || defined(__clang__)
#define REMAT_API __attribute__((visibility("default")))
#else
#define REMAT_API
#endif

/* ---------------------------------------------------------------- version */

/* The library's version, "MAJOR.MINOR.PATCH" (REMAT_VERSION_STRING of the
 * library that runs, which may differ from the header a program was
 * compiled with). */
REMAT_API const char *remat_version(void);
/* The backends built into this library, by index from 0 ("cpu", the
 * reference, first); NULL past the last. */
REMAT_API const char *remat_backend_name(int i);

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

/* The backend the models this process makes from here on run on, by name
 * (one of remat_backend_name's); REMAT_EINVAL, naming those built, if there
 * is none of that name. Without a call, the REMAT_BACKEND environment
 * variable's, else "cpu". remat_backend_selected: its name. */
REMAT_API int remat_backend_select(const char *name, remat_error *err);
REMAT_API const char *remat_backend_selected(void);
/* Whether the selected backend is a device's (its memory not the host's):
 * then bf16 is its own products' to run, not the host CPU's instructions
 * (remat_precision_available), and 1 where it has them, with *why (may be
 * NULL) saying which. 0 for the host's backends. */
REMAT_API int remat_backend_device_bf16(const char **why);

REMAT_API const char *remat_err_name(int code); /* "REMAT_EINVAL" */
REMAT_API const char *remat_strerror(int code); /* "invalid argument" */

/* ---------------------------------------------------------------- sizes */

#define REMAT_ALIGN 64 /* every buffer and every piece of one starts on this */

/* ---------------------------------------------------------------- parsing */

/* "1.5GiB", "800MB", "20e9", "4096" -> bytes. Suffixes: B, K/KB, M/MB, G/GB,
 * T/TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); case-insensitive. */
REMAT_API int remat_parse_size(const char *s, size_t *bytes, remat_error *err);
/* A comma-separated list of sizes ("2GiB,3GiB") or of non-negative counts
 * ("7,8,8,9") into out (room for cap); *n receives how many. */
REMAT_API int remat_parse_sizes(const char *s, size_t *out, int64_t cap, int64_t *n,
                                remat_error *err);
REMAT_API int remat_parse_counts(const char *s, int64_t *out, int64_t cap, int64_t *n,
                                 remat_error *err);
/* Units for byte counts shown to people: powers of 1024 (KiB, MiB, GiB) or of
 * 1000 (kB, MB, GB). */
typedef enum { REMAT_UNITS_BINARY = 0, REMAT_UNITS_DECIMAL = 1 } remat_units;
/* Formats bytes into buf as "1.50 GiB" (binary) or "1.61 GB" (decimal), two
 * decimals, or "512 B" below one unit; returns buf. The one formatter of byte
 * counts: everything remat prints goes through it. */
REMAT_API const char *remat_format_bytes_in(size_t bytes, int units, char *buf, size_t cap);
/* remat_format_bytes_in with binary units. */
static inline const char *remat_format_bytes(size_t bytes, char *buf, size_t cap) {
  return remat_format_bytes_in(bytes, REMAT_UNITS_BINARY, buf, cap);
}

/* ---------------------------------------------------------------- checksum */

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start):
 * remat_crc32c(remat_crc32c(0, a, na), b, nb) is the CRC of a then b. The
 * checksum of every file of a checkpoint directory (remat/io.h). */
REMAT_API uint32_t remat_crc32c(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_BASE_H */
