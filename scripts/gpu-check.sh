#!/usr/bin/env bash
# Checks `mgbench replay --cuda` and `mgbench stream --cuda` on a machine with an NVIDIA GPU:
# the device tests (each Spatter kernel's results against the host's, GPU STREAM validation,
# a sweep through replay), then the CLI as a user runs it: GPU STREAM, the shipped patterns,
# their throughput sweep, the same patterns on the CPU for comparison, and three refusals.
# Every step runs even when an earlier one failed; the last line says which failed.
#
#   scripts/gpu-check.sh [--mgbench BIN] [--tests BIN] [--out DIR]
#
# Without --mgbench and --tests it builds both with cargo (a build without MPI, so the
# binaries run on a GPU machine that lacks OpenMPI): copy them there with the repository and
# pass them. NVRTC is looked for where the CUDA toolkit and its pip wheels put it when the
# loader does not find it by itself; the log says which library was used.
set -uo pipefail
cd "$(dirname "$0")/.."
mgbench=
tests=
out=gpu-check
while [ $# -gt 0 ]; do
    case "$1" in
        --mgbench) mgbench=$2; shift 2 ;;
        --tests) tests=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "gpu-check: unknown argument $1 (use --mgbench BIN, --tests BIN, --out DIR)" >&2; exit 2 ;;
    esac
done
if [ -z "$mgbench" ] || [ -z "$tests" ]; then
    if ! command -v cargo >/dev/null 2>&1; then
        echo "gpu-check: no cargo here: pass --mgbench and --tests (built elsewhere with this script)" >&2
        exit 2
    fi
    target=${CARGO_TARGET_DIR:-target}/gpu-check
    CARGO_TARGET_DIR=$target cargo build --release -p mgbench --no-default-features --features cuda || exit 1
    mgbench=$target/release/mgbench
    tests=$(CARGO_TARGET_DIR=$target cargo test --release -p mgbench-replay --features cuda --lib --no-run 2>&1 |
        sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))/\1/p' | tail -n 1)
    [ -x "$tests" ] || { echo "gpu-check: could not build the replay tests" >&2; exit 1; }
fi
mkdir -p "$out/results"
failed=()
step() {
    local name=$1
    shift
    echo
    echo "== $name: $*"
    local t0=$SECONDS
    if "$@"; then
        echo "-- $name: ok ($((SECONDS - t0)) s)"
    else
        echo "-- $name: FAILED (exit $?, $((SECONDS - t0)) s)"
        failed+=("$name")
    fi
}
# A refusal must fail with a message that names what to change.
refused() {
    local want=$1
    shift
    local msg
    if msg=$("$@" 2>&1); then
        echo "expected a refusal, got success"
        return 1
    fi
    echo "$msg"
    grep -q -- "$want" <<<"$msg"
}

step gpu nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
# What a user sees first, before any help finding NVRTC.
step first-open "$mgbench" stream --cuda --size 1048576
if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
    lib=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 2>/dev/null
        python3 -c 'import nvidia, os; [print(os.path.join(p, "cuda_nvrtc", "lib")) for p in nvidia.__path__]; [print(os.path.join(p, "cu13", "lib")) for p in nvidia.__path__]' 2>/dev/null) |
        while read -r d; do ls "$d"/libnvrtc.so* >/dev/null 2>&1 && echo "$d"; done | head -n 1)
    if [ -n "$lib" ]; then
        echo "gpu-check: NVRTC from $lib"
        export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    else
        echo "gpu-check: no libnvrtc.so found (CUDA toolkit or pip nvidia-cuda-nvrtc)"
    fi
fi
step device-tests "$tests" --ignored --test-threads=1 --nocapture gpu::cuda
step stream "$mgbench" stream --cuda --format json
step replay "$mgbench" replay patterns/*.json --cuda -o "$out/results"
step sweep "$mgbench" replay patterns/uniform.json patterns/random.json --cuda --sweep -o "$out/results"
step cpu-replay "$mgbench" replay patterns/*.json -o "$out/results"
step no-such-device refused "CUDA device(s)" "$mgbench" replay patterns/uniform.json --cuda --device 99
step too-large refused "free of" "$mgbench" replay -p UNIFORM:8:1 -d 1099511627776 -l 4096 --cuda --no-save
step apex-refused refused "apex" "$mgbench" replay -k apex --apex-l 8 --apex-k 0.5 --cuda
echo
if [ ${#failed[@]} -eq 0 ]; then
    echo "gpu-check: all steps passed; results in $out/results"
else
    echo "gpu-check: FAILED: ${failed[*]}"
    exit 1
fi
