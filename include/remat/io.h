/* remat/io.h: file formats (llm.c token shards and checkpoints), text, the embedded corpus, the loader.
 * Part of remat's public API; include "remat.h" for all of it. */
#ifndef REMAT_IO_H
#define REMAT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "remat/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------- data and files */

/* File formats (little endian, identical to llm.c so files move both ways):
 *   token shard: int32 header[256] = {20240520, 1, ntok, 0...}, then ntok uint16
 *   checkpoint:  int32 header[256] = {20240326, 3, maxT, V, L, NH, C, Vp, 0...},
 *                then remat_param_count(cfg) float32 in REMAT_P_* order
 *   bf16 checkpoint (llm.c's train_gpt2.cu in its bf16 build, the _bf16.bin
 *                of train_gpt2.py): the same with version 5 and the parameters
 *                as bf16 (the upper 16 bits of a float32), in the same order
 *
 * Every save (remat_tokens_save, remat_checkpoint_save) is atomic:
 *   - path may be a new name or an existing regular file. Anything else that
 *     exists there (a directory, device, FIFO, socket) is refused with
 *     REMAT_EIO and left as it is.
 *   - A symlink is written through: the link stays and the file it points to
 *     (following every link in the chain) is replaced, in that file's
 *     directory. A dangling link gets its target created.
 *   - The data goes to a new temporary TARGET.tmp.XXXXXX (mkstemp) in the
 *     target's directory; every write is checked, the file is fsynced and
 *     closed, then renamed over the target and the directory is fsynced. The
 *     replaced file's permission bits are kept, and its owner and group
 *     where the process may set them (a new file gets 0666 less the umask).
 *     On any failure the temporary is removed, the target is as it was, and
 *     REMAT_EIO names the path and the system's reason.
 *   - Locking: each save holds an exclusive flock(2) on the target's
 *     directory from the last check of the target through the rename and the
 *     directory's fsync (not while writing). Since each save writes its own
 *     temporary, two runs saving to one path never mix their bytes: readers
 *     see the old file or one whole new one, and the last rename wins.
 *   - A killed process can leave its TARGET.tmp.XXXXXX behind (never a
 *     partial TARGET); such files are safe to delete. */
#define REMAT_SHARD_MAGIC 20240520
#define REMAT_SHARD_VERSION 1
#define REMAT_CKPT_MAGIC 20240326
#define REMAT_CKPT_VERSION 3      /* fp32 parameters */
#define REMAT_CKPT_VERSION_BF16 5 /* bf16 parameters */
#define REMAT_HEADER_INTS 256
#define REMAT_HEADER_BYTES (REMAT_HEADER_INTS * 4)

/* A Llama's checkpoints are llama2.c's (karpathy/llama2.c, run.c and
 * export.py), little endian, fp32 weights in llama2.c's tensor order; the
 * two formats are told apart, and from llm.c's, by their first bytes
 * (remat_checkpoint_detect):
 *   legacy (what run.c reads, export.py's version 0): int32 dim (C),
 *     hidden_dim (H), n_layers (L), n_heads (NH), n_kv_heads, vocab_size
 *     (V; negative: the head has its own matrix), seq_len (maxT); then
 *     REMAT_LP_EMB .. REMAT_LP_NORM, then freq_cis_real and freq_cis_imag
 *     ((maxT, C/NH/2) each: cos and sin of t * theta^(-2i/hs), which run.c
 *     skips; older files carry them, newer tools may not, and both are
 *     read), then REMAT_LP_CLS when V < 0. No magic: a file is taken for
 *     one only when its seven ints make a valid shape and its size is
 *     exactly what they imply, with or without the tables.
 *   version 1 (export.py's version1_export): uint32 magic 0x616b3432
 *     ("ak42"), int32 version 1, the same seven int32 (V positive), uint8
 *     shared_classifier (1: tied head), zeros up to byte 256; then the
 *     tensors in the order attention_norm, ffn_norm, norm,
 *     tok_embeddings, wq, wk, wv, wo, w1, w2, w3, and output when not
 *     shared.
 * Neither holds the rotary base or the RMSNorm epsilon: a file reads with
 * theta 10000 and epsilon 1e-5, as run.c computes (remat train's --config
 * gives another theta for the file's shape). */
