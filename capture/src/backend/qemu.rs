//! The QEMU backend: `qemu-x86_64 -plugin libmgbench_qemu_plugin.so,... PROGRAM ARGS`.
//!
//! mgbench writes the trace header, QEMU's plugin appends frames as the guest runs, and
//! mgbench appends the end frame with the program's exit status. The program's stdin,
//! stdout and stderr are the terminal's; its exit status becomes mgbench's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::program::{resolve, which, Program};
use super::sys::{
    children_minor_faults, die_with_parent, inherit, memory_file, reserve_descriptors,
    string_ops_under_watchpoint, SignalGuard,
};
use super::{
    command_line, finalize, perf_map, perf_map_note, scan_counts, signal_name, CaptureConfig,
    CaptureError, CaptureReport, ProgramExit, RoiPlan,
};
use crate::trace::{EndInfo, Mode, RoiMeta, TraceMeta, TraceWriter};

/// File name of the plugin built by the `mgbench-qemu-plugin` crate.
pub const PLUGIN_FILE: &str = "libmgbench_qemu_plugin.so";

/// Finds qemu-x86_64: $MGBENCH_QEMU, then PATH.
pub fn find_qemu() -> Result<PathBuf, CaptureError> {
    if let Some(p) = std::env::var_os("MGBENCH_QEMU") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(CaptureError::QemuMissing)
        };
    }
    which("qemu-x86_64").ok_or(CaptureError::QemuMissing)
}

/// The plugin built into the running executable, if its build embedded one, and the name
/// its build gave those bytes.
static EMBEDDED: std::sync::OnceLock<(&'static [u8], &'static str)> = std::sync::OnceLock::new();

/// Hands capture the plugin's bytes built into the executable (the `mgbench` binary embeds
/// them at build time) and their hash, computed by the build (hashing 1.5 MB here cost each
/// run about 2 ms): [`find_plugin`] then writes them once to a cache directory and uses
/// that file, wherever the binary was installed. Empty bytes (a build that skipped the
/// embedding) are ignored.
pub fn embed_plugin(bytes: &'static [u8], hash: &'static str) {
    if !bytes.is_empty() {
        let _ = EMBEDDED.set((bytes, hash));
    }
}

/// Where the embedded plugin is written: $XDG_CACHE_HOME/mgbench, ~/.cache/mgbench, or the
/// temporary directory; the file name carries `hash`, the bytes' hash, so that binaries of
/// different versions never share one.
fn cached_plugin(bytes: &[u8], hash: &str) -> Result<PathBuf, CaptureError> {
    let dirs = [
        std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("mgbench")),
        std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/mgbench")),
        Some(std::env::temp_dir().join(format!("mgbench-{}", user_id()))),
    ];
    let mut tried = Vec::new();
    for dir in dirs.into_iter().flatten() {
        let path = dir.join(format!("libmgbench_qemu_plugin-{hash}.so"));
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
            return Ok(path);
        }
        // Written under a unique name and renamed: concurrent captures never load half a
        // file.
        let tmp = dir.join(format!(".plugin-{}-{hash}.tmp", std::process::id()));
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        match written {
            Ok(()) => {
                prune_cached_plugins(&dir, &path);
                return Ok(path);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tried.push(format!("{} ({e})", dir.display()));
            }
        }
    }
    Err(CaptureError::PluginMissing {
        looked: format!(
            "the plugin built into mgbench could not be written to {}",
            tried.join(", ")
        ),
    })
}

/// Removes the plugins other builds of mgbench wrote to `dir` more than a day ago (one per
/// version would pile up). Younger ones stay: another build may be starting a capture with
/// its own, and a removed one is written again by the next capture that needs it.
fn prune_cached_plugins(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let day = std::time::Duration::from_secs(86_400);
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > day));
        if name.starts_with("libmgbench_qemu_plugin-")
            && name.ends_with(".so")
            && e.path() != keep
            && old
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The user id, from the owner of /proc/self (no FFI needed).
fn user_id() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

