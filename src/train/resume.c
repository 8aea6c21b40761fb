/* resume.c: a trainer's state to and from a state file (remat_state_save),
 * and checkpoint directories: DIR/step_NNNNNNNN/ holding model.bin (llm.c
 * weights), one state file per rank and DONE written last, a manifest of
 * the files with their checksums (src/io/ckptdir.c), so the newest
 * directory whose files match its DONE is complete and loadable. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "train/train_internal.h"

static uint64_t bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static double real(uint64_t u) {
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Floats in a model's moment buffers as they are laid out: the whole
 * stage's, or a replica's shards under ZeRO 1 to 3. */
static size_t model_moments(const remat_model *m) {
  return remat_memplan_buf(remat_model_memplan(m), REMAT_BUF_ADAM_M).bytes / sizeof(float);
}

/* The state's moments in pieces: the trainer's model's, then each
 * companion chunk's. Returns the pieces. */
static int moment_parts(const remat_trainer *tr, float **m, float **v, size_t *n) {
  int k = 0;
  for (int i = 0; i <= tr->num_companions; i++, k++) {
    remat_model *x = i ? tr->companions[i - 1] : tr->model;
    m[k] = remat_model_adam_m(x);
    v[k] = remat_model_adam_v(x);
    n[k] = model_moments(x);
  }
  return k;
}

/* Windows on the moments' pieces for the host (the backend's crossings):
 * lent over the arena's pieces in *m and *v, given back and restored. */
static void map_parts(const remat_trainer *tr, float **m, float **v, const size_t *n, int k,
                      int access, float **at_m, float **at_v) {
  const remat__backend *be = remat__model_backend(tr->model);
  for (int i = 0; i < k; i++) {
    at_m[i] = m[i];
    at_v[i] = v[i];
    m[i] = n[i] ? be->map(m[i], n[i] * sizeof(float), access) : m[i];
    v[i] = n[i] ? be->map(v[i], n[i] * sizeof(float), access) : v[i];
  }
}

static void unmap_parts(const remat_trainer *tr, float **m, float **v, const size_t *n, int k,
                        int access, float **at_m, float **at_v) {
  const remat__backend *be = remat__model_backend(tr->model);
  for (int i = k - 1; i >= 0; i--) {
    if (n[i]) be->unmap(at_v[i], v[i], n[i] * sizeof(float), access);
    if (n[i]) be->unmap(at_m[i], m[i], n[i] * sizeof(float), access);
  }
}

static size_t moment_floats(const remat_trainer *tr) {
  size_t n = model_moments(tr->model);
  for (int i = 0; i < tr->num_companions; i++) n += model_moments(tr->companions[i]);
  return n;
}

static void fill_header(remat_trainer *tr, int rank, int ranks, remat_state_header *h) {
  const remat_model *m = tr->model;
  const remat_config *c = remat_model_config(m);
  const remat_stage *st = remat_model_stage(m);
  const remat_train_opts *o = &tr->o;
  remat_loader_pos pos = {0};
  if (tr->have_train) remat_loader_tell(&tr->train, &pos);
  *h = (remat_state_header){
      .step = remat_model_step(m), .num_params = (int64_t)moment_floats(tr),
      .rank = rank, .ranks = ranks, .first_block = st->first_block,
      .num_blocks = st->num_blocks, .has_embedding = st->has_embedding, .has_head = st->has_head,
      .L = c->num_layers, .C = c->channels, .NH = c->num_heads, .V = c->vocab_size,
      .maxT = c->max_seq_len, .B = o->B, .T = o->T, .grad_accum = o->grad_accum,
      .steps = o->steps, .warmup = o->warmup, .cosine = o->cosine, .seed = o->hp.seed,
      .lr_bits = bits(o->lr), .dropout_bits = bits(o->hp.dropout),
      .wd_bits = bits(o->hp.weight_decay), .clip_bits = bits(o->hp.grad_clip),
      .shuffle = o->shuffle, .loader_epoch = pos.epoch, .loader_cursor = pos.cursor,
      .loader_rng = pos.epoch_rng, .data_tokens = tr->have_train ? tr->train.n : 0,
      .replicas = st->replicas, .zero = st->zero,
      .binds = REMAT_STATE_BINDS_PRECISION | (tr->have_model_crc ? REMAT_STATE_BINDS_MODEL : 0),
      .precision = c->precision, .model_crc = tr->have_model_crc ? tr->model_crc : 0};
}

