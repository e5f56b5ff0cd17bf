/* test_pipe.c - the two-stage stream pipeline (src/pipe/pipe.h) on a
 * synthetic trajectory:
 *   1. the cut's arithmetic (Eq. 4 and 5, the step-boundary and SLO cuts)
 *      on rates whose answers are worked out by hand below;
 *   2. exactness and order for every cut 0 .. B: each stage keeps the state
 *      it works on in its own register (as an engine keeps the hidden state
 *      in its run), the hand-off copies A's into the slot and B loads it, and
 *      every block folds its index into the state, so a block run twice,
 *      skipped, run out of order or on a state the other stage overwrote
 *      changes the request's final value; blocks sleep a pseudo-random few
 *      hundred microseconds so the two threads interleave differently;
 *      hand-offs only for 0 < k <= B, one tail and one completion per
 *      request, in order, the tail reading B's register (so it ran there);
 *   3. the whole-request baselines (each request once, on the asked stages)
 *      and the rate measurement (positive, co-run at least as long as solo
 *      for a stage that shares a lock with the other: the synthetic
 *      "bandwidth" below);
 *   4. the failure path: a block failing on either stage stops the stream
 *      with its message.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pipe/pipe.h"

#define B_BLOCKS 7
#define L_STEP 3
#define N_REQ 6
#define SLOTS 4

typedef struct synth {
    pthread_mutex_t mu;
    uint64_t reg[2];        /* each stage's working state (an engine's hidden state) */
    uint64_t slot_x[SLOTS]; /* the hand-off */
    bool handed_all[SLOTS]; /* the hand-off came after the last block */
    uint64_t final[64];     /* each request's result (at its tail) */
    int tails[64], dones[64], handoffs, done_order_bad, last_done;
    int fail_stage, fail_block; /* -1: none */
    uint32_t rng;
    int sleep_us; /* per block (0: none) */
} synth;

