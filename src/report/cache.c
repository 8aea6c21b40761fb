/* cache.c: figures measured on this machine and kept between runs (the
 * peak MFU is against, the planner's layer times), so that two runs of one
 * job report against the same figures and start without measuring.
 *
 * One small text file per kind of figure, host, CPU model, precision and
 * thread count, under $XDG_CACHE_HOME/remat (else $HOME/.cache/remat):
 *
 *   remat-cache 1 peak
 *   host NAME
 *   cpu MODEL NAME
 *   precision fp32
 *   threads 2
 *   entry KEY | DATE | V0 V1 ...
 *   crc32c 1a2b3c4d
 *
 * one entry per shape measured (KEY names it, DATE in seconds since 1970),
 * the last line the CRC32C of every byte before it. A file that fails its
 * CRC, does not parse or names another machine is never trusted: the
 * caller measures again and the store rewrites the file whole. A store
 * writes a temporary beside the file and renames it over
 * (remat_save_bytes), so readers and concurrent writers see one whole
 * file, the last writer's; an entry another writer added in between may be
 * lost, and is then measured again by the next run that wants it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "remat/io.h"
#include "remat/report.h"

enum { CACHE_MAX_BYTES = 1 << 16, CACHE_MAX_ENTRIES = 256 };

/* The CPU's model name (/proc/cpuinfo), or "unknown CPU". */
static void cpu_model(char *buf, size_t cap) {
  snprintf(buf, cap, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !colon) continue;
    colon++;
    while (*colon == ' ' || *colon == '\t') colon++;
    colon[strcspn(colon, "\n")] = 0;
    snprintf(buf, cap, "%s", colon);
    break;
  }
  fclose(f);
}

/* Letters, digits, '-' and '.' of s, others as '_', for a file name. */
static void name_part(char *dst, size_t cap, const char *s) {
  size_t k = 0;
  for (; *s && k + 1 < cap; s++)
    dst[k++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                *s == '-' || *s == '.')
                   ? *s
                   : '_';
  dst[k] = 0;
}

/* mkdir -p of path's folders up to and including path itself. */
static int make_dirs(char *path) {
  for (char *p = path + 1;; p++) {
    if (*p && *p != '/') continue;
    char c = *p;
    *p = 0;
    int rc = mkdir(path, 0755);
    *p = c;
    if (rc && errno != EEXIST) return -1;
    if (!c) return 0;
  }
}

int remat_cache_open(remat_cache *c, const char *kind, int precision, int threads) {
  memset(c, 0, sizeof *c);
  if (gethostname(c->host, sizeof c->host - 1) || !c->host[0]) snprintf(c->host, sizeof c->host, "unknown-host");
  cpu_model(c->cpu, sizeof c->cpu);
  c->precision = precision;
  c->threads = threads > 0 ? threads : omp_get_max_threads();
  snprintf(c->kind, sizeof c->kind, "%s", kind);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char dir[3800];
  if (xdg && xdg[0] == '/') snprintf(dir, sizeof dir, "%s/remat", xdg);
  else if (home && home[0] == '/') snprintf(dir, sizeof dir, "%s/.cache/remat", home);
  else {
    snprintf(c->why, sizeof c->why, "neither XDG_CACHE_HOME nor HOME names a directory");
    return REMAT_EIO;
  }
  if (make_dirs(dir)) {
    snprintf(c->why, sizeof c->why, "cannot create %.200s: %s", dir, strerror(errno));
    return REMAT_EIO;
  }
  char host[64];
  name_part(host, sizeof host, c->host);
  uint32_t crc = remat_crc32c(0, c->cpu, strlen(c->cpu));
  snprintf(c->path, sizeof c->path, "%s/%s-%s-%08" PRIx32 "-%s-%dt", dir, kind, host, crc,
           remat_precision_name(precision), c->threads);
  return 0;
}

/* The header lines the file must start with. */
static int header(const remat_cache *c, char *buf, size_t cap) {
  return snprintf(buf, cap, "remat-cache 1 %s\nhost %s\ncpu %s\nprecision %s\nthreads %d\n",
                  c->kind, c->host, c->cpu, remat_precision_name(c->precision), c->threads);
}

