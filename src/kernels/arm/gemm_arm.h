/* gemm_arm.h - the aarch64 panel kernels (repack.h), for the NEON dispatch
 * table. Defined in gemm_neon.c (built with the arm/ flags); only the NEON
 * table (qdot_neon.c) refers to them. */
#ifndef TS_KERNELS_GEMM_ARM_H
#define TS_KERNELS_GEMM_ARM_H

#include <stdint.h>

void ts_rp_q4_0_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q4_1_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q5_0_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q5_1_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q2_k_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q3_k_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q4_k_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q5_k_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q6_k_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_q8_0_neon(int64_t n, const uint8_t *w, const uint8_t *x, int nt, int hi, float *y, int64_t ys,
                     int n_rows);
void ts_rp_quant_neon(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot);

#endif
