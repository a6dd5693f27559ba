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
    // SAFETY: getpid is async-signal-safe.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (prctl, getppid, _exit); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // mgbench died between fork and prctl: no signal will come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
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
