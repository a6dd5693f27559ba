//! mgbench's QEMU user-mode plugin: records every memory access of the guest (or MemGaze-style
//! samples of them) into an mgbench trace.
//!
//! Loaded by `mgbench capture` as
//! `qemu-x86_64 -plugin libmgbench_qemu_plugin.so,out=TRACE,status=FILE[,spill=FILE,window=W,period=P]
//! [,roi=START:END,...,exe=PATH,exe_base=A,lib=PATH,lib_base=A,roi=...,roi_mode=inclusive|exclusive]
//! PROGRAM ARGS` (`roi=` and `inlined=` ranges after a `lib=` are that shared library's).
//! mgbench writes the trace header; the plugin appends frames; mgbench appends the end frame.
//!
//! Each guest thread is a QEMU vCPU with its own state: a slot of raw accesses and the
//! sampling counters. The memory callback does a few loads, a compare and two stores; when a
//! slot fills (64 Ki accesses) it goes to encoder threads (one per core, up to 8), which
//! encode and compress slots in parallel (each chunk is self-contained); a writer thread
//! appends the frames in the order the slots were queued. QEMU does not call plugin exit hooks when the guest dies from a signal or is
//! killed, so the slots live in a file shared with mgbench (`spill=PATH`, see `slots`), which
//! writes what they still hold: nothing recorded is lost.
//!
//! Sampling (MemGaze): each thread records `window` accesses, then skips `period - window`,
//! counting them, and so on. The first window starts at a random point of the thread's first
//! period (`first_skip`): a window at the first access would give start-up code (the dynamic
//! loader, initialisation) a whole window's weight. Skips of `switch::MIN_SKIP` and more are counted by generated
//! code instead of callbacks, and windows switched in by retranslation (`switch`).
//!
//! ROI: with exclusive mode only instructions inside the ROI ranges are instrumented;
//! inclusive mode counts calls into the ranges (entry executions minus `ret` executions inside
//! them) and records while that depth is positive, so callees count.

mod fds;
mod fixed;
mod native;
mod nr;
mod pieces;
mod prefault;
mod rdx;
mod slots;
mod switch;
mod sys;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use mgbench_capture::spill::{self, RawAccess, RawSample, SLOT_ACCESSES, SLOT_SAMPLES};
use mgbench_capture::trace::{Access, AccessKind, Mapping, SampleHeader, TraceWriter};

use sys::*;

/// The plugin API version this plugin was written against (QEMU 7.2).
#[no_mangle]
pub static qemu_plugin_version: c_int = 1;

/// Chunks in flight to the encoders before vCPU threads wait (bounds memory: 1.5 MB each).
/// 16 rather than 4 keeps the encoders busier through the vCPU's bursts: a full gather
/// capture used 174% of the 2 CPUs instead of 167% and ran 3% faster.
const QUEUE: usize = 16;
/// Most encoder threads: chunks are encoded in parallel (each is self-contained), up to the
/// machine's cores.
const MAX_ENCODERS: usize = 8;
/// vCPU indices the plugin can track (guest threads over the program's lifetime).
const MAX_VCPUS: usize = 1 << 16;

/// What the writer thread receives.
enum Msg {
    /// A queued slot encoded by an encoder thread (`frame` is `None` after a write failure);
    /// frames are written in queue order.
    Frame {
        seq: u64,
        slot: u32,
        frame: Option<Vec<u8>>,
        accesses: u64,
    },
    Mappings(Vec<Mapping>),
    Note(String),
    Shutdown,
}

/// An address range, `[start, end)`.
type Range = (u64, u64);
type Ranges = Vec<Range>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoiMode {
    None,
    Exclusive,
    Inclusive,
}

struct Config {
    out: String,
    status: Option<String>,
    /// The file shared with mgbench that holds the slots.
    spill: Option<String>,
    /// File whose first 16 bytes the writer keeps at (accesses recorded, trace bytes).
    progress: Option<String>,
    window: u64,
    period: u64,
    roi: Vec<(u64, u64)>,
    /// Inclusive ROI: copies of its functions inlined into other code (recorded wherever
    /// they run; a call from one opens the ROI for the callee).
    inlined: Vec<(u64, u64)>,
    /// Position-independent program: its path and the link address of its file offset 0.
    exe: Option<String>,
    exe_base: u64,
    /// ROI code in shared libraries, placed when each is mapped.
    libs: Vec<LibRoi>,
    /// `--roi` names found at start in neither the program nor its libraries: each library
    /// mapped later (dlopen) is searched for them (`roi_late=NAME`) ...
    late: Vec<String>,
    /// ... except these, searched already (`roi_searched=PATH`).
    searched: Vec<String>,
    roi_mode: RoiMode,
    level: i32,
    /// Live RDX instead of a trace (`out` is then the events file).
    rdx: Option<rdx::RdxArgs>,
    /// `rdx_check=FILE`: live RDX's counting checks its fixed counts against QEMU's accesses
    /// and writes what it found to FILE (see `fixed`).
    rdx_check: Option<String>,
    /// Where each thread's first window starts (`first_skip`).
    seed: u64,
}

impl Config {
    fn parse(args: &[String]) -> Result<Config, String> {
        let mut c = Config {
            out: String::new(),
            status: None,
            spill: None,
            progress: None,
            window: u64::MAX,
            period: u64::MAX,
            roi: Vec::new(),
            inlined: Vec::new(),
            exe: None,
            exe_base: 0,
            libs: Vec::new(),
            late: Vec::new(),
            searched: Vec::new(),
            roi_mode: RoiMode::None,
            // zstd's fastest level that still entropy-codes literals (negative levels store
            // them raw): with chunks in columns it is both faster and smaller than level -1.
            level: mgbench_capture::trace::DEFAULT_LEVEL,
            rdx: None,
            rdx_check: None,
            seed: 0,
        };
        let mut rdx = rdx::RdxArgs {
            period: 0,
            watch: rdx::MAX_WATCH,
            seed: 1,
            jitter: 0.5,
            adaptive: false,
            prefault: true,
        };
        let num = |k: &str, v: &str| -> Result<u64, String> {
            let parsed = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            parsed.map_err(|_| format!("{k}={v}: not a number"))
        };
        for a in args {
            let (k, v) = a
                .split_once('=')
                .ok_or_else(|| format!("argument {a:?} is not key=value"))?;
            match k {
                "out" => c.out = v.to_string(),
                "status" => c.status = Some(v.to_string()),
                "spill" => c.spill = Some(v.to_string()),
                "progress" => c.progress = Some(v.to_string()),
                "window" => c.window = num(k, v)?,
                "period" => c.period = num(k, v)?,
                "exe" => c.exe = Some(v.to_string()),
                "seed" => c.seed = num(k, v)?,
                "rdx" => rdx.period = num(k, v)?,
                "rdx_watch" => rdx.watch = num(k, v)? as usize,
                "rdx_seed" => rdx.seed = num(k, v)?,
                "rdx_jitter" => rdx.jitter = rdx::parse_jitter(k, v)?,
                "rdx_adaptive" => rdx.adaptive = num(k, v)? != 0,
                "rdx_prefault" => rdx.prefault = num(k, v)? != 0,
                "rdx_check" => c.rdx_check = Some(v.to_string()),
                "exe_base" => c.exe_base = num(k, v)?,
                "level" => {
                    c.level = v
                        .parse()
                        .map_err(|_| format!("level={v}: not a zstd level"))?
                }
                "roi" | "inlined" => {
                    let (s, e) = v
                        .split_once(':')
                        .ok_or_else(|| format!("{k}={v}: expected START:END"))?;
                    let range = (num(k, s)?, num(k, e)?);
                    // After a `lib=`, the ranges are that library's.
                    let (roi, inlined) = match c.libs.last_mut() {
                        Some(l) => (&mut l.roi, &mut l.inlined),
                        None => (&mut c.roi, &mut c.inlined),
                    };
                    if k == "roi" {
                        roi.push(range);
                    } else {
                        inlined.push(range);
                    }
                }
                "roi_late" => c.late.push(v.to_string()),
                "roi_searched" => c.searched.push(v.to_string()),
                "lib" => c.libs.push(LibRoi {
                    path: v.to_string(),
                    ..LibRoi::default()
                }),
                "lib_base" => {
                    let base = num(k, v)?;
                    c.libs
                        .last_mut()
                        .ok_or_else(|| format!("lib_base={v} before any lib="))?
                        .base = base;
                }
                "roi_mode" => {
                    c.roi_mode = match v {
                        "inclusive" => RoiMode::Inclusive,
                        "exclusive" => RoiMode::Exclusive,
                        _ => return Err(format!("roi_mode={v}: expected inclusive or exclusive")),
                    }
                }
                _ => return Err(format!("unknown argument {k:?}")),
            }
        }
        if c.out.is_empty() {
            return Err("missing out=TRACE".into());
        }
        if c.window == 0 || c.window > c.period {
            return Err(format!(
                "window={} and period={} must satisfy 0 < window <= period",
                c.window, c.period
            ));
        }
        let ranges = c.roi.len() + c.inlined.len();
        let lib_ranges: usize = c.libs.iter().map(|l| l.roi.len() + l.inlined.len()).sum();
        if ranges + lib_ranges > 0 && c.roi_mode == RoiMode::None {
            c.roi_mode = RoiMode::Inclusive;
        }
        if rdx.period > 0 {
            c.rdx = Some(rdx);
        }
        Ok(c)
    }
}

/// A shared library's ROI code, at link-time addresses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct LibRoi {
    path: String,
    /// The link address of its file offset 0.
    base: u64,
    roi: Ranges,
    inlined: Ranges,
}

/// ROI ranges at run time: the program's, placed at the first translation, and each
/// library's, placed when a read of the mappings first finds it.
#[derive(Default)]
struct RoiRuntime {
    started: bool,
    functions: Ranges,
    inlined: Ranges,
    /// Libraries (indices in `Config::libs`) not mapped yet.
    pending: Vec<usize>,
    /// Where files were mapped before the guest ran: QEMU's own copies (its C library has
    /// the path of the guest's), never the guest's.
    host: Vec<u64>,
    /// `Config::late` names not found yet, the files searched for them, and what was found
    /// where (notes for the user).
    late: Vec<String>,
    searched: Vec<String>,
    found: Vec<String>,
}

impl RoiRuntime {
    fn add(&mut self, roi: &[Range], inlined: &[Range], bias: u64) {
        let moved = |r: &Range| (r.0.wrapping_add(bias), r.1.wrapping_add(bias));
        self.functions.extend(roi.iter().map(moved));
        self.inlined.extend(inlined.iter().map(moved));
    }

