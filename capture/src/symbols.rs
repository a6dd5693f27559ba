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

use object::read::ReadCache;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::trace::Mapping;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// Demangled name.
    pub name: String,
    /// Name as stored in the symbol table.
    pub raw_name: String,
    pub start: u64,
    pub size: u64,
}

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
}

/// A symbol's readable name: Rust and C++ names demangled, anything else as it is, without a
/// symbol version (`pthread_mutex_lock@@GLIBC_2.2.5` in a debug file's table). Only names
/// with a mangling prefix (`_Z`, `_R`) are demangled: a demangler also reads bare type codes,
/// so a C function named `h` or `i` would come out as "unsigned char" or "int".
pub fn demangle(name: &str) -> String {
    let name = match name.find('@') {
        Some(at) if at > 0 => &name[..at],
        _ => name,
    };
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return name.to_string();
    }
    addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
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
        // A stripped program's full symbol table may be in a separate debug file.
        let stripped = file.symbols().next().is_none();
        // (Read as needed: a debug file may be far larger than the symbol table wanted here.)
        let debug_cache = stripped
            .then(|| debug_file(path, &file))
            .flatten()
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
        functions.sort_by(|a, b| (a.start, &a.raw_name).cmp(&(b.start, &b.raw_name)));
        functions.dedup_by(|a, b| a.start == b.start && a.raw_name == b.raw_name);
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
        })
    }

    /// Functions named `name`: demangled or raw, or as a C++ programmer names one, as gdb
    /// takes it (see [`call_names`]: `k::gather` is every `k::gather<T>(...)`).
    pub fn find_function(&self, name: &str) -> Result<Vec<&FunctionSymbol>, SymbolError> {
        let hits: Vec<&FunctionSymbol> = self
            .functions
            .iter()
            .filter(|f| {
                f.name == name || f.raw_name == name || call_names(&f.name).any(|n| n == name)
            })
            .collect();
        if !hits.is_empty() {
            return Ok(hits);
        }
        Err(SymbolError::UnknownFunction {
            name: name.to_string(),
            path: self.path.clone(),
            close: close_matches(name, self.functions.iter().map(|f| f.name.as_str())),
        })
    }
}

/// The names a demangled function name answers to, besides itself: without its parameters
/// and return type (`double k::gather<double>(std::vector<...> const&)` is
/// `k::gather<double>`), without its template arguments (`k::gather`), and its last
/// component alone (`gather<double>`, `gather`). Brackets nest: `<...>` and `(...)` inside
/// template arguments do not cut.
pub fn call_names(demangled: &str) -> impl Iterator<Item = &str> {
    // Outside any <...> or (...): the first '(' ends the name, the last ' ' before it starts it.
    let (mut depth, mut start, mut end) = (0i32, 0usize, demangled.len());
    for (i, ch) in demangled.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => {
                end = i;
                break;
            }
            ' ' if depth == 0 => start = i + 1,
            _ => {}
        }
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
    Some(FunctionSymbol {
        name: demangle(&raw),
        raw_name: raw,
        start: s.address(),
        size: s.size(),
    })
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
}

impl SourceLocation {
    /// The function's name; where it is unknown, "?? [object]" (the file it lies in, so that
    /// unnamed code of one library stays apart from another's), or "??".
    pub fn function_or_object(&self) -> String {
        match (&self.function, &self.object) {
            (Some(f), _) => f.clone(),
            (None, Some(o)) => format!("?? [{}]", short_path(o)),
            (None, None) => "??".into(),
        }
    }

    /// "function (file:line)" or what is known of it.
    pub fn describe(&self) -> String {
        let func = self.function.as_deref().unwrap_or("??");
        match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{func} ({}:{l})", short_path(f)),
            (Some(f), None) => format!("{func} ({})", short_path(f)),
            _ => match &self.object {
                Some(o) => format!("{func} [{}]", short_path(o)),
                None => func.to_string(),
            },
        }
    }
}

/// The last component of a path: a file's name.
pub fn short_path(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

struct LoadedObject {
    loader: addr2line::Loader,
    /// (file offset, file size, vaddr) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
}

/// Resolves instruction addresses of a traced process; caches per address and per file.
pub struct Symbolizer {
    mappings: Vec<Mapping>,
    objects: HashMap<String, Option<LoadedObject>>,
    cache: HashMap<u64, SourceLocation>,
}

impl Symbolizer {
    pub fn new(mut mappings: Vec<Mapping>) -> Symbolizer {
        mappings.sort_by_key(|m| (m.start, m.end));
        mappings.dedup();
        Symbolizer {
            mappings,
            objects: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    /// Adds mappings that a trace lists later (a mappings frame), keeping the files loaded.
    pub fn add_mappings(&mut self, more: &[Mapping]) {
        self.mappings.extend_from_slice(more);
        self.mappings.sort_by_key(|m| (m.start, m.end));
        self.mappings.dedup();
        // An address resolved before may lie in one of them.
        self.cache.clear();
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
    fn mapping_of(&self, ip: u64) -> Option<&Mapping> {
        self.mappings
            .iter()
            .rev()
            .find(|m| ip >= m.start && ip < m.end && !m.path.is_empty())
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
            return SourceLocation::default();
        };
        // ([heap], [stack], [vdso]... have no file to read.)
        let mut loc = SourceLocation {
            object: Some(m.path.clone()),
            ..SourceLocation::default()
        };
        let Some((obj, elf_addr)) = self.object_at(ip) else {
            return loc;
        };
        loc.function = obj.loader.find_symbol(elf_addr).map(demangle);
        if let Ok(Some(l)) = obj.loader.find_location(elf_addr) {
            loc.file = l.file.map(str::to_string);
            loc.line = l.line;
        }
        loc
    }
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
    let loader = debug_file(path, &file)
        .and_then(|d| addr2line::Loader::new(d).ok())
        .or_else(|| addr2line::Loader::new(path).ok())?;
    Some(LoadedObject { loader, segments })
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
    fn opens_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let img = ElfImage::open(&exe).unwrap();
        assert!(!img.functions.is_empty());
        assert!(img.entry != 0);
        let e = img.find_function("no_such_function_anywhere").unwrap_err();
        assert!(e.to_string().contains("no function named"));
    }

    #[test]
    fn rejects_non_elf() {
        let dir = std::env::temp_dir().join(format!("mgb-sym-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let e = ElfImage::open(&script).unwrap_err().to_string();
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
