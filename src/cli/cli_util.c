/* cli_util.c - helpers shared by the subcommands (see cli_util.h). */
#include "cli_util.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

char *cli_read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf || ferror(f)) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = cli_read_stream(f, len);
    fclose(f);
    if (!buf) fprintf(stderr, "error: cannot read '%s'\n", path);
    return buf;
}

size_t cli_utf8_len(const unsigned char *s, size_t n, uint32_t *cpo) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
        if (cpo) *cpo = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    if (cpo) *cpo = cp;
    return len;
}

void cli_log(ts_log_level level, const char *msg, void *user_data) {
    (void)user_data;
    if (level == TS_LOG_WARN) fprintf(stderr, "warning: %s\n", msg);
}

int32_t *cli_tokenize_text(const ts_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                      int64_t *n) {
    ts_error err;
    int64_t cap = (int64_t)len + 8;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *ids = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "error: out of memory tokenizing %zu bytes\n", len);
            return NULL;
        }
        int64_t got = 0;
        if (ts_model_tokenize(m, text, len, add_special, parse_special, ids, cap, &got, &err) != TS_OK) {
            fprintf(stderr, "error: %s\n", err.message);
            free(ids);
            return NULL;
        }
        if (got <= cap) {
            *n = got;
            return ids;
        }
        free(ids);
        cap = got;
    }
    fprintf(stderr, "error: the tokenizer returned an inconsistent count\n");
    return NULL;
}

/* ---- option values ---- */

