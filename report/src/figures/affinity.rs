//! Spatial-temporal affinity (from `mgbench affinity -o` and `--compare -o` output) and the
//! execution-interval tree of `mgbench zoom -o`: the three heatmaps of the hottest region
//! (SD, SA, SI: reference blocks by hotness on x, offsets and hot lines on y), its affinity
//! signal, the PDFs of the per-block scores over its hot cluster, and a radar of the
//! affinity vectors; for a comparison, both variants' radar and PDFs together.

use mgbench_capture::symbols::short_source;
use mgbench_synth::affinity::{
    AffinityComparison, AffinityReport, AffinityVector, HeatCell, Heatmap, Pdf, RegionReport,
    ZoomReport,
};

use super::{num, Figure, Ids, Section, Table};
use crate::svg::{color, Axis, Dash, Plot, Scale};

/// Cells listed in a heatmap's data table (the strongest; the JSON has them all).
const TABLE_CELLS: usize = 200;

/// One section per affinity report.
pub fn sections(reports: &[(String, AffinityReport)], ids: &mut Ids) -> Vec<Section> {
    reports
        .iter()
        .map(|(src, r)| {
            let name = r.command.first().map_or(src.as_str(), String::as_str);
            let mut figures = Vec::new();
            if let Some(g) = r.regions.first() {
                for what in [Heat::Sd, Heat::Sa, Heat::Si] {
                    figures.push(heatmap(g, what, src, ids));
                }
                figures.push(signal(g, src, ids));
                figures.push(pdfs(&[("", g)], src, ids));
            }
            let vectors: Vec<(String, AffinityVector)> = r
                .regions
                .iter()
                .take(6)
                .map(|g| (format!("region {} {}", g.region, g.range), g.vector))
                .collect();
            figures.push(radar(&vectors, "affinity vectors of the hottest regions", src, ids));
            let mut intro = format!(
                "Affinity over {} ({} accesses, {}): blocks of {} B, offsets within +-{} blocks and {} hot lines, n_r {}, n_si {}.",
                r.trace,
                r.accesses,
                r.mode,
                r.params.block,
                r.params.radius,
                r.hot_lines.len(),
                r.params.ranks,
                r.n_si
            );
            if let Some(g) = r.regions.first() {
                intro.push_str(&format!(
                    " The heatmaps, signal and PDFs are of the hottest region, {} {} ({}).",
                    g.class,
                    g.range,
                    g.code
                        .as_deref()
                        .map_or("code unknown".into(), short_source)
                ));
            }
            for n in &r.notes {
                intro.push_str(&format!(" Note: {n}."));
            }
            Section {
                id: ids.make(&format!("affinity-{src}")),
                title: format!("Spatial-temporal affinity of {name}"),
                intro,
                figures,
                tables: Vec::new(),
            }
        })
        .collect()
}

/// One section per comparison.
pub fn comparison_sections(cmps: &[(String, AffinityComparison)], ids: &mut Ids) -> Vec<Section> {
    cmps.iter()
        .map(|(src, c)| {
            let mut figures = vec![radar(
                &[
                    (format!("A: {}", c.a.label), c.a.total),
                    (format!("B: {}", c.b.label), c.b.total),
                ],
                "affinity vectors of A and B (all regions of interest)",
                src,
                ids,
            )];
            if let Some(p) = c.regions.iter().find(|p| p.a.is_some() && p.b.is_some()) {
                let (a, b) = (p.a.as_ref().unwrap(), p.b.as_ref().unwrap());
                figures.push(pdf_figure(
                    &[("A", &a.pdfs.sa_realized), ("B", &b.pdfs.sa_realized)],
                    "realized SA* per block",
                    &format!("{src}-cmp-sa"),
                    ids,
                ));
                figures.push(pdf_figure(
                    &[("A", &a.pdfs.sd_realized), ("B", &b.pdfs.sd_realized)],
                    "realized SD* per block",
                    &format!("{src}-cmp-sd"),
                    ids,
                ));
            }
            Section {
                id: ids.make(&format!("affinity-compare-{src}")),
                title: format!("Affinity: {} vs {}", c.a.label, c.b.label),
                intro: format!(
                    "A is {} ({}), B is {} ({}); regions are paired by the code that touches them, else by hotness.",
                    c.a.label, c.a.file, c.b.label, c.b.file
                ),
                figures,
                tables: Vec::new(),
            }
        })
        .collect()
}

