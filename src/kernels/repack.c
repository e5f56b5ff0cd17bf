/* repack.c - the panel layout of repack.h: packing GGUF rows into panels,
 * reading a row back, the activation-tile quantizer, and the scalar
 * reference kernel that defines the panel GEMM (every level's fast kernel
 * gives its bits: x86/gemm_avx512.c, x86/gemm_avx2.c, arm/gemm_neon.c).
 *
 * Packing goes through integers: each GGUF block is decoded into its quants
 * (unsigned: the stored nibble / 5- or 6-bit value, or the Q8_0 byte + 128)
 * and its scale fields (raw f16 bits, K-quant sub-block scales), then the
 * panel is written from those. Row read-back recomputes every value with the
 * same f32 expression as src/quant/quant.c, so it matches ts_dequant_row bit
 * for bit.
 *
 * Every offset and size of the panel layout comes from kernels/rp_layout.h
 * (the one definition, which the level kernels read too). */
#include "kernels/repack.h"

#include <math.h>
#include <string.h>

#include "kernels/rp_layout.h"
#include "quant/quant.h"

bool ts_rp_supported(uint32_t type) { return rp_kind(type) >= 0; }

bool ts_rp_is_k(uint32_t type) { return rp_kind(type) >= 0 && rp_kq(rp_kind(type)); }

/* elements per panel block (32, or a K-quant super-block of 256) */
static int64_t block_elems(uint32_t type) { return rp_be(rp_kind(type)); }

/* bytes per panel block (16 rows) */
static size_t block_bytes(uint32_t type) { return ts_rp_supported(type) ? rp_wb(rp_kind(type)) : 0; }

size_t ts_rp_panel_bytes(uint32_t type, int64_t n_in) {
    if (!ts_rp_supported(type) || n_in <= 0 || n_in % block_elems(type)) return 0;
    return (size_t)(n_in / block_elems(type)) * block_bytes(type);
}

size_t ts_rp_matrix_bytes(uint32_t type, int64_t n_in, int64_t n_out) {
    const size_t pb = ts_rp_panel_bytes(type, n_in);
    if (!pb || n_out <= 0) return 0;
    return (size_t)((n_out + TS_RP_ROWS - 1) / TS_RP_ROWS) * pb;
}

