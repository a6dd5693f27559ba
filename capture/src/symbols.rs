//! Symbolization: ELF facts for capture (entry point, function ranges for `--roi`) and
//! instruction address to function and file:line for reports, through the trace's mappings.
//!
//! A runtime address inside a file-backed mapping becomes an ELF virtual address by way of
//! the file offset and the PT_LOAD segment holding it, which handles position-independent
//! executables and shared libraries at any load bias. DWARF line tables (addr2line) give
//! file:line; the symbol table gives the containing function.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::trace::{JitSymbol, Mapping};

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("cannot read {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path} is not an ELF file ({why})")]
    NotElf { path: PathBuf, why: String },
    #[error("{path} is a {arch} ELF file; mgbench captures x86-64 programs only")]
    WrongArch { path: PathBuf, arch: String },
    #[error("{name:?} is not in {path} but in a shared library it loads (the program imports it)")]
    InLibrary { name: String, path: PathBuf },
    #[error("no function named {name:?} in {path}{}", suggestions(.close))]
    UnknownFunction {
        name: String,
        path: PathBuf,
        close: Vec<String>,
    },
}

fn suggestions(close: &[String]) -> String {
    if close.is_empty() {
        " (and no similar names; is the program stripped?)".to_string()
    } else {
        format!("; close matches: {}", close.join(", "))
    }
}

/// A function from the symbol table, at its link-time address.
#[derive(Debug, Clone)]
pub struct FunctionSymbol {
    /// Name as stored in the symbol table.
    pub raw_name: String,
    pub start: u64,
    pub size: u64,
    /// Demangled name, made when first asked for: only `--roi` reads the names, and
    /// demangling the 160,000 C++ symbol-table entries of a program such as `node` takes most of
    /// a second.
    demangled: OnceLock<String>,
}

impl FunctionSymbol {
    pub fn new(raw_name: String, start: u64, size: u64) -> FunctionSymbol {
        FunctionSymbol {
            raw_name,
            start,
            size,
            demangled: OnceLock::new(),
        }
    }

    /// Demangled name.
    pub fn name(&self) -> &str {
        self.demangled.get_or_init(|| demangle(&self.raw_name))
    }
}

/// The same symbol, whether or not either has been asked for its name yet.
impl PartialEq for FunctionSymbol {
    fn eq(&self, other: &FunctionSymbol) -> bool {
        (self.start, self.size, &self.raw_name) == (other.start, other.size, &other.raw_name)
    }
}

impl Eq for FunctionSymbol {}

/// What capture needs to know about an executable.
#[derive(Debug, Clone)]
pub struct ElfImage {
    pub path: PathBuf,
    pub entry: u64,
    /// Position-independent (ET_DYN): loaded at a bias chosen at run time.
    pub is_pie: bool,
    /// Link address of the segment that starts at file offset 0 (where the loader maps the
    /// file's first page); runtime start of that mapping minus this is the load bias.
    pub load_base: u64,
    pub functions: Vec<FunctionSymbol>,
    /// Names it imports from shared libraries (undefined dynamic symbols).
    pub imports: Vec<String>,
    /// Its dynamic loader (PT_INTERP), for a dynamically linked program.
    pub interp: Option<PathBuf>,
    /// The file that holds its DWARF (itself, or its separate debug file), where
    /// [`ElfImage::find_code`] finds the copies of a function that the compiler inlined.
    pub dwarf: Option<PathBuf>,
    /// A Go program: it has the build information, function table or build ID note of Go's
    /// linker.
    pub go: bool,
}

/// Where a function's code lies in an executable, at link-time addresses (`--roi`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionCode {
    /// Out-of-line copies, entered by calls: the function and the compiler's clones of it
    /// (`.constprop.N`, `.isra.N`, `.part.N`).
    pub entries: Vec<(u64, u64)>,
    /// Parts split off an out-of-line copy (`.cold`), reached by jumps from it.
    pub parts: Vec<(u64, u64)>,
    /// Copies the compiler inlined into callers (from DWARF's inlined subroutines; nested
    /// inlining included), entered without a call.
    pub inlined: Vec<InlinedCopy>,
    /// The OpenMP regions clang outlined from it (see [`is_clang_outlined`]), by name: their
    /// code is in `entries`.
    pub outlined: Vec<String>,
}

/// A copy of a function inlined into another function's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinedCopy {
    pub start: u64,
    pub end: u64,
    /// The function whose symbol holds the copy (`None` where no symbol does).
    pub caller: Option<FunctionSymbol>,
}

impl FunctionCode {
    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.parts.is_empty() && self.inlined.is_empty()
    }
}

/// Clang's outlined OpenMP regions: the body of a parallel region (`.omp_outlined.`,
/// `.omp_outlined..12`, with `-g` also `.omp_outlined._debug__`) or of a task
/// (`.omp_task_entry.`). Unlike GCC's `spmv._omp_fn.0` (see [`clone_base`]) their names do
/// not say which function they came from: the function hands their address to the OpenMP
/// runtime (`__kmpc_fork_call`), whose threads call them. Later clang releases put the
/// function's name in front (`compute.omp_outlined`, `compute.omp_outlined_debug__`); they are
/// taken the same way, by reference (Debian 12's clang 14 to 16 name them as above).
pub fn is_clang_outlined(raw: &str) -> bool {
    raw.starts_with(".omp_task_entry.")
        || raw
            .split('.')
            .skip(1)
            .any(|word| word.starts_with("omp_outlined"))
}

