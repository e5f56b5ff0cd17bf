/* cpu.c - CPU feature detection and the choice of the active dispatch table
 * (see cpu.h). Compiled without ISA flags: detection uses cpuid/xgetbv
 * (x86-64) or getauxval (aarch64) only.
 *
 * TS_KERNELS_X86 / TS_KERNELS_ARM are defined by the build when the x86 / arm
 * kernel files are compiled in (cmake/kernel_isa.cmake).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>

#include "kernels/cpu.h"
#include "kernels/qdot_impl.h"

#if defined(TS_KERNELS_X86)
#include <cpuid.h>
#endif
#if defined(TS_KERNELS_ARM)
#include <sys/auxv.h>
#endif

static const char *const level_names[TS_CPU_LEVEL_COUNT] = {
    [TS_CPU_SCALAR] = "scalar",
    [TS_CPU_AVX2] = "avx2",
    [TS_CPU_AVX512] = "avx512",
    [TS_CPU_NEON] = "neon",
};

const char *ts_cpu_level_name(ts_cpu_level l) {
    return (unsigned)l < TS_CPU_LEVEL_COUNT ? level_names[l] : "?";
}

int ts_cpu_level_parse(const char *s) {
    if (!s) return -1;
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++)
        if (strcasecmp(s, level_names[l]) == 0) return l;
    return -1;
}

/* ---- detection ---- */

#if defined(TS_KERNELS_X86)
/* XCR0 (which register state the OS saves on context switch). The mnemonic
 * is spelled as bytes so that no -mxsave flag is needed. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static ts_cpu_level detect_x86(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return TS_CPU_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return TS_CPU_SCALAR;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return TS_CPU_SCALAR; /* XMM + YMM state */
    if (__get_cpuid_max(0, NULL) < 7) return TS_CPU_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1;
    if (!(avx2 && fma && f16c)) return TS_CPU_SCALAR;
    const int f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    /* opmask (bit 5), upper halves of ZMM0-15 (6), ZMM16-31 (7) */
    const int os512 = (xcr0 & 0xe0) == 0xe0;
    if (f && bw && vl && vnni && os512) return TS_CPU_AVX512;
    return TS_CPU_AVX2;
}
#endif

#if defined(TS_KERNELS_ARM)
/* Linux arm64 hwcap bits (asm/hwcap.h), in case the libc headers lack them */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_FPHP
#define HWCAP_FPHP (1ul << 9)
#endif
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1ul << 10)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif

static ts_cpu_level detect_arm(void) {
    const unsigned long hw = getauxval(AT_HWCAP);
    const unsigned long need = HWCAP_ASIMD | HWCAP_ASIMDDP | HWCAP_FPHP | HWCAP_ASIMDHP;
    return (hw & need) == need ? TS_CPU_NEON : TS_CPU_SCALAR;
}
#endif

static ts_cpu_level detect(void) {
#if defined(TS_KERNELS_X86)
    return detect_x86();
#elif defined(TS_KERNELS_ARM)
    return detect_arm();
#else
    return TS_CPU_SCALAR;
#endif
}

static int rank(ts_cpu_level l) {
    switch (l) {
    case TS_CPU_AVX2: return 1;
    case TS_CPU_NEON: return 1;
    case TS_CPU_AVX512: return 2;
    default: return 0;
    }
}

ts_cpu_level ts_cpu_clamp(ts_cpu_level want, ts_cpu_level best) {
    if (best == TS_CPU_NEON) return rank(want) >= 1 ? TS_CPU_NEON : TS_CPU_SCALAR;
    /* the x86 chain scalar < avx2 < avx512 (or scalar alone) */
    const int r = rank(want) < rank(best) ? rank(want) : rank(best);
    return r == 2 ? TS_CPU_AVX512 : r == 1 ? TS_CPU_AVX2 : TS_CPU_SCALAR;
}

static const ts_kern *table(ts_cpu_level l) {
    switch (l) {
#if defined(TS_KERNELS_X86)
    case TS_CPU_AVX2: return &ts_kern_tab_avx2;
    case TS_CPU_AVX512: return &ts_kern_tab_avx512;
#endif
#if defined(TS_KERNELS_ARM)
    case TS_CPU_NEON: return &ts_kern_tab_neon;
#endif
    default: return &ts_kern_tab_scalar;
    }
}

/* ---- selection, once ---- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ts_cpu_level g_best = TS_CPU_SCALAR;      /* written once under g_once */
static const ts_kern *_Atomic g_active = NULL; /* may be re-set by tests */

static void init_once(void) {
    g_best = detect();
    ts_cpu_level l = g_best;
    const int want = ts_cpu_level_parse(getenv("TS_CPU_LEVEL"));
    if (want >= 0) l = ts_cpu_clamp((ts_cpu_level)want, g_best);
    atomic_store(&g_active, table(l));
}

ts_cpu_level ts_cpu_detect(void) {
    pthread_once(&g_once, init_once);
    return g_best;
}

const ts_kern *ts_kern_get(void) {
    pthread_once(&g_once, init_once);
    return atomic_load_explicit(&g_active, memory_order_acquire);
}

ts_cpu_level ts_cpu_level_active(void) {
    return ts_kern_get()->level;
}

ts_cpu_level ts_cpu_force_level(ts_cpu_level want) {
    pthread_once(&g_once, init_once);
    const ts_cpu_level l = ts_cpu_clamp(want, g_best);
    atomic_store(&g_active, table(l));
    return l;
}

const ts_kern *ts_kern_for_level(ts_cpu_level l) {
    if ((unsigned)l >= TS_CPU_LEVEL_COUNT) return NULL;
    return ts_cpu_clamp(l, ts_cpu_detect()) == l ? table(l) : NULL;
}
