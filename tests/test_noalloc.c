/* test_noalloc.c: a trainer's step makes no heap allocation, the arena's
 * measured high-water mark equals the planned arena, and the library holds
 * exactly the planned bytes. malloc and friends are
 * interposed here to count every call the process makes, from any library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "test_util.h"

static atomic_long n_alloc;
static atomic_int counting;

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

void *malloc(size_t n) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
  return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
  void *p = __libc_memalign(align, n);
  if (!p) return 12;
  *out = p;
  return 0;
}
void *aligned_alloc(size_t align, size_t n) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
  return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
  return __libc_memalign(align, n);
}
void free(void *p) { __libc_free(p); }
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

int main(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("4,64,4,256,32", &cfg, &err) == 0);
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = 3;
  o.T = 32;
  o.grad_accum = 2;
  o.lr = 1e-3;
  o.hp.dropout = 0.1f;
  int64_t n = o.B * o.T;
  /* k keeps, f recomputes, m the middle policy */
  const char *sets[] = {"kkkk", "ffkk", "ffff", "mmmm", "fmmk"};
  for (int c = 0; c < 5; c++) {
    uint8_t pol[4];
    for (int l = 0; l < 4; l++)
      pol[l] = sets[c][l] == 'f' ? REMAT_RECOMPUTE : sets[c][l] == 'm' ? REMAT_MIDDLE : REMAT_KEEP;
    remat_trainer *t;
    CHECK(remat_trainer_create(&t, &cfg, pol, NULL, &o, &err) == 0);
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
    atomic_store(&counting, 1);
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    CHECK(remat_trainer_step(t, &st, &err) == 0);
    atomic_store(&counting, 0);
    long count = atomic_load(&n_alloc);
    size_t hw = remat_model_arena_high_water(m);
    size_t arena = remat_memplan_peak_bytes(remat_model_memplan(m));
    if (COUNT_MALLOC)
      printf("policy %s: %ld heap allocations in 2 steps; ", sets[c], count);
    else
      printf("policy %s: allocations not counted under ASan; ", sets[c]);
    printf("arena high water %zu of %zu planned; measured peak %zu of %zu planned\n", hw, arena,
           remat_trainer_measured_peak_bytes(t), planned);
    if (COUNT_MALLOC) CHECK(count == 0);
    CHECK(remat__heap_live() == live);
    CHECK(hw == arena);
    CHECK(remat_trainer_measured_peak_bytes(t) == planned);
    remat_trainer_destroy(t);
  }
  return test_summary("noalloc");
}
