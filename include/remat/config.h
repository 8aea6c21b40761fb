/* remat/config.h: model shapes (GPT-2 and Llama), parameter tensors and
 * model FLOPs.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_CONFIG_H
#define REMAT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "remat/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- model shape */

/* The most transformer blocks a model may have. */
#define REMAT_MAX_LAYERS 4096

/* Model families; append only. Each is described once, as data
 * (src/config/family.h): its parameter tensors, its blocks' activations
 * and products; the memory model, the planner, the units and the formats
 * read that description.
 *   gpt2   layernorm, learned positions, GELU MLP of 4C, biases, the head
 *          tied to the token embedding;
 *   llama  RMSNorm, rotary positions on adjacent pairs, a SwiGLU MLP of
 *          ffn_hidden, grouped-query attention (kv_heads), no biases, an
 *          untied head by default. */
typedef enum {
  REMAT_FAMILY_GPT2 = 0,
  REMAT_FAMILY_LLAMA = 1,
  REMAT_FAMILY_COUNT
} remat_family;
REMAT_API const char *remat_family_name(int family); /* "gpt2", "llama" */

/* A model's shape. The vocabulary is padded up to a multiple of 128 as
 * llm.c does for GPT-2 (a Llama's is not padded: Vp = V, as llama2.c's
 * files hold it); rows past vocab_size exist in the embedding but never
 * take part in the loss. The fields after precision are zero for GPT-2. */
typedef struct remat_config {
  int64_t max_seq_len;       /* maxT: rows of the position embedding */
  int64_t vocab_size;        /* V */
  int64_t padded_vocab_size; /* Vp >= V, multiple of 128 (or V if V < 128) */
  int64_t num_layers;        /* L */
  int64_t num_heads;         /* NH, divides C */
  int64_t channels;          /* C */
  /* remat_precision: how a step computes and what its activations are
   * stored in (0, the zero value: fp32). Not part of the shape a
   * checkpoint holds: a model file loads into either. */
  int64_t precision;
  int64_t family;     /* remat_family (0, the zero value: GPT-2) */
  int64_t kv_heads;   /* Llama: key/value heads, dividing num_heads */
  int64_t ffn_hidden; /* Llama: the SwiGLU's hidden width */
  int64_t untied;     /* Llama: 1 when the head has its own matrix */
  double rope_theta;  /* Llama: the rotary base (10000, or 500000 for Llama 3) */
  double norm_eps;    /* Llama: RMSNorm's epsilon */
  /* The head's logits in chunks of this many tokens: each chunk's logits
   * are made, turned into its loss and gradient, and dropped, so the head
   * holds one chunk's logits, not B*T*Vp (0, the zero value: all B*T at
   * once). Like the precision, a setting of the run, not of the shape. */
  int64_t head_chunk;
  /* Tensor parallelism, laid out as Megatron-LM lays it: with
   * tensor_parallel t >= 2 the config describes one of t ranks' shards.
   * Column-parallel products (GPT-2's qkv and MLP input, a Llama's q, k,
   * v, w1 and w3) hold 1/t of their output rows, row-parallel ones (the
   * projections into the residual stream) 1/t of their input columns, the
   * heads are split (a Llama's key/value heads too where t divides them,
   * else every rank holds them all), the embedding and the head hold 1/t
   * of the vocabulary; the norms, the position embedding and the
   * row-parallel biases are whole on every rank. The parameter sizes, the
   * units and the memory model are then a rank's. 0 or 1: the whole
   * model. A setting of the run, as the precision. */
  int64_t tensor_parallel;
  /* With tensor_parallel t >= 2, sequence parallelism: the norms, dropout
   * and the residual stream on T/t of each sequence's tokens, with
   * all-gathers and reduce-scatters where plain tensor parallelism
   * all-reduces (0: off). */
  int64_t sequence_parallel;
} remat_config;

/* Precisions; append only.
 *   fp32  everything in fp32 (OpenBLAS products).
 *   bf16  mixed precision as PyTorch's autocast: fp32 master weights,
 *         gradients and AdamW moments; bf16 copies of the matrices feed the
 *         products (oneDNN, fp32 accumulation), refreshed after each update;
 *         the inputs and outputs of the products (the layernorm and GELU
 *         outputs, qkv, the attention output, the MLP pre-activation, the
 *         logits) stored in bf16; layernorm statistics, softmax,
 *         log-sum-exp, the residual stream, the loss and every reduction in
 *         fp32. Needs AVX512-BF16 (or AMX). */
