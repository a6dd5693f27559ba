//! The page in a real browser: Debian's chromium-headless-shell driven by playwright-core
//! (tests/browser/check-report.mjs). The check must pass on the fixtures' report and fail on
//! five planted defects. Needs node, the browser and `npm ci` in tests/browser (scripts/
//! setup.sh does both); locally a missing piece skips with a message, under CI=true it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{full_report, temp_dir};

fn browser_ready() -> bool {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = std::env::var("MGBENCH_CHROMIUM")
        .unwrap_or_else(|_| "/usr/bin/chromium-headless-shell".into());
    let missing: Vec<String> = [
        (
            Command::new("node").arg("--version").output().is_ok(),
            "node".to_string(),
        ),
        (Path::new(&chromium).exists(), chromium.clone()),
        (
            dir.join("node_modules/playwright-core").exists(),
            "playwright-core (npm ci in report/tests/browser)".to_string(),
        ),
    ]
    .into_iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, what)| what)
    .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "the browser check needs {}: scripts/setup.sh installs them",
            missing.join(", ")
        );
    }
    eprintln!(
        "skipped: the browser check needs {} (scripts/setup.sh installs them)",
        missing.join(", ")
    );
    false
}

/// Runs the checker on `html`; returns (exit code, its JSON summary).
fn check(html: &Path) -> (i32, serde_json::Value, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check-report.mjs");
    let o = Command::new("node")
        .arg(&script)
        .arg(html)
        .output()
        .expect("node");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let v = serde_json::from_str(&out).unwrap_or(serde_json::Value::Null);
    (o.status.code().unwrap_or(-1), v, err)
}

fn write(dir: &Path, name: &str, html: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, html).unwrap();
    p
}

#[test]
fn report_passes_in_a_real_browser_and_planted_defects_fail() {
    if !browser_ready() {
        return;
    }
    let dir = temp_dir("browser");
    let r = full_report();
    let good = write(&dir, "good.html", &r.html);
    let (code, v, err) = check(&good);
    assert_eq!(code, 0, "{v:#}\n{err}");
    assert_eq!(v["figures"].as_u64().unwrap() as usize, r.figures.len());
    let marks: usize = r.figures.iter().map(|f| f.marks).sum();
    assert_eq!(v["marks"].as_u64().unwrap() as usize, marks);
    assert!(
        v["screenshot"]["inked_share"].as_f64().unwrap() > 0.01,
        "{v:#}"
    );

    // Each planted defect makes the check fail, naming it (every `says` in its problems).
    let fails = |name: &str, html: &str, says: &[&str]| {
        let (code, v, _) = check(&write(&dir, name, html));
        assert_eq!(code, 1, "{name}: {v:#}");
        let p = v["problems"].to_string();
        assert!(says.iter().all(|s| p.contains(s)), "{name}: {v:#}");
    };
    // Planted defect 1: a console error.
    let bad = r.html.replacen(
        "</body>",
        "<script>console.error('planted defect')</script></body>",
        1,
    );
    fails("console.html", &bad, &["planted defect"]);
    // Planted defect 2: an external image.
    let bad = r.html.replacen(
        "<main>",
        "<main><img src=\"http://example.invalid/logo.png\" alt=\"\">",
        1,
    );
    fails("external.html", &bad, &["example.invalid"]);
    // Planted defect 3: an empty svg where a figure should be.
    let first = crate::common::svgs(&r.html)[0];
    let open_end = first.find('>').unwrap() + 1;
    let emptied = format!("{}</svg>", &first[..open_end]);
    let bad = r.html.replacen(first, &emptied, 1);
    fails(
        "empty-svg.html",
        &bad,
        &["empty svg", "marks drawn but data-n"],
    );
    // Planted defect 4: a tick label drawn over another one.
    let at = first.find("<text class=\"tick\"").unwrap();
    let tick = &first[at..at + first[at..].find("</text>").unwrap() + "</text>".len()];
    let text_at = tick.find('>').unwrap() + 1;
    let twin = format!("{}planted-tick</text>", &tick[..text_at]);
    let crowded = first.replacen(tick, &format!("{tick}{twin}"), 1);
    let bad = r.html.replacen(first, &crowded, 1);
    fails("overlap.html", &bad, &["labels overlap", "planted-tick"]);
    // Planted defect 5: a legend moved over the start of a line (it was where it hid least).
    let fig = crate::common::svgs(&r.html)
        .into_iter()
        .find(|f| f.contains("<g class=\"legend\">") && f.contains("<polyline class=\"mark\""))
        .expect("a figure with a line and a legend");
    let pts = &fig[fig.find("points=\"").unwrap() + 8..];
    let (x, y) = pts[..pts.find(' ').unwrap()].split_once(',').unwrap();
    let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
    let at = fig.find("<g class=\"legend\"><rect x=\"").unwrap() + 27;
    let y_end = at + fig[at..].find(" width=").unwrap();
    let moved = format!(
        "{}{:.1}\" y=\"{:.1}\"{}",
        &fig[..at],
        x - 2.0,
        y - 2.0,
        &fig[y_end..]
    );
    let bad = r.html.replacen(fig, &moved, 1);
    fails("legend.html", &bad, &["the legend is over data"]);
}
