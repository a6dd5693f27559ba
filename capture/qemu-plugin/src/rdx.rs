//! Live RDX (`mgbench reuse -- PROGRAM`): reuse distances sampled while the program runs,
//! with no trace.
//!
//! RDX takes one access every `period` (the use), watches its 8-byte word with a hardware
//! debug register, and measures the accesses between the use and the first access that
//! touches the word again (the reuse), from an access counter. Here:
//!
//! - the counter is QEMU's generated code (the inline add of `switch`), and the sample point
//!   switches in memory callbacks for one access, whose address becomes the use;
//! - the watchpoints are the machine's debug registers, set through perf on the vCPU thread:
//!   in user mode a guest address is the host address, so the register fires when the
//!   generated code (or QEMU on the guest's behalf) touches the word; the SIGTRAP handler
//!   reads the counter there, disarms the register and queues the trap;
//! - the reservoir (which register a new sample takes when all are busy) is RDX's, weighted
//!   by the samples' periods where the period adapts, with the plugin's own random numbers;
//!   every sample with its register and every trap go to an events file, from which mgbench rebuilds the histograms with the same bookkeeping as the
//!   trace-driven run (`mgbench_synth::locality::rdx`).
//!
//! Threads are measured as per-thread hardware would: each guest thread has its own access
//! count, period, reservoir and debug registers (perf watchpoints belong to the thread that
//! opens them, so another thread's touch of a watched word does not fire), and its events
//! carry its number. Switched in place (QEMU 7.2) each thread counts inline with a counter
//! of its own (see `switch`); where every switch flushes, the inline counter is one for all,
//! and every thread counts in callbacks once a second thread starts.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use mgbench_capture::trace::Mapping;

use crate::switch;
use crate::sys::{self, Watchpoint};

/// Debug registers used at most (x86 has 4; perf may give fewer).
pub const MAX_WATCH: usize = mgbench_capture::native_rdx::DEBUG_REGISTERS;
/// Guest threads followed at once (by vCPU index: QEMU numbers a new thread one above the
/// highest index alive); threads beyond run unsampled, and the report says so. Their
/// per-thread state is zero until used (`Vcpu::new`), so the table costs no memory
/// until threads run; each followed thread also holds `MAX_WATCH` descriptors (see `fds`).
pub const MAX_THREADS: usize = 1024;
/// Marks the SIGTRAPs of our watchpoints (`sig_data = MAGIC << 16 | vcpu << 2 | register`).
const MAGIC: u64 = 0x6d67_6264_7278; // "mgbdrx"
const _: () = assert!(
    MAX_WATCH <= 4 && MAX_THREADS <= 1 << 14,
    "sig_data's fields"
);
const RING: usize = 64;

/// Live RDX is the plugin's mode.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// No more samples (the watchpoints failed).
static STOPPED: AtomicBool = AtomicBool::new(false);
/// Blocks QEMU translated again after a switch of ours (most of a sample's cost where every
/// switch flushes them all and the program's hot code is translated again). Switched in
/// place, a block's first translation in a set (each thread's counting set, the callbacks'
/// set) is not counted: it comes once, at a thread's first switches, not at every sample.
/// First translations of new code are the program's own, and so are QEMU's own
/// retranslations between switches (other CPU flags, a block cut short by a fault: 1334 in
/// the start of Debian's sort).
static RETRANSLATED: AtomicU64 = AtomicU64::new(0);
/// Switches so far between counting and callbacks (flushes, or in place).
static SWITCHES: AtomicU64 = AtomicU64::new(0);
/// Guest addresses of the blocks translated so far, and the set (switched in place), with the
/// switch count at their last translation.
static SEEN: Mutex<Option<std::collections::HashMap<(u64, u32), u64>>> = Mutex::new(None);

/// What a guest thread's callbacks and its signal handler share, without the lock. Only the
/// thread itself writes `mark`, `set` and `skip_left`, except credits, which come on its own
/// thread (a switch in place, its exit), with every vCPU stopped (a flush, the exit) or from
/// the creator's clone call.
///
/// The thread's time (accesses counted by the callbacks and credits, without the inline
/// counter's uncredited part) is `mark + set - skip_left`: a callback between samples only
/// counts `skip_left` down, one load and one store (where switches flush, with threads every
/// access of the run comes through it).
struct Vcpu {
    /// A thread is followed on this vCPU index.
    live: AtomicBool,
    /// The thread's time when `skip_left` was last set ...
    mark: AtomicU64,
    /// ... and what it was set to.
    set: AtomicU64,
    /// Accesses to the thread's next sample (`u64::MAX`: none).
    skip_left: AtomicU64,
    /// While a check is forced at the next access (`skip_left` zero): what `skip_left` was.
    resume: AtomicU64,
    /// The thread's first callback ran.
    started: AtomicBool,
    /// Registers armed now (for the signal handler).
    armed: [AtomicBool; MAX_WATCH],
    /// The registers' perf descriptors plus one (0: none), for the signal handler.
    fds: [AtomicI32; MAX_WATCH],
    /// Traps not yet logged: `register << 56 | time`.
    traps: [AtomicU64; RING],
    traps_in: AtomicUsize,
}

impl Vcpu {
    /// All zero, so that the table of them takes no room in the library and no memory until
    /// a thread runs on it. A slot no thread follows has `skip_left` zero: a stray access
    /// there takes the slow path once, which finds it not live and sets it to `u64::MAX`.
    const fn new() -> Vcpu {
        Vcpu {
            live: AtomicBool::new(false),
            mark: AtomicU64::new(0),
            set: AtomicU64::new(0),
            skip_left: AtomicU64::new(0),
            resume: AtomicU64::new(0),
            started: AtomicBool::new(false),
            armed: [const { AtomicBool::new(false) }; MAX_WATCH],
            fds: [const { AtomicI32::new(0) }; MAX_WATCH],
            traps: [const { AtomicU64::new(0) }; RING],
            traps_in: AtomicUsize::new(0),
        }
    }

