/* gguf.h - read-only access to GGUF model files (v2 and v3).
 *
 * The file is untrusted: ts_gguf_open validates everything up front (bounds of
 * every read, overflow of every size product, counts before allocations, type
 * ids, dims, duplicate keys and tensor names, alignment, tensor placement inside
 * the data section without overlap) and afterwards every accessor is a plain
 * lookup that cannot fail on the file's account.
 *
 * The file is mmap'ed read-only; tensor data and string values point into the
 * map and stay valid until ts_gguf_close. Keys and tensor names are copied into
 * NUL-terminated strings owned by the ts_gguf.
 *
 * Choices on what is refused (beyond plain corruption): GGUF v1 and big-endian
 * files; keys and tensor names longer than TS_GGUF_MAX_NAME_LEN or containing a
 * NUL byte (string values may hold any bytes); arrays nested deeper than
 * TS_GGUF_MAX_ARRAY_DEPTH; BOOL values other than 0/1; general.alignment of a
 * type other than UINT32 or not a nonzero power of two; tensors with a dim of 0
 * (empty tensors) or >= 2^63 (negative as ggml's int64); types that are unknown
 * or were removed from ggml. A file with no tensors may end before the padded
 * data offset.
 */
#ifndef TS_GGUF_H
#define TS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Metadata value types, numbered as in the GGUF specification. */
enum ts_gguf_vtype {
    TS_GGUF_UINT8 = 0,
    TS_GGUF_INT8 = 1,
    TS_GGUF_UINT16 = 2,
    TS_GGUF_INT16 = 3,
    TS_GGUF_UINT32 = 4,
    TS_GGUF_INT32 = 5,
    TS_GGUF_FLOAT32 = 6,
    TS_GGUF_BOOL = 7,
    TS_GGUF_STRING = 8,
    TS_GGUF_ARRAY = 9,
    TS_GGUF_UINT64 = 10,
    TS_GGUF_INT64 = 11,
    TS_GGUF_FLOAT64 = 12,
    TS_GGUF_VTYPE_COUNT
};

#define TS_GGUF_MAX_DIMS 4
#define TS_GGUF_DEFAULT_ALIGNMENT 32
/* Limits applied to untrusted files (larger values are refused at open). */
#define TS_GGUF_MAX_NAME_LEN 65536u  /* bytes in a key or tensor name */
#define TS_GGUF_MAX_ARRAY_DEPTH 8    /* arrays of arrays of ... */

/* A string inside the mapped file: NOT NUL-terminated. */
typedef struct ts_gguf_str {
    const char *ptr;
    uint64_t len;
} ts_gguf_str;

/* One metadata value. Scalars are decoded; strings point into the map; arrays
 * keep their element type and count, with `data` pointing at the first raw
 * little-endian element in the map for fixed-size element types (may be
 * unaligned: read with memcpy or the ts_gguf_arr_* helpers), and `items` holding
 * decoded child values for arrays of strings or of arrays (nested arrays). */
typedef struct ts_gguf_value {
    uint32_t type; /* enum ts_gguf_vtype */
    union {
        uint64_t u64; /* all unsigned ints, and bool (0/1) */
        int64_t i64;  /* all signed ints */
        double f64;   /* FLOAT32 and FLOAT64 */
    } num;
    ts_gguf_str str; /* STRING */
    struct {
        uint32_t type; /* element type */
        uint64_t n;    /* element count */
        const uint8_t *data;          /* fixed-size elements: raw bytes in the map */
        struct ts_gguf_value *items;  /* STRING or ARRAY elements: n decoded values */
    } arr;
} ts_gguf_value;

typedef struct ts_gguf_kv {
    char *key; /* NUL-terminated copy */
    ts_gguf_value val;
} ts_gguf_kv;

typedef struct ts_gguf_tensor {
    char *name;        /* NUL-terminated copy */
    uint32_t type;     /* ggml type id, see quant/quant.h (enum ts_type) */
    uint32_t n_dims;   /* 1..4 */
    int64_t ne[TS_GGUF_MAX_DIMS]; /* ne[0] is the innermost (row) length; unused dims are 1 */
    int64_t n_elements;
    uint64_t offset;   /* relative to the start of the data section */
    uint64_t nbytes;
    const void *data;  /* points into the map */
} ts_gguf_tensor;

