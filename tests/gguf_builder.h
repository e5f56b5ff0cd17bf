/* gguf_builder.h - a tiny in-memory GGUF writer for tests: appends raw
 * little-endian fields to a growable buffer, so tests can build valid files
 * and also files broken in exactly one place. Header-only (static functions),
 * shared by test_gguf_malformed.c and fuzz_gguf.c. */
#ifndef TS_TEST_GGUF_BUILDER_H
#define TS_TEST_GGUF_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} gb_buf;

static inline void gb_put(gb_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "gguf_builder: out of memory\n");
            exit(2);
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static inline void gb_u8(gb_buf *b, uint8_t v) { gb_put(b, &v, 1); }
static inline void gb_u16(gb_buf *b, uint16_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    gb_put(b, x, 2);
}
static inline void gb_u32(gb_buf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_put(b, x, 4);
}
static inline void gb_u64(gb_buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_put(b, x, 8);
}
static inline void gb_f32(gb_buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    gb_u32(b, u);
}
static inline void gb_f64(gb_buf *b, double f) {
    uint64_t u;
    memcpy(&u, &f, 8);
    gb_u64(b, u);
}
/* String with explicit length (may hold any bytes). */
static inline void gb_strn(gb_buf *b, const char *s, uint64_t len) {
    gb_u64(b, len);
    gb_put(b, s, (size_t)len);
}
static inline void gb_str(gb_buf *b, const char *s) { gb_strn(b, s, strlen(s)); }
static inline void gb_zeros(gb_buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) gb_u8(b, 0);
}
static inline void gb_pad(gb_buf *b, size_t align) {
    while (b->n % align) gb_u8(b, 0);
}

/* magic, version, tensor count, kv count */
static inline void gb_header(gb_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_put(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* key + type tag; the caller appends the value */
static inline void gb_key(gb_buf *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}

static inline void gb_kv_u32(gb_buf *b, const char *key, uint32_t v) {
    gb_key(b, key, 4);
    gb_u32(b, v);
}

static inline void gb_kv_str(gb_buf *b, const char *key, const char *v) {
    gb_key(b, key, 8);
    gb_str(b, v);
}

static inline void gb_tinfo(gb_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

#endif
