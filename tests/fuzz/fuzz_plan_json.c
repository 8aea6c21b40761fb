/* fuzz_plan_json.c: pipeline-planning problems from arbitrary JSON text
 * (not NUL-terminated: the parser takes a length). A problem that parses
 * passes remat_plan_problem_check; one that does not gets a message. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  remat_plan_problem pb;
  remat_error err = {0};
  int rc = remat_plan_problem_parse_json(&pb, (const char *)data, size, &err);
  if (rc) {
    /* one line even for a key holding a newline
     * (corpus/plan_json/key_with_newline.json) */
    fuzz_check_error(rc, &err);
    return 0;
  }
  FUZZ_ASSERT(remat_plan_problem_check(&pb, &err) == 0);
  FUZZ_ASSERT(remat_plan_problem_layers(&pb) >= 1);
  remat_plan_problem_free(&pb);
  return 0;
}
