/* tensor.c: what tensor parallelism adds to a plan's time, and the
 * published per-layer formula its memory is shown beside.
 *
 * Megatron-LM's layout (remat_config.tensor_parallel): every block's two
 * row-parallel products leave each of the t ranks a share of a sum over
 * the whole residual width, which an all-reduce completes (forward); the
 * gradients into its two column-parallel products' inputs likewise
 * (backward). Under sequence parallelism each all-reduce is a
 * reduce-scatter onto a rank's T/t tokens and an all-gather of the next
 * product's input; the backward gathers its incoming gradient and, for the
 * weight gradients, the layernorms' outputs again. The embedding's lookup
 * over a share of the vocabulary and the head's loss over one (the maxima,
 * the targets' logits and the sums of exponentials, one float a token
 * each) add theirs. Bytes are what each rank sends in a ring: (t - 1) / t
 * of the whole for an all-gather or a reduce-scatter, twice that for an
 * all-reduce. */
#include "base/base.h"
#include "config/family.h"
#include "plan/plan.h"

static double ring(int64_t t, double whole) { return whole * (double)(t - 1) / (double)t; }

void remat_tensor_comm_get(const remat_config *cfg, int64_t B, int64_t T, remat_tensor_comm *c) {
  *c = (remat_tensor_comm){0};
  int64_t t = remat__tp(cfg);
  if (t <= 1) return;
  double BT = (double)B * (double)T, BTC = BT * (double)cfg->channels;
  double e = cfg->precision == REMAT_PRECISION_BF16 ? 2 : 4; /* a product's operand */
  double part = ring(t, 4 * BTC);       /* a sum's shares, fp32: gather or scatter */
  double gather = ring(t, e * BTC);     /* a layernorm's output, to a product */
  if (cfg->sequence_parallel) {
    c->block_fwd = 2 * (gather + part);           /* two gathers, two scatters */
    c->block_bwd = 2 * (part + gather + part);    /* the gradient and the input, gathered;
                                                     the input's gradient scattered */
    c->embed_fwd = part;                          /* onto each rank's tokens */
    c->embed_bwd = part;                          /* the gradient, gathered */
    c->head_fwd = gather + 3 * ring(t, 8 * BT);   /* lnf; max, target, sum all-reduced */
    c->head_bwd = part;
  } else {
    c->block_fwd = 2 * 2 * part; /* two all-reduces */
    c->block_bwd = 2 * 2 * part;
    c->embed_fwd = 2 * part;
    c->head_fwd = 3 * ring(t, 8 * BT);
    c->head_bwd = 2 * part;
  }
}

void remat_plan_problem_add_comm(remat_plan_problem *pb, const remat_tensor_comm *c,
                                 double per_byte) {
  if (pb->num_groups < 3) return; /* a --config problem: embedding, blocks, head */
  remat_plan_group *e = &pb->groups[0], *b = &pb->groups[1], *h = &pb->groups[2];
  e->fwd += per_byte * c->embed_fwd;
  e->bwd += per_byte * c->embed_bwd;
  b->fwd += per_byte * c->block_fwd;
  b->bwd += per_byte * c->block_bwd; /* in B: W sends nothing */
  b->recompute += per_byte * c->block_fwd;
  h->fwd += per_byte * c->head_fwd;
  h->bwd += per_byte * c->head_bwd;
}

double remat_korthikanti_layer_bytes(const remat_config *cfg, int64_t B, int64_t T) {
  /* Korthikanti et al., Reducing Activation Recomputation in Large
   * Transformer Models, 16-bit activations: s b h (10 + 24/t + 5 a s/(h t))
   * per layer, s b h (34/t + 5 a s/(h t)) with sequence parallelism */
  double t = (double)remat__tp(cfg), s = (double)T, b = (double)B, h = (double)cfg->channels,
         a = (double)cfg->num_heads;
  double per = cfg->sequence_parallel ? 34 / t : 10 + 24 / t;
  return s * b * h * (per + 5 * a * s / (h * t));
}
