/* test_amx.c - the AMX kernels (kernels/amx/amx.h).
 *
 *   test_amx        on the emulator, everywhere:
 *     1. the emulated instructions against direct loops (every integer
 *        op and TDPBF16PS, edge tiles of 1..16 rows and 4..64 bytes,
 *        strided loads), and the faults the hardware would raise;
 *     2. EXACT and Q8 against the CPU's scalar panel reference
 *        (ts_rp_quant_ref + ts_rp_gemm_ref) for every panel type: bit for
 *        bit (the definition in kernels/repack.h);
 *     3. INT8 against ts_amx_ref_int8 bit for bit, and its error against
 *        the f64 product: nmse < 1e-2 (measured worst 6.7e-3, on random
 *        Q4_K rows whose sub-block scales differ up to 63x, so one scale
 *        per row leaves the small sub-blocks few int8 levels);
 *     4. F16 / BF16 / F32 on bf16 tiles against the f64 product:
 *        |y - ref| <= 2^-14 sum|w x| (EXACT), 2^-7 sum|w x| (Q8);
 *     5. a result does not depend on n_tok, the threads, or fusing;
 *     6. INT8 with one scale per tensor (ts_amx_matmul_pt) against its
 *        scalar definition bit for bit; the shadow split (clipped part on
 *        the tiles + remainder in float, ts_amx_outliers_*) against the
 *        f64 product of the int8 weights within the INT8 bound s/2 sum|W|,
 *        well below plain per-tensor INT8 and clipping alone (which breaks
 *        the bound); saturation (the clamp, the int32 limit on K, NaN).
 *     Shapes: rows not a multiple of 16, K tails (n_in 96, 100), 1..17,
 *     33, 70 tokens.
 *   test_amx --hw   the same kernels on the real unit against the
 *     emulator, bit for bit; exits 77 (skipped) with the reason where this
 *     machine cannot run AMX.
 *   test_amx --vnni the vnni unit (AVX-512 VNNI on the same act=int8
 *     bytes) against the emulator and ts_amx_ref_int8, bit for bit, per
 *     token and per tensor, every type, K tails, 1..128 tokens, 1..7 row
 *     tiles, and the extremes (|X| = |W| = 127 everywhere, the zero
 *     input); other modes refused; exits 77 where the CPU lacks VNNI.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/amx/amx.h"
#include "kernels/amx/amx_impl.h" /* the packed layout: the int8 weights the shadow test reads back */
#include "kernels/cpu.h"
#include "kernels/repack.h"
#include "quant/quant.h"

static const uint32_t types[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q8_0,
                                 TS_TYPE_Q3_K, TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K};

#include "qrows.h"

static ts_threadpool *pool1, *pool2;

static int kq(uint32_t t) { return t == TS_TYPE_Q3_K || t == TS_TYPE_Q4_K || t == TS_TYPE_Q5_K || t == TS_TYPE_Q6_K; }

/* ---- 1. instructions ---- */

static void ref_int(ts_amx_op op, int M, int N, int K, const uint8_t *c0, const uint8_t *a, const uint8_t *b,
                    int32_t *out) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t c;
            memcpy(&c, c0 + 64 * m + 4 * n, 4);
            int64_t acc = c;
            for (int k = 0; k < 4 * K; k++) {
                const int av = op == TS_AMX_DPBSSD || op == TS_AMX_DPBSUD ? (int8_t)a[64 * m + k] : a[64 * m + k];
                const int bv = op == TS_AMX_DPBSSD || op == TS_AMX_DPBUSD ? (int8_t)b[64 * (k / 4) + 4 * n + k % 4]
                                                                          : b[64 * (k / 4) + 4 * n + k % 4];
                acc += (int64_t)av * bv;
            }
            out[16 * m + n] = (int32_t)(uint32_t)(uint64_t)acc;
        }
}

