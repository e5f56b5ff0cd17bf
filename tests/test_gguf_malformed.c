/* test_gguf_malformed.c - the GGUF reader against files built in memory.
 *
 *  - one malformed file per failure kind: each must be refused by
 *    ts_gguf_open_mem with a message containing the expected text, and again
 *    by ts_gguf_open once written to disk (the mmap path), plus an empty file;
 *  - a valid file holding every metadata type (scalars, string with odd bytes,
 *    arrays of every fixed type, array of strings, nested arrays, empty array)
 *    and tensors, for v2 and v3: every value, getter and tensor field checked
 *    exactly, through both open paths.
 *
 * `test_gguf_malformed --write-seeds DIR` writes the valid and malformed files
 * into DIR instead (seed corpus of the fuzzer).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "quant/quant.h"

static int failures;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                          \
        }                                                                        \
    } while (0)

/* ------------------------------------------------------------ mini file */

/* A small valid file: 2 kvs, one F32 [8, 2] tensor. Marks record where
 * interesting fields start so truncation cases can cut there. */
typedef struct {
    size_t key0_chars; /* first byte of the first key's characters */
    size_t val0_chars; /* first byte of the first value's characters */
    size_t dims0;      /* first dim of the tensor */
    size_t data;       /* data section */
} mini_marks;

static void build_mini(gb_buf *b, uint32_t version, mini_marks *m) {
    mini_marks dummy;
    if (!m) m = &dummy;
    gb_header(b, version, 1, 2);
    m->key0_chars = b->n + 8;
    gb_key(b, "general.architecture", TS_GGUF_STRING);
    m->val0_chars = b->n + 8;
    gb_str(b, "test");
    gb_kv_u32(b, "a.u32", 7);
    uint64_t ne[2] = {8, 2};
    gb_str(b, "w");
    gb_u32(b, 2);
    m->dims0 = b->n;
    gb_u64(b, ne[0]);
    gb_u64(b, ne[1]);
    gb_u32(b, TS_TYPE_F32);
    gb_u64(b, 0);
    gb_pad(b, 32);
    m->data = b->n;
    for (int i = 0; i < 64; i++) gb_u8(b, (uint8_t)i);
}

/* Header + the given kvs (built by the caller) + tensors, for tensor cases:
 * one kv, then n tensors described by the arrays, then data of data_len bytes. */
typedef struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} tdesc;

static void build_tensors(gb_buf *b, const tdesc *t, int n, size_t data_len) {
    gb_header(b, 3, (uint64_t)n, 1);
    gb_kv_str(b, "general.architecture", "test");
    for (int i = 0; i < n; i++) gb_tinfo(b, t[i].name, t[i].n_dims, t[i].ne, t[i].type, t[i].offset);
    gb_pad(b, 32);
    gb_zeros(b, data_len);
}

/* ---------------------------------------------------------------- cases */

