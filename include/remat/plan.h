/* remat/plan.h: the exact pipeline planner: layers and recomputed layers per stage.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_PLAN_H
#define REMAT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "remat/memory.h"   /* GPT-2 problems take their bytes from the memory model */
#include "remat/schedule.h" /* the schedules */

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================== pipeline plan */

/* The pipeline planner. Given a model as a list of layers, p pipeline
 * stages with memory budgets, m micro-batches and a schedule, it chooses how
 * many consecutive layers each stage runs and, for each layer, whether it
 * keeps its activations, recomputes them in the backward pass, or takes a
 * middle policy that recomputes only part of them, exactly (no heuristics,
 * no MIP solver).
 *
 * The model (one micro-batch of work per layer l):
 *   f_l, b_l, r_l   forward, backward and recompute time (any unit)
 *   a_l             bytes the layer stores for its backward when kept
 *   c_l             bytes it stores when recomputed (its input), c_l <= a_l
 *                   for recomputation to be of any use
 *   x_l             extra bytes while it reruns its forward (scratch)
 *   y_l             work bytes: transient bytes while it runs (its backward
 *                   workspace), whether kept or recomputed
 *   w_l             persistent bytes: parameters, gradients, optimizer state
 * and, for layers with a middle policy (a GPT-2 block: keep the outputs of
 * its matrix products and attention, recompute its layernorms and GELU):
 *   rm_l            its recompute time
 *   mb_l            bytes it stores under it, c_l <= mb_l < a_l to be of use
 *   xm_l            extra bytes while it recomputes under it (scratch)
 *
 * A stage s (0-based) of p runs layers [i, j), recomputes a subset R of them
 * and takes the middle policy on a subset M (disjoint from R):
 *
 *   memory_s = stage_bytes + [s < p - 1] boundary_bytes + sum_{l in [i,j)} w_l
 *            + n_s * ( sum_{l kept} a_l + sum_{l in R} c_l + sum_{l in M} mb_l )
 *            + max( max_{l in [i,j)} y_l, max_{l in R} x_l, max_{l in M} xm_l )
 *              (0 for an empty max)
 *            + k_s * sum_{l in [i,j)} u_l
 *   n_s      = min(p - s, m) under 1F1B and ZB-H1 (stage s holds that many
 *              micro-batches of activations at its peak), m under GPipe
 *   k_s      = micro-batches whose deferred W keeps u_l alive: min(s + 1, m)
 *              under ZB-H1 (stage s puts off its W by s micro-batches), 0
 *              under the schedules without W
 *   t_s      = sum_{l in [i,j)} (f_l + b_l) + sum_{l in R} r_l + sum_{l in M} rm_l
 *
 * Chunked schedules (interleaved: v chunks per stage, zbv: 2) cut the model
 * into p v consecutive virtual stages; stage s holds v of them
 * (remat_schedule_virtual_stage) and needs, for each of its chunks, the
 * chunk's terms above (stage_bytes, w, boundary_bytes but on the last
 * virtual stage, n and k
 * times its stored and kept-for-W bytes) for each of its chunks, and the
 * largest transient term over all its layers; n and k of each chunk are
 * the peaks its stream reaches (remat_schedule_streams_peaks; their sum over
 * a stage's chunks bounds the stage's peak from above). t_s sums its
 * chunks' layers. The planner enumerates every partition into virtual
 * stages (at most REMAT_PLAN_MAX_PARTITIONS) and solves each stage's
 * knapsack over all its chunks' layers exactly.
 *
 * Each layer thus has up to three choices (keep, recompute, middle), each
 * with its bytes and its time: the choice within a stage is a
 * multiple-choice knapsack, solved exactly (docs/plan.md).
 * and must satisfy memory_s <= budget_s. Objectives:
 *   bottleneck   max_s t_s                          (the seed's MIP)
 *   1f1b         sum_s t_s + (m - 1) * max_s t_s    (1F1B iteration time
 *                without communication; remat_plan_simulate gives the exact
 *                schedule makespan for the chosen stage times)
 * Both are functions of the per-stage times t_s, under every schedule: the
 * plan is exact for them, and the schedule's simulated makespan of the plan
 * (remat_plan_simulate_streams, per virtual stage, with B and W apart under
 * zb-h1 and zbv) is reported beside them, not optimised.
 *   simulated    that makespan, under any schedule, by the enumeration of
 *                partitions (at most REMAT_PLAN_MAX_PARTITIONS): exact over
 *                the partitions when every stage takes its least-time choice
 *                (then fewest layers, least memory); a stage taking a slower
 *                choice that shortens the makespan (moving recomputation
 *                off the critical path) is not searched.
 * Ties break toward fewer recomputed layers in total (a middle layer counts
 * as recomputed: it is not kept), then a lower maximum stage memory.
 *
 * Times are converted to integers in units of a power of two q, the smallest
 * for which every objective value fits in 61 bits; times that are multiples of
 * q (integers, halves, ...) are exact, others are rounded by at most q / 2
 * each, about 2^-60 of the total. Bytes must be whole numbers. All
 * comparisons are then exact integer comparisons.
 *
 * Usage:
 *   remat_plan_problem pb;  remat_plan plan;  remat_error err;
 *   if (remat_plan_problem_load(&pb, "model.json", &err)) ...
 *   int rc = remat_plan_solve(&pb, &plan, &err);  // REMAT_EINFEASIBLE: see plan
 *   char *text;  remat_plan_format(&pb, &plan, REMAT_PLAN_FORMAT_TABLE, &text, &err);
 *   ... remat_plan_text_free(text); remat_plan_free(&plan); remat_plan_problem_free(&pb);
 */

