/* test_rp_gemm.c - the fast panel GEMM and activation-tile kernels of every
 * level this machine runs (x86/gemm_avx2.c, x86/gemm_avx512.c,
 * arm/gemm_neon.c: those built for this CPU) against the scalar definitions
 * ts_rp_gemm_ref / ts_rp_quant_ref of kernels/repack.h. Bound: EXACT (bit
 * for bit; a NaN matches a NaN of either sign, see same_bits), since
 * repack.h defines the integers and the f32 operation order every level
 * must follow.
 *
 * Cases, per type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and precision (hi,
 * lo):
 *   - weights: random quant bytes, and all-extreme ones (every u at its
 *     maximum 15 / 31 / 63 / 255, or 0, or a random mix of both) which push
 *     the int16 pair sums of the AVX2 kernels to their bounds; random f16
 *     scales (sometimes 0), random K-quant sub-block scales;
 *   - activations: rows through the reference quantizer (normal values, a
 *     block of zeros, one of tiny values, one holding NaN, one inf, huge
 *     values, exact ties, and a block quantizing to X = -128 everywhere but
 *     one element: the low plane at -128), and tiles written directly from
 *     extreme integers (X = +-32512, -32385, 32384, -128, 127 ...: q1 at
 *     +-127 with q2 at -128 / 127);
 *   - 1, 2 .. 8 tokens per tile, 1 .. 16 rows (partial panels), an odd
 *     y stride; rows past n_rows and other tokens' rows are never written;
 *   - a token alone in a tile of 1 gives its bits in a tile of 8;
 *   - the quantizer: the reference's bytes for every slot of tiles of 1..8.
 *
 * usage: test_rp_gemm [--level NAME]   (default: every level available)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu.h"
#include "kernels/repack.h"
#include "quant/quant.h"

#define NMAX 768 /* largest n_in tested */

static const uint32_t types[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q8_0,
                                 TS_TYPE_Q2_K, TS_TYPE_Q3_K, TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K};
#define N_TYPES (sizeof types / sizeof types[0])

#include "qrows.h"

/* ---- activations ---- */

/* One token: a float row for the reference quantizer, or (crafted) the
 * integers X and block scales written straight into the tile. */
typedef struct {
    int crafted;
    float x[NMAX];
    int32_t X[NMAX];
    float s[NMAX / 32];
    int32_t sh[NMAX / 32]; /* crafted lo256: the side's shift */
} token;

static void make_float_token(token *tk, int64_t n_in) {
    tk->crafted = 0;
    for (int64_t b = 0; b < n_in / 32; b++) {
        float *x = tk->x + 32 * b;
        const int kind = (int)(rng() % 12);
        for (int j = 0; j < 32; j++) x[j] = nrand() * (1.0f + (float)(j % 5));
        switch (kind) {
        case 0: memset(x, 0, 32 * sizeof(float)); break;                        /* amax 0 */
        case 1: for (int j = 0; j < 32; j++) x[j] = frand() * 1e-32f; break;   /* tiny: zero block */
        case 2: x[rng() % 32] = NAN; break;
        case 3: x[rng() % 32] = rng() & 1 ? INFINITY : -INFINITY; break;
        case 4: for (int j = 0; j < 32; j++) x[j] = frand() * 3e38f; break;     /* huge, finite */
        case 5: for (int j = 0; j < 32; j++) x[j] = (float)((int)(rng() % 33) - 16) * 0.5f; break; /* ties */
        case 6: { /* X = -128 (q1 0, q2 -128) everywhere but the amax element */
            const float amax = 1.0f + frand() * 0.5f;
            for (int j = 0; j < 32; j++) x[j] = -128.0f / 32512.0f * amax;
            x[rng() % 32] = amax;
            break;
        }
        case 7: for (int j = 0; j < 32; j++) x[j] = rng() & 1 ? 2.5f : -2.5f; break; /* X = +-32512 */
        case 8: /* 1 to 64 times smaller than its neighbours: every lo256 shift */
            for (int j = 0; j < 32; j++) x[j] = ldexpf(x[j], -(int)(rng() % 7));
            break;
        default: break;
        }
    }
}

