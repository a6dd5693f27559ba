#!/usr/bin/env python3
"""MPI ranks against threads on this machine: 2 ranks x 1 thread vs 1 rank x 2 threads.

Both sides do the same work, a UNIFORM:8:1 gather (delta 8, count 2^22, a 256 MiB sparse
buffer): one mgbench process with 2 pinned threads, and `mgbench replay --mpi 2 --strong
--threads 1` (OpenMPI's mpirun, each rank pinned to its own CPU, half the count loop each).
They alternate --reps times (1 warm-up + 10 timed runs each); the script prints the medians
and the median of the per-repetition ratios (MPI honest aggregate / threads), and the same for
Spatter's sum-of-ranks figure.

    python3 scripts/bench-mpi.py [--reps 5] [--count 4194304] [--skip-build]

Target (issue #6): the ratio within 5% of 1. Every measurement goes to results/ as CSV.
"""
import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")


def replay(extra, count):
    cmd = [MGBENCH, "replay", "-p", "UNIFORM:8:1", "-d", "8", "-l", str(count), "--runs", "10",
           "--format", "json", "--no-save", "--no-stream"] + extra
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr}")
    return json.loads(res.stdout)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--count", type=int, default=1 << 22)
    ap.add_argument("--skip-build", action="store_true")
    a = ap.parse_args()
    if not a.skip_build:
        subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "mpi"], cwd=ROOT,
                       check=True)
    rows = []
    for rep in range(a.reps):
        threads = replay(["--threads", "2"], a.count)
        ranks = replay(["--mpi", "2", "--strong", "--threads", "1"], a.count)
        assert ranks["bytes"] == threads["bytes"], "both sides must move the same bytes"
        row = {
            "rep": rep,
            "threads_mbs": threads["bandwidth_mbs"],
            "ranks_mbs": ranks["bandwidth_mbs"],
            "ranks_sum_mbs": ranks["mpi"]["sum_of_rank_bandwidths_mbs"],
            "ratio": ranks["bandwidth_mbs"] / threads["bandwidth_mbs"],
            "ratio_sum": ranks["mpi"]["sum_of_rank_bandwidths_mbs"] / threads["bandwidth_mbs"],
            "load_avg_1m": ranks["host"]["load_avg_1m"],
        }
        rows.append(row)
        print(f"rep {rep}: 1 rank x 2 threads {row['threads_mbs']:.1f} MB/s, "
              f"2 ranks x 1 thread {row['ranks_mbs']:.1f} MB/s (sum of ranks "
              f"{row['ranks_sum_mbs']:.1f}); ratio {row['ratio']:.3f}", flush=True)
    med = lambda k: statistics.median(r[k] for r in rows)
    ratio = med("ratio")
    print(f"median: threads {med('threads_mbs'):.1f} MB/s, ranks {med('ranks_mbs'):.1f} MB/s "
          f"(sum {med('ranks_sum_mbs'):.1f}); median ratio {ratio:.3f} "
          f"(sum-of-ranks ratio {med('ratio_sum'):.3f}); target within 5%: "
          f"{'met' if abs(ratio - 1) <= 0.05 else 'NOT met'}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = os.path.join(ROOT, "results", f"bench-mpi-{stamp}.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
