/* test_engine_window.c - the attention node's non-causal (window) mode,
 * ts_eng_enqueue_graph_window with n_kv > 0 (diffusion LLMs' window
 * forward), against the CPU reference: ts_attention / ts_attention_fast
 * with ts_attn_params.n_kv, the kernels the CPU window forward calls.
 *
 *   test_engine_window [SPEC]   (default loop)
 *     SPEC loop or cpu: bit-identical (they call the same kernel);
 *     SPEC opencl:      NMSE <= 1e-9 (docs/ENGINE.md: attention is f32
 *                       arithmetic in another order, ~1e-13 expected).
 * Also: the window result differs from the causal one of the same inputs
 * (n_kv really reaches the kernel), n_kv = 0 is the causal run, and bad
 * n_kv (not reaching the window start, past the cache, with n_swa) is
 * refused. n_kv inside the window (rows past it are padding: a window run
 * at a width the device requires) is a window run like any other.
 */
/* the shared harness's other helpers are not all used here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "engine_ops_util.h"
#include "engine_test_util.h"
#include "kernels/fastops.h"

/* the CPU window forward's attention over c's inputs into out [n_tok][nh*hd] */
static void reference(const op_case *c, int64_t n_kv, float *out) {
    const ts_eng_node *n = &c->node;
    ts_err err = {{0}};
    ts_threadpool *pool = ts_threadpool_new(1, &err);
    NEED(pool, err);
    const ts_attn_params ap = {.n_head = n->attention.n_head,
                               .n_head_kv = n->attention.n_head_kv,
                               .head_dim = n->attention.head_dim,
                               .scale = n->attention.scale,
                               .softcap = n->attention.softcap,
                               .n_swa = n->attention.n_swa,
                               .kv_f16 = n->attention.kv_f16,
                               .kv_stride = (int64_t)n->attention.n_head_kv * n->attention.head_dim,
                               .n_kv = n_kv};
    int64_t stride = n->attention.n_ctx + 2 * n->attention.head_dim;
    const int64_t f = ts_attention_fast_scratch(&ap);
    if (f > stride)
        stride = f;
    float *scratch = t_alloc((size_t)stride * sizeof(float));
    const void *q = c->in[n->attention.q.slot], *kc = c->in[n->attention.kc.slot], *vc = c->in[n->attention.vc.slot];
    if (n->attention.fast)
        ts_attention_fast(pool, &ap, q, kc, vc, c->pos0, c->n_tok, out, scratch, stride);
    else
        ts_attention(pool, &ap, q, kc, vc, c->pos0, c->n_tok, out, scratch, stride);
    free(scratch);
    ts_threadpool_free(pool);
}

