//! Importers: traces recorded by other tools, converted into mgbench traces.
//!
//! - `gspin`: the gs_patterns / DynamoRIO memtrace record stream: packed 12-byte records
//!   `u16 type, u16 size, u64 addr` (little endian), optionally gzip-compressed. Type 0 is a
//!   read, 1 a write; types 0xa..=0x10 and 0x1e are instruction records whose address is the
//!   pc of the accesses that follow; other types are ignored.
//! - `lackey`: Valgrind `--tool=lackey --trace-mem=yes` output: `I  addr,size`, ` L addr,size`,
//!   ` S addr,size`, ` M addr,size` (modify: a load and a store), hex without 0x; `==pid==`
//!   lines are skipped.
//! - `memgaze`: MemGaze text traces, one access per line: `ip addr cpu time sample [dso]`;
//!   the cpu becomes the thread and consecutive lines with one sample id form a sample.
//!
//! All importers stream: input is read in pieces and written out in chunks.

mod gspin;
mod lackey;
mod memgaze;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};

use crate::trace::{Access, Chunk, Mode, SampleHeader, TraceMeta, TraceWriter};

pub use gspin::import_gspin;
pub use lackey::import_lackey;
pub use memgaze::import_memgaze;

/// The formats `mgbench import --from` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportKind {
    Gspin,
    Lackey,
    Memgaze,
}

impl ImportKind {
    pub fn parse(s: &str) -> Option<ImportKind> {
        match s.to_ascii_lowercase().as_str() {
            "gspin" | "gs_patterns" | "dynamorio" => Some(ImportKind::Gspin),
            "lackey" | "valgrind" => Some(ImportKind::Lackey),
            "memgaze" => Some(ImportKind::Memgaze),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ImportKind::Gspin => "gspin",
            ImportKind::Lackey => "lackey",
            ImportKind::Memgaze => "memgaze",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read input: {0}")]
    Io(#[source] io::Error),
    #[error("cannot write trace: {0}")]
    Write(#[source] io::Error),
    #[error("line {line}: {what}")]
    Parse { line: u64, what: String },
    /// A binary input's record (gs_patterns' pin traces have no lines).
    #[error("byte {offset}: {what}")]
    Record { offset: u64, what: String },
    #[error("input holds no memory accesses")]
    Empty,
}

/// What an import produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    pub accesses: u64,
    pub threads: usize,
    pub samples: u64,
    /// Input records or lines that were not accesses and were skipped, by description.
    pub ignored: BTreeMap<String, u64>,
    /// Files the input says where they were loaded (Valgrind's `-v -v` log): their code is
    /// named.
    pub located: Vec<String>,
    /// Files it names that could not be read here, and why: their code stays unnamed.
    pub unreadable: Vec<(String, String)>,
}

/// Opens `input` for reading, transparently decompressing gzip (detected by its magic).
pub fn maybe_gunzip<'a, R: Read + 'a>(input: R) -> io::Result<Box<dyn BufRead + 'a>> {
    let mut buf = BufReader::with_capacity(1 << 20, input);
    let head = buf.fill_buf()?;
    if head.len() >= 2 && head[0] == 0x1f && head[1] == 0x8b {
        Ok(Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::bufread::MultiGzDecoder::new(buf),
        )))
    } else {
        Ok(Box::new(buf))
    }
}

/// Runs the importer for `kind`.
pub fn import<W: Write>(
    kind: ImportKind,
    input: impl Read,
    writer: &mut TraceWriter<W>,
) -> Result<ImportSummary, ImportError> {
    let input = maybe_gunzip(input).map_err(ImportError::Io)?;
    match kind {
        ImportKind::Gspin => import_gspin(input, writer),
        ImportKind::Lackey => import_lackey(input, writer),
        ImportKind::Memgaze => import_memgaze(input, writer),
    }
}

/// Metadata for an imported trace.
pub fn import_meta(kind: ImportKind, source: &str, mode: Mode) -> TraceMeta {
    TraceMeta {
        command: vec![source.to_string()],
        backend: format!("import:{}", kind.name()),
        mode,
        start_time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        roi: None,
        notes: vec![],
    }
}

/// An ELF file as a loader maps it: what an imported trace needs to name the code it ran
/// (other tools' traces carry addresses, not the files mapped there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfLoad {
    pub path: String,
    /// Position-independent (a PIE or a shared library): loaded at an address chosen at run
    /// time, which the trace's tool must say.
    pub pie: bool,
    /// Link address of the file's first page (the segment at file offset 0).
    pub first_page: u64,
    /// (link address, size in memory, file offset, permissions) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64, String)>,
}

const PAGE: u64 = 4096;

