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

/* Model FLOP utilisation: model FLOPs (remat_flops_per_token, recomputation
 * excluded) per second over a peak rate in FLOP/s. */
REMAT_API double remat_mfu(const remat_config *cfg, int64_t seq_len, double tokens_per_s,
                           double peak_flops);

/* The peak MFU is measured against: the rate of the split single-threaded
 * products the model runs (the same code path), at the shapes of one step
 * of cfg with micro-batch B x T: every distinct product of a block's
 * forward and backward and of the head. One trial runs each once and
 * projects a step's products (block shapes L times) from their rates;
 * products too large for the budget are cut along their token or
 * vocabulary length first. The peak is the median trial (the best one
 * varies far more between runs on a shared machine), raised to the model
 * FLOP rate of any step that beats it. */
#define REMAT_PEAK_TRIALS 64
typedef struct remat_peak {
  double flops;   /* the peak, FLOP/s: the median trial, or the fastest step if faster */
  double median;  /* median trial */
  double best;    /* fastest trial */
  double low;     /* slowest trial */
  double spread;  /* (3rd quartile - 1st quartile) / (2 median) of the trials */
  int trials;
  int shapes;     /* distinct products timed in each trial */
  double seconds; /* spent measuring */
  int raised;     /* steps that beat the peak, each raising it to its own rate */
  double fastest_step; /* the highest model FLOP rate remat_peak_mfu saw */
  double rate[REMAT_PEAK_TRIALS]; /* each trial's */
} remat_peak;
/* Adds trials to *p (zeroed before the first call) for about `seconds`:
 * at least one, and at least 3 in all, at most REMAT_PEAK_TRIALS; a trial
 * takes about a fifth of `seconds`. Calls between training steps measure
 * under the steps' conditions. */
REMAT_API int remat_measure_peak(remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                                 double seconds, remat_error *err);
/* MFU of a step of tokens_per_s against p: if the step's model FLOP rate
 * beats p->flops, p->flops becomes that rate first (counted in p->raised),
 * so the result never exceeds 1. */
REMAT_API double remat_peak_mfu(remat_peak *p, const remat_config *cfg, int64_t seq_len,
                                double tokens_per_s);

/* ------------------------------------------------------- the machine cache */

/* Figures measured on this machine and kept between runs: the peak MFU is
 * against (remat_peak_cached) and the layer times predictions use
 * (remat_calibrate_cached). One small text file per kind of figure, host,
 * CPU model, precision and thread count, under $XDG_CACHE_HOME/remat (else
 * $HOME/.cache/remat), one entry per shape measured with its date, a
 * CRC32C over the file. A file that fails its CRC, does not parse or names
 * another machine is damaged: it is never trusted, the figure is measured
 * again and the store rewrites the file whole. Stores write a temporary
 * and rename it over the file, so concurrent writers leave one whole file
 * (the last one's; an entry another writer added meanwhile may be lost and
 * is measured again later). */
#define REMAT_CACHE_VALUES 16
typedef struct remat_cache {
  char path[4096]; /* the file; empty where none can be placed (why says) */
  char kind[16];   /* "peak", "layers" */
  char host[64];   /* gethostname */
  char cpu[128];   /* /proc/cpuinfo's model name */
  int precision, threads;
  char why[256];
} remat_cache;
typedef struct remat_cache_entry {
  char key[160];   /* the shapes measured ("C768 Vp50304 L12 rows256"); no '|' */
  int64_t date;    /* when measured, seconds since 1970 */
  int n;           /* figures */
  double value[REMAT_CACHE_VALUES];
} remat_cache_entry;
enum { REMAT_CACHE_MISS = 0, REMAT_CACHE_HIT = 1, REMAT_CACHE_DAMAGED = 2 };
/* The cache file of `kind` for this machine, precision and thread count
 * (threads < 1: omp_get_max_threads()); creates its folder. 0, or
 * REMAT_EIO with c->path empty and c->why filled (no HOME, a folder that
 * cannot be made): figures are then measured each run. */
REMAT_API int remat_cache_open(remat_cache *c, const char *kind, int precision, int threads);
/* The entry of `key` with n figures: REMAT_CACHE_HIT (*e filled),
 * REMAT_CACHE_MISS (no file or no entry), REMAT_CACHE_DAMAGED (the file is
 * damaged, or its entry has another count of figures; err says how). */
REMAT_API int remat_cache_get(const remat_cache *c, const char *key, int n, remat_cache_entry *e,
                              remat_error *err);
/* Stores e (finite figures), replacing the entry of its key; the other
 * entries of an intact file stay, a damaged file is replaced whole. */
