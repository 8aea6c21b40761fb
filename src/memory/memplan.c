/* memplan.c: every buffer of a training step, its size and the phases it
 * lives in, and its offset in one arena. Offsets come from a greedy
 * largest-first placement: each buffer goes to the lowest offset where it
 * overlaps no placed buffer that is alive in a common phase. The arena size is
 * the planned peak; the engine allocates exactly that, once. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "memory/layout.h"

#define ALL_PHASES ((1u << REMAT_PHASE_COUNT) - 1)
#define PH(p) (1u << (p))

void remat_policy_first_n(uint8_t *policy, int64_t L, int64_t n) {
  for (int64_t l = 0; l < L; l++) policy[l] = l < n ? REMAT_RECOMPUTE : REMAT_KEEP;
}

void remat_block_bytes_get(const remat_config *cfg, int64_t B, int64_t T, remat_block_bytes *o) {
  size_t input = (size_t)B * (size_t)T * (size_t)cfg->channels * sizeof(float);
  size_t internal =
      remat__block_acts_view(NULL, NULL, B, T, cfg->channels, cfg->num_heads) * sizeof(float);
  o->kept_bytes = input + internal;
  o->recompute_bytes = input;
  o->scratch_bytes = internal;
  o->state_bytes = 4 * sizeof(float) * remat_block_param_count(cfg);
}

/* Places buffers; returns the arena size. */
static size_t place(remat_membuf *buf, int n) {
  int order[REMAT_BUF_COUNT], placed[REMAT_BUF_COUNT], np = 0;
  for (int i = 0; i < n; i++) order[i] = i;
  /* largest first; ties by index so the layout is deterministic */
  for (int i = 1; i < n; i++) {
    int k = order[i], j = i - 1;
    while (j >= 0 && buf[order[j]].bytes < buf[k].bytes) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = k;
  }
  size_t arena = 0;
  for (int oi = 0; oi < n; oi++) {
    remat_membuf *b = &buf[order[oi]];
    if (b->bytes == 0) {
      b->offset = 0;
      continue;
    }
    /* Candidate offsets: 0 and the end of every conflicting placed buffer;
     * take the lowest one that collides with none. */
    size_t best = SIZE_MAX;
    for (int ci = -1; ci < np; ci++) {
      size_t cand = 0;
      if (ci >= 0) {
        const remat_membuf *c = &buf[placed[ci]];
        if (!(c->phases & b->phases)) continue;
        cand = c->offset + c->bytes;
      }
      if (cand >= best) continue;
      int ok = 1;
      for (int k = 0; k < np && ok; k++) {
        const remat_membuf *c = &buf[placed[k]];
        if (!(c->phases & b->phases)) continue;
        if (cand < c->offset + c->bytes && c->offset < cand + b->bytes) ok = 0;
      }
      if (ok) best = cand;
    }
    b->offset = best;
    placed[np++] = order[oi];
    if (best + b->bytes > arena) arena = best + b->bytes;
  }
  return arena;
}

int remat__check_shape(const remat_config *cfg, int64_t B, int64_t T, remat_error *err) {
  int rc = remat_config_check(cfg, err);
  if (rc) return rc;
  if (B < 1 || T < 1 || B > (1 << 20))
    return remat__errorf(err, REMAT_EINVAL,
                         "batch B=%lld and sequence T=%lld must be positive (B at most 2^20)",
                         (long long)B, (long long)T);
  if (T > cfg->max_seq_len)
    return remat__errorf(err, REMAT_ESHAPE,
                         "sequence length T=%lld exceeds the model's maximum of %lld; use --seq "
                         "%lld or less",
                         (long long)T, (long long)cfg->max_seq_len, (long long)cfg->max_seq_len);
  /* Guard the largest products: B*NH*T*T floats per block, B*T*Vp logits,
   * and the residual stream of all blocks. */
  double att = (double)B * (double)cfg->num_heads * (double)T * (double)T * 4.0;
  double logits = (double)B * (double)T * (double)cfg->padded_vocab_size * 4.0;
  double resid = (double)(cfg->num_layers + 1) * (double)B * (double)T *
                 (double)cfg->channels * 4.0;
  if (att * (double)cfg->num_layers > 1e15 || logits > 1e15 || resid > 1e15)
    return remat__errorf(err, REMAT_ERANGE,
                         "B=%lld, T=%lld with this model needs more than a petabyte; use a "
                         "smaller batch or sequence",
                         (long long)B, (long long)T);
  return 0;
}

