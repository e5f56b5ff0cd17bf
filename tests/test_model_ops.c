/* test_model_ops.c - unit tests of the reference kernels (src/kernels/ref)
 * and the thread pool, each against a plain double-precision formula:
 *   - parallel_for covers every index once, for several pool sizes;
 *   - rmsnorm, softmax, silu, gelu-tanh against their definitions;
 *   - rope: identity at pos 0, norm preserved, q.k depends only on the
 *     position difference, the NeoX layout equals the normal layout under the
 *     pair permutation, llama3 scaling equals the rope_freqs factors
 *     llama.cpp's converter writes;
 *   - matmul (F32, F16, BF16, Q8_0, Q4_0, Q4_1 weights) against a double dot of
 *     the dequantized rows (rel. error < 1e-5), and bit-identical results for
 *     any batch size and thread count;
 *   - attention (GQA, sliding window, soft-capping; f32 cache) against a
 *     double reference (< 1e-5), f16 cache within f16 rounding (< 3e-3).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "quant/quant.h"

static int n_fail;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            n_fail++;                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
        }                                                  \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* ---- thread pool ------------------------------------------------------ */

typedef struct {
    int *hits;
    int n_threads;
    int bad_tid;
} cover_ctx;

static void cover_fn(void *ctx, int64_t b, int64_t e, int tid) {
    cover_ctx *c = ctx;
    if (tid < 0 || tid >= c->n_threads) c->bad_tid = 1;
    for (int64_t i = b; i < e; i++) __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

static void test_threadpool(void) {
    CHECK(ts_physical_cores() >= 1, "physical cores %d", ts_physical_cores());
    const int sizes[] = {1, 2, 3, 7};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        ts_err err;
        ts_threadpool *p = ts_threadpool_new(sizes[si], &err);
        CHECK(p != NULL, "pool of %d: %s", sizes[si], err.msg);
        if (!p) continue;
        CHECK(ts_threadpool_n_threads(p) == sizes[si], "n_threads");
        const int64_t ns[] = {0, 1, 2, 5, 100, 1001};
        for (int rep = 0; rep < 50; rep++) {
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int hits[1001] = {0};
                cover_ctx c = {hits, sizes[si], 0};
                ts_parallel_for(p, ns[ni], cover_fn, &c);
                int ok = !c.bad_tid;
                for (int64_t i = 0; i < ns[ni]; i++) ok &= hits[i] == 1;
                CHECK(ok, "parallel_for n=%lld threads=%d", (long long)ns[ni], sizes[si]);
            }
        }
        ts_threadpool_free(p);
    }
    ts_err err;
    CHECK(ts_threadpool_new(TS_MAX_THREADS + 1, &err) == NULL, "too many threads accepted");
    ts_threadpool_free(NULL);
}

/* ---- elementwise ------------------------------------------------------ */

static void test_elementwise(void) {
    float x[37], w[37], out[37];
    for (int i = 0; i < 37; i++) x[i] = frand() * 3, w[i] = 1 + frand() * 0.5f;
    ts_rmsnorm_f32(out, x, w, 37, 1e-5f);
    double ss = 0;
    for (int i = 0; i < 37; i++) ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / 37 + 1e-5);
    for (int i = 0; i < 37; i++) CHECK(fabs(out[i] - x[i] * inv * w[i]) < 1e-5, "rmsnorm[%d]", i);

    float sm[5] = {1, 2, 3, 1000, -1000};
    ts_softmax_f32(sm, 5);
    CHECK(fabsf(sm[3] - 1.0f) < 1e-6f && sm[4] == 0.0f, "softmax large values");
    float sm2[3] = {0, log(2.0f), log(5.0f)};
    ts_softmax_f32(sm2, 3);
    CHECK(fabsf(sm2[0] - 0.125f) < 1e-6f && fabsf(sm2[2] - 0.625f) < 1e-6f, "softmax values");

    for (float v = -6; v <= 6; v += 0.37f) {
        double s = v / (1 + exp(-v));
        double g = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        CHECK(fabs(ts_silu_f32(v) - s) < 1e-6, "silu(%g)", v);
        CHECK(fabs(ts_gelu_tanh_f32(v) - g) < 1e-6, "gelu(%g)", v);
    }
    float sc[2] = {100.0f, -3.0f};
    ts_softcap_f32(sc, 2, 30.0f);
    CHECK(fabs(sc[0] - 30 * tanh(100.0 / 30)) < 1e-5 && fabs(sc[1] - 30 * tanh(-0.1)) < 1e-5, "softcap");
}

/* ---- rope ------------------------------------------------------------- */