/* The file's entry lines, checked (CRC, header): 1 and *text (owned, NUL
 * ended) pointing at its first entry in *entries; 0 when there is no file;
 * -1 damaged, why in err. */
static int read_checked(const remat_cache *c, char **text, char **entries, remat_error *err) {
  *text = *entries = NULL;
  FILE *f = fopen(c->path, "rb");
  if (!f) {
    if (errno == ENOENT) return 0;
    return remat__errorf(err, REMAT_EIO, "cannot read %s: %s", c->path, strerror(errno)), -1;
  }
  char *buf = malloc(CACHE_MAX_BYTES + 1);
  size_t n = buf ? fread(buf, 1, CACHE_MAX_BYTES + 1, f) : 0;
  fclose(f);
  if (!buf) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading %s", c->path), -1;
  buf[n < CACHE_MAX_BYTES ? n : CACHE_MAX_BYTES] = 0;
  const char *why = NULL;
  char head[512];
  int hn = header(c, head, sizeof head);
  /* the last line: "crc32c XXXXXXXX\n" */
  const size_t tail = 16;
  unsigned crc = 0;
  if (n > CACHE_MAX_BYTES) why = "larger than a cache file can be";
  else if (n < tail + (size_t)hn || buf[n - 1] != '\n') why = "cut short";
  else if (memchr(buf, 0, n)) why = "not text";
  else if (sscanf(buf + n - tail, "crc32c %8x", &crc) != 1 || strncmp(buf + n - tail, "crc32c ", 7))
    why = "no checksum line at its end";
  else if (crc != remat_crc32c(0, buf, n - tail)) why = "its checksum does not match its text";
  else if (strncmp(buf, head, (size_t)hn)) why = "its header names another machine or setting";
  if (why) {
    free(buf);
    return remat__errorf(err, REMAT_EIO, "cache file %s is damaged (%s)", c->path, why), -1;
  }
  buf[n - tail] = 0;
  *text = buf;
  *entries = buf + hn;
  return 1;
}

/* Parses one entry line (NUL ended, no newline) into e; -1 if malformed. */
static int parse_entry(char *line, remat_cache_entry *e) {
  memset(e, 0, sizeof *e);
  if (strncmp(line, "entry ", 6)) return -1;
  char *key = line + 6, *bar = strstr(key, " | ");
  if (!bar || bar == key || (size_t)(bar - key) >= sizeof e->key) return -1;
  memcpy(e->key, key, (size_t)(bar - key));
  char *p = bar + 3, *end;
  long long date = strtoll(p, &end, 10);
  if (end == p || strncmp(end, " |", 2)) return -1;
  e->date = date;
  p = end + 2;
  while (*p) {
    double v = strtod(p, &end);
    if (end == p || !isfinite(v) || e->n == REMAT_CACHE_VALUES) return -1;
    e->value[e->n++] = v;
    p = end;
  }
  return 0;
}

int remat_cache_get(const remat_cache *c, const char *key, int n, remat_cache_entry *e,
                    remat_error *err) {
  memset(e, 0, sizeof *e);
  if (!c->path[0]) return REMAT_CACHE_MISS;
  char *text, *p;
  int rc = read_checked(c, &text, &p, err);
  if (rc <= 0) return rc < 0 ? REMAT_CACHE_DAMAGED : REMAT_CACHE_MISS;
  int found = REMAT_CACHE_MISS;
  while (*p) {
    char *nl = strchr(p, '\n');
    if (!nl) break;
    *nl = 0;
    remat_cache_entry x;
    if (parse_entry(p, &x)) {
      found = REMAT_CACHE_DAMAGED;
      remat__errorf(err, REMAT_EIO, "cache file %s is damaged (a line does not parse)", c->path);
      break;
    }
    if (!strcmp(x.key, key)) {
      if (x.n != n) {
        found = REMAT_CACHE_DAMAGED;
        remat__errorf(err, REMAT_EIO, "cache file %s is damaged (its entry '%s' has %d figures, "
                      "not %d)", c->path, key, x.n, n);
        break;
      }
      *e = x;
      found = REMAT_CACHE_HIT;
    }
    p = nl + 1;
  }
  free(text);
  return found;
}

