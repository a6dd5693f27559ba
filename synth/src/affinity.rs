//! `mgbench zoom TRACE` and `mgbench affinity TRACE`: where a trace's accesses are (location
//! zoom, execution-interval tree; [`crate::locality::zoom`]) and, inside the hottest regions,
//! how blocks anticipate each other (MemFriend's spatial-temporal affinity;
//! [`crate::locality::affinity`]), with the signatures the report draws.
//!
//! Zoom is one pass over the trace; affinity adds a second pass that feeds only the accesses
//! of the regions of interest (and of the hottest lines) to per-region engines, so the
//! pair-wise work is O(N R) in the region accesses N and the offset radius R.

use std::collections::HashMap;
use std::path::Path;

use mgbench_capture::progress::Progress;
use mgbench_capture::symbols::Symbolizer;
use mgbench_capture::trace::{self, Chunk, Frame, JitSymbol, Mapping, Mode, TraceMeta};
use serde::{Deserialize, Serialize};

use crate::fasthash;
use crate::locality::affinity::{
    AffinityParams, BlockScores, Location, PairMetrics, RegionAffinity,
};
use crate::locality::zoom::{zoom_range, Census, IntervalNode, Layout, ZoomNode, ZoomParams, LINE};
use crate::SynthError;

/// Accessed extents closer than this are one segment (when no mapping separates them).
const SEGMENT_GAP: u64 = 1 << 20;

/// What `mgbench zoom` runs.
#[derive(Debug, Clone)]
pub struct ZoomConfig {
    pub zoom: ZoomParams,
    pub threads: usize,
    pub allow_damaged: bool,
    pub progress: Progress,
}

impl Default for ZoomConfig {
    fn default() -> Self {
        ZoomConfig {
            zoom: ZoomParams::default(),
            threads: 1,
            allow_damaged: false,
            progress: Progress::default(),
        }
    }
}

/// Accesses per analysed sequence: the length of MemFriend's sampled sequences (~250
/// accesses), almost 3 times the interval beyond which every pair has the worst goodness
/// rank (n_r x n_si = 90 accesses by default). It bounds the pairs an access can close,
/// which is what the pair-wise pass costs.
pub const DEFAULT_WINDOW: u32 = 256;

/// What `mgbench affinity` runs.
#[derive(Debug, Clone)]
pub struct AffinityConfig {
    pub zoom: ZoomConfig,
    pub params: AffinityParams,
    /// Regions of interest analysed pair-wise (the hottest final regions).
    pub regions: usize,
    /// Hottest lines of the whole trace taken as absolute affinity locations.
    pub hot_lines: usize,
    /// Largest region analysed, in blocks (a larger one is cut to its densest window).
    pub max_blocks: usize,
    /// Reference blocks (the hottest) on the heatmaps' x axis.
    pub heatmap_blocks: usize,
    pub top_pairs: usize,
    /// A thread's accesses are analysed in consecutive sequences of this many accesses (0:
    /// one sequence per thread, or per sample of a sampled trace): intervals and lifetimes
    /// stay inside a sequence, as in MemFriend's sampled sequences.
    pub window: u32,
}

impl Default for AffinityConfig {
    fn default() -> Self {
        AffinityConfig {
            zoom: ZoomConfig::default(),
            params: AffinityParams::default(),
            regions: 10,
            hot_lines: 8,
            max_blocks: 4096,
            heatmap_blocks: 32,
            top_pairs: 20,
            window: DEFAULT_WINDOW,
        }
    }
}

impl AffinityConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.params.validate()?;
        self.zoom.zoom.validate()?;
        if self.regions == 0 {
            return Err("--regions must be at least 1".into());
        }
        if !(16..=1 << 16).contains(&self.max_blocks) {
            return Err(format!(
                "--max-blocks {} must be between 16 and 65536",
                self.max_blocks
            ));
        }
        if self.hot_lines > 64 {
            return Err(format!("--hot-lines {} must be at most 64", self.hot_lines));
        }
        Ok(())
    }
}

/// The share of a region's accesses made by the instructions of one source (function and
/// line, or function and object where there is no line table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Code {
    /// The hottest of those instructions.
    pub ip: String,
    pub function: Option<String>,
    /// "function (file:line)".
    pub source: String,
    /// Of the region's accesses (from exact per-page counts of each instruction).
    pub share: f64,
}

/// A final region of the location zoom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoomRegion {
    pub id: usize,
    pub start: u64,
    pub end: u64,
    /// "0x7f..000-0x7f..fc0".
    pub range: String,
    /// heap, stack, static (a file's data), other, unmapped.
    pub class: String,
    /// segment (never split), hot-contiguous (a zoomed sub-region), hot-access (the span of
    /// one of the hottest instructions).
    pub kind: String,
    /// Zoom levels below its segment.
    pub depth: u32,
    pub accesses: u64,
    /// Of all accesses (0..1): hotness.
    pub share: f64,
    /// Distinct lines touched x 64.
    pub footprint_bytes: u64,
    /// Mean reuse distance of its lines' reuses, in distinct lines of the whole trace
    /// (SHARDS-sampled; None: no sampled reuse).
    pub reuse_distance: Option<f64>,
    pub code: Vec<Code>,
}

/// A node of a segment's zoom tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoomTreeNode {
    pub start: u64,
    pub end: u64,
    pub range: String,
    pub accesses: u64,
    /// Of its parent's accesses.
    pub share_of_parent: f64,
    pub children: Vec<ZoomTreeNode>,
}

/// A segment: accessed memory of one mapping (or one unmapped cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoomSegment {
    pub class: String,
    /// The mapping's file or name ("[heap]", "[stack]", "[thread stack]"; empty: anonymous).
    pub mapping: Option<String>,
    pub accesses: u64,
    pub share: f64,
    pub footprint_bytes: u64,
    pub tree: ZoomTreeNode,
}

