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
 *   umt5_tool tokens MODEL.gguf < records
 *       the file's tokenizer over records of [u32 little-endian length][bytes]
 *       (valid UTF-8), one line each: A|N|D|B with A the ids with
 *       add_special and parse_special, N the hex of the normalized text
 *       (ts_ugm_normalize), D the hex of A detokenized with the special
 *       tokens rendered, B the ids without add_special or parse_special
 *
 * IDS is raw little-endian int32, OUT raw little-endian f32. Prints the
 * configuration and timings. Exit 0, or 1 with the error on stderr. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tokenizer.h"
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

static void put_ids(const ts_tokenizer *t, const char *s, size_t n, bool special) {
    ts_err err = {{0}};
    const int64_t k = ts_tokenize(t, s, n, special, special, NULL, 0, &err);
    int32_t *ids = k >= 0 ? malloc((size_t)(k + 1) * sizeof *ids) : NULL;
    if (!ids || ts_tokenize(t, s, n, special, special, ids, k, &err) != k) {
        fprintf(stderr, "umt5_tool: tokenize: %s\n", err.msg);
        exit(1);
    }
    for (int64_t i = 0; i < k; i++)
        printf("%s%d", i ? " " : "", ids[i]);
    if (special) {
        /* N and D follow A */
        putchar('|');
        ts_tok_scratch sc = {0};
        size_t m;
        if (ts_ugm_normalize(t, s, n, &sc, &m, &err) < 0) {
            fprintf(stderr, "umt5_tool: normalize: %s\n", err.msg);
            exit(1);
        }
        for (size_t i = 0; i < m; i++)
            printf("%02x", (unsigned char)sc.buf[i]);
        ts_scratch_free(&sc);
        putchar('|');
        const int64_t d = ts_detokenize(t, ids, k, true, NULL, 0);
        char *buf = d >= 0 ? malloc((size_t)d + 1) : NULL;
        if (!buf || ts_detokenize(t, ids, k, true, buf, (size_t)d + 1) != d) {
            fprintf(stderr, "umt5_tool: detokenize failed\n");
            exit(1);
        }
        for (int64_t i = 0; i < d; i++)
            printf("%02x", (unsigned char)buf[i]);
        free(buf);
    }
    free(ids);
}

static int tokens(const char *path) {
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(path, &err);
    ts_tokenizer *t = g ? ts_tokenizer_load(g, &err) : NULL;
    ts_gguf_close(g);
    if (!t) {
        fprintf(stderr, "umt5_tool: %s\n", err.msg);
        return 1;
    }
    unsigned char hdr[4];
    while (fread(hdr, 1, 4, stdin) == 4) {
        const size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
        char *s = malloc(n + 1);
        if (!s || fread(s, 1, n, stdin) != n) {
            fprintf(stderr, "umt5_tool: short record\n");
            return 1;
        }
        put_ids(t, s, n, true); /* A|N|D */
        putchar('|');
        put_ids(t, s, n, false); /* B */
        putchar('\n');
        free(s);
    }
    ts_tokenizer_free(t);
    return 0;
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
    if (argc == 3 && !strcmp(argv[1], "tokens"))
        return tokens(argv[2]);
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
                        "       umt5_tool open MODEL | tokens MODEL | buckets N_BUCKET MAX_DISTANCE LO HI\n");
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
