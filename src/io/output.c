/* output.c: saving files so that a crash, a full disk or a second run never
 * leaves a mixed or truncated file, and never replaces something that is not
 * a file.
 *
 * A save follows the destination's symlinks to the name it will replace (the
 * target), refuses a target that exists and is not a regular file, writes a
 * private temporary made by mkstemp in the target's directory, checks every
 * write, fsyncs and closes it, takes an exclusive flock on the directory,
 * checks the target once more, renames the temporary over it, fsyncs the
 * directory and drops the lock. Any failure removes the temporary. The same
 * resolution serves remat_output_check (can this be saved to later?) and
 * remat_same_file (would this save replace that input?).
 *
 * The names built on the way (links followed, temporaries, directories)
 * are plain malloc: a save, a check of an output or the opening of a log
 * happens before the first step or between steps, and holds a path's bytes
 * only while it runs, so neither the planned nor a step's measured peak
 * counts them (both would otherwise grow with the length of a path). */
#define _DEFAULT_SOURCE /* flock, realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"

/* Temporaries are named TARGET.tmp.XXXXXX; a longer target name is cut so the
 * temporary's name stays within NAME_MAX (255) bytes. */
#define TMP_SUFFIX ".tmp.XXXXXX"
#define TMP_BASE_MAX 200
/* Symlinks followed before giving up, as the kernel's ELOOP limit. */
#define MAX_LINKS 40

