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