typedef enum {
  REMAT_PRECISION_FP32 = 0,
  REMAT_PRECISION_BF16 = 1,
  REMAT_PRECISION_COUNT
} remat_precision;
REMAT_API const char *remat_precision_name(int precision); /* "fp32", "bf16" */
REMAT_API int remat_precision_parse(const char *s, int *out); /* -1 if unknown */

/* Parses a built-in name ("tiny", "small", "gpt2-124m", "llama-tiny",
 * "llama3-8b", ...), a GPT-2 spec "L,C,NH,V,T" or a Llama spec
 * "llama:L,C,NH,NKV,H,V,T[,theta[,tied]]" (tied: 1 ties the head to the
 * embedding). */
REMAT_API int remat_config_parse(const char *name_or_spec, remat_config *cfg, remat_error *err);
/* The spec remat_config_parse reads back to the same shape ("L,C,NH,V,T",
 * or "llama:L,C,NH,NKV,H,V,T,theta,tied"), into buf of cap bytes (64 is
 * enough); returns its length. */
REMAT_API int remat_config_spec(const remat_config *cfg, char *buf, size_t cap);
/* Checks a shape for consistency (positive, NH | C, Vp >= V, sizes in range). */
REMAT_API int remat_config_check(const remat_config *cfg, remat_error *err);
/* Fills Vp from V. */
REMAT_API int64_t remat_padded_vocab(int64_t vocab_size);
/* Names of the built-in configs, NULL-terminated, and a one-line description. */
REMAT_API const char *const *remat_config_names(void);
REMAT_API const char *remat_config_describe(const char *name);

/* GPT-2's parameter tensors in llm.c's checkpoint order. An array of
 * REMAT_P_COUNT holds any family's tensors (in its own order, Llama's
 * below); a family with fewer leaves the rest empty (size 0). */
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

/* Llama's parameter tensors, in llama2.c's checkpoint order. */
enum {
  REMAT_LP_EMB,      /* (V, C) token embedding */
  REMAT_LP_ATTNORM,  /* (L, C) RMSNorm before attention */
  REMAT_LP_WQ,       /* (L, C, C) */
  REMAT_LP_WK,       /* (L, KV, C), KV = kv_heads * C / num_heads */
  REMAT_LP_WV,       /* (L, KV, C) */
  REMAT_LP_WO,       /* (L, C, C) */
  REMAT_LP_FFNNORM,  /* (L, C) RMSNorm before the MLP */
  REMAT_LP_W1,       /* (L, H, C) the SwiGLU's gate, H = ffn_hidden */
  REMAT_LP_W2,       /* (L, C, H) its down projection */
  REMAT_LP_W3,       /* (L, H, C) its up projection */
  REMAT_LP_NORM,     /* (C) the final RMSNorm */
  REMAT_LP_CLS,      /* (V, C) the head's matrix; empty when tied */
  REMAT_LP_COUNT
};

/* Number of floats in each parameter tensor, and their sum. */
REMAT_API void remat_param_sizes(const remat_config *cfg, size_t sizes[REMAT_P_COUNT]);
REMAT_API size_t remat_param_count(const remat_config *cfg);
/* Parameters of one transformer block (the per-layer slices above). */
REMAT_API size_t remat_block_param_count(const remat_config *cfg);

/* The weights of one block that take part in its matrix products (GPT-2:
 * 12 C^2; a Llama: its q, k, v, o and three SwiGLU matrices): a block's
 * products do 2 FLOPs per token and weight forward. */
REMAT_API double remat_block_matrix_weights(const remat_config *cfg);

/* Model FLOPs of one forward+backward over one token, as in PaLM's appendix
 * B: 6 N + 12 L C T, where N counts the weights that take part in a matrix
 * product (the blocks' matrices and the LM head over the real vocabulary;
 * not biases, norms or the position embedding) and 12 L C T is
 * attention's scores and weighted sum over the full T x T. Recomputation is
 * not model work and is never counted. */
REMAT_API double remat_flops_per_token(const remat_config *cfg, int64_t seq_len);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_CONFIG_H */
