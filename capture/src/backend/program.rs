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

/// AVX-512 (EVEX-encoded) instructions in the executable sections of `path` (the program
/// itself, not the libraries it loads: those pick their AVX-512 code at run time from the
/// CPU's features, which QEMU reports without AVX-512).
pub fn evex_instructions(path: &Path) -> usize {
    use object::{Object, ObjectSection, SectionKind};
    let Ok(data) = std::fs::read(path) else {
        return 0;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return 0;
    };
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .map(|(addr, code)| super::x86::count_evex(code, addr))
        .sum()
}

/// Whether this CPU runs AVX-512 (avx512f in /proc/cpuinfo).
pub fn host_has_avx512() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|t| {
        t.lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|f| f == "avx512f"))
    })
}
