/* backend_cuda.c: the CUDA backend's ops table and sizes. The device code
 * is kernels.cu, reached through the plain C functions of cuda_ops.h; this
 * file only adapts the table's arguments (dropout keys, AdamW constants,
 * piece lists) and composes the fused layers from the same ops the CPU's
 * fused kernels are defined by (kernels.h: "the same arithmetic as the
 * unfused calls named beside each").
 *
 * It has never run on a GPU: docs/cuda.md says what is there, what is not,
 * and how bench/gpu_check.sh checks it on one.
 *
 * The bf16 matrix products (cuBLASLt plans) and the attention on bf16
 * operands, packed and grouped-query, are products.cu's and
 * attention_bf16.cu's, through cuda_products.h; the sizes give their
 * scratch's bound (product_scratch) and say the attention takes bf16
 * operands (attention_work, which its kernels do not use). The Llama
 * family's layers (fp32 and bf16) and the fp32 grouped-query attention
 * are llama.cu's, through cuda_llama.h. */
#include <math.h>
#include <stdlib.h>

#include "kernels/backend_cuda.h"
#include "kernels/cuda/cuda_llama.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_products.h"
#include "kernels/cuda/cuda_vocab.h"
#include "kernels/kernels.h"

int remat__cuda_usable(remat_error *err) {
  char msg[200] = "";
  int n = remat__cu_devices(msg, sizeof msg);
  if (n > 0) return 0;
  return remat__errorf(err, REMAT_EINVAL,
                       "backend 'cuda' cannot run here: %s (it needs an NVIDIA GPU and driver)",
                       msg);
}

/* --------------------------------------------------------- buffers */

/* The arenas live, with their sizes: the counted heap (base/alloc.c) holds
 * their bytes as it holds the CPU's arena, so the measured peak is the same
 * sum on both backends. Arenas are made at set-up, one thread. */
enum { ARENAS_MAX = 256 };
static struct {
  void *p;
  size_t bytes;
} arenas[ARENAS_MAX];

static void *cu_buffer_alloc(size_t bytes) {
  void *p = remat__cu_alloc(bytes);
  for (int i = 0; p && i < ARENAS_MAX; i++)
    if (!arenas[i].p) {
      arenas[i].p = p, arenas[i].bytes = bytes;
      remat__heap_count(bytes);
      return p;
    }
  remat__cu_free(p); /* NULL, or more arenas than this table holds */
  return NULL;
}

static void cu_buffer_free(void *arena) {
  for (int i = 0; arena && i < ARENAS_MAX; i++)
    if (arenas[i].p == arena) {
      remat__heap_uncount(arenas[i].bytes);
      arenas[i].p = NULL;
    }
  remat__cu_free(arena);
}

static void *cu_map(void *p, size_t bytes, int access) {
  return remat__cu_map(p, bytes, (access & REMAT_MAP_READ) != 0);
}

static void cu_unmap(void *p, void *host, size_t bytes, int access) {
  remat__cu_unmap(p, host, bytes, (access & REMAT_MAP_WRITE) != 0);
}

static void cu_sumsq_chunks(double *out, const remat__piece *pieces, int npieces, size_t count,
                            size_t q) {
  enum { ON_STACK = 64 };
  const float *xs[ON_STACK] = {0};
  size_t ns[ON_STACK] = {0};
  const float **x = xs;
  size_t *n = ns;
  if (npieces > ON_STACK) {
    x = malloc((size_t)npieces * sizeof *x);
    n = malloc((size_t)npieces * sizeof *n);
    REMAT_ASSERT(x && n);
  }
  for (int i = 0; i < npieces; i++) x[i] = pieces[i].x, n[i] = pieces[i].n;
  remat__cu_sumsq_chunks(out, x, n, npieces, count, q);
  if (x != xs) free(x), free(n);
}

/* --------------------------------------------------------- kernels */

static remat__cu_drop drop_of(const remat__dropout *d) {
  if (!d || d->p <= 0.0f) return (remat__cu_drop){0};
  return (remat__cu_drop){.p = d->p, .seed = d->seed, .step = d->step, .micro = d->micro,
                          .layer = d->layer, .site = d->site, .first = d->first};
}