/* Appends one entry line to buf at *len (cap bytes); -1 if it does not fit. */
static int put_entry(char *buf, size_t cap, size_t *len, const remat_cache_entry *e) {
  int w = snprintf(buf + *len, cap - *len, "entry %s | %lld |", e->key, (long long)e->date);
  if (w < 0 || (size_t)w >= cap - *len) return -1;
  *len += (size_t)w;
  for (int k = 0; k < e->n; k++) {
    w = snprintf(buf + *len, cap - *len, " %.17g", e->value[k]);
    if (w < 0 || (size_t)w >= cap - *len) return -1;
    *len += (size_t)w;
  }
  if (*len + 1 >= cap) return -1;
  buf[(*len)++] = '\n';
  return 0;
}

int remat_cache_put(const remat_cache *c, const remat_cache_entry *e, remat_error *err) {
  if (!c->path[0])
    return remat__errorf(err, REMAT_EIO, "no cache file: %s", c->why[0] ? c->why : "none opened");
  if (strchr(e->key, '|') || strchr(e->key, '\n') || !e->key[0])
    return remat__errorf(err, REMAT_EINVAL, "a cache key holds no '|' or newline");
  for (int k = 0; k < e->n; k++)
    if (!isfinite(e->value[k]))
      return remat__errorf(err, REMAT_EINVAL, "a cache entry's figures are finite");
  char *out = malloc(CACHE_MAX_BYTES);
  if (!out) return remat__errorf(err, REMAT_ENOMEM, "out of memory writing %s", c->path);
  size_t len = (size_t)header(c, out, CACHE_MAX_BYTES);
  char *text = NULL, *p = NULL;
  remat_error ignored;
  int kept = 0;
  /* the entries of a whole file stay, but for e's key; a damaged file goes */
  if (read_checked(c, &text, &p, &ignored) > 0) {
    while (*p && kept < CACHE_MAX_ENTRIES - 1) {
      char *nl = strchr(p, '\n');
      if (!nl) break;
      *nl = 0;
      remat_cache_entry x;
      if (!parse_entry(p, &x) && strcmp(x.key, e->key) && !put_entry(out, CACHE_MAX_BYTES - 32, &len, &x))
        kept++;
      p = nl + 1;
    }
  }
  free(text);
  int rc = put_entry(out, CACHE_MAX_BYTES - 32, &len, e) ? remat__errorf(err, REMAT_EINVAL, "cache entry too long") : 0;
  if (!rc) {
    len += (size_t)snprintf(out + len, 32, "crc32c %08" PRIx32 "\n", remat_crc32c(0, out, len));
    rc = remat_save_bytes(c->path, "cache file", out, len, err);
  }
  free(out);
  return rc;
}

void remat_cache_note_set(remat_cache_note *note, const remat_cache *c, int source, int64_t date,
                          const char *why) {
  memset(note, 0, sizeof *note);
  note->source = source;
  note->date = date;
  snprintf(note->path, sizeof note->path, "%s", c->path);
  snprintf(note->host, sizeof note->host, "%s", c->host);
  snprintf(note->cpu, sizeof note->cpu, "%s", c->cpu);
  snprintf(note->why, sizeof note->why, "%s", why ? why : c->why);
}

void remat_cache_keep(const remat_cache *c, remat_cache_entry *e, int again, int found,
                      const char *damaged, remat_cache_note *note) {
  e->date = (int64_t)time(NULL);
  int source = again ? REMAT_FIGURE_REMEASURED
               : found == REMAT_CACHE_DAMAGED ? REMAT_FIGURE_REPAIRED : REMAT_FIGURE_STORED;
  remat_error werr = {0};
  if (remat_cache_put(c, e, &werr)) source = REMAT_FIGURE_UNKEPT;
  remat_cache_note_set(note, c, source, e->date,
                       source == REMAT_FIGURE_UNKEPT ? werr.msg
                       : source == REMAT_FIGURE_REPAIRED ? damaged : "");
}

const char *remat_cache_date(int64_t date, char *buf, size_t cap) {
  time_t t = (time_t)date;
  struct tm tm;
  if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M UTC", &tm))
    snprintf(buf, cap, "an unknown date");
  return buf;
}
