//! Result records: one serde struct per measured configuration (and one per STREAM run), with
//! the host facts needed to compare numbers across machines. Field names carry their units.
//! The schema is documented in the README ("Output schema") and locked by a round-trip test;
//! `schema_version` changes when a field changes meaning or disappears.

use serde::{Deserialize, Serialize};

use crate::config::KernelKind;
use crate::sys;

/// Version of the record schemas below.
pub const SCHEMA_VERSION: u32 = 1;

/// The machine a measurement was taken on, and how busy it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    pub cpu_model: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// Total last-level cache, summed over instances.
    pub llc_bytes: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// 1-minute load average when the record was made.
    pub load_avg_1m: Option<f64>,
    pub os: String,
}

/// The environment variable that names the machine in results instead of its hostname, for
/// machines that share one (cloud VMs named `vm` or `localhost`, identical nodes).
pub const MACHINE_ENV: &str = "MGBENCH_MACHINE";

impl Host {
    /// Reads this machine's facts. `hostname` is `$MGBENCH_MACHINE` where that is set and not
    /// blank, so that results from machines that share a hostname stay apart in `compare`.
    pub fn detect() -> Host {
        let named = std::env::var(MACHINE_ENV)
            .ok()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        Host {
            hostname: named.unwrap_or_else(sys::hostname),
            cpu_model: sys::cpu_model(),
            cores: sys::allowed_cpus().len(),
            llc_bytes: sys::last_level_cache_bytes(),
            memory_bytes: sys::total_memory_bytes(),
            load_avg_1m: sys::load_average_1m(),
            os: std::env::consts::OS.to_string(),
        }
    }
}

/// The mgbench version written into every record.
pub fn mgbench_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Current UTC time, RFC 3339, to the second.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// One measured pattern configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayRecord {
    pub schema_version: u32,
    pub name: String,
    pub kernel: KernelKind,
    /// Pattern file (or "<command line>") and position of the config in it.
    pub source: String,
    pub config_index: usize,
    /// "cpu" or "cuda".
    pub backend: String,
    /// Indices moved per iteration on one side (inner pattern for multi-kernels).
    pub pattern_len: usize,
    /// Delta in elements (gs: the gather side); negative when the bases walk downwards.
    pub delta: i64,
    /// gs only: the scatter side's delta.
    pub delta_scatter: Option<i64>,
    /// The generator of the pattern as written ("UNIFORM:8:4:NR"; gs: the gather side), or
    /// None for an index list.
    #[serde(default)]
    pub pattern_spec: Option<String>,
    /// Where the delta came from: "default", "config", "generator:UNIFORM",
    /// "generator:UNIFORM:NR", "generator:LAPLACIAN" (gs: "gather=...,scatter=...").
    pub delta_source: String,
    pub count: usize,
    pub wrap: usize,
    pub threads: usize,
    pub ranks: usize,
    /// Bytes moved by one run: 8 x elements x count (Spatter's accounting).
    pub bytes: u64,
    pub sparse_bytes: u64,
    /// One thread's dense buffer.
    pub dense_bytes: u64,
    pub warmup_runs: usize,
    pub min_time_s: f64,
    pub median_time_s: f64,
    pub run_times_s: Vec<f64>,
    /// bytes / min_time_s / 1e6.
    pub bandwidth_mbs: f64,
    /// Element accesses per run: the elements counted in `bytes` (8 bytes each).
    #[serde(default)]
    pub accesses: u64,
    /// accesses / min_time_s, all threads together.
    #[serde(default)]
    pub accesses_per_s: f64,
    /// min_time_s / accesses in nanoseconds, all threads together (Apex-MAP's figure).
    #[serde(default)]
    pub ns_per_access: f64,
    /// apex kernel only: its parameters.
    #[serde(default)]
    pub apex: Option<ApexRun>,
    pub stream_copy_mbs: Option<f64>,
    /// bandwidth_mbs as a percentage of STREAM Copy, same threads, same invocation.
    pub pct_of_stream: Option<f64>,
    /// `--compact-gaps` shrank long distances between this config's indices: the bound, how
    /// many, and the span before and after.
    #[serde(default)]
    pub compaction: Option<crate::compact::Compaction>,
    /// Threads may write one sparse element concurrently: values are racy by design (the
    /// bandwidth is still meaningful). Never true with `atomic`.
    pub racy: bool,
    /// Scatter writes were atomic additions (`--atomic`).
    pub atomic: bool,
    /// Every thread was pinned to its own CPU.
    pub pinned: bool,
    pub timer: String,
    pub notes: Vec<String>,
    /// MPI runs only: per-rank figures and both aggregates. The record's `bytes`, times and
    /// `bandwidth_mbs` are then the job's: all ranks' bytes over the slowest rank's time.
    #[serde(default)]
    pub mpi: Option<MpiFigures>,
    /// CUDA runs only (`backend: "cuda"`): the GPU.
    #[serde(default)]
    pub device: Option<crate::gpu::DeviceInfo>,
    /// CUDA runs only: the kernel function, launch shape and sweep step.
    #[serde(default)]
    pub gpu: Option<crate::gpu::GpuRun>,
    pub host: Host,
    pub mgbench_version: String,
    /// When the record was made (UTC, RFC 3339).
    pub time: String,
}