    /// Register `k`'s perf descriptor (-1: none). Async-signal-safe.
    fn fd(&self, k: usize) -> std::ffi::c_int {
        self.fds[k].load(Ordering::Acquire) - 1
    }

    /// Sets register `k`'s perf descriptor (-1: none); returns the one it had.
    fn set_fd(&self, k: usize, fd: std::ffi::c_int) -> std::ffi::c_int {
        self.fds[k].swap(fd + 1, Ordering::AcqRel) - 1
    }

    /// The thread's time. Async-signal-safe.
    fn time(&self) -> u64 {
        let left = self.skip_left.load(Ordering::Acquire);
        let set = self.set.load(Ordering::Acquire);
        self.mark
            .load(Ordering::Acquire)
            .wrapping_add(set.wrapping_sub(left))
    }

    /// Makes the thread's next access take the slow path ([`sample_due`]) without moving
    /// its sample (in callbacks only: counting inline, `skip_left` is the credit's).
    fn force_check(&self) {
        let left = self.skip_left.load(Ordering::Acquire);
        if left == 0 || left == u64::MAX {
            return;
        }
        let now = self.time();
        self.resume.store(left, Ordering::Release);
        self.restart(now, 0);
    }

    /// The thread's time is `now`, with `left` accesses to its next sample.
    fn restart(&self, now: u64, left: u64) {
        self.mark.store(now, Ordering::Release);
        self.set.store(left, Ordering::Release);
        self.skip_left.store(left, Ordering::Release);
    }
}

static VCPUS: [Vcpu; MAX_THREADS] = [const { Vcpu::new() }; MAX_THREADS];

/// How live RDX samples (plugin arguments `rdx=PERIOD,rdx_watch=W,rdx_seed=S,rdx_jitter=J`,
/// and `rdx_adaptive=1` for the adaptive period, which starts at PERIOD), and whether large
/// new memory is touched first by a helper thread (`rdx_prefault=0|1`, see `prefault`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RdxArgs {
    pub period: u64,
    pub watch: usize,
    pub seed: u64,
    pub jitter: f64,
    pub adaptive: bool,
    pub prefault: bool,
}

/// The adaptive period doubles after this many samples: a run of any length gets a few
/// hundred samples early on (a short command-line run as well as a long solver; 640 in the
/// first 15.9 M accesses, counted in callbacks at 3.6-10 ns an access), and about
/// `AUTO_STAGE` more per doubling of its length (64 gave the live histograms of
/// scripts/rdx-accuracy.py a median stack S of 0.885 over its seven programs, 128 gave 0.938).
pub const AUTO_STAGE: u64 = 128;
/// Gaps of this many accesses and more are counted inline, shorter ones by the memory
/// callbacks: a sample that interrupts inline counting costs two flushes, about 0.4 ms,
/// which is what 2^17 accesses cost in callbacks (3.6 ns each on the integer gather, up to
/// 10 ns on floating-point code). Switched in place a sample costs 50 us, but a gap counted
/// inline ends when the poller looks (every 200 us: 400 K accesses of the gather), so
/// shorter inline gaps would not be the period the histograms weigh them by.
pub const MIN_INLINE: u64 = 1 << 17;
/// Under QEMU a sample that interrupts inline counting switches the instrumentation to
/// callbacks and back. Where QEMU keeps both sets of translations (`sys::keyed_translations`,
/// QEMU 7.2) a sample costs about this much wall time, its watchpoint and trap included
/// (scripts/bench-rdx-live.py at a period of 2^20: 50-80 us on the integer gather, SpMV and
/// gzip, up to 300 us on triad; 50 us let the adaptive period cost 13% over the counter on
/// SpMV, 100 us 6%) ...
pub const SAMPLE_SECONDS_IN_PLACE: f64 = 1e-4;
/// ... and where each switch flushes every translation, this much (0.4-0.5 ms on the demo
/// kernels) ...
pub const SAMPLE_SECONDS_FLUSHED: f64 = 4e-4;
/// ... plus this much per block QEMU translates again afterwards (after flushes, gzip: ~300
/// blocks and 3.3-5.6 ms a sample; in place, only the first switches translate).
pub const BLOCK_SECONDS: f64 = 1.5e-5;

/// What a sample that interrupts inline counting costs with this QEMU, before the blocks
/// translated again.
pub fn sample_seconds() -> f64 {
    if switch::in_place() {
        SAMPLE_SECONDS_IN_PLACE
    } else {
        SAMPLE_SECONDS_FLUSHED
    }
}
/// The share of the run's time the adaptive period lets such samples take.
pub const AUTO_COST: f64 = 0.05;

/// The period of the next gap: `first` doubled every [`AUTO_STAGE`] samples, and, where the
/// gaps are counted inline (`MIN_INLINE` and more), at least what keeps a sample's
/// cost (`sample_seconds`, plus `BLOCK_SECONDS` for each of the `retranslated` blocks of the
/// last gap) within [`AUTO_COST`] of the time the program takes at `rate` accesses a second.
pub fn adaptive_period(
    first: u64,
    samples: u64,
    retranslated: u64,
    rate: Option<f64>,
    sample_seconds: f64,
) -> u64 {
    let stage = (samples / AUTO_STAGE).min(40) as u32;
    let doubled = first.saturating_mul(1u64 << stage);
    if doubled < MIN_INLINE {
        return doubled;
    }
    let cost = sample_seconds + retranslated as f64 * BLOCK_SECONDS;
    let floor = rate.map_or(0.0, |r| r * cost / AUTO_COST);
    doubled.max(floor.min(1e18) as u64)
}

