/* format.c: llm.c's on-disk formats. Token shards and GPT-2 checkpoints
 * (fp32, version 3, and bf16, version 5: read as fp32, each value widened
 * exactly; written either way) are read whole and validated against their
 * headers before anything is trusted. The checkpoint reader tells the
 * format by the first bytes and reads llama2.c's files too, where
 * llama2c.c says the tensors lie. Saves go through output.c's wfile (a
 * private temporary renamed into place), so a crash mid-save leaves the
 * previous file (or none), never a truncated one. Plain text files become
 * byte tokens. Everything on disk is little endian. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "config/family.h"
#include "io/io_internal.h"

/* Floats and ints are moved as raw bytes when the host is little endian. */
static int host_is_le(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

static int32_t get_le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

static void put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

static void swap4(void *buf, size_t n) {
  uint8_t *p = buf;
  for (size_t i = 0; i < n; i++, p += 4) {
    uint8_t a = p[0], b = p[1];
    p[0] = p[3];
    p[1] = p[2];
    p[2] = b;
    p[3] = a;
  }
}

/* ------------------------------------------------------------- reading */

/* What a reader parses: an open file read with pread, or bytes in memory
 * (remat__*_mem). Either way every read is bounds-checked against size. */
typedef struct {
  int fd;             /* >= 0: a file */
  const uint8_t *mem; /* else these bytes */
  size_t size;        /* the file's size when opened, or mem's */
  const char *path;   /* for messages */
} source;

static source mem_source(const void *bytes, size_t size, const char *name) {
  return (source){.fd = -1, .mem = bytes, .size = bytes ? size : 0, .path = name ? name : ""};
}

/* Opens path for reading if it is a regular file. `what` names the expected
 * kind of file in messages ("token shard"). remat__open refuses anything
 * else by name before opening it (a FIFO would block) and again on the open
 * descriptor, so a file swapped in between is caught. */
static int open_source(const char *path, const char *what, source *s, remat_error *err) {
  *s = (source){.fd = -1, .path = path ? path : ""};
  struct stat st;
  int fd, rc = remat__open(path, O_RDONLY, REMAT__OPEN_FILE, what, &fd, &st, err);
  if (rc) return rc;
  s->fd = fd;
  s->size = (size_t)st.st_size;
  return 0;
}

static void close_source(source *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

/* Reads bytes at offset off. Callers have checked the size already; a short
 * read means the file shrank since. */
static int src_read(const source *s, size_t off, void *buf, size_t bytes, remat_error *err) {
  if (s->fd < 0) {
    if (off > s->size || bytes > s->size - off)
      return remat__errorf(err, REMAT_EFORMAT, "'%s' ends at byte %zu, before byte %zu", s->path,
                           s->size, off + bytes);
    if (bytes) memcpy(buf, s->mem + off, bytes);
    return 0;
  }
  uint8_t *p = buf;
  while (bytes > 0) {
    size_t chunk = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
    ssize_t n = pread(s->fd, p, chunk, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return remat__errorf(err, REMAT_EIO,
                           "read of '%s' failed at byte %zu: %s; the file changed while being "
                           "read, read it again once it is complete",
                           s->path, off, n < 0 ? strerror(errno) : "unexpected end of file");
    p += n;
    off += (size_t)n;
    bytes -= (size_t)n;
  }
  return 0;
}

/* Reads the 256-int32 header into hdr (host order). */
static int read_header(const source *s, const char *what, int32_t hdr[REMAT_HEADER_INTS],
                       remat_error *err) {
  if (s->size < REMAT_HEADER_BYTES)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s '%s' is truncated: it has %zu bytes but the header alone needs %d; "
                         "re-create the file",
                         what, s->path, s->size, REMAT_HEADER_BYTES);
  uint8_t raw[REMAT_HEADER_BYTES];
  int rc = src_read(s, 0, raw, sizeof raw, err);
  if (rc) return rc;
  for (int i = 0; i < REMAT_HEADER_INTS; i++) hdr[i] = get_le32(raw + 4 * i);
  return 0;
}

/* The file must hold the header plus exactly `body` bytes. */
static int check_size(size_t size, size_t body, const char *path, const char *what,
                      const char *unit, long long count, remat_error *err) {
  size_t expect = REMAT_HEADER_BYTES + body;
  if (size < expect)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s '%s' is truncated: its header announces %lld %s (%zu bytes in all) "
                         "but the file has %zu bytes; re-create or re-download it",
                         what, path, count, unit, expect, size);
  if (size > expect)
    return remat__errorf(err, REMAT_EFORMAT,
                         "%s '%s' has %zu trailing bytes: its header announces %lld %s (%zu bytes "
                         "in all) but the file has %zu bytes; the file is corrupt or not a %s",
                         what, path, size - expect, count, unit, expect, size, what);
  return 0;
}

/* ------------------------------------------------------------- writing */

static int write_header(remat__wfile *w, const int32_t hdr[REMAT_HEADER_INTS], remat_error *err) {
  uint8_t raw[REMAT_HEADER_BYTES];
  for (int i = 0; i < REMAT_HEADER_INTS; i++) put_le32(raw + 4 * i, (uint32_t)hdr[i]);
  return remat__wfile_write(w, raw, sizeof raw, err);
}

/* ---------------------------------------------------------- token shards */

void remat_tokens_free(remat_tokens *t) {
  if (!t) return;
  remat__free(t->tok);
  t->tok = NULL;
  t->n = 0;
  t->max_id = 0;
}

static int alloc_tokens(remat_tokens *t, int64_t n, const char *path, remat_error *err) {
  size_t bytes;
  if (n < 0 || remat__mul_size((size_t)n, sizeof(int32_t), &bytes) || !(t->tok = remat__malloc(bytes)))
    return remat__errorf(err, REMAT_ENOMEM, "out of memory holding %lld tokens of '%s'",
                         (long long)n, path);
  t->n = n;
  t->max_id = 0;
  return 0;
}

static void find_max(remat_tokens *t) {
  int32_t m = 0;
  for (int64_t i = 0; i < t->n; i++)
    if (t->tok[i] > m) m = t->tok[i];
  t->max_id = m;
}

/* An llm.c shard from s: header, exact size, then uint16 ids. */
static int parse_shard(remat_tokens *t, const source *s, remat_error *err) {
  static const char what[] = "token shard";
  const char *path = s->path;
  *t = (remat_tokens){0};
  int32_t hdr[REMAT_HEADER_INTS];
  int rc = read_header(s, what, hdr, err);
  if (rc) return rc;
  if (hdr[0] != REMAT_SHARD_MAGIC)
    return remat__errorf(err, REMAT_EFORMAT,
                         "'%s' is not an llm.c token shard: magic number is %d, expected %d; "
                         "give a .bin file written by llm.c's data scripts or remat",
                         path, hdr[0], REMAT_SHARD_MAGIC);
  if (hdr[1] != REMAT_SHARD_VERSION)
    return remat__errorf(err, REMAT_EFORMAT,
                         "token shard '%s' has version %d; only version %d (uint16 tokens) is "
                         "supported",
                         path, hdr[1], REMAT_SHARD_VERSION);
  int64_t n = hdr[2];
  if (n < 0)
    return remat__errorf(err, REMAT_EFORMAT,
                         "token shard '%s' announces a negative token count %lld; the header "
                         "is corrupt",
                         path, (long long)n);
  if ((rc = check_size(s->size, (size_t)n * 2, path, what, "tokens", (long long)n, err)))
    return rc;
  if (n < 2)
    return remat__errorf(err, REMAT_EFORMAT,
                         "token shard '%s' holds %lld tokens; training needs at least 2 (an "
                         "input and its target)",
                         path, (long long)n);
  if ((rc = alloc_tokens(t, n, path, err))) return rc;
  /* uint16 little endian, converted in stack-sized chunks */
  uint8_t chunk[8192];
  for (int64_t done = 0; done < n;) {
    int64_t k = n - done < (int64_t)(sizeof chunk / 2) ? n - done : (int64_t)(sizeof chunk / 2);
    if ((rc = src_read(s, REMAT_HEADER_BYTES + (size_t)done * 2, chunk, (size_t)k * 2, err))) {
      remat_tokens_free(t);
      return rc;
    }
    for (int64_t i = 0; i < k; i++)
      t->tok[done + i] = (int32_t)((uint32_t)chunk[2 * i] | (uint32_t)chunk[2 * i + 1] << 8);
    done += k;
  }
  find_max(t);
  return 0;
}

int remat_tokens_load(remat_tokens *t, const char *path, remat_error *err) {
  *t = (remat_tokens){0};
  source s;
  int rc = open_source(path, "token shard", &s, err);
  if (rc) return rc;
  rc = parse_shard(t, &s, err);
  close_source(&s);
  return rc;
}

int remat__tokens_load_mem(remat_tokens *t, const void *bytes, size_t size, const char *name,
                           remat_error *err) {
  source s = mem_source(bytes, size, name);
  return parse_shard(t, &s, err);
}

int remat_tokens_save(const remat_tokens *t, const char *path, remat_error *err) {
  if (!t || !t->tok || t->n < 0 || t->n > INT32_MAX)
    return remat__errorf(err, REMAT_EINVAL,
                         "cannot save %lld tokens to '%s': a shard holds 0 to %d tokens",
                         t ? (long long)t->n : 0LL, path ? path : "", INT32_MAX);
  for (int64_t i = 0; i < t->n; i++)
    if (t->tok[i] < 0 || t->tok[i] > UINT16_MAX)
      return remat__errorf(err, REMAT_ERANGE,
                           "token %lld has id %d, which does not fit the shard format's uint16 "
                           "(0..65535); '%s' was not written",
                           (long long)i, t->tok[i], path ? path : "");
  remat__wfile w;
  int rc = remat__wfile_open(&w, path, "token shard", err);
  if (rc) return rc;
  int32_t hdr[REMAT_HEADER_INTS] = {REMAT_SHARD_MAGIC, REMAT_SHARD_VERSION, (int32_t)t->n};
  if ((rc = write_header(&w, hdr, err))) goto fail;
  uint8_t chunk[8192];
  for (int64_t done = 0; done < t->n;) {
    int64_t k = t->n - done < (int64_t)(sizeof chunk / 2) ? t->n - done
                                                          : (int64_t)(sizeof chunk / 2);
    for (int64_t i = 0; i < k; i++) {
      uint32_t v = (uint32_t)t->tok[done + i];
      chunk[2 * i] = (uint8_t)v;
      chunk[2 * i + 1] = (uint8_t)(v >> 8);
    }
    if ((rc = remat__wfile_write(&w, chunk, (size_t)k * 2, err))) goto fail;
    done += k;
  }
  return remat__wfile_commit(&w, err);

fail:
  remat__wfile_abort(&w);
  return rc;
}

int remat_tokens_check_vocab(const remat_tokens *t, int64_t V, remat_error *err) {
  for (int64_t i = 0; i < t->n; i++)
    if (t->tok[i] < 0 || t->tok[i] >= V)
      return remat__errorf(err, REMAT_ERANGE,
                           "token %lld has id %d but the model's vocabulary has V=%lld ids "
                           "(0..%lld); the data needs V >= %lld: use a model with a larger "
                           "vocabulary",
                           (long long)i, t->tok[i], (long long)V, (long long)(V - 1),
                           (long long)(t->max_id > t->tok[i] ? t->max_id : t->tok[i]) + 1);
  return 0;
}

/* Byte b of s becomes token b. */
static int parse_text(remat_tokens *t, const source *s, remat_error *err) {
  const char *path = s->path;
  size_t size = s->size;
  *t = (remat_tokens){0};
  if (size < 2)
    return remat__errorf(err, REMAT_EFORMAT,
                         "text file '%s' has %zu bytes; training needs at least 2 (an input and "
                         "its target)",
                         path, size);
  if (size > (size_t)INT64_MAX / 4)
    return remat__errorf(err, REMAT_ENOMEM, "text file '%s' is too large (%zu bytes)", path,
                         size);
  int rc = alloc_tokens(t, (int64_t)size, path, err);
  if (rc) return rc;
  uint8_t chunk[8192];
  for (size_t done = 0; done < size;) {
    size_t k = size - done < sizeof chunk ? size - done : sizeof chunk;
    if ((rc = src_read(s, done, chunk, k, err))) {
      remat_tokens_free(t);
      return rc;
    }
    for (size_t i = 0; i < k; i++) t->tok[done + i] = chunk[i];
    done += k;
  }
  find_max(t);
  return 0;
}

int remat_tokens_from_text(remat_tokens *t, const char *path, remat_error *err) {
  *t = (remat_tokens){0};
  source s;
  int rc = open_source(path, "text file", &s, err);
  if (rc) return rc;
  rc = parse_text(t, &s, err);
  close_source(&s);
  return rc;
}

int remat__tokens_from_text_mem(remat_tokens *t, const void *bytes, size_t size,
                                const char *name, remat_error *err) {
  source s = mem_source(bytes, size, name);
  return parse_text(t, &s, err);
}

/* ------------------------------------------------------------ checkpoints */

/* Tensor k's name in the config's family. */
static const char *tensor_name(const remat_config *cfg, int k) {
  remat__tensor t[REMAT_P_COUNT];
  remat__tensors(cfg, t);
  return t[k].name;
}

/* Which tensor flat parameter index i falls in, and where in it. */
static int locate(const remat_config *cfg, size_t i, size_t *off) {
  size_t sizes[REMAT_P_COUNT];
  remat_param_sizes(cfg, sizes);
  int k = 0;
  *off = i;
  while (k < REMAT_P_COUNT - 1 && *off >= sizes[k]) *off -= sizes[k++];
  return k;
}

/* Non-finite values mean a diverged run or a corrupt file; either way the
 * numbers must not be trained on or kept. */
static int check_finite(const remat_config *cfg, const float *p, const char *path,
                        const char *verb, remat_error *err) {
  size_t n = remat_param_count(cfg);
  for (size_t i = 0; i < n; i++) {
    if (isfinite(p[i])) continue;
    size_t off;
    int k = locate(cfg, i, &off);
    return remat__errorf(err, REMAT_ENUMERIC,
                         "parameter %zu (%s[%zu]) is %s; refusing to %s '%s': the run that made "
                         "these weights diverged, restart from an earlier checkpoint",
                         i, tensor_name(cfg, k), off, isnan(p[i]) ? "NaN" : "infinite", verb, path);
  }
  return 0;
}

int remat_params_overflow(const remat_config *cfg, const float *params, remat_error *err) {
  size_t n = remat_param_count(cfg);
  for (size_t i = 0; i < n; i++) {
    /* the negated test also catches NaN */
    if (!(fabsf(params[i]) <= REMAT_PARAM_OVERFLOW_LIMIT)) {
      size_t off;
      int k = locate(cfg, i, &off);
      return remat__errorf(err, REMAT_ENUMERIC,
                           "parameter %zu (%s[%zu]) is %g: weights beyond %g in magnitude "
                           "overflow float arithmetic (their squares and sums pass %g), so "
                           "training on them yields inf and NaN whatever the learning rate; "
                           "start from other weights",
                           i, tensor_name(cfg, k), off, (double)params[i],
                           (double)REMAT_PARAM_OVERFLOW_LIMIT, (double)FLT_MAX);
    }
  }
  return 0;
}

/* Bytes of one parameter in a checkpoint of this version. */
static size_t param_bytes(int version) {
  return version == REMAT_CKPT_VERSION_BF16 ? sizeof(uint16_t) : sizeof(float);
}

/* Validates the header in hdr and the file size; fills cfg and version. */
static int parse_ckpt_header(const int32_t hdr[REMAT_HEADER_INTS], size_t size, const char *path,
                             remat_config *cfg, int *version, remat_error *err) {
  static const char what[] = "checkpoint";
  if (hdr[0] != REMAT_CKPT_MAGIC)
    return remat__errorf(err, REMAT_EFORMAT,
                         "'%s' is not an llm.c GPT-2 checkpoint: magic number is %d, expected "
                         "%d; give a file written by llm.c or remat",
                         path, hdr[0], REMAT_CKPT_MAGIC);
  if (hdr[1] != REMAT_CKPT_VERSION && hdr[1] != REMAT_CKPT_VERSION_BF16)
    return remat__errorf(err, REMAT_EFORMAT,
                         "checkpoint '%s' has version %d; remat reads version %d (fp32) and %d "
                         "(bf16): export the model in one of them",
                         path, hdr[1], REMAT_CKPT_VERSION, REMAT_CKPT_VERSION_BF16);
  *version = hdr[1];
  *cfg = (remat_config){.max_seq_len = hdr[2], .vocab_size = hdr[3], .num_layers = hdr[4],
                        .num_heads = hdr[5], .channels = hdr[6], .padded_vocab_size = hdr[7]};
  remat_error sub = {0};
  if (remat_config_check(cfg, &sub))
    return remat__errorf(err, REMAT_EFORMAT, "checkpoint '%s' has a bad header: %s", path,
                         sub.msg);
  size_t nparams = remat_param_count(cfg), body;
  if (remat__mul_size(nparams, param_bytes(*version), &body) ||
      body > SIZE_MAX - REMAT_HEADER_BYTES)
    return remat__errorf(err, REMAT_EFORMAT, "checkpoint '%s' announces too many parameters",
                         path);
  const char *unit = *version == REMAT_CKPT_VERSION_BF16 ? "bf16 parameters" : "fp32 parameters";
  return check_size(size, body, path, what, unit, (long long)nparams, err);
}

/* The first dimension where the checkpoint differs from what was asked. */
static int compare_shape(const remat_config *have, const remat_config *want, const char *path,
                         remat_error *err) {
  const struct {
    const char *name;
    int64_t have, want;
  } dims[] = {{"family", have->family, want->family},
              {"L", have->num_layers, want->num_layers},
              {"C", have->channels, want->channels},
              {"NH", have->num_heads, want->num_heads},
              {"V", have->vocab_size, want->vocab_size},
              {"Vp", have->padded_vocab_size, want->padded_vocab_size},
              {"maxT", have->max_seq_len, want->max_seq_len},
              {"NKV", have->kv_heads, want->kv_heads},
              {"H", have->ffn_hidden, want->ffn_hidden},
              {"untied", have->untied, want->untied}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].have != dims[i].want)
      return remat__errorf(err, REMAT_ESHAPE,
                           "checkpoint '%s' has %s=%lld but the expected shape has %s=%lld",
                           path, dims[i].name, (long long)dims[i].have, dims[i].name,
                           (long long)dims[i].want);
  return 0;
}

