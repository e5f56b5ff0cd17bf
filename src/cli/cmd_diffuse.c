/* cmd_diffuse.c - `tessera diffuse`: text generation with a diffusion LLM
 * (llada, dream) by iterative unmasking (ts_context_diffuse): the vanilla
 * LLaDA decoder or the block decoder with a prefix / dual / no KV cache.
 * Streams each finished block's text to stdout, then the counters (a stats
 * line, or one JSON object with --stats json) on stderr. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_util.h"

static void help(FILE *f) {
    const ts_diffusion_params d = ts_diffusion_default_params();
    fprintf(f,
            "usage: tessera diffuse -m MODEL.gguf (-p TEXT | -f FILE) [options]\n\n"
            "Generates --gen tokens after the prompt with a diffusion LLM (llada, dream): a canvas of\n"
            "[MASK] tokens is unmasked over several bidirectional forward passes. The text of each\n"
            "finished block is streamed to stdout; generation ends after --gen tokens or after a block\n"
            "holding EOS/EoT (early stop).\n\n"
            "  -m, --model FILE         GGUF diffusion model (required)\n"
            "  -p, --prompt TEXT        prompt text\n"
            "  -f, --file FILE          read the prompt from FILE (instead of -p)\n"
            "  -n, --gen N              tokens to generate (canvas length; default %d)\n"
            "      --decoder NAME       block (default): the prompt's KV computed once, each block denoised by\n"
            "                           forwards over the block only, committing every masked position whose\n"
            "                           confidence >= --threshold (at least the most confident one);\n"
            "                           vanilla: LLaDA's generate(): each step one forward over the whole\n"
            "                           sequence, --steps spread evenly over the blocks, the scheduled number\n"
            "                           of the block's most confident positions committed per step\n"
            "      --block N            block length (default %d)\n"
            "      --steps S            vanilla: total steps (default: --gen, one token per step)\n"
            "      --threshold X        block: commit threshold (default %.2f)\n"
            "      --dual-cache         block: also cache the masked suffix's KV at each block's first step\n"
            "      --no-cache           block: recompute prompt + finished blocks + block every step (exact)\n"
            "      --eps E              vanilla: Dream's timestep schedule linspace(1, E) (e.g. 1e-3)\n"
            "                           instead of LLaDA's even split\n"
            "      --alg NAME           confidence: low_confidence (default; LLaDA), maskgit_plus,\n"
            "                           topk_margin, entropy (Dream's)\n"
            "      --temp T             0 (default): argmax; > 0: Gumbel-max sampling at temperature T\n"
            "      --seed S             noise seed (default %llu)\n"
            "      --no-early-stop      decode every block even after EOS/EoT (the text still ends there)\n"
            "      --window N           block decoder: multi-block speculative decoding with a decoding window\n"
            "                           of N >= --block positions from the commit frontier; future blocks'\n"
            "                           positions are drafts, accepted when their block becomes current if\n"
            "                           they pass --threshold (default 0: off)\n"
            "      --lookahead K|auto|off  with --window: widen the window by K positions once the block has\n"
            "                           <= --lookahead-trigger masked; auto: as far as one layer's width ->\n"
            "                           latency table on the window's device (measured at start) stays within\n"
            "                           --lookahead-slack of the current latency step (on a device that\n"
            "                           requires widths: up to the one width it pads windows to; default off)\n"
            "      --lookahead-trigger N  masked positions left that start the lookahead (default 4)\n"
            "      --lookahead-slack X  auto: extra latency a wider window may cost (default 0.05)\n"
            "      --skip-logits        selective logits skipping: the output projection only for rows that\n"
            "                           predict a position still masked (the block's, the drafts') or,\n"
            "                           with --sts, visible\n"
            "      --sts                block decoder: staged token stabilization: a masked position becomes\n"
            "                           visible (context for later steps, still revisable) at --visible and\n"
            "                           stable at --stable; a block ends when none of it is masked\n"
            "                           (--threshold is not used)\n"
            "      --visible X          with --sts: the visibility threshold (default %.2f; implies --sts)\n"
            "      --stable X           with --sts: the stability threshold (default %.2f; implies --sts)\n"
            "      --scr                with --sts: sparse cache refresh: while each step's forward runs, up to\n"
            "                           --scr-max visible positions of finished blocks are recomputed on the\n"
            "                           CPU (its own KV cache), revised or made stable, and their K/V merged\n"
            "                           at the next step; the text is printed when decoding ends\n"
            "      --scr-max N          positions refreshed per step (default %d)\n"
            "      --chat               wrap the prompt in the model's chat template as one user turn\n"
            "      --system TEXT        system message for --chat\n"
            "      --chat-template NAME chatml|gemma|llama3: override the template family\n"
            "      --no-display-prompt  do not echo the prompt before the generated text\n"
            "      --stats json         print the counters as ONE JSON object on stderr (with the generated\n"
            "                           token ids as \"tokens\"): forwards,\n"
            "                           denoise_forwards, tokens_evaluated, tokens_committed,\n"
            "                           commit_per_forward_hist ([k] = forwards committing k tokens),\n"
            "                           prefill_ms, denoise_ms, early_stop_at (generated index or null),\n"
            "                           n_prompt_tokens, n_gen_tokens, stop_reason, decoder, cache, ...\n"
            "      --prefill-device D   run the layers of wide window forwards on device D (loop, opencl,\n"
            "                           cpu, with options as for tessera run); sampling and commits\n"
            "                           stay on the CPU. In a window smaller than the weights,\n"
            "                           ,place=somr keeps what fits resident and streams the rest\n"
            "                           ahead of use (the swap-optimized memory runtime)\n"
            "      --chunk N            the device's graph width (default 256): windows of at most N tokens\n"
            "                           go to the device; where it requires widths (loop:npu: 32, 64,\n"
            "                           128, 256), narrower ones run padded to the largest <= N\n"
            "      --prefill-min-tokens N  narrower windows stay on the CPU (default 32)\n"
            "  -t, --threads N          worker threads (default: physical cores)\n"
            "  -c, --ctx-size N         KV capacity (default: prompt + --gen, + --chunk with\n"
            "                           --prefill-device: room for a padded last window)\n"
            "  -h, --help               this help\n\n"
            "The context's batch is sized to the largest window the decoder evaluates (one window is\n"
            "one batch). Window forwards run on the CPU unless --prefill-device takes them.\n",
            (int)d.n_gen, (int)d.block, (double)d.threshold, (unsigned long long)d.seed, (double)d.visible,
            (double)d.stable, (int)d.scr_max);
}

typedef struct diff_opts {
    const char *model, *prompt, *file, *system, *chat_template, *prefill_device;
    int32_t chunk, prefill_min_tokens;
    bool chat, stats_json, display_prompt;
    int32_t n_threads, n_ctx;
    ts_diffusion_params dp;
} diff_opts;

/* 0: go on; 1: --help printed; -1: usage error (printed). */
static int parse(int argc, char **argv, diff_opts *o) {
    memset(o, 0, sizeof *o);
    o->dp = ts_diffusion_default_params();
    o->display_prompt = true;
    bool dual = false, none = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 1;
        }
        /* flags without a value */
        if (!strcmp(a, "--dual-cache")) { dual = true; continue; }
        if (!strcmp(a, "--no-cache")) { none = true; continue; }
        if (!strcmp(a, "--chat")) { o->chat = true; continue; }
        if (!strcmp(a, "--no-early-stop")) { o->dp.early_stop = false; continue; }
        if (!strcmp(a, "--skip-logits")) { o->dp.skip_logits = true; continue; }
        if (!strcmp(a, "--sts")) { o->dp.sts = true; continue; }
        if (!strcmp(a, "--scr")) { o->dp.scr = true; continue; }
        if (!strcmp(a, "--no-display-prompt")) { o->display_prompt = false; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: unknown option or missing value: '%s' (see tessera diffuse --help)\n", a);
            return -1;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->file = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--prefill-device")) o->prefill_device = v;
        else if (!strcmp(a, "--chunk")) rc = cli_parse_i32(a, v, 1, &o->chunk);
        else if (!strcmp(a, "--prefill-min-tokens")) rc = cli_parse_i32(a, v, 1, &o->prefill_min_tokens);
        else if (!strcmp(a, "--chat-template")) o->chat_template = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--gen")) rc = cli_parse_i32(a, v, 1, &o->dp.n_gen);
        else if (!strcmp(a, "--block")) rc = cli_parse_i32(a, v, 1, &o->dp.block);
        else if (!strcmp(a, "--steps")) rc = cli_parse_i32(a, v, 1, &o->dp.steps);
        else if (!strcmp(a, "--threshold")) rc = cli_parse_f32(a, v, -1e30f, 1.0f, &o->dp.threshold);
        else if (!strcmp(a, "--eps")) rc = cli_parse_f32(a, v, 0.0f, 0.999999f, &o->dp.eps);
        else if (!strcmp(a, "--temp")) rc = cli_parse_f32(a, v, 0.0f, 1e6f, &o->dp.temp);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) rc = cli_parse_i32(a, v, 1, &o->n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) rc = cli_parse_i32(a, v, 1, &o->n_ctx);
        else if (!strcmp(a, "--seed")) rc = cli_parse_u64(a, v, &o->dp.seed);
        else if (!strcmp(a, "--visible")) rc = cli_parse_f32(a, v, -1e30f, 1.0f, &o->dp.visible), o->dp.sts = true;
        else if (!strcmp(a, "--stable")) rc = cli_parse_f32(a, v, -1e30f, 1.0f, &o->dp.stable), o->dp.sts = true;
        else if (!strcmp(a, "--scr-max")) rc = cli_parse_i32(a, v, 1, &o->dp.scr_max);
        else if (!strcmp(a, "--window")) rc = cli_parse_i32(a, v, 0, &o->dp.window);
        else if (!strcmp(a, "--lookahead-trigger")) rc = cli_parse_i32(a, v, 0, &o->dp.lookahead_trigger);
        else if (!strcmp(a, "--lookahead-slack")) rc = cli_parse_f32(a, v, 0.0f, 100.0f, &o->dp.lookahead_slack);
        else if (!strcmp(a, "--lookahead")) {
            if (!strcmp(v, "auto")) o->dp.lookahead = -1;
            else if (!strcmp(v, "off")) o->dp.lookahead = 0;
            else rc = cli_parse_i32(a, v, 1, &o->dp.lookahead);
        }
        else if (!strcmp(a, "--decoder")) {
            if (!strcmp(v, "block")) o->dp.decoder = TS_DIFFUSION_BLOCK;
            else if (!strcmp(v, "vanilla")) o->dp.decoder = TS_DIFFUSION_VANILLA;
            else {
                fprintf(stderr, "error: --decoder: '%s' is not block or vanilla\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--alg")) {
            static const char *names[] = {"low_confidence", "maskgit_plus", "topk_margin", "entropy"};
            rc = -1;
            for (int k = 0; k < 4; k++)
                if (!strcmp(v, names[k])) {
                    o->dp.alg = (ts_diffusion_alg)k;
                    rc = 0;
                }
            if (rc) fprintf(stderr, "error: --alg: '%s' is not low_confidence, maskgit_plus, topk_margin or entropy\n", v);
        } else if (!strcmp(a, "--stats")) {
            if (strcmp(v, "json")) {
                fprintf(stderr, "error: --stats: only 'json' is supported (got '%s')\n", v);
                rc = -1;
            }
            o->stats_json = true;
        } else {
            fprintf(stderr, "error: unknown option '%s' (see tessera diffuse --help)\n", a);
            rc = -1;
        }
        if (rc) return -1;
    }
    if (!o->model) {
        fprintf(stderr, "error: -m MODEL is required (see tessera diffuse --help)\n");
        return -1;
    }
    if (!!o->prompt == !!o->file) {
        fprintf(stderr, "error: give exactly one of -p TEXT or -f FILE\n");
        return -1;
    }
    if (dual && none) {
        fprintf(stderr, "error: --dual-cache and --no-cache exclude each other\n");
        return -1;
    }
    o->dp.cache = dual ? TS_DIFFUSION_CACHE_DUAL : none ? TS_DIFFUSION_CACHE_NONE : TS_DIFFUSION_CACHE_PREFIX;
    if (o->dp.decoder == TS_DIFFUSION_VANILLA && (dual || none))
        fprintf(stderr, "warning: --dual-cache / --no-cache apply to the block decoder only\n");
    if (o->dp.decoder == TS_DIFFUSION_BLOCK && o->dp.eps > 0.0f)
        fprintf(stderr, "warning: --eps applies to the vanilla decoder only\n");
    return 0;
}

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    (void)token;
    (void)ud;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

