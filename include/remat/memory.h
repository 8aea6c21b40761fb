/* remat/memory.h: the memory model: per-block policies and the planned arena of a training step.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_MEMORY_H
#define REMAT_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "remat/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------- precision */

/* Whether this CPU can train in bf16 (remat_precision): AVX512-BF16 or AMX,
 * with the OS saving their state, read with cpuid at run time. *why (may be
 * NULL) gets one line saying which instructions were found or missing
 * (static storage). */
REMAT_API int remat_precision_available(int precision, const char **why);
/* (The bytes of a bf16 model depend on the CPU too: its products'
 * scratchpad is oneDNN's figure for this CPU and thread count, which the
 * memory model asks for.) */

/* ------------------------------------------------------- memory model */

/* Per-block activation policy. */
typedef enum {
  REMAT_KEEP = 0,      /* store everything the block's backward needs */
  REMAT_RECOMPUTE = 1, /* store only the block input; rerun forward in backward */
  REMAT_MIDDLE = 2,    /* store the matrix products' and attention's outputs
                          (qkv, atty, att_lse, res2, fch) and the layernorm
                          statistics; recompute the cheap ones (ln1, ln2,
                          fch_gelu: two layernorms and a GELU) in backward */
  REMAT_POLICY_COUNT
} remat_policy;

/* The memory model. The model is a list of layers: the embedding, the L
 * transformer blocks, the head (final layernorm, tied LM head, loss). A
 * stage runs a contiguous range of them with n micro-batches in flight and
 * needs, in bytes,
 *
 *   stage_bytes + sum_l w_l
 *     + n * (sum_{l kept} a_l + sum_{l middle} mid_l + sum_{l recomputed} c_l)
 *     + max( max_l y_l, max_{l middle} xm_l, max_{l recomputed} x_l )  [+ comm]
 *
 * (a block that recomputes in full in only some of the n slots, see
 * remat_stage.full_slots, counts its stored bytes slot by slot and both
 * its policies' transient bytes)
 * where a stage that adds up several micro-batches a step adds each layer's
 * gradient buffer g_l to its y_l and x_l, and a data-parallel replica has
 * its ZeRO stage's w_l and its communication buffers (comm, which hold its
 * g_l as D shards instead of y_l and x_l; see remat_replica_bytes below).
 * Per layer:
 *   a (kept)    what one micro-batch in flight stores for the layer's
 *               backward: its input, and a block's internals when kept
 *   c (ckpt)    what it stores when recomputed: its input
 *   mid         what it stores under the middle policy: its input and its
 *               internals less the layernorm and GELU outputs
 *   x (scratch) transient bytes while a recomputed block reruns its forward
 *               and runs its backward: its internals and its backward's
 *               temporaries
 *   xm          the same for a middle block: the layernorm and GELU outputs
 *               it recomputes, and its backward's temporaries
 *   y (work)    transient bytes while the layer runs its backward (a block's
 *               temporaries; the head's workspace and logits)
 *   w (state)   parameters, gradients, AdamW m and v
 *   g (grad)    the layer's gradient of one micro-batch, computed apart
 * and stage_bytes the gradient of the residual stream, which every stage
 * needs; a stage without the head adds boundary_bytes (its output, sent to
 * the next stage), and the head's w depends on whether it shares its stage
 * with the embedding (see head_joint_state). This is exactly the arena
 * remat_memplan_create lays out: the terms below are computed from the same
 * layout tables the engine carves its tensors with, and the arena is the sum
 * of these regions, nothing shared between them and nothing else in it. The
 * planner's problem for a GPT-2 (remat_plan_problem_from_model, and
 * remat_plan_problem_from_replicas) takes its bytes from here too. */
typedef enum {
  REMAT_LAYER_EMBEDDING, /* token and position embedding; never recomputed */
  REMAT_LAYER_BLOCK,     /* one transformer block */
  REMAT_LAYER_HEAD,      /* final layernorm, LM head and loss; never recomputed */
  REMAT_LAYER_KIND_COUNT
} remat_layer_kind;