/// Finds the plugin: $MGBENCH_QEMU_PLUGIN, the one built into the executable, next to the
/// mgbench executable (or one level up, for test binaries in target/*/deps), ../lib/mgbench,
/// then the build tree.
pub fn find_plugin() -> Result<PathBuf, CaptureError> {
    if let Some(p) = std::env::var_os("MGBENCH_QEMU_PLUGIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(CaptureError::PluginMissing {
                looked: format!("MGBENCH_QEMU_PLUGIN={}", p.display()),
            })
        };
    }
    if let Some((bytes, hash)) = EMBEDDED.get() {
        return cached_plugin(bytes, hash);
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join(PLUGIN_FILE));
            candidates.push(dir.join("..").join(PLUGIN_FILE));
            candidates.push(dir.join("../lib/mgbench").join(PLUGIN_FILE));
        }
    }
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    candidates.push(tree.join("release").join(PLUGIN_FILE));
    candidates.push(tree.join("debug").join(PLUGIN_FILE));
    candidates
        .iter()
        .find(|p| p.is_file())
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| CaptureError::PluginMissing {
            looked: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// A ROI plan's ranges as plugin arguments. Exclusive: the functions' own code wherever it
/// lies. Inclusive: the out-of-line copies open the ROI, the inlined ones are recorded where
/// they run.
fn plugin_ranges(plan: &RoiPlan, inclusive: bool) -> String {
    let opening: Vec<&(u64, u64)> = if inclusive {
        plan.functions.iter().collect()
    } else {
        plan.own_code().collect()
    };
    let mut arg = String::new();
    for (s, e) in opening {
        arg.push_str(&format!(",roi={s:#x}:{e:#x}"));
    }
    if inclusive {
        for (s, e) in &plan.inlined {
            arg.push_str(&format!(",inlined={s:#x}:{e:#x}"));
        }
    }
    arg
}

/// Runs the program under QEMU with the plugin and writes the trace.
pub fn capture(cfg: &CaptureConfig) -> Result<CaptureReport, CaptureError> {
    let program = resolve(&cfg.program)?;
    let qemu = find_qemu()?;
    let plugin = find_plugin()?;
    let output = absolute(&cfg.output);
    if output.to_string_lossy().contains(',') {
        return Err(CaptureError::CommaInPath(output));
    }
    let roi = RoiPlan::find(&program.image, &cfg.roi)?;
    // The ROI's part of the plugin's argument, checked before the trace file is created.
    let mut roi_arg = String::new();
    if !cfg.roi.is_empty() {
        roi_arg.push_str(&plugin_ranges(&roi, cfg.roi_inclusive));
        if program.image.is_pie {
            let exe = program.path.display().to_string();
            if exe.contains(',') {
                return Err(CaptureError::Invalid(format!(
                    "--roi cannot be used with a program whose path contains a comma ({exe}): QEMU's -plugin option splits on commas"
                )));
            }
            roi_arg.push_str(&format!(
                ",exe={exe},exe_base={:#x}",
                program.image.load_base
            ));
        }
        for lib in &roi.libs {
            if lib.path.contains(',') {
                return Err(CaptureError::Invalid(format!(
                    "--roi cannot be used in a library whose path contains a comma ({}): QEMU's -plugin option splits on commas",
                    lib.path
                )));
            }
            roi_arg.push_str(&format!(",lib={},lib_base={:#x}", lib.path, lib.base));
            roi_arg.push_str(&plugin_ranges(&lib.plan, cfg.roi_inclusive));
        }
        // Names for the libraries the program opens with dlopen (the plugin searches each
        // one it sees mapped, except those already searched here).
        for name in &roi.late {
            roi_arg.push_str(&format!(",roi_late={name}"));
        }
        if !roi.late.is_empty() {
            for path in roi.searched.iter().filter(|p| !p.contains(',')) {
                roi_arg.push_str(&format!(",roi_searched={path}"));
            }
        }
        roi_arg.push_str(if cfg.roi_inclusive {
            ",roi_mode=inclusive"
        } else {
            ",roi_mode=exclusive"
        });
        // (Linux takes at most 128 KiB in one argument.)
        if roi_arg.len() > 120_000 {
            return Err(CaptureError::Invalid(format!(
                "--roi {}: {} code ranges ({} of them inlined copies) are more than QEMU's plugin argument can carry: name the function(s) that call it instead",
                cfg.roi.join(", "),
                roi.own_code().count(),
                roi.inlined.len()
            )));
        }
    }

    // Only where skips are counted inline (see `go_preemption`).
    let go = match cfg.mode {
        Mode::Sampled { window, period }
            if crate::spill::counts_inline(window, period, !cfg.roi.is_empty()) =>
        {
            go_preemption(&program.image)
        }
        _ => None,
    };
    let meta = TraceMeta {
        command: command_line(&program.path, &cfg.args),
        backend: "qemu".into(),
        mode: cfg.mode,
        start_time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        roi: (!cfg.roi.is_empty()).then(|| RoiMeta {
            functions: cfg.roi.clone(),
            inclusive: cfg.roi_inclusive,
        }),
        notes: std::iter::once(format!("qemu: {}", qemu.display()))
            .chain(cfg.notes.iter().cloned())
            .chain(roi.notes.iter().cloned())
            .chain(go.iter().map(|(_, note)| note.clone()))
            .collect(),
    };
    let out_err = |cause| CaptureError::Output {
        path: output.clone(),
        cause,
    };
    let file = std::fs::File::create(&output).map_err(out_err)?;
    let header_len = {
        let w = TraceWriter::create(file, &meta).map_err(out_err)?;
        w.bytes_written()
    };
    let status = PathBuf::from(format!("{}.status", output.display()));
    let _ = std::fs::remove_file(&status);
    // The plugin's writer keeps its running totals (accesses, trace bytes) in the first 16
    // bytes of this file; a thread here reads them into cfg.progress.
    let progress_file = PathBuf::from(format!("{}.progress", output.display()));
    std::fs::write(&progress_file, [0u8; 16]).map_err(out_err)?;

    // The plugin keeps what it recorded and has not written in this file, which outlives it:
    // if QEMU dies without finishing, what is left there goes into the trace (crate::spill).
    let mut warnings = Vec::new();
    let spill = match memory_file("mgbench-spill", crate::spill::FILE_BYTES as u64) {
        Ok(f) => Some(f),
        Err(e) => {
            warnings.push(format!(
                "no spill file ({e}): if the program dies from a signal, the accesses recorded just before are lost"
            ));
            None
        }
    };
    let mut arg = format!(
        "{},out={},status={},progress={}",
        plugin.display(),
        output.display(),
        status.display(),
        progress_file.display(),
    );
    if let Some(f) = &spill {
        arg.push_str(&format!(
            ",spill=/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(f)
        ));
    }
    if let Mode::Sampled { window, period } = cfg.mode {
        arg.push_str(&format!(
            ",window={window},period={period},seed={}",
            cfg.sample_seed
        ));
    }
    arg.push_str(&roi_arg);

    let start = Instant::now();
    let started = std::time::SystemTime::now();
    let guard = SignalGuard::install();
    let mut command = qemu_command(&qemu, &arg, &program, &cfg.args);
    if let Some((Some(value), _)) = &go {
        command.env("GODEBUG", value);
    }
    if let Some(f) = &spill {
        inherit(&mut command, f);
    }
    let mut child = command.spawn().map_err(|cause| CaptureError::Spawn {
        what: qemu.display().to_string(),
        cause,
    })?;
    let watcher = ProgressWatcher::start(progress_file.clone(), cfg.progress.clone());
    let wait = child.wait();
    drop(watcher);
    let _ = std::fs::remove_file(&progress_file);
    let interrupted = guard.caught();
    drop(guard);
    let elapsed_s = start.elapsed().as_secs_f64();
    let status_code = wait.map_err(|cause| CaptureError::Spawn {
        what: "waiting for qemu".into(),
        cause,
    })?;
    let exit = program_exit(status_code);

    let mut end = EndInfo {
        exit_code: exit.code(),
        signal: exit.signal(),
        interrupted: interrupted.is_some(),
        ..EndInfo::default()
    };
    let mut notes = roi.notes;
    notes.extend(go.map(|(_, note)| note));
    let (recorded, skipped, threads, threads_recorded) = match read_status(&status) {
        Some(s) => {
            end.errors = s.errors.clone();
            warnings.extend(s.errors);
            notes.extend(s.roi_found);
            warnings.extend(
                s.roi_unfound
                    .iter()
                    .map(|n| super::unfound_in_opened_libraries(n)),
            );
            if s.children > 0 {
                warnings.push(crate::trace::children_note(
                    s.children,
                    crate::trace::QEMU_CHILDREN_RAN,
                    false,
                ));
            }
            let with = s.threads_recorded.unwrap_or(s.threads);
            (s.recorded, s.skipped, s.threads, with)
        }
        None => {
            let len = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
            if len <= header_len && matches!(exit, ProgramExit::Code(_)) {
                let _ = std::fs::remove_file(&output);
                return Err(CaptureError::PluginNotLoaded { plugin });
            }
            // The guest died from a signal, QEMU was killed, or the program replaced itself
            // (execve): QEMU runs no plugin exit hook, so the last accesses recorded, and the
            // skips since each thread's last sample, are still in the spill file. Write them,
            // then count what the trace holds.
            let drained = spill.as_ref().map(|f| crate::spill::drain(f, &output));
            let exec = match (&drained, exit) {
                (Some(Ok(d)), ProgramExit::Code(_)) => d.exec.clone(),
                _ => None,
            };
            let why = match (exit, &exec) {
                (ProgramExit::Signal(s), _) => {
                    format!("the program was killed by {}", signal_name(s))
                }
                (_, Some(path)) => format!("the program replaced itself with {path} (execve)"),
                _ => "the plugin did not finish".to_string(),
            };
            if let Some(path) = &exec {
                warnings.push(format!(
                    "the trace ends where the program called execve({path}): QEMU user mode runs the new program natively, so nothing after it is recorded (everything before is); to trace that program, capture it directly: mgbench capture -- {path} ..."
                ));
            }
            let mut tail = 0;
            match drained {
                None => {}
                Some(Ok(d)) => {
                    tail = d.tail_skipped;
                    if let (ProgramExit::Signal(s), true) = (exit, d.tail_counted_inline > 0) {
                        warnings.push(format!(
                            "{} skipped accesses after the last windows were counted inline up to {}: a block counts its accesses when it starts, so a thread stopped inside one also counted the rest of that block (a few accesses), which never ran",
                            d.tail_counted_inline,
                            signal_name(s)
                        ));
                    }
                    for p in d.problems {
                        warnings.push(format!("{why}; recorded accesses not recovered: {p}"));
                    }
                }
                Some(Err(e)) => warnings.push(format!(
                    "{why}; the last accesses recorded could not be written to {}: {e}",
                    output.display()
                )),
            }
            let (rec, skip, threads, damage) = scan_counts(&output);
            let skip = skip + tail;
            if let Some(d) = damage {
                warnings.push(format!(
                    "the last frame was cut short ({d}); everything before it is readable"
                ));
            }
            end.errors.push(format!("capture ended abnormally: {why}"));
            // Only the threads with recorded accesses are known here.
            (rec, skip, threads, threads)
        }
    };
    let _ = std::fs::remove_file(&status);
    end.recorded = recorded;
    end.skipped = skipped;
    if recorded == 0 && !cfg.roi.is_empty() {
        warnings.push(format!(
            "the ROI ({}) was never entered: the trace holds no accesses",
            cfg.roi.join(", ")
        ));
    }
    // A JIT runtime's names for the code it wrote (the guest's pid is QEMU's).
    let jit = perf_map(child.id(), Some(started));
    let trace_bytes = match finalize(&output, &end, jit.as_ref(), &mut notes) {
        Ok(n) => n,
        Err(e) => {
            warnings.push(format!(
                "{e}: the trace has no end frame, but everything recorded before is readable"
            ));
            std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0)
        }
    };
    Ok(CaptureReport {
        trace: output,
        exit,
        recorded,
        skipped,
        threads,
        threads_recorded,
        trace_bytes,
        windows: None,
        interrupted,
        elapsed_s,
        warnings,
        notes,
    })
}