static void test_rope(void) {
    enum { HD = 16, NH = 3 };
    double inv[HD / 2];
    float cs[HD];
    ts_rope_inv_freq(inv, HD, 10000.0, 1.0, NULL, NULL);
    for (int i = 0; i < HD / 2; i++) CHECK(fabs(inv[i] - pow(10000.0, -2.0 * i / HD)) < 1e-15, "inv_freq[%d]", i);

    float x[NH * HD], y[NH * HD];
    for (int i = 0; i < NH * HD; i++) x[i] = frand();
    memcpy(y, x, sizeof x);
    ts_rope_f32(y, NH, HD, HD, false, inv, 0, cs);
    CHECK(!memcmp(x, y, sizeof x), "rope at pos 0 is not the identity");

    /* norm of each rotated pair is kept; NeoX == normal under permutation */
    for (int pos = 1; pos < 300; pos += 37) {
        float a[NH * HD], b[NH * HD];
        memcpy(a, x, sizeof x);
        ts_rope_f32(a, NH, HD, HD, false, inv, pos, cs);
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HD / 2; i++) {
                const float *p = x + h * HD + 2 * i, *q = a + h * HD + 2 * i;
                CHECK(fabsf(p[0] * p[0] + p[1] * p[1] - q[0] * q[0] - q[1] * q[1]) < 1e-5f, "pair norm");
            }
        /* b = x with pair i moved to (i, i+HD/2), rotated NeoX, moved back */
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HD / 2; i++) {
                b[h * HD + i] = x[h * HD + 2 * i];
                b[h * HD + i + HD / 2] = x[h * HD + 2 * i + 1];
            }
        ts_rope_f32(b, NH, HD, HD, true, inv, pos, cs);
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HD / 2; i++) {
                CHECK(b[h * HD + i] == a[h * HD + 2 * i] && b[h * HD + i + HD / 2] == a[h * HD + 2 * i + 1],
                      "neox vs normal layout pos %d", pos);
            }
    }

    /* q.k after rope depends only on the position difference */
    float q[HD], k[HD];
    for (int i = 0; i < HD; i++) q[i] = frand(), k[i] = frand();
    double ref = 0;
    for (int m = 0; m < 4; m++) {
        float qa[HD], ka[HD];
        memcpy(qa, q, sizeof q);
        memcpy(ka, k, sizeof k);
        ts_rope_f32(qa, 1, HD, HD, true, inv, 50 + m * 13, cs);
        ts_rope_f32(ka, 1, HD, HD, true, inv, 40 + m * 13, cs);
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)qa[i] * ka[i];
        if (m == 0) ref = d;
        CHECK(fabs(d - ref) < 1e-5, "relative position property");
    }

    /* partial rotation leaves the tail alone */
    float z[HD];
    memcpy(z, x, sizeof z);
    ts_rope_f32(z, 1, HD, 8, true, inv, 7, cs);
    CHECK(!memcmp(z + 8, x + 8, 8 * sizeof(float)), "n_rot < head_dim touched the tail");

    /* llama3 scaling == llama.cpp converter's rope_freqs factors */
    const double factor = 8, lo = 1, hi = 4, orig = 32;
    float factors[HD / 2];
    for (int i = 0; i < HD / 2; i++) {
        double f = pow(10000.0, -2.0 * i / HD), wl = 2 * M_PI / f;
        if (wl < orig / hi) factors[i] = 1;
        else if (wl > orig / lo) factors[i] = (float)factor;
        else {
            double s = (orig / wl - lo) / (hi - lo);
            factors[i] = (float)(1 / ((1 - s) / factor + s));
        }
    }
    double a1[HD / 2], a2[HD / 2];
    ts_rope_llama3 l3 = {factor, lo, hi, orig};
    ts_rope_inv_freq(a1, HD, 10000.0, 1.0, NULL, &l3);
    ts_rope_inv_freq(a2, HD, 10000.0, 1.0, factors, NULL);
    int scaled = 0;
    for (int i = 0; i < HD / 2; i++) {
        CHECK(fabs(a1[i] - a2[i]) <= 1e-6 * a1[i], "llama3 vs factors [%d] %g %g", i, a1[i], a2[i]);
        scaled += a1[i] != inv[i];
    }
    CHECK(scaled > 1, "llama3 test scaled too few frequencies (%d)", scaled);
    ts_rope_inv_freq(a1, HD, 10000.0, 0.5, NULL, NULL);
    for (int i = 0; i < HD / 2; i++) CHECK(fabs(a1[i] - 0.5 * inv[i]) < 1e-15, "linear scaling");
}

/* ---- matmul ----------------------------------------------------------- */

