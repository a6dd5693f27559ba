//! x86-64 memory-access computation for single-stepped instructions: decode once (iced-x86),
//! then turn the memory operands into addresses from a snapshot of the registers taken just
//! before the instruction executes.
//!
//! Handled: base/index/scale/displacement, RIP-relative, fs/gs segment bases, implicit stack
//! accesses (push, pop, call, ret), string instructions (one iteration per single step; none
//! when a REP count is zero), read-modify-write (a load and a store), and VSIB gathers and
//! scatters lane by lane with their masks (AVX-512 opmask bits or AVX2 mask sign bits; masked
//! lanes are not accessed). Other conditional accesses (cmov loads, masked vector loads and
//! stores) are recorded whole, as QEMU and Valgrind record them.

use iced_x86::{
    Decoder, DecoderOptions, Instruction, InstructionInfoFactory, OpAccess, OpKind, Register,
    UsedMemory,
};

use crate::trace::{Access, AccessKind};

/// Register state of a stopped thread, as the instruction will see it.
pub trait Registers {
    /// A 64-bit general-purpose register (by its full register: RAX, ..., R15, RIP).
    fn gpr(&self, full: Register) -> Option<u64>;
    /// fs or gs base.
    fn segment_base(&self, seg: Register) -> u64;
    /// Bytes of a vector register (up to 64), for VSIB indices and AVX2 masks.
    fn vector(&self, reg: Register) -> Option<[u8; 64]>;
    /// An AVX-512 opmask register k0..k7.
    fn opmask(&self, reg: Register) -> Option<u64>;
}

/// An instruction decoded once, with what computing its accesses needs.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub instruction: Instruction,
    pub memory: Vec<UsedMemory>,
    /// Needs vector or opmask registers (VSIB, or a masked gather/scatter).
    pub needs_vector_state: bool,
}

/// Whether `code` is a trampoline that preserves the argument registers around a call, for
/// a CPU of AVX-512's width: every AVX-512 (EVEX) instruction moves one of the vector
/// registers that carry arguments (xmm/ymm/zmm 0-7) to or from memory, unmasked, with no
/// AVX-512 arithmetic, and the code calls out (the loader's `_dl_runtime_profile_avx512`
/// saves zmm0-7 on the stack, calls the auditor, copies them out and restores them).
pub fn only_saves_vector_registers(code: &[u8], ip: u64) -> bool {
    use iced_x86::{FlowControl, Mnemonic};
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    let (mut evex, mut calls) = (false, false);
    let argument = |r: Register| {
        [Register::XMM0, Register::YMM0, Register::ZMM0]
            .iter()
            .any(|&base| (base as u32..base as u32 + 8).contains(&(r as u32)))
    };
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        calls |= matches!(
            instruction.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        );
        if instruction.encoding() != iced_x86::EncodingKind::EVEX {
            continue;
        }
        evex = true;
        let moves = matches!(
            instruction.mnemonic(),
            Mnemonic::Vmovdqa64
                | Mnemonic::Vmovdqu64
                | Mnemonic::Vmovdqa32
                | Mnemonic::Vmovdqu32
                | Mnemonic::Vmovaps
                | Mnemonic::Vmovups
                | Mnemonic::Vmovapd
                | Mnemonic::Vmovupd
        );
        let shape = instruction.op_count() == 2
            && (0..2)
                .filter(|&k| instruction.op_kind(k) == OpKind::Memory)
                .count()
                == 1
            && (0..2).any(|k| {
                instruction.op_kind(k) == OpKind::Register && argument(instruction.op_register(k))
            });
        if !(moves && shape && instruction.op_mask() == Register::None) {
            return false;
        }
    }
    evex && calls
}

