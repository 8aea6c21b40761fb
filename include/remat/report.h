/* remat/report.h: throughput, MFU, memory measurements and thread placement.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_REPORT_H
#define REMAT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "remat/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ reporting */

/* Measures single-precision matrix-product throughput with the current
 * OpenBLAS/OpenMP thread count: square n x n x n products (n = 1024 unless
 * n > 0 given), repeated for about `seconds`; returns the best rate seen in
 * FLOP/s (2 n^3 per product). The best, not the mean: it is the ceiling a
 * training step's matrix products could reach. */
double remat_measure_sgemm_flops(int n, double seconds);

/* Model FLOP utilisation: model FLOPs (remat_flops_per_token, recomputation
 * excluded) per second over a peak rate in FLOP/s. */
double remat_mfu(const remat_config *cfg, int64_t seq_len, double tokens_per_s, double peak_flops);

/* Bytes the library holds on the heap now, and the most it has held since
 * the start or the last reset: everything it allocates goes through one
 * counted allocator (the arena included). */
size_t remat_heap_bytes(void);
size_t remat_heap_peak_bytes(void);
void remat_heap_reset_peak(void);

/* Seconds on a monotonic clock. */
double remat_now(void);

/* Memory this process could still get: MemAvailable from /proc/meminfo,
 * else the machine's physical memory, or 0 if unknown. */
size_t remat_available_memory_bytes(void);
/* The same, the least of: MemAvailable, what this process's cgroup v2
 * memory.max leaves, and the address space RLIMIT_AS leaves; *what (if not
 * NULL) names the one that binds. */
size_t remat_memory_headroom(const char **what);

/* Peak resident set size of this process (VmHWM), or 0 if unknown. */
size_t remat_rss_peak_bytes(void);

/* Sets the thread count of both OpenMP loops and OpenBLAS (threads < 1: one
 * per CPU this process may use) and pins each OpenMP thread to its own CPU
 * unless OMP_PROC_BIND or GOMP_CPU_AFFINITY is set. Returns the number of
 * threads pinned. */
int remat_set_threads(int threads);

/* 0 when the OpenBLAS this process loaded is the OpenMP build
 * (openblas_get_parallel() == 2), which remat is linked against by path.
 * Otherwise (the pthreads or single-threaded build came first, e.g. through
 * LD_LIBRARY_PATH) REMAT_EINVAL with a message naming the build found, the
 * file it came from and the package to install. Call it once at start-up. */
int remat_blas_check(remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_REPORT_H */
