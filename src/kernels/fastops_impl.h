/* fastops_impl.h - the body of the fast attention block and SwiGLU / GeGLU (see
 * fastops.h), written as plain loops that the compiler vectorises, and
 * included by one file per ISA level, which defines FASTOPS_NAME(x) to name
 * its copies (ref/fastops_generic.c: no ISA flags; x86/fastops_avx2.c,
 * x86/fastops_avx512.c: built with those flags).
 *
 * Every vectorised loop is element-wise (no reduction across its lanes), so
 * its results do not depend on the vector width or on loop peeling; the
 * reductions (a row's max and sum) are sequential loops. Hence each level
 * gives the same bits whatever the batch, and the levels differ from each
 * other only where the compiler contracts a*b+c into an FMA.
 */
#ifndef FASTOPS_NAME
#error "define FASTOPS_NAME before including fastops_impl.h"
#endif

#include <math.h>
#include <string.h>

#include "kernels/fastops.h"

#ifndef FASTOPS_FMA
#define FASTOPS_FMA(a, b, c) ((a) * (b) + (c))
#endif
#include "quant/quant.h"

/* e^x for x <= 0 (0 below -87): x = n ln2 + f, |f| <= ln2/2, e^f by its
 * degree-6 Taylor polynomial (relative error < 2e-7), 2^n from the exponent
 * bits. Branch-free, so loops over it vectorise. n is rounded with the
 * 1.5 * 2^23 trick (round to nearest even, exact for |n| < 2^22). */
