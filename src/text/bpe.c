/* bpe.c: GPT-2's byte-level BPE (remat/text.h). The vocabulary is read from
 * encoder.json (strings in GPT-2's byte-to-unicode alphabet, mapped back to
 * raw bytes here) and vocab.bpe (merges in rank order). Tokens live in one
 * byte pool; a hash from bytes to id answers "is this piece a token", a hash
 * from (left id, right id) to the merged id drives the merges. A piece is
 * merged with a heap of candidate pairs keyed by (rank, position), so a long
 * piece (a run of ten thousand spaces) costs n log n, not n^2; encoded pieces
 * are cached. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "remat/text.h"

/* Pieces up to this many bytes are cached; the cache is emptied when it
 * holds more than CACHE_MAX_IDS ids or CACHE_MAX_ENTRIES pieces. */
#define CACHE_PIECE_MAX 64
#define CACHE_MAX_ENTRIES (1u << 16)
#define CACHE_MAX_IDS (1u << 20)
/* The longest token GPT-2's files hold is 128 bytes. */
#define TOKEN_MAX 256

/* The pre-tokenizer, with JavaScript's \s spelled out (see remat/text.h). */
#define WS "\\t\\n\\x0b\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}" \
           "\\x{205f}\\x{3000}\\x{feff}"
static const char PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                              "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* (rank, position) in one key: ranks are < 2^31, positions < 2^32. */
typedef uint64_t heap_key;

typedef struct {
  uint32_t off, len; /* bytes in cache_bytes */
  uint32_t ids_off, n_ids;
  uint64_t hash;
  int used;
} cache_slot;

struct remat_bpe {
  int64_t n_tokens;
  unsigned char *pool;   /* every token's bytes, one after another */
  uint32_t *tok_off;     /* (n_tokens + 1) token i is pool[tok_off[i] .. tok_off[i+1]) */
  int32_t *tok_slots;    /* (tok_cap) open addressing: bytes -> id, -1 empty */
  size_t tok_cap;        /* power of two */
  int32_t byte_id[256];  /* the token of each single byte */
  uint64_t *pair_keys;   /* (pair_cap) left << 32 | right; UINT64_MAX empty */
  int32_t *pair_ids;     /* (pair_cap) merged id */
  size_t pair_cap;
  pcre2_code *re;
  pcre2_match_data *md;
  /* merge scratch, grown to the longest piece */
  size_t scratch_cap;
  int32_t *sym;
  int64_t *next, *prev;
  heap_key *heap;
  /* the cache of encoded pieces */
  cache_slot *cache;
  size_t cache_cap, cache_entries;
  unsigned char *cache_bytes;
  size_t cache_bytes_len, cache_bytes_cap;
  int32_t *cache_ids;
  size_t cache_ids_len, cache_ids_cap;
};

/* ------------------------------------------------------------ id arrays */

int remat_ids_push(remat_ids *a, int32_t id, remat_error *err) {
  if (a->n == a->cap) {
    int64_t cap = a->cap ? a->cap * 2 : 1024;
    int32_t *p = realloc(a->ids, (size_t)cap * sizeof *p);
    if (!p) return remat__errorf(err, REMAT_ENOMEM, "cannot hold %lld token ids", (long long)cap);
    a->ids = p;
    a->cap = cap;
  }
  a->ids[a->n++] = id;
  return 0;
}

void remat_ids_free(remat_ids *a) {
  free(a->ids);
  a->ids = NULL;
  a->n = a->cap = 0;
}

/* ------------------------------------------------------------- lookups */

static int32_t token_find(const remat_bpe *b, const unsigned char *p, size_t n) {
  size_t mask = b->tok_cap - 1;
  for (size_t i = hash_bytes(p, n) & mask;; i = (i + 1) & mask) {
    int32_t id = b->tok_slots[i];
    if (id < 0) return -1;
    size_t len = b->tok_off[id + 1] - b->tok_off[id];
    if (len == n && memcmp(b->pool + b->tok_off[id], p, n) == 0) return id;
  }
}

static uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)r; }

/* The id the pair merges into, or -1. */
static int32_t pair_find(const remat_bpe *b, int32_t l, int32_t r) {
  uint64_t k = pair_key(l, r);
  size_t mask = b->pair_cap - 1;
  for (size_t i = hash_u64(k) & mask;; i = (i + 1) & mask) {
    if (b->pair_keys[i] == UINT64_MAX) return -1;
    if (b->pair_keys[i] == k) return b->pair_ids[i];
  }
}

