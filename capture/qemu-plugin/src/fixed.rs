//! Instructions whose accesses per execution are fixed and known before they run, so that a
//! translation block can count them with one inline add at its start instead of one per
//! access (the counting mode of sampled capture and live RDX; see the plugin's
//! `register_counting`).
//!
//! [`fixed_accesses`] answers only where QEMU 7.2 performs the accesses the inline counter
//! would count, one by one, whatever the registers and memory hold: explicit memory operands
//! and the stack's pushes and pops, of 1 to 8 bytes (a read-modify-write is a load and a
//! store), and vector loads and stores of 16 or 32 bytes that the plugin counts as one
//! access each (`pieces`). Everything else keeps an add per access: string instructions and
//! `rep` (counts depend on rcx), conditional stores (`cmpxchg`), locked and atomic
//! instructions (which QEMU may stop and run again alone), implicit operands other than the
//! stack (`xlat`, `maskmovq`), cache-line instructions and prefetches (QEMU performs no
//! access where the instruction set names one), operands of 1 to 8 bytes of VEX and of the
//! 0F38 and 0F3A maps (QEMU 7.2's newer decoder, which loads some of them as more: a scalar
//! FMA's 8 bytes as 16), and anything wider than 8 bytes that is not one of those vector
//! accesses (x87's 80-bit values, `fxsave`, far pointers).
//!
//! A block's add runs when the block starts, so the count is ahead of the accesses made by
//! up to the block's fixed accesses while it runs, and a block that stops part way (an
//! access that faults, code that writes its own page, a SIGKILL) has counted what it did not
//! do (an atomic instruction, which QEMU may run again alone, ends the block's add: see the
//! plugin's `register_counting`). Live RDX reads the count at a watchpoint's trap and takes
//! skips of thousands of accesses, so a few accesses early change nothing it measures.
//! Sampled capture reads it only between blocks (a window starts, a thread exits, the
//! program execs), where it is exact, and after a death, where the stopped block's rest may
//! be in it; faults are counted (see `switch`) and the trace says so.
//!
//! QEMU 7.2 hands the plugin, as a block's last instruction, one that crosses into the next
//! page and that it then leaves out of the block (the next block starts with it): its bytes
//! stop at the page's end, and x86 encodings being prefix-free, they never decode as a
//! whole instruction, so it is never counted in the block's add.
//!
//! The plugin argument `rdx_check=FILE` checks the answers against QEMU itself: each
//! instruction with fixed accesses gets, instead of its share of the block's add, an add of
//! its count when it runs and an add of 1 at each access QEMU reports, to a pair of counters
//! of its own; at exit FILE gets one line per instruction address where the two differ and
//! a last line with the totals. The adds are not atomic: check a program on one thread.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use iced_x86::{
    Decoder, DecoderOptions, EncodingKind, InstructionInfoFactory, Mnemonic, OpAccess, OpKind,
};

use crate::pieces::{self, Insn};
use crate::sys::{
    qemu_plugin_insn, qemu_plugin_insn_vaddr, qemu_plugin_register_vcpu_insn_exec_inline,
    qemu_plugin_register_vcpu_mem_inline, QEMU_PLUGIN_INLINE_ADD_U64, QEMU_PLUGIN_MEM_RW,
};

