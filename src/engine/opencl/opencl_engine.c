/* opencl_engine.c - the `opencl` engine: OpenCL 1.2 devices through the ICD
 * loader, which is opened at run time (dlopen of libOpenCL.so.1, or the
 * path in TS_OPENCL_LIB), so that a machine without OpenCL runs everything
 * else and gets a clean "no OpenCL" error here.
 *
 * "opencl" is the first device of the first platform that has one;
 * "opencl:N" the N-th device counting across platforms in the loader's
 * order. Buffers: DEVICE = clCreateBuffer; HOST = host memory this engine
 * allocates, wrapped with CL_MEM_USE_HOST_PTR; MAPPED = the caller's memory
 * wrapped the same way. Host syncs are a map/unmap of the range (free on
 * unified memory, a copy where the driver keeps a device copy). One
 * in-order command queue per ts_eng_queue; events are cl_events, user
 * events clCreateUserEvent. The kernels (opencl_kernels.c) are built once
 * per open; kernel objects are shared, so setting arguments and enqueuing
 * happen under one lock.
 *
 * What it takes: every op; matmul weights in F32, F16, Q8_0, Q4_0 and Q4_1 (GGUF
 * rows; other types are converted at load by the probe's answer). Widths:
 * any up to 4096, 64/128/256 preferred. The crossing cost is measured when
 * the device opens (an empty marker's round trip, best of 5). Stall time is
 * not measured (reported 0; desc.stall_measured is false).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/opencl/opencl_internal.h"
#include "quant/quant.h"

/* ---- the loader ---- */

#define CL_FUNCS(X) \
    X(clGetPlatformIDs) \
    X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext) X(clReleaseContext) \
        X(clCreateCommandQueue) X(clReleaseCommandQueue) X(clCreateBuffer) X(clReleaseMemObject) \
            X(clCreateProgramWithSource) X(clBuildProgram) X(clGetProgramBuildInfo) X(clReleaseProgram) \
                X(clCreateKernel) X(clReleaseKernel) X(clSetKernelArg) X(clGetKernelWorkGroupInfo) \
                    X(clEnqueueNDRangeKernel) X(clEnqueueWriteBuffer) X(clEnqueueReadBuffer) X(clEnqueueMapBuffer) \
                        X(clEnqueueUnmapMemObject) X(clEnqueueMarkerWithWaitList) X(clEnqueueBarrierWithWaitList) \
                            X(clCreateUserEvent) X(clSetUserEventStatus) X(clWaitForEvents) X(clGetEventInfo) \
                                X(clReleaseEvent) X(clFlush) X(clFinish)

static struct {
#define X(f) __typeof__(f) *f;
    CL_FUNCS(X)
#undef X
} cl;

static pthread_once_t cl_once = PTHREAD_ONCE_INIT;
static char cl_load_error[256];

static void cl_load(void) {
    const char *env = getenv("TS_OPENCL_LIB");
    const char *names[] = {env && *env ? env : "libOpenCL.so.1", env && *env ? NULL : "libOpenCL.so"};
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++)
        if (names[i])
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(cl_load_error, sizeof cl_load_error, "cannot load the OpenCL ICD loader %s (%s)", names[0],
                 why ? why : "?");
        return;
    }
#define X(f) \
    cl.f = (__typeof__(cl.f))dlsym(h, #f); \
    if (!cl.f) { \
        snprintf(cl_load_error, sizeof cl_load_error, "the OpenCL library %s lacks %s (OpenCL 1.2 needed)", names[0], \
                 #f); \
        return; \
    }
    CL_FUNCS(X)
#undef X
}

static int cl_ready(ts_err *err) {
    pthread_once(&cl_once, cl_load);
    if (cl_load_error[0])
        return ts_err_set(err, "opencl: %s", cl_load_error);
    return 0;
}

static const char *cl_errname(cl_int e) {
    switch (e) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_EVENT_WAIT_LIST: return "CL_INVALID_EVENT_WAIT_LIST";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL error";
    }
}

#define CLCHECK(call, what) \
    do { \
        cl_int rc_ = (call); \
        if (rc_ != CL_SUCCESS) \
            return ts_err_set(err, "opencl: %s failed: %s (%d)", what, cl_errname(rc_), (int)rc_); \
    } while (0)

/* ---- devices ---- */

typedef struct dev_ref {
    cl_platform_id plat;
    cl_device_id dev;
} dev_ref;

/* Every device across platforms, in the loader's order. Returns the count
 * (0 with err when there is none). */