/// EVEX-encoded (AVX-512) instructions in a block of machine code, by a linear sweep from
/// its start (code that embeds data may be misread in places: a hint, not a proof).
///
/// Every EVEX instruction starts with the byte 0x62 (BOUND, its legacy meaning, does not
/// exist in 64-bit mode), so only the code around such bytes is decoded: a sweep starts
/// `RESYNC` bytes before the first one, runs on while the next lies within `RESYNC` bytes,
/// and counts what it decodes. x86 code falls back into the full sweep's instruction
/// boundaries within a few instructions, so the count is the full sweep's at a fraction of
/// its cost: on the 2004 ELF files of a Debian system, the same count on every one in 0.68 s
/// against 5.5 s (64 bytes back missed 12 of libmvec's 4320).
pub fn count_evex(code: &[u8], ip: u64) -> usize {
    const RESYNC: usize = 256;
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    let mut n = 0;
    // How far the sweeps have decoded.
    let mut swept = 0usize;
    for at in memchr::memchr_iter(0x62, code) {
        if at < swept {
            continue;
        }
        if at - swept > RESYNC {
            let start = at - RESYNC;
            // Both within the code: cannot fail.
            if decoder.set_position(start).is_err() {
                return n;
            }
            decoder.set_ip(ip + start as u64);
        }
        while decoder.can_decode() && decoder.position() <= at {
            decoder.decode_out(&mut instruction);
            if instruction.encoding() == iced_x86::EncodingKind::EVEX {
                n += 1;
            }
        }
        swept = decoder.position();
    }
    n
}

/// Where the machine code `code` of a function (at `ip`) can enter the ranges `copies` (the
/// inlined copies it holds): their starts, and the targets of its direct jumps that land
/// inside one from outside them, sorted. `None` where an indirect jump outside them could
/// land anywhere. (Calls and returns from outside a copy land outside it.)
pub fn entries_into(code: &[u8], ip: u64, copies: &[(u64, u64)]) -> Option<Vec<u64>> {
    use iced_x86::FlowControl;
    let inside = |a: u64| copies.iter().any(|&(s, e)| a >= s && a < e);
    let mut entries: Vec<u64> = copies.iter().map(|&(s, _)| s).collect();
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut i = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut i);
        if inside(i.ip()) {
            continue;
        }
        match i.flow_control() {
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                let target = i.near_branch_target();
                if inside(target) {
                    entries.push(target);
                }
            }
            FlowControl::IndirectBranch => return None,
            _ => {}
        }
    }
    entries.sort_unstable();
    entries.dedup();
    Some(entries)
}

/// Decodes the instruction at `ip` from `bytes` (up to 15 bytes are used).
pub fn decode(bytes: &[u8], ip: u64) -> Option<Decoded> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let instruction = decoder.decode();
    if instruction.is_invalid() {
        return None;
    }
    let mut factory = InstructionInfoFactory::new();
    let memory: Vec<UsedMemory> = factory
        .info(&instruction)
        .used_memory()
        .iter()
        .copied()
        .filter(|m| m.access() != OpAccess::NoMemAccess)
        .collect();
    let needs_vector_state = memory.iter().any(|m| m.vsib_size() != 0);
    Some(Decoded {
        instruction,
        memory,
        needs_vector_state,
    })
}

fn has_rep(i: &Instruction) -> bool {
    i.has_rep_prefix() || i.has_repe_prefix() || i.has_repne_prefix()
}

fn is_string_op(i: &Instruction) -> bool {
    use iced_x86::Mnemonic::*;
    matches!(
        i.mnemonic(),
        Movsb
            | Movsw
            | Movsd
            | Movsq
            | Stosb
            | Stosw
            | Stosd
            | Stosq
            | Lodsb
            | Lodsw
            | Lodsd
            | Lodsq
            | Cmpsb
            | Cmpsw
            | Cmpsd
            | Cmpsq
            | Scasb
            | Scasw
            | Scasd
            | Scasq
            | Insb
            | Insw
            | Insd
            | Outsb
            | Outsw
            | Outsd
    ) && i.op_count() <= 2
        && (0..i.op_count()).all(|k| {
            matches!(
                i.op_kind(k),
                OpKind::MemorySegSI
                    | OpKind::MemorySegESI
                    | OpKind::MemorySegRSI
                    | OpKind::MemoryESDI
                    | OpKind::MemoryESEDI
                    | OpKind::MemoryESRDI
                    | OpKind::Register
            )
        })
}

fn register_value(
    regs: &dyn Registers,
    reg: Register,
    element: usize,
    element_size: usize,
) -> Option<u64> {
    if reg.is_segment_register() {
        return Some(match reg {
            Register::FS | Register::GS => regs.segment_base(reg),
            _ => 0,
        });
    }
    if reg.is_vector_register() {
        let bytes = regs.vector(reg)?;
        let off = element.checked_mul(element_size)?;
        let lane = bytes.get(off..off + element_size)?;
        return Some(match element_size {
            4 => u32::from_le_bytes(lane.try_into().ok()?) as u64,
            8 => u64::from_le_bytes(lane.try_into().ok()?),
            _ => return None,
        });
    }
    let full = reg.full_register();
    let v = regs.gpr(full)?;
    Some(match reg.size() {
        8 => v,
        4 => v & 0xffff_ffff,
        2 => v & 0xffff,
        1 if reg.is_gpr8()
            && matches!(
                reg,
                Register::AH | Register::CH | Register::DH | Register::BH
            ) =>
        {
            (v >> 8) & 0xff
        }
        1 => v & 0xff,
        _ => v,
    })
}

