/* cmd_quantize.c - `tessera quantize IN.gguf OUT.gguf TYPE [-t N]`: rewrites a
 * model's 2-D weight matrices in another element type.
 *
 * Every tensor whose name ends in ".weight", with n_dims == 2 and a row length
 * divisible by TYPE's block size (token_embd included, as llama.cpp does), is
 * dequantized row by row from its stored type to f32 and quantized to TYPE with
 * the reference quantizers of src/quant. Everything else (norms, biases, any
 * 1-D tensor) is copied byte for byte. All metadata is copied; general.file_type
 * is set to TYPE's llama.cpp LLAMA_FTYPE number and general.quantization_version
 * to 2 (ggml's current block format version).
 *
 * Converted tensors are held in memory until the file is written (the output
 * is at most the f32 size of the weights); copied tensors are written straight
 * from the input's mmap.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"

/* Output types and their llama.cpp LLAMA_FTYPE_* values (general.file_type). */
static const struct {
    uint32_t type;
    uint32_t ftype;
} targets[] = {
    {TS_TYPE_Q4_0, 2}, {TS_TYPE_Q4_1, 3}, {TS_TYPE_Q8_0, 7},
    {TS_TYPE_F16, 1},  {TS_TYPE_BF16, 32}, {TS_TYPE_F32, 0},
};
#define N_TARGETS (sizeof targets / sizeof targets[0])

static void list_targets(FILE *f) {
    for (size_t i = 0; i < N_TARGETS; i++)
        fprintf(f, "%s%s", i ? ", " : "", ts_type_info(targets[i].type)->name);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera quantize IN.gguf OUT.gguf TYPE [-t N]\n"
            "  Rewrite every 2-D weight matrix (name ending in .weight, row length a\n"
            "  multiple of TYPE's block size, token_embd included) in TYPE; norms and\n"
            "  other 1-D tensors are copied unchanged. Sets general.file_type.\n"
            "  TYPE             one of: ");
    list_targets(f);
    fprintf(f,
            "\n"
            "  -t, --threads N  worker threads (default: physical cores)\n"
            "  -h, --help       show this help\n");
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* One tensor's conversion, split over rows between threads. */
typedef struct {
    const ts_gguf_tensor *t;
    uint32_t dst_type;
    size_t in_row_bytes, out_row_bytes;
    uint8_t *out;
    float **scratch; /* one row of f32 per thread */
    int *failed;     /* per thread */
    ts_err *errs;    /* per thread */
} convert_job;

static void convert_rows(void *ctx, int64_t begin, int64_t end, int tid) {
    convert_job *j = ctx;
    const int64_t n = j->t->ne[0];
    for (int64_t r = begin; r < end && !j->failed[tid]; r++) {
        const uint8_t *src = (const uint8_t *)j->t->data + (size_t)r * j->in_row_bytes;
        if (ts_dequant_row(j->t->type, src, j->scratch[tid], n, &j->errs[tid]) ||
            ts_quant_row(j->dst_type, j->scratch[tid], j->out + (size_t)r * j->out_row_bytes, n, &j->errs[tid]))
            j->failed[tid] = 1;
    }
}

