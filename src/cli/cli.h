/* cli.h - the `tessera` command-line tool: one function per subcommand.
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status.
 *
 * The CLI is a client of the public API only: its files include "tessera.h",
 * CLI-local headers and libc, nothing from src/ (checked by tests/api.cmake). */
#ifndef TS_CLI_H
#define TS_CLI_H

int cli_inspect(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_perplexity(int argc, char **argv);
int cli_calibrate(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_devices(int argc, char **argv);
int cli_diffuse(int argc, char **argv); /* cmd_diffuse.c: diffusion LLMs (llada, dream) */
int cli_video(int argc, char **argv); /* cmd_video.c: Wan2.1 text-to-video (ts_video_generate) */
int cli_pipe(int argc, char **argv);  /* cmd_pipe.c: a stream of prompts on two engines (ts_prompt_pipe) */
int cli_serve(int argc, char **argv); /* cmd_serve.c: the HTTP server (src/server) */

#endif
