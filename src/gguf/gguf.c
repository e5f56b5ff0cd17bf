/* gguf.c - GGUF v2/v3 reader.
 *
 * The whole file is validated once, in ts_gguf_open / ts_gguf_open_mem; the
 * accessors afterwards are plain lookups in the tables built here. The input is
 * untrusted, so:
 *   - every read goes through rd_need(), which checks the bytes left;
 *   - every count is checked against the bytes left (count * minimal encoded
 *     element size) before anything is allocated for it, so allocations stay
 *     linear in the file size whatever the counts say;
 *   - every size product uses the checked helpers of core/err.h;
 *   - array nesting is capped (recursion depth);
 *   - keys and tensor names are capped in length and may not contain NUL
 *     (they are handed out as C strings, so an embedded NUL would make two
 *     different names compare equal).
 * Layout (all little-endian): magic "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, n_kv x {string key, u32 type, value}, n_tensors x {string name,
 * u32 n_dims, u64 ne[n_dims], u32 type, u64 offset}, padding up to the
 * alignment, then the data section. A string is u64 length + bytes; an array
 * is u32 element type + u64 count + elements.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"

/* Minimal encoded sizes, used to refuse impossible counts before allocating. */
#define MIN_KV_BYTES 13u     /* u64 key length + u32 type + 1-byte value */
#define MIN_TINFO_BYTES 32u  /* u64 name length + u32 n_dims + 1 dim + u32 type + u64 offset */
#define MIN_ARRAY_BYTES 12u  /* u32 element type + u64 count */
#define MIN_STRING_BYTES 8u  /* u64 length */

struct ts_gguf {
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when we own an mmap of `size` bytes */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    ts_gguf_kv *kv;
    const ts_gguf_kv **kv_by_key; /* sorted by key: duplicate check + binary search */
    int64_t n_tensors;
    ts_gguf_tensor *tensors;
    const ts_gguf_tensor **t_by_name; /* sorted by name */
};

/* ---------------------------------------------------------------- reader */

typedef struct {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    ts_err *err;
    char ctx[192]; /* what is being read, for messages: "key 'x'", "tensor #3"; "" in the header */
} rd;

/* Copies a name into a message-safe form: printable ASCII kept, other bytes
 * shown as \xNN, long names cut with "...". */
static void sanitize(char *dst, size_t cap, const char *src, uint64_t len) {
    size_t o = 0;
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (o + 8 >= cap) {
            memcpy(dst + o, "...", 4);
            return;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'') {
            dst[o++] = (char)c;
        } else {
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        }
    }
    dst[o] = '\0';
}

static void set_ctx_name(rd *r, const char *kind, const char *name, uint64_t len) {
    char buf[160];
    sanitize(buf, sizeof buf, name, len);
    snprintf(r->ctx, sizeof r->ctx, "%s '%s'", kind, buf);
}

static const char *ctx_of(const rd *r) {
    return r->ctx[0] ? " of " : "";
}

static int rd_need(rd *r, uint64_t n, const char *what) {
    uint64_t left = r->size - r->pos;
    if (n <= left) return 0;
    return ts_err_set(r->err, "gguf: truncated at byte %" PRIu64 " while reading %s%s%s (need %" PRIu64 " bytes, %" PRIu64 " left)",
                      r->pos, what, ctx_of(r), r->ctx, n, left);
}

static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t le64(const uint8_t *b) {
    return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    if (rd_need(r, 4, what)) return -1;
    *v = le32(r->p + r->pos);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    if (rd_need(r, 8, what)) return -1;
    *v = le64(r->p + r->pos);
    r->pos += 8;
    return 0;
}

