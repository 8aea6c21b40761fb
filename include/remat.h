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
 *   remat_memplan mp;
 *   uint8_t pol[12]; memset(pol, REMAT_RECOMPUTE, sizeof pol);
 *   remat_memplan_build(&mp, &cfg, 4, 64, pol, &err);
 *   printf("%zu bytes\n", mp.peak_bytes);
 *   remat_memplan_free(&mp);
 *
 * Conventions: functions return 0 or a negative code from REMAT_ERRNO_MAP; when
 * they take a remat_error*, it receives a one-line message saying what was wrong
 * and what to do. The library never prints and never exits. Byte sizes are
 * size_t, dimensions int64_t. The caller owns every object the library fills in
 * and releases it with the matching _free function.
 */
#ifndef REMAT_H
#define REMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

/* One table generates the codes, their names and their messages. */
#define REMAT_ERRNO_MAP(XX)                                               \
  XX(EINVAL, -1, "invalid argument")                                      \
  XX(ENOMEM, -2, "out of memory")                                         \
  XX(EIO, -3, "input/output error")                                       \
  XX(EFORMAT, -4, "malformed file")                                       \
  XX(ESHAPE, -5, "shapes do not match")                                   \
  XX(EINFEASIBLE, -6, "does not fit the memory budget")                   \
  XX(ERANGE, -7, "value out of range")                                    \
  XX(ENUMERIC, -8, "numerical failure")

typedef enum {
  REMAT_OK = 0,
#define XX(name, value, msg) REMAT_##name = (value),
  REMAT_ERRNO_MAP(XX)
#undef XX
  REMAT_ERRNO_MIN = -9
} remat_errno;

#define REMAT_ERRMSG_MAX 512

/* What went wrong, for a person: code is a remat_errno, msg one line. */
typedef struct remat_error {
  int code;
  char msg[REMAT_ERRMSG_MAX];
} remat_error;

const char *remat_err_name(int code); /* "REMAT_EINVAL" */
const char *remat_strerror(int code); /* "invalid argument" */

/* ---------------------------------------------------------- model shape */

/* GPT-2 shape. The vocabulary is padded up to a multiple of 128 as llm.c does;
 * rows past vocab_size exist in the embedding but never take part in the loss. */
typedef struct remat_config {
  int64_t max_seq_len;       /* maxT: rows of the position embedding */
  int64_t vocab_size;        /* V */
  int64_t padded_vocab_size; /* Vp >= V, multiple of 128 (or V if V < 128) */
  int64_t num_layers;        /* L */
  int64_t num_heads;         /* NH, divides C */
  int64_t channels;          /* C */
} remat_config;

/* Parses a built-in name ("tiny", "small", "gpt2-124m", "gpt2-350m", ...) or a
 * spec "L,C,NH,V,T". */
int remat_config_parse(const char *name_or_spec, remat_config *cfg, remat_error *err);
/* Checks a shape for consistency (positive, NH | C, Vp >= V, sizes in range). */
int remat_config_check(const remat_config *cfg, remat_error *err);
/* Fills Vp from V. */
int64_t remat_padded_vocab(int64_t vocab_size);
/* Names of the built-in configs, NULL-terminated, and a one-line description. */
const char *const *remat_config_names(void);
const char *remat_config_describe(const char *name);

/* Parameter tensors in llm.c's checkpoint order. */
enum {
  REMAT_P_WTE,      /* (Vp, C) token embedding, tied to the LM head */
  REMAT_P_WPE,      /* (maxT, C) */
  REMAT_P_LN1W,     /* (L, C) */
  REMAT_P_LN1B,     /* (L, C) */
  REMAT_P_QKVW,     /* (L, 3C, C) */
  REMAT_P_QKVB,     /* (L, 3C) */
  REMAT_P_ATTPROJW, /* (L, C, C) */
  REMAT_P_ATTPROJB, /* (L, C) */
  REMAT_P_LN2W,     /* (L, C) */
  REMAT_P_LN2B,     /* (L, C) */
  REMAT_P_FCW,      /* (L, 4C, C) */
  REMAT_P_FCB,      /* (L, 4C) */
  REMAT_P_FCPROJW,  /* (L, C, 4C) */
  REMAT_P_FCPROJB,  /* (L, C) */
  REMAT_P_LNFW,     /* (C) */
  REMAT_P_LNFB,     /* (C) */
  REMAT_P_COUNT
};

