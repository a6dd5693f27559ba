//! Replay on NVIDIA GPUs (`replay --cuda`): launch shapes, the throughput sweep, the atomic
//! decision for scatters, device-memory checks, the GPU STREAM (BabelStream) baseline and its
//! accounting, and the records. Everything here is plain logic over the [`GpuDevice`] trait;
//! the CUDA driver itself (cudarc, NVRTC, events) lives in `cuda.rs`, built with the `cuda`
//! feature, so all of this is tested on machines without a GPU.
//!
//! Kernels (`kernels-cuda/*.cu`) run one GPU thread per element access in a grid-stride loop:
//! thread `t` handles iteration `t / len`, position `t % len`. Timing is by CUDA events around
//! each launch; bytes are counted as on the CPU (8 x elements x count), so CPU and GPU figures
//! compare directly.

#[cfg(feature = "cuda")]
mod cuda;

use serde::{Deserialize, Serialize};

use crate::config::{Kernel, Origin, RunConfig};
use crate::measure::{bandwidth_mbs, Summary};
use crate::plan::{self, Footprint};
use crate::record::{self, mgbench_version, now_rfc3339, Host, ReplayRecord};
use crate::{Event, Planned, ReplayConfig, ReplayError, StreamSize};

/// Threads per block when a config gives no "local-work-size".
pub const DEFAULT_BLOCK: u32 = 256;
/// The largest block CUDA allows.
pub const MAX_BLOCK: usize = 1024;
/// Blocks launched per SM at most (beyond that the grid-stride loop does the rest): four
/// waves of a fully occupied SM (2048 resident threads).
const WAVES: u64 = 4;
const THREADS_PER_SM: u64 = 2048;

/// The throughput sweep multiplies a config's count by these factors.
pub const SWEEP_FACTORS: [usize; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
/// Indices kept per pattern in the sweep unless `--sweep-len` says otherwise.
pub const DEFAULT_SWEEP_LEN: usize = 256;
/// A step is on the plateau when it reaches this fraction of the sweep's best bandwidth.
pub const PLATEAU_FRACTION: f64 = 0.9;

/// BabelStream's default array length (2^25 doubles, 256 MiB per array).
pub const DEFAULT_STREAM_ELEMENTS: usize = 1 << 25;
/// BabelStream's iterations (the first is dropped, as in STREAM).
pub const DEFAULT_STREAM_NTIMES: usize = 10;
/// Threads per block of the dot kernel (MG_DOT_BLOCK in babelstream.cu).
pub const DOT_BLOCK: u32 = 256;
/// BabelStream's start values and scalar.
pub const STREAM_INIT: (f64, f64, f64) = (0.1, 0.2, 0.0);
pub const STREAM_SCALAR: f64 = 0.4;

/// Sources of the kernels, compiled at run time (NVRTC).
pub const SPATTER_SOURCE: &str = include_str!("../../../kernels-cuda/spatter.cu");
pub const BABELSTREAM_SOURCE: &str = include_str!("../../../kernels-cuda/babelstream.cu");

/// What `--cuda` was asked to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// CUDA device ordinal (`--device`).
    pub device: usize,
    /// Run the throughput sweep instead of one run per config.
    pub sweep: bool,
    /// Indices kept per pattern in the sweep (None: [`DEFAULT_SWEEP_LEN`]).
    pub sweep_len: Option<usize>,
}

/// The GPU a record was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// CUDA device ordinal.
    pub ordinal: usize,
    pub name: String,
    /// Total device memory.
    pub memory_bytes: u64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// "major.minor".
    pub compute_capability: String,
    /// CUDA version the driver supports, "major.minor".
    pub driver_version: String,
}

/// Blocks and threads of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchShape {
    pub block: u32,
    pub grid: u32,
}

impl LaunchShape {
    /// GPU threads launched.
    pub fn threads(&self) -> u64 {
        u64::from(self.block) * u64::from(self.grid)
    }
}