pub use crate::native_rdx::NativeSampler;

/// Runs the program natively with mgbench's library preloaded (`LD_PRELOAD`), which samples
/// with the PMU (or the page-fault event), arms perf breakpoints on the sampled words and
/// writes the same events file as [`rdx_live`]. Only the main thread is sampled.
pub fn rdx_native(cfg: &LiveRdxConfig, sampler: NativeSampler) -> Result<LiveRdxRun, CaptureError> {
    let program = resolve(&cfg.program)?;
    let library = find_plugin()?;
    let events = absolute(&cfg.events);
    // The events path goes last: it may hold commas.
    let setting = format!(
        "period={},adaptive={},watch={},seed={},jitter={},sampler={},events={}",
        cfg.period,
        u8::from(cfg.adaptive),
        cfg.watchpoints,
        cfg.seed,
        cfg.jitter,
        sampler.name(),
        events.display()
    );
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(old) if !old.is_empty() => {
            let mut v = library.clone().into_os_string();
            v.push(":");
            v.push(old);
            v
        }
        _ => library.clone().into_os_string(),
    };
    let mut command = Command::new(&program.run);
    std::os::unix::process::CommandExt::arg0(&mut command, &program.argv0);
    command
        .args(&cfg.args)
        .env("LD_PRELOAD", preload)
        .env(crate::native_rdx::ENV, setting);
    // Before the program starts, as its environment depends on it: about 0.1 ms, plus up to
    // 20 ms where the breakpoint's perf_event_open waits for an RCU grace period.
    let strings = string_ops_under_watchpoint();
    let kept_off = strings.and_then(|s| keep_off_rep_strings(&mut command, s));
    die_with_parent(&mut command);
    reserve_descriptors(&mut command);
    let mut run = run_live(command, &program.path, &events, &program.path, &cfg.args)?;
    run.notes.extend(kept_off);
    run.string_cost = strings;
    let text = std::fs::read_to_string(&events).unwrap_or_default();
    if text.is_empty() {
        return Err(CaptureError::NativeRdxNotStarted {
            program: program.path,
            why: format!(
                "the library ({}) was not loaded: a statically linked or setuid program ignores LD_PRELOAD; measure it under QEMU (--backend qemu)",
                library.display()
            ),
        });
    }
    if let Some(e) = text.lines().find_map(|l| l.strip_prefix("N error: ")) {
        if !text.lines().any(|l| l.starts_with("S ")) {
            return Err(CaptureError::NativeRdxNotStarted {
                program: program.path,
                why: e.to_string(),
            });
        }
    }
    Ok(run)
}