static inline float rd_f16(const uint8_t *p) {
    return ts_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* ---- decoding one GGUF block into integers ---- */

typedef struct {
    uint8_t q[256];      /* unsigned quants */
    uint8_t d[2], m[2];  /* raw f16: d, and m (Q4_1, Q5_1) / dmin (Q4_K, Q5_K) */
    uint8_t sc[16];      /* Q4_K, Q5_K: 8 sub-block scales; Q3_K, Q6_K: 16 group scales (int8 bits);
                            Q2_K: 16 group bytes, scale | min << 4 */
    uint8_t mn[8];       /* Q4_K, Q5_K: 8 sub-block mins */
} dec_block;

static void k4_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* GGUF block of `type` at b (the block holding panel block `blk`'s row) */
static void decode(uint32_t type, const uint8_t *b, dec_block *o) {
    switch (type) {
    case TS_TYPE_Q4_0:
    case TS_TYPE_Q4_1: {
        const uint8_t *qs = b + (type == TS_TYPE_Q4_1 ? 4 : 2);
        for (int k = 0; k < 16; k++) o->q[k] = qs[k] & 0x0f, o->q[k + 16] = qs[k] >> 4;
        memcpy(o->d, b, 2);
        if (type == TS_TYPE_Q4_1) memcpy(o->m, b + 2, 2);
        break;
    }
    case TS_TYPE_Q5_0:
    case TS_TYPE_Q5_1: { /* Q5_0: d, qh, qs; Q5_1: d, m, qh, qs */
        const int h = type == TS_TYPE_Q5_1 ? 4 : 2;
        uint32_t qh;
        memcpy(&qh, b + h, 4);
        for (int k = 0; k < 16; k++) {
            o->q[k] = (uint8_t)((b[h + 4 + k] & 0x0f) | (((qh >> k) & 1u) << 4));
            o->q[k + 16] = (uint8_t)((b[h + 4 + k] >> 4) | (((qh >> (k + 16)) & 1u) << 4));
        }
        memcpy(o->d, b, 2);
        if (type == TS_TYPE_Q5_1) memcpy(o->m, b + 2, 2);
        break;
    }
    case TS_TYPE_Q8_0:
        for (int k = 0; k < 32; k++) o->q[k] = (uint8_t)(b[2 + k] ^ 0x80);
        memcpy(o->d, b, 2);
        break;
    case TS_TYPE_Q4_K:
        memcpy(o->d, b, 2);
        memcpy(o->m, b + 2, 2);
        for (int j = 0; j < 8; j++) k4_scale_min(b + 4, j, &o->sc[j], &o->mn[j]);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                o->q[64 * k + l] = b[16 + 32 * k + l] & 0x0f;
                o->q[64 * k + 32 + l] = b[16 + 32 * k + l] >> 4;
            }
        break;
    case TS_TYPE_Q2_K: /* sub-block 4n + j, element l: bits 2j, 2j+1 of qs[32n + l] */
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) o->q[128 * n + 32 * j + l] = (uint8_t)((b[16 + 32 * n + l] >> (2 * j)) & 3);
        memcpy(o->sc, b, 16);
        memcpy(o->d, b + 80, 2);
        memcpy(o->m, b + 82, 2);
        break;
    case TS_TYPE_Q3_K: /* u = 2-bit q + 4 * hmask bit (w = d sc (u - 4)), sc = 6-bit scale - 32 */
        for (int n = 0; n < 2; n++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++)
                    o->q[128 * n + 32 * j + l] =
                        (uint8_t)(((b[32 + 32 * n + l] >> (2 * j)) & 3) | (((b[l] >> (4 * n + j)) & 1) << 2));
        for (int s = 0; s < 16; s++) {
            const int lo = s < 8 ? (b[96 + s] & 0x0f) : (b[96 + s - 8] >> 4);
            const int hi = (b[96 + 8 + s % 4] >> (2 * (s / 4))) & 3;
            o->sc[s] = (uint8_t)(int8_t)((lo | (hi << 4)) - 32);
        }
        memcpy(o->d, b + 108, 2);
        break;
    case TS_TYPE_Q5_K: /* as Q4_K, nibbles at 48, and bit s of qh[l] -> bit 4 of sub-block s's element l */
        memcpy(o->d, b, 2);
        memcpy(o->m, b + 2, 2);
        for (int j = 0; j < 8; j++) k4_scale_min(b + 4, j, &o->sc[j], &o->mn[j]);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const uint8_t qs = b[48 + 32 * k + l], qh = b[16 + l];
                o->q[64 * k + l] = (uint8_t)((qs & 0x0f) | (((qh >> (2 * k)) & 1) << 4));
                o->q[64 * k + 32 + l] = (uint8_t)((qs >> 4) | (((qh >> (2 * k + 1)) & 1) << 4));
            }
        break;
    case TS_TYPE_Q6_K:
        for (int n = 0; n < 2; n++)
            for (int r = 0; r < 4; r++)
                for (int l = 0; l < 32; l++) {
                    const int lo = (b[64 * n + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 0x0f;
                    const int hi = (b[128 + 32 * n + l] >> (2 * r)) & 3;
                    o->q[128 * n + 32 * r + l] = (uint8_t)(lo | (hi << 4));
                }
        memcpy(o->sc, b + 192, 16);
        memcpy(o->d, b + 208, 2);
        break;
    default: break;
    }
}

/* ---- packing (the layout: kernels/rp_layout.h) ---- */

/* the nibble vectors of one 32-block of row r */
static void put_nibbles(uint8_t *o, int r, const uint8_t *q) {
    for (int j = 0; j < 4; j++)
        for (int c = 0; c < 4; c++)
            o[64 * j + 4 * r + c] = (uint8_t)((q[8 * j + c] & 0x0f) | ((q[8 * j + 4 + c] & 0x0f) << 4));
}

void ts_rp_pack_panel(uint32_t type, int64_t n_in, const uint8_t *src, size_t row_bytes, int n_rows, uint8_t *dst) {
    const int kd = rp_kind(type);
    if (kd < 0) return;
    const size_t bb = block_bytes(type);
    const int64_t be = block_elems(type), nb = n_in / be;
    const size_t sb = ts_row_size(type, be);
    const int sub = rp_sub(kd), hb = rp_hb(kd), dof = rp_d(kd);
    memset(dst, 0, (size_t)nb * bb);
    dec_block d;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * bb;
        for (int r = 0; r < n_rows; r++) {
            decode(type, src + (size_t)r * row_bytes + (size_t)b * sb, &d);
            switch (type) {
            case TS_TYPE_Q4_0:
            case TS_TYPE_Q4_1:
                put_nibbles(o, r, d.q);
                memcpy(o + dof + 2 * r, d.d, 2);
                if (type == TS_TYPE_Q4_1) memcpy(o + rp_m(kd) + 2 * r, d.m, 2);
                break;
            case TS_TYPE_Q5_0:
            case TS_TYPE_Q5_1:
                put_nibbles(o, r, d.q);
                for (int v = 0; v < 8; v++)
                    for (int c = 0; c < 4; c++) o[hb + 4 * r + c] |= (uint8_t)(((d.q[4 * v + c] >> 4) & 1) << v);
                memcpy(o + dof + 2 * r, d.d, 2);
                if (type == TS_TYPE_Q5_1) memcpy(o + rp_m(kd) + 2 * r, d.m, 2);
                break;
            case TS_TYPE_Q8_0:
                for (int v = 0; v < 8; v++)
                    for (int c = 0; c < 4; c++) o[64 * v + 4 * r + c] = d.q[4 * v + c];
                memcpy(o + dof + 2 * r, d.d, 2);
                break;
            case TS_TYPE_Q4_K:
                for (int j = 0; j < 8; j++) {
                    put_nibbles(o + sub * j, r, d.q + 32 * j);
                    o[rp_sc(kd) + 16 * j + r] = d.sc[j];
                    o[rp_mn(kd) + 16 * j + r] = d.mn[j];
                }
                memcpy(o + dof + 2 * r, d.d, 2);
                memcpy(o + rp_m(kd) + 2 * r, d.m, 2);
                break;
            case TS_TYPE_Q2_K:
            case TS_TYPE_Q3_K:
                for (int j = 0; j < 8; j++) {
                    uint8_t *oj = o + sub * j;
                    const uint8_t *q = d.q + 32 * j;
                    for (int v = 0; v < 8; v++)
                        for (int c = 0; c < 4; c++) {
                            oj[64 * (v / 4) + 4 * r + c] |= (uint8_t)((q[4 * v + c] & 3) << (2 * (v % 4)));
                            if (type == TS_TYPE_Q3_K) oj[hb + 4 * r + c] |= (uint8_t)(((q[4 * v + c] >> 2) & 1) << v);
                        }
                    oj[rp_gsc(kd) + r] = d.sc[2 * j];
                    oj[rp_gsc(kd) + 16 + r] = d.sc[2 * j + 1];
                }
                memcpy(o + dof + 2 * r, d.d, 2);
                if (type == TS_TYPE_Q2_K) memcpy(o + rp_m(kd) + 2 * r, d.m, 2);
                break;
            case TS_TYPE_Q5_K:
                for (int j = 0; j < 8; j++) {
                    uint8_t *oj = o + sub * j;
                    const uint8_t *q = d.q + 32 * j;
                    put_nibbles(oj, r, q);
                    for (int v = 0; v < 8; v++)
                        for (int c = 0; c < 4; c++) oj[hb + 4 * r + c] |= (uint8_t)(((q[4 * v + c] >> 4) & 1) << v);
                    o[rp_sc(kd) + 16 * j + r] = d.sc[j];
                    o[rp_mn(kd) + 16 * j + r] = d.mn[j];
                }
                memcpy(o + dof + 2 * r, d.d, 2);
                memcpy(o + rp_m(kd) + 2 * r, d.m, 2);
                break;
            case TS_TYPE_Q6_K:
                for (int j = 0; j < 8; j++) {
                    uint8_t *oj = o + sub * j;
                    const uint8_t *q = d.q + 32 * j;
                    put_nibbles(oj, r, q);
                    for (int v = 0; v < 8; v++)
                        for (int c = 0; c < 4; c++)
                            oj[hb + 64 * (v / 4) + 4 * r + c] |= (uint8_t)(((q[4 * v + c] >> 4) & 3) << (2 * (v % 4)));
                    oj[rp_gsc(kd) + r] = d.sc[2 * j];
                    oj[rp_gsc(kd) + 16 + r] = d.sc[2 * j + 1];
                }
                memcpy(o + dof + 2 * r, d.d, 2);
                break;
            default: break;
            }
        }
    }
}

