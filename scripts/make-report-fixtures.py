#!/usr/bin/env python3
"""Regenerates the report's test fixtures in report/tests/data/ (see its README).

Measured here, on this machine: replay results of a small suite with its STREAM baseline,
an MPI weak and strong sweep (mpirun), the pattern file synth mines from the SpMV demo and
the analysis of that capture, RDX over a full capture of it. Derived, clearly named as such: two more machines made from
the measured results (other host names, bandwidths scaled per kernel), and a GPU sweep
shaped like `replay --cuda --sweep` output (there is no GPU here).

    python3 scripts/make-report-fixtures.py [--skip-build]
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "report", "tests", "data")
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")

SUITE = [
    {"name": f"uniform-stride-{s}", "kernel": "gather", "pattern": f"UNIFORM:8:{s}:NR",
     "count": max(1 << 20 >> s.bit_length(), 4096)} for s in (1, 2, 4, 8, 16, 32, 64, 128)
] + [
    {"name": "uniform-stride-1-scatter", "kernel": "scatter", "pattern": "UNIFORM:8:1:NR", "count": 1 << 18},
    {"name": "uniform-stride-8-scatter", "kernel": "scatter", "pattern": "UNIFORM:8:8:NR", "count": 1 << 17},
    {"name": "ms1-gather", "kernel": "gather", "pattern": "MS1:8:4:32", "count": 1 << 17},
    {"name": "laplacian-2d", "kernel": "gather", "pattern": "LAPLACIAN:2:2:100", "count": 1 << 16},
    {"name": "down-scatter", "kernel": "scatter", "pattern": [7, 5, 3, 1], "delta": -4, "count": 1 << 17},
    {"name": "gs-copy", "kernel": "gs", "pattern-gather": "UNIFORM:8:1", "pattern-scatter": "UNIFORM:8:2",
     "delta-gather": 8, "delta-scatter": 16, "count": 1 << 16},
]


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def derived_machine(records, stream, host, cpu, factors):
    """The measured records as if from another machine: host renamed, every run time divided
    by the factor for its kernel (bandwidth multiplied), STREAM by factors['stream']."""
    out = []
    for r in records:
        r = copy.deepcopy(r)
        f = factors.get(r["kernel"], factors["default"])
        r["host"]["hostname"] = host
        r["host"]["cpu_model"] = cpu
        r["host"]["cores"] = factors["cores"]
        r["threads"] = factors["cores"]
        r["run_times_s"] = [t / f for t in r["run_times_s"]]
        r["min_time_s"] /= f
        r["median_time_s"] /= f
        r["bandwidth_mbs"] *= f
        r["accesses_per_s"] *= f
        r["ns_per_access"] /= f
        if r.get("stream_copy_mbs"):
            r["stream_copy_mbs"] *= factors["stream"]
            r["pct_of_stream"] = 100.0 * r["bandwidth_mbs"] / r["stream_copy_mbs"]
        r["notes"] = r["notes"] + ["derived test fixture: measured on the development VM, rescaled"]
        out.append(r)
    s = copy.deepcopy(stream)
    s["host"]["hostname"] = host
    s["host"]["cpu_model"] = cpu
    s["threads"] = factors["cores"]
    for k in ("copy_mbs", "scale_mbs", "add_mbs", "triad_mbs"):
        s[k] *= factors["stream"]
    for k in s["kernels"]:
        k["bandwidth_mbs"] *= factors["stream"]
    s["notes"] = ["derived test fixture: measured on the development VM, rescaled"]
    return out, s


def gpu_sweep(template):
    """A GPU sweep in the shape `replay --cuda --sweep` writes (no GPU here): bandwidth rises
    with the bytes moved and levels off; the device STREAM record goes with it."""
    device = {"ordinal": 0, "name": "Example GPU (fixture)", "memory_bytes": 80 << 30,
              "sm_count": 132, "compute_capability": "9.0", "driver_version": "12.4"}
    records = []
    for name, kernel, plateau_bw in (("uniform-stride-1", "gather", 2.6e6), ("random-gather", "gather", 0.9e6),
                                     ("uniform-stride-1-scatter", "scatter", 2.2e6)):
        steps = [2 ** k for k in range(10)]
        bws = [plateau_bw * (1 - 0.9 ** (2 ** k)) for k in range(10)]
        best = max(bws)
        plateau = next(i for i in range(10) if all(b >= 0.9 * best for b in bws[i:]))
        for i, (f, bw) in enumerate(zip(steps, bws)):
            r = copy.deepcopy(template)
            r.update({"name": name, "kernel": kernel, "backend": "cuda", "pattern_len": 256,
                      "count": 256 * f, "threads": 256 * 132 * 4, "timer": "cuda-event",
                      "device": device, "notes": ["derived test fixture: shaped like a GPU sweep, not measured"],
                      "gpu": {"function": kernel, "block": 256, "grid": 132 * 4,
                              "sweep": {"step": i, "steps": 10, "factor": f, "base_count": 256,
                                        "truncated_from": None, "plateau_count": 256 * steps[plateau]}}})
            r["bytes"] = 8 * 256 * r["count"]
            r["bandwidth_mbs"] = bw
            r["min_time_s"] = r["bytes"] / bw / 1e6
            r["median_time_s"] = r["min_time_s"] * 1.02
            r["run_times_s"] = [r["min_time_s"], r["median_time_s"], r["min_time_s"] * 1.05]
            r["accesses"] = r["bytes"] // 8
            r["accesses_per_s"] = r["accesses"] / r["min_time_s"]
            r["ns_per_access"] = r["min_time_s"] * 1e9 / r["accesses"]
            r["stream_copy_mbs"] = 3.0e6
            r["pct_of_stream"] = 100 * bw / 3.0e6
            r["mpi"] = None
            records.append(r)
    stream = {"schema_version": 1, "backend": "cuda", "device": device, "elements": 1 << 25,
              "array_bytes": 8 << 25, "ntimes": 10, "copy_mbs": 3.0e6, "mul_mbs": 2.98e6,
              "add_mbs": 3.1e6, "triad_mbs": 3.1e6, "dot_mbs": 2.7e6,
              "min_times_s": [1.8e-4, 1.8e-4, 2.6e-4, 2.6e-4, 2.0e-4], "validated": True,
              "notes": ["derived test fixture: shaped like GPU STREAM, not measured"],
              "host": template["host"], "mgbench_version": template["mgbench_version"],
              "time": template["time"]}
    return records, stream


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-build", action="store_true")
    a = ap.parse_args()
    if not a.skip_build:
        run(["cargo", "build", "--release", "--workspace", "--features", "mpi", "--quiet"], cwd=ROOT)
    os.makedirs(DATA, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="mgbench-fixtures-")
    try:
        suite = os.path.join(tmp, "suite.json")
        with open(suite, "w") as f:
            json.dump(SUITE, f)
        # 1. This machine: replay with STREAM.
        out = os.path.join(tmp, "res")
        run([MGBENCH, "replay", suite, "-t", "2", "-R", "5", "--stream-size", "4000000", "--out", out,
             "--format", "json", "--quiet"], stdout=subprocess.DEVNULL)
        files = sorted(os.listdir(out))
        replay = json.load(open(os.path.join(out, next(f for f in files if f.endswith(".json") and "stream" not in f))))
        stream = json.load(open(os.path.join(out, next(f for f in files if f.endswith("-stream.json")))))
        host = replay[0]["host"]["hostname"]
        json.dump(replay, open(os.path.join(DATA, "machine-a-replay.json"), "w"), indent=1)
        json.dump(stream, open(os.path.join(DATA, "machine-a-stream.json"), "w"), indent=1)
        # 2. Two derived machines.
        for tag, name, cpu, factors in (
            ("b", "hbm-node", "fixture: 64-core CPU with HBM",
             {"gather": 3.5, "scatter": 2.5, "gs": 3.0, "default": 3.0, "stream": 4.0, "cores": 64}),
            ("c", "ddr-node", "fixture: 32-core DDR5 CPU",
             {"gather": 1.6, "scatter": 1.1, "gs": 1.3, "default": 1.4, "stream": 1.5, "cores": 32}),
        ):
            recs, s = derived_machine(replay, stream, name, cpu, factors)
            json.dump(recs, open(os.path.join(DATA, f"machine-{tag}-replay.json"), "w"), indent=1)
            json.dump(s, open(os.path.join(DATA, f"machine-{tag}-stream.json"), "w"), indent=1)
        # 3. MPI sweeps (real mpirun).
        small = os.path.join(tmp, "mpi.json")
        json.dump([{"name": "uniform-stride-1", "kernel": "gather", "pattern": "UNIFORM:8:1:NR", "count": 1 << 18},
                   {"name": "uniform-stride-1-scatter", "kernel": "scatter", "pattern": "UNIFORM:8:1:NR",
                    "count": 1 << 18}], open(small, "w"))
        for scaling in ("weak", "strong"):
            extra = ["--strong"] if scaling == "strong" else []
            run([sys.executable, os.path.join(ROOT, "scripts", "mpi-sweep.py"), small, "--ranks", "1,2,4",
                 "--runs", "5", "--skip-build", "--out", os.path.join(DATA, f"mpi-sweep-{scaling}.csv")] + extra)
        # 4. GPU sweep (shaped, not measured).
        recs, s = gpu_sweep(replay[0])
        json.dump(recs, open(os.path.join(DATA, "gpu-sweep-replay.json"), "w"), indent=1)
        json.dump(s, open(os.path.join(DATA, "gpu-sweep-gpu-stream.json"), "w"), indent=1)
        # 5. A real pattern and an analysis: the SpMV demo, captured and mined.
        apps = os.path.join(tmp, "apps")
        run([os.path.join(ROOT, "scripts", "apps", "build.sh"), apps], stdout=subprocess.DEVNULL)
        trace = os.path.join(tmp, "spmv.mgbt")
        run([MGBENCH, "capture", "--quiet", "-o", trace, "--", os.path.join(apps, "spmv"), "--rows=2048",
             "--nnz=8", "--iters=3"], stdout=subprocess.DEVNULL)
        run([MGBENCH, "synth", trace, "--quiet", "--min-instances", "256", "-o",
             os.path.join(DATA, "spmv-patterns.json")])
        run([MGBENCH, "analyze", trace, "--quiet", "-o", os.path.join(DATA, "spmv-analysis.json")],
            stdout=subprocess.DEVNULL)
        # 6. RDX over a full capture of the SpMV demo, with the exact histograms.
        full = os.path.join(tmp, "spmv-full.mgbt")
        run([MGBENCH, "capture", "--quiet", "--full", "-o", full, "--", os.path.join(apps, "spmv"),
             "--rows=2048", "--nnz=8", "--iters=3"], stdout=subprocess.DEVNULL)
        run([MGBENCH, "reuse", "--quiet", "--rdx", full, "--top", "8", "-o",
             os.path.join(DATA, "spmv-reuse.json")], stdout=subprocess.DEVNULL)
        # 7. Affinity of the row/column demo in both orders (small: 2 regions of 256 blocks),
        #    their comparison, and the zoom of the row-major run.
        small = ["--regions", "2", "--max-blocks", "256", "--heatmap-blocks", "12"]
        for order in ["row", "col"]:
            t = os.path.join(tmp, f"rc-{order}.mgbt")
            run([MGBENCH, "capture", "--quiet", "--full", "-o", t, "--", os.path.join(apps, "rowcol"),
                 f"--order={order}"], stdout=subprocess.DEVNULL)
            out = os.path.join(DATA, "rowcol-affinity.json") if order == "row" else \
                os.path.join(tmp, "rc-col.json")
            run([MGBENCH, "affinity", "--quiet", t, *small, "-o", out], stdout=subprocess.DEVNULL)
        run([MGBENCH, "affinity", "--compare", os.path.join(DATA, "rowcol-affinity.json"),
             os.path.join(tmp, "rc-col.json"), "-o", os.path.join(DATA, "rowcol-affinity-compare.json")],
            stdout=subprocess.DEVNULL)
        run([MGBENCH, "zoom", "--quiet", os.path.join(tmp, "rc-row.mgbt"), "--leaves", "32", "-o",
             os.path.join(DATA, "rowcol-zoom.json")], stdout=subprocess.DEVNULL)
        print(f"fixtures written to {DATA} (measured on {host})", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
