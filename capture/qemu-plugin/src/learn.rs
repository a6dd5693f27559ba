//! Memory accesses per instruction, learned while callbacks are in, so that counting adds
//! once per translation block instead of once per access.
//!
//! QEMU's plugin API says at translation time which instructions there are, not how many
//! memory accesses each makes (that is QEMU's own split: a 16-byte SSE load is two). While
//! callbacks are in (a window, and until the switch back to counting lands), every
//! instruction not learned yet gets an execution callback: it opens an execution, the memory
//! callbacks with its address count into it, and the next execution callback or an access by
//! another instruction closes it. An instruction observed [`SEEN`] times with one count, and
//! whose count QEMU fixes at translation (not a string operation, which repeats; not an AVX2
//! gather or masked move, whose mask decides; not xsave and its family, which depend on the
//! processor state), is learned. Counting translations then add the learned counts of a block
//! once, at its start, and keep one inline add per access on the other instructions.
//!
//! QEMU 7.2 makes some accesses in helpers (atomic operations, xsave), and a helper's
//! accesses fire the memory callbacks of the last instrumented instruction that set them
//! (QEMU clears them only at some block exits): an instruction counted by its block and
//! calling such a helper would add to the counter for the instruction before it. So an
//! instruction any of whose accesses reaches the callback from QEMU's code instead of
//! generated code (`sys::mem_cb_with_caller`) is never learned: it keeps its own inline add.
//!
//! A block left in the middle would have added accesses it did not make: QEMU leaves a block
//! early only on a fault (a guest fault, or a write to a page holding translated code), and
//! faults pass through the plugin's SIGSEGV hook while counting, which ends block-level
//! counting for the rest of the run and reports how many accesses the count may be off by.
//! Everything here is used only while the guest has one thread (`switch::enabled`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Observations with one count before an instruction's count is trusted: a fault in the
/// middle of an instruction gives one short observation, which then disagrees.
pub const SEEN: u64 = 2;
/// Most accesses an instruction may make and be learned (beyond: counted per access).
const MAX_COUNT: u64 = 64;

const COUNT_BITS: u64 = 0xffff_ffff;
const SEEN_SHIFT: u32 = 32;
const VARIABLE: u64 = 1 << 63;

/// One instruction: its address and bytes (the key), and what was observed.
pub struct Entry {
    vaddr: u64,
    bytes: [u8; 16],
    len: u8,
    /// Count (low 32 bits), observations with that count (next 8, saturating), and
    /// [`VARIABLE`] once two observations disagreed.
    state: AtomicU64,
}

impl Entry {
    fn new(vaddr: u64, bytes: &[u8]) -> Entry {
        let mut b = [0u8; 16];
        let len = bytes.len().min(16);
        b[..len].copy_from_slice(&bytes[..len]);
        Entry {
            vaddr,
            bytes: b,
            len: len as u8,
            state: AtomicU64::new(if fixed_by_translation(bytes) {
                0
            } else {
                VARIABLE
            }),
        }
    }

    fn same_code(&self, bytes: &[u8]) -> bool {
        bytes.len().min(16) == self.len as usize
            && self.bytes[..self.len as usize] == bytes[..self.len as usize]
    }

    fn observe(&self, n: u64) {
        let s = self.state.load(Ordering::Relaxed);

        if s & VARIABLE != 0 {
            return;
        }
        let seen = (s >> SEEN_SHIFT) & 0xff;
        let next = if n > MAX_COUNT || (seen > 0 && s & COUNT_BITS != n) {
            VARIABLE
        } else {
            n | ((seen + 1).min(0xff) << SEEN_SHIFT)
        };
        self.state.store(next, Ordering::Relaxed);
    }

    /// The learned count, if trusted.
    fn learned(&self) -> Option<u64> {
        let s = self.state.load(Ordering::Relaxed);
        (s & VARIABLE == 0 && (s >> SEEN_SHIFT) & 0xff >= SEEN).then_some(s & COUNT_BITS)
    }

