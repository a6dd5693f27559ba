//! Chunk codec: per-access delta encoding with instruction and stride prediction, then zstd.
//!
//! Each access becomes an info byte (store bit, log2 size, how its instruction is known,
//! "address as predicted", "explicit size follows"), an optional zigzag ip delta and an
//! optional zigzag address residual. The instruction is predicted as the one that followed
//! the previous access's instruction last time (loops repeat their sequence of accesses), the
//! address from the last address and stride of the same instruction (a small direct-mapped
//! table), so strided streams in loops cost one byte per access and gathers pay only for their
//! randomness. The table starts empty in every chunk, which keeps chunks independently
//! decodable.
//!
//! Chunks are written in columns (format 2, frame kind 5): the info bytes, then the ip
//! deltas, then the address residuals. A loop's info bytes repeat, so zstd matches long runs
//! of them at once instead of stopping at every residual; this made encoding twice as fast
//! and traces a fifth smaller than interleaving the three (format 1, frame kind 2, still
//! read). See capture/README.md.

use super::varint::{put_u64, Cursor};
use super::{Access, AccessKind, Chunk, SampleHeader};

const STORE: u8 = 1;
const SIZE_SHIFT: u8 = 1; // bits 1..=3: log2(size) for power-of-two sizes up to 128
const SAME_IP: u8 = 1 << 4;
const PREDICTED: u8 = 1 << 5;
const EXPLICIT_SIZE: u8 = 1 << 6;
/// The instruction that followed the previous access's instruction last time (format 2).
const NEXT_IP: u8 = 1 << 7;

const TABLE_BITS: u32 = 10;
/// Largest decompressed chunk accepted (a guard against corrupt length fields).
pub const MAX_RAW_CHUNK: u64 = 1 << 30;

/// How a chunk's accesses are laid out (the frame kind says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Format 1: each access's info byte, ip delta and address residual together.
    Interleaved,
    /// Format 2: all info bytes, then all ip deltas, then all address residuals.
    Columns,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("chunk is truncated or malformed at byte {0}")]
    Malformed(usize),
    #[error("chunk declares {0} bytes, more than the {MAX_RAW_CHUNK}-byte limit")]
    TooLarge(u64),
    #[error("chunk does not decompress: {0}")]
    Decompress(String),
    #[error("chunk's samples account for {samples} accesses but it holds {accesses}")]
    Inconsistent { samples: u64, accesses: u64 },
}

/// Slot marker for "no instruction yet" (user-space instruction addresses never reach it; if
/// one did, it would only be mispredicted, identically on both sides).
const EMPTY: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Slot {
    ip: u64,
    last: u64,
    stride: u64,
    /// The instruction of the access that followed this slot's last one.
    next: u64,
}

/// Encoder/decoder state, mirrored on both sides.
struct Predictor {
    table: Box<[Slot; 1 << TABLE_BITS]>,
    prev_ip: u64,
    prev_addr: u64,
    /// The previous access's slot (it holds `prev_ip` once an access was seen).
    prev_slot: usize,
}

impl Predictor {
    fn new() -> Predictor {
        Predictor {
            table: Box::new(
                [Slot {
                    ip: EMPTY,
                    last: 0,
                    stride: 0,
                    next: EMPTY,
                }; 1 << TABLE_BITS],
            ),
            prev_ip: 0,
            prev_addr: 0,
            prev_slot: 0,
        }
    }

    #[inline(always)]
    fn slot(ip: u64) -> usize {
        (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)) as usize
    }

    /// The instruction predicted for this access: the one that followed the previous
    /// access's instruction last time.
    #[inline(always)]
    fn next_ip(&self) -> u64 {
        self.table[self.prev_slot].next
    }

    /// The predicted address for `ip`, and its slot (passed back to `update`).
    #[inline(always)]
    fn predict(&self, ip: u64) -> (u64, usize) {
        let i = Self::slot(ip);
        let s = &self.table[i];
        let pred = if s.ip == ip {
            s.last.wrapping_add(s.stride)
        } else {
            self.prev_addr
        };
        (pred, i)
    }

    #[inline(always)]
    fn update(&mut self, slot: usize, ip: u64, addr: u64) {
        self.table[self.prev_slot].next = ip;
        let s = &mut self.table[slot];
        if s.ip == ip {
            s.stride = addr.wrapping_sub(s.last);
        } else {
            s.ip = ip;
            s.stride = 0;
            s.next = EMPTY;
        }
        s.last = addr;
        self.prev_ip = ip;
        self.prev_addr = addr;
        self.prev_slot = slot;
    }
}

