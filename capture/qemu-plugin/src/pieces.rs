//! Accesses that QEMU performs otherwise than ptrace and Valgrind record them: vector
//! accesses in pieces, joined back into one access each, and atomic read-modify-writes as
//! one access, split into their load and store.
//!
//! QEMU 7.2 performs an SSE or AVX load or store of 16 or 32 bytes as 2 or 4 loads or stores
//! of 8 bytes, in address order, and each piece reaches the plugin (a memory callback, an
//! inline add). The trace records one access of the instruction's width instead, as the
//! `ptrace` backend and Valgrind's lackey do, so that access counts, per-instruction counts and
//! strides of vector code mean the same under every backend:
//!
//! - at translation, [`Insn::shape`] decodes the instruction: 2 or 4 for a vector load or store
//!   of 16 or 32 bytes (not a gather, scatter or masked move: those are element by element),
//!   else 1;
//! - recording, such an instruction's callback goes through [`join`]: the first piece is
//!   recorded as the whole access (its [`Shape`]'s width), the pieces that continue it are
//!   dropped;
//! - counting inline, its pieces add to lanes of which every 2 or 4 count one access
//!   (`switch::lane_ptr`, `spill::counter_count`).
//!
//! QEMU 7.2 also loads 16 bytes, in 2 pieces, for the 4- or 8-byte memory operand of a scalar
//! FMA (`vfmadd231sd xmm0, xmm1, [rdi]`: 8 bytes at rdi, then 8 at rdi+8, which the
//! instruction does not read); its pieces are joined the same way into the access the
//! instruction makes, of its own width at the first piece's address.
//!
//! Both ways count one access per execution, so skip counts stay exact: the pieces of one
//! execution all run in one mode (a switch takes effect between translation blocks).
//!
//! A locked read-modify-write (`lock add`, `lock cmpxchg`, `xchg` with memory) is a load and
//! a store of the same address, as ptrace records it. QEMU performs it so while it runs the
//! guest serially; once it runs it in parallel (from the guest's second thread, or its first
//! shared mapping: a `MAP_SHARED` file such as glibc's `gconv-modules.cache` is enough), it
//! performs it with one atomic access that both loads and stores, reported once. Such an
//! instruction's callback records that report as its load and its store ([`split_rmw`]), and
//! its inline add counts 2 and is filtered to loads (see the plugin's `register_counting`):
//! it then runs once per execution either way.

use std::cell::{Cell, OnceCell};
use std::sync::atomic::{AtomicBool, Ordering};

use iced_x86::{Decoder, DecoderOptions, EncodingKind, Instruction, Mnemonic, OpKind};
use mgbench_capture::trace::AccessKind;

/// Whether the decoded instruction `i` is a locked read-modify-write of memory (a `lock`
/// prefix, or `xchg` with memory, locked without one) that QEMU performs with one atomic
/// access when it runs the guest in parallel (not `lock neg`: a load, then a compare-and-swap
/// loop).
pub fn atomic_rmw(i: &Instruction) -> bool {
    let memory = (0..i.op_count()).any(|k| i.op_kind(k) == OpKind::Memory);
    memory
        && (i.has_lock_prefix() || i.mnemonic() == Mnemonic::Xchg)
        && i.mnemonic() != Mnemonic::Neg
}

/// The accesses a report `info` stands for: the load and the store of an atomic helper's
/// access that is both (QEMU 7.2: load and store bits 16 and 17), else the load or store
/// itself.
pub fn split_rmw(info: u32) -> impl Iterator<Item = u32> {
    const R: u32 = 1 << 16;
    const W: u32 = 2 << 16;
    let parts = if info & (R | W) == R | W {
        [Some(info & !W), Some(info & !R)]
    } else {
        [Some(info), None]
    };
    parts.into_iter().flatten()
}

/// Whether pieces are joined: set at start once [`widen`] is known to work on this QEMU's
/// meminfo values (else every piece stays an access, counted as one everywhere).
static JOINING: AtomicBool = AtomicBool::new(false);

