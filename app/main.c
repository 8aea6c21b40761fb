/* main.c: the remat command line: dispatches to subcommands. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "remat.h"

/* The process runs itself again with argv (returns only if it could not),
 * by the executable's own path, so that it keeps its name. */
static void run_again(char **argv) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = 0;
  fflush(NULL);
  execv(self, argv);
}

/* A training run chooses how its threads wait from how busy the CPUs are,
 * before OpenMP starts; one on a single thread (--threads 1) has nothing to
 * choose. libgomp reads its settings only when loaded: to change them the
 * process runs itself again (remat_threads_prepare). */
static void prepare_threads(int argc, char **argv) {
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "--plan-only")) return;
    if (!strcmp(argv[i], "--threads") && i + 1 < argc && atoi(argv[i + 1]) == 1) return;
  }
  if (remat_threads_prepare()) {
    run_again(argv);
    remat_threads_prepare_failed();
  }
}

/* The kernels keep their tiles on each thread's stack (the attention's
 * take 64 KiB): a stack limit below REMAT_MIN_STACK is raised (the soft
 * limit, where the hard one allows) and the process runs itself again, so
 * that every thread's stack follows; else it says so and ends. */
#define REMAT_MIN_STACK ((rlim_t)1 << 20)
static void check_stack(char **argv, char **envp) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur >= REMAT_MIN_STACK) return;
  if (rl.rlim_max >= REMAT_MIN_STACK) {
    rl.rlim_cur = rl.rlim_max < ((rlim_t)8 << 20) ? rl.rlim_max : (rlim_t)8 << 20;
    if (setrlimit(RLIMIT_STACK, &rl) == 0) execve("/proc/self/exe", argv, envp);
  }
  char msg[256];
  int len = snprintf(msg, sizeof msg, "remat: the stack limit (ulimit -s %llu) is below the "
                     "%llu KiB remat's kernels need on each thread; raise it: ulimit -s %llu\n",
                     (unsigned long long)(rl.rlim_cur >> 10),
                     (unsigned long long)(REMAT_MIN_STACK >> 10),
                     (unsigned long long)(REMAT_MIN_STACK >> 10));
  (void)!write(STDERR_FILENO, msg, (size_t)len);
  _exit(1);
}

/* Whether the command runs matrix products, OpenBLAS's work beyond loading:
 * train and sample do, plan with --calibrate (it times the layers) does;
 * help (a command's too), the version, plan and tokenize do not. Only
 * string compares: it runs before the C library's set-up too. */
static int needs_blas(int argc, char **argv) {
  if (argc < 2) return 0;
  int plan = !strcmp(argv[1], "plan"), calibrate = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 0;
    calibrate |= !strncmp(argv[i], "--calibrate", 11);
  }
  return !strcmp(argv[1], "train") || !strcmp(argv[1], "sample") || (plan && calibrate);
}

/* Before main, before any library's constructor: OpenBLAS maps its buffers
 * (remat_blas_fits) in its own and retries for ever when the address-space
 * limit refuses them. Where the limit leaves room for fewer threads than
 * would start, the process runs itself again with that many (OpenMP's team,
 * and REMAT_BLAS_THREADS caps remat's); where not even one fits, it says so
 * and ends. The stack limit is checked first. Only system calls and the
 * environment given here: the C library's own set-up may not have run. */
static char *capped_env[4096];
static void check_limits(int argc, char **argv, char **envp) {
  check_stack(argv, envp);
  const char *omp = NULL, *capped = NULL;
  int n = 0, threads = 0, loaded, products = needs_blas(argc, argv);
  for (; envp[n]; n++) {
    if (!strncmp(envp[n], "OMP_NUM_THREADS=", 16)) omp = envp[n] + 16;
    if (!strncmp(envp[n], "REMAT_BLAS_THREADS=", 19)) capped = envp[n] + 19;
  }
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[i + 1]);
    else if (!strncmp(argv[i], "--threads=", 10)) threads = atoi(argv[i] + 10);
  cpu_set_t set;
  loaded = omp ? atoi(omp) : sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (loaded < 1) loaded = 1;
  if (threads < 1) threads = loaded;
  if (capped && atoi(capped) >= 1 && atoi(capped) < threads) threads = atoi(capped);
  /* a command without products needs room for OpenBLAS's load alone */
  size_t need, limit;
  if (remat_blas_fits(loaded, products ? threads : 0, &need, &limit)) return;
  int k = threads < loaded ? threads : loaded; /* the most threads that fit */
  while (k >= 1 && !remat_blas_fits(k, products ? k : 0, &need, &limit)) k--;
  char msg[512];
  if (k >= 1 && !capped && n + 3 <= (int)(sizeof capped_env / sizeof capped_env[0])) {
    static char omp_var[32], cap_var[40];
    int m = 0;
    for (int i = 0; i < n; i++)
      if (strncmp(envp[i], "OMP_NUM_THREADS=", 16)) capped_env[m++] = envp[i];
    snprintf(omp_var, sizeof omp_var, "OMP_NUM_THREADS=%d", k);
    snprintf(cap_var, sizeof cap_var, "REMAT_BLAS_THREADS=%d", k);
    capped_env[m++] = omp_var;
    capped_env[m++] = cap_var;
    capped_env[m] = NULL;
    int len = snprintf(msg, sizeof msg, "remat: warning: the address-space limit (ulimit -v "
                       "%zu) leaves room for OpenBLAS's buffers on %d thread%s, not %d: running "
                       "%d\n", limit >> 10, k, k > 1 ? "s" : "", threads, k);
    if (k < threads && products) (void)!write(STDERR_FILENO, msg, (size_t)len);
    execve("/proc/self/exe", argv, capped_env);
  }
  remat_blas_fits(1, products, &need, &limit);
  int len = snprintf(msg, sizeof msg, "remat: the address-space limit (ulimit -v %zu) leaves no "
                     "room for OpenBLAS, which maps %zu MiB a thread when it loads and again for "
                     "each thread in a product; one thread needs ulimit -v %zu or more\n",
                     limit >> 10, REMAT_BLAS_BUFFER_BYTES >> 20, (need >> 10) + 1);
  (void)!write(STDERR_FILENO, msg, (size_t)len);
  _exit(1);
}
typedef void preinit_fn(int, char **, char **);
__attribute__((section(".preinit_array"), used)) static preinit_fn *const preinit = check_limits;

