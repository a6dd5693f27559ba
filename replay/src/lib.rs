//! mgbench-replay: run gather/scatter patterns (Spatter JSON) on CPU threads next to a STREAM
//! baseline, and export the results.
//!
//! The flow is load → plan → run: every pattern file is parsed and every configuration checked
//! (kernel, patterns, deltas, the memory its buffers need) before anything runs, so bad input
//! never leaves a run half done. Then a pinned thread pool is created, STREAM runs once, and each
//! configuration is timed (warm-up, then `nruns` runs; minimum time) and reported as soon as it
//! is done.
//!
//! ```no_run
//! use mgbench_replay::{replay, Event, Input, ReplayConfig};
//!
//! let mut config = ReplayConfig::new(vec![Input::File("patterns/uniform.json".into())]);
//! config.threads = 2;
//! config.stream_elements = None; // no STREAM baseline
//! let records = replay(&config, &mut |event| {
//!     if let Event::Record(r) = event {
//!         println!("{}: {:.1} MB/s", r.name, r.bandwidth_mbs);
//!     }
//! })
//! .unwrap();
//! assert!(!records.is_empty());
//! ```

pub mod apex;
pub mod buffer;
pub mod compact;
pub mod config;
pub mod export;
pub mod gpu;
pub mod kernel;
pub mod launch;
pub mod measure;
#[cfg(feature = "mpi")]
mod mpi_team;
pub mod pattern;
pub mod plan;
pub mod pool;
pub mod record;
pub mod results;
pub mod scaling;

mod simd;
pub mod stream;
mod sys;

use std::path::{Path, PathBuf};

use crate::config::{ConfigError, Defaults, Origin, RunConfig};
use crate::kernel::{Buffers, WriteMode};
use crate::measure::{bandwidth_mbs, Measurement, Summary, WallClock};
use crate::plan::{Footprint, PlanError};
use crate::pool::{Placement, Pool, PoolError};
use crate::record::{mgbench_version, now_rfc3339, Host, ReplayRecord, Scaling, StreamRecord};
use crate::results::{ResultsError, ResultsWriter};
use crate::stream::{StreamConfig, StreamError};

pub use crate::export::ExportFormat;

/// Where configurations come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A Spatter JSON pattern file.
    File(PathBuf),
    /// One configuration given on the command line (`--pattern`, `--kernel`, ...).
    Inline(Box<InlineSpec>),
}

/// A configuration given on the command line; it goes through the same parser as JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InlineSpec {
    pub name: Option<String>,
    pub kernel: Option<String>,
    pub pattern: Option<String>,
    pub pattern_gather: Option<String>,
    pub pattern_scatter: Option<String>,
    pub delta: Option<i64>,
    pub delta_gather: Option<i64>,
    pub delta_scatter: Option<i64>,
    pub count: Option<usize>,
    pub wrap: Option<usize>,
    pub pattern_size: Option<usize>,
    pub boundary: Option<usize>,
    /// apex kernel: block length L, locality exponent K, memory size M (words), seed.
    pub apex_l: Option<usize>,
    pub apex_k: Option<f64>,
    pub apex_m: Option<usize>,
    pub seed: Option<usize>,
}

impl InlineSpec {
    /// The equivalent JSON config object.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        let mut put_s = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                m.insert(k.to_string(), serde_json::Value::String(v.clone()));
            }
        };
        put_s("name", &self.name);
        put_s("kernel", &self.kernel);
        put_s("pattern", &self.pattern);
        put_s("pattern-gather", &self.pattern_gather);
        put_s("pattern-scatter", &self.pattern_scatter);
        for (k, v) in [
            ("delta", self.delta),
            ("delta-gather", self.delta_gather),
            ("delta-scatter", self.delta_scatter),
        ] {
            if let Some(v) = v {
                m.insert(k.to_string(), serde_json::Value::from(v));
            }
        }
        for (k, v) in [
            ("count", self.count),
            ("wrap", self.wrap),
            ("pattern-size", self.pattern_size),
            ("boundary", self.boundary),
            ("L", self.apex_l),
            ("M", self.apex_m),
            ("seed", self.seed),
        ] {
            if let Some(v) = v {
                m.insert(k.to_string(), serde_json::Value::from(v as u64));
            }
        }
        if let Some(k) = self.apex_k {
            m.insert("K".to_string(), serde_json::Value::from(k));
        }
        serde_json::Value::Object(m)
    }
}

