/* cmd_devices.c - `tessera devices`: the compute engines this machine has
 * and their self-description, or why one did not open (ts_devices_list). */
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

int cli_devices(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tessera devices [--json]\n"
                   "  lists the compute engines of this build and machine (cpu, loop, loop:npu, each OpenCL\n"
                   "  device): 'ok' with its kind, memory window, graph widths, ops, weight types and crossing\n"
                   "  cost, or 'unavailable: <why>'\n"
                   "  --json   the same as a JSON array of objects (ts_devices)\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) {
            json = true;
            continue;
        }
        fprintf(stderr, "tessera devices: unexpected argument '%s' (the command takes only --json)\n", argv[i]);
        return 2;
    }
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
