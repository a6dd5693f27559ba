//! `mgbench analyze`: the locality picture of a trace, for the program and per function, and
//! its Apex-MAP proxy.

use std::collections::HashMap;
use std::path::Path;

use mgbench_capture::symbols::Symbolizer;
use mgbench_capture::trace::{Frame, Mapping, Mode};
use serde::{Deserialize, Serialize};

use crate::apex::{self, ApexFit, ApexGrid};
use crate::fasthash;
use crate::locality::{
    Analyzer, Footprint, ReuseCurve, ReuseMethod, FOOTPRINT_WINDOW, SHARDS_RELIABLE,
};
use crate::SynthError;

/// What to analyse and how.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeConfig {
    pub method: ReuseMethod,
    pub by_function: bool,
    pub thread: Option<u32>,
    pub allow_damaged: bool,
    /// Decoding threads (and Apex grid threads).
    pub threads: usize,
    /// Fit an Apex-MAP proxy (scores a grid of synthetic streams: about a second).
    pub apex: bool,
    /// Apex-MAP memory size in words.
    pub apex_m: u64,
    /// Advanced as the trace is read (bytes of the file), for a progress display.
    pub progress: mgbench_capture::progress::Progress,
}

impl Default for AnalyzeConfig {
    fn default() -> Self {
        AnalyzeConfig {
            method: ReuseMethod::Exact,
            by_function: false,
            thread: None,
            allow_damaged: false,
            threads: 1,
            apex: true,
            apex_m: apex::DEFAULT_M,
            progress: Default::default(),
        }
    }
}

/// Locality of one stream of references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Locality {
    /// References after merging read-modify-write pairs.
    pub references: u64,
    pub spatial_score: f64,
    pub temporal_score: f64,
    /// Strides 0..=8 words, then longer.
    pub stride_histogram: [u64; 10],
    /// Reuse CDF in 8-byte words.
    pub reuse_histogram: ReuseCurve,
    /// Reuse CDF in 64-byte lines.
    pub reuse_histogram_lines: Option<ReuseCurve>,
    pub footprint: Footprint,
    pub apex: Option<ApexFit>,
}

/// One function's locality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionLocality {
    pub function: String,
    #[serde(flatten)]
    pub locality: Locality,
}

/// The report `mgbench analyze` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalityReport {
    pub trace: String,
    pub program: Option<String>,
    pub mode: String,
    /// Accesses read from the trace (before read-modify-write merging).
    pub accesses: u64,
    /// Executed / recorded accesses; 1 where it is unknown (`sample_ratio_unknown`).
    pub sample_ratio: f64,
    /// Why the sample ratio is unknown: "time-sampled" (a timed trace), or "the trace holds no
    /// skipped counts" (imported MemGaze text); absent where it is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ratio_unknown: Option<String>,
    pub reuse_method: ReuseMethod,
    #[serde(flatten)]
    pub program_locality: Locality,
    pub functions: Vec<FunctionLocality>,
    /// What the program's reuse engines held.
    pub memory: MemoryUse,
    pub notes: Vec<String>,
}

impl LocalityReport {
    /// The sample ratio in words: a timed (ptrace) trace's is unknown, whatever the number
    /// (1) that stands for it in `sample_ratio`.
    pub fn sample_ratio_text(&self) -> String {
        match (&self.sample_ratio_unknown, self.mode.as_str()) {
            (Some(why), _) => format!("unknown ({why})"),
            // Analyses written before the reason was recorded.
            (None, "timed") => format!("unknown ({})", mgbench_capture::trace::TIME_SAMPLED),
            (None, _) => format!("{:.1}", self.sample_ratio),
        }
    }
}

/// The memory the reuse-distance engines held for the whole program (functions come on top
/// with `--by function`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryUse {
    pub distinct_words: u64,
    pub distinct_lines: u64,
    pub reuse_engine_bytes: u64,
}

/// What `analyze` will need, said before it starts: for `accesses` accesses, the exact
/// engines keep about [`ReuseDistance::BYTES_PER_DISTINCT`] bytes per distinct word and per
/// distinct line in densely used memory. Returns (bytes per distinct word+line, the bound if
/// every access touched a new word and line).
pub fn memory_bound(accesses: u64, method: ReuseMethod) -> (u64, u64) {
    let per = 2 * crate::locality::reuse::ReuseDistance::BYTES_PER_DISTINCT;
    let scale = match method {
        ReuseMethod::Exact => 1.0,
        ReuseMethod::Shards { rate } => rate,
    };
    (per, (accesses as f64 * per as f64 * scale) as u64)
}