static void test_instructions(void) {
    static const int dims[] = {1, 3, 7, 16};
    char why[200];
    for (int op = TS_AMX_DPBSSD; op <= TS_AMX_DPBF16PS; op++)
        for (int im = 0; im < 4; im++)
            for (int in = 0; in < 4; in++)
                for (int ik = 0; ik < 4; ik++) {
                    const int M = dims[im], N = dims[in], K = dims[ik];
                    uint8_t c[16 * 64], a[16 * 64], b[16 * 64], c0[16 * 64];
                    for (int i = 0; i < 16 * 64; i++) a[i] = (uint8_t)rng(), b[i] = (uint8_t)rng();
                    if (op == TS_AMX_DPBF16PS) /* finite bf16 values of moderate size */
                        for (int i = 0; i < 16 * 64; i += 2) {
                            const uint16_t va = ts_f32_to_bf16(frand() * 4), vb = ts_f32_to_bf16(frand() * 4);
                            memcpy(a + i, &va, 2), memcpy(b + i, &vb, 2);
                        }
                    for (int i = 0; i < 16 * 16; i++) {
                        const float f = frand() * 100;
                        const int32_t v = (int32_t)rng();
                        memcpy(c0 + 4 * i, op == TS_AMX_DPBF16PS ? (const void *)&f : (const void *)&v, 4);
                    }
                    memcpy(c, c0, sizeof c);
                    ts_amx_cfg cfg = {{0}};
                    ts_amx_cfg_tile(&cfg, 0, M, 4 * N);
                    ts_amx_cfg_tile(&cfg, 1, M, 4 * K);
                    ts_amx_cfg_tile(&cfg, 2, K, 4 * N);
                    ts_amx_run_one(TS_AMX_EMU, &cfg, (ts_amx_op)op, c, 64, a, 64, b, 64);
                    CHECK(!ts_amx_emu_fault(why, sizeof why), "op %d %dx%dx%d faulted: %s", op, M, N, K, why);
                    if (op != TS_AMX_DPBF16PS) {
                        int32_t want[16 * 16];
                        ref_int((ts_amx_op)op, M, N, K, c0, a, b, want);
                        for (int m = 0; m < M; m++)
                            CHECK(!memcmp(c + 64 * m, want + 16 * m, 4 * (size_t)N), "op %d %dx%dx%d row %d", op, M, N,
                                  K, m);
                    } else {
                        for (int m = 0; m < M; m++)
                            for (int n = 0; n < N; n++) {
                                float c00, got;
                                memcpy(&c00, c0 + 64 * m + 4 * n, 4);
                                memcpy(&got, c + 64 * m + 4 * n, 4);
                                double want = c00, mag = fabs(c00);
                                for (int k = 0; k < 2 * K; k++) {
                                    uint16_t ua, ub;
                                    memcpy(&ua, a + 64 * m + 2 * k, 2);
                                    memcpy(&ub, b + 64 * (k / 2) + 4 * n + 2 * (k % 2), 2);
                                    const double p = (double)ts_bf16_to_f32(ua) * ts_bf16_to_f32(ub);
                                    want += p, mag += fabs(p);
                                }
                                /* one f32 rounding per add */
                                CHECK(fabs(got - want) <= mag * 0x1p-23 * (2 * K + 1), "bf16 %dx%dx%d: %g vs %g", M, N,
                                      K, got, want);
                            }
                    }
                    /* bytes past the tile's rows and columns are not written */
                    for (int m = M; m < 16; m++)
                        CHECK(!memcmp(c + 64 * m, c0 + 64 * m, 64), "row %d past the tile written", m);
                    for (int m = 0; m < M; m++)
                        CHECK(!memcmp(c + 64 * m + 4 * N, c0 + 64 * m + 4 * N, (size_t)(64 - 4 * N)),
                              "bytes past colsb written");
                }
    /* strided loads and stores of partial rows: c is 5 rows x 12 bytes
     * 100 bytes apart; with a and b zero the tdp leaves it as it was, and
     * nothing around it is written */
    {
        uint8_t buf[16 * 100], keep[16 * 100], zero[64 * 16] = {0};
        for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rng();
        memcpy(keep, buf, sizeof buf);
        ts_amx_cfg cfg = {{0}};
        ts_amx_cfg_tile(&cfg, 0, 5, 12);
        ts_amx_cfg_tile(&cfg, 1, 5, 12);
        ts_amx_cfg_tile(&cfg, 2, 3, 12);
        ts_amx_run_one(TS_AMX_EMU, &cfg, TS_AMX_DPBSSD, buf, 100, zero, 64, zero, 64);
        CHECK(!ts_amx_emu_fault(why, sizeof why), "strided: %s", why);
        CHECK(!memcmp(buf, keep, sizeof buf), "a strided partial tile came back changed");
        /* and a product lands in the right bytes */
        uint8_t one[64 * 16];
        memset(one, 1, sizeof one);
        ts_amx_run_one(TS_AMX_EMU, &cfg, TS_AMX_DPBUUD, buf, 100, one, 64, one, 64);
        for (int m = 0; m < 16; m++)
            for (int j = 0; j < 100; j++) {
                const int in = m < 5 && j < 12;
                uint32_t want = 0, got = 0;
                if (in && j % 4 == 0) {
                    memcpy(&want, keep + 100 * m + j, 4);
                    memcpy(&got, buf + 100 * m + j, 4);
                    CHECK(got == want + 12, "strided product at row %d byte %d: %u vs %u", m, j, got, want + 12);
                }
                if (!in) CHECK(buf[100 * m + j] == keep[100 * m + j], "byte %d of row %d written", j, m);
            }
    }
    /* faults: what the hardware raises, recorded */
    {
        uint8_t buf[16 * 64] = {0};
        ts_amx_cfg bad = {{0}};
        bad.b[0] = 2;
        ts_amx_run_one(TS_AMX_EMU, &bad, TS_AMX_DPBSSD, buf, 64, buf, 64, buf, 64);
        CHECK(ts_amx_emu_fault(why, sizeof why) && strstr(why, "palette"), "palette 2 not refused (%s)", why);
        ts_amx_cfg mis = {{0}};
        ts_amx_cfg_tile(&mis, 0, 16, 64);
        ts_amx_cfg_tile(&mis, 1, 8, 64); /* a's rows != c's */
        ts_amx_cfg_tile(&mis, 2, 16, 64);
        ts_amx_run_one(TS_AMX_EMU, &mis, TS_AMX_DPBSSD, buf, 64, buf, 64, buf, 64);
        CHECK(ts_amx_emu_fault(why, sizeof why) && strstr(why, "shapes"), "shape mismatch not refused (%s)", why);
        ts_amx_cfg part = {{0}};
        ts_amx_cfg_tile(&part, 0, 16, 64);
        ts_amx_cfg_tile(&part, 1, 16, 64); /* tile 2 left unconfigured */
        ts_amx_run_one(TS_AMX_EMU, &part, TS_AMX_DPBSSD, buf, 64, buf, 64, buf, 64);
        CHECK(ts_amx_emu_fault(why, sizeof why) && strstr(why, "not configured"), "unconfigured tile used (%s)", why);
        ts_amx_cfg big = {{0}};
        ts_amx_cfg_tile(&big, 0, 17, 64);
        ts_amx_run_one(TS_AMX_EMU, &big, TS_AMX_DPBSSD, buf, 64, buf, 64, buf, 64);
        CHECK(ts_amx_emu_fault(why, sizeof why), "17 rows not refused");
    }
}

/* ---- 2..5. the matrix products ---- */

typedef struct mat {
    uint32_t type;
    int64_t n_in, n_out;
    uint8_t *rows;
    size_t rb;
    float *wf; /* dequantized [n_out][n_in] */
} mat;

static mat make_mat(uint32_t type, int64_t n_in, int64_t n_out) {
    mat m = {.type = type, .n_in = n_in, .n_out = n_out, .rb = ts_row_size(type, n_in)};
    m.rows = malloc(m.rb * (size_t)n_out);
    m.wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
    if (ts_rp_supported(type)) {
        make_rows(type, n_in, (int)n_out, W_RANDOM, m.rows);
    } else {
        float *tmp = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t r = 0; r < n_out; r++) {
            for (int64_t k = 0; k < n_in; k++) tmp[k] = nrand() * 0.2f;
            ts_quant_row(type, tmp, m.rows + (size_t)r * m.rb, n_in, NULL);
        }
        free(tmp);
    }
    for (int64_t r = 0; r < n_out; r++) ts_dequant_row(type, m.rows + (size_t)r * m.rb, m.wf + r * n_in, n_in, NULL);
    return m;
}

