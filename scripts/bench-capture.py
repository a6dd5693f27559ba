#!/usr/bin/env python3
"""Capture cost: every capture mode next to its references, measured in one run.

For each workload (scripts/apps, built here) and each configuration, --reps interleaved runs,
each repetition with another memory layout (scripts/benchlib.py: the environment's size
alone moved bare QEMU by 30% here); medians are compared as ratios:

  native            the program alone
  bare qemu         qemu-x86_64 PROGRAM, no plugin (TCG's own cost)
  floor             qemu-x86_64 with mgbench's plugin in `floor=1` mode: an empty memory
                    callback on every instruction, nothing recorded (the least a
                    callback-based recorder pays)
  qemu full         mgbench capture --backend qemu --full
  qemu sampled      mgbench capture --backend qemu (default sampling: 4096 accesses about
                    every 2^20, skips counted inline, windows switched in: in place on QEMU 7.2,
                    by a flush of every translation elsewhere or with MGBENCH_QEMU_SWITCH=flush)
  qemu sampled/16   --sample-window 1024 --sample-period 16384: 1 in 16, skips counted by
                    callbacks (the default before switched sampling)
  ptrace sampled    mgbench capture --backend ptrace (timed windows), where ptrace works

Workloads: gather-int (integer gather, compute-bound), spmv-double (CSR SpMV, floating
point), triad (streaming, memory-bound), spmv-threads (2 threads), gups (random updates over
a 2^24-element table: the trace-size case).

    python3 scripts/bench-capture.py [--reps 3] [--skip-build] [--scale 1.0]
                                     [--modes ptrace] [--only gups,triad]

--modes keeps native, bare qemu and the floor (the references) and only the capture modes
whose names contain one of its words (e.g. `--modes ptrace` for a quick ptrace-only run at
full scale); --only keeps the named workloads.

Targets (issue #16): qemu sampled <= 1.5x bare qemu; qemu full <= 1.3x the floor and <= 10x
native on memory-bound code (triad); full trace <= 4 bytes/access on gups. Each line says
whether its target is met; the exit status is 0 only when all are.
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import build, build_apps_if_missing, layout_env, select, timed  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
PLUGIN = os.path.join(ROOT, "target", "release", "libmgbench_qemu_plugin.so")
APPS = os.path.join(ROOT, "scripts", "apps", "build")



def trace_info(trace):
    res = subprocess.run([MGBENCH, "trace", "info", "-f", "json", trace],
                         capture_output=True, text=True)
    if res.returncode != 0:
        return None
    v = json.loads(res.stdout)
    # A time-sampled (ptrace) trace has no sample ratio: nobody counted between windows.
    rho = v["sample_ratio"] if v.get("sample_ratio_known", True) else None
    return v["accesses"], v["bytes_per_access"], rho


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply workload sizes")
    ap.add_argument("--modes", help="comma-separated words: capture modes to keep")
    ap.add_argument("--only", help="comma-separated workload names (default: all)")
    args = ap.parse_args()
    if not args.skip_build:
        build()
    else:
        build_apps_if_missing()
    qemu = os.environ.get("MGBENCH_QEMU", "qemu-x86_64")
    s = args.scale
    app = lambda name, *a: [os.path.join(APPS, name), *a]
    workloads = {
        "gather-int": app("gather", f"--reps={int(40000 * s)}"),
        "spmv-double": app("spmv", "--rows=4096", "--nnz=16", f"--iters={int(10000 * s)}"),
        "triad": app("triad", "--n=4194304", f"--sweeps={int(40 * s)}"),
        "spmv-threads": app("spmv", "--rows=65536", "--nnz=16", f"--iters={int(1000 * s)}",
                            "--threads=2"),
        "gups": app("gups", "--log2size=24", f"--updates={int(16000000 * s)}"),
    }
    workloads = select(workloads, args.only)
    tmp = tempfile.mkdtemp(prefix="mgbench-capture-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    trace = os.path.join(tmp, "t.mgbt")
    cap = lambda *opts: (lambda prog: [MGBENCH, "capture", "--quiet", *opts, "-o", trace,
                                       "--", *prog])
    modes = {
        "native": lambda prog: prog,
        "bare qemu": lambda prog: [qemu, *prog],
        "floor": lambda prog: [qemu, "-plugin", f"{PLUGIN},floor=1", *prog],
        "qemu full": cap("--backend", "qemu", "--full"),
        "qemu sampled": cap("--backend", "qemu"),
        "qemu sampled/16": cap("--backend", "qemu", "--sample-window", "1024",
                               "--sample-period", "16384"),
    }
    probe = subprocess.run([MGBENCH, "capture", "--backend", "ptrace", "-o", trace, "--",
                            "/bin/true"], capture_output=True, text=True)
    if probe.returncode == 0:
        modes["ptrace sampled"] = cap("--backend", "ptrace")
    else:
        print(f"# ptrace backend not measured: {probe.stderr.strip()}")
    if args.modes:
        words = args.modes.split(",")
        refs = ("native", "bare qemu", "floor")
        modes = {m: f for m, f in modes.items() if m in refs or any(w in m for w in words)}
    with open("/proc/loadavg") as f:
        print(f"# capture cost, {args.reps} reps interleaved, medians; "
              f"load {' '.join(f.read().split()[:3])}")
    ok = True

    def verdict(value, target, what):
        nonlocal ok
        good = value <= target
        ok &= good
        return f"{what} {value:.2f} (target <= {target:g}: {'ok' if good else 'ABOVE'})"

    for name, prog in workloads.items():
        times = {m: [] for m in modes}
        sizes = {}
        for rep in range(args.reps):
            env = layout_env(rep)
            for m, make in modes.items():
                times[m].append(timed(make(prog), env))
                if m.startswith(("qemu", "ptrace")):
                    sizes[m] = trace_info(trace)
                    # A full trace is gigabytes of dirty page cache: drop it and let the
                    # kernel settle, or its writeback slows the runs that follow.
                    os.remove(trace)
                    os.sync()
        med = {m: statistics.median(t) for m, t in times.items()}
        native, bare, floor = med["native"], med["bare qemu"], med["floor"]
        print(f"{name}: native {native:.3f} s, bare qemu {bare:.3f} s ({bare / native:.1f}x "
              f"native), floor {floor:.3f} s ({floor / bare:.2f}x bare)")
        for m in modes:
            if m in ("native", "bare qemu", "floor"):
                continue
            t = med[m]
            line = (f"  {m:15} {t:8.3f} s  {t / native:6.1f}x native  {t / bare:5.2f}x bare  "
                    f"{t / floor:5.2f}x floor")
            acc, bpa, rho = sizes.get(m) or (0, 0.0, 0.0)
            ratio = f"{rho:.1f}" if rho is not None else "unknown (time-sampled)"
            line += f"  ({acc} accesses, {bpa:.3g} B/access, sample ratio {ratio})"
            checks = []
            if m == "qemu sampled":
                checks.append(verdict(t / bare, 1.5, "vs bare"))
            if m == "qemu full":
                checks.append(verdict(t / floor, 1.3, "vs floor"))
                if name == "triad":
                    checks.append(verdict(t / native, 10.0, "vs native (memory-bound)"))
                if name == "gups":
                    checks.append(verdict(bpa, 4.0, "B/access"))
            if m == "ptrace sampled":
                checks.append(verdict(t / native, 2.0, "vs native"))
            print(line + ("\n    " + "; ".join(checks) if checks else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
