/* fuzz.h: what every fuzz target shares. Each target defines
 * LLVMFuzzerTestOneInput; built with REMAT_FUZZ (clang) libFuzzer drives it,
 * otherwise replay.c feeds it the files of its corpus as a unit test.
 * FUZZ_ASSERT states a property that must hold for every input: when it does
 * not, the target aborts and the fuzzer keeps the input. */
#ifndef REMAT_FUZZ_H
#define REMAT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(x)                                                            \
  do {                                                                            \
    if (!(x)) {                                                                   \
      fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #x);    \
      abort();                                                                    \
    }                                                                             \
  } while (0)

/* A failure must come with a code from the table and a message. */
static inline void fuzz_check_error_code(int rc, const remat_error *err) {
  FUZZ_ASSERT(rc < 0 && rc > REMAT_ERRNO_MIN);
  FUZZ_ASSERT(err->code == rc);
  FUZZ_ASSERT(err->msg[0] != 0);
  FUZZ_ASSERT(memchr(err->msg, 0, sizeof err->msg) != NULL);
}

/* ... and the message is one line, whatever the input held. */
static inline void fuzz_check_error(int rc, const remat_error *err) {
  fuzz_check_error_code(rc, err);
  FUZZ_ASSERT(strchr(err->msg, '\n') == NULL);
}

#endif
