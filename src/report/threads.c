/* threads.c: how many threads a run uses, whether they are pinned, and how
 * they wait, chosen from how busy this process's CPUs are.
 *
 * A step is a chain of short parallel regions. On CPUs nobody else uses,
 * threads pinned one per CPU are fastest (no migration between regions), and
 * a thread that reaches a region's end first should spin briefly rather than
 * sleep. When other processes run on the same CPUs, pinning and long spins
 * are the slowest settings: a pinned thread cannot leave a CPU another
 * process is using, and a spinning thread burns the time slice its partner
 * needs to finish the region, so every region waits for the scheduler (a tiny
 * model ran 50 times slower). libgomp's default spin is 300000 iterations,
 * 6 ms on this machine's CPU. So:
 *
 * - waiting: GOMP_SPINCOUNT=10000 (about 0.2 ms; a quiet machine's regions
 *   end within it) when the CPUs are quiet at start, OMP_WAIT_POLICY=passive
 *   (sleep at once) when they are shared. libgomp reads both only when it is
 *   loaded, before main: remat_threads_prepare samples the load first thing
 *   in main and asks the executable to run itself again (execv) with them
 *   set and the sample in REMAT_THREADS_SAMPLE.
 * - placement: one thread pinned per CPU on a quiet machine, unpinned on a
 *   shared one; remat_threads_adapt, called between steps, unpins when other
 *   work appears and pins again once it has gone.
 *
 * The team size never depends on the load (it is the CPU count, or the
 * caller's), so the policy never changes a run's results. */
#define _GNU_SOURCE /* sched_getaffinity, pthread_setaffinity_np */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "remat/report.h"

/* report.c: what is mapped now; OpenBLAS's buffers not mapped yet */
size_t remat__mapped_bytes(void);
void remat__blas_reserve_set(size_t bytes);

/* A sample shorter than this sees too few clock ticks (10 ms each). */
#define SAMPLE_SECONDS 0.1
/* Other work on less than this many CPUs' worth counts as a quiet machine. */
#define SHARED_CPUS 0.3
/* Between steps: unpin at this much other work, pin again below QUIET_CPUS
 * for two samples in a row; a sample covers at least ADAPT_SECONDS. */
#define BUSY_CPUS 0.5
#define QUIET_CPUS 0.2
#define ADAPT_SECONDS 1.0
/* A quiet machine's spin: short enough that a thread whose partner lost its
 * CPU soon sleeps. */
#define QUIET_SPINCOUNT "10000"

/* What the start-up sample found and did, for remat_threads_setup. */
static struct {
  int sampled;       /* 1 once remat_threads_prepare ran */
  double idle, busy; /* idle CPUs, and other processes' CPUs, over the sample */
  int cpus;
  int set_wait;      /* 1: set GOMP_SPINCOUNT (quiet), 2: OMP_WAIT_POLICY=passive */
  char wait_env[64]; /* the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT, if any */
} start;

/* The CPUs this process may use, as they were at the first call: pinning
 * narrows the calling thread's own mask to one CPU. */
static int allowed_cpus(cpu_set_t *set) {
  static cpu_set_t first;
  static int have;
  if (!have) {
    CPU_ZERO(&first);
    have = sched_getaffinity(0, sizeof first, &first) == 0;
    if (!have) CPU_ZERO(&first);
  }
  *set = first;
  return CPU_COUNT(set);
}

/* Idle and busy clock ticks of each CPU in `set` from /proc/stat; returns
 * the number of CPUs read. Busy counts steal time: a hypervisor gave it to
 * someone else. */
static int read_ticks(const cpu_set_t *set, unsigned long long *idle, unsigned long long *busy) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned cpu;
    unsigned long long v[8] = {0};
    if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    if (sscanf(line + 3, "%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7]) < 5)
      continue;
    if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, set)) continue;
    /* user nice system idle iowait irq softirq steal */
    idle[n] = v[3] + v[4];
    busy[n] = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    n++;
  }
  fclose(f);
  return n;
}

double remat_idle_cpus(double seconds, int *cpus) {
  cpu_set_t set;
  int n = allowed_cpus(&set);
  if (cpus) *cpus = n;
  if (n <= 0 || n > 1024) return -1.0;
  unsigned long long i0[1024], b0[1024], i1[1024], b1[1024];
  if (read_ticks(&set, i0, b0) != n) return -1.0;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&ts, NULL);
  if (read_ticks(&set, i1, b1) != n) return -1.0;
  double idle = 0.0;
  for (int k = 0; k < n; k++) {
    unsigned long long di = i1[k] - i0[k], db = b1[k] - b0[k];
    idle += di + db ? (double)di / (double)(di + db) : 1.0;
  }
  return idle;
}

/* A sample carried over an exec: "idle cpus set_wait". */
#define SAMPLE_ENV "REMAT_THREADS_SAMPLE"