/// The info byte's size bits for each access size: log2 for powers of two (all of them fit
/// in a u8), else "explicit size follows".
const SIZE_BITS: [u8; 256] = {
    let mut t = [EXPLICIT_SIZE; 256];
    let mut log = 0;
    while log < 8 {
        t[1 << log] = (log as u8) << SIZE_SHIFT;
        log += 1;
    }
    t
};

/// Encodes chunks, reusing its zstd context and scratch buffers between calls (a fresh zstd
/// context per chunk costs megabytes of table setup and page faults).
pub struct ChunkEncoder {
    info: Vec<u8>,
    ips: Vec<u8>,
    addrs: Vec<u8>,
    raw: Vec<u8>,
    compressed: Vec<u8>,
    compressor: Option<zstd::bulk::Compressor<'static>>,
}

impl ChunkEncoder {
    pub fn new(level: i32) -> ChunkEncoder {
        ChunkEncoder {
            compressor: zstd::bulk::Compressor::new(level).ok(),
            ..ChunkEncoder::uncompressed()
        }
    }

    /// An encoder that stores its chunks uncompressed (the modelling pass alone: larger
    /// traces, for measuring what zstd costs and saves).
    pub fn uncompressed() -> ChunkEncoder {
        ChunkEncoder {
            info: Vec::new(),
            ips: Vec::new(),
            addrs: Vec::new(),
            raw: Vec::new(),
            compressed: Vec::new(),
            compressor: None,
        }
    }

