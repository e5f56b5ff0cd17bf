/* amx.h - matrix products on Intel AMX tiles (the `amx` engine's kernels),
 * and a scalar emulator of the tile instructions so that every path runs
 * and is tested on machines without AMX.
 *
 * The unit: 8 tile registers of up to 16 rows x 64 bytes, configured per
 * thread (LDTILECFG: rows and bytes per row of each tile); TILELOADD /
 * TILESTORED move a tile from / to memory rows `stride` bytes apart;
 * TDPBSUD / TDPBSSD: C[m][n] += sum_k A[m][k] B[k/4][4n + k%4] over int8
 * (A signed, B unsigned / signed) into int32; TDPBF16PS the same over bf16
 * pairs into f32. So A's rows are our tokens (activation rows, K bytes) and
 * B holds 16 output rows as "VNNI" vectors: 64 bytes = 16 rows x 4 int8
 * (or 2 bf16) consecutive elements of K, exactly the byte-vectors of the
 * CPU's panel layout (kernels/repack.h).
 *
 * Three arithmetic modes (ts_amx_act), chosen per engine:
 *   EXACT  the CPU's hi-precision definition (repack.h "result"): 16-bit
 *          activations as two int8 planes, one int32 per 32-block from two
 *          tile products (K = 32; 16 for Q3_K/Q6_K halves), the float scale
 *          applied after each block in the CPU's order: bit-identical to
 *          the CPU's panel kernels.
 *   Q8     the same with one int8 plane (the CPU's lo precision, TS_ACT=q8;
 *          llama.cpp's Q8_0 activations): bit-identical to a CPU lo run.
 *   INT8   what an NPU runs: one scale per token for the activations
 *          (s_t = amax_t / 127, X = rint(x / s_t)) and one per output row
 *          for the weights (an int8 copy requantized once at pack time
 *          from the exact weights: w_s = amax_r / 127), K accumulated whole
 *          in int32 inside the tiles: y = (float)i * (s_t * w_s). Fast, and
 *          loses accuracy where a few channels are huge.
 * Weight types: EXACT / Q8 take the panel types (Q4_0, Q4_1, Q5_0, Q8_0,
 * Q3_K, Q4_K, Q5_K, Q6_K) on int8 tiles, and F16 / BF16 / F32 on bf16
 * tiles (weights split into bf16 hi + lo; EXACT splits the activations too:
 * x*w ~ xh*wh + xh*wl + xl*wh; Q8 uses xh only); not bit-identical to the
 * CPU's f32 product (within ~1e-5 relative). INT8 takes every type the CPU
 * can dequantize.
 *
 * The packed matrix (ts_amx_pack) is self-describing: a 128-byte header,
 * then one block per row tile of 16 output rows (rows past n_out are
 * zero), 64-byte aligned:
 *   int path   u8 quants [K/4][64] | f32 wd [blocks][halves][16] | f32 wm [blocks][16]
 *   bf16 path  bf16 hi pairs [K32/2][64] (| bf16 lo pairs, F16 / F32)
 *   int8 path  s8 [K64/4][64] | f32 row scales [16]
 * (K32 / K64: n_in rounded up to 32 / 64 with zeros). One row tile is
 * 16 x K bytes (36 KB for K = 2304): the kernel runs every token tile of a
 * block of 64 tokens against 4 row tiles while they are in L2.
 *
 * Where the tiles come from: the hardware (TS_AMX_HW, on a CPU where
 * ts_amx_hw_status says yes) or the emulator (TS_AMX_EMU, everywhere). The
 * two run the same kernel source (amx_gemm_impl.h) and must agree bit for
 * bit (tests/test_amx.c).
 */
#ifndef TS_KERNELS_AMX_H
#define TS_KERNELS_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/threadpool.h"

typedef enum ts_amx_act { TS_AMX_EXACT = 0, TS_AMX_Q8, TS_AMX_INT8 } ts_amx_act;
const char *ts_amx_act_name(ts_amx_act a); /* "exact", "q8", "int8" */

/* Where the products run: the emulated tiles, the real ones, or AVX-512
 * VNNI reading the same packed bytes (act=int8 matrices only: vpdpbusd
 * takes a 64-byte vector of the tile layout as it is; bit-identical to the
 * tiles, x86/amx_vnni_avx512.c). */
typedef enum ts_amx_unit { TS_AMX_EMU = 0, TS_AMX_HW, TS_AMX_VNNI } ts_amx_unit;
const char *ts_amx_unit_name(ts_amx_unit u); /* "emulator", "tiles", "vnni" */