static void c_bad_magic(gb_buf *b) {
    build_mini(b, 3, NULL);
    b->p[3] = 'X';
}
static void c_version1(gb_buf *b) { build_mini(b, 1, NULL); }
static void c_version4(gb_buf *b) { build_mini(b, 4, NULL); }
static void c_version0(gb_buf *b) { build_mini(b, 0, NULL); }
static void c_big_endian(gb_buf *b) { build_mini(b, 0x03000000u, NULL); }
static void c_trunc_magic(gb_buf *b) { gb_put(b, "GG", 2); }
static void c_trunc_header(gb_buf *b) {
    build_mini(b, 3, NULL);
    b->n = 12;
}
static void c_trunc_key(gb_buf *b) {
    gb_header(b, 3, 0, 2);
    gb_key(b, "a", TS_GGUF_UINT8);
    gb_u8(b, 1);
    gb_u64(b, 20); /* second key: 20 bytes announced, 5 present */
    gb_put(b, "gener", 5);
}
static void c_trunc_value(gb_buf *b) {
    mini_marks m;
    build_mini(b, 3, &m);
    b->n = m.val0_chars + 2;
}
static void c_trunc_tinfo(gb_buf *b) {
    mini_marks m;
    build_mini(b, 3, &m);
    b->n = m.dims0 + 12;
}
static void c_trunc_data(gb_buf *b) {
    build_mini(b, 3, NULL);
    b->n -= 10;
}
/* An array of strings whose last element is cut: the message of the brief. */
static void c_trunc_str_array(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "tokenizer.ggml.tokens", TS_GGUF_ARRAY);
    gb_u32(b, TS_GGUF_STRING);
    gb_u64(b, 3);
    gb_str(b, "aaaaaaaaaa");
    gb_str(b, "b");
    gb_u8(b, 1); /* 3 of the 8 bytes of the third length */
    gb_u8(b, 0);
    gb_u8(b, 0);
}
static void c_trunc_array(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "arr", TS_GGUF_ARRAY);
    gb_u32(b, TS_GGUF_UINT32);
    gb_u64(b, 4);
    gb_u32(b, 1);
    gb_u16(b, 2);
}
static void c_absurd_kv_count(gb_buf *b) {
    build_mini(b, 3, NULL);
    uint64_t v = UINT64_C(1) << 62;
    for (int i = 0; i < 8; i++) b->p[16 + i] = (uint8_t)(v >> (8 * i));
}
static void c_absurd_tensor_count(gb_buf *b) {
    build_mini(b, 3, NULL);
    for (int i = 0; i < 8; i++) b->p[8 + i] = 0xff;
}
static void c_absurd_string_len(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, UINT64_C(1) << 63);
    gb_put(b, "abcdefghijklmnop", 16);
}
static void c_absurd_array_len(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "arr", TS_GGUF_ARRAY);
    gb_u32(b, TS_GGUF_UINT32);
    gb_u64(b, UINT64_C(1) << 61);
    gb_u32(b, 1);
}
static void c_absurd_str_array_len(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "tokens", TS_GGUF_ARRAY);
    gb_u32(b, TS_GGUF_STRING);
    gb_u64(b, UINT64_C(1) << 60);
    gb_str(b, "x");
}
static void c_unknown_vtype(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "k", 13);
    gb_u32(b, 0);
}
static void c_unknown_elem_type(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "k", TS_GGUF_ARRAY);
    gb_u32(b, 99);
    gb_u64(b, 1);
    gb_u32(b, 0);
}
static void c_bad_bool(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "flag", TS_GGUF_BOOL);
    gb_u8(b, 2);
}
static void c_bad_bool_array(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "flags", TS_GGUF_ARRAY);
    gb_u32(b, TS_GGUF_BOOL);
    gb_u64(b, 3);
    gb_u8(b, 1);
    gb_u8(b, 0);
    gb_u8(b, 7);
}
static void c_key_too_long(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    size_t n = TS_GGUF_MAX_NAME_LEN + 1;
    char *k = malloc(n);
    memset(k, 'k', n);
    gb_strn(b, k, n);
    free(k);
    gb_u32(b, TS_GGUF_UINT8);
    gb_u8(b, 1);
}
static void c_key_nul(gb_buf *b) {
    gb_header(b, 3, 0, 1);
    gb_strn(b, "ab\0cd", 5);
    gb_u32(b, TS_GGUF_UINT8);
    gb_u8(b, 1);
}
static void c_unknown_ttype(gb_buf *b) {
    tdesc t = {"w", 1, {32}, 99, 0};
    build_tensors(b, &t, 1, 128);
}
static void c_removed_ttype(gb_buf *b) {
    tdesc t = {"w", 1, {32}, 4, 0};
    build_tensors(b, &t, 1, 128);
}
static void alignment_kv_file(gb_buf *b, uint32_t type, uint64_t align) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "general.alignment", type);
    if (type == TS_GGUF_UINT64) gb_u64(b, align);
    else gb_u32(b, (uint32_t)align);
}
static void c_align0(gb_buf *b) { alignment_kv_file(b, TS_GGUF_UINT32, 0); }
static void c_align3(gb_buf *b) { alignment_kv_file(b, TS_GGUF_UINT32, 3); }
static void c_align_type(gb_buf *b) { alignment_kv_file(b, TS_GGUF_UINT64, 32); }
static void c_misaligned(gb_buf *b) {
    tdesc t[2] = {{"a", 1, {8}, TS_TYPE_F32, 0}, {"blk.0.attn_q.weight", 1, {8}, TS_TYPE_F32, 100}};
    build_tensors(b, t, 2, 256);
}
static void c_offset_range(gb_buf *b) {
    tdesc t = {"w", 1, {8}, TS_TYPE_F32, UINT64_C(1) << 40};
    build_tensors(b, &t, 1, 64);
}
static void c_offset_huge(gb_buf *b) { /* offset + nbytes would overflow u64 */
    tdesc t = {"w", 1, {8}, TS_TYPE_F32, UINT64_MAX - 31};
    build_tensors(b, &t, 1, 64);
}
static void c_overlap(gb_buf *b) {
    tdesc t[2] = {{"first", 1, {16}, TS_TYPE_F32, 32}, {"second", 1, {16}, TS_TYPE_F32, 64}};
    build_tensors(b, t, 2, 256);
}
static void c_dim_overflow(gb_buf *b) {
    tdesc t = {"w", 3, {UINT64_C(1) << 32, UINT64_C(1) << 16, UINT64_C(1) << 16}, TS_TYPE_F32, 0};
    build_tensors(b, &t, 1, 64);
}
static void c_bytes_overflow(gb_buf *b) { /* element count fits in int64, bytes do not fit in 64 bits */
    tdesc t = {"w", 1, {UINT64_C(1) << 62}, TS_TYPE_F64, 0};
    build_tensors(b, &t, 1, 64);
}
static void c_too_many_dims(gb_buf *b) {
    tdesc t = {"w", 5, {1, 1, 1, 1, 1}, TS_TYPE_F32, 0};
    build_tensors(b, &t, 1, 64);
}
static void c_zero_n_dims(gb_buf *b) {
    tdesc t = {"w", 0, {0}, TS_TYPE_F32, 0};
    build_tensors(b, &t, 1, 64);
}
static void c_zero_dim(gb_buf *b) {
    tdesc t = {"w", 2, {8, 0}, TS_TYPE_F32, 0};
    build_tensors(b, &t, 1, 64);
}
static void c_negative_dim(gb_buf *b) {
    tdesc t = {"w", 2, {8, UINT64_MAX}, TS_TYPE_F32, 0};
    build_tensors(b, &t, 1, 64);
}
static void c_row_block(gb_buf *b) {
    tdesc t = {"w", 2, {33, 2}, TS_TYPE_Q4_0, 0};
    build_tensors(b, &t, 1, 256);
}
static void c_dup_key(gb_buf *b) {
    gb_header(b, 3, 0, 3);
    gb_kv_u32(b, "a.u32", 1);
    gb_kv_u32(b, "b", 2);
    gb_kv_u32(b, "a.u32", 3);
}
static void c_dup_tensor(gb_buf *b) {
    tdesc t[2] = {{"w", 1, {8}, TS_TYPE_F32, 0}, {"w", 1, {8}, TS_TYPE_F32, 32}};
    build_tensors(b, t, 2, 64);
}
static void c_tensor_name_nul(gb_buf *b) {
    gb_header(b, 3, 1, 0);
    gb_strn(b, "w\0x", 3);
    gb_u32(b, 1);
    gb_u64(b, 8);
    gb_u32(b, TS_TYPE_F32);
    gb_u64(b, 0);
    gb_pad(b, 32);
    gb_zeros(b, 32);
}
/* depth arrays nested inside each other, innermost an array of one u8 */
static void nested(gb_buf *b, int depth) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "deep", TS_GGUF_ARRAY);
    for (int i = 1; i < depth; i++) {
        gb_u32(b, TS_GGUF_ARRAY);
        gb_u64(b, 1);
    }
    gb_u32(b, TS_GGUF_UINT8);
    gb_u64(b, 1);
    gb_u8(b, 5);
}
static void c_nest_deep(gb_buf *b) { nested(b, TS_GGUF_MAX_ARRAY_DEPTH + 1); }

