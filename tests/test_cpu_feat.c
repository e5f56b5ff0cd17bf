/* test_cpu_feat.c - CPU features as bits and the choice of kernels made from
 * them (src/kernels/cpu.c), and the registry of matmul variants
 * (src/kernels/linear.c):
 *   - feature bits: names, the comma list, what every architecture must
 *     have, and the implications detection guarantees (AVX-512 bits only
 *     with the AVX2 set, AMX bits only with the tile bit, ...);
 *   - features vs levels: every runnable table's requirements are in the
 *     features (avx512 => AVX512F|BW|VL|VNNI, neon => NEON|DOTPROD|FP16),
 *     every table of the build whose requirements are there is runnable,
 *     and the tables carry the requirements and scores cpu.h states;
 *   - scoring: the detected level is ts_cpu_select(features), the best
 *     score among the runnable tables; ts_cpu_select on made-up feature
 *     sets (a Skylake-X without VNNI gets avx2, a core without dotprod
 *     scalar, ...);
 *   - TS_CPU_LEVEL: ts_cpu_clamp equals the rank ladder it replaced
 *     (scalar 0, avx2 1, neon 1, avx512 2) on every pair of levels, the
 *     environment's choice is in force at the first call, forcing a level
 *     gives the clamp, and a lowered level restricts the features kernels
 *     may use to that table's requirements;
 *   - matmul variants: the list is non-empty, names "panels", "rows" and
 *     "ref" (each with a reference and a bound), and a matrix is given to
 *     the variant its type calls for: packed -> panels, F16 (no panel
 *     layout) -> rows at both precisions, an unpacked Q2_K (every quant
 *     type has panels now; a matrix not packed keeps its GGUF rows) -> rows
 *     at the lo precision and ref at hi, BF16 -> rows; ts_linear's results on those equal the
 *     variant's kernel called directly, bit for bit;
 *   - the decode prefetch distance: 0 at avx512 on AMD (vendor from
 *     /proc/cpuinfo), 4096 at the other levels and vendors; a valid
 *     TS_PREFETCH (off, 0..65536) fixes it at every level, junk is ignored.
 *
 * Usage: test_cpu_feat [--expect-level NAME]
 *   --expect-level NAME  fail unless ts_cpu_detect() is NAME (emulated CPUs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/linear.h"
#include "kernels/qdot.h"
#include "kernels/repack.h"
#include "quant/quant.h"

#include "check.h"

#define X86_BITS ((ts_cpu_feat)0xffffffffu)
#define ARM_BITS (~X86_BITS)

/* the clamp of cpu.c before the feature bits (ranks: scalar 0, avx2 1,
 * neon 1, avx512 2; neon is a chain of its own), kept as the oracle */
static int old_rank(int l) { return l == TS_CPU_AVX2 || l == TS_CPU_NEON ? 1 : l == TS_CPU_AVX512 ? 2 : 0; }
static int old_clamp(int want, int best) {
    if (best == TS_CPU_NEON) return old_rank(want) >= 1 ? TS_CPU_NEON : TS_CPU_SCALAR;
    const int r = old_rank(want) < old_rank(best) ? old_rank(want) : old_rank(best);
    return r == 2 ? TS_CPU_AVX512 : r == 1 ? TS_CPU_AVX2 : TS_CPU_SCALAR;
}

static int has(ts_cpu_feat f, ts_cpu_feat need) { return (f & need) == need; }

/* ---- features ---- */