/* ------------------------------------------------------------- loading */

/* GPT-2's byte-to-unicode alphabet: printable bytes stand for themselves,
 * the other 68 for code points 256, 257, ... in byte order. Returns the
 * byte a code point stands for, or -1. (Computed, not a table filled on
 * first use: two threads may load vocabularies at once.) */
static int unicode_to_byte(uint32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
    return (int)cp;
  if (cp < 256 || cp >= 256 + 68) return -1;
  uint32_t k = cp - 256; /* the k-th byte (from 0) that is not printable */
  for (int byte = 0; byte < 256; byte++) {
    int printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
    if (!printable && k-- == 0) return byte;
  }
  return -1;
}

/* Decodes one UTF-8 code point at s (n bytes left); returns its length, 0 if
 * malformed. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  if (n == 0) return 0;
  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  size_t len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
  if (!len || len > n) return 0;
  uint32_t v = s[0] & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3F);
  }
  *cp = v;
  return len;
}

/* A token string of encoder.json or vocab.bpe to raw bytes in out (cap
 * bytes); returns their count, or -1 if a character is outside the alphabet
 * (then the string is taken as it is: "<|endoftext|>" is ASCII anyway). */
static long alphabet_to_bytes(const char *s, size_t n, unsigned char *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t len = utf8_next((const unsigned char *)s + i, n - i, &cp);
    int byte = len ? unicode_to_byte(cp) : -1;
    if (byte < 0 || k == cap) return -1;
    out[k++] = (unsigned char)byte;
    i += len;
  }
  return (long)k;
}