#define REMAT_LLAMA2C_MAGIC 0x616b3432u /* "ak42" */
#define REMAT_LLAMA2C_LEGACY 0          /* remat_llama2c_save's versions */
#define REMAT_LLAMA2C_V1 1
#define REMAT_LLAMA2C_HEADER_BYTES 256  /* version 1's header */
#define REMAT_LLAMA2C_LEGACY_HEADER_BYTES 28
#define REMAT_LLAMA2C_THETA 10000.0     /* what a file without one reads with */

/* Checkpoint formats; append only. */
typedef enum {
  REMAT_FORMAT_AUTO = 0,           /* reading: told by the header; saving: the family's own */
  REMAT_FORMAT_LLMC = 1,           /* llm.c's GPT-2 checkpoint (version 3 or 5): GPT-2's own */
  REMAT_FORMAT_LLAMA2C_LEGACY = 2, /* llama2.c's run.c file */
  REMAT_FORMAT_LLAMA2C_V1 = 3,     /* llama2.c's export.py version 1: Llama's own */
  REMAT_FORMAT_COUNT
} remat_format;
/* "auto", "llm.c", "llama2c-legacy", "llama2c-v1"; parse returns -1 for
 * another name. */
REMAT_API const char *remat_format_name(int format);
REMAT_API int remat_format_parse(const char *s, int *out);

/* ---------------------------------------------------------------- tokens */

/* A token stream held in memory. */
typedef struct remat_tokens {
  int32_t *tok;   /* (n) token ids, owned: release with remat_tokens_free */
  int64_t n;      /* number of tokens, >= 2 once loaded */
  int64_t max_id; /* largest id in tok: the vocabulary must exceed it */
} remat_tokens;

/* Reads a whole llm.c shard. Checks magic, version, that the file holds
 * exactly the tokens the header announces, and that there are at least 2. */
REMAT_API int remat_tokens_load(remat_tokens *t, const char *path, remat_error *err);
/* Writes t as an llm.c shard; every id must lie in 0..65535. */
REMAT_API int remat_tokens_save(const remat_tokens *t, const char *path, remat_error *err);
/* Every id must be < V (the model's vocab_size); REMAT_ERANGE names the first
 * position that is not. */
REMAT_API int remat_tokens_check_vocab(const remat_tokens *t, int64_t V, remat_error *err);
/* A plain text file as byte tokens: byte b is token b (vocabulary 256). */
REMAT_API int remat_tokens_from_text(remat_tokens *t, const char *path, remat_error *err);
/* Releases t->tok and zeroes t; safe on a zeroed or already freed t. */
REMAT_API void remat_tokens_free(remat_tokens *t);

/* ----------------------------------------------------------- checkpoints */

/* A checkpoint opened once: the header is read and validated at open, the
 * weights later from the same open file, so a file renamed over the path in
 * between (a run saving to it) does not matter: the reader keeps the file it
 * opened. The caller owns the struct; its fields are read-only.
 *
 *   remat_checkpoint_reader rd;  remat_config cfg;
 *   if (remat_checkpoint_reader_open(&rd, path, &cfg, &err)) ...  // nothing to free
 *   float *w = malloc(remat_param_count(&cfg) * sizeof *w);
 *   int rc = remat_checkpoint_read_params(&rd, NULL, w, &err);
 *   remat_checkpoint_reader_free(&rd);
 */
typedef struct remat_checkpoint_reader {
  remat_config cfg;         /* the file's shape, once open */
  size_t size;              /* the file's size in bytes when opened */
  int fd;                   /* the open file; -1 when reading from memory */
  const unsigned char *mem; /* the bytes when reading from memory (tests, fuzzing) */
  char *path;               /* for messages, owned; NULL once closed */
  int is_open;              /* 1 from a successful open until close */
  int version;              /* REMAT_CKPT_VERSION or REMAT_CKPT_VERSION_BF16, once open;
                             * a llama2.c file's: REMAT_LLAMA2C_LEGACY or _V1 */
  int format;               /* remat_format, once open */
  int freq_cis;             /* a legacy llama2.c file: 1 when it holds the RoPE tables */
} remat_checkpoint_reader;

