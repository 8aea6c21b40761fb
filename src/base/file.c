/* file.c: the one way remat opens a path, and the checksum of its files.
 *
 * Opening: a FIFO opened for reading waits for a writer, and one opened for
 * writing waits for a reader; a device may do anything when opened. So every
 * path remat opens, input or output, goes through remat__open: the name is
 * looked at first (stat, symlinks followed) and anything but a regular file
 * (or a directory, where one is wanted) is refused without being opened;
 * then it is opened with O_NONBLOCK, so a file swapped for a FIFO in between
 * cannot block the open either, the descriptor is fstat-ed and refused
 * unless it is what was wanted, and only then O_NONBLOCK is cleared.
 *
 * Checksum: CRC32C (Castagnoli), the checksum of iSCSI, ext4 and btrfs
 * metadata. x86-64 computes it with the SSE4.2 crc32 instruction, 8 bytes at
 * a time; elsewhere a table does it a byte at a time. Both give the same
 * value (test_io checks the standard test vector "123456789" -> 0xe3069283). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

const char *remat__file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

/* The refusal of a path that is not the kind wanted. */
static int refuse(const char *path, mode_t m, int want, int writing, const char *what,
                  remat_error *err) {
  const char *verb = writing ? "write" : "read";
  if (want == REMAT__OPEN_DIR)
    return remat__errorf(err, REMAT_EIO,
                         "cannot use '%s' for the %s: it is %s, not a directory; give a "
                         "directory",
                         path, what, remat__file_kind(m));
  if (S_ISDIR(m))
    return remat__errorf(err, REMAT_EIO,
                         "cannot %s %s '%s': it is a directory; give the file's path", verb,
                         what, path);
  return remat__errorf(err, REMAT_EIO,
                       "cannot %s %s '%s': it is %s, not a regular file; give the path of a %s "
                       "stored on disk%s",
                       verb, what, path, remat__file_kind(m), what,
                       writing ? " (remat never writes to FIFOs, devices or sockets)" : "");
}

int remat__open(const char *path, int flags, int want, const char *what, int *fd,
                struct stat *st_out, remat_error *err) {
  *fd = -1;
  int writing = (flags & O_ACCMODE) != O_RDONLY;
  if (!path || !*path)
    return remat__errorf(err, REMAT_EINVAL, "no %s path given; pass the %s to %s", what,
                         want == REMAT__OPEN_DIR ? "directory" : "file",
                         writing ? "write" : "read");
  struct stat st;
  if (stat(path, &st) == 0) {
    int ok = want == REMAT__OPEN_DIR ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
    if (!ok) return refuse(path, st.st_mode, want, writing, what, err);
  } else if (errno != ENOENT || !(flags & O_CREAT)) {
    return remat__errorf(err, REMAT_EIO, "cannot open %s '%s': %s; check the path", what, path,
                         strerror(errno));
  }
  if (want == REMAT__OPEN_DIR) flags |= O_DIRECTORY;
  int f = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
  if (f < 0) {
    int e = errno;
    if ((e == ENXIO || e == ENOTDIR || e == EISDIR || e == EWOULDBLOCK) && stat(path, &st) == 0)
      return refuse(path, st.st_mode, want, writing, what, err);
    return remat__errorf(err, REMAT_EIO, "cannot open %s '%s': %s; check %s", what, path,
                         strerror(e), e == ENOENT ? "the path" : "its permissions");
  }
  int ok = fstat(f, &st) == 0 &&
           (want == REMAT__OPEN_DIR ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
  int fl = ok ? fcntl(f, F_GETFL) : -1;
  if (!ok || fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int rc = ok ? remat__errorf(err, REMAT_EIO, "cannot open %s '%s': %s", what, path,
                                strerror(errno))
                : refuse(path, st.st_mode, want, writing, what, err);
    close(f);
    return rc;
  }
  if (st_out) *st_out = st;
  *fd = f;
  return 0;
}

/* ------------------------------------------------------------- CRC32C */

static uint32_t crc_table[8][256];
static int crc_have_table;

static void crc_make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc_table[0][i] = c;
  }
  for (int t = 1; t < 8; t++)
    for (int i = 0; i < 256; i++)
      crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
  crc_have_table = 1;
}

/* Eight bytes per step with eight tables (slicing-by-8), for CPUs without
 * the instruction. The tables are filled once; filling them twice from two
 * threads writes the same values. */
static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t n) {
  if (!crc_have_table) crc_make_table();
  while (n && ((uintptr_t)p & 7)) {
    c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    n--;
  }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= c; /* little endian: the byte order the tables assume */
    c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
        crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
        crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
#endif
  while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define REMAT_CRC_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p,
                                                         size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    c = __builtin_ia32_crc32qi(c, *p++);
    n--;
  }
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    n -= 8;
  }
  c = (uint32_t)c64;
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

int remat__crc32c_hw_used = -1; /* -1 until the first call decides */

uint32_t remat_crc32c(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = ~crc;
#ifdef REMAT_CRC_HW
  if (remat__crc32c_hw_used < 0) remat__crc32c_hw_used = __builtin_cpu_supports("sse4.2") ? 1 : 0;
  if (remat__crc32c_hw_used) return ~crc_hw(c, p, n);
#else
  remat__crc32c_hw_used = 0;
#endif
  return ~crc_soft(c, p, n);
}

uint32_t remat__crc32c_soft(uint32_t crc, const void *data, size_t n) {
  return ~crc_soft(~crc, data, n);
}
