/* test_text.c: the BPE tokenizer against js-tiktoken's r50k_base. Runs
 * tests/node/bpe_cases.mjs under node (random text of many scripts, emoji,
 * white space, digits and contractions, and adversarial strings), encodes
 * each text with remat and compares the ids one by one, and decodes the
 * reference ids back to the text's bytes; once as ordinary text
 * (remat_bpe_encode) and once with "<|endoftext|>" as the token 50256
 * (remat_bpe_encode_special against allowedSpecial "all"). Then what no JavaScript string can
 * hold: bytes that are not UTF-8 must come back byte for byte. Fails (never
 * skips) when node, js-tiktoken or the vocabulary is missing: scripts/
 * fetch-vocab.sh --test installs them.
 * Usage: test_text VOCAB_DIR CASES_SCRIPT [COUNT] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "test_util.h"

static int read_u32(FILE *f, uint32_t *v) {
  unsigned char b[4];
  if (fread(b, 1, 4, f) != 4) return -1;
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return 0;
}

static void show(const char *what, const unsigned char *s, size_t n) {
  fprintf(stderr, "  %s (%zu bytes): \"", what, n);
  for (size_t i = 0; i < n && i < 120; i++)
    fprintf(stderr, s[i] >= 32 && s[i] < 127 && s[i] != '"' ? "%c" : "\\x%02x", s[i]);
  fprintf(stderr, "%s\"\n", n > 120 ? "..." : "");
}

/* Every case of the reference against remat, as ordinary text or with the
 * special token (special); returns how many cases ran. */
static int64_t against_reference(remat_bpe *bpe, const char *script, int count, int special,
                                 int64_t *tokens, int64_t *bytes) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "node '%s' 20240520 %d%s", script, count, special ? " special" : "");
  FILE *f = popen(cmd, "r");
  CHECKF(f != NULL, "started %s", cmd);
  if (!f) return 0;
  int64_t cases = 0, bad = 0;
  uint32_t n;
  unsigned char *text = NULL;
  int32_t *want = NULL;
  char *dec = NULL;
  remat_ids got = {0};
  remat_error err;
  while (read_u32(f, &n) == 0 && n != UINT32_MAX) {
    text = realloc(text, n + 1);
    uint32_t k;
    if (fread(text, 1, n, f) != n || read_u32(f, &k)) break;
    want = realloc(want, (k + 1) * sizeof *want);
    int short_read = 0;
    for (uint32_t i = 0; i < k && !short_read; i++) {
      uint32_t v = 0;
      short_read = read_u32(f, &v) != 0;
      want[i] = (int32_t)v;
    }
    if (short_read) break;
    cases++;
    got.n = 0;
    int rc = special ? remat_bpe_encode_special(bpe, (const char *)text, n, &got, &err)
                     : remat_bpe_encode(bpe, (const char *)text, n, &got, &err);
    int same = rc == 0 && got.n == (int64_t)k && (k == 0 || memcmp(got.ids, want, k * sizeof *want) == 0);
    dec = realloc(dec, n + 1);
    size_t dn = remat_bpe_decode(bpe, want, k, dec, n, &err);
    int round = dn == n && (n == 0 || memcmp(dec, text, n) == 0);
    if ((!same || !round) && bad++ < 5) {
      fprintf(stderr, "case %lld differs (encode %s, decode %s)\n", (long long)cases,
              same ? "same" : "differs", round ? "same" : "differs");
      show("text", text, n);
      int64_t i = 0;
      while (i < got.n && i < (int64_t)k && got.ids[i] == want[i]) i++;
      fprintf(stderr, "  first difference at id %lld of %lld/%u: remat %d, js-tiktoken %d\n",
              (long long)i, (long long)got.n, k, i < got.n ? got.ids[i] : -1,
              i < (int64_t)k ? want[i] : -1);
    }
    *tokens += k;
    *bytes += n;
  }
  int status = pclose(f);
  CHECKF(status == 0, "node bpe_cases.mjs exited with status %d (0 wanted: node and "
         "tests/node/node_modules/js-tiktoken installed by scripts/fetch-vocab.sh --test)", status);
  CHECKF(bad == 0, "%lld of %lld texts (%lld bytes, %lld tokens) encode to js-tiktoken's "
         "r50k_base ids%s and decode back: %lld differ", (long long)(cases - bad),
         (long long)cases, (long long)*bytes, (long long)*tokens,
         special ? " (<|endoftext|> allowed as 50256)" : "", (long long)bad);
  free(text);
  free(want);
  free(dec);
  remat_ids_free(&got);
  return cases;
}