/// One section per zoom report: the execution-interval tree's leaves over time.
pub fn zoom_sections(zooms: &[(String, ZoomReport)], ids: &mut Ids) -> Vec<Section> {
    zooms
        .iter()
        .map(|(src, z)| {
            let id = ids.make(&format!("zoom-intervals-{src}"));
            let leaves = z.intervals.first().cloned().unwrap_or_default();
            let xs: Vec<f64> = leaves.iter().map(|n| n.first_access as f64).collect();
            let mut p = Plot::new(
                &id,
                720.0,
                300.0,
                64.0,
                Axis::new(Scale::linear_over(xs.iter().copied(), true), "access index (start of interval)"),
                Axis::new(Scale::Linear { min: 0.0, max: 1.05 }, "share of the interval's accesses"),
            );
            let reuse: Vec<(f64, f64)> = leaves.iter().map(|n| (n.first_access as f64, n.reuse)).collect();
            let new: Vec<(f64, f64)> = leaves
                .iter()
                .map(|n| (n.first_access as f64, n.new_lines as f64 / n.accesses.max(1) as f64))
                .collect();
            p.line(&reuse, color(0), Dash::Solid, "reuse = 1 - footprint / accesses");
            p.line(&new, color(1), Dash::Dashed, "lines touched for the first time / accesses");
            p.legend("reuse (1 - footprint/accesses)", color(0), Dash::Solid, false);
            p.legend("first touches / accesses", color(1), Dash::Dashed, false);
            let mut t = Table::new(&["first_access", "accesses", "footprint_lines", "new_lines", "reuse"]);
            for n in &leaves {
                t.push(vec![
                    n.first_access.to_string(),
                    n.accesses.to_string(),
                    n.footprint_lines.to_string(),
                    n.new_lines.to_string(),
                    num(n.reuse),
                ]);
            }
            let fig = Figure {
                id,
                title: "Execution intervals: reuse and footprint growth over time".into(),
                caption: format!(
                    "The leaves of the execution-interval tree ({} intervals of equal access count). A dip in reuse is a phase whose accesses spread over many lines; first touches show where the footprint grows.",
                    leaves.len()
                ),
                svg: p.finish(),
                table: t,
                notes: Vec::new(),
            };
            let hottest = z
                .regions
                .iter()
                .take(3)
                .map(|r| format!("{} {} ({:.1}%)", r.class, r.range, 100.0 * r.share))
                .collect::<Vec<_>>()
                .join(", ");
            Section {
                id: ids.make(&format!("zoom-{src}")),
                title: format!(
                    "Zoom of {}",
                    z.command.first().map_or(src.as_str(), String::as_str)
                ),
                intro: format!(
                    "{} accesses in {} segment(s) and {} final region(s); hottest: {hottest}.",
                    z.accesses,
                    z.segments.len(),
                    z.regions.len()
                ),
                figures: vec![fig],
                tables: Vec::new(),
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Heat {
    Sd,
    Sa,
    Si,
}

/// White to a blue of intensity `v` in [0, 1].
fn shade(v: f64) -> String {
    let v = v.clamp(0.0, 1.0);
    let c = |full: f64| (255.0 - (255.0 - full) * v).round() as u8;
    format!("rgb({},{},{})", c(0.0), c(114.0), c(178.0))
}

/// What heatmap row `y` stands for: "+3" (an offset) or "hot 0x..." (a hot line).
fn location(h: &Heatmap, y: u32) -> String {
    let r = h.radius as usize;
    match (y as usize).checked_sub(2 * r + 1) {
        Some(k) => format!("hot {:#x}", h.hot_lines[k]),
        None => format!("{:+}", y as i64 - r as i64),
    }
}

fn heatmap(g: &RegionReport, what: Heat, base: &str, ids: &mut Ids) -> Figure {
    let (key, label) = match what {
        Heat::Sd => ("sd", "spatial density SD(j|i)"),
        Heat::Sa => ("sa", "spatial anticipation SA(j|i)"),
        Heat::Si => ("si", "spatial interval SI(i,j) (darker = shorter)"),
    };
    let id = ids.make(&format!("affinity-heat-{key}-{base}"));
    let h = &g.heatmap;
    let r = f64::from(h.radius);
    let hot = h.hot_lines.len() as f64;
    let value = |c: &HeatCell| match what {
        Heat::Sd => Some(c.3),
        Heat::Sa => Some(c.2),
        Heat::Si => c.4,
    };
    let max = h
        .cells
        .iter()
        .filter_map(value)
        .fold(0.0f64, f64::max)
        .max(1e-12);
    let mut p = Plot::new(
        &id,
        720.0,
        420.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: -0.5,
                max: h.reference.len().max(1) as f64 - 0.5,
            },
            "reference block i (hottest first)",
        ),
        Axis::new(
            Scale::Linear {
                min: -r - 0.5,
                max: r + hot + 0.5,
            },
            "offset j - i in blocks (above +R: hot lines)",
        ),
    );
    if hot > 0.0 {
        p.hreference(
            r + 0.5,
            "#888888",
            Dash::Dashed,
            "hot lines above",
            Some("hot lines"),
        );
    }
    let mut cells: Vec<(f64, &HeatCell)> = Vec::new();
    for c in &h.cells {
        let Some(v) = value(c) else { continue };
        if v <= 0.0 && !matches!(what, Heat::Si) {
            continue;
        }
        let x = f64::from(c.0);
        let y = f64::from(c.1) - r;
        let intensity = match what {
            // Short intervals are good: 1 at SI = 0, fading on a log scale.
            Heat::Si => 1.0 - ((1.0 + v).ln() / (1.0 + max).ln()).min(1.0) * 0.9,
            _ => (v / max).sqrt(),
        };
        let loc = location(h, c.1);
        p.rect(
            x - 0.5,
            y - 0.5,
            x + 0.5,
            y + 0.5,
            &shade(intensity),
            &format!(
                "block {:#x}, {loc}: {key} {}",
                h.reference[c.0 as usize],
                num(v)
            ),
        );
        let strength = match what {
            Heat::Si => -v,
            _ => v,
        };
        cells.push((strength, c));
    }
    cells.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut t = Table::new(&["reference", "location", "SA", "SD", "SI"]);
    for (_, c) in cells.iter().take(TABLE_CELLS) {
        t.push(vec![
            format!("{:#x}", h.reference[c.0 as usize]),
            location(h, c.1),
            num(c.2),
            num(c.3),
            c.4.map_or("-".into(), num),
        ]);
    }
    let mut notes = Vec::new();
    if cells.len() > TABLE_CELLS {
        notes.push(format!(
            "the table lists the {TABLE_CELLS} strongest of {} cells; the JSON has every one",
            cells.len()
        ));
    }
    Figure {
        id,
        title: format!("Affinity heatmap: {label}"),
        caption: format!(
            "Region {} ({}): for each of its {} hottest blocks i (x) and each affinity location j (y: offsets -{}..+{} blocks, then the hot lines), {label}. The same (i, j) sits at the same place in all three heatmaps.",
            g.region,
            g.range,
            h.reference.len(),
            h.radius,
            h.radius
        ),
        svg: p.finish(),
        table: t,
        notes,
    }
}

/// At most `n` points of a series: the largest value per bucket (peaks stay visible).
fn thin(ys: &[f64], n: usize) -> Vec<(f64, f64)> {
    if ys.len() <= n {
        return ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect();
    }
    let per = ys.len().div_ceil(n);
    ys.chunks(per)
        .enumerate()
        .map(|(k, c)| ((k * per) as f64, c.iter().copied().fold(0.0, f64::max)))
        .collect()
}

fn signal(g: &RegionReport, base: &str, ids: &mut Ids) -> Figure {
    let id = ids.make(&format!("affinity-signal-{base}"));
    let t = &g.block_table;
    let series: [(&str, &[f64]); 4] = [
        ("access frequency AI", &t.ai),
        ("SA* of +1", &t.sa_next),
        ("SD* of +1", &t.sd_next),
        ("SD* of self", &t.sd_self),
    ];
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(0.0, f64::max)
        .max(1e-9);
    let mut p = Plot::new(
        &id,
        720.0,
        300.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: t.addr.len().max(2) as f64 - 1.0,
            },
            "reference blocks in address order",
        ),
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: ymax * 1.05,
            },
            "score (weighted by AI)",
        ),
    );
    for (k, (name, ys)) in series.iter().enumerate() {
        p.line(&thin(ys, 600), color(k), Dash::Solid, name);
        p.legend(name, color(k), Dash::Solid, false);
    }
    let mut tb = Table::new(&["block", "accesses", "AI", "SA*_+1", "SD*_+1", "SD*_self"]);
    let step = t.addr.len().div_ceil(300).max(1);
    for k in (0..t.addr.len()).step_by(step) {
        tb.push(vec![
            format!("{:#x}", t.addr[k]),
            t.accesses[k].to_string(),
            num(t.ai[k]),
            num(t.sa_next[k]),
            num(t.sd_next[k]),
            num(t.sd_self[k]),
        ]);
    }
    Figure {
        id,
        title: "Affinity signal".into(),
        caption: format!(
            "Region {} ({}), its {} accessed blocks in address order: access frequency AI and the weighted anticipation and density of the next block (+1) and of the block itself. A layout that suits the access order keeps SA* of +1 high across the region.",
            g.region,
            g.range,
            t.addr.len()
        ),
        svg: p.finish(),
        table: tb,
        notes: if step > 1 {
            vec![format!("the table lists every {step}th block")]
        } else {
            Vec::new()
        },
    }
}