static char *dup_range(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

static char *dup_str(const char *s) { return dup_range(s, strlen(s)); }

/* dir + "/" + name (name as is when it is absolute or dir is NULL). */
static char *join(const char *dir, const char *name, size_t name_len) {
  if (!dir || name[0] == '/') return dup_range(name, name_len);
  size_t dl = strlen(dir);
  char *s = malloc(dl + 1 + name_len + 1);
  if (!s) return NULL;
  memcpy(s, dir, dl);
  s[dl] = '/';
  memcpy(s + dl + 1, name, name_len);
  s[dl + 1 + name_len] = 0;
  return s;
}

/* The directory part of path ("." when there is none, "/" for "/x"), owned. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return dup_str(".");
  if (slash == path) return dup_str("/");
  return dup_range(path, (size_t)(slash - path));
}

static const char *base_of(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static const char *kind_of(mode_t m) { return remat__file_kind(m); }

/* A save may replace only a regular file (or create a new name). */
static int refuse_kind(const char *path, const char *target, mode_t m, const char *what,
                       remat_error *err) {
  if (S_ISDIR(m))
    return remat__errorf(err, REMAT_EIO,
                         "cannot save %s to '%s': it is a directory; give a file name, e.g. "
                         "'%s/model.bin'",
                         what, path, path);
  if (strcmp(path, target) != 0)
    return remat__errorf(err, REMAT_EIO,
                         "cannot save %s to '%s': it links to '%s', which is %s, not a regular "
                         "file; give a file name instead",
                         what, path, target, kind_of(m));
  return remat__errorf(err, REMAT_EIO,
                       "cannot save %s to '%s': it is %s, not a regular file, and would be "
                       "replaced; give a file name instead",
                       what, path, kind_of(m));
}

/* Follows path's symlinks to the name a save replaces. *target (owned) is
 * that name; *exists says whether it exists, and then *st is its lstat. A
 * target that exists and is not a regular file is refused. */
static int resolve(const char *path, const char *what, char **target, struct stat *st,
                   int *exists, remat_error *err) {
  *target = NULL;
  *exists = 0;
  if (!path || !*path)
    return remat__errorf(err, REMAT_EINVAL, "no %s path given; pass the file to write", what);
  char *cur = dup_str(path);
  if (!cur) return remat__errorf(err, REMAT_ENOMEM, "out of memory naming '%s'", path);
  for (int hops = 0;; hops++) {
    if (lstat(cur, st) != 0) {
      if (errno == ENOENT) break; /* a new name: the save creates it */
      int rc = remat__errorf(err, REMAT_EIO, "cannot save %s to '%s': %s; check the path",
                             what, path, strerror(errno));
      free(cur);
      return rc;
    }
    if (!S_ISLNK(st->st_mode)) {
      if (!S_ISREG(st->st_mode)) {
        int rc = refuse_kind(path, cur, st->st_mode, what, err);
        free(cur);
        return rc;
      }
      *exists = 1;
      break;
    }
    /* a symlink: continue at what it points to, relative to its directory */
    char link[PATH_MAX];
    ssize_t n = hops < MAX_LINKS ? readlink(cur, link, sizeof link) : -1;
    if (n < 0 || (size_t)n >= sizeof link) {
      int rc = remat__errorf(err, REMAT_EIO,
                             "cannot save %s to '%s': cannot follow the symbolic link '%s': %s",
                             what, path, cur,
                             hops >= MAX_LINKS ? strerror(ELOOP)
                             : n < 0           ? strerror(errno)
                                               : strerror(ENAMETOOLONG));
      free(cur);
      return rc;
    }
    char *dir = link[0] == '/' ? NULL : dir_of(cur);
    char *next = (link[0] == '/' || dir) ? join(dir, link, (size_t)n) : NULL;
    free(dir);
    free(cur);
    if (!next) return remat__errorf(err, REMAT_ENOMEM, "out of memory naming '%s'", path);
    cur = next;
  }
  if (base_of(cur)[0] == 0) { /* "dir/" that does not exist yet */
    int rc = remat__errorf(err, REMAT_EINVAL,
                           "cannot save %s to '%s': the name ends in '/'; give a file name",
                           what, path);
    free(cur);
    return rc;
  }
  *target = cur;
  return 0;
}

/* The process's umask without changing it (umask() would, for every thread). */
static mode_t current_umask(void) {
  FILE *f = fopen("/proc/self/status", "r");
  unsigned mask = 022;
  if (f) {
    char line[128];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Umask: %o", &mask) == 1) break;
    fclose(f);
  }
  return (mode_t)mask;
}

/* Best effort: the owner and group of the file being replaced (root may set
 * both, others a group they belong to); otherwise the new file is ours, as
 * any file this process creates. */
static void keep_owner(int fd, const struct stat *st) {
  if (st->st_uid == geteuid() && st->st_gid == getegid()) return;
  if (fchown(fd, st->st_uid, st->st_gid) == 0) return;
  if (fchown(fd, (uid_t)-1, st->st_gid) == 0) return;
}

/* The temporaries of the saves in progress, for a signal handler to remove
 * (remat_output_remove_temporaries): a slot's name is written before it is
 * marked used, and unmarked before the name goes, so a handler that runs at
 * any moment reads a whole name. A save that finds every slot taken is not
 * tracked (saves run one at a time; nested ones are few). */
#define TMP_SLOTS 8
static char tmp_names[TMP_SLOTS][PATH_MAX];
static volatile sig_atomic_t tmp_used[TMP_SLOTS];

static void track_temp(const char *name) {
  if (strlen(name) >= PATH_MAX) return;
  for (int i = 0; i < TMP_SLOTS; i++)
    if (!tmp_used[i]) {
      memcpy(tmp_names[i], name, strlen(name) + 1);
      tmp_used[i] = 1;
      return;
    }
}

static void untrack_temp(const char *name) {
  for (int i = 0; i < TMP_SLOTS; i++)
    if (tmp_used[i] && !strcmp(tmp_names[i], name)) tmp_used[i] = 0;
}

int remat_output_remove_temporaries(char *names, size_t cap) {
  int removed = 0;
  size_t n = 0;
  for (int i = 0; i < TMP_SLOTS; i++) {
    if (!tmp_used[i]) continue;
    tmp_used[i] = 0;
    if (unlink(tmp_names[i]) != 0) continue; /* renamed already, or gone */
    removed++;
    /* no stdio here: a signal handler calls this */
    for (const char *p = removed > 1 ? "; " : ""; names && *p && n + 1 < cap; p++) names[n++] = *p;
    for (const char *p = tmp_names[i]; names && *p && n + 1 < cap; p++) names[n++] = *p;
  }
  if (names && cap) names[n] = 0;
  return removed;
}

/* Creates target's unique temporary; *tmp (owned) is its name. */
static int make_temp(const char *path, const char *target, const char *what, int *fd, char **tmp,
                     remat_error *err) {
  char *dir = dir_of(target);
  const char *base = base_of(target);
  size_t bl = strlen(base);
  if (bl > TMP_BASE_MAX) bl = TMP_BASE_MAX;
  size_t dl = dir ? strlen(dir) : 0;
  char *name = dir ? malloc(dl + 1 + bl + sizeof TMP_SUFFIX) : NULL;
  if (!name) {
    free(dir);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory naming '%s'", path);
  }
  memcpy(name, dir, dl);
  name[dl] = '/';
  memcpy(name + dl + 1, base, bl);
  memcpy(name + dl + 1 + bl, TMP_SUFFIX, sizeof TMP_SUFFIX);
  *fd = mkstemp(name);
  if (*fd < 0) {
    int e = errno;
    struct stat ds;
    int rc;
    if (stat(dir, &ds) != 0)
      rc = remat__errorf(err, REMAT_EIO,
                         "cannot save %s to '%s': directory '%s': %s; create the directory "
                         "first",
                         what, path, dir, strerror(errno));
    else
      rc = remat__errorf(err, REMAT_EIO,
                         "cannot save %s to '%s': cannot create a file in '%s': %s; check that "
                         "the directory is writable",
                         what, path, dir, strerror(e));
    free(dir);
    free(name);
    return rc;
  }
  free(dir);
  *tmp = name;
  return 0;
}

/* ------------------------------------------------------------- writing */

int remat__wfile_open(remat__wfile *w, const char *path, const char *what, remat_error *err) {
  *w = (remat__wfile){.fd = -1, .dirfd = -1, .path = path ? path : "", .what = what};
  struct stat st;
  int exists, rc = resolve(path, what, &w->target, &st, &exists, err);
  if (rc) return rc;
  if ((rc = make_temp(w->path, w->target, what, &w->fd, &w->tmp, err))) goto fail;
  track_temp(w->tmp);
  /* mkstemp makes the file 0600 and ours; give it the owner and the
   * permission bits of the file it replaces, or those a new file would get */
  if (exists) keep_owner(w->fd, &st);
  mode_t mode = exists ? st.st_mode & 0777 : 0666 & ~current_umask();
  if (fchmod(w->fd, mode) != 0) {
    rc = remat__errorf(err, REMAT_EIO, "cannot save %s to '%s': setting the mode of '%s': %s",
                       what, w->path, w->tmp, strerror(errno));
    goto fail;
  }
  /* The directory is opened now so a failure shows before any data is
   * written. One that cannot be opened for reading (write-only) is still
   * saved into, without the lock and the directory fsync. */
  char *dir = dir_of(w->target);
  if (!dir) {
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory naming '%s'", w->path);
    goto fail;
  }
  w->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  free(dir);
  return 0;

fail:
  remat__wfile_abort(w);
  return rc;
}

int remat__wfile_write(remat__wfile *w, const void *buf, size_t bytes, remat_error *err) {
  const char *p = buf;
  while (bytes > 0) {
    size_t chunk = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
    ssize_t n = write(w->fd, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : 0;
      return remat__errorf(err, REMAT_EIO, "cannot save %s to '%s': writing '%s' failed: %s; %s",
                           w->what, w->path, w->tmp, e ? strerror(e) : "no progress",
                           e == EFBIG ? "the file size limit (ulimit -f) is too low for it"
                                      : "check free disk space");
    }
    p += n;
    bytes -= (size_t)n;
  }
  return 0;
}

int remat__wfile_write_f32(remat__wfile *w, const float *v, size_t n, remat_error *err) {
  const uint16_t one = 1;
  if (*(const uint8_t *)&one == 1) return remat__wfile_write(w, v, n * sizeof(float), err);
  uint8_t chunk[8192]; /* a big-endian host: each float's bytes reversed */
  for (size_t done = 0; done < n;) {
    size_t k = n - done < sizeof chunk / 4 ? n - done : sizeof chunk / 4;
    for (size_t i = 0; i < k; i++) {
      uint32_t u;
      memcpy(&u, v + done + i, 4);
      for (int b = 0; b < 4; b++) chunk[4 * i + (size_t)b] = (uint8_t)(u >> (8 * b));
    }
    int rc = remat__wfile_write(w, chunk, k * 4, err);
    if (rc) return rc;
    done += k;
  }
  return 0;
}

void remat__wfile_abort(remat__wfile *w) {
  if (w->fd >= 0) close(w->fd);
  if (w->dirfd >= 0) close(w->dirfd);
  if (w->tmp) unlink(w->tmp), untrack_temp(w->tmp);
  free(w->tmp);
  free(w->target);
  w->fd = w->dirfd = -1;
  w->tmp = w->target = NULL;
}

int remat__wfile_commit(remat__wfile *w, remat_error *err) {
  int rc = 0, fd = w->fd;
  w->fd = -1;
  if (fsync(fd) != 0) {
    rc = remat__errorf(err, REMAT_EIO,
                       "cannot save %s to '%s': syncing '%s' to disk failed: %s; check free "
                       "disk space and the device",
                       w->what, w->path, w->tmp, strerror(errno));
    close(fd);
    goto fail;
  }
  if (close(fd) != 0) {
    rc = remat__errorf(err, REMAT_EIO, "cannot save %s to '%s': closing '%s' failed: %s",
                       w->what, w->path, w->tmp, strerror(errno));
    goto fail;
  }
  /* Under the lock, nothing another remat process saves into this directory
   * can come between the last look at the target and the rename. */
  if (w->dirfd >= 0)
    while (flock(w->dirfd, LOCK_EX) != 0 && errno == EINTR) {
    }
  struct stat st;
  if (lstat(w->target, &st) == 0 && !S_ISREG(st.st_mode)) {
    rc = refuse_kind(w->path, w->target, st.st_mode, w->what, err);
    goto fail;
  }
  if (rename(w->tmp, w->target) != 0) {
    rc = remat__errorf(err, REMAT_EIO, "cannot save %s to '%s': renaming '%s' over '%s': %s",
                       w->what, w->path, w->tmp, w->target, strerror(errno));
    goto fail;
  }
  untrack_temp(w->tmp);
  free(w->tmp);
  w->tmp = NULL;
  /* The rename is durable once the directory is; file systems that cannot
   * sync a directory say EINVAL, and the file is saved all the same. */
  if (w->dirfd >= 0 && fsync(w->dirfd) != 0 && errno != EINVAL && errno != ENOTSUP)
    rc = remat__errorf(err, REMAT_EIO,
                       "saved %s '%s' but syncing its directory failed: %s; the file may not "
                       "survive a power loss",
                       w->what, w->path, strerror(errno));
fail:
  remat__wfile_abort(w); /* also drops the lock with the directory's fd */
  return rc;
}

/* ------------------------------------------------------- public checks */

/* 1 when another process holds the lock of the regular file at path (a
 * log or trace remat_output_stream_open keeps open). */
static int locked_elsewhere(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), busy = 0;
  if (fd < 0) return 0;
  while (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    busy = errno == EWOULDBLOCK;
    break;
  }
  close(fd); /* and its lock */
  return busy;
}

