/* model.c - the public ts_model: loading (full or vocab_only), model info and
 * the tokenizer calls. A loaded model is never written again, so every call
 * here is safe from any number of threads. */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

ts_model_params ts_model_default_params(void) {
    ts_model_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.use_mmap = true;
    return p;
}

/* NUL-terminated copy of an optional string key ("" when absent). */
static char *copy_str_key(const ts_gguf *g, const char *key) {
    ts_gguf_str s = {"", 0};
    if (ts_gguf_opt_str(g, key, &s, NULL) != 1) s = (ts_gguf_str){"", 0};
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = '\0';
    }
    return c;
}

ts_status ts_model_load(const char *path, const ts_model_params *params, ts_model **out, ts_error *err) {
    ts_model_params p = ts_model_default_params();
    ts_logger lg = {NULL, NULL};
    if (out) *out = NULL;
    if (params) {
        lg = (ts_logger){params->log, params->log_user_data};
        ts_status st = ts_params_in(&p, sizeof p, params, "ts_model_params", err, &lg);
        if (st != TS_OK) return st;
    }
    if (!path) return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "ts_model_load: path is NULL");
    if (!out) return ts_api_fail(err, &lg, TS_ERR_INVALID_ARG, "ts_model_load: out is NULL");

    ts_model *m = calloc(1, sizeof *m);
    if (!m) return ts_api_fail(err, &lg, TS_ERR_NO_MEMORY, "out of memory");
    m->log = lg;
    if (p.prefill_device && !(m->prefill_device = strdup(p.prefill_device))) {
        free(m);
        return ts_api_fail(err, &lg, TS_ERR_NO_MEMORY, "out of memory");
    }
    ts_err e = {{0}};
    const ts_gguf *g;
    if (p.vocab_only) {
        /* the tokenizer and metadata only: works on vocabulary-only files too */
        if (!(m->gguf_own = ts_gguf_open(path, &e))) goto fail;
        if (!(m->tok_own = ts_tokenizer_load(m->gguf_own, &e))) {
            ts_err_prefix(&e, "%s: tokenizer", path);
            goto fail;
        }
        g = m->gguf_own;
        m->tok = m->tok_own;
        ts_gguf_str ct;
        if (ts_gguf_opt_str(g, "tokenizer.chat_template", &ct, NULL) == 1) {
            if (!(m->chat_own = malloc(ct.len + 1))) {
                ts_err_set(&e, "out of memory");
                goto fail;
            }
            memcpy(m->chat_own, ct.ptr, ct.len);
            m->chat_own[ct.len] = '\0';
            m->chat_jinja = m->chat_own;
        }
    } else {
        ts_mdl_params mp = ts_mdl_default_params();
        mp.use_mmap = p.use_mmap;
        mp.mem_budget = p.mem_budget;
        mp.n_loaders = p.n_loaders;
        mp.stream_opts = p.stream_options;
        if (!(m->mdl = ts_mdl_load(path, &mp, &e))) goto fail;
        if (ts_mdl_stream_note(m->mdl)) ts_api_log(&lg, TS_LOG_INFO, "%s", ts_mdl_stream_note(m->mdl));
        g = ts_mdl_gguf(m->mdl);
        m->tok = ts_mdl_tokenizer(m->mdl);
        m->chat_jinja = ts_mdl_chat_template(m->mdl);
    }
    m->file = (ts_file){(ts_gguf *)g, false};
    m->arch = copy_str_key(g, "general.architecture");
    m->name = copy_str_key(g, "general.name");
    if (!m->arch || !m->name) {
        ts_err_set(&e, "out of memory");
        goto fail;
    }
    if (m->mdl) {
        const ts_hparams *hp = ts_mdl_hparams(m->mdl);
        ts_api_log(&lg, TS_LOG_INFO, "loaded %s: %s, %d layers, n_embd %d, %llu parameters, %.1f MiB", path,
                   hp->arch_name, (int)hp->n_layer, (int)hp->n_embd, (unsigned long long)ts_mdl_n_params(m->mdl),
                   (double)ts_mdl_size_bytes(m->mdl) / (1024.0 * 1024.0));
    } else {
        ts_api_log(&lg, TS_LOG_INFO, "loaded the vocabulary of %s: %d tokens", path, (int)ts_tok_n_vocab(m->tok));
    }
    *out = m;
    return ts_api_ok(err);
fail:;
    ts_status st = ts_api_load_status(path, e.msg);
    ts_model_free(m);
    return ts_api_fail(err, &lg, st, "%s", e.msg);
}

void ts_model_free(ts_model *m) {
    if (!m) return;
    ts_mdl_free(m->mdl);
    ts_tokenizer_free(m->tok_own);
    ts_gguf_close(m->gguf_own);
    free(m->chat_own);
    free(m->arch);
    free(m->name);
    free(m->prefill_device);
    free(m);
}

