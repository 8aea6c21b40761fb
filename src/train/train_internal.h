/* train_internal.h: the trainer's inside, shared by its files. */
#ifndef REMAT_TRAIN_INTERNAL_H
#define REMAT_TRAIN_INTERNAL_H

#include "io/loader.h"
#include "model/model_runtime.h"
#include "remat/train.h"
#include "train/train_runtime.h"

struct remat_trainer {
  remat_train_opts o;
  remat_model *model;
  int have_train, have_val;
  remat_loader train, val;
  remat_batch_fn batch_fn;
  void *batch_ctx;
  remat__trainer_ops ops;
  float dloss; /* 1 / (B T K): the mean over the step's tokens */
  int allocated; /* remat_trainer_allocate has made the model's arena */
  /* the rank's other model chunks (remat__trainer_set_companions) */
  remat_model *companions[REMAT__MAX_COMPANIONS];
  int num_companions;
  /* the model file's CRC32C the next saved state records
   * (remat__trainer_bind_model), have_model_crc 0 when none */
  uint32_t model_crc;
  int have_model_crc;
};

#endif
