//! Locality (from `mgbench analyze` output, or a trace analysed here): the reuse-distance
//! histogram, the reuse-distance CDFs in words and in lines with markers at this machine's
//! L1/L2/LLC capacities, the stride histogram, the footprint per window, and the Apex-MAP
//! (L, K) proxy on its grid.

use mgbench_synth::analyze::LocalityReport;
use mgbench_synth::apex::{GRID_K, GRID_L};
use mgbench_synth::locality::ReuseCurve;

use super::{column_ranges, num, Figure, Ids, Section, Table, COLUMNS};
use crate::svg::{color, fmt_count, Axis, Dash, Plot, Scale};

/// The histogram's buckets of a reuse CDF: distance 0, [2^(k-1), 2^k) for k = 1..=17, at or
/// beyond N, cold; as (label, fraction).
pub fn buckets(c: &ReuseCurve) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut prev = 0.0;
    for (k, p) in c.below.iter().enumerate() {
        let label = if k == 0 {
            "0".to_string()
        } else {
            format!("{}-{}", 1u64 << (k - 1), (1u64 << k) - 1)
        };
        out.push((label, (p.fraction - prev).max(0.0)));
        prev = p.fraction;
    }
    out.push((">=N".into(), c.beyond));
    out.push(("cold".into(), c.cold));
    out
}

fn bucket_label(v: f64) -> String {
    let k = v.round() as i64;
    match k {
        0 => "0".into(),
        1..=17 => fmt_count((1u64 << (k - 1)) as f64),
        18 => ">=N".into(),
        19 => "cold".into(),
        _ => String::new(),
    }
}

fn stride_label(v: f64) -> String {
    match v.round() as i64 {
        9 => ">8".into(),
        k @ 0..=8 => k.to_string(),
        _ => String::new(),
    }
}

