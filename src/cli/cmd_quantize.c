#include <stdio.h>

#include "cli/cli.h"

int cli_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera quantize: not implemented yet\n");
    return 1;
}
