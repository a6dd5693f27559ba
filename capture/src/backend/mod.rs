//! Capture backends: run (or attach to) a program and write its memory accesses as a trace.
//!
//! - [`qemu`] (default): Debian's `qemu-x86_64` runs the program under TCG with mgbench's
//!   plugin, which records accesses (all, or MemGaze samples) in the guest's threads.
//! - `ptrace`: single-steps the program natively and decodes each instruction's memory
//!   operands; slow, but handles AVX-512 and can attach to a running process.
//! - [`pt`]: Intel PT with ptwrite; detected, not available on machines without it.
//!
//! Every backend checks the program before starting it, writes the trace header first,
//! survives Ctrl-C (the program gets the signal; mgbench finalises the trace), and appends an
//! end frame saying how the program ended.

mod program;
pub mod pt;
pub mod ptrace;
mod ptrace_sys;
pub mod qemu;
mod sys;
pub mod x86;

use std::ffi::OsString;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub use program::{evex_instructions, host_has_avx512, resolve, which, EvexCount, Program};
pub use sys::{signal_name, string_ops_under_watchpoint};

use crate::symbols::{ElfImage, FunctionCode, SymbolError};
use crate::trace::{EndInfo, Frame, JitSymbol, Mode, TraceReader, TraceWriter};

/// Which backend records the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Qemu,
    Ptrace,
    Pt,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Qemu => "qemu",
            BackendKind::Ptrace => "ptrace",
            BackendKind::Pt => "pt",
        }
    }
}

/// Default sampling: windows of 4096 accesses about every 2^20 (MemGaze's scale, 1 in ~230
/// recorded). With the `qemu` backend, skips this long are counted by generated code and
/// windows switched in by retranslation (1.1-1.5x bare QEMU here); periods under 2^18 are
/// counted by callbacks, exactly `period - window` each, at 1.3-3.6x. Windows of 4096 rather
/// than 1024 see reuses up to a few thousand accesses long (a 1024 window missed half of a
/// column walk's reuses: 47% off in the fidelity table, 12% at 4096), at no measurable cost.
pub const DEFAULT_WINDOW: u64 = 4096;
pub const DEFAULT_PERIOD: u64 = 1 << 20;
/// ptrace single-steps each window natively: its default window stays at 1024 accesses.
pub const DEFAULT_TIMED_WINDOW: u64 = 1024;
/// Fewer windows than this in a sampled capture get a warning: too few for sampled statistics.
pub const FEW_WINDOWS: u64 = 100;
/// ptrace samples by time: at least this long natively between windows (longer when a window
/// took longer: the pause is at least three times the window's duration, and a window steps
/// at most half the native time before it, keeping the slowdown near 1.5x).
pub const DEFAULT_INTERVAL_MS: u64 = 20;

/// What to capture and how.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub output: PathBuf,
    pub backend: BackendKind,
    pub mode: Mode,
    /// Functions whose accesses alone are recorded.
    pub roi: Vec<String>,
    /// Accesses by callees of the ROI functions count too.
    pub roi_inclusive: bool,
    /// Attach to this process instead of starting one (ptrace).
    pub pid: Option<i32>,
    /// With `pid`: detach after this long, as Ctrl-C would, leaving the process running.
    pub attach_for: Option<std::time::Duration>,
    /// Advanced while the program runs: accesses recorded (`done`) and trace bytes (`items`).
    pub progress: crate::progress::Progress,
    /// Added to the trace header's notes (e.g. why `--backend auto` chose this backend).
    pub notes: Vec<String>,
    /// Sampled qemu capture: picks where each thread's first window starts (a random point
    /// of its first period, the same for the same seed).
    pub sample_seed: u64,
}

/// How the traced program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramExit {
    Code(i32),
    Signal(i32),
    /// mgbench detached from a process it attached to; the process runs on.
    Detached,
}

impl ProgramExit {
    /// The exit code, if the program exited.
    pub fn code(self) -> Option<i32> {
        match self {
            ProgramExit::Code(c) => Some(c),
            _ => None,
        }
    }

    /// The signal that killed the program, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            ProgramExit::Signal(s) => Some(s),
            _ => None,
        }
    }

    /// The exit status a shell would report.
    pub fn shell_status(self) -> i32 {
        match self {
            ProgramExit::Code(c) => c,
            ProgramExit::Signal(s) => 128 + s,
            ProgramExit::Detached => 0,
        }
    }
}