static int enum_devices(dev_ref *out, int cap, ts_err *err) {
    if (cl_ready(err))
        return 0;
    cl_uint np = 0;
    cl_int rc = cl.clGetPlatformIDs(0, NULL, &np);
    if (rc != CL_SUCCESS || np == 0) {
        ts_err_set(err,
                   "opencl: no OpenCL platform (clGetPlatformIDs: %s, %d); is an ICD installed (/etc/OpenCL/vendors)?",
                   cl_errname(rc), (int)rc);
        return 0;
    }
    cl_platform_id plats[16];
    if (np > 16)
        np = 16;
    if (cl.clGetPlatformIDs(np, plats, NULL) != CL_SUCCESS) {
        ts_err_set(err, "opencl: clGetPlatformIDs failed listing %u platforms", np);
        return 0;
    }
    int n = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        if (cl.clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        cl_device_id devs[16];
        if (nd > 16)
            nd = 16;
        if (cl.clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd; d++, n++)
            if (n < cap)
                out[n] = (dev_ref){plats[p], devs[d]};
    }
    if (n == 0)
        ts_err_set(err, "opencl: %u platform%s but no device", np, np == 1 ? "" : "s");
    return n < cap ? n : cap;
}

/* ---- engine state ---- */

enum {
    K_MM_F32, K_MM_F16, K_MM_Q8_0, K_MM_Q4_0, K_MM_Q4_1,
    K_RMSNORM, K_ROPE, K_KV, K_ATTN, K_SWIGLU, K_GEGLU, K_ADD, K_COUNT
};
static const char *const kernel_names[K_COUNT] = {"mm_f32",  "mm_f16", "mm_q8_0",  "mm_q4_0",   "mm_q4_1",
                                                  "rmsnorm", "rope",   "kv_store", "attention", "swiglu",
                                                  "geglu",   "add"};

typedef struct ocl_eng {
    cl_platform_id plat;
    cl_device_id dev;
    cl_context ctx;
    cl_program prog;
    cl_kernel k[K_COUNT];
    size_t wg;             /* work-group size of the reductions (<= 64, power of two) */
    pthread_mutex_t klock; /* kernel arguments + enqueue */
} ocl_eng;

typedef struct ocl_q {
    cl_command_queue q;
    int pending; /* commands since the last flush */
} ocl_q;

typedef struct ocl_graph {
    cl_mem scores; /* attention scratch, or NULL */
} ocl_graph;

static void ocl_close(ts_engine *e) {
    ocl_eng *o = e->impl;
    if (o) {
        for (int i = 0; i < K_COUNT; i++)
            if (o->k[i])
                cl.clReleaseKernel(o->k[i]);
        if (o->prog)
            cl.clReleaseProgram(o->prog);
        if (o->ctx)
            cl.clReleaseContext(o->ctx);
        pthread_mutex_destroy(&o->klock);
        free(o);
    }
    ts_eng_dealloc(e);
}

static bool ocl_supports(const ts_engine *e, ts_op op, uint32_t wtype) {
    (void)e, (void)op, (void)wtype;
    return true; /* the masks in the desc are exact */
}

/* ---- buffers ---- */

typedef struct ocl_buf {
    cl_mem mem;
    void *owned; /* HOST: the host memory we allocated */
} ocl_buf;

static int ocl_buf_init(ts_engine *e, ts_eng_buf *b, ts_err *err) {
    ocl_eng *o = e->impl;
    ocl_buf *ob = calloc(1, sizeof *ob);
    if (!ob)
        return ts_err_set(err, "out of memory");
    cl_int rc;
    if (b->mem == TS_MEM_DEVICE) {
        ob->mem = cl.clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, b->size, NULL, &rc);
        b->host = NULL;
    } else {
        if (b->mem == TS_MEM_HOST) {
            ob->owned = aligned_alloc(4096, (b->size + 4095) / 4096 * 4096);
            if (!ob->owned) {
                free(ob);
                return ts_err_set(err, "opencl: out of host memory (%zu bytes)", b->size);
            }
            memset(ob->owned, 0, b->size);
            b->host = ob->owned;
        }
        ob->mem = cl.clCreateBuffer(o->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, b->size, b->host, &rc);
    }
    if (rc != CL_SUCCESS || !ob->mem) {
        free(ob->owned);
        free(ob);
        return ts_err_set(err, "opencl: clCreateBuffer of %zu bytes failed: %s (%d)", b->size, cl_errname(rc), (int)rc);
    }
    b->impl = ob;
    return 0;
}

