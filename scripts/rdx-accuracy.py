#!/usr/bin/env python3
"""RDX accuracy: trace-driven `mgbench reuse --rdx` against the exact (Olken) histograms.

Captures a full trace of each demo program (scripts/apps, built here; omp4 is the OpenMP
gather on 4 threads whose main thread fills the arrays alone), of Debian's gzip
compressing 1 MB of seeded pseudo-text and of Debian's sqlite3 filling, indexing and querying
a 50,000-row table once, then runs RDX over it with several seeds per
sampling period and prints, per program, period and granularity (words, 64-byte lines), the
medians over seeds of

  time S      RDX's time-distance histogram vs the exact one (RDX Eq. 1, 20 log2 bins)
  stack S     RDX's converted stack-distance histogram vs the exact Olken histogram
  stack S^    the same with RDX's Eq. 2 (bins weighted by their share of reuses)
  model S     the conversion alone: the exact time histogram converted, vs exact stack
  samples, traps, effective samples ((sum w)^2 / sum w^2 of the weights), and how far the
  seeds spread (min..max stack S)
  spread S    the S the samples' own spread suggests (bootstrap replicates, no exact
              histogram needed; only on runs with 25 effective samples or more), and, per
              period, how near it came to the exact stack S over every run

With --live, each program also runs under live RDX (`mgbench reuse -- PROGRAM`: QEMU,
inline access counter, hardware watchpoints) at the same period and seeds, and the words rows
get its time S and stack S against the same exact histograms (live S, and the live samples).
--live-period auto runs live at its own default instead, the adaptive period (from 4096,
doubled every 128 samples, lengthened where samples are costly); the live columns then also
give the live runs' effective samples.

    python3 scripts/rdx-accuracy.py [--periods auto,1024,8192] [--seeds 5] [--live]
                                    [--live-period same|auto]
                                    [--watchpoints 4] [--attribution km] [--skip-build]
                                    [--longer K] [--work DIR] [--json FILE]

--longer K runs every program K times as long on the same data (RDX's sampled histograms
improve with the number of reuse times the run holds; see the README).

Targets (issue #14): stack S >= 0.90 on every program, median >= 0.95.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import write_text  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
APPS = os.path.join(ROOT, "scripts", "apps", "build")

# name: (program, arguments, what it shows, (the argument that sets its length, default)).
# A program not in scripts/apps is looked up on PATH; the length "text" is the size in bytes
# of a seeded pseudo-text file (scripts/benchlib.py) given as the last argument, "rows" the
# rows of sqlite's table (its statements are the last argument).
PROGRAMS = {
    "reuse_loops": ("reuse_loops", [], "RDX Listing 1: two sweeps, two reuse peaks",
                    ("--reps", 20)),
    "attribution": ("attribution", [], "RDX Listing 2: short and long reuse in one loop",
                    ("--reps", 20)),
    "hotcold": ("hotcold", [], "random mix of a hot and a cold set", ("--n", 4000000)),
    "rowcol": ("rowcol", ["--order=col"], "2-D array traversed column-major", ("--reps", 4)),
    "ptrchase": ("ptrchase", ["--shuffle=1"], "linked list in shuffled order", ("--reps", 8)),
    "spmv": ("spmv", ["--rows=4096", "--nnz=16"], "CSR SpMV", ("--iters", 8)),
    "spmv2": ("spmv", ["--rows=4096", "--nnz=16", "--threads=2"],
              "CSR SpMV on 2 threads (each thread's reuses, sampled per thread)",
              ("--iters", 8)),
    "omp4": ("omp_gather", ["--threads=4"],
             "OpenMP gather on 4 threads whose main thread fills the arrays alone",
             ("--passes", 5)),
    "gzip": ("gzip", ["-6", "-c"], "Debian's gzip compressing text (nobody here wrote it)",
             ("text", 1_000_000)),
    "sqlite": ("sqlite3", [":memory:"],
               "Debian's sqlite3 filling, indexing and querying a table (nobody here wrote it)",
               ("rows", 50_000)),
}

# sqlite's statements for a table of `rows` rows (deterministic: no random()).
SQL = """create table t(id integer primary key, k integer, v text);
with recursive c(x) as (select 1 union all select x + 1 from c where x < {rows})
  insert into t select x, (x * 7919) % 100003, printf('%016x', (x * 2654435761) % 4294967291)
  from c;
create index ik on t(k);
select count(*), sum(length(v)) from t where k between 1000 and 60000;
"""


def program(name):
    """The program's path: built in scripts/apps, or found on PATH."""
    exe = PROGRAMS[name][0]
    built = os.path.join(APPS, exe)
    found = built if os.path.exists(built) else shutil.which(exe)
    if not found:
        sys.exit(f"{name}: neither {built} nor {exe} on PATH")
    return found


def arguments(name, longer, work):
    """The program's arguments for a run `longer` times its default length (the same data;
    for a text input, `longer` times the text)."""
    _, args, _, (flag, default) = PROGRAMS[name]
    if flag == "rows":
        return args + [SQL.format(rows=default * longer)]
    if flag == "text":
        path = os.path.join(work, f"text-{default * longer}.txt")
        if not os.path.exists(path):
            write_text(path, default * longer)
        return args + [path]
    return args + [f"{flag}={default * longer}"]


