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

#include <omp.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
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

/* ------------------------------------------------------ attention */

/* The attention on bf16 operands (AVX512-BF16 tiles) against the fp32
 * tiles on the same values widened, per element within the bound of what
 * bf16 rounds, u = 2^-8 relative per rounding, from the double terms of
 * the exact computation (P the probabilities after dropout, Pd, dS the
 * scores' gradient, E_tc = sum_d |dO_td v_cd|):
 *   out_td  u sum_c |Pd_tc v_cd|                (P rounded)
 *   dv_cd   2u sum_t |Pd_tc dO_td|              (P and dO rounded)
 *   dk_cd   u scale sum_t (P_tc E_tc / (1-p) + |dS_tc|) |q_td|, dq_td likewise
 *           over c with k_cd (dO rounded in dP, then dS rounded),
 * each times 1.05, plus 1e-5 of the fp32 kernels' own rounding; lse within
 * 1e-5 (the scores are exact products of bf16 values in both, summed in
 * another order). */
typedef struct {
  double *out, *dq, *dk, *dv; /* bounds */
} att_bounds;

static att_bounds att_bound(const float *qkv, const float *dout, int64_t B, int64_t T, int64_t C,
                            int64_t NH, const remat__dropout *d) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)hs), u = 0x1p-8;
  const double ds = d && d->p > 0 ? 1.0 / (1.0 - d->p) : 1.0;
  att_bounds b = {calloc((size_t)(B * T * C), 8), calloc((size_t)(B * T * C3), 8), NULL, NULL};
  b.dk = b.dq + C, b.dv = b.dq + 2 * C; /* (B,T,3C) like dqkv */
  double *P = malloc((size_t)(T * T) * 8), *Pd = malloc((size_t)(T * T) * 8);
  double *dS = malloc((size_t)(T * T) * 8), *E = malloc((size_t)(T * T) * 8);
  for (int64_t bh = 0; bh < B * NH; bh++) {
    const int64_t bb = bh / NH, h = bh % NH;
#define Q(t, j) ((double)qkv[(bb * T + (t)) * C3 + h * hs + (j)])
#define K(t, j) ((double)qkv[(bb * T + (t)) * C3 + C + h * hs + (j)])
#define V(t, j) ((double)qkv[(bb * T + (t)) * C3 + 2 * C + h * hs + (j)])
#define DO(t, j) ((double)dout[(bb * T + (t)) * C + h * hs + (j)])
    for (int64_t t = 0; t < T; t++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c <= t; c++) {
        double x = 0;
        for (int64_t j = 0; j < hs; j++) x += Q(t, j) * K(c, j);
        P[t * T + c] = x * scale;
        if (x * scale > mx) mx = x * scale;
      }
      for (int64_t c = 0; c <= t; c++) sum += (P[t * T + c] = exp(P[t * T + c] - mx));
      double D = 0;
      for (int64_t c = 0; c <= t; c++) {
        P[t * T + c] /= sum;
        int keep = !d || d->p <= 0 || remat__dropout_keep(d, (uint64_t)((bh * T + t) * T + c));
        Pd[t * T + c] = keep ? P[t * T + c] * ds : 0;
      }
      /* D = rowsum(dO * O) = sum_c Pd_tc (dO_t . v_c) */
      for (int64_t c = 0; c <= t; c++) {
        double dp = 0, e = 0;
        for (int64_t j = 0; j < hs; j++) dp += DO(t, j) * V(c, j), e += fabs(DO(t, j) * V(c, j));
        E[t * T + c] = e;
        dS[t * T + c] = dp; /* dP for now */
        D += Pd[t * T + c] * dp;
      }
      for (int64_t c = 0; c <= t; c++) {
        int keep = Pd[t * T + c] != 0 || P[t * T + c] == 0;
        dS[t * T + c] = P[t * T + c] * ((keep ? dS[t * T + c] * ds : 0) - D);
      }
      for (int64_t j = 0; j < hs; j++) {
        double o = 0;
        for (int64_t c = 0; c <= t; c++) o += fabs(Pd[t * T + c] * V(c, j));
        b.out[(bb * T + t) * C + h * hs + j] = o;
      }
    }
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < hs; j++) {
        double eq = 0, ek = 0, ev = 0;
        for (int64_t c = 0; c <= t; c++) /* dq_t over keys c */
          eq += u * (P[t * T + c] * ds * E[t * T + c] + fabs(dS[t * T + c])) * fabs(K(c, j));
        for (int64_t r = t; r < T; r++) { /* dk_t, dv_t over queries r (t as a key) */
          ek += u * (P[r * T + t] * ds * E[r * T + t] + fabs(dS[r * T + t])) * fabs(Q(r, j));
          ev += fabs(Pd[r * T + t] * DO(r, j));
        }
        const int64_t o = (bb * T + t) * C3 + h * hs + j;
        b.dq[o] = scale * eq;
        b.dk[o] = scale * ek;
        b.dv[o] = 2 * u * ev;
      }