static void cu_dropout_apply(float *out, const float *inp, size_t n, const remat__dropout *d) {
  remat__cu_drop k = drop_of(d);
  remat__cu_dropout_apply(out, inp, n, &k);
}

static void cu_gemm_bias(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc) {
  remat__cu_rows_bias(C, bias, M, N, ldc);
  remat__cu_gemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
}

static void cu_matmul_forward(float *out, const float *inp, const float *weight,
                              const float *bias, int64_t N, int64_t C, int64_t OC) {
  if (bias)
    cu_gemm_bias(N, OC, C, inp, C, weight, C, bias, out, OC);
  else
    remat__cu_gemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
}

/* dinp = dout @ weight; dweight += dout^T @ inp; dbias += column sums. */
static void cu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, int64_t N, int64_t C,
                               int64_t OC) {
  if (dinp) remat__cu_gemm(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
  if (dweight) remat__cu_gemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) remat__cu_col_sums(dbias, dout, N, OC);
}

static void cu_matmul_forward_gelu(float *out, float *gelu_out, const float *inp,
                                   const float *weight, const float *bias, int64_t N, int64_t C,
                                   int64_t OC) {
  cu_matmul_forward(out, inp, weight, bias, N, C, OC);
  remat__cu_gelu_forward(gelu_out, out, (size_t)(N * OC));
}

static void cu_matmul_forward_residual(float *out, const float *inp, const float *weight,
                                       const float *bias, const float *resid,
                                       const remat__dropout *drop, int64_t N, int64_t C,
                                       int64_t OC) {
  cu_matmul_forward(out, inp, weight, bias, N, C, OC);
  cu_dropout_apply(out, out, (size_t)(N * OC), drop);
  remat__cu_residual_forward(out, out, resid, (size_t)(N * OC));
}

static void cu_matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout,
                                    const float *inp, const float *weight, const float *x,
                                    int64_t N, int64_t C, int64_t OC) {
  cu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  if (dinp) remat__cu_gelu_backward(dinp, x, dinp, (size_t)(N * C));
}

static void cu_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                                 int64_t C, int64_t NH, const remat__dropout *drop) {
  remat__cu_drop k = drop_of(drop);
  remat__cu_attention_forward(out, lse, qkv, B, T, C, NH, &k, drop ? drop->heads : 0,
                              drop ? drop->head0 : 0);
}

static void cu_attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int64_t B, int64_t T,
                                  int64_t C, int64_t NH, const remat__dropout *drop) {
  remat__cu_drop k = drop_of(drop);
  remat__cu_attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, &k,
                               drop ? drop->heads : 0, drop ? drop->head0 : 0);
}

/* The attentions take the dropout's heads and head0 too: a tensor rank's
 * heads keep the whole model's mask. */
static void cu_attention_forward_gqa(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                                     int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                     const remat__dropout *drop) {
  remat__cu_drop d = drop_of(drop);
  remat__cu_attention_forward_gqa(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, &d,
                                  drop ? drop->heads : 0, drop ? drop->head0 : 0);
}

static void cu_attention_backward_gqa(float *dq, float *dk, float *dv, float *delta,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const float *out, const float *lse,
                                      int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t hs,
                                      const remat__dropout *drop) {
  remat__cu_drop d = drop_of(drop);
  remat__cu_attention_backward_gqa(dq, dk, dv, delta, dout, q, k, v, out, lse, ldq, ldkv, B, T,
                                   NH, NKV, hs, &d, drop ? drop->heads : 0,
                                   drop ? drop->head0 : 0);
}

static double cu_crossentropy_forward(float *logits, float *losses, const int32_t *targets,
                                      int64_t N, int64_t V, int64_t Vp) {
  return remat__cu_crossentropy(logits, losses, targets, N, V, Vp, 0, 0.0f);
}

static double cu_crossentropy_forward_backward(float *logits, float *losses,
                                               const int32_t *targets, float dloss, int64_t N,
                                               int64_t V, int64_t Vp) {
  return remat__cu_crossentropy(logits, losses, targets, N, V, Vp, 1, dloss);
}

