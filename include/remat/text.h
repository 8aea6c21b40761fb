/* remat/text.h: GPT-2's byte-level BPE tokenizer: text to token ids and back.
 * Part of remat's public API; include "remat.h" for all of it.
 *
 *   remat_bpe *bpe;  remat_error err;
 *   if (remat_bpe_create(&bpe, "third_party/gpt2-vocab", &err)) { puts(err.msg); ... }
 *   remat_ids ids = {0};
 *   remat_bpe_encode(bpe, "Hello world", 11, &ids, &err);   // appends 15496, 995
 *   char buf[64];
 *   size_t n = remat_bpe_decode(bpe, ids.ids, ids.n, buf, sizeof buf, &err);
 *   remat_ids_free(&ids);
 *   remat_bpe_destroy(bpe);
 *
 * The vocabulary is GPT-2's (50257 tokens, r50k_base in tiktoken's terms),
 * read from a directory that holds encoder.json (token string -> id, in
 * GPT-2's byte-to-unicode alphabet) and vocab.bpe (the 50000 merges in rank
 * order); scripts/fetch-vocab.sh puts them in third_party/gpt2-vocab.
 *
 * remat_bpe_encode takes ordinary text only: "<|endoftext|>" in the input
 * is encoded as the characters it is made of (7 tokens), never as the
 * special token 50256 (tiktoken's encode_ordinary); remat_bpe_encode_special
 * reads it as 50256 (tiktoken's encode with allowed_special="all"). Both
 * work on bytes and match js-tiktoken's r50k_base on every valid UTF-8 text:
 *   1. The pre-tokenizer splits the text with GPT-2's pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      (PCRE2, UTF and UCP) where \s is JavaScript's white space: tab, LF,
 *      VT, FF, CR, U+0020, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
 *      U+202F, U+205F, U+3000 and U+FEFF. (Python's regex module, which
 *      GPT-2's own encoder and tiktoken's Rust core follow, counts U+0085
 *      and U+180E as space instead of U+FEFF; \p{L} and \p{N} follow the
 *      Unicode version of the PCRE2 library.)
 *   2. A piece that is a token is that token; otherwise its bytes are merged
 *      pairwise, always the adjacent pair whose merge has the lowest rank,
 *      leftmost first, until no pair merges.
 * Bytes that are not valid UTF-8 (JavaScript strings cannot hold them; its
 * TextEncoder writes U+FFFD instead) are kept: each maximal run of them is a
 * piece of its own, merged as bytes like any other. So decoding what
 * encoding gave returns the input byte for byte, whatever it holds.
 *
 * A remat_bpe is not safe to share between threads (it keeps a cache of
 * encoded pieces and PCRE2 match data): create one per thread. */
#ifndef REMAT_TEXT_H
#define REMAT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "remat/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPT-2's vocabulary: 50256 ordinary tokens, then <|endoftext|>. */
#define REMAT_BPE_VOCAB 50257
/* Merges in GPT-2's vocab.bpe: one for each token that is neither a byte nor
 * "<|endoftext|>". */
#define REMAT_BPE_MERGES 50000
#define REMAT_BPE_EOT 50256

/* A growing array of token ids, owned by the caller: zero it before first
 * use, release it with remat_ids_free. Encoding appends to it. */
typedef struct remat_ids {
  int32_t *ids; /* (n) */
  int64_t n;    /* ids held */
  int64_t cap;  /* ids allocated */
} remat_ids;

/* Appends one id (grows the array); REMAT_ENOMEM if it cannot grow. */
REMAT_API int remat_ids_push(remat_ids *a, int32_t id, remat_error *err);
REMAT_API void remat_ids_free(remat_ids *a);

typedef struct remat_bpe remat_bpe; /* opaque */

/* Reads dir/encoder.json and dir/vocab.bpe and checks them: 50257 distinct
 * ids 0..50256, every byte a token of its own, 50000 merges, every merge's
 * two halves and their concatenation tokens, merges ranked in the order of
 * the ids they make (a vocab.bpe cut short would merge less, and encode
 * text into other tokens). A missing or malformed file is REMAT_EIO or REMAT_EFORMAT naming it
 * and saying where the files come from. */
REMAT_API int remat_bpe_create(remat_bpe **out, const char *dir, remat_error *err);
REMAT_API void remat_bpe_destroy(remat_bpe *bpe);

/* Number of token ids (REMAT_BPE_VOCAB for GPT-2's files). */
REMAT_API int64_t remat_bpe_vocab_size(const remat_bpe *bpe);

/* Appends the ids of text[0..len) to out (any bytes: see the top). */
REMAT_API int remat_bpe_encode(remat_bpe *bpe, const char *text, size_t len, remat_ids *out,
                               remat_error *err);

/* As remat_bpe_encode, but each "<|endoftext|>" in the text is the token
 * REMAT_BPE_EOT, the text between them encoded as ordinary text (a text
 * that does not hold it gives what remat_bpe_encode gives). For text whose
 * documents are already joined by the literal separator. */
REMAT_API int remat_bpe_encode_special(remat_bpe *bpe, const char *text, size_t len,
                                       remat_ids *out, remat_error *err);

/* The bytes of token id (not NUL-terminated; "<|endoftext|>" for the end
 * token) and their count in *len; NULL when id is not a token. */
REMAT_API const char *remat_bpe_token(const remat_bpe *bpe, int32_t id, size_t *len);

/* Writes the bytes of ids[0..n) into buf (at most cap bytes, not
 * NUL-terminated) and returns how many bytes the whole text has: when that
 * exceeds cap only the first cap were written, call again with more room.
 * An id that is not a token is REMAT_ERANGE (naming its position) and
 * returns (size_t)-1. buf may be NULL when cap is 0. */
REMAT_API size_t remat_bpe_decode(const remat_bpe *bpe, const int32_t *ids, int64_t n, char *buf,
                                  size_t cap, remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_TEXT_H */
