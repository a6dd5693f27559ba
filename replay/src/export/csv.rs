//! CSV: one row per record with a fixed header; lists are joined with ';', host fields are
//! prefixed `host_`. Empty cells mean "not applicable".

use super::{ExportError, Exporter};
use crate::record::{Host, ReplayRecord, StreamRecord};

pub struct CsvExporter;

/// Replay CSV columns, in order (documented in the README).
pub const REPLAY_COLUMNS: &[&str] = &[
    "schema_version",
    "time",
    "name",
    "kernel",
    "source",
    "config_index",
    "backend",
    "pattern_len",
    "delta",
    "delta_scatter",
    "delta_source",
    "count",
    "wrap",
    "threads",
    "ranks",
    "bytes",
    "sparse_bytes",
    "dense_bytes",
    "warmup_runs",
    "min_time_s",
    "median_time_s",
    "bandwidth_mbs",
    "accesses",
    "accesses_per_s",
    "ns_per_access",
    "stream_copy_mbs",
    "pct_of_stream",
    "racy",
    "atomic",
    "pinned",
    "timer",
    "run_times_s",
    "notes",
    "apex_l",
    "apex_k",
    "apex_m",
    "apex_seed",
    "mpi_scaling",
    "mpi_sum_of_rank_bandwidths_mbs",
    "mpi_rank_bandwidths_mbs",
    "device_name",
    "device_memory_bytes",
    "device_sm_count",
    "gpu_function",
    "gpu_block",
    "gpu_grid",
    "sweep_factor",
    "sweep_plateau_count",
    "host_hostname",
    "host_cpu_model",
    "host_cores",
    "host_llc_bytes",
    "host_memory_bytes",
    "host_load_avg_1m",
    "host_os",
    "mgbench_version",
    "compaction_max_gap_bytes",
    "compaction_original_span_bytes",
    "compaction_span_bytes",
    "pattern_spec",
];

/// STREAM CSV columns: one row per kernel.
pub const STREAM_COLUMNS: &[&str] = &[
    "schema_version",
    "time",
    "kernel",
    "elements",
    "array_bytes",
    "threads",
    "ntimes",
    "bytes",
    "best_time_s",
    "avg_time_s",
    "max_time_s",
    "bandwidth_mbs",
    "validated",
    "pinned",
    "host_hostname",
    "host_cpu_model",
    "host_cores",
    "mgbench_version",
];

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

fn host_cells(h: &Host) -> Vec<String> {
    vec![
        h.hostname.clone(),
        h.cpu_model.clone(),
        h.cores.to_string(),
        opt(&h.llc_bytes),
        opt(&h.memory_bytes),
        opt(&h.load_avg_1m),
        h.os.clone(),
    ]
}

fn finish(w: ::csv::Writer<Vec<u8>>) -> Result<Vec<u8>, ExportError> {
    w.into_inner()
        .map_err(|e| ExportError::Csv(e.error().to_string()))
}

impl Exporter for CsvExporter {
    fn replay(&self, records: &[ReplayRecord]) -> Result<Vec<u8>, ExportError> {
        let mut w = ::csv::Writer::from_writer(Vec::new());
        w.write_record(REPLAY_COLUMNS)?;
        for r in records {
            let mut row = vec![
                r.schema_version.to_string(),
                r.time.clone(),
                r.name.clone(),
                r.kernel.to_string(),
                r.source.clone(),
                r.config_index.to_string(),
                r.backend.clone(),
                r.pattern_len.to_string(),
                r.delta.to_string(),
                opt(&r.delta_scatter),
                r.delta_source.clone(),
                r.count.to_string(),
                r.wrap.to_string(),
                r.threads.to_string(),
                r.ranks.to_string(),
                r.bytes.to_string(),
                r.sparse_bytes.to_string(),
                r.dense_bytes.to_string(),
                r.warmup_runs.to_string(),
                r.min_time_s.to_string(),
                r.median_time_s.to_string(),
                r.bandwidth_mbs.to_string(),
                r.accesses.to_string(),
                r.accesses_per_s.to_string(),
                r.ns_per_access.to_string(),
                opt(&r.stream_copy_mbs),
                opt(&r.pct_of_stream),
                r.racy.to_string(),
                r.atomic.to_string(),
                r.pinned.to_string(),
                r.timer.clone(),
                r.run_times_s
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(";"),
                r.notes.join("; "),
                opt(&r.apex.map(|a| a.l)),
                opt(&r.apex.map(|a| a.k)),
                opt(&r.apex.map(|a| a.m)),
                opt(&r.apex.map(|a| a.seed)),
                r.mpi
                    .as_ref()
                    .map_or(String::new(), |m| m.scaling.as_str().to_string()),
                opt(&r.mpi.as_ref().map(|m| m.sum_of_rank_bandwidths_mbs)),
                r.mpi.as_ref().map_or(String::new(), |m| {
                    m.per_rank
                        .iter()
                        .map(|p| p.bandwidth_mbs.to_string())
                        .collect::<Vec<_>>()
                        .join(";")
                }),
                r.device.as_ref().map_or(String::new(), |d| d.name.clone()),
                opt(&r.device.as_ref().map(|d| d.memory_bytes)),
                opt(&r.device.as_ref().map(|d| d.sm_count)),
                r.gpu.as_ref().map_or(String::new(), |g| g.function.clone()),
                opt(&r.gpu.as_ref().map(|g| g.block)),
                opt(&r.gpu.as_ref().map(|g| g.grid)),
                opt(&r
                    .gpu
                    .as_ref()
                    .and_then(|g| g.sweep.as_ref())
                    .map(|s| s.factor)),
                opt(&r
                    .gpu
                    .as_ref()
                    .and_then(|g| g.sweep.as_ref())
                    .and_then(|s| s.plateau_count)),
            ];
            row.extend(host_cells(&r.host));
            row.push(r.mgbench_version.clone());
            let c = r.compaction.as_ref();
            row.push(opt(&c.map(|c| c.max_gap_bytes)));
            row.push(opt(&c.map(|c| c.original_span_elems.saturating_mul(8))));
            row.push(opt(&c.map(|c| c.span_elems.saturating_mul(8))));
            row.push(r.pattern_spec.clone().unwrap_or_default());
            w.write_record(&row)?;
        }
        finish(w)
    }

    fn stream(&self, s: &StreamRecord) -> Result<Vec<u8>, ExportError> {
        let mut w = ::csv::Writer::from_writer(Vec::new());
        w.write_record(STREAM_COLUMNS)?;
        for k in &s.kernels {
            w.write_record([
                s.schema_version.to_string(),
                s.time.clone(),
                k.name.clone(),
                s.elements.to_string(),
                s.array_bytes.to_string(),
                s.threads.to_string(),
                s.ntimes.to_string(),
                k.bytes.to_string(),
                k.best_time_s.to_string(),
                k.avg_time_s.to_string(),
                k.max_time_s.to_string(),
                k.bandwidth_mbs.to_string(),
                s.validated.to_string(),
                s.pinned.to_string(),
                s.host.hostname.clone(),
                s.host.cpu_model.clone(),
                s.host.cores.to_string(),
                s.mgbench_version.clone(),
            ])?;
        }
        finish(w)
    }
}
