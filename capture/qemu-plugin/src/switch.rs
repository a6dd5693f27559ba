//! Switched sampling: skipped accesses are counted by generated code, not by callbacks.
//!
//! Between windows the plugin translates the guest with one inline add per memory access to
//! a counter (no call: QEMU emits load, add, store), so skipping costs little more than bare
//! QEMU. A window is recorded with the memory callbacks of the callback mode. Switching
//! between the two means retranslating everything (`qemu_plugin_reset`), which QEMU does
//! asynchronously and only when asked from a vCPU thread:
//!
//! - window closed -> count: the memory callback that closes the window asks for the reset;
//!   until the flush, callbacks go on counting skips themselves.
//! - count -> window: no callback runs while counting, so a poller thread watches the counter
//!   and, once the skip is long enough, makes the counter's page read-only. The next inline
//!   add faults on the vCPU thread; the fault hook makes the page writable again (the add is
//!   retried, nothing is lost) and asks for the reset from there. The fault interrupts
//!   generated code, which holds no QEMU lock, so the request is safe.
//!
//! Every access is counted exactly once, by the counter or by a callback, so skipped counts
//! stay exact; the windows start up to one poll late, which only lengthens a skip.
//! QEMU 7.2's inline add goes to one address for all vCPUs and is not atomic, so the counter
//! is only used while the guest has one thread: when a second thread starts, the plugin
//! credits the counter to the thread that ran, goes back to callbacks for the rest of the run
//! (exact per thread), and credits what the new thread did before the flush to it (its
//! creator runs no guest code until the flush).

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::sys;

/// The counter on a page of its own, so that protecting it touches nothing else.
#[repr(C, align(4096))]
struct CounterPage(UnsafeCell<[u64; 512]>);

// SAFETY: the counter is written by generated code of the one counting vCPU and only read
// (volatile) elsewhere; a torn or stale read only delays the poller.
unsafe impl Sync for CounterPage {}

static COUNTER: CounterPage = CounterPage(UnsafeCell::new([0; 512]));

/// Where the counter is: a page of the spill file when capture placed it there (so that
/// mgbench reads what it counted after a death), else [`COUNTER`].
static COUNTER_AT: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
/// Where the counter's base is: the spill header's `counter_base` when capture placed the
/// counter, else [`BASE`].
static BASE_AT: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());

/// Moves the counter to `page` (page-aligned, at least the lanes long, alive until exit) and
/// its base to `base`. Only before anything is counted (both are still 0).
pub fn place_counter(page: *mut u64, base: &'static AtomicU64) {
    COUNTER_AT.store(page, Ordering::Release);
    BASE_AT.store(std::ptr::from_ref(base).cast_mut(), Ordering::Release);
}

/// Counter value already credited to a thread.
fn base() -> &'static AtomicU64 {
    // SAFETY: BASE_AT, when set, is the spill header's field, alive until exit.
    unsafe { BASE_AT.load(Ordering::Acquire).as_ref() }.unwrap_or(&BASE)
}

/// The base becomes `now`; returns the old value.
fn rebase(now: u64) -> u64 {
    base().swap(now, Ordering::AcqRel)
}

/// Skips shorter than this are counted by callbacks: two switches per window would cost more
/// than the callbacks they save where they flush, and even in place a shorter skip would end
/// only when the poller looks (every 200 us), far later than `period - window`.
pub const MIN_SKIP: u64 = 1 << 18;
/// Longest sleep of the poller between looks at the counter.
const POLL: Duration = Duration::from_micros(200);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Memory callbacks on every access: windows are recorded, skips counted by callbacks.
    Callbacks,
    /// The inline counter only.
    Count,
}

/// Switched sampling is in use: sampling with long skips, no ROI, one guest thread so far.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Instrumentation of translations made now (`Mode as u8`).
static MODE: AtomicU8 = AtomicU8::new(0);
/// The mode asked for by the pending reset.
static TARGET: AtomicU8 = AtomicU8::new(0);
/// A reset is asked for and not done yet (QEMU ignores a second request meanwhile).
static PENDING: AtomicBool = AtomicBool::new(false);
/// Counter value already credited to a thread.
/// (Its base when capture did not place the counter; see [`base`].)
static BASE: AtomicU64 = AtomicU64::new(0);
/// Counter value at which the next window is due.
static TRIGGER: AtomicU64 = AtomicU64::new(u64::MAX);
/// The vCPU whose accesses the counter holds since its base.
static OWNER: AtomicU32 = AtomicU32::new(0);
/// Serialises the poller's protect with mode changes.
static ARM: Mutex<()> = Mutex::new(());
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