static void free_mat(mat *m) { free(m->rows), free(m->wf); }

static void *pack(ts_amx_act act, const mat *m) {
    const uint64_t b = ts_amx_packed_bytes(act, m->type, m->n_in, m->n_out);
    CHECK(b > 0, "no %s kernel for %s[%lld]", ts_amx_act_name(act), ts_type_info(m->type)->name, (long long)m->n_in);
    if (!b) return NULL;
    void *p = aligned_alloc(64, (size_t)(b + 63) / 64 * 64);
    ts_err err = {{0}};
    CHECK(ts_amx_pack(act, m->type, m->rows, m->rb, m->n_in, m->n_out, p, &err) == 0, "pack: %s", err.msg);
    return p;
}

static float *make_x(int64_t n_in, int n_tok) {
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = nrand() * (rng() % 64 == 0 ? 20.0f : 1.0f); /* a few outliers */
    return x;
}

static ts_amx_ws *ws_big;
static int k256; /* ws_big made with lo256 (the default): act=q8 K-quants at its scales (repack.h) */

static void run(ts_amx_unit unit, ts_threadpool *pool, int n_mat, void *const *w, float *const *y, const float *x,
                int n_tok) {
    ts_err err = {{0}};
    const int rc = ts_amx_matmul(pool, ws_big, unit, n_mat, (const void *const *)w, y, x, n_tok, &err);
    CHECK(rc == 0, "matmul: %s", err.msg);
    char why[200];
    CHECK(!ts_amx_emu_fault(why, sizeof why), "emulator fault: %s", why);
}

/* the CPU's definition: panels + reference tiles + reference kernel */
static void cpu_ref(const mat *m, int hi, const float *x, int n_tok, float *y) {
    const size_t pb = ts_rp_panel_bytes(m->type, m->n_in);
    uint8_t *panel = malloc(pb), *tile = malloc(ts_rp_tiles_bytes(m->n_in, 1, hi));
    for (int64_t p = 0; p < (m->n_out + 15) / 16; p++) {
        const int nr = m->n_out - 16 * p < 16 ? (int)(m->n_out - 16 * p) : 16;
        ts_rp_pack_panel(m->type, m->n_in, m->rows + (size_t)(16 * p) * m->rb, m->rb, nr, panel);
        for (int t = 0; t < n_tok; t++) {
            ts_rp_quant_ref(x + (int64_t)t * m->n_in, m->n_in, hi, tile, 1, 0);
            ts_rp_gemm_ref(m->type)(m->n_in, panel, tile, 1, hi, y + (int64_t)t * m->n_out + 16 * p, 0, nr);
        }
    }
    free(panel), free(tile);
}

static void f64_ref(const mat *m, const float *x, int n_tok, double *y, double *mag) {
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < m->n_out; r++) {
            double acc = 0, a = 0;
            for (int64_t k = 0; k < m->n_in; k++) {
                const double p = (double)m->wf[r * m->n_in + k] * x[(int64_t)t * m->n_in + k];
                acc += p, a += fabs(p);
            }
            y[(int64_t)t * m->n_out + r] = acc, mag[(int64_t)t * m->n_out + r] = a;
        }
}

static const int toks[] = {1, 2, 5, 15, 16, 17, 33, 70};
#define N_TOKS (int)(sizeof toks / sizeof toks[0])

static void test_int_modes(void) {
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int shape = 0; shape < 2; shape++) {
            const uint32_t ty = types[ti];
            const int64_t n_in = kq(ty) ? (shape ? 512 : 256) : (shape ? 256 : 96);
            const int64_t n_out = shape ? 37 : 16;
            mat m = make_mat(ty, n_in, n_out);
            for (int act = TS_AMX_EXACT; act <= TS_AMX_Q8; act++) {
                void *w = pack((ts_amx_act)act, &m);
                if (!w) continue;
                for (int ki = 0; ki < N_TOKS; ki++) {
                    const int nt = toks[ki];
                    float *x = make_x(n_in, nt);
                    float *y = malloc(sizeof(float) * (size_t)(nt * n_out)), *yr = malloc(sizeof(float) * (size_t)(nt * n_out));
                    run(TS_AMX_EMU, ki % 2 ? pool2 : pool1, 1, &w, &y, x, nt);
                    /* act=q8 on a job of K-quants under TS_ACT_K256=1: one scale per 256, as
                     * ts_linear (repack.h) */
                    cpu_ref(&m, act == TS_AMX_EXACT ? TS_RP_HI : k256 && kq(ty) ? TS_RP_LO256 : TS_RP_LO, x, nt, yr);
                    int bad = 0;
                    for (int64_t i = 0; i < nt * n_out; i++) bad += memcmp(&y[i], &yr[i], 4) != 0;
                    CHECK(!bad, "%s act=%s n_in %lld n_out %lld tokens %d: %d of %lld differ from the CPU definition",
                          ts_type_info(ty)->name, ts_amx_act_name((ts_amx_act)act), (long long)n_in, (long long)n_out,
                          nt, bad, (long long)(nt * n_out));
                    free(x), free(y), free(yr);
                }
                free(w);
            }
            free_mat(&m);
        }
}

