/* ref_dump.c: writes what the PyTorch reference test compares against: a
 * small model as an llm.c checkpoint, a batch of tokens, the loss and every
 * gradient of one step, and the losses and parameters after a few AdamW
 * steps with clipping. With "bf16" after OUTDIR it writes instead the
 * losses of BF16_STEPS steps at BF16_LR from the same weights and tokens in
 * bf16 (losses_bf16.bin) and in fp32 (losses_fp32_long.bin), or, on a CPU
 * without bf16 products, nothing (exit 3).
 * usage: ref_dump OUTDIR [bf16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_runtime.h"
#include "remat.h"

enum { B = 2, T = 16, STEPS = 3, BF16_STEPS = 10 };
#define BF16_LR 1e-3 /* a smooth stretch of training: steps that jump would
                        magnify every rounding difference */

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f)) {
    fprintf(stderr, "ref_dump: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

static int32_t tok[2 * B * T]; /* inputs, then targets */

static int batch(void *ctx, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)ctx, (void)step, (void)micro, (void)err;
  memcpy(inputs, tok, sizeof(int32_t) * B * T);
  memcpy(targets, tok + B * T, sizeof(int32_t) * B * T);
  return 0;
}

static int dump_grads(void *ctx, remat_trainer *t, remat_error *err) {
  (void)err;
  remat_model *m = remat_trainer_model(t);
  if (remat_trainer_steps_done(t) > 0) return 0;
  size_t P = remat_param_count(remat_model_config(m));
  remat_model_sum_tied(m); /* the gradient the update sees */
  return write_raw((const char *)ctx, "grads.bin", remat_model_grads(m), P * sizeof(float))
             ? REMAT_EIO
             : 0;
}

/* A trainer on the reference model (cfg, block 0 recomputed, block 1
 * kept) with the test's optimizer settings. */
static remat_trainer *trainer(const remat_config *cfg, int steps, double lr, remat_error *err) {
  uint8_t pol[2] = {REMAT_RECOMPUTE, REMAT_KEEP};
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = B;
  o.T = T;
  o.steps = steps;
  o.lr = lr;
  o.hp.weight_decay = 0.1f;
  o.hp.grad_clip = 1.0f;
  remat_trainer *t;
  if (remat_trainer_create(&t, cfg, pol, NULL, &o, err)) return NULL;
  if (remat_trainer_allocate(t, err)) {
    remat_trainer_destroy(t);
    return NULL;
  }
  remat_trainer_set_batches(t, batch, NULL);
  remat_model_init_weights(remat_trainer_model(t), 5);
  return t;
}

static int train(remat_trainer *t, int steps, float *losses, remat_error *err) {
  for (int s = 0; s < steps; s++) {
    remat_step_stats st;
    if (remat_trainer_step(t, &st, err)) return -1;
    losses[s] = (float)st.loss;
  }
  return 0;
}

/* The bf16 run and its fp32 twin, BF16_STEPS steps each. */
static int bf16_losses(const char *dir, remat_config cfg) {
  remat_error err;
  float l16[BF16_STEPS], l32[BF16_STEPS];
  if (!remat_precision_available(REMAT_PRECISION_BF16, NULL)) return 3;
  for (int p = 0; p < 2; p++) {
    cfg.precision = p ? REMAT_PRECISION_FP32 : REMAT_PRECISION_BF16;
    remat_trainer *t = trainer(&cfg, BF16_STEPS, BF16_LR, &err);
    if (!t || train(t, BF16_STEPS, p ? l32 : l16, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    remat_trainer_destroy(t);
  }
  if (write_raw(dir, "losses_bf16.bin", l16, sizeof l16) ||
      write_raw(dir, "losses_fp32_long.bin", l32, sizeof l32))
    return 1;
  printf("ref_dump: bf16 %d steps (loss %.6f -> %.6f)\n", BF16_STEPS, l16[0], l16[BF16_STEPS - 1]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ref_dump OUTDIR [bf16]\n");
    return 2;
  }
  const char *dir = argv[1];
  remat_error err;
  remat_config cfg;
  /* V=200 pads to 256: padded rows must stay out of the loss */
  if (remat_config_parse("2,64,4,200,32", &cfg, &err)) return 1;
  uint32_t x = 12345;
  for (int i = 0; i < 2 * B * T; i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = (int32_t)((x >> 8) % 200u);
  }
  if (argc > 2 && !strcmp(argv[2], "bf16")) return bf16_losses(dir, cfg);
  /* recompute block 0, keep block 1: the reference sees both paths */
  remat_trainer *t = trainer(&cfg, STEPS, 1e-2, &err);
  if (!t) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  remat_trainer_set_hook(t, dump_grads, (void *)dir);
  remat_model *m = remat_trainer_model(t);
  char path[1024];
  snprintf(path, sizeof path, "%s/model.bin", dir);
  if (remat_checkpoint_save(path, &cfg, remat_model_params(m), &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  if (write_raw(dir, "tokens.bin", tok, sizeof tok)) return 1;
  float losses[STEPS];
  if (train(t, STEPS, losses, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  size_t P = remat_param_count(&cfg);
  if (write_raw(dir, "losses.bin", losses, sizeof losses)) return 1;
  if (write_raw(dir, "params_after.bin", remat_model_params(m), P * sizeof(float))) return 1;
  remat_trainer_destroy(t);
  printf("ref_dump: wrote %s (loss %.6f -> %.6f)\n", dir, losses[0], losses[STEPS - 1]);
  return 0;
}
