/* fastops_avx2.c - the fast attention block and SwiGLU / GeGLU
 * (kernels/fastops_impl.h) built for AVX2 + FMA + F16C, with F16C for the
 * KV cache conversion.
 *
 * The compiler leaves fastops_impl.h's 16-wide hooks scalar at this level
 * (16 vfmadd231ss chains: attention was 53% of a 135M prefill on an AVX2
 * machine, docs/PERFORMANCE.md) and the GLUs' exp with its NaN branch too,
 * so the hooks are written here with intrinsics: a 16-lane chunk is two ymm,
 * and every lane's operations and their order stay fastops_impl.h's (the
 * exp as fastops_avx512.c's, with FMAs), so decode = prefill bit for bit as
 * before. The GLUs follow the scalar expf / sigmoid step by step, each
 * multiply and add rounded on its own: the scalar loop's bits under gcc (ISO
 * C: no contraction). clang contracts a*b+c inside one expression, so its
 * scalar loop would round differently; hence row tails go through the same
 * vector code (masked), never the scalar loop. */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/fastops_x86.h"

#define AI static inline __attribute__((always_inline))

static inline void cvt_f16_avx2(float *dst, const uint16_t *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}
#define FASTOPS_CVT_F16(dst, src, n) cvt_f16_avx2(dst, src, n)

/* 8 x 8 transpose of r[8] (rows -> columns) */
AI void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* A tile of an f16 or f32 cache with head_dim a multiple of 8: K in 8 x 8
 * blocks through transpose8 (rows past nk are zeros), V row by row; the
 * same values as the scalar loop (the conversion is exact). */
AI __m256 load8(const ts_attn_params *ap, const void *base, int64_t off) {
    return ap->kv_f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)((const uint16_t *)base + off)))
                      : _mm256_loadu_ps((const float *)base + off);
}
static int load_tile_avx2(const ts_attn_job *j, int kvh, int64_t k0, int nk, float *kt, float *vt) {
    const ts_attn_params *ap = j->ap;
    const int hd = ap->head_dim;
    if (hd % 8) return 0;
    for (int jb = 0; jb < nk; jb += 8) {
        const int n = nk - jb < 8 ? nk - jb : 8;
        for (int d0 = 0; d0 < hd; d0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < n ? load8(ap, j->k_cache, (k0 + jb + i) * ap->kv_stride + (int64_t)kvh * hd + d0)
                             : _mm256_setzero_ps();
            transpose8(r);
            for (int d = 0; d < 8; d++) _mm256_storeu_ps(kt + (d0 + d) * TS_ATTN_KT + jb, r[d]);
        }
    }
    for (int jj = 0; jj < nk; jj++) {
        const int64_t off = (k0 + jj) * ap->kv_stride + (int64_t)kvh * hd;
        for (int d0 = 0; d0 < hd; d0 += 8) _mm256_storeu_ps(vt + (int64_t)jj * hd + d0, load8(ap, j->v_cache, off + d0));
    }
    return 1;
}
#define FASTOPS_LOAD_TILE(j, kvh, k0, nk, kt, vt, tmp) load_tile_avx2(j, kvh, k0, nk, kt, vt)

/* e^x, x <= 0, 8 lanes: fastops_avx512.c's steps (ts_fast_expf's with FMAs) */
AI __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f), big = _mm256_set1_ps(12582912.0f);
    const __m256 xc = _mm256_max_ps(x, lo);
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), big), big);
    const __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc));
    __m256 r = _mm256_set1_ps(1.0f / 720.0f);
    r = _mm256_fmadd_ps(r, f, _mm256_set1_ps(1.0f / 120.0f));
    r = _mm256_fmadd_ps(r, f, _mm256_set1_ps(1.0f / 24.0f));
    r = _mm256_fmadd_ps(r, f, _mm256_set1_ps(1.0f / 6.0f));
    r = _mm256_fmadd_ps(r, f, _mm256_set1_ps(0.5f));
    r = _mm256_fmadd_ps(r, f, _mm256_set1_ps(1.0f));
    r = _mm256_fmadd_ps(r, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    r = _mm256_mul_ps(r, _mm256_castsi256_ps(e));
    /* below -87 (and -inf, NaN): 0 */
    return _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_GE_OQ), r);
}
static inline void exp16_avx2(float *p, const float *s, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    for (int h = 0; h < 2; h++) _mm256_storeu_ps(p + 8 * h, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * h), mv)));
}
#define FASTOPS_EXP16(p, s, m) exp16_avx2(p, s, m)

