/* test_graph_ops.c - the graph ops of the coming families (layernorm, mul,
 * modulate, gated_add, moe_route, moe_matmul over an expert array,
 * cross_attn) run as engine graphs on `cpu` and `loop`: every output
 * bit-identical to the reference kernel called directly (kernels/block_ops.h,
 * whose own bounds tests/test_block_ops.c checks), and the binding checks of
 * an expert array. Engines that do not take an op say so (loop:npu).
 *
 *   test_graph_ops [ENGINE...]     (default: cpu loop)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "check.h"
#include "engine/engine.h"
#include "kernels/block_ops.h"
#include "kernels/fastops.h"
#include "quant/quant.h"

static float *frand_n(size_t n) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* One graph over slots bound to DEVICE buffers: in[s] (NULL: output only)
 * uploaded, the graph run for n_tok tokens, out slots read back. */
typedef struct {
    int n_slots;
    void *host[12];
    size_t bytes[12];
    bool output[12];
    ts_eng_bind meta[12]; /* weight type etc. for weight slots */
} run_spec;

static int run_graph(const char *spec, const ts_eng_node *nodes, int n_nodes, run_spec *r, int width, int n_tok,
                     ts_err *err) {
    ts_engine *e = ts_eng_open(spec, err);
    if (!e) return -1;
    int rc = -1;
    ts_eng_buf *b[12] = {0};
    ts_eng_bind binds[12];
    ts_eng_queue *q = ts_eng_queue_new(e, err);
    ts_eng_graph *g = q ? ts_eng_graph_new(e, nodes, n_nodes, r->n_slots, width, err) : NULL;
    if (!g) goto done;
    for (int s = 0; s < r->n_slots; s++) {
        if (!(b[s] = ts_eng_buf_alloc(e, TS_MEM_DEVICE, r->bytes[s], err))) goto done;
        binds[s] = r->meta[s];
        binds[s].buf = b[s];
        binds[s].off = 0;
        if (!r->output[s] && ts_eng_enqueue_write(q, b[s], 0, r->host[s], r->bytes[s], err)) goto done;
    }
    if (ts_eng_enqueue_graph(q, g, binds, r->n_slots, 0, n_tok, err)) goto done;
    for (int s = 0; s < r->n_slots; s++)
        if (r->output[s] && ts_eng_enqueue_read(q, b[s], 0, r->host[s], r->bytes[s], err)) goto done;
    rc = ts_eng_queue_finish(q, err);
done:
    ts_eng_queue_free(q);
    ts_eng_graph_free(g);
    for (int s = 0; s < r->n_slots; s++) ts_eng_buf_free(b[s]);
    ts_eng_close(e);
    return rc;
}

#define R(s) TS_ENG_REF((s), 0)