/* The reader keeps its source's fields: an open file or bytes in memory. It
 * holds resources exactly when path is set. */
static source reader_source(const remat_checkpoint_reader *rd) {
  return (source){.fd = rd->fd, .mem = rd->mem, .size = rd->size, .path = rd->path};
}

/* Reads and validates the header of the source rd was set up with, in the
 * format its first bytes tell. */
static int reader_start(remat_checkpoint_reader *rd, remat_config *cfg, remat_error *err) {
  source s = reader_source(rd);
  uint8_t head[REMAT_HEADER_BYTES];
  size_t n = rd->size < sizeof head ? rd->size : sizeof head;
  int rc = src_read(&s, 0, head, n, err);
  if (!rc) rc = remat__checkpoint_format(head, n, rd->size, rd->path, &rd->format, err);
  if (!rc && rd->format == REMAT_FORMAT_LLMC) {
    int32_t hdr[REMAT_HEADER_INTS];
    rc = read_header(&s, "checkpoint", hdr, err);
    if (!rc) rc = parse_ckpt_header(hdr, rd->size, rd->path, &rd->cfg, &rd->version, err);
  } else if (!rc) {
    rc = remat__llama2c_header(head, n, rd->size, rd->path, rd->format, &rd->cfg, &rd->version,
                               &rd->freq_cis, err);
  }
  if (rc) {
    remat_checkpoint_reader_free(rd);
    return rc;
  }
  rd->is_open = 1;
  if (cfg) *cfg = rd->cfg;
  return 0;
}

