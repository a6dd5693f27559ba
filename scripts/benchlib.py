"""Shared by the benchmark scripts: building, timing a command, and moving the memory layout
between repetitions.

The size of the environment moves the program's stack, and with it QEMU's heap and the
guest's data, relative to cache sets and 4 KiB aliasing: here it alone moved bare QEMU on the
integer gather from 1.13 to 1.48 s, and the inline counter's cost over bare QEMU from 1.03x to
1.54x (pads of 0 to 48 bytes). A benchmark that runs every configuration with one layout
measures that layout. So each repetition runs all configurations with the environment padded
by a different length (MGBENCH_BENCH_PAD), and the medians are taken over layouts.
"""
import os
import random
import subprocess
import sys
import time

# Bytes the pad grows by per repetition: not a multiple of 16 or 64, so successive
# repetitions land at different stack alignments and cache-line offsets.
PAD_STEP = 680


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def build():
    """Builds mgbench (release, the whole workspace) and the demo programs (scripts/apps)."""
    subprocess.run(["cargo", "build", "--release", "--workspace", "--quiet"], cwd=ROOT,
                   check=True)
    subprocess.run([os.path.join(ROOT, "scripts", "apps", "build.sh")], check=True,
                   stdout=subprocess.DEVNULL)


def build_apps_if_missing():
    """--skip-build keeps the mgbench build, but a fresh checkout has no demo programs yet:
    builds them (a few seconds of C) rather than fail on the first one. The QEMU plugin the
    benchmarks load by path must be built already (`cargo build --release` builds only the
    mgbench binary, which carries a copy of it): says so instead of failing on each run."""
    plugin = os.path.join(ROOT, "target", "release", "libmgbench_qemu_plugin.so")
    if not os.path.exists(plugin):
        sys.exit(f"{plugin} is missing: run `cargo build --release --workspace`, or drop "
                 "--skip-build")
    if not os.path.isdir(os.path.join(ROOT, "scripts", "apps", "build")):
        print("# scripts/apps/build is missing: building the demo programs", flush=True)
        subprocess.run([os.path.join(ROOT, "scripts", "apps", "build.sh")], check=True,
                       stdout=subprocess.DEVNULL)


def layout_env(rep):
    """The environment for repetition `rep` (0, 1, ...): os.environ plus a pad."""
    return dict(os.environ, MGBENCH_BENCH_PAD="x" * ((rep * PAD_STEP) % 4096))


def timed(cmd, env=None):
    """Wall seconds of `cmd` (stdout discarded); exits with its stderr if it fails."""
    t = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env)
    dt = time.perf_counter() - t
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    return dt


def select(workloads, only):
    """The workloads named in `only` (comma-separated; None: all); exits on an unknown name."""
    if not only:
        return workloads
    names = set(only.split(","))
    unknown = names - set(workloads)
    if unknown:
        sys.exit(f"--only: unknown workload(s) {', '.join(sorted(unknown))}; "
                 f"known: {', '.join(workloads)}")
    return {k: v for k, v in workloads.items() if k in names}


def write_text(path, size):
    """`size` bytes of seeded pseudo-text (words of a small vocabulary): compressible like
    text, the same on every machine."""
    rng = random.Random(1)
    vocab = ["".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    out, n = [], 0
    while n < size:
        line = " ".join(rng.choice(vocab) for _ in range(12)) + "\n"
        out.append(line)
        n += len(line)
    with open(path, "w") as f:
        f.write("".join(out)[:size])
