/* server.c - `tessera serve`: loads the model, starts the generation slots
 * (sched.c) and a libmicrohttpd daemon (one thread per connection, so a
 * handler may block while its request waits for a slot or streams), routes
 * requests, checks the API key and body size, and shuts down cleanly on
 * SIGINT/SIGTERM. Generation requests become jobs (request.c); their answers
 * are written by respond.c, streamed ones through a content-reader callback
 * that waits for new text. A client that disconnects cancels its job. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "srv.h"

tsrv_config tsrv_default_config(void) {
    return (tsrv_config){
        .host = "127.0.0.1", .port = 8080, .parallel = 1, .max_body = 1 << 20, .max_queue = 64};
}

double tsrv_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void tsrv_log(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "[%02d:%02d:%02d.%03ld] %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, line);
}

int tsrv_fail(tsrv_error *e, int http_status, tsrv_err_kind kind, const char *param, const char *fmt, ...) {
    e->http_status = http_status;
    e->kind = kind;
    e->type = http_status == 401   ? "authentication_error"
              : http_status == 404 ? "not_found_error"
              : http_status >= 500 ? "server_error"
                                   : "invalid_request_error";
    e->code = tsrv_err_kind_name(kind);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- per-request state ---- */

typedef struct conn_state {
    int endpoint;
    char method[8];
    char path[64];   /* printable copy for the log */
    tsrv_buf body;
    bool responded;  /* an early answer (401/404/405/413) is queued: drop the body */
    bool too_big;    /* the body went past --max-body: 413 once it has been read */
    size_t discarded;
    double t0;
} conn_state;

static void printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; *src && i + 1 < cap; src++) dst[i++] = (*src >= 0x20 && *src < 0x7f) ? *src : '?';
    dst[i] = '\0';
}

static enum MHD_Result send_body(tsrv_server *s, struct MHD_Connection *c, conn_state *cs, int status,
                                 const char *type, char *body, bool owned) {
    struct MHD_Response *r;
    if (!body) { /* out of memory while building it */
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":\"internal\"}}";
        status = 500;
        type = "application/json";
        r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        if (owned) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405)
        MHD_add_response_header(r, "Allow",
                                cs->endpoint == TSRV_EP_CHAT || cs->endpoint == TSRV_EP_COMPLETIONS ||
                                        cs->endpoint == TSRV_EP_TOKENIZE || cs->endpoint == TSRV_EP_DETOKENIZE ||
                                        cs->endpoint == TSRV_EP_APPLY_TEMPLATE || cs->endpoint == TSRV_EP_EMBEDDINGS
                                    ? "POST"
                                    : "GET");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cs->responded = true;
    tsrv_metrics_request(&s->metrics, cs->endpoint, status);
    if (status >= 400)
        tsrv_log("%s %s %d %.0f ms", cs->method, cs->path, status, tsrv_now_ms() - cs->t0);
    return rc;
}

static enum MHD_Result send_error(tsrv_server *s, struct MHD_Connection *c, conn_state *cs, const tsrv_error *e) {
    tsrv_metrics_error(&s->metrics, e->kind);
    tsrv_log("error %d (%s): %s", e->http_status, tsrv_err_kind_name(e->kind), e->message);
    return send_body(s, c, cs, e->http_status, "application/json", tsrv_error_json(e), true);
}

