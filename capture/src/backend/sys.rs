//! Process-level OS calls for capture: signal interception while a traced program runs, and
//! wait-status decoding. Everything unsafe in the backends' process handling lives here.

use std::sync::atomic::{AtomicI32, Ordering};

static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// While alive, SIGINT, SIGTERM, SIGHUP and SIGQUIT are recorded instead of killing mgbench,
/// so the trace can be finalised after the program stops. A handler (not SIG_IGN) is used
/// because handlers reset to the default in children at exec, while ignored signals stay
/// ignored: the traced program keeps its normal Ctrl-C behaviour.
pub struct SignalGuard {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

const SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

impl SignalGuard {
    pub fn install() -> SignalGuard {
        CAUGHT.store(0, Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in SIGNALS {
            // SAFETY: sigaction is plain data; zeroed is a valid starting value.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as *const () as usize;
            act.sa_flags = libc::SA_RESTART;
            // SAFETY: sa_mask is a valid sigset_t inside `act`.
            unsafe { libc::sigemptyset(&mut act.sa_mask) };
            // SAFETY: zeroed sigaction to receive the previous disposition.
            let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: valid signal number and pointers to initialised structs; the handler
            // only stores to an atomic, which is async-signal-safe.
            if unsafe { libc::sigaction(sig, &act, &mut prev) } == 0 {
                old.push((sig, prev));
            }
        }
        SignalGuard { old }
    }

    /// The last signal caught, if any.
    pub fn caught(&self) -> Option<i32> {
        match CAUGHT.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring the disposition saved in install().
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}

/// Name of a signal ("SIGSEGV"), for messages.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// Makes the program `command` starts die with mgbench: if mgbench is killed (even by
/// SIGKILL, which it cannot intercept), the kernel sends the child SIGKILL instead of letting
/// it run, and trace, on its own. Frames already written stay readable.
pub fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only calls `die_with`
    // and _exit, which are async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if !die_with(parent)? {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Grows the descriptor table of the program `command` starts, before it execs, up to
/// [`crate::descriptors::reserve`] (a number opened and closed again: nothing stays open),
/// so that the plugin's move of its files to [`crate::descriptors::floor`] and up does not
/// grow it once QEMU has threads (an RCU grace period, 10-19 ms here).
pub fn reserve_descriptors(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getrlimit fills the struct it is given.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let Some(top) =
        crate::descriptors::reserve(lim.rlim_cur).and_then(|n| libc::c_int::try_from(n).ok())
    else {
        return;
    };
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl and
    // close, which are async-signal-safe; it allocates nothing. A failure (no descriptor
    // 0-2 open, or no number that high) leaves the table as it was.
    unsafe {
        command.pre_exec(move || {
            for fd in 0..3 {
                let copy = libc::fcntl(fd, libc::F_DUPFD, top);
                if copy >= 0 {
                    libc::close(copy);
                    break;
                }
            }
            Ok(())
        });
    }
}

/// In a child between fork and exec: asks the kernel to send it SIGKILL when its parent
/// `parent` (mgbench) dies. False if the parent died already, between the fork and this
/// call (then no signal will come). Async-signal-safe: two system calls, no allocation.
pub fn die_with(parent: libc::pid_t) -> std::io::Result<bool> {
    // SAFETY: prctl and getppid have no memory arguments here.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(libc::getppid() == parent)
    }
}

/// A memory file (memfd) of `len` bytes for the QEMU plugin's spill slots: shared with the child, gone when
/// the last descriptor closes, so that a killed mgbench leaves no file behind. It is closed
/// on exec except in the command given to [`inherit`].
pub fn memory_file(name: &str, len: u64) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // Growing a file past the file-size limit raises SIGXFSZ, which would kill mgbench.
    // SAFETY: getrlimit fills the struct it is given.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY
        && lim.rlim_cur < len
    {
        return Err(std::io::Error::other(format!(
            "the file-size limit (ulimit -f) is {} bytes, below the {len} bytes needed",
            lim.rlim_cur
        )));
    }
    let name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: a valid C string; memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    // Sparse: only what is written takes memory.
    file.set_len(len)?;
    Ok(file)
}

/// Takes an exclusive lock on `file` (flock) without waiting: `Ok(false)` where another open
/// file holds one. Released when `file` closes (or the process dies).
pub fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Keeps `file` open across the exec of the program `command` starts (as the same number).
pub fn inherit(command: &mut std::process::Command, file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = file.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which is
    // async-signal-safe; it clears close-on-exec on a descriptor the child inherited.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

extern "C" fn on_wake(_sig: libc::c_int) {}

/// A timer that interrupts the calling thread's blocking system calls (they fail with EINTR)
/// at a chosen time: the ptrace backend waits for its threads in a blocking `waitpid` and is
/// woken when a native thread's pause ends. After the first expiry it fires every millisecond
/// until re-armed, so a wake-up that lands just before the wait is repeated, never lost.
///
/// Its signal (SIGALRM) gets a handler that does nothing, installed once and left in place:
/// timers of several threads may live at once, and a restored default action would let a
/// late expiry kill mgbench. Programs mgbench starts get the default back at exec.
pub struct WakeTimer {
    id: libc::timer_t,
    armed: Option<std::time::Instant>,
}

impl WakeTimer {
    pub fn new() -> std::io::Result<WakeTimer> {
        static HANDLER: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
        let installed = HANDLER.get_or_init(|| {
            // SAFETY: sigaction is plain data; zeroed is a valid starting value.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_wake as extern "C" fn(libc::c_int) as *const () as usize;
            // No SA_RESTART: the point is that waitpid returns EINTR.
            act.sa_flags = 0;
            // SAFETY: sa_mask is a valid sigset_t inside `act`.
            unsafe { libc::sigemptyset(&mut act.sa_mask) };
            // SAFETY: a valid signal number and an initialised struct; the handler does
            // nothing.
            if unsafe { libc::sigaction(libc::SIGALRM, &act, std::ptr::null_mut()) } != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            Ok(())
        });
        if let Err(e) = installed {
            return Err(std::io::Error::from_raw_os_error(*e));
        }
        // SAFETY: sigevent is plain data; zeroed is a valid starting value.
        let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
        ev.sigev_notify = libc::SIGEV_THREAD_ID;
        ev.sigev_signo = libc::SIGALRM;
        // SAFETY: gettid has no preconditions.
        ev.sigev_notify_thread_id = unsafe { libc::gettid() };
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid pointers; the timer signals this thread and is deleted on drop.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(WakeTimer { id, armed: None })
    }

    /// Wakes the thread at `at`, then every millisecond until armed again.
    pub fn wake_at(&mut self, at: std::time::Instant) {
        self.armed = Some(at);
        let ts = |d: std::time::Duration| libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            // A zero value would disarm: fire at least a nanosecond from now.
            it_value: ts(at
                .saturating_duration_since(std::time::Instant::now())
                .max(std::time::Duration::from_nanos(1))),
            it_interval: ts(std::time::Duration::from_millis(1)),
        };
        // SAFETY: a timer created in new() and a valid itimerspec.
        unsafe { libc::timer_settime(self.id, 0, &spec, std::ptr::null_mut()) };
    }

    /// When the timer was last armed to fire.
    pub fn armed(&self) -> Option<std::time::Instant> {
        self.armed
    }
}

impl Drop for WakeTimer {
    fn drop(&mut self) {
        // SAFETY: the timer created in new(), deleted once.
        unsafe { libc::timer_delete(self.id) };
    }
}

/// Minor page faults (pages touched for the first time, mostly) of every child mgbench has
/// waited for so far.
pub fn children_minor_faults() -> u64 {
    // SAFETY: getrusage fills a plain struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a pointer to our struct.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return 0;
    }
    u64::try_from(usage.ru_minflt).unwrap_or(0)
}

