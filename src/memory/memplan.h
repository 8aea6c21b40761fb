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
  int64_t num_kept, num_recomputed, num_middle;
  uint8_t *policy; /* (num_blocks) remat_policy of each block, owned */
  /* Inside a slot (add slot * slot_bytes + buf[REMAT_BUF_SLOTS].offset): */
  size_t slot_bytes;
  size_t inputs_offset;  /* REMAT_NO_OFFSET without the embedding */
  size_t targets_offset; /* REMAT_NO_OFFSET without the head */
  size_t final_offset;   /* the head's input; REMAT_NO_OFFSET without the head */
  size_t *block_input_offset;    /* (num_blocks) */
  size_t *block_internal_offset; /* (num_blocks) REMAT_NO_OFFSET when recomputed;
                                    the stored internals (block_stored_bytes),
                                    followed by the cheap ones when kept */
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

/* Releases the parts of a plan held in place (not the struct). */
void remat__memplan_free(remat_memplan *mp);

#endif
