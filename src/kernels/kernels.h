/* kernels.h: forward and backward of every GPT-2 layer on the CPU and of the
 * Llama family's own (RMSNorm, SwiGLU, rotary embedding), the AdamW
 * update and the dropout generator. Matrix products go through OpenBLAS
 * sgemm, loops through OpenMP. These are the CPU backend's kernels
 * (backend_cpu.c puts them in the ops table of kernels/backend.h); the model
 * calls them only through that table, and their comments here are the
 * contract every backend's op of the same name meets.
 *
 * Conventions, for every kernel here:
 * - Shapes in comments are row-major; N = B*T rows of activations.
 * - Parameter gradients (dw, db, dwte, ...) ACCUMULATE (+=): gradient
 *   accumulation over micro-batches and the tied embedding rely on it.
 * - Activation gradients OVERWRITE (=) their output, except where a comment
 *   says "accumulates" (the residual stream's gradient).
 * - Every kernel is deterministic: the same inputs and thread count give the
 *   same bits, run after run. This is what makes a recomputed forward equal
 *   to the original one bit for bit. No kernel allocates memory.
 * - Numerics follow PyTorch: nn.LayerNorm (biased variance, eps inside the
 *   square root), F.gelu(approximate='tanh'), F.cross_entropy (mean over
 *   tokens), torch.optim.AdamW.
 */
#ifndef REMAT_KERNELS_H
#define REMAT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h" /* the argument types */

/* ------------------------------------------------------------- dropout */

/* The mask's definition is in kernels/backend.h (remat__dropout). */

/* 1 if element i is kept. */
bool remat__dropout_keep(const remat__dropout *d, uint64_t i);

/* out[i] = inp[i] * keep(i) / (1 - p) for i < n; in place allowed (out == inp).
 * With d == NULL or d->p == 0 it copies (or does nothing in place). The
 * backward of dropout is the same function applied to the gradient. */
void remat__dropout_apply(float *out, const float *inp, size_t n, const remat__dropout *d);

/* ------------------------------------------------------------- layers */

/* One product C (M,N) = alpha op(A) op(B) + beta C, row-major, as the team
 * computes it: each thread owns a slab of C (a fixed function of the shape
 * and the team size) and calls single-threaded OpenBLAS on it (no heap
 * allocation). With bias (N), the thread first writes bias into every row of
 * its slab and the product adds onto it (beta 1). Then, if epilogue is set,
 * the thread calls it on its slab, rows [r0, r1) by columns [c0, c1) of C,
 * while the slab is still in its cache. */
typedef void (*remat__slab_fn)(void *ctx, float *C, int64_t ldc, int64_t r0, int64_t r1,
                               int64_t c0, int64_t c1);
typedef struct remat__gemm_op {
  int trans_a, trans_b;
  int64_t M, N, K;
  float alpha, beta;
  const float *A, *B;
  int64_t lda, ldb, ldc;
  float *C;
  const float *bias;       /* (N) or NULL */
  remat__slab_fn epilogue; /* or NULL */
  void *ctx;
} remat__gemm_op;
/* remat__gemm_slab and remat__gemm_run are how the CPU team splits a product
 * among its threads (the fused kernels and report/peak.c use them); they are
 * not ops of the backend table, whose products are remat__gemm and
 * remat__gemm_bias and the matmul kernels. */
/* Thread t of a team of nt, inside a parallel region: its slab of op. Slabs
 * of several products can share one region (no barrier between them when
 * their outputs are independent). */
void remat__gemm_slab(int t, int nt, const remat__gemm_op *op);
/* The whole product, in a parallel region of its own. */
void remat__gemm_run(const remat__gemm_op *op);

/* Row-major C (M,N) = alpha op(A) op(B) + beta C, split across the OpenMP
 * team with single-threaded OpenBLAS per slab (no heap allocation). Call it
 * outside parallel regions; inside one, call cblas_sgemm directly. */
void remat__gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);
/* Row-major C (M,N) = A (M,K) @ B (N,K)^T + bias (N) added to every row,
 * the bias written into each thread's slab inside the same parallel region
 * (the same arithmetic as filling C with the bias and calling remat__gemm
 * with beta 1). */
void remat__gemm_bias(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc);