/// How much slower string instructions run while a debug register is armed, from
/// [`string_ops_under_watchpoint`]'s `(plain, armed)` nanoseconds of a 4 KiB `rep stosb`, for
/// the notes; None where they are not slowed.
fn slowed_strings((plain, armed): (f64, f64)) -> Option<String> {
    (armed >= crate::native_rdx::SLOWED_STRINGS * plain).then(|| {
        format!(
            "{:.0}x slower while a debug register is armed on this CPU (rep stosb of 4 KiB: {plain:.0} ns, armed {armed:.0} ns)",
            armed / plain.max(1.0)
        )
    })
}

/// Where an armed watchpoint slows string instructions on this CPU (measured on this thread
/// before the program starts), tells the natively measured program's glibc to copy and
/// clear without them (`GLIBC_TUNABLES`, the user's own settings kept): the sampled uses
/// keep registers armed nearly the whole run, and a memcpy of 64 KiB went from 96 to 4 GB/s
/// with one armed on this AMD EPYC. Returns the note that says what was done.
fn keep_off_rep_strings(command: &mut Command, cost: (f64, f64)) -> Option<String> {
    use crate::native_rdx::without_rep_strings;
    let slowed = format!("string instructions run {}", slowed_strings(cost)?);
    let old = std::env::var_os("GLIBC_TUNABLES");
    let old = match &old {
        Some(v) => Some(v.to_str()?),
        None => None,
    };
    let (value, added) = without_rep_strings(old);
    if added.is_empty() {
        return Some(format!(
            "{slowed}; GLIBC_TUNABLES already sets glibc's rep movsb and stosb thresholds, kept as given"
        ));
    }
    command.env("GLIBC_TUNABLES", value);
    Some(format!(
        "{slowed}: the program's glibc was told to copy and clear without them ({} raised out of reach in GLIBC_TUNABLES; set them yourself to choose otherwise); the kernel's page clearing and copies still pay it",
        added.join(", ")
    ))
}

