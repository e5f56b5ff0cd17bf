/* fastops_avx512.c - the fast attention block and SwiGLU
 * (kernels/fastops_impl.h) built with the AVX-512 flags (the compiler
 * vectorises the element-wise loops 16 wide), F16C for the KV cache. */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/fastops_x86.h"

static inline void cvt_f16_avx512(float *dst, const uint16_t *src, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}
#define FASTOPS_CVT_F16(dst, src, n) cvt_f16_avx512(dst, src, n)

/* 16 x 16 transpose of r[16] (rows -> columns) */
static inline __m512 unpacklo_pd_ps(__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
static inline __m512 unpackhi_pd_ps(__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = unpacklo_pd_ps(t[4 * i + 0], t[4 * i + 2]);
        r[4 * i + 1] = unpackhi_pd_ps(t[4 * i + 0], t[4 * i + 2]);
        r[4 * i + 2] = unpacklo_pd_ps(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = unpackhi_pd_ps(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* A tile of an f16 or f32 cache with head_dim a multiple of 16: K in 16 x
 * 16 blocks through transpose16 (rows past nk are zeros), V row by row. The
 * f32 case is a DiT's (K and V are the projections themselves); the scalar
 * transposition's strided stores cost a quarter of its attention. */
static inline __m512 load16(const ts_attn_params *ap, const void *base, int64_t off) {
    return ap->kv_f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)((const uint16_t *)base + off)))
                      : _mm512_loadu_ps((const float *)base + off);
}
static int load_tile_avx512(const ts_attn_job *j, int kvh, int64_t k0, int nk, float *kt, float *vt) {
    const ts_attn_params *ap = j->ap;
    const int hd = ap->head_dim;
    if (hd % 16) return 0;
    for (int jb = 0; jb < nk; jb += 16) {
        const int n = nk - jb < 16 ? nk - jb : 16;
        for (int d0 = 0; d0 < hd; d0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < n ? load16(ap, j->k_cache, (k0 + jb + i) * ap->kv_stride + (int64_t)kvh * hd + d0)
                             : _mm512_setzero_ps();
            transpose16(r);
            for (int d = 0; d < 16; d++) _mm512_storeu_ps(kt + (d0 + d) * TS_ATTN_KT + jb, r[d]);
        }
    }
    for (int jj = 0; jj < nk; jj++) {
        const int64_t off = (k0 + jj) * ap->kv_stride + (int64_t)kvh * hd;
        for (int d0 = 0; d0 < hd; d0 += 16)
            _mm512_storeu_ps(vt + (int64_t)jj * hd + d0, load16(ap, j->v_cache, off + d0));
    }
    return 1;
}
#define FASTOPS_LOAD_TILE(j, kvh, k0, nk, kt, vt, tmp) load_tile_avx512(j, kvh, k0, nk, kt, vt)

/* the 16-wide hooks of fastops_impl.h on one zmm */
__attribute__((unused)) static inline void scores16_avx512(float *dst, const float *q, const float *kcol, int hd, float scale) {
    __m512 a = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) a = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(kcol + d * TS_ATTN_KT), a);
    _mm512_storeu_ps(dst, _mm512_mul_ps(a, _mm512_set1_ps(scale)));
}
#define FASTOPS_SCORES16(dst, q, kcol, hd, scale) scores16_avx512(dst, q, kcol, hd, scale)

/* e^x, x <= 0, as ts_fast_expf's steps with FMAs */
static inline void exp16_avx512(float *p, const float *s, float m) {
    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(s), _mm512_set1_ps(m));
    const __m512 lo = _mm512_set1_ps(-87.0f), big = _mm512_set1_ps(12582912.0f);
    const __m512 xc = _mm512_max_ps(x, lo);
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big), big);
    const __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc));
    __m512 r = _mm512_set1_ps(1.0f / 720.0f);
    r = _mm512_fmadd_ps(r, f, _mm512_set1_ps(1.0f / 120.0f));
    r = _mm512_fmadd_ps(r, f, _mm512_set1_ps(1.0f / 24.0f));
    r = _mm512_fmadd_ps(r, f, _mm512_set1_ps(1.0f / 6.0f));
    r = _mm512_fmadd_ps(r, f, _mm512_set1_ps(0.5f));
    r = _mm512_fmadd_ps(r, f, _mm512_set1_ps(1.0f));
    r = _mm512_fmadd_ps(r, f, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    r = _mm512_mul_ps(r, _mm512_castsi512_ps(e));
    /* below -87 (and -inf): 0 */
    _mm512_storeu_ps(p, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), r));
}
#define FASTOPS_EXP16(p, s, m) exp16_avx512(p, s, m)

static inline void pv16_avx512(float *acc, float alpha, const float *s, const float *vcol, int j0, int j1, int hd) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(acc), _mm512_set1_ps(alpha));
    for (int jj = j0; jj < j1; jj++)
        a = _mm512_fmadd_ps(_mm512_set1_ps(s[jj]), _mm512_loadu_ps(vcol + (int64_t)jj * hd), a);
    _mm512_storeu_ps(acc, a);
}
#define FASTOPS_PV16(acc, alpha, s, vcol, j0, j1, hd) pv16_avx512(acc, alpha, s, vcol, j0, j1, hd)

/* Whole rows with every chunk's accumulator live at once (independent FMA
 * chains: one chunk at a time is bound by the FMA latency). Each lane's
 * operations and their order are those of scores16 / pv16 (the scores of
 * a token's rows: scores_gn below). */
#define AI static inline __attribute__((always_inline))

