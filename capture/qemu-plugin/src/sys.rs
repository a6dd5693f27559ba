//! The subset of QEMU's plugin API (version 1, as in QEMU 7.2) this plugin uses, declared by
//! hand: Debian ships no qemu-plugin.h. The symbols are exported by the qemu-x86_64 binary
//! and resolved when QEMU loads the plugin.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type qemu_plugin_id_t = u64;
pub type qemu_plugin_meminfo_t = u32;

/// Opaque translation block handle.
#[repr(C)]
pub struct qemu_plugin_tb {
    _private: [u8; 0],
}

/// Opaque instruction handle.
#[repr(C)]
pub struct qemu_plugin_insn {
    _private: [u8; 0],
}

/// `qemu_info_t`: only read during install.
#[repr(C)]
pub struct qemu_info_t {
    pub target_name: *const c_char,
    pub version_min: c_int,
    pub version_cur: c_int,
    pub system_emulation: bool,
    pub smp_vcpus: c_int,
    pub max_vcpus: c_int,
}

/// `enum qemu_plugin_cb_flags`
pub const QEMU_PLUGIN_CB_NO_REGS: c_int = 0;
/// `enum qemu_plugin_mem_rw`
pub const QEMU_PLUGIN_MEM_RW: c_int = 3;

pub type tb_trans_cb = extern "C" fn(qemu_plugin_id_t, *mut qemu_plugin_tb);
pub type vcpu_simple_cb = extern "C" fn(qemu_plugin_id_t, c_uint);
pub type vcpu_udata_cb = extern "C" fn(c_uint, *mut c_void);
pub type vcpu_mem_cb = extern "C" fn(c_uint, qemu_plugin_meminfo_t, u64, *mut c_void);
pub type udata_cb = extern "C" fn(qemu_plugin_id_t, *mut c_void);
pub type vcpu_syscall_ret_cb = extern "C" fn(qemu_plugin_id_t, c_uint, i64, i64);
pub type simple_cb = extern "C" fn(qemu_plugin_id_t);

/// `enum qemu_plugin_op`
pub const QEMU_PLUGIN_INLINE_ADD_U64: c_int = 0;

extern "C" {
    pub fn qemu_plugin_register_vcpu_tb_trans_cb(id: qemu_plugin_id_t, cb: tb_trans_cb);
    pub fn qemu_plugin_register_vcpu_init_cb(id: qemu_plugin_id_t, cb: vcpu_simple_cb);
    pub fn qemu_plugin_register_vcpu_exit_cb(id: qemu_plugin_id_t, cb: vcpu_simple_cb);
    pub fn qemu_plugin_register_vcpu_syscall_ret_cb(id: qemu_plugin_id_t, cb: vcpu_syscall_ret_cb);
    pub fn qemu_plugin_register_atexit_cb(id: qemu_plugin_id_t, cb: udata_cb, udata: *mut c_void);
    pub fn qemu_plugin_tb_n_insns(tb: *const qemu_plugin_tb) -> usize;
    pub fn qemu_plugin_tb_vaddr(tb: *const qemu_plugin_tb) -> u64;
    pub fn qemu_plugin_tb_get_insn(tb: *const qemu_plugin_tb, idx: usize) -> *mut qemu_plugin_insn;
    pub fn qemu_plugin_insn_vaddr(insn: *const qemu_plugin_insn) -> u64;
    pub fn qemu_plugin_insn_data(insn: *const qemu_plugin_insn) -> *const c_void;
    pub fn qemu_plugin_insn_size(insn: *const qemu_plugin_insn) -> usize;
    pub fn qemu_plugin_register_vcpu_mem_cb(
        insn: *mut qemu_plugin_insn,
        cb: vcpu_mem_cb,
        flags: c_int,
        rw: c_int,
        udata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut qemu_plugin_insn,
        cb: vcpu_udata_cb,
        flags: c_int,
        udata: *mut c_void,
    );
    /// Adds `imm` to the u64 at `ptr` on each access, in generated code (no call). The
    /// address is the same for every vCPU and the add is not atomic.
    pub fn qemu_plugin_register_vcpu_mem_inline(
        insn: *mut qemu_plugin_insn,
        rw: c_int,
        op: c_int,
        ptr: *mut c_void,
        imm: u64,
    );
    /// Unregisters every callback of the plugin, flushes all translations, then calls `cb`
    /// (asynchronously, with every vCPU stopped). Must be called from a vCPU thread.
    pub fn qemu_plugin_reset(id: qemu_plugin_id_t, cb: simple_cb);
    pub fn qemu_plugin_mem_size_shift(info: qemu_plugin_meminfo_t) -> c_uint;
    pub fn qemu_plugin_mem_is_store(info: qemu_plugin_meminfo_t) -> bool;
}