/// What a capture produced.
#[derive(Debug, Clone)]
pub struct CaptureReport {
    pub trace: PathBuf,
    pub exit: ProgramExit,
    pub recorded: u64,
    pub skipped: u64,
    /// The program's threads that ran under the backend ...
    pub threads: u64,
    /// ... and those of them with accesses in the trace (fewer where a sampled run's thread
    /// ran in no window).
    pub threads_recorded: u64,
    pub trace_bytes: u64,
    /// Sample windows recorded, where the backend counts them (ptrace's timed windows, which
    /// may close before `--sample-window` accesses); None: `recorded / window`.
    pub windows: Option<u64>,
    /// mgbench received Ctrl-C/SIGTERM while the program ran.
    pub interrupted: Option<i32>,
    pub elapsed_s: f64,
    /// Things the user should know (lost tail after a crash, disk full, ROI never entered).
    pub warnings: Vec<String>,
    /// What the run did that the user may not expect (where `--roi` found inlined copies).
    pub notes: Vec<String>,
}

/// The program's code that `--roi` names, at link-time addresses, as a backend records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RoiPlan {
    /// Out-of-line copies of the functions: their entries open the ROI until the `ret` that
    /// loads the entry's return address.
    pub functions: Vec<(u64, u64)>,
    /// Parts split off them (`.cold`), reached by jumps from them.
    pub parts: Vec<(u64, u64)>,
    /// Copies inlined into other functions, recorded wherever they run (inclusive: a call
    /// made from one opens the ROI for the callee).
    pub inlined: Vec<(u64, u64)>,
    /// The functions that hold the inlined copies (no copy runs outside them).
    pub containers: Vec<(u64, u64)>,
    /// A copy lies where no function symbol does: no entry tells when it may run.
    pub uncontained: bool,
    /// For the trace's notes and the user: the functions found inlined or in libraries.
    pub notes: Vec<String>,
    /// ROI code in the shared libraries the program loads at start (a `--roi` function it
    /// imports), at their own link-time addresses.
    pub libs: Vec<LibPlan>,
    /// At run time: some of `libs` are not mapped yet (see [`RoiPlan::placed`]).
    pub pending: bool,
    /// Names found in neither the program nor the libraries it loads at start, in a program
    /// that calls `dlopen`: each library it opens is searched for them as it runs (QEMU).
    pub late: Vec<String>,
    /// The libraries already searched (those loaded at start), as `/proc/PID/maps` names
    /// them, where `late` is not empty.
    pub searched: Vec<String>,
}

/// A shared library's part of a [`RoiPlan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LibPlan {
    pub path: String,
    /// The link address of its file offset 0.
    pub base: u64,
    pub plan: RoiPlan,
}

impl RoiPlan {
    /// Finds the code of each `--roi` function in the program (see
    /// [`ElfImage::find_code`]).
    /// A function the program imports is looked for in the libraries its dynamic loader
    /// loads at start, in their order (`LOADER --list PROGRAM`, as `ldd` does).
    pub fn find(image: &ElfImage, names: &[String]) -> Result<RoiPlan, CaptureError> {
        let mut plan = RoiPlan::default();
        // The libraries, opened once for every name looked for in them.
        let mut libraries: Option<Vec<ElfImage>> = None;
        for name in names {
            let code = match image.find_code(name) {
                Ok(code) => code,
                Err(e @ (SymbolError::InLibrary { .. } | SymbolError::UnknownFunction { .. })) => {
                    let libs = libraries.get_or_insert_with(|| {
                        loaded_libraries(image)
                            .iter()
                            .filter_map(|path| ElfImage::open(path).ok())
                            .collect()
                    });
                    let found = libs
                        .iter()
                        .find_map(|lib| Some((lib, lib.find_code(name).ok()?)));
                    let Some((lib, code)) = found else {
                        // Not a misspelling (no similar names) in a program that opens
                        // libraries itself: looked for in each one as it is opened.
                        let misspelt = matches!(&e, SymbolError::UnknownFunction { close, .. } if !close.is_empty());
                        let opens = image
                            .imports
                            .iter()
                            .chain(libs.iter().flat_map(|l| &l.imports))
                            .any(|i| i == "dlopen");
                        if opens && !misspelt && !name.contains(',') {
                            plan.notes.push(format!(
                                "--roi {name}: not in the program or the {} libraries it loads at start; it calls dlopen, so each library it opens is searched for it as it runs",
                                libs.len()
                            ));
                            plan.late.push(name.clone());
                            continue;
                        }
                        return Err(match e {
                            SymbolError::InLibrary { .. } => CaptureError::Invalid(format!(
                                "--roi: {e}, which mgbench did not find among the libraries it loads at start ({} of them)",
                                libs.len()
                            )),
                            e => CaptureError::Roi(e),
                        });
                    };
                    let path = lib.path.display().to_string();
                    plan.notes.push(format!(
                        "--roi {name}: in {} (a shared library the program loads)",
                        crate::symbols::short_path(&path)
                    ));
                    plan.add_in_library(path, lib.load_base, name, &code);
                    continue;
                }
                Err(e) => return Err(CaptureError::Roi(e)),
            };
            plan.add(name, &code);
        }
        if !plan.late.is_empty() {
            plan.searched = libraries
                .iter()
                .flatten()
                .map(|l| l.path.display().to_string())
                .collect();
        }
        plan.tidy();
        Ok(plan)
    }

