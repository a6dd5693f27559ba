//! Switched sampling: skipped accesses are counted by generated code, not by callbacks.
//!
//! Between windows the plugin translates the guest with inline adds to a counter (no call:
//! QEMU emits load, add, store), one per block for the instructions whose accesses are fixed
//! and one per access for the others (the plugin's `register_counting`), so skipping costs
//! little more than bare QEMU. A window is recorded with the memory callbacks of the callback
//! mode. Switching between the two changes the instrumentation of the thread's translations,
//! which QEMU does asynchronously and only when asked from a vCPU thread:
//!
//! - window closed -> count: the memory callback that closes the window asks for the switch;
//!   until it is made, callbacks go on counting skips themselves.
//! - count -> window: no callback runs while counting, so a poller thread watches the
//!   counters and, once a thread's skip is long enough, makes its counter's page read-only.
//!   The thread's next inline add faults; the fault hook makes the page writable again (the
//!   add is retried, nothing is lost) and asks for the switch from there. The fault
//!   interrupts generated code, which holds no QEMU lock, so the request is safe.
//!
//! Every access is counted exactly once, by a counter or by a callback, so skipped counts
//! stay exact (a switch comes between two blocks, where a block's add has counted only
//! accesses made; a block that a fault stops has counted its rest: [`other_faults`] counts
//! those faults); the windows start up to one poll late, which only lengthens a skip.
//!
//! QEMU 7.2 switches in place ([`sys::keyed_translations`]): it keeps a set of translations
//! per code of per-vCPU trace-event states, and a switch changes the thread's code. Every
//! thread translates its callbacks in code 0, which all threads share; thread `v` counts in
//! code `v + 1`, a set of its own whose inline adds go to its own counter (a page of lanes).
//! So threads count inline at once, each exactly, up to one per code (31 with the five events
//! of 7.2; threads beyond count in callbacks). A new thread must not inherit a counting code
//! (QEMU 7.2 gives a new vCPU every event some vCPU has enabled), so while a thread is created
//! the events count as disabled and no switch starts ([`clone_starts`]).
//! A thread leaves its counting set at its `exit`, so that QEMU's removal of its vCPU changes no
//! count ([`thread_exit_starts`]).
//!
//! Elsewhere a switch is `qemu_plugin_reset`, which flushes every translation. QEMU's inline
//! add goes to one address for all vCPUs and is not atomic, so there the first counter is the
//! only one, used while the guest has one thread: when a second thread starts, the plugin
//! credits the counter to the thread that ran, goes back to callbacks for the rest of the run
//! (exact per thread), and credits what the new thread did before the flush to it (its
//! creator runs no guest code until the flush).

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::sys;

/// Counters (one page each): the threads that can count inline at once.
pub const COUNTERS: usize = mgbench_capture::spill::COUNTER_PAGES;

/// A counter on a page of its own, so that protecting it touches nothing else.
#[repr(C, align(4096))]
struct CounterPage(UnsafeCell<[u64; 512]>);

// SAFETY: a counter is written by generated code of its one counting vCPU and only read
// (volatile) elsewhere; a torn or stale read only delays the poller.
unsafe impl Sync for CounterPage {}

static PAGES: [CounterPage; COUNTERS] =
    [const { CounterPage(UnsafeCell::new([0; 512])) }; COUNTERS];

/// Where the counters are: [`COUNTERS`] pages of the spill file when capture placed them
/// there (so that mgbench reads what they counted after a death), else [`PAGES`].
static PAGES_AT: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
/// Where their bases are: the spill header's `counter_bases` when capture placed the
/// counters, else each [`Counter`]'s own.
static BASES_AT: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());

/// Moves the counters to the [`COUNTERS`] pages at `pages` (page-aligned, alive until exit)
/// and their bases to `bases`. Only before anything is counted (all are still 0).
pub fn place_counters(pages: *mut u64, bases: &'static [AtomicU64; COUNTERS]) {
    PAGES_AT.store(pages, Ordering::Release);
    BASES_AT.store(bases.as_ptr().cast_mut(), Ordering::Release);
}

