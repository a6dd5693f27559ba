//! `mgbench analyze` at scale (issue #15 target: >= 10 M accesses/s end to end on a 1 G-access
//! trace on the 2-core development machine).
//!
//!     cargo bench -p mgbench-synth --bench analyze_scale [-- ACCESSES] [--kind mix|random]
//!                 [--threads N] [--reps R] [--by-function]
//!
//! Writes a full trace of ACCESSES (default 2^30) accesses once (kept in the system temporary
//! directory, named by its size and kind, so later runs reuse it), then times `analyze` on it
//! end to end (decode, scores, both reuse curves, footprints, no Apex fit) R times (default
//! 3) and prints each run, the median, and the process's peak memory.
//!
//! With `--rdx` it times trace-driven RDX instead (`mgbench reuse --rdx TRACE --no-exact`,
//! issue #14 target: >= 50 M accesses/s), next to decoding alone measured in the same run
//! (RDX's O(1) work per access: decoding bounds it).
//!
//! With `--affinity` it times `mgbench affinity` (zoom pass + pair-wise pass over 10 regions
//! of interest; issue #13 target: 10 M accesses in under 2 s), with `--zoom` the zoom alone
//! (target: >= 20 M accesses/s on 100 M), each next to decoding alone in the same run:
//!
//!     cargo bench -p mgbench-synth --bench analyze_scale -- 10000000 --affinity --kind regions
//!     cargo bench -p mgbench-synth --bench analyze_scale -- 100000000 --zoom --kind regions
//!
//! Kinds: `random` is the worst case, uniformly random 8-byte words over 2^22 words (32 MiB,
//! every reuse a cache miss); `mix` is shaped like a solver: 40% unit-stride sweeps over
//! 256 MiB, 30% random gathers over a 2^22-word table, 20% a hot set of 512 words (a stack),
//! 10% random scatters over 2^26 words, from 6 instructions. `regions` spreads the accesses
//! over 10 arrays of 256 KiB (4096 lines, the most affinity analyses per region), 2 MiB
//! apart, from 10 instructions: sweeps, random gathers and 3-line strides in turn.

use std::path::PathBuf;
use std::time::Instant;

use mgbench_capture::trace::{
    Access, AccessKind, Chunk, EndInfo, Mode, SampleHeader, TraceMeta, TraceWriter,
};
use mgbench_synth::analyze::{analyze, AnalyzeConfig};
use mgbench_synth::apex::Rng;

const CHUNK: usize = 65536;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Random,
    Mix,
    Regions,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Random => "random",
            Kind::Mix => "mix",
            Kind::Regions => "regions",
        }
    }
}

struct Gen {
    rng: Rng,
    kind: Kind,
    sweep: u64,
    i: u64,
    cursors: [u64; 10],
}

impl Gen {
    fn next(&mut self) -> Access {
        self.i += 1;
        let (ip, addr, store) = match self.kind {
            Kind::Random => (
                0x401000,
                0x1000_0000 + 8 * (self.rng.next_u64() % (1 << 22)),
                false,
            ),
            Kind::Mix => {
                let r = self.rng.next_u64();
                match r % 10 {
                    0..=3 => {
                        self.sweep = (self.sweep + 1) % (1 << 25);
                        (0x401000, 0x2000_0000 + 8 * self.sweep, false)
                    }
                    4..=6 => (0x401010, 0x6000_0000 + 8 * ((r >> 8) % (1 << 22)), false),
                    7 => (0x401020, 0x7ffe_0000 + 8 * ((r >> 8) % 512), false),
                    8 => (0x401028, 0x7ffe_0000 + 8 * ((r >> 20) % 512), true),
                    _ => (0x401030, 0x8000_0000 + 8 * ((r >> 8) % (1 << 26)), true),
                }
            }
            Kind::Regions => {
                let r = self.rng.next_u64();
                let k = (r % 10) as usize;
                let base = 0x1000_0000 + (k as u64) * (2 << 20);
                let words = 256 * 1024 / 8;
                let off = match k % 3 {
                    0 => {
                        self.cursors[k] = (self.cursors[k] + 1) % words;
                        self.cursors[k]
                    }
                    1 => (r >> 8) % words,
                    _ => {
                        self.cursors[k] = (self.cursors[k] + 24) % words;
                        self.cursors[k]
                    }
                };
                (0x401000 + 16 * k as u64, base + 8 * off, k == 9)
            }
        };
        Access {
            ip,
            addr,
            size: 8,
            kind: if store {
                AccessKind::Store
            } else {
                AccessKind::Load
            },
        }
    }
}

