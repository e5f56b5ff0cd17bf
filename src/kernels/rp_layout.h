/* rp_layout.h - the panel layout of kernels/repack.h, defined once: the
 * kind of each panel type, the bytes of a panel block and where each field
 * of it sits. repack.c (packing, row read-back, the scalar reference kernel)
 * and every level's panel kernel (x86/gemm_avx512.c, x86/gemm_avx2.c,
 * arm/gemm_neon.c, through kernels/rp_kernel.h) read these functions and no
 * number of their own, so a layout change is made here only (and checked bit
 * for bit by tests/test_rp_gemm.c). Internal to src/kernels.
 *
 * A panel block holds 16 rows x 32 inputs (x 256 for the K-quants, as 8
 * sub-blocks j of 32). For every type the 32 quants of a 32-block are eight
 * byte-vectors v = 0..7 of 64 bytes; byte 4r + c of vector v belongs to row
 * r, element 4v + c. 4-bit types store them as four vectors of nibbles
 * (vector j: v = 2j low, v = 2j + 1 high); Q5_0, Q5_1 (and each Q5_K sub-block)
 * adds a 64-byte vector whose byte 4r + c holds in bit v the 5th bit of
 * element 4v + c; Q6_K adds two whose byte 4r + c holds in bits 2(v%4),
 * 2(v%4)+1 of vector v/4 the top two bits of element 4v + c. Per-row fields
 * are 16 of a kind side by side (f16: 32 bytes, bytes: 16).
 *
 *   Q4_0  nib 0 | d 256                                            = 288
 *   Q4_1  nib 0 | d 256 | m 288                                    = 320
 *   Q5_0  nib 0 | hbit 256 | d 320                                 = 352
 *   Q5_1  nib 0 | hbit 256 | d 320 | m 352                         = 384
 *   Q8_0  bytes 0 (vector v at 64v) | d 512                        = 544
 *   Q4_K  per sub-block j: nib 256j | d 2048 | dmin 2080 | sc 2112 + 16j | min 2240 + 16j   = 2368
 *   Q3_K  per sub-block j: 2-bit 224j (two vectors: bits 2(v%4), +1 of vector v/4 hold element
 *         4v + c's low 2 bits) | hbit 224j + 128 (bit v -> bit 2) | sc_lo 224j + 192 |
 *         sc_hi 224j + 208 | d 1792 (scales as int8: the 6-bit scale - 32)  = 1824
 *   Q5_K  per sub-block j: nib 320j | hbit 320j + 256 (as Q5_0's) | d 2560 | dmin 2592 |
 *         sc 2624 + 16j | min 2752 + 16j                                     = 2880
 *   Q6_K  per sub-block j: nib 416j | hbits 416j + 256 | sc_lo 416j + 384 | sc_hi 416j + 400 |
 *         d 3328                                                             = 3360
 *   Q2_K  per sub-block j: 2-bit 160j (as Q3_K's) | scm_lo 160j + 128 | scm_hi 160j + 144 (per
 *         half, GGUF's byte: scale in the low nibble, min in the high) | d 1280 | dmin 1312 = 1344
 *         (2.625 bits per weight, as the GGUF block)
 */
#ifndef TS_KERNELS_RP_LAYOUT_H
#define TS_KERNELS_RP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

/* panel kinds (the kernels' compile-time type parameter) */
enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q8_0, K_Q4_K, K_Q6_K, K_Q5_K, K_Q3_K, K_Q5_1, K_Q2_K, RP_KIND_COUNT };

