/* train_sample.h: `remat train --sample-every N`: a short sample of what the
 * model writes, printed between steps (train_sample.c). */
#ifndef REMAT_TRAIN_SAMPLE_H
#define REMAT_TRAIN_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include "remat.h"

typedef struct train_sampler train_sampler;

/* A sampler over a one-process model's weights (borrowed: m must outlive
 * it; remat_generator_create_model): a byte model (V = 256) prints bytes,
 * GPT-2's vocabulary (V = 50257) is decoded with the BPE files in
 * vocab_dir. Its memory is taken here, before the first step: the
 * generator's own planned region on the model's backend (the cache and one
 * block's rows, remat_generator_planned_bytes), which comes from the
 * backend's allocator, so the trainer's measured peak holds it and remat
 * train adds it to its planned peak (train_sampler_planned_bytes); and its
 * sampling scratch and the vocabulary, outside both. */
int train_sampler_create(train_sampler **out, remat_model *m, const char *vocab_dir,
                         remat_error *err);
/* 64 tokens after a newline (bytes) or <|endoftext|> (BPE), seeded by the
 * step, on one line of f: "sample  step N | text", non-printable bytes
 * escaped (\n, \xNN). A BPE sample stops at <|endoftext|>, unwritten. */
int train_sampler_print(train_sampler *s, int64_t step, FILE *f, remat_error *err);
/* The bytes of the generator's planned region (0 for no sampler). */
size_t train_sampler_planned_bytes(const train_sampler *s);
void train_sampler_destroy(train_sampler *s);

#endif
