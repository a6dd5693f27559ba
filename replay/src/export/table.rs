//! A plain-text table for terminals. Rows can be printed one at a time as results arrive
//! ([`TableExporter::header`], [`TableExporter::row`]).

use super::{ExportError, Exporter};
use crate::plan::human_bytes;
use crate::record::{ReplayRecord, StreamRecord};

pub struct TableExporter;

impl TableExporter {
    /// The header line(s) for replay rows.
    pub fn header() -> String {
        format!(
            "{:<28} {:<12} {:>7} {:>7} {:>9} {:>4} {:>10} {:>11} {:>12} {:>8}  {}\n{}\n",
            "name",
            "kernel",
            "len",
            "delta",
            "count",
            "thr",
            "bytes",
            "min time s",
            "MB/s",
            "%STREAM",
            "notes",
            "-".repeat(118)
        )
    }

    /// One replay row.
    pub fn row(r: &ReplayRecord) -> String {
        let pct = r
            .pct_of_stream
            .map(|p| format!("{p:.1}"))
            .unwrap_or_else(|| "-".to_string());
        let mut flags = Vec::new();
        if r.racy {
            flags.push("racy-by-design (values, not bandwidth)".to_string());
        }
        if r.atomic {
            flags.push("atomic".to_string());
        }
        if let Some(m) = &r.mpi {
            flags.push(format!(
                "{} ranks, {} scaling (sum of rank bandwidths {:.1} MB/s)",
                r.ranks,
                m.scaling.as_str(),
                m.sum_of_rank_bandwidths_mbs
            ));
        }
        if let Some(g) = &r.gpu {
            let device = r.device.as_ref().map_or("GPU", |d| d.name.as_str());
            flags.push(format!(
                "cuda {} on {device} ({} blocks x {})",
                g.function, g.grid, g.block
            ));
            if let Some(s) = &g.sweep {
                flags.push(format!(
                    "sweep {}/{}: count x{}{}",
                    s.step + 1,
                    s.steps,
                    s.factor,
                    match s.plateau_count {
                        Some(c) if c == r.count => " (plateau starts)".to_string(),
                        _ => String::new(),
                    }
                ));
            }
        }
        if r.too_short_to_time() {
            flags.push(format!("{} (see its note)", crate::measure::SHORT_RUN));
        }
        if let Some(a) = &r.apex {
            flags.push(format!(
                "L={} K={} M={}: {:.2} ns/access",
                a.l, a.k, a.m, r.ns_per_access
            ));
        }
        let delta = match r.delta_scatter {
            Some(ds) => format!("{}/{}", r.delta, ds),
            None => r.delta.to_string(),
        };
        format!(
            "{:<28} {:<12} {:>7} {:>7} {:>9} {:>4} {:>10} {:>11} {:>12.1} {:>8}  {}\n",
            truncate(&r.name, 28),
            r.kernel.as_str(),
            r.pattern_len,
            delta,
            r.count,
            r.threads,
            human_bytes(r.bytes as u128),
            // Under a millisecond six decimals would show a few digits or none.
            if r.min_time_s < 1e-3 {
                format!("{:.3e}", r.min_time_s)
            } else {
                format!("{:.6}", r.min_time_s)
            },
            r.bandwidth_mbs,
            pct,
            flags.join(", ")
        )
    }
}

/// `s` cut to at most `n` characters for a table column, a `~` marking the cut. The cut is in
/// the middle: names made unique by their end (`LAMMPS_NS::PairLJCut::compute-gather-3`,
/// `...-scatter-2`, a C++ overload's parameters) stay told apart, where cutting the end left
/// ten rows of `LAMMPS_NS::PairLJCut::compu~`.
pub fn truncate(s: &str, n: usize) -> String {
    cut_middle(s, n, '~')
}

/// `s` cut to at most `n` characters in its middle, `mark` where the cut is, three fifths of
/// what is kept from its end ([`truncate`]'s cut; figures mark it with `…`).
pub fn cut_middle(s: &str, n: usize, mark: char) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_string();
    }
    let Some(kept) = n.checked_sub(1) else {
        return String::new();
    };
    let tail = kept * 3 / 5;
    let mut t: String = s.chars().take(kept - tail).collect();
    t.push(mark);
    t.extend(s.chars().skip(len - tail));
    t
}

impl Exporter for TableExporter {
    fn replay(&self, records: &[ReplayRecord]) -> Result<Vec<u8>, ExportError> {
        let mut out = TableExporter::header();
        for r in records {
            out.push_str(&TableExporter::row(r));
        }
        Ok(out.into_bytes())
    }

    fn stream(&self, s: &StreamRecord) -> Result<Vec<u8>, ExportError> {
        let mut out = format!(
            "STREAM: {} threads, {} elements per array ({}), best of {} iterations (first dropped){}\n",
            s.threads,
            s.elements,
            human_bytes(s.array_bytes as u128),
            s.ntimes,
            if s.validated { ", results validated" } else { ", VALIDATION FAILED" }
        );
        out.push_str(&format!(
            "{:<8} {:>14} {:>12} {:>12} {:>12}\n",
            "Function", "Best Rate MB/s", "Avg time", "Min time", "Max time"
        ));
        for k in &s.kernels {
            let mut name = k.name.clone();
            if let Some(first) = name.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            out.push_str(&format!(
                "{:<8} {:>14.1} {:>12.6} {:>12.6} {:>12.6}\n",
                format!("{name}:"),
                k.bandwidth_mbs,
                k.avg_time_s,
                k.best_time_s,
                k.max_time_s
            ));
        }
        for n in &s.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        Ok(out.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn a_long_name_keeps_its_start_and_the_end_that_tells_it_apart() {
        assert_eq!(truncate("spmv_rows-gather", 28), "spmv_rows-gather");
        let names = [
            "LAMMPS_NS::PairLJCut::compute-gather",
            "LAMMPS_NS::PairLJCut::compute-gather-3",
            "LAMMPS_NS::PairLJCut::compute-scatter-2",
        ];
        let cut: Vec<String> = names.iter().map(|n| truncate(n, 28)).collect();
        assert_eq!(cut[1], "LAMMPS_NS::~compute-gather-3");
        for (c, n) in cut.iter().zip(names) {
            assert_eq!(c.chars().count(), 28, "{c}");
            assert!(n.starts_with(c.split('~').next().unwrap()), "{c}");
            assert!(n.ends_with(c.split('~').nth(1).unwrap()), "{c}");
        }
        assert!(cut[0] != cut[1] && cut[1] != cut[2]);
        // Characters, not bytes; and columns too narrow for anything.
        assert_eq!(truncate("αβγδεζηθ", 5), "αβ~ηθ");
        assert_eq!(truncate("abc", 0), "");
        assert_eq!(truncate("abc", 1), "~");
    }
}
