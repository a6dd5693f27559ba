//! `mgbench capture`, `trace info|dump` and `import` as users run them, on the demo programs.
//! Tests that need QEMU or Valgrind say so (see common::have).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mgbench_capture::symbols::{ElfImage, Symbolizer};
use mgbench_capture::trace::{AccessKind, Chunk, EndInfo, Frame, Mapping, TraceReader};

use crate::common::{
    app, apps, build_c, fdclose_expected, have, mgbench, mgbench_json, read_indices, stderr,
    stdout, temp_dir,
};

/// Everything in a trace.
struct Trace {
    chunks: Vec<Chunk>,
    mappings: Vec<Mapping>,
    end: Option<EndInfo>,
    damaged: bool,
    notes: Vec<String>,
}

fn read_trace(path: &Path) -> Trace {
    let f = std::fs::File::open(path).unwrap();
    let mut r = TraceReader::open(std::io::BufReader::new(f)).unwrap();
    let mut t = Trace {
        chunks: vec![],
        mappings: vec![],
        end: None,
        damaged: false,
        notes: vec![],
    };
    while let Some(frame) = r.next_frame().unwrap() {
        match frame {
            Frame::Chunk(c) => t.chunks.push(c),
            Frame::Mappings(m) => t.mappings.extend(m),
            Frame::End(e) => t.end = Some(e),
            Frame::Note(n) => t.notes.push(n),
            Frame::JitSymbols(_) => {}
        }
    }
    t.damaged = r.damage().is_some();
    t
}

