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
//! - the reservoir (which register a new sample takes when all are busy) is RDX's, with the
//!   plugin's own random numbers; every sample with its register and every trap go to an
//!   events file, from which mgbench rebuilds the histograms with the same bookkeeping as the
//!   trace-driven run (`mgbench_synth::locality::rdx`).
//!
//! One guest thread: the counter is shared by all vCPUs (QEMU 7.2), so when a second thread
//! starts, sampling stops (noted in the file) and the guest runs with no instrumentation.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::switch;
use crate::sys::{self, Watchpoint};

/// Debug registers used at most (x86 has 4; perf may give fewer).
pub const MAX_WATCH: usize = 4;
/// Marks the SIGTRAPs of our watchpoints (`sig_data = MAGIC << 8 | register`).
const MAGIC: u64 = 0x6d67_6264_7278; // "mgbdrx"
const RING: usize = 64;

/// Live RDX is the plugin's mode.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// No more samples (a second thread, or the watchpoints failed).
static STOPPED: AtomicBool = AtomicBool::new(false);
/// Accesses counted outside the counter's uncredited part (callbacks, and credits).
static TIME: AtomicU64 = AtomicU64::new(0);
/// Blocks QEMU translated again after a flush of ours (most of a sample's cost: every switch
/// flushes them all, and the program's hot code is translated again). First translations of
/// new code are the program's own, and so are QEMU's own retranslations between flushes
/// (other CPU flags, a block cut short by a fault: 1334 in the start of Debian's sort).
static RETRANSLATED: AtomicU64 = AtomicU64::new(0);
/// Accesses when a second thread stopped sampling (0: it did not).
static STOP_TIME: AtomicU64 = AtomicU64::new(0);
/// Flushes so far (switches between counting and callbacks).
static FLUSHES: AtomicU64 = AtomicU64::new(0);
/// Guest addresses of the blocks translated so far, with the flush count at their last
/// translation.
static SEEN: Mutex<Option<std::collections::HashMap<u64, u64>>> = Mutex::new(None);
/// Registers armed now (for the signal handler).
static ARMED: [AtomicBool; MAX_WATCH] = [const { AtomicBool::new(false) }; MAX_WATCH];
/// Traps not yet logged: `register << 56 | time`.
static TRAPS: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];
static TRAPS_IN: AtomicUsize = AtomicUsize::new(0);
/// The registers' perf descriptors (for the signal handler).
static WATCH_FDS: [AtomicI32; MAX_WATCH] = [const { AtomicI32::new(-1) }; MAX_WATCH];

/// How live RDX samples (plugin arguments `rdx=PERIOD,rdx_watch=W,rdx_seed=S,rdx_jitter=J`,
/// and `rdx_adaptive=1` for the adaptive period, which starts at PERIOD).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RdxArgs {
    pub period: u64,
    pub watch: usize,
    pub seed: u64,
    pub jitter: f64,
    pub adaptive: bool,
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
/// 10 ns on floating-point code).
pub const MIN_INLINE: u64 = 1 << 17;
/// Under QEMU a sample that interrupts inline counting costs two flushes of the code cache:
/// about this much wall time whatever the program (0.4-0.5 ms on the demo kernels here,
/// scripts/bench-rdx-live.py) ...
pub const SAMPLE_SECONDS: f64 = 4e-4;
/// ... plus this much per block QEMU translates again afterwards (gzip: ~300 blocks and
/// 3.3-5.6 ms a sample).
pub const BLOCK_SECONDS: f64 = 1.5e-5;
/// The share of the run's time the adaptive period lets such samples take.
pub const AUTO_COST: f64 = 0.05;