static void test_names(void) {
    int named = 0;
    for (int n = 0; n < 64; n++) {
        const char *s = ts_cpu_feat_name(TS_FEAT_BIT(n));
        if (strcmp(s, "?") == 0) continue;
        named++;
        CHECK(s[0] && !strchr(s, ','), "bit %d name '%s'", n, s);
        for (int m = 0; m < n; m++) CHECK(strcmp(s, ts_cpu_feat_name(TS_FEAT_BIT(m))) != 0, "bits %d, %d share '%s'", m, n, s);
    }
    CHECK(named >= 30, "only %d named bits", named);
    CHECK(strcmp(ts_cpu_feat_name(0), "?") == 0, "name of no bit");
    CHECK(strcmp(ts_cpu_feat_name(TS_FEAT_AVX2 | TS_FEAT_FMA), "?") == 0, "name of two bits");
    CHECK(strcmp(ts_cpu_feat_name(TS_FEAT_BIT(63)), "?") == 0, "name of an unused bit");
    const struct {
        ts_cpu_feat bit;
        const char *name;
    } known[] = {
        {TS_FEAT_SSE, "sse"},           {TS_FEAT_AVX2, "avx2"},         {TS_FEAT_FMA, "fma"},
        {TS_FEAT_F16C, "f16c"},         {TS_FEAT_AVX512F, "avx512f"},   {TS_FEAT_AVX512BW, "avx512bw"},
        {TS_FEAT_AVX512VL, "avx512vl"}, {TS_FEAT_AVX512_VNNI, "avx512_vnni"},
        {TS_FEAT_AVX512_BF16, "avx512_bf16"}, {TS_FEAT_AVX_VNNI, "avx_vnni"}, {TS_FEAT_AMX_TILE, "amx_tile"},
        {TS_FEAT_AMX_INT8, "amx_int8"}, {TS_FEAT_AMX_BF16, "amx_bf16"}, {TS_FEAT_NEON, "neon"},
        {TS_FEAT_DOTPROD, "dotprod"},   {TS_FEAT_FP16, "fp16"},         {TS_FEAT_I8MM, "i8mm"},
        {TS_FEAT_SVE, "sve"},           {TS_FEAT_SME, "sme"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        CHECK(strcmp(ts_cpu_feat_name(known[i].bit), known[i].name) == 0, "name of %s: %s", known[i].name,
              ts_cpu_feat_name(known[i].bit));

    char buf[64];
    size_t n = ts_cpu_feat_str(TS_FEAT_FMA | TS_FEAT_AVX2 | TS_FEAT_DOTPROD, buf, sizeof buf);
    CHECK(n == 16 && strcmp(buf, "avx2,fma,dotprod") == 0, "list: '%s' (%zu)", buf, n);
    n = ts_cpu_feat_str(0, buf, sizeof buf);
    CHECK(n == 0 && buf[0] == '\0', "empty list: '%s'", buf);
    n = ts_cpu_feat_str(TS_FEAT_AVX2 | TS_FEAT_FMA, buf, 8); /* "avx2,fma" needs 9 bytes */
    CHECK(n == 8 && strcmp(buf, "avx2") == 0, "cut list: '%s' (%zu)", buf, n);
    memset(buf, 'x', sizeof buf);
    n = ts_cpu_feat_str(TS_FEAT_AVX2, buf, 0);
    CHECK(n == 4 && buf[0] == 'x', "cap 0 writes nothing");
    CHECK(ts_cpu_feat_str(TS_FEAT_AVX2 | TS_FEAT_BIT(63), NULL, 0) == 4, "unnamed bits are left out");
}

static void test_features(void) {
    const ts_cpu_feat f = ts_cpu_features();
    CHECK(f == ts_cpu_features(), "cached");
    char buf[512];
    const size_t n = ts_cpu_features_str(buf, sizeof buf);
    CHECK(n < sizeof buf && strlen(buf) == n, "features list length");
    char buf2[512];
    ts_cpu_feat_str(f, buf2, sizeof buf2);
    CHECK(strcmp(buf, buf2) == 0, "ts_cpu_features_str = ts_cpu_feat_str(ts_cpu_features())");
    printf("features: %s\n", buf[0] ? buf : "(none)");
#if defined(__x86_64__)
    CHECK(has(f, TS_FEAT_SSE | TS_FEAT_SSE2), "x86-64 without SSE2");
    CHECK(!(f & ARM_BITS), "aarch64 bits on x86-64");
#elif defined(__aarch64__) && defined(__linux__)
    CHECK(has(f, TS_FEAT_NEON), "aarch64 Linux without AdvSIMD");
    CHECK(!(f & X86_BITS), "x86 bits on aarch64");
#endif
    /* detection sets a VEX / EVEX bit only with the OS state of its registers */
    const ts_cpu_feat vex = TS_FEAT_AVX2 | TS_FEAT_FMA | TS_FEAT_F16C | TS_FEAT_AVX_VNNI;
    const ts_cpu_feat evex = TS_FEAT_AVX512F | TS_FEAT_AVX512DQ | TS_FEAT_AVX512BW | TS_FEAT_AVX512VL |
                             TS_FEAT_AVX512_VNNI | TS_FEAT_AVX512_BF16 | TS_FEAT_AVX512_FP16;
    const ts_cpu_feat amx = TS_FEAT_AMX_TILE | TS_FEAT_AMX_INT8 | TS_FEAT_AMX_BF16;
    CHECK(!(f & (vex | evex)) || (f & TS_FEAT_AVX), "AVX-family bits without AVX");
    CHECK(!(f & amx) || (f & TS_FEAT_AMX_TILE), "AMX int8/bf16 without the tile bit");
    CHECK(!(f & TS_FEAT_SVE2) || (f & TS_FEAT_SVE), "SVE2 without SVE");
}

/* ---- levels ---- */

static void test_levels(const char *expect) {
    const ts_cpu_feat f = ts_cpu_features();
    const ts_cpu_level best = ts_cpu_detect();
    CHECK(best == ts_cpu_select(f), "detect = select(features)");
    CHECK(has(f, ts_cpu_level_requires(best)), "the detected level's requirements are in the features");
    if (best == TS_CPU_AVX512)
        CHECK(has(f, TS_FEAT_AVX512F | TS_FEAT_AVX512BW | TS_FEAT_AVX512VL | TS_FEAT_AVX512_VNNI | TS_FEAT_AVX2 |
                         TS_FEAT_FMA | TS_FEAT_F16C),
              "avx512 without its bits");
    if (best == TS_CPU_AVX2) CHECK(has(f, TS_FEAT_AVX2 | TS_FEAT_FMA | TS_FEAT_F16C), "avx2 without its bits");
    if (best == TS_CPU_NEON) CHECK(has(f, TS_FEAT_NEON | TS_FEAT_DOTPROD | TS_FEAT_FP16), "neon without its bits");
    /* cpu.h's requirements, as the tables of levels state them */
    CHECK(ts_cpu_level_requires(TS_CPU_SCALAR) == 0 && ts_cpu_level_score(TS_CPU_SCALAR) == 0, "scalar");
    CHECK(has(ts_cpu_level_requires(TS_CPU_AVX512),
              ts_cpu_level_requires(TS_CPU_AVX2) | TS_FEAT_AVX512F | TS_FEAT_AVX512BW | TS_FEAT_AVX512VL |
                  TS_FEAT_AVX512_VNNI),
          "avx512 requirements");
    CHECK(has(ts_cpu_level_requires(TS_CPU_AVX2), TS_FEAT_AVX2 | TS_FEAT_FMA | TS_FEAT_F16C), "avx2 requirements");
    CHECK(has(ts_cpu_level_requires(TS_CPU_NEON), TS_FEAT_NEON | TS_FEAT_DOTPROD | TS_FEAT_FP16), "neon requirements");
    CHECK(ts_cpu_level_requires((ts_cpu_level)99) == 0 && ts_cpu_level_score((ts_cpu_level)99) == 0, "junk level");

    int runnable = 0;
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        const ts_kern *k = ts_kern_for_level((ts_cpu_level)l);
        const ts_cpu_feat req = ts_cpu_level_requires((ts_cpu_level)l);
        if (!k) {
            /* not runnable: a requirement is missing, or the build lacks the table */
            CHECK(!has(f, req) || ts_cpu_select(req) != (ts_cpu_level)l, "%s: requirements met, in the build, yet "
                  "no table", ts_cpu_level_name((ts_cpu_level)l));
            continue;
        }
        runnable++;
        CHECK(k->level == (ts_cpu_level)l, "table level");
        CHECK(k->requires == req && k->score == ts_cpu_level_score((ts_cpu_level)l),
              "%s: the table states other requirements or score than cpu.h", ts_cpu_level_name((ts_cpu_level)l));
        CHECK(has(f, k->requires), "%s runnable without its features", ts_cpu_level_name((ts_cpu_level)l));
        CHECK(k->score <= ts_cpu_level_score(best), "%s scores above the detected %s", ts_cpu_level_name(k->level),
              ts_cpu_level_name(best));
        CHECK(k->score < ts_cpu_level_score(best) || k->level >= best, "tie not broken towards the lower level");
    }
    CHECK(runnable >= 1 && ts_kern_for_level(TS_CPU_SCALAR), "scalar always runs");
    CHECK(ts_kern_for_level(best) != NULL, "the detected level runs");
    if (expect)
        CHECK(ts_cpu_level_parse(expect) == (int)best, "detected level %s, expected %s", ts_cpu_level_name(best),
              expect);
    printf("detected level %s (score %d); %d runnable table(s)\n", ts_cpu_level_name(best), ts_cpu_level_score(best),
           runnable);
}

static void test_select(void) {
    const ts_cpu_feat r2 = ts_cpu_level_requires(TS_CPU_AVX2), r5 = ts_cpu_level_requires(TS_CPU_AVX512),
                      rn = ts_cpu_level_requires(TS_CPU_NEON);
    CHECK(ts_cpu_select(0) == TS_CPU_SCALAR, "no features");
#if defined(__x86_64__)
    CHECK(ts_cpu_select(~(ts_cpu_feat)0) == TS_CPU_AVX512, "everything: %s", ts_cpu_level_name(ts_cpu_select(~0ull)));
    CHECK(ts_cpu_select(r5) == TS_CPU_AVX512, "exactly avx512's");
    CHECK(ts_cpu_select(r5 | TS_FEAT_AMX_TILE | TS_FEAT_AMX_INT8 | TS_FEAT_AVX_VNNI) == TS_CPU_AVX512, "Sapphire Rapids");
    CHECK(ts_cpu_select(r5 & ~TS_FEAT_AVX512_VNNI) == TS_CPU_AVX2, "Skylake-X (no VNNI) -> avx2");
    CHECK(ts_cpu_select(r2) == TS_CPU_AVX2, "exactly avx2's");
    CHECK(ts_cpu_select(r2 | TS_FEAT_AVX512F) == TS_CPU_AVX2, "AVX512F alone");
    CHECK(ts_cpu_select(r2 & ~TS_FEAT_FMA) == TS_CPU_SCALAR, "no FMA -> scalar");
    CHECK(ts_cpu_select(TS_FEAT_SSE | TS_FEAT_SSE2 | TS_FEAT_SSE4_2 | TS_FEAT_AVX) == TS_CPU_SCALAR, "Sandy Bridge");
    CHECK(ts_cpu_select(rn | r2) == TS_CPU_AVX2, "neon bits on an x86 build");
    CHECK(ts_cpu_select(rn) == TS_CPU_SCALAR, "no neon table on x86");
#elif defined(__aarch64__) && defined(__linux__)
    CHECK(ts_cpu_select(~(ts_cpu_feat)0) == TS_CPU_NEON, "everything");
    CHECK(ts_cpu_select(rn) == TS_CPU_NEON, "exactly neon's");
    CHECK(ts_cpu_select(rn | TS_FEAT_I8MM | TS_FEAT_SVE | TS_FEAT_SME) == TS_CPU_NEON, "a newer core");
    CHECK(ts_cpu_select(TS_FEAT_NEON | TS_FEAT_FP16) == TS_CPU_SCALAR, "no dotprod (Cortex-A53/A55 r0) -> scalar");
    CHECK(ts_cpu_select(r5) == TS_CPU_SCALAR, "no x86 tables on arm");
#endif
    (void)r2;
    (void)r5;
    (void)rn;
}

static void test_clamp(void) {
    /* equal to the rank ladder on every pair, junk included */
    for (int want = -1; want <= TS_CPU_LEVEL_COUNT; want++)
        for (int best = -1; best <= TS_CPU_LEVEL_COUNT; best++)
            CHECK((int)ts_cpu_clamp((ts_cpu_level)want, (ts_cpu_level)best) == old_clamp(want, best),
                  "clamp(%d, %d) = %d, before %d", want, best,
                  (int)ts_cpu_clamp((ts_cpu_level)want, (ts_cpu_level)best), old_clamp(want, best));
    CHECK(ts_cpu_clamp(TS_CPU_AVX512, TS_CPU_AVX2) == TS_CPU_AVX2, "avx512 on avx2 machine");
    CHECK(ts_cpu_clamp(TS_CPU_NEON, TS_CPU_AVX512) == TS_CPU_AVX2, "neon on x86");
    CHECK(ts_cpu_clamp(TS_CPU_AVX512, TS_CPU_NEON) == TS_CPU_NEON, "avx512 on arm");

    /* the environment's choice at the first kernel call (main runs this
     * before anything forces a level) */
    const char *e = getenv("TS_CPU_LEVEL");
    const ts_cpu_level best = ts_cpu_detect();
    const int want = ts_cpu_level_parse(e);
    const ts_cpu_level expect = want >= 0 ? ts_cpu_clamp((ts_cpu_level)want, best) : best;
    CHECK(ts_cpu_level_active() == expect, "TS_CPU_LEVEL=%s: active %s, expected %s", e ? e : "(unset)",
          ts_cpu_level_name(ts_cpu_level_active()), ts_cpu_level_name(expect));
    printf("TS_CPU_LEVEL=%s -> active %s\n", e ? e : "(unset)", ts_cpu_level_name(ts_cpu_level_active()));

    /* forcing, and the features a lowered level leaves to the kernels */
    const ts_cpu_feat f = ts_cpu_features();
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        const ts_cpu_level got = ts_cpu_force_level((ts_cpu_level)l);
        CHECK(got == ts_cpu_clamp((ts_cpu_level)l, best) && ts_cpu_level_active() == got, "force %d", l);
        const ts_cpu_feat act = ts_cpu_features_active();
        CHECK(act == (got == best ? f : f & ts_cpu_level_requires(got)), "active features at %s",
              ts_cpu_level_name(got));
        CHECK(has(act, ts_kern_get()->requires), "active table's requirements not in the active features");
    }
    ts_cpu_force_level(TS_CPU_SCALAR);
    CHECK(ts_cpu_features_active() == (best == TS_CPU_SCALAR ? f : 0), "scalar below the detected level leaves no "
          "features");
    ts_cpu_force_level(best);
    CHECK(ts_cpu_features_active() == f, "the detected level: every feature");
}