/* ------------------------------------------------------------ problem */

/* The schedule (remat_plan_schedule, REMAT_SCHED_*) is remat/schedule.h's. */
typedef enum {
  REMAT_OBJ_BOTTLENECK = 0, /* max_s t_s */
  REMAT_OBJ_1F1B = 1,       /* sum_s t_s + (m - 1) max_s t_s */
  REMAT_OBJ_SIMULATED = 2,  /* the schedule's simulated makespan (see above) */
  REMAT_OBJ_COUNT
} remat_plan_objective;

/* Limits of a problem; beyond them the planner refuses with REMAT_ERANGE. */
#define REMAT_PLAN_MAX_LAYERS 1000000    /* total layers over all groups */
#define REMAT_PLAN_MAX_STAGES 65536
#define REMAT_PLAN_MAX_MICROBATCHES 1000000
#define REMAT_PLAN_MAX_BYTES ((size_t)1 << 60) /* any single byte count or budget */
#define REMAT_PLAN_MAX_PROBLEM_BYTES ((size_t)16 << 20) /* a JSON problem's text, 16 MiB */
#define REMAT_PLAN_MAX_PARTITIONS 2000000 /* chunked schedules: partitions enumerated */

/* A run of `count` identical consecutive layers. */
typedef struct remat_plan_group {
  char name[32];           /* optional label ("embedding", "block", "head") */
  int64_t count;           /* >= 1 */
  double fwd, bwd, recompute; /* per layer and micro-batch, >= 0 */
  size_t act_bytes;        /* a: stored per micro-batch when kept */
  size_t ckpt_bytes;       /* c: stored per micro-batch when recomputed */
  size_t state_bytes;      /* w: persistent */
  size_t recompute_bytes;  /* x: scratch while recomputing */
  size_t work_bytes;       /* y: transient while it runs, kept or recomputed */
  int recomputable;        /* 0: the layer always keeps its activations */
  int middle;              /* 1: a recomputable layer may also take the middle
                              policy, with the three figures below */
  double middle_recompute; /* rm: recompute time under it, >= 0 */
  size_t middle_bytes;     /* mb: stored per micro-batch under it */
  size_t middle_recompute_bytes; /* xm: scratch while it recomputes under it */
  /* Zero-bubble schedules (zb-h1, zbv) split the backward b into B, the
   * input gradient, and W, the weight gradient, run later: */
  double wgrad;            /* W's share of bwd (0 <= wgrad <= bwd); B is the rest */
  size_t wgrad_bytes;      /* u: what a deferred W keeps alive per micro-batch
                              between its B and its W (the inputs of the
                              layer's weight products and their output
                              gradients), whatever the layer's policy */
} remat_plan_group;

/* What the framework exports need of the job beyond the planner's formula;
 * each field is optional (0 or "": unknown). */
typedef struct remat_plan_job {
  char family[32];         /* the model family ("gpt2", "llama", ...): which of a
                              framework's policies runs it */
  int64_t micro_batch;     /* sequences per micro-batch */
  int64_t seq_len;         /* tokens per sequence */
  int64_t data_parallel;   /* replicas of the pipeline */
  int64_t tensor_parallel; /* tensor-parallel degree */
  int64_t sequence_parallel; /* 1: sequence parallelism with it */
  int64_t kv_heads;        /* key/value heads (0: unknown): the frameworks split
                              them over the tensor ranks and need t to divide them */
  int engine;              /* 1: the bytes are remat's own engine's (a --config
                              problem), not measured on the user's model */
} remat_plan_job;

