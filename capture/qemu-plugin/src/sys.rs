//! The subset of QEMU's plugin API (version 1, as in QEMU 7.2) this plugin uses, declared by
//! hand: Debian ships no qemu-plugin.h. The symbols are exported by the qemu-x86_64 binary
//! and resolved when QEMU loads the plugin.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;

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
/// The callback reads guest registers (QEMU writes them back to its CPU state first).
pub const QEMU_PLUGIN_CB_R_REGS: c_int = 1;
/// `enum qemu_plugin_mem_rw`
pub const QEMU_PLUGIN_MEM_R: c_int = 1;
pub const QEMU_PLUGIN_MEM_RW: c_int = 3;

pub type tb_trans_cb = extern "C" fn(qemu_plugin_id_t, *mut qemu_plugin_tb);
pub type vcpu_simple_cb = extern "C" fn(qemu_plugin_id_t, c_uint);
pub type vcpu_udata_cb = extern "C" fn(c_uint, *mut c_void);
pub type vcpu_mem_cb = extern "C" fn(c_uint, qemu_plugin_meminfo_t, u64, *mut c_void);
pub type udata_cb = extern "C" fn(qemu_plugin_id_t, *mut c_void);
pub type vcpu_syscall_ret_cb = extern "C" fn(qemu_plugin_id_t, c_uint, i64, i64);
pub type vcpu_syscall_cb =
    extern "C" fn(qemu_plugin_id_t, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
pub type simple_cb = extern "C" fn(qemu_plugin_id_t);

/// `enum qemu_plugin_op`
pub const QEMU_PLUGIN_INLINE_ADD_U64: c_int = 0;

/// Declares QEMU's plugin API functions. They are looked up in the running QEMU with dlsym
/// when the plugin is installed ([`load_api`]) rather than linked: the same library is also
/// preloaded into native programs (live RDX without QEMU, see `native`), where these symbols
/// do not exist and a linked reference would stop the program from loading.
macro_rules! qemu_api {
    ($( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?; )*) => {
        struct Api {
            $( $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?, )*
        }

        static API: std::sync::OnceLock<Api> = std::sync::OnceLock::new();

        /// Looks QEMU's plugin API up in the running QEMU (QEMU exports it to plugins).
        pub fn load_api() -> Result<(), String> {
            if API.get().is_some() {
                return Ok(());
            }
            let api = Api {
                $( $name: {
                    let name = concat!(stringify!($name), "\0").as_bytes();
                    let Some(p) = CStr::from_bytes_with_nul(name).ok().and_then(qemu_symbol) else {
                        return Err(format!(
                            "this QEMU does not export {} (mgbench needs QEMU 7.2's plugin API)",
                            stringify!($name)
                        ));
                    };
                    // SAFETY: the symbol is QEMU's function with this signature (plugin API
                    // version 1, as in QEMU 7.2's qemu-plugin.h).
                    unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(p)
                    }
                }, )*
            };
            let _ = API.set(api);
            Ok(())
        }

        $(
            $(#[$m])*
            /// # Safety
            /// QEMU's contract for this function; only after [`load_api`] succeeded.
            pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                let api = API.get().expect("QEMU's plugin API is loaded at install");
                (api.$name)($($arg),*)
            }
        )*
    };
}

qemu_api! {
    fn qemu_plugin_register_vcpu_tb_trans_cb(id: qemu_plugin_id_t, cb: tb_trans_cb);
    fn qemu_plugin_register_vcpu_init_cb(id: qemu_plugin_id_t, cb: vcpu_simple_cb);
    fn qemu_plugin_register_vcpu_exit_cb(id: qemu_plugin_id_t, cb: vcpu_simple_cb);
    fn qemu_plugin_register_vcpu_syscall_ret_cb(id: qemu_plugin_id_t, cb: vcpu_syscall_ret_cb);
    fn qemu_plugin_register_vcpu_syscall_cb(id: qemu_plugin_id_t, cb: vcpu_syscall_cb);
    fn qemu_plugin_register_atexit_cb(id: qemu_plugin_id_t, cb: udata_cb, udata: *mut c_void);
    fn qemu_plugin_tb_n_insns(tb: *const qemu_plugin_tb) -> usize;
    fn qemu_plugin_tb_vaddr(tb: *const qemu_plugin_tb) -> u64;
    fn qemu_plugin_tb_get_insn(tb: *const qemu_plugin_tb, idx: usize) -> *mut qemu_plugin_insn;
    fn qemu_plugin_insn_vaddr(insn: *const qemu_plugin_insn) -> u64;
    fn qemu_plugin_insn_data(insn: *const qemu_plugin_insn) -> *const c_void;
    fn qemu_plugin_insn_size(insn: *const qemu_plugin_insn) -> usize;
    fn qemu_plugin_register_vcpu_mem_cb(
        insn: *mut qemu_plugin_insn,
        cb: vcpu_mem_cb,
        flags: c_int,
        rw: c_int,
        udata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut qemu_plugin_insn,
        cb: vcpu_udata_cb,
        flags: c_int,
        udata: *mut c_void,
    );
    /// Adds `imm` to the u64 at `ptr` on each access, in generated code (no call). The
    /// address is the same for every vCPU and the add is not atomic.
    fn qemu_plugin_register_vcpu_mem_inline(
        insn: *mut qemu_plugin_insn,
        rw: c_int,
        op: c_int,
        ptr: *mut c_void,
        imm: u64,
    );
    /// Adds `imm` to the u64 at `ptr` each time the block starts, in generated code.
    fn qemu_plugin_register_vcpu_tb_exec_inline(
        tb: *mut qemu_plugin_tb,
        op: c_int,
        ptr: *mut c_void,
        imm: u64,
    );
    /// Adds `imm` to the u64 at `ptr` each time the instruction runs, in generated code.
    fn qemu_plugin_register_vcpu_insn_exec_inline(
        insn: *mut qemu_plugin_insn,
        op: c_int,
        ptr: *mut c_void,
        imm: u64,
    );
    /// Unregisters every callback of the plugin, flushes all translations, then calls `cb`
    /// (asynchronously, with every vCPU stopped). Must be called from a vCPU thread.
    fn qemu_plugin_reset(id: qemu_plugin_id_t, cb: simple_cb);
    fn qemu_plugin_mem_size_shift(info: qemu_plugin_meminfo_t) -> c_uint;
    fn qemu_plugin_mem_is_store(info: qemu_plugin_meminfo_t) -> bool;
}

