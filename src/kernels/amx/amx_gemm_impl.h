/* amx_gemm_impl.h - the AMX kernels, written once against the tile
 * instructions and compiled twice: on the emulator (amx_emu.c) and on the
 * hardware (x86/gemm_amx.c). The includer defines
 *   T_CFG(cfg) T_RELEASE() T_ZERO(t) T_LOAD(t, p, stride) T_STORE(t, p, stride)
 *   T_DPBSUD(c, a, b) T_DPBSSD(c, a, b) T_DPBF16PS(c, a, b)   (t, c, a, b: constants)
 *   FN(name)  the unit's name for a function
 * Everything else is plain C with explicit fmaf (no contraction: the file
 * is compiled with -ffp-contract=off), so the two builds compute the same
 * bits. Layouts: amx.h. No allocation: scratch lives on the stack.
 */
#include <math.h>
#include <string.h>

#include "kernels/amx/amx_quant_i8.h"

#define TB_TOK 64 /* tokens per block: every row tile of a chunk runs them while they are in L2 */

/* The tile configuration a kernel call wants is named by a key (its path
 * and shape); LDTILECFG runs only when the key changes. (Comparing the
 * 64-byte config itself cost a fifth of the int8 kernel's time: the bytes
 * just written are read back as words, which store forwarding cannot serve.) */
static inline bool FN(cfg_same)(int *cur, int key) {
    if (*cur == key)
        return true;
    *cur = key;
    return false;
}

/* ---- int path (EXACT: two planes; Q8: one): nt tokens x two row tiles ----
 * K goes unit by unit (a 32-block, or a half block for the types with
 * 16-element scales), in groups of TS_AMX_GROUP units: each unit's
 * products for both row tiles share one activation load, their int32 sums
 * are stored to c1 / c2 (on one plane the C tiles alternate by unit, so a
 * unit's products run while the last one's stores drain), and the last
 * unit's float step (FN(int_epi), from the includer: AVX-512 on the
 * hardware, scalar on the emulator; the same operations in the same order,
 * which is the CPU panel kernels', repack.h) runs while this unit's
 * products do. */
/* one plane's unit on activation tile A into C tiles C0 (rows 0) and C1
 * (rows 1); tile numbers are immediates, hence a macro */
#define INT_ONE_PLANE(A, C0, C1)                                                                                       \
    do {                                                                                                               \
        T_LOAD(A, q1 + k0, x->ld);                                                                                     \
        T_ZERO(C0);                                                                                                    \
        T_DPBSUD(C0, A, 6);                                                                                            \
        if (two_rt) {                                                                                                  \
            T_ZERO(C1);                                                                                                \
            T_DPBSUD(C1, A, 7);                                                                                        \
        }                                                                                                              \
        T_STORE(C0, e[0].c1[i], 64);                                                                                   \
        if (two_rt) T_STORE(C1, e[1].c1[i], 64);                                                                       \
    } while (0)

/* The float step of unit i (= u: the unit's number in the row; b its
 * 32-block) for both row tiles. At lo256 (x->g256: K-quants) the unit's
 * integer terms go to gacc (int_epi with sx 1: wd * 1 is wd) and its
 * offset term to acc, and the super-block's last unit adds gacc * s to acc
 * (repack.h's lo256 definition; plain C, the same on both builds). */