typedef struct {
    const char *name;
    void (*build)(gb_buf *);
    const char *expect;
} mcase;

static const mcase cases[] = {
    {"bad_magic", c_bad_magic, "bad magic 'GGUX'"},
    {"version1", c_version1, "version 1 is not supported"},
    {"version4", c_version4, "unsupported version 4"},
    {"version0", c_version0, "unsupported version 0"},
    {"big_endian", c_big_endian, "big-endian GGUF is not supported"},
    {"trunc_magic", c_trunc_magic, "truncated at byte 0 while reading magic (need 4 bytes, 2 left)"},
    {"trunc_header", c_trunc_header, "truncated at byte 8 while reading tensor count (need 8 bytes, 4 left)"},
    {"trunc_key", c_trunc_key, "truncated at byte 46 while reading key of kv #1 (need 20 bytes, 5 left)"},
    {"trunc_value", c_trunc_value, "while reading value of key 'general.architecture' (need 4 bytes, 2 left)"},
    {"trunc_tensor_info", c_trunc_tinfo, "while reading dims of tensor 'w' (need 8 bytes, 4 left)"},
    {"trunc_data", c_trunc_data, "tensor 'w': data [0, +64) runs past the end of the file: the data section has 54 bytes"},
    {"trunc_array", c_trunc_array, "truncated at byte 51 while reading value of key 'arr': array of 4 UINT32 needs at least 16 bytes, 6 left"},
    {"trunc_str_array", c_trunc_str_array, "truncated at byte 96 while reading value of key 'tokenizer.ggml.tokens' (need 8 bytes, 3 left)"},
    {"absurd_kv_count", c_absurd_kv_count, "kv count 4611686018427387904 is impossible"},
    {"absurd_tensor_count", c_absurd_tensor_count, "tensor count 18446744073709551615 is impossible"},
    {"absurd_string_len", c_absurd_string_len, "string length 9223372036854775808 at byte 24 is larger than the whole file"},
    {"absurd_array_len", c_absurd_array_len, "array length 2305843009213693952 is impossible"},
    {"absurd_str_array_len", c_absurd_str_array_len, "array length 1152921504606846976 is impossible"},
    {"unknown_value_type", c_unknown_vtype, "key 'k': unknown value type 13"},
    {"unknown_elem_type", c_unknown_elem_type, "unknown array element type 99"},
    {"bad_bool", c_bad_bool, "bool is 2, not 0 or 1"},
    {"bad_bool_array", c_bad_bool_array, "bool array element 2 is 7"},
    {"key_too_long", c_key_too_long, "has length 65537, more than the limit of 65536"},
    {"key_nul", c_key_nul, "key of kv #0 contains a NUL byte at position 2"},
    {"unknown_tensor_type", c_unknown_ttype, "tensor 'w': unknown tensor type 99"},
    {"removed_tensor_type", c_removed_ttype, "tensor 'w': type 4 (Q4_2) was removed"},
    {"alignment0", c_align0, "general.alignment 0 is not a nonzero power of two"},
    {"alignment3", c_align3, "general.alignment 3 is not a nonzero power of two"},
    {"alignment_type", c_align_type, "general.alignment has type UINT64, must be UINT32"},
    {"misaligned_offset", c_misaligned, "gguf: tensor 'blk.0.attn_q.weight': offset 100 is not a multiple of alignment 32"},
    {"offset_out_of_range", c_offset_range, "tensor 'w': offset 1099511627776 is out of range"},
    {"offset_overflow", c_offset_huge, "tensor 'w': offset 18446744073709551584 is out of range"},
    {"overlap", c_overlap, "tensors 'first' [32, 96) and 'second' [64, 128) overlap"},
    {"dim_overflow", c_dim_overflow, "element count of shape 4294967296 x 65536 x 65536 overflows int64"},
    {"bytes_overflow", c_bytes_overflow, "byte size of shape 4611686018427387904 (F64) overflows"},
    {"too_many_dims", c_too_many_dims, "n_dims 5 is out of range 1..4"},
    {"zero_n_dims", c_zero_n_dims, "n_dims 0 is out of range 1..4"},
    {"zero_dim", c_zero_dim, "dim 1 is 0"},
    {"negative_dim", c_negative_dim, "dim 1 is 18446744073709551615 (negative as int64"},
    {"row_not_block_multiple", c_row_block, "row length 33 is not a multiple of the Q4_0 block size 32"},
    {"duplicate_key", c_dup_key, "duplicate key 'a.u32' (kv #0 and #2)"},
    {"duplicate_tensor", c_dup_tensor, "duplicate tensor name 'w'"},
    {"tensor_name_nul", c_tensor_name_nul, "name of tensor #0 contains a NUL byte at position 1"},
    {"nesting_too_deep", c_nest_deep, "arrays nested more than 8 levels deep"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* Writes a buffer to a fresh temporary file; returns its path (static buffer). */
static const char *write_tmp(const void *p, size_t n) {
    static char path[256];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/ts_gguf_test_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "mkstemp(%s): %s\n", path, strerror(errno));
        exit(2);
    }
    if (n && write(fd, p, n) != (ssize_t)n) {
        fprintf(stderr, "write(%s) failed\n", path);
        exit(2);
    }
    close(fd);
    return path;
}

