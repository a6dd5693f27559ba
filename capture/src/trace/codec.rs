//! Chunk codec: per-access delta encoding with per-instruction stride prediction, then zstd.
//!
//! Each access becomes an info byte (store bit, log2 size, "same ip as the previous access",
//! "address as predicted", "explicit size follows"), an optional zigzag ip delta and an
//! optional zigzag address residual. The address is predicted from the last address and
//! stride of the same instruction (a small direct-mapped table), so strided streams cost one
//! byte per access and gathers pay only for their randomness. The table starts empty in every
//! chunk, which keeps chunks independently decodable.

use super::varint::{put_u64, Cursor};
use super::{Access, AccessKind, Chunk, SampleHeader};

const STORE: u8 = 1;
const SIZE_SHIFT: u8 = 1; // bits 1..=3: log2(size) for power-of-two sizes up to 128
const SAME_IP: u8 = 1 << 4;
const PREDICTED: u8 = 1 << 5;
const EXPLICIT_SIZE: u8 = 1 << 6;
const KNOWN_BITS: u8 = STORE | (7 << SIZE_SHIFT) | SAME_IP | PREDICTED | EXPLICIT_SIZE;

const TABLE_BITS: u32 = 10;
/// Largest decompressed chunk accepted (a guard against corrupt length fields).
pub const MAX_RAW_CHUNK: u64 = 1 << 30;

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
}

/// Encoder/decoder state, mirrored on both sides.
struct Predictor {
    table: Vec<Slot>,
    prev_ip: u64,
    prev_addr: u64,
}

impl Predictor {
    fn new() -> Predictor {
        Predictor {
            table: vec![
                Slot {
                    ip: EMPTY,
                    last: 0,
                    stride: 0
                };
                1 << TABLE_BITS
            ],
            prev_ip: 0,
            prev_addr: 0,
        }
    }

    #[inline(always)]
    fn slot(ip: u64) -> usize {
        (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)) as usize
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
        let s = &mut self.table[slot];
        if s.ip == ip {
            s.stride = addr.wrapping_sub(s.last);
        } else {
            s.ip = ip;
            s.stride = 0;
        }
        s.last = addr;
        self.prev_ip = ip;
        self.prev_addr = addr;
    }
}

const MAX_VARINT: usize = 10;
/// Worst case per access: info, explicit size, two varints.
const MAX_ACCESS_BYTES: usize = 2 + 2 * MAX_VARINT;

/// Writes a zigzag LEB128 value into `out` (at least MAX_VARINT bytes); returns its length.
#[inline(always)]
fn write_zigzag(out: &mut [u8], v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut i = 0;
    while z >= 0x80 {
        out[i] = (z as u8) | 0x80;
        z >>= 7;
        i += 1;
    }
    out[i] = z as u8;
    i + 1
}

fn size_code(size: u8) -> Option<u8> {
    (size.is_power_of_two() && size <= 128).then(|| size.trailing_zeros() as u8)
}

/// Encodes chunks, reusing its zstd context and scratch buffer between calls (a fresh zstd
/// context per chunk costs megabytes of table setup and page faults).
pub struct ChunkEncoder {
    raw: Vec<u8>,
    compressed: Vec<u8>,
    compressor: Option<zstd::bulk::Compressor<'static>>,
}

impl ChunkEncoder {
    pub fn new(level: i32) -> ChunkEncoder {
        ChunkEncoder {
            raw: Vec::new(),
            compressed: Vec::new(),
            compressor: zstd::bulk::Compressor::new(level).ok(),
        }
    }

    /// Encodes one thread's `n` accesses, in `samples`, into `out` (cleared first).
    pub fn encode_into<I: IntoIterator<Item = Access>>(
        &mut self,
        thread: u32,
        samples: &[SampleHeader],
        accesses: I,
        n: usize,
        out: &mut Vec<u8>,
    ) {
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
        let mut p = Predictor::new();
        // Bytes are written by index into a buffer sized for the worst case and truncated at
        // the end: at tens of millions of accesses per second, per-byte pushes dominate.
        let mut pos = raw.len();
        raw.resize(pos + n * MAX_ACCESS_BYTES, 0);
        for a in accesses.into_iter().take(n) {
            let mut info = if a.kind == AccessKind::Store {
                STORE
            } else {
                0
            };
            let code = size_code(a.size);
            match code {
                Some(c) => info |= c << SIZE_SHIFT,
                None => info |= EXPLICIT_SIZE,
            }
            let same_ip = a.ip == p.prev_ip;
            if same_ip {
                info |= SAME_IP;
            }
            let (pred, slot) = p.predict(a.ip);
            if a.addr == pred {
                info |= PREDICTED;
            }
            raw[pos] = info;
            pos += 1;
            if code.is_none() {
                raw[pos] = a.size;
                pos += 1;
            }
            if !same_ip {
                pos += write_zigzag(&mut raw[pos..], a.ip.wrapping_sub(p.prev_ip) as i64);
            }
            if a.addr != pred {
                pos += write_zigzag(&mut raw[pos..], a.addr.wrapping_sub(pred) as i64);
            }
            p.update(slot, a.ip, a.addr);
        }
        raw.truncate(pos);
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

/// Encodes and compresses a chunk into a frame payload (one-off; see [`ChunkEncoder`]).
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

    /// Decompresses and decodes a chunk payload.
    pub fn decode(&mut self, payload: &[u8]) -> Result<Chunk, CodecError> {
        let mut chunk = Chunk::default();
        self.decode_into(payload, &mut chunk)?;
        Ok(chunk)
    }

    /// Like [`ChunkDecoder::decode`], reusing `chunk`'s vectors.
    pub fn decode_into(&mut self, payload: &[u8], chunk: &mut Chunk) -> Result<(), CodecError> {
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
            return decode_raw(raw, chunk);
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
        decode_raw(&self.raw, chunk)
    }
}

/// Decompresses and decodes a chunk payload (one-off; see [`ChunkDecoder`]).
pub fn decode_chunk(payload: &[u8]) -> Result<Chunk, CodecError> {
    ChunkDecoder::new().decode(payload)
}

fn decode_raw(raw: &[u8], chunk: &mut Chunk) -> Result<(), CodecError> {
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
    if n > raw.len() as u64 {
        return Err(bad(&c));
    }
    chunk.accesses.clear();
    chunk.accesses.reserve(n as usize);
    let mut p = Predictor::new();
    for _ in 0..n {
        let info = c.u8().ok_or_else(|| bad(&c))?;
        if info & !KNOWN_BITS != 0 {
            return Err(bad(&c));
        }
        let size = if info & EXPLICIT_SIZE != 0 {
            c.u8().ok_or_else(|| bad(&c))?
        } else {
            1u8 << ((info >> SIZE_SHIFT) & 7)
        };
        let ip = if info & SAME_IP != 0 {
            p.prev_ip
        } else {
            p.prev_ip
                .wrapping_add(c.i64().ok_or_else(|| bad(&c))? as u64)
        };
        let (pred, slot) = p.predict(ip);
        let addr = if info & PREDICTED != 0 {
            pred
        } else {
            pred.wrapping_add(c.i64().ok_or_else(|| bad(&c))? as u64)
        };
        p.update(slot, ip, addr);
        chunk.accesses.push(Access {
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
    if !c.is_empty() {
        return Err(bad(&c));
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