/// Prints a message on stderr. (`qemu_plugin_outs` goes to QEMU's log, which is silent
/// unless QEMU runs with `-d plugin`: users would never see our errors.)
pub fn outs(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "mgbench-qemu-plugin: {msg}");
}

/// Blocks every signal in the calling (plugin-created) thread. QEMU handles host signals on
/// the assumption that they arrive on vCPU threads; a process-directed signal (Ctrl-C,
/// SIGXFSZ) delivered to our writer thread would crash it.
pub fn block_all_signals() {
    // SAFETY: sigset_t is plain data initialised by sigfillset; pthread_sigmask only changes
    // the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Makes the page at `page` read-only (`writable` false) or read-write again.
///
/// # Safety
/// `page` must be a page-aligned page of this library's own writable data.
pub unsafe fn protect_page(page: *mut c_void, writable: bool) {
    let prot = if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: the caller guarantees the page is ours; mprotect is async-signal-safe.
    unsafe { libc::mprotect(page, 4096, prot) };
}

/// A write to a page made read-only by [`protect_page`] lands here: `on_fault` gets the
/// faulting address and returns true when it handled the fault (then the write is retried).
/// Any other SIGSEGV goes to the handler installed before (QEMU's), unchanged.
pub type FaultHook = fn(usize) -> bool;

static FAULT_HOOK: std::sync::OnceLock<(FaultHook, libc::sigaction)> = std::sync::OnceLock::new();

extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some((hook, old)) = FAULT_HOOK.get() else {
        return;
    };
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    if hook(addr) {
        return;
    }
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO handler has this signature; we call it exactly as the kernel
        // would have, in the same signal context.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig, info, ctx);
    } else if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
        // Put the default back: the faulting instruction runs again and kills the process.
        // SAFETY: plain sigaction call with a zeroed (default) action.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig);
    }
}

/// Puts `hook` in front of the current SIGSEGV handler (once; later calls do nothing). Call it
/// after QEMU installed its own handlers, that is from a callback once guest code runs.
pub fn install_fault_hook(hook: FaultHook) -> Result<(), String> {
    if FAULT_HOOK.get().is_some() {
        return Ok(());
    }
    // SAFETY: sigaction with zero-initialised structs; the new handler has the SA_SIGINFO
    // signature and keeps the old handler's flags (alternate stack) and mask.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
        }
        let _ = FAULT_HOOK.set((hook, old));
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_segv as *const () as usize;
        act.sa_flags = (old.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
        act.sa_mask = old.sa_mask;
        if libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut()) != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Maps `len` bytes read-write: the file `fd` shared (`fd` >= 0), or private memory. Only
/// the pages touched take memory.
pub fn map_slots(fd: c_int, len: usize) -> std::io::Result<*mut u8> {
    let (flags, fd) = if fd >= 0 {
        (libc::MAP_SHARED, fd)
    } else {
        (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
    };
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Replaces the mapping at `base` with private zeroed memory (in a forked child, so that the
/// parent's shared pages are not written).
///
/// # Safety
/// `base..base+len` must be a mapping of this library that nothing else refers to as shared.
pub unsafe fn remap_private(base: *mut u8, len: usize) {
    // SAFETY: MAP_FIXED over our own mapping; mmap is async-signal-safe (fork handlers may
    // only make such calls).
    unsafe {
        libc::mmap(
            base.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
}

/// Runs `f` in the child after every fork of this process.
pub fn on_fork_child(f: extern "C" fn()) {
    // SAFETY: registers a handler that makes only async-signal-safe calls.
    unsafe { libc::pthread_atfork(None, None, Some(f)) };
}