static void ocl_buf_fini(ts_eng_buf *b) {
    ocl_buf *ob = b->impl;
    cl.clReleaseMemObject(ob->mem);
    free(ob->owned);
    free(ob);
}

static cl_mem mem_of(const ts_eng_buf *b) { return ((ocl_buf *)b->impl)->mem; }

/* ---- queues ---- */

static int ocl_queue_init(ts_engine *e, ts_eng_queue *qq, ts_err *err) {
    ocl_eng *o = e->impl;
    ocl_q *q = calloc(1, sizeof *q);
    if (!q)
        return ts_err_set(err, "out of memory");
    cl_int rc;
    q->q = cl.clCreateCommandQueue(o->ctx, o->dev, 0, &rc);
    if (rc != CL_SUCCESS) {
        free(q);
        return ts_err_set(err, "opencl: clCreateCommandQueue failed: %s (%d)", cl_errname(rc), (int)rc);
    }
    qq->impl = q;
    return 0;
}

static void ocl_queue_fini(ts_eng_queue *qq) {
    ocl_q *q = qq->impl;
    cl.clFinish(q->q);
    cl.clReleaseCommandQueue(q->q);
    free(q);
}

static int ocl_write(ts_eng_queue *qq, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err) {
    ocl_q *q = qq->impl;
    CLCHECK(cl.clEnqueueWriteBuffer(q->q, mem_of(b), CL_FALSE, off, n, src, 0, NULL, NULL), "clEnqueueWriteBuffer");
    q->pending++;
    return 0;
}

static int ocl_read(ts_eng_queue *qq, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err) {
    ocl_q *q = qq->impl;
    CLCHECK(cl.clEnqueueReadBuffer(q->q, mem_of(b), CL_FALSE, off, n, dst, 0, NULL, NULL), "clEnqueueReadBuffer");
    q->pending++;
    return 0;
}

static int ocl_host_sync(ts_eng_queue *qq, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err) {
    ocl_q *q = qq->impl;
    cl_int rc;
    /* TO_DEVICE: map with WRITE_INVALIDATE (no device->host copy that would
     * clobber what the host wrote), unmap pushes the range to the device.
     * TO_HOST: map for reading brings the device's writes to host memory. */
    const cl_map_flags fl = dir == TS_SYNC_TO_DEVICE ? CL_MAP_WRITE_INVALIDATE_REGION : CL_MAP_READ;
    void *p = cl.clEnqueueMapBuffer(q->q, mem_of(b), CL_FALSE, fl, off, n, 0, NULL, NULL, &rc);
    if (rc != CL_SUCCESS)
        return ts_err_set(err, "opencl: clEnqueueMapBuffer failed: %s (%d)", cl_errname(rc), (int)rc);
    CLCHECK(cl.clEnqueueUnmapMemObject(q->q, mem_of(b), p, 0, NULL, NULL), "clEnqueueUnmapMemObject");
    q->pending++;
    TS_ENG_COUNT(qq->eng, host_sync_bytes, n);
    return 0;
}

typedef struct ocl_ev {
    cl_event ev;
} ocl_ev;

static int ocl_wait(ts_eng_queue *qq, ts_eng_event *ev, unsigned flags, ts_err *err) {
    (void)flags;
    ocl_q *q = qq->impl;
    cl_event e = ((ocl_ev *)ev->impl)->ev;
    /* a marker of another queue must reach its device to ever complete */
    if (ev->queue && ev->queue != qq)
        cl.clFlush(((ocl_q *)ev->queue->impl)->q);
    CLCHECK(cl.clEnqueueBarrierWithWaitList(q->q, 1, &e, NULL), "clEnqueueBarrierWithWaitList");
    q->pending++;
    return 0;
}

static int ocl_marker(ts_eng_queue *qq, ts_eng_event *ev, ts_err *err) {
    ocl_q *q = qq->impl;
    CLCHECK(cl.clEnqueueMarkerWithWaitList(q->q, 0, NULL, &((ocl_ev *)ev->impl)->ev), "clEnqueueMarkerWithWaitList");
    q->pending++;
    return 0;
}

static int ocl_flush(ts_eng_queue *qq, ts_err *err) {
    ocl_q *q = qq->impl;
    if (!q->pending)
        return 0;
    CLCHECK(cl.clFlush(q->q), "clFlush");
    q->pending = 0;
    TS_ENG_COUNT(qq->eng, crossings, 1);
    return 0;
}

static int ocl_finish(ts_eng_queue *qq, ts_err *err) {
    ocl_q *q = qq->impl;
    if (ocl_flush(qq, err))
        return -1;
    CLCHECK(cl.clFinish(q->q), "clFinish");
    return 0;
}

