/* matmul.c - reference matmul of a batch of f32 activations by a weight
 * matrix in its stored type. Each weight row is dequantized once into a
 * per-thread scratch row and dotted with every token of the batch, so the
 * weight bytes are read once per batch and a token's result is the same
 * whatever the batch size (the dot order never depends on it). */
#include <string.h>

#include "kernels/ops.h"
#include "kernels/repack.h"
#include "quant/quant.h"

float ts_dot_f32(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void ts_wmat_row(const ts_wmat *w, int64_t r, float *dst) {
    if (w->packed) { /* the same values from the panels (kernels/repack.h) */
        ts_rp_row(w->type, w->n_in, w->packed, r, dst);
        return;
    }
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    if (w->type == TS_TYPE_F32) {
        memcpy(dst, row, (size_t)w->n_in * sizeof(float));
    } else {
        /* The type and row length were validated when the model was bound,
         * so this cannot fail. */
        (void)ts_dequant_row(w->type, row, dst, w->n_in, NULL);
    }
}

typedef struct {
    const ts_wmat *w;
    const float *x;
    int64_t x_stride;
    float *y;
    int64_t y_stride;
    int n_tok;
    float *scratch;
    int64_t scratch_stride;
} matmul_job;

static void matmul_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    const matmul_job *j = ctx;
    const ts_wmat *w = j->w;
    float *buf = j->scratch + (int64_t)tid * j->scratch_stride;
    const int direct = !w->packed && w->type == TS_TYPE_F32 && ((uintptr_t)w->data % sizeof(float)) == 0 &&
                       (w->row_bytes % sizeof(float)) == 0;
    for (int64_t r = r0; r < r1; r++) {
        const float *wr;
        if (direct) {
            wr = (const float *)((const uint8_t *)w->data + (size_t)r * w->row_bytes);
        } else {
            ts_wmat_row(w, r, buf);
            wr = buf;
        }
        for (int t = 0; t < j->n_tok; t++) j->y[t * j->y_stride + r] = ts_dot_f32(wr, j->x + t * j->x_stride, w->n_in);
    }
}

void ts_matmul(ts_threadpool *pool, const ts_wmat *w, const float *x, int64_t x_stride, float *y,
               int64_t y_stride, int n_tok, float *scratch, int64_t scratch_stride) {
    matmul_job j = {w, x, x_stride, y, y_stride, n_tok, scratch, scratch_stride};
    ts_parallel_for(pool, w->n_out, matmul_rows, &j);
}