    fn variable(&self) -> bool {
        self.state.load(Ordering::Relaxed) & VARIABLE != 0
    }
}

/// Whether QEMU's translation of this instruction always makes the same number of memory
/// accesses, from its bytes: false for string operations (a rep prefix repeats them), xsave
/// and its family, cmpxchg8b/16b and other 0F C7 forms, maskmovq/maskmovdqu, system
/// instructions (0F 00, 0F 01), AVX2 gathers and masked moves, EVEX and XOP encodings.
pub fn fixed_by_translation(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65) =
        bytes.get(i)
    {
        i += 1;
    }
    if matches!(bytes.get(i), Some(0x40..=0x4f)) {
        i += 1;
    }
    match bytes.get(i) {
        None | Some(0x62 | 0x8f | 0xa4..=0xa7 | 0xaa..=0xaf) => false,
        Some(0x0f) => !matches!(
            bytes.get(i + 1),
            None | Some(0x00 | 0x01 | 0xae | 0xc7 | 0xf7)
        ),
        // Three-byte VEX: map 0F38 holds the gathers (90-93) and masked moves (2C-2F, 8C, 8E).
        Some(0xc4) => match (bytes.get(i + 1), bytes.get(i + 3)) {
            (Some(&m), Some(&op)) if m & 0x1f == 2 => {
                !matches!(op, 0x2c..=0x2f | 0x8c | 0x8e | 0x90..=0x93)
            }
            (Some(_), Some(_)) => true,
            _ => false,
        },
        Some(_) => true,
    }
}

/// Instructions by address; entries are leaked (generated code holds pointers to them), and
/// one whose address now holds other code is replaced (the old one stays allocated).
static TABLE: Mutex<Option<HashMap<u64, &'static Entry>>> = Mutex::new(None);

/// The instruction being observed, its accesses so far.
static CURRENT: AtomicPtr<Entry> = AtomicPtr::new(std::ptr::null_mut());
static CURRENT_IP: AtomicU64 = AtomicU64::new(0);
static CURRENT_N: AtomicU64 = AtomicU64::new(0);
/// QEMU's code (`set_qemu_text`).
static QEMU_LO: AtomicU64 = AtomicU64::new(0);
static QEMU_HI: AtomicU64 = AtomicU64::new(0);

/// Block-level counting is off for the rest of the run (a fault while counting).
static OFF: AtomicBool = AtomicBool::new(false);
/// Faults while counting by blocks, and the most any block added at once.
static FAULTS: AtomicU32 = AtomicU32::new(0);
static MAX_BLOCK: AtomicU64 = AtomicU64::new(0);

