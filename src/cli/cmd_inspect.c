/* cmd_inspect.c - `tessera inspect FILE [--json] [--no-tensors]`: prints a GGUF
 * file's header, metadata and tensor table, as text or as one JSON object.
 *
 * Arrays are abbreviated to their first ARR_HEAD elements (with the count), so
 * a 262k-token vocabulary prints as one line. Strings in the file may hold any
 * bytes: the text output escapes them C-style, the JSON output escapes them as
 * JSON and replaces bytes that are not valid UTF-8 with U+FFFD. Non-finite
 * floats are written as null in JSON (JSON has no NaN/Infinity).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#define ARR_HEAD 8          /* array elements shown */
#define TEXT_STR_MAX 160    /* string bytes shown in text mode before "..." */

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera inspect FILE [--json] [--no-tensors]\n"
            "  Print a GGUF file's version, alignment, data offset, metadata and tensor table.\n"
            "  --json        print one JSON object instead of text\n"
            "  --no-tensors  leave out the per-tensor table (totals are still printed)\n"
            "  -h, --help    show this help\n");
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not valid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    return len;
}

static void json_str(FILE *f, const char *p, uint64_t n) {
    const unsigned char *s = (const unsigned char *)p;
    fputc('"', f);
    for (uint64_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            i++;
        } else {
            size_t l = utf8_len(s + i, (size_t)(n - i < 4 ? n - i : 4));
            if (l == 0) {
                fputs("\\ufffd", f);
                i++;
            } else {
                fwrite(s + i, 1, l, f);
                i += l;
            }
        }
    }
    fputc('"', f);
}

/* Text mode: C-style escapes, valid UTF-8 kept, cut after `max` bytes. */
static void text_str(FILE *f, const char *p, uint64_t n, uint64_t max) {
    const unsigned char *s = (const unsigned char *)p;
    fputc('"', f);
    uint64_t i = 0;
    while (i < n && i < max) {
        unsigned c = s[i];
        size_t l;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c), l = 1;
        else if (c == '\n') fputs("\\n", f), l = 1;
        else if (c == '\t') fputs("\\t", f), l = 1;
        else if (c == '\r') fputs("\\r", f), l = 1;
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c), l = 1;
        else if ((l = utf8_len(s + i, (size_t)(n - i < 4 ? n - i : 4))) != 0) fwrite(s + i, 1, l, f);
        else fprintf(f, "\\x%02x", c), l = 1;
        i += l;
    }
    fputc('"', f);
    if (i < n) fprintf(f, "...(%" PRIu64 " bytes)", n);
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

static void print_float(FILE *f, double x, bool f32, bool json) {
    if (!isfinite(x)) {
        fputs(json ? "null" : isnan(x) ? "nan" : x > 0 ? "inf" : "-inf", f);
        return;
    }
    fprintf(f, f32 ? "%.9g" : "%.17g", x);
}

/* A scalar (non-array, non-string) value. */
static void print_num(FILE *f, const ts_gguf_value *v, bool json) {
    switch (v->type) {
    case TS_GGUF_BOOL: fputs(v->num.u64 ? "true" : "false", f); break;
    case TS_GGUF_FLOAT32: print_float(f, v->num.f64, true, json); break;
    case TS_GGUF_FLOAT64: print_float(f, v->num.f64, false, json); break;
    case TS_GGUF_INT8: case TS_GGUF_INT16: case TS_GGUF_INT32: case TS_GGUF_INT64: fprintf(f, "%" PRId64, v->num.i64); break;
    default: fprintf(f, "%" PRIu64, v->num.u64); break;
    }
}

/* Element i of an array as a value (decoding fixed-size elements). */
static ts_gguf_value arr_elem(const ts_gguf_value *a, uint64_t i) {
    if (a->arr.items) return a->arr.items[i];
    ts_gguf_value e;
    memset(&e, 0, sizeof e);
    e.type = a->arr.type;
    if (e.type == TS_GGUF_FLOAT32 || e.type == TS_GGUF_FLOAT64) e.num.f64 = ts_gguf_arr_f64(a, i);
    else if (e.type == TS_GGUF_INT8 || e.type == TS_GGUF_INT16 || e.type == TS_GGUF_INT32 || e.type == TS_GGUF_INT64) e.num.i64 = ts_gguf_arr_i64(a, i);
    else e.num.u64 = (uint64_t)ts_gguf_arr_i64(a, i);
    return e;
}

static void text_value(FILE *f, const ts_gguf_value *v);

static void text_array(FILE *f, const ts_gguf_value *v) {
    fprintf(f, "[array of %" PRIu64 " %s", v->arr.n, ts_gguf_vtype_name(v->arr.type));
    for (uint64_t i = 0; i < v->arr.n && i < ARR_HEAD; i++) {
        fputs(i ? ", " : ": ", f);
        ts_gguf_value e = arr_elem(v, i);
        text_value(f, &e);
    }
    fputs(v->arr.n > ARR_HEAD ? ", ... ]" : "]", f);
}

static void text_value(FILE *f, const ts_gguf_value *v) {
    if (v->type == TS_GGUF_STRING) text_str(f, v->str.ptr, v->str.len, TEXT_STR_MAX);
    else if (v->type == TS_GGUF_ARRAY) text_array(f, v);
    else print_num(f, v, false);
}

static void json_value(FILE *f, const ts_gguf_value *v);

