/* attention_ref.h: the untiled attention kernel (tests/attention_ref.c) that
 * the tiled one is checked against. Same shapes and conventions as
 * remat__attention_forward/backward in kernels.h, except that it works
 * through whole T x T matrices:
 * - att (B,NH,T,T): softmax probabilities before dropout (row t has entries
 *   0..t; the rest are written as 0); out (B,T,C) = dropout(att) @ v.
 * - datt (B,NH,T,T): scratch for the backward; dqkv (B,T,3C) overwritten. */
#ifndef REMAT_TEST_ATTENTION_REF_H
#define REMAT_TEST_ATTENTION_REF_H

#include "kernels/kernels.h"

void attention_ref_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, const remat__dropout *drop);
void attention_ref_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int64_t B, int64_t T, int64_t C, int64_t NH,
                            const remat__dropout *drop);

#endif
