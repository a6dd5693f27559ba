//! Raw OS calls for the ptrace backend: starting a program stopped (so it can be seized
//! before its first instruction), the extended register state (XSAVE) and its layout, and
//! memory reads from the tracee.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Forks a child that stops itself (SIGSTOP) before exec'ing `program`, and waits until it
/// has stopped. The caller seizes it and sends SIGCONT.
pub fn spawn_stopped(program: &Path, args: &[OsString]) -> std::io::Result<Pid> {
    let to_c = |b: &[u8]| {
        CString::new(b).map_err(|_| std::io::Error::other("argument contains a NUL byte"))
    };
    let prog = to_c(program.as_os_str().as_bytes())?;
    let mut argv = vec![prog.clone()];
    for a in args {
        argv.push(to_c(a.as_bytes())?);
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: the child only calls async-signal-safe functions (raise, execv, _exit) on data
    // prepared before the fork; the parent continues normally.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the child, see above.
        unsafe {
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

/// Reads up to `buf.len()` bytes at `addr` of the tracee; returns how many were read.
pub fn read_memory(tid: Pid, addr: u64, buf: &mut [u8]) -> usize {
    let local = [libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }];
    let remote = [libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    }];
    // SAFETY: the local iovec describes `buf`; the remote one is only read by the kernel,
    // which checks the tracee's mappings.
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

/// The yama ptrace restriction level (0 = classic), if the LSM is present.
pub fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}
