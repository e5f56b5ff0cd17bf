/* cmd_video.c - `tessera video`: text-to-video with a Wan2.1 diffusion
 * transformer (ts_video_generate): the text encoder's states in, the
 * denoised latents out (.npy or raw f32), progress per step on stderr, the
 * counters as one JSON object with --stats json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_util.h"
#include "stream_cli.h"
#include "video_out.h"

static void help(FILE *f) {
    const ts_video_gen_params d = ts_video_gen_default_params();
    fprintf(f,
            "usage: tessera video -m WAN.gguf (--t5 UMT5.gguf -p TEXT | --text-embeddings FILE) [options]\n\n"
            "Denoises a video's latents with a Wan2.1 text-to-video diffusion transformer (the GGUF\n"
            "conversions with the original tensor names) by flow matching, conditioned on the umT5\n"
            "encoder's states of the prompt, and writes the latents (docs/VIDEO.md).\n\n"
            "  -m, --model FILE         Wan2.1 DiT GGUF (required)\n"
            "      --t5 FILE            the umT5 text encoder GGUF (t5encoder, with its tokenizer)\n"
            "  -p, --prompt TEXT        the prompt (needs --t5)\n"
            "      --negative-prompt T  for --cfg > 1 (default \"\")\n"
            "      --text-embeddings F  instead of a prompt: the text encoder's states, .npy (float32,\n"
            "                           [n][text_dim] or [1][n][text_dim]) or raw float32 rows of text_dim\n"
            "      --negative-embeddings F  the negative prompt's, for --cfg > 1 (default: zeros)\n"
            "      --text-embeddings-out F  write the prompt's states ([512][text_dim] .npy or raw)\n"
            "      --frames N           video frames, 4k + 1 (default %d)\n"
            "      --size HxW           height x width in pixels, multiples of 16 (default %dx%d)\n"
            "      --steps N            denoising steps (default %d)\n"
            "      --sampler NAME       unipc (default; the Wan pipelines') or euler (flow-match Euler)\n"
            "      --shift S            flow shift (default %.1f; 1.0 with --timesteps)\n"
            "      --timesteps LIST     a fixed schedule, e.g. 1000,992,982,949,905,810 (DCM's): Euler\n"
            "                           over these timesteps (--steps is then their count)\n"
            "      --cfg X              classifier-free guidance scale (default %.1f = off; > 1 runs the\n"
            "                           transformer twice per step)\n"
            "      --lora FILE          DCM's detail expert: a low-rank adapter GGUF on the attention\n"
            "                           projections (blocks.N.self_attn.q.lora_A.weight, ...; docs/VIDEO.md)\n"
            "      --lora-scale X       multiplies the adapter's alpha / rank (default 1)\n"
            "      --detail-below T     steps with timestep < T run the detail expert (needs --lora)\n"
            "      --seed S             noise seed (default %llu)\n"
            "      --latents-in F       start from these latents (.npy or raw f32 [16][T][H/8][W/8])\n"
            "                           instead of noise\n"
            "      --vae FILE           the Wan2.1 VAE (GGUF, original names): decodes the latents to frames\n"
            "  -o, --output F.y4m       write the video (YUV4MPEG2 4:4:4, which ffmpeg and mpv open; needs --vae)\n"
            "      --png-dir DIR        also write DIR/frame_0000.png, ... (needs --vae)\n"
            "      --fps N              frame rate in the y4m header (default 16, Wan's)\n"
            "      --video-out F        the decoded frames as floats in [-1, 1], [3][frames][H][W] (.npy or raw)\n"
            "      --latents-out F      write the denoised latents (.npy when F ends in .npy, else raw f32)\n"
            "      --trajectory-out F   write the latents after every step ([steps][16][T][H/8][W/8], same\n"
            "                           formats)\n"
            "      --engine E           engine of the transformer's graphs (default cpu; see tessera devices)\n"
            "\nA stream of videos on two engines (seed 002's pipeline, docs/PIPE.md):\n"
            "      --pipe E             engine A: runs the first k of each video's steps x blocks block\n"
            "                           executions; --engine (B) runs the rest and the VAE, one thread\n"
            "                           each. B maps the weights A packed where it reads their layout\n"
            "                           (vnni + amx,act=int8; cpu + loop): one copy. Video i has seed S + i\n"
            "                           and is written to -o / --latents-out with _i before the extension\n"
            "      --videos N           videos in the stream (default 4)\n"
            "      --cut C              auto (default: Eq. 5 from co-run rates), solo (from solo rates),\n"
            "                           step (the best step boundary), K or K1,K2,... (block indices\n"
            "                           0 .. B), sweep (every cut: predicted vs measured period), rates\n"
            "                           (measure only) or setup (the weights and PSS only)\n"
            "      --slo S              every video within S seconds: the cut of the best period that\n"
            "                           meets it, videos admitted just in time (videos per hour reported)\n"
            "      --probe N            blocks per rate measurement (default: one step's)\n"
            "      --baselines          also A alone, B alone and both data-parallel (whole videos)\n"
            "      --own-copies         B packs its own weights (the data-parallel memory baseline)\n"
            "  -t, --threads N          worker threads (default: physical cores)\n"
            "      --stats json         print the counters as ONE JSON object on stderr: steps, forwards,\n"
            "                           tokens (per block run), total_ms, dit_ms, block_ms, ms_per_block,\n"
            "                           block_gflops, embed_ms, head_ms, text_ms, sampler_ms, encoder_ms,\n"
            "                           vae_ms, vae_gflops, peak_rss_bytes, step_ms (each step)\n"
            "  -q, --quiet              no per-step progress\n"
            "  -h, --help               this help\n\n"
            "T = (frames - 1) / 4 + 1 latent frames of (height/8) x (width/8); the transformer runs\n"
            "T x (height/16) x (width/16) tokens per block.\n",
            (int)d.frames, (int)d.height, (int)d.width, (int)d.steps, (double)d.shift, (double)d.cfg,
            (unsigned long long)d.seed);
}

/* float32 data of a .npy file (C order, '<f4') or raw f32; *n values.
 * shape[0..*nd) gets the .npy shape (nd 0 for raw). NULL with a message. */
