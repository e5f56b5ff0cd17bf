/* test_engine_opencl.c - the OpenCL engine on this machine's ICD (PoCL in
 * CI) against the CPU reference, op by op with stated NMSE bounds, over a
 * toy model's prefill, plus ordering, window, host sync and the probe.
 *
 *   test_engine_opencl                         the checks
 *   test_engine_opencl --expect-unavailable S  opening "opencl" must fail
 *                                              cleanly with S in the message
 *                                              (run with no ICD / no loader)
 *
 * Bounds (NMSE = sum (dev-ref)^2 / sum ref^2):
 *   matmul vs the f32 reference (ts_matmul: exact dequantization, f32 dot):
 *     F32/F16/Q8_0/Q4_0 weights dequantize exactly in f32 (an f16 scale
 *     times an integer of <= 8 bits has <= 19 significant bits), so both
 *     sides multiply the same numbers and only the f32 summation order
 *     differs: relative error <= n_in * 2^-24 per output, NMSE <= (256 *
 *     2^-24)^2 = 2.3e-10 for these n_in = 256 cases. Bound 1e-9.
 *   matmul vs ts_linear (what the CPU forward runs): at its default
 *     precision unpacked weights get f32 activations (then it is the f32
 *     reference); with TS_ACT=q8, or for repacked panels, activations are
 *     quantized per 32-block (8 bits: relative RMS about 1/(127 sqrt 12) of
 *     the block maximum, NMSE ~1e-5; 16 bits far less). Bound 1e-3.
 *   rmsnorm, rope, attention, swiglu, geglu: f32 arithmetic in another
 *     order, exp/tanh/cos within a few ulp (OpenCL full profile); NMSE
 *     ~1e-13 expected. Bound 1e-9 (the 1e-6, with margin).
 *   kv_store (vstore_half_rte is round-to-nearest-even like ts_f32_to_f16)
 *     and add: bit-identical.
 *   prefill of the toy model (2 layers) vs the CPU reference (ts_linear):
 *     the activation quantization of the CPU side again; bound 1e-3.
 */
#include <time.h>

#include "engine_ops_util.h"
#include "engine_test_util.h"

static ts_engine *open_or_die(const char *spec) {
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open(spec, &err);
    NEED(e, err);
    return e;
}

