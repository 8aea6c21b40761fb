/* cmd_tokenize.c: `remat tokenize`: text files, directories of them or
 * standard input to llm.c token shards with GPT-2's byte-level BPE (or as
 * bytes), a training shard and a validation shard beside it, documents
 * joined by <|endoftext|>; and --decode, a shard back to text. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "remat.h"

static const char *usage_text =
          "usage: remat tokenize INPUT... --out PREFIX [options]\n"
          "       remat tokenize --decode SHARD [--out FILE] [options]\n"
          "\n"
          "Encodes text with GPT-2's byte-level BPE (its 50257-token vocabulary, as\n"
          "tiktoken's r50k_base does) into llm.c token shards (magic 20240520, uint16\n"
          "tokens): PREFIX_train.bin and PREFIX_val.bin, the validation shard holding\n"
          "the last --val-frac of the tokens. Train on them with\n"
          "  remat train --data PREFIX_train.bin --config L,C,NH,50257,T\n"
          "(a BPE shard needs a vocabulary of at least 50257). Any bytes are accepted:\n"
          "bytes that are not UTF-8 are kept, so decoding gives one file back exactly.\n"
          "\n"
          "Inputs, in the order given:\n"
          "  FILE                a text file: one document\n"
          "  FILE.jsonl          one JSON object per line, its \"text\" string a document\n"
          "                      (blank lines skipped; a line that is not such an object\n"
          "                      is an error naming the file and line)\n"
          "  DIR                 every file under DIR, as above, in sorted order (bytewise,\n"
          "                      depth first), subdirectories included; names starting\n"
          "                      with '.' and links to directories are skipped\n"
          "  -                   standard input: one document\n"
          "Documents are joined by <|endoftext|> (token 50256), one between each two;\n"
          "with --bytes by nothing (a byte shard has no such token).\n"
          "\n"
          "options:\n"
          "  --out PREFIX        write PREFIX_train.bin and PREFIX_val.bin (saved atomically;\n"
          "                      existing shards are replaced, an input never; nothing is\n"
          "                      written when an input cannot be read)\n"
          "  --val-frac X        share of the tokens in the validation shard, taken from\n"
          "                      the end, in [0, 0.9] (default 0.1; 0 writes no validation\n"
          "                      shard)\n"
          "  --allow-special     the text \"<|endoftext|>\" in a document is the token 50256\n"
          "                      (documents already joined by it); without it, it is\n"
          "                      ordinary text, 7 tokens (27 91 437 1659 5239 91 29)\n"
          "  --vocab DIR         directory holding encoder.json and vocab.bpe (default\n"
          "                      $REMAT_VOCAB, else share/remat/gpt2-vocab beside an\n"
          "                      installed remat, else third_party/gpt2-vocab of remat's\n"
          "                      source tree, where scripts/fetch-vocab.sh puts them)\n"
          "  --bytes             one token per byte (vocabulary 256), as `remat train\n"
          "                      --text` reads text; no vocabulary needed\n"
          "  --decode SHARD      turn a shard back into text, on standard output or into\n"
          "                      --out FILE; with --bytes for a byte shard\n"
          "  --quiet             print nothing but errors\n"
          "  -h, --help          this help\n"
          "\n"
          "Exit status: 0 done; 1 an input could not be read, a shard written or\n"
          "decoded; 2 bad usage.\n";


typedef struct {
  cli_operands inputs;
  const char *out, *vocab, *decode;
  double val_frac;
  int bytes, quiet, allow_special;
} opts;

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.val_frac = 0.1};
  const cli_flag flags[] = {
      {.name = "--out", .kind = CLI_STR, .dst = &o->out},
      {.name = "--vocab", .kind = CLI_STR, .dst = &o->vocab},
      {.name = "--decode", .kind = CLI_STR, .dst = &o->decode},
      {.name = "--val-frac", .kind = CLI_F64, .dst = &o->val_frac, .lo = 0, .hi = 0.9},
      {.name = "--allow-special", .kind = CLI_SWITCH, .dst = &o->allow_special},
      {.name = "--bytes", .kind = CLI_SWITCH, .dst = &o->bytes},
      {.name = "--quiet", .kind = CLI_SWITCH, .dst = &o->quiet},
      {.name = "INPUT", .kind = CLI_ARGS, .dst = &o->inputs},
      {NULL}};
  if (cli_parse_flags(argc, argv, flags, usage_text)) return -1;
  if (o->decode && o->inputs.n)
    return cli_fail(-1, "--decode reads a shard, not the input '%s'", o->inputs.v[0]);
  if (o->decode && o->allow_special)
    return cli_fail(-1, "--allow-special is for encoding; a shard's 50256 always decodes "
                        "to <|endoftext|>");
  if (!o->decode && !o->inputs.n)
    return cli_fail(-1, "no input given: name text files, directories or - (standard "
                        "input); see remat tokenize --help");
  if (!o->decode && !o->out)
    return cli_fail(-1, "--out PREFIX is needed: the shards are PREFIX_train.bin and "
                        "PREFIX_val.bin");
  if (o->bytes && o->allow_special)
    return cli_fail(-1, "--allow-special needs GPT-2's BPE: a byte shard (--bytes) has no "
                        "<|endoftext|> token");
  int stdin_given = 0;
  for (int i = 0; i < o->inputs.n; i++)
    if (!strcmp(o->inputs.v[i], "-") && stdin_given++)
      return cli_fail(-1, "- (standard input) is given twice; it can be read once");
  return 0;
}

/* ------------------------------------------------------------- inputs */

