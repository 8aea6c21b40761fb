/* ckptdir.c: self-checking checkpoint directories. DIR/step_NNNNNNNN/ holds
 * model.bin (llm.c weights), one training state per rank (state.bin, or
 * state_rank_R.bin), the run's settings (settings, text; checked like the
 * rest when present) and DONE, written last. DONE is a manifest:
 *
 *   remat checkpoint 1
 *   step 12
 *   seed 1337
 *   settings 0123456789abcdef      (remat_run_id.settings, hex)
 *   file model.bin 4380672 e3069283  (name, size in bytes, CRC32C in hex)
 *   file state.bin 8768520 1d2c3b4a
 *   crc 5a6b7c8d                   (CRC32C of every byte before this line)
 *
 * Verifying a directory checks DONE's own CRC, every listed file's size and
 * CRC32C over its whole content, that the files remat would read are all
 * listed (no state file from elsewhere sits beside them), and that every
 * state file's header holds DONE's step and run identity and its own rank.
 * So a file corrupted, truncated, missing, or copied in from another step
 * or another run is caught before anything is loaded.
 *
 * Buffers here are transient and freed before returning; they are taken
 * with plain malloc because sealing and verifying run between steps or
 * before the first one, outside what a step's measured peak counts. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "io/io_internal.h"

#define MANIFEST_HEAD "remat checkpoint 1\n"
#define LEGACY_DONE "done\n"
#define READ_CHUNK ((size_t)1 << 20)
#define DIR_PATH_MAX 4096

/* ------------------------------------------------------------ names */

/* step_NNN...: the step, or -1 when name is not a step directory's (len
 * bytes of name). */
int64_t remat__step_name(const char *name, size_t len) {
  if (len < 6 || strncmp(name, "step_", 5) != 0) return -1;
  int64_t s = 0;
  for (size_t i = 5; i < len; i++) {
    if (name[i] < '0' || name[i] > '9' || s > (INT64_MAX - 9) / 10) return -1;
    s = s * 10 + (name[i] - '0');
  }
  return s;
}

int remat_checkpoint_step_of(const char *step_dir, int64_t *step) {
  if (!step_dir) return REMAT_EINVAL;
  size_t len = strlen(step_dir);
  while (len > 1 && step_dir[len - 1] == '/') len--;
  size_t b = len;
  while (b > 0 && step_dir[b - 1] != '/') b--;
  int64_t s = remat__step_name(step_dir + b, len - b);
  if (s < 0) return REMAT_EINVAL;
  *step = s;
  return 0;
}

/* The files remat reads from a step directory: model.bin, state.bin,
 * state_rank_R.bin and settings (the run's settings, src/job/settings.c;
 * absent from older checkpoints). *rank is -1 for model.bin, -2 for
 * settings, 0 for state.bin, R. */
#define SETTINGS_FILE "settings"
static int is_ckpt_file(const char *name, int64_t *rank) {
  if (!strcmp(name, "model.bin")) return *rank = -1, 1;
  if (!strcmp(name, SETTINGS_FILE)) return *rank = -2, 3;
  if (!strcmp(name, "state.bin")) return *rank = 0, 1;
  size_t n = strlen(name);
  if (n > 15 && !strncmp(name, "state_rank_", 11) && !strcmp(name + n - 4, ".bin")) {
    int64_t r = 0;
    for (size_t i = 11; i < n - 4; i++) {
      if (name[i] < '0' || name[i] > '9' || r > 1000000000) return 0;
      r = r * 10 + (name[i] - '0');
    }
    if (n - 4 - 11 > 1 && name[11] == '0') return 0; /* one spelling per rank */
    *rank = r;
    return 2;
  }
  return 0;
}

