/* wan_tool.c - one Wan DiT forward for the Python oracle (tests/test_wan_oracle.py):
 *
 *   wan_tool forward MODEL.gguf ENGINE THREADS F H W N_TEXT T LATENTS.f32 TEXT.f32 OUT.f32 [LORA.gguf]
 *
 * With LORA, the forward is the detail expert's (the adapter applied).
 * TS_WAN_ROWS=N in the environment caps the tokens per graph (row chunks).
 * LATENTS [in_ch][F][H][W], TEXT [N_TEXT][text_dim] and OUT [out_ch][F][H][W]
 * are raw little-endian f32. Prints the configuration and the timings.
 * Exit 0, or 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "video/wan.h"

static float *read_f32(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    float *p = f ? malloc(n * sizeof *p) : NULL;
    if (!p || fread(p, sizeof *p, n, f) != n) {
        fprintf(stderr, "wan_tool: cannot read %zu floats from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 13 && argc != 14) {
        fprintf(stderr, "usage: wan_tool forward MODEL ENGINE THREADS F H W N_TEXT T LATENTS TEXT OUT [LORA]\n");
        return 1;
    }
    ts_err err = {{0}};
    ts_wan *w = ts_wan_open(argv[2], &err);
    if (!w) {
        fprintf(stderr, "wan_tool: %s\n", err.msg);
        return 1;
    }
    const ts_wan_config *c = ts_wan_cfg(w);
    ts_wan_run_params p = {.engine = argv[3], .n_threads = atoi(argv[4]), .frames = atoi(argv[5]),
                           .height = atoi(argv[6]), .width = atoi(argv[7]), .n_text = atoi(argv[8]), .n_texts = 1};
    /* TS_WAN_ROWS=N: graphs of at most N tokens (the row-chunk split) */
    if (getenv("TS_WAN_ROWS")) p.max_rows = atoi(getenv("TS_WAN_ROWS"));
    printf("wan: d %d ffn %d heads %d x %d layers %d in %d out %d text %d freq %d patch %dx%dx%d\n", c->dim, c->ffn,
           c->n_head, c->head_dim, c->n_layer, c->in_ch, c->out_ch, c->text_dim, c->freq_dim, c->patch[0],
           c->patch[1], c->patch[2]);
    ts_wan_lora *lo = NULL;
    if (argc == 14 && !(p.lora = lo = ts_wan_lora_open(w, argv[13], 0.0f, &err))) {
        fprintf(stderr, "wan_tool: %s\n", err.msg);
        return 1;
    }
    ts_wan_run *r = ts_wan_run_new(w, &p, &err);
    if (!r) {
        fprintf(stderr, "wan_tool: %s\n", err.msg);
        return 1;
    }
    const size_t nl = (size_t)c->in_ch * p.frames * p.height * p.width;
    const size_t no = (size_t)c->out_ch * p.frames * p.height * p.width;
    float *lat = read_f32(argv[10], nl), *txt = read_f32(argv[11], (size_t)p.n_text * c->text_dim);
    float *out = malloc(no * sizeof *out);
    if (ts_wan_run_set_text(r, 0, txt, &err) || ts_wan_run_forward(r, lat, atof(argv[9]), 0, lo != NULL, out, &err)) {
        fprintf(stderr, "wan_tool: %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(argv[12], "wb");
    if (!f || fwrite(out, sizeof *out, no, f) != no || fclose(f)) {
        fprintf(stderr, "wan_tool: cannot write %s\n", argv[12]);
        return 1;
    }
    ts_wan_stats st;
    ts_wan_run_stats(r, &st);
    printf("tokens %lld: blocks %.3f ms (%.2f GFLOP/s), embed %.3f ms, head %.3f ms, text %.3f ms\n",
           (long long)ts_wan_run_tokens(r), st.block_ns * 1e-6,
           st.block_ns ? st.block_flops * (double)st.block_runs / (double)st.block_ns : 0.0, st.embed_ns * 1e-6,
           st.head_ns * 1e-6, st.text_ns * 1e-6);
    ts_wan_run_free(r);
    ts_wan_lora_close(lo);
    ts_wan_close(w);
    free(lat), free(txt), free(out);
    return 0;
}
