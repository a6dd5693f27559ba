//! mgbench-synth: mine a memory trace for the gather/scatter patterns that matter and write
//! them as Spatter JSON (GS Patterns, MEMSYS'24, with every threshold exposed and delta/count
//! recovered).
//!
//! Two streaming passes over the trace: pass 1 runs GS Patterns' windows over every access
//! ([`window`]); the candidates then go through the paper's Table 1 filters (regular-only,
//! unsymbolized, too few instances, few unique distances and few far jumps where pass 1 could
//! count them, then the top N of those left); pass 2 records the survivors' element indices
//! ([`record`]), applies the distance filter where pass 1 could not, and recovers delta/count
//! when a stream repeats with a constant shift.
//!
//! ```no_run
//! use mgbench_synth::{synthesize, SynthConfig};
//!
//! let report = synthesize(std::path::Path::new("spmv.mgbt"), &SynthConfig::default()).unwrap();
//! for p in &report.patterns {
//!     println!("{} from {:?}: {} indices x {}", p.name, p.source.function, p.pattern.len(), p.count);
//! }
//! ```

pub mod affinity;
pub mod analyze;
pub mod apex;
pub mod config;
use mgbench_capture::fasthash;
pub mod locality;
pub mod rdx;
pub mod record;
mod sys;
pub mod window;

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use mgbench_capture::progress::{CountingReader, Progress};
use mgbench_capture::symbols::{
    short_path, without_abi_tag, without_parameters, SourceLocation, Symbolizer, ANONYMOUS_CODE,
    JIT_HINT,
};
use mgbench_capture::trace::{
    AccessKind, Chunk, Damage, Frame, JitSymbol, Mapping, TraceMeta, TraceReader,
};
use serde::Serialize;

pub use config::{SynthConfig, SynthError};

/// Recorders pass 1 keeps at most (each holds up to `max_pattern` indices).
const SPECULATION_BUDGET: usize = 32;
use record::{Compression, Recorder};
use window::{IpStats, Windows};

/// Gather (loads) or scatter (stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PatternKind {
    Gather,
    Scatter,
}

impl PatternKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PatternKind::Gather => "gather",
            PatternKind::Scatter => "scatter",
        }
    }
}

/// Where a pattern came from, in the output's `source` key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    pub function: Option<String>,
    /// The function the compiler inlined into `function` there, whose source line this is
    /// (absent where nothing was inlined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inlined: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Instruction address, "0x401136".
    pub ip: String,
    /// Its file and its address there, "libgromacs.so.7+0x4a3cbf" (what `objdump -d` and
    /// `addr2line -e` take, the same from run to run; absent where no file holds it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
    /// Where no symbol names its function: that function as the file's unwind table bounds
    /// it, by its start, "sub_220f80" (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unnamed_function: Option<String>,
}

/// Numbers behind the filters, in the output's `synth` key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthStats {
    pub flagged_windows: u64,
    pub unique_distances: usize,
    pub oob_fraction: f64,
}

/// One pattern: a Spatter config object plus mgbench's extra keys (ignored by replay and by
/// Spatter).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthPattern {
    pub name: String,
    pub kernel: PatternKind,
    pub pattern: Vec<u64>,
    /// Shift of the base per repetition, in elements; negative when the stream walks down.
    pub delta: i64,
    pub count: u64,
    pub source: Source,
    /// Dynamic executions of the instruction (its accesses of this kind).
    pub instances: u64,
    /// Bytes per access; indices are in these units.
    pub element_size: u8,
    /// How the index stream became (pattern, delta, count).
    pub compression: String,
    pub synth: SynthStats,
}

/// Why a candidate was kept or dropped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Kept,
    /// Filter 1: every window saw only distances -1, 0, +1.
    Regular,
    /// Filter 2: no symbol for the instruction.
    Unsymbolized,
    /// Filter 3: not in the top N by flagged windows.
    NotInTop {
        rank: usize,
        top: usize,
    },
    /// Filter 4: too few dynamic instances.
    FewInstances {
        instances: u64,
        min: u64,
    },
    /// Every access in its own thread's stack (pushes, pops, locals): not a data
    /// structure's gather or scatter (`--keep-stack` keeps them).
    Stack,
    /// In the dynamic loader's code (relocations and symbol lookups at start-up, the same
    /// for any program linked alike; `--keep-loader` keeps them).
    Loader,
    /// Filter 5: few unique distances and few far jumps.
    FewDistances {
        unique_distances: usize,
        min: usize,
        oob_fraction: f64,
    },
}

