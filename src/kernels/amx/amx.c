/* amx.c - the AMX kernels' packing, activation quantization, driver and
 * the hardware check (amx.h). The tile code itself is amx_gemm_impl.h, on
 * the emulator (amx_emu.c) or the hardware (x86/gemm_amx.c). */
#include "kernels/amx/amx_impl.h"
#include "kernels/amx/amx_quant_i8.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/fastops.h"
#include "kernels/repack.h"
#include "kernels/rp_layout.h"
#include "quant/quant.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define RT_CHUNK 8 /* row tiles per work item (an even number: the int8 path pairs them) */

const char *ts_amx_act_name(ts_amx_act a) {
    return a == TS_AMX_EXACT ? "exact" : a == TS_AMX_Q8 ? "q8" : a == TS_AMX_INT8 ? "int8" : "?";
}

/* ---- the hardware check ---- */

static char hw_why[200];
static bool hw_ok;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_probe(void) {
#if !defined(__x86_64__)
    snprintf(hw_why, sizeof hw_why, "not an x86-64 build (AMX is an Intel x86-64 unit)");
#elif !defined(TS_KERNELS_X86)
    snprintf(hw_why, sizeof hw_why, "this build has no AMX kernels");
#else
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) {
        snprintf(hw_why, sizeof hw_why, "no CPUID leaf 7: no AMX");
        return;
    }
    __cpuid_count(7, 0, a, b, c, d);
    const char *miss[3];
    int n = 0;
    if (!((d >> 24) & 1)) miss[n++] = "AMX-TILE (leaf 7 EDX bit 24)";
    if (!((d >> 25) & 1)) miss[n++] = "AMX-INT8 (bit 25)";
    if (!((d >> 22) & 1)) miss[n++] = "AMX-BF16 (bit 22)";
    if (n) {
        snprintf(hw_why, sizeof hw_why, "CPUID reports no %s%s%s%s%s", miss[0], n > 1 ? ", " : "", n > 1 ? miss[1] : "",
                 n > 2 ? ", " : "", n > 2 ? miss[2] : "");
        return;
    }
    if (__get_cpuid_max(0, NULL) < 0x1d) {
        snprintf(hw_why, sizeof hw_why, "CPUID has no leaf 0x1D (tile palettes)");
        return;
    }
    __cpuid_count(0x1d, 0, a, b, c, d);
    if (a == 0) {
        snprintf(hw_why, sizeof hw_why,
                 "CPUID leaf 0x1D reports no tile palette (the hypervisor advertises AMX but does not enable it)");
        return;
    }
    __cpuid(1, a, b, c, d);
    uint32_t lo = 0, hi = 0;
    if ((c >> 27) & 1)
        __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv(0) */
    const uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
    if ((xcr0 & (3ull << 17)) != (3ull << 17)) {
        snprintf(hw_why, sizeof hw_why, "the OS does not enable the tile state (XCR0 bits 17, 18 clear)");
        return;
    }
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: once per process */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
        snprintf(hw_why, sizeof hw_why, "the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %s",
                 strerror(errno));
        return;
    }
#endif
    hw_ok = true;
#endif
}

bool ts_amx_hw_status(char *why, size_t n) {
    pthread_once(&hw_once, hw_probe);
    if (why && n)
        snprintf(why, n, "%s", hw_ok ? "" : hw_why);
    return hw_ok;
}

const char *ts_amx_unit_name(ts_amx_unit u) {
    return u == TS_AMX_EMU ? "emulator" : u == TS_AMX_HW ? "tiles" : u == TS_AMX_VNNI ? "vnni" : "?";
}

bool ts_amx_vnni_status(char *why, size_t n) {
#if !defined(TS_KERNELS_X86)
    if (why && n)
        snprintf(why, n, "not an x86-64 build with AVX-512 kernels (vpdpbusd is an x86-64 instruction)");
    return false;
#else
    const ts_cpu_feat need = TS_FEAT_AVX512F | TS_FEAT_AVX512BW | TS_FEAT_AVX512_VNNI;
    const ts_cpu_feat miss = need & ~ts_cpu_features();
    if (miss) {
        if (why && n) {
            char names[120];
            ts_cpu_feat_str(miss, names, sizeof names);
            snprintf(why, n, "this CPU lacks %s", names);
        }
        return false;
    }
    if (why && n)
        why[0] = 0;
    return true;
#endif
}

