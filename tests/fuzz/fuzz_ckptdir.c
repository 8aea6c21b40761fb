/* fuzz_ckptdir.c: a checkpoint directory's own formats from arbitrary
 * bytes: DONE (the manifest of files, sizes and checksums) and the header of
 * a training state (state.bin, state_rank_R.bin), through the parsers
 * remat_checkpoint_verify and remat_state_peek use. Each input is read as
 * both. A manifest whose last line is "crc XXXXXXXX" is parsed a second time
 * with the right CRC put there, so the fuzzer explores what lies past the
 * manifest's own checksum. Whatever parses must describe only files remat
 * writes, and a state header must describe exactly the bytes that follow. */
#include "fuzz.h"
#include "io/io_internal.h"

static void check_manifest(const uint8_t *data, size_t size) {
  remat__manifest m;
  remat_error err = {0};
  int rc = remat__manifest_parse(&m, data, size, "fuzz/DONE", &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    return;
  }
  if (!m.legacy) {
    FUZZ_ASSERT(m.step >= 0);
    FUZZ_ASSERT(m.nfiles <= REMAT_MANIFEST_MAX_FILES);
    for (size_t i = 0; i < m.nfiles; i++) {
      const char *n = m.files[i].name;
      FUZZ_ASSERT(memchr(n, 0, sizeof m.files[i].name) != NULL);
      FUZZ_ASSERT(strchr(n, '/') == NULL);
      FUZZ_ASSERT(!strcmp(n, "model.bin") || !strcmp(n, "settings") || !strncmp(n, "state", 5));
      for (size_t j = 0; j < i; j++) FUZZ_ASSERT(strcmp(n, m.files[j].name) != 0);
    }
  } else {
    FUZZ_ASSERT(m.nfiles == 0);
  }
  remat__manifest_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_manifest(data, size);
  /* the same text with its crc line made right */
  if (size >= 13 && size <= REMAT_MANIFEST_MAX_BYTES && !memcmp(data + size - 13, "crc ", 4) &&
      data[size - 1] == '\n') {
    uint8_t *fixed = malloc(size);
    FUZZ_ASSERT(fixed != NULL);
    memcpy(fixed, data, size);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)remat_crc32c(0, data, size - 13));
    memcpy(fixed + size - 9, hex, 8);
    check_manifest(fixed, size);
    free(fixed);
  }
  remat_state_header h;
  remat_error err = {0};
  int rc = remat__state_peek_mem(data, size, "fuzz/state.bin", &h, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
  } else {
    FUZZ_ASSERT(h.num_params >= 0);
    FUZZ_ASSERT(size == REMAT_STATE_FIELDS * 8 + (size_t)h.num_params * 8 + 8);
    FUZZ_ASSERT(h.rank >= 0 && h.rank < h.ranks && h.step >= 0);
    remat_run_id id;
    remat_state_run_id(&h, &id);
    FUZZ_ASSERT(id.seed == h.seed);
  }
  return 0;
}
