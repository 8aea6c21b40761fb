/* backend_guard.c: the guard backend, for the tests. It runs the CPU
 * backend's kernels, but over an arena the host cannot touch: the arena is
 * pages of its own, PROT_NONE except while one of the backend's operations
 * runs (every op opens it on entry and closes it on return) or inside a
 * window map lends for a message in flight. Any other read or write of
 * backend memory (a runtime writing token ids into a slot, a checkpoint read
 * straight into the parameters) faults; the fault handler says which arena
 * and offset, prints the calling frames, with their source lines where
 * addr2line finds them, and lets the fault kill the process. A run that
 * passes under it has crossed between host and backend memory only through
 * the backend's crossings, as a device backend requires, and gives the CPU
 * backend's bits (its kernels are the CPU's, called as they are).
 *
 * One thread calls the ops (the kernels' OpenMP threads run inside them).
 * An op the table gains without a wrapper here runs the CPU's unguarded,
 * and so faults at once on a closed arena: a new op needs its wrapper. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, backtrace */
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/backend.h"

#define MAX_ARENAS 64
#define MAX_WINDOWS 256

static const remat__backend *cpu;

/* The arenas made, and the windows open on them. */
static struct arena {
  char *p;
  size_t bytes, mapped;
} arenas[MAX_ARENAS];
static struct window {
  char *p;
  size_t bytes;
} windows[MAX_WINDOWS];
static int depth; /* ops running (nested ops do not close early) */

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void protect(char *p, size_t bytes, int prot) {
  if (!bytes) return;
  size_t pg = page_size();
  uintptr_t lo = (uintptr_t)p / pg * pg, hi = ((uintptr_t)p + bytes + pg - 1) / pg * pg;
  if (mprotect((void *)lo, hi - lo, prot) != 0) {
    perror("remat: guard backend: mprotect");
    abort();
  }
}

static void close_all(void) {
  for (int i = 0; i < MAX_ARENAS; i++)
    if (arenas[i].p) protect(arenas[i].p, arenas[i].mapped, PROT_NONE);
  for (int i = 0; i < MAX_WINDOWS; i++)
    if (windows[i].p) protect(windows[i].p, windows[i].bytes, PROT_READ | PROT_WRITE);
}

static void enter(void) {
  if (depth++ == 0)
    for (int i = 0; i < MAX_ARENAS; i++)
      if (arenas[i].p) protect(arenas[i].p, arenas[i].mapped, PROT_READ | PROT_WRITE);
}

static void leave(void) {
  if (--depth == 0) close_all();
}

/* ------------------------------------------------------------ the fault */

static struct sigaction previous;

/* The frames as "binary(+offset)" lines, then addr2line's function and
 * line for each where it is installed and the binary has them. */
static void print_frames(void) {
  void *frames[48];
  int n = backtrace(frames, 48);
  backtrace_symbols_fd(frames, n, 2);
  char **sym = backtrace_symbols(frames, n);
  if (!sym) return;
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return;
  exe[len] = '\0';
  char *argv[64] = {"addr2line", "-f", "-C", "-i", "-p", "-e", exe};
  int argc = 7;
  for (int i = 0; i < n && argc < 63; i++) {
    char *plus = strstr(sym[i], "(+0x"), *end = plus ? strchr(plus, ')') : NULL;
    if (!plus || !end || strncmp(sym[i], "/proc", 5) == 0) continue;
    *end = '\0';
    argv[argc++] = plus + 2;
  }
  argv[argc] = NULL;
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(2, 1);
    execvp("addr2line", argv);
    _exit(127);
  }
  if (pid > 0) waitpid(pid, NULL, 0);
}

static void on_fault(int sig, siginfo_t *info, void *uctx) {
  (void)uctx;
  char *at = info->si_addr;
  for (int i = 0; i < MAX_ARENAS; i++)
    if (arenas[i].p && at >= arenas[i].p && at < arenas[i].p + arenas[i].mapped) {
      fprintf(stderr,
              "remat: guard backend: the host touched backend memory outside a backend "
              "operation: arena %d (%zu bytes) at offset %zu\n",
              i, arenas[i].bytes, (size_t)(at - arenas[i].p));
      print_frames();
      break;
    }
  /* Hand the fault on: the previous handler, or the default (the process
   * dies of it, with its core where those are kept). */
  sigaction(sig, &previous, NULL);
}