/// Everything `mgbench replay` needs, validated by the CLI.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    pub inputs: Vec<Input>,
    pub threads: usize,
    pub placement: Placement,
    /// Overrides every config's `nruns`.
    pub runs: Option<usize>,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
    /// Scatter writes become atomic additions.
    pub atomic: bool,
    /// STREAM array size; `None` skips STREAM (`--no-stream`).
    pub stream_elements: Option<StreamSize>,
    /// Where to write results files; `None` writes none.
    pub out_dir: Option<PathBuf>,
    /// `--compact-gaps BYTES`: shrink distances between indices longer than this (see
    /// [`compact`]); `None` runs patterns as they are.
    pub compact_gaps: Option<u64>,
    /// With `compact_gaps`: compact only the configurations that do not fit in memory as they
    /// are (`--compact-gaps-if-needed`; `mgbench profile`, whose patterns come from a
    /// program's whole address space).
    pub compact_if_needed: bool,
}

/// How large STREAM's arrays are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSize {
    /// 4x the last-level cache (STREAM's rule).
    Auto,
    Elements(usize),
}

impl From<Option<usize>> for StreamSize {
    /// A `--size`/`--stream-size` option: the elements given, else Auto.
    fn from(elements: Option<usize>) -> StreamSize {
        elements.map_or(StreamSize::Auto, StreamSize::Elements)
    }
}

impl ReplayConfig {
    /// Defaults: one thread per allowed CPU, pinned; one warm-up run; STREAM on; no files.
    pub fn new(inputs: Vec<Input>) -> ReplayConfig {
        ReplayConfig {
            inputs,
            threads: default_threads(),
            placement: Placement::Pinned,
            runs: None,
            warmup: 1,
            atomic: false,
            stream_elements: Some(StreamSize::Auto),
            out_dir: None,
            compact_gaps: None,
            compact_if_needed: false,
        }
    }

