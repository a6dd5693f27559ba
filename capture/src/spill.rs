//! The spill file: where the QEMU plugin keeps accesses it has recorded and not yet written,
//! in memory shared with mgbench, so that nothing recorded is lost when the traced program
//! dies from a signal or is killed with SIGKILL (QEMU then runs no plugin exit hook).
//!
//! The plugin records each thread's accesses into a *slot* of this file and hands full slots to
//! its writer thread, which encodes them into the trace. Every slot says how far it got:
//!
//! - `FREE`: nothing in it;
//! - `FILLING`: a thread is recording into it (`len` accesses so far, `samples` closed sample
//!   headers, and an open sample if `open` is set);
//! - `QUEUED`: handed to the writer, not written yet (`seq` orders the queue);
//! - `WRITING`: the writer is appending it at trace offset `write_offset`.
//!
//! The header keeps `committed`, the trace's length after the last frame the writer finished.
//! After an abnormal end, [`drain`] cuts the trace back to the start of the frame being
//! written (a frame cut short, or written and not yet marked: either way it is written again),
//! then appends the writing, queued and filling slots in that order. The writer changes a
//! slot's state only after the trace holds what the state says, and a thread publishes an
//! access or a sample only after writing it, so every moment of death leaves a consistent file.
//!
//! Skipped accesses are counted here too, so that a sampled trace's skip count stays exact
//! after a death or an `execve`: each thread's slot holds its skips since its last sample
//! (`tail_skipped`), the header those of threads that have exited, and the inline access
//! counters themselves (one per thread that counts inline) live on the pages after the
//! header, with `counter_bases`, the counts already given to a thread. [`drain`] adds them up.
//!
//! When the guest calls `execve`, the plugin notes the path in the header: QEMU user mode runs
//! the new program natively, so the trace ends there without an exit hook, and mgbench says
//! why.
//!
//! QEMU's meminfo values (access size and direction, packed) can only be decoded through the
//! plugin API, so the plugin writes a decoding table for all of them at start.
//!
//! Layout (native endianness, x86-64 little-endian): [`SpillHeader`] in the first 4 KiB,
//! [`COUNTER_PAGES`] counter pages (each [`COUNTER_ALL_LANES`] lanes, [`COUNTER_LANE_STRIDE`]
//! u64s apart), the decoding table (one byte per meminfo value below [`DECODE_ENTRIES`]), then up to
//! [`MAX_SLOTS`] slots of [`SLOT_BYTES`], each a [`SlotHeader`] (4 KiB), [`SLOT_SAMPLES`]
//! [`RawSample`]s and [`SLOT_ACCESSES`] [`RawAccess`]es.

use std::fs::File;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::trace::{Access, AccessKind, SampleHeader, TraceWriter};

/// Skips from this long on are counted inline, by generated code, where the plugin switches
/// instrumentation at window boundaries; shorter ones by callbacks.
pub const INLINE_MIN_SKIP: u64 = 1 << 18;

/// Whether a sampled capture of `window` accesses every `period` counts its skips inline:
/// long enough skips, and no ROI (whose gate checks every access in a callback).
pub fn counts_inline(window: u64, period: u64, roi: bool) -> bool {
    !roi && period.saturating_sub(window) >= INLINE_MIN_SKIP
}

