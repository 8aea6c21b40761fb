/* backend.h: the backend seam, in the manner of ggml's ggml_backend_i. A
 * backend is one table of function pointers: the kernels of a GPT-2 step
 * and the operations on the buffers they work in. A model holds one
 * (remat__model_create_on; the CPU backend by default) and reaches kernels
 * and arena buffers only through it, as do the runtimes that work on its
 * arena (src/parallel). The arena and its offsets stay the memory model's: a
 * backend only says where the bytes live (buffer_alloc) and what its
 * kernels need besides the named tensors (sizes).
 *
 * The CPU backend (remat__backend_cpu, src/kernels/backend_cpu.c) is the
 * reference: its kernels are those of kernels/kernels.h, whose comments give
 * each op's contract (shapes, which outputs overwrite and which accumulate,
 * what may alias); every op here has the contract of the kernel of the same
 * name. A second backend meets the same contracts and is checked op by op
 * against the CPU one by tests/test_backend_ops.c.
 *
 * Float and token pointers handed to ops point into memory from the same
 * backend's buffer_alloc; the argument structs (remat__dropout,
 * remat__adamw, a list of pieces, the workspace) are the caller's. The
 * host reads and writes that memory only through the crossings (upload,
 * download, and the windows map lends): token ids into a slot, a
 * checkpoint into the parameters, a message in flight. The guard backend
 * (backend_guard.c) holds callers to that: its memory faults on any other
 * touch. */
#ifndef REMAT_BACKEND_H
#define REMAT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/layout.h"

/* ------------------------------------------------------ op arguments */

/* Dropout masks are never stored: element i of the mask at one site is a
 * pure function of (seed, step, micro, layer, site, i), computed with
 * Random123's Philox4x32-10:
 *   key     = { (uint32_t)seed, (uint32_t)(seed >> 32) }
 *   counter = { (uint32_t)(i / 4), micro, (layer << 4) | site, step }
 *   u       = (uint32_t word (i % 4) of the output) >> 8, times 2^-24
 *   keep    = u >= p;  a kept element is scaled by 1 / (1 - p).
 * p == 0 means no dropout: kernels then skip the generator entirely. */
typedef enum {
  REMAT_DROP_ATTN = 0,  /* attention probabilities */
  REMAT_DROP_RESID1 = 1, /* attention branch before the residual add */
  REMAT_DROP_RESID2 = 2, /* MLP branch before the residual add */
  REMAT_DROP_SITE_COUNT
} remat_drop_site;

typedef struct remat__dropout {
  float p;       /* drop probability in [0, 1) */
  uint64_t seed;
  uint32_t step;  /* optimizer step */
  uint32_t micro; /* micro-batch within the step */
  uint32_t layer; /* block index */
  uint32_t site;  /* remat_drop_site */
  /* the attention's on a tensor rank, which holds heads [head0, head0 +
   * its count) of the model's `heads`: each keeps the whole model's mask
   * (heads 0: the kernel sees every head) */
  uint32_t heads, head0;
  /* dropout_apply's: the index in the whole tensor's mask of the buffer's
   * first element (a sequence-parallel rank's rows start past 0) */
  uint64_t first;
} remat__dropout;

/* torch.optim.AdamW, one tensor of n elements, step t >= 1:
 *   p -= lr * weight_decay * p
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * g is scaled by grad_scale first (for clipping; 1 otherwise). weight_decay
 * is per tensor: the engine passes 0 for biases and layernorm parameters. */
typedef struct remat__adamw {
  float lr, beta1, beta2, eps;
  int step;
} remat__adamw;

/* One contiguous run of floats; a list of them is a vector laid out in
 * pieces (a layer's unit, whose tensors are apart in the stage's buffers). */
typedef struct remat__piece {
  const float *x;
  size_t n;
} remat__piece;

/* Written over every word of an arena when it is allocated, so that the
 * high-water mark can be measured: a NaN bit pattern, which no healthy
 * buffer ever holds. */
#define REMAT_ARENA_POISON 0x7FF4DEAD7FF4DEADull

/* What the host does in a window the backend lends (remat__backend.map). */
enum { REMAT_MAP_READ = 1, REMAT_MAP_WRITE = 2 };

/* ------------------------------------------------------ the table */

