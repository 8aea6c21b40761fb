/* model.h: the model's inside, for its own file and for the tests that look
 * at it. The public part is include/remat/model.h. */
#ifndef REMAT_MODEL_INTERNAL_H
#define REMAT_MODEL_INTERNAL_H

#include "kernels/backend.h"
#include "memory/layout.h"
#include "memory/memplan.h"
#include "model/model_runtime.h"
#include "remat/model.h"

struct remat_model {
  const remat__backend *be; /* every kernel and every operation on the arena; its
                               workspace at (B, T) gave the plan's kernel terms */
  remat_config cfg;
  remat_memplan mp; /* of this model's stage (the whole model in one process) */
  remat__kernel_ws ws; /* the kernels' terms at (B, T) that mp was planned with */
  remat_stage stage; /* policy points into mp */
  int64_t B, T;

  char *arena;        /* mp.peak_bytes, one allocation */
  float *params;      /* the stage's parameters, llm.c order: for the whole model
                         the checkpoint body */
  float *grads;
  float *adam_m, *adam_v;
  size_t num_params;  /* floats in each of the four */
  float *p[REMAT_P_COUNT]; /* views of params; NULL for tensors the stage lacks */
  float *g[REMAT_P_COUNT]; /* views of grads */
  size_t sz[REMAT_P_COUNT]; /* floats of each view */
  float *tied_grad;   /* the head's gradient of wte, when the stage also has
                         the embedding; else NULL */
  float *dresid;      /* (B, T, C) */
  float *send;        /* (B, T, C) output of a stage without the head */
  char *work;         /* the transient workspace (a chunk's may be another's) */
  size_t work_bytes;  /* its size */

  /* Each tensor's first float in the stage's flat buffers, and the first
   * element of the whole tensor that the stage holds (a block tensor starts
   * at the stage's first block). */
  size_t tensor_off[REMAT_P_COUNT], tensor_first[REMAT_P_COUNT];
  /* A replica: D copies of the whole model, this is copy r, under ZeRO
   * stage zero; shard floats of the embedding (and tied), a block, the head */
  int64_t D, r;
  int zero;
  bool tied_summed;       /* tied_grad already added this step */
  bool grads_fresh;       /* no backward since zero_grad: the first writes straight into
                             the step's gradients */
  bool wgrads_fresh;      /* the same for the blocks' deferred weight gradients (zb-h1) */
  /* bf16: the bf16 copies (wbf below) are stale after an update or a load
   * until the next forward refreshes them */
  bool bf16_stale;
  /* A head that borrows the tied matrix (remat_stage.tied_borrowed): its
   * bf16 copy is stale after every update, since the lender updates the
   * matrix; the next forward rounds that copy alone. */
  bool tied_bf16_stale;
  /* The last update left the gradients zero and the bf16 copies fresh in
   * the same sweep (adamw_update_fused), and no pointer into the
   * parameters or gradients has been handed out since: zero_grad has
   * nothing to clear, nor the next forward to refresh. */
  bool update_clean;
  size_t shard_emb, shard_blk, shard_head;
  size_t head_grad_split; /* floats before the head's own unit in its gradient buffer */
  remat__layer_ops lops;   /* a replica's parameter gathers and gradient reductions */
  remat__tensor_ops tops;  /* a tensor rank's collectives (sum NULL without) */

  /* bf16: the products' primitives, made for this stage's shapes; the bf16
   * copies of the matrices (REMAT_BUF_PARAMS_BF16) */
  void *products;
  uint16_t *wbf;
  /* A stage whose slots and W records its runtime pools
   * (remat_stage.slots_pooled): where slot j starts (placed[j], j <
   * inflight) and W record w (placed[inflight + w]), as the runtime last
   * placed them (remat__model_place); NULL: in the arena. */
  char **placed;

