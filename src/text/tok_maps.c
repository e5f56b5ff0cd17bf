/* tok_maps.c - open-addressing hash tables for the tokenizers (see tok_maps.h). */
#include "text/tok_maps.h"

#include <stdlib.h>
#include <string.h>

static size_t capacity_for(size_t n_max) {
    size_t cap = 16;
    while (cap < n_max * 2 + 1) cap <<= 1; /* load factor <= 1/2 */
    return cap;
}

uint32_t ts_strmap_hash(const char *s, size_t len) {
    /* FNV-1a, then a final avalanche so the low bits used as index mix well. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h;
}

int ts_strmap_init(ts_strmap *m, size_t n_max, char *const *base) {
    if (n_max > SIZE_MAX / 4 / sizeof(ts_strmap_slot)) return -1;
    size_t cap = capacity_for(n_max);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].off = SIZE_MAX;
    m->mask = cap - 1;
    m->n = 0;
    m->base = base;
    return 0;
}

void ts_strmap_free(ts_strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->mask = m->n = 0;
}

static ts_strmap_slot *strmap_find(const ts_strmap *m, const char *s, size_t len, uint32_t h) {
    const char *base = *m->base;
    size_t i = h & m->mask;
    for (;;) {
        ts_strmap_slot *e = &m->slots[i];
        if (e->off == SIZE_MAX) return e;
        if (e->hash == h && e->len == len && memcmp(base + e->off, s, len) == 0) return e;
        i = (i + 1) & m->mask;
    }
}

static int strmap_insert(ts_strmap *m, size_t off, uint32_t len, int32_t id, int overwrite, int32_t *old) {
    const char *s = *m->base + off;
    uint32_t h = ts_strmap_hash(s, len);
    ts_strmap_slot *e = strmap_find(m, s, len, h);
    if (e->off != SIZE_MAX) {
        *old = e->id;
        if (overwrite) e->id = id;
        return 0;
    }
    /* Callers size the table for every key they insert, so it never fills. */
    e->off = off;
    e->len = len;
    e->hash = h;
    e->id = id;
    m->n++;
    *old = -1;
    return 1;
}

int32_t ts_strmap_put(ts_strmap *m, size_t off, uint32_t len, int32_t id) {
    int32_t old;
    strmap_insert(m, off, len, id, 1, &old);
    return old;
}

int ts_strmap_add(ts_strmap *m, size_t off, uint32_t len, int32_t id) {
    int32_t old;
    return strmap_insert(m, off, len, id, 0, &old);
}

int32_t ts_strmap_get(const ts_strmap *m, const char *s, size_t len) {
    if (!m->slots || len > UINT32_MAX) return -1;
    ts_strmap_slot *e = strmap_find(m, s, len, ts_strmap_hash(s, len));
    return e->off != SIZE_MAX ? e->id : -1;
}

static size_t u64_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (size_t)k;
}

int ts_u64map_init(ts_u64map *m, size_t n_max) {
    if (n_max > SIZE_MAX / 4 / sizeof(ts_u64map_slot)) return -1;
    size_t cap = capacity_for(n_max);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

void ts_u64map_free(ts_u64map *m) {
    free(m->slots);
    m->slots = NULL;
    m->mask = m->n = 0;
}

void ts_u64map_put(ts_u64map *m, uint64_t key, int32_t val) {
    size_t i = u64_hash(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & m->mask;
    if (m->slots[i].key == UINT64_MAX) m->n++;
    m->slots[i].key = key;
    m->slots[i].val = val;
}

int32_t ts_u64map_get(const ts_u64map *m, uint64_t key) {
    if (!m->slots) return -1;
    size_t i = u64_hash(key) & m->mask;
    for (;;) {
        const ts_u64map_slot *e = &m->slots[i];
        if (e->key == key) return e->val;
        if (e->key == UINT64_MAX) return -1;
        i = (i + 1) & m->mask;
    }
}
