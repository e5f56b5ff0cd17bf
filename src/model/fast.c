/* fast.c - prepares a loaded model for the fast kernels: decides between the
 * fast path and the reference one, and repacks the layer matrices that have
 * a panel GEMM at the active kernel level (kernels/repack.h).
 *
 * One resident copy: the panels are exactly as large as the rows they
 * replace, so
 *   - a mapped file: the panels go to one anonymous buffer (2 MiB aligned,
 *     with MADV_HUGEPAGE: decode streams it every token, and huge pages cut
 *     the TLB walks), and the pages of each repacked tensor are dropped from
 *     the mapping (MADV_DONTNEED: clean file pages, re-read from the page
 *     cache if anything touches them again, e.g. the gguf tensor table's
 *     readers);
 *   - a file read into memory (use_mmap = false): panels are written in
 *     place over the rows (ts_wmat.data then holds panels: only ts_linear
 *     reads them).
 * The f32 vectors read from the file (norm weights, biases) are copied out
 * of the mapping as well (copy_vectors).
 * The output projection is repacked too (decode runs it every token); when
 * it is the token embedding (tied), the embedding rows are then read from
 * the panels (ts_wmat_row).
 *
 * TS_KERNELS=ref in the environment (read at load) keeps every matrix in its
 * stored layout and makes the states of this model run the scalar reference
 * matmul and attention, for fidelity comparisons.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/linear.h"
#include "kernels/repack.h"
#include "model/model_impl.h"

#define HUGE_ALIGN ((size_t)2 << 20)

static bool env_ref_kernels(void) {
    const char *v = getenv("TS_KERNELS");
    return v && strcmp(v, "ref") == 0;
}

/* every matrix to repack: the layers', and the output projection (the
 * token embedding too when they are tied: one matrix) */
static int layer_mats(ts_mdl *m, ts_wmat **out) {
    int n = 0;
    out[n++] = m->hp.tied_output ? &m->tok_embd : &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        ts_layer *L = &m->layers[il];
        if (ts_mdl_layer_streamed(m, il)) continue; /* stays in the file: repacked as it streams in */
        /* a MoE layer's router is a plain matrix; its expert arrays stay rows */
        ts_wmat *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->w_router};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
            if (ms[i]->data) out[n++] = ms[i];
    }
    return n;
}

/* The expert arrays of the layers in memory whose experts take panels at
 * the active level (a streamed layer's are packed as they stream in). */
static int expert_arrays(ts_mdl *m, ts_wmat **out) {
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        ts_layer *L = &m->layers[il];
        if (ts_mdl_layer_streamed(m, il)) continue;
        ts_wmat *as[] = {&L->w_gate_exps, &L->w_up_exps, &L->w_down_exps};
        for (int i = 0; i < 3; i++)
            if (as[i]->data && ts_linear_wants_pack(as[i])) out[n++] = as[i];
    }
    return n;
}

/* Bytes of an expert array in panels, 64-aligned. */
static size_t expert_array_bytes(const ts_mdl *m, const ts_wmat *w) {
    return (ts_rp_matrix_bytes(w->type, w->n_in, w->n_out) * (size_t)m->hp.n_expert + 63) / 64 * 64;
}

/* Copies the f32 vectors (norm weights, biases) the model reads straight
 * from the mapped file into one owned block, so that the forward pass never
 * touches the mapping of a repacked model: a fault on a small vector maps
 * its neighbours too (fault-around, large page-cache folios), which brought
 * back ~20 MiB of dropped weight pages per model. */
static int copy_vectors(ts_mdl *m, ts_err *err) {
    const ts_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    size_t total = (size_t)E;
    for (int il = 0; il < hp->n_layer; il++) {
        const ts_layer *L = &m->layers[il];
        total += (L->attn_norm ? E : 0) + (L->ffn_norm ? E : 0) + (L->attn_post_norm ? E : 0) +
                 (L->ffn_post_norm ? E : 0) + (L->q_norm ? L->n_q_norm : 0) + (L->k_norm ? L->n_k_norm : 0) +
                 (L->bq ? QD : 0) + (L->bk ? KD : 0) + (L->bv ? KD : 0);
    }
    float *buf = malloc(total * sizeof(float)), *o = buf;
    if (!buf) return ts_err_set(err, "out of memory copying the norm weights");
    m->fast_vecs = buf;
#define CP(ptr, n)                                                          do {                                                                        if (ptr) {                                                                  memcpy(o, ptr, (size_t)(n) * sizeof(float));                            ptr = o;                                                                o += (n);                                                           }                                                                   } while (0)
    CP(m->output_norm, E);
    for (int il = 0; il < hp->n_layer; il++) {
        ts_layer *L = &m->layers[il];
        CP(L->attn_norm, E);
        CP(L->ffn_norm, E);
        CP(L->attn_post_norm, E);
        CP(L->ffn_post_norm, E);
        CP(L->q_norm, L->n_q_norm);
        CP(L->k_norm, L->n_k_norm);
        CP(L->bq, QD);
        CP(L->bk, KD);
        CP(L->bv, KD);
        /* reading the vectors mapped the neighbouring pages of this layer's
         * matrices too (fault-around): a streamed layer's go again at once,
         * so the load's peak stays near the budget */
        ts_mdl_stream_drop_layer(m, il);
    }
#undef CP
    return 0;
}

/* Packs w (mapped from the file) into panels at dst, a slice of about 1 MiB
 * of rows at a time, dropping each slice's pages once its panels exist: the
 * load's peak stays near one copy of the weights plus a slice, instead of
 * plus the largest matrix (SmolLM2's tied 17 MiB output projection made a
 * 21 MiB transient at a 40M budget). Panels are TS_RP_ROWS rows each, so a
 * slice of whole panels packs exactly as the matrix does. */