static int busy_error(const char *what, const char *path, remat_error *err) {
  return remat__errorf(err, REMAT_EIO, "the %s '%s' is being written by another run (it holds "
                       "the file's lock): give this run another path", what, path);
}

int remat_output_check(const char *path, remat_error *err) {
  static const char what[] = "output";
  char *target, *tmp;
  struct stat st;
  int exists, fd;
  int rc = resolve(path, what, &target, &st, &exists, err);
  if (rc) return rc;
  if (exists && locked_elsewhere(target)) {
    rc = busy_error(what, path, err);
    goto done;
  }
  if ((rc = make_temp(path, target, what, &fd, &tmp, err))) goto done;
  close(fd);
  unlink(tmp);
  free(tmp);
  /* In a sticky directory (/tmp) only the owner may replace a file. */
  char *dir = dir_of(target);
  struct stat ds;
  uid_t me = geteuid();
  if (exists && dir && stat(dir, &ds) == 0 && (ds.st_mode & S_ISVTX) && me != 0 &&
      st.st_uid != me && ds.st_uid != me)
    rc = remat__errorf(err, REMAT_EIO,
                       "cannot save %s to '%s': another user owns it in the sticky directory "
                       "'%s', so it cannot be replaced; choose another name",
                       what, path, dir);
  free(dir);
done:
  free(target);
  return rc;
}