static int join_path(char *out, size_t cap, const char *dir, const char *name) {
  int n = snprintf(out, cap, "%s/%s", dir, name);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int too_long(const char *dir, remat_error *err) {
  return remat__errorf(err, REMAT_EINVAL, "checkpoint directory path '%.200s' is too long", dir);
}

/* ------------------------------------------------------- the manifest */

void remat__manifest_free(remat__manifest *m) {
  free(m->files);
  memset(m, 0, sizeof *m);
}

static int add_file(remat__manifest *m, const char *name, uint64_t size, uint32_t crc) {
  if (m->nfiles == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 8;
    remat__manifest_file *f = realloc(m->files, cap * sizeof *f);
    if (!f) return REMAT_ENOMEM;
    m->files = f;
    m->cap = cap;
  }
  remat__manifest_file *f = &m->files[m->nfiles++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->size = size;
  f->crc = crc;
  return 0;
}

/* One line of at most cap-1 bytes starting at *pos, without its '\n'; -1
 * when the text ends before the line does, -2 when it is too long. */
static int next_line(const char *t, size_t n, size_t *pos, char *line, size_t cap) {
  size_t i = *pos;
  while (i < n && t[i] != '\n') i++;
  if (i >= n) return -1;
  if (i - *pos >= cap) return -2;
  memcpy(line, t + *pos, i - *pos);
  line[i - *pos] = 0;
  *pos = i + 1;
  return 0;
}

static int bad_manifest(remat_error *err, const char *name, const char *what, size_t line) {
  return remat__errorf(err, REMAT_EFORMAT,
                       "'%s' is not a valid checkpoint manifest: %s at line %zu; the "
                       "checkpoint was not completed or DONE was damaged",
                       name, what, line);
}

int remat__manifest_parse(remat__manifest *m, const void *bytes, size_t n, const char *name,
                          remat_error *err) {
  memset(m, 0, sizeof *m);
  const char *t = bytes;
  if (n == strlen(LEGACY_DONE) && !memcmp(t, LEGACY_DONE, n)) {
    m->legacy = 1;
    m->step = -1;
    return 0;
  }
  if (n > REMAT_MANIFEST_MAX_BYTES)
    return bad_manifest(err, name, "too large", 0);
  if (memchr(t, 0, n)) return bad_manifest(err, name, "a NUL byte", 0);
  size_t pos = 0, lineno = 0;
  char line[160];
  int have_step = 0, have_seed = 0, have_settings = 0, rc = 0;
  for (;;) {
    size_t start = pos;
    lineno++;
    int got = next_line(t, n, &pos, line, sizeof line);
    if (got) {
      rc = bad_manifest(err, name, got == -1 ? "no final crc line" : "a line too long", lineno);
      break;
    }
    if (lineno == 1) {
      if (strcmp(line, "remat checkpoint 1") != 0) {
        rc = bad_manifest(err, name, "no 'remat checkpoint 1' header", lineno);
        break;
      }
      continue;
    }
    char key[16], fname[REMAT_MANIFEST_NAME_MAX + 1], tail;
    unsigned long long a, b;
    unsigned c32;
    if (sscanf(line, "crc %8x%c", &c32, &tail) == 1 && strlen(line) == 12) {
      if (pos != n) {
        rc = bad_manifest(err, name, "bytes after the crc line", lineno);
        break;
      }
      uint32_t have = remat_crc32c(0, t, start);
      if (have != c32) {
        rc = remat__errorf(err, REMAT_EFORMAT,
                           "checkpoint manifest '%s' is damaged: its crc says %08x, its "
                           "content has %08x",
                           name, c32, (unsigned)have);
        break;
      }
      if (!have_step || !have_seed || !have_settings)
        rc = bad_manifest(err, name, "no step, seed or settings line", lineno);
      break;
    }
    if (sscanf(line, "%15s", key) != 1) {
      rc = bad_manifest(err, name, "an empty line", lineno);
      break;
    }
    if (!strcmp(key, "step") && !have_step && sscanf(line, "step %llu%c", &a, &tail) == 1 &&
        a <= (unsigned long long)INT64_MAX) {
      m->step = (int64_t)a;
      have_step = 1;
    } else if (!strcmp(key, "seed") && !have_seed && sscanf(line, "seed %llu%c", &a, &tail) == 1) {
      m->run.seed = a;
      have_seed = 1;
    } else if (!strcmp(key, "settings") && !have_settings &&
               sscanf(line, "settings %16llx%c", &a, &tail) == 1 && strlen(line) == 25) {
      m->run.settings = a;
      have_settings = 1;
    } else if (!strcmp(key, "file") &&
               sscanf(line, "file %" REMAT_MANIFEST_NAME_FMT "s %llu %8x%c", fname, &b, &c32,
                      &tail) == 3) {
      int64_t r;
      int dup = 0;
      for (size_t i = 0; i < m->nfiles; i++) dup |= !strcmp(m->files[i].name, fname);
      if (!is_ckpt_file(fname, &r) || dup || m->nfiles >= REMAT_MANIFEST_MAX_FILES) {
        const char *why = dup ? "a file listed twice"
                          : m->nfiles >= REMAT_MANIFEST_MAX_FILES ? "too many files"
                                                                  : "a file remat does not write";
        rc = bad_manifest(err, name, why, lineno);
        break;
      }
      if ((rc = add_file(m, fname, b, c32))) {
        rc = remat__errorf(err, REMAT_ENOMEM, "out of memory reading '%s'", name);
        break;
      }
    } else {
      rc = bad_manifest(err, name, "an unknown or repeated line", lineno);
      break;
    }
  }
  if (rc) remat__manifest_free(m);
  return rc;
}

/* ------------------------------------------------------- reading files */

static int read_some(int fd, void *buf, size_t cap, size_t *got) {
  for (;;) {
    ssize_t n = read(fd, buf, cap);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    *got = (size_t)n;
    return 0;
  }
}

/* The size and CRC32C of the file at path, read to its end. */
static int checksum_file(const char *path, const char *label, uint64_t *size, uint32_t *crc,
                         remat_error *err) {
  return remat_file_checksum(path, "checkpoint file", label, size, crc, err);
}

int remat_file_checksum(const char *path, const char *what, const char *label, uint64_t *size,
                        uint32_t *crc, remat_error *err) {
  int fd, rc = remat__open(path, O_RDONLY, REMAT__OPEN_FILE, what, &fd, NULL, err);
  if (rc) return rc;
  unsigned char *buf = malloc(READ_CHUNK);
  if (!buf) {
    close(fd);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading '%s'", path);
  }
  uint32_t c = 0;
  uint64_t total = 0;
  for (;;) {
    size_t got;
    if (read_some(fd, buf, READ_CHUNK, &got)) {
      rc = remat__errorf(err, REMAT_EIO, "cannot read %s ('%s'): %s", label, path,
                         strerror(errno));
      break;
    }
    if (!got) break;
    c = remat_crc32c(c, buf, got);
    total += got;
  }
  free(buf);
  close(fd);
  *size = total;
  *crc = c;
  return rc;
}

/* Reads DONE (at most REMAT_MANIFEST_MAX_BYTES + 1 bytes) and parses it. */
static int read_manifest(const char *done, remat__manifest *m, remat_error *err) {
  int fd, rc = remat__open(done, O_RDONLY, REMAT__OPEN_FILE, "checkpoint marker", &fd, NULL, err);
  if (rc) return rc;
  size_t cap = REMAT_MANIFEST_MAX_BYTES + 1, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading '%s'", done);
  }
  while (n < cap) {
    size_t got;
    if (read_some(fd, buf + n, cap - n, &got)) {
      rc = remat__errorf(err, REMAT_EIO, "cannot read '%s': %s", done, strerror(errno));
      break;
    }
    if (!got) break;
    n += got;
  }
  close(fd);
  if (!rc) rc = remat__manifest_parse(m, buf, n, done, err);
  free(buf);
  return rc;
}

/* ------------------------------------------------------------- sealing */

/* dir opened for listing into *out (what names it in the open's messages:
 * "checkpoint", "checkpoints"); ckptrun.c lists with it too. */
int remat__open_listing(const char *dir, const char *what, DIR **out, remat_error *err) {
  int dfd, rc = remat__open(dir, O_RDONLY, REMAT__OPEN_DIR, what, &dfd, NULL, err);
  *out = NULL;
  if (rc) return rc;
  if ((*out = fdopendir(dfd))) return 0;
  close(dfd);
  return remat__errorf(err, REMAT_EIO, "cannot list '%s': %s", dir, strerror(errno));
}

/* Collects the checkpoint files of step_dir into m (name order: model.bin,
 * then state files by rank), with their sizes and CRCs, and checks the
 * state files: one per rank of one run at one step. Fills m->step and
 * m->run from the states when step < 0 or run is NULL. */
static int collect(const char *step_dir, int64_t step, const remat_run_id *run,
                   remat__manifest *m, remat_error *err) {
  memset(m, 0, sizeof *m);
  DIR *d;
  int rc = remat__open_listing(step_dir, "checkpoint", &d, err);
  if (rc) return rc;
  int have_model = 0, have_plain = 0, have_settings = 0;
  int64_t max_rank = -1, nranked = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int64_t r;
    int kind = is_ckpt_file(e->d_name, &r);
    if (!kind) continue;
    if (r == -2) have_settings = 1;
    else if (r < 0) have_model = 1;
    else if (kind == 1) have_plain = 1;
    else {
      nranked++;
      if (r > max_rank) max_rank = r;
    }
  }
  closedir(d);
  if (!have_model || (!have_plain && !nranked) || (have_plain && nranked) ||
      (nranked && max_rank + 1 != nranked))
    return remat__errorf(err, REMAT_EINVAL,
                         "cannot seal checkpoint '%s': it needs model.bin and either state.bin "
                         "or state_rank_0.bin .. state_rank_R.bin, one per rank; write every "
                         "rank's files first",
                         step_dir);
  int64_t ranks = have_plain ? 1 : nranked;
  char path[DIR_PATH_MAX], name[REMAT_MANIFEST_NAME_MAX + 1];
  m->step = step;
  if (run) m->run = *run;
  for (int64_t r = -2; r < ranks && !rc; r++) {
    if (r == -2 && !have_settings) continue;
    if (r == -2) snprintf(name, sizeof name, SETTINGS_FILE);
    else if (r < 0) snprintf(name, sizeof name, "model.bin");
    else if (have_plain) snprintf(name, sizeof name, "state.bin");
    else snprintf(name, sizeof name, "state_rank_%lld.bin", (long long)r);
    if (join_path(path, sizeof path, step_dir, name)) return too_long(step_dir, err);
    if (r >= 0) {
      remat_state_header h;
      remat_run_id id;
      if ((rc = remat_state_peek(path, &h, err))) break;
      remat_state_run_id(&h, &id);
      if (m->step < 0) m->step = h.step;
      if (r == 0 && !run) m->run = id;
      if (h.step != m->step || id.seed != m->run.seed || id.settings != m->run.settings ||
          h.rank != r || h.ranks != ranks) {
        rc = remat__errorf(err, REMAT_EINVAL,
                           "cannot seal checkpoint '%s': %s holds rank %lld of %lld at step "
                           "%lld of the run with seed %llu, settings %016llx; the checkpoint "
                           "is rank %lld of %lld at step %lld, seed %llu, settings %016llx",
                           step_dir, name, (long long)h.rank, (long long)h.ranks,
                           (long long)h.step, (unsigned long long)id.seed,
                           (unsigned long long)id.settings, (long long)r, (long long)ranks,
                           (long long)m->step, (unsigned long long)m->run.seed,
                           (unsigned long long)m->run.settings);
        break;
      }
    }
    uint64_t size;
    uint32_t crc;
    if ((rc = checksum_file(path, name, &size, &crc, err))) break;
    if ((rc = add_file(m, name, size, crc)))
      rc = remat__errorf(err, REMAT_ENOMEM, "out of memory sealing '%s'", step_dir);
  }
  if (!rc && m->step < 0)
    rc = remat__errorf(err, REMAT_EINVAL, "cannot seal checkpoint '%s': no step given", step_dir);
  if (rc) remat__manifest_free(m);
  return rc;
}