pub const MAGIC: [u8; 8] = *b"MGBSPIL4";
/// Accesses per slot: a chunk of the trace.
pub const SLOT_ACCESSES: usize = 1 << 16;
/// Sample headers per slot: a slot is handed over when either part is full.
pub const SLOT_SAMPLES: usize = 4096;
/// Slots the file can hold: one per running guest thread plus the writer's queue.
pub const MAX_SLOTS: usize = 1024;
/// Meminfo values the decoding table covers (QEMU 7.2 packs them in 18 bits).
pub const DECODE_ENTRIES: usize = 1 << 18;
/// The inline access counters' pages, one per counter: lanes the generated code adds to in
/// turn (see the plugin's `switch`), summed by whoever reads the count.
pub const COUNTER_OFFSET: usize = 4096;
/// Counters: threads that can count inline at once.
pub const COUNTER_PAGES: usize = 32;
pub const COUNTER_LANES: usize = 4;
/// After the [`COUNTER_LANES`] lanes of whole accesses, lanes that count the 8-byte pieces
/// QEMU performs a wider vector access as (see the plugin's `pieces`): [`PIECE_LANES`] for the
/// pieces of 16-byte accesses (2 make an access), then as many for 32-byte ones (4 make one).
pub const PIECE_LANES: usize = 2;
/// Every lane of a counter page: whole accesses, then halves, then quarters.
pub const COUNTER_ALL_LANES: usize = COUNTER_LANES + 2 * PIECE_LANES;
/// u64s between lanes (64 bytes: one cache line each).
pub const COUNTER_LANE_STRIDE: usize = 8;
/// Bytes of the `execve` path kept in the header.
pub const EXEC_PATH_BYTES: usize = 1024;
pub const DECODE_OFFSET: usize = COUNTER_OFFSET + COUNTER_PAGES * 4096;
// Each counter has a page of its own (the plugin protects it to stop counting), after the
// header's, and its lanes fit in it.
const _: () = assert!(COUNTER_OFFSET % 4096 == 0);
const _: () = assert!(COUNTER_ALL_LANES * COUNTER_LANE_STRIDE * 8 <= 4096);
const _: () = assert!(size_of::<SpillHeader>() <= COUNTER_OFFSET);
pub const SLOTS_OFFSET: usize = DECODE_OFFSET + DECODE_ENTRIES;
const SLOT_HEADER_BYTES: usize = 4096;
const SAMPLES_OFFSET: usize = SLOT_HEADER_BYTES;
const ACCESSES_OFFSET: usize = SAMPLES_OFFSET + SLOT_SAMPLES * size_of::<RawSample>();
pub const SLOT_BYTES: usize = ACCESSES_OFFSET + SLOT_ACCESSES * size_of::<RawAccess>();
/// Size of a spill file (sparse: only the slots used take memory).
pub const FILE_BYTES: usize = SLOTS_OFFSET + MAX_SLOTS * SLOT_BYTES;

pub const FREE: u32 = 0;
pub const FILLING: u32 = 1;
pub const QUEUED: u32 = 2;
pub const WRITING: u32 = 3;

/// The first bytes of the file.
#[repr(C)]
pub struct SpillHeader {
    pub magic: [u8; 8],
    /// Slots handed out so far (the ones after it were never used).
    pub slots: AtomicU32,
    pub _pad: u32,
    /// Trace length after the last frame the writer finished.
    pub committed: AtomicU64,
    /// Each counter's value already given to a thread.
    pub counter_bases: [AtomicU64; COUNTER_PAGES],
    /// Skips since their last sample of the threads that have exited.
    pub retired_tail: AtomicU64,
    /// `execve` calls of the traced process, and the last one's path (`exec_len` bytes).
    pub execs: AtomicU32,
    pub exec_len: AtomicU32,
    pub exec_path: [u8; EXEC_PATH_BYTES],
}

/// The first bytes of a slot.
#[repr(C)]
pub struct SlotHeader {
    pub state: AtomicU32,
    pub thread: AtomicU32,
    /// Position in the writer's queue (assigned when queued).
    pub seq: AtomicU64,
    /// Trace offset the writer started this slot's frame at.
    pub write_offset: AtomicU64,
    /// Accesses written to the slot.
    pub len: AtomicU32,
    /// Closed sample headers written to the slot.
    pub samples: AtomicU32,
    /// A sample is open: the accesses after the closed samples' belong to it.
    pub open: AtomicU32,
    pub _pad: u32,
    pub open_id: AtomicU64,
    pub open_skipped: AtomicU64,
    /// The filling thread's skips since its last sample (not in any sample header yet).
    pub tail_skipped: AtomicU64,
}

/// One access as the plugin's memory callback stores it; `info` is QEMU's meminfo.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawAccess {
    pub ip: u64,
    pub addr: u64,
    pub info: u32,
    pub _pad: u32,
}

/// A closed sample header as stored in a slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawSample {
    pub id: u64,
    pub skipped_before: u64,
    pub len: u32,
    pub _pad: u32,
}

/// Byte offset of slot `i` in the file.
pub const fn slot_offset(i: usize) -> usize {
    SLOTS_OFFSET + i * SLOT_BYTES
}

