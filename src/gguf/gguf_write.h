/* gguf_write.h - building and writing GGUF v3 files.
 *
 * Collect metadata (copied from an opened ts_gguf, or set directly) and tensors,
 * then write the file in one go:
 *
 *   ts_gguf_writer *w = ts_gguf_writer_new(&err);
 *   for (i...) ts_gguf_writer_add_kv_from(w, ts_gguf_kv_at(src, i), &err);
 *   ts_gguf_writer_set_u32(w, "general.file_type", 7, &err);
 *   ts_gguf_writer_add_tensor(w, "tok.weight", TS_TYPE_Q8_0, 2, ne, data, nbytes, &err);
 *   ts_gguf_writer_write(w, "out.gguf", &err);
 *   ts_gguf_writer_free(w);
 *
 * Metadata keeps the order of first insertion; setting a key that exists
 * replaces its value in place. Tensors are written in the order added, each at
 * an offset aligned to general.alignment (when set: a UINT32 power of two) or
 * TS_GGUF_DEFAULT_ALIGNMENT, and the data section starts aligned as well.
 * Values are serialised when added, so a source ts_gguf may be closed after its
 * kvs are copied (but not before borrowed tensor data is written).
 */
#ifndef TS_GGUF_WRITE_H
#define TS_GGUF_WRITE_H

#include <stdint.h>

#include "core/err.h"
#include "gguf/gguf.h"

typedef struct ts_gguf_writer ts_gguf_writer;

ts_gguf_writer *ts_gguf_writer_new(ts_err *err);
void ts_gguf_writer_free(ts_gguf_writer *w); /* NULL is a no-op; frees owned tensor data */

/* Metadata. `v` follows the reader's representation (see gguf.h): scalars in
 * num, strings in str, fixed-size arrays as raw little-endian bytes in
 * arr.data, arrays of strings/arrays as arr.items. */
int ts_gguf_writer_set_kv(ts_gguf_writer *w, const char *key, const ts_gguf_value *v, ts_err *err);
int ts_gguf_writer_add_kv_from(ts_gguf_writer *w, const ts_gguf_kv *kv, ts_err *err);
int ts_gguf_writer_set_str(ts_gguf_writer *w, const char *key, const char *s, ts_err *err);
int ts_gguf_writer_set_u32(ts_gguf_writer *w, const char *key, uint32_t v, ts_err *err);
/* Removes a key; returns 1 if it was present, 0 if not. */
int ts_gguf_writer_remove_kv(ts_gguf_writer *w, const char *key);

/* Adds a tensor. ne[0] is the innermost (row) length, as in ts_gguf_tensor;
 * nbytes must equal the size of that shape in `type`. `data` is borrowed: it
 * must stay valid until ts_gguf_writer_write returns. */
int ts_gguf_writer_add_tensor(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne, const void *data, uint64_t nbytes, ts_err *err);
/* Same, but takes ownership of a malloc'ed `data` (freed by the writer, also
 * when this call fails). */
int ts_gguf_writer_add_tensor_owned(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, void *data, uint64_t nbytes, ts_err *err);

int64_t ts_gguf_writer_n_kv(const ts_gguf_writer *w);
int64_t ts_gguf_writer_n_tensors(const ts_gguf_writer *w);

/* Writes the file (to "PATH.tmp", renamed over PATH when complete, so a failed
 * write leaves no partial PATH). Returns 0, or -1 with err set. */
int ts_gguf_writer_write(ts_gguf_writer *w, const char *path, ts_err *err);

#endif