/// How a pattern was run on the GPU (the record's `gpu` field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuRun {
    /// Kernel function launched ("gather", "scatter_atomic", ...).
    pub function: String,
    pub block: u32,
    pub grid: u32,
    /// Throughput sweep only: where this run sits in it.
    #[serde(default)]
    pub sweep: Option<SweepStep>,
}

/// One step of the throughput sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// 0-based position and number of steps run.
    pub step: usize,
    pub steps: usize,
    /// count = base_count x factor.
    pub factor: usize,
    pub base_count: usize,
    /// The pattern's length before the sweep truncated it (None: not truncated).
    pub truncated_from: Option<usize>,
    /// Count at which the bandwidth plateaus (first step from which every step reaches 90% of
    /// the sweep's best), or None when there is none: still rising at the last step, or
    /// falling at larger counts.
    pub plateau_count: Option<usize>,
}

/// Why the GPU path cannot run.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("this mgbench was built without CUDA support: rebuild it with `cargo build --release --features cuda` (it needs no CUDA toolkit to build)")]
    NotBuilt,
    #[error("--cuda: no CUDA driver found (libcuda.so could not be loaded; tried {tried}): it needs an NVIDIA GPU with its driver installed. Run without --cuda to replay on the CPU")]
    NoDriver { tried: String },
    #[error("--cuda: CUDA's runtime compiler NVRTC could not be loaded (libnvrtc.so; tried {tried}): install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc-cu12` and add its lib directory to LD_LIBRARY_PATH")]
    NoNvrtc { tried: String },
    #[error("--device {asked}: this machine has {count} CUDA device(s) (ordinals from 0)")]
    NoDevice { asked: usize, count: usize },
    #[error("CUDA driver error while {doing}: {message}")]
    Driver { doing: String, message: String },
    #[error("NVRTC could not compile kernels-cuda/{file} for compute capability {arch}: {log}")]
    Compile {
        file: String,
        arch: String,
        log: String,
    },
    #[error("{origin}{name}: {problem}")]
    Config {
        origin: Origin,
        name: String,
        problem: String,
    },
    #[error("{origin}{name}: the buffers need {} on the GPU but {device} has {} free of {}: lower \"count\" or \"delta\", or bound the indices with \"boundary\" or \"pattern-size\"", human(*need), human(*free), human(*total))]
    TooLarge {
        origin: Origin,
        name: String,
        need: u64,
        free: u64,
        total: u64,
        device: String,
    },
    #[error("GPU STREAM needs at least 1 element per array: raise --stream-size")]
    StreamEmpty,
    #[error("GPU STREAM: 3 arrays of {elements} doubles need {} but {device} has {} free: lower --stream-size", human(*need), human(*free))]
    StreamTooLarge {
        elements: usize,
        need: u64,
        free: u64,
        device: String,
    },
}

fn human(bytes: u64) -> String {
    plan::human_bytes(u128::from(bytes))
}

fn named(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" ({name})")
    }
}

/// The shape of a launch over `elements` element accesses: `local_work_size` threads per block
/// (default 256), enough blocks for one thread per element, at most four full-occupancy waves
/// of every SM (the grid-stride loop covers the rest).
pub fn launch_shape(
    elements: u64,
    local_work_size: Option<usize>,
    sm_count: u32,
) -> Result<LaunchShape, String> {
    let block = match local_work_size {
        None => DEFAULT_BLOCK,
        Some(0) => return Err("\"local-work-size\" 0: a block needs at least 1 thread".into()),
        Some(n) if n > MAX_BLOCK => {
            return Err(format!(
                "\"local-work-size\" {n} is more than CUDA's {MAX_BLOCK} threads per block"
            ))
        }
        Some(n) => n as u32,
    };
    let needed = elements.div_ceil(u64::from(block)).max(1);
    let per_sm = (THREADS_PER_SM / u64::from(block)).max(1) * WAVES;
    let cap = (u64::from(sm_count.max(1)) * per_sm).min(i32::MAX as u64);
    Ok(LaunchShape {
        block,
        grid: needed.min(cap) as u32,
    })
}