/// A sample-gap jitter setting (`key=v`): a fraction in [0, 1).
pub fn parse_jitter(key: &str, v: &str) -> Result<f64, String> {
    v.parse()
        .ok()
        .filter(|j| (0.0..1.0).contains(j))
        .ok_or_else(|| format!("{key}={v}: give a fraction in [0, 1)"))
}

/// One guest thread's sampler (under the state's lock).
struct Thread {
    /// The thread's number in the events file (in order of start; vCPU indices are reused).
    number: u32,
    /// Mean gap to the thread's next sample (the fixed period, or the adaptive one).
    period: u64,
    /// Samples taken (placed or dropped).
    samples: u64,
    /// `RETRANSLATED` at the last sample.
    retranslated_mark: u64,
    /// When the last sample was, and at which access (the run's rate between samples).
    last_sample: Option<(std::time::Instant, u64)>,
    /// Per register: the periods of the samples since it was last empty (its reservoir
    /// interval's weight; `n x period` at a fixed period).
    since: Vec<u64>,
    busy: Vec<bool>,
    order: Vec<usize>,
    watch: Vec<Watchpoint>,
    traps_out: usize,
    /// The gap before the thread's first sample.
    first_gap: u64,
}

/// The sampler's state: touched by the vCPU threads' callbacks and by atexit.
struct State {
    args: RdxArgs,
    out: &'static crate::fds::Guarded,
    rng: u64,
    /// The followed threads, by vCPU index.
    threads: Vec<Option<Thread>>,
    /// Threads started so far (the next one's number).
    started: u32,
    /// Threads that started beyond `MAX_THREADS` at once (not sampled).
    unfollowed: u32,
    /// Guest calls that closed every free number with some thread's registers (their
    /// samples dropped, the registers opened again at the thread's next sample).
    dropped_watch: u32,
    /// Samples that found no free descriptor for the thread's registers.
    unwatched: u64,
    /// Event lines not written yet (see [`State::write_out`]).
    held: Vec<u8>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// The measured process (set at init).
static PID: AtomicU32 = AtomicU32::new(0);

impl State {
    fn next(&mut self) -> u64 {
        let z = crate::splitmix64(self.rng);
        self.rng = self.rng.wrapping_add(crate::GOLDEN);
        z
    }

    /// Accesses to the next sample: uniform in `period x [1 - jitter, 1 + jitter]`.
    fn gap(&mut self, period: u64) -> u64 {
        let p = period as f64;
        let lo = p * (1.0 - self.args.jitter);
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((lo + u * 2.0 * p * self.args.jitter).round() as u64).max(1)
    }

    /// The gap to thread `v`'s next sample.
    fn thread_gap(&mut self, v: usize) -> u64 {
        let period = self.threads[v]
            .as_ref()
            .map_or(self.args.period, |t| t.period);
        self.gap(period)
    }

    /// Writes one event line. No allocation: the native path logs from signal handlers.
    fn log(&mut self, args: std::fmt::Arguments) {
        let mut buf = [0u8; 512];
        let mut c = std::io::Cursor::new(&mut buf[..]);
        let _ = c.write_fmt(args);
        let n = c.position() as usize;
        if n == buf.len() {
            // Cut short: keep the line a line, or the next event would run into it.
            buf[n - 1] = b'\n';
        }
        // A forked child (a shell running a command) inherits this state and the file: its
        // events are not the measured process's.
        if std::process::id() != PID.load(Ordering::Relaxed) {
            return;
        }
        // One write per event: a program that dies keeps what was logged before.
        self.write_out(&buf[..n]);
    }

    /// Writes event lines. While the file cannot be written (the program's call closing it
    /// runs, or it holds every descriptor number), they wait in memory for the next write:
    /// never natively (no calls are watched there), so nothing allocates in a handler.
    fn write_out(&mut self, bytes: &[u8]) {
        let held = std::mem::take(&mut self.held);
        let written = self.out.try_with(|mut f| {
            f.write_all(&held)?;
            f.write_all(bytes)
        });
        if written.is_none() {
            self.held = held;
            self.held.extend_from_slice(bytes);
        }
    }

    /// Starts following a thread on vCPU `v` (its first gap drawn, its time at zero).
    fn start_thread(&mut self, v: usize) {
        let number = self.started;
        self.started += 1;
        let w = self.args.watch;
        let c = &VCPUS[v];
        self.threads[v] = Some(Thread {
            number,
            period: self.args.period,
            samples: 0,
            retranslated_mark: RETRANSLATED.load(Ordering::Relaxed),
            last_sample: None,
            since: vec![0; w],
            busy: vec![false; w],
            order: (0..w).collect(),
            watch: Vec::new(),
            traps_out: c.traps_in.load(Ordering::Acquire),
            first_gap: 0,
        });
        // The thread's first callback decides whether its first gap is counted inline (it
        // must ask on its own thread).
        let first = self.gap(self.args.period);
        if let Some(t) = self.threads[v].as_mut() {
            t.first_gap = first;
        }
        c.restart(0, 0);
        c.started.store(false, Ordering::Release);
        c.live.store(true, Ordering::Release);
    }

    /// Logs thread `v`'s end at `now` (its registers closed) and stops following it.
    fn end_thread(&mut self, v: usize, now: u64) {
        let c = &VCPUS[v];
        for (k, armed) in c.armed.iter().enumerate() {
            armed.store(false, Ordering::Release);
            let fd = c.set_fd(k, -1);
            if fd >= 0 {
                sys::disarm_watchpoint(fd);
            }
        }
        self.drain_traps(v);
        c.live.store(false, Ordering::Release);
        c.restart(0, u64::MAX);
        if let Some(t) = self.threads[v].take() {
            self.log(format_args!("E {now} {}\n", t.number));
        }
    }

