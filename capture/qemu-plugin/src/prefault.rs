//! Live RDX: the first touch of the program's large new anonymous memory, made ahead of the
//! program on a thread of its own.
//!
//! The kernel clears each page a thread touches first with a string instruction (`rep
//! stosb`), which runs about 20x slower on some CPUs (an AMD EPYC here: 80 ns a page, armed
//! 2 us) while a debug register is armed on the faulting thread, and live RDX keeps the vCPU
//! threads' registers armed nearly the whole run: GUPS's 128 MiB table (34 K pages) cost
//! about 70 ms of a 0.5 s run. A thread without registers (this module's) touches such
//! memory first, front to back, with `madvise(MADV_POPULATE_WRITE)`: the kernel clears the
//! pages there at full speed, and the program finds them mapped. Its accesses are the same;
//! only where the pages' clearing runs changes.
//!
//! Which memory: private anonymous writable mappings of at least [`MIN_BYTES`] that the
//! program makes with `mmap` (not `MAP_NORESERVE`, `MAP_HUGETLB`, `MAP_GROWSDOWN`, `MAP_STACK`:
//! a thread's stack, or `MAP_POPULATE`), and the growth of its `brk` heap. Only ahead of
//! where the program writes: a range is populated a window of [`AHEAD`] at a time, once the
//! program has touched its sentinel page (the range's first page, then a quarter into the
//! window populated last, which is left for the program to touch), so a program that maps
//! far more than it uses (GNU sort maps an 870 MiB buffer to sort 14 MB) gets at most a
//! window more than it touches, and one front to back never waits (a window takes ~2 ms, the
//! program under QEMU ~6 ms to reach the next). At most a quarter of the memory available
//! is populated in all. A call that unmaps, moves, protects or advises memory first takes
//! the ranges it overlaps out of the queue, under the lock the helper holds while it
//! populates a piece, so the helper never touches memory the program has given another use.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::nr::{BRK, MADVISE, MMAP, MPROTECT, MREMAP, MUNMAP};

/// A new mapping smaller than this is left to the program (glibc's small allocations come
/// from its heap, whose growth is taken whatever its size).
pub const MIN_BYTES: u64 = 1 << 20;
/// Populated at a time, under the lock (~0.1 ms unarmed): a call that unmaps waits at most
/// one piece.
const PIECE: u64 = 256 << 10;
/// Populated at once when the program reaches a sentinel: the most memory populated that the
/// program may not touch, per range.
pub const AHEAD: u64 = 16 << 20;
/// Ranges followed at once (a program with more large mappings leaves the newest to itself).
const MAX_RANGES: usize = 256;
/// The helper looks at the sentinels this often while any range is followed, and up to
/// [`MAX_POLL`] after [`IDLE_LOOKS`] looks in a row found none reached.
const MIN_POLL: std::time::Duration = std::time::Duration::from_millis(1);
const MAX_POLL: std::time::Duration = std::time::Duration::from_millis(8);
const IDLE_LOOKS: u32 = 64;
const PAGE: u64 = 4096;

/// `madvise` advice (Linux 5.14).
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// A range being followed: populated up to `next`; the program's first touch of `sentinel`
/// (a page left absent) calls for the next window.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Range {
    lo: u64,
    hi: u64,
    next: u64,
    sentinel: u64,
}

struct Queue {
    ranges: VecDeque<Range>,
    /// Bytes that may still be populated.
    budget: u64,
    /// The guest's `brk` as last returned (0: not seen yet).
    brk: u64,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    ranges: VecDeque::new(),
    budget: 0,
    brk: 0,
});
static WAKE: Condvar = Condvar::new();
static ENABLED: AtomicBool = AtomicBool::new(false);
static PID: AtomicU32 = AtomicU32::new(0);
/// Pages the helper populated.
static PAGES: AtomicU64 = AtomicU64::new(0);
/// The block left to the program around each sentinel: a page, or a huge page where the
/// kernel backs any anonymous memory with huge pages (populating next to the sentinel would
/// bring it in).
static HOLE: AtomicU64 = AtomicU64::new(PAGE);