void remat__trainer_bind_model(remat_trainer *tr, uint32_t crc) {
  tr->model_crc = crc;
  tr->have_model_crc = 1;
}

int remat_trainer_save_state(remat_trainer *tr, const char *path, int rank, int ranks,
                             remat_error *err) {
  remat_state_header h;
  fill_header(tr, rank, ranks, &h);
  float *m[REMAT__MAX_COMPANIONS + 1], *v[REMAT__MAX_COMPANIONS + 1];
  size_t n[REMAT__MAX_COMPANIONS + 1];
  int k = moment_parts(tr, m, v, n);
  float *at_m[REMAT__MAX_COMPANIONS + 1], *at_v[REMAT__MAX_COMPANIONS + 1];
  map_parts(tr, m, v, n, k, REMAT_MAP_READ, at_m, at_v);
  int rc = remat_state_save_parts(path, &h, k, (const float *const *)m, (const float *const *)v,
                                  n, err);
  unmap_parts(tr, m, v, n, k, REMAT_MAP_READ, at_m, at_v);
  tr->have_model_crc = 0; /* the next state binds the next model file */
  return rc;
}

/* The settings a resumed run must share, by name, for the message. */
static int compare(const remat_state_header *have, const remat_state_header *want,
                   const char *path, remat_error *err) {
#define SAME(f, what)                                                                        \
  if (have->f != want->f)                                                                    \
    return remat__errorf(err, REMAT_ESHAPE,                                                  \
                         "cannot resume from '%s': it was saved with a different %s (%lld, "  \
                         "now %lld); resume with the settings it was saved with",           \
                         path, what, (long long)have->f, (long long)want->f);
  SAME(ranks, "number of ranks")
  SAME(replicas, "number of replicas") SAME(zero, "ZeRO stage")
  SAME(rank, "rank")
  SAME(first_block, "first block of this rank's stage")
  SAME(num_blocks, "number of blocks on this rank's stage")
  SAME(L, "number of layers") SAME(C, "width") SAME(NH, "number of heads")
  SAME(V, "vocabulary") SAME(maxT, "maximum sequence")
  SAME(B, "batch") SAME(T, "sequence length") SAME(grad_accum, "micro-batches per step")
  SAME(warmup, "warmup")
  SAME(cosine, "learning-rate schedule") SAME(seed, "seed")
  SAME(shuffle, "data order") SAME(data_tokens, "training data (token count)")
#undef SAME
  /* More steps extend a run, fewer end it sooner: a constant rate does not
   * care, a cosine schedule ends at its last step and would change shape. */
  if (have->steps != want->steps && have->cosine)
    return remat__errorf(err, REMAT_ESHAPE,
                         "cannot resume from '%s' for %lld steps: its learning rate follows a "
                         "cosine schedule that ends at step %lld; a cosine run is neither "
                         "extended nor cut short (train on with a constant rate: a new run "
                         "from its weights)", path, (long long)want->steps,
                         (long long)have->steps);
  if (want->steps < have->step)
    return remat__errorf(err, REMAT_ESHAPE,
                         "cannot resume from '%s' for %lld steps: it is at step %lld already",
                         path, (long long)want->steps, (long long)have->step);
  /* doubles kept as their bits: compared as bits, shown as numbers */
#define SAME_REAL(f, what)                                                                   \
  if (have->f != want->f)                                                                    \
    return remat__errorf(err, REMAT_ESHAPE,                                                  \
                         "cannot resume from '%s': it was saved with a different %s (%.17g, " \
                         "now %.17g); resume with the settings it was saved with",          \
                         path, what, real(have->f), real(want->f));
  SAME_REAL(lr_bits, "learning rate") SAME_REAL(dropout_bits, "dropout")
  SAME_REAL(wd_bits, "weight decay") SAME_REAL(clip_bits, "clipping")
#undef SAME_REAL
  /* a state saved before version 2 records no precision */
  if ((have->binds & REMAT_STATE_BINDS_PRECISION) && have->precision != want->precision)
    return remat__errorf(err, REMAT_ESHAPE,
                         "cannot resume from '%s': it was saved training in %s, and this run "
                         "trains in %s; a run keeps its precision: resume with precision %s",
                         path, remat_precision_name((int)have->precision),
                         remat_precision_name((int)want->precision),
                         remat_precision_name((int)have->precision));
  return 0;
}