typedef struct remat_layer_bytes {
  size_t kept;    /* a */
  size_t ckpt;    /* c (= a for layers that never recompute) */
  size_t scratch; /* x (0 for layers that never recompute) */
  size_t work;    /* y */
  size_t state;   /* w */
  size_t grad;    /* the layer's gradient, computed apart (a stage that
                     accumulates): its unit(s), below; the head's holds its
                     gradient of the tied matrix and its own */
  size_t mid;         /* mid (= a for layers without the middle policy) */
  size_t mid_scratch; /* xm (0 for layers without it) */
} remat_layer_bytes;

typedef struct remat_memory_model {
  int64_t B, T;
  remat_layer_bytes layer[REMAT_LAYER_KIND_COUNT];
  size_t stage_bytes; /* the residual gradient, (B, T, C) */
  /* Pipeline stages: every stage but the last sends its output from a
   * buffer of boundary_bytes. The tied token embedding: the embedding holds
   * it (in its w), and so does a head on a stage of its own (in its w: its
   * copy, its gradient and their AdamW moments); a head on the embedding's
   * stage holds instead head_joint_state: its own parameters and a separate
   * gradient of the tied matrix (tied_grad_bytes), so that the head's and the
   * embedding's contributions are summed apart and then added, in the same
   * order a pipeline follows. A stage that does not accumulate and is no
   * replica (one micro-batch per step) needs no such buffer: the embedding
   * sums its share per token in the workspace and adds it onto the head's,
   * with the same bits; its head holds head_joint_state - tied_grad_bytes. */
  size_t boundary_bytes;
  size_t head_joint_state;
  size_t tied_grad_bytes;
  /* the pieces the terms are made of, for breakdowns */
  size_t tokens_bytes;         /* (B, T) int32 ids: inputs, or targets */
  size_t residual_bytes;       /* (B, T, C) float: a block's input */
  size_t block_internal_bytes; /* a kept block's internals beyond its input:
                                  block_stored_bytes + block_cheap_bytes */
  size_t block_stored_bytes;   /* what a middle block stores beyond its input */
  size_t block_cheap_bytes;    /* the layernorm and GELU outputs a middle block
                                  recomputes (ln1, ln2, fch_gelu) */
  size_t block_dgrad_bytes;    /* a block backward's temporaries */
  size_t block_wrec_bytes;     /* what a kept block's deferred W needs from its
                                  B: the gradients entering its four products
                                  and its two layernorms, and those products'
                                  and layernorms' inputs (a stage's wdeferred) */
  size_t head_bytes;           /* the head's activations and their gradient */
  size_t logits_bytes;         /* (B, T, Vp) logits, probabilities, their gradient
                                  (bf16 in bf16); one chunk's (head_chunk, Vp)
                                  where the config's head_chunk is less */
  /* bf16: the bf16 copies of a block's four matrices, and of the tied
   * matrix for the head's product (in their w); 0 in fp32 */
  size_t block_bf16_bytes, head_bf16_bytes;
} remat_memory_model;

/* The head chunk a planner's choice takes for micro-batches of B x T: the
 * most tokens, a multiple of 64 (at least 64, at most B*T), whose logits
 * take no more bytes than the residual stream of the micro-batch (B*T*C
 * floats), so the head's workspace is of an activation's size, not the
 * vocabulary's; 0 (all at once) when that is all B*T. */
REMAT_API int64_t remat_head_chunk_auto(const remat_config *cfg, int64_t B, int64_t T);

/* The terms for micro-batches of B x T. Checks the shape. */
REMAT_API int remat_memory_model_get(const remat_config *cfg, int64_t B, int64_t T,
                                     remat_memory_model *mm, remat_error *err);

/* A stage: blocks [first_block, first_block + num_blocks), the embedding
 * before them and/or the head after them, and n micro-batches in flight. The
 * whole model in one process is one stage with both, n = 1. */
