/* gemm_x86.h - the x86 panel kernels (repack.h), for the dispatch tables.
 * The _avx512 ones are defined in gemm_avx512.c (built with the AVX-512
 * flags; only the AVX-512 table refers to them), the _avx2 ones in
 * gemm_avx2.c (AVX2 flags; only the AVX2 table refers to them). */
#ifndef TS_KERNELS_GEMM_X86_H
#define TS_KERNELS_GEMM_X86_H

#include <stdint.h>

void ts_rp_q4_0_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q4_1_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q5_0_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q5_1_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q2_k_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q3_k_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q4_k_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q5_k_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q6_k_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_q8_0_avx512(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                       int n_rows);
void ts_rp_quant_avx512(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot);

void ts_rp_q4_0_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q4_1_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q5_0_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q5_1_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q2_k_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q3_k_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q4_k_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q5_k_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q6_k_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q8_0_avx2(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_quant_avx2(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot);

#endif
