/* video_out.h - writing decoded video frames: YUV4MPEG2 (.y4m, which
 * ffmpeg and mpv open) and PNG frames (libpng, when the build has it). */
#ifndef TS_CLI_VIDEO_OUT_H
#define TS_CLI_VIDEO_OUT_H

#include <stdbool.h>
#include <stdint.h>

/* frames: [3][n][h][w] RGB in [-1, 1] (the VAE's output; clamped), written
 * at fps frames per second as 4:4:4 BT.601 (limited range). 0, or -1 with
 * the error printed. */
int video_write_y4m(const char *path, const float *frames, int n, int h, int w, int fps);

/* The same frames as DIR/frame_0000.png, ... (8-bit RGB). -1 with the
 * error printed (also when the build has no libpng). */
int video_write_pngs(const char *dir, const float *frames, int n, int h, int w);
bool video_png_available(void);

#endif
