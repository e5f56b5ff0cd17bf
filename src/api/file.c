/* file.c - public access to a GGUF file's header, metadata and tensor table
 * (ts_file, ts_value), and the text/JSON rendering of values that
 * `tessera inspect` prints.
 *
 * Rendering: arrays are abbreviated to their first ARR_HEAD elements (with the
 * count), so a 262k-token vocabulary is one line. Strings in the file may hold
 * any bytes: the text form escapes them C-style (cut after TEXT_STR_MAX
 * bytes), the JSON form escapes them as JSON and replaces bytes that are not
 * valid UTF-8 with U+FFFD. Non-finite floats are null in JSON.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "quant/quant.h"
#include "text/utf8.h"

#define ARR_HEAD 8       /* array elements shown */
#define TEXT_STR_MAX 160 /* string bytes shown in text form before "..." */

_Static_assert((int)TS_VALUE_FLOAT64 == (int)TS_GGUF_FLOAT64 && (int)TS_VALUE_ARRAY == (int)TS_GGUF_ARRAY &&
                   (int)TS_VALUE_STRING == (int)TS_GGUF_STRING && (int)TS_VALUE_BOOL == (int)TS_GGUF_BOOL,
               "public value types follow the GGUF numbering");

/* ---- opening ---- */

ts_status ts_file_open(const char *path, ts_file **out, ts_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return ts_api_fail(err, NULL, TS_ERR_INVALID_ARG, "ts_file_open: %s is NULL", path ? "out" : "path");
    ts_err e = {{0}};
    ts_gguf *g = ts_gguf_open(path, &e);
    if (!g) return ts_api_fail(err, NULL, ts_api_load_status(path, e.msg), "%s", e.msg);
    ts_file *f = calloc(1, sizeof *f);
    if (!f) {
        ts_gguf_close(g);
        return ts_api_fail(err, NULL, TS_ERR_NO_MEMORY, "out of memory");
    }
    f->g = g;
    f->owned = true;
    *out = f;
    return ts_api_ok(err);
}

void ts_file_close(ts_file *f) {
    if (!f || !f->owned) return; /* a model's view is freed with the model */
    ts_gguf_close(f->g);
    free(f);
}

ts_status ts_file_get_info(const ts_file *f, ts_file_info *out) {
    if (!f || !out) return TS_ERR_INVALID_ARG;
    ts_file_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    i.version = ts_gguf_version(f->g);
    i.alignment = ts_gguf_alignment(f->g);
    i.data_offset = ts_gguf_data_offset(f->g);
    i.file_size = ts_gguf_file_size(f->g);
    i.n_meta = ts_gguf_n_kv(f->g);
    i.n_tensors = ts_gguf_n_tensors(f->g);
    return ts_struct_out(out, &i, sizeof i);
}

/* ---- values ---- */

static void value_from(const ts_gguf_value *gv, ts_value *v) {
    memset(v, 0, sizeof *v);
    v->type = (ts_value_type)gv->type;
    switch (gv->type) {
    case TS_GGUF_STRING:
        v->str = gv->str.ptr;
        v->len = gv->str.len;
        break;
    case TS_GGUF_ARRAY:
        v->len = gv->arr.n;
        v->elem_type = (ts_value_type)gv->arr.type;
        v->impl_ = gv;
        break;
    case TS_GGUF_FLOAT32:
    case TS_GGUF_FLOAT64: v->f64 = gv->num.f64; break;
    case TS_GGUF_INT8:
    case TS_GGUF_INT16:
    case TS_GGUF_INT32:
    case TS_GGUF_INT64:
        v->i64 = gv->num.i64;
        v->u64 = (uint64_t)gv->num.i64;
        v->f64 = (double)gv->num.i64;
        break;
    default: /* unsigned and BOOL */
        v->u64 = gv->num.u64;
        v->i64 = (int64_t)gv->num.u64;
        v->f64 = (double)gv->num.u64;
        break;
    }
}

ts_status ts_file_meta(const ts_file *f, int64_t i, const char **key, ts_value *value) {
    if (!f || i < 0 || i >= ts_gguf_n_kv(f->g)) return TS_ERR_INVALID_ARG;
    const ts_gguf_kv *kv = ts_gguf_kv_at(f->g, i);
    if (key) *key = kv->key;
    if (value) value_from(&kv->val, value);
    return TS_OK;
}

