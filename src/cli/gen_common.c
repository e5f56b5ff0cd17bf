/* gen_common.c - option parsing, help and setup shared by `tessera run`,
 * `chat` and `perplexity`. Every flag maps onto a field of the public API's
 * parameter structs (ts_context_params, ts_sampling_params,
 * ts_generate_params). */
#include "gen_common.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"

/* ---- help ---- */

static void print_help(enum gen_cmd cmd, FILE *f) {
    const ts_sampling_params d = ts_sampling_default_params();
    if (cmd == GEN_RUN) {
        fprintf(f, "usage: tessera run -m MODEL.gguf (-p TEXT | -f FILE) [options]\n\n"
                   "Generates text from a prompt, streaming it to stdout as it is produced.\n"
                   "Stops at an end-of-generation token, after -n tokens, or when the context is full.\n\n"
                   "  -m, --model FILE         GGUF model (required)\n"
                   "  -p, --prompt TEXT        prompt text\n"
                   "  -f, --file FILE          read the prompt from FILE (instead of -p)\n"
                   "  -n, --n-predict N        tokens to generate (default 128; -1 = until EOS or context full)\n"
                   "      --chat               wrap the prompt in the model's chat template as one user turn\n"
                   "      --system TEXT        system message for --chat\n"
                   "      --chat-template NAME chatml|gemma|llama3: override the template family\n"
                   "      --no-display-prompt  do not echo the prompt before the generated text\n"
                   "      --stats json         print the final counters as ONE JSON object on stderr:\n"
                   "                           n_prompt_tokens, n_gen_tokens, prefill_ms, decode_ms,\n"
                   "                           prefill_tps, decode_tps, peak_rss_mib, stop_reason\n"
                   "                           (eos|length|context_full), n_threads, n_ctx, n_batch, seed;\n"
                   "                           with a grammar also grammar_checks, grammar_masks, grammar_ms\n"
                   "      --logits-out FILE    write the f32 logits of every evaluated position: raw\n"
                   "                           little-endian f32, no header, one row of n_vocab floats per\n"
                   "                           evaluated token in evaluation order (the prompt tokens, then\n"
                   "                           each generated token fed back; the last generated token is not\n"
                   "                           evaluated, so rows = n_prompt_tokens + max(n_gen_tokens-1, 0)).\n"
                   "                           Row i holds the prediction for token i+1.\n"
                   "      --grammar TEXT       constrain the output to a GBNF grammar (start rule 'root';\n"
                   "                           docs/GRAMMAR.md): tokens that cannot continue it are never chosen\n"
                   "      --grammar-file FILE  the same, read from FILE\n"
                   "      --json-schema S      constrain the output to JSON matching the JSON schema S (or @FILE);\n"
                   "                           '{}' = any JSON value (supported keywords: docs/GRAMMAR.md)\n");
    } else if (cmd == GEN_CHAT) {
        fprintf(f, "usage: tessera chat -m MODEL.gguf [options]\n\n"
                   "Interactive multi-turn chat using the model's chat template. Reads one user\n"
                   "message per line from stdin (prompt \"> \" on stderr) and streams each reply to\n"
                   "stdout. The KV cache is kept between turns; only the new turn is evaluated.\n"
                   "Commands: /reset clears the conversation and the cache; Ctrl-D (EOF) quits.\n\n"
                   "  -m, --model FILE         GGUF model (required)\n"
                   "      --system TEXT        system message\n"
                   "      --chat-template NAME chatml|gemma|llama3: override the template family\n"
                   "  -n, --n-predict N        max tokens per reply (default -1 = until end of turn or context full)\n"
                   "      --stats json         after each reply, one JSON object of counters on stderr\n");
    } else {
        fprintf(f, "usage: tessera perplexity -m MODEL.gguf -f TEXT_FILE [options]\n"
                   "       tessera perplexity -m MODEL.gguf --kl-divergence-base FILE --kl-divergence [options]\n\n"
                   "Perplexity as llama-perplexity computes it: the file is tokenized (BOS per the\n"
                   "metadata), cut into non-overlapping windows of -c tokens whose first token is\n"
                   "replaced by BOS when the model adds BOS, and the second half of each window\n"
                   "(positions c/2 .. c-2 predicting the next token) is scored. Prints per-chunk\n"
                   "running values \"[1]x,[2]y,...\" on stderr, then on stdout\n"
                   "\"Final estimate: PPL = x +/- y\" (y: ppl * std(NLL) / sqrt(count-1)).\n\n"
                   "  -m, --model FILE         GGUF model (required)\n"
                   "  -f, --file FILE          text to score (required unless --kl-divergence; >= 2*c tokens)\n"
                   "  -c, --ctx-size N         window length (default 512)\n"
                   "      --chunks N           score at most N windows (default: all)\n"
                   "      --kl-divergence-base FILE  (also --save-all-logits) write the log-probabilities of\n"
                   "                           every scored token to FILE, in llama-perplexity's format\n"
                   "      --kl-divergence      compare with the --kl-divergence-base FILE instead (its tokens\n"
                   "                           and window length; no -f): KL divergence (mean, quantiles),\n"
                   "                           same top token, both perplexities and their ratio\n");
    }
    fprintf(f, "  -t, --threads N          worker threads (default: physical cores)\n"
               "      --prefill-device DEV prompt chunks on a device, decode on the CPU: loop, loop:npu,\n"
               "                           opencl, opencl:N, with ,key=value options (window=64M,\n"
               "                           place=auto|stream|peruse|somr, ...: docs/ENGINE.md);\n"
               "                           a device that will not open: one line on stderr, CPU run\n"
               "      --chunk N            tokens per device chunk (default 256; a device requiring\n"
               "                           widths gets the largest of them <= N)\n"
               "      --sched S            inorder (default) or ooo: several prompt chunks in flight, the\n"
               "                           CPU's work overlapping the device's (docs/ENGINE.md)\n"
               "      --prefill-min-tokens N  narrower chunks (the tail) stay on the CPU (default 32); auto: a chunk\n"
               "                              goes to the device when the CPU's measured time for it exceeds the\n"
               "                              device's crossing cost\n" CLI_ACT_HELP CLI_MEM_HELP);
    if (cmd == GEN_PPL)
        fprintf(f, "      --stats json         print the counters (and the device's) as one JSON object on stderr\n");
    if (cmd != GEN_PPL)
        fprintf(f, "  -c, --ctx-size N         context length in tokens (default min(trained, 4096))\n");
    fprintf(f, "  -b, --batch-size N       prompt micro-batch (default 512, capped at the context)\n");
    fprintf(f, "  -h, --help               this help\n");
    if (cmd != GEN_PPL)
        fprintf(f,
                "\nsampling (applied in this order: penalties, top-k, top-p, min-p, temperature):\n"
                "      --temp T             temperature (default %.2f; <= 0 = greedy argmax)\n"
                "      --top-k K            keep the K most likely tokens (default %d; <= 0 = off)\n"
                "      --top-p P            nucleus: smallest set with mass >= P (default %.2f; 1 = off)\n"
                "      --min-p P            drop tokens with p < P * p_max (default %.2f; 0 = off)\n"
                "      --repeat-penalty X   divide positive / multiply negative logits of tokens seen in\n"
                "                           the last --repeat-last-n tokens (default %.2f = off)\n"
                "      --repeat-last-n N    penalty window (default %d; 0 = off, -1 = context size)\n"
                "      --presence-penalty X subtract X from the logits of tokens seen in the window (default 0)\n"
                "      --seed S             RNG seed (default: random; printed in the stats)\n"
                "\nThe prompt is tokenized with BOS/EOS as the model's metadata says and with special-token\n"
                "text (e.g. <|im_start|>) recognised, as llama-cli does. In chat mode the tokenizer adds\n"
                "BOS when the metadata asks for it and the template text then omits {{ bos_token }}, so\n"
                "BOS appears exactly once.\n",
                d.temp, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.repeat_last_n);
}