static int reader_name(remat_checkpoint_reader *rd, const char *name, remat_error *err) {
  size_t len = strlen(name);
  rd->path = malloc(len + 1); /* plain: a name, not the job's planned bytes */
  if (!rd->path)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory naming checkpoint '%s'", name);
  memcpy(rd->path, name, len + 1);
  return 0;
}

int remat_checkpoint_reader_open(remat_checkpoint_reader *rd, const char *path, remat_config *cfg,
                                 remat_error *err) {
  *rd = (remat_checkpoint_reader){.fd = -1};
  source s;
  int rc = open_source(path, "checkpoint", &s, err);
  if (rc) return rc;
  if ((rc = reader_name(rd, path, err))) {
    close_source(&s);
    return rc;
  }
  rd->fd = s.fd;
  rd->size = s.size;
  return reader_start(rd, cfg, err);
}

int remat__checkpoint_open_mem(remat_checkpoint_reader *rd, const void *bytes, size_t size,
                               const char *name, remat_config *cfg, remat_error *err) {
  *rd = (remat_checkpoint_reader){.fd = -1, .mem = bytes, .size = bytes ? size : 0};
  int rc = reader_name(rd, name ? name : "", err);
  if (rc) return rc;
  return reader_start(rd, cfg, err);
}

/* n fp32 parameters after the header. */
static int read_f32(const source *s, size_t n, float *params, remat_error *err) {
  int rc = src_read(s, REMAT_HEADER_BYTES, params, n * sizeof(float), err);
  if (!rc && !host_is_le()) swap4(params, n);
  return rc;
}

