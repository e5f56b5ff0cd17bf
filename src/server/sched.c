/* sched.c - the generation side of the server: a FIFO queue of jobs and
 * --parallel slots, each a worker thread owning one ts_context (its own KV
 * cache). A queued job goes to the idle slot whose cached tokens share the
 * longest prefix with its prompt; the slot cuts its KV cache back to that
 * prefix (ts_context_kv_truncate) and evaluates only the rest, so a chat
 * that resends its history pays only for the new turn.
 *
 * A diffusion LLM's job runs ts_context_diffuse instead (run_diffusion):
 * the decoder starts from an empty KV cache, so there is no prefix reuse,
 * and its slots' contexts are created with n_batch = n_ctx, since a window
 * (up to the whole canvas) is evaluated in one batch.
 *
 * Locking: srv->mu guards the queue, slot assignment and the slots' cache
 * lists while idle; job->mu guards a job's progress. Order: srv->mu before
 * job->mu. A job has two owners (HTTP side, scheduler) counted in refs. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

tsrv_job *tsrv_job_new(void) {
    tsrv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->slot = -1;
    j->n_choices = 1;
    j->sp = ts_sampling_default_params();
    return j;
}

static void job_free(tsrv_job *j) {
    free(j->prompt);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->grammar);
    json_decref(j->tools);
    free(j->input_len), free(j->embd);
    for (int i = 0; i < TSRV_MAX_CHOICES; i++)
        free(j->choices[i].text), free(j->choices[i].lp), json_decref(j->choices[i].tool_calls);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void tsrv_job_release(tsrv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

/* Marks a job finished (job->mu held) and wakes its HTTP side. */
static void job_finish_locked(tsrv_job *j, const char *finish) {
    j->state = TSRV_DONE;
    j->finish = finish;
    for (int i = 0; i < j->n_choices; i++) /* nothing more can complete a stop string */
        if (!j->choices[i].stop_hit && !j->choices[i].finish) j->choices[i].visible = j->choices[i].len;
    pthread_cond_broadcast(&j->cv);
}

/* Tools: where the visible text must stop while a <tool_call> block may be
 * coming (its start, or a partial "<tool_call>" at the end, and the
 * whitespace before either). */
/* Length of the longest proper prefix of s[0..sl) that ends t[0..n)
 * (text that the next token may complete into s). */
static size_t prefix_at_end(const char *t, size_t n, const char *s, size_t sl) {
    for (size_t l = sl - 1 < n ? sl - 1 : n; l > 0; l--)
        if (!memcmp(t + n - l, s, l)) return l;
    return 0;
}

static size_t tool_hold(const tsrv_choice *ch) {
    const size_t n = ch->len, m = strlen(tsrv_tool_open);
    const char *tc = ch->text ? memmem(ch->text, n, tsrv_tool_open, m) : NULL;
    size_t cap = tc ? (size_t)(tc - ch->text) : n - prefix_at_end(ch->text, n, tsrv_tool_open, m);
    while (cap > 0 && strchr(" \n\t\r", ch->text[cap - 1])) cap--;
    /* a reply that starts as a JSON object or a code fence may be a bare call: all held */
    size_t a = 0;
    while (a < cap && strchr(" \n\t\r", ch->text[a])) a++;
    if (a < cap && (ch->text[a] == '{' || ch->text[a] == '`')) return 0;
    return cap;
}

/* A choice is done (job->mu held): with tools, its calls are parsed and the
 * content is the text before them, or all of it when they do not parse. */