/// The counter is split into this many lanes, one cache line apart, and the instructions of
/// a block add to them in turn: QEMU's inline add is a load, add and store to one address,
/// so with one lane every access waits for the previous access's store to reach the next
/// load (store-to-load forwarding, several cycles), which cost library-heavy code up to 1.7x
/// bare QEMU here. The count is the sum of the lanes.
const LANES: usize = mgbench_capture::spill::COUNTER_LANES;
/// u64s between lanes (64 bytes).
const LANE_STRIDE: usize = mgbench_capture::spill::COUNTER_LANE_STRIDE;

/// The counter lane for the `i`-th instruction of a block.
pub fn lane_ptr(i: usize) -> *mut u64 {
    // SAFETY: (i % LANES) * LANE_STRIDE < 512, inside the counter page.
    unsafe { page().cast::<u64>().add((i % LANES) * LANE_STRIDE) }
}

/// The sum of the lanes. Each lane only grows and is read after the one before, so two
/// reads in turn never go backwards; on the counting vCPU's own thread (its signal
/// handlers) the sum is exact.
fn count() -> u64 {
    (0..LANES).fold(0u64, |sum, l| {
        // SAFETY: an aligned u64 inside our static; volatile because generated code writes it.
        sum.wrapping_add(unsafe { std::ptr::read_volatile(lane_ptr(l)) })
    })
}

/// Accesses the counter holds that no thread was credited with yet. Async-signal-safe.
pub fn uncredited() -> u64 {
    count().wrapping_sub(base().load(Ordering::Acquire))
}

fn page() -> *mut c_void {
    let at = COUNTER_AT.load(Ordering::Acquire);
    if at.is_null() {
        COUNTER.0.get().cast()
    } else {
        at.cast()
    }
}

/// Mode for the translations made now.
pub fn mode() -> Mode {
    mode_from(MODE.load(Ordering::Acquire))
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

pub fn resets() -> u64 {
    RESETS.load(Ordering::Relaxed)
}

/// Whether switches are made in place (QEMU keeps two sets of translations); false where
/// switched sampling is off (and natively, where nothing is switched).
pub fn in_place() -> bool {
    IN_PLACE.load(Ordering::Acquire)
}

/// Switches made in place, without a flush (see [`request`]).
pub fn switches_in_place() -> u64 {
    SWITCHES_IN_PLACE.load(Ordering::Relaxed)
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
    IN_PLACE.store(sys::keyed_translations().is_some(), Ordering::Release);
    std::thread::Builder::new()
        .name("mgbench-poller".into())
        .spawn(poller)
        .map(|_| ())
        .map_err(|e| format!("cannot start the sampling poller: {e}"))
}

fn poller() {
    sys::block_all_signals();
    let pid = std::process::id();
    loop {
        std::thread::sleep(POLL);
        if !enabled() {
            return;
        }
        let Ok(_guard) = ARM.lock() else {
            return;
        };
        if mode() == Mode::Count
            && !PENDING.load(Ordering::Acquire)
            && count() >= TRIGGER.load(Ordering::Acquire)
            && std::process::id() == pid
        {
            // SAFETY: the counter page is our own static page.
            unsafe { sys::protect_page(page(), false) };
        }
    }
}

/// The fault hook: a write to the protected counter page.
fn on_fault(addr: usize) -> bool {
    if addr & !0xfff != page() as usize {
        return false;
    }
    // SAFETY: our own page; mprotect is async-signal-safe.
    unsafe { sys::protect_page(page(), true) };
    request(Mode::Callbacks);
    true
}

/// Asks QEMU to translate into `to` from now on (from the owner's vCPU thread). While the
/// guest has one thread and QEMU keeps two sets of translations ([`sys::keyed_translations`]),
/// the vCPU changes set after its current block and [`switched_in_place`] runs on its thread
/// before the next; otherwise `qemu_plugin_reset` flushes every translation and
/// `crate::on_reset` runs. Either way `crate::switched` then calls [`on_reset`].
fn request(to: Mode) {
    TARGET.store(to as u8, Ordering::Release);
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    if enabled() && in_place() {
        if let Some(keyed) = sys::keyed_translations() {
            // The set counting translations live in: any, as long as it changes each time.
            let set = !SECOND_SET.load(Ordering::Acquire);
            if keyed.switch(owner(), set, switched_in_place, 0) {
                SECOND_SET.store(set, Ordering::Release);
                return;
            }
        }
    }
    flush();
}

/// The switch by `qemu_plugin_reset`: `crate::on_reset` runs after the flush.
fn flush() {
    // SAFETY: called on a vCPU thread (a callback, the fault hook interrupting generated
    // code, or a system call callback) with the id QEMU gave the plugin.
    unsafe { sys::qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), crate::on_reset) };
}