/* A llama2.c file's parameters, tensor by tensor where the file holds them. */
static int read_llama2c(const source *s, const remat_checkpoint_reader *rd, float *params,
                        remat_error *err) {
  remat__span sp[REMAT_P_COUNT];
  int n = remat__llama2c_spans(&rd->cfg, rd->format, rd->freq_cis, sp);
  for (int i = 0; i < n; i++) {
    int rc = src_read(s, sp[i].at, params + sp[i].first, sp[i].count * sizeof(float), err);
    if (rc) return rc;
    if (!host_is_le()) swap4(params + sp[i].first, sp[i].count);
  }
  return 0;
}

/* n bf16 parameters (little endian) after the header, widened exactly, in
 * stack-sized chunks. */
static int read_bf16(const source *s, size_t n, float *params, remat_error *err) {
  uint8_t chunk[16384];
  const size_t per = sizeof chunk / 2;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < per ? n - done : per;
    int rc = src_read(s, REMAT_HEADER_BYTES + done * 2, chunk, k * 2, err);
    if (rc) return rc;
    for (size_t i = 0; i < k; i++)
      params[done + i] =
          remat__bf16_float((uint16_t)((uint32_t)chunk[2 * i] | (uint32_t)chunk[2 * i + 1] << 8));
    done += k;
  }
  return 0;
}

