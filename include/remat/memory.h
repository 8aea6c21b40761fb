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

#ifdef __cplusplus
}
#endif
#endif /* REMAT_MEMORY_H */