    /// Places what `maps` shows loaded: the program first (position-independent ones load
    /// at a bias chosen at run time: the mapping of its file offset 0 against its link
    /// address; `qemu_plugin_entry_code` reports the dynamic loader's entry), then libraries.
    /// Returns notes for the user (names found in libraries opened with dlopen).
    fn place(&mut self, cfg: &Config, maps: &[Mapping]) -> Vec<String> {
        // (The program itself is mapped by QEMU before it runs: it is looked for among them.)
        if !self.started {
            self.host = maps
                .iter()
                .filter(|m| m.offset == 0 && !m.path.is_empty())
                .map(|m| m.start)
                .collect();
        }
        let host = self.host.clone();
        let mapped = |path: &str| Mapping::file_starts(maps, path).find(|s| !host.contains(s));
        if !self.started {
            self.started = true;
            let bias = match &cfg.exe {
                None => 0,
                Some(exe) => match Mapping::file_starts(maps, exe).next() {
                    Some(start) => start.wrapping_sub(cfg.exe_base),
                    None => {
                        sys::outs(&format!(
                            "cannot find {exe} in /proc/self/maps: --roi addresses may be wrong"
                        ));
                        0
                    }
                },
            };
            self.add(&cfg.roi, &cfg.inlined, bias);
            self.pending = (0..cfg.libs.len()).collect();
            // (The program and the loader are among `host`: QEMU maps them before the guest
            // runs.)
            self.late = cfg.late.clone();
            self.searched = cfg.searched.clone();
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|&i| {
            let lib = &cfg.libs[i];
            match mapped(&lib.path) {
                Some(start) => {
                    self.add(&lib.roi, &lib.inlined, start.wrapping_sub(lib.base));
                    false
                }
                None => true,
            }
        });
        self.pending = pending;
        if self.late.is_empty() {
            Vec::new()
        } else {
            self.search_late(cfg, maps)
        }
    }

    /// Searches the files newly mapped at their offset 0 (a library the program opened with
    /// dlopen) for the `--roi` names not found yet, and places what it finds. Returns a note
    /// per name found.
    fn search_late(&mut self, cfg: &Config, maps: &[Mapping]) -> Vec<String> {
        let found = mgbench_capture::symbols::find_in_new_libraries(
            maps,
            &mut self.searched,
            &self.host,
            &mut self.late,
        );
        let mut notes = Vec::new();
        for f in found {
            let bias = f.start.wrapping_sub(f.load_base);
            let code = &f.code;
            let inlined: Ranges = code.inlined.iter().map(|c| (c.start, c.end)).collect();
            if cfg.roi_mode == RoiMode::Inclusive {
                self.add(&code.entries, &inlined, bias);
            } else {
                let own: Ranges = code
                    .entries
                    .iter()
                    .chain(&code.parts)
                    .chain(&inlined)
                    .copied()
                    .collect();
                self.add(&own, &[], bias);
            }
            notes.push(f.note());
        }
        self.found.extend(notes.iter().cloned());
        notes
    }
}

/// Where a ROI capture's thread stands (see [`Vcpu::roi_track`]).
#[derive(Default)]
struct RoiTrack {
    /// Where the return address of the entry that opened the ROI lies (the stack pointer
    /// there): the `ret` that loads it leaves the ROI, wherever it runs (a function that ends
    /// in a tail call returns from the function it jumped to, never from its own code).
    roi_return: Option<u64>,
    /// Where the thread's last access went (in a ROI capture), and whether it was a store:
    /// where the stack pointer cannot be read, at a function's entry by a call this is the
    /// call's push of the return address; by a tail jump, often the jumping function's last
    /// `pop`, 8 bytes below its return address.
    last_access: u64,
    last_was_store: bool,
}

/// Per-thread state, touched only by its own vCPU thread (and by atexit, when every vCPU is
/// stopped).
struct Vcpu {
    /// QEMU's index of the vCPU (reused after a thread exits).
    vcpu: u32,
    /// Thread id in the trace: unique over the run (QEMU reuses vCPU indices of exited
    /// threads, which would merge two threads' streams).
    thread: u32,
    off: bool,
    roi_gate: bool,
    /// Inside the ROI while > 0: 1 from an entry until the load of its return address
    /// (`roi_return`), else (no return address found) entries minus returns inside the ROI's
    /// functions.
    roi_depth: u64,
    /// A ROI capture's return-address tracking.
    roi: RoiTrack,
    window: u64,
    period: u64,
    /// Where accesses go (`None` only when `off`).
    slot: Option<slots::Slot>,
    len: u32,
    closed: u32,
    sample_open: bool,
    sample_id: u64,
    sample_skipped: u64,
    sample_len: u32,
    window_used: u64,
    skip_left: u64,
    skipped: u64,
    recorded_total: u64,
    skipped_total: u64,
    /// To the encoders.
    chunks: SyncSender<u32>,
}

impl Vcpu {
    #[inline(always)]
    fn record(&mut self, ip: u64, addr: u64, info: u32) {
        if self.roi_gate && self.roi_depth == 0 {
            return;
        }
        self.record_open(ip, addr, info);
    }

    /// Records an access whether or not a ROI is open.
    #[inline(always)]
    fn record_open(&mut self, ip: u64, addr: u64, info: u32) {
        if self.off {
            return;
        }
        if self.skip_left > 0 {
            self.skip_left -= 1;
            self.skipped += 1;
            self.publish_tail();
            if self.skip_left % switch::RETRY_EVERY == 0 && self.skip_left >= switch::MIN_SKIP {
                // A long skip in callbacks: a new thread's first, or one whose switch to
                // counting was refused (a thread was being created).
                switch::window_closed(self.vcpu);
            }
            return;
        }
        if !self.sample_open {
            self.skipped_total += self.skipped;
            self.open_sample(self.skipped);
            self.skipped = 0;
        }
        if !self.put(ip, addr, info) {
            return;
        }
        self.window_used += 1;
        if self.window_used == self.window {
            self.close_sample();
            self.sample_id += 1;
            self.window_used = 0;
            self.skip_left = self.period - self.window;
            switch::window_closed(self.vcpu);
        }
        if self.len as usize >= SLOT_ACCESSES || self.closed as usize >= SLOT_SAMPLES {
            self.flush(false);
        }
    }

    /// Records an access of a full capture outside an inclusive ROI (see [`full_mem_cb`]):
    /// no skip, no window to close, the one sample open from the first access on (a slot
    /// holds at most one sample's end, so it is handed over when its accesses are full).
    #[inline(always)]
    fn record_full(&mut self, ip: u64, addr: u64, info: u32) {
        if !self.sample_open {
            if self.off {
                return;
            }
            self.open_sample(0);
        }
        if self.put(ip, addr, info) && self.len as usize >= SLOT_ACCESSES {
            self.flush(false);
        }
    }

    /// Writes an access into the slot (false: there is none, recording is off).
    #[inline(always)]
    fn put(&mut self, ip: u64, addr: u64, info: u32) -> bool {
        let Some(s) = &self.slot else {
            return false;
        };
        // SAFETY: len < SLOT_ACCESSES (the slot is handed over when full), so the write is
        // inside the slot this thread alone fills.
        unsafe {
            s.accesses.add(self.len as usize).write(RawAccess {
                ip,
                addr,
                info,
                _pad: 0,
            })
        };
        // The slot's lines were last read by an encoder on another core: fetching them well
        // ahead takes that transfer off this thread's path (a third faster full capture on an
        // Intel instance). A read prefetch: Rust's `_MM_HINT_ET0`, used until 2026-11-27 for
        // PREFETCHW (lines fetched owned), compiles to PREFETCHT0 without the `prfchw` target
        // feature, and a real PREFETCHW measured the same here (full captures of the five
        // bench kernels, 0.93-1.06x in two interleaved runs of 7 and 9, no consistent sign).
        sys::prefetch_read(s.accesses.wrapping_add(self.len as usize + WRITE_AHEAD));
        self.len += 1;
        // Published after the access is written: mgbench reads `len` if QEMU dies.
        s.header.len.store(self.len, Ordering::Release);
        self.sample_len += 1;
        true
    }

    /// A ROI capture's access at `addr`, before it is recorded: notes it, and leaves the ROI
    /// at the load of its return address (from [`roi_mem_cb`] only: see there).
    #[cold]
    #[inline(never)]
    fn roi_track(&mut self, addr: u64, info: u32) {
        let store = decode(info).1 == AccessKind::Store;
        self.roi.last_access = addr;
        self.roi.last_was_store = store;
        if !store && self.roi.roi_return == Some(addr) {
            // The `ret` that leaves the function the ROI was entered by (not recorded, as a
            // return counted inside the ROI was not).
            self.roi.roi_return = None;
            self.roi_depth = 0;
        }
    }

    /// An access by an inlined copy of a ROI function (inclusive ROI): recorded whether or not
    /// the ROI is open. A call's push there opens it (unless it is open) until the `ret`
    /// that loads the pushed return address, so that the callee counts, as a ROI
    /// function's callees do.
    #[cold]
    #[inline(never)]
    fn record_inlined(&mut self, ip: u64, addr: u64, info: u32, call: bool) {
        self.roi_track(addr, info);
        if call && self.roi_depth == 0 && decode(info).1 == AccessKind::Store {
            self.roi.roi_return = Some(addr);
            self.roi_depth = 1;
        }
        self.record_open(ip, addr, info);
    }

    /// The thread reaches a ROI function's entry (at the start of a translation block when
    /// `block_start`).
    fn roi_enter(&mut self, block_start: bool) {
        if self.roi.roi_return.is_some() {
            // Inside already (recursion, or another ROI function called from it).
            return;
        }
        if self.roi_depth == 0 && block_start {
            // At a function's entry the stack pointer points at its return address, whether
            // a call or a tail jump led there.
            if let Some(sp) = sys::guest_stack_pointer(self.vcpu) {
                self.roi.roi_return = Some(sp);
                self.roi_depth = 1;
                return;
            }
        }
        // Without QEMU 7.2's register reader: the return address lies where the call pushed
        // it, or just above where a jumping function popped its last saved register.
        let slot = if self.roi.last_was_store {
            self.roi.last_access
        } else {
            self.roi.last_access.wrapping_add(8)
        };
        if self.roi_depth == 0 && is_return_slot(slot) {
            self.roi.roi_return = Some(slot);
            self.roi_depth = 1;
            return;
        }
        // Entered otherwise (a jump after no pop): count returns inside the ROI.
        self.roi_depth += 1;
    }

    /// A `ret` inside a ROI function runs.
    fn roi_leave(&mut self) {
        if self.roi.roi_return.is_none() {
            self.roi_depth = self.roi_depth.saturating_sub(1);
        }
    }