/// The owner's vCPU translates into (and looks up) its second set of translations.
static SECOND_SET: AtomicBool = AtomicBool::new(false);

/// The switch on the owner's thread between two blocks, the vCPU in its new set.
extern "C" fn switched_in_place(_cpu: *mut c_void, _data: u64) {
    if !enabled() {
        // A second thread started since the request: its flush switches (`second_thread`).
        return;
    }
    SWITCHES_IN_PLACE.fetch_add(1, Ordering::Relaxed);
    crate::switched();
}

/// A window just closed (in a callback, on the vCPU's thread): count the skip inline.
pub fn window_closed() {
    if enabled() {
        request(Mode::Count);
    }
}

/// A guest thread `vcpu` starts while others are live (called on its creator's thread, in
/// the clone system call). Returns the counter credit that belongs to the creator, `owner`.
pub fn second_thread(child: u32) -> Option<(u32, u64)> {
    if !ENABLED.swap(false, Ordering::AcqRel) {
        return None;
    }
    let _guard = ARM.lock().ok();
    // SAFETY: our own page.
    unsafe { sys::protect_page(page(), true) };
    let owner = OWNER.swap(child, Ordering::AcqRel);
    let now = count();
    let credit = now.wrapping_sub(rebase(now));
    if mode() == Mode::Count || PENDING.load(Ordering::Acquire) {
        // A flush even when a switch in place is queued: that one now does nothing, and
        // only a flush (every vCPU stopped) also reaches the new thread's translations.
        TARGET.store(Mode::Callbacks as u8, Ordering::Release);
        PENDING.store(true, Ordering::Release);
        flush();
    }
    Some((owner, credit))
}

/// Called when the reset is done, with every vCPU stopped: gives the counter's credit since
/// the last one to `credit` (for `OWNER`), which returns the owner's skip left, and sets the
/// mode to translate in from now on (and the poller's trigger when that is counting).
pub fn on_reset(credit: impl FnOnce(u32, u64) -> u64) {
    RESETS.fetch_add(1, Ordering::Relaxed);
    let _guard = ARM.lock().ok();
    // SAFETY: our own page.
    unsafe { sys::protect_page(page(), true) };
    let now = count();
    // Rebased before the owner is credited: a death in between loses the delta from the
    // count mgbench recovers instead of counting it twice.
    let delta = now.wrapping_sub(rebase(now));
    let skip_left = credit(OWNER.load(Ordering::Acquire), delta);
    let to = if enabled() {
        mode_from(TARGET.load(Ordering::Acquire))
    } else {
        Mode::Callbacks
    };
    if to == Mode::Count {
        if let Err(e) = sys::install_fault_hook(on_fault) {
            sys::outs(&format!("{e}: switched sampling off"));
            ENABLED.store(false, Ordering::Release);
            return finish(Mode::Callbacks);
        }
        TRIGGER.store(now + skip_left, Ordering::Release);
    }
    finish(to)
}

fn finish(to: Mode) {
    MODE.store(to as u8, Ordering::Release);
    PENDING.store(false, Ordering::Release);
}

/// The counter's credit not given to any thread yet (at exit), for `OWNER`.
pub fn take_credit() -> (u32, u64) {
    let now = count();
    (OWNER.load(Ordering::Acquire), now.wrapping_sub(rebase(now)))
}

/// The vCPU whose thread the counter's uncredited accesses belong to.
pub fn owner() -> u32 {
    OWNER.load(Ordering::Acquire)
}

/// The only guest thread so far (set when the first vCPU starts).
pub fn set_owner(vcpu: u32) {
    OWNER.store(vcpu, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_sums_every_lane_the_blocks_add_to() {
        let before = count();
        // A block of 11 instructions, each adding once to its lane, as generated code does.
        for i in 0..11 {
            // SAFETY: lanes are aligned u64s inside our static page; nothing else runs.
            unsafe { *lane_ptr(i) += 1 };
        }
        assert_eq!(count() - before, 11);
        // Lanes are distinct cache lines, all on the counter page (one protect covers them).
        let lanes: Vec<usize> = (0..LANES).map(|l| lane_ptr(l) as usize).collect();
        for w in lanes.windows(2) {
            assert_eq!(w[1] - w[0], 64);
        }
        assert!(lanes.iter().all(|&a| a & !0xfff == page() as usize));
        assert_eq!(lane_ptr(LANES), lane_ptr(0));
    }
}
