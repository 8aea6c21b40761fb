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
 * Lifecycles: one verb pair per kind of object.
 *   - Opaque objects (remat_memplan, remat_loader, remat_model,
 *     remat_trainer, remat_dist, remat_pipeline, remat_replicas, remat_grid,
 *     remat_job, remat_bpe, remat_generator) come from remat_X_create
 *     (remat_X_create_stage and the like for other shapes of the same
 *     object), always as int remat_X_create(remat_X **out, ..., err), and go
 *     with remat_X_destroy(x), which accepts NULL.
 *   - Structs the caller holds, whose fields it reads, and which own heap
 *     parts (remat_tokens, remat_checkpoint_reader, remat_plan_problem,
 *     remat_plan, remat_plan_layout, remat_plan_sweep, remat_ids) are filled
 *     by a function whose verb says where the contents come from (_load,
 *     _from_text, _from_model, _parse_json, _open, _solve, _run, or _init for
 *     an empty one) and are released with remat_X_free(&x), which accepts a
 *     zeroed or already freed struct. Text the library writes (char *) goes
 *     with the matching _text_free.
 *   - Plain structs without heap parts (remat_config, remat_stage,
 *     remat_placement, remat_train_opts, ...) need no release.
 *
 * Conventions: functions return 0 or a negative code from REMAT_ERRNO_MAP; when
 * they take a remat_error*, it receives a one-line message saying what was wrong
 * and what to do. The library never prints and never exits. Byte sizes are
 * size_t, dimensions int64_t. The trainer (remat/train.h) is where most
 * programs start.
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
