/* qdot_avx2.c - the TS_CPU_AVX2 dispatch table: the x86 kernels of
 * qdot_x86.h built for AVX2 + FMA + F16C (this file alone gets
 * -mavx2 -mfma -mf16c; it only runs after cpu.c found those features). */
#define TS_X86_VNNI 0
#define TS_X86_WIDE_F32 0
#include "kernels/x86/qdot_x86.h"
#include "kernels/x86/fastops_x86.h"

const ts_kern ts_kern_tab_avx2 = {
    .level = TS_CPU_AVX2,
    TS_X86_TABLE_ENTRIES,
    .attn_block = ts_attn_block_avx2,
    .swiglu = ts_swiglu_avx2,
};
