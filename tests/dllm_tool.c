/* dllm_tool.c - test helper around the bidirectional window forward of the
 * diffusion LLMs (ts_forward_window), driven by tests/test_dllm_oracle.py.
 *
 *   dllm_tool info MODEL
 *       Prints arch, causal, mask_token_id, shift_logits, eos, eot, n_vocab
 *       as key=value lines.
 *   dllm_tool window MODEL OUT.f32 --tokens 1,2,3 --window POS0:N:N_KV[@ids] ...
 *                    [-b N] [-t N] [-c N] [--kv-f32]
 *       Runs one ts_forward_window call per --window, in order, on one
 *       state; a window's tokens are ids after '@' when given, else
 *       tokens[POS0 .. POS0+N) of --tokens. Writes every window's N rows of
 *       n_vocab f32 logits, concatenated, then checks that ts_state_logits
 *       equals the last row and that n_past stayed 0.
 * Exit status 0 on success, 1 with the library's message on stderr otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tool_util.h"

#define MAX_WINDOWS 16

static int die(const char *what, const ts_err *e) {
    fprintf(stderr, "dllm_tool: %s: %s\n", what, e ? e->msg : "");
    return 1;
}

typedef struct {
    int pos0, n, n_kv;
    const char *ids; /* after '@', or NULL */
} window;

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: dllm_tool info|window MODEL [args]\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2], *out_path = NULL, *tok_arg = NULL;
    ts_state_params sp = ts_state_default_params();
    window win[MAX_WINDOWS];
    int n_win = 0, ai = 3;
    if (!strcmp(mode, "window")) {
        if (argc < 4) return die("window needs OUT", NULL);
        out_path = argv[3];
        ai = 4;
    }
    for (; ai < argc; ai++) {
        const char *a = argv[ai], *v = ai + 1 < argc ? argv[ai + 1] : NULL;
        if (!strcmp(a, "--kv-f32")) {
            sp.kv_f32 = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "dllm_tool: option %s needs a value\n", a);
            return 2;
        }
        ai++;
        if (!strcmp(a, "--tokens")) tok_arg = v;
        else if (!strcmp(a, "-b")) sp.n_batch = atoi(v);
        else if (!strcmp(a, "-t")) sp.n_threads = atoi(v);
        else if (!strcmp(a, "-c")) sp.n_ctx = atoi(v);
        else if (!strcmp(a, "--window")) {
            int used = 0;
            if (n_win == MAX_WINDOWS ||
                sscanf(v, "%d:%d:%d%n", &win[n_win].pos0, &win[n_win].n, &win[n_win].n_kv, &used) != 3) {
                fprintf(stderr, "dllm_tool: bad --window '%s' (POS0:N:N_KV[@ids], at most %d)\n", v, MAX_WINDOWS);
                return 2;
            }
            win[n_win].ids = v[used] == '@' ? v + used + 1 : NULL;
            n_win++;
        } else {
            fprintf(stderr, "dllm_tool: unknown option %s\n", a);
            return 2;
        }
    }

    ts_err err = {{0}};
    ts_mdl *m = ts_mdl_load(path, NULL, &err);
    if (!m) return die("load", &err);
    const ts_hparams *hp = ts_mdl_hparams(m);
    if (!strcmp(mode, "info")) {
        const ts_tokenizer *tk = ts_mdl_tokenizer(m);
        printf("arch=%s\ncausal=%d\nmask_token_id=%d\nshift_logits=%d\neos=%d\neot=%d\nn_vocab=%d\nrope_type=%s\n",
               hp->arch_name, hp->causal, hp->mask_token_id, hp->shift_logits, ts_tok_eos(tk), ts_tok_eot(tk),
               hp->n_vocab, hp->rope_type == TS_ROPE_NEOX ? "neox" : "norm");
        ts_mdl_free(m);
        return 0;
    }
    if (strcmp(mode, "window")) {
        ts_mdl_free(m);
        fprintf(stderr, "dllm_tool: unknown mode %s\n", mode);
        return 2;
    }

    int32_t *toks = NULL, n_tok = 0;
    if (tok_arg && tool_parse_ids(tok_arg, &toks, &n_tok)) {
        ts_mdl_free(m);
        fprintf(stderr, "dllm_tool: bad --tokens\n");
        return 2;
    }
    int rc = 0;
    int64_t rows = 0;
    for (int i = 0; i < n_win; i++) rows += win[i].n > 0 ? win[i].n : 0;
    const int32_t V = hp->n_vocab;
    float *logits = malloc((size_t)(rows ? rows : 1) * (size_t)V * sizeof(float));
    ts_state *s = ts_state_new(m, &sp, &err);
    if (!s || !logits) {
        rc = die(s ? "out of memory" : "state", &err);
        goto done;
    }
    int64_t row = 0;
    for (int i = 0; i < n_win; i++) {
        const window *w = &win[i];
        int32_t *ids = NULL, n_ids = 0;
        if (w->ids) {
            if (tool_parse_ids(w->ids, &ids, &n_ids) || n_ids != w->n) {
                free(ids);
                fprintf(stderr, "dllm_tool: window %d: expected %d ids after '@'\n", i, w->n);
                rc = 2;
                goto done;
            }
        } else if (w->pos0 < 0 || w->n < 0 || w->pos0 + w->n > n_tok) {
            fprintf(stderr, "dllm_tool: window %d: [%d, %d) is outside --tokens (%d)\n", i, w->pos0, w->pos0 + w->n,
                    n_tok);
            rc = 2;
            goto done;
        }
        const int32_t *src = ids ? ids : toks + w->pos0;
        int r = ts_forward_window(s, src, w->n, w->pos0, w->n_kv, logits + row * V, &err);
        free(ids);
        if (r) {
            rc = die("forward_window", &err);
            goto done;
        }
        row += w->n;
    }
    if (ts_state_n_past(s) != 0) {
        fprintf(stderr, "dllm_tool: n_past changed to %d by window calls\n", ts_state_n_past(s));
        rc = 1;
        goto done;
    }
    if (rows && memcmp(ts_state_logits(s), logits + (rows - 1) * V, (size_t)V * sizeof(float))) {
        fprintf(stderr, "dllm_tool: ts_state_logits differs from the last window row\n");
        rc = 1;
        goto done;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(logits, sizeof(float), (size_t)rows * V, f) != (size_t)rows * V) {
        if (f) fclose(f);
        rc = die("cannot write output", NULL);
        goto done;
    }
    fclose(f);
done:
    free(logits);
    free(toks);
    ts_state_free(s);
    ts_mdl_free(m);
    return rc;
}