/// The address of `name` in the running QEMU, which exports its symbols to plugins (None
/// when absent, as in a native program the library is preloaded into).
fn qemu_symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Sets of translations side by side, through QEMU 7.2 functions that its plugin API does not
/// offer (its binary exports them). QEMU 7.2 keys each translation by the vCPU's trace-event
/// state word as well as by its code address and CPU flags: changing the state of per-vCPU
/// events for the vCPU makes it look up, and translate on first use, another set of blocks,
/// while the first set stays cached, to be found again when the state changes back. So a
/// switch of instrumentation retranslates nothing once the sets exist, and with several
/// events each thread can have a set of its own (a code: one bit per event). The events are
/// the five per-vCPU events of 7.2 (`guest_cpu_reset`, `guest_cpu_enter`, `guest_cpu_exit`,
/// `guest_user_syscall`, `guest_user_syscall_ret`): a vCPU's reset never comes in user mode
/// once the guest runs, enter and exit only when a vCPU is created or removed, the system
/// call events at each system call; none prints anything once QEMU's trace log is off.
/// `qemu_plugin_reset` instead stops every vCPU and flushes every translation: about 0.15 ms
/// of table clearing a switch here, plus translating the program's hot code again after each.
pub struct KeyedTranslations {
    qemu_get_cpu: unsafe extern "C" fn(c_int) -> *mut c_void,
    async_run_on_cpu: unsafe extern "C" fn(*mut c_void, CpuWork, u64),
    set_vcpu_state: unsafe extern "C" fn(*mut c_void, *mut TraceEvent, bool),
    process_queued_cpu_work: unsafe extern "C" fn(*mut c_void),
    /// The events, bit `i` of a code being `events[i]`'s state (at least the first).
    events: Vec<*mut TraceEvent>,
}

// SAFETY: `events` point to QEMU's static event records, only handed back to QEMU.
unsafe impl Sync for KeyedTranslations {}
// SAFETY: as above.
unsafe impl Send for KeyedTranslations {}

/// QEMU 7.2's `TraceEvent` (trace/event-internal.h).
#[repr(C)]
pub struct TraceEvent {
    id: u32,
    vcpu_id: u32,
    name: *const c_char,
    sstate: bool,
    dstate: *mut u16,
}

/// `run_on_cpu_func`: the CPU and the `run_on_cpu_data` union (8 bytes, passed as one).
pub type CpuWork = extern "C" fn(*mut c_void, u64);

/// `MGBENCH_QEMU_SWITCH=flush` makes every switch a `qemu_plugin_reset`, even where
/// [`keyed_translations`] are available (to compare the two).
pub const SWITCH_ENV: &str = "MGBENCH_QEMU_SWITCH";

/// The size of the guest's main stack (QEMU's `guest_stack_size`: the guest's stack limit, 8
/// MiB by default); None outside QEMU.
pub fn guest_stack_size() -> Option<u64> {
    static SIZE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        let p = qemu_symbol(c"guest_stack_size")?;
        // SAFETY: QEMU's `unsigned long guest_stack_size` (linux-user/main.c), set before the
        // guest is loaded and not written after.
        Some(unsafe { *p.cast::<u64>() })
    })
}

/// QEMU 7.2's `LOG_TRACE` bit of `qemu_loglevel` (include/qemu/log.h).
const LOG_TRACE: c_int = 1 << 15;

/// QEMU 7.2's per-vCPU events: each record's symbol and name.
const VCPU_EVENTS: [(&CStr, &CStr); 5] = [
    (c"_TRACE_GUEST_CPU_RESET_EVENT", c"guest_cpu_reset"),
    (c"_TRACE_GUEST_CPU_ENTER_EVENT", c"guest_cpu_enter"),
    (c"_TRACE_GUEST_CPU_EXIT_EVENT", c"guest_cpu_exit"),
    (c"_TRACE_GUEST_USER_SYSCALL_EVENT", c"guest_user_syscall"),
    (
        c"_TRACE_GUEST_USER_SYSCALL_RET_EVENT",
        c"guest_user_syscall_ret",
    ),
];

/// QEMU's event record behind `symbol`, if it is the per-vCPU event `name` (one of the 32
/// bits of the key word), compiled in, as 7.2's records are.
fn vcpu_event(symbol: &CStr, name: &CStr) -> Option<*mut TraceEvent> {
    let event = qemu_symbol(symbol)?.cast::<TraceEvent>();
    // SAFETY: QEMU 7.2's event record (checked field by field before use).
    let ev = unsafe { &*event };
    // SAFETY: the name of a registered event is a static C string.
    let named = !ev.name.is_null() && unsafe { CStr::from_ptr(ev.name) } == name;
    (named && ev.vcpu_id < 32 && ev.sstate && !ev.dstate.is_null()).then_some(event)
}