/* ---- matmul variants ---- */

static int find(const char *const *names, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

static uint32_t bits(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

/* a random matrix of type t: n_out rows of n_in quantized from f32 values
 * (random bytes for a type ts_quant_row cannot write: only its variant is
 * asked for, nothing computed) */
static ts_wmat make_mat(uint32_t t, int64_t n_in, int64_t n_out, uint8_t **store) {
    const size_t rb = ts_row_size(t, n_in);
    uint8_t *d = malloc(rb * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) {
        if (!ts_type_info(t)->can_quant) {
            for (size_t i = 0; i < rb; i++) d[(size_t)r * rb + i] = (uint8_t)rng();
            continue;
        }
        for (int64_t k = 0; k < n_in; k++) row[k] = nrand();
        CHECK(ts_quant_row(t, row, d + (size_t)r * rb, n_in, NULL) == 0, "quantize type %u", t);
    }
    free(row);
    *store = d;
    return (ts_wmat){.type = t, .data = d, .n_in = n_in, .n_out = n_out, .row_bytes = rb};
}

static void test_variants(void) {
    const int n = ts_linear_variants(NULL, NULL, 0);
    CHECK(n >= 3 && n <= 16, "%d variants", n);
    const char *names[16] = {0};
    bool avail[16] = {0};
    CHECK(ts_linear_variants(names, avail, 16) == n, "count");
    printf("matmul variants:");
    for (int i = 0; i < n; i++) {
        const char *ref = NULL, *bound = NULL;
        CHECK(names[i] && names[i][0], "variant %d unnamed", i);
        CHECK(find(names, i, names[i]) < 0, "variant name %s twice", names[i]);
        CHECK(ts_linear_variant_doc(i, &ref, &bound) == 0 && ref && ref[0] && bound && bound[0],
              "variant %s without a reference or a bound", names[i]);
        printf(" %s%s", names[i], avail[i] ? "" : " (unavailable)");
    }
    printf("\n");
    CHECK(ts_linear_variant_doc(-1, NULL, NULL) == -1 && ts_linear_variant_doc(n, NULL, NULL) == -1, "doc of junk");
    const int ip = find(names, n, "panels"), ir = find(names, n, "rows"), iref = find(names, n, "ref");
    CHECK(ip >= 0 && ir >= 0 && iref >= 0, "panels / rows / ref missing");
    CHECK(ip >= 0 && ir >= 0 && iref >= 0 && avail[ip] && avail[ir] && avail[iref], "a base variant unavailable");
    CHECK(iref == n - 1, "ref, which takes everything, must come last");
    const char *one[2] = {"sentinel", "sentinel"};
    CHECK(ts_linear_variants(one, NULL, 1) == n && one[0] == names[0] && strcmp(one[1], "sentinel") == 0,
          "cap not honoured");

    /* which variant takes which matrix, and ts_linear = that variant */
    enum { NI = 256, NO = 40, NT = 3 };
    float x[NT * NI];
    for (int i = 0; i < NT * NI; i++) x[i] = nrand();
    ts_err err = {0};
    unsetenv("TS_ACT");
    ts_linear_ws *hi = ts_linear_ws_new(NI, NT, 1, &err);
    setenv("TS_ACT", "q8", 1);
    ts_linear_ws *lo = ts_linear_ws_new(NI, NT, 1, &err);
    unsetenv("TS_ACT");
    CHECK(hi && lo && ts_linear_ws_hi(hi) == 1 && ts_linear_ws_hi(lo) == 0, "work spaces");
    if (!hi || !lo) return;

    uint8_t *s16, *s2k, *sbf, *s40;
    const ts_wmat wf16 = make_mat(TS_TYPE_F16, NI, NO, &s16);
    const ts_wmat wq2k = make_mat(TS_TYPE_Q2_K, NI, NO, &s2k);
    const ts_wmat wbf = make_mat(TS_TYPE_BF16, NI, NO, &sbf);
    ts_wmat wq40 = make_mat(TS_TYPE_Q4_0, NI, NO, &s40);
    CHECK(!ts_rp_supported(TS_TYPE_F16), "F16 has a panel layout now: pick another type for this test");
    CHECK(strcmp(ts_linear_variant_for(hi, &wf16), "rows") == 0, "F16 (hi): %s", ts_linear_variant_for(hi, &wf16));
    CHECK(strcmp(ts_linear_variant_for(lo, &wf16), "rows") == 0, "F16 (lo): %s", ts_linear_variant_for(lo, &wf16));
    CHECK(strcmp(ts_linear_variant_for(lo, &wq2k), "rows") == 0, "Q2_K (lo): %s", ts_linear_variant_for(lo, &wq2k));
    CHECK(strcmp(ts_linear_variant_for(hi, &wq2k), "ref") == 0, "Q2_K (hi): %s", ts_linear_variant_for(hi, &wq2k));
    CHECK(strcmp(ts_linear_variant_for(hi, &wbf), "rows") == 0, "BF16: %s", ts_linear_variant_for(hi, &wbf));
    CHECK(strcmp(ts_linear_variant_for(lo, &wq40), "rows") == 0, "Q4_0 unpacked (lo): %s",
          ts_linear_variant_for(lo, &wq40));
    uint8_t *panels = malloc(ts_rp_matrix_bytes(TS_TYPE_Q4_0, NI, NO));
    for (int64_t r0 = 0; r0 < NO; r0 += TS_RP_ROWS) {
        const int nr = NO - r0 < TS_RP_ROWS ? (int)(NO - r0) : TS_RP_ROWS;
        ts_rp_pack_panel(TS_TYPE_Q4_0, NI, s40 + (size_t)r0 * wq40.row_bytes, wq40.row_bytes, nr,
                         panels + (size_t)(r0 / TS_RP_ROWS) * ts_rp_panel_bytes(TS_TYPE_Q4_0, NI));
    }
    wq40.packed = panels;
    CHECK(strcmp(ts_linear_variant_for(hi, &wq40), "panels") == 0, "Q4_0 packed: %s", ts_linear_variant_for(hi, &wq40));
    CHECK(strcmp(ts_linear_variant_for(lo, &wq40), "panels") == 0, "Q4_0 packed (lo): %s",
          ts_linear_variant_for(lo, &wq40));

    /* F16 and BF16 through ts_linear = their dot kernels (rows); Q2_K at hi = ts_matmul (ref) */
    float y[NT * NO], z[NT * NO], buf[NI];
    const ts_wmat *wp[1] = {&wf16};
    float *yp[1] = {y};
    ts_linear(NULL, hi, 1, wp, yp, x, NT);
    const ts_kern *k = ts_kern_get();
    ts_qgemm(k, TS_TYPE_F16, wf16.data, wf16.row_bytes, NI, x, NI * sizeof(float), NT, z, NO, 0, NO);
    int same = 1;
    for (int i = 0; i < NT * NO; i++) same &= bits(y[i]) == bits(z[i]);
    CHECK(same, "F16 via ts_linear != ts_qgemm");
    wp[0] = &wbf;
    ts_linear(NULL, hi, 1, wp, yp, x, NT);
    ts_qgemm(k, TS_TYPE_BF16, wbf.data, wbf.row_bytes, NI, x, NI * sizeof(float), NT, z, NO, 0, NO);
    same = 1;
    for (int i = 0; i < NT * NO; i++) same &= bits(y[i]) == bits(z[i]);
    CHECK(same, "BF16 via ts_linear != ts_qgemm");
    wp[0] = &wq2k;
    ts_linear(NULL, hi, 1, wp, yp, x, NT);
    ts_matmul(NULL, &wq2k, x, NI, z, NO, NT, buf, NI);
    same = 1;
    for (int i = 0; i < NT * NO; i++) same &= bits(y[i]) == bits(z[i]);
    CHECK(same, "Q2_K (hi) via ts_linear != ts_matmul");

    free(panels);
    free(s16);
    free(s2k);
    free(sbf);
    free(s40);
    ts_linear_ws_free(hi);
    ts_linear_ws_free(lo);
}

/* ---- decode prefetch distance (ts_cpu_decode_prefetch) ---- */

/* the vendor from /proc/cpuinfo, not cpuid: an oracle cpu.c does not use
 * (under qemu-user it is the host's, which only matters at avx512, a level
 * the emulated x86 CPUs here do not reach) */
static int cpuinfo_amd(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    int amd = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "vendor_id", 9)) {
            amd = strstr(line, "AuthenticAMD") != NULL;
            break;
        }
    fclose(f);
    return amd;
}

