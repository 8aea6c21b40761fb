/* loader.h: the batch loader's inside, the io library's interface to the
 * trainer (src/train), which holds its loaders in place (remat__loader_init
 * and remat__loader_free) and reads their position. Everyone else has the
 * opaque remat_loader of remat/io.h. Not installed, not part of the API. */
#ifndef REMAT_LOADER_INTERNAL_H
#define REMAT_LOADER_INTERNAL_H

#include "remat/io.h"

struct remat_loader {
  const int32_t *tok; /* (n) first token of the split, borrowed */
  int64_t n;          /* tokens in the split */
  int64_t B, T;
  int64_t max_windows; /* (n - 1) / T: windows at offset 0, the size of order */
  int64_t num_windows; /* W of this epoch: (n - 1 - offset) / T */
  int64_t offset;      /* window k of this epoch starts at offset + k*T */
  int64_t cursor;      /* next position in order, 0..W-1 */
  int64_t epoch;       /* completed passes over all windows */
  int shuffle;
  uint64_t seed;
  uint64_t rng;   /* state of the epoch shuffles */
  uint64_t epoch_rng; /* rng when this epoch began: it draws the epoch again */
  int64_t *order; /* (W) window indices in serving order, owned; NULL if sequential */
};

/* remat_loader_create into a loader the caller holds; on failure L holds
 * nothing. */
int remat__loader_init(remat_loader *L, const remat_tokens *t, int64_t B, int64_t T, int split,
                       double val_frac, int shuffle, uint64_t seed, remat_error *err);
/* Releases the parts of L (not L); safe on a zeroed or failed loader. */
void remat__loader_free(remat_loader *L);

#endif
