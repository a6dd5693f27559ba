//! `mgbench capture`, `mgbench trace info|dump` and `mgbench import`.

use std::ffi::OsString;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use mgbench_capture::backend::{
    self, BackendKind, CaptureConfig, ProgramExit, DEFAULT_INTERVAL_MS, DEFAULT_PERIOD,
    DEFAULT_TIMED_WINDOW, DEFAULT_WINDOW, FEW_WINDOWS,
};
use mgbench_capture::import::{import_meta, ImportKind};
use mgbench_capture::stats::trace_info;
use mgbench_capture::symbols::{Symbolizer, ANONYMOUS_CODE, JIT_HINT};
use mgbench_capture::trace::{read_jit_symbols, EndInfo, Frame, Mode, TraceReader, TraceWriter};
use mgbench_replay::results::{output_target, OutputTarget};

use super::progress::{Display, Style};
use super::replay::non_negative;
use mgbench_capture::progress::{CountingReader, Progress};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Auto,
    Qemu,
    Ptrace,
    Pt,
}

#[derive(Debug, Args)]
#[command(trailing_var_arg = true)]
pub struct CaptureArgs {
    /// Trace file to write (default: PROGRAM's name with .mgbt, in the current directory;
    /// PROGRAM.rankR.mgbt for each rank of an MPI job started by mpirun or srun).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// How to record: auto (default: qemu, or ptrace for --pid and for programs with AVX-512
    /// code, or when the program dies of SIGILL under QEMU; it says which and why), qemu (QEMU
    /// user mode + mgbench's plugin; exact sample counts), ptrace (native single-stepping;
    /// AVX-512, --pid; timed samples), pt (Intel PT with ptwrite, where present).
    #[arg(short = 'b', long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Record every access instead of samples.
    #[arg(long, conflicts_with_all = ["sample_window", "sample_period"])]
    full: bool,
    /// Accesses recorded per sample (default 4096; 1024 with --backend ptrace).
    #[arg(long, value_name = "W", value_parser = non_negative)]
    sample_window: Option<usize>,
    /// Accesses from one sample's start to the next's (default 1048576: about 1 in 230
    /// recorded; from 2^18 on, skips are counted by generated code and each is at least
    /// P - W long; below, by callbacks, exactly P - W, at 2-3x the cost).
    #[arg(long, value_name = "P", value_parser = non_negative)]
    sample_period: Option<usize>,
    /// Sampled qemu capture: each thread's first window starts at a random point of its
    /// first period (so that start-up is not over-sampled); the seed picks that point.
    #[arg(long, value_name = "N", default_value_t = 0, conflicts_with = "full")]
    sample_seed: u64,
    /// ptrace backend: milliseconds of native execution between windows (default 20; longer
    /// when a window took longer, keeping the slowdown near 2x).
    #[arg(long, value_name = "MS", value_parser = non_negative, conflicts_with = "full")]
    sample_interval: Option<usize>,
    /// Record only while FUNCTION runs (repeatable); callees count unless --roi-exclusive.
    #[arg(long, value_name = "FUNCTION")]
    roi: Vec<String>,
    /// With --roi: record only the ROI functions' own instructions, not their callees'.
    #[arg(long, requires = "roi")]
    roi_exclusive: bool,
    /// Attach to a running process (ptrace backend) instead of starting PROGRAM.
    #[arg(long, value_name = "PID")]
    pid: Option<i32>,
    /// With --pid: detach after SECONDS (e.g. 2.5) and leave the process running (without
    /// it, Ctrl-C or SIGTERM detaches, or the process's end).
    #[arg(long, value_name = "SECONDS", requires = "pid", value_parser = seconds)]
    duration: Option<std::time::Duration>,
    /// Program to run, and its arguments (`--` before them is optional).
    #[arg(value_name = "PROGRAM [ARGS]...", trailing_var_arg = true)]
    command: Vec<OsString>,
}