/* unsigned quant of (row r, element k of 32-block `sub`) in panel block o of
 * kind kd */
static inline int panel_u(int kd, const uint8_t *o, int r, int sub, int k) {
    const int v = k / 4, c = k % 4;
    if (kd == K_Q8_0) return o[64 * v + 4 * r + c];
    const uint8_t *nb = o + rp_sub(kd) * sub; /* the 32-block's quants */
    if (kd == K_Q2_K) return (nb[64 * (v / 4) + 4 * r + c] >> (2 * (v % 4))) & 3;
    if (kd == K_Q3_K)
        return ((nb[64 * (v / 4) + 4 * r + c] >> (2 * (v % 4))) & 3) | (((nb[rp_hb(kd) + 4 * r + c] >> v) & 1) << 2);
    const uint8_t byte = nb[64 * (v / 2) + 4 * r + c];
    int u = v % 2 ? byte >> 4 : byte & 0x0f;
    if (rp_5bit(kd)) u |= ((nb[rp_hb(kd) + 4 * r + c] >> v) & 1) << 4;
    if (kd == K_Q6_K) u |= ((nb[rp_hb(kd) + 64 * (v / 4) + 4 * r + c] >> (2 * (v % 4))) & 3) << 4;
    return u;
}

void ts_rp_row(uint32_t type, int64_t n_in, const uint8_t *packed, int64_t r, float *dst) {
    const int kd = rp_kind(type);
    if (kd < 0) return;
    const size_t bb = block_bytes(type);
    const int64_t be = block_elems(type);
    const uint8_t *panel = packed + (size_t)(r / TS_RP_ROWS) * ts_rp_panel_bytes(type, n_in);
    const int rr = (int)(r % TS_RP_ROWS);
    for (int64_t b = 0; b < n_in / be; b++) {
        const uint8_t *o = panel + (size_t)b * bb;
        float *y = dst + be * b;
        const float d = rd_f16(o + rp_d(kd) + 2 * rr);
        switch (type) {
        case TS_TYPE_Q4_0:
        case TS_TYPE_Q5_0: {
            const int off = type == TS_TYPE_Q5_0 ? 16 : 8;
            for (int k = 0; k < 32; k++) y[k] = (float)(panel_u(kd, o, rr, 0, k) - off) * d;
            break;
        }
        case TS_TYPE_Q4_1:
        case TS_TYPE_Q5_1: {
            const float m = rd_f16(o + rp_m(kd) + 2 * rr);
            for (int k = 0; k < 32; k++) {
                const float p = (float)panel_u(kd, o, rr, 0, k) * d;
                y[k] = p + m;
            }
            break;
        }
        case TS_TYPE_Q8_0: {
            for (int k = 0; k < 32; k++) y[k] = (float)(panel_u(kd, o, rr, 0, k) - 128) * d;
            break;
        }
        case TS_TYPE_Q4_K:
        case TS_TYPE_Q5_K: {
            const float dmin = rd_f16(o + rp_m(kd) + 2 * rr);
            for (int j = 0; j < 8; j++) {
                const float dl = d * (float)o[rp_sc(kd) + 16 * j + rr], ml = dmin * (float)o[rp_mn(kd) + 16 * j + rr];
                for (int k = 0; k < 32; k++) {
                    const float p = dl * (float)panel_u(kd, o, rr, j, k);
                    y[32 * j + k] = p - ml;
                }
            }
            break;
        }
        case TS_TYPE_Q2_K: { /* as quant.c's dq_q2_k: (d * sc) * q - (dmin * m) */
            const float dmin = rd_f16(o + rp_m(kd) + 2 * rr);
            for (int j = 0; j < 8; j++)
                for (int k = 0; k < 32; k++) {
                    const uint8_t g = o[rp_sub(kd) * j + rp_gsc(kd) + (k < 16 ? 0 : 16) + rr];
                    const float dl = d * (float)(g & 0x0f), ml = dmin * (float)(g >> 4);
                    const float p = dl * (float)panel_u(kd, o, rr, j, k);
                    y[32 * j + k] = p - ml;
                }
            break;
        }
        case TS_TYPE_Q3_K:
        case TS_TYPE_Q6_K: {
            const int off = type == TS_TYPE_Q3_K ? 4 : 32;
            for (int j = 0; j < 8; j++)
                for (int k = 0; k < 32; k++) {
                    const float dl = d * (float)(int8_t)o[rp_sub(kd) * j + rp_gsc(kd) + (k < 16 ? 0 : 16) + rr];
                    y[32 * j + k] = dl * (float)(panel_u(kd, o, rr, j, k) - off);
                }
            break;
        }
        default: break;
        }
    }
}

