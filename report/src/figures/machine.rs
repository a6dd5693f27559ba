//! One machine: bandwidth per pattern (median run with min-max whiskers, log axis, kernels
//! told apart by colour, STREAM Copy and Triad as reference lines), the share of STREAM per
//! pattern, and the uniform-stride calibration (stride 2^0..2^7 against bandwidth) when the
//! results hold `UNIFORM:len:stride` configs.

use std::collections::BTreeMap;

use mgbench_replay::config::KernelKind;
use mgbench_replay::record::ReplayRecord;

use super::{gbs, num, opt, Figure, Ids, Section, Table};
use crate::compare::{Comparison, MachineNames};
use crate::svg::{color, Axis, Dash, Plot, Scale};

/// Most patterns drawn in one per-machine figure (the table keeps all).
pub const MAX_BARS: usize = 400;

/// Colour of a kernel kind.
pub fn kernel_color(k: KernelKind) -> &'static str {
    match k {
        KernelKind::Gather => color(0),
        KernelKind::Scatter => color(1),
        KernelKind::GatherScatter => color(2),
        KernelKind::MultiGather => color(4),
        KernelKind::MultiScatter => color(3),
        KernelKind::Apex => color(5),
    }
}

/// One pattern's runs on one machine, pooled over its records.
struct Bar<'a> {
    name: String,
    kernel: KernelKind,
    records: Vec<&'a ReplayRecord>,
}

impl Bar<'_> {
    /// Bandwidth of every timed run (bytes / run time).
    fn run_bandwidths(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .records
            .iter()
            .flat_map(|r| {
                r.run_times_s
                    .iter()
                    .filter(|t| **t > 0.0)
                    .map(move |t| r.bytes as f64 / t / 1e6)
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }
}

fn median_sorted(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The per-machine section(s).
pub fn sections(records: &[ReplayRecord], cmp: Option<&Comparison>, ids: &mut Ids) -> Vec<Section> {
    let mut machines: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<&ReplayRecord>> = BTreeMap::new();
    let names = MachineNames::new(records);
    for r in records {
        let m = names.of(r);
        if !by.contains_key(&m) {
            machines.push(m.clone());
        }
        by.entry(m).or_default().push(r);
    }
    machines
        .iter()
        .map(|m| {
            let recs = &by[m];
            let stream = cmp.and_then(|c| c.machines.iter().find(|x| &x.name == m));
            let copy = stream.and_then(|s| s.stream_copy_mbs);
            let triad = stream.and_then(|s| s.stream_triad_mbs);
            let first = recs[0];
            let mut figures = vec![bandwidth_figure(m, recs, copy, triad, ids)];
            if let Some(f) = pct_figure(m, recs, ids) {
                figures.push(f);
            }
            figures.extend(stride_figures(m, recs, copy, ids));
            Section {
                id: ids.make(&format!("machine-{m}")),
                title: format!("Machine {m}"),
                intro: format!(
                    "{} ({} CPUs{}), {} record(s); STREAM copy {} MB/s, triad {} MB/s.",
                    first.host.cpu_model,
                    first.host.cores,
                    first
                        .device
                        .as_ref()
                        .map(|d| format!(", GPU {}", d.name))
                        .unwrap_or_default(),
                    recs.len(),
                    copy.map_or("unknown".into(), |c| format!("{c:.0}")),
                    triad.map_or("unknown".into(), |c| format!("{c:.0}"))
                ),
                figures,
                tables: Vec::new(),
            }
        })
        .collect()
}

fn bars<'a>(recs: &[&'a ReplayRecord]) -> Vec<Bar<'a>> {
    let mut out: Vec<Bar<'a>> = Vec::new();
    let mut at: BTreeMap<(String, KernelKind), usize> = BTreeMap::new();
    for r in recs {
        let k = (r.name.clone(), r.kernel);
        match at.get(&k) {
            Some(&i) => out[i].records.push(r),
            None => {
                at.insert(k, out.len());
                out.push(Bar {
                    name: r.name.clone(),
                    kernel: r.kernel,
                    records: vec![r],
                });
            }
        }
    }
    out
}