thread_local! {
    /// An `mmap`'s length, protection and flags, or a `brk`'s request, from its entry to its
    /// return.
    static PENDING: Cell<Option<(i64, u64, u64, u64)>> = const { Cell::new(None) };
}

/// Starts the helper (live RDX under QEMU) with a budget of `budget` bytes; false where it
/// could not start (then nothing is queued).
pub fn init(budget: u64) -> bool {
    PID.store(std::process::id(), Ordering::Relaxed);
    let always = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|t| t.contains("[always]"));
    HOLE.store(if always { 2 << 20 } else { PAGE }, Ordering::Relaxed);
    if let Ok(mut q) = QUEUE.lock() {
        q.budget = budget;
    }
    let started = std::thread::Builder::new()
        .name("mgbench-prefault".into())
        .spawn(helper)
        .is_ok();
    ENABLED.store(started, Ordering::Release);
    started
}

/// Pages populated ahead of the program so far.
pub fn pages() -> u64 {
    PAGES.load(Ordering::Relaxed)
}

/// A quarter of the memory available: the kernel's `MemAvailable`, or less where the
/// process's cgroup (v2) allows less (`memory.max` less `memory.current`); 0 where unknown.
pub fn default_budget() -> u64 {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024);
    available.min(cgroup_room().unwrap_or(u64::MAX)) / 4
}

/// What the process's cgroup (v2) lets it add to its memory, where it sets a limit.
fn cgroup_room() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max = read("memory.max")?.trim().parse::<u64>().ok()?; // "max": no limit
    let current = read("memory.current")?.trim().parse::<u64>().ok()?;
    Some(max.saturating_sub(current))
}

fn on() -> bool {
    ENABLED.load(Ordering::Acquire) && std::process::id() == PID.load(Ordering::Relaxed)
}

/// A guest system call `num` with arguments `a1`-`a4` is about to run on this thread.
pub fn before_syscall(num: i64, a1: u64, a2: u64, a3: u64, a4: u64) {
    if !matches!(num, MMAP | MPROTECT | MUNMAP | BRK | MREMAP | MADVISE) || !on() {
        return;
    }
    const MAP_FIXED: u64 = 0x10;
    match num {
        MMAP => {
            PENDING.with(|p| p.set(Some((num, a2, a3, a4))));
            if a4 & MAP_FIXED != 0 {
                cut(a1, a1.saturating_add(a2));
            }
        }
        BRK => {
            PENDING.with(|p| p.set(Some((num, a1, 0, 0))));
            if let Ok(mut q) = QUEUE.lock() {
                let old = q.brk;
                if a1 != 0 && a1 < old {
                    remove(&mut q, a1, old);
                }
            }
        }
        _ => cut(a1, a1.saturating_add(a2)),
    }
}

/// The guest system call `num` returned `ret` on this thread.
pub fn after_syscall(num: i64, ret: i64) {
    if !matches!(num, MMAP | BRK) {
        return;
    }
    let Some((call, a, b, c)) = PENDING.with(|p| p.take()) else {
        return;
    };
    if call != num || !on() || (-4095..0).contains(&ret) {
        return;
    }
    let ret = ret as u64;
    match num {
        MMAP => {
            if wanted(a, b, c) {
                queue(ret, ret.saturating_add(a));
            }
        }
        _ => {
            let Ok(mut q) = QUEUE.lock() else {
                return;
            };
            let old = std::mem::replace(&mut q.brk, ret);
            // The first brk (the program asking where its heap ends) only says where it is.
            if old != 0 && ret > old {
                push(&mut q, old, ret);
            }
        }
    }
}

/// Whether a new mapping of `len` bytes with protection `prot` and `flags` is memory to
/// populate ahead.
fn wanted(len: u64, prot: u64, flags: u64) -> bool {
    const PROT_WRITE: u64 = 0x2;
    const MAP_TYPE: u64 = 0xf;
    const MAP_PRIVATE: u64 = 0x2;
    const MAP_ANONYMOUS: u64 = 0x20;
    const MAP_GROWSDOWN: u64 = 0x100;
    const MAP_NORESERVE: u64 = 0x4000;
    const MAP_POPULATE: u64 = 0x8000;
    const MAP_STACK: u64 = 0x20000;
    const MAP_HUGETLB: u64 = 0x40000;
    len >= MIN_BYTES
        && prot & PROT_WRITE != 0
        && flags & MAP_TYPE == MAP_PRIVATE
        && flags & MAP_ANONYMOUS != 0
        && flags & (MAP_GROWSDOWN | MAP_NORESERVE | MAP_POPULATE | MAP_STACK | MAP_HUGETLB) == 0
}