  size_t high_water;  /* cache for remat_model_arena_high_water */
  int64_t step;       /* optimizer steps taken */
  double recompute_s; /* seconds spent recomputing, since last taken */
  double timer_s[REMAT__T_COUNT]; /* seconds in each kind of layer work */
  int64_t timer_n[REMAT__T_COUNT];
};

/* remat_model_create in two steps: model/model_runtime.h. The same on backend be
 * (NULL: the CPU backend); its plan takes the workspace be's kernels need. */
int remat__model_plan_on(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                         const remat_stage *st, const remat__backend *be, remat_error *err);
/* remat__model_create_stage on backend be (NULL: the CPU backend). */
int remat__model_create_on(remat_model **out, const remat_config *cfg, int64_t B, int64_t T,
                           const remat_stage *st, const remat__backend *be, remat_error *err);

/* The Llama family's block (model/llama_block.c), fp32 and bf16. Its nine tensors in the
 * family's order (attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3) as
 * views of block i: in a unit vector (a replica's gathered unit, or a
 * gradient buffer) when unit is given, else slices of tensors (the model's
 * p or g). */
enum { REMAT__LLAMA_BLOCK_TENSORS = 9 };
void remat__llama_block_views(const remat_model *m, int64_t i, const float *unit,
                              float *const tensors[REMAT_P_COUNT],
                              float *v[REMAT__LLAMA_BLOCK_TENSORS]);
/* Both families' blocks on a tensor rank (remat__tensor_ops; without one
 * they do what one process does). remat__group_sum: buf (n floats) is the
 * rank's part of a sum the group completes (a row-parallel product's
 * output, a column-parallel one's input gradient); scratch, a free
 * workspace view of at least 2 n / t floats. remat__product_residual: out
 * = resid + dropout(inp (N, IC) @ weight^T + bias), a row-parallel product
 * whose parts the group sums before the dropout and the residual (the bias
 * on rank 0's part; bias may be NULL); under sequence parallelism out and
 * resid are the rank's rows (remat__seq_rows, OC), d's first their first
 * element's, the parts go to scratch (N, OC) and rcv takes the rows' worth
 * of floats; otherwise out (N, OC) and scratch as remat__group_sum's.
 *
 * Sequence parallelism (remat__seq_parallel): a rank holds rows
 * [remat__seq_first, + remat__seq_rows) of the residual stream's B T (all
 * of them, from 0, without). remat__seq_gather: its rows (rows, C; they
 * may already be at their place in whole) into whole (B T, C), which the
 * group completes; remat__seq_scatter: whole (B T, C) the rank's part of a
 * sum, dst (rows, C) its rows of the sum (tensor_ops' scatter; rcv: as
 * many floats of scratch). remat__seq_whole: rows itself without sequence
 * parallelism, else whole after remat__seq_gather. */
void remat__group_sum(remat_model *m, float *buf, size_t n, float *scratch);
void remat__product_residual(remat_model *m, float *out, const float *inp, const float *weight,
                             const float *bias, const float *resid, const remat__dropout *d,
                             int64_t N, int64_t IC, int64_t OC, float *scratch, float *rcv);
bool remat__seq_parallel(const remat_model *m);
int64_t remat__seq_rows(const remat_model *m);
int64_t remat__seq_first(const remat_model *m);
void remat__seq_gather(remat_model *m, float *whole, const void *rows, int64_t C);
void remat__seq_scatter(remat_model *m, float *whole, int64_t C, float *dst, float *rcv);
const float *remat__seq_whole(remat_model *m, float *whole, const void *rows, int64_t C);
/* remat__seq_gather and _whole for activations (the norms' outputs), in
 * their element: bf16 in bf16 */
void remat__seq_gather_act(remat_model *m, void *whole, const void *rows, int64_t C);
const void *remat__seq_whole_act(remat_model *m, void *whole, const void *rows, int64_t C);
/* remat__product_residual in bf16: inp and weight bf16, the product made
 * through the model's primitives (product_scratch their scratchpad) */