/* Number of floats in each parameter tensor, and their sum. */
void remat_param_sizes(const remat_config *cfg, size_t sizes[REMAT_P_COUNT]);
size_t remat_param_count(const remat_config *cfg);
/* Parameters of one transformer block (the per-layer slices above). */
size_t remat_block_param_count(const remat_config *cfg);

/* Model FLOPs of one forward+backward over one token, as in PaLM's appendix
 * B: 6 N + 12 L C T, where N counts the weights that take part in a matrix
 * product (the blocks' four matrices and the LM head over the real
 * vocabulary; not biases, norms or the position embedding) and 12 L C T is
 * attention's scores and weighted sum over the full T x T. Recomputation is
 * not model work and is never counted. */
double remat_flops_per_token(const remat_config *cfg, int64_t seq_len);

/* ---------------------------------------------------------- memory plan */

/* Per-block activation policy. */
typedef enum {
  REMAT_KEEP = 0,      /* store everything the block's backward needs */
  REMAT_RECOMPUTE = 1, /* store only the block input; rerun forward in backward */
  REMAT_POLICY_COUNT
} remat_policy;

/* Buffers of one training step. Each has a size and a lifetime; the arena
 * offsets come from these alone. Append-only. */
typedef enum {
  REMAT_BUF_PARAMS,   /* all parameters (persistent) */
  REMAT_BUF_GRADS,    /* all parameter gradients (persistent) */
  REMAT_BUF_ADAM_M,   /* AdamW first moment (persistent) */
  REMAT_BUF_ADAM_V,   /* AdamW second moment (persistent) */
  REMAT_BUF_TOKENS,   /* (2, B, T) int32 inputs then targets */
  REMAT_BUF_RESIDUAL, /* (L+1, B, T, C) block inputs, then the final residual */
  REMAT_BUF_KEPT,     /* (K, block_internals) internals of the K kept blocks */
  REMAT_BUF_SCRATCH,  /* (block_internals) recompute scratch, one block at a time */
  REMAT_BUF_HEAD,     /* lnf out (B,T,C), lnf mean/rstd (B,T), losses (B,T) */
  REMAT_BUF_LOGITS,   /* (B, T, Vp) logits, then probabilities, then their grads */
  REMAT_BUF_DRESID,   /* (B, T, C) gradient of the residual stream */
  REMAT_BUF_DBLOCK,   /* one block's activation-gradient temporaries */
  REMAT_BUF_COUNT
} remat_buf;

/* Phases of a step, in order; a buffer lives in a set of them (a bit mask of
 * 1 << phase). Two buffers may share bytes when their sets do not intersect. */
typedef enum {
  REMAT_PHASE_FORWARD,  /* embedding and the blocks */
  REMAT_PHASE_HEAD,     /* final layernorm, logits, loss and their backward */
  REMAT_PHASE_BACKWARD, /* the blocks in reverse, with recomputation */
  REMAT_PHASE_UPDATE,   /* optimizer */
  REMAT_PHASE_COUNT
} remat_phase;

typedef struct remat_membuf {
  size_t bytes;  /* 0 when the buffer is not needed by this plan */
  size_t offset; /* in the arena, aligned to REMAT_ALIGN */
  unsigned phases; /* bit mask of remat_phase */
} remat_membuf;

#define REMAT_ALIGN 64

typedef struct remat_memplan {
  remat_config cfg;
  int64_t B, T;
  int64_t num_kept, num_recomputed;
  uint8_t *policy;       /* (L) remat_policy of each block, owned */
  int64_t *kept_slot;    /* (L) index into REMAT_BUF_KEPT, -1 if recomputed */
  size_t block_internal_bytes; /* what a kept block stores beyond its input */
  size_t block_dgrad_bytes;    /* size of REMAT_BUF_DBLOCK */
  remat_membuf buf[REMAT_BUF_COUNT];
  size_t persistent_bytes; /* params + grads + adam m, v */
  size_t peak_bytes;       /* arena size: the planned peak of a step */
} remat_memplan;

/* Lays out every buffer of a training step for micro-batch B x T and the given
 * per-block policies (NULL: keep all). Persistent and transient buffers share
 * one arena; buffers whose lifetimes do not overlap may share bytes. */