fn trace_path(n: u64, kind: Kind) -> PathBuf {
    let k = kind.name();
    std::env::temp_dir().join(format!("mgbench-analyze-scale-{k}-{n}.mgbt"))
}

fn write_trace(path: &PathBuf, n: u64, kind: Kind) {
    let meta = TraceMeta {
        command: vec![format!("bench-{}", path.display())],
        backend: "bench".into(),
        mode: Mode::Full,
        start_time: "2026-01-01T00:00:00Z".into(),
        roi: None,
        notes: vec![],
    };
    let tmp = path.with_extension("tmp");
    let f = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("create trace"));
    let mut w = TraceWriter::create(f, &meta).expect("write header");
    let mut g = Gen {
        rng: Rng::new(7),
        kind,
        sweep: 0,
        i: 0,
        cursors: [0; 10],
    };
    let mut left = n;
    let mut chunk = Chunk::default();
    while left > 0 {
        let m = (left as usize).min(CHUNK);
        chunk.accesses.clear();
        chunk.accesses.extend((0..m).map(|_| g.next()));
        chunk.samples = vec![SampleHeader {
            id: 0,
            skipped_before: 0,
            len: m as u32,
        }];
        w.write_chunk(&chunk).expect("write chunk");
        left -= m as u64;
    }
    w.write_end(&EndInfo {
        recorded: n,
        ..EndInfo::default()
    })
    .expect("write end");
    w.flush().expect("flush");
    drop(w);
    std::fs::rename(&tmp, path).expect("rename trace");
}

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn main() {
    // `cargo test --all-targets` runs bench targets too (without `--bench`): a benchmark is
    // not a test, so it only runs under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("{}: a benchmark; run it with cargo bench", file!());
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    // The first argument that is a number and not the value of a flag.
    let n: u64 = args
        .iter()
        .enumerate()
        .find(|(i, a)| {
            a.chars().all(|c| c.is_ascii_digit())
                && !(*i > 0 && ["--kind", "--reps", "--threads"].contains(&args[i - 1].as_str()))
        })
        .and_then(|(_, a)| a.parse().ok())
        .unwrap_or(1 << 30);
    let kind = match flag("--kind").as_deref() {
        Some("random") => Kind::Random,
        Some("regions") => Kind::Regions,
        _ => Kind::Mix,
    };
    let reps: usize = flag("--reps").and_then(|r| r.parse().ok()).unwrap_or(3);
    let threads: usize = flag("--threads")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let path = trace_path(n, kind);
    if !path.exists() {
        let t = Instant::now();
        write_trace(&path, n, kind);
        eprintln!(
            "wrote {} ({} accesses, {:.1} MiB) in {:.1} s",
            path.display(),
            n,
            std::fs::metadata(&path).map_or(0, |m| m.len()) as f64 / 1048576.0,
            t.elapsed().as_secs_f64()
        );
    }
    if args.iter().any(|a| a == "--affinity") {
        affinity(&path, n, threads, reps, kind, false);
        return;
    }
    if args.iter().any(|a| a == "--zoom") {
        affinity(&path, n, threads, reps, kind, true);
        return;
    }
    if args.iter().any(|a| a == "--rdx") {
        rdx(&path, n, threads, reps, kind);
        return;
    }
    let cfg = AnalyzeConfig {
        apex: false,
        threads,
        by_function: args.iter().any(|a| a == "--by-function"),
        ..AnalyzeConfig::default()
    };
    let mut rates = Vec::new();
    for rep in 0..reps {
        let t = Instant::now();
        let r = analyze(&path, &cfg).expect("analyze");
        let s = t.elapsed().as_secs_f64();
        assert_eq!(r.accesses, n);
        let rate = n as f64 / s / 1e6;
        rates.push(rate);
        println!(
            "run {}: {s:.2} s -> {rate:.1} M accesses/s (spatial {:.3}, temporal {:.3})",
            rep + 1,
            r.program_locality.spatial_score,
            r.program_locality.temporal_score
        );
    }
    rates.sort_by(f64::total_cmp);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "analyze, {} trace of {n} accesses, {threads} thread(s): median {:.1} M accesses/s of {reps} (target >= 10); peak memory {:.0} MiB; load {}",
        kind.name(),
        rates[rates.len() / 2],
        peak_rss_mib().unwrap_or(f64::NAN),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
}