int remat_checkpoint_seal(const char *step_dir, int64_t step, const remat_run_id *run,
                          remat_error *err) {
  remat__manifest m;
  int rc = collect(step_dir, step, run, &m, err);
  if (rc) return rc;
  size_t cap = 256 + m.nfiles * (REMAT_MANIFEST_NAME_MAX + 48), n = 0;
  char *text = malloc(cap), path[DIR_PATH_MAX];
  if (!text) {
    remat__manifest_free(&m);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory sealing '%s'", step_dir);
  }
  n += (size_t)snprintf(text + n, cap - n, MANIFEST_HEAD "step %lld\nseed %llu\nsettings %016llx\n",
                        (long long)m.step, (unsigned long long)m.run.seed,
                        (unsigned long long)m.run.settings);
  for (size_t i = 0; i < m.nfiles; i++)
    n += (size_t)snprintf(text + n, cap - n, "file %s %llu %08x\n", m.files[i].name,
                          (unsigned long long)m.files[i].size, (unsigned)m.files[i].crc);
  n += (size_t)snprintf(text + n, cap - n, "crc %08x\n", (unsigned)remat_crc32c(0, text, n));
  remat__manifest_free(&m);
  if (join_path(path, sizeof path, step_dir, "DONE")) rc = too_long(step_dir, err);
  else rc = remat_save_bytes(path, "checkpoint marker", text, n, err);
  free(text);
  return rc;
}