static int read_file(const char *path, char **data, size_t *size, remat_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return remat__errorf(err, REMAT_EIO,
                         "cannot open %s: %s; GPT-2's vocabulary (encoder.json, vocab.bpe) comes "
                         "from scripts/fetch-vocab.sh (scripts/install-deps.sh runs it)",
                         path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 1 << 20;
      char *p = realloc(buf, cap + 1);
      if (!p) {
        free(buf);
        fclose(f);
        return remat__errorf(err, REMAT_ENOMEM, "cannot hold %s in memory", path);
      }
      buf = p;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return remat__errorf(err, REMAT_EIO, "cannot read %s", path);
  }
  buf[len] = 0;
  *data = buf;
  *size = len;
  return 0;
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

static int load_encoder(remat_bpe *b, const char *path, remat_error *err) {
  char *text;
  size_t size;
  int rc = read_file(path, &text, &size, err);
  if (rc) return rc;
  cJSON *root = cJSON_ParseWithLength(text, size);
  free(text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return remat__errorf(err, REMAT_EFORMAT, "%s is not a JSON object of token -> id", path);
  }
  int64_t n = cJSON_GetArraySize(root);
  if (n != REMAT_BPE_VOCAB) {
    cJSON_Delete(root);
    return remat__errorf(err, REMAT_EFORMAT, "%s holds %lld tokens, GPT-2's vocabulary %d", path,
                         (long long)n, REMAT_BPE_VOCAB);
  }
  /* Two passes: lengths by id, then bytes into the pool. */
  b->n_tokens = n;
  b->tok_off = calloc((size_t)n + 1, sizeof *b->tok_off);
  uint32_t *len_of = calloc((size_t)n, sizeof *len_of);
  unsigned char *tmp = malloc((size_t)n * TOKEN_MAX);
  rc = b->tok_off && len_of && tmp ? 0 : remat__errorf(err, REMAT_ENOMEM, "out of memory reading %s", path);
  for (int64_t id = 0; !rc && id < n; id++) len_of[id] = UINT32_MAX;
  const cJSON *it;
  cJSON_ArrayForEach(it, root) {
    if (rc) break;
    double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
    int64_t id = v >= 0 && v < (double)n ? (int64_t)v : -1; /* no cast out of range */
    if (id < 0 || v != (double)id || len_of[id] != UINT32_MAX) {
      rc = remat__errorf(err, REMAT_EFORMAT, "%s: token \"%.40s\" has id %g: ids must be 0..%lld, each once",
                         path, it->string, v, (long long)n - 1);
      break;
    }
    size_t sl = strlen(it->string);
    if (sl > TOKEN_MAX) {
      rc = remat__errorf(err, REMAT_EFORMAT, "%s: token \"%.40s...\" is longer than %d bytes", path,
                         it->string, TOKEN_MAX);
      break;
    }
    long k = alphabet_to_bytes(it->string, sl, tmp + id * TOKEN_MAX, TOKEN_MAX);
    if (k < 0) { /* outside the alphabet: "<|endoftext|>" is taken as it is */
      memcpy(tmp + id * TOKEN_MAX, it->string, sl);
      k = (long)sl;
    }
    if (k == 0) {
      rc = remat__errorf(err, REMAT_EFORMAT, "%s: token %lld is empty", path, (long long)id);
      break;
    }
    len_of[id] = (uint32_t)k;
  }
  cJSON_Delete(root);
  size_t total = 0;
  if (!rc) {
    for (int64_t id = 0; id < n; id++) {
      b->tok_off[id] = (uint32_t)total;
      total += len_of[id];
    }
    b->tok_off[n] = (uint32_t)total;
    b->pool = malloc(total ? total : 1);
    b->tok_cap = pow2_at_least((size_t)n * 2);
    b->tok_slots = malloc(b->tok_cap * sizeof *b->tok_slots);
    if (!b->pool || !b->tok_slots) rc = remat__errorf(err, REMAT_ENOMEM, "out of memory reading %s", path);
  }
  if (!rc) {
    for (size_t s = 0; s < b->tok_cap; s++) b->tok_slots[s] = -1;
    for (int byte = 0; byte < 256; byte++) b->byte_id[byte] = -1;
    for (int64_t id = 0; id < n && !rc; id++) {
      memcpy(b->pool + b->tok_off[id], tmp + id * TOKEN_MAX, len_of[id]);
      const unsigned char *p = b->pool + b->tok_off[id];
      if (token_find(b, p, len_of[id]) >= 0) {
        rc = remat__errorf(err, REMAT_EFORMAT, "%s: token %lld repeats the bytes of another", path,
                           (long long)id);
        break;
      }
      size_t mask = b->tok_cap - 1, s = hash_bytes(p, len_of[id]) & mask;
      while (b->tok_slots[s] >= 0) s = (s + 1) & mask;
      b->tok_slots[s] = (int32_t)id;
      if (len_of[id] == 1) b->byte_id[p[0]] = (int32_t)id;
    }
    for (int byte = 0; byte < 256 && !rc; byte++)
      if (b->byte_id[byte] < 0)
        rc = remat__errorf(err, REMAT_EFORMAT, "%s: byte %d has no token of its own", path, byte);
  }
  free(len_of);
  free(tmp);
  return rc;
}

static int load_merges(remat_bpe *b, const char *path, remat_error *err) {
  char *text;
  size_t size;
  int rc = read_file(path, &text, &size, err);
  if (rc) return rc;
  b->pair_cap = pow2_at_least((size_t)b->n_tokens * 2);
  b->pair_keys = malloc(b->pair_cap * sizeof *b->pair_keys);
  b->pair_ids = malloc(b->pair_cap * sizeof *b->pair_ids);
  if (!b->pair_keys || !b->pair_ids) {
    free(text);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory reading %s", path);
  }
  for (size_t s = 0; s < b->pair_cap; s++) b->pair_keys[s] = UINT64_MAX;
  char *line = text, *end = text + size;
  int64_t lineno = 0, merges = 0;
  int32_t last = -1;
  while (line < end && !rc) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    char *stop = nl ? nl : end;
    lineno++;
    size_t n = (size_t)(stop - line);
    if (n && line[n - 1] == '\r') n--;
    if (n == 0 || (lineno == 1 && line[0] == '#')) {
      line = stop + 1;
      continue;
    }
    char *sp = memchr(line, ' ', n);
    unsigned char l[TOKEN_MAX], r[TOKEN_MAX], both[2 * TOKEN_MAX];
    long nl_ = sp ? alphabet_to_bytes(line, (size_t)(sp - line), l, TOKEN_MAX) : -1;
    long nr = sp ? alphabet_to_bytes(sp + 1, n - (size_t)(sp - line) - 1, r, TOKEN_MAX) : -1;
    if (nl_ <= 0 || nr <= 0) {
      rc = remat__errorf(err, REMAT_EFORMAT, "%s line %lld: expected two tokens separated by a space",
                         path, (long long)lineno);
      break;
    }
    memcpy(both, l, (size_t)nl_);
    memcpy(both + nl_, r, (size_t)nr);
    int32_t li = token_find(b, l, (size_t)nl_), ri = token_find(b, r, (size_t)nr);
    int32_t mi = token_find(b, both, (size_t)(nl_ + nr));
    if (li < 0 || ri < 0 || mi < 0) {
      rc = remat__errorf(err, REMAT_EFORMAT, "%s line %lld: %s is not a token of encoder.json", path,
                         (long long)lineno, li < 0 ? "the left half" : ri < 0 ? "the right half" : "the merge");
      break;
    }
    /* The merge's rank is the id it makes: tiktoken ranks pairs that way,
     * GPT-2 by line; the two agree when ids rise line by line. */
    if (mi <= last) {
      rc = remat__errorf(err, REMAT_EFORMAT, "%s line %lld: merges must make ids in rising order (%d after %d)",
                         path, (long long)lineno, mi, last);
      break;
    }
    last = mi;
    uint64_t k = pair_key(li, ri);
    size_t mask = b->pair_cap - 1, s = hash_u64(k) & mask;
    while (b->pair_keys[s] != UINT64_MAX && b->pair_keys[s] != k) s = (s + 1) & mask;
    b->pair_keys[s] = k;
    b->pair_ids[s] = mi;
    merges++;
    line = stop + 1;
  }
  free(text);
  /* A file cut short still reads well up to its end, and would encode text
   * into other (more, shorter) tokens without a word. */
  if (!rc && merges != REMAT_BPE_MERGES)
    rc = remat__errorf(err, REMAT_EFORMAT, "%s holds %lld merges, GPT-2's vocab.bpe %d: it was "
                       "cut short or is not GPT-2's; fetch it again with scripts/fetch-vocab.sh "
                       "(it checks the files' SHA-256)", path, (long long)merges,
                       REMAT_BPE_MERGES);
  return rc;
}