static float *read_floats(const char *path, int64_t *n, int64_t *shape, int *nd) {
    size_t len = 0;
    char *buf = cli_read_file(path, &len);
    *nd = 0;
    if (!buf) {
        fprintf(stderr, "error: cannot read '%s'\n", path);
        return NULL;
    }
    size_t off = 0;
    if (len >= 10 && !memcmp(buf, "\x93NUMPY", 6)) {
        const int major = (unsigned char)buf[6];
        const size_t hl = major == 1 ? (size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8
                                     : len >= 12 ? (size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8 |
                                                       (size_t)(unsigned char)buf[10] << 16 |
                                                       (size_t)(unsigned char)buf[11] << 24
                                                 : (size_t)-1;
        off = (major == 1 ? 10 : 12) + hl;
        if (hl == (size_t)-1 || off > len) {
            fprintf(stderr, "error: '%s': truncated .npy header\n", path);
            free(buf);
            return NULL;
        }
        char hdr[512];
        const size_t hn = hl < sizeof hdr - 1 ? hl : sizeof hdr - 1;
        memcpy(hdr, buf + (major == 1 ? 10 : 12), hn);
        hdr[hn] = 0;
        if (!strstr(hdr, "'descr': '<f4'") || strstr(hdr, "'fortran_order': True")) {
            fprintf(stderr, "error: '%s': only little-endian float32 arrays in C order are read (np.float32)\n",
                    path);
            free(buf);
            return NULL;
        }
        const char *sp = strstr(hdr, "'shape': (");
        if (sp) {
            sp += 10;
            while (*sp && *sp != ')' && *nd < 8) {
                char *end;
                const long long v = strtoll(sp, &end, 10);
                if (end == sp)
                    break;
                shape[(*nd)++] = v;
                sp = end;
                while (*sp == ',' || *sp == ' ')
                    sp++;
            }
        }
    }
    if ((len - off) % 4) {
        fprintf(stderr, "error: '%s': %zu bytes of data is not a whole number of float32 values\n", path, len - off);
        free(buf);
        return NULL;
    }
    *n = (int64_t)((len - off) / 4);
    float *x = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *x);
    if (x)
        memcpy(x, buf + off, (size_t)*n * 4);
    free(buf);
    return x;
}

static int write_floats(const char *path, const float *x, const int64_t *shape, int nd) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write '%s'\n", path);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= shape[i];
    const size_t pl = strlen(path);
    if (pl > 4 && !strcmp(path + pl - 4, ".npy")) {
        char hdr[256];
        int o = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
        for (int i = 0; i < nd; i++)
            o += snprintf(hdr + o, sizeof hdr - (size_t)o, "%lld, ", (long long)shape[i]);
        o += snprintf(hdr + o, sizeof hdr - (size_t)o, "), }");
        /* pad with spaces so that the data starts 64-byte aligned; end with a newline */
        while ((10 + o + 1) % 64)
            hdr[o++] = ' ';
        hdr[o++] = '\n';
        const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(o & 255),
                                       (unsigned char)(o >> 8)};
        fwrite(pre, 1, 10, f);
        fwrite(hdr, 1, (size_t)o, f);
    }
    const bool ok = fwrite(x, sizeof *x, (size_t)n, f) == (size_t)n;
    if (fclose(f) || !ok) {
        fprintf(stderr, "error: writing '%s' failed\n", path);
        return -1;
    }
    return 0;
}

