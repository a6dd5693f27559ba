//! Chunk encoding throughput (accesses per second), the bound on how fast a capture can
//! write a trace. Run: cargo bench -p mgbench-capture --bench codec

use std::time::Instant;

use mgbench_capture::trace::{
    Access, AccessKind, Chunk, ChunkDecoder, ChunkEncoder, Layout, SampleHeader,
};

fn gather_like(n: usize) -> Chunk {
    gather_over(n, 4096)
}

/// A gather's index stream and its random loads over a table of `table` 8-byte elements.
fn gather_over(n: usize, table: u64) -> Chunk {
    let mut state = 7u64;
    let mut accesses = Vec::with_capacity(n);
    for j in 0..n as u64 / 2 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        accesses.push(Access {
            ip: 0x401100,
            addr: 0x10000 + 4 * j,
            size: 4,
            kind: AccessKind::Load,
        });
        accesses.push(Access {
            ip: 0x401104,
            addr: 0x5000000 + 8 * ((state >> 33) % table),
            size: 8,
            kind: AccessKind::Load,
        });
    }
    let len = accesses.len() as u32;
    Chunk {
        thread: 0,
        samples: vec![SampleHeader {
            id: 0,
            skipped_before: 0,
            len,
        }],
        accesses,
    }
}

/// A triad-like loop: two loads and a store per element, each stream 8 bytes apart.
fn stream_like(n: usize) -> Chunk {
    let accesses: Vec<Access> = (0..n as u64)
        .map(|i| {
            let (j, k) = (i / 3, i % 3);
            Access {
                ip: 0x401200 + 4 * k,
                addr: 0x1000_0000 * (k + 1) + 8 * j,
                size: 8,
                kind: if k == 2 {
                    AccessKind::Store
                } else {
                    AccessKind::Load
                },
            }
        })
        .collect();
    let len = accesses.len() as u32;
    Chunk {
        thread: 0,
        samples: vec![SampleHeader {
            id: 0,
            skipped_before: 0,
            len,
        }],
        accesses,
    }
}

fn main() {
    // `cargo test --all-targets` runs bench targets too (without `--bench`): a benchmark is
    // not a test, so it only runs under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("{}: a benchmark; run it with cargo bench", file!());
        return;
    }
    for (what, chunk) in [
        ("gather", gather_like(1 << 16)),
        ("gather over 2^24 elements", gather_over(1 << 16, 1 << 24)),
        ("stream", stream_like(1 << 16)),
    ] {
        println!("{what}:");
        bench(&chunk);
    }
}

fn bench(chunk: &Chunk) {
    let n = chunk.accesses.len() as f64;
    for level in [None, Some(1), Some(-1), Some(-5)] {
        // Encoders and decoders are reused across chunks, as the trace writer and reader do.
        let mut enc = level.map_or_else(ChunkEncoder::uncompressed, ChunkEncoder::new);
        let mut out = Vec::new();
        let mut times = Vec::new();
        for _ in 0..30 {
            let t = Instant::now();
            enc.encode_into(
                0,
                &chunk.samples,
                chunk.accesses.iter().copied(),
                chunk.accesses.len(),
                &mut out,
            );
            times.push(t.elapsed().as_secs_f64());
        }
        let bytes = out.len();
        times.sort_by(f64::total_cmp);
        let mut dec = ChunkDecoder::new();
        let mut d = Chunk::default();
        let mut dt = Vec::new();
        for _ in 0..30 {
            let t = Instant::now();
            dec.decode_into(&out, Layout::Columns, &mut d).unwrap();
            dt.push(t.elapsed().as_secs_f64());
            assert_eq!(d.accesses.len(), chunk.accesses.len());
        }
        dt.sort_by(f64::total_cmp);
        let name = level.map_or("no zstd".to_string(), |l| format!("zstd level {l:>2}"));
        println!(
            "{name:>13}: encode {:6.1} M accesses/s, decode {:6.1} M accesses/s, {:.2} B/access",
            n / times[15] / 1e6,
            n / dt[15] / 1e6,
            bytes as f64 / n
        );
    }
}
