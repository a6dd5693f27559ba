//! Report speed (issue #12 target: a report from 10,000 results records and a 1 M-index
//! pattern in under 2 s).
//!
//!     cargo bench -p mgbench-report --bench report [-- RECORDS]
//!
//! Writes, once per run, RECORDS (default 10,000) replay records spread over 5 machines and
//! 250 patterns each (8 records per pattern: repeated invocations), their STREAM results, and
//! a pattern file with one 1,048,576-index random gather; then times `build` end to end (read
//! and hash the files, parse, compare, draw, write the page) 5 times and prints the median and
//! its ratio to the 2 s target.

use std::time::Instant;

use mgbench_replay::record::{ReplayRecord, StreamRecord};
use mgbench_report::{build, ReportConfig};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("{}: a benchmark; run it with cargo bench", file!());
        return;
    }
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| a.chars().all(|c| c.is_ascii_digit()))
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let template: Vec<ReplayRecord> =
        serde_json::from_slice(&std::fs::read(data.join("machine-a-replay.json")).unwrap())
            .unwrap();
    let stream: StreamRecord =
        serde_json::from_slice(&std::fs::read(data.join("machine-a-stream.json")).unwrap())
            .unwrap();
    let dir = std::env::temp_dir().join(format!("mgbench-report-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let machines = 5;
    let per_machine = n / machines;
    let patterns = 250;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for m in 0..machines {
        let host = format!("machine-{m}");
        let recs: Vec<ReplayRecord> = (0..per_machine)
            .map(|i| {
                let mut r = template[i % template.len()].clone();
                r.name = format!("pattern-{}", i % patterns);
                r.host.hostname = host.clone();
                let f = 0.5 + (next() % 1000) as f64 / 400.0 + m as f64;
                r.bandwidth_mbs *= f;
                r.run_times_s.iter_mut().for_each(|t| *t /= f);
                r.stream_copy_mbs = r.stream_copy_mbs.map(|s| s * (1.0 + m as f64));
                r
            })
            .collect();
        std::fs::write(
            dir.join(format!("replay-{m}.json")),
            serde_json::to_vec(&recs).unwrap(),
        )
        .unwrap();
        let mut s = stream.clone();
        s.host.hostname = host;
        std::fs::write(
            dir.join(format!("replay-{m}-stream.json")),
            serde_json::to_vec(&s).unwrap(),
        )
        .unwrap();
    }
    let pattern: Vec<u64> = (0..1 << 20).map(|_| next() % (1 << 24)).collect();
    std::fs::write(
        dir.join("big-pattern.json"),
        serde_json::to_vec(&serde_json::json!([{
            "name": "random-1M", "kernel": "gather", "pattern": pattern, "count": 1
        }]))
        .unwrap(),
    )
    .unwrap();
    let cfg = ReportConfig::new(vec![dir.clone()], "bench".into());
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let t = Instant::now();
        let r = build(&cfg).unwrap();
        std::fs::write(dir.join("report.html"), &r.html).unwrap();
        times.push(t.elapsed().as_secs_f64());
        last = Some(r);
    }
    times.sort_by(f64::total_cmp);
    let r = last.unwrap();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "report: {} records on {machines} machines + a 1,048,576-index pattern -> {} figures, {} marks, {:.1} MiB of HTML: median {:.3} s of 5 (runs {}), {:.2} of the 2 s target; load {}",
        per_machine * machines,
        r.figures.len(),
        r.figures.iter().map(|f| f.marks).sum::<usize>(),
        r.html.len() as f64 / 1048576.0,
        times[2],
        times
            .iter()
            .map(|t| format!("{t:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
        times[2] / 2.0,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