static void test_elementwise(const char *spec) {
    enum { T = 7, N = 40, TPS = 3 }; /* 3 samples: 3 + 3 + 1 tokens */
    const int samples = (T + TPS - 1) / TPS;
    const int64_t stride = 2 * N; /* shift and scale interleaved per sample, as an adaLN projection */
    float *x = frand_n(T * N), *w = frand_n(N), *bias = frand_n(N), *b2 = frand_n(T * N), *mod = frand_n(samples * stride);
    float *ref = malloc(sizeof(float) * T * N), *got = malloc(sizeof(float) * T * N);
    ts_err err = {{0}};
    /* layernorm (weight and bias), then without either */
    for (int wb = 0; wb < 2; wb++) {
        ts_eng_node nd = {.op = TS_OP_LAYERNORM,
                          .layernorm = {.x = R(0), .y = R(1), .w = wb ? TS_ENG_NOREF : R(2),
                                        .b = wb ? TS_ENG_NOREF : R(3), .n = N, .eps = 1e-5f}};
        run_spec r = {.n_slots = 4, .host = {x, got, w, bias}, .bytes = {T * N * 4, T * N * 4, N * 4, N * 4},
                      .output = {0, 1, 0, 0}};
        ts_layernorm_f32(NULL, ref, x, wb ? NULL : w, wb ? NULL : bias, T, N, 1e-5f);
        CHECK(!run_graph(spec, &nd, 1, &r, 8, T, &err), "%s layernorm: %s", spec, err.msg);
        CHECK(!memcmp(ref, got, sizeof(float) * T * N), "%s layernorm (%s) differs from the reference", spec,
              wb ? "bare" : "w, b");
    }
    /* mul, b as rows and as one row */
    for (int row = 0; row < 2; row++) {
        ts_eng_node nd = {.op = TS_OP_MUL, .mul = {.y = R(0), .a = R(1), .b = R(2), .n = N, .b_row = row}};
        run_spec r = {.n_slots = 3, .host = {got, x, b2}, .bytes = {T * N * 4, T * N * 4, (row ? 1 : T) * N * 4},
                      .output = {1, 0, 0}};
        ts_mul_f32(ref, x, b2, row, T, N);
        CHECK(!run_graph(spec, &nd, 1, &r, 8, T, &err), "%s mul: %s", spec, err.msg);
        CHECK(!memcmp(ref, got, sizeof(float) * T * N), "%s mul (b_row %d) differs", spec, row);
    }
    /* modulate: shift = mod[s][0..N), scale = mod[s][N..2N) */
    {
        ts_eng_node nd = {.op = TS_OP_MODULATE,
                          .modulate = {.x = R(0), .y = R(1), .shift = R(2), .scale = TS_ENG_REF(2, N * 4), .n = N,
                                       .mod_stride = stride, .tok_per_sample = TPS}};
        run_spec r = {.n_slots = 3, .host = {x, got, mod},
                      .bytes = {T * N * 4, T * N * 4, (size_t)samples * (size_t)stride * 4}, .output = {0, 1, 0}};
        ts_modulate_f32(ref, x, mod, mod + N, stride, TPS, T, N);
        CHECK(!run_graph(spec, &nd, 1, &r, 8, T, &err), "%s modulate: %s", spec, err.msg);
        CHECK(!memcmp(ref, got, sizeof(float) * T * N), "%s modulate differs", spec);
    }
    /* gated residual: x += gate * y, the gate in the scale operand */
    {
        ts_eng_node nd = {.op = TS_OP_GATED_ADD,
                          .modulate = {.x = R(0), .y = R(1), .shift = TS_ENG_NOREF, .scale = R(2), .n = N,
                                       .mod_stride = stride, .tok_per_sample = TPS}};
        memcpy(got, x, sizeof(float) * T * N);
        memcpy(ref, x, sizeof(float) * T * N);
        run_spec r = {.n_slots = 3, .host = {got, b2, mod},
                      .bytes = {T * N * 4, T * N * 4, (size_t)samples * (size_t)stride * 4}, .output = {0, 0, 0}};
        /* x is both input and output: upload it, read it back */
        r.output[0] = false;
        ts_gated_residual_f32(ref, b2, mod, stride, TPS, T, N);
        ts_engine *e = ts_eng_open(spec, &err);
        ts_eng_queue *q = e ? ts_eng_queue_new(e, &err) : NULL;
        ts_eng_graph *g = q ? ts_eng_graph_new(e, &nd, 1, 3, 8, &err) : NULL;
        ts_eng_buf *bx = g ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, T * N * 4, &err) : NULL;
        ts_eng_buf *by = bx ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, T * N * 4, &err) : NULL;
        ts_eng_buf *bm = by ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, r.bytes[2], &err) : NULL;
        CHECK(bm, "%s gated_add setup: %s", spec, err.msg);
        if (bm) {
            ts_eng_bind bd[3] = {{.buf = bx}, {.buf = by}, {.buf = bm}};
            CHECK(!ts_eng_enqueue_write(q, bx, 0, got, T * N * 4, &err) &&
                      !ts_eng_enqueue_write(q, by, 0, b2, T * N * 4, &err) &&
                      !ts_eng_enqueue_write(q, bm, 0, mod, r.bytes[2], &err) &&
                      !ts_eng_enqueue_graph(q, g, bd, 3, 0, T, &err) &&
                      !ts_eng_enqueue_read(q, bx, 0, got, T * N * 4, &err) && !ts_eng_queue_finish(q, &err),
                  "%s gated_add: %s", spec, err.msg);
            CHECK(!memcmp(ref, got, sizeof(float) * T * N), "%s gated_add differs", spec);
        }
        ts_eng_buf_free(bx);
        ts_eng_buf_free(by);
        ts_eng_buf_free(bm);
        ts_eng_graph_free(g);
        ts_eng_queue_free(q);
        ts_eng_close(e);
    }
    free(x), free(w), free(bias), free(b2), free(mod), free(ref), free(got);
}

