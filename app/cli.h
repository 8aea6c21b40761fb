/* cli.h: what the remat subcommands share: one-line errors prefixed with the
 * command's name, and flag values parsed with their range checked. */
#ifndef REMAT_CLI_H
#define REMAT_CLI_H

#include <stddef.h>
#include <stdint.h>

enum { CLI_EXIT_RUN = 1, CLI_EXIT_USAGE = 2 };

/* "remat train" or "remat plan": the prefix of every message. */
extern const char *cli_name;

/* The last message cli_fail formed, printed or not; with cli_silent set
 * (ranks other than 0) nothing is printed. */
extern char cli_last_message[1024];
extern int cli_silent;

/* Prints "<cli_name>: <message>" on stderr as one line; returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An integer in [lo, hi] / a finite number in [lo, hi] (or [lo, hi) when
 * hi_open); on a bad value prints why, naming the flag, and returns -1. */
int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f64(const char *flag, const char *s, double lo, double hi, int hi_open, double *out);

/* Flags: "--name VALUE" or "--name=VALUE". At argv[*i], splits the flag's
 * name into name (cap bytes) and returns its value, advancing *i past a
 * separate value; NULL (after printing why) when the value is missing. A
 * value that starts with "--" is refused as missing, so "--save --quiet" is
 * not read as saving to a file named "--quiet". */
const char *cli_flag_value(int argc, char **argv, int *i, char *name, size_t cap);

/* A table of flags: each flag's name, what its value is and where it goes.
 * Integers and numbers are range-checked (cli_parse_i64 / cli_parse_f64);
 * a switch takes no value and sets an int to 1. A CLI_ARG flag is a string
 * given at most once, by the flag or as an operand (an argument that does
 * not start with '-', or "-"); what names it in the refusal of a second
 * ("more than one problem file given"). Without a CLI_ARG flag, operands
 * are refused. Names may be short ("-o"). */
/* A CLI_RAW flag's value is the next argument as it is, even one that starts
 * with "--" (a prompt). A CLI_ARGS flag takes every operand, in order, into
 * a cli_operands (dst; its array is the caller's to free). */
typedef enum {
  CLI_STR, CLI_I64, CLI_INT, CLI_U64, CLI_F64, CLI_F32, CLI_SWITCH, CLI_ARG, CLI_RAW, CLI_ARGS
} cli_kind;
typedef struct cli_operands {
  const char **v; /* (n) */
  int n;
} cli_operands;
typedef struct cli_flag {
  const char *name;
  cli_kind kind;
  void *dst;
  double lo, hi;
  int hi_open;
  const char *what; /* CLI_ARG only */
} cli_flag;
/* Parses argv[1..] against flags (ended by a NULL name). --help or -h
 * prints usage and exits (status 1 when standard output cannot be written).
 * Returns 0, or -1 after printing what was wrong. */
int cli_parse_flags(int argc, char **argv, const cli_flag *flags, const char *usage);

/* The flag of flags named name ("--steps"), or NULL. */
const cli_flag *cli_find_flag(const cli_flag *flags, const char *name);
/* f's value from the text v, checked as on the command line (not a
 * switch's); -1 after cli_fail said why. */
int cli_set_flag(const cli_flag *f, const char *v);

/* A digest of the command line, for ranks to agree they run the same one. */
uint64_t cli_argv_digest(int argc, char **argv);

/* The whole of path, which must be a regular file, in *data (malloc'd, one
 * byte more than *size: room for a NUL); else prints why (cannot read, not
 * a regular file, too large, grew while read) and returns 1. */
int cli_read_file(const char *path, char **data, size_t *size);

/* Writes to stdout went through (stdout flushed, no error); else prints why
 * and returns -1. */
int cli_stdout_ok(void);

/* The directory of GPT-2's encoder.json and vocab.bpe: flag (--vocab) when
 * given, else $REMAT_VOCAB, else the copy `cmake --install` puts beside an
 * installed remat (../share/remat/gpt2-vocab from the executable's own
 * directory) when it holds encoder.json, else where scripts/fetch-vocab.sh
 * puts them (third_party/gpt2-vocab in the source tree remat was built
 * from). */
const char *cli_vocab_dir(const char *flag);

#endif