/* A length-prefixed string; the bytes stay in the buffer. */
static int rd_str(rd *r, ts_gguf_str *s, const char *what) {
    uint64_t start = r->pos, len;
    if (rd_u64(r, &len, what)) return -1;
    if (len > r->size)
        return ts_err_set(r->err, "gguf: string length %" PRIu64 " at byte %" PRIu64 " is larger than the whole file (%" PRIu64 " bytes) while reading %s%s%s",
                          len, start, r->size, what, ctx_of(r), r->ctx);
    if (rd_need(r, len, what)) return -1;
    s->ptr = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

/* Keys and tensor names: capped, no NUL, copied into a C string. */
static char *rd_name(rd *r, const char *what, ts_gguf_str *s) {
    if (rd_str(r, s, what)) return NULL;
    if (s->len > TS_GGUF_MAX_NAME_LEN) {
        ts_err_set(r->err, "gguf: %s%s%s has length %" PRIu64 ", more than the limit of %u bytes", what, ctx_of(r), r->ctx, s->len,
                   (unsigned)TS_GGUF_MAX_NAME_LEN);
        return NULL;
    }
    const void *nul = memchr(s->ptr, 0, (size_t)s->len);
    if (nul) {
        ts_err_set(r->err, "gguf: %s%s%s contains a NUL byte at position %td", what, ctx_of(r), r->ctx, (const char *)nul - s->ptr);
        return NULL;
    }
    char *c = malloc((size_t)s->len + 1);
    if (!c) {
        ts_err_set(r->err, "gguf: out of memory for a %" PRIu64 "-byte name", s->len);
        return NULL;
    }
    memcpy(c, s->ptr, (size_t)s->len);
    c[s->len] = '\0';
    return c;
}

/* ---------------------------------------------------------------- values */

static const char *const vtype_names[TS_GGUF_VTYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

const char *ts_gguf_vtype_name(uint32_t type) {
    return type < TS_GGUF_VTYPE_COUNT ? vtype_names[type] : "UNKNOWN";
}

size_t ts_gguf_vtype_size(uint32_t type) {
    switch (type) {
    case TS_GGUF_UINT8: case TS_GGUF_INT8: case TS_GGUF_BOOL: return 1;
    case TS_GGUF_UINT16: case TS_GGUF_INT16: return 2;
    case TS_GGUF_UINT32: case TS_GGUF_INT32: case TS_GGUF_FLOAT32: return 4;
    case TS_GGUF_UINT64: case TS_GGUF_INT64: case TS_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static bool vtype_is_signed(uint32_t t) {
    return t == TS_GGUF_INT8 || t == TS_GGUF_INT16 || t == TS_GGUF_INT32 || t == TS_GGUF_INT64;
}

static bool vtype_is_unsigned(uint32_t t) {
    return t == TS_GGUF_UINT8 || t == TS_GGUF_UINT16 || t == TS_GGUF_UINT32 || t == TS_GGUF_UINT64;
}

/* Decodes one fixed-size little-endian element (type must be fixed-size). */
static void decode_scalar(uint32_t type, const uint8_t *b, ts_gguf_value *v) {
    v->type = type;
    switch (type) {
    case TS_GGUF_UINT8: case TS_GGUF_BOOL: v->num.u64 = b[0]; break;
    case TS_GGUF_INT8: v->num.i64 = (int8_t)b[0]; break;
    case TS_GGUF_UINT16: v->num.u64 = (uint16_t)(b[0] | b[1] << 8); break;
    case TS_GGUF_INT16: v->num.i64 = (int16_t)(uint16_t)(b[0] | b[1] << 8); break;
    case TS_GGUF_UINT32: v->num.u64 = le32(b); break;
    case TS_GGUF_INT32: v->num.i64 = (int32_t)le32(b); break;
    case TS_GGUF_UINT64: v->num.u64 = le64(b); break;
    case TS_GGUF_INT64: v->num.i64 = (int64_t)le64(b); break;
    case TS_GGUF_FLOAT32: {
        uint32_t u = le32(b);
        float f;
        memcpy(&f, &u, 4);
        v->num.f64 = f;
        break;
    }
    case TS_GGUF_FLOAT64: {
        uint64_t u = le64(b);
        memcpy(&v->num.f64, &u, 8);
        break;
    }
    default: break;
    }
}

static void free_value(ts_gguf_value *v) {
    if (v->type == TS_GGUF_ARRAY && v->arr.items) {
        for (uint64_t i = 0; i < v->arr.n; i++) free_value(&v->arr.items[i]);
        free(v->arr.items);
        v->arr.items = NULL;
    }
}

static int parse_value(rd *r, uint32_t type, ts_gguf_value *v, int depth);

/* Body of an ARRAY value (after its type tag). depth = nesting level of this array (1 = top). */
static int parse_array(rd *r, ts_gguf_value *v, int depth) {
    v->type = TS_GGUF_ARRAY;
    if (depth > TS_GGUF_MAX_ARRAY_DEPTH)
        return ts_err_set(r->err, "gguf: value%s%s: arrays nested more than %d levels deep", ctx_of(r), r->ctx, TS_GGUF_MAX_ARRAY_DEPTH);
    uint32_t et;
    uint64_t n;
    if (rd_u32(r, &et, "array element type") || rd_u64(r, &n, "array length")) return -1;
    if (et >= TS_GGUF_VTYPE_COUNT)
        return ts_err_set(r->err, "gguf: value%s%s: unknown array element type %" PRIu32, ctx_of(r), r->ctx, et);
    v->arr.type = et;
    size_t esz = ts_gguf_vtype_size(et);
    uint64_t min = esz ? esz : et == TS_GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    uint64_t left = r->size - r->pos;
    if (n > r->size / min)
        return ts_err_set(r->err, "gguf: value%s%s: array length %" PRIu64 " is impossible (%s elements need at least %" PRIu64 " bytes each, the file has %" PRIu64 ")",
                          ctx_of(r), r->ctx, n, ts_gguf_vtype_name(et), min, r->size);
    if (n > left / min) /* n * min <= size: no overflow */
        return ts_err_set(r->err, "gguf: truncated at byte %" PRIu64 " while reading value%s%s: array of %" PRIu64 " %s needs at least %" PRIu64 " bytes, %" PRIu64 " left",
                          r->pos, ctx_of(r), r->ctx, n, ts_gguf_vtype_name(et), n * min, left);
    if (esz) {
        v->arr.n = n;
        v->arr.data = r->p + r->pos;
        if (et == TS_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (v->arr.data[i] > 1)
                    return ts_err_set(r->err, "gguf: value%s%s: bool array element %" PRIu64 " is %u, not 0 or 1", ctx_of(r), r->ctx, i,
                                      v->arr.data[i]);
        r->pos += n * esz;
        return 0;
    }
    if (n == 0) return 0;
    /* n <= left / 8 here, so this allocation is bounded by a small multiple of the file size. */
    v->arr.items = calloc((size_t)n, sizeof *v->arr.items);
    if (!v->arr.items)
        return ts_err_set(r->err, "gguf: value%s%s: out of memory for %" PRIu64 " array elements", ctx_of(r), r->ctx, n);
    v->arr.n = n; /* items are zeroed, so free_value can free a partially parsed array */
    for (uint64_t i = 0; i < n; i++)
        if (parse_value(r, et, &v->arr.items[i], depth)) return -1;
    return 0;
}

/* One value of the given type. depth = number of arrays enclosing it. */
static int parse_value(rd *r, uint32_t type, ts_gguf_value *v, int depth) {
    if (type >= TS_GGUF_VTYPE_COUNT)
        return ts_err_set(r->err, "gguf: value%s%s: unknown value type %" PRIu32, ctx_of(r), r->ctx, type);
    if (type == TS_GGUF_STRING) {
        v->type = type;
        return rd_str(r, &v->str, "value");
    }
    if (type == TS_GGUF_ARRAY) return parse_array(r, v, depth + 1);
    size_t esz = ts_gguf_vtype_size(type);
    if (rd_need(r, esz, "value")) return -1;
    decode_scalar(type, r->p + r->pos, v);
    if (type == TS_GGUF_BOOL && v->num.u64 > 1)
        return ts_err_set(r->err, "gguf: value%s%s: bool is %" PRIu64 ", not 0 or 1", ctx_of(r), r->ctx, v->num.u64);
    r->pos += esz;
    return 0;
}

/* --------------------------------------------------------------- tensors */

/* Type ids that existed once and were removed from ggml (so files may still
 * carry them): named in the refusal so the user knows why. */
static const char *removed_type_name(uint32_t t) {
    switch (t) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    default: return NULL;
    }
}

static void shape_str(char *buf, size_t cap, const uint64_t *ne, uint32_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRIu64, i ? " x " : "", ne[i]);
}

static int parse_tensor_info(rd *r, ts_gguf_tensor *t, int64_t idx, uint64_t alignment) {
    snprintf(r->ctx, sizeof r->ctx, "tensor #%" PRId64, idx);
    ts_gguf_str s;
    t->name = rd_name(r, "name", &s);
    if (!t->name) return -1;
    set_ctx_name(r, "tensor", s.ptr, s.len);
    const char *tn = r->ctx + 7; /* "tensor " stripped: "'name'" */

    if (rd_u32(r, &t->n_dims, "n_dims")) return -1;
    if (t->n_dims < 1 || t->n_dims > TS_GGUF_MAX_DIMS)
        return ts_err_set(r->err, "gguf: tensor %s: n_dims %" PRIu32 " is out of range 1..%d", tn, t->n_dims, TS_GGUF_MAX_DIMS);
    uint64_t ne[TS_GGUF_MAX_DIMS];
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (rd_u64(r, &ne[d], "dims")) return -1;
    uint32_t type;
    uint64_t offset;
    if (rd_u32(r, &type, "type") || rd_u64(r, &offset, "offset")) return -1;

    char shape[128];
    shape_str(shape, sizeof shape, ne, t->n_dims);
    int64_t nel = 1;
    for (uint32_t d = 0; d < TS_GGUF_MAX_DIMS; d++) {
        if (d >= t->n_dims) {
            t->ne[d] = 1;
            continue;
        }
        /* A dim is an int64 in ggml: values >= 2^63 are negative there. Zero is
         * refused too: no real model has empty tensors, and refusing them keeps
         * every tensor a non-empty byte range (simple overlap checks). */
        if (ne[d] == 0)
            return ts_err_set(r->err, "gguf: tensor %s: dim %" PRIu32 " is 0 (shape %s); empty tensors are not supported", tn, d, shape);
        if (ne[d] > (uint64_t)INT64_MAX)
            return ts_err_set(r->err, "gguf: tensor %s: dim %" PRIu32 " is %" PRIu64 " (negative as int64; shape %s)", tn, d, ne[d], shape);
        t->ne[d] = (int64_t)ne[d];
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return ts_err_set(r->err, "gguf: tensor %s: element count of shape %s overflows int64", tn, shape);
    }
    t->n_elements = nel;

    const ts_type_traits *tt = ts_type_info(type);
    if (!tt) {
        const char *rn = removed_type_name(type);
        if (rn)
            return ts_err_set(r->err, "gguf: tensor %s: type %" PRIu32 " (%s) was removed from the GGUF format and is not supported", tn, type, rn);
        return ts_err_set(r->err, "gguf: tensor %s: unknown tensor type %" PRIu32, tn, type);
    }
    t->type = type;
    if (t->ne[0] % tt->blck)
        return ts_err_set(r->err, "gguf: tensor %s: row length %" PRId64 " is not a multiple of the %s block size %" PRIu32, tn, t->ne[0], tt->name,
                          tt->blck);
    /* ne[0] is a multiple of blck, so the element count is too. */
    if (ts_mul_overflow_u64((uint64_t)nel / tt->blck, tt->size, &t->nbytes))
        return ts_err_set(r->err, "gguf: tensor %s: byte size of shape %s (%s) overflows 64 bits", tn, shape, tt->name);
    if (offset % alignment)
        return ts_err_set(r->err, "gguf: tensor %s: offset %" PRIu64 " is not a multiple of alignment %" PRIu64, tn, offset, alignment);
    t->offset = offset;
    return 0;
}

/* ------------------------------------------------------------------ open */

static int cmp_kv_key(const void *a, const void *b) {
    return strcmp((*(const ts_gguf_kv *const *)a)->key, (*(const ts_gguf_kv *const *)b)->key);
}

static int cmp_t_name(const void *a, const void *b) {
    return strcmp((*(const ts_gguf_tensor *const *)a)->name, (*(const ts_gguf_tensor *const *)b)->name);
}

static int cmp_t_offset(const void *a, const void *b) {
    uint64_t x = (*(const ts_gguf_tensor *const *)a)->offset, y = (*(const ts_gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

static uint32_t bswap32(uint32_t x) {
    return x >> 24 | (x >> 8 & 0xff00u) | (x << 8 & 0xff0000u) | x << 24;
}

static int parse_header(ts_gguf *g, rd *r) {
    if (rd_need(r, 4, "magic")) return -1;
    if (memcmp(r->p, "GGUF", 4)) {
        char m[32];
        sanitize(m, sizeof m, (const char *)r->p, 4);
        return ts_err_set(r->err, "gguf: bad magic '%s' (expected 'GGUF'): not a GGUF file", m);
    }
    r->pos = 4;
    if (rd_u32(r, &g->version, "version")) return -1;
    uint32_t v = g->version;
    /* v3 added big-endian files, recognisable by a byte-swapped version. */
    if (v != 0 && (v & 0xffffu) == 0 && bswap32(v) <= 0xffffu)
        return ts_err_set(r->err, "gguf: version field reads 0x%08" PRIx32 " (version %" PRIu32 " byte-swapped): big-endian GGUF is not supported", v,
                          bswap32(v));
    if (v == 1) return ts_err_set(r->err, "gguf: version 1 is not supported (GGUF v1 used 32-bit counts; convert the file to v3)");
    if (v != 2 && v != 3) return ts_err_set(r->err, "gguf: unsupported version %" PRIu32 " (supported: 2, 3)", v);

    uint64_t nt, nkv;
    if (rd_u64(r, &nt, "tensor count") || rd_u64(r, &nkv, "kv count")) return -1;
    uint64_t left = r->size - r->pos;
    if (nkv > left / MIN_KV_BYTES)
        return ts_err_set(r->err, "gguf: kv count %" PRIu64 " is impossible: %" PRIu64 " bytes left and each key-value needs at least %u", nkv, left,
                          MIN_KV_BYTES);
    if (nt > left / MIN_TINFO_BYTES)
        return ts_err_set(r->err, "gguf: tensor count %" PRIu64 " is impossible: %" PRIu64 " bytes left and each tensor info needs at least %u", nt,
                          left, MIN_TINFO_BYTES);
    g->n_kv = (int64_t)nkv;
    g->n_tensors = (int64_t)nt;
    return 0;
}

static int parse_kvs(ts_gguf *g, rd *r) {
    if (g->n_kv == 0) return 0;
    g->kv = calloc((size_t)g->n_kv, sizeof *g->kv);
    g->kv_by_key = malloc((size_t)g->n_kv * sizeof *g->kv_by_key);
    if (!g->kv || !g->kv_by_key) return ts_err_set(r->err, "gguf: out of memory for %" PRId64 " key-values", g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) {
        ts_gguf_kv *kv = &g->kv[i];
        snprintf(r->ctx, sizeof r->ctx, "kv #%" PRId64, i);
        ts_gguf_str s;
        kv->key = rd_name(r, "key", &s);
        if (!kv->key) return -1;
        set_ctx_name(r, "key", s.ptr, s.len);
        uint32_t type;
        if (rd_u32(r, &type, "value type")) return -1;
        if (parse_value(r, type, &kv->val, 0)) return -1;
        g->kv_by_key[i] = kv;
    }
    r->ctx[0] = '\0';
    qsort(g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, cmp_kv_key);
    for (int64_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key)) {
            char k[160];
            sanitize(k, sizeof k, g->kv_by_key[i]->key, strlen(g->kv_by_key[i]->key));
            return ts_err_set(r->err, "gguf: duplicate key '%s' (kv #%td and #%td)", k, g->kv_by_key[i - 1] - g->kv, g->kv_by_key[i] - g->kv);
        }
    return 0;
}

static int parse_alignment(ts_gguf *g, rd *r) {
    g->alignment = TS_GGUF_DEFAULT_ALIGNMENT;
    const ts_gguf_value *v = ts_gguf_find(g, "general.alignment");
    if (!v) return 0;
    if (v->type != TS_GGUF_UINT32)
        return ts_err_set(r->err, "gguf: general.alignment has type %s, must be UINT32", ts_gguf_vtype_name(v->type));
    if (v->num.u64 == 0 || (v->num.u64 & (v->num.u64 - 1)))
        return ts_err_set(r->err, "gguf: general.alignment %" PRIu64 " is not a nonzero power of two", v->num.u64);
    g->alignment = v->num.u64;
    return 0;
}

static int parse_tensors(ts_gguf *g, rd *r) {
    if (g->n_tensors > 0) {
        g->tensors = calloc((size_t)g->n_tensors, sizeof *g->tensors);
        g->t_by_name = malloc((size_t)g->n_tensors * sizeof *g->t_by_name);
        if (!g->tensors || !g->t_by_name) return ts_err_set(r->err, "gguf: out of memory for %" PRId64 " tensors", g->n_tensors);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (parse_tensor_info(r, &g->tensors[i], i, g->alignment)) return -1;
        g->t_by_name[i] = &g->tensors[i];
    }
    r->ctx[0] = '\0';

    /* The data section starts at the end of the header rounded up to the alignment. */
    uint64_t end;
    if (ts_add_overflow_u64(r->pos, g->alignment - 1, &end))
        return ts_err_set(r->err, "gguf: data offset overflows (header end %" PRIu64 ", alignment %" PRIu64 ")", r->pos, g->alignment);
    g->data_offset = end / g->alignment * g->alignment;
    if (g->n_tensors == 0) return 0;

    qsort(g->t_by_name, (size_t)g->n_tensors, sizeof *g->t_by_name, cmp_t_name);
    for (int64_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->t_by_name[i - 1]->name, g->t_by_name[i]->name)) {
            char n[160];
            sanitize(n, sizeof n, g->t_by_name[i]->name, strlen(g->t_by_name[i]->name));
            return ts_err_set(r->err, "gguf: duplicate tensor name '%s' (tensors #%td and #%td)", n, g->t_by_name[i - 1] - g->tensors,
                              g->t_by_name[i] - g->tensors);
        }

    uint64_t data_size = g->size > g->data_offset ? g->size - g->data_offset : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        ts_gguf_tensor *t = &g->tensors[i];
        char n[160];
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            sanitize(n, sizeof n, t->name, strlen(t->name));
            if (t->offset >= data_size)
                return ts_err_set(r->err, "gguf: tensor '%s': offset %" PRIu64 " is out of range: the data section (at byte %" PRIu64 ") has %" PRIu64 " bytes",
                                  n, t->offset, g->data_offset, data_size);
            return ts_err_set(r->err, "gguf: tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") runs past the end of the file: the data section has %" PRIu64 " bytes (truncated file?)",
                              n, t->offset, t->nbytes, data_size);
        }
        t->data = g->base + g->data_offset + t->offset;
    }

    /* Overlap: sort a scratch index by offset and compare neighbours. */
    const ts_gguf_tensor **by_off = malloc((size_t)g->n_tensors * sizeof *by_off);
    if (!by_off) return ts_err_set(r->err, "gguf: out of memory for %" PRId64 " tensors", g->n_tensors);
    memcpy(by_off, g->t_by_name, (size_t)g->n_tensors * sizeof *by_off);
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_t_offset);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const ts_gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->nbytes > b->offset) { /* no overflow: both lie inside the data section */
            char na[160], nb[160];
            sanitize(na, sizeof na, a->name, strlen(a->name));
            sanitize(nb, sizeof nb, b->name, strlen(b->name));
            ts_err_set(r->err, "gguf: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64 ", %" PRIu64 ") overlap", na, a->offset,
                       a->offset + a->nbytes, nb, b->offset, b->offset + b->nbytes);
            free(by_off);
            return -1;
        }
    }
    free(by_off);
    return 0;
}

