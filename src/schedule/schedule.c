/* schedule.c: the instruction streams of the pipeline schedules and their
 * names. See include/remat/schedule.h. */
#include <string.h>

#include "remat/schedule.h"

static const char *const sched_names[REMAT_SCHED_COUNT] = {"1f1b", "gpipe", "interleaved", "zb-h1",
                                                            "zbv"};

const char *remat_plan_schedule_name(int s) {
  return s >= 0 && s < REMAT_SCHED_COUNT ? sched_names[s] : "?";
}

int remat_plan_schedule_parse(const char *s, int *out) {
  for (int i = 0; i < REMAT_SCHED_COUNT; i++)
    if (s && strcmp(s, sched_names[i]) == 0) return *out = i, 0;
  return -1;
}

void remat_schedule_op(int schedule, int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k,
                       int *bwd) {
  if (schedule == REMAT_SCHED_GPIPE) {
    *bwd = q >= m;
    *k = q < m ? q : q - m;
    return;
  }
  int64_t w = p - s - 1 < m ? p - s - 1 : m; /* warm-up forwards */
  if (q < w) {
    *bwd = 0;
    *k = q;
  } else if (q < w + 2 * (m - w)) {
    int64_t u = q - w; /* steady state: forward w + u/2, then backward u/2 */
    *bwd = u % 2;
    *k = *bwd ? u / 2 : w + u / 2;
  } else {
    *bwd = 1;
    *k = q - w - (m - w); /* drain: the remaining backwards */
  }
}
