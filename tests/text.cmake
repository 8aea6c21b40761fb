# GPT-2's tokenizer against js-tiktoken (node and the vocabulary must be
# installed: scripts/fetch-vocab.sh --test), text generation with a KV cache
# against a forward without one, and the tokenize and sample commands.
set(REMAT_VOCAB_DIR ${PROJECT_SOURCE_DIR}/third_party/gpt2-vocab)
remat_test(test_text SOURCES test_text.c LIBS remat_text remat_io LABELS unit TIMEOUT 120
  ARGS ${REMAT_VOCAB_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/node/bpe_cases.mjs 1000)
remat_test(test_generate SOURCES test_generate.c LIBS remat_generate remat_model LABELS unit TIMEOUT 120)
remat_cli_test(tokenize tokenize.sh LABELS unit TIMEOUT 120)
remat_cli_test(sample sample.sh LABELS unit TIMEOUT 120)
# A Llama trained, saved in llama2.c's formats and sampled.
remat_cli_test(llama_sample llama_sample.sh LABELS unit TIMEOUT 120)
# A Llama remat trains, in llama2.c's run.c (third_party/llama2c, MIT; built only
# for this test): its greedy tokens are remat sample's.
add_executable(llama2c_run ${PROJECT_SOURCE_DIR}/third_party/llama2c/run.c)
# run.c unchanged: it finds int8_t through the headers of gcc's default
# gnu dialect, which the project's -std=c11 and _POSIX_C_SOURCE narrow
target_compile_options(llama2c_run PRIVATE -w -include stdint.h)
target_link_libraries(llama2c_run PRIVATE m)
add_test(NAME llama2c_run
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/llama2c_run.sh $<TARGET_FILE:remat_cli>
                 $<TARGET_FILE:llama2c_run> ${CMAKE_CURRENT_BINARY_DIR}/llama2c_run.tmp)
set_tests_properties(llama2c_run PROPERTIES LABELS "cli;unit" TIMEOUT 300)
