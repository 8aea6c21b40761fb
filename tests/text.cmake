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
