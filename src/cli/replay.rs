//! `mgbench replay` and `mgbench stream`: arguments and their translation into replay configs.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use mgbench_replay::config::KernelKind;
use mgbench_replay::export::TableExporter;
use mgbench_replay::gpu::{self, GpuOptions};
use mgbench_replay::launch::{self, LaunchPlan, Launcher};
use mgbench_replay::pool::Placement;
use mgbench_replay::record::{ReplayRecord, Scaling};
use mgbench_replay::{
    default_pattern_files, default_threads, Event, ExportFormat, InlineSpec, Input, ReplayConfig,
    StreamSize,
};
use mgbench_replay::{run_rank, ReplayError, MPI_SUPPORT};

use super::progress::{suspended, Display, Style};
use mgbench_capture::progress::Progress;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

impl From<Format> for ExportFormat {
    fn from(f: Format) -> ExportFormat {
        match f {
            Format::Table => ExportFormat::Table,
            Format::Json => ExportFormat::Json,
            Format::Csv => ExportFormat::Csv,
        }
    }
}

/// Parses a non-negative integer flag value, with a clear message for negative numbers (which
/// Spatter would silently wrap around).
pub(crate) fn non_negative(s: &str) -> Result<usize, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "{s} is negative: this option takes an integer >= 0 (mgbench never wraps negative values around)"
        ));
    }
    s.trim()
        .parse::<usize>()
        .map_err(|_| format!("{s:?} is not a non-negative integer"))
}

/// Parses a size flag value (`4096`, `64KiB`, `2MiB`).
pub(super) fn size(s: &str) -> Result<u64, String> {
    let bytes = mgbench_replay::compact::parse_size(s)?;
    mgbench_replay::compact::check_bound(bytes)?;
    Ok(bytes)
}

/// Parses a signed integer flag value (deltas).
fn signed(s: &str) -> Result<i64, String> {
    s.trim()
        .parse::<i64>()
        .map_err(|_| format!("{s:?} is not an integer"))
}

#[derive(Debug, Clone, Args)]
#[command(allow_negative_numbers = true)]
pub struct ReplayArgs {
    /// Spatter JSON pattern files (default: the shipped suite in patterns/).
    files: Vec<PathBuf>,
    /// Worker threads, pinned one per CPU (default: one per allowed CPU).
    #[arg(short = 't', long, value_parser = non_negative)]
    threads: Option<usize>,
    /// Timed runs per pattern; overrides each config's "nruns" (default 10).
    #[arg(short = 'R', long, value_parser = non_negative)]
    runs: Option<usize>,
    /// Untimed warm-up runs before the timed ones.
    #[arg(long, default_value_t = 1, value_parser = non_negative)]
    warmup: usize,
    /// Output on stdout.
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Directory for the results files (one JSON and one CSV per invocation), or the JSON
    /// file to write (a name ending in .json: its .csv and -stream.json go beside it).
    #[arg(short = 'o', long, default_value = "results")]
    out: PathBuf,
    /// Write no results files.
    #[arg(long)]
    no_save: bool,
    /// Skip the STREAM baseline (no % of STREAM in the results).
    #[arg(long)]
    no_stream: bool,
    /// STREAM elements per array (default: 4x the last-level cache).
    #[arg(long, value_name = "ELEMENTS", value_parser = non_negative)]
    stream_size: Option<usize>,
    /// Make scatter writes atomic additions, so repeated indices give well-defined values.
    #[arg(long)]
    atomic: bool,
    /// Let the OS place threads instead of pinning one per CPU.
    #[arg(long)]
    no_pin: bool,
    /// Run patterns whose indices are too far apart to fit in memory: distances between
    /// consecutive distinct indices up to BYTES are kept, longer ones shrink to BYTES..2xBYTES
    /// keeping each index's offset within a BYTES block (cache-line and page structure).
    /// Without a value: 2MiB, a huge page.
    #[arg(long, value_name = "BYTES", num_args = 0..=1, default_missing_value = "2MiB", value_parser = size)]
    compact_gaps: Option<u64>,
    /// As --compact-gaps, but only for the configurations that do not fit in memory as they
    /// are; the others run unchanged.
    #[arg(long, value_name = "BYTES", num_args = 0..=1, default_missing_value = "2MiB", value_parser = size, conflicts_with = "compact_gaps")]
    compact_gaps_if_needed: Option<u64>,