impl ElfLoad {
    /// Reads the program headers of the ELF file at `path`.
    pub fn read(path: &std::path::Path) -> Result<ElfLoad, String> {
        use object::read::{Object, ObjectSegment};
        // Only the headers are read, not the whole file (a library can be 100 MB).
        let data = object::read::ReadCache::new(
            std::fs::File::open(path).map_err(|e| format!("cannot be read ({e})"))?,
        );
        let file = object::File::parse(&data)
            .map_err(|e| format!("is not an ELF file this machine can read ({e})"))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(format!("is not an ELF file (it is {:?})", file.format()));
        }
        let mut segments = Vec::new();
        for seg in file.segments() {
            let object::SegmentFlags::Elf { p_flags, .. } = seg.flags() else {
                continue;
            };
            let perms = format!(
                "{}{}{}p",
                if p_flags.contains(object::elf::PF_R) {
                    'r'
                } else {
                    '-'
                },
                if p_flags.contains(object::elf::PF_W) {
                    'w'
                } else {
                    '-'
                },
                if p_flags.contains(object::elf::PF_X) {
                    'x'
                } else {
                    '-'
                },
            );
            segments.push((seg.address(), seg.size(), seg.file_range().0, perms));
        }
        if segments.is_empty() {
            return Err("has no loadable segment".into());
        }
        let first_page = segments
            .iter()
            .filter(|s| s.2 < PAGE)
            .map(|s| s.0 / PAGE * PAGE)
            .min()
            .unwrap_or(segments[0].0 / PAGE * PAGE);
        let path = std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string();
        Ok(ElfLoad {
            path,
            pie: file.kind() == object::ObjectKind::Dynamic,
            first_page,
            segments,
        })
    }

    /// Its mappings when its first page was mapped at `start`, page-aligned as the kernel
    /// maps each segment.
    pub fn mappings(&self, start: u64) -> Vec<crate::trace::Mapping> {
        let bias = start.wrapping_sub(self.first_page);
        self.segments
            .iter()
            .map(|(vaddr, size, offset, perms)| {
                let lo = vaddr / PAGE * PAGE;
                crate::trace::Mapping {
                    start: lo.wrapping_add(bias),
                    end: ((vaddr + size).div_ceil(PAGE) * PAGE).wrapping_add(bias),
                    offset: offset / PAGE * PAGE,
                    path: self.path.clone(),
                    perms: perms.clone(),
                }
            })
            .collect()
    }
}

/// Accesses per chunk written by importers.
const CHUNK_ACCESSES: usize = 1 << 16;

/// Collects accesses per thread and writes a chunk whenever one fills up. Samples are
/// delimited by the caller (`end_sample`); full traces use one sample per chunk.
pub(crate) struct ChunkBuilder {
    open: BTreeMap<u32, Chunk>,
    /// Accesses in the current (unfinished) sample of each thread, and its id and skip.
    current: BTreeMap<u32, (u64, u64, u32)>,
    next_sample: BTreeMap<u32, u64>,
    /// The sample of each thread last counted in `summary.samples`: a sample counts once it
    /// holds an access (a timed window opened as the program ended held none, and made the
    /// count one more than the trace's).
    counted: BTreeMap<u32, u64>,
    pub summary: ImportSummary,
}

impl ChunkBuilder {
    pub fn new() -> ChunkBuilder {
        ChunkBuilder {
            open: BTreeMap::new(),
            current: BTreeMap::new(),
            next_sample: BTreeMap::new(),
            counted: BTreeMap::new(),
            summary: ImportSummary::default(),
        }
    }

    /// Adds an access to `thread`'s current sample (opening one if needed).
    pub fn push<W: Write>(
        &mut self,
        thread: u32,
        access: Access,
        w: &mut TraceWriter<W>,
    ) -> Result<(), ImportError> {
        if !self.current.contains_key(&thread) {
            self.start_sample(thread, None, 0);
        }
        let chunk = self.open.entry(thread).or_insert_with(|| Chunk {
            thread,
            ..Chunk::default()
        });
        chunk.accesses.push(access);
        if let Some(cur) = self.current.get_mut(&thread) {
            // A part's first access (a sample goes on in parts across chunks).
            if cur.2 == 0 && self.counted.insert(thread, cur.0) != Some(cur.0) {
                self.summary.samples += 1;
            }
            cur.2 += 1;
        }
        self.summary.accesses += 1;
        if chunk.accesses.len() >= CHUNK_ACCESSES {
            // Close the sample part that is in this chunk; it continues in the next one
            // with the same id and no skip.
            self.close_sample_part(thread);
            self.flush_thread(thread, w)?;
            if let Some(cur) = self.current.get_mut(&thread) {
                cur.1 = 0;
            }
        }
        Ok(())
    }

    /// Starts a new sample for `thread` with an explicit id (or the next one) and skip count.
    pub fn start_sample(&mut self, thread: u32, id: Option<u64>, skipped_before: u64) {
        self.close_sample_part(thread);
        self.current.remove(&thread);
        let next = self.next_sample.entry(thread).or_insert(0);
        let id = id.unwrap_or(*next);
        *next = id + 1;
        self.current.insert(thread, (id, skipped_before, 0));
    }

