/* fuzz_text.c: plain text from arbitrary bytes: byte b is token b, every
 * byte of the input and nothing else. */
#include "fuzz.h"
#include "io/io_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  remat_tokens t;
  remat_error err = {0};
  int rc = remat__tokens_from_text_mem(&t, data, size, "fuzz.txt", &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_ASSERT(size < 2 && t.tok == NULL);
    return 0;
  }
  FUZZ_ASSERT(t.n == (int64_t)size);
  int32_t mx = 0;
  for (size_t i = 0; i < size; i++) {
    FUZZ_ASSERT(t.tok[i] == data[i]);
    if (data[i] > mx) mx = data[i];
  }
  FUZZ_ASSERT(t.max_id == mx);
  remat_tokens_free(&t);
  return 0;
}
