/* constrain.c - a context's grammar (ts_context_set_grammar): the compiled
 * GBNF, its matcher, every token's text, and the masked copy of the logits.
 *
 * Each step samples from the model's logits first and asks the matcher
 * whether that token can continue the text (a walk over its few bytes).
 * Only when it cannot is every token checked and the rest masked to -inf,
 * then the token sampled again. Without truncation (top-k, top-p, min-p)
 * the result is distributed exactly as sampling from the masked logits:
 * P(t) = p(t) + (1 - p(A)) p(t) / p(A) = p(t) / p(A) for t in the allowed
 * set A; with truncation the retry truncates the masked logits, which is
 * close to but not exactly the same. Greedy decoding is exact either way.
 * The full check (all n_vocab tokens) thus runs only at the steps that need
 * it: where the grammar leaves the model little choice, which is also where
 * most tokens fail on their first byte (the matcher's first-byte table
 * rejects those without a walk). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "core/clock.h"

struct ts_constraint {
    ts_grammar *g;
    ts_gmatch *m;
    char *bytes;       /* every token's text, back to back */
    int64_t *off;      /* [n_vocab + 1] */
    float *masked;     /* [n_vocab] */
    int32_t n_vocab;
};

void ts_constraint_free(ts_constraint *k) {
    if (!k) return;
    ts_gmatch_free(k->m);
    ts_grammar_free(k->g);
    free(k->bytes), free(k->off), free(k->masked);
    free(k);
}

/* The text of each token as generation emits it; control tokens get none
 * (they are never allowed, except end-of-generation at the end). */
static int build_pieces(ts_constraint *k, const ts_tokenizer *tok, ts_err *err) {
    const int32_t nv = k->n_vocab;
    int64_t total = 0, cap = 8 * (int64_t)nv;
    char buf[512];
    if (!(k->off = malloc(((size_t)nv + 1) * sizeof *k->off)) || !(k->bytes = malloc((size_t)cap))) goto oom;
    for (int32_t id = 0; id < nv; id++) {
        int64_t n = ts_tok_is_special(tok, id) ? 0 : ts_token_piece(tok, id, false, buf, sizeof buf);
        if (n < 0 || n > (int64_t)sizeof buf) n = 0; /* longer than any real token: never allowed */
        if (total + n > cap) {
            char *nb = realloc(k->bytes, (size_t)(cap *= 2));
            if (!nb) goto oom;
            k->bytes = nb;
        }
        memcpy(k->bytes + total, buf, (size_t)n);
        k->off[id] = total;
        total += n;
    }
    k->off[nv] = total;
    return 0;
oom:
    ts_err_set(err, "out of memory building the grammar's token table");
    return -1;
}

int ts_constraint_set(ts_constraint **kp, const ts_tokenizer *tok, const char *gbnf, const char *root, ts_err *err) {
    ts_constraint *k = *kp;
    if (!gbnf) { /* off; the token table stays for the next grammar */
        if (k) {
            ts_gmatch_free(k->m), ts_grammar_free(k->g);
            k->m = NULL, k->g = NULL;
        }
        return 0;
    }
    ts_grammar *g = ts_grammar_compile(gbnf, strlen(gbnf), root, err);
    ts_gmatch *m = g ? ts_gmatch_new(g, err) : NULL;
    if (!m) {
        ts_grammar_free(g);
        return -1;
    }
    if (!k) { /* the token table, built once per context */
        if (!(k = calloc(1, sizeof *k))) goto oom;
        k->n_vocab = ts_tok_n_vocab(tok);
        if (build_pieces(k, tok, err) < 0 || !(k->masked = malloc((size_t)k->n_vocab * sizeof *k->masked))) {
            ts_constraint_free(k);
            goto oom;
        }
        *kp = k;
    }
    ts_gmatch_free(k->m), ts_grammar_free(k->g);
    k->g = g, k->m = m;
    return 0;
oom:
    ts_gmatch_free(m), ts_grammar_free(g);
    ts_err_set(err, "out of memory building the grammar's token table");
    return -1;
}

bool ts_constraint_active(const ts_constraint *k) { return k && k->g; }

void ts_constraint_reset(ts_constraint *k) { ts_gmatch_reset(k->m); }
bool ts_constraint_overflow(const ts_constraint *k) { return ts_gmatch_overflow(k->m); }
bool ts_constraint_done(const ts_constraint *k) { return ts_gmatch_done(k->m); }

/* Whether id may come next; eog: it ends generation (allowed once the text
 * is a complete match). */
static bool allowed(ts_constraint *k, int32_t id, bool eog) {
    if (eog) return ts_gmatch_can_end(k->m);
    const int64_t a = k->off[id], n = k->off[id + 1] - a;
    return n > 0 && ts_gmatch_check(k->m, k->bytes + a, (size_t)n);
}

int32_t ts_constraint_sample(ts_constraint *k, ts_sampler *smpl, const float *logits, const ts_tokenizer *tok,
                             int32_t stop_id, ts_constraint_counts *cnt) {
    const double t0 = ts_now_ms();
    int32_t id = ts_sampler_sample(smpl, logits);
    cnt->checks++;
    if (id >= 0 && id < k->n_vocab && allowed(k, id, ts_tok_is_eog(tok, id) || id == stop_id)) {
        cnt->ms += ts_now_ms() - t0;
        return id;
    }
    /* mask every token the grammar refuses, then draw again */
    uint8_t first[256];
    ts_gmatch_first_bytes(k->m, first);
    int64_t n_ok = 0;
    for (int32_t t = 0; t < k->n_vocab; t++) {
        const bool eog = ts_tok_is_eog(tok, t) || t == stop_id;
        const int64_t a = k->off[t];
        bool ok;
        if (eog) ok = ts_gmatch_can_end(k->m);
        else ok = k->off[t + 1] > a && first[(unsigned char)k->bytes[a]] && allowed(k, t, false);
        k->masked[t] = ok ? logits[t] : -INFINITY;
        n_ok += ok;
    }
    cnt->masks++;
    if (n_ok == 0) {
        cnt->ms += ts_now_ms() - t0;
        return -1;
    }
    id = ts_sampler_sample(smpl, k->masked);
    cnt->ms += ts_now_ms() - t0;
    return id;
}

bool ts_constraint_accept(ts_constraint *k, int32_t id) {
    const int64_t a = k->off[id], n = k->off[id + 1] - a;
    return n > 0 && ts_gmatch_accept(k->m, k->bytes + a, (size_t)n);
}
