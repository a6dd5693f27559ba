//! The plugin's own descriptors (the trace, its progress file, live RDX's events file and
//! watchpoints) live in the guest's descriptor table: QEMU user mode passes the guest's
//! system calls through. A program that names a number (`exec 4>file` in a shell, `dup2(p,
//! 4)`) or closes every descriptor (`close_range(3, ~0U, 0)`) would otherwise take one of
//! ours, and the plugin would go on writing its trace into the program's file.
//!
//! So the plugin keeps its descriptors high ([`sys::move_high`]: far above what programs
//! open or name), and before such a call of the guest's it moves each one the call would
//! take out of the call's range ([`before_syscall`]); where the range leaves no free number,
//! the file is opened again by its path after the call ([`after_syscall`]), and its users
//! wait for that.

use crate::sys;
use std::ffi::c_int;
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, RwLock};

/// `fd` while the descriptor is closed: during the guest's call that closes it (`closer`
/// set), then until a user opens it again by path (a program may hold every free number
/// for a while).
const CLOSED: c_int = -2;
/// How long a user waits for a reopening before it gives up.
const REOPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

// The calls that close or replace a descriptor.
use crate::nr::{CLOSE, CLOSE_RANGE, DUP2, DUP3};
/// `close_range` flag: mark close-on-exec instead of closing (ours are already).
const CLOSE_RANGE_CLOEXEC: u64 = 4;

/// A file the plugin writes while the guest runs, under a number that may change.
pub struct Guarded {
    fd: AtomicI32,
    /// Held to read for each use of `fd`, to write while it changes: a write that took the
    /// old number is over before the guest's call can give that number to another file.
    lock: RwLock<()>,
    path: String,
    append: bool,
    /// While `CLOSED` by a call: the guest's vCPU + 1 whose call closes it, and the number it had.
    closer: AtomicU32,
    closing: AtomicI32,
}

/// Every guarded file (leaked: they live as long as the process).
static GUARDED: Mutex<Vec<&'static Guarded>> = Mutex::new(Vec::new());
/// Copies made before a guest's call: (vCPU + 1, the number the call takes, the copy).
static MOVED: Mutex<Vec<(u32, c_int, c_int)>> = Mutex::new(Vec::new());
/// The process whose descriptors these are (a forked child's writes are not the plugin's).
static PID: AtomicU32 = AtomicU32::new(0);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_path(path: &str, append: bool) -> io::Result<c_int> {
    use std::os::fd::IntoRawFd;
    let file = std::fs::OpenOptions::new()
        .append(append)
        .write(true)
        .open(path)?;
    Ok(sys::move_high(file.into_raw_fd()))
}

/// Opens `path` (existing) for writing, appending when `append`, under a high number.
pub fn open(path: &str, append: bool) -> io::Result<&'static Guarded> {
    let fd = open_path(path, append)?;
    PID.store(std::process::id(), Ordering::Relaxed);
    let g: &'static Guarded = Box::leak(Box::new(Guarded {
        fd: AtomicI32::new(fd),
        lock: RwLock::new(()),
        path: path.to_string(),
        append,
        closer: AtomicU32::new(0),
        closing: AtomicI32::new(-1),
    }));
    lock(&GUARDED).push(g);
    Ok(g)
}