static inline float FASTOPS_NAME(expf)(float x) {
    const float big = 12582912.0f;
    if (x != x) return x; /* NaN in, NaN out: converting it to int below would be undefined */
    const float xc = x < -87.0f ? -87.0f : x;
    const float t = xc * 1.44269504088896341f + big;
    const float n = t - big;
    const float f = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    int32_t ni = (int32_t)n;
    uint32_t bits = (uint32_t)(ni + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x < -87.0f ? 0.0f : p * scale;
}

/* 16-wide hooks (an includer may define them with intrinsics; each must
 * compute every lane by the same sequence whatever the surrounding call):
 *   SCORES16(dst, q, kcol, hd, scale): dst[u] = (sum_d q[d] * kcol[d*KT + u]) * scale,
 *       the sum in d order with FMAs
 *   EXP16(p, s, m): p[u] = exp(s[u] - m)
 *   PV16(acc, alpha, s, vcol, j0, j1, hd): acc[u] = acc[u] * alpha, then
 *       acc[u] = fma(s[j], vcol[j*hd + u], acc[u]) for j = j0 .. j1-1 */
#ifndef FASTOPS_SCORES16
static inline void FASTOPS_NAME(scores16)(float *dst, const float *q, const float *kcol, int hd, float scale) {
    float a[16] = {0};
    for (int d = 0; d < hd; d++)
        for (int u = 0; u < 16; u++) a[u] = FASTOPS_FMA(q[d], kcol[d * TS_ATTN_KT + u], a[u]);
    for (int u = 0; u < 16; u++) dst[u] = a[u] * scale;
}
#define FASTOPS_SCORES16(dst, q, kcol, hd, scale) FASTOPS_NAME(scores16)(dst, q, kcol, hd, scale)
#endif
#ifndef FASTOPS_EXP16
static inline void FASTOPS_NAME(exp16)(float *p, const float *s, float m) {
    for (int u = 0; u < 16; u++) p[u] = FASTOPS_NAME(expf)(s[u] - m);
}
#define FASTOPS_EXP16(p, s, m) FASTOPS_NAME(exp16)(p, s, m)
#endif
#ifndef FASTOPS_PV16
static inline void FASTOPS_NAME(pv16)(float *acc, float alpha, const float *s, const float *vcol, int j0, int j1,
                                      int hd) {
    float a[16];
    for (int u = 0; u < 16; u++) a[u] = acc[u] * alpha;
    for (int jj = j0; jj < j1; jj++)
        for (int u = 0; u < 16; u++) a[u] = FASTOPS_FMA(s[jj], vcol[(int64_t)jj * hd + u], a[u]);
    for (int u = 0; u < 16; u++) acc[u] = a[u];
}
#define FASTOPS_PV16(acc, alpha, s, vcol, j0, j1, hd) FASTOPS_NAME(pv16)(acc, alpha, s, vcol, j0, j1, hd)
#endif

/* Whole-row hooks (an includer may replace them, e.g. to keep several
 * chunks' accumulators in registers at once; each lane's sequence must stay
 * the one above):
 *   SCORES(s, q, kt, hd, scale, nk16): SCORES16 for the key chunks 0 .. nk16/16
 *   PV(acc, alpha, s, vt, j0, j1, hd): PV16 for the dims 0 .. hd/16*16 */
#ifndef FASTOPS_SCORES
#define FASTOPS_SCORES(s, q, kt, hd, scale, nk16)                                        \
    for (int jb_ = 0; jb_ < (nk16); jb_ += 16) FASTOPS_SCORES16((s) + jb_, q, (kt) + jb_, hd, scale)
#endif
#ifndef FASTOPS_PV
#define FASTOPS_PV(acc, alpha, s, vt, j0, j1, hd)                                        \
    for (int d_ = 0; d_ + 16 <= (hd); d_ += 16) FASTOPS_PV16((acc) + d_, alpha, s, (vt) + d_, j0, j1, hd)
#endif

/* Hooks over g < G <= TS_ATTN_G rows that see the same keys: the query
 * heads of one token that share a KV head, or (non-causal, one query head
 * per KV head) the same head of consecutive tokens; one load of K or V
 * serves all of them (an includer may keep every row's accumulators in
 * registers at once, each lane's sequence staying the one above):
 *   SCORES_G(s, q, qs, kt, hd, scale, nk16, G): SCORES for row g's query
 *       q + g * qs into s + g * TS_ATTN_KT
 *   PV_G(acc, alpha, s, vt, j0, j1, hd, G): PV of row g: acc + g * hd,
 *       alpha[g], s + g * TS_ATTN_KT */
#ifndef FASTOPS_SCORES_G
#define FASTOPS_SCORES_G(s, q, qs, kt, hd, scale, nk16, G)                               \
    for (int g_ = 0; g_ < (G); g_++) FASTOPS_SCORES((s) + g_ * TS_ATTN_KT, (q) + (int64_t)g_ * (qs), kt, hd, scale, nk16)
#endif
#ifndef FASTOPS_PV_G
#define FASTOPS_PV_G(acc, alpha, s, vt, j0, j1, hd, G)                                   \
    for (int g_ = 0; g_ < (G); g_++)                                                       \
        FASTOPS_PV((acc) + (int64_t)g_ * (hd), (alpha)[g_], (s) + g_ * TS_ATTN_KT, vt, j0, j1, hd)
#endif

/* sigmoid(a) = 1 / (1 + e^-a), with e^-a computed as e^-|a| to stay in the
 * exp's domain: for a < 0, 1/(1 + e^-a) = e^a / (1 + e^a) */
static inline float FASTOPS_NAME(sigmoid)(float a) {
    const float e = FASTOPS_NAME(expf)(-fabsf(a));
    return a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* An includer may define FASTOPS_SWIGLU_HEAD(out, gate, up, n) /
 * FASTOPS_GEGLU_HEAD: do elements [0, i) with the same per-element sequence
 * and return i (the loops below finish the rest). */
#ifndef FASTOPS_SWIGLU_HEAD
#define FASTOPS_SWIGLU_HEAD(out, gate, up, n) 0
#endif
#ifndef FASTOPS_GEGLU_HEAD
#define FASTOPS_GEGLU_HEAD(out, gate, up, n) 0
#endif

void FASTOPS_NAME(swiglu)(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = FASTOPS_SWIGLU_HEAD(out, gate, up, n); i < n; i++) {
        const float g = gate[i];
        out[i] = g * FASTOPS_NAME(sigmoid)(g) * up[i];
    }
}

/* gelu_tanh(g) = 0.5 g (1 + tanh z) = g sigmoid(2z), z = sqrt(2/pi) (g + 0.044715 g^3) */
void FASTOPS_NAME(geglu)(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = FASTOPS_GEGLU_HEAD(out, gate, up, n); i < n; i++) {
        const float g = gate[i];
        const float z2 = 1.5957691216057308f * (g + 0.044715f * g * g * g); /* 2 sqrt(2/pi) */
        out[i] = g * FASTOPS_NAME(sigmoid)(z2) * up[i];
    }
}

/* y[i] = fmaf(a, x[i], y[i]): one rounding per element at every level (a
 * fused multiply-add vectorised, or libm's fmaf), so every level gives the
 * scalar loop's bits. */
void FASTOPS_NAME(axpy)(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, x[i], y[i]);
}

#ifndef FASTOPS_CVT_F16
/* f16 -> f32, exact for every input: the 15 exponent+mantissa bits shifted
 * into f32 position and scaled by 2^112 (rebiases normals, normalises
 * subnormals), inf/NaN patched; branch-free so that it vectorises. */
