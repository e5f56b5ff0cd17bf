/* quant.h - tensor element types: traits, f16/bf16 conversion, reference
 * (scalar) dequantization to f32 and quantization from f32.
 *
 * Type ids and block layouts are those of ggml/GGUF, so weights stay in the
 * mmap in their stored form. These are the scalar references every fast kernel
 * is tested against.
 */
#ifndef TS_QUANT_H
#define TS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* ggml type ids (values fixed by the file format; only grows). */
enum ts_type {
    TS_TYPE_F32 = 0,
    TS_TYPE_F16 = 1,
    TS_TYPE_Q4_0 = 2,
    TS_TYPE_Q4_1 = 3,
    /* 4, 5: removed Q4_2/Q4_3 */
    TS_TYPE_Q5_0 = 6,
    TS_TYPE_Q5_1 = 7,
    TS_TYPE_Q8_0 = 8,
    TS_TYPE_Q8_1 = 9,
    TS_TYPE_Q2_K = 10,
    TS_TYPE_Q3_K = 11,
    TS_TYPE_Q4_K = 12,
    TS_TYPE_Q5_K = 13,
    TS_TYPE_Q6_K = 14,
    TS_TYPE_Q8_K = 15,
    TS_TYPE_IQ2_XXS = 16,
    TS_TYPE_IQ2_XS = 17,
    TS_TYPE_IQ3_XXS = 18,
    TS_TYPE_IQ1_S = 19,
    TS_TYPE_IQ4_NL = 20,
    TS_TYPE_IQ3_S = 21,
    TS_TYPE_IQ2_S = 22,
    TS_TYPE_IQ4_XS = 23,
    TS_TYPE_I8 = 24,
    TS_TYPE_I16 = 25,
    TS_TYPE_I32 = 26,
    TS_TYPE_I64 = 27,
    TS_TYPE_F64 = 28,
    TS_TYPE_IQ1_M = 29,
    TS_TYPE_BF16 = 30,
    /* 31-33: removed Q4_0_4_4 etc. */
    TS_TYPE_TQ1_0 = 34,
    TS_TYPE_TQ2_0 = 35,
    /* 36-38: removed IQ4_NL_x */
    TS_TYPE_MXFP4 = 39,
    TS_TYPE_COUNT
};

#define TS_QK_K 256 /* super-block size of the K-quants */

typedef struct ts_type_traits {
    const char *name;  /* "Q4_0", "F16", ... */
    uint32_t blck;     /* elements per block (1 for plain types) */
    uint32_t size;     /* bytes per block */
    bool can_dequant;  /* ts_dequant_row supports it */
    bool can_quant;    /* ts_quant_row supports it */
} ts_type_traits;

/* Traits of a type id, or NULL for an id that is unknown or was removed from
 * the format. The GGUF reader uses this to validate tensor types and sizes. */
const ts_type_traits *ts_type_info(uint32_t type);
/* Looks a type up by name (case-insensitive, e.g. "q4_0"); -1 if none. */
int ts_type_from_name(const char *name);

/* Bytes for n elements of `type` (n must be a multiple of the block size).
 * Returns 0 on an unknown type or a non-multiple. */
size_t ts_row_size(uint32_t type, int64_t n);

float ts_f16_to_f32(uint16_t h);
uint16_t ts_f32_to_f16(float f);  /* round to nearest even, as ggml */
float ts_bf16_to_f32(uint16_t h);
uint16_t ts_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* Dequantizes n elements (a multiple of the block size) from src to dst.
 * Returns 0, or -1 with err set for an unsupported type or bad n. */
int ts_dequant_row(uint32_t type, const void *src, float *dst, int64_t n, ts_err *err);

/* Quantizes n elements (multiple of the block size) with the reference
 * round-to-nearest quantizer (bit-identical to ggml's quantize_row_*_ref for
 * Q4_0, Q4_1, Q8_0; plain conversion for F32, F16, BF16). */
int ts_quant_row(uint32_t type, const float *src, void *dst, int64_t n, ts_err *err);

#endif