int remat_memplan_build(remat_memplan *mp, const remat_config *cfg, int64_t B, int64_t T,
                        const uint8_t *policy, remat_error *err);
void remat_memplan_free(remat_memplan *mp);

/* Per-layer byte counts used by the pipeline planner; the same code lays out
 * the engine's buffers. For one micro-batch of B x T:
 *   kept_bytes:      what a kept block stores (its input included)
 *   recompute_bytes: what a recomputed block stores (its input)
 *   scratch_bytes:   extra bytes while a recomputed block reruns its forward
 *   state_bytes:     parameters, gradients and AdamW m, v of one block */
typedef struct remat_block_bytes {
  size_t kept_bytes, recompute_bytes, scratch_bytes, state_bytes;
} remat_block_bytes;
void remat_block_bytes_get(const remat_config *cfg, int64_t B, int64_t T, remat_block_bytes *out);

/* Policies that recompute the first n blocks and keep the rest. */
void remat_policy_first_n(uint8_t *policy, int64_t L, int64_t n);

/* The fewest recomputed blocks whose planned peak fits `budget` bytes; on
 * success *n_out is that count. REMAT_EINFEASIBLE if even all-recompute does
 * not fit, with *min_bytes the smallest budget that would. */
int remat_fewest_recompute(const remat_config *cfg, int64_t B, int64_t T, size_t budget,
                           int64_t *n_out, size_t *min_bytes, remat_error *err);

/* ======================================================== pipeline plan */

/* The pipeline planner. Given a model as a list of layers, p pipeline
 * stages with memory budgets, m micro-batches and a schedule, it chooses how
 * many consecutive layers each stage runs and which of them recompute their
 * activations in the backward pass, exactly (no heuristics, no MIP solver).
 *
 * The model (one micro-batch of work per layer l):
 *   f_l, b_l, r_l   forward, backward and recompute time (any unit)
 *   a_l             bytes the layer stores for its backward when kept
 *   c_l             bytes it stores when recomputed (its input), c_l <= a_l
 *                   for recomputation to be of any use
 *   x_l             extra bytes while it reruns its forward (scratch)
 *   w_l             persistent bytes: parameters, gradients, optimizer state
 *
 * A stage s (0-based) of p runs layers [i, j) and recomputes a subset R:
 *
 *   memory_s = stage_bytes + sum_{l in [i,j)} w_l
 *            + n_s * ( sum_{l kept} a_l + sum_{l in R} c_l )
 *            + max_{l in R} x_l            (0 when R is empty)
 *   n_s      = min(p - s, m) under 1F1B (stage s holds that many micro-batches
 *              of activations at its peak), m under GPipe
 *   t_s      = sum_{l in [i,j)} (f_l + b_l) + sum_{l in R} r_l
 *
 * and must satisfy memory_s <= budget_s. Objectives:
 *   bottleneck   max_s t_s                          (the seed's MIP)
 *   1f1b         sum_s t_s + (m - 1) * max_s t_s    (1F1B iteration time
 *                without communication; remat_plan_simulate gives the exact
 *                schedule makespan for the chosen stage times)
 * Ties break toward fewer recomputed layers in total, then a lower maximum
 * stage memory.
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

typedef enum { REMAT_SCHED_1F1B = 0, REMAT_SCHED_GPIPE = 1, REMAT_SCHED_COUNT } remat_plan_schedule;
typedef enum {
  REMAT_OBJ_BOTTLENECK = 0, /* max_s t_s */
  REMAT_OBJ_1F1B = 1,       /* sum_s t_s + (m - 1) max_s t_s */
  REMAT_OBJ_COUNT
} remat_plan_objective;

/* Limits of a problem; beyond them the planner refuses with REMAT_ERANGE. */
#define REMAT_PLAN_MAX_LAYERS 1000000    /* total layers over all groups */
#define REMAT_PLAN_MAX_STAGES 65536
#define REMAT_PLAN_MAX_MICROBATCHES 1000000
#define REMAT_PLAN_MAX_BYTES ((size_t)1 << 60) /* any single byte count or budget */

