/* test_noalloc.c: a training step makes no heap allocation, and the arena's
 * measured high-water mark equals the planned peak. malloc and friends are
 * interposed here to count every call the process makes, from any library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/model.h"
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

static void step(remat_model *m, const remat_hparams *hp, uint32_t seed) {
  remat_model_zero_grad(m);
  for (uint32_t k = 0; k < 2; k++) {
    for (int64_t i = 0; i < m->B * m->T; i++) {
      m->inputs[i] = (int32_t)((i * 31 + seed + k) % m->cfg.vocab_size);
      m->targets[i] = (int32_t)((i * 17 + seed + k) % m->cfg.vocab_size);
    }
    remat_model_forward_backward(m, k, 1.0f / (float)(2 * m->B * m->T), hp);
  }
  remat_model_update(m, hp, 1e-3f);
}

int main(void) {
  remat_config cfg;
  remat_error err;
  CHECK(remat_config_parse("4,64,4,256,32", &cfg, &err) == 0);
  remat_hparams hp;
  remat_hparams_default(&hp);
  hp.dropout = 0.1f;
  for (int n = 0; n <= 4; n += 2) {
    uint8_t pol[4];
    remat_policy_first_n(pol, 4, n);
    remat_model m;
    CHECK(remat_model_init(&m, &cfg, 3, 32, pol, &err) == 0);
    remat_model_init_weights(&m, 1);
    step(&m, &hp, 0); /* warm-up: OpenBLAS and OpenMP set up their threads */
    size_t live = remat__heap_live();
    atomic_store(&n_alloc, 0);
    atomic_store(&counting, 1);
    step(&m, &hp, 1);
    step(&m, &hp, 2);
    atomic_store(&counting, 0);
    long count = atomic_load(&n_alloc);
    size_t hw = remat_model_arena_high_water(&m);
    if (COUNT_MALLOC)
      printf("recompute %d/4: %ld heap allocations in 2 steps; ", n, count);
    else
      printf("recompute %d/4: allocations not counted under ASan; ", n);
    printf("arena high water %zu of %zu planned\n", hw, m.mp.peak_bytes);
    if (COUNT_MALLOC) CHECK(count == 0);
    CHECK(remat__heap_live() == live);
    CHECK(hw == m.mp.peak_bytes);
    remat_model_free(&m);
  }
  return test_summary("noalloc");
}