static const ts_amx_kernels *unit_kernels(ts_amx_unit unit, ts_err *err) {
    if (unit == TS_AMX_EMU)
        return &ts_amx_kernels_emu;
    const bool vnni = unit == TS_AMX_VNNI;
    char why[200];
    if (!(vnni ? ts_amx_vnni_status : ts_amx_hw_status)(why, sizeof why)) {
        ts_err_set(err, "amx: no %s here: %s", vnni ? "vnni unit" : "tile unit", why);
        return NULL;
    }
#if defined(TS_KERNELS_X86)
    return vnni ? &ts_amx_kernels_vnni : &ts_amx_kernels_hw;
#else
    return NULL;
#endif
}

/* ---- packed matrices ---- */

static int64_t up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

static int path_of(ts_amx_act act, uint32_t type, int64_t n_in) {
    const ts_type_traits *tt = ts_type_info(type);
    if (!tt || !tt->can_dequant || n_in < 1 || !ts_row_size(type, n_in))
        return -1;
    if (act == TS_AMX_INT8)
        return TS_AMX_PATH_I8;
    if (type == TS_TYPE_F16 || type == TS_TYPE_BF16 || type == TS_TYPE_F32)
        return TS_AMX_PATH_BF16;
    int o;
    bool halves, has_m; /* Q2_K has panels but not the terms the tiles take (its min is per half) */
    return ts_rp_panel_bytes(type, n_in) && ts_rp_type_terms(type, &o, &halves, &has_m) ? TS_AMX_PATH_INT : -1;
}

/* the header of a matrix (its sizes), 0 when there is no kernel */
static int plan(ts_amx_act act, uint32_t type, int64_t n_in, int64_t n_out, ts_amx_hdr *h) {
    memset(h, 0, sizeof *h);
    const int path = path_of(act, type, n_in);
    if (path < 0 || n_out < 1 || n_in > (1 << 24) || n_out > (1 << 24))
        return -1;
    if (path == TS_AMX_PATH_I8 && n_in > TS_AMX_I8_MAX_K)
        return -1; /* the int32 sum of K int8 products could wrap */
    h->magic = TS_AMX_MAGIC;
    h->act = (uint8_t)act, h->path = (uint8_t)path, h->type = type;
    h->n_in = n_in, h->n_out = n_out;
    h->n_rt = (int32_t)((n_out + 15) / 16);
    uint64_t bytes = 0;
    if (path == TS_AMX_PATH_INT) {
        int o;
        bool halves, has_m;
        ts_rp_type_terms(type, &o, &halves, &has_m);
        h->halves = halves, h->has_m = has_m, h->o = o;
        h->k_pad = n_in;
        h->n_blk = (int32_t)(n_in / 32);
        h->off_wd = (uint32_t)(16 * n_in);
        h->off_wm = h->off_wd + (uint32_t)h->n_blk * (h->halves ? 2 : 1) * 64;
        bytes = h->off_wm + (h->has_m ? (uint64_t)h->n_blk * 64 : 0);
    } else if (path == TS_AMX_PATH_BF16) {
        h->k_pad = up(n_in, 32);
        h->n_wp = type == TS_TYPE_BF16 ? 1 : 2;
        bytes = (uint64_t)h->n_wp * 32 * (uint64_t)h->k_pad;
    } else {
        h->k_pad = up(n_in, 64);
        h->off_wd = (uint32_t)(16 * h->k_pad);
        bytes = h->off_wd + 64;
    }
    h->rt_bytes = (uint64_t)up((int64_t)bytes, 64);
    return 0;
}

uint64_t ts_amx_packed_bytes(ts_amx_act act, uint32_t type, int64_t n_in, int64_t n_out) {
    ts_amx_hdr h;
    if (plan(act, type, n_in, n_out, &h))
        return 0;
    return TS_AMX_HDR + (uint64_t)h.n_rt * h.rt_bytes;
}

