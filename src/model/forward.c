/* forward.c - per-sequence state (KV cache, activation buffers, thread
 * pool) and the forward pass over a batch of tokens.
 *
 * A call to ts_forward is cut into micro-batches of at most n_batch tokens.
 * Each micro-batch runs the layers one after the other, and each layer as a
 * sequence of stages over the whole micro-batch:
 *   attn_norm -> qkv -> qk_norm -> rope -> kv_store -> attention -> o_proj
 *   -> ffn (norm, gate/up, activation, down, residual)
 * Every stage reads and writes the state's buffers only, so a later engine
 * can take a stage (most of all the matmuls) over for a whole batch.
 *
 * K and V go into the cache (rounded to f16 unless kv_f32) before attention
 * reads them back, so a batched prefill and a token-by-token decode compute
 * each position from exactly the same values; with matmuls whose per-token
 * result does not depend on the batch, a position's logits do not depend on
 * the micro-batch size at all.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fastops.h"
#include "kernels/linear.h"
#include "model/model_impl.h"
#include "quant/quant.h"

/* ---- state ------------------------------------------------------------ */

ts_state_params ts_state_default_params(void) {
    ts_state_params p = {.n_ctx = 0, .n_batch = 64, .n_threads = 0, .kv_f32 = false};
    return p;
}

/* calloc of a*b*c elements of size sz with overflow checks. */
static void *alloc3(int64_t a, int64_t b, int64_t c, size_t sz) {
    uint64_t n;
    if (a < 0 || b < 0 || c < 0) return NULL;
    if (ts_mul_overflow_u64((uint64_t)a, (uint64_t)b, &n) || ts_mul_overflow_u64(n, (uint64_t)c, &n) ||
        ts_mul_overflow_u64(n, sz, &n) || n > (uint64_t)SIZE_MAX)
        return NULL;
    return calloc(n ? (size_t)n : 1, 1);
}

ts_state *ts_state_new(const ts_mdl *m, const ts_state_params *p, ts_err *err) {
    ts_state_params dp = ts_state_default_params();
    if (!p) p = &dp;
    if (!m) {
        ts_err_set(err, "model is NULL");
        return NULL;
    }
    const ts_hparams *hp = &m->hp;
    if (p->n_ctx < 0 || p->n_ctx > (1 << 24)) {
        ts_err_set(err, "n_ctx %d out of range [0, %d]", p->n_ctx, 1 << 24);
        return NULL;
    }
    if (p->n_batch < 1) {
        ts_err_set(err, "n_batch %d must be >= 1", p->n_batch);
        return NULL;
    }
    ts_state *s = calloc(1, sizeof *s);
    if (!s) {
        ts_err_set(err, "out of memory");
        return NULL;
    }
    s->m = m;
    s->n_ctx = p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    s->n_batch = p->n_batch < s->n_ctx ? p->n_batch : s->n_ctx;
    s->kv_f32 = p->kv_f32;
    s->pool = ts_threadpool_new(p->n_threads, err);
    if (!s->pool) goto fail;
    s->n_threads = ts_threadpool_n_threads(s->pool);
    s->n_kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    s->n_q_dim = (int64_t)hp->n_head * hp->head_dim;

    const size_t kv_sz = s->kv_f32 ? sizeof(float) : sizeof(uint16_t);
    s->k_cache = alloc3(hp->n_layer, s->n_ctx, s->n_kv_dim, kv_sz);
    s->v_cache = alloc3(hp->n_layer, s->n_ctx, s->n_kv_dim, kv_sz);
    const int64_t B = s->n_batch;
    s->x = alloc3(B, hp->n_embd, 1, sizeof(float));
    s->xn = alloc3(B, hp->n_embd, 1, sizeof(float));
    s->o = alloc3(B, hp->n_embd, 1, sizeof(float));
    s->q = alloc3(B, s->n_q_dim, 1, sizeof(float));
    s->attn = alloc3(B, s->n_q_dim, 1, sizeof(float));
    s->k = alloc3(B, s->n_kv_dim, 1, sizeof(float));
    s->v = alloc3(B, s->n_kv_dim, 1, sizeof(float));
    s->gate = alloc3(B, hp->n_ff, 1, sizeof(float));
    s->up = alloc3(B, hp->n_ff, 1, sizeof(float));
    s->logits = alloc3(hp->n_vocab, 1, 1, sizeof(float));
    s->rope_cs = alloc3(m->n_rot, 1, 1, sizeof(float));

    /* Per-thread scratch: one dequantized weight row (the widest matmul
     * input), or attention's K/V row, accumulator and scores over n_ctx.
     * Rounded to 64 bytes so threads never share a cache line. */
    int64_t need = hp->n_embd;
    if (s->n_q_dim > need) need = s->n_q_dim;
    if (hp->n_ff > need) need = hp->n_ff;
    if ((int64_t)s->n_ctx + 2 * hp->head_dim > need) need = (int64_t)s->n_ctx + 2 * hp->head_dim;
    if (!m->ref_kernels) {
        const ts_attn_params ap = {.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim};
        if (ts_attention_fast_scratch(&ap) > need) need = ts_attention_fast_scratch(&ap);
    }
    s->scratch_stride = (need + 15) & ~(int64_t)15;
    s->scratch = alloc3(s->n_threads, s->scratch_stride, 1, sizeof(float));
    if (!m->ref_kernels) {
        int64_t max_in = hp->n_embd > s->n_q_dim ? hp->n_embd : s->n_q_dim;
        if (hp->n_ff > max_in) max_in = hp->n_ff;
        s->lin = ts_linear_ws_new(max_in, s->n_batch, s->n_threads, err);
        if (!s->lin) goto fail;
    }

    if (!s->k_cache || !s->v_cache || !s->x || !s->xn || !s->o || !s->q || !s->attn || !s->k || !s->v ||
        !s->gate || !s->up || !s->logits || !s->rope_cs || !s->scratch) {
        ts_err_set(err, "out of memory allocating the state (n_ctx %d, n_batch %d)", s->n_ctx, s->n_batch);
        goto fail;
    }
    return s;
fail:
    ts_state_free(s);
    return NULL;
}