static void test_int8_mode(void) {
    static const uint32_t t8[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q8_0, TS_TYPE_Q3_K, TS_TYPE_Q4_K,
                                  TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_F16,  TS_TYPE_BF16, TS_TYPE_F32};
    double worst = 0;
    for (size_t ti = 0; ti < sizeof t8 / sizeof t8[0]; ti++) {
        const uint32_t ty = t8[ti];
        const int64_t n_in = kq(ty) ? 256 : ty == TS_TYPE_F16 || ty == TS_TYPE_F32 || ty == TS_TYPE_BF16 ? 100 : 96,
                      n_out = 37;
        mat m = make_mat(ty, n_in, n_out);
        void *w = pack(TS_AMX_INT8, &m);
        for (int ki = 0; ki < N_TOKS && w; ki++) {
            const int nt = toks[ki];
            float *x = make_x(n_in, nt);
            float *y = malloc(sizeof(float) * (size_t)(nt * n_out)), *yr = malloc(sizeof(float) * (size_t)(nt * n_out));
            double *yd = malloc(sizeof(double) * (size_t)(nt * n_out)), *mag = malloc(sizeof(double) * (size_t)(nt * n_out));
            run(TS_AMX_EMU, pool2, 1, &w, &y, x, nt);
            ts_amx_ref_int8(w, x, nt, yr);
            CHECK(!memcmp(y, yr, sizeof(float) * (size_t)(nt * n_out)), "int8 %s tokens %d: differs from its reference",
                  ts_type_info(ty)->name, nt);
            f64_ref(&m, x, nt, yd, mag);
            double num = 0, den = 0;
            for (int64_t i = 0; i < nt * n_out; i++) num += (y[i] - yd[i]) * (y[i] - yd[i]), den += yd[i] * yd[i];
            const double nmse = den > 0 ? num / den : 0;
            worst = nmse > worst ? nmse : worst;
            CHECK(nmse < 1e-2, "int8 %s tokens %d: nmse %.3g vs f64", ts_type_info(ty)->name, nt, nmse);
            free(x), free(y), free(yr), free(yd), free(mag);
        }
        free(w);
        free_mat(&m);
    }
    printf("int8 mode: worst nmse vs the f64 product %.3g\n", worst);
}

static void test_bf16_path(void) {
    static const uint32_t tb[] = {TS_TYPE_F16, TS_TYPE_BF16, TS_TYPE_F32};
    for (size_t ti = 0; ti < 3; ti++)
        for (int act = TS_AMX_EXACT; act <= TS_AMX_Q8; act++) {
            const int64_t n_in = ti == 1 ? 256 : 100, n_out = 21;
            mat m = make_mat(tb[ti], n_in, n_out);
            void *w = pack((ts_amx_act)act, &m);
            double worst = 0;
            for (int ki = 0; ki < N_TOKS && w; ki++) {
                const int nt = toks[ki];
                float *x = make_x(n_in, nt), *y = malloc(sizeof(float) * (size_t)(nt * n_out));
                double *yd = malloc(sizeof(double) * (size_t)(nt * n_out)), *mag = malloc(sizeof(double) * (size_t)(nt * n_out));
                run(TS_AMX_EMU, pool1, 1, &w, &y, x, nt);
                f64_ref(&m, x, nt, yd, mag);
                const double bound = act == TS_AMX_EXACT ? 0x1p-14 : 0x1p-7;
                for (int64_t i = 0; i < nt * n_out; i++) {
                    const double rel = fabs(y[i] - yd[i]) / (mag[i] + 1e-30);
                    worst = rel > worst ? rel : worst;
                    CHECK(rel <= bound, "bf16 path %s act=%s: |err| %.3g of sum|wx| (bound %.3g)", ts_type_info(tb[ti])->name,
                          ts_amx_act_name((ts_amx_act)act), rel, bound);
                }
                free(x), free(y), free(yd), free(mag);
            }
            printf("%s act=%s on bf16 tiles: worst |err| / sum|wx| = %.3g\n", ts_type_info(tb[ti])->name,
                   ts_amx_act_name((ts_amx_act)act), worst);
            free(w);
            free_mat(&m);
        }
}

/* fused matrices (one input quantized once) and n_tok give the same bits */
static void test_independence(void) {
    for (int act = TS_AMX_EXACT; act <= TS_AMX_INT8; act++) {
        mat a = make_mat(TS_TYPE_Q4_K, 512, 48), b = make_mat(TS_TYPE_Q6_K, 512, 20), c = make_mat(TS_TYPE_F16, 512, 33);
        void *w[3] = {pack((ts_amx_act)act, &a), pack((ts_amx_act)act, &b), pack((ts_amx_act)act, &c)};
        const int nt = 40;
        float *x = make_x(512, nt);
        float *y[3], *z[3];
        const int64_t no[3] = {48, 20, 33};
        for (int i = 0; i < 3; i++) y[i] = malloc(sizeof(float) * (size_t)(nt * no[i])), z[i] = malloc(sizeof(float) * (size_t)(nt * no[i]));
        run(TS_AMX_EMU, pool2, 3, w, y, x, nt);
        for (int i = 0; i < 3; i++)
            for (int t = 0; t < nt; t++) /* one token at a time, one matrix at a time */
                run(TS_AMX_EMU, pool1, 1, &w[i], (float *const[]){z[i] + t * no[i]}, x + t * 512, 1);
        for (int i = 0; i < 3; i++)
            CHECK(!memcmp(y[i], z[i], sizeof(float) * (size_t)(nt * no[i])), "act=%s matrix %d: fused batch != token by token",
                  ts_amx_act_name((ts_amx_act)act), i);
        for (int i = 0; i < 3; i++) free(w[i]), free(y[i]), free(z[i]);
        free(x);
        free_mat(&a), free_mat(&b), free_mat(&c);
    }
}

/* ---- 6. one scale per tensor, and shadow outliers (seed 003) ---- */

/* the packed int8 matrix's own weights, w_s * Wq [n_out][n_in] (what the
 * tiles multiply and ts_amx_outliers_add reads) */
static double *int8_weights(const void *w) {
    const ts_amx_hdr *h = w;
    double *wd = malloc(sizeof(double) * (size_t)(h->n_in * h->n_out));
    for (int64_t r = 0; r < h->n_out; r++) {
        const uint8_t *rt = ts_amx_rt(h, r / 16);
        const float *wsc = (const float *)(const void *)(rt + h->off_wd);
        for (int64_t k = 0; k < h->n_in; k++)
            wd[r * h->n_in + k] =
                (double)(wsc[r % 16] * (float)(int8_t)rt[(size_t)(k / 4) * 64 + 4 * (size_t)(r % 16) + (size_t)(k % 4)]);
    }
    return wd;
}

/* max |y - x W| over the outputs, and whether each is within the INT8
 * bound of a scale s: s/2 sum_k |W[r][k]| (+ float rounding: 1e-5 of the
 * magnitude sum |x W| and of the bound) */
