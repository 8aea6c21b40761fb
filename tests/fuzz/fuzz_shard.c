/* fuzz_shard.c: llm.c token shards from arbitrary bytes, then the loader
 * over what loaded, with B, T, the validation fraction and the shuffle
 * chosen by the input's first token bytes. A loaded shard holds exactly the
 * tokens its header announces; the loader's windows stay inside its split
 * (ASan checks every copy) and targets are inputs shifted by one. */
#include "fuzz.h"
#include "io/io_internal.h"
#include "io/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  remat_tokens t;
  remat_error err = {0};
  int rc = remat__tokens_load_mem(&t, data, size, "fuzz.bin", &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_ASSERT(t.tok == NULL);
    return 0;
  }
  FUZZ_ASSERT(t.n >= 2 && size == REMAT_HEADER_BYTES + 2 * (size_t)t.n);
  FUZZ_ASSERT(t.max_id >= 0 && t.max_id <= 65535);
  FUZZ_ASSERT(remat_tokens_check_vocab(&t, t.max_id + 1, NULL) == 0);
  if (t.max_id > 0) FUZZ_ASSERT(remat_tokens_check_vocab(&t, t.max_id, NULL) == REMAT_ERANGE);

  const uint8_t *knob = data + REMAT_HEADER_BYTES;
  int64_t B = 1 + knob[0] % 4, T = 1 + knob[1] % 16;
  double val_frac = (knob[0] >> 4) / 16.0;
  int split = knob[1] >> 7, shuffle = (knob[1] >> 6) & 1;
  remat_loader *L;
  rc = remat_loader_create(&L, &t, B, T, split, val_frac, shuffle, knob[0], &err);
  if (rc) {
    fuzz_check_error(rc, &err);
  } else {
    FUZZ_ASSERT(remat_loader_windows(L) >= 1);
    FUZZ_ASSERT(L->tok >= t.tok && L->tok + L->n <= t.tok + t.n);
    int32_t in[4 * 16], tg[4 * 16];
    for (int step = 0; step < 8; step++) {
      remat_loader_next(L, in, tg);
      FUZZ_ASSERT(L->offset + L->num_windows * T + 1 <= L->n);
      for (int64_t i = 0; i < B * T; i++) {
        FUZZ_ASSERT(in[i] >= 0 && in[i] <= t.max_id && tg[i] >= 0 && tg[i] <= t.max_id);
        if ((i + 1) % T) FUZZ_ASSERT(tg[i] == in[i + 1]);
      }
    }
    remat_loader_destroy(L);
  }
  remat_tokens_free(&t);
  return 0;
}