impl Guarded {
    /// Runs `f` on the file's descriptor as it is now. While a guest's call closes it, waits;
    /// after, opens it again by path (retrying while every number is taken, for up to
    /// `REOPEN_WAIT`).
    pub fn with<R>(&self, f: impl FnOnce(&std::fs::File) -> io::Result<R>) -> io::Result<R> {
        let start = std::time::Instant::now();
        loop {
            {
                let held = self.lock.read().unwrap_or_else(|e| e.into_inner());
                let fd = self.fd.load(Ordering::Acquire);
                if fd >= 0 {
                    return sys::with_file(fd, f);
                }
                drop(held);
            }
            let reopened = self.closer.load(Ordering::Acquire) == 0 && self.reopen().is_ok();
            if !reopened {
                if start.elapsed() > REOPEN_WAIT {
                    return Err(io::Error::other(format!(
                        "the program closed mgbench's descriptor of {} and it could not be opened again (every descriptor number taken?)",
                        self.path
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    /// Runs `f` on the file's descriptor as it is now, or opened again by path if it is
    /// closed; `None`, without waiting, while a guest's call closes it or no number is free.
    pub fn try_with<R>(
        &self,
        f: impl FnOnce(&std::fs::File) -> io::Result<R>,
    ) -> Option<io::Result<R>> {
        for _ in 0..2 {
            {
                let _held = self.lock.read().unwrap_or_else(|e| e.into_inner());
                let fd = self.fd.load(Ordering::Acquire);
                if fd >= 0 {
                    return Some(sys::with_file(fd, f));
                }
            }
            if self.closer.load(Ordering::Acquire) != 0 || self.reopen().is_err() {
                return None;
            }
        }
        None
    }

    /// Opens the file again by path if it is closed and no guest's call is closing it.
    fn reopen(&self) -> io::Result<()> {
        let _held = self.lock.write().unwrap_or_else(|e| e.into_inner());
        if self.fd.load(Ordering::Acquire) != CLOSED || self.closer.load(Ordering::Acquire) != 0 {
            return Ok(());
        }
        let fd = open_path(&self.path, self.append)?;
        self.fd.store(fd, Ordering::Release);
        Ok(())
    }

    /// The descriptor's number now (tests; -1 and below while it has none).
    #[cfg(test)]
    fn number(&self) -> c_int {
        self.fd.load(Ordering::Acquire)
    }
}

/// A guarded file as a `Write` (each write one `write(2)`).
pub struct Writer(pub &'static Guarded);

impl io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.with(|mut f| f.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The descriptors guest system call `num` (arguments `a1`..`a3`) closes or replaces, as an
/// inclusive range; `None` for any other call.
pub fn taken_by(num: i64, a1: u64, a2: u64, a3: u64) -> Option<(u64, u64)> {
    // Descriptors are C ints (unsigned for close_range): the upper halves are not read.
    let (a1, a2) = (a1 & 0xffff_ffff, a2 & 0xffff_ffff);
    match num {
        CLOSE => Some((a1, a1)),
        DUP2 if a1 != a2 => Some((a2, a2)),
        DUP3 => Some((a2, a2)),
        CLOSE_RANGE if a3 & CLOSE_RANGE_CLOEXEC == 0 && a1 <= a2 => Some((a1, a2)),
        _ => None,
    }
}

/// Whether this is the process whose descriptors these are.
pub fn ours() -> bool {
    PID.load(Ordering::Relaxed) == std::process::id()
}

/// Whether descriptor `fd` is among `lo..=hi`, the ones a guest call takes.
pub fn taken(fd: c_int, lo: u64, hi: u64) -> bool {
    fd >= 0 && (lo..=hi).contains(&(fd as u64))
}

/// Moves our descriptor `fd` out of `lo..=hi` before vCPU `vcpu`'s call takes that range:
/// the copy's number, or `None` if every free number is inside. If the call fails,
/// [`after_syscall`] closes `fd` again (still ours then).
pub fn move_out(vcpu: u32, fd: c_int, lo: u64, hi: u64) -> Option<c_int> {
    let new = sys::dup_outside(fd, lo, hi)?;
    lock(&MOVED).push((vcpu + 1, fd, new));
    Some(new)
}

/// Before vCPU `vcpu`'s call that takes the descriptors `lo..=hi`: each guarded file there
/// moves out of the range, or, if no number outside it is free, waits for the call's end.
pub fn before_syscall(vcpu: u32, lo: u64, hi: u64) {
    if !ours() {
        return;
    }
    let inside = |fd| taken(fd, lo, hi);
    for g in lock(&GUARDED).iter() {
        if !inside(g.fd.load(Ordering::Acquire)) {
            continue;
        }
        let _held = g.lock.write().unwrap_or_else(|e| e.into_inner());
        let fd = g.fd.load(Ordering::Acquire);
        if !inside(fd) {
            continue;
        }
        match move_out(vcpu, fd, lo, hi) {
            Some(new) => g.fd.store(new, Ordering::Release),
            None => {
                g.closing.store(fd, Ordering::Release);
                g.closer.store(vcpu + 1, Ordering::Release);
                g.fd.store(CLOSED, Ordering::Release);
            }
        }
    }
}

/// After vCPU `vcpu`'s call `num` (one [`taken_by`] names) returned `ret`: a failed call took
/// nothing (except `close`, which frees the number even when it fails), so the old numbers
/// are closed again or taken back; the files it closed are opened again by path (or by
/// their next user, where no number is free now).
pub fn after_syscall(vcpu: u32, num: i64, ret: i64) {
    if !matches!(num, CLOSE | DUP2 | DUP3 | CLOSE_RANGE) || !ours() {
        return;
    }
    let failed = ret < 0 && num != CLOSE;
    lock(&MOVED).retain(|&(by, old, new)| {
        if by != vcpu + 1 {
            return true;
        }
        if failed && sys::same_file(old, new) {
            sys::close_fd(old);
        }
        false
    });
    for g in lock(&GUARDED).iter() {
        if g.closer.load(Ordering::Acquire) != vcpu + 1 {
            continue;
        }
        {
            let _held = g.lock.write().unwrap_or_else(|e| e.into_inner());
            g.closer.store(0, Ordering::Release);
            if failed {
                g.fd.store(g.closing.load(Ordering::Acquire), Ordering::Release);
                continue;
            }
        }
        // If every number is taken now, the file's next user tries again.
        let _ = g.reopen();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_calls_that_take_descriptors_and_their_ranges() {
        assert_eq!(taken_by(CLOSE, 7, 0, 0), Some((7, 7)));
        assert_eq!(taken_by(DUP2, 3, 9, 0), Some((9, 9)));
        // dup2 onto itself closes nothing.
        assert_eq!(taken_by(DUP2, 9, 9, 0), None);
        assert_eq!(taken_by(DUP3, 3, 9, 0), Some((9, 9)));
        assert_eq!(
            taken_by(CLOSE_RANGE, 3, u64::MAX, 0),
            Some((3, 0xffff_ffff))
        );
        assert_eq!(taken_by(CLOSE_RANGE, 3, 100, CLOSE_RANGE_CLOEXEC), None);
        assert_eq!(taken_by(CLOSE_RANGE, 10, 3, 0), None);
        assert_eq!(taken_by(0, 3, 3, 3), None);
    }

    /// One test for the whole sequence: the guarded list and the numbers are the process's.
    #[test]
    fn guarded_files_move_out_of_a_calls_way_or_are_opened_again() {
        let dir = std::env::temp_dir().join(format!("mgbench-fds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace");
        std::fs::write(&path, b"head|").unwrap();
        let g = open(path.to_str().unwrap(), true).unwrap();
        let mut w = Writer(g);
        let first = g.number();
        assert!(first >= 10, "opened high: {first}");
        w.write_all(b"one|").unwrap();

        // dup2(x, first): ours moves; the guest's file takes the number.
        before_syscall(0, first as u64, first as u64);
        let second = g.number();
        assert!(second >= 0 && second != first);
        let other = dir.join("guest");
        let guest = std::fs::File::create(&other).unwrap();
        // SAFETY: test: the guest's call itself.
        assert_eq!(
            unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&guest), first) },
            first
        );
        after_syscall(0, DUP2, first as i64);
        w.write_all(b"two|").unwrap();
        // SAFETY: test: the guest writes to its own number.
        unsafe { libc::write(first, b"guest".as_ptr().cast(), 5) };
        sys::close_fd(first);

        // A failed call: the copy's old number is closed again, the copy stays.
        before_syscall(1, second as u64, second as u64);
        let third = g.number();
        assert_ne!(third, second);
        after_syscall(1, DUP3, -libc::EBADF as i64);
        // SAFETY: test: fcntl on a number that must be closed now.
        assert!(unsafe { libc::fcntl(second, libc::F_GETFD) } < 0);

        // A range with no free number outside (as close_range(0, ~0U)): opened again by path.
        before_syscall(2, 0, 0xffff_ffff);
        assert_eq!(g.number(), CLOSED);
        sys::close_fd(third);
        after_syscall(2, CLOSE_RANGE, 0);
        assert!(g.number() >= 0);
        w.write_all(b"three").unwrap();

        assert_eq!(std::fs::read(&path).unwrap(), b"head|one|two|three");
        assert_eq!(std::fs::read(&other).unwrap(), b"guest");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