/* Opens a checkpoint of any format remat reads (llm.c's, llama2.c's legacy
 * or version 1: remat_checkpoint_detect) and validates its header: magic,
 * version 3 or 5 (llm.c) or 1 (llama2.c), the
 * shape (via remat_config_check), Vp >= V, and a file size of exactly
 * header + params (4 bytes each in version 3, 2 in version 5). cfg (may be NULL) receives the shape, as does rd->cfg. On failure
 * rd holds nothing (closing it is harmless). */
REMAT_API int remat_checkpoint_reader_open(remat_checkpoint_reader *rd, const char *path,
                                           remat_config *cfg, remat_error *err);
/* Reads the parameters into params, a buffer of remat_param_count(&rd->cfg)
 * floats (a version 5 file's bf16 values widened exactly). If expect is non-NULL the file's shape must equal it (REMAT_ESHAPE
 * names the first dimension that differs). The file's size is checked again
 * first: a file changed in place since open is REMAT_EIO. Non-finite values
 * are rejected (REMAT_ENUMERIC names the tensor and index); finite values
 * of any size load (see remat_params_overflow). */
REMAT_API int remat_checkpoint_read_params(remat_checkpoint_reader *rd, const remat_config *expect,
                                           float *params, remat_error *err);
/* Releases rd; safe on a zeroed, failed or already closed reader. */
REMAT_API void remat_checkpoint_reader_free(remat_checkpoint_reader *rd);

/* The header alone: open and close. */
REMAT_API int remat_checkpoint_read_config(const char *path, remat_config *cfg, remat_error *err);
/* Open, read the parameters, close. With expect NULL this writes as many
 * floats as the file holds, whatever the path names by now: pass expect, or
 * use a reader, when params was sized from an earlier look at the file. */
REMAT_API int remat_checkpoint_load(const char *path, const remat_config *expect, float *params,
                                    remat_error *err);
/* Writes cfg and remat_param_count(cfg) floats from params, atomically (see
 * the rules at the top). Non-finite values are refused. */
REMAT_API int remat_checkpoint_save(const char *path, const remat_config *cfg, const float *params,
                                    remat_error *err);
/* The same in a chosen version: REMAT_CKPT_VERSION (fp32, what
 * remat_checkpoint_save writes) or REMAT_CKPT_VERSION_BF16 (each parameter
 * rounded to the nearest bf16, ties to even); any other is REMAT_EINVAL. A
 * finite value that rounds to a bf16 infinity (3.39e38 or more in
 * magnitude) is refused with REMAT_ENUMERIC. */
REMAT_API int remat_checkpoint_save_as(const char *path, const remat_config *cfg,
                                       const float *params, int version, remat_error *err);

/* The same in a chosen format: REMAT_FORMAT_AUTO is the family's own
 * (llm.c for GPT-2, llama2.c version 1 for a Llama). version is llm.c's (0
 * or REMAT_CKPT_VERSION: fp32; REMAT_CKPT_VERSION_BF16); llama2.c's
 * formats hold fp32 only (version 0 or REMAT_CKPT_VERSION). A format that
 * cannot hold cfg's family is refused (remat_checkpoint_format_check).
 * remat_checkpoint_save and _save_as write a Llama as llama2.c's version
 * 1 (fp32; bf16 is refused). */
REMAT_API int remat_checkpoint_save_format(const char *path, const remat_config *cfg,
                                           const float *params, int format, int version,
                                           remat_error *err);
/* 0 when a model of cfg's family can be saved in format and version (as
 * above); REMAT_EINVAL saying what to use otherwise: llm.c's format holds
 * GPT-2 only, llama2.c's a Llama only, in fp32. For a front end to check
 * before training. */
REMAT_API int remat_checkpoint_format_check(const remat_config *cfg, int format, int version,
                                            remat_error *err);
/* Which format the file at path is, by its first bytes: llm.c's magic
 * 20240326, llama2.c's "ak42", or else a llama2.c legacy file when its
 * seven ints make a valid shape and the file's size is exactly what they
 * imply (with or without the RoPE tables). Anything else is REMAT_EFORMAT
 * saying what was expected. The header is checked no further than that:
 * remat_checkpoint_reader_open checks the rest. */
