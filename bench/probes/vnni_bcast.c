/* vnni_bcast.c - a probe, not part of the build: the 8-bit panel kernel's
 * inner block (16 rows x 8 tokens x 32 inputs: 4 nibble pairs unpacked, 64
 * vpdpbusd in 8 dependent chains, one convert + FMA per token) with the
 * token's 4 activation bytes broadcast two ways, one thread, to see what the
 * compiler's choice costs (docs/PERFORMANCE.md, session 28):
 *   intrinsic  _mm512_dpbusd_epi32(a, u, _mm512_set1_epi32(load)): gcc 12
 *              emits vpbroadcastd + a register vpdpbusd, clang folds the load
 *   folded     vpdpbusd with a {1to16} memory operand, written out (asm)
 *
 *   gcc -O2 -march=native bench/probes/vnni_bcast.c -o /tmp/vb && /tmp/vb
 *   clang -O2 -march=native bench/probes/vnni_bcast.c -o /tmp/vbc && /tmp/vbc
 * Needs AVX-512 VNNI. */
#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define AI static inline __attribute__((always_inline))

static unsigned char tile[16384] __attribute__((aligned(64)));
static unsigned char wq[16384] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

AI __m512i dp_intrinsic(__m512i a, __m512i u, const unsigned char *p) {
    int v;
    memcpy(&v, p, 4);
    return _mm512_dpbusd_epi32(a, u, _mm512_set1_epi32(v));
}
AI __m512i dp_folded(__m512i a, __m512i u, const unsigned char *p) {
    __asm__("vpdpbusd %1%{1to16%}, %2, %0" : "+v"(a) : "m"(*(const int(*)[1])p), "v"(u));
    return a;
}

#define BLOCKS(name, DP)                                                                                   \
    __attribute__((noinline)) static float name(long n) {                                                 \
        __m512 f[8];                                                                                       \
        for (int t = 0; t < 8; t++) f[t] = _mm512_setzero_ps();                                            \
        const __m512i m4 = _mm512_set1_epi8(15);                                                           \
        for (long i = 0; i < n; i++) {                                                                     \
            const unsigned char *x = tile + (i & 31) * 512, *q = wq + (i & 31) * 256;                      \
            __m512i a[8];                                                                                  \
            _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) a[t] = _mm512_setzero_si512();             \
            _Pragma("GCC unroll 4") for (int v = 0; v < 8; v += 2) {                                       \
                const __m512i raw = _mm512_loadu_si512((const void *)(q + 32 * v));                        \
                const __m512i u0 = _mm512_and_si512(raw, m4), u1 = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4); \
                _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) {                                      \
                    a[t] = DP(a[t], u0, x + 32 * t + 4 * v);                                               \
                    a[t] = DP(a[t], u1, x + 32 * t + 4 * v + 4);                                           \
                }                                                                                          \
            }                                                                                              \
            _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) f[t] =                                     \
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[t]), _mm512_set1_ps(1.0f + 1e-9f * x[256 + 4 * t]), f[t]); \
        }                                                                                                  \
        __m512 s = f[0];                                                                                   \
        for (int t = 1; t < 8; t++) s = _mm512_add_ps(s, f[t]);                                            \
        return _mm512_reduce_add_ps(s);                                                                    \
    }
BLOCKS(run_intrinsic, dp_intrinsic)
BLOCKS(run_folded, dp_folded)

int main(void) {
    const long n = 20000000;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        float a = run_intrinsic(n);
        const double ti = now() - t0;
        t0 = now();
        float b = run_folded(n);
        const double tf = now() - t0;
        printf("ns per block: intrinsic %.2f, folded %.2f (%d)\n", ti / (double)n * 1e9, tf / (double)n * 1e9,
               (int)(a + b) & 1);
    }
    return 0;
}
