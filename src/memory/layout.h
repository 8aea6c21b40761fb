/* layout.h: how the engine carves its buffers into named tensors. The same
 * tables give the byte counts the memory plan and the pipeline planner use, so
 * a planned size and the engine's real use cannot drift apart. What the
 * kernels need besides (remat__kernel_ws) the memory model asks the backend
 * that will run them (its remat__backend_sizes, products/sizes.h). */
#ifndef REMAT_LAYOUT_INTERNAL_H
#define REMAT_LAYOUT_INTERNAL_H

#include "products/sizes.h"
#include "remat/memory.h"

/* The kernels' terms of a micro-batch of B x T (remat__kernel_ws,
 * products/sizes.h) as the backend whose sizes are sz states them, in the
 * config's precision: in bf16 with the scratchpad of its products for the
 * shapes of remat__product_shapes, aligned. The shape is checked first
 * (remat__check_shape); REMAT_EINVAL for a backend whose alignment
 * REMAT_ALIGN does not satisfy, or (bf16) with no bf16 products here. The
 * public memory functions, and so the planner, use the sizes of the
 * backend the process runs on (remat__memory_plan_for; the CPU backend's,
 * remat__cpu_sizes, until another is chosen); a model uses its own
 * backend's. */
void remat__memory_plan_for(const remat__backend_sizes *sz);
int remat__kernel_ws_get(remat__kernel_ws *ws, const remat__backend_sizes *sz,
                         const remat_config *cfg, int64_t B, int64_t T, remat_error *err);

/* What one kept block stores beyond its input (the input lives in the
 * residual buffer). Attention stores no probabilities, only one
 * log-sum-exp per row: its backward rebuilds them tile by tile. Dropout
 * masks are regenerated from the RNG, never stored. Nothing here grows
 * faster than linearly in T. The fields come in two groups: the stored
 * ones, which a middle block keeps, and the cheap ones (the layernorm and
 * GELU outputs), which it recomputes from them in its backward.
 *
 * Types: the fields declared void * are the inputs and outputs of the
 * matrix products, float in fp32 and bf16 (uint16_t) in bf16; the others
 * are float in both. */
typedef struct remat__block_acts {
  /* stored */
  float *ln1_mean; /* (B, T) */
  float *ln1_rstd; /* (B, T) */
  void *qkv;       /* (B, T, 3C) */
  float *att_lse;  /* ws.attention_stats floats (CPU: (B, NH, T) log-sum-exp of
                      each attention row's scaled scores) */
  void *atty;      /* (B, T, C) attention output, before the projection */
  float *res2;     /* (B, T, C) input + dropout(attention branch) */
  float *ln2_mean; /* (B, T) */
  float *ln2_rstd; /* (B, T) */
  void *fch;       /* (B, T, 4C) MLP pre-activation */
  /* cheap */
  void *ln1;       /* (B, T, C) */
  void *ln2;       /* (B, T, C) */
  void *fch_gelu;  /* (B, T, 4C) */
} remat__block_acts;

/* Under tensor parallelism (ws->tp > 1) every table is one tensor rank's:
 * the shapes below with the heads' and the MLP's widths (3C, C of atty,
 * 4C) divided by t, the residual-stream tensors (the block's input, res2,
 * the layernorms' outputs and statistics, dbranch) on T/t of the tokens
 * under sequence parallelism (ws->sp), and the products' whole operands
 * and gradients kept whole. */

/* Activation-gradient temporaries of one block's backward (float). In
 * bf16 three more: the gradient entering a product rounded to bf16 (the
 * products take bf16 operands), and the attention's operands widened to
 * fp32 for its kernels; the forward uses those two as well, and all of the
 * products' scratchpad. NULL where the precision has none. */
typedef struct remat__block_dgrads {
  float *dbranch;   /* (B, T, C) gradient entering a residual branch */
  float *d4;        /* (B, T, 4C) d fch_gelu, then d fch (in place) */
  float *dln;       /* (B, T, C) d ln1 or d ln2 output */
  float *datty;     /* (B, T, C) */
  float *dqkv;      /* (B, T, 3C) */
  float *att_delta; /* ws.attention_scratch floats (CPU: (B, NH, T)
                       rowsum(datty * atty) per attention row) */
  uint16_t *dout_h; /* bf16 (B, T, 4C): a product's dout in bf16 */
  float *qkv_f;     /* bf16: (B, T, 3C) qkv widened (in d4) */
  float *atty_f;    /* bf16: (B, T, C) the attention output in fp32 (in d4) */
  void *scratch;    /* ws.product_scratch bytes */
  /* sequence parallelism (NULL without): a product's operand gathered from
   * the tensor ranks' tokens, (B, T, C), and a gradient reduce-scattered
   * onto this rank's tokens, (B, T/t, C) */
  float *gathered, *dslice;
} remat__block_dgrads;