/* out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]; with wpe NULL (a model
 * without learned positions, the Llama family) out[b,t,:] = wte[tokens[b,t], :].
 * In the encoder's backwards, dwpe NULL likewise skips the positions'
 * gradient; dwte's bits are the same either way. */
void remat__encoder_forward(float *out, const int32_t *tokens, const float *wte,
                            const float *wpe, int64_t B, int64_t T, int64_t C);
/* dwte, dwpe accumulate (dwpe may be NULL). */
void remat__encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int64_t B, int64_t T, int64_t C);
/* The embedding's gradient onto dwte (V rows) that holds the head's share of
 * the tied matrix, h: row v becomes h[v] + e[v], where e[v] is the
 * embedding's own sum for token v, from zero in (b, t) order, and rows of
 * tokens not in the batch become h[v] + 0. These are the bits of summing the
 * two apart and adding them (a pipeline, or a model that accumulates), since
 * a float addition is commutative, without a second V x C buffer. dwpe
 * accumulates as in remat__encoder_backward. work holds B*T*C floats and
 * V + B*T int32 (the CPU sizes' encoder_tied, products/sizes_cpu.c). */
void remat__encoder_backward_tied(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, int64_t B, int64_t T, int64_t C,
                                  int64_t V, void *work);

/* out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C). */
void remat__layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int64_t N, int64_t C);
/* dinp ACCUMULATES (it is the residual stream's gradient); dweight, dbias
 * accumulate. Either part may be skipped: dinp NULL, or dweight and dbias
 * both NULL (a zero-bubble schedule's B and W run them apart; each part's
 * bits are the same as together). */
void remat__layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int64_t N, int64_t C);

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL. */
void remat__matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int64_t N, int64_t C, int64_t OC);
/* dinp (N,C) overwritten (skipped if NULL); dweight (OC,C) and dbias (OC)
 * accumulate (each skipped if NULL). The three are one parallel region; each
 * output's bits do not depend on which others are computed. */
void remat__matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int64_t N, int64_t C,
                            int64_t OC);

/* Fused layers: the same arithmetic, element for element, as the unfused
 * calls named beside each (so the same bits), in one parallel region with
 * the pointwise part done on each product slab while it is in cache. */
/* out = inp @ weight^T + bias, then gelu_out = gelu(out):
 * remat__matmul_forward then remat__gelu_forward. out (N,OC) and gelu_out
 * overwritten; neither may alias inp. */
void remat__matmul_forward_gelu(float *out, float *gelu_out, const float *inp,
                                const float *weight, const float *bias, int64_t N, int64_t C,
                                int64_t OC);
/* out = resid + dropout(inp @ weight^T + bias): remat__matmul_forward,
 * remat__dropout_apply in place (index n*OC + o; drop may be NULL) and
 * remat__residual_forward(out, out, resid). out (N,OC) overwritten; it may
 * alias neither inp nor resid. */
void remat__matmul_forward_residual(float *out, const float *inp, const float *weight,
                                    const float *bias, const float *resid,
                                    const remat__dropout *drop, int64_t N, int64_t C, int64_t OC);
/* remat__matmul_backward, then dinp = gelu'(x) * dinp (remat__gelu_backward
 * in place): the gradient into the GELU's input x (N,C) through it. */
void remat__matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *x,
                                 int64_t N, int64_t C, int64_t OC);

/* Causal self-attention. qkv (B,T,3C) holds q, k, v side by side; head h uses
 * channels [h*hs, (h+1)*hs) of each, hs = C/NH, scale 1/sqrt(hs). With
 * P = softmax of the scaled causal scores (row t has entries 0..t):
 * out (B,T,C) = dropout(P) @ v, heads side by side, and lse (B,NH,T) the
 * log-sum-exp of each row's scaled scores; both overwritten. P is never
 * stored, nor any T x T buffer: the kernel works in fixed-size tiles on the
 * thread's stack. drop may be NULL (no dropout); element (t, t') of pair
 * (b, h) has dropout index ((b*NH + h)*T + t)*T + t'. */