/// PROGRAM.mgbt; under an MPI launcher that started several ranks, PROGRAM.rankR.mgbt, so
/// that `mpirun -np N mgbench capture -- PROGRAM` gives a trace per rank.
fn default_output(program: &Path) -> PathBuf {
    let stem = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    match mgbench_replay::launch::rank_env() {
        Some(r) if r.size > 1 => PathBuf::from(format!("{stem}.rank{}.mgbt", r.rank)),
        _ => PathBuf::from(format!("{stem}.mgbt")),
    }
}

/// The recording mode `args` ask of backend `kind` (`auto`: why auto chose it, for errors).
fn capture_mode(args: &CaptureArgs, kind: BackendKind, auto: Option<&str>) -> Result<Mode> {
    let chosen = auto.map_or(String::new(), |w| {
        format!(" (--backend auto chose it: {w})")
    });
    if args.full {
        return Ok(Mode::Full);
    }
    let default_window = if kind == BackendKind::Ptrace {
        DEFAULT_TIMED_WINDOW
    } else {
        DEFAULT_WINDOW
    };
    let window = args.sample_window.map_or(default_window, |w| w as u64);
    if window == 0 {
        bail!("--sample-window must be at least 1");
    }
    if kind == BackendKind::Ptrace {
        if args.sample_period.is_some() {
            bail!("--backend ptrace{chosen} cannot count accesses while the program runs natively, so it samples by time: use --sample-interval MS (and --sample-window W) instead of --sample-period");
        }
        if args.sample_interval == Some(0) {
            // A window steps at most half as long as the pause before it: with no pause,
            // each window ended after one access.
            bail!("--sample-interval 0: give at least 1 ms of native running between windows (a window steps at most half as long as the pause before it, so with none it records one access); --full steps every instruction");
        }
        return Ok(Mode::Timed {
            window,
            interval_ms: args
                .sample_interval
                .map_or(DEFAULT_INTERVAL_MS, |i| i as u64),
        });
    }
    if args.sample_interval.is_some() {
        bail!("--sample-interval applies to --backend ptrace; this capture uses {}{chosen}, which samples by access count: --sample-period", kind.name());
    }
    let period = args
        .sample_period
        .map_or(DEFAULT_PERIOD.max(window), |p| p as u64);
    if period < window {
        bail!("--sample-period ({period}) must be at least --sample-window ({window})");
    }
    Ok(Mode::Sampled { window, period })
}

/// The trace header's note on why `--backend auto` chose `kind`.
fn auto_note(kind: BackendKind, why: &str) -> String {
    format!("backend {} chosen by --backend auto: {why}", kind.name())
}

fn run_capture(cfg: &CaptureConfig) -> Result<backend::CaptureReport> {
    let _bar = Display::start(&cfg.progress, Style::Capture);
    Ok(backend::capture(cfg)?)
}

/// A positive number of seconds, for `--duration`.
fn seconds(s: &str) -> Result<std::time::Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v < 1e9 => Ok(std::time::Duration::from_secs_f64(v)),
        _ => Err(format!(
            "{s:?} is not a positive number of seconds (e.g. 2 or 0.5)"
        )),
    }
}

