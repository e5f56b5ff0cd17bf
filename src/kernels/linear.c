/* linear.c - the fast matmul driver (see linear.h). */
#include "kernels/linear.h"

#include "kernels/block_ops.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/qdot.h"
#include "kernels/repack.h"
#include "quant/quant.h"

#define MAX_MAT 4
#define ITEM_ROWS TS_RP_ROWS /* rows per work item */
#define TOK_BLOCK 32         /* tokens per pass over a chunk's panels */

struct ts_linear_ws {
    int64_t max_n_in;
    int max_tok;
    int n_threads;
    int hi;           /* activation precision of the panel kernels */
    int env_act;      /* TS_ACT named the precision: ts_linear_ws_set_hi leaves it */
    bool k256;        /* at lo, TS_RP_LO256 for calls of K-quants (ts_linear; TS_ACT_K256=0: off) */
    uint8_t *q8;      /* [max_tok][q8_stride] */
    size_t q8_stride;
    uint8_t *q8k;     /* [max_tok][q8k_stride] */
    size_t q8k_stride;
    uint8_t *tiles;   /* ts_rp_tiles_bytes(max_n_in, max_tok) */
    float *ref;       /* [n_threads][max_n_in]: rows for the reference matmul */
};

static void *zalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (p) memset(p, 0, (n + 63) / 64 * 64);
    return p;
}

ts_linear_ws *ts_linear_ws_new(int64_t max_n_in, int max_tok, int n_threads, ts_err *err) {
    ts_linear_ws *ws = calloc(1, sizeof *ws);
    if (!ws || max_n_in < 1 || max_tok < 1 || n_threads < 1) {
        free(ws);
        ts_err_set(err, "linear work space: bad size (n_in %lld, %d tokens, %d threads) or out of memory",
                   (long long)max_n_in, max_tok, n_threads);
        return NULL;
    }
    ws->max_n_in = max_n_in;
    ws->max_tok = max_tok;
    ws->n_threads = n_threads;
    const char *act = getenv("TS_ACT");
    ws->env_act = act && (!strcmp(act, "q8") || !strcmp(act, "exact"));
    ws->hi = !(act && strcmp(act, "q8") == 0);
    const char *k256 = getenv("TS_ACT_K256");
    ws->k256 = !(k256 && !strcmp(k256, "0"));
    const int64_t n32 = (max_n_in + 31) / 32 * 32, n256 = (max_n_in + 255) / 256 * 256;
    ws->q8_stride = ts_act_row_bytes(TS_ACT_Q8, n32);
    ws->q8k_stride = ts_act_row_bytes(TS_ACT_Q8K, n256);
    ws->q8 = zalloc(ws->q8_stride * (size_t)max_tok);
    ws->q8k = zalloc(ws->q8k_stride * (size_t)max_tok);
    ws->tiles = zalloc(ts_rp_tiles_bytes(n32, max_tok, TS_RP_HI));
    ws->ref = zalloc((size_t)n_threads * (size_t)max_n_in * sizeof(float));
    if (!ws->q8 || !ws->q8k || !ws->tiles || !ws->ref) {
        ts_linear_ws_free(ws);
        ts_err_set(err, "out of memory allocating the matmul work space (n_in %lld, %d tokens)", (long long)max_n_in,
                   max_tok);
        return NULL;
    }
    return ws;
}

int ts_linear_ws_hi(const ts_linear_ws *ws) { return ws->hi; }

void ts_linear_ws_set_hi(ts_linear_ws *ws, int hi) {
    if (!ws->env_act) ws->hi = hi != 0;
}

void ts_linear_ws_free(ts_linear_ws *ws) {
    if (!ws) return;
    free(ws->q8);
    free(ws->q8k);
    free(ws->tiles);
    free(ws->ref);
    free(ws);
}

/* ---- packing ---- */

int ts_linear_wants_pack(const ts_wmat *w) {
    return w->data && !w->packed && ts_rp_supported(w->type) && ts_rp_panel_bytes(w->type, w->n_in) &&
           ts_kern_get()->rp_gemm[w->type] != NULL;
}

int ts_linear_can_pack_in_place(const ts_wmat *w) {
    return ts_linear_wants_pack(w) && w->n_out % TS_RP_ROWS == 0 &&
           ts_rp_panel_bytes(w->type, w->n_in) == (size_t)TS_RP_ROWS * w->row_bytes;
}

