//! `mgbench zoom` and `mgbench affinity` on real captures of demo programs whose layouts a
//! user would compare (row- vs column-major, list in order vs shuffled, banded SpMV in its
//! natural order vs relabelled), `--compare`, and bad input.

use std::path::Path;

use serde_json::Value;

use crate::common::{app, have, mgbench, mgbench_json, stderr, stdout, temp_dir};

/// Captures `args` fully into `trace`; returns the program's stdout.
fn capture(dir: &Path, trace: &str, extra: &[&str], args: &[&str]) -> String {
    let mut a = vec!["capture", "--quiet", "-o", trace];
    a.extend(extra);
    a.push("--");
    a.extend(args);
    let o = mgbench(&a, dir);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

fn affinity(dir: &Path, trace: &str, out: &str) -> Value {
    let o = mgbench(&["affinity", "--quiet", trace, "-o", out], dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("realized SA*"), "{}", stdout(&o));
    serde_json::from_slice(&std::fs::read(dir.join(out)).unwrap()).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Mean AI gamma SA(+1) over the blocks of `v`'s regions that lie in [lo, hi), and the
/// region that holds most of them.
fn sa_next_in(v: &Value, lo: u64, hi: u64) -> (f64, Value) {
    let mut best: Option<(usize, f64, Value)> = None;
    for r in v["regions"].as_array().unwrap() {
        let t = &r["block_table"];
        let addr = t["addr"].as_array().unwrap();
        let next = t["sa_next"].as_array().unwrap();
        assert_eq!(addr.len(), next.len());
        let inside: Vec<f64> = addr
            .iter()
            .zip(next)
            .filter(|(a, _)| (lo..hi).contains(&a.as_u64().unwrap()))
            .map(|(_, s)| f(s))
            .collect();
        if !inside.is_empty() && best.as_ref().is_none_or(|b| inside.len() > b.0) {
            let mean = inside.iter().sum::<f64>() / inside.len() as f64;
            best = Some((inside.len(), mean, r.clone()));
        }
    }
    let (_, mean, r) = best.unwrap_or_else(|| panic!("no region covers {lo:#x}..{hi:#x}"));
    (mean, r)
}

/// The region whose hottest code is in `function`.
fn region_of<'a>(v: &'a Value, function: &str) -> &'a Value {
    v["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"].as_str().is_some_and(|c| c.contains(function)))
        .unwrap_or_else(|| panic!("no region with code in {function}: {v}"))
}

fn mean(col: &Value) -> f64 {
    let a = col.as_array().unwrap();
    a.iter().map(f).sum::<f64>() / a.len() as f64
}

/// What every region of a report must satisfy.
fn check_shape(v: &Value) {
    let radius = v["params"]["radius"].as_u64().unwrap();
    let hot = v["hot_lines"].as_array().unwrap().len() as u64;
    assert_eq!(v["n_si"], 18.0, "a quarter of the 72-entry load queue");
    for r in v["regions"].as_array().unwrap() {
        let vec = &r["vector"];
        assert!(
            f(&vec["sa_realized"]) <= f(&vec["sa_potential"]) + 1e-9,
            "{vec}"
        );
        assert!(
            f(&vec["sd_realized"]) <= f(&vec["sd_potential"]) + 1e-9,
            "{vec}"
        );
        let t = &r["block_table"];
        let n = t["addr"].as_array().unwrap().len();
        for col in [
            "accesses",
            "ai",
            "sa_realized",
            "sd_potential",
            "sd_self",
            "rd",
        ] {
            assert_eq!(t[col].as_array().unwrap().len(), n, "{col}");
        }
        // The hottest block has AI 1.
        assert!(t["ai"].as_array().unwrap().iter().any(|x| f(x) == 1.0));
        for c in r["heatmap"]["cells"].as_array().unwrap() {
            let y = c[1].as_u64().unwrap();
            assert!(y < 2 * radius + 1 + hot, "{c}");
            assert!((0.0..=1.0).contains(&f(&c[2])), "SA in [0, 1]: {c}");
        }
        for pdf in ["sa_realized", "sd_realized", "sa_potential", "sd_potential"] {
            let p = &r["pdfs"][pdf];
            let s: f64 = p["fractions"].as_array().unwrap().iter().map(f).sum();
            assert!((s - 1.0).abs() < 1e-9, "{pdf} sums to {s}");
            assert_eq!(
                p["edges"].as_array().unwrap().len(),
                p["fractions"].as_array().unwrap().len() + 1
            );
        }
    }
}