/// Skips shorter than this are counted by callbacks: two switches per window would cost more
/// than the callbacks they save where they flush, and even in place a shorter skip would end
/// only when the poller looks (every 200 us), far later than `period - window`.
pub const MIN_SKIP: u64 = mgbench_capture::spill::INLINE_MIN_SKIP;
/// A thread counting a long skip or gap in callbacks (a new thread's first skip in capture,
/// or one whose switch to counting was refused while a thread was being created, see
/// [`request`]) asks for counting every this many accesses.
pub const RETRY_EVERY: u64 = 1 << 16;
/// Longest sleep of the poller between looks at a thread that counts toward a trigger it
/// could reach soon.
const POLL: Duration = Duration::from_micros(200);
/// The fastest a thread is taken to count, in accesses a second: no thread reaches its trigger
/// sooner than its distance at this pace (QEMU ran the gather here at 2 G accesses a second).
const FASTEST: f64 = 4e9;
/// Longest sleep of the poller: while no thread counts (a thread that starts counting wakes
/// it), while every trigger is far even at [`FASTEST`], and for a thread that has not moved
/// for a while (blocked in a system call, or waiting for the others: its sleep doubles from
/// [`POLL`] at each look that finds it still). It used to look every [`POLL`] whatever the
/// triggers, 5000 times a second, and where the guest's threads keep every core busy each
/// look takes a core from one of them: the counter alone cost a 2-thread SpMV 1.10x bare QEMU
/// on this project's 2-core machine, 1.01x with looks every 5 ms (README, Capturing traces).
const MAX_POLL: Duration = Duration::from_millis(2);
/// Shortest: the poller then takes at most a few percent of a core.
const MIN_POLL: Duration = Duration::from_micros(20);

/// The poller, woken when a thread starts counting and it would not look soon by itself.
static POLLER: OnceLock<std::thread::Thread> = OnceLock::new();
/// When the poller looks next by itself, in nanoseconds from [`epoch`].
static POLLER_WAKES: AtomicU64 = AtomicU64::new(u64::MAX);

/// The time base of [`POLLER_WAKES`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// Wakes the poller for a thread that starts counting, unless it looks within [`POLL`]
/// anyway (its first look at a new trigger waits at least POLL for the next, so waking it
/// sooner saw nothing new). Waking a thread asleep on another core sends that core an
/// interrupt, which costs the waker dearly in a VM: on this project's 2-core AMD VM the
/// wake at every switch to counting was the largest part of what a live sample cost.
fn wake_poller() {
    if POLLER_WAKES.load(Ordering::Acquire) <= nanos_since_epoch(Instant::now() + POLL) {
        return;
    }
    if let Some(p) = POLLER.get() {
        p.unpark();
    }
}

/// How long the poller may sleep before it looks again at a thread `left` accesses from its
/// trigger, which counted at `pace` accesses a second since the last look (`None`: it has not
/// moved, or this is the first look at this trigger) and was last given `before`.
/// A moving thread is looked at when it should reach its trigger at that pace, and at least
/// every [`POLL`] (a thread speeds up and slows down); one that is still, every [`POLL`] and
/// then at twice the last wait; neither sooner than half the time it needs to reach the
/// trigger at [`FASTEST`].
fn poll_after(left: u64, pace: Option<f64>, before: Duration) -> Duration {
    let poll = POLL.as_secs_f64();
    let wait = match pace {
        Some(p) => (left as f64 / p).min(poll),
        None => (2.0 * before.as_secs_f64()).clamp(poll, MAX_POLL.as_secs_f64()),
    };
    // (Capped first: a trigger far away would overflow a Duration.)
    let earliest = (left as f64 / FASTEST).min(2.0 * MAX_POLL.as_secs_f64());
    Duration::from_secs_f64(wait.max(earliest / 2.0)).clamp(MIN_POLL, MAX_POLL)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Memory callbacks on every access: windows are recorded, skips counted by callbacks.
    Callbacks,
    /// The inline counter only.
    Count,
}

/// One counter's state.
struct Counter {
    /// The mode of its thread (`Mode as u8`); where switches flush, the instrumentation of
    /// translations made now.
    mode: AtomicU8,
    /// The mode asked for by the pending switch.
    target: AtomicU8,
    /// A switch is asked for and not done yet.
    pending: AtomicBool,
    /// Counter value already credited to a thread (when capture did not place the counters).
    base: AtomicU64,
    /// Counter value at which the thread's next window is due.
    trigger: AtomicU64,
    /// Serialises the poller's protects with crediting and mode changes.
    arm: Mutex<()>,
}

