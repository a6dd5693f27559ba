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
pub use reader::{
    read_end_info, read_jit_symbols, Damage, Frame, RawFrame, ReadError, TraceReader,
};
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

    /// Each sample window with its accesses, in order. (A chunk read from a trace is
    /// consistent; in one that is not, a window is cut short at the last access and
    /// accesses past the windows are left out.)
    pub fn windows(&self) -> impl Iterator<Item = (&SampleHeader, &[Access])> {
        let mut at = 0usize;
        self.samples.iter().map(move |s| {
            let start = at.min(self.accesses.len());
            at = at.saturating_add(s.len as usize);
            (s, &self.accesses[start..at.min(self.accesses.len())])
        })
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
    /// Where the file at `path` is mapped from its first byte (file offset 0): an ELF file's
    /// load bias is that start minus the link address of its offset 0.
    pub fn file_starts<'a>(maps: &'a [Mapping], path: &'a str) -> impl Iterator<Item = u64> + 'a {
        maps.iter()
            .filter(move |m| m.offset == 0 && m.path == path)
            .map(|m| m.start)
    }

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

    /// Names the guest's main stack `[stack]` in the mappings of a QEMU user-mode process
    /// (`maps` in address order, as /proc lists them). QEMU maps that stack as anonymous
    /// memory, `stack_size` bytes (its `guest_stack_size`) above a guard page it makes
    /// inaccessible, before the program's first thread runs: the lowest inaccessible anonymous
    /// mapping followed at once by at least `stack_size` bytes of anonymous read-write memory.
    /// Where the kernel merged more anonymous memory into that mapping, only the first
    /// `stack_size` bytes are named, the rest is split off. Returns whether a stack was found.
    pub fn name_qemu_guest_stack(maps: &mut Vec<Mapping>, stack_size: u64) -> bool {
        if stack_size == 0 {
            return false;
        }
        let found = maps.windows(2).position(|w| {
            let (guard, stack) = (&w[0], &w[1]);
            guard.path.is_empty()
                && guard.perms.starts_with("---")
                && guard.end == stack.start
                && stack.path.is_empty()
                && stack.perms.starts_with("rw")
                && stack.end - stack.start >= stack_size
        });
        let Some(i) = found.map(|i| i + 1) else {
            return false;
        };
        let end = maps[i].start + stack_size;
        if maps[i].end > end {
            let rest = Mapping {
                start: end,
                ..maps[i].clone()
            };
            maps.insert(i + 1, rest);
        }
        maps[i].end = end;
        maps[i].path = GUEST_STACK.to_string();
        true
    }

    /// The stack of a thread with stack pointer `sp`, named [`THREAD_STACK`]: the anonymous
    /// read-write mapping that holds the bytes just below `sp`, from its start (its guard
    /// page, inaccessible, lies at once below: the stack's end, and what keeps the kernel
    /// from merging the stack with older memory there) to the page that holds `sp` where the
    /// thread starts there (`first`): what lies above (the thread's TLS and descriptor, or
    /// memory merged into the mapping) is not named. For a thread already running (a process
    /// attached to), its frames lie above `sp` too: the whole mapping is named. `None` where
    /// no such guarded mapping holds `sp - 1`.
    pub fn thread_stack(maps: &[Mapping], sp: u64, first: bool) -> Option<Mapping> {
        const PAGE: u64 = 4096;
        let below = sp.checked_sub(1)?;
        let i = maps
            .iter()
            .position(|m| m.start <= below && below < m.end)?;
        let (m, guard) = (&maps[i], maps.get(i.checked_sub(1)?)?);
        let guarded =
            guard.path.is_empty() && guard.perms.starts_with("---") && guard.end == m.start;
        if !(guarded && m.path.is_empty() && m.perms.starts_with("rw")) {
            return None;
        }
        let end = if first {
            ((below / PAGE + 1) * PAGE).min(m.end)
        } else {
            m.end
        };
        Some(Mapping {
            end,
            path: THREAD_STACK.to_string(),
            ..m.clone()
        })
    }

    /// The union of mappings frames as one list without overlaps, in address order: a trace
    /// holds a mapping again when it changed (a heap that grew) or when the capture named
    /// part of it (a thread's stack inside anonymous memory). Where mappings overlap, the
    /// narrowest holds the bytes (of copies of one range, the latest with a name, else the
    /// latest: a capture that names a whole mapping may list it again unnamed); a mapping cut in pieces
    /// by a narrower one keeps its name in each, with offsets that follow, and pieces of the
    /// same memory that touch are one.
    pub fn flatten(maps: &[Mapping]) -> Vec<Mapping> {
        let mut maps: Vec<&Mapping> = maps.iter().filter(|m| m.start < m.end).collect();
        // Later copies first, so that the stable sort and dedup keep the latest of equals
        // (named ones before anonymous ones).
        maps.reverse();
        maps.sort_by_key(|m| (m.start, m.end, m.path.is_empty()));
        maps.dedup_by(|a, b| a.start == b.start && a.end == b.end);
        let mut bounds: Vec<u64> = maps.iter().flat_map(|m| [m.start, m.end]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut out: Vec<Mapping> = Vec::new();
        let mut first = 0;
        for w in bounds.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            // Mappings sorted by start: those starting at or before lo; skip the ones ended.
            while first < maps.len() && maps[first].end <= lo {
                first += 1;
            }
            let owner = maps[first..]
                .iter()
                .take_while(|m| m.start <= lo)
                .filter(|m| hi <= m.end)
                .min_by_key(|m| m.end - m.start);
            let Some(&m) = owner else {
                continue;
            };
            let offset = m.offset + (lo - m.start);
            // The same memory goes on (one mapping, or two copies of a grown one): one piece.
            match out.last_mut() {
                Some(last)
                    if last.end == lo
                        && last.path == m.path
                        && last.perms == m.perms
                        && last.offset + (lo - last.start) == offset =>
                {
                    last.end = hi
                }
                _ => out.push(Mapping {
                    start: lo,
                    end: hi,
                    offset,
                    ..m.clone()
                }),
            }
        }
        out
    }
}

