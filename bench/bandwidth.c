/* bandwidth.c - memory read bandwidth probe (docs/PERFORMANCE.md): T threads
 * each stream their share of one buffer (default 1 GiB, far larger than any
 * cache) with 256-bit loads, summing it so the loads cannot be dropped.
 * Prints the median and best of -r passes in GB/s (1e9 bytes/s).
 *
 *   bench_bandwidth [-t 2] [-s 1024 (MiB)] [-r 9]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct {
    const uint8_t *p;
    size_t n;
    pthread_barrier_t *bar;
    double sec;
    uint64_t sink;
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t read_all(const uint8_t *p, size_t n) {
#if defined(__AVX2__)
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t v[4];
    memcpy(v, &a0, sizeof v);
    return v[0] + v[1] + v[2] + v[3];
#else
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        s += x;
    }
    return s;
#endif
}

static void *worker(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    const double t0 = now_s();
    j->sink += read_all(j->p, j->n);
    j->sec = now_s() - t0;
    pthread_barrier_wait(j->bar);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int nt = 2, reps = 9;
    size_t mib = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-s")) mib = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (nt < 1 || nt > 256 || reps < 1 || reps > 100 || mib < 1) {
        fprintf(stderr, "usage: bench_bandwidth [-t threads] [-s MiB] [-r passes]\n");
        return 2;
    }
    const size_t n = mib << 20;
    uint8_t *buf = aligned_alloc(4096, n);
    if (!buf) return 1;
    memset(buf, 1, n); /* fault every page in before timing */
    double *gbs = calloc((size_t)reps, sizeof *gbs);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        job *jobs = calloc((size_t)nt, sizeof *jobs);
        pthread_t *tid = calloc((size_t)nt, sizeof *tid);
        const size_t part = n / (size_t)nt / 128 * 128;
        for (int t = 0; t < nt; t++) {
            jobs[t] = (job){buf + part * (size_t)t, part, &bar, 0, 0};
            if (t) pthread_create(&tid[t], NULL, worker, &jobs[t]);
        }
        worker(&jobs[0]);
        double worst = 0;
        for (int t = 0; t < nt; t++) {
            if (t) pthread_join(tid[t], NULL);
            worst = jobs[t].sec > worst ? jobs[t].sec : worst;
            sink += jobs[t].sink;
        }
        gbs[r] = (double)part * nt / worst / 1e9;
        free(jobs);
        free(tid);
    }
    qsort(gbs, (size_t)reps, sizeof *gbs, cmp_d);
    printf("read bandwidth, %d thread(s), %zu MiB buffer, %d passes: median %.1f GB/s, best %.1f GB/s (sink %llu)\n",
           nt, mib, reps, gbs[reps / 2], gbs[reps - 1], (unsigned long long)(sink & 1));
    free(gbs);
    free(buf);
    return 0;
}
