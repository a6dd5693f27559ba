//! Importers round-trip small fixtures into mgbench traces.

use std::io::Write;
use std::path::Path;

use mgbench_capture::import::{import, import_meta, ImportError, ImportKind};
use mgbench_capture::trace::*;

use crate::common::read_all;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name),
    )
    .unwrap()
}

/// Imports `input`; returns (chunks, summary).
fn run(
    kind: ImportKind,
    input: &[u8],
) -> Result<(Vec<Chunk>, mgbench_capture::import::ImportSummary), ImportError> {
    let mut w = TraceWriter::create(Vec::new(), &import_meta(kind, "fixture", Mode::Full)).unwrap();
    let summary = import(kind, input, &mut w)?;
    w.write_end(&EndInfo::default()).unwrap();
    let (frames, damage) = read_all(&w.into_inner());
    assert!(damage.is_none());
    let chunks = frames
        .into_iter()
        .filter_map(|f| match f {
            Frame::Chunk(c) => Some(c),
            _ => None,
        })
        .collect();
    Ok((chunks, summary))
}

fn acc(ip: u64, addr: u64, size: u8, kind: AccessKind) -> Access {
    Access {
        ip,
        addr,
        size,
        kind,
    }
}

#[test]
fn lackey_fixture() {
    let (chunks, s) = run(ImportKind::Lackey, &fixture("lackey.txt")).unwrap();
    use AccessKind::*;
    let want = vec![
        acc(0x4011d0, 0x1ffefffd40, 8, Load),
        acc(0x4011d4, 0x1ffefffd48, 8, Store),
        acc(0x4011d7, 0x4c6e060, 4, Load),
        acc(0x4011d7, 0x4c6e060, 4, Store),
        acc(0x4011db, 0x4c6e100, 8, Load),
        acc(0x4011db, 0x4c6e108, 8, Load),
    ];
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].accesses, want);
    assert!(chunks[0].is_consistent());
    assert_eq!((s.accesses, s.threads), (6, 1));
}

#[test]
fn lackey_garbage_names_the_line() {
    let e = run(ImportKind::Lackey, b"I  401000,4\n L zz,8\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("line 2:"), "{e}");
    let e = run(ImportKind::Lackey, b"hello\n").unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("lackey"), "{e}");
}

