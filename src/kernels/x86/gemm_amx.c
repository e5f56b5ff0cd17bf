/* gemm_amx.c - the AMX kernels (kernels/amx/amx_gemm_impl.h) on the real
 * tile unit. Compiled with -mamx-tile -mamx-int8 -mamx-bf16 (and AVX-512
 * for the float steps between tile products); reached only after
 * ts_amx_hw_status said the unit is usable. */
#include <immintrin.h>

#include "kernels/amx/amx_impl.h"

/* gcc 12's tile intrinsics do not tell the compiler that LDTILECFG and
 * TILELOADD read memory or that TILESTORED writes it, so stores filling a
 * config or an operand could be dropped or moved, and reads of a stored
 * tile served from registers: a compiler barrier on each side. */
#define TS_MEM_BARRIER() __asm__ volatile("" ::: "memory")
#define FN(name) name##_hw
#define T_CFG(cfg) do { TS_MEM_BARRIER(); _tile_loadconfig(cfg); } while (0)
#define T_RELEASE() _tile_release()
#define T_ZERO(t) _tile_zero(t)
#define T_LOAD(t, p, s) do { TS_MEM_BARRIER(); _tile_loadd(t, p, (long)(s)); } while (0)
#define T_STORE(t, p, s) do { _tile_stored(t, p, (long)(s)); TS_MEM_BARRIER(); } while (0)
#define T_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define T_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define T_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define T_DPBUUD(c, a, b) _tile_dpbuud(c, a, b)
#define T_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
/* the int path's float step (amx_impl.h's ts_amx_epi): the 16 token rows
 * of the tile in 16 registers through the whole group; every row is
 * computed (the stale ones past nt are never written out), with the
 * emulator's operations lane for lane: integer adds, one conversion, the
 * product wd * s, one fused multiply-add. */
static inline void int_epi_hw(float acc[16][16], const ts_amx_epi *e, int i0, int i1, int nt, bool two) {
    (void)nt;
    __m512 a[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) a[t] = _mm512_loadu_ps(acc[t]);
    for (int i = i0; i < i1; i++) {
        const __m512 wd = _mm512_loadu_ps(e->wd[i]);
        if (two) {
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) {
                const __m512i v = _mm512_add_epi32(_mm512_slli_epi32(_mm512_loadu_si512(e->c1[i][t]), 8),
                                                   _mm512_add_epi32(_mm512_loadu_si512(e->c2[i][t]),
                                                                    _mm512_set1_epi32(e->off[i][t])));
                a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd, _mm512_set1_ps(e->sx[i][t])), a[t]);
            }
        } else {
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) {
                const __m512i v = _mm512_sllv_epi32(
                    _mm512_add_epi32(_mm512_loadu_si512(e->c1[i][t]), _mm512_set1_epi32(e->off[i][t])),
                    _mm512_set1_epi32(e->sh[i][t]));
                a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd, _mm512_set1_ps(e->sx[i][t])), a[t]);
            }
        }
        if (e->wm[i]) {
            const __m512 wm = _mm512_loadu_ps(e->wm[i]);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) a[t] = _mm512_fmadd_ps(wm, _mm512_set1_ps(e->dsx[i][t]), a[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) _mm512_storeu_ps(acc[t], a[t]);
}

#include "kernels/amx/amx_gemm_impl.h"