/* G rows that see the same keys (fastops_impl.h's _G hooks), nc 16-key
 * chunks (2 ymm each) per pass over the head dims: each K vector loaded
 * feeds G independent FMA chains; G * 2 nc <= 8 accumulators. Every lane
 * is scores16's sequence (sum over d in order with FMAs, then the scale). */
AI void scores_gn(float *s, const float *q, int64_t qs, const float *kt, int hd, float scale, const int nc,
                  const int G) {
    __m256 a[TS_ATTN_G][8];
    for (int g = 0; g < G; g++)
        for (int c = 0; c < 2 * nc; c++) a[g][c] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 k[8];
        for (int c = 0; c < 2 * nc; c++) k[c] = _mm256_loadu_ps(kt + d * TS_ATTN_KT + 8 * c);
        for (int g = 0; g < G; g++) {
            const __m256 qd = _mm256_broadcast_ss(q + (int64_t)g * qs + d);
            for (int c = 0; c < 2 * nc; c++) a[g][c] = _mm256_fmadd_ps(qd, k[c], a[g][c]);
        }
    }
    const __m256 sc = _mm256_set1_ps(scale);
    for (int g = 0; g < G; g++)
        for (int c = 0; c < 2 * nc; c++) _mm256_storeu_ps(s + g * TS_ATTN_KT + 8 * c, _mm256_mul_ps(a[g][c], sc));
}
/* F(args..., nc, G) over 16-wide chunks [c0, c_end): as many chunks per
 * call as G leaves accumulators for (G = 1: 4, G = 2: 2, else 1), each call
 * with compile-time nc and G; the caller's args name chunk c0's data. */
#define BY_CHUNKS(F, c0, c_end, G, ...)                                                            \
    for (int c0 = 0; c0 < (c_end);) {                                                              \
        const int left_ = (c_end) - c0;                                                            \
        switch (G) {                                                                               \
        case 1:                                                                                    \
            if (left_ >= 4) F(__VA_ARGS__, 4, 1), c0 += 4;                                         \
            else if (left_ == 3) F(__VA_ARGS__, 3, 1), c0 += 3;                                    \
            else if (left_ == 2) F(__VA_ARGS__, 2, 1), c0 += 2;                                    \
            else F(__VA_ARGS__, 1, 1), c0 += 1;                                                    \
            break;                                                                                 \
        case 2:                                                                                    \
            if (left_ >= 2) F(__VA_ARGS__, 2, 2), c0 += 2;                                         \
            else F(__VA_ARGS__, 1, 2), c0 += 1;                                                    \
            break;                                                                                 \
        case 3: F(__VA_ARGS__, 1, 3), c0 += 1; break;                                              \
        default: F(__VA_ARGS__, 1, 4), c0 += 1; break;                                             \
        }                                                                                          \
    }
static void scores_g_avx2(float *s, const float *q, int64_t qs, const float *kt, int hd, float scale, int nk16,
                          int G) {
    BY_CHUNKS(scores_gn, c0, nk16 / 16, G, s + 16 * c0, q, qs, kt + 16 * c0, hd, scale)
}
#define FASTOPS_SCORES_G(s, q, qs, kt, hd, scale, nk16, G) scores_g_avx2(s, q, qs, kt, hd, scale, nk16, G)

/* nc 16-dim chunks of G rows per pass over the keys (G * 2 nc <= 8
 * accumulators); every lane is pv16's sequence (acc * alpha, then one FMA
 * per key in order). Covers the dims [0, hd / 16 * 16), as PV_G must. */
