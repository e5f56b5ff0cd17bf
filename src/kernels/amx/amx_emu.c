/* amx_emu.c - a scalar emulator of the AMX tile unit, and the kernels
 * (amx_gemm_impl.h) compiled on it.
 *
 * Semantics follow the Intel SDM (vol. 2, TILELOADD .. TDPBF16PS):
 *   - LDTILECFG: palette 0 releases; palette 1 gives 8 tiles of up to 16
 *     rows x 64 bytes (colsb). A tile with rows or colsb 0 is unconfigured.
 *     Anything else (another palette, rows > 16, colsb > 64, start_row != 0,
 *     a reserved byte set) is a fault (#GP on the hardware).
 *   - TILELOADD: rows x colsb bytes from base + row * stride; the rest of
 *     every row and the rows past `rows` read as zero. TILESTORED writes
 *     rows x colsb. TILEZERO zeroes the whole tile.
 *   - TDPB[SU][SU]D c, a, b: for m < c.rows, n < c.colsb / 4,
 *     c[m][n] += sum over k < a.colsb / 4, i < 4 of a[m][4k + i] * b[k][4n + i]
 *     (signed or unsigned bytes as named), 32-bit wrap-around. Shapes must
 *     agree: c.rows = a.rows, c.colsb = b.colsb, a.colsb = 4 b.rows, all
 *     multiples of 4, three distinct tiles (#UD otherwise).
 *   - TDPBF16PS: the same over bf16 pairs, in the order the hardware
 *     adds them (measured on an AMX Xeon guest, 2026-12-02; the SDM's pseudo-code
 *     adds a[2k] b[2n] then a[2k+1] b[2n+1] into c, which the hardware does
 *     not): per instruction, the even products a[2k] b[2n] are summed in k
 *     order from +0 into one f32 by fused multiply-adds (a product that
 *     overflows alone does not overflow a sum it lands back in range in),
 *     the odd ones a[2k+1] b[2n+1] into another, and c += (even + odd);
 *     every step rounded to nearest even, denormal inputs (and c) read as
 *     zero, denormal results flushed.
 *     test_amx_hw checks this against the unit bit for bit.
 * A fault is recorded in the thread's state (ts_amx_emu_fault) and the
 * instruction does nothing: the emulator never aborts the process.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/amx/amx_impl.h"

typedef struct emu_unit {
    bool on; /* palette 1 loaded */
    int rows[8], colsb[8];
    uint8_t t[8][16][64];
    bool fault;
    char why[160];
} emu_unit;

static _Thread_local emu_unit emu;

static void fault(const char *fmt, ...) {
    if (emu.fault)
        return; /* keep the first */
    emu.fault = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(emu.why, sizeof emu.why, fmt, ap);
    va_end(ap);
}

bool ts_amx_emu_fault(char *why, size_t n) {
    const bool f = emu.fault;
    if (why && n)
        snprintf(why, n, "%s", f ? emu.why : "");
    emu.fault = false;
    emu.why[0] = 0;
    return f;
}

void ts_amx_emu_loadconfig(const void *cfg) {
    const uint8_t *c = cfg;
    if (c[0] == 0) {
        ts_amx_emu_release();
        return;
    }
    if (c[0] != 1) {
        fault("ldtilecfg: palette %d (only 0 and 1 exist)", c[0]);
        return;
    }
    if (c[1] != 0) {
        fault("ldtilecfg: start_row %d (must be 0)", c[1]);
        return;
    }
    for (int i = 2; i < 16; i++)
        if (c[i]) {
            fault("ldtilecfg: reserved byte %d is %d", i, c[i]);
            return;
        }
    for (int t = 0; t < 16; t++) {
        const int colsb = c[16 + 2 * t] | (c[17 + 2 * t] << 8), rows = c[48 + t];
        if (t >= 8 ? colsb || rows : colsb > 64 || rows > 16) {
            fault("ldtilecfg: tile %d asks %d rows x %d bytes (palette 1: 8 tiles of <= 16 x 64)", t, rows, colsb);
            return;
        }
    }
    memset(&emu.t, 0, sizeof emu.t);
    for (int t = 0; t < 8; t++) {
        emu.colsb[t] = c[16 + 2 * t] | (c[17 + 2 * t] << 8);
        emu.rows[t] = c[48 + t];
        if (!emu.colsb[t] || !emu.rows[t])
            emu.colsb[t] = emu.rows[t] = 0;
    }
    emu.on = true;
}