int remat_threads_prepare(void) {
  const char *carried = getenv(SAMPLE_ENV);
  if (carried && sscanf(carried, "%lf %d %d", &start.idle, &start.cpus, &start.set_wait) == 3) {
    unsetenv(SAMPLE_ENV); /* it describes this process, not its children */
    start.sampled = 1;
    start.busy = start.idle < 0 ? 0.0 : start.cpus - start.idle;
    return 0;
  }
  const char *w = getenv("OMP_WAIT_POLICY"), *s = getenv("GOMP_SPINCOUNT");
  start.sampled = 1;
  start.idle = remat_idle_cpus(SAMPLE_SECONDS, &start.cpus);
  /* REMAT_IDLE_CPUS replaces the measurement (tests, reproducible runs) */
  const char *forced = getenv("REMAT_IDLE_CPUS");
  if (forced) start.idle = atof(forced);
  start.busy = start.idle < 0 ? 0.0 : start.cpus - start.idle;
  if (w || s) {
    snprintf(start.wait_env, sizeof start.wait_env, "%s%s%s%s", w ? "OMP_WAIT_POLICY=" : "",
             w ? w : "", s ? (w ? ", GOMP_SPINCOUNT=" : "GOMP_SPINCOUNT=") : "", s ? s : "");
    return 0;
  }
  start.set_wait = start.busy < SHARED_CPUS ? 1 : 2;
  char sample[64];
  snprintf(sample, sizeof sample, "%.17g %d %d", start.idle, start.cpus, start.set_wait);
  int rc = start.set_wait == 1 ? setenv("GOMP_SPINCOUNT", QUIET_SPINCOUNT, 1)
                               : setenv("OMP_WAIT_POLICY", "passive", 1);
  if (rc || setenv(SAMPLE_ENV, sample, 1)) {
    remat_threads_prepare_failed();
    return 0;
  }
  return 1;
}

void remat_threads_prepare_failed(void) {
  if (start.set_wait == 1) unsetenv("GOMP_SPINCOUNT");
  if (start.set_wait == 2) unsetenv("OMP_WAIT_POLICY");
  unsetenv(SAMPLE_ENV);
  start.set_wait = 0;
}

/* Pins OpenMP thread i of a team of `threads` to the i-th CPU of `set`, or,
 * with pin 0, lets every thread run on any of them. Returns the threads
 * whose affinity was set. */
static int place_threads(const cpu_set_t *set, int n, int pin) {
  int cpus[CPU_SETSIZE], k = 0, placed = 0;
  for (int c = 0; c < CPU_SETSIZE && k < n; c++)
    if (CPU_ISSET(c, set)) cpus[k++] = c;
#pragma omp parallel reduction(+ : placed)
  {
    cpu_set_t one;
    if (pin) {
      CPU_ZERO(&one);
      CPU_SET(cpus[omp_get_thread_num() % k], &one);
    } else {
      one = *set;
    }
    placed += pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  return placed;
}

/* Under an address-space limit: OpenBLAS maps a buffer for each thread
 * inside a product at its first product, and retries for ever if the limit
 * refuses it then; so every thread of the team runs a product now, all at
 * once, before anything large is allocated (the buffers stay mapped). The
 * products may not all overlap: the buffers the address space did not grow
 * by stay reserved (remat__blas_reserve_set), and remat_memory_headroom
 * leaves room for them. */

static void map_blas_buffers(int threads) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  remat__blas_reserve_set((size_t)threads * REMAT_BLAS_BUFFER_BYTES);
  enum { N = 512 }; /* long enough (milliseconds) for the products to overlap */
  size_t nn = (size_t)N * N, before = remat__mapped_bytes();
  float *m = calloc((size_t)(2 + threads) * nn, sizeof *m); /* A, B and a C per thread */
  if (!m) return;
#pragma omp parallel num_threads(threads)
  {
    float *c = m + (size_t)(2 + omp_get_thread_num()) * nn;
#pragma omp barrier
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, m, N, m + nn, N, 0.0f,
                c, N);
  }
  free(m);
  size_t grew = remat__mapped_bytes() - before, mapped = grew / REMAT_BLAS_BUFFER_BYTES;
  remat__blas_reserve_set(mapped < (size_t)threads
                              ? ((size_t)threads - mapped) * REMAT_BLAS_BUFFER_BYTES
                              : 0);
}

