/* ref_dump.c: writes what the PyTorch reference test compares against: a
 * small model as an llm.c checkpoint, a batch of tokens, the loss and every
 * gradient of one step, and the losses and parameters after a few AdamW
 * steps with clipping. usage: ref_dump OUTDIR [dropout] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_runtime.h"
#include "remat.h"

enum { B = 2, T = 16, STEPS = 3 };

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

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ref_dump OUTDIR\n");
    return 2;
  }
  const char *dir = argv[1];
  remat_error err;
  remat_config cfg;
  /* V=200 pads to 256: padded rows must stay out of the loss */
  if (remat_config_parse("2,64,4,200,32", &cfg, &err)) return 1;
  /* recompute block 0, keep block 1: the reference sees both paths */
  uint8_t pol[2] = {REMAT_RECOMPUTE, REMAT_KEEP};
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = B;
  o.T = T;
  o.steps = STEPS;
  o.lr = 1e-2;
  o.hp.weight_decay = 0.1f;
  o.hp.grad_clip = 1.0f;
  remat_trainer *t;
  if (remat_trainer_create(&t, &cfg, pol, NULL, &o, &err) || remat_trainer_allocate(t, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  remat_trainer_set_batches(t, batch, NULL);
  remat_trainer_set_hook(t, dump_grads, (void *)dir);
  remat_model *m = remat_trainer_model(t);
  remat_model_init_weights(m, 5);
  char path[1024];
  snprintf(path, sizeof path, "%s/model.bin", dir);
  if (remat_checkpoint_save(path, &cfg, remat_model_params(m), &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  uint32_t x = 12345;
  for (int i = 0; i < 2 * B * T; i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = (int32_t)((x >> 8) % 200u);
  }
  if (write_raw(dir, "tokens.bin", tok, sizeof tok)) return 1;
  float losses[STEPS];
  for (int s = 0; s < STEPS; s++) {
    remat_step_stats st;
    if (remat_trainer_step(t, &st, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    losses[s] = (float)st.loss;
  }
  size_t P = remat_param_count(&cfg);
  if (write_raw(dir, "losses.bin", losses, sizeof losses)) return 1;
  if (write_raw(dir, "params_after.bin", remat_model_params(m), P * sizeof(float))) return 1;
  remat_trainer_destroy(t);
  printf("ref_dump: wrote %s (loss %.6f -> %.6f)\n", dir, losses[0], losses[STEPS - 1]);
  return 0;
}