int remat_checkpoint_read_params(remat_checkpoint_reader *rd, const remat_config *expect,
                                 float *params, remat_error *err) {
  if (!rd || !rd->is_open)
    return remat__errorf(err, REMAT_EINVAL,
                         "the checkpoint reader is not open; call "
                         "remat_checkpoint_reader_open first");
  int rc;
  if (expect && (rc = compare_shape(&rd->cfg, expect, rd->path, err))) return rc;
  /* The descriptor holds the file that was opened even if its name now
   * points elsewhere; only a change in place (truncation, a write) shows. */
  struct stat st;
  if (rd->fd >= 0 && fstat(rd->fd, &st) != 0)
    return remat__errorf(err, REMAT_EIO, "cannot read checkpoint '%s': %s", rd->path,
                         strerror(errno));
  if (rd->fd >= 0 && (size_t)st.st_size != rd->size)
    return remat__errorf(err, REMAT_EIO,
                         "checkpoint '%s' changed size while being read (%zu bytes when opened, "
                         "%lld now): something is writing it in place; read it again once that "
                         "is done",
                         rd->path, rd->size, (long long)st.st_size);
  size_t n = remat_param_count(&rd->cfg);
  source s = reader_source(rd);
  rc = rd->format != REMAT_FORMAT_LLMC            ? read_llama2c(&s, rd, params, err)
       : rd->version == REMAT_CKPT_VERSION_BF16 ? read_bf16(&s, n, params, err)
                                                : read_f32(&s, n, params, err);
  return rc ? rc : check_finite(&rd->cfg, params, rd->path, "load", err);
}

