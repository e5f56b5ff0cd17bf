/* test_block_moe.c - a MoE block through the runtime (runtime/block.c's
 * TS_BLOCK_MOE builder, expert arrays in the layer's weight table,
 * runtime/layers.c) against the reference composition of
 * kernels/block_ops.h. The attention output projection is zero, so the
 * layer computes x + moe_ffn(ffn_norm(x)) exactly; the result must be
 * bit-identical to rmsnorm -> router (ts_linear) -> ts_moe_route ->
 * ts_moe_group -> ts_moe_ffn on the CPU's own layers, on `loop` (every node
 * on the device, expert arrays uploaded) and on `loop:npu` (matmuls on the
 * device, the routed experts on the CPU between them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/engine.h"
#include "kernels/block_ops.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "quant/quant.h"
#include "runtime/layers.h"

enum { E = 64, NH = 4, NKV = 2, HD = 16, NE = 4, KE = 2, FE = 32, T = 32, CTX = 64 };

static void *zalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, (n + 63) / 64 * 64);
    return p;
}

/* n_mat stacked Q8_0 matrices [n_out][n_in] of random rows (zero: all 0) */
static uint8_t *q8_mats(int n_mat, int64_t n_out, int64_t n_in, bool zero) {
    const size_t rb = ts_row_size(TS_TYPE_Q8_0, n_in);
    uint8_t *w = zalloc(rb * (size_t)n_out * (size_t)n_mat);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    ts_err err = {{0}};
    for (int64_t r = 0; r < n_out * n_mat; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = zero ? 0.0f : frand() * 0.5f;
        CHECK(!ts_quant_row(TS_TYPE_Q8_0, row, w + (size_t)r * rb, n_in, &err), "%s", err.msg);
    }
    free(row);
    return w;
}

static ts_rt_host_slot mat_slot(const uint8_t *w, int64_t n_out, int64_t n_in, int n_expert) {
    const size_t rb = ts_row_size(TS_TYPE_Q8_0, n_in);
    const int n = n_expert > 0 ? n_expert : 1;
    return (ts_rt_host_slot){.data = w, .bytes = rb * (uint64_t)n_out * (uint64_t)n, .wtype = TS_TYPE_Q8_0,
                             .layout = TS_WL_ROWS, .rows = w, .n_in = n_in, .n_out = n_out, .n_expert = n_expert,
                             .expert_bytes = n_expert > 0 ? rb * (uint64_t)n_out : 0};
}

