#!/usr/bin/env python3
"""Footprint over the execution: what `mgbench analyze` estimates from a sampled trace against
the exact count of a full trace of the same run.

For each program, two captures with the same arguments and input (`capture --full` and the
default sampled capture), each analysed with `mgbench analyze -f json`. The full trace's
`memory.distinct_lines` is the exact number of 64-byte blocks the run touched; the sampled
trace's `footprint.estimated_blocks` is the estimate (Chao2 over the sample windows, or the
span of the seen blocks' address ranges where Chao2 cannot be used: README, "Footprint over
the execution"), printed as a ratio to exact, with the blocks the windows saw, the method, the
span (`estimate.span_blocks`) and the upper estimate (the old estimate: seen x the sample
ratio, capped by growth x executed accesses).

    python3 scripts/footprint-accuracy.py [--only gzip,spmv] [--skip-build] [--seed N]
                                          [--markdown]

Programs: Debian's gzip, bzip2, xz, sqlite3 and sort on seeded inputs (written here), and the
demo programs in scripts/apps. A Debian program that is not installed is skipped with the
package that provides it. Full traces take up to ~2.5 GB on disk (one at a time) and the whole
table about ten minutes on a 2-core machine.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import build, select, write_text  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
APPS = os.path.join(ROOT, "scripts", "apps", "build")

SQL = """create table t(a integer primary key, b text, c real);
with recursive r(i) as (select 1 union all select i+1 from r where i<40000)
  insert into t select i, hex(randomblob(8)), random()%1000 from r;
create index tb on t(b);
select count(*), sum(c) from t where b like 'A%';
select b from t order by c limit 3;
"""

# name: (argv, stdin file or None, Debian package when not a demo program). "{text}", "{nums}"
# and "{sql}" are inputs written in the work directory.
PROGRAMS = {
    "gzip": (["gzip", "-6", "-c", "{text}"], None, "gzip"),
    "bzip2": (["bzip2", "-9", "-c", "{nums}"], None, "bzip2"),
    "xz": (["xz", "-6", "-c", "{nums}"], None, "xz-utils"),
    "sqlite": (["sqlite3", ":memory:"], "{sql}", "sqlite3"),
    "sort": (["sort", "-n", "{nums}"], None, "coreutils"),
    "spmv": (["@spmv", "--rows=16384", "--nnz=16", "--iters=100"], None, None),
    "stencil": (["@stencil", "--iters=200"], None, None),
    "triad": (["@triad", "--n=1048576", "--sweeps=20"], None, None),
    "gups": (["@gups", "--log2size=20", "--updates=20000000"], None, None),
    "ptrchase": (["@ptrchase", "--shuffle=1", "--reps=8"], None, None),
    "hotcold": (["@hotcold", "--n=20000000"], None, None),
    "histogram": (["@histogram", "--iters=300"], None, None),
}


def inputs(work):
    """Writes the seeded inputs; returns the substitutions."""
    paths = {k: os.path.join(work, f) for k, f in
             (("text", "text.txt"), ("nums", "nums.txt"), ("sql", "q.sql"))}
    write_text(paths["text"], 3_000_000)
    rng = random.Random(2)
    with open(paths["nums"], "w") as f:
        f.write("\n".join(str(rng.randint(0, 10**9)) for _ in range(300_000)))
    with open(paths["sql"], "w") as f:
        f.write(SQL)
    return paths


def command(name, paths):
    """The program's argv with inputs filled in, or None (and why) when it is missing."""
    argv, stdin, package = PROGRAMS[name]
    argv = [a.format(**paths) for a in argv]
    if argv[0].startswith("@"):
        argv[0] = os.path.join(APPS, argv[0][1:])
        if not os.path.exists(argv[0]):
            return None, None, f"{argv[0]} not built (run without --skip-build)"
    elif not shutil.which(argv[0]):
        return None, None, f"{argv[0]} not installed (apt-get install {package})"
    return argv, stdin.format(**paths) if stdin else None, None


def capture(argv, stdin, trace, full, seed):
    cmd = [MGBENCH, "-q", "capture", "-o", trace]
    cmd += ["--full"] if full else ["--sample-seed", str(seed)]
    with open(stdin or os.devnull) as inp:
        res = subprocess.run(cmd + ["--"] + argv, stdin=inp, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        sys.exit(f"capture failed ({res.returncode}): {' '.join(cmd + argv)}\n{res.stderr}")


def analyze(trace):
    res = subprocess.run([MGBENCH, "-q", "analyze", "--no-apex", "-f", "json", trace],
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"analyze failed: {trace}\n{res.stderr}")
    return json.loads(res.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated program names")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="the sampled capture's --sample-seed")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    names = list(select(PROGRAMS, args.only))
    if not args.skip_build:
        build()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mgbench-footprint-") as work:
        paths = inputs(work)
        if args.markdown:
            print("| program | accesses | exact blocks | seen in windows | estimate / exact "
                  "| span / exact | before |")
            print("|---|---|---|---|---|---|---|")
        else:
            print(f"{'program':<10} {'accesses':>11} {'exact':>9} {'seen':>9} {'windows':>7} "
                  f"{'estimate':>10} {'/exact':>7} {'span':>7} {'before':>8}  method")
        for name in names:
            argv, stdin, missing = command(name, paths)
            if missing:
                print(f"{name:<10} skipped: {missing}")
                continue
            full, samp = os.path.join(work, "full.mgbt"), os.path.join(work, "samp.mgbt")
            capture(argv, stdin, full, True, args.seed)
            f = analyze(full)
            os.remove(full)
            capture(argv, stdin, samp, False, args.seed)
            s = analyze(samp)
            os.remove(samp)
            exact = f["memory"]["distinct_lines"]
            fp = s["footprint"]
            est = fp["estimate"]
            ratio = fp["estimated_blocks"] / exact
            before = (est["upper_blocks"] or 0) / exact
            span = est["span_blocks"] / exact
            rows.append((name, ratio, est["method"], span))
            seen = est["seen_blocks"]
            if args.markdown:
                print(f"| {name} | {f['accesses'] / 1e6:.1f} M | {exact} | {seen} "
                      f"({seen / exact:.2f}) | {ratio:.2f} ({est['method']}) "
                      f"| {span:.2f} | {before:.1f}x |")
            else:
                print(f"{name:<10} {f['accesses']:>11} {exact:>9} {seen:>9} "
                      f"{est['windows']:>7} {fp['estimated_blocks']:>10.0f} {ratio:>7.2f} "
                      f"{span:>7.2f} {before:>7.1f}x  {est['method']}", flush=True)
    if rows:
        est = [r for _, r, _, _ in rows]
        print(f"\nestimate/exact over {len(rows)} programs: {min(est):.2f}-{max(est):.2f}, "
              f"median {statistics.median(est):.2f}")
        span = [sp for _, _, _, sp in rows]
        print(f"span/exact: {min(span):.2f}-{max(span):.2f}, median {statistics.median(span):.2f}")
    other = [f"{n} ({m})" for n, _, m, _ in rows if m != "chao2"]
    if other:
        print("estimated by the span (Chao2 not usable): " + ", ".join(other))


if __name__ == "__main__":
    main()