static STATE: [Counter; COUNTERS] = [const {
    Counter {
        mode: AtomicU8::new(0),
        target: AtomicU8::new(0),
        pending: AtomicBool::new(false),
        base: AtomicU64::new(0),
        trigger: AtomicU64::new(u64::MAX),
        arm: Mutex::new(()),
    }
}; COUNTERS];

/// Switched sampling is in use: sampling with long skips, no ROI, and switches in place or
/// one guest thread so far.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Where switches flush: the vCPU whose accesses the one counter holds since its base.
static OWNER: AtomicU32 = AtomicU32::new(0);
/// Counters in use switched in place: one per code (see [`sys::KeyedTranslations::codes`]).
static USABLE: AtomicU32 = AtomicU32::new(0);
/// Guest threads being created now (see [`clone_starts`]), and the events' counts of vCPUs
/// that had them enabled when the first of them began. Its lock also serialises the
/// switches in place.
static CLONING: Mutex<(u32, [u16; 5])> = Mutex::new((0, [0; 5]));
thread_local! {
    /// The counter this vCPU thread counts with (switched in place): what it translates now
    /// gets the inline adds to it.
    static COUNTING_HERE: Cell<Option<usize>> = const { Cell::new(None) };
}
static PLUGIN_ID: AtomicU64 = AtomicU64::new(0);
/// Switches done (two per switched window; flushes and in place), for the status file.
static RESETS: AtomicU64 = AtomicU64::new(0);
/// Of these, the switches made in place (see [`request`]) rather than by a flush.
static SWITCHES_IN_PLACE: AtomicU64 = AtomicU64::new(0);
/// Switches can be made in place ([`sys::keyed_translations`], looked up at [`init`]).
static IN_PLACE: AtomicBool = AtomicBool::new(false);

fn mode_from(v: u8) -> Mode {
    if v == Mode::Count as u8 {
        Mode::Count
    } else {
        Mode::Callbacks
    }
}

/// Counter `c`'s thread's mode.
fn mode(c: usize) -> Mode {
    mode_from(STATE[c].mode.load(Ordering::Acquire))
}

/// A counter is split into this many lanes, one cache line apart, and the instructions of
/// a block add to them in turn: QEMU's inline add is a load, add and store to one address,
/// so with one lane every access waits for the previous access's store to reach the next
/// load (store-to-load forwarding, several cycles), which cost library-heavy code up to 1.7x
/// bare QEMU here. The count is the sum of the lanes.
const LANES: usize = mgbench_capture::spill::COUNTER_LANES;
/// Lanes for each kind of piece, after them (see `spill::PIECE_LANES`).
const PIECE_LANES: usize = mgbench_capture::spill::PIECE_LANES;
/// Every lane of a counter.
const ALL_LANES: usize = mgbench_capture::spill::COUNTER_ALL_LANES;
/// u64s between lanes (64 bytes).
const LANE_STRIDE: usize = mgbench_capture::spill::COUNTER_LANE_STRIDE;

/// Counter `c`'s page.
fn page(c: usize) -> *mut c_void {
    let at = PAGES_AT.load(Ordering::Acquire);
    if at.is_null() {
        PAGES[c].0.get().cast()
    } else {
        // SAFETY: the placed pages are COUNTERS pages long.
        unsafe { at.cast::<u8>().add(c * 4096).cast() }
    }
}

/// Counter `c`'s base: what it counted that was credited to a thread already.
fn base(c: usize) -> &'static AtomicU64 {
    let at = BASES_AT.load(Ordering::Acquire);
    if at.is_null() {
        &STATE[c].base
    } else {
        // SAFETY: the placed bases are the spill header's COUNTERS fields, alive until exit.
        unsafe { &*at.add(c) }
    }
}

/// Counter `c`'s count now, and what it counted since its base, which becomes that count:
/// the caller credits the difference to the counter's thread. (Rebased before the thread is
/// credited: a death in between loses the difference from the count mgbench recovers
/// instead of counting it twice.)
fn settle(c: usize) -> (u64, u64) {
    let now = count(c);
    (now, now.wrapping_sub(base(c).swap(now, Ordering::AcqRel)))
}

/// Lane `l` (of [`ALL_LANES`]) of counter `c`.
fn lane_at(c: usize, l: usize) -> *mut u64 {
    debug_assert!(l < ALL_LANES);
    // SAFETY: l * LANE_STRIDE < 512 for l < ALL_LANES, inside the counter's page.
    unsafe { page(c).cast::<u64>().add(l * LANE_STRIDE) }
}

