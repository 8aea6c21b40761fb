/* cpu_features.c: whether this CPU can run bf16 products, from cpuid and
 * the OS's enabled state (XCR0), read at run time: a build runs on CPUs
 * with and without the instructions, and picks its precision from what it
 * finds. The decision is a pure function of the registers so that tests
 * can ask it about CPUs other than their own. */
#include <stdbool.h>
#include <stdint.h>

#include "products/products.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HAVE_CPUID 1
#endif

/* The bits (Intel SDM vol. 2A, CPUID; vol. 1, 13.3 for XCR0). */
#define L1_ECX_OSXSAVE (1u << 27)
#define L7_EBX_AVX512F (1u << 16)
#define L7_EDX_AMX_BF16 (1u << 22)
#define L7_EDX_AMX_TILE (1u << 24)
#define L7S1_EAX_AVX512_BF16 (1u << 5)
/* SSE, AVX, opmask, upper ZMM halves, ZMM16-31 */
#define XCR0_AVX512 0xe6ull
/* XTILECFG, XTILEDATA */
#define XCR0_AMX (3ull << 17)

remat__cpu_bf16 remat__cpu_bf16_from(const remat__cpuid_regs *r) {
  const bool os = (r->l1_ecx & L1_ECX_OSXSAVE) != 0;
  const bool avx512_insn =
      (r->l7_ebx & L7_EBX_AVX512F) && (r->l7s1_eax & L7S1_EAX_AVX512_BF16);
  const bool amx_insn = (r->l7_edx & L7_EDX_AMX_TILE) && (r->l7_edx & L7_EDX_AMX_BF16);
  remat__cpu_bf16 c = {0};
  c.avx512_bf16 = avx512_insn && os && (r->xcr0 & XCR0_AVX512) == XCR0_AVX512;
  c.amx_bf16 = c.avx512_bf16 && amx_insn && (r->xcr0 & XCR0_AMX) == XCR0_AMX;
  if (c.amx_bf16)
    c.reason = "bf16: AVX512-BF16 and AMX present";
  else if (c.avx512_bf16)
    c.reason = amx_insn ? "bf16: AVX512-BF16 present (AMX present but not enabled by the OS)"
                        : "bf16: AVX512-BF16 present (no AMX)";
  else if (avx512_insn)
    c.reason = "fp32: this CPU has AVX512-BF16 but the OS does not enable AVX-512 state";
  else
    c.reason = "fp32: this CPU has no bf16 instructions";
  return c;
}

remat__cpu_bf16 remat__cpu_bf16_get(void) {
  remat__cpuid_regs r = {0};
#ifdef HAVE_CPUID
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) r.l1_ecx = c;
  if (__get_cpuid_max(0, NULL) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    r.l7_ebx = b;
    r.l7_edx = d;
    const unsigned max_sub = a;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      r.l7s1_eax = a;
    }
  }
  if (r.l1_ecx & L1_ECX_OSXSAVE) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    r.xcr0 = ((uint64_t)hi << 32) | lo;
  }
#endif
  return remat__cpu_bf16_from(&r);
}