static ts_gguf *parse(const uint8_t *data, uint64_t size, void *map, ts_err *err) {
    ts_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        ts_err_set(err, "gguf: out of memory");
        if (map) munmap(map, (size_t)size);
        return NULL;
    }
    g->base = data;
    g->size = size;
    g->map = map;
    rd r = {.p = data, .size = size, .pos = 0, .err = err, .ctx = ""};
    if (parse_header(g, &r) || parse_kvs(g, &r) || parse_alignment(g, &r) || parse_tensors(g, &r)) {
        ts_gguf_close(g);
        return NULL;
    }
    return g;
}

ts_gguf *ts_gguf_open_mem(const void *data, size_t size, ts_err *err) {
    if (!data && size) {
        ts_err_set(err, "gguf: NULL buffer of %zu bytes", size);
        return NULL;
    }
    static const uint8_t empty[1];
    return parse(data ? data : empty, size, NULL, err);
}

ts_gguf *ts_gguf_open(const char *path, ts_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ts_err_set(err, "gguf: cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        ts_err_set(err, "gguf: cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ts_err_set(err, "gguf: '%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        ts_err_set(err, "gguf: '%s' is an empty file (0 bytes), not a GGUF file", path);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        ts_err_set(err, "gguf: cannot mmap '%s' (%lld bytes): %s", path, (long long)st.st_size, strerror(mmap_errno));
        return NULL;
    }
    ts_gguf *g = parse(map, (uint64_t)st.st_size, map, err);
    if (!g) ts_err_prefix(err, "%s", path);
    return g;
}

void ts_gguf_close(ts_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free_value(&g->kv[i].val);
        }
    if (g->tensors)
        for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->t_by_name);
    if (g->map) munmap(g->map, (size_t)g->size);
    free(g);
}