REMAT_API int remat_cache_put(const remat_cache *c, const remat_cache_entry *e, remat_error *err);
/* Where a figure of a run came from. */
typedef enum {
  REMAT_FIGURE_CACHED = 0,     /* the cache's, measured on note->date */
  REMAT_FIGURE_STORED = 1,     /* measured now (none was kept) and kept */
  REMAT_FIGURE_REMEASURED = 2, /* measured now as asked, replacing the kept one */
  REMAT_FIGURE_REPAIRED = 3,   /* the file was damaged (why): measured now, rewritten */
  REMAT_FIGURE_UNKEPT = 4      /* measured now, not kept (why) */
} remat_figure_source;
typedef struct remat_cache_note {
  int source;      /* remat_figure_source */
  int64_t date;    /* when the figure was measured */
  char path[4096]; /* the cache file (may be empty under REMAT_FIGURE_UNKEPT) */
  char host[64], cpu[128];
  char why[512];
} remat_cache_note;
REMAT_API void remat_cache_note_set(remat_cache_note *note, const remat_cache *c, int source,
                                    int64_t date, const char *why);
/* Keeps figures measured now: e dated now and stored, and note says how
 * (remeasured as asked (again), a damaged file rewritten (found is
 * remat_cache_get's REMAT_CACHE_DAMAGED; damaged says why), stored, or not
 * kept and why). */
REMAT_API void remat_cache_keep(const remat_cache *c, remat_cache_entry *e, int again, int found,
                                const char *damaged, remat_cache_note *note);
/* "2026-11-27 15:04 UTC"; returns buf. */
REMAT_API const char *remat_cache_date(int64_t date, char *buf, size_t cap);

/* The peak of remat_measure_peak for cfg at B x T with this process's
 * threads, from the machine cache when it holds one (again = 0), else
 * measured for about `seconds` and kept; *note says which. A cached peak
 * keeps its trials' median, best, slowest, spread, count and shapes (not
 * each trial's rate). */
REMAT_API int remat_peak_cached(remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                                double seconds, int again, remat_cache_note *note,
                                remat_error *err);
/* Keeps p (a peak of remat_peak_cached that a step raised: p->flops, the
 * rate later runs of cfg at B x T report against) in the machine cache. */
REMAT_API int remat_peak_keep(const remat_peak *p, const remat_config *cfg, int64_t B, int64_t T,
                              remat_error *err);

/* Bytes the library holds on the heap now, and the most it has held since
 * the start or the last reset: everything it allocates goes through one
 * counted allocator (the arena included). */
REMAT_API size_t remat_heap_bytes(void);
REMAT_API size_t remat_heap_peak_bytes(void);
REMAT_API void remat_heap_reset_peak(void);

/* Seconds on a monotonic clock. */
REMAT_API double remat_now(void);

/* Memory this process could still get, the least of: MemAvailable from
 * /proc/meminfo (else the machine's physical memory), what this process's
 * cgroup v2 memory.max leaves, and the address space RLIMIT_AS leaves;
 * *what (if not NULL) names the one that binds; 0 if unknown. */
REMAT_API size_t remat_memory_headroom(const char **what);

/* Peak resident set size of this process (VmHWM), or 0 if unknown. */
REMAT_API size_t remat_rss_peak_bytes(void);

/* ------------------------------------------------------------ threads */

/* How a run's threads were set up (remat_threads_setup). */
typedef struct remat_thread_policy {
  int threads;       /* OpenMP team size, and OpenBLAS's */
  int threads_given; /* 1 if the caller chose the count */
  int cpus;          /* CPUs this process may run on */
  double idle_cpus;  /* idle over the start-up sample, in CPUs; < 0 unknown */
  int shared;        /* other processes used 0.3 CPUs or more in the sample */
  int pinned;        /* one thread pinned per CPU */
  int user_binding;  /* OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY was set */
  char wait[96];     /* how idle threads wait: "spinning 10000 times, then sleeping", ... */
  /* remat_threads_adapt's state */
  int adaptive;      /* placement follows the load (a team of one thread per CPU) */
  int moves;         /* times it pinned or unpinned the team since start */
  int quiet_samples; /* samples in a row with little other work */
  double others;     /* other processes' CPUs over the last sample */
  double t_last, busy_last, own_last;
} remat_thread_policy;

/* CPUs of this process's affinity mask left idle over `seconds`, from
 * /proc/stat: the sum of each CPU's idle fraction (steal time counts as
 * busy); *cpus (if not NULL) gets the number of CPUs. -1 if unknown. */
REMAT_API double remat_idle_cpus(double seconds, int *cpus);

