/* registry.c - the engine registry: the table of engines (engines.def),
 * parsing a name into a registry entry and options, opening and listing
 * engines, and the lines front ends print about them. Nothing here knows a
 * particular engine: each entry says its own name, variants, options, open
 * and listing (engine_impl.h, ts_eng_backend).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "quant/quant.h"

#define TS_ENGINE(x) extern const ts_eng_backend ts_eng_backend_##x;
#include "engine/engines.def"
#undef TS_ENGINE

static const ts_eng_backend *const registry[] = {
#define TS_ENGINE(x) &ts_eng_backend_##x,
#include "engine/engines.def"
#undef TS_ENGINE
};
#define N_REGISTRY (sizeof registry / sizeof *registry)

/* Options that exist only in a TS_TEST_HOOKS build (named in the refusal
 * elsewhere, so a user is told why rather than "unknown"). */
static const char *const test_hooks[] = {"nowait", "nodrain", "own_layout", "ooo_nowait"};

static const ts_eng_backend *find_backend(const char *base) {
    for (size_t i = 0; i < N_REGISTRY; i++)
        if (!strcmp(registry[i]->name, base))
            return registry[i];
    return NULL;
}

/* "cpu, loop, loop:npu, opencl, opencl:N" */
static void known_names(char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (size_t i = 0; i < N_REGISTRY && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s", i ? ", " : "",
                                registry[i]->names_help ? registry[i]->names_help : registry[i]->name);
}

static bool takes_option(const ts_eng_backend *b, const char *key) {
    for (const char *const *k = b->options; k && *k; k++)
        if (!strcmp(*k, key))
            return true;
    return false;
}

static int parse_int(const char *key, const char *val, long long lo, long long hi, long long *out, ts_err *err) {
    char *end;
    errno = 0;
    const long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi)
        return ts_err_set(err, "option %s=%s: expected an integer in [%lld, %lld]", key, val, lo, hi);
    *out = v;
    return 0;
}

int ts_eng_opt_int(const ts_eng_opts *o, const char *key, long long lo, long long hi, long long dflt, long long *out,
                   ts_err *err) {
    *out = dflt;
    for (int i = 0; i < o->n_own; i++)
        if (!strcmp(o->own[i].key, key))
            return parse_int(key, o->own[i].val, lo, hi, out, err);
    return 0;
}

int ts_eng_opt_choice(const ts_eng_opts *o, const char *key, const char *const *choices, int dflt, int *out,
                      ts_err *err) {
    *out = dflt;
    for (int i = 0; i < o->n_own; i++) {
        if (strcmp(o->own[i].key, key))
            continue;
        char list[160] = "";
        for (int c = 0; choices[c]; c++) {
            if (!strcmp(o->own[i].val, choices[c])) {
                *out = c;
                return 0;
            }
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", c ? ", " : "", choices[c]);
        }
        return ts_err_set(err, "option %s=%s: expected one of %s", key, o->own[i].val, list);
    }
    return 0;
}