/// Offsets of a slot's sample headers and accesses from its start.
pub const SLOT_SAMPLES_AT: usize = SAMPLES_OFFSET;
pub const SLOT_ACCESSES_AT: usize = ACCESSES_OFFSET;

/// Lane `l` of a counter page, which starts at `page` (a byte offset or address).
pub const fn counter_lane(page: usize, l: usize) -> usize {
    page + l * COUNTER_LANE_STRIDE * 8
}

/// The accesses a counter counted, from its [`COUNTER_ALL_LANES`] lanes (`lane(l)` reads lane
/// `l`): the whole accesses, the complete pairs of halves and the complete fours of quarters
/// (a vector access whose pieces are not all done yet does not count). It never goes
/// backwards while the lanes grow.
pub fn counter_count(lane: impl Fn(usize) -> u64) -> u64 {
    let sum = |from: usize, n: usize| (from..from + n).fold(0u64, |s, l| s.wrapping_add(lane(l)));
    let halves = sum(COUNTER_LANES, PIECE_LANES);
    let quarters = sum(COUNTER_LANES + PIECE_LANES, PIECE_LANES);
    sum(0, COUNTER_LANES)
        .wrapping_add(halves / 2)
        .wrapping_add(quarters / 4)
}

/// A decoding-table entry: bit 7 set when known, bit 6 for stores, bits 0-2 log2 of the size.
pub fn encode_info(size_shift: u32, is_store: bool) -> u8 {
    0x80 | (u8::from(is_store) << 6) | (size_shift.min(7) as u8)
}

/// Size and kind from a decoding-table entry; `None` when the entry is unknown.
pub fn decode_info(entry: u8) -> Option<(u8, AccessKind)> {
    if entry & 0x80 == 0 {
        return None;
    }
    let kind = if entry & 0x40 != 0 {
        AccessKind::Store
    } else {
        AccessKind::Load
    };
    Some((1 << (entry & 7), kind))
}

/// What [`drain`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drained {
    /// Chunks appended, and the accesses in them.
    pub chunks: u64,
    pub accesses: u64,
    /// The trace was cut back from this length to that one (a frame the writer had started).
    pub cut: Option<(u64, u64)>,
    /// Slots that could not be read back, and why.
    pub problems: Vec<String>,
    /// Skipped accesses no sample header holds: the threads' skips since their last sample
    /// and what the inline counter counted since it was last given to a thread.
    pub tail_skipped: u64,
    /// Of those, what the inline counters counted (each block adds its fixed accesses when
    /// it starts: a thread stopped inside a block has its rest in here, which never ran).
    pub tail_counted_inline: u64,
    /// The path of the last `execve` the traced process called, if any.
    pub exec: Option<String>,
}

