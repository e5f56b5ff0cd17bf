#!/usr/bin/env bash
# test_aarch64.sh - cross-build tessera's kernels for aarch64 with Debian's
# gcc-aarch64-linux-gnu (cmake/aarch64-linux-gnu.cmake) and run their tests
# under qemu-aarch64 (qemu-user): test_kernels at qemu's default CPU (NEON +
# dotprod: scalar and neon levels), plus the detection checks on "max"
# (-> neon) and Cortex-A53 (no dotprod -> scalar), and test_cpu_feat (the
# feature bits, the level chosen from them, the matmul variants) on the same
# three CPUs. When the whole library is cross-built, the tiny-model
# transformers oracle (tests/test_tiny_oracle.py) also runs the aarch64
# ts_model_tool under qemu, single-threaded: this
# machine's qemu-aarch64 (7.2) hangs in pthread_create even for a trivial
# program that starts one thread, so threaded runs cannot be tested here.
#
# With an arm64 PCRE2 installed (libpcre2-dev:arm64) the whole library is
# cross-built; without it, only what the kernel tests need (the kernels,
# src/quant, src/core/err.c and threadpool.c: cmake/kernels_only).
#
# Usage: tools/test_aarch64.sh [BUILD_DIR]   (default: build-aarch64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64}
toolchain=$root/cmake/aarch64-linux-gnu.cmake

for tool in aarch64-linux-gnu-gcc qemu-aarch64 cmake ninja; do
  command -v "$tool" >/dev/null || { echo "test_aarch64.sh: $tool not found" >&2; exit 1; }
done

if PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig pkg-config --exists libpcre2-8 2>/dev/null; then
  src=$root
  echo "== cross-building the library + test_kernels"
else
  src=$root/cmake/kernels_only
  echo "== no arm64 PCRE2: cross-building the kernels + src/quant + test_kernels only"
fi

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release -DTS_SERVER=OFF >/dev/null
ninja -C "$build" -j2 test_kernels test_kernels_rp_gemm test_cpu_feat
ctest --test-dir "$build" -R '^test_(kernels|cpu_feat)' --output-on-failure

# The tiny-model oracle (tests/test_tiny_oracle.py: HF transformers on the
# host vs the aarch64 ts_model_tool under qemu), when the whole library was built.
if [ "$src" = "$root" ]; then
  py=$root/.venv/bin/python; [ -x "$py" ] || py=${TESSERA_VENV:-$HOME/.cache/tessera/venv}/bin/python
  ninja -C "$build" -j2 ts_model_tool
  echo "== tiny-model oracle under qemu-aarch64"
  TS_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" "$py" "$root/tests/test_tiny_oracle.py" \
    "$build/tests/ts_model_tool" "$root/models" "$build/tiny_models"
fi