void ts_amx_emu_release(void) {
    emu.on = false;
    memset(emu.rows, 0, sizeof emu.rows);
    memset(emu.colsb, 0, sizeof emu.colsb);
}

static bool usable(int t, const char *what) {
    if (!emu.on) {
        fault("%s: no tile configuration loaded (tile %d)", what, t);
        return false;
    }
    if (t < 0 || t > 7 || !emu.rows[t]) {
        fault("%s: tile %d is not configured", what, t);
        return false;
    }
    return true;
}

void ts_amx_emu_zero(int t) {
    if (usable(t, "tilezero"))
        memset(emu.t[t], 0, sizeof emu.t[t]);
}

void ts_amx_emu_load(int t, const void *base, size_t stride) {
    if (!usable(t, "tileloadd"))
        return;
    memset(emu.t[t], 0, sizeof emu.t[t]);
    for (int m = 0; m < emu.rows[t]; m++)
        memcpy(emu.t[t][m], (const uint8_t *)base + (size_t)m * stride, (size_t)emu.colsb[t]);
}

void ts_amx_emu_store(int t, void *base, size_t stride) {
    if (!usable(t, "tilestored"))
        return;
    for (int m = 0; m < emu.rows[t]; m++)
        memcpy((uint8_t *)base + (size_t)m * stride, emu.t[t][m], (size_t)emu.colsb[t]);
}

/* bf16 -> f32 with denormals read as zero */
static float bf16_daz(const uint8_t *p) {
    uint32_t u = ((uint32_t)p[0] | ((uint32_t)p[1] << 8)) << 16;
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ftz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

void ts_amx_emu_dp(ts_amx_op op, int c, int a, int b) {
    if (!usable(c, "tdp") || !usable(a, "tdp") || !usable(b, "tdp"))
        return;
    if (c == a || c == b || a == b) {
        fault("tdp: tiles c %d, a %d, b %d are not distinct", c, a, b);
        return;
    }
    if (emu.rows[c] != emu.rows[a] || emu.colsb[c] != emu.colsb[b] || emu.colsb[a] != 4 * emu.rows[b] ||
        emu.colsb[c] % 4 || emu.colsb[a] % 4) {
        fault("tdp: shapes do not agree (c %dx%d, a %dx%d, b %dx%d bytes)", emu.rows[c], emu.colsb[c], emu.rows[a],
              emu.colsb[a], emu.rows[b], emu.colsb[b]);
        return;
    }
    const int M = emu.rows[c], N = emu.colsb[c] / 4, K = emu.colsb[a] / 4;
    if (op == TS_AMX_DPBF16PS) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float acc;
                float even = 0.0f, odd = 0.0f;
                memcpy(&acc, &emu.t[c][m][4 * n], 4);
                for (int k = 0; k < K; k++) {
                    even = ftz(fmaf(bf16_daz(&emu.t[a][m][4 * k]), bf16_daz(&emu.t[b][k][4 * n]), even));
                    odd = ftz(fmaf(bf16_daz(&emu.t[a][m][4 * k + 2]), bf16_daz(&emu.t[b][k][4 * n + 2]), odd));
                }
                acc = ftz(ftz(acc) + ftz(even + odd));
                memcpy(&emu.t[c][m][4 * n], &acc, 4);
            }
        goto zero_upper;
    }
    /* integer products: b widened once into [k][i][n] so that the inner
     * loop runs over the 16 columns n (one vector on a SIMD host); b's bytes
     * past colsb are zero in the tile, so all 16 are computed and N kept. A
     * column's sum per instruction stays below 64 * 65025 < 2^31; only the
     * add to c wraps. */
    const bool as = op == TS_AMX_DPBSSD || op == TS_AMX_DPBSUD, bs = op == TS_AMX_DPBSSD || op == TS_AMX_DPBUSD;
    int32_t bw[16][4][16];
    for (int k = 0; k < K; k++)
        for (int n = 0; n < 16; n++)
            for (int i = 0; i < 4; i++) {
                const uint8_t v = emu.t[b][k][4 * n + i];
                bw[k][i][n] = bs ? (int32_t)(int8_t)v : (int32_t)v;
            }
    for (int m = 0; m < M; m++) {
        int32_t col[16] = {0};
        for (int k = 0; k < K; k++)
            for (int i = 0; i < 4; i++) {
                const uint8_t v = emu.t[a][m][4 * k + i];
                const int32_t av = as ? (int32_t)(int8_t)v : (int32_t)v;
                for (int n = 0; n < 16; n++) col[n] += av * bw[k][i][n];
            }
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, &emu.t[c][m][4 * n], 4);
            acc += (uint32_t)col[n];
            memcpy(&emu.t[c][m][4 * n], &acc, 4);
        }
    }