/* {"type":"ARRAY","elem_type":"STRING","n":49152,"head":[...]} */
static void json_array(FILE *f, const ts_gguf_value *v) {
    fprintf(f, "{\"type\":\"ARRAY\",\"elem_type\":\"%s\",\"n\":%" PRIu64 ",\"head\":[", ts_gguf_vtype_name(v->arr.type), v->arr.n);
    for (uint64_t i = 0; i < v->arr.n && i < ARR_HEAD; i++) {
        if (i) fputc(',', f);
        ts_gguf_value e = arr_elem(v, i);
        json_value(f, &e);
    }
    fputs("]}", f);
}

/* Plain JSON for scalars and strings; the array object for arrays. */
static void json_value(FILE *f, const ts_gguf_value *v) {
    if (v->type == TS_GGUF_STRING) json_str(f, v->str.ptr, v->str.len);
    else if (v->type == TS_GGUF_ARRAY) json_array(f, v);
    else print_num(f, v, true);
}

static void shape_text(char *buf, size_t cap, const ts_gguf_tensor *t) {
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < t->n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "[", t->ne[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static const char *type_name(uint32_t type) {
    const ts_type_traits *tt = ts_type_info(type);
    return tt ? tt->name : "?"; /* the reader refuses unknown types; kept for safety */
}

static void print_text(FILE *f, const char *path, const ts_gguf *g, bool tensors) {
    fprintf(f, "file:        %s\n", path);
    fprintf(f, "version:     %" PRIu32 "\n", ts_gguf_version(g));
    fprintf(f, "alignment:   %" PRIu64 "\n", ts_gguf_alignment(g));
    fprintf(f, "data offset: %" PRIu64 "\n", ts_gguf_data_offset(g));
    fprintf(f, "file size:   %" PRIu64 "\n", ts_gguf_file_size(g));
    fprintf(f, "\nmetadata (%" PRId64 " keys):\n", ts_gguf_n_kv(g));
    for (int64_t i = 0; i < ts_gguf_n_kv(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        fputs("  ", f);
        text_name(f, kv->key, 40);
        fprintf(f, " %-7s = ", ts_gguf_vtype_name(kv->val.type));
        text_value(f, &kv->val);
        fputc('\n', f);
    }
    uint64_t total_bytes = 0, total_el = 0;
    for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++) {
        total_bytes += ts_gguf_tensor_at(g, i)->nbytes;
        total_el += (uint64_t)ts_gguf_tensor_at(g, i)->n_elements;
    }
    if (tensors) {
        fprintf(f, "\ntensors (%" PRId64 "):\n", ts_gguf_n_tensors(g));
        fprintf(f, "  %-5s %-40s %-8s %-24s %14s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
        for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++) {
            const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
            char shape[128];
            shape_text(shape, sizeof shape, t);
            fprintf(f, "  %-5" PRId64 " ", i);
            text_name(f, t->name, 40);
            fprintf(f, " %-8s %-24s %14" PRIu64 " %12" PRIu64 "\n", type_name(t->type), shape, t->offset, t->nbytes);
        }
    }
    fprintf(f, "\ntotal: %" PRId64 " tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB)\n", ts_gguf_n_tensors(g), total_el, total_bytes,
            (double)total_bytes / (1024.0 * 1024.0));
}

static void print_json(FILE *f, const char *path, const ts_gguf *g, bool tensors) {
    fputs("{\"file\":", f);
    json_str(f, path, strlen(path));
    fprintf(f, ",\"version\":%" PRIu32 ",\"alignment\":%" PRIu64 ",\"data_offset\":%" PRIu64 ",\"file_size\":%" PRIu64, ts_gguf_version(g),
            ts_gguf_alignment(g), ts_gguf_data_offset(g), ts_gguf_file_size(g));
    fprintf(f, ",\"n_kv\":%" PRId64 ",\"metadata\":[", ts_gguf_n_kv(g));
    for (int64_t i = 0; i < ts_gguf_n_kv(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        fputs(i ? ",\n{\"key\":" : "\n{\"key\":", f);
        json_str(f, kv->key, strlen(kv->key));
        fprintf(f, ",\"type\":\"%s\",\"value\":", ts_gguf_vtype_name(kv->val.type));
        json_value(f, &kv->val);
        fputc('}', f);
    }
    uint64_t total_bytes = 0, total_el = 0;
    for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++) {
        total_bytes += ts_gguf_tensor_at(g, i)->nbytes;
        total_el += (uint64_t)ts_gguf_tensor_at(g, i)->n_elements;
    }
    fprintf(f, "],\n\"n_tensors\":%" PRId64 ",\"total_elements\":%" PRIu64 ",\"total_bytes\":%" PRIu64, ts_gguf_n_tensors(g), total_el, total_bytes);
    if (tensors) {
        fputs(",\"tensors\":[", f);
        for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++) {
            const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
            fputs(i ? ",\n{\"name\":" : "\n{\"name\":", f);
            json_str(f, t->name, strlen(t->name));
            fprintf(f, ",\"type\":\"%s\",\"type_id\":%" PRIu32 ",\"shape\":[", type_name(t->type), t->type);
            for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, "%s%" PRId64, d ? "," : "", t->ne[d]);
            fprintf(f, "],\"n_elements\":%" PRId64 ",\"offset\":%" PRIu64 ",\"nbytes\":%" PRIu64 "}", t->n_elements, t->offset, t->nbytes);
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
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "tessera inspect: %s\n", err.msg);
        return 1;
    }
    if (json) print_json(stdout, path, g, tensors);
    else print_text(stdout, path, g, tensors);
    ts_gguf_close(g);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tessera inspect: error writing output\n");
        return 1;
    }
    return 0;
}
