//! The ptrace backend: single-step the program natively and compute each instruction's
//! accesses from its registers (see [`super::x86`]).
//!
//! Threads are seized (PTRACE_SEIZE) with PTRACE_O_TRACECLONE, so every thread is traced from
//! its first instruction. In full mode every instruction is stepped (tens of thousands of
//! instructions per second). In timed mode each thread records `window` accesses by stepping,
//! then runs natively until the next window; the pause lasts at least three times as long as
//! the window took and a window steps at most half as long as the pause before it, which keeps
//! the slowdown near 1.5x. Windows begin when the tracer interrupts a thread whose pause is
//! over (PTRACE_INTERRUPT); the tracer blocks in waitpid and a timer wakes it. `--pid` seizes
//! a running process and detaches on Ctrl-C.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use iced_x86::Register;
use nix::sys::ptrace::{self, Event, Options};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::program::resolve;
use super::ptrace_sys::{self, CpuMask, Pin, XsaveLayout};
use super::sys::{SignalGuard, WakeTimer};
use super::x86::{self, Decoded, Registers};
use super::{
    command_line, finalize, perf_map, signal_name, CaptureConfig, CaptureError, CaptureReport,
    ProgramExit, RoiPlan,
};
use crate::import::ChunkBuilder;
use crate::symbols::ElfImage;
use crate::trace::{EndInfo, Mapping, Mode, RoiMeta, TraceMeta, TraceWriter};

/// Registers of a stopped thread, with the XSAVE area fetched only when an instruction needs
/// vector or opmask registers.
struct Snapshot<'a> {
    regs: libc::user_regs_struct,
    tid: Pid,
    layout: &'a XsaveLayout,
    xstate: std::cell::OnceCell<Vec<u8>>,
}

impl Snapshot<'_> {
    fn xs(&self) -> &[u8] {
        self.xstate
            .get_or_init(|| ptrace_sys::xstate(self.tid, self.layout.size))
    }
}