/* Splits "base[:variant][,k=v]..." into o, checked against its entry. */
static int parse_spec(const char *spec, const ts_eng_open_params *p, ts_eng_opts *o, const ts_eng_backend **be,
                      ts_err *err) {
    memset(o, 0, sizeof *o);
    if (!spec || !*spec)
        return ts_err_set(err, "empty device name");
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return ts_err_set(err, "device name too long (%zu bytes)", strlen(spec));
    strcpy(buf, spec);
    char *save = NULL;
    char *tok = strtok_r(buf, ",", &save);
    if (!tok)
        return ts_err_set(err, "empty device name '%s'", spec);
    char *colon = strchr(tok, ':');
    if (colon)
        *colon = 0;
    const ts_eng_backend *b = strlen(tok) < sizeof o->base ? find_backend(tok) : NULL;
    if (!b) {
        char names[256];
        known_names(names, sizeof names);
        return ts_err_set(err, "unknown device '%s' (known: %s)", spec, names);
    }
    strcpy(o->base, tok);
    if (colon) {
        if (strlen(colon + 1) >= sizeof o->variant || !colon[1])
            return ts_err_set(err, "device '%s': bad variant '%s'", o->base, colon + 1);
        strcpy(o->variant, colon + 1);
    }
    if (!b->check_variant && o->variant[0])
        return ts_err_set(err, "device '%s' has no variant '%s'", o->base, o->variant);
    if (b->check_variant && b->check_variant(o->variant, err))
        return -1;
    bool threads_set = false;
    while ((tok = strtok_r(NULL, ",", &save))) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return ts_err_set(err, "device '%s': option '%s' is not key=value", o->base, tok);
        *eq = 0;
        const char *key = tok, *val = eq + 1;
        if (!strcmp(key, "window")) {
            if (ts_eng_parse_size(val, &o->window) || o->window == 0)
                return ts_err_set(err, "option window=%s: expected a size such as 64M or 2G", val);
        } else if (!strcmp(key, "slots")) {
            long long v = 0;
            if (parse_int(key, val, 2, 8, &v, err))
                return -1;
            o->slots = (int)v;
        } else if (!strcmp(key, "place")) {
            static const char *const places[] = {"auto", "stream", "peruse", "somr"};
            int i = 0;
            while (i < 4 && strcmp(val, places[i]))
                i++;
            if (i == 4)
                return ts_err_set(err, "option place=%s: expected auto, stream, peruse or somr", val);
            o->place = i;
#ifdef TS_TEST_HOOKS
        } else if (!strcmp(key, "nodrain")) {
            long long v = 0;
            if (parse_int(key, val, 0, 1, &v, err))
                return -1;
            o->nodrain = v != 0;
        } else if (!strcmp(key, "ooo_nowait")) {
            long long v = 0;
            if (parse_int(key, val, 0, 1, &v, err))
                return -1;
            o->ooo_nowait = v != 0;
#endif
        } else if (!strcmp(key, "inflight")) {
            long long v = 0;
            if (parse_int(key, val, 2, 4, &v, err))
                return -1;
            o->inflight = (int)v;
        } else if (!strcmp(key, "sched")) {
            if (!strcmp(val, "inorder"))
                o->sched = TS_SCHED_INORDER;
            else if (!strcmp(val, "ooo"))
                o->sched = TS_SCHED_OOO;
            else
                return ts_err_set(err, "option sched=%s: expected inorder or ooo", val);
        } else if (!strcmp(key, "calib")) {
            if (!*val || strlen(val) >= sizeof o->calib)
                return ts_err_set(err, "option calib=%s: expected the path of a `tessera calibrate` sidecar", val);
            strcpy(o->calib, val);
        } else if (!strcmp(key, "prune")) {
            char *end = NULL;
            const double v = strtod(val, &end);
            if (!*val || *end || !(v >= 0 && v <= 1))
                return ts_err_set(err, "option prune=%s: expected a fraction of the layers, 0 to 1 (e.g. 0.85)", val);
            o->prune = (float)v;
        } else if (!strcmp(key, "prune_keep")) {
            /* "down", "o+down", "none": inputs that keep their shadow in a pruned layer */
            static const char *const inputs[] = {"qkv", "o", "ffn", "down"};
            char tb[64];
            if (!*val || strlen(val) >= sizeof tb)
                return ts_err_set(err, "option prune_keep=%s: expected none or inputs joined by '+' (qkv, o, ffn, down)", val);
            strcpy(tb, val);
            o->prune_keep = 0;
            char *sv = NULL;
            for (char *t = strtok_r(tb, "+", &sv); t; t = strtok_r(NULL, "+", &sv)) {
                int i = 0;
                while (i < 4 && strcmp(t, inputs[i]))
                    i++;
                if (i == 4 && strcmp(t, "none"))
                    return ts_err_set(err, "option prune_keep=%s: '%s' is not an input (none, qkv, o, ffn, down)", val, t);
                if (i < 4)
                    o->prune_keep |= 1u << i;
            }
        } else if (!strcmp(key, "wtypes")) {
            /* "f16+q8_0+q4_0": the types this engine may take (cut to what it takes anyway) */
            char tb[128];
            if (!*val || strlen(val) >= sizeof tb)
                return ts_err_set(err, "option wtypes=%s: expected type names joined by '+', e.g. f16+q8_0", val);
            strcpy(tb, val);
            char *ts = NULL;
            for (char *t = strtok_r(tb, "+", &ts); t; t = strtok_r(NULL, "+", &ts)) {
                const int ty = ts_type_from_name(t);
                if (ty < 0 || ty >= TS_TYPE_COUNT || ty >= 64)
                    return ts_err_set(err, "option wtypes=%s: '%s' is not a weight type", val, t);
                o->wtypes |= 1ull << ty;
            }
            if (!o->wtypes)
                return ts_err_set(err, "option wtypes=%s: no type named", val);
        } else if (takes_option(b, key)) {
            if (o->n_own >= TS_ENG_MAX_OWN_OPTS || strlen(key) >= sizeof o->own[0].key ||
                strlen(val) >= sizeof o->own[0].val)
                return ts_err_set(err, "device '%s': too many or too long options", o->base);
            strcpy(o->own[o->n_own].key, key);
            strcpy(o->own[o->n_own].val, val);
            o->n_own++;
            threads_set |= !strcmp(key, "threads");
        } else {
            for (size_t i = 0; i < sizeof test_hooks / sizeof *test_hooks; i++)
                if (!strcmp(key, test_hooks[i]))
                    return ts_err_set(err,
                                      "device '%s': option '%s' is a test hook, not in this build (configure with "
                                      "-DTS_TEST_HOOKS=ON)",
                                      o->base, key);
            char who[96] = "";
            size_t wl = 0;
            for (size_t i = 0; i < N_REGISTRY && wl < sizeof who; i++)
                if (takes_option(registry[i], key))
                    wl += (size_t)snprintf(who + wl, sizeof who - wl, "%s%s", wl ? ", " : "", registry[i]->name);
            if (wl)
                return ts_err_set(err, "option %s applies to %s only, not %s", key, who, o->base);
            char own[128] = "";
            size_t len = 0;
            for (const char *const *k = b->options; k && *k && len < sizeof own; k++)
                len += (size_t)snprintf(own + len, sizeof own - len, ", %s", *k);
            return ts_err_set(err, "device '%s': unknown option '%s' (known: window, slots, place, sched, inflight, calib, prune, prune_keep, wtypes%s)", o->base, key, own);
        }
    }
    if (!threads_set && p && p->threads > 0 && takes_option(b, "threads"))
        o->threads_hint = p->threads;
    *be = b;
    return 0;
}