int remat_bpe_create(remat_bpe **out, const char *dir, remat_error *err) {
  *out = NULL;
  remat_bpe *b = calloc(1, sizeof *b);
  if (!b) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the tokenizer");
  size_t dl = strlen(dir);
  char *path = malloc(dl + 32);
  int rc = path ? 0 : remat__errorf(err, REMAT_ENOMEM, "out of memory for the tokenizer");
  if (!rc) {
    snprintf(path, dl + 32, "%s/encoder.json", dir);
    rc = load_encoder(b, path, err);
  }
  if (!rc) {
    snprintf(path, dl + 32, "%s/vocab.bpe", dir);
    rc = load_merges(b, path, err);
  }
  free(path);
  if (!rc) {
    int ec;
    PCRE2_SIZE eo;
    b->re = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!b->re) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(ec, msg, sizeof msg);
      rc = remat__errorf(err, REMAT_EINVAL, "the pre-tokenizer pattern does not compile at %zu: %s",
                         (size_t)eo, (const char *)msg);
    } else {
      pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE); /* without JIT it still matches */
      b->md = pcre2_match_data_create_from_pattern(b->re, NULL);
      if (!b->md) rc = remat__errorf(err, REMAT_ENOMEM, "out of memory for the tokenizer");
    }
  }
  if (!rc) {
    b->cache_cap = CACHE_MAX_ENTRIES * 2;
    b->cache = calloc(b->cache_cap, sizeof *b->cache);
    if (!b->cache) rc = remat__errorf(err, REMAT_ENOMEM, "out of memory for the tokenizer");
  }
  if (rc) {
    remat_bpe_destroy(b);
    return rc;
  }
  *out = b;
  return 0;
}

void remat_bpe_destroy(remat_bpe *b) {
  if (!b) return;
  free(b->pool);
  free(b->tok_off);
  free(b->tok_slots);
  free(b->pair_keys);
  free(b->pair_ids);
  if (b->md) pcre2_match_data_free(b->md);
  if (b->re) pcre2_code_free(b->re);
  free(b->sym);
  free(b->next);
  free(b->prev);
  free(b->heap);
  free(b->cache);
  free(b->cache_bytes);
  free(b->cache_ids);
  free(b);
}

int64_t remat_bpe_vocab_size(const remat_bpe *b) { return b->n_tokens; }

/* ------------------------------------------------------------- merging */

static void heap_push(heap_key *h, size_t *n, heap_key k) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p] <= k) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = k;
}

static heap_key heap_pop(heap_key *h, size_t *n) {
  heap_key top = h[0], k = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] < h[c]) c++;
    if (k <= h[c]) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = k;
  return top;
}