    /// Inline pattern: an integer list ("0,4,8") or a generator (UNIFORM:8:1, MS1:..., LAPLACIAN:...).
    #[arg(
        short = 'p',
        long,
        value_name = "SPEC",
        help_heading = "Inline pattern"
    )]
    pattern: Option<String>,
    /// Kernel: gather, scatter, gs, multigather, multiscatter, apex (with --apex-l, --apex-k).
    #[arg(short = 'k', long, help_heading = "Inline pattern")]
    kernel: Option<String>,
    /// Elements between the starts of consecutive iterations (default 8; negative walks down).
    #[arg(short = 'd', long, help_heading = "Inline pattern", value_parser = signed)]
    delta: Option<i64>,
    /// Iterations of the outer loop (default 1024).
    #[arg(short = 'l', long, help_heading = "Inline pattern", value_parser = non_negative)]
    count: Option<usize>,
    /// Dense buffer rows reused cyclically (default 1).
    #[arg(short = 'w', long, help_heading = "Inline pattern", value_parser = non_negative)]
    wrap: Option<usize>,
    /// Gather pattern of gs, or inner pattern of multigather.
    #[arg(
        short = 'g',
        long,
        value_name = "SPEC",
        help_heading = "Inline pattern"
    )]
    pattern_gather: Option<String>,
    /// Scatter pattern of gs, or inner pattern of multiscatter.
    #[arg(
        short = 'u',
        long,
        value_name = "SPEC",
        help_heading = "Inline pattern"
    )]
    pattern_scatter: Option<String>,
    /// Gather delta of gs.
    #[arg(short = 'x', long, help_heading = "Inline pattern", value_parser = signed)]
    delta_gather: Option<i64>,
    /// Scatter delta of gs.
    #[arg(short = 'y', long, help_heading = "Inline pattern", value_parser = signed)]
    delta_scatter: Option<i64>,
    /// Keep only the first N indices of each pattern.
    #[arg(long, value_name = "N", help_heading = "Inline pattern", value_parser = non_negative)]
    pattern_size: Option<usize>,
    /// Take every index modulo N.
    #[arg(short = 'b', long, value_name = "N", help_heading = "Inline pattern", value_parser = non_negative)]
    boundary: Option<usize>,
    /// Name of the inline pattern in the results.
    #[arg(short = 'n', long, help_heading = "Inline pattern")]
    name: Option<String>,
    /// Run as N MPI ranks: starts `mpirun -np N` (or --launcher) of mgbench itself; under a
    /// launcher already, N must match its rank count. Needs a build with `--features mpi`.
    #[arg(long, value_name = "N", value_parser = non_negative, help_heading = "MPI")]
    mpi: Option<usize>,
    /// Launcher for --mpi.
    #[arg(long, value_enum, default_value_t = LauncherArg::Mpirun, help_heading = "MPI")]
    launcher: LauncherArg,
    /// Extra launcher argument, passed through (repeatable: --launcher-arg=--host --launcher-arg=a,b).
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        help_heading = "MPI"
    )]
    launcher_arg: Vec<String>,
    /// Strong scaling: the ranks split each configuration (default: weak, every rank runs all).
    #[arg(long, help_heading = "MPI")]
    strong: bool,
    /// Run on an NVIDIA GPU (CUDA driver and NVRTC needed at run time), next to GPU STREAM.
    #[arg(long, help_heading = "GPU")]
    cuda: bool,
    /// CUDA device ordinal for --cuda.
    #[arg(long, value_name = "N", value_parser = non_negative, help_heading = "GPU")]
    device: Option<usize>,
    /// Throughput sweep (with --cuda): truncate each pattern, then run it with its count
    /// multiplied by 1, 2, 4 .. 512, reporting where the bandwidth plateaus.
    #[arg(long, help_heading = "GPU")]
    sweep: bool,
    /// Indices kept per pattern by --sweep (default 256).
    #[arg(long, value_name = "N", value_parser = non_negative, help_heading = "GPU")]
    sweep_len: Option<usize>,
    /// apex kernel: block length L in words.
    #[arg(long, value_name = "L", help_heading = "Inline pattern", value_parser = non_negative)]
    apex_l: Option<usize>,
    /// apex kernel: locality exponent K in (0, 1].
    #[arg(long, value_name = "K", help_heading = "Inline pattern")]
    apex_k: Option<f64>,
    /// apex kernel: memory size M in words (default 2^24).
    #[arg(long, value_name = "M", help_heading = "Inline pattern", value_parser = non_negative)]
    apex_m: Option<usize>,
    /// apex kernel: seed of the block starts (default 1).
    #[arg(long, help_heading = "Inline pattern", value_parser = non_negative)]
    seed: Option<usize>,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct StreamArgs {
    /// Worker threads, pinned one per CPU (default: one per allowed CPU).
    #[arg(short = 't', long, value_parser = non_negative)]
    threads: Option<usize>,
    /// Elements per array (default: 4x the last-level cache, at least 10 M).
    #[arg(short = 's', long, value_name = "ELEMENTS", value_parser = non_negative)]
    size: Option<usize>,
    /// Iterations (NTIMES); the first is dropped.
    #[arg(short = 'R', long, default_value_t = mgbench_replay::stream::DEFAULT_NTIMES, value_parser = non_negative)]
    runs: usize,
    /// Output on stdout.
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Let the OS place threads instead of pinning one per CPU.
    #[arg(long)]
    no_pin: bool,
    /// Run GPU STREAM (the BabelStream kernels) on an NVIDIA GPU instead.
    #[arg(long)]
    cuda: bool,
    /// CUDA device ordinal for --cuda.
    #[arg(long, value_name = "N", value_parser = non_negative)]
    device: Option<usize>,
    /// Directory for the results files (stream-<time>-<pid>.json and .csv), or the JSON file
    /// to write (a name ending in .json: its .csv goes beside it).
    #[arg(short = 'o', long, default_value = "results")]
    out: PathBuf,
    /// Write no results files.
    #[arg(long)]
    no_save: bool,
}

