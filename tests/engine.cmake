# Engine tests: memory plan, checkpointing bit-exactness, allocation-free
# steps, planned vs measured peak, and the command line.
remat_test(test_memplan SOURCES test_memplan.c LIBS remat_memory LABELS unit)
remat_test(test_checkpointing SOURCES test_checkpointing.c LIBS remat_train LABELS slow)
remat_test(test_head_chunk SOURCES test_head_chunk.c LIBS remat_train LABELS unit)
# A zero-bubble schedule's B and W apart = the whole backward, bit for bit.
remat_test(test_zb SOURCES test_zb.c LIBS remat_model LABELS unit)
# The calibration's layer times, and a plan on them.
remat_test(test_calibrate SOURCES test_calibrate.c LIBS remat_job LABELS unit)
remat_test(test_noalloc SOURCES test_noalloc.c LIBS remat_train LABELS unit)
# Planned == measured after real steps, on a seeded sweep of random odd shapes.
remat_test(test_memory_sweep SOURCES test_memory_sweep.c LIBS remat_train LABELS unit)

# Reference numerics against PyTorch's GPT-2 when Debian's python3-torch is
# installed (scripts/install-deps.sh --test installs it).
execute_process(COMMAND /usr/bin/python3 -c "import torch" RESULT_VARIABLE torch_rc
                OUTPUT_QUIET ERROR_QUIET)
add_executable(ref_dump ref_dump.c)
target_include_directories(ref_dump PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ref_dump PRIVATE remat_train)
if(torch_rc EQUAL 0)
  add_test(NAME torch_reference
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/torch_reference.py
                   $<TARGET_FILE:ref_dump> ${CMAKE_CURRENT_BINARY_DIR}/torch_reference.tmp)
  set_tests_properties(torch_reference PROPERTIES LABELS "reference" TIMEOUT 600)
else()
  message(STATUS "python3-torch not found: the PyTorch reference test is not registered")
endif()
# The same for a Llama (tests/torch_llama.py): an untied shape with NKV < NH
# and a tied one with NKV = 1, 5 AdamW steps in fp32, and 10 in bf16 against
# autocast and a model rounding where remat does (where the CPU has bf16).
add_executable(llama_dump llama_dump.c)
target_link_libraries(llama_dump PRIVATE remat_train)
if(torch_rc EQUAL 0)
  add_test(NAME torch_llama
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/torch_llama.py
                   $<TARGET_FILE:llama_dump> ${CMAKE_CURRENT_BINARY_DIR}/torch_llama.tmp)
  set_tests_properties(torch_llama PROPERTIES LABELS "reference" TIMEOUT 600)
endif()

remat_cli_test(train_errors train_errors.sh LABELS unit)
# --save-precision bf16: llm.c's version 5 written, trained on, sampled, resumed.
remat_cli_test(save_bf16 save_bf16.sh LABELS unit)
remat_cli_test(train_runs train_runs.sh TIMEOUT 900)
# One memory model: the planner's figure for a stage is the engine's arena.
remat_test(test_memory_model SOURCES test_memory_model.c LIBS remat_plan LABELS unit)
remat_test(test_family SOURCES test_family.c LIBS remat_memory LABELS unit)
# Recompute per micro-batch: a stage's bytes are its slots', each by its own
# blocks' policies; refusals; the block list's full@K.
remat_test(test_slots SOURCES test_slots.c LIBS remat_job LABELS unit)
# Data-parallel replicas: units and shards, the ZeRO table, planner = engine.
remat_test(test_replicas SOURCES test_replicas.c LIBS remat_plan LABELS unit)
# Pipeline stages over MPI (mpirun --oversubscribe) against one process.
find_program(MPIRUN mpirun)
if(MPIRUN)
  remat_cli_test(pipeline pipeline.sh LABELS mpi TIMEOUT 600)
  remat_cli_test(chunked chunked.sh LABELS mpi TIMEOUT 600)
  # The head in chunks: lower planned peaks, = measured, the first loss the
  # whole head's, the planner's choice under a budget, plan files, resume.
  remat_cli_test(head_chunk head_chunk.sh LABELS mpi TIMEOUT 300)
  # Data-parallel replicas under ZeRO 0-3 against one process.
  remat_cli_test(data_parallel data_parallel.sh LABELS mpi TIMEOUT 600)
  # The Llama family: recompute, pipelines, replicas, the grid and resume = one process.
  remat_cli_test(llama llama.sh LABELS mpi TIMEOUT 600)
  # Mixed precision: bf16 pipelines = one process, threads, resume, refusals.
  remat_cli_test(bf16 bf16.sh LABELS mpi TIMEOUT 600)
  # The Llama family in bf16: keep, middle and full, a pipeline and replicas
  # under ZeRO 1 and 3 give one process's bits; near fp32's loss.
  remat_cli_test(llama_bf16 llama_bf16.sh LABELS mpi TIMEOUT 600)
  # What the summary prints is true: MFU <= 100% on every line, labels, budgets.
  remat_cli_test(summary summary.sh LABELS mpi TIMEOUT 300)
  # Every kind of run under the guard backend gives the CPU backend's bits,
  # and nothing but the backend's operations touches its memory.
  remat_cli_test(guard guard.sh LABELS "mpi;guard" TIMEOUT 600)
  # Recompute per micro-batch (--ckpt-layers full@K:LIST): pipelines of it
  # give one process's and all-kept's bits, planned = measured, activations
  # between all kept and all full; refusals.
  remat_cli_test(slots slots.sh LABELS mpi TIMEOUT 300)
  # Traces tell the truth: an update per rank and step, arena counters, no empty tracks.
  remat_cli_test(trace trace.sh LABELS mpi TIMEOUT 300)
  # Tensor parallelism (Megatron-LM's layout) = one process within float
  # rounding; repeats, recompute and the guard backend bit for bit; planned
  # = measured = remat plan on every rank; refusals.
  remat_cli_test(tensor tensor.sh LABELS mpi TIMEOUT 300)
  # The same in bf16 (GPT-2, without sequence parallelism), where the CPU
  # has bf16 instructions: one process within rounding, the degrees' bits.
  remat_cli_test(tensor_bf16 tensor_bf16.sh LABELS mpi TIMEOUT 300)
  # remat plan --link measured: the links measured between mpirun's ranks.
  remat_cli_test(links links.sh LABELS mpi TIMEOUT 300)
else()
  message(STATUS "mpirun not found: the pipeline and data-parallel tests are not registered")
endif()
# Traces read back: one process, and a 2-rank pipeline and 2 replicas where
# mpirun is found; an update span per rank for each printed step, the arena
# counter moves, no empty track.
remat_cli_test(trace_read trace_read.sh LABELS mpi TIMEOUT 300)
# Resumable training: resume = uninterrupted, bit for bit; killed runs resume.
remat_cli_test(resume resume.sh TIMEOUT 300)
# The public API's small functions (version, errors, shapes, schedule, MFU,
# heap counters, parsers, the sampler, a job's placement).
remat_test(test_api SOURCES test_api.c LIBS remat_job remat_generate LABELS unit)
# Tensor and sequence parallelism as planned: a rank's parameters and bytes
# against the shapes' formulas, Korthikanti et al.'s beside them, the
# collectives' bytes.
remat_test(test_tensor SOURCES test_tensor.c LIBS remat_plan m LABELS unit)