#[test]
fn affinity_ranks_the_better_layout_higher_on_real_captures() {
    if !have("qemu-x86_64", "affinity of captured demos") {
        return;
    }
    let dir = temp_dir("affinity-layouts");
    let full = ["--full"];
    // Row- vs column-major sum of a 500 x 500 array.
    capture(&dir, "row.mgbt", &full, &[&app("rowcol"), "--order=row"]);
    capture(&dir, "col.mgbt", &full, &[&app("rowcol"), "--order=col"]);
    let row = affinity(&dir, "row.mgbt", "row.json");
    let col = affinity(&dir, "col.mgbt", "col.json");
    check_shape(&row);
    check_shape(&col);
    let (r, c) = (region_of(&row, "sum_rows"), region_of(&col, "sum_cols"));
    // Row-major: a line's 8 accesses, then the next line at once: SA(+1) = 1/8, gamma 1.
    let r_next = mean(&r["block_table"]["sa_next"]);
    let c_next = mean(&c["block_table"]["sa_next"]);
    assert!((r_next - 0.125).abs() < 0.01, "row-major SA(+1) {r_next}");
    assert!(c_next < r_next / 2.0, "col {c_next} vs row {r_next}");
    assert!(f(&r["vector"]["sa_realized"]) > f(&c["vector"]["sa_realized"]));
    // A list walked in the order its nodes lie vs shuffled (64-byte nodes).
    capture(
        &dir,
        "inorder.mgbt",
        &full,
        &[&app("ptrchase"), "--shuffle=0"],
    );
    capture(
        &dir,
        "shuffled.mgbt",
        &full,
        &[&app("ptrchase"), "--shuffle=1"],
    );
    let a = affinity(&dir, "inorder.mgbt", "inorder.json");
    let b = affinity(&dir, "shuffled.mgbt", "shuffled.json");
    let (ra, rb) = (region_of(&a, "walk"), region_of(&b, "walk"));
    let (na, nb) = (
        mean(&ra["block_table"]["sa_next"]),
        mean(&rb["block_table"]["sa_next"]),
    );
    assert!(na > 5.0 * nb, "in order {na} vs shuffled {nb}");
    assert!(f(&ra["vector"]["sa_realized"]) > f(&rb["vector"]["sa_realized"]));
    // A banded SpMV, columns in their natural order vs relabelled at random: the blocks of
    // the gathered vector x (its address is printed by the program).
    let mut xs = Vec::new();
    for (trace, permute) in [("band.mgbt", "--permute=0"), ("perm.mgbt", "--permute=1")] {
        let out = capture(
            &dir,
            trace,
            &full,
            &[&app("spmv"), "--band=64", "--sorted=1", permute],
        );
        let x = out
            .split_whitespace()
            .find_map(|w| w.strip_prefix("x=0x"))
            .unwrap_or_else(|| panic!("no x= in {out}"));
        xs.push(u64::from_str_radix(x, 16).unwrap());
    }
    let band = affinity(&dir, "band.mgbt", "band.json");
    let perm = affinity(&dir, "perm.mgbt", "perm.json");
    let x_bytes = 4096 * 8;
    let (nb, rb) = sa_next_in(&band, xs[0], xs[0] + x_bytes);
    let (np, rp) = sa_next_in(&perm, xs[1], xs[1] + x_bytes);
    assert!(nb > 4.0 * np, "natural {nb} vs relabelled {np}");
    assert!(f(&rb["vector"]["sa_realized"]) > f(&rp["vector"]["sa_realized"]));

    // --compare: the two layouts side by side, table and JSON.
    let o = mgbench(
        &[
            "affinity",
            "--compare",
            "row.json",
            "col.json",
            "-o",
            "cmp.json",
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("rowcol --order=row") && text.contains("rowcol --order=col"));
    assert!(text.contains("B/A: realized SA*"), "{text}");
    let cmp: Value = serde_json::from_slice(&std::fs::read(dir.join("cmp.json")).unwrap()).unwrap();
    let first = &cmp["regions"][0];
    assert!(
        first["a"]["code"].as_str().unwrap().contains("sum_rows"),
        "{first}"
    );
    assert!(
        first["b"]["code"].as_str().unwrap().contains("sum_cols"),
        "{first}"
    );
    assert!(f(&first["a"]["sa_next_mean"]) > f(&first["b"]["sa_next_mean"]));
}

#[test]
fn zoom_finds_the_array_and_its_phases() {
    if !have("qemu-x86_64", "zoom of a captured demo") {
        return;
    }
    let dir = temp_dir("zoom-rowcol");
    capture(
        &dir,
        "row.mgbt",
        &["--full"],
        &[&app("rowcol"), "--order=row", "--reps=2"],
    );
    let o = mgbench(&["zoom", "--quiet", "row.mgbt", "-o", "zoom.json"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("poorest reuse"), "{text}");
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join("zoom.json")).unwrap()).unwrap();
    let total = v["accesses"].as_u64().unwrap();
    // The hottest region is the 500 x 500 array of doubles (1.9 MiB), summed by sum_rows.
    let top = &v["regions"][0];
    let fp = top["footprint_bytes"].as_u64().unwrap();
    assert!((1_990_000..2_010_000).contains(&fp), "{top}");
    assert!(top["code"][0]["source"]
        .as_str()
        .unwrap()
        .contains("sum_rows"));
    assert!(f(&top["share"]) > 0.9, "{top}");
    // Each region names a source once (instructions of one line or function are grouped),
    // with shares that add up to at most its accesses.
    for r in v["regions"].as_array().unwrap() {
        let code = r["code"].as_array().unwrap();
        let mut sources: Vec<&str> = code.iter().map(|c| c["source"].as_str().unwrap()).collect();
        sources.sort_unstable();
        sources.dedup();
        assert_eq!(sources.len(), code.len(), "{r}");
        let sum: f64 = code.iter().map(|c| f(&c["share"])).sum();
        assert!(sum <= 1.0 + 1e-6, "{r}");
    }
    // malloc mmaps the array after start-up: the capture sends the mappings again, so it is
    // heap, not unmapped.
    assert_eq!(top["class"], "heap", "{top}");
    // The guest's stack (anonymous memory in QEMU's mappings) is named: return addresses and
    // the loader's locals are stack, not heap.
    let segments = v["segments"].as_array().unwrap();
    assert!(
        segments
            .iter()
            .any(|s| s["class"] == "stack" && s["mapping"] == "[stack]" && f(&s["share"]) > 0.0),
        "{segments:?}"
    );
    // The interval tree: 256 leaves, 9 levels; the root holds every access and the whole
    // footprint, which is the sum of the lines touched first in each leaf.
    let levels = v["intervals"].as_array().unwrap();
    assert_eq!(levels.len(), 9);
    assert_eq!(levels[0].as_array().unwrap().len(), 256);
    let root = &levels[8][0];
    assert_eq!(root["accesses"].as_u64().unwrap(), total);
    let new: u64 = levels[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["new_lines"].as_u64().unwrap())
        .sum();
    assert_eq!(root["footprint_lines"].as_u64().unwrap(), new);
    // The first pass over the array (rep 1) brings its lines; the second brings none.
    let halves = levels[7].as_array().unwrap();
    assert!(halves[0]["new_lines"].as_u64().unwrap() > 30_000);
    assert!(
        halves[1]["new_lines"].as_u64().unwrap() < 100,
        "{}",
        halves[1]
    );
}

