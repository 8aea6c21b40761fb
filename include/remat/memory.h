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

/* ------------------------------------------------------- memory model */

/* Per-block activation policy. */
typedef enum {
  REMAT_KEEP = 0,      /* store everything the block's backward needs */
  REMAT_RECOMPUTE = 1, /* store only the block input; rerun forward in backward */
  REMAT_POLICY_COUNT
} remat_policy;

#define REMAT_ALIGN 64 /* every buffer and every piece of one starts on this */

/* The memory model. The model is a list of layers: the embedding, the L
 * transformer blocks, the head (final layernorm, tied LM head, loss). A
 * stage runs a contiguous range of them with n micro-batches in flight and
 * needs, in bytes,
 *
 *   stage_bytes + sum_l w_l + n * (sum_{l kept} a_l + sum_{l recomputed} c_l)
 *               + max( max_l y_l, max_{l recomputed} x_l )
 *
 * with, per layer:
 *   a (kept)    what one micro-batch in flight stores for the layer's
 *               backward: its input, and a block's internals when kept
 *   c (ckpt)    what it stores when recomputed: its input
 *   x (scratch) transient bytes while a recomputed block reruns its forward
 *               and runs its backward: its internals and its backward's
 *               temporaries
 *   y (work)    transient bytes while the layer runs its backward (a block's
 *               temporaries; the head's workspace and logits)
 *   w (state)   parameters, gradients, AdamW m and v
 * and stage_bytes the gradient of the residual stream, which every stage
 * needs; a stage without the head adds boundary_bytes (its output, sent to
 * the next stage), and the head's w depends on whether it shares its stage
 * with the embedding (see head_joint_state). This is exactly the arena remat_memplan_build lays out: the terms
 * below are computed from the same layout tables the engine carves its
 * tensors with, and the arena is the sum of these regions, nothing shared
 * between them and nothing else in it. The pipeline planner's problem for a
 * GPT-2 (remat_plan_problem_from_model) takes its bytes from here too. */
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
   * order a pipeline follows. */
  size_t boundary_bytes;
  size_t head_joint_state;
  size_t tied_grad_bytes;
  /* the pieces the terms are made of, for breakdowns */
  size_t tokens_bytes;         /* (B, T) int32 ids: inputs, or targets */
  size_t residual_bytes;       /* (B, T, C) float: a block's input */
  size_t block_internal_bytes; /* a kept block's internals beyond its input */
  size_t block_dgrad_bytes;    /* a block backward's temporaries */
  size_t head_bytes;           /* the head's activations and their gradient */
  size_t logits_bytes;         /* (B, T, Vp) logits, probabilities, their gradient */
} remat_memory_model;

/* The terms for micro-batches of B x T. Checks the shape. */
int remat_memory_model_get(const remat_config *cfg, int64_t B, int64_t T, remat_memory_model *mm,
                           remat_error *err);

/* A stage: blocks [first_block, first_block + num_blocks), the embedding
 * before them and/or the head after them, and n micro-batches in flight. The
 * whole model in one process is one stage with both, n = 1. */
typedef struct remat_stage {
  int64_t first_block, num_blocks;
  const uint8_t *policy; /* (num_blocks) remat_policy of each; NULL keeps all */
  int64_t inflight;      /* n >= 1 */
  int has_embedding, has_head;
} remat_stage;

/* The whole model as one stage with one micro-batch in flight. */
remat_stage remat_stage_whole(const remat_config *cfg, const uint8_t *policy);

/* The formula above for one stage; the arena of remat_memplan_build is
 * exactly this many bytes. */
typedef struct remat_stage_bytes {
  size_t state;       /* sum w */
  size_t activations; /* n * (sum a + sum c) */
  size_t workspace;   /* stage_bytes (+ boundary_bytes) + max(y, x) */
  size_t total;
} remat_stage_bytes;
int remat_stage_bytes_get(const remat_config *cfg, const remat_memory_model *mm,
                          const remat_stage *st, remat_stage_bytes *out, remat_error *err);

