/* test_engine.c - the engine layer without OpenCL: registry and options,
 * the fallback line, every op on the loop device and the cpu engine
 * bit-identical to the CPU kernels, a toy model's prefill through loop and
 * loop:npu bit-identical to the CPU reference across several prompts in one
 * session (tail chunks and decode on the CPU), queue/event ordering and the
 * broken "nowait" hook, memory-window accounting, and the weight-type probe
 * with its conversion. */
#include <pthread.h>
#include <time.h>

#include "engine_ops_util.h"
#include "engine_test_util.h"
#include "core/clock.h"
#include "kernels/amx/amx.h"

static ts_engine *open_or_die(const char *spec) {
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open(spec, &err);
    NEED(e, err);
    return e;
}

/* ---- registry, options, fallback ---- */

static void expect_open_error(const char *spec, const char *needle) {
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open(spec, &err);
    CHECK(!e, "'%s' opened", spec);
    CHECK(strstr(err.msg, needle) != NULL, "'%s': message '%s' lacks '%s'", spec, err.msg, needle);
    ts_eng_close(e);
}

static void test_registry(void) {
    ts_engine *e = open_or_die("cpu");
    CHECK(ts_eng_describe(e)->kind == TS_ENG_KIND_CPU, "cpu kind");
    ts_eng_close(e);
    e = open_or_die("loop");
    const ts_eng_desc *d = ts_eng_describe(e);
    CHECK(d->kind == TS_ENG_KIND_LOOP && !d->widths_required && d->ops == (1u << TS_OP_COUNT) - 1, "loop profile");
    CHECK(ts_eng_supports_op(e, TS_OP_MATMUL, TS_TYPE_Q6_K), "loop takes Q6_K");
    ts_eng_close(e);
    e = open_or_die("loop:npu,window=64M,delay_us=200");
    d = ts_eng_describe(e);
    CHECK(!strcmp(d->name, "loop:npu"), "name %s", d->name);
    CHECK(d->kind == TS_ENG_KIND_NPU, "npu kind");
    CHECK(d->window_bytes == (uint64_t)64 << 20, "window %llu", (unsigned long long)d->window_bytes);
    CHECK(d->crossing_ns == 200000, "crossing %llu", (unsigned long long)d->crossing_ns);
    CHECK(d->widths_required && d->n_widths == 4 && d->widths[0] == 32 && d->widths[3] == 256, "npu widths");
    CHECK(d->ops == 1u << TS_OP_MATMUL, "npu ops %x", d->ops);
    CHECK(ts_eng_supports_op(e, TS_OP_MATMUL, TS_TYPE_Q4_0) && ts_eng_supports_op(e, TS_OP_MATMUL, TS_TYPE_Q8_0) &&
              ts_eng_supports_op(e, TS_OP_MATMUL, TS_TYPE_F16),
          "npu takes F16/Q8_0/Q4_0");
    CHECK(!ts_eng_supports_op(e, TS_OP_MATMUL, TS_TYPE_Q4_1) && !ts_eng_supports_op(e, TS_OP_MATMUL, TS_TYPE_F32) &&
              !ts_eng_supports_op(e, TS_OP_ATTENTION, TS_ENG_ANY_WTYPE),
          "npu refuses Q4_1, F32, attention");
    /* a width it does not run */
    ts_eng_node mm = {
        .op = TS_OP_MATMUL,
        .matmul = {.w = TS_ENG_REF(0, 0), .x = TS_ENG_REF(1, 0), .y = TS_ENG_REF(2, 0), .n_in = 32, .n_out = 16}};
    ts_err err = {{0}};
    ts_eng_graph *g = ts_eng_graph_new(e, &mm, 1, 3, 48, &err);
    CHECK(!g && strstr(err.msg, "width 48"), "width 48 on npu: %s", err.msg);
    ts_eng_graph_free(g);
    ts_eng_node rn = {
        .op = TS_OP_RMSNORM,
        .rmsnorm = {
            .x = TS_ENG_REF(0, 0), .y = TS_ENG_REF(0, 0), .w = TS_ENG_NOREF, .n = 8, .rows_per_tok = 1, .eps = 1e-5f}};
    g = ts_eng_graph_new(e, &rn, 1, 1, 32, &err);
    CHECK(!g && strstr(err.msg, "rmsnorm is not supported"), "rmsnorm on npu: %s", err.msg);
    ts_eng_graph_free(g);
    ts_eng_close(e);

    expect_open_error("nosuch", "unknown device 'nosuch'");
    expect_open_error("", "empty device name");
    expect_open_error("loop:gpu", "no profile 'gpu'");
    expect_open_error("cpu:1", "no variant");
    expect_open_error("loop,bogus=1", "unknown option 'bogus'");
    expect_open_error("loop,window=12Q", "window=12Q");
    expect_open_error("cpu,delay_us=5", "applies to loop only");
    expect_open_error("loop,threads=0", "threads=0");
    expect_open_error("opencl:x", "opencl:N");
    expect_open_error("amx,act=fp4", "act=fp4: expected one of exact, q8, int8");
    expect_open_error("amx:1", "no variant");
    expect_open_error("amx,emulate=2", "emulate=2");
    /* amx: the real unit opens where it exists, else the reason; the
     * emulated one everywhere, an NPU of the CPU's own memory */
    {
        char why[200];
        if (!ts_amx_hw_status(why, sizeof why))
            expect_open_error("amx", why);
        ts_engine *a = open_or_die("amx,emulate=1,act=q8");
        const ts_eng_desc *ad = ts_eng_describe(a);
        CHECK(ad->kind == TS_ENG_KIND_NPU && !strcmp(ad->name, "amx") && ad->min_width == 32 && strstr(ad->detail, "EMULATED") &&
                  strstr(ad->detail, "act=q8"),
              "amx,emulate=1 profile: %s %d %s", ad->name, ad->min_width, ad->detail);
        CHECK(ts_eng_supports_op(a, TS_OP_MATMUL, TS_TYPE_Q4_K) && ts_eng_supports_op(a, TS_OP_MATMUL, TS_TYPE_BF16) &&
                  ts_eng_supports_op(a, TS_OP_MATMUL, TS_TYPE_Q5_1) && !ts_eng_supports_op(a, TS_OP_MATMUL, TS_TYPE_Q2_K),
              "amx act=q8 takes the panel and float types, not Q2_K");
        CHECK(ts_eng_packed_bytes(a, TS_TYPE_Q4_0, 256, 40) > 0 && ts_eng_packed_bytes(a, TS_TYPE_Q2_K, 256, 40) == 0,
              "amx packs what it takes only");
        ts_eng_close(a);
        a = open_or_die("amx,emulate=1,act=int8,min_width=64");
        CHECK(ts_eng_supports_op(a, TS_OP_MATMUL, TS_TYPE_Q5_1) && ts_eng_describe(a)->min_width == 64,
              "amx act=int8 takes every type the CPU dequantizes; min_width= is kept");
        ts_eng_close(a);
        a = open_or_die("amx,emulate=1,act=int8,scale=tensor");
        CHECK(strstr(ts_eng_describe(a)->detail, "act=int8 (per tensor)") != NULL, "amx scale=tensor: %s",
              ts_eng_describe(a)->detail);
        ts_eng_close(a);
        expect_open_error("amx,emulate=1,scale=tensor", "scale=tensor is the int8 mode's");
    }

    /* the one line a front end prints, then runs on the CPU */
    err.msg[0] = 0;
    ts_engine *none = ts_eng_open("nosuch", &err);
    char line[640];
    ts_eng_fallback_line("nosuch", &err, line, sizeof line);
    CHECK(!none && !strncmp(line, "tessera: prefill device 'nosuch' unavailable (unknown device", 60) &&
              strstr(line, "); running on the CPU") && !strchr(line, '\n'),
          "fallback line: %s", line);

    uint64_t v = 0;
    CHECK(!ts_eng_parse_size("64M", &v) && v == 64u << 20, "64M");
    CHECK(!ts_eng_parse_size("2GiB", &v) && v == 2ull << 30, "2GiB");
    CHECK(!ts_eng_parse_size("4096", &v) && v == 4096, "4096");
    CHECK(ts_eng_parse_size("-1", &v) && ts_eng_parse_size("1T", &v) && ts_eng_parse_size("99999999999999999999G", &v),
          "bad sizes accepted");

    ts_eng_info info[16];
    const int n = ts_eng_list(info, 16);
    CHECK(n >= 4, "list gave %d", n);
    int seen = 0;
    for (int i = 0; i < n && i < 16; i++) {
        ts_eng_info_line(&info[i], line, sizeof line);
        printf("  devices: %s\n", line);
        if (!strcmp(info[i].name, "cpu") || !strcmp(info[i].name, "loop") || !strcmp(info[i].name, "loop:npu"))
            seen += info[i].ok;
        if (!strncmp(info[i].name, "opencl", 6))
            CHECK(info[i].ok || info[i].reason[0], "opencl entry without reason");
    }
    CHECK(seen == 3, "cpu/loop/loop:npu not all ok");
}