static void FN(unit_epi)(float acc[2][16][16], float gacc[2][16][16], ts_amx_epi e[2], const float *const wm[2],
                         int i, int u, int b, int nh, int two_rt, const ts_amx_xq *x, int t0, int nt, bool two) {
    for (int j = 0; j <= two_rt; j++) {
        if (!x->g256) {
            FN(int_epi)(acc[j], &e[j], i, i + 1, nt, two);
            continue;
        }
        FN(int_epi)(gacc[j], &e[j], i, i + 1, nt, two);
        if (wm[j])
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < 16; r++) acc[j][t][r] = fmaf(wm[j][r], e[j].dsx[i][t], acc[j][t][r]);
        if ((u + 1) % (8 * nh) == 0) { /* the super-block's one multiply, by its first 32-block's s * 2^-sh */
            for (int t = 0; t < nt; t++) {
                const int64_t tb = (int64_t)(t0 + t) * x->n_blk + b - 7;
                const float s = x->s[tb] / (float)(1 << x->sh[tb]);
                for (int r = 0; r < 16; r++) acc[j][t][r] = fmaf(gacc[j][t][r], s, acc[j][t][r]);
            }
            memset(gacc[j], 0, sizeof gacc[j]);
        }
    }
}

static void FN(int_tile)(const ts_amx_hdr *h, int64_t p, int two_rt, const ts_amx_xq *x, int t0, int nt, float *y,
                         int64_t ldy, int *cur) {
    const int nh = h->halves ? 2 : 1, kb = 32 / nh;
    const bool two = x->hi;
    if (!FN(cfg_same)(cur, 1 << 24 | nt << 8 | two << 2 | two_rt << 1 | (nh == 2))) {
        ts_amx_cfg cfg = {{0}};
        /* C: 0 = plane 1 x rows 0, 2 = plane 1 x rows 1; two planes: 1, 3 = plane 2 x rows 0, 1; one plane: 1, 3
         * take the odd units (so a unit's products run while the last one's stores drain).
         * A: 4 = plane 1 (odd units on one plane: 5), 5 = plane 2. B: 6 = rows 0, 7 = rows 1. */
        for (int c = 0; c < (two_rt ? 4 : 2); c++) ts_amx_cfg_tile(&cfg, c, nt, 64);
        ts_amx_cfg_tile(&cfg, 4, nt, kb);
        ts_amx_cfg_tile(&cfg, 5, nt, kb);
        ts_amx_cfg_tile(&cfg, 6, kb / 4, 64);
        if (two_rt) ts_amx_cfg_tile(&cfg, 7, kb / 4, 64);
        T_CFG(&cfg);
    }
    const uint8_t *rt[2] = {ts_amx_rt(h, p), two_rt ? ts_amx_rt(h, p + 1) : NULL};
    ts_amx_epi e[2];
    float acc[2][16][16], gacc[2][16][16];
    const float *wm[TS_AMX_GROUP][2]; /* lo256: the offset terms' factors, out of int_epi's reach */
    memset(acc, 0, sizeof acc);
    memset(gacc, 0, sizeof gacc);
    const int8_t *q1 = x->q1 + (int64_t)t0 * x->ld, *q2 = two ? x->q2 + (int64_t)t0 * x->ld : NULL;
    const int n_units = h->n_blk * nh;
    for (int u0 = 0; u0 < n_units; u0 += TS_AMX_GROUP) {
        const int g = n_units - u0 < TS_AMX_GROUP ? n_units - u0 : TS_AMX_GROUP;
        for (int i = 0; i < g; i++) {
            const int u = u0 + i, b = u / nh, hh = u % nh;
            const int64_t k0 = 32 * (int64_t)b + kb * hh;
            T_LOAD(6, rt[0] + k0 / 4 * 64, 64);
            if (two_rt) T_LOAD(7, rt[1] + k0 / 4 * 64, 64);
            if (two) {
                T_LOAD(4, q1 + k0, x->ld);
                T_LOAD(5, q2 + k0, x->ld);
                T_ZERO(0);
                T_ZERO(1);
                T_DPBSUD(0, 4, 6);
                T_DPBSUD(1, 5, 6);
                if (two_rt) {
                    T_ZERO(2);
                    T_ZERO(3);
                    T_DPBSUD(2, 4, 7);
                    T_DPBSUD(3, 5, 7);
                }
                T_STORE(0, e[0].c1[i], 64);
                T_STORE(1, e[0].c2[i], 64);
                if (two_rt) {
                    T_STORE(2, e[1].c1[i], 64);
                    T_STORE(3, e[1].c2[i], 64);
                }
            } else if (i & 1) {
                INT_ONE_PLANE(5, 1, 3);
            } else {
                INT_ONE_PLANE(4, 0, 2);
            }
            /* the per-token terms of this unit (repack.h's float step) */
            for (int t = 0; t < 16; t++) {
                if (t >= nt) {
                    e[0].off[i][t] = 0, e[0].sh[i][t] = 0, e[0].sx[i][t] = 0.0f, e[0].dsx[i][t] = 0.0f;
                    continue;
                }
                const int64_t tb = (int64_t)(t0 + t) * x->n_blk + b;
                const int32_t *sm = x->sum + 2 * tb;
                e[0].off[i][t] = -h->o * (h->halves ? sm[hh] : sm[0] + sm[1]);
                e[0].sh[i][t] = x->g256 ? x->sh[tb] : 0;
                e[0].sx[i][t] = x->g256 ? 1.0f : x->s[tb];
                e[0].dsx[i][t] = h->has_m ? x->ds[tb] : 0.0f;
            }
            for (int j = 0; j <= two_rt; j++) {
                e[j].wd[i] = (const float *)(const void *)(rt[j] + h->off_wd) + (int64_t)u * 16;
                e[j].wm[i] = h->has_m ? (const float *)(const void *)(rt[j] + h->off_wm) + (int64_t)b * 16 : NULL;
                wm[i][j] = e[j].wm[i];
                if (x->g256) e[j].wm[i] = NULL;
            }
            if (two_rt) {
                memcpy(e[1].off[i], e[0].off[i], sizeof e[0].off[i]);
                memcpy(e[1].sh[i], e[0].sh[i], sizeof e[0].sh[i]);
                memcpy(e[1].sx[i], e[0].sx[i], sizeof e[0].sx[i]);
                memcpy(e[1].dsx[i], e[0].dsx[i], sizeof e[0].dsx[i]);
            }
            /* the last unit's float step, while this unit's products run */
            if (i > 0) FN(unit_epi)(acc, gacc, e, wm[i - 1], i - 1, u - 1, (u - 1) / nh, nh, two_rt, x, t0, nt, two);
        }
        FN(unit_epi)(acc, gacc, e, wm[g - 1], g - 1, u0 + g - 1, (u0 + g - 1) / nh, nh, two_rt, x, t0, nt, two);
    }
    for (int j = 0; j <= two_rt; j++) {
        const int64_t r0 = 16 * (p + j);
        const int nrow = h->n_out - r0 < 16 ? (int)(h->n_out - r0) : 16;
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < nrow; r++) y[(int64_t)(t0 + t) * ldy + r0 + r] = acc[j][t][r];
    }
}

