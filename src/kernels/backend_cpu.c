/* backend_cpu.c: the CPU backend, the reference every other backend is
 * checked against: the ops table of kernels/backend.h filled with the
 * kernels of kernels.h (called as they are, so the same bits as calling
 * them directly) and the buffer operations on host memory, OpenMP loops
 * with a static schedule. */
#include <string.h>

#include "base/base.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

/* The counted allocator (base/alloc.c), so heap measurements and
 * test_noalloc see the arena. */
static void *cpu_buffer_alloc(size_t bytes) {
  uint64_t *w = remat__malloc(bytes);
  if (!w) return NULL;
  for (size_t i = 0; i < bytes / sizeof(uint64_t); i++) w[i] = REMAT_ARENA_POISON;
  return w;
}

static void cpu_buffer_free(void *arena) { remat__free(arena); }

static size_t cpu_high_water(const void *arena, size_t bytes, size_t mark) {
  const uint64_t *w = arena;
  size_t n = bytes / sizeof(uint64_t), lo = mark / sizeof(uint64_t);
  /* Only the part above the last mark can have changed state. */
  for (size_t i = n; i > lo; i--)
    if (w[i - 1] != REMAT_ARENA_POISON) return i * sizeof(uint64_t);
  return mark;
}

/* Host memory: the crossings are copies, and a window is the memory itself. */
static void *cpu_map(void *p, size_t bytes, int access) {
  (void)bytes, (void)access;
  return p;
}

static void cpu_unmap(void *p, void *host, size_t bytes, int access) {
  (void)p, (void)host, (void)bytes, (void)access;
}

static void cpu_clear(void *dst, size_t bytes) { memset(dst, 0, bytes); }

static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_fill(float *dst, float value, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = value;
}

static void cpu_add(float *dst, const float *src, size_t n, int64_t k, size_t stride) {
  if (k == 1) {
#pragma omp parallel for simd schedule(static)
    for (size_t j = 0; j < n; j++) dst[j] = dst[j] + src[j];
    return;
  }
#pragma omp parallel for schedule(static)
  for (size_t j = 0; j < n; j++) {
    float a = dst[j];
    for (int64_t q = 0; q < k; q++) a = a + src[(size_t)q * stride + j];
    dst[j] = a;
  }
}

/* Adds the squares of run floats at chunk position p0 to the 8 lanes (the
 * lane of an element is its position in its chunk, mod 8); the middle loop
 * is the vectorisable one. */
static void lanes_add(double lane[8], const float *x, size_t run, size_t p0) {
  size_t j = 0;
  for (; j < run && ((p0 + j) & 7); j++) lane[(p0 + j) & 7] += (double)x[j] * (double)x[j];
  for (; j + 8 <= run; j += 8)
    for (int l = 0; l < 8; l++) lane[l] += (double)x[j + l] * (double)x[j + l];
  for (; j < run; j++) lane[(p0 + j) & 7] += (double)x[j] * (double)x[j];
}

static void cpu_sumsq_chunks(double *out, const remat__piece *pieces, int npieces, size_t count,
                             size_t q) {
  int64_t nch = (int64_t)((count + q - 1) / q);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nch; c++) {
    size_t lo = (size_t)c * q, hi = lo + q < count ? lo + q : count;
    double lane[8] = {0};
    /* the piece holding lo, and where it starts in the vector */
    int k = 0;
    size_t at = 0;
    while (k < npieces && at + pieces[k].n <= lo) at += pieces[k++].n;
    for (size_t i = lo; i < hi && k < npieces; at += pieces[k++].n) {
      size_t run = at + pieces[k].n - i;
      if (run > hi - i) run = hi - i;
      lanes_add(lane, pieces[k].x + (i - at), run, i - lo);
      i += run;
    }
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += lane[l];
    out[c] = s;
  }
}

/* The products are oneDNN primitives (products/dnnl.c), opaque to the
 * caller: these hand them over as the table's void pointers. */
static int cpu_products_create(void **out, const remat__mm_shape *shapes, int n,
                               remat_error *err) {
  remat__dnnl *d = NULL;
  int rc = remat__dnnl_create(&d, shapes, n, err);
  *out = d;
  return rc;
}

static void cpu_products_destroy(void *products) { remat__dnnl_destroy(products); }

static size_t cpu_products_scratch(const void *products) {
  return remat__dnnl_scratchpad_bytes(products);
}

static void cpu_bf16_matmul_forward(void *products, void *out, const uint16_t *inp,
                                    const uint16_t *weight, const float *bias, int64_t N,
                                    int64_t C, int64_t OC, bool out_bf16, void *scratch) {
  remat__bf16_matmul_forward(products, out, inp, weight, bias, N, C, OC, out_bf16, scratch);
}