/// What `mgbench zoom` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoomReport {
    pub trace: String,
    pub command: Vec<String>,
    /// full or sampled.
    pub mode: String,
    pub accesses: u64,
    pub threads: usize,
    pub params: ZoomParams,
    pub segments: Vec<ZoomSegment>,
    /// Final regions, hottest first.
    pub regions: Vec<ZoomRegion>,
    /// Execution-interval tree, level 0 = leaves, last = the whole run.
    pub intervals: Vec<Vec<IntervalNode>>,
    pub notes: Vec<String>,
}

fn hex_range(lo: u64, hi: u64) -> String {
    format!("{lo:#x}-{hi:#x}")
}

fn classify(m: Option<&Mapping>) -> (&'static str, Option<String>) {
    match m {
        None => ("unmapped", None),
        Some(m) if trace::is_stack(&m.path) => ("stack", Some(m.path.clone())),
        // Memory shared with other processes (MPI ranks' shared-memory transport in
        // /dev/shm, memfd, SysV segments): its accesses are communication.
        Some(m) if m.perms.as_bytes().get(3) == Some(&b's') => ("shared", Some(m.path.clone())),
        Some(m) if m.path.is_empty() || m.path == "[heap]" => ("heap", Some(m.path.clone())),
        Some(m) if m.path.starts_with('[') => ("other", Some(m.path.clone())),
        Some(m) => ("static", Some(m.path.clone())),
    }
}

/// One pass: the census of every access, the mappings, the threads.
struct Pass1 {
    meta: TraceMeta,
    census: Census,
    mappings: Vec<Mapping>,
    /// Names of JIT-compiled code.
    jit: Vec<JitSymbol>,
    threads: usize,
    damaged: bool,
}

fn census_pass(path: &Path, cfg: &ZoomConfig) -> Result<Pass1, SynthError> {
    cfg.zoom.validate().map_err(SynthError::Invalid)?;
    let p = path.display().to_string();
    let expected = mgbench_capture::trace::read_end_info(path)
        .map(|e| e.recorded)
        .unwrap_or(0);
    let reader = crate::open(path, &cfg.progress, "zooming")?;
    let meta = reader.meta().clone();
    let mut census = Census::new(cfg.zoom, expected.max(1));
    let mut mappings = Vec::new();
    let mut jit = Vec::new();
    let mut threads: Vec<u32> = Vec::new();
    let damage = crate::read_frames(reader, path, cfg.threads, |frame| match frame {
        Frame::Mappings(m) => mappings.extend(m.iter().cloned()),
        Frame::JitSymbols(j) => jit.extend(j.iter().cloned()),
        Frame::Chunk(c) => {
            if !threads.contains(&c.thread) {
                threads.push(c.thread);
            }
            for a in &c.accesses {
                census.access(a.ip, a.addr);
            }
        }
        _ => {}
    })?;
    crate::check_read(
        &p,
        damage.as_ref(),
        cfg.allow_damaged,
        census.accesses(),
        &meta,
        None,
    )?;
    let mappings = Mapping::flatten(&mappings);
    Ok(Pass1 {
        meta,
        census,
        mappings,
        jit,
        threads: threads.len(),
        damaged: damage.is_some(),
    })
}

/// The mapping that holds `addr`, in mappings without overlaps (see [`Mapping::flatten`]).
fn mapping_at(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    maps.iter().find(|m| m.start <= addr && addr < m.end)
}

fn tree_node(n: &ZoomNode, parent: u64) -> ZoomTreeNode {
    ZoomTreeNode {
        start: n.lo,
        end: n.hi,
        range: hex_range(n.lo, n.hi),
        accesses: n.accesses,
        share_of_parent: n.accesses as f64 / parent.max(1) as f64,
        children: n
            .children
            .iter()
            .map(|c| tree_node(c, n.accesses))
            .collect(),
    }
}

fn leaves<'a>(n: &'a ZoomNode, depth: u32, out: &mut Vec<(&'a ZoomNode, u32)>) {
    if n.children.is_empty() {
        out.push((n, depth));
    }
    for c in &n.children {
        leaves(c, depth + 1, out);
    }
}

/// Where a region sits: its segment's class, how it was found, zoom depth.
struct Placement<'a> {
    class: &'a str,
    kind: &'a str,
    depth: u32,
}

/// The three sources that made most of a region's accesses, from its instructions' counts
/// (`ips`, hottest first) and what each instruction resolves to (function, source).
/// Instructions that read the same ("sqlite3VdbeExec [libsqlite3.so]" without line numbers,
/// or one source line) are one entry: three rows saying the same would hide the next
/// function. Every instruction counts (each resolves once per trace): an interpreter touches
/// its stack frame from hundreds, and the 64 hottest alone gave sqlite3VdbeExec 13% of a
/// region it made 29% of.
fn grouped_code(
    ips: &[(u64, u64)],
    mut resolve: impl FnMut(u64) -> (Option<String>, String),
) -> Vec<Code> {
    let counted: u64 = ips.iter().map(|x| x.1).sum::<u64>().max(1);
    let mut code: Vec<Code> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for &(ip, c) in ips {
        let (function, source) = resolve(ip);
        let share = c as f64 / counted as f64;
        match at.get(&source) {
            Some(&k) => code[k].share += share,
            None => {
                at.insert(source.clone(), code.len());
                code.push(Code {
                    ip: format!("{ip:#x}"),
                    function,
                    source,
                    share,
                });
            }
        }
    }
    code.sort_by(|a, b| b.share.total_cmp(&a.share));
    code.truncate(3);
    code
}

