//! `mgbench zoom TRACE` (location zoom and execution-interval tree) and `mgbench affinity
//! TRACE` (spatial-temporal affinity inside the hottest regions), and `mgbench affinity
//! --compare A.json B.json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use mgbench_capture::symbols::short_source;
use mgbench_replay::results::write_atomically;
use mgbench_synth::affinity::{
    affinity, compare, zoom, AffinityComparison, AffinityConfig, AffinityReport, AffinityVector,
    ZoomConfig, ZoomReport,
};
use mgbench_synth::locality::affinity::AffinityParams;
use mgbench_synth::locality::zoom::ZoomParams;
use serde::Serialize;

use super::progress::{Display, Style};
use super::replay::non_negative;
use super::reuse::Format;

#[derive(Debug, Args)]
pub struct ZoomArgs {
    /// Trace to zoom into (from `mgbench capture` or `mgbench import`).
    trace: PathBuf,
    #[command(flatten)]
    zoom: ZoomFlags,
    /// Output on stdout.
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write the JSON report to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// The zoom's knobs, shared by `zoom` and `affinity`.
#[derive(Debug, Args)]
pub struct ZoomFlags {
    /// Chunks a region is cut into at each zoom level.
    #[arg(long, default_value_t = 8)]
    chunks: u32,
    /// A chunk holding at least this % of its parent's accesses is hot.
    #[arg(long, default_value_t = 10.0, value_name = "PERCENT")]
    threshold: f64,
    /// Regions this small (bytes) are not cut further.
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    min_region: u64,
    /// The hottest instructions whose targets become hot-access regions.
    #[arg(long, default_value_t = 5)]
    hot_instructions: usize,
    /// Leaves of the execution-interval tree (a power of two).
    #[arg(long, default_value_t = 256)]
    leaves: usize,
    /// Zoom the readable part of a damaged trace instead of refusing it.
    #[arg(long)]
    allow_damaged: bool,
    /// Threads decoding the trace (default: one per CPU).
    #[arg(long = "decode-threads", value_parser = non_negative)]
    decode_threads: Option<usize>,
}

impl ZoomFlags {
    fn config(&self) -> ZoomConfig {
        ZoomConfig {
            zoom: ZoomParams {
                chunks: self.chunks,
                threshold: self.threshold / 100.0,
                min_region: self.min_region,
                hot_instructions: self.hot_instructions,
                leaves: self.leaves,
                ..ZoomParams::default()
            },
            threads: self
                .decode_threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1),
            allow_damaged: self.allow_damaged,
            ..ZoomConfig::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct AffinityArgs {
    /// Trace to analyse (from `mgbench capture` or `mgbench import`).
    #[arg(required_unless_present = "compare")]
    trace: Option<PathBuf>,
    /// Put two `affinity -o` reports side by side instead (e.g. two layouts of the same data).
    #[arg(long, num_args = 2, value_names = ["A.json", "B.json"], conflicts_with = "trace")]
    compare: Option<Vec<PathBuf>>,
    #[command(flatten)]
    zoom: ZoomFlags,
    /// Block size in bytes (a power of two; 64 = cache lines).
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    block: u64,
    /// Affinity offsets considered: -R..=+R blocks around each reference block.
    #[arg(long, default_value_t = 256)]
    radius: u32,
    /// Goodness ranks n_r.
    #[arg(long, default_value_t = 5)]
    ranks: u32,
    /// Load-queue entries assumed (loads in flight); n_si, the spatial interval per rank, is
    /// a quarter of it. 72 is AMD Zen 3's.
    #[arg(long, default_value_t = 72)]
    load_queue: u32,
    /// Regions of interest (the hottest zoom regions) analysed pair-wise.
    #[arg(long, default_value_t = 10)]
    regions: usize,
    /// Hottest lines of the whole trace taken as absolute affinity locations.
    #[arg(long, default_value_t = 8)]
    hot_lines: usize,
    /// Largest region analysed, in blocks; a larger one is cut to its densest window.
    #[arg(long, default_value_t = 4096)]
    max_blocks: usize,
    /// Reference blocks (the hottest) on the heatmaps.
    #[arg(long, default_value_t = 32)]
    heatmap_blocks: usize,
    /// Accesses per analysed sequence of a thread (intervals and lifetimes stay inside
    /// one); 0 analyses each thread (or sample) whole: exact, but an access may then close
    /// up to 2R+1 intervals.
    #[arg(long, default_value_t = mgbench_synth::affinity::DEFAULT_WINDOW)]
    window: u32,
    /// Strongest pairs listed per region.
    #[arg(long, default_value_t = 10, value_parser = non_negative)]
    top: usize,
    /// Output on stdout.
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write the JSON report to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Writes `value` as JSON to `output`, indented unless `compact` (affinity reports hold
/// per-block columns and heatmap cells: a few MB indented).
fn write_json<T: Serialize>(
    what: &str,
    value: &T,
    output: Option<&PathBuf>,
    compact: bool,
) -> Result<()> {
    if let Some(path) = output {
        let mut json = if compact {
            serde_json::to_vec(value)?
        } else {
            serde_json::to_vec_pretty(value)?
        };
        json.push(b'\n');
        write_atomically(path, &json)?;
        eprintln!("mgbench: {what} -> {}", path.display());
    }
    Ok(())
}

fn print<T: Serialize>(
    value: &T,
    format: Format,
    table: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, value)?;
            writeln!(out)?;
        }
        Format::Table => table(&mut out)?,
    }
    Ok(())
}

pub fn run_zoom(args: ZoomArgs) -> Result<i32> {
    let cfg = args.zoom.config();
    if let Err(e) = cfg.zoom.validate() {
        bail!("{e}");
    }
    if let Some(out) = &args.output {
        super::analyze::check_writable(out)?;
    }
    let _bar = Display::start(&cfg.progress, Style::Bytes);
    let report = zoom(&args.trace, &cfg)?;
    write_json("zoom report", &report, args.output.as_ref(), false)?;
    print(&report, args.format, |out| zoom_table(&report, out))?;
    Ok(0)
}

pub fn run_affinity(args: AffinityArgs) -> Result<i32> {
    if let Some(out) = &args.output {
        super::analyze::check_writable(out)?;
    }
    if let Some(files) = &args.compare {
        let a = load(&files[0])?;
        let b = load(&files[1])?;
        let c = compare(
            &a,
            &files[0].display().to_string(),
            &b,
            &files[1].display().to_string(),
        );
        write_json("affinity comparison", &c, args.output.as_ref(), false)?;
        print(&c, args.format, |out| compare_table(&c, out))?;
        return Ok(0);
    }
    let Some(trace) = &args.trace else {
        bail!("give a trace, or --compare A.json B.json");
    };
    let cfg = AffinityConfig {
        zoom: args.zoom.config(),
        params: AffinityParams {
            block: args.block,
            radius: args.radius,
            ranks: args.ranks,
            load_queue: args.load_queue,
        },
        regions: args.regions,
        hot_lines: args.hot_lines,
        max_blocks: args.max_blocks,
        heatmap_blocks: args.heatmap_blocks,
        top_pairs: args.top,
        window: args.window,
    };
    if let Err(e) = cfg.validate() {
        bail!("{e}");
    }
    let _bar = Display::start(&cfg.zoom.progress, Style::Bytes);
    let report = affinity(trace, &cfg)?;
    write_json("affinity report", &report, args.output.as_ref(), true)?;
    print(&report, args.format, |out| affinity_table(&report, out))?;
    Ok(0)
}

/// Reads an `affinity -o` report, with an error that says what the file should be.
fn load(path: &Path) -> Result<AffinityReport> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not an affinity report: --compare takes two files written by `mgbench affinity TRACE -o FILE`",
            path.display()
        )
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

fn bytes(b: u64) -> String {
    mgbench_replay::plan::human_bytes(u128::from(b))
}

/// Most segments the table lists.
const SEGMENTS_SHOWN: usize = 16;

fn zoom_table(r: &ZoomReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} accesses ({}) from {} thread(s)",
        r.trace, r.accesses, r.mode, r.threads
    )?;
    writeln!(out, "\nsegments:")?;
    // The hottest, and none that rounds to 0.00% (GROMACS touches 62 segments, 40 of them
    // so): the rest in one line, all of them in the JSON.
    let shown = r
        .segments
        .iter()
        .take(SEGMENTS_SHOWN)
        .take_while(|s| s.share >= 0.000_05)
        .count();
    for s in &r.segments[..shown] {
        writeln!(
            out,
            "  {:<8} {:<37} {:>6.2}% of accesses, footprint {:>10}  {}",
            s.class,
            s.tree.range,
            100.0 * s.share,
            bytes(s.footprint_bytes),
            match s.mapping.as_deref() {
                None => "(not in the trace's mappings)",
                Some("") => "(anonymous)",
                Some(m) => m,
            }
        )?;
    }
    if let rest @ [_, ..] = &r.segments[shown..] {
        writeln!(
            out,
            "  ... {} more with {:.2}% of accesses in all (--format json lists them)",
            rest.len(),
            100.0 * rest.iter().map(|s| s.share).sum::<f64>()
        )?;
    }
    writeln!(
        out,
        "\nregions (hottest first; D = mean reuse distance in lines):"
    )?;
    writeln!(
        out,
        "  {:>3} {:<8} {:<15} {:<37} {:>7} {:>10} {:>10}  code",
        "id", "class", "kind", "range", "hot %", "footprint", "D"
    )?;
    for g in r.regions.iter().take(20) {
        writeln!(
            out,
            "  {:>3} {:<8} {:<15} {:<37} {:>7.2} {:>10} {:>10}  {}",
            g.id,
            g.class,
            g.kind,
            g.range,
            100.0 * g.share,
            bytes(g.footprint_bytes),
            opt(g.reuse_distance, 0),
            g.code
                .iter()
                .map(|c| format!("{} {:.0}%", short_source(&c.source), 100.0 * c.share))
                .collect::<Vec<_>>()
                .join("; ")
        )?;
    }
    if r.regions.len() > 20 {
        writeln!(
            out,
            "  ... {} more (--format json lists them)",
            r.regions.len() - 20
        )?;
    }
    // The interval tree: the level with about 16 nodes, poorest reuse flagged.
    if let Some(level) = r.intervals.iter().find(|l| l.len() <= 16) {
        writeln!(
            out,
            "\nexecution intervals ({} of the tree's {} levels shown; reuse = 1 - footprint/accesses):",
            1,
            r.intervals.len()
        )?;
        let worst = level
            .iter()
            .filter(|n| n.accesses > 0)
            .map(|n| n.reuse)
            .fold(f64::INFINITY, f64::min);
        for n in level.iter().filter(|n| n.accesses > 0) {
            writeln!(
                out,
                "  from access {:>12}: {:>10} accesses, footprint {:>10}, new {:>10}, reuse {:.3}{}",
                n.first_access,
                n.accesses,
                bytes(n.footprint_lines * 64),
                bytes(n.new_lines * 64),
                n.reuse,
                if n.reuse == worst { "  <- poorest reuse" } else { "" }
            )?;
        }
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

fn vector_line(v: &AffinityVector) -> String {
    format!(
        "A {:>10}  RD {:>8}  realized SA* {:>8.3} SD* {:>8.3}  potential SA* {:>8.3} SD* {:>8.3}",
        v.accesses,
        opt(v.rd, 1),
        v.sa_realized,
        v.sd_realized,
        v.sa_potential,
        v.sd_potential
    )
}

fn affinity_table(r: &AffinityReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} accesses ({}) from {} thread(s); blocks of {} B, offsets +-{}, n_r {}, n_si {}",
        r.trace,
        r.accesses,
        r.mode,
        r.threads,
        r.params.block,
        r.params.radius,
        r.params.ranks,
        r.n_si
    )?;
    writeln!(
        out,
        "hot lines (absolute locations): {}",
        r.hot_lines
            .iter()
            .map(|h| format!("{} ({})", h.addr, h.accesses))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    for g in &r.regions {
        writeln!(
            out,
            "\nregion {} {} {} {}{} ({} blocks){}",
            g.region,
            g.class,
            g.kind,
            g.range,
            if g.clipped { " [densest window]" } else { "" },
            g.blocks,
            g.code
                .as_deref()
                .map(|c| format!(": {}", short_source(c)))
                .unwrap_or_default()
        )?;
        writeln!(out, "  {}", vector_line(&g.vector))?;
        let n = g.block_table.sa_next.len().max(1) as f64;
        writeln!(
            out,
            "  mean per block: AI gamma SA(+1) {:.4}, SD(+1) {:.4}, SD(self) {:.4}; hot cluster {} blocks",
            g.block_table.sa_next.iter().sum::<f64>() / n,
            g.block_table.sd_next.iter().sum::<f64>() / n,
            g.block_table.sd_self.iter().sum::<f64>() / n,
            g.pdfs.hot_cluster_blocks
        )?;
        for p in &g.top_pairs {
            writeln!(
                out,
                "    {} -> {:<22} SA {:.3} SD {:.4} SI {:>8} gamma {:.1}  AI*gamma*SA {:.4}",
                p.reference,
                p.location,
                p.sa,
                p.sd,
                opt(p.si, 1),
                p.gamma,
                p.weighted_sa
            )?;
        }
    }
    writeln!(out, "\nall regions: {}", vector_line(&r.total))?;
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

fn compare_table(c: &AffinityComparison, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "A: {} ({})", c.a.label, c.a.file)?;
    writeln!(out, "B: {} ({})", c.b.label, c.b.file)?;
    writeln!(out, "all regions A: {}", vector_line(&c.a.total))?;
    writeln!(out, "all regions B: {}", vector_line(&c.b.total))?;
    for p in &c.regions {
        writeln!(out, "\nrank {} region:", p.rank)?;
        for (name, s) in [("A", &p.a), ("B", &p.b)] {
            match s {
                Some(s) => writeln!(
                    out,
                    "  {name} {} {}\n    {}  mean AI gamma SA(+1) {:.4}",
                    s.range,
                    s.code.as_deref().map(short_source).unwrap_or_default(),
                    vector_line(&s.vector),
                    s.sa_next_mean
                )?,
                None => writeln!(out, "  {name} (no region of this rank)")?,
            }
        }
        if let (Some(a), Some(b)) = (&p.a, &p.b) {
            let ratio = |x: f64, y: f64| {
                if x > 0.0 {
                    format!("{:.2}x", y / x)
                } else {
                    "-".into()
                }
            };
            writeln!(
                out,
                "  B/A: realized SA* {} SD* {}, potential SA* {} SD* {}",
                ratio(a.vector.sa_realized, b.vector.sa_realized),
                ratio(a.vector.sd_realized, b.vector.sd_realized),
                ratio(a.vector.sa_potential, b.vector.sa_potential),
                ratio(a.vector.sd_potential, b.vector.sd_potential)
            )?;
        }
    }
    Ok(())
}