int main(int argc, char **argv) {
    if (argc > 2) {
        fprintf(stderr, "usage: test_engine_window [loop|cpu|opencl]\n");
        return 2;
    }
    const char *spec = argc > 1 ? argv[1] : "loop";
    const int exact = strcmp(spec, "opencl") != 0;
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open(spec, &err);
    NEED(e, err);
    /* nh, nkv, hd, softcap, f16, pos0, n_tok, n_kv, n_ctx: windows at the
     * start, in the middle with cached rows before and after (dual cache),
     * and ending the cache; GQA, softcap, f16 and f32 caches */
    static const struct {
        int nh, nkv, hd;
        float softcap;
        int f16;
        int64_t pos0;
        int n_tok;
        int64_t n_kv;
        int n_ctx;
    } cs[] = {
        {4, 4, 16, 0.0f, 1, 0, 8, 8, 16},    {4, 2, 32, 0.0f, 1, 5, 7, 20, 24},  {8, 2, 64, 0.0f, 0, 16, 16, 48, 64},
        {4, 1, 16, 30.0f, 1, 3, 5, 8, 8},    {2, 2, 128, 0.0f, 0, 0, 33, 33, 40}, {4, 2, 64, 0.0f, 1, 40, 24, 100, 128},
        /* padded: 9 of 32 rows are the window, the rest attend its keys */
        {4, 2, 32, 0.0f, 1, 7, 32, 16, 40},
    };
    double worst = 0.0;
    int n_cases = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int fast = 0; fast < 2; fast++) {
            op_case c;
            case_attention(&c, cs[i].nh, cs[i].nkv, cs[i].hd, 0, cs[i].softcap, cs[i].f16, cs[i].pos0, cs[i].n_tok,
                           cs[i].n_ctx);
            c.node.attention.fast = fast;
            const int os = c.node.attention.out.slot;
            const int64_t cnt = (int64_t)c.n_tok * cs[i].nh * cs[i].hd;
            float *ref = t_alloc((size_t)cnt * sizeof(float)), *causal = t_alloc((size_t)cnt * sizeof(float));
            reference(&c, cs[i].n_kv, ref);
            reference(&c, 0, causal);
            char label[128];
            snprintf(label, sizeof label, "case %zu (%s, pos0 %lld, %d tokens, n_kv %lld, %s)", i,
                     fast ? "fast" : "plain", (long long)cs[i].pos0, cs[i].n_tok, (long long)cs[i].n_kv,
                     cs[i].f16 ? "f16" : "f32");
            CHECK(memcmp(ref, causal, (size_t)cnt * sizeof(float)) != 0, "%s: window == causal reference", label);
            if (op_run_window(e, &c, cs[i].n_kv, &err)) {
                CHECK(0, "%s: %s", label, err.msg);
            } else if (exact) {
                CHECK(!memcmp(c.out[os], ref, (size_t)cnt * sizeof(float)), "%s: not bit-identical", label);
            } else {
                const double nm = ts_eng_nmse((float *)(void *)c.out[os], ref, cnt);
                CHECK(nm <= 1e-9, "%s: nmse %.3g > 1e-9", label, nm);
                if (nm > worst)
                    worst = nm;
            }
            /* n_kv 0 through the window entry point is the causal run */
            if (op_run_window(e, &c, 0, &err)) {
                CHECK(0, "%s causal: %s", label, err.msg);
            } else if (exact) {
                CHECK(!memcmp(c.out[os], causal, (size_t)cnt * sizeof(float)), "%s causal: not bit-identical", label);
            } else {
                const double nm = ts_eng_nmse((float *)(void *)c.out[os], causal, cnt);
                CHECK(nm <= 1e-9, "%s causal: nmse %.3g > 1e-9", label, nm);
            }
            n_cases++;
            free(ref);
            free(causal);
            op_free(&c);
        }
    /* refusals: n_kv not reaching the window start, past the cache, with n_swa */
    {
        op_case c;
        case_attention(&c, 4, 2, 16, 0, 0.0f, 1, 4, 8, 32);
        CHECK(op_run_window(e, &c, 4, &err) < 0 && strstr(err.msg, "n_kv"), "n_kv at the window start: '%s'", err.msg);
        CHECK(op_run_window(e, &c, 33, &err) < 0 && strstr(err.msg, "n_kv"), "n_kv past the cache: '%s'", err.msg);
        op_free(&c);
        case_attention(&c, 4, 2, 16, 4, 0.0f, 1, 4, 8, 32);
        CHECK(op_run_window(e, &c, 16, &err) < 0 && strstr(err.msg, "n_swa"), "window with n_swa: '%s'", err.msg);
        op_free(&c);
    }
    ts_eng_close(e);
    if (exact)
        printf("window attention on %s: %d cases bit-identical to ts_attention(_fast) with n_kv\n", spec, n_cases);
    else
        printf("window attention on %s: %d cases, worst nmse %.2e (bound 1e-9)\n", spec, n_cases, worst);
    if (g_fail)
        fprintf(stderr, "%d failure(s)\n", g_fail);
    return g_fail ? 1 : 0;
}
