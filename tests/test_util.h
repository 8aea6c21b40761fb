/* test_util.h: the checks every test program uses. CHECK counts a failure
 * instead of stopping, so a run reports every broken property at once;
 * CHECKF also says what was checked, passed or not; CHECK_ERR checks a
 * remat error code and its message; test_summary prints the closing line
 * and gives the exit status. */
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

#endif
