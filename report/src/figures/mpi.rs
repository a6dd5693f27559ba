//! MPI scaling: total bandwidth and bandwidth per rank against the number of ranks (log2 x),
//! gathers solid and scatters dashed, each series' ideal scaling (the smallest run's bandwidth
//! per rank times the ranks) dotted, and the node's STREAM as the ceiling. From
//! `scripts/mpi-sweep.py` CSVs and from replay records of `--mpi` runs.

use std::collections::BTreeMap;

use mgbench_replay::record::ReplayRecord;

use super::{gbs, num, opt, Figure, Ids, Section, Table};
use crate::inputs::MpiSweepRow;
use crate::svg::{color, Axis, Dash, Plot, Scale};

/// One measured point of a series.
#[derive(Debug, Clone)]
struct Point {
    ranks: u64,
    bandwidth_mbs: f64,
    stream_mbs: Option<f64>,
    source: String,
}

type Key = (String, String, String, u64); // (scaling, name, kernel, threads per rank)

fn dash_of(kernel: &str) -> Dash {
    match kernel {
        "gather" | "multigather" => Dash::Solid,
        "scatter" | "multiscatter" => Dash::Dashed,
        _ => Dash::Dotted,
    }
}

/// The MPI section, when there are MPI sweeps or `--mpi` records.
pub fn section(rows: &[MpiSweepRow], records: &[ReplayRecord], ids: &mut Ids) -> Option<Section> {
    let mut series: BTreeMap<Key, Vec<Point>> = BTreeMap::new();
    for r in rows {
        series
            .entry((
                r.scaling.clone(),
                r.name.clone(),
                r.kernel.clone(),
                r.threads_per_rank,
            ))
            .or_default()
            .push(Point {
                ranks: r.ranks,
                bandwidth_mbs: r.bandwidth_mbs,
                stream_mbs: r.stream_copy_mbs,
                source: if r.source.is_empty() {
                    "MPI sweep".into()
                } else {
                    r.source.clone()
                },
            });
    }
    for r in records {
        let Some(m) = &r.mpi else { continue };
        series
            .entry((
                m.scaling.as_str().to_string(),
                r.name.clone(),
                r.kernel.as_str().to_string(),
                r.threads as u64,
            ))
            .or_default()
            .push(Point {
                ranks: r.ranks as u64,
                bandwidth_mbs: r.bandwidth_mbs,
                stream_mbs: r.stream_copy_mbs,
                source: r.source.clone(),
            });
    }
    if series.is_empty() {
        return None;
    }
    for pts in series.values_mut() {
        pts.sort_by_key(|p| p.ranks);
        pts.dedup_by_key(|p| p.ranks);
    }
    let mut figures = Vec::new();
    for scaling in ["weak", "strong"] {
        let sel: Vec<(&Key, &Vec<Point>)> = series.iter().filter(|(k, _)| k.0 == scaling).collect();
        if sel.is_empty() {
            continue;
        }
        for per_rank in [false, true] {
            figures.push(figure(scaling, per_rank, &sel, ids));
        }
    }
    Some(Section {
        id: ids.make("mpi"),
        title: "MPI scaling".into(),
        intro: format!(
            "{} series. Weak scaling: every rank runs the whole pattern; strong scaling: the ranks split it. Bandwidth is the honest aggregate: all ranks' bytes over the slowest rank's best time.",
            series.len()
        ),
        figures,
        tables: Vec::new(),
    })
}

