/* null_engine.c - `null`: an engine that opens and refuses everything (no
 * op, no weight type, no buffer, queue or graph). It exists to show, and to
 * test, what adding an engine takes: this folder plus one line in
 * engines.def. Registered only in TS_TEST_HOOKS builds; every method it
 * leaves out gets engine.c's default (refusal, or none). A run asked to use
 * it falls back to the CPU with the reason. */
#include <stdio.h>

#include "engine/engine_impl.h"

static const ts_eng_vt null_vt = {0}; /* every method defaulted */

static ts_engine *null_open(const ts_eng_opts *o, ts_err *err) {
    ts_engine *e = ts_eng_alloc(&null_vt, o, err);
    if (!e)
        return NULL;
    ts_eng_desc *d = &e->desc;
    snprintf(d->name, sizeof d->name, "null");
    snprintf(d->detail, sizeof d->detail, "test engine: takes nothing (TS_TEST_HOOKS build)");
    d->kind = TS_ENG_KIND_OTHER;
    d->window_bytes = d->max_buf_bytes = 1u << 20;
    d->max_width = 1;
    d->min_width = 1;
    return e;
}

const ts_eng_backend ts_eng_backend_null = {.name = "null", .open = null_open};