int remat_memplan_build(remat_memplan *mp, const remat_config *cfg, int64_t B, int64_t T,
                        const uint8_t *policy, remat_error *err) {
  memset(mp, 0, sizeof *mp);
  int rc = remat__check_shape(cfg, B, T, err);
  if (rc) return rc;
  int64_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads;

  mp->cfg = *cfg;
  mp->B = B;
  mp->T = T;
  mp->policy = remat__malloc((size_t)L);
  mp->kept_slot = remat__malloc((size_t)L * sizeof(int64_t));
  if (!mp->policy || !mp->kept_slot) {
    remat_memplan_free(mp);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory planning %lld layers", (long long)L);
  }
  for (int64_t l = 0; l < L; l++) {
    uint8_t p = policy ? policy[l] : REMAT_KEEP;
    if (p >= REMAT_POLICY_COUNT) {
      remat_memplan_free(mp);
      return remat__errorf(err, REMAT_EINVAL, "layer %lld has unknown policy %u", (long long)l, p);
    }
    mp->policy[l] = p;
    mp->kept_slot[l] = p == REMAT_KEEP ? mp->num_kept++ : -1;
  }
  mp->num_recomputed = L - mp->num_kept;

  size_t P = remat_param_count(cfg) * sizeof(float);
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C;
  mp->block_internal_bytes = remat__block_acts_view(NULL, NULL, B, T, C, NH) * sizeof(float);
  mp->block_dgrad_bytes = remat__block_dgrads_view(NULL, NULL, B, T, C, NH) * sizeof(float);
  size_t head = remat__head_acts_view(NULL, NULL, B, T, C) * sizeof(float);

  const unsigned step = PH(REMAT_PHASE_FORWARD) | PH(REMAT_PHASE_HEAD) | PH(REMAT_PHASE_BACKWARD);
  remat_membuf *b = mp->buf;
  b[REMAT_BUF_PARAMS] = (remat_membuf){P, 0, ALL_PHASES};
  b[REMAT_BUF_GRADS] = (remat_membuf){P, 0, ALL_PHASES};
  b[REMAT_BUF_ADAM_M] = (remat_membuf){P, 0, ALL_PHASES};
  b[REMAT_BUF_ADAM_V] = (remat_membuf){P, 0, ALL_PHASES};
  b[REMAT_BUF_TOKENS] = (remat_membuf){remat__align(2 * BT * sizeof(int32_t)), 0, step};
  b[REMAT_BUF_RESIDUAL] = (remat_membuf){(size_t)(L + 1) * BTC * sizeof(float), 0, step};
  b[REMAT_BUF_KEPT] = (remat_membuf){(size_t)mp->num_kept * mp->block_internal_bytes, 0, step};
  b[REMAT_BUF_SCRATCH] = (remat_membuf){mp->num_recomputed ? mp->block_internal_bytes : 0, 0,
                                        PH(REMAT_PHASE_FORWARD) | PH(REMAT_PHASE_BACKWARD)};
  b[REMAT_BUF_HEAD] = (remat_membuf){head, 0, PH(REMAT_PHASE_HEAD)};
  b[REMAT_BUF_LOGITS] = (remat_membuf){remat__align(BT * (size_t)cfg->padded_vocab_size *
                                                    sizeof(float)),
                                       0, PH(REMAT_PHASE_HEAD)};
  b[REMAT_BUF_DRESID] = (remat_membuf){BTC * sizeof(float), 0,
                                       PH(REMAT_PHASE_HEAD) | PH(REMAT_PHASE_BACKWARD)};
  b[REMAT_BUF_DBLOCK] = (remat_membuf){mp->block_dgrad_bytes, 0, PH(REMAT_PHASE_BACKWARD)};
  for (int i = 0; i < REMAT_BUF_COUNT; i++) b[i].bytes = remat__align(b[i].bytes);
  mp->persistent_bytes = 4 * remat__align(P);
  mp->peak_bytes = place(b, REMAT_BUF_COUNT);
  return 0;
}

void remat_memplan_free(remat_memplan *mp) {
  remat__free(mp->policy);
  remat__free(mp->kept_slot);
  mp->policy = NULL;
  mp->kept_slot = NULL;
}

int remat_fewest_recompute(const remat_config *cfg, int64_t B, int64_t T, size_t budget,
                           int64_t *n_out, size_t *min_bytes, remat_error *err) {
  int64_t L = cfg->num_layers;
  uint8_t *pol = remat__malloc((size_t)(L > 0 ? L : 1));
  if (!pol) return remat__errorf(err, REMAT_ENOMEM, "out of memory");
  size_t least = SIZE_MAX;
  int rc = 0;
  for (int64_t n = 0; n <= L; n++) {
    remat_policy_first_n(pol, L, n);
    remat_memplan mp;
    rc = remat_memplan_build(&mp, cfg, B, T, pol, err);
    if (rc) break;
    size_t peak = mp.peak_bytes;
    remat_memplan_free(&mp);
    if (peak < least) least = peak;
    if (peak <= budget) {
      *n_out = n;
      if (min_bytes) *min_bytes = peak;
      remat__free(pol);
      return 0;
    }
  }
  remat__free(pol);
  if (rc) return rc;
  if (min_bytes) *min_bytes = least;
  char have[32], need[32];
  return remat__errorf(err, REMAT_EINFEASIBLE,
                       "memory budget %s is too small: even recomputing all %lld blocks needs "
                       "%s; raise --mem or lower --batch/--seq",
                       remat_format_bytes(budget, have, sizeof have), (long long)L,
                       remat_format_bytes(least, need, sizeof need));
}
