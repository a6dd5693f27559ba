//! The results directory: one JSON file and one CSV file per invocation, rewritten after every
//! measured configuration (write to a temporary file, then rename), so an interrupted run keeps
//! every result measured so far and no reader ever sees a half-written file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::export::{CsvExporter, ExportError, Exporter, JsonExporter};
use crate::record::{ReplayRecord, StreamRecord};

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot create results directory {path}: {cause} (choose another with --out DIR)")]
    CreateDir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot write results file {path}: {cause} (choose another directory with --out DIR)")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    Export(#[from] ExportError),
}

/// Writes results of one invocation into a directory.
pub struct ResultsWriter {
    json_path: PathBuf,
    csv_path: PathBuf,
    stream_path: PathBuf,
    records: Vec<ReplayRecord>,
}

impl ResultsWriter {
    /// Creates `out` if needed and picks file names `<prefix>-<UTC time>-<pid>.{json,csv}`
    /// in it, or, where `out` names a JSON file (see [`json_path`]), writes that file and
    /// `.csv` beside it. Writes empty documents at once, so an unwritable directory fails
    /// before any run.
    pub fn create(out: &Path, prefix: &str) -> Result<ResultsWriter, ResultsError> {
        let json = json_path(out, prefix)?;
        let mut w = ResultsWriter {
            csv_path: json.with_extension("csv"),
            stream_path: beside(&json, "stream"),
            json_path: json,
            records: Vec::new(),
        };
        w.flush()?;
        Ok(w)
    }

    pub fn json_path(&self) -> &Path {
        &self.json_path
    }

    pub fn csv_path(&self) -> &Path {
        &self.csv_path
    }

    pub fn stream_path(&self) -> &Path {
        &self.stream_path
    }

    /// Adds a record and rewrites both files.
    pub fn push(&mut self, record: ReplayRecord) -> Result<(), ResultsError> {
        self.records.push(record);
        self.flush()
    }

    /// Writes the GPU STREAM baseline of this invocation (`<stem>-gpu-stream.json`).
    pub fn write_gpu_stream(
        &self,
        record: &crate::gpu::GpuStreamRecord,
    ) -> Result<(), ResultsError> {
        let path = beside(&self.json_path, "gpu-stream");
        let mut bytes = serde_json::to_vec_pretty(record).map_err(ExportError::from)?;
        bytes.push(b'\n');
        write_atomically(&path, &bytes)
    }

    /// Writes the STREAM baseline of this invocation.
    pub fn write_stream(&self, record: &StreamRecord) -> Result<(), ResultsError> {
        write_atomically(&self.stream_path, &JsonExporter.stream(record)?)
    }

    pub fn records(&self) -> &[ReplayRecord] {
        &self.records
    }

    fn flush(&mut self) -> Result<(), ResultsError> {
        write_atomically(&self.json_path, &JsonExporter.replay(&self.records)?)?;
        write_atomically(&self.csv_path, &CsvExporter.replay(&self.records)?)
    }
}

/// This invocation's JSON results file for `--out OUT`: OUT itself where it names a JSON
/// file (`-o r1.json`, and no directory of that name exists: the CSV goes beside it, and
/// `mgbench compare r1.json r2.json` reads it), else `<prefix>-<UTC time>-<pid>.json` in the
/// directory OUT. (A `.json` OUT used to become a directory holding the usual files.) The
/// directory is created if needed.
pub fn json_path(out: &Path, prefix: &str) -> Result<PathBuf, ResultsError> {
    let is_file = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        && !out.is_dir();
    let dir = if is_file {
        out.parent().unwrap_or(Path::new(""))
    } else {
        out
    };
    if !dir.as_os_str().is_empty() {
        fs::create_dir_all(dir).map_err(|cause| ResultsError::CreateDir {
            path: dir.to_path_buf(),
            cause,
        })?;
    }
    if is_file {
        return Ok(out.to_path_buf());
    }
    let stamp = crate::record::now_rfc3339()
        .replace([':', '-'], "")
        .trim_end_matches('Z')
        .to_string();
    Ok(out.join(format!("{prefix}-{stamp}Z-{}.json", std::process::id())))
}

/// `<stem>-<what>.json` beside the JSON file `json`.
fn beside(json: &Path, what: &str) -> PathBuf {
    let stem = json
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    json.with_file_name(format!("{stem}-{what}.json"))
}

/// Saves a STREAM record as `stream-<time>-<pid>.json` and `.csv` in `dir` (what `mgbench
/// stream` keeps, like replay's results files); returns both paths.
pub fn save_stream(dir: &Path, record: &StreamRecord) -> Result<(PathBuf, PathBuf), ResultsError> {
    let json = json_path(dir, "stream")?;
    let csv = json.with_extension("csv");
    write_atomically(&json, &JsonExporter.stream(record)?)?;
    write_atomically(&csv, &CsvExporter.stream(record)?)?;
    Ok((json, csv))
}

