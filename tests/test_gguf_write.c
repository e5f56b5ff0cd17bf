/* test_gguf_write.c - tests of the GGUF writer (src/gguf/gguf_write.c).
 *
 *  1. identity: copying every kv and tensor of each real model through the
 *     writer reproduces the original file byte for byte (both were written by
 *     llama.cpp/gguf-py with the same layout rules: kvs, tensor infos, data
 *     section aligned, each tensor padded to the alignment);
 *  2. synthetic: every value type (incl. arrays of strings and nested arrays),
 *     replacing/removing keys, a custom general.alignment and tensors of
 *     several types survive a write + ts_gguf_open round trip;
 *  3. errors: bad shapes/sizes, duplicate names, bad alignment, unwritable path.
 *
 * usage: test_gguf_write MODELS_DIR WORK_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"

#include "check.h"

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    static unsigned char ba[1 << 16], bb[1 << 16];
    while (eq) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        if (na != nb || memcmp(ba, bb, na)) eq = 0;
        if (na == 0) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void test_identity(const char *models, const char *work, const char *name) {
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/%s", models, name);
    snprintf(out, sizeof out, "%s/identity.gguf", work);
    ts_err err = {{0}};
    ts_gguf *g = ts_gguf_open(in, &err);
    if (!g) {
        CHECK(0, "cannot open %s (%s): run tools/fetch_models.sh", in, err.msg);
        return;
    }
    ts_gguf_writer *w = ts_gguf_writer_new(&err);
    int ok = w != NULL;
    for (int64_t i = 0; ok && i < ts_gguf_n_kv(g); i++) ok = !ts_gguf_writer_add_kv_from(w, ts_gguf_kv_at(g, i), &err);
    for (int64_t i = 0; ok && i < ts_gguf_n_tensors(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        ok = !ts_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, &err);
    }
    if (ok) ok = !ts_gguf_writer_write(w, out, &err);
    CHECK(ok, "%s: %s", name, err.msg);
    if (ok) {
        CHECK(files_equal(in, out), "%s: rewritten file differs from the original", name);
        if (files_equal(in, out)) printf("identity rewrite of %s: byte-identical\n", name);
    }
    remove(out);
    ts_gguf_writer_free(w);
    ts_gguf_close(g);
}

static int str_is(ts_gguf_str s, const char *want) {
    return s.len == strlen(want) && !memcmp(s.ptr, want, s.len);
}

static void test_synthetic(const char *work) {
    char path[4096];
    snprintf(path, sizeof path, "%s/synthetic.gguf", work);
    ts_err err = {{0}};
    ts_gguf_writer *w = ts_gguf_writer_new(&err);

    /* scalars of every type */
    ts_gguf_value v = {0};
    const struct { uint32_t t; int64_t i; uint64_t u; double f; const char *k; } sc[] = {
        {TS_GGUF_UINT8, 0, 200, 0, "u8"},       {TS_GGUF_INT8, -100, 0, 0, "i8"},
        {TS_GGUF_UINT16, 0, 60000, 0, "u16"},   {TS_GGUF_INT16, -30000, 0, 0, "i16"},
        {TS_GGUF_UINT32, 0, 4000000000u, 0, "u32"}, {TS_GGUF_INT32, -2000000000, 0, 0, "i32"},
        {TS_GGUF_UINT64, 0, UINT64_MAX, 0, "u64"}, {TS_GGUF_INT64, INT64_MIN, 0, 0, "i64"},
        {TS_GGUF_FLOAT32, 0, 0, 0.15625, "f32"}, {TS_GGUF_FLOAT64, 0, 0, -1e300, "f64"},
        {TS_GGUF_BOOL, 0, 1, 0, "bool"},
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        memset(&v, 0, sizeof v);
        v.type = sc[i].t;
        if (sc[i].t == TS_GGUF_FLOAT32 || sc[i].t == TS_GGUF_FLOAT64) v.num.f64 = sc[i].f;
        else if (sc[i].t == TS_GGUF_INT8 || sc[i].t == TS_GGUF_INT16 || sc[i].t == TS_GGUF_INT32 ||
                 sc[i].t == TS_GGUF_INT64)
            v.num.i64 = sc[i].i;
        else v.num.u64 = sc[i].u;
        CHECK(ts_gguf_writer_set_kv(w, sc[i].k, &v, &err) == 0, "set %s: %s", sc[i].k, err.msg);
    }
    /* out-of-range scalars are refused, naming the key and value */
    memset(&v, 0, sizeof v);
    v.type = TS_GGUF_UINT8;
    v.num.u64 = 256;
    CHECK(ts_gguf_writer_set_kv(w, "bad", &v, &err) == -1 && strstr(err.msg, "256") && strstr(err.msg, "bad"),
          "u8 256: %s", err.msg);
    v.type = TS_GGUF_BOOL;
    v.num.u64 = 2;
    CHECK(ts_gguf_writer_set_kv(w, "bad", &v, &err) == -1, "bool 2");

    /* arrays: fixed-size, strings, nested */
    int32_t ints[5] = {1, -2, 3, -4, 5};
    ts_gguf_value a = {.type = TS_GGUF_ARRAY, .arr = {.type = TS_GGUF_INT32, .n = 5, .data = (const uint8_t *)ints}};
    CHECK(ts_gguf_writer_set_kv(w, "arr.i32", &a, &err) == 0, "arr.i32: %s", err.msg);
    ts_gguf_value strs[3] = {
        {.type = TS_GGUF_STRING, .str = {"hello", 5}},
        {.type = TS_GGUF_STRING, .str = {"", 0}},
        {.type = TS_GGUF_STRING, .str = {"a\0b", 3}}, /* string values may hold NUL */
    };
    ts_gguf_value as = {.type = TS_GGUF_ARRAY, .arr = {.type = TS_GGUF_STRING, .n = 3, .items = strs}};
    CHECK(ts_gguf_writer_set_kv(w, "arr.str", &as, &err) == 0, "arr.str: %s", err.msg);
    ts_gguf_value inner[2] = {a, as};
    inner[1].arr.n = 2;
    ts_gguf_value nested = {.type = TS_GGUF_ARRAY, .arr = {.type = TS_GGUF_ARRAY, .n = 2, .items = inner}};
    CHECK(ts_gguf_writer_set_kv(w, "arr.nested", &nested, &err) == 0, "arr.nested: %s", err.msg);
    ts_gguf_value empty = {.type = TS_GGUF_ARRAY, .arr = {.type = TS_GGUF_FLOAT32, .n = 0}};
    CHECK(ts_gguf_writer_set_kv(w, "arr.empty", &empty, &err) == 0, "arr.empty: %s", err.msg);

    /* strings, replacement in place, removal */
    CHECK(ts_gguf_writer_set_str(w, "general.name", "first", &err) == 0, "str");
    CHECK(ts_gguf_writer_set_u32(w, "general.file_type", 3, &err) == 0, "u32");
    CHECK(ts_gguf_writer_set_str(w, "general.name", "second", &err) == 0, "replace");
    CHECK(ts_gguf_writer_set_str(w, "to.remove", "x", &err) == 0, "str");
    CHECK(ts_gguf_writer_remove_kv(w, "to.remove") == 1 && ts_gguf_writer_remove_kv(w, "to.remove") == 0, "remove");

    /* alignment: must be a UINT32 power of two */
    CHECK(ts_gguf_writer_set_u32(w, "general.alignment", 48, &err) == -1 && strstr(err.msg, "48"), "align 48: %s",
          err.msg);
    CHECK(ts_gguf_writer_set_u32(w, "general.alignment", 64, &err) == 0, "align 64");

    /* tensors */
    static float f32[3 * 5];
    for (int i = 0; i < 15; i++) f32[i] = (float)i * 0.5f;
    static uint8_t q8[2 * 34 * 3];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    int64_t ne_a[2] = {5, 3}, ne_b[2] = {64, 3}, ne_c[1] = {3}, ne_d[4] = {32, 1, 2, 1};
    CHECK(ts_gguf_writer_add_tensor(w, "a", TS_TYPE_F32, 2, ne_a, f32, sizeof f32, &err) == 0, "a: %s", err.msg);
    CHECK(ts_gguf_writer_add_tensor(w, "b", TS_TYPE_Q8_0, 2, ne_b, q8, sizeof q8, &err) == 0, "b: %s", err.msg);
    float *owned = malloc(3 * sizeof(float));
    owned[0] = 1, owned[1] = 2, owned[2] = 3;
    CHECK(ts_gguf_writer_add_tensor_owned(w, "c", TS_TYPE_F32, 1, ne_c, owned, 12, &err) == 0, "c: %s", err.msg);
    CHECK(ts_gguf_writer_add_tensor(w, "d", TS_TYPE_Q8_0, 4, ne_d, q8, 68, &err) == 0, "d: %s", err.msg);
    /* errors */
    CHECK(ts_gguf_writer_add_tensor(w, "a", TS_TYPE_F32, 2, ne_a, f32, sizeof f32, &err) == -1 &&
              strstr(err.msg, "duplicate"), "dup: %s", err.msg);
    CHECK(ts_gguf_writer_add_tensor(w, "e", TS_TYPE_F32, 2, ne_a, f32, 4, &err) == -1 && strstr(err.msg, "60"),
          "size: %s", err.msg);
    CHECK(ts_gguf_writer_add_tensor(w, "e", TS_TYPE_Q8_0, 2, ne_a, f32, 4, &err) == -1 && strstr(err.msg, "block"),
          "block: %s", err.msg);
    CHECK(ts_gguf_writer_add_tensor(w, "e", TS_TYPE_F32, 5, ne_d, f32, 4, &err) == -1, "n_dims");
    CHECK(ts_gguf_writer_add_tensor(w, "e", 4, 1, ne_c, f32, 12, &err) == -1, "removed type");
    CHECK(ts_gguf_writer_add_tensor(w, "", TS_TYPE_F32, 1, ne_c, f32, 12, &err) == -1, "empty name");
    CHECK(ts_gguf_writer_add_tensor_owned(w, "a", TS_TYPE_F32, 1, ne_c, malloc(12), 12, &err) == -1,
          "owned dup (freed, leak-checked under ASan)");
    CHECK(ts_gguf_writer_n_tensors(w) == 4, "n_tensors");

    CHECK(ts_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err) == -1 && strstr(err.msg, "nonexistent-dir"),
          "bad path: %s", err.msg);
    CHECK(ts_gguf_writer_write(w, path, &err) == 0, "write: %s", err.msg);
    ts_gguf_writer_free(w);

    ts_gguf *g = ts_gguf_open(path, &err);
    CHECK(g != NULL, "reopen: %s", err.msg);
    if (!g) return;
    CHECK(ts_gguf_version(g) == 3 && ts_gguf_alignment(g) == 64 && ts_gguf_data_offset(g) % 64 == 0, "header");
    CHECK(ts_gguf_n_kv(g) == 18, "n_kv %lld", (long long)ts_gguf_n_kv(g));
    /* insertion order kept, replaced key stays in place */
    CHECK(!strcmp(ts_gguf_kv_at(g, 0)->key, "u8") && !strcmp(ts_gguf_kv_at(g, 15)->key, "general.name") &&
              !strcmp(ts_gguf_kv_at(g, 17)->key, "general.alignment"), "kv order");
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        const ts_gguf_value *r = ts_gguf_find(g, sc[i].k);
        CHECK(r && r->type == sc[i].t, "%s type", sc[i].k);
        if (!r) continue;
        if (sc[i].t == TS_GGUF_FLOAT32 || sc[i].t == TS_GGUF_FLOAT64) CHECK(r->num.f64 == sc[i].f, "%s", sc[i].k);
        else if (sc[i].t == TS_GGUF_INT8 || sc[i].t == TS_GGUF_INT16 || sc[i].t == TS_GGUF_INT32 ||
                 sc[i].t == TS_GGUF_INT64)
            CHECK(r->num.i64 == sc[i].i, "%s value %lld", sc[i].k, (long long)r->num.i64);
        else CHECK(r->num.u64 == sc[i].u, "%s value %llu", sc[i].k, (unsigned long long)r->num.u64);
    }
    const ts_gguf_value *r = ts_gguf_find(g, "arr.i32");
    CHECK(r && r->arr.type == TS_GGUF_INT32 && r->arr.n == 5 && ts_gguf_arr_i64(r, 1) == -2 &&
              ts_gguf_arr_i64(r, 4) == 5, "arr.i32");
    r = ts_gguf_find(g, "arr.str");
    CHECK(r && r->arr.type == TS_GGUF_STRING && r->arr.n == 3 && str_is(r->arr.items[0].str, "hello") &&
              r->arr.items[1].str.len == 0 && r->arr.items[2].str.len == 3 && !memcmp(r->arr.items[2].str.ptr, "a\0b", 3),
          "arr.str");
    r = ts_gguf_find(g, "arr.nested");
    CHECK(r && r->arr.type == TS_GGUF_ARRAY && r->arr.n == 2 && r->arr.items[0].arr.n == 5 &&
              ts_gguf_arr_i64(&r->arr.items[0], 2) == 3 && r->arr.items[1].arr.n == 2 &&
              str_is(r->arr.items[1].arr.items[1].str, ""),
          "arr.nested");
    r = ts_gguf_find(g, "arr.empty");
    CHECK(r && r->arr.type == TS_GGUF_FLOAT32 && r->arr.n == 0, "arr.empty");
    ts_gguf_str s;
    CHECK(ts_gguf_get_str(g, "general.name", &s, &err) == 0 && str_is(s, "second"), "general.name");
    CHECK(ts_gguf_find(g, "to.remove") == NULL, "removed key");

    CHECK(ts_gguf_n_tensors(g) == 4, "n_tensors");
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, "a");
    CHECK(t && t->type == TS_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 5 && t->ne[1] == 3 &&
              !memcmp(t->data, f32, sizeof f32), "tensor a");
    t = ts_gguf_find_tensor(g, "b");
    CHECK(t && t->type == TS_TYPE_Q8_0 && t->offset % 64 == 0 && !memcmp(t->data, q8, sizeof q8), "tensor b");
    t = ts_gguf_find_tensor(g, "c");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 3 && ((const float *)t->data)[2] == 3.0f, "tensor c");
    t = ts_gguf_find_tensor(g, "d");
    CHECK(t && t->n_dims == 4 && t->ne[2] == 2 && t->nbytes == 68 && t->offset % 64 == 0, "tensor d");
    ts_gguf_close(g);
    remove(path);
    printf("synthetic round trip: done\n");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_gguf_write MODELS_DIR WORK_DIR\n");
        return 2;
    }
    test_synthetic(argv[2]);
    test_identity(argv[1], argv[2], "SmolLM2-135M-Instruct.Q4_1.gguf");
    test_identity(argv[1], argv[2], "gemma-3-270m-q4_k_m.gguf");
    if (failures) {
        fprintf(stderr, "test_gguf_write: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gguf_write: all passed\n");
    return 0;
}