/// [`KeyedTranslations`], when this QEMU is 7.2, exports what they need, and its
/// `guest_cpu_reset` event record looks as 7.2's does (and [`SWITCH_ENV`] asks for no flushes).
pub fn keyed_translations() -> Option<&'static KeyedTranslations> {
    static KEYED: std::sync::OnceLock<Option<KeyedTranslations>> = std::sync::OnceLock::new();
    KEYED
        .get_or_init(|| {
            if std::env::var(SWITCH_ENV).is_ok_and(|v| v == "flush") || !qemu_is_7_2() {
                return None;
            }
            // The first is needed; the others give threads sets of their own, as long as
            // they follow in a row.
            let events: Vec<*mut TraceEvent> = VCPU_EVENTS
                .iter()
                .map_while(|(symbol, name)| vcpu_event(symbol, name))
                .collect();
            if events.is_empty() {
                return None;
            }
            // QEMU's log backend prints an enabled event's line on the guest's stderr (its
            // LOG_TRACE is on by default): with the system call events among the keys, every
            // system call of a thread counting with code 8 and above did. mgbench asks QEMU for
            // no trace, so the trace log goes off (before any vCPU runs).
            if let Some(level) = qemu_symbol(c"qemu_loglevel") {
                // SAFETY: QEMU 7.2's `int qemu_loglevel`, read only when something is logged.
                unsafe { *level.cast::<c_int>() &= !LOG_TRACE };
            }
            type GetCpu = unsafe extern "C" fn(c_int) -> *mut c_void;
            type RunOnCpu = unsafe extern "C" fn(*mut c_void, CpuWork, u64);
            type SetVcpuState = unsafe extern "C" fn(*mut c_void, *mut TraceEvent, bool);
            type RunWork = unsafe extern "C" fn(*mut c_void);
            // SAFETY: on QEMU 7.2 these symbols are the functions with these signatures
            // (include/hw/core/cpu.h, trace/control.h).
            unsafe {
                Some(KeyedTranslations {
                    qemu_get_cpu: std::mem::transmute::<*mut c_void, GetCpu>(qemu_symbol(
                        c"qemu_get_cpu",
                    )?),
                    async_run_on_cpu: std::mem::transmute::<*mut c_void, RunOnCpu>(qemu_symbol(
                        c"async_run_on_cpu",
                    )?),
                    set_vcpu_state: std::mem::transmute::<*mut c_void, SetVcpuState>(qemu_symbol(
                        c"trace_event_set_vcpu_state_dynamic",
                    )?),
                    process_queued_cpu_work: std::mem::transmute::<*mut c_void, RunWork>(
                        qemu_symbol(c"process_queued_cpu_work")?,
                    ),
                    events,
                })
            }
        })
        .as_ref()
}

/// GLib's `GByteArray` (the head of `GRealArray`): the bytes and their count.
#[repr(C)]
struct GByteArray {
    data: *mut u8,
    len: c_uint,
}

/// Reads a guest thread's stack pointer through QEMU 7.2's gdbstub register reader
/// (`x86_cpu_gdb_read_register`, register 7 of x86-64's gdb order: rax rbx rcx rdx rsi rdi rbp
/// rsp), which its binary exports, into a GLib byte array.
struct RegisterReader {
    qemu_get_cpu: unsafe extern "C" fn(c_int) -> *mut c_void,
    read: unsafe extern "C" fn(*mut c_void, *mut GByteArray, c_int) -> c_int,
    new_array: unsafe extern "C" fn() -> *mut GByteArray,
    set_size: unsafe extern "C" fn(*mut GByteArray, c_uint) -> *mut GByteArray,
}

fn register_reader() -> Option<&'static RegisterReader> {
    static READER: std::sync::OnceLock<Option<RegisterReader>> = std::sync::OnceLock::new();
    READER
        .get_or_init(|| {
            if !qemu_is_7_2() {
                return None;
            }
            // SAFETY: on QEMU 7.2 these symbols are the functions with these signatures
            // (include/hw/core/cpu.h, target/i386/cpu.h, GLib's garray.h).
            unsafe {
                Some(RegisterReader {
                    qemu_get_cpu: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(c_int) -> *mut c_void,
                    >(qemu_symbol(c"qemu_get_cpu")?),
                    read: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(*mut c_void, *mut GByteArray, c_int) -> c_int,
                    >(qemu_symbol(c"x86_cpu_gdb_read_register")?),
                    new_array: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn() -> *mut GByteArray,
                    >(qemu_symbol(c"g_byte_array_new")?),
                    set_size: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(*mut GByteArray, c_uint) -> *mut GByteArray,
                    >(qemu_symbol(c"g_byte_array_set_size")?),
                })
            }
        })
        .as_ref()
}

