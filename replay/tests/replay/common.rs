//! Helpers shared by the test modules.

#[path = "../../../tests/support/stale.rs"]
mod stale;
use stale::remove_stale;

use std::path::{Path, PathBuf};

use mgbench_replay::config::{parse_config, Defaults, Origin, RunConfig};

/// Parses one config object given as JSON text.
pub fn config(json: &str) -> RunConfig {
    let v: serde_json::Value = serde_json::from_str(json).expect("test JSON");
    parse_config(
        &v,
        Origin {
            source: "test.json".into(),
            index: 0,
        },
        &Defaults::default(),
    )
    .unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// A fresh temporary directory for one test, `mgbench-test-TAG-PID-NANOS` (those of earlier
/// runs are removed).
pub fn temp_dir(tag: &str) -> PathBuf {
    remove_stale(&format!("mgbench-test-{tag}-"), |rest| {
        rest.rsplit('-').nth(1)?.parse().ok()
    });
    let dir = std::env::temp_dir().join(format!(
        "mgbench-test-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write fixture");
    p
}

/// The repository's shipped pattern directory.
pub fn patterns_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../patterns")
}
