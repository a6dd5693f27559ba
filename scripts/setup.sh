#!/usr/bin/env bash
# Installs what mgbench needs to build, test and benchmark on a fresh Debian 12 machine.
# Idempotent: installs only what is missing. Needs root (or sudo) for apt-get.
#
#   scripts/setup.sh
set -euo pipefail

# Debian packages and the command that proves each is present.
packages=()
need() { command -v "$1" >/dev/null 2>&1 || packages+=("$2"); }
need gcc build-essential       # C reference loops, demo apps (scripts/apps), -sys crates
need gfortran gfortran         # Fortran programs in the capture tests (module procedures, OpenMP)
need python3 python3           # scripts/*.py
need qemu-x86_64 qemu-user     # capture --backend qemu (the default)
need valgrind valgrind         # lackey: the oracle for per-instruction access counts in tests
need sqlite3 sqlite3           # scripts/rdx-accuracy.py, footprint-accuracy.py: a program nobody here wrote
# The C library's debug file: names for its internal functions (symbolization tests).
dpkg-query -W -f='${Status}' libc6-dbg 2>/dev/null | grep -q "ok installed" || packages+=(libc6-dbg)
need mpirun openmpi-bin        # replay --mpi: the MPI runtime
need mpicc libopenmpi-dev      # the mpi crate (feature "mpi") links OpenMPI...
compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null || packages+=(libclang-dev)  # ...and bindgen needs libclang
need clang clang               # scripts/check-cuda-kernels.sh: kernels-cuda/*.cu to PTX, no CUDA SDK
compgen -G "/usr/lib/llvm-*/lib/libomp.so" >/dev/null || packages+=(libomp-dev)  # clang -fopenmp programs in the capture tests
need node nodejs               # the report's browser check (report/tests/browser)...
need npm npm                   # ...installs playwright-core from npm
# The browser the report check drives (Debian's, no download) and the fonts figures use.
light=()
[ -x /usr/bin/chromium-headless-shell ] || light+=(chromium-headless-shell)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || light+=(fonts-dejavu-core)

if [ "${#packages[@]}" -gt 0 ] || [ "${#light[@]}" -gt 0 ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to install: ${packages[*]} ${light[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    echo "setup: installing ${packages[*]} ${light[*]}"
    $sudo apt-get update -qq
    if [ "${#packages[@]}" -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${packages[@]}" >/dev/null
    fi
    if [ "${#light[@]}" -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${light[@]}" >/dev/null
    fi
fi

# playwright-core for the report's browser check, at the version package-lock.json pins.
browser_dir="$(cd "$(dirname "$0")/.." && pwd)/report/tests/browser"
if [ ! -d "$browser_dir/node_modules/playwright-core" ]; then
    echo "setup: npm ci in report/tests/browser (playwright-core; it downloads no browser)"
    (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found: install Rust (https://rustup.rs) and re-run" >&2
    exit 1
fi
echo "setup: ok ($(cargo --version), $(gcc --version | head -n1))"
