/* engine_test_util.h - shared by the engine tests (test_engine.c,
 * test_engine_opencl.c): checks, deterministic data, a toy transformer
 * (random weights in chosen types), the CPU reference of its layers written
 * the way src/model/forward.c runs its stages (the same kernel calls in the
 * same order), and a harness that runs it through ts_rt_layers on a
 * device with the sub-width tail on the CPU, as the forward will.
 */
#ifndef TS_TEST_ENGINE_UTIL_H
#define TS_TEST_ENGINE_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "runtime/block.h"
#include "runtime/convert.h"
#include "runtime/layers.h"
#include "kernels/linear.h"
#include "kernels/repack.h"
#include "kernels/ops.h"
#include "quant/quant.h"

static int g_fail;
#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            g_fail++; \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
        } \
    } while (0)
#define NEED(ptr, err) \
    do { \
        if (!(ptr)) { \
            fprintf(stderr, "FATAL %s:%d: %s\n", __FILE__, __LINE__, (err).msg); \
            exit(1); \
        } \
    } while (0)

static uint64_t t_rng = 88172645463325252ull;
static uint64_t t_next(void) {
    t_rng ^= t_rng << 13;
    t_rng ^= t_rng >> 7;
    t_rng ^= t_rng << 17;
    return t_rng;
}
static float t_unif(void) { return (float)((double)(t_next() >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }
static void t_fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++)
        x[i] = t_unif() * scale;
}
static void *t_alloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, n);
    return p;
}

/* A weight matrix in its stored type, rows random in [-scale, scale]. */
typedef struct t_mat {
    uint32_t type;
    int64_t n_in, n_out;
    size_t rb;
    uint8_t *rows;   /* GGUF rows */
    uint8_t *panels; /* CPU panels, when packed */
} t_mat;

static t_mat t_mat_new(uint32_t type, int64_t n_in, int64_t n_out, float scale, int pack) {
    t_mat m = {.type = type, .n_in = n_in, .n_out = n_out, .rb = ts_row_size(type, n_in)};
    m.rows = t_alloc(m.rb * (size_t)n_out);
    float *tmp = t_alloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) {
        t_fill(tmp, n_in, scale);
        if (ts_quant_row(type, tmp, m.rows + (size_t)r * m.rb, n_in, NULL)) {
            fprintf(stderr, "cannot quantize to type %u\n", type);
            exit(1);
        }
    }
    free(tmp);
    if (pack) {
        ts_wmat w = {.type = type, .data = m.rows, .n_in = n_in, .n_out = n_out, .row_bytes = m.rb};
        if (ts_linear_wants_pack(&w)) {
            m.panels = t_alloc(ts_rp_matrix_bytes(type, n_in, n_out));
            if (ts_linear_pack(&w, m.panels, NULL)) {
                free(m.panels);
                m.panels = NULL;
            }
        }
    }
    return m;
}

static ts_wmat t_wmat(const t_mat *m) {
    ts_wmat w = {.type = m->type,
                 .data = m->panels ? m->panels : m->rows,
                 .n_in = m->n_in,
                 .n_out = m->n_out,
                 .row_bytes = m->rb,
                 .packed = m->panels};
    return w;
}

/* ---- the toy model ---- */

typedef struct t_layer {
    ts_rt_block_shape s;
    float *attn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *attn_post_norm, *ffn_norm, *ffn_post_norm;
    t_mat wq, wk, wv, wo, wg, wu, wd;
    double *inv_freq;
    uint8_t *freq; /* ts_eng_rope_freq_pack */
} t_layer;

#define T_MAX_LAYERS 8
typedef struct t_model {
    int n_layer;
    t_layer L[T_MAX_LAYERS];
} t_model;