/// The kernel clears each page a program touches first with a string instruction (`rep
/// stosb` of 4 KiB), which `cost` (plain, armed) says an armed register slows: where the
/// `pages` a run of `elapsed_s` touched first could have cost more than 5% of it so, a note
/// with the figure (an upper bound: registers are armed most of a run, not all of it).
/// GUPS's 128 MiB table, 32768 pages, cost about 33 ms of a 0.33 s live run here.
fn page_clearing(pages: u64, elapsed_s: f64, cost: (f64, f64)) -> Option<String> {
    let extra_s = pages as f64 * (cost.1 - cost.0).max(0.0) * 1e-9;
    if extra_s < 0.05 * elapsed_s {
        return None;
    }
    Some(format!(
        "the run touched {pages} new pages ({:.0} MiB); the kernel clears each with a string instruction, {}: up to {extra_s:.2} s of its {elapsed_s:.2} s",
        pages as f64 * 4096.0 / 1048576.0,
        slowed_strings(cost)?,
    ))
}

impl LiveRdxRun {
    /// The note on the kernel's clearing of the pages the program touched first, where an
    /// armed register slows it (see [`page_clearing`]): `ahead` pages (the report's
    /// `prefaulted_pages`) were touched first by the plugin's helper, without registers.
    pub fn page_clearing_note(&self, ahead: u64) -> Option<String> {
        page_clearing(
            self.minor_faults.saturating_sub(ahead),
            self.elapsed_s,
            self.string_cost?,
        )
    }
}