/* What a kept block's deferred weight gradient (a zero-bubble schedule's
 * W) needs, per micro-batch: its own record, filled by its B, so that the
 * micro-batch's slot is free from its B on. The gradients entering its
 * four products (after the branches' dropout; void *: float in fp32, bf16
 * in bf16, as the products take them) and its two layernorms (float); then,
 * copied from the slot, the products' inputs and what the layernorms'
 * weight gradients read (the block's input, res2, their statistics). A
 * block that rebuilds its internals for B (recompute, middle) runs its W
 * with its B and has no record: deferring it would keep these gradients
 * (more than its slot) and rebuild its internals a second time. */
typedef struct remat__block_wrec {
  void *dqkv;      /* (B, T, 3C) */
  void *dproj;     /* (B, T, C) the attention branch's gradient */
  void *dfc;       /* (B, T, 4C) d fch, after the GELU's backward */
  void *dfcproj;   /* (B, T, C) the MLP branch's gradient */
  float *dln1;     /* (B, T, C) */
  float *dln2;     /* (B, T, C) */
  float *x;        /* (B, T, C) the block's input */
  float *res2;     /* (B, T, C) */
  float *ln1_mean; /* (B, T) */
  float *ln1_rstd; /* (B, T) */
  float *ln2_mean; /* (B, T) */
  float *ln2_rstd; /* (B, T) */
  void *ln1;       /* (B, T, C) */
  void *atty;      /* (B, T, C) */
  void *ln2;       /* (B, T, C) */
  void *fch_gelu;  /* (B, T, 4C) */
} remat__block_wrec;

/* The head: final layernorm, losses, and the gradient into it; then, in
 * the workspace after head_bytes, the logits (B, T, Vp) (float, or bf16 in
 * bf16: the product's output, which the loss reads and overwrites with its
 * gradient). */
typedef struct remat__head_acts {
  void *lnf;       /* (B, T, C) float, bf16 in bf16 */
  float *lnf_mean; /* (B, T) */
  float *lnf_rstd; /* (B, T) */
  float *losses;   /* (B, T) per-token loss */
  float *dlnf;     /* (B, T, C) */
  void *scratch;   /* ws.product_scratch bytes */
} remat__head_acts;

/* Each view function, with base == NULL, only returns the bytes needed;
 * with base != NULL it also points every field into base. Fields start on
 * REMAT_ALIGN boundaries. ws: the backend's kernel terms at this shape,
 * the precision among them. */
size_t remat__block_acts_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                              int64_t C, const remat__kernel_ws *ws);
/* The two groups apart: the stored fields at base, and the cheap ones at
 * base; remat__block_acts_view is the stored group followed by the cheap. */
size_t remat__block_stored_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws);
size_t remat__block_cheap_view(remat__block_acts *a, void *base, int64_t B, int64_t T,
                               int64_t C, const remat__kernel_ws *ws);
size_t remat__block_dgrads_view(remat__block_dgrads *d, void *base, int64_t B, int64_t T,
                                int64_t C, const remat__kernel_ws *ws);
size_t remat__head_acts_view(remat__head_acts *h, void *base, int64_t B, int64_t T,
                             int64_t C, const remat__kernel_ws *ws);
size_t remat__block_wrec_view(remat__block_wrec *w, void *base, int64_t B, int64_t T, int64_t C,
                              const remat__kernel_ws *ws);
/* Bytes of one element of a product's operand in this precision (4 or 2). */
static inline size_t remat__act_elem(const remat__kernel_ws *ws) {
  return ws->precision == REMAT_PRECISION_BF16 ? 2 : 4;
}

/* Whether st's head reads another chunk's tied matrix (remat_stage.
 * tied_borrowed, where it takes effect: a head without the embedding, a
 * tied matrix, micro-batches added up, no replicas, fp32). */
int remat__stage_tied_borrowed(const remat_config *cfg, const remat_stage *st);
/* Points params[i] at each parameter tensor inside one flat buffer (llm.c's
 * order, no padding between tensors, so the buffer is the checkpoint body). */
void remat__param_views(const remat_config *cfg, float *base, float *views[REMAT_P_COUNT]);
/* The same for a pipeline stage's own flat buffer: the tensors it holds, in
 * llm.c's order, each cut to the stage's blocks (the tied wte on a stage with
 * the embedding or the head); views of tensors it does not hold are NULL,
 * their sizes 0. */
void remat__stage_param_sizes(const remat_config *cfg, const remat_stage *st,
                              size_t sizes[REMAT_P_COUNT]);
void remat__stage_param_views(const remat_config *cfg, const remat_stage *st, float *base,
                              float *views[REMAT_P_COUNT]);