int ts_amx_packed_info(const void *p, ts_amx_act *act, uint32_t *type, int64_t *n_in, int64_t *n_out) {
    const ts_amx_hdr *h = p;
    if (!p || h->magic != TS_AMX_MAGIC)
        return -1;
    if (act) *act = (ts_amx_act)h->act;
    if (type) *type = h->type;
    if (n_in) *n_in = h->n_in;
    if (n_out) *n_out = h->n_out;
    return 0;
}

static void put_bf16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* one row tile of the int path: the panel of its 16 rows, then the terms */
static void pack_int_rt(const ts_amx_hdr *h, const uint8_t *rows, size_t row_bytes, int nrow, uint8_t *panel,
                        uint8_t *dst, ts_rp_terms *t) {
    ts_rp_pack_panel(h->type, h->n_in, rows, row_bytes, nrow, panel);
    const int kd = rp_kind(h->type);
    const size_t wb = rp_wb(kd);
    const int nh = h->halves ? 2 : 1;
    float *WD = (float *)(void *)(dst + h->off_wd), *WM = (float *)(void *)(dst + h->off_wm);
    for (int64_t pb = 0; pb < h->n_in / rp_be(kd); pb++) {
        const int n_sub = ts_rp_block_terms(h->type, panel + (size_t)pb * wb, t);
        for (int sub = 0; sub < n_sub; sub++) {
            const int64_t blk = pb * n_sub + sub;
            memcpy(dst + (size_t)blk * 512, t->u[sub], 512);
            for (int hh = 0; hh < nh; hh++) memcpy(WD + (blk * nh + hh) * 16, t->wd[sub][hh], 64);
            if (h->has_m) memcpy(WM + blk * 16, t->wm[sub], 64);
        }
    }
}

int ts_amx_pack(ts_amx_act act, uint32_t type, const void *rows, size_t row_bytes, int64_t n_in, int64_t n_out,
                void *dst, ts_err *err) {
    ts_amx_hdr h;
    if (plan(act, type, n_in, n_out, &h)) {
        const ts_type_traits *tt = ts_type_info(type);
        if (act == TS_AMX_INT8 && n_in > TS_AMX_I8_MAX_K && n_in <= (1 << 24) && path_of(act, type, n_in) >= 0)
            return ts_err_set(err, "amx,act=int8: rows of %lld inputs: past %d the int32 sum of int8 products "
                              "could wrap (use act=exact or act=q8, which sum per 32-block)", (long long)n_in,
                              TS_AMX_I8_MAX_K);
        return ts_err_set(err, "amx,act=%s: no kernel for %s rows of %lld", ts_amx_act_name(act), tt ? tt->name : "?",
                          (long long)n_in);
    }
    uint8_t *out = dst;
    memset(out, 0, TS_AMX_HDR);
    memcpy(out, &h, sizeof h);
    const int n_in_i = (int)n_in;
    float *wf = malloc((size_t)n_in * sizeof *wf);
    int8_t *q8 = malloc((size_t)n_in);
    uint8_t *panel = h.path == TS_AMX_PATH_INT ? malloc(ts_rp_panel_bytes(type, n_in)) : NULL;
    ts_rp_terms *terms = h.path == TS_AMX_PATH_INT ? malloc(sizeof *terms) : NULL;
    if (!wf || !q8 || (h.path == TS_AMX_PATH_INT && (!panel || !terms))) {
        free(wf), free(q8), free(panel), free(terms);
        return ts_err_set(err, "out of memory packing a matrix for amx");
    }
    int rc = 0;
    for (int64_t p = 0; p < h.n_rt && !rc; p++) {
        uint8_t *rt = out + TS_AMX_HDR + (size_t)p * h.rt_bytes;
        memset(rt, 0, h.rt_bytes);
        const int nrow = n_out - 16 * p < 16 ? (int)(n_out - 16 * p) : 16;
        const uint8_t *src = (const uint8_t *)rows + (size_t)(16 * p) * row_bytes;
        if (h.path == TS_AMX_PATH_INT) {
            pack_int_rt(&h, src, row_bytes, nrow, panel, rt, terms);
            continue;
        }
        float *ws = (float *)(void *)(rt + h.off_wd);
        for (int r = 0; r < nrow && !rc; r++) {
            if ((rc = ts_dequant_row(type, src + (size_t)r * row_bytes, wf, n_in, err)))
                break;
            if (h.path == TS_AMX_PATH_BF16) {
                uint8_t *wl = rt + (size_t)h.k_pad * 32;
                for (int k = 0; k < n_in_i; k++) {
                    const uint16_t hi = ts_f32_to_bf16(wf[k]);
                    const size_t at = (size_t)(k / 2) * 64 + 4 * (size_t)r + 2 * (size_t)(k % 2);
                    put_bf16(rt + at, hi);
                    if (h.n_wp == 2) put_bf16(wl + at, ts_f32_to_bf16(wf[k] - ts_bf16_to_f32(hi)));
                }
                continue;
            }
            /* int8: one scale per row, from the exact weights (the
             * activations' rule: quant_row_i8) */
            ts_amx_quant_row_i8(wf, n_in, q8, &ws[r]);
            for (int k = 0; k < n_in_i; k++) rt[(size_t)(k / 4) * 64 + 4 * (size_t)r + (size_t)(k % 4)] = (uint8_t)q8[k];
        }
    }
    free(wf), free(q8), free(panel), free(terms);
    return rc;
}