    /// Tells mgbench (the slot's header) the skips since the last sample, which no sample
    /// header holds yet: what a death or an execve would otherwise lose.
    #[inline(always)]
    fn publish_tail(&self) {
        if let Some(s) = &self.slot {
            s.header.tail_skipped.store(self.skipped, Ordering::Relaxed);
        }
    }

    fn open_sample(&mut self, skipped_before: u64) {
        self.sample_open = true;
        self.sample_skipped = skipped_before;
        self.sample_len = 0;
        if let Some(s) = &self.slot {
            // The skips move into the sample: the tail empties first, so that a death in
            // between loses them rather than counting them twice.
            s.header.tail_skipped.store(0, Ordering::Release);
            s.header.open_id.store(self.sample_id, Ordering::Relaxed);
            s.header
                .open_skipped
                .store(skipped_before, Ordering::Relaxed);
            s.header.open.store(1, Ordering::Release);
        }
    }

    /// Credits `n` accesses counted inline to this thread's skip; returns the skip left.
    fn credit_skips(&mut self, n: u64) -> u64 {
        if !self.off {
            self.skipped += n;
            self.skip_left = self.skip_left.saturating_sub(n);
            self.publish_tail();
        }
        self.skip_left
    }

    fn close_sample(&mut self) {
        if !self.sample_open {
            return;
        }
        self.sample_open = false;
        let Some(s) = &self.slot else {
            return;
        };
        if self.sample_len > 0 && (self.closed as usize) < SLOT_SAMPLES {
            // SAFETY: closed < SLOT_SAMPLES: inside the slot this thread alone fills.
            unsafe {
                s.samples.add(self.closed as usize).write(RawSample {
                    id: self.sample_id,
                    skipped_before: self.sample_skipped,
                    len: self.sample_len,
                    _pad: 0,
                })
            };
            self.closed += 1;
            s.header.samples.store(self.closed, Ordering::Release);
        }
        // Marked closed only after its header is in the slot: a death in between leaves the
        // sample closed with no accesses after it, which mgbench reads as such.
        s.header.open.store(0, Ordering::Release);
        self.sample_len = 0;
    }

    /// Hands the slot to the writer and takes an empty one (none when `last`: the thread is
    /// done). An open sample continues in the next chunk under the same id with no skip.
    fn flush(&mut self, last: bool) {
        let continuing = self.sample_open;
        self.close_sample();
        let p = plugin();
        if std::process::id() != p.pid {
            // A forked child: its writer thread did not survive fork, and its slots are
            // private copies (see `slots`); the free list's lock may be held by a thread that
            // is gone, so it is not touched.
            self.off = true;
            self.slot = None;
            return;
        }
        let Some(s) = self.slot.take() else {
            return;
        };
        if self.len > 0 && !p.failed.load(Ordering::Relaxed) {
            self.recorded_total += u64::from(self.len);
            slots::queue(&s);
            let _ = self.chunks.send(s.index);
        } else {
            slots::release(s.index);
        }
        self.len = 0;
        self.closed = 0;
        if last || p.failed.load(Ordering::Relaxed) {
            self.off = true;
            return;
        }
        self.slot = slots::take(self.thread);
        if self.slot.is_none() {
            self.off = true;
            let _ = p.tx.send(Msg::Note(format!(
                "thread {}: more than {} guest threads at once, its accesses from here on are not recorded",
                self.thread,
                spill::MAX_SLOTS
            )));
            return;
        }
        self.publish_tail();
        if continuing {
            self.open_sample(0);
        }
    }
}

struct Plugin {
    cfg: Config,
    pid: u32,
    tx: SyncSender<Msg>,
    chunks: SyncSender<u32>,
    writer: Mutex<Option<JoinHandle<WriterReport>>>,
    failed: AtomicBool,
    maps: Mutex<Vec<(u64, u64)>>,
    /// ROI ranges at run time (link-time ranges plus the load bias).
    roi_runtime: Mutex<RoiRuntime>,
}

static PLUGIN: OnceLock<Plugin> = OnceLock::new();

static VCPUS: [AtomicPtr<Vcpu>; MAX_VCPUS] = [const { AtomicPtr::new(ptr::null_mut()) }; MAX_VCPUS];

/// How far ahead of the record being written the recorder fetches the slot's lines (records;
/// 3 KB: 64 measured 3% slower on a full gather capture, 256 the same).
const WRITE_AHEAD: usize = 128;
/// How far ahead of the record being encoded an encoder reads the slot (records; 48 and 192
/// measured the same or slower).
const READ_AHEAD: usize = 96;

fn plugin() -> &'static Plugin {
    // Callbacks are only registered after PLUGIN is set in qemu_plugin_install.
    PLUGIN.get().expect("mgbench plugin used before install")
}

/// The calling vCPU's state.
///
/// # Safety
/// Only the vCPU thread `vcpu` (or atexit, with all vCPUs stopped) may call this, and the
/// returned reference must not outlive the callback.
#[inline(always)]
unsafe fn vcpu_state<'a>(vcpu: c_uint) -> Option<&'a mut Vcpu> {
    let slot = VCPUS.get(vcpu as usize)?;
    let p = slot.load(Ordering::Acquire);
    // SAFETY: non-null slots hold a leaked Box<Vcpu> that lives until process exit; the
    // caller guarantees exclusive access (one thread per vCPU).
    unsafe { p.as_mut() }
}

/// Credits `n` accesses counted inline to vCPU `vcpu`'s skip; returns its skip left.
///
/// # Safety
/// As [`vcpu_state`]: only on that vCPU's thread, or with every vCPU stopped.
unsafe fn credit_skips(vcpu: u32, n: u64) -> u64 {
    // SAFETY: the caller's guarantee.
    unsafe { vcpu_state(vcpu) }.map_or(0, |v| v.credit_skips(n))
}

extern "C" fn mem_cb(vcpu: c_uint, info: qemu_plugin_meminfo_t, addr: u64, udata: *mut c_void) {
    // SAFETY: QEMU runs memory callbacks on the vCPU's own thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        v.record(udata as u64, addr, info);
    }
}

/// [`mem_cb`] of a full capture (no windows) outside an inclusive ROI: none of a sampled
/// capture's tests of skips and windows, nor the ROI gate's.
extern "C" fn full_mem_cb(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    addr: u64,
    udata: *mut c_void,
) {
    // SAFETY: QEMU runs memory callbacks on the vCPU's own thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        v.record_full(udata as u64, addr, info);
    }
}

/// [`mem_cb`] of an inclusive ROI capture, which follows the ROI's return address first. A
/// callback of its own: one test more in `mem_cb` cost a full capture of the integer gather
/// 11% (1.89 -> 2.11 s, medians of 4-5, interleaved).
extern "C" fn roi_mem_cb(vcpu: c_uint, info: qemu_plugin_meminfo_t, addr: u64, udata: *mut c_void) {
    // SAFETY: QEMU runs memory callbacks on the vCPU's own thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        v.roi_track(addr, info);
        v.record(udata as u64, addr, info);
    }
}

/// A memory callback, as QEMU calls it.
type MemCb = extern "C" fn(c_uint, qemu_plugin_meminfo_t, u64, *mut c_void);

/// Set in the user data of [`roi_inlined_cb`] for a call instruction (user-space addresses
/// stay below 2^47).
const INLINED_CALL: u64 = 1 << 63;

/// The memory callback of an inlined copy's instructions (inclusive ROI; see
/// [`Vcpu::record_inlined`]): the ip travels in the user data, with [`INLINED_CALL`] for a
/// call.
extern "C" fn roi_inlined_cb(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    addr: u64,
    udata: *mut c_void,
) {
    let data = udata as u64;
    // SAFETY: QEMU runs memory callbacks on the vCPU's own thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        v.record_inlined(data & !INLINED_CALL, addr, info, data & INLINED_CALL != 0);
    }
}

/// In the user data of [`joined_mem_cb`]: the number of pieces (2 or 4) from this bit, which
/// callback records the access (none: [`mem_cb`]) and the bytes it records if not the
/// pieces' (log2, 2 bits, see [`joined_data`]); the ip in the bits below.
const JOINED_PIECES_SHIFT: u32 = 56;
const JOINED_ROI: u64 = 1 << 60;
const JOINED_INLINED: u64 = 1 << 61;
const JOINED_WIDTH_SHIFT: u32 = 62;
const JOINED_IP: u64 = (1 << JOINED_PIECES_SHIFT) - 1;

/// The user data of [`joined_mem_cb`] for the instruction at `vaddr` of [`pieces::Shape`]
/// `shape`, whose accesses go to the callback `route` names.
fn joined_data(vaddr: u64, shape: pieces::Shape, route: u64) -> u64 {
    // 4 and 8 bytes are the widths that are not the pieces' (2 x 8 bytes, 4 x 8 bytes).
    let narrow = match shape.width {
        4 => 2,
        8 => 3,
        _ => 0,
    };
    vaddr
        | route
        | (u64::from(shape.pieces) << JOINED_PIECES_SHIFT)
        | (narrow << JOINED_WIDTH_SHIFT)
}

/// A piece (`info`, of the size and kind `decoded`) at `addr` of the instruction whose
/// callback has the user data `data`: the ip and the access to record where it begins one
/// (see `pieces::join`).
#[inline]
fn join_piece(data: u64, addr: u64, info: u32, decoded: (u8, AccessKind)) -> Option<(u64, u32)> {
    let ip = data & JOINED_IP;
    let pieces = ((data >> JOINED_PIECES_SHIFT) & 0xf) as u8;
    let width = match data >> JOINED_WIDTH_SHIFT {
        0 => 8 * pieces,
        log2 => 1 << log2,
    };
    let (size, kind) = decoded;
    pieces::join(ip, addr, info, size, kind, pieces, width).map(|info| (ip, info))
}

/// The memory callback of an instruction whose accesses QEMU performs in pieces (see
/// `pieces`): the first piece of each goes on as the whole access, to the callback the
/// instruction would have had.
extern "C" fn joined_mem_cb(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    addr: u64,
    udata: *mut c_void,
) {
    let data = udata as u64;
    let Some((ip, info)) = join_piece(data, addr, info, decode(info)) else {
        return;
    };
    route(data, vcpu, info, addr, ip);
}

/// Hands an access of the instruction at `ip` to the callback its user data `data` names.
#[inline]
fn route(data: u64, vcpu: c_uint, info: u32, addr: u64, ip: u64) {
    let ip = ip as *mut c_void;
    if data & JOINED_INLINED != 0 {
        roi_inlined_cb(vcpu, info, addr, ip);
    } else if data & JOINED_ROI != 0 {
        roi_mem_cb(vcpu, info, addr, ip);
    } else {
        mem_cb(vcpu, info, addr, ip);
    }
}