/* A run of `count` identical consecutive layers. */
typedef struct remat_plan_group {
  char name[32];           /* optional label ("embedding", "block", "head") */
  int64_t count;           /* >= 1 */
  double fwd, bwd, recompute; /* per layer and micro-batch, >= 0 */
  size_t act_bytes;        /* a: stored per micro-batch when kept */
  size_t ckpt_bytes;       /* c: stored per micro-batch when recomputed */
  size_t state_bytes;      /* w: persistent */
  size_t recompute_bytes;  /* x: scratch while recomputing */
  int recomputable;        /* 0: the layer always keeps its activations */
} remat_plan_group;

typedef struct remat_plan_problem {
  int64_t stages;       /* p */
  int64_t microbatches; /* m */
  int schedule;         /* remat_plan_schedule */
  int objective;        /* remat_plan_objective */
  size_t *memory;       /* (stages) budget of each stage, owned */
  int uniform_memory;   /* 1 when one budget was given for all stages */
  size_t stage_bytes;   /* bytes every stage needs besides its layers */
  int64_t num_groups;
  remat_plan_group *groups; /* (num_groups) in model order, owned */
  char time_unit[16];   /* label of the time unit for output ("" = none) */
  char source[128];     /* what the problem was built from, for output */
} remat_plan_problem;

/* Allocates a problem with `stages` budgets and `num_groups` groups, all
 * zero; schedule 1f1b, objective bottleneck, groups recomputable. */
int remat_plan_problem_init(remat_plan_problem *pb, int64_t stages, int64_t num_groups,
                            remat_error *err);
void remat_plan_problem_free(remat_plan_problem *pb);
/* Checks every field; the message names the offending one. */
int remat_plan_problem_check(const remat_plan_problem *pb, remat_error *err);
/* Total number of layers (sum of counts; saturates at INT64_MAX). */
int64_t remat_plan_problem_layers(const remat_plan_problem *pb);
/* Changes the number of stages; budgets must be uniform (or stages equal). */
int remat_plan_problem_set_stages(remat_plan_problem *pb, int64_t stages, remat_error *err);
/* Sets one budget for every stage. */
void remat_plan_problem_set_memory(remat_plan_problem *pb, size_t bytes);

/* JSON problem:
 *   { "stages": 4, "microbatches": 8, "schedule": "1f1b", "objective": "bottleneck",
 *     "memory": 20e9 | "20GB" | [b0, b1, ...], "stage_bytes": 0,
 *     "layers": [ {"name": "block", "count": 32, "fwd": 1, "bwd": 2, "recompute": 1,
 *                  "act_bytes": 1.25e9, "ckpt_bytes": 0.125e9, "state_bytes": 0,
 *                  "recompute_bytes": 0, "recomputable": true} ] }
 * schedule (default 1f1b), objective (default bottleneck), stage_bytes,
 * name, count (default 1), recompute_bytes (default 0) and recomputable
 * (default true) are optional; recompute may be left out when recomputable
 * is false. Unknown fields are errors, except "comment". */
int remat_plan_problem_parse_json(remat_plan_problem *pb, const char *text, size_t len,
                                  remat_error *err);
int remat_plan_problem_load(remat_plan_problem *pb, const char *path, remat_error *err);

/* A GPT-2 problem from the engine's own byte counts: an embedding layer, the
 * L blocks, and a head, none but the blocks recomputable. Times are in GFLOP
 * of one micro-batch (B x T tokens):
 *   block      f = 24 B T C^2 + 4 B T^2 C,  b = 2 f,  r = f
 *              a = kept_bytes, c = recompute_bytes, x = scratch_bytes,
 *              w = state_bytes of remat_block_bytes_get
 *   embedding  f = b = B T C (gathers and adds), a = c = 8 B T (tokens and
 *              targets), w = 16 bytes per wte and wpe parameter
 *   head       f = 2 B T C Vp + 5 B T Vp, b = 2 f; a = c = the final residual
 *              and the head's stored activations; w = 16 bytes per final
 *              layernorm parameter plus its transient workspace (logits,
 *              B T Vp floats, which the engine reuses for probabilities and
 *              their gradients), counted once since only one micro-batch is
 *              in the head at a time
 *   stage_bytes = one block's backward temporaries, the residual gradient and
 *              a send and a receive buffer of B T C floats each.
 * The wte matrix is tied to the head; it is counted once, on the embedding. */
