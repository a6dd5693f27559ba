#!/usr/bin/env python3
"""Regenerate the shipped pattern suite in patterns/ (Spatter JSON).

The suite is deterministic: the random patterns come from SplitMix64 with the seed written
into each config ("seed", "generator"; replay and Spatter ignore both keys). Run it after
changing the suite, then commit the JSON files:

    python3 scripts/gen-patterns.py [--out patterns]

Sizes: each config's sparse buffer stays at or below 512 MiB, and every streaming config reads
well over 4x a 32 MiB last-level cache, so the default suite runs in well under a minute on a
2-core machine while still measuring memory, not cache.
"""
import argparse
import json
import os

MASK = (1 << 64) - 1


def splitmix64(seed):
    """SplitMix64 (Steele et al.), the seedable generator used for random patterns."""
    x = seed & MASK
    while True:
        x = (x + 0x9E3779B97F4A7C15) & MASK
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def random_pattern(n, span, seed):
    g = splitmix64(seed)
    return [next(g) % span for _ in range(n)]


def uniform_suite():
    out = []
    for s in [1, 2, 4, 8, 16, 32, 64, 128]:
        # NR: delta = 8 * stride, so iterations never share a line; sparse = 2^26 elements.
        out.append({"name": f"uniform-stride-{s}", "kernel": "gather",
                    "pattern": f"UNIFORM:8:{s}:NR", "count": (1 << 23) // s})
    for s in [1, 8]:
        out.append({"name": f"uniform-stride-{s}-scatter", "kernel": "scatter",
                    "pattern": f"UNIFORM:8:{s}:NR", "count": (1 << 23) // s})
    return out


def ms1_suite():
    return [
        {"name": "ms1-one-gap", "kernel": "gather", "pattern": "MS1:8:4:32",
         "delta": 8, "count": 1 << 22},
        {"name": "ms1-two-gaps", "kernel": "gather", "pattern": "MS1:8:2,3:20",
         "delta": 8, "count": 1 << 22},
        {"name": "ms1-one-gap-scatter", "kernel": "scatter", "pattern": "MS1:8:4:32",
         "delta": 40, "count": 1 << 21},
    ]


def laplacian_suite():
    return [
        {"name": "laplacian-2d-9pt", "kernel": "gather", "pattern": "LAPLACIAN:2:2:1024",
         "count": 1 << 24},
        {"name": "laplacian-3d-7pt", "kernel": "gather", "pattern": "LAPLACIAN:3:1:256",
         "count": 1 << 24},
        {"name": "laplacian-3d-13pt", "kernel": "gather", "pattern": "LAPLACIAN:3:2:128",
         "count": 1 << 23},
    ]


def random_suite():
    out = []
    for name, kernel, span, delta, count, seed in [
        # 512 KiB span, no shift: core gather throughput from L2.
        ("random-gather-1024-l2", "gather", 1 << 16, 0, 1 << 16, 1),
        # 128 MiB span, one-line shift per iteration: DRAM-bound random gather.
        ("random-gather-1024-dram", "gather", 1 << 24, 8, 1 << 14, 2),
        ("random-scatter-1024-dram", "scatter", 1 << 24, 8, 1 << 14, 3),
    ]:
        out.append({"name": name, "kernel": kernel,
                    "pattern": random_pattern(1024, span, seed),
                    "delta": delta, "count": count,
                    "seed": seed, "generator": f"splitmix64 % {span}"})
    return out


def multi_suite():
    inner = [(5 * j) % 32 for j in range(16)]
    return [
        {"name": "gs-stride1-to-stride2", "kernel": "gs",
         "pattern-gather": "UNIFORM:8:1", "pattern-scatter": "UNIFORM:8:2",
         "delta-gather": 8, "delta-scatter": 16, "count": 1 << 22},
        {"name": "multigather-32x16", "kernel": "multigather",
         "pattern": "UNIFORM:32:2", "pattern-gather": inner, "delta": 64, "count": 1 << 20},
        {"name": "multiscatter-32x16", "kernel": "multiscatter",
         "pattern": "UNIFORM:32:2", "pattern-scatter": inner, "delta": 64, "count": 1 << 20},
    ]


SUITES = {
    "uniform.json": uniform_suite,
    "ms1.json": ms1_suite,
    "laplacian.json": laplacian_suite,
    "random.json": random_suite,
    "multi.json": multi_suite,
}


def dump(configs):
    # One config per line keeps diffs readable; long index lists stay on their line.
    lines = [json.dumps(c, separators=(", ", ": ")) for c in configs]
    return "[\n  " + ",\n  ".join(lines) + "\n]\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "patterns"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for fname, make in SUITES.items():
        with open(os.path.join(args.out, fname), "w") as f:
            f.write(dump(make()))
        print(f"wrote {os.path.join(args.out, fname)}")


if __name__ == "__main__":
    main()
