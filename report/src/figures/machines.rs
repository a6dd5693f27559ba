//! Several machines: the bandwidth-bandwidth plot of the Spatter and GS Patterns papers
//! (x = each machine's STREAM bandwidth, y = the pattern's bandwidth on it, log-log with equal
//! limits, dashed diagonals at 1, 1/2, 1/4, 1/8 and 1/16 of STREAM, machine names on the
//! diagonal, one polyline per pattern through the machines), a pairwise plot of each machine
//! against the baseline (y = x, and the line STREAM predicts), and the pattern x machine
//! table of % of STREAM.

use super::{gbs, num, opt, Figure, Ids, Section, Table};
use crate::compare::Comparison;
use crate::svg::{color, Axis, Dash, Plot, Scale};

/// Patterns named in a legend before the figure relies on tooltips instead.
const LEGEND_MAX: usize = 10;

fn equal_log(values: impl IntoIterator<Item = f64> + Clone) -> Scale {
    Scale::log_over(values)
}

/// The comparison section, when at least two machines have results.
pub fn section(cmp: &Comparison, ids: &mut Ids) -> Option<Section> {
    if cmp.machines.len() < 2 {
        return None;
    }
    let mut figures = Vec::new();
    let mut notes = Vec::new();
    if let Some(f) = bandwidth_bandwidth(cmp, ids) {
        figures.push(f);
    } else {
        notes.push("the bandwidth-bandwidth plot needs STREAM on at least two machines");
    }
    for (i, m) in cmp.machines.iter().enumerate() {
        if i != cmp.baseline {
            if let Some(f) = pairwise(cmp, i, ids) {
                figures.push(f);
            }
        }
        let _ = m;
    }
    let mut headers = vec!["pattern".to_string(), "kernel".to_string()];
    headers.extend(
        cmp.machines
            .iter()
            .map(|m| format!("{} (% of STREAM)", m.name)),
    );
    headers.push("flags".into());
    let mut table = Table {
        headers,
        rows: Vec::new(),
    };
    for r in &cmp.rows {
        let mut row = vec![r.pattern.clone(), r.kernel.as_str().to_string()];
        row.extend(
            r.pct_of_stream
                .iter()
                .map(|p| p.map_or("-".into(), |x| format!("{x:.1}"))),
        );
        row.push(r.flags.join("; "));
        table.rows.push(row);
    }
    let base = &cmp.machines[cmp.baseline];
    let mut intro = format!(
        "{} machines; baseline {}. Rows are sorted by how far a pattern's speed-up departs from what STREAM alone predicts.",
        cmp.machines.len(),
        base.name
    );
    for w in &cmp.warnings {
        intro.push_str(&format!(" Warning: {w}."));
    }
    for n in notes {
        intro.push_str(&format!(" ({n}.)"));
    }
    Some(Section {
        id: ids.make("comparison"),
        title: "Machines compared".into(),
        intro,
        figures,
        tables: vec![("Pattern x machine, % of STREAM copy".into(), table)],
    })
}