/* The files to read, in order: the operands with each directory replaced
 * by the files under it. "-" stands for standard input. */
typedef struct {
  char **path; /* (n) */
  int n, cap;
} file_list;

static int list_add(file_list *l, const char *path) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    char **p = realloc(l->path, (size_t)cap * sizeof *p);
    if (!p) return cli_fail(1, "out of memory listing the inputs");
    l->path = p;
    l->cap = cap;
  }
  if (!(l->path[l->n] = strdup(path))) return cli_fail(1, "out of memory listing the inputs");
  l->n++;
  return 0;
}

static void list_free(file_list *l) {
  for (int i = 0; i < l->n; i++) free(l->path[i]);
  free(l->path);
}

/* Byte order, whatever the locale: the same tree lists the same way. */
static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int visible(const struct dirent *e) { return e->d_name[0] != '.'; }

/* The regular files under dir, in sorted order, depth first. */
static int list_dir(file_list *l, const char *dir) {
  struct dirent **names;
  int n = scandir(dir, &names, visible, by_name);
  if (n < 0) return cli_fail(1, "cannot list the directory '%s': %s", dir, strerror(errno));
  int rc = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
    char *path = rc ? NULL : malloc(len);
    struct stat st, lst;
    if (!rc && !path) rc = cli_fail(1, "out of memory listing '%s'", dir);
    if (!rc) {
      snprintf(path, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
               names[i]->d_name);
      if (lstat(path, &lst) != 0 || stat(path, &st) != 0)
        ; /* a dangling link or a file gone meanwhile: nothing to read */
      else if (S_ISDIR(lst.st_mode))
        rc = list_dir(l, path);
      else if (S_ISREG(st.st_mode))
        rc = list_add(l, path);
    }
    free(path);
    free(names[i]);
  }
  free(names);
  return rc;
}

static int list_inputs(const opts *o, file_list *l) {
  for (int i = 0; i < o->inputs.n; i++) {
    const char *in = o->inputs.v[i];
    struct stat st;
    if (!strcmp(in, "-")) {
      if (list_add(l, in)) return 1;
      continue;
    }
    if (stat(in, &st) != 0)
      return cli_fail(1, "cannot read '%s': %s", in, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      int before = l->n;
      if (list_dir(l, in)) return 1;
      if (l->n == before)
        return cli_fail(1, "the directory '%s' holds no file to read (names starting with '.' "
                        "are skipped); name text files, or a directory that holds them", in);
    } else if (S_ISREG(st.st_mode)) {
      if (list_add(l, in)) return 1;
    } else {
      return cli_fail(1, "'%s' is not a regular file or a directory: give text files, "
                      "directories of them, or - for standard input", in);
    }
  }
  return 0;
}