/* ---- events ---- */

static int ocl_event_init(ts_engine *e, ts_eng_event *ev, bool user, ts_err *err) {
    ocl_eng *o = e->impl;
    ocl_ev *oe = calloc(1, sizeof *oe);
    if (!oe)
        return ts_err_set(err, "out of memory");
    if (user) {
        cl_int rc;
        oe->ev = cl.clCreateUserEvent(o->ctx, &rc);
        if (rc != CL_SUCCESS) {
            free(oe);
            return ts_err_set(err, "opencl: clCreateUserEvent failed: %s (%d)", cl_errname(rc), (int)rc);
        }
    }
    ev->impl = oe;
    return 0;
}

static void ocl_event_fini(ts_eng_event *ev) {
    ocl_ev *oe = ev->impl;
    if (oe->ev)
        cl.clReleaseEvent(oe->ev); /* the runtime keeps it alive while commands use it */
    free(oe);
    free(ev);
}

static int ocl_event_signal(ts_eng_event *ev, ts_err *err) {
    CLCHECK(cl.clSetUserEventStatus(((ocl_ev *)ev->impl)->ev, CL_COMPLETE), "clSetUserEventStatus");
    return 0;
}

static int ocl_event_wait(ts_eng_event *ev, ts_err *err) {
    if (ev->queue && ocl_flush(ev->queue, err))
        return -1;
    CLCHECK(cl.clWaitForEvents(1, &((ocl_ev *)ev->impl)->ev), "clWaitForEvents");
    return 0;
}

static bool ocl_event_done(ts_eng_event *ev) {
    cl_int st = 0;
    if (cl.clGetEventInfo(((ocl_ev *)ev->impl)->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) !=
        CL_SUCCESS)
        return false;
    return st == CL_COMPLETE;
}

/* ---- graphs ---- */

static uint64_t ocl_graph_scratch(const ts_engine *e, const ts_eng_graph *g) {
    (void)e;
    uint64_t need = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const ts_eng_node *n = &g->nodes[i];
        if (n->op != TS_OP_ATTENTION)
            continue;
        const uint64_t b = (uint64_t)g->width * (uint64_t)n->attention.n_head * (uint64_t)n->attention.n_ctx * 4;
        if (b > need)
            need = b;
    }
    return need;
}

static int ocl_graph_init(ts_engine *e, ts_eng_graph *g, ts_err *err) {
    ocl_eng *o = e->impl;
    ocl_graph *og = calloc(1, sizeof *og);
    if (!og)
        return ts_err_set(err, "out of memory");
    if (g->scratch_bytes) {
        if (g->scratch_bytes > e->desc.max_buf_bytes) {
            free(og);
            return ts_err_set(err, "opencl: attention scratch of %" PRIu64 " bytes exceeds the largest buffer",
                              g->scratch_bytes);
        }
        cl_int rc;
        og->scores = cl.clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, (size_t)g->scratch_bytes, NULL, &rc);
        if (rc != CL_SUCCESS) {
            free(og);
            return ts_err_set(err, "opencl: attention scratch (%" PRIu64 " bytes): %s (%d)", g->scratch_bytes,
                              cl_errname(rc), (int)rc);
        }
    }
    g->impl = og;
    return 0;
}

static void ocl_graph_fini(ts_eng_graph *g) {
    ocl_graph *og = g->impl;
    if (og->scores)
        cl.clReleaseMemObject(og->scores);
    free(og);
}

/* Kernel arguments, in order. */
typedef struct karg {
    size_t size;
    const void *p;
} karg;
#define A(x) ((karg){sizeof(x), &(x)})

static int launch(ts_engine *e, ocl_q *q, int k, const karg *args, int n_args, cl_uint dims, const size_t *gsz,
                  const size_t *lsz, ts_err *err) {
    ocl_eng *o = e->impl;
    cl_int rc = CL_SUCCESS;
    for (int i = 0; i < n_args && rc == CL_SUCCESS; i++)
        rc = cl.clSetKernelArg(o->k[k], (cl_uint)i, args[i].size, args[i].p);
    if (rc == CL_SUCCESS)
        rc = cl.clEnqueueNDRangeKernel(q->q, o->k[k], dims, NULL, gsz, lsz, 0, NULL, NULL);
    if (rc != CL_SUCCESS)
        return ts_err_set(err, "opencl: kernel %s: %s (%d)", kernel_names[k], cl_errname(rc), (int)rc);
    q->pending++;
    return 0;
}

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