fn bandwidth_bandwidth(cmp: &Comparison, ids: &mut Ids) -> Option<Figure> {
    let with_stream: Vec<usize> = (0..cmp.machines.len())
        .filter(|&i| cmp.machines[i].stream_copy_mbs.is_some_and(|s| s > 0.0))
        .collect();
    if with_stream.len() < 2 {
        return None;
    }
    let mut values: Vec<f64> = Vec::new();
    for &i in &with_stream {
        values.extend(cmp.machines[i].stream_copy_mbs);
        for r in &cmp.rows {
            values.extend(r.bandwidth_mbs[i].filter(|b| *b > 0.0));
        }
    }
    let scale = equal_log(values.iter().copied());
    let (lo, hi) = scale.range();
    let id = ids.make("bandwidth-bandwidth");
    let mut p = Plot::new(
        &id,
        600.0,
        580.0,
        70.0,
        Axis::new(scale, "machine STREAM copy bandwidth (GB/s, log)").with_format(gbs),
        Axis::new(scale, "pattern bandwidth (GB/s, log)").with_format(gbs),
    )
    .right_margin(18.0);
    for (k, f) in [1.0f64, 2.0, 4.0, 8.0, 16.0].iter().enumerate() {
        let label = if k == 0 {
            "STREAM".to_string()
        } else {
            format!("1/{f}")
        };
        // y = x / f, from where it enters the frame to the top-right corner side.
        let start = (lo * f, lo);
        let end = (hi, hi / f);
        p.reference(
            start,
            end,
            "#999",
            if k == 0 { Dash::Solid } else { Dash::Dashed },
            &format!("{} of STREAM", if k == 0 { "all" } else { label.as_str() }),
            Some(&label),
        );
    }
    // Machine names on the STREAM diagonal; where one would run into the next machine's
    // (names like "vm [Intel(R) Xeon(R) Processor]/NVIDIA H100 80GB HBM3"), its number in
    // the comparison stands there and a note gives the names.
    let angle = p.angle((lo, lo), (hi, hi));
    let mut numbered = Vec::new();
    for &i in &with_stream {
        let m = &cmp.machines[i];
        if let Some(s) = m.stream_copy_mbs {
            let room = with_stream
                .iter()
                .filter_map(|&j| cmp.machines[j].stream_copy_mbs)
                .filter(|&t| t > s)
                .fold(hi, f64::min);
            // About 7 px per character along the diagonal, 7 / sqrt(2) px along x, in a
            // frame 512 px wide spanning log10(hi / lo) decades.
            let decades_per_char = 7.0 / std::f64::consts::SQRT_2 / 512.0 * (hi / lo).log10();
            let fits = (room / s).log10() > decades_per_char * m.name.chars().count() as f64;
            let label = if fits {
                m.name.clone()
            } else {
                numbered.push(format!("[{i}] {}", m.name));
                format!("[{i}]")
            };
            p.text(s * 1.05, s * 0.93, &label, "#444", angle);
        }
    }
    let mut order = with_stream.clone();
    order.sort_by(|a, b| {
        cmp.machines[*a]
            .stream_copy_mbs
            .unwrap_or(0.0)
            .total_cmp(&cmp.machines[*b].stream_copy_mbs.unwrap_or(0.0))
    });
    let mut table = Table::new(&[
        "pattern",
        "kernel",
        "machine",
        "stream_copy_mbs",
        "bandwidth_mbs",
        "pct_of_stream",
    ]);
    for (j, r) in cmp.rows.iter().enumerate() {
        let c = color(j);
        let pts: Vec<(f64, f64)> = order
            .iter()
            .filter_map(|&i| {
                Some((
                    cmp.machines[i].stream_copy_mbs?,
                    r.bandwidth_mbs[i].filter(|b| *b > 0.0)?,
                ))
            })
            .collect();
        if pts.len() >= 2 {
            p.line(
                &pts,
                c,
                Dash::Solid,
                &format!("{} ({}) across the machines", r.pattern, r.kernel),
            );
        }
        for &i in &order {
            let m = &cmp.machines[i];
            if let (Some(s), Some(b)) = (m.stream_copy_mbs, r.bandwidth_mbs[i]) {
                p.point(
                    s,
                    b,
                    3.0,
                    c,
                    &format!(
                        "{} ({}) on {}: {:.1} MB/s, {:.1}% of STREAM {:.1} MB/s",
                        r.pattern,
                        r.kernel,
                        m.name,
                        b,
                        100.0 * b / s,
                        s
                    ),
                );
                table.push(vec![
                    r.pattern.clone(),
                    r.kernel.as_str().into(),
                    m.name.clone(),
                    num(s),
                    num(b),
                    opt(r.pct_of_stream[i]),
                ]);
            }
        }
        if cmp.rows.len() <= LEGEND_MAX {
            p.legend(&r.pattern, c, Dash::Solid, false);
        }
    }
    let mut notes = Vec::new();
    if !numbered.is_empty() {
        notes.push(format!("Machines by number: {}", numbered.join("; ")));
    }
    if cmp.rows.len() > LEGEND_MAX {
        notes.push(format!(
            "{} patterns: hover a line or point for its name",
            cmp.rows.len()
        ));
    }
    Some(Figure {
        id,
        title: "Bandwidth-bandwidth plot".into(),
        caption: "Each machine sits at its STREAM copy bandwidth on the x axis; each pattern is a line through its bandwidth on every machine. A pattern on the solid diagonal runs at STREAM speed; the dashed diagonals are 1/2, 1/4, 1/8 and 1/16 of STREAM. Lines parallel to the diagonals scale with STREAM; lines that flatten or bend do not.".into(),
        svg: p.finish(),
        table,
        notes,
    })
}

