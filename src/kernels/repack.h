/* repack.h - weights re-laid once, at load, for the register-tiled integer
 * GEMM (lanes = output rows), and the matching activation tiles.
 *
 * Why: the row-major GGUF layout makes every dot product end in a horizontal
 * sum, and its per-row decode is repeated for every token. Here 16 rows are
 * interleaved into a "panel" so that one 512-bit VNNI instruction
 * (vpdpbusd: 16 int32 lanes, each += 4 u8 x s8 products) advances 16 rows
 * by 4 inputs for one token, with the 4 activation bytes broadcast to every
 * lane; each lane ends holding its row's block sum, so no reduction is
 * needed, and a decoded weight vector is reused by up to 8 tokens.
 *
 * ---- weights ----
 * Supported types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q3_K, Q4_K, Q5_K, Q6_K. A panel holds rows
 * 16p .. 16p+15 (rows past n_out are zero) as a sequence of panel blocks
 * (32 elements; 256 for the K-quants) whose exact byte layout is defined
 * in kernels/rp_layout.h (read by repack.c and every level's kernel). Every 32-element block's quants are eight byte-vectors
 * v = 0..7 of 64 bytes, byte 4r + c of vector v = row r's element 4v + c as
 * an unsigned integer u (the stored 4-bit nibble, the 5-bit or 6-bit value,
 * or the Q8_0 byte XOR 0x80 = q + 128), stored as nibble vectors plus high
 * bit planes for the 5/6-bit types; the scale fields follow (f16 as stored,
 * K-quant sub-block scales as bytes, one row per lane). A panel is exactly
 * as large as the 16 GGUF rows it replaces, so a repacked model costs no
 * memory beyond the zero rows padding a last partial panel.
 *
 * Weight w = a * (u - o) (+ offset), by type:
 *   Q4_0  d (u - 8)     Q4_1  d u + m      Q5_0  d (u - 16)    Q5_1  d u + m    Q8_0  d (u - 128)
 *   Q4_K, Q5_K  (d sc_j) u - (dmin m_j)   (sub-block j of 32)
 *   Q6_K  (d sc_g) (u - 32)         (group g of 16)
 *   Q3_K  (d sc_g) (u - 4)          (group g of 16; sc_g = stored 6-bit scale - 32)
 *
 * ---- activations ----
 * Each 32-value block of an activation row becomes an integer vector X with
 * one f32 scale s (x ~ s * X), at one of two precisions:
 *   lo (TS_RP_LO): s = amax / 127,   X = rint(x / s) in [-127, 127]: one
 *                  int8 plane (the precision of ggml's Q8_0 activations);
 *   hi (TS_RP_HI): s = amax / 32512, X = rint(x / s) in [-32512, 32512],
 *                  stored as two int8 planes X = 256 * q1 + q2 with
 *                  q1 = (X + 128) >> 8 in [-127, 127], q2 in [-128, 127].
 *   lo256 (TS_RP_LO256): lo whose scales within a 256-value super-block
 *                  differ by powers of two: with S = amax256 / 127 (amax
 *                  over the 256), block b gets s_b = S * 2^-k_b, k_b the
 *                  largest k <= TS_RP_K256_KMAX with amax_b * 2^k <=
 *                  amax256, and X = rint(x * ((127 / amax256) * 2^k_b));
 *                  its side's sh field holds KMAX - k_b. A block as small
 *                  as a sixteenth of its super-block's largest keeps per-32
 *                  precision to within a factor of 2 (mean KL divergence
 *                  from the exact mode 1.2-1.5x that of arbitrary per-32
 *                  scales; one s per 256, ggml's Q8_K, what llama.cpp
 *                  multiplies the K-quants with, was 2-4x: docs/FIDELITY.md).
 *                  ts_linear takes it (act=q8, unless TS_ACT_K256=0) for a
 *                  call of K-quants: their kernels sum each super-block's
 *                  integers shifted by sh (a shift, not a multiply: below)
 *                  and scale the sum once, where arbitrary per-32 scales
 *                  cost one multiply per block and token. Every other
 *                  kernel reads it as lo (s_b is the block's own scale).
 * (rint: round to nearest even; amax = max |x|; the division is done as
 * x * (C / amax) with C = 127 or 32512, one f32 division per block. Blocks
 * with amax < 2^-100 are all zero with s = 0; blocks holding inf/NaN get
 * X = 0 and s = NaN, so their dot is NaN.) The hi precision costs twice the
 * integer work but keeps the logits of the real models within ~1e-3 of the
 * f32 reference, where lo moves them by up to ~7% (docs/FIDELITY.md).
 *
 * Tiles: a batch is cut into tiles of up to TS_RP_TT tokens; a tile of nt
 * tokens holds, per block b, at b * XB * nt (XB = 64 lo, 96 hi bytes):
 *   q1[nt][32]   int8
 *   q2[nt][32]   int8 (hi only)
 *   side[nt]     32 bytes each: f32 s; f32 s * sumX; i32 -8 sumX;
 *                i32 -128 sumX; i32 -16 sumX; i32 -32 sumX[0..16);
 *                i32 -32 sumX[16..32); i32 sh (lo256, else 0)
 *                (sumX = sum of the block's X, or of the half named)
 * The integer terms undo the weight offsets o: sum_j (u_j - o) X_j =
 * sum_j u_j X_j - o * sumX, with u the unsigned bytes vpdpbusd multiplies;
 * Q4_1's, Q5_1's and Q4_K's offset terms are m * (s * sumX).
 *
 * ---- result ----
 * Of one (row, token), the definition every kernel level computes bit for
 * bit (the scalar reference ts_rp_gemm_ref is this text):
 *   acc = 0.0f
 *   for each 32-block b in order:
 *     i = exact int32 sum_j u_j X_j - o * sumX
 *         (hi: computed as 256 * sum u q1 + (sum u q2 - o * sumX))
 *     Q4_0 Q5_0 Q8_0:  acc = fmaf((float)i, d * s, acc)
 *     Q4_1 Q5_1:       acc = fmaf((float)i, d * s, acc); acc = fmaf(m, s * sumX, acc)
 *     Q4_K, Q5_K:      acc = fmaf((float)i, (d * sc_j) * s, acc);
 *                      acc = fmaf(-(dmin * m_j), s * sumX, acc)
 *     Q3_K, Q6_K:      per half h = 0, 1 (16 elements, its own i and sumX; Q3_K's
 *                      offset term -4 sumX_h is the -32 sumX_h field / 8):
 *                      acc = fmaf((float)i_h, (d * sc_h) * s, acc)
 *     Q2_K:            per half h = 0, 1 (i_h with no offset term):
 *                      acc = fmaf((float)i_h, (d * sc_h) * s, acc);
 *                      acc = fmaf((float)(-sumX_h), (dmin * m_h) * s, acc)
 *                      (-sumX_h: the -32 sumX_h field / 32, exact)
 * At lo256 (n_in a multiple of 256) the K-quants gather each super-block's
 * integer terms, each shifted left by its block's sh (i' = i * 2^sh: the
 * block's X at the common scale S * 2^-KMAX), in g before one multiply:
 *   per super-block: g = 0.0f, then for each 32-block in order:
 *     Q4_K, Q5_K:      g = fmaf((float)i', d * sc_j, g);
 *                      acc = fmaf(-(dmin * m_j), s * sumX, acc)
 *     Q3_K, Q6_K:      per half h: g = fmaf((float)i'_h, d * sc_h, g)
 *     Q2_K:            per half h: g = fmaf((float)i'_h, d * sc_h, g);
 *                      g = fmaf((float)(-sumX_h * 2^sh), dmin * m_h, g)
 *   then acc = fmaf(g, s * 2^-sh, acc) with the s and sh of its first
 *   32-block (= S * 2^-KMAX, exact). Every |i'| < 2^24, so (float)i' is
 *   exact.
 * (Every |i| < 2^31: at most 32 * 255 * 32512 + 128 * 32 * 32512.) The
 * sequence does not depend on how many tokens share a tile or which thread
 * runs the panel, so decode and batched prefill agree bit for bit.
 */
