#!/usr/bin/env python3
"""What an armed debug register costs string instructions, and what native live RDX does about it.

x86 CPUs may run `rep movs` and `rep stos` without their fast mode while a data breakpoint
is enabled, and live RDX keeps up to 4 armed for most of a run (a sampled use waits for its
reuse). glibc's memcpy and memset use those instructions for mid-sized blocks, and the kernel
clears every new page with one. This script runs scripts/apps/stringops (built here) natively,
--reps times in turn, in three ways:

  unarmed   no watchpoint
  armed     a perf hardware watchpoint (8 bytes, read/write) armed on a word the program
            never touches, as mgbench's library arms one for a sampled use
  mgbench   armed, with the GLIBC_TUNABLES mgbench gives a program it measures natively
            (read from `mgbench reuse --backend page-faults -- /usr/bin/env`, so this is what
            mgbench really sets on this machine: nothing where strings are not slowed)

and prints the medians of memcpy and memset throughput (GB/s) at each --sizes block size
and of the first touch of a fresh page (us; the kernel's page clearing), with each way's
ratio to unarmed. Under QEMU (live RDX's path here) the guest's string instructions are
generated code and not slowed; the kernel's page clearing is, for every page the program
touches first while a register is armed.

    python3 scripts/bench-rdx-strings.py [--reps 5] [--sizes 4096,65536,1048576] [--skip-build]

Exit status 0 when mgbench's setting keeps memcpy and memset within 1.5x of unarmed at
every size (or, on a CPU that keeps its fast strings, when armed already does).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import build  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MGBENCH = os.path.join(ROOT, "target", "release", "mgbench")
STRINGS = os.path.join(ROOT, "scripts", "apps", "build", "stringops")
LINE = re.compile(r"memcpy ([\d.]+) GB/s memset ([\d.]+) GB/s first-touch ([\d.]+) us/page")


def mgbench_tunables():
    """GLIBC_TUNABLES as mgbench sets it for a natively measured program (None: not set)."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    o = subprocess.run([MGBENCH, "reuse", "--quiet", "--backend", "page-faults", "--",
                        "/usr/bin/env"], env=env, capture_output=True, text=True, check=True)
    for line in o.stdout.splitlines():
        if line.startswith("GLIBC_TUNABLES="):
            return line.split("=", 1)[1]
    return None


def run(size, armed, tunables, mib):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    cmd = [STRINGS, f"--size={size}", f"--mib={mib}"] + (["--arm"] if armed else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    m = LINE.search(out)
    if not m:
        sys.exit(f"unexpected output of {' '.join(cmd)}: {out!r}")
    return tuple(float(x) for x in m.groups())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--mib", type=int, default=1024, help="MiB copied and cleared per run")
    ap.add_argument("--skip-build", action="store_true")
    args = ap.parse_args()
    if not args.skip_build:
        build()
    tunables = mgbench_tunables()
    print(f"mgbench sets GLIBC_TUNABLES={tunables or '(nothing: strings not slowed here)'}")
    ways = [("unarmed", False, None), ("armed", True, None), ("mgbench", True, tunables)]
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"medians of {args.reps} runs; ratio to unarmed in brackets")
    print(f"{'size':>8} {'way':<8} {'memcpy GB/s':>18} {'memset GB/s':>18} {'first touch us':>18}")
    ok = True
    for size in sizes:
        got = {}
        for _ in range(args.reps):
            for name, armed, tun in ways:
                got.setdefault(name, []).append(run(size, armed, tun, args.mib))
        med = {n: [statistics.median(r[i] for r in v) for i in range(3)] for n, v in got.items()}
        base = med["unarmed"]
        for name, _, _ in ways:
            m = med[name]
            # Throughput: unarmed / way (how many times slower); time: way / unarmed.
            cells = [f"{m[0]:7.2f} [{base[0] / m[0]:5.2f}x]", f"{m[1]:7.2f} [{base[1] / m[1]:5.2f}x]",
                     f"{m[2]:7.3f} [{m[2] / base[2]:5.2f}x]"]
            print(f"{size:>8} {name:<8} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}")
        best = med["mgbench"] if tunables else med["armed"]
        ok &= base[0] / best[0] <= 1.5 and base[1] / best[1] <= 1.5
    print("target (memcpy and memset within 1.5x of unarmed with mgbench's setting):",
          "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