impl ReplayRecord {
    /// Its runs were too short to time (a note says so, with the count that would do).
    pub fn too_short_to_time(&self) -> bool {
        self.notes
            .iter()
            .any(|n| n.starts_with(crate::measure::SHORT_RUN))
    }
}

/// How a configuration is spread over MPI ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scaling {
    /// Every rank runs the whole configuration.
    Weak,
    /// The ranks split it: contiguous blocks of the count loop, or of the pattern when the
    /// count is smaller than the number of ranks.
    Strong,
}

impl Scaling {
    /// The name used in JSON, CSV and the table ("weak" or "strong").
    pub fn as_str(self) -> &'static str {
        match self {
            Scaling::Weak => "weak",
            Scaling::Strong => "strong",
        }
    }
}

/// The part of a configuration one rank ran: iterations `[start, end)` of the count loop and
/// indices `[start, end)` of the pattern (the inner pattern of multi-kernels, both sides of gs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    pub iterations: [usize; 2],
    pub indices: [usize; 2],
}

impl Share {
    /// Elements this share moves per side: iterations x indices.
    pub fn elements(&self) -> usize {
        (self.iterations[1] - self.iterations[0]) * (self.indices[1] - self.indices[0])
    }
}

/// One rank's measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankFigures {
    pub rank: usize,
    pub host: String,
    pub share: Share,
    pub bytes: u64,
    pub min_time_s: f64,
    /// bytes / min_time_s / 1e6 (0 for a rank with nothing to do).
    pub bandwidth_mbs: f64,
    pub run_times_s: Vec<f64>,
}

/// The MPI side of a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MpiFigures {
    pub scaling: Scaling,
    /// "mpirun", "srun", or whatever started the ranks.
    pub launcher: String,
    pub per_rank: Vec<RankFigures>,
    /// Spatter's aggregate: the sum of the ranks' own bandwidths (each over its own best run).
    pub sum_of_rank_bandwidths_mbs: f64,
    /// The rank that was slowest in the best run.
    pub slowest_rank: usize,
}

/// The Apex-MAP parameters of an apex record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ApexRun {
    /// Block length in words.
    pub l: u64,
    /// Locality exponent.
    pub k: f64,
    /// Memory size in words.
    pub m: u64,
    pub seed: u64,
}

/// One STREAM kernel's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamKernel {
    pub name: String,
    /// Bytes counted per run (2 or 3 words per element, STREAM's rule).
    pub bytes: u64,
    pub best_time_s: f64,
    pub avg_time_s: f64,
    pub max_time_s: f64,
    pub bandwidth_mbs: f64,
}

/// A STREAM run (Copy, Scale, Add, Triad).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRecord {
    pub schema_version: u32,
    pub copy_mbs: f64,
    pub scale_mbs: f64,
    pub add_mbs: f64,
    pub triad_mbs: f64,
    /// Elements per array.
    pub elements: usize,
    pub array_bytes: u64,
    pub threads: usize,
    /// Timed iterations including the first, which STREAM drops.
    pub ntimes: usize,
    pub kernels: Vec<StreamKernel>,
    /// Results matched STREAM's expected values.
    pub validated: bool,
    pub pinned: bool,
    pub notes: Vec<String>,
    /// MPI runs: STREAM ran on every rank at once and the rates above are their sum.
    #[serde(default = "one")]
    pub ranks: usize,
    pub host: Host,
    pub mgbench_version: String,
    pub time: String,
}

fn one() -> usize {
    1
}
