//! `mgbench replay` and `mgbench stream` as users run them: exit codes, stdout formats,
//! results files, errors.

use std::path::PathBuf;

use crate::common::{mgbench, mgbench_json, note_starting, stderr, temp_dir};

#[test]
fn inline_replay_prints_json_and_writes_results_files() {
    let dir = temp_dir("inline");
    let v = mgbench_json(
        &[
            "replay",
            "--pattern",
            "UNIFORM:8:2",
            "--kernel",
            "Gather",
            "--delta",
            "16",
            "--count",
            "4096",
            "--runs",
            "3",
            "--stream-size",
            "200000",
            "--format",
            "json",
            "--out",
            "res",
        ],
        &dir,
    );
    let r = &v[0];
    for key in [
        "name",
        "kernel",
        "pattern_len",
        "delta",
        "count",
        "wrap",
        "threads",
        "ranks",
        "bytes",
        "min_time_s",
        "run_times_s",
        "bandwidth_mbs",
        "stream_copy_mbs",
        "pct_of_stream",
        "host",
        "mgbench_version",
        "time",
    ] {
        assert!(r.get(key).is_some(), "missing {key}");
    }
    assert_eq!(r["bytes"], 8 * 8 * 4096);
    assert_eq!(r["delta"], 16);
    assert!(r["pct_of_stream"].as_f64().unwrap() > 0.0);
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("res"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let json = files.iter().find(|p| {
        let s = p.to_string_lossy();
        s.ends_with(".json") && !s.ends_with("-stream.json")
    });
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json.expect("results json")).unwrap()).unwrap();
    assert_eq!(saved[0]["bandwidth_mbs"], r["bandwidth_mbs"]);
    assert!(files
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "csv")));
    assert!(files
        .iter()
        .any(|p| p.to_string_lossy().ends_with("-stream.json")));
    assert!(!files.iter().any(|p| p.to_string_lossy().ends_with(".tmp")));
}

#[test]
fn table_output_and_csv_output() {
    let dir = temp_dir("table");
    let o = mgbench(
        &[
            "replay",
            "-p",
            "0,1,2,3",
            "-k",
            "scatter",
            "-d",
            "2",
            "-l",
            "2048",
            "-t",
            "2",
            "--no-stream",
            "--no-save",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("MB/s") && out.contains("scatter"), "{out}");
    assert!(out.contains("racy-by-design"), "{out}");
    assert!(!dir.join("results").exists(), "--no-save writes nothing");
    let o = mgbench(
        &[
            "replay",
            "-p",
            "0,1,2,3",
            "-k",
            "scatter",
            "-d",
            "2",
            "-l",
            "2048",
            "-t",
            "2",
            "--atomic",
            "--no-stream",
            "--no-save",
            "-f",
            "csv",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("schema_version,time,name,kernel"), "{out}");
    assert_eq!(out.lines().count(), 2);
    assert!(!out.contains("racy by design"));
}

/// A configuration whose runs are little more than starting the threads measures the start,
/// not memory: its record says so and names a count that would take about 1 ms.
#[test]
fn runs_too_short_to_time_name_the_count_that_would_do() {
    let dir = temp_dir("short-run");
    let tiny = [
        "replay",
        "-p",
        "0,1,2,3",
        "-l",
        "4",
        "-t",
        "2",
        "--no-stream",
        "--no-save",
    ];
    let v = mgbench_json(&[&tiny[..], &["-f", "json"]].concat(), &dir);
    let r = &v[0];
    let min = r["min_time_s"].as_f64().unwrap();
    let note = note_starting(r, "too short to time: ")
        .unwrap_or_else(|| panic!("no note on the short runs ({min} s): {}", r["notes"]));
    assert!(note.contains("starting a run alone takes about"), "{note}");
    // The count named runs about a millisecond at the measured pace: 4 x 1 ms / min.
    let count: f64 = note
        .split("a count of about ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {note:?}"));
    let expected = (4.0 * 1e-3 / min).round();
    assert!(
        (count - expected).abs() <= 1.0,
        "{count} vs {expected}: {note}"
    );
    // The table flags the row and shows its time in digits, not as 0.000000.
    let o = mgbench(&tiny, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out
        .lines()
        .find(|l| l.contains(" gather "))
        .unwrap_or_else(|| panic!("no row: {out}"));
    assert!(row.contains("too short to time (see its note)"), "{row}");
    assert!(row.contains("e-") && !row.contains("0.000000"), "{row}");
    // A run of megabytes is long beside its start: no note.
    let v = mgbench_json(
        &[
            "replay",
            "-p",
            "UNIFORM:8:1",
            "-l",
            "65536",
            "-t",
            "2",
            "--no-stream",
            "--no-save",
            "-f",
            "json",
        ],
        &dir,
    );
    assert!(!v[0]["notes"].to_string().contains("too short"), "{}", v[0]);
}

#[test]
fn stream_json_has_the_documented_keys() {
    let dir = temp_dir("stream");
    let v = mgbench_json(
        &[
            "stream",
            "--size",
            "300000",
            "--format",
            "json",
            "--threads",
            "2",
        ],
        &dir,
    );
    for key in [
        "copy_mbs",
        "scale_mbs",
        "add_mbs",
        "triad_mbs",
        "elements",
        "threads",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["elements"], 300000);
    assert_eq!(v["threads"], 2);
    assert_eq!(v["validated"], true);
}

/// `MGBENCH_MACHINE` names the machine in results instead of its hostname (machines that
/// share one stay apart in `compare`); blank, the hostname stays.
#[test]
fn mgbench_machine_names_the_host_in_results() {
    let dir = temp_dir("machine-name");
    let run = |name: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgbench"))
            .args([
                "stream",
                "--size",
                "100000",
                "--format",
                "json",
                "--no-save",
            ])
            .env("MGBENCH_MACHINE", name)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["host"]["hostname"].as_str().unwrap().to_string()
    };
    assert_eq!(run("lab-node-a"), "lab-node-a");
    let plain = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(run("  "), plain.trim());
}

#[test]
fn bad_pattern_file_fails_cleanly_and_runs_nothing() {
    let dir = temp_dir("bad");
    std::fs::write(
        dir.join("p.json"),
        r#"[{"pattern":"UNIFORM:8:1"}, {"name":"half","pattern":[1],"delta":-3.5}]"#,
    )
    .unwrap();
    let o = mgbench(&["replay", "p.json", "--no-stream"], &dir);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("mgbench: p.json: config #1 (\"half\"): \"delta\": -3.5 is not an integer"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "nothing ran");
    assert!(!dir.join("results").exists());
}

#[test]
fn usage_errors() {
    let dir = temp_dir("usage");
    let o = mgbench(&["replay", "--delta", "4"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--pattern"), "{}", stderr(&o));
    let o = mgbench(&["replay", "--threads", "0", "-p", "0"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
    let o = mgbench(&["replay", "--frobnicate"], &dir);
    assert_eq!(o.status.code(), Some(2), "clap usage errors exit 2");
    let o = mgbench(&["stream", "--size", "1", "--threads", "2"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
    let o = mgbench(
        &["replay", "-p", "UNIFORM:8:1", "--out", "/proc/nope"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--out"), "{}", stderr(&o));
}

#[test]
fn unwritable_results_directory_fails_before_running() {
    let dir = temp_dir("unwritable");
    std::fs::write(dir.join("file"), "not a directory").unwrap();
    let o = mgbench(
        &[
            "replay",
            "-p",
            "UNIFORM:8:1",
            "--no-stream",
            "--out",
            "file/sub",
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot create results directory"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
}