/* True when the client has closed its end (orderly or reset). */
static bool peer_closed(int fd) {
    if (fd < 0) return false;
    char ch;
    ssize_t r = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return true;
    return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Waits on the job's condition for up to ms (job->mu held). */
static void job_wait(tsrv_job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static void log_job(const conn_state *cs, const tsrv_job *j, const char *what) {
    tsrv_log("%s %s %s: job %llu slot %d, prompt %d (cached %d), generated %d, finish %s, %.0f ms", cs->method,
             cs->path, what, (unsigned long long)j->id, j->slot, (int)j->n_prompt, (int)j->n_cached, (int)j->n_gen,
             j->finish ? j->finish : "-", tsrv_now_ms() - cs->t0);
}

/* ---- streamed answers ---- */

typedef struct stream_state {
    tsrv_server *srv;
    tsrv_job *job;
    conn_state cs;   /* copy for the log line at the end */
    int fd;
    time_t created;
    int ci;          /* the choice being streamed (they are generated in turn) */
    size_t sent;     /* bytes of its text already in events */
    size_t lp_sent;  /* its logprob entries already in events */
    bool tools_sent; /* its tool calls are in events */
    tsrv_buf out;    /* formatted, not yet handed to MHD */
    size_t out_off;
    bool ended;      /* the final events are in out */
} stream_state;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_state *ss = cls;
    tsrv_job *j = ss->job;
    while (ss->out_off == ss->out.len) {
        if (ss->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        ss->out.len = ss->out_off = 0;
        pthread_mutex_lock(&j->mu);
        int rc = 0;
        for (;;) {
            const tsrv_choice *ch = &j->choices[ss->ci];
            if (ch->visible > ss->sent) {
                rc = tsrv_sse_delta(&ss->out, ss->srv, j, ss->created, ss->ci, ss->sent, ch->visible, &ss->lp_sent,
                                    ch->visible, false);
                ss->sent = ch->visible;
                break;
            }
            if ((ch->finish || j->state == TSRV_DONE) && ss->lp_sent < ch->n_lp) {
                /* entries of tokens without text of their own (the text is all sent) */
                rc = tsrv_sse_delta(&ss->out, ss->srv, j, ss->created, ss->ci, ss->sent, ss->sent, &ss->lp_sent,
                                    SIZE_MAX, false);
                break;
            }
            if (ch->finish && ch->tool_calls && !ss->tools_sent) {
                rc = tsrv_sse_tool_calls(&ss->out, ss->srv, j, ss->created, ss->ci);
                ss->tools_sent = true;
                break;
            }
            if (ch->finish && ss->ci + 1 < j->n_choices) { /* on to the next choice */
                rc = tsrv_sse_choice_end(&ss->out, ss->srv, j, ss->created, ss->ci);
                ss->ci++;
                ss->sent = ss->lp_sent = 0;
                ss->tools_sent = false;
                if (!rc && j->kind == TSRV_CHAT)
                    rc = tsrv_sse_delta(&ss->out, ss->srv, j, ss->created, ss->ci, 0, 0, NULL, 0, true);
                break;
            }
            if (j->state == TSRV_DONE) {
                if (!strcmp(j->finish, "cancelled")) {
                    rc = -1; /* the server is stopping */
                } else {
                    rc = tsrv_sse_final(&ss->out, ss->srv, j, ss->created);
                    ss->ended = true;
                }
                break;
            }
            job_wait(j, 200);
            if (j->state != TSRV_DONE && j->choices[ss->ci].visible <= ss->sent && !j->choices[ss->ci].finish &&
                peer_closed(ss->fd)) {
                pthread_mutex_unlock(&j->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free cancels */
            }
        }
        pthread_mutex_unlock(&j->mu);
        if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = ss->out.len - ss->out_off;
    if (n > max) n = max;
    memcpy(buf, ss->out.p + ss->out_off, n);
    ss->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_state *ss = cls;
    tsrv_job *j = ss->job;
    bool complete = ss->ended && ss->out_off == ss->out.len;
    pthread_mutex_lock(&j->mu);
    bool running = j->state != TSRV_DONE;
    pthread_mutex_unlock(&j->mu);
    if (!complete && running) {
        tsrv_job_cancel(ss->srv, j);
        tsrv_metrics_cancel(&ss->srv->metrics);
        pthread_mutex_lock(&j->mu);
        while (j->state != TSRV_DONE) job_wait(j, 200);
        pthread_mutex_unlock(&j->mu);
        log_job(&ss->cs, j, "cancelled: client disconnected");
    } else {
        log_job(&ss->cs, j, complete ? "200 stream" : "stream cut: client disconnected");
    }
    tsrv_job_release(j);
    tsrv_buf_free(&ss->out);
    free(ss);
}

/* ---- handlers ---- */

static enum MHD_Result handle_generate(tsrv_server *s, struct MHD_Connection *c, conn_state *cs, tsrv_kind kind) {
    tsrv_error e;
    tsrv_job *j = kind == TSRV_EMBED ? tsrv_embed_parse(s, cs->body.p ? cs->body.p : "", cs->body.len, &e)
                                     : tsrv_request_parse(s, kind, cs->body.p ? cs->body.p : "", cs->body.len, &e);
    if (!j) return send_error(s, c, cs, &e);
    if (tsrv_submit(s, j, &e) < 0) {
        tsrv_job_release(j);
        return send_error(s, c, cs, &e);
    }
    int fd = conn_fd(c);
    time_t created = time(NULL);
    if (j->stream) {
        stream_state *ss = calloc(1, sizeof *ss);
        struct MHD_Response *r = NULL;
        if (ss) {
            *ss = (stream_state){.srv = s, .job = j, .cs = *cs, .fd = fd, .created = created};
            ss->cs.body = (tsrv_buf){0};
            /* the role chunk goes out at once, so the client sees the stream start */
            if (kind == TSRV_CHAT && tsrv_sse_delta(&ss->out, s, j, created, 0, 0, 0, NULL, 0, true) < 0) {
                free(ss);
                ss = NULL;
            }
        }
        if (ss) r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, ss, stream_free);
        if (!r) { /* stream_free was not registered: clean up here */
            tsrv_job_cancel(s, j);
            if (ss) tsrv_buf_free(&ss->out);
            free(ss);
            tsrv_job_release(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cs->responded = true;
        tsrv_metrics_request(&s->metrics, cs->endpoint, 200);
        return rc;
    }

    bool gone = false;
    pthread_mutex_lock(&j->mu);
    while (j->state != TSRV_DONE) {
        job_wait(j, 200);
        if (!gone && j->state != TSRV_DONE && peer_closed(fd)) {
            gone = true;
            pthread_mutex_unlock(&j->mu);
            tsrv_job_cancel(s, j);
            tsrv_metrics_cancel(&s->metrics);
            pthread_mutex_lock(&j->mu);
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (gone) {
        log_job(cs, j, "cancelled: client disconnected");
        tsrv_job_release(j);
        return MHD_NO; /* nobody to answer */
    }
    enum MHD_Result rc;
    if (!strcmp(j->finish, "error") || !strcmp(j->finish, "cancelled")) {
        tsrv_fail(&e, 500, TSRV_E_INTERNAL, NULL, "%s", j->errmsg[0] ? j->errmsg : "generation stopped");
        rc = send_error(s, c, cs, &e);
    } else {
        log_job(cs, j, "200");
        rc = send_body(s, c, cs, 200, "application/json",
                       kind == TSRV_EMBED ? tsrv_embeddings_json(s, j) : tsrv_completion_json(s, j, created), true);
    }
    tsrv_job_release(j);
    return rc;
}

/* Constant-time comparison of the bearer token with --api-key. */
static bool auth_ok(const tsrv_server *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(s->cfg.api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->cfg.api_key[i % (b ? b : 1)];
    return diff == 0;
}

static int route(const char *url, bool *post) {
    static const struct {
        const char *path;
        int ep;
        bool post;
    } routes[] = {{"/", TSRV_EP_ROOT, false},
                  {"/index.html", TSRV_EP_ROOT, false},
                  {"/health", TSRV_EP_HEALTH, false},
                  {"/v1/models", TSRV_EP_MODELS, false},
                  {"/models", TSRV_EP_MODELS, false},
                  {"/metrics", TSRV_EP_METRICS, false},
                  {"/v1/chat/completions", TSRV_EP_CHAT, true},
                  {"/chat/completions", TSRV_EP_CHAT, true},
                  {"/v1/completions", TSRV_EP_COMPLETIONS, true},
                  {"/completions", TSRV_EP_COMPLETIONS, true},
                  {"/tokenize", TSRV_EP_TOKENIZE, true},
                  {"/detokenize", TSRV_EP_DETOKENIZE, true},
                  {"/apply-template", TSRV_EP_APPLY_TEMPLATE, true},
                  {"/v1/embeddings", TSRV_EP_EMBEDDINGS, true},
                  {"/embeddings", TSRV_EP_EMBEDDINGS, true}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) {
            *post = routes[i].post;
            return routes[i].ep;
        }
    return -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    tsrv_server *s = cls;
    conn_state *cs = *con_cls;
    tsrv_error e;
    if (!cs) { /* headers are in: route, authenticate, check the declared size */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->t0 = tsrv_now_ms();
        printable(cs->method, sizeof cs->method, method);
        printable(cs->path, sizeof cs->path, url);
        bool want_post = false;
        int ep = route(url, &want_post);
        cs->endpoint = ep < 0 ? TSRV_EP_OTHER : ep;
        bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (ep < 0) {
            tsrv_fail(&e, 404, TSRV_E_NOT_FOUND, NULL, "no such endpoint: %s %.60s", cs->method, cs->path);
            return send_error(s, c, cs, &e);
        }
        if (want_post ? strcmp(method, "POST") != 0 : !is_get) {
            tsrv_fail(&e, 405, TSRV_E_METHOD, NULL, "%s %s is not allowed: use %s", cs->method, cs->path,
                      want_post ? "POST" : "GET");
            return send_error(s, c, cs, &e);
        }
        if (ep != TSRV_EP_ROOT && ep != TSRV_EP_HEALTH && !auth_ok(s, c)) {
            tsrv_fail(&e, 401, TSRV_E_AUTH, NULL, "missing or wrong API key: send 'Authorization: Bearer KEY'");
            return send_error(s, c, cs, &e);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
            tsrv_fail(&e, 413, TSRV_E_BODY_TOO_LARGE, NULL, "the request body has %.20s bytes; the limit is %zu (--max-body)",
                      cl, s->cfg.max_body);
            return send_error(s, c, cs, &e);
        }
        return MHD_YES;
    }
    if (cs->responded) { /* an early answer is queued: drop what still arrives */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cs->too_big || cs->body.len + n > s->cfg.max_body) {
            /* A body without Content-Length (chunked) that grows past the
             * limit: MHD takes an answer only once the upload is complete,
             * so drop the rest and answer 413 then - or hang up on a client
             * that keeps sending far more. */
            tsrv_buf_free(&cs->body);
            cs->too_big = true;
            cs->discarded += n;
            return cs->discarded > 4 * s->cfg.max_body ? MHD_NO : MHD_YES;
        }
        if (tsrv_buf_add(&cs->body, upload_data, n) < 0) return MHD_NO;
        return MHD_YES;
    }
    if (cs->too_big) {
        tsrv_fail(&e, 413, TSRV_E_BODY_TOO_LARGE, NULL, "the request body exceeds the limit of %zu bytes (--max-body)",
                  s->cfg.max_body);
        return send_error(s, c, cs, &e);
    }
    /* the whole request is in */
    switch (cs->endpoint) {
    case TSRV_EP_ROOT:
        return send_body(s, c, cs, 200, "text/html; charset=utf-8", (char *)tsrv_ui_page, false);
    case TSRV_EP_HEALTH:
        return send_body(s, c, cs, 200, "application/json", tsrv_health_json(s), true);
    case TSRV_EP_MODELS:
        return send_body(s, c, cs, 200, "application/json", tsrv_models_json(s), true);
    case TSRV_EP_METRICS:
        return send_body(s, c, cs, 200, "text/plain; version=0.0.4", tsrv_metrics_text(s), true);
    case TSRV_EP_CHAT:
        return handle_generate(s, c, cs, TSRV_CHAT);
    case TSRV_EP_COMPLETIONS:
        return handle_generate(s, c, cs, TSRV_COMPLETION);
    case TSRV_EP_EMBEDDINGS:
        return handle_generate(s, c, cs, TSRV_EMBED);
    case TSRV_EP_TOKENIZE:
    case TSRV_EP_DETOKENIZE:
    case TSRV_EP_APPLY_TEMPLATE: {
        const char *b = cs->body.p ? cs->body.p : "";
        char *r = cs->endpoint == TSRV_EP_TOKENIZE     ? tsrv_tokenize(s, b, cs->body.len, &e)
                  : cs->endpoint == TSRV_EP_DETOKENIZE ? tsrv_detokenize(s, b, cs->body.len, &e)
                                                       : tsrv_apply_template(s, b, cs->body.len, &e);
        return r ? send_body(s, c, cs, 200, "application/json", r, true) : send_error(s, c, cs, &e);
    }
    default:
        tsrv_fail(&e, 404, TSRV_E_NOT_FOUND, NULL, "no such endpoint");
        return send_error(s, c, cs, &e);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    conn_state *cs = *con_cls;
    if (cs) {
        tsrv_buf_free(&cs->body);
        free(cs);
        *con_cls = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    tsrv_log("http: %s", line);
}

static void model_log(ts_log_level level, const char *msg, void *ud) {
    const tsrv_server *s = ud;
    if (level >= TS_LOG_WARN || s->cfg.verbose)
        tsrv_log("%s: %s", level >= TS_LOG_ERROR ? "error" : level == TS_LOG_WARN ? "warning" : "info", msg);
}

int tsrv_run(const tsrv_config *cfg) {
    /* SIGINT/SIGTERM are taken by sigwait below: block them before any
     * thread starts so that every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    json_object_seed(0); /* jansson's hash seed, once, before threads */

    int status = 1;
    struct MHD_Daemon *d = NULL;
    struct addrinfo *ai = NULL;
    tsrv_server *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    s->cfg = *cfg;
    s->started = time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->fmt_mu, NULL);
    tsrv_metrics_init(&s->metrics);

    ts_error err;
    ts_model_params mp = ts_model_default_params();
    mp.log = model_log;
    mp.log_user_data = s;
    mp.mem_budget = cfg->mem_budget;
    mp.n_loaders = cfg->n_loaders;
    mp.stream_options = cfg->stream_opts;
    if (ts_model_load(cfg->model_path, &mp, &s->model, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        goto done;
    }
    s->info = (ts_model_info)TS_STRUCT_INIT(ts_model_info);
    ts_model_get_info(s->model, &s->info);
    if (cfg->alias) {
        snprintf(s->model_id, sizeof s->model_id, "%s", cfg->alias);
    } else {
        const char *base = strrchr(cfg->model_path, '/');
        snprintf(s->model_id, sizeof s->model_id, "%s", base ? base + 1 : cfg->model_path);
    }
    /* A diffusion LLM (LLaDA, Dream: a mask token, bidirectional attention)
     * is decoded by ts_context_diffuse: the library says whether this file
     * is one (ts_diffusion_n_batch is -1 for any other model). A file of a
     * diffusion architecture that it refuses would be garbage when run
     * autoregressively: refuse it here. */
    s->diffusion_defaults = ts_diffusion_default_params();
    s->diffusion = ts_diffusion_n_batch(s->model, &s->diffusion_defaults, 1) > 0;
    if (!s->diffusion && s->info.arch && (!strcmp(s->info.arch, "llada") || !strcmp(s->info.arch, "dream"))) {
        fprintf(stderr, "error: '%s' is a %s model that cannot be decoded by diffusion (see `tessera diffuse`)\n",
                cfg->model_path, s->info.arch);
        goto done;
    }

    tsrv_error e;
    ts_context_params fp = ts_context_default_params();
    fp.n_ctx = 16; /* only renders chat templates */
    fp.n_threads = 1;
    fp.decoder = s->diffusion ? TS_DECODER_DIFFUSION : TS_DECODER_AUTOREGRESSIVE;
    fp.chat_template = cfg->chat_template;
    fp.log = model_log;
    fp.log_user_data = s;
    if (ts_context_create(s->model, &fp, &s->fmt_ctx, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        goto done;
    }
    {
        /* what a chatml template adds without a system message (Qwen2.5's
         * "You are Qwen, ..."): the tool prompt keeps it, as the template does */
        ts_chat_message probe = {"user", "x"};
        char *txt = NULL;
        size_t tl = 0;
        static const char sys[] = "<|im_start|>system\n";
        if (ts_context_chat_format(s->fmt_ctx, &probe, 1, false, &txt, &tl) == TS_OK && txt &&
            !strncmp(txt, sys, sizeof sys - 1)) {
            const char *end = strstr(txt, "<|im_end|>");
            if (end && (size_t)(end - txt) - (sizeof sys - 1) < sizeof s->default_system)
                snprintf(s->default_system, sizeof s->default_system, "%.*s", (int)(end - txt - (sizeof sys - 1)),
                         txt + sizeof sys - 1);
        }
        ts_free(txt);
    }
    if (tsrv_sched_start(s, &e) < 0) {
        fprintf(stderr, "error: %s\n", e.message);
        goto done;
    }

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    int gai = getaddrinfo(cfg->host, NULL, &hints, &ai);
    if (gai) {
        fprintf(stderr, "error: --host '%s': %s\n", cfg->host, gai_strerror(gai));
        goto done;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) {
        flags |= MHD_USE_IPv6;
        ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)cfg->port);
    } else {
        ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)cfg->port);
    }
    d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                         MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                         MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "error: cannot listen on %s port %d (in use, or not an address of this machine?)\n", cfg->host,
                cfg->port);
        goto done;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : cfg->port;
    tsrv_log("model %s (%s), %d slot(s) of %d tokens, prefill on %s, decode on %s", s->model_id,
             s->info.arch ? s->info.arch : "?", s->n_slots, (int)s->n_ctx, s->engine_prefill, s->engine_decode);
    if (s->diffusion)
        tsrv_log("diffusion model: requests run ts_context_diffuse (n_batch %d; defaults: decoder %s, block %d, "
                 "threshold %g, cache %s, alg %s, max_tokens %d)",
                 (int)s->n_batch, tsrv_diff_decoder_name(s->diffusion_defaults.decoder),
                 (int)s->diffusion_defaults.block, (double)s->diffusion_defaults.threshold,
                 tsrv_diff_cache_name(s->diffusion_defaults.cache), tsrv_diff_alg_name(s->diffusion_defaults.alg),
                 (int)s->diffusion_defaults.n_gen);
    if (s->device_fallback[0]) tsrv_log("prefill device: %s", s->device_fallback);
    tsrv_log("listening on http://%s%s%s:%d/", ai->ai_family == AF_INET6 ? "[" : "", cfg->host,
             ai->ai_family == AF_INET6 ? "]" : "", port);

    int sig = 0;
    sigwait(&sigs, &sig);
    tsrv_log("signal %d: shutting down", sig);
    status = 0;

done:
    /* jobs end first (waiting handlers then return), then the daemon joins
     * its connection threads, then nothing can touch the model any more */
    if (s->slots) tsrv_sched_stop(s);
    if (d) MHD_stop_daemon(d);
    if (ai) freeaddrinfo(ai);
    ts_context_free(s->fmt_ctx);
    ts_model_free(s->model);
    tsrv_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->fmt_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return status;
}