fn figure(scaling: &str, per_rank: bool, sel: &[(&Key, &Vec<Point>)], ids: &mut Ids) -> Figure {
    let value = |p: &Point| {
        if per_rank {
            p.bandwidth_mbs / p.ranks.max(1) as f64
        } else {
            p.bandwidth_mbs
        }
    };
    let ceiling = sel
        .iter()
        .flat_map(|(_, v)| v.iter().filter_map(|p| p.stream_mbs))
        .fold(None, |a: Option<f64>, s| Some(a.map_or(s, |a| a.max(s))));
    let mut ys: Vec<f64> = sel.iter().flat_map(|(_, v)| v.iter().map(value)).collect();
    // The ideal lines reach ranks x the smallest run's bandwidth.
    for (_, v) in sel {
        if let (Some(a), Some(b)) = (v.first(), v.last()) {
            let ideal = value(a) * b.ranks as f64 / a.ranks.max(1) as f64;
            ys.push(if per_rank { value(a) } else { ideal });
        }
    }
    if !per_rank {
        ys.extend(ceiling);
    }
    let xs = sel
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.ranks as f64));
    let what = if per_rank { "per rank" } else { "total" };
    let id = ids.make(&format!(
        "mpi-{scaling}-{}",
        if per_rank { "per-rank" } else { "total" }
    ));
    let mut p = Plot::new(
        &id,
        620.0,
        380.0,
        64.0,
        Axis::new(Scale::log2_over(xs), "MPI ranks (log2 scale)"),
        Axis::new(
            Scale::log_over(ys),
            &format!("bandwidth {what} (GB/s, log)"),
        )
        .with_format(gbs),
    );
    let mut table = Table::new(&[
        "scaling",
        "pattern",
        "kernel",
        "threads_per_rank",
        "ranks",
        "bandwidth_mbs",
        "bandwidth_per_rank_mbs",
        "ideal_mbs",
        "stream_copy_mbs",
        "source",
    ]);
    for (j, (k, pts)) in sel.iter().enumerate() {
        let c = color(j);
        let dash = dash_of(&k.2);
        let line: Vec<(f64, f64)> = pts.iter().map(|q| (q.ranks as f64, value(q))).collect();
        let label = format!("{} ({}, {} thr/rank)", k.1, k.2, k.3);
        p.line(
            &line,
            c,
            dash,
            &format!("{label}: {what} bandwidth, {scaling} scaling"),
        );
        let first = &pts[0];
        let base = value(first);
        for q in pts.iter() {
            let ideal = if per_rank {
                base
            } else {
                base * q.ranks as f64 / first.ranks.max(1) as f64
            };
            p.point(
                q.ranks as f64,
                value(q),
                3.0,
                c,
                &format!(
                    "{label}, {} ranks: {:.1} MB/s {what} (ideal {:.1}; efficiency {:.2})",
                    q.ranks,
                    value(q),
                    ideal,
                    value(q) / ideal
                ),
            );
            table.push(vec![
                scaling.into(),
                k.1.clone(),
                k.2.clone(),
                k.3.to_string(),
                q.ranks.to_string(),
                num(q.bandwidth_mbs),
                num(q.bandwidth_mbs / q.ranks.max(1) as f64),
                num(if per_rank {
                    ideal * q.ranks as f64
                } else {
                    ideal
                }),
                opt(q.stream_mbs),
                q.source.clone(),
            ]);
        }
        if let Some(last) = pts.last() {
            if last.ranks > first.ranks {
                let end = if per_rank {
                    base
                } else {
                    base * last.ranks as f64 / first.ranks.max(1) as f64
                };
                p.reference(
                    (first.ranks as f64, base),
                    (last.ranks as f64, end),
                    c,
                    Dash::Dotted,
                    &format!("{label}: ideal {scaling} scaling"),
                    None,
                );
            }
        }
        if sel.len() <= 8 {
            p.legend(&label, c, dash, false);
        }
    }
    if let (Some(s), false) = (ceiling, per_rank) {
        p.hreference(
            s,
            color(7),
            Dash::Dashed,
            &format!("node STREAM copy with all ranks: {s:.1} MB/s"),
            Some("node STREAM"),
        );
    }
    p.legend("ideal scaling", "#666", Dash::Dotted, false);
    Figure {
        id,
        title: format!(
            "MPI {scaling} scaling: bandwidth {what}"
        ),
        caption: format!("Bandwidth {what} against the number of ranks; gathers solid, scatters dashed. The dotted line of each series is ideal scaling from its smallest run{}.", if per_rank { " (constant bandwidth per rank)" } else { "; the dashed horizontal line is the node's STREAM ceiling" }),
        svg: p.finish(),
        table,
        notes: Vec::new(),
    }
}
