/* report.c: MFU, memory headroom and resident memory, and the check that
 * the OpenBLAS loaded is the OpenMP build (peak.c measures the peak at a
 * model's shapes, threads.c sets up the threads). */
#define _GNU_SOURCE /* dladdr */
#include <cblas.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "remat/report.h"

/* For threads.c: what is mapped now; the bytes of OpenBLAS's buffers not
 * mapped yet (remat_threads_setup), which remat_memory_headroom keeps free. */
size_t remat__mapped_bytes(void);
void remat__blas_reserve_set(size_t bytes);
static size_t blas_reserve;
void remat__blas_reserve_set(size_t bytes) { blas_reserve = bytes; }

double remat_mfu(const remat_config *cfg, int64_t T, double tokens_per_s, double peak_flops) {
  if (peak_flops <= 0) return 0.0;
  return remat_flops_per_token(cfg, T) * tokens_per_s / peak_flops;
}

/* A number from a one-line file, or 0 ("max", missing, unreadable). */
static size_t read_bytes(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long v = 0;
  int ok = fscanf(f, "%llu", &v) == 1;
  fclose(f);
  return ok ? (size_t)v : 0;
}

/* A "Key:   N kB" line of /proc/self/status or /proc/meminfo, in bytes. */
static size_t proc_kb(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0, n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && sscanf(line + n, "%zu", &kb) == 1) break;
  fclose(f);
  return kb * 1024;
}

size_t remat_memory_headroom(const char **what) {
  const char *name = "memory available (MemAvailable)";
  size_t room = proc_kb("/proc/meminfo", "MemAvailable:");
  if (!room) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    room = pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
    name = "physical memory";
  }
  /* cgroup v2: this process's group, from /proc/self/cgroup ("0::/path") */
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f) {
    char line[512], path[700];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "0::", 3) != 0) continue;
      line[strcspn(line, "\n")] = 0;
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
      size_t max = read_bytes(path);
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", line + 3);
      size_t cur = read_bytes(path);
      if (max) {
        size_t left = max > cur ? max - cur : 0;
        if (!room || left < room) room = left, name = "the cgroup's memory.max";
      }
    }
    fclose(f);
  }
  /* ulimit -v: address space left under RLIMIT_AS */
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    /* and room for OpenBLAS's buffers not mapped yet (remat_threads_setup) */
    size_t used = proc_kb("/proc/self/status", "VmSize:") + blas_reserve;
    size_t left = (size_t)rl.rlim_cur > used ? (size_t)rl.rlim_cur - used : 0;
    if (!room || left < room) room = left, name = "the address-space limit (ulimit -v)";
  }
  if (what) *what = name;
  return room;
}

size_t remat_rss_peak_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      sscanf(line + 6, "%zu", &kb);
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

size_t remat_heap_bytes(void) { return remat__heap_live(); }
size_t remat_heap_peak_bytes(void) { return remat__heap_peak(); }
void remat_heap_reset_peak(void) { remat__heap_reset_peak(); }
double remat_now(void) { return remat__now(); }

int remat_blas_check(remat_error *err) {
  int par = openblas_get_parallel(); /* 0 sequential, 1 pthreads, 2 OpenMP */
  if (par == 2) return 0;
  Dl_info where = {0};
  const char *file = dladdr((void *)openblas_get_parallel, &where) && where.dli_fname
                         ? where.dli_fname
                         : "an unknown file";
  return remat__errorf(err, REMAT_EINVAL,
                       "the OpenBLAS loaded (%s, from %s) is the %s build, not the OpenMP build "
                       "remat needs: its threads compete with remat's and it allocates inside "
                       "products; install libopenblas0-openmp (apt-get install "
                       "libopenblas-openmp-dev), rebuild remat, and leave LD_LIBRARY_PATH and "
                       "LD_PRELOAD without another OpenBLAS",
                       openblas_get_config(), file,
                       par == 1   ? "pthreads"
                       : par == 0 ? "single-threaded"
                                  : "unknown");
}

int remat_blas_prepare(const char **detected, const char **chosen) {
  const char *core = openblas_get_corename();
  *detected = core ? core : "unknown";
  *chosen = NULL;
  if (getenv("OPENBLAS_CORETYPE")) return 0; /* the user's choice */
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  /* OpenBLAS 0.3's names of kernels that use AVX2 or AVX-512 */
  static const char *const modern[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                       "SapphireRapids"};
  for (size_t i = 0; i < sizeof modern / sizeof modern[0]; i++)
    if (core && strcasecmp(core, modern[i]) == 0) return 0;
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
  const char *want = avx512 ? "SkylakeX" : "Haswell";
  if (setenv("OPENBLAS_CORETYPE", want, 1)) return 0;
  *chosen = want;
  return 1;
}

/* The bytes mapped now (VmSize), from /proc/self/statm with plain system
 * calls: this may run before the C library's constructors. */
size_t remat__mapped_bytes(void) {
  char buf[64];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  size_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
    pages = pages * 10 + (size_t)(buf[i] - '0');
  long page = sysconf(_SC_PAGESIZE);
  return pages * (size_t)(page > 0 ? page : 4096);
}

int remat_blas_fits(int loaded, int callers, size_t *need, size_t *limit) {
  struct rlimit rl;
  *need = *limit = 0;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1;
  struct rlimit st;
  size_t stack = getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY
                     ? (size_t)st.rlim_cur : (size_t)8 << 20;
  *limit = (size_t)rl.rlim_cur;
  *need = remat__mapped_bytes() + (size_t)(loaded + callers) * REMAT_BLAS_BUFFER_BYTES +
          (size_t)(loaded > 1 ? loaded - 1 : 0) * stack + REMAT_BLAS_RESERVE_BYTES;
  return *need <= *limit;
}