    /// Adds a function found in the library at `path` (`base`: the link address of its file
    /// offset 0) to that library's plan, and its notes to this one's.
    fn add_in_library(&mut self, path: String, base: u64, name: &str, code: &FunctionCode) {
        let i = match self.libs.iter().position(|l| l.path == path) {
            Some(i) => i,
            None => {
                self.libs.push(LibPlan {
                    path,
                    base,
                    plan: RoiPlan::default(),
                });
                self.libs.len() - 1
            }
        };
        let lib_plan = &mut self.libs[i].plan;
        lib_plan.add(name, code);
        self.notes.append(&mut lib_plan.notes);
    }

    fn add(&mut self, name: &str, code: &FunctionCode) {
        self.functions.extend(&code.entries);
        self.parts.extend(&code.parts);
        for c in &code.inlined {
            self.inlined.push((c.start, c.end));
            match &c.caller {
                Some(f) => self.containers.push((f.start, f.start + f.size)),
                None => self.uncontained = true,
            }
        }
        if !code.inlined.is_empty() {
            self.notes.push(inlined_note(name, code));
        }
        if !code.outlined.is_empty() {
            let n = code.outlined.len();
            let shown: Vec<&str> = code.outlined.iter().take(4).map(String::as_str).collect();
            let more = if n > 4 {
                format!(" and {} more", n - 4)
            } else {
                String::new()
            };
            self.notes.push(format!(
                "--roi {name}: with the OpenMP region(s) clang outlined from it ({}{more}), which every thread of the team runs",
                shown.join(", ")
            ));
        }
    }

    /// Sorts and dedups the ranges, the libraries' too.
    fn tidy(&mut self) {
        for l in &mut self.libs {
            l.plan.tidy();
        }
        for v in [
            &mut self.functions,
            &mut self.parts,
            &mut self.inlined,
            &mut self.containers,
        ] {
            v.sort_unstable();
            v.dedup();
        }
    }

    /// At run time: the program's ranges moved by its load bias, with those of each library
    /// that `maps` shows mapped (by the mapping of its file offset 0) added; `pending` where
    /// one is not mapped yet.
    pub fn placed(&self, bias: u64, maps: &[crate::trace::Mapping]) -> RoiPlan {
        let mut out = self.biased(bias);
        for l in &self.libs {
            match crate::trace::Mapping::file_starts(maps, &l.path).next() {
                Some(start) => {
                    let lib = l.plan.biased(start.wrapping_sub(l.base));
                    out.functions.extend(lib.functions);
                    out.parts.extend(lib.parts);
                    out.inlined.extend(lib.inlined);
                    out.containers.extend(lib.containers);
                    out.uncontained |= lib.uncontained;
                }
                None => out.pending = true,
            }
        }
        out
    }

    /// Every range of the functions' own code (an exclusive ROI records these alone).
    pub fn own_code(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.functions
            .iter()
            .chain(&self.parts)
            .chain(&self.inlined)
    }

