/* remat/schedule.h: pipeline schedules as instruction streams, the one
 * order of a stage's forwards and backwards that the pipeline runtime
 * executes and the planner's simulator times.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_SCHEDULE_H
#define REMAT_SCHEDULE_H

#include <stdint.h>

#include "remat/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules; append only. */
typedef enum { REMAT_SCHED_1F1B = 0, REMAT_SCHED_GPIPE = 1, REMAT_SCHED_COUNT } remat_plan_schedule;

REMAT_API const char *remat_plan_schedule_name(int schedule);     /* "1f1b", "gpipe" */
REMAT_API int remat_plan_schedule_parse(const char *s, int *out); /* -1 if unknown */

/* The instruction stream of stage s of p with m micro-batches: its q-th
 * operation (q = 0 .. 2m-1) is the forward (*bwd = 0) or backward (*bwd = 1)
 * of micro-batch *k. 1F1B: min(p - s - 1, m) warm-up forwards, then one
 * forward and one backward in turn, then the remaining backwards; GPipe:
 * every forward, then every backward, both in micro-batch order. The
 * pipeline runtime executes these streams (with the receives and sends
 * around each operation) and the planner's simulator (remat_plan_simulate)
 * times them. */
REMAT_API void remat_schedule_op(int schedule, int64_t p, int64_t m, int64_t s, int64_t q,
                                 int64_t *k, int *bwd);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_SCHEDULE_H */
