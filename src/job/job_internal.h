/* job_internal.h: what the job's files share. */
#ifndef REMAT_JOB_INTERNAL_H
#define REMAT_JOB_INTERNAL_H

#include "remat/job.h"

/* Writes the description's settings (the shape as L,C,NH,V,T from cfg) to
 * path, atomically: the `settings` file of a checkpoint (settings.c).
 * val-frac is saved as the share held out (0 when held_out is 0), which a
 * resume keeps whatever its evaluation interval. */
int remat__job_settings_save(const char *path, const remat_job_desc *d, const remat_config *cfg,
                             int held_out, remat_error *err);

#endif