/* All of standard input. */
static int read_stdin(char **data, size_t *size) {
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) return cli_fail(1, "standard input (%zu bytes and more) does not fit in memory", n);
    n += fread(buf + n, 1, cap - n, stdin);
    if (n < cap) break;
    char *p = realloc(buf, cap *= 2);
    if (!p) free(buf);
    buf = p;
  }
  if (ferror(stdin)) {
    free(buf);
    return cli_fail(1, "cannot read standard input: %s", strerror(errno ? errno : EIO));
  }
  *data = buf;
  *size = n;
  return 0;
}

static int is_jsonl(const char *path) {
  size_t n = strlen(path);
  return n > 6 && !strcmp(path + n - 6, ".jsonl");
}

/* ----------------------------------------------------------- encoding */

/* The tokens so far, and what went into them. */
typedef struct {
  remat_bpe *bpe; /* NULL: bytes */
  int allow_special;
  remat_ids ids;
  int64_t docs;
  size_t bytes;
  double seconds; /* encoding only */
} corpus;

/* Appends one document, after <|endoftext|> when one came before (BPE). */
static int add_document(corpus *c, const char *text, size_t n, const char *where) {
  remat_error err;
  double t0 = remat_now();
  int rc = 0;
  if (c->bpe) {
    if (c->docs) rc = remat_ids_push(&c->ids, REMAT_BPE_EOT, &err);
    if (!rc)
      rc = c->allow_special ? remat_bpe_encode_special(c->bpe, text, n, &c->ids, &err)
                            : remat_bpe_encode(c->bpe, text, n, &c->ids, &err);
  } else {
    for (size_t i = 0; i < n && !rc; i++)
      rc = remat_ids_push(&c->ids, (unsigned char)text[i], &err);
  }
  c->seconds += remat_now() - t0;
  if (rc) return cli_fail(1, "%s: %s", where, err.msg);
  c->docs++;
  c->bytes += n;
  return 0;
}

/* A .jsonl file's documents: each line's "text". text is the file's bytes,
 * NUL-terminated (cli_read_file leaves room); lines are cut in place. */
static int add_jsonl(corpus *c, const char *path, char *text, size_t size) {
  char *line = text, *end = text + size;
  if (size >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) line += 3; /* a UTF-8 byte order mark */
  for (int64_t lineno = 1; line < end; lineno++) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    char *stop = nl ? nl : end;
    size_t n = (size_t)(stop - line);
    if (n && line[n - 1] == '\r') n--;
    line[n] = 0;
    if (strspn(line, " \t") == n) { /* a blank line: no document */
      line = stop + 1;
      continue;
    }
    if (memchr(line, 0, n))
      return cli_fail(1, "'%s' line %lld holds a NUL byte: a .jsonl file holds one JSON "
                      "object per line", path, (long long)lineno);
    const char *after = NULL;
    cJSON *obj = cJSON_ParseWithOpts(line, &after, 1);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "text");
    int rc = 0;
    char where[4200];
    if (!obj)
      rc = cli_fail(1, "'%s' line %lld is not JSON (at byte %lld of the line): a .jsonl file holds one "
                    "JSON object per line, its document in \"text\"", path, (long long)lineno,
                    (long long)(after ? after - line + 1 : 1));
    else if (!cJSON_IsObject(obj) || !cJSON_IsString(t))
      rc = cli_fail(1, "'%s' line %lld has no \"text\" string: each line of a .jsonl file is "
                    "an object with its document in \"text\"", path, (long long)lineno);
    else {
      snprintf(where, sizeof where, "'%s' line %lld", path, (long long)lineno);
      rc = add_document(c, t->valuestring, strlen(t->valuestring), where);
    }
    cJSON_Delete(obj);
    if (rc) return rc;
    line = stop + 1;
  }
  return 0;
}

