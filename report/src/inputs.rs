//! What a report is built from: every input file, recognised by its content, with its
//! sha256. Directories are searched (not deeply: results directories are flat).
//!
//! | input | recognised by |
//! | --- | --- |
//! | replay results (`results/replay-*.json`) | a JSON array of records with `bandwidth_mbs` |
//! | STREAM results (`*-stream.json`, `stream-*.json`) | an object with `copy_mbs` and `kernels` |
//! | GPU STREAM (`*-gpu-stream.json`) | an object with `mul_mbs` and `device` |
//! | MPI sweeps (`scripts/mpi-sweep.py` CSV) | a CSV header with `ranks`, `threads_per_rank`, `scaling` |
//! | pattern files (Spatter JSON) | a JSON array of configs (`pattern`, `kernel`, ...) |
//! | analyses (`mgbench analyze -o`) | an object with `reuse_histogram` and `spatial_score` |
//! | RDX reuse reports (`mgbench reuse -o`) | an object with `words`, `lines` and `config.watchpoints` |
//! | traces (`*.mgbt`) | the trace magic; analysed here |
//!
//! Replay CSVs beside their JSON twin are skipped (same records). Anything else is an error
//! naming the file and what report reads.

use std::io::Read;
use std::path::{Path, PathBuf};

use mgbench_replay::config::{Defaults, RunConfig};
use mgbench_replay::gpu::GpuStreamRecord;
use mgbench_replay::record::{ReplayRecord, StreamRecord};
use mgbench_synth::analyze::LocalityReport;
use sha2::{Digest, Sha256};

use crate::ReportError;

/// One input file as listed in the report's header.
#[derive(Debug, Clone, PartialEq)]
pub struct InputFile {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    /// What it held ("12 replay records", "a pattern file of 4 configs", ...).
    pub what: String,
}

/// One row of an MPI sweep CSV.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct MpiSweepRow {
    pub ranks: u64,
    pub threads_per_rank: u64,
    pub scaling: String,
    pub name: String,
    pub kernel: String,
    pub bytes: u64,
    pub bandwidth_mbs: f64,
    #[serde(default)]
    pub sum_of_rank_bandwidths_mbs: Option<f64>,
    #[serde(default)]
    pub efficiency: Option<f64>,
    #[serde(default)]
    pub stream_copy_mbs: Option<f64>,
    #[serde(default)]
    pub source: String,
}

/// A pattern file: its configurations, parsed (generators expanded) as replay would.
#[derive(Debug, Clone)]
pub struct PatternFile {
    pub path: PathBuf,
    pub configs: Vec<RunConfig>,
}

/// Everything the inputs held.
#[derive(Debug, Default)]
pub struct Inputs {
    pub files: Vec<InputFile>,
    pub records: Vec<ReplayRecord>,
    pub streams: Vec<StreamRecord>,
    pub gpu_streams: Vec<GpuStreamRecord>,
    pub mpi_sweeps: Vec<MpiSweepRow>,
    pub patterns: Vec<PatternFile>,
    pub analyses: Vec<(String, LocalityReport)>,
    pub reuses: Vec<(String, mgbench_synth::rdx::ReuseReport)>,
    pub affinities: Vec<(String, mgbench_synth::affinity::AffinityReport)>,
    pub affinity_comparisons: Vec<(String, mgbench_synth::affinity::AffinityComparison)>,
    pub zooms: Vec<(String, mgbench_synth::affinity::ZoomReport)>,
    /// Remarks about inputs (files skipped and why).
    pub notes: Vec<String>,
}

/// How traces given as inputs are analysed.
#[derive(Debug, Clone, Copy)]
pub struct TraceOptions {
    /// Threads for decoding and analysing.
    pub threads: usize,
    /// Analyse the accesses before a damaged part instead of refusing the trace.
    pub allow_damaged: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            threads: 1,
            allow_damaged: false,
        }
    }
}

/// Reads every input (files, or directories of them), in the order given.
pub fn load(paths: &[PathBuf], traces: TraceOptions) -> Result<Inputs, ReportError> {
    let mut inputs = Inputs::default();
    if paths.is_empty() {
        return Err(ReportError::NoInputs);
    }
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|cause| ReportError::Read {
            path: p.clone(),
            cause,
        })?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|cause| ReportError::Read {
                    path: p.clone(),
                    cause,
                })?
                .flatten()
                .map(|e| e.path())
                .filter(|f| {
                    f.is_file()
                        && f.extension()
                            .is_some_and(|e| e == "json" || e == "csv" || e == "mgbt")
                })
                .collect();
            entries.sort();
            let before = inputs.files.len();
            for f in &entries {
                load_file(f, &mut inputs, traces, true)?;
            }
            if inputs.files.len() == before {
                inputs.notes.push(format!(
                    "{} holds no file mgbench report reads (JSON/CSV results, pattern files, analyses, traces)",
                    p.display()
                ));
            }
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| NOT_INPUTS.contains(&e.to_ascii_lowercase().as_str()))
        {
            // A shell glob over a results directory (`results/*`) names its README too.
            inputs.notes.push(format!(
                "{}: not an input (report and compare read .json, .csv and .mgbt files), skipped",
                p.display()
            ));
        } else {
            load_file(p, &mut inputs, traces, false)?;
        }
    }
    Ok(inputs)
}