static void cpu_bf16_matmul_backward(void *products, void *dinp, float *dweight, float *dbias,
                                     const uint16_t *dout, const uint16_t *inp,
                                     const uint16_t *weight, int64_t N, int64_t C, int64_t OC,
                                     bool dinp_bf16, void *scratch) {
  remat__bf16_matmul_backward(products, dinp, dweight, dbias, dout, inp, weight, N, C, OC,
                              dinp_bf16, scratch);
}

static const remat__backend cpu = {
    .name = "cpu",
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .high_water = cpu_high_water,
    .upload = cpu_copy,
    .download = cpu_copy,
    .map = cpu_map,
    .unmap = cpu_unmap,
    .clear = cpu_clear,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .add = cpu_add,
    .sumsq_chunks = cpu_sumsq_chunks,
    .sizes = &remat__cpu_sizes,
    .dropout_keep = remat__dropout_keep,
    .dropout_apply = remat__dropout_apply,
    .gemm = remat__gemm,
    .gemm_bias = remat__gemm_bias,
    .encoder_forward = remat__encoder_forward,
    .encoder_backward = remat__encoder_backward,
    .encoder_backward_tied = remat__encoder_backward_tied,
    .layernorm_forward = remat__layernorm_forward,
    .layernorm_backward = remat__layernorm_backward,
    .matmul_forward = remat__matmul_forward,
    .matmul_backward = remat__matmul_backward,
    .matmul_forward_gelu = remat__matmul_forward_gelu,
    .matmul_forward_residual = remat__matmul_forward_residual,
    .matmul_backward_gelu = remat__matmul_backward_gelu,
    .attention_forward = remat__attention_forward,
    .attention_backward = remat__attention_backward,
    .attention_decode = remat__attention_decode,
    .attention_forward_gqa = remat__attention_forward_gqa,
    .attention_backward_gqa = remat__attention_backward_gqa,
    .attention_decode_gqa = remat__attention_decode_gqa,
    .attention_forward_gqa_bf16 = remat__attention_forward_gqa_bf16,
    .attention_backward_gqa_bf16 = remat__attention_backward_gqa_bf16,
    .gelu_forward = remat__gelu_forward,
    .gelu_backward = remat__gelu_backward,
    .residual_forward = remat__residual_forward,
    .crossentropy_forward = remat__crossentropy_forward,
    .crossentropy_backward = remat__crossentropy_backward,
    .crossentropy_forward_backward = remat__crossentropy_forward_backward,
    .vocab_encoder_forward = remat__vocab_encoder_forward,
    .vocab_encoder_backward = remat__vocab_encoder_backward,
    .vocab_max = remat__vocab_max,
    .vocab_exp = remat__vocab_exp,
    .vocab_finish = remat__vocab_finish,
    .adamw_update = remat__adamw_update,
    .sumsq = remat__sumsq,
    .init_normal = remat__init_normal,
    .to_bf16 = remat__bf16_from_f32,
    .from_bf16 = remat__bf16_to_f32,
    .layernorm_forward_bf16 = remat__layernorm_forward_bf16,
    .gelu_forward_bf16 = remat__gelu_forward_bf16,
    .gelu_backward_bf16 = remat__gelu_backward_bf16,
    .crossentropy_forward_bf16 = remat__crossentropy_forward_bf16,
    .crossentropy_forward_backward_bf16 = remat__crossentropy_forward_backward_bf16,
    .vocab_max_bf16 = remat__vocab_max_bf16,
    .vocab_exp_bf16 = remat__vocab_exp_bf16,
    .vocab_finish_bf16 = remat__vocab_finish_bf16,
    .products_create = cpu_products_create,
    .products_destroy = cpu_products_destroy,
    .products_scratch = cpu_products_scratch,
    .bf16_matmul_forward = cpu_bf16_matmul_forward,
    .bf16_matmul_backward = cpu_bf16_matmul_backward,
    .attention_forward_bf16 = remat__attention_forward_bf16,
    .attention_backward_bf16 = remat__attention_backward_bf16,
    .adamw_update_fused = remat__adamw_update_fused,
    .rmsnorm_forward = remat__rmsnorm_forward,
    .rmsnorm_forward_bf16 = remat__rmsnorm_forward_bf16,
    .rmsnorm_backward = remat__rmsnorm_backward,
    .swiglu_forward = remat__swiglu_forward,
    .swiglu_forward_bf16 = remat__swiglu_forward_bf16,
    .swiglu_backward = remat__swiglu_backward,
    .swiglu_backward_bf16 = remat__swiglu_backward_bf16,
    .rope_forward = remat__rope_forward,
    .rope_backward = remat__rope_backward,
    .rope_forward_bf16 = remat__rope_forward_bf16,
    .rope_backward_bf16 = remat__rope_backward_bf16,
};

const remat__backend *remat__backend_cpu(void) { return &cpu; }