#undef Q
#undef K
#undef V
#undef DO
  }
  for (int64_t i = 0; i < B * T * C; i++) b.out[i] *= u;
  free(P), free(Pd), free(dS), free(E);
  return b;
}

/* How far past its bound the worst element is (<= 1 passes). */
static double past_bound(const float *got, const float *want, const double *bound, int64_t n,
                   int64_t stride, int64_t width) {
  double far = 0;
  for (int64_t i = 0; i < n; i++) {
    if (i % stride >= width) continue;
    double e = fabs((double)got[i] - (double)want[i]);
    double lim = 1.05 * bound[i] + 1e-5 * (1 + fabs((double)want[i]));
    if (e / lim > far) far = e / lim;
  }
  return far;
}

static void test_attention_case(int64_t B, int64_t T, int64_t C, int64_t NH, float p) {
  const int64_t hs = C / NH, nq = B * T * 3 * C, no = B * T * C, nl = B * NH * T;
  remat__dropout drop = {.p = p, .seed = 99, .step = 3, .micro = 1, .layer = 2, .site = 0};
  const remat__dropout *d = p > 0 ? &drop : NULL;
  float *x = frand((size_t)nq), *dout = frand((size_t)no);
  for (int64_t i = 0; i < nq; i++) x[i] *= 2.0f;
  uint16_t *qkv = to_bf16(x, (size_t)nq);
  remat__bf16_to_f32(x, qkv, (size_t)nq); /* the bf16 values, widened */
  const int threads = omp_get_max_threads();
  const size_t piece = remat__att16_tiles_view(NULL, NULL, hs);
  const size_t wbytes = piece * (size_t)threads;
  void *work = xalloc(wbytes);
  float *out = xalloc((size_t)no * 4), *lse = xalloc((size_t)nl * 4), *out32 = xalloc((size_t)no * 4);
  float *lse32 = xalloc((size_t)nl * 4), *dq = xalloc((size_t)nq * 4), *dq32 = xalloc((size_t)nq * 4);
  float *delta = xalloc((size_t)nl * 4), *outw = xalloc((size_t)no * 4);
  for (int64_t i = 0; i < nq; i++) dq[i] = NAN; /* overwritten */
  remat__attention_forward_bf16(out, lse, qkv, B, T, C, NH, d, work, wbytes);
  remat__attention_forward(out32, lse32, x, B, T, C, NH, d);
  uint16_t *outh = to_bf16(out, (size_t)no); /* the model stores it in bf16 */
  remat__bf16_to_f32(outw, outh, (size_t)no);
  remat__attention_backward_bf16(dq, delta, dout, qkv, outh, lse, B, T, C, NH, d, work, wbytes);
  remat__attention_backward(dq32, delta, dout, x, outw, lse, B, T, C, NH, d);
  att_bounds b = att_bound(x, dout, B, T, C, NH, d);
  double el = 0;
  for (int64_t i = 0; i < nl; i++) {
    double e = fabs((double)lse[i] - (double)lse32[i]) / (1e-5 * (1 + fabs((double)lse32[i])));
    if (e > el) el = e;
  }
  const double eo = past_bound(out, out32, b.out, no, C, C);
  const double eq = past_bound(dq, dq32, b.dq, nq, 3 * C, C);
  const double ek = past_bound(dq + C, dq32 + C, b.dq + C, nq - C, 3 * C, C);
  const double ev = past_bound(dq + 2 * C, dq32 + 2 * C, b.dq + 2 * C, nq - 2 * C, 3 * C, C);
  CHECKF(el <= 1 && eo <= 1 && eq <= 1 && ek <= 1 && ev <= 1,
         "attention on bf16 operands vs the fp32 tiles, B%lld T%lld C%lld NH%lld p=%.1f: worst "
         "error / bound: lse %.2f out %.2f dq %.2f dk %.2f dv %.2f",
         (long long)B, (long long)T, (long long)C, (long long)NH, (double)p, el, eo, eq, ek, ev);
  /* the same bits again, on one thread, and on the work of one thread only
   * (pairs fewer than threads take the two-pass backward) */
  float *out2 = xalloc((size_t)no * 4), *lse2 = xalloc((size_t)nl * 4), *dq2 = xalloc((size_t)nq * 4);
  int same = 1;
  for (int run = 0; run < 3; run++) {
    if (run == 1) omp_set_num_threads(1);
    const size_t wb = run == 2 ? piece : wbytes;
    remat__attention_forward_bf16(out2, lse2, qkv, B, T, C, NH, d, work, wb);
    remat__attention_backward_bf16(dq2, delta, dout, qkv, outh, lse2, B, T, C, NH, d, work, wb);
    same &= !memcmp(out, out2, (size_t)no * 4) && !memcmp(lse, lse2, (size_t)nl * 4) &&
            !memcmp(dq, dq2, (size_t)nq * 4);
    if (run == 1) omp_set_num_threads(threads);
  }
  CHECKF(same, "  the same bits on repeat, on 1 thread and on one thread's work (%d threads)",
         threads);
  free(b.out), free(b.dq);
  void *all[] = {x, dout, qkv, work, out, lse, out32, lse32, dq, dq32, delta, outw, outh,
                 out2, lse2, dq2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* The grouped-query attention on bf16 operands (q, k, v apart, rows with
 * columns to spare past the heads) against the fp32 grouped-query kernel on
 * the same values widened, within the bounds above: those of the same
 * attention with k and v copied to every query head of their group (a
 * packed qkv), dk and dv's bounds summed over the group's heads (what the
 * kernel sums). Then the same bits on repeat, on 1 thread and on one
 * thread's work, the columns past the heads untouched, and with NKV = NH
 * the packed bf16 kernel's bits. */
#define GQA_PAD 7.0f
static void test_attention_gqa_case(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                    float p) {
  const int64_t C = NH * hs, grp = NH / NKV, ldq = C + 2, ldkv = NKV * hs + 4, N = B * T;
  const int64_t nq = N * ldq, nkv = N * ldkv, no = N * C, nl = B * NH * T;
  remat__dropout drop = {.p = p, .seed = 51, .step = 1, .micro = 0, .layer = 4, .site = 0};
  const remat__dropout *d = p > 0 ? &drop : NULL;
  float *xq = frand((size_t)nq), *xk = frand((size_t)nkv), *xv = frand((size_t)nkv);
  float *dout = frand((size_t)no);
  for (int64_t i = 0; i < nq; i++) xq[i] *= 2.0f;
  for (int64_t i = 0; i < nkv; i++) xk[i] *= 2.0f;
  uint16_t *q = to_bf16(xq, (size_t)nq), *k = to_bf16(xk, (size_t)nkv), *v = to_bf16(xv, (size_t)nkv);
  remat__bf16_to_f32(xq, q, (size_t)nq), remat__bf16_to_f32(xk, k, (size_t)nkv);
  remat__bf16_to_f32(xv, v, (size_t)nkv); /* the bf16 values, widened */
  const int threads = omp_get_max_threads();
  const size_t piece = remat__att16_tiles_view(NULL, NULL, hs), wbytes = piece * (size_t)threads;
  void *work = xalloc(wbytes);
  float *out = xalloc((size_t)no * 4), *lse = xalloc((size_t)nl * 4), *out32 = xalloc((size_t)no * 4);
  float *lse32 = xalloc((size_t)nl * 4), *delta = xalloc((size_t)nl * 4), *outw = xalloc((size_t)no * 4);
  float *g[3], *g32[3]; /* dq, dk, dv: bf16 kernel, fp32 kernel */
  const int64_t gn[3] = {nq, nkv, nkv}, gld[3] = {ldq, ldkv, ldkv}, gw[3] = {C, NKV * hs, NKV * hs};
  for (int i = 0; i < 3; i++) {
    g[i] = xalloc((size_t)gn[i] * 4), g32[i] = xalloc((size_t)gn[i] * 4);
    for (int64_t j = 0; j < gn[i]; j++) g[i][j] = j % gld[i] < gw[i] ? NAN : GQA_PAD;
  }
  remat__attention_forward_gqa_bf16(out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, d, work,
                                    wbytes);
  remat__attention_forward_gqa(out32, lse32, xq, xk, xv, ldq, ldkv, B, T, NH, NKV, hs, d);
  uint16_t *outh = to_bf16(out, (size_t)no); /* the model stores it in bf16 */
  remat__bf16_to_f32(outw, outh, (size_t)no);
  remat__attention_backward_gqa_bf16(g[0], g[1], g[2], delta, dout, q, k, v, outh, lse, ldq, ldkv,
                                     B, T, NH, NKV, hs, d, work, wbytes);
  remat__attention_backward_gqa(g32[0], g32[1], g32[2], delta, dout, xq, xk, xv, outw, lse, ldq,
                                ldkv, B, T, NH, NKV, hs, d);
  /* the bounds of the packed attention with k, v copied to each head */
  float *rep = xalloc((size_t)(N * 3 * C) * 4);
  for (int64_t r = 0; r < N; r++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t j = 0; j < hs; j++) {
        rep[r * 3 * C + h * hs + j] = xq[r * ldq + h * hs + j];
        rep[r * 3 * C + C + h * hs + j] = xk[r * ldkv + h / grp * hs + j];
        rep[r * 3 * C + 2 * C + h * hs + j] = xv[r * ldkv + h / grp * hs + j];
      }
  att_bounds b = att_bound(rep, dout, B, T, C, NH, d);
  double *bd[3];
  for (int i = 0; i < 3; i++) bd[i] = calloc((size_t)gn[i], 8);
  for (int64_t r = 0; r < N; r++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t j = 0; j < hs; j++) {
        bd[0][r * ldq + h * hs + j] = b.dq[r * 3 * C + h * hs + j];
        bd[1][r * ldkv + h / grp * hs + j] += b.dk[r * 3 * C + h * hs + j];
        bd[2][r * ldkv + h / grp * hs + j] += b.dv[r * 3 * C + h * hs + j];
      }
  double el = 0;
  for (int64_t i = 0; i < nl; i++) {
    double e = fabs((double)lse[i] - (double)lse32[i]) / (1e-5 * (1 + fabs((double)lse32[i])));
    if (e > el) el = e;
  }
  const double eo = past_bound(out, out32, b.out, no, C, C);
  double eg[3];
  bool kept = true;
  for (int i = 0; i < 3; i++) {
    eg[i] = past_bound(g[i], g32[i], bd[i], gn[i], gld[i], gw[i]);
    for (int64_t j = 0; j < gn[i]; j++) kept &= j % gld[i] < gw[i] || g[i][j] == GQA_PAD;
  }
  CHECKF(el <= 1 && eo <= 1 && eg[0] <= 1 && eg[1] <= 1 && eg[2] <= 1 && kept,
         "gqa attention on bf16 operands vs the fp32 gqa kernel, B%lld T%lld NH%lld NKV%lld "
         "hs%lld p=%.1f: worst error / bound: lse %.2f out %.2f dq %.2f dk %.2f dv %.2f; columns "
         "past the heads untouched: %s", (long long)B, (long long)T, (long long)NH,
         (long long)NKV, (long long)hs, (double)p, el, eo, eg[0], eg[1], eg[2],
         kept ? "yes" : "NO");
  /* the same bits again: on one thread, on the work of one thread only
   * (groups fewer than threads take the two-pass backward) */
  float *out2 = xalloc((size_t)no * 4), *lse2 = xalloc((size_t)nl * 4), *h2[3];
  for (int i = 0; i < 3; i++) h2[i] = xalloc((size_t)gn[i] * 4);
  int same = 1;
  for (int run = 0; run < 3; run++) {
    if (run == 1) omp_set_num_threads(1);
    const size_t wb = run == 2 ? piece : wbytes;
    for (int i = 0; i < 3; i++) memcpy(h2[i], g[i], (size_t)gn[i] * 4);
    remat__attention_forward_gqa_bf16(out2, lse2, q, k, v, ldq, ldkv, B, T, NH, NKV, hs, d, work,
                                      wb);
    remat__attention_backward_gqa_bf16(h2[0], h2[1], h2[2], delta, dout, q, k, v, outh, lse2, ldq,
                                       ldkv, B, T, NH, NKV, hs, d, work, wb);
    same &= !memcmp(out, out2, (size_t)no * 4) && !memcmp(lse, lse2, (size_t)nl * 4);
    for (int i = 0; i < 3; i++) same &= !memcmp(g[i], h2[i], (size_t)gn[i] * 4);
    if (run == 1) omp_set_num_threads(threads);
  }
  CHECKF(same, "  the same bits on repeat, on 1 thread and on one thread's work (%d threads)",
         threads);
  if (NKV == NH) { /* GPT-2's packed kernels on the same values: the same bits */
    uint16_t *qkv = to_bf16(rep, (size_t)(N * 3 * C));
    float *dqkv = xalloc((size_t)(N * 3 * C) * 4);
    remat__attention_forward_bf16(out2, lse2, qkv, B, T, C, NH, d, work, wbytes);
    remat__attention_backward_bf16(dqkv, delta, dout, qkv, outh, lse2, B, T, C, NH, d, work,
                                   wbytes);
    int packed = !memcmp(out, out2, (size_t)no * 4) && !memcmp(lse, lse2, (size_t)nl * 4);
    for (int64_t r = 0; r < N; r++)
      for (int i = 0; i < 3; i++)
        packed &= !memcmp(dqkv + r * 3 * C + i * C, g[i] + r * gld[i], (size_t)C * 4);
    CHECKF(packed, "  NKV = NH: the packed bf16 kernels' bits (out, lse, dq, dk, dv)");
    free(qkv), free(dqkv);
  }
  free(b.out), free(b.dq);
  for (int i = 0; i < 3; i++) free(g[i]), free(g32[i]), free(bd[i]), free(h2[i]);
  void *all[] = {xq, xk, xv, dout, q, k, v, work, out, lse, out32, lse32, delta, outw, outh,
                 rep, out2, lse2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void test_attention(void) {
  remat__cpu_bf16 cpu = remat__cpu_bf16_get();
  if (!cpu.avx512_bf16) {
    printf("skip: attention on bf16 operands (%s)\n", cpu.reason);
    return;
  }
  test_attention_case(2, 5, 8, 2, 0.0f);    /* hs 4: one masked vector */
  test_attention_case(1, 1, 8, 2, 0.3f);    /* T = 1 */
  test_attention_case(2, 77, 12, 2, 0.2f);  /* hs 6, odd tiles */
  test_attention_case(1, 130, 48, 2, 0.0f); /* hs 24, three key tiles, one pair */
  test_attention_case(2, 200, 128, 2, 0.1f);
  test_attention_case(1, 129, 64, 1, 0.0f); /* hs 64, one pair: the two-pass backward */
  test_attention_case(1, 64, 256, 2, 0.0f); /* hs 128: two column blocks */
  for (int64_t nkv = 1; nkv <= 4; nkv *= 2) { /* NH = 4: NKV 1, 2 and NH */
    test_attention_gqa_case(2, 5, 4, nkv, 4, 0.0f);
    test_attention_gqa_case(1, 77, 4, nkv, 6, 0.2f);
    test_attention_gqa_case(2, 130, 4, nkv, 24, 0.1f); /* three key tiles */
  }
  test_attention_gqa_case(1, 1, 4, 2, 8, 0.3f);       /* T = 1 */
  test_attention_gqa_case(1, 129, 8, 1, 64, 0.0f);    /* one group: the two-pass backward */
  test_attention_gqa_case(3, 64, 6, 2, 32, 0.0f);
}

int main(void) {
  test_detection();
  test_conversions();
  test_products();
  test_attention();
  return test_summary("test_bf16");
}
