/* cmd_pipe.c - `tessera pipe`: a stream of prompts on two engines (seed
 * 002's pipeline over an AR prompt's chunks x layers; docs/PIPE.md). The
 * prompts are consecutive windows of the tokenized text; each request's
 * prefill runs its first k block executions on engine A and the rest, with
 * the next token's logits, on engine B. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_util.h"
#include "stream_cli.h"

static void usage(void) {
    fprintf(stderr,
            "usage: tessera pipe -m MODEL --pipe A [--engine B] (-f FILE | -p TEXT) [options]\n"
            "\n"
            "A stream of prompts (prefill and the next token's logits) on two engines, one thread each\n"
            "(seed 002's pipeline, docs/PIPE.md): a prompt's work is chunks x layers block executions;\n"
            "engine A runs the first k of each prompt, engine B the rest and the logits, while A starts\n"
            "the next prompt. The hand-off is the prompt's residual stream and KV cache, in memory both\n"
            "engines address.\n"
            "\n"
            "  -m, --model FILE         GGUF model\n"
            "      --pipe E             engine A: cpu, or a prefill device (amx,act=int8, vnni, loop, ...)\n"
            "      --engine E           engine B (default cpu)\n"
            "  -f, --file FILE          the text the prompts are cut from\n"
            "  -p, --prompt TEXT        the same, given inline\n"
            "      --prompt-tokens N    tokens per prompt (default 512): prompt i is tokens [i N, (i+1) N)\n"
            "                           of the text, wrapping around\n"
            "      --chunk N            tokens per chunk (default 256)\n"
            "      --requests N         prompts per stream (default 4)\n"
            "      --cut C              auto (default: Eq. 5 on the co-run rates), solo (on the solo rates),\n"
            "                           step (the best chunk boundary), K or K1,K2,... (block indices),\n"
            "                           sweep (every cut), rates (measure only), setup (the PSS only)\n"
            "      --slo S              the best cut whose latency is within S seconds, requests paced\n"
            "      --probe N            block executions per rate measurement (default: a whole prompt; with\n"
            "                           --diffuse one step.s layers)\n"
            "      --baselines          also whole prompts on A alone, B alone and both (data parallel)\n"
            "      --own-copies         B packs its own weights (the data-parallel memory baseline; by default\n"
            "                           B maps A's packed weights where it reads their layout: amx,act=int8 + vnni)\n"
            "      --logits-out FILE    each run's next-token logits, f32 [runs][requests][n_vocab]\n"
            "\n"
            "A diffusion LLM (llada, dream): each request decodes --gen tokens after its prompt with the\n"
            "vanilla decoder (steps forwards over the whole canvas: steps x layers block executions;\n"
            "each step's commit on the engine that ran its last layer):\n"
            "      --diffuse            decode instead of prefill\n"
            "      --gen N              tokens to decode (default 128)\n"
            "      --steps S            forwards (default: --gen)\n"
            "      --block N            semi-autoregressive block length (default 32)\n"
            CLI_ACT_HELP
            "      --stats json         one JSON object on stderr\n"
            "  -q, --quiet              no progress lines\n"
            "  -h, --help               this text\n");
}

typedef struct logits_out {
    float *buf; /* [n_req][n_vocab] of the current run */
    int32_t n_req, n_vocab;
    FILE *f;
    bool failed;
} logits_out;

static bool on_logits(int32_t i, const float *logits, int32_t n_vocab, void *user) {
    logits_out *o = user;
    if (i >= 0 && i < o->n_req && n_vocab == o->n_vocab)
        memcpy(o->buf + (int64_t)i * n_vocab, logits, (size_t)n_vocab * sizeof(float));
    return true;
}

typedef struct pipe_ctx {
    ts_prompt_pipe *p;
    logits_out *lo;
} pipe_ctx;