/// The `x=0x...` address the SpMV demo prints.
fn x_base(out: &str) -> u64 {
    let hex = out.split("x=0x").nth(1).expect("spmv prints x=").trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn need_qemu(what: &str) -> bool {
    have("qemu-x86_64", what)
}

#[test]
fn full_capture_of_spmv_records_the_exact_gather_addresses() {
    if !need_qemu("full capture of SpMV") {
        return;
    }
    let dir = temp_dir("spmv-full");
    let (rows, nnz, iters) = (512u64, 4u64, 3u64);
    let o = mgbench(
        &[
            "capture",
            "--full",
            "-o",
            "t.mgbt",
            &app("spmv"),
            &format!("--rows={rows}"),
            &format!("--nnz={nnz}"),
            &format!("--iters={iters}"),
            "--truth=cols.txt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let x = x_base(&stdout(&o));
    let cols = read_indices(&dir.join("cols.txt"));
    assert_eq!(cols.len() as u64, rows * nnz);
    let t = read_trace(&dir.join("t.mgbt"));
    assert!(!t.damaged);
    assert_eq!(t.end.as_ref().unwrap().exit_code, Some(0));
    let gathers: Vec<(u64, u64)> = t
        .chunks
        .iter()
        .flat_map(|c| c.accesses.iter())
        .filter(|a| a.kind == AccessKind::Load && a.addr >= x && a.addr < x + 8 * rows)
        .map(|a| (a.ip, a.addr))
        .collect();
    let want: Vec<u64> = (0..iters)
        .flat_map(|_| cols.iter().map(|&c| x + 8 * c))
        .collect();
    let got: Vec<u64> = gathers.iter().map(|g| g.1).collect();
    assert_eq!(got, want, "gather addresses in program order");
    let ips: std::collections::BTreeSet<u64> = gathers.iter().map(|g| g.0).collect();
    assert_eq!(ips.len(), 1, "one gather instruction");
    let mut sym = Symbolizer::new(t.mappings.clone());
    let loc = sym.resolve(*ips.iter().next().unwrap());
    assert_eq!(loc.function.as_deref(), Some("spmv_rows"));
    assert!(loc.file.unwrap().ends_with("spmv.c"));
    // trace info agrees and says where the gather is.
    let v = mgbench_json(&["trace", "info", "t.mgbt", "--format", "json"], &dir);
    for key in [
        "accesses", "loads", "stores", "samples", "threads", "backend", "mode",
    ] {
        assert!(v.get(key).is_some(), "trace info JSON lacks {key}");
    }
    assert_eq!(v["backend"], "qemu");
    assert_eq!(v["mode"], "full");
    assert_eq!(v["sample_ratio"], 1.0);
    assert!(v["bytes_per_access"].as_f64().unwrap() < 4.0);
    assert!(v["top_instructions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["function"] == "spmv_rows" && i["loads"] == iters * rows * nnz));
}

/// Runs `prog args` under Valgrind's lackey in `dir` and imports its log as `dir/lk.mgbt`.
fn lackey_trace(dir: &Path, prog: &str, args: &[&str]) {
    let lk = Command::new("valgrind")
        .args([
            "--tool=lackey",
            "--trace-mem=yes",
            "--log-file=lackey.txt",
            prog,
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(lk.status.success(), "{}", stderr(&lk));
    let o = mgbench(
        &["import", "--from", "lackey", "lackey.txt", "-o", "lk.mgbt"],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn per_instruction_counts_agree_with_valgrind_lackey() {
    if !need_qemu("the lackey comparison") || !have("valgrind", "the lackey comparison") {
        return;
    }
    let dir = temp_dir("lackey");
    let prog = apps().join("nopie/histogram").display().to_string();
    let args = ["--n=3000", "--bins=512", "--iters=2"];
    lackey_trace(&dir, &prog, &args);
    let mut cap = vec!["capture", "--full", "-o", "q.mgbt", prog.as_str()];
    cap.extend(args);
    let o = mgbench(&cap, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    // Compare the program's own code (libraries load at different places under each tool).
    let img = ElfImage::open(Path::new(&prog)).unwrap();
    let lo = img.functions.iter().map(|f| f.start).min().unwrap();
    let hi = img
        .functions
        .iter()
        .map(|f| f.start + f.size)
        .max()
        .unwrap();
    let counts = |p: &str| {
        let mut c: BTreeMap<(u64, &'static str), u64> = BTreeMap::new();
        for ch in read_trace(&dir.join(p)).chunks {
            for a in ch.accesses.iter().filter(|a| a.ip >= lo && a.ip < hi) {
                *c.entry((a.ip, a.kind.as_str())).or_default() += 1;
            }
        }
        c
    };
    let (lackey, qemu) = (counts("lk.mgbt"), counts("q.mgbt"));
    assert!(lackey.len() > 20, "{} instructions", lackey.len());
    assert_eq!(qemu, lackey, "per-instruction load/store counts differ");
}

#[test]
fn sampled_traces_hold_the_configured_windows_and_skips() {
    if !need_qemu("sampled capture") {
        return;
    }
    let dir = temp_dir("sampled");
    let o = mgbench(
        &[
            "capture",
            "--sample-window",
            "100",
            "--sample-period",
            "1000",
            "-o",
            "s.mgbt",
            &app("spmv"),
            "--rows=2048",
            "--iters=6",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_trace(&dir.join("s.mgbt"));
    // Merge sample parts split across chunks (same id), per thread.
    let mut samples: BTreeMap<(u32, u64), (u64, u64)> = BTreeMap::new();
    for c in &t.chunks {
        assert!(c.is_consistent());
        for s in &c.samples {
            let e = samples
                .entry((c.thread, s.id))
                .or_insert((s.skipped_before, 0));
            e.1 += u64::from(s.len);
        }
    }
    let main: Vec<(u64, u64)> = samples
        .iter()
        .filter(|((t, _), _)| *t == 0)
        .map(|(_, &v)| v)
        .collect();
    assert!(main.len() > 100, "{} samples", main.len());
    assert!(
        main[0].0 <= 900,
        "the first sample starts within the first period: after {} accesses",
        main[0].0
    );
    for (k, &(skip, len)) in main.iter().enumerate() {
        if k + 1 < main.len() {
            assert_eq!(len, 100, "sample {k} length");
        }
        if k > 0 {
            assert_eq!(skip, 900, "sample {k} skipped");
        }
    }
    let o = mgbench(&["trace", "info", "s.mgbt", "-f", "json"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mode"], "sampled");
    assert_eq!(
        (v["window"].as_u64(), v["period"].as_u64()),
        (Some(100), Some(1000))
    );
    let ratio = v["sample_ratio"].as_f64().unwrap();
    assert!((ratio - 10.0).abs() < 0.1, "sample ratio {ratio}");
}

/// Per thread, the (ip, store) of every access of a full trace, in order.
fn streams(t: &Trace) -> BTreeMap<u32, Vec<(u64, bool)>> {
    let mut s: BTreeMap<u32, Vec<(u64, bool)>> = BTreeMap::new();
    for c in &t.chunks {
        let v = s.entry(c.thread).or_default();
        v.extend(
            c.accesses
                .iter()
                .map(|a| (a.ip, a.kind == AccessKind::Store)),
        );
    }
    s
}

/// Checks a sampled trace against a full trace of the same deterministic run: each window of
/// each thread, placed by the skipped counts before it, holds the very accesses (instruction
/// and kind) the full trace has there; recorded + skipped is also the full trace's total (for
/// one thread exactly; threads make a run's total vary by a few accesses: joins, futexes).
/// Returns the windows per thread.
fn assert_skips_exact(full: &Trace, sampled: &Trace) -> BTreeMap<u32, usize> {
    assert_skips_exact_but(full, sampled, 0)
}

/// [`assert_skips_exact`] where the skips after the last window may be up to `rest` too long
/// (one thread): a block counted inline adds its accesses when it starts, and a crash inside
/// it leaves the rest of the block counted.
fn assert_skips_exact_but(full: &Trace, sampled: &Trace, rest: u64) -> BTreeMap<u32, usize> {
    let all = streams(full);
    let mut pos: BTreeMap<u32, usize> = BTreeMap::new();
    let mut windows: BTreeMap<u32, usize> = BTreeMap::new();
    let mut last_id: BTreeMap<u32, u64> = BTreeMap::new();
    for c in &sampled.chunks {
        let stream = &all[&c.thread];
        let p = pos.entry(c.thread).or_default();
        let mut at = 0;
        for s in &c.samples {
            if last_id.insert(c.thread, s.id) != Some(s.id) {
                *windows.entry(c.thread).or_default() += 1;
            }
            *p += s.skipped_before as usize;
            let got: Vec<(u64, bool)> = c.accesses[at..at + s.len as usize]
                .iter()
                .map(|a| (a.ip, a.kind == AccessKind::Store))
                .collect();
            assert!(
                *p + got.len() <= stream.len(),
                "thread {} sample {} ends at {} of {} accesses",
                c.thread,
                s.id,
                *p + got.len(),
                stream.len()
            );
            assert!(
                got == stream[*p..*p + got.len()],
                "thread {} sample {} at access {}: not the accesses the full trace has there",
                c.thread,
                s.id,
                *p
            );
            *p += got.len();
            at += s.len as usize;
        }
    }
    let (fe, se) = (full.end.as_ref().unwrap(), sampled.end.as_ref().unwrap());
    if all.len() == 1 {
        let total = se.recorded + se.skipped;
        assert!(
            (fe.recorded..=fe.recorded + rest).contains(&total),
            "recorded + skipped {total}, the full trace {} (+ at most {rest})",
            fe.recorded
        );
    } else {
        // Within a few accesses (here 25-26 of 805 M): a thread that exits while it counts
        // inline is credited what its counter holds (a lost credit would be a whole skip).
        let total = se.recorded + se.skipped;
        assert!(
            total.abs_diff(fe.recorded) < 1000,
            "recorded + skipped {total}, the full trace {}",
            fe.recorded
        );
    }
    windows
}

/// `mgbench capture --backend qemu -o OUT HOW... COMMAND...` in `dir`, switching sampling by
/// `switch` (`MGBENCH_QEMU_SWITCH`), Python's hash seed fixed; the trace it wrote.
fn qemu_capture(dir: &Path, how: &[&str], out: &str, switch: &str, command: &[&str]) -> Trace {
    let mut a = vec!["capture", "--backend", "qemu", "-o", out];
    a.extend(how);
    a.extend(command);
    let o = Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args(&a)
        .current_dir(dir)
        .env("PYTHONHASHSEED", "0")
        // The same variable in every run: the guest sees it in its environment.
        .env("MGBENCH_QEMU_SWITCH", switch)
        .output()
        .unwrap();
    assert!(o.status.success(), "{command:?}: {}", stderr(&o));
    read_trace(&dir.join(out))
}

#[test]
fn switched_sampling_counts_every_skipped_access_exactly() {
    if !need_qemu("switched sampling") {
        return;
    }
    let dir = temp_dir("switched");
    // Skips of 2^18 and more are counted inline, windows switched in by retranslation.
    let short: &[&str] = &["--sample-window", "1024", "--sample-period", "263168"];
    let cases: [(&str, &[&str], &[&str]); 3] = [
        // (Long enough for several windows when the suite's other tests load both CPUs:
        // the switch lands when the poller looks, 21-24 windows of a possible 40 at
        // --reps=80 with no other load, 3 once under the suite's.)
        ("gather", &["--reps=200"], short),
        // Debian's Python, not one of the demos (-P: it lists its own directories, not the
        // test's, so both runs do the same; hash seed fixed below). Its libc locks make
        // accesses in QEMU's helpers, which reach the memory callbacks through the
        // instruction's own registration: each instruction keeps its own inline add.
        (
            "/usr/bin/python3",
            &["-P", "-c", "print(sum(i * i for i in range(300000)))"],
            &["--sample-period", "524288"],
        ),
        // Two workers: they take turns with the counter (switched in place), or count in
        // callbacks once the first one starts (where switches flush).
        (
            "spmv",
            &["--rows=16384", "--nnz=16", "--iters=8", "--threads=2"],
            short,
        ),
    ];
    for (prog, args, sampling) in cases {
        let app = if prog.starts_with('/') {
            prog.to_string()
        } else {
            app(prog)
        };
        let mut command = vec![app.as_str()];
        command.extend(args);
        let capture =
            |how: &[&str], out: &str, switch: &str| qemu_capture(&dir, how, out, switch, &command);
        let full = capture(&["--full"], "full.mgbt", "keyed");
        // Switched in place (QEMU 7.2 keeps both sets of translations) and by flushes.
        for switch in ["keyed", "flush"] {
            let sampled = capture(sampling, "s.mgbt", switch);
            let windows = assert_skips_exact(&full, &sampled);
            let total: usize = windows.values().sum();
            assert!(total >= 5, "{prog} ({switch}): {windows:?} windows");
            if prog == "spmv" {
                assert_eq!(
                    windows.len(),
                    3,
                    "{prog}: {windows:?} (main and two workers)"
                );
            }
            let (switches, in_place) = switches_in(&sampled.notes);
            assert!(switches >= 2, "{prog} ({switch}): {:?}", sampled.notes);
            if switch == "flush" {
                assert_eq!(in_place, 0, "{prog}: {:?}", sampled.notes);
            } else {
                // With threads too: one at a time holds the counter, in its own set.
                assert_eq!(in_place, switches, "{prog}: {:?}", sampled.notes);
                eprintln!("{prog}: {switches} switches, windows {windows:?}");
            }
        }
    }
}

/// SSE and AVX loads and stores of 16 and 32 bytes (intrinsics), 8-byte scalar loads, and
/// scalar FMAs with an 8- and a 4-byte memory operand (which QEMU 7.2 loads as 16 bytes).
const VECTOR_C: &str = r#"
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#define N 4096
static double a[N] __attribute__((aligned(32))), b[N] __attribute__((aligned(32))),
    c[N] __attribute__((aligned(32)));
static float f[N];
int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 1;
    for (int i = 0; i < N; i++) {
        b[i] = i;
        c[i] = 2 * i;
        f[i] = 0.25f * i;
    }
    double s = 0;
    float t = 0;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < N; i += 4) {
            __m256d x = _mm256_load_pd(&b[i]), y = _mm256_loadu_pd(&c[i]);
            _mm256_store_pd(&a[i], _mm256_add_pd(x, y));
        }
        for (int i = 0; i < N; i += 2) {
            __m128d x = _mm_load_pd(&a[i]);
            _mm_storeu_pd(&c[i], _mm_mul_pd(x, _mm_set1_pd(0.5)));
            s += b[i];
        }
        for (int i = 0; i < N; i++) {
            s = __builtin_fma(s, 0.5, b[i]);
            t = __builtin_fmaf(f[i], 0.5f, t);
        }
    }
    printf("%f %f\n", s, t);
    return 0;
}
"#;

#[test]
fn vector_accesses_are_recorded_whole_and_their_skips_counted_exactly() {
    if !need_qemu("vector accesses") || !have("valgrind", "the lackey comparison") {
        return;
    }
    let dir = temp_dir("vector");
    build_c(
        &dir,
        "vector",
        VECTOR_C,
        &["-O1", "-g", "-mavx2", "-mfma", "-no-pie"],
    );
    let prog = dir.join("vector").display().to_string();
    // QEMU performs a 16- or 32-byte access as 8-byte pieces; the trace holds one access of
    // the instruction's width, as Valgrind's lackey does, instruction by instruction.
    lackey_trace(&dir, &prog, &["2"]);
    let o = mgbench(&["capture", "--full", "-o", "q.mgbt", &prog, "2"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let main = func_range(&prog, "main");
    let (lackey, qemu) = (
        instruction_counts(&dir.join("lk.mgbt"), main),
        instruction_counts(&dir.join("q.mgbt"), main),
    );
    assert_eq!(
        qemu, lackey,
        "per-instruction load/store counts and sizes differ"
    );
    let of_size = |n: u8| {
        qemu.iter()
            .filter(|(k, _)| k.2 == n)
            .map(|(_, v)| v)
            .sum::<u64>()
    };
    // Per rep: 1024 x (two 32-byte loads, a 32-byte store), 2048 x (16-byte load and store).
    assert_eq!(of_size(32), 2 * 3 * 1024);
    assert_eq!(of_size(16), 2 * 2 * 2048);
    // The scalar loads, and the FMAs' 8- and 4-byte operands, each one access (QEMU 7.2
    // loads 16 bytes for each: its two 8-byte pieces were two accesses, one of them beyond
    // the operand).
    assert!(of_size(8) >= 2 * (2048 + 4096), "the scalar loads");
    assert!(of_size(4) >= 2 * 4096, "the float FMA's operand");
    // Sampled, with skips counted by generated code: a vector instruction's pieces count one
    // access there too, exactly what the full trace has. (1000 repetitions, 17.6 M accesses:
    // about 67 periods, so that windows the loaded poller opens late still number 5.)
    let run = |how: &[&str], out: &str, switch: &str| {
        qemu_capture(&dir, how, out, switch, &[prog.as_str(), "1000"])
    };
    let full = run(&["--full"], "full.mgbt", "keyed");
    for switch in ["keyed", "flush"] {
        let sampled = run(
            &["--sample-window", "1024", "--sample-period", "263168"],
            "s.mgbt",
            switch,
        );
        let windows: usize = assert_skips_exact(&full, &sampled).values().sum();
        assert!(windows >= 5, "{switch}: {windows} windows");
        let (switches, _) = switches_in(&sampled.notes);
        assert!(switches >= 2, "{switch}: {:?}", sampled.notes);
    }
}

/// Accesses of a trace per (instruction, kind, size), of the instructions in [lo, hi).
fn instruction_counts(
    trace: &Path,
    (lo, hi): (u64, u64),
) -> BTreeMap<(u64, &'static str, u8), u64> {
    let mut c = BTreeMap::new();
    for ch in read_trace(trace).chunks {
        for a in ch.accesses.iter().filter(|a| a.ip >= lo && a.ip < hi) {
            *c.entry((a.ip, a.kind.as_str(), a.size)).or_default() += 1;
        }
    }
    c
}

/// Locked read-modify-writes (and `xchg`, locked without a prefix); with a second argument
/// the program first maps a page shared, after which QEMU runs it as if it had threads.
const ATOMIC_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
static long v;
static int w;
int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && mmap(0, 4096, PROT_READ, MAP_SHARED | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
        return 1;
    for (int i = 0; i < reps; i++) {
        __atomic_fetch_add(&v, 1, __ATOMIC_SEQ_CST);
        long e = v;
        __atomic_compare_exchange_n(&v, &e, e + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        e = v + 1;
        __atomic_compare_exchange_n(&v, &e, e + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        __atomic_exchange_n(&w, i, __ATOMIC_SEQ_CST);
        w += __atomic_fetch_add(&w, 3, __ATOMIC_SEQ_CST);
        __atomic_fetch_or(&v, 1L << (i & 31), __ATOMIC_SEQ_CST);
    }
    printf("%ld %d\n", v, w);
    return 0;
}
"#;

#[test]
fn atomic_read_modify_writes_are_a_load_and_a_store_serial_or_parallel() {
    if !need_qemu("atomic read-modify-writes") {
        return;
    }
    let dir = temp_dir("atomic");
    build_c(&dir, "atomic", ATOMIC_C, &["-O1", "-g", "-no-pie"]);
    let prog = dir.join("atomic").display().to_string();
    let main = func_range(&prog, "main");
    // ptrace records each locked instruction as a load and a store of its address. So does
    // QEMU while it runs the program serially; run in parallel (here from the shared
    // mapping on), QEMU performs it as one access that both loads and stores, which the
    // plugin records as its load and its store.
    for shared in [&[][..], &["shared"][..]] {
        let counts = |backend: &str| {
            let mut a = vec![
                "capture",
                "--backend",
                backend,
                "--full",
                "-o",
                "t.mgbt",
                &prog,
                "100",
            ];
            a.extend(shared);
            let o = mgbench(&a, &dir);
            assert!(o.status.success(), "{}", stderr(&o));
            instruction_counts(&dir.join("t.mgbt"), main)
        };
        let ptrace = counts("ptrace");
        // lock add, 2 x lock cmpxchg, xchg, lock xadd, lock or: a load and a store each.
        let locked = ptrace
            .iter()
            .filter(|(k, &n)| k.1 == "store" && n == 100)
            .count();
        assert!(locked >= 6, "{ptrace:?}");
        assert_eq!(
            counts("qemu"),
            ptrace,
            "{shared:?}: per-instruction load/store counts differ from ptrace's"
        );
        // Counted inline, such an instruction counts its load and store in both ways. (16 M
        // accesses, about 60 periods: 300000 repetitions, 18 periods, gave 4 windows with
        // flushes while CI's build loaded both CPUs, the poller's looks delayed.)
        let mut command = vec![prog.as_str(), "1000000"];
        command.extend(shared);
        let full = qemu_capture(&dir, &["--full"], "full.mgbt", "keyed", &command);
        for switch in ["keyed", "flush"] {
            let sampled = qemu_capture(
                &dir,
                &["--sample-window", "1024", "--sample-period", "263168"],
                "s.mgbt",
                switch,
                &command,
            );
            let windows: usize = assert_skips_exact(&full, &sampled).values().sum();
            assert!(windows >= 5, "{shared:?} {switch}: {windows} windows");
        }
    }
}

#[test]
fn threads_that_exit_while_others_start_keep_their_counts() {
    if !need_qemu("switched sampling with thread churn") {
        return;
    }
    let dir = temp_dir("churn");
    // 24 workers started one after another; earlier ones exit (counting inline: skips of
    // 2^18) while later ones are created, and new threads take exited threads' vCPUs. Before
    // exiting threads left their counting sets at their `exit`, an exit during a clone made
    // QEMU give the new thread the exiting one's set: its accesses went to a counter nobody
    // was credited with (4.9-12.3 M of 118 M lost in 3 runs of 6).
    let args = ["--threads=24", "--reps=600"];
    let capture = |how: &[&str], out: &str| {
        let mut a = vec!["capture", "--backend", "qemu", "-o", out];
        a.extend(how);
        let prog = app("churn");
        a.push(&prog);
        a.extend(args);
        let o = mgbench(&a, &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        // QEMU's trace log stays off: the events that key a thread's set of translations
        // include the system call events, which printed a line each on the guest's stderr.
        assert!(!stderr(&o).contains("guest_user_syscall"), "{}", stderr(&o));
        // Threads are not child processes.
        assert!(!stderr(&o).contains("child process"), "{}", stderr(&o));
        let t = read_trace(&dir.join(out));
        assert_thread_summary(&stderr(&o), &t, 25);
        t
    };
    let full = capture(&["--full"], "full.mgbt");
    assert_eq!(streams(&full).len(), 25, "main and 24 workers");
    for _ in 0..3 {
        let sampled = capture(
            &["--sample-window", "1024", "--sample-period", "263168"],
            "s.mgbt",
        );
        let windows = assert_skips_exact(&full, &sampled);
        let (switches, in_place) = switches_in(&sampled.notes);
        assert_eq!(in_place, switches, "{:?}", sampled.notes);
        eprintln!("churn: {switches} switches, windows {windows:?}");
    }
    // Short workers at a long period: most run in no window, and the summary says how many
    // of the threads that ran the trace holds.
    let prog = app("churn");
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "qemu",
            "--sample-window",
            "1024",
            "--sample-period",
            "263168",
            "-o",
            "few.mgbt",
            &prog,
            "--threads=4",
            "--reps=20",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_trace(&dir.join("few.mgbt"));
    assert!(streams(&t).len() < 5, "{}", stderr(&o));
    assert_thread_summary(&stderr(&o), &t, 5);
}

/// The capture summary names the threads that ran and, where some ran in no sample window,
/// how many of them the trace holds (as `trace info` and the analyses count them).
fn assert_thread_summary(stderr: &str, t: &Trace, ran: usize) {
    let held = streams(t).len();
    let said = if held < ran {
        format!("from {held} of {ran} thread(s)")
    } else {
        format!("in {ran} thread(s)")
    };
    assert!(stderr.contains(&said), "{said}: {stderr}");
}

/// The switches of a sampled capture and how many of them were made in place, from the
/// plugin's note ("switched sampling: N switches of instrumentation (M in place, ...").
fn switches_in(notes: &[String]) -> (u64, u64) {
    let note = notes
        .iter()
        .find_map(|n| n.split("switched sampling: ").nth(1))
        .unwrap_or_else(|| panic!("no switched-sampling note: {notes:?}"));
    let num = |s: &str| s.split(' ').next().unwrap().parse::<u64>().unwrap();
    let in_place = note.split('(').nth(1).expect("(M in place)");
    (num(note), num(in_place))
}

/// Link-time range of a function of a non-PIE demo.
fn func_range(prog: &str, name: &str) -> (u64, u64) {
    let img = ElfImage::open(Path::new(prog)).unwrap();
    let f = img.find_function(name).unwrap()[0].clone();
    (f.start, f.start + f.size)
}

/// Accesses of a trace by where their instructions come from: (function, source line).
fn by_source(t: &Trace) -> HashMap<(String, u32), u64> {
    let mut sym = Symbolizer::new(t.mappings.clone());
    let mut out = HashMap::new();
    for a in t.chunks.iter().flat_map(|c| c.accesses.iter()) {
        let loc = sym.resolve(a.ip);
        *out.entry((loc.function_or_object(), loc.line.unwrap_or(0)))
            .or_insert(0) += 1;
    }
    out
}

/// `--roi` of a function that `-O2` inlined everywhere (a `static` function called once has
/// no symbol at all; mgbench said "no function named"): its copies are found in DWARF, as
/// gdb finds them for a breakpoint. Inclusive: the copies and what they call (`touch`);
/// exclusive: the copies alone; the caller's own code in neither. By source line, the
/// counts equal a full capture's, with QEMU and with ptrace (which runs natively until the
/// caller's entry).
#[test]
fn roi_finds_the_copies_the_compiler_inlined() {
    if !need_qemu("ROI of an inlined function") {
        return;
    }
    const SRC: &str = r#"#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long touch(const long *p) { return p[1] * 3; }
static long gather(const long *t, const int *idx, int n) {
  long s = 0;
  for (int i = 0; i < n; i++)
    s += t[idx[i]];
  return s + touch(t);
}
int main(int argc, char **argv) {
  int n = 1000 + argc;
  long *t = malloc(8 * n);
  int *idx = malloc(4 * n);
  for (int i = 0; i < n; i++) { t[i] = i; idx[i] = (int)(((long)i * i * 31 + i * 7) % n); }
  long s = 0;
  for (int r = 0; r < 3; r++) s += gather(t, idx, n);
  printf("%ld\n", s);
  return 0;
}
"#;
    let dir = temp_dir("roi-inlined");
    build_c(&dir, "inl", SRC, &["-O2", "-g"]);
    let img = ElfImage::open(&dir.join("inl")).unwrap();
    assert!(img.find_function("gather").is_err(), "gcc kept gather");
    let code = img.find_code("gather").unwrap();
    assert!(
        code.entries.is_empty() && !code.inlined.is_empty(),
        "{code:?}"
    );
    assert!(code
        .inlined
        .iter()
        .all(|c| c.caller.as_ref().is_some_and(|f| f.name() == "main")));
    let line = |needle: &str| SRC.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1;
    let (gather_line, init_line) = (line("s += t[idx[i]]"), line("idx[i] = "));
    let at_line = |m: &HashMap<(String, u32), u64>, l: u32| -> u64 {
        m.iter()
            .filter(|((_, ml), _)| *ml == l)
            .map(|(_, n)| n)
            .sum()
    };
    let in_touch = |m: &HashMap<(String, u32), u64>| -> u64 {
        m.iter()
            .filter(|((f, _), _)| f == "touch")
            .map(|(_, n)| n)
            .sum()
    };
    let capture = |file: &str, extra: &[&str]| {
        let mut args = vec!["capture", "-q", "--full", "-o", file];
        args.extend_from_slice(extra);
        args.push("./inl");
        let o = mgbench(&args, &dir);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        if extra.contains(&"--roi") {
            assert!(
                stderr(&o).contains("--roi gather: inlined into main"),
                "{}",
                stderr(&o)
            );
        }
        by_source(&read_trace(&dir.join(file)))
    };
    // (The program's own functions, for messages.)
    let own = |m: &HashMap<(String, u32), u64>| -> BTreeMap<(String, u32), u64> {
        m.iter()
            .filter(|((f, _), _)| f == "main" || f == "touch")
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    };
    let full = capture("full.mgbt", &[]);
    let n = 1001u64;
    assert_eq!(at_line(&full, gather_line), 3 * 2 * n);
    // (gcc calls the pure `touch` once, before the loop, from the inlined copy.)
    assert!(in_touch(&full) > 0, "{:?}", own(&full));
    assert!(at_line(&full, init_line) > 0);
    for (extra, inclusive) in [
        (&["--roi", "gather"][..], true),
        (&["--roi", "gather", "--roi-exclusive"][..], false),
        (&["--backend", "ptrace", "--roi", "gather"][..], true),
        (
            &["--backend", "ptrace", "--roi", "gather", "--roi-exclusive"][..],
            false,
        ),
    ] {
        let roi = capture("roi.mgbt", extra);
        assert_eq!(at_line(&roi, gather_line), 3 * 2 * n, "{extra:?}");
        // Inclusive: all of touch's but the `ret` that closes the ROI, which is not
        // recorded (as a ROI function's own closing `ret` is not).
        let touch = if inclusive { in_touch(&full) - 1 } else { 0 };
        assert_eq!(in_touch(&roi), touch, "{extra:?}: {:?}", own(&roi));
        assert_eq!(at_line(&roi, init_line), 0, "{extra:?}");
        // Nothing of main's own but the copies' lines and (inclusive) the call's push.
        let outside: u64 = roi
            .iter()
            .filter(|((f, l), _)| {
                f == "main" && !(line("static long gather")..=line("return s + touch")).contains(l)
            })
            .map(|(_, n)| n)
            .sum();
        assert_eq!(outside, 0, "{extra:?}: {:?}", own(&roi));
    }
    // Where they come from: the inlined function, in the function that holds it, and synth
    // names the pattern after the function whose line it is.
    let t = read_trace(&dir.join("full.mgbt"));
    let mut sym = Symbolizer::new(t.mappings.clone());
    let hot = t
        .chunks
        .iter()
        .flat_map(|c| c.accesses.iter())
        .map(|a| sym.resolve(a.ip))
        .find(|l| l.line == Some(gather_line))
        .unwrap();
    assert_eq!(hot.function.as_deref(), Some("main"), "{hot:?}");
    assert_eq!(hot.inlined.as_deref(), Some("gather"), "{hot:?}");
    assert!(
        hot.describe()
            .starts_with("gather, inlined in main (inl.c:"),
        "{hot:?}"
    );
    let o = mgbench(
        &[
            "synth",
            "full.mgbt",
            "-o",
            "p.json",
            "--min-instances",
            "100",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let pats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("p.json")).unwrap()).unwrap();
    let p = pats
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["source"]["line"] == gather_line)
        .unwrap_or_else(|| panic!("no pattern at line {gather_line}: {}", stderr(&o)));
    assert_eq!(p["name"], format!("gather:{gather_line}-gather"));
    assert_eq!(p["source"]["function"], "main");
    assert_eq!(p["source"]["inlined"], "gather");
}

/// Fortran as gdb takes it: a module procedure answers to `spmv` and `kernels::spmv`
/// (gfortran names it `__kernels_MOD_spmv`), an external one to `scale` (`scale_`), and the
/// body of an OpenMP parallel region, outlined as `__kernels_MOD_spmv._omp_fn.0`, is the
/// procedure's code on every thread of the team. By source line, the ROI holds what a full
/// capture holds there, from both threads; names read `kernels::spmv._omp_fn.0`.
#[test]
fn fortran_procedures_are_found_as_gdb_finds_them() {
    if !need_qemu("ROI of Fortran procedures") || !have("gfortran", "Fortran ROI") {
        return;
    }
    const SRC: &str = "module kernels
  implicit none
contains
  subroutine spmv(n, rowptr, col, val, x, y)
    integer, intent(in) :: n, rowptr(n+1), col(*)
    double precision, intent(in) :: val(*), x(n)
    double precision, intent(out) :: y(n)
    integer :: i, j
    double precision :: s
    !$omp parallel do private(j, s) schedule(static)
    do i = 1, n
      s = 0d0
      do j = rowptr(i), rowptr(i+1) - 1
        s = s + val(j) * x(col(j))
      end do
      y(i) = s
    end do
  end subroutine spmv
end module kernels

subroutine scale(n, a, y)
  integer, intent(in) :: n
  double precision, intent(in) :: a
  double precision, intent(inout) :: y(n)
  integer :: i
  do i = 1, n
    y(i) = a * y(i)
  end do
end subroutine scale

program main
  use kernels
  implicit none
  integer, parameter :: n = 2000, per = 4
  integer :: rowptr(n+1), col(n*per), i, k, it
  double precision :: val(n*per), x(n), y(n)
  do i = 1, n
    rowptr(i) = (i-1)*per + 1
    do k = 1, per
      col((i-1)*per + k) = 1 + mod((i * 7919 + k * 104729), n)
      val((i-1)*per + k) = 1d0 / k
    end do
    x(i) = i
  end do
  rowptr(n+1) = n*per + 1
  do it = 1, 3
    call spmv(n, rowptr, col, val, x, y)
    call scale(n, 0.5d0, y)
  end do
  print *, sum(y)
end program main
";
    let dir = temp_dir("fortran");
    std::fs::write(dir.join("k.f90"), SRC).unwrap();
    let o = Command::new("gfortran")
        .args(["-O2", "-g", "-fopenmp", "-o", "k", "k.f90"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let line = |needle: &str| SRC.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1;
    let spmv_lines = line("do j = rowptr(i)")..=line("y(i) = s");
    let scale_line = line("y(i) = a * y(i)");
    let capture = |file: &str, roi: Option<&str>| {
        let mut args = vec!["capture", "-q", "--full", "-o", file];
        if let Some(r) = roi {
            args.extend(["--roi", r]);
        }
        args.push("./k");
        let o = Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(&args)
            .env("OMP_NUM_THREADS", "2")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let t = read_trace(&dir.join(file));
        // Accesses by source line of k.f90, and the threads that made those of spmv.
        let mut sym = Symbolizer::new(t.mappings.clone());
        let mut lines: BTreeMap<u32, u64> = BTreeMap::new();
        let mut spmv_threads = std::collections::BTreeSet::new();
        let mut names = std::collections::BTreeSet::new();
        for c in &t.chunks {
            for a in &c.accesses {
                let loc = sym.resolve(a.ip);
                if !loc.file.as_deref().is_some_and(|f| f.ends_with("k.f90")) {
                    continue;
                }
                let l = loc.line.unwrap_or(0);
                *lines.entry(l).or_insert(0) += 1;
                if spmv_lines.contains(&l) {
                    spmv_threads.insert(c.thread);
                }
                names.insert(loc.function_or_object());
            }
        }
        (lines, spmv_threads, names)
    };
    let (full, _, _) = capture("full.mgbt", None);
    let sum = |m: &BTreeMap<u32, u64>, r: &std::ops::RangeInclusive<u32>| -> u64 {
        m.range(r.clone()).map(|(_, n)| n).sum()
    };
    // 3 calls x 2000 rows x (2 row pointers + 4 x (col, val, x) + 1 store), and the
    // outlined body's own saves and loads on each thread.
    let spmv_full = sum(&full, &spmv_lines);
    assert!((90_000..90_100).contains(&spmv_full), "{full:?}");
    for roi in ["spmv", "kernels::spmv", "__kernels_MOD_spmv"] {
        let (got, threads, names) = capture("spmv.mgbt", Some(roi));
        assert_eq!(
            sum(&got, &spmv_lines),
            sum(&full, &spmv_lines),
            "{roi}: {got:?}"
        );
        assert_eq!(got.get(&scale_line), None, "{roi}: {got:?}");
        assert_eq!(threads.len(), 2, "{roi}: both threads of the team");
        assert!(names.contains("kernels::spmv._omp_fn.0"), "{names:?}");
    }
    let (got, _, _) = capture("scale.mgbt", Some("scale"));
    // 3 calls x 2000 elements, a load and a store each, by gfortran's SSE2 loop: a 16-byte
    // load and store per two elements.
    assert_eq!(got.get(&scale_line), Some(&(3 * 2000 / 2 * 2)), "{got:?}");
    assert_eq!(sum(&got, &spmv_lines), 0, "{got:?}");
}

/// `libk.so` in `dir`: `lib_gather(t, idx, n)` sums `t[idx[i]]`, its loop on line 3.
pub(crate) fn build_gather_library(dir: &Path) {
    std::fs::write(
        dir.join("k.c"),
        "long lib_gather(const long *t, const int *idx, int n) {
  long s = 0;
  for (int i = 0; i < n; i++) s += t[idx[i]];
  return s;
}
",
    )
    .unwrap();
    let o = Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC", "-o", "libk.so", "k.c"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `m` in `dir` (linked with `link`): a C program that calls `lib_gather` (through `gather`,
/// after `setup`) three times on a table of 1001 elements and prints the sum.
fn build_gather_caller(dir: &Path, declarations: &str, setup: &str, gather: &str, link: &[&str]) {
    let source = format!(
        r#"#include <stdio.h>
#include <stdlib.h>
{declarations}
int main(int argc, char **argv) {{
  int n = 1000 + argc;
  long *t = malloc(8 * n); int *idx = malloc(4 * n);
  for (int i = 0; i < n; i++) {{ t[i] = i; idx[i] = (int)(((long)i * i * 31 + i * 7) % n); }}
{setup}  long s = 0;
  for (int r = 0; r < 3; r++) s += {gather}(t, idx, n);
  printf("%ld\n", s);
  return 0;
}}
"#
    );
    std::fs::write(dir.join("m.c"), source).unwrap();
    let o = Command::new("gcc")
        .args(["-O2", "-g", "-o", "m", "m.c"])
        .args(link)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `mgbench capture --full --roi lib_gather` of `./m` in `dir` into `l.mgbt`.
fn capture_lib_gather(dir: &Path, backend: &str, exclusive: bool) -> Output {
    let mut args = vec![
        "capture",
        "-q",
        "--full",
        "--backend",
        backend,
        "--roi",
        "lib_gather",
        "-o",
        "l.mgbt",
    ];
    if exclusive {
        args.push("--roi-exclusive");
    }
    args.push("./m");
    mgbench(&args, dir)
}

/// The trace holds `lib_gather` alone: its line 3 exactly the 3 calls x 2 x 1001 loads of
/// the test programs (an exclusive ROI also its 3 `ret`s; an inclusive one closes at them).
fn assert_only_lib_gather(trace: &Path, exclusive: bool, what: &str) {
    let by = by_source(&read_trace(trace));
    let gather: u64 = by
        .iter()
        .filter(|((f, l), _)| f == "lib_gather" && *l == 3)
        .map(|(_, n)| n)
        .sum();
    let rets = if exclusive { 3 } else { 0 };
    assert_eq!(gather, 3 * 2 * 1001 + rets, "{what}: {by:?}");
    assert!(by.keys().all(|(f, _)| f == "lib_gather"), "{what}: {by:?}");
}

/// `--roi` of a function the program imports: found in the shared library the dynamic loader
/// maps at start (`LOADER --list`, as ldd), and recorded once that library is mapped (it
/// said "no function named ... is the program stripped?"). QEMU inclusive and exclusive,
/// ptrace (waiting at the loader's `_dl_debug_state` for the library, then at the
/// function's): the gather's line holds exactly its 3 x 2 x 1001 loads (and the 3 `ret`s,
/// exclusive); a C library function works the same.
#[test]
fn roi_finds_a_function_in_a_shared_library() {
    if !need_qemu("ROI in a shared library") {
        return;
    }
    let dir = temp_dir("roi-lib");
    build_gather_library(&dir);
    // (The library after the source that uses it: Debian links --as-needed.)
    build_gather_caller(
        &dir,
        "long lib_gather(const long *t, const int *idx, int n);",
        "",
        "lib_gather",
        &["-L.", "-lk", "-Wl,-rpath,$ORIGIN"],
    );
    for extra in [
        &[][..],
        &["--roi-exclusive"][..],
        &["--backend", "ptrace"][..],
    ] {
        let mut args = vec![
            "capture",
            "-q",
            "--full",
            "--roi",
            "lib_gather",
            "-o",
            "l.mgbt",
        ];
        args.extend_from_slice(extra);
        args.push("./m");
        let o = mgbench(&args, &dir);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert!(
            stderr(&o)
                .contains("--roi lib_gather: in libk.so (a shared library the program loads)"),
            "{}",
            stderr(&o)
        );
        assert_only_lib_gather(
            &dir.join("l.mgbt"),
            extra.contains(&"--roi-exclusive"),
            &format!("{extra:?}"),
        );
    }
    // The C library's malloc, by its exported name.
    let o = mgbench(
        &[
            "capture", "-q", "--full", "--roi", "malloc", "-o", "c.mgbt", "./m",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--roi malloc: in libc.so.6"),
        "{}",
        stderr(&o)
    );
    let by = by_source(&read_trace(&dir.join("c.mgbt")));
    assert!(by.keys().any(|(f, _)| f == "malloc"), "{by:?}");
}

/// `--roi` of a library function that the library's constructor calls before the program's
/// entry: ptrace waited for the library at that entry and missed the call (QEMU did not);
/// it now waits at the loader's `_dl_debug_state`, called once the libraries are mapped and
/// before their constructors run. Both hold the constructor's 2 x 8 loads and the program's
/// 3 x 2 x 1001.
#[test]
fn roi_in_a_library_holds_its_constructors_calls() {
    if !need_qemu("ROI in a library constructor") {
        return;
    }
    let dir = temp_dir("roi-lib-ctor");
    std::fs::write(
        dir.join("k.c"),
        "long lib_gather(const long *t, const int *idx, int n) {
  long s = 0;
  for (int i = 0; i < n; i++) s += t[idx[i]];
  return s;
}
static long tt[8]; static int ii[8];
long warmed;
__attribute__((constructor)) static void warm(void) {
  for (int i = 0; i < 8; i++) { tt[i] = i; ii[i] = 7 - i; }
  warmed = lib_gather(tt, ii, 8);
}
",
    )
    .unwrap();
    let o = Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC", "-o", "libk.so", "k.c"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    build_gather_caller(
        &dir,
        "long lib_gather(const long *t, const int *idx, int n);",
        "",
        "lib_gather",
        &["-L.", "-lk", "-Wl,-rpath,$ORIGIN"],
    );
    for backend in ["qemu", "ptrace"] {
        let o = capture_lib_gather(&dir, backend, false);
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let by = by_source(&read_trace(&dir.join("l.mgbt")));
        let loads: u64 = by
            .iter()
            .filter(|((f, l), _)| f == "lib_gather" && *l == 3)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(loads, 2 * 8 + 3 * 2 * 1001, "{backend}: {by:?}");
    }
}

/// `--roi` of a function in a library the program opens with `dlopen` and calls through
/// `dlsym` (it said "no function named ... is the program stripped?"): QEMU (at the library's
/// mmap) and ptrace (stopped at the loader's `_dl_debug_state`), inclusive and exclusive,
/// hold exactly the gather's loads; a name no library has runs and warns.
#[test]
fn roi_finds_a_function_in_a_library_opened_with_dlopen() {
    if !need_qemu("ROI in a library opened with dlopen") {
        return;
    }
    let dir = temp_dir("roi-dlopen");
    build_gather_library(&dir);
    // The program names neither the library nor the function: it opens one and looks the
    // other up at run time.
    build_gather_caller(
        &dir,
        "#include <dlfcn.h>\ntypedef long (*gather_fn)(const long *, const int *, int);",
        r#"  void *h = dlopen("./libk.so", RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  gather_fn g = (gather_fn)dlsym(h, "lib_gather");
"#,
        "g",
        &[],
    );
    for (backend, exclusive) in [
        ("qemu", false),
        ("qemu", true),
        ("ptrace", false),
        ("ptrace", true),
    ] {
        let o = capture_lib_gather(&dir, backend, exclusive);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("it calls dlopen, so each library it opens is searched"),
            "{err}"
        );
        assert!(
            err.contains("--roi lib_gather: in libk.so (a library the program opened with dlopen)"),
            "{err}"
        );
        let trace = read_trace(&dir.join("l.mgbt"));
        assert!(
            trace
                .notes
                .iter()
                .any(|n| n.contains("in libk.so (a library the program opened")),
            "{backend}: {:?}",
            trace.notes
        );
        assert_only_lib_gather(&dir.join("l.mgbt"), exclusive, backend);
    }
    // A name no library has: the run goes on, and says so at the end.
    let o = mgbench(
        &[
            "capture",
            "-q",
            "--full",
            "--roi",
            "no_such_fn",
            "-o",
            "n.mgbt",
            "./m",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "--roi no_such_fn: no library the program opened with dlopen has a function of that name either"
        ),
        "{}",
        stderr(&o)
    );
}

/// `--roi` of a function in a library one thread opens with `dlopen` while another waits,
/// then calls: with ptrace the waiting thread ran natively with breakpoints set before the
/// library existed, so its calls went unrecorded (the trace was empty). Every thread waiting
/// for the ROI now gets the new function's breakpoint; QEMU and ptrace, inclusive and
/// exclusive, hold exactly the gather's loads.
#[test]
fn roi_opened_by_one_thread_is_recorded_in_another() {
    if !need_qemu("ROI in a library another thread opened") {
        return;
    }
    let dir = temp_dir("roi-dlopen-thread");
    build_gather_library(&dir);
    build_c(
        &dir,
        "m",
        r#"#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef long (*gather_fn)(const long *, const int *, int);
static gather_fn g;
static sem_t opened;
static long *t; static int *idx; static int n;
static long sum;
static void *worker(void *arg) {
  (void)arg;
  sem_wait(&opened);
  for (int r = 0; r < 3; r++) sum += g(t, idx, n);
  return 0;
}
int main(int argc, char **argv) {
  (void)argv;
  n = 1000 + argc;
  t = malloc(8 * n); idx = malloc(4 * n);
  for (int i = 0; i < n; i++) { t[i] = i; idx[i] = (int)(((long)i * i * 31 + i * 7) % n); }
  sem_init(&opened, 0, 0);
  pthread_t w;
  pthread_create(&w, 0, worker, 0);
  usleep(100000); /* the worker waits natively before the library exists */
  void *h = dlopen("./libk.so", RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  g = (gather_fn)dlsym(h, "lib_gather");
  sem_post(&opened);
  pthread_join(w, 0);
  printf("%ld\n", sum);
  return 0;
}
"#,
        &["-O2", "-g", "-pthread"],
    );
    for (backend, exclusive) in [("ptrace", false), ("ptrace", true), ("qemu", false)] {
        let o = capture_lib_gather(&dir, backend, exclusive);
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1447446");
        assert_only_lib_gather(
            &dir.join("l.mgbt"),
            exclusive,
            &format!("{backend} exclusive {exclusive}"),
        );
    }
}

/// `--roi` of a C function with an OpenMP parallel loop, built by clang: clang outlines the
/// loop as `.omp_outlined.`, a name that does not say where it came from, and the worker
/// threads run it from the OpenMP runtime, outside the function's call, so the ROI held the
/// calling thread's half of the loop alone (GCC's `compute._omp_fn.0` was always found by
/// name). The region is found where the function's code takes its address: by source line
/// the ROI holds what a full capture holds in the loop, from both threads, under QEMU and
/// ptrace, inclusive and exclusive.
/// Builds `dir/omp` with clang's OpenMP: `compute` (declared `decl compute(...)`) sums
/// `t[idx[i]]` in a parallel loop on line 6; `main` fills the arrays `reps` times, starts the
/// runtime's threads in a region of its own, then calls it.
fn build_clang_omp(dir: &Path, decl: &str, reps: u32) {
    let src = format!(
        r#"#include <stdio.h>
#include <stdlib.h>
{decl} compute(const long *t, const int *idx, int n) {{
  long s = 0;
#pragma omp parallel for reduction(+:s) schedule(static)
  for (int i = 0; i < n; i++) s += t[idx[i]];
  return s;
}}
int main(int argc, char **argv) {{
  (void)argv;
  int n = 4000 + argc;
  long *t = malloc(8 * n); int *idx = malloc(4 * n);
  for (int r = 0; r < {reps}; r++)
    for (int i = 0; i < n; i++) {{ t[i] = i + r; idx[i] = (int)(((long)i * 31 + 7 + r) % n); }}
  /* The runtime starts its threads at the first region: outside the ROI (under ptrace,
     stepping through that start took 18 s). */
#pragma omp parallel
  {{ if (n < 0) printf("-\n"); }}
  printf("%ld\n", compute(t, idx, n));
  return 0;
}}
"#
    );
    std::fs::write(dir.join("omp.c"), src).unwrap();
    let o = Command::new("clang")
        .args(["-O2", "-g", "-fopenmp", "-o", "omp", "omp.c"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "clang -fopenmp (scripts/setup.sh installs libomp-dev): {}",
        stderr(&o)
    );
}

#[test]
fn roi_holds_the_openmp_regions_clang_outlined() {
    if !need_qemu("ROI of a clang OpenMP function") || !have("clang", "clang OpenMP ROI") {
        return;
    }
    let dir = temp_dir("roi-clang-omp");
    build_clang_omp(&dir, "__attribute__((noinline)) long", 1);
    // The loop's line, per thread: (thread, line 6 accesses).
    let loop_line = |file: &str| -> (u64, usize) {
        let t = read_trace(&dir.join(file));
        let mut sym = Symbolizer::new(t.mappings.clone());
        let mut threads = std::collections::BTreeSet::new();
        let mut n = 0;
        for c in &t.chunks {
            for a in &c.accesses {
                let loc = sym.resolve(a.ip);
                if loc.file.as_deref().is_some_and(|f| f.ends_with("omp.c")) && loc.line == Some(6)
                {
                    n += 1;
                    threads.insert(c.thread);
                }
            }
        }
        (n, threads.len())
    };
    let run = |args: &[&str], out: &str| {
        let mut a = vec!["capture", "-q", "--full", "-o", out];
        a.extend_from_slice(args);
        a.push("./omp");
        let o = Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(&a)
            .env("OMP_NUM_THREADS", "2")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        o
    };
    run(&[], "full.mgbt");
    let (full, full_threads) = loop_line("full.mgbt");
    assert!(full >= 2 * 4001, "{full}");
    assert_eq!(full_threads, 2);
    for extra in [
        &[][..],
        &["--roi-exclusive"][..],
        &["--backend", "ptrace"][..],
        &["--backend", "ptrace", "--roi-exclusive"][..],
    ] {
        let mut args = vec!["--roi", "compute"];
        args.extend_from_slice(extra);
        let o = run(&args, "roi.mgbt");
        assert!(
            stderr(&o).contains(
                "--roi compute: with the OpenMP region(s) clang outlined from it (.omp_outlined."
            ),
            "{extra:?}: {}",
            stderr(&o)
        );
        assert_eq!(loop_line("roi.mgbt"), (full, 2), "{extra:?}");
    }
    // Later clang releases name the regions after their function (`compute.omp_outlined`):
    // the same object with its regions renamed so, linked again.
    let sh = |cmd: &str| {
        let o = Command::new("sh")
            .args(["-c", cmd])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        stdout(&o)
    };
    sh("clang -O2 -g -fopenmp -c -o omp.o omp.c");
    let renames: Vec<String> = sh("nm omp.o")
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|name| name.starts_with(".omp_outlined"))
        .map(|name| format!("--redefine-sym {name}=compute{name}"))
        .collect();
    assert!(!renames.is_empty());
    sh(&format!(
        "objcopy {} omp.o && clang -fopenmp -o omp omp.o && nm omp | grep -q compute.omp_outlined",
        renames.join(" ")
    ));
    run(&["--roi", "compute"], "renamed.mgbt");
    assert_eq!(
        loop_line("renamed.mgbt"),
        (full, 2),
        "regions named compute.omp_outlined"
    );
}

/// `--roi` of a function clang inlined into `main`, whose OpenMP region it outlined: ptrace
/// runs `main`'s own code natively, stopping where it enters the copy (stepping all of it
/// took 4 minutes for a program that runs in milliseconds), and records what QEMU does
/// there, the load after the runtime's call returns into the copy included.
#[test]
fn ptrace_roi_in_a_function_that_holds_a_copy_records_what_qemu_does() {
    if !need_qemu("ROI of an inlined function") || !have("clang", "clang OpenMP ROI") {
        return;
    }
    let dir = temp_dir("roi-container");
    build_clang_omp(&dir, "static long", 20);
    assert!(
        ElfImage::open(&dir.join("omp"))
            .unwrap()
            .find_function("compute")
            .is_err(),
        "clang kept compute"
    );
    // Accesses of the copy in main, and of the loop (line 6) per thread, by kind and line.
    let copy = |extra: &[&str]| -> BTreeMap<(String, u32), u64> {
        let mut a = vec![
            "capture", "-q", "--full", "-o", "roi.mgbt", "--roi", "compute",
        ];
        a.extend_from_slice(extra);
        a.push("./omp");
        let o = Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(&a)
            .env("OMP_NUM_THREADS", "2")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        let t = read_trace(&dir.join("roi.mgbt"));
        let mut sym = Symbolizer::new(t.mappings.clone());
        let mut out = BTreeMap::new();
        for c in &t.chunks {
            for a in &c.accesses {
                let loc = sym.resolve(a.ip);
                let line = loc.line.unwrap_or(0);
                let key = if loc.inlined.as_deref() == Some("compute") {
                    format!("{} in main", a.kind.as_str())
                } else if line == 6 && loc.file.as_deref().is_some_and(|f| f.ends_with("omp.c")) {
                    format!("{} in the loop, thread {}", a.kind.as_str(), c.thread)
                } else {
                    continue;
                };
                *out.entry((key, line)).or_insert(0) += 1;
            }
        }
        out
    };
    for extra in [&[][..], &["--roi-exclusive"][..]] {
        let qemu = copy(extra);
        assert!(
            qemu.keys().any(|k| k.0.ends_with("in main") && k.1 == 7),
            "{extra:?}: the load of the result after the region: {qemu:?}"
        );
        let mut ptrace = extra.to_vec();
        ptrace.extend(["--backend", "ptrace"]);
        assert_eq!(copy(&ptrace), qemu, "{extra:?}");
    }
}

#[test]
fn roi_keeps_only_the_named_function() {
    if !need_qemu("ROI capture") {
        return;
    }
    let dir = temp_dir("roi");
    let prog = apps().join("nopie/spmv").display().to_string();
    let ips = |file: &str| -> Vec<u64> {
        read_trace(&dir.join(file))
            .chunks
            .iter()
            .flat_map(|c| c.accesses.iter().map(|a| a.ip))
            .collect()
    };
    let run = |extra: &[&str], out: &str| {
        let mut a = vec!["capture", "--full", "-o", out];
        a.extend(extra);
        a.extend([prog.as_str(), "--rows=256", "--nnz=4", "--iters=2"]);
        let o = mgbench(&a, &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    let spmv_rows = func_range(&prog, "spmv_rows");
    let worker = func_range(&prog, "worker");
    // Exclusive: only the function's own instructions.
    run(&["--roi", "worker", "--roi-exclusive"], "ex.mgbt");
    let ex = ips("ex.mgbt");
    assert!(!ex.is_empty());
    assert!(ex.iter().all(|&ip| ip >= worker.0 && ip < worker.1));
    // ptrace runs worker's calls (spmv_rows, the C library's) natively, on breakpoints at
    // their returns, and records worker's own accesses exactly as QEMU does.
    run(
        &["--backend", "ptrace", "--roi", "worker", "--roi-exclusive"],
        "pex.mgbt",
    );
    let (mut q, mut p) = (ex.clone(), ips("pex.mgbt"));
    q.sort_unstable();
    p.sort_unstable();
    assert_eq!(p, q);
    // Inclusive: the callee spmv_rows counts, nothing outside the two functions does.
    run(&["--roi", "worker"], "in.mgbt");
    let inc = ips("in.mgbt");
    let in_rows = inc
        .iter()
        .filter(|&&ip| ip >= spmv_rows.0 && ip < spmv_rows.1)
        .count();
    assert!(in_rows >= 2 * 256 * 4 * 3, "{in_rows} spmv_rows accesses");
    assert!(inc
        .iter()
        .all(|&ip| (ip >= worker.0 && ip < worker.1) || (ip >= spmv_rows.0 && ip < spmv_rows.1)));
    // The PIE build resolves the same function at its load address.
    let o = mgbench(
        &[
            "capture",
            "--full",
            "--roi",
            "spmv_rows",
            "-o",
            "pie.mgbt",
            &app("spmv"),
            "--rows=256",
            "--nnz=4",
            "--iters=2",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_trace(&dir.join("pie.mgbt"));
    let mut sym = Symbolizer::new(t.mappings.clone());
    let n: usize = t.chunks.iter().map(|c| c.accesses.len()).sum();
    assert!(n >= 256 * 4 * 3 * 2);
    for c in &t.chunks {
        for a in &c.accesses {
            assert_eq!(sym.resolve(a.ip).function.as_deref(), Some("spmv_rows"));
        }
    }
    // ptrace, exclusive: threads run natively between the function's calls (hardware
    // breakpoints at its entry), and every call's accesses are there, as under QEMU.
    let counts = |file: &str| -> BTreeMap<u64, usize> {
        let mut m = BTreeMap::new();
        for ip in ips(file) {
            *m.entry(ip).or_insert(0) += 1;
        }
        m
    };
    run(&["--roi", "spmv_rows", "--roi-exclusive"], "qx.mgbt");
    run(
        &[
            "--backend",
            "ptrace",
            "--roi",
            "spmv_rows",
            "--roi-exclusive",
        ],
        "px.mgbt",
    );
    assert_eq!(counts("px.mgbt"), counts("qx.mgbt"));
}

/// `work` ends in a tail call to `helper` (its own code has no `ret`), and `via` enters it by
/// a tail jump after a store: the ROI `work` must end where `helper` returns for it.
const TAIL_CALLS: &str = r#"#include <stdio.h>
#include <stdlib.h>
volatile long sink;
__attribute__((noinline)) long helper(long *a, long n) { long s = 0; for (long i = 0; i < n; i++) s += a[i]; return s; }
__attribute__((noinline)) long work(long *a, long n) { a[0] += 1; return helper(a, n); }
__attribute__((noinline)) long via(long *a, long n) { sink = sink + 1; return work(a, n); }
int main(int argc, char **argv) {
  long reps = atol(argv[1]); long *a = calloc(64, sizeof *a); long t = 0;
  for (long r = 0; r < reps; r++) {
    t += work(a, 64);
    t += via(a, 64);
    for (long i = 0; i < 64; i++) a[i] += i;
  }
  printf("%ld\n", t);
  return 0;
}
"#;

#[test]
fn roi_ends_where_a_tail_called_function_returns() {
    if !need_qemu("ROI capture") {
        return;
    }
    let dir = temp_dir("roi-tail");
    build_c(&dir, "tail", TAIL_CALLS, &["-O2"]);
    // Before, the ROI counted returns inside `work`, which has none: it never ended, and
    // main's loop and everything after the first call went into the trace.
    for backend in ["qemu", "ptrace"] {
        let o = mgbench(
            &[
                "capture",
                "--backend",
                backend,
                "--full",
                "--roi",
                "work",
                "-o",
                "t.mgbt",
                "./tail",
                "100",
            ],
            &dir,
        );
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let t = read_trace(&dir.join("t.mgbt"));
        let mut sym = Symbolizer::new(t.mappings.clone());
        let mut per_function = std::collections::BTreeMap::<String, u64>::new();
        for a in t.chunks.iter().flat_map(|c| &c.accesses) {
            let f = sym.resolve(a.ip).function.unwrap_or_default();
            *per_function.entry(f).or_default() += 1;
        }
        // 200 entries (100 by call, 100 by tail jump): work's add (a load and a store) and
        // helper's 64 loads each; the ret that leaves the ROI is not recorded.
        let want: std::collections::BTreeMap<String, u64> =
            [("helper".to_string(), 200 * 64), ("work".to_string(), 400)].into();
        assert_eq!(per_function, want, "{backend}");
    }
    // Sampled (windows of 64 every 128 of the ROI's accesses): the ROI's accesses only.
    let o = mgbench(
        &[
            "capture",
            "--roi",
            "work",
            "--sample-window",
            "64",
            "--sample-period",
            "128",
            "-o",
            "s.mgbt",
            "./tail",
            "100",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s = read_trace(&dir.join("s.mgbt"));
    let recorded: u64 = s.chunks.iter().map(|c| c.accesses.len() as u64).sum();
    let skipped = s.end.as_ref().unwrap().skipped;
    assert_eq!(recorded + skipped, 200 * 64 + 400, "{recorded} + {skipped}");
}

#[test]
fn roi_errors_and_never_entered() {
    if !need_qemu("ROI capture") {
        return;
    }
    let dir = temp_dir("roi-bad");
    let o = mgbench(&["capture", "--roi", "spmv_row", &app("spmv")], &dir);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("no function named \"spmv_row\"") && e.contains("close matches: spmv_rows"),
        "{e}"
    );
    let o = mgbench(
        &[
            "capture",
            "--full",
            "--roi",
            "spmv_never_called",
            "-o",
            "n.mgbt",
            &app("spmv"),
            "--iters=1",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("was never entered"), "{}", stderr(&o));
    let t = read_trace(&dir.join("n.mgbt"));
    assert_eq!(t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>(), 0);
    assert_eq!(t.end.unwrap().exit_code, Some(0));
    // Sampled: the same warning, and no advice about "0 sample window(s)" of 0 accesses.
    let o = mgbench(
        &[
            "capture",
            "--roi",
            "spmv_never_called",
            "-o",
            "s.mgbt",
            &app("spmv"),
            "--iters=1",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("was never entered") && !e.contains("sample window"),
        "{e}"
    );
}

#[test]
fn threads_get_their_own_streams() {
    if !need_qemu("multi-threaded capture") {
        return;
    }
    let dir = temp_dir("threads");
    let (rows, nnz) = (600u64, 4u64);
    let o = mgbench(
        &[
            "capture",
            "--full",
            "-o",
            "t.mgbt",
            &app("spmv"),
            "--threads=2",
            &format!("--rows={rows}"),
            &format!("--nnz={nnz}"),
            "--iters=2",
            "--truth=cols.txt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let x = x_base(&stdout(&o));
    let cols = read_indices(&dir.join("cols.txt"));
    let t = read_trace(&dir.join("t.mgbt"));
    let mut per_thread: HashMap<u32, Vec<u64>> = HashMap::new();
    for c in &t.chunks {
        for a in c
            .accesses
            .iter()
            .filter(|a| a.kind == AccessKind::Load && a.addr >= x && a.addr < x + 8 * rows)
        {
            per_thread.entry(c.thread).or_default().push(a.addr);
        }
    }
    assert_eq!(
        per_thread.len(),
        2,
        "two worker threads gather: {:?}",
        per_thread.keys()
    );
    // Each worker gathers exactly its block of rows, twice, in order.
    let mut blocks: Vec<Vec<u64>> = (0..2u64)
        .map(|t| {
            let (r0, r1) = (rows * t / 2, rows * (t + 1) / 2);
            let one: Vec<u64> = cols[(r0 * nnz) as usize..(r1 * nnz) as usize]
                .iter()
                .map(|&c| x + 8 * c)
                .collect();
            [one.clone(), one].concat()
        })
        .collect();
    let mut got: Vec<Vec<u64>> = per_thread.into_values().collect();
    got.sort();
    blocks.sort();
    assert_eq!(got, blocks);
}

/// The kernel names only the main thread's stack: both backends name each other thread's
/// `[thread stack]` (from its first stack pointer), which each worker uses, and only it.
#[test]
fn thread_stacks_are_named() {
    if !need_qemu("multi-threaded capture") {
        return;
    }
    let dir = temp_dir("thread-stacks");
    let run = ["--threads=2", "--rows=600", "--nnz=4", "--iters=2"];
    for backend in ["qemu", "ptrace"] {
        let out = format!("{backend}.mgbt");
        let mut args = vec!["capture", "--backend", backend, "-o", &out];
        if backend == "qemu" {
            args.push("--full");
        }
        let prog = app("spmv");
        args.push(&prog);
        args.extend(run);
        let o = mgbench(&args, &dir);
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let t = read_trace(&dir.join(&out));
        let flat = Mapping::flatten(&t.mappings);
        let stacks: Vec<(u64, u64)> = flat
            .iter()
            .filter(|m| m.path == "[thread stack]")
            .map(|m| (m.start, m.end))
            .collect();
        assert_eq!(stacks.len(), 2, "{backend}: {flat:#?}");
        // Up to the page of the first stack pointer: 8 MiB (glibc's default) or just under.
        for &(s, e) in &stacks {
            assert_eq!(e % 4096, 0);
            assert!((7 << 20..=8 << 20).contains(&(e - s)), "{:#x}", e - s);
        }
        if backend != "qemu" {
            continue;
        }
        // Every access: each stack is a worker's, which pushes and pops there and in no
        // other (the creating thread sets a new stack's lowest bytes up, a few accesses).
        let mut used: BTreeMap<(u64, u64), BTreeMap<u32, u64>> = BTreeMap::new();
        for c in &t.chunks {
            for a in &c.accesses {
                if let Some(&r) = stacks.iter().find(|&&(s, e)| s <= a.addr && a.addr < e) {
                    *used.entry(r).or_default().entry(c.thread).or_default() += 1;
                }
            }
        }
        let owners: Vec<u32> = used
            .values()
            .map(|by| {
                let total: u64 = by.values().sum();
                let (&owner, &n) = by.iter().max_by_key(|&(_, &n)| n).unwrap();
                assert!(n * 10 > total * 9, "{used:?}");
                owner
            })
            .collect();
        assert_eq!(owners.len(), 2, "{used:?}");
        assert_ne!(owners[0], owners[1], "{used:?}");
        for o in &owners {
            let touched = used.values().filter(|by| by.contains_key(o)).count();
            assert_eq!(touched, 1, "thread {o}: {used:?}");
        }
    }
}

/// A stripped program (as distributions ship them) is symbolized from its separate debug
/// file, as gdb finds it (here through its `.gnu_debuglink`; Debian's `-dbg` packages by
/// build ID): `--roi` finds the function by name and `trace info` names it with its line.
#[test]
fn a_stripped_program_is_symbolized_from_its_debug_file() {
    if !need_qemu("symbols from a debug file") || !have("objcopy", "making a debug file") {
        return;
    }
    let dir = temp_dir("debugfile");
    let objcopy = |args: &[&str]| {
        let o = Command::new("objcopy")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    };
    std::fs::copy(app("gather"), dir.join("full")).unwrap();
    objcopy(&["--only-keep-debug", "full", "gather.debug"]);
    objcopy(&[
        "--strip-all",
        "--add-gnu-debuglink=gather.debug",
        "full",
        "gather",
    ]);
    std::fs::remove_file(dir.join("full")).unwrap();
    let capture = |dir: &Path| {
        mgbench(
            &[
                "capture",
                "--full",
                "--roi",
                "gather_sum",
                "-o",
                "s.mgbt",
                "./gather",
                "--n=512",
                "--reps=2",
            ],
            dir,
        )
    };
    let o = capture(&dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = mgbench_json(&["trace", "info", "s.mgbt", "-f", "json"], &dir);
    let top = v["top_instructions"].as_array().unwrap();
    assert!(
        top.iter().any(|i| i["function"] == "gather_sum"
            && i["file"].as_str().is_some_and(|f| f.ends_with("gather.c"))
            && i["loads"] == 2 * 512),
        "{top:#?}"
    );
    // Without it the program has no such name, and the error says why that may be.
    std::fs::remove_file(dir.join("gather.debug")).unwrap();
    let o = capture(&dir);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("is the program stripped?"),
        "{}",
        stderr(&o)
    );
    // Its instructions are then placed in the file, at the addresses the unstripped copy's
    // symbol table gives gather_sum (a position-independent executable: its link-time
    // addresses, not the ones it ran at), in the function the unwind table bounds there,
    // named by gather_sum's start.
    let o = mgbench(
        &[
            "capture", "--full", "-o", "u.mgbt", "./gather", "--n=512", "--reps=2",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["trace", "info", "u.mgbt"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let placed: Vec<(String, u64)> = stdout(&o)
        .lines()
        .filter_map(|l| l.split_once(" [gather+0x"))
        .map(|(before, at)| {
            let function = before.split_whitespace().last().unwrap().to_string();
            (
                function,
                u64::from_str_radix(at.trim_end_matches(']'), 16).unwrap(),
            )
        })
        .collect();
    let nm = Command::new("nm")
        .arg("-S")
        .arg(app("gather"))
        .output()
        .unwrap();
    assert!(nm.status.success(), "{}", stderr(&nm));
    let (start, size) = stdout(&nm)
        .lines()
        .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [a, n, _, "gather_sum"] => Some((
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(n, 16).unwrap(),
            )),
            _ => None,
        })
        .expect("nm lists gather_sum");
    let in_gather_sum: Vec<&(String, u64)> = placed
        .iter()
        .filter(|(_, a)| *a >= start && *a < start + size)
        .collect();
    assert!(
        !in_gather_sum.is_empty(),
        "none of {placed:x?} in gather_sum at {start:#x}+{size:#x}:\n{}",
        stdout(&o)
    );
    for (function, _) in in_gather_sum {
        assert_eq!(*function, format!("sub_{start:x}"), "{}", stdout(&o));
    }
    // synth names its pattern by the same place.
    let o = mgbench(
        &["synth", "u.mgbt", "--keep-unsymbolized", "-o", "u.json"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let patterns: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("u.json")).unwrap()).unwrap();
    let named: Vec<u64> = patterns
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str()?.strip_prefix("gather+0x"))
        .filter_map(|n| u64::from_str_radix(n.split('-').next()?, 16).ok())
        .collect();
    assert!(
        named.iter().any(|&a| a >= start && a < start + size),
        "no pattern named in gather_sum at {start:#x}+{size:#x}: {patterns}"
    );
}

fn write_exe(path: &Path, contents: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn bad_programs_are_refused_before_anything_runs() {
    let dir = temp_dir("badprog");
    let cases: Vec<(PathBuf, &str)> = {
        std::fs::write(dir.join("noexec"), b"\x7fELF").unwrap();
        write_exe(&dir.join("data"), b"just some bytes, not a program");
        write_exe(&dir.join("script.sh"), b"#!/bin/sh\necho hi\n");
        // A minimal 64-bit little-endian ELF header for AArch64 (e_machine 183).
        let mut elf = vec![0u8; 64];
        elf[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        elf[16] = 2; // ET_EXEC
        elf[18] = 183;
        elf[20] = 1;
        elf[52] = 64; // e_ehsize
        elf[54] = 56; // e_phentsize
        elf[58] = 64; // e_shentsize
        write_exe(&dir.join("arm64"), &elf);
        vec![
            (dir.join("missing"), "cannot find program"),
            (dir.join("noexec"), "no execute permission"),
            (dir.join("data"), "not an ELF file"),
            (
                dir.join("script.sh"),
                "it is a script (#!/bin/sh): give its interpreter",
            ),
            (dir.join("arm64"), "x86-64"),
        ]
    };
    for (prog, want) in cases {
        let o = mgbench(
            &["capture", "-o", "x.mgbt", &prog.display().to_string()],
            &dir,
        );
        assert_eq!(o.status.code(), Some(1), "{}", prog.display());
        let e = stderr(&o);
        assert!(
            e.starts_with("mgbench: ") && e.contains(want),
            "{}: {e}",
            prog.display()
        );
        assert!(
            !dir.join("x.mgbt").exists(),
            "no trace for a refused program"
        );
    }
    let o = mgbench(&["capture"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("give the program"));
    let o = mgbench(&["capture", "--backend", "pt", &app("spmv")], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("pt backend is not available"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_forked_child_exits_with_its_own_status() {
    if !need_qemu("capture of a forking program") {
        return;
    }
    let dir = temp_dir("fork");
    build_c(
        &dir,
        "forky",
        "#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n#include <sys/wait.h>\n\
         int main(void) { volatile long s = 0; for (long i = 0; i < 3000000; i++) s += i;\n\
         pid_t p = fork(); if (p == 0) { for (long i = 0; i < 1000; i++) s += i; exit(3); }\n\
         int st; waitpid(p, &st, 0); printf(\"child %d\\n\", WEXITSTATUS(st));\n\
         return WEXITSTATUS(st) == 3 ? 0 : 1; }\n",
        &["-O1"],
    );
    // Sampled (switched: the child inherits the counting translation) and full, and under
    // ptrace, where the kernel attaches the child and mgbench lets it go (timed windows:
    // stepping the 3 M-iteration loop would take minutes; it may end before the first).
    for mode in [&[][..], &["--full"][..], &["--backend", "ptrace"][..]] {
        let mut a = vec!["capture", "--quiet", "-o", "f.mgbt"];
        a.extend(mode);
        a.push("./forky");
        let o = mgbench(&a, &dir);
        assert!(o.status.success(), "{mode:?}: {}", stderr(&o));
        assert!(stdout(&o).contains("child 3"), "{mode:?}: {}", stdout(&o));
        assert!(!stderr(&o).contains("panicked"), "{mode:?}: {}", stderr(&o));
        let t = read_trace(&dir.join("f.mgbt"));
        let ptrace = mode.contains(&"ptrace");
        assert!(
            t.end.is_some() && (ptrace || !t.chunks.is_empty()),
            "{mode:?}"
        );
        // The child's accesses are not in the trace, and the capture and the trace say so.
        let said = "the program started 1 child process(es) (fork)";
        assert!(stderr(&o).contains(said), "{mode:?}: {}", stderr(&o));
        assert!(t.notes.iter().any(|n| n.contains(said)), "{:?}", t.notes);
        // What a user can do: an exec'd program is captured on its own; a worker that stays
        // in this program's code (as this child) cannot be.
        assert!(
            stderr(&o).contains("a capture follows one process")
                && stderr(&o)
                    .contains("but a worker that goes on in this program's code after fork cannot"),
            "{mode:?}: {}",
            stderr(&o)
        );
    }
}

/// A program whose `threads` threads each store `n` doubles in one loop, then end as `how`
/// says: `segv` (a null load), `wait` (print "ready" and wait to be killed), `xexec` (replace
/// itself with /bin/true) or `exit`.
const DYING: &str = r#"#include <pthread.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static long n;
static sigjmp_buf jump;
static void on_fault(int s) { (void)s; siglongjmp(jump, 1); }
static void *fill(void *p) { volatile double *a = malloc(8 * n); for (long i = 0; i < n; i++) a[i] = i; return (void *)a; }
int main(int c, char **v) {
  n = atol(v[1]); int threads = atoi(v[2]); pthread_t t[16];
  for (int i = 1; i < threads; i++) pthread_create(&t[i], 0, fill, 0);
  fill(0);
  for (int i = 1; i < threads; i++) pthread_join(t[i], 0);
  if (v[3][0] == 's') return (int)*(volatile int *)0;
  if (v[3][0] == 'h') {
    /* 100 faults the program handles, then as much work again. */
    signal(SIGSEGV, on_fault);
    for (int i = 0; i < 100; i++) if (!sigsetjmp(jump, 1)) n += *(volatile int *)0;
    free(fill(0));
  }
  if (v[3][0] == 'f') {
    /* 100 divisions by zero the program survives, each with stores after it. */
    static volatile long zero, sink[2];
    signal(SIGFPE, on_fault);
    for (int i = 0; i < 100; i++)
      if (!sigsetjmp(jump, 1)) { sink[0] = n / zero; sink[1] = i; }
    free(fill(0));
  }
  if (v[3][0] == 'b') {
    /* 100 reads past the end of a mapped file (SIGBUS) the program handles. */
    char path[] = "busXXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    if (fd < 0 || ftruncate(fd, 4096)) return 2;
    volatile char *m = mmap(0, 8192, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return 3;
    signal(SIGBUS, on_fault);
    for (int i = 0; i < 100; i++) if (!sigsetjmp(jump, 1)) n += m[4096 + i];
    free(fill(0));
  }
  if (v[3][0] == 'w') { printf("ready\n"); fflush(stdout); pause(); }
  if (v[3][0] == 'x') execl("/bin/true", "true", (char *)0);
  return 0;
}
"#;

fn build_dying(dir: &std::path::Path) {
    build_c(dir, "dying", DYING, &["-O1", "-pthread"]);
}

/// Stores recorded at the fill loop's store (the trace's most frequent instruction).
fn loop_stores(t: &Trace) -> u64 {
    let mut per_ip = std::collections::HashMap::<u64, u64>::new();
    for a in t.chunks.iter().flat_map(|c| &c.accesses) {
        if a.kind == AccessKind::Store {
            *per_ip.entry(a.ip).or_default() += 1;
        }
    }
    per_ip.values().copied().max().unwrap_or(0)
}

#[test]
fn a_crashing_program_leaves_every_recorded_access_and_its_signal() {
    if !need_qemu("capture of a crash") {
        return;
    }
    let dir = temp_dir("crash");
    build_dying(&dir);
    // More than a slot (64 Ki accesses) per thread, and not a multiple of it: QEMU runs no
    // exit hook, so what the threads and the writer still held comes from the spill file.
    let n = 1_000_003u64;
    for threads in [1u64, 3] {
        let o = mgbench(
            &[
                "capture",
                "--full",
                "-o",
                "c.mgbt",
                "./dying",
                &n.to_string(),
                &threads.to_string(),
                "segv",
            ],
            &dir,
        );
        assert_eq!(o.status.code(), Some(139), "128 + SIGSEGV");
        assert!(stderr(&o).contains("SIGSEGV"), "{}", stderr(&o));
        let t = read_trace(&dir.join("c.mgbt"));
        assert!(!t.damaged);
        let end = t.end.as_ref().expect("end frame");
        assert_eq!(end.signal, Some(11));
        assert_eq!(
            loop_stores(&t),
            threads * n,
            "{threads} thread(s): every store"
        );
        assert!(t.chunks.iter().all(|c| c.is_consistent()));
        let o = mgbench(&["trace", "info", "c.mgbt"], &dir);
        assert!(o.status.success());
        assert!(stdout(&o).contains("killed by SIGSEGV"), "{}", stdout(&o));
    }
    // The same program ending normally records the same stores.
    let o = mgbench(
        &[
            "capture",
            "--full",
            "-o",
            "e.mgbt",
            "./dying",
            &n.to_string(),
            "3",
            "exit",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(loop_stores(&read_trace(&dir.join("e.mgbt"))), 3 * n);
}

/// References of each function in `trace` (`analyze --by function`).
fn function_references(dir: &Path, trace: &str) -> HashMap<String, u64> {
    let v = mgbench_json(&["analyze", "--by", "function", "-f", "json", trace], dir);
    v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["references"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The plugin's files sit at half the descriptor limit and up; mgbench grows QEMU's
/// descriptor table that far before the exec (once QEMU has threads, growing it waits for an
/// RCU grace period). The program sees the grown table (FDSize) but no descriptor of it.
#[test]
fn the_descriptor_table_is_grown_before_qemu_starts_and_nothing_stays_open() {
    if !need_qemu("capture of a program that lists its descriptors") {
        return;
    }
    let dir = temp_dir("fdtable");
    // Prints its table's size and its open descriptors (run under QEMU: QEMU's, which the
    // plugin shares).
    build_c(
        &dir,
        "fds",
        "#include <dirent.h>\n#include <stdio.h>\n#include <string.h>\n\
         int main(void) { char l[256]; FILE *f = fopen(\"/proc/self/status\", \"r\");\n\
         while (fgets(l, sizeof l, f)) if (!strncmp(l, \"FDSize:\", 7)) fputs(l, stdout);\n\
         fclose(f); DIR *d = opendir(\"/proc/self/fd\"); struct dirent *e;\n\
         while ((e = readdir(d))) if (e->d_name[0] != '.') printf(\"%s\\n\", e->d_name);\n\
         return 0; }\n",
        &["-O1"],
    );
    // Under `ulimit -n 2000` the plugin's files sit at 1000 and up, which a table of 1024
    // holds; the reserved 1064 needs 2048: only the growth before the exec makes it so.
    let floor = mgbench_capture::descriptors::floor(2000);
    let reserved = mgbench_capture::descriptors::reserve(2000).unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 2000 && exec '{}' capture --full -q -o t.mgbt -- ./fds",
            env!("CARGO_BIN_EXE_mgbench")
        ))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let size: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no FDSize in {out}"));
    assert_eq!(
        size, 2048,
        "table under a floor of {floor}, {reserved} reserved"
    );
    let fds: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert!(!fds.contains(&reserved), "{fds:?}");
    // The plugin's own files are there, at the floor and up.
    assert!(fds.iter().any(|&f| f >= floor), "{fds:?}");
}

#[test]
fn a_program_that_closes_or_replaces_descriptors_keeps_its_files_and_the_trace_whole() {
    if !need_qemu("capture of a program that closes every descriptor") {
        return;
    }
    let dir = temp_dir("fdclose");
    let prog = app("fdclose");
    // The plugin's trace and progress files, and the spill file mgbench hands it, share
    // the program's descriptor table. Before, a shell's `exec 4>y` took the trace's number
    // and the rest of the trace went into the user's file y.
    let script = "ls -l /proc/$$/fd > fds.txt; exec 3>x 4>y 5>z; \
                  for i in $(seq 1 300); do echo data >&4; done; echo hi >&3";
    let o = mgbench(
        &[
            "capture", "--full", "-o", "sh.mgbt", "--", "bash", "-c", script,
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("y")).unwrap(), b"data\n".repeat(300));
    assert_eq!(std::fs::read(dir.join("x")).unwrap(), b"hi\n");
    assert_eq!(std::fs::read(dir.join("z")).unwrap(), b"");
    let t = read_trace(&dir.join("sh.mgbt"));
    assert!(!t.damaged && t.end.is_some(), "{}", stderr(&o));
    // None of mgbench's files is among the numbers a program opens or names.
    let fds = std::fs::read_to_string(dir.join("fds.txt")).unwrap();
    for line in fds.lines() {
        let Some((num, target)) = line
            .split_once(" -> ")
            .and_then(|(l, t)| Some((l.split_whitespace().last()?.parse::<u32>().ok()?, t)))
        else {
            continue;
        };
        if ["sh.mgbt", "mgbench-spill"]
            .iter()
            .any(|m| target.contains(m))
        {
            assert!(num >= 64, "mgbench's file at {num}: {fds}");
        }
    }

    // A program that closes every descriptor (one by one, or with close_range), or puts its
    // own file under every number, in the middle of its run: its file holds exactly what it
    // wrote, and the trace holds its second half as its first.
    let native = Command::new(&prog)
        .args(["--out=native.txt", "--how=none"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let sum = stdout(&native)
        .split_whitespace()
        .find(|w| w.starts_with("sum="))
        .unwrap()
        .to_string();
    for how in ["none", "loop", "range", "dup2"] {
        let trace = format!("{how}.mgbt");
        let o = mgbench(
            &[
                "capture",
                "--full",
                "-o",
                &trace,
                "--",
                &prog,
                "--out=out.txt",
                &format!("--how={how}"),
            ],
            &dir,
        );
        assert!(o.status.success(), "{how}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(&sum), "{how}: {out}");
        assert!(!stderr(&o).contains("warning"), "{how}: {}", stderr(&o));
        assert_eq!(
            std::fs::read(dir.join("out.txt")).unwrap(),
            fdclose_expected(&out, how),
            "{how}: the program's file"
        );
        let t = read_trace(&dir.join(&trace));
        assert!(!t.damaged && t.end.is_some(), "{how}");
        let refs = function_references(&dir, &trace);
        // 20 passes over 65536 words each (and one access of the frame).
        let (before, after) = (refs["before"], refs["after"]);
        assert!(before >= 20 * 65536, "{how}: {refs:?}");
        assert_eq!(
            after, before,
            "{how}: the second half recorded as the first"
        );
    }
}

#[test]
fn sampled_skip_counts_stay_exact_when_the_program_dies_or_execs() {
    if !need_qemu("sampled capture of a crash and an exec") {
        return;
    }
    let dir = temp_dir("tails");
    build_dying(&dir);
    // QEMU runs no exit hook after a crash or an execve: the skips since the last window
    // (up to a period) come from the spill file, counted inline (the default period) or by
    // callbacks (a period under 2^18).
    let n = "3000001";
    let capture = |how: &str, sampling: &[&str], out: &str| {
        let mut a = vec!["capture", "--quiet", "-o", out];
        a.extend(sampling);
        a.extend(["./dying", n, "1", how]);
        let o = mgbench(&a, &dir);
        (o, read_trace(&dir.join(out)))
    };
    for how in ["segv", "xexec"] {
        let (o, full) = capture(how, &["--full"], "full.mgbt");
        let want = if how == "segv" { Some(139) } else { Some(0) };
        assert_eq!(o.status.code(), want, "{how}: {}", stderr(&o));
        for sampling in [&[][..], &["--sample-period", "65536"][..]] {
            let (o, sampled) = capture(how, sampling, "s.mgbt");
            assert_eq!(o.status.code(), want, "{how} {sampling:?}: {}", stderr(&o));
            // Counted inline (the default period), the crash's block counted its rest (the
            // faulting load and the return after it), and a warning says so; an execve ends
            // its block, and callbacks count each access as it is made.
            let inline_crash = how == "segv" && sampling.is_empty();
            let rest = if inline_crash { 16 } else { 0 };
            let windows = assert_skips_exact_but(&full, &sampled, rest);
            assert!(windows.values().sum::<usize>() >= 2, "{how} {sampling:?}");
            assert_eq!(
                stderr(&o).contains("counted inline up to SIGSEGV"),
                inline_crash,
                "{how} {sampling:?}: {}",
                stderr(&o)
            );
            if how == "xexec" {
                assert!(
                    stderr(&o)
                        .contains("the trace ends where the program called execve(/bin/true)"),
                    "{}",
                    stderr(&o)
                );
            }
        }
    }
    // A run that survives signals, full and sampled (default period).
    let survives = |how: &str| {
        let (o, full) = capture(how, &["--full"], "full.mgbt");
        assert_eq!(o.status.code(), Some(0), "{how}: {}", stderr(&o));
        let (o, sampled) = capture(how, &[], "s.mgbt");
        assert_eq!(o.status.code(), Some(0), "{how}: {}", stderr(&o));
        (full, sampled)
    };
    // 100 division errors the program survives: no fault, and the instructions after a
    // division add per access, not in the block's add (which counted 600 too many here), so
    // every count stays exact.
    let (full, sampled) = survives("fpe");
    assert!(assert_skips_exact(&full, &sampled).values().sum::<usize>() >= 2);
    // 100 faults the program handles while it counts inline, segmentation faults or reads
    // past the end of a mapped file: each may leave the rest of its block counted (600
    // here), and the trace counts the faults in a note.
    for (how, signal) in [("handled", "SIGSEGV"), ("bus", "SIGBUS")] {
        let (full, sampled) = survives(how);
        let (fe, se) = (full.end.as_ref().unwrap(), sampled.end.as_ref().unwrap());
        let total = se.recorded + se.skipped;
        assert!(
            (fe.recorded..=fe.recorded + 100 * 16).contains(&total),
            "{how}: recorded + skipped {total}, the full trace {}",
            fe.recorded
        );
        let note = format!("100 fault(s) ({signal}) while sampled");
        assert!(
            sampled.notes.iter().any(|n| n.starts_with(&note)),
            "{how}: {:?}",
            sampled.notes
        );
    }
}

#[test]
fn killing_qemu_with_sigkill_loses_no_recorded_access() {
    if !need_qemu("capture of a program killed with SIGKILL") {
        return;
    }
    let dir = temp_dir("qemukill");
    build_dying(&dir);
    let n = 700_001u64;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args([
            "capture",
            "--full",
            "-o",
            "k.mgbt",
            "./dying",
            &n.to_string(),
            "2",
            "wait",
        ])
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // The program waits with its last accesses still in QEMU's memory: kill QEMU.
    let needle = format!("{}/k.mgbt", dir.display());
    let qemu: Vec<u32> = processes_with(&needle)
        .into_iter()
        .filter(|&p| p != child.id())
        .collect();
    assert_eq!(qemu.len(), 1, "QEMU is running: {qemu:?}");
    let k = Command::new("kill")
        .args(["-KILL", &qemu[0].to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(137), "128 + SIGKILL: {}", stderr(&o));
    let t = read_trace(&dir.join("k.mgbt"));
    assert!(!t.damaged);
    assert_eq!(t.end.as_ref().expect("end frame").signal, Some(9));
    assert_eq!(
        loop_stores(&t),
        2 * n,
        "every store recorded before the kill"
    );
}

#[test]
fn ctrl_c_finalises_the_trace() {
    if !need_qemu("interrupted capture") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let dir = temp_dir("ctrlc");
    // Its own process group, as a terminal job: Ctrl-C reaches mgbench and the program.
    let child = Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args([
            "capture",
            "-o",
            "i.mgbt",
            &app("spmv"),
            "--rows=65536",
            "--iters=1000000",
        ])
        .current_dir(&dir)
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let pgid = child.id();
    let k = Command::new("kill")
        .args(["-INT", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(k.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "128 + SIGINT: {}", stderr(&o));
    assert!(
        stderr(&o).contains("interrupted by SIGINT"),
        "{}",
        stderr(&o)
    );
    let t = read_trace(&dir.join("i.mgbt"));
    assert!(!t.damaged, "the trace is readable");
    let end = t.end.expect("finalised with an end frame");
    assert!(end.interrupted);
    assert_eq!(end.signal, Some(2));
    assert!(t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>() > 0);
}

/// Processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) {
                found.push(pid);
            }
        }
    }
    found
}

#[test]
fn killing_mgbench_stops_the_program_and_leaves_a_readable_trace() {
    if !need_qemu("capture killed with SIGKILL") {
        return;
    }
    let dir = temp_dir("sigkill");
    let trace = dir.join("k.mgbt");
    let mut child = capture_forever(&trace, &["--full"]);
    // Wait until QEMU runs and has written frames.
    let needle = trace.display().to_string();
    let t0 = std::time::Instant::now();
    while (processes_with(&needle).len() < 2
        || std::fs::metadata(&trace).map_or(0, |m| m.len()) < 1 << 20)
        && t0.elapsed().as_secs() < 30
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let qemu: Vec<u32> = processes_with(&needle)
        .into_iter()
        .filter(|&p| p != child.0.id())
        .collect();
    assert_eq!(qemu.len(), 1, "QEMU is running: {qemu:?}");
    child.0.kill().unwrap(); // SIGKILL: mgbench cannot finalise anything.
    child.0.wait().unwrap();
    // The kernel kills QEMU with its parent, and nothing writes the trace any more.
    let t1 = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{}", qemu[0])).exists()
        && t1.elapsed().as_secs() < 10
    {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", qemu[0])).unwrap_or_default();
        if stat.contains(") Z ") {
            break; // dead, waiting for init to reap it
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", qemu[0])).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "QEMU outlived mgbench: {stat}"
    );
    let size = std::fs::metadata(&trace).unwrap().len();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        std::fs::metadata(&trace).unwrap().len(),
        size,
        "still growing"
    );
    // Readable: whole frames, no end frame, and `trace info` says so. Each frame is one
    // write(2), but the kernel can cut a write to a file short when SIGKILL arrives during
    // it (seen once in CI: 7058 of 73722 payload bytes): then every frame before it is read
    // and `trace info` reports the cut frame as damage at its offset, after what it recovered.
    let t = read_trace(&trace);
    assert!(t.end.is_none());
    assert!(t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>() > 100_000);
    let o = mgbench(&["trace", "info", "k.mgbt"], &dir);
    if t.damaged {
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert!(
            e.contains("the writer was stopped mid-frame") && e.contains("recovered"),
            "{e}"
        );
    } else {
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert!(stdout(&o).contains("no end frame"), "{}", stdout(&o));
}

/// `mgbench capture ARGS -o f.mgbt spmv SPMV_ARGS` in `dir` with files limited to `kib` KiB:
/// the limit makes writes fail the way a full disk does (EFBIG instead of ENOSPC), and SIGXFSZ
/// is ignored so that the failing write returns an error instead of killing the writer.
fn capture_out_of_disk(dir: &Path, kib: u32, args: &str, spmv_args: &str) -> Output {
    let script = format!(
        "trap '' XFSZ; ulimit -f {kib}; exec {} capture {args} -o f.mgbt {} {spmv_args}",
        env!("CARGO_BIN_EXE_mgbench"),
        app("spmv")
    );
    Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn a_full_disk_stops_recording_but_keeps_what_was_written() {
    if !need_qemu("capture onto a full disk") {
        return;
    }
    let dir = temp_dir("diskfull");
    let o = capture_out_of_disk(&dir, 256, "--full", "--rows=4096 --iters=40");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "the program itself succeeds: {e}");
    assert!(e.contains("cannot write trace"), "{e}");
    let o = mgbench(&["trace", "info", "f.mgbt", "-f", "json"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["accesses"].as_u64().unwrap() > 10_000,
        "what fit is readable: {v}"
    );
}

#[test]
fn damaged_traces_report_offset_and_what_was_recovered() {
    if !need_qemu("a damaged trace") {
        return;
    }
    let dir = temp_dir("damaged");
    let o = mgbench(
        &[
            "capture",
            "--full",
            "-o",
            "d.mgbt",
            &app("histogram"),
            "--n=300000",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(dir.join("d.mgbt")).unwrap();
    std::fs::write(dir.join("cut.mgbt"), &bytes[..bytes.len() * 2 / 3]).unwrap();
    let o = mgbench(&["trace", "info", "cut.mgbt"], &dir);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("damaged at byte") && e.contains("recovered") && e.contains("accesses"),
        "{e}"
    );
    assert!(
        stdout(&o).contains("accesses"),
        "what was recovered is still shown"
    );
    let o = mgbench(
        &["trace", "info", "Cargo.toml"],
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not an mgbench trace"),
        "{}",
        stderr(&o)
    );
    let o = mgbench(&["trace", "dump", "d.mgbt", "--limit", "5"], &dir);
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 5);
}

#[test]
fn import_from_the_command_line() {
    let dir = temp_dir("import");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("capture/tests/data/lackey.txt");
    let o = mgbench(
        &[
            "import",
            "--from",
            "lackey",
            &fixture.display().to_string(),
            "-o",
            "l.mgbt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["trace", "info", "l.mgbt", "-f", "json"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["accesses"].as_u64(),
            v["loads"].as_u64(),
            v["stores"].as_u64()
        ),
        (Some(6), Some(4), Some(2))
    );
    assert_eq!(v["backend"], "import:lackey");
    std::fs::write(dir.join("bad.txt"), "I  401000,4\n Q 7000,8\n").unwrap();
    let o = mgbench(
        &["import", "--from", "lackey", "bad.txt", "-o", "b.mgbt"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad.txt: line 2"), "{}", stderr(&o));
    assert!(!dir.join("b.mgbt").exists(), "no half-written output");
    // MemGaze text keeps sample ids but no skipped counts: the ratio is unknown, not 1.
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("capture/tests/data/memgaze-fractional.txt");
    let fixture = fixture.display().to_string();
    let o = mgbench(
        &["import", "--from", "memgaze", &fixture, "-o", "m.mgbt"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["trace", "info", "m.mgbt"], &dir);
    assert!(
        stdout(&o).contains("skipped      unknown (the trace holds no skipped counts"),
        "{}",
        stdout(&o)
    );
    let o = mgbench(&["analyze", "m.mgbt", "--no-apex"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("sample ratio unknown (the trace holds no skipped counts)"),
        "{}",
        stdout(&o)
    );
    let v = mgbench_json(&["analyze", "m.mgbt", "--no-apex", "-f", "json"], &dir);
    assert_eq!(
        v["sample_ratio_unknown"],
        "the trace holds no skipped counts"
    );
    assert!(v["footprint"]["estimate"]["upper_blocks"].is_null(), "{v}");
}

pub(crate) fn cpu_has(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| {
            t.lines()
                .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == flag))
        })
        .unwrap_or(false)
}

/// What a capture says where a program with AVX-512 code dies of SIGILL on a CPU without it.
const NO_BACKEND_RUNS_IT: &str =
    "AVX-512 instruction(s), which neither QEMU's TCG nor this CPU (no avx512f in /proc/cpuinfo) can run";

/// On a CPU without AVX-512: `capture --full [backend] gather512` into dir/g.mgbt must end
/// with the program's SIGILL as its exit status and in the trace, keeping what was recorded
/// before it. Returns the capture's stderr.
fn capture_killed_by_sigill(dir: &Path, backend: &[&str]) -> String {
    let prog = app("gather512");
    let mut args = vec!["capture", "--quiet"];
    args.extend(backend);
    args.extend(["--full", "-o", "g.mgbt", prog.as_str()]);
    let o = mgbench(&args, dir);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(128 + 4), "{e}");
    assert!(e.contains("killed by SIGILL"), "{e}");
    let t = read_trace(&dir.join("g.mgbt"));
    assert!(
        t.end.as_ref().is_some_and(|end| end.signal == Some(4)),
        "{:?}",
        t.end
    );
    assert!(t.chunks.iter().any(|c| !c.accesses.is_empty()));
    e
}

#[test]
fn ptrace_records_avx512_gathers_lane_by_lane() {
    // scripts/apps/build.sh builds gather512 wherever gcc targets AVX-512 (Debian 12's does).
    assert!(
        apps().join("gather512").exists(),
        "scripts/apps/build.sh did not build gather512: this gcc cannot target AVX-512"
    );
    let dir = temp_dir("avx512");
    if !cpu_has("avx512f") {
        // Machines of this kind usually have AVX-512, some instances do not (seen
        // 2026-11-24). There the lanes cannot be checked; what ptrace must do is report the
        // program's SIGILL and keep what it recorded before it.
        let e = capture_killed_by_sigill(&dir, &["--backend", "ptrace"]);
        assert!(e.contains(NO_BACKEND_RUNS_IT), "{e}");
        return;
    }
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--full",
            "-o",
            "g.mgbt",
            &app("gather512"),
            "--n=32",
            "--mask=173",
            "--truth=idx.txt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let x = x_base(&stdout(&o));
    let idx = read_indices(&dir.join("idx.txt"));
    let mask = 173u64; // 0b1010_1101: lanes 0, 2, 3, 5, 7
    let want: Vec<u64> = idx
        .chunks(8)
        .flat_map(|g| {
            g.iter()
                .enumerate()
                .filter(|(k, _)| mask >> k & 1 == 1)
                .map(|(_, &i)| x + 8 * i)
                .collect::<Vec<_>>()
        })
        .collect();
    let t = read_trace(&dir.join("g.mgbt"));
    let got: Vec<u64> = t
        .chunks
        .iter()
        .flat_map(|c| c.accesses.iter())
        .filter(|a| {
            a.kind == AccessKind::Load && a.size == 8 && a.addr >= x && a.addr < x + 8 * 1024
        })
        .map(|a| a.addr)
        .collect();
    assert_eq!(got, want, "active lanes, in lane order, and no masked lane");
}

#[test]
fn ptrace_full_capture_matches_the_gather_ground_truth() {
    let dir = temp_dir("ptrace-spmv");
    let prog = dir.join("spmv_static");
    let ok = Command::new("gcc")
        .args(["-O2", "-g", "-static", "-pthread", "-o"])
        .arg(&prog)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/apps/spmv.c"))
        .status()
        .unwrap()
        .success();
    if !ok {
        eprintln!("skipped: static linking is not available");
        return;
    }
    let (rows, nnz) = (64u64, 4u64);
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--full",
            "-o",
            "p.mgbt",
            &prog.display().to_string(),
            &format!("--rows={rows}"),
            &format!("--nnz={nnz}"),
            "--iters=2",
            "--truth=cols.txt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let x = x_base(&stdout(&o));
    let cols = read_indices(&dir.join("cols.txt"));
    let t = read_trace(&dir.join("p.mgbt"));
    let got: Vec<u64> = t
        .chunks
        .iter()
        .flat_map(|c| c.accesses.iter())
        .filter(|a| a.kind == AccessKind::Load && a.addr >= x && a.addr < x + 8 * rows)
        .map(|a| a.addr)
        .collect();
    let want: Vec<u64> = (0..2)
        .flat_map(|_| cols.iter().map(|&c| x + 8 * c))
        .collect();
    assert_eq!(got, want);
    assert_eq!(t.end.unwrap().exit_code, Some(0));
}

#[test]
fn ptrace_names_the_vdso_functions_the_program_ran() {
    // A native program's clock_gettime runs in the kernel's vDSO, which no file holds: the
    // capture keeps its functions' names (the kernel's image, the same in mgbench).
    let dir = temp_dir("ptrace-vdso");
    build_c(
        &dir,
        "clock",
        "#include <time.h>\n#include <stdio.h>\n\
         int main(void) { struct timespec t; long s = 0;\n\
         for (int i = 0; i < 2000; i++) { clock_gettime(CLOCK_MONOTONIC, &t); s += t.tv_nsec & 1; }\n\
         printf(\"%ld\\n\", s); return 0; }\n",
        &["-O2"],
    );
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--full",
            "-o",
            "c.mgbt",
            "./clock",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["trace", "info", "c.mgbt"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let info = stdout(&o);
    assert!(info.contains("__vdso_clock_gettime [vdso]"), "{info}");
    assert!(info.contains("names of the vDSO's functions"), "{info}");
    assert!(!info.contains("?? [vdso]"), "{info}");
    let v = mgbench_json(
        &[
            "analyze",
            "--format",
            "json",
            "--no-apex",
            "--by",
            "function",
            "c.mgbt",
        ],
        &dir,
    );
    let functions: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(functions.contains(&"__vdso_clock_gettime"), "{functions:?}");
}

#[test]
fn ptrace_timed_windows_and_attach() {
    let dir = temp_dir("ptrace-timed");
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--sample-window",
            "256",
            "--sample-interval",
            "5",
            "-o",
            "t.mgbt",
            &app("gather"),
            "--reps=40000",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_trace(&dir.join("t.mgbt"));
    let mut lens: BTreeMap<u64, u64> = BTreeMap::new();
    for c in &t.chunks {
        for s in &c.samples {
            *lens.entry(s.id).or_default() += u64::from(s.len);
        }
    }
    // The pause after a window is at least twice as long as the window took, so a loaded
    // machine stretches the pauses: the program runs long enough (about 0.7 s natively)
    // for several windows even then.
    assert!(lens.len() >= 2, "{} windows", lens.len());
    // A window ends after the instruction that reaches `window` accesses, or once it has
    // stepped as long as the program ran natively before it (the first pauses are short, so
    // the first windows may hold fewer); the pauses double with the windows, so whole
    // windows follow.
    assert!(
        lens.values().all(|&n| (1..256 + 16).contains(&n)),
        "{lens:?}"
    );
    assert!(
        lens.values().any(|&n| (256..256 + 16).contains(&n)),
        "no whole window: {lens:?}"
    );
    // Fewer than 100 windows are too few for statistics, and the capture says so, with
    // how many it took (an attached NumPy loop's 14 were said nowhere).
    let err = stderr(&o);
    if lens.len() < 100 {
        assert!(
            err.contains(&format!("only {} timed window(s)", lens.len()))
                && err.contains("--sample-window, here 256"),
            "{} windows: {err}",
            lens.len()
        );
    } else {
        assert!(!err.contains("timed window(s)"), "{err}");
    }
    let o = mgbench(&["trace", "info", "t.mgbt", "-f", "json"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mode"], "timed");
    assert_eq!(v["backend"], "ptrace");

    // A long SpMV to attach to, and its pid.
    let running_spmv = || {
        let target = KillOnDrop(
            Command::new(app("spmv"))
                .args(["--rows=65536", "--iters=1000000"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        let pid = target.0.id().to_string();
        (target, pid)
    };
    // Attach to a running process, detach on Ctrl-C, leave it running.
    let (mut target, pid) = running_spmv();
    let cpus_allowed = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .unwrap()
            .to_string()
    };
    let before = cpus_allowed();
    let child = Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args([
            "capture",
            "--backend",
            "ptrace",
            "--pid",
            &pid,
            "-o",
            "a.mgbt",
        ])
        .current_dir(&dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_header(&dir.join("a.mgbt"));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let state = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let running = state
        .lines()
        .find(|l| l.starts_with("State:"))
        .unwrap()
        .to_string();
    // Stepped windows run on mgbench's CPU; the detached process has its own mask back.
    let after = cpus_allowed();
    let _ = target.0.kill();
    let _ = target.0.wait();
    assert!(
        !running.contains("t (tracing stop)") && !running.contains("Z"),
        "after detach: {running}"
    );
    assert_eq!(before, after);
    let t = read_trace(&dir.join("a.mgbt"));
    assert!(t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>() > 0);
    assert!(t.end.unwrap().interrupted);

    // --duration: mgbench detaches by itself and the process runs on.
    let (mut target, pid) = running_spmv();
    let o = mgbench(
        &[
            "capture",
            "--quiet",
            "--pid",
            &pid,
            "--duration",
            "1",
            "-o",
            "d.mgbt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("detached from pid {pid} after --duration 1 s")),
        "{}",
        stderr(&o)
    );
    let state = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        state.contains("State:\tR") || state.contains("State:\tS"),
        "after --duration: {state}"
    );
    let t = read_trace(&dir.join("d.mgbt"));
    assert!(t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>() > 0);
    let end = t.end.unwrap();
    assert!(!end.interrupted && end.exit_code.is_none() && end.signal.is_none());
    // What follows --pid's options is PROGRAM's place, which --pid leaves empty: an error,
    // not a capture that names its trace after the first word (`--duration.mgbt` did).
    let o = mgbench(&["capture", "--pid", &pid, "e.mgbt"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("takes no PROGRAM, but `e.mgbt` follows the options"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("e.mgbt.mgbt").exists() && !dir.join("e.mgbt").exists());
    let _ = target.0.kill();
    let _ = target.0.wait();

    // A threaded program, its main thread stepped while blocked in `pthread_join`: after the
    // detach it runs to its own end with the native result (a step's SIGTRAP still queued at
    // the detach used to kill it).
    let args = ["--rows=65536", "--iters=20000", "--threads=2"];
    let checksum = |out: &[u8]| {
        let out = String::from_utf8_lossy(out).into_owned();
        out.split_whitespace()
            .find(|w| w.starts_with("checksum="))
            .map(str::to_string)
            .unwrap_or(out)
    };
    let native = Command::new(app("spmv")).args(args).output().unwrap();
    assert!(native.status.success(), "{}", stderr(&native));
    for mode in [&[][..], &["--full"][..]] {
        let target = Command::new(app("spmv"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let pid = target.id().to_string();
        let mut cmd = vec!["capture", "--quiet", "--backend", "ptrace"];
        cmd.extend(mode);
        cmd.extend(["--pid", &pid, "-o", "b.mgbt"]);
        // The previous mode's trace would pass for this run's header.
        let _ = std::fs::remove_file(dir.join("b.mgbt"));
        let child = Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(&cmd)
            .current_dir(&dir)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_header(&dir.join("b.mgbt"));
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{mode:?}: {}", stderr(&o));
        let out = target.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{mode:?}: the program died: {:?}",
            out.status
        );
        assert_eq!(checksum(&out.stdout), checksum(&native.stdout), "{mode:?}");
        // The two workers, running when mgbench attached, have their stacks named whole.
        let t = read_trace(&dir.join("b.mgbt"));
        let stacks: Vec<u64> = Mapping::flatten(&t.mappings)
            .iter()
            .filter(|m| m.path == "[thread stack]")
            .map(|m| m.end - m.start)
            .collect();
        assert_eq!(stacks.len(), 2, "{mode:?}: {stacks:?}");
        assert!(stacks.iter().all(|&n| n >= 1 << 20), "{stacks:?}");
    }
}

/// Waits (up to 60 s) until the ptrace backend has written the trace's header to `path`,
/// which it does just before it takes SIGINT for its own. A fixed wait was not always
/// enough alongside the rest of the suite: SIGINT then killed mgbench before it could
/// detach (exit by signal, nothing on stderr).
fn wait_for_header(path: &Path) {
    let start = std::time::Instant::now();
    while !std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no trace header in {} after 60 s",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The process whose parent is `parent`, if one is (the program mgbench launched).
fn child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // pid (comm) state ppid ...: the name may hold spaces, so read after its ')'.
        let ppid: u32 = stat[stat.rfind(')')? + 2..]
            .split(' ')
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent).then_some(pid)
    })
}

/// The ptrace backend writes its trace itself, so what it recorded must reach the file
/// before anything stops it: a `kill -9` of mgbench leaves a readable trace of all but the
/// last second (and the program dies with mgbench), and a full disk stops recording, keeps
/// what was written and lets the program run on to its own end.
/// A child process killed when it goes out of scope: a test that fails before it ends its
/// mgbench must not leave it (and a program that runs forever) behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `mgbench capture --quiet HOW -o TRACE` of an SpMV that runs until it is killed.
fn capture_forever(trace: &Path, how: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(["capture", "--quiet"])
            .args(how)
            .arg("-o")
            .arg(trace)
            .args([&app("spmv"), "--rows=65536", "--iters=1000000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn ptrace_keeps_what_it_recorded_when_killed_or_out_of_disk() {
    let dir = temp_dir("ptrace-kept");
    let trace = dir.join("k.mgbt");
    let mut child = capture_forever(&trace, &["--backend", "ptrace", "--full"]);
    // The header is written at once, then what is recorded every second.
    let size = || std::fs::metadata(&trace).map_or(0, |m| m.len());
    let t0 = std::time::Instant::now();
    while size() == 0 && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let header = size();
    assert!(header > 0, "no header after 30 s");
    // (The header may come before the program is started: under load, it took a while.)
    let program = loop {
        match child_of(child.0.id()) {
            Some(pid) => break pid,
            None if t0.elapsed().as_secs() < 30 => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            None => panic!("the program does not run under mgbench after 30 s"),
        }
    };
    while size() == header && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(size() > header, "nothing recorded reached the file in 30 s");
    child.0.kill().unwrap(); // SIGKILL: mgbench cannot finalise anything.
    child.0.wait().unwrap();
    let t1 = std::time::Instant::now();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{program}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    while alive() && t1.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive(), "the program outlived mgbench");
    let t = read_trace(&trace);
    assert!(t.end.is_none());
    assert!(t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>() > 1000);
    let o = mgbench(&["trace", "info", "k.mgbt"], &dir);
    assert!(stdout(&o).contains("no end frame"), "{}", stdout(&o));

    let o = capture_out_of_disk(&dir, 24, "--backend ptrace --full", "--rows=4096 --iters=1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "the program itself succeeds: {e}");
    assert!(
        stdout(&o).contains("checksum="),
        "the program ran to its end: {}",
        stdout(&o)
    );
    assert!(
        e.contains("cannot write trace") && e.contains("recording stopped"),
        "{e}"
    );
    let t = read_trace(&dir.join("f.mgbt"));
    assert!(
        t.chunks.iter().map(|c| c.accesses.len()).sum::<usize>() > 1000,
        "what was written before the disk filled is readable"
    );
}

/// The ptrace backend steps threads on its own CPU (4.5x faster steps in a VM), which the
/// program must not notice: `affinity` watches its threads' CPU masks (a worker started every
/// 20 ms, some while stepped) and prints how many CPUs it may use, the fewest any thread
/// was allowed at its best moment, and the same of a child process it forks (not traced).
#[test]
fn ptrace_steps_on_its_own_cpu_and_the_program_keeps_its_mask() {
    let dir = temp_dir("ptrace-affinity");
    let args = ["--ms=250", "--every=20", "--threads=6"];
    let native = Command::new(app("affinity")).args(args).output().unwrap();
    assert!(native.status.success(), "{}", stderr(&native));
    let want = stdout(&native);
    assert!(want.starts_with("affinity cpus="), "{want}");
    let program = app("affinity");
    for mode in [&["--sample-interval", "5"][..], &["--full"][..]] {
        let mut cmd = vec!["capture", "--quiet", "--backend", "ptrace"];
        cmd.extend(mode);
        cmd.extend(["-o", "a.mgbt", &program]);
        cmd.extend(args);
        let o = mgbench(&cmd, &dir);
        assert!(o.status.success(), "{mode:?}: {}", stderr(&o));
        // Full mode steps every instruction: its sched_getaffinity calls must still see the
        // program's own mask. Timed mode: every thread runs natively with its own mask.
        assert_eq!(stdout(&o), want, "{mode:?}");
        let t = read_trace(&dir.join("a.mgbt"));
        let threads: std::collections::BTreeSet<u32> = t.chunks.iter().map(|c| c.thread).collect();
        assert_eq!(threads.len(), 7, "{mode:?}: threads {threads:?}");
    }
}

/// Exec and clone stop the thread inside the system call, and stepping on from there stops it
/// again when the call returns, before the same instruction: recorded at both stops, the
/// first instruction after `execve` and after `clone` were recorded twice. Two programs in
/// assembly whose instructions after those calls touch the stack: `push; pop` right at
/// `_start`, and right after a raw `clone` of a thread (parent and child both run them).
#[test]
fn ptrace_full_records_the_instruction_after_exec_and_clone_once() {
    let dir = temp_dir("ptrace-once");
    let exec_src = r#"__asm__(".globl _start\n_start:\n push %rax\n pop %rax\n mov $60, %eax\n xor %edi, %edi\n syscall\n");"#;
    // clone(CLONE_VM | FS | FILES | SIGHAND | THREAD | SYSVSEM, stack); the parent spins a
    // little, so that the child runs, and ends the process.
    let clone_src = r#"__asm__(".globl _start\n_start:\n mov $56, %eax\n mov $0x50f00, %edi\n lea stack_top(%rip), %rsi\n xor %edx, %edx\n xor %r10d, %r10d\n xor %r8d, %r8d\n syscall\n push %rax\n pop %rax\n test %rax, %rax\n jz child\n mov $300, %ecx\n1: dec %ecx\n jnz 1b\n mov $231, %eax\n xor %edi, %edi\n syscall\nchild:\n mov $60, %eax\n xor %edi, %edi\n syscall\n.bss\n.align 16\n.space 4096\nstack_top:\n");"#;
    build_c(&dir, "exec_once", exec_src, &["-nostdlib", "-static"]);
    build_c(&dir, "clone_once", clone_src, &["-nostdlib", "-static"]);
    let accesses = |name: &str| -> BTreeMap<u32, Vec<(AccessKind, u64)>> {
        let o = mgbench(
            &[
                "capture",
                "--quiet",
                "--backend",
                "ptrace",
                "--full",
                "-o",
                "t.mgbt",
                &dir.join(name).display().to_string(),
            ],
            &dir,
        );
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let t = read_trace(&dir.join("t.mgbt"));
        let mut by_thread: BTreeMap<u32, Vec<(AccessKind, u64)>> = BTreeMap::new();
        for c in &t.chunks {
            let v = by_thread.entry(c.thread).or_default();
            v.extend(c.accesses.iter().map(|a| (a.kind, a.addr)));
        }
        by_thread
    };
    let push_pop = |v: &[(AccessKind, u64)]| {
        v.len() == 2
            && v[0].0 == AccessKind::Store
            && v[1].0 == AccessKind::Load
            && v[0].1 == v[1].1
    };
    let t = accesses("exec_once");
    assert_eq!(t.len(), 1, "{t:?}");
    assert!(push_pop(&t[&0]), "after exec: {t:?}");
    let t = accesses("clone_once");
    assert!(push_pop(&t[&0]), "after clone, in the parent: {t:?}");
    // The child is recorded if it ran before the parent ended the process.
    assert!(t.len() <= 2, "{t:?}");
    if let Some(child) = t.get(&1) {
        assert!(push_pop(child), "after clone, in the child: {t:?}");
    }
}

#[test]
fn auto_backend_says_which_and_why_and_falls_back_on_avx512() {
    if !need_qemu("--backend auto") {
        return;
    }
    let dir = temp_dir("auto");
    let info = |trace: &str| stdout(&mgbench(&["trace", "info", trace], &dir));
    // Plain code: QEMU, with exact sample counts.
    let o = mgbench(&["capture", "--quiet", "-o", "t.mgbt", &app("triad")], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("backend qemu (auto: ") && stderr(&o).contains("exact"),
        "{}",
        stderr(&o)
    );
    let t = info("t.mgbt");
    assert!(t.contains("backend      qemu, sampled"), "{t}");
    assert!(
        t.contains("note         backend qemu chosen by --backend auto"),
        "{t}"
    );
    if !cpu_has("avx512f") {
        // Machines of this kind usually have AVX-512, but some instances do not (seen
        // 2026-11-24). There no backend can run AVX-512 code (ptrace runs it natively), so
        // auto keeps QEMU, and the program's SIGILL is reported with what was recorded
        // before it, in the exit status and in the trace.
        let e = capture_killed_by_sigill(&dir, &[]);
        assert!(e.contains("backend qemu (auto: "), "{e}");
        assert!(e.contains(NO_BACKEND_RUNS_IT), "{e}");
        let t = info("g.mgbt");
        assert!(t.contains("program      killed by SIGILL"), "{t}");
        let n: u64 = t
            .lines()
            .find_map(|l| l.strip_prefix("accesses"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap();
        assert!(n > 0, "{t}");
        return;
    }
    // AVX-512 in the program's own code: ptrace from the start, and said why.
    let o = mgbench(
        &[
            "capture",
            "--quiet",
            "--full",
            "-o",
            "g.mgbt",
            &app("gather512"),
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("backend ptrace (auto: ") && stderr(&o).contains("AVX-512"),
        "{}",
        stderr(&o)
    );
    let t = info("g.mgbt");
    assert!(t.contains("backend      ptrace, full"), "{t}");
    // AVX-512 only at run time (JIT): QEMU dies of SIGILL, auto captures again with ptrace.
    // About 1.2 s natively: a timed window steps no longer than the program ran natively
    // before it, so the first windows of a short run are cut and whole ones need that long.
    let o = mgbench(
        &[
            "capture",
            "--quiet",
            "-o",
            "j.mgbt",
            &app("jit512"),
            "--reps=1000",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("backend qemu (auto: "), "{e}");
    assert!(e.contains("died of SIGILL under QEMU"), "{e}");
    assert!(
        e.contains("jit512 n=") || stdout(&o).contains("jit512 n="),
        "{e}"
    );
    let t = info("j.mgbt");
    assert!(t.contains("backend      ptrace, timed"), "{t}");
    assert!(t.contains("exited with 0"), "{t}");
    assert!(t.contains("time-sampled: sample ratio unknown"), "{t}");
    let n: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("accesses"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(n >= 1024, "{t}");
    // Where mgbench may not fall back, it says what to run instead.
    let o = mgbench(
        &[
            "capture",
            "--quiet",
            "--backend",
            "qemu",
            "-o",
            "q.mgbt",
            &app("jit512"),
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(128 + 4), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("died of SIGILL under QEMU") && e.contains("--backend ptrace"),
        "{e}"
    );
}

#[test]
fn backend_option_errors() {
    let dir = temp_dir("backend-opts");
    // A mistyped option is not taken for the program's name (the capture used to run it as
    // PROGRAM "--fulll" and fail to find it); after PROGRAM, words are its own.
    let o = mgbench(&["capture", "--fulll", &app("gather")], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unexpected argument '--fulll'") && stderr(&o).contains("'--full'"),
        "{}",
        stderr(&o)
    );
    let o = mgbench(&["profile", "--threds", "2", &app("gather")], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("'--threads'"), "{}", stderr(&o));
    let o = mgbench(&["capture", "--duration", "1", &app("gather")], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--pid <PID>"), "{}", stderr(&o));
    let o = mgbench(
        &["capture", "--backend", "qemu", "--pid", "1", "-o", "x.mgbt"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--pid needs --backend ptrace"),
        "{}",
        stderr(&o)
    );
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--sample-period",
            "100",
            &app("gather"),
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--sample-interval"), "{}", stderr(&o));
    let o = mgbench(&["capture", "--sample-interval", "5", &app("gather")], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--backend ptrace"), "{}", stderr(&o));
    // No pause between windows leaves each window one access (its budget is half the pause).
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--sample-interval",
            "0",
            "-o",
            "zero.mgbt",
            &app("gather"),
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--sample-interval 0: give at least 1 ms"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("zero.mgbt").exists());
    let o = mgbench(
        &[
            "capture",
            "--backend",
            "ptrace",
            "--pid",
            "999999999",
            "-o",
            "x.mgbt",
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("999999999"), "{}", stderr(&o));
}

/// A program is run by the path it was given, with the name it was given as its `argv[0]`,
/// as a shell runs it: a program may tell from them what to be (`xzcat` is a link to `xz`,
/// which decompresses when called so; a virtual environment's `bin/python`, a link to the
/// system's, finds the environment's packages next to it). mgbench ran the file the link
/// leads to, under that file's name, so `xzcat f.xz` ran as `xz f.xz` and tried to compress.
#[test]
fn a_program_runs_by_the_name_and_path_it_was_given() {
    if !need_qemu("capture of a program called by a link") {
        return;
    }
    let dir = temp_dir("argv0");
    // It prints its argv[0]; it is run by a link, by its path and through PATH.
    build_c(
        &dir,
        "whoami",
        r#"#include <stdio.h>
int main(int argc, char **argv) { (void)argc; printf("argv0=%s\n", argv[0]); return 0; }
"#,
        &["-O1"],
    );
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::os::unix::fs::symlink(dir.join("whoami"), dir.join("bin/other")).unwrap();
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(args)
            .env("PATH", &path)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    for backend in ["qemu", "ptrace"] {
        for (program, argv0) in [("bin/other", "bin/other"), ("other", "other")] {
            let out = run(&[
                "capture",
                "-q",
                "--backend",
                backend,
                "--full",
                "-o",
                "t.mgbt",
                program,
            ]);
            assert_eq!(out.trim(), format!("argv0={argv0}"), "{backend} {program}");
        }
    }
    for backend in ["qemu", "page-faults"] {
        let out = run(&[
            "reuse",
            "-q",
            "--backend",
            backend,
            "-o",
            "r.json",
            "--",
            "other",
        ]);
        assert_eq!(out.trim(), "argv0=other", "reuse {backend}");
    }
}

/// `mpirun -np 2 mgbench capture -- PROGRAM`: each rank writes PROGRAM.rankR.mgbt, where both
/// wrote PROGRAM.mgbt into each other (a trace cut short, its counts from neither run). Given
/// one `-o`, the rank that comes second fails, naming the file and what to do, and the
/// first's trace is whole.
#[test]
fn ranks_of_an_mpi_job_write_their_own_traces() {
    if !need_qemu("capture under mpirun") || !have("mpirun", "capture under mpirun") {
        return;
    }
    let dir = temp_dir("mpi-capture");
    let mpirun = |extra: &[&str]| {
        let o = Command::new("timeout")
            .args([
                "120",
                "mpirun",
                "--oversubscribe",
                "--bind-to",
                "none",
                "-np",
                "2",
            ])
            .args([env!("CARGO_BIN_EXE_mgbench"), "capture", "-q", "--full"])
            .args(extra)
            .args([app("gather"), "--reps=20".into()])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_ne!(o.status.code(), Some(124), "mpirun hangs: {}", stderr(&o));
        o
    };
    let o = mpirun(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let counts: Vec<usize> = (0..2)
        .map(|r| {
            let t = read_trace(&dir.join(format!("gather.rank{r}.mgbt")));
            assert!(!t.damaged && t.end.is_some(), "rank {r}");
            t.chunks.iter().map(|c| c.accesses.len()).sum()
        })
        .collect();
    assert!(!dir.join("gather.mgbt").exists());
    // The same program twice: the same accesses, give or take the few its environment
    // (the rank's variables) moves.
    assert!(counts[0].abs_diff(counts[1]) < 100, "{counts:?}");
    let o = mpirun(&["-o", "same.mgbt"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("same.mgbt is being written by another mgbench capture")
            && e.contains("leave -o out: each rank then writes PROGRAM.rankR.mgbt"),
        "{e}"
    );
    let t = read_trace(&dir.join("same.mgbt"));
    assert!(!t.damaged && t.end.is_some());
    let n: usize = t.chunks.iter().map(|c| c.accesses.len()).sum();
    assert!(n.abs_diff(counts[0]) < 100, "{n} {counts:?}");
}

/// A capture that fails before its program starts leaves no file it created, and an
/// existing trace as it was.
#[test]
fn a_capture_that_cannot_start_leaves_no_new_file() {
    let dir = temp_dir("claim");
    let run = |out: &str| {
        Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args([
                "capture",
                "-q",
                "--backend",
                "qemu",
                "-o",
                out,
                "--",
                "/bin/true",
            ])
            .env("MGBENCH_QEMU", dir.join("no-such-qemu"))
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let o = run("new.mgbt");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("qemu-x86_64 not found"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("new.mgbt").exists());
    std::fs::write(dir.join("old.mgbt"), b"an earlier trace").unwrap();
    assert!(!run("old.mgbt").status.success());
    assert_eq!(
        std::fs::read(dir.join("old.mgbt")).unwrap(),
        b"an earlier trace"
    );
}

/// The perf map a trace's note names (`/tmp/perf-PID.map`), removed: the demo leaves it, as
/// runtimes do.
fn remove_perf_map(notes: &str) {
    if let Some(path) = notes
        .split_whitespace()
        .find(|w| w.starts_with("/tmp/perf-") && w.ends_with(".map"))
    {
        let _ = std::fs::remove_file(path);
    }
}

/// Code a program writes at run time (a JIT compiler's) is named by the perf map its
/// runtime keeps, kept in the trace, under QEMU and ptrace; without a map it is "anonymous
/// code", and synth says how to name it.
#[test]
fn jit_code_is_named_by_its_runtimes_perf_map() {
    if !need_qemu("capture of JIT-compiled code") {
        return;
    }
    let dir = temp_dir("jit-map");
    let info = |trace: &str| stdout(&mgbench(&["trace", "info", trace], &dir));
    for (backend, how, args) in [
        ("qemu", "--full", vec![app("jitgather")]),
        (
            "ptrace",
            "--full",
            vec![app("jitgather"), "--n=2048".into(), "--reps=1".into()],
        ),
    ] {
        let trace = format!("{backend}.mgbt");
        let mut a = vec!["capture", "--backend", backend, how, "-o", &trace, "--"];
        a.extend(args.iter().map(String::as_str));
        let o = mgbench(&a, &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        let e = stderr(&o);
        remove_perf_map(&e);
        assert!(
            e.contains("names of JIT-compiled code: 1 symbol(s) from /tmp/perf-"),
            "{e}"
        );
        let t = info(&trace);
        assert!(t.contains("names of JIT-compiled code"), "{t}");
        let dump = stdout(&mgbench(&["trace", "dump", "--symbols", &trace], &dir));
        assert!(dump.contains(" load jit_gather_loop [jit]"), "{backend}");
        let o = mgbench(&["synth", "--quiet", &trace, "-o", "p.json"], &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        let p: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("p.json")).unwrap()).unwrap();
        let names: Vec<&str> = p
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert!(names.contains(&"jit_gather_loop-gather"), "{backend}: {p}");
    }
    // Live reuse (no trace; its report on stderr): its instruction pairs name the code too.
    let o = mgbench(&["reuse", "--", &app("jitgather")], &dir);
    let e = stderr(&o);
    remove_perf_map(&e);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("jit_gather_loop [jit] ->"), "{e}");
    assert!(e.contains("names of JIT-compiled code: 1 symbol(s)"), "{e}");
    // Without a map: anonymous code, and synth says what names it.
    let o = mgbench(
        &[
            "capture",
            "--full",
            "-o",
            "anon.mgbt",
            "--",
            &app("jitgather"),
            "--map=0",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("JIT-compiled"), "{}", stderr(&o));
    let dump = stdout(&mgbench(&["trace", "dump", "--symbols", "anon.mgbt"], &dir));
    assert!(dump.contains(" load ?? [anonymous code]"), "{dump:.2000}");
    let t = info("anon.mgbt");
    assert!(t.contains("?? [anonymous code]"), "{t}");
    assert!(
        t.contains("of these instructions run in anonymous memory"),
        "{t}"
    );
    let o = mgbench(&["synth", "anon.mgbt", "-o", "a.json"], &dir);
    let e = stderr(&o);
    assert!(
        e.contains("run in anonymous memory, where a JIT compiler writes code"),
        "{e}"
    );
    assert!(e.contains("--perf-basic-prof"), "{e}");
}

#[test]
fn go_programs_run_without_signal_preemption_where_counting_is_inline() {
    // Go's runtime preempts threads with SIGURG; under QEMU 7.2 that killed sampled captures
    // and live runs of Debian's `restic` (see `go_preemption` in the qemu backend). A C
    // program with the section Go's linker writes stands in for one and says what GODEBUG
    // it got.
    if !need_qemu("the Go preemption setting") || !have("gcc", "the Go preemption setting") {
        return;
    }
    let dir = temp_dir("go-preempt");
    let says = "#include <stdio.h>\n#include <stdlib.h>\n\
        int main(void) { const char *g = getenv(\"GODEBUG\");\n\
        printf(\"GODEBUG=%s\\n\", g ? g : \"(unset)\"); return 0; }\n";
    let go = format!(
        "__attribute__((section(\".go.buildinfo\"), used)) static const char info[32] = \"\\xff Go buildinf:\";\n{says}"
    );
    build_c(&dir, "gofake", &go, &["-O2"]);
    build_c(&dir, "plain", says, &["-O2"]);
    let run = |args: &[&str], godebug: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mgbench"));
        c.args(args).current_dir(&dir).env_remove("GODEBUG");
        if let Some(g) = godebug {
            c.env("GODEBUG", g);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        o
    };
    let sampled = ["capture", "--quiet", "-o", "g.mgbt", "./gofake"];
    let o = run(&sampled, None);
    assert!(
        stdout(&o).contains("GODEBUG=asyncpreemptoff=1\n"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("note: Go program: run with GODEBUG=asyncpreemptoff=1"),
        "{}",
        stderr(&o)
    );
    let info = stdout(&mgbench(&["trace", "info", "g.mgbt"], &dir));
    assert!(info.contains("Go program: run with GODEBUG"), "{info}");
    // The user's own settings are kept, and their choice of preemption too.
    let o = run(&sampled, Some("madvdontneed=1"));
    assert!(
        stdout(&o).contains("GODEBUG=madvdontneed=1,asyncpreemptoff=1\n"),
        "{}",
        stdout(&o)
    );
    let o = run(&sampled, Some("asyncpreemptoff=0"));
    assert!(
        stdout(&o).contains("GODEBUG=asyncpreemptoff=0\n"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("kept as given"), "{}", stderr(&o));
    // A full capture counts nothing inline, and other programs are left alone.
    let o = run(
        &["capture", "--quiet", "--full", "-o", "f.mgbt", "./gofake"],
        None,
    );
    assert!(stdout(&o).contains("GODEBUG=(unset)\n"), "{}", stdout(&o));
    let o = run(&["capture", "--quiet", "-o", "p.mgbt", "./plain"], None);
    assert!(stdout(&o).contains("GODEBUG=(unset)\n"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("Go program"), "{}", stderr(&o));
    // Live reuse distances count inline too.
    let o = run(&["reuse", "./gofake"], None);
    assert!(
        stdout(&o).contains("GODEBUG=asyncpreemptoff=1\n"),
        "{}",
        stdout(&o)
    );
    assert!(
        format!("{}{}", stdout(&o), stderr(&o)).contains("Go program: run with GODEBUG"),
        "{}",
        stderr(&o)
    );
}

/// A closed stderr (`mgbench capture ... 2>&1 | head -1`) neither stops the capture nor
/// changes its exit status: std's eprintln! panicked there (exit 101), before the program ran
/// when stderr was closed from the start.
#[test]
fn a_closed_stderr_stops_nothing() {
    if !need_qemu("capture with stderr closed") {
        return;
    }
    let dir = temp_dir("closed-stderr");
    for mode in [&["-o", "s.mgbt"][..], &["--full", "-o", "f.mgbt"][..]] {
        let mut args = vec!["capture"];
        args.extend_from_slice(mode);
        let gather = app("gather");
        args.extend(["--", &gather]);
        let mut child = Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args(&args)
            .current_dir(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before mgbench writes its first line.
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{mode:?}");
        let t = read_trace(&dir.join(mode[mode.len() - 1]));
        assert!(!t.damaged, "{mode:?}");
        let end = t.end.expect("the trace is finished");
        assert!(end.recorded > 0, "{mode:?}: {end:?}");
    }
}

/// The `main` row of `analyze --by function` on `trace`: its references.
fn main_references(dir: &Path, trace: &str) -> Option<u64> {
    let v = mgbench_json(
        &[
            "analyze",
            trace,
            "--by",
            "function",
            "--format",
            "json",
            "--no-apex",
        ],
        dir,
    );
    v["functions"]
        .as_array()?
        .iter()
        .find(|f| f["function"] == "main")
        .and_then(|f| f["references"].as_u64())
}

/// Other tools' traces carry addresses, not the files mapped there: a lackey log of
/// `valgrind -v -v` says where each file was loaded, `--program PATH[@ADDRESS]` says it for
/// any format; the imported code is then named exactly as in a capture of the same run.
#[test]
fn imported_code_is_named_from_valgrinds_log_or_program_flags() {
    if !need_qemu("naming imported code") || !have("valgrind", "naming imported code") {
        return;
    }
    let dir = temp_dir("import-named");
    let args = ["--n=3000", "--bins=512", "--iters=2"];
    // A PIE under Valgrind, which loads it at an address of its own.
    let pie = app("histogram");
    let lk = Command::new("valgrind")
        .args([
            "-v",
            "-v",
            "--tool=lackey",
            "--trace-mem=yes",
            "--log-file=vv.txt",
        ])
        .arg(&pie)
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(lk.status.success(), "{}", stderr(&lk));
    let o = mgbench(
        &["import", "--from", "lackey", "vv.txt", "-o", "vv.mgbt"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("placed where Valgrind's log says they were loaded"),
        "{e}"
    );
    assert!(e.contains("unwind-info dump lines"), "{e}");
    let mut cap = vec!["capture", "-q", "--full", "-o", "q.mgbt", pie.as_str()];
    cap.extend(args);
    let o = mgbench(&cap, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let exact = main_references(&dir, "q.mgbt").expect("main in the capture");
    assert!(exact > 1000, "{exact}");
    assert_eq!(main_references(&dir, "vv.mgbt"), Some(exact));
    // A gs_patterns record stream of the non-PIE build's run (pc records, then accesses).
    let nopie = apps().join("nopie/histogram").display().to_string();
    let mut cap = vec!["capture", "-q", "--full", "-o", "n.mgbt", nopie.as_str()];
    cap.extend(args);
    let o = mgbench(&cap, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let exact = main_references(&dir, "n.mgbt").expect("main in the capture");
    let mut records = Vec::new();
    let mut record = |kind: u16, size: u16, addr: u64| {
        records.extend_from_slice(&kind.to_le_bytes());
        records.extend_from_slice(&size.to_le_bytes());
        records.extend_from_slice(&addr.to_le_bytes());
    };
    let mut pc = None;
    for ch in read_trace(&dir.join("n.mgbt")).chunks {
        for a in &ch.accesses {
            if pc != Some(a.ip) {
                record(0xa, 0, a.ip);
                pc = Some(a.ip);
            }
            let kind = u16::from(a.kind.as_str() == "store");
            record(kind, u16::from(a.size), a.addr);
        }
    }
    std::fs::write(dir.join("gs.bin"), &records).unwrap();
    let import = |extra: &[&str]| {
        let mut a = vec!["import", "--from", "gspin", "gs.bin", "-o", "gs.mgbt"];
        a.extend(extra);
        mgbench(&a, &dir)
    };
    let o = import(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--program PATH[@ADDRESS]"),
        "{}",
        stderr(&o)
    );
    assert_eq!(main_references(&dir, "gs.mgbt"), None, "no file, no name");
    let o = import(&["--program", &nopie]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(main_references(&dir, "gs.mgbt"), Some(exact));
    // A PIE needs its address; a bad one is named; nothing is written.
    std::fs::remove_file(dir.join("gs.mgbt")).unwrap();
    for (flag, want) in [
        (pie.clone(), "position-independent"),
        (format!("{pie}@0x1234"), "not page-aligned"),
        (format!("{pie}@zz"), "not an address"),
        ("no/such/file".to_string(), "no/such/file"),
    ] {
        let o = import(&["--program", &flag]);
        assert_eq!(o.status.code(), Some(1), "{flag}");
        assert!(stderr(&o).contains("--program"), "{flag}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{flag}: {}", stderr(&o));
        assert!(!dir.join("gs.mgbt").exists(), "{flag}");
    }
}

/// `--backend auto` counts only the AVX-512 code a program runs whatever the CPU: a static
/// program holds glibc's AVX-512 string functions, which its IFUNCs choose by CPUID, and the
/// loader's register-saving trampolines; a program's own IFUNC chooses its own. QEMU's CPU
/// reports no AVX-512, so such programs run under QEMU (a static busybox went to ptrace
/// stepping every instruction: hours for a sort QEMU records in 7 s), while gather512, whose
/// own loop is AVX-512, still counts.
#[test]
fn auto_leaves_avx512_code_chosen_by_cpuid_to_qemu() {
    if !need_qemu("auto's AVX-512 scan") {
        return;
    }
    let dir = temp_dir("auto-cpuid");
    std::fs::write(
        dir.join("s.c"),
        r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
__attribute__((target("avx512f"))) static long sum512(const long *a, int n) {
  __m512i s = _mm512_setzero_si512();
  int i = 0;
  for (; i + 8 <= n; i += 8) s = _mm512_add_epi64(s, _mm512_loadu_si512(a + i));
  long r = _mm512_reduce_add_epi64(s);
  for (; i < n; i++) r += a[i];
  return r;
}
static long sum_plain(const long *a, int n) { long s = 0; for (int i = 0; i < n; i++) s += a[i]; return s; }
static long (*resolve_sum(void))(const long *, int) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? sum512 : sum_plain;
}
long sum(const long *a, int n) __attribute__((ifunc("resolve_sum")));
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4096;
  long *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *a);
  for (int i = 0; i < n; i++) a[i] = i;
  memcpy(b, a, n * sizeof *a);
  printf("%ld %zu\n", sum(b, n), strlen(argv[0]));
  return 0;
}
"#,
    )
    .unwrap();
    for (name, flags) in [("static", &["-static"][..]), ("ifunc", &[][..])] {
        let ok = Command::new("gcc")
            .args(["-O2", "-o", name, "s.c"])
            .args(flags)
            .current_dir(&dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "gcc {flags:?} (libc6-dev has the static C library)");
        let exe = dir.join(name).display().to_string();
        let o = mgbench(&["capture", "--full", "-o", "t.mgbt", "--", &exe], &dir);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("backend qemu (auto:"), "{name}: {e}");
        assert!(
            e.contains("AVX-512 instruction(s) all lie in code chosen by CPUID"),
            "{name}: {e}"
        );
        if name == "static" {
            assert!(
                e.contains("in trampolines that only save vector registers"),
                "{e}"
            );
        }
        assert!(stdout(&o).starts_with("8386560 "), "{name}: {}", stdout(&o));
        let t = read_trace(&dir.join("t.mgbt"));
        assert!(t.end.is_some_and(|end| end.recorded > 4096), "{name}");
    }
    // gather512's own loop is AVX-512: auto counts it (ptrace where the CPU has AVX-512).
    let o = mgbench(
        &["capture", "-o", "g.mgbt", "--", &app("gather512"), "--n=64"],
        &dir,
    );
    let e = stderr(&o);
    if cpu_has("avx512f") {
        assert!(e.contains("backend ptrace (auto:"), "{e}");
        // Its loop's, not the 40 of the loader's trampoline linked in beside it.
        let n: usize = e
            .split("gather512 holds ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{e}"));
        assert!((1..40).contains(&n), "{e}");
    } else {
        assert!(e.contains(NO_BACKEND_RUNS_IT), "{e}");
    }
}