void remat__product_residual_bf16(remat_model *m, float *out, const uint16_t *inp,
                                  const uint16_t *weight, const float *bias, const float *resid,
                                  const remat__dropout *d, int64_t N, int64_t IC, int64_t OC,
                                  float *scratch, float *rcv, void *product_scratch);
/* The gradient entering a residual branch's row-parallel product, whole
 * (B T, C): d's dropout of m->dresid (the rank's rows), kept in a W
 * record's keep (whole; gathered there in place under sequence
 * parallelism), else in buf (rows; dresid itself when the site does not
 * drop), gathered into whole under sequence parallelism. */
const float *remat__branch_whole(remat_model *m, float *keep, float *buf, float *whole,
                                 const remat__dropout *d);
/* A column-parallel product's input gradient whole (B T, C), the rank's
 * part: summed over the group in place, or under sequence parallelism its
 * rows of the sum reduce-scattered into rows; scratch: 2 B T C / t floats
 * free meanwhile. Nothing without a group. */
void remat__input_grad_sum(remat_model *m, float *whole, float *rows, float *scratch);
/* A micro-batch's slot: where it lies in the arena, and its layout (the
 * policies its blocks take in it: remat_stage.full_slots). */
typedef struct remat__slot {
  char *at;
  remat__slot_layout lay;
} remat__slot;
/* Block i's activations in a slot: kept, in the slot; middle, the stored
 * ones in the slot and the cheap ones in the scratch; recomputed, all in
 * the scratch (by the block's policy in that slot). */
remat__llama_acts remat__llama_acts_at(remat_model *m, const remat__slot *slot, int64_t i);
/* Forward from x into a's internals and out (NULL: stop before the last
 * product, all a recompute needs); the cheap internals again from the
 * stored ones; the backward, with m->dresid = dL/d(output) on entry and
 * dL/d(x) on exit, g's gradients accumulated. drop: the attention's and
 * the two residual branches' dropout. h: NULL in fp32; in bf16 the bf16
 * copies of the block's matrices at their tensors' places in w (the
 * others NULL), which the products read. */
void remat__llama_block_forward(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                                const uint16_t *const h[REMAT__LLAMA_BLOCK_TENSORS],
                                const float *x, remat__llama_acts *a, float *out,
                                const remat__dropout drop[3]);
void remat__llama_block_cheap(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                              const float *x, remat__llama_acts *a);
/* A block's backward runs whole, or in a zero-bubble schedule's two parts:
 * B, the input gradient (dresid), which fills a kept block's W record, and
 * W, the weight gradients, which reads it. Each part runs the same kernels
 * as the whole on the same values, so B then W gives the whole's bits. */
enum { REMAT__PART_INPUT = 1, REMAT__PART_WEIGHT = 2, REMAT__PART_ALL = 3 };
/* The backward's part (REMAT__PART_*): with REMAT__PART_WEIGHT g's
 * gradients accumulate (g unread otherwise); wr, the block's W record when
 * the parts run apart (else NULL), which B writes the gradients of and W
 * reads them from. */
void remat__llama_block_backward(remat_model *m, float *const w[REMAT__LLAMA_BLOCK_TENSORS],
                                 const uint16_t *const h[REMAT__LLAMA_BLOCK_TENSORS],
                                 float *const g[REMAT__LLAMA_BLOCK_TENSORS], const float *x,
                                 const remat__llama_acts *a, const remat__dropout drop[3],
                                 int part, const remat__llama_wrec *wr);
/* After a kept block's B: what its W reads besides the gradients (x and
 * the activations in a), copied into its record r; and the activations a
 * W reads, in r (the others NULL: W reads no more). */
void remat__llama_wrec_fill(remat_model *m, const remat__llama_wrec *r, const float *x,
                            const remat__llama_acts *a);
remat__llama_acts remat__llama_wrec_acts(const remat__llama_wrec *r);

#endif