/// A (instruction, kind) pair considered by the filters.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub ip: String,
    pub kind: PatternKind,
    pub flagged_windows: u64,
    pub instances: u64,
    #[serde(flatten)]
    pub source: SourceLocation,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Everything synthesis found.
#[derive(Debug, Clone, Serialize)]
pub struct SynthReport {
    pub trace: String,
    pub program: Option<String>,
    pub accesses: u64,
    pub patterns: Vec<SynthPattern>,
    /// Every flagged candidate, and what happened to it.
    pub candidates: Vec<Candidate>,
    /// Instructions whose windows were all regular (filter 1), by kind.
    pub regular: u64,
    /// Candidates dropped for having no symbol that the other filters keep and that rank
    /// among the top N (a stripped program's own code).
    pub unnamed_in_top: usize,
    pub notes: Vec<String>,
}

impl SynthReport {
    /// How many candidates each filter removed, for "nothing survived" messages.
    pub fn filter_summary(&self) -> String {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for c in &self.candidates {
            let k = match c.verdict {
                Verdict::Kept => continue,
                Verdict::Regular => "regular (-1/0/+1 only)",
                Verdict::Unsymbolized => "no symbol (--keep-unsymbolized keeps them)",
                Verdict::Stack => "in the stack only (--keep-stack keeps them)",
                Verdict::Loader => "in the dynamic loader (--keep-loader keeps them)",
                Verdict::NotInTop { .. } => "not in the top N (--top)",
                Verdict::FewInstances { .. } => "too few instances (--min-instances)",
                Verdict::FewDistances { .. } => {
                    "few unique distances and few far jumps (--min-unique-distances, --oob-distance)"
                }
            };
            *counts.entry(k).or_default() += 1;
        }
        let mut parts = vec![format!("{} regular (-1/0/+1 only)", self.regular)];
        let mut rest: Vec<(&str, u64)> = counts.into_iter().collect();
        rest.sort();
        parts.extend(rest.into_iter().map(|(k, n)| format!("{n} {k}")));
        parts.join(", ")
    }
}

/// A trace file being read, counting its bytes into a [`Progress`].
pub(crate) type TraceFile = TraceReader<BufReader<CountingReader<File>>>;

/// Opens the trace at `path`; `progress` starts phase `what` with the file's size as total.
pub(crate) fn open(path: &Path, progress: &Progress, what: &str) -> Result<TraceFile, SynthError> {
    let p = path.display().to_string();
    let f = File::open(path).map_err(|cause| SynthError::Open {
        path: p.clone(),
        cause,
    })?;
    progress.start(what, f.metadata().map(|m| m.len()).unwrap_or(0));
    TraceReader::open(BufReader::with_capacity(
        1 << 20,
        CountingReader::new(f, progress.clone()),
    ))
    .map_err(|cause| SynthError::Read { path: p, cause })
}

/// Decodes every frame of `trace` (opened by [`open`] from `path`) with `threads` decoders
/// and calls `f` for each in order; a read error names the file. Returns where the trace is
/// damaged, if it is.
pub(crate) fn read_frames(
    trace: TraceFile,
    path: &Path,
    threads: usize,
    f: impl FnMut(&Frame),
) -> Result<Option<Damage>, SynthError> {
    mgbench_capture::trace::parallel::for_each_frame(trace, threads, f).map_err(|cause| {
        SynthError::Read {
            path: path.display().to_string(),
            cause,
        }
    })
}

/// What a pass learns besides the accesses: the header, the mappings, the names of
/// JIT-compiled code, and where the trace is damaged, if it is.
type PassInfo = (TraceMeta, Vec<Mapping>, Vec<JitSymbol>, Option<Damage>);

/// Calls `f` for every chunk of the selected thread, decoding with `cfg.threads` threads.
fn for_each_chunk(
    path: &Path,
    cfg: &SynthConfig,
    what: &str,
    f: impl FnMut(&Chunk),
) -> Result<PassInfo, SynthError> {
    for_each_chunk_and_mapping(path, cfg, what, f, |_| {})
}

