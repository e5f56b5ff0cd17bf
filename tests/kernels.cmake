# kernels.cmake - tests of the CPU kernels: dispatch (src/kernels/cpu.c), the
# activation quantizers and dot kernels at every level this machine runs
# (src/kernels/ref/qdot_ref.c, x86/, arm/), the GEMV/GEMM drivers (qdot.c).
# Also included by cmake/kernels_only (the kernel-only cross build), hence
# CMAKE_CURRENT_LIST_DIR.
ts_add_c_test(test_kernels ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c)

# TS_CPU_LEVEL: a lower level is honoured, a higher one clamped, junk ignored
# (the test compares the active level with ts_cpu_clamp of the request).
foreach(lvl avx2 SCALAR avx512 neon bogus)
  add_test(NAME test_kernels_env_${lvl} COMMAND test_kernels --dispatch-only)
  set_tests_properties(test_kernels_env_${lvl} PROPERTIES ENVIRONMENT "TS_CPU_LEVEL=${lvl}")
endforeach()

# The same binary on emulated CPUs (qemu-user, when installed; not under the
# sanitizers, which do not run under qemu-user): it must detect the level
# the CPU has and pass there too.
#   x86-64: Haswell (AVX2, no AVX-512) -> avx2; Nehalem (no AVX) -> scalar.
#   aarch64 cross build: qemu's "max" CPU -> neon; Cortex-A53 (no dotprod) -> scalar.
if(NOT TS_SANITIZE)
  if(NOT CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    find_program(TS_QEMU_X86_64 qemu-x86_64)
    if(TS_QEMU_X86_64)
      foreach(cpu_level Haswell:avx2 Nehalem:scalar)
        string(REPLACE ":" ";" cl ${cpu_level})
        list(GET cl 0 cpu)
        list(GET cl 1 lvl)
        add_test(NAME test_kernels_qemu_${cpu}
                 COMMAND ${TS_QEMU_X86_64} -cpu ${cpu} $<TARGET_FILE:test_kernels> --slack --expect-level ${lvl})
      endforeach()
    endif()
  elseif(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$" AND TS_QEMU_AARCH64)
    add_test(NAME test_kernels_qemu_max
             COMMAND ${TS_QEMU_AARCH64} -L /usr/aarch64-linux-gnu -cpu max $<TARGET_FILE:test_kernels>
                     --expect-level neon)
    add_test(NAME test_kernels_qemu_a53
             COMMAND ${TS_QEMU_AARCH64} -L /usr/aarch64-linux-gnu -cpu cortex-a53 $<TARGET_FILE:test_kernels>
                     --expect-level scalar)
  endif()
endif()

# The panel GEMM and activation-tile kernels of every level this machine runs
# (x86/gemm_avx2.c, x86/gemm_avx512.c, arm/gemm_neon.c) against the scalar definitions
# of kernels/repack.h, bit for bit (tests/test_rp_gemm.c). The name starts
# with test_kernels so that tools/test_aarch64.sh runs it under qemu too.
ts_add_c_test(test_kernels_rp_gemm ${CMAKE_CURRENT_LIST_DIR}/test_rp_gemm.c)
# ... and on an emulated AVX2-only CPU (Haswell: no AVX-512 anywhere, so an
# AVX-512 instruction in the AVX2 path would fault there).
if(NOT TS_SANITIZE AND TS_QEMU_X86_64 AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME test_kernels_rp_gemm_qemu_Haswell
           COMMAND ${TS_QEMU_X86_64} -cpu Haswell $<TARGET_FILE:test_kernels_rp_gemm> --level avx2)
endif()

# CPU features as bits, the level chosen from them by score, TS_CPU_LEVEL's
# clamp against the rank ladder it replaced, and the matmul variants of
# linear.c (tests/test_cpu_feat.c); once with a lowered level, and on
# emulated CPUs (qemu-user, as test_kernels above): Haswell -> avx2 (no
# AVX-512 bits), Nehalem -> scalar (no AVX); aarch64: "max" -> neon,
# Cortex-A53 (no dotprod) -> scalar.
ts_add_c_test(test_cpu_feat ${CMAKE_CURRENT_LIST_DIR}/test_cpu_feat.c)
add_test(NAME test_cpu_feat_env_avx2 COMMAND test_cpu_feat)
set_tests_properties(test_cpu_feat_env_avx2 PROPERTIES ENVIRONMENT "TS_CPU_LEVEL=avx2")
# TS_PREFETCH: off and a byte count are honoured at every level; a trailing
# unit and an out-of-range count are junk, ignored
foreach(pf off 1024 12k 70000)
  add_test(NAME test_cpu_feat_prefetch_${pf} COMMAND test_cpu_feat)
  set_tests_properties(test_cpu_feat_prefetch_${pf} PROPERTIES ENVIRONMENT "TS_PREFETCH=${pf}")
endforeach()
if(NOT TS_SANITIZE)
  if(TS_QEMU_X86_64 AND NOT CMAKE_CROSSCOMPILING)
    add_test(NAME test_cpu_feat_qemu_Haswell
             COMMAND ${TS_QEMU_X86_64} -cpu Haswell $<TARGET_FILE:test_cpu_feat> --expect-level avx2)
    add_test(NAME test_cpu_feat_qemu_Nehalem
             COMMAND ${TS_QEMU_X86_64} -cpu Nehalem $<TARGET_FILE:test_cpu_feat> --expect-level scalar)
  elseif(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$" AND TS_QEMU_AARCH64)
    add_test(NAME test_cpu_feat_qemu_max
             COMMAND ${TS_QEMU_AARCH64} -L /usr/aarch64-linux-gnu -cpu max $<TARGET_FILE:test_cpu_feat>
                     --expect-level neon)
    add_test(NAME test_cpu_feat_qemu_a53
             COMMAND ${TS_QEMU_AARCH64} -L /usr/aarch64-linux-gnu -cpu cortex-a53 $<TARGET_FILE:test_cpu_feat>
                     --expect-level scalar)
  endif()
endif()

# An AVX2-only x86 machine, by forcing the dispatch level: whole models with
# the AVX2 kernels (panel GEMM of gemm_avx2.c, qdot, attention, SwiGLU).
#   test_perf_model_avx2: SmolLM2-135M Q4_1 repacked at avx2 (Q4_1 + Q8_0
#     panels), one resident copy, decode = prefill, close to TS_KERNELS=ref;
#   test_real_pinned_avx2: both real models' pinned top-1 ids and greedy
#     continuations (panels: Q4_1, Q8_0; gemma 3: Q5_0, Q4_K, Q6_K, Q8_0);
#   test_tiny_oracle_avx2: the transformers oracle on the tiny models (f32
#     weights: the AVX2 f32 dots and attention, no panels).
# Only in the main build (the kernel-only cross build has no models).
# (Not under the sanitizers: numeric variants whose kernels test_kernels_rp_gemm
# already runs there.)
if(TARGET tessera_core AND NOT TS_SANITIZE AND NOT CMAKE_CROSSCOMPILING
   AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  add_test(NAME test_perf_model_avx2 COMMAND test_perf_model ${TS_MODELS_DIR})
  add_test(NAME test_real_pinned_avx2
           COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_real_pinned.py
                   $<TARGET_FILE:ts_model_tool> ${TS_MODELS_DIR})
  add_test(NAME test_tiny_oracle_avx2
           COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_tiny_oracle.py
                   $<TARGET_FILE:ts_model_tool> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/tiny_models_avx2)
  set_tests_properties(test_perf_model_avx2 test_real_pinned_avx2 test_tiny_oracle_avx2
                       PROPERTIES ENVIRONMENT "TS_CPU_LEVEL=avx2")
endif()

# The reference kernels of kernels/block_ops.h (LayerNorm, adaLN modulation,
# MoE routing / grouping / grouped matmul / FFN, cross-attention) against
# double-precision formulas (tests/test_block_ops.c). Only in the main build:
# the kernel-only cross build has neither ref/block_ops_ref.c nor the
# ts_wmat_row / activation references it uses.
if(TARGET tessera_core)
  ts_add_c_test(test_block_ops ${CMAKE_CURRENT_LIST_DIR}/test_block_ops.c)
endif()

# The AMX tile kernels (src/kernels/amx): on the emulator everywhere; on
# the real unit against the emulator where AMX is usable (else skipped,
# with the reason, exit 77).
if(NOT CMAKE_CROSSCOMPILING)
  ts_add_c_test(test_amx ${CMAKE_CURRENT_LIST_DIR}/test_amx.c)
  add_test(NAME test_amx_hw COMMAND test_amx --hw)
  set_tests_properties(test_amx_hw PROPERTIES SKIP_RETURN_CODE 77)
  add_test(NAME test_amx_vnni COMMAND test_amx --vnni)
  set_tests_properties(test_amx_vnni PROPERTIES SKIP_RETURN_CODE 77)
endif()
