//! Shared by the test crates of the workspace (each includes this file as a module): what
//! earlier test runs left in the system's temporary directory.

/// Removes the entries of the temporary directory named `PREFIX...` whose process (`pid_of`
/// the rest of the name) is gone: each run of a test crate names its directories by its
/// process id, and they had piled up (traces, reports) over many runs.
pub fn remove_stale(prefix: &str, pid_of: impl Fn(&str) -> Option<u32>) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(&pid_of)
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
