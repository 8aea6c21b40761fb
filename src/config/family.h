/* family.h: each model family described once, as data: its parameter
 * tensors (where each lives, its shape from the config, whether it is a
 * product's weight and whether AdamW decays it, how it starts). The
 * parameter sizes, the units of data parallelism, a stage's share, the
 * memory model's per-layer parameter counts, the bf16 copies and the
 * checkpoint's tensor names are all read from here; the blocks'
 * activations are described beside the other layout tables
 * (memory/layout.c). Nothing that reads this names a family. */
#ifndef REMAT_FAMILY_INTERNAL_H
#define REMAT_FAMILY_INTERNAL_H

#include <stdbool.h>

#include "remat/config.h"

/* Where a tensor lives: the embedding's unit, one slice per block (the
 * tensor is (L, rows, cols)), or the head's unit. */
typedef enum { REMAT__IN_EMBEDDING, REMAT__IN_BLOCK, REMAT__IN_HEAD } remat__where;

/* How a tensor starts (remat_model_init_weights): normal(0, 0.02),
 * normal(0, 0.02 / sqrt(2 L)) (the projections into the residual stream,
 * as GPT-2 scales them), ones, zeros. */
typedef enum { REMAT__INIT_NORMAL, REMAT__INIT_RESIDUAL, REMAT__INIT_ONES, REMAT__INIT_ZEROS } remat__init;

typedef struct remat__tensor {
  const char *name;  /* in checkpoints and messages */
  int where;         /* remat__where */
  int64_t rows, cols; /* one slice (a block tensor's: one block's); cols 1 for a vector */
  bool matrix;       /* a product's weight: has a bf16 copy in bf16 */
  bool decay;        /* AdamW's weight decay applies */
  bool tied;         /* the embedding's matrix, which the head also reads */
  int init;          /* remat__init */
  int split;         /* remat__split: how tensor parallelism divides it */
  bool norm;         /* a norm's weight or bias: under sequence parallelism a
                        tensor rank's gradient covers its rows of the stream */
} remat__tensor;
/* How tensor parallelism (remat_config.tensor_parallel) divides a tensor
 * among its ranks: not at all (norms, positions, the row-parallel
 * products' biases, a Llama's key/value matrices where t does not divide
 * its key/value heads), by rows (a column-parallel product's weight and
 * bias, its output features; the embedding's and the head's vocabulary),
 * or by columns (a row-parallel product's weight, its input features).
 * remat__tensors gives one rank's shapes. */
typedef enum { REMAT__SPLIT_NONE, REMAT__SPLIT_ROWS, REMAT__SPLIT_COLS } remat__split;
/* The tensor-parallel degree (1 without) and the factor sequence
 * parallelism divides the residual stream's tokens by (1 without). */
static inline int64_t remat__tp(const remat_config *cfg) {
  return cfg->tensor_parallel > 1 ? cfg->tensor_parallel : 1;
}
static inline int64_t remat__sp(const remat_config *cfg) {
  return cfg->sequence_parallel ? remat__tp(cfg) : 1;
}

/* Tensor rank `rank`'s shard of tensor i (of a block tensor, the slices of
 * blocks [first, first + count)), run by run: fn(ctx, at, whole_at, n)
 * says that the n floats from `at` of the rank's part (remat__tensors'
 * shape, from block first) are the whole model's tensor's from whole_at.
 * One run for a tensor not split. */
typedef void (*remat__run_fn)(void *ctx, size_t at, size_t whole_at, size_t n);
void remat__tensor_shard_runs(const remat_config *cfg, int i, int64_t rank, int64_t first,
                              int64_t count, remat__run_fn fn, void *ctx);

/* The same for elements [first, first + n) of the rank's part of tensor i
 * over every block (as a whole shard holds it, block after block): `at`
 * counts from `first`. A ZeRO 3 replica's pieces of a unit are such
 * ranges. */
void remat__tensor_range_runs(const remat_config *cfg, int i, int64_t rank, size_t first,
                              size_t n, remat__run_fn fn, void *ctx);

/* The family's tensors in its checkpoint order (at most REMAT_P_COUNT);
 * returns their number. An empty tensor (a Llama's tied head) has rows 0. */
int remat__tensors(const remat_config *cfg, remat__tensor t[REMAT_P_COUNT]);

/* Whether the head reads the embedding's matrix (GPT-2; a tied Llama). */
bool remat__tied(const remat_config *cfg);

/* The head's matrix: the tensor whose rows are the (padded) vocabulary and
 * whose product makes the logits. */
int remat__head_tensor(const remat_config *cfg);

/* Key/value width of a block (kv_heads * head size; C for GPT-2) and the
 * MLP's hidden width (4C for GPT-2), of the whole model. */
int64_t remat__kv_width(const remat_config *cfg);
/* A tensor rank's key/value width: kv_width / t where t divides the
 * key/value heads, else all of it (C / t for GPT-2). */
int64_t remat__kv_rank_width(const remat_config *cfg);
int64_t remat__mlp_width(const remat_config *cfg);

#endif