typedef struct remat_plan_problem {
  int64_t stages;       /* p */
  int64_t microbatches; /* m */
  int schedule;         /* remat_plan_schedule */
  int objective;        /* remat_plan_objective */
  size_t *memory;       /* (stages) budget of each stage, owned */
  int uniform_memory;   /* 1 when one budget was given for all stages */
  size_t stage_bytes;   /* bytes every stage needs besides its layers */
  size_t boundary_bytes; /* more bytes every stage but the last needs (its
                            output being sent to the next stage) */
  /* zbv's first stage holds the first layer and the last: the last layer
   * holds this many state_bytes less there (the engine's head reading the
   * embedding's tied matrix, remat_stage.tied_borrowed: no copy of it);
   * at most its group's state_bytes */
  size_t v_last_state_less;
  int64_t num_groups;
  remat_plan_group *groups; /* (num_groups) in model order, owned */
  char time_unit[16];   /* label of the time unit for output ("" = none) */
  char source[256];     /* what the problem was built from, for output */
  int64_t head_chunk;   /* built from a model: its head's logits in chunks
                           of this many tokens (remat_config's head_chunk;
                           0: all at once), written into the plan */
  double time_limit;    /* seconds remat_plan_solve may take (0: no limit), see there */
  int64_t chunks;       /* v, model chunks per stage (0: the schedule's default,
                           remat_schedule_chunks); more than 1 under interleaved
                           and zbv only */
  /* Blocks (layers of recomputable groups: the transformer layers a
   * framework counts) every stage, and every chunk, must hold: 0 or 1.
   * With 1 the layers that cannot recompute (an embedding, a head) go with
   * the block beside them, so no stage holds them alone; they must then lie
   * before the first block or after the last (remat_plan_solve refuses
   * others, REMAT_EINVAL). */
  int64_t min_blocks;
  /* NULL, or (stages x v) blocks of each virtual stage in model order, owned:
   * the split is then fixed and only the recompute is chosen (a framework
   * that runs only its own split: ColossalAI's chunked schedules). Needs
   * min_blocks 1 and a chunked schedule (v > 1). */
  int64_t *fixed_blocks;
  /* 1: recompute per micro-batch. A stage holds n micro-batches at its peak
   * in n slots (micro-batch k of a step in slot k mod n); a layer that
   * would keep may then recompute in full in only the last k of them (0 <
   * k < n), saving k (a - c) bytes for the time of the micro-batches those
   * slots serve (remat_plan.full_slots). Chosen exactly where a stage's
   * recomputable layers are alike (one group of identical layers), as
   * every remat model's blocks are; per layer elsewhere. remat_plan_solve
   * plans it for one-chunk schedules (1f1b, gpipe, zb-h1) only; 0 plans per
   * layer. */
  int per_microbatch;
  /* 1: under a stream (interleaved, zb-h1, zbv on several stages) spend
   * the room each rank's pool of slots and W records leaves below its
   * budget (remat_plan_stage.stream_peak_bytes): remat_plan_solve solves
   * again with each stage's bound raised by that room, and keeps the best
   * plan whose pools fit the budgets (a search, not exact: up to 3 more
   * solves). 0: the exact plan under the bound. */
  int spend_pools;
  remat_plan_job job;
} remat_plan_problem;

/* Allocates a problem with `stages` budgets and `num_groups` groups, all
 * zero; schedule 1f1b, objective bottleneck, groups recomputable. */
REMAT_API int remat_plan_problem_init(remat_plan_problem *pb, int64_t stages, int64_t num_groups,
                                      remat_error *err);
REMAT_API void remat_plan_problem_free(remat_plan_problem *pb);
/* dst: a deep copy of src (free it with remat_plan_problem_free). */
REMAT_API int remat_plan_problem_copy(remat_plan_problem *dst, const remat_plan_problem *src,
                                      remat_error *err);
/* Checks every field; the message names the offending one. */
REMAT_API int remat_plan_problem_check(const remat_plan_problem *pb, remat_error *err);
/* Total number of layers (sum of counts; saturates at INT64_MAX). */
REMAT_API int64_t remat_plan_problem_layers(const remat_plan_problem *pb);
/* Changes the number of stages; budgets must be uniform (or stages equal). */
REMAT_API int remat_plan_problem_set_stages(remat_plan_problem *pb, int64_t stages,
                                            remat_error *err);
/* Sets one budget for every stage. */
REMAT_API void remat_plan_problem_set_memory(remat_plan_problem *pb, size_t bytes);

/* Memory budgets as a front end gives them, one size for every stage or one
 * per stage ("2GiB" or "2GiB,3GiB"; remat_parse_size's units), parsed once:
 * remat train's and remat plan's --mem alike. */
typedef struct remat_budgets {
  int64_t n;    /* how many were given (0: none) */
  size_t *bytes; /* (n) */
} remat_budgets;
/* Fills b from s (free it with remat_budgets_free). */
REMAT_API int remat_budgets_parse(remat_budgets *b, const char *s, remat_error *err);
REMAT_API void remat_budgets_free(remat_budgets *b);
/* The one way budgets enter a problem: one for every stage, or one per
 * stage (refused for another count); none given leaves the problem's. */
REMAT_API int remat_plan_problem_set_budgets(remat_plan_problem *pb, const remat_budgets *b,
                                             remat_error *err);