/* ---- activations ---- */

struct ts_amx_ws {
    int64_t max_n_in;
    int max_tok;
    int64_t ld8, ld16; /* bytes per token row: int8 planes, bf16 planes */
    int8_t *q1, *q2;
    float *s, *ds;
    int32_t *sum;
    int32_t *sh; /* lo256's shift per block (repack.h), else 0 */
    uint16_t *xh, *xl;
    bool k256; /* at act=q8, lo256 where ts_linear takes it (TS_ACT_K256=0: off) */
};

/* Token rows one cache line longer than they need: a tile load reads 16
 * rows ld apart, and at a power-of-two ld (2048, 4096: every model's width)
 * all 16 fall into one or two L1 sets and evict each other. */
static void ws_dims(int64_t max_n_in, int64_t *ld8, int64_t *ld16, int64_t *nblk) {
    *ld8 = up(max_n_in, 64) + 64;
    *ld16 = 2 * up(max_n_in, 32) + 64;
    *nblk = up(max_n_in, 32) / 32 + 1;
}

size_t ts_amx_ws_bytes(int64_t max_n_in, int max_tok) {
    int64_t ld8, ld16, nblk;
    ws_dims(max_n_in, &ld8, &ld16, &nblk);
    return (size_t)max_tok * (size_t)(2 * ld8 + 2 * ld16 + nblk * 16) + 256;
}

ts_amx_ws *ts_amx_ws_new(int64_t max_n_in, int max_tok, ts_err *err) {
    if (max_n_in < 1 || max_tok < 1) {
        ts_err_set(err, "amx: work space for %lld inputs x %d tokens", (long long)max_n_in, max_tok);
        return NULL;
    }
    ts_amx_ws *w = calloc(1, sizeof *w);
    if (!w)
        goto oom;
    int64_t nblk;
    ws_dims(max_n_in, &w->ld8, &w->ld16, &nblk);
    w->max_n_in = max_n_in, w->max_tok = max_tok;
    const char *k256 = getenv("TS_ACT_K256");
    w->k256 = !(k256 && !strcmp(k256, "0"));
    const size_t T = (size_t)max_tok;
    if (!(w->q1 = aligned_alloc(64, T * (size_t)w->ld8)) || !(w->q2 = aligned_alloc(64, T * (size_t)w->ld8)) ||
        !(w->xh = aligned_alloc(64, T * (size_t)w->ld16)) || !(w->xl = aligned_alloc(64, T * (size_t)w->ld16)) ||
        !(w->s = calloc(T * (size_t)nblk, sizeof(float))) || !(w->ds = calloc(T * (size_t)nblk, sizeof(float))) ||
        !(w->sum = calloc(T * (size_t)nblk * 2, sizeof(int32_t))) || !(w->sh = calloc(T * (size_t)nblk, sizeof(int32_t))))
        goto oom;
    memset(w->q1, 0, T * (size_t)w->ld8);
    memset(w->q2, 0, T * (size_t)w->ld8);
    memset(w->xh, 0, T * (size_t)w->ld16);
    memset(w->xl, 0, T * (size_t)w->ld16);
    return w;
oom:
    ts_amx_ws_free(w);
    ts_err_set(err, "out of memory allocating the amx work space");
    return NULL;
}