static int pack_dropping(const ts_wmat *w, uint8_t *dst, ts_err *err) {
    const size_t pb = ts_rp_panel_bytes(w->type, w->n_in), slice_rows = (size_t)1 << 20;
    int64_t step = (int64_t)(slice_rows / (w->row_bytes * TS_RP_ROWS)) * TS_RP_ROWS;
    if (step < TS_RP_ROWS) step = TS_RP_ROWS;
    for (int64_t r0 = 0; r0 < w->n_out; r0 += step) {
        const int64_t nr = w->n_out - r0 < step ? w->n_out - r0 : step;
        const ts_wmat sl = {w->type, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->n_in, nr, w->row_bytes,
                            NULL};
        if (ts_linear_pack(&sl, dst + (size_t)(r0 / TS_RP_ROWS) * pb, err)) return -1;
        ts_gguf_drop_pages(sl.data, (size_t)nr * w->row_bytes);
    }
    return 0;
}

int ts_mdl_prepare_fast(ts_mdl *m, bool in_place, ts_err *err) {
    m->ref_kernels = env_ref_kernels();
    if (m->ref_kernels || m->hp.n_layer < 1) return 0;
    ts_wmat **mats = malloc(sizeof *mats * ((size_t)m->hp.n_layer * 11 + 1));
    if (!mats) return ts_err_set(err, "out of memory");
    const int n = layer_mats(m, mats);

    if (in_place) {
        for (int i = 0; i < n; i++) {
            ts_wmat *w = mats[i];
            if (!ts_linear_can_pack_in_place(w)) continue;
            uint8_t *dst = (uint8_t *)(uintptr_t)w->data; /* the model's own copy of the file */
            if (ts_linear_pack(w, dst, err)) goto fail;
            w->packed = dst;
        }
        if (m->hp.tied_output) m->output = m->tok_embd;
        free(mats);
        return 0;
    }

    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (ts_linear_wants_pack(mats[i])) total += (ts_rp_matrix_bytes(mats[i]->type, mats[i]->n_in, mats[i]->n_out) + 63) / 64 * 64;
    ts_wmat **exps = mats + n; /* the expert arrays that take panels (after the matrices in mats) */
    const int n_exps = expert_arrays(m, exps);
    for (int i = 0; i < n_exps; i++) total += expert_array_bytes(m, exps[i]);
    if (total == 0) {
        free(mats);
        return 0;
    }
    const size_t map_size = (total + HUGE_ALIGN - 1) / HUGE_ALIGN * HUGE_ALIGN + HUGE_ALIGN;
    uint8_t *raw = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        ts_err_set(err, "out of memory: cannot map %zu bytes for the repacked weights", map_size);
        goto fail;
    }
    m->packed_map = raw;
    m->packed_map_size = map_size;
    uint8_t *buf = (uint8_t *)(((uintptr_t)raw + HUGE_ALIGN - 1) / HUGE_ALIGN * HUGE_ALIGN);
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, map_size - (size_t)(buf - raw), MADV_HUGEPAGE); /* advisory */
#endif
    /* the f32 vectors first, so that nothing reads the mapping after the
     * matrices' pages are dropped */
    if (copy_vectors(m, err)) goto fail;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        ts_wmat *w = mats[i];
        if (!ts_linear_wants_pack(w)) continue;
        if (pack_dropping(w, buf + off, err)) goto fail;
        w->packed = buf + off;
        off += (ts_rp_matrix_bytes(w->type, w->n_in, w->n_out) + 63) / 64 * 64;
    }
    /* expert arrays: each expert's panels, expert after expert (the
     * stride is one expert's panel bytes: cpu_ops binds them so) */
    for (int i = 0; i < n_exps; i++) {
        ts_wmat *w = exps[i];
        const size_t eb = ts_rp_matrix_bytes(w->type, w->n_in, w->n_out), rows = (size_t)w->n_out * w->row_bytes;
        for (int e = 0; e < m->hp.n_expert; e++) {
            const ts_wmat we = {w->type, (const uint8_t *)w->data + (size_t)e * rows, w->n_in, w->n_out, w->row_bytes,
                                NULL};
            if (pack_dropping(&we, buf + off + (size_t)e * eb, err)) goto fail;
        }
        w->packed = buf + off;
        off += expert_array_bytes(m, w);
        ts_gguf_drop_pages(w->data, rows * (size_t)m->hp.n_expert);
    }
    m->packed_bytes = total;
    if (m->hp.tied_output) m->output = m->tok_embd;
    /* And again at the end: reading one tensor maps its neighbours' pages
     * too (fault-around), which may be tensors packed before it. */
    for (int i = 0; i < n; i++)
        if (mats[i]->packed) ts_gguf_drop_pages(mats[i]->data, (size_t)mats[i]->n_out * mats[i]->row_bytes);
    for (int i = 0; i < n_exps; i++)
        ts_gguf_drop_pages(exps[i]->data, (size_t)exps[i]->n_out * exps[i]->row_bytes * (size_t)m->hp.n_expert);
    free(mats);
    return 0;
fail:
    free(mats);
    return -1;
}

void ts_mdl_release_fast(ts_mdl *m) {
    if (m->packed_map) munmap(m->packed_map, m->packed_map_size);
    m->packed_map = NULL;
    free(m->fast_vecs);
    m->fast_vecs = NULL;
}