/// Decoding alone, in M accesses/s.
fn decode_rate(path: &std::path::Path, n: u64, threads: usize) -> f64 {
    use mgbench_capture::trace::{parallel::for_each_frame, Frame, TraceReader};
    let t = Instant::now();
    let mut seen = 0u64;
    let reader =
        TraceReader::open(std::fs::File::open(path).expect("open trace")).expect("read trace");
    for_each_frame(reader, threads, |f| {
        if let Frame::Chunk(c) = f {
            seen += c.accesses.len() as u64;
        }
    })
    .expect("decode");
    assert_eq!(seen, n);
    n as f64 / t.elapsed().as_secs_f64() / 1e6
}

fn affinity(
    path: &std::path::Path,
    n: u64,
    threads: usize,
    reps: usize,
    kind: Kind,
    zoom_only: bool,
) {
    use mgbench_synth::affinity::{affinity, zoom, AffinityConfig, ZoomConfig};
    let (mut secs, mut decode) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let d = decode_rate(path, n, threads);
        let t = Instant::now();
        let what = if zoom_only {
            let cfg = ZoomConfig {
                threads,
                ..ZoomConfig::default()
            };
            let z = zoom(path, &cfg).expect("zoom");
            assert_eq!(z.accesses, n);
            format!("{} regions", z.regions.len())
        } else {
            let mut cfg = AffinityConfig::default();
            cfg.zoom.threads = threads;
            let a = affinity(path, &cfg).expect("affinity");
            assert_eq!(a.accesses, n);
            let blocks: usize = a.regions.iter().map(|r| r.blocks).sum();
            format!("{} regions of interest, {blocks} blocks", a.regions.len())
        };
        let s = t.elapsed().as_secs_f64();
        println!(
            "run {}: decode {d:.1} M accesses/s; {} {s:.2} s -> {:.1} M accesses/s ({what})",
            rep + 1,
            if zoom_only { "zoom" } else { "affinity" },
            n as f64 / s / 1e6
        );
        secs.push(s);
        decode.push(d);
    }
    secs.sort_by(f64::total_cmp);
    decode.sort_by(f64::total_cmp);
    let (s, d) = (secs[reps / 2], decode[reps / 2]);
    let rate = n as f64 / s / 1e6;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let target = if zoom_only {
        format!("target >= 20 M accesses/s: {:.2} of it", rate / 20.0)
    } else {
        format!(
            "target < 2 s for 10 M accesses: {:.2} of it",
            s / (2.0 * n as f64 / 1e7)
        )
    };
    println!(
        "{} on a {} trace of {n} accesses, {threads} decode thread(s): median {s:.2} s = {rate:.1} M accesses/s of {reps} ({target}); {:.2} of decoding alone ({d:.1} M/s); peak memory {:.0} MiB; load {}",
        if zoom_only { "zoom" } else { "affinity (zoom + pair-wise pass)" },
        kind.name(),
        rate / d,
        peak_rss_mib().unwrap_or(f64::NAN),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
}

/// Trace-driven RDX without the exact pass, and decoding alone, alternated.
fn rdx(path: &std::path::Path, n: u64, threads: usize, reps: usize, kind: Kind) {
    use mgbench_synth::rdx::{reuse, ReuseConfig};
    let cfg = ReuseConfig {
        exact: false,
        threads,
        ..ReuseConfig::default()
    };
    let (mut rdx_rates, mut decode_rates) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let decode = decode_rate(path, n, threads);
        let t = Instant::now();
        let r = reuse(path, &cfg).expect("reuse");
        let s = t.elapsed().as_secs_f64();
        assert_eq!(r.accesses, n);
        let rate = n as f64 / s / 1e6;
        println!(
            "run {}: decode {decode:.1} M accesses/s; RDX {s:.2} s -> {rate:.1} M accesses/s ({} word samples, {} traps)",
            rep + 1,
            r.words.samples,
            r.words.traps
        );
        rdx_rates.push(rate);
        decode_rates.push(decode);
    }
    rdx_rates.sort_by(f64::total_cmp);
    decode_rates.sort_by(f64::total_cmp);
    let (r, d) = (rdx_rates[reps / 2], decode_rates[reps / 2]);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "RDX (reuse --rdx --no-exact, words and lines), {} trace of {n} accesses, {threads} thread(s): median {r:.1} M accesses/s of {reps} (target >= 50), {:.2} of decoding alone ({d:.1} M/s); peak memory {:.0} MiB; load {}",
        kind.name(),
        r / d,
        peak_rss_mib().unwrap_or(f64::NAN),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
}
