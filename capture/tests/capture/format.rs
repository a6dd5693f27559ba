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
    let jit = vec![
        JitSymbol {
            start: 0x7f00_0000,
            size: 0x15,
            name: "jit_gather_loop".into(),
        },
        JitSymbol {
            start: 0x7f00_0100,
            size: 0x40,
            name: "JS:* /tmp/g.js:1:1".into(),
        },
    ];
    w.write_jit_symbols(&jit).unwrap();
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
        Frame::JitSymbols(jit),
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

/// The names of JIT-compiled code, read from a file without decoding its chunks (as
/// `trace dump --symbols` does before it streams).
#[test]
fn jit_symbols_are_read_ahead_from_a_file() {
    let (bytes, frames) = sample_trace();
    let path = std::env::temp_dir().join(format!("mgbench-jit-{}.mgbt", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let got = read_jit_symbols(&path);
    std::fs::remove_file(&path).unwrap();
    let want = frames.iter().find_map(|f| match f {
        Frame::JitSymbols(s) => Some(s.clone()),
        _ => None,
    });
    assert_eq!(Some(got), want);
    assert!(read_jit_symbols(std::path::Path::new("/nonexistent/t.mgbt")).is_empty());
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
    // Each says what the file seems to be instead: the files given by mistake.
    let said = |bytes: &[u8]| match TraceReader::open(bytes) {
        Err(e @ ReadError::NotATrace(_)) => e.to_string(),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("read as a trace"),
    };
    assert!(said(b"hello world, not a trace").contains("(bad magic)"));
    assert!(said(b"").contains("the file is empty"));
    assert!(said(b"\n  {\"trace\": \"x.mgbt\"}").contains("looks like JSON"));
    assert!(said(b"[{\"kernel\": \"Gather\"}]").contains("looks like JSON"));
    assert!(said(b"\x7fELF\x02\x01\x01\0\0\0\0\0").contains("ELF program"));
    assert!(said(b"\x1f\x8b\x08\0\0\0\0\0").contains("gzip"));
    assert!(said(b"#!/bin/sh\nexec true\n").contains("script"));
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

/// A chunk in format 1's interleaved layout, encoded from capture/README.md's description
/// (no code of the current encoder): info byte, ip delta, address residual per access, with
/// the (ip, last, stride) predictor; `compress` stores it with zstd, else raw.
fn format_1_chunk(c: &Chunk, compress: bool) -> Vec<u8> {
    fn uleb(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn zigzag(out: &mut Vec<u8>, v: u64) {
        let v = v as i64;
        uleb(out, ((v << 1) ^ (v >> 63)) as u64);
    }
    let mut raw = Vec::new();
    uleb(&mut raw, u64::from(c.thread));
    uleb(&mut raw, c.samples.len() as u64);
    for s in &c.samples {
        uleb(&mut raw, s.id);
        uleb(&mut raw, s.skipped_before);
        uleb(&mut raw, u64::from(s.len));
    }
    uleb(&mut raw, c.accesses.len() as u64);
    let mut table = vec![(u64::MAX, 0u64, 0u64); 1024];
    let (mut prev_ip, mut prev_addr) = (0u64, 0u64);
    for a in &c.accesses {
        let slot = (a.ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize;
        let (ip, last, stride) = table[slot];
        let pred = if ip == a.ip {
            last.wrapping_add(stride)
        } else {
            prev_addr
        };
        let mut info = u8::from(a.kind == AccessKind::Store);
        info |= (a.size.trailing_zeros() as u8) << 1;
        if a.ip == prev_ip {
            info |= 1 << 4;
        }
        if a.addr == pred {
            info |= 1 << 5;
        }
        raw.push(info);
        if a.ip != prev_ip {
            zigzag(&mut raw, a.ip.wrapping_sub(prev_ip));
        }
        if a.addr != pred {
            zigzag(&mut raw, a.addr.wrapping_sub(pred));
        }
        table[slot] = if ip == a.ip {
            (ip, a.addr, a.addr.wrapping_sub(last))
        } else {
            (a.ip, a.addr, 0)
        };
        prev_ip = a.ip;
        prev_addr = a.addr;
    }
    let mut payload = Vec::new();
    if compress {
        uleb(&mut payload, raw.len() as u64);
        payload.extend(zstd::bulk::compress(&raw, 1).unwrap());
    } else {
        uleb(&mut payload, 0);
        uleb(&mut payload, raw.len() as u64);
        payload.extend(raw);
    }
    payload
}

#[test]
fn format_1_traces_still_read() {
    // A version 1 trace as an older mgbench wrote it: header, then chunk frames of kind 2.
    let json = serde_json::to_vec(&meta("qemu")).unwrap();
    let mut bytes = b"MGBTRACE".to_vec();
    bytes.extend(1u16.to_le_bytes());
    bytes.extend(0u16.to_le_bytes());
    bytes.extend((json.len() as u32).to_le_bytes());
    bytes.extend(crc32fast::hash(&json).to_le_bytes());
    bytes.extend(&json);
    let mut c0 = chunk(0, 0, 40);
    // Every third access a gather: residuals of several bytes between one-byte accesses.
    let mut state = 5u64;
    for a in c0.accesses.iter_mut().skip(1).step_by(3) {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
        a.addr = 0x5000_0000 + 8 * (state >> 40);
    }
    let c1 = chunk(1, 10, 17);
    for (c, compress) in [(&c0, true), (&c1, false)] {
        let payload = format_1_chunk(c, compress);
        bytes.extend(b"MF");
        bytes.extend([2u8, 0]);
        bytes.extend((payload.len() as u32).to_le_bytes());
        bytes.extend(crc32fast::hash(&payload).to_le_bytes());
        bytes.extend(payload);
    }
    let (frames, damage) = read_all(&bytes);
    assert_eq!(damage, None);
    assert_eq!(frames, vec![Frame::Chunk(c0), Frame::Chunk(c1)]);
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
