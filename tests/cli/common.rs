//! Helpers: running mgbench, temporary directories, the demo programs, tool gating.

#[path = "../support/stale.rs"]
mod stale;
use stale::remove_stale;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn mgbench(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mgbench"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run mgbench")
}

/// Runs mgbench, which must succeed, and parses what it printed on stdout as JSON.
pub fn mgbench_json(args: &[&str], cwd: &Path) -> serde_json::Value {
    let o = mgbench(args, cwd);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The integers a demo app wrote with `--truth`, one per line.
pub fn read_indices(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// A fresh directory for one test, `mgbench-cli-TAG-PID` in the system's temporary
/// directory. Those that earlier runs of the same test left (their process is gone) are
/// removed first: they hold traces, and had piled up to 20 GB over many runs.
pub fn temp_dir(tag: &str) -> PathBuf {
    let root = std::env::temp_dir();
    let prefix = format!("mgbench-cli-{tag}-");
    remove_stale(&prefix, |pid| pid.parse().ok());
    let d = root.join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

/// Whether `tool` is installed. Tests that need it call this first: locally a missing tool
/// skips the test with a message; under CI (CI=true) it fails, so CI cannot skip silently.
pub fn have(tool: &str, what: &str) -> bool {
    if on_path(tool) {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{what} needs {tool}, which CI installs with scripts/setup.sh");
    }
    eprintln!("skipped: {what} needs {tool} (install it with scripts/setup.sh)");
    false
}

/// The demo programs (scripts/apps), built once per test run; `nopie/` holds non-PIE builds
/// whose addresses match between QEMU and Valgrind.
pub fn apps() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apps");
        let ok = Command::new(root.join("scripts/apps/build.sh"))
            .arg(&out)
            .status()
            .expect("run scripts/apps/build.sh")
            .success();
        assert!(ok, "scripts/apps/build.sh failed");
        let nopie = out.join("nopie");
        std::fs::create_dir_all(&nopie).unwrap();
        for app in ["histogram", "spmv"] {
            let ok = Command::new("gcc")
                .args(["-O2", "-g", "-no-pie", "-pthread", "-o"])
                .arg(nopie.join(app))
                .arg(root.join(format!("scripts/apps/{app}.c")))
                .status()
                .expect("gcc")
                .success();
            assert!(ok, "building the non-PIE {app} failed");
        }
        out
    })
}

/// Writes `source` to `dir/NAME.c` and compiles it with gcc and `flags` into `dir/NAME`.
pub fn build_c(dir: &Path, name: &str, source: &str, flags: &[&str]) {
    std::fs::write(dir.join(format!("{name}.c")), source).unwrap();
    let ok = Command::new("gcc")
        .args(flags)
        .args(["-o", name, &format!("{name}.c")])
        .current_dir(dir)
        .status()
        .expect("gcc")
        .success();
    assert!(ok, "gcc {flags:?} {name}.c failed");
}

pub fn app(name: &str) -> String {
    apps().join(name).display().to_string()
}

/// What `fdclose --out=FILE` must leave in FILE (it writes one 'x' per descriptor from 3 to
/// its limit with `--how=dup2`), read from its output line.
pub fn fdclose_expected(out: &str, how: &str) -> Vec<u8> {
    let limit: usize = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("limit="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no limit in {out:?}"));
    let mut want = if how == "dup2" {
        vec![b'x'; limit - 3]
    } else {
        Vec::new()
    };
    want.extend_from_slice(b"after\n");
    want
}

/// The note of a JSON report or record (its `notes` array) that starts with `prefix`.
pub fn note_starting<'a>(v: &'a serde_json::Value, prefix: &str) -> Option<&'a str> {
    v["notes"]
        .as_array()?
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with(prefix))
}
