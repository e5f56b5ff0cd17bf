/* cpu.c - CPU feature detection and the choice of the active dispatch table
 * (see cpu.h). Compiled without ISA flags: detection uses cpuid/xgetbv
 * (x86-64) or getauxval (aarch64 Linux) only.
 *
 * TS_KERNELS_X86 / TS_KERNELS_ARM are defined by the build when the x86 / arm
 * kernel files are compiled in (cmake/kernel_isa.cmake): they decide which
 * tables exist; the features are detected whatever the build holds.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* syscall() */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu.h"
#include "kernels/qdot_impl.h"

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
#if defined(__aarch64__) && defined(__linux__)
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

/* ---- feature names ---- */

static const char *const feat_names[64] = {
    [0] = "sse",          [1] = "sse2",          [2] = "sse3",         [3] = "ssse3",
    [4] = "sse4_1",       [5] = "sse4_2",        [6] = "avx",          [7] = "avx2",
    [8] = "fma",          [9] = "f16c",          [10] = "bmi2",        [11] = "avx_vnni",
    [12] = "avx512f",     [13] = "avx512dq",     [14] = "avx512bw",    [15] = "avx512vl",
    [16] = "avx512_vnni", [17] = "avx512_bf16",  [18] = "avx512_fp16", [19] = "amx_tile",
    [20] = "amx_int8",    [21] = "amx_bf16",
    [32] = "neon",        [33] = "fp16",         [34] = "dotprod",     [35] = "i8mm",
    [36] = "bf16",        [37] = "sve",          [38] = "sve2",        [39] = "sme",
};

const char *ts_cpu_feat_name(ts_cpu_feat bit) {
    if (!bit || (bit & (bit - 1))) return "?";
    const int n = __builtin_ctzll(bit);
    return feat_names[n] ? feat_names[n] : "?";
}

size_t ts_cpu_feat_str(ts_cpu_feat f, char *buf, size_t cap) {
    size_t need = 0, used = 0; /* used: bytes written, without the terminator */
    int fits = 1;
    for (int n = 0; n < 64; n++) {
        if (!(f & TS_FEAT_BIT(n)) || !feat_names[n]) continue;
        const size_t len = strlen(feat_names[n]) + (need ? 1 : 0);
        if (fits && buf && used + len < cap) {
            if (need) buf[used++] = ',';
            memcpy(buf + used, feat_names[n], len - (need ? 1 : 0));
            used += len - (need ? 1 : 0);
        } else {
            fits = 0;
        }
        need += len;
    }
    if (buf && cap) buf[used] = '\0';
    return need;
}

/* ---- detection: features ---- */

#if defined(__x86_64__)
/* XCR0 (which register state the OS saves on context switch). The mnemonic
 * is spelled as bytes so that no -mxsave flag is needed. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Linux keeps AMX tile data (XCR0 bit 18, XFEATURE_XTILEDATA) off for a
 * process until it asks: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
 * The request is idempotent and process-wide; it is made once, from
 * detect() (under the pthread_once of the selection), and only on a CPU
 * whose cpuid and XCR0 report AMX. It fails on kernels before 5.16 (no
 * dynamic xstate: no AMX for user space) and where a thread's sigaltstack
 * is too small for the larger signal frame. */
#define TS_ARCH_REQ_XCOMP_PERM 0x1023
#define TS_XFEATURE_XTILEDATA 18
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, TS_ARCH_REQ_XCOMP_PERM, TS_XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}