/// A name for code that a JIT compiler wrote into anonymous memory, from the perf map the
/// runtime keeps (`/tmp/perf-PID.map`: `node --perf-basic-prof`, Julia's
/// `ENABLE_JITPROFILING=1`, Python 3.12's `-X perf`, Java's `-XX:+DumpPerfMapAtExit`), which is what
/// `perf` reads for the same purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JitSymbol {
    pub start: u64,
    /// In bytes (at least 1).
    pub size: u64,
    pub name: String,
}

impl JitSymbol {
    /// Parses a perf map: one `START SIZE NAME` per line, START and SIZE in hex (with or
    /// without `0x`), NAME the rest of the line (it may hold spaces). Lines that do not
    /// parse are skipped; a symbol listed again (code that moved or was compiled again at
    /// the same place) keeps its latest name.
    pub fn parse_perf_map(text: &str) -> Vec<JitSymbol> {
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let mut out: Vec<JitSymbol> = text
            .lines()
            .filter_map(|line| {
                let mut f = line.trim().splitn(3, char::is_whitespace);
                let start = hex(f.next()?)?;
                let size = hex(f.next()?)?;
                let name = f.next()?.trim();
                (size > 0 && !name.is_empty() && start.checked_add(size).is_some()).then(|| {
                    JitSymbol {
                        start,
                        size,
                        name: name.to_string(),
                    }
                })
            })
            .collect();
        // Latest first among equal starts, then one per start.
        out.reverse();
        out.sort_by_key(|s| s.start);
        out.dedup_by_key(|s| s.start);
        out
    }

    /// The symbol of `syms` (sorted by start, as [`JitSymbol::parse_perf_map`] gives them)
    /// whose bytes hold `ip`: of overlapping ones, the one starting last.
    pub fn find(syms: &[JitSymbol], ip: u64) -> Option<&JitSymbol> {
        let n = syms.partition_point(|s| s.start <= ip);
        syms[..n]
            .iter()
            .rev()
            .take(64)
            .find(|s| ip - s.start < s.size)
    }
}

/// Whether a mapping named `path` is a stack: the main thread's ([`GUEST_STACK`], as the
/// kernel names it) or another thread's ([`THREAD_STACK`], named by the capture).
pub fn is_stack(path: &str) -> bool {
    path == GUEST_STACK || path == THREAD_STACK
}

/// What a capture says of the `n` child processes (fork) its program started: they ran as
/// `ran` says, outside the trace. The warning names what to do; the trace's note (`for_trace`)
/// stops at the fact.
pub fn children_note(n: u64, ran: &str, for_trace: bool) -> String {
    let fact = format!(
        "the program started {n} child process(es) (fork): {ran}, and their accesses are not in the trace"
    );
    if for_trace {
        return fact;
    }
    // A child that runs another program can be captured apart; one that goes on in the
    // program's own code after fork (stress-ng's workers, Python's multiprocessing) cannot.
    format!(
        "{fact}; a capture follows one process: a child that runs another program (exec) can \
         be captured on its own (mgbench capture -- PROGRAM ...), but a worker that goes on in \
         this program's code after fork cannot (run that work in threads or in the first \
         process, where the program has a setting for it)"
    )
}

/// How a `qemu` capture's children ran (see [`children_note`]).
pub const QEMU_CHILDREN_RAN: &str = "QEMU ran each in a copy of itself";

/// The name of a main stack's mapping in /proc/PID/maps.
pub const GUEST_STACK: &str = "[stack]";

