//! The trace format: round trips, recovery from truncation and corruption, bad files.

use mgbench_capture::trace::*;
use proptest::prelude::*;

use crate::common::{chunk, meta, read_all};

fn sample_trace() -> (Vec<u8>, Vec<Frame>) {
    let mut w = TraceWriter::create(Vec::new(), &meta("test")).unwrap();
    let maps = vec![Mapping {
        start: 0x400000,
        end: 0x401000,
        offset: 0,
        path: "/bin/demo".into(),
        perms: "r-xp".into(),
    }];
    w.write_mappings(&maps).unwrap();
    let c0 = chunk(0, 0, 40);
    let c1 = chunk(1, 0, 17);
    let c2 = chunk(0, 10, 9);
    w.write_chunk(&c0).unwrap();
    w.write_chunk(&c1).unwrap();
    w.write_note("a note").unwrap();
    w.write_chunk(&c2).unwrap();
    assert_eq!(w.counts().0, 66);
    let end = EndInfo {
        exit_code: Some(0),
        recorded: 66,
        ..EndInfo::default()
    };
    w.write_end(&end).unwrap();
    let frames = vec![
        Frame::Mappings(maps),
        Frame::Chunk(c0),
        Frame::Chunk(c1),
        Frame::Note("a note".into()),
        Frame::Chunk(c2),
        Frame::End(end),
    ];
    (w.into_inner(), frames)
}

#[test]
fn round_trip_every_frame_kind() {
    let (bytes, frames) = sample_trace();
    let r = TraceReader::open(&bytes[..]).unwrap();
    assert_eq!(r.meta(), &meta("test"));
    let (got, damage) = read_all(&bytes);
    assert_eq!(got, frames);
    assert_eq!(damage, None);
}

#[test]
fn truncation_anywhere_keeps_every_complete_frame() {
    let (bytes, frames) = sample_trace();
    // Frame boundaries: where each complete prefix of frames ends.
    let mut ends = Vec::new();
    {
        let mut r = TraceReader::open(&bytes[..]).unwrap();
        ends.push(r.offset());
        while r.next_frame().unwrap().is_some() {
            ends.push(r.offset());
        }
    }
    let header_end = ends[0] as usize;
    for cut in header_end..bytes.len() {
        let (got, damage) = read_all(&bytes[..cut]);
        let complete = ends.iter().filter(|&&e| e as usize <= cut).count() - 1;
        assert_eq!(got.len(), complete, "cut at {cut}");
        assert_eq!(&got[..], &frames[..complete]);
        if ends.contains(&(cut as u64)) {
            assert!(damage.is_none(), "clean cut at a frame boundary {cut}");
        } else {
            let d = damage.expect("damage reported");
            assert_eq!(d.offset, ends[complete], "damage offset at cut {cut}");
            assert!(d.reason.contains("truncated"), "{}", d.reason);
        }
    }
}

#[test]
fn corruption_stops_at_the_damaged_frame() {
    let (mut bytes, frames) = sample_trace();
    let mut r = TraceReader::open(&bytes[..]).unwrap();
    r.next_frame().unwrap();
    r.next_frame().unwrap();
    let third = r.offset() as usize;
    bytes[third + 20] ^= 0xff;
    let (got, damage) = read_all(&bytes);
    assert_eq!(&got[..], &frames[..2]);
    let d = damage.unwrap();
    assert_eq!(d.offset as usize, third);
    assert!(d.reason.contains("checksum"), "{}", d.reason);
}

#[test]
fn bad_headers_are_clear_errors() {
    assert!(matches!(
        TraceReader::open(&b"hello world, not a trace"[..]),
        Err(ReadError::NotATrace)
    ));
    assert!(matches!(
        TraceReader::open(&b""[..]),
        Err(ReadError::NotATrace)
    ));
    let (mut bytes, _) = sample_trace();
    bytes[8] = 99;
    assert!(matches!(
        TraceReader::open(&bytes[..]),
        Err(ReadError::Version { found: 99 })
    ));
    let (bytes, _) = sample_trace();
    assert!(matches!(
        TraceReader::open(&bytes[..30]),
        Err(ReadError::Header(_))
    ));
}