static void choice_done_locked(tsrv_job *j, tsrv_choice *ch, const char *finish) {
    ch->finish = finish;
    if (!ch->stop_hit) ch->visible = ch->len; /* nothing more can complete a stop string */
    if (j->tools_parse && !ch->stop_hit) {
        char idp[48];
        snprintf(idp, sizeof idp, "call_%llu_%d", (unsigned long long)j->id, (int)(ch - j->choices));
        ch->visible = tsrv_tools_parse_reply(j->tools, ch->text ? ch->text : "", ch->len, &ch->tool_calls, idp);
        if (ch->tool_calls) ch->finish = "tool_calls";
    }
    pthread_cond_broadcast(&j->cv);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Hands queued jobs to idle slots (srv->mu held). */
static void dispatch_locked(tsrv_server *s) {
    while (s->queue_head) {
        tsrv_slot *best = NULL;
        int32_t best_lcp = -1;
        tsrv_job *j = s->queue_head;
        for (int i = 0; i < s->n_slots; i++) {
            tsrv_slot *sl = &s->slots[i];
            if (sl->job) continue;
            int32_t l = common_prefix(sl->cache, sl->n_cache, j->prompt, j->n_prompt);
            if (l > best_lcp) best_lcp = l, best = sl;
        }
        if (!best) return;
        s->queue_head = j->next;
        if (!s->queue_head) s->queue_tail = NULL;
        j->next = NULL;
        s->queue_len--;
        pthread_mutex_lock(&j->mu);
        j->state = TSRV_RUNNING;
        j->slot = best->index;
        pthread_mutex_unlock(&j->mu);
        best->job = j;
        s->busy++;
        pthread_cond_signal(&best->wake);
    }
}

int tsrv_submit(tsrv_server *s, tsrv_job *j, tsrv_error *e) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return tsrv_fail(e, 503, TSRV_E_OVERLOADED, NULL, "the server is shutting down");
    }
    if (s->queue_len >= s->cfg.max_queue && s->busy == s->n_slots) {
        int q = s->queue_len;
        pthread_mutex_unlock(&s->mu);
        return tsrv_fail(e, 503, TSRV_E_OVERLOADED, NULL,
                         "the server is busy: %d requests are already waiting (--max-queue); retry later", q);
    }
    j->id = ++s->next_id;
    j->refs++; /* the scheduler's reference; no other thread sees j yet */
    j->state = TSRV_QUEUED;
    if (s->queue_tail) s->queue_tail->next = j;
    else s->queue_head = j;
    s->queue_tail = j;
    s->queue_len++;
    dispatch_locked(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void tsrv_job_cancel(tsrv_server *s, tsrv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (j->state == TSRV_QUEUED) { /* still waiting: unlink it */
        tsrv_job **pp = &s->queue_head, *prev = NULL;
        while (*pp && *pp != j) prev = *pp, pp = &(*pp)->next;
        if (*pp) {
            *pp = j->next;
            if (s->queue_tail == j) s->queue_tail = prev;
            j->next = NULL;
            s->queue_len--;
            pthread_mutex_lock(&j->mu);
            j->cancel = true;
            job_finish_locked(j, "cancelled");
            pthread_mutex_unlock(&j->mu);
            pthread_mutex_unlock(&s->mu);
            tsrv_job_release(j); /* the scheduler's reference */
            return;
        }
    }
    pthread_mutex_lock(&j->mu);
    if (j->state == TSRV_RUNNING && !j->cancel) {
        j->cancel = true;
        /* Stops the prompt evaluation too; a cancel that lands after the
         * slot's call returned is dropped by the library when the next call
         * starts, so it cannot hit the slot's next job. */
        ts_context_cancel(s->slots[j->slot].ctx);
    }
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&s->mu);
}

void tsrv_sched_counts(tsrv_server *s, int *queued, int *busy) {
    pthread_mutex_lock(&s->mu);
    *queued = s->queue_len;
    *busy = s->busy;
    pthread_mutex_unlock(&s->mu);
}

/* ---- running one job on a slot ---- */

typedef struct run_state {
    tsrv_slot *slot;
    tsrv_job *job;
    const float *logits; /* what the next token is sampled from (logprobs) */
    int32_t n_vocab;
} run_state;

/* e: the log-softmax of the raw logits at token, and the top n there (in
 * descending order; ties by the lower id). */
static void token_logprob(const float *logits, int32_t n_vocab, int32_t token, int n_top, tsrv_logprob *e) {
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    e->token = token;
    e->logprob = (float)(logits[token] - lse);
    int k = 0; /* insertion into a sorted list of at most n_top */
    for (int32_t i = 0; i < n_vocab && n_top > 0; i++) {
        const float v = logits[i];
        if (k == n_top && v <= logits[e->top_id[k - 1]]) continue;
        int p = k < n_top ? k++ : k - 1;
        while (p > 0 && logits[e->top_id[p - 1]] < v) {
            e->top_id[p] = e->top_id[p - 1];
            p--;
        }
        e->top_id[p] = i;
    }
    for (int i = 0; i < k; i++) e->top_lp[i] = (float)(logits[e->top_id[i]] - lse);
}