#undef INT_ONE_PLANE

/* row tiles [p0, p1) in pairs x tokens [t0, t1) in blocks of TB_TOK, tiles
 * of `step` tokens (the int and int8 paths) */
typedef void (*FN(pair_fn))(const ts_amx_hdr *h, int64_t p, int two_rt, const ts_amx_xq *x, int t0, int nt, float *y,
                            int64_t ldy, int *cur);
static void FN(pairs)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                      int64_t ldy, int step, FN(pair_fn) tile) {
    int cur = 0;
    for (int tb = t0; tb < t1; tb += TB_TOK) {
        const int te = tb + TB_TOK < t1 ? tb + TB_TOK : t1;
        for (int64_t p = p0; p < p1; p += 2)
            for (int t = tb; t < te; t += step) tile(h, p, p + 1 < p1, x, t, te - t < step ? te - t : step, y, ldy, &cur);
    }
    T_RELEASE();
}

static void FN(int_rows)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                         int64_t ldy) {
    FN(pairs)(h, p0, p1, x, t0, t1, y, ldy, 16, FN(int_tile));
}

/* ---- int8 path: up to 32 tokens x 2 row tiles, K accumulated whole ---- */
static void FN(i8_tile)(const ts_amx_hdr *h, int64_t p, int two, const ts_amx_xq *x, int t0, int nt, float *y,
                        int64_t ldy, int *cur) {
    const int na = nt < 16 ? nt : 16, nb = nt - na;
    if (!FN(cfg_same)(cur, 2 << 24 | na << 16 | nb << 8 | two)) {
        ts_amx_cfg cfg = {{0}};
        /* C: 0 = A0 B0, 1 = A0 B1, 2 = A1 B0, 3 = A1 B1; A0 = 4, A1 = 5 (tokens); B0 = 6, B1 = 7 (row tiles) */
        ts_amx_cfg_tile(&cfg, 0, na, 64);
        ts_amx_cfg_tile(&cfg, 4, na, 64);
        ts_amx_cfg_tile(&cfg, 6, 16, 64);
        if (two) {
            ts_amx_cfg_tile(&cfg, 1, na, 64);
            ts_amx_cfg_tile(&cfg, 7, 16, 64);
        }
        if (nb) {
            ts_amx_cfg_tile(&cfg, 2, nb, 64);
            ts_amx_cfg_tile(&cfg, 5, nb, 64);
            if (two) ts_amx_cfg_tile(&cfg, 3, nb, 64);
        }
        T_CFG(&cfg);
    }
    const uint8_t *w0 = ts_amx_rt(h, p), *w1 = two ? ts_amx_rt(h, p + 1) : NULL;
    const int8_t *xa = x->q1 + (int64_t)t0 * x->ld, *xb = xa + 16 * x->ld;
    T_ZERO(0);
    if (two) T_ZERO(1);
    if (nb) T_ZERO(2);
    if (nb && two) T_ZERO(3);
    for (int64_t k0 = 0; k0 < h->k_pad; k0 += 64) {
        T_LOAD(4, xa + k0, x->ld);
        T_LOAD(6, w0 + 16 * k0, 64); /* the 16 vectors of K = k0 .. k0 + 63 */
        T_DPBSSD(0, 4, 6);
        if (two) {
            T_LOAD(7, w1 + 16 * k0, 64);
            T_DPBSSD(1, 4, 7);
        }
        if (nb) {
            T_LOAD(5, xb + k0, x->ld);
            T_DPBSSD(2, 5, 6);
            if (two) T_DPBSSD(3, 5, 7);
        }
    }
    int32_t c[4][16][16];
    T_STORE(0, c[0], 64);
    if (two) T_STORE(1, c[1], 64);
    if (nb) T_STORE(2, c[2], 64);
    if (nb && two) T_STORE(3, c[3], 64);
    for (int j = 0; j <= two; j++) {
        const float *ws = (const float *)(const void *)((j ? w1 : w0) + h->off_wd);
        const int64_t r0 = 16 * (p + j);
        const int nrow = h->n_out - r0 < 16 ? (int)(h->n_out - r0) : 16;
        for (int t = 0; t < nt; t++) {
            const int32_t *ct = c[(t >= 16 ? 2 : 0) + j][t % 16];
            const float sx = x->s[t0 + t];
            for (int r = 0; r < nrow; r++) y[(int64_t)(t0 + t) * ldy + r0 + r] = (float)ct[r] * (sx * ws[r]);
        }
    }
}