/* The old marker's entry point: a DONE in a checkpoint directory becomes the
 * manifest of what is there; any other name gets the old one-line marker. */
int remat_write_marker(const char *path, remat_error *err) {
  const char *slash = path ? strrchr(path, '/') : NULL;
  const char *base = slash ? slash + 1 : path;
  if (base && !strcmp(base, "DONE")) {
    char dir[DIR_PATH_MAX];
    size_t dl = slash ? (size_t)(slash - path) : 1;
    if (dl >= sizeof dir) return too_long(path, err);
    if (slash) memcpy(dir, path, dl);
    else dir[0] = '.';
    dir[dl] = 0;
    int64_t step;
    if (remat_checkpoint_step_of(dir, &step) == 0)
      return remat_checkpoint_seal(dir, step, NULL, err);
  }
  return remat_save_bytes(path, "marker", LEGACY_DONE, strlen(LEGACY_DONE), err);
}

/* Calls fn with every file of step_dir that remat reads from a checkpoint
 * (model.bin and the state files), until one returns non-zero. */
static int each_ckpt_file(const char *step_dir,
                          int (*fn)(const char *step_dir, const char *name, void *ctx,
                                    remat_error *err),
                          void *ctx, remat_error *err) {
  DIR *d;
  int rc = remat__open_listing(step_dir, "checkpoint", &d, err);
  if (rc) return rc;
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    int64_t r;
    if (is_ckpt_file(e->d_name, &r)) rc = fn(step_dir, e->d_name, ctx, err);
  }
  closedir(d);
  return rc;
}

