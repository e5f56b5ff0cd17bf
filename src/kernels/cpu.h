/* cpu.h - run-time CPU feature detection and the kernel dispatch table.
 *
 * One x86-64 binary carries scalar, AVX2 and AVX-512 kernels (an aarch64
 * build: scalar and NEON+dotprod). Detection happens once, thread-safely, at
 * the first call of any function here:
 *
 *   1. features: the machine's usable ISA extensions as bits (ts_cpu_feat).
 *      x86-64: cpuid, and xgetbv for the register state the OS saves (a
 *      VEX / EVEX / AMX bit is set only when the OS saves its registers;
 *      AMX also needs Linux's per-process permission, requested here once
 *      with arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)). aarch64 Linux:
 *      getauxval(AT_HWCAP / AT_HWCAP2).
 *   2. variant scoring (as ggml's cpu-feats): every dispatch table (ts_kern,
 *      one per level) declares the features it requires and a score; the
 *      detected level is the highest-scoring table of this build whose
 *      requirements the machine has. The features are the one detector:
 *      levels are never probed on their own.
 *
 * The environment variable TS_CPU_LEVEL=scalar|avx2|avx512|neon lowers it: a
 * request above what this machine has is clamped down to the best available
 * level of the same or lower rank (ranks = scores: scalar 0, avx2 1, neon 1,
 * avx512 2; "available under" a level = requiring a subset of its
 * features), so TS_CPU_LEVEL=avx512 on an AVX2-only machine gives avx2. An
 * unknown value is ignored (the library never prints; ts_cpu_level_active
 * tells the front end what was chosen). Tests switch levels with
 * ts_cpu_force_level.
 *
 * The dispatch table (ts_kern) is one constant struct of function pointers
 * per level, filled with designated initializers in the file of that level
 * (ref/qdot_ref.c, x86/qdot_avx2.c, x86/qdot_avx512.c, arm/qdot_neon.c). The
 * formats the functions take are described in kernels/qdot.h. Kernels that
 * are chosen per matrix rather than per level (the matmul variants: panels,
 * rows, later AMX tiles) name the features they need in the same bits
 * (kernels/linear.h).
 */
#ifndef TS_KERNELS_CPU_H
#define TS_KERNELS_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/fastops.h"
#include "kernels/repack.h"
#include "quant/quant.h"

/* ---- features ---- */

/* A set of CPU features: one bit each (usable = the CPU has it and the OS
 * saves its state). x86-64 bits 0..31, aarch64 bits 32..63. */
typedef uint64_t ts_cpu_feat;

#define TS_FEAT_BIT(n) ((ts_cpu_feat)1 << (n))
/* x86-64 */
#define TS_FEAT_SSE TS_FEAT_BIT(0)
#define TS_FEAT_SSE2 TS_FEAT_BIT(1)
#define TS_FEAT_SSE3 TS_FEAT_BIT(2)
#define TS_FEAT_SSSE3 TS_FEAT_BIT(3)
#define TS_FEAT_SSE4_1 TS_FEAT_BIT(4)
#define TS_FEAT_SSE4_2 TS_FEAT_BIT(5)
#define TS_FEAT_AVX TS_FEAT_BIT(6)      /* + OS saves YMM */
#define TS_FEAT_AVX2 TS_FEAT_BIT(7)
#define TS_FEAT_FMA TS_FEAT_BIT(8)
#define TS_FEAT_F16C TS_FEAT_BIT(9)
#define TS_FEAT_BMI2 TS_FEAT_BIT(10)
#define TS_FEAT_AVX_VNNI TS_FEAT_BIT(11) /* VEX vpdpbusd (Alder Lake, Zen 5) */
#define TS_FEAT_AVX512F TS_FEAT_BIT(12) /* + OS saves opmask and ZMM */
#define TS_FEAT_AVX512DQ TS_FEAT_BIT(13)
#define TS_FEAT_AVX512BW TS_FEAT_BIT(14)
#define TS_FEAT_AVX512VL TS_FEAT_BIT(15)
#define TS_FEAT_AVX512_VNNI TS_FEAT_BIT(16)
#define TS_FEAT_AVX512_BF16 TS_FEAT_BIT(17)
#define TS_FEAT_AVX512_FP16 TS_FEAT_BIT(18)
#define TS_FEAT_AMX_TILE TS_FEAT_BIT(19) /* + XCR0 bits 17, 18 + Linux permission */
#define TS_FEAT_AMX_INT8 TS_FEAT_BIT(20)
#define TS_FEAT_AMX_BF16 TS_FEAT_BIT(21)
/* aarch64 */
#define TS_FEAT_NEON TS_FEAT_BIT(32)    /* AdvSIMD (HWCAP_ASIMD) */
#define TS_FEAT_FP16 TS_FEAT_BIT(33)    /* scalar and vector fp16 arithmetic (FPHP + ASIMDHP) */
#define TS_FEAT_DOTPROD TS_FEAT_BIT(34) /* sdot / udot (ASIMDDP) */
#define TS_FEAT_I8MM TS_FEAT_BIT(35)    /* smmla / usdot */
#define TS_FEAT_BF16 TS_FEAT_BIT(36)
#define TS_FEAT_SVE TS_FEAT_BIT(37)
#define TS_FEAT_SVE2 TS_FEAT_BIT(38)
#define TS_FEAT_SME TS_FEAT_BIT(39)