fn pdfs(regions: &[(&str, &RegionReport)], base: &str, ids: &mut Ids) -> Figure {
    let g = regions[0].1;
    pdf_figure(
        &[
            ("realized SA*", &g.pdfs.sa_realized),
            ("realized SD*", &g.pdfs.sd_realized),
            ("potential SA*", &g.pdfs.sa_potential),
            ("potential SD*", &g.pdfs.sd_potential),
        ],
        &format!(
            "per-block scores over the hot cluster ({} blocks)",
            g.pdfs.hot_cluster_blocks
        ),
        &format!("{base}-pdf"),
        ids,
    )
}

fn pdf_figure(series: &[(&str, &Pdf)], what: &str, base: &str, ids: &mut Ids) -> Figure {
    let id = ids.make(&format!("affinity-pdf-{base}"));
    let xmax = series
        .iter()
        .filter_map(|s| s.1.edges.last().copied())
        .fold(0.0, f64::max)
        .max(1e-9);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.fractions.iter().copied())
        .fold(0.0, f64::max)
        .max(1e-9);
    let mut p = Plot::new(
        &id,
        720.0,
        300.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: xmax,
            },
            "score",
        ),
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: ymax * 1.08,
            },
            "fraction of blocks",
        ),
    );
    let mut t = Table::new(&["series", "bin_from", "bin_to", "fraction"]);
    for (k, (name, pdf)) in series.iter().enumerate() {
        // A step line through the bins.
        let mut pts = Vec::new();
        for (i, &f) in pdf.fractions.iter().enumerate() {
            pts.push((pdf.edges[i], f));
            pts.push((pdf.edges[i + 1], f));
            t.push(vec![
                name.to_string(),
                num(pdf.edges[i]),
                num(pdf.edges[i + 1]),
                num(f),
            ]);
        }
        p.line(&pts, color(k), Dash::Solid, name);
        p.legend(name, color(k), Dash::Solid, false);
    }
    Figure {
        id,
        title: format!("Affinity histogram: {what}"),
        caption: format!(
            "Probability density of {what}, in 20 bins from 0 to each series' largest value: mass to the right means more blocks with strong affinity."
        ),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    }
}