void remat_checkpoint_reader_free(remat_checkpoint_reader *rd) {
  if (!rd || !rd->path) return; /* never opened, or closed: nothing is held */
  if (rd->fd >= 0) close(rd->fd);
  free(rd->path);
  *rd = (remat_checkpoint_reader){.fd = -1};
}

int remat_checkpoint_detect(const char *path, int *format, remat_error *err) {
  *format = REMAT_FORMAT_AUTO;
  source s;
  int rc = open_source(path, "checkpoint", &s, err);
  if (rc) return rc;
  uint8_t head[REMAT_HEADER_BYTES];
  size_t n = s.size < sizeof head ? s.size : sizeof head;
  rc = src_read(&s, 0, head, n, err);
  if (!rc) rc = remat__checkpoint_format(head, n, s.size, s.path, format, err);
  close_source(&s);
  return rc;
}

int remat_checkpoint_read_config(const char *path, remat_config *cfg, remat_error *err) {
  remat_checkpoint_reader rd;
  int rc = remat_checkpoint_reader_open(&rd, path, cfg, err);
  remat_checkpoint_reader_free(&rd);
  return rc;
}

int remat_checkpoint_load(const char *path, const remat_config *expect, float *params,
                          remat_error *err) {
  remat_checkpoint_reader rd;
  int rc = remat_checkpoint_reader_open(&rd, path, NULL, err);
  if (!rc) rc = remat_checkpoint_read_params(&rd, expect, params, err);
  remat_checkpoint_reader_free(&rd);
  return rc;
}

