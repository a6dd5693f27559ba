//! Raw OS calls for the ptrace backend: starting a program stopped (so it can be seized
//! before its first instruction), the extended register state (XSAVE) and its layout, and
//! memory reads from the tracee.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Forks a child that stops itself (SIGSTOP) before exec'ing `program`, and waits until it
/// has stopped, `argv0` its `argv[0]`. The caller seizes it and sends SIGCONT. The child dies
/// with mgbench.
pub fn spawn_stopped(program: &Path, argv0: &OsStr, args: &[OsString]) -> std::io::Result<Pid> {
    let to_c = |b: &[u8]| {
        CString::new(b).map_err(|_| std::io::Error::other("argument contains a NUL byte"))
    };
    let prog = to_c(program.as_os_str().as_bytes())?;
    let mut argv = vec![to_c(argv0.as_bytes())?];
    for a in args {
        argv.push(to_c(a.as_bytes())?);
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the child only calls async-signal-safe functions (`die_with`, raise, execv,
    // _exit) on data prepared before the fork; the parent continues normally.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the child, see above.
        unsafe {
            // The program dies with mgbench even once it is no longer traced (recording
            // stopped on a full disk); while traced, PTRACE_O_EXITKILL does the same.
            if let Ok(false) = super::sys::die_with(parent) {
                libc::_exit(127);
            }
            libc::raise(libc::SIGSTOP);
            libc::execv(prog.as_ptr(), ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    let pid = Pid::from_raw(pid);
    loop {
        match waitpid(pid, Some(WaitPidFlag::WSTOPPED)) {
            Ok(WaitStatus::Stopped(_, _)) => return Ok(pid),
            Ok(_) => {
                return Err(std::io::Error::other(
                    "the child exited before it could be traced",
                ))
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Resumes a stopped process.
pub fn resume(pid: Pid) {
    let _ = kill(pid, Signal::SIGCONT);
}

/// Where each XSAVE component lives in the standard (non-compacted) layout ptrace returns.
#[derive(Debug, Clone, Copy)]
pub struct XsaveLayout {
    /// Upper 128 bits of YMM0-15.
    pub ymm_hi: Option<usize>,
    pub opmask: Option<usize>,
    /// Upper 256 bits of ZMM0-15.
    pub zmm_hi: Option<usize>,
    /// ZMM16-31.
    pub hi16_zmm: Option<usize>,
    pub size: usize,
}

impl XsaveLayout {
    /// Reads component offsets from CPUID leaf 0xD.
    pub fn detect() -> XsaveLayout {
        // CPUID leaf 0xD sub-leaf i (i >= 2): EAX = size, EBX = offset of component i.
        let off = |i: u32| {
            let r = std::arch::x86_64::__cpuid_count(0xd, i);
            (r.eax > 0).then_some(r.ebx as usize)
        };
        let size = std::arch::x86_64::__cpuid_count(0xd, 0).ecx as usize;
        XsaveLayout {
            ymm_hi: off(2),
            opmask: off(5),
            zmm_hi: off(6),
            hi16_zmm: off(7),
            size: size.max(4096),
        }
    }
}

const NT_X86_XSTATE: libc::c_int = 0x202;

/// The thread's XSAVE area (empty on failure).
pub fn xstate(tid: Pid, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: PTRACE_GETREGSET writes at most iov_len bytes into buf and updates iov_len.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid.as_raw(),
            NT_X86_XSTATE as usize as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    if rc < 0 {
        return Vec::new();
    }
    buf.truncate(iov.iov_len);
    buf
}

/// One local and one remote iovec of `len` bytes, for `process_vm_readv`/`writev`.
fn iovecs(local: *mut u8, remote: u64, len: usize) -> ([libc::iovec; 1], [libc::iovec; 1]) {
    let io = |base: *mut libc::c_void| {
        [libc::iovec {
            iov_base: base,
            iov_len: len,
        }]
    };
    (io(local.cast()), io(remote as *mut libc::c_void))
}

/// Reads up to `buf.len()` bytes at `addr` of the tracee; returns how many were read.
pub fn read_memory(tid: Pid, addr: u64, buf: &mut [u8]) -> usize {
    let (local, remote) = iovecs(buf.as_mut_ptr(), addr, buf.len());
    // SAFETY: the local iovec describes `buf`, which the kernel fills; the remote one is
    // checked by the kernel against the tracee's mappings.
    let n =
        unsafe { libc::process_vm_readv(tid.as_raw(), local.as_ptr(), 1, remote.as_ptr(), 1, 0) };
    if n > 0 {
        return n as usize;
    }
    // process_vm_readv fails on a range crossing into an unmapped page: fall back to words.
    let mut got = 0;
    while got + 8 <= buf.len() {
        match nix::sys::ptrace::read(tid, (addr + got as u64) as nix::sys::ptrace::AddressType) {
            Ok(w) => {
                buf[got..got + 8].copy_from_slice(&w.to_le_bytes());
                got += 8;
            }
            Err(_) => break,
        }
    }
    got
}

/// Writes `data` at `addr` of the tracee; false unless all of it was written.
pub fn write_memory(tid: Pid, addr: u64, data: &[u8]) -> bool {
    let (local, remote) = iovecs(data.as_ptr().cast_mut(), addr, data.len());
    // SAFETY: the local iovec describes `data`, which the kernel only reads; the remote one
    // is checked by the kernel against the tracee's mappings.
    let n =
        unsafe { libc::process_vm_writev(tid.as_raw(), local.as_ptr(), 1, remote.as_ptr(), 1, 0) };
    usize::try_from(n).is_ok_and(|n| n == data.len())
}

/// Sets a stopped tracee's hardware execution breakpoints (x86 debug registers DR0-DR3) at
/// `addrs` (at most 4; an empty list clears them). False if the kernel refused a register.
pub fn set_exec_breakpoints(tid: Pid, addrs: &[u64]) -> bool {
    let offset =
        |i: usize| std::mem::offset_of!(libc::user, u_debugreg) + i * std::mem::size_of::<u64>();
    let poke = |i: usize, value: u64| {
        // SAFETY: PTRACE_POKEUSER writes one word of the stopped tracee's `struct user`;
        // the kernel checks the offset and the value (a debug register).
        unsafe {
            libc::ptrace(
                libc::PTRACE_POKEUSER,
                tid.as_raw(),
                offset(i) as *mut libc::c_void,
                value as *mut libc::c_void,
            ) == 0
        }
    };
    // DR7 off first, so that no half-set breakpoint fires; then the addresses, then DR7:
    // local enable (bit 2i) for each, condition "execute" and length 1 (both 0).
    if !poke(7, 0) {
        return false;
    }
    let mut dr7 = 0u64;
    for (i, &a) in addrs.iter().take(4).enumerate() {
        if !poke(i, a) {
            return false;
        }
        dr7 |= 1 << (2 * i);
    }
    dr7 == 0 || poke(7, dr7)
}

/// The yama ptrace restriction level (0 = classic), if the LSM is present.
pub fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A CPU affinity mask.
#[derive(Clone, Copy)]
pub struct CpuMask(libc::cpu_set_t);

impl std::fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuMask({} CPUs)", self.count())
    }
}

impl CpuMask {
    /// The mask of thread `tid` (0: the calling thread).
    pub fn of(tid: i32) -> Option<CpuMask> {
        // SAFETY: cpu_set_t is plain bits; sched_getaffinity writes at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
                .then_some(CpuMask(set))
        }
    }

    /// Only `cpu`.
    fn only(cpu: usize) -> CpuMask {
        // SAFETY: as above; CPU_SET checks the index against the set's size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            CpuMask(set)
        }
    }

    fn count(&self) -> u32 {
        // SAFETY: reads the set only.
        unsafe { libc::CPU_COUNT(&self.0) as u32 }
    }

    /// The mask as the kernel lays it out in memory (what `sched_getaffinity` writes).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: cpu_set_t is plain bits, alive as long as `self`.
        unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref(&self.0).cast::<u8>(),
                std::mem::size_of::<libc::cpu_set_t>(),
            )
        }
    }

    /// Gives thread `tid` (0: the calling thread) this mask; false if the kernel refused.
    pub fn apply(&self, tid: i32) -> bool {
        // SAFETY: reads the set only.
        unsafe {
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &self.0) == 0
        }
    }
}

