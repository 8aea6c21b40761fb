/* products.h: a linear layer's three matrix products in bf16 through
 * oneDNN's matmul primitive, the bf16 number format, and whether this CPU
 * has the instructions for them (read with cpuid at run time, never
 * assumed from the build). Below the memory model: the bytes of the
 * products' scratchpad are planned like every other buffer, so the memory
 * model asks the CPU backend's sizes (products/sizes.h), whose scratchpad
 * figure is remat__dnnl_scratch, and the CPU backend makes the primitives
 * (remat__dnnl_create) whose scratchpad is that many bytes.
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
#ifndef REMAT_PRODUCTS_H
#define REMAT_PRODUCTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "products/sizes.h"

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

/* (The bf16 number format, remat__bf16_round and remat__bf16_float, is
 * base/base.h's: the I/O formats use it too.) */

/* ------------------------------------------------------ products */

/* (A linear layer's shapes, remat__mm_shape, are products/sizes.h's: the
 * memory model and every backend name them.) */

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

/* The scratchpad the primitives of these shapes would need at most, bytes,
 * without making them (oneDNN's primitive descriptors only): what
 * remat__dnnl_scratchpad_bytes of remat__dnnl_create's handle for the same
 * shapes says, at the same thread count. */
int remat__dnnl_scratch(const remat__mm_shape *shapes, int n, size_t *bytes, remat_error *err);

/* The products themselves (kernels/bf16.h adds the bias's gradient):
 *   forward   out (N,OC) = inp (N,C) weight (OC,C)^T + bias (fp32; NULL
 *             for a no_bias shape), out bf16 or fp32 as out_bf16 says
 *   backward  dinp (N,C) = dout weight (overwrites; skipped when NULL; bf16
 *             or fp32 as dinp_bf16 says), dweight (OC,C) += dout^T inp
 *             (fp32, accumulates; skipped when NULL)
 * with scratch: scratchpad_bytes of the caller's memory. */
void remat__dnnl_forward(remat__dnnl *d, void *out, const uint16_t *inp, const uint16_t *weight,
                         const float *bias, int64_t N, int64_t C, int64_t OC, bool out_bf16,
                         void *scratch);
void remat__dnnl_backward(remat__dnnl *d, void *dinp, float *dweight, const uint16_t *dout,
                          const uint16_t *inp, const uint16_t *weight, int64_t N, int64_t C,
                          int64_t OC, bool dinp_bf16, void *scratch);

#endif