typedef struct step_log {
    bool quiet;
    double *ms; /* [steps]: each step's time, for --stats json */
    int n;
} step_log;

static bool on_step(int32_t step, int32_t n, double ms, void *user) {
    step_log *sl = user;
    if (sl->ms && step >= 1 && step <= sl->n)
        sl->ms[step - 1] = ms;
    if (!sl->quiet)
        fprintf(stderr, "\rstep %d/%d  %.2f s/step ", (int)step, (int)n, ms * 1e-3);
    if (step == n && !sl->quiet)
        fputc('\n', stderr);
    return true;
}

/* ---- --pipe: a stream of videos on two engines ---- */

typedef struct stream_out {
    const char *y4m, *lat_out;
    int32_t frames, height, width, fps;
    int64_t lshape[4];
    bool decode; /* --vae: the VAE is B's tail (frames written with -o) */
    bool quiet, failed, announce;
} stream_out;

/* PATH with _i before its extension (out.y4m -> out_2.y4m) */
static void indexed(char *buf, size_t cap, const char *path, int i) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash))
        snprintf(buf, cap, "%.*s_%d%s", (int)(dot - path), path, i, dot);
    else
        snprintf(buf, cap, "%s_%d", path, i);
}

static bool on_stream_video(int32_t i, const float *lat, const float *video, void *user) {
    stream_out *o = user;
    char path[1024];
    if (o->lat_out) {
        indexed(path, sizeof path, o->lat_out, i);
        if (write_floats(path, lat, o->lshape, 4))
            return !(o->failed = true);
    }
    if (o->y4m && video) {
        indexed(path, sizeof path, o->y4m, i);
        if (video_write_y4m(path, video, o->frames, o->height, o->width, o->fps))
            return !(o->failed = true);
    }
    if (!o->quiet && o->announce)
        fprintf(stderr, "video %d done\n", (int)i);
    return true;
}

static ts_status v_measure(void *p, int32_t probe, ts_stream_rates *solo, ts_stream_rates *co, ts_error *err) {
    return ts_video_pipe_measure(p, probe, solo, co, err);
}
static ts_status v_run(void *p, int32_t cut, int32_t n, const ts_stream_rates *pace, double slo, ts_stream_result *r,
                       ts_error *err) {
    return ts_video_pipe_run(p, cut, n, pace, slo, r, err);
}
static ts_status v_whole(void *p, uint32_t stages, int32_t n, ts_stream_result *r, ts_error *err) {
    return ts_video_pipe_run_whole(p, stages, n, r, err);
}