static double split_err(const double *wd, int64_t n_in, int64_t n_out, const float *x, int nt, const float *y, float s,
                        int *over) {
    double worst = 0;
    *over = 0;
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double ref = 0, mag = 0, wsum = 0;
            for (int64_t k = 0; k < n_in; k++) {
                const double p = wd[r * n_in + k] * (double)x[(int64_t)t * n_in + k];
                ref += p, mag += fabs(p), wsum += fabs(wd[r * n_in + k]);
            }
            const double e = fabs((double)y[(int64_t)t * n_out + r] - ref), bound = (double)s / 2 * wsum;
            worst = e > worst ? e : worst;
            if (e > bound * (1 + 1e-5) + 1e-5 * mag) (*over)++;
        }
    return worst;
}

/* Adds the outliers of x to y with ts_amx_outliers_add (the reference),
 * and checks that ts_amx_outliers_add_grouped gives its bits at every CPU
 * level this machine runs (NaN for NaN), and refuses a token whose
 * channels are not ascending. */
static void shadow_add(const void *w, const float *x, int nt, int64_t n_in, float clip, float *y, int64_t *n_out_l) {
    const ts_amx_hdr *h = w;
    const int64_t n = ts_amx_outliers_find(x, nt, n_in, clip, NULL, 0);
    ts_amx_outlier *o = malloc(sizeof *o * (size_t)(n ? n : 1));
    CHECK(ts_amx_outliers_find(x, nt, n_in, clip, o, n) == n, "outliers: the count changed between calls");
    const size_t yb = sizeof(float) * (size_t)nt * (size_t)h->n_out;
    float *y0 = malloc(yb), *yg = malloc(yb), *col = malloc(sizeof(float) * (size_t)h->n_out);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(n ? n : 1)), *start = malloc(sizeof(int32_t) * (size_t)n_in);
    memcpy(y0, y, yb);
    ts_err err = {{0}};
    CHECK(ts_amx_outliers_add(w, o, n, y, &err) == 0, "outliers_add: %s", err.msg);
    const ts_cpu_level was = ts_cpu_level_active();
    static const ts_cpu_level lv[] = {TS_CPU_SCALAR, TS_CPU_AVX2, TS_CPU_AVX512};
    for (int li = 0; li < 3; li++) {
        if (!ts_kern_for_level(lv[li])) continue;
        ts_cpu_force_level(lv[li]);
        memcpy(yg, y0, yb);
        CHECK(ts_amx_outliers_add_grouped(w, o, n, yg, idx, start, col, &err) == 0, "outliers_add_grouped: %s",
              err.msg);
        int diff = 0;
        for (size_t i = 0; i < yb / sizeof(float); i++)
            diff += !(isnan(y[i]) ? isnan(yg[i]) : memcmp(&y[i], &yg[i], sizeof(float)) == 0);
        CHECK(!diff, "grouped outliers (%s, %d tokens, %lld outliers): %d outputs differ from the reference",
              ts_cpu_level_name(lv[li]), nt, (long long)n, diff);
    }
    ts_cpu_force_level(was);
    for (int64_t i = 1; i < n; i++)
        if (o[i].t == o[i - 1].t) { /* swap two of a token's channels: refused */
            const ts_amx_outlier tmp = o[i];
            o[i] = o[i - 1], o[i - 1] = tmp;
            CHECK(ts_amx_outliers_add_grouped(w, o, n, yg, idx, start, col, &err) != 0 &&
                      strstr(err.msg, "not ascending"),
                  "a token's channels out of order: %s", err.msg);
            break;
        }
    *n_out_l = n;
    free(o), free(y0), free(yg), free(col), free(idx), free(start);
}