/* ---- op by op: loop and cpu give the CPU kernels' bits ---- */

typedef struct {
    ts_engine *e;
    int n;
} bit_ctx;

static void bit_case(op_case *c, const char *label, void *vctx) {
    bit_ctx *x = vctx;
    ts_err err = {{0}};
    op_reference(c, 0);
    if (op_run(x->e, c, &err)) {
        CHECK(0, "%s on %s: %s", label, ts_eng_describe(x->e)->name, err.msg);
        return;
    }
    for (int s = 0; s < c->n_slots; s++)
        CHECK(!memcmp(c->out[s], c->ref[s], c->bytes[s]), "%s on %s: slot %d differs from the CPU kernel", label,
              ts_eng_describe(x->e)->name, s);
    x->n++;
}

static void test_ops_bit_identical(const char *spec) {
    bit_ctx x = {.e = open_or_die(spec)};
    for_each_case(bit_case, &x, 1);
    /* other weight types and the CPU panel layout, where this CPU packs */
    const uint32_t more[] = {TS_TYPE_BF16, TS_TYPE_Q4_1, TS_TYPE_Q8_0, TS_TYPE_Q4_0};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        op_case c;
        case_matmul(&c, more[i], 128, 40, 16, 11, 1);
        char label[64];
        snprintf(label, sizeof label, "matmul %s %s", ts_type_info(more[i])->name,
                 c.meta[0].layout == TS_WL_PANELS ? "panels" : "rows");
        bit_case(&c, label, &x);
        op_free(&c);
    }
    ts_eng_stats st;
    ts_eng_get_stats(x.e, &st);
    CHECK(st.window_used == 0 && st.window_peak > 0, "%s: window used %llu after freeing all", spec,
          (unsigned long long)st.window_used);
    printf("ops on %s: %d cases bit-identical to the CPU kernels (%llu nodes on the device)\n", spec, x.n,
           (unsigned long long)st.nodes);
    ts_eng_close(x.e);
}

static void test_npu_matmul(void) {
    ts_engine *e = open_or_die("loop:npu,delay_us=0");
    bit_ctx x = {.e = e};
    const uint32_t types[] = {TS_TYPE_F16, TS_TYPE_Q8_0, TS_TYPE_Q4_0};
    for (int i = 0; i < 3; i++) {
        op_case c;
        case_matmul(&c, types[i], 64, 48, 32, 32, i == 2);
        bit_case(&c, "npu matmul", &x);
        op_free(&c);
    }
    op_case c;
    case_matmul(&c, TS_TYPE_Q8_0, 64, 48, 32, 31, 0);
    ts_err err = {{0}};
    CHECK(op_run(e, &c, &err) && strstr(err.msg, "requires exactly the graph width 32"), "31 of 32 tokens on npu: %s",
          err.msg);
    op_free(&c);
    case_matmul(&c, TS_TYPE_Q4_1, 64, 48, 32, 32, 0);
    CHECK(op_run(e, &c, &err) && strstr(err.msg, "does not take Q4_1"), "Q4_1 on npu: %s", err.msg);
    op_free(&c);
    ts_eng_close(e);
}

/* ---- the toy model through ts_rt_layers ---- */

