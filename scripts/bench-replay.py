#!/usr/bin/env python3
"""Replay and STREAM speed against plain C OpenMP loops doing the same work, in one run.

Builds mgbench (release) and two C references with gcc -O3 -march=native -fopenmp:
scripts/bench/gather_omp.c (Spatter's loop shape; once with its `omp simd` pragma, once
without, since on some CPUs the pragma turns the loop into slow vector gathers) and
scripts/bench/stream_omp.c. Then, for each case and thread count, runs C and mgbench
alternately --reps times (1 warm-up + 10 timed runs each, minimum time, as Spatter and STREAM
do) and prints medians and the median of the per-repetition ratios mgbench / best C.

    python3 scripts/bench-replay.py [--reps 5] [--threads 1,2] [--skip-build]

Target (issue #2): every ratio >= 0.95. A CSV of every measurement goes to results/.
"""
import argparse
import atexit
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, "scripts", "bench", "build")
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
TARGET = 0.95


def run(cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    return res.stdout


def build(skip):
    os.makedirs(BUILD, exist_ok=True)
    if not skip:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    src = os.path.join(ROOT, "scripts", "bench")
    flags = ["gcc", "-O3", "-march=native", "-fopenmp"]
    run(flags + [os.path.join(src, "gather_omp.c"), "-o", os.path.join(BUILD, "gather_simd")])
    run(flags + ["-Wno-unknown-pragmas", "-DNO_SIMD", os.path.join(src, "gather_omp.c"),
                 "-o", os.path.join(BUILD, "gather_scalar")])
    run(flags + [os.path.join(src, "stream_omp.c"), "-o", os.path.join(BUILD, "stream_omp")])


def kv(text):
    return {k: v for k, v in (tok.split("=", 1) for tok in text.split() if "=" in tok)}


def omp_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="true", OMP_PLACES="cores")
    return env


def c_gather(binary, pattern_file, delta, count, threads):
    out = run([os.path.join(BUILD, binary), pattern_file, str(delta), str(count), "10"],
              omp_env(threads))
    return float(kv(out)["bandwidth_mbs"])


def mg_gather(spec, delta, count, threads):
    out = run([MGBENCH, "replay", "--no-save", "--no-stream", "--format", "json",
               "--threads", str(threads), "--runs", "10", "--warmup", "1",
               "--kernel", "gather", "--pattern", spec, "--delta", str(delta),
               "--count", str(count)])
    return json.loads(out)[0]["bandwidth_mbs"]


def c_triad(elements, threads):
    return float(kv(run([os.path.join(BUILD, "stream_omp"), str(elements)],
                        omp_env(threads)))["triad_mbs"])


def mg_triad(elements, threads):
    out = run([MGBENCH, "stream", "--format", "json", "--threads", str(threads),
               "--size", str(elements)])
    return json.loads(out)["triad_mbs"]


def load_avg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--skip-build", action="store_true")
    args = ap.parse_args()
    build(args.skip_build)

    with open(os.path.join(ROOT, "patterns", "random.json")) as f:
        randoms = {c["name"]: c for c in json.load(f)}
    tmp = tempfile.mkdtemp(prefix="mgbench-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    cases = []

    def gather_case(name, indices, delta, count):
        path = os.path.join(tmp, name + ".txt")
        with open(path, "w") as f:
            f.write(" ".join(map(str, indices)))
        spec = ",".join(map(str, indices))
        cases.append((name, {
            "C simd": lambda t: c_gather("gather_simd", path, delta, count, t),
            "C scalar": lambda t: c_gather("gather_scalar", path, delta, count, t),
            "mgbench": lambda t: mg_gather(spec, delta, count, t),
        }))

    gather_case("UNIFORM:8:1 d8 c2^24", list(range(8)), 8, 1 << 24)
    for name in ["random-gather-1024-l2", "random-gather-1024-dram"]:
        c = randoms[name]
        gather_case(name, c["pattern"], c["delta"], c["count"])
    # STREAM: 4x a 32 MiB LLC per array, as mgbench's default on this machine.
    elements = 1 << 24
    cases.append(("STREAM triad 2^24", {
        "C": lambda t: c_triad(elements, t),
        "mgbench": lambda t: mg_triad(elements, t),
    }))

    threads = [int(t) for t in args.threads.split(",")]
    print(f"# mgbench replay vs C OpenMP, {args.reps} reps, load {load_avg()} at start, "
          f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    rows, csv_rows = [], []
    for name, impls in cases:
        for t in threads:
            samples = {k: [] for k in impls}
            ratios = []
            for rep in range(args.reps):
                # Rotate the order so drift in machine load hits every implementation alike.
                order = list(impls)
                order = order[rep % len(order):] + order[:rep % len(order)]
                got = {k: impls[k](t) for k in order}
                for k, v in got.items():
                    samples[k].append(v)
                    csv_rows.append((name, t, rep, k, v))
                best_c = max(v for k, v in got.items() if k != "mgbench")
                ratios.append(got["mgbench"] / best_c)
            med = {k: statistics.median(v) for k, v in samples.items()}
            ratio = statistics.median(ratios)
            # A kernel the compiler optimised away shows up as an impossible speed-up.
            plausible = ratio <= 3.0
            rows.append((name, t, med, ratio, plausible))
            c_cols = "  ".join(f"{k} {v:9.0f}" for k, v in med.items() if k != "mgbench")
            print(f"{name:26} t={t}  {c_cols}  mgbench {med['mgbench']:9.0f} MB/s  "
                  f"ratio {ratio:5.3f} [{min(ratios):.3f}-{max(ratios):.3f}]  "
                  f"{'IMPLAUSIBLE (work optimised away?)' if not plausible else 'ok' if ratio >= TARGET else 'BELOW TARGET'}",
                  flush=True)
    print(f"# load {load_avg()} at end; ratio = median over reps of mgbench / best C "
          f"in the same rep; target >= {TARGET}")
    os.makedirs(os.path.join(ROOT, "results"), exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = os.path.join(ROOT, "results", f"bench-replay-{stamp}.csv")
    with open(out, "w") as f:
        f.write("case,threads,rep,impl,bandwidth_mbs\n")
        for r in csv_rows:
            f.write(f"\"{r[0]}\",{r[1]},{r[2]},{r[3]},{r[4]}\n")
    print(f"# every measurement: {out}")
    return 0 if all(r[3] >= TARGET and r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
