/* cmd_inspect.c - `tessera inspect FILE [--json] [--no-tensors]`: prints a GGUF
 * file's header, metadata and tensor table, as text or as one JSON object.
 *
 * Values are rendered by the library (ts_value_render: arrays abbreviated to
 * their first elements with the count, strings escaped C-style in text and as
 * JSON with invalid UTF-8 as U+FFFD, non-finite floats as null in JSON); this
 * file lays out the page around them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera inspect FILE [--json] [--no-tensors]\n"
            "  Print a GGUF file's version, alignment, data offset, metadata and tensor table.\n"
            "  --json        print one JSON object instead of text\n"
            "  --no-tensors  leave out the per-tensor table (totals are still printed)\n"
            "  -h, --help    show this help\n");
}

/* Prints a value as the library renders it (sized on a first call when it
 * does not fit the stack buffer). */
static void print_value(FILE *f, const ts_value *v, ts_render_format fmt) {
    char small[512];
    int64_t n = ts_value_render(v, fmt, small, sizeof small);
    if (n < 0) {
        fputs(fmt == TS_RENDER_JSON ? "null" : "?", f);
    } else if ((uint64_t)n < sizeof small) {
        fwrite(small, 1, (size_t)n, f);
    } else {
        char *big = malloc((size_t)n + 1);
        if (big && ts_value_render(v, fmt, big, (size_t)n + 1) == n) fwrite(big, 1, (size_t)n, f);
        else fputs(fmt == TS_RENDER_JSON ? "null" : "?", f);
        free(big);
    }
}

/* A JSON string of any bytes (file path, keys, tensor names). */
static void json_str(FILE *f, const char *s) {
    ts_value v;
    memset(&v, 0, sizeof v);
    v.type = TS_VALUE_STRING;
    v.str = s;
    v.len = strlen(s);
    print_value(f, &v, TS_RENDER_JSON);
}

/* Keys and tensor names unquoted, control bytes escaped (they reach a terminal). */
static void text_name(FILE *f, const char *s, int width) {
    int n = 0;
    for (; *s; s++, n++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f) n += fprintf(f, "\\x%02x", c) - 1;
        else fputc(c, f);
    }
    for (; n < width; n++) fputc(' ', f);
}