static void install_handler(void) {
  static int done;
  if (done++) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous);
}

/* ------------------------------------------------------ buffers, windows */

static void *g_buffer_alloc(size_t bytes) {
  int slot = 0;
  while (slot < MAX_ARENAS && arenas[slot].p) slot++;
  if (slot == MAX_ARENAS) return NULL;
  size_t mapped;
  char *p = remat__pages_alloc(bytes, &mapped);
  if (!p) return NULL;
  /* The CPU's poison, so that high_water reads the arena as the CPU's. */
  uint64_t *w = (uint64_t *)(void *)p;
  for (size_t i = 0; i < mapped / sizeof(uint64_t); i++) w[i] = REMAT_ARENA_POISON;
  install_handler();
  arenas[slot] = (struct arena){p, bytes, mapped};
  if (depth == 0) protect(p, mapped, PROT_NONE);
  return p;
}

static void g_buffer_free(void *arena) {
  for (int i = 0; i < MAX_ARENAS; i++)
    if (arenas[i].p == arena) {
      protect(arenas[i].p, arenas[i].mapped, PROT_READ | PROT_WRITE);
      remat__pages_free(arenas[i].p, arenas[i].bytes, arenas[i].mapped);
      arenas[i] = (struct arena){0};
      return;
    }
}

static void g_upload(void *dst, const void *src, size_t bytes) {
  enter();
  cpu->upload(dst, src, bytes);
  leave();
}

static void g_download(void *dst, const void *src, size_t bytes) {
  enter();
  cpu->download(dst, src, bytes);
  leave();
}

/* Whether [p, p + bytes) lies in one of the guard's arenas: a window is
 * lent only there (other memory is the host's already). */
static bool in_arena(const char *p, size_t bytes) {
  for (int i = 0; i < MAX_ARENAS; i++)
    if (arenas[i].p && p >= arenas[i].p && bytes <= arenas[i].mapped &&
        (size_t)(p - arenas[i].p) <= arenas[i].mapped - bytes)
      return true;
  return false;
}

static void *g_map(void *p, size_t bytes, int access) {
  (void)access;
  if (!in_arena(p, bytes)) return p;
  for (int i = 0; i < MAX_WINDOWS; i++)
    if (!windows[i].p) {
      windows[i] = (struct window){p, bytes};
      if (depth == 0) protect(p, bytes, PROT_READ | PROT_WRITE);
      return p;
    }
  fprintf(stderr, "remat: guard backend: more than %d windows open at once\n", MAX_WINDOWS);
  abort();
}

static void g_unmap(void *p, void *host, size_t bytes, int access) {
  (void)host, (void)access;
  if (!in_arena(p, bytes)) return;
  for (int i = 0; i < MAX_WINDOWS; i++)
    if (windows[i].p == p && windows[i].bytes == bytes) {
      windows[i] = (struct window){0};
      if (depth == 0) close_all();
      return;
    }
  fprintf(stderr, "remat: guard backend: unmap of a window not open\n");
  abort();
}

static bool g_dropout_keep(const remat__dropout *d, uint64_t i) { return cpu->dropout_keep(d, i); }

static int g_products_create(void **out, const remat__mm_shape *shapes, int n,
                             remat_error *err) {
  return cpu->products_create(out, shapes, n, err);
}

static void g_products_destroy(void *products) { cpu->products_destroy(products); }

static size_t g_products_scratch(const void *products) { return cpu->products_scratch(products); }

/* ------------------------------------------------------------ the kernels */

static size_t g_high_water(const void *arena, size_t bytes, size_t mark) {
  enter();
  size_t r = cpu->high_water(arena, bytes, mark);
  leave();
  return r;
}

static void g_clear(void *dst, size_t bytes) {
  enter();
  cpu->clear(dst, bytes);
  leave();
}

