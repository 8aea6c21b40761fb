/* test_noalloc.c: a trainer's step makes no heap allocation, the arena's
 * measured high-water mark equals the planned arena, and the library holds
 * exactly the planned bytes. malloc and friends are
 * interposed here to count every call the process makes, from any library.
 *
 * In bf16 (where the CPU can) remat allocates nothing either, but oneDNN's
 * execution of a primitive does: a few small bookkeeping objects per call
 * (its argument map and execution context), freed before the call returns.
 * There the check is that every byte allocated during the steps is freed
 * by their end, and that no allocation is larger than 4 KiB: no buffer
 * escapes the plan. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "test_util.h"

static atomic_long n_alloc, live_bytes, largest, outside_dnnl;
static atomic_int counting, blame; /* blame: find each allocation's library */

/* Under AddressSanitizer, malloc belongs to the sanitizer: the count is then
 * skipped and only the library's own counter is checked. */
#if defined(__SANITIZE_ADDRESS__)
#define COUNT_MALLOC 0
#else
#define COUNT_MALLOC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static _Thread_local int in_hook;

/* Whether one of the calls below this one is in oneDNN's library. */
static int from_dnnl(void) {
  void *frames[16];
  int n = backtrace(frames, 16);
  for (int i = 2; i < n; i++) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname && strstr(info.dli_fname, "libdnnl"))
      return 1;
  }
  return 0;
}

/* While counting: one more allocation of p's usable size. */
static void *counted(void *p, size_t n) {
  if (p && atomic_load(&counting) && !in_hook) {
    in_hook = 1;
    if (atomic_load(&blame) && !from_dnnl()) atomic_fetch_add(&outside_dnnl, 1);
    in_hook = 0;
    atomic_fetch_add(&n_alloc, 1);
    atomic_fetch_add(&live_bytes, (long)malloc_usable_size(p));
    long big = atomic_load(&largest);
    while ((long)n > big && !atomic_compare_exchange_weak(&largest, &big, (long)n)) {
    }
  }
  return p;
}
void *malloc(size_t n) { return counted(__libc_malloc(n), n); }
void *calloc(size_t a, size_t b) { return counted(__libc_calloc(a, b), a * b); }
void *realloc(void *p, size_t n) {
  if (p && atomic_load(&counting)) atomic_fetch_sub(&live_bytes, (long)malloc_usable_size(p));
  return counted(__libc_realloc(p, n), n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  void *p = counted(__libc_memalign(align, n), n);
  if (!p) return 12;
  *out = p;
  return 0;
}
void *aligned_alloc(size_t align, size_t n) { return counted(__libc_memalign(align, n), n); }
void *memalign(size_t align, size_t n) { return counted(__libc_memalign(align, n), n); }
void free(void *p) {
  if (p && atomic_load(&counting)) atomic_fetch_sub(&live_bytes, (long)malloc_usable_size(p));
  __libc_free(p);
}
#endif

/* Synthetic batches: the loader is exercised by the CLI tests. */
static int batch(void *ctx, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)err;
  int64_t n = *(int64_t *)ctx;
  for (int64_t i = 0; i < n; i++) {
    inputs[i] = (int32_t)((i * 31 + step + micro) % 256);
    targets[i] = (int32_t)((i * 17 + step + micro) % 256);
  }
  return 0;
}

/* Two steps of each policy set at cfg's precision. */
static void policies(const remat_config *cfg) {
  remat_error err;
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = 3;
  o.T = 32;
  o.grad_accum = 2;
  o.lr = 1e-3;
  o.hp.dropout = 0.1f;
  int64_t n = o.B * o.T;
  int bf16 = cfg->precision == REMAT_PRECISION_BF16;
  /* k keeps, f recomputes, m the middle policy */
  const char *sets[] = {"kkkk", "ffkk", "ffff", "mmmm", "fmmk"};
  for (int c = 0; c < 5; c++) {
    uint8_t pol[4];
    for (int l = 0; l < 4; l++)
      pol[l] = sets[c][l] == 'f' ? REMAT_RECOMPUTE : sets[c][l] == 'm' ? REMAT_MIDDLE : REMAT_KEEP;
    remat_trainer *t;
    CHECK(remat_trainer_create(&t, cfg, pol, NULL, &o, &err) == 0);
    size_t planned = remat_trainer_planned_bytes(t);
    CHECK(remat_trainer_allocate(t, &err) == 0);
    CHECK(remat__heap_live() == planned);
    remat_trainer_set_batches(t, batch, &n);
    remat_model *m = remat_trainer_model(t);
    remat_model_init_weights(m, 1);
    remat_step_stats st;
    CHECK(remat_trainer_step(t, &st, &err) == 0); /* warm-up: OpenBLAS and OpenMP set up */
    size_t live = remat__heap_live();
    atomic_store(&n_alloc, 0);
    atomic_store(&live_bytes, 0);
    atomic_store(&largest, 0);
    atomic_store(&outside_dnnl, 0);
    atomic_store(&blame, bf16);
    atomic_store(&counting, 1);
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    atomic_store(&counting, 0);
    long count = atomic_load(&n_alloc);
    size_t hw = remat_model_arena_high_water(m);
    size_t arena = remat_memplan_peak_bytes(remat_model_memplan(m));
    printf("%s ", remat_precision_name((int)cfg->precision));
    if (COUNT_MALLOC && bf16)
      printf("policy %s: %ld heap allocations in 2 steps, %ld of them outside oneDNN, the "
             "largest %ld bytes, %ld bytes left; ", sets[c], count, atomic_load(&outside_dnnl),
             atomic_load(&largest), atomic_load(&live_bytes));
    else if (COUNT_MALLOC)
      printf("policy %s: %ld heap allocations in 2 steps; ", sets[c], count);
    else
      printf("policy %s: allocations not counted under ASan; ", sets[c]);
    printf("arena high water %zu of %zu planned; measured peak %zu of %zu planned\n", hw, arena,
           remat_trainer_measured_peak_bytes(t), planned);
    if (COUNT_MALLOC && !bf16) CHECK(count == 0);
    if (COUNT_MALLOC && bf16) {
      CHECK(atomic_load(&outside_dnnl) == 0);
      CHECK(atomic_load(&live_bytes) == 0 && atomic_load(&largest) <= 4096);
    }
    CHECK(remat__heap_live() == live);
    CHECK(hw == arena);
    CHECK(remat_trainer_measured_peak_bytes(t) == planned);
    remat_trainer_destroy(t);
  }
}

int main(void) {
  remat_config cfg;
  remat_error err;
  void *warm[1];
  backtrace(warm, 1); /* loads the unwinder before anything is counted */
  CHECK(remat_config_parse("4,64,4,256,32", &cfg, &err) == 0);
  policies(&cfg);
  if (remat_precision_available(REMAT_PRECISION_BF16, NULL)) {
    cfg.precision = REMAT_PRECISION_BF16;
    policies(&cfg);
    /* the blame can fall elsewhere: an allocation of this file's is outside oneDNN */
    atomic_store(&outside_dnnl, 0);
    atomic_store(&blame, 1);
    atomic_store(&counting, 1);
    void *volatile p = malloc(24);
    atomic_store(&counting, 0);
    free(p);
    if (COUNT_MALLOC) CHECK(atomic_load(&outside_dnnl) == 1);
  }
  return test_summary("noalloc");
}
