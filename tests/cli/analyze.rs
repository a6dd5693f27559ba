//! `mgbench analyze` and `synth --apex` on captured demo programs, and their bad input.

use std::path::Path;

use crate::common::{app, have, mgbench, mgbench_json, stderr, stdout, temp_dir};

fn capture(dir: &Path, trace: &str, args: &[&str]) {
    let mut a = vec!["capture", "--full", "-o", trace];
    a.extend(args);
    let o = mgbench(&a, dir);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn analyze_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["analyze", "--format", "json"];
    a.extend(args);
    mgbench_json(&a, dir)
}

fn score(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn stream_and_gups_land_in_their_corners() {
    if !have("qemu-x86_64", "analyze on captured demos") {
        return;
    }
    let dir = temp_dir("analyze-corners");
    // STREAM-like triad sweeps: unit stride, no reuse within 131072 words.
    capture(
        &dir,
        "triad.mgbt",
        &["--", &app("triad"), "--n=262144", "--sweeps=2"],
    );
    let v = analyze_json(&dir, &["triad.mgbt", "--by", "function"]);
    assert!(score(&v, "spatial_score") > 0.95, "{v}");
    assert!(score(&v, "temporal_score") < 0.05, "{v}");
    assert!(v["apex"]["l"].as_u64().unwrap() >= 64, "{}", v["apex"]);
    assert!(v["reuse_histogram"]["below"].as_array().unwrap().len() == 18);
    assert!(v["footprint"]["windows"].as_u64().unwrap() > 0);
    let triad = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "triad")
        .unwrap_or_else(|| panic!("no triad row in {}", v["functions"]));
    assert!(score(triad, "spatial_score") > 0.99 && score(triad, "temporal_score") < 0.01);
    // GUPS updates (recorded only inside update()): both scores near 0.
    capture(
        &dir,
        "gups.mgbt",
        &["--roi", "update", "--", &app("gups"), "--updates=50000"],
    );
    let v = analyze_json(&dir, &["gups.mgbt"]);
    assert!(score(&v, "spatial_score") < 0.05, "{v}");
    assert!(score(&v, "temporal_score") < 0.05, "{v}");
    assert_eq!(v["apex"]["l"], 1, "{}", v["apex"]);
    // The table names the proxy and how to run it.
    let o = mgbench(&["analyze", "gups.mgbt"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.contains("(program)") && t.contains("Apex-MAP proxy: L = 1 words"),
        "{t}"
    );
    assert!(
        t.contains("mgbench replay --kernel apex --apex-l 1 --apex-k"),
        "{t}"
    );
}

#[test]
fn synth_apex_writes_a_replayable_proxy() {
    if !have("qemu-x86_64", "synth --apex on a captured program") {
        return;
    }
    let dir = temp_dir("synth-apex");
    capture(
        &dir,
        "h.mgbt",
        &[
            "--",
            &app("histogram"),
            "--n=4000",
            "--bins=8192",
            "--iters=1",
        ],
    );
    let o = mgbench(&["synth", "h.mgbt", "--apex", "-o", "h.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let ps: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("h.json")).unwrap()).unwrap();
    let ps = ps.as_array().unwrap();
    let apex = ps.last().unwrap();
    assert_eq!(apex["kernel"], "apex");
    assert!(apex["L"].as_u64().unwrap() >= 1 && apex["K"].as_f64().unwrap() > 0.0);
    assert_eq!(apex["M"], 1u64 << 24);
    assert!(
        apex["locality"]["residual"].as_f64().unwrap() < 0.2,
        "{apex}"
    );
    assert!(ps.len() >= 2, "the histogram scatter is kept too: {ps:?}");
    let recs = mgbench_json(
        &[
            "replay",
            "h.json",
            "--no-stream",
            "-R",
            "1",
            "--format",
            "json",
            "--no-save",
        ],
        &dir,
    );
    let r = recs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kernel"] == "apex")
        .unwrap();
    assert_eq!(r["apex"]["l"], apex["L"]);
    assert!(r["ns_per_access"].as_f64().unwrap() > 0.0);
}

#[test]
fn analyze_bad_input() {
    let dir = temp_dir("analyze-bad");
    std::fs::write(dir.join("x.mgbt"), "not a trace").unwrap();
    let o = mgbench(&["analyze", "x.mgbt"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("x.mgbt") && stderr(&o).contains("not an mgbench trace"),
        "{}",
        stderr(&o)
    );
    let o = mgbench(&["analyze", "missing.mgbt"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot open trace missing.mgbt"),
        "{}",
        stderr(&o)
    );
    for (flag, value, want) in [
        ("--shards", "0", "not a sampling rate"),
        ("--shards", "1.5", "not a sampling rate"),
        ("--apex-m", "12", "not a memory size"),
        ("--by", "file", "function"),
    ] {
        let o = mgbench(&["analyze", "x.mgbt", flag, value], &dir);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        assert!(stderr(&o).contains(want), "{flag} {value}: {}", stderr(&o));
    }
    // Replay's apex options need the apex kernel.
    let o = mgbench(&["replay", "--apex-l", "8", "--no-save"], &dir);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("--kernel apex"), "{}", stderr(&o));
}

#[test]
fn a_sampled_trace_estimates_the_runs_footprint_against_a_full_one() {
    if !have(
        "qemu-x86_64",
        "analyze's footprint estimate on captured demos",
    ) {
        return;
    }
    let dir = temp_dir("analyze-footprint");
    // GUPS over a 2^17-word table (16384 lines) and a hot/cold mix (200000 cold words): the full trace counts
    // the lines the run touched; the sampled one (a window every 64 Ki accesses) estimates
    // them from how many windows saw each line.
    for (name, args) in [
        ("gups", vec!["--log2size=17", "--updates=1000000"]),
        ("hotcold", vec!["--cold=200000", "--n=2000000"]),
    ] {
        let program = app(name);
        let mut run = vec!["--", program.as_str()];
        run.extend(&args);
        let full = format!("{name}-full.mgbt");
        capture(&dir, &full, &run);
        let exact = analyze_json(&dir, &[&full, "--no-apex"])["memory"]["distinct_lines"]
            .as_f64()
            .unwrap();
        // Where the windows fall moves the estimate (Chao2 rests on the lines seen in exactly
        // one and two windows), and a program's access count, so where its windows fall,
        // shifts with its environment: the median over three placements (--sample-seed) is
        // judged, each of which must still be an estimate.
        let mut estimates = Vec::new();
        let seeds = ["1", "2", "3"];
        for seed in seeds {
            let sampled = format!("{name}-sampled-{seed}.mgbt");
            let mut a = vec![
                "capture",
                "--sample-window",
                "1024",
                "--sample-period",
                "65536",
                "--sample-seed",
                seed,
                "-o",
                &sampled,
            ];
            a.extend(&run);
            let o = mgbench(&a, &dir);
            assert!(o.status.success(), "{}", stderr(&o));
            let v = analyze_json(&dir, &[&sampled, "--no-apex"]);
            let f = &v["footprint"];
            assert_eq!(
                f["estimate"]["method"], "chao2",
                "{name}: {}",
                f["estimate"]
            );
            let seen = f["estimate"]["seen_blocks"].as_f64().unwrap();
            assert!(
                seen < 0.8 * exact,
                "{name}: the windows saw {seen} of {exact}"
            );
            estimates.push((
                f["estimated_blocks"].as_f64().unwrap(),
                f["estimate"].clone(),
            ));
        }
        estimates.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (est, how) = &estimates[1];
        assert!(
            *est > 0.6 * exact && *est < 1.3 * exact,
            "{name}: estimated {est} blocks (median of 3 placements), exact {exact} ({how}; all: {:?})",
            estimates.iter().map(|e| e.0).collect::<Vec<_>>()
        );
        let sampled = format!("{name}-sampled-{}.mgbt", seeds[2]);
        let o = mgbench(&["analyze", "--no-apex", &sampled], &dir);
        let t = stdout(&o);
        assert!(
            t.contains("over the execution: about") && t.contains("Chao2"),
            "{t}"
        );
    }
}

#[test]
fn by_function_tracks_the_busiest_functions_not_the_first_met() {
    if !have("qemu-x86_64", "analyze --by function on Debian's python3") {
        return;
    }
    let dir = temp_dir("analyze-by-function");
    // An interpreter meets hundreds of functions at start-up before its evaluation loop gets
    // busy: only 32 are tracked on their own, and they must be the busiest.
    let o = mgbench(
        &[
            "capture",
            "--sample-period",
            "262144",
            "-o",
            "py.mgbt",
            "--",
            "/usr/bin/python3",
            "-c",
            "d = {str(i): i * i for i in range(100000)}\nprint(sum(d.values()))",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = analyze_json(&dir, &["py.mgbt", "--no-apex", "--by", "function"]);
    let rows = v["functions"].as_array().unwrap();
    let tracked: Vec<&str> = rows
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .filter(|f| *f != "(other)")
        .collect();
    // Accesses per function, counted from the symbolized dump.
    let o = mgbench(&["trace", "dump", "--symbols", "py.mgbt"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut per_function: std::collections::HashMap<String, u64> = Default::default();
    for line in stdout(&o).lines() {
        // "function (file:line)", or "?? [object]" or "sub_4415e0 [object]" for code without
        // a name (one row each);
        // "inlined, inlined in function (file:line)" where the compiler inlined code: analyze
        // counts the out-of-line function.
        let line = match line.split_once(", inlined in ") {
            Some((fields, outer)) => {
                let fields: Vec<&str> = fields.split_whitespace().take(6).collect();
                format!("{} {outer}", fields.join(" "))
            }
            None => line.to_string(),
        };
        let mut f = line.split_whitespace().skip(6);
        let function = match (f.next().unwrap_or("??"), f.next()) {
            (name, Some(o)) if o.starts_with('[') && (name == "??" || name.starts_with("sub_")) => {
                format!("{name} {o}")
            }
            (name, _) => name.to_string(),
        };
        *per_function.entry(function).or_default() += 1;
    }
    assert!(
        per_function.len() > 33,
        "the run should meet more functions than are tracked: {}",
        per_function.len()
    );
    assert_eq!(tracked.len(), 32, "{tracked:?}");
    let least_tracked = tracked.iter().map(|f| per_function[*f]).min().unwrap();
    let busiest_other = per_function
        .iter()
        .filter(|(f, _)| !tracked.contains(&f.as_str()))
        .map(|(_, n)| *n)
        .max()
        .unwrap();
    assert!(
        least_tracked >= busiest_other,
        "a pooled function has {busiest_other} accesses, a tracked one {least_tracked}"
    );
}

/// A timed (ptrace) trace's sample ratio is unknown: the table and the report say so instead
/// of printing the 1 that stands for it in the JSON; an exact (qemu) one prints its number.
#[test]
fn a_timed_trace_says_its_sample_ratio_is_unknown() {
    let dir = temp_dir("analyze-timed");
    let o = mgbench(
        &[
            "capture",
            "-q",
            "--backend",
            "ptrace",
            "--sample-interval",
            "1",
            "-o",
            "timed.mgbt",
            "--",
            &app("gather"),
            "--reps=2000",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["analyze", "timed.mgbt", "--no-apex"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let head = stdout(&o).lines().next().unwrap_or_default().to_string();
    assert!(
        head.contains("timed trace of") && head.contains("sample ratio unknown (time-sampled)"),
        "{head}"
    );
    let v = analyze_json(&dir, &["timed.mgbt", "--no-apex"]);
    assert_eq!(v["mode"], "timed");
    assert_eq!(v["sample_ratio"].as_f64(), Some(1.0));
    assert_eq!(v["sample_ratio_unknown"], "time-sampled");
    let o = mgbench(&["report", "timed.mgbt", "-o", "r.html"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(html.contains("sample ratio unknown (time-sampled)"));
    if !have("qemu-x86_64", "the sampled half of the timed-ratio test") {
        return;
    }
    let o = mgbench(
        &["capture", "-q", "-o", "s.mgbt", "--", &app("gather")],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mgbench(&["analyze", "s.mgbt", "--no-apex"], &dir);
    let head = stdout(&o).lines().next().unwrap_or_default().to_string();
    let v = analyze_json(&dir, &["s.mgbt", "--no-apex"]);
    let rho = v["sample_ratio"].as_f64().unwrap();
    assert!(v.get("sample_ratio_unknown").is_none(), "{v}");
    assert!(rho > 1.0, "{v}");
    assert!(head.contains(&format!("sample ratio {rho:.1},")), "{head}");
}