static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    /* one splitmix64 round so nearby times give unrelated seeds */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (x ^ (x >> 31)) & 0xFFFFFFFFull; /* short enough to retype */
}

/* ---- argument parsing ---- */

int gen_parse(enum gen_cmd cmd, int argc, char **argv, gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = ts_sampling_default_params();
    o->display_prompt = true;
    o->mem = (cli_mem_opts)CLI_MEM_INIT;
    o->n_predict = cmd == GEN_CHAT ? -1 : 128;
    o->chunks = -1;
    if (cmd == GEN_PPL) o->n_ctx = 512;
    const char *cmdname = cmd == GEN_RUN ? "run" : cmd == GEN_CHAT ? "chat" : "perplexity";

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help(cmd, stdout);
            return 1;
        }
        /* flags without a value */
        if (!strcmp(a, "--no-prefill-routed")) {
            o->mem.no_routed = true;
            continue;
        }
        if (cmd == GEN_PPL && !strcmp(a, "--kl-divergence")) {
            o->kld = true;
            continue;
        }
        if (cmd == GEN_RUN && !strcmp(a, "--chat")) {
            o->chat = true;
            continue;
        }
        if (cmd == GEN_RUN && !strcmp(a, "--no-display-prompt")) {
            o->display_prompt = false;
            continue;
        }
        /* flags with a value: "--flag VALUE" or "--flag=VALUE" */
        char name[64];
        const char *val = NULL;
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
#define FLAG(s, l) (!strcmp(name, s) || !strcmp(name, l))
        bool known = FLAG("-m", "--model") || FLAG("-t", "--threads") || FLAG("-c", "--ctx-size") ||
                     FLAG("-b", "--batch-size") || FLAG("-f", "--file") ||
                     (cmd == GEN_PPL && (!strcmp(name, "--chunks") || !strcmp(name, "--stats") ||
                                         !strcmp(name, "--kl-divergence-base") || !strcmp(name, "--save-all-logits"))) ||
                     !strcmp(name, "--prefill-device") || !strcmp(name, "--chunk") ||
                     !strcmp(name, "--prefill-min-tokens") || !strcmp(name, "--sched") || cli_mem_flag(name) ||
                     !strcmp(name, "--act") ||
                     (cmd != GEN_PPL &&
                      (FLAG("-n", "--n-predict") || !strcmp(name, "--temp") || !strcmp(name, "--top-k") ||
                       !strcmp(name, "--top-p") || !strcmp(name, "--min-p") || !strcmp(name, "--repeat-penalty") ||
                       !strcmp(name, "--repeat-last-n") || !strcmp(name, "--presence-penalty") ||
                       !strcmp(name, "--seed") || !strcmp(name, "--system") || !strcmp(name, "--chat-template") ||
                       !strcmp(name, "--stats"))) ||
                     (cmd == GEN_RUN && (FLAG("-p", "--prompt") || !strcmp(name, "--logits-out") ||
                                         !strcmp(name, "--grammar") || !strcmp(name, "--grammar-file") ||
                                         !strcmp(name, "--json-schema")));
        if (cmd == GEN_CHAT && FLAG("-f", "--file")) known = false;
        if (!known) {
            fprintf(stderr, "tessera %s: unknown option '%s' (see tessera %s --help)\n", cmdname, a, cmdname);
            return -1;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tessera %s: option '%s' needs a value\n", cmdname, name);
                return -1;
            }
            val = argv[++i];
        }
        int rc = 0;
        if (FLAG("-m", "--model")) o->model = val;
        else if (FLAG("-p", "--prompt")) o->prompt = val;
        else if (FLAG("-f", "--file")) o->file = val;
        else if (!strcmp(name, "--system")) o->system = val;
        else if (!strcmp(name, "--chat-template")) o->chat_template = val;
        else if (!strcmp(name, "--logits-out")) o->logits_out = val;
        else if (!strcmp(name, "--grammar")) o->grammar = val;
        else if (!strcmp(name, "--grammar-file")) o->grammar_file = val;
        else if (!strcmp(name, "--json-schema")) o->json_schema = val;
        else if (!strcmp(name, "--kl-divergence-base") || !strcmp(name, "--save-all-logits")) o->kld_base = val;
        else if (!strcmp(name, "--stats")) {
            if (strcmp(val, "json") != 0) {
                fprintf(stderr, "error: --stats: '%s' is not a known format (only 'json')\n", val);
                rc = -1;
            }
            o->stats_json = true;
        } else if (FLAG("-n", "--n-predict")) rc = cli_parse_i32(name, val, -1, &o->n_predict);
        else if (FLAG("-t", "--threads")) rc = cli_parse_i32(name, val, 1, &o->n_threads);
        else if (FLAG("-c", "--ctx-size")) {
            rc = cli_parse_i32(name, val, cmd == GEN_PPL ? 4 : 1, &o->n_ctx);
            o->ctx_set = true;
        }
        else if (FLAG("-b", "--batch-size")) rc = cli_parse_i32(name, val, 1, &o->n_batch);
        else if (!strcmp(name, "--chunks")) rc = cli_parse_i32(name, val, 1, &o->chunks);
        else if (!strcmp(name, "--prefill-device")) o->prefill_device = val;
        else if (cli_mem_flag(name)) rc = cli_mem_parse(name, val, &o->mem);
        else if (!strcmp(name, "--sched")) o->sched = val;
        else if (!strcmp(name, "--act")) rc = cli_parse_act(name, val, &o->act);
        else if (!strcmp(name, "--chunk")) {
            rc = cli_parse_i32(name, val, 1, &o->chunk);
            if (!rc && o->chunk > 65536) {
                fprintf(stderr, "error: --chunk: '%s' is above 65536\n", val);
                rc = -1;
            }
        } else if (!strcmp(name, "--prefill-min-tokens")) {
            /* "auto": by the device's crossing cost and the CPU's measured speed */
            if (!strcmp(val, "auto")) o->prefill_min_tokens = -1;
            else rc = cli_parse_i32(name, val, 1, &o->prefill_min_tokens);
        } else if (!strcmp(name, "--temp")) rc = cli_parse_f32(name, val, -INFINITY, 1e6f, &o->sp.temp);
        else if (!strcmp(name, "--top-k")) rc = cli_parse_i32(name, val, INT32_MIN, &o->sp.top_k);
        else if (!strcmp(name, "--top-p")) rc = cli_parse_f32(name, val, 0.0f, 1.0f, &o->sp.top_p);
        else if (!strcmp(name, "--min-p")) rc = cli_parse_f32(name, val, 0.0f, 1.0f, &o->sp.min_p);
        else if (!strcmp(name, "--repeat-penalty")) rc = cli_parse_f32(name, val, 0.0f, 1e6f, &o->sp.repeat_penalty);
        else if (!strcmp(name, "--repeat-last-n")) rc = cli_parse_i32(name, val, -1, &o->sp.repeat_last_n);
        else if (!strcmp(name, "--presence-penalty"))
            rc = cli_parse_f32(name, val, -1e6f, 1e6f, &o->sp.presence_penalty);
        else if (!strcmp(name, "--seed")) {
            rc = cli_parse_u64(name, val, &o->sp.seed);
            o->seed_set = true;
        }