/* A state inside a sealed checkpoint directory is loaded only once the
 * whole directory verifies against its DONE: a corrupt model.bin or a file
 * from another step or run is refused before anything is used. */
static int verify_dir_of(const char *path, const remat_state_header *have, remat_error *err) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) : 1;
  char dir[4096], done[4096 + 8];
  if (dl >= sizeof dir) return 0;
  if (slash) memcpy(dir, path, dl);
  else dir[0] = '.';
  dir[dl] = 0;
  snprintf(done, sizeof done, "%s/DONE", dir);
  struct stat st;
  if (lstat(done, &st) != 0) return 0; /* a state file on its own */
  remat_error e;
  if (remat_checkpoint_verify(dir, -1, NULL, &e))
    return remat__errorf(err, e.code, "cannot resume from '%s': %s", dir, e.msg);
  /* DONE lists what is there, resealed or not: the state names the weights
   * it was saved with */
  if (have->binds & REMAT_STATE_BINDS_MODEL) {
    char model[4096 + 16];
    uint64_t size;
    uint32_t crc;
    snprintf(model, sizeof model, "%s/model.bin", dir);
    if (remat_file_checksum(model, "model file", "model file", &size, &crc, &e))
      return remat__errorf(err, e.code, "cannot resume from '%s': %s", dir, e.msg);
    if (crc != (uint32_t)have->model_crc)
      return remat__errorf(err, REMAT_EFORMAT,
                           "cannot resume from '%s': its model.bin (CRC32C %08x) is not the "
                           "model file its training state was saved with (CRC32C %08x); "
                           "resume from the checkpoint as the run wrote it, or start a new run "
                           "from this file with --model",
                           dir, (unsigned)crc, (unsigned)have->model_crc);
  }
  return 0;
}

int remat_trainer_check_state(remat_trainer *tr, const char *path, int rank, int ranks,
                              remat_error *err) {
  remat_state_header want, have;
  fill_header(tr, rank, ranks, &want);
  int rc = remat_state_peek(path, &have, err);
  if (!rc) rc = compare(&have, &want, path, err);
  return rc ? rc : verify_dir_of(path, &have, err);
}

int remat_trainer_load_state(remat_trainer *tr, const char *path, int rank, int ranks,
                             remat_error *err) {
  remat_state_header have;
  int rc = remat_trainer_check_state(tr, path, rank, ranks, err);
  float *m[REMAT__MAX_COMPANIONS + 1], *v[REMAT__MAX_COMPANIONS + 1];
  size_t n[REMAT__MAX_COMPANIONS + 1];
  int k = moment_parts(tr, m, v, n);
  float *at_m[REMAT__MAX_COMPANIONS + 1], *at_v[REMAT__MAX_COMPANIONS + 1];
  if (!rc) {
    map_parts(tr, m, v, n, k, REMAT_MAP_WRITE, at_m, at_v);
    rc = remat_state_load_parts(path, &have, k, m, v, n, err);
    unmap_parts(tr, m, v, n, k, REMAT_MAP_WRITE, at_m, at_v);
  }
  if (rc) return rc;
  if (have.step < 0 || have.step > have.steps)
    return remat__errorf(err, REMAT_EFORMAT, "training state '%s' is at step %lld of %lld", path,
                         (long long)have.step, (long long)have.steps);
  remat__model_set_step(tr->model, have.step);
  for (int i = 0; i < tr->num_companions; i++) remat__model_set_step(tr->companions[i], have.step);
  if (tr->have_train) {
    remat_loader_pos pos = {.epoch = have.loader_epoch, .cursor = have.loader_cursor,
                            .epoch_rng = have.loader_rng};
    if ((rc = remat_loader_seek(&tr->train, &pos, err))) return rc;
  }
  return 0;
}