/// The lane of counter `c` for the `i`-th instruction of a block, for an instruction whose
/// accesses QEMU performs whole (`pieces` 1) or as 2 or 4 pieces: each piece adds 1 to it,
/// and [`count`] counts an access per `pieces` of them.
pub fn lane_ptr(c: usize, i: usize, pieces: u8) -> *mut u64 {
    let l = match pieces {
        2 => LANES + i % PIECE_LANES,
        4 => LANES + PIECE_LANES + i % PIECE_LANES,
        _ => i % LANES,
    };
    lane_at(c, l)
}

/// Counter `c`'s count: the accesses its lanes counted (`spill::counter_count`). Each lane
/// only grows and is read after the one before, so two reads in turn never go backwards; on
/// the counting vCPU's own thread (its signal handlers) the count is exact.
fn count(c: usize) -> u64 {
    // SAFETY: an aligned u64 inside a counter page; volatile because generated code writes
    // it.
    mgbench_capture::spill::counter_count(|l| unsafe { std::ptr::read_volatile(lane_at(c, l)) })
}

/// The counter vCPU `vcpu` counts with when it counts inline: its own switched in place (if
/// it has one), else the one counter while it is the owner.
fn counter_of(vcpu: u32) -> Option<usize> {
    if in_place() {
        ((vcpu as usize) < USABLE.load(Ordering::Acquire) as usize).then_some(vcpu as usize)
    } else {
        (vcpu == OWNER.load(Ordering::Acquire)).then_some(0)
    }
}

/// The vCPU whose accesses counter `c` holds.
fn owner_of(c: usize) -> u32 {
    if in_place() {
        c as u32
    } else {
        OWNER.load(Ordering::Acquire)
    }
}