int remat_output_dir_check(const char *dir, remat_error *err) {
  if (!dir || !*dir)
    return remat__errorf(err, REMAT_EINVAL, "no directory given; pass the directory to write");
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT)
      return remat__errorf(err, REMAT_EIO, "cannot use directory '%s': %s", dir, strerror(errno));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
      return remat__errorf(err, REMAT_EIO,
                           "cannot create directory '%s': %s; create its parent or choose "
                           "another path",
                           dir, strerror(errno));
  }
  int dfd, rc = remat__open(dir, O_RDONLY, REMAT__OPEN_DIR, "output", &dfd, NULL, err);
  if (rc) return rc;
  close(dfd);
  /* prove a file can be made there: create and remove a unique one */
  char probe[PATH_MAX];
  int pn = snprintf(probe, sizeof probe, "%s/.remat-probe.XXXXXX", dir);
  if (pn < 0 || (size_t)pn >= sizeof probe)
    return remat__errorf(err, REMAT_EINVAL, "directory path '%.200s' is too long", dir);
  int fd = mkstemp(probe);
  if (fd < 0)
    return remat__errorf(err, REMAT_EIO,
                         "cannot write in directory '%s': %s; check that it is writable", dir,
                         strerror(errno));
  close(fd);
  unlink(probe);
  return 0;
}

