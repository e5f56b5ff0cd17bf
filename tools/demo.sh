#!/usr/bin/env bash
# README's first command: set up, build, and run the main job on the default model.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j"$(nproc)"
./build/tessera run -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat -n 64 --temp 0 --no-display-prompt \
  -p "${1:-What is the capital of France? Answer in one sentence.}"
