/* simple.c - the smallest useful tessera program: load a model, stream a
 * greedy continuation of a prompt to stdout, print the counters.
 *
 *   cc simple.c $(pkg-config --cflags --libs tessera) -o simple
 *   ./simple models/SmolLM2-135M-Instruct.Q4_1.gguf "The capital of France is" 16
 */
#include <stdio.h>
#include <stdlib.h>

#include <tessera.h>

/* Each call brings the text one token completed (whole UTF-8 sequences only). */
static bool print_piece(const char *piece, size_t len, int32_t token, void *user_data) {
    (void)token;
    (void)user_data;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true; /* false would stop the generation */
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *prompt = argc > 2 ? argv[2] : "The capital of France is";
    int n_predict = argc > 3 ? atoi(argv[3]) : 32;

    ts_error err;
    ts_model *model = NULL;
    if (ts_model_load(path, NULL, &model, &err) != TS_OK) {
        fprintf(stderr, "simple: %s (%s)\n", err.message, ts_status_string(err.status));
        return 1;
    }

    ts_sampling_params sampling = ts_sampling_default_params();
    sampling.temp = 0.0f; /* greedy: the same text every run */
    ts_context_params cp = ts_context_default_params();
    cp.n_ctx = 512;
    cp.sampling = &sampling;
    ts_context *ctx = NULL;
    if (ts_context_create(model, &cp, &ctx, &err) != TS_OK) {
        fprintf(stderr, "simple: %s\n", err.message);
        ts_model_free(model);
        return 1;
    }

    ts_generate_params gp = ts_generate_default_params();
    gp.n_predict = n_predict;
    gp.on_token = print_piece;
    printf("%s", prompt);
    int status = 0;
    if (ts_generate(ctx, prompt, &gp) != TS_OK) {
        fprintf(stderr, "\nsimple: %s\n", ts_last_error(ctx));
        status = 1;
    } else {
        ts_stats st = TS_STRUCT_INIT(ts_stats);
        ts_context_get_stats(ctx, &st);
        printf("\n");
        fprintf(stderr, "tessera %s: %lld prompt tokens, %lld generated (%.1f tok/s, stop: %s) on %s\n",
                ts_version(), (long long)st.n_prompt_tokens, (long long)st.n_gen_tokens, st.decode_tps,
                ts_stop_reason_name(st.stop_reason), st.engine);
    }
    ts_context_free(ctx);
    ts_model_free(model);
    return status;
}
