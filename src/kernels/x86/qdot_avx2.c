/* qdot_avx2.c - the TS_CPU_AVX2 dispatch table: the x86 kernels of
 * qdot_x86.h built for AVX2 + FMA + F16C (this file alone gets
 * -mavx2 -mfma -mf16c; it only runs after cpu.c found those features). */
#define TS_X86_VNNI 0
#define TS_X86_WIDE_F32 0
#include "kernels/x86/qdot_x86.h"
#include "kernels/x86/fastops_x86.h"
#include "kernels/x86/gemm_x86.h"

const ts_kern ts_kern_tab_avx2 = {
    .level = TS_CPU_AVX2,
    .requires = TS_CPU_REQ_AVX2,
    .score = TS_CPU_SCORE_AVX2,
    TS_X86_TABLE_ENTRIES,
    /* panel GEMM (gemm_avx2.c): bit-identical to the AVX-512 VNNI kernels */
    .rp_gemm[TS_TYPE_Q4_0] = ts_rp_q4_0_avx2,
    .rp_gemm[TS_TYPE_Q4_1] = ts_rp_q4_1_avx2,
    .rp_gemm[TS_TYPE_Q8_0] = ts_rp_q8_0_avx2,
    .rp_gemm[TS_TYPE_Q5_0] = ts_rp_q5_0_avx2,
    .rp_gemm[TS_TYPE_Q5_1] = ts_rp_q5_1_avx2,
    .rp_gemm[TS_TYPE_Q2_K] = ts_rp_q2_k_avx2,
    .rp_gemm[TS_TYPE_Q3_K] = ts_rp_q3_k_avx2,
    .rp_gemm[TS_TYPE_Q4_K] = ts_rp_q4_k_avx2,
    .rp_gemm[TS_TYPE_Q5_K] = ts_rp_q5_k_avx2,
    .rp_gemm[TS_TYPE_Q6_K] = ts_rp_q6_k_avx2,
    .rp_quant = ts_rp_quant_avx2,
    .attn_block = ts_attn_block_avx2,
    .swiglu = ts_swiglu_avx2,
    .axpy = ts_axpy_avx2,
    .geglu = ts_geglu_avx2,
};