static void FN(i8_rows)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                        int64_t ldy) {
    FN(pairs)(h, p0, p1, x, t0, t1, y, ldy, 32, FN(i8_tile));
}

/* ---- bf16 path: f32 sums over the whole K ---- */
static void FN(bf_tile)(const ts_amx_hdr *h, const uint8_t *rt, int nrow, const ts_amx_xq *x, int t0, int nt,
                        float *y, int64_t ldy, int *cur) {
    if (!FN(cfg_same)(cur, 3 << 24 | nt << 8 | (x->xl_used != 0) << 1 | (h->n_wp == 2))) {
        ts_amx_cfg cfg = {{0}};
        /* 0: sums; 1, 2: activations hi, lo; 3, 4: weights hi, lo */
        ts_amx_cfg_tile(&cfg, 0, nt, 64);
        ts_amx_cfg_tile(&cfg, 1, nt, 64);
        ts_amx_cfg_tile(&cfg, 3, 16, 64);
        if (x->xl_used) ts_amx_cfg_tile(&cfg, 2, nt, 64);
        if (h->n_wp == 2) ts_amx_cfg_tile(&cfg, 4, 16, 64);
        T_CFG(&cfg);
    }
    const uint8_t *xh = (const uint8_t *)x->xh + (int64_t)t0 * x->ld, *xl = (const uint8_t *)x->xl + (int64_t)t0 * x->ld;
    const uint8_t *wl = rt + (size_t)h->k_pad * 32; /* the lo plane follows the hi plane (K/2 vectors) */
    T_ZERO(0);
    for (int64_t k0 = 0; k0 < h->k_pad; k0 += 32) {
        T_LOAD(1, xh + 2 * k0, x->ld);
        T_LOAD(3, rt + k0 * 32, 64); /* pairs: vector k0/2 .. k0/2 + 15 */
        T_DPBF16PS(0, 1, 3);
        if (h->n_wp == 2) {
            T_LOAD(4, wl + k0 * 32, 64);
            T_DPBF16PS(0, 1, 4);
        }
        if (x->xl_used) {
            T_LOAD(2, xl + 2 * k0, x->ld);
            T_DPBF16PS(0, 2, 3);
        }
    }
    float c[16][16];
    T_STORE(0, c, 64);
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nrow; r++) y[(int64_t)(t0 + t) * ldy + r] = c[t][r];
}

