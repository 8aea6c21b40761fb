# I/O tests: token shards, checkpoints, text, the default corpus, the loader.
remat_test(test_io SOURCES test_io.c LIBS remat_io m LABELS unit TIMEOUT 60)