static int run_node(ts_engine *e, ocl_q *q, const ts_eng_graph *g, const ts_eng_node *n, const ts_eng_bind *binds,
                    int64_t pos0, int n_tok, int64_t n_kv, ts_err *err) {
    ocl_eng *o = e->impl;
    const cl_long p0 = pos0;
    const cl_long win_kv = n_kv; /* attention: 0 causal, > 0 keys [0, n_kv) for every query */
    const cl_int T = n_tok;
    /* buffer and byte offset of a ref; absent refs get slot 0's buffer (an
     * argument must be a valid object) and a has_w flag of 0 */
#define MEMOF(r) (mem_of(binds[(r).slot >= 0 ? (r).slot : 0].buf))
#define OFFOF(r) ((cl_ulong)((r).slot >= 0 ? binds[(r).slot].off + (r).off : 0))
    switch (n->op) {
    case TS_OP_MATMUL: {
        const ts_eng_bind *b = &binds[n->matmul.w.slot];
        int k;
        switch (b->wtype) {
        case TS_TYPE_F32: k = K_MM_F32; break;
        case TS_TYPE_F16: k = K_MM_F16; break;
        case TS_TYPE_Q8_0: k = K_MM_Q8_0; break;
        case TS_TYPE_Q4_0: k = K_MM_Q4_0; break;
        case TS_TYPE_Q4_1: k = K_MM_Q4_1; break;
        default: return ts_err_set(err, "opencl: no matmul kernel for weight type %u", b->wtype);
        }
        if (b->layout != TS_WL_ROWS)
            return ts_err_set(err, "opencl: weights must be in GGUF row layout");
        cl_mem w = MEMOF(n->matmul.w), x = MEMOF(n->matmul.x), y = MEMOF(n->matmul.y);
        cl_ulong wo = OFFOF(n->matmul.w), xo = OFFOF(n->matmul.x), yo = OFFOF(n->matmul.y), rb = b->row_bytes;
        cl_int ni = (cl_int)n->matmul.n_in, no = (cl_int)n->matmul.n_out;
        const karg a[] = {A(w), A(wo), A(rb), A(x), A(xo), A(y), A(yo), A(ni), A(no), A(T)};
        const size_t l[2] = {16, 1};
        const size_t gs[2] = {round_up((size_t)no, 16), (size_t)n_tok};
        return launch(e, q, k, a, 10, 2, gs, l, err);
    }
    case TS_OP_RMSNORM: {
        cl_mem x = MEMOF(n->rmsnorm.x), y = MEMOF(n->rmsnorm.y), w = MEMOF(n->rmsnorm.w);
        cl_ulong xo = OFFOF(n->rmsnorm.x), yo = OFFOF(n->rmsnorm.y), wo = OFFOF(n->rmsnorm.w);
        cl_int has_w = n->rmsnorm.w.slot >= 0, len = (cl_int)n->rmsnorm.n;
        cl_float eps = n->rmsnorm.eps;
        const karg a[] = {A(x), A(xo), A(y), A(yo), A(w), A(wo), A(has_w), A(len), A(eps)};
        const size_t rows = (size_t)n_tok * (size_t)n->rmsnorm.rows_per_tok;
        const size_t gs[1] = {rows * o->wg}, l[1] = {o->wg};
        return launch(e, q, K_RMSNORM, a, 9, 1, gs, l, err);
    }
    case TS_OP_ROPE: {
        cl_mem x = MEMOF(n->rope.x), f = MEMOF(n->rope.freq);
        cl_ulong xo = OFFOF(n->rope.x);
        /* the (hi, lo) float pairs follow the doubles */
        cl_ulong fo = OFFOF(n->rope.freq) + (cl_ulong)(n->rope.n_rot / 2) * sizeof(double);
        cl_int nh = n->rope.n_head, hd = n->rope.head_dim, nr = n->rope.n_rot, neox = n->rope.neox;
        const karg a[] = {A(x), A(xo), A(f), A(fo), A(nh), A(hd), A(nr), A(neox), A(p0)};
        const size_t gs[3] = {(size_t)nr / 2, (size_t)nh, (size_t)n_tok};
        return launch(e, q, K_ROPE, a, 9, 3, gs, NULL, err);
    }
    case TS_OP_KV_STORE: {
        cl_mem k = MEMOF(n->kv_store.k), v = MEMOF(n->kv_store.v), kc = MEMOF(n->kv_store.kc),
               vc = MEMOF(n->kv_store.vc);
        cl_ulong ko = OFFOF(n->kv_store.k), vo = OFFOF(n->kv_store.v), kco = OFFOF(n->kv_store.kc),
                 vco = OFFOF(n->kv_store.vc);
        cl_long dim = n->kv_store.dim;
        cl_int f16 = n->kv_store.f16;
        const karg a[] = {A(k), A(ko), A(v), A(vo), A(kc), A(kco), A(vc), A(vco), A(dim), A(p0), A(f16)};
        const size_t gs[2] = {(size_t)dim, (size_t)n_tok};
        return launch(e, q, K_KV, a, 11, 2, gs, NULL, err);
    }
    case TS_OP_ATTENTION: {
        const ocl_graph *og = g->impl;
        cl_mem qm = MEMOF(n->attention.q), kc = MEMOF(n->attention.kc), vc = MEMOF(n->attention.vc),
               out = MEMOF(n->attention.out), scr = og->scores;
        cl_ulong qo = OFFOF(n->attention.q), kco = OFFOF(n->attention.kc), vco = OFFOF(n->attention.vc),
                 oo = OFFOF(n->attention.out);
        cl_int nh = n->attention.n_head, nkv = n->attention.n_head_kv, hd = n->attention.head_dim,
               swa = n->attention.n_swa, f16 = n->attention.kv_f16, nctx = n->attention.n_ctx;
        cl_float sc = n->attention.scale, cap = n->attention.softcap;
        const karg a[] = {A(qm), A(qo),  A(kc), A(kco), A(vc), A(vco), A(out), A(oo), A(scr),
                          A(nh), A(nkv), A(hd), A(swa), A(sc), A(cap), A(f16), A(p0), A(nctx), A(win_kv)};
        const size_t gs[2] = {(size_t)nh * o->wg, (size_t)n_tok}, l[2] = {o->wg, 1};
        return launch(e, q, K_ATTN, a, 19, 2, gs, l, err);
    }
    case TS_OP_SWIGLU:
    case TS_OP_GEGLU: {
        cl_mem gm = MEMOF(n->glu.gate), um = MEMOF(n->glu.up), om = MEMOF(n->glu.out);
        cl_ulong go = OFFOF(n->glu.gate), uo = OFFOF(n->glu.up), oo = OFFOF(n->glu.out);
        cl_long len = (cl_long)n_tok * n->glu.n;
        const karg a[] = {A(gm), A(go), A(um), A(uo), A(om), A(oo), A(len)};
        const size_t gs[1] = {(size_t)len};
        return launch(e, q, n->op == TS_OP_SWIGLU ? K_SWIGLU : K_GEGLU, a, 7, 1, gs, NULL, err);
    }
    case TS_OP_ADD:
    case TS_OP_ADD_ROW: {
        cl_mem y = MEMOF(n->add.y), x = MEMOF(n->add.x);
        cl_ulong yo = OFFOF(n->add.y), xo = OFFOF(n->add.x);
        cl_long row = n->op == TS_OP_ADD_ROW ? n->add.n : 0, len = (cl_long)n_tok * n->add.n;
        const karg a[] = {A(y), A(yo), A(x), A(xo), A(row), A(len)};
        const size_t gs[1] = {(size_t)len};
        return launch(e, q, K_ADD, a, 6, 1, gs, NULL, err);
    }
    default: return ts_err_set(err, "opencl: op %d", (int)n->op);
    }
#undef MEMOF
#undef OFFOF
}