/* ------------------------------------------------------------- accessors */

uint32_t ts_gguf_version(const ts_gguf *g) { return g->version; }
uint64_t ts_gguf_alignment(const ts_gguf *g) { return g->alignment; }
uint64_t ts_gguf_data_offset(const ts_gguf *g) { return g->data_offset; }
uint64_t ts_gguf_file_size(const ts_gguf *g) { return g->size; }
const uint8_t *ts_gguf_base(const ts_gguf *g) { return g->base; }
int64_t ts_gguf_n_kv(const ts_gguf *g) { return g->n_kv; }
int64_t ts_gguf_n_tensors(const ts_gguf *g) { return g->n_tensors; }

const ts_gguf_kv *ts_gguf_kv_at(const ts_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const ts_gguf_tensor *ts_gguf_tensor_at(const ts_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const ts_gguf_value *ts_gguf_find(const ts_gguf *g, const char *key) {
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv_by_key[mid]->key, key);
        if (c == 0) return &g->kv_by_key[mid]->val;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const ts_gguf_tensor *ts_gguf_find_tensor(const ts_gguf *g, const char *name) {
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->t_by_name[mid]->name, name);
        if (c == 0) return g->t_by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Finds key or writes "missing" into err. */
static const ts_gguf_value *need_key(const ts_gguf *g, const char *key, ts_err *err) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    if (!v) ts_err_set(err, "gguf: missing key '%s'", key);
    return v;
}

static int conv_u32(const ts_gguf_value *v, const char *key, uint32_t *out, ts_err *err) {
    if (vtype_is_unsigned(v->type)) {
        if (v->num.u64 > UINT32_MAX) return ts_err_set(err, "gguf: key '%s': value %" PRIu64 " does not fit in uint32", key, v->num.u64);
        *out = (uint32_t)v->num.u64;
        return 0;
    }
    if (vtype_is_signed(v->type)) {
        if (v->num.i64 < 0 || v->num.i64 > (int64_t)UINT32_MAX)
            return ts_err_set(err, "gguf: key '%s': value %" PRId64 " does not fit in uint32", key, v->num.i64);
        *out = (uint32_t)v->num.i64;
        return 0;
    }
    return ts_err_set(err, "gguf: key '%s' has type %s, expected an integer", key, ts_gguf_vtype_name(v->type));
}

static int conv_f32(const ts_gguf_value *v, const char *key, float *out, ts_err *err) {
    if (v->type == TS_GGUF_FLOAT32 || v->type == TS_GGUF_FLOAT64) *out = (float)v->num.f64;
    else if (vtype_is_unsigned(v->type)) *out = (float)v->num.u64;
    else if (vtype_is_signed(v->type)) *out = (float)v->num.i64;
    else return ts_err_set(err, "gguf: key '%s' has type %s, expected a number", key, ts_gguf_vtype_name(v->type));
    return 0;
}

static int conv_bool(const ts_gguf_value *v, const char *key, bool *out, ts_err *err) {
    if (v->type != TS_GGUF_BOOL) return ts_err_set(err, "gguf: key '%s' has type %s, expected BOOL", key, ts_gguf_vtype_name(v->type));
    *out = v->num.u64 != 0;
    return 0;
}

static int conv_str(const ts_gguf_value *v, const char *key, ts_gguf_str *out, ts_err *err) {
    if (v->type != TS_GGUF_STRING) return ts_err_set(err, "gguf: key '%s' has type %s, expected STRING", key, ts_gguf_vtype_name(v->type));
    *out = v->str;
    return 0;
}

int ts_gguf_get_u32(const ts_gguf *g, const char *key, uint32_t *out, ts_err *err) {
    const ts_gguf_value *v = need_key(g, key, err);
    return v ? conv_u32(v, key, out, err) : -1;
}

int ts_gguf_get_i64(const ts_gguf *g, const char *key, int64_t *out, ts_err *err) {
    const ts_gguf_value *v = need_key(g, key, err);
    if (!v) return -1;
    if (vtype_is_signed(v->type)) {
        *out = v->num.i64;
        return 0;
    }
    if (vtype_is_unsigned(v->type)) {
        if (v->num.u64 > (uint64_t)INT64_MAX) return ts_err_set(err, "gguf: key '%s': value %" PRIu64 " does not fit in int64", key, v->num.u64);
        *out = (int64_t)v->num.u64;
        return 0;
    }
    return ts_err_set(err, "gguf: key '%s' has type %s, expected an integer", key, ts_gguf_vtype_name(v->type));
}

int ts_gguf_get_f32(const ts_gguf *g, const char *key, float *out, ts_err *err) {
    const ts_gguf_value *v = need_key(g, key, err);
    return v ? conv_f32(v, key, out, err) : -1;
}

int ts_gguf_get_bool(const ts_gguf *g, const char *key, bool *out, ts_err *err) {
    const ts_gguf_value *v = need_key(g, key, err);
    return v ? conv_bool(v, key, out, err) : -1;
}

int ts_gguf_get_str(const ts_gguf *g, const char *key, ts_gguf_str *out, ts_err *err) {
    const ts_gguf_value *v = need_key(g, key, err);
    return v ? conv_str(v, key, out, err) : -1;
}

/* The opt_* variants: absent -> 0; converted -> 1; present but unusable -> -1. */
int ts_gguf_opt_u32(const ts_gguf *g, const char *key, uint32_t *out, ts_err *err) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    return !v ? 0 : conv_u32(v, key, out, err) ? -1 : 1;
}