/* route -> up experts (by token in, by pair out) -> down experts (by pair
 * in, by token out, weighted): an MoE FFN without the activation */
static void test_moe(const char *spec) {
    enum { T = 6, E = 5, K = 2, NI = 64, NF = 32 };
    ts_err err = {{0}};
    float *logits = frand_n(T * E), *x = frand_n(T * NI);
    /* expert arrays: E matrices of Q8_0 rows, expert e at e * eb */
    const size_t rb_up = ts_row_size(TS_TYPE_Q8_0, NI), rb_dn = ts_row_size(TS_TYPE_Q8_0, NF);
    const size_t eb_up = rb_up * NF, eb_dn = rb_dn * NI;
    uint8_t *w_up = malloc(eb_up * E), *w_dn = malloc(eb_dn * E);
    for (int e = 0; e < E; e++) {
        for (int r = 0; r < NF; r++) {
            float *row = frand_n(NI);
            CHECK(!ts_quant_row(TS_TYPE_Q8_0, row, w_up + e * eb_up + r * rb_up, NI, &err), "%s", err.msg);
            free(row);
        }
        for (int r = 0; r < NI; r++) {
            float *row = frand_n(NF);
            CHECK(!ts_quant_row(TS_TYPE_Q8_0, row, w_dn + e * eb_dn + r * rb_dn, NF, &err), "%s", err.msg);
            free(row);
        }
    }
    /* the reference, called directly */
    int32_t ids[T * K], gids[T * K];
    float wts[T * K], gwts[T * K];
    ts_moe_route(logits, T, E, K, TS_MOE_SOFTMAX_TOPK, true, ids, wts);
    int64_t off[E + 1];
    ts_moe_pair pairs[T * K];
    CHECK(!ts_moe_group(ids, T, K, E, off, pairs, &err), "%s", err.msg);
    ts_wmat up[E], dn[E];
    for (int e = 0; e < E; e++) {
        up[e] = (ts_wmat){.type = TS_TYPE_Q8_0, .data = w_up + e * eb_up, .n_in = NI, .n_out = NF, .row_bytes = rb_up};
        dn[e] = (ts_wmat){.type = TS_TYPE_Q8_0, .data = w_dn + e * eb_dn, .n_in = NF, .n_out = NI, .row_bytes = rb_dn};
    }
    float *h = calloc(T * K * NF, sizeof(float)), *y = calloc(T * NI, sizeof(float));
    float *scratch = malloc(sizeof(float) * NI);
    ts_moe_matmul(NULL, up, E, off, pairs, NULL, K, x, NI, false, h, NF, true, scratch, NI);
    ts_moe_matmul(NULL, dn, E, off, pairs, wts, K, h, NF, true, y, NI, false, scratch, NI);
    /* the graph */
    const ts_eng_node nodes[3] = {
        {.op = TS_OP_MOE_ROUTE,
         .route = {.logits = R(0), .ids = R(1), .weights = R(2), .n_expert = E, .k = K, .score = TS_MOE_SOFTMAX_TOPK,
                   .norm_topk = true}},
        {.op = TS_OP_MOE_MATMUL,
         .moe = {.w = R(3), .x = R(4), .y = R(5), .ids = R(1), .weights = TS_ENG_NOREF, .n_in = NI, .n_out = NF,
                 .n_expert = E, .k = K, .x_by_pair = false, .y_by_pair = true}},
        {.op = TS_OP_MOE_MATMUL,
         .moe = {.w = R(6), .x = R(5), .y = R(7), .ids = R(1), .weights = R(2), .n_in = NF, .n_out = NI,
                 .n_expert = E, .k = K, .x_by_pair = true, .y_by_pair = false}},
    };
    float *gh = calloc(T * K * NF, sizeof(float)), *gy = calloc(T * NI, sizeof(float));
    run_spec r = {.n_slots = 8,
                  .host = {logits, gids, gwts, w_up, x, gh, w_dn, gy},
                  .bytes = {T * E * 4, T * K * 4, T * K * 4, eb_up * E, T * NI * 4, T * K * NF * 4, eb_dn * E, T * NI * 4},
                  .output = {0, 1, 1, 0, 0, 1, 0, 1}};
    r.meta[3] = (ts_eng_bind){.wtype = TS_TYPE_Q8_0, .row_bytes = rb_up, .n_expert = E, .expert_bytes = eb_up};
    r.meta[6] = (ts_eng_bind){.wtype = TS_TYPE_Q8_0, .row_bytes = rb_dn, .n_expert = E, .expert_bytes = eb_dn};
    CHECK(!run_graph(spec, nodes, 3, &r, 8, T, &err), "%s moe graph: %s", spec, err.msg);
    CHECK(!memcmp(ids, gids, sizeof ids) && !memcmp(wts, gwts, sizeof wts), "%s moe_route differs", spec);
    CHECK(!memcmp(h, gh, sizeof(float) * T * K * NF), "%s moe_matmul (by pair) differs", spec);
    CHECK(!memcmp(y, gy, sizeof(float) * T * NI), "%s moe_matmul (weighted, by token) differs", spec);
    /* a binding with the wrong expert count is refused, naming both */
    r.meta[6].n_expert = E - 1;
    ts_err e2 = {{0}};
    CHECK(run_graph(spec, nodes, 3, &r, 8, T, &e2) && strstr(e2.msg, "experts"), "%s: wrong expert count: '%s'",
          spec, e2.msg);
    printf("%s: moe route + 2 grouped matmuls bit-identical; bad expert binding: %s\n", spec, e2.msg);
    free(logits), free(x), free(w_up), free(w_dn), free(h), free(y), free(scratch), free(gh), free(gy);
}