fn bandwidth_figure(
    machine: &str,
    recs: &[&ReplayRecord],
    copy: Option<f64>,
    triad: Option<f64>,
    ids: &mut Ids,
) -> Figure {
    let all = bars(recs);
    let shown = &all[..all.len().min(MAX_BARS)];
    let stats: Vec<(Vec<f64>, Option<f64>)> = shown
        .iter()
        .map(|b| {
            let v = b.run_bandwidths();
            let m = median_sorted(&v);
            (v, m)
        })
        .collect();
    let xs = stats
        .iter()
        .flat_map(|(v, _)| v.iter().copied())
        .chain(copy)
        .chain(triad);
    let n = shown.len().max(1);
    let height = (n as f64 * 16.0 + 70.0).max(160.0);
    let id = ids.make(&format!("bandwidth-{machine}"));
    let mut p = Plot::new(
        &id,
        760.0,
        height,
        190.0,
        Axis::new(Scale::log_over(xs), "bandwidth (GB/s, log scale)").with_format(gbs),
        Axis::new(
            Scale::Linear {
                min: -0.5,
                max: n as f64 - 0.5,
            },
            "",
        ),
    );
    let mut table = Table::new(&[
        "pattern",
        "kernel",
        "records",
        "runs",
        "median_run_bandwidth_mbs",
        "min_run_bandwidth_mbs",
        "max_run_bandwidth_mbs",
        "bandwidth_mbs",
        "pct_of_stream",
    ]);
    let mut cats = Vec::new();
    let mut kinds: Vec<KernelKind> = Vec::new();
    let mut notes = Vec::new();
    for (i, (b, (runs, med))) in shown.iter().zip(&stats).enumerate() {
        let y = (n - 1 - i) as f64;
        cats.push((y, b.name.clone()));
        if !kinds.contains(&b.kernel) {
            kinds.push(b.kernel);
        }
        let best = b
            .records
            .iter()
            .map(|r| r.bandwidth_mbs)
            .fold(f64::NAN, f64::max);
        let pct = b.records.iter().find_map(|r| r.pct_of_stream);
        table.push(vec![
            b.name.clone(),
            b.kernel.as_str().into(),
            b.records.len().to_string(),
            runs.len().to_string(),
            opt(*med),
            opt(runs.first().copied()),
            opt(runs.last().copied()),
            num(best),
            opt(pct),
        ]);
        if let (Some(m), Some(lo), Some(hi)) = (med, runs.first(), runs.last()) {
            let left = p.x.scale.range().0;
            p.hbar(
                y,
                0.7,
                left,
                *m,
                Some((*lo, *hi)),
                kernel_color(b.kernel),
                &format!(
                    "{} ({}): median run {:.1} MB/s, runs {:.1}-{:.1} MB/s, best {:.1} MB/s{}",
                    b.name,
                    b.kernel,
                    m,
                    lo,
                    hi,
                    best,
                    pct.map(|p| format!(", {p:.1}% of STREAM copy"))
                        .unwrap_or_default()
                ),
            );
        } else {
            notes.push(format!("{}: no timed run to draw", b.name));
        }
    }
    p.categories(cats);
    let ymax = n as f64 - 0.5;
    // Copy labelled at the top, triad at the bottom, so the two labels never collide.
    if let Some(v) = copy {
        p.reference(
            (v, -0.5),
            (v, ymax),
            color(7),
            Dash::Dashed,
            &format!("STREAM copy: {v:.1} MB/s"),
            Some("STREAM copy"),
        );
    }
    if let Some(v) = triad {
        p.reference(
            (v, ymax),
            (v, -0.5),
            color(3),
            Dash::Dashed,
            &format!("STREAM triad: {v:.1} MB/s"),
            Some("STREAM triad"),
        );
    }
    for k in &kinds {
        p.legend(k.as_str(), kernel_color(*k), Dash::Solid, true);
    }
    if all.len() > shown.len() {
        notes.push(format!(
            "{} patterns; the first {MAX_BARS} are drawn, the table lists all",
            all.len()
        ));
        for b in &all[shown.len()..] {
            let runs = b.run_bandwidths();
            table.push(vec![
                b.name.clone(),
                b.kernel.as_str().into(),
                b.records.len().to_string(),
                runs.len().to_string(),
                opt(median_sorted(&runs)),
                opt(runs.first().copied()),
                opt(runs.last().copied()),
                num(b
                    .records
                    .iter()
                    .map(|r| r.bandwidth_mbs)
                    .fold(f64::NAN, f64::max)),
                opt(b.records.iter().find_map(|r| r.pct_of_stream)),
            ]);
        }
    }
    Figure {
        id,
        svg: p.finish(),
        title: format!("Bandwidth per pattern on {machine}"),
        caption: "Each bar is the median bandwidth over every timed run of the pattern (bytes / run time); the whiskers span the slowest to the fastest run. Dashed lines: this machine's STREAM copy and triad. Colours tell the kernels apart.".into(),
        table,
        notes,
    }
}