fn region_of(
    layout: &Layout,
    sym: &mut Symbolizer,
    total: u64,
    (lo, hi): (u64, u64),
    at: Placement,
) -> ZoomRegion {
    let s = layout.stats(lo, hi);
    let code = grouped_code(&s.ips, |ip| {
        let loc = sym.resolve(ip);
        (loc.function.clone(), loc.describe())
    });
    ZoomRegion {
        id: 0,
        start: s.lo,
        end: s.hi,
        range: hex_range(s.lo, s.hi),
        class: at.class.to_string(),
        kind: at.kind.to_string(),
        depth: at.depth,
        accesses: s.accesses,
        share: s.accesses as f64 / total.max(1) as f64,
        footprint_bytes: s.lines * LINE,
        reuse_distance: (s.d_n > 0).then(|| s.d_sum / s.d_n as f64),
        code,
    }
}

fn build_zoom(path: &Path, pass: &Pass1, params: &ZoomParams) -> ZoomReport {
    let census = &pass.census;
    let total = census.accesses();
    let layout = census.layout();
    let mut sym = Symbolizer::new(pass.mappings.clone());
    sym.add_jit_symbols(&pass.jit);
    let maps = &pass.mappings;
    // Segments: accessed extents, cut at mapping boundaries.
    let mut segments = Vec::new();
    let mut regions: Vec<ZoomRegion> = Vec::new();
    for (lo, hi) in layout.extents(SEGMENT_GAP) {
        let mut cur = lo;
        while cur < hi {
            let m = mapping_at(maps, cur);
            let end = match m {
                Some(m) => m.end.min(hi),
                None => maps
                    .iter()
                    .map(|m| m.start)
                    .filter(|&s| s > cur)
                    .min()
                    .unwrap_or(hi)
                    .min(hi),
            };
            let s = layout.stats(cur, end);
            cur = end;
            if s.accesses == 0 {
                continue;
            }
            let (class, mapping) = classify(m);
            let root = zoom_range(&layout, params, s.lo, s.hi, s.accesses);
            let mut finals = Vec::new();
            leaves(&root, 0, &mut finals);
            for (n, depth) in finals {
                let kind = if depth == 0 {
                    "segment"
                } else {
                    "hot-contiguous"
                };
                let at = Placement { class, kind, depth };
                regions.push(region_of(&layout, &mut sym, total, (n.lo, n.hi), at));
            }
            segments.push(ZoomSegment {
                class: class.to_string(),
                mapping,
                accesses: s.accesses,
                share: s.accesses as f64 / total.max(1) as f64,
                footprint_bytes: s.lines * LINE,
                tree: tree_node(&root, total),
            });
        }
    }
    // Hot-access regions: the span of each of the hottest instructions, unless one final
    // region already holds it or it crosses segments.
    for (ip, st) in census.hottest_instructions(params.hot_instructions) {
        let lo = st.min / LINE * LINE;
        let hi = (st.max / LINE + 1) * LINE;
        // Already there: a region covering most of the same bytes (intersection at least
        // 80% of the union). A small structure inside a larger region stays: it is what
        // the instruction works on.
        let same = |r: &ZoomRegion| {
            let inter = hi.min(r.end).saturating_sub(lo.max(r.start));
            let union = hi.max(r.end) - lo.min(r.start);
            inter as f64 >= 0.8 * union as f64
        };
        let inside = regions.iter().any(same);
        let one_segment = segments
            .iter()
            .any(|s| s.tree.start <= lo && hi <= s.tree.end);
        if inside || !one_segment {
            continue;
        }
        let class = classify(mapping_at(maps, lo)).0;
        let at = Placement {
            class,
            kind: "hot-access",
            depth: 0,
        };
        let mut r = region_of(&layout, &mut sym, total, (lo, hi), at);
        let loc = sym.resolve(ip);
        let source = loc.describe();
        let own = st.accesses as f64 / r.accesses.max(1) as f64;
        let grouped = r
            .code
            .iter()
            .find(|c| c.source == source)
            .map_or(0.0, |c| c.share);
        let share = own.max(grouped).min(1.0);
        r.code.retain(|c| c.source != source);
        // The other entries' shares come from per-page counts; they get what is left.
        let rest = if grouped < 1.0 {
            (1.0 - share) / (1.0 - grouped)
        } else {
            0.0
        };
        for c in &mut r.code {
            c.share *= rest;
        }
        r.code.insert(
            0,
            Code {
                ip: format!("{ip:#x}"),
                function: loc.function.clone(),
                source,
                share,
            },
        );
        r.code.truncate(3);
        regions.push(r);
    }
    regions.sort_by(|a, b| b.accesses.cmp(&a.accesses).then(a.start.cmp(&b.start)));
    for (k, r) in regions.iter_mut().enumerate() {
        r.id = k;
    }
    segments.sort_by_key(|s| std::cmp::Reverse(s.accesses));
    let mut notes = Vec::new();
    if !matches!(pass.meta.mode, Mode::Full) {
        notes.push(format!(
            "{} trace: counts are of the recorded accesses; the interval tree's times are recorded-access indices",
            pass.meta.mode.name()
        ));
    }
    if pass.damaged {
        notes.push("the trace is damaged: only the accesses before the damage were used".into());
    }
    if pass.threads > 1 {
        notes.push(format!(
            "{} threads: the interval tree follows the trace's interleaving of their chunks",
            pass.threads
        ));
    }
    if maps.is_empty() {
        notes.push(
            "the trace has no mappings: segments are clusters of accessed memory, class unmapped"
                .into(),
        );
    }
    notes.push(format!(
        "reuse distances per region are SHARDS-sampled at rate {} over 64-byte lines",
        params.shards_rate
    ));
    ZoomReport {
        trace: path.display().to_string(),
        command: pass.meta.command.clone(),
        mode: pass.meta.mode.name().to_string(),
        accesses: total,
        threads: pass.threads,
        params: *params,
        segments,
        regions,
        intervals: census.interval_tree(),
        notes,
    }
}

