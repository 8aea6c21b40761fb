/* sizes.h: what a backend tells the memory model, and nothing it runs. A
 * backend's kernels need memory besides the named tensors of the layout
 * tables (memory/layout.h): the attention's per-row statistics, the tied
 * embedding backward's work, the products' scratchpad; and its buffers an
 * alignment. Each backend states them once, in its sizes table
 * (remat__backend_sizes), which its ops table points at
 * (remat__backend.sizes) and from which the memory model, and so the
 * planner, takes every kernel-dependent term. Nothing here names a product
 * library's type: a backend's products are its own.
 *
 * The CPU backend's table (remat__cpu_sizes, products/sizes_cpu.c) is the
 * one the public memory functions plan with. It sits here, below the memory
 * model, so that the planner, which links no kernels, plans with the very
 * figures the CPU kernels run with. */
#ifndef REMAT_SIZES_H
#define REMAT_SIZES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* A linear layer's shapes, as the matmul kernels of kernels.h name them:
 * inp (N,C), weight (OC,C), out (N,OC). out_bf16: the forward's out and
 * the backward's dinp are bf16 (else fp32); dinp_fp32: the backward's dinp
 * is fp32 all the same; no_bias: the forward adds no bias (the LM head). */
typedef struct remat__mm_shape {
  int64_t N, C, OC;
  bool out_bf16;
  bool dinp_fp32, no_bias;
} remat__mm_shape;

/* What a backend's kernels need besides the named tensors of the layout
 * tables, for one micro-batch of B x T tokens; the tables and the memory
 * model take their kernel-dependent terms from it (remat__kernel_ws_get
 * in memory/layout.h fills it from a backend's sizes). */
typedef struct remat__kernel_ws {
  size_t attention_stats;   /* floats a block stores for its attention backward
                               (CPU: one log-sum-exp per row and head, B*NH*T) */
  size_t attention_scratch; /* floats of the attention backward's scratch
                               (CPU: rowsum(dout * out) per row and head, B*NH*T) */
  size_t encoder_tied;      /* bytes of the tied embedding backward's work (CPU:
                               B*T*C floats and V + B*T int32), in the workspace
                               after the head's backward */
  int precision;            /* remat_precision of the step (the config's) */
  size_t product_scratch;   /* bf16: bytes of the matrix products' scratchpad
                               (CPU: oneDNN's, which depends on the CPU and the
                               thread count), in the workspace of every layer
                               that runs a product; 0 in fp32. At least
                               attention_work: the attention uses it while no
                               product runs */
  size_t attention_work;    /* bf16: bytes of the attention's tiles on bf16
                               operands (CPU: AVX512-BF16, one piece of
                               remat__att16_tiles per thread), at the start
                               of the products' scratchpad; 0 where the
                               attention runs on operands widened to fp32
                               (fp32, or no such kernel on this CPU) */
  /* Not the kernels' but the config's (set with precision): the
   * tensor-parallel degree, which divides the heads' and the MLP's widths
   * in the layout tables, and the factor the residual stream's tokens are
   * divided by (the degree under sequence parallelism); 1 and 1 without */
  int64_t tp, sp;
} remat__kernel_ws;

typedef struct remat__backend_sizes {
  /* The alignment the backend's kernels need of every buffer and piece, a
   * power of two; the memory model lays the arena out on REMAT_ALIGN and
   * plans only for a backend whose align divides it. */
  size_t align;
  /* The fp32 terms at a micro-batch of B x T of a model of width C, NH
   * heads and padded vocabulary V: attention_stats, attention_scratch and
   * encoder_tied, the only fields it writes (the memory model sets
   * precision and product_scratch for the config's precision). With
   * grouped-query attention NH is the query heads and C = NH * hs: the
   * attention's terms do not depend on the kv heads. */
  void (*workspace)(remat__kernel_ws *ws, int64_t B, int64_t T, int64_t C, int64_t NH,
                    int64_t V);
  /* bf16: the scratchpad, bytes (unaligned), that the products the backend
   * makes for these n shapes (remat__backend.products_create) need at most,
   * without making them; REMAT_EINVAL where the backend has no bf16
   * products here (err says why). */
  int (*product_scratch)(const remat__mm_shape *shapes, int n, size_t *bytes,
                         remat_error *err);
  /* bf16: the bytes of the attention's tiles on bf16 operands for a model
   * of width C and NH heads (attention_work; grouped-query: C = NH * hs, NH
   * the query heads, whatever the kv heads); 0 where the backend has no
   * such kernel for this shape on this CPU (the attention then runs on
   * operands widened to fp32). NULL: never. */
  size_t (*attention_work)(int64_t C, int64_t NH);
} remat__backend_sizes;

/* The CPU's attention on bf16 operands (kernels/attention_bf16.c, on
 * AVX512-BF16): tiles of REMAT__ATT16_BQ queries by REMAT__ATT16_BK keys
 * (both multiples of 16), whose products take operands packed in pairs
 * along their sum (the instruction multiplies two bf16 pairs and adds to
 * fp32). Each thread packs them into its own piece of the work; hs (the
 * head size, even) sets the piece's size. All bf16. */
#define REMAT__ATT16_BQ 64
#define REMAT__ATT16_BK 64
typedef struct remat__att16_tiles {
  uint16_t *kd, *vd; /* (hs/2, BK, 2): a key tile's k and v, pairs of channels */
  uint16_t *kc, *vc; /* (BK/2, hs, 2): the same, pairs of keys */
  uint16_t *qr;      /* (BQ/2, hs, 2): a query tile's q, pairs of rows */
  uint16_t *dor;     /* (BQ/2, hs, 2): its dout, pairs of rows */
  uint16_t *dob;     /* (BQ, hs): its dout */
  uint16_t *pb;      /* (BQ, BK): probabilities (forward) */
  uint16_t *dsb;     /* (BQ, BK): the scores' gradient (backward) */
  uint16_t *pt, *dst; /* (BK, BQ): probabilities and scores' gradient, transposed */
} remat__att16_tiles;

/* One thread's piece at base (NULL: only the size), its bytes returned: the
 * one statement of the layout, which the kernel carves and the CPU sizes
 * multiply by the thread count. */
size_t remat__att16_tiles_view(remat__att16_tiles *t, void *base, int64_t hs);

/* The CPU backend's sizes: its kernels' workspace and oneDNN's scratchpad
 * at this process's thread count. */
extern const remat__backend_sizes remat__cpu_sizes;

#endif