    /// The plan with every address moved by `bias` (a position-independent program's load
    /// bias).
    pub fn biased(&self, bias: u64) -> RoiPlan {
        let moved = |ranges: &[(u64, u64)]| -> Vec<(u64, u64)> {
            ranges
                .iter()
                .map(|&(s, e)| (s.wrapping_add(bias), e.wrapping_add(bias)))
                .collect()
        };
        RoiPlan {
            functions: moved(&self.functions),
            parts: moved(&self.parts),
            inlined: moved(&self.inlined),
            containers: moved(&self.containers),
            uncontained: self.uncontained,
            notes: Vec::new(),
            libs: Vec::new(),
            pending: false,
            late: Vec::new(),
            searched: Vec::new(),
        }
    }
}

/// The warning for a `--roi` name no library the program opened with dlopen had.
fn unfound_in_opened_libraries(name: &str) -> String {
    format!("--roi {name}: no library the program opened with dlopen has a function of that name either")
}

/// The shared libraries the program's dynamic loader loads at start, in its order: what
/// `LOADER --list PROGRAM` prints (`ldd`'s way; the loader maps them and exits, running
/// none of the program's code). Empty for a static program, or when the loader fails.
fn loaded_libraries(image: &ElfImage) -> Vec<PathBuf> {
    let Some(interp) = &image.interp else {
        return Vec::new();
    };
    let Ok(out) = std::process::Command::new(interp)
        .arg("--list")
        .arg(&image.path)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    // "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x...)"
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("=> ").nth(1))
        .filter_map(|r| r.split(" (").next())
        .filter(|p| p.starts_with('/'))
        // As /proc/PID/maps names them: `/tmp/x/./libk.so` is `/tmp/x/libk.so`, and
        // `/lib` a link to `/usr/lib`.
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p)))
        .collect()
}