/// The memory callback of a locked read-modify-write instruction (see `pieces`): an atomic
/// access that both loads and stores goes on as the load and the store.
extern "C" fn atomic_mem_cb(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    addr: u64,
    udata: *mut c_void,
) {
    let data = udata as u64;
    for info in pieces::split_rmw(info) {
        route(data, vcpu, info, addr, data & JOINED_IP);
    }
}

/// The memory callback of an instruction outside an exclusive ROI (see [`tb_trans`]).
extern "C" fn unrecorded_mem_cb(
    _vcpu: c_uint,
    _info: qemu_plugin_meminfo_t,
    _addr: u64,
    _udata: *mut c_void,
) {
}

/// `udata` is 1 where the entry starts its translation block.
extern "C" fn roi_enter(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: instruction callbacks run on the vCPU's own thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        v.roi_enter(udata as usize == 1);
    }
}

extern "C" fn roi_leave(vcpu: c_uint, _udata: *mut c_void) {
    // SAFETY: instruction callbacks run on the vCPU's own thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        v.roi_leave();
    }
}

/// Whether the 8 bytes at `slot` (read without trusting it) hold a return address: one that
/// follows a call instruction, as a call's push leaves at a function's entry (a direct call,
/// to the function or to its PLT stub, or a call through a pointer).
fn is_return_slot(slot: u64) -> bool {
    let mut word = [0u8; 8];
    if sys::read_own(slot, &mut word) != 8 {
        return false;
    }
    let ret = u64::from_le_bytes(word);
    let mut code = [0u8; 7];
    if ret < code.len() as u64 || sys::read_own(ret - code.len() as u64, &mut code) != code.len() {
        return false;
    }
    call_ends_at(&code)
}

/// Whether `code` (the 7 bytes before a return address) ends with a call: `E8 rel32`, or
/// `FF /2` with its ModRM, SIB and displacement (a call through a register or memory).
fn call_ends_at(code: &[u8; 7]) -> bool {
    if code[2] == 0xE8 {
        return true;
    }
    (2..=7).any(|len| {
        let at = code.len() - len;
        if code[at] != 0xFF {
            return false;
        }
        let modrm = code[at + 1];
        if (modrm >> 3) & 7 != 2 {
            return false;
        }
        let (md, rm) = (modrm >> 6, modrm & 7);
        let sib = md != 3 && rm == 4;
        let disp = match md {
            0 if rm == 5 => 4,
            0 if sib && at + 2 < code.len() && code[at + 2] & 7 == 5 => 4,
            1 => 1,
            2 => 4,
            _ => 0,
        };
        2 + usize::from(sib) + disp == len
    })
}

extern "C" fn vcpu_init(_id: qemu_plugin_id_t, vcpu: c_uint) {
    let p = plugin();
    let Some(slot) = VCPUS.get(vcpu as usize) else {
        sys::outs(&format!(
            "guest thread {vcpu} is beyond the {MAX_VCPUS} the plugin tracks; not recorded"
        ));
        return;
    };
    static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);
    let thread = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    let buffer = slots::take(thread);
    if buffer.is_none() {
        let _ = p.tx.send(Msg::Note(format!(
            "thread {thread}: more than {} guest threads at once, not recorded",
            spill::MAX_SLOTS
        )));
    }
    let v = Box::new(Vcpu {
        vcpu,
        thread,
        off: buffer.is_none(),
        roi_gate: p.cfg.roi_mode == RoiMode::Inclusive,
        roi_depth: 0,
        roi: RoiTrack::default(),
        window: p.cfg.window,
        period: p.cfg.period,
        slot: buffer,
        len: 0,
        closed: 0,
        sample_open: false,
        sample_id: 0,
        sample_skipped: 0,
        sample_len: 0,
        window_used: 0,
        skip_left: first_skip(p.cfg.seed, thread, p.cfg.window, p.cfg.period),
        skipped: 0,
        recorded_total: 0,
        skipped_total: 0,
        chunks: p.chunks.clone(),
    });
    static STARTED: AtomicU32 = AtomicU32::new(0);
    if STARTED.fetch_add(1, Ordering::AcqRel) == 0 {
        switch::set_owner(vcpu);
    } else if let Some((owner, n)) = switch::second_thread(vcpu) {
        // SAFETY: vCPU init runs on the creating thread, in its clone system call: the owner
        // (the only thread so far) is that thread.
        unsafe { credit_skips(owner, n) };
    }
    let old = slot.swap(Box::into_raw(v), Ordering::AcqRel);
    if !old.is_null() {
        // An index reused after its thread exited: keep the old state's totals reachable by
        // leaking it into the retired list (rare; counts are merged at exit).
        retired().lock().map(|mut r| r.push(old as usize)).ok();
    }
}

/// Accesses a thread skips before its first window: uniform in [0, period - window], from
/// `seed` and the thread's number. Systematic sampling from a random start weighs every
/// access alike; starting at the first access would over-weight start-up (on GUPS the
/// dynamic loader's one window moved the reuse CDF by 30%).
fn first_skip(seed: u64, thread: u32, window: u64, period: u64) -> u64 {
    if window >= period {
        return 0;
    }
    splitmix64(seed ^ u64::from(thread).wrapping_mul(GOLDEN)) % (period - window + 1)
}

/// splitmix64's increment.
pub(crate) const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64: the output for state `x` (the state advances by [`GOLDEN`] per draw).
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn retired() -> &'static Mutex<Vec<usize>> {
    static RETIRED: OnceLock<Mutex<Vec<usize>>> = OnceLock::new();
    RETIRED.get_or_init(|| Mutex::new(Vec::new()))
}

extern "C" fn vcpu_exit(_id: qemu_plugin_id_t, vcpu: c_uint) {
    // SAFETY: the exit callback runs on the exiting vCPU's thread.
    if let Some(v) = unsafe { vcpu_state(vcpu) } {
        // What it counted inline last, if it held the counter.
        if let Some(n) = switch::thread_exits(vcpu) {
            v.credit_skips(n);
        }
        v.flush(true);
        // Its slot is gone; its skips since the last sample stay countable after a death.
        if std::process::id() == plugin().pid {
            slots::retire_tail(v.skipped);
        }
    }
}

fn is_ret(bytes: &[u8]) -> bool {
    // Skip legacy prefixes (rep/bnd, operand size), then near ret (C3) or ret imm16 (C2).
    let mut i = 0;
    while i < bytes.len() && matches!(bytes[i], 0xf2 | 0xf3 | 0x66) {
        i += 1;
    }
    matches!(bytes.get(i), Some(0xc3) | Some(0xc2))
}

/// Whether an instruction is a near call: `call rel32` (E8) or `call r/m64` (FF /2), after
/// prefixes (operand size, segment and `notrack`, REX).
fn is_call(bytes: &[u8]) -> bool {
    let mut i = 0;
    while i < bytes.len() && matches!(bytes[i], 0x66 | 0xf2 | 0xf3 | 0x2e | 0x3e | 0x40..=0x4f) {
        i += 1;
    }
    match bytes.get(i) {
        Some(0xe8) => true,
        Some(0xff) => bytes.get(i + 1).is_some_and(|m| (m >> 3) & 7 == 2),
        _ => false,
    }
}

extern "C" fn tb_trans(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    let p = plugin();
    // SAFETY: `tb` is valid for the duration of this callback; QEMU owns it.
    let (n, tb_vaddr) = unsafe { (qemu_plugin_tb_n_insns(tb), qemu_plugin_tb_vaddr(tb)) };
    note_mappings(p, tb_vaddr);
    if let Some(c) = switch::translate_counting() {
        register_counting(tb, c);
        return;
    }
    let runtime = (p.cfg.roi_mode != RoiMode::None).then(|| {
        let mut rt = p.roi_runtime.lock().unwrap_or_else(|e| e.into_inner());
        if !rt.started {
            for note in rt.place(&p.cfg, &read_proc_maps()) {
                let _ = p.tx.send(Msg::Note(note));
            }
        }
        rt
    });
    let (roi, inlined) = match &runtime {
        Some(rt) => (&rt.functions[..], &rt.inlined[..]),
        None => (&[][..], &[][..]),
    };
    for i in 0..n {
        // SAFETY: i < n instructions of this TB; handles are valid during the callback.
        let insn = unsafe { qemu_plugin_tb_get_insn(tb, i) };
        let vaddr = unsafe { qemu_plugin_insn_vaddr(insn) };
        let in_roi = roi.iter().any(|&(s, e)| vaddr >= s && vaddr < e);
        let in_inlined = inlined.iter().any(|&(s, e)| vaddr >= s && vaddr < e);
        // SAFETY: a valid instruction handle, during the translation callback.
        let bytes = unsafe { insn_bytes(insn) };
        match p.cfg.roi_mode {
            RoiMode::Exclusive if !in_roi => {
                // Not recorded, yet given a callback that does nothing: QEMU 7.2 leaves the
                // last instrumented instruction's memory callbacks armed when its block
                // exits (a `ret`), and accesses made later by helpers in blocks without
                // instrumentation reached them, under that instruction's address (a ROI
                // function's `ret` got 146 accesses for its 2 executions). An instruction
                // with callbacks of its own replaces them. (An inline add would be cheaper
                // on one thread, 5% rather than 15% here, but its one counter makes threads
                // share a cache line: 2x on a 2-thread SpMV.)
                // SAFETY: registering a callback on a valid instruction handle.
                unsafe {
                    qemu_plugin_register_vcpu_mem_cb(
                        insn,
                        unrecorded_mem_cb,
                        QEMU_PLUGIN_CB_NO_REGS,
                        QEMU_PLUGIN_MEM_RW,
                        ptr::null_mut(),
                    )
                };
                continue;
            }
            RoiMode::Inclusive if in_roi => {
                if roi.iter().any(|&(s, _)| s == vaddr) {
                    // SAFETY: registering a callback on a valid instruction handle.
                    unsafe {
                        qemu_plugin_register_vcpu_insn_exec_cb(
                            insn,
                            roi_enter,
                            QEMU_PLUGIN_CB_R_REGS,
                            usize::from(i == 0) as *mut c_void,
                        )
                    };
                }
                if is_ret(bytes) {
                    // SAFETY: as above.
                    unsafe {
                        qemu_plugin_register_vcpu_insn_exec_cb(
                            insn,
                            roi_leave,
                            QEMU_PLUGIN_CB_NO_REGS,
                            ptr::null_mut(),
                        )
                    };
                }
            }
            _ => {}
        }
        let decoded = pieces::Insn::new(bytes);
        let shape = decoded.shape();
        let route = if in_inlined {
            JOINED_INLINED
        } else if p.cfg.roi_mode == RoiMode::Inclusive {
            JOINED_ROI
        } else {
            0
        };
        let (cb, data): (MemCb, u64) = if shape.pieces > 1 {
            (joined_mem_cb, joined_data(vaddr, shape, route))
        } else if decoded.atomic_rmw() {
            (atomic_mem_cb, vaddr | route)
        } else if in_inlined {
            let call = if is_call(bytes) { INLINED_CALL } else { 0 };
            (roi_inlined_cb, vaddr | call)
        } else if p.cfg.roi_mode == RoiMode::Inclusive {
            (roi_mem_cb, vaddr)
        } else if p.cfg.window == u64::MAX {
            (full_mem_cb, vaddr)
        } else {
            (mem_cb, vaddr)
        };
        // SAFETY: registering the memory callback; the ip travels as the user-data pointer.
        unsafe {
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                cb,
                QEMU_PLUGIN_CB_NO_REGS,
                QEMU_PLUGIN_MEM_RW,
                data as *mut c_void,
            )
        };
    }
}