/// As [`for_each_chunk`], with each mappings frame given to `on_maps` where it comes (before
/// the chunks whose accesses it covers).
fn for_each_chunk_and_mapping(
    path: &Path,
    cfg: &SynthConfig,
    what: &str,
    mut f: impl FnMut(&Chunk),
    mut on_maps: impl FnMut(&[Mapping]),
) -> Result<PassInfo, SynthError> {
    let r = open(path, &cfg.progress, what)?;
    let meta = r.meta().clone();
    let (mut maps, mut jit) = (Vec::new(), Vec::new());
    let damage = read_frames(r, path, cfg.threads, |frame| match frame {
        Frame::Chunk(c) if cfg.thread.is_none_or(|t| t == c.thread) => f(c),
        Frame::Mappings(m) => {
            on_maps(m);
            maps.extend(m.iter().cloned());
        }
        Frame::JitSymbols(j) => jit.extend(j.iter().cloned()),
        _ => {}
    })?;
    Ok((meta, maps, jit, damage))
}

/// What every full read of a trace ends with: a damaged trace is an error unless damage is
/// allowed, and so is a read that found no accesses (saying why, when it can).
pub(crate) fn check_read(
    path: &str,
    damage: Option<&Damage>,
    allow_damaged: bool,
    accesses: u64,
    meta: &TraceMeta,
    thread: Option<u32>,
) -> Result<(), SynthError> {
    if let Some(d) = damage {
        if !allow_damaged {
            return Err(SynthError::Damaged {
                path: path.to_string(),
                offset: d.offset,
                reason: d.reason.clone(),
                recovered: accesses,
            });
        }
    }
    if accesses == 0 {
        let why = match (&meta.roi, thread) {
            (_, Some(t)) => format!(" for thread {t}"),
            (Some(roi), _) => format!(" (its ROI {} was never entered)", roi.functions.join(", ")),
            _ => String::new(),
        };
        return Err(SynthError::Empty {
            path: path.to_string(),
            why,
        });
    }
    Ok(())
}

/// Filter 5: fewer than `--min-unique-distances` distinct distances and fewer than half of
/// them far (`--oob-distance`) drops a candidate.
fn few_distances(unique: usize, oob_fraction: f64, cfg: &SynthConfig) -> Option<Verdict> {
    (unique < cfg.min_unique_distances && oob_fraction < 0.5).then_some(Verdict::FewDistances {
        unique_distances: unique,
        min: cfg.min_unique_distances,
        oob_fraction,
    })
}

fn describe_compression(c: &Compression, cap: usize) -> String {
    match c {
        Compression::Repeated {
            period,
            count,
            delta,
            dropped_tail,
        } => {
            let mut s = format!(
                "delta/count recovered: a base pattern of {period} indices repeated {count} times, shifted by {delta} each time"
            );
            if *dropped_tail > 0 {
                s.push_str(&format!(
                    "; the last {dropped_tail} indices (an incomplete repetition) are not represented"
                ));
            }
            s
        }
        Compression::Full => "the full index stream (it does not repeat)".into(),
        Compression::Truncated { kept, total } => format!(
            "truncated: the first {kept} of {total} indices (the stream does not repeat; --max-pattern {cap} caps patterns)"
        ),
    }
}

/// Where instruction `ip` (resolved as `source`) lies when nothing names it: "libfoo.so+0x1a08ef"
/// (its file and its address there, which `addr2line -e` and `objdump` take and which stay
/// the same from run to run), or its run-time address where no file holds it.
fn place_in_file(source: &SourceLocation, ip: u64) -> String {
    file_place(source).unwrap_or_else(|| format!("{ip:#x}"))
}

/// "libfoo.so+0x1a08ef", where a file holds the instruction.
fn file_place(source: &SourceLocation) -> Option<String> {
    let file = source.object.as_deref().map(short_path)?;
    Some(format!("{file}+{:#x}", source.link_addr?))
}

