#!/usr/bin/env bash
# Compile check of the CUDA kernels without the CUDA SDK: clang's CUDA front end compiles each
# kernels-cuda/*.cu to PTX (device code only, no CUDA headers or libraries; the few built-ins
# NVRTC provides come from kernels-cuda/clang-compat.h), then checks that every kernel the host
# launches is in the PTX. mgbench itself compiles the same sources at run time with NVRTC.
#
#   scripts/check-cuda-kernels.sh [--arch sm_70] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
arch=sm_70          # atomicAdd on doubles needs sm_60 or newer
out=$(mktemp -d)
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch=$2; shift 2 ;;
        --out) out=$2; mkdir -p "$out"; shift 2 ;;
        *) echo "check-cuda-kernels: unknown argument $1 (use --arch SM, --out DIR)" >&2; exit 2 ;;
    esac
done
if ! command -v clang >/dev/null 2>&1; then
    echo "check-cuda-kernels: clang not found: run scripts/setup.sh (installs Debian's clang)" >&2
    exit 1
fi
# The kernel names the host code (replay/src/gpu/mod.rs) launches, per source file.
declare -A expect=(
    [spatter]="gather scatter scatter_atomic gs gs_atomic multigather multiscatter multiscatter_atomic fill"
    [babelstream]="stream_init stream_copy stream_mul stream_add stream_triad stream_dot"
)
status=0
for src in kernels-cuda/*.cu; do
    name=$(basename "$src" .cu)
    ptx="$out/$name.ptx"
    clang -x cuda --cuda-device-only --cuda-gpu-arch="$arch" -nocudainc -nocudalib \
        -include kernels-cuda/clang-compat.h -O3 -Wall -Werror -S -o "$ptx" "$src"
    for k in ${expect[$name]:-}; do
        if ! grep -q "^.visible .entry $k(" "$ptx"; then
            echo "check-cuda-kernels: $src: kernel $k missing from the PTX" >&2
            status=1
        fi
    done
    echo "check-cuda-kernels: $src -> $ptx ($(grep -c '^.visible .entry' "$ptx") kernels, $arch)"
done
exit $status