/// A word nothing touches: the calibration's watchpoint watches it.
static UNTOUCHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Nanoseconds per `rep stosb` of `buf`, the best of a few batches.
#[cfg(target_arch = "x86_64")]
fn stosb_ns(buf: &mut [u8]) -> f64 {
    const REPS: u32 = 16;
    (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..REPS {
                // SAFETY: rep stosb writes rcx bytes of al from rdi: exactly `buf`, which we
                // own mutably; the direction flag is clear (the ABI's default).
                unsafe {
                    std::arch::asm!(
                        "rep stosb",
                        inout("rdi") buf.as_mut_ptr() => _,
                        inout("rcx") buf.len() => _,
                        in("al") 0u8,
                        options(nostack, preserves_flags),
                    );
                }
            }
            start.elapsed().as_nanos() as f64 / f64::from(REPS)
        })
        .fold(f64::INFINITY, f64::min)
}

/// What an armed hardware watchpoint costs string instructions on this CPU: nanoseconds of
/// one `rep stosb` over 4 KiB on this thread, without and with a perf breakpoint armed (on
/// a word nothing touches). x86 CPUs may run string instructions without their fast mode
/// while a data breakpoint is enabled; glibc's memcpy and memset use them for mid-sized
/// blocks, and the kernel clears every new page with one. None where perf refuses
/// breakpoints, or off x86-64.
pub fn string_ops_under_watchpoint() -> Option<(f64, f64)> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::perf::{breakpoint, PerfEventAttr, PERF_FLAG_FD_CLOEXEC};
        let mut buf = vec![1u8; 4096];
        let plain = stosb_ns(&mut buf);
        let attr = breakpoint(UNTOUCHED.as_ptr() as u64, 8);
        // SAFETY: perf_event_open with a valid attr of the size it declares, this thread
        // (pid 0, cpu -1), no group.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            return None;
        }
        let armed = stosb_ns(&mut buf);
        // SAFETY: the descriptor perf_event_open just gave us, closed once.
        unsafe { libc::close(fd as libc::c_int) };
        Some((plain, armed))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The timer interrupts a blocking waitpid (EINTR) while the child is still running, and
    /// keeps firing after its first expiry until armed again.
    #[test]
    fn wake_timer_interrupts_a_blocking_wait() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let mut timer = WakeTimer::new().unwrap();
        let at = Instant::now() + Duration::from_millis(20);
        timer.wake_at(at);
        assert_eq!(timer.armed(), Some(at));
        for _ in 0..3 {
            let r = nix::sys::wait::waitpid(pid, None);
            assert_eq!(r, Err(nix::errno::Errno::EINTR));
        }
        assert!(Instant::now() >= at);
        assert!(child.try_wait().unwrap().is_none(), "the child still runs");
        drop(timer);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
