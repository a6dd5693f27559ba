//! Locality-analysis throughput (issue #5 target: exact reuse distance >= 10 M accesses/s).
//!
//!     cargo bench -p mgbench-synth --bench locality [-- ACCESSES]
//!
//! Prints, each as the median of 5 runs on the same generated stream:
//! - exact reuse distance alone (Olken) on uniform random 8-byte words over 2^22 words (32 MiB),
//!   the "10 M-access random trace", and on a unit-stride sweep of the same span;
//! - SHARDS at rate 0.01 on the random stream, with its largest error in the reuse CDF;
//! - `analyze` end to end (decode, scores, both reuse curves, footprints, no Apex fit) on the
//!   random stream written as a full trace, and the Apex-MAP grid + fit on its own.

use std::time::Instant;

use mgbench_capture::trace::{
    Access, AccessKind, Chunk, EndInfo, Mode, SampleHeader, TraceMeta, TraceWriter,
};
use mgbench_synth::analyze::{analyze, AnalyzeConfig};
use mgbench_synth::apex;
use mgbench_synth::locality::reuse::{ReuseDistance, Shards, BATCH};
use mgbench_synth::locality::{ReuseMethod, Scorer};

const SPAN_WORDS: u64 = 1 << 22;

fn random_words(n: usize) -> Vec<u64> {
    let mut rng = apex::Rng::new(11);
    (0..n).map(|_| rng.next_u64() % SPAN_WORDS).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time5(mut f: impl FnMut()) -> f64 {
    median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn write_trace(path: &std::path::Path, words: &[u64]) {
    let meta = TraceMeta {
        command: vec!["bench-random".into()],
        backend: "bench".into(),
        mode: Mode::Full,
        start_time: "2026-01-01T00:00:00Z".into(),
        roi: None,
        notes: vec![],
    };
    let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::create(f, &meta).unwrap();
    for part in words.chunks(65536) {
        let chunk = Chunk {
            thread: 0,
            samples: vec![SampleHeader {
                id: 0,
                skipped_before: 0,
                len: part.len() as u32,
            }],
            accesses: part
                .iter()
                .map(|&wd| Access {
                    ip: 0x401000,
                    addr: 0x1000_0000 + 8 * wd,
                    size: 8,
                    kind: AccessKind::Load,
                })
                .collect(),
        };
        w.write_chunk(&chunk).unwrap();
    }
    w.write_end(&EndInfo::default()).unwrap();
}

fn main() {
    // `cargo test --all-targets` runs bench targets too (without `--bench`): a benchmark is
    // not a test, so it only runs under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("{}: a benchmark; run it with cargo bench", file!());
        return;
    }
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let random = random_words(n);
    let sweep: Vec<u64> = (0..n as u64).map(|i| i % SPAN_WORDS).collect();
    for (name, s) in [("random", &random), ("sweep", &sweep)] {
        let mut sink = 0u64;
        let t = time5(|| {
            let mut r = ReuseDistance::new();
            for &w in s.iter() {
                sink = sink.wrapping_add(r.access(w).unwrap_or(1));
            }
        });
        std::hint::black_box(sink);
        let tb = time5(|| {
            let mut r = ReuseDistance::new();
            for part in s.chunks(BATCH) {
                r.batch(part, |d| sink = sink.wrapping_add(d.unwrap_or(1)));
            }
        });
        std::hint::black_box(sink);
        println!(
            "exact reuse distance, {name} over 2^22 words: {n} accesses; one by one: median {t:.3} s of 5 -> {:.1} M accesses/s; in batches of {BATCH}: median {tb:.3} s -> {:.1} M accesses/s",
            n as f64 / t / 1e6,
            n as f64 / tb / 1e6
        );
    }
    let t = time5(|| {
        let mut s = Shards::new(0.01);
        for &w in &random {
            std::hint::black_box(s.access(w));
        }
    });
    let mut exact = Scorer::new(ReuseMethod::Exact, false);
    let mut shards = Scorer::new(ReuseMethod::Shards { rate: 0.01 }, false);
    for &w in &random {
        exact.reference(w * 8);
        shards.reference(w * 8);
    }
    let err = exact
        .word_curve()
        .below
        .iter()
        .zip(&shards.word_curve().below)
        .map(|(a, b)| (a.fraction - b.fraction).abs())
        .fold(0.0, f64::max);
    println!(
        "SHARDS rate 0.01, random: median {t:.3} s of 5 -> {:.1} M accesses/s; largest CDF error vs exact {err:.4}, temporal {:.4} vs {:.4}",
        n as f64 / t / 1e6,
        shards.temporal(),
        exact.temporal()
    );
    let path = std::env::temp_dir().join(format!(
        "mgbench-locality-bench-{}.mgbt",
        std::process::id()
    ));
    write_trace(&path, &random);
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, all] {
        let cfg = AnalyzeConfig {
            apex: false,
            threads,
            ..AnalyzeConfig::default()
        };
        let t = time5(|| {
            std::hint::black_box(analyze(&path, &cfg).unwrap());
        });
        println!(
            "analyze (no Apex fit), random trace, {threads} thread(s): median {t:.3} s of 5 -> {:.1} M accesses/s",
            n as f64 / t / 1e6
        );
    }
    let _ = std::fs::remove_file(&path);
    let threads = all;
    let t = time5(|| {
        let g = apex::grid(apex::DEFAULT_M, apex::GRID_ACCESSES, threads);
        std::hint::black_box(g.fit(0.5, 0.5));
    });
    println!(
        "Apex-MAP grid ({} streams) + one fit on {threads} thread(s): median {t:.3} s of 5",
        apex::GRID_L.len() * apex::GRID_K.len()
    );
}