static const ts_rt_block_shape shape_llama = {.n_embd = 64,
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

static void gemma_shapes(ts_rt_block_shape s[2]) {
    for (int l = 0; l < 2; l++) {
        s[l] = (ts_rt_block_shape){.n_embd = 64,
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
                                    .attn_softcap = 0.0f};
    }
    s[0].n_swa = 7; /* a sliding-window layer: a second graph variant */
}

static const t_sched sched3[] = {{40, 1}, {3, 0}, {37, 1}}; /* prompt, 3 decode steps, second prompt */

/* The CPU reference of sched3 over model m (residual stream and KV cache),
 * and buffers for a device run to compare with it. */
typedef struct {
    int64_t n_x; /* floats of the residual stream over the schedule */
    size_t kvb;  /* bytes of one cache */
    float *xr, *xd;
    uint16_t *kr, *vr, *kd, *vd;
} run_pair;

static void run_pair_init(run_pair *r, const t_model *m) {
    r->n_x = 80 * m->L[0].s.n_embd;
    r->kvb = (size_t)m->L[0].s.n_ctx * (size_t)m->L[0].s.n_head_kv * (size_t)m->L[0].s.head_dim * 2 * (size_t)m->n_layer;
    r->xr = t_alloc((size_t)r->n_x * sizeof(float));
    r->xd = t_alloc((size_t)r->n_x * sizeof(float));
    r->kr = t_alloc(r->kvb), r->vr = t_alloc(r->kvb), r->kd = t_alloc(r->kvb), r->vd = t_alloc(r->kvb);
    ts_err err = {{0}};
    CHECK(!t_run(m, NULL, NULL, 16, sched3, 3, r->xr, r->kr, r->vr, NULL, NULL, 0, &err), "reference: %s", err.msg);
}

static void run_pair_free(run_pair *r) {
    free(r->xr), free(r->xd), free(r->kr), free(r->vr), free(r->kd), free(r->vd);
}

static void compare_runs(const char *what, const t_model *m, int width, const char *spec, int expect_bits, double bound,
                         int expect_converted) {
    run_pair rp;
    run_pair_init(&rp, m);
    const int64_t n_x = rp.n_x;
    const size_t kvb = rp.kvb;
    float *xr = rp.xr, *xd = rp.xd;
    uint16_t *kr = rp.kr, *vr = rp.vr, *kd = rp.kd, *vd = rp.vd;
    ts_err err = {{0}};
    ts_engine *dev = open_or_die(spec), *cpu = open_or_die("cpu");
    ts_rt_layers_stats ps = {0};
    char note[2048];
    const int rc = t_run(m, dev, cpu, width, sched3, 3, xd, kd, vd, &ps, note, sizeof note, &err);
    CHECK(!rc, "%s on %s: %s", what, spec, err.msg);
    if (!rc) {
        if (expect_bits) {
            CHECK(!memcmp(xr, xd, (size_t)n_x * sizeof(float)), "%s on %s: residual stream differs from the CPU",
                  what, spec);
            CHECK(!memcmp(kr, kd, kvb) && !memcmp(vr, vd, kvb), "%s on %s: KV cache differs from the CPU", what, spec);
        }
        const double nx = ts_eng_nmse(xd, xr, n_x), nk = t_nmse_f16(kd, kr, kvb / 2);
        CHECK(nx <= bound && nk <= bound, "%s on %s: nmse x %.3g kv %.3g > %.1g", what, spec, nx, nk, bound);
        ts_eng_stats es;
        ts_eng_get_stats(dev, &es);
        const ts_eng_desc *d = ts_eng_describe(dev);
        const int64_t dev_tokens = d->widths_required ? (40 / width + 37 / width) * width : 77;
        CHECK(ps.tokens == (uint64_t)dev_tokens, "%s: %llu device tokens, expected %lld", what,
              (unsigned long long)ps.tokens, (long long)dev_tokens);
        CHECK(ps.converted == expect_converted, "%s: %d converted, expected %d", what, ps.converted, expect_converted);
        /* one crossing per device->CPU hand-off: once per run when the
         * whole layer is on the device, once per device segment otherwise */
        const uint64_t per_run =
            ps.device_segments == ps.segments_per_layer ? 1 : (uint64_t)ps.device_segments * m->n_layer;
        CHECK(ps.run_crossings == per_run * ps.runs, "%s: %llu crossings for %llu runs (%d/%d segments)", what,
              (unsigned long long)ps.run_crossings, (unsigned long long)ps.runs, ps.device_segments,
              ps.segments_per_layer);
        /* nodes on the device: the device segments' nodes, every layer, every run */
        uint64_t dev_nodes = 0;
        {
            ts_eng_node nodes[TS_LS_MAX_NODES];
            ts_rt_segment segs[TS_LS_MAX_NODES];
            for (int l = 0; l < m->n_layer; l++) {
                const int nn = ts_rt_block_nodes(&m->L[l].s, nodes), ns = ts_rt_split_nodes(dev, nodes, nn, segs);
                for (int i = 0; i < ns; i++)
                    dev_nodes += segs[i].on_device ? (uint64_t)segs[i].count : 0;
            }
        }
        CHECK(ps.run_nodes == dev_nodes * ps.runs, "%s: %llu device nodes, expected %llu", what,
              (unsigned long long)ps.run_nodes, (unsigned long long)(dev_nodes * ps.runs));
        CHECK(es.nodes > 0 && es.graph_runs > 0 && es.window_peak <= d->window_bytes, "%s: counters", what);
        printf("prefill %s on %s (width %d): x nmse %.2g, kv nmse %.2g%s; %llu device tokens in %llu runs, "
               "%d of %d segments on the device, %llu nodes, %llu crossings, %llu graph builds, %llu bytes uploaded, "
               "window peak %llu\n",
               what, spec, width, nx, nk, expect_bits ? " (bit-identical)" : "", (unsigned long long)ps.tokens,
               (unsigned long long)ps.runs, ps.device_segments, ps.segments_per_layer, (unsigned long long)ps.run_nodes,
               (unsigned long long)ps.run_crossings, (unsigned long long)es.graph_builds,
               (unsigned long long)es.upload_bytes, (unsigned long long)es.window_peak);
        if (note[0])
            printf("  probe:\n%s\n", note);
    }
    ts_eng_close(dev);
    ts_eng_close(cpu);
    run_pair_free(&rp);
}

static void test_prefill_loop(void) {
    const uint32_t npu_types[7] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16, TS_TYPE_Q4_0,
                                   TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16};
    const uint32_t mixed[7] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16, TS_TYPE_Q4_1,
                               TS_TYPE_Q8_0, TS_TYPE_Q4_1, TS_TYPE_F32};
    ts_rt_block_shape ls[2] = {shape_llama, shape_llama}, gs[2];
    gemma_shapes(gs);
    t_model m;
    t_model_init(&m, ls, 2, mixed, 1);
    compare_runs("llama-like mixed types, panels", &m, 16, "loop,threads=2", 1, 0.0, 0);
    t_model_free(&m);
    t_model_init(&m, gs, 2, npu_types, 0);
    compare_runs("gemma-like", &m, 16, "loop", 1, 0.0, 0);
    compare_runs("gemma-like", &m, 32, "loop:npu,delay_us=0", 1, 0.0, 0);
    t_model_free(&m);
    t_model_init(&m, ls, 2, npu_types, 1);
    compare_runs("llama-like, panels", &m, 32, "loop:npu,delay_us=0", 1, 0.0, 0);
    t_model_free(&m);
    /* the npu refuses Q4_1 and F32: converted once (Q8_0, F16), so close
     * to the CPU but not bit-identical; 4 matrices x 2 layers converted */
    t_model_init(&m, ls, 2, mixed, 0);
    compare_runs("llama-like, converted", &m, 32, "loop:npu,delay_us=0", 0, 1e-3, 6);
    t_model_free(&m);
}