typedef struct remat_stage {
  int64_t first_block, num_blocks;
  const uint8_t *policy; /* (num_blocks) remat_policy of each; NULL keeps all */
  int64_t inflight;      /* n >= 1 */
  /* Recompute per micro-batch: (num_blocks) or NULL (all 0). Block i
   * recomputes in full (REMAT_RECOMPUTE) in the last full_slots[i] of the
   * stage's n slots, slots j >= n - full_slots[i], and takes policy[i] in
   * the others; micro-batch k of a step takes slot k mod n. 0 to n (n is
   * the same as policy full). Each slot is laid out by its own blocks'
   * policies, so a stage stores, beside the formula's n slots of its
   * policies, full_slots[i] times less (a_i or mid_i - c_i) for each block;
   * the transient term takes every policy a block uses in any slot, and
   * the W records (below) count the blocks kept in any slot (such a block
   * runs B and W apart in every slot, its weight gradients adding up in
   * micro-batch order as a whole backward's do). One process,
   * or a replica of the whole model, holds one slot: 0 or 1 there. */
  const uint8_t *full_slots;
  /* A zero-bubble schedule (zb-h1, zbv) runs a kept block's backward as B
   * (the input gradient) and, later, W (the weight gradient): a
   * micro-batch's slot lives from its forward to its B (inflight counts
   * those, as under 1F1B), and between its B and its W each of the stage's
   * kept blocks keeps a W record (block_wrec_bytes): wdeferred such
   * micro-batches at most (0: the backward runs whole). A recomputed or
   * middle block runs its whole backward in B. */
  int64_t wdeferred;
  int has_embedding, has_head;
  /* The stage's step adds up several micro-batches (K >= 2): each
   * micro-batch's gradient of a layer is computed from zero into a layer
   * gradient buffer in the workspace, then added to the step's (see
   * remat/model.h for why). Replicas always do this. */
  int accumulate;
  /* Data parallelism: this is replica `replica` of `replicas` (0 or 1:
   * none) copies of the whole model, or of this pipeline stage on a P x D
   * grid, under ZeRO stage `zero` (0 to 3). */
  int64_t replicas, replica;
  int zero;
  /* The stage's slots and W records are not in its arena but in a pool its
   * runtime holds for the rank's chunks, laid out over the stream
   * (remat_schedule_pool_layout), which places them before each use; the
   * arena is the formula's total less its activations. */
  int slots_pooled;
  /* A rank that runs several model chunks (interleaved 1F1B) runs one
   * operation at a time, so its chunks share one transient workspace: the
   * chunk that holds it sizes it to at least work_min bytes (the largest of
   * the rank's chunks'), the others (work_borrowed) have none and use that
   * chunk's. Each keeps its own residual gradient (a backward's send buffer). */
  size_t work_min;
  int work_borrowed;
  /* zbv's first rank holds the embedding's chunk and the head's: with a
   * tied matrix, several micro-batches a step, without replicas, the
   * head's chunk (tied_borrowed) reads the embedding chunk's matrix (a
   * tensor rank's rows of it) and holds no copy of it (in bf16 only its
   * bf16 copy), only its own gradient of it apart (tied_grad_bytes), as a
   * head on the embedding's stage does: its w is head_joint_state. Elsewhere the flag is inert
   * (remat__stage_tied_borrowed). */
  int tied_borrowed;
} remat_stage;

/* The whole model as one stage with one micro-batch in flight. */
REMAT_API remat_stage remat_stage_whole(const remat_config *cfg, const uint8_t *policy);
/* The whole model as replica r of D under ZeRO stage zero. */
REMAT_API remat_stage remat_stage_replica(const remat_config *cfg, const uint8_t *policy, int64_t D,
                                          int64_t r, int zero);

/* The formula above for one stage; the arena of remat_memplan_create is
 * exactly this many bytes. A stage that accumulates adds to each layer's y,
 * and to a recomputed or middle block's x or xm, the layer's gradient buffer
 * (grad below); a replica's w are its ZeRO stage's and it adds its
 * communication buffers (remat_replica_bytes), its gradient buffers among
 * them. */