/* First thing in main, before any OpenMP region: samples the CPUs' load
 * for 0.1 s (REMAT_IDLE_CPUS=X in the environment replaces the
 * measurement) and chooses how threads will wait: spinning about 0.2 ms
 * (GOMP_SPINCOUNT=10000) on a quiet machine, sleeping at once
 * (OMP_WAIT_POLICY=passive) when other processes use 0.3 CPUs or more.
 * libgomp reads these only when it is loaded, so unless the user set either
 * variable, this returns 1: the caller should run its executable again
 * now, with the same arguments (execv("/proc/self/exe", argv)); the
 * environment then holds the setting and the sample, which the new
 * process's call takes over (returning 0). If the exec fails, call
 * remat_threads_prepare_failed and go on (threads then wait as libgomp's
 * default has them). */
REMAT_API int remat_threads_prepare(void);
REMAT_API void remat_threads_prepare_failed(void);

/* Sets the team size of OpenMP and OpenBLAS (threads < 1: one per CPU this
 * process may use) and places the threads: with one thread per CPU on a
 * quiet machine (the sample of remat_threads_prepare, or one taken now),
 * each is pinned to its CPU; on a shared machine, or with fewer threads
 * than CPUs, they may run anywhere; OMP_PROC_BIND, OMP_PLACES or
 * GOMP_CPU_AFFINITY leave placement to libgomp (and to nothing else later),
 * as REMAT_IDLE_CPUS fixes it. The count never depends on the load, so
 * neither do results. REMAT_BLAS_THREADS=N in the environment caps it (the
 * threads whose OpenBLAS buffers an address-space limit leaves room for;
 * under such a limit each thread maps its buffer here). Fills *p; returns 0. */
REMAT_API int remat_threads_setup(remat_thread_policy *p, int threads);
/* Between steps: every second or so, measures the CPUs other processes
 * used since the last call (their busy time in /proc/stat less this
 * process's own) and re-places a team of one thread per CPU: pinned
 * threads are unpinned once others use 0.5 CPUs, and pinned again after two
 * samples in a row under 0.2. Returns 1 when it moved the team. Nothing
 * else changes: the waiting was fixed at start, the team size is fixed. */
REMAT_API int remat_threads_adapt(remat_thread_policy *p);
/* One line on p for a run's header: the count, placement, waiting and the
 * load seen ("2 on 2 CPUs, pinned one per CPU, spinning 10000 times, then
 * sleeping (1.98 of 2 CPUs idle at start)"); returns buf. */
REMAT_API const char *remat_threads_describe(const remat_thread_policy *p, char *buf, size_t n);
/* remat_threads_setup without the report; returns the threads pinned. */
REMAT_API int remat_set_threads(int threads);

/* 0 when the OpenBLAS this process loaded is the OpenMP build
 * (openblas_get_parallel() == 2), which remat is linked against by path.
 * Otherwise (the pthreads or single-threaded build came first, e.g. through
 * LD_LIBRARY_PATH) REMAT_EINVAL with a message naming the build found, the
 * file it came from and the package to install. Call it once at start-up. */
REMAT_API int remat_blas_check(remat_error *err);

/* OpenBLAS picks its kernels by the CPU's model number when it loads, and
 * falls back to its oldest x86-64 ones (Prescott: SSE3, a third of the
 * speed, and other bits) on a model newer than its tables. Where that
 * happened on a CPU with AVX2 and FMA and OPENBLAS_CORETYPE is unset, this
 * sets OPENBLAS_CORETYPE to the kernels the CPU's instructions allow
 * (SkylakeX with AVX-512 F, CD, BW, DQ and VL, else Haswell) and returns 1:
 * the process must run itself again for OpenBLAS to read it. *detected
 * and *chosen: the names (chosen NULL where nothing was set). */
REMAT_API int remat_blas_prepare(const char **detected, const char **chosen);

/* OpenBLAS's buffer (BUFFER_SIZE of Debian's 0.3 OpenMP build, measured:
 * one mmap each): one for each thread of its team, mapped when the library
 * is loaded, and one for each thread inside a product. An allocation the
 * address-space limit (ulimit -v) refuses is retried for ever, so the limit
 * must be checked before the library is loaded, by the program's own code
 * (a .preinit_array function runs first). */
#define REMAT_BLAS_BUFFER_BYTES ((size_t)128 << 20)
/* What a run needs beside the buffers and its arena (checked apart): the
 * data, the plan, OpenMP's and MPI's own allocations. */
#define REMAT_BLAS_RESERVE_BYTES ((size_t)64 << 20)
/* 1 when RLIMIT_AS leaves room, beside what the process maps now, for the
 * buffers of a team of `loaded` threads when OpenBLAS loads, of `callers`
 * threads calling it at once, the team's stacks and the reserve above (or
 * when there is no limit); else 0. *need: the bytes that takes; *limit:
 * the limit (0: none). Plain system calls only: callable before main. */
REMAT_API int remat_blas_fits(int loaded, int callers, size_t *need, size_t *limit);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_REPORT_H */
