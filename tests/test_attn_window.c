/* test_attn_window.c - the non-causal attention mode (ts_attn_params.n_kv > 0,
 * used by ts_forward_window for diffusion LLMs) of the reference kernel
 * (src/kernels/ref/attention.c) and the fast tiled one (fastops_impl.h) at
 * every CPU level this machine runs:
 *   - both against a double-precision bidirectional attention (every query
 *     sees cache rows [0, n_kv)): f32 cache < 2e-5 absolute on outputs of
 *     order 1 (the f16 cache holds the same rounded values, so the same
 *     bound applies);
 *   - the fast kernel's rows do not depend on the block they are computed
 *     in: one query per call equals the whole window, bit for bit;
 *   - n_kv beyond the window (pos0 + n_tok < n_kv: the dual cache's suffix),
 *     n_kv not a multiple of the 64-position tile, a window starting inside
 *     a tile, GQA / MQA / no GQA, head sizes 64 and 40, soft-capping, and an
 *     n_swa that must be ignored;
 *   - the mode really is non-causal: changing the last cache row changes the
 *     first query's output.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/fastops.h"
#include "kernels/ops.h"
#include "quant/quant.h"

enum { NCTX = 220, MAXH = 8, MAXD = 64 };

/* double-precision bidirectional attention of query token t over rows [0, n_kv) */
static void attn_full_double(const ts_attn_params *ap, const float *q, const float *kc, const float *vc, int t,
                             double *out) {
    const int hd = ap->head_dim, g = ap->n_head / ap->n_head_kv;
    static double sc[NCTX];
    for (int h = 0; h < ap->n_head; h++) {
        double mx = -1e300, sum = 0;
        for (int64_t k = 0; k < ap->n_kv; k++) {
            double d = 0;
            for (int i = 0; i < hd; i++)
                d += (double)q[((int64_t)t * ap->n_head + h) * hd + i] * kc[k * ap->kv_stride + (h / g) * hd + i];
            d *= ap->scale;
            if (ap->softcap > 0) d = ap->softcap * tanh(d / ap->softcap);
            sc[k] = d;
            mx = d > mx ? d : mx;
        }
        for (int64_t k = 0; k < ap->n_kv; k++) sum += (sc[k] = exp(sc[k] - mx));
        for (int i = 0; i < hd; i++) {
            double a = 0;
            for (int64_t k = 0; k < ap->n_kv; k++) a += sc[k] / sum * vc[k * ap->kv_stride + (h / g) * hd + i];
            out[h * hd + i] = a;
        }
    }
}

static double max_err(const ts_attn_params *ap, const float *q, const float *kc, const float *vc, const float *out,
                      int ntok) {
    static double ref[MAXH * MAXD];
    const int w = ap->n_head * ap->head_dim;
    double worst = 0;
    for (int t = 0; t < ntok; t++) {
        attn_full_double(ap, q, kc, vc, t, ref);
        for (int i = 0; i < w; i++) worst = fmax(worst, fabs(out[(int64_t)t * w + i] - ref[i]));
    }
    return worst;
}