/// Bytes QEMU performs a wide access in.
const PIECE: u8 = 8;

/// Turns joining on where QEMU's meminfo can say 16 and 32 bytes (`decode` reads a meminfo
/// value's size and kind). Returns whether it did.
pub fn init(decode: impl Fn(u32) -> (u8, AccessKind)) -> bool {
    // An 8-byte load and store as QEMU 7.2 packs them (MO_64 in the size bits of the memory
    // operation, the store bit above them); checked, not assumed.
    let ok = [
        ((3u32 << 4) | (1 << 16), AccessKind::Load),
        ((3 << 4) | (2 << 16), AccessKind::Store),
    ]
    .into_iter()
    .all(|(info, kind)| {
        decode(info) == (PIECE, kind)
            && [2, 4]
                .into_iter()
                .all(|n| widen(info, n).is_some_and(|w| decode(w) == (PIECE * n, kind)))
    });
    JOINING.store(ok, Ordering::Release);
    ok
}

/// The meminfo value of access `info` (8 bytes) made `pieces` times as wide.
fn widen(info: u32, pieces: u8) -> Option<u32> {
    resize(info, PIECE.checked_mul(pieces)?)
}

/// The meminfo value of access `info` made `bytes` wide (4, 8, 16 or 32).
fn resize(info: u32, bytes: u8) -> Option<u32> {
    let shift = match bytes {
        4 => 2,
        8 => 3,
        16 => 4,
        32 => 5,
        _ => return None,
    };
    // QEMU 7.2: the memory operation's size (log2) in bits 4-6.
    Some((info & !(7 << 4)) | (shift << 4))
}

/// How QEMU performs each access of an instruction, as far as joining goes: in `pieces`
/// pieces of 8 bytes (1: as one access), which make one access of `width` bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Shape {
    pub pieces: u8,
    pub width: u8,
}

/// An instruction whose accesses are not joined.
const WHOLE: Shape = Shape {
    pieces: 1,
    width: 0,
};

/// An instruction being translated: its bytes, decoded at most once however many of the
/// questions below are asked of it (each decodes only where its byte test says it may
/// matter: most instructions are neither vector nor locked).
pub struct Insn<'a> {
    bytes: &'a [u8],
    decoded: OnceCell<Instruction>,
    shape: OnceCell<Shape>,
}

