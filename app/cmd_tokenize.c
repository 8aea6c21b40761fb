/* cmd_tokenize.c: `remat tokenize`: a text file to llm.c token shards with
 * GPT-2's byte-level BPE (or as bytes), a training shard and a validation
 * shard beside it; and --decode, a shard back to text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "remat.h"

static const char *usage_text =
          "usage: remat tokenize TEXT_FILE --out PREFIX [options]\n"
          "       remat tokenize --decode SHARD [--out FILE] [options]\n"
          "\n"
          "Encodes a text file with GPT-2's byte-level BPE (its 50257-token vocabulary,\n"
          "as tiktoken's r50k_base does) into llm.c token shards (magic 20240520,\n"
          "uint16 tokens): PREFIX_train.bin and PREFIX_val.bin, the validation shard\n"
          "holding the last --val-frac of the tokens. Train on them with\n"
          "  remat train --data PREFIX_train.bin --config L,C,NH,50257,T\n"
          "(a BPE shard needs a vocabulary of at least 50257). Any bytes are accepted:\n"
          "bytes that are not UTF-8 are kept, so decoding gives the file back exactly.\n"
          "\n"
          "options:\n"
          "  --out PREFIX        write PREFIX_train.bin and PREFIX_val.bin (saved atomically;\n"
          "                      existing shards are replaced, the input never)\n"
          "  --val-frac X        share of the tokens in the validation shard, taken from\n"
          "                      the end, in [0, 0.9] (default 0.1; 0 writes no validation\n"
          "                      shard)\n"
          "  --vocab DIR         directory holding encoder.json and vocab.bpe (default\n"
          "                      $REMAT_VOCAB, else third_party/gpt2-vocab of remat's\n"
          "                      source tree, where scripts/fetch-vocab.sh puts them)\n"
          "  --bytes             one token per byte (vocabulary 256), as `remat train\n"
          "                      --text` reads text; no vocabulary needed\n"
          "  --decode SHARD      turn a shard back into text, on standard output or into\n"
          "                      --out FILE; with --bytes for a byte shard\n"
          "  --quiet             print nothing but errors\n"
          "  -h, --help          this help\n"
          "\n"
          "Exit status: 0 done; 1 a file could not be read, written or decoded;\n"
          "2 bad usage.\n";


typedef struct {
  const char *input, *out, *vocab, *decode;
  double val_frac;
  int bytes, quiet;
} opts;

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.val_frac = 0.1};
  const cli_flag flags[] = {
      {.name = "--out", .kind = CLI_STR, .dst = &o->out},
      {.name = "--vocab", .kind = CLI_STR, .dst = &o->vocab},
      {.name = "--decode", .kind = CLI_STR, .dst = &o->decode},
      {.name = "--val-frac", .kind = CLI_F64, .dst = &o->val_frac, .lo = 0, .hi = 0.9},
      {.name = "--bytes", .kind = CLI_SWITCH, .dst = &o->bytes},
      {.name = "--quiet", .kind = CLI_SWITCH, .dst = &o->quiet},
      {.name = "TEXT_FILE", .kind = CLI_ARG, .dst = &o->input, .what = "text file"},
      {NULL}};
  if (cli_parse_flags(argc, argv, flags, usage_text)) return -1;
  if (o->decode && o->input)
    return cli_fail(-1, "--decode reads a shard, not the text file '%s'", o->input);
  if (!o->decode && !o->input)
    return cli_fail(-1, "no text file given; see remat tokenize --help");
  if (!o->decode && !o->out)
    return cli_fail(-1, "--out PREFIX is needed: the shards are PREFIX_train.bin and "
                        "PREFIX_val.bin");
  return 0;
}

/* The whole file, which must be a regular file. */
static int read_text(const char *path, char **data, size_t *size) {
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

static int encode(const opts *o) {
  remat_error err;
  size_t plen = strlen(o->out) + 16;
  char *train = malloc(plen), *val = malloc(plen);
  snprintf(train, plen, "%s_train.bin", o->out);
  snprintf(val, plen, "%s_val.bin", o->out);
  char *text = NULL;
  remat_bpe *bpe = NULL;
  remat_ids ids = {0};
  int rc = 1;
  const char *outs[2] = {train, o->val_frac > 0 ? val : NULL};
  for (int i = 0; i < 2; i++) {
    if (!outs[i]) continue;
    if (remat_same_file(outs[i], o->input)) {
      cli_fail(1, "the shard '%s' would overwrite the input '%s'; choose another --out", outs[i],
               o->input);
      goto done;
    }
    if (remat_output_check(outs[i], &err)) {
      cli_fail(1, "%s", err.msg);
      goto done;
    }
  }
  size_t n = 0;
  if (read_text(o->input, &text, &n)) goto done;
  double t0 = remat_now();
  if (o->bytes) {
    for (size_t i = 0; i < n; i++)
      if (remat_ids_push(&ids, (unsigned char)text[i], &err)) break;
  } else {
    if (remat_bpe_create(&bpe, cli_vocab_dir(o->vocab), &err)) {
      cli_fail(1, "%s", err.msg);
      goto done;
    }
    t0 = remat_now();
    if (remat_bpe_encode(bpe, text, n, &ids, &err)) {
      cli_fail(1, "'%s': %s", o->input, err.msg);
      goto done;
    }
  }
  double dt = remat_now() - t0;
  if (ids.n > INT32_MAX) {
    cli_fail(1, "'%s' gives %lld tokens; an llm.c shard holds at most %d: split the file",
             o->input, (long long)ids.n, INT32_MAX);
    goto done;
  }
  int64_t n_val = o->val_frac > 0 ? (int64_t)((double)ids.n * o->val_frac) : 0;
  int64_t n_train = ids.n - n_val;
  if (n_train < 2 || (o->val_frac > 0 && n_val < 2)) {
    const char *s = ids.n == 1 ? "" : "s";
    if (o->val_frac > 0)
      cli_fail(1, "'%s' gives %lld token%s: too few for a training and a validation shard of at "
               "least 2 tokens each (--val-frac %g); give a longer text%s", o->input,
               (long long)ids.n, s, o->val_frac, n_train >= 2 ? ", or --val-frac 0" : "");
    else
      cli_fail(1, "'%s' gives %lld token%s: a shard needs at least 2; give a longer text",
               o->input, (long long)ids.n, s);
    goto done;
  }
  if (save_shard(train, ids.ids, n_train, &err) ||
      (n_val && save_shard(val, ids.ids + n_train, n_val, &err))) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  if (!o->quiet) {
    printf("tokenize  %s: %zu bytes -> %lld tokens (%s, %.2f bytes per token) in %.2f s\n",
           o->input, n, (long long)ids.n, o->bytes ? "bytes" : "GPT-2 BPE",
           ids.n ? (double)n / (double)ids.n : 0.0, dt);
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
  remat_ids_free(&ids);
  remat_bpe_destroy(bpe);
  free(text);
  free(train);
  free(val);
  return rc;
}

int remat_cmd_tokenize(int argc, char **argv) {
  cli_name = "remat tokenize";
  opts o;
  if (parse(argc, argv, &o)) return CLI_EXIT_USAGE;
  return o.decode ? decode(&o) : encode(&o);
}