/* types: wq wk wv wo gate up down */
static void t_model_init(t_model *m, const ts_rt_block_shape *shapes, int n_layer, const uint32_t types[7], int pack) {
    memset(m, 0, sizeof *m);
    m->n_layer = n_layer;
    for (int l = 0; l < n_layer; l++) {
        t_layer *L = &m->L[l];
        L->s = shapes[l];
        const ts_rt_block_shape *s = &L->s;
        const int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim, KD = (int64_t)s->n_head_kv * s->head_dim,
                      F = s->n_ff, hd = s->head_dim;
#define VEC(p, n, base) \
    do { \
        (p) = t_alloc((size_t)(n) * sizeof(float)); \
        for (int64_t i_ = 0; i_ < (n); i_++) \
            (p)[i_] = (base) + 0.25f * t_unif(); \
    } while (0)
        VEC(L->attn_norm, E, 1.0f);
        VEC(L->ffn_norm, E, 1.0f);
        if (s->qkv_bias) {
            VEC(L->bq, QD, 0.0f);
            VEC(L->bk, KD, 0.0f);
            VEC(L->bv, KD, 0.0f);
        }
        if (s->qk_norm) {
            VEC(L->q_norm, hd, 1.0f);
            VEC(L->k_norm, hd, 1.0f);
        }
        if (s->post_norms) {
            VEC(L->attn_post_norm, E, 1.0f);
            VEC(L->ffn_post_norm, E, 1.0f);
        }
#undef VEC
        L->wq = t_mat_new(types[0], E, QD, 0.5f, pack);
        L->wk = t_mat_new(types[1], E, KD, 0.5f, pack);
        L->wv = t_mat_new(types[2], E, KD, 0.5f, pack);
        L->wo = t_mat_new(types[3], QD, E, 0.3f, pack);
        L->wg = t_mat_new(types[4], E, F, 0.3f, pack);
        L->wu = t_mat_new(types[5], E, F, 0.3f, pack);
        L->wd = t_mat_new(types[6], F, E, 0.3f, pack);
        L->inv_freq = t_alloc((size_t)s->n_rot / 2 * sizeof(double));
        ts_rope_inv_freq(L->inv_freq, s->n_rot, l % 2 ? 10000.0 : 1000000.0, 1.0, NULL, NULL);
        L->freq = t_alloc(ts_eng_rope_freq_bytes(s->n_rot));
        ts_eng_rope_freq_pack(L->inv_freq, s->n_rot, L->freq);
    }
}

static void t_mat_free(t_mat *m) {
    free(m->rows);
    free(m->panels);
}

static void t_model_free(t_model *m) {
    for (int l = 0; l < m->n_layer; l++) {
        t_layer *L = &m->L[l];
        free(L->attn_norm), free(L->bq), free(L->bk), free(L->bv), free(L->q_norm), free(L->k_norm);
        free(L->attn_post_norm), free(L->ffn_norm), free(L->ffn_post_norm), free(L->inv_freq), free(L->freq);
        t_mat_free(&L->wq), t_mat_free(&L->wk), t_mat_free(&L->wv), t_mat_free(&L->wo);
        t_mat_free(&L->wg), t_mat_free(&L->wu), t_mat_free(&L->wd);
    }
}

/* ---- buffers of one "state": activations for `rows` tokens, KV cache ---- */

typedef struct t_state {
    int rows;
    float *act[TS_LS_N_ACT]; /* the dense block's (X .. UP); the MoE slots stay NULL */
    uint16_t *kc, *vc; /* f16 caches [n_layer][n_ctx][KD] */
    uint64_t kv_layer_bytes;
    ts_threadpool *pool;
    ts_linear_ws *ws;
    float *scratch;
    int64_t stride;
    float *cs;
} t_state;

static void t_state_init(t_state *st, const t_model *m, int rows) {
    const ts_rt_block_shape *s = &m->L[0].s;
    const int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim, KD = (int64_t)s->n_head_kv * s->head_dim,
                  F = s->n_ff;
    const int64_t w[TS_LS_ROUTER] = {E, E, QD, KD, KD, QD, E, F, F};
    memset(st, 0, sizeof *st);
    st->rows = rows;
    for (int i = 0; i < TS_LS_ROUTER; i++)
        st->act[i] = t_alloc((size_t)(w[i] * rows) * sizeof(float));
    st->kv_layer_bytes = (uint64_t)s->n_ctx * (uint64_t)KD * 2;
    st->kc = t_alloc((size_t)st->kv_layer_bytes * (size_t)m->n_layer);
    st->vc = t_alloc((size_t)st->kv_layer_bytes * (size_t)m->n_layer);
    ts_err err = {{0}};
    st->pool = ts_threadpool_new(1, &err);
    NEED(st->pool, err);
    st->ws = ts_linear_ws_new(F > E ? F : E, rows, 1, &err);
    NEED(st->ws, err);
    st->stride = ((int64_t)s->n_ctx + 2 * s->head_dim + 15) & ~(int64_t)15;
    st->scratch = t_alloc((size_t)st->stride * sizeof(float));
    st->cs = t_alloc((size_t)s->head_dim * sizeof(float));
}