AI void pv_gn(float *acc, const float *alpha, const float *s, const float *vt, int j0, int j1, int hd, const int nc,
              const int G) {
    __m256 a[TS_ATTN_G][8];
    for (int g = 0; g < G; g++) {
        const __m256 al = _mm256_set1_ps(alpha[g]);
        for (int c = 0; c < 2 * nc; c++) a[g][c] = _mm256_mul_ps(_mm256_loadu_ps(acc + (int64_t)g * hd + 8 * c), al);
    }
    for (int jj = j0; jj < j1; jj++) {
        const float *vr = vt + (int64_t)jj * hd;
        __m256 v[8];
        for (int c = 0; c < 2 * nc; c++) v[c] = _mm256_loadu_ps(vr + 8 * c);
        for (int g = 0; g < G; g++) {
            const __m256 p = _mm256_broadcast_ss(s + g * TS_ATTN_KT + jj);
            for (int c = 0; c < 2 * nc; c++) a[g][c] = _mm256_fmadd_ps(p, v[c], a[g][c]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int c = 0; c < 2 * nc; c++) _mm256_storeu_ps(acc + (int64_t)g * hd + 8 * c, a[g][c]);
}
static void pv_g_avx2(float *acc, const float *alpha, const float *s, const float *vt, int j0, int j1, int hd,
                      int G) {
    BY_CHUNKS(pv_gn, c0, hd / 16, G, acc + 16 * c0, alpha, s, vt + 16 * c0, j0, j1, hd)
}
#define FASTOPS_PV_G(acc, alpha, s, vt, j0, j1, hd, G) pv_g_avx2(acc, alpha, s, vt, j0, j1, hd, G)

/* ---- the GLUs: fastops_impl.h's expf and sigmoid, step for step ---- */

/* FASTOPS_NAME(expf) on 8 lanes, without FMAs (the scalar function's bits
 * for every finite input; a NaN lane comes out finite here, but the GLU's
 * product with the NaN gate makes its output NaN either way) */
AI __m256 expf8_exact(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f), big = _mm256_set1_ps(12582912.0f);
    const __m256 xc = _mm256_blendv_ps(x, lo, _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), big);
    const __m256 n = _mm256_sub_ps(t, big);
    const __m256 f = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f))),
                                   _mm256_mul_ps(n, _mm256_set1_ps(1.42860682030941723e-6f)));
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(0.5f));
    p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(1.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
/* sigmoid(a): a >= 0 ? 1 / (1 + e) : e / (1 + e), e = e^-|a| */
AI __m256 sigmoid8(__m256 a) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = expf8_exact(_mm256_or_ps(_mm256_set1_ps(-0.0f), a) /* -|a| */);
    return _mm256_div_ps(_mm256_blendv_ps(e, one, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GE_OQ)),
                         _mm256_add_ps(one, e));
}
/* lanes [0, r) of a ymm mask (the tail of a row goes through the same vector
 * code as the rest, so an element's bits do not depend on where a thread's
 * range or the row ends) */
AI __m256i tail_mask(int64_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
AI __m256 swiglu8(__m256 g, __m256 u) { return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), u); }
AI __m256 geglu8(__m256 g, __m256 u) {
    const __m256 c3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), g), g);
    const __m256 z2 = _mm256_mul_ps(_mm256_set1_ps(1.5957691216057308f), _mm256_add_ps(g, c3));
    return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(z2)), u);
}
#define GLU_BODY(F)                                                                                       \
    int64_t i = 0;                                                                                        \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, F(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i))); \
    if (i < n) {                                                                                          \
        const __m256i m = tail_mask(n - i);                                                               \
        _mm256_maskstore_ps(out + i, m, F(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m))); \
    }                                                                                                     \
    return n;
static int64_t swiglu_head_avx2(float *out, const float *gate, const float *up, int64_t n) { GLU_BODY(swiglu8) }
static int64_t geglu_head_avx2(float *out, const float *gate, const float *up, int64_t n) { GLU_BODY(geglu8) }
#define FASTOPS_SWIGLU_HEAD(out, gate, up, n) swiglu_head_avx2(out, gate, up, n)
#define FASTOPS_GEGLU_HEAD(out, gate, up, n) geglu_head_avx2(out, gate, up, n)

#define FASTOPS_FMA(a, b, c) fmaf(a, b, c) /* vfmadd when vectorised */
#define FASTOPS_NAME(x) ts_##x##_avx2
#include "kernels/fastops_impl.h"