static void test_shadow(void) {
    static const uint32_t ts3[] = {TS_TYPE_Q4_0, TS_TYPE_Q8_0, TS_TYPE_F16};
    static const int nts[] = {1, 7, 33};
    ts_err err = {{0}};
    for (size_t ti = 0; ti < 3; ti++)
        for (int ki = 0; ki < 3; ki++) {
            const uint32_t ty = ts3[ti];
            const int64_t n_in = 256, n_out = 37;
            const int nt = nts[ki];
            mat m = make_mat(ty, n_in, n_out);
            void *w = pack(TS_AMX_INT8, &m);
            if (!w) continue;
            double *wd = int8_weights(w);
            /* three hot channels in every token (x60) and a rare cold one */
            float *x = malloc(sizeof(float) * (size_t)(n_in * nt));
            for (int t = 0; t < nt; t++)
                for (int64_t k = 0; k < n_in; k++) {
                    float v = nrand();
                    if (k == 5 || k == 77 || k == 200) v = 60.0f * (v > 0 ? 1.0f : -1.0f) + v;
                    if (rng() % 509 == 0) v *= 25.0f;
                    x[(int64_t)t * n_in + k] = v;
                }
            const float clip = 4.0f;
            const size_t yb = sizeof(float) * (size_t)(nt * n_out);
            float *yp = malloc(yb), *yr = malloc(yb), *yc = malloc(yb), *ys = malloc(yb);
            float s_plain = 0, s_clip = 0, s_ref = 0;
            /* the tiles = the scalar definition, bit for bit (plain and clipped) */
            CHECK(ts_amx_matmul_pt(pool2, ws_big, TS_AMX_EMU, 1, (const void *const *)&w, &yp, x, nt, 0.0f, &s_plain,
                                   &err) == 0, "matmul_pt: %s", err.msg);
            ts_amx_ref_int8_pt(w, x, nt, 0.0f, yr, &s_ref);
            CHECK(!memcmp(yp, yr, yb) && s_plain == s_ref, "%s tokens %d: per-tensor (amax) differs from its reference",
                  ts_type_info(ty)->name, nt);
            CHECK(ts_amx_matmul_pt(pool1, ws_big, TS_AMX_EMU, 1, (const void *const *)&w, &yc, x, nt, clip, &s_clip,
                                   &err) == 0, "matmul_pt clip: %s", err.msg);
            ts_amx_ref_int8_pt(w, x, nt, clip, yr, &s_ref);
            CHECK(!memcmp(yc, yr, yb) && s_clip == s_ref && s_clip == clip / 127.0f,
                  "%s tokens %d: per-tensor (clip) differs from its reference", ts_type_info(ty)->name, nt);
            /* the split: clipped on the tiles + remainder on the CPU = x W within the INT8 bound of s = clip/127 */
            memcpy(ys, yc, yb);
            int64_t n_o = 0;
            shadow_add(w, x, nt, n_in, clip, ys, &n_o);
            int over_s, over_p, over_c;
            const double e_s = split_err(wd, n_in, n_out, x, nt, ys, s_clip, &over_s);
            const double e_p = split_err(wd, n_in, n_out, x, nt, yp, s_plain, &over_p);
            const double e_c = split_err(wd, n_in, n_out, x, nt, yc, s_clip, &over_c);
            CHECK(over_s == 0 && over_p == 0, "%s tokens %d: %d (shadow) / %d (plain) outputs past the INT8 bound",
                  ts_type_info(ty)->name, nt, over_s, over_p);
            CHECK(over_c > 0, "%s tokens %d: clipping without the remainder stayed within the bound", ts_type_info(ty)->name,
                  nt);
            CHECK(n_o >= 3 * nt && e_s * 5 < e_p && e_s * 5 < e_c,
                  "%s tokens %d: shadow max err %.3g not well below plain per-tensor %.3g / clipped %.3g (%lld outliers)",
                  ts_type_info(ty)->name, nt, e_s, e_p, e_c, (long long)n_o);
            if (ti == 0 && ki == 2)
                printf("shadow outliers (Q4_0, 33 tokens, 3 hot channels x60, clip 4): max |y - xW| plain per-tensor "
                       "%.3g, clipped %.3g, clipped + shadow %.3g (%lld outliers of %lld)\n", e_p, e_c, e_s,
                       (long long)n_o, (long long)(nt * n_in));
            free(x), free(yp), free(yr), free(yc), free(ys), free(wd), free(w);
            free_mat(&m);
        }

    /* saturation: the clamp keeps |X| <= 127; the int32 sum cannot wrap up to
     * TS_AMX_I8_MAX_K inputs, and packing refuses more */
    {
        CHECK(ts_amx_packed_bytes(TS_AMX_INT8, TS_TYPE_F32, TS_AMX_I8_MAX_K, 1) > 0 &&
                  ts_amx_packed_bytes(TS_AMX_INT8, TS_TYPE_F32, TS_AMX_I8_MAX_K + 1, 1) == 0,
              "int8 packing at the int32 limit");
        float one = 1.0f, dst[64];
        CHECK(ts_amx_pack(TS_AMX_INT8, TS_TYPE_F32, &one, 4, TS_AMX_I8_MAX_K + 1, 1, dst, &err) != 0 &&
                  strstr(err.msg, "wrap"), "int8 packing past the limit: %s", err.msg);
        const int64_t n_in = 1024, n_out = 16;
        mat m = {.type = TS_TYPE_F32, .n_in = n_in, .n_out = n_out, .rb = 4 * (size_t)n_in};
        m.rows = malloc(m.rb * (size_t)n_out);
        m.wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
        for (int64_t i = 0; i < n_in * n_out; i++) {
            const float v = i % n_in == 3 ? -1.0f : 1.0f; /* every |Wq| = 127 */
            memcpy(m.rows + 4 * i, &v, 4);
            m.wf[i] = v;
        }
        void *w = pack(TS_AMX_INT8, &m);
        float x[2 * 1024], y[2 * 16];
        for (int k = 0; k < 2 * 1024; k++) x[k] = k < 1024 ? 1e6f : (k == 1024 + 9 ? NAN : -3.0f);
        float s = 0;
        CHECK(ts_amx_matmul_pt(pool1, ws_big, TS_AMX_EMU, 1, (const void *const *)&w, (float *const *)&(float *){y}, x,
                               2, 1.0f, &s, &err) == 0, "saturating matmul: %s", err.msg);
        /* token 0: every X = 127 (clamped): i = 16129 (1023 - 1), y = i s w_s = 1022 */
        const double want0 = (double)16129 * (1024 - 2) * (double)s * (1.0 / 127);
        CHECK(fabs(y[0] - want0) <= 1e-5 * fabs(want0) && y[0] > 0, "token 0 clamped: %g, want %g", (double)y[0], want0);
        int64_t n_o = 0;
        shadow_add(w, x, 2, n_in, 1.0f, y, &n_o);
        const double want_full = 1e6 * (1024 - 2);
        /* 1022 float adds of 1e6 into a sum near 1e9 (24-bit mantissa): 1e-4 */
        CHECK(n_o == 2048 && fabs(y[5] - want_full) <= 1e-4 * want_full, "token 0 with its remainder: %g, want %g (%lld "
              "outliers)", (double)y[5], want_full, (long long)n_o);
        CHECK(isnan(y[16]) && isnan(y[31]), "a NaN input: its remainder carries it to every output of its token");
        /* errors */
        ts_amx_outlier bad = {.t = 0, .k = 1024, .r = 1.0f};
        CHECK(ts_amx_outliers_add(w, &bad, 1, y, &err) != 0 && strstr(err.msg, "outside"), "channel past n_in: %s",
              err.msg);
        CHECK(ts_amx_matmul_pt(pool1, ws_big, TS_AMX_EMU, 1, (const void *const *)&w, (float *const *)&(float *){y}, x,
                               2, INFINITY, NULL, &err) != 0 && strstr(err.msg, "finite"), "clip inf: %s", err.msg);
        free(w);
        void *we = pack(TS_AMX_EXACT, &m);
        CHECK(ts_amx_outliers_add(we, &bad, 0, y, &err) != 0 && strstr(err.msg, "act=int8"), "exact matrix: %s",
              err.msg);
        CHECK(ts_amx_matmul_pt(pool1, ws_big, TS_AMX_EMU, 1, (const void *const *)&we, (float *const *)&(float *){y},
                               x, 2, 1.0f, NULL, &err) != 0 && strstr(err.msg, "act=int8"), "pt on an exact matrix: %s",
              err.msg);
        free(we);
        free_mat(&m);
    }
}

/* ---- --hw: the real unit against the emulator ---- */

