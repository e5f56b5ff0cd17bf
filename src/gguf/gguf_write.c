/* gguf_write.c - GGUF v3 writer (see gguf_write.h).
 *
 * Each metadata value is serialised to its on-disk bytes (u32 type + payload)
 * as soon as it is added, so the writer holds no pointers into a source file's
 * metadata. Tensors hold their data pointer (borrowed or owned) until write.
 * File layout (little-endian): "GGUF", u32 version 3, u64 n_tensors, u64 n_kv,
 * the kvs, the tensor infos {string name, u32 n_dims, u64 ne[n_dims], u32 type,
 * u64 offset}, zero padding to the alignment, then each tensor's data padded
 * to the alignment.
 */
#include "gguf/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/quant.h"

/* ---- growable byte buffer ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static int put(bytes *b, const void *d, size_t n, ts_err *err) {
    if (n > SIZE_MAX - b->n) return ts_err_set(err, "gguf writer: value too large");
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) {
            if (cap > SIZE_MAX / 2) return ts_err_set(err, "gguf writer: value too large");
            cap *= 2;
        }
        uint8_t *np = realloc(b->p, cap);
        if (!np) return ts_err_set(err, "gguf writer: out of memory (%zu bytes)", cap);
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}

static int put_le(bytes *b, uint64_t v, int nbytes, ts_err *err) {
    uint8_t le[8];
    for (int i = 0; i < nbytes; i++) le[i] = (uint8_t)(v >> (8 * i));
    return put(b, le, (size_t)nbytes, err);
}

static int put_str(bytes *b, const char *s, uint64_t len, ts_err *err) {
    if (len > SIZE_MAX) return ts_err_set(err, "gguf writer: string too large");
    if (put_le(b, len, 8, err)) return -1;
    return put(b, s, (size_t)len, err);
}

/* ---- writer state ---- */

typedef struct {
    char *key;
    bytes val; /* u32 type + payload */
} wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[TS_GGUF_MAX_DIMS];
    const void *data;
    void *owned; /* == data when the writer frees it */
    uint64_t nbytes;
    uint64_t offset; /* in the data section, set by write */
} wtensor;

struct ts_gguf_writer {
    wkv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
};

ts_gguf_writer *ts_gguf_writer_new(ts_err *err) {
    ts_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) ts_err_set(err, "gguf writer: out of memory");
    return w;
}

void ts_gguf_writer_free(ts_gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].owned);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

int64_t ts_gguf_writer_n_kv(const ts_gguf_writer *w) { return w ? w->n_kv : 0; }
int64_t ts_gguf_writer_n_tensors(const ts_gguf_writer *w) { return w ? w->n_t : 0; }

/* ---- metadata ---- */

static int check_name(const char *what, const char *name, ts_err *err) {
    if (!name || !*name) return ts_err_set(err, "gguf writer: empty %s", what);
    size_t len = strlen(name);
    if (len > TS_GGUF_MAX_NAME_LEN)
        return ts_err_set(err, "gguf writer: %s of %zu bytes is longer than %u", what, len, TS_GGUF_MAX_NAME_LEN);
    return 0;
}

/* Writes the payload of a value of type `type` (no type prefix). Integers are
 * range-checked so that a caller-built value cannot be silently truncated. */
