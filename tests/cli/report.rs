//! `mgbench report` and `mgbench compare` as users run them.

use std::path::{Path, PathBuf};

use crate::common::{app, have, mgbench, stderr, stdout, temp_dir};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("report/tests/data")
}

#[test]
fn report_writes_one_page_from_a_directory_and_files() {
    let dir = temp_dir("report");
    let d = data();
    let o = mgbench(&["report", d.to_str().unwrap(), "-o", "r.html"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("report -> r.html (43 figure(s)"),
        "{}",
        stderr(&o)
    );
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(html.contains("data-fig=\"bandwidth-bandwidth\""));
    // Affinity (3 heatmaps, signal, PDFs, radar), its comparison (radar, 2 PDFs) and the
    // zoom's interval tree, from the rowcol fixtures.
    for fig in [
        "affinity-heat-sd-",
        "affinity-heat-sa-",
        "affinity-heat-si-",
        "affinity-signal-",
        "affinity-radar-",
        "zoom-intervals-",
    ] {
        assert!(html.contains(&format!("data-fig=\"{fig}")), "{fig}");
    }
    // Files given one by one, with a baseline.
    let a = d.join("machine-a-replay.json");
    let c = d.join("machine-c-replay.json");
    let o = mgbench(
        &[
            "report",
            a.to_str().unwrap(),
            c.to_str().unwrap(),
            "--baseline",
            "ddr",
            "-o",
            "two.html",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(dir.join("two.html")).unwrap();
    assert!(html.contains("pairwise-vm-vs-ddr-node"));
    // Errors: a file report cannot read (nothing written), a bad baseline, an unusable -o.
    std::fs::write(dir.join("notes.json"), "{\"hello\": 1}").unwrap();
    let o = mgbench(&["report", "notes.json", "-o", "bad.html"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("notes.json"), "{}", stderr(&o));
    assert!(!dir.join("bad.html").exists());
    let o = mgbench(
        &[
            "report",
            a.to_str().unwrap(),
            "--baseline",
            "zzz",
            "-o",
            "b.html",
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--baseline zzz"), "{}", stderr(&o));
    let o = mgbench(
        &["report", a.to_str().unwrap(), "-o", "no/dir/r.html"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no/dir"), "{}", stderr(&o));
    let o = mgbench(&["report"], &dir);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn compare_prints_table_json_and_csv() {
    let dir = temp_dir("compare");
    let d = data();
    let o = mgbench(&["compare", d.to_str().unwrap()], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.starts_with("3 machine(s); baseline vm"), "{t}");
    assert!(
        t.contains("hbm-node") && t.contains("threads differ"),
        "{t}"
    );
    assert!(
        stderr(&o).contains("MPI or GPU-sweep record(s) left out"),
        "{}",
        stderr(&o)
    );
    let o = mgbench(
        &[
            "compare",
            d.to_str().unwrap(),
            "--format",
            "json",
            "--baseline",
            "hbm",
        ],
        &dir,
    );
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["machines"][v["baseline"].as_u64().unwrap() as usize]["name"],
        "hbm-node"
    );
    let o = mgbench(&["compare", d.to_str().unwrap(), "--format", "csv"], &dir);
    assert!(o.status.success());
    assert!(stdout(&o).starts_with("pattern,kernel,machine,baseline,"));
    // One machine: a warning, still a table.
    let a = d.join("machine-a-replay.json");
    let o = mgbench(&["compare", a.to_str().unwrap()], &dir);
    assert!(o.status.success());
    assert!(stderr(&o).contains("one machine"), "{}", stderr(&o));
}

/// A pattern whose runs were too short to time on a machine (its record's note) is flagged
/// in the comparison, naming the machine.
#[test]
fn compare_flags_runs_too_short_to_time() {
    let dir = temp_dir("compare-short");
    let d = data();
    let copy = dir.join("data");
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(&d).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
        }
    }
    let b = copy.join("machine-b-replay.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
    let recs = v.as_array_mut().unwrap();
    let r = recs
        .iter_mut()
        .find(|r| r["name"] == "laplacian-2d")
        .expect("laplacian-2d in the fixture");
    r["notes"] = serde_json::json!([
        "too short to time: the fastest run took 30.7 us, and starting a run alone takes about 6.0 us here, so the bandwidth is 19% low or more; a count of about 1000 (\"count\" in the config, -l inline) takes about a millisecond"
    ]);
    std::fs::write(&b, serde_json::to_string(&v).unwrap()).unwrap();
    let o = mgbench(&["compare", copy.to_str().unwrap()], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    let flagged: Vec<&str> = t.lines().filter(|l| l.contains("too short")).collect();
    assert_eq!(flagged.len(), 1, "{t}");
    assert!(
        flagged[0].starts_with("laplacian-2d ")
            && flagged[0].contains("too short to time on hbm-node (raise its count"),
        "{t}"
    );
    // It comes last: its departure from STREAM's prediction is the start's as much as the
    // memory's (without the note it is not last).
    let last_pattern = |data: &Path| {
        let o = mgbench(
            &["compare", data.to_str().unwrap(), "--format", "json"],
            &dir,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let rows = v["rows"].as_array().unwrap();
        rows[rows.len() - 1]["pattern"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(last_pattern(&copy), "laplacian-2d");
    assert_ne!(last_pattern(&d), "laplacian-2d");
}

#[test]
fn report_reads_a_damaged_trace_only_when_told() {
    if !have("qemu-x86_64", "report on a captured demo") {
        return;
    }
    let dir = temp_dir("report-damaged");
    let o = mgbench(
        &[
            "capture",
            "--full",
            "-o",
            "t.mgbt",
            "--",
            &app("triad"),
            "--n=65536",
            "--sweeps=2",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // A capture killed mid-write: the file ends inside its last frame.
    let bytes = std::fs::read(dir.join("t.mgbt")).unwrap();
    std::fs::write(dir.join("cut.mgbt"), &bytes[..bytes.len() - 10]).unwrap();
    let o = mgbench(&["report", "cut.mgbt", "-o", "r.html"], &dir);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("cut.mgbt") && err.contains("damaged") && err.contains("--allow-damaged"),
        "{err}"
    );
    assert!(!dir.join("r.html").exists());
    // The flag the error names exists, and the page says what was left out.
    let o = mgbench(
        &["report", "--allow-damaged", "cut.mgbt", "-o", "r.html"],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(
        html.contains("the trace is damaged: only the accesses before the damage were analysed")
    );
    // The page lists the trace by its digest, hashed as it streamed by.
    let whole = mgbench(&["report", "t.mgbt", "-o", "whole.html"], &dir);
    assert!(whole.status.success(), "{}", stderr(&whole));
    let html = std::fs::read_to_string(dir.join("whole.html")).unwrap();
    let sum = std::process::Command::new("sha256sum")
        .arg(dir.join("t.mgbt"))
        .output()
        .expect("sha256sum (coreutils)");
    let digest = String::from_utf8_lossy(&sum.stdout)[..64].to_string();
    assert!(html.contains(&digest), "sha256 {digest} not in the page");
}
