#!/usr/bin/env python3
"""Capture overhead: mgbench capture time over native time, measured in one run.

Workloads (scripts/apps, built here):
  gather-int   compute-bound integer gather (sum += x[idx[i]], L1-resident table)
  spmv-double  CSR SpMV in double precision (x fits in L1/L2)

Modes: native; `capture --full` (qemu); default `capture` (qemu, sampled 1024/16384); and
`capture --backend ptrace` sampled, when that backend is available. Every configuration runs
--reps times, interleaved, and the median wall time is compared with the native median.

    python3 scripts/bench-capture.py [--reps 3] [--skip-build] [--scale 1.0]

Targets (issue #3): full <= 10x native, default sampled <= 2x native.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
APPS = os.path.join(ROOT, "scripts", "apps", "build")


def timed(cmd):
    t = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    return dt, res.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply workload sizes")
    args = ap.parse_args()
    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "--workspace", "--quiet"], cwd=ROOT,
                       check=True)
        subprocess.run([os.path.join(ROOT, "scripts", "apps", "build.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    s = args.scale
    workloads = {
        "gather-int": [os.path.join(APPS, "gather"), f"--reps={int(40000 * s)}"],
        "spmv-double": [os.path.join(APPS, "spmv"), "--rows=4096", "--nnz=16",
                        f"--iters={int(10000 * s)}"],
    }
    tmp = tempfile.mkdtemp(prefix="mgbench-capture-bench-")
    trace = os.path.join(tmp, "t.mgbt")
    modes = {
        "native": lambda prog: prog,
        "qemu full": lambda prog: [MGBENCH, "capture", "--full", "-o", trace, "--"] + prog,
        "qemu sampled (default)": lambda prog: [MGBENCH, "capture", "-o", trace, "--"] + prog,
    }
    probe = subprocess.run([MGBENCH, "capture", "--backend", "ptrace", "-o", trace, "--",
                            "/bin/true"], capture_output=True, text=True)
    if probe.returncode == 0:
        modes["ptrace sampled"] = lambda prog: [MGBENCH, "capture", "--backend", "ptrace",
                                                "-o", trace, "--"] + prog
    else:
        print(f"# ptrace backend not measured: {probe.stderr.strip()}")
    with open("/proc/loadavg") as f:
        print(f"# capture overhead, {args.reps} reps, medians; load {f.read().split()[0]}")
    ok = True
    for name, prog in workloads.items():
        times = {m: [] for m in modes}
        sizes = {}
        for _ in range(args.reps):
            for m, make in modes.items():
                dt, err = timed(make(prog))
                times[m].append(dt)
                if m != "native" and os.path.exists(trace):
                    info = subprocess.run([MGBENCH, "trace", "info", "-f", "json", trace],
                                          capture_output=True, text=True)
                    if info.returncode == 0:
                        v = json.loads(info.stdout)
                        sizes[m] = (v["accesses"], v["bytes_per_access"], v["sample_ratio"])
        native = statistics.median(times["native"])
        print(f"{name}: native {native:.3f} s")
        for m in modes:
            if m == "native":
                continue
            med = statistics.median(times[m])
            ratio = med / native
            target = 10.0 if "full" in m else 2.0
            verdict = "ok" if ratio <= target else f"ABOVE the {target:g}x target"
            acc, bpa, rho = sizes.get(m, (0, 0.0, 0.0))
            print(f"  {m:24} {med:8.3f} s  {ratio:6.1f}x native  "
                  f"({acc} accesses recorded, {bpa:.2f} B/access, sample ratio {rho:.1f})  "
                  f"{verdict}")
            ok &= ratio <= target
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
