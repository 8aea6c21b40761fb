/* alloc.c: the library's heap allocations, counted. Each block carries a
 * header with its size so frees can be subtracted; blocks are REMAT_ALIGN
 * aligned so that arenas and kernels can rely on it. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"

static atomic_size_t live_bytes;
static atomic_size_t peak_bytes;

/* The header sits just before the returned pointer, in a REMAT_ALIGN slot. */
typedef struct {
  size_t bytes;
} header;

/* A block this large (an arena) asks for transparent huge pages: its first
 * touch then faults once per 2 MiB, not once per 4 KiB, which was most of
 * a large model's start. Where THP is off, nothing changes. */
#define HUGE_BLOCK ((size_t)32 << 20)
static void advise_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const uintptr_t huge = (uintptr_t)2 << 20;
  uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

void *remat__malloc(size_t bytes) {
  if (bytes > SIZE_MAX - REMAT_ALIGN) return NULL;
  void *raw = NULL;
  if (posix_memalign(&raw, REMAT_ALIGN, bytes + REMAT_ALIGN) != 0) return NULL;
  if (bytes >= HUGE_BLOCK) advise_huge(raw, bytes + REMAT_ALIGN);
  ((header *)raw)->bytes = bytes;
  size_t now = atomic_fetch_add(&live_bytes, bytes) + bytes;
  size_t peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
  return (char *)raw + REMAT_ALIGN;
}

void *remat__calloc(size_t n, size_t size) {
  size_t bytes;
  if (remat__mul_size(n, size, &bytes)) return NULL;
  void *p = remat__malloc(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

void remat__free(void *p) {
  if (!p) return;
  void *raw = (char *)p - REMAT_ALIGN;
  atomic_fetch_sub(&live_bytes, ((header *)raw)->bytes);
  free(raw);
}

void *remat__pages_alloc(size_t bytes, size_t *mapped) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (bytes > SIZE_MAX - page) return NULL;
  *mapped = (bytes + page - 1) / page * page;
  void *p = mmap(NULL, *mapped ? *mapped : page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  size_t now = atomic_fetch_add(&live_bytes, bytes) + bytes;
  size_t peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
  return p;
}

void remat__pages_free(void *p, size_t bytes, size_t mapped) {
  if (!p) return;
  atomic_fetch_sub(&live_bytes, bytes);
  munmap(p, mapped ? mapped : (size_t)sysconf(_SC_PAGESIZE));
}

void remat__heap_count(size_t bytes) {
  size_t now = atomic_fetch_add(&live_bytes, bytes) + bytes;
  size_t peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
}

void remat__heap_uncount(size_t bytes) { atomic_fetch_sub(&live_bytes, bytes); }

size_t remat__heap_live(void) { return atomic_load(&live_bytes); }
size_t remat__heap_peak(void) { return atomic_load(&peak_bytes); }
void remat__heap_reset_peak(void) { atomic_store(&peak_bytes, atomic_load(&live_bytes)); }
