/* remat/generate.h: text generation from a model's weights (GPT-2 or a
 * Llama), with a KV cache.
 * Part of remat's public API; include "remat.h" for all of it.
 *
 * The training model's forward, on its backend, with a cache: each fed
 * token's keys and values are kept per layer, so the next token costs one
 * row through every block plus attention over the cache, never a rerun of
 * the prefix. A generator holds its own copy of weights given in the
 * family's checkpoint order (llm.c's, llama2.c's: a checkpoint's body,
 * as remat_checkpoint_read_params gives it), or borrows a one-process model's and reads
 * them at every feed, so that a generator made once follows a model that
 * keeps training (remat_generator_create_model).
 *
 *   remat_generator *g;
 *   remat_generator_create(&g, &cfg, params, 0, &err);
 *   remat_sample_opts o;  remat_sample_opts_default(&o);  o.tokens = 64;
 *   int32_t prompt[1] = {'\n'}, out[64];  int64_t n;
 *   remat_generate(g, prompt, 1, &o, out, &n, NULL, NULL, &err);
 *   remat_generator_destroy(g);
 *
 * Its memory is planned, outside a model's arena: one region of the
 * backend's memory (remat_generator_planned_bytes) holding its copy of the
 * weights (not when it borrows a model's), the token ids and one block's
 * activations for rows of 64 tokens, the cache of 2 x L x maxT x KV floats
 * (KV = C for GPT-2; a Llama's key/value heads only, kv_heads x C /
 * num_heads) and the padded vocabulary's logits; and on the host, the vocabulary's
 * logits and sampling scratch (V floats, V ids and V (logit, id) pairs)
 * and the fed ids (maxT). */
#ifndef REMAT_GENERATE_H
#define REMAT_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "remat/config.h"
#include "remat/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct remat_generator remat_generator; /* opaque */

/* A generator for weights of shape cfg, holding up to max_len tokens of
 * context (0 or more than cfg->max_seq_len: max_seq_len), on the default
 * backend. params (host memory, remat_param_count floats) are copied into
 * its region: they need not outlive it. */
REMAT_API int remat_generator_create(remat_generator **out, const remat_config *cfg,
                                     const float *params, int64_t max_len, remat_error *err);
/* A generator over model m's own weights, on m's backend: borrowed (m must
 * outlive it) and read at every feed, so it follows m as m trains; its
 * region holds no copy of them. m holds the whole model in one process
 * (remat_model_create); REMAT_EINVAL for a pipeline stage or a ZeRO 3
 * shard. */
REMAT_API int remat_generator_create_model(remat_generator **out, remat_model *m,
                                           int64_t max_len, remat_error *err);
REMAT_API void remat_generator_destroy(remat_generator *g);

/* Forgets every fed token: the next feed starts at position 0. */
REMAT_API void remat_generator_reset(remat_generator *g);
/* Tokens in the cache (the next position). */
REMAT_API int64_t remat_generator_pos(const remat_generator *g);
REMAT_API int64_t remat_generator_capacity(const remat_generator *g);
/* The bytes of its region in the backend's memory, as the memory model
 * lays it out; and how far it has been written (the backend's high-water
 * mark), which equals the planned bytes once a feed has run. */
REMAT_API size_t remat_generator_planned_bytes(const remat_generator *g);
REMAT_API size_t remat_generator_measured_bytes(const remat_generator *g);

/* Runs tokens[0..n) at positions pos .. pos + n - 1 (in rows of up to 64,
 * each attending to the cache and to the rows before it) and keeps their keys
 * and values. Afterwards remat_generator_logits gives the logits that follow
 * the last of them. Every id must be below the vocabulary (REMAT_ERANGE) and
 * pos + n at most the capacity (REMAT_ERANGE: reset, or feed a shorter
 * window). */
REMAT_API int remat_generator_feed(remat_generator *g, const int32_t *tokens, int64_t n,
                                   remat_error *err);
/* (V) logits after the last fed token; valid until the next feed. */
REMAT_API const float *remat_generator_logits(const remat_generator *g);

/* How the next token is drawn from the logits: temperature, then top-k,
 * then top-p (nucleus sampling, Holtzman et al. 2019), as Hugging Face's
 * generate applies them. */
typedef struct remat_sample_opts {
  int64_t tokens;     /* tokens to generate */
  double temperature; /* logits / temperature; 0: always the most likely token */
  int64_t top_k;      /* draw among the k most likely; 0: all V */
  uint64_t seed;      /* the draws' generator (splitmix64) starts here */
  double top_p;       /* draw among the fewest most likely tokens (of the top k) whose
                         probabilities at this temperature sum to at least top_p of
                         theirs, in [0, 1]; 1 or 0: all of them (0, so that a zeroed
                         field changes nothing) */
} remat_sample_opts;

/* 64 tokens, temperature 1, top-k 0 (all), seed 1337, top-p 1 (all). */
REMAT_API void remat_sample_opts_default(remat_sample_opts *o);

/* One draw from the current logits (deterministic for *rng, which it
 * advances) with o's temperature, top_k and top_p (its tokens and seed
 * unused): softmax of logits / temperature over the top_k most likely (ties
 * broken toward the lower id), cut to the top_p nucleus, or the most likely
 * at temperature 0. Without a nucleus (top_p 0 or 1) the draw walks the
 * tokens in the order of remat_generator_sample's, so the two agree. */
REMAT_API int32_t remat_generator_draw(remat_generator *g, const remat_sample_opts *o,
                                       uint64_t *rng);
/* remat_generator_draw with top_p 1. */
REMAT_API int32_t remat_generator_sample(remat_generator *g, double temperature, int64_t top_k,
                                         uint64_t *rng);

/* Called with each generated token as it is drawn; nonzero stops early. */
typedef int (*remat_token_cb)(void *ctx, int32_t token);

/* Resets g, feeds prompt[0..n_prompt) (n_prompt >= 1; its last
 * capacity - 1 tokens when longer) and draws o->tokens tokens, feeding each
 * back. When the cache fills, the context slides: the newest half of it is
 * fed again from position 0 and generation goes on. The tokens go to out
 * (o->tokens ids; may be NULL) and, one by one, to cb (may be NULL); *n_out
 * (may be NULL) counts them. The same weights, prompt and options give the
 * same tokens. */
REMAT_API int remat_generate(remat_generator *g, const int32_t *prompt, int64_t n_prompt,
                             const remat_sample_opts *o, int32_t *out, int64_t *n_out,
                             remat_token_cb cb, void *ctx, remat_error *err);

/* A sample from weights in host memory in one call (a generator made and
 * released around remat_generate). A training loop that samples every N
 * steps makes one generator with remat_generator_create_model instead, once:
 * no copy of the weights, no allocation between steps. */
REMAT_API int remat_generate_once(const remat_config *cfg, const float *params,
                                  const int32_t *prompt, int64_t n_prompt,
                                  const remat_sample_opts *o, int32_t *out, int64_t *n_out,
                                  remat_error *err);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_GENERATE_H */
