/* memplan.h: the memory plan's inside: the offsets of every buffer of a
 * stage's arena. The memory library's interface to the model, which holds
 * one in place (remat__memplan_build_stage_ws in memory/layout.h fills it,
 * remat__memplan_free releases its parts) and carves its arena by it; the
 * tests look at it too. Everyone else reads a plan through the accessors of
 * remat/memory.h. Not installed, not part of the API. */
#ifndef REMAT_MEMPLAN_INTERNAL_H
#define REMAT_MEMPLAN_INTERNAL_H

#include "memory/layout.h"
#include "remat/memory.h"

struct remat_memplan {
  remat_config cfg;
  int64_t B, T;
  remat_memory_model mm;
  int64_t first_block, num_blocks, inflight, wdeferred;
  int has_embedding, has_head;
  int64_t num_kept, num_recomputed, num_middle; /* slot 0's (a block kept in any
                                                    slot is kept in slot 0) */
  /* Slots and their layouts. A block recomputes in full in the last
   * full_slots[i] slots (remat_stage.full_slots, normalised: below inflight,
   * and 0 where the policy is full already), so with f the largest of them
   * slots 0 .. n - f - 1 share layout 0, the stage's policies, and slot
   * n - f - 1 + t has layout t (1 <= t <= f), in which the blocks with
   * full_slots >= f + 1 - t recompute in full. Layout 0 is the largest. */
  uint8_t *full_slots;  /* (num_blocks), owned */
  int64_t num_layouts;  /* f + 1 */
  /* Layout 0 (each array holds num_layouts rows of num_blocks, row 0
   * first); inside a slot of it (add slot * slot_bytes +
   * buf[REMAT_BUF_SLOTS].offset): */
  uint8_t *policy; /* (num_blocks) remat_policy of each block, owned */
  size_t slot_bytes;
  size_t inputs_offset;  /* REMAT_NO_OFFSET without the embedding */
  size_t targets_offset; /* REMAT_NO_OFFSET without the head */
  size_t final_offset;   /* the head's input; REMAT_NO_OFFSET without the head */
  size_t *block_input_offset;    /* (num_blocks) */
  size_t *block_internal_offset; /* (num_blocks) REMAT_NO_OFFSET when recomputed;
                                    the stored internals (block_stored_bytes),
                                    followed by the cheap ones when kept */
  /* (num_layouts) each layout's bytes, its head's offsets, and where its
   * slot starts inside REMAT_BUF_SLOTS (layout 0: its first slot's, 0) */
  size_t *layout_bytes, *layout_final_offset, *layout_targets_offset, *layout_start;
  /* Inside REMAT_BUF_WORK: the block temporaries at 0, then at
   * block_dgrad_bytes the recompute scratch of a recomputed block (its
   * stored internals, then the cheap ones) or the cheap internals of a
   * middle block; the head's activations at 0, the logits at head_bytes
   * (sizes in mm). A layer's gradient buffer follows its other transient
   * bytes: a kept block's at block_dgrad_bytes, a recomputed or middle
   * block's after its scratch, the head's after the logits, the
   * embedding's at 0 (grad_bytes: its size per layer kind). A replica's
   * are in REMAT_BUF_REDUCE instead, handed out by its runtime. */
  remat_membuf buf[REMAT_BUF_COUNT];
  remat_stage_bytes bytes; /* the memory model's figure; peak_bytes equals its total */
  size_t grad_bytes[REMAT_LAYER_KIND_COUNT]; /* 0 when the stage does not accumulate */
  int64_t replicas, replica;
  int zero;
  size_t persistent_bytes; /* params + grads + adam m, v (+ the tied gradient) */
  size_t peak_bytes;       /* arena size: the planned peak of a step */
};

/* One slot of the arena as the model uses it: where it starts, and its
 * layout, the policies its blocks take in it and where its pieces lie from
 * its start (the arrays point into the plan). */
typedef struct remat__slot_layout {
  size_t offset, bytes; /* in the arena */
  const uint8_t *policy; /* (num_blocks) */
  const size_t *block_input_offset, *block_internal_offset; /* (num_blocks) */
  size_t inputs_offset, targets_offset, final_offset;
} remat__slot_layout;
remat__slot_layout remat__memplan_slot(const remat_memplan *mp, int64_t slot);

/* Releases the parts of a plan held in place (not the struct). */
void remat__memplan_free(remat_memplan *mp);

#endif