/// What a translation does with one instruction.
pub enum Plan {
    /// Its count is learned: add it with the block.
    Learned(u64),
    /// Observe it (callbacks) or count it per access (counting).
    Learning(&'static Entry),
    /// Its count can vary: count it per access.
    Variable,
}

/// The plan for the instruction at `vaddr` with these bytes (translation time).
pub fn plan(vaddr: u64, bytes: &[u8]) -> Plan {
    let Ok(mut guard) = TABLE.lock() else {
        return Plan::Variable;
    };
    let table = guard.get_or_insert_with(HashMap::new);
    let entry = match table.get(&vaddr) {
        Some(e) if e.same_code(bytes) => *e,
        _ => {
            let e: &'static Entry = Box::leak(Box::new(Entry::new(vaddr, bytes)));
            table.insert(vaddr, e);
            e
        }
    };
    if entry.variable() {
        Plan::Variable
    } else if let Some(n) = entry.learned() {
        Plan::Learned(n)
    } else {
        Plan::Learning(entry)
    }
}

/// Whether counting translations may add learned counts per block.
pub fn blocks_on() -> bool {
    !OFF.load(Ordering::Acquire)
}

/// Counting translations add per access only (`blocks=0`).
pub fn blocks_off() {
    OFF.store(true, Ordering::Release);
}

/// A counting translation adds `n` accesses at its block's start.
pub fn note_block(n: u64) {
    MAX_BLOCK.fetch_max(n, Ordering::Relaxed);
}

/// The execution callback of an instruction being learned (`udata` is its [`Entry`]).
pub extern "C" fn on_exec(_vcpu: u32, udata: *mut c_void) {
    close();
    let e = udata.cast::<Entry>();
    // SAFETY: `udata` is a leaked, never freed Entry.
    CURRENT_IP.store(unsafe { (*e).vaddr }, Ordering::Relaxed);
    CURRENT_N.store(0, Ordering::Relaxed);
    CURRENT.store(e, Ordering::Relaxed);
}

/// Every memory access while callbacks are in, with its instruction's address and where the
/// callback was called from.
#[inline(always)]
pub fn on_access(ip: u64, caller: u64) {
    let cur = CURRENT_IP.load(Ordering::Relaxed);
    if cur == 0 {
        return;
    }
    if cur == ip {
        CURRENT_N.fetch_add(1, Ordering::Relaxed);
        let (lo, hi) = (
            QEMU_LO.load(Ordering::Relaxed),
            QEMU_HI.load(Ordering::Relaxed),
        );
        if (lo..hi).contains(&caller) {
            let e = CURRENT.load(Ordering::Relaxed);
            if !e.is_null() {
                // SAFETY: a leaked, never freed Entry.
                unsafe { &*e }.state.store(VARIABLE, Ordering::Relaxed);
            }
        }
    } else {
        close();
    }
}

/// Where QEMU's code lies: an access reported from there was made in a helper (`on_access`).
/// Unknown, every instruction is counted per access.
pub fn set_qemu_text(range: Option<(u64, u64)>) {
    match range {
        Some((lo, hi)) => {
            QEMU_LO.store(lo, Ordering::Relaxed);
            QEMU_HI.store(hi, Ordering::Relaxed);
        }
        None => blocks_off(),
    }
}

/// Ends the current observation: its instruction made the accesses counted.
fn close() {
    let e = CURRENT.swap(std::ptr::null_mut(), Ordering::Relaxed);
    CURRENT_IP.store(0, Ordering::Relaxed);
    if !e.is_null() {
        // SAFETY: a leaked, never freed Entry.
        unsafe { &*e }.observe(CURRENT_N.load(Ordering::Relaxed));
    }
}

/// Translations are flushed (a reset): the observation in progress is dropped, not trusted.
pub fn drop_current() {
    CURRENT.store(std::ptr::null_mut(), Ordering::Relaxed);
    CURRENT_IP.store(0, Ordering::Relaxed);
}

/// A fault while block-counting translations run (from the SIGSEGV hook): QEMU may leave the
/// block early, after its add. Block counting ends with the next retranslation.
pub fn fault_while_counting() {
    FAULTS.fetch_add(1, Ordering::Relaxed);
    OFF.store(true, Ordering::Release);
}

/// Faults while counting by blocks and the most accesses the count may be off by (each fault
/// at most one block's add), when there were any.
pub fn inexact() -> Option<(u32, u64)> {
    let f = FAULTS.load(Ordering::Relaxed);
    (f > 0).then(|| (f, u64::from(f) * MAX_BLOCK.load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_whose_access_count_qemu_fixes() {
        // mov rax, [rdi+rsi*8]; add [rdi], eax; movupd xmm0, [rax]; call rel32; push rbx
        for b in [
            &[0x48, 0x8b, 0x04, 0xf7][..],
            &[0x01, 0x07],
            &[0x66, 0x0f, 0x10, 0x00],
            &[0xe8, 0, 0, 0, 0],
            &[0x53],
            // vmovupd ymm0, [rax] (VEX, map 0F)
            &[0xc5, 0xfd, 0x10, 0x00],
            // vfmadd231pd ymm0, ymm1, [rax] (VEX, map 0F38, opcode B8)
            &[0xc4, 0xe2, 0xf5, 0xb8, 0x00],
        ] {
            assert!(fixed_by_translation(b), "{b:02x?}");
        }
        for b in [
            // rep movsb, rep stosq, lodsb
            &[0xf3, 0xa4][..],
            &[0xf3, 0x48, 0xab],
            &[0xac],
            // xsavec [rsp], xrstor [rsp], cmpxchg16b [rdi], maskmovdqu
            &[0x0f, 0xc7, 0x24, 0x24],
            &[0x0f, 0xae, 0x2c, 0x24],
            &[0x48, 0x0f, 0xc7, 0x0f],
            &[0x66, 0x0f, 0xf7, 0xc1],
            // vpgatherdd ymm0, [rax+ymm1*4], ymm2; vpmaskmovd ymm0, ymm1, [rax]
            &[0xc4, 0xe2, 0x6d, 0x90, 0x04, 0x88],
            &[0xc4, 0xe2, 0x75, 0x8c, 0x00],
            // EVEX, and nothing
            &[0x62, 0xf1, 0x7c, 0x48, 0x10, 0x00],
            &[],
        ] {
            assert!(!fixed_by_translation(b), "{b:02x?}");
        }
    }

    #[test]
    fn a_count_is_trusted_after_agreeing_observations_only() {
        let e = Entry::new(0x1000, &[0x01, 0x07]);
        e.observe(2);
        assert_eq!(e.learned(), None);
        e.observe(2);
        assert_eq!(e.learned(), Some(2));
        e.observe(1);
        assert_eq!(e.learned(), None);
        assert!(e.variable());
        e.observe(2);
        assert!(e.variable());
        let rep = Entry::new(0x2000, &[0xf3, 0xa4]);
        assert!(rep.variable());
        let big = Entry::new(0x3000, &[0x01, 0x07]);
        big.observe(MAX_COUNT + 1);
        assert!(big.variable());
    }

    #[test]
    fn executions_are_delimited_by_callbacks_and_other_instructions() {
        let a = Box::leak(Box::new(Entry::new(0x10, &[0x01, 0x07])));
        let b = Box::leak(Box::new(Entry::new(0x20, &[0x48, 0x8b, 0x07])));
        let run = |seq: &[(char, u64)]| {
            for &(what, ip) in seq {
                match what {
                    'x' => on_exec(
                        0,
                        (if ip == 0x10 { &*a } else { &*b }) as *const Entry as *mut c_void,
                    ),
                    _ => on_access(ip, 0x9000),
                }
            }
        };
        // a: 2 accesses; b: 1; a again (back to back, one instruction loop); then a learned
        // instruction at 0x30 ends a's execution.
        run(&[
            ('x', 0x10),
            ('m', 0x10),
            ('m', 0x10),
            ('x', 0x20),
            ('m', 0x20),
        ]);
        run(&[('x', 0x10), ('m', 0x10), ('m', 0x10), ('m', 0x30)]);
        assert_eq!(a.learned(), Some(2));
        assert_eq!(b.learned(), None);
        run(&[('x', 0x20), ('m', 0x20), ('x', 0x20)]);
        drop_current();
        assert_eq!(b.learned(), Some(1));
        // An access made in one of QEMU's helpers: never counted by blocks.
        let c = Box::leak(Box::new(Entry::new(0x40, &[0x87, 0x07])));
        set_qemu_text(Some((0x4000, 0x6000)));
        on_exec(0, (&*c) as *const Entry as *mut c_void);
        on_access(0x40, 0x9000);
        on_access(0x40, 0x5000);
        on_exec(0, (&*c) as *const Entry as *mut c_void);
        on_access(0x40, 0x9000);
        on_access(0x40, 0x9000);
        drop_current();
        assert!(c.variable());
    }
}