void remat__attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                              int64_t C, int64_t NH, const remat__dropout *drop);
/* Causal attention of n new rows at positions pos .. pos + n - 1 over a
 * cache of keys and values (generation's decode): q (n rows, ldq floats
 * apart), k and v (pos + n rows each, ldkv floats apart, the new rows' own
 * keys and values already at positions pos ..); head h uses channels
 * [h*hs, (h+1)*hs) of each, scale 1/sqrt(hs). Row r attends to positions
 * 0 .. pos + r. out (n, C) overwritten; no dropout, no lse, no T x T
 * buffer. Its arithmetic is remat__attention_forward's for the same rows
 * (key tiles left to right, online softmax): the n rows of a sequence from
 * pos 0 in one call give that forward's output of B = 1, T = n, bit for
 * bit, whatever the thread count. */
void remat__attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                             const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                             int64_t NH);
/* From the forward's out and lse: dqkv (B,T,3C) overwritten; delta (B,NH,T)
 * is scratch the kernel fills with rowsum(dout * out) per row and head. */
void remat__attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv,
                               const float *out, const float *lse, int64_t B, int64_t T,
                               int64_t C, int64_t NH, const remat__dropout *drop);
/* The same on bf16 operands, on a CPU with AVX512-BF16 and an even head
 * size (where the CPU sizes give attention_work): qkv (B,T,3C) and, in the
 * backward, out (B,T,C) in bf16; dout, lse, delta, and the outputs out and
 * dqkv in fp32, overwritten as above. The tiles' products run in bf16 with
 * fp32 sums, the softmax in fp32. work: work_bytes (products/sizes.h's
 * attention_work), one remat__att16_tiles piece per thread; fewer pieces
 * than threads run on fewer threads, with the same bits. */
void remat__attention_forward_bf16(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, const remat__dropout *drop,
                                   void *work, size_t work_bytes);
void remat__attention_backward_bf16(float *dqkv, float *delta, const float *dout,
                                    const uint16_t *qkv, const uint16_t *out, const float *lse,
                                    int64_t B, int64_t T, int64_t C, int64_t NH,
                                    const remat__dropout *drop, void *work, size_t work_bytes);

/* Grouped-query attention (the Llama family), the general form of the
 * kernels above, which call it with q = qkv, k = qkv + C, v = qkv + 2C,
 * ldq = ldkv = 3C, NKV = NH, hs = C/NH (and so give the same bits). NH
 * query heads over NKV key/value heads (NKV divides NH): query head h reads
 * kv head h / (NH/NKV). q, k and v are separate: row (b, t) of q at
 * q + (b*T + t)*ldq holds NH heads of hs floats side by side (ldq >= NH*hs);
 * of k and of v at + (b*T + t)*ldkv, NKV heads (ldkv >= NKV*hs). Scale
 * 1/sqrt(hs). out (B,T,NH*hs) and lse (B,NH,T) as above, overwritten;
 * dropout index ((b*NH + h)*T + t)*T + t' over the query heads. */
void remat__attention_forward_gqa(float *out, float *lse, const float *q, const float *k,
                                  const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                                  int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                  const remat__dropout *drop);
/* dq (rows ldq apart, NH heads), dk and dv (rows ldkv apart, NKV heads)
 * OVERWRITTEN (the columns past the heads untouched; they may be parts of
 * one buffer, as dqkv is); delta (B,NH,T) scratch as above. dk and dv of a
 * kv head sum its NH/NKV query heads in head order, whatever the thread
 * count: the same bits at any count (no atomics). */
void remat__attention_backward_gqa(float *dq, float *dk, float *dv, float *delta,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse,
                                   int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                   int64_t NKV, int64_t hs, const remat__dropout *drop);
/* remat__attention_decode with NKV kv heads in the cache's rows (ldkv >=
 * NKV*hs) and NH query heads in q's (ldq >= NH*hs); out (n, NH*hs)
 * overwritten. Its arithmetic is remat__attention_forward_gqa's for the
 * same rows: all n rows of a sequence from pos 0 give that forward's
 * output of B = 1, T = n, bit for bit, whatever the thread count. */
void remat__attention_decode_gqa(float *out, const float *q, int64_t ldq, const float *k,
                                 const float *v, int64_t ldkv, int64_t n, int64_t pos,
                                 int64_t NH, int64_t NKV, int64_t hs);