/* row tiles [p0, p1) one at a time x tokens [t0, t1) in blocks of TB_TOK,
 * tiles of 16 tokens */
static void FN(bf_rows)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                        int64_t ldy) {
    int cur = 0;
    for (int tb = t0; tb < t1; tb += TB_TOK) {
        const int te = tb + TB_TOK < t1 ? tb + TB_TOK : t1;
        for (int64_t p = p0; p < p1; p++) {
            const int nrow = h->n_out - 16 * p < 16 ? (int)(h->n_out - 16 * p) : 16;
            for (int t = tb; t < te; t += 16)
                FN(bf_tile)(h, ts_amx_rt(h, p), nrow, x, t, te - t < 16 ? te - t : 16, y + 16 * p, ldy, &cur);
        }
    }
    T_RELEASE();
}

/* one instruction, for the tests that compare the units */
static void FN(run_one)(const ts_amx_cfg *cfg, ts_amx_op op, void *c, size_t cs, const void *a, size_t as,
                        const void *b, size_t bs) {
    T_CFG(cfg);
    T_LOAD(0, c, cs);
    T_LOAD(1, a, as);
    T_LOAD(2, b, bs);
    switch (op) {
    case TS_AMX_DPBSSD: T_DPBSSD(0, 1, 2); break;
    case TS_AMX_DPBSUD: T_DPBSUD(0, 1, 2); break;
    case TS_AMX_DPBUSD: T_DPBUSD(0, 1, 2); break;
    case TS_AMX_DPBUUD: T_DPBUUD(0, 1, 2); break;
    case TS_AMX_DPBF16PS: T_DPBF16PS(0, 1, 2); break;
    }
    T_STORE(0, c, cs);
    T_RELEASE();
}

static void FN(quant_i8)(const float *x, int64_t n, int8_t *q, float *s) { ts_amx_quant_row_i8(x, n, q, s); }

const ts_amx_kernels FN(ts_amx_kernels) = {
    .rows = {FN(int_rows), FN(bf_rows), FN(i8_rows)},
    .quant_i8 = FN(quant_i8),
    .run_one = FN(run_one),
};