int cli_parse_i32(const char *flag, const char *s, int32_t lo, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > INT32_MAX) {
        fprintf(stderr, "error: %s: '%s' is not an integer >= %d\n", flag, s, (int)lo);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "error: %s: '%s' is not a number in [%g, %g]\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') errno = ERANGE;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) {
        fprintf(stderr, "error: %s: '%s' is not an unsigned integer\n", flag, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_size(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    double mul = 1.0;
    if (end != s && *end) {
        const char u = (char)(*end | 0x20);
        mul = u == 'k' ? 1024.0 : u == 'm' ? 1048576.0 : u == 'g' ? 1073741824.0 : 0.0;
        const char *rest = end + 1;
        if (mul != 0.0 && (!strcmp(rest, "") || !strcmp(rest, "iB") || !strcmp(rest, "B") || !strcmp(rest, "ib")))
            end += strlen(end);
    }
    if (errno || end == s || *end || !(v >= 0.0) || v * mul >= 1.8e19) {
        fprintf(stderr, "error: %s: '%s' is not a size (a number with an optional K, M or G: 300M, 1.5G)\n", flag, s);
        return -1;
    }
    *out = (uint64_t)(v * mul);
    return 0;
}

bool cli_mem_flag(const char *name) {
    return !strcmp(name, "--mem-budget") || !strcmp(name, "--loaders") || !strcmp(name, "--stream-opts") ||
           !strcmp(name, "--cache-mb") || !strcmp(name, "--prefill-routed-full");
}

int cli_parse_act(const char *flag, const char *val, ts_activations *out) {
    if (!strcmp(val, "exact")) *out = TS_ACTIVATIONS_EXACT;
    else if (!strcmp(val, "q8")) *out = TS_ACTIVATIONS_Q8;
    else {
        fprintf(stderr, "error: %s: '%s' is not a mode (exact or q8)\n", flag, val);
        return -1;
    }
    return 0;
}

int cli_mem_parse(const char *name, const char *val, cli_mem_opts *o) {
    if (!strcmp(name, "--mem-budget")) {
        if (cli_parse_size(name, val, &o->mem_budget)) return -1;
        if (o->mem_budget == 0) {
            fprintf(stderr, "error: --mem-budget: '%s' is zero (leave the flag out to keep every weight in memory)\n", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(name, "--loaders")) {
        if (cli_parse_i32(name, val, 1, &o->n_loaders)) return -1;
        if (o->n_loaders > 64) {
            fprintf(stderr, "error: --loaders: '%s' is above 64\n", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(name, "--cache-mb")) return cli_parse_i32(name, val, 0, &o->cache_mb);
    if (!strcmp(name, "--prefill-routed-full")) return cli_parse_f32(name, val, 0.0f, 1.0f, &o->routed_full);
    o->stream_opts = val;
    return 0;
}

void cli_mem_apply(cli_mem_opts *o, ts_model_params *mp) {
    mp->mem_budget = o->mem_budget;
    mp->n_loaders = o->n_loaders;
    mp->stream_options = cli_mem_stream_opts(o);
}

const char *cli_mem_stream_opts(cli_mem_opts *o) {
    if (o->cache_mb < 0 && !o->no_routed && o->routed_full < 0.0f) return o->stream_opts;
    int n = 0;
    if (o->cache_mb >= 0) n += snprintf(o->buf + n, sizeof o->buf - (size_t)n, "cache_mb=%d,", (int)o->cache_mb);
    if (o->no_routed) n += snprintf(o->buf + n, sizeof o->buf - (size_t)n, "routed=0,");
    if (o->routed_full >= 0.0f)
        n += snprintf(o->buf + n, sizeof o->buf - (size_t)n, "routed_full=%g,", (double)o->routed_full);
    if (o->stream_opts) snprintf(o->buf + n, sizeof o->buf - (size_t)n, "%s", o->stream_opts);
    else o->buf[n - 1] = 0; /* the trailing comma */
    return o->buf;
}

/* ---- JSON output ---- */

void cli_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void cli_layer_shape_of(const ts_model *m, ts_layer_shape *ls) {
    ts_model_info mi = TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(m, &mi);
    ls->n_embd = mi.n_embd, ls->n_head = mi.n_head, ls->n_head_kv = mi.n_head_kv, ls->n_ff = mi.n_ff;
    ls->head_dim = mi.n_head ? mi.n_embd / mi.n_head : 0;
    ls->qkv_bias = !strcmp(mi.arch, "qwen2");
    ls->weight_type = "Q4_0";
    const ts_file *f = ts_model_file(m);
    ts_file_info fi = TS_STRUCT_INIT(ts_file_info);
    if (!f || ts_file_get_info(f, &fi) != TS_OK) return;
    for (int64_t i = 0; i < fi.n_tensors; i++) {
        ts_tensor_info ti = TS_STRUCT_INIT(ts_tensor_info);
        if (ts_file_tensor(f, i, &ti) == TS_OK && !strcmp(ti.name, "blk.0.ffn_up.weight")) {
            ls->weight_type = ti.type_name;
            return;
        }
    }
}

/* -log softmax(row)[target], in double. */
static double token_nll(const float *row, int32_t n_vocab, int32_t target) {
    float mx = row[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (row[i] > mx) mx = row[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)row[i] - mx);
    return -(((double)row[target] - mx) - log(sum));
}

int cli_score_window(ts_context *ctx, const int32_t *ids, int32_t n_ctx, int32_t bos, int32_t n_vocab, int32_t n_batch,
                     int32_t *win, float *rows, cli_ppl_acc *acc) {
    const int32_t first = n_ctx / 2;
    memcpy(win, ids, (size_t)n_ctx * sizeof *win);
    if (bos >= 0) win[0] = bos;
    ts_context_kv_truncate(ctx, 0);
    for (int32_t b = 0; b < n_ctx; b += n_batch) {
        int32_t nb = n_ctx - b < n_batch ? n_ctx - b : n_batch;
        bool need = b + nb > first; /* any logits at positions >= first in this batch */
        if (ts_context_eval(ctx, win + b, nb, need ? rows : NULL) != TS_OK) {
            fprintf(stderr, "\nerror: evaluation failed: %s\n", ts_last_error(ctx));
            return -1;
        }
        if (!need) continue;
        for (int32_t j = 0; j < nb; j++) {
            int32_t pos = b + j;
            if (pos < first || pos >= n_ctx - 1) continue;
            /* targets are the file's tokens (position 0's BOS swap never is one) */
            int32_t target = ids[pos + 1];
            if (target < 0 || target >= n_vocab) {
                fprintf(stderr, "\nerror: token id %d is outside the logits (%d)\n", (int)target, (int)n_vocab);
                return -1;
            }
            double v = token_nll(rows + (size_t)j * n_vocab, n_vocab, target);
            acc->nll += v;
            acc->nll2 += v * v;
            acc->count++;
            if (acc->row && acc->row(acc->row_u, rows + (size_t)j * n_vocab, target)) return -1;
        }
    }
    return 0;
}

const char *cli_device_sched(const char *cmd, const char *dev, const char *sched, char *buf, size_t n) {
    if (!sched) return dev;
    if (strcmp(sched, "inorder") && strcmp(sched, "ooo")) {
        fprintf(stderr, "tessera %s: --sched: '%s' is not a schedule (inorder or ooo)\n", cmd, sched);
        return NULL;
    }
    if (!dev || !strcmp(dev, "none")) {
        fprintf(stderr, "tessera %s: --sched schedules prefill on a device: give --prefill-device too\n", cmd);
        return NULL;
    }
    const int len = snprintf(buf, n, "%s,sched=%s", dev, sched);
    if (len < 0 || (size_t)len >= n) {
        fprintf(stderr, "tessera %s: --prefill-device '%s' is too long\n", cmd, dev);
        return NULL;
    }
    return buf;
}