static bool on_logits(const float *logits, int32_t n_vocab, void *ud) {
    run_state *rs = ud;
    rs->logits = logits;
    rs->n_vocab = n_vocab;
    return true;
}

/* Longest suffix of t[0..n) that is a proper prefix of a stop string: text
 * that must be held back because the next token may complete the stop. */
static size_t held_suffix(const tsrv_job *j, const char *t, size_t n) {
    size_t best = 0;
    for (int k = 0; k < j->n_stops; k++) {
        size_t l = prefix_at_end(t, n, j->stops[k], j->stop_len[k]);
        if (l > best) best = l;
    }
    return best;
}

static bool on_token(const char *piece, size_t len, int32_t token, void *ud) {
    run_state *rs = ud;
    tsrv_slot *sl = rs->slot;
    tsrv_job *j = rs->job;
    if (token >= 0 && sl->n_cache < sl->n_ctx) sl->cache[sl->n_cache++] = token; /* evaluated next */
    tsrv_logprob lp;
    const bool want_lp = j->logprobs && token >= 0 && rs->logits; /* fixed once queued */
    if (want_lp) token_logprob(rs->logits, rs->n_vocab, token, j->top_logprobs, &lp);
    pthread_mutex_lock(&j->mu);
    if (j->cancel) {
        pthread_mutex_unlock(&j->mu);
        return false;
    }
    tsrv_choice *ch = &j->choices[j->cur];
    if (token >= 0) j->n_gen++, ch->n_gen++;
    bool oom = false;
    if (ch->len + len + 1 > ch->cap) {
        size_t nc = ch->cap ? ch->cap : 256;
        while (nc < ch->len + len + 1) nc *= 2;
        char *nt = realloc(ch->text, nc);
        if (nt) ch->text = nt, ch->cap = nc;
        else oom = true;
    }
    if (want_lp && !oom && ch->n_lp == ch->cap_lp) {
        size_t nc = ch->cap_lp ? 2 * ch->cap_lp : 64;
        tsrv_logprob *nl = realloc(ch->lp, nc * sizeof *nl);
        if (nl) ch->lp = nl, ch->cap_lp = nc;
        else oom = true;
    }
    if (oom) {
        snprintf(j->errmsg, sizeof j->errmsg, "out of memory while collecting the reply");
        j->cancel = true;
        pthread_mutex_unlock(&j->mu);
        return false;
    }
    size_t old = ch->len;
    if (want_lp) {
        lp.offset = old;
        ch->lp[ch->n_lp++] = lp;
    }
    memcpy(ch->text + ch->len, piece, len);
    ch->len += len;
    ch->text[ch->len] = '\0';
    /* earliest stop string that ends in the new bytes */
    size_t cut = SIZE_MAX;
    for (int k = 0; k < j->n_stops; k++) {
        size_t sl_ = j->stop_len[k];
        size_t from = old >= sl_ - 1 ? old - (sl_ - 1) : 0;
        for (size_t p = from; p + sl_ <= ch->len && p < cut; p++)
            if (!memcmp(ch->text + p, j->stops[k], sl_)) {
                cut = p;
                break;
            }
    }
    bool go_on = true;
    if (cut != SIZE_MAX) {
        ch->len = cut;
        ch->text[cut] = '\0';
        ch->visible = cut;
        ch->stop_hit = true;
        /* the tokens of the stop string are not reported (their text is not) */
        while (ch->n_lp > 0 && ch->lp[ch->n_lp - 1].offset >= cut) ch->n_lp--;
        go_on = false;
    } else {
        size_t v = ch->len - held_suffix(j, ch->text, ch->len);
        if (j->tools_parse) {
            size_t h = tool_hold(ch);
            if (v > h) v = h;
        }
        if (v > ch->visible) ch->visible = v;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return go_on;
}

/* A diffusion job: the whole canvas decoded by ts_context_diffuse, each
 * finished block's text handed to on_token (stop strings and a departed
 * client end it there). The decoder empties the KV cache first, so the
 * slot keeps no ids for prefix reuse. */
static const char *run_diffusion(tsrv_slot *sl, tsrv_job *j) {
    ts_context *ctx = sl->ctx;
    run_state rs = {.slot = sl, .job = j};
    const char *finish = "error";
    for (int c = 0; c < j->n_choices; c++) {
        ts_diffusion_params dp = j->dp;
        dp.seed = j->dp.seed + (uint64_t)c; /* choice c: seed + c, as for autoregressive models */
        dp.on_token = on_token;
        dp.user_data = &rs;
        ts_diffusion_stats ds = TS_STRUCT_INIT(ts_diffusion_stats);
        sl->n_cache = 0;
        pthread_mutex_lock(&j->mu);
        j->cur = c;
        pthread_mutex_unlock(&j->mu);
        ts_status st = ts_context_diffuse(ctx, j->prompt, j->n_prompt, &dp, NULL, 0, NULL, &ds);
        sl->n_cache = 0; /* on_token recorded the reply's ids; the cache holds no usable prefix */
        pthread_mutex_lock(&j->mu);
        tsrv_choice *ch = &j->choices[c];
        if (c == 0) j->ds = ds;
        else {
            j->ds.forwards += ds.forwards;
            j->ds.denoise_forwards += ds.denoise_forwards;
            j->ds.tokens_evaluated += ds.tokens_evaluated;
        }
        j->n_cached = 0;
        j->n_evaluated += j->n_prompt;
        j->prefill_ms += ds.prefill_ms;
        j->decode_ms += ds.denoise_ms;
        bool stop_hit = ch->stop_hit, was_cancelled = j->cancel;
        if (st != TS_OK && !j->errmsg[0])
            snprintf(j->errmsg, sizeof j->errmsg, "diffusion decoding failed: %s", ts_last_error(ctx));
        if (st == TS_OK && !was_cancelled) {
            if (stop_hit || ds.stop_reason == TS_STOP_EOS) choice_done_locked(j, ch, "stop"); /* early stop */
            else if (ds.stop_reason == TS_STOP_LENGTH) choice_done_locked(j, ch, "length");  /* the whole canvas */
        }
        pthread_mutex_unlock(&j->mu);
        if (st != TS_OK) {
            tsrv_log("slot %d: job %llu: %s", sl->index, (unsigned long long)j->id, j->errmsg);
            return "error";
        }
        if (was_cancelled) return "cancelled";
        if (!ch->finish) return ds.stop_reason == TS_STOP_CANCELLED ? "cancelled" : "error";
        finish = ch->finish;
    }
    return finish;
}

/* Runs a job on its slot; returns its finish ("stop", "length", "cancelled",
 * "error"). The caller marks it done once the slot is idle again, so that a
 * client's next request already finds this slot (and its cached prefix). */
static const char *run_job(tsrv_slot *sl, tsrv_job *j) {
    ts_context *ctx = sl->ctx;
    const char *finish = "error";
    pthread_mutex_lock(&j->mu);
    bool cancelled = j->cancel;
    pthread_mutex_unlock(&j->mu);
    if (cancelled) {
        finish = "cancelled";
        goto done;
    }
    if (j->diffusion) return run_diffusion(sl, j);
    if (j->kind == TSRV_EMBED) { /* each input from an empty cache: the slot keeps no prefix */
        const int32_t E = sl->srv->info.n_embd;
        double t0 = tsrv_now_ms();
        int32_t at = 0;
        sl->n_cache = 0;
        for (int i = 0; i < j->n_inputs; i++) {
            ts_status st = ts_context_embed(ctx, j->prompt + at, j->input_len[i], j->pooling, true,
                                            j->embd + (size_t)i * (size_t)E);
            if (st == TS_ERR_CANCELLED) {
                finish = "cancelled";
                goto embed_done;
            }
            if (st != TS_OK) goto fail;
            at += j->input_len[i];
        }
        finish = "stop";
    embed_done:
        ts_context_reset(ctx);
        pthread_mutex_lock(&j->mu);
        j->n_evaluated = at;
        j->prefill_ms = tsrv_now_ms() - t0;
        pthread_mutex_unlock(&j->mu);
        return finish;
    }
    if (ts_context_set_sampling(ctx, &j->sp) != TS_OK) goto fail;
    /* the job's grammar (or none: a previous job's is removed) */
    if (ts_context_set_grammar(ctx, j->grammar, NULL) != TS_OK) goto fail;

    /* Reuse the cached prefix; at least one prompt token is evaluated so
     * there are logits to sample from. */
    int32_t lcp = common_prefix(sl->cache, sl->n_cache, j->prompt, j->n_prompt);
    if (lcp >= j->n_prompt) lcp = j->n_prompt - 1;
    int32_t n_past = ts_context_n_past(ctx);
    if (lcp > n_past) lcp = n_past;
    if (ts_context_kv_truncate(ctx, lcp) != TS_OK) {
        if (ts_context_reset(ctx) != TS_OK) goto fail;
        lcp = 0;
    }
    sl->n_cache = lcp;
    double t0 = tsrv_now_ms();
    ts_status st = ts_context_eval(ctx, j->prompt + lcp, j->n_prompt - lcp, NULL);
    double t1 = tsrv_now_ms();
    /* what stayed cached (all of it, or the micro-batches done before a cancel) */
    int32_t np = ts_context_n_past(ctx);
    sl->n_cache = np <= j->n_prompt ? np : j->n_prompt;
    memcpy(sl->cache, j->prompt, (size_t)sl->n_cache * sizeof *sl->cache);
    pthread_mutex_lock(&j->mu);
    j->n_cached = lcp;
    j->n_evaluated = j->n_prompt - lcp;
    j->prefill_ms = t1 - t0;
    pthread_mutex_unlock(&j->mu);
    if (st == TS_ERR_CANCELLED) {
        finish = "cancelled";
        goto done;
    }
    if (st != TS_OK) goto fail;

    /* The choices one after another: each from the prompt's KV cache (the
     * prompt's last token evaluated again for its logits), choice c with
     * seed + c, so choice 0 is what n = 1 gives. */
    run_state rs = {.slot = sl, .job = j, .n_vocab = sl->srv->info.n_vocab};
    for (int c = 0; c < j->n_choices; c++) {
        if (c > 0) {
            ts_sampling_params sp = j->sp;
            sp.seed = j->sp.seed + (uint64_t)c;
            if (ts_context_set_sampling(ctx, &sp) != TS_OK) goto fail;
            if (ts_context_n_past(ctx) < j->n_prompt - 1 || ts_context_kv_truncate(ctx, j->n_prompt - 1) != TS_OK)
                goto fail;
            sl->n_cache = j->n_prompt - 1; /* the id list starts with the prompt */
            double r0 = tsrv_now_ms();
            st = ts_context_eval(ctx, j->prompt + j->n_prompt - 1, 1, NULL);
            double r1 = tsrv_now_ms();
            if (st == TS_ERR_CANCELLED) {
                finish = "cancelled";
                goto done;
            }
            if (st != TS_OK) goto fail;
            sl->n_cache = j->n_prompt;
            pthread_mutex_lock(&j->mu);
            j->cur = c;
            j->decode_ms += r1 - r0;
            pthread_mutex_unlock(&j->mu);
        }
        rs.logits = ts_context_logits(ctx);
        ts_generate_params gp = ts_generate_default_params();
        gp.n_predict = j->max_tokens;
        gp.stop_at_end_of_turn = true;
        /* the cache then holds the whole last reply: the next turn reuses it */
        gp.eval_last = c == j->n_choices - 1;
        gp.on_token = on_token;
        gp.on_logits = j->logprobs ? on_logits : NULL;
        gp.user_data = &rs;
        st = ts_context_generate(ctx, &gp);
        ts_stats stats = TS_STRUCT_INIT(ts_stats);
        ts_context_get_stats(ctx, &stats);
        tsrv_metrics_stream(&sl->srv->metrics, sl->index, &stats);
        /* Keep the id list equal to the KV cache: the last sampled token, or an
         * end-of-generation token, may or may not have been evaluated. */
        np = ts_context_n_past(ctx);
        if (np < sl->n_cache) sl->n_cache = np;
        else if (np > sl->n_cache && ts_context_kv_truncate(ctx, sl->n_cache) != TS_OK) sl->n_cache = 0;
        if (sl->n_cache == 0) ts_context_reset(ctx);
        pthread_mutex_lock(&j->mu);
        j->decode_ms += stats.decode_ms;
        j->grammar_checks += stats.grammar_checks;
        j->grammar_masks += stats.grammar_masks;
        j->grammar_ms += stats.grammar_ms;
        j->n_dev_tokens = stats.prefill_dev_tokens;
        tsrv_choice *ch = &j->choices[c];
        bool stop_hit = ch->stop_hit, was_cancelled = j->cancel;
        if (st == TS_OK && !stop_hit && !was_cancelled) {
            if (stats.stop_reason == TS_STOP_EOS) choice_done_locked(j, ch, "stop");
            else if (stats.stop_reason == TS_STOP_LENGTH || stats.stop_reason == TS_STOP_CONTEXT_FULL)
                choice_done_locked(j, ch, "length");
        } else if (stop_hit) {
            choice_done_locked(j, ch, "stop");
        }
        pthread_mutex_unlock(&j->mu);
        if (st != TS_OK) goto fail;
        if (was_cancelled || (stats.stop_reason == TS_STOP_CANCELLED && !stop_hit)) {
            finish = "cancelled";
            goto done;
        }
        if (!ch->finish) goto fail;
        finish = ch->finish;
    }
    goto done;

fail:
    pthread_mutex_lock(&j->mu);
    if (!j->errmsg[0]) snprintf(j->errmsg, sizeof j->errmsg, "generation failed: %s", ts_last_error(ctx));
    pthread_mutex_unlock(&j->mu);
    tsrv_log("slot %d: job %llu: %s", sl->index, (unsigned long long)j->id, j->errmsg);
    ts_context_reset(ctx);
    sl->n_cache = 0;
    finish = "error";
done:
    return finish;
}

static void *slot_main(void *arg) {
    tsrv_slot *sl = arg;
    tsrv_server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!sl->job && !s->stopping) pthread_cond_wait(&sl->wake, &s->mu);
        if (!sl->job) break; /* stopping and idle */
        tsrv_job *j = sl->job;
        pthread_mutex_unlock(&s->mu);
        const char *finish = run_job(sl, j);
        if (strcmp(finish, "error") && strcmp(finish, "cancelled")) tsrv_metrics_generation(&s->metrics, j);
        pthread_mutex_lock(&s->mu);
        sl->job = NULL;
        s->busy--;
        pthread_mutex_lock(&j->mu);
        job_finish_locked(j, finish);
        pthread_mutex_unlock(&j->mu);
        if (!s->stopping) dispatch_locked(s);
        pthread_mutex_unlock(&s->mu);
        tsrv_job_release(j);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void srv_log_cb(ts_log_level level, const char *msg, void *ud) {
    const tsrv_server *s = ud;
    if (level >= TS_LOG_WARN || s->cfg.verbose)
        tsrv_log("%s: %s", level >= TS_LOG_ERROR ? "error" : level == TS_LOG_WARN ? "warning" : "info", msg);
}

int tsrv_sched_start(tsrv_server *s, tsrv_error *e) {
    s->slots = calloc((size_t)s->cfg.parallel, sizeof *s->slots);
    if (!s->slots) return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = s->cfg.n_ctx;
    cp.n_threads = s->cfg.n_threads;
    cp.chat_template = s->cfg.chat_template;
    cp.prefill_device = s->cfg.prefill_device;
    cp.activations = s->cfg.activations;
    cp.log = srv_log_cb;
    cp.log_user_data = s;
    if (s->diffusion) {
        /* One window is one batch and the largest window a request may ask
         * for is its whole canvas (vanilla / no cache: prompt + max_tokens
         * <= n_ctx), so the batch is the context: sized once here rather
         * than recreating a context per request (a KV cache allocation and
         * thread start each time, and a failure mid-serving). The library
         * caps n_batch at n_ctx, which the default n_ctx needs. Window
         * forwards run on the CPU: no prefill device. */
        cp.decoder = TS_DECODER_DIFFUSION;
        cp.n_batch = s->cfg.n_ctx > 0 ? s->cfg.n_ctx : INT32_MAX;
        cp.prefill_device = NULL;
    }
    for (int i = 0; i < s->cfg.parallel; i++) {
        tsrv_slot *sl = &s->slots[i];
        sl->srv = s;
        sl->index = i;
        pthread_cond_init(&sl->wake, NULL);
        s->n_slots = i + 1;
        ts_error err;
        if (ts_context_create(s->model, &cp, &sl->ctx, &err) != TS_OK)
            return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "slot %d: %s", i, err.message);
        sl->n_ctx = ts_context_n_ctx(sl->ctx);
        if (s->diffusion && ts_context_n_batch(sl->ctx) < sl->n_ctx)
            return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "slot %d: n_batch %d is below n_ctx %d", i,
                             (int)ts_context_n_batch(sl->ctx), (int)sl->n_ctx);
        if (!(sl->cache = malloc((size_t)sl->n_ctx * sizeof *sl->cache)))
            return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "out of memory");
    }
    s->n_ctx = s->slots[0].n_ctx;
    s->n_batch = ts_context_n_batch(s->slots[0].ctx);
    ts_stats st = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(s->slots[0].ctx, &st);
    s->engine_prefill = s->engine_decode = st.engine ? st.engine : "cpu";
    /* A device that does not open leaves the context on the CPU with a
     * fallback line; otherwise prefill chunks run there. */
    if (s->cfg.prefill_device && s->diffusion) {
        snprintf(s->device_fallback, sizeof s->device_fallback,
                 "the server runs a diffusion model's window forwards on the CPU: --prefill-device does not "
                 "apply here (tessera diffuse takes it)");
    } else if (s->cfg.prefill_device) {
        if (st.device_fallback) {
            snprintf(s->device_fallback, sizeof s->device_fallback, "%s", st.device_fallback);
        } else {
            snprintf(s->prefill_device, sizeof s->prefill_device, "%s", st.device ? st.device : s->cfg.prefill_device);
            s->engine_prefill = s->prefill_device;
        }
    }
    /* the slots share one device session: its setup figures, once they all exist */
    ts_stats last = TS_STRUCT_INIT(ts_stats);
    ts_context_get_stats(s->slots[s->n_slots - 1].ctx, &last);
    s->dev_upload_mib = last.dev_upload_mib;
    s->dev_weight_mib = last.dev_weight_mib;
    s->dev_window_peak_mib = (double)last.dev_window_peak / 1048576.0;
    s->dev_sharing = last.dev_sharing;
    for (int i = 0; i < s->n_slots; i++) {
        tsrv_slot *sl = &s->slots[i];
        int rc = pthread_create(&sl->thread, NULL, slot_main, sl);
        if (rc) return tsrv_fail(e, 500, TSRV_E_INTERNAL, NULL, "slot %d: cannot start a thread: %s", i, strerror(rc));
        sl->thread_started = true;
    }
    return 0;
}