/* n fp32 parameters, little endian. */
static int write_f32(remat__wfile *w, const float *params, size_t n, remat_error *err) {
  return remat__wfile_write_f32(w, params, n, err);
}

/* n parameters rounded to bf16 (nearest, ties to even), little endian. */
static int write_bf16(remat__wfile *w, const float *params, size_t n, remat_error *err) {
  uint8_t chunk[16384];
  const size_t per = sizeof chunk / 2;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < per ? n - done : per;
    for (size_t i = 0; i < k; i++) {
      uint16_t h = remat__bf16_round(params[done + i]);
      chunk[2 * i] = (uint8_t)h;
      chunk[2 * i + 1] = (uint8_t)(h >> 8);
    }
    int rc = remat__wfile_write(w, chunk, k * 2, err);
    if (rc) return rc;
    done += k;
  }
  return 0;
}

/* A finite fp32 value from 0x1.fefp127 up in magnitude rounds to a bf16
 * infinity, which no reader would load back. */
static int check_bf16_finite(const remat_config *cfg, const float *p, const char *path,
                             remat_error *err) {
  size_t n = remat_param_count(cfg);
  for (size_t i = 0; i < n; i++) {
    if (isfinite(remat__bf16_float(remat__bf16_round(p[i])))) continue;
    size_t off;
    int k = locate(cfg, i, &off);
    return remat__errorf(err, REMAT_ENUMERIC,
                         "parameter %zu (%s[%zu]) is %g, which rounds to infinity in bf16 (its "
                         "largest value is 3.39e38); refusing to save '%s' as bf16: save it as "
                         "fp32",
                         i, tensor_name(cfg, k), off, (double)p[i], path);
  }
  return 0;
}

