/* model_tool.c - test helper around the model forward pass, driven by the
 * Python oracle tests (tests/test_tiny_oracle.py, tests/test_real_pinned.py,
 * tools/oracle_real.py).
 *
 *   ts_model_tool logits MODEL OUT.f32 --tokens 1,2,3 [-b N] [-t N] [--decode-from K] [--kv-f32] [-c N]
 *       Writes n_tokens x n_vocab raw f32 logits (one row per position).
 *       --decode-from K: one ts_forward call over the first K tokens
 *       (micro-batched by -b), then one call per remaining token.
 *   ts_model_tool greedy MODEL --tokens 1,2,3 -n N [-b N] [-t N]
 *       Prints "top1: ..." (argmax at every prompt position) and
 *       "greedy: ..." (N greedily generated ids; never stops early).
 *   ts_model_tool tokenize MODEL TEXT      prints the ids (with BOS as the file says)
 *   ts_model_tool info MODEL               prints hyper-parameters, key=value
 * Exit status 0 on success, 1 with the library's message on stderr otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tool_util.h"

static int die(const char *what, const ts_err *e) {
    fprintf(stderr, "ts_model_tool: %s: %s\n", what, e ? e->msg : "");
    return 1;
}


static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ts_model_tool logits|greedy|tokenize|info MODEL [args]\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    const char *out_path = NULL, *tok_arg = NULL, *text = NULL;
    ts_state_params sp = ts_state_default_params();
    int decode_from = -1, n_gen = 0;
    int ai = 3;
    if (!strcmp(mode, "logits")) {
        if (argc < 4) return die("logits needs OUT", NULL);
        out_path = argv[3];
        ai = 4;
    } else if (!strcmp(mode, "tokenize")) {
        if (argc < 4) return die("tokenize needs TEXT", NULL);
        text = argv[3];
        ai = 4;
    }
    for (; ai < argc; ai++) {
        const char *a = argv[ai];
        const char *v = ai + 1 < argc ? argv[ai + 1] : NULL;
        if (!strcmp(a, "--kv-f32")) {
            sp.kv_f32 = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ts_model_tool: option %s needs a value\n", a);
            return 2;
        }
        ai++;
        if (!strcmp(a, "--tokens")) tok_arg = v;
        else if (!strcmp(a, "-b")) sp.n_batch = atoi(v);
        else if (!strcmp(a, "-t")) sp.n_threads = atoi(v);
        else if (!strcmp(a, "-c")) sp.n_ctx = atoi(v);
        else if (!strcmp(a, "-n")) n_gen = atoi(v);
        else if (!strcmp(a, "--decode-from")) decode_from = atoi(v);
        else {
            fprintf(stderr, "ts_model_tool: unknown option %s\n", a);
            return 2;
        }
    }

    ts_err err = {{0}};
    ts_mdl *m = ts_mdl_load(path, NULL, &err);
    if (!m) return die("load", &err);
    const ts_hparams *hp = ts_mdl_hparams(m);
    int rc = 0;

    if (!strcmp(mode, "info")) {
        printf("arch=%s\nn_vocab=%d\nn_ctx_train=%d\nn_embd=%d\nn_layer=%d\nn_head=%d\nn_head_kv=%d\nhead_dim=%d\n"
               "n_ff=%d\nnorm_eps=%g\nrope_type=%s\nrope_freq_base=%g\nrope_freq_base_swa=%g\nrope_freq_scale=%g\n"
               "n_swa=%d\nswa_pattern=%d\nfinal_logit_softcap=%g\nembd_scale=%g\ntied_output=%d\nn_params=%llu\n",
               hp->arch_name, hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
               hp->head_dim, hp->n_ff, hp->norm_eps, hp->rope_type == TS_ROPE_NEOX ? "neox" : "norm",
               hp->rope_freq_base, hp->rope_freq_base_swa, hp->rope_freq_scale, hp->n_swa, hp->swa_pattern,
               hp->final_logit_softcap, hp->embd_scale, hp->tied_output, (unsigned long long)ts_mdl_n_params(m));
        ts_mdl_free(m);
        return 0;
    }
    if (!strcmp(mode, "tokenize")) {
        const ts_tokenizer *tk = ts_mdl_tokenizer(m);
        int64_t cap = (int64_t)strlen(text) + 16;
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        int64_t n = ids ? ts_tokenize(tk, text, strlen(text), true, true, ids, cap, &err) : -1;
        if (n < 0 || n > cap) {
            rc = die("tokenize", &err);
        } else {
            for (int64_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
            printf("\n");
        }
        free(ids);
        ts_mdl_free(m);
        return rc;
    }

    int32_t *toks = NULL, n_tok = 0;
    if (!tok_arg || tool_parse_ids(tok_arg, &toks, &n_tok) || n_tok < 1) {
        ts_mdl_free(m);
        fprintf(stderr, "ts_model_tool: --tokens must list at least one id\n");
        return 2;
    }
    if (sp.n_ctx == 0 && n_tok + n_gen > 4096) sp.n_ctx = n_tok + n_gen;
    ts_state *s = ts_state_new(m, &sp, &err);
    if (!s) {
        free(toks);
        ts_mdl_free(m);
        return die("state", &err);
    }
    const int32_t V = hp->n_vocab;
    float *logits = malloc((size_t)n_tok * (size_t)V * sizeof(float));
    if (!logits) {
        rc = die("out of memory", NULL);
        goto done;
    }

    if (!strcmp(mode, "logits")) {
        int32_t k = decode_from < 0 || decode_from > n_tok ? n_tok : decode_from;
        if (ts_forward(s, toks, k, logits, &err)) {
            rc = die("forward", &err);
            goto done;
        }
        for (int32_t i = k; i < n_tok; i++) {
            if (ts_forward(s, toks + i, 1, logits + (size_t)i * V, &err)) {
                rc = die("forward", &err);
                goto done;
            }
        }
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof(float), (size_t)n_tok * V, f) != (size_t)n_tok * V) {
            if (f) fclose(f);
            rc = die("cannot write output", NULL);
            goto done;
        }
        fclose(f);
    } else if (!strcmp(mode, "greedy")) {
        if (ts_forward(s, toks, n_tok, logits, &err)) {
            rc = die("forward", &err);
            goto done;
        }
        printf("top1:");
        for (int32_t i = 0; i < n_tok; i++) printf(" %d", argmax(logits + (size_t)i * V, V));
        printf("\ngreedy:");
        for (int g = 0; g < n_gen; g++) {
            int32_t next = argmax(ts_state_logits(s), V);
            printf(" %d", next);
            if (g + 1 < n_gen && ts_forward(s, &next, 1, NULL, &err)) {
                rc = die("forward", &err);
                goto done;
            }
        }
        printf("\n");
    } else {
        fprintf(stderr, "ts_model_tool: unknown mode %s\n", mode);
        rc = 2;
    }
done:
    free(logits);
    free(toks);
    ts_state_free(s);
    ts_mdl_free(m);
    return rc;
}
