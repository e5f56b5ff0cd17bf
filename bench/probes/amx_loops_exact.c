/* amx_loops_exact.c - a probe, not part of the build: the exact path's
 * tile loop (two planes x two row tiles per 32-block, 16 tokens, K = 2048,
 * 512 tokens x 8192 rows), one thread, with and without its per-block tile
 * stores and float step (docs/PERFORMANCE.md, "The AMX matrix engine").
 *
 *   gcc -O2 -mamx-tile -mamx-int8 -mavx512f -mfma bench/probes/amx_loops_exact.c -o /tmp/ex
 *   /tmp/ex 0   # products only;  1: + the stores;  2: + a float step
 *   /tmp/ex 3   # one row tile, C double-buffered (MAC/s counted over both);
 *   /tmp/ex 4   # cumulative sums, no zeroing;  5: stores to a per-block buffer
 * Needs AMX. */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
enum { NT = 512, K = 2048, NO = 8192, LD = K + 64, NB = K / 32 };
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc,char**argv){
  (void)argc;
  syscall(SYS_arch_prctl, 0x1023, 18);
  int mode = atoi(argv[1]); /* 0: tiles only no store; 1: tiles + stores; 2: tiles+stores+epi */
  int8_t *A1 = aligned_alloc(64,(size_t)NT*LD), *A2 = aligned_alloc(64,(size_t)NT*LD);
  uint8_t *B = aligned_alloc(64,(size_t)NO*K);
  for(size_t i=0;i<(size_t)NT*LD;i++){A1[i]=rand();A2[i]=rand();} for(size_t i=0;i<(size_t)NO*K;i++)B[i]=rand()&15;
  float *wd = aligned_alloc(64, 4*(size_t)NO*NB); for (size_t i=0;i<(size_t)NO*NB;i++) wd[i]=1e-3f;
  float *sx = aligned_alloc(64, 4*(size_t)NT*NB); for (size_t i=0;i<(size_t)NT*NB;i++) sx[i]=1e-3f;
  cfg_t c; memset(&c,0,sizeof c); c.palette=1; for(int t=0;t<4;t++){c.rows[t]=16;c.colsb[t]=64;} c.rows[4]=c.rows[5]=16; c.colsb[4]=c.colsb[5]=32; c.rows[6]=c.rows[7]=8; c.colsb[6]=c.colsb[7]=64;
  _tile_loadconfig(&c);
  static int32_t st[4][16][16] __attribute__((aligned(64)));
  static float out[2][16][16];
  double best=1e9;
  for(int rep=0;rep<3;rep++){ double t0=now();
  for (int item = 0; item < NO/64; item++)
   for (int tb = 0; tb < NT; tb += 64)
    for (int p = 0; p < 4; p += 2)
     for (int t = tb; t < tb + 64; t += 16) {
      const uint8_t *w0 = B + (size_t)(item*4+p)*16*K, *w1 = w0 + 16*K;
      __m512 a0[16], a1[16];
      for (int r=0;r<16;r++) a0[r]=a1[r]=_mm512_setzero_ps();
      if (mode == 3) { /* one row tile, C double-buffered, stores of the last unit after this unit's products */
        for (int b = 0; b < NB; b++) {
          const int k0 = 32*b;
          _tile_loadd(6, w0 + k0/4*64, 64);
          _tile_loadd(4, A1 + (size_t)t*LD + k0, LD); _tile_loadd(5, A2 + (size_t)t*LD + k0, LD);
          if (b & 1) { _tile_zero(2); _tile_zero(3); _tile_dpbsud(2,4,6); _tile_dpbsud(3,5,6); _tile_stored(0, st[0], 64); _tile_stored(1, st[1], 64); }
          else { _tile_zero(0); _tile_zero(1); _tile_dpbsud(0,4,6); _tile_dpbsud(1,5,6); if (b) { _tile_stored(2, st[2], 64); _tile_stored(3, st[3], 64);} }
          __asm__ volatile("":::"memory");
        }
        continue;
      }
      if (mode == 4) { /* cumulative: no zero, store each block */
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int b = 0; b < NB; b++) {
          const int k0 = 32*b;
          _tile_loadd(6, w0 + k0/4*64, 64); _tile_loadd(7, w1 + k0/4*64, 64);
          _tile_loadd(4, A1 + (size_t)t*LD + k0, LD); _tile_loadd(5, A2 + (size_t)t*LD + k0, LD);
          _tile_dpbsud(0,4,6); _tile_dpbsud(1,5,6); _tile_dpbsud(2,4,7); _tile_dpbsud(3,5,7);
          _tile_stored(0, st[0], 64); _tile_stored(1, st[1], 64); _tile_stored(2, st[2], 64); _tile_stored(3, st[3], 64); __asm__ volatile("":::"memory");
        }
        continue;
      }
      if (mode == 5) { /* stores to a per-block buffer (no reuse of the same 4 KB) */
        static int32_t big[64][4][16][16] __attribute__((aligned(64)));
        for (int b = 0; b < NB; b++) {
          const int k0 = 32*b;
          _tile_loadd(6, w0 + k0/4*64, 64); _tile_loadd(7, w1 + k0/4*64, 64);
          _tile_loadd(4, A1 + (size_t)t*LD + k0, LD); _tile_loadd(5, A2 + (size_t)t*LD + k0, LD);
          _tile_zero(0); _tile_zero(1); _tile_dpbsud(0,4,6); _tile_dpbsud(1,5,6);
          _tile_zero(2); _tile_zero(3); _tile_dpbsud(2,4,7); _tile_dpbsud(3,5,7);
          _tile_stored(0, big[b&63][0], 64); _tile_stored(1, big[b&63][1], 64); _tile_stored(2, big[b&63][2], 64); _tile_stored(3, big[b&63][3], 64); __asm__ volatile("":::"memory");
        }
        continue;
      }
      for (int b = 0; b < NB; b++) {
        const int k0 = 32*b;
        _tile_loadd(6, w0 + k0/4*64, 64); _tile_loadd(7, w1 + k0/4*64, 64);
        _tile_loadd(4, A1 + (size_t)t*LD + k0, LD); _tile_loadd(5, A2 + (size_t)t*LD + k0, LD);
        _tile_zero(0); _tile_zero(1); _tile_dpbsud(0,4,6); _tile_dpbsud(1,5,6);
        _tile_zero(2); _tile_zero(3); _tile_dpbsud(2,4,7); _tile_dpbsud(3,5,7);
        if (mode >= 1) { _tile_stored(0, st[0], 64); _tile_stored(1, st[1], 64); _tile_stored(2, st[2], 64); _tile_stored(3, st[3], 64); __asm__ volatile("":::"memory"); }
        if (mode >= 2) {
          const __m512 wd0 = _mm512_loadu_ps(wd + ((size_t)(item*4+p)*NB + b)*16), wd1 = _mm512_loadu_ps(wd + ((size_t)(item*4+p+1)*NB + b)*16);
#pragma GCC unroll 16
          for (int r = 0; r < 16; r++) {
            const __m512 s = _mm512_set1_ps(sx[(size_t)(t+r)*NB+b]);
            const __m512i off = _mm512_set1_epi32(r);
            __m512i v = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(st[0][r]),8), _mm512_add_epi32(_mm512_load_si512(st[1][r]), off));
            a0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd0, s), a0[r]);
            v = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(st[2][r]),8), _mm512_add_epi32(_mm512_load_si512(st[3][r]), off));
            a1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd1, s), a1[r]);
          }
        }
      }
      for (int r=0;r<16;r++){ _mm512_storeu_ps(out[0][r], a0[r]); _mm512_storeu_ps(out[1][r], a1[r]); }
     }
  double dt=now()-t0; if(dt<best)best=dt; }
  printf("mode %d: %.2f ms %.0f GMAC/s\n", mode, best*1e3, (double)NT*K*NO/best*1e-9);
}