int ts_linear_pack(const ts_wmat *w, uint8_t *dst, ts_err *err) {
    if (!ts_linear_wants_pack(w)) return -1;
    const size_t pb = ts_rp_panel_bytes(w->type, w->n_in);
    const int in_place = dst == (const uint8_t *)w->data;
    if (in_place && !ts_linear_can_pack_in_place(w))
        return ts_err_set(err, "repack: cannot repack %s [%lld x %lld] in place", ts_type_info(w->type)->name,
                          (long long)w->n_out, (long long)w->n_in);
    /* in place, each panel's rows go through a bounce buffer first (the
     * panel overwrites them); elsewhere they are read where they are */
    uint8_t *bounce = in_place ? malloc(pb) : NULL;
    if (in_place && !bounce) return ts_err_set(err, "out of memory repacking a matrix");
    const uint8_t *src = w->data;
    for (int64_t r0 = 0; r0 < w->n_out; r0 += TS_RP_ROWS) {
        const int nr = w->n_out - r0 < TS_RP_ROWS ? (int)(w->n_out - r0) : TS_RP_ROWS;
        const uint8_t *rows = src + (size_t)r0 * w->row_bytes;
        if (bounce) rows = memcpy(bounce, rows, (size_t)nr * w->row_bytes);
        ts_rp_pack_panel(w->type, w->n_in, rows, w->row_bytes, nr, dst + (size_t)(r0 / TS_RP_ROWS) * pb);
    }
    free(bounce);
    return 0;
}

/* ---- the call ---- */

typedef struct lin_variant lin_variant;

typedef struct {
    const ts_wmat *w;
    float *y;
    const lin_variant *v;
    int64_t item0;       /* first global item of this matrix */
    ts_rp_gemm_fn rp;    /* panels */
    const void *act;     /* rows: activation rows */
    size_t act_stride;   /* bytes */
} mat_job;

typedef struct {
    ts_threadpool *pool;
    const ts_kern *k;
    ts_linear_ws *ws;
    mat_job m[MAX_MAT];
    int n_mat;
    int64_t n_in;
    int n_tok;
    const float *x;
    int need_q8, need_q8k, need_tiles;
    int mode; /* the tiles' precision (repack.h): TS_RP_HI, TS_RP_LO or TS_RP_LO256 */
    ts_rp_quant_fn quant;
} lin_job;

/* ---- the matmul variants ----
 * ts_linear gives each matrix to the first variant of the table below that
 * is available (its features usable at the active level) and supports it.
 * An entry states what its results are tested against and the bound. */
struct lin_variant {
    const char *name;
    ts_cpu_feat needs; /* features it runs on (within ts_cpu_features_active) */
    /* whether it computes w (hi: the work space's activation precision) */
    bool (*supports)(const ts_wmat *w, int hi);
    /* Sets mj up (kernel, activation buffers; flags what j must quantize).
     * Returns 1 when mj joins the shared row region (run then computes its
     * items), 0 when the matrix was computed already. */
    int (*setup)(lin_job *j, mat_job *mj);
    /* rows [r0, r1) of mj (r0 a multiple of 16), every token */
    void (*run)(const lin_job *j, const mat_job *mj, int64_t r0, int64_t r1);
    const char *reference; /* what its results are tested against */
    const char *bound;     /* ... within this */
};

/* "panels": the repacked matrix (w->packed): panel x tiles of up to 8
 * tokens, in token blocks of 32, so that the block's tiles stay in L2
 * beside the panel while each panel is read once per block: a thread's
 * panels of one matrix (<= ~4 MiB on the 1-1.5B models) come back from
 * L3. Blocks of 64 left the tiles of the wide down projection (8960 inputs,
 * 1.1 MiB at 8-bit) competing with the panels in L2: pp512 of Qwen2.5 1.5B
 * q8 went 183 -> 189 t/s with 32, 190 with 16 (docs/PERFORMANCE.md). The
 * level's fast panel kernel, or the scalar definition where the level has
 * none. */
static bool panels_supports(const ts_wmat *w, int hi) {
    (void)hi;
    return w->packed != NULL;
}