/// Accesses of vCPU `vcpu` its counter holds that it was not credited with yet.
/// Async-signal-safe.
pub fn uncredited(vcpu: u32) -> u64 {
    counter_of(vcpu).map_or(0, |c| {
        count(c).wrapping_sub(base(c).load(Ordering::Acquire))
    })
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

pub fn resets() -> u64 {
    RESETS.load(Ordering::Relaxed)
}

/// Whether switches are made in place (QEMU keeps sets of translations side by side); false
/// where switched sampling is off (and natively, where nothing is switched).
pub fn in_place() -> bool {
    IN_PLACE.load(Ordering::Acquire)
}

/// Switches made in place, without a flush (see [`request`]).
pub fn switches_in_place() -> u64 {
    SWITCHES_IN_PLACE.load(Ordering::Relaxed)
}

/// Faults (SIGSEGV) other than the counters' own: the program's (a crash, or one it handles)
/// and QEMU's on pages of code it protects against writes. A block that such a fault stops
/// has added, when it started, the fixed accesses of its instructions from the faulting one
/// on (see the plugin's `register_counting`).
static OTHER_FAULTS: AtomicU64 = AtomicU64::new(0);
/// SIGBUS faults (the program's accesses past the end of a file it mapped), which stop a
/// block as a SIGSEGV does.
static BUS_FAULTS: AtomicU64 = AtomicU64::new(0);

/// [`OTHER_FAULTS`] and [`BUS_FAULTS`] so far.
pub fn other_faults() -> (u64, u64) {
    (
        OTHER_FAULTS.load(Ordering::Relaxed),
        BUS_FAULTS.load(Ordering::Relaxed),
    )
}

fn on_bus_fault() {
    BUS_FAULTS.fetch_add(1, Ordering::Relaxed);
}

/// Sets up switched sampling for plugin `id` (when `enabled`) and starts the poller.
pub fn init(id: u64, enabled: bool) -> Result<(), String> {
    PLUGIN_ID.store(id, Ordering::Relaxed);
    ENABLED.store(enabled, Ordering::Release);
    if !enabled {
        return Ok(());
    }
    // Looked up here, at install, rather than at the first switch (which may come from
    // the fault hook): it reads QEMU's binary once.
    if let Some(keyed) = sys::keyed_translations() {
        USABLE.store(keyed.codes().min(COUNTERS as u32), Ordering::Release);
        IN_PLACE.store(true, Ordering::Release);
    }
    let poller = std::thread::Builder::new()
        .name("mgbench-poller".into())
        .spawn(poller)
        .map_err(|e| format!("cannot start the sampling poller: {e}"))?;
    let _ = POLLER.set(poller.thread().clone());
    Ok(())
}

fn poller() {
    sys::block_all_signals();
    sys::precise_sleeps();
    let pid = std::process::id();
    // Per counter: the trigger, count and time of the last look, and the wait it gave.
    let mut last = [(0u64, 0u64, Instant::now(), Duration::ZERO); COUNTERS];
    let mut sleep = MAX_POLL;
    loop {
        POLLER_WAKES.store(nanos_since_epoch(Instant::now() + sleep), Ordering::Release);
        std::thread::park_timeout(sleep);
        // Looking now: a thread that starts counting wakes it again (see `wake_poller`).
        POLLER_WAKES.store(u64::MAX, Ordering::Release);
        if !enabled() {
            return;
        }
        if std::process::id() != pid {
            continue;
        }
        sleep = MAX_POLL;
        let now = Instant::now();
        for (c, s) in STATE.iter().enumerate() {
            // A thread holding the lock may be off its core for a while: the others go on.
            let Ok(_guard) = s.arm.try_lock() else {
                sleep = MIN_POLL;
                continue;
            };
            if mode(c) != Mode::Count || s.pending.load(Ordering::Acquire) {
                continue;
            }
            let (n, trigger) = (count(c), s.trigger.load(Ordering::Acquire));
            if n >= trigger {
                // SAFETY: a counter page of ours.
                unsafe { sys::protect_page(page(c), false) };
                // Looked at again soon: a switch refused while a thread is being created
                // leaves the page writable and the thread counting.
                sleep = sleep.min(POLL);
                continue;
            }
            // The pace the thread kept since the last look, if that look was at this trigger
            // (a fast thread passes a period in less than POLL: the gather here, 2 G
            // accesses/s, 2^20 in 0.5 ms).
            let (trigger0, n0, t0, before) = last[c];
            let secs = now.duration_since(t0).as_secs_f64();
            let pace =
                (trigger0 == trigger && n > n0 && secs > 0.0).then(|| (n - n0) as f64 / secs);
            let before = if trigger0 == trigger {
                before
            } else {
                Duration::ZERO
            };
            let wait = poll_after(trigger - n, pace, before);
            sleep = sleep.min(wait);
            last[c] = (trigger, n, now, wait);
        }
        sleep = sleep.max(MIN_POLL);
    }
}

/// The fault hook: a write to a protected counter page (on its thread: only it runs the
/// translations that add to it).
fn on_fault(addr: usize) -> bool {
    let Some(c) = (0..COUNTERS).find(|&c| page(c) as usize == addr & !0xfff) else {
        OTHER_FAULTS.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    // SAFETY: our own page; mprotect is async-signal-safe.
    unsafe { sys::protect_page(page(c), true) };
    request(owner_of(c), Mode::Callbacks);
    true
}

/// Asks QEMU to translate into `to` from now on for vCPU `vcpu` (on its thread). Switched in
/// place, the vCPU changes set after its current block and [`switched_in_place`] runs on its
/// thread before the next; no switch starts while a thread is being created (a refused
/// request only lengthens a skip, counted in callbacks, or a count: the poller asks again).
/// Otherwise `qemu_plugin_reset` flushes every translation and `crate::on_reset` runs.
/// Either way `crate::switched` then calls [`on_reset`].
fn request(vcpu: u32, to: Mode) {
    let Some(c) = counter_of(vcpu) else {
        return;
    };
    let s = &STATE[c];
    if !in_place() {
        s.target.store(to as u8, Ordering::Release);
        if !s.pending.swap(true, Ordering::AcqRel) {
            flush();
        }
        return;
    }
    // CLONING's lock serialises the requests (not a counter's: `on_reset` credits under it, and
    // live RDX's sampler asks for a switch under the lock that crediting takes).
    let Ok(cloning) = CLONING.lock() else {
        return;
    };
    let Some(keyed) = keyed_in_use() else {
        return;
    };
    if s.pending.load(Ordering::Acquire) || mode(c) == to {
        return;
    }
    if cloning.0 > 0 {
        // Refused: the poller asks again (or the callbacks, every RETRY_EVERY accesses).
        // Started from the thread that ends the clone instead, a switch raced with its
        // thread: that thread could apply QEMU's part of it and translate blocks of the new
        // set with the old instrumentation before the plugin's part was queued.
        return;
    }
    start_switch(keyed, vcpu, to);
}

/// Starts vCPU `vcpu`'s switch in place to `to` (on its thread, CLONING's lock held, no clone
/// under way): its events set to the mode's code, [`switched_in_place`] queued after QEMU's
/// own work, so that the thread runs both before its next block (from another thread, the
/// vCPU could run QEMU's part before the plugin's is queued).
fn start_switch(keyed: &sys::KeyedTranslations, vcpu: u32, to: Mode) {
    let s = &STATE[vcpu as usize];
    s.target.store(to as u8, Ordering::Release);
    s.pending.store(true, Ordering::Release);
    let code = if to == Mode::Count { vcpu + 1 } else { 0 };
    if !keyed.switch(vcpu, code, switched_in_place, u64::from(vcpu)) {
        s.pending.store(false, Ordering::Release);
    }
}

/// The switch by `qemu_plugin_reset`: `crate::on_reset` runs after the flush.
fn flush() {
    // SAFETY: called on a vCPU thread (a callback, the fault hook interrupting generated
    // code, or a system call callback) with the id QEMU gave the plugin.
    unsafe { sys::qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), crate::on_reset) };
}

