/* ckptrun.c: a checkpoint directory as one run's (remat/io.h): the lock a
 * run holds on it from set-up to its end, so a second run given it is
 * refused; its sealed step directories listed newest first, counted, the
 * oldest beyond a number kept pruned, or all removed for a new run. The
 * step directories themselves, their manifests and their checks are
 * ckptdir.c's. */
#define _DEFAULT_SOURCE /* flock, pread */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"

#define DIR_PATH_MAX 4096

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int too_long(const char *dir, remat_error *err) {
  return remat__errorf(err, REMAT_EINVAL, "checkpoint directory path '%.200s' is too long", dir);
}

static int join_path(char *out, size_t cap, const char *dir, const char *name) {
  int n = snprintf(out, cap, "%s/%s", dir, name);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* One sealed step directory removed: unsealed first, then remat's files,
 * then the directory itself when nothing else is in it. */
static int remove_step_dir(const char *step_dir, remat_error *err) {
  int rc = remat__checkpoint_dir_clear(step_dir, err);
  if (!rc) (void)rmdir(step_dir); /* files of the user's stay, and so does it */
  return rc;
}

/* The sealed step directories under dir (those with DONE, one spelling per
 * step), newest first, into *steps (owned; *n of them). */
static int list_sealed(const char *dir, int64_t upto, int64_t **steps, size_t *n,
                       remat_error *err) {
  DIR *d;
  *steps = NULL;
  *n = 0;
  int rc = remat__open_listing(dir, "checkpoints", &d, err);
  if (rc) return rc;
  size_t scap = 0;
  char path[DIR_PATH_MAX], want[32];
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    int64_t s = remat__step_name(e->d_name, strlen(e->d_name));
    snprintf(want, sizeof want, "step_%08lld", (long long)s);
    if (s < 0 || s > upto || strcmp(e->d_name, want)) continue; /* one spelling per step */
    struct stat st;
    if (remat_checkpoint_dir_path(path, sizeof path, dir, s, "DONE") || lstat(path, &st) != 0)
      continue; /* not sealed: not a checkpoint */
    if (*n == scap) {
      size_t c = scap ? 2 * scap : 16;
      int64_t *p = realloc(*steps, c * sizeof *p);
      if (!p) {
        rc = remat__errorf(err, REMAT_ENOMEM, "out of memory listing '%s'", dir);
        break;
      }
      *steps = p;
      scap = c;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  if (rc) {
    free(*steps);
    *steps = NULL;
    *n = 0;
  } else if (*n) {
    qsort(*steps, *n, sizeof **steps, cmp_desc);
  }
  return rc;
}

int remat_checkpoint_dir_prune(const char *dir, int64_t upto, int64_t keep, int64_t *removed,
                               remat_error *err) {
  if (removed) *removed = 0;
  if (keep <= 0) return 0;
  int64_t *steps;
  size_t n;
  char path[DIR_PATH_MAX];
  int rc = list_sealed(dir, upto, &steps, &n, err);
  for (size_t i = (size_t)keep; !rc && i < n; i++) {
    remat_checkpoint_dir_path(path, sizeof path, dir, steps[i], NULL);
    rc = remove_step_dir(path, err);
    if (!rc && removed) (*removed)++;
  }
  free(steps);
  return rc;
}

int remat_checkpoint_dir_sealed(const char *dir, int64_t *count, int64_t *newest,
                                remat_error *err) {
  int64_t *steps;
  size_t n;
  *count = *newest = 0;
  struct stat st;
  if (stat(dir, &st) != 0 && errno == ENOENT) return 0; /* nothing there yet */
  int rc = list_sealed(dir, INT64_MAX, &steps, &n, err);
  if (rc) return rc;
  *count = (int64_t)n;
  if (n) *newest = steps[0];
  free(steps);
  return 0;
}

int remat_checkpoint_dir_remove_all(const char *dir, int64_t *removed, remat_error *err) {
  if (removed) *removed = 0;
  DIR *d;
  int rc = remat__open_listing(dir, "checkpoints", &d, err);
  if (rc) return rc;
  struct dirent *e;
  char path[DIR_PATH_MAX];
  /* every step_N directory, sealed or not: a new run leaves none of another's */
  while (!rc && (e = readdir(d))) {
    struct stat st;
    if (remat__step_name(e->d_name, strlen(e->d_name)) < 0) continue;
    if (join_path(path, sizeof path, dir, e->d_name)) rc = too_long(dir, err);
    else if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      rc = remove_step_dir(path, err);
      if (!rc && removed) (*removed)++;
    }
  }
  closedir(d);
  return rc;
}

/* The lock a run holds on its checkpoint directory, from its first step to
 * its end: a file of its own there (a lock on the directory itself would
 * be taken again by the saves that rename into it), locked with flock; it
 * holds the process id of its holder, for the message of a run refused. */
#define LOCK_FILE ".remat-lock"

int remat_checkpoint_dir_lock(const char *dir, int *fd_out, remat_error *err) {
  char path[DIR_PATH_MAX];
  *fd_out = -1;
  if (join_path(path, sizeof path, dir, LOCK_FILE)) return too_long(dir, err);
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0)
    return remat__errorf(err, REMAT_EIO, "cannot lock checkpoint directory '%s': %s: %s; check "
                         "that it is writable", dir, path, strerror(errno));
  int locked;
  while ((locked = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    int e = errno;
    char pid[32] = "";
    ssize_t got = pread(fd, pid, sizeof pid - 1, 0);
    pid[got > 0 ? got : 0] = 0;
    pid[strcspn(pid, "\n")] = 0;
    close(fd);
    if (e == EWOULDBLOCK)
      return remat__errorf(err, REMAT_EIO, "the checkpoint directory '%s' is in use by another "
                           "run%s%s (it holds %s's lock): wait for that run to end, or give this "
                           "run another --checkpoint-dir", dir, *pid ? ", process " : "", pid,
                           LOCK_FILE);
    return remat__errorf(err, REMAT_EIO, "cannot lock checkpoint directory '%s': %s", dir,
                         strerror(e));
  }
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) != n) { /* the pid is a courtesy */
  }
  *fd_out = fd;
  return 0;
}

void remat_checkpoint_dir_unlock(int fd) {
  if (fd >= 0) close(fd); /* and its lock; the file stays for the next run */
}
