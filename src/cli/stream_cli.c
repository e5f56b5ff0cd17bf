/* stream_cli.c - the --cut modes of the two-engine streams (stream_cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream_cli.h"

static void json_rates(const char *name, const ts_stream_rates *r) {
    fprintf(stderr, "\"%s\": {\"block_a_s\": %.6f, \"block_b_s\": %.6f, \"tail_s\": %.6f}", name, r->block_a_s,
            r->block_b_s, r->tail_s);
}

static void json_result(const cli_stream *s, const ts_stream_result *r, double predicted) {
    fprintf(stderr,
            "{\"cut\": %d, \"%s\": %d, \"predicted_period_s\": %.4f, \"period_s\": %.4f, \"total_s\": %.4f, "
            "\"latency_s\": %.4f, \"max_latency_s\": %.4f, \"a_busy_s\": %.4f, \"b_busy_s\": %.4f, \"tail_s\": %.4f, "
            "\"handoff_s\": %.6f, \"slo_met\": %d, \"%s_per_hour\": %.3f}",
            (int)r->cut, s->units, (int)r->n_requests, predicted, r->period_s, r->total_s, r->latency_s, r->max_latency_s,
            r->a_busy_s, r->b_busy_s, r->tail_s, r->handoff_s, (int)r->slo_met, s->units,
            r->period_s > 0 ? 3600.0 / r->period_s : 0.0);
}

int cli_stream_cuts(const cli_stream *s, const char *cut_s, int32_t n, double slo, int32_t probe, bool baselines) {
    const ts_stream_info *in = &s->info;
    const int B = in->n_blocks, L = in->step_blocks;
    if (!strcmp(cut_s, "setup")) { /* the engines set up: the weights and the PSS only */
        if (s->stats_json)
            fprintf(stderr, "{\"unit\": \"%s\", \"engine_a\": \"%s\", \"engine_b\": \"%s\", \"n_blocks\": %d, "
                            "\"weight_bytes\": %lld, \"shared_bytes\": %lld, \"pss_bytes\": %lld}\n",
                    s->unit, in->engine_a, in->engine_b, B, (long long)in->weight_bytes, (long long)in->shared_bytes,
                    (long long)in->pss_bytes);
        return 0;
    }
    ts_error err = {0};
    ts_stream_rates solo, co;
    if (s->measure(s->p, probe, &solo, &co, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        return 1;
    }
    const int k_auto = ts_stream_best_cut(&co, B, 1, 0), k_step = ts_stream_best_cut(&co, B, L, 0),
              k_solo = ts_stream_best_cut(&solo, B, 1, 0), k_slo = slo > 0 ? ts_stream_best_cut(&co, B, 1, slo) : -1;
    const double cross = ts_stream_crossing(&co, B);
    if (!s->quiet)
        fprintf(stderr,
                "rates (s)        block A   block B   tail B\n  solo          %8.4f  %8.4f  %8.4f\n  co-run        "
                "%8.4f  %8.4f  %8.4f\ncut: crossing %.2f -> k* = %d (co-run), %d (solo rates), %d (step boundary)\n",
                solo.block_a_s, solo.block_b_s, solo.tail_s, co.block_a_s, co.block_b_s, co.tail_s, cross, k_auto,
                k_solo, k_step);
    if (slo > 0 && k_slo < 0) {
        fprintf(stderr, "error: --slo %.1f: no cut finishes a %s within it (the fastest takes %.1f s)\n", slo, s->unit,
                ts_stream_latency(&co, B, 0) < ts_stream_latency(&co, B, B) ? ts_stream_latency(&co, B, 0)
                                                                              : ts_stream_latency(&co, B, B));
        return 1;
    }
    /* the cuts to run */
    int cuts[4096], n_cuts = 0;
    if (!strcmp(cut_s, "rates")) {
        /* measured only */
    } else if (!strcmp(cut_s, "sweep")) {
        for (int k = 0; k <= B && n_cuts < 4096; k++) cuts[n_cuts++] = k;
    } else if (slo > 0) {
        cuts[n_cuts++] = k_slo;
    } else if (!strcmp(cut_s, "auto")) {
        cuts[n_cuts++] = k_auto;
    } else if (!strcmp(cut_s, "solo")) {
        cuts[n_cuts++] = k_solo;
    } else if (!strcmp(cut_s, "step")) {
        cuts[n_cuts++] = k_step;
    } else { /* K or K1,K2,... */
        for (const char *c = cut_s; n_cuts < 4096;) {
            char *end;
            const long k = strtol(c, &end, 10);
            if (end == c || (*end && *end != ',') || k < 0 || k > B) {
                fprintf(stderr, "error: --cut '%s': auto, solo, step, sweep, rates, setup or block indices 0 .. %d "
                                "(K or K1,K2,...)\n", cut_s, B);
                return 1;
            }
            cuts[n_cuts++] = (int)k;
            if (!*end)
                break;
            c = end + 1;
        }
    }
    if (s->stats_json) {
        fprintf(stderr, "{\"unit\": \"%s\", \"engine_a\": \"%s\", \"engine_b\": \"%s\", \"n_blocks\": %d, \"step_blocks\": %d, "
                        "\"tokens\": %lld, \"weight_bytes\": %lld, \"shared_bytes\": %lld, \"pss_bytes\": %lld, ",
                s->unit, in->engine_a, in->engine_b, B, L, (long long)in->tokens, (long long)in->weight_bytes,
                (long long)in->shared_bytes, (long long)in->pss_bytes);
        json_rates("solo", &solo);
        fprintf(stderr, ", ");
        json_rates("corun", &co);
        fprintf(stderr, ", \"crossing\": %.4f, \"cut_auto\": %d, \"cut_solo\": %d, \"cut_step\": %d, \"slo_s\": %.3f, "
                        "\"runs\": [", cross, k_auto, k_solo, k_step, slo);
    } else if (!s->quiet && n_cuts) {
        fprintf(stderr, "  cut  predicted s  period s  latency s  max lat s  hand-off ms\n");
    }
    if (s->announce)
        *s->announce = n_cuts == 1 && !s->stats_json;
    for (int i = 0; i < n_cuts; i++) {
        ts_stream_result r;
        if (s->run(s->p, cuts[i], n, slo > 0 ? &co : NULL, slo, &r, &err) != TS_OK) {
            fprintf(stderr, "%serror: %s\n", s->stats_json ? "\n" : "", err.message);
            return 1;
        }
        const double pred = ts_stream_period(&co, B, cuts[i]);
        if (s->stats_json) {
            fprintf(stderr, "%s", i ? ", " : "");
            json_result(s, &r, pred);
        } else {
            fprintf(stderr, "  %3d  %11.3f  %8.3f  %9.3f  %9.3f  %11.3f%s\n", (int)r.cut, pred, r.period_s,
                    r.latency_s, r.max_latency_s, r.handoff_s * 1e3,
                    slo > 0 ? (r.slo_met == r.n_requests ? "  (all within the SLO)" : "  (SLO missed)") : "");
            if (slo > 0)
                fprintf(stderr, "  %.2f %s per hour, %d of %d within %.1f s\n", 3600.0 / r.period_s, s->units,
                        (int)r.slo_met, (int)r.n_requests, slo);
        }
    }
    if (s->stats_json)
        fprintf(stderr, "], \"whole\": [");
    for (unsigned st = 1; baselines && st <= 3; st++) {
        ts_stream_result r;
        if (s->run_whole(s->p, st, n, &r, &err) != TS_OK) {
            fprintf(stderr, "%serror: %s\n", s->stats_json ? "\n" : "", err.message);
            return 1;
        }
        static const char *const names[] = {"", "A alone", "B alone", "data-parallel"};
        if (s->stats_json) {
            fprintf(stderr, "%s{\"stages\": %u, ", st > 1 ? ", " : "", st);
            fprintf(stderr, "\"name\": \"%s\", \"result\": ", names[st]);
            json_result(s, &r, 0.0);
            fprintf(stderr, "}");
        } else {
            fprintf(stderr, "  %-14s period %.3f s, latency %.3f s\n", names[st], r.period_s, r.latency_s);
        }
    }
    if (s->stats_json)
        fprintf(stderr, "]}\n");
    return 0;
}