/// The switch on vCPU `data`'s thread between two blocks, the vCPU in its new set.
extern "C" fn switched_in_place(_cpu: *mut c_void, data: u64) {
    let vcpu = data as u32;
    let c = vcpu as usize;
    // Not pending: the thread's exit ended the switch already (see `thread_exits`).
    if STATE[c].pending.load(Ordering::Acquire) {
        SWITCHES_IN_PLACE.fetch_add(1, Ordering::Relaxed);
        crate::switched(c);
    }
    // What the thread translates from now on, in the set it now looks up.
    COUNTING_HERE.with(|h| h.set(counting(vcpu).then_some(c)));
}

/// The counter whose inline adds the blocks this thread translates now get, if they count
/// (rather than call back).
pub fn translate_counting() -> Option<usize> {
    if in_place() {
        COUNTING_HERE.with(Cell::get)
    } else {
        (mode(0) == Mode::Count).then_some(0)
    }
}

/// Whether vCPU `vcpu` counts inline now.
pub fn counting(vcpu: u32) -> bool {
    enabled() && counter_of(vcpu).is_some_and(|c| mode(c) == Mode::Count)
}

/// A window of vCPU `vcpu` just closed (in a callback, on its thread): count the skip
/// inline.
pub fn window_closed(vcpu: u32) {
    if enabled() {
        request(vcpu, Mode::Count);
    }
}

/// The guest is about to create a thread (at the entry of `clone` or `clone3`, on the
/// creating thread). QEMU 7.2 gives a new vCPU every per-vCPU event that some vCPU has
/// enabled: with a counting thread's events set, the new thread would run that thread's
/// counting translations. So until [`clone_ended`] the events count as enabled nowhere
/// (their counts are only read there) and no switch starts.
pub fn clone_starts() {
    let Some(keyed) = keyed_in_use() else {
        return;
    };
    let Ok(mut cloning) = CLONING.lock() else {
        return;
    };
    if cloning.0 == 0 {
        cloning.1 = keyed.take_enabled_counts();
    }
    cloning.0 += 1;
}

/// The `clone` of [`clone_starts`] returned in the creating thread.
pub fn clone_ended() {
    let Some(keyed) = keyed_in_use() else {
        return;
    };
    let Ok(mut cloning) = CLONING.lock() else {
        return;
    };
    if cloning.0 == 0 {
        return;
    }
    cloning.0 -= 1;
    if cloning.0 == 0 {
        keyed.restore_enabled_counts(cloning.1);
    }
}