/// Location zoom and execution-interval tree of the trace at `path` (one pass).
pub fn zoom(path: &Path, cfg: &ZoomConfig) -> Result<ZoomReport, SynthError> {
    let pass = census_pass(path, cfg)?;
    Ok(build_zoom(path, &pass, &cfg.zoom))
}

/// Affinity vector of a region (MemFriend's tables): accesses, mean reuse distance, and the
/// realized and potential SA*_r and SD*_r.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AffinityVector {
    pub accesses: u64,
    /// Mean reuse distance of the region's reuses, in distinct blocks of the region.
    pub rd: Option<f64>,
    pub sa_realized: f64,
    pub sd_realized: f64,
    pub sa_potential: f64,
    pub sd_potential: f64,
}

/// Per reference block, in address order (columns of equal length).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockTable {
    pub addr: Vec<u64>,
    pub accesses: Vec<u64>,
    pub ai: Vec<f64>,
    pub lifetime: Vec<u64>,
    /// Mean reuse interval (accesses) and distance (distinct blocks); null: never reused.
    pub ri: Vec<Option<f64>>,
    pub rd: Vec<Option<f64>>,
    pub sa_realized: Vec<f64>,
    pub sd_realized: Vec<f64>,
    pub sa_potential: Vec<f64>,
    pub sd_potential: Vec<f64>,
    /// The affinity signal: AI gamma SA and SD of offset +1 and of the block itself.
    pub sa_next: Vec<f64>,
    pub sd_next: Vec<f64>,
    pub sa_self: Vec<f64>,
    pub sd_self: Vec<f64>,
}

/// A heatmap cell: x (reference index), y (location row), SA, SD, SI (None: no interval).
pub type HeatCell = (u32, u32, f64, f64, Option<f64>);

/// The three heatmaps' data: reference blocks (hottest first) on x; locations on y: offsets
/// -radius..=+radius (rows 0..2R) then the hot lines (rows 2R+1..).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Heatmap {
    pub reference: Vec<u64>,
    pub reference_accesses: Vec<u64>,
    pub radius: u32,
    /// Hot line addresses (upper band).
    pub hot_lines: Vec<u64>,
    /// Non-empty cells: [x, y, SA, SD, SI] (SI null where no interval closed).
    pub cells: Vec<HeatCell>,
}

/// A probability histogram of a per-block score.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pdf {
    /// Bin edges (bins + 1).
    pub edges: Vec<f64>,
    /// Fraction of the blocks in each bin.
    pub fractions: Vec<f64>,
}

/// PDFs of the per-block scores over the hot cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pdfs {
    /// Blocks in the hot cluster: the hottest blocks that together hold 90% of the
    /// region's accesses.
    pub hot_cluster_blocks: usize,
    pub sa_realized: Pdf,
    pub sd_realized: Pdf,
    pub sa_potential: Pdf,
    pub sd_potential: Pdf,
}

/// One of the strongest pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopPair {
    pub reference: String,
    /// "+1", "-3", or "hot 0x...".
    pub location: String,
    pub sa: f64,
    pub sd: f64,
    pub si: Option<f64>,
    pub gamma: f64,
    /// AI gamma SA, AI gamma SD.
    pub weighted_sa: f64,
    pub weighted_sd: f64,
}

/// Affinity of one region of interest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionReport {
    /// Id of the zoom region.
    pub region: usize,
    pub class: String,
    pub kind: String,
    /// The code that touches it most.
    pub code: Option<String>,
    /// The span analysed (block-aligned).
    pub start: u64,
    pub end: u64,
    pub range: String,
    pub blocks: usize,
    /// The zoom region was larger than --max-blocks: its densest window was analysed.
    pub clipped: bool,
    pub vector: AffinityVector,
    pub block_table: BlockTable,
    pub heatmap: Heatmap,
    pub pdfs: Pdfs,
    pub top_pairs: Vec<TopPair>,
}

/// A hot line used as an absolute location.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotLine {
    pub addr: String,
    pub accesses: u64,
}

/// What `mgbench affinity` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AffinityReport {
    pub trace: String,
    pub command: Vec<String>,
    pub mode: String,
    pub accesses: u64,
    pub threads: usize,
    pub params: AffinityParams,
    /// n_si (= load queue / 4).
    pub n_si: f64,
    pub hot_lines: Vec<HotLine>,
    pub regions: Vec<RegionReport>,
    /// All regions of interest together: sums, and the access-weighted mean RD.
    pub total: AffinityVector,
    pub zoom: ZoomReport,
    pub notes: Vec<String>,
}

/// What the regions' engines are told, per access of interest: (thread, time, what), what
/// being a block of the region, [`HOT`] | k for hot line k, or [`END`] (the thread's
/// sequence ends; time unused).
type Event = (u32, u32, u32);
const HOT: u32 = 1 << 31;
const END: u32 = u32::MAX;

/// Turns chunks into each region's events: keeps every thread's clock (time = index of an
/// access in its thread's sequence), cuts sequences at samples and windows, and sends each
/// region only the accesses that fall in it (and every hot-line access).
struct Router {
    spans: Vec<(u64, u64)>,
    /// All regions' and all hot lines' bytes lie within these (a cheap first test).
    span: (u64, u64),
    hot_span: (u64, u64),
    hot_lines: Vec<u64>,
    block: u64,
    sampled: bool,
    /// Accesses per sequence.
    limit: u32,
    clocks: HashMap<u32, u32, fasthash::Build>,
}

impl Router {
    fn end(out: &mut [Vec<Event>], th: u32) {
        for o in out.iter_mut() {
            o.push((th, 0, END));
        }
    }

