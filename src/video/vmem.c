/* vmem.c - matrices and buffers of a video model on an engine (vmem.h). */
#include "video/vmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/linear.h"
#include "kernels/repack.h"

/* the peer's copy of m's rows that s->e reads as it is (NULL: none) */
static const ts_vm_pack *peer_copy(const ts_vm_packs *s, const ts_wmat *m, uint64_t own, bool panels) {
    const ts_vm_packs *p = s->peer;
    if (!p || (!own && !panels))
        return NULL;
    const ts_eng_desc *dp = ts_eng_describe(p->e), *ds = ts_eng_describe(s->e);
    for (int i = 0; i < p->n; i++) {
        const ts_vm_pack *q = &p->p[i];
        if (q->src != m->data)
            continue;
        if (own)
            return q->layout == TS_WL_ENGINE && ds->layout[0] && !strcmp(ds->layout, dp->layout) && q->bytes == own
                       ? q
                       : NULL;
        return q->layout == TS_WL_PANELS ? q : NULL;
    }
    return NULL;
}

int ts_vm_place(ts_vm_packs *s, const ts_wmat *m, ts_eng_buf *file_buf, const void *file_base, ts_vm_placed *out,
                ts_err *err) {
    *out = (ts_vm_placed){.buf = file_buf,
                          .off = (uint64_t)((const uint8_t *)m->data - (const uint8_t *)file_base),
                          .wtype = m->type,
                          .row_bytes = m->row_bytes,
                          .layout = TS_WL_ROWS};
    const uint64_t own = ts_eng_packed_bytes(s->e, m->type, m->n_in, m->n_out);
    const bool panels = !own && ts_eng_describe(s->e)->cpu_layouts && ts_linear_wants_pack(m);
    if (!own && !panels)
        return 0;
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 64;
        ts_vm_pack *np = realloc(s->p, (size_t)cap * sizeof *np);
        if (!np)
            return ts_err_set(err, "out of memory");
        s->p = np, s->cap = cap;
    }
    ts_vm_pack *e = &s->p[s->n];
    const ts_vm_pack *q = peer_copy(s, m, own, panels);
    if (q) { /* one copy: the peer's bytes, mapped */
        void *pm = q->mem ? q->mem : ts_eng_buf_host(q->buf);
        ts_eng_buf *b = pm ? ts_eng_buf_map(s->e, pm, (size_t)q->bytes, err) : NULL;
        if (!b)
            return pm ? -1 : ts_err_set(err, "the peer's packed matrix has no host address");
        *e = (ts_vm_pack){.mem = NULL, .buf = b, .src = m->data, .bytes = q->bytes, .layout = q->layout};
        s->n++;
        s->shared_bytes += q->bytes;
        *out = (ts_vm_placed){.buf = b, .off = 0, .wtype = m->type, .row_bytes = m->row_bytes, .layout = q->layout};
        return 0;
    }
    const size_t bytes = own ? own : ts_rp_matrix_bytes(m->type, m->n_in, m->n_out);
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        return ts_err_set(err, "out of memory packing a %lld x %lld matrix", (long long)m->n_out, (long long)m->n_in);
    const int rc = own ? ts_eng_pack(s->e, m->type, m->data, m->row_bytes, m->n_in, m->n_out, p, err)
                       : ts_linear_pack(m, p, err);
    if (rc) {
        free(p);
        return own ? -1 : 0; /* the panels refused it: keep the rows */
    }
    ts_eng_buf *b = ts_eng_buf_map(s->e, p, bytes, err);
    if (!b) {
        free(p);
        return -1;
    }
    const ts_eng_wlayout lay = own ? TS_WL_ENGINE : TS_WL_PANELS;
    *e = (ts_vm_pack){.mem = p, .buf = b, .src = m->data, .bytes = bytes, .layout = lay};
    s->n++;
    /* the rows' file pages are not read again: one resident copy */
    ts_gguf_drop_pages(m->data, (size_t)m->n_out * m->row_bytes);
    *out = (ts_vm_placed){.buf = b, .off = 0, .wtype = m->type, .row_bytes = m->row_bytes, .layout = lay};
    return 0;
}

void ts_vm_packs_free(ts_vm_packs *s) {
    for (int i = 0; i < s->n; i++) {
        ts_eng_buf_free(s->p[i].buf);
        free(s->p[i].mem);
    }
    free(s->p);
    s->p = NULL, s->n = s->cap = 0;
}

ts_eng_bind ts_vm_bind(const ts_vm_placed *p) {
    return (ts_eng_bind){.buf = p->buf, .off = p->off, .wtype = p->wtype, .row_bytes = p->row_bytes,
                         .layout = p->layout};
}

void *ts_vm_map_alloc(ts_engine *e, size_t bytes, ts_eng_buf **b, ts_err *err) {
    bytes = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (!p) {
        ts_err_set(err, "out of memory (%zu MiB of activations)", bytes >> 20);
        return NULL;
    }
    memset(p, 0, bytes);
    if (!(*b = ts_eng_buf_map(e, p, bytes ? bytes : 64, err))) {
        free(p);
        return NULL;
    }
    return p;
}

void ts_vm_fmt_shape(char *buf, size_t cap, const ts_gguf_tensor *t) {
    int o = snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < t->n_dims && o > 0 && (size_t)o < cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    if (o > 0 && (size_t)o < cap)
        snprintf(buf + o, cap - (size_t)o, "]");
}
