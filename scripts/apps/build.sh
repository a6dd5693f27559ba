#!/usr/bin/env bash
# Builds the demo programs into scripts/apps/build/ (or $1): plain x86-64 (no AVX-512, which
# QEMU's TCG cannot run), -O2 with debug info so traces symbolize to file:line. The AVX-512
# gather demo (static, so ptrace's single-stepping skips the dynamic loader) is built only
# where the compiler supports AVX-512; it needs the ptrace backend.
#
#   scripts/apps/build.sh [OUTDIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/build}"
mkdir -p "$out"
cc="${CC:-gcc}"
flags=(-O2 -g -fno-omit-frame-pointer -Wall -Wextra)
"$cc" "${flags[@]}" -o "$out/spmv" "$here/spmv.c" -pthread
"$cc" "${flags[@]}" -o "$out/affinity" "$here/affinity.c" -pthread
"$cc" "${flags[@]}" -o "$out/churn" "$here/churn.c" -pthread
"$cc" "${flags[@]}" -o "$out/histogram" "$here/histogram.c"
"$cc" "${flags[@]}" -o "$out/stencil" "$here/stencil.c"
"$cc" "${flags[@]}" -o "$out/gups" "$here/gups.c"
"$cc" "${flags[@]}" -o "$out/gather" "$here/gather.c"
"$cc" "${flags[@]}" -o "$out/triad" "$here/triad.c"
"$cc" "${flags[@]}" -fopenmp -o "$out/omp_gather" "$here/omp_gather.c"
for app in reuse_loops attribution hotcold rowcol ptrchase fdclose stringops; do
    "$cc" "${flags[@]}" -o "$out/$app" "$here/$app.c"
done
# AVX-512 demo: built where the compiler supports it; runs only on AVX-512 CPUs (ptrace backend).
if echo 'int main(void){return 0;}' | "$cc" -mavx512f -x c -o /dev/null - 2>/dev/null; then
    "$cc" "${flags[@]}" -mavx512f -static -o "$out/gather512" "$here/gather512.c"
fi
# Runs AVX-512 code it writes at run time (no -mavx512f needed): QEMU dies of SIGILL on it.
"$cc" "${flags[@]}" -o "$out/jit512" "$here/jit512.c"
# Runs a gather it writes at run time and names in a perf map (/tmp/perf-PID.map).
"$cc" "${flags[@]}" -o "$out/jitgather" "$here/jitgather.c"
echo "built demos in $out"
