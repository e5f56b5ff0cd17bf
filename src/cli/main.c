/* main.c - `tessera` subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tessera.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"run", cli_run, "generate text from a prompt"},
    {"diffuse", cli_diffuse, "generate with a diffusion LLM (llada, dream) by iterative unmasking"},
    {"video", cli_video, "text-to-video latents with a Wan2.1 diffusion transformer"},
    {"pipe", cli_pipe, "a stream of prompts on two engines (seed 002's pipeline)"},
    {"chat", cli_chat, "interactive multi-turn chat"},
    {"perplexity", cli_perplexity, "perplexity of a model over a text file"},
    {"calibrate", cli_calibrate, "measure activation clips and outliers for calibrated INT8 (amx,act=int8,calib=)"},
    {"tokenize", cli_tokenize, "show the tokens of a text"},
    {"inspect", cli_inspect, "print a GGUF file's metadata and tensor table"},
    {"quantize", cli_quantize, "rewrite a model's 2-D weights in another type"},
    {"bench", cli_bench, "llama-bench-style prefill/generation throughput"},
    {"devices", cli_devices, "list the compute devices and why any did not open"},
    {"serve", cli_serve, "OpenAI-compatible HTTP server with a chat page"},
};

static void usage(FILE *f) {
    fprintf(f, "tessera %s - on-device generative inference\n\n", ts_version());
    fprintf(f, "usage: tessera COMMAND [options]   (tessera COMMAND --help for options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-12s %s\n", "version", "print the version");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("tessera %s\n", ts_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tessera: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
