//! A fixed pool of pinned worker threads for timed kernels.
//!
//! Benchmarks need every worker created, pinned and warm before the clock starts, and a
//! dispatch that costs microseconds, not a thread spawn. The pool keeps `threads - 1` workers
//! (the calling thread is worker 0, as OpenMP's master thread is), each pinned to one allowed
//! CPU. [`Pool::broadcast`] runs a closure once on every worker with its id and returns when all
//! are done. Workers spin briefly after a job, so back-to-back timed runs start at once, then
//! sleep on a condition variable.
//!
//! The one piece of unsafe code here erases the closure's lifetime while workers run it;
//! `broadcast` does not return (or unwind) before every worker has finished with it.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::sys;

/// Spins before a worker sleeps (a few milliseconds of `pause`).
const SPIN_LIMIT: u32 = 1 << 17;

type Job = *const (dyn Fn(usize) + Sync + 'static);

struct Shared {
    generation: AtomicU64,
    remaining: AtomicUsize,
    shutdown: AtomicBool,
    panicked: AtomicBool,
    /// Written by the dispatching thread only while no worker reads it (see broadcast).
    job: UnsafeCell<Option<Job>>,
    /// Number of sleeping workers, guarded for the condition variable.
    sleepers: Mutex<usize>,
    wake: Condvar,
    spin_limit: u32,
}

// SAFETY: the only non-Sync field is `job`, which the dispatcher writes before publishing a new
// generation (Release) and workers read after observing it (Acquire); it is never written while
// a worker may read it, because the dispatcher waits for `remaining == 0` first.
unsafe impl Sync for Shared {}
// SAFETY: the raw job pointer is only dereferenced under the protocol above.
unsafe impl Send for Shared {}

/// A pool of pinned threads; see the module docs.
pub struct Pool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    threads: usize,
    cpus: Vec<usize>,
    pinned: bool,
    restore_affinity: Option<Vec<usize>>,
    /// Serialises broadcasts: `job` has a single slot.
    dispatch: Mutex<()>,
    /// [`Pool::start_cost`], once measured.
    start_cost: OnceLock<f64>,
}

/// How to place the pool's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// One thread per allowed CPU, in order (threads beyond the CPU count wrap around).
    Pinned,
    /// As `Pinned`, starting at the allowed CPU with this index: the place of one MPI rank's
    /// threads among the ranks sharing a node (local rank x threads).
    PinnedFrom(usize),
    /// Let the OS scheduler place threads.
    Unpinned,
}

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("--threads must be at least 1")]
    ZeroThreads,
    #[error("cannot start worker thread {index}: {cause}")]
    Spawn { index: usize, cause: std::io::Error },
}

impl Pool {
    /// Creates `threads` workers (the caller counts as one) and pins them.
    pub fn new(threads: usize, placement: Placement) -> Result<Pool, PoolError> {
        if threads == 0 {
            return Err(PoolError::ZeroThreads);
        }
        let cpus = sys::allowed_cpus();
        let oversubscribed = threads > cpus.len();
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            remaining: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            job: UnsafeCell::new(None),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
            // Spinning on a shared core only steals time from the thread that has work.
            spin_limit: if oversubscribed { 0 } else { SPIN_LIMIT },
        });
        let (pin, first) = match placement {
            Placement::Pinned => (true, 0),
            Placement::PinnedFrom(first) => (true, first),
            Placement::Unpinned => (false, 0),
        };
        let restore_affinity = if pin { sys::current_affinity() } else { None };
        let mut pinned = pin;
        if pin {
            pinned &= sys::pin_current_thread(&[cpus[first % cpus.len()]]);
        }
        let mut pool = Pool {
            shared: Arc::clone(&shared),
            handles: Vec::with_capacity(threads - 1),
            threads,
            cpus: cpus.clone(),
            pinned,
            restore_affinity,
            dispatch: Mutex::new(()),
            start_cost: OnceLock::new(),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<bool>();
        for tid in 1..threads {
            let shared = Arc::clone(&shared);
            let cpu = cpus[(first + tid) % cpus.len()];
            let ready = ready_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("mgbench-worker-{tid}"))
                .spawn(move || {
                    let ok = !pin || sys::pin_current_thread(&[cpu]);
                    let _ = ready.send(ok);
                    worker_loop(&shared, tid);
                })
                .map_err(|cause| PoolError::Spawn { index: tid, cause })?;
            pool.handles.push(handle);
        }
        drop(ready_tx);
        for _ in 1..threads {
            pool.pinned &= ready_rx.recv().unwrap_or(false);
        }
        Ok(pool)
    }

    /// Number of threads, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether every thread was pinned to its CPU.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Whether there are more threads than CPUs to run them.
    pub fn is_oversubscribed(&self) -> bool {
        self.threads > self.cpus.len()
    }

    /// Seconds an empty job takes on every thread (starting them and waiting for all): what
    /// a timed run costs beyond its work. Measured on first use: the fastest of 50 empty
    /// jobs back to back after 5 untimed ones, as timed runs follow each other (2 threads
    /// here: 0.2 us).
    pub fn start_cost(&self) -> f64 {
        *self.start_cost.get_or_init(|| {
            for _ in 0..5 {
                self.broadcast(|_| {});
            }
            (0..50)
                .map(|_| {
                    let t = std::time::Instant::now();
                    self.broadcast(|_| {});
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        })
    }

    /// Runs `f(tid)` once on every thread, `tid` in `0..threads`; the caller runs `f(0)`.
    /// Returns when all calls have returned; a panic in any of them is re-raised here.
    pub fn broadcast<F: Fn(usize) + Sync>(&self, f: F) {
        let _serial = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        if self.threads == 1 {
            f(0);
            return;
        }
        let job: &(dyn Fn(usize) + Sync) = &f;
        // SAFETY: only the lifetime is erased. The pointer is dropped from `shared.job` and no
        // worker touches it after `remaining` reaches 0, which we wait for below before
        // returning or unwinding, so `f` outlives every use.
        let job: Job = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), Job>(job as *const _)
        };
        let shared = &*self.shared;
        // SAFETY: every worker is idle (the previous broadcast waited for remaining == 0 and we
        // hold the dispatch lock), so nobody reads `job` while we write it.
        unsafe { *shared.job.get() = Some(job) };
        shared.remaining.store(self.threads - 1, Ordering::Relaxed);
        let sleepers = {
            let guard = shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            shared.generation.fetch_add(1, Ordering::Release);
            *guard
        };
        if sleepers > 0 {
            shared.wake.notify_all();
        }
        let own = catch_unwind(AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while shared.remaining.load(Ordering::Acquire) != 0 {
            if spins < SPIN_LIMIT {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: all workers are done (remaining == 0, Acquire); none reads `job` now.
        unsafe { *shared.job.get() = None };
        if let Err(payload) = own {
            resume_unwind(payload);
        }
        if shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a replay worker thread panicked");
        }
    }

    /// Runs `f(tid, &mut items[tid])` on every thread: per-thread state without locks.
    /// Threads whose id has no item run nothing.
    pub fn broadcast_mut<T: Send, F: Fn(usize, &mut T) + Sync>(&self, items: &mut [T], f: F) {
        let base = SyncPtr(items.as_mut_ptr());
        let len = items.len();
        self.broadcast(|tid| {
            if tid < len {
                // SAFETY: each tid is distinct and < len, so every thread gets a disjoint
                // element of `items`, which stays borrowed for the whole broadcast.
                let item = unsafe { &mut *base.get().add(tid) };
                f(tid, item);
            }
        });
    }
}

struct SyncPtr<T>(*mut T);
impl<T> SyncPtr<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}
// SAFETY: used only by broadcast_mut, which hands each thread a disjoint element.
unsafe impl<T: Send> Sync for SyncPtr<T> {}