/* ---- activation tiles ---- */

size_t ts_rp_tiles_bytes(int64_t n_in, int n_tok, int hi) {
    return (size_t)n_tok * (size_t)(n_in / 32) * ts_rp_xb(hi);
}

size_t ts_rp_tile_offset(int64_t n_in, int t, int hi) {
    return ts_rp_tiles_bytes(n_in, t / TS_RP_TT * TS_RP_TT, hi);
}

void ts_rp_quant_block(const float *x, const float *g, int hi, int8_t *q1, int8_t *q2, float *s_out,
                       int32_t *sum_lo_out, int32_t *sum_hi_out, int32_t *sh_out) {
    const float C = hi == TS_RP_HI ? 32512.0f : 127.0f;
    const int k256 = hi == TS_RP_LO256;
    const float *a_src = k256 ? g : x;
    const int n_a = k256 ? 256 : 32;
    hi = hi == TS_RP_HI;
    float amax = 0.0f, amax_b = 0.0f;
    int finite = 1;
    for (int j = 0; j < n_a; j++) {
        const float a = fabsf(a_src[j]);
        finite &= a <= 3.4028235e38f; /* false for inf and NaN */
        amax = a > amax ? a : amax;
    }
    for (int j = 0; k256 && j < 32; j++) amax_b = fabsf(x[j]) > amax_b ? fabsf(x[j]) : amax_b;
    const int zero = !finite || amax < 0x1p-100f;
    /* lo256: the block's step is S * 2^-k (exact scalings of S and of 1 / S) */
    const int k = k256 && !zero ? ts_rp_k256_k(amax_b, amax) : 0;
    const float s = !finite ? NAN : zero ? 0.0f : amax / C / (float)(1 << k);
    const float id = zero ? 0.0f : C / amax * (float)(1 << k);
    int32_t sum_lo = 0, sum_hi = 0;
    for (int j = 0; j < 32; j++) {
        const int32_t X = zero ? 0 : (int32_t)lrintf(x[j] * id);
        /* floor((X + 128) / 256), on a non-negative operand */
        const int32_t a = hi ? ((X + 128 + 65536) >> 8) - 256 : X;
        q1[j] = (int8_t)a;
        if (hi) q2[j] = (int8_t)(X - 256 * a);
        if (j < 16)
            sum_lo += X;
        else
            sum_hi += X;
    }
    *s_out = s, *sum_lo_out = sum_lo, *sum_hi_out = sum_hi;
    if (sh_out) *sh_out = k256 && !zero ? TS_RP_K256_KMAX - k : 0;
}

