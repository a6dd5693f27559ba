//! Building small traces for the tests.

#[path = "../../../tests/support/stale.rs"]
mod stale;
use stale::remove_stale;

use std::path::{Path, PathBuf};

use mgbench_capture::trace::{
    Access, AccessKind, Chunk, EndInfo, Mapping, Mode, SampleHeader, TraceMeta, TraceWriter,
};

/// `NAME` in this run's temporary directory, `mgbench-synth-PID` (earlier runs' are removed
/// at the first call: each left some 5 MB).
pub fn temp(name: &str) -> PathBuf {
    static CLEAN: std::sync::Once = std::sync::Once::new();
    CLEAN.call_once(|| remove_stale("mgbench-synth-", |pid| pid.parse().ok()));
    let dir = std::env::temp_dir().join(format!("mgbench-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

pub fn meta() -> TraceMeta {
    TraceMeta {
        command: vec!["/bin/demo".into()],
        backend: "test".into(),
        mode: Mode::Full,
        start_time: "2026-01-01T00:00:00Z".into(),
        roi: None,
        notes: vec![],
    }
}

pub fn load(ip: u64, index: u64) -> Access {
    Access {
        ip,
        addr: 0x10_0000 + 8 * index,
        size: 8,
        kind: AccessKind::Load,
    }
}

pub fn store(ip: u64, index: u64) -> Access {
    Access {
        ip,
        addr: 0x80_0000 + 8 * index,
        size: 8,
        kind: AccessKind::Store,
    }
}

/// Writes `accesses` (thread 0) in chunks of `per_chunk`.
pub fn write_trace(path: &Path, accesses: &[Access], per_chunk: usize) {
    write_trace_mapped(path, &[], accesses, per_chunk);
}

/// As [`write_trace`], with a mappings frame first.
pub fn write_trace_mapped(path: &Path, maps: &[Mapping], accesses: &[Access], per_chunk: usize) {
    let chunks: Vec<(u32, &[Access])> = accesses
        .chunks(per_chunk.max(1))
        .map(|part| (0, part))
        .collect();
    write_trace_threads(path, maps, &chunks);
}

/// A full trace of chunks of the given threads, in this order, after one mappings frame.
pub fn write_trace_threads(path: &Path, maps: &[Mapping], chunks: &[(u32, &[Access])]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::create(f, &meta()).unwrap();
    if !maps.is_empty() {
        w.write_mappings(maps).unwrap();
    }
    for &(thread, part) in chunks {
        w.write_chunk(&Chunk {
            thread,
            samples: vec![SampleHeader {
                id: 0,
                skipped_before: 0,
                len: part.len() as u32,
            }],
            accesses: part.to_vec(),
        })
        .unwrap();
    }
    w.write_end(&EndInfo {
        exit_code: Some(0),
        ..EndInfo::default()
    })
    .unwrap();
}

/// Seeded pseudo-random values below `span`.
pub fn randoms(n: usize, span: u64, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) % span
        })
        .collect()
}
