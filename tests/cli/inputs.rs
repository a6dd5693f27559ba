//! Real inputs: negative deltas and huge indices from pattern corpora, the corpus check script,
//! importers on what other tools really write, results kept by every command, and progress
//! bars that appear only on a terminal.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{have, mgbench, stderr, stdout, temp_dir};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus")
}

fn json_records(out: &str) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(out)
        .unwrap_or_else(|e| panic!("{e}: {out}"))
        .as_array()
        .unwrap()
        .clone()
}

const QUICK: &[&str] = &[
    "--format",
    "json",
    "--no-save",
    "--no-stream",
    "-R",
    "1",
    "--warmup",
    "0",
    "-t",
    "1",
];

#[test]
fn negative_deltas_run_in_every_kernel() {
    let dir = temp_dir("negdelta");
    let file = corpus().join("negative-deltas.json");
    let mut args = vec!["replay", file.to_str().unwrap()];
    args.extend(QUICK);
    let o = mgbench(&args, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = json_records(&stdout(&o));
    let got: Vec<(String, i64, Option<i64>, u64)> = recs
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["delta"].as_i64().unwrap(),
                r["delta_scatter"].as_i64(),
                r["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("down-gather".into(), -8, None, 8 * 8 * 4096),
            ("down-scatter".into(), -1, None, 8 * 4 * 2048),
            ("gs-mixed".into(), -5, Some(4), 8 * 8 * 1000),
            ("multi-down".into(), -4, None, 8 * 3 * 512),
        ]
    );
    // Buffers span exactly min..max over all iterations: max index + |delta| (count - 1) + 1.
    assert_eq!(recs[0]["sparse_bytes"], 8 * (7 + 8 * 4095 + 1));
    assert_eq!(
        recs[2]["sparse_bytes"],
        8 * ((12 + 5 * 999 + 1) + (3 + 4 * 999 + 1))
    );
    // Inline flags take negative values too.
    let o = mgbench(
        &[
            "replay",
            "-p",
            "0,1,2,3",
            "-d",
            "-4",
            "-l",
            "100",
            "--format",
            "csv",
            "--no-save",
            "--no-stream",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).lines().nth(1).unwrap().contains(",-4,"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn huge_indices_are_refused_then_run_compacted() {
    let dir = temp_dir("compact");
    let file = corpus().join("huge-index.json");
    let f = file.to_str().unwrap();
    let mut args = vec!["replay", f];
    args.extend(QUICK);
    let o = mgbench(&args, &dir);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("config #1") && e.contains("64.0 TiB") && e.contains("--compact-gaps"),
        "{e}"
    );
    args.push("--compact-gaps");
    let o = mgbench(&args, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = json_records(&stdout(&o));
    assert!(recs[0]["compaction"].is_null());
    let c = &recs[1]["compaction"];
    assert_eq!(c["max_gap_bytes"], 2 << 20);
    assert_eq!(c["gaps_shrunk"], 1);
    assert_eq!(c["original_span_elems"], 8_795_795_864_438u64);
    assert!(c["span_elems"].as_u64().unwrap() < 3 * (1 << 18));
    assert!(recs[1]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("compacted by --compact-gaps")));
    // A bound given explicitly; one that is not a whole number of lines is refused.
    let o = mgbench(
        &[
            "replay",
            f,
            "--compact-gaps=4KiB",
            "--no-save",
            "--no-stream",
            "-R",
            "1",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["replay", f, "--compact-gaps=1000", "--no-save"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("multiple of 64"), "{}", stderr(&o));
}

#[test]
fn compact_gaps_if_needed_leaves_what_fits_alone() {
    let dir = temp_dir("compact-if-needed");
    let file = corpus().join("huge-index.json");
    let f = file.to_str().unwrap();
    // The huge config is compacted, with the reason, and the ordinary one is not.
    let mut args = vec!["replay", f, "--compact-gaps-if-needed"];
    args.extend(QUICK);
    let o = mgbench(&args, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = json_records(&stdout(&o));
    assert!(recs[0]["compaction"].is_null());
    assert_eq!(recs[1]["compaction"]["gaps_shrunk"], 1);
    let notes = recs[1]["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| {
            let n = n.as_str().unwrap();
            n.contains("compacted by --compact-gaps-if-needed, as it needed 64.0 TiB and")
                && n.contains("is available: 1 distance(s) longer than 2.0 MiB shrunk")
        }),
        "{notes:?}"
    );
    // Distances of 8 MB fit as they are: --compact-gaps shrinks them, -if-needed does not.
    let inline = ["-p", "0,1000000,2000000,3000000,4000000"];
    for (flag, compacted) in [
        ("--compact-gaps", true),
        ("--compact-gaps-if-needed", false),
    ] {
        let mut args = vec!["replay", flag];
        args.extend(inline);
        args.extend(QUICK);
        let o = mgbench(&args, &dir);
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
        let recs = json_records(&stdout(&o));
        assert_eq!(!recs[0]["compaction"].is_null(), compacted, "{flag}");
    }
    // Asking for both is refused.
    let o = mgbench(
        &["replay", f, "--compact-gaps", "--compact-gaps-if-needed"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn corpus_check_reports_each_file() {
    if !have("python3", "the corpus check script") {
        return;
    }
    let dir = temp_dir("corpus");
    for f in ["negative-deltas.json", "huge-index.json", "uniform.json"] {
        std::fs::copy(corpus().join(f), dir.join(f)).unwrap();
    }
    std::fs::write(
        dir.join("broken.json"),
        r#"[{"kernel": "gather", "pattern": [0, 1.5]}]"#,
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = Command::new("python3")
        .arg(root.join("scripts/check-corpus.py"))
        .arg(&dir)
        .arg("--mgbench")
        .arg(env!("CARGO_BIN_EXE_mgbench"))
        .arg("--threads")
        .arg("1")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"))
            .to_string()
    };
    assert!(
        line("broken.json").contains("refused: ") && line("broken.json").contains("not an integer"),
        "{out}"
    );
    assert!(line("huge-index.json").contains("ran (compacted"), "{out}");
    assert!(
        line("negative-deltas.json").contains("ran (4 with negative deltas)"),
        "{out}"
    );
    assert!(line("uniform.json").ends_with("ran"), "{out}");
    assert!(out.contains("3 of 4 file(s) ran"), "{out}");
}

#[test]
fn imports_accept_real_tool_output_and_keep_existing_files() {
    let dir = temp_dir("import-real");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("capture/tests/data");
    let o = mgbench(
        &[
            "import",
            "--from",
            "memgaze",
            data.join("memgaze-fractional.txt").to_str().unwrap(),
            "-o",
            "mg.mgbt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("imported 4 accesses"), "{}", stderr(&o));
    let o = mgbench(
        &[
            "import",
            "--from",
            "lackey",
            data.join("lackey-full.txt").to_str().unwrap(),
            "-o",
            "lk.mgbt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("skipped 2 superblock (SB) lines") && e.contains("Valgrind message lines"),
        "{e}"
    );
    // A failed import names the line and leaves the existing output untouched.
    let before = std::fs::read(dir.join("mg.mgbt")).unwrap();
    std::fs::write(
        dir.join("bad.txt"),
        "0x1 0x2 0 1.0 1\n0x1 0x2 0 not-a-time 1\n",
    )
    .unwrap();
    let o = mgbench(
        &["import", "--from", "memgaze", "bad.txt", "-o", "mg.mgbt"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad.txt: line 2: time"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(dir.join("mg.mgbt")).unwrap(), before);
    assert!(!dir.join("mg.mgbt.tmp").exists());
}

#[test]
fn stream_and_analyze_keep_their_results() {
    let dir = temp_dir("keep-results");
    let o = mgbench(
        &["stream", "-s", "200000", "-R", "3", "-t", "1", "-o", "res"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let files: Vec<String> = std::fs::read_dir(dir.join("res"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let json = files
        .iter()
        .find(|f| f.ends_with(".json"))
        .expect("stream JSON");
    assert!(json.starts_with("stream-"), "{files:?}");
    assert!(files.iter().any(|f| f.ends_with(".csv")), "{files:?}");
    assert!(!files.iter().any(|f| f.ends_with(".tmp")), "{files:?}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("res").join(json)).unwrap()).unwrap();
    assert_eq!(v["elements"], 200000);
    let o = mgbench(
        &[
            "stream",
            "-s",
            "200000",
            "-R",
            "3",
            "-t",
            "1",
            "--no-save",
            "-o",
            "none",
        ],
        &dir,
    );
    assert!(o.status.success());
    assert!(!dir.join("none").exists());

    // analyze -o: the JSON report in a file (stdout keeps its table).
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("capture/tests/data");
    let o = mgbench(
        &[
            "import",
            "--from",
            "lackey",
            data.join("lackey.txt").to_str().unwrap(),
            "-o",
            "t.mgbt",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["analyze", "t.mgbt", "--no-apex", "-o", "an.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("spatial"), "{}", stdout(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("an.json")).unwrap()).unwrap();
    assert_eq!(v["accesses"], 6);
    let o = mgbench(&["analyze", "t.mgbt", "-o", "no/such/dir/an.json"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no/such/dir"), "{}", stderr(&o));
}

/// Writes a gs_patterns record stream of `n` random loads (big enough to import for a while).
fn gspin_file(path: &Path, n: usize) {
    let mut out = Vec::with_capacity(12 * (n + 1));
    let rec = |out: &mut Vec<u8>, t: u16, s: u16, a: u64| {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&a.to_le_bytes());
    };
    rec(&mut out, 0xa, 4, 0x401000);
    let mut x = 88172645463325252u64;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rec(&mut out, 0, 8, 0x100000 + 8 * (x % (1 << 20)));
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn progress_is_drawn_on_a_terminal_only() {
    if !have("script", "the progress-bar test (a pseudo-terminal)") {
        return;
    }
    let dir = temp_dir("progress");
    gspin_file(&dir.join("big.gspin"), 2_000_000);
    let exe = env!("CARGO_BIN_EXE_mgbench");
    // On a pseudo-terminal (script(1)): the bar is drawn, with the phase and a byte count.
    let tty = |extra: &str| {
        let o = Command::new("script")
            .args(["-qec"])
            .arg(format!(
                "{exe} {extra} import --from gspin big.gspin -o big.mgbt"
            ))
            .arg("/dev/null")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let drawn = tty("");
    assert!(
        drawn.contains("importing") && drawn.contains("MiB"),
        "{drawn:?}"
    );
    assert!(drawn.contains("imported 2000000 accesses"), "{drawn:?}");
    // --quiet: no bar, the summary line stays.
    let quiet = tty("--quiet");
    assert!(
        !quiet.contains("importing") && !quiet.contains('\u{1b}'),
        "{quiet:?}"
    );
    assert!(quiet.contains("imported 2000000 accesses"), "{quiet:?}");
    // Not a terminal: nothing but the summary on stderr.
    let o = mgbench(
        &["import", "--from", "gspin", "big.gspin", "-o", "big2.mgbt"],
        &dir,
    );
    assert!(o.status.success());
    assert!(
        !stderr(&o).contains('\r') && !stderr(&o).contains('\u{1b}'),
        "{:?}",
        stderr(&o)
    );
}