def run(cmd, quiet_stdout=False, **kw):
    """Runs `cmd`; its stdout (None when `quiet_stdout`: the traced program's own output,
    gzip's compressed bytes, goes there too)."""
    out = subprocess.DEVNULL if quiet_stdout else subprocess.PIPE
    res = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, **kw)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    return res.stdout


def capture(work, name, longer):
    trace = os.path.join(work, f"{name}.mgbt" if longer == 1 else f"{name}-x{longer}.mgbt")
    if not os.path.exists(trace):
        run([MGBENCH, "capture", "--quiet", "--full", "-o", trace, "--", program(name)]
            + arguments(name, longer, work), quiet_stdout=True)
    return trace


def measure(trace, period, seed, args):
    cmd = [MGBENCH, "reuse", "--quiet", "--rdx", trace, "-f", "json", "--seed", str(seed),
           "--watchpoints", str(args.watchpoints), "--attribution", args.attribution]
    if period != "auto":
        cmd += ["--period", str(period)]
    return json.loads(run(cmd))


def spread_check(g, exact_stack, s):
    """One run's samples' own spread (see README, RDX: "The samples' own spread") against its
    exact S `s`: (spread S, S, exact bins inside their 80% ranges, bins holding 1% or more),
    None where the run has no spread (under 25 effective samples)."""
    sp = g.get("spread")
    if not sp:
        return None
    inside = held = 0
    for b, e in zip(g["rdx_bins"], exact_stack):
        if max(e, b["stack"]) > 0.01 and b.get("stack_range"):
            held += 1
            inside += b["stack_range"][0] - 1e-9 <= e <= b["stack_range"][1] + 1e-9
    return sp["stack_s"], s, inside, held


def spread_summary(label, checks):
    """A line on how near the spread's S came to the exact S over `checks`."""
    runs = [c for c in checks if c]
    if not runs:
        return
    off = sorted(abs(a - b) for a, b, _, _ in runs)
    print(f"  {label}: {len(runs)} of {len(checks)} runs with a spread (25 effective samples or "
          f"more); |spread S - stack S| median {statistics.median(off):.3f}, 90th percentile "
          f"{off[round(0.9 * (len(off) - 1))]:.3f}; too high by > 0.05 in "
          f"{sum(a - b > 0.05 for a, b, _, _ in runs)}, too low in "
          f"{sum(b - a > 0.05 for a, b, _, _ in runs)}; exact inside the 80% range in "
          f"{sum(c[2] for c in runs)} of {sum(c[3] for c in runs)} bins holding 1% or more")


def accuracy(exact, est):
    """RDX's S (Eq. 1) of `est` against `exact`, both fractions over the same bins."""
    return 1.0 - sum(abs(a - b) for a, b in zip(exact, est)) / 2.0