zero_upper:
    /* the bytes of c's rows past colsb are zero after a tdp (SDM: zero_upper_rows/cols) */
    for (int m = 0; m < 16; m++)
        if (m >= M)
            memset(emu.t[c][m], 0, 64);
        else
            memset(&emu.t[c][m][4 * N], 0, (size_t)(64 - 4 * N));
}

/* ---- the kernels on the emulator ---- */
#define FN(name) name##_emu
#define T_CFG(cfg) ts_amx_emu_loadconfig(cfg)
#define T_RELEASE() ts_amx_emu_release()
#define T_ZERO(t) ts_amx_emu_zero(t)
#define T_LOAD(t, p, s) ts_amx_emu_load(t, p, (size_t)(s))
#define T_STORE(t, p, s) ts_amx_emu_store(t, p, (size_t)(s))
#define T_DPBSSD(c, a, b) ts_amx_emu_dp(TS_AMX_DPBSSD, c, a, b)
#define T_DPBSUD(c, a, b) ts_amx_emu_dp(TS_AMX_DPBSUD, c, a, b)
#define T_DPBUSD(c, a, b) ts_amx_emu_dp(TS_AMX_DPBUSD, c, a, b)
#define T_DPBUUD(c, a, b) ts_amx_emu_dp(TS_AMX_DPBUUD, c, a, b)
#define T_DPBF16PS(c, a, b) ts_amx_emu_dp(TS_AMX_DPBF16PS, c, a, b)
/* the int path's float step (amx_impl.h's ts_amx_epi), one element at a time */
static void int_epi_emu(float acc[16][16], const ts_amx_epi *e, int i0, int i1, int nt, bool two) {
    for (int i = i0; i < i1; i++)
        for (int t = 0; t < nt; t++) {
            const float s = e->sx[i][t];
            const int32_t off = e->off[i][t];
            for (int r = 0; r < 16; r++) {
                const int32_t v = two ? e->c1[i][t][r] * 256 + (e->c2[i][t][r] + off)
                                      : (e->c1[i][t][r] + off) * ((int32_t)1 << e->sh[i][t]);
                acc[t][r] = fmaf((float)v, e->wd[i][r] * s, acc[t][r]);
            }
            if (e->wm[i])
                for (int r = 0; r < 16; r++) acc[t][r] = fmaf(e->wm[i][r], e->dsx[i][t], acc[t][r]);
        }
}

#include "kernels/amx/amx_gemm_impl.h"
