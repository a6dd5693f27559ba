//! Machine-to-machine comparison: per pattern, the bandwidth on each machine, the ratio to a
//! baseline machine, the share of each machine's STREAM, and the ratio STREAM alone would
//! predict (`STREAM_m / STREAM_baseline`). A pattern whose measured ratio departs from that
//! prediction is one whose performance STREAM does not explain: rows are sorted by how far
//! (`|log2(ratio / predicted)|`, largest first). Used by `mgbench compare` and by the
//! report's bandwidth-bandwidth figures.
//!
//! A machine is a host (`host.hostname`, with its CPU model where one hostname stands for
//! several: [`MachineNames`]) running on its CPU; GPU records are the host's device
//! (`host/GPU name`) and MPI records the host with their rank count (`host x4 ranks`), so
//! different setups never mix. Several records of one pattern on one machine
//! (repeated runs) count by their median. Settings that make numbers incomparable are
//! flagged per row (pattern sizes, threads) and overall (mgbench versions), never mixed
//! silently.

use std::collections::{BTreeMap, BTreeSet};

use mgbench_replay::config::KernelKind;
use mgbench_replay::gpu::GpuStreamRecord;
use mgbench_replay::record::{Host, ReplayRecord, StreamRecord};
use serde::Serialize;

use crate::ReportError;

/// One machine of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    pub name: String,
    pub hostname: String,
    pub cpu_model: String,
    /// GPU name for CUDA records.
    pub device: Option<String>,
    /// STREAM Copy (MB/s): the median over its records' baselines, else its STREAM files.
    pub stream_copy_mbs: Option<f64>,
    pub stream_triad_mbs: Option<f64>,
    /// The thread counts its records chose ([`chosen_threads`]): worker threads per rank on
    /// CPUs, threads per block on a GPU.
    pub threads: Vec<usize>,
    pub ranks: usize,
    pub mgbench_versions: Vec<String>,
    pub records: usize,
}

/// One pattern across the machines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub pattern: String,
    pub kernel: KernelKind,
    /// Per machine (in `Comparison::machines` order): median bandwidth over its records.
    pub bandwidth_mbs: Vec<Option<f64>>,
    /// Records behind each median.
    pub runs: Vec<usize>,
    pub pct_of_stream: Vec<Option<f64>>,
    /// bandwidth / the baseline's bandwidth.
    pub ratio_to_baseline: Vec<Option<f64>>,
    /// STREAM / the baseline's STREAM: what STREAM alone predicts for the ratio.
    pub stream_predicted_ratio: Vec<Option<f64>>,
    /// The largest |log2(ratio / predicted)| over the machines (the sort key, after whether
    /// the row was too short to time somewhere: those rows come last).
    pub departure: Option<f64>,
    /// Why numbers of this row may not compare (sizes, threads differ).
    pub flags: Vec<String>,
}

/// A comparison of machines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub machines: Vec<Machine>,
    /// Index of the baseline machine.
    pub baseline: usize,
    pub rows: Vec<Row>,
    /// Problems that concern the whole comparison (different mgbench versions).
    pub warnings: Vec<String>,
}

/// The records that describe one configuration run once on one machine: not MPI jobs (their
/// scaling figures show them) and not GPU sweep steps (their throughput figures do).
pub fn single_runs(records: &[ReplayRecord]) -> Vec<ReplayRecord> {
    records
        .iter()
        .filter(|r| r.mpi.is_none() && r.gpu.as_ref().is_none_or(|g| g.sweep.is_none()))
        .cloned()
        .collect()
}

/// Names the machines records ran on: the hostname, with the CPU model added where one
/// hostname stands for hosts of different CPU models (cloud VMs share names like "localhost"
/// or "vm"), so two machines never mix under one name; GPU records are the host's device
/// (`host/GPU name`) and MPI records the host with their rank count (`host x4 ranks`).
#[derive(Debug, Clone, Default)]
pub struct MachineNames {
    /// Hostnames seen with more than one CPU model.
    shared: BTreeSet<String>,
}

impl MachineNames {
    pub fn new(records: &[ReplayRecord]) -> MachineNames {
        let mut models: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for r in records {
            models
                .entry(r.host.hostname.as_str())
                .or_default()
                .insert(r.host.cpu_model.as_str());
        }
        MachineNames {
            shared: models
                .into_iter()
                .filter(|(_, m)| m.len() > 1)
                .map(|(h, _)| h.to_string())
                .collect(),
        }
    }

    /// The host part of a machine's name.
    pub fn host(&self, h: &Host) -> String {
        if self.shared.contains(&h.hostname) {
            format!("{} [{}]", h.hostname, h.cpu_model)
        } else {
            h.hostname.clone()
        }
    }