/// The accesses the inline counter counts for each execution of the instruction `insn`,
/// where they are fixed and known (see the module's documentation); `None` where the
/// instruction must count them itself.
pub fn fixed_accesses(insn: &Insn) -> Option<u8> {
    let i = insn.decoded();
    if i.is_invalid() || atomic(insn) || i.is_string_instruction() || uncounted(i.mnemonic()) {
        return None;
    }
    let explicit = (0..i.op_count())
        .filter(|&k| i.op_kind(k) == OpKind::Memory)
        .count();
    let pieces = insn.shape().pieces;
    // QEMU 7.2 decodes VEX and the 0F38 and 0F3A maps anew, and loads some of their narrower
    // operands as more than one access (a VEX `vfmadd213sd` with an 8-byte operand: 2 per
    // execution), so of those only the full-width accesses counted as one are fixed.
    let full_width_only = i.encoding() != EncodingKind::Legacy || three_byte_map(insn.bytes());
    FACTORY.with_borrow_mut(|factory| {
        let memory = factory.info(i).used_memory();
        // Memory other than the explicit operand's and the stack's (xlat's table, an implicit
        // rdi) is the instruction's own business.
        if !i.is_stack_instruction() && memory.len() > explicit {
            return None;
        }
        let mut n = 0u8;
        for m in memory {
            let per = match m.access() {
                OpAccess::Read | OpAccess::Write => 1,
                OpAccess::ReadWrite => 2,
                OpAccess::NoMemAccess => 0,
                _ => return None,
            };
            let size = m.memory_size().size();
            let sized = if pieces > 1 {
                size == usize::from(pieces) * 8
            } else {
                !full_width_only && (1..=8).contains(&size)
            };
            if per > 0 && !sized {
                return None;
            }
            n += per;
        }
        Some(n)
    })
}

/// Whether `insn` is atomic (a `lock` prefix, or `xchg` with memory): its accesses are not
/// fixed, and QEMU may run it again alone, then the rest of its block as a new block (see the
/// plugin's `register_counting`).
pub fn atomic(insn: &Insn) -> bool {
    let i = insn.decoded();
    i.has_lock_prefix() || pieces::atomic_rmw(i)
}

/// Whether `insn` divides (`div`, `idiv`): it may raise a division error (SIGFPE, which a
/// program can survive) after its access, so the instructions after it in its block may not
/// run (see the plugin's `register_counting`).
pub fn divides(insn: &Insn) -> bool {
    matches!(insn.decoded().mnemonic(), Mnemonic::Div | Mnemonic::Idiv)
}

thread_local! {
    /// The translating thread's instruction-info factory, whose buffers serve every
    /// instruction it decodes (a new one per instruction allocated them anew).
    static FACTORY: RefCell<InstructionInfoFactory> = RefCell::new(InstructionInfoFactory::new());
}

/// Where `rdx_check` writes what it found; set once at start.
static CHECK_INTO: OnceLock<String> = OnceLock::new();
/// A checked instruction: its address, its bytes, and its counts (fixed, QEMU's).
struct Checked {
    ip: u64,
    bytes: Vec<u8>,
    counts: &'static [AtomicU64; 2],
}
static CHECKED: Mutex<Vec<Checked>> = Mutex::new(Vec::new());

/// Turns the check on (`rdx_check=FILE`).
pub fn check_into(path: String) {
    let _ = CHECK_INTO.set(path);
}

/// Whether fixed counts are checked rather than added per block.
pub fn checking() -> bool {
    CHECK_INTO.get().is_some()
}

/// Checks instruction `insn`, whose accesses are fixed at `k` per execution and that QEMU
/// performs in `pieces` each: QEMU's count must be `k * pieces`.
///
/// # Safety
/// During QEMU's translation callback, with `insn` one of its instructions.
pub unsafe fn check(insn: *mut qemu_plugin_insn, k: u8, pieces: u8) {
    // Atomics, so that generated code may write them through the pointers handed to QEMU.
    let pair: &'static [AtomicU64; 2] = Box::leak(Box::new([AtomicU64::new(0), AtomicU64::new(0)]));
    let bytes = crate::insn_bytes(insn).to_vec();
    qemu_plugin_register_vcpu_insn_exec_inline(
        insn,
        QEMU_PLUGIN_INLINE_ADD_U64,
        pair[0].as_ptr().cast(),
        u64::from(k) * u64::from(pieces),
    );
    qemu_plugin_register_vcpu_mem_inline(
        insn,
        QEMU_PLUGIN_MEM_RW,
        QEMU_PLUGIN_INLINE_ADD_U64,
        pair[1].as_ptr().cast(),
        1,
    );
    let ip = qemu_plugin_insn_vaddr(insn);
    CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Checked {
            ip,
            bytes,
            counts: pair,
        });
}