REMAT_API int remat_checkpoint_detect(const char *path, int *format, remat_error *err);
/* Writes a Llama in llama2.c's format: version REMAT_LLAMA2C_LEGACY (the
 * RoPE tables included, computed with cfg's theta as export.py does) or
 * REMAT_LLAMA2C_V1, atomically (the rules at the top). The vocabulary is
 * written unpadded (a Llama's Vp is V); the rotary base is not stored.
 * Non-finite values are refused. */
REMAT_API int remat_llama2c_save(const char *path, const remat_config *cfg, const float *params,
                                 int version, remat_error *err);
/* llama2.c's RoPE tables for cfg (legacy files hold them): cos and sin of
 * t * theta^(-2i/hs) for t < maxT, i < hs/2 (hs = C/NH), each (maxT, hs/2)
 * floats, computed in fp32 step by step as export.py's
 * precompute_freqs_cis does. */
REMAT_API void remat_llama2c_freq_cis(const remat_config *cfg, float *cos_t, float *sin_t);

/* Weights beyond this magnitude overflow float arithmetic: the square of
 * 1e18 is 1e36, and a LayerNorm or gradient norm sums hundreds of such
 * squares past FLT_MAX (3.4e38). */
#define REMAT_PARAM_OVERFLOW_LIMIT 1e18f
/* 0 when every parameter is finite and at most REMAT_PARAM_OVERFLOW_LIMIT in
 * magnitude; otherwise REMAT_ENUMERIC naming the first that is not (tensor,
 * index, value). Training on such weights fails whatever the learning rate:
 * the caller can say "the weights overflow" rather than "lower the rate". */
REMAT_API int remat_params_overflow(const remat_config *cfg, const float *params, remat_error *err);

/* ---------------------------------------------------------------- outputs */

/* Checks now that a save to path can succeed later, under the rules above:
 * path is a new name or a regular file (symlinks followed), and its
 * directory lets this process create a file (a unique temporary is created
 * and removed; nothing else is touched). Call it before hours of training. */
REMAT_API int remat_output_check(const char *path, remat_error *err);
/* The directory variant, for an output like a checkpoint directory: dir is
 * created if missing (its parent must exist), must be a directory (symlinks
 * followed), and a file must be creatable in it (a unique one is created
 * and removed). Call it before the first step. */
REMAT_API int remat_output_dir_check(const char *dir, remat_error *err);
/* Saves n bytes to path atomically under the rules at the top of this
 * header (what names the file in messages: "plan"): a new temporary beside
 * the target, renamed over it when complete; symlinks written through;
 * anything but a regular file refused; the temporary's name kept within
 * the file system's name limit however long the target's. */
REMAT_API int remat_save_bytes(const char *path, const char *what, const void *bytes, size_t n,
                               remat_error *err);
/* Opens path for writing in place, for outputs appended as they go (a log,
 * a trace): refused like a save when path is, or links to, anything but a
 * regular file (never opening a FIFO or device, so nothing blocks);
 * created (0666 less the umask) or truncated. It holds an exclusive
 * advisory lock (flock) on the file until closed: a path another process
 * writes so is refused, untouched, rather than written by two at once.
 * Close with fclose. NULL on failure, with err set. */
REMAT_API FILE *remat_output_stream_open(const char *path, const char *what, remat_error *err);
/* The same, but what path holds stays: the stream is positioned at its end
 * (a resumed run's log goes on where its run left it). */
REMAT_API FILE *remat_output_stream_append(const char *path, const char *what, remat_error *err);
/* A file size limit (ulimit -f) kills a process with SIGXFSZ at the write
 * that crosses it, before the save can remove its temporary or say why.
 * This sets SIGXFSZ to be ignored (unless the program handles it already),
 * so that write fails with EFBIG and the save reports it and cleans up.
 * Process-wide: a front end calls it once at start. */
REMAT_API void remat_ignore_sigxfsz(void);
/* For a signal handler that ends the process during a save: removes the
 * temporaries of the saves in progress (TARGET.tmp.XXXXXX, written before
 * the rename that completes a save), so none is left behind, and writes
 * their names into names (cap bytes, "; " between them; may be NULL).
 * Returns how many it removed. Async-signal-safe: it calls only unlink. */