void ts_rp_quant_ref(const float *x, int64_t n_in, int hi, uint8_t *tile, int nt, int slot) {
    if (hi == TS_RP_LO256 && n_in % 256) hi = TS_RP_LO; /* no super-blocks to share a scale */
    const size_t xb = ts_rp_xb(hi) * (size_t)nt;
    const float *row = x;
    for (int64_t b = 0; b < n_in / 32; b++, x += 32) {
        int8_t *q1 = (int8_t *)(tile + (size_t)b * xb + 32 * slot);
        int8_t *q2 = q1 + 32 * nt;
        uint8_t *side = tile + (size_t)b * xb + (hi == TS_RP_HI ? 64 : 32) * nt + TS_RP_SIDE * slot;
        float s;
        int32_t sum_lo, sum_hi, sh;
        ts_rp_quant_block(x, row + b / 8 * 256, hi, q1, hi == TS_RP_HI ? q2 : NULL, &s, &sum_lo, &sum_hi, &sh);
        ts_rp_put_side(side, s, sum_lo, sum_hi, sh);
    }
}

int ts_rp_type_terms(uint32_t type, int *o, bool *halves, bool *has_m) {
    /* Q2_K's offset term is per half (dmin * m_h * sumX_h): not one of these */
    if (rp_kind(type) < 0 || type == TS_TYPE_Q2_K) return 0;
    *halves = type == TS_TYPE_Q3_K || type == TS_TYPE_Q6_K;
    *has_m = type == TS_TYPE_Q4_1 || type == TS_TYPE_Q5_1 || type == TS_TYPE_Q4_K || type == TS_TYPE_Q5_K;
    *o = type == TS_TYPE_Q4_0 ? 8 : type == TS_TYPE_Q5_0 ? 16 : type == TS_TYPE_Q8_0 ? 128
       : type == TS_TYPE_Q3_K ? 4 : type == TS_TYPE_Q6_K ? 32 : 0;
    return 1;
}