/* Checks a model shape with a micro-batch B x T: positive, T within the
 * model's maximum, and every buffer far from overflowing size_t. */
int remat__check_shape(const remat_config *cfg, int64_t B, int64_t T, remat_error *err);

/* remat_memory_model_get and remat_memplan_create_stage with a backend's
 * kernel terms (ws at the model's B x T): what a model on that backend
 * plans and allocates. The plan is filled in place, in a remat_memplan the
 * caller holds (memory/memplan.h; remat__memplan_free releases it). */
int remat__memory_model_get_ws(const remat_config *cfg, int64_t B, int64_t T,
                               const remat__kernel_ws *ws, remat_memory_model *mm,
                               remat_error *err);
int remat__memplan_build_stage_ws(remat_memplan *mp, const remat_config *cfg, int64_t B,
                                  int64_t T, const remat_stage *st, const remat__kernel_ws *ws,
                                  remat_error *err);

/* bf16: the products of a step at micro-batches of B x T, as the model
 * makes them (GPT-2: a block's qkv, projection, fc and fc projection, and
 * the LM head; Llama: q, k, v, o, w1, w3, w2 and the head: the head's on
 * cfg->head_chunk tokens, and on the last chunk's rest, where chunked);
 * their scratchpad is ws->product_scratch in bf16. Returns their number. */
enum { REMAT__PRODUCTS = 8 };
int remat__product_shapes(const remat_config *cfg, int64_t B, int64_t T,
                          remat__mm_shape s[REMAT__PRODUCTS]);

/* A Llama block's activations (the family's counterpart of
 * remat__block_acts): the stored ones, which a middle block keeps, then
 * the cheap ones (the RMSNorm and SwiGLU outputs). void *: float in fp32,
 * bf16 in bf16, as for GPT-2. KV = remat__kv_width, H = the MLP width. */
typedef struct remat__llama_acts {
  /* stored */
  float *rstd1;   /* (B, T) the attention RMSNorm's 1/rms */
  void *q;        /* (B, T, C) after the rotation */
  void *k;        /* (B, T, KV) after the rotation */
  void *v;        /* (B, T, KV) */
  float *att_lse; /* ws.attention_stats floats */
  void *atty;     /* (B, T, C) */
  float *res2;    /* (B, T, C) input + attention branch */
  float *rstd2;   /* (B, T) */
  void *h1;       /* (B, T, H) the gate, w1 x */
  void *h3;       /* (B, T, H) the up projection, w3 x */
  /* cheap */
  void *xn1;      /* (B, T, C) */
  void *xn2;      /* (B, T, C) */
  void *hsw;      /* (B, T, H) silu(h1) * h3 */
} remat__llama_acts;

/* A Llama block's backward temporaries (float unless said). */
typedef struct remat__llama_dgrads {
  float *dbranch;   /* (B, T, C) */
  float *dhsw;      /* (B, T, H) */
  void *dh1, *dh3;  /* (B, T, H) the products' douts: float, bf16 in bf16 */
  float *dln;       /* (B, T, C) the norm's output gradient */
  float *dln_part;  /* (B, T, C) a second product's share of it */
  float *datty;     /* (B, T, C) */
  float *dq;        /* (B, T, C) */
  float *dk, *dv;   /* (B, T, KV) */
  float *att_delta; /* ws.attention_scratch floats */
  uint16_t *dout_h; /* bf16: (B, T, C + 2 KV) the other products' douts */
  void *scratch;    /* ws.product_scratch bytes */
  float *gathered, *dslice; /* sequence parallelism, as GPT-2's */
} remat__llama_dgrads;

/* A kept Llama block's W record (remat__block_wrec's counterpart): what
 * its deferred weight gradients read, filled by its B so that the
 * micro-batch's slot is free from its B on. The gradients entering its
 * seven products as they take them (void *: float in fp32, bf16 in bf16:
 * q's and k's after the rotary backward, the branches' after their
 * dropout) and its two RMSNorms' output gradients (float); then, copied
 * from the slot, the products' inputs and what the RMSNorms' weight
 * gradients read (their inputs x and res2, their 1/rms). */
typedef struct remat__llama_wrec {
  void *dq;        /* (B, T, C) */
  void *dk, *dv;   /* (B, T, KV) */
  void *dwo;       /* (B, T, C) the attention branch's gradient */
  void *dh1, *dh3; /* (B, T, H) after the SwiGLU's backward */
  void *dw2;       /* (B, T, C) the MLP branch's gradient */
  float *dxn1;     /* (B, T, C) q's, k's and v's shares summed */
  float *dxn2;     /* (B, T, C) w1's and w3's */
  float *x;        /* (B, T, C) the block's input */
  float *res2;     /* (B, T, C) */
  float *rstd1;    /* (B, T) */
  float *rstd2;    /* (B, T) */
  void *xn1;       /* (B, T, C) */
  void *atty;      /* (B, T, C) */
  void *xn2;       /* (B, T, C) */
  void *hsw;       /* (B, T, H) */
} remat__llama_wrec;