int remat_plan_problem_from_model(remat_plan_problem *pb, const remat_config *cfg, int64_t B,
                                  int64_t T, int64_t stages, int64_t microbatches, size_t memory,
                                  remat_error *err);

const char *remat_plan_schedule_name(int schedule);   /* "1f1b", "gpipe" */
const char *remat_plan_objective_name(int objective); /* "bottleneck", "1f1b" */
int remat_plan_schedule_parse(const char *s, int *out);  /* -1 if unknown */
int remat_plan_objective_parse(const char *s, int *out); /* -1 if unknown */

/* ------------------------------------------------------------ plan */

typedef struct remat_plan_stage {
  int64_t first_layer;    /* global index of its first layer */
  int64_t num_layers;
  int64_t num_recomputed;
  int64_t *recomputed;    /* (num_recomputed) global layer indices, ascending */
  int64_t microbatches_held; /* n_s */
  size_t memory_bytes;    /* memory_s of the formula above */
  size_t budget_bytes;
  double time;            /* t_s */
  double fwd_time;        /* sum f */
  double bwd_time;        /* sum b + sum r over recomputed */
} remat_plan_stage;

typedef struct remat_plan {
  int feasible;           /* 0: stages hold the smallest-memory arrangement */
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
} remat_plan;

/* Solves the problem exactly. Returns 0 with a feasible plan, or
 * REMAT_EINFEASIBLE with plan->feasible = 0 and plan filled with the
 * arrangement that needs the least memory (each stage recomputing what lowers
 * its memory most) and min_budget_bytes; other codes on bad input. The
 * caller frees plan with remat_plan_free whenever the return is 0 or
 * REMAT_EINFEASIBLE. */
int remat_plan_solve(const remat_plan_problem *pb, remat_plan *plan, remat_error *err);
void remat_plan_free(remat_plan *plan);

/* Makespan of one iteration of the schedule with per-stage forward and
 * backward times per micro-batch, no communication time, by a discrete-event
 * simulation. 1F1B: stage s runs min(p - s - 1, m) warm-up forwards, then
 * alternates one forward and one backward, then drains. GPipe: all forwards,
 * then all backwards. A forward waits for the previous stage's forward of the
 * same micro-batch, a backward for the next stage's backward. */
int remat_plan_simulate(int schedule, int64_t p, int64_t m, const double *fwd,
                        const double *bwd, double *makespan, remat_error *err);

/* Memory and time of a given arrangement under the problem's formula: layers
 * per stage and, per layer, 1 if it recomputes. For outputs that cannot
 * express the plan exactly (Megatron's one recompute count), and for tests. */
int remat_plan_evaluate(const remat_plan_problem *pb, const int64_t *layers_per_stage,
                        const uint8_t *recompute, remat_plan *plan, remat_error *err);

/* ------------------------------------------------------------ output */

typedef enum {
  REMAT_PLAN_FORMAT_TABLE,
  REMAT_PLAN_FORMAT_JSON,
  REMAT_PLAN_FORMAT_COLOSSALAI,
  REMAT_PLAN_FORMAT_MEGATRON,
  REMAT_PLAN_FORMAT_COUNT
} remat_plan_format_kind;

/* Writes the plan as text into *out (free with remat_plan_text_free). */
int remat_plan_format(const remat_plan_problem *pb, const remat_plan *plan, int format, char **out,
                      remat_error *err);
/* The problem as a MIP in CPLEX LP format: binaries y_l_s (layer l on stage
 * s) and z_l_s (layer l recomputed on stage s), contiguity through the stage
 * index sum_s s*y_l_s, which is non-decreasing by steps of 0 or 1, the memory
 * formula with a continuous X_s >= x_l z_l_s, and T >= t_s. Its optimum is the
 * planner's objective value. Memory rows are divided by the gcd of all byte
 * counts to keep coefficients small. */
int remat_plan_format_lp(const remat_plan_problem *pb, char **out, remat_error *err);
void remat_plan_text_free(char *text);

/* The frontier of objective against one memory budget for all stages: `points`
 * budgets evenly spaced from the smallest feasible budget to the smallest
 * budget at which no stage needs to recompute anything (both found exactly). */
