#!/usr/bin/env bash
# Regenerates the README's report screenshots (docs/report-*.png) from the report's test
# fixtures, through the same browser check the tests run (it needs scripts/setup.sh first).
#
#   scripts/report-screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
target/release/mgbench report report/tests/data -o "$tmp/report.html" --quiet
node report/tests/browser/check-report.mjs "$tmp/report.html" --figures "$tmp/figures" >/dev/null
cp "$tmp/figures/bandwidth-bandwidth.png" docs/report-bandwidth-bandwidth.png
cp "$tmp/figures/bandwidth-vm.png" docs/report-machine.png
cp "$tmp/figures/mpi-weak-total.png" docs/report-mpi.png
echo "screenshots in docs/"