static void t_state_free(t_state *st) {
    for (int i = 0; i < TS_LS_N_ACT; i++)
        free(st->act[i]);
    free(st->kc), free(st->vc), free(st->scratch), free(st->cs);
    ts_linear_ws_free(st->ws);
    ts_threadpool_free(st->pool);
}

/* The reference: the forward's stages with the CPU kernels, over nb tokens
 * at pos0, in st's buffers. */
static void t_ref_mm(t_state *st, const t_mat *m, const float *x, float *y, int nb) {
    const ts_wmat w = t_wmat(m);
    const ts_wmat *wl[1] = {&w};
    float *yl[1] = {y};
    ts_linear(st->pool, st->ws, 1, wl, yl, x, nb);
}

static void t_ref_norm(float *dst, const float *src, const float *w, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++)
        ts_rmsnorm_f32(dst + r * n, src + r * n, w, n, eps);
}

static void t_ref_layers(const t_model *m, t_state *st, int64_t pos0, int nb) {
    float **a = st->act;
    for (int l = 0; l < m->n_layer; l++) {
        const t_layer *L = &m->L[l];
        const ts_rt_block_shape *s = &L->s;
        const int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim, KD = (int64_t)s->n_head_kv * s->head_dim,
                      F = s->n_ff;
        t_ref_norm(a[TS_LS_XN], a[TS_LS_X], L->attn_norm, E, nb, s->eps);
        t_ref_mm(st, &L->wq, a[TS_LS_XN], a[TS_LS_Q], nb);
        t_ref_mm(st, &L->wk, a[TS_LS_XN], a[TS_LS_K], nb);
        t_ref_mm(st, &L->wv, a[TS_LS_XN], a[TS_LS_V], nb);
        if (s->qkv_bias)
            for (int t = 0; t < nb; t++) {
                for (int64_t i = 0; i < QD; i++)
                    a[TS_LS_Q][t * QD + i] += L->bq[i];
                for (int64_t i = 0; i < KD; i++)
                    a[TS_LS_K][t * KD + i] += L->bk[i];
                for (int64_t i = 0; i < KD; i++)
                    a[TS_LS_V][t * KD + i] += L->bv[i];
            }
        if (s->qk_norm) {
            t_ref_norm(a[TS_LS_Q], a[TS_LS_Q], L->q_norm, s->head_dim, (int64_t)nb * s->n_head, s->eps);
            t_ref_norm(a[TS_LS_K], a[TS_LS_K], L->k_norm, s->head_dim, (int64_t)nb * s->n_head_kv, s->eps);
        }
        for (int t = 0; t < nb; t++) {
            ts_rope_f32(a[TS_LS_Q] + t * QD, s->n_head, s->head_dim, s->n_rot, s->neox, L->inv_freq, pos0 + t, st->cs);
            ts_rope_f32(a[TS_LS_K] + t * KD, s->n_head_kv, s->head_dim, s->n_rot, s->neox, L->inv_freq, pos0 + t,
                        st->cs);
        }
        uint16_t *kc = (uint16_t *)((uint8_t *)st->kc + (size_t)l * st->kv_layer_bytes);
        uint16_t *vc = (uint16_t *)((uint8_t *)st->vc + (size_t)l * st->kv_layer_bytes);
        for (int t = 0; t < nb; t++)
            for (int64_t i = 0; i < KD; i++) {
                kc[(pos0 + t) * KD + i] = ts_f32_to_f16(a[TS_LS_K][t * KD + i]);
                vc[(pos0 + t) * KD + i] = ts_f32_to_f16(a[TS_LS_V][t * KD + i]);
            }
        const ts_attn_params ap = {.n_head = s->n_head,
                                   .n_head_kv = s->n_head_kv,
                                   .head_dim = s->head_dim,
                                   .scale = s->attn_scale,
                                   .softcap = s->attn_softcap,
                                   .n_swa = s->n_swa,
                                   .kv_f16 = true,
                                   .kv_stride = KD};
        ts_attention(st->pool, &ap, a[TS_LS_Q], kc, vc, pos0, nb, a[TS_LS_ATTN], st->scratch, st->stride);
        t_ref_mm(st, &L->wo, a[TS_LS_ATTN], a[TS_LS_O], nb);
        if (s->post_norms)
            t_ref_norm(a[TS_LS_O], a[TS_LS_O], L->attn_post_norm, E, nb, s->eps);
        for (int64_t i = 0; i < nb * E; i++)
            a[TS_LS_X][i] += a[TS_LS_O][i];
        t_ref_norm(a[TS_LS_XN], a[TS_LS_X], L->ffn_norm, E, nb, s->eps);
        t_ref_mm(st, &L->wg, a[TS_LS_XN], a[TS_LS_GATE], nb);
        t_ref_mm(st, &L->wu, a[TS_LS_XN], a[TS_LS_UP], nb);
        if (s->gelu)
            ts_geglu_tanh_f32(a[TS_LS_GATE], a[TS_LS_GATE], a[TS_LS_UP], nb * F);
        else
            ts_swiglu_f32(a[TS_LS_GATE], a[TS_LS_GATE], a[TS_LS_UP], nb * F);
        t_ref_mm(st, &L->wd, a[TS_LS_GATE], a[TS_LS_O], nb);
        if (s->post_norms)
            t_ref_norm(a[TS_LS_O], a[TS_LS_O], L->ffn_post_norm, E, nb, s->eps);
        for (int64_t i = 0; i < nb * E; i++)
            a[TS_LS_X][i] += a[TS_LS_O][i];
    }
}

