#!/usr/bin/env bash
# Carries binaries built on a Debian machine to a GPU machine that has the NVIDIA driver and
# CUDA's libraries (cuBLAS, cuDNN, NCCL in its Python environment's NVIDIA wheels) but none of
# the Debian libraries the binaries link (oneDNN, Open MPI, Boost, SentencePiece, ...).
#   bundle.sh pack TARBALL BINARY...   here: the binaries and every shared library they load,
#                                      except libc's family and CUDA's, into an xz tarball
#   bundle.sh run TARBALL CMD [ARGS]   there: unpack to $BUNDLE_DIR (/tmp/trainer-bundle), point
#                                      the loader at the bundle and at CUDA's libraries, run CMD
#                                      (a bundled binary by its name)
set -euo pipefail

# Loaded from the machine that runs the binary: libc's family, and CUDA's libraries, which
# must match that machine's driver.
KEEP_OUT='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink|libnvidia)'
BUNDLE_DIR=${BUNDLE_DIR:-/tmp/trainer-bundle}

fail() {
  echo "bundle: $*" >&2
  exit 1
}

pack() {
  local tarball=$1 stage
  shift
  [[ $# -gt 0 ]] || fail "pack: name the binaries"
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  for binary in "$@"; do
    [[ -x $binary ]] || fail "pack: $binary is not an executable"
    cp -L "$binary" "$stage/bin/"
    ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
      [[ $name =~ $KEEP_OUT ]] || cp -Ln "$path" "$stage/lib/$name"
    done
  done
  strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
  tar -C "$stage" -cJf "$tarball" bin lib
  rm -rf "$stage"
  # The device tool carries at most 64 MiB of ignored files to the GPU machine, all together.
  local bytes limit=$((64 << 20))
  bytes=$(stat -c %s "$tarball")
  echo "bundle: $tarball ($((bytes >> 20)) MiB of the $((limit >> 20)) MiB a GPU call can carry)"
  ((bytes <= limit)) || fail "pack: $tarball is $bytes bytes, over the $limit a GPU call can carry"
}

# Folders holding CUDA's libraries on this machine: the toolkit's and the Python wheels'.
cuda_dirs() {
  local site
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
  find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/nvidia/lib64 \
    /usr/lib/x86_64-linux-gnu ${site:+"$site/nvidia"} -maxdepth 4 \
    \( -name 'libcudart.so*' -o -name 'libcublas*.so*' -o -name 'libcudnn.so*' \
    -o -name 'libnccl.so*' -o -name 'libcuda.so*' -o -name 'libnvrtc.so*' \) 2>/dev/null | xargs -r -n1 dirname | sort -u || true
}

run() {
  local tarball=$1 dirs
  shift
  rm -rf "$BUNDLE_DIR"
  mkdir -p "$BUNDLE_DIR"
  tar -C "$BUNDLE_DIR" -xJf "$tarball"
  dirs=$(cuda_dirs | paste -sd:)
  export LD_LIBRARY_PATH="$BUNDLE_DIR/lib${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$BUNDLE_DIR/bin:$PATH"
  local missing
  missing=$(for b in "$BUNDLE_DIR"/bin/*; do ldd "$b" | grep 'not found' || true; done | sort -u)
  [[ -z $missing ]] || fail "libraries not found: $missing"
  "$@"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) fail "usage: bundle.sh pack TARBALL BINARY... | run TARBALL CMD [ARGS]" ;;
esac