/// vCPU `vcpu`'s guest stack pointer, read on its own thread from an instruction callback at
/// the start of a translation block (where every guest register is in QEMU's CPU state: TCG
/// writes them back at the end of each block, and the block has changed none yet). None where
/// QEMU is not 7.2.
pub fn guest_stack_pointer(vcpu: u32) -> Option<u64> {
    const RSP: c_int = 7;
    thread_local! {
        static ARRAY: std::cell::Cell<*mut GByteArray> = const { std::cell::Cell::new(std::ptr::null_mut()) };
    }
    let r = register_reader()?;
    // SAFETY: QEMU 7.2's functions, called on the vCPU's own thread (its CPU is not running
    // guest code meanwhile); the array is this thread's own, made by GLib.
    unsafe {
        let cpu = (r.qemu_get_cpu)(vcpu as c_int);
        if cpu.is_null() {
            return None;
        }
        let mut array = ARRAY.get();
        if array.is_null() {
            array = (r.new_array)();
            ARRAY.set(array);
        }
        (r.set_size)(array, 0);
        let n = (r.read)(cpu, array, RSP);
        let a = &*array;
        if n != 8 || a.len != 8 || a.data.is_null() {
            return None;
        }
        let mut b = [0u8; 8];
        std::ptr::copy_nonoverlapping(a.data, b.as_mut_ptr(), 8);
        Some(u64::from_le_bytes(b))
    }
}

/// Whether the running QEMU is 7.2: its binary holds its version banner (read once; the
/// switches and the register reader both ask).
fn qemu_is_7_2() -> bool {
    static IS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IS.get_or_init(|| std::fs::read("/proc/self/exe").is_ok_and(|exe| version_7_2_in(&exe)))
}

fn version_7_2_in(exe: &[u8]) -> bool {
    // A vectorised search: Debian's QEMU 7.2 has its banner 1.8 MB into its 2.5 MB, which a
    // window-by-window comparison took 1.6-2.4 ms to reach, on every run's start.
    memchr::memmem::find(exe, b" version 7.2.").is_some()
}

impl KeyedTranslations {
    /// Codes other than 0 (the set every vCPU starts in).
    pub fn codes(&self) -> u32 {
        (1u32 << self.events.len()) - 1
    }

    /// Makes vCPU `vcpu` use the set of translations `code` (0: the one it started with;
    /// below `1 << events`) from its next block on, then runs `work(cpu, data)` on its thread
    /// before that block, outside generated code. Calls are serialised by the caller, and a
    /// vCPU's `work` of its last call must have run (QEMU compares with the state applied).
    /// False when there is no such vCPU.
    pub fn switch(&self, vcpu: u32, code: u32, work: CpuWork, data: u64) -> bool {
        // SAFETY: QEMU's functions as declared, with a vCPU index from QEMU's callbacks and
        // QEMU's own event records. Both queue work for the vCPU (QEMU's own first: it
        // applies the state and clears the vCPU's jump cache) and make it leave generated
        // code after the block it runs now.
        unsafe {
            let cpu = (self.qemu_get_cpu)(vcpu as c_int);
            if cpu.is_null() {
                return false;
            }
            for (i, &event) in self.events.iter().enumerate() {
                (self.set_vcpu_state)(cpu, event, code >> i & 1 == 1);
            }
            (self.async_run_on_cpu)(cpu, work, data);
        }
        true
    }

    /// Runs the work queued for vCPU `vcpu` now (a [`Self::switch`] applied: QEMU's own work,
    /// then `work`), as QEMU's loop does between blocks. Only on that vCPU's thread, outside
    /// generated code and holding no lock that `work` takes (a system call callback).
    pub fn run_queued_work(&self, vcpu: u32) {
        // SAFETY: QEMU's functions as declared; the caller is the vCPU's thread at a point
        // where QEMU's own loop could run its work (between blocks, before a system call).
        unsafe {
            let cpu = (self.qemu_get_cpu)(vcpu as c_int);
            if !cpu.is_null() {
                (self.process_queued_cpu_work)(cpu);
            }
        }
    }

    /// The events' counts of vCPUs that have them enabled, set to 0 (QEMU then gives a vCPU
    /// created now no enabled event). Only with switches ([`Self::switch`]) held off.
    pub fn take_enabled_counts(&self) -> [u16; 5] {
        let mut counts = [0; 5];
        for (n, &event) in counts.iter_mut().zip(&self.events) {
            // SAFETY: `dstate` of QEMU's static event record (checked non-null at lookup) is
            // its u16 count, written by QEMU only when a vCPU's state changes or a vCPU is
            // created or removed.
            unsafe {
                let at = (*event).dstate;
                *n = at.read_volatile();
                at.write_volatile(0);
            }
        }
        counts
    }

    /// Gives the events their counts back (see [`Self::take_enabled_counts`]).
    pub fn restore_enabled_counts(&self, counts: [u16; 5]) {
        for (n, &event) in counts.iter().zip(&self.events) {
            // SAFETY: as in `take_enabled_counts`.
            unsafe { (*event).dstate.write_volatile(*n) };
        }
    }
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

/// Sleeps of the calling thread end when asked: timer slack of 1 us instead of 50 (the
/// poller's shortest sleeps are 20 us). (A real-time or short-slice poller, tried too, woke
/// sooner on two cores busy with guest threads but cost the 2-thread SpMV 4-8% more.)
pub fn precise_sleeps() {
    // SAFETY: prctl on the calling thread, no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
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
    chain(old, sig, info, ctx);
}

/// Puts `hook` in front of the current SIGSEGV handler (once; later calls do nothing). Call it
/// after QEMU installed its own handlers, that is from a callback once guest code runs.
pub fn install_fault_hook(hook: FaultHook) -> Result<(), String> {
    install_in_front(libc::SIGSEGV, &FAULT_HOOK, hook, on_segv)
}

static BUS_HOOK: std::sync::OnceLock<(fn(), libc::sigaction)> = std::sync::OnceLock::new();

extern "C" fn on_bus(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some((hook, old)) = BUS_HOOK.get() else {
        return;
    };
    hook();
    chain(old, sig, info, ctx);
}

/// Puts `hook` in front of the current SIGBUS handler (once), which then goes on to QEMU's:
/// `hook` only notes the fault (a guest access past the end of a file it mapped). QEMU keeps
/// its host handlers for SIGSEGV and SIGBUS whatever handlers the guest sets.
pub fn install_bus_hook(hook: fn()) -> Result<(), String> {
    install_in_front(libc::SIGBUS, &BUS_HOOK, hook, on_bus)
}

/// Installs `handler` for `sig` in front of the current handler, which is kept with `hook` in
/// `slot` for the handler to call on. Once per signal: later calls do nothing.
fn install_in_front<H>(
    sig: c_int,
    slot: &std::sync::OnceLock<(H, libc::sigaction)>,
    hook: H,
    handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void),
) -> Result<(), String> {
    if slot.get().is_some() {
        return Ok(());
    }
    let old = current_action(sig)
        .ok_or_else(|| format!("sigaction: {}", std::io::Error::last_os_error()))?;
    let _ = slot.set((hook, old));
    set_in_front(sig, handler, &old).map_err(|e| format!("sigaction: {e}"))
}

