/* fastops_avx2.c - the fast attention block and SwiGLU
 * (kernels/fastops_impl.h) built for AVX2 + FMA + F16C, with F16C for the
 * KV cache conversion. */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/fastops_x86.h"

static inline void cvt_f16_avx2(float *dst, const uint16_t *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}
#define FASTOPS_CVT_F16(dst, src, n) cvt_f16_avx2(dst, src, n)
#define FASTOPS_FMA(a, b, c) fmaf(a, b, c) /* vfmadd when vectorised */
#define FASTOPS_NAME(x) ts_##x##_avx2
#include "kernels/fastops_impl.h"