/// Whether some sparse element is written more than once by `pattern[j] + delta * i`
/// (i < count): a duplicate index, or two indices a multiple m*delta apart with m < count.
/// A negative delta walks the same bases downwards, so only |delta| matters.
pub fn writes_repeat(pattern: &[usize], delta: i64, count: usize) -> bool {
    let delta = usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX);
    let mut v = pattern.to_vec();
    v.sort_unstable();
    if v.windows(2).any(|w| w[0] == w[1]) {
        return true;
    }
    if count <= 1 || v.is_empty() {
        return false;
    }
    if delta == 0 {
        return true;
    }
    // Within one residue class modulo delta the closest pair is adjacent after sorting.
    v.sort_unstable_by_key(|&x| (x % delta, x));
    let reach = delta as u128 * (count as u128 - 1);
    v.windows(2)
        .any(|w| w[0] % delta == w[1] % delta && (w[1] - w[0]) as u128 <= reach)
}

/// The kernel function for a configuration and whether it is the atomic variant: scatter
/// sides whose writes repeat (or all scatters with `--atomic`) add atomically.
pub fn kernel_function(c: &RunConfig, force_atomic: bool) -> Result<(&'static str, bool), String> {
    let repeat = |p: &[usize], d: i64| force_atomic || writes_repeat(p, d, c.count);
    Ok(match &c.kernel {
        Kernel::Gather { .. } => ("gather", false),
        Kernel::MultiGather { .. } => ("multigather", false),
        Kernel::Scatter { pattern, delta } => {
            if repeat(pattern, *delta) {
                ("scatter_atomic", true)
            } else {
                ("scatter", false)
            }
        }
        Kernel::GatherScatter {
            scatter,
            delta_scatter,
            ..
        } => {
            if repeat(scatter, *delta_scatter) {
                ("gs_atomic", true)
            } else {
                ("gs", false)
            }
        }
        Kernel::MultiScatter { .. } => {
            let (p, d) = c.kernel.effective_pattern();
            if repeat(&p, d) {
                ("multiscatter_atomic", true)
            } else {
                ("multiscatter", false)
            }
        }
        Kernel::Apex(_) => {
            return Err(
                "the apex kernel has no CUDA version: run it without --cuda (on the CPU)".into(),
            )
        }
    })
}

/// The sweep's configurations: the pattern truncated to `len` indices, then the count
/// multiplied by 1, 2, 4 .. 512 (steps whose count would overflow are left out).
pub fn sweep_configs(c: &RunConfig, len: usize) -> (Vec<RunConfig>, Option<usize>) {
    let before = c.kernel.pattern_len();
    let kernel = c.kernel.slice_indices(0..len.max(1));
    let truncated_from = (kernel.pattern_len() < before).then_some(before);
    let steps = SWEEP_FACTORS
        .iter()
        .filter_map(|&f| c.count.checked_mul(f))
        .map(|count| {
            let mut s = c.clone();
            s.kernel = kernel.clone();
            s.count = count;
            s
        })
        .collect();
    (steps, truncated_from)
}

/// Index of the first sweep step from which every step reaches [`PLATEAU_FRACTION`] of the
/// best bandwidth; None when that is only the last step of several (still rising).
pub fn plateau(bandwidths: &[f64]) -> Option<usize> {
    let best = bandwidths.iter().copied().fold(f64::NAN, f64::max);
    if bandwidths.is_empty() || best.is_nan() {
        return None;
    }
    let mut start = bandwidths.len() - 1;
    while start > 0 && bandwidths[start - 1] >= PLATEAU_FRACTION * best {
        start -= 1;
    }
    if start == bandwidths.len() - 1 && bandwidths.len() > 1 {
        None
    } else {
        Some(start)
    }
}