void tsrv_sched_stop(tsrv_server *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    while (s->queue_head) { /* waiting jobs end as cancelled */
        tsrv_job *j = s->queue_head;
        s->queue_head = j->next;
        j->next = NULL;
        pthread_mutex_lock(&j->mu);
        j->cancel = true;
        snprintf(j->errmsg, sizeof j->errmsg, "the server is shutting down");
        job_finish_locked(j, "error");
        pthread_mutex_unlock(&j->mu);
        tsrv_job_release(j);
    }
    s->queue_tail = NULL;
    s->queue_len = 0;
    for (int i = 0; i < s->n_slots; i++) {
        tsrv_slot *sl = &s->slots[i];
        if (sl->job) {
            pthread_mutex_lock(&sl->job->mu);
            sl->job->cancel = true;
            ts_context_cancel(sl->ctx);
            pthread_mutex_unlock(&sl->job->mu);
        }
        pthread_cond_signal(&sl->wake);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_slots; i++) {
        tsrv_slot *sl = &s->slots[i];
        if (sl->thread_started) pthread_join(sl->thread, NULL);
        ts_context_free(sl->ctx);
        free(sl->cache);
        pthread_cond_destroy(&sl->wake);
    }
    free(s->slots);
    s->slots = NULL;
    s->n_slots = 0;
}