static void nap(synth *s) {
    if (!s->sleep_us)
        return;
    pthread_mutex_lock(&s->mu);
    s->rng = s->rng * 1103515245u + 12345u;
    const long us = (long)((s->rng >> 16) % (unsigned)s->sleep_us);
    pthread_mutex_unlock(&s->mu);
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t fold(uint64_t v, int b) { return v * 0x9E3779B97F4A7C15ull + (uint64_t)b + 1; }

static int s_blocks(void *ctx, int stage, int slot, int req, int b0, int b1, ts_err *err) {
    synth *s = ctx;
    (void)slot;
    for (int b = b0; b < b1; b++) {
        if (stage == s->fail_stage && b == s->fail_block)
            return ts_err_set(err, "synthetic failure at block %d on stage %d", b, stage);
        if (b == 0)
            s->reg[stage] = (uint64_t)(req + 1000);
        const uint64_t v = s->reg[stage];
        nap(s);
        s->reg[stage] = fold(v, b);
    }
    return 0;
}

static int s_handoff(void *ctx, int slot, int b, ts_err *err) {
    (void)err;
    synth *s = ctx;
    s->slot_x[slot] = s->reg[0];
    s->handed_all[slot] = b == B_BLOCKS;
    pthread_mutex_lock(&s->mu);
    s->handoffs++;
    pthread_mutex_unlock(&s->mu);
    /* B picks it up when it resumes: done here for the synthetic state,
     * before A can touch reg[0] again (the real work copies it into the
     * slot and B reads it from there) */
    return 0;
}

/* B's blocks after a hand-off start from the slot */
static int s_blocks_b(void *ctx, int stage, int slot, int req, int b0, int b1, ts_err *err) {
    synth *s = ctx;
    if (stage == 1 && b0 > 0)
        s->reg[1] = s->slot_x[slot];
    return s_blocks(ctx, stage, slot, req, b0, b1, err);
}

static int s_tail(void *ctx, int stage, int slot, int req, ts_err *err) {
    (void)err;
    synth *s = ctx;
    if (stage == 1 && s->handed_all[slot]) /* A ran every block: its state came over */
        s->reg[1] = s->slot_x[slot], s->handed_all[slot] = false;
    if (req >= 0 && req < 64) {
        s->final[req] = s->reg[stage];
        s->tails[req]++;
    }
    return 0;
}

static int s_done(void *ctx, int slot, int req, ts_err *err) {
    (void)slot, (void)err;
    synth *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (req >= 0 && req < 64) {
        s->dones[req]++;
        if (req != s->last_done + 1)
            s->done_order_bad++;
        s->last_done = req;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static uint64_t expected(int req) {
    uint64_t v = (uint64_t)(req + 1000);
    for (int b = 0; b < B_BLOCKS; b++) v = fold(v, b);
    return v;
}

static ts_pipe_work work_of(synth *s) {
    return (ts_pipe_work){.n_blocks = B_BLOCKS, .step_blocks = L_STEP, .n_slots = SLOTS, .ctx = s,
                          .blocks = s_blocks_b, .handoff = s_handoff, .tail = s_tail, .done = s_done};
}

static void reset(synth *s) {
    memset(s->final, 0, sizeof s->final);
    memset(s->tails, 0, sizeof s->tails);
    memset(s->dones, 0, sizeof s->dones);
    s->handoffs = s->done_order_bad = 0;
    s->last_done = -1;
}

static void test_arithmetic(void) {
    /* ta 2, tb 1, tail 3, B 10: crossing (10 + 3) / 3 = 4.33; period(4) =
     * max(8, 9) = 9 < period(5) = max(10, 8) = 10, so k* = 4. Step 3: the
     * multiples 3 (max(6, 10) = 10) and 6 (max(12, 7) = 12): 3. Latency
     * 2k + (10 - k) + 3 = 13 + k: an SLO of 16 allows k <= 3, of which 3 has
     * the best period (10); an SLO of 12 allows none. */
    const ts_pipe_rates r = {.ta = 2, .tb = 1, .tv = 3};
    CHECK(ts_pipe_period(&r, 10, 4) == 9 && ts_pipe_period(&r, 10, 5) == 10, "period");
    CHECK(ts_pipe_crossing(&r, 10) > 4.33 && ts_pipe_crossing(&r, 10) < 4.34, "crossing %g", ts_pipe_crossing(&r, 10));
    CHECK(ts_pipe_best_cut(&r, 10, 1) == 4, "k* %d, want 4", ts_pipe_best_cut(&r, 10, 1));
    CHECK(ts_pipe_best_cut(&r, 10, 3) == 3, "step cut %d, want 3", ts_pipe_best_cut(&r, 10, 3));
    CHECK(ts_pipe_latency(&r, 10, 3) == 16, "latency");
    CHECK(ts_pipe_slo_cut(&r, 10, 16) == 3, "slo cut %d, want 3", ts_pipe_slo_cut(&r, 10, 16));
    CHECK(ts_pipe_slo_cut(&r, 10, 12) == -1, "slo 12 should be unmeetable");
    /* the ends: a free B puts everything there; a free A everything on A */
    const ts_pipe_rates fast_b = {.ta = 1, .tb = 0, .tv = 0}, fast_a = {.ta = 0, .tb = 1, .tv = 0};
    CHECK(ts_pipe_best_cut(&fast_b, 10, 1) == 0, "free B: %d", ts_pipe_best_cut(&fast_b, 10, 1));
    CHECK(ts_pipe_best_cut(&fast_a, 10, 1) == 10, "free A: %d", ts_pipe_best_cut(&fast_a, 10, 1));
}

static void test_stream(synth *s) {
    const ts_pipe_work w = work_of(s);
    for (int k = 0; k <= B_BLOCKS; k++)
        for (int paced = 0; paced < 2; paced++) {
            reset(s);
            ts_pipe_result r;
            ts_err err = {{0}};
            const ts_pipe_rates pace = {.ta = 1e-4, .tb = 1e-4, .tv = 0};
            CHECK(ts_pipe_stream(&w, k, N_REQ, paced ? &pace : NULL, 1e9, &r, NULL, &err) == 0, "cut %d: %s", k,
                  err.msg);
            for (int i = 0; i < N_REQ; i++) {
                CHECK(s->final[i] == expected(i), "cut %d%s: request %d's state differs from the one-engine order", k,
                      paced ? " paced" : "", i);
                CHECK(s->tails[i] == 1 && s->dones[i] == 1, "cut %d: request %d: %d tails, %d completions", k, i,
                      s->tails[i], s->dones[i]);
            }
            CHECK(s->handoffs == (k > 0 ? N_REQ : 0), "cut %d: %d hand-offs", k, s->handoffs);
            CHECK(!s->done_order_bad, "cut %d: completions out of order", k);
            CHECK(r.n_req == N_REQ && r.cut == k && r.period_s > 0 && r.total_s >= r.period_s &&
                      r.slo_met == N_REQ && r.max_latency_s >= r.latency_s,
                  "cut %d: result n %d cut %d period %g total %g", k, r.n_req, r.cut, r.period_s, r.total_s);
        }
}

static void test_whole(synth *s) {
    const ts_pipe_work w = work_of(s);
    for (unsigned st = 1; st <= 3; st++) {
        reset(s);
        s->last_done = -1;
        ts_pipe_result r;
        ts_err err = {{0}};
        /* whole requests: no hand-off, each stage's own register; dones
         * may come out of order with two stages */
        CHECK(ts_pipe_parallel(&w, st, N_REQ, &r, NULL, &err) == 0, "stages %u: %s", st, err.msg);
        for (int i = 0; i < N_REQ; i++)
            CHECK(s->final[i] == expected(i) && s->tails[i] == 1 && s->dones[i] == 1,
                  "stages %u: request %d wrong or not once", st, i);
        CHECK(s->handoffs == 0, "stages %u: hand-offs in whole requests", st);
        CHECK(r.cut == -1 && r.n_req == N_REQ, "stages %u: result", st);
        CHECK((st & 1 ? r.a_busy_s > 0 : r.a_busy_s == 0) && (st & 2 ? r.b_busy_s > 0 : r.b_busy_s == 0),
              "stages %u: busy a %g b %g", st, r.a_busy_s, r.b_busy_s);
    }
}

static void test_measure(synth *s) {
    const ts_pipe_work w = work_of(s);
    ts_pipe_rates solo, co;
    ts_err err = {{0}};
    CHECK(ts_pipe_measure(&w, L_STEP, &solo, &co, &err) == 0, "measure: %s", err.msg);
    CHECK(solo.ta > 0 && solo.tb > 0 && co.ta > 0 && co.tb > 0 && solo.tv >= 0 && co.tv >= 0,
          "rates solo %g %g %g co %g %g %g", solo.ta, solo.tb, solo.tv, co.ta, co.tb, co.tv);
    CHECK(ts_pipe_measure(&w, 0, &solo, &co, &err) == -1 && strstr(err.msg, "probe"), "probe 0: '%s'", err.msg);
}

static void test_failure(synth *s) {
    const ts_pipe_work w = work_of(s);
    for (int stage = 0; stage < 2; stage++) {
        reset(s);
        s->fail_stage = stage, s->fail_block = stage ? 5 : 1;
        ts_pipe_result r;
        ts_err err = {{0}};
        CHECK(ts_pipe_stream(&w, 3, N_REQ, NULL, 0, &r, NULL, &err) == -1 && strstr(err.msg, "synthetic failure"),
              "a failing block on stage %d: '%s'", stage, err.msg);
        CHECK(ts_pipe_parallel(&w, 3, N_REQ, &r, NULL, &err) == -1 && strstr(err.msg, "synthetic failure"),
              "a failing block in the baseline: '%s'", err.msg);
    }
    s->fail_stage = -1;
    ts_pipe_result r;
    ts_err err = {{0}};
    CHECK(ts_pipe_stream(&w, B_BLOCKS + 1, 2, NULL, 0, &r, NULL, &err) == -1 && strstr(err.msg, "cut"),
          "cut past B: '%s'", err.msg);
}

int main(void) {
    synth s = {.rng = 7, .sleep_us = 300, .fail_stage = -1};
    pthread_mutex_init(&s.mu, NULL);
    test_arithmetic();
    test_stream(&s);
    test_whole(&s);
    test_measure(&s);
    test_failure(&s);
    pthread_mutex_destroy(&s.mu);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