/* the kind of a GGUF type, or -1 when it has no panel layout */
static inline int rp_kind(uint32_t type) {
    switch (type) {
    case TS_TYPE_Q4_0: return K_Q4_0;
    case TS_TYPE_Q4_1: return K_Q4_1;
    case TS_TYPE_Q5_0: return K_Q5_0;
    case TS_TYPE_Q5_1: return K_Q5_1;
    case TS_TYPE_Q8_0: return K_Q8_0;
    case TS_TYPE_Q4_K: return K_Q4_K;
    case TS_TYPE_Q6_K: return K_Q6_K;
    case TS_TYPE_Q5_K: return K_Q5_K;
    case TS_TYPE_Q3_K: return K_Q3_K;
    case TS_TYPE_Q2_K: return K_Q2_K;
    default: return -1;
    }
}

/* K-quant kinds: a panel block is 256 inputs, 8 sub-blocks of 32 */
static inline int rp_kq(int kind) { return kind == K_Q2_K || kind == K_Q3_K || kind == K_Q4_K || kind == K_Q5_K || kind == K_Q6_K; }

/* inputs per panel block (32, or a K-quant super-block of 256) */
static inline int rp_be(int kind) { return rp_kq(kind) ? 256 : 32; }

/* bytes of one panel block (16 rows x rp_be inputs) */
static inline size_t rp_wb(int kind) {
    return kind == K_Q4_0 ? 288 : kind == K_Q4_1 ? 320 : kind == K_Q5_0 ? 352 : kind == K_Q5_1 ? 384 : kind == K_Q8_0 ? 544
         : kind == K_Q2_K ? 1344 : kind == K_Q3_K ? 1824 : kind == K_Q4_K ? 2368 : kind == K_Q5_K ? 2880 : 3360;
}

/* K-quants: bytes per sub-block; sub-block j's quants start at rp_sub * j
 * (the other kinds: one 32-block whose quants start at 0) */
static inline int rp_sub(int kind) {
    return kind == K_Q2_K ? 160 : kind == K_Q3_K ? 224 : kind == K_Q4_K ? 256 : kind == K_Q5_K ? 320 : kind == K_Q6_K ? 416 : 0;
}

/* the 5-bit kinds: nibbles plus one high-bit vector (bit v -> bit 4) */
static inline int rp_5bit(int kind) { return kind == K_Q5_0 || kind == K_Q5_1 || kind == K_Q5_K; }

/* the 32-block kinds with an offset scale m per row (w = d u + m) */
static inline int rp_has_m32(int kind) { return kind == K_Q4_1 || kind == K_Q5_1; }

/* the high-bit vectors of a 32-block, from the start of its quants: Q5_0,
 * Q5_1, Q5_K one (bit 4), Q6_K two (bits 4, 5), Q3_K one (bit 2); 0 for none */
static inline int rp_hb(int kind) {
    return kind == K_Q3_K ? 128 : rp_5bit(kind) || kind == K_Q6_K ? 256 : 0;
}

/* Q3_K, Q6_K: the first int8 group scale of sub-block j at rp_sub * j +
 * rp_gsc (16 rows), the second 16 bytes further; Q2_K: its scale|min bytes */
static inline int rp_gsc(int kind) { return kind == K_Q2_K ? 128 : kind == K_Q3_K ? 192 : 384; }

/* the f16 d of the 16 rows */
static inline int rp_d(int kind) {
    return kind == K_Q8_0 ? 512 : kind == K_Q5_0 || kind == K_Q5_1 ? 320 : kind == K_Q2_K ? 1280 : kind == K_Q3_K ? 1792 : kind == K_Q4_K ? 2048
         : kind == K_Q5_K ? 2560 : kind == K_Q6_K ? 3328 : 256;
}

/* the f16 offset scale of the 16 rows: Q4_1's and Q5_1's m, Q2_K's, Q4_K's and Q5_K's dmin */
static inline int rp_m(int kind) { return rp_d(kind) + 32; }

/* Q4_K, Q5_K: the scale bytes / min bytes of sub-block j at rp_sc + 16 j /
 * rp_mn + 16 j */
static inline int rp_sc(int kind) { return rp_d(kind) + 64; }
static inline int rp_mn(int kind) { return rp_d(kind) + 192; }

#endif
