/* test_blas.c: the OpenBLAS this build loads is the OpenMP one, from the
 * directory CMake linked it from, even where the system's libopenblas.so.0
 * points at the pthreads build; and remat_blas_check says so. Run with
 * --expect-other (under an LD_LIBRARY_PATH that puts the pthreads build
 * first) it checks the refusal and its message instead.
 *
 * Usage: test_blas [--expect-other] */
#define _GNU_SOURCE /* dladdr */
#include <cblas.h>
#include <dlfcn.h>
#include <string.h>

#include "remat.h"
#include "test_util.h"

int main(int argc, char **argv) {
  int expect_other = argc > 1 && strcmp(argv[1], "--expect-other") == 0;
  remat_error err = {0};
  Dl_info where = {0};
  CHECK(dladdr((void *)openblas_get_parallel, &where) && where.dli_fname);
  const char *file = where.dli_fname ? where.dli_fname : "?";
  printf("OpenBLAS: %s, parallel=%d, from %s\n", openblas_get_config(), openblas_get_parallel(),
         file);
  int rc = remat_blas_check(&err);
  if (!expect_other) {
    CHECK(openblas_get_parallel() == 2);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s\n", err.msg);
    CHECK(strstr(file, REMAT_OPENBLAS_LIBDIR "/") == file);
  } else {
    CHECK(openblas_get_parallel() != 2);
    CHECK(rc == REMAT_EINVAL);
    CHECK(strstr(err.msg, "pthreads") != NULL);
    CHECK(strstr(err.msg, "libopenblas0-openmp") != NULL);
    CHECK(strstr(err.msg, file) != NULL);
    printf("refused: %s\n", err.msg);
  }
  return test_summary("test_blas");
}