static int put_payload(bytes *b, uint32_t type, const ts_gguf_value *v, int depth, const char *key, ts_err *err) {
    switch (type) {
    case TS_GGUF_UINT8:
    case TS_GGUF_UINT16:
    case TS_GGUF_UINT32:
    case TS_GGUF_UINT64: {
        int nb = (int)ts_gguf_vtype_size(type);
        if (nb < 8 && v->num.u64 >> (8 * nb))
            return ts_err_set(err, "gguf writer: key '%s': value %llu does not fit %s", key,
                              (unsigned long long)v->num.u64, ts_gguf_vtype_name(type));
        return put_le(b, v->num.u64, nb, err);
    }
    case TS_GGUF_INT8:
    case TS_GGUF_INT16:
    case TS_GGUF_INT32:
    case TS_GGUF_INT64: {
        int nb = (int)ts_gguf_vtype_size(type);
        if (nb < 8) {
            int64_t lim = (int64_t)1 << (8 * nb - 1);
            if (v->num.i64 < -lim || v->num.i64 >= lim)
                return ts_err_set(err, "gguf writer: key '%s': value %lld does not fit %s", key,
                                  (long long)v->num.i64, ts_gguf_vtype_name(type));
        }
        return put_le(b, (uint64_t)v->num.i64, nb, err);
    }
    case TS_GGUF_FLOAT32: {
        float f = (float)v->num.f64;
        uint32_t u;
        memcpy(&u, &f, 4);
        return put_le(b, u, 4, err);
    }
    case TS_GGUF_FLOAT64: {
        uint64_t u;
        memcpy(&u, &v->num.f64, 8);
        return put_le(b, u, 8, err);
    }
    case TS_GGUF_BOOL:
        if (v->num.u64 > 1)
            return ts_err_set(err, "gguf writer: key '%s': bool value %llu is not 0 or 1", key,
                              (unsigned long long)v->num.u64);
        return put_le(b, v->num.u64, 1, err);
    case TS_GGUF_STRING:
        if (!v->str.ptr && v->str.len)
            return ts_err_set(err, "gguf writer: key '%s': string of length %llu has no data", key,
                              (unsigned long long)v->str.len);
        return put_str(b, v->str.ptr, v->str.len, err);
    case TS_GGUF_ARRAY: {
        const uint32_t et = v->arr.type;
        const uint64_t n = v->arr.n;
        if (depth >= (int)TS_GGUF_MAX_ARRAY_DEPTH)
            return ts_err_set(err, "gguf writer: key '%s': arrays nested deeper than %u", key,
                              TS_GGUF_MAX_ARRAY_DEPTH);
        if (put_le(b, et, 4, err) || put_le(b, n, 8, err)) return -1;
        size_t esz = ts_gguf_vtype_size(et);
        if (esz) {
            uint64_t total;
            if (ts_mul_overflow_u64(n, esz, &total) || total > SIZE_MAX)
                return ts_err_set(err, "gguf writer: key '%s': array of %llu elements too large", key,
                                  (unsigned long long)n);
            if (n && !v->arr.data)
                return ts_err_set(err, "gguf writer: key '%s': array of %llu elements has no data", key,
                                  (unsigned long long)n);
            return put(b, v->arr.data, (size_t)total, err);
        }
        if (et != TS_GGUF_STRING && et != TS_GGUF_ARRAY)
            return ts_err_set(err, "gguf writer: key '%s': unknown array element type %u", key, et);
        if (n && !v->arr.items)
            return ts_err_set(err, "gguf writer: key '%s': array of %llu elements has no items", key,
                              (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (put_payload(b, et, &v->arr.items[i], depth + 1, key, err)) return -1;
        return 0;
    }
    default:
        return ts_err_set(err, "gguf writer: key '%s': unknown value type %u", key, type);
    }
}

static int64_t find_kv(const ts_gguf_writer *w, const char *key) {
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) return i;
    return -1;
}

int ts_gguf_writer_set_kv(ts_gguf_writer *w, const char *key, const ts_gguf_value *v, ts_err *err) {
    if (check_name("key", key, err)) return -1;
    if (!strcmp(key, "general.alignment")) {
        /* the reader (and ggml) insist on a UINT32 power of two */
        if (v->type != TS_GGUF_UINT32 || v->num.u64 == 0 || v->num.u64 > UINT32_MAX ||
            (v->num.u64 & (v->num.u64 - 1)))
            return ts_err_set(err, "gguf writer: general.alignment must be a UINT32 power of two, got %s %llu",
                              ts_gguf_vtype_name(v->type), (unsigned long long)v->num.u64);
    }
    bytes val = {0};
    if (put_le(&val, v->type, 4, err) || put_payload(&val, v->type, v, 0, key, err)) {
        free(val.p);
        return -1;
    }
    int64_t i = find_kv(w, key);
    if (i >= 0) { /* replace in place, keeping the order */
        free(w->kv[i].val.p);
        w->kv[i].val = val;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *nk = realloc(w->kv, (size_t)cap * sizeof *nk);
        if (!nk) {
            free(val.p);
            return ts_err_set(err, "gguf writer: out of memory");
        }
        w->kv = nk;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(val.p);
        return ts_err_set(err, "gguf writer: out of memory");
    }
    w->kv[w->n_kv++] = (wkv){.key = k, .val = val};
    return 0;
}

int ts_gguf_writer_add_kv_from(ts_gguf_writer *w, const ts_gguf_kv *kv, ts_err *err) {
    return ts_gguf_writer_set_kv(w, kv->key, &kv->val, err);
}

int ts_gguf_writer_set_str(ts_gguf_writer *w, const char *key, const char *s, ts_err *err) {
    ts_gguf_value v = {.type = TS_GGUF_STRING, .str = {.ptr = s, .len = s ? strlen(s) : 0}};
    return ts_gguf_writer_set_kv(w, key, &v, err);
}

int ts_gguf_writer_set_u32(ts_gguf_writer *w, const char *key, uint32_t u, ts_err *err) {
    ts_gguf_value v = {.type = TS_GGUF_UINT32, .num.u64 = u};
    return ts_gguf_writer_set_kv(w, key, &v, err);
}

int ts_gguf_writer_remove_kv(ts_gguf_writer *w, const char *key) {
    int64_t i = find_kv(w, key);
    if (i < 0) return 0;
    free(w->kv[i].key);
    free(w->kv[i].val.p);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
    return 1;
}

/* ---- tensors ---- */

static int add_tensor(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                      const void *data, void *owned, uint64_t nbytes, ts_err *err) {
    if (check_name("tensor name", name, err)) return -1;
    const ts_type_traits *tt = ts_type_info(type);
    if (!tt) return ts_err_set(err, "gguf writer: tensor '%s': unknown type id %u", name, type);
    if (n_dims < 1 || n_dims > TS_GGUF_MAX_DIMS)
        return ts_err_set(err, "gguf writer: tensor '%s': n_dims %u not in 1..%d", name, n_dims, TS_GGUF_MAX_DIMS);
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1) return ts_err_set(err, "gguf writer: tensor '%s': ne[%u] = %lld", name, d, (long long)ne[d]);
        if (d > 0 && ts_mul_overflow_u64(rows, (uint64_t)ne[d], &rows))
            return ts_err_set(err, "gguf writer: tensor '%s': element count overflows", name);
    }
    if (ne[0] % tt->blck)
        return ts_err_set(err, "gguf writer: tensor '%s': row length %lld not a multiple of the %s block size %u",
                          name, (long long)ne[0], tt->name, tt->blck);
    uint64_t row_bytes, want;
    if (ts_mul_overflow_u64((uint64_t)(ne[0] / tt->blck), tt->size, &row_bytes) ||
        ts_mul_overflow_u64(row_bytes, rows, &want))
        return ts_err_set(err, "gguf writer: tensor '%s': size overflows", name);
    if (nbytes != want)
        return ts_err_set(err, "gguf writer: tensor '%s': %llu bytes given, a %s tensor of this shape needs %llu",
                          name, (unsigned long long)nbytes, tt->name, (unsigned long long)want);
    if (!data) return ts_err_set(err, "gguf writer: tensor '%s': no data", name);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return ts_err_set(err, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt) return ts_err_set(err, "gguf writer: out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor t = {.type = type, .n_dims = n_dims, .data = data, .owned = owned, .nbytes = nbytes};
    for (int d = 0; d < TS_GGUF_MAX_DIMS; d++) t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t.name = strdup(name);
    if (!t.name) return ts_err_set(err, "gguf writer: out of memory");
    w->t[w->n_t++] = t;
    return 0;
}