/// The period of the next gap: `first` doubled every [`AUTO_STAGE`] samples, and, where the
/// gaps are counted inline (`MIN_INLINE` and more), at least what keeps a sample's
/// cost (`SAMPLE_SECONDS`, plus `BLOCK_SECONDS` for each of the `retranslated` blocks of the
/// last gap) within [`AUTO_COST`] of the time the program takes at `rate` accesses a second.
pub fn adaptive_period(first: u64, samples: u64, retranslated: u64, rate: Option<f64>) -> u64 {
    let stage = (samples / AUTO_STAGE).min(40) as u32;
    let doubled = first.saturating_mul(1u64 << stage);
    if doubled < MIN_INLINE {
        return doubled;
    }
    let cost = SAMPLE_SECONDS + retranslated as f64 * BLOCK_SECONDS;
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

/// The sampler's state: touched by the vCPU thread's callbacks and by atexit.
struct State {
    args: RdxArgs,
    out: File,
    rng: u64,
    /// Mean gap to the next sample (the fixed period, or the adaptive one).
    period: u64,
    /// Samples taken (placed or dropped).
    samples: u64,
    /// `RETRANSLATED` at the last sample.
    retranslated_mark: u64,
    /// When the last sample was, and at which access (the run's rate between samples).
    last_sample: Option<(std::time::Instant, u64)>,
    since: Vec<u64>,
    busy: Vec<bool>,
    order: Vec<usize>,
    watch: Vec<Watchpoint>,
    traps_out: usize,
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
    fn gap(&mut self) -> u64 {
        let p = self.period as f64;
        let lo = p * (1.0 - self.args.jitter);
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((lo + u * 2.0 * p * self.args.jitter).round() as u64).max(1)
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
        let _ = self.out.write_all(&buf[..n]);
    }

    /// Logs the traps the handler queued, in order, and frees their registers.
    fn drain_traps(&mut self) {
        let n = TRAPS_IN.load(Ordering::Acquire);
        while self.traps_out < n {
            let v = TRAPS[self.traps_out % RING].load(Ordering::Acquire);
            self.traps_out += 1;
            let k = (v >> 56) as usize;
            let time = v & ((1 << 56) - 1);
            if k < self.busy.len() {
                self.busy[k] = false;
                self.since[k] = 0;
            }
            self.log(format_args!("T {k} {time}\n"));
        }
    }

    fn open_watchpoints(&mut self, addr: u64) -> Result<(), String> {
        sys::install_trap_hook(on_trap)?;
        for (k, fd) in WATCH_FDS.iter().enumerate().take(self.args.watch) {
            let w = Watchpoint::open(addr & !7).map_err(|e| {
                format!(
                    "cannot set hardware watchpoint {k} through perf_event_open (PERF_TYPE_BREAKPOINT): {e}; live RDX needs the breakpoint PMU (see kernel.perf_event_paranoid)"
                )
            })?;
            fd.store(w.fd(), Ordering::Release);
            self.watch.push(w);
        }
        Ok(())
    }

    /// A sample: RDX's reservoir picks the register it goes to, if any.
    fn sample(&mut self, ip: u64, addr: u64, now: u64) {
        if self.watch.is_empty() {
            if let Err(e) = self.open_watchpoints(addr) {
                sys::outs(&e);
                self.log(format_args!("N error: {e}\n"));
                STOPPED.store(true, Ordering::Release);
                return;
            }
            self.log_maps();
        }
        self.drain_traps();
        // The gap that led here was drawn from `period`: the sample stands for that many.
        let period = self.period;
        self.samples += 1;
        if self.args.adaptive {
            let now_re = RETRANSLATED.load(Ordering::Relaxed);
            let re = now_re - self.retranslated_mark;
            self.retranslated_mark = now_re;
            let t = std::time::Instant::now();
            // Natively a sample costs a signal, not a flush: the doubling alone.
            let rate = match (self.last_sample, NATIVE_COUNTER.load(Ordering::Acquire)) {
                (Some((t0, n0)), -1) => {
                    let secs = t.duration_since(t0).as_secs_f64();
                    (secs > 0.0).then(|| now.saturating_sub(n0) as f64 / secs)
                }
                _ => None,
            };
            self.last_sample = Some((t, now));
            self.period = adaptive_period(self.args.period, self.samples, re, rate);
        }
        let w = self.busy.len();
        for k in 0..w {
            if self.busy[k] {
                self.since[k] += 1;
            }
        }
        let chosen = match self.busy.iter().position(|b| !b) {
            Some(k) => {
                self.since[k] = 1;
                Some(k)
            }
            None => {
                // Visit the registers in random order; register k takes the sample with
                // probability 1 / (samples since it was last empty).
                for i in (1..w).rev() {
                    let j = (self.next() % (i as u64 + 1)) as usize;
                    self.order.swap(i, j);
                }
                let mut taken = None;
                for idx in 0..w {
                    let k = self.order[idx];
                    if self.next() % self.since[k].max(1) == 0 {
                        taken = Some(k);
                        break;
                    }
                }
                taken
            }
        };
        let word = addr & !7;
        if let Some(k) = chosen {
            ARMED[k].store(true, Ordering::Release);
            if !self.watch[k].arm(word, 8, MAGIC << 8 | k as u64) {
                ARMED[k].store(false, Ordering::Release);
                let e = std::io::Error::last_os_error();
                self.log(format_args!(
                    "N error: cannot arm watchpoint {k} at {word:#x}: {e}\n"
                ));
                STOPPED.store(true, Ordering::Release);
                return;
            }
            self.busy[k] = true;
            self.log(format_args!("S {ip:#x} {addr:#x} {now} {k} {period}\n"));
        } else {
            self.log(format_args!("S {ip:#x} {addr:#x} {now} - {period}\n"));
        }
    }

    /// Logs the mappings (allocates: not from a signal handler).
    fn log_maps(&mut self) {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let mut lines = String::new();
        for l in text.lines() {
            lines.push_str("M ");
            lines.push_str(l);
            lines.push('\n');
        }
        let _ = self.out.write_all(lines.as_bytes());
    }
}

/// The SIGTRAP of a watchpoint (on the vCPU thread, right after the access that touched the
/// word, before that access is counted): queue the trap with the time of the reuse.
fn on_trap(data: u64) -> bool {
    if data >> 8 != MAGIC {
        return false;
    }
    let k = (data & 0xff) as usize;
    if k >= MAX_WATCH {
        return true;
    }
    let fd = WATCH_FDS[k].load(Ordering::Acquire);
    if fd >= 0 {
        sys::disarm_watchpoint(fd);
    }
    if !ARMED[k].swap(false, Ordering::AcqRel) || STOPPED.load(Ordering::Acquire) {
        return true;
    }
    let now = now();
    let i = TRAPS_IN.load(Ordering::Acquire);
    TRAPS[i % RING].store((k as u64) << 56 | now, Ordering::Release);
    TRAPS_IN.store(i + 1, Ordering::Release);
    true
}

/// The access counter of the native path (a perf descriptor), or -1 under QEMU.
static NATIVE_COUNTER: AtomicI32 = AtomicI32::new(-1);

/// Accesses so far: QEMU's counter and callbacks, or natively the PMU's counter.
/// Async-signal-safe.
fn now() -> u64 {
    match NATIVE_COUNTER.load(Ordering::Acquire) {
        fd if fd >= 0 => sys::counter_value(fd),
        _ => TIME.load(Ordering::Acquire) + switch::uncredited(),
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
    let now = now();
    // try_lock: the handler never waits; the lock is only held by the same thread outside
    // handlers after the sampler's signal was blocked (exit), so it is free here.
    let Ok(mut guard) = STATE.try_lock() else {
        return None;
    };
    let st = guard.as_mut()?;
    st.sample(ip, addr, now);
    Some(st.gap())
}

/// Native path: opens the watchpoints on the calling thread (from the library's
/// constructor, outside any handler) and logs the mappings.
pub fn native_start(any_addr: u64, note: &str) -> Result<(), String> {
    let mut g = STATE
        .lock()
        .map_err(|_| "state lock poisoned".to_string())?;
    let st = g.as_mut().ok_or("live RDX is not set up")?;
    st.open_watchpoints(any_addr)?;
    st.log(format_args!("N {note}\n"));
    st.log_maps();
    Ok(())
}

/// Native path: the first sample's distance (RDX's jittered period).
pub fn native_first_gap() -> u64 {
    STATE
        .lock()
        .ok()
        .and_then(|mut g| g.as_mut().map(|st| st.gap()))
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

pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

pub fn stopped() -> bool {
    STOPPED.load(Ordering::Acquire)
}

/// Sets live RDX up: the events file `out` gets a header line.
pub fn init(out: &str, args: RdxArgs) -> Result<(), String> {
    if args.watch == 0 || args.watch > MAX_WATCH {
        return Err(format!(
            "rdx_watch={}: give 1 to {MAX_WATCH} (x86 debug registers)",
            args.watch
        ));
    }
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(out)
        .map_err(|e| format!("cannot open events file {out}: {e}"))?;
    PID.store(std::process::id(), Ordering::Relaxed);
    let mut st = State {
        args,
        out: file,
        rng: args.seed ^ 0x5eed,
        period: args.period,
        samples: 0,
        retranslated_mark: 0,
        last_sample: None,
        since: vec![0; args.watch],
        busy: vec![false; args.watch],
        order: (0..args.watch).collect(),
        watch: Vec::new(),
        traps_out: 0,
    };
    SKIP_LEFT.store(st.gap(), Ordering::Release);
    st.log(format_args!(
        "H {} {} {} {}{}\n",
        args.period,
        args.jitter,
        args.watch,
        args.seed,
        if args.adaptive { " adaptive" } else { "" }
    ));
    *STATE
        .lock()
        .map_err(|_| "state lock poisoned".to_string())? = Some(st);
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Every access while callbacks are in (one sample, then the accesses until the switch back
/// to counting lands).
///
/// Most calls only count: while sampling, the guest has one thread, so only this vCPU
/// thread writes `TIME` and `SKIP_LEFT` (credits come with every vCPU stopped), and plain
/// loads and stores do (short adaptive periods run whole stretches in callbacks).
pub extern "C" fn mem_cb(_vcpu: u32, _info: u32, addr: u64, udata: *mut std::ffi::c_void) {
    if STOPPED.load(Ordering::Acquire) {
        return;
    }
    let now = TIME.load(Ordering::Acquire);
    TIME.store(now + 1, Ordering::Release);
    let left = SKIP_LEFT.load(Ordering::Acquire);
    if left > 0 && STARTED.load(Ordering::Acquire) {
        SKIP_LEFT.store(left - 1, Ordering::Release);
        return;
    }
    let Ok(mut guard) = STATE.lock() else {
        return;
    };
    let Some(st) = guard.as_mut() else {
        return;
    };
    if !STARTED.swap(true, Ordering::AcqRel) {
        // The run begins in callbacks: count the first gap inline if it is long.
        if left >= MIN_INLINE {
            switch::window_closed();
        }
        if left > 0 {
            SKIP_LEFT.store(left - 1, Ordering::Release);
            return;
        }
    }
    st.sample(udata as u64, addr, now);
    let next = st.gap() - 1;
    SKIP_LEFT.store(next, Ordering::Release);
    // Short gaps stay in callbacks: two retranslations would cost more than they save.
    if next >= MIN_INLINE {
        switch::window_closed();
    }
}

/// Accesses to the next sample (counted down by the callbacks, credited by `credit`).
static SKIP_LEFT: AtomicU64 = AtomicU64::new(0);
/// The first callback ran.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Accesses over which a sample that came due while counting inline is spread (see
/// [`credit`]).
const LATE_SPREAD: u64 = 4096;

/// Credits `n` accesses counted inline; returns the accesses left to the next sample.
///
/// Counting inline, the sample point is noticed late (the poller looks every 200 us), and
/// the first access in callbacks is the first memory access of whatever block QEMU runs
/// after the retranslation: in a loop, always the same instruction (on RDX Listing 2 every
/// sample fell on `acc[i & 7]`, none on `big[i]`). So a sample that is already due is taken
/// a uniform 0..LATE_SPREAD accesses later, counted by the callbacks, which picks the
/// accesses of a loop in proportion to how often they run.
pub fn credit(n: u64) -> u64 {
    TIME.fetch_add(n, Ordering::AcqRel);
    match STATE.lock() {
        Ok(mut g) => g.as_mut().map_or(0, |st| {
            let mut left = SKIP_LEFT.load(Ordering::Acquire).saturating_sub(n);
            if left == 0 {
                left = st.next() % LATE_SPREAD;
            }
            SKIP_LEFT.store(left, Ordering::Release);
            left
        }),
        Err(_) => 0,
    }
}

/// QEMU translates the block at guest address `vaddr` (counted when a flush of ours made it
/// translate it again: the adaptive period and the report use them).
pub fn translated(vaddr: u64) {
    let Ok(mut seen) = SEEN.lock() else {
        return;
    };
    let flushes = FLUSHES.load(Ordering::Acquire);
    let before = seen
        .get_or_insert_with(Default::default)
        .insert(vaddr, flushes);
    if before.is_some_and(|f| f != flushes) {
        RETRANSLATED.fetch_add(1, Ordering::Relaxed);
    }
}

/// QEMU flushed its translations at our request (a switch).
pub fn flushed() {
    FLUSHES.fetch_add(1, Ordering::AcqRel);
}

/// A second guest thread starts: stop sampling (the counter cannot tell threads apart).
pub fn second_thread() {
    if STOPPED.swap(true, Ordering::AcqRel) {
        return;
    }
    for (k, armed) in ARMED.iter().enumerate() {
        armed.store(false, Ordering::Release);
        let fd = WATCH_FDS[k].load(Ordering::Acquire);
        if fd >= 0 {
            sys::disarm_watchpoint(fd);
        }
    }
    let now = now();
    STOP_TIME.store(now, Ordering::Release);
    if let Ok(mut g) = STATE.lock() {
        if let Some(st) = g.as_mut() {
            st.drain_traps();
            st.log(format_args!(
                "N a second thread started at access {now}: sampling stopped there (live RDX follows one thread; record the program with capture --full and run reuse --rdx for threads)\n"
            ));
        }
    }
}

/// The guest calls `execve(path)`: if it succeeds, QEMU user mode runs the new program
/// natively and no exit hook runs, so log the traps so far, the mappings and where the run
/// left QEMU (a failed call, as a shell's tries along PATH, changes nothing: the exit's `E`
/// comes after).
pub fn on_exec(path: &[u8]) {
    wrap_up(|st, now| {
        let path = String::from_utf8_lossy(path);
        st.log(format_args!("X {now} {path}\n"));
    });
}

/// At exit (every vCPU stopped): log the traps left, the mappings and the access count.
pub fn finish() {
    wrap_up(|st, now| {
        let blocks = RETRANSLATED.load(Ordering::Relaxed);
        st.log(format_args!("B {blocks}\n"));
        st.log(format_args!("E {now}\n"));
    });
}

/// Where the run may end: logs the traps left and the mappings, then `last` with the
/// accesses sampled from (up to a second thread's start, where sampling stopped: the shared
/// counter goes on counting every thread's accesses until QEMU flushes it).
fn wrap_up(last: impl FnOnce(&mut State, u64)) {
    let now = match STOP_TIME.load(Ordering::Acquire) {
        0 => now(),
        t => t,
    };
    // try_lock: `_exit` may come from a signal handler that interrupted a holder.
    if let Ok(mut g) = STATE.try_lock() {
        if let Some(st) = g.as_mut() {
            if !STOPPED.load(Ordering::Acquire) {
                st.drain_traps();
            }
            st.log_maps();
            last(st, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adaptive_period_doubles_and_pays_for_costly_samples() {
        // Doubling every AUTO_STAGE samples from the first period.
        assert_eq!(adaptive_period(4096, 0, 0, None), 4096);
        assert_eq!(adaptive_period(4096, AUTO_STAGE - 1, 0, None), 4096);
        assert_eq!(adaptive_period(4096, AUTO_STAGE, 0, None), 8192);
        assert_eq!(adaptive_period(4096, 3 * AUTO_STAGE + 5, 0, None), 32768);
        // In callbacks (gaps under MIN_INLINE) a sample costs no flush: no cost floor.
        assert_eq!(adaptive_period(4096, 0, 1000, Some(1e9)), 4096);
        // Counted inline: a sample costs SAMPLE_SECONDS plus BLOCK_SECONDS a block, kept to
        // AUTO_COST of the time. At 500 M accesses/s and 300 blocks (gzip-like): 4.9 ms a
        // sample, so gaps of at least 98 ms, 49 M accesses.
        let gzip = adaptive_period(MIN_INLINE, 0, 300, Some(5e8));
        let want = 5e8 * (SAMPLE_SECONDS + 300.0 * BLOCK_SECONDS) / AUTO_COST;
        assert!((gzip as f64 - want).abs() < 2.0, "{gzip} vs {want}");
        // A small kernel: the flush alone.
        let kernel = adaptive_period(MIN_INLINE, 0, 0, Some(2e8));
        assert_eq!(kernel, (2e8 * SAMPLE_SECONDS / AUTO_COST) as u64);
        // The doubling wins once it is longer; nothing overflows.
        assert_eq!(
            adaptive_period(MIN_INLINE, 10 * AUTO_STAGE, 0, Some(2e8)),
            MIN_INLINE << 10
        );
        assert!(adaptive_period(u64::MAX / 2, 100 * AUTO_STAGE, u64::MAX, Some(1e300)) > 0);
    }
}
