/* wan_vae_tool.c - the Wan VAE decoder for the Python oracle
 * (tests/test_wan_vae_oracle.py):
 *
 *   wan_vae_tool VAE.gguf ENGINE THREADS T h w LATENTS.f32 FRAMES.f32
 *
 * LATENTS [16][T][h][w] (de-normalised) and FRAMES [3][1 + 4 (T - 1)][8h][8w]
 * are raw f32. Exit 0, or 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "video/wan_vae.h"

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: wan_vae_tool VAE ENGINE THREADS T h w LATENTS FRAMES\n");
        return 1;
    }
    ts_err err = {{0}};
    ts_wan_vae *v = ts_wan_vae_open(argv[1], &err);
    const int T = atoi(argv[4]), h = atoi(argv[5]), w = atoi(argv[6]);
    ts_wan_vae_run *r = v ? ts_wan_vae_run_new(v, argv[2], atoi(argv[3]), T, h, w, &err) : NULL;
    if (!r) {
        fprintf(stderr, "wan_vae_tool: %s\n", err.msg);
        return 1;
    }
    const size_t nl = (size_t)16 * T * h * w, nf = (size_t)3 * (1 + 4 * (T - 1)) * 64 * h * w;
    float *lat = malloc(nl * sizeof *lat), *fr = malloc(nf * sizeof *fr);
    FILE *f = fopen(argv[7], "rb");
    if (!f || fread(lat, sizeof *lat, nl, f) != nl) {
        fprintf(stderr, "wan_vae_tool: cannot read %zu floats from %s\n", nl, argv[7]);
        return 1;
    }
    fclose(f);
    if (ts_wan_vae_decode(r, lat, fr, NULL, NULL, &err)) {
        fprintf(stderr, "wan_vae_tool: %s\n", err.msg);
        return 1;
    }
    f = fopen(argv[8], "wb");
    if (!f || fwrite(fr, sizeof *fr, nf, f) != nf || fclose(f)) {
        fprintf(stderr, "wan_vae_tool: cannot write %s\n", argv[8]);
        return 1;
    }
    ts_wan_vae_stats st;
    ts_wan_vae_run_stats(r, &st);
    printf("vae: %d latent frames of %dx%d: %.1f ms (matmuls %.1f ms), %.2f GFLOP, buffers %.1f MiB\n", T, h, w,
           st.frames_ns * 1e-6, st.matmul_ns * 1e-6, st.flops * 1e-9, ts_wan_vae_run_bytes(r) / 1048576.0);
    ts_wan_vae_run_free(r);
    ts_wan_vae_close(v);
    free(lat), free(fr);
    return 0;
}