int ts_rp_block_terms(uint32_t type, const uint8_t *o, ts_rp_terms *t) {
    const int kd = rp_kind(type);
    if (kd < 0) return 0;
    const int n_sub = rp_be(kd) / 32;
    memset(t, 0, sizeof *t);
    if (!ts_rp_type_terms(type, &t->o, &t->halves, &t->has_m)) return 0;
    for (int sub = 0; sub < n_sub; sub++)
        for (int r = 0; r < 16; r++) {
            for (int k = 0; k < 32; k++) t->u[sub][k / 4][4 * r + k % 4] = (uint8_t)panel_u(kd, o, r, sub, k);
            /* the factors exactly as rp_gemm_ref forms them */
            const float dw = rd_f16(o + rp_d(kd) + 2 * r);
            switch (type) {
            case TS_TYPE_Q4_0:
            case TS_TYPE_Q5_0:
            case TS_TYPE_Q8_0: t->wd[sub][0][r] = dw; break;
            case TS_TYPE_Q4_1:
            case TS_TYPE_Q5_1:
                t->wd[sub][0][r] = dw;
                t->wm[sub][r] = rd_f16(o + rp_m(kd) + 2 * r);
                break;
            case TS_TYPE_Q4_K:
            case TS_TYPE_Q5_K: {
                t->wd[sub][0][r] = dw * (float)o[rp_sc(kd) + 16 * sub + r];
                const float ml = rd_f16(o + rp_m(kd) + 2 * r) * (float)o[rp_mn(kd) + 16 * sub + r];
                t->wm[sub][r] = -ml;
                break;
            }
            case TS_TYPE_Q3_K:
            case TS_TYPE_Q6_K:
                for (int h = 0; h < 2; h++)
                    t->wd[sub][h][r] = dw * (float)(int8_t)o[rp_sub(kd) * sub + rp_gsc(kd) + 16 * h + r];
                break;
            default: break;
            }
        }
    return n_sub;
}

/* ---- scalar reference kernel ---- */

/* offset term of one 32-block (in the hi sum's low plane), by type; Q6_K
 * takes one per half */
