//! x86-64 Linux system call numbers of the guest's calls the plugin follows. QEMU's system
//! call callbacks give the guest's number (an x86-64 program's, whatever the host), so these
//! are the x86-64 ABI's, written once here rather than beside each use.

pub const CLOSE: i64 = 3;
pub const MMAP: i64 = 9;
pub const MPROTECT: i64 = 10;
pub const MUNMAP: i64 = 11;
pub const BRK: i64 = 12;
pub const RT_SIGACTION: i64 = 13;
pub const RT_SIGPROCMASK: i64 = 14;
pub const RT_SIGRETURN: i64 = 15;
pub const MREMAP: i64 = 25;
pub const MADVISE: i64 = 28;
pub const DUP2: i64 = 33;
pub const CLONE: i64 = 56;
pub const FORK: i64 = 57;
pub const VFORK: i64 = 58;
pub const EXECVE: i64 = 59;
pub const EXIT: i64 = 60;
pub const RT_SIGSUSPEND: i64 = 130;
pub const DUP3: i64 = 292;
pub const EXECVEAT: i64 = 322;
pub const CLONE3: i64 = 435;
pub const CLOSE_RANGE: i64 = 436;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers_are_the_x86_64_abis() {
        // The host's own table where the host is x86-64 (this project's machines).
        #[cfg(target_arch = "x86_64")]
        for (ours, abi) in [
            (CLOSE, libc::SYS_close),
            (MMAP, libc::SYS_mmap),
            (MPROTECT, libc::SYS_mprotect),
            (MUNMAP, libc::SYS_munmap),
            (BRK, libc::SYS_brk),
            (RT_SIGACTION, libc::SYS_rt_sigaction),
            (RT_SIGPROCMASK, libc::SYS_rt_sigprocmask),
            (RT_SIGRETURN, libc::SYS_rt_sigreturn),
            (MREMAP, libc::SYS_mremap),
            (MADVISE, libc::SYS_madvise),
            (DUP2, libc::SYS_dup2),
            (CLONE, libc::SYS_clone),
            (FORK, libc::SYS_fork),
            (VFORK, libc::SYS_vfork),
            (EXECVE, libc::SYS_execve),
            (EXIT, libc::SYS_exit),
            (RT_SIGSUSPEND, libc::SYS_rt_sigsuspend),
            (DUP3, libc::SYS_dup3),
            (EXECVEAT, libc::SYS_execveat),
            (CLONE3, libc::SYS_clone3),
            (CLOSE_RANGE, libc::SYS_close_range),
        ] {
            assert_eq!(ours, abi);
        }
    }
}