static void run_malformed(void) {
    for (size_t i = 0; i < N_CASES; i++) {
        gb_buf b = {0};
        cases[i].build(&b);
        ts_err err = {{0}};
        /* Copy into an exact-size heap block so ASan sees any read past the end. */
        uint8_t *exact = malloc(b.n ? b.n : 1);
        memcpy(exact, b.p, b.n);
        ts_gguf *g = ts_gguf_open_mem(exact, b.n, &err);
        if (g) {
            fprintf(stderr, "case %s: accepted, expected refusal with \"%s\"\n", cases[i].name, cases[i].expect);
            failures++;
            ts_gguf_close(g);
        } else if (!strstr(err.msg, cases[i].expect)) {
            fprintf(stderr, "case %s: message\n  \"%s\"\ndoes not contain\n  \"%s\"\n", cases[i].name, err.msg, cases[i].expect);
            failures++;
        } else {
            printf("ok   %-24s %s\n", cases[i].name, err.msg);
        }
        free(exact);

        /* the mmap path */
        const char *path = write_tmp(b.p, b.n);
        ts_err err2 = {{0}};
        g = ts_gguf_open(path, &err2);
        if (g || !strstr(err2.msg, cases[i].expect) || !strstr(err2.msg, path)) {
            fprintf(stderr, "case %s (file): %s: \"%s\"\n", cases[i].name, g ? "accepted" : "bad message", err2.msg);
            failures++;
            ts_gguf_close(g);
        }
        unlink(path);
        free(b.p);
    }

    /* empty file, and open_mem of nothing */
    const char *path = write_tmp("", 0);
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(path, &err);
    CHECK(!g && strstr(err.msg, "empty file"));
    unlink(path);
    g = ts_gguf_open_mem(NULL, 0, &err);
    CHECK(!g && strstr(err.msg, "truncated at byte 0 while reading magic"));
    g = ts_gguf_open("/nonexistent/dir/x.gguf", &err);
    CHECK(!g && strstr(err.msg, "cannot open '/nonexistent/dir/x.gguf'"));

    /* nesting at exactly the limit is accepted */
    gb_buf b = {0};
    nested(&b, TS_GGUF_MAX_ARRAY_DEPTH);
    g = ts_gguf_open_mem(b.p, b.n, &err);
    CHECK(g != NULL);
    if (g) {
        const ts_gguf_value *v = ts_gguf_find(g, "deep");
        for (int d = 1; v && d < TS_GGUF_MAX_ARRAY_DEPTH; d++) {
            CHECK(v->type == TS_GGUF_ARRAY && v->arr.type == TS_GGUF_ARRAY && v->arr.n == 1);
            v = &v->arr.items[0];
        }
        CHECK(v && v->arr.type == TS_GGUF_UINT8 && v->arr.n == 1 && ts_gguf_arr_i64(v, 0) == 5);
        ts_gguf_close(g);
    }
    free(b.p);
}

/* -------------------------------------------------------- the full file */