static void test_prefetch(void) {
    const char *e = getenv("TS_PREFETCH");
    int forced = -2; /* what a valid TS_PREFETCH fixes at every level */
    if (e && !strcmp(e, "off"))
        forced = -1;
    else if (e && *e) {
        char *end;
        const long v = strtol(e, &end, 10);
        if (!*end && v >= 0 && v <= 65536) forced = (int)v;
    }
    const int amd = cpuinfo_amd();
    const ts_cpu_level was = ts_cpu_level_active();
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        const ts_cpu_level got = ts_cpu_force_level((ts_cpu_level)l);
        const int expect = forced != -2 ? forced : got == TS_CPU_AVX512 && amd ? 0 : 4096;
        CHECK(ts_cpu_decode_prefetch() == expect, "TS_PREFETCH=%s at %s: %d, expected %d", e ? e : "(unset)",
              ts_cpu_level_name(got), ts_cpu_decode_prefetch(), expect);
    }
    ts_cpu_force_level(was);
    printf("TS_PREFETCH=%s -> %d at the active level (%s)\n", e ? e : "(unset)", ts_cpu_decode_prefetch(),
           amd ? "AMD" : "not AMD");
}

int main(int argc, char **argv) {
    const char *expect = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--expect-level") == 0 && i + 1 < argc) {
            expect = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--expect-level NAME]\n", argv[0]);
            return 2;
        }
    }
    test_clamp(); /* first: the environment's level is still in force */
    test_names();
    test_features();
    test_levels(expect);
    test_select();
    test_variants();
    test_prefetch();
    if (failures) {
        fprintf(stderr, "test_cpu_feat: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_cpu_feat: ok\n");
    return 0;
}
