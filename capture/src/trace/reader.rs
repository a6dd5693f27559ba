//! Streaming trace reader: frames one at a time; damage ends the stream with a report of
//! where it was found, and everything before it stays readable.

use std::io::{self, Read};

use super::codec::{ChunkDecoder, CodecError};
use super::writer::{FRAME_CHUNK, FRAME_END, FRAME_MAGIC, FRAME_MAPPINGS, FRAME_NOTE, MAX_FRAME};
use super::{Chunk, EndInfo, Mapping, TraceMeta, MAGIC, VERSION};

/// One frame of a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Mappings(Vec<Mapping>),
    Chunk(Chunk),
    Note(String),
    End(EndInfo),
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
    #[error("not an mgbench trace (bad magic): expected a file written by `mgbench capture` or `mgbench import`")]
    NotATrace,
    #[error(
        "trace format version {found} is not supported (this mgbench reads version {VERSION})"
    )]
    Version { found: u16 },
    #[error("trace header is damaged: {0}")]
    Header(String),
}

/// Reads frames from a trace.
pub struct TraceReader<R: Read> {
    input: R,
    decoder: ChunkDecoder,
    payload: Vec<u8>,
    meta: TraceMeta,
    offset: u64,
    damage: Option<Damage>,
    done: bool,
}

impl<R: Read> TraceReader<R> {
    /// Reads and checks the header.
    pub fn open(mut input: R) -> Result<TraceReader<R>, ReadError> {
        let mut head = [0u8; 20];
        let n = read_full(&mut input, &mut head).map_err(ReadError::Io)?;
        if n < 8 || &head[..8] != MAGIC {
            return Err(ReadError::NotATrace);
        }
        if n < 20 {
            return Err(ReadError::Header(format!("file ends after {n} bytes")));
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if version != VERSION {
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
            payload: Vec::new(),
            meta,
            offset: 20 + u64::from(len),
            damage: None,
            done: false,
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
        if self.done {
            return Ok(None);
        }
        let start = self.offset;
        let mut head = [0u8; 12];
        let n = read_full(&mut self.input, &mut head).map_err(ReadError::Io)?;
        if n == 0 {
            self.done = true;
            return Ok(None);
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
        let mut payload = std::mem::take(&mut self.payload);
        payload.resize(len as usize, 0);
        let got = read_full(&mut self.input, &mut payload).map_err(ReadError::Io)?;
        let result = self.parse_frame(start, kind, len, crc, got, &payload);
        self.payload = payload;
        result
    }

    fn parse_frame(
        &mut self,
        start: u64,
        kind: u8,
        len: u32,
        crc: u32,
        got: usize,
        payload: &[u8],
    ) -> Result<Option<Frame>, ReadError> {
        if got < payload.len() {
            return self.damaged(
                start,
                format!("frame truncated ({got} of {len} payload bytes): the writer was stopped mid-frame"),
            );
        }
        if crc32fast::hash(payload) != crc {
            return self.damaged(start, "frame checksum mismatch".to_string());
        }
        self.offset += 12 + u64::from(len);
        let frame = match kind {
            FRAME_CHUNK => match self.decoder.decode(payload) {
                Ok(c) => Frame::Chunk(c),
                Err(e) => return self.damaged(start, chunk_reason(&e)),
            },
            FRAME_MAPPINGS => match serde_json::from_slice(payload) {
                Ok(m) => Frame::Mappings(m),
                Err(e) => return self.damaged(start, format!("mappings frame: {e}")),
            },
            FRAME_NOTE => match serde_json::from_slice(payload) {
                Ok(s) => Frame::Note(s),
                Err(e) => return self.damaged(start, format!("note frame: {e}")),
            },
            FRAME_END => match serde_json::from_slice(payload) {
                Ok(e) => Frame::End(e),
                Err(e) => return self.damaged(start, format!("end frame: {e}")),
            },
            other => return self.damaged(start, format!("unknown frame kind {other}")),
        };
        Ok(Some(frame))
    }

    fn damaged(&mut self, offset: u64, reason: String) -> Result<Option<Frame>, ReadError> {
        self.damage = Some(Damage { offset, reason });
        self.done = true;
        Ok(None)
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