impl Registers for Snapshot<'_> {
    fn gpr(&self, r: Register) -> Option<u64> {
        let g = &self.regs;
        Some(match r {
            Register::RAX => g.rax,
            Register::RBX => g.rbx,
            Register::RCX => g.rcx,
            Register::RDX => g.rdx,
            Register::RSI => g.rsi,
            Register::RDI => g.rdi,
            Register::RBP => g.rbp,
            Register::RSP => g.rsp,
            Register::R8 => g.r8,
            Register::R9 => g.r9,
            Register::R10 => g.r10,
            Register::R11 => g.r11,
            Register::R12 => g.r12,
            Register::R13 => g.r13,
            Register::R14 => g.r14,
            Register::R15 => g.r15,
            Register::RIP => g.rip,
            _ => return None,
        })
    }

    fn segment_base(&self, seg: Register) -> u64 {
        match seg {
            Register::FS => self.regs.fs_base,
            Register::GS => self.regs.gs_base,
            _ => 0,
        }
    }

    fn vector(&self, reg: Register) -> Option<[u8; 64]> {
        let xs = self.xs();
        let n = reg.number();
        let mut out = [0u8; 64];
        let get = |off: usize, len: usize| xs.get(off..off + len);
        if n < 16 {
            // XMM part in the legacy FXSAVE area at 160, then the YMM and ZMM upper parts.
            out[..16].copy_from_slice(get(160 + 16 * n, 16)?);
            if reg.size() >= 32 {
                out[16..32].copy_from_slice(get(self.layout.ymm_hi? + 16 * n, 16)?);
            }
            if reg.size() >= 64 {
                out[32..64].copy_from_slice(get(self.layout.zmm_hi? + 32 * n, 32)?);
            }
        } else {
            out.copy_from_slice(get(self.layout.hi16_zmm? + 64 * (n - 16), 64)?);
        }
        Some(out)
    }

    fn opmask(&self, reg: Register) -> Option<u64> {
        let off = self.layout.opmask? + 8 * reg.number();
        let b = self.xs().get(off..off + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// The longest the tracer waits without looking at its signals and deadlines.
const WAKE_TICK: Duration = Duration::from_millis(50);
/// How often what is recorded goes to the trace file: a `kill -9` of mgbench loses at most
/// this much recording (the tracer itself writes the trace, unlike QEMU's plugin, whose
/// buffers mgbench can drain after it dies).
const SYNC_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct ThreadState {
    id: u32,
    native: bool,
    window_left: u64,
    window_started: Instant,
    /// Half as long as the thread ran natively before this window: the window steps no
    /// longer (timed mode), so stepping takes at most half the native running time.
    budget: Duration,
    /// When the thread last went native, and when its pause ends (timed mode).
    native_since: Instant,
    due: Option<Instant>,
    /// Where the return address of the ROI's open entry lies (its stack pointer then): inside
    /// an inclusive ROI while set, until the `ret` that loads it (an exclusive ROI steps
    /// while it is set, recording the functions' own instructions).
    roi_return: Option<u64>,
    /// The thread's own CPU mask while it steps on the tracer's CPU (see [`Pin`]).
    restore: Option<CpuMask>,
    /// A call being stepped that the pin concerns, finished at the next stop.
    pinned_call: Option<PinnedCall>,
    /// Times resumed while detaching, to take a queued SIGTRAP (see [`Tracer::detach`]).
    drains: u8,
    /// Its stack was looked for, at its first stop (see [`Tracer::name_thread_stack`]).
    stack_named: bool,
    /// Waiting natively for an inclusive ROI's entry, on hardware breakpoints there (see
    /// [`Tracer::wait_for_roi`]).
    awaits_roi: bool,
    /// Interrupted because another thread found a ROI function in a library opened with
    /// dlopen: its breakpoints are set again at its next stop (see [`Tracer::retarget`]).
    retarget: bool,
    /// It ran before mgbench attached (`--pid`): its stack pointer is not where it started.
    attached: bool,
    /// The instruction just stepped was a call in an inlined copy of a ROI function: the
    /// callee's entry opens an inclusive ROI as a ROI function's entry does.
    inlined_call: bool,
    /// Where the return address of the open entry of a function that holds inlined copies
    /// lies: the thread steps until the `ret` that loads it, rather than waiting on
    /// breakpoints, since an inlined copy may run anywhere in it.
    container_return: Option<u64>,
    /// That function's entry and the address it returns to (see [`Tracer::wait_in_container`]).
    container: (u64, u64),
    /// Calls run natively instead of stepped, innermost last: where each returns to and the
    /// stack pointer there (see [`Tracer::run_over`]).
    over: Vec<(u64, u64)>,
}

/// System calls that would let the program see mgbench's pin (see [`Pin`]), made while it
/// is stepped on the tracer's CPU.
#[derive(Debug, Clone, Copy)]
enum PinnedCall {
    /// `sched_getaffinity` or `sched_setaffinity` about a pinned thread: the program must see
    /// and set its own mask, not the pin (OpenMP, `nproc` and thread pools size themselves by
    /// it). After the call a get has the thread's own mask written into its buffer, and a set
    /// becomes the mask the thread gets back when it runs natively (it stays on the tracer's
    /// CPU while it steps).
    Affinity {
        /// The instruction after the `syscall`: a stop elsewhere (a signal handler) drops it.
        next_ip: u64,
        target: Pid,
        /// The caller's buffer, for a get.
        get_buf: Option<u64>,
    },
    /// `clone`, `fork`, `vfork` or `clone3`: stepped with the thread's own mask, which the
    /// new thread or process inherits (a process is not traced, a `vfork` child may exec
    /// before the call returns), and the thread pinned again after it.
    Clone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Roi {
    None,
    Exclusive,
    Inclusive,
}

struct Tracer {
    leader: Pid,
    /// A launched program is traced from its exec on: before it, the forked child still runs
    /// mgbench's own code (raise, execv), which must not be recorded.
    exec_seen: bool,
    threads: HashMap<Pid, ThreadState>,
    next_id: u32,
    cache: HashMap<u64, Option<Decoded>>,
    /// Where each function holding inlined copies (by its entry) can enter them, `None` where
    /// its code does not tell (see [`Tracer::container_entries`]).
    container_entries: HashMap<u64, Option<Vec<u64>>>,
    layout: XsaveLayout,
    builder: ChunkBuilder,
    writer: TraceWriter<BufWriter<File>>,
    /// The executable ranges of the last mappings snapshot (code outside them takes a new one).
    known_maps: Vec<(u64, u64)>,
    /// Where the program maps the kernel's vDSO (from the last snapshot that has it).
    vdso: Option<u64>,
    window: u64,
    interval: Duration,
    roi: Roi,
    /// The ROI's code at link-time addresses (see [`RoiPlan`]), and at run time (set at
    /// the first step after an exec, when the program's load bias is known).
    roi_link: RoiPlan,
    roi_ranges: Option<RoiPlan>,
    /// The program's entry point (link-time) and load bias.
    roi_entry: u64,
    roi_bias: u64,
    roi_image: Option<(String, u64)>,
    /// Where `--roi` names not found at start are looked for (`roi_link.late`): the dynamic
    /// loader (its path, the link address of its offset 0, and of `_dl_debug_state`, where
    /// a breakpoint stops a thread after each `dlopen`), where that runs (set with the
    /// ranges), the files searched so far, and what was found.
    roi_loader: Option<(String, u64, u64)>,
    roi_hook: Option<u64>,
    roi_searched: Vec<String>,
    roi_found: Vec<String>,
    incomplete: u64,
    errors: Vec<String>,
    progress: crate::progress::Progress,
    /// The tracer's CPU, where stepping threads run (`None`: they run anywhere).
    pin: Option<Pin>,
    /// When the trace file last got everything recorded (see [`SYNC_EVERY`]).
    synced: Instant,
    /// Writing the trace failed: nothing more is recorded, the threads are detached.
    failed: bool,
    /// Child processes the program started (fork, vfork): each is let go at its first stop,
    /// untraced, and the report says so.
    children: u64,
}

fn options(attached: bool) -> Options {
    // Forks are followed only to be let go (and counted): a child process is not traced.
    let mut o = Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACEEXIT;
    if !attached {
        // A program mgbench started dies with it; an attached one must not.
        o |= Options::PTRACE_O_EXITKILL;
    }
    o
}

/// Whether `tid` is a thread of process `leader` (else a process of its own, a child).
fn is_thread_of(leader: Pid, tid: Pid) -> bool {
    tid == leader || std::path::Path::new(&format!("/proc/{leader}/task/{tid}")).exists()
}

fn read_maps(pid: Pid) -> Vec<Mapping> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|text| Mapping::parse_proc_maps(&text))
        .unwrap_or_default()
}

fn is_ret(d: &Decoded) -> bool {
    matches!(
        d.instruction.mnemonic(),
        iced_x86::Mnemonic::Ret | iced_x86::Mnemonic::Retf
    )
}

fn is_call(d: &Decoded) -> bool {
    d.instruction.mnemonic() == iced_x86::Mnemonic::Call
}

impl Tracer {
    fn add_thread(&mut self, tid: Pid) {
        let id = self.next_id;
        self.next_id += 1;
        self.builder.start_sample(id, None, 0);
        self.threads.insert(
            tid,
            ThreadState {
                id,
                native: false,
                window_left: self.window,
                window_started: Instant::now(),
                budget: self.interval / 2,
                native_since: Instant::now(),
                due: None,
                roi_return: None,
                restore: None,
                pinned_call: None,
                drains: 0,
                stack_named: false,
                awaits_roi: false,
                retarget: false,
                attached: false,
                inlined_call: false,
                container_return: None,
                container: (0, 0),
                over: Vec::new(),
            },
        );
        self.pin(tid);
    }

    /// Prepares stepping the instruction at `regs.rip` if it is a call that the pin concerns
    /// (see [`PinnedCall`]).
    fn before_pinned_call(&mut self, tid: Pid, regs: &libc::user_regs_struct, d: &Decoded) {
        if self.pin.is_none() || d.instruction.mnemonic() != iced_x86::Mnemonic::Syscall {
            return;
        }
        let call = match regs.rax as libc::c_long {
            libc::SYS_clone | libc::SYS_fork | libc::SYS_vfork | libc::SYS_clone3 => {
                let Some(own) = self.threads.get(&tid).and_then(|t| t.restore) else {
                    return;
                };
                own.apply(tid.as_raw());
                PinnedCall::Clone
            }
            libc::SYS_sched_getaffinity | libc::SYS_sched_setaffinity => {
                let target = match regs.rdi as i32 {
                    0 => tid,
                    t => Pid::from_raw(t),
                };
                if self.threads.get(&target).and_then(|t| t.restore).is_none() {
                    return;
                }
                PinnedCall::Affinity {
                    next_ip: d.instruction.next_ip(),
                    target,
                    get_buf: (regs.rax as libc::c_long == libc::SYS_sched_getaffinity)
                        .then_some(regs.rdx),
                }
            }
            _ => return,
        };
        if let Some(t) = self.threads.get_mut(&tid) {
            t.pinned_call = Some(call);
        }
    }

    /// Finishes a call stepped over (the thread stopped after it, at `regs.rip`).
    fn after_pinned_call(&mut self, tid: Pid, call: PinnedCall, regs: &libc::user_regs_struct) {
        let Some(p) = &self.pin else {
            return;
        };
        let PinnedCall::Affinity {
            next_ip,
            target,
            get_buf,
        } = call
        else {
            // A clone: the thread steps on the tracer's CPU again.
            if self.threads.get(&tid).is_some_and(|t| t.restore.is_some()) {
                p.only.apply(tid.as_raw());
            }
            return;
        };
        let ret = regs.rax as i64;
        if regs.rip != next_ip || ret < 0 {
            return;
        }
        let Some(t) = self.threads.get_mut(&target) else {
            return;
        };
        match (get_buf, t.restore) {
            (Some(buf), Some(own)) => {
                // The kernel returned how many bytes it wrote.
                let n = (ret as usize).min(own.bytes().len());
                ptrace_sys::write_memory(tid, buf, &own.bytes()[..n]);
            }
            (None, Some(_)) => {
                // The mask the kernel just applied is the thread's own from now on.
                if let Some(new) = CpuMask::of(target.as_raw()) {
                    t.restore = Some(new);
                    p.only.apply(target.as_raw());
                }
            }
            (_, None) => {}
        }
    }

    /// Moves a thread that is about to be stepped to the tracer's CPU, remembering its mask.
    /// A thread already there keeps no mask to restore (the program put it there: threads
    /// and processes are created with their creator's own mask, [`PinnedCall::Clone`]).
    fn pin(&mut self, tid: Pid) {
        let (Some(p), Some(t)) = (&self.pin, self.threads.get_mut(&tid)) else {
            return;
        };
        if t.restore.is_some() {
            return;
        }
        if let Some(own) = CpuMask::of(tid.as_raw()) {
            if own != p.only && p.only.apply(tid.as_raw()) {
                t.restore = Some(own);
            }
        }
    }

    /// Gives a thread its own mask back before it runs natively, unless the program changed
    /// it while it stepped.
    fn unpin(&mut self, tid: Pid) {
        let (Some(p), Some(t)) = (&self.pin, self.threads.get_mut(&tid)) else {
            return;
        };
        if let Some(own) = t.restore.take() {
            if CpuMask::of(tid.as_raw()) == Some(p.only) {
                own.apply(tid.as_raw());
            }
        }
    }

    /// Writes the mapping of a thread's stack, named `[thread stack]` (the kernel names only
    /// the main thread's), from its stack pointer at its first stop, so that analyses class
    /// it as a stack. The main thread's has its kernel name: it is left alone.
    fn name_thread_stack(&mut self, tid: Pid) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        t.stack_named = true;
        let first = !t.attached;
        let Ok(regs) = ptrace::getregs(tid) else {
            return;
        };
        let Some(stack) = Mapping::thread_stack(&read_maps(self.leader), regs.rsp, first) else {
            return;
        };
        if let Err(e) = self.writer.write_mappings(&[stack]) {
            self.errors.push(format!("cannot write mappings: {e}"));
        }
    }

    fn note_mappings(&mut self, pid: Pid, ip: u64) {
        if self.known_maps.iter().any(|&(s, e)| ip >= s && ip < e) {
            return;
        }
        let maps = read_maps(pid);
        // Executable ones only: code that runs where the last snapshot had data (memory
        // unmapped since, then mapped again for code a JIT compiler wrote) takes a new one.
        self.known_maps = maps
            .iter()
            .filter(|m| m.perms.contains('x'))
            .map(|m| (m.start, m.end))
            .collect();
        if !self.known_maps.iter().any(|&(s, e)| ip >= s && ip < e) {
            self.known_maps.push((ip & !0xfff, (ip & !0xfff) + 0x1000));
        }
        if let Some(vdso) = maps.iter().find(|m| m.path == "[vdso]") {
            self.vdso = Some(vdso.start);
        }
        if let Err(e) = self.writer.write_mappings(&maps) {
            self.errors.push(format!("cannot write mappings: {e}"));
        }
        self.roi_maps_changed();
        self.roi_search_late(&maps, pid);
    }

    /// New mappings: a library the ROI is in may be mapped now.
    fn roi_maps_changed(&mut self) {
        if self.roi_ranges.as_ref().is_some_and(|r| r.pending) {
            self.roi_ranges = None;
        }
    }

    /// New mappings: a library the program opened with dlopen may hold a name not found
    /// yet. Threads other than `stopped` that wait natively for the ROI do so on breakpoints
    /// set before the library existed: they are interrupted to wait on the new ones too.
    fn roi_search_late(&mut self, maps: &[Mapping], stopped: Pid) {
        if self.roi_link.late.is_empty() {
            return;
        }
        let found = crate::symbols::find_in_new_libraries(
            maps,
            &mut self.roi_searched,
            &[],
            &mut self.roi_link.late,
        );
        if found.is_empty() {
            return;
        }
        for f in found {
            self.roi_found.push(f.note());
            self.roi_link
                .add_in_library(f.path, f.load_base, &f.name, &f.code);
        }
        self.roi_link.tidy();
        self.roi_ranges = None;
        for (tid, t) in &mut self.threads {
            if *tid != stopped && t.awaits_roi && !t.retarget {
                t.retarget = true;
                let _ = ptrace::interrupt(*tid);
            }
        }
    }

    /// The stop of a thread interrupted by [`Tracer::roi_search_late`]. A thread waiting for
    /// the ROI is handled as at a breakpoint (stepped once with the breakpoints off, then
    /// waits on the current ones). The interrupt may instead have caught a thread just
    /// stepping: the instruction at its stop was recorded when that step was asked, so it is
    /// stepped again and nothing is recorded (the step either has not run or its trap is
    /// still queued: resumed, the thread reports that trap before running anything). A trap
    /// already queued behind this stop (a breakpoint the thread reached as the interrupt
    /// came) is likewise left to its own stop, which would otherwise record the entry twice.
    fn retarget(&mut self, tid: Pid) -> Result<(), CaptureError> {
        let Some(t) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        t.retarget = false;
        let (native, awaits, due) = (t.native, t.awaits_roi, t.due);
        if ptrace_sys::sigtrap_queued(tid) {
            let _ = if native {
                ptrace::cont(tid, None)
            } else {
                ptrace::step(tid, None)
            };
            return Ok(());
        }
        match (awaits, native, due) {
            (true, _, _) => self.step(tid),
            // A window's pause: the interrupt that ends it came first if it is due no more.
            (false, true, None) => self.begin_window(tid),
            (false, true, Some(_)) => {
                let _ = ptrace::cont(tid, None);
                Ok(())
            }
            (false, false, _) => {
                let _ = ptrace::step(tid, None);
                Ok(())
            }
        }
    }

    fn roi_ranges(&mut self) -> &RoiPlan {
        if self.roi_ranges.is_none() {
            // Link-time ranges plus the load bias of the program's first mapping, and the
            // libraries mapped so far.
            let maps = read_maps(self.leader);
            self.roi_bias = match &self.roi_image {
                Some((path, base)) => Mapping::file_starts(&maps, path)
                    .next()
                    .map_or(0, |start| start.wrapping_sub(*base)),
                None => 0,
            };
            self.roi_hook = self.roi_loader.as_ref().and_then(|(path, base, hook)| {
                let start = Mapping::file_starts(&maps, path).next()?;
                Some(hook.wrapping_add(start.wrapping_sub(*base)))
            });
            self.roi_ranges = Some(self.roi_link.placed(self.roi_bias, &maps));
            self.container_entries.clear();
        }
        self.roi_ranges.get_or_insert_with(RoiPlan::default)
    }

    /// The thread is stopped before the instruction at rip: record its accesses and step.
    fn step(&mut self, tid: Pid) -> Result<(), CaptureError> {
        if !self.exec_seen {
            let _ = ptrace::cont(tid, None);
            return Ok(());
        }
        let regs = match ptrace::getregs(tid) {
            Ok(r) => r,
            Err(_) => return Ok(()), // the thread is gone
        };
        if let Some(call) = self
            .threads
            .get_mut(&tid)
            .and_then(|t| t.pinned_call.take())
        {
            self.after_pinned_call(tid, call, &regs);
        }
        let ip = regs.rip;
        self.note_mappings(tid, ip);
        let decoded = match self.cache.get(&ip) {
            Some(d) => d.clone(),
            None => {
                let mut bytes = [0u8; 16];
                let n = ptrace_sys::read_memory(tid, ip, &mut bytes);
                let d = x86::decode(&bytes[..n], ip);
                self.cache.insert(ip, d.clone());
                d
            }
        };
        if let Some(t) = self.threads.get_mut(&tid).filter(|t| t.awaits_roi) {
            // Stopped at an entry's breakpoint (or by a signal, an interrupt): stepping
            // again, the breakpoints off (a step onto one would stop twice there), on the
            // tracer's CPU (stepping across CPUs took 3x as long). At the loader's hook (or
            // the program's entry) libraries may have been mapped: the ranges are placed again.
            t.awaits_roi = false;
            t.native = false;
            ptrace_sys::set_exec_breakpoints(tid, &[]);
            self.pin(tid);
            self.roi_maps_changed();
            if self.roi_hook == Some(ip) {
                // The loader's hook: a dlopen has mapped a library.
                self.roi_search_late(&read_maps(self.leader), tid);
            }
        }
        let inside = |ranges: &[(u64, u64)]| ranges.iter().any(|&(s, e)| ip >= s && ip < e);
        let entry = |ranges: &[(u64, u64)]| ranges.iter().any(|&(s, _)| s == ip);
        let inclusive = self.roi == Roi::Inclusive;
        let (own_code, in_inlined, at_entry, at_container) = if self.roi == Roi::None {
            (true, false, false, false)
        } else {
            let r = self.roi_ranges();
            (
                r.own_code().any(|&(s, e)| ip >= s && ip < e),
                inside(&r.inlined),
                entry(&r.functions),
                entry(&r.containers),
            )
        };
        // At a container's entry, the stack pointer points at its return address.
        let container_ret = if at_container {
            let mut word = [0u8; 8];
            (ptrace_sys::read_memory(tid, regs.rsp, &mut word) == 8)
                .then(|| u64::from_le_bytes(word))
        } else {
            None
        };
        let Some(t) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        if t.over.last() == Some(&(ip, regs.rsp)) {
            // Back from a call run natively.
            t.over.pop();
        }
        // The entry of a function called from an inlined copy opens the ROI too.
        let starts = at_entry || std::mem::take(&mut t.inlined_call);
        // The ROI opens at a function's entry, where the stack pointer points at the return
        // address, and closes at the `ret` that loads it, wherever that runs (a function that
        // ends in a tail call returns from the function it jumped to). That `ret` is not
        // recorded; entries while open (recursion) change nothing.
        let returns =
            |slot: Option<u64>| slot == Some(regs.rsp) && decoded.as_ref().is_some_and(is_ret);
        if starts && t.roi_return.is_none() {
            t.roi_return = Some(regs.rsp);
        } else if returns(t.roi_return) {
            t.roi_return = None;
        }
        if at_container && t.container_return.is_none() {
            t.container_return = Some(regs.rsp);
            t.container = (ip, container_ret.unwrap_or(0));
        } else if returns(t.container_return)
            || t.container_return
                .is_some_and(|slot| regs.rsp > slot && ip == t.container.1)
        {
            // Its `ret`, stepped, or the address it returns to, reached natively.
            t.container_return = None;
        }
        if inclusive && in_inlined && decoded.as_ref().is_some_and(is_call) {
            t.inlined_call = true;
        }
        let recording = match self.roi {
            Roi::None => true,
            Roi::Exclusive => own_code,
            Roi::Inclusive => t.roi_return.is_some() || in_inlined,
        };
        // The ROI's code runs only while one of its functions or a function holding an
        // inlined copy is open: outside them a thread runs natively until an entry, and so
        // does the rest of a call run natively, until it returns.
        let open = t.roi_return.is_some() || t.container_return.is_some();
        if !open {
            t.over.clear();
        }
        let returning = !t.over.is_empty();
        let in_container = t.roi_return.is_none() && t.container_return.is_some();
        if self.roi != Roi::None && !recording && (!open || returning) && self.wait_for_roi(tid) {
            return Ok(());
        }
        if self.roi != Roi::None
            && !recording
            && in_container
            && !returning
            && self.wait_in_container(tid, ip)
        {
            return Ok(());
        }
        let Some(t) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        if let (true, Some(d)) = (recording, decoded.as_ref()) {
            let snap = Snapshot {
                regs,
                tid,
                layout: &self.layout,
                xstate: std::cell::OnceCell::new(),
            };
            let mut acc = Vec::with_capacity(4);
            if !x86::accesses(d, &snap, &mut acc) {
                self.incomplete += 1;
            }
            let id = t.id;
            t.window_left = t.window_left.saturating_sub(acc.len() as u64);
            for a in acc {
                self.builder
                    .push(id, a, &mut self.writer)
                    .map_err(|e| CaptureError::Invalid(e.to_string()))?;
            }
            self.progress.set(self.builder.summary.accesses);
            self.progress.set_items(self.writer.bytes_written());
        }
        let t = self.threads.get_mut(&tid).expect("thread present");
        // A window steps no longer than half the time the thread ran natively before it.
        // Single steps cost tens of microseconds here, and a window in code with few accesses
        // takes thousands (triad's initialisation loop: 14k steps for 1024 accesses, 1.2 s of
        // a 0.15 s program). The pauses grow with the windows' durations (3x), so after a few
        // windows they are long enough for whole windows.
        let timed = self.window != u64::MAX && self.roi == Roi::None;
        let overdue = timed && t.window_started.elapsed() >= t.budget;
        if t.window_left == 0 || (overdue && t.window_left < self.window) {
            // Window complete: run natively until the next one. The pause is at least three
            // times as long as the window took and the next window steps at most half of it,
            // so stepping costs at most a third of the run (1.5x plus the interrupt round
            // trip).
            let took = t.window_started.elapsed();
            self.go_native(tid, took);
        } else {
            if let Some(d) = &decoded {
                if self.roi != Roi::None && is_call(d) && self.run_over(tid, &regs, d, recording) {
                    return Ok(());
                }
                self.before_pinned_call(tid, &regs, d);
            }
            let _ = ptrace::step(tid, None);
        }
        Ok(())
    }

    /// At a call while the ROI is open: runs the call natively, on breakpoints at its
    /// return and the ROI's entries, where stepping would record none of the callee (an
    /// exclusive ROI records the functions' own code alone, an inclusive one records nothing
    /// while only a function holding inlined copies is open, outside them); an entry reached
    /// inside stops the thread as anywhere else. Stepping a ROI's calls into the C library,
    /// an MPI or OpenMP runtime took minutes for what runs in milliseconds. False where the
    /// call is stepped (it is recorded, or the breakpoints cannot be set).
    fn run_over(
        &mut self,
        tid: Pid,
        regs: &libc::user_regs_struct,
        d: &Decoded,
        recording: bool,
    ) -> bool {
        let next = d.instruction.next_ip();
        let to_next = d.instruction.is_call_near() && d.instruction.near_branch_target() == next;
        if (self.roi == Roi::Inclusive && recording) || to_next {
            return false;
        }
        let Some(t) = self.threads.get_mut(&tid) else {
            return false;
        };
        // After the `ret`, the stack pointer is where it is at the call.
        t.over.push((next, regs.rsp));
        if self.wait_for_roi(tid) {
            return true;
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            t.over.pop();
        }
        false
    }

    /// Outside the ROI's functions, a thread runs natively until it reaches an entry:
    /// hardware breakpoints there stop it, and stepping resumes (stepping everything outside
    /// took a minute for a program that runs 2 ms). With inlined copies, the functions that
    /// hold them are entries too (no copy runs outside them). False where they cannot be set
    /// (more than 4 entries, a copy outside any function, or the kernel refused): the thread
    /// steps on. So do threads attached (`--pid`) inside a function whose own code an
    /// exclusive ROI records or that holds inlined copies: its entry would not be seen.
    fn wait_for_roi(&mut self, tid: Pid) -> bool {
        self.wait_natively(tid, None)
    }

    /// In a function that holds inlined copies, outside them, with no ROI function open: the
    /// thread runs natively until it enters a copy (the breakpoints of [`wait_for_roi`] and
    /// the places where the function's code enters its copies, see
    /// [`Tracer::container_entries`]) or returns (a breakpoint where it returns to). Stepping
    /// the rest of the function took 4 minutes where the function initialises its data
    /// before the copy runs. False where that cannot be: the thread is not in the function's
    /// own code (a callee's `ret` may return into a copy), its code does not tell where it
    /// enters the copies, or more than 4 breakpoints.
    fn wait_in_container(&mut self, tid: Pid, ip: u64) -> bool {
        let Some((start, ret)) = self.threads.get(&tid).map(|t| t.container) else {
            return false;
        };
        let r = self.roi_ranges();
        let own = r
            .containers
            .iter()
            .any(|&(s, e)| s == start && ip >= s && ip < e)
            && !r.inlined.iter().any(|&(s, e)| ip >= s && ip < e);
        if ret == 0 || !own {
            return false;
        }
        let Some(mut points) = self.container_entries(tid, start) else {
            return false;
        };
        points.push(ret);
        self.wait_natively(tid, Some((start, points)))
    }

    /// Where the code of the function holding inlined copies that starts at `start` can
    /// enter them: their starts and the targets of its direct jumps into them from outside,
    /// found by decoding the function's code from its start (compilers put jump tables in
    /// data, not code). `None` where an indirect jump outside the copies could go anywhere.
    fn container_entries(&mut self, tid: Pid, start: u64) -> Option<Vec<u64>> {
        if let Some(known) = self.container_entries.get(&start) {
            return known.clone();
        }
        let r = self.roi_ranges();
        let found = r
            .containers
            .iter()
            .find(|c| c.0 == start)
            .map(|&(s, e)| {
                let copies: Vec<(u64, u64)> = r
                    .inlined
                    .iter()
                    .filter(|&&(a, b)| a < e && b > s)
                    .copied()
                    .collect();
                (s, e, copies)
            })
            .and_then(|(s, e, copies)| {
                // (A function of more than 1 MiB is stepped as before.)
                let mut code = vec![0u8; usize::try_from(e - s).ok().filter(|&n| n <= 1 << 20)?];
                let n = ptrace_sys::read_memory(tid, s, &mut code);
                code.truncate(n);
                x86::entries_into(&code, s, &copies)
            });
        self.container_entries.insert(start, found.clone());
        found
    }

    /// [`wait_for_roi`], and with `container` (the entry of the function holding inlined
    /// copies the thread is in, and where else to stop) those places, that function's entry
    /// left out.
    fn wait_natively(&mut self, tid: Pid, container: Option<(u64, Vec<u64>)>) -> bool {
        let exclusive = self.roi == Roi::Exclusive;
        let r = self.roi_ranges();
        if r.uncontained {
            return false;
        }
        let skip = container.as_ref().map(|c| c.0);
        let (has_containers, mut entries): (bool, Vec<u64>) = (
            !r.containers.is_empty(),
            r.functions
                .iter()
                .chain(&r.containers)
                .map(|&(s, _)| s)
                .filter(|&s| Some(s) != skip)
                .collect(),
        );
        if r.pending {
            // A library not mapped yet: the loader's hook, called once it has mapped the
            // libraries and before their constructors run, stops the thread to look again
            // (else the program's entry, after the constructors).
            entries.push(
                self.roi_hook
                    .unwrap_or(self.roi_entry.wrapping_add(self.roi_bias)),
            );
        }
        if let (false, Some(hook)) = (self.roi_link.late.is_empty(), self.roi_hook) {
            // Names not found yet: the loader's hook stops the thread after each dlopen.
            entries.push(hook);
        }
        // A call run natively: its return.
        let returning = self.threads.get(&tid).and_then(|t| t.over.last().copied());
        entries.extend(returning.map(|(ip, _)| ip));
        let in_container = container.is_some();
        entries.extend(container.into_iter().flat_map(|c| c.1));
        entries.sort_unstable();
        entries.dedup();
        if entries.is_empty() || entries.len() > 4 {
            return false;
        }
        if returning.is_none()
            && !in_container
            && (has_containers || exclusive)
            && self.threads.get(&tid).is_some_and(|t| t.attached)
        {
            return false;
        }
        if !ptrace_sys::set_exec_breakpoints(tid, &entries) {
            return false;
        }
        self.unpin(tid);
        if let Some(t) = self.threads.get_mut(&tid) {
            t.awaits_roi = true;
            t.native = true;
            t.due = None;
        }
        let _ = ptrace::cont(tid, None);
        true
    }

    /// Resumes a thread stopped by an event inside a system call (clone, exec). Nothing is
    /// recorded here: a thread that steps stops again when the call returns, before the
    /// instruction at the same address, and is recorded there (recording at both stops
    /// recorded that instruction twice, e.g. a program's first instruction after exec); a
    /// native thread runs on without a window.
    fn resume_in_syscall(&mut self, tid: Pid) {
        if !self.exec_seen || self.threads.get(&tid).is_some_and(|t| t.native) {
            let _ = ptrace::cont(tid, None);
        } else {
            let _ = ptrace::step(tid, None);
        }
    }

    /// Lets a thread run natively until the next window (after max(interval, 3 x took)).
    fn go_native(&mut self, tid: Pid, took: Duration) {
        self.unpin(tid);
        let pause = self.interval.max(3 * took);
        if let Some(t) = self.threads.get_mut(&tid) {
            t.native = true;
            t.native_since = Instant::now();
            t.due = Some(t.native_since + pause);
        }
        let _ = ptrace::cont(tid, None);
    }

    /// The earliest end of a native thread's pause.
    fn deadline(&self) -> Option<Instant> {
        self.threads.values().filter_map(|t| t.due).min()
    }

    /// Starts a new window on a thread that stopped after running natively.
    fn begin_window(&mut self, tid: Pid) -> Result<(), CaptureError> {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.native = false;
            t.due = None;
            t.window_left = self.window;
            t.window_started = Instant::now();
            t.budget = t.native_since.elapsed() / 2;
            let id = t.id;
            self.builder.start_sample(id, None, 0);
        }
        self.pin(tid);
        self.step(tid)
    }

    /// Writes everything recorded to the trace file.
    fn sync(&mut self) -> Result<(), CaptureError> {
        self.synced = Instant::now();
        self.builder
            .write_open(&mut self.writer)
            .map_err(|e| CaptureError::Invalid(e.to_string()))?;
        self.writer
            .flush()
            .map_err(|e| CaptureError::Invalid(format!("cannot write trace: {e}")))
    }

    /// Recording failed (`e`, usually the trace file's disk): keeps what was written,
    /// detaches `stopped` (the thread whose stop is being handled) at once and every other
    /// thread at its next stop, so that the program runs on untraced to its own end.
    fn stop_recording(&mut self, e: CaptureError, stopped: Option<Pid>) {
        self.errors.push(format!(
            "{e}; recording stopped, the program ran on untraced"
        ));
        self.failed = true;
        for tid in self.threads.keys() {
            if Some(*tid) != stopped {
                let _ = ptrace::interrupt(*tid);
            }
        }
        if let Some(tid) = stopped {
            self.detach(tid, None);
        }
    }

    /// Detaches a stopped thread (passing it `pass`), with its own CPU mask. A stepped thread
    /// can have its step's SIGTRAP still queued behind the stop: an interrupt's stop is
    /// reported before the thread reads its signal queue, and a system call interrupted while
    /// stepped queues one as it returns. Detached with it, the untraced program would die of
    /// it (a blocked `pthread_join` did, in every Ctrl-C detach from a threaded program).
    /// Such a thread is resumed, not stepped, to stop at that SIGTRAP (after any signal
    /// queued before it, passed on), and detached there without it.
    fn detach(&mut self, tid: Pid, pass: Option<Signal>) {
        self.unpin(tid);
        if self.threads.get(&tid).is_some_and(|t| t.awaits_roi) {
            // A breakpoint left armed would kill the program with SIGTRAP.
            ptrace_sys::set_exec_breakpoints(tid, &[]);
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            if t.drains < 4 && ptrace_sys::sigtrap_queued(tid) {
                t.drains += 1;
                let _ = ptrace::cont(tid, pass);
                return;
            }
        }
        let _ = ptrace::detach(tid, pass);
        self.threads.remove(&tid);
    }

    /// Interrupts the native threads whose pause is over; each begins a window when it stops.
    fn interrupt_due(&mut self) {
        let now = Instant::now();
        for (tid, t) in &mut self.threads {
            if t.native && t.due.is_some_and(|d| d <= now) {
                t.due = None;
                let _ = ptrace::interrupt(*tid);
            }
        }
    }
}

