//! Helpers shared by the test modules.

use mgbench_capture::trace::*;

pub fn meta(backend: &str) -> TraceMeta {
    TraceMeta {
        command: vec!["./demo".into(), "--x=1".into()],
        backend: backend.into(),
        mode: Mode::Sampled {
            window: 4,
            period: 10,
        },
        start_time: "2026-11-22T00:00:00Z".into(),
        roi: None,
        notes: vec![],
    }
}

/// A chunk of `n` accesses in samples of 4, for thread `thread`.
pub fn chunk(thread: u32, first_sample: u64, n: usize) -> Chunk {
    let accesses: Vec<Access> = (0..n as u64)
        .map(|i| Access {
            ip: 0x401000 + (i % 3) * 4,
            addr: 0x7f00_0000 + i * 8 + (i % 3) * 0x10000,
            size: 8,
            kind: if i % 3 == 2 {
                AccessKind::Store
            } else {
                AccessKind::Load
            },
        })
        .collect();
    let samples = accesses
        .chunks(4)
        .enumerate()
        .map(|(k, s)| SampleHeader {
            id: first_sample + k as u64,
            skipped_before: 6,
            len: s.len() as u32,
        })
        .collect();
    Chunk {
        thread,
        samples,
        accesses,
    }
}

/// Reads every frame; returns them with the damage report.
pub fn read_all(bytes: &[u8]) -> (Vec<Frame>, Option<Damage>) {
    let mut r = TraceReader::open(bytes).expect("header");
    let mut frames = Vec::new();
    while let Some(f) = r.next_frame().expect("io") {
        frames.push(f);
    }
    (frames, r.damage().cloned())
}
