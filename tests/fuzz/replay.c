/* replay.c: runs a fuzz target on every file under the directories (or
 * files) named on the command line, so the seed corpora and the inputs that
 * once crashed run as ordinary tests in every build, with or without clang.
 *
 * Usage: fuzz_<target>_replay PATH... */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return 1;
  /* an exactly sized copy, so reads past the end are caught under ASan */
  uint8_t *exact = malloc(n ? n : 1);
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int a = 1; a < argc; a++) {
    struct stat st;
    if (stat(argv[a], &st) != 0) {
      fprintf(stderr, "no such file or directory: %s\n", argv[a]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[a]);
      files++;
      continue;
    }
    DIR *d = opendir(argv[a]);
    for (struct dirent *e; d && (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
      bad += run_file(path);
      files++;
    }
    if (d) closedir(d);
  }
  printf("%s: %d inputs replayed\n", argv[0], files);
  return bad || files == 0 ? 1 : 0;
}