pub fn capture(mut args: CaptureArgs) -> Result<i32> {
    if let (Some(pid), false) = (args.pid, args.command.is_empty()) {
        let words: Vec<_> = args.command.iter().map(|w| w.to_string_lossy()).collect();
        bail!(
            "--pid {pid} attaches to a running process and takes no PROGRAM, but `{}` follows the options: options go first (mgbench capture --pid {pid} --duration 5 -o T.mgbt)",
            words.join(" ")
        );
    }
    let mut command = std::mem::take(&mut args.command).into_iter();
    let program = match (command.next(), args.pid) {
        (Some(p), _) => PathBuf::from(p),
        (None, Some(pid)) => PathBuf::from(format!("/proc/{pid}/exe")),
        (None, None) => {
            bail!("give the program to capture: mgbench capture [OPTIONS] [--] PROGRAM [ARGS]...")
        }
    };
    let rest: Vec<OsString> = command.collect();
    let (kind, why) = match args.backend {
        Backend::Auto => {
            let resolved = match args.pid {
                Some(_) => program.clone(),
                None => backend::resolve(&program)?.path,
            };
            let c = backend::choose(&resolved, args.pid.is_some(), args.full);
            (c.kind, Some(c.why))
        }
        Backend::Qemu => (BackendKind::Qemu, None),
        Backend::Ptrace => (BackendKind::Ptrace, None),
        Backend::Pt => (BackendKind::Pt, None),
    };
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&program));
    let mut cfg = CaptureConfig {
        program,
        args: rest,
        output,
        backend: kind,
        mode: capture_mode(&args, kind, why.as_deref())?,
        roi: args.roi.clone(),
        roi_inclusive: !args.roi_exclusive,
        pid: args.pid,
        attach_for: args.duration,
        progress: Default::default(),
        notes: why.iter().map(|w| auto_note(kind, w)).collect(),
        sample_seed: args.sample_seed,
    };
    match &why {
        Some(w) => eprintln!("mgbench: backend {} (auto: {w})", kind.name()),
        None => eprintln!("mgbench: backend {} (--backend)", kind.name()),
    }
    let mut report = run_capture(&cfg)?;
    // The guest died of SIGILL: most likely an instruction TCG lacks (AVX-512 in code the
    // scan did not see: a library, JIT code). Natively, under ptrace, it runs.
    if kind == BackendKind::Qemu
        && report.exit == ProgramExit::Signal(4)
        && backend::host_has_avx512()
    {
        if why.is_some() && args.sample_period.is_none() {
            let again = "the program died of SIGILL under QEMU, whose TCG lacks AVX-512: capturing again, natively, with ptrace";
            eprintln!("mgbench: backend ptrace (auto: {again})");
            cfg.backend = BackendKind::Ptrace;
            cfg.mode = capture_mode(&args, BackendKind::Ptrace, Some(again))?;
            cfg.notes = vec![auto_note(BackendKind::Ptrace, again)];
            cfg.progress = Default::default();
            report = run_capture(&cfg)?;
        } else {
            let blocker = if why.is_none() {
                "--backend qemu"
            } else {
                "--sample-period (ptrace samples by time)"
            };
            eprintln!("mgbench: the program died of SIGILL under QEMU, most likely an AVX-512 instruction (QEMU's TCG has none); {blocker} kept mgbench from capturing it again with ptrace: run `mgbench capture --backend ptrace` (with --sample-interval MS instead of --sample-period)");
        }
    } else if report.exit == ProgramExit::Signal(4) && !backend::host_has_avx512() {
        // Where this CPU lacks AVX-512 too, no backend here runs such code: say so, rather
        // than leave the user to try ptrace.
        let evex = backend::resolve(&cfg.program)
            .map_or(0, |p| backend::evex_instructions(&p.path).total());
        if evex > 0 {
            eprintln!(
                "mgbench: the program died of SIGILL: its code holds {evex} AVX-512 instruction(s), which neither QEMU's TCG nor this CPU (no avx512f in /proc/cpuinfo) can run, so no backend here can capture it: capture it on a machine with AVX-512 (where `--backend auto` takes ptrace), or a build of it without AVX-512"
            );
        }
    }
    let per = if report.recorded > 0 {
        format!(
            ", {:.2} B/access",
            report.trace_bytes as f64 / report.recorded as f64
        )
    } else {
        String::new()
    };
    let skipped = match cfg.mode {
        Mode::Full => "every access".to_string(),
        Mode::Sampled { .. } => format!("{} skipped by sampling", report.skipped),
        Mode::Timed { .. } => {
            "windows taken by time: the accesses between them are not counted".to_string()
        }
    };
    // A sampled run's short-lived thread may run in no window: "in 2 thread(s)" beside the
    // one that `trace info` and the analyses count read as a contradiction.
    let threads = if report.threads_recorded < report.threads {
        format!(
            "from {} of {} thread(s)",
            report.threads_recorded, report.threads
        )
    } else {
        format!("in {} thread(s)", report.threads)
    };
    eprintln!(
        "mgbench: {} accesses recorded ({skipped}) {threads} in {:.2} s -> {} ({} bytes{per})",
        report.recorded,
        report.elapsed_s,
        report.trace.display(),
        report.trace_bytes,
    );
    for n in &report.notes {
        eprintln!("mgbench: note: {n}");
    }
    for w in &report.warnings {
        eprintln!("mgbench: warning: {w}");
    }
    if let (Mode::Sampled { window, period }, ProgramExit::Code(_)) = (cfg.mode, report.exit) {
        let windows = report.recorded.div_ceil(window);
        let all = report.recorded + report.skipped;
        if windows == 0 && all > 0 && report.interrupted.is_none() {
            eprintln!("mgbench: warning: no sample window: the program made {all} accesses, fewer than where its first window began (each thread's first window starts at a random point of its first --sample-period, here {period}); --full records all of them, or a shorter --sample-period (or another --sample-seed) gives windows");
        } else if windows < FEW_WINDOWS && all > 0 && report.interrupted.is_none() {
            // (None at all: a ROI never entered, which its own warning says.)
            let of = if cfg.roi.is_empty() {
                "this run"
            } else {
                "the ROI"
            };
            eprintln!("mgbench: warning: only {windows} sample window(s): too few for sampled statistics (footprint, reuse and function shares came within 25% of a full trace from about 200 windows on); --full records all {all} accesses of {of} (about {} MB), or a shorter --sample-period gives more windows (e.g. 16384, at 2-3x the capture time)", (all as f64 * 1.5 / 1e6).ceil());
        }
    }
    if let (Mode::Timed { interval_ms, .. }, 0) = (cfg.mode, report.recorded) {
        eprintln!("mgbench: warning: the program ended before the first timed window (one every {interval_ms} ms of native running): capture it with --full, or a shorter --sample-interval");
    } else if let Mode::Timed {
        window,
        interval_ms,
    } = cfg.mode
    {
        // (An attached NumPy loop gave 14 windows in 4.7 s and said nothing; a shorter
        // --sample-interval gave 17, windows of 256 gave 36.)
        let windows = report
            .windows
            .unwrap_or_else(|| report.recorded.div_ceil(window));
        if windows < FEW_WINDOWS {
            eprintln!("mgbench: warning: only {windows} timed window(s): too few for sampled statistics (footprint, reuse and function shares came within 25% of a full trace from about 200 windows on); single steps may take at most half as long as the program runs natively, which bounded this run to {} accesses: capture a longer run, or take smaller windows (--sample-window, here {window}; --sample-interval, here {interval_ms} ms, is the least time between them){}", report.recorded, if cfg.pid.is_some() { "" } else { "; --backend qemu samples a launched program exactly, by access count" });
        }
    }
    if let Some(sig) = report.interrupted {
        eprintln!(
            "mgbench: interrupted by {}: the trace is finalised and readable",
            backend::signal_name(sig)
        );
    } else if let (Some(pid), Some(d), ProgramExit::Detached) =
        (cfg.pid, cfg.attach_for, report.exit)
    {
        eprintln!(
            "mgbench: detached from pid {pid} after --duration {} s; it runs on",
            d.as_secs_f64()
        );
    }
    match report.exit {
        ProgramExit::Code(0) | ProgramExit::Detached => {}
        ProgramExit::Code(c) => eprintln!("mgbench: the program exited with status {c}"),
        ProgramExit::Signal(s) => eprintln!(
            "mgbench: the program was killed by {} (the trace holds what was recorded before)",
            backend::signal_name(s)
        ),
    }
    Ok(report.exit.shell_status())
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Summary: accesses, loads, stores, samples, threads, sample ratio, top instructions.
    Info {
        file: PathBuf,
        #[arg(short = 'f', long, value_enum, default_value_t = InfoFormat::Table)]
        format: InfoFormat,
        /// How many of the most frequent instructions to list.
        #[arg(long, default_value_t = 10, value_parser = non_negative)]
        top: usize,
    },
    /// One access per line: thread, sample, ip, address, size, kind.
    Dump {
        file: PathBuf,
        /// Stop after N accesses.
        #[arg(short = 'n', long, value_parser = non_negative)]
        limit: Option<usize>,
        /// Add function and file:line to each line.
        #[arg(long)]
        symbols: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InfoFormat {
    Table,
    Json,
}

pub fn trace(cmd: TraceCommand) -> Result<i32> {
    match cmd {
        TraceCommand::Info { file, format, top } => info(&file, format, top),
        TraceCommand::Dump {
            file,
            limit,
            symbols,
        } => dump(&file, limit, symbols),
    }
}

fn info(file: &Path, format: InfoFormat, top: usize) -> Result<i32> {
    let i = trace_info(file, top)?;
    let mut out = std::io::stdout().lock();
    if format == InfoFormat::Json {
        serde_json::to_writer_pretty(&mut out, &i)?;
        writeln!(out)?;
    } else {
        writeln!(out, "trace        {}", i.path)?;
        writeln!(out, "command      {}", i.command.join(" "))?;
        let sampling = match (i.window, i.period) {
            (Some(w), Some(p)) => format!(" (window {w}, period {p})"),
            (Some(w), None) => format!(" (window {w})"),
            _ => String::new(),
        };
        writeln!(out, "backend      {}, {}{sampling}", i.backend, i.mode)?;
        if let Some(roi) = &i.roi {
            writeln!(
                out,
                "roi          {} ({})",
                roi.functions.join(", "),
                if roi.inclusive {
                    "with callees"
                } else {
                    "own instructions only"
                }
            )?;
        }
        writeln!(
            out,
            "accesses     {} ({} loads, {} stores)",
            i.accesses, i.loads, i.stores
        )?;
        writeln!(out, "samples      {}", i.samples)?;
        if i.mode == "full" {
            writeln!(out, "threads      {}", i.threads)?;
        } else {
            // A thread that ran between windows only is in the skipped count, not here.
            writeln!(
                out,
                "threads      {} with recorded accesses (a thread that ran in no window is in skipped only)",
                i.threads
            )?;
        }
        match i.sample_ratio_unknown {
            None => writeln!(
                out,
                "skipped      {} (sample ratio {:.2})",
                i.skipped, i.sample_ratio
            )?,
            Some(why) => writeln!(out, "skipped      unknown ({why}: sample ratio unknown)")?,
        }
        writeln!(out, "instructions {} distinct", i.distinct_instructions)?;
        for n in &i.notes {
            writeln!(out, "note         {n}")?;
        }
        writeln!(
            out,
            "size         {} bytes ({:.2} B/access)",
            i.file_bytes, i.bytes_per_access
        )?;
        match &i.end {
            Some(e) => {
                let how = match (e.exit_code, e.signal) {
                    (Some(c), _) => format!("exited with {c}"),
                    (_, Some(s)) => format!("killed by {}", backend::signal_name(s)),
                    _ => "detached".into(),
                };
                writeln!(
                    out,
                    "program      {how}{}",
                    if e.interrupted {
                        " (capture interrupted)"
                    } else {
                        ""
                    }
                )?;
                for err in &e.errors {
                    writeln!(out, "error        {err}")?;
                }
            }
            None => writeln!(
                out,
                "program      unknown: the trace has no end frame (the capture did not finish)"
            )?,
        }
        if !i.top_instructions.is_empty() {
            writeln!(
                out,
                "\n{:<18} {:>12} {:>12}  source",
                "instruction", "loads", "stores"
            )?;
            for t in &i.top_instructions {
                writeln!(
                    out,
                    "{:<18} {:>12} {:>12}  {}",
                    t.ip,
                    t.loads,
                    t.stores,
                    mgbench_capture::symbols::short_source(&t.source.describe_instruction())
                )?;
            }
            let anonymous = i
                .top_instructions
                .iter()
                .filter(|t| t.source.object.as_deref() == Some(ANONYMOUS_CODE))
                .count();
            if anonymous > 0 {
                writeln!(out, "\nnote: {anonymous} of these instructions {JIT_HINT}")?;
            }
        }
    }
    if let Some(d) = &i.damage {
        bail!(
            "{}: damaged at byte {}: {}; recovered {} accesses before it",
            i.path,
            d.offset,
            d.reason,
            i.accesses
        );
    }
    Ok(0)
}

fn dump(file: &Path, limit: Option<usize>, symbols: bool) -> Result<i32> {
    let f = std::fs::File::open(file)
        .with_context(|| format!("cannot open trace {}", file.display()))?;
    let mut r = TraceReader::open(BufReader::with_capacity(1 << 20, f))
        .with_context(|| format!("{}", file.display()))?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    // (The names of JIT-compiled code come at the end of the trace: read first.)
    let mut sym = symbols.then(|| {
        let mut s = Symbolizer::new(Vec::new());
        s.add_jit_symbols(&read_jit_symbols(file));
        s
    });
    let mut n = 0usize;
    let limit = limit.unwrap_or(usize::MAX);
    'frames: while let Some(frame) = r.next_frame()? {
        match frame {
            Frame::Mappings(m) => {
                if let Some(sym) = sym.as_mut() {
                    sym.add_mappings(&m);
                }
            }
            Frame::Chunk(c) => {
                for (s, window) in c.windows() {
                    for a in window {
                        if n >= limit {
                            break 'frames;
                        }
                        write!(
                            out,
                            "{} {} {:#x} {:#x} {} {}",
                            c.thread,
                            s.id,
                            a.ip,
                            a.addr,
                            a.size,
                            a.kind.as_str()
                        )?;
                        if let Some(sym) = sym.as_mut() {
                            write!(out, " {}", sym.resolve(a.ip).describe())?;
                        }
                        writeln!(out)?;
                        n += 1;
                    }
                }
            }
            Frame::Note(_) | Frame::End(_) | Frame::JitSymbols(_) => {}
        }
    }
    out.flush()?;
    if let Some(d) = r.damage() {
        bail!(
            "{}: damaged at byte {}: {}; {} accesses were printed before it",
            file.display(),
            d.offset,
            d.reason,
            n
        );
    }
    Ok(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFrom {
    Gspin,
    Lackey,
    Memgaze,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Format of INPUT (gzip-compressed input is detected).
    #[arg(long, value_enum)]
    from: ImportFrom,
    /// The trace to convert.
    input: PathBuf,
    /// The mgbench trace to write.
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// A file the traced program ran code from, so that its code is named: PATH for a
    /// program linked at fixed addresses, PATH@ADDRESS for a PIE or shared library (ADDRESS:
    /// where its first page was loaded, as /proc/PID/maps shows it). Repeatable. A lackey log
    /// of `valgrind -v -v` says where every file was loaded by itself.
    #[arg(long, value_name = "PATH[@ADDRESS]")]
    program: Vec<String>,
}

/// The mappings `--program PATH[@ADDRESS]` gives an imported trace.
fn program_mappings(arg: &str) -> Result<Vec<mgbench_capture::trace::Mapping>> {
    use mgbench_capture::import::ElfLoad;
    let (path, at) = match arg.rsplit_once('@') {
        Some((p, a)) if !p.is_empty() => {
            let a = a.trim();
            let parsed = match a.strip_prefix("0x").or_else(|| a.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => a.parse::<u64>().ok(),
            };
            match parsed {
                Some(v) => (p, Some(v)),
                None => bail!(
                    "--program {arg}: {a:?} is not an address (give hex as 0x555555554000, or decimal)"
                ),
            }
        }
        _ => (arg, None),
    };
    let elf =
        ElfLoad::read(Path::new(path)).map_err(|why| anyhow!("--program {path}: it {why}"))?;
    let start = match (at, elf.pie) {
        (Some(a), _) => a,
        (None, false) => elf.first_page,
        (None, true) => bail!(
            "--program {path}: it is position-independent (a PIE or shared library), loaded where the run chose: give where its first page was, --program {path}@ADDRESS (the start of its first line in /proc/PID/maps; under Valgrind a PIE program's is 0x108000, and `valgrind -v -v` logs every file's)"
        ),
    };
    if start % 4096 != 0 {
        bail!("--program {arg}: {start:#x} is not page-aligned: give where the file's first page was loaded (the start of its first line in /proc/PID/maps)");
    }
    Ok(elf.mappings(start))
}

pub fn import(args: ImportArgs) -> Result<i32> {
    let kind = match args.from {
        ImportFrom::Gspin => ImportKind::Gspin,
        ImportFrom::Lackey => ImportKind::Lackey,
        ImportFrom::Memgaze => ImportKind::Memgaze,
    };
    let mut mappings = Vec::new();
    for p in &args.program {
        mappings.extend(program_mappings(p)?);
    }
    let input = std::fs::File::open(&args.input)
        .with_context(|| format!("cannot open {}", args.input.display()))?;
    let progress = Progress::new();
    progress.start("importing", input.metadata().map(|m| m.len()).unwrap_or(0));
    let input = CountingReader::new(input, progress.clone());
    let mode = match kind {
        // MemGaze text keeps sample ids but not how many accesses were skipped.
        ImportKind::Memgaze => Mode::Sampled {
            window: 0,
            period: 0,
        },
        _ => Mode::Full,
    };
    let mut meta = import_meta(kind, &args.input.display().to_string(), mode);
    if kind == ImportKind::Memgaze {
        meta.notes.push(
            "MemGaze text carries no skipped counts: the sample ratio is unknown (recorded as 1)"
                .into(),
        );
    }
    if kind == ImportKind::Memgaze {
        meta.notes.push(
            "MemGaze text has no load/store flag or size: accesses are recorded as 8-byte loads"
                .into(),
        );
    }
    // Written beside the output and renamed at the end: a failed import leaves an existing
    // OUTPUT as it was. A device or pipe (`-o /dev/null`) is written directly (a rename would
    // put a file in its place), a symbolic link's file is replaced.
    let (temp, rename_to) = match output_target(&args.output) {
        OutputTarget::Direct => (args.output.clone(), None),
        OutputTarget::Replace(path) => {
            let mut temp = path.as_os_str().to_owned();
            temp.push(".tmp");
            (PathBuf::from(temp), Some(path))
        }
    };
    let out = if rename_to.is_some() {
        std::fs::File::create(&temp)
    } else {
        std::fs::OpenOptions::new().write(true).open(&temp)
    }
    .with_context(|| format!("cannot create {}", temp.display()))?;
    let bar = Display::start(&progress, Style::Bytes);
    let imported = TraceWriter::create(BufWriter::new(out), &meta)
        .with_context(|| format!("cannot write {}", temp.display()))
        .and_then(|mut w| {
            if !mappings.is_empty() {
                w.write_mappings(&mappings)
                    .with_context(|| format!("cannot write {}", temp.display()))?;
            }
            let summary = mgbench_capture::import::import(kind, input, &mut w)
                .with_context(|| format!("{}", args.input.display()))?;
            w.write_end(&EndInfo {
                recorded: summary.accesses,
                ..EndInfo::default()
            })
            .and_then(|()| w.flush())
            .with_context(|| format!("cannot write {}", temp.display()))?;
            Ok(summary)
        });
    drop(bar);
    let summary = match imported {
        Ok(s) => s,
        Err(e) => {
            if rename_to.is_some() {
                let _ = std::fs::remove_file(&temp);
            }
            return Err(e);
        }
    };
    if let Some(path) = &rename_to {
        std::fs::rename(&temp, path)
            .with_context(|| format!("cannot move {} to {}", temp.display(), path.display()))?;
    }
    eprintln!(
        "mgbench: imported {} accesses ({} thread(s), {} sample(s)) from {} -> {}",
        summary.accesses,
        summary.threads,
        summary.samples,
        args.input.display(),
        args.output.display()
    );
    for (what, n) in &summary.ignored {
        eprintln!("mgbench: note: skipped {n} {what}");
    }
    if !summary.located.is_empty() {
        eprintln!(
            "mgbench: note: {} file(s) placed where Valgrind's log says they were loaded: their code is named",
            summary.located.len()
        );
    }
    for (path, why) in &summary.unreadable {
        eprintln!("mgbench: warning: {path}, loaded says the log, {why}: its code stays unnamed");
    }
    if mappings.is_empty() && summary.located.is_empty() {
        eprintln!(
            "mgbench: note: {} says which instructions ran but not which files they came from: to name its code, give --program PATH[@ADDRESS] per file{}",
            args.input.display(),
            if kind == ImportKind::Lackey {
                ", or run valgrind with -v -v, which logs where it loaded each"
            } else {
                ""
            }
        );
    }
    Ok(0)
}
