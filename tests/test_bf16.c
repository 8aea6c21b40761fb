/* test_bf16.c: the bf16 products (kernels/bf16.h, oneDNN) against double
 * references on odd, random and GPT-2 shapes; the fp32 <-> bf16
 * conversions; the CPU detection on the registers of CPUs with and without
 * the instructions; and that a product runs without heap allocation and
 * gives the same bits twice.
 *
 * Tolerances, per output element with terms t_k = a_k b_k (K of them):
 * - against the double product of the bf16 inputs themselves ("exact
 *   inputs"): only fp32 accumulation differs, |err| <= K 2^-23 sum |t_k|
 *   (a loose bound: fp32 rounding of K partial sums), plus one rounding
 *   to bf16 (2^-8 relative) of the fp32 result when the output is bf16.
 *   With fp32 outputs this is what fails if the product ran on other
 *   inputs than the bf16 ones (fp32 products of the unrounded values).
 * - against the double product of the fp32 values before rounding to
 *   bf16: each input is off by at most 2^-8 relative (half a unit in the
 *   last of 8 significant bits), so each term by at most about 2^-7 |t_k|,
 *   with errors of independent sign: the sum's error is below
 *   6 x 2^-7 sqrt(sum t_k^2) but with probability 2 exp(-18) per element
 *   (Hoeffding), plus the two bounds above. This is the brief's "2^-8 per
 *   input times sqrt(K)" made exact.
 *
 * On a CPU without bf16 instructions the product checks are skipped with
 * the reason printed; the conversions and the detection are checked
 * everywhere. */
#define _GNU_SOURCE
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "test_util.h"

/* Every heap allocation and free of the process while counting is on. */
static atomic_long n_alloc, n_free;
static atomic_int counting;
#if defined(__SANITIZE_ADDRESS__)
#define COUNT_MALLOC 0
#else
#define COUNT_MALLOC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static void counted(void) {
  if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
}
void *malloc(size_t n) {
  counted();
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  counted();
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  counted();
  return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  counted();
  void *p = __libc_memalign(align, n);
  if (!p) return 12;
  *out = p;
  return 0;
}
void *aligned_alloc(size_t align, size_t n) {
  counted();
  return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
  counted();
  return __libc_memalign(align, n);
}
void free(void *p) {
  if (p && atomic_load(&counting)) atomic_fetch_add(&n_free, 1);
  __libc_free(p);
}
#endif

static uint64_t rng_state = 0xb16b16b16b16ull;
static double urand(void) { /* splitmix64, uniform in [0, 1) */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-53;
}
static int64_t irand(int64_t lo, int64_t hi) {
  return lo + (int64_t)(urand() * (double)(hi - lo + 1));
}
static void *xalloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!p) abort();
  return p;
}
/* n fp32 values in [-1, 1) and their bf16 roundings */
static float *frand(size_t n) {
  float *x = xalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = (float)(2.0 * urand() - 1.0);
  return x;
}
static uint16_t *to_bf16(const float *x, size_t n) {
  uint16_t *h = xalloc(n * sizeof(uint16_t));
  remat__bf16_from_f32(h, x, n);
  return h;
}

/* ------------------------------------------------------ detection */

static void test_detection(void) {
  const uint32_t avx512f = 1u << 16, osxsave = 1u << 27, bf16 = 1u << 5;
  const uint32_t amx = (1u << 22) | (1u << 24);
  const uint64_t zmm = 0xe7, tiles = 3ull << 17;
  remat__cpuid_regs none = {.l7_ebx = avx512f, .l1_ecx = osxsave, .xcr0 = zmm};
  remat__cpuid_regs zen4 = {.l7_ebx = avx512f, .l7s1_eax = bf16, .l1_ecx = osxsave, .xcr0 = zmm};
  remat__cpuid_regs spr = zen4;
  spr.l7_edx = amx;
  spr.xcr0 = zmm | tiles;
  remat__cpuid_regs no_os = zen4;
  no_os.xcr0 = 0x7; /* the OS saves AVX but not ZMM state */
  remat__cpuid_regs amx_off = spr;
  amx_off.xcr0 = zmm;
  remat__cpu_bf16 c = remat__cpu_bf16_from(&none);
  CHECKF(!c.avx512_bf16 && !c.amx_bf16 &&
             !strcmp(c.reason, "fp32: this CPU has no bf16 instructions"),
         "AVX-512 without BF16: %s", c.reason);
  c = remat__cpu_bf16_from(&zen4);
  CHECKF(c.avx512_bf16 && !c.amx_bf16 && !strncmp(c.reason, "bf16: AVX512-BF16", 17),
         "AVX512-BF16 without AMX: %s", c.reason);
  c = remat__cpu_bf16_from(&spr);
  CHECKF(c.avx512_bf16 && c.amx_bf16 && !strcmp(c.reason, "bf16: AVX512-BF16 and AMX present"),
         "AVX512-BF16 and AMX: %s", c.reason);
  c = remat__cpu_bf16_from(&no_os);
  CHECKF(!c.avx512_bf16 && !strncmp(c.reason, "fp32:", 5), "ZMM state off: %s", c.reason);
  c = remat__cpu_bf16_from(&amx_off);
  CHECKF(c.avx512_bf16 && !c.amx_bf16, "tile state off: %s", c.reason);
  c = remat__cpu_bf16_get();
  printf("this CPU: %s\n", c.reason);
}

