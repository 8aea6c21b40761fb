/* test_cache.c: the machine cache (remat_cache_*, remat_peak_cached) in a
 * folder of its own ($XDG_CACHE_HOME pointed at a scratch directory).
 *
 * - put then get: the figures come back exactly, with their date; another
 *   key, a second entry and a replaced entry; another thread count or
 *   precision is another file.
 * - damage: a flipped byte, a cut file, a file of garbage, an entry with
 *   another count of figures are each REMAT_CACHE_DAMAGED, never a hit;
 *   a put over a damaged file writes a whole one.
 * - concurrent writers: four processes put 40 entries each into one file
 *   while a fifth reads it: every read sees a whole file (a hit or a
 *   miss, never damage), and the file is whole at the end.
 * - remat_peak_cached: measured and kept, then the kept figures (no new
 *   trials), again = 1 measures anew, a damaged file is measured again
 *   and rewritten; remat_peak_keep's raised peak is what the next call
 *   returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "remat.h"
#include "test_util.h"

static remat_cache_entry entry(const char *key, int n, double base) {
  remat_cache_entry e = {.date = 1790000000, .n = n};
  snprintf(e.key, sizeof e.key, "%s", key);
  for (int k = 0; k < n; k++) e.value[k] = base + k * 0.125 + 1e-9;
  return e;
}

static void write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(text, 1, n, f) == n);
  if (f) fclose(f);
}

static long read_file(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  long n = (long)fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

static void test_roundtrip(void) {
  remat_cache c, c3, cb;
  remat_error err = {0};
  CHECK(remat_cache_open(&c, "test", REMAT_PRECISION_FP32, 2) == 0);
  CHECK(remat_cache_open(&c3, "test", REMAT_PRECISION_FP32, 3) == 0);
  CHECK(remat_cache_open(&cb, "test", REMAT_PRECISION_BF16, 2) == 0);
  CHECKF(strcmp(c.path, c3.path) && strcmp(c.path, cb.path) && strstr(c.path, "/remat/test-"),
         "one file per thread count and precision: %s", c.path);
  remat_cache_entry a = entry("C8 B2", 3, 1.5), b = entry("C16 B2", 5, 7.0), got;
  CHECK(remat_cache_get(&c, "C8 B2", 3, &got, &err) == REMAT_CACHE_MISS);
  CHECK(remat_cache_put(&c, &a, &err) == 0);
  CHECK(remat_cache_put(&c, &b, &err) == 0);
  int rc = remat_cache_get(&c, "C8 B2", 3, &got, &err);
  CHECKF(rc == REMAT_CACHE_HIT && got.n == 3 && !memcmp(got.value, a.value, 3 * sizeof(double)) &&
             got.date == a.date,
         "put then get: the same figures, bit for bit, and the date");
  CHECK(remat_cache_get(&c, "C16 B2", 5, &got, &err) == REMAT_CACHE_HIT && got.value[4] == b.value[4]);
  CHECK(remat_cache_get(&c3, "C8 B2", 3, &got, &err) == REMAT_CACHE_MISS);
  remat_cache_entry a2 = entry("C8 B2", 3, 99.0);
  CHECK(remat_cache_put(&c, &a2, &err) == 0);
  CHECKF(remat_cache_get(&c, "C8 B2", 3, &got, &err) == REMAT_CACHE_HIT &&
             got.value[0] == a2.value[0] &&
             remat_cache_get(&c, "C16 B2", 5, &got, &err) == REMAT_CACHE_HIT,
         "a put replaces its key's entry and keeps the others");
  remat_cache_entry bad = entry("C8 | B2", 1, 1.0);
  CHECK(remat_cache_put(&c, &bad, &err) == REMAT_EINVAL);
}

static void test_damage(void) {
  remat_cache c;
  remat_error err = {0};
  CHECK(remat_cache_open(&c, "damage", REMAT_PRECISION_FP32, 2) == 0);
  remat_cache_entry a = entry("C8 B2", 3, 1.5), got;
  CHECK(remat_cache_put(&c, &a, &err) == 0);
  char text[4096];
  long n = read_file(c.path, text, sizeof text);
  CHECK(n > 40);
  const char *what[4] = {"a flipped byte", "a cut file", "garbage", "the wrong figure count"};
  for (int k = 0; k < 4; k++) {
    char copy[4096];
    memcpy(copy, text, (size_t)n);
    size_t len = (size_t)n;
    if (k == 0) copy[n / 2] ^= 0x04;
    if (k == 1) len = (size_t)n - 9;
    if (k == 2) len = (size_t)snprintf(copy, sizeof copy, "not a cache file\n");
    write_file(c.path, copy, len);
    int want = k == 3 ? 4 : 3;
    if (k == 3) write_file(c.path, text, (size_t)n);
    err.msg[0] = 0;
    int rc = remat_cache_get(&c, "C8 B2", want, &got, &err);
    CHECKF(rc == REMAT_CACHE_DAMAGED && strstr(err.msg, "damaged"), "%s: damaged, not trusted (%s)",
           what[k], err.msg);
  }
  write_file(c.path, "garbage\n", 8);
  CHECK(remat_cache_put(&c, &a, &err) == 0);
  CHECKF(remat_cache_get(&c, "C8 B2", 3, &got, &err) == REMAT_CACHE_HIT,
         "a put over a damaged file writes a whole one");
}

static void test_concurrent(void) {
  remat_cache c;
  remat_error err = {0};
  CHECK(remat_cache_open(&c, "race", REMAT_PRECISION_FP32, 2) == 0);
  pid_t kids[5];
  for (int w = 0; w < 5; w++) {
    kids[w] = fork();
    if (kids[w] == 0) {
      int damaged = 0;
      for (int i = 0; i < 40; i++) {
        char key[32];
        snprintf(key, sizeof key, "W%d I%d", w, i);
        remat_cache_entry e = entry(key, 4, w * 100 + i), got;
        if (w < 4 && remat_cache_put(&c, &e, &err)) _exit(2);
        for (int r = 0; r < (w == 4 ? 5 : 1); r++)
          damaged += remat_cache_get(&c, "W0 I0", 4, &got, &err) == REMAT_CACHE_DAMAGED;
      }
      _exit(damaged ? 1 : 0);
    }
  }
  int bad = 0;
  for (int w = 0; w < 5; w++) {
    int st = 0;
    waitpid(kids[w], &st, 0);
    bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  remat_cache_entry got;
  int rc = remat_cache_get(&c, "W3 I39", 4, &got, &err);
  CHECKF(bad == 0 && rc != REMAT_CACHE_DAMAGED,
         "4 writers and a reader at once: every read saw a whole file, and the file is whole");
}

static void test_peak_cached(void) {
  remat_config cfg;
  remat_error err = {0};
  CHECK(remat_config_parse("tiny", &cfg, &err) == 0);
  remat_peak p, q;
  remat_cache_note note;
  CHECK(remat_peak_cached(&p, &cfg, 2, 32, 0.0, 0, &note, &err) == 0);
  CHECKF(note.source == REMAT_FIGURE_STORED && p.trials >= 3 && p.flops > 0,
         "first run: measured (%d trials, %.1f GFLOP/s) and kept in %s", p.trials, p.flops / 1e9,
         note.path);
  CHECK(remat_peak_cached(&q, &cfg, 2, 32, 0.0, 0, &note, &err) == 0);
  CHECKF(note.source == REMAT_FIGURE_CACHED && q.flops == p.flops && q.best == p.best &&
             q.trials == p.trials && q.spread == p.spread,
         "second run: the kept peak, the same figures");
  CHECK(remat_peak_cached(&q, &cfg, 2, 32, 0.0, 1, &note, &err) == 0);
  CHECKF(note.source == REMAT_FIGURE_REMEASURED, "again: measured anew and kept");
  write_file(note.path, "remat-cache 1 peak\nbroken\n", 26);
  CHECK(remat_peak_cached(&q, &cfg, 2, 32, 0.0, 0, &note, &err) == 0);
  CHECKF(note.source == REMAT_FIGURE_REPAIRED && strstr(note.why, "damaged"),
         "a damaged file: measured again (%s)", note.why);
  CHECK(remat_peak_cached(&q, &cfg, 2, 32, 0.0, 0, &note, &err) == 0);
  CHECK(note.source == REMAT_FIGURE_CACHED);
  q.flops = 3 * q.best;
  CHECK(remat_peak_keep(&q, &cfg, 2, 32, &err) == 0);
  CHECK(remat_peak_cached(&p, &cfg, 2, 32, 0.0, 0, &note, &err) == 0);
  CHECKF(note.source == REMAT_FIGURE_CACHED && p.flops == q.flops,
         "a raised peak kept is the next run's");
}

int main(void) {
  char dir[] = "/tmp/remat-test-cache-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("XDG_CACHE_HOME", dir, 1);
  test_roundtrip();
  test_damage();
  test_concurrent();
  test_peak_cached();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return test_summary("test_cache");
}