/* The two on bf16 operands (q, k, v, and the backward's out, in bf16; hs
 * even; AVX512-BF16), as remat__attention_forward_bf16 and _backward_bf16:
 * work is work_bytes of the sizes' attention_work for width NH*hs and NH
 * heads (a piece per thread depends on hs only). */
void remat__attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v, int64_t ldq,
                                       int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                       int64_t NKV, int64_t hs, const remat__dropout *drop,
                                       void *work, size_t work_bytes);
void remat__attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                        const float *dout, const uint16_t *q, const uint16_t *k,
                                        const uint16_t *v, const uint16_t *out, const float *lse,
                                        int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                                        int64_t NH, int64_t NKV, int64_t hs,
                                        const remat__dropout *drop, void *work,
                                        size_t work_bytes);

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), n elements. */
void remat__gelu_forward(float *out, const float *inp, size_t n);
/* dinp = gelu'(inp) * dout; dinp may equal dout (in place). */
void remat__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b, n elements; out may alias a or b. */
void remat__residual_forward(float *out, const float *a, const float *b, size_t n);

/* ------------------------------------------------------------- llama */

/* The layers of the Llama family that GPT-2 has not (kernels/llama.c), in
 * fp32 and on bf16 operands. A bf16 variant computes in fp32 on the
 * widened inputs exactly as the fp32 kernel does and rounds each bf16
 * output once (remat__bf16_round): its outputs are the fp32 kernel's,
 * rounded. */

/* RMSNorm (Llama's, torch: x * rsqrt(mean(x^2) + eps) * weight):
 * out (N,C) = inp * rstd * weight (C), rstd (N) = 1 / sqrt(mean over the
 * row of inp^2 + eps), the mean in double and rstd rounded to float once
 * (as layernorm's statistics). out and rstd overwritten; rstd is what the
 * backward reads. The bf16 variant: the same rstd, out rounded to bf16. */
void remat__rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                            int64_t N, int64_t C, float eps);
void remat__rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp,
                                 const float *weight, int64_t N, int64_t C, float eps);
/* As remat__layernorm_backward: dinp ACCUMULATES (it is the residual
 * stream's gradient), dweight accumulates, summed over rows in row order
 * whatever the thread count (the same bits at any count). Either part may
 * be skipped (dinp NULL, or dweight NULL); each part's bits are the same as
 * together. */
void remat__rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int64_t N, int64_t C);

/* SwiGLU's gate, n elements: out = silu(a) * b, silu(x) = x / (1 + exp(-x))
 * (exp as vec_math.h's remat__exp, its argument capped at 80). out
 * overwritten; it may alias a or b. */
void remat__swiglu_forward(float *out, const float *a, const float *b, size_t n);
void remat__swiglu_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
/* da = dout * b * silu'(a), db = dout * silu(a) (the forward's silu(a), bit
 * for bit); both OVERWRITTEN; neither may alias an input or the other. The
 * bf16 variant takes bf16 a, b and fp32 dout, and rounds da, db to bf16
 * (as remat__gelu_backward_bf16). */
void remat__swiglu_backward(float *da, float *db, const float *a, const float *b,
                            const float *dout, size_t n);
void remat__swiglu_backward_bf16(uint16_t *da, uint16_t *db, const uint16_t *a,
                                 const uint16_t *b, const float *dout, size_t n);

/* Rotary position embedding on adjacent pairs (llama2.c's run.c, Meta's
 * reference), IN PLACE on the rows of a (B, T) batch, row (b, t) at
 * x + (b*T + t) * ld (ld elements apart, ld >= nheads * hs), each holding
 * nheads heads of hs (even) values side by side; row t has position
 * pos0 + t. For head h and pair i < hs/2 (elements 2i, 2i + 1 of the head),
 * angle = pos * theta^(-2i/hs):
 *   (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos).
 * The angle, cos and sin are computed in double and cos, sin rounded to
 * float once (accurate at any position; llama2.c's float angle is not),
 * the rotation in float; the values depend only on (pos, i), so a row's
 * bits do not depend on pos0 and T apart from its position, nor on the
 * thread count. No table is kept between calls: each thread computes the
 * cos and sin of the positions it rotates into a table on its stack. */
