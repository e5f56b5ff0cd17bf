#include <stdio.h>

#include "cli/cli.h"

int cli_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera run: not implemented yet\n");
    return 1;
}
int cli_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera chat: not implemented yet\n");
    return 1;
}
int cli_perplexity(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tessera perplexity: not implemented yet\n");
    return 1;
}