fn queue(lo: u64, hi: u64) {
    if let Ok(mut q) = QUEUE.lock() {
        push(&mut q, lo, hi);
    }
}

/// Follows the whole pages of `lo..hi`, and wakes the helper.
fn push(q: &mut Queue, lo: u64, hi: u64) {
    let lo = lo.div_ceil(PAGE) * PAGE;
    let hi = hi / PAGE * PAGE;
    if hi <= lo || q.ranges.len() >= MAX_RANGES || q.budget < PAGE {
        return;
    }
    q.ranges.push_back(Range {
        lo,
        hi,
        next: lo,
        sentinel: lo,
    });
    WAKE.notify_one();
}

fn cut(lo: u64, hi: u64) {
    if let Ok(mut q) = QUEUE.lock() {
        remove(&mut q, lo, hi);
    }
}

/// Stops following every range that overlaps `lo..hi`.
fn remove(q: &mut Queue, lo: u64, hi: u64) {
    q.ranges.retain(|r| r.hi <= lo || r.lo >= hi);
}

/// Whether the page at `addr` is in memory (the program, or the kernel for it, touched it).
fn present(addr: u64) -> bool {
    let mut v = 0u8;
    // SAFETY: mincore writes one byte for the one page asked for.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, PAGE as usize, &mut v) };
    r == 0 && v & 1 != 0
}

/// Pages of `lo..hi` (page-aligned) not in memory: those the helper is about to touch
/// first (the program may have touched the others).
fn absent_pages(lo: u64, hi: u64) -> u64 {
    let mut present = [0u8; (PIECE / PAGE) as usize];
    let mut absent = 0;
    let mut at = lo;
    while at < hi {
        let end = hi.min(at + PIECE);
        let n = ((end - at) / PAGE) as usize;
        // SAFETY: mincore writes one byte per page of `at..end`, at most PIECE / PAGE, into
        // `present`, which holds PIECE / PAGE bytes.
        let r = unsafe {
            libc::mincore(
                at as *mut libc::c_void,
                (end - at) as usize,
                present.as_mut_ptr(),
            )
        };
        if r == 0 {
            absent += present[..n].iter().filter(|&&b| b & 1 == 0).count() as u64;
        }
        at = end;
    }
    absent
}