/* The "embedding" of token position p: a fixed random row. */
static void t_embed(float *x, int64_t E, int64_t p) {
    uint64_t saved = t_rng;
    t_rng = 0x12345678ull + (uint64_t)p * 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < 3; k++)
        (void)t_next();
    t_fill(x, E, 1.0f);
    t_rng = saved;
}

/* Runs a schedule of "prompts": each entry is (n tokens, on_device) - a
 * prompt goes through the device path in chunks of `width` (tail on the
 * CPU), a decode entry (on_device 0) runs token by token on the CPU.
 * x_out[p][E] gets the residual after the last layer for every position.
 * dev NULL: everything on the CPU reference in chunks of `width`. */
typedef struct t_sched {
    int n;
    int device; /* 1: prefill through the device, 0: decode on the CPU */
} t_sched;

static int t_run(const t_model *m, ts_engine *dev, ts_engine *cpu, int width, const t_sched *sched, int n_sched,
                 float *x_out, uint16_t *kc_out, uint16_t *vc_out, ts_rt_layers_stats *pst, char *note,
                 size_t note_size, ts_err *err) {
    t_state st;
    t_state_init(&st, m, width);
    const int64_t E = m->L[0].s.n_embd;
    ts_rt_layers *pf = NULL;
    ts_rt_weights *wts = NULL;
    if (dev) {
        ts_rt_block_shape shapes[T_MAX_LAYERS];
        ts_rt_host_slot slots[T_MAX_LAYERS][TS_LS_COUNT];
        memset(slots, 0, sizeof slots);
        for (int l = 0; l < m->n_layer; l++) {
            const t_layer *L = &m->L[l];
            shapes[l] = L->s;
            ts_rt_host_slot *S = slots[l];
#define V(slot, p, n) \
    if (p) \
    S[slot] = (ts_rt_host_slot){.data = (p), .bytes = (uint64_t)(n) * sizeof(float)}
            V(TS_LS_ATTN_NORM, L->attn_norm, L->s.n_embd);
            V(TS_LS_FFN_NORM, L->ffn_norm, L->s.n_embd);
            V(TS_LS_BQ, L->bq, (int64_t)L->s.n_head * L->s.head_dim);
            V(TS_LS_BK, L->bk, (int64_t)L->s.n_head_kv * L->s.head_dim);
            V(TS_LS_BV, L->bv, (int64_t)L->s.n_head_kv * L->s.head_dim);
            V(TS_LS_Q_NORM, L->q_norm, L->s.head_dim);
            V(TS_LS_K_NORM, L->k_norm, L->s.head_dim);
            V(TS_LS_ATTN_POST_NORM, L->attn_post_norm, L->s.n_embd);
            V(TS_LS_FFN_POST_NORM, L->ffn_post_norm, L->s.n_embd);
#undef V
            S[TS_LS_ROPE_FREQ] = (ts_rt_host_slot){.data = L->freq, .bytes = ts_eng_rope_freq_bytes(L->s.n_rot)};
            const t_mat *mats[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd};
            const int ms[7] = {TS_LS_WQ, TS_LS_WK, TS_LS_WV, TS_LS_WO, TS_LS_W_GATE, TS_LS_W_UP, TS_LS_W_DOWN};
            for (int i = 0; i < 7; i++) {
                const t_mat *mt = mats[i];
                S[ms[i]] = (ts_rt_host_slot){.data = mt->panels ? (const void *)mt->panels : (const void *)mt->rows,
                                              .bytes = mt->panels ? ts_rp_matrix_bytes(mt->type, mt->n_in, mt->n_out)
                                                                  : mt->rb * (size_t)mt->n_out,
                                              .wtype = mt->type,
                                              .layout = mt->panels ? TS_WL_PANELS : TS_WL_ROWS,
                                              .rows = mt->rows,
                                              .n_in = mt->n_in,
                                              .n_out = mt->n_out};
            }
        }
        wts = ts_rt_weights_new(dev, m->n_layer, &slots[0][0], err);
        ts_rt_layers_params pp = {.weights = wts,
                                  .cpu = cpu,
                                  .width = width,
                                  .n_layer = m->n_layer,
                                  .shapes = shapes,
                                  .k_cache = st.kc,
                                  .v_cache = st.vc,
                                  .kv_layer_bytes = st.kv_layer_bytes};
        memcpy(pp.act, st.act, sizeof pp.act);
        pf = wts ? ts_rt_layers_new(&pp, note, note_size, err) : NULL;
        if (!pf) {
            ts_rt_weights_free(wts);
            t_state_free(&st);
            return -1;
        }
    }
    int64_t pos = 0;
    int rc = 0;
    for (int si = 0; si < n_sched && !rc; si++) {
        for (int done = 0; done < sched[si].n && !rc;) {
            int nb = sched[si].device ? sched[si].n - done : 1;
            if (nb > width)
                nb = width;
            for (int t = 0; t < nb; t++)
                t_embed(st.act[TS_LS_X] + t * E, E, pos + t);
            const bool full = nb == width || (dev && !ts_eng_describe(dev)->widths_required);
            if (pf && sched[si].device && full)
                rc = ts_rt_layers_run(pf, pos, nb, err);
            else
                t_ref_layers(m, &st, pos, nb); /* the CPU path: the tail, or decode */
            memcpy(x_out + pos * E, st.act[TS_LS_X], (size_t)(nb * E) * sizeof(float));
            pos += nb;
            done += nb;
        }
    }
    const size_t kvb = (size_t)st.kv_layer_bytes * (size_t)m->n_layer;
    memcpy(kc_out, st.kc, kvb);
    memcpy(vc_out, st.vc, kvb);
    if (pf && pst)
        ts_rt_layers_get_stats(pf, pst);
    ts_rt_layers_free(pf);
    ts_rt_weights_free(wts);
    t_state_free(&st);
    return rc;
}

/* f16 arrays as floats, for NMSE */
static double t_nmse_f16(const uint16_t *a, const uint16_t *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = ts_f16_to_f32(a[i]), y = ts_f16_to_f32(b[i]);
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0);
}

#endif
