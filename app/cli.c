/* cli.c: shared command-line helpers; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cli_name = "remat";
char cli_last_message[1024];
int cli_silent;

int cli_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cli_last_message, sizeof cli_last_message, fmt, ap);
  va_end(ap);
  if (!cli_silent) fprintf(stderr, "%s: %s\n", cli_name, cli_last_message);
  return code;
}

int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno) {
    cli_fail(-1, "%s expects an integer, got '%s'", flag, s);
    return -1;
  }
  if (v < lo || v > hi) {
    cli_fail(-1, "%s %lld is out of range [%lld, %lld]", flag, v, (long long)lo, (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_parse_f64(const char *flag, const char *s, double lo, double hi, int hi_open,
                  double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v)) {
    cli_fail(-1, "%s expects a number, got '%s'", flag, s);
    return -1;
  }
  if (v < lo || v > hi || (hi_open && v == hi)) {
    cli_fail(-1, "%s %g is out of range [%g, %g%s", flag, v, lo, hi, hi_open ? ")" : "]");
    return -1;
  }
  *out = v;
  return 0;
}

const char *cli_flag_value(int argc, char **argv, int *i, char *name, size_t cap) {
  const char *a = argv[*i];
  const char *eq = strchr(a, '=');
  if (eq) {
    snprintf(name, cap, "%.*s", (int)(eq - a), a);
    return eq + 1;
  }
  snprintf(name, cap, "%s", a);
  if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) {
    cli_fail(-1, "%s needs a value; see %s --help", a, cli_name);
    return NULL;
  }
  return argv[++*i];
}

int cli_read_file(const char *path, char **data, size_t *size) {
  struct stat st;
  if (stat(path, &st) != 0) return cli_fail(1, "cannot read '%s': %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cli_fail(1, "'%s' is not a regular file: give a text file", path);
  FILE *f = fopen(path, "rb");
  if (!f) return cli_fail(1, "cannot read '%s': %s", path, strerror(errno));
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    return cli_fail(1, "'%s' (%lld bytes) does not fit in memory", path, (long long)st.st_size);
  }
  n = fread(buf, 1, cap, f);
  int bad = ferror(f) || n == cap; /* grown since stat: read again */
  fclose(f);
  if (bad) {
    free(buf);
    return cli_fail(1, "cannot read '%s' whole (an error, or it grew while read)", path);
  }
  *data = buf;
  *size = n;
  return 0;
}

int cli_stdout_ok(void) {
  if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
  cli_fail(-1, "cannot write to standard output: %s", strerror(errno ? errno : EIO));
  return -1;
}

static int set_flag(const cli_flag *f, const char *name, const char *v) {
  int64_t iv;
  double dv;
  switch (f->kind) {
  case CLI_STR:
  case CLI_RAW:
    *(const char **)f->dst = v;
    return 0;
  case CLI_ARG:
    if (*(const char **)f->dst)
      return cli_fail(-1, "more than one %s given ('%s' and '%s')", f->what,
                      *(const char **)f->dst, v);
    *(const char **)f->dst = v;
    return 0;
  case CLI_ARGS: {
    cli_operands *ops = f->dst;
    const char **p = realloc(ops->v, (size_t)(ops->n + 1) * sizeof *p);
    if (!p) return cli_fail(-1, "out of memory for the arguments");
    ops->v = p;
    ops->v[ops->n++] = v;
    return 0;
  }
  case CLI_I64:
    return cli_parse_i64(name, v, (int64_t)f->lo, (int64_t)f->hi, (int64_t *)f->dst);
  case CLI_INT:
    if (cli_parse_i64(name, v, (int64_t)f->lo, (int64_t)f->hi, &iv)) return -1;
    *(int *)f->dst = (int)iv;
    return 0;
  case CLI_U64:
    if (cli_parse_i64(name, v, (int64_t)f->lo, INT64_MAX, &iv)) return -1;
    *(uint64_t *)f->dst = (uint64_t)iv;
    return 0;
  case CLI_F64:
    return cli_parse_f64(name, v, f->lo, f->hi, f->hi_open, (double *)f->dst);
  case CLI_F32:
    if (cli_parse_f64(name, v, f->lo, f->hi, f->hi_open, &dv)) return -1;
    *(float *)f->dst = (float)dv;
    return 0;
  case CLI_SWITCH:
    break;
  }
  return -1;
}

