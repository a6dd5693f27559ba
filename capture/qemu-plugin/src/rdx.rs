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
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
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
/// Blocks QEMU translated after the first sample (most of a sample's cost: every switch
/// flushes them all, and the program's hot code is translated again); the program's start-up
/// translations before it are not the sampler's.
static TRANSLATED: AtomicU64 = AtomicU64::new(0);
static SAMPLED: AtomicBool = AtomicBool::new(false);
/// Registers armed now (for the signal handler).
static ARMED: [AtomicBool; MAX_WATCH] = [const { AtomicBool::new(false) }; MAX_WATCH];
/// Traps not yet logged: `register << 56 | time`.
static TRAPS: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];
static TRAPS_IN: AtomicUsize = AtomicUsize::new(0);
/// The registers' perf descriptors (for the signal handler).
static WATCH_FDS: [AtomicI32; MAX_WATCH] = [const { AtomicI32::new(-1) }; MAX_WATCH];

/// How live RDX samples (plugin arguments `rdx=PERIOD,rdx_watch=W,rdx_seed=S,rdx_jitter=J`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RdxArgs {
    pub period: u64,
    pub watch: usize,
    pub seed: u64,
    pub jitter: f64,
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
    skip_left: u64,
    started: bool,
    since: Vec<u64>,
    busy: Vec<bool>,
    order: Vec<usize>,
    watch: Vec<Watchpoint>,
    traps_out: usize,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

impl State {
    fn next(&mut self) -> u64 {
        let z = crate::splitmix64(self.rng);
        self.rng = self.rng.wrapping_add(crate::GOLDEN);
        z
    }

    /// Accesses to the next sample: uniform in `period x [1 - jitter, 1 + jitter]`.
    fn gap(&mut self) -> u64 {
        let p = self.args.period as f64;
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
        SAMPLED.store(true, Ordering::Relaxed);
        self.drain_traps();
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
            self.log(format_args!("S {ip:#x} {addr:#x} {now} {k}\n"));
        } else {
            self.log(format_args!("S {ip:#x} {addr:#x} {now} -\n"));
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
    let mut st = State {
        args,
        out: file,
        rng: args.seed ^ 0x5eed,
        skip_left: 0,
        started: false,
        since: vec![0; args.watch],
        busy: vec![false; args.watch],
        order: (0..args.watch).collect(),
        watch: Vec::new(),
        traps_out: 0,
    };
    st.skip_left = st.gap();
    st.log(format_args!(
        "H {} {} {} {}\n",
        args.period, args.jitter, args.watch, args.seed
    ));
    *STATE
        .lock()
        .map_err(|_| "state lock poisoned".to_string())? = Some(st);
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Every access while callbacks are in (one sample, then the accesses until the switch back
/// to counting lands).
pub extern "C" fn mem_cb(_vcpu: u32, _info: u32, addr: u64, udata: *mut std::ffi::c_void) {
    let now = TIME.fetch_add(1, Ordering::AcqRel);
    if STOPPED.load(Ordering::Acquire) {
        return;
    }
    let Ok(mut guard) = STATE.lock() else {
        return;
    };
    let Some(st) = guard.as_mut() else {
        return;
    };
    if !st.started {
        // The run begins in callbacks: count the first gap inline.
        st.started = true;
        switch::window_closed();
    }
    if st.skip_left > 0 {
        st.skip_left -= 1;
        return;
    }
    st.sample(udata as u64, addr, now);
    st.skip_left = st.gap() - 1;
    switch::window_closed();
}

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
            st.skip_left = st.skip_left.saturating_sub(n);
            if st.skip_left == 0 {
                st.skip_left = st.next() % LATE_SPREAD;
            }
            st.skip_left
        }),
        Err(_) => 0,
    }
}

/// QEMU translates a block while sampling is on (counted for the report).
pub fn translated() {
    if SAMPLED.load(Ordering::Relaxed) {
        TRANSLATED.fetch_add(1, Ordering::Relaxed);
    }
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
    if let Ok(mut g) = STATE.lock() {
        if let Some(st) = g.as_mut() {
            st.drain_traps();
            st.log(format_args!(
                "N a second thread started at access {now}: sampling stopped there (live RDX follows one thread; record the program with capture --full and run reuse --rdx for threads)\n"
            ));
        }
    }
}

/// At exit (every vCPU stopped): log the traps left, the mappings and the access count.
pub fn finish() {
    let now = now();
    // try_lock: `_exit` may come from a signal handler that interrupted a holder.
    if let Ok(mut g) = STATE.try_lock() {
        if let Some(st) = g.as_mut() {
            if !STOPPED.load(Ordering::Acquire) {
                st.drain_traps();
            }
            st.log_maps();
            let blocks = TRANSLATED.load(Ordering::Relaxed);
            st.log(format_args!("B {blocks}\n"));
            st.log(format_args!("E {now}\n"));
        }
    }
}