int64_t ts_file_find_meta(const ts_file *f, const char *key) {
    if (!f || !key) return -1;
    /* ts_gguf_find gives the value; its index is where it sits in the table */
    const ts_gguf_value *v = ts_gguf_find(f->g, key);
    if (!v) return -1;
    for (int64_t i = 0; i < ts_gguf_n_kv(f->g); i++)
        if (&ts_gguf_kv_at(f->g, i)->val == v) return i;
    return -1;
}

ts_status ts_value_array_get(const ts_value *a, uint64_t i, ts_value *out) {
    if (!a || !out || a->type != TS_VALUE_ARRAY || !a->impl_) return TS_ERR_INVALID_ARG;
    const ts_gguf_value *gv = a->impl_;
    if (i >= gv->arr.n) return TS_ERR_INVALID_ARG;
    if (gv->arr.items) {
        value_from(&gv->arr.items[i], out);
        return TS_OK;
    }
    ts_gguf_value e;
    memset(&e, 0, sizeof e);
    e.type = gv->arr.type;
    if (e.type == TS_GGUF_FLOAT32 || e.type == TS_GGUF_FLOAT64) e.num.f64 = ts_gguf_arr_f64(gv, i);
    else if (e.type == TS_GGUF_INT8 || e.type == TS_GGUF_INT16 || e.type == TS_GGUF_INT32 || e.type == TS_GGUF_INT64)
        e.num.i64 = ts_gguf_arr_i64(gv, i);
    else e.num.u64 = (uint64_t)ts_gguf_arr_i64(gv, i); /* UINT64 above INT64_MAX wraps back */
    value_from(&e, out);
    return TS_OK;
}

const char *ts_value_type_name(ts_value_type type) {
    return (unsigned)type < TS_GGUF_VTYPE_COUNT ? ts_gguf_vtype_name((uint32_t)type) : "?";
}

ts_status ts_file_tensor(const ts_file *f, int64_t i, ts_tensor_info *out) {
    if (!f || !out || i < 0 || i >= ts_gguf_n_tensors(f->g)) return TS_ERR_INVALID_ARG;
    const ts_gguf_tensor *t = ts_gguf_tensor_at(f->g, i);
    const ts_type_traits *tt = ts_type_info(t->type);
    ts_tensor_info ti;
    memset(&ti, 0, sizeof ti);
    ti.struct_size = sizeof ti;
    ti.name = t->name;
    ti.type = t->type;
    ti.type_name = tt ? tt->name : "?"; /* the reader refuses unknown types; kept for safety */
    ti.n_dims = t->n_dims;
    for (int d = 0; d < 4; d++) ti.ne[d] = t->ne[d];
    ti.n_elements = t->n_elements;
    ti.offset = t->offset;
    ti.nbytes = t->nbytes;
    return ts_struct_out(out, &ti, sizeof ti);
}

/* ---- rendering ---- */

/* Bounded output that still counts what the whole text needs. */
typedef struct sink {
    char *buf;
    size_t cap;
    size_t len;
} sink;

static void put(sink *s, const char *p, size_t n) {
    if (s->len < s->cap) {
        size_t room = s->cap - s->len;
        memcpy(s->buf + s->len, p, n < room ? n : room);
    }
    s->len += n;
}

static void putc_(sink *s, char c) { put(s, &c, 1); }
static void puts_(sink *s, const char *p) { put(s, p, strlen(p)); }

static void putf(sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sink *s, const char *fmt, ...) {
    char tmp[64]; /* numbers and short escapes only */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(s, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not valid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    uint32_t cp;
    int bad;
    int l = ts_utf8_next(s, n, &cp, &bad);
    return l > 0 ? (size_t)l : 0;
}

static void json_str(sink *o, const char *p, uint64_t n) {
    const unsigned char *s = (const unsigned char *)p;
    putc_(o, '"');
    for (uint64_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            putc_(o, '\\');
            putc_(o, (char)c);
            i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': puts_(o, "\\n"); break;
            case '\t': puts_(o, "\\t"); break;
            case '\r': puts_(o, "\\r"); break;
            default: putf(o, "\\u%04x", c); break;
            }
            i++;
        } else {
            size_t l = utf8_len(s + i, (size_t)(n - i < 4 ? n - i : 4));
            if (l == 0) {
                puts_(o, "\\ufffd");
                i++;
            } else {
                put(o, (const char *)s + i, l);
                i += l;
            }
        }
    }
    putc_(o, '"');
}