static int remove_file(const char *step_dir, const char *name, void *ctx, remat_error *err) {
  (void)ctx;
  char path[DIR_PATH_MAX];
  if (join_path(path, sizeof path, step_dir, name)) return too_long(step_dir, err);
  if (remove(path) != 0 && errno != ENOENT)
    return remat__errorf(err, REMAT_EIO, "cannot remove '%s': %s", path, strerror(errno));
  return 0;
}

/* Before a checkpoint is written into step_dir again: its DONE goes first
 * (the directory stops being a checkpoint), then every file remat would
 * read there, so no state of an earlier attempt with another number of
 * ranks stays beside the new files. */
int remat__checkpoint_dir_clear(const char *step_dir, remat_error *err) {
  int rc = remove_file(step_dir, "DONE", NULL, err);
  return rc ? rc : each_ckpt_file(step_dir, remove_file, NULL, err);
}

/* ----------------------------------------------------------- verifying */

/* Which files and ranks the manifest lists: model.bin and one state per
 * rank (state.bin alone, or state_rank_0..R-1.bin). */
static int manifest_ranks(const remat__manifest *m, const char *step_dir, int64_t *ranks_out,
                          remat_error *err) {
  int64_t ranks = 0, plain = 0, model = 0;
  for (size_t i = 0; i < m->nfiles; i++) {
    int64_t r;
    int kind = is_ckpt_file(m->files[i].name, &r);
    if (r == -2) continue;
    if (r < 0) model = 1;
    else {
      ranks++;
      plain += kind == 1;
    }
  }
  *ranks_out = ranks;
  if (!model || !ranks || (plain && ranks > 1))
    return remat__errorf(err, REMAT_EFORMAT,
                         "DONE in '%s' lists %s; a checkpoint has model.bin and one state file "
                         "per rank",
                         step_dir,
                         !model ? "no model.bin"
                         : !ranks ? "no state file"
                                  : "state.bin beside rank files");
  return 0;
}

