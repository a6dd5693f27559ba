//! The mgbench trace format: types, chunk codec, streaming writer and reader.
//!
//! This module has no operating-system dependencies, so `synth` and importers can use it
//! without the capture backends. The byte-level specification is in `capture/README.md`.
//!
//! A trace is a header (magic, version, JSON metadata: command line, backend, sampling
//! parameters, start time) followed by CRC-checked frames: mappings (for symbolization),
//! chunks of one thread's accesses grouped in samples, and an end frame. Every chunk is
//! self-contained (its delta state starts fresh and it is compressed on its own), so a reader
//! recovers every frame written before a crash, a kill or a full disk.
//!
//! Sampling follows MemGaze: a sample is `window` recorded accesses followed by unrecorded
//! ones; each sample stores how many accesses were skipped before it, so the sample ratio
//! rho = executed / recorded is known exactly.

mod codec;
pub mod parallel;
mod reader;
pub mod varint;
mod writer;

use serde::{Deserialize, Serialize};

pub use codec::{decode_chunk, encode_chunk, ChunkDecoder, ChunkEncoder, CodecError, Layout};
pub use reader::{read_end_info, Damage, Frame, RawFrame, ReadError, TraceReader};
pub use writer::{TraceWriter, DEFAULT_LEVEL};

/// File magic, first 8 bytes of every trace.
pub const MAGIC: &[u8; 8] = b"MGBTRACE";
/// Format version this code writes. Version 2 writes chunks in columns (frame kind 5) and
/// added the "next instruction" info bit; readers still read version 1.
pub const VERSION: u16 = 2;
/// Oldest format version readers accept.
pub const MIN_VERSION: u16 = 1;

/// Load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessKind {
    Load,
    Store,
}

impl AccessKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessKind::Load => "load",
            AccessKind::Store => "store",
        }
    }
}

/// One memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access {
    /// Address of the instruction.
    pub ip: u64,
    /// Address accessed.
    pub addr: u64,
    /// Bytes accessed (1..=255; vector lanes are recorded one access per element).
    pub size: u8,
    pub kind: AccessKind,
}

/// A sample: `len` consecutive recorded accesses of one thread, after `skipped_before`
/// accesses of that thread that were executed but not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleHeader {
    pub id: u64,
    pub skipped_before: u64,
    pub len: u32,
}

/// One thread's accesses, in program order, grouped in samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    pub thread: u32,
    pub samples: Vec<SampleHeader>,
    pub accesses: Vec<Access>,
}

impl Chunk {
    /// Checks that the samples account for exactly the accesses.
    pub fn is_consistent(&self) -> bool {
        self.samples.iter().map(|s| s.len as u64).sum::<u64>() == self.accesses.len() as u64
    }
}

/// A memory mapping of the traced process, for symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of the mapping's first byte.
    pub offset: u64,
    /// File path; empty for anonymous memory.
    pub path: String,
    /// "r-xp" style permissions.
    pub perms: String,
}

impl Mapping {
    /// Parses the text of `/proc/PID/maps` (lines that do not parse are skipped).
    pub fn parse_proc_maps(text: &str) -> Vec<Mapping> {
        text.lines()
            .filter_map(|line| {
                let mut f = line.split_whitespace();
                let range = f.next()?;
                let perms = f.next()?.to_string();
                let offset = u64::from_str_radix(f.next()?, 16).ok()?;
                let _dev = f.next()?;
                let _inode = f.next()?;
                let path = f.collect::<Vec<_>>().join(" ");
                let (s, e) = range.split_once('-')?;
                Some(Mapping {
                    start: u64::from_str_radix(s, 16).ok()?,
                    end: u64::from_str_radix(e, 16).ok()?,
                    offset,
                    path,
                    perms,
                })
            })
            .collect()
    }
}

/// How accesses were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Mode {
    /// Every access.
    Full,
    /// `window` accesses recorded every `period` accesses (per thread); a qemu capture starts
    /// each thread's first window at a random point of its first period.
    Sampled { window: u64, period: u64 },
    /// Windows of `window` accesses every `interval_ms` of native execution (ptrace); the
    /// accesses in between are not counted, so skipped counts are unknown (recorded as 0).
    Timed { window: u64, interval_ms: u64 },
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Sampled { .. } => "sampled",
            Mode::Timed { .. } => "timed",
        }
    }
}

/// Region of interest the trace was restricted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoiMeta {
    pub functions: Vec<String>,
    /// Whether accesses made by callees count ("inclusive") or only the function's own
    /// instructions ("exclusive").
    pub inclusive: bool,
}

/// The header's metadata (stored as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceMeta {
    /// Program and arguments.
    pub command: Vec<String>,
    /// "qemu", "ptrace", "import:gspin", ...
    pub backend: String,
    #[serde(flatten)]
    pub mode: Mode,
    /// Start of recording, UTC, RFC 3339.
    pub start_time: String,
    #[serde(default)]
    pub roi: Option<RoiMeta>,
    /// Free-form facts about the capture (tool versions, pid).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// What the end frame says about how the program and the capture ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndInfo {
    /// Exit status of the program, when it exited normally.
    pub exit_code: Option<i32>,
    /// Signal that ended the program.
    pub signal: Option<i32>,
    /// Capture stopped before the program ended (Ctrl-C, detach, disk full).
    pub interrupted: bool,
    /// Accesses recorded, as counted by the writer.
    pub recorded: u64,
    /// Accesses executed but not recorded (sampling), as counted by the writer.
    pub skipped: u64,
    /// Errors met while capturing (a full disk, lost frames).
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::Mapping;

    #[test]
    fn proc_maps_lines_parse_and_junk_is_skipped() {
        let text = "\
55d0c0a00000-55d0c0a21000 r-xp 00001000 fd:01 1234   /usr/bin/my app
7ffd1000-7ffd2000 rw-p 00000000 00:00 0 \n\
not a mapping line\n";
        let m = Mapping::parse_proc_maps(text);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0],
            Mapping {
                start: 0x55d0c0a00000,
                end: 0x55d0c0a21000,
                offset: 0x1000,
                path: "/usr/bin/my app".into(),
                perms: "r-xp".into(),
            }
        );
        assert_eq!((m[1].start, m[1].path.as_str()), (0x7ffd1000, ""));
    }
}