int ts_gguf_opt_f32(const ts_gguf *g, const char *key, float *out, ts_err *err) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    return !v ? 0 : conv_f32(v, key, out, err) ? -1 : 1;
}

int ts_gguf_opt_bool(const ts_gguf *g, const char *key, bool *out, ts_err *err) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    return !v ? 0 : conv_bool(v, key, out, err) ? -1 : 1;
}

int ts_gguf_opt_str(const ts_gguf *g, const char *key, ts_gguf_str *out, ts_err *err) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    return !v ? 0 : conv_str(v, key, out, err) ? -1 : 1;
}

int64_t ts_gguf_arr_i64(const ts_gguf_value *v, uint64_t i) {
    if (v->type != TS_GGUF_ARRAY || !v->arr.data || i >= v->arr.n) return 0;
    size_t sz = ts_gguf_vtype_size(v->arr.type);
    ts_gguf_value e;
    memset(&e, 0, sizeof e);
    decode_scalar(v->arr.type, v->arr.data + i * sz, &e);
    if (vtype_is_signed(e.type)) return e.num.i64;
    if (vtype_is_unsigned(e.type) || e.type == TS_GGUF_BOOL) return (int64_t)e.num.u64;
    return 0;
}

double ts_gguf_arr_f64(const ts_gguf_value *v, uint64_t i) {
    if (v->type != TS_GGUF_ARRAY || !v->arr.data || i >= v->arr.n) return 0.0;
    size_t sz = ts_gguf_vtype_size(v->arr.type);
    ts_gguf_value e;
    memset(&e, 0, sizeof e);
    decode_scalar(v->arr.type, v->arr.data + i * sz, &e);
    if (e.type == TS_GGUF_FLOAT32 || e.type == TS_GGUF_FLOAT64) return e.num.f64;
    if (vtype_is_signed(e.type)) return (double)e.num.i64;
    return (double)e.num.u64;
}

void ts_gguf_drop_pages(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + pg - 1) / pg * pg, b = ((uintptr_t)p + n) / pg * pg;
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