static int32_t side_i32(const uint8_t *side, int off) {
    int32_t v;
    memcpy(&v, side + off, 4);
    return v;
}
static float side_f32(const uint8_t *side, int off) {
    float v;
    memcpy(&v, side + off, 4);
    return v;
}

/* exact integer dot of elements [k0, k1) of a 32-block: hi: 256 * sum u q1
 * + (sum u q2 + off); lo: sum u q1 + off */
static int32_t block_dot(int kd, const uint8_t *o, int r, int sub, const int8_t *q1, const int8_t *q2, int hi,
                         int k0, int k1, int32_t off) {
    int32_t i1 = 0, i2 = off;
    for (int k = k0; k < k1; k++) {
        const int u = panel_u(kd, o, r, sub, k);
        i1 += u * q1[k];
        if (hi) i2 += u * q2[k];
    }
    return hi ? i1 * 256 + i2 : i1 + off;
}

static void rp_gemm_ref(uint32_t type, int64_t n_in, const uint8_t *panel, const uint8_t *tile, int nt, int mode,
                        float *y, int64_t y_stride, int n_rows) {
    const int kd = rp_kind(type);
    const size_t bb = block_bytes(type), xb = ts_rp_xb(mode) * (size_t)nt;
    const int64_t be = block_elems(type);
    const int hi = mode == TS_RP_HI, g256 = mode == TS_RP_LO256 && be == 256; /* lo256: see repack.h */
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < n_rows; r++) {
            float acc = 0.0f, g = 0.0f;
            for (int64_t b = 0; b < n_in / 32; b++) {
                const uint8_t *o = panel + (size_t)(b / (be / 32)) * bb; /* panel block */
                const int sub = (int)(b % (be / 32));                       /* 32-block inside it */
                const uint8_t *xt = tile + (size_t)b * xb;
                const int8_t *q1 = (const int8_t *)(xt + 32 * t), *q2 = (const int8_t *)(xt + 32 * nt + 32 * t);
                const uint8_t *side = xt + (hi ? 64 : 32) * nt + TS_RP_SIDE * t;
                const float s = side_f32(side, 0), ds = side_f32(side, 4);
                const int32_t p2 = g256 ? (int32_t)1 << side_i32(side, 28) : 1; /* lo256: 2^sh */
                const float dw = rd_f16(o + rp_d(kd) + 2 * r);
                if (g256 && sub == 0) g = 0.0f;
                switch (type) {
                case TS_TYPE_Q4_0:
                case TS_TYPE_Q5_0:
                case TS_TYPE_Q8_0: {
                    const int off = type == TS_TYPE_Q4_0 ? 8 : type == TS_TYPE_Q8_0 ? 12 : 16;
                    const int32_t i = block_dot(kd, o, r, 0, q1, q2, hi, 0, 32, side_i32(side, off));
                    acc = fmaf((float)i, dw * s, acc);
                    break;
                }
                case TS_TYPE_Q4_1:
                case TS_TYPE_Q5_1: {
                    const int32_t i = block_dot(kd, o, r, 0, q1, q2, hi, 0, 32, 0);
                    acc = fmaf((float)i, dw * s, acc);
                    acc = fmaf(rd_f16(o + rp_m(kd) + 2 * r), ds, acc);
                    break;
                }
                case TS_TYPE_Q4_K:
                case TS_TYPE_Q5_K: {
                    const float dl = dw * (float)o[rp_sc(kd) + 16 * sub + r];
                    const float ml = rd_f16(o + rp_m(kd) + 2 * r) * (float)o[rp_mn(kd) + 16 * sub + r];
                    const int32_t i = block_dot(kd, o, r, sub, q1, q2, hi, 0, 32, 0);
                    if (g256)
                        g = fmaf((float)(i * p2), dl, g);
                    else
                        acc = fmaf((float)i, dl * s, acc);
                    acc = fmaf(-ml, ds, acc);
                    break;
                }
                case TS_TYPE_Q2_K: /* per half: d sc_h, then the min term with -sumX_h = field / 32 */
                    for (int h = 0; h < 2; h++) {
                        const uint8_t gs = o[rp_sub(kd) * sub + rp_gsc(kd) + 16 * h + r];
                        const float dl = dw * (float)(gs & 0x0f), ml = rd_f16(o + rp_m(kd) + 2 * r) * (float)(gs >> 4);
                        const int32_t i = block_dot(kd, o, r, sub, q1, q2, hi, 16 * h, 16 * h + 16, 0);
                        const int32_t nsum = side_i32(side, 20 + 4 * h) / 32;
                        if (g256) {
                            g = fmaf((float)(i * p2), dl, g);
                            g = fmaf((float)(nsum * p2), ml, g);
                        } else {
                            acc = fmaf((float)i, dl * s, acc);
                            acc = fmaf((float)nsum, ml * s, acc);
                        }
                    }
                    break;
                case TS_TYPE_Q3_K: /* offset 4: (-32 sumX_half) / 8, exact */
                case TS_TYPE_Q6_K:
                    for (int h = 0; h < 2; h++) {
                        const float dl = dw * (float)(int8_t)o[rp_sub(kd) * sub + rp_gsc(kd) + 16 * h + r];
                        const int32_t o32 = side_i32(side, 20 + 4 * h);
                        const int32_t i = block_dot(kd, o, r, sub, q1, q2, hi, 16 * h, 16 * h + 16,
                                                    type == TS_TYPE_Q3_K ? o32 / 8 : o32);
                        if (g256)
                            g = fmaf((float)(i * p2), dl, g);
                        else
                            acc = fmaf((float)i, dl * s, acc);
                    }
                    break;
                default: break;
                }
                /* the super-block's one multiply, by S * 2^-KMAX: its first 32-block's s * 2^-sh */
                if (g256 && sub == 7)
                    acc = fmaf(g, side_f32(side - 7 * xb, 0) / (float)(1 << side_i32(side - 7 * xb, 28)), acc);
            }
            y[(int64_t)t * y_stride + r] = acc;
        }
}