#[test]
fn strided_traces_are_compact() {
    // A gather-like stream: index loads (stride 4), value loads (stride 8), random gathers.
    let mut w = TraceWriter::create(Vec::new(), &meta("test")).unwrap();
    let mut state = 1u64;
    let mut accesses = Vec::new();
    for j in 0..300_000u64 {
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
            addr: 0x900000 + 8 * j,
            size: 8,
            kind: AccessKind::Load,
        });
        accesses.push(Access {
            ip: 0x40110c,
            addr: 0x5000000 + 8 * ((state >> 33) % 4096),
            size: 8,
            kind: AccessKind::Load,
        });
    }
    let n = accesses.len();
    w.write_chunk(&Chunk {
        thread: 0,
        samples: vec![SampleHeader {
            id: 0,
            skipped_before: 0,
            len: n as u32,
        }],
        accesses,
    })
    .unwrap();
    let bytes = w.bytes_written() as f64 / n as f64;
    assert!(bytes < 4.0, "{bytes:.2} bytes per access");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reader_never_panics_on_garbage(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let (mut bytes, _) = sample_trace();
        let keep = 200.min(bytes.len());
        bytes.truncate(keep);
        bytes.extend_from_slice(&tail);
        if let Ok(mut r) = TraceReader::open(&bytes[..]) {
            while let Ok(Some(_)) = r.next_frame() {}
        }
    }

    #[test]
    fn chunks_round_trip(raw in prop::collection::vec((any::<u64>(), any::<u64>(), 1u8..=255, any::<bool>()), 0..300)) {
        let accesses: Vec<Access> = raw.iter().map(|&(ip, addr, size, store)| Access {
            ip: ip % 64, addr, size,
            kind: if store { AccessKind::Store } else { AccessKind::Load },
        }).collect();
        let c = Chunk {
            thread: 7,
            samples: vec![SampleHeader { id: 1, skipped_before: 2, len: accesses.len() as u32 }],
            accesses,
        };
        prop_assert_eq!(decode_chunk(&encode_chunk(&c, 1)).unwrap(), c);
    }
}

#[test]
fn parallel_reading_gives_the_same_frames_in_order() {
    let mut w = TraceWriter::create(Vec::new(), &meta("test")).unwrap();
    let mut want = Vec::new();
    for k in 0..40u32 {
        let c = chunk(k % 3, u64::from(k) * 10, 50 + k as usize);
        w.write_chunk(&c).unwrap();
        want.push(Frame::Chunk(c));
        if k % 7 == 0 {
            w.write_note(&format!("note {k}")).unwrap();
            want.push(Frame::Note(format!("note {k}")));
        }
    }
    let bytes = w.into_inner();
    for threads in [1, 2, 4] {
        let mut got = Vec::new();
        let r = TraceReader::open(std::io::Cursor::new(bytes.clone())).unwrap();
        let damage = parallel::for_each_frame(r, threads, |f| got.push(f.clone())).unwrap();
        assert!(damage.is_none());
        assert_eq!(got, want, "{threads} threads");
        // Damage: cut inside the last third; every frame before it arrives, and the offset.
        let cut = bytes.len() * 2 / 3;
        let mut part = Vec::new();
        let r = TraceReader::open(std::io::Cursor::new(bytes[..cut].to_vec())).unwrap();
        let d = parallel::for_each_frame(r, threads, |f| part.push(f.clone()))
            .unwrap()
            .expect("damage reported");
        assert_eq!(&want[..part.len()], &part[..]);
        assert!(
            d.offset as usize <= cut && d.reason.contains("truncated"),
            "{d:?}"
        );
        let (seq, seq_damage) = read_all(&bytes[..cut]);
        assert_eq!(seq.len(), part.len());
        assert_eq!(seq_damage, Some(d));
    }
}