#[test]
fn affinity_on_a_sampled_trace_keeps_intervals_inside_samples() {
    if !have("qemu-x86_64", "affinity of a sampled capture") {
        return;
    }
    let dir = temp_dir("affinity-sampled");
    capture(&dir, "s.mgbt", &[], &[&app("rowcol"), "--order=row"]);
    let v = mgbench_json(&["affinity", "--quiet", "s.mgbt", "-f", "json"], &dir);
    assert_eq!(v["mode"], "sampled");
    let notes = v["notes"].to_string();
    assert!(notes.contains("never cross a sample boundary"), "{notes}");
    check_shape(&v);
}

#[test]
fn affinity_and_zoom_bad_input() {
    let dir = temp_dir("affinity-bad");
    let o = mgbench(&["affinity", "missing.mgbt"], &dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing.mgbt"), "{}", stderr(&o));
    let o = mgbench(&["zoom", "missing.mgbt"], &dir);
    assert!(stderr(&o).contains("missing.mgbt"), "{}", stderr(&o));
    for (flag, value) in [
        ("--block", "48"),
        ("--radius", "0"),
        ("--load-queue", "2"),
        ("--max-blocks", "3"),
        ("--threshold", "0"),
        ("--leaves", "100"),
    ] {
        let o = mgbench(&["affinity", "missing.mgbt", flag, value], &dir);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(flag), "{flag}: {}", stderr(&o));
    }
    // --compare takes affinity reports and says so.
    std::fs::write(dir.join("not.json"), "{\"a\": 1}").unwrap();
    let o = mgbench(&["affinity", "--compare", "not.json", "not.json"], &dir);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("not.json") && e.contains("mgbench affinity TRACE -o FILE"),
        "{e}"
    );
    let o = mgbench(&["affinity", "--compare", "none.json", "not.json"], &dir);
    assert!(stderr(&o).contains("none.json"), "{}", stderr(&o));
    // A failed run leaves an existing output alone; an unwritable one is refused first.
    std::fs::write(dir.join("keep.json"), "old").unwrap();
    let o = mgbench(&["affinity", "missing.mgbt", "-o", "keep.json"], &dir);
    assert!(!o.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.json")).unwrap(),
        "old"
    );
    let o = mgbench(&["zoom", "missing.mgbt", "-o", "no/such/dir/z.json"], &dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no/such/dir"), "{}", stderr(&o));
}
