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

/* Model FLOPs of one forward+backward over one token (PaLM appendix B:
 * 6N + 12 L C T with N the non-embedding... here N counts all matmul weights,
 * the LM head included). Recomputation is not model work and never counted. */
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

/* ---------------------------------------------------------------- parsing */

/* "1.5GiB", "800MB", "20e9", "4096" -> bytes. Suffixes: B, K/KB, M/MB, G/GB,
 * T/TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); case-insensitive. */
int remat_parse_size(const char *s, size_t *bytes, remat_error *err);
/* Formats bytes as "1.50 GiB" into buf. */
const char *remat_format_bytes(size_t bytes, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_H */