/// Addresses that x86-64 code at link address `start` refers to, by a byte scan: the
/// targets of RIP-relative `lea r64` (how position-independent code takes a function's
/// address), of `call rel32`, and 32-bit immediates (`mov r32, imm32`, as non-PIE code
/// takes one). A scan, not a decode: bytes inside other instructions can look like these,
/// so a target is only a candidate, to be matched against known function starts.
fn code_references(code: &[u8], start: u64, out: &mut Vec<u64>) {
    let at = |i: usize| start.wrapping_add(i as u64);
    let rel32 = |i: usize| {
        code.get(i..i + 4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    for i in 0..code.len() {
        match code[i] {
            // REX.W (with or without REX.R) lea r64, [rip + disp32]: ModRM mod 00, r/m 101.
            0x48 | 0x4c
                if code.get(i + 1) == Some(&0x8d)
                    && code.get(i + 2).is_some_and(|m| m & 0xc7 == 0x05) =>
            {
                if let Some(d) = rel32(i + 3) {
                    out.push(at(i + 7).wrapping_add(d as i64 as u64));
                }
            }
            0xe8 => {
                if let Some(d) = rel32(i + 1) {
                    out.push(at(i + 5).wrapping_add(d as i64 as u64));
                }
            }
            0xb8..=0xbf => {
                if let Some(v) = rel32(i + 1) {
                    out.push(u64::from(v as u32));
                }
            }
            _ => {}
        }
    }
}

/// A symbol's readable name: Rust and C++ names demangled, anything else as it is, without a
/// symbol version (`pthread_mutex_lock@@GLIBC_2.2.5` in a debug file's table). Only names
/// with a mangling prefix (`_Z`, `_R`) are demangled: a demangler also reads bare type codes,
/// so a C function named `h` or `i` would come out as "unsigned char" or "int".
///
/// Fortran module procedures are named as gdb names them: gfortran's `__kernels_MOD_spmv`
/// and flang's `_QMkernelsPspmv` are `kernels::spmv`, flang's external `_QPspmv` is `spmv`.
pub fn demangle(name: &str) -> String {
    let name = match name.find('@') {
        Some(at) if at > 0 => &name[..at],
        _ => name,
    };
    let (base, _) = clone_base(name);
    if let Some(f) = fortran_name(base) {
        return f + &name[base.len()..];
    }
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return name.to_string();
    }
    addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
}

/// A Fortran compiler's name for a module procedure or (flang) an external procedure, as
/// `module::procedure` or `procedure`.
fn fortran_name(name: &str) -> Option<String> {
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if let Some(rest) = name.strip_prefix("__") {
        // gfortran: __MODULE_MOD_PROCEDURE (module names may hold underscores; the first
        // "_MOD_" ends it, as gfortran's own demangling in gdb takes it).
        let (module, proc) = rest.split_once("_MOD_")?;
        return (ident(module) && ident(proc)).then(|| format!("{module}::{proc}"));
    }
    // flang: _QM<module>P<procedure>, _QP<procedure> (names are lower case there, so the
    // upper-case letters delimit).
    let rest = name.strip_prefix("_Q")?;
    let lower = |s: &str| {
        ident(s)
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    if let Some(p) = rest.strip_prefix('P') {
        return lower(p).then(|| p.to_string());
    }
    let (module, proc) = rest.strip_prefix('M')?.split_once('P')?;
    (lower(module) && lower(proc)).then(|| format!("{module}::{proc}"))
}

/// GCC's and LLVM's suffixes for copies of a function (`gather.constprop.0`,
/// `gather.isra.0.cold`, `f.llvm.123`), and GCC's for the outlined body of an OpenMP
/// parallel region (`spmv._omp_fn.0`, which every thread of the team calls): the name
/// without them, and whether the copy is a split-off cold part (reached by jumps, not
/// calls).
pub fn clone_base(raw: &str) -> (&str, bool) {
    const CLONES: [&str; 11] = [
        "constprop",
        "isra",
        "part",
        "cold",
        "lto_priv",
        "localalias",
        "llvm",
        "clone",
        "specialized",
        "_omp_fn",
        "_omp_cpyfn",
    ];
    let mut base = raw;
    for (i, _) in raw.match_indices('.') {
        let word = raw[i + 1..].split('.').next().unwrap_or("");
        if i > 0 && CLONES.contains(&word) {
            base = &raw[..i];
            break;
        }
    }
    let cold = raw[base.len()..].split('.').any(|w| w == "cold");
    (base, cold)
}

impl ElfImage {
    /// Reads an x86-64 ELF executable; errors say plainly when it is not one.
    pub fn open(path: &Path) -> Result<ElfImage, SymbolError> {
        let data = std::fs::read(path).map_err(|cause| SymbolError::Read {
            path: path.to_path_buf(),
            cause,
        })?;
        if !data.starts_with(b"\x7fELF") {
            let why = if data.starts_with(b"#!") {
                let first = data.split(|&b| b == b'\n').next().unwrap_or_default();
                let line = String::from_utf8_lossy(&first[..first.len().min(160)]);
                format!(
                    "it is a script ({}): give its interpreter and the script, e.g. `-- /bin/sh SCRIPT`; a script that starts another program with exec (a launcher, a version manager's shim) leaves QEMU there, so give that program itself",
                    line.trim()
                )
            } else {
                "no ELF magic".to_string()
            };
            return Err(SymbolError::NotElf {
                path: path.to_path_buf(),
                why,
            });
        }
        let file = object::File::parse(&*data).map_err(|e| SymbolError::NotElf {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        if file.architecture() != object::Architecture::X86_64 {
            return Err(SymbolError::WrongArch {
                path: path.to_path_buf(),
                arch: format!("{:?}", file.architecture()),
            });
        }
        // A stripped program's full symbol table, and the DWARF of a program built without
        // -g or stripped, may be in a separate debug file.
        let stripped = file.symbols().next().is_none();
        let has_dwarf = file.section_by_name(".debug_info").is_some();
        let debug_path = (stripped || !has_dwarf)
            .then(|| debug_file(path, &file))
            .flatten();
        // (Read as needed: a debug file may be far larger than the symbol table wanted here.)
        let debug_cache = debug_path
            .as_ref()
            .filter(|_| stripped)
            .and_then(|d| std::fs::File::open(d).ok())
            .map(ReadCache::new);
        let debug = debug_cache
            .as_ref()
            .and_then(|d| object::File::parse(d).ok());
        let mut functions: Vec<FunctionSymbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter_map(|s| function_symbol(&s))
            .collect();
        if let Some(d) = &debug {
            functions.extend(d.symbols().filter_map(|s| function_symbol(&s)));
        }
        if stripped && debug.is_none() {
            // A stripped Go program names its functions in its own table (see `gosym`).
            let go = crate::gosym::GoFunctions::of(&file);
            functions.extend(go.iter().flat_map(|g| g.iter()).map(|(start, end, name)| {
                FunctionSymbol::new(name.to_string(), start, end - start)
            }));
            // The rest by their start, as readers see them named (see
            // `SourceLocation::function_or_object`), so that `--roi sub_4415e0` takes one.
            let named: std::collections::HashSet<u64> = functions.iter().map(|f| f.start).collect();
            functions.extend(
                unwind_ranges(&*data)
                    .into_iter()
                    .filter(|(start, _)| !named.contains(start))
                    .map(|(start, end)| {
                        FunctionSymbol::new(unwound_name(start), start, end - start)
                    }),
            );
        }
        functions.sort_by(|a, b| (a.start, &a.raw_name).cmp(&(b.start, &b.raw_name)));
        functions.dedup_by(|a, b| a.start == b.start && a.raw_name == b.raw_name);
        let mut imports: Vec<String> = file
            .dynamic_symbols()
            .filter(|s| s.is_undefined())
            .filter_map(|s| s.name().ok().map(demangle))
            .filter(|n| !n.is_empty())
            .collect();
        imports.sort_unstable();
        imports.dedup();
        let load_base = file
            .segments()
            .filter(|s| s.file_range().0 == 0)
            .map(|s| s.address())
            .min()
            .unwrap_or(0);
        Ok(ElfImage {
            path: path.to_path_buf(),
            load_base,
            entry: file.entry(),
            is_pie: file.kind() == object::ObjectKind::Dynamic,
            functions,
            imports,
            interp: file
                .section_by_name(".interp")
                .and_then(|s| s.data().ok())
                .map(|d| d.split(|&b| b == 0).next().unwrap_or_default())
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(String::from_utf8_lossy(d).into_owned())),
            dwarf: if has_dwarf {
                Some(path.to_path_buf())
            } else {
                debug_path
            },
            go: [".go.buildinfo", ".gopclntab", ".note.go.buildid"]
                .iter()
                .any(|s| file.section_by_name(s).is_some()),
        })
    }

    /// Functions named `name`: demangled or raw, or as a C++ programmer names one, as gdb
    /// takes it (see [`call_names`]: `k::gather` is every `k::gather<T>(...)`), with the
    /// compiler's clones of them (see [`clone_base`]).
    pub fn find_function(&self, name: &str) -> Result<Vec<&FunctionSymbol>, SymbolError> {
        let mut hits: Vec<&FunctionSymbol> = self
            .functions
            .iter()
            .filter(|f| answers_to(f, name))
            .collect();
        if hits.is_empty() {
            // A Fortran external procedure: gfortran appends an underscore (`spmv_`), and
            // gdb takes the name without it.
            hits = self
                .functions
                .iter()
                .filter(|f| f.raw_name.strip_suffix('_') == Some(name))
                .collect();
        }
        if !hits.is_empty() {
            return Ok(hits);
        }
        Err(self.unknown(name))
    }

    /// All code of the function `name`, as gdb finds it for a breakpoint: its out-of-line
    /// copies by symbol (as [`ElfImage::find_function`]), and the copies the compiler
    /// inlined into other functions by DWARF, where the program has DWARF (`-g`) or a
    /// separate debug file. A `static` function that `-O2` inlined everywhere has no symbol
    /// at all, only those.
    pub fn find_code(&self, name: &str) -> Result<FunctionCode, SymbolError> {
        let mut code = FunctionCode::default();
        if let Ok(functions) = self.find_function(name) {
            for f in functions {
                let range = (f.start, f.start + f.size.max(1));
                if clone_base(&f.raw_name).1 {
                    code.parts.push(range);
                } else {
                    code.entries.push(range);
                }
            }
        }
        if let Some(dwarf) = &self.dwarf {
            for (start, end) in inlined_copies(dwarf, name) {
                // A copy inside an out-of-line copy of the function itself is its code already.
                let own = |r: &(u64, u64)| start >= r.0 && end <= r.1;
                if code.entries.iter().chain(&code.parts).any(own) {
                    continue;
                }
                code.inlined.push(InlinedCopy {
                    start,
                    end,
                    caller: self.function_at(start).cloned(),
                });
            }
        }
        code.entries.sort_unstable();
        code.entries.dedup();
        code.parts.sort_unstable();
        code.parts.dedup();
        code.inlined.sort_by_key(|c| (c.start, c.end));
        code.inlined.dedup_by_key(|c| (c.start, c.end));
        if code.is_empty() {
            return Err(self.unknown(name));
        }
        self.add_outlined_regions(&mut code);
        Ok(code)
    }

    /// Adds to `code` the OpenMP regions clang outlined from it, found where its code (and
    /// theirs: regions nest, and a region calls its `_debug__` body) refers to their starts.
    /// Every thread of the team runs them, the workers outside the function's own call: a
    /// `--roi` of the function held the calling thread's share alone.
    fn add_outlined_regions(&self, code: &mut FunctionCode) {
        let regions: HashMap<u64, &FunctionSymbol> = self
            .functions
            .iter()
            .filter(|f| is_clang_outlined(&f.raw_name))
            .map(|f| (f.start, f))
            .collect();
        if regions.is_empty() {
            return;
        }
        let Ok(data) = std::fs::read(&self.path) else {
            return;
        };
        let Ok(file) = object::File::parse(&*data) else {
            return;
        };
        let bytes = |(s, e): (u64, u64)| section_bytes(&file, s, e);
        let mut todo: Vec<(u64, u64)> = code
            .entries
            .iter()
            .chain(&code.parts)
            .copied()
            .chain(code.inlined.iter().map(|c| (c.start, c.end)))
            .collect();
        let mut refs = Vec::new();
        while let Some(range) = todo.pop() {
            refs.clear();
            if let Some(b) = bytes(range) {
                code_references(b, range.0, &mut refs);
            }
            for r in &refs {
                let Some(f) = regions.get(r) else { continue };
                let region = (f.start, f.start + f.size.max(1));
                if code.entries.contains(&region) {
                    continue;
                }
                code.entries.push(region);
                code.outlined.push(f.raw_name.clone());
                todo.push(region);
            }
        }
        code.entries.sort_unstable();
    }

    /// The function whose symbol holds link-time address `addr` (the narrowest).
    pub fn function_at(&self, addr: u64) -> Option<&FunctionSymbol> {
        self.functions
            .iter()
            .filter(|f| addr >= f.start && addr < f.start + f.size)
            .min_by_key(|f| f.size)
    }

    fn unknown(&self, name: &str) -> SymbolError {
        if self
            .imports
            .iter()
            .any(|i| i == name || call_names(i).any(|n| n == name))
        {
            return SymbolError::InLibrary {
                name: name.to_string(),
                path: self.path.clone(),
            };
        }
        SymbolError::UnknownFunction {
            name: name.to_string(),
            path: self.path.clone(),
            close: close_matches(name, self.functions.iter().map(|f| f.name())),
        }
    }
}

/// Whether function symbol `f` answers to `name` (see [`ElfImage::find_function`]).
fn answers_to(f: &FunctionSymbol, name: &str) -> bool {
    if f.raw_name == name || f.name() == name {
        return true;
    }
    let base = clone_base(&f.raw_name).0;
    if base == name {
        return true;
    }
    let demangled = if base.len() == f.raw_name.len() {
        Cow::Borrowed(f.name())
    } else {
        Cow::Owned(demangle(base))
    };
    demangled == name || call_names(&demangled).any(|n| n == name)
}

/// The address ranges of every inlined copy of function `name` in the DWARF of the file at
/// `path` (empty where it cannot be read). A copy's `DW_AT_abstract_origin` leads to the
/// function's abstract entry, which is named there or through its own origin or
/// specification (a C++ method's declaration in its class); the name is matched as
/// [`answers_to`] matches symbols, with the entry's namespaces, classes and Fortran module
/// as its qualification (`k::gather`, `kernels::spmv`).
fn inlined_copies(path: &Path, name: &str) -> Vec<(u64, u64)> {
    use addr2line::gimli;
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Vec::new();
    };
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let Ok(sections) = gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    }) else {
        return Vec::new();
    };
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, endian));
    // The last component of the name, without template arguments.
    let tail = call_names(name).last().unwrap_or(name).to_string();
    // Subprogram entries by global offset: whether their own names answer, and the entry
    // they refer to for the rest.
    let mut named: HashMap<usize, (bool, Option<usize>)> = HashMap::new();
    let mut copies: Vec<(usize, Vec<(u64, u64)>)> = Vec::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let global = |v: gimli::AttributeValue<_>| match v {
            gimli::AttributeValue::UnitRef(o) => o.to_debug_info_offset(&unit.header).map(|o| o.0),
            gimli::AttributeValue::DebugInfoRef(o) => Some(o.0),
            _ => None,
        };
        let string = |e: &gimli::DebuggingInformationEntry<_>, at| {
            e.attr_value(at)
                .and_then(|v| dwarf.attr_string(&unit, v).ok())
                .map(|s| s.to_string_lossy().into_owned())
        };
        // Enclosing namespaces, classes and modules: (depth, name).
        let mut scopes: Vec<(isize, String)> = Vec::new();
        let mut entries = unit.entries();
        while let Ok(Some(e)) = entries.next_dfs() {
            while scopes.last().is_some_and(|&(d, _)| d >= e.depth()) {
                scopes.pop();
            }
            let tag = e.tag();
            if matches!(
                tag,
                gimli::DW_TAG_namespace
                    | gimli::DW_TAG_class_type
                    | gimli::DW_TAG_structure_type
                    | gimli::DW_TAG_union_type
                    | gimli::DW_TAG_module
            ) {
                if let Some(n) = string(e, gimli::DW_AT_name) {
                    scopes.push((e.depth(), n));
                }
            } else if tag == gimli::DW_TAG_subprogram {
                let Some(at) = e.offset().to_debug_info_offset(&unit.header) else {
                    continue;
                };
                let own = string(e, gimli::DW_AT_name);
                let linkage = string(e, gimli::DW_AT_linkage_name)
                    .or_else(|| string(e, gimli::DW_AT_MIPS_linkage_name));
                // (Manglings keep identifiers as they are: a name without the query's last
                // component is not demangled.)
                let answers = own.as_deref().is_some_and(|n| {
                    n == name
                        || n.contains(&tail) && {
                            let qualified: Vec<&str> = scopes
                                .iter()
                                .map(|(_, s)| s.as_str())
                                .chain(std::iter::once(n))
                                .collect();
                            call_names(&qualified.join("::")).any(|q| q == name)
                        }
                }) || linkage.as_deref().is_some_and(|l| {
                    l == name
                        || l.contains(&tail) && {
                            let d = demangle(l);
                            d == name || call_names(&d).any(|q| q == name)
                        }
                });
                let refers = e
                    .attr_value(gimli::DW_AT_abstract_origin)
                    .or_else(|| e.attr_value(gimli::DW_AT_specification))
                    .and_then(global);
                named.insert(at.0, (answers, refers));
            } else if tag == gimli::DW_TAG_inlined_subroutine {
                let Some(origin) = e.attr_value(gimli::DW_AT_abstract_origin).and_then(global)
                else {
                    continue;
                };
                let mut ranges = Vec::new();
                if let Ok(mut it) = dwarf.die_ranges(&unit, e) {
                    while let Ok(Some(r)) = it.next() {
                        if r.begin < r.end {
                            ranges.push((r.begin, r.end));
                        }
                    }
                }
                copies.push((origin, ranges));
            }
        }
    }
    let answers = |mut at: usize| {
        // (Bounded: a malformed file's references could loop.)
        for _ in 0..8 {
            match named.get(&at) {
                Some(&(true, _)) => return true,
                Some(&(false, Some(next))) => at = next,
                _ => return false,
            }
        }
        false
    };
    copies
        .into_iter()
        .filter(|(origin, _)| answers(*origin))
        .flat_map(|(_, ranges)| ranges)
        .collect()
}

/// A name as a table shows it without a Python extension module's ABI tag
/// (`_multiarray_umath.so` for `_multiarray_umath.cpython-311-x86_64-linux-gnu.so`: the tag
/// is the same for every module of one interpreter, and took half of NumPy's names).
pub fn without_abi_tag(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find(".cpython-") {
        let Some(so) = rest[i..].find(".so") else {
            break;
        };
        out.push_str(&rest[..i]);
        rest = &rest[i + so..];
    }
    out.push_str(rest);
    out
}