/* What remat train --mem chooses for the whole model in one process, or
 * for each replica: for every block keep, middle or full, the least
 * recompute time (the planner's times) whose arena fits `budget` bytes,
 * ties to fewer recomputed blocks, then to the lower peak: remat_plan_solve
 * on one stage, and the job calls this, so the library and the command
 * give one answer. whole (NULL: remat_stage_whole) says whether the model
 * accumulates micro-batches and whether it is a replica (replicas, zero);
 * its policy and blocks are ignored. policy (cfg->num_layers values, may be
 * NULL) receives each block's remat_policy; *n_full and *n_middle (may be
 * NULL) count the blocks recomputed in full and under the middle policy;
 * *min_bytes (may be NULL) is the choice's arena. REMAT_EINFEASIBLE when
 * even the least memory does not fit: then policy, the counts and
 * *min_bytes are that least-memory choice's. */
REMAT_API int remat_fewest_recompute(const remat_config *cfg, int64_t B, int64_t T,
                                     const remat_stage *whole, size_t budget, uint8_t *policy,
                                     int64_t *n_full, int64_t *n_middle, size_t *min_bytes,
                                     remat_error *err);

/* JSON problem:
 *   { "stages": 4, "microbatches": 8, "schedule": "1f1b", "objective": "bottleneck",
 *     "memory": 20e9 | "20GB" | [b0, b1, ...], "stage_bytes": 0,
 *     "layers": [ {"name": "block", "count": 32, "fwd": 1, "bwd": 2, "recompute": 1,
 *                  "act_bytes": 1.25e9, "ckpt_bytes": 0.125e9, "state_bytes": 0,
 *                  "recompute_bytes": 0, "work_bytes": 0, "recomputable": true,
 *                  "middle_bytes": 0.5e9, "middle_recompute": 0.05,
 *                  "middle_recompute_bytes": 0, "wgrad": 1, "wgrad_bytes": 0.2e9} ] }
 * with "chunks": v beside "schedule" for interleaved (default 2) and zbv (2).
 * chunks, wgrad and wgrad_bytes (default 0) are optional;
 * schedule (default 1f1b), objective (default bottleneck), stage_bytes,
 * name, count (default 1), recompute_bytes and work_bytes (default 0) and
 * recomputable (default true) are optional; recompute may be left out when
 * recomputable is false. middle_bytes gives the layer the middle policy;
 * middle_recompute then goes with it, middle_recompute_bytes (default 0)
 * may. Unknown fields are errors, except "comment". The
 * text must be one JSON object (only whitespace after it), without duplicate
 * keys or NUL bytes, nested at most 8 levels, and at most
 * REMAT_PLAN_MAX_PROBLEM_BYTES; remat_plan_problem_load refuses a larger file
 * before reading it. */
REMAT_API int remat_plan_problem_parse_json(remat_plan_problem *pb, const char *text, size_t len,
                                            remat_error *err);
REMAT_API int remat_plan_problem_load(remat_plan_problem *pb, const char *path, remat_error *err);

/* A GPT-2 problem from the memory model (remat_memory_model_get): an
 * embedding layer, the L blocks and a head, none but the blocks recomputable,
 * with the bytes of include/remat/memory.h, so that a stage's memory_bytes
 * is exactly the arena the engine plans for that stage. Times are in GFLOP
 * of one micro-batch (B x T tokens):
 *   block      f = 24 B T C^2 + 4 B T^2 C,  b = 2 f,  r = f
 *   embedding  f = b = B T C (gathers and adds)
 *   head       f = 2 B T C Vp + 5 B T Vp, b = 2 f
 * and a block's middle policy (its two layernorms and its GELU rerun)
 *             rm = REMAT_PLAN_MIDDLE_FLOP_PER_ELEMENT B T C
 * The wte matrix is tied to the head; it is counted once, on the embedding. */
/* The middle policy's recompute, in the FLOP of the times above per
 * element of a (B, T, C) tensor: two layernorm forwards over (B, T, C) and
 * a GELU over (B, T, 4C) took 0.057 and 0.068 times as long as a block's
 * forward (24 C + 4 T FLOP per element) at GPT-2 124M T64 and at L6 C256
 * T1024 on a 2-core Xeon (bench_train), that is 1065 and 696 FLOP per
 * element (up to twice that on a loaded machine). These passes are bound by
 * memory and by expf, not by multiply-adds: their arithmetic, some 60 FLOP
 * per element, would understate them more than tenfold (docs/plan.md). */
#define REMAT_PLAN_MIDDLE_FLOP_PER_ELEMENT 1024.0
REMAT_API int remat_plan_problem_from_model(remat_plan_problem *pb, const remat_config *cfg,
                                            int64_t B, int64_t T, int64_t stages,
                                            int64_t microbatches, size_t memory, remat_error *err);
/* The same for a data-parallel job of `replicas` copies of the whole model
 * (stages 1), or of every pipeline stage (a grid of stages x replicas),
 * under ZeRO stage zero: each layer's state bytes are a replica's (whole or
 * sharded, remat_replica_bytes; a head without the embedding with its copy
 * of the tied matrix), its work bytes one process's, and stage_bytes the
 * communication buffers (its gradient buffers among them) of a replica of
 * the whole model:
 * exact with one stage, and on a grid an upper bound of each stage's
 * (remat_replica_stage_bytes_get, which the engine's arenas follow);
 * microbatches is the count per replica (per pipeline) and step. With
 * replicas 1 this is remat_plan_problem_from_model. */