/// The bytes of instruction `insn`.
///
/// # Safety
/// `insn` is a valid handle, and the bytes are used only during the translation callback
/// that gave it.
pub(crate) unsafe fn insn_bytes<'a>(insn: *mut qemu_plugin_insn) -> &'a [u8] {
    // SAFETY: data/size describe the instruction's bytes, valid in the callback.
    unsafe {
        std::slice::from_raw_parts(
            qemu_plugin_insn_data(insn).cast::<u8>(),
            qemu_plugin_insn_size(insn),
        )
    }
}

/// The inline adds of counting mode to counter `c` (the counting mode of `switch`): one add
/// when the block starts for the accesses of its instructions whose accesses are fixed
/// (`fixed`), up to its first atomic instruction, and one add per memory access for the
/// others, the instructions taking the counter's lanes in turn; an instruction whose
/// accesses QEMU performs in pieces adds per piece to lanes that count them so (see
/// `pieces`).
///
/// A block whose instructions all run counts exactly what they access. One that stops part
/// way has counted its fixed accesses from there on, which never ran: where an access
/// faults (the program's crash or a fault it handles, QEMU's protection of a page it wrote
/// code to; `switch` counts these faults) or QEMU kills the process mid-block (SIGKILL).
/// Two kinds of instruction can also stop a block without a fault, so the block's add stops
/// at them and the instructions after them add per access, exact either way: an atomic one
/// (QEMU runs a misaligned one again alone, then the block's rest as a new block), which
/// adds per access itself, and a division (a division error the program may survive), whose
/// own access comes first and stays in the add.
///
/// A locked read-modify-write adds 2, filtered to loads, so that it counts its load and store
/// once per execution whether QEMU performs them apart (serially) or as one access that is
/// both (in parallel; see `pieces`). QEMU 7.2 runs a filtered add at an access of its helpers
/// when the kinds meet (a load and store is both), but at a translated load only where the
/// filter takes stores and at a translated store always: so the add runs at the store there.
/// (Where a translated load meets the load filter instead, it runs at the load.) A
/// `cmpxchg16b`, two loads and two stores of a helper when serial, adds 2 at each load.
fn register_counting(tb: *mut qemu_plugin_tb, c: usize) {
    // SAFETY: `tb` is valid during the translation callback that passes it.
    let n = unsafe { qemu_plugin_tb_n_insns(tb) };
    let mut fixed_sum = 0u64;
    let mut whole_block = true;
    for i in 0..n {
        // SAFETY: i < n instructions of this TB, valid during the callback; each lane is a
        // u64 on a counter page that lives until exit.
        unsafe {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            let decoded = pieces::Insn::new(insn_bytes(insn));
            let pieces = decoded.shape().pieces;
            if fixed::atomic(&decoded) {
                whole_block = false;
            }
            let in_add = whole_block;
            if fixed::divides(&decoded) {
                // Its accesses come before a division error would: it stays in the add, the
                // instructions after it add per access.
                whole_block = false;
            }
            if in_add {
                if let Some(k) = fixed::fixed_accesses(&decoded) {
                    if fixed::checking() {
                        fixed::check(insn, k, pieces);
                    } else {
                        fixed_sum += u64::from(k);
                    }
                    continue;
                }
            }
            let lane = switch::lane_ptr(c, i, pieces).cast();
            let (rw, add) = if pieces == 1 && decoded.atomic_rmw() {
                (QEMU_PLUGIN_MEM_R, 2)
            } else {
                (QEMU_PLUGIN_MEM_RW, 1)
            };
            qemu_plugin_register_vcpu_mem_inline(insn, rw, QEMU_PLUGIN_INLINE_ADD_U64, lane, add);
        };
    }
    if fixed_sum > 0 {
        // SAFETY: as above; the block's add takes a lane by its address.
        unsafe {
            let lane = switch::lane_ptr(c, (qemu_plugin_tb_vaddr(tb) >> 4) as usize, 1).cast();
            qemu_plugin_register_vcpu_tb_exec_inline(
                tb,
                QEMU_PLUGIN_INLINE_ADD_U64,
                lane,
                fixed_sum,
            );
        }
    }
}

/// Live RDX's translation: counting, or a memory callback per access around a sample, or
/// nothing once sampling stopped.
extern "C" fn rdx_tb_trans(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    if rdx::stopped() {
        return;
    }
    let counting = switch::translate_counting();
    // The set the block goes to: each thread's counting set, or the callbacks' (switched in
    // place; where switches flush, a block lives until the next flush).
    let set = match counting {
        Some(c) if switch::in_place() => c as u32 + 1,
        _ => 0,
    };
    // SAFETY: `tb` is valid during this callback.
    rdx::translated(unsafe { qemu_plugin_tb_vaddr(tb) }, set);
    if let Some(c) = counting {
        register_counting(tb, c);
        return;
    }
    // SAFETY: `tb` and its instruction handles are valid during this callback; the ip
    // travels as the user-data pointer.
    unsafe {
        for i in 0..qemu_plugin_tb_n_insns(tb) {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            let vaddr = qemu_plugin_insn_vaddr(insn);
            let decoded = pieces::Insn::new(insn_bytes(insn));
            let shape = decoded.shape();
            let (cb, data): (MemCb, u64) = if shape.pieces > 1 {
                (rdx_joined_mem_cb, joined_data(vaddr, shape, 0))
            } else if decoded.atomic_rmw() {
                (rdx_atomic_mem_cb, vaddr)
            } else {
                (rdx::mem_cb, vaddr)
            };
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                cb,
                QEMU_PLUGIN_CB_NO_REGS,
                QEMU_PLUGIN_MEM_RW,
                data as *mut c_void,
            );
        }
    }
}

/// Live RDX's [`atomic_mem_cb`]: an atomic access that both loads and stores is two accesses,
/// as the inline counter counts it.
extern "C" fn rdx_atomic_mem_cb(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    addr: u64,
    udata: *mut c_void,
) {
    for info in pieces::split_rmw(info) {
        rdx::mem_cb(vcpu, info, addr, udata);
    }
}

/// Live RDX's [`joined_mem_cb`]: one access per execution of a vector instruction QEMU
/// performs in pieces, as the inline counter counts it.
extern "C" fn rdx_joined_mem_cb(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    addr: u64,
    udata: *mut c_void,
) {
    if let Some((ip, info)) = join_piece(udata as u64, addr, info, decode_by_qemu(info)) {
        rdx::mem_cb(vcpu, info, addr, ip as *mut c_void);
    }
}

extern "C" fn rdx_vcpu_init(_id: qemu_plugin_id_t, vcpu: c_uint) {
    static STARTED: AtomicU32 = AtomicU32::new(0);
    if STARTED.fetch_add(1, Ordering::AcqRel) == 0 {
        // The first thread (vCPU 0) is followed from `rdx::init`.
        switch::set_owner(vcpu);
    } else {
        // Where switches flush, counting goes back to callbacks for good (the inline counter
        // is one for all).
        if let Some((owner, n)) = switch::second_thread(vcpu) {
            rdx::credit(owner, n);
        }
        rdx::thread_started(vcpu);
    }
}

extern "C" fn rdx_syscall_ret(_id: qemu_plugin_id_t, vcpu: c_uint, num: i64, ret: i64) {
    // rt_sigaction: QEMU may have replaced the host's SIGTRAP handler.
    if num == nr::RT_SIGACTION {
        sys::keep_trap_hook_in_front();
    }
    fds::after_syscall(vcpu, num, ret);
    clone_returned(num, ret);
    prefault::after_syscall(num, ret);
    if num == nr::MMAP {
        rdx::after_mmap(ret);
    }
    rdx::syscall_returned(vcpu, num);
}

extern "C" fn rdx_vcpu_exit(_id: qemu_plugin_id_t, vcpu: c_uint) {
    if let Some(n) = switch::thread_exits(vcpu) {
        rdx::credit(vcpu, n);
    }
    rdx::thread_exited(vcpu);
}

extern "C" fn rdx_at_exit(_id: qemu_plugin_id_t, _udata: *mut c_void) {
    rdx::children(children());
    rdx::finish();
    fixed::report_check();
}

/// The path an `execve` or `execveat` system call (`num`, first arguments `a1`, `a2`) runs,
/// read without trusting the guest's pointer; `None` for other calls.
fn exec_path(num: i64, a1: u64, a2: u64) -> Option<Vec<u8>> {
    // execve(path, ...), execveat(dirfd, path, ...).
    let path = match num {
        nr::EXECVE => a1,
        nr::EXECVEAT => a2,
        _ => return None,
    };
    let mut buf = vec![0u8; spill::EXEC_PATH_BYTES];
    let n = sys::read_own(path, &mut buf);
    let end = buf[..n].iter().position(|&b| b == 0).unwrap_or(n);
    buf.truncate(end);
    Some(buf)
}

fn register_rdx_callbacks(id: qemu_plugin_id_t) {
    // SAFETY: registering callbacks with the id QEMU gave us.
    unsafe {
        qemu_plugin_register_vcpu_init_cb(id, rdx_vcpu_init);
        qemu_plugin_register_vcpu_exit_cb(id, rdx_vcpu_exit);
        qemu_plugin_register_vcpu_tb_trans_cb(id, rdx_tb_trans);
        qemu_plugin_register_vcpu_syscall_cb(id, syscall_entry::<true>);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, rdx_syscall_ret);
        qemu_plugin_register_atexit_cb(id, rdx_at_exit, ptr::null_mut());
    }
}

extern "C" fn floor_mem_cb(
    _vcpu: c_uint,
    _info: qemu_plugin_meminfo_t,
    _addr: u64,
    _ud: *mut c_void,
) {
}