typedef struct remat_plan_sweep_point {
  size_t budget_bytes;
  double objective_value, slowdown;
  int64_t total_recomputed;
  size_t max_memory_bytes;
  int64_t *layers_per_stage; /* (stages), owned by the sweep */
  int64_t *ckpt_per_stage;   /* (stages) */
} remat_plan_sweep_point;

typedef struct remat_plan_sweep {
  int64_t num_points, num_stages;
  size_t min_budget_bytes, no_recompute_bytes;
  double baseline_objective;
  remat_plan_sweep_point *points;
  int64_t *storage;
} remat_plan_sweep;

int remat_plan_sweep_run(const remat_plan_problem *pb, int64_t points, remat_plan_sweep *sw,
                         remat_error *err);
void remat_plan_sweep_free(remat_plan_sweep *sw);
int remat_plan_format_sweep(const remat_plan_problem *pb, const remat_plan_sweep *sw, int json,
                            char **out, remat_error *err);

/* ---------------------------------------------------------------- parsing */

/* "1.5GiB", "800MB", "20e9", "4096" -> bytes. Suffixes: B, K/KB, M/MB, G/GB,
 * T/TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); case-insensitive. */
int remat_parse_size(const char *s, size_t *bytes, remat_error *err);
/* Formats bytes as "1.50 GiB" into buf. */
const char *remat_format_bytes(size_t bytes, char *buf, size_t cap);

/* ------------------------------------------------------------- training */

/*  * Life of a step (one micro-batch shown; gradients accumulate over K):
 *   forward:  encoder -> blocks 0..L-1; a kept block writes its internals to
 *             its own slot, a recomputed one to the shared scratch (discarded)
 *   head:     final layernorm, logits, loss, and their backward
 *   backward: blocks L-1..0; a recomputed block first reruns its forward
 *             into the scratch (bit-identical: same kernels, same inputs, same
 *             dropout counters), then runs its backward; encoder backward
 *   update:   optional global-norm clipping, AdamW
 * Nothing in a step allocates: every buffer is a view into the arena laid out
 * by remat_memplan_build.
 */
typedef struct remat_hparams {
  float lr;           /* peak learning rate */
  float beta1, beta2, eps;
  float weight_decay; /* applied to matrices and embeddings, not to biases or norms */
  float grad_clip;    /* global-norm clip; 0 disables */
  float dropout;      /* attention-probability and residual-branch dropout; 0 disables */
  uint64_t seed;      /* dropout stream */
} remat_hparams;

void remat_hparams_default(remat_hparams *hp);

typedef struct remat_model {
  remat_config cfg;
  remat_memplan mp;
  int64_t B, T;

  char *arena;        /* mp.peak_bytes, one allocation */
  float *params;      /* all parameters, llm.c order: the checkpoint body */
  float *grads;
  float *adam_m, *adam_v;
  float *p[REMAT_P_COUNT]; /* views of params */
  float *g[REMAT_P_COUNT]; /* views of grads */

  int32_t *inputs;  /* (B, T) fill before a forward */
  int32_t *targets; /* (B, T) */
  float *residual;  /* (L+1, B, T, C): input of block l at l*B*T*C */
  char *kept;       /* kept blocks' internals, mp.block_internal_bytes each */
  float *scratch;   /* one block's internals, for recomputed blocks */
  float *logits;    /* (B, T, Vp) */
  float *dresid;    /* (B, T, C) */
  float *head;      /* the head's buffer (final layernorm, losses, its gradient) */
  float *dblock;    /* one block's activation-gradient temporaries */

  size_t high_water;  /* cache for remat_model_arena_high_water */
  int step;           /* optimizer steps taken */
  double recompute_s; /* seconds spent recomputing, since the last reset */
} remat_model;

/* Plans and allocates the arena; parameters are zero until initialised or
 * loaded. policy: (L) remat_policy per block, NULL keeps every block. */
int remat_model_init(remat_model *m, const remat_config *cfg, int64_t B, int64_t T,
                     const uint8_t *policy, remat_error *err);
void remat_model_free(remat_model *m);

/* GPT-2 initialisation: normal(0, 0.02) weights, residual projections scaled
 * by 1/sqrt(2L), zero biases, unit layernorm gains; rows of wte past V zero. */
void remat_model_init_weights(remat_model *m, uint64_t seed);