    /// Encodes one thread's `n` accesses, in `samples`, into `out` (cleared first), in the
    /// [`Layout::Columns`] layout.
    pub fn encode_into<I: IntoIterator<Item = Access>>(
        &mut self,
        thread: u32,
        samples: &[SampleHeader],
        accesses: I,
        n: usize,
        out: &mut Vec<u8>,
    ) {
        // The columns are written at positions into buffers long enough for any chunk of `n`
        // accesses (an info byte and a size byte, ten bytes per varint), whose zero-filled
        // length only grows: a hot loop of plain stores, no capacity checks per byte.
        grow(&mut self.info, 2 * n);
        grow(&mut self.ips, VARINT_MAX * n);
        grow(&mut self.addrs, VARINT_MAX * n);
        let (info, ips, addrs) = (
            &mut self.info[..2 * n],
            &mut self.ips[..VARINT_MAX * n],
            &mut self.addrs[..VARINT_MAX * n],
        );
        // The modelling loop writes through raw pointers, the predictor's state in locals:
        // with slices, bounds checks and the predictor's fields kept the loop's values on the
        // stack (1.3x slower on a gather, 2026-11-28).
        let (info0, ips0, addrs0) = (info.as_mut_ptr(), ips.as_mut_ptr(), addrs.as_mut_ptr());
        let (mut pi, mut pp, mut pa) = (info0, ips0, addrs0);
        let mut p = Predictor::new();
        let table = &mut *p.table;
        let (mut prev_ip, mut prev_addr, mut prev_slot) = (0u64, 0u64, 0usize);
        for a in accesses.into_iter().take(n) {
            let size_bits = SIZE_BITS[usize::from(a.size)];
            let mut byte = u8::from(a.kind == AccessKind::Store) | size_bits;
            if a.ip == table[prev_slot].next {
                byte |= NEXT_IP;
            } else if a.ip == prev_ip {
                byte |= SAME_IP;
            } else {
                // SAFETY: each access writes at most VARINT_MAX bytes to a column of
                // VARINT_MAX * n, and at most n accesses are taken.
                pp = unsafe { put_zigzag(pp, a.ip.wrapping_sub(prev_ip)) };
            }
            // As Predictor::predict and Predictor::update (which the decoder uses), fused.
            table[prev_slot].next = a.ip;
            let slot = Predictor::slot(a.ip);
            let s = &mut table[slot];
            let known = s.ip == a.ip;
            let pred = if known {
                s.last.wrapping_add(s.stride)
            } else {
                prev_addr
            };
            if a.addr == pred {
                byte |= PREDICTED;
            } else {
                // SAFETY: as for the ip column.
                pa = unsafe { put_zigzag(pa, a.addr.wrapping_sub(pred)) };
            }
            if known {
                s.stride = a.addr.wrapping_sub(s.last);
            } else {
                s.ip = a.ip;
                s.stride = 0;
                s.next = EMPTY;
            }
            s.last = a.addr;
            // SAFETY: at most two info bytes per access in a column of 2 * n.
            unsafe {
                pi.write(byte);
                pi = pi.add(1);
                if size_bits == EXPLICIT_SIZE {
                    pi.write(a.size);
                    pi = pi.add(1);
                }
            }
            (prev_ip, prev_addr, prev_slot) = (a.ip, a.addr, slot);
        }
        // SAFETY: each pointer only moved forward within its column.
        let (n_info, n_ips, n_addrs) = unsafe {
            (
                pi.offset_from(info0) as usize,
                pp.offset_from(ips0) as usize,
                pa.offset_from(addrs0) as usize,
            )
        };
        let raw = &mut self.raw;
        raw.clear();
        put_u64(raw, u64::from(thread));
        put_u64(raw, samples.len() as u64);
        for s in samples {
            put_u64(raw, s.id);
            put_u64(raw, s.skipped_before);
            put_u64(raw, u64::from(s.len));
        }
        put_u64(raw, n as u64);
        let columns = [
            &self.info[..n_info],
            &self.ips[..n_ips],
            &self.addrs[..n_addrs],
        ];
        for column in columns {
            put_u64(raw, column.len() as u64);
        }
        for column in columns {
            raw.extend_from_slice(column);
        }
        out.clear();
        if let Some(c) = self.compressor.as_mut() {
            // zstd writes its output from the start of the Vec, so compress aside and copy.
            let comp = &mut self.compressed;
            comp.clear();
            comp.reserve(zstd::zstd_safe::compress_bound(raw.len()));
            if c.compress_to_buffer(&raw[..], comp).is_ok() {
                put_u64(out, raw.len() as u64);
                out.extend_from_slice(comp);
                return;
            }
        }
        // No compressor (or it failed): store the raw bytes behind a zero marker.
        out.clear();
        put_u64(out, 0);
        put_u64(out, raw.len() as u64);
        out.extend_from_slice(raw);
    }
}

/// Longest LEB128 encoding of a u64.
const VARINT_MAX: usize = 10;

