/* qdot_impl.h - internals shared by the implementations of the dot kernels
 * (scalar, x86, arm): the per-level dispatch tables, the scalar block
 * quantizers that the SIMD quantizers fall back to for blocks holding
 * inf/NaN, and ISA-free helpers for unpacking K-quant scales.
 *
 * Everything defined here is `static inline`, so each ISA-flagged file that
 * includes it compiles its own private copy: no AVX/NEON code can reach a
 * generic caller through a shared inline definition.
 */
#ifndef TS_KERNELS_QDOT_IMPL_H
#define TS_KERNELS_QDOT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/qdot.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the kernels read GGUF blocks as little-endian words"
#endif

extern const ts_kern ts_kern_tab_scalar;
#if defined(TS_KERNELS_X86)
extern const ts_kern ts_kern_tab_avx2;
extern const ts_kern ts_kern_tab_avx512;
#endif
#if defined(TS_KERNELS_ARM)
extern const ts_kern ts_kern_tab_neon;
#endif

/* Scalar quantization of one block (the definition of both formats). */
void ts_ref_quant_q8_block(const float *x, uint8_t *dst);  /* 32 values -> 36 bytes */
void ts_ref_quant_q8k_block(const float *x, uint8_t *dst); /* 256 values -> 292 bytes */

/* Q4_K/Q5_K: the 12 packed bytes of 6-bit (scale, min) pairs -> out[0..7] =
 * scales of sub-blocks 0..7, out[8..15] = mins. Pairs 0..3 are the low 6 bits
 * of bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 take their low 4 bits
 * from the nibbles of bytes 8..11 (scale low, min high) and their top 2 bits
 * from the top bits of bytes 0..3 (scales) / 4..7 (mins). Done on 32-bit
 * words: four bytes per operation. */
static inline void ts_k4_unpack_scales(const uint8_t *s12, uint8_t out[16]) {
    uint32_t a[3], u[4];
    memcpy(a, s12, 12);
    u[0] = a[0] & 0x3f3f3f3fu;
    u[1] = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
    u[2] = a[1] & 0x3f3f3f3fu;
    u[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
    memcpy(out, u, 16);
}

/* Q3_K: the 12 packed bytes of sixteen 6-bit scales -> out[s] = scale + 32
 * (0..63; subtract 32 for the signed scale). Scale s takes its low 4 bits
 * from byte s (s < 8: low nibble) or byte s-8 (high nibble) and its top 2 bits
 * from bits 2*(s/4) of byte 8 + s%4. */
static inline void ts_k3_unpack_scales(const uint8_t *s12, uint8_t out[16]) {
    uint32_t a[3], u[4];
    memcpy(a, s12, 12);
    u[0] = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
    u[1] = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
    u[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
    u[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
    memcpy(out, u, 16);
}

#endif
