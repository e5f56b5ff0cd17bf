#!/usr/bin/env bash
# build_llamacpp.sh - builds llama.cpp's llama-bench for side-by-side
# benchmarks (bench/vs_llamacpp.sh), from the llama.cpp sources vendored in
# the llama-cpp-python sdist on PyPI (the only route to llama.cpp's sources
# from this machine: PyPI and Debian are reachable, GitHub is not).
#
#   tools/build_llamacpp.sh [DIR]    (default DIR: ~/.cache/tessera/llamacpp)
#   LLAMACPP_AMX=off tools/build_llamacpp.sh [DIR]
#
# Builds llama-bench and llama-perplexity (the KL-divergence oracle, tests
# kld_llamacpp_*); prints the path of llama-bench, llama-perplexity lies
# beside it. Version pinned so figures can be repeated.
# The build is -march=native (GGML_NATIVE): on a CPU with AMX that includes
# ggml-cpu's AMX path, which in this version segfaults in
# ggml_backend_amx_mul_mat on our AMX machine. LLAMACPP_AMX=off builds the
# same native build without the AMX instructions (-mno-amx-*) into
# build-noamx/: the build tessera is compared with there (docs/PERFORMANCE.md).
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
bdir=build
flags=()
if [ "${LLAMACPP_AMX:-on}" = off ]; then
  bdir=build-noamx
  flags=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
         -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi
if [ ! -x $bdir/bin/llama-bench ] || [ ! -x $bdir/bin/llama-perplexity ]; then
  echo "build_llamacpp: building llama-bench and llama-perplexity in $bdir (several minutes on 2 cores)" >&2
  cmake -S "$src" -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
    "${flags[@]}" >/dev/null
  ninja -C $bdir ${JOBS:+-j$JOBS} llama-bench llama-perplexity >/dev/null
fi
echo "$DIR/$bdir/bin/llama-bench"