#undef FLAG
        if (rc < 0) return -1;
    }
    if (o->sp.repeat_penalty == 0.0f) o->sp.repeat_penalty = 1.0f;
    if (o->sched && !(o->prefill_device =
                          cli_device_sched(cmdname, o->prefill_device, o->sched, o->device_buf, sizeof o->device_buf)))
        return -1;

    if (!o->model) {
        fprintf(stderr, "tessera %s: -m MODEL is required (see tessera %s --help)\n", cmdname, cmdname);
        return -1;
    }
    if (cmd == GEN_RUN && !o->prompt == !o->file) {
        fprintf(stderr, "tessera run: give exactly one of -p TEXT or -f FILE\n");
        return -1;
    }
    if (cmd == GEN_PPL && o->kld && !o->kld_base) {
        fprintf(stderr, "tessera perplexity: --kl-divergence compares with the file of --kl-divergence-base FILE: "
                        "give it (written by an earlier run with --kl-divergence-base and no --kl-divergence)\n");
        return -1;
    }
    if (cmd == GEN_PPL && !o->file && !o->kld) {
        fprintf(stderr, "tessera perplexity: -f TEXT_FILE is required\n");
        return -1;
    }
    if (cmd == GEN_RUN && !o->chat && (o->system || o->chat_template)) {
        fprintf(stderr, "tessera run: --system and --chat-template need --chat\n");
        return -1;
    }
    if (o->chat_template) {
        int i = 0;
        while (ts_chat_template_name(i) && strcmp(ts_chat_template_name(i), o->chat_template) != 0) i++;
        if (!ts_chat_template_name(i)) {
            fprintf(stderr, "error: --chat-template: '%s' is not one of", o->chat_template);
            for (i = 0; ts_chat_template_name(i); i++) fprintf(stderr, "%s %s", i ? "," : "", ts_chat_template_name(i));
            fputc('\n', stderr);
            return -1;
        }
    }
    if (!o->seed_set) o->sp.seed = random_seed();
    return 0;
}