/* ------------------------------------------------ long pieces, plainly */

/* The tokens by their bytes, for the plain merge loop below. */
typedef struct {
  const remat_bpe *bpe;
  int32_t *slot; /* open addressing, -1 empty */
  size_t cap;
} token_table;

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static int32_t table_find(const token_table *t, const unsigned char *p, size_t n) {
  for (size_t i = fnv(p, n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (t->slot[i] < 0) return -1;
    size_t len;
    const char *q = remat_bpe_token(t->bpe, t->slot[i], &len);
    if (len == n && memcmp(q, p, n) == 0) return t->slot[i];
  }
}

/* tiktoken's byte_pair_merge as written there: while some adjacent pair
 * concatenates to a token, merge the one whose token id is lowest (leftmost
 * on ties). O(n^2): the reference for remat's heap. */
static int64_t plain_merge(const token_table *t, const unsigned char *p, size_t n, int32_t *out) {
  int32_t whole = table_find(t, p, n);
  if (whole >= 0) {
    out[0] = whole;
    return 1;
  }
  size_t *start = malloc((n + 1) * sizeof *start), parts = n;
  for (size_t i = 0; i <= n; i++) start[i] = i; /* part i is [start[i], start[i+1]) */
  for (;;) {
    int32_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts; i++) {
      int32_t r = table_find(t, p + start[i], start[i + 2] - start[i]);
      if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
    }
    if (best < 0) break;
    memmove(start + at + 1, start + at + 2, (parts - at - 1) * sizeof *start);
    parts--;
  }
  for (size_t i = 0; i < parts; i++) out[i] = table_find(t, p + start[i], start[i + 1] - start[i]);
  free(start);
  return (int64_t)parts;
}

/* Pieces of thousands of bytes (each one piece of the pre-tokenizer: only
 * letters, only spaces, only punctuation, only bytes that are not UTF-8)
 * against the plain loop. */
static void long_pieces(remat_bpe *bpe) {
  token_table t = {.bpe = bpe, .cap = 1 << 17};
  t.slot = malloc(t.cap * sizeof *t.slot);
  for (size_t i = 0; i < t.cap; i++) t.slot[i] = -1;
  for (int32_t id = 0; id < REMAT_BPE_VOCAB; id++) {
    size_t len;
    const unsigned char *q = (const unsigned char *)remat_bpe_token(bpe, id, &len);
    size_t i = fnv(q, len) & (t.cap - 1);
    while (t.slot[i] >= 0) i = (i + 1) & (t.cap - 1);
    t.slot[i] = id;
  }
  enum { N = 4000 };
  static unsigned char buf[N];
  static int32_t want[N];
  uint64_t s = 99;
  int ok = 0, total = 0;
  remat_ids got = {0};
  remat_error err;
  for (int c = 0; c < 8; c++) {
    for (size_t i = 0; i < N; i++) {
      uint64_t r = remat__splitmix64(&s);
      buf[i] = c == 0   ? 'x'
               : c == 1 ? ' '
               : c == 2 ? "ab"[i % 2]
               : c == 3 ? (unsigned char)('a' + r % 26)          /* random letters */
               : c == 4 ? (unsigned char)("etaoin"[r % 6])       /* frequent letters */
               : c == 5 ? (unsigned char)("!@#$%^&*()-=+.,"[r % 15])
               : c == 6 ? (unsigned char)(0x80 + r % 64)         /* continuation bytes only */
                        : (unsigned char)(r % 2 ? '\n' : ' ');
    }
    size_t n = N;
    int64_t k = plain_merge(&t, buf, n, want);
    got.n = 0;
    int rc = remat_bpe_encode(bpe, (const char *)buf, n, &got, &err);
    int good = rc == 0 && got.n == k && memcmp(got.ids, want, (size_t)k * sizeof *want) == 0;
    ok += good;
    total++;
    if (!good) fprintf(stderr, "long piece %d: remat %lld ids, the plain loop %lld\n", c,
                       (long long)got.n, (long long)k);
  }
  CHECKF(ok == total, "%d of %d pieces of %d bytes merge as tiktoken's plain loop does", ok, total, N);
  remat_ids_free(&got);
  free(t.slot);
}

