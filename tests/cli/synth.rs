//! `mgbench synth` and `mgbench profile` on captured demo programs.

use std::path::Path;

use crate::common::{app, build_c, have, mgbench, read_indices, stderr, stdout, temp_dir};

fn patterns(path: &Path) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v.as_array().unwrap().clone()
}

fn capture(dir: &Path, trace: &str, args: &[&str]) {
    let mut a = vec!["capture", "--full", "-o", trace];
    a.extend(args);
    let o = mgbench(&a, dir);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn spmv_gather_is_its_columns_with_sweeps_as_count() {
    if !have("qemu-x86_64", "synth on a captured SpMV") {
        return;
    }
    let dir = temp_dir("synth-spmv");
    let (rows, nnz, iters) = (1024u64, 4u64, 3u64);
    capture(
        &dir,
        "s.mgbt",
        &[
            &app("spmv"),
            &format!("--rows={rows}"),
            &format!("--nnz={nnz}"),
            &format!("--iters={iters}"),
            "--truth=cols.txt",
        ],
    );
    let o = mgbench(&["synth", "s.mgbt", "-o", "spmv.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let cols = read_indices(&dir.join("cols.txt"));
    let min = *cols.iter().min().unwrap();
    let ps = patterns(&dir.join("spmv.json"));
    // The program's one gather (writing the truth file gathers too, in the C library's
    // printf and memmove, which a debug file names where libc6-dbg is installed).
    let g: Vec<&serde_json::Value> = ps
        .iter()
        .filter(|p| {
            p["kernel"] == "gather"
                && p["source"]["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("spmv.c"))
        })
        .collect();
    assert_eq!(g.len(), 1, "{ps:?}");
    let got: Vec<u64> = g[0]["pattern"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(got, cols.iter().map(|c| c - min).collect::<Vec<_>>());
    assert_eq!(
        (g[0]["delta"].as_u64(), g[0]["count"].as_u64()),
        (Some(0), Some(iters))
    );
    assert_eq!(g[0]["source"]["function"], "spmv_rows");
    assert!(g[0]["source"]["file"].as_str().unwrap().ends_with("spmv.c"));
    assert_eq!(g[0]["element_size"], 8);
    assert!(g[0]["name"].as_str().unwrap().starts_with("spmv_rows:"));
    // replay runs the file unchanged.
    let o = mgbench(
        &[
            "replay",
            "spmv.json",
            "--no-stream",
            "--no-save",
            "--runs",
            "2",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("spmv_rows"));
}

#[test]
fn histogram_scatter_is_its_keys() {
    if !have("qemu-x86_64", "synth on a captured histogram") {
        return;
    }
    let dir = temp_dir("synth-hist");
    capture(
        &dir,
        "h.mgbt",
        &[
            &app("histogram"),
            "--n=4000",
            "--bins=8192",
            "--iters=1",
            "--truth=keys.txt",
        ],
    );
    let o = mgbench(&["synth", "h.mgbt", "-o", "h.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let keys = read_indices(&dir.join("keys.txt"));
    let min = *keys.iter().min().unwrap();
    let ps = patterns(&dir.join("h.json"));
    let s = ps
        .iter()
        .find(|p| p["kernel"] == "scatter")
        .expect("scatter pattern");
    let got: Vec<u64> = s["pattern"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(got, keys.iter().map(|k| k - min).collect::<Vec<_>>());
    assert_eq!(s["source"]["function"], "accumulate");
}

#[test]
fn stencil_yields_nothing_and_says_why() {
    if !have("qemu-x86_64", "synth on a captured stencil") {
        return;
    }
    let dir = temp_dir("synth-stencil");
    capture(&dir, "st.mgbt", &[&app("stencil"), "--n=128", "--iters=2"]);
    let o = mgbench(&["synth", "st.mgbt", "-o", "st.json", "--explain"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("no gather/scatter pattern survived"), "{e}");
    assert!(e.contains("regular (-1/0/+1 only)"), "{e}");
    assert!(!dir.join("st.json").exists());
    // Stencil accesses in `sweep` are regular; nothing from it is kept.
    assert!(
        !e.lines()
            .any(|l| l.contains("sweep") && l.ends_with("kept")),
        "{e}"
    );
}

#[test]
fn sampled_streams_are_not_gathers() {
    if !have("qemu-x86_64", "synth on sampled captures") {
        return;
    }
    let dir = temp_dir("synth-sampled");
    // The default sampling: skips counted inline end when the poller looks, so the jumps
    // between windows differ (at periods counted by callbacks they repeat, and filter 5
    // drops them anyway).
    let sampled = |trace: &str, prog: &[&str]| {
        let mut a = vec!["capture", "-o", trace];
        a.extend(prog);
        let o = mgbench(&a, &dir);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    // A triad streams three arrays: each sample window sees a stretch of each, far from the
    // last window's. Those jumps are not distances (they made five gathers and scatters).
    sampled("t.mgbt", &[&app("triad"), "--n=4194304", "--sweeps=4"]);
    let o = mgbench(&["synth", "t.mgbt", "-o", "t.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("no gather/scatter pattern survived"), "{e}");
    assert!(!dir.join("t.json").exists());
    // SpMV's gather on x stays one, from its windows.
    sampled(
        "s.mgbt",
        &[&app("spmv"), "--rows=65536", "--nnz=16", "--iters=30"],
    );
    let o = mgbench(&["synth", "s.mgbt", "-o", "s.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let ps = patterns(&dir.join("s.json"));
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0]["kernel"], "gather");
    assert_eq!(ps[0]["source"]["function"], "spmv_rows");
}

fn gspin(records: &[(u16, u16, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(t, s, a) in records {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&a.to_le_bytes());
    }
    out
}

#[test]
fn gs_patterns_records_give_the_patterns_its_filters_imply() {
    // A hand-made gs_patterns stream: a random gather (kept), a unit-stride load (regular), a
    // gather with only two distinct distances and short jumps (filter 5), and a rare random
    // gather (filter 4). No symbols exist for these pcs, so --keep-unsymbolized.
    let dir = temp_dir("synth-gspin");
    let mut recs = Vec::new();
    let mut s = 5u64;
    for i in 0..4000u64 {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
        recs.push((0xa, 4, 0x401000));
        recs.push((0, 8, 0x1000_0000 + 8 * ((s >> 33) % 100_000)));
        recs.push((0xa, 4, 0x401010));
        recs.push((0, 8, 0x2000_0000 + 8 * i));
        recs.push((0xa, 4, 0x401020));
        recs.push((0, 8, 0x3000_0000 + 8 * (i % 2) * 3));
        if i < 300 {
            recs.push((0xa, 4, 0x401030));
            recs.push((0, 8, 0x4000_0000 + 8 * ((s >> 20) % 100_000)));
        }
    }
    std::fs::write(dir.join("t.raw"), gspin(&recs)).unwrap();
    let o = mgbench(
        &["import", "--from", "gspin", "t.raw", "-o", "t.mgbt"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(
        &[
            "synth",
            "t.mgbt",
            "-o",
            "t.json",
            "--keep-unsymbolized",
            "--explain",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    let ps = patterns(&dir.join("t.json"));
    assert_eq!(ps.len(), 1, "{e}");
    assert_eq!(ps[0]["source"]["ip"], "0x401000");
    assert_eq!(ps[0]["instances"], 4000);
    assert!(
        e.lines()
            .any(|l| l.starts_with("0x401020") && l.contains("unique distances")),
        "{e}"
    );
    assert!(
        e.lines()
            .any(|l| l.starts_with("0x401030") && l.contains("300 instances < 1024")),
        "{e}"
    );
    // Thresholds move the result as documented.
    let o = mgbench(
        &[
            "synth",
            "t.mgbt",
            "-o",
            "t2.json",
            "--keep-unsymbolized",
            "--min-instances",
            "200",
            "--min-unique-distances",
            "1",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(patterns(&dir.join("t2.json")).len(), 3);
}

#[test]
fn synth_bad_input() {
    let dir = temp_dir("synth-bad");
    std::fs::write(dir.join("x.mgbt"), "not a trace").unwrap();
    let o = mgbench(&["synth", "x.mgbt"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not an mgbench trace"),
        "{}",
        stderr(&o)
    );
    let o = mgbench(&["synth", "missing.mgbt"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot open trace missing.mgbt"));
}

#[test]
fn profile_runs_capture_synth_and_replay() {
    if !have("qemu-x86_64", "mgbench profile") {
        return;
    }
    let dir = temp_dir("profile");
    let o = mgbench(
        &[
            "profile",
            "--full",
            "-o",
            "p.json",
            "--runs",
            "2",
            "--",
            &app("spmv"),
            "--rows=2048",
            "--nnz=8",
            "--iters=2",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // The program keeps stdout (`profile -- gzip -c F > F.gz` must give a valid archive):
    // its one line and nothing of mgbench's.
    let out = stdout(&o);
    assert!(
        out.starts_with("spmv rows=2048 nnz=8 iters=2") && out.lines().count() == 1,
        "{out}"
    );
    let err = stderr(&o);
    assert!(err.contains("Where the patterns come from"), "{err}");
    assert!(
        err.contains("spmv_rows (") && err.contains("spmv.c:"),
        "{err}"
    );
    assert!(err.contains("MB/s") && err.contains("Copy:"), "{err}");
    assert!(dir.join("p.json").exists());
}

/// A stripped program (as distributions ship them, e.g. Debian's `sysbench`) names none of
/// its own code, so the paper's filter drops its candidates (the C library's named ones are
/// too few here): `synth` says where they are and how to keep them, and `profile` keeps them
/// itself rather than ending with nothing to replay.
#[test]
fn profile_of_a_stripped_program_replays_its_unnamed_patterns() {
    if !have("qemu-x86_64", "mgbench profile") || !have("objcopy", "stripping a program") {
        return;
    }
    let dir = temp_dir("profile-stripped");
    let o = std::process::Command::new("objcopy")
        .arg("--strip-all")
        .arg(app("gather"))
        .arg(dir.join("gather"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run = ["./gather", "--n=4096", "--reps=2"];
    let mut args = vec!["capture", "--full", "-o", "g.mgbt", "--"];
    args.extend(run);
    let o = mgbench(&args, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["synth", "g.mgbt", "-o", "s.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("the first gather+0x")
            && err.contains("--keep-unsymbolized keeps them")
            && err.contains("nothing written"),
        "{err}"
    );
    assert!(!dir.join("s.json").exists());

    let mut args = vec!["profile", "--full", "-o", "p.json", "--runs", "1", "--"];
    args.extend(run);
    let o = mgbench(&args, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no named pattern survived the filters")
            && err.contains("mining again with --keep-unsymbolized"),
        "{err}"
    );
    let patterns: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("p.json")).unwrap()).unwrap();
    let names: Vec<&str> = patterns
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("gather+0x") && n.ends_with("-gather")),
        "{names:?}"
    );
    // Its source says the same place, for objdump.
    for p in patterns.as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let place = p["source"]["place"].as_str().unwrap_or_default();
        assert!(
            name.starts_with(&format!("{place}-")) && place.starts_with("gather+0x"),
            "{p}"
        );
        // Its function, as the unwind table bounds it.
        let unnamed = p["source"]["unnamed_function"].as_str().unwrap_or_default();
        assert!(unnamed.starts_with("sub_"), "{p}");
    }
    // Replayed beside STREAM, under that name.
    assert!(err.contains("Triad:"), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("gather+0x") && l.contains("gather ")),
        "{err}"
    );
    // And where it comes from says it has no symbol, not "??", and which function it is in.
    assert!(
        err.lines()
            .any(|l| l.trim_start().starts_with("gather+0x") && l.contains(" no symbol, in sub_")),
        "{err}"
    );
}

/// A stripped program whose own gather outranks the C library's malloc internals, which the
/// library's debug file names (Debian's `bc` computing digits): `synth` keeps the named ones
/// only, as the paper's filter does, and `profile` mines again to replay the busiest, the
/// program's own gather first, where it replayed ten of malloc's.
#[test]
fn profile_keeps_a_stripped_programs_own_patterns_over_named_library_ones() {
    if !have("qemu-x86_64", "mgbench profile") || !have("gcc", "building a test program") {
        return;
    }
    let dir = temp_dir("profile-stripped-mixed");
    build_c(
        &dir,
        "mixed",
        r#"#include <stdio.h>
#include <stdlib.h>
int main(void) {
    enum { N = 1 << 18, LIVE = 64 };
    unsigned *idx = malloc(N * sizeof *idx);
    double *t = malloc(N * sizeof *t);
    void *live[LIVE] = {0};
    unsigned long s = 88172645463325252ul;
    for (long i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        idx[i] = s % N, t[i] = i;
    }
    /* malloc and free of varied sizes: the library's tcache gathers and scatters */
    for (long i = 0; i < 40000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        unsigned k = s % LIVE;
        free(live[k]);
        live[k] = malloc(16 + (s >> 20) % 1000);
    }
    double sum = 0;
    for (int r = 0; r < 4; r++)
        for (long i = 0; i < N; i++) sum += t[idx[i]];
    printf("%.1f\n", sum);
    return 0;
}
"#,
        &["-O2", "-s"],
    );
    let o = mgbench(
        &["capture", "--full", "-q", "-o", "m.mgbt", "--", "./mixed"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["synth", "m.mgbt", "-o", "s.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("without a symbol come before the top 10 named ones"),
        "{err}"
    );
    let names = |file: &str| -> Vec<String> {
        patterns(&dir.join(file))
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_string))
            .collect()
    };
    let named = names("s.json");
    assert!(
        !named.is_empty() && named.iter().all(|n| !n.starts_with("mixed+0x")),
        "{named:?}"
    );

    let o = mgbench(
        &[
            "profile", "--full", "-o", "p.json", "--runs", "1", "--", "./mixed",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("rank among the top 10 (code in mixed, which no symbol or debug file names)")
            && err.contains("mining again with --keep-unsymbolized"),
        "{err}"
    );
    let replayed = names("p.json");
    assert!(
        replayed[0].starts_with("mixed+0x") && replayed[0].ends_with("-gather"),
        "{replayed:?}"
    );
    // The named ones that still rank stay beside it.
    assert!(
        replayed.iter().any(|n| !n.starts_with("mixed+0x")),
        "{replayed:?}"
    );
}

#[test]
fn profile_compacts_only_the_patterns_that_do_not_fit() {
    if !have("qemu-x86_64", "mgbench profile") {
        return;
    }
    // One instruction gathers from two halves a TiB apart: its pattern as mined needs a
    // TiB-long buffer. profile runs it compacted and says why; --compact-gaps=4KiB is passed on.
    let dir = temp_dir("profile-far");
    for (extra, bound) in [(None, "2.0 MiB"), (Some("--compact-gaps=4KiB"), "4.0 KiB")] {
        let mut args = vec!["profile", "--full", "-o", "far.json", "--runs", "1"];
        args.extend(extra);
        let prog = app("gather");
        args.extend(["--", &prog, "--far=1", "--reps=2"]);
        let o = mgbench(&args, &dir);
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("gather_far_sum"), "{err}");
        let why = match extra {
            None => "compacted by --compact-gaps-if-needed, as it needed 1.0 TiB and ",
            Some(_) => "compacted by --compact-gaps: ",
        };
        assert!(err.contains(why), "{err}");
        assert!(
            err.contains(&format!("distance(s) longer than {bound} shrunk")),
            "{err}"
        );
    }
}

/// A C++ template function: `--roi` takes the name a programmer writes (`k::gather`, as gdb
/// does), and the pattern is named without return type and parameters; so too where `-O2`
/// inlined it into `main` (no symbol of its own: found in DWARF, named after the function
/// whose line it is).
#[test]
fn cpp_functions_are_found_and_named_as_written() {
    if !have("qemu-x86_64", "capturing a C++ program") || !have("g++", "a C++ program") {
        return;
    }
    const SRC: &str = r#"#include <cstdint>
#include <cstdio>
#include <vector>
namespace k {
template <class T>
ATTR T gather(const std::vector<T> &x, const std::vector<uint32_t> &idx) {
    T s = 0;
    for (auto i : idx) s += x[i];
    return s;
}
}  // namespace k
int main() {
    std::vector<double> x(1 << 14);
    std::vector<uint32_t> idx(1 << 14);
    uint32_t r = 1;
    for (auto &i : idx) i = (r = r * 1664525u + 1013904223u) % (1 << 14);
    std::printf("%f\n", k::gather(x, idx));
}
"#;
    let dir = temp_dir("synth-cpp");
    for (attr, inlined) in [("__attribute__((noinline))", false), ("inline", true)] {
        std::fs::write(dir.join("g.cpp"), SRC.replace("ATTR", attr)).unwrap();
        let o = std::process::Command::new("g++")
            .args(["-O2", "-g", "-o", "g", "g.cpp"])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let img = mgbench_capture::symbols::ElfImage::open(&dir.join("g")).unwrap();
        assert_eq!(img.find_function("k::gather").is_err(), inlined);
        capture(&dir, "g.mgbt", &["--roi", "k::gather", "./g"]);
        let o = mgbench(&["synth", "g.mgbt", "-o", "g.json"], &dir);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("g.json")).unwrap()).unwrap();
        let names: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 1, "{attr}: {names:?}");
        assert!(
            names[0].starts_with("k::gather<double>:"),
            "{attr}: {names:?}"
        );
        assert_eq!(v[0]["pattern"].as_array().unwrap().len(), 1 << 14);
        if inlined {
            assert_eq!(v[0]["source"]["function"], "main");
            assert!(v[0]["source"]["inlined"]
                .as_str()
                .is_some_and(|f| f.contains("k::gather<double>")));
        }
    }
}
