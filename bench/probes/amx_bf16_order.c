/* amx_bf16_order.c - a probe, not part of the build: which order of adds
 * TDPBF16PS computes, against the real unit, on random bf16 tiles
 * (docs/ENGINE.md, "The emulator"). Prints, per candidate, how many of the
 * 512000 outputs differ from the unit's.
 *
 *   gcc -O2 -mamx-tile -mamx-bf16 -mavx512f bench/probes/amx_bf16_order.c -o /tmp/bf -lm
 *   /tmp/bf 1; /tmp/bf 16     # K pairs per row: 1 .. 16
 * A: the SDM pseudo-code (each pair's two products added into c in turn).
 * (The order the unit uses, even and odd products in two fused chains, was
 * found from these mismatches and is what kernels/amx/amx_emu.c computes;
 * test_amx --hw checks it.) Needs AMX. */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
static float bf(uint16_t h){uint32_t u=(uint32_t)h<<16; float f; memcpy(&f,&u,4); return f;}
static uint16_t tobf(float f){uint32_t u; memcpy(&u,&f,4); return u>>16;}
static float r32(double d){return (float)d;}
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, 0x1023, 18);
  cfg_t c; memset(&c,0,sizeof c); c.palette=1;
  int K = argc>1?atoi(argv[1]):16; /* pairs per row */
  for(int t=0;t<3;t++){c.rows[t]=16;} c.colsb[0]=64; c.colsb[1]=4*K; c.rows[2]=K; c.colsb[2]=64; c.rows[1]=16;
  _tile_loadconfig(&c);
  static uint16_t A[16][32], B[16][32]; static float C[16][16], C0[16][16];
  srand(1); int bad[6]={0}; long tot=0;
  for(int it=0; it<2000; it++){
    for(int m=0;m<16;m++)for(int k=0;k<2*K;k++){ float v=((rand()%20001)-10000)/1000.0f*ldexpf(1,(rand()%20)-10); A[m][k]=tobf(v);}
    for(int k=0;k<K;k++)for(int n=0;n<32;n++){ float v=((rand()%20001)-10000)/1000.0f*ldexpf(1,(rand()%20)-10); B[k][n]=tobf(v);}
    for(int m=0;m<16;m++)for(int n=0;n<16;n++) C0[m][n]=C[m][n]=((rand()%20001)-10000)/100.0f;
    __asm__ volatile("":::"memory");
    _tile_loadd(0,C,64); _tile_loadd(1,A,64); _tile_loadd(2,B,64);
    _tile_dpbf16ps(0,1,2); _tile_stored(0,C,64);
    __asm__ volatile("":::"memory");
    for(int m=0;m<16;m++)for(int n=0;n<16;n++){
      float a=C0[m][n], b=a, cc=a; double d=a; float f=a;
      for(int k=0;k<K;k++){ float p0=bf(A[m][2*k])*bf(B[k][2*n]), p1=bf(A[m][2*k+1])*bf(B[k][2*n+1]);
        a=a+p0; a=a+p1;                 /* A: two rounded adds */
        b=r32((double)b+(double)p0+(double)p1); /* B: pair fused one rounding (approx; double exact enough?) */
        cc=cc+(p0+p1);                  /* C */
        d+= (double)p0+(double)p1;       /* D: whole exact */
        f = r32((double)f + ((double)p0+(double)p1)); }
      /* E: round toward zero pair fused */
      float hw=C[m][n]; tot++;
      if(hw!=a)bad[0]++;
      if(hw!=b)bad[1]++;
      if(hw!=cc)bad[2]++;
      if(hw!=r32(d))bad[3]++;
    }
  }
  printf("K=%d total %ld: A(two adds) %d  B(pair fused) %d  C(acc+round(p0+p1)) %d  D(exact whole) %d\n",K,tot,bad[0],bad[1],bad[2],bad[3]);
  _tile_release(); return 0;
}
