/* fuzz_gguf.c - libFuzzer target for the GGUF reader (built with TS_FUZZ=ON).
 *
 * Opens the input with ts_gguf_open_mem; a refusal must come with a message.
 * An accepted file is walked through every accessor (each kv, each string's
 * bytes, each array element, nested arrays, typed getters, each tensor's first
 * and last data byte) while checking the reader's promises: everything handed
 * out lies inside the input buffer, lookups find what iteration lists, tensor
 * sizes match the type table. ASan/UBSan (the library is built with them when
 * TS_FUZZ is on) catch the rest. A broken promise traps.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

#define REQUIRE(c)                  \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static const uint8_t *buf_lo, *buf_hi; /* the input: [lo, hi) */
static volatile uint64_t sink;         /* keeps the touches from being optimised away */

static bool inside(const void *p, uint64_t n) {
    const uint8_t *q = p;
    return q >= buf_lo && q <= buf_hi && n <= (uint64_t)(buf_hi - q);
}

static void walk_value(const ts_gguf_value *v, int depth) {
    REQUIRE(depth <= TS_GGUF_MAX_ARRAY_DEPTH);
    REQUIRE(v->type < TS_GGUF_VTYPE_COUNT);
    if (v->type == TS_GGUF_STRING) {
        REQUIRE(inside(v->str.ptr, v->str.len));
        if (v->str.len) sink += (uint8_t)v->str.ptr[0] + (uint8_t)v->str.ptr[v->str.len - 1];
        return;
    }
    if (v->type == TS_GGUF_BOOL) REQUIRE(v->num.u64 <= 1);
    if (v->type != TS_GGUF_ARRAY) return;
    REQUIRE(v->arr.type < TS_GGUF_VTYPE_COUNT);
    size_t esz = ts_gguf_vtype_size(v->arr.type);
    if (esz) {
        REQUIRE(v->arr.items == NULL);
        REQUIRE(v->arr.n == 0 || inside(v->arr.data, v->arr.n * esz));
        for (uint64_t i = 0; i < v->arr.n; i++) {
            sink += (uint64_t)ts_gguf_arr_i64(v, i);
            double d = ts_gguf_arr_f64(v, i);
            sink += d == d;
        }
        sink += (uint64_t)ts_gguf_arr_i64(v, v->arr.n); /* out of range: must return 0, not read */
    } else {
        REQUIRE(v->arr.n == 0 || v->arr.items != NULL);
        for (uint64_t i = 0; i < v->arr.n; i++) {
            REQUIRE(v->arr.items[i].type == v->arr.type);
            walk_value(&v->arr.items[i], depth + 1);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ts_err err;
    memset(&err, 0, sizeof err);
    ts_gguf *g = ts_gguf_open_mem(data, size, &err);
    if (!g) {
        REQUIRE(err.msg[0] != '\0' && memchr(err.msg, 0, sizeof err.msg));
        return 0;
    }
    buf_lo = data;
    buf_hi = data + size;
    REQUIRE(ts_gguf_base(g) == data && ts_gguf_file_size(g) == size);
    uint32_t ver = ts_gguf_version(g);
    REQUIRE(ver == 2 || ver == 3);
    uint64_t al = ts_gguf_alignment(g);
    REQUIRE(al && !(al & (al - 1)) && ts_gguf_data_offset(g) % al == 0);

    ts_err e2;
    for (int64_t i = 0; i < ts_gguf_n_kv(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        REQUIRE(kv && kv->key && strlen(kv->key) <= TS_GGUF_MAX_NAME_LEN);
        REQUIRE(ts_gguf_find(g, kv->key) == &kv->val);
        walk_value(&kv->val, 0);
        uint32_t u32;
        int64_t i64;
        float f;
        bool b;
        ts_gguf_str s;
        sink += (uint64_t)ts_gguf_get_u32(g, kv->key, &u32, &e2) + (uint64_t)ts_gguf_get_i64(g, kv->key, &i64, &e2);
        sink += (uint64_t)ts_gguf_get_f32(g, kv->key, &f, &e2) + (uint64_t)ts_gguf_get_bool(g, kv->key, &b, &e2);
        sink += (uint64_t)ts_gguf_opt_u32(g, kv->key, &u32, &e2) + (uint64_t)ts_gguf_opt_f32(g, kv->key, &f, &e2);
        sink += (uint64_t)ts_gguf_opt_bool(g, kv->key, &b, &e2);
        if (ts_gguf_opt_str(g, kv->key, &s, &e2) == 1) REQUIRE(inside(s.ptr, s.len));
        if (ts_gguf_get_str(g, kv->key, &s, &e2) == 0) REQUIRE(inside(s.ptr, s.len));
    }
    REQUIRE(ts_gguf_kv_at(g, ts_gguf_n_kv(g)) == NULL);

    uint64_t data_end = size > ts_gguf_data_offset(g) ? size - ts_gguf_data_offset(g) : 0;
    for (int64_t i = 0; i < ts_gguf_n_tensors(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        REQUIRE(t && t->name && ts_gguf_find_tensor(g, t->name) == t);
        REQUIRE(t->n_dims >= 1 && t->n_dims <= TS_GGUF_MAX_DIMS);
        const ts_type_traits *tt = ts_type_info(t->type);
        REQUIRE(tt != NULL);
        int64_t n = 1;
        for (int d = 0; d < TS_GGUF_MAX_DIMS; d++) {
            REQUIRE(t->ne[d] >= 1);
            REQUIRE(!__builtin_mul_overflow(n, t->ne[d], &n));
        }
        REQUIRE(n == t->n_elements && t->ne[0] % tt->blck == 0);
        REQUIRE(t->nbytes == (uint64_t)t->n_elements / tt->blck * tt->size);
        REQUIRE(t->offset % al == 0 && t->offset <= data_end && t->nbytes <= data_end - t->offset);
        REQUIRE((const uint8_t *)t->data == data + ts_gguf_data_offset(g) + t->offset);
        REQUIRE(inside(t->data, t->nbytes));
        sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    REQUIRE(ts_gguf_tensor_at(g, ts_gguf_n_tensors(g)) == NULL);
    /* no two tensors share a byte (pairwise: fuzz inputs hold few tensors) */
    for (int64_t i = 0; i < ts_gguf_n_tensors(g) && i < 64; i++)
        for (int64_t j = i + 1; j < ts_gguf_n_tensors(g) && j < 64; j++) {
            const ts_gguf_tensor *a = ts_gguf_tensor_at(g, i), *b = ts_gguf_tensor_at(g, j);
            REQUIRE(a->offset + a->nbytes <= b->offset || b->offset + b->nbytes <= a->offset);
        }
    ts_gguf_close(g);
    return 0;
}