fn pairwise(cmp: &Comparison, i: usize, ids: &mut Ids) -> Option<Figure> {
    let b = cmp.baseline;
    let (base, m) = (&cmp.machines[b], &cmp.machines[i]);
    let pts: Vec<(usize, f64, f64)> = cmp
        .rows
        .iter()
        .enumerate()
        .filter_map(|(j, r)| {
            Some((
                j,
                r.bandwidth_mbs[b].filter(|x| *x > 0.0)?,
                r.bandwidth_mbs[i].filter(|x| *x > 0.0)?,
            ))
        })
        .collect();
    if pts.is_empty() {
        return None;
    }
    let scale = equal_log(pts.iter().flat_map(|p| [p.1, p.2]));
    let (lo, hi) = scale.range();
    let id = ids.make(&format!("pairwise-{}-vs-{}", m.name, base.name));
    let mut p = Plot::new(
        &id,
        520.0,
        500.0,
        70.0,
        Axis::new(scale, &format!("bandwidth on {} (GB/s, log)", base.name)).with_format(gbs),
        Axis::new(scale, &format!("bandwidth on {} (GB/s, log)", m.name)).with_format(gbs),
    );
    p.reference(
        (lo, lo),
        (hi, hi),
        "#999",
        Dash::Solid,
        "y = x: same bandwidth",
        None,
    );
    p.legend("same bandwidth", "#999", Dash::Solid, false);
    let predicted = cmp.rows.first().and_then(|r| r.stream_predicted_ratio[i]);
    if let Some(k) = predicted.filter(|k| *k > 0.0) {
        let (x0, x1) = if k >= 1.0 { (lo, hi / k) } else { (lo / k, hi) };
        p.reference(
            (x0, x0 * k),
            (x1, x1 * k),
            color(3),
            Dash::Dashed,
            &format!("what STREAM predicts: x {k:.2}"),
            None,
        );
        p.legend(
            &format!("STREAM predicts x{k:.2}"),
            color(3),
            Dash::Dashed,
            false,
        );
    }
    let mut table = Table::new(&[
        "pattern",
        "kernel",
        "baseline_bandwidth_mbs",
        "bandwidth_mbs",
        "ratio",
        "stream_predicted_ratio",
    ]);
    for (j, x, y) in pts {
        let r = &cmp.rows[j];
        p.point(
            x,
            y,
            3.5,
            super::machine::kernel_color(r.kernel),
            &format!(
                "{} ({}): {:.1} MB/s on {}, {:.1} MB/s on {} (x{:.2}; STREAM predicts x{})",
                r.pattern,
                r.kernel,
                x,
                base.name,
                y,
                m.name,
                y / x,
                predicted.map_or("?".into(), |k| format!("{k:.2}"))
            ),
        );
        table.push(vec![
            r.pattern.clone(),
            r.kernel.as_str().into(),
            num(x),
            num(y),
            num(y / x),
            opt(predicted),
        ]);
    }
    Some(Figure {
        id,
        title: format!("{} against {}", m.name, base.name),
        caption: format!("Each point is a pattern: its bandwidth on the baseline {} (x) and on {} (y). Points on the solid line run equally fast on both; the dashed line is the speed-up STREAM alone predicts. Points above it gain more than STREAM says, points below gain less.", base.name, m.name),
        svg: p.finish(),
        table,
        notes: Vec::new(),
    })
}
