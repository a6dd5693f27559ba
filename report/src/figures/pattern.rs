//! Patterns: per configuration of a pattern file, its offsets against their position, the
//! deltas between consecutive offsets (symmetric log axis: deltas can be negative), a
//! 50-bin histogram of the deltas, and a table of statistics. A pattern longer than the
//! plot is wide is drawn as one min-max segment per pixel column.

use mgbench_replay::config::{Kernel, RunConfig};

use super::{column_ranges, num, Figure, Ids, Section, Table, COLUMNS};
use crate::inputs::PatternFile;
use crate::svg::{color, Axis, Plot, Scale};

/// Configurations drawn per report (the rest are listed in the stats table only).
pub const MAX_CONFIGS: usize = 48;
const BINS: usize = 50;

/// Statistics of one pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub length: usize,
    pub span: u64,
    pub distinct: usize,
    pub delta_mean: f64,
    pub delta_variance: f64,
    /// Share of consecutive pairs whose elements (8 bytes each) share a 64-byte line.
    pub same_line: f64,
}

pub fn stats(p: &[usize]) -> Stats {
    let n = p.len();
    let (lo, hi) = p
        .iter()
        .fold((usize::MAX, 0usize), |(a, b), &x| (a.min(x), b.max(x)));
    let mut sorted = p.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let deltas = p.windows(2).map(|w| w[1] as f64 - w[0] as f64);
    let m = (n.saturating_sub(1)).max(1) as f64;
    let mean = deltas.clone().sum::<f64>() / m;
    let var = deltas.map(|d| (d - mean) * (d - mean)).sum::<f64>() / m;
    let same = p.windows(2).filter(|w| w[0] / 8 == w[1] / 8).count() as f64 / m;
    Stats {
        length: n,
        span: if n == 0 { 0 } else { (hi - lo) as u64 + 1 },
        distinct: sorted.len(),
        delta_mean: if n > 1 { mean } else { 0.0 },
        delta_variance: if n > 1 { var } else { 0.0 },
        same_line: if n > 1 { same } else { 0.0 },
    }
}

/// The indices a configuration applies to its sparse buffer (gs: the gather side), or None
/// for the apex kernel, which has no pattern.
fn indices(c: &RunConfig) -> Option<Vec<usize>> {
    match &c.kernel {
        Kernel::Apex(_) => None,
        k => Some(k.effective_pattern().0),
    }
}

/// One section per pattern file.
pub fn sections(files: &[PatternFile], ids: &mut Ids) -> Vec<Section> {
    let mut budget = MAX_CONFIGS;
    files
        .iter()
        .map(|f| {
            let mut figures = Vec::new();
            let mut table = Table::new(&[
                "config",
                "kernel",
                "length",
                "span",
                "distinct_offsets",
                "delta_mean",
                "delta_variance",
                "share_within_one_line",
                "delta",
                "count",
            ]);
            let mut skipped = 0;
            for c in &f.configs {
                let Some(p) = indices(c) else { continue };
                let s = stats(&p);
                table.push(vec![
                    c.name.clone(),
                    c.kernel.kind().as_str().into(),
                    s.length.to_string(),
                    s.span.to_string(),
                    s.distinct.to_string(),
                    num(s.delta_mean),
                    num(s.delta_variance),
                    num(s.same_line),
                    c.kernel.delta().to_string(),
                    c.count.to_string(),
                ]);
                if budget == 0 {
                    skipped += 1;
                    continue;
                }
                budget -= 1;
                figures.extend(config_figures(&f.path.display().to_string(), c, &p, ids));
            }
            let mut intro = format!(
                "{} config(s). Offsets are element indices (8-byte elements); deltas are the differences between consecutive offsets.",
                f.configs.len()
            );
            if skipped > 0 {
                intro.push_str(&format!(
                    " {skipped} config(s) beyond the report's {MAX_CONFIGS} drawn configurations appear in the statistics table only."
                ));
            }
            Section {
                id: ids.make(&format!("patterns-{}", f.path.display())),
                title: format!("Patterns of {}", f.path.display()),
                intro,
                figures,
                tables: vec![("Pattern statistics".into(), table)],
            }
        })
        .collect()
}

/// Points of a series, one per position when it fits, else min-max per column; returns the
/// table of what was drawn.
fn draw_series(p: &mut Plot, ys: &[f64], c: &str, what: &str) -> Table {
    let n = ys.len();
    if n <= COLUMNS {
        let mut table = Table::new(&["position", what]);
        for (i, &y) in ys.iter().enumerate() {
            p.point(i as f64, y, 2.0, c, &format!("{what} {i}: {y}"));
            table.push(vec![i.to_string(), num(y)]);
        }
        return table;
    }
    let mut table = Table::new(&["positions", &format!("{what}s (min to max)")]);
    for (a, b, lo, hi) in column_ranges(ys) {
        p.vsegment(
            ((a + b - 1) as f64) / 2.0,
            lo,
            hi,
            c,
            &format!("{what}s {a}-{}: {lo} to {hi}", b - 1),
        );
        table.push(vec![
            format!("{a}-{}", b - 1),
            format!("{} to {}", num(lo), num(hi)),
        ]);
    }
    table
}