REMAT_API int remat_output_remove_temporaries(char *names, size_t cap);

/* The size and CRC32C (remat_crc32c) of the whole file at path: what
 * identifies a run's data whatever its path. what names the file in a
 * failure to open it ("token shard"), label in a failure to read it. */
REMAT_API int remat_file_checksum(const char *path, const char *what, const char *label,
                                  uint64_t *size, uint32_t *crc, remat_error *err);
/* 1 when a and b name the same file: for existing files the same device and
 * inode (hard links and symlinks included); when neither exists yet, the
 * same file name once symlinks are followed and the directory's real path is
 * taken. 0 otherwise, also when only one exists. Use it to refuse an output
 * that names one of the inputs. */
REMAT_API int remat_same_file(const char *a, const char *b);

/* ---------------------------------------------------------- training state */

/* What a run needs besides the weights to go on exactly where it stopped:
 * AdamW's m and v (this rank's moment buffers as laid out: num_params floats
 * each, a replica's shards under ZeRO 1 to 3), the step, the loader's position,
 * and the settings and shapes a resumed run must share. Doubles are kept as
 * their bits. */
#define REMAT_STATE_FIELDS 64
typedef struct remat_state_header {
  int64_t step, num_params;
  int64_t rank, ranks, first_block, num_blocks, has_embedding, has_head; /* the stage */
  int64_t L, C, NH, V, maxT, B, T, grad_accum, steps, warmup, cosine;
  uint64_t seed, lr_bits, dropout_bits, wd_bits, clip_bits;
  int64_t shuffle;
  int64_t loader_epoch, loader_cursor;
  uint64_t loader_rng;
  int64_t data_tokens; /* tokens in the training split */
  int64_t replicas, zero; /* data parallelism */
  /* What binds the state to its checkpoint (version 2; a version 1 state
   * loads with binds 0): REMAT_STATE_BINDS_* bits saying which of the two
   * after it were recorded. */
  int64_t binds;
  int64_t precision;  /* remat_precision of the run */
  uint64_t model_crc; /* CRC32C of the model.bin written at the same step */
} remat_state_header;
#define REMAT_STATE_BINDS_PRECISION 1
#define REMAT_STATE_BINDS_MODEL 2

/* Writes h, m and v (h->num_params floats each) with a checksum, atomically. */
REMAT_API int remat_state_save(const char *path, const remat_state_header *h, const float *m,
                               const float *v, remat_error *err);
/* Reads a state whose num_params must equal num_params; checks its size and
 * checksum. */
REMAT_API int remat_state_load(const char *path, remat_state_header *h, float *m, float *v,
                               size_t num_params, remat_error *err);
/* The same with the moments in pieces: m[i] and v[i] of n[i] floats each,
 * i < parts (n summing to h->num_params), stored as if one after another
 * (the file is the one remat_state_save writes for their concatenation). */
REMAT_API int remat_state_save_parts(const char *path, const remat_state_header *h, int parts,
                                     const float *const *m, const float *const *v,
                                     const size_t *n, remat_error *err);
REMAT_API int remat_state_load_parts(const char *path, remat_state_header *h, int parts,
                                     float *const *m, float *const *v, const size_t *n,
                                     remat_error *err);
/* The header alone. */
REMAT_API int remat_state_peek(const char *path, remat_state_header *h, remat_error *err);
/* Which run a state belongs to: its seed and a digest of every setting a
 * resumed run must share (ranks, replicas, ZeRO stage, shape, batch,
 * sequence, micro-batches, steps, schedule, learning rate, dropout, weight
 * decay, clipping, data order, data size); not the step, the loader's
 * position or the rank's stage. */
typedef struct remat_run_id {
  uint64_t seed;
  uint64_t settings; /* FNV-1a over the settings' 64-bit words */
} remat_run_id;
REMAT_API void remat_state_run_id(const remat_state_header *h, remat_run_id *id);

/* ------------------------------------------------- checkpoint directories */