static int video_stream(ts_video *vid, ts_video_gen_params *gp, const char *engine_a, const char *engine_b,
                        const char *cut_s, int32_t n_videos, double slo, int32_t probe, bool baselines, bool own,
                        stream_out *out, bool stats_json) {
    ts_video_pipe_params pp = ts_video_pipe_default_params();
    pp.engine_a = engine_a;
    pp.engine_b = engine_b;
    pp.own_copies = own;
    pp.decode = out->decode;
    pp.on_video = on_stream_video;
    pp.user_data = out;
    ts_error err = {0};
    ts_video_pipe *p = NULL;
    if (ts_video_pipe_open(vid, gp, &pp, &p, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        return 1;
    }
    cli_stream cs = {.p = p, .measure = v_measure, .run = v_run, .run_whole = v_whole, .unit = "video",
                     .units = "videos", .quiet = out->quiet, .stats_json = stats_json, .announce = &out->announce};
    ts_video_pipe_get_info(p, &cs.info);
    const ts_stream_info *in = &cs.info;
    const int B = in->n_blocks, L = in->step_blocks;
    if (!out->quiet)
        fprintf(stderr,
                "stream: A = %s, B = %s (one thread each), %d block executions per video (%d steps x %d blocks) of "
                "%lld tokens\nweights: %.1f MiB in the file, %.1f MiB packed by A and mapped by B (%s); PSS %.1f MiB\n",
                in->engine_a, in->engine_b, B, B / L, L, (long long)in->tokens, (double)in->weight_bytes / 1048576.0,
                (double)in->shared_bytes / 1048576.0, in->shared_bytes ? "one copy" : "none shared",
                (double)in->pss_bytes / 1048576.0);
    int rc = cli_stream_cuts(&cs, cut_s, n_videos, slo, probe, baselines);
    if (!rc && out->failed)
        rc = 1;
    ts_video_pipe_free(p);
    return rc;
}

int cli_video(int argc, char **argv) {
    ts_video_gen_params gp = ts_video_gen_default_params();
    const char *model = NULL, *text_path = NULL, *neg_path = NULL, *lat_in = NULL, *lat_out = NULL, *engine = NULL,
               *traj_out = NULL, *lora = NULL, *t5 = NULL, *prompt = NULL, *neg_prompt = NULL, *emb_out = NULL,
               *vae = NULL, *y4m = NULL, *png_dir = NULL, *video_out = NULL;
    int32_t fps = 16, n_videos = 4, probe = 0;
    const char *pipe_a = NULL, *cut_s = "auto";
    float slo = 0.0f;
    bool baselines = false, own_copies = false;
    float lora_scale = 0.0f;
    int32_t n_threads = 0;
    bool stats_json = false, quiet = false, shift_set = false;
    float custom_t[1000];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!strcmp(a, "--baselines") || !strcmp(a, "--own-copies")) {
            *(a[2] == 'b' ? &baselines : &own_copies) = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: unknown option or missing value: '%s' (see tessera video --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--text-embeddings")) text_path = v;
        else if (!strcmp(a, "--negative-embeddings")) neg_path = v;
        else if (!strcmp(a, "--latents-in")) lat_in = v;
        else if (!strcmp(a, "--latents-out")) lat_out = v;
        else if (!strcmp(a, "--trajectory-out")) traj_out = v;
        else if (!strcmp(a, "--lora")) lora = v;
        else if (!strcmp(a, "--t5")) t5 = v;
        else if (!strcmp(a, "--vae")) vae = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) y4m = v;
        else if (!strcmp(a, "--png-dir")) png_dir = v;
        else if (!strcmp(a, "--video-out")) video_out = v;
        else if (!strcmp(a, "--fps")) rc = cli_parse_i32(a, v, 1, &fps);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--negative-prompt")) neg_prompt = v;
        else if (!strcmp(a, "--text-embeddings-out")) emb_out = v;
        else if (!strcmp(a, "--lora-scale")) rc = cli_parse_f32(a, v, 1e-6f, 1e6f, &lora_scale);
        else if (!strcmp(a, "--detail-below")) rc = cli_parse_f32(a, v, 0.0f, 1000.0f, &gp.detail_below);
        else if (!strcmp(a, "--engine")) engine = v;
        else if (!strcmp(a, "--pipe")) pipe_a = v;
        else if (!strcmp(a, "--cut")) cut_s = v;
        else if (!strcmp(a, "--videos")) rc = cli_parse_i32(a, v, 1, &n_videos);
        else if (!strcmp(a, "--probe")) rc = cli_parse_i32(a, v, 1, &probe);
        else if (!strcmp(a, "--slo")) rc = cli_parse_f32(a, v, 1e-6f, 1e9f, &slo);
        else if (!strcmp(a, "--frames")) rc = cli_parse_i32(a, v, 1, &gp.frames);
        else if (!strcmp(a, "--steps")) rc = cli_parse_i32(a, v, 1, &gp.steps);
        else if (!strcmp(a, "--shift")) rc = cli_parse_f32(a, v, 1e-3f, 1000.0f, &gp.shift), shift_set = true;
        else if (!strcmp(a, "--cfg")) rc = cli_parse_f32(a, v, 0.0f, 100.0f, &gp.cfg);
        else if (!strcmp(a, "--seed")) rc = cli_parse_u64(a, v, &gp.seed);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) rc = cli_parse_i32(a, v, 1, &n_threads);
        else if (!strcmp(a, "--size")) {
            int hh = 0, ww = 0, used = 0;
            if (sscanf(v, "%dx%d%n", &hh, &ww, &used) != 2 || v[used] || hh < 1 || ww < 1) {
                fprintf(stderr, "error: --size: '%s' is not HEIGHTxWIDTH (e.g. 480x832)\n", v);
                rc = -1;
            }
            gp.height = hh, gp.width = ww;
        } else if (!strcmp(a, "--sampler")) {
            if (!strcmp(v, "unipc")) gp.sampler = TS_VIDEO_UNIPC;
            else if (!strcmp(v, "euler")) gp.sampler = TS_VIDEO_EULER;
            else {
                fprintf(stderr, "error: --sampler: '%s' is not unipc or euler\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--timesteps")) {
            int n = 0;
            const char *s = v;
            while (*s && n < 1000) {
                char *end;
                const double t = strtod(s, &end);
                if (end == s || !(t > 0.0 && t <= 1000.0)) {
                    fprintf(stderr, "error: --timesteps: '%s' is not a list of numbers in (0, 1000]\n", v);
                    return 2;
                }
                custom_t[n++] = (float)t;
                s = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') {
                    fprintf(stderr, "error: --timesteps: unexpected '%c' in '%s'\n", *end, v);
                    return 2;
                }
            }
            gp.timesteps = custom_t;
            gp.n_timesteps = n;
        } else if (!strcmp(a, "--stats")) {
            if (strcmp(v, "json")) {
                fprintf(stderr, "error: --stats: only 'json' is supported (got '%s')\n", v);
                rc = -1;
            }
            stats_json = true;
        } else {
            fprintf(stderr, "error: unknown option '%s' (see tessera video --help)\n", a);
            rc = -1;
        }
        if (rc)
            return 2;
    }
    if (!model || (!text_path && !prompt)) {
        fprintf(stderr, "error: -m WAN.gguf and a prompt (-p TEXT with --t5 UMT5.gguf) or --text-embeddings FILE "
                        "are required (see tessera video --help)\n");
        return 2;
    }
    if (prompt && text_path) {
        fprintf(stderr, "error: give -p TEXT or --text-embeddings FILE, not both\n");
        return 2;
    }
    if ((y4m || png_dir || video_out) && !vae) {
        fprintf(stderr, "error: writing frames needs the Wan VAE: --vae WAN_VAE.gguf (--latents-out writes the "
                        "latents without it)\n");
        return 2;
    }
    if (png_dir && !video_png_available()) {
        fprintf(stderr, "error: --png-dir: this build has no libpng (install libpng-dev and rebuild); -o writes y4m\n");
        return 2;
    }
    if (prompt && !t5) {
        fprintf(stderr, "error: -p needs the text encoder: --t5 UMT5.gguf (umt5-xxl-encoder), or give "
                        "--text-embeddings\n");
        return 2;
    }
    if (gp.timesteps && !shift_set)
        gp.shift = 1.0f;
    if (pipe_a && (traj_out || png_dir || video_out || lat_in)) {
        fprintf(stderr, "error: --pipe writes each video's latents (--latents-out) and y4m (-o); --trajectory-out, "
                        "--png-dir, --video-out and --latents-in are single-video options\n");
        return 2;
    }
    ts_video_params vp = ts_video_default_params();
    vp.engine = engine;
    vp.n_threads = n_threads;
    vp.lora_path = lora;
    vp.t5_path = t5;
    vp.vae_path = vae;
    vp.lora_scale = lora_scale;
    vp.log = cli_log;
    ts_error err = {0};
    ts_video *vid = NULL;
    if (ts_video_load(model, &vp, &vid, &err) != TS_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        return 1;
    }
    ts_video_info info;
    ts_video_get_info(vid, &info);
    int rc = 1;
    float *text = NULL, *neg = NULL, *init = NULL, *lat = NULL, *traj = NULL, *vid_frames = NULL;
    int64_t n, shape[8];
    int nd;
    if (text_path) {
        if (!(text = read_floats(text_path, &n, shape, &nd)))
            goto done;
        if (n % info.text_dim || (nd && shape[nd - 1] != info.text_dim) || n == 0) {
            fprintf(stderr, "error: '%s': %lld values are not rows of the model's text_dim %d\n", text_path,
                    (long long)n, (int)info.text_dim);
            goto done;
        }
        gp.text = text;
        gp.n_text = (int32_t)(n / info.text_dim);
    } else {
        /* encoded here (not inside generate) so that the states can be written */
        if (!(text = malloc(sizeof(float) * TS_VIDEO_TEXT_LEN * (size_t)info.text_dim))) {
            fprintf(stderr, "error: out of memory\n");
            goto done;
        }
        int32_t n_tok = 0;
        if (ts_video_encode_text(vid, prompt, text, &n_tok, &err) != TS_OK) {
            fprintf(stderr, "error: %s\n", err.message);
            goto done;
        }
        if (!quiet)
            fprintf(stderr, "video: prompt: %d tokens\n", (int)n_tok);
        const int64_t eshape[2] = {TS_VIDEO_TEXT_LEN, info.text_dim};
        if (emb_out && write_floats(emb_out, text, eshape, 2))
            goto done;
        gp.text = text;
        gp.n_text = TS_VIDEO_TEXT_LEN;
        if (gp.cfg > 1.0f && !neg_path) {
            if (!(neg = malloc(sizeof(float) * TS_VIDEO_TEXT_LEN * (size_t)info.text_dim))) {
                fprintf(stderr, "error: out of memory\n");
                goto done;
            }
            if (ts_video_encode_text(vid, neg_prompt ? neg_prompt : "", neg, NULL, &err) != TS_OK) {
                fprintf(stderr, "error: negative prompt: %s\n", err.message);
                goto done;
            }
            gp.neg_text = neg;
            gp.n_neg_text = TS_VIDEO_TEXT_LEN;
        }
    }
    if (neg_path) {
        if (!(neg = read_floats(neg_path, &n, shape, &nd)))
            goto done;
        if (n % info.text_dim || n == 0) {
            fprintf(stderr, "error: '%s': %lld values are not rows of text_dim %d\n", neg_path, (long long)n,
                    (int)info.text_dim);
            goto done;
        }
        gp.neg_text = neg;
        gp.n_neg_text = (int32_t)(n / info.text_dim);
    }
    if (pipe_a) {
        const int64_t T = (gp.frames - 1) / 4 + 1;
        stream_out so = {.y4m = y4m, .lat_out = lat_out, .frames = gp.frames, .height = gp.height,
                         .width = gp.width, .fps = fps, .lshape = {16, T, gp.height / 8, gp.width / 8},
                         .decode = vae != NULL, .quiet = quiet};
        rc = video_stream(vid, &gp, pipe_a, engine ? engine : "cpu", cut_s, n_videos, slo, probe, baselines,
                          own_copies, &so, stats_json);
        goto done;
    }
    const int64_t len = ts_video_latent_count(vid, gp.frames, gp.height, gp.width);
    if (len < 0) {
        /* the library says why */
        float dummy = 0;
        gp.init_latents = NULL;
        ts_video_generate(vid, &gp, &dummy, NULL, &err);
        fprintf(stderr, "error: %s\n", err.message);
        goto done;
    }
    if (lat_in) {
        if (!(init = read_floats(lat_in, &n, shape, &nd)))
            goto done;
        if (n != len) {
            fprintf(stderr, "error: '%s' holds %lld values; %d frames of %dx%d need %lld latents\n", lat_in,
                    (long long)n, (int)gp.frames, (int)gp.height, (int)gp.width, (long long)len);
            goto done;
        }
        gp.init_latents = init;
    }
    if (!(lat = malloc((size_t)len * sizeof *lat))) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    const int32_t n_steps = gp.timesteps ? gp.n_timesteps : gp.steps;
    if (traj_out && !(gp.trajectory = traj = malloc((size_t)n_steps * (size_t)len * sizeof *traj))) {
        fprintf(stderr, "error: out of memory for %d steps of latents\n", (int)n_steps);
        goto done;
    }
    const int64_t n_px = (int64_t)gp.height * gp.width;
    if (vae && !(gp.video = vid_frames = malloc((size_t)3 * (size_t)gp.frames * (size_t)n_px * sizeof(float)))) {
        fprintf(stderr, "error: out of memory for %d frames of %dx%d\n", (int)gp.frames, (int)gp.height,
                (int)gp.width);
        goto done;
    }
    step_log sl = {.quiet = quiet, .ms = calloc((size_t)n_steps, sizeof(double)), .n = n_steps};
    gp.on_step = on_step;
    gp.user_data = &sl;
    ts_video_stats st = TS_STRUCT_INIT(ts_video_stats);
    if (ts_video_generate(vid, &gp, lat, &st, &err) != TS_OK) {
        fprintf(stderr, "\nerror: %s\n", err.message);
        free(sl.ms);
        goto done;
    }
    const int64_t T = (gp.frames - 1) / 4 + 1;
    const int64_t lshape[4] = {16, T, gp.height / 8, gp.width / 8};
    const int64_t tshape[5] = {st.steps, 16, T, gp.height / 8, gp.width / 8};
    const int64_t vshape[4] = {3, gp.frames, gp.height, gp.width};
    if ((lat_out && write_floats(lat_out, lat, lshape, 4)) || (traj_out && write_floats(traj_out, traj, tshape, 5)) ||
        (video_out && write_floats(video_out, vid_frames, vshape, 4)) ||
        (y4m && video_write_y4m(y4m, vid_frames, gp.frames, gp.height, gp.width, fps)) ||
        (png_dir && video_write_pngs(png_dir, vid_frames, gp.frames, gp.height, gp.width))) {
        free(sl.ms);
        goto done;
    }
    const double blocks = (double)st.forwards * info.n_layer;
    if (stats_json) {
        fprintf(stderr,
                "{\"steps\": %d, \"detail_steps\": %d, \"forwards\": %d, \"tokens\": %lld, \"total_ms\": %.3f, \"dit_ms\": %.3f, "
                "\"block_ms\": %.3f, \"ms_per_block\": %.3f, \"block_gflops\": %.3f, \"embed_ms\": %.3f, "
                "\"head_ms\": %.3f, \"text_ms\": %.3f, \"sampler_ms\": %.3f, \"encoder_ms\": %.3f, \"vae_ms\": %.3f, "
                "\"vae_gflops\": %.3f, \"peak_rss_bytes\": %lld, "
                "\"frames\": %d, \"height\": %d, \"width\": %d, \"layers\": %d, \"step_ms\": [",
                (int)st.steps, (int)st.detail_steps, (int)st.forwards, (long long)st.tokens, st.total_ms, st.dit_ms,
                st.block_ms,
                blocks > 0 ? st.block_ms / blocks : 0.0,
                st.block_ms > 0 ? st.block_flops * blocks / (st.block_ms * 1e6) : 0.0, st.embed_ms, st.head_ms,
                st.text_ms, st.sampler_ms, st.encoder_ms, st.vae_ms,
                st.vae_ms > 0 ? st.vae_flops / (st.vae_ms * 1e6) : 0.0, (long long)st.peak_rss_bytes, (int)gp.frames, (int)gp.height,
                (int)gp.width, (int)info.n_layer);
        for (int i = 0; i < st.steps && sl.ms; i++)
            fprintf(stderr, "%s%.3f", i ? ", " : "", sl.ms[i]);
        fprintf(stderr, "]}\n");
    } else {
        fprintf(stderr, "video: %d steps, %d forwards of %lld tokens in %.1f s (%.1f ms per block, %.1f GFLOP/s)%s%s\n",
                (int)st.steps, (int)st.forwards, (long long)st.tokens, st.total_ms * 1e-3,
                blocks > 0 ? st.block_ms / blocks : 0.0,
                st.block_ms > 0 ? st.block_flops * blocks / (st.block_ms * 1e6) : 0.0, y4m ? "; video -> " : lat_out ? "; latents -> " : "",
                y4m ? y4m : lat_out ? lat_out : "");
    }
    rc = 0;
    free(sl.ms);
done:
    free(text), free(neg), free(init), free(lat), free(traj), free(vid_frames);
    ts_video_free(vid);
    return rc;
}