static void g_copy(void *dst, const void *src, size_t bytes) {
  enter();
  cpu->copy(dst, src, bytes);
  leave();
}

static void g_fill(float *dst, float value, size_t n) {
  enter();
  cpu->fill(dst, value, n);
  leave();
}

static void g_add(float *dst, const float *src, size_t n, int64_t k, size_t stride) {
  enter();
  cpu->add(dst, src, n, k, stride);
  leave();
}

static void g_sumsq_chunks(double *out, const remat__piece *pieces, int npieces, size_t count, size_t q) {
  enter();
  cpu->sumsq_chunks(out, pieces, npieces, count, q);
  leave();
}

static void g_dropout_apply(float *out, const float *inp, size_t n, const remat__dropout *d) {
  enter();
  cpu->dropout_apply(out, inp, n, d);
  leave();
}

static void g_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  enter();
  cpu->gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  leave();
}

static void g_gemm_bias(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc) {
  enter();
  cpu->gemm_bias(M, N, K, A, lda, B, ldb, bias, C, ldc);
  leave();
}

static void g_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int64_t B, int64_t T, int64_t C) {
  enter();
  cpu->encoder_forward(out, tokens, wte, wpe, B, T, C);
  leave();
}

static void g_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t B, int64_t T, int64_t C) {
  enter();
  cpu->encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  leave();
}

static void g_encoder_backward_tied(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t B, int64_t T, int64_t C, int64_t V, void *work) {
  enter();
  cpu->encoder_backward_tied(dwte, dwpe, dout, tokens, B, T, C, V, work);
  leave();
}

static void g_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C) {
  enter();
  cpu->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  leave();
}

static void g_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, const float *mean, const float *rstd, int64_t N, int64_t C) {
  enter();
  cpu->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  leave();
}

static void g_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C, int64_t OC) {
  enter();
  cpu->matmul_forward(out, inp, weight, bias, N, C, OC);
  leave();
}

static void g_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, int64_t N, int64_t C, int64_t OC) {
  enter();
  cpu->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  leave();
}

static void g_matmul_forward_gelu(float *out, float *gelu_out, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C, int64_t OC) {
  enter();
  cpu->matmul_forward_gelu(out, gelu_out, inp, weight, bias, N, C, OC);
  leave();
}

static void g_matmul_forward_residual(float *out, const float *inp, const float *weight, const float *bias, const float *resid, const remat__dropout *drop, int64_t N, int64_t C, int64_t OC) {
  enter();
  cpu->matmul_forward_residual(out, inp, weight, bias, resid, drop, N, C, OC);
  leave();
}

static void g_matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, const float *x, int64_t N, int64_t C, int64_t OC) {
  enter();
  cpu->matmul_backward_gelu(dinp, dweight, dbias, dout, inp, weight, x, N, C, OC);
  leave();
}

static void g_attention_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH, const remat__dropout *drop) {
  enter();
  cpu->attention_forward(out, lse, qkv, B, T, C, NH, drop);
  leave();
}

static void g_attention_backward(float *dqkv, float *delta, const float *dout, const float *qkv, const float *out, const float *lse, int64_t B, int64_t T, int64_t C, int64_t NH, const remat__dropout *drop) {
  enter();
  cpu->attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, drop);
  leave();
}

static void g_attention_forward_gqa(float *out, float *lse, const float *q, const float *k,
                                    const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                                    int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                    const remat__dropout *drop) {
  enter();
  cpu->attention_forward_gqa(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, drop);
  leave();
}

static void g_attention_backward_gqa(float *dq, float *dk, float *dv, float *delta,
                                     const float *dout, const float *q, const float *k,
                                     const float *v, const float *out, const float *lse,
                                     int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                     int64_t NKV, int64_t hs, const remat__dropout *drop) {
  enter();
  cpu->attention_backward_gqa(dq, dk, dv, delta, dout, q, k, v, out, lse, ldq, ldkv, B, T, NH,
                              NKV, hs, drop);
  leave();
}

