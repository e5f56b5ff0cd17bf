/* amx_peak.c - Intel AMX compute peaks of this CPU (docs/PERFORMANCE.md),
 * the AMX counterpart of int8_peak.c. T threads each run 4 independent
 * accumulator tiles (tmm0..3 = A tmm4/5 x B tmm6/7): one tile op issues every
 * ~16 cycles and its latency is ~3-4x that, so 4 chains keep the unit busy.
 * 1e7 iterations of 4 ops per run (~0.2 - 0.4 s):
 *   int8  tdpbssd     s8 x s8 -> s32     16*16*64 = 16384 MACs per instruction
 *   bf16  tdpbf16ps   bf16 pairs -> f32  16*16*32 =  8192 MACs per instruction
 * Prints the median (and best) of -r runs in TMAC/s and Tops (= 2 x TMAC/s),
 * for 1 then 2 threads, or for -t threads only.
 * Where AMX is not usable it prints one "bench_amx_peak: skipped: <reason>"
 * line and exits 0, so scripts may call it on any machine.
 *
 *   bench_amx_peak [-t threads] [-r 5]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__x86_64__)
int main(void) {
    puts("bench_amx_peak: skipped: not an x86-64 build");
    return 0;
}
#else
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ITERS 10000000L /* iterations of the 4 tile ops per run */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define AMX_FN __attribute__((target("amx-tile,amx-int8,amx-bf16")))
/* gcc 12's ldtilecfg / tileloadd asm declares no (or 8 bytes of) memory
 * input, so stores to what they read may be dropped as dead: this tells the
 * compiler that memory at p is read here. */
#define READS(p) __asm__ volatile("" : : "r"(p) : "memory")

/* The 64-byte LDTILECFG operand (Intel SDM vol. 1, 3.2 "tile configuration"). */
typedef struct {
    uint8_t palette, start_row, rsvd[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;
_Static_assert(sizeof(tilecfg) == 64, "LDTILECFG operand is 64 bytes");

/* The mnemonic is spelled as bytes (as in src/kernels/cpu.c) so that no
 * -mxsave flag is needed. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* NULL when AMX can run here, else why not. Order matters: each check is
 * only meaningful once the previous one passed (xgetbv faults without
 * OSXSAVE; arch_prctl is only worth asking once the hardware is there). */
static const char *amx_unusable(char *buf, size_t n) {
    unsigned a, b, c, d;
    const unsigned max = __get_cpuid_max(0, NULL);
    unsigned d7 = 0;
    if (max >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        d7 = d;
    }
    static const struct { int bit; const char *name; } need[3] = {
        {24, "AMX-TILE"}, {25, "AMX-INT8"}, {22, "AMX-BF16"}};
    char miss[64] = "";
    for (int i = 0; i < 3; i++)
        if (!((d7 >> need[i].bit) & 1)) {
            if (miss[0]) strcat(miss, ", ");
            strcat(miss, need[i].name);
        }
    if (miss[0]) {
        snprintf(buf, n, "this CPU lacks %s (CPUID leaf 7 EDX)", miss);
        return buf;
    }
    /* Some hypervisors pass the leaf 7 bits through but hide the tile
     * palettes, and then LDTILECFG faults: trust leaf 0x1D over leaf 7. */
    a = 0;
    if (max >= 0x1D) __cpuid_count(0x1D, 0, a, b, c, d);
    if (a == 0) return "CPUID leaf 0x1D reports no tile palette (hypervisor advertises AMX but does not enable it)";
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1)) return "the OS has not enabled XSAVE (CPUID leaf 1 ECX.OSXSAVE = 0)";
    if ((xgetbv0() & (3ull << 17)) != (3ull << 17))
        return "the OS does not enable tile state (XCR0 bits 17 XTILECFG and 18 XTILEDATA not both set)";
    /* Linux >= 5.16 keeps tile data off per process until asked; the grant
     * is process-wide and inherited by the threads created afterwards. */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        snprintf(buf, n, "the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %s",
                 strerror(errno));
        return buf;
    }
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int kind;
    double sec, sink;
    pthread_barrier_t *bar;
} job;

/* Operands are chosen so that 1e7 ops into each tile neither overflow s32
 * nor reach inf / denormals in f32 (which could change the timing). */
