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
//! a thread's stack, or `MAP_POPULATE`), and the growth of its `brk` heap, up to a budget of a quarter of the
//! memory available at the start (a program that maps more than it touches keeps the rest
//! unbacked). A call that unmaps, moves, protects or advises memory first takes its range
//! out of the queue, under the lock the helper holds while it populates a piece, so the
//! helper never touches memory the program has given another use.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// x86-64 system call numbers.
const MMAP: i64 = 9;
const MPROTECT: i64 = 10;
const MUNMAP: i64 = 11;
const BRK: i64 = 12;
const MREMAP: i64 = 25;
const MADVISE: i64 = 28;

/// A new mapping smaller than this is left to the program (glibc's small allocations come
/// from its heap, whose growth is taken whatever its size).
pub const MIN_BYTES: u64 = 1 << 20;
/// Populated at a time, under the lock (~0.2 ms unarmed): a call that unmaps waits at most
/// one piece.
const PIECE: u64 = 256 << 10;
const PAGE: u64 = 4096;

/// `madvise` advice (Linux 5.14).
const MADV_POPULATE_WRITE: libc::c_int = 23;

struct Queue {
    ranges: VecDeque<(u64, u64)>,
    /// Bytes that may still be queued.
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

thread_local! {
    /// An `mmap`'s length, protection and flags, or a `brk`'s request, from its entry to its
    /// return.
    static PENDING: Cell<Option<(i64, u64, u64, u64)>> = const { Cell::new(None) };
}

/// Starts the helper (live RDX under QEMU) with a budget of `budget` bytes; false where it
/// could not start (then nothing is queued).
pub fn init(budget: u64) -> bool {
    PID.store(std::process::id(), Ordering::Relaxed);
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

/// Queues the whole pages of `lo..hi` that the budget allows, and wakes the helper.
fn push(q: &mut Queue, lo: u64, hi: u64) {
    let lo = lo.div_ceil(PAGE) * PAGE;
    let hi = (hi / PAGE * PAGE).min(lo.saturating_add(q.budget / PAGE * PAGE));
    if hi <= lo {
        return;
    }
    q.budget -= hi - lo;
    q.ranges.push_back((lo, hi));
    WAKE.notify_one();
}

fn cut(lo: u64, hi: u64) {
    if let Ok(mut q) = QUEUE.lock() {
        remove(&mut q, lo, hi);
    }
}

/// Takes `lo..hi` out of the queued ranges (what is left of a range on either side stays).
fn remove(q: &mut Queue, lo: u64, hi: u64) {
    if q.ranges.iter().all(|&(a, b)| b <= lo || a >= hi) {
        return;
    }
    let mut kept = VecDeque::with_capacity(q.ranges.len() + 1);
    for &(a, b) in &q.ranges {
        if b <= lo || a >= hi {
            kept.push_back((a, b));
            continue;
        }
        if a < lo {
            kept.push_back((a, lo));
        }
        if b > hi {
            kept.push_back((hi, b));
        }
    }
    q.ranges = kept;
}

/// Pages of `lo..hi` (page-aligned, at most [`PIECE`]) not yet in memory: those the helper
/// is about to touch first (the program may have touched the others).
fn absent_pages(lo: u64, hi: u64) -> u64 {
    let mut present = [0u8; (PIECE / PAGE) as usize];
    let n = ((hi - lo) / PAGE) as usize;
    // SAFETY: mincore writes one byte per page of the range into `present`, which holds
    // PIECE / PAGE >= n bytes.
    let r = unsafe {
        libc::mincore(
            lo as *mut libc::c_void,
            (hi - lo) as usize,
            present.as_mut_ptr(),
        )
    };
    if r != 0 {
        return 0;
    }
    present[..n].iter().filter(|&&b| b & 1 == 0).count() as u64
}

fn helper() {
    crate::sys::block_all_signals();
    let Ok(mut q) = QUEUE.lock() else {
        return;
    };
    loop {
        let Some(&(lo, hi)) = q.ranges.front() else {
            q = match WAKE.wait(q) {
                Ok(q) => q,
                Err(_) => return,
            };
            continue;
        };
        let end = hi.min(lo + PIECE);
        // Under the lock: a call that unmaps this range waits for the piece to end.
        let fresh = absent_pages(lo, end);
        // SAFETY: madvise on a range the guest mapped private, anonymous and writable and has
        // not unmapped, moved, protected or advised since (those calls take it out of the
        // queue under this lock first); populating changes no byte of it.
        let r = unsafe {
            libc::madvise(
                lo as *mut libc::c_void,
                (end - lo) as usize,
                MADV_POPULATE_WRITE,
            )
        };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // A kernel before 5.14: no populating here.
            ENABLED.store(false, Ordering::Release);
            q.ranges.clear();
            return;
        }
        if r == 0 {
            PAGES.fetch_add(fresh, Ordering::Relaxed);
        }
        if let Some(front) = q.ranges.front_mut() {
            if *front == (lo, hi) {
                if end >= hi {
                    q.ranges.pop_front();
                } else {
                    front.0 = end;
                }
            }
        }
        // Let the program's calls in between pieces.
        drop(q);
        q = match QUEUE.lock() {
            Ok(q) => q,
            Err(_) => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_of(ranges: &[(u64, u64)]) -> Queue {
        Queue {
            ranges: ranges.iter().copied().collect(),
            budget: 0,
            brk: 0,
        }
    }

    #[test]
    fn a_cut_keeps_what_lies_outside_it() {
        let mut q = queue_of(&[(0x1000, 0x5000), (0x8000, 0x9000)]);
        remove(&mut q, 0x2000, 0x3000);
        assert_eq!(
            Vec::from(q.ranges.clone()),
            [(0x1000, 0x2000), (0x3000, 0x5000), (0x8000, 0x9000)]
        );
        remove(&mut q, 0, 0x8800);
        assert_eq!(Vec::from(q.ranges.clone()), [(0x8800, 0x9000)]);
        remove(&mut q, 0xa000, 0xb000);
        assert_eq!(Vec::from(q.ranges), [(0x8800, 0x9000)]);
    }

    #[test]
    fn the_budget_bounds_what_is_queued() {
        let mut q = queue_of(&[]);
        q.budget = 3 * PAGE;
        push(&mut q, 0x1800, 0x10000);
        // Whole pages only, from the first whole one, up to the budget.
        assert_eq!(Vec::from(q.ranges.clone()), [(0x2000, 0x5000)]);
        assert_eq!(q.budget, 0);
        push(&mut q, 0x20000, 0x30000);
        assert_eq!(q.ranges.len(), 1);
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
}