int remat_checkpoint_save_as(const char *path, const remat_config *cfg, const float *params,
                             int version, remat_error *err) {
  const char *name = path ? path : "";
  if (cfg && cfg->family == REMAT_FAMILY_LLAMA) /* a Llama is llama2.c's, in fp32 */
    return remat_checkpoint_save_format(path, cfg, params, REMAT_FORMAT_AUTO, version, err);
  if (version != REMAT_CKPT_VERSION && version != REMAT_CKPT_VERSION_BF16)
    return remat__errorf(err, REMAT_EINVAL,
                         "cannot save checkpoint '%s' in version %d: remat writes version %d "
                         "(fp32) and %d (bf16)",
                         name, version, REMAT_CKPT_VERSION, REMAT_CKPT_VERSION_BF16);
  remat_error sub = {0};
  if (remat_config_check(cfg, &sub))
    return remat__errorf(err, REMAT_EINVAL, "cannot save checkpoint '%s': %s", name, sub.msg);
  int rc = check_finite(cfg, params, name, "save", err);
  if (!rc && version == REMAT_CKPT_VERSION_BF16) rc = check_bf16_finite(cfg, params, name, err);
  if (rc) return rc;
  remat__wfile w;
  if ((rc = remat__wfile_open(&w, path, "checkpoint", err))) return rc;
  int32_t hdr[REMAT_HEADER_INTS] = {REMAT_CKPT_MAGIC,
                                    version,
                                    (int32_t)cfg->max_seq_len,
                                    (int32_t)cfg->vocab_size,
                                    (int32_t)cfg->num_layers,
                                    (int32_t)cfg->num_heads,
                                    (int32_t)cfg->channels,
                                    (int32_t)cfg->padded_vocab_size};
  size_t n = remat_param_count(cfg);
  if (!(rc = write_header(&w, hdr, err)))
    rc = version == REMAT_CKPT_VERSION_BF16 ? write_bf16(&w, params, n, err)
                                            : write_f32(&w, params, n, err);
  if (rc) {
    remat__wfile_abort(&w);
    return rc;
  }
  return remat__wfile_commit(&w, err);
}

int remat_checkpoint_save(const char *path, const remat_config *cfg, const float *params,
                          remat_error *err) {
  return remat_checkpoint_save_as(path, cfg, params, REMAT_CKPT_VERSION, err);
}

/* llama2c.c writes the file; the finite check is this file's. */
int remat_llama2c_save(const char *path, const remat_config *cfg, const float *params,
                       int version, remat_error *err) {
  const char *name = path ? path : "";
  int rc = remat__llama2c_save_check(cfg, version, name, err);
  if (!rc) rc = check_finite(cfg, params, name, "save", err);
  return rc ? rc : remat__llama2c_write(path, cfg, params, version, err);
}

int remat_checkpoint_save_format(const char *path, const remat_config *cfg, const float *params,
                                 int format, int version, remat_error *err) {
  remat_error sub = {0};
  if (remat_config_check(cfg, &sub))
    return remat__errorf(err, REMAT_EINVAL, "cannot save checkpoint '%s': %s", path ? path : "",
                         sub.msg);
  int rc = remat_checkpoint_format_check(cfg, format, version, err);
  if (rc) return rc;
  if (format == REMAT_FORMAT_AUTO)
    format = cfg->family == REMAT_FAMILY_LLAMA ? REMAT_FORMAT_LLAMA2C_V1 : REMAT_FORMAT_LLMC;
  if (format == REMAT_FORMAT_LLMC)
    return remat_checkpoint_save_as(path, cfg, params, version ? version : REMAT_CKPT_VERSION,
                                    err);
  return remat_llama2c_save(path, cfg, params,
                            format == REMAT_FORMAT_LLAMA2C_LEGACY ? REMAT_LLAMA2C_LEGACY
                                                                  : REMAT_LLAMA2C_V1,
                            err);
}