/// The axes of the radar, and each vector's value on them.
const AXES: [&str; 6] = [
    "accesses",
    "RD",
    "realized SA*",
    "realized SD*",
    "potential SA*",
    "potential SD*",
];

fn axis_values(v: &AffinityVector) -> [f64; 6] {
    [
        v.accesses as f64,
        v.rd.unwrap_or(0.0),
        v.sa_realized,
        v.sd_realized,
        v.sa_potential,
        v.sd_potential,
    ]
}

fn radar(vectors: &[(String, AffinityVector)], what: &str, base: &str, ids: &mut Ids) -> Figure {
    let id = ids.make(&format!("affinity-radar-{base}"));
    let mut max = [0.0f64; 6];
    for (_, v) in vectors {
        for (m, x) in max.iter_mut().zip(axis_values(v)) {
            *m = m.max(x);
        }
    }
    let mut p = Plot::new(
        &id,
        520.0,
        440.0,
        40.0,
        Axis::new(
            Scale::Linear {
                min: -1.5,
                max: 1.5,
            },
            "each score scaled to its largest vector (rim = 1)",
        ),
        Axis::new(
            Scale::Linear {
                min: -1.25,
                max: 1.25,
            },
            "radar of scores",
        ),
    );
    let dir = |k: usize| {
        let a = std::f64::consts::FRAC_PI_2 - k as f64 * std::f64::consts::TAU / 6.0;
        (a.cos(), a.sin())
    };
    for (k, name) in AXES.iter().enumerate() {
        let (dx, dy) = dir(k);
        p.line(&[(0.0, 0.0), (dx, dy)], "#bbbbbb", Dash::Dotted, name);
        p.text(dx * 1.08, dy * 1.08, name, "#333333", 0.0);
    }
    let mut t = Table::new(&[
        "vector",
        "accesses",
        "RD",
        "SA*_realized",
        "SD*_realized",
        "SA*_potential",
        "SD*_potential",
    ]);
    for (s, (name, v)) in vectors.iter().enumerate() {
        let vals = axis_values(v);
        let mut pts: Vec<(f64, f64)> = (0..6)
            .map(|k| {
                let f = if max[k] > 0.0 { vals[k] / max[k] } else { 0.0 };
                let (dx, dy) = dir(k);
                (dx * f, dy * f)
            })
            .collect();
        pts.push(pts[0]);
        p.line(&pts, color(s), Dash::Solid, name);
        p.legend(name, color(s), Dash::Solid, false);
        let mut row = vec![name.clone()];
        row.extend(vals.iter().map(|&x| num(x)));
        t.push(row);
    }
    Figure {
        id,
        title: format!("Radar of the {what}"),
        caption: "Each axis is one score of MemFriend's affinity vector, scaled so that the largest vector on it reaches the rim: accesses A, mean reuse distance RD (in blocks), realized and potential SA*_r and SD*_r. A layout change that raises realized SA* toward potential turns affinity into locality.".into(),
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    }
}
