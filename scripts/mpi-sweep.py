#!/usr/bin/env python3
"""Weak- or strong-scaling sweep of one pattern file over MPI rank counts, into one CSV.

For each rank count, runs `mgbench replay FILE --mpi N` (OpenMPI's mpirun by default) with
--format json and writes one CSV row per configuration and rank count: the honest aggregate
(all ranks' bytes / slowest rank's best time), Spatter's sum of per-rank bandwidths, the
spread between ranks, and the scaling efficiency against the smallest rank count of the sweep
(weak: bandwidth / (ranks x its bandwidth per rank); strong: its time / (ranks x time)).

    python3 scripts/mpi-sweep.py PATTERN.json [--ranks 1,2,4] [--strong] [--threads 1]
                                 [--runs 10] [--out FILE.csv] [--skip-build] [-- REPLAY ARGS]

Needs mgbench built with --features mpi (done here unless --skip-build) and mpirun.
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")

COLUMNS = [
    "ranks", "threads_per_rank", "scaling", "name", "kernel", "pattern_len", "count", "bytes",
    "min_time_s", "bandwidth_mbs", "sum_of_rank_bandwidths_mbs", "slowest_rank",
    "rank_time_spread", "efficiency", "stream_copy_mbs", "pct_of_stream", "load_avg_1m",
    "source", "time",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pattern_file")
    ap.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts (default 1,2,4)")
    ap.add_argument("--strong", action="store_true", help="strong scaling (default: weak)")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank (default 1)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per configuration")
    ap.add_argument("--out", help="CSV to write (default results/mpi-sweep-<time>.csv)")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("replay_args", nargs="*", help="more `mgbench replay` arguments, after --")
    a = ap.parse_args()
    try:
        ranks = [int(r) for r in a.ranks.split(",") if r.strip()]
    except ValueError:
        sys.exit(f"--ranks {a.ranks!r}: give comma-separated integers, e.g. 1,2,4")
    if not ranks or min(ranks) < 1:
        sys.exit("--ranks: every rank count must be at least 1")
    if not os.path.isfile(a.pattern_file):
        sys.exit(f"{a.pattern_file}: no such pattern file")
    if not a.skip_build:
        subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "mpi"], cwd=ROOT,
                       check=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = a.out or os.path.join(ROOT, "results", f"mpi-sweep-{stamp}.csv")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    scaling = "strong" if a.strong else "weak"
    base = {}
    rows = []
    for n in sorted(ranks):
        cmd = [MGBENCH, "replay", a.pattern_file, "--mpi", str(n), "--threads", str(a.threads),
               "--runs", str(a.runs), "--format", "json", "--no-save"]
        if a.strong:
            cmd.append("--strong")
        cmd += a.replay_args
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr}")
        for r in json.loads(res.stdout):
            m = r["mpi"]
            times = [p["min_time_s"] for p in m["per_rank"] if p["bytes"] > 0]
            key = (r["source"], r["config_index"])
            if key not in base:
                base[key] = (n, r)
            n0, r0 = base[key]
            if scaling == "weak":
                eff = (r["bandwidth_mbs"] / n) / (r0["bandwidth_mbs"] / n0)
            else:
                eff = (r0["min_time_s"] * n0) / (r["min_time_s"] * n)
            rows.append({
                "ranks": n, "threads_per_rank": r["threads"], "scaling": scaling,
                "name": r["name"], "kernel": r["kernel"], "pattern_len": r["pattern_len"],
                "count": r["count"], "bytes": r["bytes"], "min_time_s": r["min_time_s"],
                "bandwidth_mbs": r["bandwidth_mbs"],
                "sum_of_rank_bandwidths_mbs": m["sum_of_rank_bandwidths_mbs"],
                "slowest_rank": m["slowest_rank"],
                "rank_time_spread": max(times) / min(times) if times else "",
                "efficiency": eff,
                "stream_copy_mbs": r["stream_copy_mbs"] if r["stream_copy_mbs"] is not None else "",
                "pct_of_stream": r["pct_of_stream"] if r["pct_of_stream"] is not None else "",
                "load_avg_1m": r["host"]["load_avg_1m"], "source": r["source"], "time": r["time"],
            })
            print(f"{n:>4} ranks  {r['name']:<28} {r['bandwidth_mbs']:>12.1f} MB/s "
                  f"(sum of ranks {m['sum_of_rank_bandwidths_mbs']:.1f})  efficiency {eff:.3f}",
                  flush=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