static ts_cpu_feat detect_x86(void) {
    unsigned a, b, c, d;
    ts_cpu_feat f = 0;
    const unsigned max = __get_cpuid_max(0, NULL);
    if (max < 1) return 0;
    __cpuid(1, a, b, c, d);
    if ((d >> 25) & 1) f |= TS_FEAT_SSE;
    if ((d >> 26) & 1) f |= TS_FEAT_SSE2;
    if (c & 1) f |= TS_FEAT_SSE3;
    if ((c >> 9) & 1) f |= TS_FEAT_SSSE3;
    if ((c >> 19) & 1) f |= TS_FEAT_SSE4_1;
    if ((c >> 20) & 1) f |= TS_FEAT_SSE4_2;
    const int osxsave = (c >> 27) & 1;
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const int os_avx = (xcr0 & 0x6) == 0x6;                   /* XMM + YMM state */
    const int os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;    /* opmask, ZMM0-15 upper, ZMM16-31 */
    const int os_amx = (xcr0 & (3ull << 17)) == (3ull << 17); /* XTILECFG + XTILEDATA */
    if (os_avx) {
        if ((c >> 28) & 1) f |= TS_FEAT_AVX;
        if ((c >> 12) & 1) f |= TS_FEAT_FMA;
        if ((c >> 29) & 1) f |= TS_FEAT_F16C;
    }
    if (max < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max7 = a;
    const unsigned b7 = b, c7 = c, d7 = d;
    if ((b7 >> 8) & 1) f |= TS_FEAT_BMI2;
    if (os_avx && ((b7 >> 5) & 1)) f |= TS_FEAT_AVX2;
    if (os_avx512) {
        if ((b7 >> 16) & 1) f |= TS_FEAT_AVX512F;
        if ((b7 >> 17) & 1) f |= TS_FEAT_AVX512DQ;
        if ((b7 >> 30) & 1) f |= TS_FEAT_AVX512BW;
        if ((b7 >> 31) & 1) f |= TS_FEAT_AVX512VL;
        if ((c7 >> 11) & 1) f |= TS_FEAT_AVX512_VNNI;
        if ((d7 >> 23) & 1) f |= TS_FEAT_AVX512_FP16;
    }
    if (max7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if (os_avx && ((a >> 4) & 1)) f |= TS_FEAT_AVX_VNNI;
        if (os_avx512 && ((a >> 5) & 1)) f |= TS_FEAT_AVX512_BF16;
    }
    /* AMX: tile (d bit 24), int8 (25), bf16 (22) */
    ts_cpu_feat amx = 0;
    if ((d7 >> 24) & 1) amx |= TS_FEAT_AMX_TILE;
    if ((d7 >> 25) & 1) amx |= TS_FEAT_AMX_INT8;
    if ((d7 >> 22) & 1) amx |= TS_FEAT_AMX_BF16;
    if ((amx & TS_FEAT_AMX_TILE) && os_amx && amx_permitted()) f |= amx;
    return f;
}
#endif

#if defined(__aarch64__) && defined(__linux__)
/* Linux arm64 hwcap bits (asm/hwcap.h), in case the libc headers lack them */
#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif
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
#ifndef HWCAP_SVE
#define HWCAP_SVE (1ul << 22)
#endif
#ifndef HWCAP2_SVE2
#define HWCAP2_SVE2 (1ul << 1)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1ul << 14)
#endif
#ifndef HWCAP2_SME
#define HWCAP2_SME (1ul << 23)
#endif

static ts_cpu_feat detect_arm(void) {
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    ts_cpu_feat f = 0;
    if (hw & HWCAP_ASIMD) f |= TS_FEAT_NEON;
    if ((hw & (HWCAP_FPHP | HWCAP_ASIMDHP)) == (HWCAP_FPHP | HWCAP_ASIMDHP)) f |= TS_FEAT_FP16;
    if (hw & HWCAP_ASIMDDP) f |= TS_FEAT_DOTPROD;
    if (hw & HWCAP_SVE) f |= TS_FEAT_SVE;
    if (hw2 & HWCAP2_SVE2) f |= TS_FEAT_SVE2;
    if (hw2 & HWCAP2_I8MM) f |= TS_FEAT_I8MM;
    if (hw2 & HWCAP2_BF16) f |= TS_FEAT_BF16;
    if (hw2 & HWCAP2_SME) f |= TS_FEAT_SME;
    return f;
}
#endif

/* 1 when cpuid's vendor string is "AuthenticAMD" (ts_cpu_decode_prefetch) */
static int detect_amd(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "Auth" "enti" "cAMD" */
#else
    return 0;
#endif
}

static ts_cpu_feat detect_features(void) {
#if defined(__x86_64__)
    return detect_x86();
#elif defined(__aarch64__) && defined(__linux__)
    return detect_arm();
#else
    return 0;
#endif
}

/* ---- levels: requirements, scores, the tables of this build ---- */

static const struct {
    ts_cpu_feat requires;
    int score;
} level_info[TS_CPU_LEVEL_COUNT] = {
    [TS_CPU_SCALAR] = {TS_CPU_REQ_SCALAR, TS_CPU_SCORE_SCALAR},
    [TS_CPU_AVX2] = {TS_CPU_REQ_AVX2, TS_CPU_SCORE_AVX2},
    [TS_CPU_AVX512] = {TS_CPU_REQ_AVX512, TS_CPU_SCORE_AVX512},
    [TS_CPU_NEON] = {TS_CPU_REQ_NEON, TS_CPU_SCORE_NEON},
};

ts_cpu_feat ts_cpu_level_requires(ts_cpu_level l) {
    return (unsigned)l < TS_CPU_LEVEL_COUNT ? level_info[l].requires : 0;
}

int ts_cpu_level_score(ts_cpu_level l) {
    return (unsigned)l < TS_CPU_LEVEL_COUNT ? level_info[l].score : 0;
}

/* every table this build contains; scalar first */
static const ts_kern *const tables[] = {
    &ts_kern_tab_scalar,
#if defined(TS_KERNELS_X86)
    &ts_kern_tab_avx2,
    &ts_kern_tab_avx512,
#endif
#if defined(TS_KERNELS_ARM)
    &ts_kern_tab_neon,
#endif
};
#define N_TABLES (sizeof tables / sizeof tables[0])

static const ts_kern *built(ts_cpu_level l) {
    for (size_t i = 0; i < N_TABLES; i++)
        if (tables[i]->level == l) return tables[i];
    return NULL;
}

static const ts_kern *table(ts_cpu_level l) {
    const ts_kern *k = built(l);
    return k ? k : &ts_kern_tab_scalar;
}

ts_cpu_level ts_cpu_select(ts_cpu_feat have) {
    const ts_kern *best = &ts_kern_tab_scalar;
    for (size_t i = 0; i < N_TABLES; i++) {
        const ts_kern *k = tables[i];
        if ((k->requires & ~have) == 0 &&
            (k->score > best->score || (k->score == best->score && k->level < best->level)))
            best = k;
    }
    return best->level;
}

ts_cpu_level ts_cpu_clamp(ts_cpu_level want, ts_cpu_level best) {
    const ts_cpu_feat under = ts_cpu_level_requires(best);
    const int cap = ts_cpu_level_score(want);
    ts_cpu_level r = TS_CPU_SCALAR;
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        const int s = level_info[l].score;
        if ((level_info[l].requires & ~under) == 0 && s <= cap && s > level_info[r].score) r = (ts_cpu_level)l;
    }
    return r;
}

