/* fuzz_llama2c.c: llama2.c's checkpoints from arbitrary bytes, through the
 * reader remat_checkpoint_reader_open uses. The input's first byte picks
 * the format and the rest is the file: odd, version 1 (its first 8 bytes
 * overwritten with "ak42" and version 1, so the input reaches that
 * reader rather than dying at the magic); even, as it is (a legacy file
 * when its seven ints fit its size, else refused). Any header is refused
 * with one line or describes exactly the bytes that follow: the spans
 * where the tensors lie cover the parameters once, in the file and apart;
 * the weights then load (or are refused as non-finite). */
#include "fuzz.h"
#include "io/io_internal.h"

/* The spans of an open reader tile the parameters and sit inside the file
 * without overlapping. */
static void check_spans(const remat_checkpoint_reader *rd, size_t np, size_t size) {
  remat__span sp[REMAT_P_COUNT];
  int n = remat__llama2c_spans(&rd->cfg, rd->format, rd->freq_cis, sp);
  FUZZ_ASSERT(n >= 1 && n <= REMAT_P_COUNT);
  size_t covered = 0, end = 0;
  for (int i = 0; i < n; i++) {
    FUZZ_ASSERT(sp[i].count > 0 && sp[i].first + sp[i].count <= np);
    FUZZ_ASSERT(sp[i].at >= end && sp[i].at + 4 * sp[i].count <= size);
    end = sp[i].at + 4 * sp[i].count;
    covered += sp[i].count;
  }
  FUZZ_ASSERT(covered == np);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int v1 = data[0] & 1;
  size--;
  uint8_t *bytes = malloc(size ? size : 1); /* exactly sized: ASan sees overruns */
  FUZZ_ASSERT(bytes != NULL);
  if (size) memcpy(bytes, data + 1, size);
  const uint8_t head[8] = {0x32, 0x34, 0x6b, 0x61, 1, 0, 0, 0}; /* "ak42", version 1 */
  if (v1) memcpy(bytes, head, size < 8 ? size : 8);
  /* an input kept as it is may carry version 1's magic of its own */
  int want_v1 = v1 || (size >= 4 && memcmp(bytes, head, 4) == 0);
  remat_checkpoint_reader rd;
  remat_config cfg;
  remat_error err = {0};
  int rc = remat__checkpoint_open_mem(&rd, bytes, size, "fuzz.llama2c", &cfg, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    remat_checkpoint_reader_free(&rd);
    free(bytes);
    return 0;
  }
  FUZZ_ASSERT(remat_config_check(&cfg, NULL) == 0);
  size_t np = remat_param_count(&cfg);
  if (rd.format == REMAT_FORMAT_LLMC) { /* the legacy path may meet llm.c's magic */
    FUZZ_ASSERT(!want_v1 && cfg.family == REMAT_FAMILY_GPT2);
  } else {
    FUZZ_ASSERT(cfg.family == REMAT_FAMILY_LLAMA && cfg.padded_vocab_size == cfg.vocab_size);
    FUZZ_ASSERT(rd.format == (want_v1 ? REMAT_FORMAT_LLAMA2C_V1 : REMAT_FORMAT_LLAMA2C_LEGACY));
    size_t tables = rd.freq_cis ? (size_t)(cfg.max_seq_len * (cfg.channels / cfg.num_heads)) : 0;
    FUZZ_ASSERT(size == (want_v1 ? REMAT_LLAMA2C_HEADER_BYTES + 4 * np
                            : REMAT_LLAMA2C_LEGACY_HEADER_BYTES + 4 * (np + tables)));
    check_spans(&rd, np, size);
  }
  float *params = malloc(np * sizeof(float));
  FUZZ_ASSERT(params != NULL);
  rc = remat_checkpoint_read_params(&rd, &cfg, params, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_ASSERT(rc == REMAT_ENUMERIC);
  }
  free(params);
  remat_checkpoint_reader_free(&rd);
  free(bytes);
  return 0;
}