/// Makes `buf` at least `len` bytes long (zero-filled once; encoders reuse their buffers).
fn grow(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// Writes `delta` (a wrapping difference read as signed) zigzag-encoded as LEB128 at `p`,
/// which has room for [`VARINT_MAX`] bytes; returns the position after it. Values of up to
/// eight bytes (all but the largest jumps) are written without a branch on their length,
/// which is random for a gather's residuals: their 7-bit groups spread to bytes in three
/// steps, continuation bits from the length, one 8-byte store.
///
/// # Safety
/// `p` must be valid for writes of [`VARINT_MAX`] bytes.
#[inline(always)]
unsafe fn put_zigzag(p: *mut u8, delta: u64) -> *mut u8 {
    let v = delta as i64;
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    if u < 1 << 56 {
        let t = (u & 0x0fff_ffff) | ((u & (0x0fff_ffff << 28)) << 4);
        let t = (t & 0x0000_3fff_0000_3fff) | ((t & 0x0fff_c000_0fff_c000) << 2);
        let t = (t & 0x007f_007f_007f_007f) | ((t & 0x3f80_3f80_3f80_3f80) << 1);
        let len = usize::from(VARINT_LEN[(u | 1).leading_zeros() as usize]);
        let more = 0x8080_8080_8080_8080u64 & ((1u64 << (8 * (len - 1))) - 1);
        // SAFETY: the caller's room for VARINT_MAX >= 8 bytes.
        unsafe {
            p.cast::<u64>().write_unaligned((t | more).to_le());
            p.add(len)
        }
    } else {
        let mut p = p;
        // SAFETY: as above; a u64 takes at most VARINT_MAX bytes.
        unsafe {
            while u >= 0x80 {
                p.write((u as u8) | 0x80);
                u >>= 7;
                p = p.add(1);
            }
            p.write(u as u8);
            p.add(1)
        }
    }
}

/// LEB128 length of a value by its leading zeros (a zero takes one byte).
const VARINT_LEN: [u8; 65] = {
    let mut t = [1u8; 65];
    let mut zeros = 0;
    while zeros < 64 {
        t[zeros] = (64 - zeros).div_ceil(7) as u8;
        zeros += 1;
    }
    t
};

/// Encodes and compresses a chunk into a frame payload (one-off; see [`ChunkEncoder`]), in
/// the [`Layout::Columns`] layout.
pub fn encode_chunk(chunk: &Chunk, level: i32) -> Vec<u8> {
    let mut out = Vec::new();
    ChunkEncoder::new(level).encode_into(
        chunk.thread,
        &chunk.samples,
        chunk.accesses.iter().copied(),
        chunk.accesses.len(),
        &mut out,
    );
    out
}

/// Decodes chunks, reusing its zstd context and buffers between calls.
pub struct ChunkDecoder {
    raw: Vec<u8>,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder::new()
    }
}

impl ChunkDecoder {
    pub fn new() -> ChunkDecoder {
        ChunkDecoder {
            raw: Vec::new(),
            decompressor: zstd::bulk::Decompressor::new().ok(),
        }
    }

    /// Decompresses and decodes a chunk payload written by [`ChunkEncoder`].
    pub fn decode(&mut self, payload: &[u8]) -> Result<Chunk, CodecError> {
        let mut chunk = Chunk::default();
        self.decode_into(payload, Layout::Columns, &mut chunk)?;
        Ok(chunk)
    }

    /// Like [`ChunkDecoder::decode`] for either layout, reusing `chunk`'s vectors.
    pub fn decode_into(
        &mut self,
        payload: &[u8],
        layout: Layout,
        chunk: &mut Chunk,
    ) -> Result<(), CodecError> {
        let mut c = Cursor::new(payload);
        let raw_len = c.u64().ok_or(CodecError::Malformed(0))?;
        if raw_len == 0 {
            let n = c.u64().ok_or(CodecError::Malformed(c.position()))?;
            if n > MAX_RAW_CHUNK {
                return Err(CodecError::TooLarge(n));
            }
            let raw = c
                .bytes(n as usize)
                .ok_or(CodecError::Malformed(c.position()))?;
            return decode_raw(raw, layout, chunk);
        }
        if raw_len > MAX_RAW_CHUNK {
            return Err(CodecError::TooLarge(raw_len));
        }
        let rest = &payload[c.position()..];
        self.raw.clear();
        self.raw.reserve(raw_len as usize);
        let got = match self.decompressor.as_mut() {
            Some(d) => d
                .decompress_to_buffer(rest, &mut self.raw)
                .map_err(|e| CodecError::Decompress(e.to_string()))?,
            None => {
                self.raw = zstd::bulk::decompress(rest, raw_len as usize)
                    .map_err(|e| CodecError::Decompress(e.to_string()))?;
                self.raw.len()
            }
        };
        if got as u64 != raw_len {
            return Err(CodecError::Decompress(format!(
                "{got} bytes instead of {raw_len}"
            )));
        }
        decode_raw(&self.raw, layout, chunk)
    }
}

/// Decompresses and decodes a chunk payload written by [`encode_chunk`] (one-off; see
/// [`ChunkDecoder`]).
pub fn decode_chunk(payload: &[u8]) -> Result<Chunk, CodecError> {
    ChunkDecoder::new().decode(payload)
}

