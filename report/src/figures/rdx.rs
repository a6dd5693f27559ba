//! Reuse distance by RDX (from `mgbench reuse -o` output): per granularity (words, lines),
//! the time-distance histogram and the converted stack-distance histogram in RDX's 20 log2
//! bins, RDX's estimate next to the exact histograms (and the model applied to the exact
//! times) when the run had them.

use mgbench_synth::rdx::{Bin, GranularityReport, ReuseReport};

use super::{num, Figure, Ids, Section, Table};
use crate::svg::{color, Axis, Dash, Plot, Scale};

/// One section per RDX report.
pub fn sections(reports: &[(String, ReuseReport)], ids: &mut Ids) -> Vec<Section> {
    reports
        .iter()
        .map(|(src, r)| {
            let name = r.program.as_deref().unwrap_or(src);
            let mut figures = Vec::new();
            for g in std::iter::once(&r.words).chain(&r.lines) {
                figures.push(histogram(g, false, src, ids));
                figures.push(histogram(g, true, src, ids));
            }
            let every = match r.adaptive_period {
                Some(a) => format!("{} to {} accesses (an adaptive period", a.min, a.max),
                None => format!("{} accesses (", r.config.period),
            };
            let mut intro = format!(
                "RDX {} {} ({} accesses, {} thread(s)): one sample every {every}{}jitter {}), {} watchpoint(s), attribution {:?}, seed {}.",
                if r.live { "live, on" } else { "over" },
                r.trace,
                r.accesses,
                r.threads,
                if r.adaptive_period.is_some() { ", " } else { "" },
                r.config.jitter,
                r.config.watchpoints,
                r.config.attribution,
                r.config.seed
            );
            for g in std::iter::once(&r.words).chain(&r.lines) {
                let unit = g.granularity.unit();
                intro.push_str(&format!(
                    " {unit}: {} samples{}, {} traps, {:.0} distinct estimated{}, stack distances converted over {} phase(s) of the run",
                    g.samples,
                    g.effective_samples
                        .map(|e| format!(" ({e:.0} effective)"))
                        .unwrap_or_default(),
                    g.traps,
                    g.distinct_estimate,
                    g.distinct_exact
                        .map(|n| format!(" ({n} exact)"))
                        .unwrap_or_default(),
                    g.phases
                ));
                if let Some(k) = g.thread_groups {
                    intro.push_str(&format!(
                        ", the {} threads' reuse times in {k} group(s) that a Kolmogorov-Smirnov test at 1% finds alike, each converted as one",
                        r.threads
                    ));
                }
                if let Some(sp) = &g.spread {
                    intro.push_str(&format!(
                        "; the samples' own spread ({} bootstrap replicates, the whiskers hold 80% of them) puts S near {:.3} for time and {:.3} for stack (sampling noise only, not a model's bias)",
                        sp.replicates, sp.time_s, sp.stack_s
                    ));
                }
                match &g.accuracy_rdx_bins {
                    Some(a) => intro.push_str(&format!(
                        "; accuracy S time {:.3}, stack {:.3} (S^ {:.3}), model alone {:.3}.",
                        a.time.s, a.stack.s, a.stack.s_hat, a.conversion.s
                    )),
                    None if r.live => intro.push_str(
                        "; no exact histograms (a live run: mgbench reuse --rdx on a full trace of the program gives them).",
                    ),
                    None => intro.push_str("; no exact histograms (run without --no-exact)."),
                }
            }
            for n in &r.notes {
                intro.push_str(&format!(" Note: {n}."));
            }
            Section {
                id: ids.make(&format!("rdx-{src}")),
                title: format!("Reuse distance (RDX) of {name}"),
                intro,
                figures,
                tables: Vec::new(),
            }
        })
        .collect()
}