/* A state file's header against the manifest: its step, its run, its rank. */
static int verify_state(const remat__manifest *m, const remat__manifest_file *f, const char *path,
                        const char *step_dir, int64_t r, int64_t ranks, remat_error *err) {
  remat_state_header h;
  remat_run_id id;
  int rc = remat_state_peek(path, &h, err);
  if (rc) return rc;
  remat_state_run_id(&h, &id);
  if (h.step != m->step)
    return remat__errorf(err, REMAT_EFORMAT, "%s is from step %lld, DONE in '%s' from step %lld",
                         f->name, (long long)h.step, step_dir, (long long)m->step);
  if (id.seed != m->run.seed || id.settings != m->run.settings)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s is from another run (seed %llu, settings %016llx), DONE in '%s' "
                         "from seed %llu, settings %016llx",
                         f->name, (unsigned long long)id.seed, (unsigned long long)id.settings,
                         step_dir, (unsigned long long)m->run.seed,
                         (unsigned long long)m->run.settings);
  if (h.rank != r || h.ranks != ranks)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s holds rank %lld of %lld; DONE in '%s' lists %lld state files",
                         f->name, (long long)h.rank, (long long)h.ranks, step_dir,
                         (long long)ranks);
  return 0;
}

/* One listed file: there, of the listed size and checksum, and a state's
 * header the manifest's. */
static int verify_file(const remat__manifest *m, const remat__manifest_file *f,
                       const char *step_dir, int64_t ranks, remat_error *err) {
  char path[DIR_PATH_MAX];
  if (join_path(path, sizeof path, step_dir, f->name)) return too_long(step_dir, err);
  struct stat st;
  if (lstat(path, &st) != 0 && errno == ENOENT)
    return remat__errorf(err, REMAT_EFORMAT, "%s is missing: DONE in '%s' lists it", f->name,
                         step_dir);
  uint64_t size;
  uint32_t crc;
  int rc = checksum_file(path, f->name, &size, &crc, err);
  if (rc) return rc;
  if (size != f->size)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s size differs: %llu bytes, DONE in '%s' lists %llu (truncated, "
                         "padded or replaced)",
                         f->name, (unsigned long long)size, step_dir,
                         (unsigned long long)f->size);
  if (crc != f->crc)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s checksum differs: CRC32C %08x, DONE in '%s' lists %08x (changed "
                         "or replaced after the checkpoint was written)",
                         f->name, (unsigned)crc, step_dir, (unsigned)f->crc);
  int64_t r;
  if (is_ckpt_file(f->name, &r) && r >= 0) return verify_state(m, f, path, step_dir, r, ranks, err);
  return 0;
}