REMAT_API int remat_plan_problem_from_replicas(remat_plan_problem *pb, const remat_config *cfg,
                                               int64_t B, int64_t T, int64_t stages,
                                               int64_t microbatches, int64_t replicas, int zero,
                                               size_t memory, remat_error *err);

/* Tensor parallelism (remat_config.tensor_parallel t >= 2): the problem
 * above is one tensor rank's, its bytes the memory model's for a rank's
 * shard and its FLOP times a rank's share of the products and of the
 * attention (1/t of each). What the collectives add: the bytes each rank
 * sends, in a ring, per micro-batch, for the embedding, a block and the
 * head, forward and backward (all-reduces of the row-parallel products'
 * fp32 sums and of the gradients into the column-parallel ones; under
 * sequence parallelism all-gathers and reduce-scatters instead, the
 * backward gathering the layernorms' outputs again for the weight
 * gradients; the head's loss over a share of the vocabulary all-reduces
 * three floats a token). All zero for t 1. src/plan/tensor.c says each. */
typedef struct remat_tensor_comm {
  double embed_fwd, embed_bwd, block_fwd, block_bwd, head_fwd, head_bwd;
} remat_tensor_comm;
REMAT_API void remat_tensor_comm_get(const remat_config *cfg, int64_t B, int64_t T,
                                     remat_tensor_comm *c);
/* Adds the collectives' time, per_byte of the problem's time unit for each
 * byte (GFLOP problems: a rank's GFLOP/s over the link's bytes/s; seconds:
 * 1 / the link's bytes/s), to the groups of a --config problem (embedding,
 * blocks, head): forward, backward (B; W sends nothing) and a recomputed
 * block's rerun. The link's time is added, not overlapped: an upper bound
 * where the runtime overlaps it with compute. */
REMAT_API void remat_plan_problem_add_comm(remat_plan_problem *pb, const remat_tensor_comm *c,
                                           double per_byte);
/* Korthikanti et al.'s activation bytes of one transformer layer at B x T
 * in 16-bit (Reducing Activation Recomputation in Large Transformer Models,
 * 2022): s b h (10 + 24/t + 5 a s / (h t)), or s b h (34/t + 5 a s / (h t))
 * with sequence parallelism, t the config's tensor degree; shown beside
 * remat's own (docs/plan.md, "Tensor parallelism", explains each
 * difference). */
REMAT_API double remat_korthikanti_layer_bytes(const remat_config *cfg, int64_t B, int64_t T);

/* The layout of a job on N ranks (remat plan --ranks): N = t p d tensor,
 * pipeline and data-parallel ranks, tensor ranks adjacent. A query gives
 * the model (cfg, its precision and head chunk; its tensor degree is the
 * search's), the global batch of G sequences of T tokens a step, the
 * bytes each rank may hold, and the rates that time the collectives
 * (bytes/s; 0 leaves that level untimed), in the problems' unit: FLOP
 * times (GFLOP) weigh a link's second by a rank's GFLOP/s. Every layout is
 * searched: each t dividing N (and the heads, the MLP, the vocabulary),
 * with and without sequence parallelism, each p up to the layers, d the
 * rest; each ZeRO stage (d > 1); each micro-batch size b dividing G / d
 * (M = G / (d b) micro-batches, at most REMAT_PLAN_MAX_MICROBATCHES); the
 * one-chunk schedules 1f1b and zb-h1, and interleaved and zbv where their
 * partitions can be enumerated; and for each, remat_plan_solve's exact
 * stages and policies. A layout's time is its plan's simulated iteration
 * (or the plan's own, else), plus the replicas' gradient traffic and the
 * pipeline's sends, not overlapped; layouts whose lower bound (a perfect
 * split without recompute, and the state's bytes spread evenly) another
 * searched layout dominates are not solved: the fastest and the Pareto
 * set are exact all the same. */
