#!/usr/bin/env bash
# The whole test suite (README's test command; .ci/run calls it):
#   1. set-up (packages, venv, models; skipped when done)
#   2. gcc release build + every CTest test
#   3. clang build with -Werror (compile check)
#   4. aarch64 cross build of the kernels + their tests under qemu-user
#   5. a bounded libFuzzer run of the GGUF parser (ASan+UBSan)
#   6. ASan+UBSan build (clang) + every CTest test (LeakSanitizer on)
# Exits non-zero on the first failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/setup.sh
jobs=$(nproc)

echo "== gcc build + tests" >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DTS_TEST_HOOKS=ON >/dev/null
ninja -C build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== clang -Werror build" >&2
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DTS_TEST_HOOKS=OFF >/dev/null
ninja -C build-clang -j"$jobs"

echo "== aarch64 cross build + kernel tests under qemu" >&2
bash tools/test_aarch64.sh build-aarch64

echo "== GGUF parser fuzz run (libFuzzer, ASan+UBSan, 60 s)" >&2
# A build of its own: the coverage instrumentation the fuzzer needs slows
# every other test ~100x, so the suite runs under ASan in the next build.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DTS_FUZZ=ON >/dev/null
ninja -C build-fuzz -j"$jobs" fuzz_gguf
ctest --test-dir build-fuzz --output-on-failure -R '^fuzz_gguf$'

echo "== ASan+UBSan build + every test" >&2
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DTS_SANITIZE=ON -DTS_TEST_HOOKS=ON >/dev/null
ninja -C build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