void ts_state_free(ts_state *s) {
    if (!s) return;
    ts_threadpool_free(s->pool);
    ts_linear_ws_free(s->lin);
    free(s->k_cache);
    free(s->v_cache);
    free(s->x);
    free(s->xn);
    free(s->o);
    free(s->q);
    free(s->attn);
    free(s->k);
    free(s->v);
    free(s->gate);
    free(s->up);
    free(s->logits);
    free(s->rope_cs);
    free(s->scratch);
    free(s);
}

int32_t ts_state_n_ctx(const ts_state *s) { return s->n_ctx; }
int32_t ts_state_n_past(const ts_state *s) { return s->n_past; }
int32_t ts_state_n_batch(const ts_state *s) { return s->n_batch; }
int32_t ts_state_n_threads(const ts_state *s) { return s->n_threads; }
const float *ts_state_logits(const ts_state *s) { return s->logits; }

void ts_state_kv_truncate(ts_state *s, int32_t n) {
    if (n < 0) n = 0;
    if (n < s->n_past) s->n_past = n;
}

/* ---- stages ------------------------------------------------------------ */

/* x[t] = embedding row of tokens[t] * embd_scale */
static void stage_embed(ts_state *s, const int32_t *tokens, int nb) {
    const ts_mdl *m = s->m;
    const int64_t E = m->hp.n_embd;
    for (int t = 0; t < nb; t++) {
        float *xt = s->x + t * E;
        ts_wmat_row(&m->tok_embd, tokens[t], xt);
        if (m->hp.embd_scale != 1.0f)
            for (int64_t i = 0; i < E; i++) xt[i] *= m->hp.embd_scale;
    }
}

/* dst[t] = rmsnorm(src[t]) * w for each token (rows of n floats). */
static void stage_norm_rows(const ts_state *s, float *dst, const float *src, const float *w, int64_t n, int nb) {
    for (int t = 0; t < nb; t++) ts_rmsnorm_f32(dst + t * n, src + t * n, w, n, s->m->hp.norm_eps);
}

static void add_bias(float *y, const float *b, int64_t n, int nb) {
    if (!b) return;
    for (int t = 0; t < nb; t++)
        for (int64_t i = 0; i < n; i++) y[t * n + i] += b[i];
}

/* y_i = x W_i^T for n matrices reading the same input x (nb rows of
 * w[0]->n_in floats; y_i rows of w[i]->n_out). The fast path converts x once
 * and runs all the matrices in one parallel region. */
static void matmul_n(ts_state *s, int n, const ts_wmat *const *w, float *const *y, const float *x, int nb) {
    if (s->lin) {
        ts_linear(s->pool, s->lin, n, w, y, x, nb);
        return;
    }
    for (int i = 0; i < n; i++)
        ts_matmul(s->pool, w[i], x, w[i]->n_in, y[i], w[i]->n_out, nb, s->scratch, s->scratch_stride);
}