/// Number of lanes a VSIB operand touches: the smaller of the index vector's and the data
/// vector's lane counts.
fn vsib_lanes(i: &Instruction, m: &UsedMemory) -> usize {
    let index_lanes = m.index().size() / m.vsib_size().max(1) as usize;
    let elem = m.memory_size().size().max(1);
    let data = if i.op0_kind() == OpKind::Memory {
        i.op1_register()
    } else {
        i.op0_register()
    };
    let data_lanes = if data.is_vector_register() {
        data.size() / elem
    } else {
        index_lanes
    };
    index_lanes.min(data_lanes).max(1)
}

/// Whether lane `k` of a gather/scatter is active.
fn lane_active(i: &Instruction, regs: &dyn Registers, k: usize, elem: usize) -> Option<bool> {
    if i.op_mask() != Register::None {
        let mask = regs.opmask(i.op_mask())?;
        return Some(mask >> k & 1 == 1);
    }
    // AVX2 gathers: the mask is the third operand, lane active if its element's top bit is set.
    if i.op_count() >= 3
        && i.op2_kind() == OpKind::Register
        && i.op2_register().is_vector_register()
    {
        let bytes = regs.vector(i.op2_register())?;
        let top = bytes.get((k + 1) * elem - 1)?;
        return Some(top & 0x80 != 0);
    }
    Some(true)
}

fn push(out: &mut Vec<Access>, ip: u64, addr: u64, size: usize, access: OpAccess) {
    let size = size.clamp(1, 255) as u8;
    let mut add = |kind| {
        out.push(Access {
            ip,
            addr,
            size,
            kind,
        })
    };
    match access {
        OpAccess::Read | OpAccess::CondRead => add(AccessKind::Load),
        OpAccess::Write | OpAccess::CondWrite => add(AccessKind::Store),
        OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
            add(AccessKind::Load);
            add(AccessKind::Store);
        }
        _ => {}
    }
}