    /// Logs the traps thread `v`'s handler queued, in order, and frees their registers.
    fn drain_traps(&mut self, v: usize) {
        let c = &VCPUS[v];
        let n = c.traps_in.load(Ordering::Acquire);
        let Some(mut t) = self.threads[v].take() else {
            return;
        };
        while t.traps_out < n {
            let val = c.traps[t.traps_out % RING].load(Ordering::Acquire);
            t.traps_out += 1;
            let k = (val >> 56) as usize;
            let time = val & ((1 << 56) - 1);
            if k < t.busy.len() {
                t.busy[k] = false;
                t.since[k] = 0;
            }
            self.log(format_args!("T {k} {time} {}\n", t.number));
        }
        self.threads[v] = Some(t);
    }

    /// Opens thread `v`'s registers (on the calling thread, which must be `v`'s: perf
    /// watchpoints belong to the thread that opens them). False, with none open, when the
    /// process has no free descriptor (the program holds every number for now).
    fn open_watchpoints(&mut self, v: usize, addr: u64) -> Result<bool, String> {
        sys::install_trap_hook(on_trap)?;
        let watch = self.args.watch;
        let Some(t) = self.threads[v].as_mut() else {
            return Err(format!("thread on vCPU {v} is not followed"));
        };
        let c = &VCPUS[v];
        for k in 0..watch {
            let w = match Watchpoint::open(addr & !7) {
                Ok(w) => w,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    for (k, _) in t.watch.drain(..).enumerate() {
                        c.set_fd(k, -1);
                    }
                    return Ok(false);
                }
                Err(e) => return Err(format!(
                    "cannot set hardware watchpoint {k} through perf_event_open (PERF_TYPE_BREAKPOINT): {e}; live RDX needs the breakpoint PMU (see kernel.perf_event_paranoid)"
                )),
            };
            c.set_fd(k, w.fd());
            t.watch.push(w);
        }
        Ok(true)
    }

    /// A sample of thread `v`: RDX's reservoir picks the register it goes to, if any.
    fn sample(&mut self, v: usize, ip: u64, addr: u64, now: u64) {
        let Some(first) = self.threads[v].as_ref().map(|t| t.watch.is_empty()) else {
            return;
        };
        if first {
            let fresh = self.threads.iter().flatten().all(|t| t.watch.is_empty());
            match self.open_watchpoints(v, addr) {
                Ok(true) if fresh => self.log_maps(),
                Ok(true) => {}
                Ok(false) => {
                    // Taken as a sample no register could hold; the next one tries again.
                    self.unwatched += 1;
                    if self.unwatched == 1 {
                        let (limit, watch) = (sys::descriptor_limit(), self.args.watch);
                        self.log(format_args!(
                            "N no free descriptor when a sample came (ulimit -n {limit} holds the program's files and {watch} per sampled thread): samples then were dropped as if every watchpoint were busy; a higher ulimit -n watches more threads\n"
                        ));
                    }
                }
                Err(e) => {
                    sys::outs(&e);
                    self.log(format_args!("N error: {e}\n"));
                    STOPPED.store(true, Ordering::Release);
                    return;
                }
            }
        }
        self.drain_traps(v);
        let Some(mut t) = self.threads[v].take() else {
            return;
        };
        // The gap that led here was drawn from `period`: the sample stands for that many.
        let period = t.period;
        t.samples += 1;
        if self.args.adaptive {
            t.period = self.next_period(&mut t, now);
        }
        let w = t.busy.len();
        let weight = period.max(1);
        for k in 0..w {
            if t.busy[k] {
                t.since[k] = t.since[k].saturating_add(weight);
            }
        }
        let chosen = match t.busy.iter().position(|b| !b) {
            _ if t.watch.is_empty() => None,
            Some(k) => {
                t.since[k] = weight;
                Some(k)
            }
            None => {
                // Visit the registers in random order; register k takes the sample with
                // probability period / (the periods of the samples since it was last empty,
                // this one's included): 1 / n at a fixed period, and weighted where the
                // period adapts, so that a late sample, standing for a long period, is not
                // kept out by the many short-period samples before it (mgbench's bookkeeping,
                // `mgbench_synth::locality::rdx`, computes the same probabilities).
                for i in (1..w).rev() {
                    let j = (self.next() % (i as u64 + 1)) as usize;
                    t.order.swap(i, j);
                }
                let mut taken = None;
                for idx in 0..w {
                    let k = t.order[idx];
                    if self.next() % t.since[k].max(1) < weight {
                        taken = Some(k);
                        break;
                    }
                }
                taken
            }
        };
        let word = addr & !7;
        let number = t.number;
        let placed = match chosen {
            Some(k) => {
                let c = &VCPUS[v];
                c.armed[k].store(true, Ordering::Release);
                let data = MAGIC << 16 | (v as u64) << 2 | k as u64;
                if t.watch[k].arm(word, 8, data) {
                    t.busy[k] = true;
                    Ok(Some(k))
                } else {
                    c.armed[k].store(false, Ordering::Release);
                    Err(k)
                }
            }
            None => Ok(None),
        };
        self.threads[v] = Some(t);
        match placed {
            Ok(Some(k)) => self.log(format_args!(
                "S {ip:#x} {addr:#x} {now} {k} {period} {number}\n"
            )),
            Ok(None) => self.log(format_args!(
                "S {ip:#x} {addr:#x} {now} - {period} {number}\n"
            )),
            Err(k) => {
                let e = std::io::Error::last_os_error();
                self.log(format_args!(
                    "N error: cannot arm watchpoint {k} at {word:#x}: {e}\n"
                ));
                STOPPED.store(true, Ordering::Release);
            }
        }
    }

