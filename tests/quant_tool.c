/* quant_tool.c - exposes the reference quant kernels to the Python oracle test
 * (tests/test_quant_oracle.py), which runs it as a subprocess.
 *
 *   ts_quant_tool dequant TYPE IN.bin OUT.f32   raw blocks -> f32 (little-endian)
 *   ts_quant_tool quant   TYPE IN.f32 OUT.bin   f32 -> raw blocks
 *   ts_quant_tool dump    MODEL.gguf OUT|-      every tensor of a GGUF, in file
 *                                               order, dequantized to f32 and
 *                                               concatenated (- = stdout)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

static int die(const char *msg) {
    fprintf(stderr, "ts_quant_tool: %s\n", msg);
    return 1;
}

static void *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    *size = n;
    return buf;
}

static int write_all(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* dequant / quant of a raw buffer as one row */
static int convert(int quant, const char *tname, const char *in, const char *out) {
    int type = ts_type_from_name(tname);
    if (type < 0) return die("unknown type");
    const ts_type_traits *t = ts_type_info((uint32_t)type);
    size_t size;
    void *src = read_all(in, &size);
    if (!src) return die("cannot read input");
    int64_t n;
    size_t out_size;
    if (quant) {
        if (size % 4) return die("input size is not a multiple of 4");
        n = (int64_t)(size / 4);
        out_size = ts_row_size((uint32_t)type, n);
    } else {
        if (size % t->size) return die("input size is not a multiple of the block size");
        n = (int64_t)(size / t->size) * t->blck;
        out_size = (size_t)n * 4;
    }
    void *dst = malloc(out_size ? out_size : 1);
    if (!dst) return die("out of memory");
    ts_err err = {{0}};
    int rc = quant ? ts_quant_row((uint32_t)type, src, dst, n, &err)
                   : ts_dequant_row((uint32_t)type, src, dst, n, &err);
    if (rc) return die(err.msg);
    if (write_all(out, dst, out_size)) return die("cannot write output");
    free(src);
    free(dst);
    return 0;
}

static int dump(const char *model, const char *out) {
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(model, &err);
    if (!g) return die(err.msg);
    FILE *f = strcmp(out, "-") ? fopen(out, "wb") : stdout;
    if (!f) return die("cannot open output");
    int rc = 0;
    float *buf = NULL;
    size_t cap = 0;
    for (int64_t i = 0; i < ts_gguf_n_tensors(g) && !rc; i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        const int64_t row = t->ne[0], rows = t->n_elements / t->ne[0];
        const size_t rb = ts_row_size(t->type, row);
        if ((size_t)row > cap) {
            free(buf);
            cap = (size_t)row;
            buf = malloc(cap * sizeof *buf);
            if (!buf) return die("out of memory");
        }
        for (int64_t r = 0; r < rows && !rc; r++) {
            if (ts_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, buf, row, &err)) {
                fprintf(stderr, "ts_quant_tool: tensor '%s': %s\n", t->name, err.msg);
                rc = 1;
            } else if (fwrite(buf, sizeof *buf, (size_t)row, f) != (size_t)row) {
                fprintf(stderr, "ts_quant_tool: write failed: %s\n", strerror(errno));
                rc = 1;
            }
        }
    }
    free(buf);
    if (fflush(f) || (f != stdout && fclose(f))) rc = die("cannot write output");
    ts_gguf_close(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "dequant")) return convert(0, argv[2], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[1], "quant")) return convert(1, argv[2], argv[3], argv[4]);
    if (argc == 4 && !strcmp(argv[1], "dump")) return dump(argv[2], argv[3]);
    fprintf(stderr, "usage: ts_quant_tool dequant|quant TYPE IN OUT | dump MODEL.gguf OUT|-\n");
    return 2;
}