int main(void) {
    ts_err err = {{0}};
    /* weights of one layer */
    uint8_t *wq = q8_mats(1, NH * HD, E, false), *wk = q8_mats(1, NKV * HD, E, false),
            *wv = q8_mats(1, NKV * HD, E, false), *wo = q8_mats(1, E, NH * HD, true),
            *router = q8_mats(1, NE, E, false), *gate = q8_mats(NE, FE, E, false), *up = q8_mats(NE, FE, E, false),
            *down = q8_mats(NE, E, FE, false);
    float *attn_norm = zalloc(E * 4), *ffn_norm = zalloc(E * 4);
    for (int i = 0; i < E; i++) attn_norm[i] = 0.5f + 0.5f * (frand() + 1.0f), ffn_norm[i] = 0.5f + 0.5f * (frand() + 1.0f);
    double inv_freq[HD / 2];
    ts_rope_inv_freq(inv_freq, HD, 10000.0, 1.0, NULL, NULL);
    uint8_t *freq = zalloc(ts_eng_rope_freq_bytes(HD));
    ts_eng_rope_freq_pack(inv_freq, HD, freq);
    ts_rt_host_slot slots[TS_LS_COUNT];
    memset(slots, 0, sizeof slots);
    slots[TS_LS_ROPE_FREQ] = (ts_rt_host_slot){.data = freq, .bytes = ts_eng_rope_freq_bytes(HD)};
    slots[TS_LS_ATTN_NORM] = (ts_rt_host_slot){.data = attn_norm, .bytes = E * 4};
    slots[TS_LS_FFN_NORM] = (ts_rt_host_slot){.data = ffn_norm, .bytes = E * 4};
    slots[TS_LS_WQ] = mat_slot(wq, NH * HD, E, 0);
    slots[TS_LS_WK] = mat_slot(wk, NKV * HD, E, 0);
    slots[TS_LS_WV] = mat_slot(wv, NKV * HD, E, 0);
    slots[TS_LS_WO] = mat_slot(wo, E, NH * HD, 0);
    slots[TS_LS_W_ROUTER] = mat_slot(router, NE, E, 0);
    slots[TS_LS_W_GATE_EXPS] = mat_slot(gate, FE, E, NE);
    slots[TS_LS_W_UP_EXPS] = mat_slot(up, FE, E, NE);
    slots[TS_LS_W_DOWN_EXPS] = mat_slot(down, E, FE, NE);
    const ts_rt_block_shape shape = {.kind = TS_BLOCK_MOE, .n_embd = E, .n_head = NH, .n_head_kv = NKV,
                                     .head_dim = HD, .n_ff = FE, .n_rot = HD, .n_ctx = CTX, .neox = true,
                                     .kv_f16 = true, .eps = 1e-5f, .attn_scale = 0.25f, .n_expert = NE,
                                     .n_expert_used = KE, .n_ff_exp = FE, .moe_score = TS_MOE_SOFTMAX_TOPK,
                                     .moe_norm_topk = true};
    float *x0 = zalloc(T * E * 4);
    for (int i = 0; i < T * E; i++) x0[i] = frand();

    /* the reference: x + moe_ffn(rmsnorm(x) * ffn_norm) */
    float *xn = zalloc(T * E * 4), *logits = zalloc(T * NE * 4), *ffn = zalloc(T * E * 4), *ref = zalloc(T * E * 4);
    for (int t = 0; t < T; t++) ts_rmsnorm_f32(xn + t * E, x0 + t * E, ffn_norm, E, 1e-5f);
    ts_linear_ws *ws = ts_linear_ws_new(E, T, 1, &err);
    CHECK(ws, "%s", err.msg);
    const ts_wmat wr = {.type = TS_TYPE_Q8_0, .data = router, .n_in = E, .n_out = NE,
                        .row_bytes = ts_row_size(TS_TYPE_Q8_0, E)};
    const ts_wmat *wl[1] = {&wr};
    float *yl[1] = {logits};
    ts_linear(NULL, ws, 1, wl, yl, xn, T);
    int32_t ids[T * KE];
    float wts[T * KE];
    ts_moe_route(logits, T, NE, KE, TS_MOE_SOFTMAX_TOPK, true, ids, wts);
    int64_t off[NE + 1];
    ts_moe_pair pairs[T * KE];
    CHECK(!ts_moe_group(ids, T, KE, NE, off, pairs, &err), "%s", err.msg);
    ts_wmat g[NE], u[NE], d[NE];
    for (int e = 0; e < NE; e++) {
        const size_t rbe = ts_row_size(TS_TYPE_Q8_0, E), rbf = ts_row_size(TS_TYPE_Q8_0, FE);
        g[e] = (ts_wmat){.type = TS_TYPE_Q8_0, .data = gate + e * rbe * FE, .n_in = E, .n_out = FE, .row_bytes = rbe};
        u[e] = (ts_wmat){.type = TS_TYPE_Q8_0, .data = up + e * rbe * FE, .n_in = E, .n_out = FE, .row_bytes = rbe};
        d[e] = (ts_wmat){.type = TS_TYPE_Q8_0, .data = down + e * rbf * E, .n_in = FE, .n_out = E, .row_bytes = rbf};
    }
    size_t nsc = 0;
    CHECK(!ts_moe_ffn_scratch(T, KE, NE, E, FE, 1, &nsc, &err), "%s", err.msg);
    float *sc = zalloc(nsc * 4);
    ts_moe_ffn(NULL, g, u, d, NE, false, off, pairs, wts, T, KE, xn, ffn, sc);
    for (int i = 0; i < T * E; i++) ref[i] = x0[i] + ffn[i];

    /* the runtime's layer on each engine */
    /* the last: every matrix converted to F16 at load (the expert arrays
     * expert by expert), so close to the reference, not its bits */
    const char *specs[] = {NULL, "loop", "loop:npu,delay_us=0", "loop,wtypes=f16"};
    for (int si = 0; si < 4; si++) {
        const char *spec = specs[si];
        ts_engine *dev = spec ? ts_eng_open(spec, &err) : NULL;
        ts_engine *cpu = ts_eng_open("cpu", &err);
        CHECK((dev || !spec) && cpu, "%s: %s", spec ? spec : "cpu", err.msg);
        uint64_t rows[TS_LS_N_ACT];
        ts_rt_block_act_rows(&shape, rows);
        ts_rt_layers_params pp = {.cpu = cpu, .width = T, .n_layer = 1, .shapes = &shape};
        for (int i = 0; i < TS_LS_N_ACT; i++) pp.act[i] = zalloc((size_t)rows[i] * T);
        pp.kv_layer_bytes = (uint64_t)CTX * NKV * HD * 2;
        pp.k_cache = zalloc(pp.kv_layer_bytes);
        pp.v_cache = zalloc(pp.kv_layer_bytes);
        ts_rt_weights *w = ts_rt_weights_new(dev, 1, slots, &err);
        pp.weights = w;
        ts_rt_layers *ly = w ? ts_rt_layers_new(&pp, NULL, 0, &err) : NULL;
        CHECK(ly, "%s: layers: %s", spec ? spec : "cpu", err.msg);
        if (ly) {
            memcpy(pp.act[TS_LS_X], x0, T * E * 4);
            CHECK(!ts_rt_layers_run_window(ly, 0, T, 0, &err), "%s: run: %s", spec ? spec : "cpu", err.msg);
            ts_rt_layers_stats st;
            ts_rt_layers_get_stats(ly, &st);
            const double nmse = ts_eng_nmse(pp.act[TS_LS_X], ref, T * E);
            if (st.converted) {
                CHECK(st.converted == 8 && nmse < 1e-4, "%s: %d converted, nmse %.3g (bound 1e-4)", spec,
                      st.converted, nmse);
            } else {
                CHECK(!memcmp(pp.act[TS_LS_X], ref, T * E * 4), "%s: the MoE layer differs from the reference",
                      spec ? spec : "cpu");
            }
            printf("moe block on %s: %d of %d segments on the device, %d matrices converted: nmse %.3g%s\n",
                   spec ? spec : "cpu (no device)", st.device_segments, st.segments_per_layer, st.converted, nmse,
                   memcmp(pp.act[TS_LS_X], ref, T * E * 4) ? "" : " (bit-identical)");
        }
        ts_rt_layers_free(ly);
        ts_rt_weights_free(w);
        for (int i = 0; i < TS_LS_N_ACT; i++) free(pp.act[i]);
        free(pp.k_cache);
        free(pp.v_cache);
        ts_eng_close(cpu);
        ts_eng_close(dev);
    }
    /* the schedule: an unknown policy is refused; one that ignores the
     * dependencies (test hook) is stopped by the executor */
    {
        ts_engine *cpu = ts_eng_open("cpu", &err);
        uint64_t rows[TS_LS_N_ACT];
        ts_rt_block_act_rows(&shape, rows);
        ts_rt_layers_params pp = {.cpu = cpu, .width = T, .n_layer = 1, .shapes = &shape, .schedule = "bogus"};
        for (int i = 0; i < TS_LS_N_ACT; i++) pp.act[i] = zalloc((size_t)rows[i] * T);
        pp.kv_layer_bytes = (uint64_t)CTX * NKV * HD * 2;
        pp.k_cache = zalloc(pp.kv_layer_bytes);
        pp.v_cache = zalloc(pp.kv_layer_bytes);
        ts_engine *npu = ts_eng_open("loop:npu,delay_us=0", &err);
        ts_rt_weights *w = ts_rt_weights_new(npu, 1, slots, &err);
        pp.weights = w;
        ts_err e2 = {{0}};
        ts_rt_layers *ly = ts_rt_layers_new(&pp, NULL, 0, &e2);
        CHECK(!ly && strstr(e2.msg, "unknown schedule"), "schedule 'bogus': %s", e2.msg);
        ts_rt_layers_free(ly);
#ifdef TS_TEST_HOOKS
        pp.schedule = "nodeps";
        ly = ts_rt_layers_new(&pp, NULL, 0, &err);
        CHECK(ly, "nodeps: %s", err.msg);
        memset(&e2, 0, sizeof e2);
        CHECK(ly && ts_rt_layers_run_window(ly, 0, T, 0, &e2) && strstr(e2.msg, "no ready segment"),
              "a schedule ignoring the dependencies must be refused: '%s'", e2.msg);
        printf("schedule: 'nodeps' (broken on purpose) refused: %s\n", e2.msg);
        ts_rt_layers_free(ly);
#endif
        ts_rt_weights_free(w);
        for (int i = 0; i < TS_LS_N_ACT; i++) free(pp.act[i]);
        free(pp.k_cache);
        free(pp.v_cache);
        ts_eng_close(npu);
        ts_eng_close(cpu);
    }
    ts_linear_ws_free(ws);
    free(wq), free(wk), free(wv), free(wo), free(router), free(gate), free(up), free(down);
    free(attn_norm), free(ffn_norm), free(freq), free(x0), free(xn), free(logits), free(ffn), free(ref), free(sc);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