extern "C" fn floor_tb_trans(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    // SAFETY: `tb` and its instruction handles are valid during this callback.
    unsafe {
        for i in 0..qemu_plugin_tb_n_insns(tb) {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                floor_mem_cb,
                QEMU_PLUGIN_CB_NO_REGS,
                QEMU_PLUGIN_MEM_RW,
                ptr::null_mut(),
            );
        }
    }
}

/// Sends the process's mappings when code runs from an address no known mapping covers
/// (program start, dlopen, JIT): symbolization needs them, and they change rarely.
fn note_mappings(p: &Plugin, vaddr: u64) {
    let Ok(mut known) = p.maps.lock() else {
        return;
    };
    if known.iter().any(|&(s, e)| vaddr >= s && vaddr < e) {
        return;
    }
    let maps = read_proc_maps();
    if p.cfg.roi_mode != RoiMode::None {
        // A library the ROI is in may have just been mapped.
        let mut rt = p.roi_runtime.lock().unwrap_or_else(|e| e.into_inner());
        if rt.started && (!rt.pending.is_empty() || !rt.late.is_empty()) {
            for note in rt.place(&p.cfg, &maps) {
                let _ = p.tx.send(Msg::Note(note));
            }
        }
    }
    // Only the mappings not sent yet (readers take the union of every mappings frame).
    let new: Vec<Mapping> = maps
        .iter()
        .filter(|m| !known.contains(&(m.start, m.end)))
        .cloned()
        .collect();
    known.extend(new.iter().map(|m| (m.start, m.end)));
    if !maps.iter().any(|m| vaddr >= m.start && vaddr < m.end) {
        // Not in /proc/self/maps at all: remember the page so we do not re-read for it.
        known.push((vaddr & !0xfff, (vaddr & !0xfff) + 0x1000));
    }
    if !new.is_empty() {
        let _ = p.tx.send(Msg::Mappings(new));
    }
}

/// Data mappings also appear after start-up: the heap grows (brk) and large blocks are
/// mmap'ed. After such a call, the mappings are sent again when no known one covers its
/// result, so that the data it holds is classed by what it is (heap, not unmapped).
extern "C" fn syscall_ret(_id: qemu_plugin_id_t, vcpu: c_uint, num: i64, ret: i64) {
    fds::after_syscall(vcpu, num, ret);
    clone_returned(num, ret);
    // mmap and mremap return the start (or -errno); brk returns the new end.
    let addr = match num {
        nr::MMAP | nr::MREMAP if ret > 0 => ret as u64,
        nr::BRK if ret > 0 => ret as u64 - 1,
        _ => return,
    };
    note_mappings(plugin(), addr);
}

// The calls that create threads (and processes): `CLONE`, `CLONE3`; and those that only
// create processes: `FORK`, `VFORK`.
use nr::{CLONE, CLONE3, FORK, VFORK};

/// Child processes the program started (fork, vfork, clone without a shared address space).
/// QEMU runs each in a copy of itself and of the plugin, which records nothing there: the
/// report says so.
static CHILDREN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The calling thread's pending `clone`/`fork` makes a process (set at the call's entry,
    /// taken at its return).
    static FORKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The stack pointer that the calling thread's pending `clone` gives the new thread (0:
    /// none, or it makes a process), taken at the call's return to name the thread's stack.
    static NEW_STACK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The stack pointer a thread-creating `clone` (its second argument) or `clone3` (the end of
/// the stack its argument points to: `stack` and `stack_size`, the sixth and seventh fields)
/// starts the new thread with; 0 where the call does not say.
fn new_thread_stack_pointer(num: i64, a1: u64, a2: u64) -> u64 {
    match num {
        CLONE => a2,
        CLONE3 => {
            let mut b = [0u8; 16];
            if sys::read_own(a1.wrapping_add(40), &mut b) != 16 {
                return 0;
            }
            let stack = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let size = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            if stack == 0 {
                0
            } else {
                stack.wrapping_add(size)
            }
        }
        _ => 0,
    }
}

/// Sends the mapping of a new thread's stack, named `[thread stack]`, so that analyses
/// class it as a stack (the kernel names only the main thread's).
fn name_thread_stack(p: &Plugin, sp: u64) {
    if let Some(stack) = Mapping::thread_stack(&read_proc_maps(), sp, true) {
        let _ = p.tx.send(Msg::Mappings(vec![stack]));
    }
}

/// Whether system call `num` with first argument `a1` makes a new process rather than a
/// thread, as QEMU 7.2 decides (linux-user `do_fork`: `CLONE_VFORK` is emulated by a fork,
/// and without `CLONE_VM` it forks); clone3's flags are the first field its argument points
/// to.
fn makes_process(num: i64, a1: u64) -> bool {
    const CLONE_VM: u64 = 0x100;
    const CLONE_VFORK: u64 = 0x4000;
    let flags = match num {
        FORK | VFORK => return true,
        CLONE => a1,
        CLONE3 => {
            let mut b = [0u8; 8];
            if sys::read_own(a1, &mut b) != 8 {
                return false;
            }
            u64::from_le_bytes(b)
        }
        _ => return false,
    };
    flags & CLONE_VFORK != 0 || flags & CLONE_VM == 0
}

/// The child processes started so far (see [`CHILDREN`]).
pub(crate) fn children() -> u64 {
    CHILDREN.load(Ordering::Relaxed)
}

/// The trace's note on faults other than the counters' own (`segv` SIGSEGV, `bus` SIGBUS)
/// in a sampled capture that counted inline, if there were any.
fn faults_note(segv: u64, bus: u64) -> Option<String> {
    let kinds = match (segv, bus) {
        (0, 0) => return None,
        (_, 0) => "SIGSEGV".to_string(),
        (0, _) => "SIGBUS".to_string(),
        _ => format!("{segv} SIGSEGV, {bus} SIGBUS"),
    };
    Some(format!(
        "{} fault(s) ({kinds}) while sampled: the program's own (handled), or QEMU's on pages it wrote code to; a block that a fault stopped while its thread counted a skip inline counted its remaining accesses (a few), which never ran, so that skip may be as many too long",
        segv + bus
    ))
}

/// What the trace says about child processes, if there were any.
fn children_note() -> Option<String> {
    let n = children();
    (n > 0).then(|| {
        mgbench_capture::trace::children_note(n, mgbench_capture::trace::QEMU_CHILDREN_RAN, true)
    })
}

// `exit`: one thread's end (`exit_group` ends them all, with no vCPU removed).
use nr::EXIT;

/// A `clone` or `clone3` returned in the calling thread (the new thread, or a forked
/// process, sees 0).
fn clone_returned(num: i64, ret: i64) {
    if !matches!(num, CLONE | CLONE3 | FORK | VFORK) {
        return;
    }
    // The child's copy of the flag is taken too (a fork's child sees 0).
    if FORKING.with(|f| f.take()) && ret > 0 {
        CHILDREN.fetch_add(1, Ordering::Relaxed);
    }
    // Set by a capture's thread-creating call (the new thread sees 0, and its own copy, 0).
    let sp = NEW_STACK.with(|s| s.take());
    if sp != 0 && ret > 0 {
        name_thread_stack(plugin(), sp);
    }
    if matches!(num, CLONE | CLONE3) && ret != 0 {
        switch::clone_ended();
    }
}

/// A guest system call is about to run.
///
/// A `clone` or `clone3` may create a thread: see [`switch::clone_starts`].
///
/// A call that closes or replaces descriptors (`close`, `dup2`, `dup3`, `close_range`) first
/// moves the plugin's own out of its way (see `fds`).
///
/// An `execve` replaces the process with a program QEMU user mode runs natively, without
/// exit hooks: its path goes to the spill header (capture), so that mgbench can say where
/// the trace ends and why (what was recorded and skipped is there already), or to the
/// events (live RDX, see [`rdx::on_exec`]).
#[allow(clippy::too_many_arguments)]
extern "C" fn syscall_entry<const LIVE_RDX: bool>(
    _id: qemu_plugin_id_t,
    vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    if LIVE_RDX {
        prefault::before_syscall(num, a1, a2, a3, a4);
        if num == nr::MMAP {
            rdx::before_mmap(a2, a3, a4, a5);
        }
    }
    if matches!(num, CLONE | CLONE3 | FORK | VFORK) {
        let process = makes_process(num, a1);
        FORKING.with(|f| f.set(process));
        if !LIVE_RDX && !process {
            NEW_STACK.with(|s| s.set(new_thread_stack_pointer(num, a1, a2)));
        }
    }
    if matches!(num, CLONE | CLONE3) {
        switch::clone_starts();
        return;
    }
    if num == EXIT {
        switch::thread_exit_starts(vcpu);
        return;
    }
    if let Some((lo, hi)) = fds::taken_by(num, a1, a2, a3) {
        // The watchpoints first: a thread logging an event holds rdx's lock while it waits
        // for a guarded file.
        if LIVE_RDX {
            rdx::before_syscall(vcpu, lo, hi);
        }
        fds::before_syscall(vcpu, lo, hi);
        return;
    }
    let Some(path) = exec_path(num, a1, a2) else {
        return;
    };
    if LIVE_RDX {
        // (A forked child's events are dropped by `rdx` itself.)
        rdx::children(children());
        rdx::on_exec(vcpu, &path);
    } else if std::process::id() == plugin().pid {
        // A forked child's exec leaves the parent's trace going on.
        slots::note_exec(&path);
    }
}

/// QEMU's mappings, which are the guest's (user mode maps guest memory at the same
/// addresses), with the guest's main stack named `[stack]` (in QEMU's own list it is anonymous
/// memory, and `[stack]` is QEMU's).
fn read_proc_maps() -> Vec<Mapping> {
    let mut maps = std::fs::read_to_string("/proc/self/maps")
        .map(|text| Mapping::parse_proc_maps(&text))
        .unwrap_or_default();
    if let Some(size) = sys::guest_stack_size() {
        Mapping::name_qemu_guest_stack(&mut maps, size);
    }
    maps
}

/// Size and kind of an access from QEMU's meminfo, through the spill file's decoding table
/// (filled once through the API at start) instead of two FFI calls per access.
#[inline]
fn decode(info: u32) -> (u8, AccessKind) {
    decode_in(slots::decode_table(), info)
}

/// [`decode`] with the decoding table already at hand (an encoder takes it once per chunk).
#[inline(always)]
fn decode_in(table: &[u8], info: u32) -> (u8, AccessKind) {
    let entry = table.get(info as usize).copied().unwrap_or(0);
    spill::decode_info(entry).unwrap_or_else(|| decode_by_qemu(info))
}

/// [`decode`] by QEMU's functions (no table: live RDX has none).
fn decode_by_qemu(info: u32) -> (u8, AccessKind) {
    // SAFETY: pure decoding of a meminfo value QEMU gave us.
    let (shift, store) = unsafe {
        (
            qemu_plugin_mem_size_shift(info),
            qemu_plugin_mem_is_store(info),
        )
    };
    let kind = if store {
        AccessKind::Store
    } else {
        AccessKind::Load
    };
    // (Sizes up to 128 bytes; a u8 holds no more.)
    (1u8 << shift.min(7), kind)
}

struct WriterReport {
    chunks: u64,
    bytes: u64,
    errors: Vec<String>,
}

/// An encoder thread: takes queued slots, encodes each into a complete frame and hands it to
/// the writer. Several run at once; the slot stays queued (mgbench would write it after a
/// death) until the writer has written its frame.
fn encoder_loop(rx: std::sync::Arc<Mutex<Receiver<u32>>>, level: i32) {
    sys::block_all_signals();
    let p = plugin();
    let mut w = TraceWriter::append(Vec::new());
    w.set_level(level);
    let mut samples: Vec<SampleHeader> = Vec::new();
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok(slot) = next else {
            return;
        };
        let (header, raw_samples, accesses) = slots::contents(slot);
        let seq = header.seq.load(Ordering::Acquire);
        let n = accesses.len() as u64;
        let frame = if p.failed.load(Ordering::Relaxed) {
            None
        } else {
            samples.clear();
            samples.extend(raw_samples.iter().map(|r| SampleHeader {
                id: r.id,
                skipped_before: r.skipped_before,
                len: r.len,
            }));
            let table = slots::decode_table();
            let decoded = accesses.iter().map(|r| {
                // The slot was written on the vCPU's core: without this, reading it was 60%
                // of an encoder's time. Each record's own line (2.7 records share one): a
                // prefetch every other record measured the same.
                sys::prefetch_read(std::ptr::from_ref(r).wrapping_add(READ_AHEAD));
                let (size, kind) = decode_in(table, r.info);
                Access {
                    ip: r.ip,
                    addr: r.addr,
                    size,
                    kind,
                }
            });
            let thread = header.thread.load(Ordering::Acquire);
            // Into memory: cannot fail.
            let _ = w.write_accesses(thread, &samples, decoded, accesses.len());
            Some(std::mem::take(w.get_mut()))
        };
        let msg = Msg::Frame {
            seq,
            slot,
            frame,
            accesses: n,
        };
        if p.tx.send(msg).is_err() {
            return;
        }
    }
}