/// Runs (or attaches to) the program under ptrace and writes the trace.
pub fn capture(cfg: &CaptureConfig) -> Result<CaptureReport, CaptureError> {
    // The process to attach to, or the program to start (the path as a shell would run it,
    // and its argv[0]).
    enum Target {
        Attach(i32),
        Start(PathBuf, std::ffi::OsString),
    }
    let (image, command, program_path, target) = match cfg.pid {
        Some(pid) => {
            let exe = PathBuf::from(format!("/proc/{pid}/exe"));
            let path = std::fs::read_link(&exe).map_err(|e| CaptureError::ProgramNotFound {
                program: PathBuf::from(format!("pid {pid}")),
                hint: format!("no such process or not accessible ({e})"),
            })?;
            let image = ElfImage::open(&path).map_err(CaptureError::Elf)?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let command: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            (image, command, path, Target::Attach(pid))
        }
        None => {
            let p = resolve(&cfg.program)?;
            let command = command_line(&p.path, &cfg.args);
            (p.image, command, p.path, Target::Start(p.run, p.argv0))
        }
    };
    let (window, interval) = match cfg.mode {
        Mode::Full => (u64::MAX, Duration::ZERO),
        Mode::Timed {
            window,
            interval_ms,
        } => (window, Duration::from_millis(interval_ms)),
        Mode::Sampled { .. } => {
            return Err(CaptureError::Invalid(
                "the ptrace backend cannot count accesses while the program runs natively, so it samples by time: use --sample-interval MS (and --sample-window W) instead of --sample-period".into(),
            ))
        }
    };
    let roi_link = RoiPlan::find(&image, &cfg.roi)?;
    // The dynamic loader calls `_dl_debug_state` (the hook debuggers break on) once it has
    // mapped libraries: those it loads at start, before it runs their constructors, and each
    // one the program opens with dlopen. A ROI in a library waits there for its code.
    let hook = || {
        let path = image.interp.as_ref()?;
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        let loader = ElfImage::open(&path).ok()?;
        let f = loader
            .find_function("_dl_debug_state")
            .ok()?
            .into_iter()
            .next()?;
        Some((path.display().to_string(), loader.load_base, f.start))
    };
    let roi_loader = if roi_link.late.is_empty() && roi_link.libs.is_empty() {
        None
    } else {
        hook()
    };
    if let (Some(name), None) = (roi_link.late.first(), &roi_loader) {
        return Err(CaptureError::Invalid(format!(
            "--roi {name}: not in the program or the libraries it loads at start, and this program's dynamic loader has no _dl_debug_state to stop at when it opens a library: capture with --backend qemu"
        )));
    }
    let mut notes = roi_link.notes.clone();
    // The files searched at start: the libraries, the loader and the program.
    let roi_searched: Vec<String> = roi_link
        .searched
        .iter()
        .cloned()
        .chain(roi_loader.iter().map(|l| l.0.clone()))
        .chain(std::iter::once(
            std::fs::canonicalize(&program_path)
                .unwrap_or_else(|_| program_path.clone())
                .display()
                .to_string(),
        ))
        .collect();
    let output = &cfg.output;
    let out_err = |cause| CaptureError::Output {
        path: output.clone(),
        cause,
    };
    let meta = TraceMeta {
        command,
        backend: "ptrace".into(),
        mode: cfg.mode,
        start_time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        roi: (!cfg.roi.is_empty()).then(|| RoiMeta {
            functions: cfg.roi.clone(),
            inclusive: cfg.roi_inclusive,
        }),
        notes: cfg
            .pid
            .map(|pid| format!("attached to pid {pid}"))
            .into_iter()
            .chain(cfg.notes.iter().cloned())
            .chain(notes.iter().cloned())
            .collect(),
    };
    let file = File::create(output).map_err(out_err)?;
    let mut writer =
        TraceWriter::create(BufWriter::with_capacity(1 << 20, file), &meta).map_err(out_err)?;
    // A trace from the start: readable even if mgbench is killed before the first sync.
    writer.flush().map_err(out_err)?;

    let guard = SignalGuard::install();
    let start = Instant::now();
    let started = std::time::SystemTime::now();
    let attached = cfg.pid.is_some();
    let leader = match target {
        Target::Attach(pid) => {
            let pid = Pid::from_raw(pid);
            let tids: Vec<Pid> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map_err(|e| {
                    CaptureError::Invalid(format!("cannot list threads of pid {pid}: {e}"))
                })?
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok().map(Pid::from_raw))
                .collect();
            for tid in &tids {
                ptrace::seize(*tid, options(true)).map_err(|e| attach_error(pid, e))?;
                let _ = ptrace::interrupt(*tid);
            }
            pid
        }
        Target::Start(path, argv0) => {
            let pid = ptrace_sys::spawn_stopped(&path, &argv0, &cfg.args).map_err(|cause| {
                CaptureError::Spawn {
                    what: program_path.display().to_string(),
                    cause,
                }
            })?;
            ptrace::seize(pid, options(false)).map_err(|e| attach_error(pid, e))?;
            ptrace_sys::resume(pid);
            pid
        }
    };
    let mut tr = Tracer {
        leader,
        exec_seen: attached,
        threads: HashMap::new(),
        next_id: 0,
        cache: HashMap::new(),
        container_entries: HashMap::new(),
        layout: XsaveLayout::detect(),
        builder: ChunkBuilder::new(),
        progress: cfg.progress.clone(),
        writer,
        known_maps: Vec::new(),
        vdso: None,
        window,
        interval,
        roi: match (cfg.roi.is_empty(), cfg.roi_inclusive) {
            (true, _) => Roi::None,
            (false, true) => Roi::Inclusive,
            (false, false) => Roi::Exclusive,
        },
        roi_link,
        roi_ranges: None,
        roi_entry: image.entry,
        roi_bias: 0,
        roi_image: image
            .is_pie
            .then(|| (program_path.display().to_string(), image.load_base)),
        roi_searched,
        roi_loader,
        roi_hook: None,
        roi_found: Vec::new(),
        incomplete: 0,
        errors: Vec::new(),
        // After the spawn: the program starts with mgbench's own mask.
        pin: Pin::tracer(),
        synced: Instant::now(),
        failed: false,
        children: 0,
    };
    if attached {
        let tids: Vec<Pid> = std::fs::read_dir(format!("/proc/{leader}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok().map(Pid::from_raw))
                    .collect()
            })
            .unwrap_or_default();
        for tid in tids {
            tr.add_thread(tid);
            if let Some(t) = tr.threads.get_mut(&tid) {
                t.attached = true;
            }
        }
    } else {
        tr.add_thread(leader);
    }

    let mut timer = WakeTimer::new()
        .map_err(|e| CaptureError::Invalid(format!("ptrace backend: timer_create: {e}")))?;
    let mut detaching = false;
    let mut exit = ProgramExit::Detached;
    loop {
        let caught = guard.caught();
        // (An attached process is let go on Ctrl-C or SIGTERM, or once --duration is over.)
        let over = cfg.attach_for.is_some_and(|d| start.elapsed() >= d);
        if attached && (caught.is_some() || over) {
            if !detaching && !tr.failed {
                detaching = true;
                for tid in tr.threads.keys() {
                    let _ = ptrace::interrupt(*tid);
                }
            }
        } else if let Some(sig) = caught.filter(|_| !attached) {
            forward_signal(leader, sig);
        }
        if tr.threads.is_empty() {
            break;
        }
        if !tr.failed && tr.synced.elapsed() >= SYNC_EVERY {
            if let Err(e) = tr.sync() {
                tr.stop_recording(e, None);
            }
        }
        // Wait (blocking) for the next stop; the timer wakes the wait when a native thread's
        // pause ends, and at least every WAKE_TICK so that a signal to mgbench is seen.
        let now = Instant::now();
        let due = tr.deadline();
        if due.is_some_and(|d| d <= now) {
            tr.interrupt_due();
            continue;
        }
        let wake = due.map_or(now + WAKE_TICK, |d| d.min(now + WAKE_TICK));
        if timer.armed().is_none_or(|a| a <= now || a > wake) {
            timer.wake_at(wake);
        }
        let status = match waitpid(None::<Pid>, Some(WaitPidFlag::__WALL)) {
            Ok(s) => s,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::ECHILD) if attached => {
                // Attached threads are not our children for wait purposes on some kernels:
                // nothing more to wait for.
                break;
            }
            Err(e) => return Err(CaptureError::Invalid(format!("waitpid: {e}"))),
        };
        match status {
            WaitStatus::Stopped(tid, sig) if detaching || tr.failed => {
                let pass = (sig != Signal::SIGTRAP && sig != Signal::SIGSTOP).then_some(sig);
                tr.detach(tid, pass);
            }
            WaitStatus::PtraceEvent(tid, _, _) if detaching || tr.failed => tr.detach(tid, None),
            WaitStatus::Stopped(tid, Signal::SIGTRAP) => {
                if let Err(e) = tr.step(tid) {
                    tr.stop_recording(e, Some(tid));
                }
            }
            WaitStatus::Stopped(tid, sig) => {
                // A signal for the program: deliver it and keep stepping.
                let native = !tr.exec_seen || tr.threads.get(&tid).is_some_and(|t| t.native);
                let _ = if native {
                    ptrace::cont(tid, sig)
                } else {
                    ptrace::step(tid, sig)
                };
            }
            WaitStatus::PtraceEvent(tid, _, ev) => {
                if ev == Event::PTRACE_EVENT_FORK as i32 || ev == Event::PTRACE_EVENT_VFORK as i32 {
                    // The child is let go at its first stop (see PTRACE_EVENT_STOP).
                    tr.resume_in_syscall(tid);
                } else if ev == Event::PTRACE_EVENT_CLONE as i32 {
                    if let Ok(new) = ptrace::getevent(tid) {
                        let new = Pid::from_raw(new as i32);
                        if !tr.threads.contains_key(&new) {
                            tr.add_thread(new);
                        }
                    }
                    tr.resume_in_syscall(tid);
                } else if ev == Event::PTRACE_EVENT_EXEC as i32 {
                    tr.exec_seen = true;
                    tr.cache.clear();
                    tr.known_maps.clear();
                    tr.roi_ranges = None;
                    if tr.window != u64::MAX && tr.roi == Roi::None {
                        // Timed mode: let the dynamic loader and start-up run natively; the
                        // first window opens after one interval.
                        tr.go_native(tid, Duration::ZERO);
                    } else {
                        tr.resume_in_syscall(tid);
                    }
                } else if ev == Event::PTRACE_EVENT_EXIT as i32 {
                    let _ = ptrace::cont(tid, None);
                } else if ev == Event::PTRACE_EVENT_STOP as i32 {
                    // First stop of a new thread, or our interrupt at the end of a pause.
                    if !tr.threads.contains_key(&tid) {
                        if !is_thread_of(leader, tid) {
                            // A child process (fork), attached by the kernel: let it go.
                            tr.children += 1;
                            let _ = ptrace::detach(tid, None);
                            continue;
                        }
                        tr.add_thread(tid);
                    }
                    if tr.threads.get(&tid).is_some_and(|t| !t.stack_named) {
                        tr.name_thread_stack(tid);
                    }
                    let stepped = if tr.threads.get(&tid).is_some_and(|t| t.retarget) {
                        tr.retarget(tid)
                    } else if tr.threads.get(&tid).is_some_and(|t| t.native) {
                        tr.begin_window(tid)
                    } else {
                        tr.step(tid)
                    };
                    if let Err(e) = stepped {
                        tr.stop_recording(e, Some(tid));
                    }
                } else {
                    let _ = ptrace::cont(tid, None);
                }
            }
            WaitStatus::Exited(tid, code) => {
                tr.threads.remove(&tid);
                if tid == leader {
                    exit = ProgramExit::Code(code);
                    tr.threads.clear();
                }
            }
            WaitStatus::Signaled(tid, sig, _) => {
                tr.threads.remove(&tid);
                if tid == leader {
                    exit = ProgramExit::Signal(sig as i32);
                    tr.threads.clear();
                }
            }
            _ => {}
        }
    }
    drop(timer);
    if tr.failed && !attached && matches!(exit, ProgramExit::Detached) {
        // Recording stopped early: the launched program runs on untraced; its exit is ours.
        let mut forwarded = None;
        exit = loop {
            match waitpid(leader, None) {
                Ok(WaitStatus::Exited(_, code)) => break ProgramExit::Code(code),
                Ok(WaitStatus::Signaled(_, sig, _)) => break ProgramExit::Signal(sig as i32),
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => {
                    let sig = guard.caught();
                    if let Some(s) = sig.filter(|_| sig != forwarded) {
                        forward_signal(leader, s);
                    }
                    forwarded = sig;
                }
                Err(_) => break ProgramExit::Detached,
            }
        };
    }
    let interrupted = guard.caught();
    drop(guard);
    let elapsed_s = start.elapsed().as_secs_f64();
    let threads = u64::from(tr.next_id);
    let summary = if tr.failed {
        // Nothing more is written after a failed write.
        tr.builder.summary.clone()
    } else {
        tr.builder
            .finish(&mut tr.writer)
            .or_else(|e| match e {
                crate::import::ImportError::Empty => Ok(Default::default()),
                other => Err(other),
            })
            .map_err(|e| CaptureError::Invalid(e.to_string()))?
    };
    let mut warnings = tr.errors.clone();
    if tr.incomplete > 0 {
        warnings.push(format!(
            "{} instruction(s) had operands whose registers could not be read; their accesses are missing",
            tr.incomplete
        ));
    }
    if summary.accesses == 0 && !cfg.roi.is_empty() {
        warnings.push(format!(
            "the ROI ({}) was never entered: the trace holds no accesses",
            cfg.roi.join(", ")
        ));
    }
    warnings.extend(
        tr.roi_link
            .late
            .iter()
            .map(|n| super::unfound_in_opened_libraries(n)),
    );
    let found = tr.roi_found;
    let mut w = tr.writer;
    if !tr.failed {
        for note in &found {
            w.write_note(note).map_err(out_err)?;
        }
    }
    notes.extend(found);
    if tr.children > 0 {
        const RAN: &str = "they ran untraced";
        warnings.push(crate::trace::children_note(tr.children, RAN, false));
        if !tr.failed {
            w.write_note(&crate::trace::children_note(tr.children, RAN, true))
                .map_err(out_err)?;
        }
    }
    // The vDSO's functions (clock_gettime...), which no file names: the kernel's image, the
    // same in this process.
    let vdso = tr
        .vdso
        .map(crate::symbols::vdso_functions)
        .unwrap_or_default();
    if !tr.failed && !vdso.is_empty() {
        let note = format!(
            "names of the vDSO's functions: {} symbol(s), read from this kernel's vDSO",
            vdso.len()
        );
        w.write_jit_symbols(&vdso).map_err(out_err)?;
        w.write_note(&note).map_err(out_err)?;
    }
    if let Err(e) = w.flush() {
        if !tr.failed {
            return Err(out_err(e));
        }
    }
    drop(w);
    let end = EndInfo {
        exit_code: exit.code(),
        signal: exit.signal(),
        interrupted: interrupted.is_some(),
        recorded: summary.accesses,
        skipped: 0,
        errors: tr.errors,
    };
    // A JIT runtime's names for the code it wrote (an attached process may have written
    // them before the capture began).
    let jit = perf_map(leader.as_raw() as u32, (!attached).then_some(started));
    let trace_bytes = match finalize(output, &end, jit.as_ref(), &mut notes) {
        Ok(n) => n,
        Err(e) => {
            warnings.push(format!(
                "{e}: the trace has no end frame, but everything recorded before is readable"
            ));
            std::fs::metadata(output).map(|m| m.len()).unwrap_or(0)
        }
    };
    if let ProgramExit::Signal(s) = exit {
        warnings.push(format!("the program was killed by {}", signal_name(s)));
    }
    Ok(CaptureReport {
        trace: output.clone(),
        exit,
        recorded: summary.accesses,
        skipped: 0,
        threads,
        threads_recorded: summary.threads as u64,
        trace_bytes,
        windows: Some(summary.samples),
        interrupted,
        elapsed_s,
        warnings,
        notes,
    })
}

/// Passes a signal mgbench caught on to the program it launched. SIGINT and SIGQUIT from a
/// terminal reach the program too, so only the others are forwarded.
fn forward_signal(leader: Pid, sig: i32) {
    if !matches!(sig, libc::SIGINT | libc::SIGQUIT) {
        let _ = nix::sys::signal::kill(leader, Signal::try_from(sig).ok());
    }
}

fn attach_error(pid: Pid, e: nix::errno::Errno) -> CaptureError {
    let why = match (e, ptrace_sys::ptrace_scope()) {
        (nix::errno::Errno::EPERM, Some(scope)) if scope > 0 => format!(
            "ptrace is not permitted (kernel.yama.ptrace_scope = {scope}): run as root or set kernel.yama.ptrace_scope=0"
        ),
        (nix::errno::Errno::EPERM, _) => {
            "ptrace is not permitted: run as root, or as the process's owner".to_string()
        }
        (nix::errno::Errno::ESRCH, _) => "no such process".to_string(),
        (e, _) => e.to_string(),
    };
    CaptureError::Unavailable {
        backend: "ptrace",
        why: format!("cannot trace pid {pid}: {why}"),
    }
}