/// Saves a GPU STREAM record as `stream-gpu-<time>-<pid>.json` and `.csv` in `dir`.
pub fn save_gpu_stream(
    dir: &Path,
    record: &crate::gpu::GpuStreamRecord,
) -> Result<(PathBuf, PathBuf), ResultsError> {
    let json = json_path(dir, "stream-gpu")?;
    let csv = json.with_extension("csv");
    let mut bytes = serde_json::to_vec_pretty(record).map_err(ExportError::from)?;
    bytes.push(b'\n');
    write_atomically(&json, &bytes)?;
    write_atomically(&csv, record.csv().as_bytes())?;
    Ok((json, csv))
}

/// Where [`write_atomically`] puts `path`'s bytes: `Direct` for a device, pipe or socket
/// (`-o /dev/null`, `-o /dev/stdout` on a pipe), written as it is, since a rename would put
/// a regular file in its place (as root, over /dev/null itself); otherwise the regular file
/// to replace, with a symbolic link followed so that the file it names is replaced and the
/// link stays.
#[derive(Debug, PartialEq, Eq)]
pub enum OutputTarget {
    Direct,
    Replace(PathBuf),
}

/// See [`OutputTarget`].
pub fn output_target(path: &Path) -> OutputTarget {
    match fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => OutputTarget::Direct,
        _ => match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                OutputTarget::Replace(fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
            }
            _ => OutputTarget::Replace(path.to_path_buf()),
        },
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename,
/// so that a reader never sees half a file (a device or pipe is written directly, and a
/// symbolic link's file is replaced: see [`output_target`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ResultsError> {
    let err = |cause| ResultsError::Write {
        path: path.to_path_buf(),
        cause,
    };
    let target = match output_target(path) {
        OutputTarget::Direct => {
            let mut f = fs::OpenOptions::new().write(true).open(path).map_err(err)?;
            return f.write_all(bytes).map_err(err);
        }
        OutputTarget::Replace(p) => p,
    };
    let mut tmp = target.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = fs::File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_data().map_err(err)?;
    drop(f);
    fs::rename(&tmp, &target).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mgbench-results-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// `--out r1.json` is the results file (its CSV and STREAM baseline beside it, in a
    /// directory made if needed); a directory, even one named `x.json`, gets the usual names.
    #[test]
    fn an_out_that_names_a_json_file_is_that_file() {
        let d = temp("named");
        let w = ResultsWriter::create(&d.join("sub/r1.json"), "replay").unwrap();
        assert_eq!(w.json_path(), d.join("sub/r1.json"));
        assert_eq!(w.csv_path(), d.join("sub/r1.csv"));
        assert_eq!(w.stream_path(), d.join("sub/r1-stream.json"));
        assert!(d.join("sub/r1.json").is_file() && d.join("sub/r1.csv").is_file());
        assert_eq!(
            json_path(&d.join("S.JSON"), "stream").unwrap(),
            d.join("S.JSON")
        );
        fs::create_dir(d.join("dir.json")).unwrap();
        let w = ResultsWriter::create(&d.join("dir.json"), "replay").unwrap();
        assert_eq!(w.json_path().parent(), Some(d.join("dir.json").as_path()));
        let name = w.json_path().file_name().unwrap().to_string_lossy();
        assert!(
            name.starts_with("replay-") && name.ends_with(".json"),
            "{name}"
        );
        let w = ResultsWriter::create(&d.join("plain"), "replay").unwrap();
        assert_eq!(w.json_path().parent(), Some(d.join("plain").as_path()));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_or_a_new_path_is_replaced_whole() {
        let d = temp("file");
        let p = d.join("r.json");
        assert_eq!(output_target(&p), OutputTarget::Replace(p.clone()));
        write_atomically(&p, b"one").unwrap();
        write_atomically(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert!(!d.join("r.json.tmp").exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symbolic_link_keeps_pointing_at_its_file() {
        let d = temp("link");
        let real = d.join("real.json");
        fs::write(&real, b"old").unwrap();
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_device_or_pipe_is_written_as_it_is() {
        // Before, `-o /dev/null` renamed a file over /dev/null (as root): the machine's
        // /dev/null became a regular file holding whatever was written to it next.
        assert_eq!(output_target(Path::new("/dev/null")), OutputTarget::Direct);
        let d = temp("fifo");
        let fifo = d.join("out");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        write_atomically(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        use std::os::unix::fs::FileTypeExt;
        assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
        fs::remove_dir_all(&d).unwrap();
    }
}