    fn new(
        spans: Vec<(u64, u64)>,
        hot_lines: Vec<u64>,
        block: u64,
        sampled: bool,
        limit: u32,
    ) -> Router {
        Router {
            span: (
                spans.iter().map(|r| r.0).min().unwrap_or(u64::MAX),
                spans.iter().map(|r| r.1).max().unwrap_or(0),
            ),
            hot_span: (
                hot_lines.iter().copied().min().unwrap_or(u64::MAX),
                hot_lines.iter().copied().max().map_or(0, |h| h + LINE),
            ),
            spans,
            hot_lines,
            block,
            sampled,
            limit,
            clocks: HashMap::default(),
        }
    }

    /// One chunk's events, per region (appended to `out`).
    fn route(&mut self, c: &Chunk, out: &mut [Vec<Event>]) {
        let (hot_lo, hot_hi) = self.hot_span;
        let (lo, hi) = self.span;
        let th = c.thread;
        let mut clock = self.clocks.get(&th).copied().unwrap_or(0);
        for (_, window) in c.windows() {
            // A sample starts a new sequence: intervals never cross its boundary.
            if self.sampled && clock > 0 {
                Self::end(out, th);
                clock = 0;
            }
            for a in window {
                if clock == self.limit {
                    Self::end(out, th);
                    clock = 0;
                }
                clock += 1;
                let addr = a.addr;
                if addr >= hot_lo && addr < hot_hi {
                    let line = addr / LINE * LINE;
                    if let Some(k) = self.hot_lines.iter().position(|&h| h == line) {
                        for o in out.iter_mut() {
                            o.push((th, clock, HOT | k as u32));
                        }
                    }
                }
                if addr >= lo && addr < hi {
                    for (r, o) in self.spans.iter().zip(out.iter_mut()) {
                        if addr >= r.0 && addr < r.1 {
                            o.push((th, clock, ((addr - r.0) / self.block) as u32));
                        }
                    }
                }
            }
        }
        self.clocks.insert(th, clock);
    }
}

impl Roi {
    fn apply(&mut self, events: &[Event]) {
        for &(th, t, what) in events {
            if what == END {
                self.engine.end_sequence(th);
            } else if what & HOT != 0 {
                self.engine.hot_access(th, t, (what & !HOT) as usize);
            } else {
                self.engine.access(th, t, what as usize);
            }
        }
    }

    /// Ends every sequence and scores the region.
    fn report(
        mut self,
        cfg: &AffinityConfig,
        zoom_regions: &[ZoomRegion],
        hot_lines: &[u64],
    ) -> RegionReport {
        self.engine.finish();
        let z = &zoom_regions[self.id];
        region_report(cfg, &mut self, z, hot_lines)
    }
}

struct Roi {
    id: usize,
    lo: u64,
    hi: u64,
    clipped: bool,
    engine: RegionAffinity,
}

