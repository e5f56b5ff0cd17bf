/* tok_maps.h - the two hash tables the tokenizers need, built once at load
 * and read-only afterwards (so lookups are safe from several threads):
 *   ts_strmap  byte string -> token id (vocabulary lookups);
 *   ts_u64map  64-bit key  -> int32 value (BPE merge pairs, the special-token trie).
 * Open addressing with linear probing at load factor <= 1/2.
 */
#ifndef TS_TEXT_TOK_MAPS_H
#define TS_TEXT_TOK_MAPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts_strmap_slot {
    size_t off; /* key bytes at *base + off; SIZE_MAX: empty slot */
    uint32_t len;
    uint32_t hash;
    int32_t id;
} ts_strmap_slot;

/* Keys live in a caller-owned buffer that may be reallocated (the tokenizer's
 * string pool), so slots hold offsets into *base rather than pointers. */
typedef struct ts_strmap {
    ts_strmap_slot *slots;
    size_t mask; /* capacity - 1 (capacity is a power of two) */
    size_t n;
    char *const *base;
} ts_strmap;

/* Sizes the table for up to n_max keys. 0 on success, -1 if out of memory. */
int ts_strmap_init(ts_strmap *m, size_t n_max, char *const *base);
void ts_strmap_free(ts_strmap *m);
uint32_t ts_strmap_hash(const char *s, size_t len);
/* Inserts the key at *base + off, or overwrites its id (later insertions win,
 * like a Python dict). Returns the previous id or -1. */
int32_t ts_strmap_put(ts_strmap *m, size_t off, uint32_t len, int32_t id);
/* Inserts only if absent. Returns 1 if inserted, 0 if already there. */
int ts_strmap_add(ts_strmap *m, size_t off, uint32_t len, int32_t id);
int32_t ts_strmap_get(const ts_strmap *m, const char *s, size_t len); /* -1 if absent */

typedef struct ts_u64map_slot {
    uint64_t key; /* UINT64_MAX: empty */
    int32_t val;
} ts_u64map_slot;

typedef struct ts_u64map {
    ts_u64map_slot *slots;
    size_t mask;
    size_t n;
} ts_u64map;

int ts_u64map_init(ts_u64map *m, size_t n_max);
void ts_u64map_free(ts_u64map *m);
/* key must not be UINT64_MAX. Inserts or overwrites. */
void ts_u64map_put(ts_u64map *m, uint64_t key, int32_t val);
int32_t ts_u64map_get(const ts_u64map *m, uint64_t key); /* -1 if absent */

#endif