fn writer_loop(rx: Receiver<Msg>, file: &'static fds::Guarded) -> WriterReport {
    sys::block_all_signals();
    // Unbuffered: each frame is one write(2), so a frame handed to the kernel survives the
    // guest dying from a signal (QEMU then skips plugin exit hooks).
    // Where the plugin's frames start: mgbench wrote the header.
    let start = file.with(|f| f.metadata().map(|m| m.len())).unwrap_or(0);
    slots::set_committed(start);
    let mut w = TraceWriter::append(fds::Writer(file));
    let mut report = WriterReport {
        chunks: 0,
        bytes: 0,
        errors: Vec::new(),
    };
    let p = plugin();
    let progress = p
        .cfg
        .progress
        .as_ref()
        .and_then(|path| fds::open(path, false).ok());
    let mut recorded = 0u64;
    let fail = |report: &mut WriterReport, e: std::io::Error| {
        if report.errors.is_empty() {
            let hint = if e.raw_os_error() == Some(libc::ENOSPC) {
                " (disk full): recording stopped, everything written before is readable"
            } else {
                ": recording stopped"
            };
            report.errors.push(format!("cannot write trace: {e}{hint}"));
            sys::outs(&report.errors[0]);
        }
        p.failed.store(true, Ordering::Relaxed);
    };
    // Encoded frames waiting for the ones queued before them.
    let mut ready: std::collections::BTreeMap<u64, (u32, Option<Vec<u8>>, u64)> =
        std::collections::BTreeMap::new();
    let mut next_seq = 0u64;
    let mut shutdown = false;
    while !(shutdown && next_seq >= slots::queued()) {
        let Ok(msg) = rx.recv() else {
            break;
        };
        let result = match msg {
            Msg::Frame {
                seq,
                slot,
                frame,
                accesses,
            } => {
                ready.insert(seq, (slot, frame, accesses));
                while let Some((slot, frame, n)) = ready.remove(&next_seq) {
                    next_seq += 1;
                    let (header, _, _) = slots::contents(slot);
                    match frame {
                        Some(bytes) if !p.failed.load(Ordering::Relaxed) => {
                            // If QEMU dies from here until the slot is released, mgbench cuts
                            // the trace back to this offset and writes the slot again.
                            header
                                .write_offset
                                .store(start + w.bytes_written(), Ordering::Release);
                            header.state.store(spill::WRITING, Ordering::Release);
                            let written = w.write_encoded(&bytes);
                            if written.is_ok() {
                                slots::set_committed(start + w.bytes_written());
                                report.chunks += 1;
                                recorded += n;
                            }
                            slots::release(slot);
                            if let Err(e) = written {
                                fail(&mut report, e);
                            }
                        }
                        _ => slots::release(slot),
                    }
                }
                if let Some(f) = &progress {
                    use std::os::unix::fs::FileExt;
                    let mut totals = [0u8; 16];
                    totals[..8].copy_from_slice(&recorded.to_le_bytes());
                    totals[8..].copy_from_slice(&w.bytes_written().to_le_bytes());
                    // Progress is cosmetic: a failed write changes nothing else.
                    let _ = f.try_with(|f| f.write_at(&totals, 0));
                }
                Ok(())
            }
            Msg::Mappings(_) | Msg::Note(_) if p.failed.load(Ordering::Relaxed) => Ok(()),
            Msg::Mappings(m) => w.write_mappings(&m),
            Msg::Note(n) => w.write_note(&n),
            Msg::Shutdown => {
                shutdown = true;
                Ok(())
            }
        };
        match result {
            Ok(()) => slots::set_committed(start + w.bytes_written()),
            Err(e) => fail(&mut report, e),
        }
    }
    if let Err(e) = w.flush() {
        fail(&mut report, e);
    }
    report.bytes = w.bytes_written();
    report
}

extern "C" fn at_exit(_id: qemu_plugin_id_t, _udata: *mut c_void) {
    let p = plugin();
    if std::process::id() != p.pid {
        // A forked child exits: the writer thread, the trace and the status file belong to
        // the parent (the child's threads did not survive fork; joining one would abort the
        // child and change its exit status).
        return;
    }
    let mut recorded = 0u64;
    let mut skipped = 0u64;
    let mut threads = 0u64;
    let mut threads_recorded = 0u64;
    for (vcpu, n) in switch::take_credits() {
        // SAFETY: atexit runs with every vCPU stopped.
        unsafe { credit_skips(vcpu, n) };
    }
    let retired: Vec<usize> = retired().lock().map(|r| r.clone()).unwrap_or_default();
    let live = VCPUS
        .iter()
        .map(|s| s.load(Ordering::Acquire))
        .filter(|p| !p.is_null());
    for ptr in live.chain(retired.into_iter().map(|u| u as *mut Vcpu)) {
        // SAFETY: atexit runs with every vCPU stopped; each pointer is a leaked Box<Vcpu>.
        let v = unsafe { &mut *ptr };
        v.flush(true);
        v.skipped_total += v.skipped;
        v.skipped = 0;
        recorded += v.recorded_total;
        skipped += v.skipped_total;
        threads += 1;
        threads_recorded += u64::from(v.recorded_total > 0);
    }
    if switch::resets() > 0 {
        let _ = p.tx.send(Msg::Note(format!(
            "switched sampling: {} switches of instrumentation ({} in place, {} by flushing every translation){}",
            switch::resets(),
            switch::switches_in_place(),
            switch::resets().saturating_sub(switch::switches_in_place()),
            if switch::enabled() {
                ""
            } else {
                "; counting by callbacks since the second thread started"
            }
        )));
    }
    let (segv, bus) = switch::other_faults();
    if switch::resets() > 0 {
        if let Some(note) = faults_note(segv, bus) {
            let _ = p.tx.send(Msg::Note(note));
        }
    }
    if let Some(note) = children_note() {
        let _ = p.tx.send(Msg::Note(note));
    }
    let _ = p.tx.send(Msg::Shutdown);
    let report = p
        .writer
        .lock()
        .ok()
        .and_then(|mut w| w.take())
        .and_then(|h| h.join().ok())
        .unwrap_or(WriterReport {
            chunks: 0,
            bytes: 0,
            errors: vec!["writer thread failed".into()],
        });
    if let Some(path) = &p.cfg.status {
        let (found, unfound) = match p.roi_runtime.lock() {
            Ok(rt) => (rt.found.clone(), rt.late.clone()),
            Err(_) => (Vec::new(), Vec::new()),
        };
        let json = serde_json::json!({
            "roi_found": found,
            "roi_unfound": unfound,
            "recorded": recorded,
            "skipped": skipped,
            "threads": threads,
            "threads_recorded": threads_recorded,
            "children": children(),
            "chunks": report.chunks,
            "resets": switch::resets(),
            "switches_in_place": switch::switches_in_place(),
            "bytes": report.bytes,
            "errors": report.errors,
        });
        if let Err(e) = std::fs::write(path, format!("{json}\n")) {
            sys::outs(&format!("cannot write status file {path}: {e}"));
        }
    }
}