static void test_xattn(const char *spec) {
    enum { T = 5, NH = 4, NKV = 2, HD = 16, L = 9 };
    ts_err err = {{0}};
    float *q = frand_n(T * NH * HD), *k = frand_n(L * NKV * HD), *v = frand_n(L * NKV * HD);
    float *ref = malloc(sizeof(float) * T * NH * HD), *got = malloc(sizeof(float) * T * NH * HD);
    const ts_xattn_params ap = {.n_head = NH, .n_head_kv = NKV, .head_dim = HD, .scale = 0.25f};
    double scratch[L + HD];
    ts_cross_attention(NULL, &ap, q, T, k, v, L, ref, scratch, L + HD);
    ts_eng_node nd = {.op = TS_OP_CROSS_ATTN,
                      .xattn = {.q = R(0), .k = R(1), .v = R(2), .out = R(3), .n_head = NH, .n_head_kv = NKV,
                                .head_dim = HD, .n_kv = L, .scale = 0.25f}};
    run_spec r = {.n_slots = 4, .host = {q, k, v, got},
                  .bytes = {T * NH * HD * 4, L * NKV * HD * 4, L * NKV * HD * 4, T * NH * HD * 4},
                  .output = {0, 0, 0, 1}};
    CHECK(!run_graph(spec, &nd, 1, &r, 8, T, &err), "%s cross_attn: %s", spec, err.msg);
    CHECK(!memcmp(ref, got, sizeof(float) * T * NH * HD), "%s cross_attn differs", spec);
    free(q), free(k), free(v), free(ref), free(got);
}