#define REF_ENTRY(name, T)                                                                                  \
    static void name(int64_t n, const uint8_t *p, const uint8_t *x, int nt, int hi, float *y, int64_t ys,   \
                     int nr) {                                                                              \
        rp_gemm_ref(T, n, p, x, nt, hi, y, ys, nr);                                                         \
    }
REF_ENTRY(rp_q4_0_ref, TS_TYPE_Q4_0)
REF_ENTRY(rp_q4_1_ref, TS_TYPE_Q4_1)
REF_ENTRY(rp_q5_0_ref, TS_TYPE_Q5_0)
REF_ENTRY(rp_q5_1_ref, TS_TYPE_Q5_1)
REF_ENTRY(rp_q8_0_ref, TS_TYPE_Q8_0)
REF_ENTRY(rp_q2_k_ref, TS_TYPE_Q2_K)
REF_ENTRY(rp_q3_k_ref, TS_TYPE_Q3_K)
REF_ENTRY(rp_q4_k_ref, TS_TYPE_Q4_K)
REF_ENTRY(rp_q5_k_ref, TS_TYPE_Q5_K)
REF_ENTRY(rp_q6_k_ref, TS_TYPE_Q6_K)

ts_rp_gemm_fn ts_rp_gemm_ref(uint32_t type) {
    switch (type) {
    case TS_TYPE_Q4_0: return rp_q4_0_ref;
    case TS_TYPE_Q4_1: return rp_q4_1_ref;
    case TS_TYPE_Q5_0: return rp_q5_0_ref;
    case TS_TYPE_Q5_1: return rp_q5_1_ref;
    case TS_TYPE_Q8_0: return rp_q8_0_ref;
    case TS_TYPE_Q2_K: return rp_q2_k_ref;
    case TS_TYPE_Q3_K: return rp_q3_k_ref;
    case TS_TYPE_Q4_K: return rp_q4_k_ref;
    case TS_TYPE_Q5_K: return rp_q5_k_ref;
    case TS_TYPE_Q6_K: return rp_q6_k_ref;
    default: return NULL;
    }
}
