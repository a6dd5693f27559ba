//! `mgbench reuse`: RDX over full traces of demo programs, against the exact histograms, and
//! its bad input.

use std::path::Path;
use std::process::Command;

use crate::common::{
    app, build_c, fdclose_expected, have, mgbench, mgbench_json, note_starting, stderr, stdout,
    temp_dir,
};

fn capture(dir: &Path, trace: &str, args: &[&str]) {
    let mut a = vec!["capture", "--quiet", "--full", "-o", trace, "--"];
    a.extend(args);
    let o = mgbench(&a, dir);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn reuse_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["reuse", "--quiet", "-f", "json"];
    a.extend(args);
    mgbench_json(&a, dir)
}

fn s(v: &serde_json::Value, unit: &str, what: &str) -> f64 {
    v[unit]["accuracy_rdx_bins"][what]["s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{unit}.{what} in {}", v[unit]))
}

#[test]
fn rdx_over_a_trace_matches_the_exact_histograms() {
    if !have("qemu-x86_64", "RDX over a captured demo") {
        return;
    }
    let dir = temp_dir("reuse-loops");
    // RDX's Listing 1: sweeps of 1000 and 200000 words, two reuse peaks.
    capture(&dir, "loops.mgbt", &[&app("reuse_loops"), "--reps=10"]);
    let v = reuse_json(
        &dir,
        &[
            "--rdx",
            "loops.mgbt",
            "--period",
            "8192",
            "-o",
            "loops.json",
        ],
    );
    assert_eq!(v["config"]["period"], 8192);
    assert_eq!(v["config"]["watchpoints"], 4);
    assert_eq!(v["config"]["attribution"], "km");
    for unit in ["words", "lines"] {
        assert_eq!(v[unit]["rdx_bins"].as_array().unwrap().len(), 20, "{unit}");
        assert!(v[unit]["samples"].as_u64().unwrap() > 100, "{}", v[unit]);
        assert!(v[unit]["traps"].as_u64().unwrap() > 10, "{}", v[unit]);
        assert!(s(&v, unit, "conversion") > 0.95, "{unit}: {}", v[unit]);
        // The fractions of each histogram sum to 1.
        for key in ["time", "stack", "exact_time", "exact_stack"] {
            let sum: f64 = v[unit]["rdx_bins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b[key].as_f64().unwrap())
                .sum();
            assert!((sum - 1.0).abs() < 1e-6, "{unit}.{key} sums to {sum}");
        }
    }
    // RDX is randomised (jitter, reservoir): one seed can be unlucky (seed 1 on one stack
    // layout of this program gave line stack S 0.79, seeds 2-6 0.97-0.99), so the accuracy is
    // the median over five seeds, as the RDX paper reports medians. Measured on several
    // layouts (environment sizes): medians 0.95..0.99.
    let mut by_seed: Vec<serde_json::Value> = vec![v.clone()];
    for seed in ["2", "3", "4", "5"] {
        by_seed.push(reuse_json(
            &dir,
            &["--rdx", "loops.mgbt", "--period", "8192", "--seed", seed],
        ));
    }
    for unit in ["words", "lines"] {
        for what in ["time", "stack"] {
            let mut all: Vec<f64> = by_seed.iter().map(|v| s(v, unit, what)).collect();
            all.sort_by(f64::total_cmp);
            assert!(all[2] > 0.9, "{unit} {what} S by seed (sorted): {all:?}");
        }
    }
    // The exact word histogram has its two peaks: the small sweep (999 words between
    // reuses, RDX's first bin 0-4K, 4 x 1000 reuses a repetition) and the large one (199999,
    // bin 128K-256K, 200000 a repetition).
    let bins = v["words"]["rdx_bins"].as_array().unwrap();
    let exact = |label: &str| {
        bins.iter().find(|b| b["label"] == label).unwrap()["exact_stack"]
            .as_f64()
            .unwrap()
    };
    assert!(exact("0-4K") > 0.05, "{bins:?}");
    assert!(exact("128K-256K") > 0.8, "{bins:?}");
    // Pairs name the sweep's source line.
    let pairs = v["pairs"].as_array().unwrap();
    assert!(
        pairs
            .iter()
            .any(|p| p["use_source"].as_str().unwrap().contains("reuse_loops.c")),
        "{pairs:?}"
    );
    // The same report was written to -o.
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("loops.json")).unwrap()).unwrap();
    assert_eq!(file, v);
    // The table shows both granularities and the accuracy.
    let o = mgbench(
        &[
            "reuse",
            "--quiet",
            "--rdx",
            "loops.mgbt",
            "--period",
            "8192",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    for want in [
        "words:",
        "lines:",
        "accuracy over RDX's 20 bins",
        "(80% range)",
        "the samples' own spread (100 bootstrap replicates",
        "use -> reuse",
    ] {
        assert!(t.contains(want), "{want} in\n{t}");
    }
    // The spread: each bin's estimate within its range, and on this steady program the S
    // the samples' spread suggests near the S the exact histogram gives. Only from 25
    // effective samples on (the words here have 24-32, the lines about 250).
    assert!(v["lines"]["effective_samples"].as_f64().unwrap() >= 25.0);
    for unit in ["words", "lines"] {
        let g = &v[unit];
        if g["effective_samples"].as_f64().unwrap() < 25.0 {
            assert!(g["spread"].is_null(), "{}", g["spread"]);
            assert!(g["rdx_bins"][0]["stack_range"].is_null());
            continue;
        }
        let spread = g["spread"]["stack_s"].as_f64().unwrap();
        let actual = g["accuracy_rdx_bins"]["stack"]["s"].as_f64().unwrap();
        assert!(
            spread > 0.9 && (spread - actual).abs() < 0.1,
            "{unit}: spread {spread}, S {actual}"
        );
        // The range holds 80% of the replicates, which need not hold the estimate itself:
        // on one layout (the dynamic loader reads the environment, so the test's variables
        // shift every access after it) the 16K-32K line bin's 0.11803 lay 0.00008 above its
        // range's 0.11795. So the estimate is within the range widened by a hundredth.
        for b in g["rdx_bins"].as_array().unwrap() {
            let (x, r) = (b["stack"].as_f64().unwrap(), &b["stack_range"]);
            let (lo, hi) = (r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
            assert!(lo - 0.01 <= x && x <= hi + 0.01, "{unit}: {b}");
        }
    }
    // Each pair is a row: reuses and traps with their mean time, or, without reuse, uses and
    // the samples that watched them.
    for p in pairs {
        let row = match p["mean_time"].as_f64() {
            Some(m) => format!(
                "{:.0} reuses, {:>5} traps,   mean time {m:>12.0}  {}",
                p["weight"].as_f64().unwrap(),
                p["traps"].as_u64().unwrap(),
                p["use_ip"].as_str().unwrap()
            ),
            None => format!(
                "{:.0} uses,   {:>5} samples, no reuse",
                p["weight"].as_f64().unwrap(),
                p["traps"].as_u64().unwrap()
            ),
        };
        assert!(t.contains(&row), "{row} in\n{t}");
    }
    // Without the exact pass: no accuracy, same samples.
    let n = reuse_json(
        &dir,
        &["--rdx", "loops.mgbt", "--period", "8192", "--no-exact"],
    );
    assert!(n["words"]["accuracy_rdx_bins"].is_null());
    assert_eq!(n["words"]["samples"], v["words"]["samples"]);
    assert_eq!(
        n["words"]["rdx_bins"][0]["time"],
        v["words"]["rdx_bins"][0]["time"]
    );
}

#[test]
fn proportional_attribution_keeps_the_short_reuses() {
    if !have("qemu-x86_64", "RDX attribution on a captured demo") {
        return;
    }
    let dir = temp_dir("reuse-attribution");
    // RDX's Listing 2: acc[i & 7] reused within a few accesses, big[i] a whole sweep later.
    capture(
        &dir,
        "a.mgbt",
        &[&app("attribution"), "--n=100000", "--reps=8"],
    );
    // The share of short reuses (the first of RDX's bins) over 8 seeds: one seed's sampled
    // estimate spreads by about 0.1 around the exact share at this period (613 samples),
    // while the weighted estimate is unbiased, so its mean is what is compared.
    let short = |attribution: &str| -> (f64, f64, Option<String>) {
        let mut sum = 0.0;
        let mut exact = 0.0;
        let mut one_phase = None;
        for seed in 1..=8 {
            let seed = seed.to_string();
            let v = reuse_json(
                &dir,
                &[
                    "--rdx",
                    "a.mgbt",
                    "--period",
                    "4096",
                    "--seed",
                    &seed,
                    "--attribution",
                    attribution,
                ],
            );
            sum += v["words"]["rdx_bins"][0]["time"].as_f64().unwrap();
            exact = v["words"]["rdx_bins"][0]["exact_time"].as_f64().unwrap();
            let lines = &v["lines"];
            if lines["effective_samples"].as_f64().unwrap() >= 128.0
                && lines["phases"].as_u64() == Some(1)
            {
                one_phase.get_or_insert(seed);
            }
        }
        (sum / 8.0, exact, one_phase)
    };
    let (ht, e, _) = short("ht");
    let (km, _, one_phase) = short("km");
    let (one, _, _) = short("one");
    // The loop is alike from start to end: its lines' 400-600 effective samples would allow
    // several phases, but cut apart they only add each phase's noise, and the test that
    // cuts them (Kolmogorov-Smirnov at 1%) finds none that differs in most seeds (5-7 of 8,
    // as the trace varies with the environment: the array's fill before the loop can make
    // the first phase differ), and the table says why.
    let seed = one_phase.expect("no seed kept the lines as one phase");
    let o = mgbench(
        &[
            "reuse", "--quiet", "--rdx", "a.mgbt", "--period", "4096", "--seed", &seed,
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("none of its phases differs from the rest of the run"),
        "{}",
        stdout(&o)
    );
    // About two thirds of the reuses are short: with one reuse per trap the long reuses'
    // busy registers hide most of them, weighting the traps (ht) or counting the watches
    // that replacements ended (km) restores them.
    assert!(e > 0.6, "exact share of short reuses {e}");
    assert!((ht - e).abs() < 0.1, "ht {ht} vs exact {e}");
    assert!((km - e).abs() < 0.1, "km {km} vs exact {e}");
    assert!(
        (one - e).abs() > (ht - e).abs().max((km - e).abs()),
        "one {one} ht {ht} km {km} exact {e}"
    );
}

#[test]
fn reuse_bad_input_is_named() {
    if !have("qemu-x86_64", "reuse errors on a captured demo") {
        return;
    }
    let dir = temp_dir("reuse-errors");
    let err = |args: &[&str], want: &[&str]| {
        let o = mgbench(args, &dir);
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = stderr(&o);
        for w in want {
            assert!(e.contains(w), "{args:?}: {w:?} not in {e}");
        }
        assert!(!e.contains("panicked"), "{e}");
    };
    err(&["reuse", "--rdx", "missing.mgbt"], &["missing.mgbt"]);
    err(
        &["reuse"],
        &["--rdx TRACE", "capture --full", "reuse -- PROGRAM"],
    );
    // Live: a program that is not there is named.
    err(&["reuse", "--", "./prog", "--n=3"], &["./prog"]);
    err(
        &["reuse", "--rdx", "x.mgbt", "--", "./prog"],
        &["either --rdx TRACE or a program"],
    );
    // Live: more registers than the CPU has is the user's flag, named before QEMU starts (it
    // was the plugin's `rdx_watch=5` in QEMU's refusal to load it); a trace simulates them.
    let o = mgbench(&["reuse", "--watchpoints", "5", "--", "/bin/true"], &dir);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("--watchpoints 5") && e.contains("give 1 to 4") && e.contains("--rdx"),
        "{e}"
    );
    assert!(!e.contains("rdx_watch") && !e.contains("plugin"), "{e}");
    // Live without QEMU (and without a PMU, as here): both are named, and the way out.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args(["reuse", "--", "/bin/true"])
        .env("MGBENCH_QEMU", dir.join("no-qemu"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("qemu-x86_64") && e.contains("MGBENCH_QEMU"),
        "{e}"
    );
    if mgbench_capture::backend::pmu_address_sampling().is_none() {
        assert!(
            e.contains("no PMU address sampling") && e.contains("reuse --rdx"),
            "{e}"
        );
    }
    // A sampled trace cannot give time distances.
    let o = mgbench(
        &[
            "capture",
            "--quiet",
            "-o",
            "sampled.mgbt",
            "--",
            &app("reuse_loops"),
            "--reps=2",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    err(
        &["reuse", "--rdx", "sampled.mgbt"],
        &["sampled.mgbt", "--full"],
    );
    capture(&dir, "full.mgbt", &[&app("reuse_loops"), "--reps=2"]);
    err(
        &["reuse", "--rdx", "full.mgbt", "--jitter", "2"],
        &["--jitter"],
    );
    err(
        &["reuse", "--rdx", "full.mgbt", "--period", "0"],
        &["--period"],
    );
    err(
        &["reuse", "--rdx", "full.mgbt", "--watchpoints", "0"],
        &["--watchpoints"],
    );
    err(
        &["reuse", "--rdx", "full.mgbt", "-o", "no/such/dir/r.json"],
        &["no/such/dir/r.json"],
    );
    // A damaged trace (a capture killed mid-write) is refused with the flag that reads it,
    // and the flag exists.
    let bytes = std::fs::read(dir.join("full.mgbt")).unwrap();
    std::fs::write(dir.join("cut.mgbt"), &bytes[..bytes.len() - 10]).unwrap();
    err(
        &["reuse", "--rdx", "cut.mgbt"],
        &["cut.mgbt", "damaged", "--allow-damaged"],
    );
    let o = mgbench(&["reuse", "--rdx", "cut.mgbt", "--allow-damaged"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.contains("the trace is damaged: only the accesses before the damage were used"),
        "{t}"
    );
    // A report already written is kept when a later run fails.
    std::fs::write(dir.join("keep.json"), "{}\n").unwrap();
    err(
        &["reuse", "--rdx", "sampled.mgbt", "-o", "keep.json"],
        &["sampled.mgbt"],
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.json")).unwrap(),
        "{}\n"
    );
    // A period longer than the run takes no sample: it says so, and estimates nothing.
    let o = mgbench(
        &["reuse", "--rdx", "full.mgbt", "--period", "1000000000000"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("words: 0 samples"), "{t}");
    assert!(
        t.contains("distinct words: not estimated (no sample)"),
        "{t}"
    );
    assert!(t.contains("no sample was taken"), "{t}");
    assert!(!t.contains("only 0 samples"), "{t}");
}

/// Runs `mgbench reuse` live under QEMU on `args` and returns its JSON report.
fn live_json(dir: &Path, period: &str, args: &[&str]) -> serde_json::Value {
    live_json_on(dir, "qemu", Some(period), args)
}

/// Runs `mgbench reuse --backend BACKEND` live on `args` (at `--period`, else at the
/// adaptive default) and returns its JSON report.
fn live_json_on(
    dir: &Path,
    backend: &str,
    period: Option<&str>,
    args: &[&str],
) -> serde_json::Value {
    live_run_on(dir, backend, period, args).1
}

/// As [`live_json_on`], with the run's output (the program's own on stdout).
fn live_run_on(
    dir: &Path,
    backend: &str,
    period: Option<&str>,
    args: &[&str],
) -> (std::process::Output, serde_json::Value) {
    live_run_with(dir, backend, period, &[], args, &[])
}

/// As [`live_run_on`], with `flags` added to mgbench's and `env` to its environment (and so
/// the program's).
fn live_run_with(
    dir: &Path,
    backend: &str,
    period: Option<&str>,
    flags: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, serde_json::Value) {
    let mut a = vec!["reuse", "--quiet", "--backend", backend];
    if let Some(p) = period {
        a.extend(["--period", p]);
    }
    a.extend(flags);
    a.extend(["-o", "live.json", "--"]);
    a.extend(args);
    let o = Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args(&a)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("run mgbench");
    assert!(
        o.status.success(),
        "{flags:?} {args:?} {env:?}: {}",
        stderr(&o)
    );
    let v = serde_json::from_slice(&std::fs::read(dir.join("live.json")).unwrap()).unwrap();
    (o, v)
}

/// Traps of the use/reuse pairs whose use lies in a function named `prefix...`.
fn traps_in(v: &serde_json::Value, prefix: &str) -> u64 {
    v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["use_source"]
                .as_str()
                .is_some_and(|s| s.starts_with(prefix))
        })
        .map(|p| p["traps"].as_u64().unwrap())
        .sum()
}

fn stack(v: &serde_json::Value, key: &str) -> Vec<f64> {
    v["words"]["rdx_bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[key].as_f64().unwrap())
        .collect()
}

/// A live run (`live`) counts the accesses a full trace of the same program holds (`exact`,
/// its trace-driven report), within 1000; `what` names the run in the message.
fn assert_counts_like_the_trace(live: &serde_json::Value, exact: &serde_json::Value, what: &str) {
    let (live_n, trace_n) = (
        live["accesses"].as_f64().unwrap(),
        exact["accesses"].as_f64().unwrap(),
    );
    assert!(
        (live_n - trace_n).abs() < 1000.0,
        "{what}: live counts {live_n} accesses, the full trace {trace_n}"
    );
}

/// RDX's accuracy S of histogram `got` against `want` (fractions over the same bins).
fn accuracy_s(want: &[f64], got: &[f64]) -> f64 {
    1.0 - want
        .iter()
        .zip(got)
        .map(|(a, b)| (a - b).abs())
        .sum::<f64>()
        / 2.0
}

#[test]
fn live_rdx_measures_a_running_program_like_the_exact_histogram() {
    if !have(
        "qemu-x86_64",
        "live RDX under QEMU with hardware watchpoints",
    ) {
        return;
    }
    let dir = temp_dir("reuse-live");
    let program = [app("reuse_loops"), "--reps=10".to_string()];
    let args: Vec<&str> = program.iter().map(String::as_str).collect();
    capture(&dir, "loops.mgbt", &args);
    let exact = reuse_json(&dir, &["--rdx", "loops.mgbt", "--period", "4096"]);
    let want = stack(&exact, "exact_stack");
    // Period under 2^18: memory callbacks count between samples.
    let v = live_json(&dir, "4096", &args);
    assert_eq!(v["live"], true);
    assert!(v["lines"].is_null(), "no cache lines live");
    assert_counts_like_the_trace(&v, &exact, "");
    assert!(
        v["words"]["samples"].as_u64().unwrap() > 300,
        "{}",
        v["words"]
    );
    assert!(v["words"]["traps"].as_u64().unwrap() > 20, "{}", v["words"]);
    let got = stack(&v, "stack");
    let s = accuracy_s(&want, &got);
    assert!(s >= 0.9, "live S {s}: {got:?} vs exact {want:?}");
    // Live, with no exact histogram, the samples' spread still says how far to trust it
    // (from 25 effective samples on).
    if v["words"]["effective_samples"].as_f64().unwrap() >= 25.0 {
        let spread = v["words"]["spread"]["stack_s"].as_f64().unwrap();
        assert!(spread > 0.8, "{}", v["words"]["spread"]);
    } else {
        assert!(v["words"]["spread"].is_null(), "{}", v["words"]["spread"]);
    }
    // Period 2^18: counted inline between samples, switched in by retranslation. The large
    // sweep's reuses (200000 words apart) dominate.
    let v = live_json(&dir, "262144", &args);
    assert!(
        v["words"]["samples"].as_u64().unwrap() >= 5,
        "{}",
        v["words"]
    );
    let peak = v["words"]["rdx_bins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["label"] == "128K-256K")
        .unwrap()["time"]
        .as_f64()
        .unwrap();
    assert!(peak > 0.5, "{}", v["words"]);
}

/// Instructions of many kinds with memory operands: plain, read-modify-write, stack,
/// conditional, bit, SSE (legacy, 0F38 and 0F3A maps) and AVX/FMA (VEX, scalar and vector),
/// and x87's 80-bit values; each kind whose accesses are fixed must count what QEMU does.
const KINDS_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
static double buf[16] __attribute__((aligned(64)));
__attribute__((noinline)) static long kinds(double *p) {
    long r = 0;
    __asm__ volatile(
        "addl $1, (%[p])\n\t" "pushq 8(%[p])\n\t" "popq %%rax\n\t" "add %%rax, %[r]\n\t"
        "cmpq $0, 16(%[p])\n\t" "cmovne 24(%[p]), %%rax\n\t" "sete 32(%[p])\n\t"
        "btsq $3, 40(%[p])\n\t" "movups (%[p]), %%xmm0\n\t" "movsd 8(%[p]), %%xmm1\n\t"
        "addsd 16(%[p]), %%xmm1\n\t" "pmovzxbw (%[p]), %%xmm2\n\t"
        "pinsrd $1, 4(%[p]), %%xmm2\n\t" "pextrd $1, %%xmm2, 48(%[p])\n\t"
        "roundsd $0, 8(%[p]), %%xmm3\n\t" "vfmadd231sd 8(%[p]), %%xmm1, %%xmm0\n\t"
        "vfmadd213ss 12(%[p]), %%xmm1, %%xmm0\n\t" "vfmadd231pd 32(%[p]), %%ymm1, %%ymm2\n\t"
        "vaddsd 16(%[p]), %%xmm1, %%xmm4\n\t" "vbroadcastss 4(%[p]), %%ymm5\n\t"
        "vmovups (%[p]), %%ymm7\n\t" "vmovups %%xmm7, 64(%[p])\n\t"
        "vpextrq $1, %%xmm3, 72(%[p])\n\t" "fldt 80(%[p])\n\t" "fstpl 96(%[p])\n\t"
        "vzeroupper\n\t"
        : [r] "+r"(r) : [p] "r"(p) : "rax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",
          "xmm7", "memory", "cc");
    return r;
}
int main(int argc, char **argv) {
    long reps = argc > 1 ? atol(argv[1]) : 1000, r = 0;
    for (long i = 0; i < reps; i++) r += kinds(buf);
    printf("%ld\n", r);
    return 0;
}
"#;

/// The plugin mgbench embeds, as its build (build.rs) leaves it beside the target directory.
fn built_plugin() -> std::path::PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_mgbench"));
    let plugin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/PROFILE/mgbench")
        .join("plugin-build/release/libmgbench_qemu_plugin.so");
    assert!(plugin.is_file(), "{} is not built", plugin.display());
    plugin
}

#[test]
fn whole_block_counts_are_what_qemu_performs_instruction_by_instruction() {
    if !have("qemu-x86_64", "the plugin's check of its fixed counts") {
        return;
    }
    // Live RDX counts, between samples, the accesses of a block's instructions whose
    // accesses are fixed with one add when the block starts. `rdx_check` counts each such
    // instruction's executions times its fixed count beside the accesses QEMU reports for
    // it, and writes the instructions where they differ.
    let dir = temp_dir("reuse-fixed-counts");
    build_c(&dir, "kinds", KINDS_C, &["-O2"]);
    let text: String = (0..20000)
        .map(|i| format!("line {} of {}\n", i * 7 % 1000, i))
        .collect();
    std::fs::write(dir.join("text.txt"), text).unwrap();
    let plugin = built_plugin();
    let programs: [&[&str]; 3] = [
        &["./kinds", "5000"],
        &[&app("spmv"), "--iters=5"],
        &["/usr/bin/gzip", "-c", "text.txt"],
    ];
    for program in programs {
        let (events, check) = (dir.join("events.txt"), dir.join("check.txt"));
        std::fs::write(&events, "").unwrap();
        let _ = std::fs::remove_file(&check);
        let args = format!(
            "{},out={},rdx={},rdx_check={}",
            plugin.display(),
            events.display(),
            1u64 << 62,
            check.display()
        );
        let o = Command::new("qemu-x86_64")
            .args(["-plugin", &args])
            .args(program)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{program:?}: {}", stderr(&o));
        let found = std::fs::read_to_string(&check).unwrap();
        let last = found.lines().last().unwrap_or_default();
        assert!(last.ends_with(", 0 differ"), "{program:?}:\n{found}");
        // "checked N instructions: fixed F, QEMU Q, 0 differ"
        let number = |after: &str| -> u64 {
            let rest = &last[last.find(after).unwrap() + after.len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(number("checked ") > 5000, "{program:?}: {last}");
        assert_eq!(number("fixed "), number("QEMU "), "{program:?}: {last}");
        assert!(number("fixed ") > 100_000, "{program:?}: {last}");
    }
}

#[test]
fn live_rdx_adapts_its_period_by_default_and_stays_accurate() {
    if !have("qemu-x86_64", "live RDX under QEMU") {
        return;
    }
    let dir = temp_dir("reuse-live-adaptive");
    // The exact histogram from a short full trace; the live run is 20 times as long (45 M
    // accesses): past the callbacks' stretch (periods 4096 to 2^16, 640 samples, 15.9 M
    // accesses) into inline counting. RDX's Listing 1: two sweeps, the large one's reuses
    // 200000 words apart.
    let loops = app("reuse_loops");
    capture(&dir, "loops.mgbt", &[&loops, "--reps=10"]);
    let exact = reuse_json(&dir, &["--rdx", "loops.mgbt", "--period", "4096"]);
    let want = stack(&exact, "exact_stack");
    let program = [loops.as_str(), "--reps=200"];
    let v = live_json_on(&dir, "qemu", None, &program);
    let ad = &v["adaptive_period"];
    assert_eq!(ad["min"], 4096, "{ad}");
    assert!(ad["max"].as_u64().unwrap() >= 1 << 17, "{ad}");
    assert_eq!(v["config"]["period"], 4096);
    let samples = v["words"]["samples"].as_u64().unwrap();
    assert!(samples > 640 && samples < 1500, "{}", v["words"]);
    let notes = v["notes"].to_string();
    assert!(notes.contains("adaptive period, 4096 to"), "{notes}");
    let got = stack(&v, "stack");
    let s = accuracy_s(&want, &got);
    // 0.92-0.93 over 3 seeds here (82-91 effective samples): the inline stretch's samples,
    // each standing for ~2^19 accesses, carry most of the weight.
    assert!(s >= 0.85, "live S {s}: {got:?} vs exact {want:?}");
    // The table says how it sampled, on stderr: stdout holds the program's output and
    // nothing else (`mgbench reuse -- gzip -c f > f.gz` leaves a valid archive).
    let mut a = vec!["reuse", "--backend", "qemu", "--"];
    a.extend(program);
    let o = mgbench(&a, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stderr(&o);
    assert!(
        table.contains("RDX sampling every 4096 to") && table.contains("(adaptive, jitter 0.5)"),
        "{table}"
    );
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("reuse_loops small="), "{out}");
}

/// 100 worker threads, all alive at once (a barrier holds them): each sweeps its own 1024
/// words 60 times, so every reuse is 1024 of the thread's own accesses apart.
const WIDE: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#define T 100
static pthread_barrier_t bar;
static void *work(void *arg) {
    volatile long *a = malloc(1024 * sizeof(long));
    for (int i = 0; i < 1024; i++) a[i] = i + (long)arg;
    pthread_barrier_wait(&bar);
    long s = 0;
    for (int r = 0; r < 60; r++)
        for (int i = 0; i < 1024; i++) s += a[i];
    pthread_barrier_wait(&bar);
    return (void *)s;
}
int main(void) {
    pthread_t tid[T];
    pthread_barrier_init(&bar, NULL, T + 1);
    for (long t = 0; t < T; t++) pthread_create(&tid[t], NULL, work, (void *)t);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    long sum = 0;
    for (int t = 0; t < T; t++) {
        void *r;
        pthread_join(tid[t], &r);
        sum += (long)r;
    }
    printf("wide sum=%ld\n", sum);
    return 0;
}
"#;

#[test]
fn live_rdx_follows_a_hundred_threads_at_once() {
    if !have("qemu-x86_64", "live RDX of a program with 100 threads") {
        return;
    }
    let dir = temp_dir("reuse-live-wide");
    build_c(&dir, "wide", WIDE, &["-O1", "-pthread"]);
    capture(&dir, "wide.mgbt", &["./wide"]);
    let exact = reuse_json(&dir, &["--rdx", "wide.mgbt", "--period", "2048"]);
    let v = live_json(&dir, "2048", &["./wide"]);
    // Before, threads beyond 64 at once ran unsampled and uncounted (a note said so).
    let notes = v["notes"].to_string();
    assert!(!notes.contains("more than"), "{notes}");
    assert_eq!(v["threads"], 101, "{notes}");
    assert_eq!(exact["threads"], 101);
    // 100 threads meeting at a barrier and in malloc make a number of accesses that
    // depends on timing (lock retries): the counts agree to 0.1%, not to the access.
    let (live_n, trace_n) = (
        v["accesses"].as_f64().unwrap(),
        exact["accesses"].as_f64().unwrap(),
    );
    assert!(
        (live_n / trace_n - 1.0).abs() < 1e-3,
        "live counts {live_n} accesses, the full trace {trace_n}"
    );
    let w = &v["words"];
    // 6.3 M accesses at one sample per 2048: about 3000, most of them trapped.
    assert!(w["samples"].as_u64().unwrap() > 2400, "{w}");
    assert!(w["traps"].as_u64().unwrap() > 1500, "{w}");
    let (want, got) = (stack(&exact, "exact_time"), stack(&v, "time"));
    let s = accuracy_s(&want, &got);
    assert!(s >= 0.9, "live time S {s}: {got:?} vs exact {want:?}");
    // Timed in each thread's own accesses: the sweep's reuses lie 1024 apart (about 3000
    // traps with a mean of 1024 here); counted in everyone's accesses they would lie ~100x
    // further.
    let sweep = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["use_source"]
                .as_str()
                .is_some_and(|s| s.starts_with("work"))
                && p["traps"].as_u64().unwrap() > 1000
        })
        .unwrap_or_else(|| panic!("no sweep pair: {}", v["pairs"]));
    let mean = sweep["mean_time"].as_f64().unwrap();
    assert!((1000.0..1050.0).contains(&mean), "{sweep}");
}

/// Sweeps 65536 words 100 times, sets its own SIGTRAP disposition (a handler that counts,
/// or SIG_IGN), sweeps 100 times more, then raises SIGTRAP 3 times itself.
const TRAPPER: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static volatile int got;
static void on(int s) { (void)s; got++; }
__attribute__((noipa)) long first(volatile long *a, long n) {
    long s = 0;
    for (int r = 0; r < 100; r++) for (long i = 0; i < n; i++) s += a[i];
    return s;
}
__attribute__((noipa)) long second(volatile long *a, long n) {
    long s = 0;
    for (int r = 0; r < 100; r++) for (long i = n - 1; i >= 0; i--) s += a[i];
    return s;
}
int main(int argc, char **argv) {
    long n = 65536;
    volatile long *a = malloc(n * sizeof(long));
    for (long i = 0; i < n; i++) a[i] = i;
    long s = first(a, n);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = argc > 1 && strcmp(argv[1], "ignore") == 0 ? SIG_IGN : on;
    sigaction(SIGTRAP, &sa, NULL);
    s += second(a, n);
    for (int i = 0; i < 3; i++) raise(SIGTRAP);
    printf("trapper sum=%ld handled=%d\n", s, got);
    return 0;
}
"#;

#[test]
fn live_rdx_keeps_its_traps_when_the_program_sets_its_own_sigtrap_handler() {
    if !have("qemu-x86_64", "live RDX under QEMU") {
        return;
    }
    let dir = temp_dir("reuse-live-trapper");
    build_c(&dir, "trapper", TRAPPER, &["-O2", "-g"]);
    // QEMU sets the host's SIGTRAP handler when the guest sets its own. Before, that took
    // the watchpoints' traps: the program's handler ran 393 times instead of 3, and the
    // second sweep's reuses went unrecorded (4 traps, against 251 in the first).
    for (how, handled) in [("handler", 3), ("ignore", 0)] {
        let (o, v) = live_run_on(&dir, "qemu", None, &["./trapper", how]);
        assert!(
            stdout(&o).contains(&format!("handled={handled}")),
            "{how}: {}",
            stdout(&o)
        );
        // 119-120 and 252-253 here.
        assert!(traps_in(&v, "second ") >= 50, "{how}: {}", v["pairs"]);
        assert!(traps_in(&v, "first ") >= 50, "{how}: {}", v["pairs"]);
    }
}

/// Maps 16 MiB of anonymous memory 100 times and at once maps a shared file over it (at the
/// same address, MAP_FIXED), reads and unmaps that; then maps 64 MiB, writes its first word,
/// runs a loop of its own for a while, writes every word and sums one of each page. Prints
/// the sum and whether the
/// file's modification time stayed (a write fault on its pages, even one that changes no
/// byte, as `MADV_POPULATE_WRITE`'s, moves it on ext4).
const REMAPPER: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int main(void) {
    size_t len = 16 << 20;
    int fd = open("shared.bin", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, len) != 0) return 1;
    struct stat before, after;
    fstat(fd, &before);
    sleep(1); /* a write now would move the time by a second or more */
    long sum = 0;
    for (int i = 0; i < 100; i++) {
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 2;
        p[0] = 1;
        char *q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        if (q != p) return 3;
        for (size_t o = 0; o < len; o += 4096) sum += q[o];
        munmap(q, len);
    }
    size_t big = 64 << 20;
    long *a = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return 4;
    a[0] = 0;
    volatile long x = 0;
    for (long i = 0; i < 20000000; i++) x += i;
    for (size_t i = 0; i < big / sizeof(long); i++) a[i] = (long)i;
    for (size_t i = 0; i < big / sizeof(long); i += 512) sum += a[i];
    fstat(fd, &after);
    printf("sum=%ld same_time=%d\n", sum,
           before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
               before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
    return 0;
}
"#;

#[test]
fn live_rdx_touches_large_new_memory_first_and_never_memory_given_another_use() {
    if !have("qemu-x86_64", "live RDX under QEMU") {
        return;
    }
    let dir = temp_dir("reuse-live-prefault");
    build_c(&dir, "remapper", REMAPPER, &["-O1", "-g"]);
    let mut accesses = Vec::new();
    for flags in [&[][..], &["--no-prefault"][..]] {
        let (o, v) = live_run_with(&dir, "qemu", None, flags, &["./remapper"], &[]);
        // The program's own answers: its 64 MiB summed, and the shared file not written to
        // where its range had been anonymous memory a moment before.
        let want_sum: i64 = (0..(64i64 << 20) / 8).step_by(512).sum();
        assert_eq!(
            stdout(&o).trim(),
            format!("sum={want_sum} same_time=1"),
            "{flags:?}"
        );
        let pages = v["prefaulted_pages"].as_u64();
        let notes = v["notes"].to_string();
        if flags.is_empty() {
            // The 64 MiB (16384 pages): its first window while the program's loop runs, the
            // others ahead of its writes, front to back (the 16 MiB maps are unmapped before
            // the helper sees a touch, or just after).
            let pages = pages.expect("prefaulted_pages");
            assert!(pages >= 8192, "{pages} pages: {notes}");
            assert!(
                notes.contains("touched first by a helper thread"),
                "{notes}"
            );
        } else {
            assert_eq!(pages, None, "{notes}");
        }
        accesses.push(v["accesses"].as_u64().unwrap());
    }
    // The program's accesses are the same, counted inline, whoever touched its pages first.
    assert_eq!(accesses[0], accesses[1]);
}

#[test]
fn live_rdx_keeps_sampling_when_the_program_closes_every_descriptor() {
    if !have("qemu-x86_64", "live RDX under QEMU") {
        return;
    }
    let dir = temp_dir("reuse-live-fdclose");
    // The events file and the watchpoints' perf descriptors share the program's table: a
    // program that closes every descriptor (one by one, with close_range) or puts its own
    // file under every number, halfway through its run, must neither lose them for the
    // second half nor get events written into its file.
    let prog = app("fdclose");
    let mut accesses = Vec::new();
    for how in ["none", "loop", "range", "dup2"] {
        let how_arg = format!("--how={how}");
        let program = [prog.as_str(), "--out=out.txt", &how_arg, "--reps=200"];
        let (o, v) = live_run_on(&dir, "qemu", None, &program);
        let notes = v["notes"].to_string();
        assert!(!notes.contains("error"), "{how}: {notes}");
        assert_eq!(
            std::fs::read(dir.join("out.txt")).unwrap(),
            fdclose_expected(&stdout(&o), how),
            "{how}"
        );
        // The second half is sampled and its reuses trapped, as the first half's.
        assert!(traps_in(&v, "after ") >= 10, "{how}: {}", v["pairs"]);
        assert!(traps_in(&v, "before ") >= 10, "{how}: {}", v["pairs"]);
        if how == "range" {
            assert!(notes.contains("took descriptors 3 to"), "{notes}");
        }
        accesses.push(v["accesses"].as_f64().unwrap());
    }
    // Counted through it all: as many as the run that closes nothing (26 M accesses), plus
    // the calls' own (dup2's 60000 calls are 2.7% more). A run whose counting stopped at the
    // close would hold half.
    for (a, how) in accesses
        .iter()
        .zip(["none", "loop", "range", "dup2"])
        .skip(1)
    {
        let r = a / accesses[0];
        assert!((0.999..1.04).contains(&r), "{how}: {accesses:?}");
    }
}

#[test]
fn live_rdx_of_a_program_that_execs_says_where_it_left_qemu() {
    if !have("qemu-x86_64", "live RDX of a shell that execs") {
        return;
    }
    let dir = temp_dir("reuse-live-exec");
    // The shell forks a child that execs /bin/true (not the measured process: its events
    // stay out), then replaces itself with /bin/true, which QEMU runs natively.
    let script = "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; /bin/true; exec /bin/true";
    let v = live_json_on(&dir, "qemu", Some("4096"), &["/bin/sh", "-c", script]);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("the program replaced itself with /bin/true (execve) at access"),
        "{notes}"
    );
    assert!(!notes.contains("did not exit normally"), "{notes}");
    // The child that ran /bin/true is not measured, and the report says so.
    assert!(
        notes.contains("the program started 1 child process(es) (fork)"),
        "{notes}"
    );
    assert!(
        v["words"]["samples"].as_u64().unwrap() > 100,
        "{}",
        v["words"]
    );
}

/// Each guest thread is sampled with its own access count and registers, as per-thread
/// hardware would: a reuse is the same thread's next touch, timed in its own accesses. The
/// trace-driven run over a full trace of the same program does the same per thread, with
/// exact per-thread histograms to compare against.
#[test]
fn live_rdx_follows_every_thread_like_the_trace() {
    if !have("qemu-x86_64", "live RDX of a threaded program") {
        return;
    }
    let dir = temp_dir("reuse-live-threads");
    // Twice: and with the workers started with every signal blocked, as thread pools often
    // are (Debian's xz): QEMU gives the host thread the guest's mask, which blocked the
    // watchpoints' SIGTRAP (before, xz -T2 ran 259 s where it now runs 3.4 s, trapping into
    // the kernel at every touch of a watched word).
    let mut traps = Vec::new();
    for sigblock in ["--sigblock=0", "--sigblock=1"] {
        let program = [
            app("spmv"),
            "--rows=4096".to_string(),
            "--nnz=16".to_string(),
            "--iters=8".to_string(),
            "--threads=2".to_string(),
            sigblock.to_string(),
        ];
        let args: Vec<&str> = program.iter().map(String::as_str).collect();
        capture(&dir, "spmv2.mgbt", &args);
        let exact = reuse_json(&dir, &["--rdx", "spmv2.mgbt", "--period", "2048"]);
        // The table says how the threads' reuse times were converted: where no thread has
        // phases, pooled in groups of threads with alike reuse times (README, "Threads that
        // differ": all together, or the main thread, which only fills the matrix, apart),
        // else each over its own run.
        let o = mgbench(&["reuse", "--rdx", "spmv2.mgbt", "--period", "2048"], &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        let table = stdout(&o);
        let (w, threads) = (&exact["words"], &exact["threads"]);
        let how = match (w["phases"].as_u64(), w["thread_groups"].as_u64()) {
            (Some(1), Some(1)) => format!("{threads} threads' reuse times together as one phase"),
            (Some(1), Some(k)) => format!("in {k} groups of the {threads} threads"),
            (Some(p), None) if p > 1 => "phase by phase".to_string(),
            _ => panic!("{sigblock}: phases and thread_groups disagree: {w}"),
        };
        assert!(table.contains(&how), "{sigblock}: want {how:?} in {table}");
        // At a period under 2^17 every access is counted in callbacks, per thread.
        let v = live_json(&dir, "2048", &args);
        assert_eq!(v["threads"], exact["threads"], "{sigblock}: {}", v["notes"]);
        assert!(v["threads"].as_u64().unwrap() >= 3, "main and two workers");
        assert_counts_like_the_trace(&v, &exact, sigblock);
        let notes = v["notes"].to_string();
        assert!(notes.contains("threads: each was sampled"), "{notes}");
        let w = &v["words"];
        assert!(w["samples"].as_u64().unwrap() > 500, "{sigblock}: {w}");
        traps.push(w["traps"].as_f64().unwrap());
        // The time histogram, timed in each thread's own accesses, against the exact one,
        // over 4 seeds: one run's S is 0.81-0.96 here (12 runs of this build and of the one
        // before the change, with no other load), lower alongside the rest of the suite (0.77
        // once), as the threads' interleaving changes which accesses are sampled; its peak
        // bin 0.34-0.65. (The converted stack histogram can move the x vector's reuses a bin
        // when its few uses without reuse weigh much: scripts/rdx-accuracy.py measures it
        // over seeds.)
        let want = stack(&exact, "exact_time");
        let mut got = stack(&v, "time");
        for seed in ["2", "3", "4"] {
            let mut a = vec!["reuse", "--quiet", "--backend", "qemu", "--period", "2048"];
            a.extend(["--seed", seed, "-o", "seed.json", "--"]);
            a.extend(args.iter().copied());
            let o = mgbench(&a, &dir);
            assert!(o.status.success(), "{}", stderr(&o));
            let more: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join("seed.json")).unwrap()).unwrap();
            for (g, x) in got.iter_mut().zip(stack(&more, "time")) {
                *g += x;
            }
        }
        got.iter_mut().for_each(|g| *g /= 4.0);
        let s = accuracy_s(&want, &got);
        assert!(
            s >= 0.85,
            "{sigblock}: live time S {s} (4 seeds): {got:?} vs exact {want:?}"
        );
        // Each worker reuses its part of x about 100 K of its own accesses apart (64K-128K);
        // counted in both workers' accesses, the other's in between, they would lie further.
        let (peak, beyond) = (got[5], got[6..].iter().sum::<f64>());
        assert!(
            want[5] > 0.3 && peak > 0.3 && beyond < 0.05,
            "{sigblock}: live time bins {got:?} vs exact {want:?}"
        );
    }
    // The blocked workers' registers trap as the others' do (here 166-185 traps either way;
    // 24 with blocked workers before, 780 of 868 samples finding every register armed).
    assert!(
        traps[1] > 0.5 * traps[0],
        "traps with unblocked and blocked workers: {traps:?}"
    );
}

/// Switched in place (QEMU 7.2), each thread counts inline with a counter of its own between
/// samples (periods of 2^17 and more): the run's count matches a full trace's, and each
/// worker's reuses of its part of x come out in its own accesses, as the trace-driven run
/// over the same program's trace has them (had one thread's counter held another's accesses,
/// or a new thread run with its creator's counter, they would lie further apart).
#[test]
fn live_rdx_counts_each_thread_inline_with_its_own_counter() {
    if !have("qemu-x86_64", "live RDX of a threaded program") {
        return;
    }
    let dir = temp_dir("reuse-live-threads-inline");
    let program = [
        app("spmv"),
        "--rows=16384".to_string(),
        "--nnz=16".to_string(),
        "--iters=64".to_string(),
        "--threads=2".to_string(),
    ];
    let args: Vec<&str> = program.iter().map(String::as_str).collect();
    capture(&dir, "spmv2.mgbt", &args);
    let period = "262144";
    let exact = reuse_json(&dir, &["--rdx", "spmv2.mgbt", "--period", period]);
    let want = stack(&exact, "exact_time");
    // Three seeds: about 150 samples each (0.92-0.93 alone here, 0.958 together).
    let mut got = vec![0.0; want.len()];
    for seed in ["1", "2", "3"] {
        let mut a = vec!["reuse", "--quiet", "--backend", "qemu", "--period", period];
        a.extend(["--seed", seed, "-f", "json", "-o", "live.json", "--"]);
        a.extend(args.iter().copied());
        let o = mgbench(&a, &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("live.json")).unwrap()).unwrap();
        assert_eq!(
            v["threads"], exact["threads"],
            "seed {seed}: {}",
            v["notes"]
        );
        assert_counts_like_the_trace(&v, &exact, seed);
        assert!(
            v["words"]["samples"].as_u64().unwrap() > 100,
            "{}",
            v["words"]
        );
        for (g, x) in got.iter_mut().zip(stack(&v, "time")) {
            *g += x / 3.0;
        }
    }
    let s = accuracy_s(&want, &got);
    assert!(
        s >= 0.85,
        "live time S {s} (3 seeds): {got:?} vs exact {want:?}"
    );
    // The peak: x's reuses in each worker's own accesses.
    let peak = (0..want.len())
        .max_by(|&a, &b| want[a].total_cmp(&want[b]))
        .unwrap();
    let beyond = got[peak + 1..].iter().sum::<f64>();
    assert!(
        want[peak] > 0.4 && got[peak] > 0.4 && beyond < 0.05,
        "live time bins {got:?} vs exact {want:?}"
    );
}

/// The native path (the library preloaded into the program, as RDX runs) with the page-fault
/// software event standing in for the PMU, which this machine lacks: the sampler's signal,
/// its ring buffer, watchpoints armed from the handler, their traps, the events file and the
/// report all run for real. Each sampled fault's address is touched again right away (the
/// faulting instruction is retried), so nearly every sample traps.
#[test]
fn native_live_rdx_runs_its_sampler_and_watchpoints_in_the_program() {
    let dir = temp_dir("reuse-native");
    let gups = app("gups");
    // A 32 MiB table: 8192 first touches, one page fault each.
    let v = live_json_on(
        &dir,
        "page-faults",
        Some("64"),
        &[&gups, "--log2size=22", "--updates=100000"],
    );
    assert_eq!(v["live"], true);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("self-test") && notes.contains("main thread only"),
        "{notes}"
    );
    let faults = v["accesses"].as_u64().unwrap();
    assert!(faults >= 8192, "{faults} page faults counted");
    let (samples, traps) = (
        v["words"]["samples"].as_u64().unwrap(),
        v["words"]["traps"].as_u64().unwrap(),
    );
    assert!(
        samples >= 60 && samples <= faults / 32,
        "{samples} samples of {faults} faults at period 64"
    );
    assert!(
        traps * 10 >= samples * 9,
        "{traps} traps of {samples} samples"
    );
    let pair = &v["pairs"][0];
    assert!(
        pair["use_source"].as_str().unwrap_or("").contains("gups.c"),
        "{pair}"
    );
    // Without a PMU, asking for it is an error that says what to do.
    if mgbench_capture::backend::pmu_address_sampling().is_none() {
        let o = mgbench(&["reuse", "--backend", "pmu", "--", &gups], &dir);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("no PMU") && e.contains("--backend qemu"), "{e}");
    }
    // A program that ends with _exit runs no destructors (dash does so): the library's own
    // _exit logs the end. A vfork child's _exit, sharing the parent's memory, leaves the
    // parent's run alone.
    build_c(
        &dir,
        "exits",
        "#include <stdlib.h>\n#include <unistd.h>\n#include <sys/wait.h>\n\
         int main(void) { char *p = malloc(1 << 24); int st;\n\
         for (int i = 0; i < (1 << 24); i += 4096) p[i] = 1;\n\
         if (vfork() == 0) _exit(7);\n\
         wait(&st); _exit(WEXITSTATUS(st) == 7 ? 0 : 1); }\n",
        &["-O1"],
    );
    let v = live_json_on(&dir, "page-faults", Some("16"), &["./exits"]);
    let notes = v["notes"].to_string();
    assert!(!notes.contains("did not exit normally"), "{notes}");
    let samples = v["words"]["samples"].as_u64().unwrap();
    assert!(samples >= 100, "{samples} samples of 4096 page faults");
    // A statically linked program ignores LD_PRELOAD: named, with the way out.
    build_c(
        &dir,
        "static-prog",
        "int main(void) { return 0; }\n",
        &["-static"],
    );
    let o = mgbench(
        &["reuse", "--backend", "page-faults", "--", "./static-prog"],
        &dir,
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("static-prog") && e.contains("LD_PRELOAD") && e.contains("--backend qemu"),
        "{e}"
    );
}

/// Natively the sampled uses keep debug registers armed nearly the whole run, and where an
/// armed register slows string instructions (an AMD EPYC: `rep stosb` of 4 KiB 30-36x
/// slower, memcpy of 64 KiB from 96 to 4 GB/s) mgbench tells the program's glibc to copy and
/// clear without them, keeping the user's own tunables, and says so. mgbench times the CPU
/// itself before each run; where this test's own timing is near the bound (within 1.5x of
/// it either way) either choice is right, as long as the note says what was done.
#[test]
fn native_live_rdx_keeps_glibc_off_string_instructions_an_armed_register_slows() {
    let dir = temp_dir("reuse-native-strings");
    let (plain, armed) = mgbench_capture::backend::string_ops_under_watchpoint()
        .expect("perf breakpoints on this thread (as native live RDX needs)");
    let bound = mgbench_capture::native_rdx::SLOWED_STRINGS;
    let ratio = armed / plain.max(1.0);
    let expected = if ratio >= 1.5 * bound {
        Some(true)
    } else if ratio <= bound / 1.5 {
        Some(false)
    } else {
        None
    };
    let tunables = |env: &[(&str, &str)]| {
        let (o, v) = live_run_with(&dir, "page-faults", None, &[], &["/usr/bin/env"], env);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let seen = stdout
            .lines()
            .find_map(|l| l.strip_prefix("GLIBC_TUNABLES="))
            .map(str::to_string);
        (seen, v["notes"].to_string())
    };
    let max = i64::MAX;
    let both =
        format!("glibc.cpu.x86_rep_movsb_threshold={max}:glibc.cpu.x86_rep_stosb_threshold={max}");
    let (seen, notes) = tunables(&[]);
    let set = seen.is_some();
    if let Some(slowed) = expected {
        assert_eq!(
            set, slowed,
            "this CPU's rep stosb: {plain:.0} ns, armed {armed:.0} ns ({ratio:.1}x); bound {bound}x; GLIBC_TUNABLES={seen:?}"
        );
    }
    if set {
        assert_eq!(seen.as_deref(), Some(both.as_str()));
        assert!(
            notes.contains("string instructions run") && notes.contains("set them yourself"),
            "{notes}"
        );
    } else {
        assert!(!notes.contains("string instructions"), "{notes}");
    }
    // The user's own tunables stay, and a threshold they set wins.
    let own = "glibc.malloc.check=0:glibc.cpu.x86_rep_movsb_threshold=4096";
    let (seen, notes) = tunables(&[("GLIBC_TUNABLES", own)]);
    let added = format!("{own}:glibc.cpu.x86_rep_stosb_threshold={max}");
    let set = notes.contains("string instructions run");
    if let Some(slowed) = expected {
        assert_eq!(set, slowed, "{notes}");
    }
    let want = if set { added.as_str() } else { own };
    assert_eq!(seen.as_deref(), Some(want));
}

#[test]
fn the_conversion_follows_a_program_that_builds_then_walks() {
    if !have("qemu-x86_64", "RDX over a captured demo") {
        return;
    }
    // A shuffled list written in one order and walked in another: taken as one phase, the
    // model reads the long build-to-walk windows by the walk's short reuses (S about 0.67 on
    // this run); phase by phase it gets them right.
    let dir = temp_dir("reuse-phases");
    capture(
        &dir,
        "chase.mgbt",
        &[&app("ptrchase"), "--shuffle=1", "--n=20000"],
    );
    let v = reuse_json(&dir, &["--rdx", "chase.mgbt", "-o", "chase.json"]);
    for unit in ["words", "lines"] {
        assert!(
            v[unit]["exact_phases"].as_u64().unwrap() > 8,
            "{unit}: {}",
            v[unit]
        );
        assert!(v[unit]["phases"].as_u64().unwrap() >= 1, "{unit}");
        assert!(s(&v, unit, "conversion") > 0.98, "{unit}: {}", v[unit]);
    }
    let o = mgbench(&["reuse", "--quiet", "--rdx", "chase.mgbt"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("the exact times over 64 phase(s)"), "{text}");
}

#[test]
fn a_histogram_resting_on_few_effective_samples_says_so() {
    if !have("qemu-x86_64", "RDX's effective samples on a captured demo") {
        return;
    }
    let dir = temp_dir("reuse-effective");
    // 1 access in 10 goes to a random word of a 1 M-word cold array: its reuses come millions
    // of accesses apart, and the few samples that survive that long in 4 registers carry
    // Horvitz-Thompson weights of hundreds (seeds 1-3: 6 effective samples of 1000).
    capture(
        &dir,
        "hc.mgbt",
        &[&app("hotcold"), "--cold=1000000", "--n=2000000"],
    );
    let v = reuse_json(&dir, &["--rdx", "hc.mgbt", "--no-exact", "-o", "hc.json"]);
    let w = &v["words"];
    let eff = w["effective_samples"].as_f64().unwrap();
    let samples = w["samples"].as_u64().unwrap();
    assert!(samples > 900, "{w}");
    assert!(eff > 1.0 && eff < 25.0, "{eff} effective of {samples}");
    let note = note_starting(&v, "words: the histograms rest on about")
        .unwrap_or_else(|| panic!("no note on the effective samples: {}", v["notes"]));
    assert!(note.contains(&format!("of {samples}")), "{note}");
    // Nor a spread, which would look steadier than the run is.
    assert!(note.contains("no range is given"), "{note}");
    assert!(w["spread"].is_null(), "{w}");
    // With every trap counted once, each use is one effective sample: the traps and the
    // uses still watched at the end, and no note.
    let one = reuse_json(
        &dir,
        &["--rdx", "hc.mgbt", "--no-exact", "--attribution", "one"],
    );
    for unit in ["words", "lines"] {
        let g = &one[unit];
        let uses = g["traps"].as_f64().unwrap() + g["no_reuse"].as_f64().unwrap();
        assert!(
            (g["effective_samples"].as_f64().unwrap() - uses).abs() < 1e-6,
            "{unit}: {g}"
        );
        // So is each use without reuse, on which the distinct estimate rests.
        let last = g["no_reuse_effective"].as_f64().unwrap();
        assert!(
            (last - g["no_reuse"].as_f64().unwrap()).abs() < 1e-6,
            "{unit}: {g}"
        );
    }
    assert!(
        !one["notes"].to_string().contains("effective samples"),
        "{}",
        one["notes"]
    );
    // The table says it on the samples line.
    let o = mgbench(
        &["reuse", "--quiet", "--rdx", "hc.mgbt", "--no-exact"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(" effective), "), "{}", stdout(&o));
    // Hotcold's million cold words are last used about once each, but few of the samples
    // that stood for them survived (1-2 effective): the distinct estimate says what it rests
    // on, as rough, or as the floor the longest reuse gives when that is higher (which of
    // the two depends on the layout QEMU gives the run).
    let words = stdout(&o)
        .lines()
        .find(|l| l.starts_with("words:"))
        .unwrap()
        .to_owned();
    assert!(
        (words.contains("estimated (rough: it rests on")
            || words.contains("estimated (the locations the window of the longest reuse holds;"))
            && words.contains("effective uses without reuse"),
        "{words}"
    );
    // So does the HTML report's RDX section.
    let o = mgbench(&["report", "hc.json", "-o", "hc.html"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(dir.join("hc.html")).unwrap();
    assert!(
        html.contains(&format!("{samples} samples ({:.0} effective)", eff)),
        "no effective samples in the report's RDX section"
    );
}

#[test]
fn live_rdx_with_inline_counting_samples_every_instruction_of_a_loop() {
    if !have("qemu-x86_64", "live RDX under QEMU") {
        return;
    }
    let dir = temp_dir("reuse-live-switched");
    // A period of 2^19 is counted inline between samples (switched sampling), so each sample
    // comes due while generated code runs. RDX's Listing 2 loop reads big[i] (reused a sweep,
    // 750000 accesses, later) and reads and writes acc[i & 7] (reused 2 and 22 accesses
    // later): a third of the reuses are long. Taking the first access after the switch would
    // sample the same instruction every time (it did: none of 970 samples fell on big[i]).
    let v = live_json(&dir, "524288", &[&app("attribution"), "--reps=80"]);
    let w = &v["words"];
    // 60.3 M accesses: 115 samples at the nominal period; the poller's lateness takes some
    // (93-109 on an idle machine, 80 with a build running on both cores).
    assert!(w["samples"].as_u64().unwrap() > 50, "{w}");
    let pairs = v["pairs"].as_array().unwrap();
    let long: f64 = pairs
        .iter()
        .filter(|p| p["mean_time"].as_f64().is_some_and(|t| t > 500_000.0))
        .map(|p| p["weight"].as_f64().unwrap())
        .sum();
    let all: f64 = pairs
        .iter()
        .filter(|p| !p["mean_time"].is_null())
        .map(|p| p["weight"].as_f64().unwrap())
        .sum();
    assert!(
        long / all > 0.15 && long / all < 0.55,
        "long reuses are {:.2} of the sampled ones (exact 1/3): {pairs:?}",
        long / all
    );
    // A small loop: few blocks to translate again after each switch, no cost note.
    assert!(
        !v["notes"].to_string().contains("QEMU translated"),
        "{}",
        v["notes"]
    );
}

#[test]
fn live_rdx_on_a_program_with_much_code_says_what_its_samples_cost() {
    if !have("qemu-x86_64", "live RDX under QEMU") || !have("gzip", "live RDX on gzip") {
        return;
    }
    let dir = temp_dir("reuse-live-gzip");
    // 4 MB of seeded pseudo-text (a vocabulary of 5000 words): Debian's gzip translates about
    // 175 blocks again after each sample at a period of 2^20 (the demo kernels 13-101).
    let mut rng = 1u64;
    let mut next = || {
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let letters = b"etaoinshrdlucmfw";
    let vocab: Vec<String> = (0..5000)
        .map(|_| {
            let len = 2 + next() % 8;
            (0..len)
                .map(|_| letters[(next() % 16) as usize] as char)
                .collect()
        })
        .collect();
    let mut text = String::new();
    while text.len() < 4_000_000 {
        text.push_str(&vocab[(next() % 5000) as usize]);
        text.push(if next() % 12 == 0 { '\n' } else { ' ' });
    }
    std::fs::write(dir.join("t.txt"), &text).unwrap();
    let live = |switch: &str| {
        let gzip = ["gzip", "-6", "-c", "t.txt"];
        let env = [("MGBENCH_QEMU_SWITCH", switch)];
        let (_, v) = live_run_with(&dir, "qemu", Some("1048576"), &[], &gzip, &env);
        let samples = v["words"]["samples"].as_u64().unwrap();
        assert!(samples > 100, "{switch}: {}", v["words"]);
        v
    };
    // QEMU 7.2 keeps both sets of translations: after the first switches nothing is
    // translated again, and no cost note.
    let v = live("keyed");
    assert!(
        !v["notes"].to_string().contains("QEMU translated"),
        "{}",
        v["notes"]
    );
    // Switched by flushes (another QEMU), each sample translates the hot code again.
    let v = live("flush");
    let notes = v["notes"].to_string();
    let note = note_starting(&v, "live: QEMU translated")
        .unwrap_or_else(|| panic!("no retranslation note: {notes}"));
    let per: f64 = note
        .split("about ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap();
    assert!(per >= 150.0 && note.contains("--period"), "{note}");
}

/// A program QEMU cannot run to the end (AVX-512, which TCG lacks): the live run keeps the
/// program's SIGILL as its status, reports what it measured before, and says what would
/// run it: a ptrace capture where this CPU has AVX-512, a machine with it where it has not.
#[test]
fn live_rdx_of_a_program_that_dies_of_sigill_says_what_would_run_it() {
    if !have("qemu-x86_64", "live RDX of an AVX-512 program") {
        return;
    }
    let dir = temp_dir("reuse-live-sigill");
    let o = mgbench(
        &[
            "reuse",
            "--quiet",
            "--backend",
            "qemu",
            "-o",
            "live.json",
            "--",
            &app("gather512"),
        ],
        &dir,
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(128 + 4), "{e}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("live.json")).unwrap()).unwrap();
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("killed by SIGILL (QEMU's TCG lacks AVX-512"),
        "{notes}"
    );
    if crate::capture::cpu_has("avx512f") {
        assert!(
            notes.contains("mgbench capture --backend ptrace --full"),
            "{notes}"
        );
    } else {
        assert!(notes.contains("and so does this CPU"), "{notes}");
        assert!(notes.contains("on a machine with AVX-512"), "{notes}");
    }
}

/// Code a program maps from a file and unmaps again before it ends (here a library it opens
/// with `dlopen` after the first sample and closes with `dlclose`; `node` maps a copy of its
/// own code the same way) is in neither the mappings of the first sample nor those of the
/// end: the plugin logs the mappings of each such `mmap`, so the pairs name its functions.
#[test]
fn live_rdx_names_code_of_a_library_closed_before_the_end() {
    if !have("qemu-x86_64", "live RDX of a program that closes a library")
        || !have("gcc", "live RDX of a program that closes a library")
    {
        return;
    }
    let dir = temp_dir("reuse-live-dlclose");
    crate::capture::build_gather_library(&dir);
    build_c(
        &dir,
        "m",
        r#"#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef long (*gather_fn)(const long *, const int *, int);
int main(void) {
  int n = 1 << 16;
  long *t = malloc(8 * n); int *idx = malloc(4 * n);
  for (int i = 0; i < n; i++) { t[i] = i; idx[i] = (int)(((long)i * 7919) % n); }
  void *h = dlopen("./libk.so", RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  gather_fn g = (gather_fn)dlsym(h, "lib_gather");
  long s = 0;
  for (int r = 0; r < 40; r++) s += g(t, idx, n);
  if (dlclose(h) != 0) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  printf("%ld\n", s);
  return 0;
}
"#,
        &["-O2"],
    );
    let (o, v) = live_run_on(&dir, "qemu", None, &["./m"]);
    assert_eq!(stdout(&o).trim(), (40u64 * 65535 * 65536 / 2).to_string());
    let pairs = v["pairs"].as_array().unwrap();
    let named = |f: &str| {
        pairs
            .iter()
            .filter(|p| p["use_source"].as_str().unwrap().contains(f))
            .map(|p| p["weight"].as_f64().unwrap())
            .sum::<f64>()
    };
    // Nearly every access is the gather's: so are the pairs, by name.
    assert!(named("lib_gather") > 0.5 * named(""), "{pairs:#?}");
}
