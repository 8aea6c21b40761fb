/* attention.cu: the CUDA backend's causal self-attention on a packed qkv,
 * forward, backward and decode, to the contracts of kernels/kernels.h: the
 * grouped-query attention (llama.cu, attention_rows.cuh's kernels) with
 * NKV = NH and q, k, v the thirds of each qkv row (ldq = ldkv = 3 C), as
 * the CPU's attention.c calls its own. One thread per query row or key
 * row, an online softmax with keys or queries in order: deterministic, no
 * atomics, no T x T buffer. Flash-style tiles in shared memory are the
 * next step once this has run on a GPU; it never has (docs/cuda.md). */
#include "common.cuh"
#include "cuda_llama.h"

/* The packed ops' own check, before the grouped-query one: C splits into
 * NH heads of at most HS_MAX channels. */
static void check_hs(int64_t C, int64_t NH) {
  if (NH <= 0 || C % NH || C / NH > HS_MAX)
    fail("attention", "head size above the CUDA kernel's HS_MAX (256)", __FILE__, __LINE__);
}

void remat__cu_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                                 int64_t C, int64_t NH, const remat__cu_drop *d, uint32_t heads,
                                 uint32_t head0) {
  if (B * T == 0) return;
  check_hs(C, NH);
  remat__cu_attention_forward_gqa(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH,
                                  NH, C / NH, d, heads, head0);
}

/* dq, dk, dv are the thirds of each dqkv row, as q, k, v of qkv's. */
void remat__cu_attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int64_t B, int64_t T,
                                  int64_t C, int64_t NH, const remat__cu_drop *d, uint32_t heads,
                                  uint32_t head0) {
  if (B * T == 0) return;
  check_hs(C, NH);
  remat__cu_attention_backward_gqa(dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C,
                                   qkv + 2 * C, out, lse, 3 * C, 3 * C, B, T, NH, NH, C / NH, d,
                                   heads, head0);
}

void remat__cu_attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                                const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                                int64_t NH) {
  if (n <= 0) return;
  check_hs(C, NH);
  remat__cu_attention_decode_gqa(out, q, ldq, k, v, ldkv, n, pos, NH, NH, C / NH);
}