/* adamw.c's consts_of: the bias corrections in double on the host. */
static remat__cu_adamw_k adamw_consts(const remat__adamw *opt, float weight_decay) {
  REMAT_ASSERT(opt->step >= 1);
  return (remat__cu_adamw_k){
      .b1 = opt->beta1, .b2 = opt->beta2, .eps = opt->eps,
      .decay = 1.0f - opt->lr * weight_decay,
      .step_size = (float)((double)opt->lr / (1.0 - pow((double)opt->beta1, opt->step))),
      .bc2_sqrt = (float)sqrt(1.0 - pow((double)opt->beta2, opt->step))};
}

static double cu_crossentropy_forward_bf16(uint16_t *logits, float *losses,
                                           const int32_t *targets, int64_t N, int64_t V,
                                           int64_t Vp) {
  return remat__cu_crossentropy_bf16(logits, losses, targets, N, V, Vp, 0, 0.0f);
}

static double cu_crossentropy_forward_backward_bf16(uint16_t *logits, float *losses,
                                                    const int32_t *targets, float dloss,
                                                    int64_t N, int64_t V, int64_t Vp) {
  return remat__cu_crossentropy_bf16(logits, losses, targets, N, V, Vp, 1, dloss);
}

static void cu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                            const remat__adamw *opt, float weight_decay, float grad_scale) {
  remat__cu_adamw_k k = adamw_consts(opt, weight_decay);
  remat__cu_adamw(param, (float *)grad, m, v, NULL, n, &k, grad_scale, 0); /* grad only read */
}

static void cu_adamw_update_fused(float *param, float *grad, float *m, float *v,
                                  uint16_t *param_bf16, size_t n, const remat__adamw *opt,
                                  float weight_decay, float grad_scale) {
  remat__cu_adamw_k k = adamw_consts(opt, weight_decay);
  remat__cu_adamw(param, grad, m, v, param_bf16, n, &k, grad_scale, 1);
}

/* ---------------------------------------------- bf16 products, attention */

/* The shapes as products.cu reads them, their flags resolved as
 * products/sizes.h defines them; NULL when out of host memory. */
static remat__cu_mm *mm_of(const remat__mm_shape *s, int n) {
  remat__cu_mm *m = malloc((n > 0 ? (size_t)n : 1) * sizeof *m);
  for (int i = 0; m && i < n; i++)
    m[i] = (remat__cu_mm){.N = s[i].N, .C = s[i].C, .OC = s[i].OC, .out_bf16 = s[i].out_bf16,
                          .dinp_bf16 = s[i].out_bf16 && !s[i].dinp_fp32,
                          .bias = !s[i].no_bias};
  return m;
}

static int cu_products_create(void **out, const remat__mm_shape *shapes, int n,
                              remat_error *err) {
  char msg[200] = "out of memory for the bf16 products' shapes";
  remat__cu_mm *m = mm_of(shapes, n);
  int rc = m ? remat__cu_products_create(out, m, n, msg, sizeof msg) : REMAT__CU_ENOMEM;
  free(m);
  if (!rc) return 0;
  return remat__errorf(err, rc == REMAT__CU_ENOMEM ? REMAT_ENOMEM : REMAT_EINVAL, "%s", msg);
}

/* The kernels take no work (the sizes' attention_work only says they take
 * the head size): work and work_bytes are unused. */
static void cu_attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                          const uint16_t *k, const uint16_t *v, int64_t ldq,
                                          int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                          int64_t NKV, int64_t hs, const remat__dropout *drop,
                                          void *work, size_t work_bytes) {
  (void)work, (void)work_bytes;
  remat__cu_drop d = drop_of(drop);
  remat__cu_attention_forward_gqa_bf16(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, &d,
                                       drop ? drop->heads : 0, drop ? drop->head0 : 0);
}

static void cu_attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                           const float *dout, const uint16_t *q,
                                           const uint16_t *k, const uint16_t *v,
                                           const uint16_t *out, const float *lse, int64_t ldq,
                                           int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t hs, const remat__dropout *drop,
                                           void *work, size_t work_bytes) {
  (void)work, (void)work_bytes;
  remat__cu_drop d = drop_of(drop);
  remat__cu_attention_backward_gqa_bf16(dq, dk, dv, delta, dout, q, k, v, out, lse, ldq, ldkv, B,
                                        T, NH, NKV, hs, &d, drop ? drop->heads : 0,
                                        drop ? drop->head0 : 0);
}

