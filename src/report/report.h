/* report.h: what remat measures about itself: this machine's sgemm rate (the
 * peak MFU is taken against), model FLOP utilisation, and the process's
 * resident memory. */
#ifndef REMAT_REPORT_H
#define REMAT_REPORT_H

#include <stddef.h>

#include "remat.h"

/* Measures single-precision matrix-product throughput with the current
 * OpenBLAS/OpenMP thread count: square n x n x n products (n = 1024 unless
 * n > 0 given), repeated for about `seconds`; returns the best rate seen in
 * FLOP/s (2 n^3 per product). The best, not the mean: it is the ceiling a
 * training step's matrix products could reach. */
double remat_measure_sgemm_flops(int n, double seconds);

/* Model FLOP utilisation: model FLOPs (remat_flops_per_token, recomputation
 * excluded) per second over a peak rate in FLOP/s. */
double remat_mfu(const remat_config *cfg, int64_t seq_len, double tokens_per_s, double peak_flops);

/* Peak resident set size of this process (VmHWM), or 0 if unknown. */
size_t remat_rss_peak_bytes(void);

/* Sets the thread count of both OpenMP loops and OpenBLAS (threads < 1: one
 * per CPU this process may use) and pins each OpenMP thread to its own CPU
 * unless OMP_PROC_BIND or GOMP_CPU_AFFINITY is set. Returns the number of
 * threads pinned. */
int remat_set_threads(int threads);

#endif