/// The current action for `sig`; `None` if the kernel will not say.
fn current_action(sig: c_int) -> Option<libc::sigaction> {
    // SAFETY: sigaction only fills the zero-initialised struct it is given.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(sig, std::ptr::null(), &mut now) == 0).then_some(now)
    }
}

/// Sets `handler` for `sig`, with the flags (alternate stack) and mask of `behind`, the
/// action it calls on for what is not its own.
fn set_in_front(
    sig: c_int,
    handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void),
    behind: &libc::sigaction,
) -> std::io::Result<()> {
    // SAFETY: sigaction with a zero-initialised struct; the handler has the SA_SIGINFO
    // signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as *const () as usize;
        act.sa_flags = (behind.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
        act.sa_mask = behind.sa_mask;
        if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Asks the CPU to bring the cache line at `p` in for reading. A hint: any address is fine
/// (prefetches never fault), and nothing happens on other architectures.
#[inline(always)]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads no memory architecturally and never faults, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
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

/// Copies this process's memory at `addr` into `buf` without trusting the address (a guest
/// pointer: `process_vm_readv` fails where a plain read would fault); returns the bytes read.
pub fn read_own(addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the kernel checks the remote range and writes only into `buf`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    usize::try_from(n).unwrap_or(0)
}

/// Runs `f` in the child after every fork of this process.
pub fn on_fork_child(f: extern "C" fn()) {
    // SAFETY: registers a handler that makes only async-signal-safe calls.
    unsafe { libc::pthread_atfork(None, None, Some(f)) };
}

use mgbench_capture::perf::{
    breakpoint, PerfEventAttr, FLAG_DISABLED, FLAG_EXCLUDE_HV, FLAG_EXCLUDE_KERNEL,
    FLAG_PRECISE_IP_SHIFT, FLAG_REMOVE_ON_EXEC, FLAG_SIGTRAP, PERF_FLAG_FD_CLOEXEC,
};

const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_MODIFY_ATTRIBUTES: libc::c_ulong = 0x4008_240b;
/// `si_code` of a SIGTRAP sent by a perf event with `sigtrap` set.
const TRAP_PERF: c_int = 6;

/// [`breakpoint`] that raises SIGTRAP with `sig_data` on this thread when it fires, gone at
/// exec, and created `disabled` or not.
fn breakpoint_attr(addr: u64, len: u64, sig_data: u64, disabled: bool) -> PerfEventAttr {
    let b = breakpoint(addr, len);
    PerfEventAttr {
        flags: b.flags
            | FLAG_REMOVE_ON_EXEC
            | FLAG_SIGTRAP
            | if disabled { FLAG_DISABLED } else { 0 },
        sig_data,
        ..b
    }
}

/// A hardware watchpoint (an x86 debug register, through perf) on the calling thread that
/// raises SIGTRAP when the thread reads or writes the watched bytes. Created disarmed.
pub struct Watchpoint {
    fd: c_int,
}

impl Watchpoint {
    pub fn open(addr: u64) -> std::io::Result<Watchpoint> {
        Ok(Watchpoint {
            fd: open_event(&breakpoint_attr(addr, 8, 0, true))?,
        })
    }

    /// Watches the `len` bytes at `addr` (len 1, 2, 4 or 8, aligned to it); the SIGTRAP it
    /// raises carries `sig_data`. Async-signal-safe.
    pub fn arm(&self, addr: u64, len: u64, sig_data: u64) -> bool {
        let mut attr = breakpoint_attr(addr, len, sig_data, false);
        // SAFETY: an ioctl on our own perf descriptor with a valid attr.
        unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_MODIFY_ATTRIBUTES, &mut attr) == 0 }
    }

    /// The perf descriptor, for [`disarm_watchpoint`] in a signal handler.
    pub fn fd(&self) -> c_int {
        self.fd
    }

    /// Goes on through descriptor `fd`, a copy of its own; the old number is left open (the
    /// guest's call that is about to take it closes it).
    pub fn renumber(&mut self, fd: c_int) {
        self.fd = fd;
    }

    /// Lets the guest's call that is about to close the descriptor close it (not closed here,
    /// where the number may be the guest's again by then).
    pub fn abandon(self) {
        std::mem::forget(self);
    }
}

/// Stops the watchpoint whose perf descriptor is `fd`. Async-signal-safe.
pub fn disarm_watchpoint(fd: c_int) {
    // SAFETY: an ioctl on a perf descriptor; a stale number only fails.
    unsafe { libc::ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) };
}

