/* fuzz_checkpoint.c: checkpoints from arbitrary bytes, through the same
 * reader remat_checkpoint_reader_open uses, which tells the format by the
 * first bytes. Any header is either refused with a message or describes
 * exactly the bytes that follow (an llm.c file: 4 per parameter in version
 * 3, 2 in version 5; fuzz_ckpt5 holds the version at 5; fuzz_llama2c
 * checks llama2.c's files); the weights then
 * load (or are refused as non-finite) and the overflow check runs on them. */
#include "fuzz.h"
#include "io/io_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  remat_checkpoint_reader rd;
  remat_config cfg;
  remat_error err = {0};
  int rc = remat__checkpoint_open_mem(&rd, data, size, "fuzz.ckpt", &cfg, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    remat_checkpoint_reader_free(&rd);
    return 0;
  }
  size_t n = remat_param_count(&cfg);
  if (rd.format == REMAT_FORMAT_LLMC) {
    FUZZ_ASSERT(rd.version == REMAT_CKPT_VERSION || rd.version == REMAT_CKPT_VERSION_BF16);
    FUZZ_ASSERT(size == REMAT_HEADER_BYTES + n * (rd.version == REMAT_CKPT_VERSION ? 4 : 2));
  } else { /* a llama2.c file: fuzz_llama2c checks its layout */
    FUZZ_ASSERT(cfg.family == REMAT_FAMILY_LLAMA);
  }
  FUZZ_ASSERT(remat_config_check(&cfg, NULL) == 0);
  float *params = malloc(n * sizeof(float)); /* exactly sized: ASan sees overruns */
  FUZZ_ASSERT(params != NULL);
  rc = remat_checkpoint_read_params(&rd, &cfg, params, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_ASSERT(rc == REMAT_ENUMERIC);
  } else {
    rc = remat_params_overflow(&cfg, params, &err);
    if (rc) fuzz_check_error(rc, &err);
  }
  free(params);
  remat_checkpoint_reader_free(&rd);
  return 0;
}