/// Runs a live RDX `command` (started as `what`) to its end with `events` emptied first,
/// signals left to the program (`SignalGuard`), and says how it went.
fn run_live(
    mut command: Command,
    what: &Path,
    events: &Path,
    program: &Path,
    args: &[std::ffi::OsString],
) -> Result<LiveRdxRun, CaptureError> {
    std::fs::write(events, b"").map_err(|cause| CaptureError::Output {
        path: events.to_path_buf(),
        cause,
    })?;
    let faults = children_minor_faults();
    let start = Instant::now();
    let started = std::time::SystemTime::now();
    let guard = SignalGuard::install();
    let (pid, status) = command
        .spawn()
        .and_then(|mut c| Ok((c.id(), c.wait()?)))
        .map_err(|cause| CaptureError::Spawn {
            what: what.display().to_string(),
            cause,
        })?;
    let interrupted = guard.caught();
    drop(guard);
    let elapsed_s = start.elapsed().as_secs_f64();
    // A JIT runtime's names for the code it wrote go to the events too (`J` lines, read by
    // `reuse_live`), so that the instruction pairs name it.
    let mut notes = Vec::new();
    if let Some((map, syms)) = perf_map(pid, Some(started)) {
        let mut lines = String::new();
        for j in &syms {
            lines.push_str(&format!("J {:x} {:x} {}\n", j.start, j.size, j.name));
        }
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .open(events)
            .and_then(|mut f| std::io::Write::write_all(&mut f, lines.as_bytes()));
        if appended.is_ok() {
            notes.push(perf_map_note(&map, syms.len()));
        }
    }
    Ok(LiveRdxRun {
        command: command_line(program, args).join(" "),
        exit: program_exit(status),
        interrupted,
        elapsed_s,
        minor_faults: children_minor_faults().saturating_sub(faults),
        string_cost: None,
        notes,
    })
}

/// A Go program's runtime preempts its threads with SIGURG, many times a second. Under QEMU
/// 7.2 a guest signal handler can run with every host signal blocked, SIGSEGV included, and
/// inline counting ends a thread's skip by a write fault on its counter page: blocked, the
/// fault kills the run (`restic backup` died of SIGSEGV in every sampled capture and live
/// run here, never under bare QEMU nor counting in callbacks). So a Go program runs with
/// `GODEBUG=asyncpreemptoff=1` added (goroutines are then preempted at function calls, not
/// by signals), unless GODEBUG already sets asyncpreemptoff. Returns the GODEBUG value to set
/// (None: leave it) and the note that says what was done; None for other programs.
fn go_preemption(program: &crate::symbols::ElfImage) -> Option<(Option<String>, String)> {
    if !program.go {
        return None;
    }
    let old = std::env::var("GODEBUG").unwrap_or_default();
    if old
        .split(',')
        .any(|kv| kv.trim().starts_with("asyncpreemptoff="))
    {
        return Some((None, format!(
            "Go program: GODEBUG={old} kept as given (with asynchronous preemption on, QEMU 7.2 can kill a run that counts inline: --sample-period below 262144 counts in callbacks)"
        )));
    }
    let value = if old.is_empty() {
        "asyncpreemptoff=1".to_string()
    } else {
        format!("{old},asyncpreemptoff=1")
    };
    let note = format!(
        "Go program: run with GODEBUG={value}, as its runtime's preemption signals (SIGURG) can come while QEMU 7.2 blocks the SIGSEGV that inline counting needs; goroutines are still preempted at function calls (GODEBUG=asyncpreemptoff=0 keeps the signals, with --sample-period below 262144, which counts in callbacks)"
    );
    Some((Some(value), note))
}