static const char odd_str[] = "hello\0w\xff\n\"rld"; /* NUL, invalid UTF-8, newline, quote */
#define ODD_LEN (sizeof odd_str - 1)
#define ALIGN 64

typedef struct {
    size_t data_offset;
    size_t t1_data; /* file offsets of the tensors' data */
    size_t t2_data;
} full_marks;

static void build_full(gb_buf *b, uint32_t version, full_marks *m) {
    gb_header(b, version, 3, 28);
    gb_key(b, "u8", TS_GGUF_UINT8), gb_u8(b, 200);
    gb_key(b, "i8", TS_GGUF_INT8), gb_u8(b, (uint8_t)-100);
    gb_key(b, "u16", TS_GGUF_UINT16), gb_u16(b, 60000);
    gb_key(b, "i16", TS_GGUF_INT16), gb_u16(b, (uint16_t)-30000);
    gb_key(b, "u32", TS_GGUF_UINT32), gb_u32(b, 4000000000u);
    gb_key(b, "i32", TS_GGUF_INT32), gb_u32(b, (uint32_t)-2000000000);
    gb_key(b, "f32", TS_GGUF_FLOAT32), gb_f32(b, 1.5f);
    gb_key(b, "bool", TS_GGUF_BOOL), gb_u8(b, 1);
    gb_key(b, "str", TS_GGUF_STRING), gb_strn(b, odd_str, ODD_LEN);
    gb_key(b, "u64", TS_GGUF_UINT64), gb_u64(b, (UINT64_C(1) << 63) + 5);
    gb_key(b, "i64", TS_GGUF_INT64), gb_u64(b, (uint64_t)(-(INT64_C(1) << 62) - 3));
    gb_key(b, "f64", TS_GGUF_FLOAT64), gb_f64(b, -2.25e300);
    gb_key(b, "general.alignment", TS_GGUF_UINT32), gb_u32(b, ALIGN);
    /* arrays of every fixed-size type */
    gb_key(b, "a.u8", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_UINT8), gb_u64(b, 3), gb_u8(b, 1), gb_u8(b, 2), gb_u8(b, 255);
    gb_key(b, "a.i8", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_INT8), gb_u64(b, 2), gb_u8(b, 0x80), gb_u8(b, 127);
    gb_key(b, "a.u16", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_UINT16), gb_u64(b, 2), gb_u16(b, 1), gb_u16(b, 65535);
    gb_key(b, "a.i16", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_INT16), gb_u64(b, 2), gb_u16(b, 0x8000), gb_u16(b, 7);
    gb_key(b, "a.u32", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_UINT32), gb_u64(b, 2), gb_u32(b, 0xffffffffu), gb_u32(b, 9);
    gb_key(b, "a.i32", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_INT32), gb_u64(b, 2), gb_u32(b, 0x80000000u), gb_u32(b, 3);
    gb_key(b, "a.f32", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_FLOAT32), gb_u64(b, 2), gb_f32(b, -0.25f), gb_f32(b, 1e30f);
    gb_key(b, "a.bool", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_BOOL), gb_u64(b, 3), gb_u8(b, 1), gb_u8(b, 0), gb_u8(b, 1);
    gb_key(b, "a.u64", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_UINT64), gb_u64(b, 1), gb_u64(b, UINT64_MAX);
    gb_key(b, "a.i64", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_INT64), gb_u64(b, 2), gb_u64(b, (uint64_t)INT64_MIN), gb_u64(b, 42);
    gb_key(b, "a.f64", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_FLOAT64), gb_u64(b, 2), gb_f64(b, 0.1), gb_f64(b, -1e-300);
    gb_key(b, "a.str", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_STRING), gb_u64(b, 3), gb_str(b, "a"), gb_str(b, ""), gb_strn(b, odd_str, ODD_LEN);
    gb_key(b, "a.empty", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_UINT32), gb_u64(b, 0);
    /* [[1, 2], [3]] of u32, and [["p", "q"], []] of strings */
    gb_key(b, "a.nested", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_ARRAY), gb_u64(b, 2);
    gb_u32(b, TS_GGUF_UINT32), gb_u64(b, 2), gb_u32(b, 1), gb_u32(b, 2);
    gb_u32(b, TS_GGUF_UINT32), gb_u64(b, 1), gb_u32(b, 3);
    gb_key(b, "a.nested_str", TS_GGUF_ARRAY), gb_u32(b, TS_GGUF_ARRAY), gb_u64(b, 2);
    gb_u32(b, TS_GGUF_STRING), gb_u64(b, 2), gb_str(b, "p"), gb_str(b, "q");
    gb_u32(b, TS_GGUF_STRING), gb_u64(b, 0);
    /* tensors: F32 [4, 2] at 0 (32 bytes), Q4_0 [64] at 64 (36 bytes), F16 [3] at 128 (6 bytes) */
    uint64_t ne1[2] = {4, 2}, ne2[1] = {64}, ne3[1] = {3};
    gb_tinfo(b, "t.f32", 2, ne1, TS_TYPE_F32, 0);
    gb_tinfo(b, "t.q4_0", 1, ne2, TS_TYPE_Q4_0, 64);
    gb_tinfo(b, "t.f16", 1, ne3, TS_TYPE_F16, 128);
    gb_pad(b, ALIGN);
    m->data_offset = b->n;
    m->t1_data = b->n;
    for (int i = 0; i < 8; i++) gb_f32(b, (float)i + 0.5f);
    gb_pad(b, ALIGN);
    m->t2_data = b->n;
    for (int i = 0; i < 36; i++) gb_u8(b, (uint8_t)(0xa0 + i));
    gb_pad(b, ALIGN);
    gb_u16(b, 0x3c00), gb_u16(b, 0x4000), gb_u16(b, 0xc000); /* 1, 2, -2 in f16 */
}