/// The name a capture gives a thread's stack (the kernel names none): see
/// [`Mapping::thread_stack`].
pub const THREAD_STACK: &str = "[thread stack]";

/// Why a timed trace's sample ratio is unknown (see [`Mode::unknown_ratio`]).
pub const TIME_SAMPLED: &str = "time-sampled";
/// Why an imported sampled trace's is (its format keeps no skipped counts).
pub const NO_SKIPPED_COUNTS: &str = "the trace holds no skipped counts";

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
    /// Why the skipped accesses, and so the sample ratio, are unknown; `None` where they are
    /// counted (full traces, and samples that record what they skipped).
    pub fn unknown_ratio(&self) -> Option<&'static str> {
        match self {
            Mode::Full => None,
            Mode::Timed { .. } => Some(TIME_SAMPLED),
            // Samples without a period: imported MemGaze text, which keeps sample ids only.
            Mode::Sampled { period: 0, .. } => Some(NO_SKIPPED_COUNTS),
            Mode::Sampled { .. } => None,
        }
    }

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
    use super::{Access, AccessKind, Chunk, JitSymbol, Mapping, SampleHeader};

    #[test]
    fn perf_maps_parse_with_spaces_in_names_and_junk_skipped() {
        let text = "\
7f222c005b80 410 JS:^ /tmp/u52/g.js:1:1
0x7f222c006480 3b8 JS:* /tmp/u52/g.js:1:1
7f222c006480 3b8 JS:* /tmp/u52/g.js:1:1 (again)
not a line
7f222c007000 0 empty
18c4000 300 Builtin:DeoptimizationEntry_Eager
";
        let s = JitSymbol::parse_perf_map(text);
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Builtin:DeoptimizationEntry_Eager",
                "JS:^ /tmp/u52/g.js:1:1",
                "JS:* /tmp/u52/g.js:1:1 (again)"
            ]
        );
        assert_eq!((s[2].start, s[2].size), (0x7f222c006480, 0x3b8));
        let at = |ip| JitSymbol::find(&s, ip).map(|s| s.name.as_str());
        assert_eq!(at(0x7f222c005b80), Some("JS:^ /tmp/u52/g.js:1:1"));
        assert_eq!(at(0x7f222c005b80 + 0x40f), Some("JS:^ /tmp/u52/g.js:1:1"));
        assert_eq!(at(0x7f222c005b80 + 0x410), None);
        assert_eq!(
            at(0x7f222c006480 + 0x3b7),
            Some("JS:* /tmp/u52/g.js:1:1 (again)")
        );
        assert_eq!(at(0x100), None);
    }

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

    /// QEMU 7.2 running Debian's `sleep` (its own mappings from 55cf... on left out).
    const QEMU_MAPS: &str = "\
4000000000-4000009000 r--p 00000000 fe:00 247774                         /usr/bin/sleep
400000b000-400002c000 rw-p 00000000 00:00 0 
400200b000-400200c000 ---p 00000000 00:00 0 
400200c000-400280c000 rw-p 00000000 00:00 0 
400280c000-400283d000 r--p 00000000 fe:00 325843                         /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
4002841000-4002843000 rw-p 00000000 00:00 0 
4002a25000-4002a26000 ---p 00000000 00:00 0 
4002a26000-4003226000 rw-p 00000000 00:00 0 
7ffc8a1e0000-7ffc8a201000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn the_guest_stack_is_the_first_guarded_anonymous_mapping_of_its_size() {
        let mut m = Mapping::parse_proc_maps(QEMU_MAPS);
        let n = m.len();
        assert!(Mapping::name_qemu_guest_stack(&mut m, 8 << 20));
        assert_eq!(m.len(), n);
        let named: Vec<(u64, u64)> = m
            .iter()
            .filter(|m| m.path == super::GUEST_STACK)
            .map(|m| (m.start, m.end))
            .collect();
        // The guest's (not the guarded one above it, a thread's), and QEMU's own.
        assert_eq!(
            named,
            [
                (0x400200c000, 0x400280c000),
                (0x7ffc8a1e0000, 0x7ffc8a201000)
            ]
        );
        // Anonymous memory merged into it is split off, and stays anonymous.
        let mut m = Mapping::parse_proc_maps(QEMU_MAPS);
        m[3].end += 0x5000;
        m.remove(4);
        assert!(Mapping::name_qemu_guest_stack(&mut m, 8 << 20));
        assert_eq!(
            (m[3].start, m[3].end, m[3].path.as_str()),
            (0x400200c000, 0x400280c000, "[stack]")
        );
        assert_eq!(
            (m[4].start, m[4].end, m[4].path.as_str()),
            (0x400280c000, 0x4002811000, "")
        );
        // No guarded mapping that large (another stack size): nothing is named.
        let mut m = Mapping::parse_proc_maps(QEMU_MAPS);
        assert!(!Mapping::name_qemu_guest_stack(&mut m, 16 << 20));
        assert_eq!(m, Mapping::parse_proc_maps(QEMU_MAPS));
    }

    #[test]
    fn a_thread_stack_runs_from_its_guard_to_the_page_of_its_first_stack_pointer() {
        let m = Mapping::parse_proc_maps(QEMU_MAPS);
        // glibc's layout: the descriptor and TLS above the first stack pointer stay unnamed.
        let t = Mapping::thread_stack(&m, 0x4003224f40, true).expect("a guarded stack");
        assert_eq!(
            (t.start, t.end, t.path.as_str(), t.perms.as_str()),
            (0x4002a26000, 0x4003225000, super::THREAD_STACK, "rw-p")
        );
        // A page-aligned stack pointer: the stack ends there.
        let t = Mapping::thread_stack(&m, 0x4003225000, true).unwrap();
        assert_eq!(t.end, 0x4003225000);
        // A stack pointer at the mapping's very end.
        let t = Mapping::thread_stack(&m, 0x4003226000, true).unwrap();
        assert_eq!(t.end, 0x4003226000);
        // A running thread (attached to): the whole mapping, its frames above `sp` with it.
        let t = Mapping::thread_stack(&m, 0x4002f00000, false).unwrap();
        assert_eq!((t.start, t.end), (0x4002a26000, 0x4003226000));
        // No guard below (the heap), a file, nothing mapped, no stack pointer: no stack.
        assert_eq!(Mapping::thread_stack(&m, 0x400002b000, true), None);
        assert_eq!(Mapping::thread_stack(&m, 0x4000008000, true), None);
        assert_eq!(Mapping::thread_stack(&m, 0x5000000000, true), None);
        assert_eq!(Mapping::thread_stack(&m, 0, true), None);
        assert!(super::is_stack(super::THREAD_STACK) && super::is_stack(super::GUEST_STACK));
        assert!(!super::is_stack("") && !super::is_stack("[heap]"));
    }

    #[test]
    fn flattened_mappings_give_each_byte_to_the_narrowest() {
        let map = |start: u64, end: u64, offset: u64, path: &str| Mapping {
            start,
            end,
            offset,
            path: path.into(),
            perms: "rw-p".into(),
        };
        let maps = [
            map(0x1000, 0x9000, 0, ""),
            map(0x20000, 0x30000, 0x5000, "/lib/a.so"),
            // The heap grew; a thread's stack named inside anonymous memory; the same range
            // again under a new name (the latest wins); a copy of a range.
            map(0x40000, 0x41000, 0, "[heap]"),
            map(0x40000, 0x48000, 0, "[heap]"),
            map(0x3000, 0x6000, 0, super::THREAD_STACK),
            map(0x20000, 0x30000, 0x5000, "/lib/b.so"),
            map(0x1000, 0x9000, 0, ""),
            // A whole mapping named, then listed again as the kernel lists it: the name stays.
            map(0x50000, 0x58000, 0, super::THREAD_STACK),
            map(0x50000, 0x58000, 0, ""),
        ];
        let flat = Mapping::flatten(&maps);
        let got: Vec<(u64, u64, u64, &str)> = flat
            .iter()
            .map(|m| (m.start, m.end, m.offset, m.path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (0x1000, 0x3000, 0, ""),
                (0x3000, 0x6000, 0, super::THREAD_STACK),
                (0x6000, 0x9000, 0x5000, ""),
                (0x20000, 0x30000, 0x5000, "/lib/b.so"),
                (0x40000, 0x48000, 0, "[heap]"),
                (0x50000, 0x58000, 0, super::THREAD_STACK),
            ]
        );
        assert!(Mapping::flatten(&[]).is_empty());
    }

    #[test]
    fn windows_split_a_chunk_by_its_samples() {
        let a = |ip: u64| Access {
            ip,
            addr: 0,
            size: 8,
            kind: AccessKind::Load,
        };
        let h = |id: u64, len: u32| SampleHeader {
            id,
            skipped_before: 0,
            len,
        };
        let c = Chunk {
            thread: 0,
            samples: vec![h(1, 2), h(2, 0), h(3, 1)],
            accesses: vec![a(1), a(2), a(3)],
        };
        let got: Vec<(u64, Vec<u64>)> = c
            .windows()
            .map(|(s, w)| (s.id, w.iter().map(|a| a.ip).collect()))
            .collect();
        assert_eq!(got, [(1, vec![1, 2]), (2, vec![]), (3, vec![3])]);
        // Headers that claim more than there is: cut short, no panic.
        let bad = Chunk {
            samples: vec![h(1, 2), h(2, 5)],
            ..c
        };
        let lens: Vec<usize> = bad.windows().map(|(_, w)| w.len()).collect();
        assert_eq!(lens, [2, 1]);
    }
}