/// Runs both passes and the filters over the trace at `path`.
pub fn synthesize(path: &Path, cfg: &SynthConfig) -> Result<SynthReport, SynthError> {
    cfg.validate()?;
    let p = path.display().to_string();

    // Pass 1: windows over every access, recording likely candidates as it goes.
    // Filter 5 is decided in pass 1 when its threshold is small enough to track exactly.
    let prefilter = cfg.min_unique_distances <= window::MAX_PREFILTER_DISTANCES;
    let windows = Windows::new(cfg.window_rows, cfg.row_bytes)
        .with_speculation(
            cfg.max_pattern,
            cfg.oob_distance,
            SPECULATION_BUDGET.max(cfg.top * 2),
        )
        .with_distance_stats(
            if prefilter {
                cfg.min_unique_distances
            } else {
                0
            },
            cfg.oob_distance,
        );
    // The thread and sample window the accesses pushed last belong to.
    let mut at: Option<(u32, u64)> = None;
    let windows = std::cell::RefCell::new(windows);
    let stacks = std::cell::RefCell::new(window::Stacks::default());
    let (meta, mappings, jit, damage) = for_each_chunk_and_mapping(
        path,
        cfg,
        "mining (pass 1)",
        |c| {
            let mut windows = windows.borrow_mut();
            windows.set_stack(stacks.borrow_mut().of(c.thread, &c.accesses));
            for (s, accesses) in c.windows() {
                // An open sample goes on in the thread's next chunk under the same id, skipping
                // nothing; any other change is a boundary.
                if at != Some((c.thread, s.id)) || s.skipped_before > 0 {
                    windows.boundary();
                }
                at = Some((c.thread, s.id));
                for a in accesses {
                    windows.push(a);
                }
            }
        },
        // (QEMU's own `[stack]` is among them: the guest never touches it.)
        |maps| stacks.borrow_mut().add(maps),
    )?;
    let window::Pass1 {
        stats,
        accesses,
        mut spec,
        dists,
    } = windows.into_inner().finish();
    check_read(
        &p,
        damage.as_ref(),
        cfg.allow_damaged,
        accesses,
        &meta,
        cfg.thread,
    )?;

    // Filters 1-4 on pass-1 statistics.
    let mut sym = Symbolizer::new(mappings);
    sym.add_jit_symbols(&jit);
    let mut candidates: Vec<(Candidate, &IpStats)> = Vec::new();
    let mut regular = 0u64;
    for st in &stats {
        for (kind, flagged, instances, in_stack) in [
            (
                PatternKind::Gather,
                st.gather_windows,
                st.loads,
                st.stack_loads,
            ),
            (
                PatternKind::Scatter,
                st.scatter_windows,
                st.stores,
                st.stack_stores,
            ),
        ] {
            if instances == 0 {
                continue;
            }
            if flagged == 0 {
                regular += 1;
                continue;
            }
            let source = sym.resolve(st.ip);
            let verdict = if source.function.is_none() && !cfg.keep_unsymbolized {
                Verdict::Unsymbolized
            } else if in_stack == instances && !cfg.keep_stack {
                Verdict::Stack
            } else if !cfg.keep_loader
                && source
                    .object
                    .as_deref()
                    .is_some_and(mgbench_capture::symbols::is_dynamic_loader)
            {
                Verdict::Loader
            } else {
                Verdict::Kept
            };
            candidates.push((
                Candidate {
                    ip: format!("{:#x}", st.ip),
                    kind,
                    flagged_windows: flagged,
                    instances,
                    source,
                    verdict,
                },
                st,
            ));
        }
    }
    candidates.sort_by(|(a, sa), (b, sb)| {
        b.flagged_windows
            .cmp(&a.flagged_windows)
            .then(b.instances.cmp(&a.instances))
            .then(sa.ip.cmp(&sb.ip))
    });
    let ids: HashMap<u64, usize, fasthash::Build> =
        stats.iter().enumerate().map(|(i, st)| (st.ip, i)).collect();
    let mut rank = 0usize;
    // Candidates without a symbol that would have ranked in the top N, and the first of them.
    let mut unnamed_in_top: (usize, Option<String>) = (0, None);
    // Whether one of them runs in anonymous memory (a JIT compiler's code).
    let mut unnamed_jit = false;
    for (c, st) in candidates.iter_mut() {
        if !matches!(c.verdict, Verdict::Kept | Verdict::Unsymbolized) {
            continue;
        }
        // Filters 4 and 5 (where pass 1 decided 5) come before the rank, so that the top N
        // are N that the filters keep: ranked first, NumPy's `x[idx]` gather came 12th behind
        // nine that filter 5 then dropped, and a script's profile replayed one pattern.
        let dropped = if c.instances < cfg.min_instances {
            Some(Verdict::FewInstances {
                instances: c.instances,
                min: cfg.min_instances,
            })
        } else if prefilter {
            let d = &dists[ids[&st.ip]][usize::from(c.kind == PatternKind::Scatter)];
            few_distances(d.unique(), d.far_fraction(c.instances), cfg)
        } else {
            None
        };
        if c.verdict == Verdict::Unsymbolized {
            if dropped.is_none() && rank < cfg.top {
                unnamed_in_top.0 += 1;
                unnamed_jit |= c.source.object.as_deref() == Some(ANONYMOUS_CODE);
                unnamed_in_top.1.get_or_insert_with(|| {
                    format!(
                        "{} ({} {}, {} flagged windows, {} instances)",
                        place_in_file(&c.source, st.ip),
                        c.ip,
                        c.kind.as_str(),
                        c.flagged_windows,
                        c.instances
                    )
                });
            }
            continue;
        }
        if let Some(v) = dropped {
            c.verdict = v;
            continue;
        }
        rank += 1;
        if rank > cfg.top {
            c.verdict = Verdict::NotInTop { rank, top: cfg.top };
        }
    }

    // Pass 2, only for survivors that pass 1 did not record from their first access.
    let mut recorders: HashMap<(u64, bool), (usize, Recorder, u64), fasthash::Build> =
        HashMap::default();
    let mut need_pass2 = false;
    for (i, (c, st)) in candidates.iter_mut().enumerate() {
        if c.verdict != Verdict::Kept {
            continue;
        }
        let kind = usize::from(c.kind == PatternKind::Scatter);
        let id = ids[&st.ip];
        let slot = &mut spec[id][kind];
        let rec = match std::mem::replace(slot, window::Speculation::Dropped) {
            window::Speculation::Recording(r) => *r,
            _ => {
                need_pass2 = true;
                Recorder::new(cfg.max_pattern, cfg.oob_distance)
            }
        };
        recorders.insert((st.ip, kind == 1), (i, rec, u64::from(st.element_size)));
    }
    drop(spec);
    if need_pass2 {
        let fresh: Vec<(u64, bool)> = recorders
            .iter()
            .filter(|(_, (_, r, _))| r.instances() == 0)
            .map(|(k, _)| *k)
            .collect();
        let mut pass2: HashMap<(u64, bool), Recorder, fasthash::Build> = fresh
            .iter()
            .map(|k| (*k, Recorder::new(cfg.max_pattern, cfg.oob_distance)))
            .collect();
        let sizes: HashMap<u64, u64, fasthash::Build> = stats
            .iter()
            .map(|st| (st.ip, u64::from(st.element_size)))
            .collect();
        for_each_chunk(path, cfg, "recording patterns (pass 2)", |c| {
            for a in &c.accesses {
                if let Some(r) = pass2.get_mut(&(a.ip, a.kind == AccessKind::Store)) {
                    r.push(a.addr / sizes[&a.ip]);
                }
            }
        })?;
        for (k, r) in pass2 {
            if let Some(e) = recorders.get_mut(&k) {
                e.1 = r;
            }
        }
    }

    // Filter 5 and the patterns.
    let mut patterns = Vec::new();
    let mut notes = Vec::new();
    let unnamed_count = unnamed_in_top.0;
    if let (n @ 1.., Some(first)) = unnamed_in_top {
        notes.push(if rank == 0 {
            // Nothing named at all: the program's own code has no symbols (a stripped file
            // without a debug file), so the filter left nothing but the regular and the loader.
            format!(
                "{n} candidate(s) were dropped for having no symbol and no named one is left \
                 (a stripped program without its debug file names none of its own code), the \
                 first {first}; --keep-unsymbolized keeps them, named by their file and address \
                 there"
            )
        } else {
            format!(
                "{n} candidate(s) without a symbol come before the top {} named ones by \
                 flagged windows, the first {first}; --keep-unsymbolized keeps them, named by \
                 their file and address there",
                cfg.top
            )
        });
        if unnamed_jit {
            notes.push(format!("candidates without a symbol {JIT_HINT}"));
        }
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut order: Vec<(usize, Recorder, u64)> = recorders.into_values().collect();
    order.sort_by_key(|(i, _, _)| *i);
    for (i, rec, size) in order {
        let (c, st) = &mut candidates[i];
        let (unique, oob) = (rec.unique_distances(), rec.oob_fraction());
        if let Some(v) = few_distances(unique, oob, cfg) {
            c.verdict = v;
            continue;
        }
        let r = rec.finish();
        // Named after the function whose line it is: the inlined one, where it was inlined.
        let named = c.source.inlined.as_deref().or(c.source.function.as_deref());
        // C++ names without return type and parameters: `k::gather<double>`.
        let base = match (named.map(without_parameters), c.source.line) {
            (Some(f), Some(l)) => format!("{f}:{l}-{}", c.kind.as_str()),
            (Some(f), None) => format!("{f}-{}", c.kind.as_str()),
            // No name: where it is in its file, the same from run to run (a Python module
            // without its ABI tag: `_multiarray_umath.so+0x19c8ef`; `source.place` has the
            // file's whole name).
            _ => format!(
                "{}-{}",
                without_abi_tag(&place_in_file(&c.source, st.ip)),
                c.kind.as_str()
            ),
        };
        let n = names.entry(base.clone()).or_insert(0);
        *n += 1;
        let name = if *n == 1 { base } else { format!("{base}-{n}") };
        if let Compression::Truncated { kept, total } = r.compression {
            notes.push(format!(
                "{name}: the pattern was truncated to {kept} of {total} indices (raise --max-pattern to keep more)"
            ));
        }
        patterns.push(SynthPattern {
            name,
            kernel: c.kind,
            pattern: r.pattern,
            delta: r.delta,
            count: r.count,
            source: Source {
                function: c.source.function.clone(),
                inlined: c.source.inlined.clone(),
                file: c.source.file.clone(),
                line: c.source.line,
                ip: c.ip.clone(),
                place: file_place(&c.source),
                unnamed_function: c.source.unnamed_function(),
            },
            instances: r.instances,
            element_size: size as u8,
            compression: describe_compression(&r.compression, cfg.max_pattern),
            synth: SynthStats {
                flagged_windows: c.flagged_windows,
                unique_distances: unique,
                oob_fraction: oob,
            },
        });
    }
    if damage.is_some() {
        notes.push("the trace is damaged: only the accesses before the damage were mined".into());
    }
    Ok(SynthReport {
        trace: p,
        program: meta.command.first().cloned(),
        accesses,
        patterns,
        candidates: candidates.into_iter().map(|(c, _)| c).collect(),
        regular,
        unnamed_in_top: unnamed_count,
        notes,
    })
}

/// The Spatter JSON text of the patterns (an array, one object per line).
pub fn to_spatter_json(patterns: &[SynthPattern]) -> Result<String, serde_json::Error> {
    pattern_file(patterns, None)
}

/// The pattern file: the mined patterns, then the Apex-MAP proxy entry when there is one.
pub fn pattern_file(
    patterns: &[SynthPattern],
    apex: Option<&serde_json::Value>,
) -> Result<String, serde_json::Error> {
    let mut lines: Vec<String> = patterns
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    if let Some(a) = apex {
        lines.push(serde_json::to_string(a)?);
    }
    Ok(format!("[\n  {}\n]\n", lines.join(",\n  ")))
}

/// The `apex` config that stands in for a program: kernel "apex" with the fitted `L`, `K`, `M`
/// (replay runs it as is), and under `"locality"` the scores it was fitted to and the residual.
pub fn apex_entry(
    stem: &str,
    report: &analyze::LocalityReport,
    fit: &apex::ApexFit,
) -> serde_json::Value {
    let l = &report.program_locality;
    serde_json::json!({
        "name": format!("{stem}-apex"),
        "kernel": "apex",
        "L": fit.l,
        "K": fit.k,
        "M": fit.m,
        "locality": {
            "trace": report.trace,
            "spatial_score": l.spatial_score,
            "temporal_score": l.temporal_score,
            "fit_spatial_score": fit.spatial,
            "fit_temporal_score": fit.temporal,
            "residual": fit.residual,
            "method": fit.method,
        }
    })
}
