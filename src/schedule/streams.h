/* streams.h: each schedule's order, for its row of the schedule table
 * (schedule.c): the closed forms of 1F1B and GPipe, and one stream
 * generator per schedule (streams.c). A generator fills st->ops, p * len
 * steps, from st->p, m, v and len; 0 or REMAT_ENOMEM. */
#ifndef REMAT_SCHEDULE_STREAMS_H
#define REMAT_SCHEDULE_STREAMS_H

#include "remat/schedule.h"

void remat__sched_op_1f1b(int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k, int *bwd);
void remat__sched_op_gpipe(int64_t p, int64_t m, int64_t s, int64_t q, int64_t *k, int *bwd);

int remat__sched_streams_1f1b(remat_schedule_streams *st);
int remat__sched_streams_gpipe(remat_schedule_streams *st);
int remat__sched_streams_interleaved(remat_schedule_streams *st);
int remat__sched_streams_zbh1(remat_schedule_streams *st);
int remat__sched_streams_zbv(remat_schedule_streams *st);

#endif /* REMAT_SCHEDULE_STREAMS_H */