/* Where a save to path would put its file: the symlinks followed, then the
 * real path of the directory plus the name; NULL if that is unknown. */
static char *canonical_name(const char *path) {
  char *target;
  struct stat st;
  int exists;
  if (resolve(path, "output", &target, &st, &exists, NULL)) return NULL;
  char *dir = dir_of(target);
  char *real = dir ? realpath(dir, NULL) : NULL;
  char *name = NULL;
  if (real) {
    const char *base = base_of(target);
    name = join(strcmp(real, "/") == 0 ? "" : real, base, strlen(base));
  }
  free(real);
  free(dir);
  free(target);
  return name;
}

int remat_same_file(const char *a, const char *b) {
  if (!a || !b || !*a || !*b) return 0;
  struct stat sa, sb;
  int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea || eb) return 0;
  char *ca = canonical_name(a), *cb = canonical_name(b);
  int same = ca && cb ? strcmp(ca, cb) == 0 : strcmp(a, b) == 0;
  free(ca);
  free(cb);
  return same;
}

/* ------------------------------------------------ other ways to write */

int remat_save_bytes(const char *path, const char *what, const void *bytes, size_t n,
                     remat_error *err) {
  remat__wfile w;
  int rc = remat__wfile_open(&w, path, what ? what : "file", err);
  if (rc) return rc;
  if ((rc = remat__wfile_write(&w, bytes, n, err))) {
    remat__wfile_abort(&w);
    return rc;
  }
  return remat__wfile_commit(&w, err);
}

static FILE *open_stream(const char *path, const char *what, int append, remat_error *err) {
  if (!what) what = "output";
  char *target;
  struct stat st;
  int exists, fd;
  /* the save's rules first: the same messages for a FIFO, a link to one, a
   * directory; then remat__open checks the descriptor itself */
  if (resolve(path, what, &target, &st, &exists, err)) return NULL;
  free(target);
  /* truncated only once it is this process's: a second run given the same
   * path is refused, and the first one's lines stay whole */
  if (remat__open(path, O_WRONLY | O_CREAT, REMAT__OPEN_FILE, what, &fd, NULL, err)) return NULL;
  int locked;
  while ((locked = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (locked != 0 && errno == EWOULDBLOCK) {
    busy_error(what, path, err);
    close(fd);
    return NULL;
  }
  if (append ? lseek(fd, 0, SEEK_END) < 0 : ftruncate(fd, 0) != 0) {
    remat__errorf(err, REMAT_EIO, "cannot write %s '%s': %s", what, path, strerror(errno));
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, append ? "a" : "w");
  if (!f) {
    remat__errorf(err, REMAT_EIO, "cannot write %s '%s': %s", what, path, strerror(errno));
    close(fd);
  }
  return f;
}

FILE *remat_output_stream_open(const char *path, const char *what, remat_error *err) {
  return open_stream(path, what, 0, err);
}

FILE *remat_output_stream_append(const char *path, const char *what, remat_error *err) {
  return open_stream(path, what, 1, err);
}

void remat_ignore_sigxfsz(void) {
  struct sigaction old, ign;
  if (sigaction(SIGXFSZ, NULL, &old) != 0) return;
  if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) return; /* the program's */
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGXFSZ, &ign, NULL);
}