/// Zoom, then affinity inside the hottest regions of the trace at `path` (two passes).
pub fn affinity(path: &Path, cfg: &AffinityConfig) -> Result<AffinityReport, SynthError> {
    cfg.validate().map_err(SynthError::Invalid)?;
    let pass = census_pass(path, &cfg.zoom)?;
    let zoom = build_zoom(path, &pass, &cfg.zoom.zoom);
    let block = cfg.params.block;
    let layout = pass.census.layout();
    let hot = pass.census.hottest_lines(cfg.hot_lines);
    let hot_block: Vec<u64> = hot.iter().map(|h| h.0 / block).collect();
    let hot_lines: Vec<u64> = hot.iter().map(|h| h.0).collect();
    // Regions of interest: the hottest final regions, cut to --max-blocks.
    let mut rois: Vec<Roi> = Vec::new();
    for r in zoom.regions.iter().take(cfg.regions) {
        let span = cfg.max_blocks as u64 * block;
        let (mut lo, mut hi) = (r.start / block * block, r.end.div_ceil(block) * block);
        let clipped = hi - lo > span;
        if clipped {
            lo = layout.densest(lo, hi, span) / block * block;
            hi = lo + span;
        }
        let blocks = ((hi - lo) / block) as usize;
        rois.push(Roi {
            id: r.id,
            lo,
            hi,
            clipped,
            engine: RegionAffinity::new(cfg.params, lo / block, blocks, hot_block.clone()),
        });
    }
    drop(layout);
    let sampled = pass.meta.mode != Mode::Full;
    let limit = if cfg.window == 0 {
        u32::MAX - 1
    } else {
        cfg.window
    };
    // Regions are independent: one worker each (the OS shares the cores among them, so an
    // expensive region does not hold up others), fed its own events by the decoding thread.
    // With one decode thread, everything runs on it.
    let mut router = Router::new(
        rois.iter().map(|r| (r.lo, r.hi)).collect(),
        hot_lines.clone(),
        block,
        sampled,
        limit,
    );
    let reader = crate::open(path, &cfg.zoom.progress, "affinity")?;
    let (zr, hl) = (&zoom.regions, &hot_lines);
    let mut done: Vec<(usize, RegionReport)> = Vec::new();
    let mut out: Vec<Vec<Event>> = vec![Vec::new(); rois.len()];
    if cfg.zoom.threads <= 1 || rois.len() <= 1 {
        crate::read_frames(reader, path, cfg.zoom.threads, |frame| {
            if let Frame::Chunk(c) = frame {
                router.route(c, &mut out);
                for (r, o) in rois.iter_mut().zip(out.iter_mut()) {
                    r.apply(o);
                    o.clear();
                }
            }
        })?;
        done = rois
            .into_iter()
            .enumerate()
            .map(|(k, r)| (k, r.report(cfg, zr, hl)))
            .collect();
    } else {
        let result = std::thread::scope(|scope| {
            let mut senders = Vec::new();
            let mut returns = Vec::new();
            let mut handles = Vec::new();
            for (k, mut roi) in rois.into_iter().enumerate() {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(16);
                // Emptied buffers come back for reuse: freeing large ones on one core and
                // allocating on another costs page faults and TLB shootdowns.
                let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<Event>>();
                senders.push(tx);
                returns.push(back_rx);
                handles.push(scope.spawn(move || {
                    for mut events in rx {
                        roi.apply(&events);
                        events.clear();
                        let _ = back_tx.send(events);
                    }
                    (k, roi.report(cfg, zr, hl))
                }));
            }
            let r = crate::read_frames(reader, path, cfg.zoom.threads, |frame| {
                if let Frame::Chunk(c) = frame {
                    router.route(c, &mut out);
                    for ((tx, back), o) in senders.iter().zip(&returns).zip(out.iter_mut()) {
                        if !o.is_empty() {
                            let spare = back.try_recv().unwrap_or_default();
                            // A worker only stops early by panicking, which join reports.
                            let _ = tx.send(std::mem::replace(o, spare));
                        }
                    }
                }
            });
            drop(senders);
            for h in handles {
                done.push(h.join().expect("affinity worker panicked"));
            }
            r
        });
        result?;
    }
    done.sort_by_key(|r| r.0);
    let regions: Vec<RegionReport> = done.into_iter().map(|r| r.1).collect();
    let mut notes = zoom.notes.clone();
    if sampled {
        notes.push(
            "sampled trace: spatial intervals and lifetimes never cross a sample boundary".into(),
        );
    }
    if cfg.window > 0 {
        notes.push(format!(
            "each thread's accesses are analysed in consecutive sequences of {} accesses (--window; 0 = whole threads): longer intervals are not counted",
            cfg.window
        ));
    }
    notes.push(format!(
        "goodness: n_r = {}, n_si = {} (a quarter of a {}-entry load queue, --load-queue)",
        cfg.params.ranks,
        cfg.params.n_si(),
        cfg.params.load_queue
    ));
    notes
        .push("SD(j|i) = accesses to j within i's lifetime / L(i) (MemFriend's Eq. 5 form)".into());
    let mut total = AffinityVector::default();
    let (mut rd_w, mut rd_n) = (0.0, 0u64);
    for r in &regions {
        let v = &r.vector;
        total.accesses += v.accesses;
        total.sa_realized += v.sa_realized;
        total.sd_realized += v.sd_realized;
        total.sa_potential += v.sa_potential;
        total.sd_potential += v.sd_potential;
        if let Some(rd) = v.rd {
            rd_w += rd * v.accesses as f64;
            rd_n += v.accesses;
        }
    }
    total.rd = (rd_n > 0).then(|| rd_w / rd_n as f64);
    Ok(AffinityReport {
        trace: path.display().to_string(),
        command: pass.meta.command.clone(),
        mode: pass.meta.mode.name().to_string(),
        accesses: pass.census.accesses(),
        threads: pass.threads,
        params: cfg.params,
        n_si: cfg.params.n_si(),
        hot_lines: hot
            .iter()
            .map(|&(a, c)| HotLine {
                addr: format!("{a:#x}"),
                accesses: c,
            })
            .collect(),
        regions,
        total,
        zoom,
        notes,
    })
}