static int test_hw(void) {
    char why[200];
    if (!ts_amx_hw_status(why, sizeof why)) {
        printf("SKIPPED: no usable AMX on this machine: %s\n", why);
        return 77;
    }
    /* single instructions */
    for (int op = TS_AMX_DPBSSD; op <= TS_AMX_DPBF16PS; op++)
        for (int M = 1; M <= 16; M += 5)
            for (int N = 1; N <= 16; N += 5) {
                uint8_t a[1024], b[1024], c1[1024], c2[1024];
                for (int i = 0; i < 1024; i++) a[i] = (uint8_t)rng(), b[i] = (uint8_t)rng(), c1[i] = c2[i] = (uint8_t)rng();
                if (op == TS_AMX_DPBF16PS)
                    for (int i = 0; i < 1024; i += 2) {
                        const uint16_t va = ts_f32_to_bf16(nrand()), vb = ts_f32_to_bf16(nrand());
                        memcpy(a + i, &va, 2), memcpy(b + i, &vb, 2);
                        const float f = nrand();
                        if (i % 4 == 0) memcpy(c1 + i, &f, 4), memcpy(c2 + i, &f, 4);
                    }
                if (op == TS_AMX_DPBF16PS && M == 16) /* the edges: denormals (read as zero, flushed), -0, big */
                    for (int i = 0; i < 1024; i += 2) {
                        static const uint16_t sp[] = {0x0001, 0x8040, 0x8000, 0x0000, 0x0080, 0x7f00, 0xff00, 0x3f80};
                        const uint32_t r = rng();
                        if (r % 3 == 0) memcpy(a + i, &sp[(r >> 8) % 8], 2);
                        if (r % 5 == 0) memcpy(b + i, &sp[(r >> 12) % 8], 2);
                        if (i % 4 == 0 && r % 7 == 0) {
                            static const uint32_t cs[] = {0x80000000u, 0x00000001u, 0x80400000u, 0x7f000000u};
                            memcpy(c1 + i, &cs[(r >> 16) % 4], 4), memcpy(c2 + i, &cs[(r >> 16) % 4], 4);
                        }
                    }
                ts_amx_cfg cfg = {{0}};
                ts_amx_cfg_tile(&cfg, 0, M, 4 * N);
                ts_amx_cfg_tile(&cfg, 1, M, 64);
                ts_amx_cfg_tile(&cfg, 2, 16, 4 * N);
                ts_amx_run_one(TS_AMX_HW, &cfg, (ts_amx_op)op, c1, 64, a, 64, b, 64);
                ts_amx_run_one(TS_AMX_EMU, &cfg, (ts_amx_op)op, c2, 64, a, 64, b, 64);
                CHECK(!memcmp(c1, c2, sizeof c1), "op %d %dx%d: hardware != emulator", op, M, N);
            }
    /* every kernel path */
    static const uint32_t all[] = {TS_TYPE_Q4_0, TS_TYPE_Q4_1, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q8_0, TS_TYPE_Q3_K, TS_TYPE_Q4_K,
                                   TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_F16, TS_TYPE_BF16, TS_TYPE_F32};
    for (size_t ti = 0; ti < sizeof all / sizeof all[0]; ti++)
        for (int act = TS_AMX_EXACT; act <= TS_AMX_INT8; act++) {
            const uint32_t ty = all[ti];
            const int64_t n_in = kq(ty) ? 512 : ty == TS_TYPE_F16 || ty == TS_TYPE_F32 ? 100 : 96, n_out = 37;
            mat m = make_mat(ty, n_in, n_out);
            void *w = pack((ts_amx_act)act, &m);
            for (int ki = 0; ki < N_TOKS && w; ki++) {
                const int nt = toks[ki];
                float *x = make_x(n_in, nt), *y1 = malloc(sizeof(float) * (size_t)(nt * n_out)),
                      *y2 = malloc(sizeof(float) * (size_t)(nt * n_out));
                run(TS_AMX_HW, pool2, 1, &w, &y1, x, nt);
                run(TS_AMX_EMU, pool1, 1, &w, &y2, x, nt);
                CHECK(!memcmp(y1, y2, sizeof(float) * (size_t)(nt * n_out)), "%s act=%s tokens %d: hardware != emulator",
                      ts_type_info(ty)->name, ts_amx_act_name((ts_amx_act)act), nt);
                if (act == TS_AMX_INT8) /* one scale per tensor, clipped */
                    for (int c = 0; c < 2; c++) {
                        ts_err e = {{0}};
                        CHECK(ts_amx_matmul_pt(pool2, ws_big, TS_AMX_HW, 1, (const void *const *)&w, &y1, x, nt,
                                               c ? 2.0f : 0.0f, NULL, &e) == 0 &&
                                  ts_amx_matmul_pt(pool1, ws_big, TS_AMX_EMU, 1, (const void *const *)&w, &y2, x, nt,
                                                   c ? 2.0f : 0.0f, NULL, &e) == 0 &&
                                  !memcmp(y1, y2, sizeof(float) * (size_t)(nt * n_out)),
                              "%s per-tensor int8 (clip %d) tokens %d: hardware != emulator %s", ts_type_info(ty)->name,
                              c, nt, e.msg);
                    }
                free(x), free(y1), free(y2);
            }
            free(w);
            free_mat(&m);
        }
    return 0;
}

/* ---- --vnni: vpdpbusd on the tile layout against the emulator ---- */

