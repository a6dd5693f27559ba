//! Streaming trace reader: frames one at a time; damage ends the stream with a report of
//! where it was found, and everything before it stays readable.

use std::io::{self, Read};

use super::codec::{ChunkDecoder, CodecError, Layout};
use super::writer::{
    FRAME_CHUNK, FRAME_COLUMNS, FRAME_END, FRAME_JIT, FRAME_MAGIC, FRAME_MAPPINGS, FRAME_NOTE,
    MAX_FRAME,
};
use super::{Chunk, EndInfo, JitSymbol, Mapping, TraceMeta, MAGIC, MIN_VERSION, VERSION};

/// One frame of a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Mappings(Vec<Mapping>),
    Chunk(Chunk),
    Note(String),
    End(EndInfo),
    /// Names of JIT-compiled code, sorted by start (see [`JitSymbol`]).
    JitSymbols(Vec<JitSymbol>),
}

/// Where and why a trace stops being readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first unreadable frame.
    pub offset: u64,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read trace: {0}")]
    Io(io::Error),
    /// The file does not start with the trace magic; what it seems to be instead.
    #[error("not an mgbench trace ({0}): expected a file written by `mgbench capture` or `mgbench import`")]
    NotATrace(&'static str),
    #[error(
        "trace format version {found} is not supported (this mgbench reads versions {MIN_VERSION} to {VERSION}): read it with the mgbench that wrote it, or a newer one"
    )]
    Version { found: u16 },
    #[error("trace header is damaged: {0}")]
    Header(String),
}

/// A frame whose marker, length and CRC are good, not yet decoded.
#[derive(Debug, Clone)]
pub struct RawFrame {
    pub offset: u64,
    pub kind: u8,
    pub payload: Vec<u8>,
}

impl RawFrame {
    /// Decodes the payload; a chunk goes into the buffer `chunk()` supplies.
    pub fn decode(
        &self,
        decoder: &mut ChunkDecoder,
        chunk: impl FnOnce() -> Chunk,
    ) -> Result<Frame, Damage> {
        let damage = |reason: String| Damage {
            offset: self.offset,
            reason,
        };
        let payload = &self.payload[..];
        Ok(match self.kind {
            FRAME_CHUNK | FRAME_COLUMNS => {
                let layout = if self.kind == FRAME_CHUNK {
                    Layout::Interleaved
                } else {
                    Layout::Columns
                };
                let mut c = chunk();
                decoder
                    .decode_into(payload, layout, &mut c)
                    .map_err(|e| damage(chunk_reason(&e)))?;
                Frame::Chunk(c)
            }
            FRAME_MAPPINGS => Frame::Mappings(
                serde_json::from_slice(payload)
                    .map_err(|e| damage(format!("mappings frame: {e}")))?,
            ),
            FRAME_NOTE => Frame::Note(
                serde_json::from_slice(payload).map_err(|e| damage(format!("note frame: {e}")))?,
            ),
            FRAME_JIT => {
                let mut syms: Vec<JitSymbol> = serde_json::from_slice(payload)
                    .map_err(|e| damage(format!("JIT symbols frame: {e}")))?;
                syms.sort_by_key(|s| s.start);
                Frame::JitSymbols(syms)
            }
            FRAME_END => Frame::End(
                serde_json::from_slice(payload).map_err(|e| damage(format!("end frame: {e}")))?,
            ),
            other => return Err(damage(format!("unknown frame kind {other}"))),
        })
    }
}

/// Reads frames from a trace.
pub struct TraceReader<R: Read> {
    input: R,
    decoder: ChunkDecoder,
    meta: TraceMeta,
    offset: u64,
    damage: Option<Damage>,
    done: bool,
    raw: RawFrame,
}