/* ---- placement: streaming through N slots; place=stream, peruse, somr ---- */

/* Six layers under each placement, every run bit-identical to the CPU:
 * - a window that holds three layer slots but not every layer: the weights
 *   stream through slots=3 (uploads up to two layers ahead) and through
 *   the default two;
 * - the same window: somr keeps
 *   what fits beside two slots resident (packed into one buffer) and
 *   streams the rest, so it uploads less than streaming every layer; peruse
 *   streams every layer through one slot;
 * - a window that holds one layer slot but not two: auto (and stream)
 *   refuse it, somr streams through the one slot;
 * - a window that holds everything: stream streams anyway; somr packs all
 *   six layers into one buffer where auto gives each its own. */
static void test_placement(void) {
    const uint32_t types[7] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16, TS_TYPE_Q4_0,
                               TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16};
    ts_rt_block_shape ls[6];
    for (int l = 0; l < 6; l++) ls[l] = shape_llama;
    t_model m;
    t_model_init(&m, ls, 6, types, 1);
    run_pair rp;
    run_pair_init(&rp, &m);
    ts_err err = {{0}};
    static const struct {
        const char *spec;
        int streaming, n_slots, min_res, max_res, buffers;
    } cases[] = {
        {"loop,window=260K,delay_us=200", 1, 2, 0, 0, 0},
        {"loop,window=260K,slots=3,delay_us=200", 1, 3, 0, 0, 0},
        {"loop,window=260K,place=somr,delay_us=200", 1, 2, 1, 5, 1},
        {"loop,window=260K,place=peruse,delay_us=200", 1, 1, 0, 0, 0},
        {"loop,window=160K,place=somr,delay_us=200", 1, 1, 0, 0, 0},
        {"loop,place=stream", 1, 2, 0, 0, 0},
        {"loop,place=somr", 0, 0, 6, 6, 1},
        {"loop", 0, 0, 6, 6, 6},
    };
    uint64_t up_stream = 0, up_somr = 0;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const char *spec = cases[k].spec;
        ts_engine *dev = open_or_die(spec), *cpu = open_or_die("cpu");
        ts_rt_layers_stats ps = {0};
        memset(rp.xd, 0, (size_t)rp.n_x * sizeof(float));
        const int rc = t_run(&m, dev, cpu, 16, sched3, 3, rp.xd, rp.kd, rp.vd, &ps, NULL, 0, &err);
        CHECK(!rc, "%s: %s", spec, err.msg);
        if (!rc) {
            ts_eng_stats es;
            ts_eng_get_stats(dev, &es);
            CHECK(ps.streaming == cases[k].streaming && ps.n_slots == cases[k].n_slots &&
                      ps.n_resident >= cases[k].min_res && ps.n_resident <= cases[k].max_res &&
                      ps.n_resident + ps.n_streamed == 6 && ps.weight_buffers == cases[k].buffers,
                  "%s: streaming %d, %d slots, %d resident in %d buffers, %d streamed", spec, ps.streaming, ps.n_slots,
                  ps.n_resident, ps.weight_buffers, ps.n_streamed);
            const bool same = !memcmp(rp.xr, rp.xd, (size_t)rp.n_x * sizeof(float)) &&
                              !memcmp(rp.kr, rp.kd, rp.kvb) && !memcmp(rp.vr, rp.vd, rp.kvb);
            CHECK(same, "%s: differs from the CPU", spec);
            CHECK(es.window_peak <= ts_eng_describe(dev)->window_bytes, "%s: window peak", spec);
            if (k == 0)
                up_stream = es.upload_bytes;
            if (k == 2)
                up_somr = es.upload_bytes;
            printf("place %-44s %d resident in %d buffers, %d streamed through %d slots: %s; %llu bytes "
                   "uploaded, stall %.2f ms\n",
                   spec, ps.n_resident, ps.weight_buffers, ps.n_streamed, ps.n_slots, same ? "bit-identical" : "DIFFERS",
                   (unsigned long long)es.upload_bytes, (double)es.stall_ns / 1e6);
        }
        ts_eng_close(dev);
        ts_eng_close(cpu);
    }
    CHECK(up_somr && up_somr < up_stream, "somr uploaded %llu bytes, streaming every layer %llu",
          (unsigned long long)up_somr, (unsigned long long)up_stream);
    {
        ts_engine *dev = open_or_die("loop,window=160K"), *cpu = open_or_die("cpu");
        const int rc = t_run(&m, dev, cpu, 16, sched3, 3, rp.xd, rp.kd, rp.vd, NULL, NULL, 0, &err);
        CHECK(rc && strstr(err.msg, "nor two layer slots"), "loop,window=160K (auto): %s",
              rc ? err.msg : "ran (one slot's window should refuse two)");
        printf("place loop,window=160K (auto): refused: %s\n", err.msg);
        ts_eng_close(dev);
        ts_eng_close(cpu);
    }
    expect_open_error("loop,place=lru", "expected auto, stream, peruse or somr");
    t_model_free(&m);
    run_pair_free(&rp);
}