fn pct_figure(machine: &str, recs: &[&ReplayRecord], ids: &mut Ids) -> Option<Figure> {
    let all = bars(recs);
    let shown: Vec<(&Bar, f64)> = all
        .iter()
        .take(MAX_BARS)
        .filter_map(|b| {
            let mut v: Vec<f64> = b.records.iter().filter_map(|r| r.pct_of_stream).collect();
            v.sort_by(f64::total_cmp);
            median_sorted(&v).map(|m| (b, m))
        })
        .collect();
    if shown.is_empty() {
        return None;
    }
    let n = shown.len();
    let xmax = shown.iter().map(|s| s.1).fold(100.0, f64::max) * 1.05;
    let id = ids.make(&format!("pct-stream-{machine}"));
    let mut p = Plot::new(
        &id,
        760.0,
        (n as f64 * 16.0 + 70.0).max(160.0),
        190.0,
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: xmax,
            },
            "% of STREAM copy",
        ),
        Axis::new(
            Scale::Linear {
                min: -0.5,
                max: n as f64 - 0.5,
            },
            "",
        ),
    );
    let mut table = Table::new(&["pattern", "kernel", "pct_of_stream"]);
    let mut cats = Vec::new();
    let mut kinds = Vec::new();
    for (i, (b, pct)) in shown.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        cats.push((y, b.name.clone()));
        if !kinds.contains(&b.kernel) {
            kinds.push(b.kernel);
        }
        p.hbar(
            y,
            0.7,
            0.0,
            *pct,
            None,
            kernel_color(b.kernel),
            &format!("{} ({}): {pct:.1}% of STREAM copy", b.name, b.kernel),
        );
        table.push(vec![b.name.clone(), b.kernel.as_str().into(), num(*pct)]);
    }
    p.categories(cats);
    p.reference(
        (100.0, -0.5),
        (100.0, n as f64 - 0.5),
        color(7),
        Dash::Dashed,
        "STREAM copy (100%)",
        Some("STREAM"),
    );
    for k in &kinds {
        p.legend(k.as_str(), kernel_color(*k), Dash::Solid, true);
    }
    Some(Figure {
        svg: p.finish(),
        id,
        title: format!("Share of STREAM per pattern on {machine}"),
        caption: "The pattern's bandwidth (best run) as a percentage of STREAM copy measured in the same invocation with the same threads (median over its records).".into(),
        table,
        notes: Vec::new(),
    })
}

/// The stride of a uniform config: from its generator (`UNIFORM:len:stride...`), else from a
/// name like the shipped suite's `uniform-stride-4`.
pub fn uniform_stride(r: &ReplayRecord) -> Option<u64> {
    if let Some(spec) = &r.pattern_spec {
        let f: Vec<&str> = spec.split(':').collect();
        if f.len() >= 3 && f[0].eq_ignore_ascii_case("uniform") {
            return f[2].trim().parse().ok();
        }
        return None;
    }
    let rest = r.name.strip_prefix("uniform-stride-")?;
    rest.split('-').next()?.parse().ok()
}

fn stride_figures(
    machine: &str,
    recs: &[&ReplayRecord],
    copy: Option<f64>,
    ids: &mut Ids,
) -> Vec<Figure> {
    let mut out = Vec::new();
    for kind in [KernelKind::Gather, KernelKind::Scatter] {
        let mut pts: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in recs.iter().filter(|r| r.kernel == kind) {
            if let Some(s) = uniform_stride(r).filter(|s| *s >= 1 && *s <= 1 << 20) {
                pts.entry(s).or_default().push(r.bandwidth_mbs);
            }
        }
        if pts.len() < 2 {
            continue;
        }
        let series: Vec<(f64, f64)> = pts
            .iter()
            .map(|(s, v)| {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                (*s as f64, median_sorted(&v).unwrap_or(f64::NAN))
            })
            .collect();
        let ys = series.iter().map(|p| p.1).chain(copy);
        let id = ids.make(&format!("stride-{kind}-{machine}"));
        let mut p = Plot::new(
            &id,
            520.0,
            320.0,
            64.0,
            Axis::new(
                Scale::log2_over(series.iter().map(|p| p.0)),
                "stride (elements, log2 scale)",
            ),
            Axis::new(Scale::log_over(ys), "bandwidth (GB/s, log scale)").with_format(gbs),
        );
        let c = kernel_color(kind);
        p.line(
            &series,
            c,
            Dash::Solid,
            &format!("{kind}: bandwidth against uniform stride"),
        );
        let mut table = Table::new(&["stride", "bandwidth_mbs"]);
        for &(s, b) in &series {
            p.point(s, b, 3.5, c, &format!("{kind}, stride {s}: {b:.1} MB/s"));
            table.push(vec![num(s), num(b)]);
        }
        if let Some(cp) = copy {
            p.hreference(
                cp,
                color(7),
                Dash::Dashed,
                &format!("STREAM copy: {cp:.1} MB/s"),
                Some("STREAM copy"),
            );
        }
        out.push(Figure {
            svg: p.finish(),
            id,
            title: format!("Uniform-stride {kind} on {machine}"),
            caption: format!("Spatter's calibration: bandwidth of UNIFORM {kind} patterns against their stride. Unit stride streams; from stride 8 (one element per 64-byte line) every access costs a line."),
            table,
            notes: Vec::new(),
        });
    }
    out
}