static int ocl_graph_run(ts_eng_queue *qq, ts_eng_graph *g, const ts_eng_bind *binds, int64_t pos0, int n_tok,
                         int64_t n_kv, ts_err *err) {
    ts_engine *e = qq->eng;
    ocl_eng *o = e->impl;
    pthread_mutex_lock(&o->klock);
    int rc = 0;
    for (int i = 0; i < g->n_nodes && !rc; i++) {
        rc = run_node(e, qq->impl, g, &g->nodes[i], binds, pos0, n_tok, n_kv, err);
        if (rc)
            ts_err_prefix(err, "node %d (%s)", i, ts_op_name(g->nodes[i].op));
        else
            TS_ENG_COUNT(e, nodes, 1);
    }
    pthread_mutex_unlock(&o->klock);
    return rc;
}

static int ocl_check_node(const ts_engine *e, const ts_eng_node *n, int width, ts_err *err) {
    (void)e;
    (void)width;
    /* kernels index with int where a dimension fits one */
    if (n->op == TS_OP_MATMUL && (n->matmul.n_in > INT32_MAX / 2 || n->matmul.n_out > INT32_MAX / 2))
        return ts_err_set(err, "matrix too large for this engine's int indexing");
    return 0;
}

static const ts_eng_vt ocl_vt = {
    .close = ocl_close,
    .supports_op = ocl_supports,
    .check_node = ocl_check_node,
    .buf_init = ocl_buf_init,
    .buf_fini = ocl_buf_fini,
    .queue_init = ocl_queue_init,
    .queue_fini = ocl_queue_fini,
    .enq_write = ocl_write,
    .enq_read = ocl_read,
    .enq_host_sync = ocl_host_sync,
    .enq_wait = ocl_wait,
    .enq_marker = ocl_marker,
    .enq_graph = ocl_graph_run,
    .flush = ocl_flush,
    .finish = ocl_finish,
    .event_init = ocl_event_init,
    .event_fini = ocl_event_fini,
    .event_signal = ocl_event_signal,
    .event_wait = ocl_event_wait,
    .event_done = ocl_event_done,
    .graph_init = ocl_graph_init,
    .graph_fini = ocl_graph_fini,
    .graph_scratch = ocl_graph_scratch,
};