fn helper() {
    crate::sys::block_all_signals();
    let Ok(mut q) = QUEUE.lock() else {
        return;
    };
    let mut poll = MIN_POLL;
    let mut idle = 0u32;
    loop {
        q = if q.ranges.is_empty() {
            poll = MIN_POLL;
            match WAKE.wait(q) {
                Ok(q) => q,
                Err(_) => return,
            }
        } else {
            match WAKE.wait_timeout(q, poll) {
                Ok((q, _)) => q,
                Err(_) => return,
            }
        };
        let mut reached = false;
        let mut i = 0;
        while i < q.ranges.len() {
            let r = q.ranges[i];
            if !present(r.sentinel) {
                i += 1;
                continue;
            }
            reached = true;
            let end = r.hi.min(r.next.saturating_add(AHEAD));
            // The next sentinel: a quarter into this window, left for the program (none in
            // the range's last window).
            let mid = if end < r.hi {
                r.next + (end - r.next) / 4 / PAGE * PAGE
            } else {
                end
            };
            // Left to the program: the sentinel's page (or huge page).
            let hole = HOLE.load(Ordering::Relaxed);
            let gap = if end < r.hi {
                let g = mid / hole * hole;
                (g.max(r.next), (g + hole).min(end))
            } else {
                (end, end)
            };
            let mut at = r.next;
            while at < end {
                let stop = end.min(at + PIECE);
                let (a, b) = (at, stop);
                at = stop;
                // The piece less the gap: before it, and after it.
                let b1 = b.min(gap.0).max(a);
                let a2 = a.max(gap.1).min(b).max(b1);
                let pages =
                    populate(&mut q, a, b1).and_then(|n| Some(n + populate(&mut q, a2, b)?));
                if pages.is_none() {
                    // No populating on this kernel (before 5.14), or none left to spend.
                    q.ranges.clear();
                    if !ENABLED.load(Ordering::Acquire) {
                        return;
                    }
                    break;
                }
                // Between pieces, the program's calls go first: one may have taken this range
                // (or another) out of the queue.
                drop(q);
                q = match QUEUE.lock() {
                    Ok(q) => q,
                    Err(_) => return,
                };
                if q.ranges.get(i).is_none_or(|x| (x.lo, x.hi) != (r.lo, r.hi)) {
                    break;
                }
                q.ranges[i].next = at;
            }
            match q.ranges.get_mut(i) {
                Some(x) if (x.lo, x.hi) == (r.lo, r.hi) => {
                    if end >= r.hi {
                        q.ranges.remove(i);
                    } else {
                        x.next = end;
                        x.sentinel = mid;
                        i += 1;
                    }
                }
                _ => {}
            }
        }
        // Every 1 ms while a program may be writing through a window (one front to back
        // under QEMU takes ~6 ms to cross the three quarters past a sentinel), slower only
        // after 64 looks found none reached.
        idle = if reached { 0 } else { idle + 1 };
        poll = if idle < IDLE_LOOKS {
            MIN_POLL
        } else {
            (poll * 2).min(MAX_POLL)
        };
    }
}