/// `x` to 4 significant digits: the report's scores need no more, and the JSON of a region
/// holds a few hundred thousand of them.
fn sig4(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(3 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

fn sig4_all(v: &mut [f64]) {
    for x in v {
        *x = sig4(*x);
    }
}

fn pdf(values: &[f64], bins: usize) -> Pdf {
    let max = values.iter().copied().fold(0.0f64, f64::max);
    let hi = if max > 0.0 { max } else { 1.0 };
    let edges: Vec<f64> = (0..=bins).map(|k| hi * k as f64 / bins as f64).collect();
    let mut counts = vec![0usize; bins];
    for &v in values {
        let k = ((v / hi) * bins as f64).floor() as usize;
        counts[k.min(bins - 1)] += 1;
    }
    let n = values.len().max(1) as f64;
    Pdf {
        edges,
        fractions: counts.iter().map(|&c| c as f64 / n).collect(),
    }
}

fn region_report(
    cfg: &AffinityConfig,
    roi: &mut Roi,
    z: &ZoomRegion,
    hot_lines: &[u64],
) -> RegionReport {
    let e = &roi.engine;
    let block = cfg.params.block;
    let radius = cfg.params.radius as i64;
    let n = e.blocks();
    let max_a = (0..n).map(|b| e.accesses(b)).max().unwrap_or(0);
    // Hotness order: the heatmaps' x axis and the hot cluster.
    let touched: Vec<usize> = (0..n).filter(|&b| e.accesses(b) > 0).collect();
    let mut by_hot = touched.clone();
    by_hot.sort_by(|&a, &b| e.accesses(b).cmp(&e.accesses(a)).then(a.cmp(&b)));
    let mut rank = vec![usize::MAX; n];
    for (x, &b) in by_hot.iter().enumerate() {
        rank[b] = x;
    }
    // Heatmaps over the hottest reference blocks.
    let mut heat = Heatmap {
        radius: cfg.params.radius,
        hot_lines: hot_lines.to_vec(),
        ..Default::default()
    };
    for &b in by_hot.iter().take(cfg.heatmap_blocks) {
        heat.reference.push(roi.lo + b as u64 * block);
        heat.reference_accesses.push(e.accesses(b));
    }
    // Candidates for the strongest pairs: (reference, location, metrics); the location is
    // an offset, or radius + 1 + k for hot line k. Labelled once the top ones are known.
    let mut top: Vec<(usize, i64, PairMetrics, f64)> = Vec::new();
    let ai_of = |b: usize| e.accesses(b) as f64 / max_a.max(1) as f64;
    let keep = cfg.top_pairs.max(1);
    // Heavier first; ties by hotter reference block, then by location.
    let by_weight = |a: &(usize, i64, PairMetrics, f64), b: &(usize, i64, PairMetrics, f64)| {
        (b.3.total_cmp(&a.3))
            .then(rank[a.0].cmp(&rank[b.0]))
            .then(a.1.cmp(&b.1))
    };
    // One pass over every pair: block scores, heatmap cells and candidates together, in
    // address order (block b + 1 reads the cache lines of b's pairs again: the counters of
    // (i, i + off) lie in i + off's row).
    let mut scores = vec![BlockScores::default(); n];
    for &b in &touched {
        let x = rank[b];
        let on_map = x < cfg.heatmap_blocks;
        let ai = ai_of(b);
        scores[b] = e.block_scores_with(b, max_a, |loc, p, m| {
            if p.intervals == 0 && p.in_lifetime == 0 {
                return;
            }
            let (y, candidate) = match loc {
                Location::Offset(off) => ((off + radius) as u32, (off != 0).then_some(off)),
                Location::Hot(k) => (
                    (2 * radius + 1) as u32 + k as u32,
                    Some(radius + 1 + k as i64),
                ),
            };
            if on_map {
                heat.cells
                    .push((x as u32, y, sig4(m.sa), sig4(m.sd), m.si.map(sig4)));
            }
            if let Some(c) = candidate {
                top.push((b, c, m, ai * m.gamma * m.sa));
            }
        });
        // Keep the candidate list short as it grows.
        if top.len() > 64 * keep {
            top.select_nth_unstable_by(keep - 1, by_weight);
            top.truncate(keep);
        }
    }
    heat.cells.sort_unstable_by_key(|c| (c.0, c.1));
    // The block table, in address order.
    let mut table = BlockTable::default();
    let mut v = AffinityVector::default();
    let (mut reuses, mut rd_sum) = (0u64, 0.0f64);
    for &b in &touched {
        let a = e.accesses(b);
        let s = scores[b];
        let (ri, rd) = e.reuse(b);
        let (nr, _, rds) = e.reuse_sums(b);
        reuses += nr;
        rd_sum += rds;
        v.accesses += a;
        v.sa_realized += s.sa_realized;
        v.sd_realized += s.sd_realized;
        v.sa_potential += s.sa_potential;
        v.sd_potential += s.sd_potential;
        table.addr.push(roi.lo + b as u64 * block);
        table.accesses.push(a);
        table.ai.push(a as f64 / max_a as f64);
        table.lifetime.push(e.lifetime(b));
        table.ri.push(ri);
        table.rd.push(rd);
        table.sa_realized.push(s.sa_realized);
        table.sd_realized.push(s.sd_realized);
        table.sa_potential.push(s.sa_potential);
        table.sd_potential.push(s.sd_potential);
        table.sa_next.push(s.sa_next);
        table.sd_next.push(s.sd_next);
        table.sa_self.push(s.sa_self);
        table.sd_self.push(s.sd_self);
    }
    v.rd = (reuses > 0).then(|| rd_sum / reuses as f64);
    for col in [
        &mut table.ai,
        &mut table.sa_realized,
        &mut table.sd_realized,
        &mut table.sa_potential,
        &mut table.sd_potential,
        &mut table.sa_next,
        &mut table.sd_next,
        &mut table.sa_self,
        &mut table.sd_self,
    ] {
        sig4_all(col);
    }
    for col in [&mut table.ri, &mut table.rd] {
        for x in col.iter_mut().flatten() {
            *x = sig4(*x);
        }
    }
    top.sort_by(by_weight);
    top.truncate(cfg.top_pairs);
    let top: Vec<TopPair> = top
        .into_iter()
        .map(|(b, loc, m, w)| TopPair {
            reference: format!("{:#x}", roi.lo + b as u64 * block),
            location: if loc > radius {
                format!("hot {:#x}", hot_lines[(loc - radius - 1) as usize])
            } else {
                format!("{loc:+}")
            },
            sa: m.sa,
            sd: m.sd,
            si: m.si,
            gamma: m.gamma,
            weighted_sa: w,
            weighted_sd: ai_of(b) * m.gamma * m.sd,
        })
        .collect();
    // PDFs over the hot cluster.
    let mut cluster = Vec::new();
    let mut acc = 0u64;
    for &b in &by_hot {
        if acc as f64 >= 0.9 * v.accesses as f64 {
            break;
        }
        acc += e.accesses(b);
        cluster.push(b);
    }
    let cl: Vec<BlockScores> = cluster.iter().map(|&b| scores[b]).collect();
    let pdfs = Pdfs {
        hot_cluster_blocks: cluster.len(),
        sa_realized: pdf(&cl.iter().map(|s| s.sa_realized).collect::<Vec<_>>(), 20),
        sd_realized: pdf(&cl.iter().map(|s| s.sd_realized).collect::<Vec<_>>(), 20),
        sa_potential: pdf(&cl.iter().map(|s| s.sa_potential).collect::<Vec<_>>(), 20),
        sd_potential: pdf(&cl.iter().map(|s| s.sd_potential).collect::<Vec<_>>(), 20),
    };
    RegionReport {
        region: roi.id,
        class: z.class.clone(),
        kind: z.kind.clone(),
        code: z.code.first().map(|c| c.source.clone()),
        start: roi.lo,
        end: roi.hi,
        range: hex_range(roi.lo, roi.hi),
        blocks: n,
        clipped: roi.clipped,
        vector: v,
        block_table: table,
        heatmap: heat,
        pdfs,
        top_pairs: top,
    }
}

/// Two variants' affinity side by side (`mgbench affinity --compare A.json B.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AffinityComparison {
    pub a: Variant,
    pub b: Variant,
    /// Regions paired: those whose hottest code is the same first, then by hotness rank.
    pub regions: Vec<RegionPair>,
}

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub label: String,
    pub file: String,
    pub total: AffinityVector,
}