static void test_matmul(void) {
    enum { NI = 96, NO = 37, NT = 6 };
    const uint32_t types[] = {TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_BF16, TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_Q4_1};
    static float wf[NO * NI], x[NT * NI], y1[NT * NO], y2[NT * NO], wrow[NI];
    static uint8_t wq[NO * NI * 4];
    static float scratch[7 * NI];
    for (int i = 0; i < NO * NI; i++) wf[i] = frand();
    for (int i = 0; i < NT * NI; i++) x[i] = frand() * 2;
    ts_err err;
    ts_threadpool *p3 = ts_threadpool_new(3, &err);
    CHECK(p3 != NULL, "pool");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t ty = types[ti];
        const size_t rb = ts_row_size(ty, NI);
        for (int r = 0; r < NO; r++)
            if (ts_quant_row(ty, wf + r * NI, wq + r * rb, NI, &err)) {
                CHECK(0, "quant %s: %s", ts_type_info(ty)->name, err.msg);
                goto next;
            }
        ts_wmat w = {ty, wq, NI, NO, rb, NULL};
        ts_matmul(p3, &w, x, NI, y1, NO, NT, scratch, NI);
        double worst = 0;
        for (int r = 0; r < NO; r++) {
            ts_wmat_row(&w, r, wrow);
            for (int t = 0; t < NT; t++) {
                double d = 0, mag = 0;
                for (int i = 0; i < NI; i++) d += (double)wrow[i] * x[t * NI + i], mag += fabs((double)wrow[i] * x[t * NI + i]);
                double e = fabs(y1[t * NO + r] - d) / (mag + 1e-30);
                worst = e > worst ? e : worst;
            }
        }
        CHECK(worst < 1e-5, "matmul %s: rel err %g", ts_type_info(ty)->name, worst);
        /* one token at a time, on one thread: bit-identical */
        for (int t = 0; t < NT; t++) ts_matmul(NULL, &w, x + t * NI, NI, y2 + t * NO, NO, 1, scratch, NI);
        CHECK(!memcmp(y1, y2, sizeof y1), "matmul %s: batch/thread dependence", ts_type_info(ty)->name);
    next:;
    }
    ts_threadpool_free(p3);
}

/* ---- attention -------------------------------------------------------- */

static void attn_ref(const ts_attn_params *ap, const float *q, const float *kc, const float *vc, int64_t pos0, int n_tok,
                     double *out) {
    const int hd = ap->head_dim, g = ap->n_head / ap->n_head_kv;
    double s[256];
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < ap->n_head; h++) {
            int64_t p = pos0 + t, lo = ap->n_swa ? p - ap->n_swa + 1 : 0;
            if (lo < 0) lo = 0;
            double mx = -1e300, sum = 0;
            for (int64_t j = lo; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[(t * ap->n_head + h) * hd + i] * kc[j * ap->kv_stride + (h / g) * hd + i];
                d *= ap->scale;
                if (ap->softcap > 0) d = ap->softcap * tanh(d / ap->softcap);
                s[j] = d;
                mx = d > mx ? d : mx;
            }
            for (int64_t j = lo; j <= p; j++) sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int64_t j = lo; j <= p; j++) a += s[j] / sum * vc[j * ap->kv_stride + (h / g) * hd + i];
                out[(t * ap->n_head + h) * hd + i] = a;
            }
        }
}

static void test_attention(void) {
    enum { NH = 4, NKV = 2, HD = 8, NCTX = 40, NT = 7 };
    static float q[NT * NH * HD], kc[NCTX * NKV * HD], vc[NCTX * NKV * HD], out[NT * NH * HD];
    static uint16_t kh[NCTX * NKV * HD], vh[NCTX * NKV * HD];
    static double ref[NT * NH * HD];
    static float scratch[3 * 64];
    for (int i = 0; i < NT * NH * HD; i++) q[i] = frand() * 2;
    for (int i = 0; i < NCTX * NKV * HD; i++) {
        kc[i] = frand() * 2;
        vc[i] = frand();
        kh[i] = ts_f32_to_f16(kc[i]);
        vh[i] = ts_f32_to_f16(vc[i]);
    }
    ts_err err;
    ts_threadpool *p = ts_threadpool_new(3, &err);
    const struct { int swa; float cap; } cases[] = {{0, 0}, {5, 0}, {0, 2.0f}, {3, 1.5f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ts_attn_params ap = {NH, NKV, HD, 0.35f, cases[c].cap, cases[c].swa, false, NKV * HD, 0};
        const int64_t pos0 = NCTX - NT;
        ts_attention(p, &ap, q, kc, vc, pos0, NT, out, scratch, 64);
        attn_ref(&ap, q, kc, vc, pos0, NT, ref);
        double worst = 0;
        for (int i = 0; i < NT * NH * HD; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
        CHECK(worst < 1e-5, "attention case %zu: max err %g", c, worst);
        ap.kv_f16 = true;
        ts_attention(p, &ap, q, kh, vh, pos0, NT, out, scratch, 64);
        worst = 0;
        for (int i = 0; i < NT * NH * HD; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
        CHECK(worst < 3e-3, "attention f16 case %zu: max err %g", c, worst);
    }
    ts_threadpool_free(p);
}

int main(void) {
    test_threadpool();
    test_elementwise();
    test_rope();
    test_matmul();
    test_attention();
    if (n_fail) {
        printf("test_model_ops: %d check(s) failed\n", n_fail);
        return 1;
    }
    printf("test_model_ops: all checks passed\n");
    return 0;
}
