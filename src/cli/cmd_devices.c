/* cmd_devices.c - `tessera devices`: the compute engines this machine has
 * and their self-description, or why one did not open (ts_devices_list). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera.h"

int cli_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tessera devices\n"
                   "  lists cpu, loop, loop:npu and each OpenCL device: 'ok' with its kind, memory window,\n"
                   "  graph widths, ops, weight types and crossing cost, or 'unavailable: <why>'\n");
            return 0;
        }
        fprintf(stderr, "tessera devices: unexpected argument '%s' (the command takes none)\n", argv[i]);
        return 2;
    }
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