/* The usable features of this machine (detected once; cached). */
ts_cpu_feat ts_cpu_features(void);
/* The features kernels may use at the active level: all of
 * ts_cpu_features() while the active level is the detected one; only those
 * the active table requires once TS_CPU_LEVEL or ts_cpu_force_level lowered
 * it (so that a matmul variant needing AMX is off under TS_CPU_LEVEL=avx2). */
ts_cpu_feat ts_cpu_features_active(void);
/* Name of one feature bit, lower case ("avx2", "avx512_vnni", "amx_int8":
 * the x86 names as Linux's /proc/cpuinfo spells them; "neon", "fp16",
 * "dotprod", "i8mm", "sve", "sme" on aarch64), "?" for anything that is not
 * exactly one known bit. */
const char *ts_cpu_feat_name(ts_cpu_feat bit);
/* Writes the names of the bits of f, in bit order, comma-separated
 * ("sse,sse2,...,avx2"; "" for none) into buf[cap] (always terminated when
 * cap > 0, cut at a name boundary when too small). Returns the length the
 * whole list needs, not counting the terminator (snprintf-like). */
size_t ts_cpu_feat_str(ts_cpu_feat f, char *buf, size_t cap);
/* ts_cpu_feat_str of ts_cpu_features(). */
size_t ts_cpu_features_str(char *buf, size_t cap);

typedef enum ts_cpu_level {
    TS_CPU_SCALAR = 0, /* portable C, also the reference of every kernel */
    TS_CPU_AVX2 = 1,   /* x86-64: AVX2 + FMA + F16C */
    TS_CPU_AVX512 = 2, /* x86-64: the AVX2 set + AVX-512 F/BW/VL/VNNI */
    TS_CPU_NEON = 3,   /* aarch64: AdvSIMD + dotprod + fp16 */
    TS_CPU_LEVEL_COUNT
} ts_cpu_level;

/* What each level's table requires, and its score (the rank that
 * TS_CPU_LEVEL compares). The tables carry the same values (ts_kern.requires
 * and .score, from these macros). */
#define TS_CPU_REQ_SCALAR ((ts_cpu_feat)0)
#define TS_CPU_REQ_AVX2 (TS_FEAT_AVX | TS_FEAT_AVX2 | TS_FEAT_FMA | TS_FEAT_F16C)
#define TS_CPU_REQ_AVX512 \
    (TS_CPU_REQ_AVX2 | TS_FEAT_AVX512F | TS_FEAT_AVX512BW | TS_FEAT_AVX512VL | TS_FEAT_AVX512_VNNI)
#define TS_CPU_REQ_NEON (TS_FEAT_NEON | TS_FEAT_DOTPROD | TS_FEAT_FP16)
#define TS_CPU_SCORE_SCALAR 0
#define TS_CPU_SCORE_AVX2 1
#define TS_CPU_SCORE_AVX512 2
#define TS_CPU_SCORE_NEON 1

/* "scalar", "avx2", "avx512", "neon"; "?" for anything else. */
const char *ts_cpu_level_name(ts_cpu_level l);
/* Level from its name (case-insensitive), or -1. */
int ts_cpu_level_parse(const char *s);

/* The features level l's table requires (0 for scalar and for junk), and
 * its score (0 for junk). */
ts_cpu_feat ts_cpu_level_requires(ts_cpu_level l);
int ts_cpu_level_score(ts_cpu_level l);