/// Why a sweep ([`plateau`] None) has no plateau, from its steps' (count, bandwidth): still
/// rising at its largest count, or falling there below 90% of its best (the footprint grew
/// out of a cache as the count grew).
pub fn no_plateau(steps: &[(usize, f64)]) -> String {
    let Some(&(_, last)) = steps.last() else {
        return "sweep: no step ran".into();
    };
    let (best_count, best) =
        steps
            .iter()
            .copied()
            .fold((0, f64::MIN), |a, b| if b.1 > a.1 { b } else { a });
    if last >= PLATEAU_FRACTION * best {
        "sweep: bandwidth still rising at the largest count: no plateau reached".into()
    } else {
        format!(
            "sweep: bandwidth falls at larger counts (best {best:.0} MB/s at count {best_count}, \
             {:.0}% of it at the largest): no plateau; the footprint may have outgrown a cache \
             as the count grew",
            100.0 * last / best
        )
    }
}

/// Bytes a configuration's buffers take on the GPU: sparse side(s), one dense buffer, and the
/// index arrays (8-byte indices).
pub fn device_bytes(f: &Footprint) -> u64 {
    u64::try_from(f.bytes(1)).unwrap_or(u64::MAX)
}

/// One pattern run the device must time.
pub struct GpuJob<'a> {
    pub config: &'a RunConfig,
    pub footprint: Footprint,
    pub function: &'static str,
    pub shape: LaunchShape,
    pub warmup: usize,
    pub nruns: usize,
}

/// Run times of the BabelStream kernels and the arrays' final state.
#[derive(Debug, Clone, Default)]
pub struct StreamRun {
    /// Timed runs (the first already dropped) of copy, mul, add, triad, dot, in seconds.
    pub times: [Vec<f64>; 5],
    /// Sums of the final a, b, c arrays, and the last dot product.
    pub sums: [f64; 3],
    pub dot: f64,
}

