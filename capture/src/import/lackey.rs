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
    for (n, line) in input.lines().enumerate() {
        let line_no = n as u64 + 1;
        let line = line.map_err(ImportError::Io)?;
        if line.trim().is_empty() {
            continue;
        }
        if is_valgrind_message(&line) {
            b.ignore("Valgrind message lines");
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
