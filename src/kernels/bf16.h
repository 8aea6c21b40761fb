/* bf16.h: bf16 matrix products on the CPU through oneDNN, the conversions
 * between fp32 and bf16, and whether this CPU has the instructions for
 * them (read with cpuid at run time, never assumed from the build).
 *
 * A bf16 value is the upper half of an fp32 one (1 sign, 8 exponent, 7
 * mantissa bits), held as uint16_t. Products take bf16 inputs and
 * accumulate in fp32, as PyTorch's autocast does on the CPU; their
 * outputs are fp32 or bf16 (rounded to nearest, ties to even, once, from
 * the fp32 result).
 *
 * oneDNN primitives are made once, at set-up, for a list of shapes
 * (remat__dnnl_create); a product then only looks its primitive up and
 * runs it, with oneDNN's scratchpad in memory the caller provides (at
 * least remat__dnnl_scratchpad_bytes). Every product is deterministic: the
 * same inputs and thread count give the same bits. */
#ifndef REMAT_BF16_H
#define REMAT_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ------------------------------------------------------ the CPU */

/* What cpuid and XCR0 say about bf16 (the registers, so a test can feed
 * any CPU's): leaf 7 sub-leaf 0 EBX and EDX, leaf 7 sub-leaf 1 EAX, leaf 1
 * ECX, and XCR0 (0 when the OS has not enabled XSAVE). */
typedef struct remat__cpuid_regs {
  uint32_t l7_ebx, l7_edx, l7s1_eax, l1_ecx;
  uint64_t xcr0;
} remat__cpuid_regs;

typedef struct remat__cpu_bf16 {
  bool avx512_bf16; /* AVX512F and AVX512-BF16, with the OS saving ZMM state */
  bool amx_bf16;    /* AMX tiles with bf16, with the OS saving tile state */
  /* One line: "bf16: AVX512-BF16 and AMX present" or "fp32: this CPU has
   * no bf16 instructions", and the like. Static storage. */
  const char *reason;
} remat__cpu_bf16;

/* What regs say. */
remat__cpu_bf16 remat__cpu_bf16_from(const remat__cpuid_regs *regs);
/* This CPU, read once. */
remat__cpu_bf16 remat__cpu_bf16_get(void);

/* ------------------------------------------------------ conversions */

/* dst[i] = src[i] rounded to bf16 (nearest, ties to even; a NaN stays a
 * quiet NaN), i < n. */
void remat__bf16_from_f32(uint16_t *dst, const float *src, size_t n);
/* dst[i] = src[i] exactly, i < n. */
void remat__bf16_to_f32(float *dst, const uint16_t *src, size_t n);
/* remat__bf16_round and remat__bf16_float, one value at a time: base/base.h. */

/* ------------------------------------------------------ products */

/* A linear layer's shapes, as the matmul kernels of kernels.h name them:
 * inp (N,C), weight (OC,C), out (N,OC). out_bf16: the forward's out and
 * the backward's dinp are bf16 (else fp32). */
typedef struct remat__mm_shape {
  int64_t N, C, OC;
  bool out_bf16;
} remat__mm_shape;

typedef struct remat__dnnl remat__dnnl;

/* The primitives for n shapes (duplicates allowed): for each, the forward,
 * the backward to the input and the backward to the weight. REMAT_EINVAL
 * when oneDNN has no bf16 product on this CPU (err says which shape and
 * why), REMAT_ENOMEM. */
int remat__dnnl_create(remat__dnnl **out, const remat__mm_shape *shapes, int n,
                       remat_error *err);
void remat__dnnl_destroy(remat__dnnl *d);
/* The scratchpad every product of d needs at most, bytes. */
size_t remat__dnnl_scratchpad_bytes(const remat__dnnl *d);
/* oneDNN's name for the implementation of shape i's forward product
 * ("brg:avx512_core_amx", say). */
const char *remat__dnnl_impl(const remat__dnnl *d, int i);

/* out (N,OC) = inp (N,C) weight (OC,C)^T + bias (OC, fp32, not NULL), fp32
 * accumulation; out is uint16_t (bf16) or float as the shape's out_bf16
 * says. Overwrites out. scratch: scratchpad_bytes of the caller's memory. */
void remat__bf16_matmul_forward(remat__dnnl *d, void *out, const uint16_t *inp,
                                const uint16_t *weight, const float *bias, int64_t N,
                                int64_t C, int64_t OC, bool out_bf16, void *scratch);
/* From dout (N,OC): dinp (N,C) = dout weight (overwrites; skipped when
 * NULL; bf16 or fp32 as dinp_bf16 says), dweight (OC,C) += dout^T inp and
 * dbias (OC) += the column sums of dout (both fp32, accumulate; dbias may
 * be NULL). */
void remat__bf16_matmul_backward(remat__dnnl *d, void *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout, const uint16_t *inp,
                                 const uint16_t *weight, int64_t N, int64_t C, int64_t OC,
                                 bool dinp_bf16, void *scratch);

#endif
