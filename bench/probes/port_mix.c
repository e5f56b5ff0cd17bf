/* port_mix.c - a probe, not part of the build: which zmm instructions compete
 * with vpdpbusd for the same execution ports. Each test runs, per loop
 * iteration, 8 independent vpdpbusd chains plus 8 independent chains of
 * one other instruction (or none), one thread; the cycles per iteration
 * (at the clock given, default 3.63 GHz: the vpdpbusd probe's rate) say
 * whether the other instruction rides along for free (~8) or takes a
 * vpdpbusd slot (~16). On an AMD EPYC (Zen 4) vmulps, vfmadd231ps and
 * vpmaddwd cost a slot each; vcvtdq2ps (with a vpaddd) half of one;
 * vaddps, shifts (vpsrld, vpsllvd), vpandd and vpaddd none; vpmulld ~2
 * (docs/PERFORMANCE.md, session 32). That is why the K-quant q8 kernels use shifts, not
 * multiplies, for lo256's per-block scales (repack.h).
 *
 *   gcc -O2 -march=native bench/probes/port_mix.c -o /tmp/pm && /tmp/pm [GHz]
 * Needs AVX-512 VNNI. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 40000000L
#define EIGHT(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) /* 3 x 8 chains + 3 constants: no spills */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* one test: DP vpdpbusd chains (0 or 1: eight of them) and OP on the eight
 * chains m (int) / f (float); the asm statements keep every chain live */
#define TEST(name, DP, OP)                                                                        \
    static double name(void) {                                                                    \
        const __m512i u = _mm512_set1_epi32(0x01010101), x = _mm512_set1_epi32(0x02020202);        \
        const __m512 h = _mm512_set1_ps(0.5f);                                                    \
        EIGHT(DECL)                                                                                 \
        const double t0 = now();                                                                  \
        for (long it = 0; it < N; it++) {                                                         \
            if (DP) { EIGHT(DPB) }                                                                  \
            EIGHT(OP)                                                                               \
            EIGHT(KEEP)                                                                             \
        }                                                                                         \
        const double t = now() - t0;                                                              \
        EIGHT(SINK)                                                                                 \
        (void)u, (void)x, (void)h;                                                                \
        return t / N;                                                                             \
    }
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i), m##i = _mm512_set1_epi32(i); __m512 f##i = _mm512_set1_ps((float)i);
#define DPB(i) a##i = _mm512_dpbusd_epi32(a##i, u, x);
#define KEEP(i) __asm__ volatile("" : "+v"(a##i), "+v"(m##i), "+v"(f##i));
#define SINK(i) __asm__ volatile("" ::"v"(a##i), "v"(m##i), "v"(f##i));

#define NONE(i)
#define FMA(i) f##i = _mm512_fmadd_ps(f##i, h, h);
#define MUL(i) f##i = _mm512_mul_ps(f##i, h);
#define ADD(i) f##i = _mm512_add_ps(f##i, h);
#define CVT(i) f##i = _mm512_cvtepi32_ps(m##i); m##i = _mm512_add_epi32(m##i, u);
#define MULLD(i) m##i = _mm512_mullo_epi32(m##i, u);
#define MADDWD(i) m##i = _mm512_madd_epi16(m##i, u);
#define SLLV(i) m##i = _mm512_sllv_epi32(m##i, u);
#define SRLI(i) m##i = _mm512_srli_epi32(m##i, 3);
#define AND(i) m##i = _mm512_and_si512(m##i, u);
#define PADD(i) m##i = _mm512_add_epi32(m##i, u);

TEST(t_dp, 1, NONE)
TEST(t_fma, 1, FMA)
TEST(t_mul, 1, MUL)
TEST(t_add, 1, ADD)
TEST(t_cvt, 1, CVT)
TEST(t_mulld, 1, MULLD)
TEST(t_maddwd, 1, MADDWD)
TEST(t_sllv, 1, SLLV)
TEST(t_srli, 1, SRLI)
TEST(t_and, 1, AND)
TEST(t_padd, 1, PADD)
TEST(t_fma_alone, 0, FMA)
TEST(t_mulld_alone, 0, MULLD)

int main(int argc, char **argv) {
    const double ghz = argc > 1 ? atof(argv[1]) : 3.63;
    static const struct {
        const char *name;
        double (*fn)(void);
    } tests[] = {{"8 vpdpbusd", t_dp},           {"+ 8 vfmadd231ps", t_fma},  {"+ 8 vmulps", t_mul},
                 {"+ 8 vaddps", t_add},          {"+ 8 vcvtdq2ps + vpaddd", t_cvt}, {"+ 8 vpmulld", t_mulld},
                 {"+ 8 vpmaddwd", t_maddwd},     {"+ 8 vpsllvd", t_sllv},     {"+ 8 vpsrld", t_srli},
                 {"+ 8 vpandd", t_and},          {"+ 8 vpaddd", t_padd},      {"8 vfmadd231ps alone", t_fma_alone},
                 {"8 vpmulld alone", t_mulld_alone}};
    printf("| zmm instructions per iteration | ns | cycles at %.2f GHz |\n|---|---:|---:|\n", ghz);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const double t = tests[i].fn();
        printf("| %s | %.3f | %.1f |\n", tests[i].name, t * 1e9, t * 1e9 * ghz);
    }
    return 0;
}
