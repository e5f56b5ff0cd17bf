#include <stdio.h>

#include "cli/cli.h"

int cli_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera tokenize: not implemented yet\n");
    return 1;
}