/// A region of each variant: touched by the same code, else of the same hotness rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionPair {
    pub rank: usize,
    pub a: Option<RegionSide>,
    pub b: Option<RegionSide>,
}

/// One region in a comparison: where, what, and its vector and PDFs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionSide {
    pub range: String,
    pub code: Option<String>,
    pub vector: AffinityVector,
    /// Mean over the region's blocks of AI gamma SA at offset +1.
    pub sa_next_mean: f64,
    pub pdfs: Pdfs,
}

/// A short label of a variant: its command line, else its file name.
pub fn variant_label(r: &AffinityReport, file: &str) -> String {
    if r.command.is_empty() {
        return file.to_string();
    }
    let mut c = r.command.clone();
    if let Some(p) = c.first_mut() {
        *p = Path::new(p)
            .file_name()
            .map_or(p.clone(), |f| f.to_string_lossy().into_owned());
    }
    c.join(" ")
}

fn side(r: &RegionReport) -> RegionSide {
    let n = r.block_table.sa_next.len().max(1) as f64;
    RegionSide {
        range: r.range.clone(),
        code: r.code.clone(),
        vector: r.vector,
        sa_next_mean: r.block_table.sa_next.iter().sum::<f64>() / n,
        pdfs: r.pdfs.clone(),
    }
}

/// Puts two affinity reports side by side.
pub fn compare(
    a: &AffinityReport,
    a_file: &str,
    b: &AffinityReport,
    b_file: &str,
) -> AffinityComparison {
    // Regions touched by the same code are paired first; the rest by hotness rank.
    let mut pairs: Vec<(Option<usize>, Option<usize>)> = Vec::new();
    let mut b_used = vec![false; b.regions.len()];
    let mut a_left = Vec::new();
    for (i, ra) in a.regions.iter().enumerate() {
        let hit = ra.code.as_ref().and_then(|c| {
            b.regions
                .iter()
                .enumerate()
                .position(|(k, rb)| !b_used[k] && rb.code.as_ref() == Some(c))
        });
        match hit {
            Some(k) => {
                b_used[k] = true;
                pairs.push((Some(i), Some(k)));
            }
            None => a_left.push(i),
        }
    }
    let mut b_left = (0..b.regions.len()).filter(|&k| !b_used[k]);
    for i in a_left {
        pairs.push((Some(i), b_left.next()));
    }
    pairs.extend(b_left.map(|k| (None, Some(k))));
    pairs.sort_by_key(|p| (p.0.unwrap_or(usize::MAX), p.1.unwrap_or(usize::MAX)));
    AffinityComparison {
        a: Variant {
            label: variant_label(a, a_file),
            file: a_file.to_string(),
            total: a.total,
        },
        b: Variant {
            label: variant_label(b, b_file),
            file: b_file.to_string(),
            total: b.total,
        },
        regions: pairs
            .into_iter()
            .enumerate()
            .map(|(k, (i, j))| RegionPair {
                rank: k + 1,
                a: i.map(|i| side(&a.regions[i])),
                b: j.map(|j| side(&b.regions[j])),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interpreter's frame: 200 instructions of one function without a line table, each
    /// touching it a little, and one hotter instruction of another. The function's share is
    /// all of its instructions', not its 64 hottest.
    #[test]
    fn a_regions_code_counts_every_instruction() {
        let mut ips: Vec<(u64, u64)> = vec![(0x9000, 50)];
        ips.extend((0..200).map(|k| (0x1000 + k, 1 + (k % 2))));
        ips.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let code = grouped_code(&ips, |ip| {
            let f = if ip >= 0x9000 { "memset" } else { "exec" };
            (Some(f.to_string()), format!("{f} [lib.so]"))
        });
        assert_eq!(code.len(), 2);
        assert_eq!(code[0].source, "exec [lib.so]");
        assert_eq!(code[0].ip, "0x1001", "its hottest instruction");
        assert!((code[0].share - 300.0 / 350.0).abs() < 1e-12, "{code:?}");
        assert_eq!(code[1].function.as_deref(), Some("memset"));
        assert!((code[1].share - 50.0 / 350.0).abs() < 1e-12, "{code:?}");
        // Four sources: the three largest, largest first.
        let four = [(1, 40), (2, 30), (3, 20), (4, 10)];
        let code = grouped_code(&four, |ip| (None, format!("line {ip}")));
        let names: Vec<&str> = code.iter().map(|c| c.source.as_str()).collect();
        assert_eq!(names, ["line 1", "line 2", "line 3"]);
    }

    #[test]
    fn mappings_are_classed_by_name_and_sharing() {
        let map = |path: &str, perms: &str| Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: path.into(),
            perms: perms.into(),
        };
        let class = |path: &str, perms: &str| classify(Some(&map(path, perms))).0;
        assert_eq!(class("[stack]", "rw-p"), "stack");
        assert_eq!(class("[thread stack]", "rw-p"), "stack");
        assert_eq!(class("", "rw-p"), "heap");
        assert_eq!(class("[heap]", "rw-p"), "heap");
        // OpenMPI's shared-memory transport, anonymous shared memory, a SysV segment.
        assert_eq!(class("/dev/shm/vader_segment.vm.0.1", "rw-s"), "shared");
        assert_eq!(class("/dev/zero (deleted)", "rw-s"), "shared");
        assert_eq!(class("/SYSV00000000 (deleted)", "rw-s"), "shared");
        assert_eq!(class("/usr/lib/libc.so.6", "rw-p"), "static");
        assert_eq!(class("[vvar]", "r--p"), "other");
        assert_eq!(classify(None).0, "unmapped");
    }
}