typedef struct remat__backend {
  const char *name;
  bool device; /* its memory is a device's: bf16 is its own products', not the host CPU's */

  /* Buffers. The arena: bytes, every byte set to a pattern no healthy
   * buffer holds, so that high_water can find how far it was written;
   * NULL when out of memory. It is the only allocation a backend makes. */
  void *(*buffer_alloc)(size_t bytes);
  void (*buffer_free)(void *arena);
  /* The end of the written part of arena (bytes long), at least mark: only
   * the part above a previous mark is scanned. */
  size_t (*high_water)(const void *arena, size_t bytes, size_t mark);
  /* The crossings between host memory and the backend's: the only ways
   * the host reads or writes backend memory. upload: bytes from host src
   * into dst; download: bytes from src into host dst. map lends the host a
   * window on [p, p + bytes) until unmap, for a message in flight (MPI
   * reads and writes it while the host runs): access says what the host
   * does there (REMAT_MAP_READ: reads what the backend wrote;
   * REMAT_MAP_WRITE: writes what the backend reads after unmap; both). The
   * CPU's map returns p itself; a backend whose memory the host cannot
   * address would stage through host memory of its own. */
  void (*upload)(void *dst, const void *src, size_t bytes);
  void (*download)(void *dst, const void *src, size_t bytes);
  void *(*map)(void *p, size_t bytes, int access);
  void (*unmap)(void *p, void *host, size_t bytes, int access);
  void (*clear)(void *dst, size_t bytes);                     /* dst = 0 */
  void (*copy)(void *dst, const void *src, size_t bytes);      /* no overlap */
  void (*fill)(float *dst, float value, size_t n);             /* dst[i] = value */
  /* dst[j] = (((dst[j] + src[j]) + src[stride + j]) + ...) over k sources
   * stride floats apart, added in order, j < n: the orders that let one
   * process, stages and replicas give the same bits (model/gpt2.c). */
  void (*add)(float *dst, const float *src, size_t n, int64_t k, size_t stride);
  /* The vector of pieces (count floats in all) cut into chunks of q
   * floats: out[c] = the sum of squares of chunk c, in double, over 8 lanes
   * (an element's lane is its position in its chunk mod 8, each lane summed
   * in order, then lanes 0..7 added in order). Chunks are independent, so
   * any split of the work gives the same bits. */
  void (*sumsq_chunks)(double *out, const remat__piece *pieces, int npieces, size_t count,
                       size_t q);
  /* What the kernels need besides their named tensors (workspace, the
   * products' scratchpad) and the alignment of their buffers: the one
   * statement of each (products/sizes.h), which the memory model plans
   * with (remat__kernel_ws_get). */
  const remat__backend_sizes *sizes;

  /* Kernels: the contracts of kernels/kernels.h. */
  bool (*dropout_keep)(const remat__dropout *d, uint64_t i);
  void (*dropout_apply)(float *out, const float *inp, size_t n, const remat__dropout *d);
  void (*gemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc);
  void (*gemm_bias)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc);
  void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                          int64_t B, int64_t T, int64_t C);
  void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                           int64_t B, int64_t T, int64_t C);
  /* work: sizes' encoder_tied bytes (remat__kernel_ws) */
  void (*encoder_backward_tied)(float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int64_t B, int64_t T, int64_t C,
                                int64_t V, void *work);
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int64_t N, int64_t C);
  void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int64_t N, int64_t C);
  void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                         int64_t N, int64_t C, int64_t OC);
  void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int64_t N, int64_t C,
                          int64_t OC);
  void (*matmul_forward_gelu)(float *out, float *gelu_out, const float *inp, const float *weight,
                              const float *bias, int64_t N, int64_t C, int64_t OC);
  void (*matmul_forward_residual)(float *out, const float *inp, const float *weight,
                                  const float *bias, const float *resid,
                                  const remat__dropout *drop, int64_t N, int64_t C, int64_t OC);
  void (*matmul_backward_gelu)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *x, int64_t N,
                               int64_t C, int64_t OC);
  /* lse: sizes' attention_stats floats; delta: attention_scratch floats */
  void (*attention_forward)(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                            int64_t C, int64_t NH, const remat__dropout *drop);
  void (*attention_backward)(float *dqkv, float *delta, const float *dout, const float *qkv,
                             const float *out, const float *lse, int64_t B, int64_t T, int64_t C,
                             int64_t NH, const remat__dropout *drop);
  void (*attention_decode)(float *out, const float *q, int64_t ldq, const float *k,
                           const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                           int64_t NH);
  /* Grouped-query attention (kernels.h's remat__attention_forward_gqa and
   * the rest): q, k, v apart (rows ldq and ldkv floats apart), NH query
   * heads over NKV kv heads; lse, delta and work as for the packed ops
   * above, with C = NH*hs. NULL on a backend that has not got them; the
   * bf16 pair also where attention_forward_bf16 is NULL. */
  void (*attention_forward_gqa)(float *out, float *lse, const float *q, const float *k,
                                const float *v, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                int64_t NH, int64_t NKV, int64_t hs, const remat__dropout *drop);
  void (*attention_backward_gqa)(float *dq, float *dk, float *dv, float *delta,
                                 const float *dout, const float *q, const float *k,
                                 const float *v, const float *out, const float *lse, int64_t ldq,
                                 int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                 int64_t hs, const remat__dropout *drop);
  void (*attention_decode_gqa)(float *out, const float *q, int64_t ldq, const float *k,
                               const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t NH,
                               int64_t NKV, int64_t hs);
  void (*attention_forward_gqa_bf16)(float *out, float *lse, const uint16_t *q,
                                     const uint16_t *k, const uint16_t *v, int64_t ldq,
                                     int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                     int64_t hs, const remat__dropout *drop, void *work,
                                     size_t work_bytes);
  void (*attention_backward_gqa_bf16)(float *dq, float *dk, float *dv, float *delta,
                                      const float *dout, const uint16_t *q, const uint16_t *k,
                                      const uint16_t *v, const uint16_t *out, const float *lse,
                                      int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t hs,
                                      const remat__dropout *drop, void *work,
                                      size_t work_bytes);
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
  void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
  double (*crossentropy_forward)(float *logits, float *losses, const int32_t *targets, int64_t N,
                                 int64_t V, int64_t Vp);
  void (*crossentropy_backward)(float *logits, const int32_t *targets, float dloss, int64_t N,
                                int64_t V, int64_t Vp);
  double (*crossentropy_forward_backward)(float *logits, float *losses, const int32_t *targets,
                                          float dloss, int64_t N, int64_t V, int64_t Vp);
  /* the vocabulary split across tensor ranks (kernels.h); NULL where a
   * backend has none: tensor parallelism is refused there */
  void (*vocab_encoder_forward)(float *out, const int32_t *tokens, const float *wte,
                                const float *wpe, int64_t first, int64_t rows, int64_t B,
                                int64_t T, int64_t C);
  void (*vocab_encoder_backward)(float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, int64_t first, int64_t rows, int64_t B,
                                 int64_t T, int64_t C);
  void (*vocab_max)(float *mx, const float *logits, int64_t N, int64_t V, int64_t Vl);
  void (*vocab_exp)(float *logits, double *stats, const float *mx, const int32_t *targets,
                    int64_t first, int64_t N, int64_t V, int64_t Vl);
  double (*vocab_finish)(float *logits, float *losses, const double *stats,
                         const int32_t *targets, float dloss, int64_t first, int64_t N,
                         int64_t V, int64_t Vl, int backward);
  void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                       const remat__adamw *opt, float weight_decay, float grad_scale);
  double (*sumsq)(const float *x, size_t n);
  void (*init_normal)(float *x, size_t first, size_t n, float std, uint64_t seed,
                      uint32_t tensor);

  /* bf16 (kernels/bf16.h): the conversions, the layers with bf16 operands,
   * and the matrix products, which a model makes once for its shapes
   * (products_create, at set-up: the only time they allocate) and whose
   * scratchpad (products_scratch bytes, at most sizes->product_scratch of
   * the same shapes) it places in its workspace. The products are opaque
   * to the caller: what products_create makes (the CPU's: oneDNN
   * primitives) only the same backend's ops read. */
  void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
  void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
  void (*layernorm_forward_bf16)(uint16_t *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t N, int64_t C);
  void (*gelu_forward_bf16)(uint16_t *out, const uint16_t *inp, size_t n);
  void (*gelu_backward_bf16)(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n);
  double (*crossentropy_forward_bf16)(uint16_t *logits, float *losses, const int32_t *targets,
                                      int64_t N, int64_t V, int64_t Vp);
  double (*crossentropy_forward_backward_bf16)(uint16_t *logits, float *losses,
                                               const int32_t *targets, float dloss, int64_t N,
                                               int64_t V, int64_t Vp);
  /* the vocabulary-parallel loss on bf16 logits (NULL: no tensor
   * parallelism in bf16 there) */
  void (*vocab_max_bf16)(float *mx, const uint16_t *logits, int64_t N, int64_t V, int64_t Vl);
  void (*vocab_exp_bf16)(const uint16_t *logits, double *stats, const float *mx,
                         const int32_t *targets, int64_t first, int64_t N, int64_t V, int64_t Vl);
  double (*vocab_finish_bf16)(uint16_t *logits, float *losses, const double *stats,
                              const float *mx, const int32_t *targets, float dloss,
                              int64_t first, int64_t N, int64_t V, int64_t Vl, int backward);
  int (*products_create)(void **out, const remat__mm_shape *shapes, int n, remat_error *err);
  void (*products_destroy)(void *products);
  size_t (*products_scratch)(const void *products);
  void (*bf16_matmul_forward)(void *products, void *out, const uint16_t *inp,
                              const uint16_t *weight, const float *bias, int64_t N, int64_t C,
                              int64_t OC, bool out_bf16, void *scratch);
  void (*bf16_matmul_backward)(void *products, void *dinp, float *dweight, float *dbias,
                               const uint16_t *dout, const uint16_t *inp, const uint16_t *weight,
                               int64_t N, int64_t C, int64_t OC, bool dinp_bf16, void *scratch);
  /* The attention on bf16 operands (kernels.h's remat__attention_forward_bf16
   * and _backward_bf16), where sizes give attention_work (remat__kernel_ws):
   * work is that many bytes, the products' scratchpad while no product
   * runs. NULL: the attention runs on operands widened to fp32. */
  void (*attention_forward_bf16)(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH, const remat__dropout *drop,
                                 void *work, size_t work_bytes);
  void (*attention_backward_bf16)(float *dqkv, float *delta, const float *dout,
                                  const uint16_t *qkv, const uint16_t *out, const float *lse,
                                  int64_t B, int64_t T, int64_t C, int64_t NH,
                                  const remat__dropout *drop, void *work, size_t work_bytes);
  /* adamw_update, the bf16 copy's refresh (param_bf16, as to_bf16 rounds;
   * NULL: none) and grad = 0 in one sweep (remat__adamw_update_fused).
   * NULL: the model runs the three apart. */
  void (*adamw_update_fused)(float *param, float *grad, float *m, float *v, uint16_t *param_bf16,
                             size_t n, const remat__adamw *opt, float weight_decay,
                             float grad_scale);

  /* The Llama family's layers (kernels.h: RMSNorm, SwiGLU, the rotary
   * embedding), fp32 and bf16. NULL on a backend that has not got them: a
   * Llama model cannot run there. */
  void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight,
                          int64_t N, int64_t C, float eps);
  void (*rmsnorm_forward_bf16)(uint16_t *out, float *rstd, const float *inp,
                               const float *weight, int64_t N, int64_t C, float eps);
  void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp,
                           const float *weight, const float *rstd, int64_t N, int64_t C);
  void (*swiglu_forward)(float *out, const float *a, const float *b, size_t n);
  void (*swiglu_forward_bf16)(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
  void (*swiglu_backward)(float *da, float *db, const float *a, const float *b,
                          const float *dout, size_t n);
  void (*swiglu_backward_bf16)(uint16_t *da, uint16_t *db, const uint16_t *a, const uint16_t *b,
                               const float *dout, size_t n);
  void (*rope_forward)(float *x, int64_t ld, int64_t B, int64_t T, int64_t nheads, int64_t hs,
                       int64_t pos0, double theta);
  void (*rope_backward)(float *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads, int64_t hs,
                        int64_t pos0, double theta);
  void (*rope_forward_bf16)(uint16_t *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                            int64_t hs, int64_t pos0, double theta);
  void (*rope_backward_bf16)(uint16_t *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                             int64_t hs, int64_t pos0, double theta);
} remat__backend;

/* The CPU backend: today's kernels (OpenBLAS, OpenMP), the reference. */
const remat__backend *remat__backend_cpu(void);

/* The guard backend, for the tests: the CPU's kernels over an arena the
 * host cannot touch (PROT_NONE) except while one of its operations runs or
 * through a window it lends; any other touch faults, and the fault names
 * the address and the calling frames (backend_guard.c). */
const remat__backend *remat__backend_guard(void);

/* The backend models are made on when none is named: the CPU's, unless
 * remat__backend_select chose another (remat train/plan/sample --backend,
 * or the REMAT_BACKEND environment variable, read once). */
const remat__backend *remat__backend_default(void);

/* The backends compiled in, the CPU one first (test_backend_ops runs each
 * against it); NULL past the last. */
const remat__backend *remat__backend_at(int i);

#endif