/// Populates `lo..hi` (whole pages, at most a piece) under the queue's lock; the pages it
/// touched first, or None where it cannot go on (populating unsupported: disabled; the
/// budget spent).
fn populate(q: &mut Queue, lo: u64, hi: u64) -> Option<u64> {
    if hi <= lo {
        return Some(0);
    }
    if q.budget < hi - lo {
        q.budget = 0;
        return None;
    }
    let fresh = absent_pages(lo, hi);
    // SAFETY: madvise on a range the guest mapped private, anonymous and writable and has
    // not unmapped, moved, protected or advised since (those calls take it out of the queue
    // under this lock first); populating changes no byte of it.
    let r = unsafe {
        libc::madvise(
            lo as *mut libc::c_void,
            (hi - lo) as usize,
            MADV_POPULATE_WRITE,
        )
    };
    if r != 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            ENABLED.store(false, Ordering::Release);
            return None;
        }
        // A page QEMU keeps read-only (code written there), or memory gone: skipped.
        return Some(0);
    }
    q.budget -= hi - lo;
    PAGES.fetch_add(fresh, Ordering::Relaxed);
    Some(fresh)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(lo: u64, hi: u64) -> Range {
        Range {
            lo,
            hi,
            next: lo,
            sentinel: lo,
        }
    }

    #[test]
    fn a_cut_stops_following_the_ranges_it_overlaps() {
        let mut q = Queue {
            ranges: [range(0x1000, 0x5000), range(0x8000, 0x9000)].into(),
            budget: 1 << 30,
            brk: 0,
        };
        remove(&mut q, 0xa000, 0xb000);
        assert_eq!(q.ranges.len(), 2);
        remove(&mut q, 0x4000, 0x8000);
        assert_eq!(Vec::from(q.ranges.clone()), [range(0x8000, 0x9000)]);
        // Whole pages only.
        push(&mut q, 0x20800, 0x23800);
        assert_eq!(q.ranges.back(), Some(&range(0x21000, 0x23000)));
        push(&mut q, 0x30800, 0x30900);
        assert_eq!(q.ranges.len(), 2);
    }

    #[test]
    fn only_large_private_anonymous_writable_mappings_are_wanted() {
        let (rw, private_anon) = (0x3, 0x22);
        assert!(wanted(MIN_BYTES, rw, private_anon));
        assert!(!wanted(MIN_BYTES - 1, rw, private_anon));
        assert!(!wanted(MIN_BYTES, 0x1, private_anon)); // read-only
        assert!(!wanted(MIN_BYTES, 0x0, private_anon)); // a PROT_NONE reservation
        assert!(!wanted(MIN_BYTES, rw, 0x21)); // shared
        assert!(!wanted(MIN_BYTES, rw, 0x02)); // a private file mapping
        assert!(!wanted(MIN_BYTES, rw, private_anon | 0x4000)); // MAP_NORESERVE
        assert!(!wanted(MIN_BYTES, rw, private_anon | 0x8000)); // MAP_POPULATE
        assert!(!wanted(MIN_BYTES, rw, private_anon | 0x20000)); // a thread's stack
        assert!(wanted(MIN_BYTES, rw, private_anon | 0x10)); // MAP_FIXED: a new mapping too
    }

    /// Anonymous memory of `len` bytes in this process, unmapped on drop.
    struct Anon(u64, usize);

    impl Anon {
        fn new(len: usize) -> Anon {
            // SAFETY: a fresh private anonymous mapping.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            Anon(p as u64, len)
        }

        fn touch(&self, offset: u64) {
            // SAFETY: inside the mapping.
            unsafe { ((self.0 + offset) as *mut u8).write_volatile(1) };
        }

        /// Pages present at `offset..offset + len`.
        fn present(&self, offset: u64, len: u64) -> u64 {
            (len / PAGE) - absent_pages(self.0 + offset, self.0 + offset + len)
        }
    }

    impl Drop for Anon {
        fn drop(&mut self) {
            // SAFETY: our own mapping.
            unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
        }
    }

    #[test]
    fn populating_counts_the_pages_touched_first_and_spends_the_budget() {
        let m = Anon::new(PIECE as usize);
        m.touch(0);
        let mut q = Queue {
            ranges: VecDeque::new(),
            budget: 2 * PIECE,
            brk: 0,
        };
        let before = pages();
        assert_eq!(populate(&mut q, m.0, m.0 + PIECE), Some(PIECE / PAGE - 1));
        assert_eq!(m.present(0, PIECE), PIECE / PAGE);
        assert!(pages() >= before + PIECE / PAGE - 1);
        // Again: nothing left to touch first, and the budget is spent.
        assert_eq!(populate(&mut q, m.0, m.0 + PIECE), Some(0));
        assert_eq!(populate(&mut q, m.0, m.0 + PIECE), None);
    }

    /// Waits up to 10 s for `done`.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(10) {
            if done() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    }

    /// The helper populates a window when the program touches the range's first page, leaves
    /// the rest, and the next window when the program touches the sentinel in the first.
    #[test]
    fn the_helper_populates_a_window_ahead_of_each_sentinel_the_program_touches() {
        assert!(init(1 << 30));
        let hole = HOLE.load(Ordering::Relaxed);
        let len = 4 * AHEAD;
        let m = Anon::new(len as usize);
        queue(m.0, m.0 + len);
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(
            m.present(0, len),
            0,
            "nothing before the program's first touch"
        );
        m.touch(0);
        let mid = AHEAD / 4;
        assert!(
            eventually(|| m.present(0, AHEAD) >= AHEAD / PAGE - hole / PAGE),
            "the first window: {} pages of {}",
            m.present(0, AHEAD),
            AHEAD / PAGE
        );
        assert_eq!(
            m.present(mid, PAGE),
            0,
            "the sentinel is left to the program"
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(m.present(AHEAD, len - AHEAD), 0, "no further than a window");
        m.touch(mid);
        assert!(
            eventually(|| m.present(AHEAD, AHEAD) >= AHEAD / PAGE - hole / PAGE),
            "the second window: {}",
            m.present(AHEAD, AHEAD)
        );
        assert_eq!(m.present(2 * AHEAD, 2 * AHEAD), 0);
        // Unmapping takes the range out: the helper never touches it again.
        before_syscall(MUNMAP, m.0, len, 0, 0);
        assert!(QUEUE.lock().unwrap().ranges.iter().all(|r| r.lo != m.0));
    }
}
