#include <stdio.h>

#include "cli/cli.h"

int cli_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera inspect: not implemented yet\n");
    return 1;
}