int main(void) {
    static float q[NCTX * MAXH * MAXD], kc[NCTX * MAXH * MAXD], vc[NCTX * MAXH * MAXD];
    static uint16_t kh[NCTX * MAXH * MAXD], vh[NCTX * MAXH * MAXD];
    static float out[NCTX * MAXH * MAXD], out1[NCTX * MAXH * MAXD];
    /* pos0, ntok, n_kv: the window [pos0, pos0 + ntok) inside the visible rows [0, n_kv) */
    const struct { int nh, nkv, hd, swa; float cap; int64_t pos0; int ntok; int64_t n_kv; } cases[] = {
        {8, 2, 64, 0, 0, 0, 150, 150},    /* whole sequence, GQA, 3 tiles (last partial) */
        {4, 1, 40, 0, 0, 37, 32, 69},     /* prefix + block, MQA, odd head size */
        {4, 4, 64, 0, 0, 100, 32, 220},   /* dual cache: block in the middle, suffix after it */
        {6, 3, 64, 16, 0, 70, 20, 90},    /* n_swa set: must be ignored in this mode */
        {4, 4, 16, 0, 2.0f, 60, 5, 200},  /* soft-capping, block inside a tile */
        {2, 1, 64, 0, 0, 0, 1, 1},        /* a single row */
    };
    ts_err err;
    ts_threadpool *p2 = ts_threadpool_new(2, &err), *p3 = ts_threadpool_new(3, &err);
    CHECK(p2 && p3, "thread pools: %s", err.msg);
    if (!p2 || !p3) return 1;
    rng_seed(7);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int nh = cases[c].nh, nkv = cases[c].nkv, hd = cases[c].hd, ntok = cases[c].ntok;
        const int64_t pos0 = cases[c].pos0, n_kv = cases[c].n_kv;
        for (int64_t i = 0; i < (int64_t)ntok * nh * hd; i++) q[i] = frand() * 2;
        for (int64_t i = 0; i < n_kv * nkv * hd; i++) {
            kh[i] = ts_f32_to_f16(frand() * 2);
            vh[i] = ts_f32_to_f16(frand());
            kc[i] = ts_f16_to_f32(kh[i]); /* the f32 cache holds the same values */
            vc[i] = ts_f16_to_f32(vh[i]);
        }
        for (int f16 = 0; f16 < 2; f16++) {
            const ts_attn_params ap = {.n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                                       .scale = 1.0f / sqrtf((float)hd), .softcap = cases[c].cap,
                                       .n_swa = cases[c].swa, .kv_f16 = f16 != 0, .kv_stride = (int64_t)nkv * hd,
                                       .n_kv = n_kv};
            const void *K = f16 ? (const void *)kh : kc, *V = f16 ? (const void *)vh : vc;
            int64_t stride = ts_attention_fast_scratch(&ap);
            if (n_kv + 2 * hd > stride) stride = n_kv + 2 * hd; /* the reference kernel's need */
            float *scr = calloc((size_t)stride * 3, sizeof(float));
            if (!scr) return 1;

            /* reference kernel */
            ts_attention(p2, &ap, q, K, V, pos0, ntok, out, scr, stride);
            double e = max_err(&ap, q, kc, vc, out, ntok);
            CHECK(e < 2e-5, "case %zu f16 %d reference kernel: max err %g", c, f16, e);

            for (int l = 0; l < TS_CPU_LEVEL_COUNT; l++) {
                if (!ts_kern_for_level((ts_cpu_level)l)) continue;
                ts_cpu_force_level((ts_cpu_level)l);
                const char *lv = ts_cpu_level_name((ts_cpu_level)l);
                ts_attention_fast(p2, &ap, q, K, V, pos0, ntok, out, scr, stride);
                e = max_err(&ap, q, kc, vc, out, ntok);
                CHECK(e < 2e-5, "case %zu f16 %d level %s: max err %g", c, f16, lv, e);
                /* one query per call (3 threads): the same bits */
                for (int t = 0; t < ntok; t++)
                    ts_attention_fast(p3, &ap, q + (int64_t)t * nh * hd, K, V, pos0 + t, 1,
                                      out1 + (int64_t)t * nh * hd, scr, stride);
                CHECK(!memcmp(out, out1, sizeof(float) * (size_t)ntok * nh * hd),
                      "case %zu f16 %d level %s: a row depends on its block", c, f16, lv);
            }
            ts_cpu_force_level(ts_cpu_detect());

            /* non-causal for real: the last visible row reaches the first
             * query (f32 cache, after both cache types were tested) */
            if (f16 && n_kv > 1) {
                ts_attn_params a32 = ap;
                a32.kv_f16 = false;
                ts_attention_fast(p2, &a32, q, kc, vc, pos0, 1, out, scr, stride);
                float *klast = kc + (n_kv - 1) * ap.kv_stride, *vlast = vc + (n_kv - 1) * ap.kv_stride;
                for (int i = 0; i < nkv * hd; i++) klast[i] = -klast[i], vlast[i] += 1.0f;
                ts_attention_fast(p2, &a32, q, kc, vc, pos0, 1, out1, scr, stride);
                CHECK(memcmp(out, out1, sizeof(float) * (size_t)nh * hd) != 0,
                      "case %zu: the first query does not see the last row", c);
                ts_attention(p2, &a32, q, kc, vc, pos0, 1, out1, scr, stride);
                e = max_err(&a32, q, kc, vc, out1, 1);
                CHECK(e < 2e-5, "case %zu: reference after changing the last row: max err %g", c, e);
            }
            free(scr);
        }
    }
    ts_threadpool_free(p2);
    ts_threadpool_free(p3);
    if (failures) {
        fprintf(stderr, "test_attn_window: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_attn_window: ok\n");
    return 0;
}