/* ---- setup ---- */

int gen_load(gen_opts *o, ts_model **m, ts_context **ctx) {
    ts_error err;
    ts_model_params mp = ts_model_default_params();
    mp.log = cli_log;
    cli_mem_apply(&o->mem, &mp);
    *ctx = NULL;
    if (ts_model_load(o->model, &mp, m, &err) != TS_OK) {
        fprintf(stderr, "error: cannot load model '%s': %s\n", o->model, err.message);
        return -1;
    }
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_threads = o->n_threads;
    cp.sampling = &o->sp;
    cp.chat_template = o->chat_template;
    cp.prefill_device = o->prefill_device;
    cp.activations = o->act;
    if (o->chunk > 0) cp.chunk = o->chunk;
    if (o->prefill_min_tokens != 0) cp.prefill_min_tokens = o->prefill_min_tokens;
    if (ts_context_create(*m, &cp, ctx, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        ts_model_free(*m);
        *m = NULL;
        return -1;
    }
    /* a device that did not open: the one line, and the run goes on on the CPU */
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    if (ts_context_get_stats(*ctx, &st) == TS_OK && st.device_fallback) fprintf(stderr, "%s\n", st.device_fallback);
    return 0;
}

void gen_print_dev_json(FILE *f, const ts_stats *st) {
    fprintf(f,
            ",\"prefill_dev_tokens\":%lld,\"prefill_dev_nodes\":%lld,\"prefill_cpu_tokens\":%lld,"
            "\"dev_upload_mib\":%.3f,\"dev_stall_ms\":%.3f,\"dev_busy_ms\":%.3f,\"graph_builds\":%lld,"
            "\"crossings\":%lld,\"activations\":\"%s\",",
            (long long)st->prefill_dev_tokens, (long long)st->prefill_dev_nodes, (long long)st->prefill_cpu_tokens,
            st->dev_upload_mib, st->dev_stall_ms, st->dev_busy_ms, (long long)st->graph_builds,
            (long long)st->crossings, st->activations == TS_ACTIVATIONS_Q8 ? "q8" : "exact");
    if (st->dev_ooo_chunks)
        fprintf(f, "\"dev_ooo_chunks\":%lld,\"dev_host_wait_ms\":%.3f,", (long long)st->dev_ooo_chunks,
                st->dev_host_wait_ms);
    if (st->dev_outliers || st->dev_outliers_pruned)
        fprintf(f, "\"dev_outliers\":%lld,\"dev_outliers_unprofiled\":%lld,\"dev_outliers_pruned\":%lld,"
                   "\"dev_outlier_ms\":%.3f,",
                (long long)st->dev_outliers, (long long)st->dev_outliers_unprofiled,
                (long long)st->dev_outliers_pruned, st->dev_outlier_ms);
    if (st->stream_layers)
        fprintf(f, "\"stream_layers\":%d,\"stream_loaders\":%d,\"stream_slot_mib\":%.3f,\"stream_read_mib\":%.3f,"
                   "\"stream_fills\":%lld,\"stream_stall_ms\":%.3f,",
                (int)st->stream_layers, (int)st->stream_loaders, st->stream_slot_mib, st->stream_read_mib,
                (long long)st->stream_fills, st->stream_stall_ms);
    if (st->stream_experts_routed)
        fprintf(f, "\"stream_experts_ahead\":%lld,\"stream_experts_demand\":%lld,\"stream_experts_routed\":%lld,"
                   "\"stream_predict_hit_rate\":%.4f,\"stream_whole_layers\":%lld,",
                (long long)st->stream_experts_ahead, (long long)st->stream_experts_demand,
                (long long)st->stream_experts_routed, st->stream_predict_hit_rate, (long long)st->stream_whole_layers);
    if (st->stream_cache_mib > 0)
        fprintf(f, "\"stream_cache_hits\":%lld,\"stream_cache_misses\":%lld,\"stream_cache_mib\":%.1f,",
                (long long)st->stream_cache_hits, (long long)st->stream_cache_misses, st->stream_cache_mib);
    fputs("\"device\":", f);
    if (!st->device) {
        fputs("null", f);
        return;
    }
    cli_json_str(f, st->device);
}