ts_status ts_model_get_info(const ts_model *m, ts_model_info *out) {
    if (!m || !out) return TS_ERR_INVALID_ARG;
    ts_model_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    i.arch = m->arch;
    i.name = m->name;
    i.n_vocab = ts_tok_n_vocab(m->tok);
    if (m->mdl) {
        const ts_hparams *hp = ts_mdl_hparams(m->mdl);
        i.n_vocab = hp->n_vocab;
        i.n_ctx_train = hp->n_ctx_train;
        i.n_embd = hp->n_embd;
        i.n_layer = hp->n_layer;
        i.n_head = hp->n_head;
        i.n_head_kv = hp->n_head_kv;
        i.n_ff = hp->n_ff;
    }
    const ts_gguf *g = m->file.g;
    for (int64_t t = 0; t < ts_gguf_n_tensors(g); t++) {
        i.size_bytes += ts_gguf_tensor_at(g, t)->nbytes;
        i.n_params += (uint64_t)ts_gguf_tensor_at(g, t)->n_elements;
    }
    i.token_bos = ts_tok_bos(m->tok);
    i.token_eos = ts_tok_eos(m->tok);
    i.token_eot = ts_tok_eot(m->tok);
    i.add_bos = ts_tok_add_bos(m->tok);
    i.add_eos = ts_tok_add_eos(m->tok);
    i.max_token_bytes = ts_tok_max_piece(m->tok);
    enum ts_chat_family f = ts_chat_detect(m->chat_jinja);
    i.chat_template = f == TS_CHAT_NONE ? NULL : ts_chat_family_name(f);
    return ts_struct_out(out, &i, sizeof i);
}

const ts_file *ts_model_file(const ts_model *m) { return m ? &m->file : NULL; }

ts_status ts_model_tokenize(const ts_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                            int32_t *tokens, int64_t cap, int64_t *n_tokens, ts_error *err) {
    if (n_tokens) *n_tokens = 0;
    if (!m || !n_tokens || (!text && len) || cap < 0 || (!tokens && cap))
        return ts_api_fail(err, m ? &m->log : NULL, TS_ERR_INVALID_ARG,
                           "ts_model_tokenize: %s", !m ? "model is NULL" : !n_tokens ? "n_tokens is NULL"
                                                    : (!text && len)        ? "text is NULL"
                                                    : cap < 0               ? "cap is negative"
                                                                            : "tokens is NULL with cap > 0");
    ts_err e = {{0}};
    int64_t n = ts_tokenize(m->tok, text ? text : "", len, add_special, parse_special, tokens, cap, &e);
    if (n < 0)
        return ts_api_fail(err, &m->log, strstr(e.msg, "out of memory") ? TS_ERR_NO_MEMORY : TS_ERR_INVALID_ARG,
                           "tokenize: %s", e.msg);
    *n_tokens = n;
    return ts_api_ok(err);
}

ts_status ts_model_detokenize(const ts_model *m, const int32_t *tokens, int64_t n, bool render_special, char *buf,
                              size_t cap, size_t *len, ts_error *err) {
    if (len) *len = 0;
    if (!m || !len || n < 0 || (!tokens && n) || (!buf && cap))
        return ts_api_fail(err, m ? &m->log : NULL, TS_ERR_INVALID_ARG, "ts_model_detokenize: bad arguments%s",
                           !m ? " (model is NULL)" : !len ? " (len is NULL)" : "");
    int64_t r = ts_detokenize(m->tok, tokens, n, render_special, buf, cap);
    if (r < 0) {
        int32_t nv = ts_tok_n_vocab(m->tok);
        for (int64_t i = 0; i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= nv)
                return ts_api_fail(err, &m->log, TS_ERR_INVALID_ARG,
                                   "detokenize: token %d at index %lld is outside the vocabulary [0, %d)",
                                   (int)tokens[i], (long long)i, (int)nv);
        return ts_api_fail(err, &m->log, TS_ERR_INTERNAL, "detokenize failed");
    }
    *len = (size_t)r;
    return ts_api_ok(err);
}

ts_status ts_model_token_piece(const ts_model *m, int32_t token, bool render_special, char *buf, size_t cap,
                               size_t *len, ts_error *err) {
    if (len) *len = 0;
    if (!m || !len || (!buf && cap))
        return ts_api_fail(err, m ? &m->log : NULL, TS_ERR_INVALID_ARG, "ts_model_token_piece: bad arguments");
    int64_t r = ts_token_piece(m->tok, token, render_special, buf, cap);
    if (r < 0)
        return ts_api_fail(err, &m->log, TS_ERR_INVALID_ARG, "token %d is outside the vocabulary [0, %d)",
                           (int)token, (int)ts_tok_n_vocab(m->tok));
    if (buf && (uint64_t)r < cap) buf[r] = '\0';
    *len = (size_t)r;
    return ts_api_ok(err);
}

bool ts_model_token_is_eog(const ts_model *m, int32_t token) {
    if (!m || token < 0 || token >= ts_tok_n_vocab(m->tok)) return false;
    return ts_tok_is_eog(m->tok, token);
}