    /// The adaptive period after a sample of thread `t` at access `now`. The cost floor
    /// (see [`adaptive_period`]) applies only while gaps can be counted inline: with
    /// threads every access is counted in callbacks and a sample costs no flush.
    fn next_period(&self, t: &mut Thread, now: u64) -> u64 {
        let now_re = RETRANSLATED.load(Ordering::Relaxed);
        let re = now_re - t.retranslated_mark;
        t.retranslated_mark = now_re;
        let clock = std::time::Instant::now();
        // Natively a sample costs a signal, not a flush: the doubling alone.
        let rate = match (t.last_sample, NATIVE_COUNTER.load(Ordering::Acquire)) {
            (Some((t0, n0)), -1) if switch::enabled() => {
                let secs = clock.duration_since(t0).as_secs_f64();
                (secs > 0.0).then(|| now.saturating_sub(n0) as f64 / secs)
            }
            _ => None,
        };
        t.last_sample = Some((clock, now));
        adaptive_period(self.args.period, t.samples, re, rate, sample_seconds())
    }

    /// Logs the mappings (allocates: not from a signal handler).
    fn log_maps(&mut self) {
        self.log_maps_in(0, u64::MAX);
    }

    /// Logs the mappings that overlap `lo..hi`.
    fn log_maps_in(&mut self, lo: u64, hi: u64) {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let mut lines = String::new();
        for l in text.lines() {
            let overlaps = Mapping::parse_proc_maps(l)
                .first()
                .is_some_and(|m| m.start < hi && m.end > lo);
            if overlaps {
                lines.push_str("M ");
                lines.push_str(l);
                lines.push('\n');
            }
        }
        if !lines.is_empty() {
            self.write_out(lines.as_bytes());
        }
    }
}