/// "--roi gather: inlined into main (2 places) and work; recorded there too (no out-of-line
/// copy)".
fn inlined_note(name: &str, code: &FunctionCode) -> String {
    let mut callers: Vec<(String, usize)> = Vec::new();
    for c in &code.inlined {
        let caller = c
            .caller
            .as_ref()
            .map_or_else(|| format!("{:#x}", c.start), |f| f.name().to_string());
        match callers.iter_mut().find(|(n, _)| *n == caller) {
            Some((_, k)) => *k += 1,
            None => callers.push((caller, 1)),
        }
    }
    let listed: Vec<String> = callers
        .iter()
        .take(6)
        .map(|(n, k)| match k {
            1 => n.clone(),
            k => format!("{n} ({k} ranges)"),
        })
        .collect();
    let more = match callers.len().saturating_sub(listed.len()) {
        0 => String::new(),
        n => format!(" and {n} more function(s)"),
    };
    let outline = if code.entries.is_empty() {
        " (it has no out-of-line copy)"
    } else {
        ""
    };
    format!(
        "--roi {name}: inlined into {}{more}; recorded there too{outline}",
        listed.join(", ")
    )
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot find program {}: {hint}", .program.display())]
    ProgramNotFound { program: PathBuf, hint: String },
    #[error("cannot run {}: {why}", .program.display())]
    NotExecutable { program: PathBuf, why: String },
    #[error("{0}")]
    Elf(SymbolError),
    #[error("--roi: {0}")]
    Roi(SymbolError),
    #[error("qemu-x86_64 not found: install Debian's qemu-user (`apt-get install qemu-user`, or run scripts/setup.sh), or set MGBENCH_QEMU to its path")]
    QemuMissing,
    #[error("cannot find mgbench's QEMU plugin (looked in {looked}): build it with `cargo build --release -p mgbench-qemu-plugin`, or set MGBENCH_QEMU_PLUGIN to the .so")]
    PluginMissing { looked: String },
    #[error("QEMU did not load mgbench's plugin ({plugin}); see QEMU's message above")]
    PluginNotLoaded { plugin: PathBuf },
    #[error("native live RDX did not start in {}: {why}", .program.display())]
    NativeRdxNotStarted { program: PathBuf, why: String },
    #[error("cannot write trace {}: {cause}", .path.display())]
    Output {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{} is being written by another mgbench capture: give each capture its own -o (under mpirun or srun, leave -o out: each rank then writes PROGRAM.rankR.mgbt), or wait for the other to end", .0.display())]
    OutputBusy(PathBuf),
    #[error("output path {} contains a comma, which QEMU's -plugin option cannot carry: choose another -o", .0.display())]
    CommaInPath(PathBuf),
    #[error("cannot start {what}: {cause}")]
    Spawn { what: String, cause: std::io::Error },
    #[error("the {backend} backend is not available here: {why}")]
    Unavailable { backend: &'static str, why: String },
    #[error("{0}")]
    Invalid(String),
}

/// What `--backend auto` picked, and why (printed, and kept in the trace header's notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub kind: BackendKind,
    pub why: String,
}

/// `--backend auto`: attaching needs ptrace; a program whose own code holds AVX-512
/// instructions runs natively under ptrace (QEMU's TCG lacks AVX-512) where the CPU has
/// AVX-512; everything else runs under QEMU, whose samples have exact skip counts (Intel PT
/// with ptwrite, the cheaper exact sampler, is detected but mgbench cannot record with it).
pub fn choose(program: &Path, attach: bool, full: bool) -> Choice {
    if attach {
        return Choice {
            kind: BackendKind::Ptrace,
            why: "attaching to a running process (--pid) needs ptrace".into(),
        };
    }
    let evex = evex_instructions(program);
    if evex.unconditional > 0 && host_has_avx512() {
        let how = if full {
            "ptrace runs it natively, stepping every instruction (tens of thousands of accesses a second: a long run takes hours)"
        } else {
            "ptrace runs it natively (timed samples: the sample ratio is unknown)"
        };
        return Choice {
            kind: BackendKind::Ptrace,
            why: format!(
                "{} holds {} AVX-512 instruction(s), which QEMU's TCG cannot run: {how}; where the program picks its AVX-512 code at run time by CPUID, as OpenSSL and simdutf do, --backend qemu runs the other code with exact samples",
                program.display(),
                evex.unconditional
            ),
        };
    }
    let pt = match pt::detect() {
        pt::PtSupport::Available => "Intel PT with ptwrite is present but not used by mgbench",
        _ => "no Intel PT with ptwrite here",
    };
    let variants = match (evex.in_ifunc_variants, evex.in_register_saves) {
        (0, 0) => String::new(),
        (v, r) => format!(
            "; its {} AVX-512 instruction(s) all lie in code chosen by CPUID ({v} in variants its IFUNCs choose among, as glibc's string functions in a static program; {r} in trampolines that only save vector registers, as the loader's), and QEMU's CPU reports no AVX-512",
            v + r
        ),
    };
    let exact = if full {
        "QEMU records every access"
    } else {
        "QEMU counts every skipped access, so samples are exact"
    };
    Choice {
        kind: BackendKind::Qemu,
        why: format!("{pt}; {exact}{variants}"),
    }
}

/// Runs a capture with the configured backend.
pub fn capture(cfg: &CaptureConfig) -> Result<CaptureReport, CaptureError> {
    let _claim = OutputClaim::take(&cfg.output)?;
    match (cfg.backend, cfg.pid) {
        (BackendKind::Pt, _) => Err(pt::unavailable()),
        (BackendKind::Qemu, Some(_)) => Err(CaptureError::Invalid(
            "--pid needs --backend ptrace (QEMU cannot attach to a running process)".into(),
        )),
        (BackendKind::Qemu, None) => qemu::capture(cfg),
        (BackendKind::Ptrace, _) => ptrace::capture(cfg),
    }
}

/// The trace file, held (an exclusive lock on it) while one capture writes it: a second
/// mgbench given the same file, as every rank of `mpirun -np N mgbench capture -o t.mgbt`
/// is, fails before its program starts, where the two wrote into one file (a trace cut
/// short at a frame the other had overwritten). A file it created that stayed empty (the
/// run failed before it started) is removed again; an existing file is not truncated here,
/// so a failed start leaves it as it was. Pipes and devices (`-o /dev/null`) are not held.
struct OutputClaim {
    file: Option<File>,
    path: PathBuf,
    created: bool,
}

impl OutputClaim {
    fn take(path: &Path) -> Result<OutputClaim, CaptureError> {
        let unheld = OutputClaim {
            file: None,
            path: path.to_path_buf(),
            created: false,
        };
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return Ok(unheld);
        }
        let out = |cause| CaptureError::Output {
            path: path.to_path_buf(),
            cause,
        };
        let open = || std::fs::OpenOptions::new().write(true).open(path);
        let (file, created) = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                (open().map_err(out)?, false)
            }
            Err(e) => return Err(out(e)),
        };
        match sys::try_lock(&file) {
            Ok(true) => Ok(OutputClaim {
                file: Some(file),
                path: path.to_path_buf(),
                created,
            }),
            // Not removed even if this call created it: the holder may have opened it already.
            Ok(false) => Err(CaptureError::OutputBusy(path.to_path_buf())),
            // A file system without locks: written unheld, as before.
            Err(_) => Ok(unheld),
        }
    }
}