typedef struct remat_stage_bytes {
  size_t state;       /* sum w */
  size_t activations; /* n * (sum a + sum c), less what full_slots saves, + wdeferred W
                         records of each block kept in any slot */
  size_t workspace;   /* stage_bytes (+ boundary_bytes) + max(y, x) */
  size_t comm;        /* a replica's receive, gather, norm and gradient buffers */
  size_t total;
} remat_stage_bytes;
REMAT_API int remat_stage_bytes_get(const remat_config *cfg, const remat_memory_model *mm,
                                    const remat_stage *st, remat_stage_bytes *out,
                                    remat_error *err);

/* ---------------------------------------------------- data parallelism */

/* Units: a layer's parameters as one vector, in llm.c's tensor order: the
 * embedding [wte, wpe], block l [its 12 slices], the head [lnfw, lnfb]; and
 * the head's gradient of the tied matrix [wte], a gradient only. Numbered in
 * model order: 0 the embedding, 1 + l block l, L + 1 the head, L + 2 the
 * tied gradient. A block's tensors are not contiguous in llm.c's flat
 * buffer, so data parallelism cuts units, not the flat buffer: unit u of n
 * floats is cut into D contiguous shards of s = remat_unit_shard floats (a
 * multiple of REMAT_SHARD_QUANTUM); replica r owns [r s, (r + 1) s) of it,
 * cut at n (the last replicas' shards may be short or empty). The tied
 * gradient is cut like the embedding, so one replica owns both gradients of
 * an element of the tied matrix.
 *
 * The gradient norm is defined on units too, so that sharded replicas and
 * one process compute the same bits: a unit's sum of squares is the sum,
 * in order, of its chunks of REMAT_SHARD_QUANTUM floats, each chunk summed
 * in double over 8 interleaved lanes; the squared norm is the layers' sums
 * (units 0..L+1) added in model order. A chunk never straddles two shards. */
#define REMAT_SHARD_QUANTUM 1024
#define REMAT_UNIT_MAX_SEGMENTS 12

typedef struct remat_unit_segment {
  int tensor;    /* REMAT_P_* */
  size_t offset; /* its first float in the whole model's flat buffer */
  size_t at;     /* its first float within the unit */
  size_t count;
} remat_unit_segment;

REMAT_API int64_t remat_unit_count(const remat_config *cfg); /* L + 3 */
REMAT_API size_t remat_unit_floats(const remat_config *cfg, int64_t u);
/* The unit's pieces of the flat buffer, in unit order; returns how many. */
REMAT_API int remat_unit_segments(const remat_config *cfg, int64_t u,
                                  remat_unit_segment seg[REMAT_UNIT_MAX_SEGMENTS]);
/* Floats of one shard of unit u among D replicas. */
REMAT_API size_t remat_unit_shard(const remat_config *cfg, int64_t u, int64_t D);
/* Replica r's part of unit u: [*first, *first + *count). */
REMAT_API void remat_unit_owned(const remat_config *cfg, int64_t u, int64_t D, int64_t r,
                                size_t *first, size_t *count);
/* The units whose parameters a stage holds, in model order: 0 (the
 * embedding), 1 + l (its blocks), L + 1 (the head) and, for a head on a
 * stage without the embedding (a pipeline's last stage), L + 2: the head's
 * own copy of the tied matrix, its parameters, gradients and moments as one
 * unit, cut like the embedding's gradient above. out has room for L + 3;
 * returns how many. */
REMAT_API int64_t remat_stage_units(const remat_config *cfg, const remat_stage *st, int64_t *out);