/* The highest-scoring table of this build whose requirements are all in
 * `have` (pure function of have; scalar when none; ties: the lower level
 * number). */
ts_cpu_level ts_cpu_select(ts_cpu_feat have);
/* Best level this CPU + OS can run and this build contains:
 * ts_cpu_select(ts_cpu_features()) (cached). */
ts_cpu_level ts_cpu_detect(void);
/* The highest-scoring level available under `best` (requiring a subset of
 * what best requires) whose score (rank) is <= want's (pure function;
 * `best` as returned by ts_cpu_detect). */
ts_cpu_level ts_cpu_clamp(ts_cpu_level want, ts_cpu_level best);

/* The level of the table ts_kern_get returns. */
ts_cpu_level ts_cpu_level_active(void);
/* Switches the active level to ts_cpu_clamp(want, best) and returns it. For
 * tests and benchmarks; call it while no kernel is running. */
ts_cpu_level ts_cpu_force_level(ts_cpu_level want);

/* Bytes ahead of the weight block being computed that the x86 panel
 * kernels prefetch in one-token (decode) calls, or -1 for none; 0 means the
 * block's own lines, all requested at its start. Set with the active level
 * (ts_cpu_force_level too), from measurements (docs/PERFORMANCE.md,
 * sessions 28, 30, 31): 0 on AMD CPUs at the avx512 level, where 4 KiB
 * ahead cost a Zen 4 20-43% of its decode speed; 4096 otherwise (+5% on the
 * Intel machine, +40% on an AVX2-only Zen 3). TS_PREFETCH=N (bytes,
 * 0..65536) or TS_PREFETCH=off overrides the choice; junk is ignored. */
int ts_cpu_decode_prefetch(void);

/* ---- dispatch table ---- */

/* Dot product of one weight row (n elements in its stored GGUF type) with
 * one activation row in the format ts_qdot_act_type(type) gives. */
typedef float (*ts_dot_fn)(int64_t n, const void *w, const void *x);
/* The same weight row against 4 activation rows at once (the register tile
 * of the GEMM): out[t] is bit-identical to dot(n, w, x[t]). */
typedef void (*ts_dot4_fn)(int64_t n, const void *w, const void *const x[4], float out[4]);
/* 4 weight rows (row_bytes apart) against 4 activation rows: out[r][t] is
 * bit-identical to dot(n, row r, x[t]). */
typedef void (*ts_dot44_fn)(int64_t n, const void *w, size_t row_bytes, const void *const x[4], float out[4][4]);
/* f32 row (n a multiple of the block) -> activation blocks. */
typedef void (*ts_quant_act_fn)(const float *x, void *dst, int64_t n);

typedef struct ts_kern {
    ts_cpu_level level;
    ts_cpu_feat requires; /* TS_CPU_REQ_<level>: it runs where all of these are usable */
    int score;            /* TS_CPU_SCORE_<level>: the highest runnable score is chosen */
    ts_quant_act_fn quant_q8;  /* -> TS_ACT_Q8 (32-blocks) */
    ts_quant_act_fn quant_q8k; /* -> TS_ACT_Q8K (256-blocks) */
    ts_dot_fn dot[TS_TYPE_COUNT];   /* by weight type; NULL: unsupported */
    ts_dot4_fn dot4[TS_TYPE_COUNT]; /* non-NULL exactly where dot is */
    ts_dot44_fn dot44[TS_TYPE_COUNT]; /* NULL: the GEMM goes row by row (dot4) */
    /* Panel GEMM over repacked weights (kernels/repack.h); NULL where this
     * level has no fast one (callers then use ts_rp_gemm_ref). */
    ts_rp_gemm_fn rp_gemm[TS_TYPE_COUNT];
    ts_rp_quant_fn rp_quant; /* activation tiles; NULL: ts_rp_quant_ref */
    /* fast attention block and SwiGLU (kernels/fastops.h); NULL: the
     * portable copies */
    ts_attn_block_fn attn_block;
    ts_glu_fn swiglu;
    ts_glu_fn geglu;
    ts_axpy_fn axpy; /* NULL: ts_axpy_generic */
} ts_kern;

/* The table of the active level (never NULL). */
const ts_kern *ts_kern_get(void);
/* The table of level l, or NULL when l cannot run here (not built for this
 * architecture, or the CPU/OS lacks a feature it requires). */
const ts_kern *ts_kern_for_level(ts_cpu_level l);

#endif
