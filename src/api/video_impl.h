/* video_impl.h - what the video API's files share (video.c, the
 * generation; video_pipe.c, the two-engine stream): the handle and the
 * helpers both need. Private to src/api. */
#ifndef TS_API_VIDEO_IMPL_H
#define TS_API_VIDEO_IMPL_H

#include <stdint.h>

#include "api/api_internal.h"
#include "text/tokenizer.h"
#include "video/umt5.h"
#include "video/wan.h"
#include "video/wan_vae.h"

#define VAE_T 4 /* Wan-VAE strides: 4 frames, 8 pixels */
#define VAE_S 8
#define LATENT_CH 16

struct ts_video {
    ts_wan *wan;
    ts_wan_lora *lora; /* NULL: none */
    ts_umt5 *t5;       /* NULL: none */
    ts_wan_vae *vae;   /* NULL: none */
    ts_wan_vae_run *vae_run;
    int vae_grid[3];
    ts_umt5_run *t5run;
    ts_tokenizer *tok;
    ts_wan_run *run; /* the last grid's run, reused while the grid and text length stay */
    ts_wan_run_params rp;
    char engine[128];
    int n_threads;
    ts_logger log;
};

/* The latent grid (T, h, w) of a video size, or -1 with a message. */
int ts_video_grid(const ts_video *v, int32_t frames, int32_t height, int32_t width, int *T, int *h, int *w, char *msg,
                  size_t cap);
/* The checks every generation shares (ts_video_generate,
 * ts_video_pipe_open): the grid into T, h, w, the text, cfg's range, the
 * VAE for frames, the negative text's rows, the adapter for detail_below,
 * the custom timesteps (copied into custom[TS_FLOW_MAX_STEPS]). TS_OK, or
 * the failure through err. */
ts_status ts_video_check_gen(const ts_video *v, const ts_video_gen_params *p, int *T, int *h, int *w,
                             double *custom, ts_error *err);
/* Standard normal values from splitmix64 (Box-Muller): a seed's noise. */
void ts_video_noise(float *x, int64_t n, uint64_t seed);

#endif
