/* vmem.h - a video model's matrices and host buffers on one engine, shared
 * by the DiT (wan.c), the text encoder (umt5.c) and the VAE (wan_vae.c):
 *   - a matrix is placed in the engine's own layout when it has one
 *     (ts_eng_packed_bytes), else in the CPU's 16-row panels when the
 *     engine reads them and the fast kernels want them, else left in its
 *     GGUF rows inside the mapped file; a packed matrix's file pages are
 *     dropped, so the weights are resident once;
 *   - host buffers are allocated 64-byte aligned, zeroed and mapped into
 *     the engine.
 */
#ifndef TS_VIDEO_VMEM_H
#define TS_VIDEO_VMEM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"

typedef struct ts_vm_placed {
    ts_eng_buf *buf;
    uint64_t off;
    uint32_t wtype;
    uint64_t row_bytes;
    ts_eng_wlayout layout;
} ts_vm_placed;

/* The packed copies made for one engine (freed together). With peer set
 * (before the first place), a matrix the peer already holds in a layout
 * this engine reads too (the same desc.layout name, or both on the CPU's
 * panels) is not packed again: the peer's bytes are mapped into s->e, so
 * two engines hold one copy (the peer must outlive s). */
typedef struct ts_vm_pack {
    void *mem;           /* the packed bytes; NULL where they are the peer's */
    ts_eng_buf *buf;     /* mem (or the peer's) mapped into the engine */
    const void *src;     /* the rows it was made from */
    uint64_t bytes;
    ts_eng_wlayout layout;
} ts_vm_pack;
typedef struct ts_vm_packs {
    ts_engine *e;
    const struct ts_vm_packs *peer;
    ts_vm_pack *p;
    int n, cap;
    uint64_t shared_bytes; /* bytes mapped from the peer instead of packed */
} ts_vm_packs;

/* Places m (rows inside the file mapped as file_buf, whose first byte is
 * file_base) for s->e. 0, or -1 with err. */
int ts_vm_place(ts_vm_packs *s, const ts_wmat *m, ts_eng_buf *file_buf, const void *file_base, ts_vm_placed *out,
                ts_err *err);
void ts_vm_packs_free(ts_vm_packs *s);
ts_eng_bind ts_vm_bind(const ts_vm_placed *p);

/* bytes (rounded up to 64) of zeroed, 64-byte aligned host memory mapped
 * into e as *b; NULL with err. Free with ts_eng_buf_free(*b) then free(). */
void *ts_vm_map_alloc(ts_engine *e, size_t bytes, ts_eng_buf **b, ts_err *err);

/* "[d0, d1, ...]" of a tensor's GGUF dimensions, for error messages. */
void ts_vm_fmt_shape(char *buf, size_t cap, const ts_gguf_tensor *t);

#endif
