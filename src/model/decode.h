/* decode.h: the model's inference forward over a KV cache, which generation
 * (src/generate, remat/generate.h) runs: rows of new tokens at the positions
 * after those already cached, through the backend's ops like the training
 * forward, in one region of the backend's memory that the memory model
 * lays out (remat__decode_view in memory/layout.h). Only the family's own
 * file knows the op order; generation sees tokens in and logits out.
 *
 * The host crosses into the region only through the backend's crossings,
 * and only where the caller puts the token ids (d->a.tokens), the weights
 * of a decoder that holds its own (d->a.params), and takes the logits
 * (d->a.logits). decode.c holds what every family shares; the forward is
 * the family's file's (gpt2_decode.c, llama_decode.c), so a caller names
 * no family. Not installed, not part of the API. */
#ifndef REMAT_DECODE_H
#define REMAT_DECODE_H

#include "kernels/backend.h"
#include "memory/layout.h"
#include "remat/model.h"

typedef struct remat__decoder {
  const remat__backend *be;
  remat_config cfg;          /* the model's, in fp32 */
  int64_t cap;               /* positions the cache holds */
  int64_t rows;              /* R: the most rows one forward takes */
  remat__kernel_ws ws;       /* the backend's kernel terms at (1, R) */
  char *region;              /* from be->buffer_alloc; bytes long */
  size_t bytes;              /* remat__decode_view's figure: the planned bytes */
  remat__decode_acts a;      /* the region's views */
  const float *w[REMAT_P_COUNT]; /* the weights' tensors in the family's order
                                    (REMAT_P_*, REMAT_LP_*), in backend memory */
} remat__decoder;

/* A decoder on backend be (NULL: remat__backend_default) of a context of
 * cap positions (2 .. cfg->max_seq_len) and forwards of up to rows rows,
 * whose region holds its own copy of the weights (d->a.params: the caller
 * fills it through be's upload before the first forward). REMAT_ENOMEM
 * when the backend cannot give the region. */
int remat__decoder_create(remat__decoder *d, const remat__backend *be, const remat_config *cfg,
                          int64_t cap, int64_t rows, remat_error *err);
/* The same over a model's own parameters (borrowed, read at every forward,
 * so the decoder follows a model that trains on), on the model's backend.
 * REMAT_EINVAL for a model that does not hold the whole model's
 * parameters as one process does (a pipeline stage, a ZeRO 3 shard). */
int remat__decoder_create_model(remat__decoder *d, remat_model *m, int64_t cap, int64_t rows,
                                remat_error *err);
void remat__decoder_destroy(remat__decoder *d);

/* Runs the n rows (1 .. rows) whose ids are in d->a.tokens at positions
 * pos .. pos + n - 1 (pos + n at most cap): their keys and values join the
 * cache, each row attends to every position up to its own, and d->a.logits
 * holds the padded vocabulary's logits after the last row. */
void remat__decoder_forward(remat__decoder *d, int64_t pos, int64_t n);

/* The families' forwards, as remat__decoder_forward calls them. */
void remat__gpt2_decoder_forward(remat__decoder *d, int64_t pos, int64_t n);
void remat__llama_decoder_forward(remat__decoder *d, int64_t pos, int64_t n);

/* How far the region has been written (the backend's high-water mark):
 * after a forward, its planned bytes. */
size_t remat__decoder_measured_bytes(const remat__decoder *d);

#endif
