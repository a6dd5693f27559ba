//! What `mgbench trace info` reports, computed in one streaming pass over a trace.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use serde::Serialize;

use crate::symbols::{SourceLocation, Symbolizer};
use crate::trace::{AccessKind, EndInfo, Frame, JitSymbol, Mapping, Mode, ReadError, TraceReader};

#[derive(Debug, thiserror::Error)]
pub enum InfoError {
    #[error("cannot open trace {path}: {cause}")]
    Open { path: String, cause: std::io::Error },
    #[error("{path}: {cause}")]
    Read { path: String, cause: ReadError },
}

/// Per-instruction counts.
#[derive(Debug, Clone, Serialize)]
pub struct InstructionStat {
    /// "0x401136"
    pub ip: String,
    pub loads: u64,
    pub stores: u64,
    #[serde(flatten)]
    pub source: SourceLocation,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadStat {
    pub thread: u32,
    pub accesses: u64,
    pub samples: u64,
}

/// Where a damaged trace stops being readable.
#[derive(Debug, Clone, Serialize)]
pub struct DamageReport {
    pub offset: u64,
    pub reason: String,
}

/// Summary of a trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceInfo {
    pub path: String,
    pub backend: String,
    pub mode: String,
    pub window: Option<u64>,
    pub period: Option<u64>,
    pub command: Vec<String>,
    pub start_time: String,
    pub roi: Option<crate::trace::RoiMeta>,
    pub accesses: u64,
    pub loads: u64,
    pub stores: u64,
    pub samples: u64,
    pub threads: usize,
    pub distinct_instructions: usize,
    /// Accesses executed but not recorded (sampling).
    pub skipped: u64,
    /// (recorded + skipped) / recorded: what estimators scale by. 1 for full traces.
    pub sample_ratio: f64,
    /// False for timed (ptrace) samples, where nobody counted the accesses between windows,
    /// and for imported samples whose format keeps no skipped counts (MemGaze text): there
    /// `skipped` is 0 and `sample_ratio` 1 without meaning.
    pub sample_ratio_known: bool,
    /// Why it is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_ratio_unknown: Option<&'static str>,
    pub file_bytes: u64,
    pub bytes_per_access: f64,
    /// The end frame is present: the capture finished and was finalised.
    pub complete: bool,
    pub end: Option<EndInfo>,
    pub damage: Option<DamageReport>,
    pub notes: Vec<String>,
    pub per_thread: Vec<ThreadStat>,
    pub top_instructions: Vec<InstructionStat>,
}

/// Reads a whole trace (streaming) and summarises it; `top` instructions are symbolized.
pub fn trace_info(path: &Path, top: usize) -> Result<TraceInfo, InfoError> {
    let p = path.display().to_string();
    let file = File::open(path).map_err(|cause| InfoError::Open {
        path: p.clone(),
        cause,
    })?;
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut r = TraceReader::open(BufReader::with_capacity(1 << 20, file)).map_err(|cause| {
        InfoError::Read {
            path: p.clone(),
            cause,
        }
    })?;
    let meta = r.meta().clone();
    let mut per_ip: HashMap<u64, (u64, u64), crate::fasthash::Build> = HashMap::default();
    let mut threads: HashMap<u32, (u64, u64, Option<u64>)> = HashMap::new();
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut jit: Vec<JitSymbol> = Vec::new();
    let (mut loads, mut stores, mut skipped, mut samples) = (0u64, 0u64, 0u64, 0u64);
    let mut end = None;
    // The header's notes (e.g. why this backend), then the ones the capture wrote.
    let mut notes = meta.notes.clone();
    loop {
        let frame = r.next_frame().map_err(|cause| InfoError::Read {
            path: p.clone(),
            cause,
        })?;
        let Some(frame) = frame else { break };
        match frame {
            Frame::Chunk(c) => {
                let t = threads.entry(c.thread).or_insert((0, 0, None));
                t.0 += c.accesses.len() as u64;
                for s in &c.samples {
                    skipped += s.skipped_before;
                    if t.2 != Some(s.id) {
                        t.1 += 1;
                        samples += 1;
                        t.2 = Some(s.id);
                    }
                }
                for a in &c.accesses {
                    let e = per_ip.entry(a.ip).or_insert((0, 0));
                    match a.kind {
                        AccessKind::Load => {
                            loads += 1;
                            e.0 += 1
                        }
                        AccessKind::Store => {
                            stores += 1;
                            e.1 += 1
                        }
                    }
                }
            }
            Frame::Mappings(m) => mappings.extend(m),
            Frame::JitSymbols(j) => jit.extend(j),
            Frame::Note(n) => notes.push(n),
            Frame::End(e) => end = Some(e),
        }
    }
    let accesses = loads + stores;
    // The writer knows skips after the last sample too; prefer its total when present.
    if let Some(e) = &end {
        skipped = skipped.max(e.skipped);
    }
    let mut ranked: Vec<(u64, (u64, u64))> = per_ip.iter().map(|(&ip, &c)| (ip, c)).collect();
    ranked.sort_by(|a, b| {
        (b.1 .0 + b.1 .1)
            .cmp(&(a.1 .0 + a.1 .1))
            .then(a.0.cmp(&b.0))
    });
    let mut sym = Symbolizer::new(mappings);
    sym.add_jit_symbols(&jit);
    let top_instructions = ranked
        .iter()
        .take(top)
        .map(|&(ip, (l, s))| InstructionStat {
            ip: format!("{ip:#x}"),
            loads: l,
            stores: s,
            source: sym.resolve(ip),
        })
        .collect();
    let mut per_thread: Vec<ThreadStat> = threads
        .iter()
        .map(|(&thread, &(a, s, _))| ThreadStat {
            thread,
            accesses: a,
            samples: s,
        })
        .collect();
    per_thread.sort_by_key(|t| t.thread);
    let (window, period) = match meta.mode {
        Mode::Full => (None, None),
        Mode::Sampled { window, period } => (Some(window), Some(period)),
        Mode::Timed { window, .. } => (Some(window), None),
    };
    Ok(TraceInfo {
        sample_ratio_known: meta.mode.unknown_ratio().is_none(),
        sample_ratio_unknown: meta.mode.unknown_ratio(),
        path: p,
        backend: meta.backend,
        mode: meta.mode.name().to_string(),
        window,
        period,
        command: meta.command,
        start_time: meta.start_time,
        roi: meta.roi,
        accesses,
        loads,
        stores,
        samples,
        threads: per_thread.len(),
        distinct_instructions: per_ip.len(),
        skipped,
        sample_ratio: if accesses == 0 {
            0.0
        } else {
            (accesses + skipped) as f64 / accesses as f64
        },
        file_bytes,
        bytes_per_access: if accesses == 0 {
            0.0
        } else {
            file_bytes as f64 / accesses as f64
        },
        complete: end.is_some(),
        end,
        damage: r.damage().map(|d| DamageReport {
            offset: d.offset,
            reason: d.reason.clone(),
        }),
        notes,
        per_thread,
        top_instructions,
    })
}