static int check_listed(const char *step_dir, const char *name, void *ctx, remat_error *err) {
  const remat__manifest *m = ctx;
  for (size_t i = 0; i < m->nfiles; i++)
    if (!strcmp(m->files[i].name, name)) return 0;
  return remat__errorf(err, REMAT_EFORMAT,
                       "%.64s is not listed in DONE in '%s': it does not belong to this "
                       "checkpoint; remove it",
                       name, step_dir);
}

/* No file remat would read sits there unlisted (a state from elsewhere). */
static int verify_none_unlisted(const remat__manifest *m, const char *step_dir,
                                remat_error *err) {
  return each_ckpt_file(step_dir, check_listed, (void *)m, err);
}

int remat_checkpoint_verify(const char *step_dir, int64_t step, remat_checkpoint_info *info,
                            remat_error *err) {
  char path[DIR_PATH_MAX];
  remat_checkpoint_info out = {.step = step};
  if (join_path(path, sizeof path, step_dir, "DONE")) return too_long(step_dir, err);
  remat__manifest m;
  int rc = read_manifest(path, &m, err);
  if (rc) return rc;
  if (m.legacy) { /* written before DONE listed files: nothing to check */
    if (out.step < 0) remat_checkpoint_step_of(step_dir, &out.step);
    if (info) *info = out;
    return 0;
  }
  int64_t ranks = 0;
  if (step >= 0 && m.step != step)
    rc = remat__errorf(err, REMAT_EFORMAT,
                       "DONE in '%s' is for step %lld, not %lld: it was copied from another "
                       "checkpoint",
                       step_dir, (long long)m.step, (long long)step);
  if (!rc) rc = manifest_ranks(&m, step_dir, &ranks, err);
  for (size_t i = 0; i < m.nfiles && !rc; i++)
    rc = verify_file(&m, &m.files[i], step_dir, ranks, err);
  if (!rc) rc = verify_none_unlisted(&m, step_dir, err);
  if (!rc) {
    out.step = m.step;
    out.run = m.run;
    out.ranks = ranks;
    out.verified = 1;
    if (info) *info = out;
  }
  remat__manifest_free(&m);
  return rc;
}

/* ------------------------------------------------------------ finding */

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Appends "; " and the text to the skipped list, cut to fit. */
static void note(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
  if (!buf || !cap) return;
  size_t n = strlen(buf);
  if (n + 1 >= cap) return;
  snprintf(buf + n, cap - n, fmt, n ? "; " : "", a, b);
}

int remat_checkpoint_find(const char *dir, remat_checkpoint_info *info, char *skipped,
                          size_t cap, remat_error *err) {
  if (skipped && cap) skipped[0] = 0;
  DIR *d;
  int rc = remat__open_listing(dir, "checkpoints", &d, err);
  if (rc) return rc;
  int64_t *steps = NULL;
  size_t n = 0, scap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int64_t s = remat__step_name(e->d_name, strlen(e->d_name));
    if (s < 0) continue;
    if (n == scap) {
      size_t c = scap ? 2 * scap : 16;
      int64_t *p = realloc(steps, c * sizeof *p);
      if (!p) {
        closedir(d);
        free(steps);
        return remat__errorf(err, REMAT_ENOMEM, "out of memory listing '%s'", dir);
      }
      steps = p;
      scap = c;
    }
    steps[n++] = s;
  }
  closedir(d);
  if (n) qsort(steps, n, sizeof *steps, cmp_desc);
  char path[DIR_PATH_MAX], done[DIR_PATH_MAX], first_err[REMAT_ERRMSG_MAX] = "";
  int complete = 0, skips = 0;
  rc = 1;
  for (size_t i = 0; i < n && rc; i++) {
    char name[32];
    snprintf(name, sizeof name, "step_%08lld", (long long)steps[i]);
    struct stat st;
    if (join_path(path, sizeof path, dir, name) || join_path(done, sizeof done, path, "DONE"))
      continue;
    if (lstat(done, &st) != 0) continue; /* never completed: not a checkpoint */
    complete++;
    remat_error e2 = {0};
    remat_checkpoint_info got;
    if (remat_checkpoint_verify(path, steps[i], &got, &e2) == 0) {
      got.skipped = skips;
      if (info) *info = got;
      rc = 0;
    } else {
      skips++;
      note(skipped, cap, "%s%s: %s", name, e2.msg);
      if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s: %.400s", name, e2.msg);
    }
  }
  free(steps);
  if (!rc) return 0;
  if (!complete)
    return remat__errorf(err, REMAT_EINVAL,
                         "no complete checkpoint (a step_N directory with DONE) in '%s'", dir);
  return remat__errorf(err, REMAT_EFORMAT, "no checkpoint in '%s' verifies; the newest: %s", dir,
                       first_err);
}