/// At exit: writes what the check found (nothing where it is off).
pub fn report_check() {
    let Some(path) = CHECK_INTO.get() else {
        return;
    };
    let checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    // An instruction translated more than once has a pair per translation.
    let mut per = std::collections::BTreeMap::<u64, (&[u8], u64, u64)>::new();
    for c in checked.iter() {
        // Generated code wrote the pair; every vCPU has stopped at exit.
        let [fixed, qemu] = [0, 1].map(|k| c.counts[k].load(Ordering::Acquire));
        let e = per.entry(c.ip).or_insert((&c.bytes, 0, 0));
        e.1 += fixed;
        e.2 += qemu;
    }
    let mut out = String::new();
    let (mut fixed, mut qemu, mut differ) = (0u64, 0u64, 0usize);
    for (ip, (bytes, f, q)) in &per {
        fixed += f;
        qemu += q;
        if f != q {
            differ += 1;
            let i = Decoder::new(64, bytes, DecoderOptions::NONE).decode();
            let _ = writeln!(out, "{ip:#x} {i}: fixed {f}, QEMU {q}, bytes {bytes:02x?}");
        }
    }
    let _ = writeln!(
        out,
        "checked {} instructions: fixed {fixed}, QEMU {qemu}, {differ} differ",
        per.len()
    );
    if let Err(e) = std::fs::write(path, out) {
        crate::sys::outs(&format!("rdx_check: cannot write {path}: {e}"));
    }
}

/// Whether the opcode of the instruction `bytes`, after its prefixes, is in the 0F38 or 0F3A
/// map.
fn three_byte_map(bytes: &[u8]) -> bool {
    let at = bytes.iter().position(|&b| {
        !matches!(
            b,
            0x66 | 0x67 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x40..=0x4f
        )
    });
    at.is_some_and(|k| bytes.get(k) == Some(&0x0f) && matches!(bytes.get(k + 1), Some(0x38 | 0x3a)))
}

