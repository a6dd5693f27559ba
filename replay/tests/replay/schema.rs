//! The results schema is locked: field names, JSON round trip, CSV header.

use mgbench_replay::export::{CsvExporter, ExportFormat, Exporter};
use mgbench_replay::record::{Host, ReplayRecord, StreamRecord};
use mgbench_replay::{replay, InlineSpec, Input, ReplayConfig, StreamSize};

fn sample() -> (Vec<ReplayRecord>, StreamRecord) {
    let mut cfg = ReplayConfig::new(vec![Input::Inline(Box::new(InlineSpec {
        kernel: Some("scatter".into()),
        pattern: Some("0,1,2,3".into()),
        delta: Some(2),
        count: Some(512),
        ..InlineSpec::default()
    }))]);
    cfg.threads = 2;
    cfg.runs = Some(3);
    cfg.stream_elements = Some(StreamSize::Elements(50_000));
    let mut stream = None;
    let recs = replay(&cfg, &mut |e| {
        if let mgbench_replay::Event::Stream(s) = e {
            stream = Some(s.clone());
        }
    })
    .unwrap();
    (recs, stream.unwrap())
}

const REPLAY_KEYS: &[&str] = &[
    "schema_version",
    "name",
    "kernel",
    "source",
    "config_index",
    "backend",
    "pattern_len",
    "delta",
    "delta_scatter",
    "pattern_spec",
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
    "run_times_s",
    "bandwidth_mbs",
    "accesses",
    "accesses_per_s",
    "ns_per_access",
    "apex",
    "stream_copy_mbs",
    "pct_of_stream",
    "compaction",
    "racy",
    "atomic",
    "pinned",
    "timer",
    "notes",
    "mpi",
    "device",
    "gpu",
    "host",
    "mgbench_version",
    "time",
];

const STREAM_KEYS: &[&str] = &[
    "schema_version",
    "copy_mbs",
    "scale_mbs",
    "add_mbs",
    "triad_mbs",
    "elements",
    "array_bytes",
    "threads",
    "ntimes",
    "kernels",
    "validated",
    "pinned",
    "notes",
    "ranks",
    "host",
    "mgbench_version",
    "time",
];

fn keys(v: &serde_json::Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn replay_record_fields_are_locked_and_round_trip() {
    let (recs, _) = sample();
    let json = ExportFormat::Json.exporter().replay(&recs).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let first = &v.as_array().unwrap()[0];
    let mut got = keys(first);
    let mut want: Vec<String> = REPLAY_KEYS.iter().map(|s| s.to_string()).collect();
    got.sort();
    want.sort();
    assert_eq!(
        got, want,
        "documented schema changed: update README and schema_version"
    );
    let host_keys = keys(&first["host"]);
    for k in [
        "hostname",
        "cpu_model",
        "cores",
        "llc_bytes",
        "memory_bytes",
        "load_avg_1m",
        "os",
    ] {
        assert!(host_keys.iter().any(|h| h == k), "host.{k}");
    }
    assert_eq!(first["kernel"], "scatter");
    // The host's CPU count is the process's, not the pinned main thread's single CPU.
    assert_eq!(
        recs[0].host.cores,
        std::thread::available_parallelism().unwrap().get()
    );
    let back: Vec<ReplayRecord> = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, recs);
}

#[test]
fn stream_record_fields_are_locked_and_round_trip() {
    let (_, s) = sample();
    let json = ExportFormat::Json.exporter().stream(&s).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let mut got = keys(&v);
    let mut want: Vec<String> = STREAM_KEYS.iter().map(|s| s.to_string()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let back: StreamRecord = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, s);
    assert!(s.validated);
    assert_eq!(s.kernels.len(), 4);
}

#[test]
fn csv_has_the_documented_header_and_one_row_per_record() {
    let (recs, s) = sample();
    let csv = String::from_utf8(CsvExporter.replay(&recs).unwrap()).unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header, mgbench_replay::export::REPLAY_CSV_COLUMNS);
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), recs.len());
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(&rows[0][col("kernel")], "scatter");
    assert_eq!(rows[0][col("run_times_s")].split(';').count(), 3);
    let stream_csv = String::from_utf8(CsvExporter.stream(&s).unwrap()).unwrap();
    assert_eq!(stream_csv.lines().count(), 5, "header + 4 kernels");
}

#[test]
fn table_mentions_racy_scatter() {
    let (recs, _) = sample();
    // delta 2 < span 3 with 2 threads: iterations overlap across threads.
    assert!(recs[0].racy);
    let table = String::from_utf8(ExportFormat::Table.exporter().replay(&recs).unwrap()).unwrap();
    assert!(table.contains("racy-by-design"), "{table}");
    let _ = Host::detect();
}