static int grow_scratch(remat_bpe *b, size_t n, remat_error *err) {
  if (n <= b->scratch_cap) return 0;
  size_t cap = pow2_at_least(n);
  int32_t *sym = realloc(b->sym, cap * sizeof *sym);
  if (sym) b->sym = sym;
  int64_t *next = realloc(b->next, cap * sizeof *next);
  if (next) b->next = next;
  int64_t *prev = realloc(b->prev, cap * sizeof *prev);
  if (prev) b->prev = prev;
  /* Every merge pushes at most two pairs: n - 1 at first, 2 per merge. */
  heap_key *heap = realloc(b->heap, 3 * cap * sizeof *heap);
  if (heap) b->heap = heap;
  if (!sym || !next || !prev || !heap)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory for a piece of %zu bytes", n);
  b->scratch_cap = cap;
  return 0;
}

/* Merges the bytes of piece p[0..n) (n >= 2) and appends the ids. Symbol i
 * starts at byte i; a merged symbol keeps its left position. */
static int merge_piece(remat_bpe *b, const unsigned char *p, size_t n, remat_ids *out,
                       remat_error *err) {
  if (n > UINT32_MAX) return remat__errorf(err, REMAT_ERANGE, "a piece of %zu bytes is too long", n);
  int rc = grow_scratch(b, n, err);
  if (rc) return rc;
  int32_t *sym = b->sym;
  int64_t *next = b->next, *prev = b->prev;
  heap_key *heap = b->heap;
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    sym[i] = b->byte_id[p[i]];
    next[i] = i + 1 < n ? (int64_t)i + 1 : -1;
    prev[i] = (int64_t)i - 1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    int32_t m = pair_find(b, sym[i], sym[i + 1]);
    if (m >= 0) heap_push(heap, &hn, (heap_key)m << 32 | i);
  }
  while (hn) {
    heap_key k = heap_pop(heap, &hn);
    int32_t m = (int32_t)(k >> 32);
    int64_t i = (int64_t)(k & 0xffffffffu), j = next[i];
    /* Stale unless i still starts a symbol whose pair with the next one
     * makes m (i dead: sym[i] is -1). */
    if (sym[i] < 0 || j < 0 || pair_find(b, sym[i], sym[j]) != m) continue;
    sym[i] = m;
    sym[j] = -1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) {
      int32_t mp = pair_find(b, sym[prev[i]], m);
      if (mp >= 0) heap_push(heap, &hn, (heap_key)mp << 32 | (uint64_t)prev[i]);
    }
    if (next[i] >= 0) {
      int32_t mn = pair_find(b, m, sym[next[i]]);
      if (mn >= 0) heap_push(heap, &hn, (heap_key)mn << 32 | (uint64_t)i);
    }
  }
  for (int64_t i = 0; i >= 0; i = next[i])
    if ((rc = remat_ids_push(out, sym[i], err))) return rc;
  return 0;
}

/* ------------------------------------------------------------- encoding */

static void cache_clear(remat_bpe *b) {
  memset(b->cache, 0, b->cache_cap * sizeof *b->cache);
  b->cache_entries = 0;
  b->cache_bytes_len = b->cache_ids_len = 0;
}

static cache_slot *cache_find(remat_bpe *b, const unsigned char *p, size_t n, uint64_t h) {
  size_t mask = b->cache_cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    cache_slot *s = &b->cache[i];
    if (!s->used) return s;
    if (s->hash == h && s->len == n && memcmp(b->cache_bytes + s->off, p, n) == 0) return s;
  }
}

static int cache_add(remat_bpe *b, const unsigned char *p, size_t n, uint64_t h,
                     const int32_t *ids, size_t n_ids) {
  if (b->cache_entries >= CACHE_MAX_ENTRIES || b->cache_ids_len + n_ids > CACHE_MAX_IDS)
    cache_clear(b);
  if (b->cache_bytes_len + n > b->cache_bytes_cap) {
    size_t cap = pow2_at_least(b->cache_bytes_len + n + 4096);
    unsigned char *q = realloc(b->cache_bytes, cap);
    if (!q) return -1;
    b->cache_bytes = q;
    b->cache_bytes_cap = cap;
  }
  if (b->cache_ids_len + n_ids > b->cache_ids_cap) {
    size_t cap = pow2_at_least(b->cache_ids_len + n_ids + 1024);
    int32_t *q = realloc(b->cache_ids, cap * sizeof *q);
    if (!q) return -1;
    b->cache_ids = q;
    b->cache_ids_cap = cap;
  }
  cache_slot *s = cache_find(b, p, n, h);
  memcpy(b->cache_bytes + b->cache_bytes_len, p, n);
  memcpy(b->cache_ids + b->cache_ids_len, ids, n_ids * sizeof *ids);
  *s = (cache_slot){.off = (uint32_t)b->cache_bytes_len, .len = (uint32_t)n,
                    .ids_off = (uint32_t)b->cache_ids_len, .n_ids = (uint32_t)n_ids, .hash = h,
                    .used = 1};
  b->cache_bytes_len += n;
  b->cache_ids_len += n_ids;
  b->cache_entries++;
  return 0;
}