/// One section per analysis.
pub fn sections(analyses: &[(String, LocalityReport)], ids: &mut Ids) -> Vec<Section> {
    let caches = crate::sys::caches();
    analyses
        .iter()
        .map(|(src, r)| {
            let name = r.program.as_deref().unwrap_or(src);
            let base = src.to_string();
            let mut figures = vec![histogram(r, &base, ids)];
            figures.push(cdf(&r.program_locality.reuse_histogram, "words", 8, &caches, &base, ids));
            if let Some(l) = &r.program_locality.reuse_histogram_lines {
                figures.push(cdf(l, "lines", 64, &caches, &base, ids));
            }
            figures.push(strides(r, &base, ids));
            if let Some(f) = footprint(r, &base, ids) {
                figures.push(f);
            }
            if let Some(f) = apex(r, &base, ids) {
                figures.push(f);
            }
            let mut tables = Vec::new();
            let mut t = Table::new(&[
                "function",
                "references",
                "spatial_score",
                "temporal_score",
                "mean_blocks_per_window",
                "growth",
                "apex_l",
                "apex_k",
            ]);
            let mut row = |f: &str, l: &mgbench_synth::analyze::Locality| {
                t.push(vec![
                    f.to_string(),
                    l.references.to_string(),
                    num(l.spatial_score),
                    num(l.temporal_score),
                    num(l.footprint.mean_blocks),
                    num(l.footprint.growth),
                    l.apex.as_ref().map(|a| a.l.to_string()).unwrap_or_default(),
                    l.apex.as_ref().map(|a| num(a.k)).unwrap_or_default(),
                ]);
            };
            row("(program)", &r.program_locality);
            for f in &r.functions {
                row(&f.function, &f.locality);
            }
            tables.push(("Scores".to_string(), t));
            let mut intro = format!(
                "{} trace of {}: {} accesses, sample ratio {}; spatial score {:.3}, temporal score {:.3}.",
                r.mode,
                name,
                r.accesses,
                r.sample_ratio_text(),
                r.program_locality.spatial_score,
                r.program_locality.temporal_score
            );
            if caches.is_empty() {
                intro.push_str(" (This machine's cache sizes are unknown: no markers.)");
            } else {
                intro.push_str(&format!(
                    " Cache markers: the machine that made this report ({}).",
                    caches
                        .iter()
                        .map(|(n, b)| format!("{n} {}", crate::svg::fmt_bytes(*b as f64)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            for n in &r.notes {
                intro.push_str(&format!(" Note: {n}."));
            }
            Section {
                id: ids.make(&format!("locality-{src}")),
                title: format!("Locality of {name}"),
                intro,
                figures,
                tables,
            }
        })
        .collect()
}

fn histogram(r: &LocalityReport, base: &str, ids: &mut Ids) -> Figure {
    let words = buckets(&r.program_locality.reuse_histogram);
    let lines = r
        .program_locality
        .reuse_histogram_lines
        .as_ref()
        .map(buckets);
    let ymax = words
        .iter()
        .chain(lines.iter().flatten())
        .map(|b| b.1)
        .fold(0.0, f64::max)
        .max(1e-9);
    let id = ids.make(&format!("reuse-histogram-{base}"));
    let mut p = Plot::new(
        &id,
        700.0,
        300.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: -0.6,
                max: 19.6,
            },
            "reuse distance (distinct words or lines in between)",
        )
        .with_format(bucket_label),
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: ymax * 1.08,
            },
            "fraction of references",
        ),
    )
    .x_ticks((0..20).map(f64::from).collect());
    let mut t = Table::new(&["distance", "words_fraction", "lines_fraction"]);
    let w = if lines.is_some() { 0.4 } else { 0.8 };
    for (k, (label, f)) in words.iter().enumerate() {
        let x = k as f64;
        let off = if lines.is_some() { -0.2 } else { 0.0 };
        p.rect(
            x + off - w / 2.0,
            0.0,
            x + off + w / 2.0,
            *f,
            color(0),
            &format!("words, distance {label}: {f:.4}"),
        );
        let lf = lines.as_ref().map(|l| l[k].1);
        if let Some(lf) = lf {
            p.rect(
                x + 0.2 - w / 2.0,
                0.0,
                x + 0.2 + w / 2.0,
                lf,
                color(1),
                &format!("lines, distance {label}: {lf:.4}"),
            );
        }
        t.push(vec![
            label.clone(),
            num(*f),
            lf.map(num).unwrap_or_default(),
        ]);
    }
    p.legend("8-byte words", color(0), Dash::Solid, true);
    if lines.is_some() {
        p.legend("64-byte lines", color(1), Dash::Solid, true);
    }
    Figure {
        id,
        title: "Reuse-distance histogram".into(),
        caption: "Fraction of references by reuse distance: 0 (the same word again), then power-of-two ranges, then at or beyond N = 131072, and first touches (cold).".into(),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    }
}

fn cdf(
    c: &ReuseCurve,
    unit: &str,
    unit_bytes: u64,
    caches: &[(String, u64)],
    base: &str,
    ids: &mut Ids,
) -> Figure {
    let id = ids.make(&format!("reuse-cdf-{unit}-{base}"));
    let xs = c.below.iter().map(|p| p.distance as f64);
    let mut p = Plot::new(
        &id,
        640.0,
        300.0,
        64.0,
        Axis::new(
            Scale::log2_over(xs),
            &format!("reuse distance d ({unit}, log2 scale)"),
        )
        .with_format(fmt_count),
        Axis::new(
            Scale::Linear { min: 0.0, max: 1.0 },
            "fraction reused below d",
        ),
    );
    let pts: Vec<(f64, f64)> = c
        .below
        .iter()
        .map(|q| (q.distance as f64, q.fraction))
        .collect();
    let col = if unit == "words" { color(0) } else { color(1) };
    p.line(&pts, col, Dash::Solid, &format!("reuse CDF in {unit}"));
    let mut t = Table::new(&["distance", "fraction_below"]);
    for &(d, f) in &pts {
        p.point(
            d,
            f,
            2.5,
            col,
            &format!("{f:.4} of references reused below {d} {unit}"),
        );
        t.push(vec![num(d), num(f)]);
    }
    for (i, (name, bytes)) in caches.iter().enumerate() {
        let cap = (*bytes / unit_bytes) as f64;
        p.reference(
            (cap, 0.0),
            (cap, 1.0),
            color(3 + i),
            Dash::Dashed,
            &format!(
                "{name}: {} = {cap} {unit}",
                crate::svg::fmt_bytes(*bytes as f64)
            ),
            Some(name),
        );
    }
    Figure {
        id,
        title: format!("Reuse-distance CDF in {unit}"),
        caption: format!("Fraction of references whose reuse distance (distinct {unit} in between) is below d. A reference reused within a cache's capacity in {unit} (dashed markers, this machine) can hit in a fully associative LRU cache of that size."),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    }
}

fn strides(r: &LocalityReport, base: &str, ids: &mut Ids) -> Figure {
    let h = &r.program_locality.stride_histogram;
    let total: u64 = h.iter().sum();
    let fr: Vec<f64> = h
        .iter()
        .map(|&c| {
            if total > 0 {
                c as f64 / total as f64
            } else {
                0.0
            }
        })
        .collect();
    let id = ids.make(&format!("strides-{base}"));
    let mut p = Plot::new(
        &id,
        520.0,
        280.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: -0.6,
                max: 9.6,
            },
            "stride (words to the nearest of the last 32 addresses)",
        )
        .with_format(stride_label),
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: fr.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.08,
            },
            "fraction of references",
        ),
    )
    .x_ticks((0..10).map(f64::from).collect());
    let mut t = Table::new(&["stride", "references", "fraction"]);
    for (k, (&c, &f)) in h.iter().zip(&fr).enumerate() {
        let label = stride_label(k as f64);
        p.rect(
            k as f64 - 0.4,
            0.0,
            k as f64 + 0.4,
            f,
            color(2),
            &format!("stride {label}: {c} references ({f:.4})"),
        );
        t.push(vec![label, c.to_string(), num(f)]);
    }
    Figure {
        id,
        title: "Stride histogram".into(),
        caption: "Each reference's stride is its smallest distance in 8-byte words to the previous 32 references (0: the same word, the temporal score's business); the spatial score weights stride i by 1/i.".into(),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    }
}