static int test_vnni(void) {
    char why[200];
    if (!ts_amx_vnni_status(why, sizeof why)) {
        printf("SKIPPED: no vnni unit on this machine: %s\n", why);
        return 77;
    }
    static const uint32_t all[] = {TS_TYPE_Q4_0, TS_TYPE_Q8_0, TS_TYPE_Q4_K, TS_TYPE_Q6_K, TS_TYPE_F16, TS_TYPE_F32};
    static const int vt[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 33, 70, 128};
    int cases = 0;
    for (size_t ti = 0; ti < sizeof all / sizeof all[0]; ti++)
        for (int shape = 0; shape < 3; shape++) {
            const uint32_t ty = all[ti];
            const int64_t n_in = kq(ty) ? 256 * (shape + 1) : shape == 0 ? 96 : shape == 1 ? 992 : 64;
            const int64_t n_out = shape == 0 ? 37 : shape == 1 ? 100 : 16; /* 3, 7, 1 row tiles */
            if (ty == TS_TYPE_F16 && n_in % 2) continue;
            mat m = make_mat(ty, n_in, n_out);
            void *w = pack(TS_AMX_INT8, &m);
            for (size_t ki = 0; ki < sizeof vt / sizeof vt[0] && w; ki++) {
                const int nt = vt[ki];
                const size_t ny = (size_t)nt * (size_t)n_out;
                float *x = make_x(n_in, nt), *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny),
                      *yr = malloc(sizeof(float) * ny);
                if (ki == 3) memset(x, 0, sizeof(float) * (size_t)n_in); /* a zero token: scale 0 */
                run(TS_AMX_VNNI, ki % 2 ? pool2 : pool1, 1, &w, &y1, x, nt);
                run(TS_AMX_EMU, pool1, 1, &w, &y2, x, nt);
                ts_amx_ref_int8(w, x, nt, yr);
                CHECK(!memcmp(y1, y2, sizeof(float) * ny) && !memcmp(y1, yr, sizeof(float) * ny),
                      "%s n_in %lld n_out %lld tokens %d: vnni != emulator / reference", ts_type_info(ty)->name,
                      (long long)n_in, (long long)n_out, nt);
                for (int c = 0; c < 2; c++) {
                    ts_err e = {{0}};
                    CHECK(ts_amx_matmul_pt(pool2, ws_big, TS_AMX_VNNI, 1, (const void *const *)&w, &y1, x, nt,
                                           c ? 2.0f : 0.0f, NULL, &e) == 0 &&
                              ts_amx_matmul_pt(pool1, ws_big, TS_AMX_EMU, 1, (const void *const *)&w, &y2, x, nt,
                                               c ? 2.0f : 0.0f, NULL, &e) == 0 &&
                              !memcmp(y1, y2, sizeof(float) * ny),
                          "%s per-tensor int8 (clip %d) tokens %d: vnni != emulator %s", ts_type_info(ty)->name, c, nt,
                          e.msg);
                }
                cases++;
                free(x), free(y1), free(y2), free(yr);
            }
            free(w);
            free_mat(&m);
        }
    /* the extremes: every weight and activation at +-127, so the offset
     * operand runs 1 .. 255 and the int32 sums are the largest K allows
     * here; exact against the emulator */
    {
        const int64_t n_in = 1024, n_out = 48;
        const int nt = 9;
        mat m = {.type = TS_TYPE_F32, .n_in = n_in, .n_out = n_out, .rb = sizeof(float) * (size_t)n_in};
        float *wr = malloc(sizeof(float) * (size_t)(n_in * n_out));
        for (int64_t i = 0; i < n_in * n_out; i++) wr[i] = i % 3 == 0 ? -1.0f : 1.0f;
        for (int64_t k = 0; k < n_in; k++) wr[k] = 1.0f; /* row 0: all +127 */
        m.rows = (uint8_t *)wr;
        void *w = pack(TS_AMX_INT8, &m);
        float *x = malloc(sizeof(float) * (size_t)(n_in * nt)), *y1 = malloc(sizeof(float) * (size_t)(n_out * nt)),
              *y2 = malloc(sizeof(float) * (size_t)(n_out * nt));
        for (int64_t i = 0; i < n_in * nt; i++) x[i] = (i / n_in) % 2 ? -1.0f : (i % 5 == 0 ? -1.0f : 1.0f);
        for (int64_t k = 0; k < n_in; k++) x[k] = 1.0f; /* token 0: all +127: row 0 sums to 127 * 127 * K */
        run(TS_AMX_VNNI, pool2, 1, &w, &y1, x, nt);
        run(TS_AMX_EMU, pool1, 1, &w, &y2, x, nt);
        CHECK(!memcmp(y1, y2, sizeof(float) * (size_t)(n_out * nt)), "extremes: vnni != emulator");
        CHECK(fabsf(y1[0] - 1024.0f) < 1e-3f, "extremes: row 0 token 0 %g, want 1024", (double)y1[0]);
        free(x), free(y1), free(y2), free(w), free(wr);
    }
    /* the other modes are the tiles' */
    {
        mat m = make_mat(TS_TYPE_Q4_0, 96, 16);
        void *w = pack(TS_AMX_EXACT, &m);
        float *x = make_x(96, 2), *y = malloc(sizeof(float) * 32);
        ts_err e = {{0}};
        CHECK(ts_amx_matmul(pool1, ws_big, TS_AMX_VNNI, 1, (const void *const *)&w, &y, x, 2, &e) == -1 &&
                  strstr(e.msg, "act=int8 matrices only"),
              "an act=exact matrix on the vnni unit: '%s'", e.msg);
        free(x), free(y), free(w);
        free_mat(&m);
    }
    printf("vnni unit: %d cases bit-identical to the emulator\n", cases);
    return 0;
}

int main(int argc, char **argv) {
    ts_err err = {{0}};
    pool1 = ts_threadpool_new(1, &err);
    pool2 = ts_threadpool_new(2, &err);
    setenv("TS_ACT_K256", "0", 1); /* first act=q8 at arbitrary per-32 scales */
    ws_big = ts_amx_ws_new(1024, 128, &err);
    unsetenv("TS_ACT_K256");
    if (!pool1 || !pool2 || !ws_big) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (argc > 1 && !strcmp(argv[1], "--hw")) {
        rc = test_hw();
    } else if (argc > 1 && !strcmp(argv[1], "--vnni")) {
        rc = test_vnni();
    } else {
        test_instructions();
        test_int_modes();
        test_int8_mode();
        test_bf16_path();
        test_independence();
        test_shadow();
        /* again with lo256 (the default) for the K-quants at act=q8 */
        ts_amx_ws_free(ws_big);
        ws_big = ts_amx_ws_new(1024, 128, &err);
        k256 = 1;
        if (ws_big) {
            test_int_modes();
            test_independence();
        } else {
            CHECK(0, "setup: %s", err.msg);
        }
    }
    ts_amx_ws_free(ws_big);
    ts_threadpool_free(pool1);
    ts_threadpool_free(pool2);
    if (rc == 77)
        return 77;
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