def live(work, name, period, seed, args):
    """A live RDX run of the program; its report."""
    out = os.path.join(work, f"{name}-live.json")
    fixed = [] if args.live_period == "auto" else ["--period", str(period)]
    run([MGBENCH, "reuse", "--quiet", *fixed, "--seed", str(seed),
         "--watchpoints", str(args.watchpoints), "--attribution", args.attribution,
         "-o", out, "--", program(name)]
        + arguments(name, args.longer, work), quiet_stdout=True)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--periods", default="auto,1024,8192")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--watchpoints", type=int, default=4)
    ap.add_argument("--attribution", default="km")
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--work", default="/tmp/mgbench-rdx-accuracy",
                    help="traces are kept here between runs")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--longer", type=int, default=1, metavar="K",
                    help="run each program K times its default length on the same data "
                         "(more repetitions or iterations; hotcold: K times the accesses; "
                         "gzip: K times the text)")
    ap.add_argument("--live", action="store_true",
                    help="also run live RDX on each program and compare it")
    ap.add_argument("--live-period", choices=["same", "auto"], default="same",
                    help="live runs at the trace-driven period (same) or at live's own "
                         "default, the adaptive period (auto)")
    args = ap.parse_args()
    if not args.skip_build:
        run(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
        run([os.path.join(ROOT, "scripts", "apps", "build.sh")])
    os.makedirs(args.work, exist_ok=True)
    rows = []
    # Per period: every run's spread check (trace-driven, live).
    checks = {}
    print(f"RDX over full traces: {args.watchpoints} watchpoints, attribution "
          f"{args.attribution}, medians over {args.seeds} seeds (RDX's 20 log2 bins)"
          + (f", programs run {args.longer}x their default length" if args.longer > 1 else ""))
    head = (f"{'program':<12} {'accesses':>10} {'period':>7} {'unit':<5} {'samples':>7} "
            f"{'traps':>6} {'eff':>5} {'time S':>7} {'stack S':>7} {'S^':>6} {'model S':>7} "
            f"{'S min..max':>12} {'spread S':>8}"
            + (f" {'live time S':>11} {'live stack S':>12} {'live smp':>8}" if args.live else ""))
    print(head)
    print("-" * len(head))
    for name in args.programs.split(","):
        trace = capture(args.work, name, args.longer)
        for period in args.periods.split(","):
            reports = [measure(trace, period, s + 1, args) for s in range(args.seeds)]
            lives = ([live(args.work, name, reports[0]["config"]["period"], s + 1, args)
                      for s in range(args.seeds)] if args.live else [])
            for unit in ("words", "lines"):
                g = [r[unit] for r in reports]
                acc = [x["accuracy_rdx_bins"] for x in g]
                stack = [a["stack"]["s"] for a in acc]
                ex_stack = [b["exact_stack"] for b in g[0]["rdx_bins"]]
                mine = [spread_check(x, ex_stack, a["stack"]["s"]) for x, a in zip(g, acc)]
                checks.setdefault(period, ([], []))[0].extend(mine)
                spreads = [c[0] for c in mine if c]
                row = {
                    "program": name,
                    "accesses": reports[0]["accesses"],
                    "period": reports[0]["config"]["period"],
                    "unit": unit,
                    "period_arg": period,
                    "samples": statistics.median(x["samples"] for x in g),
                    "traps": statistics.median(x["traps"] for x in g),
                    "effective": statistics.median(x.get("effective_samples") or 0 for x in g),
                    "time_s": statistics.median(a["time"]["s"] for a in acc),
                    "stack_s": statistics.median(stack),
                    "stack_s_hat": statistics.median(a["stack"]["s_hat"] for a in acc),
                    "model_s": acc[0]["conversion"]["s"],
                    "stack_s_min": min(stack),
                    "stack_s_max": max(stack),
                    "spread_s": statistics.median(spreads) if spreads else None,
                    "spread_runs": len(spreads),
                }
                extra = ""
                if lives and unit == "words":
                    bins = reports[0]["words"]["rdx_bins"]
                    ex_t = [b["exact_time"] for b in bins]
                    ex_s = [b["exact_stack"] for b in bins]
                    lt = [accuracy(ex_t, [b["time"] for b in v["words"]["rdx_bins"]])
                          for v in lives]
                    ls = [accuracy(ex_s, [b["stack"] for b in v["words"]["rdx_bins"]])
                          for v in lives]
                    row["live_time_s"] = statistics.median(lt)
                    row["live_stack_s"] = statistics.median(ls)
                    row["live_stack_s_min"] = min(ls)
                    checks[period][1].extend(spread_check(v["words"], ex_s, x)
                                             for v, x in zip(lives, ls))
                    row["live_samples"] = statistics.median(v["words"]["samples"] for v in lives)
                    row["live_effective"] = statistics.median(
                        v["words"].get("effective_samples") or 0 for v in lives)
                    extra = (f" {row['live_time_s']:>11.3f} {row['live_stack_s']:>12.3f}"
                             f" {row['live_samples']:>8.0f}"
                             + (f" ({row['live_effective']:.0f} eff.)"
                                if args.live_period == "auto" else ""))
                rows.append(row)
                print(f"{name:<12} {row['accesses']:>10} {row['period']:>7} {unit:<5} "
                      f"{row['samples']:>7.0f} {row['traps']:>6.0f} {row['effective']:>5.0f} "
                      f"{row['time_s']:>7.3f} "
                      f"{row['stack_s']:>7.3f} {row['stack_s_hat']:>6.3f} "
                      f"{row['model_s']:>7.3f} {row['stack_s_min']:>5.3f}..{row['stack_s_max']:.3f}"
                      + (f" {row['spread_s']:>8.3f}" if spreads else f" {'-':>8}")
                      + extra)
    print()
    for period in args.periods.split(","):
        for unit in ("words", "lines"):
            sel = [r for r in rows if r["unit"] == unit and r["period_arg"] == period]
            if not sel:
                continue
            s = [r["stack_s"] for r in sel]
            worst = min(sel, key=lambda r: r["stack_s"])
            print(f"period {period:>5} {unit:<5}: median stack S {statistics.median(s):.3f}, "
                  f"worst {worst['stack_s']:.3f} ({worst['program']}), "
                  f"{sum(x >= 0.90 for x in s)}/{len(s)} programs >= 0.90; "
                  f"model alone median {statistics.median(r['model_s'] for r in sel):.3f}")
            lv = [r["live_stack_s"] for r in sel if "live_stack_s" in r]
            if lv:
                worst = min((r for r in sel if "live_stack_s" in r),
                            key=lambda r: r["live_stack_s"])
                print(f"  live: median stack S {statistics.median(lv):.3f}, worst "
                      f"{worst['live_stack_s']:.3f} ({worst['program']}), "
                      f"{sum(x >= 0.90 for x in lv)}/{len(lv)} programs >= 0.90")
        trace_checks, live_checks = checks.get(period, ([], []))
        spread_summary(f"period {period}, the samples' own spread", trace_checks)
        spread_summary(f"period {period}, live, the samples' own spread", live_checks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