AMX_FN static double run_kind(int kind, long iters) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1; /* tile config is per thread: every thread loads it */
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    READS(&cfg);
    _tile_loadconfig(&cfg);
    uint8_t a8[16 * 64], b8[16 * 64];
    uint16_t a16[16 * 32], b16[16 * 32];
    int32_t c[16 * 16];
    double out = 0;
    /* gcc spells the tile intrinsics as asm statements, not expressions:
     * hence one per statement */
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    if (kind == 0) {
        memset(a8, 1, sizeof a8); /* 1 x 1: +64 per op and element */
        memset(b8, 1, sizeof b8);
        READS(a8);
        READS(b8);
        _tile_loadd(4, a8, 64); _tile_loadd(5, a8, 64); _tile_loadd(6, b8, 64); _tile_loadd(7, b8, 64);
        for (long i = 0; i < iters; i++) {
            _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7); _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
        }
        _tile_stored(0, c, 64);
        for (int i = 0; i < 256; i++) out += c[i];
    } else {
        for (int i = 0; i < 16 * 32; i++) a16[i] = 0x3f80, b16[i] = 0x3580; /* 1.0 x 2^-20 */
        READS(a16);
        READS(b16);
        _tile_loadd(4, a16, 64); _tile_loadd(5, a16, 64); _tile_loadd(6, b16, 64); _tile_loadd(7, b16, 64);
        for (long i = 0; i < iters; i++) {
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, c, 64);
        float f[256];
        memcpy(f, c, sizeof f);
        for (int i = 0; i < 256; i++) out += f[i];
    }
    _tile_release(); /* lets the kernel skip tile state on context switches */
    return out;
}

static void *worker(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    const double t0 = now_s();
    j->sink = run_kind(j->kind, ITERS);
    j->sec = now_s() - t0;
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        snprintf(buf, n, "%s", colon + 2);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

int main(int argc, char **argv) {
    int nt = 0, reps = 5, bad = 0; /* nt 0: 1 then 2 threads */
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && !strcmp(argv[i], "-t")) bad |= (nt = atoi(argv[i + 1])) < 1;
        else if (i + 1 < argc && !strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else bad = 1;
    }
    if (bad || nt > 256 || reps < 1 || reps > 50) {
        fprintf(stderr, "usage: bench_amx_peak [-t threads] [-r runs]\n");
        return 2;
    }
    char why[256];
    const char *skip = amx_unusable(why, sizeof why);
    if (skip) {
        printf("bench_amx_peak: skipped: %s\n", skip);
        return 0;
    }
    char model[256];
    cpu_model(model, sizeof model);
    printf("bench_amx_peak: %s (median of %d runs, %ld x 4 tile ops per thread)\n", model, reps, ITERS);
    printf("%-16s %7s %10s %8s %11s\n", "kind", "threads", "TMAC/s", "Tops", "best TMAC/s");
    const char *names[2] = {"int8 tdpbssd", "bf16 tdpbf16ps"};
    const double macs_per_op[2] = {16 * 16 * 64, 16 * 16 * 32};
    const int counts[2] = {nt ? nt : 1, 2};
    for (int kind = 0; kind < 2; kind++)
        for (int k = 0; k < (nt ? 1 : 2); k++) {
            const int n = counts[k];
            double v[50];
            for (int r = 0; r < reps; r++) {
                pthread_barrier_t bar;
                pthread_barrier_init(&bar, NULL, (unsigned)n);
                job *jobs = calloc((size_t)n, sizeof *jobs);
                pthread_t *tid = calloc((size_t)n, sizeof *tid);
                for (int t = 0; t < n; t++) {
                    jobs[t] = (job){kind, 0, 0, &bar};
                    if (t) pthread_create(&tid[t], NULL, worker, &jobs[t]);
                }
                worker(&jobs[0]);
                double worst = 0, sink = 0;
                for (int t = 0; t < n; t++) {
                    if (t) pthread_join(tid[t], NULL);
                    worst = jobs[t].sec > worst ? jobs[t].sec : worst;
                    sink += jobs[t].sink;
                }
                /* the slowest thread bounds the aggregate rate */
                v[r] = (double)ITERS * 4 * macs_per_op[kind] * n / worst / 1e12 + 0 * sink;
                pthread_barrier_destroy(&bar);
                free(jobs);
                free(tid);
            }
            qsort(v, (size_t)reps, sizeof v[0], cmp_d);
            printf("%-16s %7d %10.2f %8.2f %11.2f\n", names[kind], n, v[reps / 2], 2 * v[reps / 2], v[reps - 1]);
        }
    return 0;
}
#endif