int ts_gguf_writer_add_tensor(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne, const void *data, uint64_t nbytes, ts_err *err) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, nbytes, err);
}

int ts_gguf_writer_add_tensor_owned(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, void *data, uint64_t nbytes, ts_err *err) {
    if (add_tensor(w, name, type, n_dims, ne, data, data, nbytes, err)) {
        free(data);
        return -1;
    }
    return 0;
}

/* ---- output ---- */

typedef struct {
    FILE *f;
    uint64_t pos;
    int failed;
} out;

static void emit(out *o, const void *d, size_t n) {
    if (o->failed || !n) return;
    if (fwrite(d, 1, n, o->f) != n) o->failed = errno ? errno : EIO;
    o->pos += n;
}

static void emit_le(out *o, uint64_t v, int nbytes) {
    uint8_t le[8];
    for (int i = 0; i < nbytes; i++) le[i] = (uint8_t)(v >> (8 * i));
    emit(o, le, (size_t)nbytes);
}

static void emit_pad(out *o, uint64_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - o->pos % align) % align;
    while (pad) {
        size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        emit(o, zeros, k);
        pad -= k;
    }
}

static uint64_t writer_alignment(const ts_gguf_writer *w) {
    int64_t i = find_kv(w, "general.alignment");
    if (i < 0) return TS_GGUF_DEFAULT_ALIGNMENT;
    const uint8_t *p = w->kv[i].val.p + 4; /* validated UINT32 in set_kv */
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24);
}