/* Whether this process can run the vnni unit (AVX-512 F/BW and VNNI, and a
 * build with its kernel); false with the reason in why. */
bool ts_amx_vnni_status(char *why, size_t n);

/* Whether this process can run AMX tile instructions: CPUID leaf 7 EDX
 * (AMX-BF16 bit 22, AMX-TILE 24, AMX-INT8 25), a palette in CPUID leaf 0x1D
 * (some hypervisors advertise AMX and fault on it), XCR0's tile state, the
 * kernel's arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) permission
 * (asked once per process), and a build with the hardware kernels. false
 * with the first reason that fails in why. */
bool ts_amx_hw_status(char *why, size_t n);

/* Bytes of the packed matrix (0: the mode has no kernel for this type or
 * shape). */
uint64_t ts_amx_packed_bytes(ts_amx_act act, uint32_t type, int64_t n_in, int64_t n_out);
/* Packs n_out GGUF rows of `type` (row_bytes apart) into dst
 * (ts_amx_packed_bytes; 4-byte aligned at least, 64 for the fastest tile
 * loads). */
int ts_amx_pack(ts_amx_act act, uint32_t type, const void *rows, size_t row_bytes, int64_t n_in, int64_t n_out,
                void *dst, ts_err *err);
/* The packed matrix's shape and mode (0), or -1 when p is not one. */
int ts_amx_packed_info(const void *p, ts_amx_act *act, uint32_t *type, int64_t *n_in, int64_t *n_out);

/* Work space: the quantized activations of up to max_tok rows of up to
 * max_n_in values, in every form a mode needs. */
typedef struct ts_amx_ws ts_amx_ws;
ts_amx_ws *ts_amx_ws_new(int64_t max_n_in, int max_tok, ts_err *err);
void ts_amx_ws_free(ts_amx_ws *ws);
size_t ts_amx_ws_bytes(int64_t max_n_in, int max_tok);

/* y[i][t * n_out_i + r] = sum_k x[t * n_in + k] W_i[r][k] for i < n_mat
 * (<= 4) packed matrices of one n_in (<= the work space's), t < n_tok (1 ..
 * max_tok), on `unit`. The input is quantized once for all of them. The
 * result of a (row, token) does not depend on n_tok or the threads. -1 with
 * err when a matrix is not a packed one, the shapes disagree, or the
 * hardware is asked for where it is absent. */
int ts_amx_matmul(ts_threadpool *pool, ts_amx_ws *ws, ts_amx_unit unit, int n_mat, const void *const *w,
                  float *const *y, const float *x, int n_tok, ts_err *err);

/* ---- INT8 with one scale per tensor, and shadow outliers (seed 003) ----
 *
 * ts_amx_matmul_pt is the INT8 mode with ONE activation scale for the whole
 * input, what an NPU's matrix unit executes natively: s = clip / 127 and
 * X = rint(clamp(x, -clip, clip) / s) (ts_amx_quant_row_i8_at); clip <= 0
 * takes the input's own largest |x| (plain per-tensor INT8: nothing is
 * clipped, and a few huge channels leave the rest few levels). Weights and
 * kernels are the INT8 mode's (packed with act=int8): y = (float)i * (s * w_s).
 *
 * Shadow execution: x = clamp(x, -clip, clip) + r, where the remainder r is
 * nonzero only in the outlier channels (|x| > clip). ts_amx_outliers_find
 * lists them from the actual input (nothing is assumed from a profile), and
 * ts_amx_outliers_add adds r * W in float on the CPU, reading W from the
 * same packed copy the tiles read (w_s * Wq[row][k]: no second copy). The
 * sum is x * W up to the INT8 rounding of the clipped part:
 *   |y - x W| <= s / 2 * sum_k |W[row][k]|  (plus float rounding).
 * Saturation: the clamp keeps |X| <= 127 and the weights are |Wq| <= 127,
 * so the int32 sum of K products is at most 16129 K; packing act=int8
 * refuses n_in > TS_AMX_I8_MAX_K, past which it could wrap. The outputs are
 * f32 (nothing is requantized to int8 after the product). */
#define TS_AMX_I8_MAX_K 133143 /* 16129 * 133143 <= INT32_MAX < 16129 * 133144 */