static void matmul(ts_state *s, const ts_wmat *w, const float *x, float *y, int nb) {
    matmul_n(s, 1, &w, &y, x, nb);
}

/* q, k, v = xn Wq (+bq), xn Wk (+bk), xn Wv (+bv) */
static void stage_qkv(ts_state *s, const ts_layer *L, int nb) {
    const ts_wmat *w[3] = {&L->wq, &L->wk, &L->wv};
    float *y[3] = {s->q, s->k, s->v};
    matmul_n(s, 3, w, y, s->xn, nb);
    add_bias(s->q, L->bq, s->n_q_dim, nb);
    add_bias(s->k, L->bk, s->n_kv_dim, nb);
    add_bias(s->v, L->bv, s->n_kv_dim, nb);
}

/* Per-head RMSNorm of q and k (qwen3, gemma3), before rope. */
static void stage_qk_norm(ts_state *s, const ts_layer *L, int nb) {
    const ts_hparams *hp = &s->m->hp;
    const int hd = hp->head_dim;
    if (L->q_norm) stage_norm_rows(s, s->q, s->q, L->q_norm, hd, nb * hp->n_head);
    if (L->k_norm) stage_norm_rows(s, s->k, s->k, L->k_norm, hd, nb * hp->n_head_kv);
}

static void stage_rope(ts_state *s, const ts_layer *L, int64_t pos0, int nb) {
    const ts_hparams *hp = &s->m->hp;
    const bool neox = hp->rope_type == TS_ROPE_NEOX;
    for (int t = 0; t < nb; t++) {
        ts_rope_f32(s->q + t * s->n_q_dim, hp->n_head, hp->head_dim, s->m->n_rot, neox, L->inv_freq, pos0 + t,
                    s->rope_cs);
        ts_rope_f32(s->k + t * s->n_kv_dim, hp->n_head_kv, hp->head_dim, s->m->n_rot, neox, L->inv_freq, pos0 + t,
                    s->rope_cs);
    }
}

static size_t kv_elem_size(const ts_state *s) { return s->kv_f32 ? sizeof(float) : sizeof(uint16_t); }

static uint8_t *kv_layer(const ts_state *s, void *cache, int il) {
    return (uint8_t *)cache + (size_t)il * (size_t)s->n_ctx * (size_t)s->n_kv_dim * kv_elem_size(s);
}

/* Appends the batch's K and V rows at positions pos0.. of layer il. */
static void stage_kv_store(ts_state *s, int il, int64_t pos0, int nb) {
    const int64_t D = s->n_kv_dim;
    uint8_t *kc = kv_layer(s, s->k_cache, il), *vc = kv_layer(s, s->v_cache, il);
    for (int t = 0; t < nb; t++) {
        const float *kt = s->k + t * D, *vt = s->v + t * D;
        const size_t off = (size_t)(pos0 + t) * (size_t)D;
        if (s->kv_f32) {
            memcpy((float *)kc + off, kt, (size_t)D * sizeof(float));
            memcpy((float *)vc + off, vt, (size_t)D * sizeof(float));
        } else {
            uint16_t *kd = (uint16_t *)kc + off, *vd = (uint16_t *)vc + off;
            for (int64_t i = 0; i < D; i++) {
                kd[i] = ts_f32_to_f16(kt[i]);
                vd[i] = ts_f32_to_f16(vt[i]);
            }
        }
    }
}

static void stage_attention(ts_state *s, const ts_layer *L, int il, int64_t pos0, int nb) {
    const ts_mdl *m = s->m;
    const ts_hparams *hp = &m->hp;
    ts_attn_params ap = {
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .scale = m->attn_scale,
        .softcap = hp->attn_logit_softcap,
        .n_swa = L->swa ? hp->n_swa : 0,
        .kv_f16 = !s->kv_f32,
        .kv_stride = s->n_kv_dim,
    };
    if (s->lin)
        ts_attention_fast(s->pool, &ap, s->q, kv_layer(s, s->k_cache, il), kv_layer(s, s->v_cache, il), pos0, nb,
                          s->attn, s->scratch, s->scratch_stride);
    else
        ts_attention(s->pool, &ap, s->q, kv_layer(s, s->k_cache, il), kv_layer(s, s->v_cache, il), pos0, nb,
                     s->attn, s->scratch, s->scratch_stride);
}