/// A "function (file:line)" or "function [object]" source as a table shows it: a C++
/// function without its parameters and return type (`nbnxm_kernel_F_4xm [libgromacs.so.7]`,
/// where GROMACS's kernels' signatures made three of them fill 400 characters); anything
/// else as it is.
pub fn short_source(source: &str) -> String {
    let cut = if source.ends_with(')') {
        source.rfind(" (")
    } else if source.ends_with(']') {
        source.rfind(" [")
    } else {
        None
    };
    let (function, place) = source.split_at(cut.unwrap_or(source.len()));
    fn short(f: &str) -> &str {
        if f.contains('(') {
            without_parameters(f)
        } else {
            f
        }
    }
    let place = without_abi_tag(place);
    match function.split_once(", inlined in ") {
        Some((inner, outer)) => format!("{}, inlined in {}{place}", short(inner), short(outer)),
        None => format!("{}{place}", short(function)),
    }
}

/// A demangled function name without its parameters and return type, `k::gather<double>`
/// for `double k::gather<double>(std::vector<double> const&)` (the first of [`call_names`]),
/// or the name as it is where that leaves nothing.
pub fn without_parameters(demangled: &str) -> &str {
    call_names(demangled)
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(demangled)
}

/// The names a demangled function name answers to, besides itself: without its parameters
/// and return type (`double k::gather<double>(std::vector<...> const&)` is
/// `k::gather<double>`), without its template arguments (`k::gather`), and its last
/// component alone (`gather<double>`, `gather`). Brackets nest: `<...>` and `(...)` inside
/// template arguments do not cut.
pub fn call_names(demangled: &str) -> impl Iterator<Item = &str> {
    // Outside any <...> or (...): the first '(' ends the name, the last ' ' before it starts it.
    // A '(' right after a '.' opens a Go method's receiver, part of its name:
    // `zstd.(*fastEncoder).Encode`.
    let (mut depth, mut start, mut end) = (0i32, 0usize, demangled.len());
    let mut receiver = 0i32;
    let mut prev = ' ';
    for (i, ch) in demangled.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && prev == '.' => receiver += 1,
            ')' if receiver > 0 => receiver -= 1,
            '(' if depth == 0 && receiver == 0 => {
                end = i;
                break;
            }
            ' ' if depth == 0 && receiver == 0 => start = i + 1,
            _ => {}
        }
        prev = ch;
    }
    let qualified = &demangled[start.min(end)..end];
    // Trailing template arguments: from the '<' that the final '>' closes.
    let untemplated = match qualified.strip_suffix('>') {
        Some(_) => {
            let mut d = 0i32;
            let mut cut = qualified.len();
            for (i, ch) in qualified.char_indices().rev() {
                match ch {
                    '>' => d += 1,
                    '<' => {
                        d -= 1;
                        if d == 0 {
                            cut = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            &qualified[..cut]
        }
        None => qualified,
    };
    // The last component: after the final "::" outside brackets (the untemplated name has none
    // at its end, so its final "::" is the one).
    let tail_of = |s: &str| -> usize {
        let mut d = 0i32;
        let mut at = 0usize;
        let b = s.as_bytes();
        for i in 0..b.len() {
            match b[i] {
                b'<' => d += 1,
                b'>' => d -= 1,
                b':' if d == 0 && i + 1 < b.len() && b[i + 1] == b':' => at = i + 2,
                _ => {}
            }
        }
        at
    };
    let tail = tail_of(untemplated);
    [
        qualified,
        untemplated,
        &qualified[tail.min(qualified.len())..],
        &untemplated[tail..],
    ]
    .into_iter()
    .filter(|n| !n.is_empty())
}

/// A symbol table entry that is a function, as a [`FunctionSymbol`].
fn function_symbol<'d, S: ObjectSymbol<'d>>(s: &S) -> Option<FunctionSymbol> {
    if s.kind() != SymbolKind::Text || s.address() == 0 {
        return None;
    }
    let raw = s.name().ok()?.to_string();
    Some(FunctionSymbol::new(raw, s.address(), s.size()))
}

/// Up to five names containing `query` or within a small edit distance of it.
pub fn close_matches<'a>(query: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let q = query.to_ascii_lowercase();
    let mut scored: Vec<(usize, String)> = names
        .filter_map(|n| {
            let l = n.to_ascii_lowercase();
            let d = edit_distance(&q, &l);
            if l.contains(&q) || q.contains(&l) && l.len() > 2 {
                Some((0, n.to_string()))
            } else if d <= 2.max(q.len() / 4) {
                Some((d, n.to_string()))
            } else {
                None
            }
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Where an instruction comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceLocation {
    /// The file mapped at the address (executable or library).
    pub object: Option<String>,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Where the compiler inlined another function's code into `function` (DWARF's inlined
    /// subroutines): that function, the innermost, whose source `file` and `line` are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inlined: Option<String>,
    /// The instruction's link-time address in `object` (what `addr2line -e` and `objdump`
    /// take; the same from run to run), where the file could be read. Not serialized: it
    /// only places unnamed code in [`SourceLocation::describe_instruction`].
    #[serde(skip)]
    pub link_addr: Option<u64>,
    /// Where no symbol names the code: the link-time start of its function as the file's
    /// unwind table bounds it, which keeps one unnamed function apart from another in
    /// [`SourceLocation::function_or_object`]. Not serialized.
    #[serde(skip)]
    pub unwound_start: Option<u64>,
}

impl SourceLocation {
    /// Where no symbol names the function: its name by its start in the file's unwind table,
    /// "sub_4415e0" (see [`unwound_name`]).
    pub fn unnamed_function(&self) -> Option<String> {
        match self.function {
            Some(_) => None,
            None => self.unwound_start.map(unwound_name),
        }
    }

    /// The function's name; where no symbol names it, "sub_4416c0 [gawk]" (as disassemblers
    /// name a function they find: its link-time start, from the file's unwind table) or
    /// "?? [object]" (the file it lies in, so that unnamed code of one library stays apart
    /// from another's), or "??".
    pub fn function_or_object(&self) -> String {
        match (&self.function, &self.object) {
            (Some(f), _) => f.clone(),
            (None, Some(o)) => match self.unnamed_function() {
                Some(f) => format!("{f} {}", bracketed(o)),
                None => format!("?? {}", bracketed(o)),
            },
            (None, None) => "??".into(),
        }
    }

    /// [`SourceLocation::describe`] for one instruction: where neither its function nor its
    /// source line is known (a stripped library), its place in its file instead of the file
    /// alone, "sub_7b40 [liblzma.so.5.4.1+0x7b96]" (its function as the file's unwind table
    /// bounds it) or "?? [liblzma.so.5.4.1+0x7b96]", which `objdump -d` or `addr2line -e`
    /// (once symbols are installed) take. `describe` stays one string for all of an unnamed
    /// function's code, for listings that group by it.
    pub fn describe_instruction(&self) -> String {
        match (&self.function, &self.file, &self.object, self.link_addr) {
            (None, None, Some(o), Some(a)) => {
                let function = self.unnamed_function();
                let function = function.as_deref().unwrap_or("??");
                format!("{function} [{}+{a:#x}]", short_path(o))
            }
            _ => self.describe(),
        }
    }

    /// "function (file:line)" or what is known of it; "gather, inlined in main (g.c:4)";
    /// "sub_4415e0 [gawk]" for a stripped file's function (see
    /// [`SourceLocation::function_or_object`]).
    pub fn describe(&self) -> String {
        let unnamed = self.unnamed_function();
        let outer = self
            .function
            .as_deref()
            .or(unnamed.as_deref())
            .unwrap_or("??");
        let inlined;
        let func = match &self.inlined {
            Some(i) => {
                // (C++: without return type and parameters, `k::gather<double>`.)
                let short = without_parameters(i);
                inlined = format!("{short}, inlined in {outer}");
                inlined.as_str()
            }
            None => outer,
        };
        match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{func} ({}:{l})", short_path(f)),
            (Some(f), None) => format!("{func} ({})", short_path(f)),
            _ => match &self.object {
                Some(o) => format!("{func} {}", bracketed(o)),
                None => func.to_string(),
            },
        }
    }
}

/// A `--roi` name found in a library mapped after start (one the program opened with
/// `dlopen`), at the library's link-time addresses.
#[derive(Debug, Clone)]
pub struct LateFind {
    pub name: String,
    /// The library, as the mappings name it ...
    pub path: String,
    /// ... the link address of its file offset 0, and where that is mapped.
    pub load_base: u64,
    pub start: u64,
    pub code: FunctionCode,
}

impl LateFind {
    /// "--roi NAME: in libk.so (a library the program opened with dlopen)".
    pub fn note(&self) -> String {
        format!(
            "--roi {}: in {} (a library the program opened with dlopen)",
            self.name,
            short_path(&self.path)
        )
    }
}

/// Searches the files `maps` shows newly mapped at their offset 0 (not in `searched`, which
/// they join, nor starting at one of `excluded_starts`) for the names in `late`, as the
/// program's own names are found (symbols, debug file, DWARF); the names found leave `late`.
/// Only ELF files are read: a program maps data files at offset 0 too.
pub fn find_in_new_libraries(
    maps: &[Mapping],
    searched: &mut Vec<String>,
    excluded_starts: &[u64],
    late: &mut Vec<String>,
) -> Vec<LateFind> {
    let mut found = Vec::new();
    for m in maps {
        if late.is_empty() {
            break;
        }
        if m.offset != 0
            || !m.path.starts_with('/')
            || excluded_starts.contains(&m.start)
            || searched.contains(&m.path)
        {
            continue;
        }
        searched.push(m.path.clone());
        if !is_elf(Path::new(&m.path)) {
            continue;
        }
        let Ok(image) = ElfImage::open(Path::new(&m.path)) else {
            continue;
        };
        late.retain(|name| match image.find_code(name) {
            Ok(code) => {
                found.push(LateFind {
                    name: name.clone(),
                    path: m.path.clone(),
                    load_base: image.load_base,
                    start: m.start,
                    code,
                });
                false
            }
            Err(_) => true,
        });
    }
    found
}

/// The file starts as an ELF file does.
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"\x7fELF")
}

/// The last component of a path: a file's name.
pub fn short_path(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The name of a function no symbol names, by its link-time start as the file's unwind table
/// gives it, as disassemblers name a function they find: "sub_4415e0".
pub fn unwound_name(start: u64) -> String {
    format!("sub_{start:x}")
}

/// "[libc.so.6]" for an object's path; a pseudo-path in brackets already, "[vdso]", as it is.
fn bracketed(object: &str) -> String {
    if object.starts_with('[') && object.ends_with(']') {
        object.to_string()
    } else {
        format!("[{}]", short_path(object))
    }
}

struct LoadedObject {
    loader: addr2line::Loader,
    /// (file offset, file size, vaddr) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
    /// The procedure linkage table's stubs, sorted by start: no symbol table names them.
    plt: Vec<FunctionSymbol>,
    /// A Go program's own function table, which names its functions when it is stripped.
    go: Option<crate::gosym::GoFunctions>,
    /// The name to give each address that more than one function symbol names (see
    /// [`preferred_names`]).
    aliases: HashMap<u64, String>,
    /// The file, and the functions its unwind table (`.eh_frame`) bounds, read when unnamed
    /// code is first looked up.
    path: PathBuf,
    unwound: OnceLock<Vec<(u64, u64)>>,
}

/// Resolves instruction addresses of a traced process; caches per address and per file.
pub struct Symbolizer {
    mappings: Vec<Mapping>,
    /// Names of JIT-compiled code, sorted by start.
    jit: Vec<JitSymbol>,
    objects: HashMap<String, Option<LoadedObject>>,
    cache: HashMap<u64, SourceLocation>,
}

/// The `object` of code that a runtime's perf map names (JIT-compiled): "JS:*loop [jit]".
pub const JIT_CODE: &str = "jit";

/// The `object` of code in anonymous memory that nothing names: a JIT compiler's, whose
/// runtime kept no perf map.
pub const ANONYMOUS_CODE: &str = "anonymous code";

/// What names [`ANONYMOUS_CODE`] (after "... instructions" or "candidates without a symbol").
pub const JIT_HINT: &str = "run in anonymous memory, where a JIT compiler writes code (V8, \
    Julia, the JVM, PyPy): where its runtime keeps a perf map (/tmp/perf-PID.map: node \
    --perf-basic-prof, julia with ENABLE_JITPROFILING=1, python3.12 -X perf, java \
    -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit), mgbench capture keeps its names \
    in the trace and every command names that code";

impl Symbolizer {
    pub fn new(mut mappings: Vec<Mapping>) -> Symbolizer {
        mappings.sort_by_key(|m| (m.start, m.end));
        mappings.dedup();
        Symbolizer {
            mappings,
            jit: Vec::new(),
            objects: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    /// Adds names of JIT-compiled code (a trace's JIT symbols frame): code in memory no file
    /// is mapped to, which would otherwise be "??".
    pub fn add_jit_symbols(&mut self, more: &[JitSymbol]) {
        self.jit.extend_from_slice(more);
        self.jit.sort_by_key(|s| s.start);
        self.cache.clear();
    }

    /// Adds mappings that a trace lists later (a mappings frame), keeping the files loaded.
    pub fn add_mappings(&mut self, more: &[Mapping]) {
        self.mappings.extend_from_slice(more);
        self.mappings.sort_by_key(|m| (m.start, m.end));
        self.mappings.dedup();
        // An address resolved before may lie in one of them.
        self.cache.clear();
    }

    /// Where each of `ips` comes from, in a process mapped as `mappings`.
    pub fn resolve_all(
        mappings: Vec<Mapping>,
        jit: &[JitSymbol],
        ips: &[u64],
    ) -> Vec<SourceLocation> {
        let mut sym = Symbolizer::new(mappings);
        sym.add_jit_symbols(jit);
        ips.iter().map(|&ip| sym.resolve(ip)).collect()
    }

    /// Loads the file at `path` (its symbols and debug information: libc's take ~45 ms) before
    /// any address needs it; `path` as `/proc/PID/maps` names it (canonical).
    pub fn preload(&mut self, path: &str) {
        self.objects
            .entry(path.to_string())
            .or_insert_with(|| load_object(Path::new(path)));
    }

    pub fn resolve(&mut self, ip: u64) -> SourceLocation {
        if let Some(hit) = self.cache.get(&ip) {
            return hit.clone();
        }
        let loc = self.lookup(ip);
        self.cache.insert(ip, loc.clone());
        loc
    }

    /// The named mapping that holds `ip`: the latest (mappings can be replaced over time).
    /// Code runs from executable memory, so an executable mapping that holds `ip` says what
    /// is there over any other, and where it is anonymous (a JIT compiler's code) no file
    /// is: a ptrace capture's first snapshot had `/etc/ld.so.cache` (read-only) where the
    /// dynamic loader had unmapped it and a program later wrote code. (QEMU maps a guest's
    /// code without execute permission: there, the latest named mapping.)
    fn mapping_of(&self, ip: u64) -> Option<&Mapping> {
        let holds = |m: &&Mapping| ip >= m.start && ip < m.end;
        if let Some(m) = self
            .mappings
            .iter()
            .rev()
            .filter(holds)
            .find(|m| m.perms.contains('x'))
        {
            return (!is_anonymous_memory(&m.path)).then_some(m);
        }
        self.mappings
            .iter()
            .rev()
            .filter(holds)
            .find(|m| !is_anonymous_memory(&m.path))
    }

    /// The address `ip` has in the file mapped there (its link-time address, the one
    /// `addr2line -e FILE` and `objdump` take), which stays the same from run to run where
    /// `ip` does not (a shared library or PIE loads anywhere).
    pub fn link_address(&mut self, ip: u64) -> Option<u64> {
        self.object_at(ip).map(|(_, addr)| addr)
    }

    /// The file mapped at `ip` (loaded once) and `ip`'s link-time address in it, through the
    /// mapping's file offset and the PT_LOAD segment that holds it.
    fn object_at(&mut self, ip: u64) -> Option<(&LoadedObject, u64)> {
        let m = self
            .mapping_of(ip)
            .filter(|m| m.path.starts_with('/'))?
            .clone();
        let obj = self
            .objects
            .entry(m.path.clone())
            .or_insert_with(|| load_object(Path::new(&m.path)))
            .as_ref()?;
        let file_off = ip - m.start + m.offset;
        let &(off, _, vaddr) = obj
            .segments
            .iter()
            .find(|&&(off, size, _)| file_off >= off && file_off < off + size.max(1))?;
        Some((obj, file_off - off + vaddr))
    }

    fn lookup(&mut self, ip: u64) -> SourceLocation {
        let Some(m) = self.mapping_of(ip) else {
            // Code where no file is mapped: a JIT compiler's, named by the runtime's perf
            // map where it kept one; anonymous code where a mapping holds it unnamed.
            if let Some(j) = JitSymbol::find(&self.jit, ip) {
                return SourceLocation {
                    object: Some(JIT_CODE.into()),
                    function: Some(j.name.clone()),
                    ..SourceLocation::default()
                };
            }
            let anonymous = self.mappings.iter().any(|m| m.start <= ip && ip < m.end);
            return SourceLocation {
                object: anonymous.then(|| ANONYMOUS_CODE.into()),
                ..SourceLocation::default()
            };
        };
        // ([heap], [stack], [vdso]... have no file to read.)
        let mut loc = SourceLocation {
            object: Some(m.path.clone()),
            ..SourceLocation::default()
        };
        let Some((obj, elf_addr)) = self.object_at(ip) else {
            // Code no file holds, the vDSO: named where the trace keeps its functions.
            loc.function = JitSymbol::find(&self.jit, ip).map(|j| j.name.clone());
            return loc;
        };
        loc.link_addr = Some(elf_addr);
        loc.function = obj.function_name(elf_addr);
        if loc.function.is_none() {
            loc.unwound_start = obj.unwound_start(elf_addr);
        }
        // DWARF's frames at the address, innermost first: its source line is the innermost
        // frame's (the line table's), and more than one frame is inlined code.
        let mut frames = obj.loader.find_frames(elf_addr).ok();
        let innermost = frames.as_mut().and_then(|f| f.next().ok().flatten());
        let line = match innermost.as_ref().and_then(|f| f.location.as_ref()) {
            Some(l) => Some((l.file, l.line)),
            None => obj
                .loader
                .find_location(elf_addr)
                .ok()
                .flatten()
                .map(|l| (l.file, l.line)),
        };
        if let Some((file, line)) = line {
            loc.file = file.map(str::to_string);
            loc.line = line;
        }
        let name = innermost
            .and_then(|f| f.function)
            .and_then(|n| n.raw_name().ok().map(|r| demangle(&r)));
        if name.is_some() && frames.is_some_and(|mut f| f.next().ok().flatten().is_some()) {
            loc.inlined = name.filter(|i| Some(i) != loc.function.as_ref());
        }
        loc
    }
}

/// Whether a mapping with this path (as /proc/PID/maps gives it) is memory that no file holds:
/// none at all, or shared anonymous memory, which the kernel backs by a pseudo-file (PHP's JIT
/// buffer is `/dev/zero (deleted)`; a JIT that maps its code twice uses a memfd, `/memfd:NAME
/// (deleted)`; SysV shared memory is `/SYSV00000000 (deleted)`). A runtime's perf map names
/// JIT code there, as perf takes it.
fn is_anonymous_memory(path: &str) -> bool {
    const ANONYMOUS: [&str; 5] = ["/dev/zero", "/memfd:", "//anon", "/anon_hugepage", "/SYSV"];
    path.is_empty() || path.starts_with("[anon") || ANONYMOUS.iter().any(|p| path.starts_with(p))
}

/// A [`Symbolizer`] on a thread of its own that loads files while the caller does something
/// else (a live run's program runs), then resolves addresses once they are known.
pub struct Preloaded {
    request: std::sync::mpsc::Sender<(Vec<Mapping>, Vec<JitSymbol>, Vec<u64>)>,
    reply: std::sync::mpsc::Receiver<Vec<SourceLocation>>,
    /// The file the thread is loading, if it is: set and cleared under the lock, and a file is
    /// only started after a look for a request under it.
    loading: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Preloaded {
    /// Starts loading the files `paths` gives (computed on the new thread; see
    /// [`Symbolizer::preload`]), one after the other; a request that comes before the last is
    /// loaded stops the loading there.
    pub fn start(paths: impl FnOnce() -> Vec<String> + Send + 'static) -> Preloaded {
        use std::sync::mpsc::{channel, TryRecvError};
        let (request, requests) = channel::<(Vec<Mapping>, Vec<JitSymbol>, Vec<u64>)>();
        let (replies, reply) = channel();
        let loading = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let busy = loading.clone();
        // Where no thread can start, `resolve` finds the request refused and works alone.
        let _ = std::thread::Builder::new()
            .name("mgbench-symbols".into())
            .spawn(move || {
                let lock = || busy.lock().unwrap_or_else(|e| e.into_inner());
                let mut sym = Symbolizer::new(Vec::new());
                let mut early = None;
                for p in &paths() {
                    let mut current = lock();
                    match requests.try_recv() {
                        Ok(r) => {
                            early = Some(r);
                            break;
                        }
                        Err(TryRecvError::Disconnected) => return,
                        Err(TryRecvError::Empty) => *current = Some(p.clone()),
                    }
                    drop(current);
                    sym.preload(p);
                    *lock() = None;
                }
                let Some((mappings, jit, ips)) = early.or_else(|| requests.recv().ok()) else {
                    return;
                };
                sym.add_mappings(&mappings);
                sym.add_jit_symbols(&jit);
                let _ = replies.send(ips.iter().map(|&ip| sym.resolve(ip)).collect::<Vec<_>>());
            });
        Preloaded {
            request,
            reply,
            loading,
        }
    }

    /// Where each of `ips` comes from, in a process mapped as `mappings` whose JIT-compiled
    /// code `jit` names. Where the thread is still loading a file that none of `ips` lies in
    /// (a run shorter than the loading), this thread resolves them alone rather than wait.
    pub fn resolve(
        self,
        mappings: Vec<Mapping>,
        jit: Vec<JitSymbol>,
        ips: Vec<u64>,
    ) -> Vec<SourceLocation> {
        // The files the addresses lie in.
        let needed: Vec<&str> = mappings
            .iter()
            .filter(|m| ips.iter().any(|&ip| ip >= m.start && ip < m.end))
            .map(|m| m.path.as_str())
            .collect();
        let sent = {
            let current = self.loading.lock().unwrap_or_else(|e| e.into_inner());
            let elsewhere = current
                .as_ref()
                .is_some_and(|l| !needed.contains(&l.as_str()));
            // A thread that could not start or died (it never should) leaves the work to this
            // one, as does one busy with a file not needed.
            !elsewhere
                && self
                    .request
                    .send((mappings.clone(), jit.clone(), ips.clone()))
                    .is_ok()
        };
        match sent.then(|| self.reply.recv().ok()).flatten() {
            Some(locations) => locations,
            None => Symbolizer::resolve_all(mappings, &jit, &ips),
        }
    }
}

/// The files the program `program` (a path, or a name looked up in PATH) maps as it starts,
/// as `/proc/PID/maps` names them (canonical paths): itself, its dynamic loader (PT_INTERP) and the libraries it names
/// (DT_NEEDED), found where the dynamic loader looks (its RPATH or RUNPATH with `$ORIGIN`,
/// `LD_LIBRARY_PATH`, then the system's directories; the cache of `ldconfig` is not read,
/// so a library found elsewhere is simply not preloaded). Libraries those load are left
/// out. Empty where the file is not a readable ELF file.
pub fn program_objects(program: &Path) -> Vec<String> {
    use object::read::elf::{Dyn, FileHeader, ProgramHeader};
    let program = if program.components().count() > 1 || program.is_file() {
        program.to_path_buf()
    } else {
        let Some(found) = search_path(program) else {
            return Vec::new();
        };
        found
    };
    let program = program.as_path();
    let Ok(data) = std::fs::read(program) else {
        return Vec::new();
    };
    let Ok(elf) = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let header = elf.elf_header();
    let mut found: Vec<PathBuf> = vec![program.to_path_buf()];
    let Ok(segments) = header.program_headers(endian, &*data) else {
        return Vec::new();
    };
    let (mut needed, mut runpath) = (Vec::new(), Vec::new());
    for seg in segments {
        if let Ok(Some(interp)) = seg.interpreter(endian, &*data) {
            found.push(PathBuf::from(String::from_utf8_lossy(interp).into_owned()));
        }
        let Ok(Some(dynamic)) = seg.dynamic(endian, &*data) else {
            continue;
        };
        // The dynamic string table, by its address in the segments that load it.
        let strtab = dynamic
            .iter()
            .find_map(|d| (d.tag(endian) == object::elf::DT_STRTAB).then(|| d.d_val(endian)));
        let strsz = dynamic
            .iter()
            .find_map(|d| (d.tag(endian) == object::elf::DT_STRSZ).then(|| d.d_val(endian)));
        let (Some(addr), Some(size)) = (strtab, strsz) else {
            continue;
        };
        let Some(table) = segments.iter().find_map(|s| {
            let (va, filesz) = (s.p_vaddr(endian), s.p_filesz(endian));
            (addr >= va && addr + size <= va + filesz)
                .then(|| s.p_offset(endian) + (addr - va))
                .and_then(|off| data.get(off as usize..(off + size) as usize))
        }) else {
            continue;
        };
        let string = |off: u64| {
            let rest = table.get(off as usize..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        };
        for d in dynamic {
            match d.tag(endian) {
                object::elf::DT_NEEDED => needed.extend(string(d.d_val(endian))),
                object::elf::DT_RPATH | object::elf::DT_RUNPATH => {
                    runpath.extend(string(d.d_val(endian)))
                }
                _ => {}
            }
        }
    }
    let origin = program
        .parent()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut dirs: Vec<PathBuf> = runpath
        .iter()
        .flat_map(|r| r.split(':'))
        .map(|d| PathBuf::from(d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin)))
        .collect();
    if let Ok(env) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(env.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
    }
    dirs.extend(
        [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib64",
            "/usr/lib64",
            "/lib",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .map(PathBuf::from),
    );
    for name in &needed {
        if name.contains('/') {
            found.push(PathBuf::from(name));
        } else if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            found.push(p);
        }
    }
    let mut paths: Vec<String> = found
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    paths
}

/// `name` looked up in PATH as a shell does (`/usr/bin:/bin` where PATH is unset): the first
/// directory that holds a file of that name.
pub fn search_path(name: &Path) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn load_object(path: &Path) -> Option<LoadedObject> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let segments = file
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect();
    // Symbols and lines from the separate debug file where there is one (it has the same
    // addresses, and the functions a stripped file's dynamic symbols leave out).
    let debug = debug_file(path, &file);
    let (loader, aliases) = match debug.as_ref().and_then(|d| {
        let loader = addr2line::Loader::new(d).ok()?;
        // (Read as needed: a debug file is mostly DWARF, which the loader reads itself.)
        let cache = ReadCache::new(std::fs::File::open(d).ok()?);
        Some((loader, preferred_names(&cache)))
    }) {
        Some(found) => found,
        None => (addr2line::Loader::new(path).ok()?, preferred_names(&*data)),
    };
    Some(LoadedObject {
        loader,
        segments,
        plt: plt_stubs(&data),
        go: crate::gosym::GoFunctions::of(&file),
        aliases,
        path: path.to_path_buf(),
        unwound: OnceLock::new(),
    })
}

impl LoadedObject {
    /// The name of the function at link-time address `addr`: a PLT stub's `target@plt`, the
    /// symbol tables' name (the preferred one of several at one address), or a stripped Go
    /// program's own.
    fn function_name(&self, addr: u64) -> Option<String> {
        if let Some(stub) = plt_stub(&self.plt, addr) {
            return Some(format!("{}@plt", stub.name()));
        }
        match self.loader.find_symbol_info(addr) {
            Some(s) => Some(demangle(
                self.aliases
                    .get(&s.address())
                    .map_or(s.name(), String::as_str),
            )),
            None => self.go.as_ref()?.find(addr).map(str::to_string),
        }
    }

    /// The start of the function holding link-time address `addr` as the file's unwind table
    /// bounds it: every function a compiler emits for x86-64 Linux has an entry there, which
    /// stripping leaves (exceptions and backtraces need it).
    fn unwound_start(&self, addr: u64) -> Option<u64> {
        let ranges = self.unwound.get_or_init(|| {
            // (Read as needed: only the sections it parses, not the file again.)
            match std::fs::File::open(&self.path) {
                Ok(f) => unwind_ranges(&ReadCache::new(f)),
                Err(_) => Vec::new(),
            }
        });
        range_holding(ranges, addr).map(|(start, _)| start)
    }
}

/// The range of `ranges` (start, end), sorted by start, that holds `addr`.
pub(crate) fn range_holding(ranges: &[(u64, u64)], addr: u64) -> Option<(u64, u64)> {
    let i = ranges.partition_point(|&(start, _)| start <= addr);
    let &(start, end) = ranges.get(i.checked_sub(1)?)?;
    (addr < end).then_some((start, end))
}

/// The bytes of link-time addresses `lo..hi` in the section of `file` that holds them all.
pub(crate) fn section_bytes<'d, O: object::Object<'d>>(
    file: &O,
    lo: u64,
    hi: u64,
) -> Option<&'d [u8]> {
    use object::ObjectSection;
    file.sections().find_map(|s| {
        let (start, size) = (s.address(), s.size());
        if lo < start || hi > start + size {
            return None;
        }
        s.data()
            .ok()?
            .get((lo - start) as usize..(hi - start) as usize)
    })
}

/// The kernel's vDSO functions for a traced process that maps its vDSO at `start`, by their
/// own names, as perf gives them (`__vdso_clock_gettime`, apart from the C library's
/// `clock_gettime`, which calls it): read from this process's own vDSO, the same image in
/// every process of a kernel. No file holds that code, so the trace keeps the names (see
/// [`Symbolizer::add_jit_symbols`]). Empty where this process has no vDSO or it cannot be read.
pub fn vdso_functions(start: u64) -> Vec<JitSymbol> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let Some(own) = Mapping::parse_proc_maps(&maps)
        .into_iter()
        .find(|m| m.path == "[vdso]")
    else {
        return Vec::new();
    };
    let mut image = vec![0u8; (own.end - own.start) as usize];
    let read = std::fs::File::open("/proc/self/mem").and_then(|mut f| {
        f.seek(SeekFrom::Start(own.start))?;
        f.read_exact(&mut image)
    });
    if read.is_err() {
        return Vec::new();
    }
    let Ok(file) = object::File::parse(&*image) else {
        return Vec::new();
    };
    let base = file
        .segments()
        .filter(|s| s.file_range().0 == 0)
        .map(|s| s.address())
        .min()
        .unwrap_or(0);
    let mut ranked = ranked_functions(&*image);
    for (_, rank, _) in &mut ranked {
        // (`clock_gettime` is the weak alias.)
        rank.underscores = usize::from(!rank.name.starts_with("__vdso_"));
    }
    let mut functions: Vec<JitSymbol> = best_names(ranked)
        .into_iter()
        .filter(|(address, b)| b.size > 0 && *address >= base)
        .map(|(address, b)| JitSymbol {
            start: start + (address - base),
            size: b.size,
            name: b.rank.base().to_string(),
        })
        .collect();
    functions.sort_by_key(|f| f.start);
    functions
}

/// The code ranges (start, end) of an ELF file's `.eh_frame` entries (FDEs), sorted.
pub(crate) fn unwind_ranges<'d, R: object::ReadRef<'d>>(data: R) -> Vec<(u64, u64)> {
    use addr2line::gimli::{self, UnwindSection};
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(bytes) = section.data() else {
        return Vec::new();
    };
    let eh = gimli::EhFrame::new(bytes, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut ranges = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(|eh, bases, offset| eh.cie_from_offset(bases, offset)) {
                let start = fde.initial_address();
                if start != 0 && fde.len() > 0 {
                    ranges.push((start, start.saturating_add(fde.len())));
                }
            }
        }
    }
    ranges.sort_unstable();
    ranges
}

/// For each address that more than one function symbol names, the name a reader expects
/// there, as perf and gdb users know it: glibc's `free` is also `__libc_free`, `__free`,
/// `__GI___libc_free` and the compatibility symbol `cfree@GLIBC_2.2.5`, and the symbol
/// tables' own order would give `cfree`. See [`NameRank`] for the order.
fn preferred_names<'d, R: object::ReadRef<'d>>(data: R) -> HashMap<u64, String> {
    best_names(ranked_functions(data))
        .into_iter()
        .filter(|(_, b)| b.aliased)
        .map(|(addr, b)| (addr, b.rank.name.to_string()))
        .collect()
}

/// The best-ranked name at one address (see [`best_names`]).
struct BestName<'n> {
    rank: NameRank<'n>,
    /// Its size, or a bigger one an earlier best had.
    size: u64,
    /// Whether other names (not versions of it) are at the address too.
    aliased: bool,
}

/// The best of `ranked`'s names (see [`ranked_functions`]) at each address.
fn best_names(ranked: Vec<(u64, NameRank<'_>, u64)>) -> HashMap<u64, BestName<'_>> {
    let mut best: HashMap<u64, BestName> = HashMap::new();
    for (address, rank, size) in ranked {
        best.entry(address)
            .and_modify(|b| {
                b.aliased |= b.rank.base() != rank.base();
                if rank < b.rank {
                    b.rank = rank;
                    b.size = size.max(b.size);
                }
            })
            .or_insert(BestName {
                rank,
                size,
                aliased: false,
            });
    }
    best
}

/// How well a function symbol names its address, lower first: a default or unversioned name
/// before a compatibility version (hidden in `.gnu.version`, or `name@VERSION` with a single
/// `@` in a full symbol table), fewer leading underscores (`free` before `__libc_free`,
/// `rawmemchr` before `__rawmemchr`), global before weak before local, the shorter name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct NameRank<'n> {
    compat: bool,
    underscores: usize,
    binding: u8,
    len: usize,
    name: &'n str,
}

impl NameRank<'_> {
    fn base(&self) -> &str {
        self.name.split('@').next().unwrap_or(self.name)
    }
}

/// The function symbols (`.symtab` and `.dynsym`, IFUNCs included) of an x86-64 ELF file,
/// each with its address, rank and size.
fn ranked_functions<'d, R: object::ReadRef<'d>>(data: R) -> Vec<(u64, NameRank<'d>, u64)> {
    use object::read::elf::{ElfFile64, FileHeader};
    use object::{ObjectSymbolTable, SymbolScope};
    let Ok(elf) = ElfFile64::<object::Endianness, R>::parse(data) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let versions = elf
        .elf_header()
        .sections(endian, data)
        .ok()
        .and_then(|s| s.versions(endian, data).ok().flatten());
    let tables = [
        (elf.symbol_table(), None),
        (elf.dynamic_symbol_table(), versions.as_ref()),
    ];
    let mut ranked = Vec::new();
    for (table, versions) in tables {
        let Some(table) = table else { continue };
        for s in table.symbols() {
            let Ok(name) = s.name() else { continue };
            if s.kind() != SymbolKind::Text || s.address() == 0 || name.is_empty() {
                continue;
            }
            let compat = versions.is_some_and(|v| v.version_index(endian, s.index()).is_hidden())
                || name
                    .find('@')
                    .is_some_and(|at| !name[at..].starts_with("@@"));
            let binding = match s.scope() {
                _ if s.is_weak() => 1,
                SymbolScope::Dynamic | SymbolScope::Linkage => 0,
                _ => 2,
            };
            let base = name.split('@').next().unwrap_or(name);
            let rank = NameRank {
                compat,
                underscores: base.bytes().take_while(|&b| b == b'_').count(),
                binding,
                len: base.len(),
                name,
            };
            ranked.push((s.address(), rank, s.size()));
        }
    }
    ranked
}

/// The stubs of an x86-64 ELF file's procedure linkage table (`.plt`, `.plt.sec`,
/// `.plt.got`), each with the name of the function it jumps to (`function@plt`, as objdump
/// and perf say): a call into another library loads its address from the GOT there, and no
/// symbol table names that code. A stub is found by its `jmp *slot(%rip)` (with or without
/// the IBT and MPX prefixes) and named by the dynamic relocation that fills the slot.
fn plt_stubs(data: &[u8]) -> Vec<FunctionSymbol> {
    use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
    use object::{ObjectSymbolTable, RelocationTarget};
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let (Some(relocations), Some(dynsym)) = (elf.dynamic_relocations(), elf.dynamic_symbol_table())
    else {
        return Vec::new();
    };
    // A library's calls to its own IFUNCs (glibc's memcpy, strlen) go through slots that an
    // IRELATIVE relocation fills with what the resolver at its addend returns: named by the
    // IFUNC symbol there (objdump says `*ABS*+0x9be70@plt`).
    let resolvers = std::cell::OnceCell::new();
    let resolver = |at: u64| {
        let resolvers = resolvers.get_or_init(|| best_names(ranked_functions(data)));
        resolvers.get(&at).map(|b| b.rank.base().to_string())
    };
    let slots: HashMap<u64, String> = relocations
        .filter_map(|(slot, r)| match r.target() {
            RelocationTarget::Symbol(i) => {
                let name = dynsym.symbol_by_index(i).ok()?.name().ok()?;
                (!name.is_empty()).then(|| (slot, name.to_string()))
            }
            RelocationTarget::Absolute
                if r.flags()
                    == (object::RelocationFlags::Elf {
                        r_type: object::elf::R_X86_64_IRELATIVE,
                    }) =>
            {
                Some((slot, resolver(r.addend() as u64)?))
            }
            _ => None,
        })
        .collect();
    let mut stubs = Vec::new();
    let Ok(sections) = elf.elf_header().sections(endian, data) else {
        return stubs;
    };
    for header in sections.iter() {
        let name = sections.section_name(endian, header).unwrap_or_default();
        if !matches!(name, b".plt" | b".plt.sec" | b".plt.got") {
            continue;
        }
        let Ok(code) = header.data(endian, data) else {
            continue;
        };
        let start = header.sh_addr(endian);
        let entry = match header.sh_entsize(endian) {
            8 | 16 => header.sh_entsize(endian) as usize,
            _ => 16,
        };
        for (k, bytes) in code.chunks(entry).enumerate() {
            let at = start + (k * entry) as u64;
            let target = bytes.windows(6).enumerate().find_map(|(i, w)| {
                if w[..2] != [0xff, 0x25] {
                    return None;
                }
                let disp = i32::from_le_bytes([w[2], w[3], w[4], w[5]]);
                let slot = at
                    .wrapping_add((i + 6) as u64)
                    .wrapping_add(disp as i64 as u64);
                slots.get(&slot)
            });
            if let Some(target) = target {
                stubs.push(FunctionSymbol::new(target.clone(), at, bytes.len() as u64));
            }
        }
    }
    stubs.sort_by_key(|s| s.start);
    stubs
}

/// The stub of `plt` (see [`plt_stubs`]) that holds `addr`.
fn plt_stub(plt: &[FunctionSymbol], addr: u64) -> Option<&FunctionSymbol> {
    let i = plt.partition_point(|s| s.start <= addr).checked_sub(1)?;
    plt.get(i).filter(|s| addr < s.start + s.size)
}

/// Whether the file at `path` is a dynamic loader (glibc's `ld-linux-x86-64.so.2`, musl's
/// `ld-musl-x86_64.so.1`, or `ld64.so.*`), by its name.
pub fn is_dynamic_loader(path: &str) -> bool {
    let name = short_path(path);
    name.starts_with("ld-linux") || name.starts_with("ld-musl") || name.starts_with("ld64.so")
}

/// Where distributions install separate debug files (Debian's `-dbg` and `-dbgsym` packages:
/// `libc6-dbg` for the C library).
const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The separate debug file of the ELF file at `path`, as gdb finds it: by build ID under
/// `/usr/lib/debug/.build-id/`, or by the name in its `.gnu_debuglink` section, next to it,
/// in `.debug/` beside it, or under `/usr/lib/debug` and its directory. A file found by name
/// whose build ID differs from the file's (a debug file of another build) is not taken.
pub fn debug_file(path: &Path, file: &object::File) -> Option<PathBuf> {
    let id = file.build_id().ok().flatten().filter(|id| id.len() > 1);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    if let Some(id) = id {
        let by_id = Path::new(DEBUG_ROOT)
            .join(".build-id")
            .join(hex(&id[..1]))
            .join(format!("{}.debug", hex(&id[1..])));
        if by_id.is_file() {
            return Some(by_id);
        }
    }
    let mut candidates = Vec::new();
    if let Ok(Some((name, _crc))) = file.gnu_debuglink() {
        let name = Path::new(std::str::from_utf8(name).ok()?);
        let dir = path.parent().unwrap_or(Path::new("/"));
        candidates.push(dir.join(name));
        candidates.push(dir.join(".debug").join(name));
        candidates.push(
            Path::new(DEBUG_ROOT)
                .join(dir.strip_prefix("/").unwrap_or(dir))
                .join(name),
        );
    }
    candidates.into_iter().find(|c| {
        // Only its headers and notes are read.
        let Ok(f) = std::fs::File::open(c) else {
            return false;
        };
        let cache = ReadCache::new(f);
        c.as_path() != path
            && object::File::parse(&cache).is_ok_and(|d| {
                let theirs = d.build_id().ok().flatten();
                id.is_none() || theirs.is_none() || theirs == id
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether every tool in `tools` runs (`TOOL --version`); under CI a missing one fails
    /// the test instead (scripts/setup.sh installs them).
    fn have_tools(tools: &[&str]) -> bool {
        let missing: Vec<&str> = tools
            .iter()
            .copied()
            .filter(|t| {
                !std::process::Command::new(t)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
            .collect();
        if missing.is_empty() {
            return true;
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "needs {}, which CI installs with scripts/setup.sh",
            missing.join(", ")
        );
        eprintln!("skipped: no {}", missing.join(", "));
        false
    }

    /// Runs `program` with `args` in `dir`; fails the test with its stderr where it fails.
    fn run_in(dir: &Path, program: &str, args: &[&str]) {
        let o = std::process::Command::new(program)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    #[test]
    fn short_sources_drop_parameters_and_keep_the_place() {
        // A Go method's receiver is part of its name, not a parameter list.
        for go in [
            "github.com/klauspost/compress/zstd.(*fastEncoder).Encode",
            "main.(T).M",
            "sync.(*Pool).Get.func1",
        ] {
            assert_eq!(without_parameters(go), go);
            assert_eq!(
                short_source(&format!("{go} [restic]")),
                format!("{go} [restic]")
            );
        }
        let f = "nbnxm_kernel_F_4xm(NbnxnPairlistCpu const*, float const (*) [3])";
        assert_eq!(
            short_source(&format!("{f} [libgromacs.so.7.0.0]")),
            "nbnxm_kernel_F_4xm [libgromacs.so.7.0.0]"
        );
        assert_eq!(
            short_source("double k::gather<double>(std::vector<int> const&) (k.cc:12)"),
            "k::gather<double> (k.cc:12)"
        );
        assert_eq!(
            short_source("k::gather<double>, inlined in main(int, char**) (g.c:4)"),
            "k::gather<double>, inlined in main (g.c:4)"
        );
        assert_eq!(
            short_source("?? [_multiarray_umath.cpython-311-x86_64-linux-gnu.so]"),
            "?? [_multiarray_umath.so]"
        );
        assert_eq!(
            without_abi_tag(
                "a.cpython-311-x86_64-linux-gnu.so+0x1 b.cpython-312-x86_64-linux-gnu.so"
            ),
            "a.so+0x1 b.so"
        );
        assert_eq!(
            without_abi_tag("libfoo.so.6 x.cpython-311"),
            "libfoo.so.6 x.cpython-311"
        );
        for same in [
            "gather, inlined in main (g.c:4)",
            "do_lookup_x (dl-lookup.c:388)",
            "?? [libc.so.6]",
            "main",
            "erff64 (s_erf.c:226)",
        ] {
            assert_eq!(short_source(same), same);
        }
    }

    #[test]
    fn code_references_find_lea_call_and_immediate_targets() {
        let code = [
            0x48, 0x8d, 0x15, 0x10, 0x00, 0x00, 0x00, // lea rdx, [rip + 0x10]
            0xe8, 0xf4, 0xff, 0xff, 0xff, // call -12
            0xbe, 0x10, 0x12, 0x40, 0x00, // mov esi, 0x401210
            0x4c, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, // lea r8, [rip + 0x100]
        ];
        let mut refs = Vec::new();
        code_references(&code, 0x1000, &mut refs);
        for want in [0x1017, 0x1000, 0x401210, 0x1018 + 0x100] {
            assert!(refs.contains(&want), "{want:#x} in {refs:x?}");
        }
        assert!(is_clang_outlined(".omp_outlined."));
        assert!(is_clang_outlined(".omp_outlined..12"));
        assert!(is_clang_outlined(".omp_outlined._debug__"));
        assert!(is_clang_outlined(".omp_task_entry."));
        assert!(!is_clang_outlined("compute._omp_fn.0"));
        assert!(!is_clang_outlined("omp_outlined"));
        assert!(is_clang_outlined("compute.omp_outlined"));
        assert!(is_clang_outlined("_Z7computei.omp_outlined_debug__"));
        assert!(!is_clang_outlined("compute.omp"));
    }

    #[test]
    fn only_elf_files_are_searched_for_late_roi_names() {
        assert!(is_elf(&std::env::current_exe().unwrap()));
        let data = std::env::temp_dir().join(format!("mgbench-not-elf-{}", std::process::id()));
        std::fs::write(&data, b"a data file a program maps at offset 0").unwrap();
        assert!(!is_elf(&data));
        let maps = [Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: data.display().to_string(),
            perms: "r--p".into(),
        }];
        let (mut searched, mut late) = (Vec::new(), vec!["main".to_string()]);
        assert!(find_in_new_libraries(&maps, &mut searched, &[], &mut late).is_empty());
        assert_eq!(searched, [data.display().to_string()]);
        assert_eq!(late, ["main"]);
        std::fs::remove_file(&data).unwrap();
        assert!(!is_elf(Path::new("/nonexistent/libx.so")));
    }

    #[test]
    fn close_matches_rank_substrings_and_typos() {
        let names = ["spmv_rows", "main", "worker", "spmv_setup", "memcpy"];
        let m = close_matches("spmv_row", names.iter().copied());
        assert_eq!(m[0], "spmv_rows");
        assert!(close_matches("wrker", names.iter().copied()).contains(&"worker".to_string()));
        assert!(close_matches("zzzzzzzz", names.iter().copied()).is_empty());
    }

    #[test]
    fn unnamed_code_is_told_apart_by_its_file() {
        let loc = |function: Option<&str>, object: Option<&str>| SourceLocation {
            function: function.map(str::to_string),
            object: object.map(str::to_string),
            ..SourceLocation::default()
        };
        let lib = Some("/usr/lib/x86_64-linux-gnu/libbz2.so.1.0.4");
        assert_eq!(
            loc(Some("BZ2_blockSort"), lib).function_or_object(),
            "BZ2_blockSort"
        );
        assert_eq!(loc(None, lib).function_or_object(), "?? [libbz2.so.1.0.4]");
        assert_eq!(loc(None, None).function_or_object(), "??");
        // One instruction: its place in the file, where nothing names it.
        let at = |mut l: SourceLocation| {
            l.link_addr = Some(0x7b96);
            l.describe_instruction()
        };
        assert_eq!(at(loc(None, lib)), "?? [libbz2.so.1.0.4+0x7b96]");
        assert_eq!(
            loc(None, lib).describe_instruction(),
            "?? [libbz2.so.1.0.4]"
        );
        assert_eq!(
            at(loc(Some("BZ2_blockSort"), lib)),
            "BZ2_blockSort [libbz2.so.1.0.4]"
        );
        let mut lined = loc(None, lib);
        (lined.file, lined.line) = (Some("/src/bz/blocksort.c".into()), Some(7));
        assert_eq!(at(lined), "?? (blocksort.c:7)");
        assert_eq!(at(loc(None, None)), "??");
    }

    #[test]
    fn a_program_s_files_are_found_as_its_process_maps_them() {
        // gzip (Debian's, dynamic): itself, its loader and its libraries, canonical.
        let objects = program_objects(Path::new("gzip"));
        assert!(
            objects.first().is_some_and(|o| o.ends_with("/gzip")),
            "{objects:?}"
        );
        let libc = std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        assert!(objects.contains(&libc.display().to_string()), "{objects:?}");
        assert!(
            objects.iter().any(|o| o.ends_with("/ld-linux-x86-64.so.2")),
            "{objects:?}"
        );
        for o in &objects {
            assert_eq!(std::fs::canonicalize(o).unwrap(), Path::new(o), "{o}");
        }
        let mut unique = objects.clone();
        unique.dedup();
        assert_eq!(unique.len(), objects.len(), "{objects:?}");
        // What is not an ELF file, or is not there, gives nothing.
        assert!(program_objects(Path::new("/etc/hostname")).is_empty());
        assert!(program_objects(Path::new("/nonexistent/prog")).is_empty());
        assert!(program_objects(Path::new("no-such-program-anywhere")).is_empty());
    }

    #[test]
    fn a_library_is_found_through_the_program_s_runpath() {
        // A program whose library lies in lib/ beside it, found through RUNPATH $ORIGIN/lib.
        if !have_tools(&["gcc"]) {
            return;
        }
        let dir = std::env::temp_dir().join(format!("mgbench-runpath-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("f.c"), "int f(int x) { return x + 1; }\n").unwrap();
        std::fs::write(
            dir.join("m.c"),
            "int f(int);\nint main(int argc, char **argv) { return f(argc); }\n",
        )
        .unwrap();
        run_in(
            &dir,
            "gcc",
            &["-shared", "-fPIC", "-o", "lib/libf.so", "f.c"],
        );
        let rpath = ["-o", "m", "m.c", "-Llib", "-lf", "-Wl,-rpath,$ORIGIN/lib"];
        run_in(&dir, "gcc", &rpath);
        let objects = program_objects(&dir.join("m"));
        let lib = std::fs::canonicalize(dir.join("lib/libf.so")).unwrap();
        assert!(objects.contains(&lib.display().to_string()), "{objects:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stripped_code_is_split_into_functions_by_its_unwind_table() {
        // Stripping removes the symbols of a program's own functions but not the unwind
        // table: each function's code stays apart, named by its start as objdump gives it.
        if !have_tools(&["gcc", "strip"]) {
            return;
        }
        let dir = std::env::temp_dir().join(format!("mgbench-unwound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("s.c"),
            "__attribute__((noinline)) static long sum(long *a, int n) {\n\
             long s = 0; for (int i = 0; i < n; i++) s += a[i]; return s; }\n\
             __attribute__((noinline)) static void fill(long *a, int n) {\n\
             for (int i = 0; i < n; i++) a[i] = i * 3; }\n\
             int main(void) { static long a[64]; fill(a, 64); return (int)sum(a, 64) & 1; }\n",
        )
        .unwrap();
        run_in(&dir, "gcc", &["-O2", "-o", "s", "s.c"]);
        run_in(&dir, "strip", &["-o", "s-stripped", "s"]);
        let (exe, stripped) = (dir.join("s"), dir.join("s-stripped"));
        let data = std::fs::read(&exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let function = |name: &str| {
            file.symbols()
                .find(|s| s.name().is_ok_and(|n| n.split('.').next() == Some(name)))
                .map(|s| (s.address(), s.size()))
                .unwrap()
        };
        let obj = load_object(&stripped).unwrap();
        let mut starts = Vec::new();
        for name in ["sum", "fill", "main"] {
            let (start, size) = function(name);
            for at in [start, start + size / 2, start + size - 1] {
                assert_eq!(obj.function_name(at), None, "{name} is stripped");
                assert_eq!(obj.unwound_start(at), Some(start), "{name} at {at:#x}");
            }
            starts.push(start);
            // `--roi` takes the name readers see.
            let image = ElfImage::open(&stripped).unwrap();
            let code = image.find_code(&format!("sub_{start:x}")).unwrap();
            assert_eq!(code.entries, vec![(start, start + size)], "{name}");
        }
        let loc = SourceLocation {
            object: Some(stripped.to_string_lossy().into_owned()),
            unwound_start: Some(starts[0]),
            ..SourceLocation::default()
        };
        assert_eq!(
            loc.function_or_object(),
            format!("sub_{:x} [s-stripped]", starts[0])
        );
        // Unnamed code the table does not bound stays the file's.
        let unbounded = SourceLocation {
            unwound_start: None,
            ..loc
        };
        assert_eq!(unbounded.function_or_object(), "?? [s-stripped]");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn aliases_and_ifunc_stubs_get_the_names_readers_know() {
        // One function under several names: the symbol tables' order would pick any; a
        // compatibility version (`wk@V1`), a weak alias and an underscored one lose to the
        // plain global name. A call to a hidden IFUNC goes through a PLT stub that an
        // IRELATIVE relocation fills: named by the IFUNC.
        if !have_tools(&["gcc", "objdump", "strip"]) {
            return;
        }
        let dir = std::env::temp_dir().join(format!("mgbench-alias-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("l.c"),
            "int work(int x) { return x * 3 + 1; }\n\
             extern int _w(int) __attribute__((alias(\"work\")));\n\
             extern int wrk(int) __attribute__((weak, alias(\"work\")));\n\
             extern int wk_old(int) __attribute__((alias(\"work\")));\n\
             __asm__(\".symver wk_old, wk@V1\");\n\
             static int fast_impl(int x) { return x + 1; }\n\
             static void *resolve_fast(void) { return (void *)fast_impl; }\n\
             int fast(int) __attribute__((ifunc(\"resolve_fast\"), visibility(\"hidden\")));\n\
             int call_fast(int x) { return fast(x) * 2; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("v.map"),
            "V1 { global: wk; };\nV2 { global: work; _w; wrk; call_fast; local: *; } V1;\n",
        )
        .unwrap();
        let shared = ["-O2", "-fPIC", "-shared", "-Wl,--version-script", "v.map"];
        run_in(
            &dir,
            "gcc",
            &[&shared[..], &["-o", "libl.so", "l.c"]].concat(),
        );
        run_in(&dir, "strip", &["-o", "libl-stripped.so", "libl.so"]);
        let (lib, stripped) = (dir.join("libl.so"), dir.join("libl-stripped.so"));
        let data = std::fs::read(&lib).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let at = |name: &str| {
            file.symbols()
                .find(|s| s.name() == Ok(name))
                .map(|s| s.address())
                .unwrap()
        };
        for path in [&lib, &stripped] {
            let obj = load_object(path).unwrap();
            // (Every name of `work` is in the table the loader reads.)
            assert_eq!(obj.function_name(at("work") + 2).as_deref(), Some("work"));
        }
        // `fast` is hidden: only the full symbol table names it, as it names its stub.
        let fast_stub = plt_stubs(&data)
            .into_iter()
            .find(|s| s.raw_name == "fast")
            .expect("a stub for the hidden IFUNC");
        let obj = load_object(&lib).unwrap();
        assert_eq!(
            obj.function_name(fast_stub.start).as_deref(),
            Some("fast@plt")
        );

        // The C library: `free` has four other names; its own calls to memcpy go through
        // IRELATIVE stubs, which objdump names `*ABS*+0xADDR@plt`: ours name the IFUNC at ADDR.
        let maps = Mapping::parse_proc_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let libc = maps
            .iter()
            .find(|m| m.path.ends_with("/libc.so.6"))
            .map(|m| PathBuf::from(&m.path))
            .expect("this test links the C library");
        let libc_data = std::fs::read(&libc).unwrap();
        let libc_file = object::File::parse(&*libc_data).unwrap();
        let free = libc_file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("free"))
            .unwrap()
            .address();
        let obj = load_object(&libc).unwrap();
        assert_eq!(obj.function_name(free + 4).as_deref(), Some("free"));
        let dump = std::process::Command::new("objdump")
            .args(["-d", "-j", ".plt", "-j", ".plt.sec"])
            .arg(&libc)
            .output()
            .unwrap();
        let ifunc_stubs: Vec<(u64, u64)> = String::from_utf8_lossy(&dump.stdout)
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.split_once(" <*ABS*+0x")?;
                let target = rest.strip_suffix("@plt>:")?;
                let hex = |h| u64::from_str_radix(h, 16).ok();
                Some((hex(addr)?, hex(target)?))
            })
            .collect();
        assert!(ifunc_stubs.len() > 5, "{ifunc_stubs:?}");
        let stubs = plt_stubs(&libc_data);
        for (stub, target) in &ifunc_stubs {
            let ours = plt_stub(&stubs, *stub).expect("an IRELATIVE stub is named");
            let names: Vec<&str> = libc_file
                .dynamic_symbols()
                .filter(|s| s.address() == *target)
                .filter_map(|s| s.name().ok())
                .collect();
            assert!(names.contains(&ours.name()), "{stub:#x}: {names:?}");
        }
        assert!(
            stubs.iter().any(|s| s.raw_name == "memcpy"),
            "{ifunc_stubs:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plt_stubs_are_named_as_objdump_names_them() {
        // A program's calls into the C library go through its PLT; how the linker lays that
        // out (lazy .plt, .plt.sec with IBT, .plt.got for a function also taken by address)
        // depends on flags. objdump names each stub `function@plt`: the oracle.
        if !have_tools(&["gcc", "objdump"]) {
            return;
        }
        let dir = std::env::temp_dir().join(format!("mgbench-plt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("m.c"),
            "#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n\
             size_t (*taken)(const char *) = strlen;\n\
             int main(int argc, char **argv) {\n\
             char *p = malloc(64); snprintf(p, 64, \"%s\", argv[0]);\n\
             puts(p); free(p); return (int)strlen(argv[0]) + (int)taken(argv[0]) + argc; }\n",
        )
        .unwrap();
        let variants: [&[&str]; 4] = [
            &["-O2"],
            &["-O2", "-Wl,-z,now"],
            &["-O2", "-fcf-protection", "-Wl,-z,ibtplt"],
            &["-O2", "-no-pie", "-Wl,-z,lazy"],
        ];
        for (k, flags) in variants.iter().enumerate() {
            let exe = dir.join(format!("m{k}"));
            let o = std::process::Command::new("gcc")
                .args(*flags)
                .arg("-o")
                .arg(&exe)
                .arg(dir.join("m.c"))
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let dump = std::process::Command::new("objdump")
                .args(["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got"])
                .arg(&exe)
                .output()
                .unwrap();
            let mut want: Vec<(u64, String)> = String::from_utf8_lossy(&dump.stdout)
                .lines()
                .filter_map(|l| {
                    let (addr, rest) = l.split_once(" <")?;
                    let name = rest.strip_suffix("@plt>:")?;
                    Some((u64::from_str_radix(addr, 16).ok()?, name.to_string()))
                })
                .collect();
            want.sort();
            let got: Vec<(u64, String)> = plt_stubs(&std::fs::read(&exe).unwrap())
                .iter()
                .map(|s| (s.start, s.raw_name.clone()))
                .collect();
            assert!(
                want.iter().any(|(_, n)| n == "strlen"),
                "{flags:?}: {want:?}"
            );
            assert_eq!(got, want, "{flags:?}");
            // Every byte of a stub is named by it; the byte before the first is not.
            let plt = plt_stubs(&std::fs::read(&exe).unwrap());
            for s in &plt {
                assert_eq!(plt_stub(&plt, s.start + s.size - 1), Some(s));
            }
            assert_eq!(plt_stub(&plt, plt[0].start - 1), None);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn preloaded_files_name_addresses_as_a_symbolizer_does() {
        // This process: the test binary and the C library, at addresses in their code.
        let maps = Mapping::parse_proc_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let code = |name: &str| {
            maps.iter()
                .find(|m| m.perms.contains('x') && m.path.ends_with(name))
                .map(|m| m.start + (m.end - m.start) / 2)
        };
        let exe = std::env::current_exe().unwrap();
        let exe_name = exe.file_name().unwrap().to_str().unwrap().to_string();
        let ips: Vec<u64> = [code(&exe_name), code("libc.so.6"), Some(8)]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(ips.len(), 3, "{maps:?}");
        // (Address 8 is in no mapping: JIT-compiled code, as a perf map names it.)
        let jit = JitSymbol::parse_perf_map("8 1 jit_code_at_8\n");
        let mut sym = Symbolizer::new(maps.clone());
        sym.add_jit_symbols(&jit);
        let want: Vec<SourceLocation> = ips.iter().map(|&ip| sym.resolve(ip)).collect();
        assert!(want[1].function.is_some(), "{want:?}");
        assert_eq!(want[2].function.as_deref(), Some("jit_code_at_8"));
        let files = {
            let exe = exe.clone();
            move || {
                let mut f = program_objects(&exe);
                f.push(
                    std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6")
                        .unwrap()
                        .display()
                        .to_string(),
                );
                f
            }
        };
        // Loaded ahead of the request, or asked before loading ends, or by a thread that died:
        // the same answers.
        let ahead = Preloaded::start(files.clone());
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(ahead.resolve(maps.clone(), jit.clone(), ips.clone()), want);
        assert_eq!(
            Preloaded::start(files).resolve(maps.clone(), jit.clone(), ips.clone()),
            want
        );
        let died = Preloaded::start(|| -> Vec<String> { panic!("a preloading thread that dies") });
        assert_eq!(died.resolve(maps.clone(), jit.clone(), ips.clone()), want);
        // Busy with a file none of the addresses needs (libc, for an address in this binary):
        // answered here or there, the same.
        let libc_only = || {
            vec![std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6")
                .unwrap()
                .display()
                .to_string()]
        };
        assert_eq!(
            Preloaded::start(libc_only).resolve(maps, jit, ips[..1].to_vec()),
            want[..1]
        );
    }

    #[test]
    fn mappings_added_later_are_used() {
        let exe = std::env::current_exe().unwrap();
        let mut sym = Symbolizer::new(Vec::new());
        assert_eq!(sym.resolve(0x7000_0100).object, None);
        sym.add_mappings(&[Mapping {
            start: 0x7000_0000,
            end: 0x7000_1000,
            offset: 0,
            path: exe.display().to_string(),
            perms: "r-xp".into(),
        }]);
        let loc = sym.resolve(0x7000_0100);
        assert_eq!(loc.object, Some(exe.display().to_string()));
        assert_eq!(sym.link_address(0x7000_0100), Some(0x100));
        assert_eq!(loc.link_addr, Some(0x100));
    }

    /// Code where no file is mapped: named by a runtime's perf map, else "anonymous code";
    /// and an executable mapping says what is at an address over an older read-only one (a
    /// ptrace capture's first snapshot had ld.so.cache where a program later wrote code).
    #[test]
    fn jit_code_is_named_by_its_perf_map_or_called_anonymous() {
        let map = |start: u64, end: u64, path: &str, perms: &str| Mapping {
            start,
            end,
            offset: 0,
            path: path.into(),
            perms: perms.into(),
        };
        let mut sym = Symbolizer::new(vec![
            map(0x7f00_0000, 0x7f00_b000, "/etc/ld.so.cache", "r--p"),
            map(0x7f00_a000, 0x7f00_b000, "", "r-xp"),
            map(0x7f10_0000, 0x7f10_1000, "", "rw-p"),
        ]);
        let anon = sym.resolve(0x7f00_a004);
        assert_eq!(anon.object.as_deref(), Some(ANONYMOUS_CODE));
        assert_eq!(anon.describe(), "?? [anonymous code]");
        assert_eq!(sym.resolve(0x7f10_0010).describe(), "?? [anonymous code]");
        // Outside every mapping: nothing known.
        assert_eq!(sym.resolve(0x1234).object, None);
        // The read-only file still names its own bytes.
        assert_eq!(
            sym.resolve(0x7f00_0100).object.as_deref(),
            Some("/etc/ld.so.cache")
        );
        sym.add_jit_symbols(&JitSymbol::parse_perf_map(
            "7f00a000 15 jit_gather_loop\n7f100000 8 JS:* /tmp/g.js:1:1\n",
        ));
        let named = sym.resolve(0x7f00_a004);
        assert_eq!(named.function.as_deref(), Some("jit_gather_loop"));
        assert_eq!(named.describe(), "jit_gather_loop [jit]");
        assert_eq!(named.function_or_object(), "jit_gather_loop");
        assert_eq!(
            sym.resolve(0x7f10_0007).describe(),
            "JS:* /tmp/g.js:1:1 [jit]"
        );
        // Past the symbol's size: anonymous again.
        assert_eq!(sym.resolve(0x7f00_a015).describe(), "?? [anonymous code]");

        // Shared anonymous memory has a pseudo-file's name in the maps (PHP's JIT buffer,
        // `/dev/zero (deleted)`; a double-mapping JIT's memfd): anonymous code all the same,
        // which the perf map names.
        let mut sym = Symbolizer::new(vec![
            map(0x3ffc_0000, 0x3ffd_0000, "/dev/zero (deleted)", "rwxs"),
            map(0x3ffe_0000, 0x3fff_0000, "/memfd:jit (deleted)", "r-xs"),
            map(0x4000_0000, 0x4001_0000, "/SYSV00000000 (deleted)", "r-xs"),
        ]);
        for at in [0x3ffc_0a10, 0x3ffe_0010, 0x4000_0010] {
            assert_eq!(sym.resolve(at).describe(), "?? [anonymous code]", "{at:#x}");
        }
        sym.add_jit_symbols(&JitSymbol::parse_perf_map(
            "3ffc0a00 200 TRACE-1$/tmp/t.php$6\n3ffe0000 40 jit_loop\n",
        ));
        assert_eq!(
            sym.resolve(0x3ffc_0a10).describe(),
            "TRACE-1$/tmp/t.php$6 [jit]"
        );
        assert_eq!(sym.resolve(0x3ffe_0010).describe(), "jit_loop [jit]");
    }

    #[test]
    fn cpp_functions_answer_to_the_names_a_programmer_uses() {
        fn names(d: &str) -> Vec<&str> {
            call_names(d).collect()
        }
        let f = "double k::gather<double>(std::vector<double, std::allocator<double> > const&, \
                 std::vector<unsigned int, std::allocator<unsigned int> > const&)";
        assert_eq!(
            names(f),
            ["k::gather<double>", "k::gather", "gather<double>", "gather"]
        );
        // Template arguments with spaces and parentheses, a method, a C function.
        assert_eq!(
            names("std::vector<int, std::allocator<int> >::push_back(int const&)"),
            [
                "std::vector<int, std::allocator<int> >::push_back",
                "std::vector<int, std::allocator<int> >::push_back",
                "push_back",
                "push_back"
            ]
        );
        assert_eq!(
            names("void ns::apply<void (*)(int)>(void (*)(int))"),
            [
                "ns::apply<void (*)(int)>",
                "ns::apply",
                "apply<void (*)(int)>",
                "apply"
            ]
        );
        assert_eq!(names("gather_sum"), ["gather_sum"; 4]);
    }

    #[test]
    fn demangles_only_mangled_names() {
        // Bare type codes of the C++ mangling: C functions may be named so.
        for c in ["h", "i", "c", "v", "main", "Sa"] {
            assert_eq!(demangle(c), c);
        }
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(
            demangle("pthread_mutex_lock@@GLIBC_2.2.5"),
            "pthread_mutex_lock"
        );
        assert_eq!(demangle("memcpy@GLIBC_2.2.5"), "memcpy");
        assert!(demangle("_ZN4core3fmt5write17h0123456789abcdefE").starts_with("core::fmt::write"));
    }

    #[test]
    fn fortran_names_read_as_gdb_reads_them() {
        assert_eq!(demangle("__kernels_MOD_spmv"), "kernels::spmv");
        assert_eq!(demangle("__my_mod_MOD_do_it"), "my_mod::do_it");
        assert_eq!(
            demangle("__kernels_MOD_spmv._omp_fn.0"),
            "kernels::spmv._omp_fn.0"
        );
        assert_eq!(demangle("_QMkernelsPspmv"), "kernels::spmv");
        assert_eq!(demangle("_QPaxpy"), "axpy");
        // Not Fortran: left alone.
        for n in [
            "__libc_start_main",
            "__x_MOD_",
            "_QQmain",
            "_QMKernelsPspmv",
            "MAIN__",
        ] {
            assert_eq!(demangle(n), n);
        }
    }

    #[test]
    fn a_symbol_is_named_when_asked_and_equals_itself_either_way() {
        let a = FunctionSymbol::new("_ZN1k6gatherEv".into(), 0x10, 4);
        let b = a.clone();
        assert_eq!(a.name(), "k::gather()");
        assert_eq!(a, b);
        assert_ne!(a, FunctionSymbol::new("_ZN1k6gatherEv".into(), 0x10, 8));
    }

    #[test]
    fn compiler_clones_are_told_from_their_function() {
        assert_eq!(clone_base("gather.constprop.0"), ("gather", false));
        assert_eq!(clone_base("gather.isra.0.cold"), ("gather", true));
        assert_eq!(clone_base("gather.cold"), ("gather", true));
        assert_eq!(clone_base("spmv._omp_fn.1"), ("spmv", false));
        assert_eq!(clone_base("f.llvm.1234567"), ("f", false));
        assert_eq!(clone_base("gather"), ("gather", false));
        // Dots that are not a clone's suffix stay (a local label, a leading dot).
        assert_eq!(clone_base("a.b"), ("a.b", false));
        assert_eq!(clone_base(".cold"), (".cold", false));
        let f = |raw: &str| FunctionSymbol::new(raw.to_string(), 0, 1);
        assert!(answers_to(&f("gather.constprop.0"), "gather"));
        assert!(answers_to(&f("__kernels_MOD_spmv._omp_fn.0"), "spmv"));
        assert!(answers_to(
            &f("__kernels_MOD_spmv._omp_fn.0"),
            "kernels::spmv"
        ));
        assert!(answers_to(
            &f("_ZN1k6gatherIdEEdPKdPKim.constprop.0"),
            "k::gather"
        ));
        assert!(!answers_to(&f("gatherer"), "gather"));
    }

    #[test]
    fn opens_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let img = ElfImage::open(&exe).unwrap();
        assert!(!img.functions.is_empty());
        assert!(img.entry != 0);
        let e = img.find_function("no_such_function_anywhere").unwrap_err();
        assert!(e.to_string().contains("no function named"));
        // A function of a shared library it loads.
        assert!(
            img.imports.iter().any(|i| i == "malloc"),
            "{:?}",
            img.imports
        );
        let e = img.find_code("malloc").unwrap_err().to_string();
        assert!(e.contains("in a shared library"), "{e}");
    }

    #[test]
    fn rejects_non_elf() {
        let dir = std::env::temp_dir().join(format!("mgb-sym-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let e = ElfImage::open(&script).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("script"), "{e}");
    }

    /// The C library, stripped as Debian ships it, is read with its debug file from `libc6-dbg`
    /// (found by build ID under /usr/lib/debug; scripts/setup.sh installs it):
    /// an internal function that its dynamic symbols leave out gets its name and line.
    #[test]
    fn the_c_library_is_named_from_its_debug_package() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let data = std::fs::read(libc).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let Some(debug) = debug_file(libc, &file) else {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "no debug file for {}: scripts/setup.sh installs libc6-dbg",
                    libc.display()
                );
            }
            eprintln!(
                "skipped: no debug file for {} (apt-get install libc6-dbg)",
                libc.display()
            );
            return;
        };
        assert!(
            debug.starts_with("/usr/lib/debug/.build-id/"),
            "{}",
            debug.display()
        );
        let debug_data = std::fs::read(&debug).unwrap();
        let dbg = object::File::parse(&*debug_data).unwrap();
        let int_free = dbg
            .symbols()
            .find(|s| s.name() == Ok("_int_free"))
            .expect("_int_free in the debug file")
            .address();
        assert!(file.dynamic_symbols().all(|s| s.name() != Ok("_int_free")));
        // libc mapped whole at 0x10000000 (its code's file offsets equal its addresses).
        let map = Mapping {
            start: 0x1000_0000,
            end: 0x1000_0000 + data.len() as u64,
            offset: 0,
            path: libc.display().to_string(),
            perms: "r-xp".into(),
        };
        let loc = Symbolizer::new(vec![map]).resolve(0x1000_0000 + int_free + 4);
        assert_eq!(loc.function.as_deref(), Some("_int_free"), "{loc:?}");
        assert!(loc.file.is_some_and(|f| f.ends_with("malloc.c")));
    }
}
