/* loader.c: batches of (B, T) inputs and targets from a token stream. The
 * stream is split once into a training prefix and a validation suffix; within
 * a split, windows of T+1 tokens (stride T) are served sequentially or in a
 * seeded shuffled order with a per-epoch random offset. All memory is taken
 * at init: remat_loader_next only copies, so a training step that calls it
 * makes no heap allocation. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "io/loader.h"

/* Uniform in [0, n) without modulo bias. */
static int64_t uniform(uint64_t *s, int64_t n) {
  uint64_t un = (uint64_t)n, limit = UINT64_MAX - UINT64_MAX % un;
  uint64_t x;
  do x = remat__splitmix64(s);
  while (x >= limit);
  return (int64_t)(x % un);
}

/* Chooses this epoch's offset and window order. Sequential: offset 0 and
 * windows in turn. Shuffled: offset in [0, min(T-1, n-1-T)] so at least one
 * window fits, and a Fisher-Yates permutation. */
static void start_epoch(remat_loader *L) {
  L->cursor = 0;
  L->epoch_rng = L->rng; /* enough to draw this epoch again */
  if (!L->shuffle) {
    L->offset = 0;
    L->num_windows = L->max_windows;
    return;
  }
  int64_t max_off = L->T - 1 < L->n - 1 - L->T ? L->T - 1 : L->n - 1 - L->T;
  L->offset = uniform(&L->rng, max_off + 1);
  L->num_windows = (L->n - 1 - L->offset) / L->T;
  for (int64_t i = 0; i < L->num_windows; i++) L->order[i] = i;
  for (int64_t i = L->num_windows - 1; i > 0; i--) {
    int64_t j = uniform(&L->rng, i + 1);
    int64_t x = L->order[i];
    L->order[i] = L->order[j];
    L->order[j] = x;
  }
}

int remat__loader_init(remat_loader *L, const remat_tokens *t, int64_t B, int64_t T, int split,
                       double val_frac, int shuffle, uint64_t seed, remat_error *err) {
  *L = (remat_loader){0};
  if (!t || !t->tok || t->n < 2)
    return remat__errorf(err, REMAT_EINVAL, "the loader needs a token stream of at least 2 "
                                            "tokens");
  if (B < 1 || T < 1)
    return remat__errorf(err, REMAT_EINVAL, "batch B=%lld and sequence length T=%lld must be "
                                            "positive",
                         (long long)B, (long long)T);
  if (split != REMAT_SPLIT_TRAIN && split != REMAT_SPLIT_VAL)
    return remat__errorf(err, REMAT_EINVAL, "unknown split %d; use 0 (train) or 1 (validation)",
                         split);
  if (!isfinite(val_frac) || val_frac < 0 || val_frac >= 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "validation fraction %g is out of range; use a value in [0, 1), e.g. "
                         "0.1",
                         val_frac);
  int64_t n_val = (int64_t)floor(val_frac * (double)t->n);
  int64_t n_train = t->n - n_val;
  int64_t n = split == REMAT_SPLIT_TRAIN ? n_train : n_val;
  if (n < T + 1)
    return remat__errorf(err, REMAT_EINVAL,
                         "the %s split has %lld tokens (%s %.0f%% of %lld) but one sequence of "
                         "T=%lld needs %lld; use more data, a shorter T%s",
                         split == REMAT_SPLIT_TRAIN ? "training" : "validation", (long long)n,
                         split == REMAT_SPLIT_TRAIN ? "all but" : "the last", 100.0 * val_frac,
                         (long long)t->n, (long long)T, (long long)(T + 1),
                         split == REMAT_SPLIT_TRAIN ? " or a smaller validation fraction"
                                                    : " or a larger validation fraction");
  L->tok = t->tok + (split == REMAT_SPLIT_TRAIN ? 0 : n_train);
  L->n = n;
  L->B = B;
  L->T = T;
  L->shuffle = shuffle != 0;
  L->seed = seed;
  L->max_windows = (n - 1) / T;
  if (L->shuffle) {
    size_t bytes;
    if (remat__mul_size((size_t)L->max_windows, sizeof(int64_t), &bytes) ||
        !(L->order = remat__malloc(bytes)))
      return remat__errorf(err, REMAT_ENOMEM, "out of memory for the order of %lld windows",
                           (long long)L->max_windows);
  }
  remat_loader_reset(L);
  return 0;
}

int64_t remat_loader_windows(const remat_loader *L) { return L->max_windows; }

void remat_loader_reset(remat_loader *L) {
  L->rng = L->seed;
  L->epoch = 0;
  start_epoch(L);
}

void remat_loader_next(remat_loader *L, int32_t *inputs, int32_t *targets) {
  const int64_t T = L->T;
  for (int64_t b = 0; b < L->B; b++) {
    if (L->cursor == L->num_windows) {
      L->epoch++;
      start_epoch(L);
    }
    int64_t w = L->shuffle ? L->order[L->cursor] : L->cursor;
    const int32_t *src = L->tok + L->offset + w * T;
    if (inputs) memcpy(inputs + b * T, src, (size_t)T * sizeof(int32_t));
    if (targets) memcpy(targets + b * T, src + 1, (size_t)T * sizeof(int32_t));
    L->cursor++;
  }
}

void remat__loader_free(remat_loader *L) {
  if (!L) return;
  remat__free(L->order);
  L->order = NULL;
}

int remat_loader_create(remat_loader **out, const remat_tokens *t, int64_t B, int64_t T,
                        int split, double val_frac, int shuffle, uint64_t seed,
                        remat_error *err) {
  *out = NULL;
  remat_loader *L = remat__malloc(sizeof *L);
  if (!L) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  int rc = remat__loader_init(L, t, B, T, split, val_frac, shuffle, seed, err);
  if (rc) {
    remat__free(L);
    return rc;
  }
  *out = L;
  return 0;
}

void remat_loader_destroy(remat_loader *L) {
  remat__loader_free(L);
  remat__free(L);
}

void remat_loader_tell(const remat_loader *L, remat_loader_pos *pos) {
  *pos = (remat_loader_pos){.epoch = L->epoch, .cursor = L->cursor, .epoch_rng = L->epoch_rng};
}

int remat_loader_seek(remat_loader *L, const remat_loader_pos *pos, remat_error *err) {
  L->rng = pos->epoch_rng;
  L->epoch = pos->epoch;
  start_epoch(L); /* the same offset and order as when the position was taken */
  if (pos->cursor < 0 || pos->cursor > L->num_windows) {
    remat_loader_reset(L);
    return remat__errorf(err, REMAT_EFORMAT,
                         "loader position %lld lies outside this epoch's %lld windows: the data "
                         "differs from the run that saved it",
                         (long long)pos->cursor, (long long)L->num_windows);
  }
  L->cursor = pos->cursor;
  return 0;
}