/* DIR/step_NNNNNNNN/ holds model.bin (the weights, llm.c format), one
 * training state per rank (state.bin for one process, state_rank_R.bin for
 * R = 0 .. ranks-1) and DONE, written last. DONE is a manifest: the step,
 * the run identity, and every file with its size and CRC32C (remat_crc32c)
 * over its whole content, closed by a CRC of DONE itself.
 *
 * Writing a checkpoint (every rank, then one rank):
 *   remat_checkpoint_dir_make(dir, step, &err);          // removes an old DONE
 *   remat_checkpoint_save(".../model.bin", ...);          // rank 0
 *   remat_trainer_save_state(tr, ".../state_rank_R.bin", R, ranks, &err); // each rank
 *   ... every rank's save has returned (a barrier, or an agreement) ...
 *   remat_checkpoint_seal(".../step_NNNNNNNN", step, &run, &err);  // one rank, last
 * Resuming:
 *   remat_checkpoint_find(dir, &info, skipped, sizeof skipped, &err);
 *   // info.step is the newest step that verifies; info.skipped > 0 says
 *   // newer ones did not, and skipped says why: print "fell back ..."
 *   // or, for a step directory named by the user:
 *   remat_checkpoint_verify(".../step_NNNNNNNN", -1, &info, &err);
 * then load model.bin and the state (remat_trainer_load_state verifies the
 * directory again when it holds a DONE). */
typedef struct remat_checkpoint_info {
  int64_t step;     /* the checkpoint's step */
  remat_run_id run; /* the run DONE names */
  int64_t ranks;    /* state files: 1 (state.bin) or R (state_rank_0 .. R-1) */
  int verified;     /* 1: every file checked against DONE; 0: an old DONE
                     * ("done", written before DONE listed files), accepted
                     * unchecked: the caller should warn */
  int skipped;      /* remat_checkpoint_find: newer checkpoints with DONE that
                     * failed verification (0 when the newest verified) */
} remat_checkpoint_info;

/* Writes step_dir/DONE atomically: lists model.bin, the state files and
 * the run's settings (a file `settings`, when present: remat_job_saved)
 * there with their sizes and CRC32Cs (read back from disk), with the step
 * and run. Checks first that the files are one checkpoint: model.bin and
 * either state.bin or state_rank_0..R-1.bin, each state holding this step,
 * this run and its own rank of R. step < 0 takes the states' step; run NULL
 * takes the run of the first state (then all must share it). Call it once,
 * after every rank's files are written. */
REMAT_API int remat_checkpoint_seal(const char *step_dir, int64_t step, const remat_run_id *run,
                                    remat_error *err);
/* Checks step_dir against its DONE: DONE's own CRC; each listed file
 * present, of the listed size and CRC32C; model.bin and one state per rank
 * listed; no model.bin or state file there unlisted; each state's header of
 * DONE's step and run and its own rank. step >= 0 must also be DONE's step.
 * A mismatch is REMAT_EFORMAT naming the file and what differs ("model.bin
 * checksum differs: ..."), REMAT_EIO for a file that cannot be read. An old
 * one-line DONE passes with info->verified = 0. info may be NULL. */
REMAT_API int remat_checkpoint_verify(const char *step_dir, int64_t step,
                                        remat_checkpoint_info *info, remat_error *err);
/* The newest DIR/step_N that verifies. Directories without DONE are never
 * complete and are passed over silently; each newer one with DONE that
 * fails is counted in info->skipped and described in skipped (cap bytes,
 * may be NULL): "step_00000012: model.bin checksum differs: ...; step_...".
 * None at all: REMAT_EINVAL "no complete checkpoint"; none verifies:
 * REMAT_EFORMAT with the newest one's reason. */
REMAT_API int remat_checkpoint_find(const char *dir, remat_checkpoint_info *info, char *skipped,
                                    size_t cap, remat_error *err);
/* The step of a step directory's path ("runs/step_00000004/" -> 4; trailing
 * slashes allowed); REMAT_EINVAL when the last name is not step_N. */