    fn close_sample_part(&mut self, thread: u32) {
        if let Some(&(id, skipped, len)) = self.current.get(&thread) {
            if len > 0 {
                let chunk = self.open.entry(thread).or_insert_with(|| Chunk {
                    thread,
                    ..Chunk::default()
                });
                chunk.samples.push(SampleHeader {
                    id,
                    skipped_before: skipped,
                    len,
                });
            }
            self.current.insert(thread, (id, skipped, 0));
        }
    }

    fn flush_thread<W: Write>(
        &mut self,
        thread: u32,
        w: &mut TraceWriter<W>,
    ) -> Result<(), ImportError> {
        if let Some(chunk) = self.open.remove(&thread) {
            if !chunk.accesses.is_empty() {
                w.write_chunk(&chunk).map_err(ImportError::Write)?;
            }
        }
        Ok(())
    }

    /// Writes every thread's open chunk now (the samples in them continue in the next
    /// chunks with the same ids), so that a writer killed later loses none of it.
    #[cfg(any(feature = "backends", test))]
    pub fn write_open<W: Write>(&mut self, w: &mut TraceWriter<W>) -> Result<(), ImportError> {
        let threads: Vec<u32> = self.open.keys().copied().collect();
        for t in threads {
            self.close_sample_part(t);
            self.flush_thread(t, w)?;
            if let Some(cur) = self.current.get_mut(&t) {
                cur.1 = 0;
            }
        }
        Ok(())
    }

    pub fn ignore(&mut self, what: &str) {
        *self.summary.ignored.entry(what.to_string()).or_insert(0) += 1;
    }

    /// Writes everything still open and returns the summary.
    pub fn finish<W: Write>(
        mut self,
        w: &mut TraceWriter<W>,
    ) -> Result<ImportSummary, ImportError> {
        let threads: Vec<u32> = self.open.keys().copied().collect();
        for t in threads
            .iter()
            .copied()
            .chain(self.current.keys().copied().collect::<Vec<_>>())
        {
            self.close_sample_part(t);
            self.flush_thread(t, w)?;
        }
        let mut seen: Vec<u32> = self.next_sample.keys().copied().collect();
        seen.dedup();
        self.summary.threads = seen.len();
        if self.summary.accesses == 0 {
            return Err(ImportError::Empty);
        }
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{AccessKind, Frame, TraceReader};

    fn access(i: u64) -> Access {
        Access {
            ip: 0x1000 + i,
            addr: 0x8000 + 8 * i,
            size: 8,
            kind: AccessKind::Load,
        }
    }

    /// What the ptrace backend writes every second: the open chunks, with the samples in them
    /// going on in the next chunks under the same ids and no skip.
    #[test]
    fn open_chunks_written_early_continue_their_samples() {
        let meta = import_meta(ImportKind::Lackey, "test", Mode::Full);
        let mut w = TraceWriter::create(Vec::new(), &meta).unwrap();
        let mut b = ChunkBuilder::new();
        b.start_sample(0, Some(7), 100);
        b.start_sample(1, Some(3), 0);
        for i in 0..10 {
            b.push(0, access(i), &mut w).unwrap();
        }
        b.push(1, access(50), &mut w).unwrap();
        b.write_open(&mut w).unwrap();
        for i in 10..15 {
            b.push(0, access(i), &mut w).unwrap();
        }
        b.start_sample(0, None, 40);
        for i in 15..18 {
            b.push(0, access(i), &mut w).unwrap();
        }
        // A window opened as the program ended holds nothing, and counts as no sample.
        b.start_sample(1, None, 0);
        let summary = b.finish(&mut w).unwrap();
        assert_eq!(summary.accesses, 19);
        // Samples 7 (in two parts) and 8 of thread 0, and 3 of thread 1.
        assert_eq!(summary.samples, 3);
        let bytes = w.into_inner();
        let mut r = TraceReader::open(std::io::Cursor::new(bytes)).unwrap();
        let mut chunks = Vec::new();
        while let Some(frame) = r.next_frame().unwrap() {
            if let Frame::Chunk(c) = frame {
                chunks.push(c);
            }
        }
        let parts: Vec<(u32, Vec<SampleHeader>, usize)> = chunks
            .iter()
            .map(|c| (c.thread, c.samples.clone(), c.accesses.len()))
            .collect();
        let sample = |id, skipped_before, len| SampleHeader {
            id,
            skipped_before,
            len,
        };
        assert_eq!(
            parts,
            vec![
                (0, vec![sample(7, 100, 10)], 10),
                (1, vec![sample(3, 0, 1)], 1),
                (0, vec![sample(7, 0, 5), sample(8, 40, 3)], 8),
            ]
        );
        let addrs: Vec<u64> = chunks
            .iter()
            .filter(|c| c.thread == 0)
            .flat_map(|c| c.accesses.iter().map(|a| a.addr))
            .collect();
        assert_eq!(addrs, (0..18).map(|i| 0x8000 + 8 * i).collect::<Vec<_>>());
    }
}