/// A CUDA device as replay uses it. `cuda.rs` implements it over the driver; tests use fakes.
pub trait GpuDevice {
    fn info(&self) -> &DeviceInfo;
    /// (free, total) device memory in bytes.
    fn memory(&mut self) -> Result<(u64, u64), GpuError>;
    /// Allocates and initialises the job's buffers, runs `warmup` untimed launches, then
    /// `nruns` timed ones; returns their times in seconds (CUDA events).
    fn time(&mut self, job: &GpuJob<'_>) -> Result<Vec<f64>, GpuError>;
    /// Runs BabelStream on arrays of `elements` doubles, `ntimes` iterations.
    fn stream(&mut self, elements: usize, ntimes: usize) -> Result<StreamRun, GpuError>;
    /// What starting a timed run costs, its events included: the fastest of 20 GPU STREAM
    /// copies of one element, one block (an H200: 4.5-5.8 us; a one-block gather of 64 bytes
    /// took 5.9-6.2 us there, one of 64 KiB 6.4 us).
    fn launch_cost(&mut self) -> Result<f64, GpuError> {
        probe_launch(self)
    }
}

/// GPU STREAM iterations of the launch probe (the first is dropped).
const LAUNCH_PROBES: usize = 21;

/// [`GpuDevice::launch_cost`]'s probe: the fastest copy of GPU STREAM on one element.
fn probe_launch<D: GpuDevice + ?Sized>(dev: &mut D) -> Result<f64, GpuError> {
    dev.stream(1, LAUNCH_PROBES)
        .map(|run| run.times[0].iter().copied().fold(f64::INFINITY, f64::min))
}

/// Opens CUDA device `ordinal`: checks for the driver library and NVRTC before touching
/// either, so machines without them get an error, never a panic.
pub fn open_device(ordinal: usize) -> Result<Box<dyn GpuDevice>, GpuError> {
    #[cfg(feature = "cuda")]
    {
        Ok(Box::new(cuda::CudaDevice::open(ordinal)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        Err(GpuError::NotBuilt)
    }
}

/// The GPU STREAM baseline of one invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStreamRecord {
    pub schema_version: u32,
    pub backend: String,
    pub device: DeviceInfo,
    pub elements: usize,
    pub array_bytes: u64,
    pub ntimes: usize,
    pub copy_mbs: f64,
    pub mul_mbs: f64,
    pub add_mbs: f64,
    pub triad_mbs: f64,
    pub dot_mbs: f64,
    /// Best times of copy, mul, add, triad, dot.
    pub min_times_s: [f64; 5],
    /// Final arrays and dot product match the values computed on the host.
    pub validated: bool,
    pub notes: Vec<String>,
    pub host: Host,
    pub mgbench_version: String,
    pub time: String,
}

/// Words moved per element by copy, mul, add, triad, dot.
pub const STREAM_WORDS: [u64; 5] = [2, 2, 3, 3, 2];
pub const STREAM_NAMES: [&str; 5] = ["Copy", "Mul", "Add", "Triad", "Dot"];

/// The arrays' values after `ntimes` iterations of copy, mul, add, triad, and the dot product
/// of the last iteration per element (BabelStream's check).
pub fn stream_gold(ntimes: usize) -> (f64, f64, f64, f64) {
    let (mut a, mut b, mut c) = STREAM_INIT;
    let mut dot = 0.0;
    for _ in 0..ntimes {
        c = a;
        b = STREAM_SCALAR * c;
        c = a + b;
        a = b + STREAM_SCALAR * c;
        dot = a * b;
    }
    (a, b, c, dot)
}

/// Builds the STREAM record from a run, validating it against [`stream_gold`].
pub fn stream_record(
    run: &StreamRun,
    elements: usize,
    ntimes: usize,
    device: &DeviceInfo,
    host: &Host,
) -> GpuStreamRecord {
    let n = elements as f64;
    let mins: Vec<f64> = run
        .times
        .iter()
        .map(|t| Summary::of(t).map_or(f64::NAN, |s| s.min))
        .collect();
    let rate = |k: usize| bandwidth_mbs(8 * STREAM_WORDS[k] * elements as u64, mins[k]);
    let (ga, gb, gc, gdot) = stream_gold(ntimes);
    // Sums of 2^25 equal terms carry rounding errors of a few 1e-9 (relative).
    let close = |got: f64, want: f64| (got - want).abs() <= 1e-7 * want.abs().max(1e-300);
    let mut notes = Vec::new();
    for (name, got, want) in [
        ("a", run.sums[0] / n, ga),
        ("b", run.sums[1] / n, gb),
        ("c", run.sums[2] / n, gc),
        ("dot", run.dot / n, gdot),
    ] {
        if !close(got, want) {
            notes.push(format!(
                "validation failed: mean of {name} is {got:e}, expected {want:e}"
            ));
        }
    }
    GpuStreamRecord {
        schema_version: record::SCHEMA_VERSION,
        backend: "cuda".into(),
        device: device.clone(),
        elements,
        array_bytes: 8 * elements as u64,
        ntimes,
        copy_mbs: rate(0),
        mul_mbs: rate(1),
        add_mbs: rate(2),
        triad_mbs: rate(3),
        dot_mbs: rate(4),
        min_times_s: [mins[0], mins[1], mins[2], mins[3], mins[4]],
        validated: notes.is_empty(),
        notes,
        host: host.clone(),
        mgbench_version: mgbench_version(),
        time: now_rfc3339(),
    }
}

impl GpuStreamRecord {
    /// Copy, Mul, Add, Triad, Dot rates in MB/s (the order of [`STREAM_NAMES`]).
    pub fn rates(&self) -> [f64; 5] {
        [
            self.copy_mbs,
            self.mul_mbs,
            self.add_mbs,
            self.triad_mbs,
            self.dot_mbs,
        ]
    }

    /// CSV: one row per kernel.
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "schema_version,time,backend,device_name,kernel,elements,array_bytes,ntimes,bytes,best_time_s,bandwidth_mbs,validated,mgbench_version\n",
        );
        let rates = self.rates();
        for k in 0..5 {
            s.push_str(&format!(
                "{},{},{},\"{}\",{},{},{},{},{},{},{},{},{}\n",
                self.schema_version,
                self.time,
                self.backend,
                self.device.name.replace('"', "\"\""),
                STREAM_NAMES[k],
                self.elements,
                self.array_bytes,
                self.ntimes,
                8 * STREAM_WORDS[k] * self.elements as u64,
                self.min_times_s[k],
                rates[k],
                self.validated,
                self.mgbench_version
            ));
        }
        s
    }