impl<'a> Insn<'a> {
    pub fn new(bytes: &'a [u8]) -> Insn<'a> {
        Insn {
            bytes,
            decoded: OnceCell::new(),
            shape: OnceCell::new(),
        }
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The instruction, decoded on the first call.
    pub fn decoded(&self) -> &Instruction {
        self.decoded
            .get_or_init(|| Decoder::new(64, self.bytes, DecoderOptions::NONE).decode())
    }

    /// Whether it is a locked read-modify-write of memory ([`atomic_rmw`]; decoded only
    /// where a `lock` prefix or an `xchg` opcode is among its bytes).
    pub fn atomic_rmw(&self) -> bool {
        self.bytes
            .iter()
            .take(15)
            .any(|&b| matches!(b, 0xf0 | 0x86 | 0x87))
            && atomic_rmw(self.decoded())
    }

    /// Its [`Shape`]: 2 or 4 pieces for a vector load or store of 16 or 32 bytes, joined
    /// into one access of that width; 2 pieces for a scalar FMA's operand, joined into one
    /// of its own 4 or 8 bytes; else 1 (decoded only where it may be SSE or AVX; worked out
    /// once, as translation asks it and `fixed::fixed_accesses` again).
    pub fn shape(&self) -> Shape {
        *self.shape.get_or_init(|| {
            if !JOINING.load(Ordering::Relaxed) || !maybe_vector(self.bytes) {
                return WHOLE;
            }
            vector_shape(self.decoded())
        })
    }
}

/// [`Insn::shape`] of an instruction that may be SSE or AVX.
fn vector_shape(i: &Instruction) -> Shape {
    if i.is_invalid() || i.is_vsib() {
        return WHOLE;
    }
    let ops = 0..i.op_count();
    let memory = ops.clone().any(|k| i.op_kind(k) == OpKind::Memory);
    // A vector register among the operands: SSE and AVX, not cmpxchg16b (which QEMU performs
    // as pieces in one thread and as one 16-byte access in several).
    let vector = ops.into_iter().any(|k| {
        i.op_kind(k) == OpKind::Register && {
            let r = i.op_register(k);
            r.is_xmm() || r.is_ymm()
        }
    });
    // Masked moves access element by element, and only the elements the mask selects.
    let masked = matches!(
        i.mnemonic(),
        Mnemonic::Vmaskmovps
            | Mnemonic::Vmaskmovpd
            | Mnemonic::Vpmaskmovd
            | Mnemonic::Vpmaskmovq
            | Mnemonic::Maskmovdqu
            | Mnemonic::Lea
    );
    if !memory || !vector || masked {
        return WHOLE;
    }
    let size = i.memory_size().size() as u8;
    if scalar_fma(i) {
        return Shape {
            pieces: 2,
            width: size,
        };
    }
    match size {
        16 | 32 => Shape {
            pieces: size / PIECE,
            width: size,
        },
        _ => WHOLE,
    }
}

/// Whether `i` is a VEX scalar fused multiply-add with a memory operand, whose 4 or 8 bytes
/// QEMU 7.2 loads as 16 (its decoder gives the operand the vector's width).
fn scalar_fma(i: &Instruction) -> bool {
    use Mnemonic::*;
    i.encoding() == EncodingKind::VEX
        && matches!(i.memory_size().size(), 4 | 8)
        && (0..i.op_count()).any(|k| i.op_kind(k) == OpKind::Memory)
        && matches!(
            i.mnemonic(),
            Vfmadd132sd
                | Vfmadd132ss
                | Vfmadd213sd
                | Vfmadd213ss
                | Vfmadd231sd
                | Vfmadd231ss
                | Vfmsub132sd
                | Vfmsub132ss
                | Vfmsub213sd
                | Vfmsub213ss
                | Vfmsub231sd
                | Vfmsub231ss
                | Vfnmadd132sd
                | Vfnmadd132ss
                | Vfnmadd213sd
                | Vfnmadd213ss
                | Vfnmadd231sd
                | Vfnmadd231ss
                | Vfnmsub132sd
                | Vfnmsub132ss
                | Vfnmsub213sd
                | Vfnmsub213ss
                | Vfnmsub231sd
                | Vfnmsub231ss
        )
}

/// Whether the instruction `bytes` may be SSE or AVX (its opcode, after the prefixes, opens
/// the 0F map or a VEX prefix): most instructions are not, and need no decoding.
fn maybe_vector(bytes: &[u8]) -> bool {
    let opcode = bytes.iter().find(|&&b| {
        !matches!(
            b,
            0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x40
                ..=0x4f
        )
    });
    matches!(opcode, Some(0x0f | 0xc4 | 0xc5))
}

/// The wide access the thread's previous piece began.
#[derive(Clone, Copy, Default)]
struct Open {
    ip: u64,
    /// Address the next piece would have.
    next: u64,
    /// Pieces still to come.
    left: u8,
    store: bool,
}

thread_local! {
    static OPEN: Cell<Open> = const { Cell::new(Open { ip: 0, next: 0, left: 0, store: false }) };
}

/// A piece (`info`, of `size` bytes and `kind`) at `addr` of an instruction at `ip` whose
/// accesses QEMU performs in `pieces`, of `width` bytes each: the access to record for it
/// (`info` made `width` wide) where it begins one, `None` where it continues the access its
/// thread's previous piece began. A piece that does not continue it (another instruction,
/// address or kind: the access before faulted part way) begins one.
#[inline]
pub fn join(
    ip: u64,
    addr: u64,
    info: u32,
    size: u8,
    kind: AccessKind,
    pieces: u8,
    width: u8,
) -> Option<u32> {
    let store = kind == AccessKind::Store;
    OPEN.with(|open| {
        let o = open.get();
        if size == PIECE && o.left > 0 && o.ip == ip && o.next == addr && o.store == store {
            open.set(Open {
                next: addr.wrapping_add(u64::from(PIECE)),
                left: o.left - 1,
                ..o
            });
            return None;
        }
        match resize(info, width).filter(|_| size == PIECE) {
            Some(wide) => {
                open.set(Open {
                    ip,
                    next: addr.wrapping_add(u64::from(PIECE)),
                    left: pieces - 1,
                    store,
                });
                Some(wide)
            }
            None => {
                open.set(Open::default());
                Some(info)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Size and kind as QEMU 7.2 packs them (size log2 in bits 4-6, load and store bits 16, 17).
    fn decode(info: u32) -> (u8, AccessKind) {
        let kind = if info & (2 << 16) != 0 {
            AccessKind::Store
        } else {
            AccessKind::Load
        };
        (1 << ((info >> 4) & 7), kind)
    }

    fn pieces_of(bytes: &[u8]) -> u8 {
        Insn::new(bytes).shape().pieces
    }

    fn shape_of(bytes: &[u8]) -> Shape {
        Insn::new(bytes).shape()
    }

    const LOAD8: u32 = (3 << 4) | (1 << 16);
    const STORE8: u32 = (3 << 4) | (2 << 16);

    #[test]
    fn vector_loads_and_stores_of_16_and_32_bytes_come_in_pieces() {
        assert!(init(decode));
        let cases: [(&[u8], u8); 13] = [
            (&[0x0f, 0x28, 0x06], 2),                               // movaps xmm0, [rsi]
            (&[0x0f, 0x29, 0x46, 0x40], 2),                         // movaps [rsi+0x40], xmm0
            (&[0x66, 0x0f, 0xfe, 0x8e, 0x80, 0, 0, 0], 2),          // paddd xmm1, [rsi+0x80]
            (&[0xc5, 0xfe, 0x6f, 0x96, 0xc0, 0, 0, 0], 4),          // vmovdqu ymm2, [rsi+0xc0]
            (&[0xc5, 0xfe, 0x7f, 0x96, 0, 1, 0, 0], 4),             // vmovdqu [rsi+0x100], ymm2
            (&[0xc4, 0xe3, 0x65, 0x18, 0x9e, 0x40, 1, 0, 0, 1], 2), // vinsertf128 ymm3, .., [m128]
            (&[0xf3, 0x0f, 0x7e, 0xa6, 0x80, 1, 0, 0], 1), // movq xmm4, [rsi+0x180]: 8 bytes
            (&[0xc4, 0xe2, 0x55, 0x90, 0xbc, 0xb6, 0, 2, 0, 0], 1), // vpgatherdd: lane by lane
            (&[0xc4, 0x62, 0x39, 0x2e, 0x86, 0, 4, 0, 0], 1), // vmaskmovps: masked elements
            (&[0xf0, 0x48, 0x0f, 0xc7, 0x8e, 0, 0xb, 0, 0], 1), // lock cmpxchg16b
            (&[0x0f, 0xae, 0x86, 0, 6, 0, 0], 1),          // fxsave: 512 bytes
            (&[0xc5, 0xfd, 0xef, 0xc0], 1),                // vpxor ymm0, ymm0, ymm0: no memory
            (&[0x48, 0x8b, 0x04, 0xc7], 1),                // mov rax, [rdi+rax*8]
        ];
        for (bytes, want) in cases {
            assert_eq!(pieces_of(bytes), want, "{bytes:02x?}");
        }
    }

    #[test]
    fn locked_read_modify_writes_are_found_and_their_atomic_access_split() {
        let cases: [(&[u8], bool); 7] = [
            (&[0xf0, 0x49, 0x01, 0x06], true),       // lock add [r14], rax
            (&[0xf0, 0x0f, 0xb1, 0x17], true),       // lock cmpxchg [rdi], edx
            (&[0x48, 0x87, 0x07], true),             // xchg [rdi], rax: locked without prefix
            (&[0x48, 0x87, 0xc3], false),            // xchg rbx, rax: no memory
            (&[0x49, 0x01, 0x06], false),            // add [r14], rax: not locked
            (&[0xf0, 0x48, 0xf7, 0x1f], false),      // lock neg [rdi]: a load and a CAS loop
            (&[0xf0, 0x48, 0x0f, 0xc1, 0x07], true), // lock xadd [rdi], rax
        ];
        for (bytes, want) in cases {
            assert_eq!(Insn::new(bytes).atomic_rmw(), want, "{bytes:02x?}");
        }
        let rw = (3 << 4) | (3 << 16);
        let parts: Vec<_> = split_rmw(rw).map(decode).collect();
        assert_eq!(parts, [(8, AccessKind::Load), (8, AccessKind::Store)]);
        assert_eq!(split_rmw(LOAD8).collect::<Vec<_>>(), [LOAD8]);
        assert_eq!(split_rmw(STORE8).collect::<Vec<_>>(), [STORE8]);
    }

    #[test]
    fn the_pieces_of_one_execution_make_one_access() {
        assert!(init(decode));
        let j = |ip, addr, info: u32, pieces| {
            let (size, kind) = decode(info);
            join(ip, addr, info, size, kind, pieces, PIECE * pieces)
        };
        // A 32-byte store: its first piece is the access, 32 bytes wide.
        let first = j(0x10, 0x1000, STORE8, 4).unwrap();
        assert_eq!(decode(first), (32, AccessKind::Store));
        for k in 1..4 {
            assert_eq!(j(0x10, 0x1000 + 8 * k, STORE8, 4), None);
        }
        // The next execution (even at the next address) is an access of its own.
        assert!(j(0x10, 0x1020, STORE8, 4).is_some());
        // A load and a store by one instruction pair their own pieces only.
        assert_eq!(
            decode(j(0x20, 0x2000, LOAD8, 2).unwrap()),
            (16, AccessKind::Load)
        );
        assert!(
            j(0x20, 0x2008, STORE8, 2).is_some(),
            "a store does not continue a load"
        );
        // A piece that does not follow (the access before faulted part way) begins an
        // access; one of another size is recorded as it is.
        assert!(j(0x30, 0x3000, LOAD8, 2).is_some());
        assert!(j(0x30, 0x3010, LOAD8, 2).is_some());
        let four = (2 << 4) | (1 << 16);
        assert_eq!(j(0x40, 0x4000, four, 2), Some(four));
        assert!(j(0x40, 0x4004, four, 2).is_some());
    }

    #[test]
    fn a_scalar_fma_is_one_access_of_its_own_width() {
        assert!(init(decode));
        let sd: &[u8] = &[0xc4, 0xe2, 0xf1, 0xb9, 0x07]; // vfmadd231sd xmm0, xmm1, [rdi]
        let ss: &[u8] = &[0xc4, 0xe2, 0x71, 0xa9, 0x07]; // vfmadd213ss xmm0, xmm1, [rdi]
        let reg: &[u8] = &[0xc4, 0xe2, 0xf1, 0xb9, 0xc2]; // vfmadd231sd xmm0, xmm1, xmm2
        let pd: &[u8] = &[0xc4, 0xe2, 0xf1, 0xb8, 0x07]; // vfmadd231pd xmm0, xmm1, [rdi]
        let shape = |pieces, width| Shape { pieces, width };
        assert_eq!(shape_of(sd), shape(2, 8));
        assert_eq!(shape_of(ss), shape(2, 4));
        assert_eq!(shape_of(reg), WHOLE);
        assert_eq!(shape_of(pd), shape(2, 16));
        // QEMU's two 8-byte pieces at rdi and rdi+8 make one 4-byte load at rdi.
        let first = join(0x50, 0x5000, LOAD8, 8, AccessKind::Load, 2, 4).unwrap();
        assert_eq!(decode(first), (4, AccessKind::Load));
        assert_eq!(join(0x50, 0x5008, LOAD8, 8, AccessKind::Load, 2, 4), None);
    }
}