void ts_amx_ws_free(ts_amx_ws *w) {
    if (!w)
        return;
    free(w->q1), free(w->q2), free(w->xh), free(w->xl);
    free(w->s), free(w->ds), free(w->sum), free(w->sh);
    free(w);
}

typedef struct quant_job {
    const ts_amx_kernels *k;
    ts_amx_ws *w;
    const float *x;
    int64_t n_in;
    bool need[3]; /* by path */
    int hi;
    int mode;     /* int path: the precision (repack.h's TS_RP_LO, TS_RP_HI, TS_RP_LO256) */
    bool xl;
    bool pt;      /* int8: one scale for the tensor (pt_s), ts_amx_matmul_pt */
    float pt_s;
} quant_job;

static void quant_range(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const quant_job *j = ctx;
    ts_amx_ws *w = j->w;
    const int64_t n = j->n_in, nblk = n / 32, wblk = up(w->max_n_in, 32) / 32 + 1;
    for (int64_t t = t0; t < t1; t++) {
        const float *x = j->x + t * n;
        int8_t *q1 = w->q1 + t * w->ld8, *q2 = w->q2 + t * w->ld8;
        if (j->need[TS_AMX_PATH_INT])
            for (int64_t b = 0; b < nblk; b++) {
                int32_t lo, hi;
                float s;
                ts_rp_quant_block(x + 32 * b, x + 256 * (b / 8), j->mode, q1 + 32 * b, j->hi ? q2 + 32 * b : NULL, &s,
                                  &lo, &hi, &w->sh[t * wblk + b]);
                w->s[t * wblk + b] = s;
                w->ds[t * wblk + b] = s * (float)(lo + hi);
                w->sum[2 * (t * wblk + b)] = lo;
                w->sum[2 * (t * wblk + b) + 1] = hi;
            }
        if (j->need[TS_AMX_PATH_I8]) {
            if (j->pt) {
                ts_amx_quant_row_i8_at(x, n, j->pt_s, q1);
                w->s[t] = j->pt_s;
            } else {
                j->k->quant_i8(x, n, q1, &w->s[t]);
            }
            memset(q1 + n, 0, (size_t)(up(n, 64) - n));
        }
        if (j->need[TS_AMX_PATH_BF16]) {
            uint16_t *xh = (uint16_t *)(void *)((uint8_t *)w->xh + t * w->ld16);
            uint16_t *xl = (uint16_t *)(void *)((uint8_t *)w->xl + t * w->ld16);
            for (int64_t k = 0; k < n; k++) {
                xh[k] = ts_f32_to_bf16(x[k]);
                if (j->xl) xl[k] = ts_f32_to_bf16(x[k] - ts_bf16_to_f32(xh[k]));
            }
            for (int64_t k = n; k < up(n, 32); k++) xh[k] = xl[k] = 0;
        }
    }
}

/* ---- the driver ---- */

typedef struct mm_job {
    const ts_amx_kernels *k;
    const ts_amx_hdr *h[4];
    float *y[4];
    int64_t item0[5]; /* first work item of each matrix */
    ts_amx_xq xq[3];  /* by path */
    int n_tok;
} mm_job;

static void mm_range(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const mm_job *j = ctx;
    for (int64_t it = i0; it < i1; it++) {
        int m = 0;
        while (it >= j->item0[m + 1]) m++;
        const ts_amx_hdr *h = j->h[m];
        const int64_t p0 = (it - j->item0[m]) * RT_CHUNK, p1 = p0 + RT_CHUNK < h->n_rt ? p0 + RT_CHUNK : h->n_rt;
        j->k->rows[h->path](h, p0, p1, &j->xq[h->path], 0, j->n_tok, j->y[m], h->n_out);
    }
}

/* The per-tensor scale of ts_amx_matmul_pt: clip / 127, or from the input's
 * amax (0 for an all-zero input, NaN for a non-finite one); -1 for a clip
 * that is not finite or too small to divide by. */