/* decode(encode(s)) == s for bytes that are not UTF-8. */
static void any_bytes(remat_bpe *bpe) {
  static const char *fixed[] = {"\xff\xfe", "abc\x80" "def", "\xe6\x97", "\xc0\xaf", "x \xed\xa0\x80 y",
                                "  \x80  ", "\xf4\x90\x80\x80", "caf\xc3", "\x80\x80\x80\x80"};
  uint64_t s = 7;
  int ok = 0, total = 0;
  remat_ids ids = {0};
  remat_error err;
  char buf[600], out[600];
  for (int c = 0; c < 2000 + 9; c++) {
    size_t n;
    if (c < 9) {
      n = strlen(fixed[c]);
      memcpy(buf, fixed[c], n);
    } else {
      n = remat__splitmix64(&s) % 500;
      for (size_t i = 0; i < n; i++) {
        uint64_t r = remat__splitmix64(&s);
        /* mostly ASCII text and spaces, some high bytes */
        buf[i] = (char)(r % 4 == 0 ? (r >> 8) & 0xff : r % 4 == 1 ? ' ' : 'a' + (r >> 8) % 26);
      }
    }
    ids.n = 0;
    int rc = remat_bpe_encode(bpe, buf, n, &ids, &err);
    size_t dn = rc ? 0 : remat_bpe_decode(bpe, ids.ids, ids.n, out, sizeof out, &err);
    int good = rc == 0 && dn == n && (n == 0 || memcmp(out, buf, n) == 0);
    for (int64_t i = 0; i < ids.n; i++) good = good && ids.ids[i] >= 0 && ids.ids[i] < REMAT_BPE_EOT;
    ok += good;
    total++;
    if (!good && total - ok <= 3) show("not round-tripped", (unsigned char *)buf, n);
  }
  CHECKF(ok == total, "%d of %d byte strings (not UTF-8) decode to their own bytes", ok, total);
  remat_ids_free(&ids);
}

