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

#define TB_TOK 64 /* tokens per block: every row tile of a chunk runs them while they are in L2 */

static inline void FN(cfg_load)(ts_amx_cfg *cur, const ts_amx_cfg *want) {
    if (memcmp(cur, want, sizeof *want)) {
        *cur = *want;
        T_CFG(cur);
    }
}

/* ---- int path (EXACT: two planes; Q8: one): one tile of nt tokens ---- */
static void FN(int_tile)(const ts_amx_hdr *h, const uint8_t *rt, int nrow, const ts_amx_xq *x, int t0, int nt,
                         float *y, int64_t ldy, ts_amx_cfg *cur) {
    const int nh = h->halves ? 2 : 1, kb = 32 / nh;
    ts_amx_cfg cfg = {{0}};
    /* 0, 1: the planes' int32 sums (nt x 16); 2, 3: the planes' rows; 4: the weights (kb/4 vectors) */
    ts_amx_cfg_tile(&cfg, 0, nt, 64);
    ts_amx_cfg_tile(&cfg, 2, nt, kb);
    ts_amx_cfg_tile(&cfg, 4, kb / 4, 64);
    if (x->hi) {
        ts_amx_cfg_tile(&cfg, 1, nt, 64);
        ts_amx_cfg_tile(&cfg, 3, nt, kb);
    }
    FN(cfg_load)(cur, &cfg);
    const float *WD = (const float *)(const void *)(rt + h->off_wd);
    const float *WM = (const float *)(const void *)(rt + h->off_wm);
    float acc[16][16];
    int32_t c1[16][16], c2[16][16];
    for (int t = 0; t < 16; t++)
        for (int r = 0; r < 16; r++) acc[t][r] = 0.0f;
    const int8_t *q1 = x->q1 + (int64_t)t0 * x->ld, *q2 = x->hi ? x->q2 + (int64_t)t0 * x->ld : NULL;
    for (int b = 0; b < h->n_blk; b++)
        for (int hh = 0; hh < nh; hh++) {
            const int64_t k0 = 32 * (int64_t)b + kb * hh;
            T_ZERO(0);
            T_LOAD(2, q1 + k0, x->ld);
            T_LOAD(4, rt + k0 / 4 * 64, 64);
            T_DPBSUD(0, 2, 4);
            T_STORE(0, c1, 64);
            if (q2) {
                T_ZERO(1);
                T_LOAD(3, q2 + k0, x->ld);
                T_DPBSUD(1, 3, 4);
                T_STORE(1, c2, 64);
            }
            /* the CPU's per-block float step (repack.h), in its order */
            const float *wd = WD + ((int64_t)b * nh + hh) * 16;
            for (int t = 0; t < nt; t++) {
                const int64_t tb = (int64_t)(t0 + t) * x->n_blk + b;
                const int32_t *sm = x->sum + 2 * tb;
                const int32_t off = -h->o * (h->halves ? sm[hh] : sm[0] + sm[1]);
                const float s = x->s[tb];
                if (q2)
                    for (int r = 0; r < 16; r++) acc[t][r] = fmaf((float)(c1[t][r] * 256 + (c2[t][r] + off)), wd[r] * s, acc[t][r]);
                else
                    for (int r = 0; r < 16; r++) acc[t][r] = fmaf((float)(c1[t][r] + off), wd[r] * s, acc[t][r]);
                if (h->has_m) {
                    const float ds = x->ds[tb], *wm = WM + (int64_t)b * 16;
                    for (int r = 0; r < 16; r++) acc[t][r] = fmaf(wm[r], ds, acc[t][r]);
                }
            }
        }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nrow; r++) y[(int64_t)(t0 + t) * ldy + r] = acc[t][r];
}

/* row tiles [p0, p1) x tokens [t0, t1) in blocks of TB_TOK tokens, one
 * 16-token tile at a time (the int and bf16 paths) */
typedef void (*FN(tile_fn))(const ts_amx_hdr *h, const uint8_t *rt, int nrow, const ts_amx_xq *x, int t0, int nt,
                            float *y, int64_t ldy, ts_amx_cfg *cur);
static void FN(tiles)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                      int64_t ldy, FN(tile_fn) tile) {
    ts_amx_cfg cur = {{0}};
    for (int tb = t0; tb < t1; tb += TB_TOK) {
        const int te = tb + TB_TOK < t1 ? tb + TB_TOK : t1;
        for (int64_t p = p0; p < p1; p++) {
            const int nrow = h->n_out - 16 * p < 16 ? (int)(h->n_out - 16 * p) : 16;
            for (int t = tb; t < te; t += 16)
                tile(h, ts_amx_rt(h, p), nrow, x, t, te - t < 16 ? te - t : 16, y + 16 * p, ldy, &cur);
        }
    }
    T_RELEASE();
}

static void FN(int_rows)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                         int64_t ldy) {
    FN(tiles)(h, p0, p1, x, t0, t1, y, ldy, FN(int_tile));
}

/* ---- int8 path: up to 32 tokens x 2 row tiles, K accumulated whole ---- */
static void FN(i8_tile)(const ts_amx_hdr *h, int64_t p, int two, const ts_amx_xq *x, int t0, int nt, float *y,
                        int64_t ldy, ts_amx_cfg *cur) {
    const int na = nt < 16 ? nt : 16, nb = nt - na;
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
    FN(cfg_load)(cur, &cfg);
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
    ts_amx_cfg cur = {{0}};
    for (int tb = t0; tb < t1; tb += TB_TOK) {
        const int te = tb + TB_TOK < t1 ? tb + TB_TOK : t1;
        for (int64_t p = p0; p < p1; p += 2)
            for (int t = tb; t < te; t += 32)
                FN(i8_tile)(h, p, p + 1 < p1, x, t, te - t < 32 ? te - t : 32, y, ldy, &cur);
    }
    T_RELEASE();
}

/* ---- bf16 path: f32 sums over the whole K ---- */
static void FN(bf_tile)(const ts_amx_hdr *h, const uint8_t *rt, int nrow, const ts_amx_xq *x, int t0, int nt,
                        float *y, int64_t ldy, ts_amx_cfg *cur) {
    ts_amx_cfg cfg = {{0}};
    /* 0: sums; 1, 2: activations hi, lo; 3, 4: weights hi, lo */
    ts_amx_cfg_tile(&cfg, 0, nt, 64);
    ts_amx_cfg_tile(&cfg, 1, nt, 64);
    ts_amx_cfg_tile(&cfg, 3, 16, 64);
    if (x->xl_used) ts_amx_cfg_tile(&cfg, 2, nt, 64);
    if (h->n_wp == 2) ts_amx_cfg_tile(&cfg, 4, 16, 64);
    FN(cfg_load)(cur, &cfg);
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

static void FN(bf_rows)(const ts_amx_hdr *h, int64_t p0, int64_t p1, const ts_amx_xq *x, int t0, int t1, float *y,
                        int64_t ldy) {
    FN(tiles)(h, p0, p1, x, t0, t1, y, ldy, FN(bf_tile));
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

const ts_amx_kernels FN(ts_amx_kernels) = {
    .rows = {FN(int_rows), FN(bf_rows), FN(i8_rows)},
    .run_one = FN(run_one),
};
