/* wan_vae.h - the Wan2.1 VAE decoder (Wan-VAE): latents [16][T][h][w] to
 * video frames [3][1 + 4 (T - 1)][8h][8w], as diffusers' AutoencoderKLWan
 * decodes them, one latent frame at a time with a causal feature cache.
 *
 * The file: a GGUF with the original tensor names (Wan2.1_VAE.pth's decoder
 * part: conv2 = the post-quant 1x1x1 conv, decoder.conv1, decoder.middle.0/2
 * (residual blocks) and .1 (attention), decoder.upsamples.0 .. 14 (four
 * stages of three residual blocks, the resamplers at 3, 7, 11: time_conv
 * where the stage doubles the frames), decoder.head.0/2), weights of more
 * than two dimensions stored as [out][rest] (comfy.gguf.orig_shape.* may
 * record the shape), any type ts_dequant_row reads; optionally
 * wan_vae.latents_mean / latents_std (16 floats each; default Wan2.1's).
 * Channel counts come from the shapes. Tools: tools/gen_wan_vae.py.
 *
 * The blocks (diffusers' names): residual = x W_sc + conv2(silu(rms(conv1(
 * silu(rms(x)))))) with causal 3x3x3 convolutions (two frames of zero
 * padding before the first frame, then the cache of the previous frames);
 * rms(x) = x / max(|x|, 1e-12) sqrt(C) gamma over the channels of a pixel;
 * the middle attention: per frame, one head over the pixels, 1x1 q/k/v and
 * projection; upsample3d: a causal (3,1,1) conv to 2C channels whose halves
 * become two frames (skipped for the first chunk, zero history for the
 * second: diffusers' "Rep"), then nearest 2x and a 3x3 conv to C/2;
 * upsample2d: the spatial part only. Output clamped to [-1, 1].
 *
 * Activations are channels-last ([frames][H][W][C]) so that every
 * convolution is an im2col (rows = pixels) times the weights: the matmuls
 * run as engine graphs (the run's engine, `cpu` by default), in tiles of
 * TS_VAE_TILE pixels; norms, SiLU, upsampling and the im2col on the host.
 * A run holds everything for one latent grid (caches, four activation
 * buffers of the largest level), so decoding allocates nothing per frame.
 */
#ifndef TS_VIDEO_WAN_VAE_H
#define TS_VIDEO_WAN_VAE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"

#define TS_VAE_TILE 256 /* pixels per matmul */

typedef struct ts_wan_vae ts_wan_vae;
ts_wan_vae *ts_wan_vae_open(const char *path, ts_err *err);
void ts_wan_vae_close(ts_wan_vae *v);
int ts_wan_vae_z_dim(const ts_wan_vae *v);
/* The pipeline's de-normalisation, x = latents * std + mean per channel,
 * in place over [z][n] values. */
void ts_wan_vae_denormalize(const ts_wan_vae *v, float *latents, int64_t n_per_channel);

typedef struct ts_wan_vae_run ts_wan_vae_run;
/* For latents of T frames of h x w; engine NULL = "cpu". */
ts_wan_vae_run *ts_wan_vae_run_new(ts_wan_vae *v, const char *engine, int n_threads, int T, int h, int w,
                                   ts_err *err);
void ts_wan_vae_run_free(ts_wan_vae_run *r);
/* Bytes of the run's buffers (activations, caches, im2col tiles). */
uint64_t ts_wan_vae_run_bytes(const ts_wan_vae_run *r);

/* latents [z][T][h][w] (de-normalised) -> frames [3][1 + 4 (T - 1)][8h][8w]
 * in [-1, 1]. progress (may be NULL) after each latent frame; returning
 * false cancels (-1, err says so). */
typedef bool (*ts_wan_vae_progress)(int frame, int n_frames, void *user);
int ts_wan_vae_decode(ts_wan_vae_run *r, const float *latents, float *frames, ts_wan_vae_progress progress,
                      void *user, ts_err *err);

typedef struct ts_wan_vae_stats {
    uint64_t frames_ns; /* wall time of the decode calls */
    uint64_t matmul_ns; /* of it, in the engine's matmuls */
    double flops;       /* multiply-adds x 2 of the convolutions and attention */
} ts_wan_vae_stats;
void ts_wan_vae_run_stats(const ts_wan_vae_run *r, ts_wan_vae_stats *out);

#endif