static void known_and_errors(remat_bpe *bpe, const char *vocab) {
  remat_ids ids = {0};
  remat_error err;
  CHECK(remat_bpe_encode(bpe, "Hello world", 11, &ids, &err) == 0);
  CHECKF(ids.n == 2 && ids.ids[0] == 15496 && ids.ids[1] == 995, "\"Hello world\" is 15496 995");
  CHECK(remat_bpe_vocab_size(bpe) == REMAT_BPE_VOCAB);
  size_t len;
  const char *eot = remat_bpe_token(bpe, REMAT_BPE_EOT, &len);
  CHECKF(eot && len == 13 && memcmp(eot, "<|endoftext|>", 13) == 0, "token 50256 is <|endoftext|>");
  CHECK(remat_bpe_token(bpe, REMAT_BPE_VOCAB, &len) == NULL && len == 0);
  /* The separator in the text: 7 ordinary tokens, or 50256 when allowed. */
  static const int32_t eot7[7] = {27, 91, 437, 1659, 5239, 91, 29};
  ids.n = 0;
  CHECK(remat_bpe_encode(bpe, "<|endoftext|>", 13, &ids, &err) == 0);
  CHECKF(ids.n == 7 && memcmp(ids.ids, eot7, sizeof eot7) == 0,
         "\"<|endoftext|>\" as ordinary text is 7 tokens (27 91 437 1659 5239 91 29)");
  ids.n = 0;
  CHECK(remat_bpe_encode_special(bpe, "a<|endoftext|>b", 15, &ids, &err) == 0);
  CHECKF(ids.n == 3 && ids.ids[0] == 64 && ids.ids[1] == REMAT_BPE_EOT && ids.ids[2] == 65,
         "\"a<|endoftext|>b\" with the special token allowed is 64 50256 65");
  ids.n = 0;
  CHECK(remat_bpe_encode(bpe, "Hello world", 11, &ids, &err) == 0);
  int32_t bad[2] = {995, 50257};
  size_t dn = remat_bpe_decode(bpe, bad, 2, NULL, 0, &err);
  CHECK(dn == (size_t)-1);
  CHECK_ERR(err.code, err, REMAT_ERANGE, "token 1 is 50257");
  /* Asking for the size first, then a short buffer. */
  char small[4];
  CHECK(remat_bpe_decode(bpe, ids.ids, ids.n, NULL, 0, &err) == 11);
  CHECK(remat_bpe_decode(bpe, ids.ids, ids.n, small, sizeof small, &err) == 11 &&
        memcmp(small, "Hell", 4) == 0);
  remat_ids_free(&ids);

  remat_bpe *none = NULL;
  int rc = remat_bpe_create(&none, "/nonexistent-remat-vocab", &err);
  CHECK_ERR(rc, err, REMAT_EIO, "fetch-vocab.sh");
  CHECK(none == NULL);
  /* A directory without the files: the message names the file. */
  rc = remat_bpe_create(&none, "/", &err);
  CHECK_ERR(rc, err, REMAT_EIO, "encoder.json");

  /* Malformed files: the real encoder.json with broken merges, then a
   * broken encoder.json. */
  char dir[] = "/tmp/remat_test_text.XXXXXX", cmd[8192];
  if (!mkdtemp(dir)) return;
  snprintf(cmd, sizeof cmd,
           "cp '%s/encoder.json' %s/ && printf '#version: 0.2\\n\\304\\240 t\\nfoo\\n' > %s/vocab.bpe",
           vocab, dir, dir);
  CHECK(system(cmd) == 0);
  rc = remat_bpe_create(&none, dir, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "line 3");
  snprintf(cmd, sizeof cmd, "printf '#version: 0.2\\nt \\304\\240\\n\\304\\240 t\\n' > %s/vocab.bpe", dir);
  CHECK(system(cmd) == 0);
  rc = remat_bpe_create(&none, dir, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "not a token"); /* "t " + "\u0120" is no token */
  snprintf(cmd, sizeof cmd, "printf '{\"a\": 0}' > %s/encoder.json", dir);
  CHECK(system(cmd) == 0);
  rc = remat_bpe_create(&none, dir, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "holds 1 tokens");
  snprintf(cmd, sizeof cmd, "printf 'not json' > %s/encoder.json", dir);
  CHECK(system(cmd) == 0);
  rc = remat_bpe_create(&none, dir, &err);
  CHECK_ERR(rc, err, REMAT_EFORMAT, "JSON");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  CHECKF(test_failures == 0, "malformed vocabulary files are refused, naming the file and line");
}

/* Throughput on the embedded corpus (English-like ASCII), once. */
static void speed(remat_bpe *bpe) {
  size_t cap = 4u << 20;
  char *buf = malloc(cap);
  size_t n = remat_corpus_generate(buf, cap, 1);
  remat_ids ids = {0};
  remat_error err;
  double t0 = remat__now();
  int rc = remat_bpe_encode(bpe, buf, n, &ids, &err);
  double dt = remat__now() - t0;
  CHECK(rc == 0);
  printf("speed: %.2f MB encoded in %.3f s: %.1f MB/s, %.2f bytes per token\n", n / 1e6, dt,
         n / 1e6 / dt, (double)n / (double)ids.n);
  remat_ids_free(&ids);
  free(buf);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_text VOCAB_DIR CASES_SCRIPT [COUNT]\n");
    return 2;
  }
  int count = argc > 3 ? atoi(argv[3]) : 1000;
  remat_bpe *bpe;
  remat_error err;
  int rc = remat_bpe_create(&bpe, argv[1], &err);
  CHECKF(rc == 0, "GPT-2's vocabulary loads from %s%s%s", argv[1], rc ? ": " : "", rc ? err.msg : "");
  if (rc) return test_summary("test_text");
  int64_t tokens = 0, bytes = 0;
  against_reference(bpe, argv[2], count, 0, &tokens, &bytes);
  tokens = bytes = 0;
  against_reference(bpe, argv[2], count, 1, &tokens, &bytes);
  any_bytes(bpe);
  long_pieces(bpe);
  known_and_errors(bpe, argv[1]);
  speed(bpe);
  remat_bpe_destroy(bpe);
  return test_summary("test_text");
}