typedef struct remat_layout_query {
  remat_config cfg;
  int64_t ranks, global_batch, seq_len;
  size_t memory;                 /* a rank's budget (its arena) */
  int objective;                 /* each layout's plan's (remat_plan_objective) */
  double rank_rate;              /* problem units a second (GFLOP/s); 0: links untimed */
  double link_tp, link_pp, link_dp; /* bytes/s; 0: that level untimed */
  int64_t max_tensor;            /* the largest t (0: N); a node's GPUs, say */
  double time_limit;             /* seconds per layout's solve (0: none) */
  int exhaustive;                /* 1: solve every layout, bounds unused (tests) */
  int no_sequence_parallel;      /* 1: layouts without sequence parallelism only */
  /* NULL, or what replaces a layout's FLOP times with measured ones (in
   * seconds; rank_rate is then 1): called for each layout's problem, its
   * config the rank's and B its micro-batch; REMAT_EINVAL refuses that
   * layout (a shape the engine does not run), other nonzero stops the
   * search */
  int (*times)(void *ctx, const remat_config *cfg, int64_t B, int64_t T,
               remat_plan_problem *pb, remat_error *err);
  void *times_ctx;
} remat_layout_query;
typedef struct remat_layout {
  int64_t t, sp, p, d, zero, b, m;
  int64_t head_chunk; /* the head's chunk its plan took (0: all at once) */
  int schedule;
  int solved;        /* 0: dominated by its bound; 1: planned (rc below) */
  int rc;            /* remat_plan_solve's: 0, REMAT_EINFEASIBLE, or another refusal */
  int optimal;       /* the plan was proven optimal (no time limit hit) */
  int pareto;        /* on the Pareto front of time against memory */
  double time;       /* the iteration (with its communication) */
  double comm_dp, comm_pp; /* of which the replicas' and the pipeline's */
  double bound;      /* its lower bound on time */
  size_t memory;     /* the plan's largest rank */
  size_t bound_memory;
} remat_layout;
typedef struct remat_layout_search {
  remat_layout *rows; /* owned: every layout, solved or bounded, fastest first */
  int64_t n, best;    /* best: the fastest that fits (-1: none fits) */
  int64_t solved;
  double seconds;
} remat_layout_search;
REMAT_API int remat_layout_search_run(const remat_layout_query *q, remat_layout_search *out,
                                      remat_error *err);
REMAT_API void remat_layout_search_free(remat_layout_search *s);

/* "bottleneck", "1f1b", "simulated" */
REMAT_API const char *remat_plan_objective_name(int objective);
REMAT_API int remat_plan_objective_parse(const char *s, int *out); /* -1 if unknown */

/* ------------------------------------------------------------ plan */

typedef struct remat_plan_stage {
  int64_t first_layer;    /* global index of its first layer */
  int64_t num_layers;
  int64_t num_recomputed; /* layers not kept: recomputed or middle */
  int64_t *recomputed;    /* (num_recomputed) global layer indices, ascending */
  int64_t microbatches_held; /* n_s */
  size_t memory_bytes;    /* memory_s of the formula above */
  size_t budget_bytes;
  double time;            /* t_s */
  double fwd_time;        /* sum f */
  double bwd_time;        /* sum b + sum r over recomputed + sum rm over middle */
  int64_t num_middle;     /* of num_recomputed, those under the middle policy */
  int64_t wgrad_held;     /* k_s: micro-batches kept for a deferred W (summed
                             over its chunks, as microbatches_held is) */
  /* interleaved, zb-h1, zbv on several stages: the stage's memory as
   * remat train holds it, its slots and W records in one pool laid out
   * over the rank's stream (remat_schedule_pool_layout), at or below
   * memory_bytes, which adds each chunk's peaks; 0 when not computed */
  size_t stream_peak_bytes;
  int64_t num_partial;    /* of num_recomputed, those recomputed for only some of
                             its micro-batches (remat_plan.full_slots) */
} remat_plan_stage;

/* What the stage's rank holds: stream_peak_bytes where computed, else
 * memory_bytes. A plan fits a budget when this does. */
static inline size_t remat_plan_stage_held(const remat_plan_stage *st) {
  return st->stream_peak_bytes ? st->stream_peak_bytes : st->memory_bytes;
}

typedef struct remat_plan {
  int feasible;           /* 0: stages hold the smallest-memory arrangement */
  int pools_spent;        /* remat_plan_problem.spend_pools searched for this plan */
  int64_t num_stages, num_layers, microbatches;
  int schedule, objective;
  remat_plan_stage *stages;    /* (num_stages), owned */
  int64_t *recomputed_all;     /* storage behind stages[].recomputed, owned */
  double objective_value;      /* bottleneck_time or iteration_time */
  double bottleneck_time;      /* max_s t_s */
  double iteration_time;       /* sum_s t_s + (m - 1) max_s t_s */
  double simulated_time;       /* makespan of the schedule's simulation; <0 if skipped */
  double baseline_objective;   /* best partition without recomputation, memory ignored */
  double slowdown;             /* objective_value / baseline_objective (1 if both 0) */
  int64_t total_recomputed;
  size_t max_memory_bytes;
  /* When infeasible: the smallest single budget that fits every stage (for a
   * problem with per-stage budgets: the smallest extra bytes every stage
   * would need, added to its own budget). */
  size_t min_budget_bytes;
  size_t min_extra_bytes;
  double time_quantum;         /* q */
  int64_t windows;             /* solver rounds (window widenings + 1) */
  /* 1 when the plan is proven optimal; 0 when the problem's time limit
   * stopped the exact search: the plan is then the best feasible one found,
   * and lower_bound a proven lower bound on the optimal objective. */
  int optimal;
  double lower_bound;          /* objective_value when optimal */
  double gap;                  /* (objective_value - lower_bound) / objective_value, >= 0 */
  /* (num_layers) each layer's choice, owned: a remat_policy, REMAT_KEEP (0),
   * REMAT_RECOMPUTE (1) or REMAT_MIDDLE (2) */
  uint8_t *policy;
  int64_t total_middle;        /* of total_recomputed, the middle layers */
  /* Chunked schedules: v chunks per stage and the p v virtual stages in
   * model order, each one's first layer and layer count (owned; v = 1
   * gives one per stage, the stages' own). A stage's first_layer and
   * num_layers are then its first chunk's first layer and its layers in
   * all; its recomputed list covers all its chunks. */
  int64_t chunks;
  int64_t *chunk_first, *chunk_layers; /* (p v) */
  /* Planned per micro-batch (remat_plan_problem.per_microbatch): (num_layers)
   * owned, the number k of its stage's n slots, the last ones (slots n - k
   * to n - 1), in which a layer whose policy is REMAT_KEEP recomputes in
   * full; 0 for every other layer. NULL when planned per layer. */
  uint8_t *full_slots;
  int64_t total_partial; /* of total_recomputed, layers with full_slots > 0 */
} remat_plan;

