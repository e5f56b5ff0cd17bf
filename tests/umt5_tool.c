/* umt5_tool.c - the umT5 encoder for the Python oracle (tests/test_umt5_oracle.py):
 *
 *   umt5_tool encode MODEL.gguf ENGINE THREADS N N_REAL IDS.i32 OUT.f32
 *       ids [N] -> states [N][d_model] (keys from N_REAL on masked)
 *   umt5_tool padded MODEL.gguf ENGINE THREADS N_REAL N_PAD IDS.i32 OUT.f32
 *       ids [N_REAL] -> [N_PAD][d_model], zero rows past N_REAL (Wan's)
 *   umt5_tool open MODEL.gguf
 *       opens and validates the file, prints its configuration
 *   umt5_tool buckets N_BUCKET MAX_DISTANCE LO HI
 *       prints ts_umt5_bucket(rel) for rel = LO .. HI, space separated
 *
 * IDS is raw little-endian int32, OUT raw little-endian f32. Prints the
 * configuration and timings. Exit 0, or 1 with the error on stderr. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "video/umt5.h"

static void *read_all(const char *path, size_t n, size_t size) {
    FILE *f = fopen(path, "rb");
    void *p = f ? malloc(n * size) : NULL;
    if (!p || fread(p, size, n, f) != n) {
        fprintf(stderr, "umt5_tool: cannot read %zu items from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return p;
}

static void print_cfg(const ts_umt5 *m) {
    const ts_umt5_config *c = ts_umt5_cfg(m);
    printf("umt5: d %d ff %d heads %d x %d layers %d vocab %d buckets %d max_distance %d ctx %d eps %g "
           "bias tables %d\n",
           c->d_model, c->d_ff, c->n_head, c->d_kv, c->n_layer, c->n_vocab, c->n_bucket, c->max_distance, c->n_ctx,
           (double)c->eps, c->rel_bias_layers);
}

int main(int argc, char **argv) {
    ts_err err = {{0}};
    if (argc == 6 && !strcmp(argv[1], "buckets")) {
        const int nb = atoi(argv[2]), md = atoi(argv[3]);
        for (long long r = atoll(argv[4]); r <= atoll(argv[5]); r++)
            printf("%d ", ts_umt5_bucket(r, nb, md));
        printf("\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "open")) {
        ts_umt5 *m = ts_umt5_open(argv[2], &err);
        if (!m) {
            fprintf(stderr, "umt5_tool: %s\n", err.msg);
            return 1;
        }
        print_cfg(m);
        ts_umt5_close(m);
        return 0;
    }
    const bool padded = argc == 9 && !strcmp(argv[1], "padded");
    if (!(argc == 9 && (padded || !strcmp(argv[1], "encode")))) {
        fprintf(stderr, "usage: umt5_tool encode MODEL ENGINE THREADS N N_REAL IDS OUT\n"
                        "       umt5_tool padded MODEL ENGINE THREADS N_REAL N_PAD IDS OUT\n"
                        "       umt5_tool open MODEL | buckets N_BUCKET MAX_DISTANCE LO HI\n");
        return 1;
    }
    /* every path frees what it made (the sanitizer build checks for leaks) */
    int rc = 1;
    ts_umt5_run *r = NULL;
    int32_t *ids = NULL;
    float *out = NULL;
    ts_umt5 *m = ts_umt5_open(argv[2], &err);
    if (!m)
        goto done;
    print_cfg(m);
    const int a = atoi(argv[5]), b = atoi(argv[6]);
    const int n_ids = a, n_out = padded ? b : a; /* ids: encode's N, padded's N_REAL */
    if (n_ids < 1 || n_out < 1 || n_out > (1 << 20)) {
        snprintf(err.msg, sizeof err.msg, "bad sizes %d, %d", a, b);
        goto done;
    }
    ts_umt5_run_params p = {.engine = argv[3], .n_threads = atoi(argv[4]), .max_tokens = 0};
    if (!(r = ts_umt5_run_new(m, &p, &err)))
        goto done;
    ids = read_all(argv[7], (size_t)n_ids, sizeof *ids);
    const size_t no = (size_t)n_out * (size_t)ts_umt5_cfg(m)->d_model;
    out = malloc(no * sizeof *out);
    if (!out || (padded ? ts_umt5_encode_padded(r, ids, a, b, out, &err) : ts_umt5_encode(r, ids, a, b, out, &err)))
        goto done;
    FILE *f = fopen(argv[8], "wb");
    if (!f || fwrite(out, sizeof *out, no, f) != no || fclose(f)) {
        snprintf(err.msg, sizeof err.msg, "cannot write %s", argv[8]);
        goto done;
    }
    ts_umt5_stats st;
    ts_umt5_run_stats(r, &st);
    printf("tokens %llu: layers %.3f ms, total %.3f ms\n", (unsigned long long)st.tokens, st.layer_ns * 1e-6,
           st.total_ns * 1e-6);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "umt5_tool: %s\n", err.msg);
    ts_umt5_run_free(r);
    ts_umt5_close(m);
    free(ids), free(out);
    return rc;
}
