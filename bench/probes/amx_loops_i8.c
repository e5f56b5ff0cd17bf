/* amx_loops_i8.c - a probe, not part of the build: the int8 path's 2 x 2
 * tile loop (32 tokens x 2 row tiles, K = 2048, 512 tokens x 8192 rows) with
 * nothing else (no quantization, epilogue or output), one thread, to see
 * what the blocking allows (docs/PERFORMANCE.md, "The AMX matrix engine").
 *
 *   gcc -O2 -mamx-tile -mamx-int8 -mavx512f bench/probes/amx_loops_i8.c -o /tmp/i8
 *   RND=1 /tmp/i8 1,5 9    # 9 rounds of: the engine's loop order (operands
 *                          # from L2), then the same block again and again (L1)
 * (modes 2, 3, 4: K-blocked, weights stationary, software prefetch; 6: mode 1
 * with the activations packed tile by tile; 7: 6 K-blocked by the second argument.)
 * Needs AMX (Linux asks the kernel for the tile state first). */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
enum { NT = 512, K = 2048, NO = 8192, LD = K + 64 };
static int8_t *A; static int8_t *B; static int32_t *Cbuf; static int8_t *AP; /* A packed: [NT/16][K/64][16][64] */
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec;}
static void cfg(int na){cfg_t c; memset(&c,0,sizeof c); c.palette=1; for(int t=0;t<4;t++){c.rows[t]=16;c.colsb[t]=64;} c.rows[4]=c.rows[5]=16; c.colsb[4]=c.colsb[5]=64; c.rows[6]=c.rows[7]=16; c.colsb[6]=c.colsb[7]=64; (void)na; _tile_loadconfig(&c);}
static int32_t out[4][16][16];
/* 32 tokens x 2 row tiles over k range */
static inline void blk(const int8_t *xa, const int8_t *w0, const int8_t *w1, int k0, int k1, int pf) {
  for (int k = k0; k < k1; k += 64) {
    _tile_loadd(4, xa + k, LD);
    _tile_loadd(6, w0 + 16 * k, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_loadd(7, w1 + 16 * k, 64);
    _tile_dpbssd(1, 4, 7);
    _tile_loadd(5, xa + 16 * LD + k, LD);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
    if (pf) { for (int r = 0; r < 16; r++) { _mm_prefetch((const char*)(xa + r*LD + k + 128), _MM_HINT_T0); _mm_prefetch((const char*)(xa + (16+r)*LD + k + 128), _MM_HINT_T0);} }
  }
}
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, 0x1023, 18);
  /* argv[1]: modes, "1,6,7:512" (mode:kc); argv[2]: rounds. Every round
   * runs each mode once, back to back, so a slow spell of the shared host
   * hits all of them; the best and the median per mode are printed. */
  int nm = 0, mv[16], mk[16]; enum { RMAX = 64 }; double tm[16][RMAX];
  for (char *q = argv[1]; *q && nm < 16; ) { mv[nm] = (int)strtol(q, &q, 10); mk[nm] = *q == ':' ? (int)strtol(q + 1, &q, 10) : 512; nm++; if (*q == ',') q++; }
  int rounds = argc > 2 ? atoi(argv[2]) : 5; if (rounds > RMAX) rounds = RMAX;
  A = aligned_alloc(64, (size_t)NT*LD); B = aligned_alloc(64,(size_t)NO*K); Cbuf = aligned_alloc(64, (size_t)NT*NO*4/64*0+ 4096*64);
  AP = aligned_alloc(64, (size_t)NT*K);
  if(getenv("RND")){ for(size_t i=0;i<(size_t)NT*LD;i++) A[i]=(int8_t)(rand()); for(size_t i=0;i<(size_t)NO*K;i++) B[i]=(int8_t)rand(); }
 else {memset(A,1,(size_t)NT*LD); memset(B,1,(size_t)NO*K);}
  for (int t = 0; t < NT; t++) for (int k = 0; k < K; k++) AP[(size_t)(t/16)*16*K + (size_t)(k/64)*1024 + (t%16)*64 + k%64] = A[(size_t)t*LD + k];
  cfg(16);
  for (int rep = 0; rep < rounds; rep++)
  for (int mi = 0; mi < nm; mi++) {
  const int v = mv[mi], kc = mk[mi];
  double t0=now();
  if (v==1 || v==4) { /* current: token blocks of 64, pairs in chunks of 4 row tiles */
    for (int item = 0; item < NO/64; item++)
      for (int tb = 0; tb < NT; tb += 64)
        for (int p = 0; p < 4; p += 2)
          for (int t = tb; t < tb + 64; t += 32) {
            const int8_t *w0 = B + (size_t)(item*4+p)*16*K, *w1 = w0 + 16*K;
            _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
            blk(A + (size_t)t*LD, w0, w1, 0, K, v==4);
            _tile_stored(0,out[0],64);_tile_stored(1,out[1],64);_tile_stored(2,out[2],64);_tile_stored(3,out[3],64);
          }
  } else if (v==2) { /* K-blocked: for pair, for kc block, all tokens, C partials in memory */
    static int32_t part[NT/32][4][16][16];
    for (int pr = 0; pr < NO/32; pr++) {
      const int8_t *w0 = B + (size_t)pr*32*K, *w1 = w0 + 16*K;
      for (int kb = 0; kb < K; kb += kc)
        for (int ti = 0; ti < NT/32; ti++) {
          if (kb == 0) {_tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);}
          else { _tile_loadd(0,part[ti][0],64);_tile_loadd(1,part[ti][1],64);_tile_loadd(2,part[ti][2],64);_tile_loadd(3,part[ti][3],64);}
          blk(A + (size_t)ti*32*LD, w0, w1, kb, kb+kc, 0);
          _tile_stored(0,part[ti][0],64);_tile_stored(1,part[ti][1],64);_tile_stored(2,part[ti][2],64);_tile_stored(3,part[ti][3],64);
        }
    }
  } else if (v==3) { /* B pair stationary, all tokens, K whole */
    for (int pr = 0; pr < NO/32; pr++) {
      const int8_t *w0 = B + (size_t)pr*32*K, *w1 = w0 + 16*K;
      for (int ti = 0; ti < NT/32; ti++) {
        _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
        blk(A + (size_t)ti*32*LD, w0, w1, 0, K, 0);
        _tile_stored(0,out[0],64);_tile_stored(1,out[1],64);_tile_stored(2,out[2],64);_tile_stored(3,out[3],64);
      }
    }
  } else if (v==6 || v==7) { /* v1's order, A packed tile by tile (each 16-token x 64 tile one contiguous KiB);
                                7: K-blocked by kc with the chunk's 4 row tiles, C partials in memory */
    static int32_t part[NT/32][2][4][16][16];
    for (int item = 0; item < NO/64; item++)
      for (int tb = 0; tb < NT; tb += 64)
        for (int kb = 0; kb < K; kb += (v==6 ? K : kc))
        for (int p = 0; p < 4; p += 2)
          for (int t = tb; t < tb + 64; t += 32) {
            const int8_t *w0 = B + (size_t)(item*4+p)*16*K, *w1 = w0 + 16*K;
            const int8_t *a0 = AP + (size_t)(t/16)*16*K, *a1 = a0 + 16*K;
            int32_t (*pc)[16][16] = part[t/32][p/2];
            if (kb == 0) {_tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);}
            else { _tile_loadd(0,pc[0],64);_tile_loadd(1,pc[1],64);_tile_loadd(2,pc[2],64);_tile_loadd(3,pc[3],64);}
            const int ke = v==6 ? K : kb + kc;
            for (int k = kb; k < ke; k += 64) {
              _tile_loadd(4, a0 + 16 * k, 64);
              _tile_loadd(6, w0 + 16 * k, 64);
              _tile_dpbssd(0, 4, 6);
              _tile_loadd(7, w1 + 16 * k, 64);
              _tile_dpbssd(1, 4, 7);
              _tile_loadd(5, a1 + 16 * k, 64);
              _tile_dpbssd(2, 5, 6);
              _tile_dpbssd(3, 5, 7);
            }
            _tile_stored(0,pc[0],64);_tile_stored(1,pc[1],64);_tile_stored(2,pc[2],64);_tile_stored(3,pc[3],64);
          }
  } else if (v==5) { /* all in L1: same A/B block repeated */
    for (int it = 0; it < (NO/32)*(NT/32); it++) {
      _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
      for (int r = 0; r < K/512; r++) blk(A, B, B + 16*K, 0, 512, 0);
      _tile_stored(0,out[0],64);
    }
  }
  tm[mi][rep] = now() - t0; }
  for (int mi = 0; mi < nm; mi++) {
    double b = 1e9, srt[RMAX]; for (int r = 0; r < rounds; r++) { srt[r] = tm[mi][r]; if (tm[mi][r] < b) b = tm[mi][r]; }
    for (int i = 1; i < rounds; i++) for (int k = i; k > 0 && srt[k] < srt[k-1]; k--) { double x = srt[k]; srt[k] = srt[k-1]; srt[k-1] = x; }
    double rr[RMAX]; for (int r = 0; r < rounds; r++) rr[r] = tm[0][r] / tm[mi][r];
    for (int i = 1; i < rounds; i++) for (int k = i; k > 0 && rr[k] < rr[k-1]; k--) { double x = rr[k]; rr[k] = rr[k-1]; rr[k-1] = x; }
    printf("v%d kc %4d: best %7.0f  median %7.0f GMAC/s  speed vs the first mode, median of rounds %.2fx\n", mv[mi], mk[mi],
           (double)NT*K*NO/b*1e-9, (double)NT*K*NO/srt[rounds/2]*1e-9, rr[rounds/2]);
  }
  return 0;
}