/* y[i][t * n_out + r] for packed act=int8 matrices, one activation scale
 * for the n_tok x n_in input (clip as above; must be finite). *scale (may be
 * NULL) gets s. -1 with err where a matrix is not act=int8 or as
 * ts_amx_matmul. */
int ts_amx_matmul_pt(ts_threadpool *pool, ts_amx_ws *ws, ts_amx_unit unit, int n_mat, const void *const *w,
                     float *const *y, const float *x, int n_tok, float clip, float *scale, ts_err *err);

/* One outlier of an input: token t, channel k, remainder r = x - clamp(x). */
typedef struct ts_amx_outlier {
    int32_t t, k;
    float r;
} ts_amx_outlier;

/* The outliers of x [n_tok][n_in] at clip (> 0): every element with
 * !(|x| <= clip) (NaN and inf too: their remainder carries them), in
 * token-major order; writes at most cap and returns how many there are. */
int64_t ts_amx_outliers_find(const float *x, int n_tok, int64_t n_in, float clip, ts_amx_outlier *out, int64_t cap);

/* y[t * n_out + r] += o.r * (w_s[r] * Wq[r][o.k]) for each of the n
 * outliers, every row r of the packed act=int8 matrix w (fmaf, in the
 * list's order). -1 with err when w is not act=int8 or an outlier is out of
 * its shape (k >= n_in, t < 0). */
int ts_amx_outliers_add(const void *w, const ts_amx_outlier *o, int64_t n, float *y, ts_err *err);

/* ts_amx_outliers_add's sums bit for bit, for a list in which each token's
 * outliers are in ascending channel order (what ts_amx_outliers_find
 * writes; -1 with err otherwise): the outliers grouped by channel, each
 * channel's column of w read and dequantized once for all its tokens (the
 * per-outlier walk reads a 64-byte line per 16 rows for every outlier,
 * mostly the same lines again), then added to each token's row with the
 * active level's axpy (kernels/fastops.h: fmaf, the same bits). Scratch:
 * idx [n] and start [n_in] int32, col [n_out] floats. */
int ts_amx_outliers_add_grouped(const void *w, const ts_amx_outlier *o, int64_t n, float *y, int32_t *idx,
                                int32_t *start, float *col, ts_err *err);

/* ---- references, for tests ---- */

/* ts_amx_matmul_pt's definition with scalar loops (clip > 0, or <= 0 for
 * the input's amax); *scale as there. */
void ts_amx_ref_int8_pt(const void *w, const float *x, int n_tok, float clip, float *y, float *scale);

/* The INT8 mode's definition computed with scalar loops from the packed
 * matrix (its int8 weights and row scales) and x: y[t * n_out + r]. */
void ts_amx_ref_int8(const void *w, const float *x, int n_tok, float *y);

/* ---- the emulator (tests) ---- */

/* The emulated tile unit of the calling thread: faults (an invalid config,
 * a tile used unconfigured, shapes that do not match) are recorded, not
 * raised: the first since the last call is copied into why (may be NULL)
 * and cleared. true when there was one. */
bool ts_amx_emu_fault(char *why, size_t n);

/* Tile instructions, one call each, on the calling thread's emulated unit
 * or on the hardware (the tests compare the two). cfg: the 64-byte
 * LDTILECFG operand (ts_amx_cfg). */
typedef struct ts_amx_cfg {
    uint8_t b[64];
} ts_amx_cfg;
static inline void ts_amx_cfg_tile(ts_amx_cfg *c, int t, int rows, int colsb) {
    c->b[0] = 1; /* palette 1: 8 tiles of up to 16 rows x 64 bytes */
    c->b[16 + 2 * t] = (uint8_t)colsb;
    c->b[17 + 2 * t] = (uint8_t)(colsb >> 8);
    c->b[48 + t] = (uint8_t)rows;
}
typedef enum ts_amx_op { TS_AMX_DPBSSD, TS_AMX_DPBSUD, TS_AMX_DPBUSD, TS_AMX_DPBUUD, TS_AMX_DPBF16PS } ts_amx_op;
/* Runs: loadconfig(cfg); load tile 0 <- c, 1 <- a, 2 <- b (strides in
 * bytes, the config's rows / bytes each); op(0, 1, 2); store 0 -> c; release. */
void ts_amx_run_one(ts_amx_unit unit, const ts_amx_cfg *cfg, ts_amx_op op, void *c, size_t c_stride, const void *a,
                    size_t a_stride, const void *b, size_t b_stride);

#endif