fn worker_loop(shared: &Shared, tid: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        loop {
            let g = shared.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if spins < shared.spin_limit {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let mut sleepers = shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            while shared.generation.load(Ordering::Acquire) == seen {
                *sleepers += 1;
                sleepers = shared
                    .wake
                    .wait(sleepers)
                    .unwrap_or_else(|e| e.into_inner());
                *sleepers -= 1;
            }
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: we observed the new generation with Acquire after the dispatcher stored the
        // job; the dispatcher keeps it alive until we decrement `remaining`.
        if let Some(job) = unsafe { *shared.job.get() } {
            // SAFETY: see above; the closure is Sync, so calling it from here is allowed.
            let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(tid) }));
            if result.is_err() {
                shared.panicked.store(true, Ordering::Relaxed);
            }
        }
        shared.remaining.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let shared = &*self.shared;
        shared.shutdown.store(true, Ordering::Release);
        {
            let _guard = shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            shared.generation.fetch_add(1, Ordering::Release);
        }
        shared.wake.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        if let Some(cpus) = &self.restore_affinity {
            sys::pin_current_thread(cpus);
        }
    }
}

/// The static split of `0..count` among `threads`: contiguous blocks whose sizes differ by at
/// most one, the larger ones first (OpenMP's `schedule(static)`).
pub fn static_range(count: usize, threads: usize, tid: usize) -> Range<usize> {
    let threads = threads.max(1);
    let base = count / threads;
    let extra = count % threads;
    let start = tid * base + tid.min(extra);
    let len = base + usize::from(tid < extra);
    start.min(count)..(start + len).min(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn static_ranges_cover_exactly_once() {
        for count in [0, 1, 7, 8, 1000, 1023] {
            for threads in 1..=9 {
                let mut next = 0;
                for tid in 0..threads {
                    let r = static_range(count, threads, tid);
                    assert_eq!(r.start, next);
                    assert!(r.len() <= count / threads + 1);
                    next = r.end;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn broadcast_runs_each_tid_once_many_times() {
        let pool = Pool::new(3, Placement::Unpinned).unwrap();
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..500 {
            pool.broadcast(|tid| {
                hits[tid].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 500);
        }
    }

    #[test]
    fn broadcast_mut_gives_each_thread_its_item() {
        let pool = Pool::new(4, Placement::Pinned).unwrap();
        let mut items = vec![0usize; 4];
        pool.broadcast_mut(&mut items, |tid, x| *x += tid * 10);
        assert_eq!(items, vec![0, 10, 20, 30]);
    }

    #[test]
    fn workers_wake_after_sleeping() {
        let pool = Pool::new(2, Placement::Unpinned).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let n = AtomicUsize::new(0);
        pool.broadcast(|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn worker_panic_is_reported_not_hung() {
        let pool = Pool::new(2, Placement::Unpinned).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.broadcast(|tid| {
                if tid == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        // The pool still works afterwards.
        let n = AtomicUsize::new(0);
        pool.broadcast(|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn zero_threads_is_an_error() {
        assert!(matches!(
            Pool::new(0, Placement::Pinned),
            Err(PoolError::ZeroThreads)
        ));
    }
}
