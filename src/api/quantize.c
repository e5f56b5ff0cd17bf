/* quantize.c - ts_quantize: rewrites a model's 2-D weight matrices in another
 * element type.
 *
 * Every tensor whose name ends in ".weight", with n_dims == 2 and a row length
 * divisible by the type's block size (token_embd included, as llama.cpp does),
 * is dequantized row by row from its stored type to f32 and quantized with the
 * reference quantizers of src/quant. Everything else (norms, biases, any 1-D
 * tensor) is copied byte for byte. All metadata is copied; general.file_type
 * is set to the type's llama.cpp LLAMA_FTYPE number and
 * general.quantization_version to 2 (ggml's current block format version).
 *
 * Converted tensors are held in memory until the file is written (the output
 * is at most the f32 size of the weights); copied tensors are written straight
 * from the input's mmap. Progress goes to the log callback at INFO.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "api/api_internal.h"
#include "core/threadpool.h"
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
#define N_TARGETS (int)(sizeof targets / sizeof targets[0])

ts_quantize_params ts_quantize_default_params(void) {
    ts_quantize_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    return p;
}

const char *ts_quantize_type_name(int i) {
    return i >= 0 && i < N_TARGETS ? ts_type_info(targets[i].type)->name : NULL;
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

ts_status ts_quantize(const char *in_path, const char *out_path, const char *type_name,
                      const ts_quantize_params *params, ts_error *err) {
    ts_quantize_params p = ts_quantize_default_params();
    ts_logger lg = {NULL, NULL};
    if (params) {
        lg = (ts_logger){params->log, params->log_user_data};
        ts_status st = ts_params_in(&p, sizeof p, params, "ts_quantize_params", err, &lg);
        if (st != TS_OK) return st;
    }
    if (!in_path || !out_path || !type_name)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "ts_quantize: %s is NULL",
                           !in_path ? "in_path" : !out_path ? "out_path" : "type");
    if (p.n_threads < 0 || p.n_threads > TS_THREADS_MAX)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "n_threads %d is out of range [0, %d]", (int)p.n_threads,
                           TS_THREADS_MAX);
    int ti = 0;
    while (ti < N_TARGETS && strcasecmp(type_name, ts_quantize_type_name(ti)) != 0) ti++;
    if (ti == N_TARGETS) {
        char list[128] = "";
        for (int i = 0; i < N_TARGETS; i++) {
            strcat(list, i ? ", " : "");
            strcat(list, ts_quantize_type_name(i));
        }
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "unknown output type '%s'; accepted: %s", type_name, list);
    }
    const uint32_t dst_type = targets[ti].type;
    const ts_type_traits *dt = ts_type_info(dst_type);

    struct stat st_in, st_out;
    if (stat(in_path, &st_in) == 0 && stat(out_path, &st_out) == 0 && st_in.st_dev == st_out.st_dev &&
        st_in.st_ino == st_out.st_ino)
        return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "output '%s' is the input file", out_path);

    ts_err e = {{0}};
    ts_gguf *g = ts_gguf_open(in_path, &e);
    if (!g) return ts_api_fail(err, &lg, ts_api_load_status(in_path, e.msg), "%s: %s", in_path, e.msg);
    ts_status status = TS_ERR_FORMAT;
    ts_gguf_writer *w = NULL;
    ts_threadpool *pool = NULL;
    float *scratch[TS_MAX_THREADS] = {0};
    int failed[TS_MAX_THREADS] = {0};
    ts_err *errs = calloc(TS_MAX_THREADS, sizeof *errs);
    if (!errs) {
        status = TS_ERR_NO_MEMORY;
        ts_err_set(&e, "out of memory");
        goto fail;
    }

    if (!(w = ts_gguf_writer_new(&e))) goto fail;
    for (int64_t i = 0; i < ts_gguf_n_kv(g); i++)
        if (ts_gguf_writer_add_kv_from(w, ts_gguf_kv_at(g, i), &e)) goto fail;
    if (ts_gguf_writer_set_u32(w, "general.file_type", targets[ti].ftype, &e) ||
        ts_gguf_writer_set_u32(w, "general.quantization_version", 2, &e))
        goto fail;

    status = TS_ERR_NO_MEMORY;
    if (!(pool = ts_threadpool_new(ts_api_threads(p.n_threads), &e))) goto fail;
    const int nt = ts_threadpool_n_threads(pool);
    int64_t max_row = 1;
    for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++)
        if (ts_gguf_tensor_at(g, i)->ne[0] > max_row) max_row = ts_gguf_tensor_at(g, i)->ne[0];
    for (int k = 0; k < nt; k++) {
        if (!(scratch[k] = malloc((size_t)max_row * sizeof(float)))) {
            ts_err_set(&e, "out of memory for a row of %lld floats", (long long)max_row);
            goto fail;
        }
    }

    const int64_t n_t = ts_gguf_n_tensors(g);
    uint64_t bytes_in = 0, bytes_out = 0;
    int64_t n_converted = 0;
    ts_api_log(&lg, TS_LOG_INFO, "quantize: %s -> %s as %s (%d threads)", in_path, out_path, dt->name, nt);
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
                ts_err_set(&e, "tensor '%s': out of memory for %llu bytes", t->name, (unsigned long long)nbytes);
                status = TS_ERR_NO_MEMORY;
                goto fail;
            }
            convert_job job = {t, dst_type, in_rb, out_rb, buf, scratch, failed, errs};
            ts_parallel_for(pool, rows, convert_rows, &job);
            for (int k = 0; k < nt; k++)
                if (failed[k]) {
                    free(buf);
                    ts_err_set(&e, "tensor '%s': %s", t->name, errs[k].msg);
                    status = TS_ERR_FORMAT;
                    goto fail;
                }
            if (ts_gguf_writer_add_tensor_owned(w, t->name, dst_type, t->n_dims, t->ne, buf, nbytes, &e)) goto fail;
            bytes_out += nbytes;
            n_converted++;
            ts_api_log(&lg, TS_LOG_INFO, "[%4lld/%lld] %-32s %-5s -> %-5s %6lld x %-6lld %8.2f -> %8.2f MiB",
                       (long long)i + 1, (long long)n_t, t->name, st->name, dt->name, (long long)t->ne[0],
                       (long long)t->ne[1], mib(t->nbytes), mib(nbytes));
            continue;
        }
        if (rewrite && t->type == dst_type) note = "already in the output type";
        else if (rewrite) note = "cannot dequantize this type; kept as is";
        else if (t->n_dims == 2 && ends_with(t->name, ".weight")) note = "row length not a multiple of the block size";
        if (ts_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, &e)) goto fail;
        bytes_out += t->nbytes;
        ts_api_log(&lg, TS_LOG_INFO, "[%4lld/%lld] %-32s %-5s    kept%s%s", (long long)i + 1, (long long)n_t, t->name,
                   st->name, note ? " - " : "", note ? note : "");
    }

    status = TS_ERR_IO;
    if (ts_gguf_writer_write(w, out_path, &e)) goto fail;
    struct stat st_w;
    uint64_t file_out = stat(out_path, &st_w) == 0 ? (uint64_t)st_w.st_size : 0;
    ts_api_log(&lg, TS_LOG_INFO,
               "quantize: %lld of %lld tensors converted to %s; tensor data %.2f MiB -> %.2f MiB; "
               "file %.2f MiB -> %.2f MiB",
               (long long)n_converted, (long long)n_t, dt->name, mib(bytes_in), mib(bytes_out),
               mib(ts_gguf_file_size(g)), mib(file_out));
    status = TS_OK;
    ts_api_ok(err);
    goto done;
fail:
    ts_api_fail(err, &lg, status, "%s", e.msg);
done:
    for (int k = 0; k < TS_MAX_THREADS; k++) free(scratch[k]);
    free(errs);
    ts_threadpool_free(pool);
    ts_gguf_writer_free(w);
    ts_gguf_close(g);
    return status;
}
