/* test_util.h: a CHECK macro that counts failures instead of stopping, so a
 * run reports every broken property at once, and a summary line. */
#ifndef REMAT_TEST_UTIL_H
#define REMAT_TEST_UTIL_H

#include <stdio.h>

static int test_checks, test_failures;

#define CHECK(cond)                                                               \
  do {                                                                            \
    test_checks++;                                                                \
    if (!(cond)) {                                                                \
      test_failures++;                                                            \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
    }                                                                             \
  } while (0)

static inline int test_summary(const char *name) {
  printf("%s: %d checks, %d failed\n", name, test_checks, test_failures);
  return test_failures ? 1 : 0;
}

#endif
