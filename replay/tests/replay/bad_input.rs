//! Bad input: each error names the file and the config's index, and nothing runs.

use std::path::PathBuf;

use mgbench_replay::{plan, replay, Input, ReplayConfig};

use crate::common::{temp_dir, write};

/// Plans `text` as a pattern file; returns the file's path and the error message.
fn plan_error(tag: &str, text: &str) -> (PathBuf, String) {
    let dir = temp_dir(tag);
    let path = write(&dir, &format!("{tag}.json"), text);
    let mut cfg = ReplayConfig::new(vec![Input::File(path.clone())]);
    cfg.threads = 2;
    let err = plan(&cfg).expect_err("bad input must not plan").to_string();
    (path, err)
}

/// Asserts the message names the file, the config index, and every fragment.
fn expect(tag: &str, text: &str, index: Option<usize>, fragments: &[&str]) {
    let (path, err) = plan_error(tag, text);
    assert!(
        err.contains(&path.display().to_string()),
        "no file in: {err}"
    );
    if let Some(i) = index {
        assert!(err.contains(&format!("config #{i}")), "no index in: {err}");
    }
    for f in fragments {
        assert!(err.contains(f), "{f:?} missing in: {err}");
    }
}

#[test]
fn malformed_json_gives_line_and_column() {
    expect(
        "malformed",
        "[\n {\"pattern\": [1, 2}\n]",
        None,
        &["malformed JSON", "line 2"],
    );
}

#[test]
fn git_lfs_pointer_says_what_to_do() {
    expect(
        "lfs",
        "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 1234\n",
        None,
        &["Git LFS pointer", "git lfs pull"],
    );
}

#[test]
fn unknown_kernel() {
    expect(
        "kernel",
        r#"[{"pattern":[0]}, {"name":"oops","kernel":"gahter","pattern":[0]}]"#,
        Some(1),
        &["unknown kernel \"gahter\"", "(\"oops\")", "multigather"],
    );
}

#[test]
fn empty_pattern() {
    expect(
        "empty",
        r#"[{"pattern":[]}]"#,
        Some(0),
        &["\"pattern\"", "empty"],
    );
    expect("empty-str", r#"[{"pattern":""}]"#, Some(0), &["empty"]);
}

#[test]
fn negative_index() {
    expect(
        "negidx",
        r#"[{"pattern":[1,-2,3]}]"#,
        Some(0),
        &["element 1", "-2", ">= 0"],
    );
    expect(
        "negidx-str",
        r#"[{"pattern":"1,-2"}]"#,
        Some(0),
        &["negative index -2"],
    );
}

#[test]
fn bad_deltas() {
    // Negative deltas run (see kernels.rs); fractions and 64-bit overflow do not.
    expect(
        "fracdelta",
        r#"[{"pattern":[1],"delta":-4.5}]"#,
        Some(0),
        &["\"delta\"", "not an integer"],
    );
    expect(
        "hugedelta",
        r#"[{"kernel":"gs","pattern-gather":[1],"pattern-scatter":[1],"delta-scatter":-1e30}]"#,
        Some(0),
        &["\"delta-scatter\"", "64 bits"],
    );
    expect(
        "strdelta",
        r#"[{"pattern":[1],"delta":"-x"}]"#,
        Some(0),
        &["\"delta\""],
    );
}

#[test]
fn multi_kernel_inner_outer_mismatch() {
    expect(
        "multi",
        r#"[{"kernel":"multigather","pattern":[0,1,2],"pattern-gather":[0,3]}]"#,
        Some(0),
        &["index 3", "only 3 entries"],
    );
    expect(
        "multi-missing",
        r#"[{"kernel":"multiscatter","pattern":[0,1,2]}]"#,
        Some(0),
        &["\"pattern-scatter\" is missing"],
    );
    expect(
        "gs-len",
        r#"[{"kernel":"gs","pattern-gather":[0,1,2],"pattern-scatter":[0,1]}]"#,
        Some(0),
        &["same length", "3 and 2"],
    );
}

#[test]
fn pattern_size_larger_than_pattern() {
    expect(
        "psize",
        r#"[{"pattern":"UNIFORM:4:1","pattern-size":9}]"#,
        Some(0),
        &["\"pattern-size\" 9", "4 indices"],
    );
}

#[test]
fn zero_count_and_wrap() {
    expect(
        "count0",
        r#"[{"pattern":[0],"count":0}]"#,
        Some(0),
        &["\"count\" is 0"],
    );
    expect(
        "wrap0",
        r#"[{"pattern":[0],"wrap":0}]"#,
        Some(0),
        &["\"wrap\" is 0"],
    );
}

#[test]
fn huge_indices_are_refused_before_allocating() {
    // 8.8e12 occurs in a real application trace.
    expect(
        "huge",
        r#"[{"pattern":[0, 8800000000000]}]"#,
        Some(0),
        &["64.0 TiB", "boundary", "pattern-size", "available"],
    );
    // Indices near 2^64 overflow the address space outright.
    expect(
        "overflow",
        r#"[{"pattern":[18446744073709551000], "delta": 1000}]"#,
        Some(0),
        &["address space", "boundary"],
    );
    // The hint works: boundary bounds the buffer.
    let dir = temp_dir("huge-ok");
    let path = write(
        &dir,
        "ok.json",
        r#"[{"pattern":[0, 8800000000000],"boundary":65536}]"#,
    );
    assert!(plan(&ReplayConfig::new(vec![Input::File(path)])).is_ok());
}

#[test]
fn wrong_types() {
    expect(
        "types",
        r#"[{"pattern":{"a":1}}]"#,
        Some(0),
        &["integer list or a generator"],
    );
    expect(
        "types2",
        r#"[{"pattern":[0],"count":"lots"}]"#,
        Some(0),
        &["\"count\""],
    );
    expect(
        "types3",
        r#"[{"pattern":[0.5]}]"#,
        Some(0),
        &["not an integer"],
    );
    expect(
        "types4",
        r#"[{"pattern":[0]}, 7]"#,
        Some(1),
        &["expected a config object"],
    );
    expect(
        "types5",
        r#""UNIFORM:8:1""#,
        None,
        &["expected a JSON array"],
    );
    expect("types6", "[]", None, &["no configs"]);
}

#[test]
fn missing_file() {
    let cfg = ReplayConfig::new(vec![Input::File("/nonexistent/p.json".into())]);
    let err = plan(&cfg).unwrap_err().to_string();
    assert!(
        err.contains("/nonexistent/p.json") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn nothing_runs_when_a_later_config_is_bad() {
    let dir = temp_dir("halfway");
    let good = write(
        &dir,
        "good.json",
        r#"[{"pattern":"UNIFORM:8:1","count":64}]"#,
    );
    let bad = write(
        &dir,
        "bad.json",
        r#"[{"pattern":[0]}, {"pattern":[0],"count":0}]"#,
    );
    let out = dir.join("results");
    let mut cfg = ReplayConfig::new(vec![Input::File(good), Input::File(bad.clone())]);
    cfg.out_dir = Some(out.clone());
    cfg.stream_elements = None;
    let mut events = 0;
    let err = replay(&cfg, &mut |_| events += 1).unwrap_err().to_string();
    assert!(
        err.contains(&bad.display().to_string()) && err.contains("config #1"),
        "{err}"
    );
    assert_eq!(events, 0, "no progress events before the error");
    assert!(!out.exists(), "no results directory was created");
}
