//! Valgrind lackey `--trace-mem=yes` text (see the module docs of `import`).

use std::io::{BufRead, Write};

use super::{ChunkBuilder, ImportError, ImportSummary};
use crate::trace::{Access, AccessKind, TraceWriter};

fn parse_pair(s: &str, line: u64) -> Result<(u64, u8), ImportError> {
    let bad = || ImportError::Parse {
        line,
        what: format!("expected `hexaddr,size`, found {s:?}"),
    };
    let (a, n) = s.trim().split_once(',').ok_or_else(bad)?;
    let addr = u64::from_str_radix(a.trim(), 16).map_err(|_| bad())?;
    let size: u64 = n.trim().parse().map_err(|_| bad())?;
    Ok((addr, u8::try_from(size).unwrap_or(u8::MAX)))
}

/// Valgrind's own lines: `==PID== text` (the tool's messages), `--PID-- text` (warnings,
/// debug output) and `**PID** text` (fatal messages).
fn is_valgrind_message(line: &str) -> bool {
    let b = line.as_bytes();
    let Some(&mark) = b.first() else {
        return false;
    };
    if !matches!(mark, b'=' | b'-' | b'*') || b.get(1) != Some(&mark) {
        return false;
    }
    let rest = &b[2..];
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && rest.get(digits) == Some(&mark) && rest.get(digits + 1) == Some(&mark)
}

/// The one unmarked line `valgrind -v -v` writes: a dump of unwind information after a
/// `--PID-- summarise_context(...)` message, `0x30a: [0]={ 56(r3) { u  u  c-56 ... }`.
fn is_unwind_dump(line: &str) -> bool {
    line.strip_prefix("0x")
        .and_then(|r| r.split_once(": ["))
        .is_some_and(|(hex, rest)| {
            !hex.is_empty()
                && hex.bytes().all(|c| c.is_ascii_hexdigit())
                && rest
                    .split_once("]={")
                    .is_some_and(|(n, _)| n.bytes().all(|c| c.is_ascii_digit()))
        })
}

/// The text of a Valgrind message line after its `--PID--` mark.
fn message_text(line: &str) -> &str {
    line.get(2..)
        .and_then(|r| r.find(|c: char| !c.is_ascii_digit()).map(|k| &r[k + 2..]))
        .unwrap_or("")
}

/// `svma 0x0000003760, avma 0x000010b760`, which `valgrind -v -v` prints after `Reading syms
/// from FILE`: a symbol's link address and where it was loaded.
fn parse_svma(text: &str) -> Option<(u64, u64)> {
    let (s, a) = text.trim().strip_prefix("svma ")?.split_once(", avma ")?;
    let hex = |v: &str| u64::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok();
    Some((hex(s)?, hex(a)?))
}

/// Where Valgrind loaded the files it read symbols from: `valgrind -v -v` logs `Reading syms
/// from FILE` and then `svma X, avma Y` (the same symbol's link and load address); each file
/// found becomes mappings in the trace, so that its code is named.
#[derive(Default)]
struct LoadLog {
    reading: Option<String>,
}

impl LoadLog {
    fn message<W: Write>(
        &mut self,
        text: &str,
        b: &mut ChunkBuilder,
        w: &mut TraceWriter<W>,
    ) -> Result<(), ImportError> {
        if let Some(path) = text.trim().strip_prefix("Reading syms from ") {
            self.reading = Some(path.trim().to_string());
            return Ok(());
        }
        let (Some((svma, avma)), Some(path)) = (parse_svma(text), self.reading.take()) else {
            return Ok(());
        };
        match super::ElfLoad::read(std::path::Path::new(&path)) {
            Ok(elf) => {
                let start = elf.first_page.wrapping_add(avma.wrapping_sub(svma));
                w.write_mappings(&elf.mappings(start))
                    .map_err(ImportError::Write)?;
                b.summary.located.push(path);
            }
            Err(why) => b.summary.unreadable.push((path, why)),
        }
        Ok(())
    }
}

/// Imports lackey output as Valgrind writes it: its header and summary (`==PID==`), warnings
/// (`--PID--`), `SB addr` superblock lines (`--trace-superblocks=yes`) and the `I`, ` L`,
/// ` S`, ` M` records. Any other line is an error naming its number (a program's own output
/// mixed into the log, for example: rerun with `--log-file=FILE`).
pub fn import_lackey<W: Write>(
    input: impl BufRead,
    w: &mut TraceWriter<W>,
) -> Result<ImportSummary, ImportError> {
    let mut b = ChunkBuilder::new();
    let mut ip = 0u64;
    let mut loads = LoadLog::default();
    for (n, line) in input.lines().enumerate() {
        let line_no = n as u64 + 1;
        let line = line.map_err(ImportError::Io)?;
        if line.trim().is_empty() {
            continue;
        }
        if is_valgrind_message(&line) {
            b.ignore("Valgrind message lines");
            loads.message(message_text(&line), &mut b, w)?;
            continue;
        }
        if is_unwind_dump(&line) {
            b.ignore("Valgrind unwind-info dump lines (-v -v)");
            continue;
        }
        if let Some(rest) = line.strip_prefix("SB ") {
            u64::from_str_radix(rest.trim(), 16).map_err(|_| ImportError::Parse {
                line: line_no,
                what: format!("expected `SB hexaddr`, found {line:?}"),
            })?;
            b.ignore("superblock (SB) lines");
            continue;
        }
        let (tag, rest) = match line.get(..2) {
            Some(t) => (t, &line[2..]),
            None => {
                return Err(ImportError::Parse {
                    line: line_no,
                    what: format!("unrecognised line {line:?}"),
                })
            }
        };
        match tag {
            "I " => ip = parse_pair(rest, line_no)?.0,
            " L" | " S" | " M" => {
                let (addr, size) = parse_pair(rest, line_no)?;
                let mut push = |kind| {
                    b.push(
                        0,
                        Access {
                            ip,
                            addr,
                            size,
                            kind,
                        },
                        w,
                    )
                };
                match tag {
                    " L" => push(AccessKind::Load)?,
                    " S" => push(AccessKind::Store)?,
                    _ => {
                        push(AccessKind::Load)?;
                        push(AccessKind::Store)?;
                    }
                }
            }
            _ => {
                return Err(ImportError::Parse {
                    line: line_no,
                    what: format!(
                        "unrecognised line {line:?}: expected lackey's `I`, ` L`, ` S`, ` M` or \
                         `SB` records, or Valgrind's `==PID==` lines (if the program's own output \
                         is mixed in, rerun valgrind with --log-file=FILE)"
                    ),
                })
            }
        }
    }
    b.finish(w)
}