    /// How scatter kernels write: atomic additions with `--atomic`, else plain stores.
    pub fn write_mode(&self) -> WriteMode {
        if self.atomic {
            WriteMode::AtomicAdd
        } else {
            WriteMode::Store
        }
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes (None where unknown).
pub fn available_memory_bytes() -> Option<u64> {
    sys::available_memory_bytes()
}

/// One thread per CPU this process may use.
pub fn default_threads() -> usize {
    sys::allowed_cpus().len().max(1)
}

/// Progress reported while replay runs.
#[derive(Debug)]
pub enum Event<'a> {
    /// All inputs parsed and checked.
    Planned {
        configs: usize,
    },
    /// Results files chosen.
    ResultsFiles {
        json: &'a Path,
        csv: &'a Path,
    },
    /// About to run something: `what` is "STREAM" or a config's name; `index` counts the
    /// configs from 0 (STREAM has index 0 too), of `total`.
    Running {
        what: &'a str,
        index: usize,
        total: usize,
    },
    Stream(&'a StreamRecord),
    /// The GPU STREAM baseline (`--cuda`).
    GpuStream(&'a gpu::GpuStreamRecord),
    Record(&'a ReplayRecord),
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{origin}{}: {problem}", name_part(.name))]
    Plan {
        origin: Origin,
        name: String,
        problem: PlanError,
    },
    #[error("no pattern files given and no default suite found (looked in {looked}): pass pattern files or --pattern SPEC")]
    NoDefaultSuite { looked: String },
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error(transparent)]
    Gpu(#[from] gpu::GpuError),
    #[error("--runs must be at least 1")]
    ZeroRuns,
    #[error("{0}")]
    CompactGaps(String),
    #[error("{}", ranks_part(.0))]
    Ranks(Vec<(usize, String)>),
    #[error("this mgbench was built without MPI support: rebuild it with its default features (`cargo build --release`, or `--features mpi` after `--no-default-features`; needs OpenMPI and libclang: scripts/setup.sh installs libopenmpi-dev and libclang-dev)")]
    NoMpi,
    #[error("MPI could not be initialised (was it already?)")]
    MpiInit,
    #[error("--mpi {asked} but the launcher started {got} ranks: make them agree (or leave --mpi out when starting mgbench under mpirun/srun yourself)")]
    RankCount { asked: usize, got: usize },
    #[error("another rank failed (rank 0 reports why)")]
    FailedElsewhere,
    #[error("rank {0}: failure injected by MGBENCH_FAIL_RANK={0} (a test hook)")]
    Injected(usize),
    #[error("{origin}{}: {problem}", name_part(.name))]
    Alloc {
        origin: Origin,
        name: String,
        problem: crate::buffer::AllocError,
    },
}

/// "rank 1 failed: ...", with ranks that failed alike on one line.
fn ranks_part(failures: &[(usize, String)]) -> String {
    let mut groups: Vec<(Vec<usize>, &str)> = Vec::new();
    for (r, m) in failures {
        match groups.iter_mut().find(|(_, g)| g == m) {
            Some((ranks, _)) => ranks.push(*r),
            None => groups.push((vec![*r], m)),
        }
    }
    groups
        .iter()
        .map(|(ranks, m)| {
            let list: Vec<String> = ranks.iter().map(ToString::to_string).collect();
            let who = if ranks.len() == 1 { "rank" } else { "ranks" };
            format!("{who} {} failed: {m}", list.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn name_part(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" ({name:?})")
    }
}

/// A configuration with its checked footprint.
#[derive(Debug, Clone)]
pub struct Planned {
    pub config: RunConfig,
    pub footprint: Footprint,
    pub racy: bool,
}

/// Whether this build can run as MPI ranks (the `mpi` feature).
pub const MPI_SUPPORT: bool = cfg!(feature = "mpi");

/// Runs this process as one rank of an MPI job (see [`scaling`]); rank 0 reports events and
/// returns the records, other ranks return an empty list. `expected_ranks` is `--mpi N`.
pub fn run_rank(
    config: &ReplayConfig,
    scaling: Scaling,
    launcher: &str,
    expected_ranks: Option<usize>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<ReplayRecord>, ReplayError> {
    #[cfg(feature = "mpi")]
    {
        mpi_team::run_rank(config, scaling, launcher, expected_ranks, on_event)
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = (config, scaling, launcher, expected_ranks, on_event);
        Err(ReplayError::NoMpi)
    }
}

/// Loads every input and checks every configuration, without running anything.
pub fn plan(config: &ReplayConfig) -> Result<Vec<Planned>, ReplayError> {
    plan_within(config, sys::available_memory_bytes())
}

/// As [`plan`], checking buffers against `available` bytes (None: unchecked); MPI ranks on one
/// node each get their share of the node's memory.
pub fn plan_within(
    config: &ReplayConfig,
    available: Option<u64>,
) -> Result<Vec<Planned>, ReplayError> {
    if config.runs == Some(0) {
        return Err(ReplayError::ZeroRuns);
    }
    if let Some(bytes) = config.compact_gaps {
        compact::check_bound(bytes).map_err(ReplayError::CompactGaps)?;
    }
    let defaults = Defaults::default();
    let mut configs = Vec::new();
    for input in &config.inputs {
        match input {
            Input::File(path) => configs.extend(config::load_file(path, &defaults)?),
            Input::Inline(spec) => configs.push(config::parse_config(
                &spec.to_json(),
                Origin {
                    source: "<command line>".to_string(),
                    index: 0,
                },
                &defaults,
            )?),
        }
    }
    configs
        .into_iter()
        .map(|mut c| {
            if let Some(r) = config.runs {
                c.nruns = r;
            }
            let fail = |c: &RunConfig, problem| ReplayError::Plan {
                origin: c.origin.clone(),
                name: c.name.clone(),
                problem,
            };
            if let Some(bytes) = config.compact_gaps {
                // The flag that asks for compaction here, if it does.
                let label = if config.compact_if_needed {
                    let need = plan::footprint(&c)
                        .map_err(|p| fail(&c, p))?
                        .bytes(config.threads);
                    available.filter(|&a| need > u128::from(a)).map(|a| {
                        format!(
                            "--compact-gaps-if-needed, as it needed {} and {} is available",
                            plan::human_bytes(need),
                            plan::human_bytes(u128::from(a))
                        )
                    })
                } else {
                    Some("--compact-gaps".to_string())
                };
                if let Some(label) = label {
                    c.compaction = compact::compact(&mut c, bytes, &label);
                }
            }
            let footprint = plan::footprint(&c).map_err(|p| fail(&c, p))?;
            plan::check_memory(&c, &footprint, config.threads, available)
                .map_err(|p| fail(&c, p))?;
            let racy = !config.atomic && plan::scatter_may_race(&c, config.threads);
            Ok(Planned {
                config: c,
                footprint,
                racy,
            })
        })
        .collect()
}

/// The shipped suite: `*.json` in the first `patterns/` directory found in the current
/// directory, next to the executable (`../share/mgbench/patterns`), or in the source tree this
/// binary was built from.
pub fn default_pattern_files() -> Result<Vec<PathBuf>, ReplayError> {
    let mut candidates = vec![PathBuf::from("patterns")];
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("../share/mgbench/patterns"));
            candidates.push(dir.join("patterns"));
        }
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../patterns"));
    for dir in &candidates {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        if !files.is_empty() {
            files.sort();
            return Ok(files);
        }
    }
    Err(ReplayError::NoDefaultSuite {
        looked: candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Runs STREAM alone on a fresh pool.
pub fn run_stream(
    threads: usize,
    placement: Placement,
    size: StreamSize,
    ntimes: usize,
) -> Result<StreamRecord, ReplayError> {
    let pool = Pool::new(threads, placement)?;
    stream_on(&pool, size, ntimes)
}

pub(crate) fn stream_on(
    pool: &Pool,
    size: StreamSize,
    ntimes: usize,
) -> Result<StreamRecord, ReplayError> {
    let (elements, notes) = match size {
        StreamSize::Auto => {
            let (n, note) = stream::default_elements(sys::last_level_cache_bytes());
            (n, vec![note])
        }
        StreamSize::Elements(n) => (n, vec![]),
    };
    let record = stream::run(
        pool,
        &StreamConfig { elements, ntimes },
        sys::available_memory_bytes(),
        notes,
    )?;
    Ok(record)
}

/// Loads, checks and runs every configuration; reports progress through `on_event` and
/// returns all records. Results files (if `out_dir` is set) are rewritten after each record.
pub fn replay(
    config: &ReplayConfig,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<ReplayRecord>, ReplayError> {
    let planned = plan(config)?;
    on_event(Event::Planned {
        configs: planned.len(),
    });
    let mut writer = open_results(config, on_event)?;
    let pool = Pool::new(config.threads, config.placement)?;
    let stream = match config.stream_elements {
        Some(size) => {
            on_event(Event::Running {
                what: "STREAM",
                index: 0,
                total: planned.len(),
            });
            let s = stream_on(&pool, size, stream::DEFAULT_NTIMES)?;
            if let Some(w) = &writer {
                w.write_stream(&s)?;
            }
            on_event(Event::Stream(&s));
            Some(s)
        }
        None => None,
    };
    let host = Host::detect();
    let mode = config.write_mode();
    let mut records = Vec::with_capacity(planned.len());
    for (index, p) in planned.iter().enumerate() {
        on_event(Event::Running {
            what: &p.config.name,
            index,
            total: planned.len(),
        });
        let record = run_one(&pool, p, config, mode, stream.as_ref(), &host)?;
        on_event(Event::Record(&record));
        if let Some(w) = &mut writer {
            w.push(record.clone())?;
        }
        records.push(record);
    }
    Ok(records)
}

/// Creates this invocation's results files (unless `out_dir` is None) and reports them.
pub(crate) fn open_results(
    config: &ReplayConfig,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Option<ResultsWriter>, ReplayError> {
    let Some(dir) = &config.out_dir else {
        return Ok(None);
    };
    let w = ResultsWriter::create(dir, "replay")?;
    on_event(Event::ResultsFiles {
        json: w.json_path(),
        csv: w.csv_path(),
    });
    Ok(Some(w))
}

/// Times one planned configuration on the pool.
pub fn run_one(
    pool: &Pool,
    p: &Planned,
    config: &ReplayConfig,
    mode: WriteMode,
    stream: Option<&StreamRecord>,
    host: &Host,
) -> Result<ReplayRecord, ReplayError> {
    let times = measure_config(pool, p, config, mode, &mut || {})?;
    Ok(build_record(pool, p, config, times, stream, host))
}

/// Allocates the configuration's buffers and times it: `config.warmup` untimed runs, then
/// `nruns` timed ones, each preceded by `before_each` (an MPI barrier, outside the timing).
pub fn measure_config(
    pool: &Pool,
    p: &Planned,
    config: &ReplayConfig,
    mode: WriteMode,
    before_each: &mut dyn FnMut(),
) -> Result<Vec<f64>, ReplayError> {
    let mut buffers = allocate_buffers(pool, p)?;
    Ok(time_config(
        pool,
        p,
        config,
        mode,
        &mut buffers,
        before_each,
    ))
}

/// The configuration's buffers, first-touched by the pool's threads.
pub fn allocate_buffers(pool: &Pool, p: &Planned) -> Result<Buffers, ReplayError> {
    Buffers::allocate(pool, &p.footprint).map_err(|problem| ReplayError::Alloc {
        origin: p.config.origin.clone(),
        name: p.config.name.clone(),
        problem,
    })
}

/// Times the configuration on allocated buffers (see [`measure_config`]).
pub fn time_config(
    pool: &Pool,
    p: &Planned,
    config: &ReplayConfig,
    mode: WriteMode,
    buffers: &mut Buffers,
    before_each: &mut dyn FnMut(),
) -> Vec<f64> {
    let c = &p.config;
    let mut clock = WallClock;
    let mut run = || kernel::execute(pool, c, buffers, mode);
    for _ in 0..config.warmup {
        before_each();
        run();
    }
    (0..c.nruns)
        .map(|_| {
            before_each();
            clock.measure(&mut run)
        })
        .collect()
}

/// The record of one measured configuration.
pub fn build_record(
    pool: &Pool,
    p: &Planned,
    config: &ReplayConfig,
    times: Vec<f64>,
    stream: Option<&StreamRecord>,
    host: &Host,
) -> ReplayRecord {
    let mut r = measured_record(
        p,
        config,
        times,
        stream.map(|s| s.copy_mbs),
        host,
        pool.start_cost(),
    );
    if p.racy {
        r.notes.push(format!(
            "racy by design: {} threads may write the same element, so the sparse values are \
             undefined; the bandwidth is valid (use --atomic for well-defined values)",
            pool.threads()
        ));
    }
    if pool.is_oversubscribed() {
        r.notes
            .push("more threads than CPUs: bandwidth is not representative".to_string());
    } else if !pool.is_pinned() {
        r.notes.push("threads are not pinned".to_string());
    }
    r.threads = pool.threads();
    r.pinned = pool.is_pinned();
    r
}

/// The fields every backend fills alike: the configuration, Spatter's byte accounting, the
/// timing summary and the STREAM comparison (`backend` "cpu", one thread, wall clock: the
/// caller adjusts what differs). `start_s`: what starting a run costs on that backend (a
/// note says when the runs are too short for it).
pub(crate) fn measured_record(
    p: &Planned,
    config: &ReplayConfig,
    times: Vec<f64>,
    stream_copy: Option<f64>,
    host: &Host,
    start_s: f64,
) -> ReplayRecord {
    let c = &p.config;
    let summary = Summary::of(&times).unwrap_or(Summary {
        min: f64::NAN,
        median: f64::NAN,
        max: f64::NAN,
        mean: f64::NAN,
    });
    let bytes = c.bytes();
    let bandwidth = bandwidth_mbs(bytes, summary.min);
    let accesses = bytes / 8;
    let mut notes = c.notes.clone();
    notes.extend(measure::short_run(summary.min, c.count, start_s));
    ReplayRecord {
        schema_version: record::SCHEMA_VERSION,
        name: c.name.clone(),
        kernel: c.kernel.kind(),
        source: c.origin.source.clone(),
        config_index: c.origin.index,
        backend: "cpu".to_string(),
        pattern_len: c.kernel.pattern_len(),
        delta: c.kernel.delta(),
        delta_scatter: match &c.kernel {
            config::Kernel::GatherScatter { delta_scatter, .. } => Some(*delta_scatter),
            _ => None,
        },
        delta_source: c.delta_source.clone(),
        pattern_spec: c.pattern_spec.clone(),
        count: c.count,
        wrap: c.wrap,
        threads: 1,
        ranks: 1,
        bytes,
        sparse_bytes: p.footprint.sparse_bytes(),
        dense_bytes: p.footprint.dense_bytes(),
        warmup_runs: config.warmup,
        min_time_s: summary.min,
        median_time_s: summary.median,
        run_times_s: times,
        bandwidth_mbs: bandwidth,
        accesses,
        accesses_per_s: accesses as f64 / summary.min,
        ns_per_access: summary.min * 1e9 / accesses as f64,
        apex: match &c.kernel {
            config::Kernel::Apex(a) => Some(record::ApexRun {
                l: a.params.l,
                k: a.params.k,
                m: a.params.m,
                seed: a.seed,
            }),
            _ => None,
        },
        stream_copy_mbs: stream_copy,
        pct_of_stream: stream_copy.map(|s| 100.0 * bandwidth / s),
        compaction: c.compaction.clone(),
        racy: p.racy,
        atomic: config.atomic && c.kernel.kind().is_scatter_like(),
        pinned: false,
        timer: WallClock.name().to_string(),
        notes,
        mpi: None,
        device: None,
        gpu: None,
        host: host.clone(),
        mgbench_version: mgbench_version(),
        time: now_rfc3339(),
    }
}