static int encode_piece(remat_bpe *b, const unsigned char *p, size_t n, remat_ids *out,
                        remat_error *err) {
  int32_t id = token_find(b, p, n);
  if (id >= 0) return remat_ids_push(out, id, err);
  if (n > CACHE_PIECE_MAX) return merge_piece(b, p, n, out, err);
  uint64_t h = hash_bytes(p, n);
  cache_slot *s = cache_find(b, p, n, h);
  if (s->used) {
    for (uint32_t i = 0; i < s->n_ids; i++) {
      int rc = remat_ids_push(out, b->cache_ids[s->ids_off + i], err);
      if (rc) return rc;
    }
    return 0;
  }
  int64_t first = out->n;
  int rc = merge_piece(b, p, n, out, err);
  if (!rc) cache_add(b, p, n, h, out->ids + first, (size_t)(out->n - first)); /* best effort */
  return rc;
}

int remat_bpe_encode(remat_bpe *b, const char *text, size_t len, remat_ids *out,
                     remat_error *err) {
  const unsigned char *s = (const unsigned char *)text;
  size_t at = 0;
  while (at < len) {
    int m = pcre2_match(b->re, s, len, at, 0, b->md, NULL);
    size_t start = len, end = len;
    if (m >= 0) {
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
      start = ov[0];
      end = ov[1];
    } else if (m != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(m, msg, sizeof msg);
      return remat__errorf(err, REMAT_EINVAL, "the pre-tokenizer failed at byte %zu: %s", at,
                           (const char *)msg);
    }
    /* Bytes no branch matches are not valid UTF-8: one piece of their own. */
    int rc = start > at ? encode_piece(b, s + at, start - at, out, err) : 0;
    if (!rc && end > start) rc = encode_piece(b, s + start, end - start, out, err);
    if (rc) return rc;
    if (end == start && start < len) /* cannot happen: every branch takes a character */
      return remat__errorf(err, REMAT_EINVAL, "the pre-tokenizer matched nothing at byte %zu", start);
    at = end;
  }
  return 0;
}

int remat_bpe_encode_special(remat_bpe *b, const char *text, size_t len, remat_ids *out,
                             remat_error *err) {
  static const char EOT[] = "<|endoftext|>";
  const size_t n_eot = sizeof EOT - 1;
  size_t start = 0; /* the ordinary text not yet encoded begins here */
  for (size_t i = 0; i + n_eot <= len;) {
    const char *lt = memchr(text + i, '<', len - n_eot + 1 - i);
    if (!lt) break;
    i = (size_t)(lt - text);
    if (memcmp(lt, EOT, n_eot) != 0) {
      i++;
      continue;
    }
    int rc = remat_bpe_encode(b, text + start, i - start, out, err);
    if (!rc) rc = remat_ids_push(out, REMAT_BPE_EOT, err);
    if (rc) return rc;
    i += n_eot;
    start = i;
  }
  return remat_bpe_encode(b, text + start, len - start, out, err);
}

/* ------------------------------------------------------------- decoding */

const char *remat_bpe_token(const remat_bpe *b, int32_t id, size_t *len) {
  if (id < 0 || id >= b->n_tokens) {
    *len = 0;
    return NULL;
  }
  *len = b->tok_off[id + 1] - b->tok_off[id];
  return (const char *)b->pool + b->tok_off[id];
}

size_t remat_bpe_decode(const remat_bpe *b, const int32_t *ids, int64_t n, char *buf, size_t cap,
                        remat_error *err) {
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    size_t len;
    const char *p = remat_bpe_token(b, ids[i], &len);
    if (!p) {
      remat__errorf(err, REMAT_ERANGE, "token %lld is %d, not an id of the vocabulary (0..%lld)",
                    (long long)i, ids[i], (long long)b->n_tokens - 1);
      return (size_t)-1;
    }
    if (total < cap) memcpy(buf + total, p, len < cap - total ? len : cap - total);
    total += len;
  }
  return total;
}