struct PendingSlot {
    state: u32,
    seq: u64,
    thread: u32,
    write_offset: u64,
    samples: Vec<SampleHeader>,
    accesses: Vec<Access>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Reads slot `i` back, or says why it cannot be. `None` for a free or empty slot.
fn read_slot(spill: &File, i: usize, decode: &[u8]) -> Result<Option<PendingSlot>, String> {
    let at = slot_offset(i) as u64;
    let mut h = vec![0u8; size_of::<SlotHeader>()];
    spill
        .read_exact_at(&mut h, at)
        .map_err(|e| format!("slot {i}: {e}"))?;
    let state = u32_at(&h, offset_of!(SlotHeader, state));
    if !matches!(state, FILLING | QUEUED | WRITING) {
        return Ok(None);
    }
    let len = u32_at(&h, offset_of!(SlotHeader, len)) as usize;
    let closed = u32_at(&h, offset_of!(SlotHeader, samples)) as usize;
    if len > SLOT_ACCESSES || closed > SLOT_SAMPLES {
        return Err(format!(
            "slot {i}: {len} accesses and {closed} samples exceed its size"
        ));
    }
    if len == 0 {
        return Ok(None);
    }
    let mut raw = vec![0u8; closed * size_of::<RawSample>()];
    spill
        .read_exact_at(&mut raw, at + SAMPLES_OFFSET as u64)
        .map_err(|e| format!("slot {i}: {e}"))?;
    let mut samples: Vec<SampleHeader> = raw
        .chunks_exact(size_of::<RawSample>())
        .map(|s| SampleHeader {
            id: u64_at(s, offset_of!(RawSample, id)),
            skipped_before: u64_at(s, offset_of!(RawSample, skipped_before)),
            len: u32_at(s, offset_of!(RawSample, len)),
        })
        .collect();
    let in_closed: usize = samples.iter().map(|s| s.len as usize).sum();
    if in_closed > len {
        return Err(format!(
            "slot {i}: its samples hold {in_closed} accesses, the slot {len}"
        ));
    }
    // Accesses after the closed samples belong to the open one (a sample is pushed before
    // it is marked closed, so a death in between leaves nothing after them).
    if in_closed < len {
        if u32_at(&h, offset_of!(SlotHeader, open)) == 0 {
            return Err(format!(
                "slot {i}: {} accesses belong to no sample",
                len - in_closed
            ));
        }
        samples.push(SampleHeader {
            id: u64_at(&h, offset_of!(SlotHeader, open_id)),
            skipped_before: u64_at(&h, offset_of!(SlotHeader, open_skipped)),
            len: (len - in_closed) as u32,
        });
    }
    let mut raw = vec![0u8; len * size_of::<RawAccess>()];
    spill
        .read_exact_at(&mut raw, at + ACCESSES_OFFSET as u64)
        .map_err(|e| format!("slot {i}: {e}"))?;
    let mut accesses = Vec::with_capacity(len);
    for a in raw.chunks_exact(size_of::<RawAccess>()) {
        let info = u32_at(a, offset_of!(RawAccess, info));
        let (size, kind) = decode
            .get(info as usize)
            .and_then(|&e| decode_info(e))
            .ok_or_else(|| format!("slot {i}: QEMU meminfo {info:#x} has no decoding"))?;
        accesses.push(Access {
            ip: u64_at(a, offset_of!(RawAccess, ip)),
            addr: u64_at(a, offset_of!(RawAccess, addr)),
            size,
            kind,
        });
    }
    Ok(Some(PendingSlot {
        state,
        seq: u64_at(&h, offset_of!(SlotHeader, seq)),
        thread: u32_at(&h, offset_of!(SlotHeader, thread)),
        write_offset: u64_at(&h, offset_of!(SlotHeader, write_offset)),
        samples,
        accesses,
    }))
}

/// The skips no sample header holds: every filling slot's tail, the exited threads', and the
/// counters' lanes past their `counter_bases`; and the counters' part alone.
fn tails(spill: &File, head: &[u8], slots: usize) -> io::Result<(u64, u64)> {
    let mut sum = u64_at(head, offset_of!(SpillHeader, retired_tail));
    let mut h = vec![0u8; size_of::<SlotHeader>()];
    for i in 0..slots {
        spill.read_exact_at(&mut h, slot_offset(i) as u64)?;
        if u32_at(&h, offset_of!(SlotHeader, state)) == FILLING {
            sum = sum.wrapping_add(u64_at(&h, offset_of!(SlotHeader, tail_skipped)));
        }
    }
    let mut page = vec![0u8; COUNTER_ALL_LANES * COUNTER_LANE_STRIDE * 8];
    let mut inline = 0u64;
    for c in 0..COUNTER_PAGES {
        spill.read_exact_at(&mut page, (COUNTER_OFFSET + c * 4096) as u64)?;
        let count = counter_count(|l| u64_at(&page, counter_lane(0, l)));
        let base = u64_at(head, offset_of!(SpillHeader, counter_bases) + c * 8);
        let uncredited = count.wrapping_sub(base);
        // A counter behind its base cannot happen in one process; read as nothing rather
        // than as 2^64.
        let uncredited = if uncredited > 1 << 62 { 0 } else { uncredited };
        inline = inline.wrapping_add(uncredited);
    }
    Ok((sum.wrapping_add(inline), inline))
}

/// After the plugin died without finishing, appends to `trace` every access the spill file
/// holds that the trace does not, in the order the writer would have written them.
pub fn drain(spill: &File, trace: &Path) -> io::Result<Drained> {
    let mut head = vec![0u8; size_of::<SpillHeader>()];
    spill.read_exact_at(&mut head, 0)?;
    if head[..8] != MAGIC {
        // The plugin never started (or is of another build): nothing to recover.
        return Ok(Drained::default());
    }
    let slots = (u32_at(&head, offset_of!(SpillHeader, slots)) as usize).min(MAX_SLOTS);
    let committed = u64_at(&head, offset_of!(SpillHeader, committed));
    let mut decode = vec![0u8; DECODE_ENTRIES];
    spill.read_exact_at(&mut decode, DECODE_OFFSET as u64)?;

    let (tail_skipped, tail_counted_inline) = tails(spill, &head, slots)?;
    let mut out = Drained {
        tail_skipped,
        tail_counted_inline,
        ..Drained::default()
    };
    let execs = u32_at(&head, offset_of!(SpillHeader, execs));
    if execs > 0 {
        let n = (u32_at(&head, offset_of!(SpillHeader, exec_len)) as usize).min(EXEC_PATH_BYTES);
        let at = offset_of!(SpillHeader, exec_path);
        out.exec = head
            .get(at..at + n)
            .map(|b| String::from_utf8_lossy(b).into_owned());
    }
    let mut pending = Vec::new();
    for i in 0..slots {
        match read_slot(spill, i, &decode) {
            Ok(Some(s)) => pending.push(s),
            Ok(None) => {}
            Err(e) => out.problems.push(e),
        }
    }
    // The frame being written first, then the writer's queue, then the threads' open slots.
    pending.sort_by_key(|s| {
        let rank = match s.state {
            WRITING => 0,
            QUEUED => 1,
            _ => 2,
        };
        (rank, s.seq, s.thread)
    });
    let cut_to = pending
        .iter()
        .find(|s| s.state == WRITING)
        .map_or(committed, |s| s.write_offset);
    let file = std::fs::OpenOptions::new().write(true).open(trace)?;
    let len = file.metadata()?.len();
    if cut_to > 0 && cut_to < len {
        file.set_len(cut_to)?;
        out.cut = Some((len, cut_to));
    }
    drop(file);
    let file = std::fs::OpenOptions::new().append(true).open(trace)?;
    let mut w = TraceWriter::append(file);
    for s in pending {
        let n = s.accesses.len();
        w.write_accesses(s.thread, &s.samples, s.accesses, n)?;
        out.chunks += 1;
        out.accesses += n as u64;
    }
    w.flush()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_what_both_sides_assume() {
        assert_eq!(size_of::<RawAccess>(), 24);
        assert_eq!(size_of::<RawSample>(), 24);
        assert!(size_of::<SlotHeader>() <= SLOT_HEADER_BYTES);
        assert!(size_of::<SpillHeader>() <= COUNTER_OFFSET);
        assert_eq!(SLOTS_OFFSET % 4096, 0);
        assert_eq!(SLOT_BYTES % 4096, 0);
    }

    /// Writes `bytes` into a spill image at `at`.
    fn put(img: &mut [u8], at: usize, bytes: &[u8]) {
        img[at..at + bytes.len()].copy_from_slice(bytes);
    }

    struct SlotSpec {
        state: u32,
        thread: u32,
        seq: u64,
        write_offset: u64,
        closed: Vec<RawSample>,
        open: Option<(u64, u64)>,
        accesses: Vec<RawAccess>,
        tail: u64,
    }

    fn spill_image(committed: u64, slots: &[SlotSpec]) -> Vec<u8> {
        let mut img = vec![0u8; slot_offset(slots.len())];
        put(&mut img, 0, &MAGIC);
        let n = slots.len() as u32;
        put(&mut img, offset_of!(SpillHeader, slots), &n.to_le_bytes());
        put(
            &mut img,
            offset_of!(SpillHeader, committed),
            &committed.to_le_bytes(),
        );
        // Two meminfo values the test uses: 3, an 8-byte load; 0x10003, an 8-byte store.
        img[DECODE_OFFSET + 3] = encode_info(3, false);
        img[DECODE_OFFSET + 0x10003] = encode_info(3, true);
        for (i, s) in slots.iter().enumerate() {
            let at = slot_offset(i);
            let (open, (open_id, open_skipped)) = match s.open {
                Some(o) => (1u32, o),
                None => (0, (0, 0)),
            };
            let fields: [(usize, Vec<u8>); 10] = [
                (offset_of!(SlotHeader, state), s.state.to_le_bytes().into()),
                (
                    offset_of!(SlotHeader, thread),
                    s.thread.to_le_bytes().into(),
                ),
                (offset_of!(SlotHeader, seq), s.seq.to_le_bytes().into()),
                (
                    offset_of!(SlotHeader, write_offset),
                    s.write_offset.to_le_bytes().into(),
                ),
                (
                    offset_of!(SlotHeader, len),
                    (s.accesses.len() as u32).to_le_bytes().into(),
                ),
                (
                    offset_of!(SlotHeader, samples),
                    (s.closed.len() as u32).to_le_bytes().into(),
                ),
                (offset_of!(SlotHeader, open), open.to_le_bytes().into()),
                (
                    offset_of!(SlotHeader, open_id),
                    open_id.to_le_bytes().into(),
                ),
                (
                    offset_of!(SlotHeader, open_skipped),
                    open_skipped.to_le_bytes().into(),
                ),
                (
                    offset_of!(SlotHeader, tail_skipped),
                    s.tail.to_le_bytes().into(),
                ),
            ];
            for (f, bytes) in fields {
                put(&mut img, at + f, &bytes);
            }
            for (k, r) in s.closed.iter().enumerate() {
                let b = at + SAMPLES_OFFSET + k * size_of::<RawSample>();
                put(&mut img, b + offset_of!(RawSample, id), &r.id.to_le_bytes());
                put(
                    &mut img,
                    b + offset_of!(RawSample, skipped_before),
                    &r.skipped_before.to_le_bytes(),
                );
                put(
                    &mut img,
                    b + offset_of!(RawSample, len),
                    &r.len.to_le_bytes(),
                );
            }
            for (k, a) in s.accesses.iter().enumerate() {
                let b = at + ACCESSES_OFFSET + k * size_of::<RawAccess>();
                put(&mut img, b + offset_of!(RawAccess, ip), &a.ip.to_le_bytes());
                put(
                    &mut img,
                    b + offset_of!(RawAccess, addr),
                    &a.addr.to_le_bytes(),
                );
                put(
                    &mut img,
                    b + offset_of!(RawAccess, info),
                    &a.info.to_le_bytes(),
                );
            }
        }
        img
    }

    fn raw(n: u64, store: bool) -> Vec<RawAccess> {
        (0..n)
            .map(|k| RawAccess {
                ip: 0x1000 + k,
                addr: 0x8000 + 8 * k,
                info: if store { 0x10003 } else { 3 },
                _pad: 0,
            })
            .collect()
    }

    fn sample(id: u64, skipped_before: u64, len: u32) -> RawSample {
        RawSample {
            id,
            skipped_before,
            len,
            _pad: 0,
        }
    }

    fn temp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("mgbench-spill-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn chunks(trace: &Path) -> (Vec<crate::trace::Chunk>, bool) {
        use crate::trace::{Frame, TraceReader};
        let mut r = TraceReader::open(std::fs::File::open(trace).unwrap()).unwrap();
        let mut out = Vec::new();
        while let Some(f) = r.next_frame().unwrap() {
            if let Frame::Chunk(c) = f {
                out.push(c);
            }
        }
        (out, r.damage().is_some())
    }

    fn new_trace(path: &Path) -> u64 {
        use crate::trace::{Mode, TraceMeta};
        let meta = TraceMeta {
            command: vec!["t".into()],
            backend: "test".into(),
            mode: Mode::Full,
            start_time: String::new(),
            roi: None,
            notes: vec![],
        };
        let mut w = TraceWriter::create(std::fs::File::create(path).unwrap(), &meta).unwrap();
        let first: Vec<Access> = vec![Access {
            ip: 1,
            addr: 2,
            size: 8,
            kind: AccessKind::Load,
        }];
        let s = [SampleHeader {
            id: 0,
            skipped_before: 0,
            len: 1,
        }];
        w.write_accesses(9, &s, first, 1).unwrap();
        w.bytes_written()
    }

    #[test]
    fn drain_rewrites_the_frame_being_written_then_the_queue_then_open_slots() {
        let dir = temp("order");
        let trace = dir.join("t.mgbt");
        let committed = new_trace(&trace);
        // The writer had started a frame: half of it reached the file.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&trace)
            .unwrap();
        std::io::Write::write_all(&mut f, b"MF\x02\0\x40\0\0\0half a frame").unwrap();
        drop(f);
        let slots = [
            // A thread still filling: its window closed (sample pushed) just before death.
            SlotSpec {
                state: FILLING,
                thread: 0,
                seq: u64::MAX,
                write_offset: 0,
                closed: vec![sample(1, 0, 4)],
                open: Some((1, 0)),
                accesses: raw(4, true),
                tail: 0,
            },
            SlotSpec {
                state: QUEUED,
                thread: 1,
                seq: 6,
                write_offset: 0,
                closed: vec![],
                open: Some((7, 9)),
                accesses: raw(3, false),
                tail: 0,
            },
            SlotSpec {
                state: WRITING,
                thread: 0,
                seq: 5,
                write_offset: committed,
                closed: vec![sample(0, 5, 2)],
                open: None,
                accesses: raw(2, false),
                tail: 0,
            },
            SlotSpec {
                state: FREE,
                thread: 3,
                seq: 1,
                write_offset: 0,
                closed: vec![],
                open: None,
                accesses: raw(5, false),
                tail: 0,
            },
        ];
        let spill = dir.join("spill");
        std::fs::write(&spill, spill_image(committed, &slots)).unwrap();
        let d = drain(&std::fs::File::open(&spill).unwrap(), &trace).unwrap();
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        assert_eq!((d.chunks, d.accesses), (3, 9));
        assert_eq!(d.cut.map(|c| c.1), Some(committed));
        let (c, damaged) = chunks(&trace);
        assert!(!damaged, "the torn frame is gone");
        let threads: Vec<u32> = c.iter().map(|c| c.thread).collect();
        assert_eq!(
            threads,
            [9, 0, 1, 0],
            "written, then writing, queued, filling"
        );
        assert_eq!(
            c[1].samples,
            [SampleHeader {
                id: 0,
                skipped_before: 5,
                len: 2
            }]
        );
        assert_eq!(
            c[2].samples,
            [SampleHeader {
                id: 7,
                skipped_before: 9,
                len: 3
            }]
        );
        assert_eq!(
            c[3].samples,
            [SampleHeader {
                id: 1,
                skipped_before: 0,
                len: 4
            }]
        );
        assert!(c.iter().all(|c| c.is_consistent()));
        assert!(c[3]
            .accesses
            .iter()
            .all(|a| a.kind == AccessKind::Store && a.size == 8));
        assert_eq!(c[2].accesses[2].addr, 0x8010);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn drain_counts_the_skips_no_sample_holds_and_the_exec() {
        let dir = temp("tails");
        let trace = dir.join("t.mgbt");
        let committed = new_trace(&trace);
        let slot = |state, tail: u64| SlotSpec {
            state,
            thread: 0,
            seq: 0,
            write_offset: 0,
            closed: vec![],
            open: None,
            accesses: vec![],
            tail,
        };
        // A thread filling its slot (100 skips since its last sample) and an older slot of
        // it in the queue, whose tail was carried over and no longer counts.
        let mut img = spill_image(committed, &[slot(FILLING, 100), slot(QUEUED, 55)]);
        put(
            &mut img,
            offset_of!(SpillHeader, retired_tail),
            &7u64.to_le_bytes(),
        );
        // The first counter: 100 whole accesses in its lanes, 3 of 16 bytes (7 halves: one
        // access's second piece not done) and 1 of 32 bytes (6 quarters), 60 already given
        // to a thread; the fourth (another thread's): 25, 20 of them given.
        let lanes: [(usize, [u64; COUNTER_ALL_LANES], u64); 2] = [
            (0, [10, 20, 30, 40, 3, 4, 5, 1], 60),
            (3, [5, 5, 5, 10, 0, 0, 0, 0], 20),
        ];
        for (c, lanes, given) in lanes {
            for (l, v) in lanes.iter().enumerate() {
                put(
                    &mut img,
                    counter_lane(COUNTER_OFFSET + c * 4096, l),
                    &v.to_le_bytes(),
                );
            }
            put(
                &mut img,
                offset_of!(SpillHeader, counter_bases) + c * 8,
                &given.to_le_bytes(),
            );
        }
        let path = b"/usr/bin/python3.11";
        put(
            &mut img,
            offset_of!(SpillHeader, execs),
            &2u32.to_le_bytes(),
        );
        put(
            &mut img,
            offset_of!(SpillHeader, exec_len),
            &(path.len() as u32).to_le_bytes(),
        );
        put(&mut img, offset_of!(SpillHeader, exec_path), path);
        let spill = dir.join("spill");
        std::fs::write(&spill, img).unwrap();
        let d = drain(&std::fs::File::open(&spill).unwrap(), &trace).unwrap();
        assert_eq!(d.tail_skipped, 100 + 7 + (100 + 3 + 1 - 60) + 5);
        assert_eq!(d.tail_counted_inline, (100 + 3 + 1 - 60) + 5);
        assert_eq!(d.exec.as_deref(), Some("/usr/bin/python3.11"));
        assert_eq!(d.chunks, 0, "no accesses in the slots");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn drain_cuts_a_torn_frame_back_to_the_last_complete_one() {
        let dir = temp("torn");
        let trace = dir.join("t.mgbt");
        let committed = new_trace(&trace);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&trace)
            .unwrap();
        std::io::Write::write_all(&mut f, b"MF\x01\0\x40\0\0").unwrap();
        drop(f);
        let spill = dir.join("spill");
        std::fs::write(&spill, spill_image(committed, &[])).unwrap();
        let d = drain(&std::fs::File::open(&spill).unwrap(), &trace).unwrap();
        assert_eq!(d.chunks, 0);
        assert_eq!(d.cut.map(|c| c.1), Some(committed));
        assert!(!chunks(&trace).1);
        // A spill file the plugin never wrote to changes nothing.
        std::fs::write(&spill, vec![0u8; 8192]).unwrap();
        let before = std::fs::read(&trace).unwrap();
        assert_eq!(
            drain(&std::fs::File::open(&spill).unwrap(), &trace).unwrap(),
            Drained::default()
        );
        assert_eq!(std::fs::read(&trace).unwrap(), before);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn drain_reports_a_slot_it_cannot_read_and_keeps_the_others() {
        let dir = temp("bad");
        let trace = dir.join("t.mgbt");
        let committed = new_trace(&trace);
        let mut bad = raw(2, false);
        bad[1].info = 0x7fff_ffff;
        let slots = [
            SlotSpec {
                state: QUEUED,
                thread: 0,
                seq: 0,
                write_offset: 0,
                closed: vec![],
                open: Some((0, 0)),
                accesses: bad,
                tail: 0,
            },
            SlotSpec {
                state: FILLING,
                thread: 1,
                seq: u64::MAX,
                write_offset: 0,
                closed: vec![],
                open: None,
                accesses: raw(2, false),
                tail: 0,
            },
            SlotSpec {
                state: FILLING,
                thread: 2,
                seq: u64::MAX,
                write_offset: 0,
                closed: vec![],
                open: Some((0, 0)),
                accesses: raw(2, false),
                tail: 0,
            },
        ];
        let spill = dir.join("spill");
        std::fs::write(&spill, spill_image(committed, &slots)).unwrap();
        let d = drain(&std::fs::File::open(&spill).unwrap(), &trace).unwrap();
        assert_eq!(d.problems.len(), 2, "{:?}", d.problems);
        assert!(
            d.problems[0].contains("meminfo 0x7fffffff"),
            "{:?}",
            d.problems
        );
        assert!(
            d.problems[1].contains("belong to no sample"),
            "{:?}",
            d.problems
        );
        assert_eq!(d.chunks, 1);
        assert_eq!(chunks(&trace).0.len(), 2);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn decoding_entries_round_trip() {
        for shift in 0..4 {
            for store in [false, true] {
                let (size, kind) = decode_info(encode_info(shift, store)).unwrap();
                assert_eq!(size, 1 << shift);
                assert_eq!(kind == AccessKind::Store, store);
            }
        }
        assert_eq!(decode_info(0), None);
    }
}