fn footprint(r: &LocalityReport, base: &str, ids: &mut Ids) -> Option<Figure> {
    let w = &r.program_locality.footprint.per_window;
    if w.is_empty() {
        return None;
    }
    let ys: Vec<f64> = w.iter().map(|x| x.blocks as f64).collect();
    let id = ids.make(&format!("footprint-{base}"));
    let mut p = Plot::new(
        &id,
        640.0,
        280.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: -0.5,
                max: (ys.len().max(2) - 1) as f64 + 0.5,
            },
            "window (in order)",
        ),
        Axis::new(
            Scale::linear_over(ys.iter().copied(), true),
            "distinct 64-byte blocks",
        ),
    );
    let mut t = Table::new(&[
        "window",
        "accesses",
        "blocks",
        "strided_blocks",
        "irregular_blocks",
    ]);
    let n = ys.len();
    if n <= COLUMNS {
        let pts: Vec<(f64, f64)> = ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect();
        p.line(&pts, color(0), Dash::Solid, "distinct blocks per window");
        for (i, x) in w.iter().enumerate() {
            p.point(
                i as f64,
                x.blocks as f64,
                2.0,
                color(0),
                &format!(
                    "window {i}: {} blocks in {} accesses ({} strided, {} irregular)",
                    x.blocks, x.accesses, x.strided_blocks, x.irregular_blocks
                ),
            );
        }
    } else {
        for (a, b, lo, hi) in column_ranges(&ys) {
            p.vsegment(
                (a + b - 1) as f64 / 2.0,
                lo,
                hi,
                color(0),
                &format!("windows {a}-{}: {lo} to {hi} blocks", b - 1),
            );
        }
    }
    for (i, x) in w.iter().enumerate() {
        t.push(vec![
            i.to_string(),
            x.accesses.to_string(),
            x.blocks.to_string(),
            x.strided_blocks.to_string(),
            x.irregular_blocks.to_string(),
        ]);
    }
    let f = &r.program_locality.footprint;
    Some(Figure {
        id,
        title: "Footprint per window".into(),
        caption: format!(
            "Distinct 64-byte blocks in each window (MemGaze's F; a window is a sample, or 1024 accesses of a full trace), the first {} of {} windows. Mean {:.1} blocks, growth {:.3} blocks per access. Footprint {}.",
            w.len(), f.windows, f.mean_blocks, f.growth, f.total_summary()
        ),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    })
}

fn apex(r: &LocalityReport, base: &str, ids: &mut Ids) -> Option<Figure> {
    let a = r.program_locality.apex.as_ref()?;
    let id = ids.make(&format!("apex-{base}"));
    let mut p = Plot::new(
        &id,
        520.0,
        340.0,
        64.0,
        Axis::new(
            Scale::Log2 {
                min: GRID_L[0] as f64,
                max: GRID_L[GRID_L.len() - 1] as f64,
            },
            "Apex-MAP L (block length in words, log2)",
        ),
        Axis::new(
            Scale::Log {
                min: 0.001,
                max: 1.0,
            },
            "Apex-MAP K (locality exponent, log)",
        ),
    );
    for &l in &GRID_L {
        for &k in &GRID_K {
            p.ref_point(l as f64, k, "#bbb", &format!("grid point L = {l}, K = {k}"));
        }
    }
    p.point(
        a.l as f64,
        a.k.clamp(0.001, 1.0),
        6.0,
        color(3),
        &format!(
            "fitted proxy: L = {}, K = {} ({}), residual {:.3}; its stream scores spatial {:.3}, temporal {:.3}",
            a.l, a.k, a.method, a.residual, a.spatial, a.temporal
        ),
    );
    let mut t = Table::new(&["l", "k", "m", "spatial", "temporal", "residual", "method"]);
    t.push(vec![
        a.l.to_string(),
        num(a.k),
        a.m.to_string(),
        num(a.spatial),
        num(a.temporal),
        num(a.residual),
        a.method.clone(),
    ]);
    Some(Figure {
        id,
        title: "Apex-MAP proxy".into(),
        caption: format!("The (L, K) whose Apex-MAP stream scores closest to the program (residual {:.3}), among the grid the fit scored (grey). Replay it: mgbench replay --kernel apex --apex-l {} --apex-k {}.", a.residual, a.l, a.k),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    })
}