#ifndef TS_KERNELS_REPACK_H
#define TS_KERNELS_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TS_RP_ROWS 16 /* rows per panel */
#define TS_RP_TT 8    /* max tokens per activation tile */
#define TS_RP_SIDE 32 /* side bytes per (token, block) */
#define TS_RP_K256_KMAX 4 /* lo256: the largest power-of-two step between a super-block's scales */

/* activation precisions ("hi" below: one of these) */
enum { TS_RP_LO = 0, TS_RP_HI = 1, TS_RP_LO256 = 2 };

/* activation tile bytes per (token, block) */
static inline size_t ts_rp_xb(int hi) { return hi == TS_RP_HI ? 96 : 64; }

/* true for the types whose blocks are 256 long (the K-quants) */
bool ts_rp_is_k(uint32_t type);

/* One panel against one tile: y[t * y_stride + r] for t < nt (1..TS_RP_TT),
 * r < n_rows (1..16), over n_in inputs (a multiple of 32). */
typedef void (*ts_rp_gemm_fn)(int64_t n_in, const uint8_t *panel, const uint8_t *tile, int nt, int hi, float *y,
                              int64_t y_stride, int n_rows);

/* One activation row x[n_in] into token slot `slot` of a tile of nt tokens
 * starting at `tile` (see above). */
typedef void (*ts_rp_quant_fn)(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot);

/* true for the types with a panel layout */
bool ts_rp_supported(uint32_t type);

/* Bytes of one panel / of the whole repacked matrix (0 when unsupported or
 * n_in is not a positive multiple of 32, 256 for the K-quants). */