/// What a file that is not a trace seems to be, from its first bytes: the files users give
/// a trace command by mistake (a report, a program, a compressed foreign trace).
fn what_it_is(head: &[u8]) -> &'static str {
    let text = head.iter().position(|b| !b.is_ascii_whitespace());
    match head {
        [] => "the file is empty: nothing was written to it",
        [0x7f, b'E', b'L', b'F', ..] => {
            "it is an ELF program: record one with `mgbench capture -- PROGRAM`"
        }
        [0x1f, 0x8b, ..] => {
            "it is gzip-compressed: a trace of another tool goes through `mgbench import`"
        }
        [b'#', b'!', ..] => "it is a script: record a program with `mgbench capture -- PROGRAM`",
        _ if text.is_some_and(|i| matches!(head[i], b'{' | b'[')) => {
            "it looks like JSON: a report, results or pattern file, which `mgbench report` reads"
        }
        _ => "bad magic",
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads and checks the header.
    pub fn open(mut input: R) -> Result<TraceReader<R>, ReadError> {
        let mut head = [0u8; 20];
        let n = read_full(&mut input, &mut head).map_err(ReadError::Io)?;
        if n < 8 || &head[..8] != MAGIC {
            return Err(ReadError::NotATrace(what_it_is(&head[..n])));
        }
        if n < 20 {
            return Err(ReadError::Header(format!("file ends after {n} bytes")));
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(ReadError::Version { found: version });
        }
        let len = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
        let crc = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
        if len > MAX_FRAME {
            return Err(ReadError::Header(format!(
                "metadata length {len} is implausible"
            )));
        }
        let mut json = vec![0u8; len as usize];
        let got = read_full(&mut input, &mut json).map_err(ReadError::Io)?;
        if got < json.len() {
            return Err(ReadError::Header(format!(
                "metadata truncated ({got} of {len} bytes)"
            )));
        }
        if crc32fast::hash(&json) != crc {
            return Err(ReadError::Header("metadata checksum mismatch".into()));
        }
        let meta: TraceMeta = serde_json::from_slice(&json)
            .map_err(|e| ReadError::Header(format!("metadata is not valid: {e}")))?;
        Ok(TraceReader {
            input,
            decoder: ChunkDecoder::new(),
            meta,
            offset: 20 + u64::from(len),
            damage: None,
            done: false,
            raw: RawFrame {
                offset: 0,
                kind: 0,
                payload: Vec::new(),
            },
        })
    }

    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// Byte offset of the next frame.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Where the trace became unreadable, if it did.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// The next frame; `Ok(None)` at the end of the readable trace (clean end, or damage:
    /// see [`TraceReader::damage`]). I/O errors other than a short read are returned.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ReadError> {
        self.next_decoded(Chunk::default)
    }

    /// Like [`TraceReader::next_frame`], but a chunk is decoded into `chunk` (reusing its
    /// vectors) and reported as an empty `Frame::Chunk`: for readers that stream through large
    /// traces without allocating per chunk.
    pub fn next_frame_into(&mut self, chunk: &mut Chunk) -> Result<Option<Frame>, ReadError> {
        let mut taken = Some(std::mem::take(chunk));
        let r = self.next_decoded(|| taken.take().unwrap_or_default());
        Ok(match r? {
            Some(Frame::Chunk(c)) => {
                *chunk = c;
                Some(Frame::Chunk(Chunk::default()))
            }
            other => {
                if let Some(back) = taken {
                    *chunk = back;
                }
                other
            }
        })
    }

    fn next_decoded(&mut self, chunk: impl FnOnce() -> Chunk) -> Result<Option<Frame>, ReadError> {
        if !self.read_raw()? {
            return Ok(None);
        }
        match self.raw.decode(&mut self.decoder, chunk) {
            Ok(f) => Ok(Some(f)),
            Err(d) => {
                self.offset = d.offset;
                self.damage = Some(d);
                self.done = true;
                Ok(None)
            }
        }
    }

    /// The next frame with a good marker, length and CRC, without decoding it.
    pub fn next_raw_frame(&mut self) -> Result<Option<RawFrame>, ReadError> {
        if !self.read_raw()? {
            return Ok(None);
        }
        Ok(Some(RawFrame {
            offset: self.raw.offset,
            kind: self.raw.kind,
            payload: std::mem::take(&mut self.raw.payload),
        }))
    }

    /// Reads the next frame into `self.raw`; false at the end or at damage.
    fn read_raw(&mut self) -> Result<bool, ReadError> {
        if self.done {
            return Ok(false);
        }
        let start = self.offset;
        let mut head = [0u8; 12];
        let n = read_full(&mut self.input, &mut head).map_err(ReadError::Io)?;
        if n == 0 {
            self.done = true;
            return Ok(false);
        }
        if n < head.len() {
            return self.damaged(start, format!("frame header truncated ({n} of 12 bytes)"));
        }
        if head[0..2] != FRAME_MAGIC {
            return self.damaged(start, "no frame marker".to_string());
        }
        let kind = head[2];
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if len > MAX_FRAME {
            return self.damaged(start, format!("frame length {len} is implausible"));
        }
        let payload = &mut self.raw.payload;
        payload.resize(len as usize, 0);
        let got = read_full(&mut self.input, payload).map_err(ReadError::Io)?;
        if got < payload.len() {
            return self.damaged(
                start,
                format!("frame truncated ({got} of {len} payload bytes): the writer was stopped mid-frame"),
            );
        }
        if crc32fast::hash(payload) != crc {
            return self.damaged(start, "frame checksum mismatch".to_string());
        }
        self.raw.offset = start;
        self.raw.kind = kind;
        self.offset += 12 + u64::from(len);
        Ok(true)
    }

    fn damaged(&mut self, offset: u64, reason: String) -> Result<bool, ReadError> {
        self.damage = Some(Damage { offset, reason });
        self.done = true;
        Ok(false)
    }
}

fn chunk_reason(e: &CodecError) -> String {
    format!("chunk frame: {e}")
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The names of JIT-compiled code a trace holds (its JIT symbols frames, written when the
/// program ended), read without decoding its chunks: for readers that name code while they
/// stream (`trace dump --symbols`). Empty where there are none or the file cannot be read.
pub fn read_jit_symbols(path: &std::path::Path) -> Vec<JitSymbol> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let Ok(mut r) = TraceReader::open(io::BufReader::new(f)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(Some(raw)) = r.next_raw_frame() {
        if raw.kind == FRAME_JIT {
            if let Ok(s) = serde_json::from_slice::<Vec<JitSymbol>>(&raw.payload) {
                out.extend(s);
            }
        }
    }
    out.sort_by_key(|s| s.start);
    out
}

/// The end frame of a finished trace, found from the end of the file without reading the
/// rest (the end frame is the last frame: its header, length and CRC must check out). None
/// when the trace did not finish or the file cannot be read. Used to say up front how many
/// accesses a long job will process.
pub fn read_end_info(path: &std::path::Path) -> Option<super::EndInfo> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let tail = len.min(1 << 16);
    f.seek(SeekFrom::Start(len - tail)).ok()?;
    let mut buf = Vec::with_capacity(tail as usize);
    f.take(tail).read_to_end(&mut buf).ok()?;
    // The last frame ends the file: try every "MF", end kind, start from the back.
    for at in (0..buf.len().saturating_sub(12)).rev() {
        let h = &buf[at..at + 12];
        if h[0..2] != FRAME_MAGIC || h[2] != FRAME_END || h[3] != 0 {
            continue;
        }
        let n = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        if at + 12 + n != buf.len() {
            continue;
        }
        let payload = &buf[at + 12..];
        if crc32fast::hash(payload).to_le_bytes() != h[8..12] {
            continue;
        }
        return serde_json::from_slice(payload).ok();
    }
    None
}
