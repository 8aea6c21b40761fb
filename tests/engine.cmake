# Engine tests: memory plan, checkpointing bit-exactness, allocation-free
# steps, planned vs measured peak, and the command line.
remat_test(test_memplan SOURCES test_memplan.c LIBS remat_base LABELS unit)
remat_test(test_checkpointing SOURCES test_checkpointing.c LIBS remat_engine LABELS unit)
remat_test(test_noalloc SOURCES test_noalloc.c LIBS remat_engine LABELS unit)