REMAT_API int remat_checkpoint_step_of(const char *step_dir, int64_t *step);
/* Checkpoint directories: DIR/step_NNNNNNNN/ with model.bin, state.bin (one
 * process) or state_rank_R.bin (one per rank), and DONE written last
 * (remat_checkpoint_seal above: a manifest with every file's size
 * and checksum). dir_path writes DIR/step_NNNNNNNN[/file] into out (-1 if
 * it does not fit); dir_make creates it and removes the DONE, model.bin
 * and state files of an earlier attempt (call it before any rank writes
 * there); dir_latest finds the newest step that verifies
 * (remat_checkpoint_find, which also says what it passed over). */
REMAT_API int remat_checkpoint_dir_path(char *out, size_t cap, const char *dir, int64_t step,
                                        const char *file);
REMAT_API int remat_checkpoint_dir_make(const char *dir, int64_t step, remat_error *err);
REMAT_API int remat_checkpoint_dir_latest(const char *dir, int64_t *step, remat_error *err);
/* Before a run's first step: the step directories it will write under dir
 * (after step `from`, every `every` steps up to `to`, and `to`) can be made
 * there: no file or unwritable directory stands where one goes, and the
 * longest path fits. So an obstacle is found at the start, not after the
 * steps before it. dir itself must exist (remat_output_dir_check). */
REMAT_API int remat_checkpoint_dir_check(const char *dir, int64_t from, int64_t to,
                                         int64_t every, remat_error *err);
/* After step `upto` is sealed: of the sealed step directories under dir
 * (those with DONE) at step upto or before, all but the newest `keep` are
 * removed (DONE first, so a directory cut short is never taken for a
 * checkpoint; then remat's files; then the directory when nothing else is
 * left in it). Newer ones (of an earlier attempt the run will write over)
 * stay. keep <= 0 keeps all. *removed (may be NULL): how many went. */
REMAT_API int remat_checkpoint_dir_prune(const char *dir, int64_t upto, int64_t keep,
                                         int64_t *removed, remat_error *err);
/* How many sealed step directories (with DONE, not verified) dir holds,
 * and the newest one's step (0 and 0 when none, or dir does not exist). */
REMAT_API int remat_checkpoint_dir_sealed(const char *dir, int64_t *count, int64_t *newest,
                                          remat_error *err);
/* Removes every step directory under dir, sealed or not (DONE first, then
 * remat's files, then the directory when nothing else is left in it), so a
 * new run leaves nothing of another one there. *removed (may be NULL): how
 * many. */
REMAT_API int remat_checkpoint_dir_remove_all(const char *dir, int64_t *removed,
                                              remat_error *err);
/* A run's hold on its checkpoint directory, from before its first step to
 * its end, so a second run given the same directory is refused rather
 * than sealing checkpoints of two runs' files: an exclusive flock on the
 * file dir/.remat-lock (created; it holds the holder's process id). A lock
 * held elsewhere is REMAT_EIO saying so (with that process id) and what to
 * do. *fd receives the lock (-1 on failure); unlock releases it. */
REMAT_API int remat_checkpoint_dir_lock(const char *dir, int *fd, remat_error *err);
REMAT_API void remat_checkpoint_dir_unlock(int fd);
/* Deprecated: remat_checkpoint_seal. A path named DONE in a step_N
 * directory seals that directory (step from its name, run from its state
 * files); any other path gets a one-line marker, atomically. */
REMAT_API int remat_write_marker(const char *path, remat_error *err);

/* ------------------------------------------------------------ shards */

/* The token shards a run reads, as remat train's --data names them: one
 * path; or a comma-separated list of paths and glob patterns (llm.c's -i:
 * "data/fineweb_train_*.bin"), the items in their order and each
 * pattern's matches in name order. A path that exists is one shard, commas
 * and all. A pattern that matches nothing is refused, naming it. */
typedef struct remat_shards {
  char **paths; /* (n) owned */
  int64_t n;
} remat_shards;
REMAT_API int remat_shards_find(remat_shards *s, const char *spec, remat_error *err);
REMAT_API void remat_shards_free(remat_shards *s);
/* The size and CRC32C of the shards' bytes one after another: what
 * identifies them whatever their paths (one shard: remat_file_checksum's
 * figures). */
REMAT_API int remat_shards_checksum(const remat_shards *s, uint64_t *bytes, uint32_t *crc,
                                    remat_error *err);