/* GPT-2's packed qkv: the grouped-query ops with q, k, v inside it and
 * NKV = NH (as attention_bf16.c's). */
static void cu_attention_forward_bf16(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                      int64_t T, int64_t C, int64_t NH,
                                      const remat__dropout *drop, void *work,
                                      size_t work_bytes) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  cu_attention_forward_gqa_bf16(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH,
                                C / NH, drop, work, work_bytes);
}

static void cu_attention_backward_bf16(float *dqkv, float *delta, const float *dout,
                                       const uint16_t *qkv, const uint16_t *out,
                                       const float *lse, int64_t B, int64_t T, int64_t C,
                                       int64_t NH, const remat__dropout *drop, void *work,
                                       size_t work_bytes) {
  REMAT_ASSERT(NH > 0 && C % NH == 0);
  cu_attention_backward_gqa_bf16(dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C,
                                 qkv + 2 * C, out, lse, 3 * C, 3 * C, B, T, NH, NH, C / NH, drop,
                                 work, work_bytes);
}

/* ----------------------------------------------------------- sizes */

/* The same terms as the CPU's (sizes_cpu.c), by the same kernels' needs:
 * one log-sum-exp per row and head (the forward's lse), one rowsum per row
 * and head (the backward's delta), the tied embedding backward's rows,
 * token -> row and position -> row tables (kernels.cu carves them in that
 * order). The attention keeps its accumulators in registers: no tiles in
 * the arena. */
static void cu_workspace(remat__kernel_ws *ws, int64_t B, int64_t T, int64_t C, int64_t NH,
                         int64_t V) {
  size_t BT = (size_t)B * (size_t)T;
  ws->attention_stats = BT * (size_t)NH;
  ws->attention_scratch = BT * (size_t)NH;
  ws->encoder_tied = BT * (size_t)C * sizeof(float) + ((size_t)V + BT) * sizeof(int32_t);
}

/* The bf16 products' scratch from the shapes alone, no device asked, so a
 * plan is made before a GPU is seen: products.cu's bound (256 bytes to
 * align cuBLASLt's workspace, the workspace cap the plans are made with,
 * at most 32 MiB, and one chunk of fp32 rows, at most 16 MiB, where a bf16
 * out takes a bias), which the plans products_create makes never exceed. */
static int cu_product_scratch(const remat__mm_shape *shapes, int n, size_t *bytes,
                              remat_error *err) {
  remat__cu_mm *m = mm_of(shapes, n);
  const bool ok = m != NULL;
  *bytes = ok ? remat__cu_products_bound(m, n) : 0;
  free(m);
  return ok ? 0 : remat__errorf(err, REMAT_ENOMEM, "out of memory for the bf16 products' shapes");
}

static const remat__backend_sizes cuda_sizes = {
    .align = 64, /* cudaMalloc's 256 is above it; cuBLASLt wants 16 */
    .workspace = cu_workspace,
    .product_scratch = cu_product_scratch,
    .attention_work = remat__cu_attention_work,
};

/* ----------------------------------------------------------- table */