/// Guest thread `vcpu` is about to exit (at its `exit` system call, on its own thread,
/// outside generated code). QEMU removes an exiting vCPU's events itself, taking one from
/// the count of each event the vCPU has enabled. Were it still counting, and a clone between
/// [`clone_starts`] and [`clone_ended`] (the counts held at 0), a count would wrap to 65535
/// and the new thread would get the event: it would run the exiting thread's counting set,
/// its accesses going to a counter no thread is credited with (a whole thread's count was
/// lost so, 1 run in 3 with 8 threads). So the thread leaves its counting set here, the
/// switch applied at once (QEMU's queued work run on the thread, as QEMU's loop would
/// before its next block): it exits with no event enabled and no count changes.
pub fn thread_exit_starts(vcpu: u32) {
    let (Some(keyed), Some(c)) = (keyed_in_use(), counter_of(vcpu)) else {
        return;
    };
    let s = &STATE[c];
    // A switch to counting pending takes two rounds; waiting out clones, more.
    for _ in 0..10_000 {
        let Ok(cloning) = CLONING.lock() else {
            return;
        };
        let pending = s.pending.load(Ordering::Acquire);
        if !pending && mode(c) != Mode::Count {
            return;
        }
        if cloning.0 > 0 && !pending {
            // Changing the events now would change the counts held at 0.
            drop(cloning);
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        if !pending {
            start_switch(keyed, vcpu, Mode::Callbacks);
        }
        // The work credits the counter, which takes locks that are taken before CLONING's.
        drop(cloning);
        keyed.run_queued_work(vcpu);
    }
}

fn keyed_in_use() -> Option<&'static sys::KeyedTranslations> {
    if enabled() && in_place() {
        sys::keyed_translations()
    } else {
        None
    }
}

/// Guest thread `vcpu` exits (on its own thread). If it counts (or a switch of it is
/// pending, which will never run), its counter goes back to callbacks and what it counted
/// since its base is returned, to credit to the thread.
pub fn thread_exits(vcpu: u32) -> Option<u64> {
    if !in_place() {
        return None;
    }
    let c = counter_of(vcpu)?;
    let s = &STATE[c];
    let _guard = s.arm.lock().ok();
    if mode(c) != Mode::Count && !s.pending.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: our own page.
    unsafe { sys::protect_page(page(c), true) };
    let (_, delta) = settle(c);
    finish(c, Mode::Callbacks);
    Some(delta)
}

/// A guest thread `vcpu` starts while others are live (called on its creator's thread, in
/// the clone system call). Switched in place nothing changes (the new thread starts in
/// callbacks, with a counter of its own). Otherwise returns the one counter's credit, which
/// belongs to the creator, `owner`, and every thread counts in callbacks from now on.
pub fn second_thread(child: u32) -> Option<(u32, u64)> {
    if in_place() || !ENABLED.swap(false, Ordering::AcqRel) {
        return None;
    }
    let _guard = STATE[0].arm.lock().ok();
    // SAFETY: our own page.
    unsafe { sys::protect_page(page(0), true) };
    let owner = OWNER.swap(child, Ordering::AcqRel);
    let (_, credit) = settle(0);
    let s = &STATE[0];
    if mode(0) == Mode::Count || s.pending.load(Ordering::Acquire) {
        // A flush even when a switch is pending: only a flush (every vCPU stopped) also
        // reaches the new thread's translations.
        s.target.store(Mode::Callbacks as u8, Ordering::Release);
        s.pending.store(true, Ordering::Release);
        flush();
    }
    Some((owner, credit))
}

/// Called when counter `c`'s switch is done (after a flush with every vCPU stopped; in
/// place, on its thread between two blocks): gives what the counter counted since its base
/// to `credit` (for its vCPU), which returns that thread's skip left, and sets the mode to
/// translate in from now on (and the poller's trigger when that is counting).
pub fn on_reset(c: usize, credit: impl FnOnce(u32, u64) -> u64) {
    RESETS.fetch_add(1, Ordering::Relaxed);
    let _guard = STATE[c].arm.lock().ok();
    // SAFETY: our own page.
    unsafe { sys::protect_page(page(c), true) };
    let (now, delta) = settle(c);
    let skip_left = credit(owner_of(c), delta);
    let s = &STATE[c];
    let to = if enabled() {
        mode_from(s.target.load(Ordering::Acquire))
    } else {
        Mode::Callbacks
    };
    if to == Mode::Count {
        if let Err(e) =
            sys::install_fault_hook(on_fault).and_then(|()| sys::install_bus_hook(on_bus_fault))
        {
            sys::outs(&format!("{e}: switched sampling off"));
            ENABLED.store(false, Ordering::Release);
            return finish(c, Mode::Callbacks);
        }
        s.trigger.store(now + skip_left, Ordering::Release);
    }
    finish(c, to);
    if to == Mode::Count {
        wake_poller();
    }
}

fn finish(c: usize, to: Mode) {
    STATE[c].mode.store(to as u8, Ordering::Release);
    STATE[c].pending.store(false, Ordering::Release);
}

