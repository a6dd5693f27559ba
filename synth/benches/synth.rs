//! Synthesis throughput on a generated 50 M-access trace (issue #4 target: >= 50 M records/s
//! on one core; GS Patterns' reference C tool manages about 5 M/s here).
//!
//!     cargo bench -p mgbench-synth --bench synth [-- ACCESSES]

use std::time::Instant;

use mgbench_capture::trace::{
    Access, AccessKind, Chunk, Mode, SampleHeader, TraceMeta, TraceWriter,
};
use mgbench_synth::{synthesize, SynthConfig};

/// A trace shaped like a sparse solver: per iteration, unit-stride index and value loads, a
/// gather through the indices (repeating every sweep), a unit-stride store, a random scatter,
/// and a long tail of cold instructions.
fn generate(path: &std::path::Path, n: u64) {
    let meta = TraceMeta {
        command: vec!["bench".into()],
        backend: "bench".into(),
        mode: Mode::Full,
        start_time: "2026-01-01T00:00:00Z".into(),
        roi: None,
        notes: vec![],
    };
    let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::create(f, &meta).unwrap();
    let cols: Vec<u64> = {
        let mut s = 42u64;
        (0..65536)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 33) % 100_000
            })
            .collect()
    };
    let mut chunk = Chunk::default();
    let mut state = 7u64;
    let mut j = 0u64;
    let mut emitted = 0u64;
    while emitted < n {
        let k = j % cols.len() as u64;
        let mut acc = |ip: u64, addr: u64, kind| {
            chunk.accesses.push(Access {
                ip,
                addr,
                size: 8,
                kind,
            });
        };
        acc(0x401000, 0x1000_0000 + 4 * k, AccessKind::Load);
        acc(0x401004, 0x2000_0000 + 8 * k, AccessKind::Load);
        acc(
            0x401008,
            0x3000_0000 + 8 * cols[k as usize],
            AccessKind::Load,
        );
        acc(0x40100c, 0x4000_0000 + 8 * (j % 4096), AccessKind::Store);
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
        acc(
            0x401010,
            0x5000_0000 + 8 * ((state >> 33) % 50_000),
            AccessKind::Store,
        );
        acc(
            0x500000 + (j % 3000) * 4,
            0x6000_0000 + 8 * (j % 777),
            AccessKind::Load,
        );
        j += 1;
        emitted += 6;
        if chunk.accesses.len() >= 1 << 16 {
            let len = chunk.accesses.len() as u32;
            chunk.samples = vec![SampleHeader {
                id: 0,
                skipped_before: 0,
                len,
            }];
            w.write_chunk(&chunk).unwrap();
            chunk.accesses.clear();
        }
    }
    if !chunk.accesses.is_empty() {
        let len = chunk.accesses.len() as u32;
        chunk.samples = vec![SampleHeader {
            id: 0,
            skipped_before: 0,
            len,
        }];
        w.write_chunk(&chunk).unwrap();
    }
    w.flush().unwrap();
}

fn main() {
    // `cargo test --all-targets` runs bench targets too (without `--bench`): a benchmark is
    // not a test, so it only runs under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("{}: a benchmark; run it with cargo bench", file!());
        return;
    }
    let n: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000_000);
    let path =
        std::env::temp_dir().join(format!("mgbench-synth-bench-{}.mgbt", std::process::id()));
    generate(&path, n);
    // `--profile`: only the single-threaded synthesis (for perf).
    let profile = std::env::args().any(|a| a == "--profile");
    // Reference in the same run: reading and decoding alone, on one thread.
    let mut times = Vec::new();
    let mut n_read = 0u64;
    for _ in 0..if profile { 0 } else { 5 } {
        let t = Instant::now();
        let f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&path).unwrap());
        let r = mgbench_capture::trace::TraceReader::open(f).unwrap();
        n_read = 0;
        mgbench_capture::trace::parallel::for_each_frame(r, 1, |f| {
            if let mgbench_capture::trace::Frame::Chunk(c) = f {
                n_read += c.accesses.len() as u64;
            }
        })
        .unwrap();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    if !profile {
        println!(
            "decode only: {n_read} accesses, 1 thread: median {:.3} s of 5 -> {:.1} M records/s",
            times[2],
            n_read as f64 / times[2] / 1e6
        );
    }
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut r = None;
    let counts: &[usize] = if profile { &[1] } else { &[1, all] };
    for &threads in counts {
        let cfg = SynthConfig {
            keep_unsymbolized: true,
            threads,
            ..SynthConfig::default()
        };
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            r = Some(synthesize(&path, &cfg).unwrap());
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let med = times[2];
        let rep = r.as_ref().unwrap();
        println!(
            "synth: {} accesses, {} patterns, {} decoding thread(s): median {:.3} s of 5 -> {:.1} M records/s",
            rep.accesses,
            rep.patterns.len(),
            threads,
            med,
            rep.accesses as f64 / med / 1e6
        );
    }
    // The cost of a progress display (issue #15: at most 1%): the same synthesis with a thread
    // reading the progress counters 10 times a second, as the CLI's bar does, interleaved
    // with runs without one; median of the per-pair ratios.
    if !profile {
        let mut ratios = Vec::new();
        for pair in 0..6 {
            let cfg = SynthConfig {
                keep_unsymbolized: true,
                threads: 1,
                ..SynthConfig::default()
            };
            let t = Instant::now();
            synthesize(&path, &cfg).unwrap();
            let plain = t.elapsed().as_secs_f64();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watcher = {
                let (stop, p) = (stop.clone(), cfg.progress.clone());
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::black_box((p.done(), p.total(), p.phase()));
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                })
            };
            let t = Instant::now();
            synthesize(&path, &cfg).unwrap();
            let watched = t.elapsed().as_secs_f64();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = watcher.join();
            // Alternate which run comes second (the second of a pair finds warmer caches).
            let again = {
                let t = Instant::now();
                synthesize(&path, &cfg).unwrap();
                t.elapsed().as_secs_f64()
            };
            ratios.push(if pair % 2 == 0 {
                watched / plain
            } else {
                watched / again
            });
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "progress display: synth time with a 10 Hz reader / without, median of 6 pairs: {:.3} (per pair: {})",
            (ratios[2] + ratios[3]) / 2.0,
            ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let r = r.unwrap();
    for p in &r.patterns {
        println!(
            "  {} {} len {} count {} delta {} ({})",
            p.name,
            p.kernel.as_str(),
            p.pattern.len(),
            p.count,
            p.delta,
            p.compression
        );
    }
    let _ = std::fs::remove_file(&path);
}