static int pt_scale(const float *x, int64_t n, float clip, float *s, ts_err *err) {
    if (clip > 0) {
        if (!isfinite(clip) || clip < 0x1p-100f)
            return ts_err_set(err, "amx: clip %g must be finite and at least 2^-100", (double)clip);
        *s = clip / 127.0f;
        return 0;
    }
    if (clip != clip)
        return ts_err_set(err, "amx: clip is NaN");
    *s = ts_amx_i8_scale(ts_amx_amax_bits(x, n));
    return 0;
}

static int matmul(ts_threadpool *pool, ts_amx_ws *ws, ts_amx_unit unit, int n_mat, const void *const *w,
                  float *const *y, const float *x, int n_tok, bool pt, float clip, float *scale, ts_err *err) {
    const ts_amx_kernels *k = unit_kernels(unit, err);
    if (!k)
        return -1;
    if (n_mat < 1 || n_mat > 4 || n_tok < 1 || n_tok > ws->max_tok)
        return ts_err_set(err, "amx: %d matrices over %d tokens (at most 4 over %d)", n_mat, n_tok, ws->max_tok);
    mm_job j = {.k = k, .n_tok = n_tok};
    quant_job q = {.k = k, .w = ws, .x = x};
    for (int i = 0; i < n_mat; i++) {
        const ts_amx_hdr *h = w[i];
        if (!h || h->magic != TS_AMX_MAGIC)
            return ts_err_set(err, "amx: matrix %d is not in the amx layout", i);
        if (i && h->n_in != j.h[0]->n_in)
            return ts_err_set(err, "amx: matrices of one input disagree on its width (%lld, %lld)",
                              (long long)j.h[0]->n_in, (long long)h->n_in);
        if (h->n_in > ws->max_n_in)
            return ts_err_set(err, "amx: input of %lld past the work space's %lld", (long long)h->n_in,
                              (long long)ws->max_n_in);
        if (!k->rows[h->path])
            return ts_err_set(err, "amx: matrix %d is packed act=%s: the %s unit runs act=int8 matrices only", i,
                              ts_amx_act_name((ts_amx_act)h->act), ts_amx_unit_name(unit));
        if (pt && h->path != TS_AMX_PATH_I8)
            return ts_err_set(err, "amx: matrix %d is packed act=%s: one scale per tensor needs act=int8", i,
                              ts_amx_act_name((ts_amx_act)h->act));
        j.h[i] = h, j.y[i] = y[i];
        j.item0[i + 1] = j.item0[i] + (h->n_rt + RT_CHUNK - 1) / RT_CHUNK;
        q.need[h->path] = true;
        q.hi = h->act == TS_AMX_EXACT;
        q.xl = h->act == TS_AMX_EXACT;
    }
    q.n_in = j.h[0]->n_in;
    /* ts_linear's rule (unless TS_ACT_K256=0): at act=q8, when every matrix
     * on the int path is a K-quant, the activations take lo256's scales
     * (powers of two apart within a super-block), which their float step
     * then applies once per super-block */
    bool k256 = ws->k256 && !q.hi;
    for (int i = 0; i < n_mat; i++) k256 = k256 && (j.h[i]->path != TS_AMX_PATH_INT || ts_rp_is_k(j.h[i]->type));
    q.mode = q.hi ? TS_RP_HI : k256 ? TS_RP_LO256 : TS_RP_LO;
    if (pt) {
        if (pt_scale(x, (int64_t)n_tok * q.n_in, clip, &q.pt_s, err))
            return -1;
        q.pt = true;
        if (scale) *scale = q.pt_s;
    }
    ts_parallel_for(pool, n_tok, quant_range, &q);
    const int32_t wblk = (int32_t)(up(ws->max_n_in, 32) / 32 + 1);
    j.xq[TS_AMX_PATH_INT] = (ts_amx_xq){.n_tok = n_tok, .ld = ws->ld8, .hi = q.hi, .g256 = q.mode == TS_RP_LO256,
                                        .n_blk = wblk, .q1 = ws->q1,
                                        .q2 = ws->q2, .s = ws->s, .ds = ws->ds, .sum = ws->sum, .sh = ws->sh};
    j.xq[TS_AMX_PATH_I8] = (ts_amx_xq){.n_tok = n_tok, .ld = ws->ld8, .q1 = ws->q1, .s = ws->s};
    j.xq[TS_AMX_PATH_BF16] = (ts_amx_xq){.n_tok = n_tok, .ld = ws->ld16, .xh = ws->xh, .xl = ws->xl, .xl_used = q.xl};
    ts_parallel_for_grain(pool, j.item0[n_mat], 1, mm_range, &j);
    return 0;
}

