/* cmd_devices.c - `tessera devices`: the compute engines this machine has
 * and their self-description, or why one did not open (ts_devices_list);
 * `--profile DEV`: one layer's latency by width there (ts_device_profile). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_util.h"
#include "tessera.h"

/* --json: one object per device from ts_devices */
static int devices_json(void) {
    const int32_t n = ts_devices(NULL, 0);
    ts_device_info *d = n > 0 ? calloc((size_t)n, sizeof *d) : NULL;
    if (n < 0 || (n > 0 && !d)) {
        fprintf(stderr, "tessera devices: cannot list the devices (out of memory)\n");
        return 1;
    }
    if (n > 0) d[0].struct_size = sizeof *d;
    const int32_t m = n > 0 ? ts_devices(d, n) : 0;
    printf("[");
    for (int32_t i = 0; i < m && i < n; i++) {
        printf("%s\n  {\"name\": ", i ? "," : "");
        cli_json_str(stdout, d[i].name);
        printf(", \"ok\": %s", d[i].ok ? "true" : "false");
        if (!d[i].ok) {
            printf(", \"reason\": ");
            cli_json_str(stdout, d[i].reason);
            printf("}");
            continue;
        }
        printf(", \"kind\": ");
        cli_json_str(stdout, d[i].kind_name);
        printf(", \"window_bytes\": %llu, \"max_buf_bytes\": %llu, \"widths\": [",
               (unsigned long long)d[i].window_bytes, (unsigned long long)d[i].max_buf_bytes);
        for (int k = 0; k < d[i].n_widths; k++) printf("%s%d", k ? ", " : "", (int)d[i].widths[k]);
        printf("], \"widths_required\": %s, \"max_width\": %d, \"min_width\": %d, \"crossing_ns\": %llu, \"ops\": ",
               d[i].widths_required ? "true" : "false", (int)d[i].max_width, (int)d[i].min_width,
               (unsigned long long)d[i].crossing_ns);
        cli_json_str(stdout, d[i].ops);
        printf(", \"weight_types\": ");
        cli_json_str(stdout, d[i].weight_types);
        printf(", \"detail\": ");
        cli_json_str(stdout, d[i].detail);
        printf("}");
    }
    printf("\n]\n");
    free(d);
    return 0;
}

/* the layer shapes of the benchmark models */
static const struct {
    const char *name;
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff;
    bool bias;
} shapes[] = {
    {"135m", 576, 9, 3, 64, 1536, false},    /* SmolLM2-135M */
    {"1b", 2048, 32, 8, 64, 8192, false},    /* Llama-3.2-1B */
    {"1.5b", 1536, 12, 2, 128, 8960, true}, /* Qwen2.5-1.5B */
};