/// `qemu-x86_64 -plugin ARG PROGRAM ARGS`, dying with mgbench.
fn qemu_command(
    qemu: &Path,
    plugin_arg: &str,
    program: &Program,
    args: &[std::ffi::OsString],
) -> Command {
    let mut command = Command::new(qemu);
    command
        .arg("-plugin")
        .arg(plugin_arg)
        .arg("-0")
        .arg(&program.argv0)
        .arg(&program.run)
        .args(args);
    die_with_parent(&mut command);
    reserve_descriptors(&mut command);
    command
}

/// How QEMU (so the program) ended.
fn program_exit(status: std::process::ExitStatus) -> ProgramExit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ProgramExit::Code(c),
        (None, Some(s)) => ProgramExit::Signal(s),
        _ => ProgramExit::Code(-1),
    }
}

/// The plugin's exit report.
#[derive(Debug, Clone, serde::Deserialize)]
struct PluginStatus {
    recorded: u64,
    skipped: u64,
    threads: u64,
    /// The threads with accesses in the trace (in sampled mode a short-lived one may have run
    /// in no window); absent from older plugins.
    #[serde(default)]
    threads_recorded: Option<u64>,
    /// Child processes the program started (their accesses are not in the trace).
    #[serde(default)]
    children: u64,
    #[serde(default)]
    errors: Vec<String>,
    /// `--roi` names found in libraries the program opened with dlopen (a note each) ...
    #[serde(default)]
    roi_found: Vec<String>,
    /// ... and those no such library had.
    #[serde(default)]
    roi_unfound: Vec<String>,
}

