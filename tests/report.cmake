# Reporting: the BLAS build check.
remat_test(test_blas SOURCES test_blas.c LIBS remat_report LABELS unit TIMEOUT 30)
target_compile_definitions(test_blas PRIVATE REMAT_OPENBLAS_LIBDIR="${REMAT_OPENBLAS_LIBDIR}")
# Where Debian's pthreads build is installed too (install-deps.sh --test
# installs it), putting it first must make remat_blas_check refuse.
set(pthread_dir "/usr/lib/${REMAT_MULTIARCH}/openblas-pthread")
if(EXISTS "${pthread_dir}/libopenblas.so.0")
  add_test(NAME test_blas_pthread COMMAND test_blas --expect-other)
  set_tests_properties(test_blas_pthread PROPERTIES LABELS unit TIMEOUT 30
                       ENVIRONMENT "LD_LIBRARY_PATH=${pthread_dir}")
endif()
# The peak MFU is measured against, and the thread policy.
remat_test(test_report SOURCES test_report.c LIBS remat_report LABELS unit TIMEOUT 60)
# The machine cache: kept figures, damage never trusted, concurrent writers.
remat_test(test_cache SOURCES test_cache.c LIBS remat_report LABELS unit TIMEOUT 60)
# The cache as remat train uses it: kept, reused, damage re-measured, the flags.
remat_cli_test(cache cache.sh LABELS unit TIMEOUT 300)