fn threads(requested: Option<usize>) -> Result<usize> {
    match requested {
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => {
            let cpus = default_threads();
            if n > cpus {
                eprintln!(
                    "mgbench: warning: --threads {n} is more than the {cpus} CPUs available; \
                     threads will share CPUs"
                );
            }
            Ok(n)
        }
        None => Ok(default_threads()),
    }
}

fn placement(no_pin: bool) -> Placement {
    if no_pin {
        Placement::Unpinned
    } else {
        Placement::Pinned
    }
}

impl ReplayArgs {
    fn inline_spec(&self) -> Result<Option<InlineSpec>> {
        let spec = InlineSpec {
            name: self.name.clone(),
            kernel: self.kernel.clone(),
            pattern: self.pattern.clone(),
            pattern_gather: self.pattern_gather.clone(),
            pattern_scatter: self.pattern_scatter.clone(),
            delta: self.delta,
            delta_gather: self.delta_gather,
            delta_scatter: self.delta_scatter,
            count: self.count,
            wrap: self.wrap,
            pattern_size: self.pattern_size,
            boundary: self.boundary,
            apex_l: self.apex_l,
            apex_k: self.apex_k,
            apex_m: self.apex_m,
            seed: self.seed,
        };
        if spec == InlineSpec::default() {
            return Ok(None);
        }
        let apex = spec
            .kernel
            .as_deref()
            .is_some_and(|k| KernelKind::parse(k) == Some(KernelKind::Apex));
        if !apex && (spec.apex_l.is_some() || spec.apex_k.is_some() || spec.apex_m.is_some()) {
            bail!("--apex-l, --apex-k and --apex-m belong to the apex kernel: add --kernel apex");
        }
        if !apex
            && spec.pattern.is_none()
            && spec.pattern_gather.is_none()
            && spec.pattern_scatter.is_none()
        {
            bail!(
                "inline options (--kernel, --delta, --count, ...) need a pattern: add --pattern SPEC \
                 (or --pattern-gather/--pattern-scatter for gs)"
            );
        }
        if !self.files.is_empty() {
            bail!("give pattern files or an inline --pattern, not both");
        }
        Ok(Some(spec))
    }