impl Drop for Watchpoint {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// A watchpoint's SIGTRAP lands here with its `sig_data`; the hook returns true when it was
/// one of its own. Any other SIGTRAP goes to the handler installed before (QEMU's).
pub type TrapHook = fn(u64) -> bool;

static TRAP_HOOK: std::sync::OnceLock<(TrapHook, libc::sigaction)> = std::sync::OnceLock::new();
/// The handler installed behind ours since (see [`keep_trap_hook_in_front`]); null: the one
/// in `TRAP_HOOK`. Each is leaked (a guest changes it a few times at most).
static TRAP_BEHIND: std::sync::atomic::AtomicPtr<libc::sigaction> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_trap(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some((hook, first)) = TRAP_HOOK.get() else {
        return;
    };
    let behind = TRAP_BEHIND.load(Ordering::Acquire);
    // SAFETY: a non-null pointer there is a leaked Box that is never freed.
    let old = if behind.is_null() {
        first
    } else {
        unsafe { &*behind }
    };
    // SAFETY: the kernel passes a valid siginfo; for TRAP_PERF the perf data (an unsigned
    // long) follows si_addr, at byte 24 of the x86-64 layout.
    let (code, data) = unsafe {
        (
            (*info).si_code,
            std::ptr::read_unaligned(info.cast::<u8>().add(24).cast::<u64>()),
        )
    };
    if code == TRAP_PERF && hook(data) {
        return;
    }
    chain(old, sig, info, ctx);
}

/// Calls the handler `old` as the kernel would have.
fn chain(old: &libc::sigaction, sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // By value first: QEMU sets SIG_IGN with SA_SIGINFO among its flags.
    if old.sa_sigaction == libc::SIG_IGN {
        // Ignored: nothing to do.
    } else if old.sa_sigaction == libc::SIG_DFL {
        // Take the default action: put it back and raise the signal again (a fault would
        // recur when the instruction is retried, a trap would not).
        // SAFETY: plain sigaction call with a zeroed (default) action, then raise.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            libc::raise(sig);
        }
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO handler has this signature; called in the same signal
        // context.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig);
    }
}