/// Functions tracked separately (the busiest) before the rest is pooled as "(other)".
const MAX_FUNCTIONS: usize = 32;

fn summarize(a: &mut Analyzer, rho: Option<f64>, grid: Option<&ApexGrid>) -> Locality {
    let s = a.scorer.spatial();
    let t = a.scorer.temporal();
    Locality {
        references: a.references,
        spatial_score: s,
        temporal_score: t,
        stride_histogram: a.scorer.stride_histogram(),
        reuse_histogram: a.scorer.word_curve(),
        reuse_histogram_lines: a.scorer.line_curve(),
        footprint: a.footprint(rho),
        apex: grid.and_then(|g| g.fit(s, t)),
    }
}

/// Each instruction's function, and the functions `--by function` tracks on their own: the
/// [`MAX_FUNCTIONS`] with the most accesses (a first pass over the trace counts them); the
/// rest are pooled as "(other)". Tracking the first ones met instead left a Python
/// interpreter's evaluation loop in "(other)" behind start-up code.
struct FunctionNames {
    of_ip: HashMap<u64, String, fasthash::Build>,
    tracked: Vec<String>,
}

fn busiest_functions(path: &Path, cfg: &AnalyzeConfig) -> Result<FunctionNames, SynthError> {
    let reader = crate::open(path, &cfg.progress, "counting accesses per function")?;
    let mut per_ip: HashMap<u64, u64, fasthash::Build> = HashMap::default();
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut jit = Vec::new();
    // Damage is reported by the analysis pass itself.
    let _ = crate::read_frames(reader, path, cfg.threads, |frame| match frame {
        Frame::Mappings(m) => mappings.extend(m.iter().cloned()),
        Frame::JitSymbols(j) => jit.extend(j.iter().cloned()),
        Frame::Chunk(c) if cfg.thread.is_none_or(|t| t == c.thread) => {
            for a in &c.accesses {
                *per_ip.entry(a.ip).or_default() += 1;
            }
        }
        _ => {}
    })?;
    let mut sym = Symbolizer::new(mappings);
    sym.add_jit_symbols(&jit);
    let mut of_ip: HashMap<u64, String, fasthash::Build> = HashMap::default();
    let mut per_function: HashMap<String, u64> = HashMap::new();
    for (ip, n) in per_ip {
        let name = sym.resolve(ip).function_or_object();
        *per_function.entry(name.clone()).or_default() += n;
        of_ip.insert(ip, name);
    }
    let mut ranked: Vec<(String, u64)> = per_function.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(MAX_FUNCTIONS);
    Ok(FunctionNames {
        of_ip,
        tracked: ranked.into_iter().map(|(name, _)| name).collect(),
    })
}

