//! `replay --mpi` with OpenMPI's real mpirun: weak and strong scaling, and a failing rank.
//! Needs a build with `--features mpi` (scripts/test.sh builds one) and mpirun on PATH.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{have, mgbench, stderr, temp_dir};

fn mpi_ready(what: &str) -> bool {
    if !cfg!(feature = "mpi") {
        if std::env::var_os("CI").is_some() {
            panic!("{what} needs a build with --features mpi (scripts/test.sh builds one)");
        }
        eprintln!("skipped: {what} needs --features mpi");
        return false;
    }
    have("mpirun", what)
}

/// Runs mgbench with a time limit: an MPI job that hangs fails the test instead of the suite.
fn run_limited(
    args: &[&str],
    dir: &Path,
    env: &[(&str, &str)],
    limit: Duration,
) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            let o = child.wait_with_output().unwrap();
            return (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            );
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("mgbench {args:?} still running after {limit:?}: the MPI job hangs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn record(args: &[&str], dir: &Path) -> serde_json::Value {
    let mut a = vec![
        "replay",
        "--format",
        "json",
        "--no-save",
        "--no-stream",
        "-R",
        "2",
    ];
    a.extend(args);
    let (code, out, err) = run_limited(&a, dir, &[], Duration::from_secs(120));
    assert_eq!(code, Some(0), "{a:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v.as_array().unwrap()[0].clone()
}

#[test]
fn weak_scaling_bytes_are_ranks_times_one_rank() {
    if !mpi_ready("weak scaling under mpirun") {
        return;
    }
    let dir = temp_dir("mpi-weak");
    let pattern = ["-p", "UNIFORM:8:1", "-l", "65536", "-t", "1"];
    let single = record(&pattern, &dir);
    let one = single["bytes"].as_u64().unwrap();
    assert_eq!(one, 8 * 8 * 65536);
    assert!(single["mpi"].is_null());
    for ranks in [2u64, 4] {
        let n = ranks.to_string();
        let mut a = vec!["--mpi", n.as_str()];
        a.extend(pattern);
        let r = record(&a, &dir);
        assert_eq!(r["ranks"], ranks);
        assert_eq!(r["bytes"].as_u64().unwrap(), ranks * one, "{r}");
        let m = &r["mpi"];
        assert_eq!(m["scaling"], "weak");
        assert_eq!(m["launcher"], "mpirun");
        let per = m["per_rank"].as_array().unwrap();
        assert_eq!(per.len() as u64, ranks);
        for (k, p) in per.iter().enumerate() {
            assert_eq!(p["rank"], k as u64);
            assert_eq!(p["bytes"].as_u64().unwrap(), one);
            assert_eq!(p["run_times_s"].as_array().unwrap().len(), 2);
        }
        // The honest aggregate never beats the sum of the ranks' own bandwidths.
        let honest = r["bandwidth_mbs"].as_f64().unwrap();
        let sum = m["sum_of_rank_bandwidths_mbs"].as_f64().unwrap();
        assert!(honest <= sum * 1.000001, "{honest} > {sum}");
        // Each run's time is the slowest rank's.
        let t0: f64 = per
            .iter()
            .map(|p| p["run_times_s"][0].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert_eq!(r["run_times_s"][0].as_f64().unwrap(), t0);
    }
}

/// Checks that the ranks' shares cover count x len exactly once.
fn assert_partition(r: &serde_json::Value, count: usize, len: usize) {
    let mut seen = vec![0u32; count * len];
    for p in r["mpi"]["per_rank"].as_array().unwrap() {
        let it = &p["share"]["iterations"];
        let ix = &p["share"]["indices"];
        for i in it[0].as_u64().unwrap()..it[1].as_u64().unwrap() {
            for j in ix[0].as_u64().unwrap()..ix[1].as_u64().unwrap() {
                seen[i as usize * len + j as usize] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
}

#[test]
fn strong_scaling_shares_cover_the_pattern_once() {
    if !mpi_ready("strong scaling under mpirun") {
        return;
    }
    let dir = temp_dir("mpi-strong");
    // count >= ranks: the count loop is split.
    let r = record(
        &[
            "--mpi",
            "4",
            "--strong",
            "-p",
            "UNIFORM:8:1",
            "-l",
            "10",
            "-t",
            "1",
        ],
        &dir,
    );
    assert_eq!(r["mpi"]["scaling"], "strong");
    assert_eq!(r["bytes"].as_u64().unwrap(), 8 * 8 * 10);
    assert_partition(&r, 10, 8);
    // count < ranks: the pattern is split.
    let r = record(
        &[
            "--mpi",
            "4",
            "--strong",
            "-k",
            "scatter",
            "-p",
            "0,5,9,2,7,1,3",
            "-l",
            "3",
            "-t",
            "1",
        ],
        &dir,
    );
    assert_eq!(r["bytes"].as_u64().unwrap(), 8 * 7 * 3);
    assert_partition(&r, 3, 7);
    let r = record(
        &[
            "--mpi",
            "2",
            "--strong",
            "-p",
            "UNIFORM:16:1",
            "-l",
            "1",
            "-t",
            "1",
        ],
        &dir,
    );
    assert_partition(&r, 1, 16);
}

#[test]
fn a_failing_rank_ends_the_job_with_its_message() {
    if !mpi_ready("rank failure under mpirun") {
        return;
    }
    let dir = temp_dir("mpi-fail");
    let (code, out, err) = run_limited(
        &[
            "replay",
            "--mpi",
            "2",
            "-p",
            "0,1,2",
            "--no-save",
            "--no-stream",
            "-t",
            "1",
        ],
        &dir,
        &[("MGBENCH_FAIL_RANK", "1")],
        Duration::from_secs(120),
    );
    assert_ne!(code, Some(0), "{out}");
    assert!(
        err.contains("rank 1 failed") && err.contains("MGBENCH_FAIL_RANK"),
        "{err}"
    );
    // A bad pattern file is refused before any rank starts.
    std::fs::write(dir.join("bad.json"), r#"[{"pattern": [0, -4]}]"#).unwrap();
    let o = mgbench(&["replay", "--mpi", "4", "bad.json", "--no-save"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad.json: config #0") && !stderr(&o).contains("mpirun"),
        "{}",
        stderr(&o)
    );
    // No launcher on PATH: a clear error, nothing started.
    let (code, _, err) = run_limited(
        &[
            "replay",
            "--mpi",
            "2",
            "-p",
            "0,1",
            "--no-save",
            "--no-stream",
        ],
        &dir,
        &[("PATH", "/nonexistent")],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("needs mpirun, which is not on PATH"), "{err}");
}

#[test]
fn negative_deltas_run_weak_and_strong() {
    if !mpi_ready("negative deltas under mpirun") {
        return;
    }
    let dir = temp_dir("mpi-negdelta");
    // Weak: every rank runs the whole downward walk.
    let r = record(
        &[
            "--mpi", "2", "-k", "scatter", "-p", "0,3,1,2", "-d", "-4", "-l", "1000", "-t", "1",
        ],
        &dir,
    );
    assert_eq!(r["delta"], -4);
    assert_eq!(r["bytes"].as_u64().unwrap(), 2 * 8 * 4 * 1000);
    // Strong: the count loop is split; the shares still cover it exactly once.
    let r = record(
        &[
            "--mpi",
            "4",
            "--strong",
            "-p",
            "UNIFORM:8:1",
            "-d",
            "-3",
            "-l",
            "10",
            "-t",
            "1",
        ],
        &dir,
    );
    assert_eq!(r["delta"], -3);
    assert_eq!(r["bytes"].as_u64().unwrap(), 8 * 8 * 10);
    assert_partition(&r, 10, 8);
    // gs with a negative gather side, from a file, split by pattern (count < ranks).
    std::fs::write(
        dir.join("gs.json"),
        r#"[{"kernel":"gs","pattern-gather":[0,1,2,3],"pattern-scatter":[3,2,1,0],"delta-gather":-5,"delta-scatter":4,"count":2}]"#,
    )
    .unwrap();
    let r = record(&["--mpi", "4", "--strong", "gs.json", "-t", "1"], &dir);
    assert_eq!(
        (r["delta"].as_i64(), r["delta_scatter"].as_i64()),
        (Some(-5), Some(4))
    );
    assert_partition(&r, 2, 4);
}