static inline void FASTOPS_NAME(cvt_f16)(float *dst, const uint16_t *src, int n) {
    for (int i = 0; i < n; i++) {
        const uint32_t h = src[i], em = h & 0x7fffu;
        uint32_t b = em << 13;
        float f;
        memcpy(&f, &b, 4);
        f *= 0x1p112f;
        uint32_t fb;
        memcpy(&fb, &f, 4);
        fb = em >= 0x7c00u ? (0x7f800000u | (em << 13)) : fb;
        fb |= (h & 0x8000u) << 16;
        memcpy(&dst[i], &fb, 4);
    }
}
#define FASTOPS_CVT_F16(dst, src, n) FASTOPS_NAME(cvt_f16)(dst, src, n)
#endif

/* K rows [k0, k0 + nk) of KV head kvh -> kt[d * TS_ATTN_KT + j] (transposed);
 * V rows -> vt[j * hd + d]. tmp: hd floats. An includer may define
 * FASTOPS_LOAD_TILE(j, kvh, k0, nk, kt, vt, tmp) returning 1 when it did the
 * job (same values: conversion is exact), 0 to fall back to this loop. */
#ifndef FASTOPS_LOAD_TILE
#define FASTOPS_LOAD_TILE(j, kvh, k0, nk, kt, vt, tmp) 0
#endif
static void FASTOPS_NAME(load_tile)(const ts_attn_job *j, int kvh, int64_t k0, int nk, float *kt, float *vt,
                                    float *tmp) {
    const ts_attn_params *ap = j->ap;
    const int hd = ap->head_dim;
    if (FASTOPS_LOAD_TILE(j, kvh, k0, nk, kt, vt, tmp)) return;
    for (int jj = 0; jj < nk; jj++) {
        const int64_t off = (k0 + jj) * ap->kv_stride + (int64_t)kvh * hd;
        float *vrow = vt + (int64_t)jj * hd;
        if (ap->kv_f16) {
            const uint16_t *ks = (const uint16_t *)j->k_cache + off, *vs = (const uint16_t *)j->v_cache + off;
            FASTOPS_CVT_F16(vrow, vs, hd);
            FASTOPS_CVT_F16(tmp, ks, hd);
            for (int d = 0; d < hd; d++) kt[d * TS_ATTN_KT + jj] = tmp[d];
        } else {
            const float *ks = (const float *)j->k_cache + off, *vs = (const float *)j->v_cache + off;
            memcpy(vrow, vs, (size_t)hd * sizeof(float));
            for (int d = 0; d < hd; d++) kt[d * TS_ATTN_KT + jj] = ks[d];
        }
    }
}

