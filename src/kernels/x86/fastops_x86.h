/* fastops_x86.h - the x86 copies of the fast attention block, SwiGLU and GeGLU
 * (kernels/fastops.h), for the dispatch tables: fastops_avx2.c and
 * fastops_avx512.c, each built with its level's flags. */
#ifndef TS_KERNELS_FASTOPS_X86_H
#define TS_KERNELS_FASTOPS_X86_H

#include "kernels/fastops.h"

void ts_attn_block_avx2(const ts_attn_job *j, int kvh, int t0, int t1, float *scratch);
void ts_swiglu_avx2(float *out, const float *gate, const float *up, int64_t n);
void ts_geglu_avx2(float *out, const float *gate, const float *up, int64_t n);
void ts_axpy_avx2(float *y, float a, const float *x, int64_t n);
void ts_attn_block_avx512(const ts_attn_job *j, int kvh, int t0, int t1, float *scratch);
void ts_swiglu_avx512(float *out, const float *gate, const float *up, int64_t n);
void ts_geglu_avx512(float *out, const float *gate, const float *up, int64_t n);
void ts_axpy_avx512(float *y, float a, const float *x, int64_t n);

#endif
