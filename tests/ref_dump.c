/* ref_dump.c: writes what the PyTorch reference test compares against: a
 * small model as an llm.c checkpoint, a batch of tokens, the loss and every
 * gradient of one step, and the losses and parameters after a few AdamW
 * steps with clipping. usage: ref_dump OUTDIR [dropout] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

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
  remat_model m;
  if (remat_model_init(&m, &cfg, B, T, pol, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  remat_model_init_weights(&m, 5);
  char path[1024];
  snprintf(path, sizeof path, "%s/model.bin", dir);
  if (remat_checkpoint_save(path, &cfg, m.params, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  int32_t tok[2 * B * T];
  uint32_t x = 12345;
  for (int i = 0; i < 2 * B * T; i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = (int32_t)((x >> 8) % 200u);
  }
  if (write_raw(dir, "tokens.bin", tok, sizeof tok)) return 1;

  remat_hparams hp;
  remat_hparams_default(&hp);
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.grad_clip = 1.0f;
  size_t P = remat_param_count(&cfg);
  float losses[STEPS];
  for (int s = 0; s < STEPS; s++) {
    memcpy(m.inputs, tok, sizeof(int32_t) * B * T);
    memcpy(m.targets, tok + B * T, sizeof(int32_t) * B * T);
    remat_model_zero_grad(&m);
    losses[s] = remat_model_forward_backward(&m, 0, 1.0f / (B * T), &hp);
    if (s == 0 && write_raw(dir, "grads.bin", m.grads, P * sizeof(float))) return 1;
    remat_model_update(&m, &hp, hp.lr);
  }
  if (write_raw(dir, "losses.bin", losses, sizeof losses)) return 1;
  if (write_raw(dir, "params_after.bin", m.params, P * sizeof(float))) return 1;
  remat_model_free(&m);
  printf("ref_dump: wrote %s (loss %.6f -> %.6f)\n", dir, losses[0], losses[STEPS - 1]);
  return 0;
}