/* x += post_norm(attn Wo) */
static void stage_o_proj(ts_state *s, const ts_layer *L, int nb) {
    const int64_t E = s->m->hp.n_embd;
    matmul(s, &L->wo, s->attn, s->o, nb);
    if (L->attn_post_norm) stage_norm_rows(s, s->o, s->o, L->attn_post_norm, E, nb);
    for (int64_t i = 0; i < nb * E; i++) s->x[i] += s->o[i];
}

/* x += post_norm(down(act(norm(x) Wgate) * norm(x) Wup)) */
static void stage_ffn(ts_state *s, const ts_layer *L, int nb) {
    const ts_hparams *hp = &s->m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    stage_norm_rows(s, s->xn, s->x, L->ffn_norm, E, nb);
    const ts_wmat *w[2] = {&L->w_gate, &L->w_up};
    float *y[2] = {s->gate, s->up};
    matmul_n(s, 2, w, y, s->xn, nb);
    if (s->m->ffn_gelu)
        ts_geglu_tanh_f32(s->gate, s->gate, s->up, nb * F);
    else if (s->lin)
        ts_swiglu_fast(s->pool, s->gate, s->gate, s->up, nb * F);
    else
        ts_swiglu_f32(s->gate, s->gate, s->up, nb * F);
    matmul(s, &L->w_down, s->gate, s->o, nb);
    if (L->ffn_post_norm) stage_norm_rows(s, s->o, s->o, L->ffn_post_norm, E, nb);
    for (int64_t i = 0; i < nb * E; i++) s->x[i] += s->o[i];
}

/* Output norm and projection for rows [t0, nb) of the batch into out
 * (rows of n_vocab), with final soft-capping. */
static void stage_logits(ts_state *s, int t0, int nb, float *out) {
    const ts_mdl *m = s->m;
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    const int n = nb - t0;
    stage_norm_rows(s, s->xn, s->x + t0 * E, m->output_norm, E, n);
    matmul(s, &m->output, s->xn, out, n);
    if (m->hp.final_logit_softcap > 0.0f) ts_softcap_f32(out, (int64_t)n * V, m->hp.final_logit_softcap);
}

/* One micro-batch of nb tokens at positions s->n_past ... */
static void eval_batch(ts_state *s, const int32_t *tokens, int nb, float *logits_out, bool last) {
    const ts_mdl *m = s->m;
    const ts_hparams *hp = &m->hp;
    const int64_t pos0 = s->n_past;
    stage_embed(s, tokens, nb);
    for (int il = 0; il < hp->n_layer; il++) {
        const ts_layer *L = &m->layers[il];
        stage_norm_rows(s, s->xn, s->x, L->attn_norm, hp->n_embd, nb);
        stage_qkv(s, L, nb);
        stage_qk_norm(s, L, nb);
        stage_rope(s, L, pos0, nb);
        stage_kv_store(s, il, pos0, nb);
        stage_attention(s, L, il, pos0, nb);
        stage_o_proj(s, L, nb);
        stage_ffn(s, L, nb);
    }
    const int64_t V = hp->n_vocab;
    if (logits_out) {
        stage_logits(s, 0, nb, logits_out);
        if (last) memcpy(s->logits, logits_out + (int64_t)(nb - 1) * V, (size_t)V * sizeof(float));
    } else if (last) {
        stage_logits(s, nb - 1, nb, s->logits);
    }
}

int ts_forward(ts_state *s, const int32_t *tokens, int32_t n, float *logits_all, ts_err *err) {
    if (!s) return ts_err_set(err, "state is NULL");
    if (n < 0) return ts_err_set(err, "token count %d is negative", n);
    if (n == 0) return 0;
    if (!tokens) return ts_err_set(err, "tokens is NULL");
    if ((int64_t)s->n_past + n > s->n_ctx)
        return ts_err_set(err, "context full: %d cached + %d new tokens exceed n_ctx %d", s->n_past, n, s->n_ctx);
    const int32_t n_vocab = s->m->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return ts_err_set(err, "token id %d at index %d out of range [0, %d)", tokens[i], i, n_vocab);

    for (int32_t done = 0; done < n;) {
        const int nb = n - done < s->n_batch ? n - done : s->n_batch;
        float *out = logits_all ? logits_all + (int64_t)done * n_vocab : NULL;
        eval_batch(s, tokens + done, nb, out, done + nb == n);
        s->n_past += nb;
        done += nb;
    }
    return 0;
}