int ts_gguf_writer_write(ts_gguf_writer *w, const char *path, ts_err *err) {
    const uint64_t align = writer_alignment(w);

    /* tensor offsets inside the data section */
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t padded = w->t[i].nbytes + (align - w->t[i].nbytes % align) % align;
        if (ts_add_overflow_u64(off, padded, &off))
            return ts_err_set(err, "gguf writer: total tensor data size overflows");
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return ts_err_set(err, "gguf writer: out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    out o = {.f = fopen(tmp, "wb")};
    if (!o.f) {
        ts_err_set(err, "cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    errno = 0;

    emit(&o, "GGUF", 4);
    emit_le(&o, 3, 4);
    emit_le(&o, (uint64_t)w->n_t, 8);
    emit_le(&o, (uint64_t)w->n_kv, 8);
    for (int64_t i = 0; i < w->n_kv; i++) {
        size_t kl = strlen(w->kv[i].key);
        emit_le(&o, kl, 8);
        emit(&o, w->kv[i].key, kl);
        emit(&o, w->kv[i].val.p, w->kv[i].val.n);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        size_t nl = strlen(t->name);
        emit_le(&o, nl, 8);
        emit(&o, t->name, nl);
        emit_le(&o, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) emit_le(&o, (uint64_t)t->ne[d], 8);
        emit_le(&o, t->type, 4);
        emit_le(&o, t->offset, 8);
    }
    emit_pad(&o, align);
    for (int64_t i = 0; i < w->n_t && !o.failed; i++) {
        /* fwrite takes size_t; write huge tensors in pieces */
        const uint8_t *p = w->t[i].data;
        uint64_t left = w->t[i].nbytes;
        while (left && !o.failed) {
            size_t k = left > (1u << 30) ? (size_t)1 << 30 : (size_t)left;
            emit(&o, p, k);
            p += k;
            left -= k;
        }
        emit_pad(&o, align);
    }
    int failed = o.failed;
    if (fclose(o.f) && !failed) failed = errno ? errno : EIO;
    if (!failed && rename(tmp, path)) failed = errno ? errno : EIO;
    if (failed) {
        unlink(tmp);
        ts_err_set(err, "cannot write '%s': %s", path, strerror(failed));
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