static const remat__backend cuda = {
    .name = "cuda",
    .device = true,
    .buffer_alloc = cu_buffer_alloc,
    .buffer_free = cu_buffer_free,
    .high_water = remat__cu_high_water,
    .upload = remat__cu_upload,
    .download = remat__cu_download,
    .map = cu_map,
    .unmap = cu_unmap,
    .clear = remat__cu_clear,
    .copy = remat__cu_copy,
    .fill = remat__cu_fill,
    .add = remat__cu_add,
    .sumsq_chunks = cu_sumsq_chunks,
    .sizes = &cuda_sizes,
    .dropout_keep = remat__dropout_keep, /* a pure function of its key: no memory */
    .dropout_apply = cu_dropout_apply,
    .gemm = remat__cu_gemm,
    .gemm_bias = cu_gemm_bias,
    .encoder_forward = remat__cu_encoder_forward,
    .encoder_backward = remat__cu_encoder_backward,
    .encoder_backward_tied = remat__cu_encoder_backward_tied,
    .layernorm_forward = remat__cu_layernorm_forward,
    .layernorm_backward = remat__cu_layernorm_backward,
    .matmul_forward = cu_matmul_forward,
    .matmul_backward = cu_matmul_backward,
    .matmul_forward_gelu = cu_matmul_forward_gelu,
    .matmul_forward_residual = cu_matmul_forward_residual,
    .matmul_backward_gelu = cu_matmul_backward_gelu,
    .attention_forward = cu_attention_forward,
    .attention_backward = cu_attention_backward,
    .attention_decode = remat__cu_attention_decode,
    .gelu_forward = remat__cu_gelu_forward,
    .gelu_backward = remat__cu_gelu_backward,
    .residual_forward = remat__cu_residual_forward,
    .crossentropy_forward = cu_crossentropy_forward,
    .crossentropy_backward = remat__cu_crossentropy_backward,
    .crossentropy_forward_backward = cu_crossentropy_forward_backward,
    /* the vocabulary split across tensor ranks (vocab.cu): the table's
     * signatures, so no adapters */
    .vocab_encoder_forward = remat__cu_vocab_encoder_forward,
    .vocab_encoder_backward = remat__cu_vocab_encoder_backward,
    .vocab_max = remat__cu_vocab_max,
    .vocab_exp = remat__cu_vocab_exp,
    .vocab_finish = remat__cu_vocab_finish,
    .vocab_max_bf16 = remat__cu_vocab_max_bf16,
    .vocab_exp_bf16 = remat__cu_vocab_exp_bf16,
    .vocab_finish_bf16 = remat__cu_vocab_finish_bf16,
    .adamw_update = cu_adamw_update,
    .sumsq = remat__cu_sumsq,
    .init_normal = remat__cu_init_normal,
    .to_bf16 = remat__cu_to_bf16,
    .from_bf16 = remat__cu_from_bf16,
    .layernorm_forward_bf16 = remat__cu_layernorm_forward_bf16,
    .gelu_forward_bf16 = remat__cu_gelu_forward_bf16,
    .gelu_backward_bf16 = remat__cu_gelu_backward_bf16,
    .crossentropy_forward_bf16 = cu_crossentropy_forward_bf16,
    .crossentropy_forward_backward_bf16 = cu_crossentropy_forward_backward_bf16,
    .adamw_update_fused = cu_adamw_update_fused,
    /* the bf16 products and the attention on bf16 operands (products.cu,
     * attention_bf16.cu) */
    .products_create = cu_products_create,
    .products_destroy = remat__cu_products_destroy,
    .products_scratch = remat__cu_products_scratch,
    .bf16_matmul_forward = remat__cu_bf16_matmul_forward,
    .bf16_matmul_backward = remat__cu_bf16_matmul_backward,
    .attention_forward_bf16 = cu_attention_forward_bf16,
    .attention_backward_bf16 = cu_attention_backward_bf16,
    .attention_forward_gqa_bf16 = cu_attention_forward_gqa_bf16,
    .attention_backward_gqa_bf16 = cu_attention_backward_gqa_bf16,
    /* the Llama family's layers and the grouped-query attention (llama.cu) */
    .rmsnorm_forward = remat__cu_rmsnorm_forward,
    .rmsnorm_forward_bf16 = remat__cu_rmsnorm_forward_bf16,
    .rmsnorm_backward = remat__cu_rmsnorm_backward,
    .swiglu_forward = remat__cu_swiglu_forward,
    .swiglu_forward_bf16 = remat__cu_swiglu_forward_bf16,
    .swiglu_backward = remat__cu_swiglu_backward,
    .swiglu_backward_bf16 = remat__cu_swiglu_backward_bf16,
    .rope_forward = remat__cu_rope_forward,
    .rope_backward = remat__cu_rope_backward,
    .rope_forward_bf16 = remat__cu_rope_forward_bf16,
    .rope_backward_bf16 = remat__cu_rope_backward_bf16,
    .attention_forward_gqa = cu_attention_forward_gqa,
    .attention_backward_gqa = cu_attention_backward_gqa,
    .attention_decode_gqa = remat__cu_attention_decode_gqa,
};

const remat__backend *remat__backend_cuda(void) { return &cuda; }
