#!/usr/bin/env python3
"""Runs every Spatter pattern file under a directory through `mgbench replay` and prints, per
file, whether it ran or was refused and why. Fetches nothing: point it at a checkout of a
pattern corpus (e.g. hpcgarage/spatter-patterns) or at your own files.

    python3 scripts/check-corpus.py DIR [--mgbench PATH] [--threads N] [--no-compact-retry]

Each file runs once, briefly (1 timed run, no warm-up, no STREAM, no results files). A file
refused because its indices are too far apart for this machine is tried again with
`--compact-gaps` (unless --no-compact-retry) and reported as "ran (compacted)". Exit status:
0 when every file ran, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def find_mgbench(given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for build in ("release", "debug"):
        p = os.path.join(here, "..", "target", build, "mgbench")
        if os.path.isfile(p):
            return os.path.normpath(p)
    found = shutil.which("mgbench")
    if found:
        return found
    sys.exit("check-corpus: no mgbench found: build it (cargo build --release) or pass --mgbench PATH")


def pattern_files(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(".json"):
                out.append(os.path.join(dirpath, f))
    return out


def reason(stderr):
    """The first error line mgbench printed, without its prefix."""
    for line in stderr.splitlines():
        if line.startswith("mgbench: ") and "pattern config(s) checked" not in line:
            return line[len("mgbench: "):]
    lines = [l for l in stderr.splitlines() if l.strip()]
    return lines[-1] if lines else "no message"


def run(mgbench, path, threads, extra, timeout):
    cmd = [mgbench, "replay", path, "--format", "json", "--no-save", "--no-stream",
           "--runs", "1", "--warmup", "0", "--quiet"]
    if threads:
        cmd += ["--threads", str(threads)]
    cmd += extra
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"still running after {timeout} s", time.monotonic() - start
    elapsed = time.monotonic() - start
    if p.returncode != 0:
        return None, reason(p.stderr), elapsed
    try:
        records = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        return None, f"unreadable output: {e}", elapsed
    return records, None, elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="directory searched for *.json pattern files")
    ap.add_argument("--mgbench", help="mgbench executable (default: target/release, target/debug, PATH)")
    ap.add_argument("--threads", type=int, help="replay threads (default: mgbench's)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per file (default 600)")
    ap.add_argument("--no-compact-retry", action="store_true",
                    help="do not retry refused files with --compact-gaps")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        sys.exit(f"check-corpus: {args.dir} is not a directory")
    mgbench = find_mgbench(args.mgbench)
    files = pattern_files(args.dir)
    if not files:
        sys.exit(f"check-corpus: no *.json files under {args.dir}")
    failed = 0
    width = max(len(os.path.relpath(f, args.dir)) for f in files)
    print(f"{'file':<{width}}  {'configs':>7}  {'seconds':>7}  result")
    for f in files:
        name = os.path.relpath(f, args.dir)
        records, why, secs = run(mgbench, f, args.threads, [], args.timeout)
        status = "ran"
        if records is None and not args.no_compact_retry and "--compact-gaps" in why:
            records, why2, secs2 = run(mgbench, f, args.threads, ["--compact-gaps"], args.timeout)
            secs += secs2
            if records is not None:
                status = "ran (compacted: --compact-gaps)"
            else:
                why = f"{why} / with --compact-gaps: {why2}"
        if records is None:
            failed += 1
            print(f"{name:<{width}}  {'-':>7}  {secs:>7.1f}  refused: {why}")
            continue
        negative = sum(1 for r in records if r.get("delta", 0) < 0 or (r.get("delta_scatter") or 0) < 0)
        extras = []
        if negative:
            extras.append(f"{negative} with negative deltas")
        if extras:
            status += " (" + ", ".join(extras) + ")"
        print(f"{name:<{width}}  {len(records):>7}  {secs:>7.1f}  {status}")
    print(f"\n{len(files) - failed} of {len(files)} file(s) ran")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
