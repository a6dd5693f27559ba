//! Streaming trace writer: a header, then one frame per call; nothing is held back.

use std::io::{self, Write};

use super::codec::ChunkEncoder;
use super::{Access, Chunk, EndInfo, JitSymbol, Mapping, SampleHeader, TraceMeta, MAGIC, VERSION};

/// Frame kinds (see capture/README.md).
pub(crate) const FRAME_MAPPINGS: u8 = 1;
/// A chunk in format 1's interleaved layout (read, no longer written).
pub(crate) const FRAME_CHUNK: u8 = 2;
pub(crate) const FRAME_END: u8 = 3;
pub(crate) const FRAME_NOTE: u8 = 4;
/// A chunk in columns (format 2).
pub(crate) const FRAME_COLUMNS: u8 = 5;
/// Names of JIT-compiled code (a runtime's perf map).
pub(crate) const FRAME_JIT: u8 = 6;
pub(crate) const FRAME_MAGIC: [u8; 2] = *b"MF";
/// Largest frame payload accepted by readers.
pub(crate) const MAX_FRAME: u32 = 256 << 20;

/// zstd level for chunks: fast enough to keep up with a traced program.
pub const DEFAULT_LEVEL: i32 = 1;

/// Writes a trace to any `Write`, frame by frame.
pub struct TraceWriter<W: Write> {
    out: W,
    encoder: ChunkEncoder,
    /// Frame being assembled (header + payload), reused between frames.
    frame_buf: Vec<u8>,
    payload: Vec<u8>,
    recorded: u64,
    skipped: u64,
    bytes: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header and returns the writer.
    pub fn create(mut out: W, meta: &TraceMeta) -> io::Result<TraceWriter<W>> {
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        let mut head = Vec::with_capacity(20 + json.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&(json.len() as u32).to_le_bytes());
        head.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
        head.extend_from_slice(&json);
        out.write_all(&head)?;
        let mut w = TraceWriter::append(out);
        w.bytes = head.len() as u64;
        Ok(w)
    }

    /// Appends frames to an existing trace (its header already written), e.g. to add the end
    /// frame after a backend's writer has finished.
    pub fn append(out: W) -> TraceWriter<W> {
        TraceWriter {
            out,
            encoder: ChunkEncoder::new(DEFAULT_LEVEL),
            frame_buf: Vec::new(),
            payload: Vec::new(),
            recorded: 0,
            skipped: 0,
            bytes: 0,
        }
    }

    /// Sets the zstd level for chunks written from now on.
    pub fn set_level(&mut self, level: i32) {
        self.encoder = ChunkEncoder::new(level);
    }

    /// Encodes and writes one chunk.
    pub fn write_chunk(&mut self, chunk: &Chunk) -> io::Result<()> {
        self.write_accesses(
            chunk.thread,
            &chunk.samples,
            chunk.accesses.iter().copied(),
            chunk.accesses.len(),
        )
    }

    /// Encodes and writes one thread's `n` accesses without materialising a [`Chunk`].
    pub fn write_accesses<I: IntoIterator<Item = Access>>(
        &mut self,
        thread: u32,
        samples: &[SampleHeader],
        accesses: I,
        n: usize,
    ) -> io::Result<()> {
        let mut payload = std::mem::take(&mut self.payload);
        self.encoder
            .encode_into(thread, samples, accesses, n, &mut payload);
        let r = self.frame(FRAME_COLUMNS, &payload);
        self.payload = payload;
        r?;
        self.recorded += n as u64;
        self.skipped += samples.iter().map(|s| s.skipped_before).sum::<u64>();
        Ok(())
    }

    /// Writes a frame another writer encoded (into memory, see [`TraceWriter::get_mut`]), as
    /// is: for writers that encode chunks on several threads and write them in order.
    pub fn write_encoded(&mut self, frame: &[u8]) -> io::Result<()> {
        self.out.write_all(frame)?;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    /// The output (for a writer into memory: take the frames it encoded).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes the process's mappings (a full snapshot; readers use the union).
    pub fn write_mappings(&mut self, mappings: &[Mapping]) -> io::Result<()> {
        let json = serde_json::to_vec(mappings).map_err(io::Error::other)?;
        self.frame(FRAME_MAPPINGS, &json)
    }

    /// Writes the names of code a JIT compiler wrote (from the runtime's perf map).
    pub fn write_jit_symbols(&mut self, symbols: &[JitSymbol]) -> io::Result<()> {
        let json = serde_json::to_vec(symbols).map_err(io::Error::other)?;
        self.frame(FRAME_JIT, &json)
    }

    /// Writes a free-form note (a warning or error met while capturing).
    pub fn write_note(&mut self, note: &str) -> io::Result<()> {
        let json = serde_json::to_vec(note).map_err(io::Error::other)?;
        self.frame(FRAME_NOTE, &json)
    }

    /// Writes the end frame and flushes.
    pub fn write_end(&mut self, end: &EndInfo) -> io::Result<()> {
        let json = serde_json::to_vec(end).map_err(io::Error::other)?;
        self.frame(FRAME_END, &json)?;
        self.out.flush()
    }

    /// Accesses and skipped accesses written so far by this writer.
    pub fn counts(&self) -> (u64, u64) {
        (self.recorded, self.skipped)
    }

    /// Bytes written so far by this writer.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn frame(&mut self, kind: u8, payload: &[u8]) -> io::Result<()> {
        if payload.len() as u64 > u64::from(MAX_FRAME) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame of {} bytes exceeds the format's limit",
                    payload.len()
                ),
            ));
        }
        let mut head = [0u8; 12];
        head[0..2].copy_from_slice(&FRAME_MAGIC);
        head[2] = kind;
        head[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        head[8..12].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        // One buffer, one write: a kill between header and payload is still possible, and
        // readers detect it by length and CRC.
        let buf = &mut self.frame_buf;
        buf.clear();
        buf.extend_from_slice(&head);
        buf.extend_from_slice(payload);
        self.out.write_all(buf)?;
        self.bytes += buf.len() as u64;
        Ok(())
    }
}