static int panels_setup(lin_job *j, mat_job *mj) {
    const uint32_t t = mj->w->type;
    mj->rp = j->k->rp_gemm[t] ? j->k->rp_gemm[t] : ts_rp_gemm_ref(t);
    j->need_tiles = 1;
    return 1;
}

static void panels_run(const lin_job *j, const mat_job *mj, int64_t r0, int64_t r1) {
    const ts_wmat *w = mj->w;
    const size_t pb = ts_rp_panel_bytes(w->type, w->n_in);
    const int64_t ys = w->n_out;
    for (int tb = 0; tb < j->n_tok; tb += TOK_BLOCK) {
        const int te = j->n_tok - tb < TOK_BLOCK ? j->n_tok : tb + TOK_BLOCK;
        for (int64_t r = r0; r < r1; r += TS_RP_ROWS) {
            const uint8_t *panel = w->packed + (size_t)(r / TS_RP_ROWS) * pb;
            const int nr = r1 - r < TS_RP_ROWS ? (int)(r1 - r) : TS_RP_ROWS;
            for (int t = tb; t < te; t += TS_RP_TT) {
                const int nt = te - t < TS_RP_TT ? te - t : TS_RP_TT;
                const uint8_t *tile = j->ws->tiles + ts_rp_tile_offset(w->n_in, t, j->mode);
                mj->rp(w->n_in, panel, tile, nt, j->mode, mj->y + (int64_t)t * ys + r, ys, nr);
            }
        }
    }
}

/* "rows": the stored GGUF rows on the level's dot kernels (ts_qgemm;
 * ts_qgemv for one token): F32 / F16 on f32 activations; the other types
 * with a dot kernel (Q5_0, K-quants, ...) on 8-bit activations, at the lo
 * precision only (their kernels take nothing finer). */
static bool rows_supports(const ts_wmat *w, int hi) {
    return ts_qdot_check(w->type, w->n_in, NULL) == 0 && (!hi || ts_qdot_act_type(w->type) == TS_ACT_F32);
}

static int rows_setup(lin_job *j, mat_job *mj) {
    ts_linear_ws *ws = j->ws;
    switch (ts_qdot_act_type(mj->w->type)) {
    case TS_ACT_Q8:
        j->need_q8 = 1;
        mj->act = ws->q8;
        mj->act_stride = ws->q8_stride;
        break;
    case TS_ACT_Q8K:
        j->need_q8k = 1;
        mj->act = ws->q8k;
        mj->act_stride = ws->q8k_stride;
        break;
    default:
        mj->act = j->x;
        mj->act_stride = (size_t)mj->w->n_in * sizeof(float);
        break;
    }
    return 1;
}

static void rows_run(const lin_job *j, const mat_job *mj, int64_t r0, int64_t r1) {
    const ts_wmat *w = mj->w;
    if (j->n_tok == 1)
        ts_qgemv(j->k, w->type, w->data, w->row_bytes, w->n_in, mj->act, mj->y, r0, r1);
    else
        ts_qgemm(j->k, w->type, w->data, w->row_bytes, w->n_in, mj->act, mj->act_stride, j->n_tok, mj->y, w->n_out,
                 r0, r1);
}

/* "ref": anything else (BF16, odd row lengths, and at the hi precision the
 * types whose dot kernels take 8-bit activations only): the f32 reference
 * ts_matmul, in its own parallel region, before the shared one. */
static bool ref_supports(const ts_wmat *w, int hi) {
    (void)w;
    (void)hi;
    return true;
}

static int ref_setup(lin_job *j, mat_job *mj) {
    const ts_wmat *w = mj->w;
    ts_matmul(j->pool, w, j->x, w->n_in, mj->y, w->n_out, j->n_tok, j->ws->ref, j->ws->max_n_in);
    return 0;
}

