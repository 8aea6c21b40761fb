/* train_sample.h: `remat train --sample-every N`: a short sample of what the
 * model writes, printed between steps (train_sample.c). */
#ifndef REMAT_TRAIN_SAMPLE_H
#define REMAT_TRAIN_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include "remat.h"

typedef struct train_sampler train_sampler;

/* A sampler over a one-process model's weights (borrowed: params must
 * outlive it): a byte model (V = 256) prints bytes, GPT-2's vocabulary
 * (V = 50257) is decoded with the BPE files in vocab_dir. Its memory (the
 * generator's cache and rows, the vocabulary) is plain malloc, outside the
 * trainer's planned and measured bytes; it is all taken here, before the
 * first step. */
int train_sampler_create(train_sampler **out, const remat_config *cfg, const float *params,
                         const char *vocab_dir, remat_error *err);
/* 64 tokens after a newline (bytes) or <|endoftext|> (BPE), seeded by the
 * step, on one line of f: "sample  step N | text", non-printable bytes
 * escaped (\n, \xNN). */
int train_sampler_print(train_sampler *s, int64_t step, FILE *f, remat_error *err);
void train_sampler_destroy(train_sampler *s);

#endif