/// Analyses the trace at `path`.
pub fn analyze(path: &Path, cfg: &AnalyzeConfig) -> Result<LocalityReport, SynthError> {
    let p = path.display().to_string();
    let names = if cfg.by_function {
        Some(busiest_functions(path, cfg)?)
    } else {
        None
    };
    let reader = crate::open(path, &cfg.progress, "analysing")?;
    let meta = reader.meta().clone();
    let full = matches!(meta.mode, Mode::Full);
    // With more than one CPU the program's two exact reuse engines get threads of their own.
    let mut program = if cfg.threads > 1 {
        Analyzer::parallel(cfg.method)
    } else {
        Analyzer::new(cfg.method)
    };
    // A sampled trace's footprint over the execution is estimated from how many sample
    // windows saw each block.
    let analyzer = |a: Analyzer| if full { a } else { a.count_incidence() };
    program = analyzer(program);
    let mut funcs: Vec<(String, Analyzer)> = Vec::new();
    let mut func_of: HashMap<u64, usize, fasthash::Build> = HashMap::default();
    let mut last_sample: HashMap<u32, u64, fasthash::Build> = HashMap::default();
    let (mut accesses, mut recorded, mut skipped) = (0u64, 0u64, 0u64);
    let mut end_skipped = 0u64;
    let damage = crate::read_frames(reader, path, cfg.threads, |frame| match frame {
        Frame::End(e) => end_skipped = e.skipped,
        Frame::Chunk(c) if cfg.thread.is_none_or(|t| t == c.thread) => {
            let t = c.thread;
            for (s, window) in c.windows() {
                skipped += s.skipped_before;
                if !full && last_sample.insert(t, s.id) != Some(s.id) {
                    program.end_window(t);
                    program.new_sample(t);
                    for (_, f) in &mut funcs {
                        f.end_window(t);
                        f.new_sample(t);
                    }
                }
                for a in window {
                    accesses += 1;
                    recorded += 1;
                    if program.window_accesses(t) >= FOOTPRINT_WINDOW {
                        program.end_window(t);
                    }
                    if !program.access(t, a) {
                        continue;
                    }
                    if let Some(names) = &names {
                        let idx = *func_of.entry(a.ip).or_insert_with(|| {
                            let name = names.of_ip.get(&a.ip).map_or("??", String::as_str);
                            match funcs.iter().position(|(n, _)| n == name) {
                                Some(i) => i,
                                None if names.tracked.iter().any(|t| t == name) => {
                                    funcs.push((
                                        name.to_string(),
                                        analyzer(Analyzer::new(cfg.method)),
                                    ));
                                    funcs.len() - 1
                                }
                                None => match funcs.iter().position(|(n, _)| n == "(other)") {
                                    Some(i) => i,
                                    None => {
                                        funcs.push((
                                            "(other)".into(),
                                            analyzer(Analyzer::new(cfg.method)),
                                        ));
                                        funcs.len() - 1
                                    }
                                },
                            }
                        });
                        let f = &mut funcs[idx].1;
                        if f.window_accesses(t) >= FOOTPRINT_WINDOW {
                            f.end_window(t);
                        }
                        f.access(t, a);
                    }
                }
            }
        }
        _ => {}
    })?;
    crate::check_read(
        &p,
        damage.as_ref(),
        cfg.allow_damaged,
        accesses,
        &meta,
        cfg.thread,
    )?;
    let skipped = skipped.max(end_skipped);
    let rho = if recorded == 0 {
        1.0
    } else {
        (recorded + skipped) as f64 / recorded as f64
    };
    let mut notes = Vec::new();
    if damage.is_some() {
        notes
            .push("the trace is damaged: only the accesses before the damage were analysed".into());
    }
    // Time-sampled windows, and imported samples without skips, carry no skipped counts: the
    // footprint's upper estimate is unknown.
    let unknown_ratio = meta.mode.unknown_ratio();
    match meta.mode {
        Mode::Timed { .. } => notes.push(
            "timed (ptrace) samples carry no skipped counts: the footprint over the execution is estimated from the windows alone, with no upper estimate"
                .into(),
        ),
        _ if unknown_ratio.is_some() => notes.push(
            "the trace's samples carry no skipped counts (imported): the footprint over the execution is estimated from the windows alone, with no upper estimate"
                .into(),
        ),
        _ => {}
    }
    let grid = cfg
        .apex
        .then(|| apex::grid(cfg.apex_m, apex::GRID_ACCESSES, cfg.threads.max(1)));
    let scale = unknown_ratio.is_none().then_some(rho);
    let program_locality = summarize(&mut program, scale, grid.as_ref());
    let memory = MemoryUse {
        distinct_words: program.scorer.distinct_words().round() as u64,
        distinct_lines: program.scorer.distinct_lines().unwrap_or(0.0).round() as u64,
        reuse_engine_bytes: program.scorer.memory_bytes(),
    };
    if program.scorer.saturated() {
        notes.push(format!(
            "more than {} distinct words: reuse distances of words beyond that were counted as first uses; use --shards",
            crate::locality::reuse::MAX_DISTINCT
        ));
    }
    if let ReuseMethod::Shards { rate } = cfg.method {
        let adj = program_locality
            .reuse_histogram
            .shards_adjustment
            .unwrap_or(0.0);
        notes.push(if adj < SHARDS_RELIABLE {
            format!(
                "reuse distances estimated by SHARDS: {:.3}% of addresses (chosen by hash) tracked and scaled up; the correction moved {:.1}% of references, a range where the estimate was within 0.05 of exact in mgbench's tests",
                100.0 * rate,
                100.0 * adj
            )
        } else {
            format!(
                "reuse distances estimated by SHARDS are UNRELIABLE here: the correction had to move {:.0}% of references (a few hot addresses dominate, and sampling by address either misses or over-weights them); rerun without --shards for exact distances",
                100.0 * adj
            )
        });
    }
    let mut functions: Vec<FunctionLocality> = funcs
        .into_iter()
        .map(|(function, mut a)| FunctionLocality {
            function,
            locality: summarize(&mut a, scale, grid.as_ref()),
        })
        .collect();
    functions.sort_by_key(|f| std::cmp::Reverse(f.locality.references));
    Ok(LocalityReport {
        trace: p,
        program: meta.command.first().cloned(),
        mode: meta.mode.name().to_string(),
        accesses,
        sample_ratio: rho,
        sample_ratio_unknown: unknown_ratio.map(str::to_string),
        reuse_method: cfg.method,
        program_locality,
        functions,
        memory,
        notes,
    })
}