int ts_amx_matmul(ts_threadpool *pool, ts_amx_ws *ws, ts_amx_unit unit, int n_mat, const void *const *w,
                  float *const *y, const float *x, int n_tok, ts_err *err) {
    return matmul(pool, ws, unit, n_mat, w, y, x, n_tok, false, 0.0f, NULL, err);
}

int ts_amx_matmul_pt(ts_threadpool *pool, ts_amx_ws *ws, ts_amx_unit unit, int n_mat, const void *const *w,
                     float *const *y, const float *x, int n_tok, float clip, float *scale, ts_err *err) {
    return matmul(pool, ws, unit, n_mat, w, y, x, n_tok, true, clip, scale, err);
}

/* ---- shadow outliers: the CPU's share of the per-tensor mode ---- */

int64_t ts_amx_outliers_find(const float *x, int n_tok, int64_t n_in, float clip, ts_amx_outlier *out, int64_t cap) {
    int64_t n = 0;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (int64_t)t * n_in;
        for (int64_t k = 0; k < n_in; k++) {
            if (fabsf(xt[k]) <= clip)
                continue;
            if (n < cap) {
                const float c = fminf(fmaxf(xt[k], -clip), clip);
                out[n] = (ts_amx_outlier){.t = t, .k = (int32_t)k, .r = xt[k] - c};
            }
            n++;
        }
    }
    return n;
}

int ts_amx_outliers_add(const void *w, const ts_amx_outlier *o, int64_t n, float *y, ts_err *err) {
    const ts_amx_hdr *h = w;
    if (!h || h->magic != TS_AMX_MAGIC || h->path != TS_AMX_PATH_I8)
        return ts_err_set(err, "amx: outliers need a matrix packed act=int8");
    for (int64_t i = 0; i < n; i++)
        if (o[i].t < 0 || o[i].k < 0 || o[i].k >= h->n_in)
            return ts_err_set(err, "amx: outlier %lld (token %d, channel %d) outside the matrix's %lld inputs",
                              (long long)i, (int)o[i].t, (int)o[i].k, (long long)h->n_in);
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = o[i].k;
        const float r = o[i].r;
        float *yt = y + (int64_t)o[i].t * h->n_out;
        for (int64_t p = 0; p < h->n_rt; p++) {
            /* channel k of the tile's 16 rows: bytes 4 apart in one 64-byte vector */
            const uint8_t *rt = ts_amx_rt(h, p), *col = rt + (size_t)(k / 4) * 64 + (size_t)(k % 4);
            const float *wsc = (const float *)(const void *)(rt + h->off_wd);
            const int nr = h->n_out - 16 * p < 16 ? (int)(h->n_out - 16 * p) : 16;
            for (int rr = 0; rr < nr; rr++)
                yt[16 * p + rr] = fmaf(r, wsc[rr] * (float)(int8_t)col[4 * rr], yt[16 * p + rr]);
        }
    }
    return 0;
}

