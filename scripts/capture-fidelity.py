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
                     trace's fraction is at least 1% (a sample cannot see longer reuses); the
                     largest absolute difference of those fractions is printed beside it
  function shares    references of each function / all references, over the functions that
                     hold at least 1% of the full trace's references

    python3 scripts/capture-fidelity.py [--window W --period P | --configs W/P,W/P...]
                                        [--scale 1.0] [--only spmv,gups] [--skip-build]
                                        [--seed N]

--seed is the capture's --sample-seed (where each thread's first window starts).

Defaults: the capture defaults. Full traces of ~300 million accesses take a few hundred MB
each on disk (removed after each program) and the whole table some minutes.

Target (issue #16, MemGaze's band): every MAPE within 25%. The exit status is 0 only then.
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
APPS = os.path.join(ROOT, "scripts", "apps", "build")
# The capture defaults (capture/src/backend/mod.rs).
DEFAULT_WINDOW, DEFAULT_PERIOD = 4096, 1 << 20

# Each program runs about 300 million accesses at --scale 1 (a few seconds natively, the
# length where sampling pays); the last item is the repetition flag that --scale multiplies.
PROGRAMS = {
    "spmv": ["spmv", "--rows=16384", "--nnz=16", ("--iters", 400)],
    "stencil": ["stencil", ("--iters", 800)],
    "histogram": ["histogram", ("--iters", 1400)],
    "gups": ["gups", "--log2size=20", ("--updates", 100000000)],
    "rowcol-col": ["rowcol", "--order=col", ("--reps", 800)],
    "triad": ["triad", "--n=1048576", ("--sweeps", 50)],
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
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    ap.add_argument("--period", type=int, default=DEFAULT_PERIOD)
    ap.add_argument("--configs", help="several samplings against one full trace each: "
                    "WINDOW/PERIOD,... (instead of --window and --period)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply each program's repetitions (its length)")
    ap.add_argument("--only", help="comma-separated program names (default: all)")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="capture --sample-seed")
    args = ap.parse_args()
    try:
        configs = ([tuple(int(x) for x in c.split("/")) for c in args.configs.split(",")]
                   if args.configs else [(args.window, args.period)])
    except ValueError:
        sys.exit(f"--configs {args.configs!r}: expected WINDOW/PERIOD[,WINDOW/PERIOD...]")
    if any(len(c) != 2 for c in configs):
        sys.exit(f"--configs {args.configs!r}: expected WINDOW/PERIOD[,WINDOW/PERIOD...]")
    only = set(args.only.split(",")) if args.only else set(PROGRAMS)
    if only - set(PROGRAMS):
        sys.exit(f"--only: unknown program(s) {', '.join(sorted(only - set(PROGRAMS)))}; "
                 f"known: {', '.join(PROGRAMS)}")
    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        subprocess.run([os.path.join(ROOT, "scripts", "apps", "build.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="mgbench-fidelity-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    print("# sampled against full; MAPE in %")
    print(f"{'program':12} {'accesses':>11} {'window':>7} {'period':>8} {'samples':>8} "
          f"{'footprint growth':>17} {'RD CDF':>8} {'(max |d|)':>9} {'function shares':>16}  "
          f"verdict")
    ok = True
    for name, argv in PROGRAMS.items():
        if name not in only:
            continue
        flag, reps = argv[-1]
        prog = [os.path.join(APPS, argv[0]), *argv[1:-1],
                f"{flag}={max(1, int(reps * args.scale))}"]
        full_t, samp_t = os.path.join(tmp, f"{name}-full.mgbt"), os.path.join(tmp, f"{name}.mgbt")
        run([MGBENCH, "capture", "--quiet", "--backend", "qemu", "--full", "-o", full_t, "--",
             *prog])
        full = analyze(full_t)
        os.remove(full_t)
        fb = {b["distance"]: b["fraction"] for b in full["reuse_histogram_lines"]["below"]}
        fs = shares(full)
        for window, period in configs:
            run([MGBENCH, "capture", "--quiet", "--backend", "qemu",
                 f"--sample-window={window}", f"--sample-period={period}",
                 f"--sample-seed={args.seed}", "-o", samp_t,
                 "--", *prog])
            samp = analyze(samp_t)
            info = json.loads(run([MGBENCH, "trace", "info", "-f", "json", samp_t]))
            os.remove(samp_t)
            growth = mape([(full["footprint"]["growth"], samp["footprint"]["growth"])])
            sb = {b["distance"]: b["fraction"] for b in samp["reuse_histogram_lines"]["below"]}
            bins = [d for d in fb if d <= window and fb[d] >= 0.01]
            rd = mape([(fb[d], sb.get(d, 0.0)) for d in bins])
            rd_abs = max((abs(fb[d] - sb.get(d, 0.0)) for d in bins), default=None)
            ss = shares(samp)
            fn = mape([(fs[f], ss.get(f, 0.0)) for f in fs
                       if fs[f] >= 0.01 and f != "(other)"])
            vals = [growth, rd, fn]
            good = all(v is None or v <= 25.0 for v in vals)
            ok &= good
            cell = lambda v: "-" if v is None else f"{v:.1f}"
            print(f"{name:12} {full['accesses']:>11} {window:>7} {period:>8} "
                  f"{info['samples']:>8} {cell(growth):>17} {cell(rd):>8} "
                  f"{'-' if rd_abs is None else f'{rd_abs:.3f}':>9} {cell(fn):>16}  "
                  f"{'ok' if good else 'ABOVE 25%'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