#[test]
fn lackey_full_log_with_superblocks_and_warnings() {
    let (chunks, s) = run(ImportKind::Lackey, &fixture("lackey-full.txt")).unwrap();
    use AccessKind::*;
    assert_eq!(
        chunks[0].accesses,
        vec![
            acc(0x4011d0, 0x1ffefffd40, 8, Load),
            acc(0x4011d4, 0x1ffefffd48, 8, Store),
            acc(0x4011d7, 0x4c6e060, 4, Load),
            acc(0x4011d7, 0x4c6e060, 4, Store),
        ]
    );
    // Nothing is dropped silently: the skipped lines are counted by kind.
    assert_eq!(s.ignored["superblock (SB) lines"], 2);
    assert_eq!(s.ignored["Valgrind message lines"], 15);
    // A malformed SB line, or program output mixed in, names its line.
    let e = run(
        ImportKind::Lackey,
        b"I  401000,4
SB zz
",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("line 2:") && e.contains("SB"), "{e}");
    let e = run(
        ImportKind::Lackey,
        b"I  401000,4
 L 1000,8
hello world
",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("line 3:") && e.contains("--log-file"), "{e}");
}

/// `valgrind -v -v` logs where it loaded each file (`Reading syms from FILE`, then a symbol's
/// `svma` link and `avma` load address): each readable file becomes mappings at that bias; a
/// file that cannot be read is listed, and the unmarked unwind dumps of `-v -v` are skipped.
#[test]
fn lackey_log_of_valgrind_v_v_places_its_files() {
    let exe = std::env::current_exe().unwrap();
    let log = format!(
        "--7-- Reading syms from {}
--7--    svma 0x0000001060, avma 0x0000109060
--7--    object doesn't have a symbol table
--7-- summarise_context(loc_start = 0x10): cannot summarise(why=1):
0x30a: [0]={{ 56(r3) {{ u  u  u  c-56 u  }}
I  10a000,4
 L 1000,8
--7-- Reading syms from /no/such/lib.so
--7--    svma 0x0000000010, avma 0x0000000020
",
        exe.display()
    );
    let mut w = TraceWriter::create(
        Vec::new(),
        &import_meta(ImportKind::Lackey, "fixture", Mode::Full),
    )
    .unwrap();
    let s = import(ImportKind::Lackey, log.as_bytes(), &mut w).unwrap();
    w.write_end(&EndInfo::default()).unwrap();
    let (frames, _) = read_all(&w.into_inner());
    let maps: Vec<Mapping> = frames
        .into_iter()
        .flat_map(|f| match f {
            Frame::Mappings(m) => m,
            _ => vec![],
        })
        .collect();
    let elf = mgbench_capture::import::ElfLoad::read(&exe).unwrap();
    let want = elf.mappings(elf.first_page + 0x108000);
    assert!(!want.is_empty());
    assert_eq!(maps, want);
    // The file at offset 0 is mapped where the bias puts its first page.
    let first = maps.iter().find(|m| m.offset == 0).unwrap();
    assert_eq!(first.start, elf.first_page + 0x108000);
    assert!(maps.iter().any(|m| m.perms.contains('x')));
    assert_eq!(s.located, vec![elf.path.clone()]);
    assert_eq!(s.unreadable.len(), 1);
    assert_eq!(s.unreadable[0].0, "/no/such/lib.so");
    assert_eq!(s.ignored["Valgrind unwind-info dump lines (-v -v)"], 1);
    assert_eq!(s.accesses, 1);
}

#[test]
fn memgaze_fractional_times_and_optional_dso() {
    let (chunks, s) = run(ImportKind::Memgaze, &fixture("memgaze-fractional.txt")).unwrap();
    assert_eq!((s.accesses, s.threads, s.samples), (4, 2, 3));
    let t0 = chunks.iter().find(|c| c.thread == 0).unwrap();
    assert_eq!(
        t0.accesses[0],
        acc(0x40b21f, 0x7ffec7780340, 8, AccessKind::Load)
    );
    assert_eq!(
        t0.samples.iter().map(|s| (s.id, s.len)).collect::<Vec<_>>(),
        vec![(1, 2), (2, 1)]
    );
    for (bad, what) in [
        ("0x1 0x2 0 12.5.1 1\n", "time"),
        ("0x1 0x2 0 -3 1\n", "time"),
        ("0x1 0x2 0 1.5 1 [a] extra\n", "7 in"),
        ("0x1 0x2 0 1.5\n", "4 in"),
        ("0x1 0xzz 0 1.5 1\n", "address"),
    ] {
        let text = format!("0x1 0x2 0 1.0 1\n{bad}");
        let e = run(ImportKind::Memgaze, text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 2:") && e.contains(what), "{bad}: {e}");
    }
}

#[test]
fn memgaze_fixture_keeps_threads_and_samples() {
    let (chunks, s) = run(ImportKind::Memgaze, &fixture("memgaze.txt")).unwrap();
    assert_eq!((s.accesses, s.threads, s.samples), (5, 2, 3));
    let t0 = chunks.iter().find(|c| c.thread == 0).unwrap();
    let t1 = chunks.iter().find(|c| c.thread == 1).unwrap();
    assert_eq!(
        t0.samples.iter().map(|s| (s.id, s.len)).collect::<Vec<_>>(),
        vec![(1, 2), (2, 1)]
    );
    assert_eq!(
        t1.samples.iter().map(|s| (s.id, s.len)).collect::<Vec<_>>(),
        vec![(5, 2)]
    );
    assert_eq!(t0.accesses[2].addr, 0x7ffd62ad2d68);
    assert_eq!(t1.accesses[1], acc(0x4011da, 0x10, 8, AccessKind::Load));
}

fn gspin_records(records: &[(u16, u16, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(t, s, a) in records {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&a.to_le_bytes());
    }
    out
}

#[test]
fn gspin_raw_and_gzip() {
    let recs = [
        (0xa, 4, 0x401000),
        (0, 8, 0x7000),
        (0, 8, 0x7008),
        (0x1e, 2, 0x401004),
        (1, 4, 0x9000),
        (0x20, 0, 0xdead), // ignored type
        (0x10, 3, 0x401008),
        (0, 8, 0x7010),
    ];
    let raw = gspin_records(&recs);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    let gz = gz.finish().unwrap();
    // gzip streams of several members (e.g. files appended to, or written by pigz) read whole.
    let mut multi = Vec::new();
    for part in raw.chunks(12 * 3) {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(part).unwrap();
        multi.extend(e.finish().unwrap());
    }
    for input in [&raw, &gz, &multi] {
        let (chunks, s) = run(ImportKind::Gspin, input).unwrap();
        use AccessKind::*;
        assert_eq!(
            chunks[0].accesses,
            vec![
                acc(0x401000, 0x7000, 8, Load),
                acc(0x401000, 0x7008, 8, Load),
                acc(0x401004, 0x9000, 4, Store),
                acc(0x401008, 0x7010, 8, Load),
            ]
        );
        assert_eq!(s.ignored.values().sum::<u64>(), 1);
    }
    let e = run(ImportKind::Gspin, &raw[..raw.len() - 5])
        .unwrap_err()
        .to_string();
    assert!(e.contains("truncated"), "{e}");
    // A binary input has no lines: the record's byte offset is named.
    let last = (raw.len() - 5) / 12 * 12;
    assert!(e.starts_with(&format!("byte {last}: record ")), "{e}");
}

#[test]
fn large_imports_span_chunks_without_losing_order() {
    let mut recs = vec![(0xa, 4, 0x401000)];
    for i in 0..200_000u64 {
        recs.push((0, 8, 0x100000 + 8 * i));
    }
    let (chunks, s) = run(ImportKind::Gspin, &gspin_records(&recs)).unwrap();
    assert!(chunks.len() > 1);
    assert_eq!(s.accesses, 200_000);
    let all: Vec<u64> = chunks
        .iter()
        .flat_map(|c| c.accesses.iter().map(|a| a.addr))
        .collect();
    assert!(all.windows(2).all(|w| w[1] == w[0] + 8));
    // One logical sample continues across chunks with the same id.
    assert!(chunks
        .iter()
        .all(|c| c.is_consistent() && c.samples.iter().all(|s| s.id == 0)));
}

#[test]
fn empty_input_is_an_error() {
    assert!(matches!(
        run(ImportKind::Lackey, b"==1== nothing\n"),
        Err(ImportError::Empty)
    ));
}