AI void pv_n(float *acc, float alpha, const float *s, const float *vt, int j0, int j1, int hd, const int nc) {
    __m512 a[16];
    const __m512 al = _mm512_set1_ps(alpha);
    for (int c = 0; c < nc; c++) a[c] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * c), al);
    for (int jj = j0; jj < j1; jj++) {
        const __m512 p = _mm512_set1_ps(s[jj]);
        const float *vr = vt + (int64_t)jj * hd;
        for (int c = 0; c < nc; c++) a[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vr + 16 * c), a[c]);
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(acc + 16 * c, a[c]);
}
static void pv_avx512(float *acc, float alpha, const float *s, const float *vt, int j0, int j1, int hd) {
    switch (hd / 16) {
    case 4: pv_n(acc, alpha, s, vt, j0, j1, hd, 4); break;
    case 8: pv_n(acc, alpha, s, vt, j0, j1, hd, 8); break;
    case 16: pv_n(acc, alpha, s, vt, j0, j1, hd, 16); break;
    default:
        for (int d = 0; d + 16 <= hd; d += 16) pv16_avx512(acc + d, alpha, s, vt + d, j0, j1, hd);
        break;
    }
}
#define FASTOPS_PV(acc, alpha, s, vt, j0, j1, hd) pv_avx512(acc, alpha, s, vt, j0, j1, hd)

/* G rows that see the same keys at once (fastops_impl.h's _G hooks): each K / V
 * vector loaded once feeds G independent accumulators. Every lane's
 * operations and order are scores_n's / pv_n's, so the bits are the same
 * as one row at a time. */
AI void scores_gn(float *s, const float *q, int64_t qs, const float *kt, int hd, float scale, const int nc,
                 const int G) {
    /* nc chunks of 16 keys for each of G rows: G * nc <= 16 accumulators */
    __m512 a[TS_ATTN_G][4];
    for (int g = 0; g < G; g++)
        for (int c = 0; c < nc; c++) a[g][c] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 k[4];
        for (int c = 0; c < nc; c++) k[c] = _mm512_loadu_ps(kt + d * TS_ATTN_KT + 16 * c);
        for (int g = 0; g < G; g++) {
            const __m512 qd = _mm512_set1_ps(q[(int64_t)g * qs + d]);
            for (int c = 0; c < nc; c++) a[g][c] = _mm512_fmadd_ps(qd, k[c], a[g][c]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
    for (int g = 0; g < G; g++)
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + g * TS_ATTN_KT + 16 * c, _mm512_mul_ps(a[g][c], sc));
}
#define SCORES_G_CASE(G)                                                                                 \
    switch (nk16 / 16) {                                                                                 \
    case 1: scores_gn(s, q, qs, kt, hd, scale, 1, G); break;                                                 \
    case 2: scores_gn(s, q, qs, kt, hd, scale, 2, G); break;                                                 \
    case 3: scores_gn(s, q, qs, kt, hd, scale, 3, G); break;                                                 \
    default: scores_gn(s, q, qs, kt, hd, scale, 4, G); break;                                                \
    }
static void scores_g_avx512(float *s, const float *q, int64_t qs, const float *kt, int hd, float scale, int nk16,
                            int G) {
    switch (G) {
    case 1: SCORES_G_CASE(1) break;
    case 2: SCORES_G_CASE(2) break;
    case 3: SCORES_G_CASE(3) break;
    default: SCORES_G_CASE(4) break;
    }
}
#define FASTOPS_SCORES_G(s, q, qs, kt, hd, scale, nk16, G) scores_g_avx512(s, q, qs, kt, hd, scale, nk16, G)

/* 64 dims (4 vectors) of G rows per pass over the keys */
AI void pv_g4(float *acc, const float *alpha, const float *s, const float *vt, int j0, int j1, int hd, const int G) {
    __m512 a[TS_ATTN_G][4];
    for (int g = 0; g < G; g++) {
        const __m512 al = _mm512_set1_ps(alpha[g]);
        for (int c = 0; c < 4; c++) a[g][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + (int64_t)g * hd + 16 * c), al);
    }
    for (int jj = j0; jj < j1; jj++) {
        const float *vr = vt + (int64_t)jj * hd;
        __m512 v[4];
        for (int c = 0; c < 4; c++) v[c] = _mm512_loadu_ps(vr + 16 * c);
        for (int g = 0; g < G; g++) {
            const __m512 p = _mm512_set1_ps(s[g * TS_ATTN_KT + jj]);
            for (int c = 0; c < 4; c++) a[g][c] = _mm512_fmadd_ps(p, v[c], a[g][c]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + (int64_t)g * hd + 16 * c, a[g][c]);
}
static void pv_g_avx512(float *acc, const float *alpha, const float *s, const float *vt, int j0, int j1, int hd,
                        int G) {
    if (hd % 64) { /* one row at a time */
        for (int g = 0; g < G; g++) pv_avx512(acc + (int64_t)g * hd, alpha[g], s + g * TS_ATTN_KT, vt, j0, j1, hd);
        return;
    }
    for (int d0 = 0; d0 < hd; d0 += 64) switch (G) {
        case 1: pv_g4(acc + d0, alpha, s, vt + d0, j0, j1, hd, 1); break;
        case 2: pv_g4(acc + d0, alpha, s, vt + d0, j0, j1, hd, 2); break;
        case 3: pv_g4(acc + d0, alpha, s, vt + d0, j0, j1, hd, 3); break;
        default: pv_g4(acc + d0, alpha, s, vt + d0, j0, j1, hd, 4); break;
        }
}
#define FASTOPS_PV_G(acc, alpha, s, vt, j0, j1, hd, G) pv_g_avx512(acc, alpha, s, vt, j0, j1, hd, G)
#define FASTOPS_FMA(a, b, c) fmaf(a, b, c) /* vfmadd when vectorised */
#define FASTOPS_NAME(x) ts_##x##_avx512
#include "kernels/fastops_impl.h"
