/* io_internal.h: what src/io's files share and what the fuzz targets call.
 *
 * Saving (output.c): every file the library writes goes through a wfile. It
 * is written into a private temporary next to its destination and renamed
 * over it only when complete and synced; see remat/io.h for the rules.
 *
 * Reading from memory (format.c): the file readers parse through one source
 * that is either an open file or a byte buffer, so the from-memory entry
 * points below run exactly the code the file readers run past the open.
 * `name` stands in for the path in messages. */
#ifndef REMAT_IO_INTERNAL_H
#define REMAT_IO_INTERNAL_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/io.h"

/* ------------------------------------------------------------- writing */

/* A file being saved. Between open and commit, tmp exists next to target and
 * nothing else on disk has changed. */
typedef struct remat__wfile {
  int fd;           /* the temporary, open for writing; -1 once closed */
  int dirfd;        /* target's directory, for the lock and its fsync; -1 if unopenable */
  char *tmp;        /* the temporary's name, owned */
  char *target;     /* the name renamed over: path with its symlinks followed, owned */
  const char *path; /* as the caller gave it, for messages */
  const char *what; /* "checkpoint", "token shard" */
} remat__wfile;

/* Refuses a path that exists and is not a regular file (or a symlink to one),
 * then creates the temporary. `what` names the kind of file in messages. */
int remat__wfile_open(remat__wfile *w, const char *path, const char *what, remat_error *err);
/* Appends bytes; a short or failed write is REMAT_EIO. */
int remat__wfile_write(remat__wfile *w, const void *buf, size_t bytes, remat_error *err);
/* Appends n floats, little endian whatever the host. */
int remat__wfile_write_f32(remat__wfile *w, const float *v, size_t n, remat_error *err);
/* fsync, close, lock the directory, rename over target, fsync the directory.
 * On failure the temporary is removed and target is as it was. */
int remat__wfile_commit(remat__wfile *w, remat_error *err);
/* Removes the temporary; target is left as it was. Safe after a failed
 * open or commit. */
void remat__wfile_abort(remat__wfile *w);

/* -------------------------------------------------- reading from memory */

int remat__tokens_load_mem(remat_tokens *t, const void *bytes, size_t size, const char *name,
                           remat_error *err);
int remat__tokens_from_text_mem(remat_tokens *t, const void *bytes, size_t size,
                                const char *name, remat_error *err);
/* A checkpoint reader over bytes, which must outlive it. */
int remat__checkpoint_open_mem(remat_checkpoint_reader *rd, const void *bytes, size_t size,
                               const char *name, remat_config *cfg, remat_error *err);

/* ------------------------------------------------- checkpoint formats */

/* count floats of the flat parameters from index first, stored from byte
 * at of a file. */
typedef struct remat__span {
  size_t at, first, count;
} remat__span;
/* Which format (remat_format) a checkpoint is from its first n bytes
 * (head: min(size, REMAT_HEADER_BYTES) of them) and its size; REMAT_EFORMAT
 * saying what was expected when none (remat_checkpoint_detect's rules). */
int remat__checkpoint_format(const uint8_t *head, size_t n, size_t size, const char *path,
                             int *format, remat_error *err);
/* A llama2.c file's header (format REMAT_FORMAT_LLAMA2C_LEGACY or _V1):
 * its shape, its version and, for a legacy file, whether it holds the RoPE
 * tables; the file's size must be exactly what the header implies. */
int remat__llama2c_header(const uint8_t *head, size_t n, size_t size, const char *path,
                          int format, remat_config *cfg, int *version, int *freq_cis,
                          remat_error *err);
/* Where a llama2.c file of shape cfg holds the parameters, in file order;
 * returns the number of spans. */
int remat__llama2c_spans(const remat_config *cfg, int format, int freq_cis,
                         remat__span spans[REMAT_P_COUNT]);
/* remat_llama2c_save in two steps around format.c's check that every
 * parameter is finite: whether cfg and version can be saved so (path names
 * the file in messages), then the file, atomically. */
int remat__llama2c_save_check(const remat_config *cfg, int version, const char *path,
                              remat_error *err);
int remat__llama2c_write(const char *path, const remat_config *cfg, const float *params,
                         int version, remat_error *err);

/* A state file's header from bytes: the checks remat_state_peek makes. */
int remat__state_peek_mem(const void *bytes, size_t size, const char *name,
                          remat_state_header *h, remat_error *err);

/* ---------------------------------------------- checkpoint manifests */

/* DONE of a checkpoint directory, parsed (ckptdir.c has the format). */
#define REMAT_MANIFEST_NAME_MAX 63
#define REMAT_MANIFEST_NAME_FMT "63"
#define REMAT_MANIFEST_MAX_FILES 4096
#define REMAT_MANIFEST_MAX_BYTES ((size_t)1 << 20)
typedef struct remat__manifest_file {
  char name[REMAT_MANIFEST_NAME_MAX + 1];
  uint64_t size;
  uint32_t crc; /* CRC32C of the whole file */
} remat__manifest_file;
typedef struct remat__manifest {
  int64_t step;
  remat_run_id run;
  int legacy; /* the old one-line "done" marker: nothing listed */
  remat__manifest_file *files;
  size_t nfiles, cap;
} remat__manifest;
/* Parses n bytes of a DONE; name stands for the path in messages. */
int remat__manifest_parse(remat__manifest *m, const void *bytes, size_t n, const char *name,
                          remat_error *err);
void remat__manifest_free(remat__manifest *m);
/* Removes step_dir's DONE, then its model.bin and state files: what
 * remat_checkpoint_dir_make does before a checkpoint is written again. */
int remat__checkpoint_dir_clear(const char *step_dir, remat_error *err);
/* The step of a step directory's name step_NNN... (len bytes), or -1. */
int64_t remat__step_name(const char *name, size_t len);
/* dir opened for listing (closedir it); what names it in messages. */
int remat__open_listing(const char *dir, const char *what, DIR **out, remat_error *err);

#endif