/* Text form: C-style escapes, valid UTF-8 kept, cut after `max` bytes. */
static void text_str(sink *o, const char *p, uint64_t n, uint64_t max) {
    const unsigned char *s = (const unsigned char *)p;
    putc_(o, '"');
    uint64_t i = 0;
    while (i < n && i < max) {
        unsigned c = s[i];
        size_t l = 1;
        if (c == '"' || c == '\\') putc_(o, '\\'), putc_(o, (char)c);
        else if (c == '\n') puts_(o, "\\n");
        else if (c == '\t') puts_(o, "\\t");
        else if (c == '\r') puts_(o, "\\r");
        else if (c < 0x20 || c == 0x7f) putf(o, "\\x%02x", c);
        else if ((l = utf8_len(s + i, (size_t)(n - i < 4 ? n - i : 4))) != 0) put(o, (const char *)s + i, l);
        else putf(o, "\\x%02x", c), l = 1;
        i += l;
    }
    putc_(o, '"');
    if (i < n) putf(o, "...(%" PRIu64 " bytes)", n);
}

static void put_float(sink *o, double x, bool f32, bool json) {
    if (!isfinite(x)) {
        puts_(o, json ? "null" : isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return;
    }
    putf(o, f32 ? "%.9g" : "%.17g", x);
}

static int render(sink *o, const ts_value *v, bool json, int depth);

/* A scalar (non-array, non-string) value; -1 for an unknown type. */
static int put_num(sink *o, const ts_value *v, bool json) {
    switch (v->type) {
    case TS_VALUE_BOOL: puts_(o, v->u64 ? "true" : "false"); return 0;
    case TS_VALUE_FLOAT32: put_float(o, v->f64, true, json); return 0;
    case TS_VALUE_FLOAT64: put_float(o, v->f64, false, json); return 0;
    case TS_VALUE_INT8:
    case TS_VALUE_INT16:
    case TS_VALUE_INT32:
    case TS_VALUE_INT64: putf(o, "%" PRId64, v->i64); return 0;
    case TS_VALUE_UINT8:
    case TS_VALUE_UINT16:
    case TS_VALUE_UINT32:
    case TS_VALUE_UINT64: putf(o, "%" PRIu64, v->u64); return 0;
    default: return -1;
    }
}

static int render_array(sink *o, const ts_value *v, bool json, int depth) {
    if (!v->impl_) return -1;
    const char *tn = ts_value_type_name(v->elem_type);
    if (json) putf(o, "{\"type\":\"ARRAY\",\"elem_type\":\"%s\",\"n\":%" PRIu64 ",\"head\":[", tn, v->len);
    else putf(o, "[array of %" PRIu64 " %s", v->len, tn);
    for (uint64_t i = 0; i < v->len && i < ARR_HEAD; i++) {
        if (json) {
            if (i) putc_(o, ',');
        } else {
            puts_(o, i ? ", " : ": ");
        }
        ts_value e;
        if (ts_value_array_get(v, i, &e) != TS_OK || render(o, &e, json, depth + 1) < 0) return -1;
    }
    puts_(o, json ? "]}" : v->len > ARR_HEAD ? ", ... ]" : "]");
    return 0;
}

static int render(sink *o, const ts_value *v, bool json, int depth) {
    if (depth > 16) return -1; /* the reader limits nesting far below this */
    if (v->type == TS_VALUE_STRING) {
        if (!v->str && v->len) return -1;
        if (json) json_str(o, v->str, v->len);
        else text_str(o, v->str, v->len, TEXT_STR_MAX);
        return 0;
    }
    if (v->type == TS_VALUE_ARRAY) return render_array(o, v, json, depth);
    return put_num(o, v, json);
}

int64_t ts_value_render(const ts_value *v, ts_render_format format, char *buf, size_t cap) {
    if (!v || (format != TS_RENDER_TEXT && format != TS_RENDER_JSON) || (!buf && cap)) return -1;
    sink o = {buf, cap, 0};
    if (render(&o, v, format == TS_RENDER_JSON, 0) < 0) return -1;
    if (cap) buf[o.len < cap ? o.len : cap - 1] = '\0';
    return (int64_t)o.len;
}
