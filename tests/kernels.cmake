# Kernel tests: finite-difference gradients, the sgemm paths against scalar
# references, dropout statistics, determinism, AdamW, no allocation. The
# untiled attention kernel (attention_ref.c) is the tiled one's reference.
remat_test(test_kernels SOURCES test_kernels.c attention_ref.c LIBS remat_kernels LABELS unit
           TIMEOUT 120)
# The same checks with attention.c compiled in using tiny tiles (3 queries x 4
# keys in the forward, 4 x 3 in the backward), so tiny T runs many tiles,
# partial ones and rows that see none of a key tile.
remat_test(test_kernels_tile SOURCES test_kernels.c attention_ref.c ../src/kernels/attention.c
           LIBS remat_kernels LABELS unit TIMEOUT 120)
target_compile_definitions(test_kernels_tile PRIVATE ATT_BQ=3 ATT_BK=4 ATT_BQB=4 ATT_BKB=3)
# Passive waiting keeps the many tiny parallel regions of the finite-difference
# loops from spinning against each other when the machine is loaded.
set_tests_properties(test_kernels test_kernels_tile PROPERTIES ENVIRONMENT OMP_WAIT_POLICY=PASSIVE)
# Every op of every compiled backend against plain references (and, for a
# backend other than the CPU one, against the CPU backend), on odd and random
# shapes.
remat_test(test_backend_ops SOURCES test_backend_ops.c LIBS remat_model LABELS "unit;guard"
           TIMEOUT 120)
set_tests_properties(test_backend_ops PROPERTIES ENVIRONMENT OMP_WAIT_POLICY=PASSIVE)
# The bf16 products (oneDNN) against double references, the conversions and
# the CPU detection; product checks are skipped, with the reason printed, on
# a CPU without bf16 instructions.
remat_test(test_bf16 SOURCES test_bf16.c LIBS remat_kernels LABELS unit TIMEOUT 120)
# The guard backend faults on a host touch of its memory outside its
# operations, names where, and lets the operations and windows through.
remat_test(test_guard SOURCES test_guard.c LIBS remat_kernels LABELS "unit;guard")
# Where the CUDA backend is built (the toolkit found, a GPU or not): remat
# lists it, and without a usable GPU naming it is refused in one line.
if(REMAT_HAVE_CUDA)
  remat_cli_test(cuda_built cuda_built.sh LABELS unit TIMEOUT 120)
endif()