static ts_status p_measure(void *c, int32_t probe, ts_stream_rates *solo, ts_stream_rates *co, ts_error *err) {
    return ts_prompt_pipe_measure(((pipe_ctx *)c)->p, probe, solo, co, err);
}
/* each run's logits appended to --logits-out */
static ts_status flush_logits(logits_out *o, ts_status st) {
    if (st != TS_OK || !o->f) return st;
    if (fwrite(o->buf, sizeof(float), (size_t)o->n_req * (size_t)o->n_vocab, o->f) !=
        (size_t)o->n_req * (size_t)o->n_vocab) {
        o->failed = true;
        return TS_ERR_IO;
    }
    return st;
}
static ts_status p_run(void *c, int32_t cut, int32_t n, const ts_stream_rates *pace, double slo, ts_stream_result *r,
                       ts_error *err) {
    pipe_ctx *x = c;
    return flush_logits(x->lo, ts_prompt_pipe_run(x->p, cut, n, pace, slo, r, err));
}
static ts_status p_whole(void *c, uint32_t stages, int32_t n, ts_stream_result *r, ts_error *err) {
    pipe_ctx *x = c;
    return flush_logits(x->lo, ts_prompt_pipe_run_whole(x->p, stages, n, r, err));
}

int cli_pipe(int argc, char **argv) {
    const char *model_path = NULL, *engine_a = NULL, *engine_b = "cpu", *file = NULL, *text_arg = NULL;
    const char *cut_s = "auto", *logits_path = NULL;
    int32_t prompt_tokens = 512, chunk = 256, n_req = 4, probe = 0;
    double slo = 0;
    bool baselines = false, own_copies = false, quiet = false, stats_json = false, diffuse = false;
    ts_diffusion_params dp = ts_diffusion_default_params();
    dp.decoder = TS_DIFFUSION_VANILLA;
    ts_activations act = TS_ACTIVATIONS_EXACT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!strcmp(a, "--baselines") || !strcmp(a, "--own-copies")) {
            *(a[2] == 'b' ? &baselines : &own_copies) = true;
            continue;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!strcmp(a, "--diffuse")) {
            diffuse = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value (or is unknown; tessera pipe --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int32_t f;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--pipe")) engine_a = v;
        else if (!strcmp(a, "--engine")) engine_b = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) text_arg = v;
        else if (!strcmp(a, "--cut")) cut_s = v;
        else if (!strcmp(a, "--logits-out")) logits_path = v;
        else if (!strcmp(a, "--act")) {
            if (cli_parse_act(a, v, &act)) return 2;
        } else if (!strcmp(a, "--stats")) {
            if (strcmp(v, "json")) {
                fprintf(stderr, "error: --stats: json is the one format\n");
                return 2;
            }
            stats_json = true;
        } else if (!strcmp(a, "--slo")) {
            char *end;
            slo = strtod(v, &end);
            if (*end || !(slo > 0)) {
                fprintf(stderr, "error: --slo '%s': seconds > 0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--gen") || !strcmp(a, "--steps") || !strcmp(a, "--block")) {
            if (cli_parse_i32(a, v, 1, &f)) return 2;
            *(!strcmp(a, "--gen") ? &dp.n_gen : !strcmp(a, "--steps") ? &dp.steps : &dp.block) = f;
        } else if (!strcmp(a, "--prompt-tokens") || !strcmp(a, "--chunk") || !strcmp(a, "--requests") ||
                   !strcmp(a, "--probe")) {
            if (cli_parse_i32(a, v, 1, &f)) return 2;
            *(!strcmp(a, "--prompt-tokens") ? &prompt_tokens
              : !strcmp(a, "--chunk")       ? &chunk
              : !strcmp(a, "--requests")    ? &n_req
                                            : &probe) = f;
        } else {
            fprintf(stderr, "error: unknown option %s (tessera pipe --help)\n", a);
            return 2;
        }
    }
    if (!model_path || !engine_a || (!file == !text_arg)) {
        fprintf(stderr, "error: tessera pipe needs -m MODEL, --pipe ENGINE and one of -f FILE / -p TEXT "
                        "(tessera pipe --help)\n");
        return 2;
    }
    size_t len = 0;
    char *text = file ? cli_read_file(file, &len) : NULL;
    if (file && !text) return 1;
    if (!file) len = strlen(text_arg);
    ts_model_params mp = ts_model_default_params();
    mp.log = cli_log;
    ts_model *m = NULL;
    ts_error err = {0};
    int rc = 1;
    int32_t *toks = NULL, *prompts = NULL, *lens = NULL;
    logits_out lo = {0};
    ts_prompt_pipe *p = NULL;
    if (ts_model_load(model_path, &mp, &m, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        goto done;
    }
    int64_t n_tok = 0;
    if (!(toks = cli_tokenize_text(m, file ? text : text_arg, len, false, false, &n_tok))) goto done;
    if (n_tok < 1) {
        fprintf(stderr, "error: the text has no tokens\n");
        goto done;
    }
    /* prompt i: tokens [i N, (i+1) N) of the text, wrapping around */
    prompts = malloc((size_t)n_req * (size_t)prompt_tokens * sizeof *prompts);
    lens = malloc((size_t)n_req * sizeof *lens);
    if (!prompts || !lens) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    for (int32_t i = 0; i < n_req; i++) {
        lens[i] = prompt_tokens;
        for (int32_t t = 0; t < prompt_tokens; t++)
            prompts[(int64_t)i * prompt_tokens + t] = toks[((int64_t)i * prompt_tokens + t) % n_tok];
    }
    ts_model_info mi = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &mi);
    lo.n_req = n_req, lo.n_vocab = mi.n_vocab;
    if (logits_path) {
        if (!(lo.buf = calloc((size_t)n_req * (size_t)mi.n_vocab, sizeof(float))) ||
            !(lo.f = fopen(logits_path, "wb"))) {
            fprintf(stderr, "error: --logits-out %s: cannot allocate or open\n", logits_path);
            goto done;
        }
    }
    ts_prompt_pipe_params pp = ts_prompt_pipe_default_params();
    pp.engine_a = engine_a, pp.engine_b = engine_b, pp.chunk = chunk, pp.activations = act;
    pp.on_logits = lo.buf ? on_logits : NULL, pp.user_data = &lo;
    pp.diffusion = diffuse ? &dp : NULL;
    pp.own_copies = own_copies;
    if (diffuse && logits_path) {
        fprintf(stderr, "error: --logits-out is the prefill's; a diffusion stream decodes tokens\n");
        goto done;
    }
    if (ts_prompt_pipe_open(m, prompts, lens, n_req, &pp, &p, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        goto done;
    }
    pipe_ctx pc = {p, &lo};
    cli_stream cs = {.p = &pc, .measure = p_measure, .run = p_run, .run_whole = p_whole,
                     .unit = diffuse ? "decode" : "prompt", .units = diffuse ? "decodes" : "prompts", .quiet = quiet,
                     .stats_json = stats_json};
    ts_prompt_pipe_get_info(p, &cs.info);
    if (!quiet)
        fprintf(stderr,
                "stream: A = %s, B = %s (one thread each), %d block executions per %s (%d %s of %lld tokens x %d "
                "layers); %.1f MiB of B's packed weights mapped from A (%s); PSS %.1f MiB\n",
                cs.info.engine_a, cs.info.engine_b, cs.info.n_blocks, cs.unit, cs.info.n_blocks / cs.info.step_blocks,
                diffuse ? "steps" : "chunks", (long long)cs.info.tokens, cs.info.step_blocks,
                (double)cs.info.shared_bytes / 1048576.0, cs.info.shared_bytes ? "one copy" : "none shared",
                (double)cs.info.pss_bytes / 1048576.0);
    rc = cli_stream_cuts(&cs, cut_s, n_req, slo, probe, baselines);
    if (!rc && lo.failed) {
        fprintf(stderr, "error: --logits-out %s: write failed\n", logits_path);
        rc = 1;
    }
done:
    if (lo.f && fclose(lo.f) && !rc) {
        fprintf(stderr, "error: --logits-out %s: write failed\n", logits_path);
        rc = 1;
    }
    free(lo.buf);
    ts_prompt_pipe_free(p);
    free(prompts), free(lens), free(toks), free(text);
    ts_model_free(m);
    return rc;
}
