/* sizes_cpu.c: the CPU backend's sizes (products/sizes.h), the one
 * definition of each of its figures: the attention kernels keep one
 * log-sum-exp per row and head from the forward and fill one rowsum per
 * row and head in the backward (their tiles live on the thread's stack);
 * the tied embedding backward (kernels/layers.c) carves its work into B*T*C
 * floats, one row per distinct token, then V int32 (token -> row) and B*T
 * int32 (position -> row); the products' scratchpad is oneDNN's. In bf16
 * on a CPU with AVX512-BF16 the attention runs on bf16 operands, each
 * thread packing its tiles into its piece of the products' scratchpad
 * (remat__att16_tiles), so the scratchpad is at least the thread count
 * times a piece. */
#ifdef _OPENMP
#include <omp.h>
#endif

#include "products/products.h"

/* The threads the kernels run on: OpenMP's, or one in a build without it
 * (the fuzzing build's planner, which runs no kernel). */
static size_t kernel_threads(void) {
#ifdef _OPENMP
  return (size_t)omp_get_max_threads();
#else
  return 1;
#endif
}

static void cpu_workspace(remat__kernel_ws *ws, int64_t B, int64_t T, int64_t C, int64_t NH,
                          int64_t V) {
  size_t BT = (size_t)B * (size_t)T;
  ws->attention_stats = BT * (size_t)NH;
  ws->attention_scratch = BT * (size_t)NH;
  ws->encoder_tied = BT * (size_t)C * sizeof(float) + ((size_t)V + BT) * sizeof(int32_t);
}

size_t remat__att16_tiles_view(remat__att16_tiles *t, void *base, int64_t hs) {
  const size_t Q = REMAT__ATT16_BQ, K = REMAT__ATT16_BK, h = (size_t)hs;
  const size_t count[11] = {K * h, K * h, K * h, K * h, Q * h, Q * h, Q * h,
                            Q * K, Q * K, K * Q, K * Q};
  uint16_t *at[11];
  size_t off = 0;
  for (int i = 0; i < 11; i++) {
    at[i] = base ? (uint16_t *)((char *)base + off) : NULL;
    off += (count[i] * sizeof(uint16_t) + REMAT_ALIGN - 1) / REMAT_ALIGN * REMAT_ALIGN;
  }
  if (t)
    *t = (remat__att16_tiles){.kd = at[0], .vd = at[1], .kc = at[2], .vc = at[3], .qr = at[4],
                              .dor = at[5], .dob = at[6], .pb = at[7], .dsb = at[8],
                              .pt = at[9], .dst = at[10]};
  return off;
}

/* Only where the instructions are (the attention kernel asks the same
 * question) and the head size is even (the pairs of channels). */
static size_t cpu_attention_work(int64_t C, int64_t NH) {
  if (NH <= 0 || C % NH || (C / NH) % 2 || !remat__cpu_bf16_get().avx512_bf16) return 0;
  return kernel_threads() * remat__att16_tiles_view(NULL, NULL, C / NH);
}

const remat__backend_sizes remat__cpu_sizes = {
    .align = REMAT_ALIGN,
    .workspace = cpu_workspace,
    .product_scratch = remat__dnnl_scratch,
    .attention_work = cpu_attention_work,
};