/* Their tokens in one stream, one shard after another (each checked as
 * remat_tokens_load checks one; a window of the loader may run from one
 * shard's end into the next one's start, as it runs from one document into
 * the next). */
REMAT_API int remat_tokens_load_shards(remat_tokens *t, const remat_shards *s, remat_error *err);
/* spec with each item's directory made absolute (realpath), patterns kept:
 * what a checkpoint saves, so that a resume from another directory finds
 * the same files. 0, or -1 (spec copied as is, cut to cap) when a
 * directory does not resolve or out (cap bytes) is too small. */
REMAT_API int remat_shards_resolve(const char *spec, char *out, size_t cap);

/* --------------------------------------------------------- default corpus */

/* The seed remat_corpus_tokens uses, so every run trains on the same text. */
#define REMAT_CORPUS_SEED 20240601u
/* Default size of the embedded corpus in bytes. */
#define REMAT_CORPUS_BYTES ((size_t)1 << 20)

/* Writes English-like text about a small made-up world into buf: printable
 * ASCII, a few sentences per line and a blank line
 * between days, deterministic for a given seed. Stops at the
 * last whole line that fits; returns the number of bytes written (<= cap, not
 * NUL-terminated). */
REMAT_API size_t remat_corpus_generate(char *buf, size_t cap, uint64_t seed);
/* The default corpus of about nbytes (0: REMAT_CORPUS_BYTES) as byte tokens. */
REMAT_API int remat_corpus_tokens(remat_tokens *t, size_t nbytes, remat_error *err);

/* ----------------------------------------------------------------- loader */

enum { REMAT_SPLIT_TRAIN = 0, REMAT_SPLIT_VAL = 1 };

/* Serves (B, T) inputs and (B, T) targets (the inputs shifted by one) from a
 * split of a token stream. The split is cut into W windows of T+1 tokens with
 * stride T; each batch row takes the next window in order. Sequential: the
 * windows start at 0, T, 2T, ... in turn. Shuffled: every epoch draws a new
 * offset in [0, T) for the window starts and a new permutation of the windows,
 * both from the seed, so a run replays exactly. The last val_frac of the tokens form
 * the validation split, the rest the training split; no window crosses the
 * boundary. The loader borrows t: t must outlive it. */
typedef struct remat_loader remat_loader; /* opaque */

/* split is REMAT_SPLIT_TRAIN or REMAT_SPLIT_VAL; val_frac in [0, 1). Fails if
 * the split has fewer than T+1 tokens, saying how many are needed; with
 * fewer than B*T+1 it succeeds and remat_loader_windows tells. */
REMAT_API int remat_loader_create(remat_loader **out, const remat_tokens *t, int64_t B,
                                  int64_t T, int split, double val_frac, int shuffle,
                                  uint64_t seed, remat_error *err);
REMAT_API void remat_loader_destroy(remat_loader *L);
/* Distinct windows of T+1 tokens the split offers: (n - 1) / T. Below B the
 * split has fewer than B*T+1 tokens and every batch serves some rows more
 * than once (a shuffled epoch may offer one window fewer, at an offset):
 * training still runs, but the caller should say so. */
REMAT_API int64_t remat_loader_windows(const remat_loader *L);
/* Fills inputs (B, T) and targets (B, T); either may be NULL (a pipeline
 * stage that needs only one of them), the loader advances all the same.
 * Never allocates. */
REMAT_API void remat_loader_next(remat_loader *L, int32_t *inputs, int32_t *targets);
/* Where the loader is, to resume from exactly there: seek draws the
 * epoch's offset and order again and moves to the same window. */
typedef struct remat_loader_pos {
  int64_t epoch, cursor;
  uint64_t epoch_rng;
} remat_loader_pos;
REMAT_API void remat_loader_tell(const remat_loader *L, remat_loader_pos *pos);
REMAT_API int remat_loader_seek(remat_loader *L, const remat_loader_pos *pos, remat_error *err);
/* Back to the first batch of epoch 0: the same sequence replays. */
REMAT_API void remat_loader_reset(remat_loader *L);

#ifdef __cplusplus
}
#endif
#endif /* REMAT_IO_H */