int cli_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tessera quantize: %s needs a value\n", a);
                return 2;
            }
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 1 || v > TS_MAX_THREADS) {
                fprintf(stderr, "tessera quantize: bad thread count '%s' (expected 1..%d)\n", argv[i],
                        TS_MAX_THREADS);
                return 2;
            }
            n_threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tessera quantize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "tessera quantize: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, "tessera quantize: expected IN.gguf OUT.gguf TYPE\n");
        usage(stderr);
        return 2;
    }
    const char *in_path = pos[0], *out_path = pos[1], *type_name = pos[2];

    int tid = ts_type_from_name(type_name);
    size_t ti = 0;
    while (ti < N_TARGETS && (tid < 0 || targets[ti].type != (uint32_t)tid)) ti++;
    if (ti == N_TARGETS) {
        fprintf(stderr, "tessera quantize: unknown output type '%s'; accepted: ", type_name);
        list_targets(stderr);
        fprintf(stderr, "\n");
        return 2;
    }
    const uint32_t dst_type = targets[ti].type;
    const ts_type_traits *dt = ts_type_info(dst_type);

    struct stat st_in, st_out;
    if (stat(in_path, &st_in) == 0 && stat(out_path, &st_out) == 0 && st_in.st_dev == st_out.st_dev &&
        st_in.st_ino == st_out.st_ino) {
        fprintf(stderr, "tessera quantize: output '%s' is the input file\n", out_path);
        return 2;
    }

    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(in_path, &err);
    if (!g) {
        fprintf(stderr, "tessera quantize: %s: %s\n", in_path, err.msg);
        return 1;
    }
    int rc = 1;
    ts_gguf_writer *w = NULL;
    ts_threadpool *pool = NULL;
    float *scratch[TS_MAX_THREADS] = {0};
    int failed[TS_MAX_THREADS] = {0};
    static ts_err errs[TS_MAX_THREADS];

    w = ts_gguf_writer_new(&err);
    if (!w) goto fail;
    for (int64_t i = 0; i < ts_gguf_n_kv(g); i++)
        if (ts_gguf_writer_add_kv_from(w, ts_gguf_kv_at(g, i), &err)) goto fail;
    if (ts_gguf_writer_set_u32(w, "general.file_type", targets[ti].ftype, &err) ||
        ts_gguf_writer_set_u32(w, "general.quantization_version", 2, &err))
        goto fail;

    pool = ts_threadpool_new(n_threads, &err);
    if (!pool) goto fail;
    const int nt = ts_threadpool_n_threads(pool);
    int64_t max_row = 1;
    for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++)
        if (ts_gguf_tensor_at(g, i)->ne[0] > max_row) max_row = ts_gguf_tensor_at(g, i)->ne[0];
    for (int k = 0; k < nt; k++) {
        scratch[k] = malloc((size_t)max_row * sizeof(float));
        if (!scratch[k]) {
            ts_err_set(&err, "out of memory for a row of %lld floats", (long long)max_row);
            goto fail;
        }
    }

    const int64_t n_t = ts_gguf_n_tensors(g);
    uint64_t bytes_in = 0, bytes_out = 0;
    int64_t n_converted = 0;
    fprintf(stderr, "tessera quantize: %s -> %s as %s (%d threads)\n", in_path, out_path, dt->name, nt);
    for (int64_t i = 0; i < n_t; i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        const ts_type_traits *st = ts_type_info(t->type);
        const int rewrite = ends_with(t->name, ".weight") && t->n_dims == 2 && t->ne[0] % dt->blck == 0;
        const char *note = NULL;
        bytes_in += t->nbytes;
        if (rewrite && t->type != dst_type && st->can_dequant) {
            const size_t in_rb = ts_row_size(t->type, t->ne[0]), out_rb = ts_row_size(dst_type, t->ne[0]);
            const int64_t rows = t->n_elements / t->ne[0];
            const uint64_t nbytes = (uint64_t)out_rb * (uint64_t)rows;
            uint8_t *buf = malloc(nbytes ? (size_t)nbytes : 1);
            if (!buf) {
                ts_err_set(&err, "tensor '%s': out of memory for %llu bytes", t->name, (unsigned long long)nbytes);
                goto fail;
            }
            convert_job job = {t, dst_type, in_rb, out_rb, buf, scratch, failed, errs};
            ts_parallel_for(pool, rows, convert_rows, &job);
            for (int k = 0; k < nt; k++)
                if (failed[k]) {
                    free(buf);
                    ts_err_set(&err, "tensor '%s': %s", t->name, errs[k].msg);
                    goto fail;
                }
            if (ts_gguf_writer_add_tensor_owned(w, t->name, dst_type, t->n_dims, t->ne, buf, nbytes, &err))
                goto fail;
            bytes_out += nbytes;
            n_converted++;
            fprintf(stderr, "[%4lld/%lld] %-32s %-5s -> %-5s %6lld x %-6lld %8.2f -> %8.2f MiB\n", (long long)i + 1,
                    (long long)n_t, t->name, st->name, dt->name, (long long)t->ne[0], (long long)t->ne[1],
                    mib(t->nbytes), mib(nbytes));
            continue;
        }
        if (rewrite && t->type == dst_type) note = "already in the output type";
        else if (rewrite) note = "cannot dequantize this type; kept as is";
        else if (t->n_dims == 2 && ends_with(t->name, ".weight")) note = "row length not a multiple of the block size";
        if (ts_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, &err)) goto fail;
        bytes_out += t->nbytes;
        fprintf(stderr, "[%4lld/%lld] %-32s %-5s    kept%s%s\n", (long long)i + 1, (long long)n_t, t->name, st->name,
                note ? " - " : "", note ? note : "");
    }

    if (ts_gguf_writer_write(w, out_path, &err)) goto fail;
    struct stat st_w;
    uint64_t file_out = stat(out_path, &st_w) == 0 ? (uint64_t)st_w.st_size : 0;
    fprintf(stderr,
            "tessera quantize: %lld of %lld tensors converted to %s; tensor data %.2f MiB -> %.2f MiB; "
            "file %.2f MiB -> %.2f MiB\n",
            (long long)n_converted, (long long)n_t, dt->name, mib(bytes_in), mib(bytes_out),
            mib(ts_gguf_file_size(g)), mib(file_out));
    rc = 0;
    goto done;

fail:
    fprintf(stderr, "tessera quantize: %s\n", err.msg);
done:
    for (int k = 0; k < TS_MAX_THREADS; k++) free(scratch[k]);
    ts_threadpool_free(pool);
    ts_gguf_writer_free(w);
    ts_gguf_close(g);
    return rc;
}