impl Drop for OutputClaim {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        if self.created && file.metadata().is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Counts what a trace holds by reading it (used when a backend's own counts are lost).
pub(crate) fn scan_counts(path: &Path) -> (u64, u64, u64, Option<String>) {
    let Ok(f) = File::open(path) else {
        return (0, 0, 0, None);
    };
    let Ok(mut r) = TraceReader::open(BufReader::new(f)) else {
        return (0, 0, 0, None);
    };
    let (mut rec, mut skip) = (0u64, 0u64);
    let mut threads = std::collections::BTreeSet::new();
    while let Ok(Some(frame)) = r.next_frame() {
        if let Frame::Chunk(c) = frame {
            rec += c.accesses.len() as u64;
            skip += c.samples.iter().map(|s| s.skipped_before).sum::<u64>();
            threads.insert(c.thread);
        }
    }
    let damage = r
        .damage()
        .map(|d| format!("{} at byte {}", d.reason, d.offset));
    (rec, skip, threads.len() as u64, damage)
}

/// The program's command line, as the trace header and reports show it.
pub(crate) fn command_line(program: &Path, args: &[std::ffi::OsString]) -> Vec<String> {
    std::iter::once(program.display().to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect()
}

/// The perf map that a JIT runtime in process `pid` wrote (`/tmp/perf-PID.map`, where `perf`
/// looks: `node --perf-basic-prof`, Julia with `ENABLE_JITPROFILING=1`, Python 3.12 with
/// `-X perf`, Java with `-XX:+DumpPerfMapAtExit`), its path and symbols; None where there is none, or
/// where it was last written before `since` (a process before this one with the same pid).
pub(crate) fn perf_map(
    pid: u32,
    since: Option<std::time::SystemTime>,
) -> Option<(PathBuf, Vec<JitSymbol>)> {
    let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if since.is_some_and(|t| modified < t) {
        return None;
    }
    let text = std::fs::read(&path).ok()?;
    let syms = JitSymbol::parse_perf_map(&String::from_utf8_lossy(&text));
    (!syms.is_empty()).then_some((path, syms))
}

/// What a capture (or live run) says of the `n` JIT symbols it read from `path`.
pub(crate) fn perf_map_note(path: &Path, n: usize) -> String {
    format!(
        "names of JIT-compiled code: {n} symbol(s) from {} (the runtime's perf map)",
        path.display()
    )
}

/// Appends the end frame to a finished trace, after the names of JIT-compiled code (`jit`:
/// a runtime's perf map and its symbols) and a note saying where they came from, which goes
/// into `notes` too. Names too many for a frame are left out (the note says so), never the
/// end frame.
pub(crate) fn finalize(
    path: &Path,
    end: &EndInfo,
    jit: Option<&(PathBuf, Vec<JitSymbol>)>,
    notes: &mut Vec<String>,
) -> Result<u64, CaptureError> {
    let out = |cause| CaptureError::Output {
        path: path.to_path_buf(),
        cause,
    };
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(out)?;
    let mut w = TraceWriter::append(f);
    if let Some((map, syms)) = jit {
        let note = match w.write_jit_symbols(syms) {
            Ok(()) => format!("{}, kept in the trace", perf_map_note(map, syms.len())),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => format!(
                "names of JIT-compiled code in {} not kept: {} symbol(s), {e}",
                map.display(),
                syms.len()
            ),
            Err(e) => return Err(out(e)),
        };
        w.write_note(&note).map_err(out)?;
        notes.push(note);
    }
    w.write_end(end).map_err(out)?;
    Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
}

/// The CPU's memory-access sampling that native live RDX uses, as the kernel lists it:
/// AMD IBS op (`ibs_op`) or Intel's PEBS load/store events (`cpu/events/mem-loads`); `None`
/// when there is neither (virtual machines usually have no PMU at all).
pub fn pmu_address_sampling() -> Option<String> {
    qemu::NativeSampler::detect().map(|s| s.describe().to_string())
}
