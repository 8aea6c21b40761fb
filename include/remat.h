/* remat.h: the public API of remat, a GPT-2 training engine and memory planner.
 *
 * remat trades memory for compute precisely. A training step's every buffer is
 * planned before the first step (remat_memplan), each transformer block either
 * keeps the activations its backward needs or recomputes them from its input
 * (remat_policy), and the pipeline planner (remat_plan_solve) chooses layer
 * counts and checkpointed layers per pipeline stage under per-stage budgets.
 *
 * A short tour:
 *
 *   remat_config cfg;
 *   remat_error err;
 *   if (remat_config_parse("gpt2-124m", &cfg, &err)) { puts(err.msg); ... }
 *
 *   // How much memory does B=4, T=64 need with every block recomputed?
 *   remat_memplan *mp;
 *   uint8_t pol[12]; memset(pol, REMAT_RECOMPUTE, sizeof pol);
 *   if (remat_memplan_create(&mp, &cfg, 4, 64, pol, &err) == 0) {
 *     printf("%zu bytes\n", remat_memplan_peak_bytes(mp));
 *     remat_memplan_destroy(mp);
 *   }
 *
 * Conventions: functions return 0 or a negative code from REMAT_ERRNO_MAP; when
 * they take a remat_error*, it receives a one-line message saying what was wrong
 * and what to do. The library never prints and never exits. Byte sizes are
 * size_t, dimensions int64_t. The caller owns every object the library fills in
 * and releases it with the matching _free function; opaque objects (the model,
 * the trainer, the pipeline and replica runtimes) come from _create and go
 * with _destroy. The trainer (remat/train.h) is where most programs start.
 */
#ifndef REMAT_H
#define REMAT_H

/* One header per topic, from the bottom of the stack to the top; each
 * includes what it builds on. */
#include "remat/base.h"   /* errors, sizes */
#include "remat/config.h" /* GPT-2 shapes and parameter tensors */
#include "remat/memory.h" /* per-block policies, the memory model, the arena plan */
#include "remat/model.h"  /* GPT-2 forward/backward/update over the arena */
#include "remat/io.h"     /* token shards, checkpoints, text, corpus, loader */
#include "remat/report.h" /* sgemm rate, MFU, memory measurements, threads */
#include "remat/train.h"  /* the trainer: data, schedule, the step */
#include "remat/schedule.h" /* pipeline schedules as instruction streams */
#include "remat/plan.h"   /* the exact pipeline planner */
#include "remat/parallel.h" /* pipeline stages and replicas over MPI */
#include "remat/job.h"    /* a training job: placement, runtimes, weights, resume */
#include "remat/text.h"     /* GPT-2's byte-level BPE tokenizer */
#include "remat/generate.h" /* text generation with a KV cache */

#endif /* REMAT_H */