impl PartialEq for CpuMask {
    fn eq(&self, other: &CpuMask) -> bool {
        // SAFETY: reads both sets only.
        unsafe { libc::CPU_EQUAL(&self.0, &other.0) }
    }
}

/// The tracer's thread pinned to the CPU it runs on, so that the threads it single-steps can
/// run there too: every step is a stop of the tracee and a wake-up of the tracer, and
/// between two CPUs each wake-up is an inter-processor interrupt and an idle CPU woken, which
/// in a VM costs several times the step itself (measured here: 4.5x slower steps). The
/// tracer's own mask comes back when this is dropped.
pub struct Pin {
    pub only: CpuMask,
    own: CpuMask,
}

impl Pin {
    /// Pins the calling thread to its current CPU; `None` where it can run on one CPU only
    /// (nothing to gain) or the kernel refuses.
    pub fn tracer() -> Option<Pin> {
        let own = CpuMask::of(0)?;
        if own.count() < 2 {
            return None;
        }
        // SAFETY: no arguments.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
        if cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        let only = CpuMask::only(cpu);
        only.apply(0).then_some(Pin { only, own })
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.own.apply(0);
    }
}

/// Whether thread `tid` has a SIGTRAP queued for it alone (`SigPnd` in its status: a
/// single step's trap is sent to the thread).
pub fn sigtrap_queued(tid: Pid) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigPnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|pending| pending & (1 << (libc::SIGTRAP - 1)) != 0)
}