static void check_full(const ts_gguf *g, uint32_t version, const full_marks *m, const uint8_t *base) {
    CHECK(ts_gguf_version(g) == version);
    CHECK(ts_gguf_alignment(g) == ALIGN);
    CHECK(ts_gguf_data_offset(g) == m->data_offset);
    CHECK(ts_gguf_n_kv(g) == 28);
    CHECK(ts_gguf_n_tensors(g) == 3);
    CHECK(ts_gguf_base(g) == base);

    const ts_gguf_value *v;
#define SCALAR(key, t, field, want) \
    CHECK((v = ts_gguf_find(g, key)) && v->type == (t) && v->num.field == (want))
    SCALAR("u8", TS_GGUF_UINT8, u64, 200);
    SCALAR("i8", TS_GGUF_INT8, i64, -100);
    SCALAR("u16", TS_GGUF_UINT16, u64, 60000);
    SCALAR("i16", TS_GGUF_INT16, i64, -30000);
    SCALAR("u32", TS_GGUF_UINT32, u64, 4000000000u);
    SCALAR("i32", TS_GGUF_INT32, i64, -2000000000);
    SCALAR("f32", TS_GGUF_FLOAT32, f64, 1.5);
    SCALAR("bool", TS_GGUF_BOOL, u64, 1);
    SCALAR("u64", TS_GGUF_UINT64, u64, (UINT64_C(1) << 63) + 5);
    SCALAR("i64", TS_GGUF_INT64, i64, -(INT64_C(1) << 62) - 3);
    SCALAR("f64", TS_GGUF_FLOAT64, f64, -2.25e300);
    CHECK((v = ts_gguf_find(g, "str")) && v->type == TS_GGUF_STRING && v->str.len == ODD_LEN && !memcmp(v->str.ptr, odd_str, ODD_LEN));
    /* the string points into the file */
    CHECK(v && (const uint8_t *)v->str.ptr > base && (const uint8_t *)v->str.ptr < base + ts_gguf_file_size(g));
    CHECK(ts_gguf_find(g, "absent") == NULL);
    CHECK(ts_gguf_find(g, "") == NULL);
    CHECK(!strcmp(ts_gguf_kv_at(g, 0)->key, "u8") && !strcmp(ts_gguf_kv_at(g, 27)->key, "a.nested_str"));
    CHECK(ts_gguf_kv_at(g, 28) == NULL && ts_gguf_kv_at(g, -1) == NULL);

#define ARR(key, et, n_) CHECK((v = ts_gguf_find(g, key)) && v->type == TS_GGUF_ARRAY && v->arr.type == (et) && v->arr.n == (n_))
    ARR("a.u8", TS_GGUF_UINT8, 3);
    CHECK(v && ts_gguf_arr_i64(v, 0) == 1 && ts_gguf_arr_i64(v, 2) == 255 && ts_gguf_arr_i64(v, 3) == 0);
    ARR("a.i8", TS_GGUF_INT8, 2);
    CHECK(v && ts_gguf_arr_i64(v, 0) == -128 && ts_gguf_arr_i64(v, 1) == 127);
    ARR("a.u16", TS_GGUF_UINT16, 2);
    CHECK(v && ts_gguf_arr_i64(v, 1) == 65535 && ts_gguf_arr_f64(v, 1) == 65535.0);
    ARR("a.i16", TS_GGUF_INT16, 2);
    CHECK(v && ts_gguf_arr_i64(v, 0) == -32768 && ts_gguf_arr_i64(v, 1) == 7);
    ARR("a.u32", TS_GGUF_UINT32, 2);
    CHECK(v && ts_gguf_arr_i64(v, 0) == 0xffffffffLL && ts_gguf_arr_i64(v, 1) == 9);
    ARR("a.i32", TS_GGUF_INT32, 2);
    CHECK(v && ts_gguf_arr_i64(v, 0) == INT32_MIN && ts_gguf_arr_f64(v, 1) == 3.0);
    ARR("a.f32", TS_GGUF_FLOAT32, 2);
    CHECK(v && ts_gguf_arr_f64(v, 0) == -0.25 && ts_gguf_arr_f64(v, 1) == (double)1e30f && ts_gguf_arr_i64(v, 0) == 0);
    ARR("a.bool", TS_GGUF_BOOL, 3);
    CHECK(v && ts_gguf_arr_i64(v, 0) == 1 && ts_gguf_arr_i64(v, 1) == 0 && ts_gguf_arr_i64(v, 2) == 1);
    ARR("a.u64", TS_GGUF_UINT64, 1);
    CHECK(v && ts_gguf_arr_f64(v, 0) == 18446744073709551615.0);
    ARR("a.i64", TS_GGUF_INT64, 2);
    CHECK(v && ts_gguf_arr_i64(v, 0) == INT64_MIN && ts_gguf_arr_i64(v, 1) == 42);
    ARR("a.f64", TS_GGUF_FLOAT64, 2);
    CHECK(v && ts_gguf_arr_f64(v, 0) == 0.1 && ts_gguf_arr_f64(v, 1) == -1e-300);
    ARR("a.str", TS_GGUF_STRING, 3);
    CHECK(v && v->arr.items && v->arr.items[0].type == TS_GGUF_STRING && v->arr.items[0].str.len == 1 && v->arr.items[0].str.ptr[0] == 'a');
    CHECK(v && v->arr.items && v->arr.items[1].str.len == 0);
    CHECK(v && v->arr.items && v->arr.items[2].str.len == ODD_LEN && !memcmp(v->arr.items[2].str.ptr, odd_str, ODD_LEN));
    ARR("a.empty", TS_GGUF_UINT32, 0);
    ARR("a.nested", TS_GGUF_ARRAY, 2);
    if (v && v->arr.items) {
        const ts_gguf_value *a = &v->arr.items[0], *b2 = &v->arr.items[1];
        CHECK(a->type == TS_GGUF_ARRAY && a->arr.type == TS_GGUF_UINT32 && a->arr.n == 2);
        CHECK(ts_gguf_arr_i64(a, 0) == 1 && ts_gguf_arr_i64(a, 1) == 2);
        CHECK(b2->arr.type == TS_GGUF_UINT32 && b2->arr.n == 1 && ts_gguf_arr_i64(b2, 0) == 3);
    } else {
        CHECK(!"a.nested items");
    }
    ARR("a.nested_str", TS_GGUF_ARRAY, 2);
    if (v && v->arr.items) {
        const ts_gguf_value *a = &v->arr.items[0], *b2 = &v->arr.items[1];
        CHECK(a->arr.type == TS_GGUF_STRING && a->arr.n == 2 && a->arr.items && a->arr.items[1].str.len == 1 && a->arr.items[1].str.ptr[0] == 'q');
        CHECK(b2->arr.type == TS_GGUF_STRING && b2->arr.n == 0);
    } else {
        CHECK(!"a.nested_str items");
    }

    /* typed getters */
    ts_err err = {{0}};
    uint32_t u32 = 0;
    int64_t i64 = 0;
    float f = 0;
    bool bo = false;
    ts_gguf_str s = {0};
    CHECK(ts_gguf_get_u32(g, "u8", &u32, &err) == 0 && u32 == 200);
    CHECK(ts_gguf_get_u32(g, "u32", &u32, &err) == 0 && u32 == 4000000000u);
    CHECK(ts_gguf_get_u32(g, "i8", &u32, &err) == -1 && strstr(err.msg, "-100 does not fit in uint32"));
    CHECK(ts_gguf_get_u32(g, "u64", &u32, &err) == -1 && strstr(err.msg, "does not fit in uint32"));
    CHECK(ts_gguf_get_u32(g, "str", &u32, &err) == -1 && strstr(err.msg, "key 'str' has type STRING, expected an integer"));
    CHECK(ts_gguf_get_u32(g, "nope", &u32, &err) == -1 && strstr(err.msg, "missing key 'nope'"));
    CHECK(ts_gguf_get_i64(g, "i64", &i64, &err) == 0 && i64 == -(INT64_C(1) << 62) - 3);
    CHECK(ts_gguf_get_i64(g, "u32", &i64, &err) == 0 && i64 == 4000000000LL);
    CHECK(ts_gguf_get_i64(g, "u64", &i64, &err) == -1 && strstr(err.msg, "does not fit in int64"));
    CHECK(ts_gguf_get_i64(g, "f32", &i64, &err) == -1 && strstr(err.msg, "expected an integer"));
    CHECK(ts_gguf_get_f32(g, "f32", &f, &err) == 0 && f == 1.5f);
    CHECK(ts_gguf_get_f32(g, "i16", &f, &err) == 0 && f == -30000.0f);
    CHECK(ts_gguf_get_f32(g, "bool", &f, &err) == -1 && strstr(err.msg, "expected a number"));
    CHECK(ts_gguf_get_bool(g, "bool", &bo, &err) == 0 && bo);
    CHECK(ts_gguf_get_bool(g, "u8", &bo, &err) == -1 && strstr(err.msg, "expected BOOL"));
    CHECK(ts_gguf_get_str(g, "str", &s, &err) == 0 && s.len == ODD_LEN);
    CHECK(ts_gguf_get_str(g, "a.str", &s, &err) == -1 && strstr(err.msg, "has type ARRAY, expected STRING"));
    u32 = 77;
    CHECK(ts_gguf_opt_u32(g, "absent", &u32, &err) == 0 && u32 == 77);
    CHECK(ts_gguf_opt_u32(g, "u16", &u32, &err) == 1 && u32 == 60000);
    CHECK(ts_gguf_opt_u32(g, "f64", &u32, &err) == -1);
    CHECK(ts_gguf_opt_f32(g, "absent", &f, &err) == 0 && ts_gguf_opt_f32(g, "f64", &f, &err) == 1 && f == (float)-2.25e300);
    CHECK(ts_gguf_opt_bool(g, "absent", &bo, &err) == 0 && ts_gguf_opt_bool(g, "str", &bo, &err) == -1);
    CHECK(ts_gguf_opt_str(g, "absent", &s, &err) == 0 && ts_gguf_opt_str(g, "str", &s, &err) == 1);

    /* tensors */
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, "t.f32");
    CHECK(t && t == ts_gguf_tensor_at(g, 0));
    if (t) {
        CHECK(t->type == TS_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
        CHECK(t->n_elements == 8 && t->offset == 0 && t->nbytes == 32);
        CHECK((const uint8_t *)t->data == base + m->t1_data);
        float x;
        memcpy(&x, (const uint8_t *)t->data + 7 * 4, 4);
        CHECK(x == 7.5f);
    }
    t = ts_gguf_find_tensor(g, "t.q4_0");
    CHECK(t && t == ts_gguf_tensor_at(g, 1));
    if (t) {
        CHECK(t->type == TS_TYPE_Q4_0 && t->n_dims == 1 && t->ne[0] == 64 && t->n_elements == 64 && t->offset == 64 && t->nbytes == 36);
        CHECK((const uint8_t *)t->data == base + m->t2_data && ((const uint8_t *)t->data)[35] == 0xa0 + 35);
    }
    t = ts_gguf_find_tensor(g, "t.f16");
    CHECK(t && t->type == TS_TYPE_F16 && t->offset == 128 && t->nbytes == 6 && ((const uint8_t *)t->data)[5] == 0xc0);
    CHECK(ts_gguf_find_tensor(g, "t") == NULL && ts_gguf_tensor_at(g, 3) == NULL);
    CHECK(ts_gguf_vtype_size(TS_GGUF_FLOAT64) == 8 && ts_gguf_vtype_size(TS_GGUF_STRING) == 0 && !strcmp(ts_gguf_vtype_name(99), "UNKNOWN"));
}