/* Every input's documents, in order. */
static int read_corpus(corpus *c, const file_list *files) {
  for (int i = 0; i < files->n; i++) {
    const char *path = files->path[i];
    int in = !strcmp(path, "-");
    char *text = NULL;
    size_t n = 0;
    if (in ? read_stdin(&text, &n) : cli_read_file(path, &text, &n)) return 1;
    char where[4200];
    snprintf(where, sizeof where, "%s%s%s", in ? "" : "'", in ? "standard input" : path,
             in ? "" : "'");
    int rc = !in && is_jsonl(path) ? add_jsonl(c, path, text, n) : add_document(c, text, n, where);
    free(text);
    if (rc) return rc;
  }
  return 0;
}

static int save_shard(const char *path, const int32_t *tok, int64_t n, remat_error *err) {
  remat_tokens t = {.tok = (int32_t *)tok, .n = n, .max_id = 0};
  return remat_tokens_save(&t, path, err);
}

static int decode(const opts *o) {
  remat_tokens t = {0};
  remat_error err;
  remat_bpe *bpe = NULL;
  char *text = NULL;
  int rc = 1;
  if (o->out && remat_same_file(o->out, o->decode)) {
    cli_fail(1, "--out '%s' is the shard being decoded; choose another name", o->out);
    return 1;
  }
  if (remat_tokens_load(&t, o->decode, &err)) {
    cli_fail(1, "%s", err.msg);
    return 1;
  }
  size_t len = 0;
  if (o->bytes) {
    if (t.max_id > 255) {
      cli_fail(1, "'%s' holds token %lld: not a byte shard; drop --bytes to decode it as GPT-2 BPE",
               o->decode, (long long)t.max_id);
      goto done;
    }
    text = malloc((size_t)t.n);
    for (int64_t i = 0; text && i < t.n; i++) text[i] = (char)t.tok[i];
    len = (size_t)t.n;
  } else {
    if (remat_bpe_create(&bpe, cli_vocab_dir(o->vocab), &err)) {
      cli_fail(1, "%s", err.msg);
      goto done;
    }
    len = remat_bpe_decode(bpe, t.tok, t.n, NULL, 0, &err);
    if (len == (size_t)-1) {
      cli_fail(1, "'%s': %s", o->decode, err.msg);
      goto done;
    }
    text = malloc(len ? len : 1);
    if (text) remat_bpe_decode(bpe, t.tok, t.n, text, len, &err);
  }
  if (!text) {
    cli_fail(1, "out of memory decoding '%s'", o->decode);
    goto done;
  }
  if (o->out) {
    if (remat_save_bytes(o->out, "text", text, len, &err)) {
      cli_fail(1, "%s", err.msg);
      goto done;
    }
    if (!o->quiet)
      fprintf(stderr, "remat tokenize: %lld tokens of '%s' -> %zu bytes in '%s'\n", (long long)t.n,
              o->decode, len, o->out);
  } else {
    if (fwrite(text, 1, len, stdout) != len || cli_stdout_ok()) goto done;
  }
  rc = 0;
done:
  free(text);
  remat_bpe_destroy(bpe);
  remat_tokens_free(&t);
  return rc;
}

/* What the inputs are called: the one file (quoted in messages), standard
 * input, or how many; returns whether the name is plural. */
static int inputs_name(const file_list *files, const corpus *c, int quote, char *buf,
                       size_t cap) {
  if (files->n == 1 && c->docs <= 1) {
    const char *q = quote ? "'" : "";
    if (strcmp(files->path[0], "-")) snprintf(buf, cap, "%s%s%s", q, files->path[0], q);
    else snprintf(buf, cap, "standard input");
    return 0;
  }
  snprintf(buf, cap, "%d input%s (%lld documents)", files->n, files->n == 1 ? "" : "s",
           (long long)c->docs);
  return 1;
}

/* The count of tokens fits two shards (or one with --val-frac 0); else
 * says what to do. */