/// Entry point called by QEMU when it loads the plugin.
///
/// # Safety
/// QEMU passes `argc` valid NUL-terminated strings in `argv`.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: qemu_plugin_id_t,
    info: *const qemu_info_t,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    if let Err(e) = sys::load_api() {
        sys::outs(&e);
        return 1;
    }
    // SAFETY: QEMU passes a valid info block for the duration of the call.
    if let Some(info) = unsafe { info.as_ref() } {
        if info.system_emulation {
            sys::outs("only QEMU user mode (qemu-x86_64) is supported");
            return 1;
        }
    }
    let args: Vec<String> = (0..argc.max(0) as usize)
        .filter_map(|i| {
            // SAFETY: i < argc, and each argv entry is a valid C string (QEMU's contract).
            let p = unsafe { *argv.add(i) };
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect();
    // `floor=1`: an empty memory callback on every instruction and nothing else, the least
    // any callback-based recorder pays (scripts/bench-capture.py's floor).
    if args.iter().any(|a| a == "floor=1") {
        // SAFETY: registering a callback with the id QEMU gave us.
        unsafe { qemu_plugin_register_vcpu_tb_trans_cb(id, floor_tb_trans) };
        return 0;
    }
    let cfg = match Config::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            sys::outs(&format!("bad arguments: {e}"));
            return 1;
        }
    };
    pieces::init(decode_by_qemu);
    if let Some(r) = cfg.rdx {
        if let Some(path) = cfg.rdx_check {
            fixed::check_into(path);
        }
        let started = rdx::init(&cfg.out, r)
            .and_then(|()| switch::init(id, r.adaptive || r.period >= rdx::MIN_INLINE));
        if let Err(e) = started {
            sys::outs(&e);
            return 1;
        }
        if r.prefault {
            prefault::init(prefault::default_budget());
        }
        register_rdx_callbacks(id);
        return 0;
    }
    let file = match fds::open(&cfg.out, true) {
        Ok(f) => f,
        Err(e) => {
            sys::outs(&format!("cannot open trace {}: {e}", cfg.out));
            return 1;
        }
    };
    if let Err(e) = slots::init(cfg.spill.as_deref()) {
        sys::outs(&e);
        return 1;
    }
    let (tx, rx) = sync_channel::<Msg>(QUEUE);
    let (chunks, chunks_rx) = sync_channel::<u32>(QUEUE);
    let level = cfg.level;
    let state = Plugin {
        cfg,
        pid: std::process::id(),
        tx,
        chunks,
        writer: Mutex::new(None),
        failed: AtomicBool::new(false),
        maps: Mutex::new(Vec::new()),
        roi_runtime: Mutex::new(RoiRuntime::default()),
    };
    if PLUGIN.set(state).is_err() {
        sys::outs("loaded twice");
        return 1;
    }
    let handle = std::thread::Builder::new()
        .name("mgbench-writer".into())
        .spawn(move || writer_loop(rx, file));
    match handle {
        Ok(h) => {
            if let Ok(mut w) = plugin().writer.lock() {
                *w = Some(h);
            }
        }
        Err(e) => {
            sys::outs(&format!("cannot start writer thread: {e}"));
            return 1;
        }
    }
    let encoders = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_ENCODERS);
    let chunks_rx = std::sync::Arc::new(Mutex::new(chunks_rx));
    for i in 0..encoders {
        let rx = std::sync::Arc::clone(&chunks_rx);
        let spawned = std::thread::Builder::new()
            .name(format!("mgbench-encode{i}"))
            .spawn(move || encoder_loop(rx, level));
        if let Err(e) = spawned {
            sys::outs(&format!("cannot start encoder thread: {e}"));
            return 1;
        }
    }
    let c = &plugin().cfg;
    let switched = c.window != u64::MAX
        && mgbench_capture::spill::counts_inline(c.window, c.period, c.roi_mode != RoiMode::None);
    if c.window != u64::MAX {
        let how = if switched {
            "skips counted inline between windows (switched), each at least period - window long"
        } else if c.roi_mode != RoiMode::None {
            // Whether an access is in the ROI is known at the access alone (inclusive: the
            // gate that the function's entry opens and its return closes).
            "skips counted by callbacks, each exactly period - window long (--roi: every access is checked against the ROI, at about the cost of an empty callback on each)"
        } else {
            "skips counted by callbacks, each exactly period - window long"
        };
        let _ = plugin().tx.send(Msg::Note(format!(
            "sampled: window {} period {}; {how}; each thread's first window starts at a random point of its first period (seed {})",
            c.window, c.period, c.seed
        )));
    }
    if let Err(e) = switch::init(id, switched) {
        sys::outs(&e);
        return 1;
    }
    register_callbacks(id);
    0
}

fn register_callbacks(id: qemu_plugin_id_t) {
    // SAFETY: registering callbacks with the id QEMU gave us.
    unsafe {
        qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
        qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
        qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, syscall_ret);
        qemu_plugin_register_vcpu_syscall_cb(id, syscall_entry::<false>);
        qemu_plugin_register_atexit_cb(id, at_exit, ptr::null_mut());
    }
}

/// A switch of instrumentation by a flush is done (every vCPU stopped, all translations
/// flushed): switch, and register the callbacks again (a reset removed them).
pub(crate) extern "C" fn on_reset(id: qemu_plugin_id_t) {
    // Where switches flush, the one counter.
    switched(0);
    if rdx::active() {
        register_rdx_callbacks(id);
    } else {
        register_callbacks(id);
    }
}

/// Counter `c`'s switch is done: its vCPU runs no guest code (every one is stopped after a
/// flush, or it is between blocks, in its other set of translations, on its own thread), and
/// none of the blocks it runs next were made for the mode switched from. Credit what the
/// counter holds and set the mode to translate in.
pub(crate) fn switched(c: usize) {
    if rdx::active() {
        rdx::switched();
        switch::on_reset(c, rdx::credit);
        return;
    }
    // SAFETY: the counter's vCPU runs no guest code or a callback now (see above), and
    // crediting touches only its state.
    switch::on_reset(c, |vcpu, n| unsafe { credit_skips(vcpu, n) });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_faults_note_names_each_kind_seen() {
        assert_eq!(faults_note(0, 0), None);
        let note = |segv, bus| faults_note(segv, bus).unwrap();
        assert!(note(100, 0).starts_with("100 fault(s) (SIGSEGV) while sampled"));
        assert!(note(0, 7).starts_with("7 fault(s) (SIGBUS) while sampled"));
        assert!(note(3, 100).starts_with("103 fault(s) (3 SIGSEGV, 100 SIGBUS) while sampled"));
    }

    #[test]
    fn late_roi_names_are_parsed() {
        let c = Config::parse(&args(&[
            "out=/tmp/t",
            "roi_late=lib_gather",
            "roi_searched=/usr/lib/x86_64-linux-gnu/libc.so.6",
            "roi_mode=inclusive",
        ]))
        .unwrap();
        assert_eq!(c.late, ["lib_gather"]);
        assert_eq!(c.searched, ["/usr/lib/x86_64-linux-gnu/libc.so.6"]);
    }

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_bytes_before_a_return_address_are_a_call() {
        let before = |tail: &[u8]| {
            let mut code = [0x90u8; 7];
            code[7 - tail.len()..].copy_from_slice(tail);
            call_ends_at(&code)
        };
        // call rel32; call rax; call r11 (REX); call [rip+d32]; call [rax+d8];
        // call [rsp+d8] (SIB); call [rax*8+d32] (SIB, no base).
        assert!(before(&[0xE8, 1, 2, 3, 4]));
        assert!(before(&[0xFF, 0xD0]));
        assert!(before(&[0x41, 0xFF, 0xD3]));
        assert!(before(&[0xFF, 0x15, 1, 2, 3, 4]));
        assert!(before(&[0xFF, 0x50, 8]));
        assert!(before(&[0xFF, 0x54, 0x24, 8]));
        assert!(before(&[0xFF, 0x14, 0xC5, 1, 2, 3, 4]));
        // jmp rax (FF /4), a push, plain data.
        assert!(!before(&[0xFF, 0xE0]));
        assert!(!before(&[0x55]));
        assert!(!before(&[0, 0, 0, 0, 0, 0, 0]));
    }

    #[test]
    fn config_parsing() {
        let c =
            Config::parse(&args(&["out=/t", "window=8", "period=32", "roi=0x10:0x20"])).unwrap();
        assert_eq!((c.window, c.period), (8, 32));
        assert_eq!(c.roi, vec![(0x10, 0x20)]);
        assert_eq!(c.roi_mode, RoiMode::Inclusive);
        assert!(Config::parse(&args(&["window=8"])).is_err());
        assert!(Config::parse(&args(&["out=/t", "window=8", "period=4"])).is_err());
        assert!(Config::parse(&args(&["out=/t", "bogus=1"])).is_err());
    }

    #[test]
    fn first_windows_start_at_a_random_point_of_the_first_period() {
        let (w, p) = (4096u64, 1u64 << 20);
        let skips: Vec<u64> = (0..2000).map(|t| first_skip(7, t, w, p)).collect();
        assert!(skips.iter().all(|&s| s <= p - w));
        // Uniform: each tenth of the range holds about a tenth of the threads.
        for k in 0..10 {
            let lo = (p - w) * k / 10;
            let hi = (p - w) * (k + 1) / 10;
            let n = skips.iter().filter(|&&s| s >= lo && s < hi).count();
            assert!((140..=260).contains(&n), "tenth {k}: {n} of 2000");
        }
        // The same seed and thread give the same start; another seed another one.
        assert_eq!(first_skip(7, 3, w, p), skips[3]);
        assert_ne!(first_skip(8, 3, w, p), skips[3]);
        // Full capture (window = period) and windows as long as the period start at once.
        assert_eq!(first_skip(7, 3, u64::MAX, u64::MAX), 0);
        assert_eq!(first_skip(7, 3, 10, 10), 0);
        assert!(first_skip(7, 3, 10, 11) <= 1);
        assert!(Config::parse(&args(&["out=/t", "seed=x"])).is_err());
        assert_eq!(Config::parse(&args(&["out=/t", "seed=5"])).unwrap().seed, 5);
    }

    #[test]
    fn ret_detection() {
        assert!(is_ret(&[0xc3]));
        assert!(is_ret(&[0xf3, 0xc3]));
        assert!(is_ret(&[0xc2, 0x08, 0x00]));
        assert!(!is_ret(&[0xe8, 0, 0, 0, 0]));
    }

    #[test]
    fn call_detection() {
        assert!(is_call(&[0xe8, 0, 0, 0, 0])); // call rel32
        assert!(is_call(&[0xff, 0xd0])); // call *%rax
        assert!(is_call(&[0x41, 0xff, 0xd3])); // call *%r11
        assert!(is_call(&[0x3e, 0xff, 0xd0])); // notrack call *%rax
        assert!(is_call(&[0xff, 0x15, 0, 0, 0, 0])); // call *x(%rip)
        assert!(!is_call(&[0xff, 0xe0])); // jmp *%rax (FF /4)
        assert!(!is_call(&[0xff, 0xc0])); // inc %eax (FF /0)
        assert!(!is_call(&[0xe9, 0, 0, 0, 0])); // jmp rel32
        assert!(!is_call(&[0xc3]));
    }

    #[test]
    fn inlined_ranges_are_taken() {
        let c = Config::parse(&args(&[
            "out=/t",
            "inlined=0x10:0x20",
            "roi_mode=inclusive",
        ]))
        .unwrap();
        assert_eq!(c.inlined, vec![(0x10, 0x20)]);
        assert!(c.roi.is_empty());
        assert_eq!(
            Config::parse(&args(&["out=/t", "inlined=0x10:0x20"]))
                .unwrap()
                .roi_mode,
            RoiMode::Inclusive
        );
        assert!(Config::parse(&args(&["out=/t", "inlined=0x10"])).is_err());
    }
}