    /// The BabelStream-style table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "GPU STREAM (BabelStream kernels) on {} [device {}]: {} elements per array ({}), best of {} iterations (first dropped), {}\n",
            self.device.name,
            self.device.ordinal,
            self.elements,
            human(self.array_bytes),
            self.ntimes,
            if self.validated { "results validated" } else { "VALIDATION FAILED" }
        );
        s.push_str("Function    Best Rate MB/s     Min time\n");
        let rates = self.rates();
        for k in 0..5 {
            s.push_str(&format!(
                "{:<8} {:>17.1} {:>12.6}\n",
                format!("{}:", STREAM_NAMES[k]),
                rates[k],
                self.min_times_s[k]
            ));
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s
    }
}

/// Runs GPU STREAM: `size` elements per array (Auto: 2^25), checked against free memory.
pub fn run_gpu_stream(
    dev: &mut dyn GpuDevice,
    size: StreamSize,
    ntimes: usize,
    host: &Host,
) -> Result<GpuStreamRecord, ReplayError> {
    let elements = match size {
        StreamSize::Auto => DEFAULT_STREAM_ELEMENTS,
        StreamSize::Elements(n) => n,
    };
    if elements == 0 {
        return Err(GpuError::StreamEmpty.into());
    }
    let (free, _) = dev.memory()?;
    let need = 24u64.saturating_mul(elements as u64);
    if need > free {
        return Err(GpuError::StreamTooLarge {
            elements,
            need,
            free,
            device: dev.info().name.clone(),
        }
        .into());
    }
    let run = dev.stream(elements, ntimes.max(2))?;
    Ok(stream_record(
        &run,
        elements,
        ntimes.max(2),
        dev.info(),
        host,
    ))
}

