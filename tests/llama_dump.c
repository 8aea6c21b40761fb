/* llama_dump.c: writes what the PyTorch Llama test (torch_llama.py)
 * compares against, for one Llama shape: the initial weights as the
 * checkpoint remat saves (llama2.c's version 1), a batch of tokens, the
 * gradient of every step as the update sees it (before clipping) with the
 * parameters it was taken at, the losses, and the parameters after the
 * AdamW steps with weight decay and clipping: STEPS steps at lr LR in
 * fp32, or BF16_STEPS at BF16_LR in bf16 (mixed precision: the same fp32
 * parameters, gradients and update; the same initial weights and tokens).
 * usage: llama_dump OUTDIR SPEC POLICIES [fp32|bf16]
 *   SPEC      a Llama shape, "llama:L,C,NH,NKV,H,V,T[,theta[,tied]]"
 *   POLICIES  one letter per block: k keep, m middle, r full recompute
 * The batch is B sequences of the shape's full context T. In bf16 on a CPU
 * without bf16 products it writes nothing and exits 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"

enum { B = 2, STEPS = 5, BF16_STEPS = 10 };
#define LR 1e-2 /* torch_llama.py's LR, WD and CLIP */
#define BF16_LR 1e-3 /* and its BF16_LR: a smooth stretch of training, as
                        ref_dump's */
#define WD 0.1f
#define CLIP 1.0f

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f)) {
    fprintf(stderr, "llama_dump: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

/* The batch: B * T inputs, then B * T targets (owned by main). */
typedef struct {
  const int32_t *tok;
  int64_t n; /* B * T */
} batch_ctx;

static int batch(void *ctx, int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
                 remat_error *err) {
  (void)step, (void)micro, (void)err;
  const batch_ctx *b = ctx;
  memcpy(inputs, b->tok, sizeof(int32_t) * (size_t)b->n);
  memcpy(targets, b->tok + b->n, sizeof(int32_t) * (size_t)b->n);
  return 0;
}

/* Each step's gradient and the parameters it was taken at (the update
 * comes after the hook), as grads_<step>.bin and params_<step>.bin, step
 * from 0. */
static int dump_grads(void *ctx, remat_trainer *t, remat_error *err) {
  (void)err;
  remat_model *m = remat_trainer_model(t);
  long long step = (long long)remat_trainer_steps_done(t);
  char g[64], p[64];
  snprintf(g, sizeof g, "grads_%lld.bin", step);
  snprintf(p, sizeof p, "params_%lld.bin", step);
  size_t bytes = remat_param_count(remat_model_config(m)) * sizeof(float);
  remat_model_sum_tied(m); /* a tied head's share added to the embedding's */
  if (write_raw((const char *)ctx, g, remat_model_grads(m), bytes) ||
      write_raw((const char *)ctx, p, remat_model_params(m), bytes))
    return REMAT_EIO;
  return 0;
}

static int policies(const char *s, int64_t L, uint8_t *pol) {
  if ((int64_t)strlen(s) != L) return -1;
  for (int64_t i = 0; i < L; i++) {
    if (!strchr("kmr", s[i])) return -1; /* s[i] is not NUL: strlen(s) == L */
    pol[i] = s[i] == 'k' ? REMAT_KEEP : s[i] == 'm' ? REMAT_MIDDLE : REMAT_RECOMPUTE;
  }
  return 0;
}

static int run(const char *dir, const remat_config *cfg, const uint8_t *pol, remat_error *err) {
  int bf16 = cfg->precision == REMAT_PRECISION_BF16, steps = bf16 ? BF16_STEPS : STEPS;
  int64_t T = cfg->max_seq_len, n = B * T;
  int32_t *tok = malloc(sizeof(int32_t) * 2 * (size_t)n);
  if (!tok) return -1;
  uint32_t x = 12345;
  for (int64_t i = 0; i < 2 * n; i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = (int32_t)((x >> 8) % (uint32_t)cfg->vocab_size);
  }
  batch_ctx bc = {tok, n};
  remat_train_opts o;
  remat_train_opts_default(&o);
  o.B = B;
  o.T = T;
  o.steps = steps;
  o.lr = bf16 ? BF16_LR : LR;
  o.hp.weight_decay = WD;
  o.hp.grad_clip = CLIP;
  remat_trainer *t = NULL;
  int rc = -1;
  if (remat_trainer_create(&t, cfg, pol, NULL, &o, err) || remat_trainer_allocate(t, err))
    goto done;
  remat_trainer_set_batches(t, batch, &bc);
  remat_trainer_set_hook(t, dump_grads, (void *)dir);
  remat_model *m = remat_trainer_model(t);
  remat_model_init_weights(m, 5);
  size_t P = remat_param_count(cfg);
  char path[1024];
  snprintf(path, sizeof path, "%s/model.bin", dir);
  if (remat_checkpoint_save(path, cfg, remat_model_params(m), err)) goto done;
  if (write_raw(dir, "tokens.bin", tok, sizeof(int32_t) * 2 * (size_t)n)) goto done;
  float losses[BF16_STEPS > STEPS ? BF16_STEPS : STEPS];
  for (int s = 0; s < steps; s++) {
    remat_step_stats st;
    if (remat_trainer_step(t, &st, err)) goto done;
    losses[s] = (float)st.loss;
  }
  if (write_raw(dir, "losses.bin", losses, sizeof(float) * (size_t)steps) ||
      write_raw(dir, "params_after.bin", remat_model_params(m), P * sizeof(float)))
    goto done;
  printf("llama_dump: wrote %s (%s, loss %.6f -> %.6f)\n", dir, bf16 ? "bf16" : "fp32", losses[0],
         losses[steps - 1]);
  rc = 0;
done:
  if (t) remat_trainer_destroy(t);
  free(tok);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 4 && !(argc == 5 && (!strcmp(argv[4], "fp32") || !strcmp(argv[4], "bf16")))) {
    fprintf(stderr, "usage: llama_dump OUTDIR SPEC POLICIES [fp32|bf16]\n");
    return 2;
  }
  remat_error err = {0};
  remat_config cfg;
  uint8_t pol[REMAT_MAX_LAYERS];
  if (remat_config_parse(argv[2], &cfg, &err)) {
    fprintf(stderr, "llama_dump: %s\n", err.msg);
    return 2;
  }
  if (cfg.family != REMAT_FAMILY_LLAMA || policies(argv[3], cfg.num_layers, pol)) {
    fprintf(stderr, "llama_dump: give a Llama shape and one of k, m, r per block\n");
    return 2;
  }
  if (argc == 5 && !strcmp(argv[4], "bf16")) {
    const char *why = NULL;
    if (!remat_precision_available(REMAT_PRECISION_BF16, &why)) {
      printf("llama_dump: no bf16 here: %s\n", why ? why : "");
      return 3;
    }
    cfg.precision = REMAT_PRECISION_BF16;
  }
  if (run(argv[1], &cfg, pol, &err)) {
    if (err.msg[0]) fprintf(stderr, "llama_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