/* ---- a weight layout of the engine's own ---- */

/* loop,own_layout=1 (test hook) takes weights in its own layout (rows at a
 * padded stride): the runtime packs every matrix with ts_eng_pack at setup
 * and binds TS_WL_ENGINE; the device computes them as rows (its kernels'
 * row path, not the CPU's panels), so close to the CPU, not its bits. */
static void test_own_layout(void) {
#ifdef TS_TEST_HOOKS
    const uint32_t mixed[7] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_F16, TS_TYPE_Q4_1,
                               TS_TYPE_Q8_0, TS_TYPE_Q4_1, TS_TYPE_F32};
    ts_rt_block_shape ls[2] = {shape_llama, shape_llama};
    t_model m;
    t_model_init(&m, ls, 2, mixed, 1);
    run_pair rp;
    run_pair_init(&rp, &m);
    ts_err err = {{0}};
    ts_engine *dev = open_or_die("loop,own_layout=1"), *cpu = open_or_die("cpu");
    CHECK(ts_eng_packed_bytes(dev, TS_TYPE_Q8_0, 64, 16) == 16 * 128, "own layout of 16 Q8_0 rows of 64: %llu bytes",
          (unsigned long long)ts_eng_packed_bytes(dev, TS_TYPE_Q8_0, 64, 16));
    ts_rt_layers_stats ps = {0};
    CHECK(!t_run(&m, dev, cpu, 16, sched3, 3, rp.xd, rp.kd, rp.vd, &ps, NULL, 0, &err), "own layout: %s", err.msg);
    const double nx = ts_eng_nmse(rp.xd, rp.xr, rp.n_x), nk = t_nmse_f16(rp.kd, rp.kr, rp.kvb / 2);
    CHECK(ps.packed == 7 * m.n_layer && nx < 1e-4 && nk < 1e-4, "own layout: %d packed, nmse x %.3g kv %.3g", ps.packed,
          nx, nk);
    printf("own layout: %d matrices packed by the engine (rows padded to 64 bytes), nmse x %.2g kv %.2g\n", ps.packed,
           nx, nk);
    ts_eng_close(dev);
    ts_eng_close(cpu);
    ts_engine *plain = open_or_die("loop");
    CHECK(!ts_eng_packed_bytes(plain, TS_TYPE_Q8_0, 64, 16), "plain loop claims a layout of its own");
    ts_eng_close(plain);
    t_model_free(&m);
    run_pair_free(&rp);
#else
    printf("own layout: skipped, the own_layout hook is not in this build (configure with -DTS_TEST_HOOKS=ON)\n");
#endif
}

/* ---- ordering ---- */

/* A transfer queue uploads the weights only after a user event; the compute
 * queue waits for the transfer's marker before the matmul. Returns the
 * NMSE of the result against the reference; *early: whether the compute
 * finished before the user event was signalled. */