static int check_count(const opts *o, const char *name, int plural, int64_t n, int64_t n_train,
                       int64_t n_val) {
  const char *s = n == 1 ? "" : "s", *give = plural ? "give" : "gives";
  if (n > INT32_MAX)
    return cli_fail(1, "%s %s %lld tokens; an llm.c shard holds at most %d: split the input",
                    name, give, (long long)n, INT32_MAX);
  if (o->val_frac > 0 && (n_train < 2 || n_val < 2))
    return cli_fail(1, "%s %s %lld token%s: too few for a training and a validation shard of "
                    "at least 2 tokens each (--val-frac %g); give a longer text%s", name, give,
                    (long long)n, s, o->val_frac, n_train >= 2 ? ", or --val-frac 0" : "");
  if (n_train < 2)
    return cli_fail(1, "%s %s %lld token%s: a shard needs at least 2; give a longer text",
                    name, give, (long long)n, s);
  return 0;
}

static int encode(const opts *o) {
  remat_error err;
  size_t plen = strlen(o->out) + 16;
  char *train = malloc(plen), *val = malloc(plen);
  file_list files = {0};
  corpus c = {.allow_special = o->allow_special};
  int rc = 1;
  if (!train || !val) {
    cli_fail(1, "out of memory");
    goto done;
  }
  snprintf(train, plen, "%s_train.bin", o->out);
  snprintf(val, plen, "%s_val.bin", o->out);
  if (list_inputs(o, &files)) goto done;
  const char *outs[2] = {train, o->val_frac > 0 ? val : NULL};
  for (int i = 0; i < 2; i++) {
    if (!outs[i]) continue;
    for (int f = 0; f < files.n; f++)
      if (strcmp(files.path[f], "-") && remat_same_file(outs[i], files.path[f])) {
        cli_fail(1, "the shard '%s' would overwrite the input '%s'; choose another --out",
                 outs[i], files.path[f]);
        goto done;
      }
    if (remat_output_check(outs[i], &err)) {
      cli_fail(1, "%s", err.msg);
      goto done;
    }
  }
  if (!o->bytes && remat_bpe_create(&c.bpe, cli_vocab_dir(o->vocab), &err)) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  if (read_corpus(&c, &files)) goto done;
  char name[4200];
  int plural = inputs_name(&files, &c, 1, name, sizeof name);
  int64_t n_val = o->val_frac > 0 ? (int64_t)((double)c.ids.n * o->val_frac) : 0;
  int64_t n_train = c.ids.n - n_val;
  if (check_count(o, name, plural, c.ids.n, n_train, n_val)) goto done;
  if (save_shard(train, c.ids.ids, n_train, &err) ||
      (n_val && save_shard(val, c.ids.ids + n_train, n_val, &err))) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  if (!o->quiet) {
    inputs_name(&files, &c, 0, name, sizeof name);
    printf("tokenize  %s: %zu bytes -> %lld tokens (%s, %.2f bytes per token) in %.2f s\n",
           name, c.bytes, (long long)c.ids.n,
           o->bytes ? "bytes" : "GPT-2 BPE", c.ids.n ? (double)c.bytes / (double)c.ids.n : 0.0,
           c.seconds);
    printf("wrote     %s (%lld tokens)", train, (long long)n_train);
    if (n_val) printf(", %s (%lld tokens)", val, (long long)n_val);
    printf("\n");
    if (!o->bytes)
      printf("train     remat train --data %s --config L,C,NH,50257,T (a vocabulary of 50257)\n",
             train);
    if (cli_stdout_ok()) goto done;
  }
  rc = 0;
done:
  remat_ids_free(&c.ids);
  remat_bpe_destroy(c.bpe);
  list_free(&files);
  free(train);
  free(val);
  return rc;
}

int remat_cmd_tokenize(int argc, char **argv) {
  cli_name = "remat tokenize";
  opts o;
  int rc = parse(argc, argv, &o) ? CLI_EXIT_USAGE : o.decode ? decode(&o) : encode(&o);
  free(o.inputs.v);
  return rc;
}