static const lin_variant variants[] = {
    /* AMX tiles are not a variant here: they are the `amx` engine
     * (src/engine/amx, kernels in kernels/amx/), a device the prefill is
     * placed on, so that one-token decode keeps these kernels and the
     * tile unit's packed copy lives in that engine's window. Its act=exact
     * mode computes this definition bit for bit. */
    {"panels", 0, panels_supports, panels_setup, panels_run,
     "ts_rp_gemm_ref, the scalar definition of kernels/repack.h (tests/test_rp_gemm.c, test_perf_kernels.c)",
     "bit-identical at every level; hi precision: logits within ~1e-3 of the f32 reference "
     "(docs/FIDELITY.md)"},
    /* slot: "int8_outliers" - INT8 weights with the outlier columns kept in
     * f16 (LLM.int8()-style; needs nothing beyond the level's dot kernels):
     * supports only matrices stored in that format; reference: the f32 dot
     * of the dequantized row, with its own stated bound. */
    {"rows", 0, rows_supports, rows_setup, rows_run,
     "the scalar dot table ts_kern_tab_scalar (ref/qdot_ref.c; tests/test_kernels.c, test_perf_kernels.c)",
     "2 (K + 8) u M of the scalar reference (tests/test_kernels.c); GEMM = GEMV bit for bit; "
     "bit-identical between AVX2 and AVX-512"},
    {"ref", 0, ref_supports, ref_setup, NULL,
     "itself: ts_matmul, f32 dots of the dequantized rows (ref/matmul.c)", "the definition (exact)"},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

static bool variant_available(const lin_variant *v) {
    return (v->needs & ~ts_cpu_features_active()) == 0;
}

/* the variant ts_linear gives w to ("ref" supports everything) */
static const lin_variant *pick(const ts_wmat *w, int hi) {
    for (int i = 0; i < N_VARIANTS; i++)
        if (variant_available(&variants[i]) && variants[i].supports(w, hi)) return &variants[i];
    return &variants[N_VARIANTS - 1];
}

int ts_linear_variants(const char **names, bool *available, int cap) {
    for (int i = 0; i < N_VARIANTS && i < cap; i++) {
        if (names) names[i] = variants[i].name;
        if (available) available[i] = variant_available(&variants[i]);
    }
    return N_VARIANTS;
}

int ts_linear_variant_doc(int i, const char **reference, const char **bound) {
    if (i < 0 || i >= N_VARIANTS) return -1;
    if (reference) *reference = variants[i].reference;
    if (bound) *bound = variants[i].bound;
    return 0;
}

const char *ts_linear_variant_for(const ts_linear_ws *ws, const ts_wmat *w) {
    return pick(w, ws->hi)->name;
}

static void prep_tokens(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const lin_job *j = ctx;
    const ts_linear_ws *ws = j->ws;
    for (int64_t t = t0; t < t1; t++) {
        const float *xt = j->x + t * j->n_in;
        if (j->need_tiles) {
            const int t0 = (int)t / TS_RP_TT * TS_RP_TT;
            const int nt = j->n_tok - t0 < TS_RP_TT ? j->n_tok - t0 : TS_RP_TT;
            j->quant(xt, j->n_in, j->mode, ws->tiles + ts_rp_tile_offset(j->n_in, t0, j->mode), nt, (int)t - t0);
        }
        if (j->need_q8) ts_act_quantize(j->k, TS_ACT_Q8, xt, ws->q8 + (size_t)t * ws->q8_stride, j->n_in);
        if (j->need_q8k) ts_act_quantize(j->k, TS_ACT_Q8K, xt, ws->q8k + (size_t)t * ws->q8k_stride, j->n_in);
    }
}

static void run_items(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const lin_job *j = ctx;
    for (int mi = 0; mi < j->n_mat && i0 < i1; mi++) {
        const mat_job *mj = &j->m[mi];
        const int64_t n_items = (mj->w->n_out + ITEM_ROWS - 1) / ITEM_ROWS;
        const int64_t a = i0 - mj->item0, b = i1 - mj->item0;
        if (a >= n_items) continue;
        const int64_t e = b < n_items ? b : n_items;
        const int64_t r0 = a * ITEM_ROWS, r1 = e * ITEM_ROWS < mj->w->n_out ? e * ITEM_ROWS : mj->w->n_out;
        mj->v->run(j, mj, r0, r1);
        i0 = mj->item0 + e;
    }
}

void ts_linear(ts_threadpool *pool, ts_linear_ws *ws, int n_mat, const ts_wmat *const *w, float *const *y,
               const float *x, int n_tok) {
    lin_job j = {.pool = pool, .k = ts_kern_get(), .ws = ws, .n_in = w[0]->n_in, .n_tok = n_tok, .x = x};
    j.quant = j.k->rp_quant ? j.k->rp_quant : ts_rp_quant_ref;
    int64_t n_items = 0;
    for (int i = 0; i < n_mat && i < MAX_MAT; i++) {
        mat_job *mj = &j.m[j.n_mat];
        *mj = (mat_job){.w = w[i], .y = y[i], .v = pick(w[i], ws->hi)};
        if (!mj->v->setup(&j, mj)) continue; /* computed in its own region */
        mj->item0 = n_items;
        n_items += (w[i]->n_out + ITEM_ROWS - 1) / ITEM_ROWS;
        j.n_mat++;
    }
    if (!j.n_mat) return;
    /* lo256 when every matrix reading the tiles is a K-quant: per-32 scales
     * that differ by powers of two within a super-block, so that their
     * kernels shift each block's integers (free) and multiply by the scale
     * once per super-block instead of once per 32-block (repack.h). On
     * Qwen2.5 1.5B q8 pp512 +5-8%; mean KLD from the exact mode 0.0011 ->
     * 0.0016, where llama.cpp's is 0.0040 (docs/FIDELITY.md). TS_ACT_K256=0
     * keeps arbitrary per-32 scales. */
    bool k256 = ws->k256 && !ws->hi;
    for (int i = 0; i < j.n_mat; i++) k256 = k256 && (!j.m[i].rp || ts_rp_is_k(j.m[i].w->type));
    j.mode = ws->hi ? TS_RP_HI : k256 ? TS_RP_LO256 : TS_RP_LO;

    if (j.need_q8 || j.need_q8k || j.need_tiles) {
        if (n_tok >= 4)
            ts_parallel_for_grain(pool, n_tok, 1, prep_tokens, &j);
        else
            prep_tokens(&j, 0, n_tok, 0);
    }
    /* Chunks: with a batch, ~16 per thread keep the tail short when one
     * thread is slowed by another process. A single token (decode) streams
     * each weight once, and every chunk restarts the memory stream; two
     * chunks per thread read faster (1B Q4_0 decode 64.7 -> 72 t/s, 135M
     * 318 -> 409) and were no slower beside a busy process
     * (docs/PERFORMANCE.md). One item is 16 rows, too little to amortise the
     * atomic, hence the floor of 4 items for a single token. */
    const int nt = ts_threadpool_n_threads(pool);
    int64_t grain = n_items / ((n_tok == 1 ? 2 : 16) * (int64_t)nt);
    if (grain < (n_tok == 1 ? 4 : 1)) grain = n_tok == 1 ? 4 : 1;
    ts_parallel_for_grain(pool, n_items, grain, run_items, &j);
}

/* ---- the grouped expert matmul ---- */

void ts_moe_linear(ts_threadpool *pool, ts_linear_ws *ws, const ts_wmat *experts, int n_expert,
                   const int64_t *offsets, const ts_moe_pair *pairs, const float *route_w, int k,
                   const float *x, int64_t x_stride, bool x_by_pair, float *y, int64_t y_stride, bool y_by_pair,
                   float *gx, float *gy) {
    for (int e = 0; e < n_expert; e++) {
        const int64_t p0 = offsets[e], p1 = offsets[e + 1];
        if (p0 == p1) continue;
        const ts_wmat *w = &experts[e];
        const int64_t n_in = w->n_in, n_out = w->n_out;
        for (int64_t p = p0; p < p1; p++) {
            const int64_t src = x_by_pair ? p : (int64_t)pairs[p].tok;
            memcpy(gx + (p - p0) * n_in, x + src * x_stride, (size_t)n_in * sizeof(float));
        }
        const ts_wmat *wl[1] = {w};
        float *yl[1] = {gy};
        ts_linear(pool, ws, 1, wl, yl, gx, (int)(p1 - p0));
        for (int64_t p = p0; p < p1; p++) {
            const ts_moe_pair pr = pairs[p];
            const float rw = route_w ? route_w[(int64_t)pr.tok * k + pr.slot] : 1.0f;
            float *yr = y + (y_by_pair ? p : (int64_t)pr.tok) * y_stride;
            const float *g = gy + (p - p0) * n_out;
            for (int64_t r = 0; r < n_out; r++) yr[r] += rw * g[r];
        }
    }
}