static void g_attention_decode_gqa(float *out, const float *q, int64_t ldq, const float *k,
                                   const float *v, int64_t ldkv, int64_t n, int64_t pos,
                                   int64_t NH, int64_t NKV, int64_t hs) {
  enter();
  cpu->attention_decode_gqa(out, q, ldq, k, v, ldkv, n, pos, NH, NKV, hs);
  leave();
}

static void g_attention_forward_gqa_bf16(float *out, float *lse, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v, int64_t ldq,
                                         int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                         int64_t NKV, int64_t hs, const remat__dropout *drop,
                                         void *work, size_t work_bytes) {
  enter();
  cpu->attention_forward_gqa_bf16(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, drop, work,
                                  work_bytes);
  leave();
}

static void g_attention_backward_gqa_bf16(float *dq, float *dk, float *dv, float *delta,
                                          const float *dout, const uint16_t *q,
                                          const uint16_t *k, const uint16_t *v,
                                          const uint16_t *out, const float *lse, int64_t ldq,
                                          int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                                          int64_t NKV, int64_t hs, const remat__dropout *drop,
                                          void *work, size_t work_bytes) {
  enter();
  cpu->attention_backward_gqa_bf16(dq, dk, dv, delta, dout, q, k, v, out, lse, ldq, ldkv, B, T,
                                   NH, NKV, hs, drop, work, work_bytes);
  leave();
}

static void g_gelu_forward(float *out, const float *inp, size_t n) {
  enter();
  cpu->gelu_forward(out, inp, n);
  leave();
}

static void g_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  enter();
  cpu->gelu_backward(dinp, inp, dout, n);
  leave();
}

static void g_residual_forward(float *out, const float *a, const float *b, size_t n) {
  enter();
  cpu->residual_forward(out, a, b, n);
  leave();
}

static double g_crossentropy_forward(float *logits, float *losses, const int32_t *targets, int64_t N, int64_t V, int64_t Vp) {
  enter();
  double r = cpu->crossentropy_forward(logits, losses, targets, N, V, Vp);
  leave();
  return r;
}

static void g_crossentropy_backward(float *logits, const int32_t *targets, float dloss, int64_t N, int64_t V, int64_t Vp) {
  enter();
  cpu->crossentropy_backward(logits, targets, dloss, N, V, Vp);
  leave();
}

static double g_crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets, float dloss, int64_t N, int64_t V, int64_t Vp) {
  enter();
  double r = cpu->crossentropy_forward_backward(logits, losses, targets, dloss, N, V, Vp);
  leave();
  return r;
}

static void g_vocab_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int64_t first, int64_t rows, int64_t B, int64_t T, int64_t C) {
  enter();
  cpu->vocab_encoder_forward(out, tokens, wte, wpe, first, rows, B, T, C);
  leave();
}

static void g_vocab_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t first, int64_t rows, int64_t B, int64_t T, int64_t C) {
  enter();
  cpu->vocab_encoder_backward(dwte, dwpe, dout, tokens, first, rows, B, T, C);
  leave();
}

static void g_vocab_max(float *mx, const float *logits, int64_t N, int64_t V, int64_t Vl) {
  enter();
  cpu->vocab_max(mx, logits, N, V, Vl);
  leave();
}

static void g_vocab_exp(float *logits, double *stats, const float *mx, const int32_t *targets, int64_t first, int64_t N, int64_t V, int64_t Vl) {
  enter();
  cpu->vocab_exp(logits, stats, mx, targets, first, N, V, Vl);
  leave();
}

static double g_vocab_finish(float *logits, float *losses, const double *stats, const int32_t *targets, float dloss, int64_t first, int64_t N, int64_t V, int64_t Vl, int backward) {
  enter();
  double r = cpu->vocab_finish(logits, losses, stats, targets, dloss, first, N, V, Vl, backward);
  leave();
  return r;
}

static void g_vocab_max_bf16(float *mx, const uint16_t *logits, int64_t N, int64_t V, int64_t Vl) {
  enter();
  cpu->vocab_max_bf16(mx, logits, N, V, Vl);
  leave();
}

static void g_vocab_exp_bf16(const uint16_t *logits, double *stats, const float *mx, const int32_t *targets, int64_t first, int64_t N, int64_t V, int64_t Vl) {
  enter();
  cpu->vocab_exp_bf16(logits, stats, mx, targets, first, N, V, Vl);
  leave();
}

