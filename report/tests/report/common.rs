//! Helpers: the fixtures and the report built from them.

#[path = "../../../tests/support/stale.rs"]
mod stale;
use stale::remove_stale;

use std::path::{Path, PathBuf};

use mgbench_report::{build, Report, ReportConfig};

pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

pub fn fixture(name: &str) -> PathBuf {
    data().join(name)
}

/// The report of every fixture.
pub fn full_report() -> Report {
    let cfg = ReportConfig::new(vec![data()], "mgbench report tests/data".into());
    build(&cfg).expect("report of the fixtures")
}

/// A fresh temporary directory, `mgbench-report-TAG-PID` (those earlier runs of the test
/// left are removed).
pub fn temp_dir(tag: &str) -> PathBuf {
    remove_stale(&format!("mgbench-report-{tag}-"), |pid| pid.parse().ok());
    let d = std::env::temp_dir().join(format!("mgbench-report-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every `<svg ...>...</svg>` of the page.
pub fn svgs(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(a) = rest.find("<svg ") {
        let tail = &rest[a..];
        let b = tail.find("</svg>").expect("closed svg") + "</svg>".len();
        out.push(&tail[..b]);
        rest = &tail[b..];
    }
    out
}
