//! Finding and checking the program to capture before anything starts.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::CaptureError;
use crate::symbols::{search_path, ElfImage};

/// A program that exists, is executable and is an x86-64 ELF.
#[derive(Debug, Clone)]
pub struct Program {
    /// Absolute path, symbolic links resolved (the file the mappings name).
    pub path: PathBuf,
    /// The path to run it by, as a shell would: as given, or as found in PATH, with its
    /// symbolic links. A program may tell from it what to be: `xzcat` is a link to `xz`,
    /// which decompresses when called so, and a Python virtual environment's `bin/python`
    /// (a link to the system's) finds the environment's packages next to it.
    pub run: PathBuf,
    /// Its `argv[0]`: the name as given (`xzcat`), as a shell passes it.
    pub argv0: std::ffi::OsString,
    pub image: ElfImage,
}

/// Resolves `name` like a shell does (a path, or a name looked up in PATH) and checks it.
pub fn resolve(name: &Path) -> Result<Program, CaptureError> {
    let path = if name.components().count() > 1 || name.is_absolute() {
        name.to_path_buf()
    } else if name.exists() && !name.is_dir() {
        // A bare name in the current directory: shells need ./name, but be helpful.
        PathBuf::from(".").join(name)
    } else {
        search_path(name).ok_or_else(|| CaptureError::ProgramNotFound {
            program: name.to_path_buf(),
            hint: "not found in the current directory or in PATH".into(),
        })?
    };
    let meta = std::fs::metadata(&path).map_err(|e| CaptureError::ProgramNotFound {
        program: path.clone(),
        hint: e.to_string(),
    })?;
    if meta.is_dir() {
        return Err(CaptureError::NotExecutable {
            program: path,
            why: "it is a directory".into(),
        });
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(CaptureError::NotExecutable {
            program: path.clone(),
            why: format!("it has no execute permission (chmod +x {})", path.display()),
        });
    }
    let image = ElfImage::open(&path).map_err(CaptureError::Elf)?;
    let run = path.clone();
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    Ok(Program {
        path,
        run,
        argv0: name.as_os_str().to_owned(),
        image,
    })
}

/// Looks for an executable in PATH (for qemu-x86_64).
pub fn which(name: &str) -> Option<PathBuf> {
    search_path(Path::new(name)).filter(|p| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// AVX-512 (EVEX-encoded) instructions in a program's own code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvexCount {
    /// Those its code may run whatever the CPU.
    pub unconditional: usize,
    /// Those in functions its IFUNCs choose among by CPUID ([`ifunc_variants`]): glibc's
    /// AVX-512 string functions in a static program, which a CPU without AVX-512 (QEMU's)
    /// never gets.
    pub in_ifunc_variants: usize,
    /// Those in functions that only move the argument vector registers to and from memory
    /// around a call: the loader's trampolines (`_dl_runtime_profile_avx512`), which it
    /// installs by CPUID.
    pub in_register_saves: usize,
}

impl EvexCount {
    pub fn total(&self) -> usize {
        self.unconditional + self.in_ifunc_variants + self.in_register_saves
    }
}

/// AVX-512 (EVEX-encoded) instructions in the executable sections of `path` (the program
/// itself, not the libraries it loads: those pick their AVX-512 code at run time from the
/// CPU's features, which QEMU reports without AVX-512; so do the program's own IFUNCs).
pub fn evex_instructions(path: &Path) -> EvexCount {
    use object::{Object, ObjectSection, SectionKind};
    let mut count = EvexCount::default();
    let Ok(data) = std::fs::read(path) else {
        return count;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return count;
    };
    let functions = crate::symbols::unwind_ranges(&*data);
    let variants = ifunc_variants(&data, &functions);
    for s in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let (addr, Ok(code)) = (s.address(), s.data()) else {
            continue;
        };
        let end = addr + code.len() as u64;
        let bytes = |lo: u64, hi: u64| &code[(lo - addr) as usize..(hi - addr) as usize];
        // Sweeps restart at function bounds: each function is counted on its own, the code
        // between functions as one piece.
        let mut at = addr;
        let rest = |lo: u64, hi: u64, count: &mut EvexCount| {
            if hi > lo {
                count.unconditional += super::x86::count_evex(bytes(lo, hi), lo);
            }
        };
        for &(lo, hi) in &functions {
            // Functions of other sections, empty ones, and overlaps are left to the sweeps.
            if lo < at || lo >= hi || hi > end {
                continue;
            }
            rest(at, lo, &mut count);
            let n = super::x86::count_evex(bytes(lo, hi), lo);
            if n > 0 {
                if variants.binary_search(&(lo, hi)).is_ok() {
                    count.in_ifunc_variants += n;
                } else if super::x86::only_saves_vector_registers(bytes(lo, hi), lo) {
                    count.in_register_saves += n;
                } else {
                    count.unconditional += n;
                }
            }
            at = hi;
        }
        rest(at, end, &mut count);
    }
    count
}

/// The code ranges (start, end) of the functions an ELF file's IFUNC resolvers choose among
/// at run time, by CPUID (glibc's string functions in a static program: `__memcpy_avx512_*`,
/// `__strlen_evex`; GCC's `target_clones`), sorted: each resolver an IRELATIVE relocation
/// names is read for the code addresses it loads (`lea rax, [rip + variant]`), and each such
/// address stands for the function of `functions` (the file's `.eh_frame` ranges, sorted)
/// that holds it.
pub fn ifunc_variants(data: &[u8], functions: &[(u64, u64)]) -> Vec<(u64, u64)> {
    use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic};
    use object::read::elf::{ElfFile64, FileHeader, Rela, SectionHeader};
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let Ok(sections) = elf.elf_header().sections(endian, data) else {
        return Vec::new();
    };
    let mut resolvers = Vec::new();
    for header in sections.iter() {
        let Ok(Some((relas, _))) = header.rela(endian, data) else {
            continue;
        };
        resolvers.extend(
            relas
                .iter()
                .filter(|r| r.r_type(endian, false) == object::elf::R_X86_64_IRELATIVE)
                .map(|r| r.r_addend(endian) as u64),
        );
    }
    if resolvers.is_empty() {
        return Vec::new();
    }
    resolvers.sort_unstable();
    resolvers.dedup();
    let holding = |at: u64| crate::symbols::range_holding(functions, at);
    let mut variants = Vec::new();
    let mut instruction = Instruction::default();
    for &resolver in &resolvers {
        let Some((lo, hi)) = holding(resolver) else {
            continue;
        };
        let Some(code) = crate::symbols::section_bytes(&elf, lo, hi) else {
            continue;
        };
        let mut decoder = Decoder::with_ip(64, code, lo, DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut instruction);
            if instruction.mnemonic() == Mnemonic::Lea && instruction.is_ip_rel_memory_operand() {
                let target = instruction.ip_rel_memory_address();
                if let Some(f) = holding(target).filter(|&f| f != (lo, hi)) {
                    variants.push(f);
                }
            }
        }
    }
    variants.sort_unstable();
    variants.dedup();
    variants
}

/// Whether this CPU runs AVX-512 (avx512f in /proc/cpuinfo).
pub fn host_has_avx512() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|t| {
        t.lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|f| f == "avx512f"))
    })
}