/* The bytes of one replica of D under ZeRO stage zero. Persistent state per
 * layer (w): parameters, gradients, AdamW m and v, each whole (a layer's
 * 4 n bytes, aligned) or one shard (4 s bytes):
 *   ZeRO 0  all whole                        16 Psi
 *   ZeRO 1  m, v sharded                      8 Psi +  8 Psi / D
 *   ZeRO 2  gradients, m, v sharded           4 Psi + 12 Psi / D
 *   ZeRO 3  everything sharded               16 Psi / D
 * and the head's gradient of the tied matrix, whole under ZeRO 0 and 1, a
 * shard under 2 and 3. A layer's gradient (grad) is computed into D shards,
 * padding included: the send side of its reduce-scatter, which stays in
 * flight while the next layer's backward runs. So these buffers are not
 * workspace but communication buffers of their own (with e, b, h the
 * shards of the embedding, a block and the head):
 *   reduce  the gradient buffers: the head's (D (e + h), which the
 *           embedding's D e reuses) and two of a block's D b, which
 *           consecutive blocks take in turn (one if L = 1)
 *   recv    the pieces one layer's reduce-scatter brings: D (max(e, b) + h),
 *           the head's two units at once; all-gathers between steps too
 *   gather  ZeRO 3: D (max(e, b) + b + h), the parameters of the unit in
 *           use (the embedding or a block), of the next block, fetched
 *           meanwhile, and of the head, which needs the tied matrix and its
 *           own at once
 *   norm    every replica's chunk sums (doubles) */
typedef struct remat_replica_bytes {
  int64_t replicas;
  int zero;
  size_t state[REMAT_LAYER_KIND_COUNT]; /* w of each layer */
  size_t head_joint_state;              /* the head's w with its tied gradient */
  size_t head_alone_state;              /* the head's w on a stage without the
                                           embedding: with its copy of the tied
                                           matrix (unit L + 2) */
  size_t grad[REMAT_LAYER_KIND_COUNT];  /* the layer's gradient, D shards (in reduce) */
  size_t params, grads, moment, tied;   /* regions: parameters, gradients, m (= v), tied */
  size_t recv, gather, norm, reduce;    /* communication buffers */
  size_t gather_bf16;                   /* bf16 under ZeRO 3: the gathered unit's
                                           matrices rounded for the products (a
                                           block's, or the head's tied matrix) */
  size_t comm;                          /* recv + gather + norm + reduce + gather_bf16 */
} remat_replica_bytes;
REMAT_API int remat_replica_bytes_get(const remat_config *cfg, int64_t D, int zero,
                                      remat_replica_bytes *out, remat_error *err);
/* The same for a stage that is a replica (a P x D grid: st->replicas
 * copies of one pipeline stage, under ZeRO stage st->zero): state and
 * gradient buffers per layer as above; the regions and the communication
 * buffers of the units the stage holds (remat_stage_units), as above with
 * max(e, b) the largest shard of its units but the head's own: reduce with
 * the big gradient buffer only beside the embedding or the head and a block
 * buffer per block up to two; recv and gather with h only beside the head,
 * and gather's block slot only where a block can follow another unit in a
 * pass; norm for its units' chunk sums. remat_replica_bytes_get is this for
 * the whole model. */
REMAT_API int remat_replica_stage_bytes_get(const remat_config *cfg, const remat_stage *st,
                                            remat_replica_bytes *out, remat_error *err);

/* ------------------------------------------ state bytes per parameter */

/* The persistent bytes of a parameter as the ZeRO paper counts them, for a
 * model trained by any framework: the Python profiler writes these into its
 * problem files (it asks `remat state`), and remat train compares its own
 * replica's bytes with the fp32 AdamW row. Three parts: the weights, their
 * gradients, and the optimizer state, which holds a mixed-precision run's
 * fp32 master copy of the weights (so ZeRO 1 shards it with the moments).
 * ZeRO over D replicas shards the optimizer state (stage >= 1), the
 * gradients (>= 2) and the weights (3); remat_replica_bytes follows the same
 * rule for remat's own layout. Tables append only. */
typedef enum {
  REMAT_STATE_WEIGHTS,
  REMAT_STATE_GRADS,
  REMAT_STATE_OPTIMIZER, /* the moments, and a master copy */
  REMAT_STATE_PART_COUNT
} remat_state_part;

typedef struct remat_state_precision {
  const char *name;            /* "fp32", "bf16", "fp16" */
  size_t weight, grad, master; /* bytes per parameter; master 0: none */
} remat_state_precision;

typedef struct remat_state_optimizer {
  const char *name; /* "adamw", "adam", "sgd", "sgd-momentum", "none" */
  size_t moments;   /* fp32 bytes of optimizer state per parameter */
  int trains;       /* 0 for "none": no update, so no master copy either */
} remat_state_optimizer;

