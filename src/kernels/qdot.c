/* qdot.c - the generic drivers of the dot kernels: the activation format of
 * each weight type, the argument check, and the GEMV / batched GEMM loops
 * that call a dispatch table's per-row kernels. No ISA code here. */
#include <string.h>

#include "kernels/qdot_impl.h"
#include "quant/quant.h"

ts_act_type ts_qdot_act_type(uint32_t type) {
    switch (type) {
    case TS_TYPE_Q2_K:
    case TS_TYPE_Q3_K:
    case TS_TYPE_Q4_K:
    case TS_TYPE_Q5_K:
    case TS_TYPE_Q6_K: return TS_ACT_Q8K;
    case TS_TYPE_F32:
    case TS_TYPE_F16:
    case TS_TYPE_BF16: return TS_ACT_F32;
    default: return TS_ACT_Q8;
    }
}

static int64_t act_block(ts_act_type a) {
    return a == TS_ACT_Q8K ? TS_ACT_Q8K_BLOCK : a == TS_ACT_Q8 ? TS_ACT_Q8_BLOCK : 1;
}

int ts_qdot_check(uint32_t type, int64_t n, ts_err *err) {
    const ts_type_traits *t = ts_type_info(type);
    if (!t) return ts_err_set(err, "matmul: unknown weight type id %u", type);
    /* every level supports the same set of types (tests/test_kernels.c) */
    if (!ts_kern_tab_scalar.dot[type]) return ts_err_set(err, "matmul: weight type %s has no dot kernel", t->name);
    const int64_t blk = act_block(ts_qdot_act_type(type));
    if (n <= 0 || n % blk)
        return ts_err_set(err, "matmul: %s row length %lld is not a positive multiple of %lld", t->name,
                          (long long)n, (long long)blk);
    return 0;
}

size_t ts_act_row_bytes(ts_act_type a, int64_t n) {
    switch (a) {
    case TS_ACT_Q8: return (size_t)(n / TS_ACT_Q8_BLOCK) * TS_ACT_Q8_BYTES;
    case TS_ACT_Q8K: return (size_t)(n / TS_ACT_Q8K_BLOCK) * TS_ACT_Q8K_BYTES;
    default: return (size_t)n * sizeof(float);
    }
}

void ts_act_quantize(const ts_kern *k, ts_act_type a, const float *x, void *dst, int64_t n) {
    switch (a) {
    case TS_ACT_Q8: k->quant_q8(x, dst, n); break;
    case TS_ACT_Q8K: k->quant_q8k(x, dst, n); break;
    default:
        if (n > 0) memcpy(dst, x, (size_t)n * sizeof(float));
        break;
    }
}

void ts_qgemv(const ts_kern *k, uint32_t type, const void *w, size_t row_bytes, int64_t n, const void *x,
              float *y, int64_t r0, int64_t r1) {
    const ts_dot_fn dot = k->dot[type];
    const uint8_t *wr = (const uint8_t *)w + (size_t)r0 * row_bytes;
    for (int64_t r = r0; r < r1; r++, wr += row_bytes) y[r] = dot(n, wr, x);
}

/* Tokens per pass over the row range: their activation rows (64 x ~2.3 KB
 * for n = 2048 in Q8) stay in L2 while each weight row is read once per pass
 * and reused from L1 by the 4-token groups. */
#define GEMM_TOKEN_BLOCK 64

void ts_qgemm(const ts_kern *k, uint32_t type, const void *w, size_t row_bytes, int64_t n, const void *x,
              size_t x_stride, int n_tok, float *y, int64_t y_stride, int64_t r0, int64_t r1) {
    const ts_dot_fn dot = k->dot[type];
    const ts_dot4_fn dot4 = k->dot4[type];
    const ts_dot44_fn dot44 = k->dot44[type];
    const uint8_t *xb = x;
    for (int t0 = 0; t0 < n_tok; t0 += GEMM_TOKEN_BLOCK) {
        const int t1 = n_tok - t0 > GEMM_TOKEN_BLOCK ? t0 + GEMM_TOKEN_BLOCK : n_tok;
        const uint8_t *wr = (const uint8_t *)w + (size_t)r0 * row_bytes;
        int64_t r = r0;
        if (dot44)
            for (; r + 4 <= r1; r += 4, wr += 4 * row_bytes) {
                int t = t0;
                for (; t + 4 <= t1; t += 4) {
                    const void *xs[4] = {xb + (size_t)t * x_stride, xb + (size_t)(t + 1) * x_stride,
                                         xb + (size_t)(t + 2) * x_stride, xb + (size_t)(t + 3) * x_stride};
                    float o[4][4];
                    dot44(n, wr, row_bytes, xs, o);
                    for (int i = 0; i < 4; i++)
                        for (int q = 0; q < 4; q++) y[(int64_t)(t + q) * y_stride + r + i] = o[i][q];
                }
                for (; t < t1; t++)
                    for (int i = 0; i < 4; i++)
                        y[(int64_t)t * y_stride + r + i] = dot(n, wr + (size_t)i * row_bytes, xb + (size_t)t * x_stride);
            }
        for (; r < r1; r++, wr += row_bytes) {
            int t = t0;
            for (; t + 4 <= t1; t += 4) {
                const void *xs[4] = {xb + (size_t)t * x_stride, xb + (size_t)(t + 1) * x_stride,
                                     xb + (size_t)(t + 2) * x_stride, xb + (size_t)(t + 3) * x_stride};
                float o[4];
                dot4(n, wr, xs, o);
                for (int i = 0; i < 4; i++) y[(int64_t)(t + i) * y_stride + r] = o[i];
            }
            for (; t < t1; t++) y[(int64_t)t * y_stride + r] = dot(n, wr, xb + (size_t)t * x_stride);
        }
    }
}