/// Appends the accesses `d` makes when it executes with `regs`. Returns false when a register
/// value was unavailable (the accesses of that operand are then missing).
pub fn accesses(d: &Decoded, regs: &dyn Registers, out: &mut Vec<Access>) -> bool {
    let i = &d.instruction;
    let ip = i.ip();
    if is_string_op(i) && has_rep(i) {
        // A 32-bit address size counts in ECX.
        let ecx = [i.op0_kind(), i.op1_kind()]
            .iter()
            .any(|k| matches!(k, OpKind::MemoryESEDI | OpKind::MemorySegESI));
        let count = regs
            .gpr(Register::RCX)
            .map(|v| if ecx { v & 0xffff_ffff } else { v });
        if count == Some(0) {
            return true;
        }
    }
    let start = out.len();
    let mut complete = true;
    let mut value = |r: Register, e: usize, s: usize| register_value(regs, r, e, s);
    for m in &d.memory {
        if m.vsib_size() != 0 {
            let elem = m.memory_size().size().max(1);
            for k in 0..vsib_lanes(i, m) {
                match lane_active(i, regs, k, elem) {
                    Some(true) => {}
                    Some(false) => continue,
                    None => {
                        complete = false;
                        continue;
                    }
                }
                match m.virtual_address(k, &mut value) {
                    Some(a) => push(out, ip, a, elem, m.access()),
                    None => complete = false,
                }
            }
        } else {
            match m.virtual_address(0, &mut value) {
                Some(a) => push(out, ip, a, m.memory_size().size(), m.access()),
                None => complete = false,
            }
        }
    }
    // An instruction reads its operands before it writes results (movs, push [mem]): order
    // loads first, as the hardware, QEMU and Valgrind do. The sort is stable, so lanes and
    // read-modify-write pairs keep their order.
    out[start..].sort_by_key(|a| a.kind == AccessKind::Store);
    complete
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_function_enters_its_inlined_copies_at_their_starts_and_where_it_jumps_in() {
        let mut code = vec![
            0xeb, 0x05, // 0x1000: jmp 0x1007, into the copy
            0x90, 0x90, 0x90, // 0x1002: falls into the copy at 0x1005
            0x90, 0x90, 0x90, 0x90, 0x90, // 0x1005..0x100a: the copy
            0x75, 0xfc, // 0x100a: jne 0x1008, into the copy
            0xeb, 0xf2, // 0x100c: jmp 0x1000, not into it
        ];
        let copy = [(0x1005, 0x100a)];
        assert_eq!(
            entries_into(&code, 0x1000, &copy),
            Some(vec![0x1005, 0x1007, 0x1008])
        );
        // An indirect jump inside the copy is followed by stepping; outside, it could enter
        // the copy anywhere.
        code[0x1006 - 0x1000..0x1008 - 0x1000].copy_from_slice(&[0xff, 0xe0]);
        assert!(entries_into(&code, 0x1000, &copy).is_some());
        code.extend([0xff, 0xe0]); // 0x100e: jmp rax
        assert_eq!(entries_into(&code, 0x1000, &copy), None);
    }

    #[derive(Default)]
    struct Regs {
        gpr: HashMap<Register, u64>,
        fs: u64,
        vec: HashMap<Register, [u8; 64]>,
        k: HashMap<Register, u64>,
    }

    impl Registers for Regs {
        fn gpr(&self, r: Register) -> Option<u64> {
            self.gpr.get(&r).copied()
        }
        fn segment_base(&self, s: Register) -> u64 {
            if s == Register::FS {
                self.fs
            } else {
                0
            }
        }
        fn vector(&self, r: Register) -> Option<[u8; 64]> {
            self.vec.get(&r).copied()
        }
        fn opmask(&self, r: Register) -> Option<u64> {
            self.k.get(&r).copied()
        }
    }

    fn run(bytes: &[u8], regs: &Regs) -> Vec<(u64, u8, AccessKind)> {
        let d = decode(bytes, 0x401000).unwrap();
        let mut out = Vec::new();
        assert!(accesses(&d, regs, &mut out));
        out.iter().map(|a| (a.addr, a.size, a.kind)).collect()
    }

    fn regs(pairs: &[(Register, u64)]) -> Regs {
        Regs {
            gpr: pairs.iter().copied().collect(),
            ..Regs::default()
        }
    }

    #[test]
    fn base_index_scale_displacement() {
        // mov rax, [rdi + rsi*8 + 0x10]
        let r = regs(&[(Register::RDI, 0x1000), (Register::RSI, 3)]);
        assert_eq!(
            run(&[0x48, 0x8b, 0x44, 0xf7, 0x10], &r),
            vec![(0x1000 + 24 + 0x10, 8, AccessKind::Load)]
        );
        // mov [rax], ecx
        let r = regs(&[(Register::RAX, 0x2000)]);
        assert_eq!(run(&[0x89, 0x08], &r), vec![(0x2000, 4, AccessKind::Store)]);
        // lea rax, [rdi+8]: no access
        assert!(run(&[0x48, 0x8d, 0x47, 0x08], &regs(&[(Register::RDI, 1)])).is_empty());
    }

    #[test]
    fn read_modify_write_is_a_load_and_a_store() {
        // add dword [rax], 1
        let r = regs(&[(Register::RAX, 0x3000)]);
        assert_eq!(
            run(&[0x83, 0x00, 0x01], &r),
            vec![
                (0x3000, 4, AccessKind::Load),
                (0x3000, 4, AccessKind::Store)
            ]
        );
    }

    #[test]
    fn rip_relative_and_fs() {
        // mov rax, [rip + 0x10] at 0x401000, 7 bytes long
        let r = regs(&[]);
        assert_eq!(
            run(&[0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00], &r),
            vec![(0x401000 + 7 + 0x10, 8, AccessKind::Load)]
        );
        // mov rax, fs:[0x28]
        let mut r = regs(&[]);
        r.fs = 0x7f00_0000;
        assert_eq!(
            run(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00], &r),
            vec![(0x7f00_0028, 8, AccessKind::Load)]
        );
    }

    #[test]
    fn stack_push_call_ret() {
        let r = regs(&[(Register::RSP, 0x8000)]);
        // push rbx
        assert_eq!(run(&[0x53], &r), vec![(0x8000 - 8, 8, AccessKind::Store)]);
        // ret
        assert_eq!(run(&[0xc3], &r), vec![(0x8000, 8, AccessKind::Load)]);
    }

    #[test]
    fn rep_string_with_zero_count_does_nothing() {
        // rep movsb
        let r = regs(&[
            (Register::RSI, 0x100),
            (Register::RDI, 0x200),
            (Register::RCX, 0),
        ]);
        assert!(run(&[0xf3, 0xa4], &r).is_empty());
        let r = regs(&[
            (Register::RSI, 0x100),
            (Register::RDI, 0x200),
            (Register::RCX, 5),
        ]);
        assert_eq!(
            run(&[0xf3, 0xa4], &r),
            vec![(0x100, 1, AccessKind::Load), (0x200, 1, AccessKind::Store)]
        );
    }

    fn vec_with_dwords(vals: &[u32]) -> [u8; 64] {
        let mut b = [0u8; 64];
        for (i, v) in vals.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// A trampoline that keeps the argument registers across a call (as the loader's
    /// `_dl_runtime_profile_avx512`) only moves them; AVX-512 arithmetic, another register,
    /// or no call makes code that runs AVX-512 for itself.
    #[test]
    fn register_saving_trampolines_are_told_from_avx512_code() {
        let save = [0x62, 0xf1, 0xfd, 0x48, 0x7f, 0x44, 0x24, 0x01]; // vmovdqa64 [rsp+0x40], zmm0
        let copy = [0x62, 0xf1, 0xfd, 0x08, 0x7f, 0x49, 0x01]; // vmovdqa64 [rcx+0x10], xmm1
        let call = [0xe8, 0x00, 0x00, 0x00, 0x00];
        let restore = [0x62, 0xf1, 0xfd, 0x48, 0x6f, 0x44, 0x24, 0x01]; // vmovdqa64 zmm0, [rsp+0x40]
        let ret = [0xc3];
        let add = [0x62, 0xf1, 0xfd, 0x48, 0xd4, 0xc1]; // vpaddq zmm0, zmm0, zmm1
        let save9 = [0x62, 0x71, 0xfd, 0x48, 0x7f, 0x4c, 0x24, 0x01]; // vmovdqa64 [rsp+0x40], zmm9
        let code = |parts: &[&[u8]]| parts.concat();
        let trampoline = code(&[&save, &copy, &call, &restore, &ret]);
        assert!(only_saves_vector_registers(&trampoline, 0x1000));
        assert_eq!(count_evex(&trampoline, 0x1000), 3);
        for other in [
            code(&[&save, &call, &add, &restore, &ret]),
            code(&[&save9, &call, &restore, &ret]),
            code(&[&save, &restore, &ret]),
            code(&[&call, &ret]),
        ] {
            assert!(!only_saves_vector_registers(&other, 0x1000), "{other:x?}");
        }
    }

    #[test]
    fn evex_instructions_are_counted() {
        // vpxord zmm0, zmm0, zmm0; vpxor xmm0, xmm0, xmm0 (VEX); add rax, rbx; ret
        let code = [
            0x62, 0xf1, 0x7d, 0x48, 0xef, 0xc0, 0xc5, 0xf9, 0xef, 0xc0, 0x48, 0x01, 0xd8, 0xc3,
        ];
        assert_eq!(count_evex(&code, 0x1000), 1);
        assert_eq!(count_evex(&code[6..], 0x1000), 0);
    }

    /// The whole linear sweep, which `count_evex` stands for.
    fn count_evex_everywhere(code: &[u8], ip: u64) -> usize {
        let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
        let mut instruction = Instruction::default();
        let mut n = 0;
        while decoder.can_decode() {
            decoder.decode_out(&mut instruction);
            n += usize::from(instruction.encoding() == iced_x86::EncodingKind::EVEX);
        }
        n
    }

    #[test]
    fn evex_count_around_0x62_bytes_is_the_full_sweeps() {
        // Long code between EVEX instructions (up to 416 bytes: decoded again from 256
        // bytes before the next), an EVEX instruction right at the start and end, 0x62 bytes
        // inside other instructions' immediates (mov eax, 0x62626262), and runs of EVEX
        // instructions close together (one sweep).
        let evex = [0x62, 0xf1, 0x7d, 0x48, 0xef, 0xc0];
        let imm = [0xb8, 0x62, 0x62, 0x62, 0x62];
        let filler = [0x48, 0x01, 0xd8, 0xc5, 0xf9, 0xef, 0xc0, 0x90];
        let mut code = evex.to_vec();
        for k in 0..200 {
            for _ in 0..k % 53 {
                code.extend_from_slice(&filler);
            }
            if k % 3 == 0 {
                code.extend_from_slice(&imm);
            }
            for _ in 0..1 + k % 4 {
                code.extend_from_slice(&evex);
            }
        }
        let expected = 1 + (0..200).map(|k| 1 + k % 4).sum::<usize>();
        assert_eq!(count_evex_everywhere(&code, 0x1000), expected);
        assert_eq!(count_evex(&code, 0x1000), expected);
        // Real code: this test program's own, and the C library's.
        for path in [
            std::env::current_exe().unwrap(),
            "/lib/x86_64-linux-gnu/libc.so.6".into(),
        ] {
            use object::{Object, ObjectSection, SectionKind};
            let data = std::fs::read(&path).unwrap();
            let file = object::File::parse(&*data).unwrap();
            for s in file.sections().filter(|s| s.kind() == SectionKind::Text) {
                let (addr, code) = (s.address(), s.data().unwrap());
                assert_eq!(
                    count_evex(code, addr),
                    count_evex_everywhere(code, addr),
                    "{} {}",
                    path.display(),
                    s.name().unwrap_or("?")
                );
            }
        }
    }

    #[test]
    fn avx512_gather_lane_by_lane_with_mask() {
        // vgatherdpd zmm1{k1}, [rax + ymm2*8]
        let d = decode(&[0x62, 0xf2, 0xfd, 0x49, 0x92, 0x0c, 0xd0], 0x401000).unwrap();
        assert!(d.needs_vector_state);
        let mut r = regs(&[(Register::RAX, 0x10000)]);
        r.vec
            .insert(Register::YMM2, vec_with_dwords(&[0, 5, 2, 7, 1, 9, 3, 4]));
        r.k.insert(Register::K1, 0b1010_1101);
        let mut out = Vec::new();
        assert!(accesses(&d, &r, &mut out));
        let addrs: Vec<u64> = out.iter().map(|a| a.addr).collect();
        // Lanes 0, 2, 3, 5, 7 are active.
        assert_eq!(
            addrs,
            vec![
                0x10000,
                0x10000 + 16,
                0x10000 + 56,
                0x10000 + 72,
                0x10000 + 32
            ]
        );
        assert!(out
            .iter()
            .all(|a| a.size == 8 && a.kind == AccessKind::Load));
    }

    #[test]
    fn avx2_gather_uses_mask_sign_bits() {
        // vgatherdpd ymm1, [rax + xmm2*8], ymm3
        let d = decode(&[0xc4, 0xe2, 0xe5, 0x92, 0x0c, 0xd0], 0x401000).unwrap();
        let mut r = regs(&[(Register::RAX, 0x20000)]);
        r.vec.insert(Register::XMM2, vec_with_dwords(&[1, 2, 3, 4]));
        let mut mask = [0u8; 64];
        mask[7] = 0x80; // lane 0
        mask[31] = 0x80; // lane 3
        r.vec.insert(Register::YMM3, mask);
        let mut out = Vec::new();
        assert!(accesses(&d, &r, &mut out));
        let addrs: Vec<u64> = out.iter().map(|a| a.addr).collect();
        assert_eq!(addrs, vec![0x20000 + 8, 0x20000 + 32]);
    }

    #[test]
    fn avx512_scatter_records_stores() {
        // vscatterdpd [rax + ymm2*8]{k1}, zmm1
        let d = decode(&[0x62, 0xf2, 0xfd, 0x49, 0xa2, 0x0c, 0xd0], 0x401000).unwrap();
        let mut r = regs(&[(Register::RAX, 0)]);
        r.vec
            .insert(Register::YMM2, vec_with_dwords(&[1, 2, 3, 4, 5, 6, 7, 8]));
        r.k.insert(Register::K1, 0xff);
        let mut out = Vec::new();
        assert!(accesses(&d, &r, &mut out));
        assert_eq!(out.len(), 8);
        assert!(out.iter().all(|a| a.kind == AccessKind::Store));
        assert_eq!(out[7].addr, 64);
    }
}