fn config_figures(file: &str, c: &RunConfig, p: &[usize], ids: &mut Ids) -> Vec<Figure> {
    let n = p.len();
    let base = format!("{file}-{}", c.name);
    let offsets: Vec<f64> = p.iter().map(|&x| x as f64).collect();
    let deltas: Vec<f64> = p.windows(2).map(|w| w[1] as f64 - w[0] as f64).collect();
    let sampled = n > COLUMNS;
    let mut out = Vec::new();
    let xscale = Scale::Linear {
        min: -0.5,
        max: (n.max(2) - 1) as f64 + 0.5,
    };
    // Offsets.
    let id = ids.make(&format!("offsets-{base}"));
    let mut plot = Plot::new(
        &id,
        640.0,
        260.0,
        78.0,
        Axis::new(xscale, "position in the pattern"),
        Axis::new(
            Scale::linear_over(offsets.iter().copied(), true),
            "offset (elements)",
        ),
    );
    let t = draw_series(&mut plot, &offsets, color(0), "offset");
    out.push(Figure {
        id,
        title: format!("{}: offsets", c.name),
        caption: format!(
            "The {n} offsets of {} ({}){} in the order the kernel applies them.",
            c.name,
            c.kernel.kind(),
            if sampled {
                format!(", drawn as the min-max range of each of {COLUMNS} columns")
            } else {
                String::new()
            }
        ),
        svg: plot.finish(),
        table: t,
        notes: Vec::new(),
    });
    if deltas.is_empty() {
        return out;
    }
    // Deltas, symmetric log.
    let id = ids.make(&format!("deltas-{base}"));
    let mut plot = Plot::new(
        &id,
        640.0,
        260.0,
        78.0,
        Axis::new(
            Scale::Linear {
                min: -0.5,
                max: (deltas.len().max(2) - 1) as f64 + 0.5,
            },
            "position in the pattern",
        ),
        Axis::new(Scale::symlog_over(deltas.iter().copied()), "delta (symlog)"),
    );
    let t = draw_series(&mut plot, &deltas, color(1), "delta");
    plot.hreference(0.0, "#999", crate::svg::Dash::Solid, "delta 0", None);
    out.push(Figure {
        id,
        title: format!("{}: deltas", c.name),
        caption: "The difference between each offset and the next (linear within +-1, logarithmic beyond): +1 is unit stride, large values are jumps, negative ones go back.".into(),
        svg: plot.finish(),
        table: t,
        notes: Vec::new(),
    });
    // Histogram of deltas.
    let (dlo, dhi) = deltas
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    let bins = if dhi > dlo { BINS } else { 1 };
    let width = if dhi > dlo {
        (dhi - dlo) / bins as f64
    } else {
        1.0
    };
    let mut counts = vec![0u64; bins];
    for &d in &deltas {
        let b = (((d - dlo) / width) as usize).min(bins - 1);
        counts[b] += 1;
    }
    let id = ids.make(&format!("delta-histogram-{base}"));
    let xmin = dlo - if bins == 1 { 0.5 } else { 0.0 };
    let xmax = xmin + width * bins as f64;
    let mut plot = Plot::new(
        &id,
        640.0,
        260.0,
        78.0,
        Axis::new(
            Scale::Linear {
                min: xmin,
                max: xmax,
            },
            "delta (elements)",
        ),
        Axis::new(
            Scale::linear_over(counts.iter().map(|&c| c as f64), true),
            "pairs",
        ),
    );
    let mut t = Table::new(&["delta_from", "delta_to", "pairs"]);
    for (b, &cnt) in counts.iter().enumerate() {
        let (a, z) = (xmin + b as f64 * width, xmin + (b + 1) as f64 * width);
        if cnt > 0 {
            plot.rect(
                a,
                0.0,
                z,
                cnt as f64,
                color(2),
                &format!("deltas {a:.1} to {z:.1}: {cnt} pair(s)"),
            );
        }
        t.push(vec![num(a), num(z), cnt.to_string()]);
    }
    out.push(Figure {
        id,
        title: format!("{}: delta histogram", c.name),
        caption: format!("How often each delta occurs, in {bins} equal bins from the smallest to the largest delta."),
        svg: plot.finish(),
        table: t,
        notes: Vec::new(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_a_small_pattern() {
        // 0 1 2 3 | 35 36: deltas 1 1 1 32 1; pairs in one line: (0,1)(1,2)(2,3) and (35,36)?
        // 35/8 = 4, 36/8 = 4: yes. 3/8 = 0 vs 35/8 = 4: no. So 4 of 5.
        let s = stats(&[0, 1, 2, 3, 35, 36]);
        assert_eq!((s.length, s.span, s.distinct), (6, 37, 6));
        assert!((s.delta_mean - 36.0 / 5.0).abs() < 1e-12);
        assert!((s.same_line - 0.8).abs() < 1e-12);
        let want_var = [1.0f64, 1.0, 1.0, 32.0, 1.0]
            .iter()
            .map(|d| (d - 7.2) * (d - 7.2))
            .sum::<f64>()
            / 5.0;
        assert!((s.delta_variance - want_var).abs() < 1e-9);
        let s = stats(&[5, 5, 5]);
        assert_eq!((s.distinct, s.span), (1, 1));
        assert_eq!(s.same_line, 1.0);
    }
}