static void run_full(void) {
    for (uint32_t version = 2; version <= 3; version++) {
        gb_buf b = {0};
        full_marks m;
        build_full(&b, version, &m);
        ts_err err = {{0}};
        ts_gguf *g = ts_gguf_open_mem(b.p, b.n, &err);
        if (!g) {
            fprintf(stderr, "full v%u refused: %s\n", version, err.msg);
            failures++;
        } else {
            check_full(g, version, &m, b.p);
            ts_gguf_close(g);
        }
        const char *path = write_tmp(b.p, b.n);
        g = ts_gguf_open(path, &err);
        if (!g) {
            fprintf(stderr, "full v%u refused from file: %s\n", version, err.msg);
            failures++;
        } else {
            check_full(g, version, &m, ts_gguf_base(g));
            ts_gguf_close(g);
        }
        unlink(path);
        /* every strict prefix of the file must be refused, never crash */
        for (size_t n = 0; n + 1 < b.n; n++) {
            g = ts_gguf_open_mem(b.p, n, &err);
            if (g) {
                fprintf(stderr, "full v%u: prefix of %zu bytes accepted\n", version, n);
                failures++;
                ts_gguf_close(g);
                break;
            }
        }
        free(b.p);
        printf("ok   full file v%u\n", version);
    }

    /* the mini file itself is valid (the malformed cases are one edit away) */
    gb_buf b = {0};
    build_mini(&b, 3, NULL);
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open_mem(b.p, b.n, &err);
    CHECK(g != NULL);
    if (!g) fprintf(stderr, "mini: %s\n", err.msg);
    ts_gguf_close(g);
    free(b.p);
    /* a file without tensors may stop right after its header (no padding) */
    b = (gb_buf){0};
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "x", 1);
    g = ts_gguf_open_mem(b.p, b.n, &err);
    CHECK(g && ts_gguf_n_tensors(g) == 0 && ts_gguf_data_offset(g) == (b.n + 31) / 32 * 32 && ts_gguf_data_offset(g) > b.n);
    ts_gguf_close(g);
    free(b.p);
}

static int write_seeds(const char *dir) {
    mkdir(dir, 0777);
    char path[4096];
    for (size_t i = 0; i <= N_CASES + 1; i++) {
        gb_buf b = {0};
        const char *name;
        if (i < N_CASES) {
            cases[i].build(&b);
            name = cases[i].name;
        } else if (i == N_CASES) {
            full_marks m;
            build_full(&b, 3, &m);
            name = "valid_full";
        } else {
            build_mini(&b, 3, NULL);
            name = "valid_mini";
        }
        if (b.n > 4096) { /* keep the seeds small (key_too_long is 64 KiB) */
            free(b.p);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        free(b.p);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) return write_seeds(argv[2]);
    run_malformed();
    run_full();
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("all gguf malformed/valid checks passed\n");
    return 0;
}
