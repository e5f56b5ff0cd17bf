#!/usr/bin/env bash
# build_llamacpp.sh - builds llama.cpp's llama-bench for side-by-side
# benchmarks (bench/vs_llamacpp.sh), from the llama.cpp sources vendored in
# the llama-cpp-python sdist on PyPI (the only route to llama.cpp's sources
# from this machine: PyPI and Debian are reachable, GitHub is not).
#
#   tools/build_llamacpp.sh [DIR]    (default DIR: ~/.cache/tessera/llamacpp)
#
# Prints the path of llama-bench. Version pinned so figures can be repeated.
set -euo pipefail
VER=${LLAMACPP_PY_VERSION:-0.3.36}
DIR=${1:-$HOME/.cache/tessera/llamacpp}
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${TS_PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$here/.venv/bin/python" ]; then PY=$here/.venv/bin/python
  elif [ -x "$HOME/.cache/tessera/venv/bin/python" ]; then PY=$HOME/.cache/tessera/venv/bin/python
  else PY=python3; fi
fi
mkdir -p "$DIR"
cd "$DIR"
src=llama_cpp_python-$VER/vendor/llama.cpp
if [ ! -d "$src" ]; then
  echo "build_llamacpp: fetching llama-cpp-python==$VER sdist from PyPI" >&2
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VER" -d .
  tar xzf "llama_cpp_python-$VER.tar.gz"
fi
if [ ! -x build/bin/llama-bench ]; then
  echo "build_llamacpp: building llama-bench (several minutes on 2 cores)" >&2
  cmake -S "$src" -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
  ninja -C build ${JOBS:+-j$JOBS} llama-bench >/dev/null
fi
echo "$DIR/build/bin/llama-bench"