/// What the counters hold that was not credited to any thread yet (at exit, every vCPU
/// stopped): each with its vCPU.
pub fn take_credits() -> Vec<(u32, u64)> {
    (0..COUNTERS)
        .filter_map(|c| {
            let (_, delta) = settle(c);
            (delta > 0).then(|| (owner_of(c), delta))
        })
        .collect()
}

/// The only guest thread so far (set when the first vCPU starts).
pub fn set_owner(vcpu: u32) {
    OWNER.store(vcpu, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poller_sleeps_long_only_where_no_thread_can_reach_its_trigger_sooner() {
        let us = |d: Duration| d.as_micros();
        // First look at a trigger: every POLL, unless even the fastest thread needs longer.
        assert_eq!(us(poll_after(1 << 20, None, Duration::ZERO)), 200);
        // A moving thread: when it should get there, and at least every POLL.
        assert_eq!(us(poll_after(100_000, Some(1e9), POLL)), 100);
        assert_eq!(us(poll_after(1 << 20, Some(1e9), POLL)), 200);
        assert_eq!(us(poll_after(10, Some(1e9), POLL)), 20);
        // A still thread: twice the last wait, up to MAX_POLL.
        assert_eq!(us(poll_after(1 << 20, None, POLL)), 400);
        assert_eq!(us(poll_after(1 << 20, None, MAX_POLL)), 2000);
        // A far trigger: half the time the fastest thread needs, up to MAX_POLL, never
        // later than it could arrive.
        assert_eq!(us(poll_after(4_000_000, Some(1e9), POLL)), 500);
        assert_eq!(us(poll_after(1 << 62, Some(1e9), POLL)), 2000);
        for left in [1u64, 1000, 1 << 20, 1 << 24, 1 << 40] {
            for pace in [None, Some(1e6), Some(1e9), Some(FASTEST)] {
                for before in [Duration::ZERO, POLL, MAX_POLL] {
                    let wait = poll_after(left, pace, before);
                    assert!((MIN_POLL..=MAX_POLL).contains(&wait));
                    if pace.is_some() {
                        // A moving thread is looked at within POLL or before the fastest
                        // could arrive.
                        let earliest = left as f64 / FASTEST;
                        assert!(wait.as_secs_f64() <= earliest.max(POLL.as_secs_f64()) + 1e-9);
                    }
                }
            }
        }
    }

    #[test]
    fn a_count_sums_every_lane_the_blocks_add_to() {
        for c in [0, 5, COUNTERS - 1] {
            let before = count(c);
            // A block of 11 instructions, each adding once to its lane, as generated code does.
            for i in 0..11 {
                // SAFETY: lanes are aligned u64s inside our static pages; nothing else runs.
                unsafe { *lane_ptr(c, i, 1) += 1 };
            }
            assert_eq!(count(c) - before, 11);
            // Three 16-byte accesses by the block's instructions 0 and 1 (two pieces each) and
            // a 32-byte one's first three pieces: 3 accesses; its last piece makes 4.
            for i in [0, 1, 0] {
                for _ in 0..2 {
                    // SAFETY: as above.
                    unsafe { *lane_ptr(c, i, 2) += 1 };
                }
            }
            for _ in 0..3 {
                // SAFETY: as above.
                unsafe { *lane_ptr(c, 3, 4) += 1 };
            }
            assert_eq!(count(c) - before, 11 + 3);
            // SAFETY: as above.
            unsafe { *lane_ptr(c, 3, 4) += 1 };
            assert_eq!(count(c) - before, 11 + 4);
            // Lanes are distinct cache lines, all on the counter's page (one protect covers
            // them), and the counters' pages are distinct.
            let lanes: Vec<usize> = (0..ALL_LANES).map(|l| lane_at(c, l) as usize).collect();
            for w in lanes.windows(2) {
                assert_eq!(w[1] - w[0], 64);
            }
            assert!(lanes.iter().all(|&a| a & !0xfff == page(c) as usize));
            assert_eq!(lane_ptr(c, LANES, 1), lane_ptr(c, 0, 1));
            assert_eq!(lane_ptr(c, 0, 2), lane_at(c, LANES));
            assert_eq!(lane_ptr(c, 1, 4), lane_at(c, ALL_LANES - 1));
        }
        assert_eq!(count(1), 0, "another counter's lanes are untouched");
        assert_eq!(page(1) as usize - page(0) as usize, 4096);
    }
}
