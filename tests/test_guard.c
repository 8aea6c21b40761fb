/* test_guard.c: the guard backend faults on a host touch of its memory
 * outside its operations and windows, and only then. Each case runs in a
 * child process (the fault ends it): a read and a write of arena memory by
 * the host fault, and the message names the arena, the offset and the
 * function that touched it; the same bytes reached through an op, an
 * upload, a download and a window do not. */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "test_util.h"

static const remat__backend *g;

/* Kept out of line so the fault's frames name them. */
__attribute__((noinline)) static void host_writes_arena(float *arena) {
  ((volatile float *)arena)[250] = 1.0f; /* byte 1000 */
}

__attribute__((noinline)) static float host_reads_arena(const float *arena) {
  return ((const volatile float *)arena)[500]; /* byte 2000 */
}

/* The arena's uses that must not fault; exit status 0 when all agree. */
static int allowed(float *arena) {
  g->fill(arena, 2.0f, 1024);
  float host[4] = {0}, in[4] = {1, 2, 3, 4};
  g->download(host, arena + 10, sizeof host);
  if (host[0] != 2.0f || host[3] != 2.0f) return 1;
  g->upload(arena + 20, in, sizeof in);
  float *w = g->map(arena + 20, sizeof in, REMAT_MAP_READ | REMAT_MAP_WRITE);
  int bad = w[0] != 1.0f || w[3] != 4.0f;
  w[1] = 7.0f;
  g->unmap(arena + 20, w, sizeof in, REMAT_MAP_READ | REMAT_MAP_WRITE);
  g->download(host, arena + 20, sizeof host);
  return bad || host[1] != 7.0f;
}

/* Runs case k in a child with stderr to path; returns its wait status. */
static int run_child(int k, const char *path) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(path, "w", stderr)) _exit(90);
    float *arena = g->buffer_alloc(1 << 16);
    if (!arena) _exit(91);
    if (k == 0) _exit(allowed(arena));
    if (k == 1) host_writes_arena(arena);
    if (k == 2) _exit((int)host_reads_arena(arena) == 12345); /* not reached */
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

static char *slurp(const char *path) {
  static char buf[1 << 16];
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return buf;
}

int main(void) {
  g = remat__backend_guard();
  CHECKF(g && strcmp(g->name, "guard") == 0, "the guard backend is built (%s)", g ? g->name : "-");
  char path[] = "/tmp/remat_test_guard_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);

  int st = run_child(0, path);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
         "an op, an upload, a download and a window reach the arena without a fault "
         "(status %d): %s", st, slurp(path));

  const char *want[] = {NULL, "at offset 1000", "at offset 2000"};
  const char *fn[] = {NULL, "host_writes_arena", "host_reads_arena"};
  for (int k = 1; k <= 2; k++) {
    st = run_child(k, path);
    const char *text = slurp(path);
    int died = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
    CHECKF(died && strstr(text, "guard backend: the host touched backend memory") &&
               strstr(text, want[k]),
           "a host %s of the arena outside an op faults and says where (%s)",
           k == 1 ? "write" : "read", want[k]);
    CHECKF(strstr(text, fn[k]) != NULL, "the fault's frames name the function: %s", fn[k]);
  }
  unlink(path);
  return test_summary("test_guard");
}