int remat_threads_setup(remat_thread_policy *p, int threads) {
  cpu_set_t set;
  int ncpu = allowed_cpus(&set);
  *p = (remat_thread_policy){.threads_given = threads >= 1, .cpus = ncpu};
  const char *forced = getenv("REMAT_IDLE_CPUS");
  if (forced)
    p->idle_cpus = atof(forced);
  else if (start.sampled)
    p->idle_cpus = start.idle;
  else /* not prepared: sample now (the waiting stays libgomp's) */
    p->idle_cpus = ncpu > 1 && threads != 1 ? remat_idle_cpus(SAMPLE_SECONDS, NULL) : -1.0;
  p->shared = p->idle_cpus >= 0 && ncpu - p->idle_cpus >= SHARED_CPUS;
  if (threads < 1) threads = ncpu > 0 ? ncpu : omp_get_max_threads();
  /* the address-space limit left room for OpenBLAS's buffers on this many
   * (the remat command's start-up check) */
  const char *cap = getenv("REMAT_BLAS_THREADS");
  if (cap && atoi(cap) >= 1 && atoi(cap) < threads) threads = atoi(cap);
  p->threads = threads;
  omp_set_num_threads(threads);
  /* OpenBLAS's own team runs only for a product called outside a parallel
   * region; remat's products are all inside one (one OpenBLAS call per
   * thread and slab), so the two never share the CPUs at once */
  openblas_set_num_threads(threads);
  map_blas_buffers(threads);
  if (threads == 1)
    snprintf(p->wait, sizeof p->wait, "never waiting");
  else if (start.wait_env[0])
    snprintf(p->wait, sizeof p->wait, "waiting as %s says", start.wait_env);
  else if (start.set_wait == 2)
    snprintf(p->wait, sizeof p->wait, "waiting passively");
  else if (start.set_wait == 1)
    snprintf(p->wait, sizeof p->wait, "spinning %s times, then sleeping", QUIET_SPINCOUNT);
  else
    snprintf(p->wait, sizeof p->wait, "waiting as libgomp does by default");
  /* Pin one thread per CPU when the team fills the CPUs of a quiet
   * machine, unless the user chose a binding. Unpinned, threads migrating
   * between the short parallel regions of a step halved its speed. */
  p->user_binding = getenv("OMP_PROC_BIND") || getenv("GOMP_CPU_AFFINITY") || getenv("OMP_PLACES");
  p->adaptive = !p->user_binding && ncpu >= 2 && threads == ncpu && !forced;
  if (p->user_binding || ncpu < 2 || threads != ncpu) return 0;
  int pin = !p->shared;
  int placed = place_threads(&set, ncpu, pin);
  p->pinned = pin && placed == threads;
  return 0;
}

/* Busy CPU-seconds of this process's CPUs so far (steal included), from
 * /proc/stat, and this process's own CPU-seconds. */
static int busy_seconds(double *all, double *own) {
  cpu_set_t set;
  int n = allowed_cpus(&set);
  if (n <= 0 || n > 1024) return -1;
  unsigned long long idle[1024], busy[1024];
  if (read_ticks(&set, idle, busy) != n) return -1;
  unsigned long long sum = 0;
  for (int k = 0; k < n; k++) sum += busy[k];
  long hz = sysconf(_SC_CLK_TCK);
  struct timespec ts;
  if (hz <= 0 || clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)) return -1;
  *all = (double)sum / (double)hz;
  *own = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  return 0;
}

int remat_threads_adapt(remat_thread_policy *p) {
  if (!p->adaptive) return 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, all, own;
  if (p->t_last > 0 && now - p->t_last < ADAPT_SECONDS) return 0;
  if (busy_seconds(&all, &own)) {
    p->adaptive = 0;
    return 0;
  }
  double t_last = p->t_last, all_last = p->busy_last, own_last = p->own_last;
  p->t_last = now, p->busy_last = all, p->own_last = own;
  if (t_last <= 0) return 0; /* the first call starts the clock */
  double others = (all - all_last - (own - own_last)) / (now - t_last);
  p->others = others < 0 ? 0 : others;
  cpu_set_t set;
  int ncpu = allowed_cpus(&set);
  if (p->pinned && p->others >= BUSY_CPUS) {
    place_threads(&set, ncpu, 0);
    p->pinned = 0, p->shared = 1, p->quiet_samples = 0, p->moves++;
    return 1;
  }
  if (p->pinned) return 0;
  p->quiet_samples = p->others < QUIET_CPUS ? p->quiet_samples + 1 : 0;
  if (p->quiet_samples < 2) return 0;
  p->pinned = place_threads(&set, ncpu, 1) == p->threads;
  p->shared = 0, p->quiet_samples = 0, p->moves++;
  return 1;
}

int remat_set_threads(int threads) {
  remat_thread_policy p;
  remat_threads_setup(&p, threads);
  return p.pinned ? p.threads : 0;
}

const char *remat_threads_describe(const remat_thread_policy *p, char *buf, size_t n) {
  char load[96];
  if (p->idle_cpus < 0)
    snprintf(load, sizeof load, "the CPUs' load unknown");
  else
    snprintf(load, sizeof load, "%s%.2f of %d CPUs idle at start", p->shared ? "shared: " : "",
             p->idle_cpus, p->cpus);
  const char *placed = p->pinned         ? "pinned one per CPU"
                       : p->user_binding ? "placed as OMP_PROC_BIND/OMP_PLACES say"
                       : p->threads != p->cpus ? "not pinned (not one per CPU)"
                       : p->shared            ? "not pinned (shared CPUs)"
                                              : "not pinned";
  snprintf(buf, n, "%d%s on %d CPUs, %s, %s (%s)", p->threads,
           p->threads_given ? " (given)" : "", p->cpus, placed, p->wait, load);
  return buf;
}