/* Solves the problem exactly. Returns 0 with a feasible plan, or
 * REMAT_EINFEASIBLE with plan->feasible = 0 and plan filled with the
 * arrangement that needs the least memory (each stage recomputing what lowers
 * its memory most) and min_budget_bytes; other codes on bad input. The
 * caller frees plan with remat_plan_free whenever the return is 0 or
 * REMAT_EINFEASIBLE.
 *
 * With pb->time_limit > 0 the solve takes about that many seconds at most,
 * counted from the call; it may overrun by one time-free pass over the
 * layers (O(p L log L)) and the filling of the plan. The exact search gets
 * most of the time; if it does not
 * finish, a polynomial search for bounds takes the rest, and the return is 0
 * with plan->optimal = 0, the best feasible plan found (at worst the
 * least-memory arrangement) and plan->lower_bound proven by a relaxation
 * (stage times with fractional recomputation and scratch ignored, and the
 * best split without recomputation). If even the search for the smallest
 * budget of an infeasible problem runs out of time, the return is
 * REMAT_ERANGE with a message. */
REMAT_API int remat_plan_solve(const remat_plan_problem *pb, remat_plan *plan, remat_error *err);
REMAT_API void remat_plan_free(remat_plan *plan);
/* Of two ways to plan one job, each remat_plan_solve's return and plan:
 * 1 when b is the better, as the head chunk's choice weighs them (b fits
 * where a does not, or both fit and b's objective is lower, or neither
 * fits and b needs the smaller budget); 0 otherwise, and for any other
 * return. */
REMAT_API int remat_plan_better(int rc_a, const remat_plan *a, int rc_b, const remat_plan *b);

/* Makespan of one iteration of the schedule with per-stage forward and
 * backward times per micro-batch, no communication time, by a discrete-event
 * simulation. 1F1B: stage s runs min(p - s - 1, m) warm-up forwards, then
 * alternates one forward and one backward, then drains. GPipe: all forwards,
 * then all backwards. A forward waits for the previous stage's forward of the
 * same micro-batch, a backward for the next stage's backward. Each stage
 * follows its instruction stream (remat_schedule_op, remat/schedule.h). */
REMAT_API int remat_plan_simulate(int schedule, int64_t p, int64_t m, const double *fwd,
                                  const double *bwd, double *makespan, remat_error *err);
/* The same for any schedule's streams (remat_schedule_streams_build), with
 * times per virtual stage ((p v) arrays, model order): fwd, bwd the whole
 * backward, and wgrad its weight-gradient part (NULL: 0), which zb-h1 and
 * zbv run as W apart from B (bwd - wgrad); the others run bwd as one B.
 * REMAT_EINVAL if the streams deadlock. With one chunk, 1f1b and gpipe it
 * gives remat_plan_simulate's makespan. */
REMAT_API int remat_plan_simulate_streams(const remat_schedule_streams *st, const double *fwd,
                                          const double *bwd, const double *wgrad,
                                          double *makespan, remat_error *err);

/* A plan read back from remat_plan_format's JSON, to be run: 1f1b and gpipe
 * plans only (another schedule's is refused, REMAT_EINVAL, by name). Layers are in
 * the planner's numbering (for a GPT-2: 0 the embedding, 1..L the blocks,
 * L+1 the head). */
