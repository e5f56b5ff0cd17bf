/* cpu.h - run-time CPU feature detection and the kernel dispatch table.
 *
 * One x86-64 binary carries scalar, AVX2 and AVX-512 kernels (an aarch64
 * build: scalar and NEON+dotprod). The best level that both the CPU and the
 * OS support (x86: cpuid, and xgetbv for the OS saving the YMM/ZMM state;
 * aarch64: getauxval(AT_HWCAP)) is chosen once, thread-safely, at first use.
 *
 * The environment variable TS_CPU_LEVEL=scalar|avx2|avx512|neon lowers it: a
 * request above what this machine has is clamped down to the best available
 * level of the same or lower rank (ranks: scalar 0, avx2 1, neon 1, avx512 2),
 * so TS_CPU_LEVEL=avx512 on an AVX2-only machine gives avx2. An unknown value
 * is ignored (the library never prints; ts_cpu_level_active tells the front
 * end what was chosen). Tests switch levels with ts_cpu_force_level.
 *
 * The dispatch table (ts_kern) is one constant struct of function pointers
 * per level, filled with designated initializers in the file of that level
 * (ref/qdot_ref.c, x86/qdot_avx2.c, x86/qdot_avx512.c, arm/qdot_neon.c). The
 * formats the functions take are described in kernels/qdot.h.
 */
#ifndef TS_KERNELS_CPU_H
#define TS_KERNELS_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/fastops.h"
#include "kernels/repack.h"
#include "quant/quant.h"

typedef enum ts_cpu_level {
    TS_CPU_SCALAR = 0, /* portable C, also the reference of every kernel */
    TS_CPU_AVX2 = 1,   /* x86-64: AVX2 + FMA + F16C */
    TS_CPU_AVX512 = 2, /* x86-64: the AVX2 set + AVX-512 F/BW/VL/VNNI */
    TS_CPU_NEON = 3,   /* aarch64: AdvSIMD + dotprod + fp16 */
    TS_CPU_LEVEL_COUNT
} ts_cpu_level;

/* "scalar", "avx2", "avx512", "neon"; "?" for anything else. */
const char *ts_cpu_level_name(ts_cpu_level l);
/* Level from its name (case-insensitive), or -1. */
int ts_cpu_level_parse(const char *s);

/* Best level this CPU + OS can run and this build contains (cached). */
ts_cpu_level ts_cpu_detect(void);
/* The highest level available under `best` whose rank is <= want's rank
 * (pure function; `best` as returned by ts_cpu_detect). */
ts_cpu_level ts_cpu_clamp(ts_cpu_level want, ts_cpu_level best);

/* The level of the table ts_kern_get returns. */
ts_cpu_level ts_cpu_level_active(void);
/* Switches the active level to ts_cpu_clamp(want, best) and returns it. For
 * tests and benchmarks; call it while no kernel is running. */
ts_cpu_level ts_cpu_force_level(ts_cpu_level want);

/* ---- dispatch table ---- */

/* Dot product of one weight row (n elements in its stored GGUF type) with
 * one activation row in the format ts_qdot_act_type(type) gives. */
typedef float (*ts_dot_fn)(int64_t n, const void *w, const void *x);
/* The same weight row against 4 activation rows at once (the register tile
 * of the GEMM): out[t] is bit-identical to dot(n, w, x[t]). */
typedef void (*ts_dot4_fn)(int64_t n, const void *w, const void *const x[4], float out[4]);
/* f32 row (n a multiple of the block) -> activation blocks. */
typedef void (*ts_quant_act_fn)(const float *x, void *dst, int64_t n);

typedef struct ts_kern {
    ts_cpu_level level;
    ts_quant_act_fn quant_q8;  /* -> TS_ACT_Q8 (32-blocks) */
    ts_quant_act_fn quant_q8k; /* -> TS_ACT_Q8K (256-blocks) */
    ts_dot_fn dot[TS_TYPE_COUNT];   /* by weight type; NULL: unsupported */
    ts_dot4_fn dot4[TS_TYPE_COUNT]; /* non-NULL exactly where dot is */
    /* Panel GEMM over repacked weights (kernels/repack.h); NULL where this
     * level has no fast one (callers then use ts_rp_gemm_ref). */
    ts_rp_gemm_fn rp_gemm[TS_TYPE_COUNT];
    ts_rp_quant_fn rp_quant; /* activation tiles; NULL: ts_rp_quant_ref */
    /* fast attention block and SwiGLU (kernels/fastops.h); NULL: the
     * portable copies */
    ts_attn_block_fn attn_block;
    ts_glu_fn swiglu;
    ts_glu_fn geglu;
} ts_kern;

/* The table of the active level (never NULL). */
const ts_kern *ts_kern_get(void);
/* The table of level l, or NULL when l cannot run here (not built for this
 * architecture, or the CPU/OS lacks it). */
const ts_kern *ts_kern_for_level(ts_cpu_level l);

#endif