/// Where an access's fields come from: one stream, the info cursor (format 1, `ONE`), or
/// three columns (format 2; chosen at compile time, so the decoding loop has no branch).
struct Fields<'a, const ONE: bool> {
    info: Cursor<'a>,
    ips: Cursor<'a>,
    addrs: Cursor<'a>,
    /// Offset of the info cursor in the raw chunk.
    base: usize,
}

impl<const ONE: bool> Fields<'_, ONE> {
    #[inline(always)]
    fn info(&mut self) -> Option<u8> {
        self.info.u8()
    }
    #[inline(always)]
    fn ip(&mut self) -> Option<i64> {
        if ONE {
            self.info.i64()
        } else {
            self.ips.i64()
        }
    }
    #[inline(always)]
    fn addr(&mut self) -> Option<i64> {
        if ONE {
            self.info.i64()
        } else {
            self.addrs.i64()
        }
    }
    /// Offset in the raw chunk of the next info byte (for error messages).
    fn position(&self) -> usize {
        self.base + self.info.position()
    }
    fn is_empty(&self) -> bool {
        self.info.is_empty() && self.ips.is_empty() && self.addrs.is_empty()
    }
}

fn decode_raw(raw: &[u8], layout: Layout, chunk: &mut Chunk) -> Result<(), CodecError> {
    let mut c = Cursor::new(raw);
    let bad = |c: &Cursor| CodecError::Malformed(c.position());
    let thread = c.u64().ok_or_else(|| bad(&c))?;
    chunk.thread = u32::try_from(thread).map_err(|_| bad(&c))?;
    let n_samples = c.u64().ok_or_else(|| bad(&c))?;
    // Every sample takes at least 3 bytes: bound allocations by what the input can hold.
    if n_samples > raw.len() as u64 / 3 {
        return Err(bad(&c));
    }
    chunk.samples.clear();
    chunk.samples.reserve(n_samples as usize);
    let mut total = 0u64;
    for _ in 0..n_samples {
        let id = c.u64().ok_or_else(|| bad(&c))?;
        let skipped_before = c.u64().ok_or_else(|| bad(&c))?;
        let len = c.u64().ok_or_else(|| bad(&c))?;
        let len = u32::try_from(len).map_err(|_| bad(&c))?;
        total += u64::from(len);
        chunk.samples.push(SampleHeader {
            id,
            skipped_before,
            len,
        });
    }
    let n = c.u64().ok_or_else(|| bad(&c))?;
    if n != total {
        return Err(CodecError::Inconsistent {
            samples: total,
            accesses: n,
        });
    }
    // Every access takes at least its info byte.
    if n > raw.len() as u64 {
        return Err(bad(&c));
    }
    match layout {
        Layout::Interleaved => {
            let base = c.position();
            let fields = Fields::<true> {
                info: Cursor::new(&raw[base..]),
                ips: Cursor::new(&[]),
                addrs: Cursor::new(&[]),
                base,
            };
            decode_accesses(n, fields, &mut chunk.accesses)
        }
        Layout::Columns => {
            let mut column = || -> Result<usize, CodecError> {
                let len = c.u64().ok_or_else(|| bad(&c))?;
                usize::try_from(len).map_err(|_| bad(&c))
            };
            let (info, ips, addrs) = (column()?, column()?, column()?);
            let base = c.position();
            let rest = raw.len() - base;
            let fits = info
                .checked_add(ips)
                .and_then(|l| l.checked_add(addrs))
                .is_some_and(|l| l == rest);
            if !fits {
                return Err(CodecError::Malformed(base));
            }
            let fields = Fields::<false> {
                info: Cursor::new(&raw[base..base + info]),
                ips: Cursor::new(&raw[base + info..base + info + ips]),
                addrs: Cursor::new(&raw[base + info + ips..]),
                base,
            };
            decode_accesses(n, fields, &mut chunk.accesses)
        }
    }
}