static void make_crafted_token(token *tk, int64_t n_in, int hi) {
    static const int32_t ext_hi[] = {-32512, -32385, -32384, 32384, 32512, -128, 127, 0, 32383};
    static const int32_t ext_lo[] = {-127, 127, 0, -1, 1};
    tk->crafted = 1;
    const int k256 = hi == TS_RP_LO256;
    for (int64_t b = 0; b < n_in / 32; b++) {
        const int pat = (int)(rng() % 4);
        hi = hi == TS_RP_HI;
        const int32_t same = hi ? ext_hi[rng() % 9] : ext_lo[rng() % 5];
        for (int j = 0; j < 32; j++) {
            int32_t X;
            if (pat == 0) /* one value for the whole block */
                X = same;
            else if (pat == 1) /* extremes mixed */
                X = hi ? ext_hi[rng() % 9] : ext_lo[rng() % 5];
            else /* anything in range */
                X = hi ? (int32_t)(rng() % 65025) - 32512 : (int32_t)(rng() % 255) - 127;
            tk->X[32 * b + j] = X;
        }
        tk->s[b] = ldexpf(1.0f + frand() * 0.5f, -(int)(rng() % 20));
        tk->sh[b] = k256 ? (int32_t)(rng() % (TS_RP_K256_KMAX + 1)) : 0; /* every shift lo256 can hold */
    }
}

/* the tile bytes of block b of a crafted token (repack.h layout) */
static void put_crafted(const token *tk, int64_t n_in, int hi, uint8_t *tile, int nt, int slot) {
    const size_t xb = ts_rp_xb(hi) * (size_t)nt;
    for (int64_t b = 0; b < n_in / 32; b++) {
        uint8_t *q1 = tile + (size_t)b * xb + 32 * slot, *q2 = q1 + 32 * nt;
        uint8_t *side = tile + (size_t)b * xb + (hi == TS_RP_HI ? 64 : 32) * nt + TS_RP_SIDE * slot;
        int32_t sum_lo = 0, sum_hi = 0;
        for (int j = 0; j < 32; j++) {
            const int32_t X = tk->X[32 * b + j];
            const int32_t a = hi == TS_RP_HI ? ((X + 128 + 65536) >> 8) - 256 : X;
            q1[j] = (uint8_t)(int8_t)a;
            if (hi == TS_RP_HI) q2[j] = (uint8_t)(int8_t)(X - 256 * a);
            if (j < 16)
                sum_lo += X;
            else
                sum_hi += X;
        }
        ts_rp_put_side(side, tk->s[b], sum_lo, sum_hi, tk->sh[b]);
    }
}

static void put_token(const token *tk, int64_t n_in, int hi, uint8_t *tile, int nt, int slot) {
    if (tk->crafted)
        put_crafted(tk, n_in, hi, tile, nt, slot);
    else
        ts_rp_quant_ref(tk->x, n_in, hi, tile, nt, slot);
}

/* ---- the GEMM ---- */

#define YS 21         /* y stride: odd, > 16 */
#define GUARD 12345.f /* every y slot not written must keep it */

static token toks[TS_RP_TT];
static uint8_t rows[16 * 210 * (NMAX / 256)], panel[3360 * (NMAX / 256)];
static uint8_t tile[TS_RP_TT * 96 * (NMAX / 32)], tile1[96 * (NMAX / 32)];

static int n_checked;

/* Bit for bit, except that any NaN matches any NaN. The sign of a NaN is
 * not the source's to fix: on x86 a NaN operand propagates from the first
 * source of vaddps / vmulps, and compilers treat a+b and a*b as commutative,
 * so which input NaN survives (or whether the default -nan of inf-inf does)
 * changes with the optimisation level (clang -O0 vs -O2 gave Q4_K lo's
 * AVX-512 kernel -nan where the reference gave nan). IEEE 754 leaves a
 * NaN result's sign unspecified; every finite and infinite value still has
 * to match exactly. */