/* Forward, loss and backward of one micro-batch already in m->inputs and
 * m->targets. Parameter gradients accumulate with weight dloss per token
 * (1 / (B*T*K) for the mean over K micro-batches). Returns the mean loss of
 * this micro-batch. */
float remat_model_forward_backward(remat_model *m, uint32_t micro, float dloss,
                                   const remat_hparams *hp);
/* Forward and loss only (no dropout, no gradients): for evaluation. */
float remat_model_eval(remat_model *m);

void remat_model_zero_grad(remat_model *m);
/* Clips (if enabled) and applies AdamW with learning rate lr; increments
 * m->step. Returns the global gradient norm before clipping. */
float remat_model_update(remat_model *m, const remat_hparams *hp, float lr);

/* Highest arena byte written so far (the arena is filled with a poison
 * pattern at init and scanned downward from the top). */
size_t remat_model_arena_high_water(remat_model *m);

/* ------------------------------------------------------- data and files */

/* File formats (little endian, identical to llm.c so files move both ways):
 *   token shard: int32 header[256] = {20240520, 1, ntok, 0...}, then ntok uint16
 *   checkpoint:  int32 header[256] = {20240326, 3, maxT, V, L, NH, C, Vp, 0...},
 *                then remat_param_count(cfg) float32 in REMAT_P_* order
 * Writes go to "path.tmp" and are renamed over path only once complete, so an
 * interrupted save never leaves a truncated file behind. */
#define REMAT_SHARD_MAGIC 20240520
#define REMAT_SHARD_VERSION 1
#define REMAT_CKPT_MAGIC 20240326
#define REMAT_CKPT_VERSION 3
#define REMAT_HEADER_INTS 256
#define REMAT_HEADER_BYTES (REMAT_HEADER_INTS * 4)

/* ---------------------------------------------------------------- tokens */

/* A token stream held in memory. */
typedef struct remat_tokens {
  int32_t *tok;   /* (n) token ids, owned: release with remat_tokens_free */
  int64_t n;      /* number of tokens, >= 2 once loaded */
  int64_t max_id; /* largest id in tok: the vocabulary must exceed it */
} remat_tokens;

/* Reads a whole llm.c shard. Checks magic, version, that the file holds
 * exactly the tokens the header announces, and that there are at least 2. */
int remat_tokens_load(remat_tokens *t, const char *path, remat_error *err);
/* Writes t as an llm.c shard; every id must lie in 0..65535. */
int remat_tokens_save(const remat_tokens *t, const char *path, remat_error *err);
/* Every id must be < V (the model's vocab_size); REMAT_ERANGE names the first
 * position that is not. */
int remat_tokens_check_vocab(const remat_tokens *t, int64_t V, remat_error *err);
/* A plain text file as byte tokens: byte b is token b (vocabulary 256). */
int remat_tokens_from_text(remat_tokens *t, const char *path, remat_error *err);
/* Releases t->tok and zeroes t; safe on a zeroed or already freed t. */
void remat_tokens_free(remat_tokens *t);

/* ----------------------------------------------------------- checkpoints */

/* Reads and validates only the header: magic, version 3, the shape (via
 * remat_config_check), Vp >= V, and a file size of exactly header + params. */
int remat_checkpoint_read_config(const char *path, remat_config *cfg, remat_error *err);
/* Loads the parameters into params, a buffer of remat_param_count(shape)
 * floats. If expect is non-NULL the file's shape must equal it (REMAT_ESHAPE
 * names the first dimension that differs). Non-finite values are rejected
 * (REMAT_ENUMERIC names the tensor and index). */
int remat_checkpoint_load(const char *path, const remat_config *expect, float *params,
                          remat_error *err);
/* Writes cfg and remat_param_count(cfg) floats from params, atomically. */
int remat_checkpoint_save(const char *path, const remat_config *cfg, const float *params,
                          remat_error *err);

/* --------------------------------------------------------- default corpus */

/* The seed remat_corpus_tokens uses, so every run trains on the same text. */
#define REMAT_CORPUS_SEED 20240601u
/* Default size of the embedded corpus in bytes. */
#define REMAT_CORPUS_BYTES ((size_t)1 << 20)