/* ------------------------------------------------------ conversions */

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void test_conversions(void) {
  /* every bf16 value but NaNs goes to fp32 and back unchanged */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = remat__bf16_float((uint16_t)h);
    if (isnan(f)) continue;
    bad += remat__bf16_round(f) != h;
  }
  CHECKF(bad == 0, "bf16 -> fp32 -> bf16 is the identity (%d differ)", bad);
  /* ties go to even; just above a tie goes up */
  CHECK(remat__bf16_round(f_of(0x3f808000u)) == 0x3f80); /* 1 + 2^-8: tie, even is down */
  CHECK(remat__bf16_round(f_of(0x3f818000u)) == 0x3f82); /* tie, odd goes up to even */
  CHECK(remat__bf16_round(f_of(0x3f808001u)) == 0x3f81);
  CHECK(remat__bf16_round(f_of(0x3f807fffu)) == 0x3f80);
  CHECK(remat__bf16_round(f_of(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to inf */
  CHECK(remat__bf16_round(INFINITY) == 0x7f80 && remat__bf16_round(-INFINITY) == 0xff80);
  CHECK(isnan(remat__bf16_float(remat__bf16_round(NAN))));
  CHECK(isnan(remat__bf16_float(remat__bf16_round(f_of(0x7f800001u))))); /* stays a NaN */
  /* the arrays agree with the scalars, relative error within 2^-8 */
  enum { n = 1000 };
  float *x = frand(n), *y = xalloc(n * sizeof(float));
  uint16_t *h = to_bf16(x, n);
  remat__bf16_to_f32(y, h, n);
  int ok = 1;
  for (int i = 0; i < n; i++)
    ok &= h[i] == remat__bf16_round(x[i]) && fabsf(y[i] - x[i]) <= 0x1p-8f * fabsf(x[i]);
  CHECKF(ok, "arrays: %d values rounded to nearest within 2^-8 relative", n);
  free(x), free(y), free(h);
}

/* ------------------------------------------------------ products */

/* c[i,j] (double) = sum_k a[i*sa_i + k*sa_k] b[k*sb_k + j*sb_j], and the two
 * bound sums, for a (M,K) and b (K,N) given by strides. */
typedef struct ref {
  double *v, *abs, *sq; /* (M,N) */
} ref;
static ref ref_product(const float *a, int64_t sa_i, int64_t sa_k, const float *b,
                       int64_t sb_k, int64_t sb_j, int64_t M, int64_t N, int64_t K) {
  ref r = {calloc((size_t)(M * N), 8), calloc((size_t)(M * N), 8), calloc((size_t)(M * N), 8)};
  if (!r.v || !r.abs || !r.sq) abort();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, sa = 0, sq = 0;
      for (int64_t k = 0; k < K; k++) {
        double t = (double)a[i * sa_i + k * sa_k] * (double)b[k * sb_k + j * sb_j];
        s += t, sa += fabs(t), sq += t * t;
      }
      r.v[i * N + j] = s, r.abs[i * N + j] = sa, r.sq[i * N + j] = sq;
    }
  return r;
}
static void ref_free(ref r) { free(r.v), free(r.abs), free(r.sq); }

/* Largest error of got (fp32 or bf16, plus an fp32 base that was
 * accumulated onto) over its bound, against exact (the bf16 inputs'
 * product) and against orig (the unrounded inputs'). Both must be <= 1. */
typedef struct worst {
  double exact, orig;
} worst;
static worst compare(const void *got, bool got_bf16, const float *base, ref exact, ref orig,
                     int64_t M, int64_t N, int64_t K) {
  worst w = {0, 0};
  for (int64_t i = 0; i < M * N; i++) {
    double g = got_bf16 ? remat__bf16_float(((const uint16_t *)got)[i]) : ((const float *)got)[i];
    double b0 = base ? base[i] : 0.0;
    double ex = b0 + exact.v[i], o = b0 + orig.v[i];
    double acc = (double)K * 0x1p-23 * (exact.abs[i] + fabs(b0)) + 1e-30;
    double out = got_bf16 ? 0x1p-8 * (fabs(ex) + acc) : 0.0;
    double e1 = fabs(g - ex) / (acc + out);
    double e2 = fabs(g - o) / (6 * 0x1p-7 * sqrt(orig.sq[i]) + 2 * acc + out + 1e-30);
    if (e1 > w.exact) w.exact = e1;
    if (e2 > w.orig) w.orig = e2;
  }
  return w;
}

static void test_shape(remat__dnnl *d, void *scratch, int64_t N, int64_t C, int64_t OC,
                       bool ob, const char *impl) {
  const size_t osz = ob ? 2 : 4;
  float *inp = frand((size_t)(N * C)), *w = frand((size_t)(OC * C)), *bias = frand((size_t)OC);
  float *dout = frand((size_t)(N * OC)), *dw0 = frand((size_t)(OC * C)), *db0 = frand((size_t)OC);
  uint16_t *inp_h = to_bf16(inp, (size_t)(N * C)), *w_h = to_bf16(w, (size_t)(OC * C));
  uint16_t *dout_h = to_bf16(dout, (size_t)(N * OC));
  float *inp_r = xalloc((size_t)(N * C) * 4), *w_r = xalloc((size_t)(OC * C) * 4);
  float *dout_r = xalloc((size_t)(N * OC) * 4);
  remat__bf16_to_f32(inp_r, inp_h, (size_t)(N * C));
  remat__bf16_to_f32(w_r, w_h, (size_t)(OC * C));
  remat__bf16_to_f32(dout_r, dout_h, (size_t)(N * OC));
  void *out = xalloc((size_t)(N * OC) * osz), *out2 = xalloc((size_t)(N * OC) * osz);
  void *dinp = xalloc((size_t)(N * C) * osz), *dinp2 = xalloc((size_t)(N * C) * osz);
  float *dw = xalloc((size_t)(OC * C) * 4), *dw2 = xalloc((size_t)(OC * C) * 4);
  float *db = xalloc((size_t)OC * 4), *db2 = xalloc((size_t)OC * 4);
  memcpy(dw, dw0, (size_t)(OC * C) * 4), memcpy(dw2, dw0, (size_t)(OC * C) * 4);
  memcpy(db, db0, (size_t)OC * 4), memcpy(db2, db0, (size_t)OC * 4);

  /* The first AMX product of a process keeps a few small blocks of oneDNN's
   * lazily made per-thread state: run once before counting, as a set-up
   * does before its first step. */
  remat__bf16_matmul_forward(d, out, inp_h, w_h, bias, N, C, OC, ob, scratch);
  atomic_store(&n_alloc, 0);
  atomic_store(&n_free, 0);
  atomic_store(&counting, 1);
  remat__bf16_matmul_forward(d, out, inp_h, w_h, bias, N, C, OC, ob, scratch);
  remat__bf16_matmul_backward(d, dinp, dw, db, dout_h, inp_h, w_h, N, C, OC, ob, scratch);
  atomic_store(&counting, 0);
  long allocs = atomic_load(&n_alloc), frees = atomic_load(&n_free);
  remat__bf16_matmul_forward(d, out2, inp_h, w_h, bias, N, C, OC, ob, scratch);
  remat__bf16_matmul_backward(d, dinp2, dw2, db2, dout_h, inp_h, w_h, N, C, OC, ob, scratch);

  /* forward: out = inp w^T + bias, K = C */
  ref ex = ref_product(inp_r, C, 1, w_r, 1, C, N, OC, C);
  ref og = ref_product(inp, C, 1, w, 1, C, N, OC, C);
  float *bias_rows = xalloc((size_t)(N * OC) * 4);
  for (int64_t i = 0; i < N * OC; i++) bias_rows[i] = bias[i % OC];
  worst f = compare(out, ob, bias_rows, ex, og, N, OC, C);
  ref_free(ex), ref_free(og);
  /* dinp = dout w, K = OC */
  ex = ref_product(dout_r, OC, 1, w_r, C, 1, N, C, OC);
  og = ref_product(dout, OC, 1, w, C, 1, N, C, OC);
  worst di = compare(dinp, ob, NULL, ex, og, N, C, OC);
  ref_free(ex), ref_free(og);
  /* dweight += dout^T inp, K = N */
  ex = ref_product(dout_r, 1, OC, inp_r, C, 1, OC, C, N);
  og = ref_product(dout, 1, OC, inp, C, 1, OC, C, N);
  worst dwe = compare(dw, false, dw0, ex, og, OC, C, N);
  ref_free(ex), ref_free(og);
  /* dbias += column sums of dout: a product with a column of ones */
  float *ones = xalloc((size_t)N * 4);
  for (int64_t i = 0; i < N; i++) ones[i] = 1.0f;
  ex = ref_product(ones, 0, 1, dout_r, OC, 1, 1, OC, N);
  og = ref_product(ones, 0, 1, dout, OC, 1, 1, OC, N);
  worst dbe = compare(db, false, db0, ex, og, 1, OC, N);
  ref_free(ex), ref_free(og);

  bool same = !memcmp(out, out2, (size_t)(N * OC) * osz) &&
              !memcmp(dinp, dinp2, (size_t)(N * C) * osz) &&
              !memcmp(dw, dw2, (size_t)(OC * C) * 4) && !memcmp(db, db2, (size_t)OC * 4);
  double we = fmax(fmax(f.exact, di.exact), fmax(dwe.exact, dbe.exact));
  double wo = fmax(fmax(f.orig, di.orig), fmax(dwe.orig, dbe.orig));
  /* oneDNN's execute builds a map of its arguments on the heap (its C API
   * has no other way in); what matters is that nothing is held after it. */
  CHECKF(we <= 1 && wo <= 1 && same && (!COUNT_MALLOC || allocs == frees),
         "N %lld C %lld OC %lld out %s: error/bound %.3f (bf16 inputs) %.3f (fp32 inputs), "
         "%s, %ld blocks allocated and %ld freed inside (%s)",
         (long long)N, (long long)C, (long long)OC, ob ? "bf16" : "fp32", we, wo,
         same ? "same bits twice" : "BITS DIFFER", allocs, frees, impl);
  void *all[] = {inp, w, bias, dout, dw0, db0, inp_h, w_h, dout_h, inp_r, w_r, dout_r, out,
                 out2, dinp, dinp2, dw, dw2, db, db2, bias_rows, ones};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void test_products(void) {
  remat__cpu_bf16 cpu = remat__cpu_bf16_get();
  if (!cpu.avx512_bf16) {
    printf("skip: bf16 products (%s)\n", cpu.reason);
    return;
  }
  enum { NFIXED = 7, NRAND = 6, NS = 2 * (NFIXED + NRAND) };
  const int64_t fixed[NFIXED][3] = {{1, 1, 1},   {7, 13, 5},  {33, 17, 65}, {100, 96, 200},
                                    {3, 257, 31}, {64, 768, 2304}, {64, 3072, 768}};
  remat__mm_shape s[NS];
  int n = 0;
  for (int i = 0; i < NFIXED + NRAND; i++) {
    int64_t N, C, OC;
    if (i < NFIXED) {
      N = fixed[i][0], C = fixed[i][1], OC = fixed[i][2];
    } else {
      N = irand(1, 300), C = irand(1, 300), OC = irand(1, 300);
    }
    s[n++] = (remat__mm_shape){.N = N, .C = C, .OC = OC, .out_bf16 = false};
    s[n++] = (remat__mm_shape){.N = N, .C = C, .OC = OC, .out_bf16 = true};
  }
  remat__dnnl *d = NULL;
  remat_error err = {0};
  int rc = remat__dnnl_create(&d, s, n, &err);
  CHECKF(rc == 0, "oneDNN primitives for %d shapes made at set-up%s%s", n, rc ? ": " : "",
         rc ? err.msg : "");
  if (rc) return;
  printf("oneDNN scratchpad %zu bytes\n", remat__dnnl_scratchpad_bytes(d));
  void *scratch = xalloc(remat__dnnl_scratchpad_bytes(d) + 1);
  for (int i = 0; i < n; i++)
    test_shape(d, scratch, s[i].N, s[i].C, s[i].OC, s[i].out_bf16, remat__dnnl_impl(d, i));
  free(scratch);
  remat__dnnl_destroy(d);
}

int main(void) {
  test_detection();
  test_conversions();
  test_products();
  return test_summary("test_bf16");
}