/* Row i of each table; NULL past the last. */
REMAT_API const remat_state_precision *remat_state_precision_at(int i);
REMAT_API const remat_state_optimizer *remat_state_optimizer_at(int i);
/* Whether ZeRO stage zero (0 to 3) shards part (remat_state_part). */
REMAT_API int remat_zero_shards(int zero, int part);

/* The whole bytes one rank holds for num_params parameters: tensor
 * parallelism of degree tp divides the count (ceil(num_params / tp) = n),
 * and each part of b bytes a parameter takes ceil(b n / dp) bytes where
 * ZeRO stage zero shards it over dp replicas, else b n. parts (may be NULL)
 * gets each part's bytes. REMAT_EINVAL for a name not in the tables, a ZeRO
 * stage not in 0..3, or dp or tp below 1. */
REMAT_API int remat_state_bytes(uint64_t num_params, const char *precision,
                                const char *optimizer, int zero, int64_t dp, int64_t tp,
                                uint64_t parts[REMAT_STATE_PART_COUNT], uint64_t *total,
                                remat_error *err);

/* ---------------------------------------------------------- memory plan */

/* The arena of one stage, region by region. Append-only. */
typedef enum {
  REMAT_BUF_PARAMS, /* the stage's parameters, llm.c order (persistent) */
  REMAT_BUF_GRADS,  /* their gradients (persistent) */
  REMAT_BUF_ADAM_M, /* AdamW first moment (persistent) */
  REMAT_BUF_ADAM_V, /* AdamW second moment (persistent) */
  REMAT_BUF_SLOTS,  /* n slots, one per micro-batch in flight: input ids,
                       each block's input and, when kept, its internals, the
                       final residual, target ids (each slot by its blocks'
                       policies there: remat_memplan_slot) */
  REMAT_BUF_DRESID, /* (B, T, C) gradient of the residual stream */
  REMAT_BUF_WORK,   /* transient: a block's backward temporaries then the
                       recompute scratch; or the head's activations then
                       the logits */
  REMAT_BUF_TIED_GRAD, /* the head's gradient of the tied matrix, kept apart
                          (a stage with both the embedding and the head) */
  REMAT_BUF_SEND,      /* (B, T, C) the stage's output, being sent (a stage
                          without the head) */
  REMAT_BUF_GATHER,    /* a replica under ZeRO 3: gathered parameters */
  REMAT_BUF_NORM,      /* a replica: every replica's chunk sums (doubles) */
  REMAT_BUF_RECV,      /* a replica: pieces received by reduce-scatter and
                          all-gather */
  REMAT_BUF_REDUCE,    /* a replica: its layers' gradient buffers, sent by
                          reduce-scatter: two blocks', then the head's and
                          the embedding's (at the top: every micro-batch
                          writes it whole) */
  REMAT_BUF_WREC,   /* zb-h1, zbv: wdeferred x the stage's kept blocks' W records */
  REMAT_BUF_PARAMS_BF16, /* bf16: the bf16 copies of the stage's blocks'
                            matrices (qkvw, attprojw, fcw, fcprojw of each
                            block in turn) and, with the head, of the tied
                            matrix (persistent; written whole at each
                            refresh); a replica under ZeRO 3: the gathered
                            unit's matrices, rounded as they are used
                            (gather_bf16) */
  REMAT_BUF_COUNT
} remat_buf;

typedef struct remat_membuf {
  size_t bytes;  /* 0 when the stage does not need it */
  size_t offset; /* in the arena, a multiple of REMAT_ALIGN */
} remat_membuf;

#define REMAT_NO_OFFSET ((size_t)-1)


/* The arena of a stage, planned: every buffer's size and offset. Opaque;
 * the model lays its arena out by one (remat_model_memplan), and a caller
 * plans one without a model to learn the bytes a step needs. */
typedef struct remat_memplan remat_memplan; /* opaque */

/* Lays out every buffer of a training step of the whole model, one
 * micro-batch B x T in flight, with the given per-block policies (NULL: keep
 * all). */