/// Unblocks SIGTRAP on the calling thread. QEMU user mode gives a vCPU's host thread its
/// guest's signal mask (after a guest `sigprocmask`, and a new thread inherits it), so a
/// guest that blocks every signal blocks our watchpoints' SIGTRAP too: perf then cannot
/// deliver it, the register stays armed, and every touch of the word traps into the kernel
/// (Debian's `xz -T2`, whose worker threads start with all signals blocked, took 259 s
/// instead of 3.4 s). The guest does not see the difference: a SIGTRAP that is not ours
/// goes to QEMU's handler, which keeps it pending for the guest while the guest blocks it.
pub fn unblock_sigtrap() {
    // SAFETY: plain sigset calls on a local set; pthread_sigmask on the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTRAP);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Puts `hook` in front of the current SIGTRAP handler (once). Call it after QEMU installed
/// its handlers (from a callback).
pub fn install_trap_hook(hook: TrapHook) -> Result<(), String> {
    install_in_front(libc::SIGTRAP, &TRAP_HOOK, hook, on_trap)
}

/// Puts the SIGTRAP hook back in front if something replaced it. QEMU user mode sets the
/// host's handler for a signal whenever the guest sets its own (`sigaction(SIGTRAP, ...)`:
/// QEMU's handler, or SIG_IGN), which would take the watchpoints' traps from us: the guest's
/// handler would get them (a program that counted its SIGTRAPs saw 393 instead of 3) and
/// the reuses after that call went unrecorded. The new handler goes behind ours, for the
/// SIGTRAPs that are not ours. Call it after each guest `rt_sigaction` (cheap: one query).
pub fn keep_trap_hook_in_front() {
    if TRAP_HOOK.get().is_none() {
        return;
    }
    let Some(now) = current_action(libc::SIGTRAP) else {
        return;
    };
    if now.sa_sigaction == on_trap as *const () as usize {
        return;
    }
    TRAP_BEHIND.store(Box::into_raw(Box::new(now)), Ordering::Release);
    let _ = set_in_front(libc::SIGTRAP, on_trap, &now);
}

// ---- Native live RDX (preloaded into the program, no QEMU): PMU sampling through perf ----
// (`open_event` also opens the watchpoints above.)

const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_PERIOD: libc::c_ulong = 0x4008_2404;
const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_ADDR: u64 = 1 << 3;
const PERF_RECORD_SAMPLE: u32 = 9;
const F_SETSIG: c_int = 10;
const F_SETOWN_EX: c_int = 15;
const F_OWNER_TID: c_int = 0;
/// Data pages of a sampler's ring buffer (a power of two).
const RING_PAGES: usize = 8;
const PAGE: usize = 4096;

/// The soft limit on descriptors (`ulimit -n`), or 1024 if unknown.
pub fn descriptor_limit() -> u64 {
    // SAFETY: getrlimit fills the struct it is given.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    }
}

/// The lowest number the plugin gives its own descriptors
/// ([`mgbench_capture::descriptors::floor`]: half the soft descriptor limit).
fn high_floor() -> c_int {
    mgbench_capture::descriptors::floor(descriptor_limit()) as c_int
}

/// A copy of descriptor `fd` (close-on-exec) numbered `min` or more; `None` if there is none.
fn dup_from(fd: c_int, min: c_int) -> Option<c_int> {
    // SAFETY: fcntl on a descriptor we hold; it fails cleanly on a bad one.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    (new >= 0).then_some(new)
}

/// Renumbers our descriptor `fd` into the high numbers (see [`high_floor`]) and closes the old
/// number, so that the guest, which shares the descriptor table, neither sees it where it
/// opens or names its own nor closes it by accident. Returns the new number, or `fd` if no
/// higher one is free.
pub fn move_high(fd: c_int) -> c_int {
    if fd >= high_floor() {
        return fd;
    }
    match dup_from(fd, high_floor()) {
        Some(new) => {
            // SAFETY: the old number is ours and has a copy now.
            unsafe { libc::close(fd) };
            new
        }
        None => fd,
    }
}

/// A copy of our descriptor `fd` numbered outside `lo..=hi` (a guest's `close`, `dup2` or
/// `close_range` is about to take that range), leaving `fd` itself open for the guest's call
/// to close; `None` if every free number is inside the range.
///
/// The copy goes to the lowest free number from half the usual floor, else above the range:
/// a program that closes every number upwards (`for (fd = 3; fd < max; fd++) close(fd)`) has
/// passed the first already, where one above its position would be closed again at each step.
pub fn dup_outside(fd: c_int, lo: u64, hi: u64) -> Option<c_int> {
    let outside = |n: c_int| (n as u64) < lo || (n as u64) > hi;
    let low = dup_from(fd, (high_floor() / 2).max(3))?;
    if outside(low) {
        return Some(low);
    }
    close_fd(low);
    let min = c_int::try_from(hi.saturating_add(1)).ok()?;
    dup_from(fd, min).filter(|&n| outside(n))
}

/// Runs `f` on our open descriptor `fd` as a `File`, without closing it after.
pub fn with_file<R>(fd: c_int, f: impl FnOnce(&std::fs::File) -> R) -> R {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` is open and ours; ManuallyDrop keeps the File from closing it.
    let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    f(&file)
}

/// Closes our descriptor `fd`.
pub fn close_fd(fd: c_int) {
    // SAFETY: closing a number; the callers own it.
    unsafe { libc::close(fd) };
}

/// Whether descriptors `a` and `b` of this process refer to the same open file (kcmp);
/// false when they do not, or the kernel cannot tell.
pub fn same_file(a: c_int, b: c_int) -> bool {
    const KCMP_FILE: c_int = 0;
    let pid = pid();
    // SAFETY: kcmp compares two descriptors of our own process; it reads nothing of ours.
    unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_FILE, a, b) == 0 }
}

/// A perf event: its `type` and `config` (perf_event_open(2)), and the `precise_ip` level
/// address sampling needs (PEBS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub kind: u32,
    pub config: u64,
    pub precise_ip: u64,
}

fn open_event(attr: &PerfEventAttr) -> std::io::Result<c_int> {
    // SAFETY: a valid attr of the size it declares; pid 0 and cpu -1: the calling thread on
    // any CPU; no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            0,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(move_high(fd as c_int))
}

/// Reads the value of the counting perf event whose descriptor is `fd`. Async-signal-safe.
pub fn counter_value(fd: c_int) -> u64 {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a u64 we own.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

/// A counting perf event on the calling thread (the access counter of native RDX).
pub struct PerfCounter {
    fd: c_int,
}

impl PerfCounter {
    pub fn open(spec: EventSpec) -> std::io::Result<PerfCounter> {
        let attr = PerfEventAttr {
            kind: spec.kind,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: spec.config,
            flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        Ok(PerfCounter {
            fd: open_event(&attr)?,
        })
    }

    pub fn fd(&self) -> c_int {
        self.fd
    }
}

impl Drop for PerfCounter {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// A sampling perf event on the calling thread: every `period` events the kernel writes the
/// instruction and data addresses to a ring buffer and sends `signal` to this thread.
pub struct PerfSampler {
    fd: c_int,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only read and its tail written by the thread the signal goes to (in
// its handler) and, at exit, by the same thread after the event is disabled.
unsafe impl Send for PerfSampler {}

impl PerfSampler {
    pub fn open(spec: EventSpec, period: u64, signal: c_int) -> std::io::Result<PerfSampler> {
        let attr = PerfEventAttr {
            kind: spec.kind,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: spec.config,
            sample_period: period.max(1),
            sample_type: PERF_SAMPLE_IP | PERF_SAMPLE_ADDR,
            flags: FLAG_DISABLED
                | FLAG_EXCLUDE_KERNEL
                | FLAG_EXCLUDE_HV
                | FLAG_REMOVE_ON_EXEC
                | (spec.precise_ip & 3) << FLAG_PRECISE_IP_SHIFT,
            wakeup_events: 1,
            ..PerfEventAttr::default()
        };
        let fd = open_event(&attr)?;
        let len = (1 + RING_PAGES) * PAGE;
        // SAFETY: maps the event's ring buffer (header page + data pages), shared with the
        // kernel; fcntl calls on our own descriptor route its wake-ups to this thread.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if base == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            let owner: [c_int; 2] = [F_OWNER_TID, libc::gettid()];
            if libc::fcntl(fd, libc::F_SETFL, libc::O_ASYNC) != 0
                || libc::fcntl(fd, F_SETSIG, signal) != 0
                || libc::fcntl(fd, F_SETOWN_EX, owner.as_ptr()) != 0
            {
                let e = std::io::Error::last_os_error();
                libc::munmap(base, len);
                libc::close(fd);
                return Err(e);
            }
            Ok(PerfSampler {
                fd,
                base: base.cast(),
                len,
            })
        }
    }

    pub fn fd(&self) -> c_int {
        self.fd
    }

    pub fn enable(&self) -> bool {
        // SAFETY: an ioctl on our own perf descriptor.
        unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0) == 0 }
    }

    pub fn disable(&self) {
        // SAFETY: an ioctl on our own perf descriptor.
        unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0) };
    }

    /// Events to the next sample. Async-signal-safe.
    pub fn set_period(&self, period: u64) -> bool {
        let p = period.max(1);
        // SAFETY: an ioctl on our own perf descriptor with a pointer to a u64.
        unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_PERIOD, &p as *const u64) == 0 }
    }

    /// Hands every sample in the ring buffer (instruction address, data address) to `f` and
    /// frees its space. Async-signal-safe (no allocation).
    pub fn drain(&self, mut f: impl FnMut(u64, u64)) {
        let size = RING_PAGES * PAGE;
        // SAFETY: data_head (offset 1024) and data_tail (1032) of the mmap header page; the
        // kernel writes head and we write tail, as perf_event_open(2) describes.
        let (head_p, tail_p) = unsafe {
            (
                &*(self.base.add(1024) as *const std::sync::atomic::AtomicU64),
                &*(self.base.add(1032) as *const std::sync::atomic::AtomicU64),
            )
        };
        let head = head_p.load(Ordering::Acquire);
        let mut tail = tail_p.load(Ordering::Relaxed);
        // SAFETY: the data area follows the header page.
        let data = unsafe { self.base.add(PAGE) };
        let read = |at: u64, out: &mut [u8]| {
            for (i, b) in out.iter_mut().enumerate() {
                // SAFETY: inside the data area (offset taken modulo its size).
                *b = unsafe { *data.add((at as usize + i) % size) };
            }
        };
        while tail + 8 <= head {
            let mut h = [0u8; 8];
            read(tail, &mut h);
            let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
            let len = u16::from_ne_bytes([h[6], h[7]]) as u64;
            if len < 8 || tail + len > head {
                break;
            }
            if kind == PERF_RECORD_SAMPLE && len >= 24 {
                let mut body = [0u8; 16];
                read(tail + 8, &mut body);
                let ip = u64::from_ne_bytes(body[..8].try_into().unwrap_or([0; 8]));
                let addr = u64::from_ne_bytes(body[8..].try_into().unwrap_or([0; 8]));
                f(ip, addr);
            }
            tail += len;
        }
        tail_p.store(tail, Ordering::Release);
    }
}

impl Drop for PerfSampler {
    fn drop(&mut self) {
        // SAFETY: our own mapping and descriptor, released once.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

/// A handler for `sig` whose siginfo names the descriptor that raised it (F_SETSIG).
pub type FdSignalHook = fn(c_int) -> bool;

static SAMPLE_HOOK: std::sync::OnceLock<(FdSignalHook, libc::sigaction)> =
    std::sync::OnceLock::new();
static SAMPLE_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_sample_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some((hook, old)) = SAMPLE_HOOK.get() else {
        return;
    };
    // SAFETY: the kernel passes a valid siginfo; for an F_SETSIG signal the _sigpoll member
    // holds si_band (a long at byte 16 of the x86-64 layout) and si_fd (an int at 24).
    let fd = unsafe { std::ptr::read_unaligned(info.cast::<u8>().add(24).cast::<c_int>()) };
    if hook(fd) {
        return;
    }
    chain(old, sig, info, ctx);
}

/// Puts `hook` in front of the handler of `sig` (once): the perf sampler's overflow signal.
/// Other uses of the signal (the program's own) go to the handler installed before.
pub fn install_sample_hook(sig: c_int, hook: FdSignalHook) -> Result<(), String> {
    SAMPLE_SIGNAL.store(sig, Ordering::Release);
    install_in_front(sig, &SAMPLE_HOOK, hook, on_sample_signal)
}

/// Blocks the sampler's signal in the calling thread (before the state it touches is taken
/// at exit).
pub fn block_sample_signal() {
    let sig = SAMPLE_SIGNAL.load(Ordering::Acquire);
    if sig == 0 {
        return;
    }
    // SAFETY: a sigset we own, filled by sigemptyset/sigaddset, then pthread_sigmask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Ends the process with `status` at once (what libc's `_exit` does).
pub fn exit_group(status: c_int) -> ! {
    // SAFETY: exit_group takes an int and does not return.
    unsafe {
        libc::syscall(libc::SYS_exit_group, libc::c_long::from(status));
        libc::abort()
    }
}

/// The running process's id.
pub fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_check_finds_7_2_banners_only() {
        let banner = b"\0usage\0qemu-x86_64 version 7.2.22 (Debian 1:7.2+dfsg-7)\0";
        assert!(version_7_2_in(banner));
        assert!(!version_7_2_in(b"qemu-x86_64 version 8.2.2 (Debian)"));
        assert!(!version_7_2_in(b"qemu-x86_64 version 7.1.0"));
        assert!(!version_7_2_in(b" version 7.2"));
        assert!(!version_7_2_in(b""));
        // The QEMU scripts/setup.sh installs (Debian 12's 7.2, which the in-place switch
        // needs): required under CI, where a missing QEMU fails rather than skips.
        match std::fs::read("/usr/bin/qemu-x86_64") {
            Ok(exe) => assert!(version_7_2_in(&exe), "/usr/bin/qemu-x86_64 is not QEMU 7.2"),
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("/usr/bin/qemu-x86_64 (run scripts/setup.sh): {e}")
            }
            Err(e) => eprintln!("skipped the installed QEMU's check: /usr/bin/qemu-x86_64: {e}"),
        }
    }
}