ts_engine *ts_eng_open_ex(const char *spec, const ts_eng_open_params *p, ts_err *err) {
    ts_eng_opts o;
    const ts_eng_backend *b = NULL;
    if (parse_spec(spec, p, &o, &b, err))
        return NULL;
    ts_engine *e = b->open(&o, err);
    if (!e)
        return NULL;
    /* a window option caps what the engine reports */
    if (o.window && o.window < e->desc.window_bytes)
        e->desc.window_bytes = o.window;
    if (e->desc.max_buf_bytes > e->desc.window_bytes)
        e->desc.max_buf_bytes = e->desc.window_bytes;
    if (o.wtypes)
        e->desc.weight_types &= o.wtypes;
    return e;
}

ts_engine *ts_eng_open(const char *spec, ts_err *err) { return ts_eng_open_ex(spec, NULL, err); }

/* Opens `name` to fill one listing entry. */
static void list_one(const char *name, ts_eng_info *in) {
    memset(in, 0, sizeof *in);
    ts_eng_copy_str(in->name, sizeof in->name, name);
    ts_err err = {{0}};
    ts_engine *e = ts_eng_open(name, &err);
    if (e) {
        in->ok = true;
        in->desc = e->desc;
        ts_eng_close(e);
    } else {
        ts_eng_copy_str(in->reason, sizeof in->reason, err.msg);
    }
}

int ts_eng_list(ts_eng_info *out, int cap) {
    int n = 0;
    for (size_t i = 0; i < N_REGISTRY; i++) {
        const ts_eng_backend *b = registry[i];
        if (b->list) {
            ts_eng_info tmp[16];
            const int m = b->list(tmp, 16);
            for (int j = 0; j < m; j++, n++)
                if (n < cap && j < 16)
                    out[n] = tmp[j];
            continue;
        }
        static const char *const none[] = {NULL};
        const char *const *names = b->list_names ? b->list_names : none;
        if (!names[0]) {
            if (n < cap)
                list_one(b->name, &out[n]);
            n++;
        }
        for (; *names; names++, n++)
            if (n < cap)
                list_one(*names, &out[n]);
    }
    return n;
}

static void fmt_mask_ops(uint32_t ops, char *out, size_t n) {
    out[0] = 0;
    size_t len = 0;
    for (int op = 0; op < TS_OP_COUNT; op++)
        if (ops & (1u << op))
            len += (size_t)snprintf(out + len, len < n ? n - len : 0, "%s%s", len ? "," : "", ts_op_name((ts_op)op));
    if (!len)
        snprintf(out, n, "none");
    if (len >= n && n)
        out[n - 1] = 0;
}

static void fmt_mask_types(uint64_t types, char *out, size_t n) {
    out[0] = 0;
    size_t len = 0;
    for (int t = 0; t < TS_TYPE_COUNT; t++)
        if ((types & (1ull << t)) && ts_type_info((uint32_t)t))
            len += (size_t)snprintf(out + len, len < n ? n - len : 0, "%s%s", len ? "," : "",
                                    ts_type_info((uint32_t)t)->name);
    if (!len)
        snprintf(out, n, "none");
    if (len >= n && n)
        out[n - 1] = 0;
}

char *ts_eng_info_line(const ts_eng_info *in, char *out, size_t n) {
    if (!in->ok) {
        snprintf(out, n, "%-10s unavailable: %s", in->name, in->reason);
        return out;
    }
    const ts_eng_desc *d = &in->desc;
    char win[32], widths[64] = "any", ops[128], types[160];
    ts_eng_fmt_bytes(d->window_bytes, win, sizeof win);
    if (d->n_widths) {
        size_t len = 0;
        for (int i = 0; i < d->n_widths; i++)
            len += (size_t)snprintf(widths + len, len < sizeof widths ? sizeof widths - len : 0, "%s%d", i ? "/" : "",
                                    d->widths[i]);
    }
    fmt_mask_ops(d->ops, ops, sizeof ops);
    fmt_mask_types(d->weight_types, types, sizeof types);
    snprintf(out, n, "%-10s ok  %-5s window %s, widths %s (%s), ops %s, weights %s, crossing %.1f us; %s", in->name,
             ts_eng_kind_name(d->kind), win, widths,
             d->n_widths ? (d->widths_required ? "required" : "preferred") : "any", ops, types,
             (double)d->crossing_ns / 1000.0, d->detail);
    return out;
}

char *ts_eng_fallback_line(const char *spec, const ts_err *err, char *out, size_t n) {
    snprintf(out, n, "tessera: prefill device '%s' unavailable (%s); running on the CPU", spec ? spec : "",
             err && err->msg[0] ? err->msg : "unknown error");
    return out;
}