int remat_cmd_train(int argc, char **argv);
int remat_cmd_plan(int argc, char **argv);
int remat_cmd_tokenize(int argc, char **argv);
int remat_cmd_sample(int argc, char **argv);
int remat_cmd_state(int argc, char **argv);

static void usage(FILE *f) {
  fprintf(f,
          "usage: remat <command> [options]\n"
          "\n"
          "commands:\n"
          "  train     train a GPT-2 or a Llama under a memory budget, recomputing per layer,\n"
          "            on one process or on MPI ranks (pipeline, replicas, tensor ranks)\n"
          "  plan      plan the layers and recompute of each stage, or search a layout of N\n"
          "            ranks (tensor x pipeline x data); exports for other frameworks\n"
          "  tokenize  text to llm.c token shards with GPT-2's BPE (and --decode back)\n"
          "  sample    text from a trained model (KV cache; temperature, top-k, seed)\n"
          "  state     bytes of weights, gradients and optimizer state per rank (ZeRO)\n"
          "\n"
          "Run 'remat <command> --help' for a command's options.\n");
}

/* Kernels OpenBLAS chose by mistake (remat_blas_prepare): the process runs
 * itself again with the CPU's own. */
static void prepare_blas(char **argv) {
  const char *detected, *chosen;
  if (!remat_blas_prepare(&detected, &chosen)) return;
  run_again(argv);
  unsetenv("OPENBLAS_CORETYPE"); /* could not run again: go on with what loaded */
}

/* --backend NAME (or --backend=NAME) of train, plan and sample: the
 * backend the command's models run on (remat_backend_select), taken out of
 * argv before the command parses it. A name not built is refused, with
 * those that are. */
static void take_backend(int *argc, char **argv) {
  const char *cmd = argv[1];
  if (strcmp(cmd, "train") && strcmp(cmd, "plan") && strcmp(cmd, "sample")) return;
  for (int i = 2; i < *argc; i++) {
    const char *name = NULL;
    int used = 0;
    if (!strcmp(argv[i], "--backend")) {
      name = i + 1 < *argc ? argv[i + 1] : "";
      used = i + 1 < *argc ? 2 : 1;
    } else if (!strncmp(argv[i], "--backend=", 10)) {
      name = argv[i] + 10;
      used = 1;
    }
    if (!name) continue;
    remat_error err;
    if (!*name || remat_backend_select(name, &err)) {
      fprintf(stderr, "remat %s: --backend: %s\n", cmd,
              *name ? err.msg : "give a backend's name (remat --version lists them)");
      exit(2);
    }
    setenv("REMAT_BACKEND", name, 1); /* a run that starts itself again keeps it */
    memmove(argv + i, argv + i + used, (size_t)(*argc - i - used + 1) * sizeof *argv);
    *argc -= used;
    i--;
  }
}

int main(int argc, char **argv) {
  if (needs_blas(argc, argv)) prepare_blas(argv); /* the others never call it */
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  /* a file size limit makes a save fail with a message, not kill us */
  remat_ignore_sigxfsz();
  take_backend(&argc, argv);
  const char *env = getenv("REMAT_BACKEND");
  remat_error err;
  if (env && *env && remat_backend_select(env, &err)) {
    fprintf(stderr, "remat: REMAT_BACKEND: %s\n", err.msg);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "train") == 0) {
    prepare_threads(argc, argv);
    return remat_cmd_train(argc - 1, argv + 1);
  }
  if (strcmp(cmd, "plan") == 0) return remat_cmd_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "tokenize") == 0) return remat_cmd_tokenize(argc - 1, argv + 1);
  if (strcmp(cmd, "sample") == 0) return remat_cmd_sample(argc - 1, argv + 1);
  if (strcmp(cmd, "state") == 0) return remat_cmd_state(argc - 1, argv + 1);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("remat %s\nbackends", remat_version());
    for (int i = 0; remat_backend_name(i); i++) printf("%s %s", i ? "," : ":", remat_backend_name(i));
    printf("\n");
    return 0;
  }
  fprintf(stderr, "remat: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