const cli_flag *cli_find_flag(const cli_flag *flags, const char *name) {
  for (const cli_flag *f = flags; f->name; f++)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

int cli_set_flag(const cli_flag *f, const char *v) {
  return f->kind == CLI_SWITCH ? cli_fail(-1, "%s is a switch and takes no value", f->name)
                               : set_flag(f, f->name, v);
}

int cli_parse_flags(int argc, char **argv, const cli_flag *flags, const char *usage) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage, stdout);
      exit(cli_stdout_ok() ? CLI_EXIT_RUN : 0);
    }
    const cli_flag *f = flags;
    if (a[0] != '-' || a[1] == 0) { /* an operand */
      while (f->name && f->kind != CLI_ARG && f->kind != CLI_ARGS) f++;
      if (!f->name) return cli_fail(-1, "unexpected argument '%s'; see %s --help", a, cli_name);
      if (set_flag(f, f->name, a)) return -1;
      continue;
    }
    size_t n = strcspn(a, "=");
    while (f->name && !(strlen(f->name) == n && strncmp(f->name, a, n) == 0)) f++;
    if (!f->name)
      return cli_fail(-1, "unknown option '%.*s'; see %s --help", (int)n, a, cli_name);
    if (f->kind == CLI_SWITCH) {
      if (a[n] == '=')
        return cli_fail(-1, "%s is a switch and takes no value", f->name);
      *(int *)f->dst = 1;
      continue;
    }
    if (f->kind == CLI_RAW && a[n] != '=' && i + 1 < argc) {
      set_flag(f, f->name, argv[++i]);
      continue;
    }
    char name[64];
    const char *v = cli_flag_value(argc, argv, &i, name, sizeof name);
    if (!v || set_flag(f, name, v)) return -1;
  }
  return 0;
}

uint64_t cli_argv_digest(int argc, char **argv) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a over every argument and its end */
  for (int i = 0; i < argc; i++)
    for (const char *p = argv[i];; p++) {
      h = (h ^ (unsigned char)*p) * 1099511628211ull;
      if (!*p) break;
    }
  return h;
}

#ifndef REMAT_VOCAB_DIR
#define REMAT_VOCAB_DIR "third_party/gpt2-vocab"
#endif
/* The installed vocabulary's directory relative to the installed remat's
 * (app/CMakeLists.txt derives it from the install directories). */
#ifndef REMAT_VOCAB_FROM_BIN
#define REMAT_VOCAB_FROM_BIN "../share/remat/gpt2-vocab"
#endif

/* REMAT_VOCAB_FROM_BIN from the directory of the running executable, into
 * buf, when it holds encoder.json: a remat installed with its vocabulary,
 * wherever its prefix was moved. */
static int vocab_beside_self(char *buf, size_t cap) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 0;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return 0;
  *slash = 0;
  /* The executable's path has no links and no "..": each leading "../"
   * drops its last directory, so messages name the files plainly. */
  const char *rel = REMAT_VOCAB_FROM_BIN;
  while (!strncmp(rel, "../", 3) && (slash = strrchr(self, '/')) && slash != self) {
    *slash = 0;
    rel += 3;
  }
  char probe[4096 + 128];
  int len = snprintf(buf, cap, "%s/%s", self, rel);
  if (len < 0 || (size_t)len >= cap) return 0;
  snprintf(probe, sizeof probe, "%s/encoder.json", buf);
  return access(probe, R_OK) == 0;
}

const char *cli_vocab_dir(const char *flag) {
  if (flag) return flag;
  const char *env = getenv("REMAT_VOCAB");
  if (env && *env) return env;
  static char beside[4096 + 64];
  return vocab_beside_self(beside, sizeof beside) ? beside : REMAT_VOCAB_DIR;
}