static double g_vocab_finish_bf16(uint16_t *logits, float *losses, const double *stats, const float *mx, const int32_t *targets, float dloss, int64_t first, int64_t N, int64_t V, int64_t Vl, int backward) {
  enter();
  double r = cpu->vocab_finish_bf16(logits, losses, stats, mx, targets, dloss, first, N, V, Vl, backward);
  leave();
  return r;
}

static void g_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, const remat__adamw *opt, float weight_decay, float grad_scale) {
  enter();
  cpu->adamw_update(param, grad, m, v, n, opt, weight_decay, grad_scale);
  leave();
}

static double g_sumsq(const float *x, size_t n) {
  enter();
  double r = cpu->sumsq(x, n);
  leave();
  return r;
}

static void g_init_normal(float *x, size_t first, size_t n, float std, uint64_t seed, uint32_t tensor) {
  enter();
  cpu->init_normal(x, first, n, std, seed, tensor);
  leave();
}

static void g_to_bf16(uint16_t *dst, const float *src, size_t n) {
  enter();
  cpu->to_bf16(dst, src, n);
  leave();
}

static void g_from_bf16(float *dst, const uint16_t *src, size_t n) {
  enter();
  cpu->from_bf16(dst, src, n);
  leave();
}

static void g_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int64_t N, int64_t C) {
  enter();
  cpu->layernorm_forward_bf16(out, mean, rstd, inp, weight, bias, N, C);
  leave();
}

static void g_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n) {
  enter();
  cpu->gelu_forward_bf16(out, inp, n);
  leave();
}

static void g_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n) {
  enter();
  cpu->gelu_backward_bf16(dinp, inp, dout, n);
  leave();
}

static double g_crossentropy_forward_bf16(uint16_t *logits, float *losses, const int32_t *targets, int64_t N, int64_t V, int64_t Vp) {
  enter();
  double r = cpu->crossentropy_forward_bf16(logits, losses, targets, N, V, Vp);
  leave();
  return r;
}

static double g_crossentropy_forward_backward_bf16(uint16_t *logits, float *losses, const int32_t *targets, float dloss, int64_t N, int64_t V, int64_t Vp) {
  enter();
  double r = cpu->crossentropy_forward_backward_bf16(logits, losses, targets, dloss, N, V, Vp);
  leave();
  return r;
}

static void g_bf16_matmul_forward(void *products, void *out, const uint16_t *inp, const uint16_t *weight, const float *bias, int64_t N, int64_t C, int64_t OC, bool out_bf16, void *scratch) {
  enter();
  cpu->bf16_matmul_forward(products, out, inp, weight, bias, N, C, OC, out_bf16, scratch);
  leave();
}

static void g_bf16_matmul_backward(void *products, void *dinp, float *dweight, float *dbias, const uint16_t *dout, const uint16_t *inp, const uint16_t *weight, int64_t N, int64_t C, int64_t OC, bool dinp_bf16, void *scratch) {
  enter();
  cpu->bf16_matmul_backward(products, dinp, dweight, dbias, dout, inp, weight, N, C, OC, dinp_bf16, scratch);
  leave();
}

static void g_attention_decode(float *out, const float *q, int64_t ldq, const float *k,
                               const float *v, int64_t ldkv, int64_t n, int64_t pos, int64_t C,
                               int64_t NH) {
  enter();
  cpu->attention_decode(out, q, ldq, k, v, ldkv, n, pos, C, NH);
  leave();
}

static void g_attention_forward_bf16(float *out, float *lse, const uint16_t *qkv, int64_t B,
                                     int64_t T, int64_t C, int64_t NH, const remat__dropout *drop,
                                     void *work, size_t work_bytes) {
  enter();
  cpu->attention_forward_bf16(out, lse, qkv, B, T, C, NH, drop, work, work_bytes);
  leave();
}