thread_local! {
    /// The length of this thread's pending `mmap` of a file's code (0: none).
    static CODE_MAP: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The guest calls `mmap(_, len, prot, flags, fd, _)` on this thread. The mappings are logged
/// at the first sample and at the end; code a program maps from a file in between and unmaps
/// again before it ends (a library it opens and closes, the copy of its own code that V8 in
/// `node` maps and unmaps) would be in neither, and its instructions would go unnamed.
pub fn before_mmap(len: u64, prot: u64, flags: u64, fd: u64) {
    const PROT_EXEC: u64 = 4;
    const MAP_ANONYMOUS: u64 = 0x20;
    let code = prot & PROT_EXEC != 0 && flags & MAP_ANONYMOUS == 0 && (fd as u32 as i32) >= 0;
    CODE_MAP.with(|c| c.set(if code { len } else { 0 }));
}

/// The guest's `mmap` returned `ret` on this thread: logs the mappings of the file's code it
/// made (see [`before_mmap`]).
pub fn after_mmap(ret: i64) {
    let len = CODE_MAP.with(|c| c.replace(0));
    if len == 0 || (-4095..0).contains(&ret) || std::process::id() != PID.load(Ordering::Relaxed) {
        return;
    }
    let lo = ret as u64;
    if let Ok(mut g) = STATE.lock() {
        if let Some(st) = g.as_mut() {
            st.log_maps_in(lo, lo.saturating_add(len));
        }
    }
}

/// The SIGTRAP of a watchpoint (on the vCPU thread that touched the word, right after the
/// access, before that access is counted): queue the trap with the time of the reuse.
fn on_trap(data: u64) -> bool {
    if data >> 16 != MAGIC {
        return false;
    }
    let v = ((data >> 2) & 0x3fff) as usize;
    let k = (data & 3) as usize;
    let (Some(c), true) = (VCPUS.get(v), k < MAX_WATCH) else {
        return true;
    };
    let fd = c.fd(k);
    if fd >= 0 {
        sys::disarm_watchpoint(fd);
    }
    if !c.armed[k].swap(false, Ordering::AcqRel) || STOPPED.load(Ordering::Acquire) {
        return true;
    }
    let now = now(v);
    let i = c.traps_in.load(Ordering::Acquire);
    c.traps[i % RING].store((k as u64) << 56 | now, Ordering::Release);
    c.traps_in.store(i + 1, Ordering::Release);
    true
}

/// The access counter of the native path (a perf descriptor), or -1 under QEMU.
static NATIVE_COUNTER: AtomicI32 = AtomicI32::new(-1);

/// Thread `v`'s accesses so far: its callbacks and credits, plus the uncredited part of its
/// inline counter; natively the PMU's counter.
/// Async-signal-safe.
fn now(v: usize) -> u64 {
    match NATIVE_COUNTER.load(Ordering::Acquire) {
        fd if fd >= 0 => sys::counter_value(fd),
        _ => VCPUS[v].time() + switch::uncredited(v as u32),
    }
}

/// The native path: `fd` counts the accesses from now on.
pub fn use_native_counter(fd: i32) {
    NATIVE_COUNTER.store(fd, Ordering::Release);
}

/// Native path: a sample the PMU took (in its signal handler). Returns the accesses to the
/// next sample (RDX's jittered period), or None when sampling has stopped.
pub fn native_sample(ip: u64, addr: u64) -> Option<u64> {
    if STOPPED.load(Ordering::Acquire) {
        return None;
    }
    let now = now(0);
    // try_lock: the handler never waits; the lock is only held by the same thread outside
    // handlers after the sampler's signal was blocked (exit), so it is free here.
    let Ok(mut guard) = STATE.try_lock() else {
        return None;
    };
    let st = guard.as_mut()?;
    st.sample(0, ip, addr, now);
    Some(st.thread_gap(0))
}

/// Native path: opens the watchpoints on the calling thread (from the library's
/// constructor, outside any handler) and logs the mappings.
pub fn native_start(any_addr: u64, note: &str) -> Result<(), String> {
    let mut g = STATE
        .lock()
        .map_err(|_| "state lock poisoned".to_string())?;
    let st = g.as_mut().ok_or("live RDX is not set up")?;
    st.open_watchpoints(0, any_addr)?;
    st.log(format_args!("N {note}\n"));
    st.log_maps();
    Ok(())
}

/// Native path: the first sample's distance (RDX's jittered period).
pub fn native_first_gap() -> u64 {
    STATE
        .lock()
        .ok()
        .and_then(|mut g| g.as_mut().map(|st| st.thread_gap(0)))
        .unwrap_or(1)
}

/// Stops sampling after an error (logged as a note).
pub fn native_stop(why: &str) {
    STOPPED.store(true, Ordering::Release);
    if let Ok(mut g) = STATE.lock() {
        if let Some(st) = g.as_mut() {
            st.log(format_args!("N error: {why}\n"));
        }
    }
}

/// Logs the child processes the program started so far (`C n`; none while there are none):
/// their accesses are not measured. Logged where the run may end (exit, execve).
pub fn children(n: u64) {
    if n == 0 {
        return;
    }
    if let Ok(mut g) = STATE.try_lock() {
        if let Some(st) = g.as_mut() {
            st.log(format_args!("C {n}\n"));
        }
    }
}

pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

pub fn stopped() -> bool {
    STOPPED.load(Ordering::Acquire)
}

/// Sets live RDX up, following the first thread on vCPU 0: the events file `out` gets a
/// header line.
pub fn init(out: &str, args: RdxArgs) -> Result<(), String> {
    if args.watch == 0 || args.watch > MAX_WATCH {
        return Err(format!(
            "rdx_watch={}: give 1 to {MAX_WATCH} (x86 debug registers)",
            args.watch
        ));
    }
    let file =
        crate::fds::open(out, true).map_err(|e| format!("cannot open events file {out}: {e}"))?;
    PID.store(std::process::id(), Ordering::Relaxed);
    let mut st = State {
        args,
        out: file,
        rng: args.seed ^ 0x5eed,
        threads: (0..MAX_THREADS).map(|_| None).collect(),
        started: 0,
        unfollowed: 0,
        dropped_watch: 0,
        unwatched: 0,
        held: Vec::new(),
    };
    st.log(format_args!(
        "H {} {} {} {}{}\n",
        args.period,
        args.jitter,
        args.watch,
        args.seed,
        if args.adaptive { " adaptive" } else { "" }
    ));
    st.start_thread(0);
    *STATE
        .lock()
        .map_err(|_| "state lock poisoned".to_string())? = Some(st);
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Every access while callbacks are in (one sample, then the accesses until the switch back
/// to counting lands; with threads, every access).
///
/// Most calls only count `skip_left` down: only the vCPU's own thread writes it (credits
/// come with every vCPU stopped), so a plain load and store do (short adaptive periods, and
/// threaded programs, run whole stretches in callbacks).
pub extern "C" fn mem_cb(vcpu: u32, _info: u32, addr: u64, udata: *mut std::ffi::c_void) {
    let Some(c) = VCPUS.get(vcpu as usize) else {
        return;
    };
    let left = c.skip_left.load(Ordering::Acquire);
    if left > 0 {
        c.skip_left.store(left - 1, Ordering::Release);
        if left % switch::RETRY_EVERY == 0 && left > MIN_INLINE {
            // A long gap in callbacks: its switch was refused (a thread was being created).
            switch::window_closed(vcpu);
        }
        return;
    }
    sample_due(vcpu as usize, c, addr, udata as u64);
}

/// A thread's sample is due at this access (`skip_left` reached zero).
#[cold]
fn sample_due(v: usize, c: &Vcpu, addr: u64, ip: u64) {
    // This access's index; the thread's time is one more after it.
    let now = c.time();
    if STOPPED.load(Ordering::Acquire) || !c.live.load(Ordering::Acquire) {
        c.restart(now + 1, u64::MAX);
        return;
    }
    // Our traps must reach us on this thread, whatever mask the guest set (see
    // `sys::unblock_sigtrap`).
    sys::unblock_sigtrap();
    let resume = c.resume.swap(0, Ordering::AcqRel);
    if resume > 0 {
        // A forced check (the guest changed its signal mask), not a sample.
        c.restart(now + 1, resume - 1);
        return;
    }
    let Ok(mut guard) = STATE.lock() else {
        return;
    };
    let Some(st) = guard.as_mut() else {
        return;
    };
    if !c.started.swap(true, Ordering::AcqRel) {
        // A thread begins in callbacks: count its first gap inline if it is long.
        let first = st.threads[v].as_ref().map_or(0, |t| t.first_gap);
        if first >= MIN_INLINE {
            switch::window_closed(v as u32);
        }
        if first > 0 {
            c.restart(now + 1, first - 1);
            return;
        }
    }
    st.sample(v, ip, addr, now);
    let next = st.thread_gap(v) - 1;
    c.restart(now + 1, next);
    // Short gaps stay in callbacks: two switches would cost more than they save.
    if next >= MIN_INLINE {
        switch::window_closed(v as u32);
    }
}

/// Accesses over which a sample that came due while counting inline is spread (see
/// [`credit`]).
const LATE_SPREAD: u64 = 4096;

/// Credits vCPU `vcpu`'s thread with `n` accesses counted inline; returns the accesses left
/// to its next sample.
///
/// Counting inline, the sample point is noticed late (the poller looks every 200 us), and
/// the first access in callbacks is the first memory access of whatever block QEMU runs
/// after the retranslation: in a loop, always the same instruction (on RDX Listing 2 every
/// sample fell on `acc[i & 7]`, none on `big[i]`). So a sample that is already due is taken
/// a uniform 0..LATE_SPREAD accesses later, counted by the callbacks, which picks the
/// accesses of a loop in proportion to how often they run.
pub fn credit(vcpu: u32, n: u64) -> u64 {
    let Some(c) = VCPUS
        .get(vcpu as usize)
        .filter(|c| c.live.load(Ordering::Acquire))
    else {
        return 0;
    };
    // A forced check pending: its `skip_left` is the real one.
    let resume = c.resume.swap(0, Ordering::AcqRel);
    if resume > 0 {
        c.restart(c.time(), resume);
    }
    let now = c.time() + n;
    match STATE.lock() {
        Ok(mut g) => g.as_mut().map_or(0, |st| {
            let mut left = c.skip_left.load(Ordering::Acquire).saturating_sub(n);
            if left == 0 {
                left = st.next() % LATE_SPREAD;
            }
            c.restart(now, left);
            left
        }),
        Err(_) => {
            c.restart(now, c.skip_left.load(Ordering::Acquire).saturating_sub(n));
            0
        }
    }
}

/// QEMU translates the block at guest address `vaddr` into set `set` (0 where switches
/// flush; counted when a switch of ours made it translate it again: the adaptive period and
/// the report use them).
pub fn translated(vaddr: u64, set: u32) {
    let Ok(mut seen) = SEEN.lock() else {
        return;
    };
    let switches = SWITCHES.load(Ordering::Acquire);
    let before = seen
        .get_or_insert_with(Default::default)
        .insert((vaddr, set), switches);
    if before.is_some_and(|s| s != switches) {
        RETRANSLATED.fetch_add(1, Ordering::Relaxed);
    }
}

/// QEMU switched the instrumentation at our request (by a flush, or in place).
pub fn switched() {
    SWITCHES.fetch_add(1, Ordering::AcqRel);
}

/// A guest thread starts on vCPU `vcpu` (called on its creator's thread, in the clone
/// system call): follow it with its own time, period and registers.
pub fn thread_started(vcpu: u32) {
    let v = vcpu as usize;
    let Ok(mut g) = STATE.lock() else {
        return;
    };
    let Some(st) = g.as_mut() else {
        return;
    };
    if v >= MAX_THREADS {
        st.unfollowed += 1;
        if st.unfollowed == 1 {
            st.log(format_args!(
                "N more than {MAX_THREADS} threads at once: threads beyond were not sampled\n"
            ));
        }
        return;
    }
    if VCPUS[v].live.load(Ordering::Acquire) {
        // An index reused without its exit seen: end the old thread where it stood.
        let now = now(v);
        st.end_thread(v, now);
    }
    st.start_thread(v);
}

/// vCPU `vcpu`'s guest call is about to close or replace descriptors `lo..=hi` (see
/// `fds`): every register descriptor there moves out of the range. Where no number outside
/// it is free (`close_range(3, ~0U, 0)`), the thread's registers are given up to the call
/// (their samples dropped, as a reservoir replacement drops one) and opened again at its
/// next sample.
pub fn before_syscall(vcpu: u32, lo: u64, hi: u64) {
    if std::process::id() != PID.load(Ordering::Relaxed) {
        return;
    }
    let Ok(mut g) = STATE.lock() else {
        return;
    };
    let Some(st) = g.as_mut() else {
        return;
    };
    let inside = |fd| crate::fds::taken(fd, lo, hi);
    let mut dropped = false;
    for (v, c) in VCPUS.iter().enumerate() {
        if !st.threads[v]
            .as_ref()
            .is_some_and(|t| t.watch.iter().any(|w| inside(w.fd())))
        {
            continue;
        }
        st.drain_traps(v);
        let Some(t) = st.threads[v].as_mut() else {
            continue;
        };
        let mut kept = true;
        for (k, w) in t.watch.iter_mut().enumerate() {
            if !inside(w.fd()) {
                continue;
            }
            match crate::fds::move_out(vcpu, w.fd(), lo, hi) {
                Some(new) => {
                    w.renumber(new);
                    c.set_fd(k, new);
                }
                None => kept = false,
            }
        }
        if kept {
            continue;
        }
        for (k, w) in t.watch.drain(..).enumerate() {
            c.armed[k].store(false, Ordering::Release);
            c.set_fd(k, -1);
            t.busy[k] = false;
            t.since[k] = 0;
            if inside(w.fd()) {
                sys::disarm_watchpoint(w.fd());
                w.abandon();
            }
        }
        dropped = true;
    }
    if dropped {
        st.dropped_watch += 1;
        if st.dropped_watch == 1 {
            st.log(format_args!(
                "N a call of the program took descriptors {lo} to {hi} while no number outside was free (close_range, or a full table): the samples in the watchpoints then were dropped, and the watchpoints opened again\n"
            ));
        }
    }
}

/// A system call of vCPU `vcpu`'s thread returned. After one that can change the guest's
/// signal mask (`rt_sigprocmask`, `rt_sigreturn`, `rt_sigsuspend`), QEMU gives the host
/// thread the guest's mask, perhaps with SIGTRAP blocked: the thread's next access unblocks
/// it again (in callbacks; counting inline, at the next sample).
pub fn syscall_returned(vcpu: u32, num: i64) {
    use crate::nr::{RT_SIGPROCMASK, RT_SIGRETURN, RT_SIGSUSPEND};
    if !matches!(num, RT_SIGPROCMASK | RT_SIGRETURN | RT_SIGSUSPEND) || switch::counting(vcpu) {
        return;
    }
    if let Some(c) = VCPUS
        .get(vcpu as usize)
        .filter(|c| c.live.load(Ordering::Acquire))
    {
        c.force_check();
    }
}

/// A guest thread on vCPU `vcpu` exits (on its own thread): log its traps and its end.
pub fn thread_exited(vcpu: u32) {
    let v = vcpu as usize;
    if VCPUS.get(v).is_none_or(|c| !c.live.load(Ordering::Acquire)) {
        return;
    }
    let now = now(v);
    if let Ok(mut g) = STATE.lock() {
        if let Some(st) = g.as_mut() {
            st.end_thread(v, now);
        }
    }
}

/// The guest calls `execve(path)`: if it succeeds, QEMU user mode runs the new program
/// natively and no exit hook runs, so log the traps so far, the mappings and where the run
/// left QEMU (a failed call, as a shell's tries along PATH, changes nothing: the exit's `E`
/// lines come after). `vcpu` is the calling thread's.
pub fn on_exec(vcpu: u32, path: &[u8]) {
    let v = vcpu as usize;
    let Ok(mut g) = STATE.try_lock() else {
        return;
    };
    let Some(st) = g.as_mut() else {
        return;
    };
    wrap_up(st);
    let Some(number) = st.threads.get(v).and_then(|t| t.as_ref()).map(|t| t.number) else {
        return;
    };
    let path = String::from_utf8_lossy(path);
    st.log(format_args!("X {} {number} {path}\n", now(v)));
}

/// At exit (every vCPU stopped): log the traps left, the mappings, and every thread's end.
pub fn finish() {
    // try_lock: `_exit` may come from a signal handler that interrupted a holder.
    let Ok(mut g) = STATE.try_lock() else {
        return;
    };
    let Some(st) = g.as_mut() else {
        return;
    };
    wrap_up(st);
    let blocks = RETRANSLATED.load(Ordering::Relaxed);
    st.log(format_args!("B {blocks}\n"));
    for (v, c) in VCPUS.iter().enumerate() {
        if c.live.load(Ordering::Acquire) {
            st.end_thread(v, now(v));
        }
    }
}

/// Where the run may end: logs the traps left and the mappings.
fn wrap_up(st: &mut State) {
    if !STOPPED.load(Ordering::Acquire) {
        for v in 0..MAX_THREADS {
            st.drain_traps(v);
        }
    }
    st.log_maps();
    let pages = crate::prefault::pages();
    if pages > 0 {
        st.log(format_args!("P {pages}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adaptive_period_doubles_and_pays_for_costly_samples() {
        // Doubling every AUTO_STAGE samples from the first period.
        assert_eq!(
            adaptive_period(4096, 0, 0, None, SAMPLE_SECONDS_FLUSHED),
            4096
        );
        assert_eq!(
            adaptive_period(4096, AUTO_STAGE - 1, 0, None, SAMPLE_SECONDS_FLUSHED),
            4096
        );
        assert_eq!(
            adaptive_period(4096, AUTO_STAGE, 0, None, SAMPLE_SECONDS_FLUSHED),
            8192
        );
        assert_eq!(
            adaptive_period(4096, 3 * AUTO_STAGE + 5, 0, None, SAMPLE_SECONDS_FLUSHED),
            32768
        );
        // In callbacks (gaps under MIN_INLINE) a sample costs no flush: no cost floor.
        assert_eq!(
            adaptive_period(4096, 0, 1000, Some(1e9), SAMPLE_SECONDS_FLUSHED),
            4096
        );
        // Counted inline: a sample costs SAMPLE_SECONDS plus BLOCK_SECONDS a block, kept to
        // AUTO_COST of the time. At 500 M accesses/s and 300 blocks (gzip-like): 4.9 ms a
        // sample, so gaps of at least 98 ms, 49 M accesses.
        let gzip = adaptive_period(MIN_INLINE, 0, 300, Some(5e8), SAMPLE_SECONDS_FLUSHED);
        let want = 5e8 * (SAMPLE_SECONDS_FLUSHED + 300.0 * BLOCK_SECONDS) / AUTO_COST;
        assert!((gzip as f64 - want).abs() < 2.0, "{gzip} vs {want}");
        // A small kernel: the flush alone.
        let kernel = adaptive_period(MIN_INLINE, 0, 0, Some(2e8), SAMPLE_SECONDS_FLUSHED);
        assert_eq!(kernel, (2e8 * SAMPLE_SECONDS_FLUSHED / AUTO_COST) as u64);
        // Switched in place a sample costs 4 times less: gaps 4 times shorter (1 M
        // accesses at 500 M a second, against 4 M after flushes).
        let in_place = adaptive_period(MIN_INLINE, 0, 0, Some(5e8), SAMPLE_SECONDS_IN_PLACE);
        assert_eq!(in_place, (5e8 * SAMPLE_SECONDS_IN_PLACE / AUTO_COST) as u64);

        // The doubling wins once it is longer; nothing overflows.
        assert_eq!(
            adaptive_period(
                MIN_INLINE,
                10 * AUTO_STAGE,
                0,
                Some(2e8),
                SAMPLE_SECONDS_FLUSHED
            ),
            MIN_INLINE << 10
        );
        assert!(
            adaptive_period(
                u64::MAX / 2,
                100 * AUTO_STAGE,
                u64::MAX,
                Some(1e300),
                SAMPLE_SECONDS_FLUSHED
            ) > 0
        );
    }
}