/* ---------------------------------------------------------- memory plan */

/* The arena of one stage, region by region. Append-only. */
typedef enum {
  REMAT_BUF_PARAMS, /* the stage's parameters, llm.c order (persistent) */
  REMAT_BUF_GRADS,  /* their gradients (persistent) */
  REMAT_BUF_ADAM_M, /* AdamW first moment (persistent) */
  REMAT_BUF_ADAM_V, /* AdamW second moment (persistent) */
  REMAT_BUF_SLOTS,  /* n slots, one per micro-batch in flight: input ids,
                       each block's input and, when kept, its internals, the
                       final residual, target ids */
  REMAT_BUF_DRESID, /* (B, T, C) gradient of the residual stream */
  REMAT_BUF_WORK,   /* transient: a block's backward temporaries then the
                       recompute scratch; or the head's activations then
                       the logits */
  REMAT_BUF_TIED_GRAD, /* the head's gradient of the tied matrix, kept apart
                          (a stage with both the embedding and the head) */
  REMAT_BUF_SEND,      /* (B, T, C) the stage's output, being sent (a stage
                          without the head) */
  REMAT_BUF_COUNT
} remat_buf;

typedef struct remat_membuf {
  size_t bytes;  /* 0 when the stage does not need it */
  size_t offset; /* in the arena, a multiple of REMAT_ALIGN */
} remat_membuf;

#define REMAT_NO_OFFSET ((size_t)-1)

typedef struct remat_memplan {
  remat_config cfg;
  int64_t B, T;
  remat_memory_model mm;
  int64_t first_block, num_blocks, inflight;
  int has_embedding, has_head;
  int64_t num_kept, num_recomputed;
  uint8_t *policy; /* (num_blocks) remat_policy of each block, owned */
  /* Inside a slot (add slot * slot_bytes + buf[REMAT_BUF_SLOTS].offset): */
  size_t slot_bytes;
  size_t inputs_offset;  /* REMAT_NO_OFFSET without the embedding */
  size_t targets_offset; /* REMAT_NO_OFFSET without the head */
  size_t final_offset;   /* the head's input; REMAT_NO_OFFSET without the head */
  size_t *block_input_offset;    /* (num_blocks) */
  size_t *block_internal_offset; /* (num_blocks) REMAT_NO_OFFSET when recomputed */
  /* Inside REMAT_BUF_WORK: the block temporaries at 0, the recompute scratch
   * at block_dgrad_bytes; the head's activations at 0, the logits at
   * head_bytes (sizes in mm). */
  remat_membuf buf[REMAT_BUF_COUNT];
  remat_stage_bytes bytes; /* the memory model's figure; peak_bytes equals its total */
  size_t persistent_bytes; /* params + grads + adam m, v (+ the tied gradient) */
  size_t peak_bytes;       /* arena size: the planned peak of a step */
} remat_memplan;

/* Lays out every buffer of a training step of the whole model, one
 * micro-batch B x T in flight, with the given per-block policies (NULL: keep
 * all). */
int remat_memplan_build(remat_memplan *mp, const remat_config *cfg, int64_t B, int64_t T,
                        const uint8_t *policy, remat_error *err);
/* The same for one stage. */
int remat_memplan_build_stage(remat_memplan *mp, const remat_config *cfg, int64_t B, int64_t T,
                              const remat_stage *st, remat_error *err);
void remat_memplan_free(remat_memplan *mp);

/* Policies that recompute the first n blocks and keep the rest. */
void remat_policy_first_n(uint8_t *policy, int64_t L, int64_t n);

/* The fewest recomputed blocks (the first n: blocks are alike) whose
 * whole-model arena fits `budget` bytes; on success *n_out is that count and
 * *min_bytes its arena. REMAT_EINFEASIBLE if even recomputing every block
 * does not fit, with *min_bytes the smallest arena there is. */
int remat_fewest_recompute(const remat_config *cfg, int64_t B, int64_t T, size_t budget,
                           int64_t *n_out, size_t *min_bytes, remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MEMORY_H */