void FASTOPS_NAME(attn_block)(const ts_attn_job *j, int kvh, int t0, int t1, float *scratch) {
    const ts_attn_params *ap = j->ap;
    const int hd = ap->head_dim, group = ap->n_head / ap->n_head_kv, n_rows = (t1 - t0) * group;
    float *kt = scratch;                         /* [hd][KT] */
    float *vt = kt + (int64_t)hd * TS_ATTN_KT;   /* [KT][hd] */
    float *s = vt + (int64_t)hd * TS_ATTN_KT;    /* [TS_ATTN_G][KT] */
    float *acc = s + TS_ATTN_G * TS_ATTN_KT;     /* [n_rows][hd] */
    float *ml = acc + (int64_t)n_rows * hd;      /* [n_rows][2]: running max, sum */
    float *tmp = ml + 2 * (int64_t)n_rows;       /* [hd] */
    memset(acc, 0, sizeof(float) * (size_t)n_rows * (size_t)hd);
    for (int r = 0; r < n_rows; r++) ml[2 * r] = -INFINITY, ml[2 * r + 1] = 0.0f;

    /* keys any row needs, [lo, k_end): causal, from the first row's window
     * start to the last row's position; non-causal (n_kv > 0), all n_kv */
    const int full = ap->n_kv > 0;
    const int64_t p_first = j->pos0 + t0, k_end = full ? ap->n_kv : j->pos0 + t1;
    int64_t lo = !full && ap->n_swa > 0 ? p_first - ap->n_swa + 1 : 0;
    if (lo < 0) lo = 0;
    for (int64_t k0 = lo / TS_ATTN_KT * TS_ATTN_KT; k0 < k_end; k0 += TS_ATTN_KT) {
        const int nk = (int)(k_end - k0 < TS_ATTN_KT ? k_end - k0 : TS_ATTN_KT);
        FASTOPS_NAME(load_tile)(j, kvh, k0, nk, kt, vt, tmp);
        /* non-causal with one query head per KV head: rows of TS_ATTN_G
         * consecutive tokens at once (they see the same keys, so the
         * grouping changes no row's operations); else one token's heads */
        const int by_tok = full && group == 1;
        for (int t = t0, tg = 1; t < t1; t += tg) {
            tg = by_tok ? (t1 - t < TS_ATTN_G ? t1 - t : TS_ATTN_G) : 1;
            /* a token's rows (its query heads of KV head kvh) see the same keys */
            const int64_t p = j->pos0 + t;
            int64_t rlo = !full && ap->n_swa > 0 ? p - ap->n_swa + 1 : 0;
            if (rlo < k0) rlo = k0;
            const int64_t rend = full ? k0 + nk : p + 1; /* the row's keys end here */
            const int64_t rhi = rend < k0 + nk ? rend : k0 + nk;
            if (rlo >= rhi) continue; /* no key of this tile is visible to the token */
            const int j0 = (int)(rlo - k0), j1 = (int)(rhi - k0);
            /* whole 16-key chunks (kt columns exist up to KT), up to the
             * token's last key: the chunks past it would be all -inf scores
             * and 0 weights, which change no max and no sum (same bits) */
            const int nk16 = (j1 + 15) / 16 * 16;
            const int64_t qs = by_tok ? (int64_t)ap->n_head * hd : hd;
            for (int g0 = 0; g0 < group; g0 += TS_ATTN_G) {
                const int G = by_tok ? tg : group - g0 < TS_ATTN_G ? group - g0 : TS_ATTN_G;
                const int r0 = (t - t0) * group + g0, h0 = kvh * group + g0;
                const float *qr = j->q + ((int64_t)t * ap->n_head + h0) * hd;
                /* scores, 16 keys at a time with the partial sums in
                 * registers; keys outside [j0, j1) become -inf */
                FASTOPS_SCORES_G(s, qr, qs, kt, hd, ap->scale, nk16, G);
                float alpha[TS_ATTN_G];
                for (int g = 0; g < G; g++) {
                    float *sg = s + g * TS_ATTN_KT, *mr = ml + 2 * (r0 + g);
                    for (int jj = 0; jj < nk16; jj++) sg[jj] = jj >= j0 && jj < j1 ? sg[jj] : -INFINITY;
                    if (ap->softcap > 0.0f)
                        for (int jj = j0; jj < j1; jj++) sg[jj] = ap->softcap * tanhf(sg[jj] / ap->softcap);
                    /* max and sum in 16 lanes (lane = key position mod 16,
                     * the same in every batch), then a fixed-order
                     * reduction of the lanes */
                    float m16[16];
                    for (int u = 0; u < 16; u++) m16[u] = sg[u];
                    for (int jb = 16; jb < nk16; jb += 16)
                        for (int u = 0; u < 16; u++) m16[u] = sg[jb + u] > m16[u] ? sg[jb + u] : m16[u];
                    float mt = m16[0];
                    for (int u = 1; u < 16; u++) mt = m16[u] > mt ? m16[u] : mt;
                    const float m_old = mr[0], m_new = mt > m_old ? mt : m_old;
                    alpha[g] = FASTOPS_NAME(expf)(m_old - m_new); /* 0 for the first tile */
                    float l16[16] = {0};
                    for (int jb = 0; jb < nk16; jb += 16) {
                        FASTOPS_EXP16(sg + jb, sg + jb, m_new);
                        for (int u = 0; u < 16; u++) {
                            const int jj = jb + u;
                            sg[jj] = jj >= j0 && jj < j1 ? sg[jj] : 0.0f;
                            l16[u] += sg[jj];
                        }
                    }
                    float lt = 0.0f;
                    for (int u = 0; u < 16; u++) lt += l16[u];
                    mr[0] = m_new;
                    mr[1] = mr[1] * alpha[g] + lt;
                }
                /* acc = acc * alpha + sum_j p_j v_j, 16 dims at a time in registers */
                float *ar = acc + (int64_t)r0 * hd;
                FASTOPS_PV_G(ar, alpha, s, vt, j0, j1, hd, G);
                for (int g = 0; g < G; g++)
                    for (int d0 = hd / 16 * 16; d0 < hd; d0++) {
                        const float *sg = s + g * TS_ATTN_KT;
                        float a = ar[(int64_t)g * hd + d0] * alpha[g];
                        for (int jj = j0; jj < j1; jj++) a = FASTOPS_FMA(sg[jj], vt[(int64_t)jj * hd + d0], a);
                        ar[(int64_t)g * hd + d0] = a;
                    }
            }
        }
    }
    for (int r = 0; r < n_rows; r++) {
        const int t = t0 + r / group, h = kvh * group + r % group;
        float *o = j->out + ((int64_t)t * ap->n_head + h) * hd;
        const float inv = 1.0f / ml[2 * r + 1];
        const float *ar = acc + (int64_t)r * hd;
        for (int d = 0; d < hd; d++) o[d] = ar[d] * inv;
    }
}