static void shape_text(char *buf, size_t cap, const ts_tensor_info *t) {
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < t->n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "[", t->ne[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static void totals(const ts_file *g, int64_t n_tensors, uint64_t *bytes, uint64_t *elements) {
    *bytes = *elements = 0;
    for (int64_t i = 0; i < n_tensors; i++) {
        ts_tensor_info t = TS_STRUCT_INIT(ts_tensor_info);
        if (ts_file_tensor(g, i, &t) != TS_OK) continue;
        *bytes += t.nbytes;
        *elements += (uint64_t)t.n_elements;
    }
}

static void print_text(FILE *f, const char *path, const ts_file *g, bool tensors) {
    ts_file_info fi = TS_STRUCT_INIT(ts_file_info);
    ts_file_get_info(g, &fi);
    fprintf(f, "file:        %s\n", path);
    fprintf(f, "version:     %" PRIu32 "\n", fi.version);
    fprintf(f, "alignment:   %" PRIu64 "\n", fi.alignment);
    fprintf(f, "data offset: %" PRIu64 "\n", fi.data_offset);
    fprintf(f, "file size:   %" PRIu64 "\n", fi.file_size);
    fprintf(f, "\nmetadata (%" PRId64 " keys):\n", fi.n_meta);
    for (int64_t i = 0; i < fi.n_meta; i++) {
        const char *key = "";
        ts_value v;
        if (ts_file_meta(g, i, &key, &v) != TS_OK) continue;
        fputs("  ", f);
        text_name(f, key, 40);
        fprintf(f, " %-7s = ", ts_value_type_name(v.type));
        print_value(f, &v, TS_RENDER_TEXT);
        fputc('\n', f);
    }
    uint64_t total_bytes, total_el;
    totals(g, fi.n_tensors, &total_bytes, &total_el);
    if (tensors) {
        fprintf(f, "\ntensors (%" PRId64 "):\n", fi.n_tensors);
        fprintf(f, "  %-5s %-40s %-8s %-24s %14s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
        for (int64_t i = 0; i < fi.n_tensors; i++) {
            ts_tensor_info t = TS_STRUCT_INIT(ts_tensor_info);
            if (ts_file_tensor(g, i, &t) != TS_OK) continue;
            char shape[128];
            shape_text(shape, sizeof shape, &t);
            fprintf(f, "  %-5" PRId64 " ", i);
            text_name(f, t.name, 40);
            fprintf(f, " %-8s %-24s %14" PRIu64 " %12" PRIu64 "\n", t.type_name, shape, t.offset, t.nbytes);
        }
    }
    fprintf(f, "\ntotal: %" PRId64 " tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB)\n", fi.n_tensors,
            total_el, total_bytes, (double)total_bytes / (1024.0 * 1024.0));
}

static void print_json(FILE *f, const char *path, const ts_file *g, bool tensors) {
    ts_file_info fi = TS_STRUCT_INIT(ts_file_info);
    ts_file_get_info(g, &fi);
    fputs("{\"file\":", f);
    json_str(f, path);
    fprintf(f, ",\"version\":%" PRIu32 ",\"alignment\":%" PRIu64 ",\"data_offset\":%" PRIu64 ",\"file_size\":%" PRIu64,
            fi.version, fi.alignment, fi.data_offset, fi.file_size);
    fprintf(f, ",\"n_kv\":%" PRId64 ",\"metadata\":[", fi.n_meta);
    for (int64_t i = 0; i < fi.n_meta; i++) {
        const char *key = "";
        ts_value v;
        if (ts_file_meta(g, i, &key, &v) != TS_OK) continue;
        fputs(i ? ",\n{\"key\":" : "\n{\"key\":", f);
        json_str(f, key);
        fprintf(f, ",\"type\":\"%s\",\"value\":", ts_value_type_name(v.type));
        print_value(f, &v, TS_RENDER_JSON);
        fputc('}', f);
    }
    uint64_t total_bytes, total_el;
    totals(g, fi.n_tensors, &total_bytes, &total_el);
    fprintf(f, "],\n\"n_tensors\":%" PRId64 ",\"total_elements\":%" PRIu64 ",\"total_bytes\":%" PRIu64, fi.n_tensors,
            total_el, total_bytes);
    if (tensors) {
        fputs(",\"tensors\":[", f);
        for (int64_t i = 0; i < fi.n_tensors; i++) {
            ts_tensor_info t = TS_STRUCT_INIT(ts_tensor_info);
            if (ts_file_tensor(g, i, &t) != TS_OK) continue;
            fputs(i ? ",\n{\"name\":" : "\n{\"name\":", f);
            json_str(f, t.name);
            fprintf(f, ",\"type\":\"%s\",\"type_id\":%" PRIu32 ",\"shape\":[", t.type_name, t.type);
            for (uint32_t d = 0; d < t.n_dims; d++) fprintf(f, "%s%" PRId64, d ? "," : "", t.ne[d]);
            fprintf(f, "],\"n_elements\":%" PRId64 ",\"offset\":%" PRIu64 ",\"nbytes\":%" PRIu64 "}", t.n_elements,
                    t.offset, t.nbytes);
        }
        fputc(']', f);
    }
    fputs("}\n", f);
}

int cli_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, tensors = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--no-tensors")) {
            tensors = false;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "tessera inspect: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "tessera inspect: more than one FILE given ('%s' and '%s')\n", path, a);
            usage(stderr);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        fprintf(stderr, "tessera inspect: missing FILE\n");
        usage(stderr);
        return 2;
    }
    ts_error err;
    ts_file *g = NULL;
    if (ts_file_open(path, &g, &err) != TS_OK) {
        fprintf(stderr, "tessera inspect: %s\n", err.message);
        return 1;
    }
    if (json) print_json(stdout, path, g, tensors);
    else print_text(stdout, path, g, tensors);
    ts_file_close(g);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tessera inspect: error writing output\n");
        return 1;
    }
    return 0;
}
