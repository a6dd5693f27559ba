#!/usr/bin/env bash
# Both ways users build mgbench give a `capture` and a live `reuse` that work, with no plugin
# beside the binary:
# `cargo build --release` (no --workspace, so the plugin crate is not built into target/) and
# `cargo install --path .` (the binary lands far from any build tree). The QEMU plugin comes
# from the bytes build.rs embedded, written to the cache directory on first use.
#
#   scripts/check-install.sh            (part of scripts/test.sh; needs qemu-user)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/mgbench-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="$work/target"

check() { # check NAME BINARY
    local name=$1 bin=$2 cache="$work/cache-$1"
    if [[ -e "$(dirname "$bin")/libmgbench_qemu_plugin.so" ]]; then
        echo "check-install: $name: a plugin lies beside $bin, so this proves nothing" >&2
        exit 1
    fi
    (cd "$work" && XDG_CACHE_HOME="$cache" "$bin" capture --quiet --full -o "$name.mgbt" -- /bin/ls / >/dev/null)
    ls "$cache"/mgbench/libmgbench_qemu_plugin-*.so >/dev/null
    local info
    info=$("$bin" trace info "$work/$name.mgbt")
    grep -q "^backend *qemu, full" <<<"$info"
    local n
    n=$(awk '/^accesses/ {print $2}' <<<"$info")
    if (( n < 10000 )); then
        echo "check-install: $name: only $n accesses recorded" >&2
        exit 1
    fi
    echo "check-install: $name: capture works with the embedded plugin ($n accesses of /bin/ls)"
    # Live RDX loads the same plugin, from a cache it writes itself.
    local live="$work/live-$1"
    # (The report goes to stderr, as ls's listing keeps stdout; shown only if the run fails.)
    if ! (cd "$work" && XDG_CACHE_HOME="$live" "$bin" reuse --quiet --period 4096 -o "$name-reuse.json" -- /bin/ls / >/dev/null 2>"$name-reuse.log"); then
        cat "$work/$name-reuse.log" >&2
        exit 1
    fi
    ls "$live"/mgbench/libmgbench_qemu_plugin-*.so >/dev/null
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["live"] and r["words"]["samples"] > 0, r["words"]' "$work/$name-reuse.json"
    echo "check-install: $name: live reuse works with the embedded plugin"
}

cargo build --release --quiet
check "cargo-build" "$CARGO_TARGET_DIR/release/mgbench"
cargo install --quiet --path . --root "$work/install"
check "cargo-install" "$work/install/bin/mgbench"