void remat__rope_forward(float *x, int64_t ld, int64_t B, int64_t T, int64_t nheads, int64_t hs,
                         int64_t pos0, double theta);
/* The transpose, for the gradient dx in place: rotates by -angle. */
void remat__rope_backward(float *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                          int64_t hs, int64_t pos0, double theta);
/* The same on bf16 rows: widened, rotated in fp32, rounded to bf16. */
void remat__rope_forward_bf16(uint16_t *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                              int64_t hs, int64_t pos0, double theta);
void remat__rope_backward_bf16(uint16_t *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                               int64_t hs, int64_t pos0, double theta);

/* Softmax cross-entropy over the first V of Vp logits per row.
 * logits (N,Vp) is overwritten with the probabilities (columns >= V set to 0).
 * losses (N) = -log p[target]. Returns the sum of losses, accumulated in
 * double. targets are in [0, V). */
double remat__crossentropy_forward(float *logits, float *losses, const int32_t *targets,
                                   int64_t N, int64_t V, int64_t Vp);
/* From the probabilities left by the forward: logits (N,Vp) becomes
 * dlogits = (probs - onehot(target)) * dloss, in place; columns >= V become 0. */
void remat__crossentropy_backward(float *logits, const int32_t *targets, float dloss, int64_t N,
                                  int64_t V, int64_t Vp);
/* Both in one pass over the logits: the forward's losses and return value,
 * and logits left holding the backward's dlogits, bit for bit. */
double remat__crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets,
                                            float dloss, int64_t N, int64_t V, int64_t Vp);

/* The vocabulary split across tensor ranks (Megatron-LM's
 * vocabulary-parallel embedding and cross-entropy): a rank holds rows
 * [first, first + rows) of the token matrix. The encoder writes the rows
 * of the tokens it holds, zero for the others, plus wpe where given (one
 * rank gives it), so the ranks' outputs sum to the whole embedding's; its
 * backward adds into the rows it holds, and into dwpe where given. The
 * loss over logits (N, Vl), the rank's columns, of which the first V are
 * real tokens: vocab_max each row's largest (max over the ranks, then);
 * vocab_exp x = exp(x - max) in place (columns >= V zero) and stats per
 * row (the sum of the exponentials as crossentropy sums them, and
 * x[target] - max where the rank holds the target, else 0; summed over the
 * ranks, then); vocab_finish the probabilities, or with backward their
 * gradient as crossentropy's, and losses = log(sum) - (x[target] - max);
 * returns their sum in row order. */
void remat__vocab_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                  const float *wpe, int64_t first, int64_t rows, int64_t B,
                                  int64_t T, int64_t C);
void remat__vocab_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int64_t first, int64_t rows,
                                   int64_t B, int64_t T, int64_t C);
void remat__vocab_max(float *mx, const float *logits, int64_t N, int64_t V, int64_t Vl);
void remat__vocab_exp(float *logits, double *stats, const float *mx, const int32_t *targets,
                      int64_t first, int64_t N, int64_t V, int64_t Vl);
double remat__vocab_finish(float *logits, float *losses, const double *stats,
                           const int32_t *targets, float dloss, int64_t first, int64_t N,
                           int64_t V, int64_t Vl, int backward);

/* ------------------------------------------------------------- optimizer */

/* AdamW as kernels/backend.h defines it (remat__adamw). */
void remat__adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                         const remat__adamw *opt, float weight_decay, float grad_scale);
/* The same update, then param_bf16[i] = param[i] rounded to bf16 (as
 * remat__bf16_from_f32 rounds; skipped when NULL) and grad[i] = 0, in one
 * sweep: param, m and v get remat__adamw_update's bits. */
void remat__adamw_update_fused(float *param, float *grad, float *m, float *v,
                               uint16_t *param_bf16, size_t n, const remat__adamw *opt,
                               float weight_decay, float grad_scale);

/* Sum of squares of n floats, accumulated in double, deterministic. */
double remat__sumsq(const float *x, size_t n);

/* GPT-2 initialisation of one tensor: normal(0, std) from Philox keyed by
 * (seed, tensor index); deterministic and independent of thread count. */
void remat__init_normal(float *x, size_t first, size_t n, float std, uint64_t seed,
                        uint32_t tensor);

#endif