static int expect_unavailable(const char *needle) {
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open("opencl", &err);
    CHECK(!e, "opencl opened");
    CHECK(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    char line[700];
    ts_eng_fallback_line("opencl", &err, line, sizeof line);
    printf("%s\n", line);
    CHECK(strstr(line, "running on the CPU") != NULL, "fallback line");
    ts_eng_close(e);
    e = ts_eng_open("opencl:1", &err);
    CHECK(!e && strstr(err.msg, needle), "opencl:1: %s", err.msg);
    ts_eng_close(e);
    ts_eng_info info[16];
    const int n = ts_eng_list(info, 16);
    int found = 0;
    for (int i = 0; i < n && i < 16; i++)
        if (!strcmp(info[i].name, "opencl")) {
            found = 1;
            CHECK(!info[i].ok && strstr(info[i].reason, needle), "listing: %s", info[i].reason);
            printf("devices: %s\n", ts_eng_info_line(&info[i], line, sizeof line));
        }
    CHECK(found, "no opencl entry in the listing");
    /* everything else still works */
    op_case c;
    case_add(&c, TS_OP_ADD, 16, 2);
    op_reference(&c, 0);
    ts_engine *loop = open_or_die("loop");
    CHECK(!op_run(loop, &c, &err) && !memcmp(c.out[0], c.ref[0], c.bytes[0]), "loop without opencl: %s", err.msg);
    ts_eng_close(loop);
    op_free(&c);
    return g_fail ? 1 : 0;
}

/* ---- op by op ---- */

typedef struct {
    ts_engine *e;
    int n;
    double worst_mm_exact, worst_mm_linear, worst_other;
} nmse_ctx;

static void nmse_case(op_case *c, const char *label, void *vctx) {
    nmse_ctx *x = vctx;
    ts_err err = {{0}};
    if (op_run(x->e, c, &err)) {
        CHECK(0, "%s: %s", label, err.msg);
        return;
    }
    const ts_eng_node *n = &c->node;
    if (n->op == TS_OP_MATMUL) {
        const int ys = n->matmul.y.slot;
        const int64_t cnt = (int64_t)c->n_tok * n->matmul.n_out;
        op_reference(c, 1);
        const double ex = ts_eng_nmse((float *)(void *)c->out[ys], (float *)(void *)c->ref[ys], cnt);
        op_reference(c, 0);
        const double li = ts_eng_nmse((float *)(void *)c->out[ys], (float *)(void *)c->ref[ys], cnt);
        CHECK(ex <= 1e-9, "%s: nmse %.3g vs the f32 reference > 1e-9", label, ex);
        CHECK(li <= 1e-3, "%s: nmse %.3g vs ts_linear > 1e-3", label, li);
        if (ex > x->worst_mm_exact)
            x->worst_mm_exact = ex;
        if (li > x->worst_mm_linear)
            x->worst_mm_linear = li;
        printf("  %-32s nmse %.2e (f32 ref), %.2e (ts_linear)\n", label, ex, li);
    } else {
        op_reference(c, 0);
        const bool exact = n->op == TS_OP_KV_STORE || n->op == TS_OP_ADD || n->op == TS_OP_ADD_ROW;
        double worst = 0;
        for (int s = 0; s < c->n_slots; s++) {
            if (exact) {
                CHECK(!memcmp(c->out[s], c->ref[s], c->bytes[s]), "%s: slot %d not bit-identical", label, s);
                continue;
            }
            const double e =
                ts_eng_nmse((float *)(void *)c->out[s], (float *)(void *)c->ref[s], (int64_t)(c->bytes[s] / 4));
            if (e > worst)
                worst = e;
        }
        CHECK(worst <= 1e-9, "%s: nmse %.3g > 1e-9", label, worst);
        if (worst > x->worst_other)
            x->worst_other = worst;
        printf("  %-32s %s\n", label, exact ? "bit-identical" : "");
        if (!exact)
            printf("  %-32s nmse %.2e\n", "", worst);
    }
    x->n++;
}

static void test_ops(ts_engine *e) {
    nmse_ctx x = {.e = e};
    for_each_case(nmse_case, &x, 1);
    printf("ops on %s: %d cases; worst nmse: matmul %.2g vs f32 ref (bound 1e-9), %.2g vs ts_linear (bound 1e-3), "
           "other f32 ops %.2g (bound 1e-9)\n",
           ts_eng_describe(e)->name, x.n, x.worst_mm_exact, x.worst_mm_linear, x.worst_other);
    /* refused: weights it does not take, CPU panel layouts */
    op_case c;
    ts_err err = {{0}};
    case_matmul(&c, TS_TYPE_BF16, 64, 16, 4, 4, 0);
    CHECK(op_run(e, &c, &err) && strstr(err.msg, "does not take BF16"), "BF16: %s", err.msg);
    op_free(&c);
    case_matmul(&c, TS_TYPE_Q8_0, 64, 16, 4, 4, 0);
    c.meta[0].layout = TS_WL_PANELS;
    CHECK(op_run(e, &c, &err) && strstr(err.msg, "panel"), "panels: %s", err.msg);
    op_free(&c);
}

/* ---- prefill ---- */

static const t_sched sched3[] = {{40, 1}, {3, 0}, {37, 1}};

static void test_prefill(const char *spec, const char *what, const ts_rt_block_shape *shapes, const uint32_t types[7],
                         int expect_converted) {
    t_model m;
    t_model_init(&m, shapes, 2, types, 0);
    const int64_t E = shapes[0].n_embd, P = 80;
    const size_t kvb = (size_t)shapes[0].n_ctx * (size_t)shapes[0].n_head_kv * (size_t)shapes[0].head_dim * 2 * 2;
    float *xr = t_alloc((size_t)(P * E) * 4), *xd = t_alloc((size_t)(P * E) * 4);
    uint16_t *kr = t_alloc(kvb), *vr = t_alloc(kvb), *kd = t_alloc(kvb), *vd = t_alloc(kvb);
    ts_err err = {{0}};
    CHECK(!t_run(&m, NULL, NULL, 16, sched3, 3, xr, kr, vr, NULL, NULL, 0, &err), "reference: %s", err.msg);
    ts_engine *dev = open_or_die(spec), *cpu = open_or_die("cpu");
    ts_rt_layers_stats ps = {0};
    char note[2048];
    if (t_run(&m, dev, cpu, 16, sched3, 3, xd, kd, vd, &ps, note, sizeof note, &err)) {
        CHECK(0, "prefill %s: %s", what, err.msg);
    } else {
        const double nx = ts_eng_nmse(xd, xr, P * E), nk = t_nmse_f16(kd, kr, kvb / 2);
        CHECK(nx <= 1e-3 && nk <= 1e-3, "prefill %s: nmse x %.3g kv %.3g > 1e-3", what, nx, nk);
        CHECK(ps.tokens == 77 && ps.converted == expect_converted, "prefill %s: %llu tokens, %d converted", what,
              (unsigned long long)ps.tokens, ps.converted);
        ts_eng_stats st;
        ts_eng_get_stats(dev, &st);
        CHECK(st.crossings >= ps.runs && st.nodes > 0, "counters");
        printf("prefill %s on %s: x nmse %.2g, kv nmse %.2g (bound 1e-3); %llu tokens, %llu nodes, %llu crossings, "
               "%llu graph builds, %d converted\n",
               what, spec, nx, nk, (unsigned long long)ps.tokens, (unsigned long long)st.nodes,
               (unsigned long long)st.crossings, (unsigned long long)st.graph_builds, ps.converted);
        printf("  probe: %s\n", note);
    }
    ts_eng_close(dev);
    ts_eng_close(cpu);
    free(xr), free(xd), free(kr), free(vr), free(kd), free(vd);
    t_model_free(&m);
}

/* ---- ordering, window, host sync, probe ---- */

static void test_queues(void) {
    ts_engine *e = open_or_die("opencl");
    ts_err err = {{0}};
    op_case c;
    case_matmul(&c, TS_TYPE_Q8_0, 64, 32, 8, 8, 0);
    op_reference(&c, 1);
    ts_eng_buf *b[3];
    ts_eng_bind binds[3];
    for (int s = 0; s < 3; s++) {
        b[s] = ts_eng_buf_alloc(e, TS_MEM_DEVICE, c.bytes[s], &err);
        NEED(b[s], err);
        binds[s] = c.meta[s];
        binds[s].buf = b[s];
    }
    ts_eng_queue *tq = ts_eng_queue_new(e, &err), *cq = ts_eng_queue_new(e, &err);
    NEED(tq && cq, err);
    ts_eng_graph *g = ts_eng_graph_new(e, &c.node, 1, 3, 8, &err);
    NEED(g, err);
    ts_eng_event *go = ts_eng_user_event(e, &err);
    NEED(go, err);
    uint8_t *staging = t_alloc(c.bytes[0]);
    CHECK(!ts_eng_enqueue_write(cq, b[1], 0, c.in[1], c.bytes[1], &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_wait(tq, go, 0, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_write(tq, b[0], 0, staging, c.bytes[0], &err), "%s", err.msg);
    ts_eng_event *up = ts_eng_enqueue_marker(tq, &err);
    NEED(up, err);
    CHECK(!ts_eng_enqueue_wait(cq, up, TS_WAIT_WEIGHTS, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_graph(cq, g, binds, 3, 0, 8, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_read(cq, b[2], 0, c.out[2], c.bytes[2], &err), "%s", err.msg);
    ts_eng_event *done = ts_eng_enqueue_marker(cq, &err);
    NEED(done, err);
    CHECK(!ts_eng_queue_flush(cq, &err) && !ts_eng_queue_flush(tq, &err), "%s", err.msg);
    int early = 0;
    for (int i = 0; i < 50 && !early; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        early = ts_eng_event_done(done);
    }
    memcpy(staging, c.in[0], c.bytes[0]);
    CHECK(!ts_eng_event_signal(go, &err), "%s", err.msg);
    CHECK(!ts_eng_event_wait(done, &err), "%s", err.msg);
    const double nmse = ts_eng_nmse((float *)(void *)c.out[2], (float *)(void *)c.ref[2], (int64_t)(c.bytes[2] / 4));
    CHECK(!early && nmse <= 1e-9, "opencl ordering: early %d nmse %g", early, nmse);
    printf("ordering on opencl: compute waited for the user-gated upload; nmse %.2g\n", nmse);
    free(staging);
    ts_eng_event_free(go), ts_eng_event_free(up), ts_eng_event_free(done);
    ts_eng_graph_free(g);
    ts_eng_queue_free(tq), ts_eng_queue_free(cq);
    for (int s = 0; s < 3; s++)
        ts_eng_buf_free(b[s]);
    op_free(&c);

    /* host sync: kv_store into the caller's memory, mapped */
    case_kv_store(&c, 32, 16, 1, 3, 4);
    op_reference(&c, 0);
    ts_eng_queue *q = ts_eng_queue_new(e, &err);
    NEED(q, err);
    ts_eng_buf *bk = ts_eng_buf_alloc(e, TS_MEM_HOST, c.bytes[0], &err),
               *bv = ts_eng_buf_alloc(e, TS_MEM_HOST, c.bytes[1], &err);
    ts_eng_buf *mk = ts_eng_buf_map(e, c.out[2], c.bytes[2], &err), *mv = ts_eng_buf_map(e, c.out[3], c.bytes[3], &err);
    NEED(bk && bv && mk && mv, err);
    memcpy(ts_eng_buf_host(bk), c.in[0], c.bytes[0]);
    memcpy(ts_eng_buf_host(bv), c.in[1], c.bytes[1]);
    ts_eng_bind kb[4] = {{.buf = bk}, {.buf = bv}, {.buf = mk}, {.buf = mv}};
    ts_eng_graph *kg = ts_eng_graph_new(e, &c.node, 1, 4, 4, &err);
    NEED(kg, err);
    CHECK(!ts_eng_enqueue_host_sync(q, bk, 0, c.bytes[0], TS_SYNC_TO_DEVICE, &err) &&
              !ts_eng_enqueue_host_sync(q, bv, 0, c.bytes[1], TS_SYNC_TO_DEVICE, &err) &&
              !ts_eng_enqueue_graph(q, kg, kb, 4, 3, 4, &err) &&
              !ts_eng_enqueue_host_sync(q, mk, 0, c.bytes[2], TS_SYNC_TO_HOST, &err) &&
              !ts_eng_enqueue_host_sync(q, mv, 0, c.bytes[3], TS_SYNC_TO_HOST, &err) && !ts_eng_queue_finish(q, &err),
          "%s", err.msg);
    CHECK(!memcmp(c.out[2], c.ref[2], c.bytes[2]) && !memcmp(c.out[3], c.ref[3], c.bytes[3]),
          "KV rows written by the device into mapped host memory differ");
    CHECK(ts_eng_enqueue_host_sync(q, bk, 0, c.bytes[0] + 4, TS_SYNC_TO_HOST, &err), "sync past the end");
    ts_eng_stats st;
    ts_eng_get_stats(e, &st);
    CHECK(st.host_sync_bytes > 0, "host sync not counted");
    printf("host sync on opencl: kv_store into mapped host memory bit-identical (%llu bytes synced)\n",
           (unsigned long long)st.host_sync_bytes);
    ts_eng_graph_free(kg);
    ts_eng_buf_free(bk), ts_eng_buf_free(bv), ts_eng_buf_free(mk), ts_eng_buf_free(mv);
    ts_eng_queue_free(q);
    op_free(&c);
    ts_eng_close(e);

    /* window */
    e = open_or_die("opencl,window=1M");
    ts_eng_buf *big = ts_eng_buf_alloc(e, TS_MEM_DEVICE, 2 << 20, &err);
    CHECK(!big && strstr(err.msg, "exceeds"), "2M in a 1M window: %s", err.msg);
    ts_eng_buf *a = ts_eng_buf_alloc(e, TS_MEM_DEVICE, 700 << 10, &err);
    NEED(a, err);
    ts_eng_buf *a2 = ts_eng_buf_alloc(e, TS_MEM_DEVICE, 700 << 10, &err);
    CHECK(!a2 && strstr(err.msg, "window full"), "window: %s", err.msg);
    q = ts_eng_queue_new(e, &err);
    NEED(q, err);
    uint8_t *src = t_alloc(800 << 10);
    CHECK(ts_eng_enqueue_write(q, a, 0, src, 800 << 10, &err) && strstr(err.msg, "refused"), "upload: %s", err.msg);
    ts_eng_queue_free(q);
    free(src);
    ts_eng_buf_free(a);
    ts_eng_close(e);

    /* probe */
    e = open_or_die("opencl");
    struct {
        uint32_t in, want;
        int64_t n_in;
    } pc[] = {{TS_TYPE_Q4_0, TS_TYPE_Q4_0, 64},
              {TS_TYPE_Q4_1, TS_TYPE_Q4_1, 64},
              {TS_TYPE_Q5_0, TS_TYPE_Q8_0, 64},
              {TS_TYPE_Q6_K, TS_TYPE_Q8_0, 256},
              {TS_TYPE_BF16, TS_TYPE_F16, 64},
              {TS_TYPE_F32, TS_TYPE_F32, 64}};
    char note[1024];
    for (size_t i = 0; i < sizeof pc / sizeof *pc; i++) {
        const int t = ts_rt_probe_weight_type(e, pc[i].in, pc[i].n_in, note, sizeof note, &err);
        CHECK(t == (int)pc[i].want, "probe %s: %d (%s; %s)", ts_type_info(pc[i].in)->name, t, note, err.msg);
        printf("probe %s on opencl -> %s: %s\n", ts_type_info(pc[i].in)->name,
               t >= 0 ? ts_type_info((uint32_t)t)->name : "none", note);
    }
    ts_eng_close(e);
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--expect-unavailable"))
        return expect_unavailable(argv[2]);
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open("opencl", &err);
    if (!e) {
        fprintf(stderr, "FAIL: no OpenCL device (%s); the test machine needs an ICD such as pocl-opencl-icd\n",
                err.msg);
        return 1;
    }
    ts_eng_info in = {.ok = true, .desc = *ts_eng_describe(e)};
    snprintf(in.name, sizeof in.name, "opencl");
    char line[700];
    printf("device: %s\n", ts_eng_info_line(&in, line, sizeof line));
    test_ops(e);
    ts_eng_close(e);

    const ts_rt_block_shape llama = {.n_embd = 64,
                                      .n_head = 4,
                                      .n_head_kv = 2,
                                      .head_dim = 16,
                                      .n_ff = 96,
                                      .n_rot = 16,
                                      .n_ctx = 96,
                                      .qkv_bias = true,
                                      .qk_norm = true,
                                      .kv_f16 = true,
                                      .eps = 1e-5f,
                                      .attn_scale = 0.25f};
    ts_rt_block_shape ls[2] = {llama, llama}, gs[2];
    for (int l = 0; l < 2; l++)
        gs[l] = (ts_rt_block_shape){.n_embd = 64,
                                     .n_head = 4,
                                     .n_head_kv = 1,
                                     .head_dim = 32,
                                     .n_ff = 128,
                                     .n_rot = 24,
                                     .n_ctx = 96,
                                     .neox = true,
                                     .qk_norm = true,
                                     .post_norms = true,
                                     .gelu = true,
                                     .kv_f16 = true,
                                     .eps = 1e-6f,
                                     .attn_scale = 0.17f,
                                     .attn_softcap = 30.0f};
    gs[0].n_swa = 7;
    const uint32_t taken[7] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16, TS_TYPE_Q4_0,
                               TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16};
    const uint32_t mixed[7] = {TS_TYPE_Q8_0, TS_TYPE_Q4_1, TS_TYPE_F16, TS_TYPE_BF16,
                               TS_TYPE_Q8_0, TS_TYPE_BF16, TS_TYPE_F32};
    test_prefill("opencl", "gemma-like", gs, taken, 0);
    test_prefill("opencl", "llama-like, Q4_1 taken, BF16 converted", ls, mixed, 4);
    test_queues();
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("all opencl checks passed\n");
    return 0;
}