typedef struct remat_plan_layout {
  int64_t stages, num_layers, microbatches;
  int schedule;
  int64_t *layers_per_stage; /* (stages) */
  uint8_t *recompute;        /* (num_layers) remat_policy: 1 recomputed, 2 middle */
  size_t *budget_bytes;      /* (stages) */
  size_t *memory_bytes;      /* (stages) as the plan computed them */
  char source[256];          /* what the problem was built from */
  int64_t head_chunk;        /* the head's chunk of tokens it was planned with (0: none) */
  /* interleaved and zbv: v chunks per stage and the layers of each of the
   * stages x v virtual stages, model order (layers_per_stage sums a
   * stage's); chunks 1 and chunk_layers NULL otherwise */
  int64_t chunks;
  int64_t *chunk_layers;
  /* (num_layers) the plan's full_slots (a kept layer recomputing in full in
   * the last k slots of its stage), or NULL when it has none */
  uint8_t *full_slots;
} remat_plan_layout;
REMAT_API int remat_plan_layout_load(remat_plan_layout *lo, const char *path, remat_error *err);
REMAT_API void remat_plan_layout_free(remat_plan_layout *lo);

/* Memory and time of a given arrangement under the problem's formula: layers
 * per stage (per virtual stage, p v of them in model order, under a
 * chunked schedule) and, per layer, its remat_policy (0 keeps, 1 recomputes, 2 the
 * middle policy; NULL keeps all). For outputs that cannot express the plan
 * exactly (Megatron's one recompute count), for runs placed by hand, and
 * for tests. */
REMAT_API int remat_plan_evaluate(const remat_plan_problem *pb, const int64_t *layers_per_stage,
                                  const uint8_t *recompute, remat_plan *plan, remat_error *err);
/* The same with recompute per micro-batch: full_slots (num_layers, or NULL
 * for none) gives a kept layer's count k of its stage's n slots, the last
 * ones, in which it recomputes in full (k = n: in every one, as policy 1);
 * the plan's full_slots then holds them (remat_plan.full_slots). */
REMAT_API int remat_plan_evaluate_slots(const remat_plan_problem *pb,
                                        const int64_t *layers_per_stage, const uint8_t *recompute,
                                        const uint8_t *full_slots, remat_plan *plan,
                                        remat_error *err);

/* ------------------------------------------------------------ output */

typedef enum {
  REMAT_PLAN_FORMAT_TABLE,
  REMAT_PLAN_FORMAT_JSON,
  REMAT_PLAN_FORMAT_COLOSSALAI,
  REMAT_PLAN_FORMAT_MEGATRON,
  REMAT_PLAN_FORMAT_TORCH, /* torch.distributed.pipelining: schedule class, stage split */
  REMAT_PLAN_FORMAT_COUNT
} remat_plan_format_kind;

/* Writes the plan as text into *out (free with remat_plan_text_free). */
REMAT_API int remat_plan_format(const remat_plan_problem *pb, const remat_plan *plan, int format,
                                char **out, remat_error *err);
/* The problem as a MIP in CPLEX LP format: binaries y_l_s (layer l on stage
 * s), z_l_s (layer l recomputed on stage s) and u_l_s (layer l middle on
 * stage s; z + u <= y), contiguity through the stage
 * index sum_s s*y_l_s, which is non-decreasing by steps of 0 or 1, the memory
 * formula with a continuous X_s >= x_l z_l_s, X_s >= xm_l u_l_s and
 * X_s >= y_l y_l_s, and
 * T >= t_s. Its optimum is the planner's objective value. Memory rows are
 * divided by the gcd of all byte counts to keep coefficients small. */
REMAT_API int remat_plan_format_lp(const remat_plan_problem *pb, char **out, remat_error *err);
REMAT_API void remat_plan_text_free(char *text);

/* The frontier of objective against one memory budget for all stages: `points`
 * budgets evenly spaced from the smallest feasible budget to the smallest
 * budget at which no stage needs to recompute anything (both found exactly).
 * Each solve has the problem's time limit. */
typedef struct remat_plan_sweep_point {
  size_t budget_bytes;
  double objective_value, slowdown;
  int64_t total_recomputed;
  size_t max_memory_bytes;
  int64_t *layers_per_stage; /* (stages), owned by the sweep */
  int64_t *ckpt_per_stage;   /* (stages) layers not kept */
  int64_t *middle_per_stage; /* (stages) of those, middle ones */
  int optimal;               /* 0: the time limit stopped this point's search */
  double lower_bound;        /* proven lower bound on objective_value */
} remat_plan_sweep_point;

typedef struct remat_plan_sweep {
  int64_t num_points, num_stages;
  size_t min_budget_bytes, no_recompute_bytes;
  double baseline_objective;
  int middle;                /* the problem has layers with the middle policy */
  remat_plan_sweep_point *points;
  int64_t *storage;
} remat_plan_sweep;

REMAT_API int remat_plan_sweep_run(const remat_plan_problem *pb, int64_t points,
                                   remat_plan_sweep *sw, remat_error *err);
REMAT_API void remat_plan_sweep_free(remat_plan_sweep *sw);
REMAT_API int remat_plan_format_sweep(const remat_plan_problem *pb, const remat_plan_sweep *sw,
                                      int json, char **out, remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_PLAN_H */