typedef struct ts_gguf ts_gguf;

/* Opens and validates a file. On failure returns NULL and err names the field
 * and the bad value, e.g. "PATH: gguf: tensor 'blk.0.attn_q.weight': offset 100
 * is not a multiple of alignment 32" or "gguf: truncated at byte 4123 while
 * reading value of key 'tokenizer.ggml.tokens' (need 8 bytes, 3 left)". */
ts_gguf *ts_gguf_open(const char *path, ts_err *err);
/* Same over a caller-owned buffer (not copied; must outlive the handle). Used by
 * tests and the fuzzer. */
ts_gguf *ts_gguf_open_mem(const void *data, size_t size, ts_err *err);
void ts_gguf_close(ts_gguf *g); /* NULL is a no-op */

uint32_t ts_gguf_version(const ts_gguf *g);
uint64_t ts_gguf_alignment(const ts_gguf *g);
uint64_t ts_gguf_data_offset(const ts_gguf *g); /* file offset of the data section */
uint64_t ts_gguf_file_size(const ts_gguf *g);
const uint8_t *ts_gguf_base(const ts_gguf *g);  /* start of the mapped file */
/* Drops the whole pages inside [p, p + n) of a file mapping (clean pages:
 * the next access reads them from the file again). For data repacked
 * elsewhere, so that it is not resident twice. Advisory: a failure only
 * costs memory. */
void ts_gguf_drop_pages(const void *p, size_t n);

/* Metadata */
int64_t ts_gguf_n_kv(const ts_gguf *g);
const ts_gguf_kv *ts_gguf_kv_at(const ts_gguf *g, int64_t i);
const ts_gguf_value *ts_gguf_find(const ts_gguf *g, const char *key); /* NULL if absent; binary search */

/* Typed getters. Return 0 on success; -1 with a message in err if the key is
 * missing or has an incompatible type/value. Integer getters accept any
 * integer type whose value fits; get_f32 accepts FLOAT32/FLOAT64 and integers. */
int ts_gguf_get_u32(const ts_gguf *g, const char *key, uint32_t *out, ts_err *err);
int ts_gguf_get_i64(const ts_gguf *g, const char *key, int64_t *out, ts_err *err);
int ts_gguf_get_f32(const ts_gguf *g, const char *key, float *out, ts_err *err);
int ts_gguf_get_bool(const ts_gguf *g, const char *key, bool *out, ts_err *err);
int ts_gguf_get_str(const ts_gguf *g, const char *key, ts_gguf_str *out, ts_err *err);
/* Optional variants: return 1 if found and converted, 0 if absent (out untouched),
 * -1 if present with an incompatible type. */
int ts_gguf_opt_u32(const ts_gguf *g, const char *key, uint32_t *out, ts_err *err);
int ts_gguf_opt_f32(const ts_gguf *g, const char *key, float *out, ts_err *err);
int ts_gguf_opt_bool(const ts_gguf *g, const char *key, bool *out, ts_err *err);
int ts_gguf_opt_str(const ts_gguf *g, const char *key, ts_gguf_str *out, ts_err *err);

/* Array element readers for fixed-size element types. Any integer (or BOOL)
 * element type converts to int64 (UINT64 above INT64_MAX wraps), any number to
 * double; float elements read as int64 give 0, as does i >= v->arr.n or a value
 * that is not an array of fixed-size elements. */
int64_t ts_gguf_arr_i64(const ts_gguf_value *v, uint64_t i);
double ts_gguf_arr_f64(const ts_gguf_value *v, uint64_t i);
/* Size in bytes of one element of a fixed-size value type; 0 for STRING/ARRAY/unknown. */
size_t ts_gguf_vtype_size(uint32_t type);
const char *ts_gguf_vtype_name(uint32_t type);

/* Tensors */
int64_t ts_gguf_n_tensors(const ts_gguf *g);
const ts_gguf_tensor *ts_gguf_tensor_at(const ts_gguf *g, int64_t i);
const ts_gguf_tensor *ts_gguf_find_tensor(const ts_gguf *g, const char *name); /* NULL if absent */

#endif
