/* fuzz_ckpt5.c: llm.c's bf16 checkpoints (version 5) from arbitrary bytes.
 * The input's first 8 bytes are overwritten with the checkpoint magic and
 * version 5, so every input reaches the version 5 reader rather than dying
 * at the magic. Any header is refused with one line or describes exactly 2
 * bytes a parameter after it; weights that load are the stored bf16 values
 * widened exactly (and round back to them); a bf16 NaN or infinity is
 * refused as non-finite. */
#include "base/base.h"
#include "fuzz.h"
#include "io/io_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *bytes = malloc(size ? size : 1); /* exactly sized: ASan sees overruns */
  FUZZ_ASSERT(bytes != NULL);
  if (size) memcpy(bytes, data, size);
  uint8_t head[8];
  const uint32_t word[2] = {REMAT_CKPT_MAGIC, REMAT_CKPT_VERSION_BF16};
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)(word[i / 4] >> (8 * (i % 4))); /* little endian */
  memcpy(bytes, head, size < 8 ? size : 8);
  remat_checkpoint_reader rd;
  remat_config cfg;
  remat_error err = {0};
  int rc = remat__checkpoint_open_mem(&rd, bytes, size, "fuzz5.ckpt", &cfg, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    remat_checkpoint_reader_free(&rd);
    free(bytes);
    return 0;
  }
  size_t n = remat_param_count(&cfg);
  FUZZ_ASSERT(rd.version == REMAT_CKPT_VERSION_BF16);
  FUZZ_ASSERT(size == REMAT_HEADER_BYTES + 2 * n);
  FUZZ_ASSERT(remat_config_check(&cfg, NULL) == 0);
  float *params = malloc(n * sizeof(float));
  FUZZ_ASSERT(params != NULL);
  rc = remat_checkpoint_read_params(&rd, &cfg, params, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_ASSERT(rc == REMAT_ENUMERIC);
  } else {
    for (size_t i = 0; i < n; i++) {
      const uint8_t *p = bytes + REMAT_HEADER_BYTES + 2 * i;
      uint16_t h = (uint16_t)(p[0] | p[1] << 8);
      uint32_t u;
      memcpy(&u, &params[i], 4);
      FUZZ_ASSERT(u == (uint32_t)h << 16);
      FUZZ_ASSERT(remat__bf16_round(params[i]) == h);
    }
    rc = remat_params_overflow(&cfg, params, &err);
    if (rc) fuzz_check_error(rc, &err);
  }
  free(params);
  remat_checkpoint_reader_free(&rd);
  free(bytes);
  return 0;
}