static int profile(const char *dev, const char *model, const char *shape, const char *type, const char *wspec,
                   int threads, int reps, bool json) {
    ts_layer_shape ls = ts_layer_shape_default();
    ls.weight_type = type;
    ls.n_threads = threads;
    ls.reps = reps;
    char what[160];
    if (model) {
        ts_model *m = NULL;
        ts_error err;
        ts_model_params mp = ts_model_default_params();
        mp.vocab_only = false;
        if (ts_model_load(model, &mp, &m, &err) != TS_OK) {
            fprintf(stderr, "tessera devices: %s\n", err.message);
            return 1;
        }
        cli_layer_shape_of(m, &ls);
        ls.weight_type = type; /* --type, as without -m (the profile's weights are random) */
        snprintf(what, sizeof what, "%s's layer widths", model);
        ts_model_free(m);
    } else {
        size_t k = 0;
        while (k < sizeof shapes / sizeof *shapes && strcmp(shapes[k].name, shape)) k++;
        if (k == sizeof shapes / sizeof *shapes) {
            fprintf(stderr, "tessera devices: unknown --shape '%s' (135m, 1b, 1.5b)\n", shape);
            return 2;
        }
        ls.n_embd = shapes[k].n_embd, ls.n_head = shapes[k].n_head, ls.n_head_kv = shapes[k].n_head_kv;
        ls.head_dim = shapes[k].head_dim, ls.n_ff = shapes[k].n_ff, ls.qkv_bias = shapes[k].bias;
        snprintf(what, sizeof what, "the %s shape", shape);
    }
    int lo = 16, hi = 512, step = 16;
    if (wspec && (sscanf(wspec, "%d:%d:%d", &lo, &hi, &step) != 3 || lo < 1 || hi < lo || step < 1)) {
        fprintf(stderr, "tessera devices: --widths '%s': expected FIRST:LAST:STEP (e.g. 16:512:16)\n", wspec);
        return 2;
    }
    const int n = (hi - lo) / step + 1;
    int32_t *w = malloc(sizeof *w * (size_t)n);
    double *ms = malloc(sizeof *ms * (size_t)n);
    if (!w || !ms) {
        free(w), free(ms);
        fprintf(stderr, "tessera devices: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) w[i] = lo + i * step;
    if (ls.n_ctx < hi) ls.n_ctx = hi;
    if (!json)
        fprintf(stderr, "tessera devices: profiling one layer of %s (%d x %d, ff %d, %s) on %s at %d widths...\n", what,
                (int)ls.n_embd, (int)ls.n_head, (int)ls.n_ff, type, dev, n);
    ts_error err;
    if (ts_device_profile(dev, &ls, w, n, ms, &err) != TS_OK) {
        fprintf(stderr, "tessera devices: %s\n", err.message);
        free(w), free(ms);
        return 1;
    }
    if (json) {
        printf("{\"device\": ");
        cli_json_str(stdout, dev);
        printf(", \"weight_type\": ");
        cli_json_str(stdout, type);
        printf(", \"n_embd\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"head_dim\": %d, \"n_ff\": %d, \"points\": [",
               (int)ls.n_embd, (int)ls.n_head, (int)ls.n_head_kv, (int)ls.head_dim, (int)ls.n_ff);
        for (int i = 0; i < n; i++)
            printf("%s{\"width\": %d, \"ms\": %.4f, \"us_per_token\": %.3f}", i ? ", " : "", (int)w[i], ms[i],
                   ms[i] * 1e3 / w[i]);
        printf("]}\n");
    } else {
        printf("%-6s %10s %14s\n", "width", "ms", "us/token");
        for (int i = 0; i < n; i++) printf("%-6d %10.3f %14.2f\n", (int)w[i], ms[i], ms[i] * 1e3 / w[i]);
    }
    free(w), free(ms);
    return 0;
}

int cli_devices(int argc, char **argv) {
    bool json = false;
    const char *prof = NULL, *model = NULL, *shape = "135m", *type = "Q4_0", *widths = NULL;
    int threads = 0, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tessera devices [--json]\n"
                   "       tessera devices --profile DEV [-m MODEL | --shape 135m|1b|1.5b] [--type T]\n"
                   "                       [--widths 16:512:16] [-t N] [--reps R] [--json]\n"
                   "  lists the compute engines of this build and machine (cpu, loop, loop:npu, each OpenCL\n"
                   "  device, amx): 'ok' with its kind, memory window, graph widths, ops, weight types and\n"
                   "  crossing cost, or 'unavailable: <why>'\n"
                   "  --json          the same as a JSON array of objects (ts_devices)\n"
                   "  --profile DEV   time one transformer layer (random weights of --type, default Q4_0) on\n"
                   "                  DEV at each width FIRST..LAST step STEP (default 16:512:16) and print\n"
                   "                  width -> ms (median of --reps runs, default 5); the layer has MODEL's\n"
                   "                  widths (-m) or a benchmark shape (--shape, default 135m); -t: threads\n");
            return 0;
        }
        const bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--profile") && more) prof = argv[++i];
        else if (!strcmp(argv[i], "-m") && more) model = argv[++i];
        else if (!strcmp(argv[i], "--shape") && more) shape = argv[++i];
        else if (!strcmp(argv[i], "--type") && more) type = argv[++i];
        else if (!strcmp(argv[i], "--widths") && more) widths = argv[++i];
        else if (!strcmp(argv[i], "-t") && more) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && more) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "tessera devices: unexpected argument '%s' (see tessera devices --help)\n", argv[i]);
            return 2;
        }
    }
    if (!prof && (model || widths || threads || reps != 5)) {
        fprintf(stderr, "tessera devices: -m, --widths, -t and --reps go with --profile DEV\n");
        return 2;
    }
    if (prof) return profile(prof, model, shape, type, widths, threads, reps, json);
    if (json) return devices_json();
    /* The text can change between calls (crossing costs are measured), so
     * size by trying: grow until one call's whole text fits. */
    size_t cap = 8192;
    char *buf = NULL;
    for (int attempt = 0; attempt < 8; attempt++, cap *= 2) {
        free(buf);
        buf = malloc(cap);
        const int64_t n = buf ? ts_devices_list(buf, cap) : -1;
        if (n < 0) break;
        if ((uint64_t)n < cap) {
            fputs(buf, stdout);
            free(buf);
            return 0;
        }
    }
    free(buf);
    fprintf(stderr, "tessera devices: cannot list the devices (out of memory)\n");
    return 1;
}