static ts_context *make_context(ts_model *m, const diff_opts *o, int32_t n_ctx, int32_t n_batch, bool device) {
    ts_context_params cp = ts_context_default_params();
    if (device) {
        cp.prefill_device = o->prefill_device;
        cp.chunk = o->chunk;
        cp.prefill_min_tokens = o->prefill_min_tokens;
    }
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_threads = o->n_threads;
    cp.decoder = TS_DECODER_DIFFUSION;
    cp.chat_template = o->chat_template;
    ts_context *ctx = NULL;
    ts_error err;
    if (ts_context_create(m, &cp, &ctx, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        return NULL;
    }
    /* a device that did not open: the one line, and the run goes on on the CPU */
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    if (device && ts_context_get_stats(ctx, &st) == TS_OK && st.device_fallback) fprintf(stderr, "%s\n", st.device_fallback);
    return ctx;
}

/* The width a device that requires widths (loop:npu) runs every window at,
 * padded: the largest width it names not above the chunk, else its smallest
 * (the state's rule, src/model/forward.c). 0 where it takes any width, or
 * where the device is not listed (the context says why when it opens). */
static int32_t padded_width(const char *dev, int32_t chunk) {
    const size_t base = strcspn(dev, ",");
    const int32_t n = ts_devices(NULL, 0);
    ts_device_info *d = n > 0 ? calloc((size_t)n, sizeof *d) : NULL;
    if (!d) return 0;
    d[0].struct_size = sizeof *d;
    const int32_t got = ts_devices(d, n);
    int32_t w = 0;
    for (int32_t i = 0; i < got && i < n; i++) {
        if (!d[i].ok || !d[i].widths_required || d[i].n_widths < 1 || strlen(d[i].name) != base ||
            strncmp(d[i].name, dev, base))
            continue;
        int32_t best = d[i].widths[0];
        for (int k = 0; k < d[i].n_widths; k++)
            if (d[i].widths[k] < best) best = d[i].widths[k];
        for (int k = 0; k < d[i].n_widths; k++)
            if (d[i].widths[k] <= chunk && d[i].widths[k] > best) best = d[i].widths[k];
        w = best;
    }
    free(d);
    return w;
}

/* --lookahead auto: one of the model's layers timed on the window's device
 * at widths 8, 16, .. up to `widest` (the table the lookahead reads). The
 * decoder treats a width between two entries as costing the wider one (a
 * matrix engine's stage); on a device whose cost is linear that is off by
 * at most one step of 8 tokens. A device that requires widths runs every
 * window padded to one width: its table is that width alone, so the
 * lookahead widens a window up to it (the padding rows are paid anyway). */
static int latency_table(const ts_model *m, const diff_opts *o, int32_t widest, int32_t *w, double *ms, int cap) {
    ts_layer_shape ls = ts_layer_shape_default();
    cli_layer_shape_of(m, &ls);
    ls.n_threads = o->n_threads;
    ls.reps = 3;
    const char *dev = o->prefill_device ? o->prefill_device : "cpu";
    int n = 0;
    const int32_t pad = padded_width(dev, o->chunk > 0 ? o->chunk : 256);
    if (pad > 0) {
        w[n++] = pad;
    } else {
        for (int32_t x = 8; n < cap && x < widest + 8; x += 8) w[n++] = x;
    }
    if (ls.n_ctx < w[n - 1]) ls.n_ctx = w[n - 1];
    if (pad > 0)
        fprintf(stderr, "diffuse: --lookahead auto: timing one layer (%s) on %s at width %d (it requires widths: "
                        "every window runs padded to it)...\n", ls.weight_type, dev, (int)pad);
    else
        fprintf(stderr, "diffuse: --lookahead auto: timing one layer (%s) on %s at widths 8..%d...\n", ls.weight_type,
                dev, (int)w[n - 1]);
    ts_error err;
    if (ts_device_profile(dev, &ls, w, n, ms, &err) != TS_OK) {
        fprintf(stderr, "error: --lookahead auto: the latency table on %s: %s\n", dev, err.message);
        return -1;
    }
    return n;
}

static void print_stats(const diff_opts *o, const ts_diffusion_stats *s, const ts_stats *cs, const int32_t *ids,
                        int32_t n_ids) {
    static const char *dec[] = {"block", "vanilla"}, *cache[] = {"prefix", "dual", "none"},
                      *alg[] = {"low_confidence", "maskgit_plus", "topk_margin", "entropy"};
    const ts_diffusion_params *p = &o->dp;
    if (!o->stats_json) {
        fprintf(stderr,
                "prompt: %d tokens | generated: %d tokens | forwards: %lld (%lld denoising), %lld positions "
                "evaluated, %.2f committed per denoising forward | prefill %.1f ms, denoise %.1f ms | stop: %s%s\n",
                (int)s->n_prompt_tokens, (int)s->n_gen_tokens, (long long)s->forwards, (long long)s->denoise_forwards,
                (long long)s->tokens_evaluated,
                s->denoise_forwards ? (double)s->tokens_committed / (double)s->denoise_forwards : 0.0, s->prefill_ms,
                s->denoise_ms, ts_stop_reason_name(s->stop_reason), s->early_stop_at >= 0 ? " (early stop)" : "");
        if (p->sts)
            fprintf(stderr, "sts: %lld made visible (%lld by the at-least-one rule), %lld stable, %lld revisions, "
                    "%lld still visible at their block's end\n", (long long)s->sts_visible, (long long)s->sts_forced,
                    (long long)s->sts_stable, (long long)s->revisions, (long long)s->unstable_at_block_end);
        if (p->scr)
            fprintf(stderr, "scr: %lld positions refreshed on the CPU (%.1f ms, %.1f of it beside the forward), %lld "
                    "revised, %lld made stable, %lld rows merged; %lld still visible at the end\n",
                    (long long)s->scr_refreshed, s->scr_ms, s->scr_overlap_ms, (long long)s->scr_revisions,
                    (long long)s->scr_stabilized, (long long)s->scr_merged, (long long)s->visible_at_end);
        if (cs->device)
            fprintf(stderr, "device %s: %lld window forwards (%lld positions, %lld padding rows) ran their layers there\n",
                    cs->device, (long long)s->dev_forwards, (long long)s->dev_tokens, (long long)s->dev_pad_tokens);
        return;
    }
    int last = 0;
    for (int k = 0; k < TS_DIFFUSION_HIST_LEN; k++)
        if (s->commit_per_forward_hist[k]) last = k;
    fprintf(stderr, "{\"forwards\":%lld,\"denoise_forwards\":%lld,\"tokens_evaluated\":%lld,\"tokens_committed\":%lld,"
                    "\"commit_per_forward_hist\":[",
            (long long)s->forwards, (long long)s->denoise_forwards, (long long)s->tokens_evaluated,
            (long long)s->tokens_committed);
    for (int k = 0; k <= last; k++) fprintf(stderr, "%s%lld", k ? "," : "", (long long)s->commit_per_forward_hist[k]);
    fprintf(stderr, "],\"prefill_ms\":%.3f,\"denoise_ms\":%.3f,\"early_stop_at\":", s->prefill_ms, s->denoise_ms);
    if (s->early_stop_at >= 0) fprintf(stderr, "%d", (int)s->early_stop_at);
    else fprintf(stderr, "null");
    fprintf(stderr,
            ",\"n_prompt_tokens\":%d,\"n_gen_tokens\":%d,\"n_blocks\":%d,\"stop_reason\":\"%s\",\"decoder\":\"%s\","
            "\"cache\":\"%s\",\"alg\":\"%s\",\"gen\":%d,\"block\":%d,\"steps\":%d,\"threshold\":%g,\"eps\":%g,"
            "\"temp\":%g,\"seed\":%llu,\"n_threads\":%d,\"n_ctx\":%d,\"n_batch\":%d,\"peak_rss_mib\":%.1f,"
            "\"dev_forwards\":%lld,\"dev_tokens\":%lld,\"dev_pad_tokens\":%lld,\"window\":%d,\"lookahead\":%d,\"lookahead_trigger\":%d,"
            "\"window_max\":%lld,\"draft_evals\":%lld,\"draft_accepted\":%lld,\"lookahead_tokens\":%lld,"
            "\"skip_logits\":%s,\"logits_skipped\":%lld,\"sts\":%s,\"visible\":%g,\"stable\":%g,"
            "\"sts_visible\":%lld,\"sts_forced\":%lld,\"sts_stable\":%lld,\"revisions\":%lld,"
            "\"unstable_at_block_end\":%lld,\"visible_at_end\":%lld,\"scr\":%s,\"scr_max\":%d,"
            "\"scr_refreshed\":%lld,\"scr_revisions\":%lld,\"scr_stabilized\":%lld,\"scr_merged\":%lld,"
            "\"scr_ms\":%.3f,\"scr_overlap_ms\":%.3f,\"dev_upload_mib\":%.3f,\"dev_stall_ms\":%.3f,"
            "\"dev_resident_layers\":%d,\"dev_streamed_layers\":%d,\"latency_table\":[",
            (int)s->n_prompt_tokens, (int)s->n_gen_tokens, (int)s->n_blocks, ts_stop_reason_name(s->stop_reason),
            dec[p->decoder == TS_DIFFUSION_VANILLA], cache[p->cache % 3], alg[p->alg % 4], (int)p->n_gen,
            (int)p->block, (int)(p->steps > 0 ? p->steps : p->n_gen), (double)p->threshold, (double)p->eps,
            (double)p->temp, (unsigned long long)p->seed, (int)cs->n_threads, (int)cs->n_ctx, (int)cs->n_batch,
            cs->peak_rss_mib, (long long)s->dev_forwards, (long long)s->dev_tokens, (long long)s->dev_pad_tokens, (int)p->window, (int)p->lookahead,
            (int)p->lookahead_trigger, (long long)s->window_max, (long long)s->draft_evals,
            (long long)s->draft_accepted, (long long)s->lookahead_tokens, p->skip_logits ? "true" : "false",
            (long long)s->logits_skipped, p->sts ? "true" : "false", (double)p->visible, (double)p->stable,
            (long long)s->sts_visible, (long long)s->sts_forced, (long long)s->sts_stable, (long long)s->revisions,
            (long long)s->unstable_at_block_end, (long long)s->visible_at_end, p->scr ? "true" : "false",
            (int)p->scr_max, (long long)s->scr_refreshed, (long long)s->scr_revisions, (long long)s->scr_stabilized,
            (long long)s->scr_merged, s->scr_ms, s->scr_overlap_ms, (double)s->dev_upload_bytes / 1048576.0,
            s->dev_stall_ms, (int)s->dev_resident_layers, (int)s->dev_streamed_layers);
    for (int32_t i = 0; i < p->n_latency; i++)
        fprintf(stderr, "%s[%d,%.4f]", i ? "," : "", (int)p->latency_widths[i], p->latency_ms[i]);
    fputs("],\"tokens\":[", stderr);
    for (int32_t i = 0; i < n_ids; i++) fprintf(stderr, "%s%d", i ? "," : "", (int)ids[i]);
    fputs("],\"device\":", stderr);
    /* the device that ran window forwards */
    if (cs->device) cli_json_str(stderr, cs->device);
    else fputs("null", stderr);
    fputs("}\n", stderr);
}

int cli_diffuse(int argc, char **argv) {
    diff_opts o;
    int prc = parse(argc, argv, &o);
    if (prc != 0) return prc > 0 ? 0 : 2;

    int status = 1;
    char *file_text = NULL, *rendered = NULL;
    int32_t *ids = NULL, *gen_ids = NULL;
    ts_model *m = NULL;
    ts_context *ctx = NULL;
    size_t text_len = 0;
    const char *text = o.prompt;
    if (o.file) {
        if (!(file_text = cli_read_file(o.file, &text_len))) goto done;
        text = file_text;
    } else {
        text_len = strlen(text);
    }
    ts_error err;
    ts_model_params mp = ts_model_default_params();
    mp.log = cli_log;
    if (ts_model_load(o.model, &mp, &m, &err) != TS_OK) {
        fprintf(stderr, "error: cannot load model '%s': %s\n", o.model, err.message);
        goto done;
    }
    if (o.chat) { /* a small context only to render the template */
        ts_context *tc = make_context(m, &o, 8, 1, false);
        if (!tc) goto done;
        ts_chat_message msgs[2];
        size_t nm = 0;
        if (o.system) msgs[nm++] = (ts_chat_message){"system", o.system};
        msgs[nm++] = (ts_chat_message){"user", text};
        ts_status cst = ts_context_chat_format(tc, msgs, nm, true, &rendered, &text_len);
        if (cst != TS_OK) fprintf(stderr, "error: %s\n", ts_last_error(tc));
        ts_context_free(tc);
        if (cst != TS_OK) goto done;
        text = rendered;
    }
    int64_t n_prompt = 0;
    if (!(ids = cli_tokenize_text(m, text, text_len, true, true, &n_prompt))) goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "error: the prompt is empty (0 tokens)\n");
        goto done;
    }
    if (n_prompt > INT32_MAX / 4) {
        fprintf(stderr, "error: the prompt is too long (%lld tokens)\n", (long long)n_prompt);
        goto done;
    }
    int32_t lat_w[64];
    double lat_ms[64];
    int n_lat = 0;
    if (o.dp.lookahead == -1 && o.dp.window > 0) {
        /* the table reaches twice the window */
        n_lat = latency_table(m, &o, o.dp.block + 2 * o.dp.window, lat_w, lat_ms, 64);
        if (n_lat < 0) goto done;
        o.dp.latency_widths = lat_w, o.dp.latency_ms = lat_ms, o.dp.n_latency = n_lat;
    }
    /* one window is one batch: size the batch to the decoder's largest window
     * (an auto lookahead needs its table first; when the model or the
     * parameters are wrong, ts_context_diffuse says why) */
    int32_t n_batch = ts_diffusion_n_batch(m, &o.dp, (int32_t)n_prompt);
    if (n_batch < 1) n_batch = 1;
    if (n_lat > 0 && n_batch < lat_w[n_lat - 1] && n_batch < n_prompt + o.dp.n_gen + 1) {
        /* the batch grows to the table's widest */
        n_batch = lat_w[n_lat - 1] < n_prompt + o.dp.n_gen + 1 ? lat_w[n_lat - 1] : (int32_t)(n_prompt + o.dp.n_gen + 1);
        if (n_batch < (int32_t)n_prompt) n_batch = (int32_t)n_prompt;
    }
    /* a device that requires widths pads a window narrower than the chunk
     * to it, into cache rows past the window: room for the last one */
    int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : n_prompt + o.dp.n_gen + (o.prefill_device ? (o.chunk > 0 ? o.chunk : 256) : 0);
    if (n_ctx > (1 << 24)) n_ctx = 1 << 24;
    if (!(ctx = make_context(m, &o, (int32_t)n_ctx, n_batch, true))) goto done;
    if (o.display_prompt) {
        fwrite(text, 1, text_len, stdout);
        fflush(stdout);
    }
    o.dp.on_token = on_token;
    ts_diffusion_stats ds = TS_STRUCT_INIT(ts_diffusion_stats);
    gen_ids = malloc((size_t)o.dp.n_gen * sizeof *gen_ids);
    int32_t n_gen_ids = 0;
    ts_status st = TS_ERR_NO_MEMORY;
    if (gen_ids) st = ts_context_diffuse(ctx, ids, (int32_t)n_prompt, &o.dp, gen_ids, o.dp.n_gen, &n_gen_ids, &ds);
    fputc('\n', stdout);
    fflush(stdout);
    if (st != TS_OK) {
        fprintf(stderr, "error: %s\n", gen_ids ? ts_last_error(ctx) : "out of memory");
        goto done;
    }
    ts_stats cs = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(ctx, &cs);
    print_stats(&o, &ds, &cs, gen_ids, n_gen_ids < o.dp.n_gen ? n_gen_ids : o.dp.n_gen);
    status = 0;
done:
    free(ids);
    free(gen_ids);
    ts_free(rendered);
    free(file_text);
    ts_context_free(ctx);
    ts_model_free(m);
    return status;
}