/* ------------------------------------------------------ checkpoint dirs */

int remat_checkpoint_dir_path(char *out, size_t cap, const char *dir, int64_t step,
                              const char *file) {
  int n = snprintf(out, cap, "%s/step_%08lld%s%s", dir, (long long)step, file ? "/" : "",
                   file ? file : "");
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int remat_checkpoint_dir_latest(const char *dir, int64_t *step, remat_error *err) {
  remat_checkpoint_info info;
  int rc = remat_checkpoint_find(dir, &info, NULL, 0, err);
  if (!rc) *step = info.step;
  return rc;
}

int remat_checkpoint_dir_check(const char *dir, int64_t from, int64_t to, int64_t every,
                               remat_error *err) {
  char path[4096], want[64];
  if (to > from && remat_checkpoint_dir_path(path, sizeof path, dir, to, "state_rank_0000.bin"))
    return remat__errorf(err, REMAT_EINVAL, "checkpoint directory path '%.200s' is too long", dir);
  DIR *d;
  int rc = remat__open_listing(dir, "checkpoints", &d, err);
  if (rc) return rc;
  /* the entries there, not the steps: a run may have 2^30 of them */
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    int64_t s = remat__step_name(e->d_name, strlen(e->d_name));
    if (s <= from || s > to || (s % every && s != to)) continue;
    snprintf(want, sizeof want, "step_%08lld", (long long)s);
    if (strcmp(e->d_name, want)) continue; /* another spelling: not the path written */
    struct stat st;
    if (join_path(path, sizeof path, dir, e->d_name)) rc = too_long(dir, err);
    else if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
      rc = remat__errorf(err, REMAT_EIO, "'%s' stands where the checkpoint of step %lld goes and "
                         "is not a directory: remove it, or choose another checkpoint "
                         "directory", path, (long long)s);
    else if (access(path, W_OK | X_OK) != 0)
      rc = remat__errorf(err, REMAT_EIO, "cannot write the checkpoint of step %lld in '%s': %s; "
                         "make it writable, or choose another checkpoint directory", (long long)s,
                         path, strerror(errno));
  }
  closedir(d);
  return rc;
}

int remat_checkpoint_dir_make(const char *dir, int64_t step, remat_error *err) {
  char path[4096];
  if (mkdir(dir, 0777) && errno != EEXIST)
    return remat__errorf(err, REMAT_EIO, "cannot create checkpoint directory '%s': %s", dir,
                         strerror(errno));
  if (remat_checkpoint_dir_path(path, sizeof path, dir, step, NULL))
    return remat__errorf(err, REMAT_EINVAL, "checkpoint directory name too long");
  if (mkdir(path, 0777) && errno != EEXIST)
    return remat__errorf(err, REMAT_EIO, "cannot create '%s': %s", path, strerror(errno));
  /* a directory left by a run killed while writing it, or an earlier
   * checkpoint of this step: not complete until DONE is written again,
   * last, and nothing of the earlier files may stay beside the new ones */
  return remat__checkpoint_dir_clear(path, err);
}
