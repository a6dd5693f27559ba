#!/usr/bin/env bash
# The whole test suite: unit, integration and CLI tests of every crate.
#
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# Build everything first: capture tests load the QEMU plugin (a cdylib) from target/debug.
cargo build --workspace
cargo test --workspace --all-targets
cargo test --workspace --doc
