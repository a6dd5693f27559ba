#!/usr/bin/env python3
"""Fidelity of sampled capture: what `mgbench analyze` says of a sampled trace against what it
says of a full trace of the same program, on several demo programs (scripts/apps).

For each program, two captures with the same arguments (`capture --backend qemu --full` and
`capture --backend qemu` with the sampling under test), each analysed with
`mgbench analyze --by function -f json`. Three metrics, each as a mean absolute percentage
error (MAPE) of sampled against full:

  footprint growth   footprint.growth (new lines per window access), one value
  RD CDF             reuse_histogram_lines.below: the cumulative fraction of references
                     reused within d lines, over the bins d <= the sample window where the full
                     trace's fraction is at least 1% (a sample cannot see longer reuses)
  function shares    references of each function / all references, over the functions that
                     hold at least 1% of the full trace's references

    python3 scripts/capture-fidelity.py [--window 1024 --period 16384] [--skip-build]

Target (issue #16, MemGaze's band): every MAPE within 25%. The exit status is 0 only then.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
APPS = os.path.join(ROOT, "scripts", "apps", "build")

PROGRAMS = {
    "spmv": ["spmv", "--rows=16384", "--nnz=16", "--iters=20"],
    "stencil": ["stencil"],
    "histogram": ["histogram"],
    "gups": ["gups", "--log2size=20", "--updates=2000000"],
    "rowcol-col": ["rowcol", "--order=col", "--reps=2"],
    "triad": ["triad", "--n=1048576", "--sweeps=4"],
}


def run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    return res.stdout


def analyze(trace):
    return json.loads(run([MGBENCH, "analyze", "--by", "function", "-f", "json", trace]))


def mape(pairs):
    """Mean |sampled - full| / |full| over (full, sampled) pairs, in percent."""
    pairs = [(f, s) for f, s in pairs if f != 0]
    if not pairs:
        return None
    return 100.0 * sum(abs(s - f) / abs(f) for f, s in pairs) / len(pairs)


def shares(v):
    total = sum(f["references"] for f in v["functions"]) or 1
    return {f["function"]: f["references"] / total for f in v["functions"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--period", type=int, default=16384)
    ap.add_argument("--skip-build", action="store_true")
    args = ap.parse_args()
    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        subprocess.run([os.path.join(ROOT, "scripts", "apps", "build.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="mgbench-fidelity-")
    print(f"# sampled (window {args.window}, period {args.period}) against full; MAPE in %")
    print(f"{'program':12} {'accesses':>11} {'footprint growth':>17} {'RD CDF':>8} "
          f"{'function shares':>16}  verdict")
    ok = True
    for name, argv in PROGRAMS.items():
        prog = [os.path.join(APPS, argv[0]), *argv[1:]]
        full_t, samp_t = os.path.join(tmp, f"{name}-full.mgbt"), os.path.join(tmp, f"{name}.mgbt")
        run([MGBENCH, "capture", "--quiet", "--backend", "qemu", "--full", "-o", full_t, "--",
             *prog])
        run([MGBENCH, "capture", "--quiet", "--backend", "qemu",
             f"--sample-window={args.window}", f"--sample-period={args.period}", "-o", samp_t,
             "--", *prog])
        full, samp = analyze(full_t), analyze(samp_t)
        growth = mape([(full["footprint"]["growth"], samp["footprint"]["growth"])])
        fb = {b["distance"]: b["fraction"] for b in full["reuse_histogram_lines"]["below"]}
        sb = {b["distance"]: b["fraction"] for b in samp["reuse_histogram_lines"]["below"]}
        rd = mape([(fb[d], sb.get(d, 0.0)) for d in fb
                   if d <= args.window and fb[d] >= 0.01])
        fs, ss = shares(full), shares(samp)
        fn = mape([(fs[f], ss.get(f, 0.0)) for f in fs if fs[f] >= 0.01 and f != "(other)"])
        vals = [growth, rd, fn]
        good = all(v is None or v <= 25.0 for v in vals)
        ok &= good
        cell = lambda v: "-" if v is None else f"{v:.1f}"
        print(f"{name:12} {full['accesses']:>11} {cell(growth):>17} {cell(rd):>8} "
              f"{cell(fn):>16}  {'ok' if good else 'ABOVE 25%'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