/// Bins up to the last one holding anything (the rest are empty).
fn shown(bins: &[Bin]) -> &[Bin] {
    let last = bins
        .iter()
        .rposition(|b| {
            [
                Some(b.time),
                Some(b.stack),
                b.exact_time,
                b.exact_stack,
                b.converted_exact_time,
            ]
            .iter()
            .any(|v| v.is_some_and(|x| x > 0.0))
        })
        .unwrap_or(0);
    &bins[..=last]
}

fn histogram(g: &GranularityReport, stack: bool, base: &str, ids: &mut Ids) -> Figure {
    let unit = g.granularity.unit();
    let what = if stack { "stack" } else { "time" };
    let id = ids.make(&format!("rdx-{what}-{unit}-{base}"));
    let bins = shown(&g.rdx_bins);
    // Series: RDX's estimate, the exact histogram, and for stack distances the model applied
    // to the exact times.
    let mut series: Vec<(&str, Vec<f64>)> = vec![(
        "RDX",
        bins.iter()
            .map(|b| if stack { b.stack } else { b.time })
            .collect(),
    )];
    if bins.iter().all(|b| b.exact_time.is_some()) {
        series.push((
            "exact",
            bins.iter()
                .map(|b| {
                    if stack {
                        b.exact_stack.unwrap_or(0.0)
                    } else {
                        b.exact_time.unwrap_or(0.0)
                    }
                })
                .collect(),
        ));
        if stack {
            series.push((
                "model on exact times",
                bins.iter()
                    .map(|b| b.converted_exact_time.unwrap_or(0.0))
                    .collect(),
            ));
        }
    }
    let ranges = bins
        .iter()
        .filter_map(|b| if stack { b.stack_range } else { b.time_range })
        .map(|r| r[1]);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .chain(ranges)
        .fold(0.0, f64::max)
        .max(1e-9);
    let labels: Vec<String> = bins.iter().map(|b| b.label.clone()).collect();
    let mut p = Plot::new(
        &id,
        720.0,
        300.0,
        64.0,
        Axis::new(
            Scale::Linear {
                min: -0.6,
                max: bins.len() as f64 - 0.4,
            },
            &format!(
                "{} distance ({unit}{})",
                what,
                if stack {
                    ": distinct locations in between"
                } else {
                    ": accesses from use to reuse"
                }
            ),
        ),
        Axis::new(
            Scale::Linear {
                min: 0.0,
                max: ymax * 1.08,
            },
            "fraction of reuses",
        ),
    );
    p.x_labels(
        labels
            .iter()
            .enumerate()
            .map(|(i, l)| (i as f64, l.clone()))
            .collect(),
    );
    let n = series.len() as f64;
    let w = 0.8 / n;
    let mut cols = vec!["bin".to_string()];
    cols.extend(series.iter().map(|s| s.0.replace(' ', "_")));
    let with_range = bins.iter().any(|b| b.stack_range.is_some());
    if with_range {
        cols.push("RDX_80%_range".into());
    }
    let mut t = Table::new(&cols.iter().map(String::as_str).collect::<Vec<_>>());
    for (i, b) in bins.iter().enumerate() {
        let x = i as f64;
        let mut row = vec![b.label.clone()];
        for (k, (name, vals)) in series.iter().enumerate() {
            let x0 = x - 0.4 + w * k as f64;
            p.rect(
                x0,
                0.0,
                x0 + w,
                vals[i],
                color(k),
                &format!("{name}, {what} distance {}: {:.4}", b.label, vals[i]),
            );
            row.push(num(vals[i]));
        }
        // RDX's range over bootstrap replicates of its samples: a whisker on its bar.
        let range = if stack { b.stack_range } else { b.time_range };
        if let Some([lo, hi]) = range {
            let xc = x - 0.4 + w / 2.0;
            p.line(
                &[(xc, lo), (xc, hi)],
                "#222",
                Dash::Solid,
                &format!(
                    "RDX, {what} distance {}: 80% of bootstrap replicates between {lo:.4} and {hi:.4}",
                    b.label
                ),
            );
            row.push(format!("{}-{}", num(lo), num(hi)));
        } else if with_range {
            row.push("-".into());
        }
        t.push(row);
    }
    for (k, (name, _)) in series.iter().enumerate() {
        p.legend(name, color(k), Dash::Solid, true);
    }
    if with_range {
        p.legend(
            "RDX: 80% of bootstrap replicates",
            "#222",
            Dash::Solid,
            false,
        );
    }
    let title = format!(
        "RDX {} distances in {unit}{}",
        what,
        if series.len() > 1 {
            ", against exact"
        } else {
            ""
        }
    );
    let caption = if stack {
        format!(
            "Reuse (stack) distance in {unit}, in RDX's log2 bins: RDX's sampled time distances converted by the model (its whisker: where 80% of bootstrap replicates of the samples fall), the exact (Olken) histogram of the same trace, and the model applied to the exact time distances (what conversion alone costs). Fractions of reuses."
        )
    } else {
        format!(
            "Time distance (accesses from a use to its reuse) of the sampled {unit}, in RDX's log2 bins, weighted as RDX attributes them (its whisker: where 80% of bootstrap replicates of the samples fall), against every reuse's time distance in the trace. Fractions of reuses."
        )
    };
    Figure {
        id,
        title,
        caption,
        svg: p.finish(),
        table: t,
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intro_says_how_the_threads_were_converted() {
        let mut r: ReuseReport =
            serde_json::from_str(include_str!("../../tests/data/spmv-reuse.json")).unwrap();
        let one = sections(&[("spmv.json".into(), r.clone())], &mut Ids::default());
        let intro = &one[0].intro;
        assert!(!intro.contains("group(s)"), "{intro}");
        // The exact distinct count follows the estimate it is compared with.
        let exact = r.words.distinct_exact.unwrap();
        assert!(
            intro.contains(&format!(
                " distinct estimated ({exact} exact), stack distances"
            )),
            "{intro}"
        );
        (r.threads, r.words.thread_groups) = (4, Some(2));
        let four = sections(&[("spmv.json".into(), r)], &mut Ids::default());
        assert!(
            four[0]
                .intro
                .contains("the 4 threads' reuse times in 2 group(s)"),
            "{}",
            four[0].intro
        );
    }

    #[test]
    fn the_bootstrap_range_is_a_whisker_and_a_column() {
        let mut r: ReuseReport =
            serde_json::from_str(include_str!("../../tests/data/spmv-reuse.json")).unwrap();
        // A report written before the spread: no whiskers, no range column.
        let old = histogram(&r.words, true, "spmv.json", &mut Ids::default());
        assert!(!old.svg.text.contains("bootstrap replicates between"));
        assert!(!old.table.headers.iter().any(|h| h == "RDX_80%_range"));
        for b in &mut r.words.rdx_bins {
            (b.time_range, b.stack_range) = (
                Some([b.time * 0.5, b.time * 1.5]),
                Some([b.stack * 0.5, (b.stack * 2.0).max(0.9)]),
            );
        }
        let f = histogram(&r.words, true, "spmv.json", &mut Ids::default());
        let shown = shown(&r.words.rdx_bins).len();
        assert_eq!(
            f.svg
                .text
                .matches("80% of bootstrap replicates between")
                .count(),
            shown
        );
        assert_eq!(f.table.headers.last().unwrap(), "RDX_80%_range");
        assert!(f
            .table
            .rows
            .iter()
            .all(|row| row.len() == f.table.headers.len()));
        let time = histogram(&r.words, false, "spmv.json", &mut Ids::default());
        assert_eq!(time.table.rows.len(), shown);
        r.words.spread = Some(mgbench_synth::rdx::Spread {
            replicates: 100,
            time_s: 0.97,
            stack_s: 0.91,
            fine_time_s: 0.95,
            fine_stack_s: 0.9,
        });
        let sec = sections(&[("spmv.json".into(), r)], &mut Ids::default());
        assert!(
            sec[0]
                .intro
                .contains("puts S near 0.970 for time and 0.910 for stack"),
            "{}",
            sec[0].intro
        );
    }
}