static double ordering_run(const char *spec, int *early, uint64_t *stall_ns) {
    ts_engine *e = open_or_die(spec);
    ts_err err = {{0}};
    op_case c;
    case_matmul(&c, TS_TYPE_Q8_0, 64, 32, 8, 8, 0);
    op_reference(&c, 0);
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
    CHECK(!ts_eng_enqueue_write(cq, b[1], 0, c.in[1], c.bytes[1], &err), "%s", err.msg);
    /* the weights reach the staging memory only after the poll below: an
     * upload that runs before `go` copies zeros, deterministically */
    uint8_t *staging = t_alloc(c.bytes[0]);
    CHECK(!ts_eng_enqueue_wait(tq, go, 0, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_write(tq, b[0], 0, staging, c.bytes[0], &err), "%s", err.msg);
    ts_eng_event *uploaded = ts_eng_enqueue_marker(tq, &err);
    NEED(uploaded, err);
    CHECK(!ts_eng_queue_flush(tq, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_wait(cq, uploaded, TS_WAIT_WEIGHTS, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_graph(cq, g, binds, 3, 0, 8, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_read(cq, b[2], 0, c.out[2], c.bytes[2], &err), "%s", err.msg);
    ts_eng_event *computed = ts_eng_enqueue_marker(cq, &err);
    NEED(computed, err);
    CHECK(!ts_eng_queue_flush(cq, &err), "%s", err.msg);
    /* give a broken queue every chance to run ahead */
    *early = 0;
    for (int i = 0; i < 100 && !*early; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        *early = ts_eng_event_done(computed);
    }
    memcpy(staging, c.in[0], c.bytes[0]);
    CHECK(!ts_eng_event_signal(go, &err), "%s", err.msg);
    CHECK(!ts_eng_event_wait(computed, &err), "%s", err.msg);
    CHECK(!ts_eng_queue_finish(tq, &err) && !ts_eng_queue_finish(cq, &err), "%s", err.msg);
    const double nmse = ts_eng_nmse((float *)(void *)c.out[2], (float *)(void *)c.ref[2], (int64_t)(c.bytes[2] / 4));
    ts_eng_stats st;
    ts_eng_get_stats(e, &st);
    *stall_ns = st.stall_ns;
    free(staging);
    ts_eng_event_free(go);
    ts_eng_event_free(uploaded);
    ts_eng_event_free(computed);
    ts_eng_graph_free(g);
    ts_eng_queue_free(tq);
    ts_eng_queue_free(cq);
    for (int s = 0; s < 3; s++)
        ts_eng_buf_free(b[s]);
    op_free(&c);
    ts_eng_close(e);
    return nmse;
}

static void test_ordering(void) {
    int early;
    uint64_t stall;
    double nmse = ordering_run("loop", &early, &stall);
    CHECK(nmse == 0.0 && !early, "loop with waits: nmse %g, finished early %d", nmse, early);
    CHECK(stall >= 50000000ull, "stall %llu ns: the compute queue waited ~100 ms on the weights",
          (unsigned long long)stall);
    printf("ordering: with waits: exact, compute stalled %.1f ms on the weights\n", (double)stall / 1e6);
    /* the deliberately broken hook: the gate must see it */
#ifdef TS_TEST_HOOKS
    nmse = ordering_run("loop,nowait=1", &early, &stall);
    CHECK(early && !(nmse < 1e-6), "loop,nowait=1: finished early %d, nmse %g (must be wrong)", early, nmse);
    printf("ordering: nowait=1 (broken on purpose): ran before its weights, nmse %g\n", nmse);
#else
    printf("ordering: nowait=1 skipped: the hook is not in this build (configure with -DTS_TEST_HOOKS=ON)\n");
#endif

    /* in-order within one queue: a later write does not reach an earlier run */
    ts_engine *e = open_or_die("loop,delay_us=2000");
    ts_err err = {{0}};
    op_case c;
    case_add(&c, TS_OP_ADD, 32, 2);
    op_reference(&c, 0);
    ts_eng_queue *q = ts_eng_queue_new(e, &err);
    ts_eng_buf *y = ts_eng_buf_alloc(e, TS_MEM_DEVICE, c.bytes[0], &err),
               *x = ts_eng_buf_alloc(e, TS_MEM_HOST, c.bytes[1], &err);
    NEED(q && y && x, err);
    ts_eng_graph *g = ts_eng_graph_new(e, &c.node, 1, 2, 2, &err);
    NEED(g, err);
    ts_eng_bind binds[2] = {{.buf = y}, {.buf = x}};
    float *junk = t_alloc(c.bytes[1]);
    t_fill(junk, (int64_t)(c.bytes[1] / 4), 100.0f);
    memcpy(ts_eng_buf_host(x), c.in[1], c.bytes[1]);
    CHECK(!ts_eng_enqueue_write(q, y, 0, c.in[0], c.bytes[0], &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_graph(q, g, binds, 2, 0, 2, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_read(q, y, 0, c.out[0], c.bytes[0], &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_write(q, x, 0, junk, c.bytes[1], &err), "%s", err.msg);
    CHECK(!ts_eng_queue_finish(q, &err), "%s", err.msg);
    CHECK(!memcmp(c.out[0], c.ref[0], c.bytes[0]), "in-order queue: result saw a later write");
    CHECK(!memcmp(ts_eng_buf_host(x), junk, c.bytes[1]), "HOST buffer not updated by the write");
    ts_eng_stats st;
    ts_eng_get_stats(e, &st);
    CHECK(st.crossings == 1, "one finish, one crossing: %llu", (unsigned long long)st.crossings);
    free(junk);
    ts_eng_graph_free(g);
    ts_eng_buf_free(y);
    ts_eng_buf_free(x);
    ts_eng_queue_free(q);
    op_free(&c);
    ts_eng_close(e);

    /* the cpu engine is synchronous: it cannot wait on a future */
    e = open_or_die("cpu");
    q = ts_eng_queue_new(e, &err);
    ts_eng_event *u = ts_eng_user_event(e, &err);
    NEED(q && u, err);
    CHECK(ts_eng_enqueue_wait(q, u, 0, &err) && strstr(err.msg, "synchronous"), "cpu wait: %s", err.msg);
    CHECK(!ts_eng_event_signal(u, &err) && !ts_eng_enqueue_wait(q, u, 0, &err), "cpu wait after signal: %s", err.msg);
    ts_eng_event_free(u);
    ts_eng_queue_free(q);
    ts_eng_close(e);
}

/* ---- memory window ---- */

static void test_window(void) {
    ts_engine *e = open_or_die("loop:npu,window=1M");
    ts_err err = {{0}};
    ts_eng_buf *a = ts_eng_buf_alloc(e, TS_MEM_DEVICE, 600 << 10, &err);
    NEED(a, err);
    ts_eng_buf *b = ts_eng_buf_alloc(e, TS_MEM_DEVICE, 600 << 10, &err);
    CHECK(!b && strstr(err.msg, "window full"), "second 600K in a 1M window: %s", err.msg);
    ts_eng_buf *big = ts_eng_buf_alloc(e, TS_MEM_DEVICE, 2 << 20, &err);
    CHECK(!big && strstr(err.msg, "exceeds the largest"), "2M buffer in 1M window: %s", err.msg);
    static float host[65536] __attribute__((aligned(64)));
    ts_eng_buf *m = ts_eng_buf_map(e, host, sizeof host, &err);
    NEED(m, err);
    ts_eng_buf *m2 = ts_eng_buf_map(e, host, sizeof host, &err);
    CHECK(!m2 && strstr(err.msg, "window full"), "mapped memory counts: %s", err.msg);
    ts_eng_buf_free(m2);
    ts_eng_stats st;
    ts_eng_get_stats(e, &st);
    CHECK(st.window_used == (600 << 10) + sizeof host && st.window_peak == st.window_used, "used %llu peak %llu",
          (unsigned long long)st.window_used, (unsigned long long)st.window_peak);
    ts_eng_buf_free(m);
    /* a too-large upload is refused */
    ts_eng_queue *q = ts_eng_queue_new(e, &err);
    NEED(q, err);
    uint8_t *src = t_alloc(700 << 10);
    CHECK(ts_eng_enqueue_write(q, a, 0, src, 700 << 10, &err) && strstr(err.msg, "past the end"), "upload: %s",
          err.msg);
    CHECK(ts_eng_enqueue_write(q, a, 100 << 10, src, 600 << 10, &err) && strstr(err.msg, "refused"), "upload: %s",
          err.msg);
    CHECK(ts_eng_enqueue_read(q, a, SIZE_MAX - 4, src, 8, &err), "read past the end accepted");
    CHECK(!ts_eng_enqueue_write(q, a, 0, src, 600 << 10, &err), "upload that fits: %s", err.msg);
    CHECK(!ts_eng_queue_finish(q, &err), "%s", err.msg);
    ts_eng_queue_free(q);
    free(src);
    /* a graph's scratch comes from the window too */
    ts_eng_buf_free(a);
    ts_eng_node mm = {
        .op = TS_OP_MATMUL,
        .matmul = {.w = TS_ENG_REF(0, 0), .x = TS_ENG_REF(1, 0), .y = TS_ENG_REF(2, 0), .n_in = 2048, .n_out = 16}};
    ts_eng_graph *g = ts_eng_graph_new(e, &mm, 1, 3, 64, &err);
    NEED(g, err);
    ts_eng_get_stats(e, &st);
    CHECK(st.window_used > 0, "graph scratch not counted");
    const uint64_t scratch = st.window_used;
    ts_eng_graph *g2 = ts_eng_graph_new(e, &mm, 1, 3, 64, &err);
    CHECK(!g2 && strstr(err.msg, "graph scratch"), "second graph in a full window: %s", err.msg);
    ts_eng_graph_free(g2);
    ts_eng_graph_free(g);
    ts_eng_get_stats(e, &st);
    CHECK(st.window_used == 0 && st.window_peak <= ((uint64_t)1 << 20), "peak %llu above the 1M window",
          (unsigned long long)st.window_peak);
    printf("window: 1 MiB window, peak %llu bytes, graph scratch %llu bytes; over-window buffer, map, graph and upload "
           "refused\n",
           (unsigned long long)st.window_peak, (unsigned long long)scratch);
    ts_eng_close(e);

    /* a model that does not fit: prefill refuses (the caller falls back) */
    e = open_or_die("loop,window=64K");
    ts_engine *cpu = open_or_die("cpu");
    ts_rt_block_shape ls[1] = {shape_llama};
    const uint32_t types[7] = {TS_TYPE_F16, TS_TYPE_F16, TS_TYPE_F16, TS_TYPE_F16,
                               TS_TYPE_F16, TS_TYPE_F16, TS_TYPE_F16};
    t_model tm;
    t_model_init(&tm, ls, 1, types, 0);
    float *xo = t_alloc(80 * 64 * sizeof(float));
    uint16_t *k = t_alloc(1 << 20), *v = t_alloc(1 << 20);
    CHECK(t_run(&tm, e, cpu, 16, sched3, 1, xo, k, v, NULL, NULL, 0, &err) && strstr(err.msg, "window full"),
          "model larger than the window: %s", err.msg);
    char line[700];
    printf("window: %s\n", ts_eng_fallback_line("loop,window=64K", &err, line, sizeof line));
    free(xo), free(k), free(v);
    t_model_free(&tm);
    ts_eng_close(e);
    ts_eng_close(cpu);
}

/* ---- probe and conversion ---- */

static void test_probe(void) {
    ts_engine *npu = open_or_die("loop:npu,delay_us=0"), *loop = open_or_die("loop");
    ts_engine *amx = open_or_die("amx,emulate=1"), *amx8 = open_or_die("amx,emulate=1,act=int8");
    ts_err err = {{0}};
    char note[1024];
    struct {
        ts_engine *e;
        uint32_t in, want;
        int64_t n_in;
    } cases[] = {
        {npu, TS_TYPE_Q4_0, TS_TYPE_Q4_0, 64},   {npu, TS_TYPE_Q4_1, TS_TYPE_Q8_0, 64},
        {npu, TS_TYPE_Q6_K, TS_TYPE_Q8_0, 256},  {npu, TS_TYPE_Q4_K, TS_TYPE_Q8_0, 256},
        {npu, TS_TYPE_BF16, TS_TYPE_F16, 64},    {npu, TS_TYPE_F32, TS_TYPE_F16, 64},
        {loop, TS_TYPE_Q6_K, TS_TYPE_Q6_K, 256}, {loop, TS_TYPE_Q4_1, TS_TYPE_Q4_1, 64},
        /* amx (emulated): probed in its own tile layout; types without a
         * tile kernel in the mode become Q8_0 */
        {amx, TS_TYPE_Q4_K, TS_TYPE_Q4_K, 256},  {amx, TS_TYPE_Q6_K, TS_TYPE_Q6_K, 256},
        {amx, TS_TYPE_F16, TS_TYPE_F16, 64},     {amx, TS_TYPE_Q5_1, TS_TYPE_Q5_1, 64},
        {amx, TS_TYPE_Q2_K, TS_TYPE_Q8_0, 256},  {amx8, TS_TYPE_Q5_1, TS_TYPE_Q5_1, 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int t = ts_rt_probe_weight_type(cases[i].e, cases[i].in, cases[i].n_in, note, sizeof note, &err);
        CHECK(t == (int)cases[i].want, "probe %s on %s: got %d, want %s (%s; %s)", ts_type_info(cases[i].in)->name,
              ts_eng_describe(cases[i].e)->name, t, ts_type_info(cases[i].want)->name, note, err.msg);
        printf("probe %s on %s -> %s: %s\n", ts_type_info(cases[i].in)->name, ts_eng_describe(cases[i].e)->name,
               t >= 0 ? ts_type_info((uint32_t)t)->name : "none", note);
    }
    ts_eng_stats st;
    ts_eng_get_stats(npu, &st);
    CHECK(st.graph_runs > 0 && st.window_used == 0, "probes ran on the device and gave back their memory");

    /* conversion: once, from the exact values; the source is untouched;
     * the device result equals the CPU kernel's on the converted weights */
    t_mat m = t_mat_new(TS_TYPE_Q4_1, 128, 48, 0.5f, 0);
    uint8_t *copy = t_alloc(m.rb * 48);
    memcpy(copy, m.rows, m.rb * 48);
    op_case c;
    case_matmul(&c, TS_TYPE_Q8_0, 128, 48, 32, 32, 0);
    CHECK(!ts_rt_convert_rows(TS_TYPE_Q4_1, m.rows, m.rb, TS_TYPE_Q8_0, c.in[0], 128, 48, &err), "%s", err.msg);
    CHECK(!memcmp(copy, m.rows, m.rb * 48), "conversion changed its source");
    memcpy(c.ref[0], c.in[0], c.bytes[0]);
    op_reference(&c, 0);
    CHECK(!op_run(npu, &c, &err), "%s", err.msg);
    CHECK(!memcmp(c.out[2], c.ref[2], c.bytes[2]), "converted Q8_0 matmul on npu differs from the CPU kernel");
    float *a = t_alloc(128 * sizeof(float)), *b = t_alloc(128 * sizeof(float));
    double worst = 0;
    for (int r = 0; r < 48; r++) {
        ts_dequant_row(TS_TYPE_Q4_1, m.rows + (size_t)r * m.rb, a, 128, NULL);
        ts_dequant_row(TS_TYPE_Q8_0, c.in[0] + (size_t)r * ts_row_size(TS_TYPE_Q8_0, 128), b, 128, NULL);
        const double e2 = ts_eng_nmse(b, a, 128);
        if (e2 > worst)
            worst = e2;
    }
    CHECK(worst < 1e-4, "Q4_1 -> Q8_0 row nmse %g", worst);
    printf("convert Q4_1 -> Q8_0: worst row nmse %.2g; npu matmul on it bit-identical to the CPU\n", worst);
    CHECK(ts_rt_convert_rows(TS_TYPE_Q6_K, m.rows, m.rb, TS_TYPE_Q6_K, c.in[0], 256, 1, &err) &&
              strstr(err.msg, "cannot write Q6_K"),
          "convert to Q6_K: %s", err.msg);
    free(a), free(b), free(copy);
    t_mat_free(&m);
    op_free(&c);
    ts_eng_close(npu);
    ts_eng_close(loop);
    ts_eng_close(amx);
    ts_eng_close(amx8);
}

/* ---- waits across engines ---- */

typedef struct {
    ts_eng_event *ev;
    int delay_ms;
} signal_job;

static void *signal_later(void *p) {
    signal_job *j = p;
    struct timespec ts = {0, (long)j->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    ts_err err = {{0}};
    CHECK(!ts_eng_event_signal(j->ev, &err), "%s", err.msg);
    return NULL;
}

static void test_cross_engine(void) {
    ts_err err = {{0}};
    ts_engine *a = open_or_die("loop"), *b = open_or_die("loop"), *c = open_or_die("cpu");
    ts_eng_queue *qa = ts_eng_queue_new(a, &err), *qb = ts_eng_queue_new(b, &err), *qc = ts_eng_queue_new(c, &err);
    NEED(qa && qb && qc, err);
    ts_eng_event *go = ts_eng_user_event(a, &err);
    NEED(go, err);
    /* a's queue: wait for go, then a marker; b's queue waits on that marker
     * (another engine's event), then copies staging, which the host fills
     * only just before go */
    CHECK(!ts_eng_enqueue_wait(qa, go, 0, &err), "%s", err.msg);
    ts_eng_event *ma = ts_eng_enqueue_marker(qa, &err);
    NEED(ma, err);
    CHECK(!ts_eng_queue_flush(qa, &err), "%s", err.msg);
    enum { N = 4096 };
    uint8_t *staging = t_alloc(N), *back = t_alloc(N);
    ts_eng_buf *buf = ts_eng_buf_alloc(b, TS_MEM_DEVICE, N, &err);
    NEED(buf, err);
    CHECK(!ts_eng_enqueue_wait(qb, ma, 0, &err), "b waits on a's marker: %s", err.msg);
    ts_eng_event_free(ma); /* the bridge holds its own reference */
    CHECK(!ts_eng_enqueue_write(qb, buf, 0, staging, N, &err), "%s", err.msg);
    CHECK(!ts_eng_enqueue_read(qb, buf, 0, back, N, &err), "%s", err.msg);
    ts_eng_event *mb = ts_eng_enqueue_marker(qb, &err);
    NEED(mb, err);
    CHECK(!ts_eng_queue_flush(qb, &err), "%s", err.msg);
    int early = 0;
    for (int i = 0; i < 50 && !early; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        early = ts_eng_event_done(mb);
    }
    CHECK(!early, "b's queue ran past a wait on a's pending marker");
    for (int i = 0; i < N; i++)
        staging[i] = (uint8_t)(i * 7 + 1);
    CHECK(!ts_eng_event_signal(go, &err), "%s", err.msg);
    CHECK(!ts_eng_event_wait(mb, &err), "%s", err.msg);
    CHECK(!memcmp(back, staging, N), "b copied staging before a's marker completed");
    printf("cross-engine: loop waits on another loop's marker: held %s, then exact\n", early ? "NOT" : "50 ms");

    /* a cpu queue runs on the host: its wait on a's event is a host wait */
    ts_eng_event *go2 = ts_eng_user_event(a, &err);
    NEED(go2, err);
    CHECK(!ts_eng_enqueue_wait(qa, go2, 0, &err), "%s", err.msg);
    ts_eng_event *ma2 = ts_eng_enqueue_marker(qa, &err);
    NEED(ma2, err);
    CHECK(!ts_eng_queue_flush(qa, &err), "%s", err.msg);
    signal_job j = {go2, 30};
    pthread_t th;
    CHECK(!pthread_create(&th, NULL, signal_later, &j), "thread");
    const uint64_t t0 = ts_now_ns();
    CHECK(!ts_eng_enqueue_wait(qc, ma2, 0, &err), "cpu waits on a loop marker: %s", err.msg);
    const double ms = (double)(ts_now_ns() - t0) / 1e6;
    CHECK(ts_eng_event_done(ma2) && ms >= 20.0, "the cpu wait returned after %.1f ms, marker done %d", ms,
          ts_eng_event_done(ma2));
    pthread_join(th, NULL);
    printf("cross-engine: cpu waits on a loop marker on the host: %.1f ms\n", ms);
    ts_eng_event_free(ma2);
    ts_eng_event_free(go2);
    ts_eng_event_free(go);
    ts_eng_event_free(mb);
    ts_eng_buf_free(buf);
    ts_eng_queue_free(qa);
    ts_eng_queue_free(qb);
    ts_eng_queue_free(qc);
    ts_eng_close(a);
    ts_eng_close(b);
    ts_eng_close(c);
    free(staging);
    free(back);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--expect-opencl-off")) {
        /* a TS_OPENCL=OFF build: opening it is a clean, explained error */
        ts_err err = {{0}};
        ts_engine *e = ts_eng_open("opencl", &err);
        CHECK(!e && strstr(err.msg, "not in this build"), "opencl in an OFF build: %s", err.msg);
        char line[700];
        printf("%s\n", ts_eng_fallback_line("opencl", &err, line, sizeof line));
        return g_fail ? 1 : 0;
    }
    test_registry();
    test_ops_bit_identical("loop,threads=2");
    test_ops_bit_identical("cpu");
    test_ops_bit_identical("amx,emulate=1,threads=2"); /* unpacked weights: the CPU kernels behind it */
    test_npu_matmul();
    test_prefill_loop();
    test_own_layout();
    test_placement();
    test_ordering();
    test_cross_engine();
    test_window();
    test_probe();
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("all engine checks passed\n");
    return 0;
}
