# kernel_isa.cmake - which per-ISA kernel files a build compiles, and with
# which flags. Included by the top CMakeLists.txt (and by the kernel-only
# cross build, cmake/kernels_only/CMakeLists.txt).
#
#   src/kernels/x86/*_avx2.c    x86-64 only   -mavx2 -mfma -mf16c
#   src/kernels/x86/*_avx512.c  x86-64 only   + -mavx512f -mavx512bw -mavx512vl -mavx512vnni
#   src/kernels/x86/*_amx.c     x86-64 only   the avx512 flags + -mamx-tile -mamx-int8 -mamx-bf16
#   src/kernels/x86/amx_*.c     x86-64 only   the avx512 flags + -ffp-contract=off (the AMX
#                                             layout on other units, rounding as the tiles' kernels)
#   src/kernels/amx/*.c         everywhere    -ffp-contract=off (the emulated and the real AMX
#                                             kernels must round the same; gemm_amx.c too)
#   src/kernels/arm/*.c         aarch64 only  -march=armv8.2-a+dotprod+fp16
#
# Every other file gets no ISA flag: one x86-64 binary runs on any x86-64
# CPU, and src/kernels/cpu.c picks the level at run time (it is told which
# kernel files are present by TS_KERNELS_X86 / TS_KERNELS_ARM).
# (-mavx512bf16 is left out on purpose: no kernel uses BF16, and requiring it
# would keep VNNI-but-no-BF16 CPUs such as Ice Lake / Cascade Lake on AVX2.)

function(ts_kernel_isa_sources var)
  set(srcs ${${var}})
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    list(FILTER srcs EXCLUDE REGEX "/src/kernels/arm/")
    foreach(f ${srcs})
      if(f MATCHES "/src/kernels/x86/amx_[^/]*\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
          "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c;-ffp-contract=off")
      elseif(f MATCHES "/src/kernels/x86/[^/]*_avx2\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
      elseif(f MATCHES "/src/kernels/x86/[^/]*_avx512\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
          "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c")
      elseif(f MATCHES "/src/kernels/x86/[^/]*_amx\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
          "-mamx-tile;-mamx-int8;-mamx-bf16;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c;-ffp-contract=off")
      elseif(f MATCHES "/src/kernels/cpu\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_DEFINITIONS TS_KERNELS_X86)
      elseif(f MATCHES "/src/kernels/amx/[^/]*\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_DEFINITIONS TS_KERNELS_X86 COMPILE_OPTIONS "-ffp-contract=off")
      endif()
    endforeach()
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$" AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
    list(FILTER srcs EXCLUDE REGEX "/src/kernels/x86/")
    foreach(f ${srcs})
      if(f MATCHES "/src/kernels/arm/[^/]*\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-march=armv8.2-a+dotprod+fp16")
      elseif(f MATCHES "/src/kernels/cpu\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_DEFINITIONS TS_KERNELS_ARM)
      elseif(f MATCHES "/src/kernels/amx/[^/]*\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
      endif()
    endforeach()
  else()
    list(FILTER srcs EXCLUDE REGEX "/src/kernels/(x86|arm)/")
  endif()
  set(${var} ${srcs} PARENT_SCOPE)
endfunction()