/* A Llama head's activations: the final RMSNorm, losses, the gradient into
 * it; the logits follow at head_bytes as for GPT-2. */
typedef struct remat__llama_head {
  void *xnf;       /* (B, T, C) */
  float *rstd;     /* (B, T) */
  float *losses;   /* (B, T) */
  float *dxnf;     /* (B, T, C) */
  void *scratch;   /* ws.product_scratch bytes */
} remat__llama_head;

size_t remat__llama_stored_view(remat__llama_acts *a, void *base, const remat_config *cfg,
                                int64_t B, int64_t T, const remat__kernel_ws *ws);
size_t remat__llama_cheap_view(remat__llama_acts *a, void *base, const remat_config *cfg,
                               int64_t B, int64_t T, const remat__kernel_ws *ws);
size_t remat__llama_dgrads_view(remat__llama_dgrads *d, void *base, const remat_config *cfg,
                                int64_t B, int64_t T, const remat__kernel_ws *ws);
size_t remat__llama_head_view(remat__llama_head *h, void *base, const remat_config *cfg,
                              int64_t B, int64_t T, const remat__kernel_ws *ws);
size_t remat__llama_wrec_view(remat__llama_wrec *w, void *base, const remat_config *cfg,
                              int64_t B, int64_t T, const remat__kernel_ws *ws);

/* Generation's region (remat/generate.h), one buffer of the backend that
 * runs it: what the decode (model/decode.h) reads and writes, planned here
 * like a stage's arena. R rows of a feed at a time, a context of cap
 * positions; fp32 whatever the precision a model trains in (the weights
 * are the fp32 ones). The block's internals and the final norm are the
 * family's: GPT-2's blk and a layernorm, or a Llama's lblk and an RMSNorm
 * (no lnf_mean); the other family's fields are NULL and take no bytes.
 * In order: */
typedef struct remat__decode_acts {
  float *params;         /* remat_param_count floats, the family's checkpoint
                            order: the generator's own copy of the weights;
                            absent (NULL, no bytes) when it borrows a model's */
  int32_t *tokens;       /* (R) the ids of a feed's rows */
  float *x;              /* (R, C) the residual stream */
  remat__block_acts blk; /* GPT-2: (1, R) one block's internals (the stored
                            and the cheap fields of a kept block), which every
                            block reuses in turn */
  remat__llama_acts lblk; /* Llama: the same, a Llama block's (1, R) */
  float *lnf;            /* (C) the last row after the final norm */
  float *lnf_mean;       /* (1) GPT-2 only */
  float *lnf_rstd;       /* (1) */
  float *kv;             /* (L, cap, 2 KV) the KV cache, KV = remat__kv_width
                            (C for GPT-2, kv_heads * hs for a Llama): per
                            layer and position, the key then the value */
  float *logits;         /* (Vp) after the last row of a feed: last, so the
                            high-water mark of a region that has decoded is
                            its end */
} remat__decode_acts;

/* The region's bytes (base NULL), or its views into base too. ws: the
 * backend's kernel terms at B = 1, T = R in fp32. */
size_t remat__decode_view(remat__decode_acts *d, void *base, const remat_config *cfg, int64_t cap,
                          int64_t R, int own_params, const remat__kernel_ws *ws);

/* The bytes of a block's and the head's regions in the config's family:
 * what the memory model plans (remat_memory_model's block_stored_bytes,
 * block_cheap_bytes, block_dgrad_bytes, block_wrec_bytes, head_bytes). */
typedef struct remat__layer_sizes {
  size_t stored, cheap, dgrad, wrec, head;
} remat__layer_sizes;
void remat__layer_sizes_get(remat__layer_sizes *out, const remat_config *cfg, int64_t B,
                            int64_t T, const remat__kernel_ws *ws);

/* bf16: the bytes of the bf16 copies of a block's matrices and of the
 * matrix the head's product reads (remat_memory_model's
 * block_bf16_bytes and head_bf16_bytes; a replica holds them whole under
 * ZeRO 0 to 2); 0 in fp32. */
void remat__bf16_copy_bytes(const remat_config *cfg, size_t *block, size_t *head);

/* Rounds a byte count up to REMAT_ALIGN. */
static inline size_t remat__align(size_t n) {
  return (n + REMAT_ALIGN - 1) / REMAT_ALIGN * REMAT_ALIGN;
}

#endif