static void g_attention_backward_bf16(float *dqkv, float *delta, const float *dout,
                                      const uint16_t *qkv, const uint16_t *out, const float *lse,
                                      int64_t B, int64_t T, int64_t C, int64_t NH,
                                      const remat__dropout *drop, void *work, size_t work_bytes) {
  enter();
  cpu->attention_backward_bf16(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, drop, work,
                               work_bytes);
  leave();
}

static void g_adamw_update_fused(float *param, float *grad, float *m, float *v,
                                 uint16_t *param_bf16, size_t n, const remat__adamw *opt,
                                 float weight_decay, float grad_scale) {
  enter();
  cpu->adamw_update_fused(param, grad, m, v, param_bf16, n, opt, weight_decay, grad_scale);
  leave();
}

static void g_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                              int64_t N, int64_t C, float eps) {
  enter();
  cpu->rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  leave();
}

static void g_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp,
                                   const float *weight, int64_t N, int64_t C, float eps) {
  enter();
  cpu->rmsnorm_forward_bf16(out, rstd, inp, weight, N, C, eps);
  leave();
}

static void g_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                               const float *weight, const float *rstd, int64_t N, int64_t C) {
  enter();
  cpu->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  leave();
}

static void g_swiglu_forward(float *out, const float *a, const float *b, size_t n) {
  enter();
  cpu->swiglu_forward(out, a, b, n);
  leave();
}

static void g_swiglu_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b,
                                  size_t n) {
  enter();
  cpu->swiglu_forward_bf16(out, a, b, n);
  leave();
}

static void g_swiglu_backward(float *da, float *db, const float *a, const float *b,
                              const float *dout, size_t n) {
  enter();
  cpu->swiglu_backward(da, db, a, b, dout, n);
  leave();
}

static void g_swiglu_backward_bf16(uint16_t *da, uint16_t *db, const uint16_t *a,
                                   const uint16_t *b, const float *dout, size_t n) {
  enter();
  cpu->swiglu_backward_bf16(da, db, a, b, dout, n);
  leave();
}

static void g_rope_forward(float *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                           int64_t hs, int64_t pos0, double theta) {
  enter();
  cpu->rope_forward(x, ld, B, T, nheads, hs, pos0, theta);
  leave();
}

static void g_rope_backward(float *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                            int64_t hs, int64_t pos0, double theta) {
  enter();
  cpu->rope_backward(dx, ld, B, T, nheads, hs, pos0, theta);
  leave();
}

static void g_rope_forward_bf16(uint16_t *x, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                                int64_t hs, int64_t pos0, double theta) {
  enter();
  cpu->rope_forward_bf16(x, ld, B, T, nheads, hs, pos0, theta);
  leave();
}

static void g_rope_backward_bf16(uint16_t *dx, int64_t ld, int64_t B, int64_t T, int64_t nheads,
                                 int64_t hs, int64_t pos0, double theta) {
  enter();
  cpu->rope_backward_bf16(dx, ld, B, T, nheads, hs, pos0, theta);
  leave();
}

/* ------------------------------------------------------------ the table */

static remat__backend guard;