fn read_status(path: &Path) -> Option<PluginStatus> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Copies the plugin's running totals (two little-endian u64 at the start of the progress
/// file: accesses recorded, trace bytes) into a [`Progress`] every 100 ms until dropped.
struct ProgressWatcher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressWatcher {
    fn start(path: PathBuf, progress: crate::progress::Progress) -> ProgressWatcher {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            progress.start("capturing", 0);
            while !flag.load(Ordering::Relaxed) {
                if let Ok(b) = std::fs::read(&path) {
                    if let (Some(r), Some(t)) = (b.get(0..8), b.get(8..16)) {
                        let word = |x: &[u8]| u64::from_le_bytes(x.try_into().unwrap_or([0; 8]));
                        progress.set(word(r));
                        progress.set_items(word(t));
                    }
                }
                // Woken early when dropped: a sleep here kept every capture waiting up to
                // 100 ms after the program ended.
                std::thread::park_timeout(std::time::Duration::from_millis(100));
            }
        });
        ProgressWatcher {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ProgressWatcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// How live RDX samples (see the plugin's `rdx` module and `mgbench reuse -- PROGRAM`).
#[derive(Debug, Clone)]
pub struct LiveRdxConfig {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
    /// File the plugin writes its samples and traps to.
    pub events: PathBuf,
    /// The mean gap between samples; with `adaptive`, the first one (the plugin doubles it
    /// as samples accumulate and lengthens it where samples are costly).
    pub period: u64,
    pub adaptive: bool,
    pub jitter: f64,
    pub watchpoints: usize,
    pub seed: u64,
    /// Large new anonymous memory is touched first by a helper thread of the plugin, where
    /// the kernel clears it without the vCPU threads' armed debug registers (see the
    /// plugin's `prefault`).
    pub prefault: bool,
}

/// How a live RDX run ended.
#[derive(Debug, Clone)]
pub struct LiveRdxRun {
    pub command: String,
    pub exit: ProgramExit,
    pub interrupted: Option<i32>,
    pub elapsed_s: f64,
    /// Minor page faults of the run (its first touches of pages, mostly).
    pub minor_faults: u64,
    /// A 4 KiB `rep stosb` on this CPU, ns without and with a watchpoint armed, where
    /// measured (for [`LiveRdxRun::page_clearing_note`]).
    pub string_cost: Option<(f64, f64)>,
    /// What the report should say about how the program was run.
    pub notes: Vec<String>,
}

/// Runs the program under QEMU with the plugin measuring reuse distances live (RDX): an
/// inline access counter, one sample every `period` accesses, hardware watchpoints on the
/// sampled words. No trace is written; the events file is read by
/// `mgbench_synth::rdx::reuse_live`.
pub fn rdx_live(cfg: &LiveRdxConfig) -> Result<LiveRdxRun, CaptureError> {
    let program = resolve(&cfg.program)?;
    let qemu = find_qemu()?;
    let plugin = find_plugin()?;
    let events = absolute(&cfg.events);
    if events.to_string_lossy().contains(',') {
        return Err(CaptureError::CommaInPath(events));
    }
    let arg = format!(
        "{},out={},rdx={},rdx_adaptive={},rdx_watch={},rdx_seed={},rdx_jitter={},rdx_prefault={}",
        plugin.display(),
        events.display(),
        cfg.period,
        u8::from(cfg.adaptive),
        cfg.watchpoints,
        cfg.seed,
        cfg.jitter,
        u8::from(cfg.prefault)
    );
    let mut command = qemu_command(&qemu, &arg, &program, &cfg.args);
    let go = go_preemption(&program.image);
    if let Some((Some(value), _)) = &go {
        command.env("GODEBUG", value);
    }
    // Measured on a thread of its own while the program runs: its breakpoint's first
    // perf_event_open may wait for an RCU grace period (0-20 ms here), which the program
    // should not wait for.
    let strings = std::thread::spawn(string_ops_under_watchpoint);
    let mut run = run_live(command, &qemu, &events, &program.path, &cfg.args)?;
    let empty = std::fs::metadata(&events).map_or(true, |m| m.len() == 0);
    if empty && matches!(run.exit, ProgramExit::Code(_)) {
        return Err(CaptureError::PluginNotLoaded { plugin });
    }
    run.string_cost = strings.join().ok().flatten();
    run.notes.extend(go.map(|(_, note)| note));
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(minor_faults: u64, elapsed_s: f64, string_cost: (f64, f64)) -> LiveRdxRun {
        LiveRdxRun {
            command: "gups".into(),
            exit: ProgramExit::Code(0),
            interrupted: None,
            elapsed_s,
            minor_faults,
            string_cost: Some(string_cost),
            notes: Vec::new(),
        }
    }

    /// The note on the kernel's page clearing: where an armed register slows string
    /// instructions and the run's first touches could have cost more than 5% of it.
    #[test]
    fn page_clearing_is_noted_where_it_could_weigh() {
        // GUPS's table under live RDX here: 32768 pages, 0.33 s.
        let slowed = (29.0, 974.0);
        let note = run(32768, 0.33, slowed)
            .page_clearing_note(0)
            .expect("a note");
        assert!(
            note.contains("32768 new pages (128 MiB)")
                && note.contains("34x slower")
                && note.contains("up to 0.03 s of its 0.33 s"),
            "{note}"
        );
        // The same pages in a long run, or a CPU that keeps its fast strings: nothing.
        assert_eq!(run(32768, 10.0, slowed).page_clearing_note(0), None);
        assert_eq!(run(32768, 0.33, (29.0, 31.0)).page_clearing_note(0), None);
        // Pages the plugin's helper touched first are not the program's to pay for.
        let half = run(32768, 0.2, slowed).page_clearing_note(16384);
        assert!(half.is_some_and(|n| n.contains("16384 new pages (64 MiB)")));
        assert_eq!(run(32768, 0.33, slowed).page_clearing_note(32768), None);
    }
}
