/* fastops.c - drivers of the fast attention and SwiGLU / GeGLU (fastops.h): work
 * split over the pool, per-level kernel from the dispatch table. */
#include "kernels/fastops.h"

#include <pthread.h>

#include "kernels/cpu.h"

int64_t ts_attention_fast_scratch(const ts_attn_params *ap) {
    const int64_t hd = ap->head_dim, group = ap->n_head / ap->n_head_kv;
    /* the wider items of the non-causal MHA mode have group 1: sized for
     * both whatever ap's n_kv, since callers size scratch before they know it */
    const int64_t rows = TS_ATTN_QB * group > TS_ATTN_QB_FULL ? TS_ATTN_QB * group : TS_ATTN_QB_FULL;
    return 2 * hd * TS_ATTN_KT + TS_ATTN_G * TS_ATTN_KT + rows * (hd + 2) + hd;
}

typedef struct {
    ts_attn_job job;
    ts_attn_block_fn fn;
    int n_blocks;            /* query blocks */
    int qb;                  /* tokens per block */
    float *scratch;
    int64_t scratch_stride;
} attn_ctx;

/* item i: query block i / n_head_kv, KV head i % n_head_kv; the blocks are
 * taken last first, so the longest (most keys) start first */
static void attn_items(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_ctx *c = ctx;
    const int n_kv = c->job.ap->n_head_kv;
    for (int64_t i = i0; i < i1; i++) {
        const int blk = c->n_blocks - 1 - (int)(i / n_kv), kvh = (int)(i % n_kv);
        const int t0 = blk * c->qb, t1 = t0 + c->qb < c->job.n_tok ? t0 + c->qb : c->job.n_tok;
        c->fn(&c->job, kvh, t0, t1, c->scratch + (int64_t)tid * c->scratch_stride);
    }
}

void ts_attention_fast(ts_threadpool *pool, const ts_attn_params *ap, const float *q, const void *k_cache,
                       const void *v_cache, int64_t pos0, int n_tok, float *out, float *scratch,
                       int64_t scratch_stride) {
    const ts_kern *k = ts_kern_get();
    const int qb = ap->n_kv > 0 && ap->n_head == ap->n_head_kv ? TS_ATTN_QB_FULL : TS_ATTN_QB;
    attn_ctx c = {{ap, q, k_cache, v_cache, pos0, n_tok, out}, k->attn_block ? k->attn_block : ts_attn_block_generic,
                  (n_tok + qb - 1) / qb, qb, scratch, scratch_stride};
    ts_parallel_for_grain(pool, (int64_t)c.n_blocks * ap->n_head_kv, 1, attn_items, &c);
}

typedef struct {
    ts_glu_fn fn;
    float *out;
    const float *gate, *up;
} glu_ctx;

static void glu_part(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const glu_ctx *c = ctx;
    c->fn(c->out + b, c->gate + b, c->up + b, e - b);
}

static void glu_run(ts_threadpool *pool, ts_glu_fn fn, float *out, const float *gate, const float *up, int64_t n) {
    glu_ctx c = {fn, out, gate, up};
    /* below ~16k values the hand-off costs more than it saves */
    if (n < 16384)
        glu_part(&c, 0, n, 0);
    else
        ts_parallel_for_grain(pool, n, 4096, glu_part, &c);
}

void ts_swiglu_fast(ts_threadpool *pool, float *out, const float *gate, const float *up, int64_t n) {
    const ts_kern *k = ts_kern_get();
    glu_run(pool, k->swiglu ? k->swiglu : ts_swiglu_generic, out, gate, up, n);
}

void ts_geglu_fast(ts_threadpool *pool, float *out, const float *gate, const float *up, int64_t n) {
    const ts_kern *k = ts_kern_get();
    glu_run(pool, k->geglu ? k->geglu : ts_geglu_generic, out, gate, up, n);
}

#define GELU_ONES 4096
static float gelu_ones[GELU_ONES]; /* up = 1: filled once, read only after */
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;
static void gelu_fill(void) {
    for (int i = 0; i < GELU_ONES; i++)
        gelu_ones[i] = 1.0f;
}

typedef struct {
    ts_glu_fn fn;
    float *out;
    const float *x;
    int64_t n;
} gelu_ctx;

static void gelu_part(void *ctx, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const gelu_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        const int64_t a = ch * GELU_ONES, len = a + GELU_ONES < c->n ? GELU_ONES : c->n - a;
        c->fn(c->out + a, c->x + a, gelu_ones, len);
    }
}

void ts_gelu_fast(ts_threadpool *pool, float *out, const float *x, int64_t n) {
    pthread_once(&gelu_once, gelu_fill);
    const ts_kern *k = ts_kern_get();
    gelu_ctx c = {k->geglu ? k->geglu : ts_geglu_generic, out, x, n};
    const int64_t chunks = (n + GELU_ONES - 1) / GELU_ONES;
    if (n < 16384)
        gelu_part(&c, 0, chunks, 0);
    else
        ts_parallel_for_grain(pool, chunks, 1, gelu_part, &c);
}

void ts_glu(ts_threadpool *pool, bool gelu, bool fast, float *out, const float *gate, const float *up, int64_t n) {
    if (fast)
        (gelu ? ts_geglu_fast : ts_swiglu_fast)(pool, out, gate, up, n);
    else
        (gelu ? ts_geglu_tanh_f32 : ts_swiglu_f32)(out, gate, up, n);
}