int ts_amx_outliers_add_grouped(const void *w, const ts_amx_outlier *o, int64_t n, float *y, int32_t *idx,
                                int32_t *start, float *col, ts_err *err) {
    const ts_amx_hdr *h = w;
    if (!h || h->magic != TS_AMX_MAGIC || h->path != TS_AMX_PATH_I8)
        return ts_err_set(err, "amx: outliers need a matrix packed act=int8");
    if (n > INT32_MAX)
        return ts_err_set(err, "amx: %lld outliers in one call (at most 2^31 - 1)", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (o[i].t < 0 || o[i].k < 0 || o[i].k >= h->n_in)
            return ts_err_set(err, "amx: outlier %lld (token %d, channel %d) outside the matrix's %lld inputs",
                              (long long)i, (int)o[i].t, (int)o[i].k, (long long)h->n_in);
        if (i && o[i].t == o[i - 1].t && o[i].k <= o[i - 1].k)
            return ts_err_set(err, "amx: outlier %lld: token %d's channels are not ascending (%d after %d)",
                              (long long)i, (int)o[i].t, (int)o[i].k, (int)o[i - 1].k);
    }
    /* counting sort by channel, stable: start[k] ends as the end of k's run */
    memset(start, 0, (size_t)h->n_in * sizeof *start);
    for (int64_t i = 0; i < n; i++)
        start[o[i].k]++;
    int32_t acc = 0;
    for (int64_t k = 0; k < h->n_in; k++) {
        const int32_t c = start[k];
        start[k] = acc;
        acc += c;
    }
    for (int64_t i = 0; i < n; i++)
        idx[start[o[i].k]++] = (int32_t)i;
    void (*axpy)(float *, float, const float *, int64_t) = ts_kern_get()->axpy ? ts_kern_get()->axpy : ts_axpy_generic;
    int32_t b = 0;
    for (int64_t k = 0; k < h->n_in; k++) {
        const int32_t e = start[k];
        if (e == b)
            continue;
        for (int64_t p = 0; p < h->n_rt; p++) {
            /* channel k of the tile's 16 rows: bytes 4 apart in one 64-byte vector */
            const uint8_t *rt = ts_amx_rt(h, p), *cb = rt + (size_t)(k / 4) * 64 + (size_t)(k % 4);
            const float *wsc = (const float *)(const void *)(rt + h->off_wd);
            const int nr = h->n_out - 16 * p < 16 ? (int)(h->n_out - 16 * p) : 16;
            for (int rr = 0; rr < nr; rr++)
                col[16 * p + rr] = wsc[rr] * (float)(int8_t)cb[4 * rr];
        }
        for (int32_t j = b; j < e; j++)
            axpy(y + (int64_t)o[idx[j]].t * h->n_out, o[idx[j]].r, col, h->n_out);
        b = e;
    }
    return 0;
}

/* ---- references and single instructions, for tests ---- */

/* one token of the INT8 definition: X (quantized at scale s) against every
 * row, in scalar loops */
static void ref_i8_token(const ts_amx_hdr *h, const int8_t *q, float s, float *y) {
    for (int64_t r = 0; r < h->n_out; r++) {
        const uint8_t *rt = ts_amx_rt(h, r / 16);
        const float *wsc = (const float *)(const void *)(rt + h->off_wd);
        int64_t acc = 0;
        for (int64_t k = 0; k < h->n_in; k++)
            acc += (int64_t)q[k] * (int8_t)rt[(size_t)(k / 4) * 64 + 4 * (size_t)(r % 16) + (size_t)(k % 4)];
        y[r] = (float)(int32_t)acc * (s * wsc[r % 16]);
    }
}

void ts_amx_ref_int8(const void *w, const float *x, int n_tok, float *y) {
    const ts_amx_hdr *h = w;
    int8_t *q = malloc((size_t)up(h->n_in, 64));
    if (!q)
        return;
    for (int t = 0; t < n_tok; t++) {
        float s;
        ts_amx_quant_row_i8(x + (int64_t)t * h->n_in, h->n_in, q, &s);
        ref_i8_token(h, q, s, y + (int64_t)t * h->n_out);
    }
    free(q);
}

void ts_amx_ref_int8_pt(const void *w, const float *x, int n_tok, float clip, float *y, float *scale) {
    const ts_amx_hdr *h = w;
    float s = 0;
    if (pt_scale(x, (int64_t)n_tok * h->n_in, clip, &s, NULL))
        return;
    if (scale) *scale = s;
    int8_t *q = malloc((size_t)h->n_in);
    if (!q)
        return;
    for (int t = 0; t < n_tok; t++) {
        ts_amx_quant_row_i8_at(x + (int64_t)t * h->n_in, h->n_in, s, q);
        ref_i8_token(h, q, s, y + (int64_t)t * h->n_out);
    }
    free(q);
}

void ts_amx_run_one(ts_amx_unit unit, const ts_amx_cfg *cfg, ts_amx_op op, void *c, size_t c_stride, const void *a,
                    size_t a_stride, const void *b, size_t b_stride) {
    const ts_amx_kernels *k = unit_kernels(unit, NULL);
    if (k && k->run_one)
        k->run_one(cfg, op, c, c_stride, a, a_stride, b, b_stride);
}