/// Extensions of files that sit beside results (notes, pages, figures) and are never inputs.
const NOT_INPUTS: [&str; 9] = [
    "md", "txt", "html", "htm", "png", "svg", "pdf", "log", "rst",
];

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the file starts as an mgbench trace does.
fn is_trace(path: &Path) -> std::io::Result<bool> {
    let magic = mgbench_capture::trace::MAGIC;
    let mut head = Vec::with_capacity(magic.len());
    std::fs::File::open(path)?
        .take(magic.len() as u64)
        .read_to_end(&mut head)?;
    Ok(head == magic)
}

/// SHA-256 and length of a file, read piece by piece.
fn sha256_of_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let len = std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok((hex(&hasher.finalize()), len))
}

fn load_file(
    path: &Path,
    inputs: &mut Inputs,
    traces: TraceOptions,
    from_dir: bool,
) -> Result<(), ReportError> {
    let read_error = |cause| ReportError::Read {
        path: path.to_path_buf(),
        cause,
    };
    let bad = |why: String| ReportError::Unreadable {
        path: path.to_path_buf(),
        why,
    };
    // A trace can be gigabytes: it is hashed as it streams by, never held whole.
    if is_trace(path).map_err(read_error)? {
        let (sha256, bytes) = sha256_of_file(path).map_err(read_error)?;
        let mut file = InputFile {
            path: path.to_path_buf(),
            sha256,
            bytes,
            what: String::new(),
        };
        let cfg = mgbench_synth::analyze::AnalyzeConfig {
            threads: traces.threads.max(1),
            allow_damaged: traces.allow_damaged,
            ..Default::default()
        };
        let report = mgbench_synth::analyze::analyze(path, &cfg)
            .map_err(|e| bad(format!("cannot analyse this trace: {e}")))?;
        file.what = format!("a trace of {} accesses (analysed)", report.accesses);
        inputs.analyses.push((path.display().to_string(), report));
        inputs.files.push(file);
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(read_error)?;
    let mut file = InputFile {
        path: path.to_path_buf(),
        sha256: sha256_hex(&bytes),
        bytes: bytes.len() as u64,
        what: String::new(),
    };
    if path.extension().is_some_and(|e| e == "csv") {
        return load_csv(path, &bytes, file, inputs, from_dir);
    }
    if bytes.starts_with(b"version https://git-lfs.github.com/spec/") {
        return Err(bad(
            "a Git LFS pointer, not the file itself: run `git lfs pull` (or fetch the real file) and try again"
                .into(),
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        bad(format!(
            "not JSON (line {}, column {}: {e}); report reads results, pattern files, analyses (JSON), MPI sweeps (CSV) and traces (.mgbt)",
            e.line(),
            e.column()
        ))
    })?;
    match &value {
        serde_json::Value::Array(items) if items.is_empty() => {
            inputs.notes.push(format!(
                "{}: an empty results file (the run measured nothing yet)",
                path.display()
            ));
            file.what = "an empty results file".into();
        }
        serde_json::Value::Array(items)
            if items.iter().all(|i| i.get("bandwidth_mbs").is_some()) =>
        {
            let recs: Vec<ReplayRecord> = serde_json::from_value(value.clone())
                .map_err(|e| bad(format!("replay records that do not match the schema: {e}")))?;
            file.what = format!("{} replay record(s)", recs.len());
            inputs.records.extend(recs);
        }
        serde_json::Value::Object(o) if o.contains_key("mul_mbs") && o.contains_key("device") => {
            let r: GpuStreamRecord = serde_json::from_value(value.clone()).map_err(|e| {
                bad(format!(
                    "a GPU STREAM record that does not match the schema: {e}"
                ))
            })?;
            file.what = format!("GPU STREAM on {}", r.device.name);
            inputs.gpu_streams.push(r);
        }
        serde_json::Value::Object(o) if o.contains_key("copy_mbs") && o.contains_key("kernels") => {
            let r: StreamRecord = serde_json::from_value(value.clone()).map_err(|e| {
                bad(format!(
                    "a STREAM record that does not match the schema: {e}"
                ))
            })?;
            file.what = format!("STREAM on {}", r.host.hostname);
            inputs.streams.push(r);
        }
        serde_json::Value::Object(o)
            if o.contains_key("reuse_histogram") && o.contains_key("spatial_score") =>
        {
            let r: LocalityReport = serde_json::from_value(value.clone())
                .map_err(|e| bad(format!("an analysis that does not match the schema: {e}")))?;
            file.what = format!("an analysis of {} accesses", r.accesses);
            inputs.analyses.push((path.display().to_string(), r));
        }
        serde_json::Value::Object(o)
            if o.contains_key("words")
                && o.contains_key("lines")
                && o.get("config")
                    .is_some_and(|c| c.get("watchpoints").is_some()) =>
        {
            let r: mgbench_synth::rdx::ReuseReport = serde_json::from_value(value.clone())
                .map_err(|e| {
                    bad(format!(
                        "an RDX reuse report that does not match the schema: {e}"
                    ))
                })?;
            file.what = format!("an RDX reuse report of {} accesses", r.accesses);
            inputs.reuses.push((path.display().to_string(), r));
        }
        serde_json::Value::Object(o)
            if o.contains_key("regions")
                && o.contains_key("zoom")
                && o.contains_key("hot_lines") =>
        {
            let r: mgbench_synth::affinity::AffinityReport = serde_json::from_value(value.clone())
                .map_err(|e| {
                    bad(format!(
                        "an affinity report that does not match the schema: {e}"
                    ))
                })?;
            file.what = format!("an affinity report of {} accesses", r.accesses);
            inputs.affinities.push((path.display().to_string(), r));
        }
        serde_json::Value::Object(o)
            if o.contains_key("a") && o.contains_key("b") && o.contains_key("regions") =>
        {
            let c: mgbench_synth::affinity::AffinityComparison =
                serde_json::from_value(value.clone()).map_err(|e| {
                    bad(format!(
                        "an affinity comparison that does not match the schema: {e}"
                    ))
                })?;
            file.what = format!("an affinity comparison of {} and {}", c.a.label, c.b.label);
            inputs
                .affinity_comparisons
                .push((path.display().to_string(), c));
        }
        serde_json::Value::Object(o)
            if o.contains_key("segments") && o.contains_key("intervals") =>
        {
            let z: mgbench_synth::affinity::ZoomReport = serde_json::from_value(value.clone())
                .map_err(|e| bad(format!("a zoom report that does not match the schema: {e}")))?;
            file.what = format!("a zoom report of {} accesses", z.accesses);
            inputs.zooms.push((path.display().to_string(), z));
        }
        _ => {
            let configs = mgbench_replay::config::parse_bytes(&bytes, path, &Defaults::default())
                .map_err(|e| {
                bad(format!(
                    "neither results, an analysis nor a pattern file mgbench can read: {e}"
                ))
            })?;
            file.what = format!("a pattern file of {} config(s)", configs.len());
            inputs.patterns.push(PatternFile {
                path: path.to_path_buf(),
                configs,
            });
        }
    }
    inputs.files.push(file);
    Ok(())
}

fn load_csv(
    path: &Path,
    bytes: &[u8],
    mut file: InputFile,
    inputs: &mut Inputs,
    from_dir: bool,
) -> Result<(), ReportError> {
    let mut rdr = csv::Reader::from_reader(bytes);
    let headers = rdr
        .headers()
        .map_err(|e| ReportError::Unreadable {
            path: path.to_path_buf(),
            why: format!("not a CSV file: {e}"),
        })?
        .clone();
    let has = |h: &str| headers.iter().any(|x| x == h);
    if has("ranks") && has("threads_per_rank") && has("scaling") {
        let mut rows = Vec::new();
        for (i, r) in rdr.deserialize::<MpiSweepRow>().enumerate() {
            rows.push(r.map_err(|e| ReportError::Unreadable {
                path: path.to_path_buf(),
                why: format!("MPI sweep row {}: {e}", i + 1),
            })?);
        }
        file.what = format!("an MPI sweep of {} row(s)", rows.len());
        inputs.mpi_sweeps.extend(rows);
        inputs.files.push(file);
        return Ok(());
    }
    if has("bandwidth_mbs") && has("schema_version") {
        // A replay or STREAM CSV: the same records as its JSON twin.
        let twin = path.with_extension("json");
        if twin.exists() {
            return Ok(());
        }
        if from_dir {
            inputs.notes.push(format!(
                "{}: replay CSV without its JSON twin: skipped (report reads the JSON)",
                path.display()
            ));
            return Ok(());
        }
        return Err(ReportError::Unreadable {
            path: path.to_path_buf(),
            why: format!(
                "a results CSV: give its JSON twin ({}) instead, which carries every field",
                twin.display()
            ),
        });
    }
    Err(ReportError::Unreadable {
        path: path.to_path_buf(),
        why: "a CSV that is neither an MPI sweep (scripts/mpi-sweep.py) nor replay results".into(),
    })
}