    fn into_config(self) -> Result<(ReplayConfig, ExportFormat)> {
        let inputs = match self.inline_spec()? {
            Some(spec) => vec![Input::Inline(Box::new(spec))],
            None if self.files.is_empty() => default_pattern_files()?
                .into_iter()
                .map(Input::File)
                .collect(),
            None => self.files.iter().cloned().map(Input::File).collect(),
        };
        if self.no_stream && self.stream_size.is_some() {
            bail!("--stream-size has no effect with --no-stream: drop one of them");
        }
        let config = ReplayConfig {
            inputs,
            threads: threads(self.threads)?,
            placement: placement(self.no_pin),
            runs: self.runs,
            warmup: self.warmup,
            atomic: self.atomic,
            stream_elements: (!self.no_stream).then(|| StreamSize::from(self.stream_size)),
            out_dir: (!self.no_save).then_some(self.out),
            compact_gaps: self.compact_gaps.or(self.compact_gaps_if_needed),
            compact_if_needed: self.compact_gaps_if_needed.is_some(),
        };
        Ok((config, self.format.into()))
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LauncherArg {
    Mpirun,
    Srun,
}

/// Where a replay's report (tables, records, notes) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// `mgbench replay`: the report is the command's output.
    Stdout,
    /// `mgbench profile`: the profiled program owns stdout, so the report goes beside
    /// mgbench's other messages (as `perf stat` and `time` do).
    Stderr,
}

impl Sink {
    fn lock(self) -> Box<dyn Write> {
        match self {
            Sink::Stdout => Box::new(std::io::stdout().lock()),
            Sink::Stderr => Box::new(std::io::stderr().lock()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Sink::Stdout => "stdout",
            Sink::Stderr => "stderr",
        }
    }
}

/// `replay`: runs here, as one rank of an MPI job, or starts that job (`--mpi N`).
pub fn replay(args: ReplayArgs) -> Result<i32> {
    replay_to(args, Sink::Stdout)
}

/// `replay` with its report written to `sink`.
pub fn replay_to(args: ReplayArgs, sink: Sink) -> Result<i32> {
    let scaling = if args.strong {
        Scaling::Strong
    } else {
        Scaling::Weak
    };
    if args.cuda {
        return replay_cuda(args, sink).map(|()| 0);
    }
    if args.device.is_some() || args.sweep || args.sweep_len.is_some() {
        bail!("--device, --sweep and --sweep-len only apply with --cuda");
    }
    let rank = launch::rank_env();
    if rank.is_none() {
        if let Some(n) = args.mpi {
            return start_job(&args, n);
        }
        if args.strong || !args.launcher_arg.is_empty() {
            bail!("--strong and --launcher-arg only apply with --mpi N");
        }
    }
    let asked = args.mpi;
    let (config, format) = args.into_config()?;
    match rank {
        Some(env) if asked.is_some() || env.size > 1 => {
            if !MPI_SUPPORT {
                return Err(ReplayError::NoMpi.into());
            }
            // Rank 0 reports; the other ranks print nothing.
            let place = format!("{} thread(s) per rank", config.threads);
            let result = report(
                &config,
                format,
                sink,
                env.rank == 0,
                &place,
                &mut |config, on_event| run_rank(config, scaling, env.launcher, asked, on_event),
            );
            match result {
                // Rank 0 reports every rank's failure and exits 1, which is the job's status.
                // The other ranks end quietly with status 0: mpirun tears the job down as soon
                // as any process exits non-zero, which could cut rank 0 off before it prints.
                Err(e) if matches!(e.downcast_ref(), Some(ReplayError::FailedElsewhere)) => Ok(0),
                other => other.map(|()| 0),
            }
        }
        _ => report(
            &config,
            format,
            sink,
            true,
            &format!("{} thread(s)", config.threads),
            &mut |config, on_event| mgbench_replay::replay(config, on_event),
        )
        .map(|()| 0),
    }
}

/// `replay --cuda`: one GPU, GPU STREAM, each pattern once or as a throughput sweep.
fn replay_cuda(args: ReplayArgs, sink: Sink) -> Result<()> {
    if args.mpi.is_some() || launch::rank_env().is_some_and(|e| e.size > 1) {
        bail!("--cuda with MPI is not supported: run one mgbench replay --cuda per GPU");
    }
    if args.threads.is_some() || args.no_pin {
        bail!("--threads and --no-pin set CPU threads and have no effect with --cuda: drop them");
    }
    if args.sweep_len == Some(0) {
        bail!("--sweep-len must be at least 1");
    }
    if args.sweep_len.is_some() && !args.sweep {
        bail!("--sweep-len only applies with --sweep");
    }
    let opts = GpuOptions {
        device: args.device.unwrap_or(0),
        sweep: args.sweep,
        sweep_len: args.sweep_len,
    };
    let (config, format) = args.into_config()?;
    // Bad pattern files and configs the GPU cannot run fail before the GPU is touched.
    let planned = gpu::plan_gpu(&config)?;
    let mut device = gpu::open_device(opts.device)?;
    let info = device.info().clone();
    eprintln!(
        "mgbench: CUDA device {}: {} ({} SMs, {}, compute capability {}, driver CUDA {})",
        info.ordinal,
        info.name,
        info.sm_count,
        mgbench_replay::plan::human_bytes(u128::from(info.memory_bytes)),
        info.compute_capability,
        info.driver_version
    );
    let place = format!("CUDA device {}", info.ordinal);
    report(
        &config,
        format,
        sink,
        true,
        &place,
        &mut |config, on_event| gpu::run_gpu(config, &planned, &opts, device.as_mut(), on_event),
    )
}

/// Starts `--mpi N`: the launcher runs this same command line as N ranks.
fn start_job(args: &ReplayArgs, ranks: usize) -> Result<i32> {
    if !MPI_SUPPORT {
        return Err(ReplayError::NoMpi.into());
    }
    // Bad pattern files fail here, once, before any rank starts.
    let (config, _) = args.clone().into_config()?;
    mgbench_replay::plan(&config)?;
    // Without --threads, the ranks share this machine's CPUs.
    let per_rank = match args.threads {
        Some(t) => threads(Some(t))?,
        None => (default_threads() / ranks.max(1)).max(1),
    };
    let mut rank_args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.threads.is_none() {
        rank_args.push("--threads".into());
        rank_args.push(per_rank.to_string().into());
    }
    let plan = LaunchPlan {
        launcher: match args.launcher {
            LauncherArg::Mpirun => Launcher::Mpirun,
            LauncherArg::Srun => Launcher::Srun,
        },
        ranks,
        threads: per_rank,
        extra: args.launcher_arg.clone(),
        exe: std::env::current_exe().context("cannot find mgbench's own executable")?,
        args: rank_args,
    };
    let is_root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    let (mut cmd, warning) = launch::command(&plan, default_threads(), is_root)?;
    if let Some(w) = warning {
        eprintln!("mgbench: warning: {w}");
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", plan.launcher.program()))?;
    Ok(status.code().unwrap_or(1))
}

type Runner<'a> = dyn FnMut(&ReplayConfig, &mut dyn FnMut(Event<'_>)) -> Result<Vec<ReplayRecord>, ReplayError>
    + 'a;

/// Runs `run` and prints its events and records in `format` on `sink`.
fn report(
    config: &ReplayConfig,
    format: ExportFormat,
    sink: Sink,
    print: bool,
    place: &str,
    run: &mut Runner<'_>,
) -> Result<()> {
    let mut header_done = false;
    let mut print_error: Option<std::io::Error> = None;
    let progress = Progress::new();
    let bar = if print {
        Display::start(&progress, Style::Items)
    } else {
        None
    };
    let records = run(config, &mut |event| {
        if let Event::Running { what, index, total } = event {
            progress.start(&format!("running {what}"), total as u64);
            progress.set(index as u64);
            return;
        }
        suspended(&bar, || {
            let mut out = sink.lock();
            let res = match event {
                Event::Planned { configs } => {
                    eprintln!("mgbench: {configs} pattern config(s) checked; {place}");
                    Ok(())
                }
                Event::GpuStream(s) if format == ExportFormat::Table => out
                    .write_all(s.table().as_bytes())
                    .and_then(|_| writeln!(out)),
                Event::GpuStream(s) => {
                    eprintln!(
                        "mgbench: GPU STREAM copy {:.1} MB/s, triad {:.1} MB/s ({})",
                        s.copy_mbs, s.triad_mbs, s.device.name
                    );
                    Ok(())
                }
                Event::ResultsFiles { json, csv } => {
                    eprintln!(
                        "mgbench: results -> {} and {}",
                        json.display(),
                        csv.display()
                    );
                    Ok(())
                }
                Event::Stream(s) if format == ExportFormat::Table => {
                    let text = format.exporter().stream(s).unwrap_or_default();
                    out.write_all(&text).and_then(|_| writeln!(out))
                }
                Event::Stream(s) => {
                    eprintln!(
                        "mgbench: STREAM copy {:.1} MB/s, triad {:.1} MB/s ({} threads)",
                        s.copy_mbs, s.triad_mbs, s.threads
                    );
                    Ok(())
                }
                Event::Record(r) if format == ExportFormat::Table => {
                    let mut text = String::new();
                    if !header_done {
                        text.push_str(&TableExporter::header());
                        header_done = true;
                    }
                    text.push_str(&TableExporter::row(r));
                    out.write_all(text.as_bytes()).and_then(|_| out.flush())
                }
                Event::Record(_) => Ok(()),
                Event::Running { .. } => Ok(()),
            };
            if let Err(e) = res {
                print_error.get_or_insert(e);
            }
        })
    })?;
    drop(bar);
    if !print {
        return Ok(());
    }
    let mut out = sink.lock();
    if format != ExportFormat::Table {
        let bytes = format.exporter().replay(&records)?;
        out.write_all(&bytes)
            .with_context(|| format!("cannot write to {}", sink.name()))?;
    } else {
        let named = records.iter().map(|r| (r.name.as_str(), &r.notes[..]));
        for line in note_lines(named) {
            writeln!(out, "{line}").with_context(|| format!("cannot write to {}", sink.name()))?;
        }
    }
    if let Some(e) = print_error {
        return Err(e).with_context(|| format!("cannot write to {}", sink.name()));
    }
    Ok(())
}

pub fn stream(args: StreamArgs) -> Result<()> {
    if args.cuda {
        return stream_cuda(args);
    }
    if args.device.is_some() {
        bail!("--device only applies with --cuda");
    }
    let threads = threads(args.threads)?;
    let size = StreamSize::from(args.size);
    let record = mgbench_replay::run_stream(threads, placement(args.no_pin), size, args.runs)?;
    if !args.no_save {
        let (json, csv) = mgbench_replay::results::save_stream(&args.out, &record)?;
        eprintln!(
            "mgbench: results -> {} and {}",
            json.display(),
            csv.display()
        );
    }
    let format: ExportFormat = args.format.into();
    let bytes = format.exporter().stream(&record)?;
    std::io::stdout()
        .write_all(&bytes)
        .context("cannot write to stdout")?;
    if !record.validated {
        bail!("STREAM results failed validation (see notes above)");
    }
    Ok(())
}

/// `stream --cuda`: BabelStream on one GPU.
fn stream_cuda(args: StreamArgs) -> Result<()> {
    if args.threads.is_some() || args.no_pin {
        bail!("--threads and --no-pin set CPU threads and have no effect with --cuda: drop them");
    }
    let size = StreamSize::from(args.size);
    let mut device = gpu::open_device(args.device.unwrap_or(0))?;
    let host = mgbench_replay::record::Host::detect();
    let record = gpu::run_gpu_stream(device.as_mut(), size, args.runs, &host)?;
    if !args.no_save {
        let (json, csv) = mgbench_replay::results::save_gpu_stream(&args.out, &record)?;
        eprintln!(
            "mgbench: results -> {} and {}",
            json.display(),
            csv.display()
        );
    }
    let text = match args.format {
        Format::Table => record.table().into_bytes(),
        Format::Csv => record.csv().into_bytes(),
        Format::Json => {
            let mut v = serde_json::to_vec_pretty(&record)?;
            v.push(b'\n');
            v
        }
    };
    std::io::stdout()
        .write_all(&text)
        .context("cannot write to stdout")?;
    if !record.validated {
        bail!("GPU STREAM results failed validation (see notes above)");
    }
    Ok(())
}

/// The records' notes, one line each: a sweep's steps repeat their configuration's notes, and
/// a note that several configurations share (ten GROMACS patterns "mined from 16-byte
/// accesses") is one line that names them.
fn note_lines<'a>(records: impl Iterator<Item = (&'a str, &'a [String])>) -> Vec<String> {
    let mut by_note: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, notes) in records {
        for n in notes {
            match by_note.iter_mut().find(|(note, _)| note == n) {
                Some((_, names)) if names.contains(&name) => {}
                Some((_, names)) => names.push(name),
                None => by_note.push((n, vec![name])),
            }
        }
    }
    const NAMED: usize = 3;
    by_note
        .into_iter()
        .map(|(note, names)| match names.len() {
            1 => format!("note: {}: {note}", names[0]),
            k => format!(
                "note: {k} configs ({}): {note}",
                super::list_names(&names, NAMED)
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use clap::Parser;

    #[test]
    fn inline_options_need_a_pattern() {
        let cli = Cli::try_parse_from(["mgbench", "replay", "--delta", "4"]).unwrap();
        let Command::Replay(args) = cli.command else {
            panic!("expected replay");
        };
        let e = args.into_config().unwrap_err().to_string();
        assert!(e.contains("--pattern"), "{e}");
    }

    #[test]
    fn a_note_shared_by_configs_is_one_line() {
        let (a, b) = (
            vec!["same".to_string()],
            vec!["same".to_string(), "own".to_string()],
        );
        let names = ["g1", "g2", "g3", "g4", "g5"];
        let mut records: Vec<(&str, &[String])> = names.iter().map(|n| (*n, &a[..])).collect();
        records.push(("g2", &a[..])); // a sweep's second step
        records.push(("s", &b[..]));
        assert_eq!(
            super::note_lines(records.into_iter()),
            [
                "note: 6 configs (g1, g2, g3 and 3 more): same",
                "note: s: own"
            ]
        );
    }

    #[test]
    fn files_and_inline_pattern_conflict() {
        let cli = Cli::try_parse_from(["mgbench", "replay", "a.json", "--pattern", "UNIFORM:8:1"])
            .unwrap();
        let Command::Replay(args) = cli.command else {
            panic!("expected replay");
        };
        assert!(args.into_config().is_err());
    }
}
