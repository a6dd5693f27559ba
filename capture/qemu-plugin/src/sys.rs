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
