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
#include "kernels/amx/amx_gemm_impl.h"