/// Instructions that keep counting their accesses one by one whatever their operands.
fn uncounted(m: Mnemonic) -> bool {
    matches!(
        m,
        // QEMU performs no access where these name one, or a helper performs several.
        Mnemonic::Clflush
            | Mnemonic::Clflushopt
            | Mnemonic::Clwb
            | Mnemonic::Cldemote
            | Mnemonic::Prefetch
            | Mnemonic::Prefetchw
            | Mnemonic::Prefetchwt1
            | Mnemonic::Prefetchnta
            | Mnemonic::Prefetcht0
            | Mnemonic::Prefetcht1
            | Mnemonic::Prefetcht2
            | Mnemonic::Enter
            | Mnemonic::Iret
            | Mnemonic::Iretd
            | Mnemonic::Iretq
            | Mnemonic::Cmpxchg
            | Mnemonic::Cmpxchg8b
            | Mnemonic::Cmpxchg16b
            | Mnemonic::Xsave
            | Mnemonic::Xsave64
            | Mnemonic::Xsavec
            | Mnemonic::Xsavec64
            | Mnemonic::Xsaveopt
            | Mnemonic::Xsaveopt64
            | Mnemonic::Xrstor
            | Mnemonic::Xrstor64
            | Mnemonic::Fxsave
            | Mnemonic::Fxsave64
            | Mnemonic::Fxrstor
            | Mnemonic::Fxrstor64
            | Mnemonic::Maskmovq
            | Mnemonic::Maskmovdqu
            | Mnemonic::Vmaskmovps
            | Mnemonic::Vmaskmovpd
            | Mnemonic::Vpmaskmovd
            | Mnemonic::Vpmaskmovq
            | Mnemonic::Xlatb
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(bytes: &[u8]) -> Option<u8> {
        fixed_accesses(&Insn::new(bytes))
    }

    #[test]
    fn plain_loads_stores_and_read_modify_writes_are_fixed() {
        assert_eq!(n(&[0x48, 0x8b, 0x07]), Some(1), "mov rax, [rdi]");
        assert_eq!(n(&[0x48, 0x89, 0x07]), Some(1), "mov [rdi], rax");
        assert_eq!(n(&[0x48, 0x01, 0x07]), Some(2), "add [rdi], rax");
        assert_eq!(n(&[0xff, 0x07]), Some(2), "inc dword [rdi]");
        assert_eq!(n(&[0x48, 0x8d, 0x47, 0x08]), Some(0), "lea rax, [rdi+8]");
        assert_eq!(n(&[0x0f, 0x1f, 0x40, 0x00]), Some(0), "nop dword [rax]");
        assert_eq!(n(&[0x48, 0x01, 0xc8]), Some(0), "add rax, rcx");
        assert_eq!(n(&[0xf2, 0x0f, 0x10, 0x07]), Some(1), "movsd xmm0, [rdi]");
        assert_eq!(n(&[0x0f, 0x94, 0x07]), Some(1), "sete [rdi]");
        assert_eq!(n(&[0xdd, 0x07]), Some(1), "fld qword [rdi]");
        // QEMU loads cmov's operand whether or not it moves it, as the instruction set says.
        assert_eq!(n(&[0x48, 0x0f, 0x44, 0x07]), Some(1), "cmove rax, [rdi]");
    }

    #[test]
    fn the_stack_counts_as_its_pushes_and_pops() {
        assert_eq!(n(&[0x55]), Some(1), "push rbp");
        assert_eq!(n(&[0x5d]), Some(1), "pop rbp");
        assert_eq!(n(&[0xc3]), Some(1), "ret");
        assert_eq!(n(&[0xe8, 0, 0, 0, 0]), Some(1), "call rel32");
        assert_eq!(n(&[0xff, 0x17]), Some(2), "call [rdi]");
        assert_eq!(n(&[0xff, 0x37]), Some(2), "push qword [rdi]");
        assert_eq!(n(&[0xc9]), Some(1), "leave");
        assert_eq!(n(&[0x9c]), Some(1), "pushfq");
    }

    #[test]
    fn accesses_that_depend_on_the_run_are_not_fixed() {
        assert_eq!(n(&[0xf3, 0xa4]), None, "rep movsb");
        assert_eq!(n(&[0xa4]), None, "movsb");
        assert_eq!(n(&[0xf0, 0x48, 0x01, 0x07]), None, "lock add [rdi], rax");
        assert_eq!(n(&[0x48, 0x87, 0x07]), None, "xchg [rdi], rax");
        assert_eq!(n(&[0x48, 0x0f, 0xb1, 0x0f]), None, "cmpxchg [rdi], rcx");
        assert_eq!(n(&[0xdb, 0x2f]), None, "fld tword [rdi]");
        assert_eq!(n(&[0x0f, 0xae, 0x07]), None, "fxsave [rdi]");
        assert_eq!(n(&[0x0f, 0xae, 0x3f]), None, "clflush [rdi]");
        assert_eq!(n(&[0x0f, 0x18, 0x0f]), None, "prefetcht0 [rdi]");
        assert_eq!(n(&[0xd7]), None, "xlatb");
        assert_eq!(n(&[0xc8, 0x10, 0, 0]), None, "enter 16, 0");
        assert_eq!(n(&[0x06]), None, "invalid in 64-bit mode");
        // An instruction cut at a page's end (QEMU 7.2 shows it in the block it leaves it
        // out of): mov rbx, [r14] is 49 8b 1e.
        assert_eq!(n(&[0x49, 0x8b]), None, "mov rbx, [r14] cut short");
        // QEMU 7.2 loads this 8-byte operand as two accesses.
        assert_eq!(
            n(&[0xc4, 0xe2, 0xf9, 0xa9, 0x51, 0x18]),
            None,
            "vfmadd213sd xmm2, xmm0, [rcx+18h]"
        );
        assert_eq!(
            n(&[0x66, 0x0f, 0x38, 0x30, 0x07]),
            None,
            "pmovzxbw xmm0, [rdi]"
        );
    }
}
