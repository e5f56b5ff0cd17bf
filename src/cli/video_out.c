/* video_out.c - y4m and PNG frame writers (video_out.h). */
#include "video_out.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef TS_HAVE_PNG
#include <png.h>
#endif

/* [-1, 1] -> [0, 1], as diffusers' postprocess (x / 2 + 0.5, clamped) */
static float unit(float x) {
    const float v = x * 0.5f + 0.5f;
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

static uint8_t to8(float v) { return (uint8_t)lrintf(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v); }

int video_write_y4m(const char *path, const float *frames, int n, int h, int w, int fps) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    const size_t plane = (size_t)h * (size_t)w, chan = (size_t)n * plane;
    uint8_t *yuv = malloc(3 * plane);
    if (!yuv) {
        fclose(f);
        fprintf(stderr, "error: out of memory\n");
        return -1;
    }
    fprintf(f, "YUV4MPEG2 W%d H%d F%d:1 Ip A1:1 C444\n", w, h, fps);
    bool ok = true;
    for (int t = 0; t < n && ok; t++) {
        const float *R = frames + (size_t)t * plane, *G = R + chan, *B = G + chan;
        for (size_t i = 0; i < plane; i++) {
            const float r = unit(R[i]), g = unit(G[i]), b = unit(B[i]);
            yuv[i] = to8(16.0f + 65.481f * r + 128.553f * g + 24.966f * b);
            yuv[plane + i] = to8(128.0f - 37.797f * r - 74.203f * g + 112.0f * b);
            yuv[2 * plane + i] = to8(128.0f + 112.0f * r - 93.786f * g - 18.214f * b);
        }
        ok = fputs("FRAME\n", f) >= 0 && fwrite(yuv, 1, 3 * plane, f) == 3 * plane;
    }
    free(yuv);
    if (fclose(f) || !ok) {
        fprintf(stderr, "error: writing '%s' failed\n", path);
        return -1;
    }
    return 0;
}

#ifdef TS_HAVE_PNG
bool video_png_available(void) { return true; }

static int write_png(const char *path, const uint8_t *rgb, int h, int w) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        fprintf(stderr, "error: libpng failed writing '%s'\n", path);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(rgb + (size_t)y * (size_t)w * 3));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f)) {
        fprintf(stderr, "error: writing '%s' failed\n", path);
        return -1;
    }
    return 0;
}

int video_write_pngs(const char *dir, const float *frames, int n, int h, int w) {
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "error: cannot create '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    const size_t plane = (size_t)h * (size_t)w, chan = (size_t)n * plane;
    uint8_t *rgb = malloc(3 * plane);
    char *path = malloc(strlen(dir) + 32);
    int rc = rgb && path ? 0 : -1;
    for (int t = 0; t < n && !rc; t++) {
        for (size_t i = 0; i < plane; i++)
            for (int c = 0; c < 3; c++)
                rgb[3 * i + (size_t)c] = to8(255.0f * unit(frames[(size_t)c * chan + (size_t)t * plane + i]));
        sprintf(path, "%s/frame_%04d.png", dir, t);
        rc = write_png(path, rgb, h, w);
    }
    free(rgb);
    free(path);
    return rc;
}
#else
bool video_png_available(void) { return false; }

int video_write_pngs(const char *dir, const float *frames, int n, int h, int w) {
    (void)frames, (void)n, (void)h, (void)w;
    fprintf(stderr, "error: PNG frames to '%s': this build has no libpng (install libpng-dev and rebuild)\n", dir);
    return -1;
}
#endif