REMAT_API int remat_memplan_create(remat_memplan **out, const remat_config *cfg, int64_t B,
                                   int64_t T, const uint8_t *policy, remat_error *err);
/* The same for one stage. */
REMAT_API int remat_memplan_create_stage(remat_memplan **out, const remat_config *cfg, int64_t B,
                                         int64_t T, const remat_stage *st, remat_error *err);
REMAT_API void remat_memplan_destroy(remat_memplan *mp);

/* The arena's size: the planned peak of a step (remat_memplan_bytes' total;
 * less its activations where the stage's slots and W records are in its
 * runtime's pool, remat_stage.slots_pooled). */
REMAT_API size_t remat_memplan_peak_bytes(const remat_memplan *mp);
/* One micro-batch's W records: each of the stage's kept blocks' (0 when
 * its backward runs whole). */
REMAT_API size_t remat_memplan_record_bytes(const remat_memplan *mp);
/* Parameters, gradients and AdamW's m and v (and the tied gradient). */
REMAT_API size_t remat_memplan_persistent_bytes(const remat_memplan *mp);
/* Slot 0: what one micro-batch in flight stores in it. Every slot has
 * these bytes unless the stage recomputes per micro-batch
 * (remat_stage.full_slots); then the last slots store less and slot 0 is
 * still the largest (remat_memplan_slot gives each). */
REMAT_API size_t remat_memplan_slot_bytes(const remat_memplan *mp);
/* Slot j (0 <= j < n, the stage's in-flight count) of REMAT_BUF_SLOTS: its
 * offset in the arena and its bytes; the slots lie in order, end to end
 * (pooled, remat_stage.slots_pooled: its bytes; the runtime places it). */
REMAT_API remat_membuf remat_memplan_slot(const remat_memplan *mp, int64_t slot);
/* The policies the stage's blocks take in slot j: num_blocks remat_policy
 * values (remat_memplan_policy is slot 0's). */
REMAT_API const uint8_t *remat_memplan_slot_policy(const remat_memplan *mp, int64_t slot);
/* The stage's full_slots, normalised (num_blocks values, never NULL): 0 for
 * a block that recomputes in no slot or, under policy full, in all of them
 * (a full_slots of n is shown as policy full); else in how many of the last
 * slots it recomputes in full. */
REMAT_API const uint8_t *remat_memplan_full_slots(const remat_memplan *mp);
/* The memory model's breakdown of the arena (remat_stage_bytes_get). */
REMAT_API remat_stage_bytes remat_memplan_bytes(const remat_memplan *mp);
/* One region of the arena (remat_buf): its size (0 when the stage does not
 * need it) and offset. */
REMAT_API remat_membuf remat_memplan_buf(const remat_memplan *mp, int buf);
/* A layer kind's gradient buffer, computed apart (remat_layer_bytes.grad;
 * 0 when the stage does not accumulate and is no replica). */
REMAT_API size_t remat_memplan_grad_bytes(const remat_memplan *mp, int kind);
/* The stage's blocks and their policies: num_blocks remat_policy values
 * (slot 0's, which a block keeps there if it keeps in any slot); how many
 * are recomputed in full or under the middle policy (a middle block counts
 * in both), and how many of them middle, in slot 0. */
REMAT_API int64_t remat_memplan_num_blocks(const remat_memplan *mp);
REMAT_API const uint8_t *remat_memplan_policy(const remat_memplan *mp);
REMAT_API int64_t remat_memplan_num_recomputed(const remat_memplan *mp);
REMAT_API int64_t remat_memplan_num_middle(const remat_memplan *mp);

/* Policies that recompute the first n blocks and keep the rest. */
REMAT_API void remat_policy_first_n(uint8_t *policy, int64_t L, int64_t n);
/* "keep", "full" (REMAT_RECOMPUTE), "middle"; "?" for others. */
REMAT_API const char *remat_policy_name(int policy);

/* Which blocks to recompute under a budget: remat_fewest_recompute
 * (remat/plan.h), the planner's choice among keep, middle and full. */

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MEMORY_H */