/// `replay --cuda` on an open device: [`plan_gpu`], then [`run_gpu`].
pub fn replay_gpu(
    config: &ReplayConfig,
    opts: &GpuOptions,
    dev: &mut dyn GpuDevice,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<ReplayRecord>, ReplayError> {
    let planned = plan_gpu(config)?;
    run_gpu(config, &planned, opts, dev, on_event)
}

/// Loads and checks every configuration for the GPU, without a device: host memory only
/// holds the patterns (device memory is checked per run), every kernel needs a CUDA version
/// and a legal block size.
pub fn plan_gpu(config: &ReplayConfig) -> Result<Vec<Planned>, ReplayError> {
    let planned = crate::plan_within(config, None)?;
    for p in &planned {
        check_config(p, config.atomic)?;
    }
    Ok(planned)
}

/// Runs configurations [`plan_gpu`] checked: GPU STREAM (unless disabled), then each
/// configuration once (or its throughput sweep), reporting as it goes.
pub fn run_gpu(
    config: &ReplayConfig,
    planned: &[Planned],
    opts: &GpuOptions,
    dev: &mut dyn GpuDevice,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<ReplayRecord>, ReplayError> {
    on_event(Event::Planned {
        configs: planned.len(),
    });
    let mut writer = crate::open_results(config, on_event)?;
    let host = Host::detect();
    let stream = match config.stream_elements {
        Some(size) => {
            on_event(Event::Running {
                what: "GPU STREAM",
                index: 0,
                total: planned.len(),
            });
            let s = run_gpu_stream(dev, size, DEFAULT_STREAM_NTIMES, &host)?;
            if let Some(w) = &writer {
                w.write_gpu_stream(&s)?;
            }
            on_event(Event::GpuStream(&s));
            Some(s)
        }
        None => None,
    };
    let run = Run {
        config,
        stream: stream.as_ref(),
        host: &host,
        // Unknown where the probe fails: records then say nothing of runs too short to time.
        launch_s: dev.launch_cost().unwrap_or(f64::NAN),
    };
    let mut records = Vec::new();
    for (index, p) in planned.iter().enumerate() {
        on_event(Event::Running {
            what: &p.config.name,
            index,
            total: planned.len(),
        });
        let new = if opts.sweep {
            sweep(p, &run, opts, dev)?
        } else {
            vec![run_planned(p, &run, dev, None)?]
        };
        for r in new {
            on_event(Event::Record(&r));
            if let Some(w) = &mut writer {
                w.push(r.clone())?;
            }
            records.push(r);
        }
    }
    Ok(records)
}

/// Checks what the CPU plan does not: a CUDA kernel exists and the block size is legal.
fn check_config(p: &Planned, atomic: bool) -> Result<(), GpuError> {
    let c = &p.config;
    let fail = |problem: String| GpuError::Config {
        origin: c.origin.clone(),
        name: named(&c.name),
        problem,
    };
    kernel_function(c, atomic).map_err(fail)?;
    launch_shape(1, c.local_work_size, 1).map_err(fail)?;
    Ok(())
}

/// What every configuration of one `run_gpu` shares.
struct Run<'a> {
    config: &'a ReplayConfig,
    stream: Option<&'a GpuStreamRecord>,
    host: &'a Host,
    /// [`GpuDevice::launch_cost`] (NaN: unknown).
    launch_s: f64,
}

/// The throughput sweep of one configuration; stops early (with a note) at the first step
/// whose buffers do not fit in device memory.
fn sweep(
    p: &Planned,
    run: &Run<'_>,
    opts: &GpuOptions,
    dev: &mut dyn GpuDevice,
) -> Result<Vec<ReplayRecord>, ReplayError> {
    let len = opts.sweep_len.unwrap_or(DEFAULT_SWEEP_LEN);
    let (steps, truncated_from) = sweep_configs(&p.config, len);
    let mut records: Vec<ReplayRecord> = Vec::new();
    let mut stopped = None;
    for (k, c) in steps.iter().enumerate() {
        let footprint = match plan::footprint(c) {
            Ok(f) => f,
            Err(e) if k > 0 => {
                stopped = Some(e.0);
                break;
            }
            Err(e) => {
                return Err(ReplayError::Plan {
                    origin: c.origin.clone(),
                    name: c.name.clone(),
                    problem: e,
                })
            }
        };
        let step = Planned {
            config: c.clone(),
            footprint,
            racy: false,
        };
        let info = SweepStep {
            step: k,
            steps: steps.len(),
            factor: SWEEP_FACTORS[k],
            base_count: p.config.count,
            truncated_from,
            plateau_count: None,
        };
        match run_planned(&step, run, dev, Some(info)) {
            Ok(r) => records.push(r),
            Err(ReplayError::Gpu(GpuError::TooLarge {
                need, free, total, ..
            })) if k > 0 => {
                stopped = Some(format!(
                    "count {} needs {} on the GPU, {} of {} free",
                    c.count,
                    human(need),
                    human(free),
                    human(total)
                ));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    let measured: Vec<(usize, f64)> = records.iter().map(|r| (r.count, r.bandwidth_mbs)).collect();
    let bw: Vec<f64> = measured.iter().map(|m| m.1).collect();
    let plateau_at = plateau(&bw);
    let plateau_count = plateau_at.map(|i| records[i].count);
    let n = records.len();
    for (i, r) in records.iter_mut().enumerate() {
        if let Some(g) = r.gpu.as_mut().and_then(|g| g.sweep.as_mut()) {
            g.steps = n;
            g.plateau_count = plateau_count;
        }
        if Some(i) == plateau_at {
            r.notes
                .push("sweep: bandwidth plateaus from this count on".into());
        }
        if i + 1 == n {
            if plateau_at.is_none() {
                r.notes.push(no_plateau(&measured));
            }
            if let Some(why) = &stopped {
                r.notes
                    .push(format!("sweep stopped after this step: {why}"));
            }
        }
    }
    Ok(records)
}

/// Checks device memory, times one planned configuration and builds its record.
fn run_planned(
    p: &Planned,
    run: &Run<'_>,
    dev: &mut dyn GpuDevice,
    sweep: Option<SweepStep>,
) -> Result<ReplayRecord, ReplayError> {
    let config = run.config;
    let c = &p.config;
    let need = device_bytes(&p.footprint);
    let (free, total) = dev.memory()?;
    if need > free {
        return Err(GpuError::TooLarge {
            origin: c.origin.clone(),
            name: named(&c.name),
            need,
            free,
            total,
            device: dev.info().name.clone(),
        }
        .into());
    }
    let (function, atomic) =
        kernel_function(c, config.atomic).map_err(|problem| GpuError::Config {
            origin: c.origin.clone(),
            name: named(&c.name),
            problem,
        })?;
    let elements = c.kernel.pattern_len() as u64 * c.count as u64;
    let shape =
        launch_shape(elements, c.local_work_size, dev.info().sm_count).map_err(|problem| {
            GpuError::Config {
                origin: c.origin.clone(),
                name: named(&c.name),
                problem,
            }
        })?;
    let job = GpuJob {
        config: c,
        footprint: p.footprint,
        function,
        shape,
        warmup: config.warmup,
        nruns: c.nruns,
    };
    let times = dev.time(&job)?;
    Ok(gpu_record(p, run, &job, atomic, times, dev.info(), sweep))
}

/// The record of one GPU run: the CPU record's fields with `backend: "cuda"`, the device and
/// the launch.
fn gpu_record(
    p: &Planned,
    run: &Run<'_>,
    job: &GpuJob<'_>,
    atomic: bool,
    times: Vec<f64>,
    device: &DeviceInfo,
    sweep: Option<SweepStep>,
) -> ReplayRecord {
    let (c, config) = (&p.config, run.config);
    let mut r = crate::measured_record(
        p,
        config,
        times,
        run.stream.map(|s| s.copy_mbs),
        run.host,
        run.launch_s,
    );
    if atomic && !config.atomic {
        r.notes.push(
            "scatter indices repeat: ran the atomic kernel (atomicAdd), so the values are \
             well-defined; atomics may cost bandwidth"
                .into(),
        );
    }
    if let Some(s) = &sweep {
        if let Some(from) = s.truncated_from {
            r.notes.push(format!(
                "sweep: pattern truncated from {from} to {} indices",
                c.kernel.pattern_len()
            ));
        }
    }
    r.backend = "cuda".into();
    r.threads = job.shape.threads() as usize;
    r.racy = false;
    r.atomic = atomic;
    r.timer = "cuda-event".into();
    r.device = Some(device.clone());
    r.gpu = Some(GpuRun {
        function: job.function.to_string(),
        block: job.shape.block,
        grid: job.shape.grid,
        sweep,
    });
    r
}

/// Kernel functions the host launches, per source file (tests check the sources define them).
pub const SPATTER_FUNCTIONS: [&str; 9] = [
    "gather",
    "scatter",
    "scatter_atomic",
    "gs",
    "gs_atomic",
    "multigather",
    "multiscatter",
    "multiscatter_atomic",
    "fill",
];
pub const BABELSTREAM_FUNCTIONS: [&str; 6] = [
    "stream_init",
    "stream_copy",
    "stream_mul",
    "stream_add",
    "stream_triad",
    "stream_dot",
];

#[cfg(test)]
mod tests;