const remat__backend *remat__backend_guard(void) {
  if (cpu) return &guard;
  cpu = remat__backend_cpu();
  guard = *cpu;
  guard.name = "guard";
  guard.buffer_alloc = g_buffer_alloc;
  guard.buffer_free = g_buffer_free;
  guard.upload = g_upload;
  guard.download = g_download;
  guard.map = g_map;
  guard.unmap = g_unmap;
  guard.dropout_keep = g_dropout_keep;
  guard.products_create = g_products_create;
  guard.products_destroy = g_products_destroy;
  guard.products_scratch = g_products_scratch;
  guard.high_water = g_high_water;
  guard.clear = g_clear;
  guard.copy = g_copy;
  guard.fill = g_fill;
  guard.add = g_add;
  guard.sumsq_chunks = g_sumsq_chunks;
  guard.dropout_apply = g_dropout_apply;
  guard.gemm = g_gemm;
  guard.gemm_bias = g_gemm_bias;
  guard.encoder_forward = g_encoder_forward;
  guard.encoder_backward = g_encoder_backward;
  guard.encoder_backward_tied = g_encoder_backward_tied;
  guard.layernorm_forward = g_layernorm_forward;
  guard.layernorm_backward = g_layernorm_backward;
  guard.matmul_forward = g_matmul_forward;
  guard.matmul_backward = g_matmul_backward;
  guard.matmul_forward_gelu = g_matmul_forward_gelu;
  guard.matmul_forward_residual = g_matmul_forward_residual;
  guard.matmul_backward_gelu = g_matmul_backward_gelu;
  guard.attention_forward = g_attention_forward;
  guard.attention_backward = g_attention_backward;
  /* the grouped-query ops, where the CPU's are (always, today) */
  if (cpu->attention_forward_gqa) guard.attention_forward_gqa = g_attention_forward_gqa;
  if (cpu->attention_backward_gqa) guard.attention_backward_gqa = g_attention_backward_gqa;
  if (cpu->attention_decode_gqa) guard.attention_decode_gqa = g_attention_decode_gqa;
  if (cpu->attention_forward_gqa_bf16)
    guard.attention_forward_gqa_bf16 = g_attention_forward_gqa_bf16;
  if (cpu->attention_backward_gqa_bf16)
    guard.attention_backward_gqa_bf16 = g_attention_backward_gqa_bf16;
  guard.gelu_forward = g_gelu_forward;
  guard.gelu_backward = g_gelu_backward;
  guard.residual_forward = g_residual_forward;
  guard.crossentropy_forward = g_crossentropy_forward;
  guard.crossentropy_backward = g_crossentropy_backward;
  guard.crossentropy_forward_backward = g_crossentropy_forward_backward;
  guard.vocab_encoder_forward = g_vocab_encoder_forward;
  guard.vocab_encoder_backward = g_vocab_encoder_backward;
  guard.vocab_max = g_vocab_max;
  guard.vocab_exp = g_vocab_exp;
  guard.vocab_finish = g_vocab_finish;
  guard.vocab_max_bf16 = g_vocab_max_bf16;
  guard.vocab_exp_bf16 = g_vocab_exp_bf16;
  guard.vocab_finish_bf16 = g_vocab_finish_bf16;
  guard.adamw_update = g_adamw_update;
  guard.sumsq = g_sumsq;
  guard.init_normal = g_init_normal;
  guard.to_bf16 = g_to_bf16;
  guard.from_bf16 = g_from_bf16;
  guard.layernorm_forward_bf16 = g_layernorm_forward_bf16;
  guard.gelu_forward_bf16 = g_gelu_forward_bf16;
  guard.gelu_backward_bf16 = g_gelu_backward_bf16;
  guard.crossentropy_forward_bf16 = g_crossentropy_forward_bf16;
  guard.crossentropy_forward_backward_bf16 = g_crossentropy_forward_backward_bf16;
  guard.bf16_matmul_forward = g_bf16_matmul_forward;
  guard.bf16_matmul_backward = g_bf16_matmul_backward;
  /* optional ops stay NULL where the CPU's are */
  if (cpu->attention_decode) guard.attention_decode = g_attention_decode;
  if (cpu->attention_forward_bf16) guard.attention_forward_bf16 = g_attention_forward_bf16;
  if (cpu->attention_backward_bf16) guard.attention_backward_bf16 = g_attention_backward_bf16;
  if (cpu->adamw_update_fused) guard.adamw_update_fused = g_adamw_update_fused;
  guard.rmsnorm_forward = g_rmsnorm_forward;
  guard.rmsnorm_forward_bf16 = g_rmsnorm_forward_bf16;
  guard.rmsnorm_backward = g_rmsnorm_backward;
  guard.swiglu_forward = g_swiglu_forward;
  guard.swiglu_forward_bf16 = g_swiglu_forward_bf16;
  guard.swiglu_backward = g_swiglu_backward;
  guard.swiglu_backward_bf16 = g_swiglu_backward_bf16;
  guard.rope_forward = g_rope_forward;
  guard.rope_backward = g_rope_backward;
  guard.rope_forward_bf16 = g_rope_forward_bf16;
  guard.rope_backward_bf16 = g_rope_backward_bf16;
  return &guard;
}