/* ---- open ---- */

static void dev_string(cl_device_id d, cl_device_info what, char *out, size_t n) {
    out[0] = 0;
    if (cl.clGetDeviceInfo(d, what, n, out, NULL) != CL_SUCCESS)
        out[0] = 0;
    out[n - 1] = 0;
}

/* Fills the parts of the description that come from the device. */
static void describe(ts_eng_desc *d, const dev_ref *r, int index) {
    char name[256], ver[256], pname[256], detail[1024];
    dev_string(r->dev, CL_DEVICE_NAME, name, sizeof name);
    dev_string(r->dev, CL_DEVICE_VERSION, ver, sizeof ver);
    pname[0] = 0;
    if (cl.clGetPlatformInfo(r->plat, CL_PLATFORM_NAME, sizeof pname, pname, NULL) != CL_SUCCESS)
        pname[0] = 0;
    pname[sizeof pname - 1] = 0;
    cl_device_type type = 0;
    cl_ulong gmem = 0, maxalloc = 0;
    cl_uint cus = 0;
    cl.clGetDeviceInfo(r->dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    cl.clGetDeviceInfo(r->dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
    cl.clGetDeviceInfo(r->dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL);
    cl.clGetDeviceInfo(r->dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    snprintf(d->name, sizeof d->name, "opencl:%d", index);
    snprintf(detail, sizeof detail, "%s / %s, %s, %u compute units", pname, name, ver, cus);
    ts_eng_copy_str(d->detail, sizeof d->detail, detail);
    d->kind = (type & CL_DEVICE_TYPE_GPU)           ? TS_ENG_KIND_GPU
              : (type & CL_DEVICE_TYPE_ACCELERATOR) ? TS_ENG_KIND_NPU
                                                    : TS_ENG_KIND_OTHER;
    d->window_bytes = gmem;
    d->max_buf_bytes = maxalloc;
    static const int w[] = {64, 128, 256};
    d->n_widths = 3;
    memcpy(d->widths, w, sizeof w);
    d->widths_required = false;
    d->max_width = 4096;
    d->min_width = d->kind == TS_ENG_KIND_GPU ? 32 : 1;
    d->ops = TS_OP_MASK_LLM; /* its kernels: the LLM block's ops */
    d->weight_types = (1ull << TS_TYPE_F32) | (1ull << TS_TYPE_F16) | (1ull << TS_TYPE_Q8_0) | (1ull << TS_TYPE_Q4_0) |
                      (1ull << TS_TYPE_Q4_1);
    d->host_visible_device_mem = false;
    d->cpu_layouts = false;
    d->stall_measured = false;
}

/* Best of 5 round trips of an empty marker: the cost of one crossing. */
static uint64_t measure_crossing(ocl_eng *o) {
    cl_int rc;
    cl_command_queue q = cl.clCreateCommandQueue(o->ctx, o->dev, 0, &rc);
    if (rc != CL_SUCCESS)
        return 0;
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        cl_event ev;
        const uint64_t t0 = ts_now_ns();
        if (cl.clEnqueueMarkerWithWaitList(q, 0, NULL, &ev) != CL_SUCCESS)
            break;
        cl.clFlush(q);
        cl.clWaitForEvents(1, &ev);
        const uint64_t dt = ts_now_ns() - t0;
        cl.clReleaseEvent(ev);
        if (dt < best)
            best = dt;
    }
    cl.clReleaseCommandQueue(q);
    return best == UINT64_MAX ? 0 : best;
}

static int build(ts_engine *e, ts_err *err) {
    ocl_eng *o = e->impl;
    cl_int rc;
    o->ctx = cl.clCreateContext(NULL, 1, &o->dev, NULL, NULL, &rc);
    if (rc != CL_SUCCESS)
        return ts_err_set(err, "opencl: clCreateContext failed: %s (%d)", cl_errname(rc), (int)rc);
    const char *src = ts_ocl_source;
    o->prog = cl.clCreateProgramWithSource(o->ctx, 1, &src, NULL, &rc);
    if (rc != CL_SUCCESS)
        return ts_err_set(err, "opencl: clCreateProgramWithSource failed: %s (%d)", cl_errname(rc), (int)rc);
    rc = cl.clBuildProgram(o->prog, 1, &o->dev, "-cl-std=CL1.2", NULL, NULL);
    if (rc != CL_SUCCESS) {
        char log[300] = "";
        cl.clGetProgramBuildInfo(o->prog, o->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = 0;
        return ts_err_set(err, "opencl: building the kernels failed: %s (%d): %s", cl_errname(rc), (int)rc, log);
    }
    size_t wg = 64;
    for (int i = 0; i < K_COUNT; i++) {
        o->k[i] = cl.clCreateKernel(o->prog, kernel_names[i], &rc);
        if (rc != CL_SUCCESS)
            return ts_err_set(err, "opencl: kernel %s: %s (%d)", kernel_names[i], cl_errname(rc), (int)rc);
        size_t kwg = 0;
        if (cl.clGetKernelWorkGroupInfo(o->k[i], o->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL) ==
                CL_SUCCESS &&
            kwg < wg)
            wg = kwg;
    }
    if (wg < 16)
        return ts_err_set(err, "opencl: work groups of %zu are too small (16 needed)", wg);
    o->wg = 1;
    while (o->wg * 2 <= wg && o->wg < 64)
        o->wg *= 2;
    return 0;
}

static ts_engine *ocl_open(const ts_eng_opts *opts, ts_err *err) {
    dev_ref devs[64];
    const int nd = enum_devices(devs, 64, err);
    if (nd == 0)
        return NULL;
    int idx = 0;
    if (opts->variant[0])
        idx = atoi(opts->variant);
    if (idx >= nd) {
        ts_err_set(err, "opencl: no device %d (this machine has %d)", idx, nd);
        return NULL;
    }
    ts_engine *e = ts_eng_alloc(&ocl_vt, opts, err);
    if (!e)
        return NULL;
    ocl_eng *o = calloc(1, sizeof *o);
    if (!o) {
        ts_eng_dealloc(e);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&o->klock, NULL);
    e->impl = o;
    o->plat = devs[idx].plat;
    o->dev = devs[idx].dev;
    describe(&e->desc, &devs[idx], idx);
    if (build(e, err)) {
        ts_err_prefix(err, "%s", e->desc.name);
        ocl_close(e);
        return NULL;
    }
    e->desc.crossing_ns = measure_crossing(o);
    return e;
}

static int ocl_list(ts_eng_info *out, int cap) {
    dev_ref devs[16];
    ts_err err = {{0}};
    const int nd = enum_devices(devs, 16, &err);
    if (nd == 0) {
        if (cap >= 1) {
            memset(out, 0, sizeof *out);
            snprintf(out->name, sizeof out->name, "opencl");
            ts_eng_copy_str(out->reason, sizeof out->reason, err.msg);
        }
        return 1;
    }
    for (int i = 0; i < nd && i < cap; i++) {
        ts_eng_info *in = &out[i];
        memset(in, 0, sizeof *in);
        snprintf(in->name, sizeof in->name, "opencl:%d", i);
        ts_err e2 = {{0}};
        char spec[32];
        snprintf(spec, sizeof spec, "opencl:%d", i);
        ts_engine *e = ts_eng_open(spec, &e2);
        if (e) {
            in->ok = true;
            in->desc = e->desc;
            ts_eng_close(e);
        } else {
            ts_eng_copy_str(in->reason, sizeof in->reason, e2.msg);
        }
    }
    return nd;
}

static int ocl_check_variant(const char *variant, ts_err *err) {
    char *end;
    const long v = variant[0] ? strtol(variant, &end, 10) : 0;
    if (variant[0] && (*end || v < 0 || v > 255))
        return ts_err_set(err, "option opencl:N=%s: expected an integer in [0, 255]", variant);
    return 0;
}

const ts_eng_backend ts_eng_backend_opencl = {
    .name = "opencl",
    .names_help = "opencl, opencl:N",
    .check_variant = ocl_check_variant,
    .open = ocl_open,
    .list = ocl_list,
};