size_t ts_rp_panel_bytes(uint32_t type, int64_t n_in);
size_t ts_rp_matrix_bytes(uint32_t type, int64_t n_in, int64_t n_out);

/* Packs rows (n_rows <= 16 GGUF rows of row_bytes each, consecutive from
 * src) into one panel at dst (ts_rp_panel_bytes); src and dst must not
 * overlap. */
void ts_rp_pack_panel(uint32_t type, int64_t n_in, const uint8_t *src, size_t row_bytes, int n_rows, uint8_t *dst);

/* Dequantizes row r of a repacked matrix into dst[n_in] (the same values as
 * ts_dequant_row of the original row). */
void ts_rp_row(uint32_t type, int64_t n_in, const uint8_t *packed, int64_t r, float *dst);

/* Bytes of the tiles of n_tok tokens of n_in inputs, and where the tile
 * holding token t starts (tokens 8k .. 8k+7 share a tile). */
size_t ts_rp_tiles_bytes(int64_t n_in, int n_tok, int hi);
size_t ts_rp_tile_offset(int64_t n_in, int t, int hi);

/* Writes the side fields of one (token, block) (see above) from its scale s,
 * the sums of X over elements 0..15 and 16..31 and sh (lo256; else 0); every quantizer level
 * ends a block with it. Field by field: building them in an array and
 * copying that made the copy's 8-byte loads wait on the array's 4-byte
 * stores (a failed store-to-load forward per block, ~9% of the profile of
 * 135M prefill). */
static inline void ts_rp_put_side(uint8_t *side, float s, int32_t sum_lo, int32_t sum_hi, int32_t sh) {
    const int32_t sum = sum_lo + sum_hi;
    const float ds = s * (float)sum;
    const int32_t f[6] = {-8 * sum, -128 * sum, -16 * sum, -32 * sum_lo, -32 * sum_hi, sh};
    memcpy(side, &s, 4);
    memcpy(side + 4, &ds, 4);
    for (int i = 0; i < 6; i++) memcpy(side + 8 + 4 * i, &f[i], 4);
}

/* The terms of the result's definition (above) for one panel block of 16
 * rows, for kernels that compute it with other instructions (the AMX tile
 * engine): per 32-block `sub` (8 in a K-quant block, else 1) the unsigned
 * quants as eight byte-vectors (byte 4r + c of u[sub][v] = row r's element
 * 4v + c, as Q8_0's panel layout), and per row r:
 *   wd[sub][h][r]  the weight factor of half h's integer (h = 0 only unless
 *                  halves): d, d * sc_j or d * sc_h, computed as the
 *                  reference computes it (so wd * s is its product)
 *   wm[sub][r]     the offset factor of s * sumX when has_m: m (Q4_1, Q5_1),
 *                  -(dmin * m_j) (Q4_K, Q5_K)
 * and for the type: o (the integer offset: i = sum u X - o sumX over the
 * 32-block, or over each half of 16 when halves), halves, has_m. Returns
 * the number of 32-blocks (1 or 8), 0 for a type without these terms (no
 * panels, or Q2_K, whose offset term is per half). */
typedef struct ts_rp_terms {
    uint8_t u[8][8][64];
    float wd[8][2][16];
    float wm[8][16];
    int o;
    bool halves, has_m;
} ts_rp_terms;
int ts_rp_block_terms(uint32_t type, const uint8_t *block, ts_rp_terms *t);
/* The type's part of ts_rp_terms (o, halves, has_m) alone, for layouts
 * built on the panels' arithmetic (the AMX tiles); 0 as ts_rp_block_terms. */
int ts_rp_type_terms(uint32_t type, int *o, bool *halves, bool *has_m);

/* One 32-block of an activation row x[32] at the given precision (above):
 * the planes q1 (and q2 when hi), s, the sums of X over elements 0..15
 * and 16..31 and sh (every quantizer level computes these bits). At
 * lo256, x is the block's 32 values and g[256] the super-block holding
 * them, whose amax sets S; g is unused (NULL allowed) and sh 0 otherwise. */
void ts_rp_quant_block(const float *x, const float *g, int hi, int8_t *q1, int8_t *q2, float *s, int32_t *sum_lo,
                       int32_t *sum_hi, int32_t *sh);

/* lo256's k for a block: the largest k <= TS_RP_K256_KMAX with
 * amax_b * 2^k <= amax (the super-block's); KMAX for a zero block. Exact:
 * scaling by 2^k rounds nothing. */
static inline int ts_rp_k256_k(float amax_b, float amax) {
    int k = TS_RP_K256_KMAX;
    while (k > 0 && amax_b * (float)(1 << k) > amax) k--;
    return k;
}

/* The scalar references (and fallbacks) of the two kernel kinds. */
ts_rp_gemm_fn ts_rp_gemm_ref(uint32_t type); /* NULL when unsupported */
void ts_rp_quant_ref(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot);

#endif