/* ---- selection, once ---- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ts_cpu_feat g_feat = 0;                  /* written once under g_once */
static ts_cpu_level g_best = TS_CPU_SCALAR;     /* ditto */
static const ts_kern *_Atomic g_active = NULL; /* may be re-set by tests */
static int g_amd = 0;                            /* written once under g_once */
static int g_pf_env = -2;                        /* TS_PREFETCH: -2 unset, -1 off, else bytes */
static _Atomic int g_pf = 4096;                  /* ts_cpu_decode_prefetch; follows the level */

static int parse_prefetch(const char *s) {
    if (!s || !*s) return -2;
    if (!strcmp(s, "off")) return -1;
    char *end = NULL;
    const long v = strtol(s, &end, 10);
    return *end || v < 0 || v > 65536 ? -2 : (int)v;
}

static void set_level(ts_cpu_level l) {
    atomic_store(&g_pf, g_pf_env != -2 ? g_pf_env : l == TS_CPU_AVX512 && g_amd ? 0 : 4096);
    atomic_store(&g_active, table(l));
}

static void init_once(void) {
    g_feat = detect_features();
    g_amd = detect_amd();
    g_pf_env = parse_prefetch(getenv("TS_PREFETCH"));
    g_best = ts_cpu_select(g_feat);
    ts_cpu_level l = g_best;
    const int want = ts_cpu_level_parse(getenv("TS_CPU_LEVEL"));
    if (want >= 0) l = ts_cpu_clamp((ts_cpu_level)want, g_best);
    set_level(l);
}

int ts_cpu_decode_prefetch(void) {
    pthread_once(&g_once, init_once);
    return atomic_load_explicit(&g_pf, memory_order_relaxed);
}

ts_cpu_feat ts_cpu_features(void) {
    pthread_once(&g_once, init_once);
    return g_feat;
}

size_t ts_cpu_features_str(char *buf, size_t cap) {
    return ts_cpu_feat_str(ts_cpu_features(), buf, cap);
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

ts_cpu_feat ts_cpu_features_active(void) {
    const ts_kern *k = ts_kern_get();
    return k->level == g_best ? g_feat : g_feat & k->requires;
}

ts_cpu_level ts_cpu_force_level(ts_cpu_level want) {
    pthread_once(&g_once, init_once);
    const ts_cpu_level l = ts_cpu_clamp(want, g_best);
    set_level(l);
    return l;
}

const ts_kern *ts_kern_for_level(ts_cpu_level l) {
    if ((unsigned)l >= TS_CPU_LEVEL_COUNT) return NULL;
    const ts_kern *k = built(l);
    return k && (k->requires & ~ts_cpu_features()) == 0 ? k : NULL;
}