static int same_bits(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

static void check_case(const ts_kern *k, uint32_t ty, int64_t n_in, int hi, int nt, int n_rows, const char *what) {
    const char *name = ts_type_info(ty)->name, *lvl = ts_cpu_level_name(k->level);
    float y_ref[TS_RP_TT * YS], y[TS_RP_TT * YS];
    for (int i = 0; i < TS_RP_TT * YS; i++) y_ref[i] = y[i] = GUARD;
    ts_rp_gemm_ref(ty)(n_in, panel, tile, nt, hi, y_ref, YS, n_rows);
    k->rp_gemm[ty](n_in, panel, tile, nt, hi, y, YS, n_rows);
    n_checked++;
    int bad = -1;
    for (int i = 0; i < TS_RP_TT * YS && bad < 0; i++)
        if (!same_bits(&y[i], &y_ref[i], 1)) bad = i;
    CHECK(bad < 0, "%s hi %d n_in %lld nt %d rows %d (%s) at level %s: y[t %d][r %d] = %.9g, reference %.9g",
          name, hi, (long long)n_in, nt, n_rows, what, lvl, bad / YS, bad % YS, y[bad < 0 ? 0 : bad],
          y_ref[bad < 0 ? 0 : bad]);
    /* each token alone in a tile of 1 */
    for (int t = 0; t < nt; t++) {
        float y1[YS];
        for (int i = 0; i < YS; i++) y1[i] = GUARD;
        put_token(&toks[t], n_in, hi, tile1, 1, 0);
        k->rp_gemm[ty](n_in, panel, tile1, 1, hi, y1, YS, n_rows);
        CHECK(same_bits(y1, y_ref + t * YS, YS),
              "%s hi %d nt %d rows %d (%s) at level %s: token %d alone differs", name, hi, nt, n_rows, what, lvl, t);
    }
}

static void test_gemm(const ts_kern *k) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const uint32_t ty = types[ti];
        if (!k->rp_gemm[ty]) continue;
        const int kq = ty == TS_TYPE_Q2_K || ty == TS_TYPE_Q3_K || ty == TS_TYPE_Q4_K || ty == TS_TYPE_Q5_K || ty == TS_TYPE_Q6_K;
        const int64_t sizes[2] = {kq ? 256 : 32, kq ? NMAX : 288};
        for (int hi = 0; hi < 3; hi++) /* TS_RP_LO, TS_RP_HI, TS_RP_LO256 */
            for (int mode = 0; mode < W_MODES; mode++)
                for (int si = 0; si < 2; si++) {
                    const int64_t n_in = sizes[si];
                    const size_t rb = ts_row_size(ty, n_in);
                    for (int rep = 0; rep < 3; rep++) {
                        const int n_rows = rep == 0 ? 16 : 1 + (int)(rng() % 16);
                        make_rows(ty, n_in, n_rows, mode, rows);
                        ts_rp_pack_panel(ty, n_in, rows, rb, n_rows, panel);
                        const int crafted = rep == 2;
                        for (int t = 0; t < TS_RP_TT; t++) {
                            if (crafted)
                                make_crafted_token(&toks[t], n_in, hi);
                            else
                                make_float_token(&toks[t], n_in);
                        }
                        for (int nt = 1; nt <= TS_RP_TT; nt++) {
                            memset(tile, 0, sizeof tile);
                            for (int t = 0; t < nt; t++) put_token(&toks[t], n_in, hi, tile, nt, t);
                            static const char *const wm[] = {"random", "u max", "u 0", "u extremes"};
                            char what[64];
                            snprintf(what, sizeof what, "weights %s, %s acts", wm[mode], crafted ? "crafted" : "float");
                            check_case(k, ty, n_in, hi, nt, n_rows, what);
                        }
                    }
                }
    }
}

/* ---- the quantizer ---- */

static void test_quant(const ts_kern *k) {
    if (!k->rp_quant) return;
    enum { NI = 32 * 24 };
    static uint8_t ref[TS_RP_TT * 96 * (NI / 32)], got[TS_RP_TT * 96 * (NI / 32)];
    for (int hi = 0; hi < 3; hi++)
        for (int nt = 1; nt <= TS_RP_TT; nt++) {
            memset(ref, 0xa5, sizeof ref);
            memset(got, 0xa5, sizeof got);
            for (int t = 0; t < nt; t++) {
                make_float_token(&toks[t], NI);
                ts_rp_quant_ref(toks[t].x, NI, hi, ref, nt, t);
                k->rp_quant(toks[t].x, NI, hi, got, nt, t);
            }
            size_t bad = sizeof ref;
            for (size_t i = 0; i < sizeof ref && bad == sizeof ref; i++)
                if (ref[i] != got[i]) bad = i;
            CHECK(bad == sizeof ref, "quantizer at level %s hi %d nt %d: byte %zu is %d, reference %d",
                  ts_cpu_level_name(k->level), hi, nt, bad, got[bad % sizeof ref], ref[bad % sizeof ref]);
        }
}

int main(int argc, char **argv) {
    int only = -1;
    if (argc == 3 && !strcmp(argv[1], "--level")) {
        only = ts_cpu_level_parse(argv[2]);
        if (only < 0) {
            fprintf(stderr, "usage: test_rp_gemm [--level scalar|avx2|avx512|neon]\n");
            return 2;
        }
    }
    int n_levels = 0;
    for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
        if (only >= 0 && l != only) continue;
        const ts_kern *k = ts_kern_for_level((ts_cpu_level)l);
        if (!k) continue;
        rng_seed(0x5eed0000u + (uint64_t)l);
        const int before = n_checked;
        test_quant(k);
        test_gemm(k);
        printf("level %s: %d panel cases compared, %s\n", ts_cpu_level_name(k->level), n_checked - before,
               k->rp_quant ? "quantizer compared" : "no fast quantizer");
        n_levels++;
    }
    if (only >= 0 && !n_levels) {
        fprintf(stderr, "test_rp_gemm: level %s cannot run here\n", argv[2]);
        return 1;
    }
    if (failures) {
        fprintf(stderr, "test_rp_gemm: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_rp_gemm: all checks passed\n");
    return 0;
}