    /// The machine a record belongs to.
    pub fn of(&self, r: &ReplayRecord) -> String {
        let mut name = self.host(&r.host);
        if let Some(d) = &r.device {
            name = format!("{name}/{}", d.name);
        }
        if r.ranks > 1 {
            name = format!("{name} x{} ranks", r.ranks);
        }
        name
    }
}

/// Whether two records' hosts are one machine: the same hostname and CPU model.
fn same_host(a: &Host, b: &Host) -> bool {
    a.hostname == b.hostname && a.cpu_model == b.cpu_model
}

fn median(v: &mut Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Builds the comparison of every machine found in `records`; `baseline` picks the baseline
/// machine by (part of) its name, default the first machine in input order.
pub fn compare(
    records: &[ReplayRecord],
    streams: &[StreamRecord],
    gpu_streams: &[GpuStreamRecord],
    baseline: Option<&str>,
) -> Result<Comparison, ReportError> {
    // Machines in order of first appearance.
    let mut order: Vec<String> = Vec::new();
    let mut by_machine: BTreeMap<String, Vec<&ReplayRecord>> = BTreeMap::new();
    let names = MachineNames::new(records);
    for r in records {
        if r.kernel == KernelKind::Apex && r.bandwidth_mbs.is_nan() {
            continue;
        }
        let m = names.of(r);
        if !by_machine.contains_key(&m) {
            order.push(m.clone());
        }
        by_machine.entry(m).or_default().push(r);
    }
    if order.is_empty() {
        return Err(ReportError::NothingToCompare);
    }
    let machines: Vec<Machine> = order
        .iter()
        .map(|name| {
            let recs = &by_machine[name];
            let first = recs[0];
            let mut copies: Vec<f64> = recs.iter().filter_map(|r| r.stream_copy_mbs).collect();
            let mut copy = median(&mut copies);
            let triad;
            if first.device.is_some() {
                let dev = first.device.as_ref().map(|d| d.name.clone());
                let g = gpu_streams.iter().find(|g| {
                    Some(&g.device.name) == dev.as_ref() && same_host(&g.host, &first.host)
                });
                if copy.is_none() {
                    copy = g.map(|g| g.copy_mbs);
                }
                triad = g.map(|g| g.triad_mbs);
            } else {
                let mut own: Vec<&StreamRecord> = streams
                    .iter()
                    .filter(|s| same_host(&s.host, &first.host) && s.ranks == first.ranks.max(1))
                    .collect();
                own.sort_by(|a, b| a.time.cmp(&b.time));
                if copy.is_none() {
                    copy = median(&mut own.iter().map(|s| s.copy_mbs).collect::<Vec<_>>());
                }
                triad = median(&mut own.iter().map(|s| s.triad_mbs).collect::<Vec<_>>());
            }
            let threads: BTreeSet<usize> = recs.iter().map(|r| chosen_threads(r)).collect();
            let versions: BTreeSet<String> =
                recs.iter().map(|r| r.mgbench_version.clone()).collect();
            Machine {
                name: name.clone(),
                hostname: first.host.hostname.clone(),
                cpu_model: first.host.cpu_model.clone(),
                device: first.device.as_ref().map(|d| d.name.clone()),
                stream_copy_mbs: copy,
                stream_triad_mbs: triad,
                threads: threads.into_iter().collect(),
                ranks: first.ranks,
                mgbench_versions: versions.into_iter().collect(),
                records: recs.len(),
            }
        })
        .collect();
    let baseline = match baseline {
        None => 0,
        Some(b) => machines
            .iter()
            .position(|m| m.name == b)
            .or_else(|| machines.iter().position(|m| m.name.contains(b)))
            .ok_or_else(|| ReportError::NoSuchBaseline {
                given: b.to_string(),
                machines: machines
                    .iter()
                    .map(|m| m.name.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?,
    };
    // Patterns in order of first appearance, keyed by (name, kernel).
    let mut keys: Vec<(String, KernelKind)> = Vec::new();
    let mut cells: BTreeMap<(String, KernelKind), Vec<Vec<&ReplayRecord>>> = BTreeMap::new();
    for (mi, name) in order.iter().enumerate() {
        for r in &by_machine[name] {
            let k = (r.name.clone(), r.kernel);
            let e = cells.entry(k.clone()).or_insert_with(|| {
                keys.push(k.clone());
                vec![Vec::new(); order.len()]
            });
            e[mi].push(r);
        }
    }
    let base_stream = machines[baseline].stream_copy_mbs;
    // Each row with whether some machine's runs were too short to time.
    let mut rows: Vec<(bool, Row)> = keys
        .iter()
        .map(|k| {
            let per = &cells[k];
            let bw: Vec<Option<f64>> = per
                .iter()
                .map(|rs| median(&mut rs.iter().map(|r| r.bandwidth_mbs).collect::<Vec<_>>()))
                .collect();
            let pct: Vec<Option<f64>> = bw
                .iter()
                .zip(&machines)
                .map(|(b, m)| Some(100.0 * (*b)? / m.stream_copy_mbs.filter(|s| *s > 0.0)?))
                .collect();
            let base_bw = bw[baseline].filter(|b| *b > 0.0);
            let ratio: Vec<Option<f64>> = bw.iter().map(|b| Some((*b)? / base_bw?)).collect();
            let predicted: Vec<Option<f64>> = machines
                .iter()
                .map(|m| Some(m.stream_copy_mbs? / base_stream.filter(|s| *s > 0.0)?))
                .collect();
            let departure = ratio
                .iter()
                .zip(&predicted)
                .filter_map(|(r, p)| {
                    let (r, p) = ((*r)?, (*p)?);
                    (r > 0.0 && p > 0.0).then(|| (r / p).log2().abs())
                })
                .fold(None, |a: Option<f64>, d| Some(a.map_or(d, |a| a.max(d))));
            let mut flags = Vec::new();
            let present: Vec<&ReplayRecord> =
                per.iter().filter_map(|rs| rs.first().copied()).collect();
            let differs = |f: &dyn Fn(&ReplayRecord) -> String| {
                let vals: BTreeSet<String> = present.iter().map(|r| f(r)).collect();
                (vals.len() > 1).then(|| vals.into_iter().collect::<Vec<_>>().join(" vs "))
            };
            if let Some(v) = differs(&|r| {
                format!(
                    "count {} x {} indices, delta {}",
                    r.count, r.pattern_len, r.delta
                )
            }) {
                flags.push(format!("sizes differ: {v}"));
            }
            // Threads compare between machines of one kind: CPU worker threads, or GPU
            // threads per block (a CPU and a GPU differ by nature).
            for backend in ["cpu", "cuda"] {
                let vals: BTreeSet<String> = present
                    .iter()
                    .filter(|r| r.backend == backend)
                    .map(|r| format!("{} {}", chosen_threads(r), threads_unit(r.gpu.is_some())))
                    .collect();
                if vals.len() > 1 {
                    let v = vals.into_iter().collect::<Vec<_>>().join(" vs ");
                    flags.push(format!("threads differ: {v}"));
                }
            }
            if let Some(v) = differs(&|r| r.mgbench_version.clone()) {
                flags.push(format!("mgbench versions differ: {v}"));
            }
            let missing: Vec<&str> = per
                .iter()
                .zip(&machines)
                .filter(|(rs, _)| rs.is_empty())
                .map(|(_, m)| m.name.as_str())
                .collect();
            if !missing.is_empty() {
                flags.push(format!("not run on {}", missing.join(", ")));
            }
            // A bandwidth from runs that starting them takes a tenth of or more is low by
            // as much (the record's note): its ratios say little about the machines' memory.
            let short: Vec<&str> = per
                .iter()
                .zip(&machines)
                .filter(|(rs, _)| rs.iter().any(|r| r.too_short_to_time()))
                .map(|(_, m)| m.name.as_str())
                .collect();
            if !short.is_empty() {
                flags.push(format!(
                    "{} on {} (raise its count: see the record's note)",
                    mgbench_replay::measure::SHORT_RUN,
                    short.join(", ")
                ));
            }
            let row = Row {
                pattern: k.0.clone(),
                kernel: k.1,
                bandwidth_mbs: bw,
                runs: per.iter().map(Vec::len).collect(),
                pct_of_stream: pct,
                ratio_to_baseline: ratio,
                stream_predicted_ratio: predicted,
                departure,
                flags,
            };
            (!short.is_empty(), row)
        })
        .collect();
    // By departure from STREAM's prediction; rows too short to time last, as their departure
    // is the start's as much as the memory's.
    rows.sort_by(|(sa, a), (sb, b)| {
        sa.cmp(sb).then(
            b.departure
                .unwrap_or(-1.0)
                .total_cmp(&a.departure.unwrap_or(-1.0)),
        )
    });
    let rows: Vec<Row> = rows.into_iter().map(|(_, r)| r).collect();
    let mut warnings = Vec::new();
    let versions: BTreeSet<&String> = machines
        .iter()
        .flat_map(|m| m.mgbench_versions.iter())
        .collect();
    if versions.len() > 1 {
        warnings.push(format!(
            "results come from different mgbench versions ({}): kernels or accounting may differ",
            versions.into_iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    for m in &machines {
        if m.stream_copy_mbs.is_none() {
            warnings.push(format!(
                "{} has no STREAM baseline (replayed with --no-stream and no STREAM file given): its % of STREAM and STREAM's prediction are unknown",
                m.name
            ));
        }
        if m.threads.len() > 1 {
            warnings.push(format!(
                "{} ran with different {} ({}): its medians mix them",
                m.name,
                if m.device.is_some() {
                    "threads per block"
                } else {
                    "thread counts"
                },
                m.threads
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(Comparison {
        machines,
        baseline,
        rows,
        warnings,
    })
}

/// The thread count a record's user chose: worker threads per rank on CPUs, threads per block
/// on a GPU (its grid follows the count, so the threads launched differ between configs and
/// sweep steps by design).
pub fn chosen_threads(r: &ReplayRecord) -> usize {
    r.gpu.as_ref().map_or(r.threads, |g| g.block as usize)
}

/// What a thread count counts: worker threads on CPUs, threads per block on a GPU.
fn threads_unit(gpu: bool) -> &'static str {
    if gpu {
        "threads per block"
    } else {
        "threads"
    }
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

impl Comparison {
    /// The terminal table of `mgbench compare`.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let base = &self.machines[self.baseline];
        s.push_str(&format!(
            "{} machine(s); baseline {} (STREAM copy {} MB/s)\n",
            self.machines.len(),
            base.name,
            cell(base.stream_copy_mbs, 1)
        ));
        for (i, m) in self.machines.iter().enumerate() {
            s.push_str(&format!(
                "  [{i}] {} ({}{}), STREAM copy {} MB/s, {} record(s), {} {}\n",
                m.name,
                m.cpu_model,
                m.device
                    .as_ref()
                    .map(|d| format!(", GPU {d}"))
                    .unwrap_or_default(),
                cell(m.stream_copy_mbs, 1),
                m.records,
                threads_unit(m.device.is_some()),
                m.threads
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        s.push('\n');
        let mut head = format!("{:<28} {:<12}", "pattern", "kernel");
        for (i, _) in self.machines.iter().enumerate() {
            head.push_str(&format!(
                " {:>12} {:>7} {:>7} {:>8}",
                format!("[{i}] MB/s"),
                "%STRM",
                "x base",
                "STREAM x"
            ));
        }
        head.push_str("  flags");
        s.push_str(&head);
        s.push('\n');
        s.push_str(&"-".repeat(head.len().min(200)));
        s.push('\n');
        for r in &self.rows {
            let mut line = format!(
                "{:<28} {:<12}",
                mgbench_replay::export::truncate(&r.pattern, 28),
                r.kernel.as_str()
            );
            for i in 0..self.machines.len() {
                line.push_str(&format!(
                    " {:>12} {:>7} {:>7} {:>8}",
                    cell(r.bandwidth_mbs[i], 1),
                    cell(r.pct_of_stream[i], 1),
                    cell(r.ratio_to_baseline[i], 2),
                    cell(r.stream_predicted_ratio[i], 2)
                ));
            }
            if !r.flags.is_empty() {
                line.push_str("  ");
                line.push_str(&r.flags.join("; "));
            }
            s.push_str(&line);
            s.push('\n');
        }
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }

    /// One CSV row per (pattern, machine).
    pub fn csv(&self) -> Result<String, ReportError> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let e = |e: csv::Error| ReportError::Encode(e.to_string());
        w.write_record([
            "pattern",
            "kernel",
            "machine",
            "baseline",
            "bandwidth_mbs",
            "runs",
            "stream_copy_mbs",
            "pct_of_stream",
            "ratio_to_baseline",
            "stream_predicted_ratio",
            "departure_log2",
            "flags",
        ])
        .map_err(e)?;
        let opt = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
        for r in &self.rows {
            for (i, m) in self.machines.iter().enumerate() {
                w.write_record([
                    r.pattern.clone(),
                    r.kernel.as_str().to_string(),
                    m.name.clone(),
                    self.machines[self.baseline].name.clone(),
                    opt(r.bandwidth_mbs[i]),
                    r.runs[i].to_string(),
                    opt(m.stream_copy_mbs),
                    opt(r.pct_of_stream[i]),
                    opt(r.ratio_to_baseline[i]),
                    opt(r.stream_predicted_ratio[i]),
                    opt(r.departure),
                    r.flags.join("; "),
                ])
                .map_err(e)?;
            }
        }
        let bytes = w
            .into_inner()
            .map_err(|x| ReportError::Encode(x.to_string()))?;
        String::from_utf8(bytes).map_err(|x| ReportError::Encode(x.to_string()))
    }
}
