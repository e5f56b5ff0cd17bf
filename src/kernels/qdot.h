/* qdot.h - matrix-vector products of weights in their stored GGUF type with
 * activations quantized to 8 bits, plus the f32/f16 weight paths.
 *
 * A weight matrix W[n_out][n_in] keeps its file type; row r is n_in elements
 * at w + r * row_bytes. The activation row is first converted once per token
 * (ts_act_quantize) into the format its weight type dots against:
 *
 *   weight type                      activation       block
 *   Q4_0 Q4_1 Q5_0 Q5_1 Q8_0         TS_ACT_Q8        36 bytes / 32 values
 *   Q2_K Q3_K Q4_K Q5_K Q6_K         TS_ACT_Q8K      292 bytes / 256 values
 *   F32 F16                          TS_ACT_F32        plain f32
 *
 * TS_ACT_Q8 block: {u16 d (f16); i16 sum; i8 q[32]} (little-endian). d and q
 * are exactly ggml's quantize_row_q8_0_ref (d = amax/127 rounded to f16,
 * q = roundf(x / (amax/127)), the same bytes ts_quant_row gives for Q8_0); sum
 * = sum of q, which Q4_1/Q5_1 need for their offset term m * sum(x) (ggml uses
 * its Q8_1 there, which stores d*sum rounded to f16; an exact integer keeps
 * that term exact: d has 11 significant bits and |sum| <= 4064 has 12, so
 * d * sum is exact in f32). One format for all 32-block types means an input
 * shared by several matrices is quantized once whatever their types.
 *
 * TS_ACT_Q8K block: {f32 d; i8 q[256]; i16 bsum[16]} (host byte order), as
 * ggml's block_q8_K, with d = amax/127 kept in f32 and q = roundf(x/d) like
 * Q8; bsum[g] = sum of q[16g..16g+15], used for the offset (min) terms of
 * Q2_K/Q4_K/Q5_K and the +32/+4 biases of Q6_K/Q3_K.
 *
 * Activation q values are clamped to [-127, 127] (never -128), which the x86
 * kernels rely on (u8*s8 pair sums then never saturate 16 bits). For finite
 * inputs this is the same as ggml, since |x/d| <= 127 * (1 + 3 * 2^-24)
 * (blocks whose d is an f32 subnormal aside: there ggml can produce -128).
 * A block holding NaN gets d = NaN and q = 0; one holding +-inf gets d = inf
 * and q = 0 (x * (1/inf)); either way its dot is NaN, never UB.
 *
 * Results: the integer part of each block dot is exact at every level; only
 * the f32 accumulation of the per-block terms differs between levels (the
 * test bounds it). AVX2 and AVX-512 give bit-identical results (same lane
 * layout; VNNI only replaces the multiply-add sequence), and the 4-token tile
 * gives bit-identical results to the one-token dot at every level, so a
 * token's output does not depend on the batch it was computed in.
 */
#ifndef TS_KERNELS_QDOT_H
#define TS_KERNELS_QDOT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "kernels/cpu.h"

typedef enum ts_act_type {
    TS_ACT_F32 = 0,
    TS_ACT_Q8 = 1,  /* 32-blocks, see above */
    TS_ACT_Q8K = 2, /* 256-blocks, see above */
} ts_act_type;

#define TS_ACT_Q8_BLOCK 32
#define TS_ACT_Q8_BYTES 36
#define TS_ACT_Q8K_BLOCK 256
#define TS_ACT_Q8K_BYTES 292

/* 0 when the kernels support weight `type` with rows of n elements; else -1
 * with err naming the type or the bad length. Call once per matrix (when a
 * model is bound); the hot functions below do not check. */
int ts_qdot_check(uint32_t type, int64_t n, ts_err *err);

/* Activation format for weight type `type` (one of the supported types). */
ts_act_type ts_qdot_act_type(uint32_t type);

/* Bytes of one activation row of n values (n a multiple of the block). */
size_t ts_act_row_bytes(ts_act_type a, int64_t n);

/* x[n] (f32) -> dst in format a, with the kernels of table k. */
void ts_act_quantize(const ts_kern *k, ts_act_type a, const float *x, void *dst, int64_t n);

/* GEMV: y[r] = dot(W row r, x) for r0 <= r < r1 (y indexed by the absolute
 * row, so threads can split [0, n_out) into ranges). x is one activation row
 * in the format of w's type. */
void ts_qgemv(const ts_kern *k, uint32_t type, const void *w, size_t row_bytes, int64_t n, const void *x,
              float *y, int64_t r0, int64_t r1);

/* Batched (prefill): Y[t][r] = dot(W row r, X[t]) for t < n_tok, r0 <= r < r1.
 * X row t is at x + t * x_stride (bytes), Y row t at y + t * y_stride
 * (floats). Each weight row is read once per group of 4 tokens (the register
 * tile); the result of each token equals ts_qgemv's bit for bit. */
void ts_qgemm(const ts_kern *k, uint32_t type, const void *w, size_t row_bytes, int64_t n, const void *x,
              size_t x_stride, int n_tok, float *y, int64_t y_stride, int64_t r0, int64_t r1);

#endif
