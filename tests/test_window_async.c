/* test_window_async.c - the asynchronous window forward (seed: the CPU runs
 * while the device denoises): ts_forward_window_submit returns while the
 * device (loop with a crossing delay) still computes, the host can work in
 * between, and ts_forward_window_wait gives logits bit-identical to the
 * synchronous ts_forward_window. Also through the denoiser's submit/wait.
 *
 *   test_window_async MODEL.gguf       (a tiny llada from gen_dllm_models.py)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "diffusion/denoiser_state.h"
#include "model/model.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_window_async MODEL.gguf\n");
        return 2;
    }
    ts_err err = {{0}};
    ts_mdl *m = ts_mdl_load(argv[1], NULL, &err);
    if (!m) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    const int32_t V = ts_mdl_hparams(m)->n_vocab, n = 32;
    ts_state_params sp = ts_state_default_params();
    sp.n_ctx = 128;
    sp.n_threads = 1;
    ts_state *cpu = ts_state_new(m, &sp, &err);
    sp.prefill_device = "loop,delay_us=30000"; /* every crossing costs 30 ms on the device */
    sp.chunk = 32;
    ts_state *dev = ts_state_new(m, &sp, &err);
    if (!cpu || !dev || ts_state_dev_fallback(dev)) {
        fprintf(stderr, "FAIL: states: %s %s\n", err.msg, dev ? ts_state_dev_fallback(dev) : "");
        return 1;
    }
    int32_t tok[32];
    for (int i = 0; i < n; i++) tok[i] = (i * 37 + 5) % V;
    float *ref = malloc(sizeof(float) * (size_t)V * n), *got = malloc(sizeof(float) * (size_t)V * n);
    CHECK(!ts_forward_window(cpu, tok, n, 0, n, ref, &err), "cpu window: %s", err.msg);

    memset(got, 0, sizeof(float) * (size_t)V * n);
    const uint64_t t0 = ts_now_ns();
    CHECK(!ts_forward_window_submit(dev, tok, n, 0, n, got, &err), "submit: %s", err.msg);
    const double submit_ms = (double)(ts_now_ns() - t0) / 1e6;
    /* the host works while the device computes */
    volatile double acc = 0;
    int64_t host_iters = 0;
    while (!ts_forward_window_done(dev) && host_iters < 2000000000) {
        acc += 1.0 / (double)(host_iters + 1);
        host_iters++;
    }
    CHECK(acc > 0 || host_iters == 0, "host work");
    ts_err e2 = {{0}};
    CHECK(ts_forward_window(dev, tok, n, 0, n, got, &e2) && strstr(e2.msg, "in flight"),
          "a second window while one is in flight is refused: '%s'", e2.msg);
    CHECK(!ts_forward_window_wait(dev, &err), "wait: %s", err.msg);
    const double total_ms = (double)(ts_now_ns() - t0) / 1e6;
    CHECK(!memcmp(got, ref, sizeof(float) * (size_t)V * n), "async device logits differ from the CPU's");
    ts_state_dev_stats ds;
    ts_state_dev_stats_get(dev, &ds);
    CHECK(ds.dev_window_runs == 1, "the window ran on the device (%llu runs)", (unsigned long long)ds.dev_window_runs);
    CHECK(submit_ms < 0.5 * total_ms && host_iters > 0,
          "submit returned after %.1f ms of %.1f ms, host ran %lld iterations meanwhile", submit_ms, total_ms,
          (long long)host_iters);
    printf("window async: submit %.1f ms, wait done at %.1f ms, host ran %lld iterations in between; logits "
           "bit-identical to the CPU\n",
           submit_ms, total_ms, (long long)host_iters);

    /* the denoiser's two halves */
    ts_denoiser d;
    CHECK(!ts_state_denoiser(dev, m, -1, &d, &err) && d.submit && d.wait, "denoiser: %s", err.msg);
    memset(got, 0, sizeof(float) * (size_t)V * n);
    CHECK(!d.submit(d.ctx, tok, n, 0, n, got, &err) && !d.wait(d.ctx, &err), "denoiser submit/wait: %s", err.msg);
    CHECK(!memcmp(got, ref, sizeof(float) * (size_t)V * n), "denoiser async logits differ");

    /* two activation sets: window A (rows [0, 32)) on set 0 and window B
     * (rows [32, 64), reading A's rows) on set 1 in flight at once; the
     * device runs B after A, so both logits equal the CPU's A-then-B */
    sp.n_act_sets = 2;
    sp.n_ctx = 128;
    ts_state *two = ts_state_new(m, &sp, &err);
    CHECK(two && ts_state_n_act_sets(two) == 2, "two activation sets: %s (%d)", err.msg,
          two ? ts_state_n_act_sets(two) : 0);
    int32_t tok_b[32];
    for (int i = 0; i < n; i++) tok_b[i] = (i * 53 + 11) % V;
    float *ref_b = malloc(sizeof(float) * (size_t)V * n), *got_a = malloc(sizeof(float) * (size_t)V * n),
          *got_b = malloc(sizeof(float) * (size_t)V * n);
    CHECK(!ts_forward_window(cpu, tok, n, 0, n, ref, &err), "cpu A: %s", err.msg);
    CHECK(!ts_forward_window(cpu, tok_b, n, n, 2 * n, ref_b, &err), "cpu B: %s", err.msg);
    if (two && ts_state_n_act_sets(two) == 2) {
        const uint64_t u0 = ts_now_ns();
        CHECK(!ts_forward_window_submit_set(two, 0, tok, n, 0, n, got_a, &err), "submit A: %s", err.msg);
        CHECK(!ts_forward_window_submit_set(two, 1, tok_b, n, n, 2 * n, got_b, &err), "submit B: %s", err.msg);
        const double both_ms = (double)(ts_now_ns() - u0) / 1e6;
        ts_err e3 = {{0}};
        CHECK(ts_forward(two, tok, 1, NULL, &e3) && strstr(e3.msg, "in flight"), "a CPU forward meanwhile: '%s'",
              e3.msg);
        CHECK(!ts_forward_window_wait_set(two, 1, &err) && !ts_forward_window_wait_set(two, 0, &err), "wait: %s",
              err.msg);
        const double total2 = (double)(ts_now_ns() - u0) / 1e6;
        CHECK(!memcmp(got_a, ref, sizeof(float) * (size_t)V * n) && !memcmp(got_b, ref_b, sizeof(float) * (size_t)V * n),
              "two sets in flight differ from the CPU's A then B");
        CHECK(both_ms < 0.5 * total2, "both submits returned after %.1f ms of %.1f", both_ms, total2);
        printf("two activation sets: A and B submitted in %.1f ms, both done at %.1f ms; logits bit-identical to the "
               "CPU's A then B\n",
               both_ms, total2);
    }
    ts_state_free(two);
    free(ref_b), free(got_a), free(got_b);
    free(ref);
    free(got);
    ts_state_free(cpu);
    ts_state_free(dev);
    ts_mdl_free(m);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