/* The video DiT's ops: gelu and rope_tab bit-identical to their
 * references; cross_attn with fast (ts_attention_fast's non-causal mode
 * over f32 keys: the DiT's self- and cross-attention) within 1e-6 of the
 * double reference (f32 sums and the polynomial exp; measured below). */
static void test_dit(const char *spec) {
    enum { T = 37, NH = 4, NKV = 4, HD = 16, L = 100 };
    ts_err err = {{0}};
    float *x = frand_n(T * NH * HD), *got = malloc(sizeof(float) * T * NH * HD), *ref = malloc(sizeof(float) * T * NH * HD);
    for (int i = 0; i < T * NH * HD; i++) x[i] *= 4.0f; /* reach tanh's tails */
    {
        ts_eng_node nd = {.op = TS_OP_GELU, .act = {.x = R(0), .y = R(1), .n = NH * HD}};
        run_spec r = {.n_slots = 2, .host = {x, got}, .bytes = {T * NH * HD * 4, T * NH * HD * 4}, .output = {0, 1}};
        for (int i = 0; i < T * NH * HD; i++) ref[i] = ts_gelu_tanh_f32(x[i]);
        CHECK(!run_graph(spec, &nd, 1, &r, 40, T, &err), "%s gelu: %s", spec, err.msg);
        CHECK(!memcmp(ref, got, sizeof(float) * T * NH * HD), "%s gelu differs from ts_gelu_tanh_f32", spec);
        nd.act.fast = true; /* the fast kernel's bound is tests/test_perf_kernels.c's */
        ts_gelu_fast(NULL, ref, x, T * NH * HD);
        CHECK(!run_graph(spec, &nd, 1, &r, 40, T, &err), "%s gelu fast: %s", spec, err.msg);
        CHECK(!memcmp(ref, got, sizeof(float) * T * NH * HD), "%s gelu fast differs from ts_gelu_fast", spec);
    }
    {
        double *tab = malloc(sizeof(double) * T * HD);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < HD / 2; j++) {
                const double a = (t % 5) * pow(10000.0, -2.0 * j / HD) + (t / 5) * 0.3;
                tab[t * HD + 2 * j] = cos(a), tab[t * HD + 2 * j + 1] = sin(a);
            }
        ts_eng_node nd = {.op = TS_OP_ROPE_TAB, .rope_tab = {.x = R(0), .tab = R(1), .n_head = NH, .head_dim = HD}};
        memcpy(got, x, sizeof(float) * T * NH * HD);
        /* x is in and out (run_graph uploads only inputs): run by hand */
        ts_engine *e = ts_eng_open(spec, &err);
        ts_eng_queue *q = e ? ts_eng_queue_new(e, &err) : NULL;
        ts_eng_graph *g = q ? ts_eng_graph_new(e, &nd, 1, 2, 40, &err) : NULL;
        ts_eng_buf *bx = g ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, T * NH * HD * 4, &err) : NULL;
        ts_eng_buf *bt = bx ? ts_eng_buf_alloc(e, TS_MEM_DEVICE, T * HD * 8, &err) : NULL;
        ts_eng_bind binds[2] = {{.buf = bx}, {.buf = bt}};
        int rc = !bt || ts_eng_enqueue_write(q, bx, 0, got, T * NH * HD * 4, &err) ||
                 ts_eng_enqueue_write(q, bt, 0, tab, T * HD * 8, &err) ||
                 ts_eng_enqueue_graph(q, g, binds, 2, 0, T, &err) ||
                 ts_eng_enqueue_read(q, bx, 0, got, T * NH * HD * 4, &err) || ts_eng_queue_finish(q, &err);
        CHECK(!rc, "%s rope_tab: %s", spec, err.msg);
        ts_eng_buf_free(bx), ts_eng_buf_free(bt), ts_eng_graph_free(g), ts_eng_queue_free(q), ts_eng_close(e);
        memcpy(ref, x, sizeof(float) * T * NH * HD);
        ts_rope_tab_f32(NULL, ref, tab, T, NH, HD);
        CHECK(!memcmp(ref, got, sizeof(float) * T * NH * HD), "%s rope_tab differs from ts_rope_tab_f32", spec);
        /* the reference against the rotation written out (token 7, head 2, pair 3) */
        const int t = 7, h = 2, j = 3;
        const double c = tab[t * HD + 2 * j], sn = tab[t * HD + 2 * j + 1];
        const float *xi = x + t * NH * HD + h * HD + 2 * j;
        CHECK(ref[t * NH * HD + h * HD + 2 * j] == (float)(xi[0] * c - xi[1] * sn) &&
                  ref[t * NH * HD + h * HD + 2 * j + 1] == (float)(xi[0] * sn + xi[1] * c),
              "ts_rope_tab_f32 is not the adjacent-pair rotation");
        free(tab);
    }
    {
        float *k = frand_n(L * NKV * HD), *v = frand_n(L * NKV * HD);
        const ts_xattn_params ap = {.n_head = NH, .n_head_kv = NKV, .head_dim = HD, .scale = 0.25f};
        double scratch[L + HD];
        ts_cross_attention(NULL, &ap, x, T, k, v, L, ref, scratch, L + HD);
        ts_eng_node nd = {.op = TS_OP_CROSS_ATTN,
                          .xattn = {.q = R(0), .k = R(1), .v = R(2), .out = R(3), .n_head = NH, .n_head_kv = NKV,
                                    .head_dim = HD, .n_kv = L, .scale = 0.25f, .fast = true}};
        run_spec r = {.n_slots = 4, .host = {x, k, v, got},
                      .bytes = {T * NH * HD * 4, L * NKV * HD * 4, L * NKV * HD * 4, T * NH * HD * 4},
                      .output = {0, 0, 0, 1}};
        CHECK(!run_graph(spec, &nd, 1, &r, 40, T, &err), "%s cross_attn fast: %s", spec, err.msg);
        double worst = 0;
        for (int i = 0; i < T * NH * HD; i++)
            worst = fmax(worst, fabs((double)got[i] - ref[i]));
        CHECK(worst <= 1e-6, "%s cross_attn fast: max |error| %.3g > 1e-6 of the double reference", spec, worst);
        printf("%s: gelu, rope_tab bit-identical; cross_attn fast within %.2g of the reference\n", spec, worst);
        free(k), free(v);
    }
    free(x), free(got), free(ref);
}

int main(int argc, char **argv) {
    const char *def[] = {"cpu", "loop"};
    const char **specs = argc > 1 ? (const char **)(argv + 1) : def;
    const int n = argc > 1 ? argc - 1 : 2;
    for (int i = 0; i < n; i++) {
        test_elementwise(specs[i]);
        test_moe(specs[i]);
        test_xattn(specs[i]);
        test_dit(specs[i]);
        printf("%s: layernorm, mul, modulate, gated_add, moe_route, moe_matmul, cross_attn: bit-identical to "
               "kernels/block_ops.h\n",
               specs[i]);
    }
    /* an engine that does not take them says so */
    ts_err err = {{0}};
    ts_engine *npu = ts_eng_open("loop:npu", &err);
    CHECK(npu && !ts_eng_supports_op(npu, TS_OP_LAYERNORM, TS_ENG_ANY_WTYPE) &&
              !ts_eng_supports_op(npu, TS_OP_MOE_MATMUL, TS_ENG_ANY_WTYPE),
          "loop:npu claims a block op");
    ts_eng_close(npu);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all graph op checks passed\n");
    return 0;
}
