/* hostdev.h - the device boundary of engines whose compute runs on host
 * threads: `loop` (the CPU's kernels) and `amx` (the CPU's tile unit).
 * Everything but the graph run is shared here: memory, queues with a worker
 * thread each, batches (one crossing per flush), events and waits.
 *
 * The boundary:
 *   - memory: DEVICE buffers are memory the host never gets a pointer to
 *     (filled with 0xFF, i.e. NaN, so a missing upload shows); data moves
 *     only by enqueued writes/reads. HOST and MAPPED buffers are host
 *     memory the device addresses. Everything counts against the window.
 *   - queues: each queue has its own worker thread. Enqueued commands wait
 *     on the host until a flush hands them over as one batch; the worker
 *     charges the crossing delay (delay_us, slept) per batch, then runs the
 *     commands in order. Waits block the worker on the event.
 *   - compute: a graph command calls the engine's run_graph under the
 *     device's compute lock (one graph at a time: its compute unit);
 *     transfers on other queues proceed meanwhile.
 *
 * nowait=1 (test builds) breaks the device on purpose: its queues skip
 * every wait, so a graph can run before the upload it depends on.
 *
 * An engine embeds ts_hostdev as the FIRST member of its impl (e->impl
 * points at it), fills run_graph, and puts TS_HOSTDEV_METHODS in its vt.
 */
#ifndef TS_ENGINE_HOSTDEV_H
#define TS_ENGINE_HOSTDEV_H

#include <pthread.h>

#include "engine/engine_impl.h"

typedef struct ts_hostdev {
    bool nowait;
    int64_t delay_us; /* charged per crossing */
    /* 0: a transfer costs its memcpy; else host <-> device copies move at
     * most copy_mbps MB/s (the rest slept after the memcpy: the emulated
     * device's staging bandwidth, e.g. a phone NPU's mapped-buffer path) */
    int64_t copy_mbps;
    /* > 1: every graph occupies the compute unit slow times as long as its
     * computation took (the rest slept, holding the unit): a device that
     * much slower than the host's kernels, for sweeping the device's
     * relative speed (loop's slow=) */
    int64_t slow;
    /* Runs graph g over n_tok tokens; base[s] is the host address of slot s
     * (buffer + offset), binds the run's own copy (the engine may rewrite
     * it). Called on the queue's worker under `compute`. 0, or -1 when it
     * could not run (reported by the next finish). */
    int (*run_graph)(ts_engine *e, ts_eng_graph *g, ts_eng_bind *binds, uint8_t *const *base, int64_t pos0,
                     int n_tok, int64_t n_kv);
    pthread_mutex_t compute; /* one graph at a time */
    pthread_mutex_t ev_lock; /* every event of the device */
    pthread_cond_t ev_cond;
} ts_hostdev;

void ts_hostdev_init(ts_hostdev *h);
void ts_hostdev_fini(ts_hostdev *h);

int ts_hostdev_buf_init(ts_engine *e, ts_eng_buf *b, ts_err *err);
void ts_hostdev_buf_fini(ts_eng_buf *b);
const void *ts_hostdev_buf_peer_bytes(const ts_eng_buf *b);
int ts_hostdev_queue_init(ts_engine *e, ts_eng_queue *q, ts_err *err);
void ts_hostdev_queue_fini(ts_eng_queue *q);
int ts_hostdev_write(ts_eng_queue *q, ts_eng_buf *b, size_t off, const void *src, size_t n, ts_err *err);
int ts_hostdev_read(ts_eng_queue *q, ts_eng_buf *b, size_t off, void *dst, size_t n, ts_err *err);
int ts_hostdev_host_sync(ts_eng_queue *q, ts_eng_buf *b, size_t off, size_t n, ts_eng_sync_dir dir, ts_err *err);
int ts_hostdev_wait(ts_eng_queue *q, ts_eng_event *ev, unsigned flags, ts_err *err);
int ts_hostdev_marker(ts_eng_queue *q, ts_eng_event *ev, ts_err *err);
int ts_hostdev_graph(ts_eng_queue *q, ts_eng_graph *g, const ts_eng_bind *binds, int64_t pos0, int n_tok,
                     int64_t n_kv, ts_err *err);
int ts_hostdev_flush(ts_eng_queue *q, ts_err *err);
int ts_hostdev_finish(ts_eng_queue *q, ts_err *err);
int ts_hostdev_event_init(ts_engine *e, ts_eng_event *ev, bool user, ts_err *err);
void ts_hostdev_event_fini(ts_eng_event *ev);
int ts_hostdev_event_signal(ts_eng_event *ev, ts_err *err);
int ts_hostdev_event_wait(ts_eng_event *ev, ts_err *err);
bool ts_hostdev_event_done(ts_eng_event *ev);

#define TS_HOSTDEV_METHODS                                                                                   \
    .buf_init = ts_hostdev_buf_init, .buf_fini = ts_hostdev_buf_fini, .queue_init = ts_hostdev_queue_init,   \
    .buf_peer_bytes = ts_hostdev_buf_peer_bytes,                                                             \
    .queue_fini = ts_hostdev_queue_fini, .enq_write = ts_hostdev_write, .enq_read = ts_hostdev_read,         \
    .enq_host_sync = ts_hostdev_host_sync, .enq_wait = ts_hostdev_wait, .enq_marker = ts_hostdev_marker,     \
    .enq_graph = ts_hostdev_graph, .flush = ts_hostdev_flush, .finish = ts_hostdev_finish,                   \
    .event_init = ts_hostdev_event_init, .event_fini = ts_hostdev_event_fini,                                \
    .event_signal = ts_hostdev_event_signal, .event_wait = ts_hostdev_event_wait,                            \
    .event_done = ts_hostdev_event_done

#endif
