#!/usr/bin/env python3
"""Live RDX cost (`mgbench reuse -- PROGRAM`) against bare QEMU, measured in one run.

For each workload (scripts/apps, built here, and Debian's gzip compressing 20 MB of seeded
pseudo-text), --reps interleaved runs of

  bare qemu     qemu-x86_64 PROGRAM, no plugin
  counter       qemu-x86_64 with mgbench's plugin counting accesses inline and never
                sampling (`rdx=2^62`): the least the live design pays
  floor         qemu-x86_64 with mgbench's plugin in `floor=1` mode (an empty memory
                callback): what a program pays while it counts in callbacks (short gaps,
                threads where switches flush)
  live auto     mgbench reuse -- PROGRAM: live's default, the adaptive period (from 4096,
                doubled every 128 samples, and, where gaps are counted inline, long enough
                that a sample's two switches and the blocks QEMU then translates again
                take about 5% of the run)
  live P        mgbench reuse --period P -- PROGRAM, for each fixed P of --periods
                (default: auto, 2^20 and 2^22)

medians compared as ratios to bare QEMU (and, since this machine's noise comes in whole
runs, the median of each repetition's ratio and the ratio of the fastest runs), with the
samples and traps of the live runs and what each sample costs over the counter ((live -
counter) / samples, which also carries mgbench's start-up and report, ~30 ms). A sample
switches QEMU's instrumentation to callbacks and back: in place on QEMU 7.2 (about 0.1 ms,
whatever the program's code), and where each switch flushes (another QEMU, or
MGBENCH_QEMU_SWITCH=flush in the environment) the program's hot code is translated again
twice, so it costs more the more code a program runs: a kernel pays well under 1 ms, gzip
several. Each repetition runs with another memory layout (scripts/benchlib.py: the
environment's size alone moved the counter's cost on gather from 1.03x to 1.54x bare QEMU
here).

    python3 scripts/bench-rdx-live.py [--reps 3] [--periods auto,1048576,4194304]
                                      [--scale 1.0] [--skip-build] [--only gather-int]

Target (issue #14): live <= 1.2x bare QEMU (at the default, auto). The exit status is 0
only when every workload meets it. Where a PMU with address sampling exists the target is
<= 1.05x native; that path is not built or measured here (no PMU on this machine).
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import build, build_apps_if_missing, layout_env, select, timed, write_text  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
PLUGIN = os.path.join(ROOT, "target", "release", "libmgbench_qemu_plugin.so")
APPS = os.path.join(ROOT, "scripts", "apps", "build")
DEFAULT_PERIOD = "auto"



def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--periods", default=f"{DEFAULT_PERIOD},{1 << 20},{1 << 22}",
                    help="comma-separated: auto (the adaptive default) or fixed periods")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply workload sizes")
    ap.add_argument("--skip-build", action="store_true")
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
        "gather-int": app("gather", f"--reps={int(10000 * s)}"),
        "spmv-double": app("spmv", "--rows=4096", "--nnz=16", f"--iters={int(2500 * s)}"),
        "triad": app("triad", "--n=4194304", f"--sweeps={int(10 * s)}"),
        "gups": app("gups", "--log2size=24", f"--updates={int(4000000 * s)}"),
        "stencil": app("stencil", f"--iters={int(200 * s)}"),
        # Two threads: each is sampled with its own count and registers, and counts its
        # long gaps inline with a counter of its own (QEMU 7.2, switched in place; elsewhere
        # every access is counted in callbacks); the empty-callback floor is shown as well.
        "spmv-threads": app("spmv", "--rows=4096", "--nnz=16", f"--iters={int(2500 * s)}",
                            "--threads=2"),
        # A program nobody here wrote, with far more hot code than the kernels: where switches
        # flush, each sample translates it again twice (see the docstring).
        "gzip": [shutil.which("gzip") or "/usr/bin/gzip", "-6", "-c", "GZIP_INPUT"],
    }
    workloads = select(workloads, args.only)
    tmp = tempfile.mkdtemp(prefix="mgbench-rdx-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    if "gzip" in workloads:
        data = os.path.join(tmp, "gzip-input.txt")
        write_text(data, int(20_000_000 * s))
        workloads["gzip"] = [data if a == "GZIP_INPUT" else a for a in workloads["gzip"]]
    events = os.path.join(tmp, "events.txt")
    periods = [p if p == "auto" else str(int(p)) for p in args.periods.split(",")]
    report = lambda p: os.path.join(tmp, f"live-{p}.json")

    def counter(prog):
        open(events, "w").close()
        return [qemu, "-plugin", f"{PLUGIN},out={events},rdx={1 << 62}", *prog]

    modes = {"bare qemu": lambda prog: [qemu, *prog], "counter": counter,
             "floor": lambda prog: [qemu, "-plugin", f"{PLUGIN},floor=1", *prog]}
    for p in periods:
        fixed = [] if p == "auto" else ["--period", p]
        modes[f"live {p}"] = (lambda p, fixed: lambda prog: [
            MGBENCH, "reuse", "--quiet", "--backend", "qemu", *fixed, "-o", report(p),
            "--", *prog])(p, fixed)
    with open("/proc/loadavg") as f:
        print(f"# live RDX cost, {args.reps} reps interleaved, medians; "
              f"load {' '.join(f.read().split()[:3])}")
    ok = True
    for name, prog in workloads.items():
        times = {m: [] for m in modes}
        for rep in range(args.reps):
            env = layout_env(rep)
            for m, make in modes.items():
                times[m].append(timed(make(prog), env))
        med = {m: statistics.median(t) for m, t in times.items()}
        bare = med["bare qemu"]
        print(f"{name}: bare qemu {bare:.3f} s; counter {med['counter'] / bare:.2f}x bare; "
              f"empty-callback floor {med['floor'] / bare:.2f}x bare")
        for p in periods:
            m = f"live {p}"
            with open(report(p)) as f:
                r = json.load(f)
            ratio = med[m] / bare
            # The machine's noise comes in whole runs (here the same bare QEMU command ran
            # 0.42 s or 0.70 s, pinned or not, layout or not): the ratio of each repetition's
            # pair (adjacent runs, one layout) and the ratio of the fastest runs, beside the
            # ratio of the medians that the target is judged on.
            paired = statistics.median(a / b for a, b in zip(times[m], times["bare qemu"]))
            best = min(times[m]) / min(times["bare qemu"])
            samples = r['words']['samples']
            per = (f"{1000 * (med[m] - med['counter']) / samples:.1f} ms/sample over the counter"
                   if samples else "no samples")
            a = r.get("adaptive_period")
            how = (f"periods {a['min']}-{a['max']}, {a.get('retranslated_blocks')} blocks "
                   f"translated again, " if a else "")
            eff = r['words'].get('effective_samples')
            line = (f"  {m:16} {med[m]:7.3f} s  {ratio:5.2f}x bare (paired {paired:.2f}, "
                    f"fastest {best:.2f})  "
                    f"({r['accesses']} accesses, {samples} samples"
                    f"{f' ({eff:.0f} effective)' if eff is not None else ''}, "
                    f"{r['words']['traps']} traps, {how}{per}; "
                    f"runs {', '.join(f'{t:.2f}' for t in times[m])})")
            if p == DEFAULT_PERIOD:
                good = ratio <= 1.2
                ok &= good
                line += f"  target <= 1.2: {'ok' if good else 'ABOVE'}"
                if r.get("threads", 1) > 1:
                    line += f"; {med[m] / med['floor']:.2f}x the floor ({r['threads']} threads)"
            print(line, flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
