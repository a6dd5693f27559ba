#!/usr/bin/env bash
# The whole test suite: unit, integration and CLI tests of every crate, with the optional
# features on (MPI tests start OpenMPI's mpirun; scripts/setup.sh installs it), plus the
# replay library's tests without them (the "built without MPI/CUDA" error paths), plus the
# compile check of kernels-cuda/*.cu, plus the check that both install paths give a working
# capture (scripts/check-install.sh).
#
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
features=(--features mgbench/mpi)
# Build everything first: capture tests load the QEMU plugin (a cdylib) from target/debug.
cargo build --workspace "${features[@]}"
# Benchmarks (benches/) are not tests: they run with `cargo bench` or scripts/bench-*.py.
cargo test --workspace --lib --bins --tests --examples "${features[@]}"
cargo test --workspace --doc "${features[@]}"
cargo test -p mgbench-replay --lib
# The CUDA kernels compile (clang's CUDA front end to PTX; no CUDA SDK or GPU needed).
scripts/check-cuda-kernels.sh
# `cargo build --release` and `cargo install --path .` each give a working capture (the QEMU
# plugin embedded by build.rs), in a fresh target directory.
scripts/check-install.sh
