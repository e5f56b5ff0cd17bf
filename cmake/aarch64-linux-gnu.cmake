# aarch64-linux-gnu.cmake - CMake toolchain for cross-building tessera for
# 64-bit ARM Linux with Debian's gcc-aarch64-linux-gnu, running the built
# tests under qemu-user:
#
#   cmake -S . -B build-aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# The whole library needs an arm64 PCRE2 (libpcre2-dev:arm64, found through
# the multiarch pkg-config directory below); tools/test_aarch64.sh falls back
# to the kernel-only project (cmake/kernels_only) when it is missing.

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)

# target headers and libraries only from the cross sysroot / multiarch dirs
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/aarch64-linux-gnu/lib/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")

# ctest runs target executables through this (qemu's default CPU, "max",
# has the dotprod and fp16 extensions the NEON kernels need)
find_program(TS_QEMU_AARCH64 qemu-aarch64)
if(TS_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${TS_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