/* Writes English-like text about a small made-up world into buf: printable
 * ASCII, a few sentences per line and a blank line
 * between days, deterministic for a given seed. Stops at the
 * last whole line that fits; returns the number of bytes written (<= cap, not
 * NUL-terminated). */
size_t remat_corpus_generate(char *buf, size_t cap, uint64_t seed);
/* The default corpus of about nbytes (0: REMAT_CORPUS_BYTES) as byte tokens. */
int remat_corpus_tokens(remat_tokens *t, size_t nbytes, remat_error *err);

/* ----------------------------------------------------------------- loader */

enum { REMAT_SPLIT_TRAIN = 0, REMAT_SPLIT_VAL = 1 };

/* Serves (B, T) inputs and (B, T) targets (the inputs shifted by one) from a
 * split of a token stream. The split is cut into W windows of T+1 tokens with
 * stride T; each batch row takes the next window in order. Sequential: the
 * windows start at 0, T, 2T, ... in turn. Shuffled: every epoch draws a new
 * offset in [0, T) for the window starts and a new permutation of the windows,
 * both from the seed, so a run replays exactly. The last val_frac of the tokens form
 * the validation split, the rest the training split; no window crosses the
 * boundary. The loader borrows t: t must outlive it. */
typedef struct remat_loader {
  const int32_t *tok; /* (n) first token of the split, borrowed */
  int64_t n;          /* tokens in the split */
  int64_t B, T;
  int64_t max_windows; /* (n - 1) / T: windows at offset 0, the size of order */
  int64_t num_windows; /* W of this epoch: (n - 1 - offset) / T */
  int64_t offset;      /* window k of this epoch starts at offset + k*T */
  int64_t cursor;      /* next position in order, 0..W-1 */
  int64_t epoch;       /* completed passes over all windows */
  int shuffle;
  uint64_t seed;
  uint64_t rng;   /* state of the epoch shuffles */
  int64_t *order; /* (W) window indices in serving order, owned; NULL if sequential */
} remat_loader;

/* split is REMAT_SPLIT_TRAIN or REMAT_SPLIT_VAL; val_frac in [0, 1). Fails if
 * the split has fewer than T+1 tokens, saying how many are needed. */
int remat_loader_init(remat_loader *L, const remat_tokens *t, int64_t B, int64_t T, int split,
                      double val_frac, int shuffle, uint64_t seed, remat_error *err);
/* Fills inputs (B, T) and targets (B, T). Never allocates. */
void remat_loader_next(remat_loader *L, int32_t *inputs, int32_t *targets);
/* Back to the first batch of epoch 0: the same sequence replays. */
void remat_loader_reset(remat_loader *L);
void remat_loader_free(remat_loader *L);

/* ------------------------------------------------------------ reporting */

/* Measures single-precision matrix-product throughput with the current
 * OpenBLAS/OpenMP thread count: square n x n x n products (n = 1024 unless
 * n > 0 given), repeated for about `seconds`; returns the best rate seen in
 * FLOP/s (2 n^3 per product). The best, not the mean: it is the ceiling a
 * training step's matrix products could reach. */
double remat_measure_sgemm_flops(int n, double seconds);

/* Model FLOP utilisation: model FLOPs (remat_flops_per_token, recomputation
 * excluded) per second over a peak rate in FLOP/s. */
double remat_mfu(const remat_config *cfg, int64_t seq_len, double tokens_per_s, double peak_flops);

/* Bytes the library holds on the heap now, and the most it has held since
 * the start or the last reset: everything it allocates goes through one
 * counted allocator (the arena included). */
size_t remat_heap_bytes(void);
size_t remat_heap_peak_bytes(void);
void remat_heap_reset_peak(void);

/* Seconds on a monotonic clock. */
double remat_now(void);

/* Memory this process could still get: MemAvailable from /proc/meminfo,
 * else the machine's physical memory, or 0 if unknown. */
size_t remat_available_memory_bytes(void);

/* Peak resident set size of this process (VmHWM), or 0 if unknown. */
size_t remat_rss_peak_bytes(void);

/* Sets the thread count of both OpenMP loops and OpenBLAS (threads < 1: one
 * per CPU this process may use) and pins each OpenMP thread to its own CPU
 * unless OMP_PROC_BIND or GOMP_CPU_AFFINITY is set. Returns the number of
 * threads pinned. */
int remat_set_threads(int threads);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_H */