fn decode_accesses<const ONE: bool>(
    n: u64,
    mut f: Fields<'_, ONE>,
    accesses: &mut Vec<Access>,
) -> Result<(), CodecError> {
    accesses.clear();
    accesses.reserve(n as usize);
    let mut p = Predictor::new();
    for _ in 0..n {
        let bad = |f: &Fields<'_, ONE>| CodecError::Malformed(f.position());
        let info = f.info().ok_or_else(|| bad(&f))?;
        if info & (SAME_IP | NEXT_IP) == SAME_IP | NEXT_IP {
            return Err(bad(&f));
        }
        let size = if info & EXPLICIT_SIZE != 0 {
            f.info().ok_or_else(|| bad(&f))?
        } else {
            1u8 << ((info >> SIZE_SHIFT) & 7)
        };
        let ip = if info & NEXT_IP != 0 {
            p.next_ip()
        } else if info & SAME_IP != 0 {
            p.prev_ip
        } else {
            p.prev_ip
                .wrapping_add(f.ip().ok_or_else(|| bad(&f))? as u64)
        };
        let (pred, slot) = p.predict(ip);
        let addr = if info & PREDICTED != 0 {
            pred
        } else {
            pred.wrapping_add(f.addr().ok_or_else(|| bad(&f))? as u64)
        };
        p.update(slot, ip, addr);
        accesses.push(Access {
            ip,
            addr,
            size,
            kind: if info & STORE != 0 {
                AccessKind::Store
            } else {
                AccessKind::Load
            },
        });
    }
    if !f.is_empty() {
        return Err(CodecError::Malformed(f.position()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(accesses: Vec<Access>) -> Chunk {
        Chunk {
            thread: 3,
            samples: vec![SampleHeader {
                id: 9,
                skipped_before: 100,
                len: accesses.len() as u32,
            }],
            accesses,
        }
    }

    #[test]
    fn round_trip_mixed_accesses() {
        let mut v = Vec::new();
        for i in 0..1000u64 {
            v.push(Access {
                ip: 0x401000,
                addr: 0x7000_0000 + 4 * i,
                size: 4,
                kind: AccessKind::Load,
            });
            v.push(Access {
                ip: 0x401008,
                addr: 0x9000_0000 + (i * 7919 % 4096) * 8,
                size: 8,
                kind: AccessKind::Load,
            });
            v.push(Access {
                ip: 0x401010,
                addr: u64::MAX - i,
                size: 10,
                kind: AccessKind::Store,
            });
        }
        let c = chunk(v);
        let enc = encode_chunk(&c, 1);
        assert_eq!(decode_chunk(&enc).unwrap(), c);
    }

    #[test]
    fn longest_encodings_fill_the_columns_and_reused_encoders_keep_nothing() {
        // Every access as long as it can be: an explicit size byte, and an ip delta and an
        // address residual of ten bytes each (jumps across the whole 64-bit range).
        let mut state = 1u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state
        };
        let worst: Vec<Access> = (0..4096u64)
            .map(|_| Access {
                ip: next(),
                addr: next(),
                size: 3,
                kind: AccessKind::Store,
            })
            .collect();
        let small = chunk(vec![Access {
            ip: 0x401000,
            addr: 0x7000_0000,
            size: 8,
            kind: AccessKind::Load,
        }]);
        let big = chunk(worst);
        let mut enc = ChunkEncoder::uncompressed();
        let mut out = Vec::new();
        enc.encode_into(
            big.thread,
            &big.samples,
            big.accesses.iter().copied(),
            big.accesses.len(),
            &mut out,
        );
        // Stored raw: about 2 + 10 + 10 bytes per access (a random 64-bit delta takes nine or
        // ten bytes, mostly ten).
        assert!(out.len() > 20 * big.accesses.len(), "{} bytes", out.len());
        assert_eq!(decode_chunk(&out).unwrap(), big);
        // The same encoder, a small chunk after the large one: its columns hold only its own
        // bytes, not what the large chunk left in the buffers.
        enc.encode_into(
            small.thread,
            &small.samples,
            small.accesses.iter().copied(),
            small.accesses.len(),
            &mut out,
        );
        assert!(out.len() < 64, "{} bytes", out.len());
        assert_eq!(decode_chunk(&out).unwrap(), small);
    }

    #[test]
    fn varints_of_every_length_are_plain_leb128() {
        // Both sides of each 7-bit boundary, both signs, and the eight-byte fast path's edge.
        let mut values = vec![0u64, 1, u64::MAX, i64::MIN as u64, i64::MAX as u64];
        for bits in 1..64 {
            for v in [(1u64 << bits) - 1, 1u64 << bits, (1u64 << bits) + 1] {
                values.extend([v, v.wrapping_neg()]);
            }
        }
        for delta in values {
            let mut buf = [0xaau8; VARINT_MAX + 8];
            // SAFETY: buf has room for VARINT_MAX bytes at its start.
            let len = unsafe { put_zigzag(buf.as_mut_ptr(), delta).offset_from(buf.as_ptr()) };
            let mut want = Vec::new();
            crate::trace::varint::put_i64(&mut want, delta as i64);
            assert_eq!(&buf[..len as usize], &want[..], "delta {delta:#x}");
        }
    }

    #[test]
    fn strided_streams_are_compact() {
        let v: Vec<Access> = (0..100_000u64)
            .map(|i| Access {
                ip: 0x400000 + (i % 2) * 4,
                addr: 0x1000 + 8 * (i / 2) + (i % 2) * 0x100000,
                size: 8,
                kind: AccessKind::Load,
            })
            .collect();
        let enc = encode_chunk(&chunk(v), 1);
        assert!(
            enc.len() < 100_000 / 10,
            "{} bytes for 100k strided accesses",
            enc.len()
        );
    }

    #[test]
    fn a_strided_loop_costs_one_info_byte_per_access() {
        // Three instructions in a loop, each with its own stride: after the first two
        // iterations the instruction is the one that followed the previous one last time and
        // the address is the stride's, so only info bytes remain.
        let v: Vec<Access> = (0..30_000u64)
            .map(|i| Access {
                ip: [0x401000, 0x401007, 0x400ff0][(i % 3) as usize],
                addr: 0x1000_0000 * (1 + i % 3) + (i / 3) * [4, 8, 16][(i % 3) as usize],
                size: 4,
                kind: AccessKind::Load,
            })
            .collect();
        let c = chunk(v);
        let mut out = Vec::new();
        let mut enc = ChunkEncoder::uncompressed();
        enc.encode_into(3, &c.samples, c.accesses.iter().copied(), 30_000, &mut out);
        assert!(out.len() < 30_000 + 100, "{} raw bytes", out.len());
        let mut back = Chunk::default();
        ChunkDecoder::new()
            .decode_into(&out, Layout::Columns, &mut back)
            .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn columns_that_do_not_fill_the_chunk_are_errors() {
        let c = chunk(
            (0..50u64)
                .map(|i| Access {
                    ip: 0x400000 + i * 3,
                    addr: i * i * 1000,
                    size: 8,
                    kind: AccessKind::Store,
                })
                .collect(),
        );
        let mut out = Vec::new();
        ChunkEncoder::uncompressed().encode_into(
            3,
            &c.samples,
            c.accesses.iter().copied(),
            50,
            &mut out,
        );
        // Payload: 0 marker, raw length (2 bytes), then thread 3, 1 sample (9, 100, 50), 50
        // accesses, then the three column lengths. Shift a byte from the ip column to the
        // info column.
        assert_eq!(&out[3..9], &[3, 1, 9, 100, 50, 50]);
        assert_eq!(out[9], 50);
        let mut bad = out.clone();
        bad[9] = 51;
        bad[10] -= 1;
        let mut d = ChunkDecoder::new();
        let mut back = Chunk::default();
        assert!(d.decode_into(&bad, Layout::Columns, &mut back).is_err());
        // Lengths that overrun the chunk.
        let mut bad = out.clone();
        bad[9] = 60;
        assert!(d.decode_into(&bad, Layout::Columns, &mut back).is_err());
        d.decode_into(&out, Layout::Columns, &mut back).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn corrupt_payloads_are_errors_not_panics() {
        let c = chunk(vec![Access {
            ip: 1,
            addr: 2,
            size: 8,
            kind: AccessKind::Store,
        }]);
        let enc = encode_chunk(&c, 1);
        for cut in 0..enc.len() {
            let _ = decode_chunk(&enc[..cut]);
        }
        let mut flipped = enc.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x55;
        let _ = decode_chunk(&flipped);
        assert!(decode_chunk(&[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
