# I/O tests: token shards, checkpoints, text, the default corpus, the loader.
remat_test(test_io SOURCES test_io.c LIBS remat_io m LABELS unit TIMEOUT 60)
# llm.c's bf16 checkpoint (version 5): exact rounding and widening, a file
# written as llm.c writes one, refusals, a job saving either version.
remat_test(test_ckpt5 SOURCES test_ckpt5.c LIBS remat_job m LABELS unit TIMEOUT 60)
# Checkpoint directories (DONE manifests, verification, fallback) and the one
# rule for opening paths (FIFOs, directories, symlinks, long names, ulimit -f).
# alarm() inside and the timeout here turn a blocked open into a failure.
remat_test(test_ckpt SOURCES test_ckpt.c LIBS remat_train remat_plan LABELS unit TIMEOUT 60)
# llama2.c's checkpoints (legacy and export.py's version 1): files made
# byte by byte, tied and untied heads, with and without the RoPE tables;
# the writer's bytes, round trips, format detection, refusals, the job's
# --save format rules.
remat_test(test_llama2c SOURCES test_llama2c.c LIBS remat_job m LABELS unit TIMEOUT 60)
# remat train saving a Llama as llama2.c's version 1 and legacy files and
# reading them back, byte for byte, checkpoints and resume included, and
# refusing the formats that cannot hold a model.
remat_cli_test(save_llama2c save_llama2c.sh LABELS unit)
